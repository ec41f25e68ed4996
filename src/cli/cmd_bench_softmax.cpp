// TODO(owner): placeholder until this subcommand is implemented.
#include "cli/commands.h"
#include "core/error.h"

namespace minigpt::cli {

void add_bench_softmax_command(CLI::App& bench, GlobalOptions& global) {
  CLI::App* cmd = bench.add_subcommand("softmax", "(not implemented yet)");
  cmd->callback([] { MINIGPT_FAIL("'softmax' is not implemented yet"); });
}

}  // namespace minigpt::cli
