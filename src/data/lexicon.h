// The grammar corpus's word lists: verbs with their five forms and complement frames, nouns
// with number and meaning classes, adjectives, names and time adverbials.
//
// What it defines: plain constant tables (lexicon()), nothing random. The grammar
// (data/grammar.h) draws from them; the vocabulary is built from them, so every word the
// grammar can emit is in the vocabulary by construction.
// What it does not do: choose anything, or know about token ids.
//
// Meaning classes keep sentences plausible ("she ate an apple", not "she ate a river"): each
// noun carries a bit set of classes and each object slot of a verb frame names the classes it
// accepts.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace minigpt::data {

// Meaning classes of nouns (bit set). A noun may be in several ("horse": animal and ride).
enum NounClass : uint32_t {
  kPerson = 1u << 0,
  kAnimal = 1u << 1,
  kFood = 1u << 2,
  kDrink = 1u << 3,
  kThing = 1u << 4,
  kText = 1u << 5,
  kPlace = 1u << 6,
  kVehicle = 1u << 7,   // drive, ride, wash, fix
  kToy = 1u << 8,       // play with, throw, kick, catch
  kBaked = 1u << 9,     // bake, make
  kOpenable = 1u << 10, // open, close
  kBreakable = 1u << 11,
  kClothes = 1u << 12,  // wear
  kPlant = 1u << 13,    // plant, grow
  kMusic = 1u << 14,    // listen to, hear, sing
  kTale = 1u << 15,     // tell
  kPicture = 1u << 16,  // draw, paint
  kSeat = 1u << 17,     // sit on
  kDwelling = 1u << 18, // live in, stay in
  kWater = 1u << 19,    // swim in
  kRoom = 1u << 20,     // clean
  kBuildable = 1u << 21,
  kClimbable = 1u << 22,
  kBaby = 1u << 23,     // feed, hold
  kRide = 1u << 24,     // ride
};
inline constexpr uint32_t kAnimate = kPerson | kAnimal;

struct Noun {
  std::string_view singular;
  std::string_view plural;  // empty: no plural in the grammar (mass nouns, places)
  uint32_t classes;
  uint32_t weight;
  bool mass = false;        // takes no "a/an" and no plural: "some milk", "the music", "milk"
};

struct Adjective {
  std::string_view word;
  bool animate_only;  // "hungry", "happy": only with people and animals
  uint32_t weight;
};

// One complement pattern of a verb, as space-separated slots: a literal word ("to", "home")
// or an object "O:<classes>" with classes joined by '|' ("O:food|thing"). "" = no complement.
struct Verb {
  std::string_view base, third, past, participle, ing;  // ing empty: stative, no progressive
  uint32_t weight;
  bool animals;  // animals (and "it") may be its subject
  std::vector<std::string_view> frames;
};

// A time adverbial (one or more words) and how often it is drawn among its tense's list.
struct Adverbial {
  std::vector<std::string_view> words;
  uint32_t weight;
};

struct Lexicon {
  std::vector<Verb> verbs;
  std::vector<Noun> nouns;
  std::vector<Adjective> adjectives;
  std::vector<std::string_view> names;  // third person singular, always people
  // Time adverbials by the tense they fix. Sentence-initial or final.
  std::vector<Adverbial> past, present, future, now, perfect, perfect_negative;
  std::vector<Adverbial> present_mid;  // between subject and verb: "she usually walks"
  // Closed-class words the grammar emits outside the tables above (pronouns, auxiliaries,
  // determiners, prepositions, punctuation).
  std::vector<std::string_view> function_words;
};

// The one lexicon (built once, immutable). Throws Error if a frame spec names an unknown
// class (checked at construction).
const Lexicon& lexicon();

// Parses "food|thing" into a NounClass bit set; Error on an unknown class name.
uint32_t parse_noun_classes(std::string_view spec);

}  // namespace minigpt::data
