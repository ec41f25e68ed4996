// Peers: how a `minigpt bench` subcommand runs its PyTorch peer script (bench/peers/*.py) and
// reads the JSON it answers, without ever trusting that answer.
//
// Every bench subcommand (model, train, softmax) times its own rows first or last, and runs
// the peer script as a child process that has exited before or after our timing: the two sides
// never share the cores while either is timed. The child inherits our CPU set (taskset), our
// environment, and gets the repository's python/ folder on PYTHONPATH.
//
// A peer that cannot run (no interpreter, no torch, a crash, garbage on stdout, a field of the
// wrong type) never fails the benchmark: our rows are printed, the peer cells stay empty and a
// note says why. This file does not time anything and does not know any peer's columns.
#pragma once

#include "core/report.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace minigpt::cli {

struct PeerOptions {
  bool enabled = true;  // --no-peers turns it off
  std::string python;   // --peer-python; empty: $MINIGPT_PEER_PYTHON, else python3
};

// Adds --no-peers and --peer-python to a bench subcommand; `script` names the peer in the help.
void add_peer_options(CLI::App* cmd, PeerOptions& options, const std::string& script);

// The interpreter the peers run with (the option, else $MINIGPT_PEER_PYTHON, else python3).
std::string peer_python(const PeerOptions& options);

// A shell command running `<python> <args>` with the repository's python/ folder, then
// `extra_pythonpath` (if any), then the caller's PYTHONPATH on PYTHONPATH. `args` is already
// quoted for the shell (use shell_quote for paths).
std::string peer_command(const PeerOptions& options, const std::string& args, const std::string& extra_pythonpath = "");

// The repository's bench/peers/<name>, single-quoted for the shell.
std::string peer_script(const std::string& name);

// 'text' for sh, with any ' inside escaped.
std::string shell_quote(const std::string& text);

// Runs a shell command (a peer script) and returns its stdout parsed as a JSON object, copying
// the object's "notes" (strings) into the report prefixed by `what`; nullopt, and a note saying
// why the peer cells are empty, when the command cannot start, fails, or prints no JSON object.
std::optional<nlohmann::json> run_json(const std::string& cmd, const std::string& what, Report& report);

// Typed reads of a peer's answer that never throw: the value when `key` holds that type (an
// integer for json_int, any number for json_number), else nullopt.
std::optional<std::string> json_string(const nlohmann::json& j, const char* key);
std::optional<double> json_number(const nlohmann::json& j, const char* key);
std::optional<int64_t> json_int(const nlohmann::json& j, const char* key);

// Calls take(row) for every object of the array under `key` of a peer's answer; take returns
// false for a row it rejects (a field missing or of the wrong type). One note says how many
// entries were left out (rejected, or not objects) and what a row needs (`needs`); another
// when there is no such array.
void for_each_peer_row(const nlohmann::json& answer, const char* key, const std::string& what,
                       const std::string& needs, Report& report,
                       const std::function<bool(const nlohmann::json& row)>& take);

// The "torch_version" a peer reported, for the report's header: the string, or "none" when it
// is null (torch not importable) or missing.
std::string peer_torch_version(const nlohmann::json& answer);

}  // namespace minigpt::cli
