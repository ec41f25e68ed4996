// Text helpers of the code generators (codegen_text.h).
#include "compile/codegen_text.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string_view>
#include <vector>

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

namespace {

// \w as std::regex's ECMAScript grammar has it in the "C" locale: [A-Za-z0-9_] (bytes only).
bool word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }
bool digit_char(char c) { return c >= '0' && c <= '9'; }

}  // namespace

// What makes two kernels' loops the same: their text with the kernel's own name replaced by
// "@", comments dropped (they name the tensors of one block) and the temporaries (acc12,
// tmp162, row161: a prefix of temp_prefixes numbered by graph node) renumbered in order of first
// use. So the layernorm of block 0 and of block 3 compare equal; any difference in arithmetic,
// shapes or index expressions does not.
// One pass over the text, no std::regex: the code generators call it once per kernel, and the
// regex form (regex_replace "//[^\n]*", then an iterator over \b(acc|...)([0-9]+)\b, a regex
// built per call) was 60% of lowering the shipped model for the GPU (12 of 20 ms; bench/
// compile_cuda_warm_bench.cpp). The same key, byte for byte: a temporary is a word (a run of
// [A-Za-z0-9_] with no word character before it) made of the first prefix, in temp_prefixes'
// order, that it starts with and then only digits, at least one; "//" to the end of its line
// is dropped before anything is matched (as the regex did, even inside a string literal).
std::string loops_key(std::string code, const std::string& kernel_name, const std::string& temp_prefixes) {
  for (size_t at = code.find(kernel_name); at != std::string::npos; at = code.find(kernel_name, at))
    code.replace(at, kernel_name.size(), "@");
  std::vector<std::string_view> prefixes;
  for (size_t at = 0;;) {
    const size_t bar = temp_prefixes.find('|', at);
    const std::string_view p = std::string_view(temp_prefixes).substr(at, bar == std::string::npos ? std::string::npos : bar - at);
    MINIGPT_CHECK(!p.empty() && word_char(p.front()), "loops_key: temporary prefix '{}' in '{}' must start with a word character",
                  p, temp_prefixes);
    prefixes.push_back(p);
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  // comments out: "//" up to (not including) its line's end
  std::string s;
  s.reserve(code.size());
  for (size_t at = 0; at < code.size();) {
    const size_t c = code.find("//", at);
    if (c == std::string::npos) {
      s.append(code, at, std::string::npos);
      break;
    }
    s.append(code, at, c - at);
    const size_t eol = code.find('\n', c);
    if (eol == std::string::npos) break;
    at = eol;
  }
  std::map<std::string, int, std::less<>> local;  // "tmp162" -> its kernel-local number
  std::string key;
  key.reserve(s.size());
  size_t last = 0;  // s[last, p) not yet copied into key
  for (size_t p = 0; p < s.size();) {
    if (!word_char(s[p])) {
      ++p;
      continue;
    }
    size_t end = p;  // the word s[p, end)
    while (end < s.size() && word_char(s[end])) ++end;
    for (const std::string_view prefix : prefixes) {
      if (end - p <= prefix.size() || s.compare(p, prefix.size(), prefix) != 0) continue;
      size_t q = p + prefix.size();
      while (q < end && digit_char(s[q])) ++q;
      if (q != end) continue;  // not digits to the word's end
      key.append(s, last, p - last);
      const std::string_view word = std::string_view(s).substr(p, end - p);
      auto slot = local.find(word);
      if (slot == local.end()) slot = local.emplace(std::string(word), static_cast<int>(local.size())).first;
      key.append(prefix);
      key += '$';
      key += std::to_string(slot->second);
      last = end;
      break;
    }
    p = end;
  }
  key.append(s, last, std::string::npos);
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
  out.reserve(text.size() + text.size() / 16 * indent.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = text.find('\n', i);
    out.append(indent);
    out.append(text, i, j == std::string::npos ? std::string::npos : j - i);
    out += '\n';
    if (j == std::string::npos) break;  // a last line without '\n' gets one
    i = j + 1;
  }
  return out;
}

}  // namespace minigpt::compile
