// The probabilistic English grammar of the corpus, its vocabulary and its word classes.
//
// What it defines: Grammar::generate (one sentence, every random decision drawn through a
// Chooser), the vocabulary built from the word lists (data/lexicon.h), the named word classes
// the probes score against, and next_words(), an exact search of every continuation the
// grammar allows after a prefix (how the probe tests prove a prompt is producible and its
// class is right).
// What it does not do: own a random generator (data/corpus.h does), or know token ids.
//
// Sentence shapes (lowercase words, the last token "." or "?"):
//   [time adverbial [,]] subject [usually|often|...] verb-group [object] [pp] [time adverbial] .
//   aux subject verb [object] [pp] [time adverbial] ?          (do/does/did/will/is/has ...)
//   what|where aux subject verb [rest] [time adverbial] ?
// Tenses and what fixes them:
//   past        yesterday, last week, two days ago ...      walked / did not walk / didn't walk
//   present     every day, usually (also mid: she usually)  walks|walk / does not / doesn't
//   future      tomorrow, next week, in two days ...        will walk / won't walk
//   progressive now, right now, at the moment              am|is|are walking / isn't|aren't
//   past progressive (past adverbials)                      was|were walking / wasn't|weren't
//   perfect     already, before, twice, this week; yet      has|have walked / hasn't|haven't
// Negation is "not" only after do/does/did; every other auxiliary is negated by its
// contraction (won't, isn't, hasn't ...), and "i" is never the subject of a negated present
// progressive. So after "she is", "they have", "we will" the next word is always a verb form.
// Coordinated subjects are two names ("tom and mary"), plural.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace minigpt::data {

// The source of every random decision. choose() returns i in [0, weights.size()) with
// probability weights[i] / sum(weights); the sum is > 0 and zero-weight entries never come out.
class Chooser {
 public:
  virtual ~Chooser() = default;
  virtual size_t choose(std::span<const uint32_t> weights) = 0;
};

// Receives the words of a sentence, in order, as they are decided.
class WordSink {
 public:
  virtual ~WordSink() = default;
  virtual void word(std::string_view w) = 0;
};

struct GrammarTables;  // precomputed frames and candidate lists (grammar.cpp)

class Grammar {
 public:
  Grammar();
  ~Grammar();
  Grammar(Grammar&&) noexcept;
  Grammar& operator=(Grammar&&) noexcept;

  // One sentence, ending in "." or "?". The words are views into static tables.
  void generate(Chooser& chooser, WordSink& sink) const;

  // <pad> <bos> <eos> <unk> at ids 0..3, then every word of the lexicon (verb forms, nouns,
  // adjectives, names, adverbial and function words, punctuation) in byte order, each once.
  std::vector<std::string> vocabulary() const;

  // The words of a named class (sorted, unique); Error naming the classes for an unknown name.
  //   verb_base        base forms                      (walk, go, eat)
  //   verb_3sg         third person present + does, doesn't
  //   verb_present_plural  base forms + do, don't       (i/you/we/they and plural subjects)
  //   verb_past        past forms + did, didn't, was, were, wasn't, weren't
  //   verb_participle  past participles                 (walked, gone, eaten)
  //   verb_ing         -ing forms                       (walking, going)
  //   be_3sg {is, isn't}  be_plural {are, aren't}  be_1sg {am}  will {will, won't}
  std::vector<std::string> word_class(std::string_view name) const;
  static std::vector<std::string> class_names();

  // Every word the grammar can emit right after `prefix` (the first words of a sentence),
  // "<eos>" if a sentence can end there; empty if no sentence starts with `prefix`. Exact: a
  // depth-first search over all decisions, pruned at the first word that leaves the prefix.
  // Error if the search needs more than max_runs replays of the generator.
  std::vector<std::string> next_words(std::span<const std::string> prefix,
                                      int64_t max_runs = 2'000'000) const;

 private:
  std::unique_ptr<GrammarTables> tables_;
};

}  // namespace minigpt::data
