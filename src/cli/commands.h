// The subcommands of `minigpt`, one add_*_command per cmd_*.cpp file. Each registers its
// options and a callback on the given CLI11 app; errors are thrown as minigpt::Error and
// turned into "minigpt: error: ..." and exit code 1 by main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace minigpt::cli {

// Options every subcommand shares.
struct GlobalOptions {
  int threads = 0;  // -t/--threads; 0 = every core of the machine
  int resolved_threads() const;
  std::vector<std::string> argv;  // the command line as typed (`--gpus N` re-runs it under mpirun)
};

// The shipped model, used when -m is not given.
inline constexpr const char* kDefaultModel = "models/grammar-minigpt.safetensors";
// Resolves -m: the given path, else the shipped model (relative to the working directory,
// then to the executable's source tree). Error if none exists.
std::string resolve_model_path(const std::string& given);

void add_info_command(CLI::App& app, GlobalOptions& global);          // cmd_info.cpp
void add_forward_command(CLI::App& app, GlobalOptions& global);       // cmd_forward.cpp
void add_predict_command(CLI::App& app, GlobalOptions& global);       // cmd_predict.cpp
void add_generate_command(CLI::App& app, GlobalOptions& global);      // cmd_generate.cpp
void add_corpus_command(CLI::App& app, GlobalOptions& global);        // cmd_corpus.cpp
void add_train_command(CLI::App& app, GlobalOptions& global);         // cmd_train.cpp
void add_eval_probes_command(CLI::App& app, GlobalOptions& global);   // cmd_eval_probes.cpp
void add_demo_command(CLI::App& app, GlobalOptions& global);          // cmd_demo.cpp
void add_compile_command(CLI::App& app, GlobalOptions& global);       // cmd_compile.cpp
void add_parallel_plan_command(CLI::App& app, GlobalOptions& global); // cmd_parallel_plan.cpp
void add_bench_model_command(CLI::App& bench, GlobalOptions& global);    // cmd_bench_model.cpp
void add_bench_train_command(CLI::App& bench, GlobalOptions& global);    // cmd_bench_train.cpp
void add_bench_softmax_command(CLI::App& bench, GlobalOptions& global);  // cmd_bench_softmax.cpp

}  // namespace minigpt::cli
