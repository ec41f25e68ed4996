// TODO(owner): placeholder until this subcommand is implemented.
#include "cli/commands.h"
#include "core/error.h"

namespace minigpt::cli {

void add_eval_probes_command(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand("eval-probes", "(not implemented yet)");
  cmd->callback([] { MINIGPT_FAIL("'eval-probes' is not implemented yet"); });
}

}  // namespace minigpt::cli
