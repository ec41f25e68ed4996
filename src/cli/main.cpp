// minigpt: the command-line front end. Subcommands live one per cmd_*.cpp file.
#include "cli/commands.h"
#include "core/error.h"
#include "core/isa.h"
#include "dist/local_ranks.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

// OpenBLAS (the Linear's fallback on CPUs without AVX-512, always single-threaded: see
// kernels/cpu/linear.cpp) starts a server thread per core when the library loads, and each one
// spins for about 0.1 s before it sleeps: a busy thread on another core during the first timed
// runs of every benchmark (measured on the 2-core machine: `bench model -t 1` at a CPU share of
// 2.0 instead of 1.0). main() stops them before any work. Weak references: an OpenBLAS without
// a thread server (the serial build) has no blas_thread_shutdown_, and then nothing is called.
extern "C" {
void openblas_set_num_threads(int threads) __attribute__((weak));
int blas_thread_shutdown_(void) __attribute__((weak));
}

namespace minigpt::cli {

int GlobalOptions::resolved_threads() const {
  if (threads > 0) return threads;
  // Under mpirun the ranks of this host share its cores (2 ranks on 2 cores: 1 thread each);
  // more threads than cores would make every rank's threads wait on each other's.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / dist::local_rank_count());
}

std::string resolve_model_path(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) {
    MINIGPT_CHECK(fs::exists(given), "model file '{}' does not exist", given);
    return given;
  }
  for (const fs::path& root : {fs::current_path(), fs::path(MINIGPT_SOURCE_DIR)}) {
    const fs::path candidate = root / kDefaultModel;
    if (fs::exists(candidate)) return candidate.string();
  }
  MINIGPT_FAIL("no model given (-m) and the shipped model '{}' was not found", kDefaultModel);
}

// CLI11 reads an unknown word where a subcommand belongs as a stray positional and says only
// "A subcommand is required": name it instead. The first word that is not an option (or -t's
// value) must be a subcommand, and so must the word after `bench`.
void check_subcommand_names(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "-t" || word == "--threads") {
      ++i;
      continue;
    }
    if (word.empty() || word[0] == '-') continue;
    CLI::App* sub = nullptr;
    for (CLI::App* candidate : level->get_subcommands([](CLI::App*) { return true; }))
      if (candidate->get_name() == word) sub = candidate;
    if (sub == nullptr) {
      std::string names;
      for (CLI::App* candidate : level->get_subcommands([](CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + candidate->get_name();
      MINIGPT_FAIL("unknown subcommand '{}'{} (one of: {})", word,
                   level == &app ? "" : fmt::format(" of '{}'", level->get_name()), names);
    }
    if (sub->get_subcommands([](CLI::App*) { return true; }).empty()) return;  // its own arguments follow
    level = sub;
  }
}

}  // namespace minigpt::cli

int main(int argc, char** argv) {
  if (openblas_set_num_threads && blas_thread_shutdown_) {
    openblas_set_num_threads(1);
    blas_thread_shutdown_();
  }
  using namespace minigpt::cli;
  CLI::App app{"minigpt: the grammar MiniGPT engine (C++20, optional CUDA)"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may follow the subcommand: `minigpt bench model -t 2`
  GlobalOptions global;
  global.argv.assign(argv, argv + argc);
  app.add_option("-t,--threads", global.threads, "CPU threads (default: every core; under mpirun, the cores / the ranks on this host)")
      ->check(CLI::Range(1, 1024));

  add_info_command(app, global);
  add_forward_command(app, global);
  add_predict_command(app, global);
  add_generate_command(app, global);
  add_corpus_command(app, global);
  add_train_command(app, global);
  add_eval_probes_command(app, global);
  add_demo_command(app, global);
  add_compile_command(app, global);
  add_parallel_plan_command(app, global);
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: model, train, softmax");
  bench->require_subcommand(1);
  add_bench_model_command(*bench, global);
  add_bench_train_command(*bench, global);
  add_bench_softmax_command(*bench, global);

  try {
    minigpt::active_isa();  // a bad MINIGPT_ISA is reported here, before any subcommand runs
    check_subcommand_names(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const minigpt::Error& e) {
    fmt::print(stderr, "minigpt: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "minigpt: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}
