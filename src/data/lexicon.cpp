// The word lists of the grammar corpus (see lexicon.h). Weights are relative frequencies
// within a list; a few common verbs carry most of the mass, as in real text.
#include "data/lexicon.h"

#include "core/error.h"

#include <array>
#include <utility>

namespace minigpt::data {

namespace {

constexpr std::array<std::pair<std::string_view, uint32_t>, 25> kClassNames{{
    {"person", kPerson},     {"animal", kAnimal},       {"food", kFood},
    {"drink", kDrink},       {"thing", kThing},         {"text", kText},
    {"place", kPlace},       {"vehicle", kVehicle},     {"toy", kToy},
    {"baked", kBaked},       {"openable", kOpenable},   {"breakable", kBreakable},
    {"clothes", kClothes},   {"plant", kPlant},         {"music", kMusic},
    {"tale", kTale},         {"picture", kPicture},     {"seat", kSeat},
    {"dwelling", kDwelling}, {"water", kWater},         {"room", kRoom},
    {"buildable", kBuildable}, {"climbable", kClimbable}, {"baby", kBaby},
    {"ride", kRide},
}};

std::vector<Verb> make_verbs() {
  // base, 3rd person, past, participle, -ing (empty: stative), weight, animals may be subject,
  // frames.
  return {
      // Motion.
      {"walk", "walks", "walked", "walked", "walking", 20, true, {"", "to O:place", "home"}},
      {"run", "runs", "ran", "run", "running", 7, true, {"", "to O:place", "home"}},
      {"go", "goes", "went", "gone", "going", 30, true, {"to O:place", "home"}},
      {"come", "comes", "came", "come", "coming", 6, true, {"home", "to O:place"}},
      {"drive", "drives", "drove", "driven", "driving", 5, false, {"to O:place", "home", "O:vehicle"}},
      {"ride", "rides", "rode", "ridden", "riding", 3, false, {"O:ride", "to O:place"}},
      {"fly", "flies", "flew", "flown", "flying", 3, true, {"", "to O:place"}},
      {"swim", "swims", "swam", "swum", "swimming", 4, true, {"", "in O:water"}},
      {"return", "returns", "returned", "returned", "returning", 3, true, {"home", "to O:place"}},
      {"climb", "climbs", "climbed", "climbed", "climbing", 3, true, {"O:climbable"}},
      {"jump", "jumps", "jumped", "jumped", "jumping", 3, true, {""}},
      {"dance", "dances", "danced", "danced", "dancing", 3, false, {"", "with O:person"}},
      {"sing", "sings", "sang", "sung", "singing", 4, true, {"", "O:music"}},
      {"sleep", "sleeps", "slept", "slept", "sleeping", 5, true, {"", "in O:dwelling"}},
      {"sit", "sits", "sat", "sat", "sitting", 3, true, {"", "on O:seat"}},
      {"wait", "waits", "waited", "waited", "waiting", 4, true, {"", "for O:person|vehicle"}},
      {"work", "works", "worked", "worked", "working", 4, false, {"", "at O:place"}},
      {"play", "plays", "played", "played", "playing", 15, true, {"", "with O:person|animal|toy"}},
      {"laugh", "laughs", "laughed", "laughed", "laughing", 3, false, {"", "at O:person|animal"}},
      {"listen", "listens", "listened", "listened", "listening", 3, true, {"to O:music|person"}},
      {"talk", "talks", "talked", "talked", "talking", 4, false, {"to O:person", "with O:person"}},
      {"live", "lives", "lived", "lived", "living", 4, true, {"in O:dwelling"}},
      {"stay", "stays", "stayed", "stayed", "staying", 3, true, {"home", "in O:dwelling"}},
      {"fall", "falls", "fell", "fallen", "falling", 2, true, {""}},
      {"study", "studies", "studied", "studied", "studying", 3, false, {"", "at O:place"}},
      {"look", "looks", "looked", "looked", "looking", 4, true, {"at O:person|animal|thing|picture", "for O:thing|animal|person"}},
      // Things done to objects.
      {"eat", "eats", "ate", "eaten", "eating", 20, true, {"O:food", ""}},
      {"cook", "cooks", "cooked", "cooked", "cooking", 4, false, {"O:food"}},
      {"drink", "drinks", "drank", "drunk", "drinking", 5, true, {"O:drink"}},
      {"bake", "bakes", "baked", "baked", "baking", 3, false, {"O:baked"}},
      {"buy", "buys", "bought", "bought", "buying", 7, false, {"O:food|thing|text|drink"}},
      {"sell", "sells", "sold", "sold", "selling", 3, false, {"O:food|thing"}},
      {"make", "makes", "made", "made", "making", 5, false, {"O:baked|toy|buildable"}},
      {"like", "likes", "liked", "liked", "", 5, true, {"O:food|animal|person|music|drink|toy"}},
      {"love", "loves", "loved", "loved", "", 4, true, {"O:food|animal|person|music|drink"}},
      {"want", "wants", "wanted", "wanted", "", 4, true, {"O:food|thing|drink|toy"}},
      {"need", "needs", "needed", "needed", "", 3, false, {"O:thing|vehicle"}},
      {"know", "knows", "knew", "known", "", 3, false, {"O:person"}},
      {"see", "sees", "saw", "seen", "seeing", 18, true, {"O:person|animal|thing|place"}},
      {"hear", "hears", "heard", "heard", "hearing", 4, true, {"O:music|person|animal"}},
      {"watch", "watches", "watched", "watched", "watching", 5, true, {"O:person|animal"}},
      {"find", "finds", "found", "found", "finding", 6, true, {"O:thing|animal|text|toy"}},
      {"lose", "loses", "lost", "lost", "losing", 4, false, {"O:thing|toy"}},
      {"take", "takes", "took", "taken", "taking", 5, false, {"O:thing|food|text", "O:person|animal to O:place"}},
      {"give", "gives", "gave", "given", "giving", 5, false, {"O:thing|food|text to O:person"}},
      {"bring", "brings", "brought", "brought", "bringing", 4, false, {"O:thing|food|text", "O:food|thing to O:person"}},
      {"send", "sends", "sent", "sent", "sending", 3, false, {"O:text to O:person", "O:text"}},
      {"write", "writes", "wrote", "written", "writing", 5, false, {"O:text"}},
      {"draw", "draws", "drew", "drawn", "drawing", 3, false, {"O:picture|animal"}},
      {"paint", "paints", "painted", "painted", "painting", 3, false, {"O:picture|dwelling|seat|vehicle"}},
      {"open", "opens", "opened", "opened", "opening", 4, false, {"O:openable"}},
      {"close", "closes", "closed", "closed", "closing", 3, false, {"O:openable"}},
      {"carry", "carries", "carried", "carried", "carrying", 3, true, {"O:thing|food|baby"}},
      {"throw", "throws", "threw", "thrown", "throwing", 3, false, {"O:toy"}},
      {"catch", "catches", "caught", "caught", "catching", 3, true, {"O:toy|animal"}},
      {"break", "breaks", "broke", "broken", "breaking", 3, true, {"O:breakable"}},
      {"fix", "fixes", "fixed", "fixed", "fixing", 3, false, {"O:breakable|vehicle"}},
      {"wash", "washes", "washed", "washed", "washing", 3, false, {"O:vehicle|animal|clothes"}},
      {"clean", "cleans", "cleaned", "cleaned", "cleaning", 3, false, {"O:room|vehicle"}},
      {"build", "builds", "built", "built", "building", 3, false, {"O:buildable"}},
      {"visit", "visits", "visited", "visited", "visiting", 4, false, {"O:person|place"}},
      {"meet", "meets", "met", "met", "meeting", 4, false, {"O:person"}},
      {"help", "helps", "helped", "helped", "helping", 4, true, {"O:person|animal"}},
      {"call", "calls", "called", "called", "calling", 3, false, {"O:person"}},
      {"feed", "feeds", "fed", "fed", "feeding", 3, false, {"O:animal|baby"}},
      {"teach", "teaches", "taught", "taught", "teaching", 2, false, {"O:person"}},
      {"forget", "forgets", "forgot", "forgotten", "forgetting", 3, false, {"O:thing|text"}},
      {"hide", "hides", "hid", "hidden", "hiding", 3, true, {"O:thing|food|toy", ""}},
      {"wear", "wears", "wore", "worn", "wearing", 3, false, {"O:clothes"}},
      {"show", "shows", "showed", "shown", "showing", 3, false, {"O:thing|picture to O:person"}},
      {"tell", "tells", "told", "told", "telling", 3, false, {"O:tale", "O:tale to O:person"}},
      {"plant", "plants", "planted", "planted", "planting", 2, false, {"O:plant"}},
      {"push", "pushes", "pushed", "pushed", "pushing", 2, true, {"O:thing|vehicle|toy"}},
  };
}

std::vector<Noun> make_nouns() {
  return {
      // People.
      {"man", "men", kPerson, 6},
      {"woman", "women", kPerson, 6},
      {"boy", "boys", kPerson, 6},
      {"girl", "girls", kPerson, 6},
      {"child", "children", kPerson, 6},
      {"baby", "babies", kPerson | kBaby, 3},
      {"friend", "friends", kPerson, 6},
      {"teacher", "teachers", kPerson, 5},
      {"doctor", "doctors", kPerson, 4},
      {"student", "students", kPerson, 4},
      {"farmer", "farmers", kPerson, 3},
      {"neighbor", "neighbors", kPerson, 3},
      {"brother", "brothers", kPerson, 4},
      {"sister", "sisters", kPerson, 4},
      {"mother", "mothers", kPerson, 4},
      {"father", "fathers", kPerson, 4},
      // Animals.
      {"dog", "dogs", kAnimal, 8},
      {"cat", "cats", kAnimal, 8},
      {"bird", "birds", kAnimal, 5},
      {"horse", "horses", kAnimal | kRide, 4},
      {"cow", "cows", kAnimal, 3},
      {"mouse", "mice", kAnimal, 3},
      {"fox", "foxes", kAnimal, 3},
      {"rabbit", "rabbits", kAnimal, 3},
      {"lion", "lions", kAnimal, 2},
      {"monkey", "monkeys", kAnimal, 2},
      // Food.
      {"apple", "apples", kFood, 6},
      {"banana", "bananas", kFood, 3},
      {"cake", "cakes", kFood | kBaked, 5},
      {"sandwich", "sandwiches", kFood, 4},
      {"egg", "eggs", kFood, 4},
      {"orange", "oranges", kFood, 3},
      {"pizza", "pizzas", kFood, 3},
      {"cookie", "cookies", kFood | kBaked, 3},
      {"pie", "pies", kFood | kBaked, 3},
      {"bread", "", kFood | kBaked, 3, true},
      {"rice", "", kFood, 2, true},
      {"soup", "", kFood, 2, true},
      // Drinks and sounds (mass).
      {"milk", "", kDrink, 3, true},
      {"water", "", kDrink, 3, true},
      {"tea", "", kDrink, 3, true},
      {"coffee", "", kDrink, 3, true},
      {"juice", "", kDrink, 2, true},
      {"music", "", kMusic, 3, true},
      // Things.
      {"ball", "balls", kThing | kToy, 5},
      {"box", "boxes", kThing | kOpenable | kBuildable, 4},
      {"car", "cars", kVehicle, 5},
      {"bike", "bikes", kVehicle | kRide, 4},
      {"bus", "buses", kVehicle, 3},
      {"boat", "boats", kVehicle | kBuildable, 3},
      {"key", "keys", kThing, 4},
      {"phone", "phones", kThing | kBreakable, 4},
      {"bag", "bags", kThing | kOpenable, 4},
      {"hat", "hats", kThing | kClothes, 3},
      {"coat", "coats", kThing | kClothes, 3},
      {"chair", "chairs", kThing | kSeat | kBuildable | kBreakable, 3},
      {"table", "tables", kThing | kBuildable, 3},
      {"door", "doors", kOpenable, 3},
      {"window", "windows", kOpenable | kBreakable, 3},
      {"cup", "cups", kThing | kBreakable, 3},
      {"bottle", "bottles", kThing | kOpenable | kBreakable, 2},
      {"toy", "toys", kThing | kToy | kBreakable, 3},
      {"kite", "kites", kThing | kToy, 2},
      {"gift", "gifts", kThing | kOpenable, 3},
      {"picture", "pictures", kThing | kPicture, 3},
      {"tree", "trees", kPlant | kClimbable, 3},
      {"flower", "flowers", kPlant, 3},
      // Texts and songs.
      {"book", "books", kThing | kText, 6},
      {"letter", "letters", kText | kOpenable, 4},
      {"story", "stories", kText | kTale, 4},
      {"poem", "poems", kText | kTale, 2},
      {"song", "songs", kMusic, 3},
      // Places (singular only).
      {"park", "", kPlace, 8},
      {"school", "", kPlace, 6},
      {"store", "", kPlace, 5},
      {"garden", "", kPlace | kDwelling, 4},
      {"house", "", kPlace | kDwelling | kPicture | kBuildable | kRoom, 5},
      {"library", "", kPlace, 3},
      {"beach", "", kPlace, 3},
      {"city", "", kPlace | kDwelling, 4},
      {"village", "", kPlace | kDwelling, 2},
      {"river", "", kPlace | kWater, 3},
      {"lake", "", kPlace | kWater, 3},
      {"forest", "", kPlace | kDwelling, 3},
      {"station", "", kPlace, 3},
      {"office", "", kPlace | kRoom, 3},
      {"market", "", kPlace, 3},
      {"zoo", "", kPlace, 2},
      {"farm", "", kPlace | kDwelling, 2},
      {"kitchen", "", kPlace | kRoom, 3},
      {"museum", "", kPlace, 2},
      {"hill", "", kPlace | kClimbable, 2},
      {"bed", "", kSeat, 2},
      {"bench", "", kSeat, 2},
  };
}

std::vector<Adjective> make_adjectives() {
  return {
      {"old", false, 6},    {"young", true, 4},   {"big", false, 6},    {"small", false, 5},
      {"little", false, 5}, {"happy", true, 4},   {"sad", true, 2},     {"tall", true, 3},
      {"red", false, 3},    {"blue", false, 3},   {"green", false, 2},  {"white", false, 3},
      {"black", false, 3},  {"new", false, 5},    {"good", false, 4},   {"hungry", true, 3},
      {"tired", true, 3},   {"angry", true, 3},   {"kind", true, 2},    {"funny", true, 2},
      {"quiet", false, 2},  {"busy", true, 2},    {"brave", true, 2},   {"lazy", true, 2},
      {"ugly", false, 2},   {"empty", false, 1},  {"beautiful", false, 3}, {"clever", true, 2},
  };
}

std::vector<std::string_view> make_names() {
  return {"tom", "mary", "john", "anna", "emma", "david", "sarah", "peter",
          "lucy", "james", "alice", "ben", "kate", "sam"};
}

using W = std::vector<std::string_view>;

std::vector<Adverbial> make_past() {
  std::vector<Adverbial> a = {
      {W{"yesterday"}, 40}, {W{"yesterday", "morning"}, 3}, {W{"yesterday", "evening"}, 2},
      {W{"last", "night"}, 6}, {W{"last", "week"}, 9}, {W{"last", "month"}, 3},
      {W{"last", "year"}, 4}, {W{"last", "weekend"}, 3},
      {W{"a", "week", "ago"}, 2}, {W{"a", "year", "ago"}, 2},
  };
  for (std::string_view day : {"monday", "saturday", "sunday"})
    a.push_back({W{"last", day}, 1});
  for (std::string_view n : {"two", "three", "ten"})
    for (std::string_view unit : {"days", "weeks", "years"})
      a.push_back({W{n, unit, "ago"}, unit == "days" ? 2u : 1u});
  return a;
}

std::vector<Adverbial> make_present() {
  std::vector<Adverbial> a = {
      {W{"every", "day"}, 30}, {W{"every", "morning"}, 6}, {W{"every", "night"}, 4},
      {W{"every", "evening"}, 2}, {W{"every", "week"}, 5}, {W{"every", "weekend"}, 3},
      {W{"every", "year"}, 2}, {W{"usually"}, 8}, {W{"sometimes"}, 4}, {W{"often"}, 2},
  };
  for (std::string_view day : {"monday", "saturday", "sunday"})
    a.push_back({W{"every", day}, 1});
  return a;
}

std::vector<Adverbial> make_future() {
  std::vector<Adverbial> a = {
      {W{"tomorrow"}, 35}, {W{"tomorrow", "morning"}, 3}, {W{"tomorrow", "evening"}, 2},
      {W{"next", "week"}, 10}, {W{"next", "month"}, 3}, {W{"next", "year"}, 4},
      {W{"next", "weekend"}, 3}, {W{"soon"}, 4}, {W{"tonight"}, 4},
  };
  for (std::string_view day : {"monday", "saturday", "sunday"})
    a.push_back({W{"next", day}, 1});
  for (std::string_view n : {"two", "three", "ten"})
    for (std::string_view unit : {"days", "weeks", "years"})
      a.push_back({W{"in", n, unit}, 1});
  return a;
}

}  // namespace

uint32_t parse_noun_classes(std::string_view spec) {
  uint32_t mask = 0;
  while (!spec.empty()) {
    const size_t bar = spec.find('|');
    const std::string_view name = spec.substr(0, bar);
    bool found = false;
    for (const auto& [class_name, bit] : kClassNames)
      if (class_name == name) {
        mask |= bit;
        found = true;
      }
    MINIGPT_CHECK(found, "unknown noun class '{}' in a verb frame", name);
    spec = bar == std::string_view::npos ? std::string_view{} : spec.substr(bar + 1);
  }
  MINIGPT_CHECK(mask != 0, "empty noun class list in a verb frame");
  return mask;
}

const Lexicon& lexicon() {
  static const Lexicon lex = [] {
    Lexicon l;
    l.verbs = make_verbs();
    l.nouns = make_nouns();
    l.adjectives = make_adjectives();
    l.names = make_names();
    l.past = make_past();
    l.present = make_present();
    l.future = make_future();
    l.now = {{W{"now"}, 20}, {W{"right", "now"}, 8}, {W{"at", "the", "moment"}, 6}};
    l.perfect = {{W{"already"}, 6}, {W{"before"}, 3}, {W{"twice"}, 2}, {W{"this", "week"}, 3}};
    l.perfect_negative = {{W{"yet"}, 1}};
    l.present_mid = {{W{"usually"}, 10}, {W{"often"}, 6}, {W{"always"}, 6},
                     {W{"sometimes"}, 5}, {W{"never"}, 4}};
    l.function_words = {
        // Pronouns, subject and object.
        "i", "you", "he", "she", "it", "we", "they", "me", "him", "her", "us", "them",
        // Determiners and numerals.
        "the", "a", "an", "this", "that", "these", "those", "my", "your", "his", "our",
        "their", "some", "many", "two", "three", "ten",
        // Prepositions, conjunction, question words.
        "to", "at", "in", "on", "with", "for", "and", "what", "where", "home",
        // Auxiliaries and negation.
        "do", "does", "did", "don't", "doesn't", "didn't", "not", "will", "won't", "am", "is",
        "are", "was", "were", "isn't", "aren't", "wasn't", "weren't", "has", "have", "hasn't",
        "haven't",
        // Punctuation (the grammar emits . , ?; ! and ' are tokens of the tokenizer).
        ".", ",", "?", "!", "'"};
    for (const Verb& v : l.verbs)
      for (std::string_view frame : v.frames) {
        size_t pos = 0;
        while ((pos = frame.find("O:", pos)) != std::string_view::npos) {
          const size_t end = frame.find(' ', pos);
          parse_noun_classes(frame.substr(pos + 2, end == std::string_view::npos ? end : end - pos - 2));
          pos += 2;
        }
      }
    return l;
  }();
  return lex;
}

}  // namespace minigpt::data
