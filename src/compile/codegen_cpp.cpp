// The C++ back end (codegen_cpp.h): a schedule -> one self-contained translation unit.
//
// Layout of the generated source: a header comment (graph, kernels), the C/C++ includes, the
// runtime ABI (runtime_abi.h's text), the scalar helpers (mg_exp, mg_max, ...), one section
// per kernel (an args struct, a function over a range of rows or (batch, head) pairs, and a
// launcher that splits that range over MgRuntime.parallel_for when the work is large), and
// the extern "C" call() running the kernels in order.
//
// Row-wise kernels (gathers, pointwise ops, reductions over the last axis) are generated as
// one loop nest per row r of C columns:
//   for each reduction, in order: a loop over the columns that computes the reduction's input
//     (every fused pointwise op recomputed from the loads, never stored) into W lane
//     accumulators, then the lanes combined in a fixed order -> one value per row;
//   per-row values (mean, rstd, ...) as scalar statements as soon as their inputs exist;
//   one last loop over the columns that computes and stores every output of the kernel.
// Column loops run in steps of W with a constant inner trip count (vectorised by the
// compiler), then a scalar tail over the last C % W columns. Sums thus add lane-wise: the
// order differs from a sequential sum (results differ from eager by rounding only).
#include "compile/codegen_cpp.h"

#include "compile/passes/passes.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace minigpt::compile {

namespace {

// A float as a C literal that reads back to the same value.
std::string flit(float v) {
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "-INFINITY";
  std::string s = fmt::format("{:.9g}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s + "f";
}

std::string sanitize(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return s;
}

const char* kHelpers = R"(// ---- scalar helpers: branch-free so that loops over them vectorise ----------------------

// exp(x) in float: x = n ln2 + r with |r| <= ln2/2, exp(r) by Cephes' expf polynomial, 2^n
// from the exponent bits. NaN stays NaN, exp(-inf) = 0, exp(x > 88.72) = +inf, exp(0) = 1.
static inline float mg_exp(float x) {
  float xc = x < -87.33654f ? -87.33654f : x;
  xc = xc > 88.72283f ? 88.72283f : xc;
  const float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const uint32_t bits = (uint32_t)((int32_t)n + 126) << 23;  // 2^(n-1)
  float s;
  memcpy(&s, &bits, sizeof s);
  float y = p * s * 2.0f;
  y = x < -87.33654f ? 0.0f : y;
  y = x > 88.72283f ? INFINITY : y;
  return y;
}

// max that keeps a NaN (so a NaN row stays NaN through a max reduction)
static inline float mg_max(float a, float b) { return (b > a || b != b) ? b : a; }
static inline double mg_maxd(double a, double b) { return (b > a || b != b) ? b : a; }

// 1 / sqrt(x), in double as cpu::layernorm_forward's rstd
static inline float mg_rsqrt(float x) { return (float)(1.0 / sqrt((double)x)); }

// GELU, exact erf form as nn.GELU()
static inline float mg_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.707106781f)); }
)";

struct Names {
  std::map<int, std::string> var;  // tensor id -> variable in call()
};

std::string tensor_var(const Graph& g, int id) {
  const TensorInfo& t = g.tensor(id);
  if (t.alias_of >= 0) return tensor_var(g, t.alias_of);
  switch (t.kind) {
    case TensorKind::Input: return "in_" + sanitize(t.name);
    case TensorKind::Output: return "out_" + sanitize(t.name);
    case TensorKind::Weight: return "w_" + sanitize(t.name);
    case TensorKind::Intermediate: return fmt::format("buf{}", id);
  }
  return "?";
}

std::string describe(const Graph& g, int id) {
  const TensorInfo& t = g.tensor(id);
  return fmt::format("'{}' {}{}", t.name, shape_text(t.shape), t.dtype == DType::I32 ? " i32" : "");
}

// The comment every kernel starts with.
std::string kernel_comment(const Schedule& s, const Kernel& k, const std::vector<std::string>& params) {
  const Graph& g = s.graph;
  std::string c = fmt::format("// {}\n", k.name);
  std::string ops;
  for (int i : k.nodes) ops += fmt::format("{}{}", ops.empty() ? "" : " ", op_name(g.nodes[static_cast<size_t>(i)].op));
  c += fmt::format("//   ops: {}\n", ops);
  for (const std::string& src : k.sources) c += fmt::format("//   from: {}\n", src);
  for (const std::string& p : params) c += fmt::format("//   {}\n", p);
  if (!k.removed.empty()) {
    int64_t bytes = 0;
    for (int t : k.removed) bytes += g.tensor(t).bytes();
    c += fmt::format("//   kept in registers (never stored): {} tensors, {} bytes\n", k.removed.size(), bytes);
  }
  c += fmt::format("//   bytes read {}, written {}; FLOPs {}\n", k.bytes_read, k.bytes_written, k.flops);
  return c;
}

// ---- row-wise kernels -------------------------------------------------------------------

class RowwiseGen {
 public:
  RowwiseGen(const Schedule& s, const Kernel& k, const CodegenOptions& opt)
      : g_(s.graph), s_(s), k_(k), R_(k.rows), C_(k.cols), W_(std::max(1, opt.vec_width)), opt_(opt) {
    for (size_t i = 0; i < k.reads.size(); ++i) ptr_[k.reads[i]] = fmt::format("in_ptr{}", i);
    for (size_t i = 0; i < k.writes.size(); ++i) out_[k.writes[i]] = fmt::format("out_ptr{}", i);
    for (int i : k.nodes) in_group_.insert(g_.nodes[static_cast<size_t>(i)].output);
  }

  std::string generate(std::string& call_args);

 private:
  bool is_row(int node) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    return kReduction.contains(n.op) || (g_.tensor(n.output).cols() == 1 && C_ > 1);
  }
  // The value of tensor t at (r, c) (in a column loop) or at r (row statement).
  std::string operand(int t, bool in_loop) const {
    if (in_group_.count(t)) {
      const int p = g_.tensor(t).producer;
      return is_row(p) ? fmt::format("row{}", t) : fmt::format("tmp{}", t);
    }
    const TensorInfo& ti = g_.tensor(t);
    const std::string& p = ptr_.at(t);
    if (ti.cols() == C_ && ti.rows() == R_) return C_ == 1 ? fmt::format("{}[r]", p) : fmt::format("{}[r * {} + c]", p, C_);
    if (ti.cols() == 1 && ti.rows() == R_) return fmt::format("{}[r]", p);
    if (ti.shape.size() == 1 && ti.shape[0] == C_ && in_loop) return fmt::format("{}[c]", p);
    MINIGPT_FAIL("codegen: {} cannot index {} {} in a ({}, {}) loop", k_.name, ti.name, shape_text(ti.shape), R_, C_);
  }
  std::string expr(int node, bool in_loop) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    auto a = [&](size_t i) { return operand(n.inputs[i], in_loop); };
    switch (n.op) {
      case Op::Embedding:
        return fmt::format("{}[(int64_t){}[r] * {} + c]", ptr_.at(n.inputs[1]), ptr_.at(n.inputs[0]), C_);
      case Op::PosEmbedding:
        return n.period == 1 ? fmt::format("{}[{} + c]", ptr_.at(n.inputs[0]), n.offset * C_)
                             : fmt::format("{}[({} + r % {}) * {} + c]", ptr_.at(n.inputs[0]), n.offset, n.period, C_);
      case Op::Add:
      case Op::BiasAdd: return a(0) + " + " + a(1);
      case Op::Sub: return a(0) + " - " + a(1);
      case Op::Mul: return a(0) + " * " + a(1);
      case Op::Div: return a(0) + " / " + a(1);
      case Op::AddScalar: return a(0) + " + " + flit(n.alpha);
      case Op::MulScalar: return a(0) + " * " + flit(n.alpha);
      case Op::Exp: return "mg_exp(" + a(0) + ")";
      case Op::Rsqrt: return "mg_rsqrt(" + a(0) + ")";
      case Op::Gelu: return "mg_gelu(" + a(0) + ")";
      default: MINIGPT_FAIL("codegen: {} is not a row-wise op", op_name(n.op));
    }
  }
  // Element nodes (in kernel order) that computing `targets` needs.
  std::vector<int> closure(const std::vector<int>& targets) const {
    std::set<int> need;
    std::vector<int> stack = targets;
    while (!stack.empty()) {
      const int node = stack.back();
      stack.pop_back();
      if (is_row(node) || !need.insert(node).second) continue;
      for (int in : g_.nodes[static_cast<size_t>(node)].inputs)
        if (in_group_.count(in)) stack.push_back(g_.tensor(in).producer);
    }
    return {need.begin(), need.end()};  // node ids ascend in kernel (topological) order
  }
  // The statements of one column-loop iteration at column c (lane l).
  std::string body(const std::vector<int>& nodes, const std::string& indent) const {
    std::string b;
    for (int node : nodes) {
      const int t = g_.nodes[static_cast<size_t>(node)].output;
      b += fmt::format("{}const float tmp{} = {};  // {}\n", indent, t, expr(node, true), g_.tensor(t).name);
    }
    return b;
  }
  // A column loop: main part in steps of W lanes, then the scalar tail. `per_element` uses
  // c and l.
  std::string column_loop(const std::string& per_element, const std::string& indent) const {
    const int64_t main = C_ / W_ * W_;
    std::string s;
    if (main > 0) {
      s += fmt::format("{}for (int64_t c0 = 0; c0 < {}; c0 += {}) {{\n", indent, main, W_);
      s += fmt::format("{}  for (int64_t l = 0; l < {}; ++l) {{  // {} lanes: one vector step\n", indent, W_, W_);
      s += fmt::format("{}    const int64_t c = c0 + l;\n", indent);
      s += indent_text(per_element, indent + "    ");
      s += fmt::format("{}  }}\n{}}}\n", indent, indent);
    }
    if (main < C_) {
      s += fmt::format("{}for (int64_t c = {}; c < {}; ++c) {{  // scalar tail: columns [{}, {})\n", indent, main, C_, main, C_);
      s += fmt::format("{}  const int64_t l = c - {};\n", indent, main);
      s += indent_text(per_element, indent + "  ");
      s += fmt::format("{}}}\n", indent);
    }
    return s;
  }
  static std::string indent_text(const std::string& text, const std::string& indent) {
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
      const size_t j = text.find('\n', i);
      out += indent + text.substr(i, j - i) + "\n";
      i = j + 1;
    }
    return out;
  }

  const Graph& g_;
  const Schedule& s_;
  const Kernel& k_;
  int64_t R_, C_;
  int W_;
  const CodegenOptions& opt_;
  std::map<int, std::string> ptr_, out_;
  std::set<int> in_group_;
};

std::string RowwiseGen::generate(std::string& call_args) {
  (void)s_;
  std::vector<std::string> params, fields, inits;
  for (int t : k_.reads) {
    const TensorInfo& ti = g_.tensor(t);
    const char* type = ti.dtype == DType::I32 ? "const int32_t*" : "const float*";
    fields.push_back(fmt::format("  {} {};", type, ptr_[t]));
    params.push_back(fmt::format("{} = {}", ptr_[t], describe(g_, t)));
    call_args += ", " + tensor_var(g_, t);
  }
  for (int t : k_.writes) {
    fields.push_back(fmt::format("  float* {};", out_[t]));
    params.push_back(fmt::format("{} = {}", out_[t], describe(g_, t)));
    call_args += ", " + tensor_var(g_, t);
  }
  std::string code = kernel_comment(s_, k_, params);
  code += fmt::format("//   loops: {} rows x {} columns, {} lanes per vector step\n", R_, C_, W_);
  code += fmt::format("struct {}_args {{\n", k_.name);
  for (const std::string& f : fields) code += f + "\n";
  code += "};\n";
  code += fmt::format("static void {}_rows(void* ctx, int64_t r0, int64_t r1) {{\n", k_.name);
  code += fmt::format("  const {}_args* a = (const {}_args*)ctx;\n", k_.name, k_.name);
  for (int t : k_.reads) {
    const char* type = g_.tensor(t).dtype == DType::I32 ? "const int32_t*" : "const float*";
    code += fmt::format("  {} __restrict {} = a->{};\n", type, ptr_[t], ptr_[t]);
  }
  for (int t : k_.writes) code += fmt::format("  float* __restrict {} = a->{};\n", out_[t], out_[t]);
  code += "  for (int64_t r = r0; r < r1; ++r) {\n";
  const std::string in2 = "    ";
  for (int node : k_.nodes) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const int t = n.output;
    if (!is_row(node)) continue;
    if (kReduction.contains(n.op)) {
      const bool dbl = n.acc_f64;
      const bool mx = n.op == Op::ReduceMax;
      const char* acc_t = dbl ? "double" : "float";
      const int src = n.inputs[0];
      code += fmt::format("{}// {} of {} over the row{}\n", in2, mx ? "max" : "sum", g_.tensor(src).name, dbl ? ", in double" : "");
      code += fmt::format("{}{} acc{}[{}];\n", in2, acc_t, t, W_);
      code += fmt::format("{}for (int64_t l = 0; l < {}; ++l) acc{}[l] = {};\n", in2, W_, t, mx ? "-INFINITY" : "0");
      std::vector<int> targets;
      if (in_group_.count(src)) targets.push_back(g_.tensor(src).producer);
      std::string per = body(closure(targets), "");
      const std::string v = operand(src, true);
      const std::string vv = dbl ? "(double)" + v : v;
      per += mx ? fmt::format("acc{}[l] = {}(acc{}[l], {});\n", t, dbl ? "mg_maxd" : "mg_max", t, vv)
                : fmt::format("acc{}[l] += {};\n", t, vv);
      code += column_loop(per, in2);
      code += fmt::format("{}{} tot{} = acc{}[0];\n", in2, acc_t, t, t);
      code += fmt::format("{}for (int64_t l = 1; l < {}; ++l) tot{} = {};  // lanes in order\n", in2, W_, t,
                          mx ? fmt::format("{}(tot{}, acc{}[l])", dbl ? "mg_maxd" : "mg_max", t, t) : fmt::format("tot{} + acc{}[l]", t, t));
      code += fmt::format("{}const float row{} = (float)tot{};  // {}\n", in2, t, t, g_.tensor(t).name);
    } else {
      code += fmt::format("{}const float row{} = {};  // {}\n", in2, t, expr(node, false), g_.tensor(t).name);
    }
    if (out_.count(t)) code += fmt::format("{}{}[r] = row{};\n", in2, out_[t], t);
  }
  // the store loop: every element-wise output of the kernel
  std::vector<int> stores;
  for (int t : k_.writes)
    if (!is_row(g_.tensor(t).producer)) stores.push_back(g_.tensor(t).producer);
  if (!stores.empty()) {
    code += fmt::format("{}// outputs: {}\n", in2, [&] {
      std::string s;
      for (int node : stores) s += (s.empty() ? "" : ", ") + g_.tensor(g_.nodes[static_cast<size_t>(node)].output).name;
      return s;
    }());
    std::string per = body(closure(stores), "");
    for (int node : stores) {
      const int t = g_.nodes[static_cast<size_t>(node)].output;
      per += C_ == 1 ? fmt::format("{}[r] = tmp{};\n", out_[t], t) : fmt::format("{}[r * {} + c] = tmp{};\n", out_[t], C_, t);
    }
    code += column_loop(per, in2);
  }
  code += "  }\n}\n";
  // launcher
  code += fmt::format("static void {}(const MgRuntime* rt, const {}_args* a) {{\n", k_.name, k_.name);
  if (R_ * C_ >= opt_.parallel_min_work && R_ > 1) {
    const int64_t grain = std::max<int64_t>(1, opt_.parallel_min_work / std::max<int64_t>(1, C_) / 4);
    code += fmt::format("  if (rt->threads > 1) {{ rt->parallel_for(rt->pool, {}, {}, {}_rows, (void*)a); return; }}\n", R_, grain, k_.name);
  } else {
    code += fmt::format("  (void)rt;  // {} elements: below the threading threshold, one thread\n", R_ * C_);
  }
  code += fmt::format("  {}_rows((void*)a, 0, {});\n}}\n", k_.name, R_);
  return code;
}

// ---- attention ------------------------------------------------------------------------

std::string generate_attention(const Schedule& s, const Kernel& k, const CodegenOptions& opt, std::string& call_args) {
  const Graph& g = s.graph;
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  const auto& qs = g.tensor(n.inputs[0]).shape;  // (B, T, 3C)
  const int64_t B = qs[0], T = qs[1], C = qs[2] / 3, NH = n.heads, dh = C / NH;
  const bool decode = n.inputs.size() == 3;
  const int64_t S = T + n.offset;  // keys seen by the last query
  constexpr int64_t KB = 16;       // keys per block (one vector of scores)
  const int64_t S_pad = (S + KB - 1) / KB * KB;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::vector<std::string> params{fmt::format("in_ptr0 = {} (q | k | v per row)", describe(g, n.inputs[0]))};
  call_args += ", " + tensor_var(g, n.inputs[0]);
  if (decode) {
    params.push_back(fmt::format("in_ptr1 = {} (keys, rows [0, {}])", describe(g, n.inputs[1]), n.offset));
    params.push_back(fmt::format("in_ptr2 = {} (values, rows [0, {}])", describe(g, n.inputs[2]), n.offset));
    call_args += ", " + tensor_var(g, n.inputs[1]) + ", " + tensor_var(g, n.inputs[2]);
  } else {
    call_args += ", NULL, NULL";  // keys and values come from the qkv rows
  }
  params.push_back(fmt::format("out_ptr0 = {} (heads merged)", describe(g, n.output)));
  call_args += ", " + tensor_var(g, n.output);
  std::string code = kernel_comment(s, k, params);
  code += fmt::format(
      "//   per (batch, head): K^T of the head in a local ({}, {}) tile; per query, blocks of {} keys:\n"
      "//   scores (one vector), causal mask, running max m and sum l (online softmax: earlier\n"
      "//   blocks rescaled by exp(m_old - m_new)), acc += p v; out = acc / l. No (T, S) score or\n"
      "//   probability matrix exists.\n",
      dh, S_pad, KB);
  code += fmt::format("struct {}_args {{ const float* in_ptr0; const float* in_ptr1; const float* in_ptr2; float* out_ptr0; }};\n", k.name);
  code += fmt::format("static void {}_pairs(void* ctx, int64_t p0, int64_t p1) {{\n", k.name);
  code += fmt::format("  const {}_args* a = (const {}_args*)ctx;\n", k.name, k.name);
  code += "  for (int64_t p = p0; p < p1; ++p) {\n";
  code += fmt::format("    const int64_t b = p / {}, h = p % {};\n", NH, NH);
  // where key s, dim d of this head lives
  const std::string kaddr = decode ? fmt::format("a->in_ptr1[s * {} + h * {} + d]", C, dh)
                                   : fmt::format("a->in_ptr0[(b * {} + s) * {} + {} + h * {} + d]", T, 3 * C, C, dh);
  const std::string vrow = decode ? fmt::format("a->in_ptr2 + (s0 + j) * {} + h * {}", C, dh)
                                  : fmt::format("a->in_ptr0 + (b * {} + s0 + j) * {} + {} + h * {}", T, 3 * C, 2 * C, dh);
  code += fmt::format("    float kt[{}][{}];  // kt[d][s] = k[s][d]; keys past {} are 0\n", dh, S_pad, S);
  code += fmt::format("    for (int64_t d = 0; d < {}; ++d)\n      for (int64_t s = {}; s < {}; ++s) kt[d][s] = 0.0f;\n", dh, S, S_pad);
  code += fmt::format("    for (int64_t s = 0; s < {}; ++s)\n      for (int64_t d = 0; d < {}; ++d) kt[d][s] = {};\n", S, dh, kaddr);
  code += fmt::format("    for (int64_t t = 0; t < {}; ++t) {{\n", T);
  code += fmt::format("      const float* q = a->in_ptr0 + (b * {} + t) * {} + h * {};\n", T, 3 * C, dh);
  code += fmt::format("      const int64_t keys = t + {};  // causal: keys [0, keys)\n", n.offset + 1);
  code += fmt::format("      float m = -INFINITY, l = 0.0f, acc[{}];\n", dh);
  code += fmt::format("      for (int64_t d = 0; d < {}; ++d) acc[d] = 0.0f;\n", dh);
  code += fmt::format("      for (int64_t s0 = 0; s0 < keys; s0 += {}) {{\n", KB);
  code += fmt::format("        float sc[{}];\n", KB);
  code += fmt::format("        for (int64_t j = 0; j < {}; ++j) sc[j] = 0.0f;\n", KB);
  code += fmt::format("        for (int64_t d = 0; d < {}; ++d) {{\n", dh);
  code += "          const float qd = q[d];\n";
  code += fmt::format("          for (int64_t j = 0; j < {}; ++j) sc[j] += qd * kt[d][s0 + j];  // {} lanes\n", KB, KB);
  code += "        }\n";
  code += "        float bm = -INFINITY;\n";
  code += fmt::format("        for (int64_t j = 0; j < {}; ++j) {{\n", KB);
  code += fmt::format("          sc[j] = s0 + j < keys ? sc[j] * {} : -INFINITY;  // scale 1/sqrt({}), causal mask\n", flit(scale), dh);
  code += "          bm = mg_max(bm, sc[j]);\n        }\n";
  code += "        const float m_new = mg_max(m, bm);\n";
  code += "        const float corr = mg_exp(m - m_new);  // 0 on the first block (m = -inf)\n";
  code += "        float ps = 0.0f;\n";
  code += fmt::format("        for (int64_t j = 0; j < {}; ++j) {{\n          sc[j] = mg_exp(sc[j] - m_new);\n          ps += sc[j];\n        }}\n", KB);
  code += "        l = l * corr + ps;\n";
  code += fmt::format("        for (int64_t d = 0; d < {}; ++d) acc[d] *= corr;\n", dh);
  code += fmt::format("        const int64_t live = keys - s0 < {} ? keys - s0 : {};\n", KB, KB);
  code += "        for (int64_t j = 0; j < live; ++j) {\n";
  code += fmt::format("          const float* v = {};\n", vrow);
  code += fmt::format("          for (int64_t d = 0; d < {}; ++d) acc[d] += sc[j] * v[d];\n", dh);
  code += "        }\n        m = m_new;\n      }\n";
  code += fmt::format("      float* o = a->out_ptr0 + (b * {} + t) * {} + h * {};\n", T, C, dh);
  code += fmt::format("      for (int64_t d = 0; d < {}; ++d) o[d] = acc[d] / l;\n", dh);
  code += "    }\n  }\n}\n";
  code += fmt::format("static void {}(const MgRuntime* rt, const {}_args* a) {{\n", k.name, k.name);
  const int64_t work = B * NH * T * S * dh;
  if (work >= opt.parallel_min_work && B * NH > 1)
    code += fmt::format("  if (rt->threads > 1) {{ rt->parallel_for(rt->pool, {}, 1, {}_pairs, (void*)a); return; }}\n", B * NH, k.name);
  else
    code += "  (void)rt;  // small: one thread\n";
  code += fmt::format("  {}_pairs((void*)a, 0, {});\n}}\n", k.name, B * NH);
  return code;
}

std::string generate_kv_write(const Schedule& s, const Kernel& k, std::string& call_args) {
  const Graph& g = s.graph;
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  const int64_t C = g.tensor(n.inputs[1]).cols();
  call_args += ", " + tensor_var(g, n.inputs[0]) + ", " + tensor_var(g, n.inputs[1]);
  std::string code = kernel_comment(s, k, {fmt::format("in_ptr0 = {}", describe(g, n.inputs[0])),
                                           fmt::format("out_ptr0 = {} (row {} written in place)", describe(g, n.inputs[1]), n.offset)});
  code += fmt::format("struct {}_args {{ const float* in_ptr0; float* out_ptr0; }};\n", k.name);
  code += fmt::format("static void {}(const MgRuntime* rt, const {}_args* a) {{\n  (void)rt;\n", k.name, k.name);
  code += fmt::format("  for (int64_t c = 0; c < {}; ++c) a->out_ptr0[{} + c] = a->in_ptr0[{} + c];\n}}\n", C, n.offset * C, n.part * C);
  return code;
}

std::string generate_matmul(const Schedule& s, const Kernel& k, const std::map<int, std::string>& packed_var,
                            std::string& call_line) {
  const Graph& g = s.graph;
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  const TensorInfo& x = g.tensor(n.inputs[0]);
  const TensorInfo& W = g.tensor(n.inputs[1]);
  const int64_t N = x.rows(), K = x.cols(), M = W.shape[0];
  const std::string bias = n.has_bias ? tensor_var(g, n.inputs[2]) : "NULL";
  const std::string res = n.has_residual ? tensor_var(g, n.inputs.back()) : "NULL";
  std::vector<std::string> params{fmt::format("x = {}", describe(g, n.inputs[0])), fmt::format("W = {}", describe(g, n.inputs[1]))};
  if (n.has_bias) params.push_back(fmt::format("bias = {}", describe(g, n.inputs[2])));
  if (n.has_residual) params.push_back(fmt::format("residual = {}", describe(g, n.inputs.back())));
  params.push_back(fmt::format("y = {}{}", describe(g, n.output), n.gelu ? " = GELU(x W^T + b)" : n.has_residual ? " = x W^T + b + residual" : " = x W^T + b"));
  std::string code = kernel_comment(s, k, params);
  code += "//   the engine's packed GEMM (cpu::linear_forward_packed) through MgRuntime, epilogue fused\n";
  call_line = fmt::format("  rt->linear_packed(rt->pool, {}, {}, {}, {}, {}, {}, {}, {}, {}, {});  // {}\n", tensor_var(g, n.inputs[0]),
                          tensor_var(g, n.inputs[1]), packed_var.at(n.inputs[1]), bias, tensor_var(g, n.output), N, K, M,
                          res, n.gelu ? 1 : 0, k.name);
  return code;
}

}  // namespace

GeneratedCode generate_cpp(const Schedule& s, const CodegenOptions& opt) {
  MINIGPT_CHECK(!opt.runtime_abi.empty(), "generate_cpp: CodegenOptions.runtime_abi (runtime_abi.h's text) is empty");
  const Graph& g = s.graph;
  GeneratedCode out;
  // io[] layout: inputs, outputs, weights, packed weights of every matmul
  for (int t : g.inputs) out.io.push_back({IoSlot::Kind::Input, t, g.tensor(t).name});
  for (int t : g.outputs) out.io.push_back({IoSlot::Kind::Output, t, g.tensor(t).name});
  for (int t : g.weights) out.io.push_back({IoSlot::Kind::Weight, t, g.tensor(t).name});
  std::map<int, std::string> packed_var;
  for (const Node& n : g.nodes) {
    if (n.op != Op::Matmul || packed_var.count(n.inputs[1])) continue;
    packed_var[n.inputs[1]] = "pk_" + sanitize(g.tensor(n.inputs[1]).name);
    out.io.push_back({IoSlot::Kind::Packed, n.inputs[1], g.tensor(n.inputs[1]).name});
  }

  std::string src = fmt::format(
      "// Generated by minigpt compile (codegen_cpp v{}) for graph {} (hash {}).\n"
      "// {} kernels; arena {} bytes. Entry point: extern \"C\" void call(const MgRuntime* rt,\n"
      "// char* arena, void* const* io). Self-contained: compiled at run time by the JIT.\n",
      kCodegenCppVersion, g.name, graph_hash(g), s.kernels.size(), g.arena_bytes);
  src += "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n\n";
  src += opt.runtime_abi;
  src += "\n";
  src += kHelpers;
  std::vector<std::string> calls;
  for (const Kernel& k : s.kernels) {
    std::string code, call_args;
    switch (k.kind) {
      case KernelKind::Rowwise: {
        RowwiseGen gen(s, k, opt);
        code = gen.generate(call_args);
        break;
      }
      case KernelKind::Attention: code = generate_attention(s, k, opt, call_args); break;
      case KernelKind::KvWrite: code = generate_kv_write(s, k, call_args); break;
      case KernelKind::Matmul: {
        std::string line;
        code = generate_matmul(s, k, packed_var, line);
        calls.push_back(line);
        break;
      }
    }
    if (k.kind != KernelKind::Matmul) {
      calls.push_back(fmt::format("  {{ const {}_args a = {{{}}}; {}(rt, &a); }}\n", k.name, call_args.substr(2), k.name));
    }
    out.kernels.push_back({k.name, code});
    src += "\n" + code;
  }
  // call(), and call_kernel() (one kernel alone, for timing)
  std::string entry;
  for (size_t i = 0; i < out.io.size(); ++i) {
    const IoSlot& slot = out.io[i];
    const TensorInfo& t = g.tensor(slot.tensor);
    switch (slot.kind) {
      case IoSlot::Kind::Input:
        entry += fmt::format("  {}* {} = ({}*)io[{}];  // input {}\n", t.dtype == DType::I32 ? "const int32_t" : "float",
                             tensor_var(g, slot.tensor), t.dtype == DType::I32 ? "const int32_t" : "float", i, describe(g, slot.tensor));
        break;
      case IoSlot::Kind::Output:
        entry += fmt::format("  float* {} = (float*)io[{}];  // output {}\n", tensor_var(g, slot.tensor), i, describe(g, slot.tensor));
        break;
      case IoSlot::Kind::Weight:
        entry += fmt::format("  const float* {} = (const float*)io[{}];  // weight {}\n", tensor_var(g, slot.tensor), i, describe(g, slot.tensor));
        break;
      case IoSlot::Kind::Packed:
        entry += fmt::format("  const float* {} = (const float*)io[{}];  // {} packed for the GEMM\n", packed_var[slot.tensor], i, t.name);
        break;
    }
  }
  for (const Node& n : g.nodes) {
    const TensorInfo& t = g.tensor(n.output);
    if (t.arena_offset < 0) continue;
    entry += fmt::format("  float* buf{} = (float*)(arena + {});  // {}\n", n.output, t.arena_offset, describe(g, n.output));
  }
  entry += "  (void)arena;\n";
  src += "\n// The kernels in order on the arena. io[]: inputs, outputs, weights, packed weights.\n";
  src += "extern \"C\" void call(const MgRuntime* rt, char* arena, void* const* io) {\n" + entry;
  for (const std::string& c : calls) src += c;
  src += "}\n\n// Kernel `index` alone (what `minigpt compile --explain` times).\n";
  src += "extern \"C\" void call_kernel(const MgRuntime* rt, char* arena, void* const* io, int index) {\n" + entry;
  src += "  switch (index) {\n";
  for (size_t i = 0; i < calls.size(); ++i) src += fmt::format("    case {}:\n  {}      break;\n", i, calls[i]);
  src += "    default: break;\n  }\n}\n";
  out.source = std::move(src);
  return out;
}

}  // namespace minigpt::compile
