// Text helpers of the code generators (codegen_text.h).
#include "compile/codegen_text.h"

#include <fmt/format.h>

#include <cmath>

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
