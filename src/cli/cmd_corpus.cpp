// TODO(owner): placeholder until this subcommand is implemented.
#include "cli/commands.h"
#include "core/error.h"

namespace minigpt::cli {

void add_corpus_command(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand("corpus", "(not implemented yet)");
  cmd->callback([] { MINIGPT_FAIL("'corpus' is not implemented yet"); });
}

}  // namespace minigpt::cli
