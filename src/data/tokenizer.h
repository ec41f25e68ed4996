// Word-level tokenizer of the grammar corpus.
//
// Text is lowercased and split into words and punctuation tokens ("Yesterday, I walked." ->
// yesterday , i walked .). Ids 0..3 are the special tokens <pad> <bos> <eos> <unk>; every
// other id is a word of the vocabulary, which travels inside the model file. Unknown words
// map to <unk> and are reported so the CLI can warn about them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace minigpt {

class Tokenizer {
 public:
  static constexpr int32_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;

  // Throws Error if the specials are not at ids 0..3, a token repeats, or a token is empty.
  explicit Tokenizer(std::vector<std::string> vocab);

  // Lowercased words and punctuation tokens, in order.
  static std::vector<std::string> split(std::string_view text);

  struct Encoded {
    std::vector<int32_t> ids;
    std::vector<std::string> unknown;  // words that became <unk>, in order of appearance
  };
  Encoded encode(std::string_view text) const;        // no <bos>/<eos> added
  std::string decode(std::span<const int32_t> ids) const;  // words joined with spaces; Error on an id out of range

  int32_t id(std::string_view token) const;          // kUnk when absent
  const std::string& token(int32_t id) const;        // Error when out of range
  int32_t size() const { return static_cast<int32_t>(vocab_.size()); }
  const std::vector<std::string>& vocab() const { return vocab_; }

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> index_;
};

}  // namespace minigpt
