// Grammar probes: prompts whose next word must belong to a grammatical class, and their score.
//
// File format (tests/probes/*.tsv): UTF-8 text, one probe per line, three fields separated by
// single tabs:
//   category<TAB>prompt<TAB>class
//   past	yesterday i	verb_past
// Blank lines and lines starting with '#' are ignored. category is [a-z0-9_]+ (the report
// groups by it); prompt is the start of a sentence in any case and spacing (the tokenizer
// normalises it); class is a Grammar::word_class name (verb_past, verb_3sg, ...).
// What a probe asks of a model: feed <bos> + encode(prompt) and take the argmax of the logits
// at the last position; it is correct if that token is in the class.
// What this file does not do: run a model (the CLI's eval-probes does, through a callback).
#pragma once

#include "data/grammar.h"
#include "data/tokenizer.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace minigpt::data {

struct Probe {
  std::string category;
  std::string prompt;
  std::string word_class;
  int line = 0;  // 1-based line in its file, for messages
};

// Parses the format above; Error naming source:line for a malformed line or an unknown class.
std::vector<Probe> parse_probes(std::string_view text, const std::string& source);
std::vector<Probe> load_probes(const std::string& path);

// <bos> + encode(prompt). Error naming the probe and the words missing from the vocabulary.
std::vector<int32_t> probe_input_ids(const Probe& probe, const Tokenizer& tokenizer);

// Token ids of a class's words (sorted). Error naming the words missing from the vocabulary.
std::vector<int32_t> class_ids(const Grammar& grammar, std::string_view word_class, const Tokenizer& tokenizer);

struct ProbeOutcome {
  const Probe* probe;
  int32_t predicted;
  bool correct;
};

struct CategoryScore {
  std::string category;
  int correct = 0;
  int total = 0;
  double accuracy() const { return total > 0 ? static_cast<double>(correct) / total : 0.0; }
};

struct ProbeReport {
  std::vector<CategoryScore> categories;  // in order of first appearance in the probe list
  CategoryScore overall{"overall"};
  std::vector<ProbeOutcome> outcomes;     // one per probe, in order
};

// Scores every probe with top1(ids) = the model's most likely next token after ids. Checks
// every prompt and class against the tokenizer before the first call to top1.
ProbeReport score_probes(const std::vector<Probe>& probes, const Grammar& grammar, const Tokenizer& tokenizer,
                         const std::function<int32_t(std::span<const int32_t>)>& top1);

}  // namespace minigpt::data
