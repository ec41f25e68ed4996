// `minigpt corpus --sentences N --seed S [-o FILE]`: sentences of the grammar corpus, one per
// line, in canonical text (lowercase words and punctuation separated by single spaces, the
// form Tokenizer::decode produces). Deterministic for a seed on every platform. With -o the
// file is written atomically (a reader never sees a partial corpus); without it, stdout.
#include "cli/commands.h"
#include "core/error.h"
#include "data/corpus.h"
#include "io/atomic_file.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>

namespace minigpt::cli {

namespace {

struct CorpusOptions {
  int64_t sentences = 1000;
  uint64_t seed = 42;
  std::string output;
};

void run_corpus(const CorpusOptions& opt) {
  data::CorpusGenerator gen(opt.seed);
  std::unique_ptr<io::AtomicFileWriter> file;
  if (!opt.output.empty()) file = std::make_unique<io::AtomicFileWriter>(opt.output);
  std::string buffer;
  int64_t words = 0;
  auto flush = [&] {
    if (file)
      file->write(buffer);
    else
      MINIGPT_CHECK(std::fwrite(buffer.data(), 1, buffer.size(), stdout) == buffer.size(), "writing the corpus to stdout failed");
    buffer.clear();
  };
  for (int64_t i = 0; i < opt.sentences; ++i) {
    for (std::string_view w : gen.next_words()) {
      buffer += w;
      buffer += ' ';
      ++words;
    }
    buffer.back() = '\n';
    if (buffer.size() > (1 << 20)) flush();
  }
  flush();
  if (file) {
    file->commit();
    // Each sentence becomes <bos> words <eos> in the training stream.
    fmt::print(stderr, "minigpt: wrote {} sentences ({} words, {} tokens with <bos>/<eos>) to {}\n", opt.sentences,
               words, words + 2 * opt.sentences, opt.output);
  } else {
    std::fflush(stdout);
  }
}

}  // namespace

void add_corpus_command(CLI::App& app, GlobalOptions& global) {
  auto opt = std::make_shared<CorpusOptions>();
  CLI::App* cmd = app.add_subcommand("corpus", "Generate grammar-corpus sentences, one per line");
  cmd->add_option("-n,--sentences", opt->sentences, "how many sentences")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("-s,--seed", opt->seed, "random seed (same seed, same corpus, on every platform)");
  cmd->add_option("-o,--output", opt->output, "output file, written atomically (default: stdout)");
  cmd->callback([opt] { run_corpus(*opt); });
}

}  // namespace minigpt::cli
