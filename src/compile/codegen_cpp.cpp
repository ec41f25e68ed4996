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

#include "compile/codegen_text.h"

#include "compile/passes/passes.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

namespace minigpt::compile {

namespace {

std::string flit(float v) { return float_literal(v, "INFINITY"); }

std::string sanitize(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return s;
}

const char* kHelpers = R"(// ---- scalar helpers: branch-free so that loops over them vectorise ----------------------

// a * b + c with one rounding, whatever -ffp-contract says (an FMA instruction where the
// target has one; libm's fmaf under -mno-avx, as eager's scalar exp calls std::fma)
static inline float mg_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// exp(x) in float with the arithmetic of eager's softmax exp (kernels/cpu exp_poly,
// softmax_simd_ops.h): n = round(x / ln2) by the 1.5 * 2^23 shift, r = x - n ln2 (ln2 split
// hi/lo), exp(r) by its degree-6 minimax polynomial (Horner, FMAs), times 2^n from the exponent
// bits; so on [-86.98, 0], the softmax's domain, the result is eager's bit for bit.
// mg_exp_nonpos: for x <= 88.72283 (what the generator calls it on: x - max(x) <= 0, softmax
// and attention, eager's exp16 domain), with no test for overflow: NaN stays NaN, 2^n is
// applied as 2^(n-1) * 2 so that n = 128 stays finite, and below n = -125 (x < -86.98868,
// results under 1.7e-38, -inf included) the result is 0 (2^(n-1) is no normal float there;
// eager's flush starts at -87.33654). mg_exp: every x, exp(x > 88.72283) = +inf. (Dropping the
// overflow clamp and select made the (32, 611) softmax ~15% faster.)
static inline float mg_exp_nonpos(float x) {
  const float xc = x < -87.33654f ? -87.33654f : x;
  const float n = mg_fma(xc, 1.44269504f, 12582912.0f) - 12582912.0f;  // round(x / ln2)
  float r = mg_fma(-n, 0.693145751953125f, xc);
  r = mg_fma(-n, 1.428606765330187e-06f, r);
  float u = mg_fma(0.001381461275741458f, r, 0.008368710055947304f);
  u = mg_fma(u, r, 0.04166838899254799f);
  u = mg_fma(u, r, 0.1666652113199234f);
  u = mg_fma(u, r, 0.4999999403953552f);
  u = mg_fma(u, r, 1.0f);
  u = mg_fma(u, r, 1.0f);
  const uint32_t bits = (uint32_t)((int32_t)n + 126) << 23;  // 2^(n-1)
  float s;
  memcpy(&s, &bits, sizeof s);
  const float y = u * s * 2.0f;
  return x < -87.33654f ? 0.0f : y;
}
static inline float mg_exp(float x) {
  const float y = mg_exp_nonpos(x > 88.72283f ? 88.72283f : x);
  return x > 88.72283f ? INFINITY : y;
}

// max that keeps a NaN (so a NaN row stays NaN through a max reduction)
static inline float mg_max(float a, float b) { return (b > a || b != b) ? b : a; }
static inline double mg_maxd(double a, double b) { return (b > a || b != b) ? b : a; }

// 1 / sqrt(x), in double as cpu::layernorm_forward's rstd
static inline float mg_rsqrt(float x) { return (float)(1.0 / sqrt((double)x)); }

// GELU, exact erf form as nn.GELU()
static inline float mg_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.707106781f)); }
)";

// The vector helpers: GCC vector extensions of MG_W lanes (defined before this text). Each
// does what its scalar namesake does, lane by lane, with the same operations in the same order
// (so a tail column rounds exactly as a vector column).
const char* kVectorHelpers = R"(// ---- vector helpers: MG_W lanes (GCC vector extensions) -------------------------------
typedef float mg_vf __attribute__((vector_size(4 * MG_W)));
typedef double mg_vd __attribute__((vector_size(8 * MG_W)));
typedef int32_t mg_vi __attribute__((vector_size(4 * MG_W)));

static inline mg_vf mg_splat(float s) { return (mg_vf){} + s; }
static inline mg_vf mg_load(const float* p) { mg_vf v; memcpy(&v, p, sizeof v); return v; }
static inline void mg_store(float* p, mg_vf v) { memcpy(p, &v, sizeof v); }
static inline mg_vd mg_widen(mg_vf v) { return __builtin_convertvector(v, mg_vd); }
static inline mg_vf mg_max_v(mg_vf a, mg_vf b) { return ((b > a) | (b != b)) ? b : a; }
static inline mg_vd mg_maxd_v(mg_vd a, mg_vd b) { return ((b > a) | (b != b)) ? b : a; }
static inline mg_vi mg_iota(void) { mg_vi v; for (int l = 0; l < MG_W; ++l) v[l] = l; return v; }
// The lane trees below: step w (MG_W / 2, ..., 1) sets lane i < w to op(lane i, lane i + w),
// so lane 0 ends with the reduction. For MG_W 2 to 16, MG_TREE spells each step as one shuffle
// (lane i + w brought to lane i; the other lanes unused) and one vector op: the same operations
// on the same values as the loop over an array (kept for other widths), hence bitwise the same
// result, without the loop (GCC 12 kept it as a loop, storing the vector and reloading lanes:
// ~4x slower in a decode step's attention, one tree per key).
#define MG_ADD(a, b) ((a) + (b))
#if MG_W == 16
// The same tree levels for 16 vectors at once (the decode attention's 16 keys): MG_L8 of two
// vectors x, y (one key each) gives lanes 0-7 = x's level-8 sums, 8-15 = y's; MG_L4 of two such
// (two keys each) gives 4 lanes a key, and so on, MG_L1 leaving one lane a key, in order.
#define MG_L8(x, y)                                                                                  \
  (__builtin_shufflevector(x, y, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +           \
   __builtin_shufflevector(x, y, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
#define MG_L4(x, y)                                                                                  \
  (__builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +         \
   __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31))
#define MG_L2(x, y)                                                                                  \
  (__builtin_shufflevector(x, y, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +         \
   __builtin_shufflevector(x, y, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31))
#define MG_L1(x, y)                                                                                  \
  (__builtin_shufflevector(x, y, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +        \
   __builtin_shufflevector(x, y, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31))
#define MG_TREE(v, OP, T)                                                                       \
  v = OP(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 0, 0, 0, 0, 0, 0, 0)); \
  v = OP(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));       \
  v = OP(v, __builtin_shufflevector(v, v, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));       \
  v = OP(v, __builtin_shufflevector(v, v, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
#elif MG_W == 8
#define MG_TREE(v, OP, T)                                             \
  v = OP(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 0, 0, 0)); \
  v = OP(v, __builtin_shufflevector(v, v, 2, 3, 0, 0, 0, 0, 0, 0)); \
  v = OP(v, __builtin_shufflevector(v, v, 1, 0, 0, 0, 0, 0, 0, 0))
#elif MG_W == 4
#define MG_TREE(v, OP, T)                               \
  v = OP(v, __builtin_shufflevector(v, v, 2, 3, 0, 0)); \
  v = OP(v, __builtin_shufflevector(v, v, 1, 0, 0, 0))
#elif MG_W == 2
#define MG_TREE(v, OP, T) v = OP(v, __builtin_shufflevector(v, v, 1, 0))
#elif MG_W == 1
#define MG_TREE(v, OP, T) (void)0
#else  // the loop over an array, one level at a time
#define MG_TREE(v, OP, T)                                     \
  do {                                                        \
    T t_[MG_W];                                               \
    memcpy(t_, &v, sizeof t_);                                \
    for (int w = MG_W / 2; w >= 1; w /= 2)                    \
      for (int i = 0; i < w; ++i) t_[i] = OP(t_[i], t_[i + w]); \
    v[0] = t_[0];                                             \
  } while (0)
#endif
// max across the lanes as a tree (log2(MG_W) steps of independent operations; max is exact)
#if MG_W == 1 || MG_W == 2 || MG_W == 4 || MG_W == 8 || MG_W == 16
#define MG_MAXF mg_max_v
#define MG_MAXD mg_maxd_v
#else
#define MG_MAXF mg_max
#define MG_MAXD mg_maxd
#endif
#if MG_W == 16
// rows r[0..15] -> columns (r[d][l] becomes r[l][d]): 4 rounds, each zipping rows i and i + 8
// into rows 2i, 2i + 1 (one two-source permute each: 64 in all)
#define MG_ZIPLO(x, y) __builtin_shufflevector(x, y, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)
#define MG_ZIPHI(x, y) __builtin_shufflevector(x, y, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
static inline void mg_transpose16(mg_vf* r) {
  for (int round = 0; round < 4; ++round) {
    mg_vf t[16];
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = MG_ZIPLO(r[i], r[i + 8]);
      t[2 * i + 1] = MG_ZIPHI(r[i], r[i + 8]);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
  }
}
#endif
static inline float mg_hmax(mg_vf v) {
  MG_TREE(v, MG_MAXF, float);
  return v[0];
}
static inline double mg_hmaxd(mg_vd v) {
  MG_TREE(v, MG_MAXD, double);
  return v[0];
}
// double lanes summed as a tree: exact for the sums of <= 2^29 floats a layernorm makes of a
// constant row, and short dependency chains
static inline double mg_hsumd(mg_vd v) {
  MG_TREE(v, MG_ADD, double);
  return v[0];
}
// float lanes summed as a tree (as _mm512_reduce_add_ps: eager's dot products)
static inline float mg_hsum_tree(mg_vf v) {
  MG_TREE(v, MG_ADD, float);
  return v[0];
}
#if MG_W == 16
// (float)mg_hsumd of 16 double vectors at once, lane k = (float)mg_hsumd(p[k]) bit for bit (the
// same adds per level: lanes 0-7 + 8-15 of each, then pairs of rows as MG_L4 .. MG_L1 do)
typedef double mg_vd8 __attribute__((vector_size(64)));
typedef float mg_vf8 __attribute__((vector_size(32)));
#define MG_D8(v) (__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15))
#define MG_D4(x, y) (__builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11) + __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15))
#define MG_D2(x, y) (__builtin_shufflevector(x, y, 0, 1, 4, 5, 8, 9, 12, 13) + __builtin_shufflevector(x, y, 2, 3, 6, 7, 10, 11, 14, 15))
#define MG_D1(x, y) (__builtin_shufflevector(x, y, 0, 2, 4, 6, 8, 10, 12, 14) + __builtin_shufflevector(x, y, 1, 3, 5, 7, 9, 11, 13, 15))
static inline mg_vf mg_hsumd16(const mg_vd* p) {
  mg_vd8 s[16], t[8], u[4];
  for (int k = 0; k < 16; ++k) s[k] = MG_D8(p[k]);
  for (int k = 0; k < 8; ++k) t[k] = MG_D4(s[2 * k], s[2 * k + 1]);
  for (int k = 0; k < 4; ++k) u[k] = MG_D2(t[2 * k], t[2 * k + 1]);
  const mg_vf8 lo = __builtin_convertvector(MG_D1(u[0], u[1]), mg_vf8), hi = __builtin_convertvector(MG_D1(u[2], u[3]), mg_vf8);
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#endif
// the sum in lane order (as eager adds its probabilities, key by key)
static inline float mg_hsum(mg_vf v) {
  float s = v[0];
  for (int l = 1; l < MG_W; ++l) s += v[l];
  return s;
}

// mg_fma on every lane: one vector FMA instruction where the target has it for MG_W lanes
// (the compiler leaves a loop of fmaf over the lanes scalar), else lane by lane
static inline mg_vf mg_fma_v(mg_vf a, mg_vf b, mg_vf c) {
#if MG_W == 16 && defined(__AVX512F__)
  return (mg_vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif MG_W == 8 && defined(__FMA__)
  return (mg_vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif MG_W == 4 && defined(__FMA__)
  return (mg_vf)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c);
#else
  for (int l = 0; l < MG_W; ++l) a[l] = mg_fma(a[l], b[l], c[l]);
  return a;
#endif
}
// mg_exp_nonpos and mg_exp on every lane. With 16 AVX-512 lanes 2^n is applied by scalef
// (u 2^n, exact for these normal results): 14 vector ops instead of 18 (the conversion, shift
// and two multiplies gone), the softmax's and attention's exps. The clamp at -86.9886 keeps
// n >= -125, so no result is subnormal (a subnormal or an underflow to 0 costs a microcode
// assist without FTZ: clamping at -110 instead made the attention 5x slower); below it the
// result is 0. Equal bit for bit to mg_exp_nonpos for x >= -86.9886 (n >= -125 there too);
// mg_exp_nonpos gives 0 below (n = -126 gives 0 by its exponent bits), so equal everywhere
// except possibly x in [-86.98869, -86.9886) (results < 1.2e-38). NaN stays NaN.
static inline mg_vf mg_exp_nonpos_v(mg_vf x) {
#if MG_W == 16 && defined(__AVX512F__)
  const mg_vf lo = mg_splat(-86.9886f);
#else
  const mg_vf lo = mg_splat(-87.33654f);
#endif
  const mg_vf xc = x < lo ? lo : x;
  const mg_vf n = mg_fma_v(xc, mg_splat(1.44269504f), mg_splat(12582912.0f)) - 12582912.0f;
  mg_vf r = mg_fma_v(-n, mg_splat(0.693145751953125f), xc);
  r = mg_fma_v(-n, mg_splat(1.428606765330187e-06f), r);
  mg_vf u = mg_fma_v(mg_splat(0.001381461275741458f), r, mg_splat(0.008368710055947304f));
  u = mg_fma_v(u, r, mg_splat(0.04166838899254799f));
  u = mg_fma_v(u, r, mg_splat(0.1666652113199234f));
  u = mg_fma_v(u, r, mg_splat(0.4999999403953552f));
  u = mg_fma_v(u, r, mg_splat(1.0f));
  u = mg_fma_v(u, r, mg_splat(1.0f));
#if MG_W == 16 && defined(__AVX512F__)
  const mg_vf y = (mg_vf)_mm512_scalef_ps((__m512)u, (__m512)n);
#else
  const mg_vi bits = (__builtin_convertvector(n, mg_vi) + 126) << 23;  // 2^(n-1)
  const mg_vf y = u * (mg_vf)bits * 2.0f;
#endif
  return x < lo ? mg_splat(0.0f) : y;
}
static inline mg_vf mg_exp_v(mg_vf x) {
  const mg_vf hi = mg_splat(88.72283f);
  const mg_vf y = mg_exp_nonpos_v(x > hi ? hi : x);
  return x > hi ? mg_splat(INFINITY) : y;
}
static inline mg_vf mg_rsqrt_v(mg_vf x) { for (int l = 0; l < MG_W; ++l) x[l] = mg_rsqrt(x[l]); return x; }
static inline mg_vf mg_gelu_v(mg_vf x) { for (int l = 0; l < MG_W; ++l) x[l] = mg_gelu(x[l]); return x; }
)";

// How each kernel's entry is declared: noinline, so that g++ compiles its body once, not once
// inlined into call() and again into call_kernel() (--explain's entry); measured on the GPT at
// (2, 16): the JIT's g++ -O3 3.7-4.2 s -> 1.7-2.0 s, pinned; the calls cost ~30 ns a forward.
constexpr const char* kKernelDecl = "static __attribute__((noinline)) void";

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

std::string describe(const Graph& g, int id) { return describe_tensor(g, id); }

// The comment every kernel starts with.
std::string kernel_comment(const Schedule& s, const Kernel& k, const std::vector<std::string>& params) {
  return kernel_comment_text(s.graph, k, params, "kept in registers");
}

// ---- row-wise kernels -------------------------------------------------------------------

class RowwiseGen {
 public:
  RowwiseGen(const Schedule& s, const Kernel& k, const CodegenOptions& opt)
      : g_(s.graph), s_(s), k_(k), R_(k.rows), C_(k.cols), W_(opt.vec_width), opt_(opt) {
    for (size_t i = 0; i < k.reads.size(); ++i) ptr_[k.reads[i]] = fmt::format("in_ptr{}", i);
    for (size_t i = 0; i < k.writes.size(); ++i) out_[k.writes[i]] = fmt::format("out_ptr{}", i);
    for (int i : k.nodes) in_group_.insert(g_.nodes[static_cast<size_t>(i)].output);
  }

  std::string generate(std::string& call_args);

 private:
  // Where an expression is evaluated: one row value, one column c (scalar, the tail), or
  // MG_W columns from c0 (a vector).
  enum class Mode { Row, Scalar, Vector };

  bool is_row(int node) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    return kReduction.contains(n.op) || (g_.tensor(n.output).cols() == 1 && C_ > 1);
  }
  // p[index] as a scalar, or the vector of MG_W floats from there.
  static std::string load(const std::string& p, const std::string& index, Mode m) {
    return m == Mode::Vector ? fmt::format("mg_load(&{}[{}])", p, index) : fmt::format("{}[{}]", p, index);
  }
  std::string col(Mode m) const { return m == Mode::Vector ? "c0" : "c"; }
  // The value of tensor t at (r, c), at columns [c0, c0 + MG_W), or at row r.
  std::string operand(int t, Mode m) const {
    if (in_group_.count(t)) {
      const int p = g_.tensor(t).producer;
      return is_row(p) ? (row_vec_ ? "rowv" : "row") + std::to_string(t) : fmt::format("tmp{}", t);
    }
    const TensorInfo& ti = g_.tensor(t);
    const std::string& p = ptr_.at(t);
    if (ti.cols() == C_ && ti.rows() == R_ && C_ > 1) return load(p, fmt::format("r * {} + {}", C_, col(m)), m);
    if (ti.cols() == 1 && ti.rows() == R_) return fmt::format("{}[r]", p);
    if (ti.shape.size() == 1 && ti.shape[0] == C_ && m != Mode::Row) return load(p, col(m), m);
    MINIGPT_FAIL("codegen: {} cannot index {} {} in a ({}, {}) loop", k_.name, ti.name, shape_text(ti.shape), R_, C_);
  }
  // Tensor t is x - max(x) over its row (softmax's shift), so exp(t) <= 1: no overflow test.
  bool nonpositive(int t) const {
    if (g_.tensor(t).producer < 0) return false;
    const Node& sub = g_.nodes[static_cast<size_t>(g_.tensor(t).producer)];
    if (sub.op != Op::Sub || sub.inputs.size() != 2 || g_.tensor(sub.inputs[1]).producer < 0) return false;
    const Node& mx = g_.nodes[static_cast<size_t>(g_.tensor(sub.inputs[1]).producer)];
    return mx.op == Op::ReduceMax && mx.inputs[0] == sub.inputs[0];
  }
  std::string expr(int node, Mode m) const {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    auto a = [&](size_t i) { return operand(n.inputs[i], m); };
    const char* v = m == Mode::Vector ? "_v" : "";
    switch (n.op) {
      case Op::Embedding:  // row ids[r] of the table
        return load(ptr_.at(n.inputs[1]), fmt::format("(int64_t){}[r] * {} + {}", ptr_.at(n.inputs[0]), C_, col(m)), m);
      case Op::PosEmbedding:  // row offset + r % period of the table
        if (n.runtime_offset)  // one row, the position read at run time
          return load(ptr_.at(n.inputs[0]), fmt::format("(int64_t){}[0] * {} + {}", ptr_.at(n.inputs[1]), C_, col(m)), m);
        return n.period == 1 ? load(ptr_.at(n.inputs[0]), fmt::format("{} + {}", n.offset * C_, col(m)), m)
                             : load(ptr_.at(n.inputs[0]), fmt::format("({} + r % {}) * {} + {}", n.offset, n.period, C_, col(m)), m);
      case Op::Add:
      case Op::BiasAdd: return a(0) + " + " + a(1);
      case Op::Sub: return a(0) + " - " + a(1);
      case Op::Mul: return a(0) + " * " + a(1);
      case Op::Div:  // by a per-row value (softmax's sum): one reciprocal a row, a multiply per
                     // column, as eager's softmax scales by 1 / sum (a divide per column cost
                     // ~3.6 of 22.7 us in the (32, 611) softmax)
        if (in_group_.count(n.inputs[1]) && is_row(g_.tensor(n.inputs[1]).producer) && m != Mode::Row)
          return fmt::format("{} * (1.0f / {})", a(0), a(1));
        return a(0) + " / " + a(1);
      case Op::AddScalar: return a(0) + " + " + flit(n.alpha);
      case Op::MulScalar: return a(0) + " * " + flit(n.alpha);
      case Op::Exp: return fmt::format("{}{}({})", nonpositive(n.inputs[0]) ? "mg_exp_nonpos" : "mg_exp", v, a(0));
      case Op::Rsqrt: return fmt::format("mg_rsqrt{}({})", v, a(0));
      case Op::Gelu: return fmt::format("mg_gelu{}({})", v, a(0));
      default: MINIGPT_FAIL("codegen: {} is not a row-wise op", op_name(n.op));
    }
  }
  // Element nodes (in kernel order) that computing `targets` needs; nodes in `loaded` are read
  // back from where an earlier loop stored them instead of recomputed.
  std::vector<int> closure(const std::vector<int>& targets, const std::map<int, int>& loaded = {}) const {
    std::set<int> need;
    std::vector<int> stack = targets;
    while (!stack.empty()) {
      const int node = stack.back();
      stack.pop_back();
      if (is_row(node) || !need.insert(node).second || loaded.count(node)) continue;
      for (int in : g_.nodes[static_cast<size_t>(node)].inputs)
        if (in_group_.count(in)) stack.push_back(g_.tensor(in).producer);
    }
    return {need.begin(), need.end()};  // node ids ascend in kernel (topological) order
  }
  // The statements of one column step. loaded: node -> output tensor whose buffer holds it.
  std::string body(const std::vector<int>& nodes, Mode m, const std::map<int, int>& loaded = {}) const {
    std::string b;
    for (int node : nodes) {
      const int t = g_.nodes[static_cast<size_t>(node)].output;
      const char* type = m == Mode::Vector ? "mg_vf" : "float";
      if (loaded.count(node)) {
        const std::string& o = out_.at(loaded.at(node));
        b += fmt::format("const {} tmp{} = {};  // {}, stored there by the loop above\n", type, t,
                         load(o, fmt::format("r * {} + {}", C_, col(m)), m), g_.tensor(t).name);
      } else {
        b += fmt::format("const {} tmp{} = {};  // {}\n", type, t, expr(node, m), g_.tensor(t).name);
      }
    }
    return b;
  }
  // Values a reduction loop computes anyway and the store loop needs again (softmax's
  // exp(x - max)): the reduction loop stores them into the output they feed, the store loop
  // reads them back instead of recomputing (as Inductor's softmax kernel reuses out_ptr).
  // Fills stash: reduction node -> [(value node, output tensor)], and loaded for the store loop.
  void plan_stash(const std::vector<int>& stores, std::map<int, std::vector<std::pair<int, int>>>& stash,
                  std::map<int, int>& loaded) const {
    if (C_ <= 1) return;
    for (int y : stores) {
      int x = -1, elem_inputs = 0;
      for (int in : g_.nodes[static_cast<size_t>(y)].inputs) {
        if (!in_group_.count(in) || is_row(g_.tensor(in).producer)) continue;
        ++elem_inputs;
        x = g_.tensor(in).producer;
      }
      if (elem_inputs != 1 || loaded.count(x)) continue;
      int last = -1;  // the last reduction loop that computes x
      for (int node : k_.nodes) {
        const Node& n = g_.nodes[static_cast<size_t>(node)];
        if (!kReduction.contains(n.op) || !in_group_.count(n.inputs[0])) continue;
        const std::vector<int> c = closure({g_.tensor(n.inputs[0]).producer});
        if (std::find(c.begin(), c.end(), x) != c.end()) last = node;
      }
      if (last < 0) continue;
      stash[last].push_back({x, g_.nodes[static_cast<size_t>(y)].output});
      loaded[x] = g_.nodes[static_cast<size_t>(y)].output;
    }
  }
  // A column loop: vector steps of MG_W columns, then the scalar tail over the last C % W.
  // per(m) gives one step's statements.
  // start: the first column of the vector steps (a multiple of W; what a loop before did).
  template <typename F>
  std::string column_loop(F&& per, const std::string& indent, int64_t start = 0) const {
    const int64_t main = C_ / W_ * W_;
    std::string s;
    if (main > start) {
      s += fmt::format("{}for (int64_t c0 = {}; c0 < {}; c0 += MG_W) {{  // {} lanes a step\n", indent, start, main, W_);
      s += indent_text(per(Mode::Vector), indent + "  ");
      s += fmt::format("{}}}\n", indent);
    }
    if (main < C_) {
      s += fmt::format("{}for (int64_t c = {}; c < {}; ++c) {{  // scalar tail: columns [{}, {})\n", indent, main, C_, main, C_);
      s += fmt::format("{}  const int64_t l = c - {};  // the lane this column adds to\n", indent, main);
      s += indent_text(per(Mode::Scalar), indent + "  ");
      s += fmt::format("{}}}\n", indent);
    }
    return s;
  }

  // A max reduction's column loop with kMaxChains accumulators (acc12, then chain1, chain2, ...
  // in a block of their own) taking turns over the vector steps, combined after: one
  // accumulator's chain of dependent max operations (~4 cycles each) bounds the loop otherwise
  // (the (32, 611) softmax's max pass ran ~1 us faster of ~18). A max is exact in any order, so
  // the result is the same. per(m): one step's statements, updating acc{t}. Returns "" when
  // the row is too short.
  static constexpr int kMaxChains = 4;
  static_assert(kMaxChains == 4, "max_chains_loop's declaration and combine are written for 4 chains");
  template <typename F>
  std::string max_chains_loop(F&& per, int t, bool dbl, const std::string& indent) const {
    const int64_t chained = C_ / (kMaxChains * W_) * (kMaxChains * W_);
    if (chained == 0) return "";
    const std::string acc = fmt::format("acc{}", t), fn = dbl ? "mg_maxd_v" : "mg_max_v";
    const std::string step = per(Mode::Vector);
    std::string s = fmt::format("{}{{  // {} chains of max: {} and chain1..{}\n", indent, kMaxChains, acc, kMaxChains - 1);
    const std::string in = indent + "  ";
    s += fmt::format("{}{} chain1 = {}, chain2 = {}, chain3 = {};\n", in, dbl ? "mg_vd" : "mg_vf", acc, acc, acc);
    s += fmt::format("{}for (int64_t c4 = 0; c4 < {}; c4 += {} * MG_W) {{  // {} lanes a step, {} steps a trip\n", in, chained,
                     kMaxChains, W_, kMaxChains);
    for (int k = 0; k < kMaxChains; ++k) {
      const std::string own = k == 0 ? acc : fmt::format("chain{}", k);
      s += fmt::format("{}  {{\n{}    const int64_t c0 = c4{};\n", in, in, k == 0 ? "" : fmt::format(" + {} * MG_W", k));
      s += indent_text(std::regex_replace(step, std::regex("\\b" + acc + "\\b"), own), in + "    ");
      s += fmt::format("{}  }}\n", in);
    }
    s += fmt::format("{}}}\n", in);
    s += fmt::format("{}{} = {}({}({}, chain1), {}(chain2, chain3));\n", in, acc, fn, fn, acc, fn);
    s += fmt::format("{}}}\n", indent);
    return s + column_loop(per, indent, chained);
  }

  // Row values (in_group_ tensors made by row nodes) that `nodes` read.
  std::set<int> row_inputs(const std::vector<int>& nodes) const {
    std::set<int> rows;
    for (int node : nodes)
      for (int in : g_.nodes[static_cast<size_t>(node)].inputs)
        if (in_group_.count(in) && is_row(g_.tensor(in).producer)) rows.insert(in);
    return rows;
  }
  // The element nodes a reduction's column loop computes.
  std::vector<int> reduced_nodes(const Node& n) const {
    std::vector<int> targets;
    if (in_group_.count(n.inputs[0])) targets.push_back(g_.tensor(n.inputs[0]).producer);
    return closure(targets);
  }
  // An accurate sum (acc_f64: a layernorm's) is summed in double lanes, as eager's: exact for a
  // constant row (its layernorm is then exactly 0) whatever the other columns hold. Tried and
  // dropped for speed (the double lanes cost ~0.3 us of a 0.7-1.0 us layernorm at (32, 64)):
  // float lanes shifted by the row's first element (an outlier first column cost the shipped
  // model's probes 1.9e-5 against eager's logits under AVX2, over the 1e-5 bound); a float tree
  // (exact for a constant row of 2^k vectors; 3.6e-6 from eager's layernorm at mean 100, and
  // 1.2e-5 on the probes under the scalar ISA); float squared deviations with the double mean
  // (passed, but the probes' logits moved from 6.1e-6 to 8.6e-6 from eager for no measurable
  // speed).
  // (A max is exact in float: acc_f64 changes nothing there.)
  bool in_double(const Node& n) const { return n.acc_f64 && n.op == Op::ReduceSum; }
  // kept: (value node, output) pairs the column loop also stores (plan_stash)
  std::string reduction(const Node& n, const std::string& indent, bool block, const std::vector<std::pair<int, int>>& kept = {}) const;
  std::string store_loop(const std::vector<int>& stores, const std::map<int, int>& loaded, const std::string& indent) const;
  bool rows_in_blocks(const std::map<int, std::vector<std::pair<int, int>>>& stash) const;
  std::string row_block(const std::vector<int>& stores, const std::map<int, int>& loaded);

  const Graph& g_;
  const Schedule& s_;
  const Kernel& k_;
  int64_t R_, C_;
  int W_;
  const CodegenOptions& opt_;
  std::map<int, std::string> ptr_, out_;
  std::set<int> in_group_;
  bool row_vec_ = false;  // row values are mg_vf over 16 rows (rowv{t}), in row_block's row statements
};

// One reduction's statements for row r (block: row r = rr + k of a 16-row block, into
// acc{t}[k]). Max: lane-wise, then a tree. Float sum: lane-wise, the lanes added in order.
// acc_f64 sum: double lanes, then a tree. Leaves row{t} (not in a block; a block's trees are
// row_block's, 16 rows at once).
std::string RowwiseGen::reduction(const Node& n, const std::string& in2, bool block, const std::vector<std::pair<int, int>>& kept) const {
  const int t = n.output, src = n.inputs[0];
  const bool mx = n.op == Op::ReduceMax, dbl = in_double(n);
  const std::string acc = block ? fmt::format("acc{}[k]", t) : fmt::format("acc{}", t);
  std::string code;
  if (!block)
    code += fmt::format("{}// {} of {} over the row{}: lane-wise, lanes combined {}\n", in2, mx ? "max" : "sum", g_.tensor(src).name,
                        dbl ? ", in double" : "", mx || dbl ? "as a tree" : "in order");
  const std::vector<int> nodes = reduced_nodes(n);
  code += fmt::format("{}{}{} = {};\n", in2, block ? "" : dbl ? "mg_vd " : "mg_vf ", acc,
                      mx ? "mg_splat(-INFINITY)" : dbl ? "(mg_vd){}" : "mg_splat(0.0f)");
  auto step = [&](Mode m) {
    std::string per = body(nodes, m);
    std::string val = operand(src, m);
    if (dbl) val = m == Mode::Vector ? "mg_widen(" + val + ")" : "(double)" + val;
    const std::string lane = m == Mode::Vector ? "" : "[l]";
    per += mx ? fmt::format("{}{} = {}({}{}, {});\n", acc, lane, m == Mode::Vector ? "mg_max_v" : "mg_max", acc, lane, val)
              : fmt::format("{}{} += {};\n", acc, lane, val);
    for (const auto& [x, y] : kept) {
      const int xt = g_.nodes[static_cast<size_t>(x)].output;
      per += m == Mode::Vector ? fmt::format("mg_store(&{}[r * {} + c0], tmp{});  // kept for the store loop\n", out_.at(y), C_, xt)
                               : fmt::format("{}[r * {} + c] = tmp{};  // kept for the store loop\n", out_.at(y), C_, xt);
    }
    return per;
  };
  const std::string chains = mx ? max_chains_loop(step, t, false, in2) : "";
  code += chains.empty() ? column_loop(step, in2) : chains;
  if (block) return code;
  const std::string total = mx    ? fmt::format("mg_hmax(acc{})", t)
                            : dbl ? fmt::format("(float)mg_hsumd(acc{})", t)
                                  : fmt::format("mg_hsum(acc{})", t);
  code += fmt::format("{}const float row{} = {};  // {}\n", in2, t, total, g_.tensor(t).name);
  return code;
}

// The column loop that stores the kernel's element-wise outputs for row r.
std::string RowwiseGen::store_loop(const std::vector<int>& stores, const std::map<int, int>& loaded, const std::string& in2) const {
  std::string names;
  for (int node : stores) names += (names.empty() ? "" : ", ") + g_.tensor(g_.nodes[static_cast<size_t>(node)].output).name;
  std::string code = fmt::format("{}// outputs: {}\n", in2, names);
  const std::vector<int> nodes = closure(stores, loaded);
  if (C_ == 1) {  // one value per row: no column loop
    code += fmt::format("{}{{\n{}  const int64_t c = 0;\n", in2, in2);
    code += indent_text(body(nodes, Mode::Scalar), in2 + "  ");
    for (int node : stores) code += fmt::format("{}  {}[r] = tmp{};\n", in2, out_.at(g_.nodes[static_cast<size_t>(node)].output), g_.nodes[static_cast<size_t>(node)].output);
    code += fmt::format("{}}}\n", in2);
    return code;
  }
  return code + column_loop(
                    [&](Mode m) {
                      std::string per = body(nodes, m, loaded);
                      for (int node : stores) {
                        const int t = g_.nodes[static_cast<size_t>(node)].output;
                        per += m == Mode::Vector ? fmt::format("mg_store(&{}[r * {} + c0], tmp{});\n", out_.at(t), C_, t)
                                                 : fmt::format("{}[r * {} + c] = tmp{};\n", out_.at(t), C_, t);
                      }
                      return per;
                    },
                    in2);
}

// Rows in blocks of 16 (row_block) where every reduction is an accurate sum (a layernorm: the
// per-row statistics are a chain of ~100 cycles, two lane trees and a division, of which the core
// overlapped ~2 rows), the row statements are arithmetic on row values only, and the columns are
// whole 16-lane vectors.
bool RowwiseGen::rows_in_blocks(const std::map<int, std::vector<std::pair<int, int>>>& stash) const {
  if (W_ != 16 || C_ % 16 != 0 || C_ < 16 || R_ < 16 || !stash.empty()) return false;
  for (int node : k_.nodes) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    if (!is_row(node)) continue;
    if (kReduction.contains(n.op)) {
      if (n.op != Op::ReduceSum || !n.acc_f64) return false;
      continue;
    }
    if (n.op != Op::MulScalar && n.op != Op::AddScalar && n.op != Op::Rsqrt && n.op != Op::Add && n.op != Op::Sub && n.op != Op::Mul)
      return false;
    for (int in : n.inputs)
      if (!in_group_.count(in) || !is_row(g_.tensor(in).producer)) return false;
  }
  return true;
}

// 16 rows [rr, rr + 16) at a time: each reduction's column loops for the 16 rows one after the
// other (16 independent chains; row r = rr + k), its 16 lane trees at once (mg_hsumd16: the same
// adds as mg_hsumd, one row a lane), the row statements once for the 16 rows as vectors (rowv{t},
// lanes = rows), kept in rowb{t}[16] for the column loops that read them by scalar. Every value
// is the one the row-by-row loop computes, bit for bit.
std::string RowwiseGen::row_block(const std::vector<int>& stores, const std::map<int, int>& loaded) {
  const std::string in2 = "    ", in3 = "      ";
  std::string code = "  const int64_t rb = r0 + (r1 - r0) / 16 * 16;  // rows [r0, rb) in blocks of 16, the rest one by one\n";
  code += "  for (int64_t rr = r0; rr < rb; rr += 16) {\n";
  // the row values a k loop over `nodes` reads, as scalars of row r
  auto row_scalars = [&](const std::vector<int>& nodes) {
    std::string s;
    for (int t : row_inputs(nodes)) s += fmt::format("{}const float row{} = rowb{}[k];\n", in3, t, t);
    return s;
  };
  auto k_loop = [&](const std::string& what) {
    return fmt::format("{}#pragma GCC unroll 16\n{}for (int64_t k = 0; k < 16; ++k) {{  // {}\n{}const int64_t r = rr + k;\n", in2, in2, what, in3);
  };
  std::set<int> read_back;  // row values the k loops read
  for (int node : k_.nodes)
    if (kReduction.contains(g_.nodes[static_cast<size_t>(node)].op)) {
      const std::set<int> r = row_inputs(reduced_nodes(g_.nodes[static_cast<size_t>(node)]));
      read_back.insert(r.begin(), r.end());
    }
  if (!stores.empty()) {
    const std::set<int> r = row_inputs(closure(stores, loaded));
    read_back.insert(r.begin(), r.end());
  }
  for (int node : k_.nodes) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const int t = n.output;
    if (!is_row(node)) continue;
    if (kReduction.contains(n.op)) {
      code += fmt::format("{}// sum of {} over each row: double lanes, the 16 rows' lane trees at once\n", in2, g_.tensor(n.inputs[0]).name);
      code += fmt::format("{}mg_vd acc{}[16];\n", in2, t);
      code += k_loop("row by row: independent chains");
      code += row_scalars(reduced_nodes(n));
      code += reduction(n, in3, true);
      code += fmt::format("{}}}\n", in2);
      code += fmt::format("{}const mg_vf rowv{} = mg_hsumd16(acc{});  // {}, lanes = rows\n", in2, t, t, g_.tensor(t).name);
    } else {
      row_vec_ = true;
      code += fmt::format("{}const mg_vf rowv{} = {};  // {}, lanes = rows\n", in2, t, expr(node, Mode::Vector), g_.tensor(t).name);
      row_vec_ = false;
    }
    if (out_.count(t)) code += fmt::format("{}mg_store(&{}[rr], rowv{});\n", in2, out_.at(t), t);
    if (read_back.count(t)) {  // read back by scalar: without the barrier GCC broadcasts lanes by permutes
      code += fmt::format("{}float rowb{}[16] __attribute__((aligned(64)));  // read back row by row\n{}mg_store(rowb{}, rowv{});\n", in2, t,
                          in2, t, t);
      code += fmt::format("{}__asm__ volatile(\"\" : : \"r\"(rowb{}) : \"memory\");\n", in2, t);
    }
  }
  if (!stores.empty()) {
    code += k_loop("the outputs, row by row");
    code += row_scalars(closure(stores, loaded));
    code += store_loop(stores, loaded, in3);
    code += fmt::format("{}}}\n", in2);
  }
  code += "  }\n";
  return code;
}

std::string RowwiseGen::generate(std::string& call_args) {
  std::vector<std::string> params, fields;
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
  std::vector<int> stores;  // every element-wise output of the kernel
  for (int t : k_.writes)
    if (!is_row(g_.tensor(t).producer)) stores.push_back(g_.tensor(t).producer);
  std::map<int, std::vector<std::pair<int, int>>> stash;
  std::map<int, int> loaded;
  plan_stash(stores, stash, loaded);
  const bool blocks = rows_in_blocks(stash);
  if (blocks) code += row_block(stores, loaded);
  code += fmt::format("  for (int64_t r = {}; r < r1; ++r) {{\n", blocks ? "rb" : "r0");
  const std::string in2 = "    ";
  for (int node : k_.nodes) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    const int t = n.output;
    if (!is_row(node)) continue;
    if (kReduction.contains(n.op)) {
      code += reduction(n, in2, false, stash[node]);
    } else {
      code += fmt::format("{}const float row{} = {};  // {}\n", in2, t, expr(node, Mode::Row), g_.tensor(t).name);
    }
    if (out_.count(t)) code += fmt::format("{}{}[r] = row{};\n", in2, out_[t], t);
  }
  if (!stores.empty()) code += store_loop(stores, loaded, in2);
  code += "  }\n}\n";
  // launcher
  code += fmt::format("{} {}(const MgRuntime* rt, const {}_args* a) {{\n", kKernelDecl, k_.name, k_.name);
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

// The attention loops with MG_W-lane vectors, queries along the lanes (as the eager kernel's
// transposed tiles): per (batch, head) and block of MG_W queries, keys in blocks of MG_W; per
// key a vector of scores (one lane per query, sum over d in order), the causal mask per lane,
// a running max m and sum l per lane (online softmax: earlier key blocks rescaled by
// exp(m_old - m_new)), and out^T[d] += p v[d] in key order. The (T, S) scores exist only as
// one block of MG_W vectors at a time.
std::string attention_vector_body(const std::string& name, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t dh,
                                  const std::string& offset, float scale, bool decode, int W) {
  (void)B;
  (void)W;
  const std::string kaddr = decode ? fmt::format("a->in_ptr1 + s * {} + h * {}", C, dh)
                                   : fmt::format("a->in_ptr0 + (b * {} + s) * {} + {} + h * {}", T, 3 * C, C, dh);
  const std::string vaddr = decode ? fmt::format("a->in_ptr2 + s * {} + h * {}", C, dh)
                                   : fmt::format("a->in_ptr0 + (b * {} + s) * {} + {} + h * {}", T, 3 * C, 2 * C, dh);
  std::string code = fmt::format("static void {}_pairs(void* ctx, int64_t p0, int64_t p1) {{\n", name);
  code += fmt::format("  const {}_args* a = (const {}_args*)ctx;\n", name, name);
  code += "  const mg_vi lane = mg_iota();\n";
  code += "  for (int64_t p = p0; p < p1; ++p) {\n";
  code += fmt::format("    const int64_t b = p / {}, h = p % {};\n", NH, NH);
  code += fmt::format("    for (int64_t q0 = 0; q0 < {}; q0 += MG_W) {{  // queries [q0, q0 + MG_W) along the lanes\n", T);
  code += fmt::format("      mg_vf qt[{}];  // qt[d][l] = q[q0 + l][d] (0 past the last query)\n", dh);
  code += fmt::format("      for (int64_t d = 0; d < {}; ++d)\n", dh);
  code += "        for (int l = 0; l < MG_W; ++l)\n";
  code += fmt::format("          qt[d][l] = q0 + l < {} ? a->in_ptr0[(b * {} + q0 + l) * {} + h * {} + d] : 0.0f;\n", T, T, 3 * C, dh);
  code += fmt::format("      mg_vf m = mg_splat(-INFINITY), l = {{}}, ot[{}] = {{}};  // running max, sum, out^T\n", dh);
  // offset: where query 0 sits among the keys ("0" in a whole-sequence forward: left out).
  const std::string plus_offset = offset == "0" ? "" : " + " + offset;
  code += fmt::format("      const int64_t keys = (q0 + MG_W < {} ? q0 + MG_W : {}){};  // keys the block's last query sees\n", T, T,
                      plus_offset);
  code += "      for (int64_t s0 = 0; s0 < keys; s0 += MG_W) {\n";
  code += "        const int64_t n = keys - s0 < MG_W ? keys - s0 : MG_W;\n";
  code += "        mg_vf sv[MG_W];  // sv[j][l]: score of key s0 + j for query q0 + l\n";
  code += "        mg_vf bm = mg_splat(-INFINITY);\n";
  code += "        for (int64_t j = 0; j < n; ++j) {\n";
  code += "          const int64_t s = s0 + j;\n";
  code += fmt::format("          const float* k = {};\n", kaddr);
  code += "          mg_vf acc = {};\n";
  code += fmt::format("          for (int64_t d = 0; d < {}; ++d) acc += qt[d] * k[d];\n", dh);
  code += fmt::format("          acc = acc * {};  // scale 1/sqrt({})\n", flit(scale), dh);
  code += fmt::format("          sv[j] = (lane + (int32_t)(q0{}) >= (int32_t)s) ? acc : mg_splat(-INFINITY);  // causal mask\n",
                      plus_offset);
  code += "          bm = mg_max_v(bm, sv[j]);\n";
  code += "        }\n";
  code += "        const mg_vf m_new = mg_max_v(m, bm);\n";
  code += "        const mg_vf corr = mg_exp_nonpos_v(m - m_new);  // 0 on the first block (m = -inf)\n";
  code += "        l = l * corr;\n";
  code += fmt::format("        for (int64_t d = 0; d < {}; ++d) ot[d] = ot[d] * corr;\n", dh);
  code += "        for (int64_t j = 0; j < n; ++j) {\n";
  code += "          const int64_t s = s0 + j;\n";
  code += "          const mg_vf pj = mg_exp_nonpos_v(sv[j] - m_new);  // masked: exp(-inf) = 0\n";
  code += "          l += pj;\n";
  code += fmt::format("          const float* v = {};\n", vaddr);
  code += fmt::format("          for (int64_t d = 0; d < {}; ++d) ot[d] += pj * v[d];\n", dh);
  code += "        }\n";
  code += "        m = m_new;\n";
  code += "      }\n";
  code += fmt::format("      for (int l2 = 0; l2 < MG_W && q0 + l2 < {}; ++l2) {{\n", T);
  code += fmt::format("        float* o = a->out_ptr0 + (b * {} + q0 + l2) * {} + h * {};\n", T, C, dh);
  code += fmt::format("        for (int64_t d = 0; d < {}; ++d) o[d] = ot[d][l2] / l[l2];\n", dh);
  code += "      }\n    }\n  }\n}\n";
  return code;
}

// A whole sequence of T <= MG_W queries from position 0 (the forward at the model's T = 16):
// every key is in one block, so the softmax needs no running max or rescaling, and the loops
// are written for throughput (the GPT at (2, 16), AVX-512, one core, --explain: 5.5 -> 2.6 us a
// layer; experiments/25-compile/REPORT.md, branch cpu13e). As eager's attend_pair_dh16, per
// (batch, head):
//   Q^T (dh vectors, lanes = queries) by a register transpose (16 x 16: 4 rounds of 16 zips)
//   or, for other shapes, lane by lane;
//   S^T[j] = sum_d Q^T[d] k[j][d], all T keys side by side (d outer: T independent chains
//   instead of one chain of dh FMAs per key), each sum over d in order, times the scale;
//   the causal mask per lane, the max over keys as a tree (max is exact in any order);
//   P^T[j] = exp(S^T[j] - max), summed in key order, times 1 / sum (one vector division,
//   as eager: not the old out / sum per element, so within ~1 ulp of it);
//   out[q] = sum_{j <= q} P[q][j] v[j] (a vector over d per query, P read back from a local
//   (T, MG_W) tile by scalar, keys in order; no transpose back, masked keys skipped).
std::string attention_block_body(const std::string& name, int64_t T, int64_t C, int64_t NH, int64_t dh, float scale, int W) {
  const int64_t C3 = 3 * C;
  std::string code = fmt::format("static void {}_pairs(void* ctx, int64_t p0, int64_t p1) {{\n", name);
  code += fmt::format("  const {}_args* a = (const {}_args*)ctx;\n", name, name);
  code += "  const mg_vi lane = mg_iota();\n";
  code += "  for (int64_t p = p0; p < p1; ++p) {\n";
  code += fmt::format("    const int64_t b = p / {}, h = p % {};\n", NH, NH);
  code += fmt::format("    const float* base = a->in_ptr0 + b * {} + h * {};  // row j: q at +0, k at +{}, v at +{}\n", T * C3, dh, C,
                      2 * C);
  code += fmt::format("    mg_vf qt[{}];  // qt[d][l] = q[l][d] (0 for lanes l >= {})\n", dh, T);
  if (W == 16 && dh == 16) {
    code += fmt::format("    for (int l = 0; l < 16; ++l) qt[l] = l < {} ? mg_load(base + l * {}) : mg_splat(0.0f);  // q rows\n", T, C3);
    code += "    mg_transpose16(qt);\n";
  } else {
    code += fmt::format("    for (int64_t d = 0; d < {}; ++d)\n", dh);
    code += "      for (int l = 0; l < MG_W; ++l)\n";
    code += fmt::format("        qt[d][l] = l < {} ? base[l * {} + d] : 0.0f;\n", T, C3);
  }
  code += fmt::format("    mg_vf sv[{}];  // sv[j][l]: score of key j for query l, then its probability\n", T);
  code += fmt::format("    for (int64_t j = 0; j < {}; ++j) sv[j] = mg_splat(0.0f);\n", T);
  code += fmt::format("    for (int64_t d = 0; d < {}; ++d)\n#pragma GCC unroll {}\n", dh, T);
  code += fmt::format("      for (int64_t j = 0; j < {}; ++j) sv[j] += qt[d] * base[j * {} + {} + d];\n", T, C3, C);
  code += fmt::format("    mg_vf mx[{}];  // the running maxima\n#pragma GCC unroll {}\n", T, T);
  code += fmt::format("    for (int64_t j = 0; j < {}; ++j) {{\n", T);
  code += fmt::format("      sv[j] = (lane >= (int32_t)j) ? sv[j] * {} : mg_splat(-INFINITY);  // scale 1/sqrt({}), causal mask\n",
                      flit(scale), dh);
  code += "      mx[j] = sv[j];\n    }\n";
  // the max over keys as a tree, spelled out (GCC left the loop form's rows in memory)
  code += "    // the max over keys, a tree (max is exact: any order gives the same value)\n";
  for (int64_t w = 1; w < T; w *= 2)
    for (int64_t j = 0; j + w < T; j += 2 * w) code += fmt::format("    mx[{}] = mg_max_v(mx[{}], mx[{}]);\n", j, j, j + w);
  code += "    mg_vf l = {};\n";
  code += fmt::format("#pragma GCC unroll {}\n    for (int64_t j = 0; j < {}; ++j) {{\n", T, T);
  code += "      sv[j] = mg_exp_nonpos_v(sv[j] - mx[0]);  // masked: exp(-inf) = 0\n";
  code += "      l += sv[j];\n    }\n";
  code += "    const mg_vf inv = 1.0f / l;\n";
  code += fmt::format("    float pt[{}][MG_W] __attribute__((aligned(64)));  // pt[j][q] = P[q][j]\n", T);
  code += fmt::format("#pragma GCC unroll {}\n    for (int64_t j = 0; j < {}; ++j) mg_store(pt[j], sv[j] * inv);\n", T, T);
  // pt is read back by scalar from memory: without the barrier GCC keeps the tile in registers
  // and broadcasts each lane with a permute, on the port the FMAs need
  code += "    __asm__ volatile(\"\" : : \"r\"(pt) : \"memory\");  // pt is read back from memory\n";
  // keys outer, queries inner: T independent accumulators (each still adds its keys in order),
  // not one chain of up to T dependent FMAs per query
  const bool vec = dh % W == 0;
  const int64_t nv = vec ? dh / W : dh;
  const std::string el = vec ? "mg_vf" : "float";
  code += fmt::format("    {} o[{}][{}];  // o[q]: out[q]\n", el, T, nv);
  code += fmt::format("#pragma GCC unroll {}\n    for (int64_t q = 0; q < {}; ++q)\n", T, T);
  code += fmt::format("      for (int64_t i = 0; i < {}; ++i) o[q][i] = {};\n", nv, vec ? "mg_splat(0.0f)" : "0.0f");
  code += fmt::format("#pragma GCC unroll {}\n    for (int64_t j = 0; j < {}; ++j) {{\n", T, T);
  code += fmt::format("      const float* v = base + j * {} + {};\n", C3, 2 * C);
  code += fmt::format("#pragma GCC unroll {}\n      for (int64_t q = j; q < {}; ++q)  // queries that see key j\n", T, T);
  code += fmt::format("        for (int64_t i = 0; i < {}; ++i) o[q][i] += pt[j][q] * {};\n", nv, vec ? "mg_load(v + i * MG_W)" : "v[i]");
  code += "    }\n";
  code += fmt::format("#pragma GCC unroll {}\n    for (int64_t q = 0; q < {}; ++q) {{\n", T, T);
  code += fmt::format("      float* out = a->out_ptr0 + (b * {} + q) * {} + h * {};\n", T, C, dh);
  code += fmt::format("      for (int64_t i = 0; i < {}; ++i) {};\n", nv, vec ? "mg_store(out + i * MG_W, o[q][i])" : "out[i] = o[q][i]");
  code += "    }\n  }\n}\n";
  return code;
}

// One query per (batch, head) (the decode step): keys along a local row of scores. Per key a
// dot product of one vector (dh = MG_W) reduced as a tree (as eager's decode step; at dh = 16,
// 16 keys' trees side by side), the max, exp and sum over the row, out = sum_s p_s v_s / sum
// (the sums in independent chains, below). The row (S floats) is the only score storage.
std::string attention_one_query_body(const std::string& name, int64_t T, int64_t C, int64_t NH, int64_t dh,
                                     const std::string& offset, int64_t max_keys, float scale, bool decode) {
  // the address of key / value `s` (an expression) of head h
  auto kat = [&](const std::string& s) {
    return decode ? fmt::format("a->in_ptr1 + {} * {} + h * {}", s, C, dh)
                  : fmt::format("a->in_ptr0 + (b * {} + {}) * {} + {} + h * {}", T, s, 3 * C, C, dh);
  };
  auto vat = [&](const std::string& s) {
    return decode ? fmt::format("a->in_ptr2 + {} * {} + h * {}", s, C, dh)
                  : fmt::format("a->in_ptr0 + (b * {} + {}) * {} + {} + h * {}", T, s, 3 * C, 2 * C, dh);
  };
  const std::string kaddr = kat("s"), vaddr = vat("s");
  std::string code = fmt::format("static void {}_pairs(void* ctx, int64_t p0, int64_t p1) {{\n", name);
  code += fmt::format("  const {}_args* a = (const {}_args*)ctx;\n", name, name);
  code += "  for (int64_t p = p0; p < p1; ++p) {\n";
  code += fmt::format("    const int64_t b = p / {}, h = p % {};\n", NH, NH);
  code += fmt::format("    const mg_vf q = mg_load(a->in_ptr0 + b * {} + h * {});  // the head's query (dh = MG_W)\n", 3 * C, dh);
  code += fmt::format("    const int64_t S = {} + 1;  // keys [0, S): every key is at or before the query\n", offset);
  // sc is padded to whole vectors: the exps run MG_W keys at a time (mg_exp_nonpos_v is
  // mg_exp_nonpos lane by lane, so each key's value is the scalar one).
  code += fmt::format("    float sc[({} + MG_W - 1) / MG_W * MG_W];  // their scores (at most {} keys), padded\n", max_keys, max_keys);
  code += "    float m = -INFINITY;\n";
  std::string first = "0";
  if (dh == 16) {  // (dh = MG_W here, so MG_W = 16)
    // 16 keys at a time: their 16 trees run side by side, each level one pair of shuffles and
    // one add per two vectors (MG_L8 .. MG_L1), lane i + w still added to lane i, so every score
    // is the one mg_hsum_tree gives; the last level leaves the 16 scores in key order.
    std::string k16;
    for (int j = 0; j < 16; ++j) k16 += fmt::format("{}q * mg_load({})", j ? ", " : "", kat(fmt::format("(s + {})", j)));
    code += "    mg_vf mv = mg_splat(-INFINITY);\n";
    code += "    int64_t s16 = 0;  // keys [0, s16) done 16 at a time\n";
    code += "    for (; s16 + 16 <= S; s16 += 16) {\n";
    code += "      const int64_t s = s16;\n";
    code += fmt::format("      const mg_vf p[16] = {{{}}};\n", k16);
    code += "      const mg_vf t8[8] = {MG_L8(p[0], p[1]), MG_L8(p[2], p[3]), MG_L8(p[4], p[5]), MG_L8(p[6], p[7]),\n"
            "                           MG_L8(p[8], p[9]), MG_L8(p[10], p[11]), MG_L8(p[12], p[13]), MG_L8(p[14], p[15])};\n";
    code += "      const mg_vf t4[4] = {MG_L4(t8[0], t8[1]), MG_L4(t8[2], t8[3]), MG_L4(t8[4], t8[5]), MG_L4(t8[6], t8[7])};\n";
    code += fmt::format("      const mg_vf d = MG_L1(MG_L2(t4[0], t4[1]), MG_L2(t4[2], t4[3])) * {};  // scale 1/sqrt({})\n",
                        flit(scale), dh);
    code += "      mg_store(sc + s, d);\n";
    code += "      mv = mg_max_v(mv, d);\n";
    code += "    }\n";
    code += "    m = mg_hmax(mv);  // max is exact: the same value in any order\n";
    first = "s16";
  }
  code += fmt::format("    for (int64_t s = {}; s < S; ++s) {{\n", first);
  code += fmt::format("      sc[s] = mg_hsum_tree(q * mg_load({})) * {};  // q . k_s, scale 1/sqrt({})\n", kaddr, flit(scale), dh);
  code += "      m = mg_max(m, sc[s]);\n    }\n";
  // The sum and the weighted sum are split into independent chains (a chain over 64 keys
  // waits 4 cycles a key): the sum in MG_W lanes then a tree, the values in 4 accumulators
  // (key s in s % 4) added ((0 + 1) + (2 + 3)). Not eager's key-by-key order: ~1e-7 apart.
  code += "    for (int64_t s = S; s % MG_W; ++s) sc[s] = -INFINITY;  // the pad: exp gives 0\n";
  code += "    mg_vf lv = {};\n";
  code += "    for (int64_t s0 = 0; s0 < S; s0 += MG_W) {\n";
  code += "      const mg_vf e = mg_exp_nonpos_v(mg_load(sc + s0) - m);\n";
  code += "      lv += e;\n";
  code += "      mg_store(sc + s0, e);\n";
  code += "    }\n";
  code += "    const float l = mg_hsum_tree(lv);\n";
  code += "    mg_vf acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};\n";
  code += "    int64_t s4 = 0;\n";
  code += "    for (; s4 + 4 <= S; s4 += 4) {\n";
  for (int j = 0; j < 4; ++j)
    code += fmt::format("      acc{} += sc[s4 + {}] * mg_load({});\n", j, j, vat(fmt::format("(s4 + {})", j)));
  code += "    }\n";
  code += fmt::format("    for (int64_t s = s4; s < S; ++s) acc0 += sc[s] * mg_load({});\n", vaddr);
  code += "    const mg_vf acc = (acc0 + acc1) + (acc2 + acc3);\n";
  code += fmt::format("    mg_store(a->out_ptr0 + b * {} + h * {}, acc / l);\n", C, dh);
  code += "  }\n}\n";
  return code;
}

std::string generate_attention(const Schedule& s, const Kernel& k, const CodegenOptions& opt, std::string& call_args) {
  const Graph& g = s.graph;
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  const auto& qs = g.tensor(n.inputs[0]).shape;  // (B, T, 3C)
  const int64_t B = qs[0], T = qs[1], C = qs[2] / 3, NH = n.heads, dh = C / NH;
  const bool decode = data_inputs(n) == 3;
  // the first query's position: the attribute, or (runtime offset) the pos input's value;
  // the static bound on the keys is then the caches' rows (their capacity)
  const std::string offset = n.runtime_offset ? "(int64_t)a->in_ptr3[0]" : fmt::format("{}", n.offset);
  const int64_t S = n.runtime_offset ? g.tensor(n.inputs[1]).shape[0] : T + n.offset;  // keys seen by the last query (at most)
  const std::string rows = n.runtime_offset ? fmt::format("%{}", n.inputs.back()) : fmt::format("{}", n.offset);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  std::vector<std::string> params{fmt::format("in_ptr0 = {} (q | k | v per row)", describe(g, n.inputs[0]))};
  call_args += ", " + tensor_var(g, n.inputs[0]);
  if (decode) {
    params.push_back(fmt::format("in_ptr1 = {} (keys, rows [0, {}])", describe(g, n.inputs[1]), rows));
    params.push_back(fmt::format("in_ptr2 = {} (values, rows [0, {}])", describe(g, n.inputs[2]), rows));
    call_args += ", " + tensor_var(g, n.inputs[1]) + ", " + tensor_var(g, n.inputs[2]);
  } else {
    call_args += ", NULL, NULL";  // keys and values come from the qkv rows
  }
  if (n.runtime_offset) params.push_back(fmt::format("in_ptr3 = {} (the position, read at run time)", describe(g, n.inputs.back())));
  call_args += ", " + (n.runtime_offset ? tensor_var(g, n.inputs.back()) : std::string("NULL"));
  params.push_back(fmt::format("out_ptr0 = {} (heads merged)", describe(g, n.output)));
  call_args += ", " + tensor_var(g, n.output);
  std::string code = kernel_comment(s, k, params);
  const std::string args =
      fmt::format("struct {}_args {{ const float* in_ptr0; const float* in_ptr1; const float* in_ptr2; const int32_t* in_ptr3; float* out_ptr0; }};\n", k.name);
  if (T == 1 && dh == opt.vec_width) {
    code += "//   one query per (batch, head): keys along a row of scores\n" + args;
    code += attention_one_query_body(k.name, T, C, NH, dh, offset, S, scale, decode);
  } else if (!decode && !n.runtime_offset && n.offset == 0 && T <= opt.vec_width) {
    code += fmt::format(
        "//   per (batch, head), all {} queries along the vector lanes and all keys at once: scores\n"
        "//   S^T (key by key, lanes = queries), causal mask, softmax over keys (a plain one: one\n"
        "//   block of keys), P^T kept as a local ({}, {}) tile, out[q] = sum_j P[q][j] v[j]. No\n"
        "//   (T, S) tensor leaves the kernel.\n",
        T, T, opt.vec_width);
    code += args + attention_block_body(k.name, T, C, NH, dh, scale, opt.vec_width);
  } else {
    code += fmt::format(
        "//   per (batch, head), {} queries at a time along the vector lanes, keys in blocks of {}:\n"
        "//   scores, causal mask, online softmax (running max and sum per query, earlier blocks\n"
        "//   rescaled by exp(m_old - m_new)), out^T += p v; out = out^T / sum. No (T, S) score or\n"
        "//   probability matrix exists.\n",
        opt.vec_width, opt.vec_width);
    code += args + attention_vector_body(k.name, B, T, C, NH, dh, offset, scale, decode, opt.vec_width);
  }
  code += fmt::format("{} {}(const MgRuntime* rt, const {}_args* a) {{\n", kKernelDecl, k.name, k.name);
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
  call_args += ", " + tensor_var(g, n.inputs[0]) + ", " + (n.runtime_offset ? tensor_var(g, n.inputs.back()) : std::string("NULL")) +
               ", " + tensor_var(g, n.inputs[1]);
  std::vector<std::string> params{fmt::format("in_ptr0 = {}", describe(g, n.inputs[0]))};
  if (n.runtime_offset) params.push_back(fmt::format("in_ptr1 = {} (the row, read at run time)", describe(g, n.inputs.back())));
  params.push_back(fmt::format("out_ptr0 = {} (row {} written in place)", describe(g, n.inputs[1]),
                               n.runtime_offset ? fmt::format("%{}", n.inputs.back()) : fmt::format("{}", n.offset)));
  std::string code = kernel_comment(s, k, params);
  code += fmt::format("struct {}_args {{ const float* in_ptr0; const int32_t* in_ptr1; float* out_ptr0; }};\n", k.name);
  code += fmt::format("{} {}(const MgRuntime* rt, const {}_args* a) {{\n  (void)rt;\n", kKernelDecl, k.name, k.name);
  const std::string row = n.runtime_offset ? "(int64_t)a->in_ptr1[0]" : fmt::format("{}", n.offset);
  code += fmt::format("  float* dst = a->out_ptr0 + {} * {};  // row t{}\n", row, C, n.runtime_offset ? " (read at run time)" : "");
  code += fmt::format("  for (int64_t c = 0; c < {}; ++c) dst[c] = a->in_ptr0[{} + c];\n}}\n", C, n.part * C);
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

// A matmul through a generated fixed-shape GEMM: an args struct, a task-range function and a
// launcher that splits the tasks (row tile x panel) over threads when the product is large.
std::string generate_gemm_call(const Schedule& s, const Kernel& k, const GeneratedGemm& gm, const std::string& packed,
                               const CodegenOptions& opt, std::string& call_line) {
  const Graph& g = s.graph;
  const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
  std::vector<std::string> params{fmt::format("x = {}", describe(g, n.inputs[0])), fmt::format("W = {}", describe(g, n.inputs[1]))};
  if (n.has_bias) params.push_back(fmt::format("bias = {}", describe(g, n.inputs[2])));
  if (n.has_residual) params.push_back(fmt::format("residual = {}", describe(g, n.inputs.back())));
  params.push_back(fmt::format("y = {}{}", describe(g, n.output), n.gelu ? " = GELU(x W^T + b)" : n.has_residual ? " = x W^T + b + residual" : " = x W^T + b"));
  std::string code = kernel_comment(s, k, params);
  code += fmt::format("//   generated GEMM {} (mr {}, nv {}, unroll {}, ksplit {}): {} panels of {} columns x {} row tiles = {} tasks\n",
                      gm.name, gm.spec.mr, gm.spec.nv, gm.spec.unroll, gm.spec.ksplit, gm.panels, gm.panel_width, gm.row_tiles,
                      gm.tasks);
  code += fmt::format("struct {}_args {{ const float* x; const float* wp; const float* b; const float* res; float* y; }};\n", k.name);
  code += fmt::format("static void {}_tasks(void* ctx, int64_t t0, int64_t t1) {{\n", k.name);
  code += fmt::format("  const {}_args* a = (const {}_args*)ctx;\n  {}(a->x, a->wp, a->b, a->res, a->y, t0, t1);\n}}\n", k.name, k.name, gm.name);
  code += fmt::format("{} {}(const MgRuntime* rt, const {}_args* a) {{\n", kKernelDecl, k.name, k.name);
  if (gm.flops >= 64.0 * static_cast<double>(opt.parallel_min_work) && gm.tasks > 1)
    code += fmt::format("  if (rt->threads > 1) {{ rt->parallel_for(rt->pool, {}, 1, {}_tasks, (void*)a); return; }}\n", gm.tasks, k.name);
  else
    code += "  (void)rt;  // small: one thread\n";
  code += fmt::format("  {}_tasks((void*)a, 0, {});\n}}\n", k.name, gm.tasks);
  call_line = fmt::format("  {{ const {}_args a = {{{}, {}, {}, {}, {}}}; {}(rt, &a); }}\n", k.name, tensor_var(g, n.inputs[0]), packed,
                          n.has_bias ? tensor_var(g, n.inputs[2]) : "NULL", n.has_residual ? tensor_var(g, n.inputs.back()) : "NULL",
                          tensor_var(g, n.output), k.name);
  return code;
}

// The GEMM for one matmul: its shape, and its pick's schedule (else the default).
GemmSpec gemm_spec_for(const Graph& g, const Node& n, const std::vector<GemmPick>& picks) {
  GemmSpec spec = matmul_gemm_shape(g, n);
  if (const GemmPick* p = gemm_find_pick(picks, spec)) {
    spec.mr = p->spec.mr;
    spec.nv = p->spec.nv;
    spec.unroll = p->spec.unroll;
    spec.ksplit = p->spec.ksplit;
  }
  return gemm_resolve(spec);
}

}  // namespace

GeneratedCode generate_cpp(const Schedule& s, const CodegenOptions& opt) {
  MINIGPT_CHECK(!opt.runtime_abi.empty(), "generate_cpp: CodegenOptions.runtime_abi (runtime_abi.h's text) is empty");
  const Graph& g = s.graph;
  GeneratedCode out;
  // io[] layout: inputs, outputs, weights, packed weights of every matmul
  for (int t : g.inputs) out.io.push_back({IoSlot::Kind::Input, t, g.tensor(t).name, ""});
  for (int t : g.outputs) out.io.push_back({IoSlot::Kind::Output, t, g.tensor(t).name, ""});
  for (int t : g.weights) out.io.push_back({IoSlot::Kind::Weight, t, g.tensor(t).name, ""});
  std::map<int, std::string> packed_var;          // library packing, by weight
  std::map<int, GeneratedGemm> node_gemm;          // generated GEMM, by node
  std::map<std::string, std::string> gemm_packed;  // "gemm name|weight" -> variable
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != Op::Matmul) continue;
    const std::string& wname = g.tensor(n.inputs[1]).name;
    if (gemm_use_generated(opt.gemm, opt.gemm_picks, matmul_gemm_shape(g, n))) {
      const GeneratedGemm gm = generate_gemm(gemm_spec_for(g, n, opt.gemm_picks));
      node_gemm[static_cast<int>(i)] = gm;
      if (std::none_of(out.gemms.begin(), out.gemms.end(), [&](const GeneratedGemm& o) { return o.name == gm.name; }))
        out.gemms.push_back(gm);
      const std::string key = gm.name + "|" + wname;
      if (!gemm_packed.count(key)) {
        gemm_packed[key] = fmt::format("pk{}_{}", gemm_packed.size(), sanitize(wname));
        out.io.push_back({IoSlot::Kind::Packed, n.inputs[1], wname, gm.name});
      }
      continue;
    }
    if (packed_var.count(n.inputs[1])) continue;
    packed_var[n.inputs[1]] = "pk_" + sanitize(wname);
    out.io.push_back({IoSlot::Kind::Packed, n.inputs[1], wname, ""});
  }

  std::string src = fmt::format(
      "// Generated by minigpt compile (codegen_cpp v{}) for graph {} (hash {}).\n"
      "// {} kernels; arena {} bytes. Entry point: extern \"C\" void call(const MgRuntime* rt,\n"
      "// char* arena, void* const* io). Self-contained: compiled at run time by the JIT.\n",
      kCodegenCppVersion, g.name, graph_hash(g), s.kernels.size(), g.arena_bytes);
  src += "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n#if defined(__x86_64__)\n#include <immintrin.h>  // mg_fma_v\n#endif\n\n";
  src += opt.runtime_abi;
  src += "\n";
  MINIGPT_CHECK(opt.vec_width == 4 || opt.vec_width == 8 || opt.vec_width == 16 || opt.vec_width == 32,
                "generate_cpp: vec_width must be 4, 8, 16 or 32, got {}", opt.vec_width);
  src += kHelpers;
  src += fmt::format("\n#define MG_W {}  // lanes per vector step\n", opt.vec_width);
  src += kVectorHelpers;
  if (!out.gemms.empty()) {
    src += "\n// ---- the generated GEMMs (codegen_gemm), one per distinct shape and epilogue -------------\n";
    src += gemm_prelude(out.gemms[0].spec.isa);
    for (const GeneratedGemm& gm : out.gemms) src += "\n" + gm.code;
  }
  std::vector<std::string> calls;
  std::map<std::string, std::string> loops_emitted;  // kernel text with its name as "@" -> name
  for (const Kernel& k : s.kernels) {
    std::string code, call_args, matmul_call;
    switch (k.kind) {
      case KernelKind::Rowwise: {
        RowwiseGen gen(s, k, opt);
        code = gen.generate(call_args);
        break;
      }
      case KernelKind::Attention: code = generate_attention(s, k, opt, call_args); break;
      case KernelKind::KvWrite: code = generate_kv_write(s, k, call_args); break;
      case KernelKind::PrologueMatmul:  // PassOptions::matmul_prologue is the CUDA back end's
        MINIGPT_FAIL("codegen_cpp: {} fuses a row-wise prologue into a GEMM, which the C++ back end does not generate", k.name);
      case KernelKind::Matmul: {
        const auto gm = node_gemm.find(k.nodes[0]);
        if (gm != node_gemm.end()) {
          const Node& n = g.nodes[static_cast<size_t>(k.nodes[0])];
          code = generate_gemm_call(s, k, gm->second, gemm_packed.at(gm->second.name + "|" + g.tensor(n.inputs[1]).name), opt,
                                    matmul_call);
        } else {
          code = generate_matmul(s, k, packed_var, matmul_call);
        }
        break;
      }
    }
    // A kernel whose loops are the text of an earlier one (the same layer op in another block:
    // only the buffers passed differ) is emitted once and called under that name, as Inductor
    // reuses identical kernels; its comment stays, for the reader. (An engine matmul defines
    // no function of its own: nothing to share.)
    std::string fn = k.name;
    if (const size_t body_at = code.find("struct " + k.name + "_args"); body_at != std::string::npos) {
      const std::string shape_of_loops = loops_key(code.substr(body_at), k.name, "acc|tot|rowv|rowb|row|tmp");
      const auto seen = loops_emitted.find(shape_of_loops);
      if (seen != loops_emitted.end()) {
        fn = seen->second;
        code = code.substr(0, body_at) + fmt::format("//   same loops as {} (emitted once, called with this kernel's buffers)\n", fn);
      } else {
        loops_emitted.emplace(shape_of_loops, k.name);
      }
    }
    if (k.kind != KernelKind::Matmul) {
      calls.push_back(fmt::format("  {{ const {}_args a = {{{}}}; {}(rt, &a); }}  // {}\n", fn, call_args.substr(2), fn, k.name));
    } else if (fn != k.name) {  // the generated GEMM's call line, under the shared wrapper's name
      for (const std::string suffix : {"_args ", "(rt"})
        matmul_call.replace(matmul_call.find(k.name + suffix), k.name.size(), fn);
      calls.push_back(matmul_call.substr(0, matmul_call.size() - 1) + "  // " + k.name + "\n");
    } else {
      calls.push_back(matmul_call);
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
        if (slot.gemm.empty())
          entry += fmt::format("  const float* {} = (const float*)io[{}];  // {} packed for the GEMM\n", packed_var[slot.tensor], i, t.name);
        else
          entry += fmt::format("  const float* {} = (const float*)io[{}];  // {} in {}'s panels\n", gemm_packed[slot.gemm + "|" + t.name], i, t.name, slot.gemm);
        break;
    }
  }
  for (const Node& n : g.nodes) {
    const TensorInfo& t = g.tensor(n.output);
    if (t.arena_offset < 0) continue;
    const std::string at = t.arena_offset == 0 ? "arena" : fmt::format("(arena + {})", t.arena_offset);
    entry += fmt::format("  float* buf{} = (float*){};  // {}\n", n.output, at, describe(g, n.output));
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
