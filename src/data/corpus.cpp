// CorpusGenerator and the training token stream (see corpus.h for the format and the RNG).
#include "data/corpus.h"

#include "core/error.h"

namespace minigpt::data {

namespace {

// Weighted choice from std::mt19937_64 with portable integer arithmetic (see corpus.h).
class RandomChooser final : public Chooser {
 public:
  explicit RandomChooser(std::mt19937_64& rng) : rng_(rng) {}
  size_t choose(std::span<const uint32_t> weights) override {
    uint64_t total = 0;
    for (uint32_t w : weights) total += w;
    MINIGPT_CHECK(total > 0, "grammar: a choice with all weights zero ({} options)", weights.size());
    uint64_t r = rng_() % total;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (r < weights[i]) return i;
      r -= weights[i];
    }
    return weights.size() - 1;  // unreachable: r < total
  }

 private:
  std::mt19937_64& rng_;
};

class VectorSink final : public WordSink {
 public:
  explicit VectorSink(std::vector<std::string_view>& out) : out_(out) {}
  void word(std::string_view w) override { out_.push_back(w); }

 private:
  std::vector<std::string_view>& out_;
};

}  // namespace

CorpusGenerator::CorpusGenerator(uint64_t seed) : rng_(seed) {}

std::vector<std::string_view> CorpusGenerator::next_words() {
  std::vector<std::string_view> words;
  RandomChooser chooser(rng_);
  VectorSink sink(words);
  grammar_.generate(chooser, sink);
  return words;
}

std::string CorpusGenerator::next_text() {
  std::string text;
  for (std::string_view w : next_words()) {
    if (!text.empty()) text += ' ';
    text += w;
  }
  return text;
}

void CorpusGenerator::append_ids(const Tokenizer& tokenizer, std::vector<int32_t>& out) {
  out.push_back(Tokenizer::kBos);
  for (std::string_view w : next_words()) {
    const int32_t id = tokenizer.id(w);
    MINIGPT_CHECK(id != Tokenizer::kUnk, "corpus word '{}' is not in the tokenizer's vocabulary of {} tokens",
                  w, tokenizer.size());
    out.push_back(id);
  }
  out.push_back(Tokenizer::kEos);
}

std::vector<std::string> corpus_vocabulary() { return Grammar().vocabulary(); }

std::vector<int32_t> corpus_token_stream(uint64_t seed, int64_t min_tokens, const Tokenizer& tokenizer) {
  MINIGPT_CHECK(min_tokens >= 0, "corpus_token_stream: min_tokens must be >= 0, got {}", min_tokens);
  CorpusGenerator gen(seed);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(min_tokens) + 32);
  while (static_cast<int64_t>(out.size()) < min_tokens) gen.append_ids(tokenizer, out);
  return out;
}

}  // namespace minigpt::data
