// Text helpers of the code generators (codegen_text.h).
#include "compile/codegen_text.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <regex>

namespace minigpt::compile {

std::string float_literal(float v, std::string_view inf) {
  if (std::isinf(v)) return v > 0 ? std::string(inf) : "-" + std::string(inf);
  std::string s = fmt::format("{:.9g}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s + "f";
}

std::string describe_tensor(const Graph& g, int id) {
  const TensorInfo& t = g.tensor(id);
  return fmt::format("'{}' {}{}", t.name, shape_text(t.shape), t.dtype == DType::I32 ? " i32" : "");
}

std::string kernel_comment_text(const Graph& g, const Kernel& k, const std::vector<std::string>& params, std::string_view kept_where) {
  std::string c = fmt::format("// {}\n", k.name);
  std::string ops;
  for (int i : k.nodes) ops += fmt::format("{}{}", ops.empty() ? "" : " ", op_name(g.nodes[static_cast<size_t>(i)].op));
  c += fmt::format("//   ops: {}\n", ops);
  for (const std::string& src : k.sources) c += fmt::format("//   from: {}\n", src);
  for (const std::string& p : params) c += fmt::format("//   {}\n", p);
  if (!k.removed.empty()) {
    int64_t bytes = 0;
    for (int t : k.removed) bytes += g.tensor(t).bytes();
    c += fmt::format("//   {} (never stored): {} tensors, {} bytes\n", kept_where, k.removed.size(), bytes);
  }
  c += fmt::format("//   bytes read {}, written {}; FLOPs {}\n", k.bytes_read, k.bytes_written, k.flops);
  return c;
}

// What makes two kernels' loops the same: their text with the kernel's own name replaced by
// "@", comments dropped (they name the tensors of one block) and the temporaries (acc12,
// tmp162, row161: a prefix of temp_prefixes numbered by graph node) renumbered in order of first
// use. So the layernorm of block 0 and of block 3 compare equal; any difference in arithmetic,
// shapes or index expressions does not.
std::string loops_key(std::string code, const std::string& kernel_name, const std::string& temp_prefixes) {
  for (size_t at = code.find(kernel_name); at != std::string::npos; at = code.find(kernel_name, at))
    code.replace(at, kernel_name.size(), "@");
  code = std::regex_replace(code, std::regex("//[^\n]*"), "");
  const std::regex temp("\\b(" + temp_prefixes + ")([0-9]+)\\b");
  std::map<std::string, int> local;  // "tmp162" -> its kernel-local number
  std::string key;
  auto last = code.cbegin();
  for (auto it = std::sregex_iterator(code.begin(), code.end(), temp); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    key.append(last, m[0].first);
    const auto [slot, added] = local.emplace(m.str(), static_cast<int>(local.size()));
    key += m[1].str() + "$" + std::to_string(slot->second);
    last = m[0].second;
  }
  key.append(last, code.cend());
  return key;
}

std::pair<std::string, std::string> split_leading_comment(const std::string& text) {
  size_t at = 0;
  while (at < text.size() && text.compare(at, 2, "//") == 0) {
    const size_t eol = text.find('\n', at);
    at = eol == std::string::npos ? text.size() : eol + 1;
  }
  return {text.substr(0, at), text.substr(at)};
}

std::string indent_text(const std::string& text, const std::string& indent) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = text.find('\n', i);
    out += indent + text.substr(i, j - i) + "\n";
    i = j + 1;
  }
  return out;
}

}  // namespace minigpt::compile
