// Running a bench subcommand's peer script and reading its JSON answer defensively. See peers.h.
#include "cli/peers.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include <sys/wait.h>

namespace minigpt::cli {

void add_peer_options(CLI::App* cmd, PeerOptions& options, const std::string& script) {
  cmd->add_flag_callback("--no-peers", [&options] { options.enabled = false; },
                         fmt::format("do not run {}", script));
  cmd->add_option("--peer-python", options.python,
                  "interpreter for the peer script (default: $MINIGPT_PEER_PYTHON, else python3)");
}

std::string peer_python(const PeerOptions& options) {
  if (!options.python.empty()) return options.python;
  const char* env = std::getenv("MINIGPT_PEER_PYTHON");
  return env && *env ? env : "python3";
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string peer_script(const std::string& name) {
  return shell_quote(std::string(MINIGPT_SOURCE_DIR) + "/bench/peers/" + name);
}

std::string peer_command(const PeerOptions& options, const std::string& args, const std::string& extra_pythonpath) {
  std::string path = std::string(MINIGPT_SOURCE_DIR) + "/python";
  if (!extra_pythonpath.empty()) path += ":" + extra_pythonpath;
  return fmt::format("PYTHONPATH={}\"${{PYTHONPATH:+:$PYTHONPATH}}\" {} {}", shell_quote(path),
                     shell_quote(peer_python(options)), args);
}

namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    return code == 127 ? "exit code 127: interpreter or script not found" : fmt::format("exit code {}", code);
  }
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

}  // namespace

std::optional<nlohmann::json> run_json(const std::string& cmd, const std::string& what, Report& report) {
  std::fflush(stdout);  // the child shares our stderr; nothing of ours buffered ahead of it
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    report.add_note(fmt::format("{}: could not start '{}'; peer columns left empty", what, cmd));
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  const int status = ::pclose(pipe);
  if (status != 0) {
    report.add_note(fmt::format("{}: '{}' failed ({}); peer columns left empty", what, cmd, describe_status(status)));
    return std::nullopt;
  }
  nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    const std::string start = out.substr(0, 80);
    report.add_note(fmt::format("{}: the output of '{}' is not a JSON object (it starts '{}'); peer columns left "
                                "empty", what, cmd, start));
    return std::nullopt;
  }
  if (const auto notes = j.find("notes"); notes != j.end() && notes->is_array())
    for (const auto& n : *notes)
      if (n.is_string()) report.add_note(what + ": " + n.get<std::string>());
  return j;
}

std::optional<std::string> json_string(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::optional<double> json_number(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<int64_t> json_int(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

void for_each_peer_row(const nlohmann::json& answer, const char* key, const std::string& what,
                       const std::string& needs, Report& report,
                       const std::function<bool(const nlohmann::json& row)>& take) {
  const auto it = answer.is_object() ? answer.find(key) : answer.end();
  if (it == answer.end() || !it->is_array()) {
    report.add_note(fmt::format("{}: the answer has no \"{}\" array; peer columns left empty", what, key));
    return;
  }
  size_t left_out = 0;
  for (const auto& row : *it)
    if (!row.is_object() || !take(row)) ++left_out;
  if (left_out)
    report.add_note(fmt::format("{}: {} of {} entries of \"{}\" ignored (each needs {})", what, left_out, it->size(),
                                key, needs));
}

std::string peer_torch_version(const nlohmann::json& answer) {
  return json_string(answer, "torch_version").value_or("none");
}

}  // namespace minigpt::cli
