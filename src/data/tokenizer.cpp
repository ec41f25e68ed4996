// Tokenizer (see tokenizer.h). The splitting rules, in order, for each byte of the text:
//   - ASCII whitespace separates tokens;
//   - "<pad>" "<bos>" "<eos>" "<unk>" (any case) are tokens of their own, so decode's output
//     of special ids encodes back to the same ids;
//   - letters, digits and any non-ASCII byte (UTF-8 of "café") form words; ASCII letters are
//     lowercased;
//   - an apostrophe between a word character and a letter belongs to the word: contractions
//     are single words ("don't", "won't", "isn't", "mary's"), as in the grammar's vocabulary;
//     any other apostrophe is a "'" token ("'hello'" -> ' hello ');
//   - every other ASCII character (. , ? ! ; : - " ...) is a one-character token.
#include "data/tokenizer.h"

#include "core/error.h"

#include <array>
#include <cctype>

namespace minigpt {

namespace {

constexpr std::array<std::string_view, 4> kSpecials = {"<pad>", "<bos>", "<eos>", "<unk>"};

bool is_word_byte(unsigned char c) { return std::isalnum(c) || c >= 0x80; }
bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
char lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : static_cast<char>(c); }

// Length of a special token starting at text[i] (case-insensitive), 0 if none.
size_t special_at(std::string_view text, size_t i) {
  for (std::string_view s : kSpecials) {
    if (text.size() - i < s.size()) continue;
    bool match = true;
    for (size_t k = 0; k < s.size() && match; ++k) match = lower(static_cast<unsigned char>(text[i + k])) == s[k];
    if (match) return s.size();
  }
  return 0;
}

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> vocab) : vocab_(std::move(vocab)) {
  MINIGPT_CHECK(vocab_.size() >= kSpecials.size(), "tokenizer: vocabulary of {} tokens is smaller than the 4 specials",
                vocab_.size());
  for (size_t i = 0; i < kSpecials.size(); ++i)
    MINIGPT_CHECK(vocab_[i] == kSpecials[i], "tokenizer: id {} must be '{}', got '{}'", i, kSpecials[i], vocab_[i]);
  index_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) {
    MINIGPT_CHECK(!vocab_[i].empty(), "tokenizer: token {} is empty", i);
    const auto [it, inserted] = index_.emplace(vocab_[i], static_cast<int32_t>(i));
    MINIGPT_CHECK(inserted, "tokenizer: token '{}' appears twice (ids {} and {})", vocab_[i], it->second, i);
  }
}

std::vector<std::string> Tokenizer::split(std::string_view text) {
  std::vector<std::string> tokens;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) tokens.push_back(std::move(word));
    word.clear();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (is_space(c)) {
      flush();
    } else if (c == '<' && special_at(text, i) > 0) {
      flush();
      const size_t n = special_at(text, i);
      std::string s;
      for (size_t k = 0; k < n; ++k) s += lower(static_cast<unsigned char>(text[i + k]));
      tokens.push_back(std::move(s));
      i += n - 1;
    } else if (is_word_byte(c)) {
      word += lower(c);
    } else if (c == '\'' && !word.empty() && i + 1 < text.size() &&
               std::isalpha(static_cast<unsigned char>(text[i + 1]))) {
      word += '\'';
    } else {
      flush();
      tokens.emplace_back(1, static_cast<char>(c));
    }
  }
  flush();
  return tokens;
}

Tokenizer::Encoded Tokenizer::encode(std::string_view text) const {
  Encoded out;
  for (std::string& tok : split(text)) {
    const int32_t i = id(tok);
    if (i == kUnk && tok != kSpecials[kUnk]) out.unknown.push_back(std::move(tok));
    out.ids.push_back(i);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t i : ids) {
    if (!text.empty()) text += ' ';
    text += token(i);
  }
  return text;
}

int32_t Tokenizer::id(std::string_view tok) const {
  const auto it = index_.find(std::string(tok));
  return it == index_.end() ? kUnk : it->second;
}

const std::string& Tokenizer::token(int32_t i) const {
  MINIGPT_CHECK(i >= 0 && i < size(), "token id {} is out of range for a vocabulary of {} tokens", i, size());
  return vocab_[static_cast<size_t>(i)];
}

}  // namespace minigpt
