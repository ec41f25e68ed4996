// The grammar corpus: seeded sentence generation, its vocabulary, and the token stream the
// trainer cuts windows from.
//
// What it defines: CorpusGenerator (sentences from data/grammar.h, deterministic for a seed on
// every platform), corpus_vocabulary(), and corpus_token_stream().
// What it does not do: batching or windows (train/batcher.h), file output (cli/cmd_corpus.cpp).
//
// Randomness: std::mt19937_64 (its output sequence is fixed by the C++ standard) mapped to a
// weighted choice by our own integer arithmetic: r = next() % sum(weights), then the first
// index whose running sum exceeds r. std::uniform_int_distribution is not used: its output
// differs between standard libraries. The modulo bias is below sum / 2^64 (sums here are
// < 2^20), invisible in any corpus we generate.
//
// Token stream format (corpus_token_stream): sentences back to back, each as
//   <bos> w1 w2 ... wn <eos>        (wn is "." or "?")
// e.g. for "yesterday i walked home ." and "does she swim ?":
//   1 id(yesterday) id(i) id(walked) id(home) id(.) 2 1 id(does) id(she) id(swim) id(?) 2
// No <pad> and no <unk> ever appear. Sentences are appended whole until the stream holds at
// least min_tokens ids, so the stream for a seed is a prefix of every longer stream for that
// seed. Sentences are 4 to ~20 words; a window of T = 16..64 spans one to several sentences.
#pragma once

#include "data/grammar.h"
#include "data/tokenizer.h"

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace minigpt::data {

class CorpusGenerator {
 public:
  explicit CorpusGenerator(uint64_t seed);

  // The next sentence as words (views into static tables, valid for the program's life).
  std::vector<std::string_view> next_words();
  // The next sentence as text: words joined by single spaces ("yesterday i walked home .").
  // This is the canonical form: Tokenizer::encode then decode gives it back unchanged.
  std::string next_text();
  // Appends <bos> ids <eos> of the next sentence to out. Error if a word is not in the
  // tokenizer's vocabulary (a tokenizer built from another vocabulary).
  void append_ids(const Tokenizer& tokenizer, std::vector<int32_t>& out);

  const Grammar& grammar() const { return grammar_; }

 private:
  Grammar grammar_;
  std::mt19937_64 rng_;
};

// <pad> <bos> <eos> <unk>, then every word the grammar can emit, sorted (Grammar::vocabulary).
std::vector<std::string> corpus_vocabulary();

// Whole sentences from CorpusGenerator(seed), in the format above, until >= min_tokens ids.
std::vector<int32_t> corpus_token_stream(uint64_t seed, int64_t min_tokens, const Tokenizer& tokenizer);

}  // namespace minigpt::data
