// Bindings of the word tokenizer (src/data/tokenizer.h): Tokenizer(vocab), encode, decode,
// split, id/token lookups and the vocabulary. Text is str (UTF-8); ids are Python ints.
//
// Not here: the corpus generator and the probes.
#include "common.h"

#include "data/tokenizer.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

namespace minigpt::py {

void bind_tokenizer(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer", "Word-level tokenizer; ids 0..3 are <pad> <bos> <eos> <unk>.")
      .def(nb::init<std::vector<std::string>>(), nb::arg("vocab"),
           "Builds a tokenizer from a vocabulary (index = id); Error on misplaced specials or repeats.")
      .def_static("split", &Tokenizer::split, nb::arg("text"),
                  "Lowercased words and punctuation tokens, in order.")
      .def("encode", [](const Tokenizer& t, std::string_view text) { return t.encode(text).ids; },
           nb::arg("text"), "Token ids of text (no <bos>/<eos>); unknown words become <unk> (id 3).")
      .def("encode_with_unknown", [](const Tokenizer& t, std::string_view text) {
             Tokenizer::Encoded e = t.encode(text);
             return std::make_pair(std::move(e.ids), std::move(e.unknown));
           }, nb::arg("text"), "(ids, unknown words in order of appearance).")
      .def("decode", [](const Tokenizer& t, const std::vector<int32_t>& ids) { return t.decode(ids); },
           nb::arg("ids"), "Words joined with spaces; Error on an id out of range.")
      .def("id", &Tokenizer::id, nb::arg("token"), "Id of a token (3, <unk>, when absent).")
      .def("token", &Tokenizer::token, nb::arg("id"), "Token of an id; Error when out of range.")
      .def_prop_ro("vocab", &Tokenizer::vocab)
      .def("__len__", &Tokenizer::size)
      .def_ro_static("PAD", &Tokenizer::kPad)
      .def_ro_static("BOS", &Tokenizer::kBos)
      .def_ro_static("EOS", &Tokenizer::kEos)
      .def_ro_static("UNK", &Tokenizer::kUnk);
}

}  // namespace minigpt::py
