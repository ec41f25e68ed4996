// The sentence generator (see grammar.h for the shapes). Every decision goes through the
// Chooser, in the order the words come out, and decisions are made as late as possible: the
// exact continuation search (next_words) replays the generator and prunes at the first word
// that leaves the prefix, so a choice made long before its word would multiply its work.
#include "data/grammar.h"

#include "core/error.h"
#include "data/lexicon.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <set>

namespace minigpt::data {

namespace {

// One slot of a verb frame: a literal word, or an object noun phrase of the classes in mask.
struct Slot {
  std::string_view literal;
  uint32_t mask = 0;
};

struct Frame {
  std::vector<Slot> slots;
  bool what_gap = false;   // first slot is a non-person object: "what did she eat ?"
  bool where_gap = false;  // has "to <place>" or "home": "where did they go ?"
};

enum class Tense { kPast, kPresent, kFuture, kProgressive, kPastProgressive, kPerfect };
enum class Person { kFirstSingular, kThirdSingular, kPlural };
enum class SubjectKind { kPronoun, kName, kNames, kNounSingular, kNounPlural };
enum class Gap { kNone, kWhat, kWhere };

constexpr std::array<std::string_view, 7> kPronouns = {"i", "you", "he", "she", "it", "we", "they"};
constexpr std::array<uint32_t, 7> kPronounWeights = {12, 7, 9, 9, 3, 6, 7};
// Object pronoun of the same person as subject pronoun k (never both in one sentence).
constexpr std::array<std::string_view, 7> kReflexiveClash = {"me", "you", "him", "her", "it", "us", "them"};
constexpr std::array<std::string_view, 7> kObjectPronouns = {"me", "you", "him", "her", "us", "them", "it"};
constexpr int kPronounI = 0, kPronounIt = 4;

struct Det {
  std::string_view word;  // "" = no determiner (mass nouns: "she drank milk")
  uint32_t weight;
};
const std::vector<Det> kSingularDets = {{"the", 40}, {"a", 20}, {"this", 4}, {"that", 4},
                                        {"my", 8},   {"your", 4}, {"his", 4}, {"her", 4},
                                        {"our", 3},  {"their", 3}};
const std::vector<Det> kPluralDets = {{"the", 40}, {"these", 4}, {"those", 4}, {"my", 6},
                                      {"your", 3}, {"his", 3},   {"her", 3},   {"our", 3},
                                      {"their", 3}, {"some", 6}, {"many", 3},  {"two", 3},
                                      {"three", 2}, {"ten", 1}};
const std::vector<Det> kMassDets = {{"the", 30}, {"some", 20}, {"", 30}, {"my", 4}, {"your", 2},
                                    {"his", 2},  {"her", 2},   {"our", 2}, {"their", 2}};

bool starts_with_vowel(std::string_view w) {
  return !w.empty() && std::string_view("aeiou").find(w.front()) != std::string_view::npos;
}

Frame parse_frame(std::string_view spec) {
  Frame f;
  while (!spec.empty()) {
    const size_t space = spec.find(' ');
    const std::string_view item = spec.substr(0, space);
    if (item.starts_with("O:"))
      f.slots.push_back({{}, parse_noun_classes(item.substr(2))});
    else
      f.slots.push_back({item, 0});
    spec = space == std::string_view::npos ? std::string_view{} : spec.substr(space + 1);
  }
  f.what_gap = !f.slots.empty() && f.slots[0].mask != 0 && (f.slots[0].mask & ~kPerson) != 0;
  for (size_t i = 0; i < f.slots.size(); ++i) {
    if (f.slots[i].literal == "home") f.where_gap = true;
    if (f.slots[i].literal == "to" && i + 1 < f.slots.size() && (f.slots[i + 1].mask & kPlace))
      f.where_gap = true;
  }
  return f;
}

}  // namespace

struct GrammarTables {
  const Lexicon& lex = lexicon();
  std::vector<std::vector<Frame>> frames;  // per verb
};

namespace {

class Generator {
 public:
  Generator(const GrammarTables& t, Chooser& chooser, WordSink& sink)
      : t_(t), lex_(t.lex), chooser_(chooser), out_(sink) {}

  void sentence() {
    // declarative, negative, yes/no question, wh-question
    const size_t form = pick({72, 5, 13, 8});
    if (form == 3) {
      const Tense tense = static_cast<Tense>(pick({45, 35, 20}));  // past, present, future
      wh_question(tense);
      return;
    }
    const Tense tense = static_cast<Tense>(pick({68, 60, 32, 18, 3, 14}));
    if (form == 2)
      question(tense);
    else
      declarative(tense, form == 1);
  }

 private:
  struct SubjectPlan {
    SubjectKind kind;
    int pronoun = -1;
    Person person;
  };

  size_t pick(std::initializer_list<uint32_t> weights) {
    return chooser_.choose(std::span<const uint32_t>(weights.begin(), weights.size()));
  }
  size_t pick(const std::vector<uint32_t>& weights) { return chooser_.choose(weights); }
  void say(std::string_view w) { out_.word(w); }

  const std::vector<Adverbial>& adverbials(Tense tense, bool negative) const {
    switch (tense) {
      case Tense::kPast:
      case Tense::kPastProgressive: return lex_.past;
      case Tense::kPresent: return lex_.present;
      case Tense::kFuture: return lex_.future;
      case Tense::kProgressive: return lex_.now;
      case Tense::kPerfect: return negative ? lex_.perfect_negative : lex_.perfect;
    }
    return lex_.past;
  }

  void adverbial(const std::vector<Adverbial>& list) {
    std::vector<uint32_t> w;
    for (const Adverbial& a : list) w.push_back(a.weight);
    for (std::string_view word : list[pick(w)].words) say(word);
  }

  // Decides who the subject is (and so the agreement) without emitting it: questions put the
  // auxiliary, which depends on the person, before the subject.
  SubjectPlan plan_subject(bool allow_i) {
    SubjectPlan p;
    p.kind = static_cast<SubjectKind>(pick({50, 17, 4, 17, 12}));
    switch (p.kind) {
      case SubjectKind::kPronoun: {
        std::vector<uint32_t> w(kPronounWeights.begin(), kPronounWeights.end());
        if (!allow_i) w[kPronounI] = 0;
        p.pronoun = static_cast<int>(pick(w));
        p.person = p.pronoun == kPronounI ? Person::kFirstSingular
                   : (p.pronoun >= 2 && p.pronoun <= 4) ? Person::kThirdSingular
                                                        : Person::kPlural;
        break;
      }
      case SubjectKind::kName:
      case SubjectKind::kNounSingular: p.person = Person::kThirdSingular; break;
      case SubjectKind::kNames:
      case SubjectKind::kNounPlural: p.person = Person::kPlural; break;
    }
    return p;
  }

  // Emits the subject; returns true if it is an animal (which restricts the verbs).
  bool say_subject(const SubjectPlan& p) {
    switch (p.kind) {
      case SubjectKind::kPronoun:
        say(kPronouns[p.pronoun]);
        return p.pronoun == kPronounIt;
      case SubjectKind::kName: say_name(); return false;
      case SubjectKind::kNames: {
        const size_t first = say_name();
        say("and");
        say_name(first);
        return false;
      }
      case SubjectKind::kNounSingular: return noun_phrase(kAnimate, 0);
      case SubjectKind::kNounPlural: return noun_phrase(kAnimate, 1);
    }
    return false;
  }

  // Emits a name other than names[exclude]; returns its index.
  size_t say_name(size_t exclude = SIZE_MAX) {
    std::vector<uint32_t> w(lex_.names.size(), 1);
    if (exclude < w.size()) w[exclude] = 0;
    const size_t i = pick(w);
    say(lex_.names[i]);
    return i;
  }

  // det [adj] noun of a noun in `mask`. number: 0 singular, 1 plural, -1 either. Returns true
  // if the noun is an animal. Order of decisions: mass or count, number, adjective or not,
  // determiner, a/an (from the first word's sound), then the words.
  bool noun_phrase(uint32_t mask, int number) {
    const std::vector<Noun>& nouns = lex_.nouns;
    std::vector<uint32_t> mass_w(2, 0);
    for (const Noun& n : nouns)
      if (n.classes & mask) mass_w[n.mass ? 1 : 0] += n.weight;
    const bool mass = pick(mass_w) == 1;
    bool plural = false;
    if (!mass) {
      if (number < 0) {
        uint32_t plural_w = 0;
        for (const Noun& n : nouns)
          if ((n.classes & mask) && !n.mass && !n.plural.empty()) plural_w += n.weight;
        plural = pick({7 * mass_w[0], 3 * plural_w}) == 1;
      } else {
        plural = number == 1;
      }
    }
    auto candidate = [&](const Noun& n) {
      return (n.classes & mask) && n.mass == mass && (!plural || !n.plural.empty());
    };
    bool animate_candidate = false;
    for (const Noun& n : nouns)
      if (candidate(n) && (n.classes & kAnimate)) animate_candidate = true;
    const bool has_adj = !mass && pick({65, 35}) == 1;
    auto adj_ok = [&](const Adjective& a) { return !a.animate_only || animate_candidate; };

    const std::vector<Det>& dets = mass ? kMassDets : plural ? kPluralDets : kSingularDets;
    std::vector<uint32_t> det_w;
    for (const Det& d : dets) det_w.push_back(d.weight);
    std::string_view det = dets[pick(det_w)].word;
    int vowel = -1;  // -1: any first sound; 0: consonant; 1: vowel (after a/an)
    if (det == "a") {
      std::vector<uint32_t> sound_w(2, 0);
      if (has_adj) {
        for (const Adjective& a : lex_.adjectives)
          if (adj_ok(a)) sound_w[starts_with_vowel(a.word)] += a.weight;
      } else {
        for (const Noun& n : nouns)
          if (candidate(n)) sound_w[starts_with_vowel(n.singular)] += n.weight;
      }
      vowel = static_cast<int>(pick(sound_w));
      det = vowel ? "an" : "a";
    }
    if (!det.empty()) say(det);

    bool animate_only = false;
    if (has_adj) {
      std::vector<uint32_t> w;
      for (const Adjective& a : lex_.adjectives)
        w.push_back(adj_ok(a) && (vowel < 0 || starts_with_vowel(a.word) == (vowel == 1)) ? a.weight : 0);
      const Adjective& a = lex_.adjectives[pick(w)];
      animate_only = a.animate_only;
      say(a.word);
    }
    std::vector<uint32_t> w;
    for (const Noun& n : nouns) {
      bool ok = candidate(n) && (!animate_only || (n.classes & kAnimate));
      if (!has_adj && vowel >= 0) ok = ok && starts_with_vowel(n.singular) == (vowel == 1);
      w.push_back(ok ? n.weight : 0);
    }
    const Noun& n = nouns[pick(w)];
    say(plural ? n.plural : n.singular);
    return (n.classes & kPerson) == 0;
  }

  // An object of a verb: a noun phrase, a pronoun or a name.
  void object(uint32_t mask, int subject_pronoun) {
    const bool person = mask & kPerson;
    const size_t kind = pick({80, 10, person ? 10u : 0u});
    if (kind == 0) {
      noun_phrase(mask, -1);
    } else if (kind == 1) {
      std::vector<uint32_t> w;
      for (std::string_view p : kObjectPronouns) {
        bool ok = p == "them" || (p == "it" ? (mask & ~kPerson) != 0 : person);
        if (subject_pronoun >= 0 && kReflexiveClash[subject_pronoun] == p) ok = false;
        w.push_back(ok ? 1 : 0);
      }
      say(kObjectPronouns[pick(w)]);
    } else {
      say_name();
    }
  }

  // Chooses a verb a subject of this kind can take in this tense (and, for wh-questions,
  // one with a frame that has the gap).
  size_t choose_verb(bool animal_subject, bool needs_ing, Gap gap) {
    std::vector<uint32_t> w;
    for (size_t i = 0; i < lex_.verbs.size(); ++i) {
      const Verb& v = lex_.verbs[i];
      bool ok = (!animal_subject || v.animals) && (!needs_ing || !v.ing.empty());
      if (gap != Gap::kNone) {
        bool any = false;
        for (const Frame& f : t_.frames[i]) any = any || (gap == Gap::kWhat ? f.what_gap : f.where_gap);
        ok = ok && any;
      }
      w.push_back(ok ? v.weight : 0);
    }
    return pick(w);
  }

  // The verb's complement (and sometimes a place or company adjunct), with the gap left out.
  void complement(size_t verb, int subject_pronoun, Gap gap) {
    const std::vector<Frame>& frames = t_.frames[verb];
    std::vector<uint32_t> w;
    for (const Frame& f : frames)
      w.push_back(gap == Gap::kNone || (gap == Gap::kWhat ? f.what_gap : f.where_gap) ? 1 : 0);
    const Frame& f = frames[pick(w)];
    bool has_literal = false;
    for (size_t i = 0; i < f.slots.size(); ++i) {
      const Slot& s = f.slots[i];
      if (gap == Gap::kWhat && i == 0) continue;
      if (gap == Gap::kWhere) {
        if (s.literal == "home") continue;
        if (s.literal == "to" && i + 1 < f.slots.size() && (f.slots[i + 1].mask & kPlace)) {
          ++i;
          continue;
        }
      }
      if (s.mask != 0) {
        object(s.mask, subject_pronoun);
      } else {
        say(s.literal);
        has_literal = true;
      }
    }
    if (has_literal || gap != Gap::kNone) return;
    const size_t adjunct = pick({88, 6, 6});  // none, in <place>, with <person>
    if (adjunct == 1) {
      say("in");
      noun_phrase(kPlace, 0);
    } else if (adjunct == 2) {
      say("with");
      object(kPerson, subject_pronoun);
    }
  }

  std::string_view verb_form(size_t verb, Tense tense, bool has_aux, Person person) const {
    const Verb& v = lex_.verbs[verb];
    if (tense == Tense::kProgressive || tense == Tense::kPastProgressive) return v.ing;
    if (tense == Tense::kPerfect) return v.participle;
    if (has_aux) return v.base;  // do/does/did/will
    if (tense == Tense::kPast) return v.past;
    return person == Person::kThirdSingular ? v.third : v.base;
  }

  // The auxiliary for a tense, person and polarity ("" when the verb carries the tense).
  std::string_view auxiliary(Tense tense, Person person, bool negative) const {
    const bool third = person == Person::kThirdSingular;
    switch (tense) {
      case Tense::kPast: return negative ? "didn't" : "did";
      case Tense::kPresent: return negative ? (third ? "doesn't" : "don't") : (third ? "does" : "do");
      case Tense::kFuture: return negative ? "won't" : "will";
      case Tense::kProgressive:
        if (person == Person::kFirstSingular) return "am";  // never negated (see grammar.h)
        return third ? (negative ? "isn't" : "is") : (negative ? "aren't" : "are");
      case Tense::kPastProgressive:
        return person == Person::kPlural ? (negative ? "weren't" : "were") : (negative ? "wasn't" : "was");
      case Tense::kPerfect: return third ? (negative ? "hasn't" : "has") : (negative ? "haven't" : "have");
    }
    return "";
  }

  void declarative(Tense tense, bool negative) {
    const bool simple = tense == Tense::kPast || tense == Tense::kPresent || tense == Tense::kFuture ||
                        tense == Tense::kPastProgressive;
    uint32_t initial = simple ? 45 : tense == Tense::kProgressive ? 40 : 0;
    uint32_t final_ = simple ? 35 : tense == Tense::kProgressive ? 40 : 50;
    uint32_t none = simple ? 20 : tense == Tense::kProgressive ? 20 : 50;
    uint32_t mid = tense == Tense::kPresent && !negative ? 30 : 0;
    const size_t position = pick({initial, final_, none, mid});
    const auto& list = adverbials(tense, negative);
    if (position == 0) {
      adverbial(list);
      if (pick({85, 15}) == 1) say(",");
    }
    const SubjectPlan plan = plan_subject(!(negative && tense == Tense::kProgressive));
    const bool animal = say_subject(plan);
    if (position == 3) adverbial(lex_.present_mid);

    bool has_aux = false;
    const bool do_support = tense == Tense::kPast || tense == Tense::kPresent;
    if (!do_support || negative) {
      has_aux = true;
      if (do_support && pick({50, 50}) == 1) {  // "didn't" / "did not"
        say(tense == Tense::kPast ? "did" : plan.person == Person::kThirdSingular ? "does" : "do");
        say("not");
      } else {
        say(auxiliary(tense, plan.person, negative));
      }
    }
    const bool needs_ing = tense == Tense::kProgressive || tense == Tense::kPastProgressive;
    const size_t verb = choose_verb(animal, needs_ing, Gap::kNone);
    say(verb_form(verb, tense, has_aux, plan.person));
    complement(verb, plan.pronoun, Gap::kNone);
    if (position == 1) adverbial(list);
    say(".");
  }

  void question(Tense tense) {
    const bool negative = pick({85, 15}) == 1;
    const SubjectPlan plan = plan_subject(!(negative && tense == Tense::kProgressive));
    say(auxiliary(tense, plan.person, negative));
    const bool animal = say_subject(plan);
    const bool needs_ing = tense == Tense::kProgressive || tense == Tense::kPastProgressive;
    const size_t verb = choose_verb(animal, needs_ing, Gap::kNone);
    say(verb_form(verb, tense, true, plan.person));
    complement(verb, plan.pronoun, Gap::kNone);
    if (pick({60, 40}) == 1)
      adverbial(tense == Tense::kPerfect ? lex_.perfect_negative : adverbials(tense, false));
    say("?");
  }

  void wh_question(Tense tense) {
    const Gap gap = pick({60, 40}) == 0 ? Gap::kWhat : Gap::kWhere;
    say(gap == Gap::kWhat ? "what" : "where");
    const SubjectPlan plan = plan_subject(true);
    say(auxiliary(tense, plan.person, false));
    const bool animal = say_subject(plan);
    const size_t verb = choose_verb(animal, false, gap);
    say(lex_.verbs[verb].base);
    complement(verb, plan.pronoun, gap);
    if (pick({60, 40}) == 1) adverbial(adverbials(tense, false));
    say("?");
  }

  const GrammarTables& t_;
  const Lexicon& lex_;
  Chooser& chooser_;
  WordSink& out_;
};

// next_words(): replays the generator with a scripted list of choices. The first choice past
// the script stops the run and reports its weights, so the search can branch on it.
struct NeedChoice {};
struct LeftPrefix {};
struct Reached {};

class ScriptedChooser final : public Chooser {
 public:
  explicit ScriptedChooser(const std::vector<uint32_t>& script) : script_(script) {}
  size_t choose(std::span<const uint32_t> weights) override {
    if (pos_ < script_.size()) return script_[pos_++];
    branch_.assign(weights.begin(), weights.end());
    throw NeedChoice{};
  }
  const std::vector<uint32_t>& branch() const { return branch_; }

 private:
  const std::vector<uint32_t>& script_;
  size_t pos_ = 0;
  std::vector<uint32_t> branch_;
};

class PrefixSink final : public WordSink {
 public:
  explicit PrefixSink(std::span<const std::string> prefix) : prefix_(prefix) {}
  void word(std::string_view w) override {
    if (matched_ < prefix_.size()) {
      if (prefix_[matched_] != w) throw LeftPrefix{};
      ++matched_;
      return;
    }
    next_ = w;
    throw Reached{};
  }
  bool complete() const { return matched_ == prefix_.size(); }
  std::string_view next() const { return next_; }

 private:
  std::span<const std::string> prefix_;
  size_t matched_ = 0;
  std::string_view next_;
};

}  // namespace

Grammar::Grammar() : tables_(std::make_unique<GrammarTables>()) {
  for (const Verb& v : tables_->lex.verbs) {
    std::vector<Frame> frames;
    for (std::string_view spec : v.frames) frames.push_back(parse_frame(spec));
    tables_->frames.push_back(std::move(frames));
  }
}
Grammar::~Grammar() = default;
Grammar::Grammar(Grammar&&) noexcept = default;
Grammar& Grammar::operator=(Grammar&&) noexcept = default;

void Grammar::generate(Chooser& chooser, WordSink& sink) const {
  Generator(*tables_, chooser, sink).sentence();
}

std::vector<std::string> Grammar::vocabulary() const {
  const Lexicon& lex = tables_->lex;
  std::set<std::string> words;
  for (const Verb& v : lex.verbs)
    for (std::string_view f : {v.base, v.third, v.past, v.participle, v.ing})
      if (!f.empty()) words.emplace(f);
  for (const Noun& n : lex.nouns) {
    words.emplace(n.singular);
    if (!n.plural.empty()) words.emplace(n.plural);
  }
  for (const Adjective& a : lex.adjectives) words.emplace(a.word);
  for (std::string_view n : lex.names) words.emplace(n);
  for (const auto* list : {&lex.past, &lex.present, &lex.future, &lex.now, &lex.perfect,
                           &lex.perfect_negative, &lex.present_mid})
    for (const Adverbial& a : *list)
      for (std::string_view w : a.words) words.emplace(w);
  for (std::string_view w : lex.function_words) words.emplace(w);
  std::vector<std::string> vocab = {"<pad>", "<bos>", "<eos>", "<unk>"};
  vocab.insert(vocab.end(), words.begin(), words.end());
  return vocab;
}

std::vector<std::string> Grammar::class_names() {
  return {"verb_base", "verb_3sg", "verb_present_plural", "verb_past", "verb_participle",
          "verb_ing", "be_3sg", "be_plural", "be_1sg", "will"};
}

std::vector<std::string> Grammar::word_class(std::string_view name) const {
  const Lexicon& lex = tables_->lex;
  std::set<std::string> words;
  auto forms = [&](std::string_view Verb::*form) {
    for (const Verb& v : lex.verbs)
      if (!(v.*form).empty()) words.emplace(v.*form);
  };
  if (name == "verb_base") {
    forms(&Verb::base);
  } else if (name == "verb_3sg") {
    forms(&Verb::third);
    words.insert({"does", "doesn't"});
  } else if (name == "verb_present_plural") {
    forms(&Verb::base);
    words.insert({"do", "don't"});
  } else if (name == "verb_past") {
    forms(&Verb::past);
    words.insert({"did", "didn't", "was", "were", "wasn't", "weren't"});
  } else if (name == "verb_participle") {
    forms(&Verb::participle);
  } else if (name == "verb_ing") {
    forms(&Verb::ing);
  } else if (name == "be_3sg") {
    words.insert({"is", "isn't"});
  } else if (name == "be_plural") {
    words.insert({"are", "aren't"});
  } else if (name == "be_1sg") {
    words.insert({"am"});
  } else if (name == "will") {
    words.insert({"will", "won't"});
  } else {
    std::string known;
    for (const std::string& c : class_names()) known += (known.empty() ? "" : ", ") + c;
    MINIGPT_FAIL("unknown word class '{}' (known: {})", name, known);
  }
  return {words.begin(), words.end()};
}

std::vector<std::string> Grammar::next_words(std::span<const std::string> prefix,
                                             int64_t max_runs) const {
  std::set<std::string> found;
  std::vector<std::vector<uint32_t>> stack = {{}};
  int64_t runs = 0;
  while (!stack.empty()) {
    std::vector<uint32_t> script = std::move(stack.back());
    stack.pop_back();
    MINIGPT_CHECK(++runs <= max_runs, "next_words: more than {} generator runs for a prefix of {} words",
                  max_runs, prefix.size());
    ScriptedChooser chooser(script);
    PrefixSink sink(prefix);
    try {
      generate(chooser, sink);
      if (sink.complete()) found.emplace("<eos>");
    } catch (const NeedChoice&) {
      const std::vector<uint32_t>& w = chooser.branch();
      for (size_t i = w.size(); i-- > 0;)
        if (w[i] > 0) {
          std::vector<uint32_t> next = script;
          next.push_back(static_cast<uint32_t>(i));
          stack.push_back(std::move(next));
        }
    } catch (const LeftPrefix&) {
    } catch (const Reached&) {
      found.emplace(sink.next());
    }
  }
  return {found.begin(), found.end()};
}

}  // namespace minigpt::data
