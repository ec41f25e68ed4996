// Data: the grammar corpus (determinism, vocabulary, tense and agreement), the tokenizer, the
// token stream format, and the grammar probes (every prompt producible, every class right).
#include "core/error.h"
#include "data/corpus.h"
#include "data/grammar.h"
#include "data/lexicon.h"
#include "data/probes.h"
#include "data/tokenizer.h"
#include "expect_error.h"
#include "model/model_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace minigpt;
using namespace minigpt::data;

namespace {

std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

// The first sentences for seed 42 (see Corpus.DeterministicForASeedAndPortableGolden).
const char* const kGoldenSeed42[3] = {"sam is walking to the new garden now .",
                                      "now emma is wearing his quiet hat .",
                                      "tomorrow i will sit on the red chairs ."};

std::vector<std::string> words_of(const std::vector<std::string_view>& v) { return {v.begin(), v.end()}; }

// Every verb form and auxiliary: where the verb group of a sentence starts.
std::set<std::string> verbish_words(const Grammar& g) {
  std::set<std::string> all;
  for (const std::string& c : Grammar::class_names())
    for (const std::string& w : g.word_class(c)) all.insert(w);
  all.insert({"has", "have", "hasn't", "haven't", "not"});
  return all;
}

}  // namespace

// ---- vocabulary ---------------------------------------------------------------------------

TEST(Vocabulary, SizeSpecialsOrderAndDeterminism) {
  const std::vector<std::string> vocab = corpus_vocabulary();
  EXPECT_GE(vocab.size(), 550u);
  EXPECT_LE(vocab.size(), 650u);
  ASSERT_GE(vocab.size(), 4u);
  EXPECT_EQ(vocab[0], "<pad>");
  EXPECT_EQ(vocab[1], "<bos>");
  EXPECT_EQ(vocab[2], "<eos>");
  EXPECT_EQ(vocab[3], "<unk>");
  EXPECT_TRUE(std::is_sorted(vocab.begin() + 4, vocab.end()));
  EXPECT_EQ(as_set(vocab).size(), vocab.size()) << "a token appears twice";
  // The shipped model was trained on this vocabulary: the generator's must not drift from it
  // (the same tokens in the same order, so that its ids mean the same words).
  EXPECT_EQ(vocab, load_model(std::string(MINIGPT_SOURCE_DIR) + "/models/grammar-minigpt.safetensors").vocab);
  for (const char* w : {"yesterday", "walked", "went", "goes", "eaten", "swimming", "children", "won't", ".", "?"})
    EXPECT_TRUE(as_set(vocab).count(w)) << w;
}

TEST(Vocabulary, VerbFormsNeverDoubleAsNounsAdjectivesOrNames) {
  // The probe classes are only meaningful if a verb form is never also another part of speech.
  const Lexicon& lex = lexicon();
  std::set<std::string_view> other;
  for (const Noun& n : lex.nouns) other.insert({n.singular, n.plural});
  for (const Adjective& a : lex.adjectives) other.insert(a.word);
  for (std::string_view n : lex.names) other.insert(n);
  for (const Verb& v : lex.verbs)
    for (std::string_view f : {v.base, v.third, v.past, v.participle, v.ing})
      if (!f.empty()) {
        EXPECT_FALSE(other.count(f)) << "'" << f << "' is a verb form and another word";
      }
}

// ---- corpus generation --------------------------------------------------------------------

TEST(Corpus, DeterministicForASeedAndPortableGolden) {
  CorpusGenerator a(42), b(42), c(43);
  int differ = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string x = a.next_text();
    EXPECT_EQ(x, b.next_text());
    differ += x != c.next_text();
  }
  EXPECT_GT(differ, 1900);
  // std::mt19937_64's sequence is fixed by the standard and the weighted choice is our own
  // integer arithmetic, so these hold on every platform (update them if the grammar changes).
  CorpusGenerator g(42);
  EXPECT_EQ(g.next_text(), kGoldenSeed42[0]);
  EXPECT_EQ(g.next_text(), kGoldenSeed42[1]);
  EXPECT_EQ(g.next_text(), kGoldenSeed42[2]);
}

TEST(Corpus, EveryWordIsInTheVocabularyAndSentencesAreWellFormed) {
  const std::set<std::string> vocab = as_set(corpus_vocabulary());
  std::set<std::string> seen;
  CorpusGenerator gen(7);
  const std::set<std::string> verbish = verbish_words(gen.grammar());
  size_t longest = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto words = gen.next_words();
    ASSERT_GE(words.size(), 3u);
    longest = std::max(longest, words.size());
    const std::string_view end = words.back();
    EXPECT_TRUE(end == "." || end == "?") << end;
    const bool question = words.front() == "what" || words.front() == "where" ||
                          verbish.count(std::string(words.front()));
    EXPECT_EQ(end == "?", question) << "sentence " << i;
    for (size_t k = 0; k < words.size(); ++k) {
      EXPECT_TRUE(vocab.count(std::string(words[k]))) << "'" << words[k] << "' not in the vocabulary";
      if (k + 1 < words.size()) {
        EXPECT_NE(words[k], ".");
      }
      seen.emplace(words[k]);
    }
    if (HasFailure()) break;
  }
  EXPECT_LE(longest, 30u);  // a T = 64 window always holds more than one sentence
  // The corpus uses most of its vocabulary (not a vocabulary of never-seen words).
  EXPECT_GT(seen.size(), vocab.size() * 9 / 10) << "words seen " << seen.size() << " of " << vocab.size();
}

TEST(Corpus, TimeAdverbialsFixTheTenseAndSubjectsAgree) {
  // After a sentence-initial adverbial, the first verb-group word must be of the right form:
  // past after "yesterday"/"last"/"ago", will after "tomorrow"/"next", am/is/are after "now",
  // and in the present, third person for he/she/it/names/singular nouns, plural otherwise.
  Grammar grammar;
  const std::set<std::string> verbish = verbish_words(grammar);
  const std::set<std::string> past = as_set(grammar.word_class("verb_past"));
  const std::set<std::string> third = as_set(grammar.word_class("verb_3sg"));
  const std::set<std::string> plural = as_set(grammar.word_class("verb_present_plural"));
  const std::set<std::string> be = {"am", "is", "are", "isn't", "aren't"};
  std::set<std::string> singular_subject = {"he", "she", "it"}, plural_subject = {"i", "you", "we", "they"};
  for (const Noun& n : lexicon().nouns) {
    singular_subject.emplace(n.singular);
    if (!n.plural.empty()) plural_subject.emplace(n.plural);
  }
  for (std::string_view n : lexicon().names) singular_subject.emplace(n);

  CorpusGenerator gen(11);
  std::map<std::string, int> checked;
  for (int i = 0; i < 20000; ++i) {
    const std::vector<std::string> w = words_of(gen.next_words());
    const std::string& first = w[0];
    size_t v = 1;
    while (v < w.size() && !verbish.count(w[v])) ++v;
    ASSERT_LT(v, w.size()) << "no verb in sentence " << i;
    const std::string& verb = w[v];
    const std::string text = fmt::format("{}", fmt::join(w, " "));
    if (first == "yesterday" || first == "last" || (w.size() > 3 && w[2] == "ago") || (w.size() > 3 && w[3] == "ago")) {
      EXPECT_TRUE(past.count(verb)) << text;
      ++checked["past"];
    } else if (first == "tomorrow" || first == "next" || first == "tonight" || first == "soon") {
      EXPECT_TRUE(verb == "will" || verb == "won't") << text;
      ++checked["future"];
    } else if (first == "now" || (first == "right" && w[1] == "now")) {
      EXPECT_TRUE(be.count(verb)) << text;
      ++checked["progressive"];
    } else if (first == "every" || first == "usually") {
      // The subject's last word decides the agreement; "tom and mary" is plural.
      size_t s = v - 1;
      const bool coordinated = std::find(w.begin(), w.begin() + static_cast<long>(v), "and") != w.begin() + static_cast<long>(v);
      if (w[s] == "usually" || w[s] == "often" || w[s] == "always" || w[s] == "sometimes" || w[s] == "never") --s;
      if (w[s] == ",") continue;
      const bool singular = !coordinated && singular_subject.count(w[s]);
      const bool plural_subj = coordinated || plural_subject.count(w[s]);
      ASSERT_TRUE(singular != plural_subj) << "subject of unknown number: " << text;
      EXPECT_TRUE(singular ? third.count(verb) : plural.count(verb)) << text;
      ++checked[singular ? "present_3sg" : "present_plural"];
    }
    if (HasFailure()) break;
  }
  for (const char* c : {"past", "future", "progressive", "present_3sg", "present_plural"})
    EXPECT_GT(checked[c], 200) << c << " was checked only " << checked[c] << " times";
}

TEST(Corpus, YesterdayIIsFrequentAndFollowedByPastForms) {
  Grammar grammar;
  const std::set<std::string> past = as_set(grammar.word_class("verb_past"));
  CorpusGenerator gen(5);
  std::map<std::string, int> next;
  int total = 0;
  for (int i = 0; i < 100000; ++i) {
    const auto w = gen.next_words();
    if (w.size() > 2 && w[0] == "yesterday" && w[1] == "i") {
      ++next[std::string(w[2])];
      ++total;
    }
  }
  EXPECT_GT(total, 300) << "'yesterday i' starts only " << total << " of 100000 sentences";
  for (const auto& [word, count] : next) EXPECT_TRUE(past.count(word)) << word;
}

TEST(Corpus, TokenStreamFormat) {
  Tokenizer tok(corpus_vocabulary());
  const std::vector<int32_t> s = corpus_token_stream(3, 5000, tok);
  ASSERT_GE(s.size(), 5000u);
  EXPECT_EQ(s.front(), Tokenizer::kBos);
  EXPECT_EQ(s.back(), Tokenizer::kEos);
  int open = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_NE(s[i], Tokenizer::kPad);
    EXPECT_NE(s[i], Tokenizer::kUnk);
    if (s[i] == Tokenizer::kBos) {
      EXPECT_EQ(open, 0) << "at " << i;
      open = 1;
    } else if (s[i] == Tokenizer::kEos) {
      EXPECT_EQ(open, 1) << "at " << i;
      const std::string& end = tok.token(s[i - 1]);
      EXPECT_TRUE(end == "." || end == "?");
      open = 0;
    }
  }
  // The first sentence is the generator's first sentence.
  CorpusGenerator gen(3);
  const std::vector<int32_t> first(s.begin() + 1, std::find(s.begin(), s.end(), Tokenizer::kEos));
  EXPECT_EQ(tok.decode(first), gen.next_text());
  // A longer stream for the same seed extends the shorter one.
  const std::vector<int32_t> longer = corpus_token_stream(3, 9000, tok);
  ASSERT_GT(longer.size(), s.size());
  EXPECT_TRUE(std::equal(s.begin(), s.end(), longer.begin()));
  EXPECT_TRUE(corpus_token_stream(3, 0, tok).empty());
  // A tokenizer over another vocabulary is refused, naming the word.
  Tokenizer small({"<pad>", "<bos>", "<eos>", "<unk>", "."});
  EXPECT_ERROR(corpus_token_stream(3, 10, small), "corpus word 'am' is not in the tokenizer's vocabulary");
}

// ---- tokenizer ----------------------------------------------------------------------------

TEST(Tokenizer, SplitsWordsPunctuationAndContractions) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Tokenizer::split("Yesterday, I walked."), (V{"yesterday", ",", "i", "walked", "."}));
  EXPECT_EQ(Tokenizer::split("  She DOESN'T swim?! "), (V{"she", "doesn't", "swim", "?", "!"}));
  EXPECT_EQ(Tokenizer::split("'hello' won't"), (V{"'", "hello", "'", "won't"}));
  EXPECT_EQ(Tokenizer::split("dogs' toys"), (V{"dogs", "'", "toys"}));
  EXPECT_EQ(Tokenizer::split("a-b;c"), (V{"a", "-", "b", ";", "c"}));
  EXPECT_EQ(Tokenizer::split("<BOS>hi <eos>"), (V{"<bos>", "hi", "<eos>"}));
  EXPECT_EQ(Tokenizer::split("<b"), (V{"<", "b"}));
  EXPECT_EQ(Tokenizer::split(""), V{});
  EXPECT_EQ(Tokenizer::split("caf\xc3\xa9!"), (V{"caf\xc3\xa9", "!"}));
}

TEST(Tokenizer, RoundTripOnCorpusText) {
  Tokenizer tok(corpus_vocabulary());
  CorpusGenerator gen(99);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = gen.next_text();
    const Tokenizer::Encoded e = tok.encode(text);
    EXPECT_TRUE(e.unknown.empty()) << text;
    EXPECT_EQ(tok.decode(e.ids), text);
    EXPECT_EQ(tok.encode(tok.decode(e.ids)).ids, e.ids);
  }
  // Capitals and spacing normalise to the canonical text.
  EXPECT_EQ(tok.decode(tok.encode("Yesterday, I walked home.").ids), "yesterday , i walked home .");
  // Special ids survive decode -> encode.
  const std::vector<int32_t> ids = {Tokenizer::kBos, tok.id("she"), Tokenizer::kUnk, Tokenizer::kEos};
  EXPECT_EQ(tok.encode(tok.decode(ids)).ids, ids);
}

TEST(Tokenizer, UnknownWordsBecomeUnkAndAreReported) {
  Tokenizer tok(corpus_vocabulary());
  const Tokenizer::Encoded e = tok.encode("Yesterday the zebra ate a quokka.");
  ASSERT_EQ(e.ids.size(), 7u);
  EXPECT_EQ(e.ids[2], Tokenizer::kUnk);
  EXPECT_EQ(e.ids[5], Tokenizer::kUnk);
  EXPECT_EQ(e.unknown, (std::vector<std::string>{"zebra", "quokka"}));
  EXPECT_EQ(tok.id("zebra"), Tokenizer::kUnk);
  EXPECT_EQ(tok.id("yesterday"), tok.encode("yesterday").ids[0]);
  EXPECT_TRUE(tok.encode("<unk>").unknown.empty());  // the literal special is not unknown
  EXPECT_ERROR(tok.token(tok.size()), "token id 611 is out of range");
  EXPECT_ERROR(tok.token(-1), "token id -1 is out of range");
  EXPECT_ERROR(tok.decode(std::vector<int32_t>{0, 100000}), "token id 100000 is out of range");
}

TEST(Tokenizer, RejectsBadVocabularies) {
  EXPECT_ERROR(Tokenizer({"<pad>", "<bos>", "<eos>"}), "vocabulary of 3 tokens is smaller than the 4 specials");
  EXPECT_ERROR(Tokenizer({"<bos>", "<pad>", "<eos>", "<unk>", "a"}), "id 0 must be '<pad>', got '<bos>'");
  EXPECT_ERROR(Tokenizer({"<pad>", "<bos>", "<eos>", "<unk>", "a", "a"}), "token 'a' appears twice (ids 4 and 5)");
  EXPECT_ERROR(Tokenizer({"<pad>", "<bos>", "<eos>", "<unk>", ""}), "token 4 is empty");
  try {
    Tokenizer({"<pad>", "<bos>", "<eos>", "<unk>", "dog", "cat", "dog"});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'dog'"), std::string::npos) << e.what();
  }
}

// ---- the exact continuation search --------------------------------------------------------

TEST(Grammar, NextWordsIsExact) {
  Grammar g;
  auto next = [&](const char* prefix) { return as_set(g.next_words(Tokenizer::split(prefix))); };
  const std::set<std::string> after_yesterday_i = next("yesterday i");
  EXPECT_TRUE(after_yesterday_i.count("went"));
  EXPECT_TRUE(after_yesterday_i.count("didn't"));
  EXPECT_FALSE(after_yesterday_i.count("go"));
  for (const std::string& w : after_yesterday_i) EXPECT_TRUE(as_set(g.word_class("verb_past")).count(w)) << w;
  EXPECT_EQ(next("now i"), (std::set<std::string>{"am"}));
  EXPECT_EQ(next("tomorrow we"), (std::set<std::string>{"will", "won't"}));
  EXPECT_EQ(next("she walked home ."), (std::set<std::string>{"<eos>"}));  // the sentence ends
  EXPECT_EQ(next("she walked home"), (std::set<std::string>{".", "yesterday", "last", "a", "two", "three", "ten"}));
  EXPECT_TRUE(next("yesterday she walks").empty());
  EXPECT_TRUE(next("zebra").empty());
  EXPECT_ERROR(g.next_words(Tokenizer::split("yesterday i"), 10), "more than 10 generator runs");
  EXPECT_ERROR(g.word_class("verb_future"), "unknown word class 'verb_future'");
}

// ---- probes -------------------------------------------------------------------------------

namespace {

const std::string kProbeFile = std::string(MINIGPT_SOURCE_DIR) + "/tests/probes/grammar_probes.tsv";

}  // namespace

TEST(Probes, FileHasEnoughPromptsPerCategoryAndTokenizesCleanly) {
  const std::vector<Probe> probes = load_probes(kProbeFile);
  EXPECT_GE(probes.size(), 100u);
  Grammar grammar;
  Tokenizer tok(corpus_vocabulary());
  std::map<std::string, int> per_category;
  for (const Probe& p : probes) {
    ++per_category[p.category];
    EXPECT_TRUE(tok.encode(p.prompt).unknown.empty()) << p.prompt;
    EXPECT_FALSE(class_ids(grammar, p.word_class, tok).empty()) << p.word_class;
  }
  for (const char* c : {"past", "present_3sg", "present_plural", "future_will", "future_base", "do_support_base",
                        "progressive_be", "progressive_ing", "perfect_participle"})
    EXPECT_GE(per_category[c], 12) << c;
  for (const std::string& c : Grammar::class_names()) EXPECT_FALSE(grammar.word_class(c).empty()) << c;
}

TEST(Probes, EveryPromptIsProducibleAndItsClassIsExact) {
  // The honesty check: the exact search proves that the generator can produce each prompt as
  // the start of a sentence, and that every word it can put next is in the probe's class (so
  // a model that learned the grammar perfectly scores 100%).
  const std::vector<Probe> probes = load_probes(kProbeFile);
  Grammar grammar;
  for (const Probe& p : probes) {
    const std::vector<std::string> next = grammar.next_words(Tokenizer::split(p.prompt));
    EXPECT_FALSE(next.empty()) << "line " << p.line << ": the grammar cannot produce '" << p.prompt << "'";
    const std::set<std::string> cls = as_set(grammar.word_class(p.word_class));
    for (const std::string& w : next)
      EXPECT_TRUE(cls.count(w)) << "line " << p.line << ": '" << p.prompt << "' can continue with '" << w
                                << "', not in " << p.word_class;
  }
}

TEST(Probes, HonestyCheckCatchesBadProbes) {
  // The same check fails on a probe with the wrong class and on one the grammar cannot produce.
  Grammar grammar;
  const std::set<std::string> base = as_set(grammar.word_class("verb_base"));
  const std::vector<std::string> after_yesterday = grammar.next_words(Tokenizer::split("yesterday she"));
  EXPECT_TRUE(std::any_of(after_yesterday.begin(), after_yesterday.end(),
                          [&](const std::string& w) { return !base.count(w); }));
  EXPECT_TRUE(grammar.next_words(Tokenizer::split("yesterday she will")).empty());
  EXPECT_TRUE(grammar.next_words(Tokenizer::split("she am")).empty());
  // "tom" may be followed by "and": a probe ending at a lone name would not be exact.
  EXPECT_TRUE(as_set(grammar.next_words(Tokenizer::split("every day tom"))).count("and"));
}

TEST(Probes, ParseErrorsNameTheLine) {
  EXPECT_EQ(parse_probes("# c\n\npast\tyesterday i\tverb_past\r\n", "t").size(), 1u);
  auto message = [](const char* text) {
    try {
      parse_probes(text, "p.tsv");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("past\tyesterday i\n").find("p.tsv:1"), std::string::npos);
  EXPECT_NE(message("# x\npast\tyesterday i\tverb_future\n").find("p.tsv:2: unknown word class 'verb_future'"),
            std::string::npos);
  EXPECT_NE(message("Past\tyesterday i\tverb_past\n").find("category"), std::string::npos);
  EXPECT_NE(message("past\t \tverb_past\n").find("empty prompt"), std::string::npos);
  EXPECT_NE(message("past\ta\tverb_past\textra\n").find("3 tab-separated"), std::string::npos);
  EXPECT_ERROR(load_probes("/nonexistent/probes.tsv"), "cannot open probe file '/nonexistent/probes.tsv'");
}

TEST(Probes, ScoringCountsPerCategory) {
  const std::vector<Probe> probes = parse_probes(
      "past\tyesterday i\tverb_past\npast\tyesterday she\tverb_past\nfuture_base\ttomorrow we will\tverb_base\n", "t");
  Grammar grammar;
  Tokenizer tok(corpus_vocabulary());
  // A "model" that always answers "went": right for the past probes, wrong after "will".
  std::vector<std::vector<int32_t>> seen;
  const ProbeReport r = score_probes(probes, grammar, tok, [&](std::span<const int32_t> ids) {
    seen.emplace_back(ids.begin(), ids.end());
    return tok.id("went");
  });
  ASSERT_EQ(r.categories.size(), 2u);
  EXPECT_EQ(r.categories[0].category, "past");
  EXPECT_EQ(r.categories[0].correct, 2);
  EXPECT_EQ(r.categories[1].correct, 0);
  EXPECT_EQ(r.categories[1].total, 1);
  EXPECT_EQ(r.overall.correct, 2);
  EXPECT_EQ(r.overall.total, 3);
  EXPECT_DOUBLE_EQ(r.overall.accuracy(), 2.0 / 3.0);
  EXPECT_FALSE(r.outcomes[2].correct);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], (std::vector<int32_t>{Tokenizer::kBos, tok.id("yesterday"), tok.id("i")}));
  // A model vocabulary without a probe word is an Error naming the word, before any scoring.
  std::vector<std::string> vocab = corpus_vocabulary();
  vocab.erase(std::find(vocab.begin(), vocab.end(), "yesterday"));
  Tokenizer missing(vocab);
  try {
    score_probes(probes, grammar, missing, [](std::span<const int32_t>) -> int32_t { ADD_FAILURE(); return 0; });
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'yesterday'"), std::string::npos) << e.what();
  }
}
