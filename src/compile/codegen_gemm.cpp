// The fixed-shape GEMM generator (codegen_gemm.h): one register-tile function per tile kind
// (full / last row block x full / last panel), an entry point over a panel range, and the
// host-side weight packing. The text is written for a reader: every constant is the shape,
// each tile says which rows and columns it covers.
#include "compile/codegen_gemm.h"

#include "core/error.h"
#include "minigpt/gelu_avx512_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace minigpt::compile {

namespace {

// How one ISA spells the few vector operations a tile needs.
struct VecOps {
  const char* type;   // the vector type
  const char* zero;   // a zero vector
  const char* load;   // fmt: {0} address
  const char* bcast;  // fmt: {0} scalar
  const char* fma;    // fmt: {0} * {1} + {2}, fused (one rounding)
  const char* add;    // fmt: {0} + {1}
};

VecOps vec_ops(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512:
      return {"__m512", "_mm512_setzero_ps()", "_mm512_loadu_ps({0})", "_mm512_set1_ps({0})",
              "_mm512_fmadd_ps({0}, {1}, {2})", "_mm512_add_ps({0}, {1})"};
    case GemmIsa::kAvx2:
      return {"__m256", "_mm256_setzero_ps()", "_mm256_loadu_ps({0})", "_mm256_set1_ps({0})",
              "_mm256_fmadd_ps({0}, {1}, {2})", "_mm256_add_ps({0}, {1})"};
    case GemmIsa::kScalar:
      return {"float", "0.0f", "*({0})", "({0})", "__builtin_fmaf({0}, {1}, {2})", "({0} + {1})"};
  }
  MINIGPT_FAIL("codegen_gemm: unknown ISA");
}

// A masked load / store of the first `n` lanes (0 < n < lanes), AVX-512 and AVX2 only.
std::string masked_load(GemmIsa isa, int n, const std::string& addr) {
  if (isa == GemmIsa::kAvx512)
    return fmt::format("_mm512_maskz_loadu_ps((__mmask16)0x{:04x}, {})", (1u << n) - 1u, addr);
  return fmt::format("_mm256_maskload_ps({}, mg_avx2_mask({}))", addr, n);
}
std::string masked_store(GemmIsa isa, int n, const std::string& addr, const std::string& v) {
  if (isa == GemmIsa::kAvx512)
    return fmt::format("_mm512_mask_storeu_ps({}, (__mmask16)0x{:04x}, {})", addr, (1u << n) - 1u, v);
  return fmt::format("_mm256_maskstore_ps({}, mg_avx2_mask({}), {})", addr, n, v);
}
std::string store(GemmIsa isa, const std::string& addr, const std::string& v) {
  switch (isa) {
    case GemmIsa::kAvx512: return fmt::format("_mm512_storeu_ps({}, {})", addr, v);
    case GemmIsa::kAvx2: return fmt::format("_mm256_storeu_ps({}, {})", addr, v);
    case GemmIsa::kScalar: return fmt::format("*({}) = {}", addr, v);
  }
  return {};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One register tile: `mr` rows x `nv` vectors of the panel, the last vector holding `tail`
// valid lanes (0 = full).
struct TileKind {
  int mr, nv, tail;
  std::string fn_name(const std::string& base) const {
    return tail ? fmt::format("{}_tile_{}x{}_tail{}", base, mr, nv, tail)
                : fmt::format("{}_tile_{}x{}", base, mr, nv);
  }
};

std::string emit_tile(const GemmSpec& s, const TileKind& t, int64_t P) {
  const VecOps op = vec_ops(s.isa);
  const int L = gemm_isa_lanes(s.isa), S = s.ksplit;
  const bool gelu = s.epilogue == GemmEpilogueKind::kGelu;
  const bool residual = s.epilogue == GemmEpilogueKind::kResidual;
  std::string o;
  const int64_t col_end = static_cast<int64_t>(t.nv - (t.tail ? 1 : 0)) * L + t.tail;
  o += fmt::format(
      "// Rows [i, i + {0}) x panel columns [0, {1}): {2} accumulators{3}, the whole of K = {4}.\n",
      t.mr, col_end, t.mr * t.nv * S, S > 1 ? fmt::format(" ({} chains over k)", S) : "", s.K);
  o += fmt::format(
      "static inline __attribute__((always_inline)) void {}(const float* __restrict x, "
      "const float* __restrict w{}{}, float* y) {{\n",
      t.fn_name(s.name), s.bias ? ", const float* __restrict b" : "",
      residual ? ", const float* res" : "");
  auto acc = [&](int r, int v, int c) {
    return S > 1 ? fmt::format("c{}_{}_{}", r, v, c) : fmt::format("c{}_{}", r, v);
  };
  for (int r = 0; r < t.mr; ++r) {
    o += fmt::format("  {} ", op.type);
    for (int v = 0; v < t.nv; ++v)
      for (int c = 0; c < S; ++c)
        o += fmt::format("{}{} = {}", (v || c) ? ", " : "", acc(r, v, c), op.zero);
    o += ";\n";
  }
  // The K loop unrolled by the generator (U steps of S chains per trip; U S divides K): GCC's
  // own `#pragma GCC unroll` lost the constant trip count once the tile was inlined into the
  // row loop, and emitted remainder code for a remainder that cannot exist.
  const int U = s.unroll;
  o += fmt::format("  for (int64_t k = 0; k < {}; k += {}) {{\n", s.K, U * S);
  for (int u = 0; u < U; ++u)
    for (int c = 0; c < S; ++c) {
      const int step = u * S + c;
      const std::string kk = step ? fmt::format("(k + {})", step) : "k";
      for (int v = 0; v < t.nv; ++v)
        o += fmt::format("    const {} w{}_{} = {};\n", op.type, v, step,
                         fmt::format(fmt::runtime(op.load), fmt::format("w + {} * {} + {}", kk, P, v * L)));
      for (int r = 0; r < t.mr; ++r) {
        o += fmt::format("    {{ const {} a = {};", op.type,
                         fmt::format(fmt::runtime(op.bcast), fmt::format("x[{} * {} + {}]", r, s.K, kk)));
        for (int v = 0; v < t.nv; ++v)
          o += fmt::format(" {0} = {1};", acc(r, v, c),
                           fmt::format(fmt::runtime(op.fma), "a", fmt::format("w{}_{}", v, step), acc(r, v, c)));
        o += " }\n";
      }
    }
  o += "  }\n";
  // Epilogue, per element in codegen_gemm.h's order: chains summed, + b, + residual or GELU.
  if (S > 1) {
    o += "  // The chains, added in order.\n";
    for (int r = 0; r < t.mr; ++r)
      for (int v = 0; v < t.nv; ++v)
        for (int c = 1; c < S; ++c)
          o += fmt::format("  {0} = {1};\n", acc(r, v, 0),
                           fmt::format(fmt::runtime(op.add), acc(r, v, 0), acc(r, v, c)));
  }
  auto vec_at = [&](const std::string& base, int v) -> std::string {
    const std::string addr = fmt::format("{} + {}", base, v * L);
    if (t.tail && v == t.nv - 1) return masked_load(s.isa, t.tail, addr);
    return fmt::format(fmt::runtime(op.load), addr);
  };
  if (s.bias)
    for (int v = 0; v < t.nv; ++v)
      o += fmt::format("  const {} b{} = {};\n", op.type, v, vec_at("b", v));
  for (int r = 0; r < t.mr; ++r)
    for (int v = 0; v < t.nv; ++v) {
      std::string e = acc(r, v, 0);
      if (s.bias) e = fmt::format(fmt::runtime(op.add), e, fmt::format("b{}", v));
      if (residual) e = fmt::format(fmt::runtime(op.add), e, vec_at(fmt::format("res + {} * {}", r, s.N), v));
      const std::string addr = fmt::format("y + {} * {} + {}", r, s.N, v * L);
      o += "  " + (t.tail && v == t.nv - 1 ? masked_store(s.isa, t.tail, addr, e) : store(s.isa, addr, e)) + ";\n";
    }
  // GELU over the tile just stored (in L1): one copy of the vector GELU per unit rather than
  // one inlined per accumulator (g++ spent most of a GELU GEMM's compile time on those); the
  // value is the float stored, so the result is the same as GELU on the register.
  if (gelu) o += fmt::format("  mg_gelu_rows(y, {}, {}, {});\n", t.mr, s.N, col_end);
  o += "}\n\n";
  return o;
}

}  // namespace

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512: return "avx512";
    case GemmIsa::kAvx2: return "avx2";
    case GemmIsa::kScalar: return "scalar";
  }
  return "?";
}

const char* gemm_epilogue_name(GemmEpilogueKind e) {
  switch (e) {
    case GemmEpilogueKind::kNone: return "none";
    case GemmEpilogueKind::kGelu: return "gelu";
    case GemmEpilogueKind::kResidual: return "residual";
  }
  return "?";
}

const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::kAuto: return "auto-gemm";
    case GemmBackend::kEngine: return "engine-gemm";
    case GemmBackend::kGenerated: return "generated-gemm";
  }
  return "?";
}

int gemm_isa_lanes(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512: return 16;
    case GemmIsa::kAvx2: return 8;
    case GemmIsa::kScalar: return 1;
  }
  return 1;
}

GemmSpec gemm_spec(int64_t M, int64_t N, int64_t K, GemmEpilogueKind epilogue, bool bias,
                   GemmIsa isa) {
  GemmSpec s;
  s.M = M;
  s.N = N;
  s.K = K;
  s.epilogue = epilogue;
  s.bias = bias;
  s.isa = isa;
  return s;
}

GemmSpec gemm_resolve(GemmSpec s) {
  MINIGPT_CHECK(s.M > 0 && s.N > 0 && s.K > 0, "codegen_gemm: shape ({}, {}, {}) must be positive",
                s.M, s.N, s.K);
  const int L = gemm_isa_lanes(s.isa);
  // Registers: AVX-512 has 32, AVX2 16 (a tile's accumulators + its nv weight vectors + one
  // broadcast must fit); scalar code is left to the compiler's own allocation.
  const int regs = s.isa == GemmIsa::kAvx512 ? 32 : s.isa == GemmIsa::kAvx2 ? 16 : 64;
  // Defaults, from bench/compile_gemm_bench.cpp on the model's shapes (AVX-512, 1 thread):
  // the K x P weight panel should stay in L1 while every row tile reads it (at K = 256 a
  // 64-column panel is 64 KiB and 4 x 64 tiles ran 25% slower than 12 x 32 ones), and the
  // tile should be as tall as the registers allow (6 x 4, 8 x 3, 12 x 2 vectors: 24
  // accumulators); the unrolled K loop was no faster than the plain one (within noise).
  if (s.nv == 0) {
    const int64_t vectors = ceil_div(s.N, L);
    const int max_nv = s.isa == GemmIsa::kAvx512 ? 4 : s.isa == GemmIsa::kAvx2 ? 2 : 8;
    int nv = max_nv;
    while (nv > 1 && s.K * nv * L * 4 > (32 << 10)) --nv;  // the panel within 32 KiB of L1
    s.nv = static_cast<int>(std::min<int64_t>(vectors, nv));
  }
  if (s.mr == 0) {
    const int max_acc = s.isa == GemmIsa::kAvx512 ? 24 : s.isa == GemmIsa::kAvx2 ? 8 : 32;
    s.mr = static_cast<int>(std::min<int64_t>({s.M, std::max(1, max_acc / s.nv), 12}));
  }
  if (s.ksplit == 0) {
    // At least 8 independent FMA chains (latency 4 x 2 ports); more chains change the order.
    s.ksplit = 1;
    while (s.mr * s.nv * s.ksplit < 8 && s.K % (2 * s.ksplit) == 0 && s.ksplit < 4) s.ksplit *= 2;
  }
  if (s.unroll == 0) s.unroll = 1;
  MINIGPT_CHECK(s.mr >= 1 && s.nv >= 1 && s.unroll >= 1 && s.ksplit >= 1,
                "codegen_gemm: schedule mr {} nv {} unroll {} ksplit {} must be positive", s.mr,
                s.nv, s.unroll, s.ksplit);
  MINIGPT_CHECK(s.K % s.ksplit == 0, "codegen_gemm: ksplit {} does not divide K = {}", s.ksplit, s.K);
  if (s.K % (s.ksplit * s.unroll) != 0) s.unroll = 1;  // keep the trip count whole
  MINIGPT_CHECK(s.unroll * s.ksplit <= 64, "codegen_gemm: unroll {} x ksplit {} steps per trip is too many", s.unroll, s.ksplit);
  MINIGPT_CHECK(s.isa == GemmIsa::kScalar || s.mr * s.nv * s.ksplit + s.nv + 1 <= regs,
                "codegen_gemm: a {} x {} tile with {} chains needs more than {}'s {} registers",
                s.mr, s.nv, s.ksplit, gemm_isa_name(s.isa), regs);
  if (s.name.empty())
    s.name = fmt::format("mg_gemm_{}x{}x{}_{}{}_{}_r{}v{}u{}s{}", s.M, s.N, s.K,
                         s.bias ? "bias_" : "", gemm_epilogue_name(s.epilogue),
                         gemm_isa_name(s.isa), s.mr, s.nv, s.unroll, s.ksplit);
  return s;
}

std::string gemm_prelude(GemmIsa isa) {
  std::string o = "#include <stdint.h>\n#include <math.h>\n";
  switch (isa) {
    case GemmIsa::kAvx512:
      o += "#include <immintrin.h>\n";
      o += "// gelu_avx512.h (the fused epilogue's GELU: a table of polynomials, not eager's gelu_ps).\n";
      {
        std::string math = kGeluAvx512Source;
        const size_t once = math.find("#pragma once\n");  // a header's guard, not for a main file
        if (once != std::string::npos) math.erase(once, 13);
        o += math;
      }
      o += "// GELU in place over rows x cols of y (row stride ld), 16 lanes, the last vector masked.\n"
           "static __attribute__((noinline, unused)) void mg_gelu_rows(float* y, int64_t rows, int64_t ld, int64_t cols) {\n"
           "  for (int64_t r = 0; r < rows; ++r) {\n"
           "    float* p = y + r * ld;\n"
           "    int64_t c = 0;\n"
           "    for (; c + 16 <= cols; c += 16) _mm512_storeu_ps(p + c, mg_gelu_table_ps(_mm512_loadu_ps(p + c)));\n"
           "    if (c < cols) {\n"
           "      const __mmask16 m = (__mmask16)((1u << (cols - c)) - 1u);\n"
           "      _mm512_mask_storeu_ps(p + c, m, mg_gelu_table_ps(_mm512_maskz_loadu_ps(m, p + c)));\n"
           "    }\n"
           "  }\n"
           "}\n";
      break;
    case GemmIsa::kAvx2:
      o += "#include <immintrin.h>\n"
           "// The first n of 8 lanes, for maskload / maskstore.\n"
           "static inline __m256i mg_avx2_mask(int n) {\n"
           "  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);\n"
           "  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);\n"
           "}\n";
      [[fallthrough]];
    case GemmIsa::kScalar:
      o += "// GELU, exact erf form, in float: gelu.cpp's fallback formula.\n"
           "static inline float mg_gelu_scalar(float x) {\n"
           "  if (x == -INFINITY) return -0.0f;\n"
           "  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));\n"
           "}\n";
      o += "// GELU in place over rows x cols of y (row stride ld), element by element.\n"
           "static __attribute__((noinline, unused)) void mg_gelu_rows(float* y, int64_t rows, int64_t ld, int64_t cols) {\n"
           "  for (int64_t r = 0; r < rows; ++r)\n"
           "    for (int64_t c = 0; c < cols; ++c) y[r * ld + c] = mg_gelu_scalar(y[r * ld + c]);\n"
           "}\n";
      break;
  }
  return o + "\n";
}

GeneratedGemm generate_gemm(const GemmSpec& spec) {
  GeneratedGemm g;
  g.spec = gemm_resolve(spec);
  const GemmSpec& s = g.spec;
  const int L = gemm_isa_lanes(s.isa);
  g.name = s.name;
  g.panel_width = static_cast<int64_t>(s.nv) * L;
  const int64_t P = g.panel_width;
  g.panels = ceil_div(s.N, P);
  g.packed_floats = g.panels * s.K * P;
  g.row_tiles = ceil_div(s.M, s.mr);
  g.tasks = g.panels * g.row_tiles;
  g.flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);

  // Tile kinds: full panels and the last (narrower) one, full row blocks and the last one.
  const int64_t full_panels = s.N / P, last_cols = s.N - full_panels * P;
  const int64_t full_rows = s.M / s.mr * s.mr, last_rows = s.M - full_rows;
  const TileKind last_panel{0, static_cast<int>(ceil_div(last_cols, L)), static_cast<int>(last_cols % L)};

  std::string o;
  o += fmt::format(
      "// {0}: y ({1}, {2}) = x ({1}, {3}) W^T{4}{5}; {6}, {7} x {8} register tiles, K loop "
      "unrolled {9} times{10}.\n"
      "// {11:.0f} FLOPs. W^T packed in {12} panels of {13} columns (K x {13} each, zero-padded).\n"
      "// Sum order of y(m, n): k = 0 .. {14} in {15}, then + b[n]{16}.\n",
      s.name, s.M, s.N, s.K, s.bias ? " + b" : "",
      s.epilogue == GemmEpilogueKind::kGelu      ? ", then GELU"
      : s.epilogue == GemmEpilogueKind::kResidual ? ", then + residual"
                                                  : "",
      gemm_isa_name(s.isa), s.mr, s.nv * L, s.unroll,
      s.ksplit > 1 ? fmt::format(", {} FMA chains over k", s.ksplit) : "", g.flops, g.panels, P,
      s.K - 1, s.ksplit > 1 ? fmt::format("{} interleaved FMA chains added in order", s.ksplit) : "one FMA chain",
      s.epilogue == GemmEpilogueKind::kGelu      ? ", then GELU"
      : s.epilogue == GemmEpilogueKind::kResidual ? ", then + residual(m, n)"
                                                  : "");
  std::vector<TileKind> kinds;
  auto add_kind = [&kinds](TileKind t) {
    for (const TileKind& k : kinds)
      if (k.mr == t.mr && k.nv == t.nv && k.tail == t.tail) return;
    kinds.push_back(t);
  };
  for (int64_t rows : {int64_t{s.mr}, last_rows}) {
    if (rows == 0 || (rows == s.mr && full_rows == 0)) continue;
    if (full_panels) add_kind({static_cast<int>(rows), s.nv, 0});
    if (last_cols) add_kind({static_cast<int>(rows), last_panel.nv, last_panel.tail});
  }
  for (const TileKind& t : kinds) o += emit_tile(s, t, P);

  const bool residual = s.epilogue == GemmEpilogueKind::kResidual;
  auto call = [&](const TileKind& t, const std::string& row) {
    return fmt::format("{}(x + {} * {}, w{}{}, y + {} * {} + j);", t.fn_name(s.name), row, s.K,
                       s.bias ? ", b + j" : "",
                       residual ? fmt::format(", residual + {} * {} + j", row, s.N) : "", row, s.N);
  };
  // One task's tile: the full row tile or the last one of this panel kind.
  auto panel_body = [&](int nv, int tail, const std::string& indent) {
    if (!last_rows) return fmt::format("{}{}\n", indent, call({s.mr, nv, tail}, "i"));
    if (!full_rows) return fmt::format("{}{}\n", indent, call({static_cast<int>(last_rows), nv, tail}, "i"));
    return fmt::format("{0}if (i < {1}) {2}\n{0}else {3}  // the last {4} rows\n", indent, full_rows,
                       call({s.mr, nv, tail}, "i"), call({static_cast<int>(last_rows), nv, tail}, "i"),
                       last_rows);
  };
  o += fmt::format(
      "// Task t: row tile t % {3} (rows [i, i + {4})) of panel t / {3} (columns [j, j + {1})); the\n"
      "// tasks of one panel are consecutive, so its K x {1} weights stay in L1 between them.\n"
      "extern \"C\" void {0}(const float* x, const float* wp, const float* b, const float* residual,\n"
      "    float* y, int64_t t0, int64_t t1) {{\n"
      "  (void)b; (void)residual;\n"
      "  for (int64_t t = t0; t < t1; ++t) {{\n"
      "    const int64_t p = t / {3}, i = t % {3} * {4};\n"
      "    const float* w = wp + p * {2};\n"
      "    const int64_t j = p * {1};\n",
      s.name, P, s.K * P, g.row_tiles, s.mr);
  if (full_panels && last_cols) {
    o += fmt::format("    if (p < {}) {{\n", full_panels);
    o += panel_body(s.nv, 0, "      ");
    o += fmt::format("    }} else {{  // the last panel: {} columns\n", last_cols);
    o += panel_body(last_panel.nv, last_panel.tail, "      ");
    o += "    }\n";
  } else if (full_panels) {
    o += panel_body(s.nv, 0, "    ");
  } else {
    o += panel_body(last_panel.nv, last_panel.tail, "    ");
  }
  o += "  }\n}\n";
  g.code = std::move(o);
  return g;
}

bool gemm_same_shape(const GemmSpec& a, const GemmSpec& b) {
  return a.M == b.M && a.N == b.N && a.K == b.K && a.epilogue == b.epilogue && a.bias == b.bias && a.isa == b.isa;
}

const GemmPick* gemm_find_pick(const std::vector<GemmPick>& picks, const GemmSpec& shape) {
  for (const GemmPick& p : picks)
    if (gemm_same_shape(p.spec, shape)) return &p;
  return nullptr;
}

bool gemm_use_generated(GemmBackend backend, const std::vector<GemmPick>& picks, const GemmSpec& shape) {
  if (const GemmPick* p = gemm_find_pick(picks, shape)) return !p->engine;
  return backend == GemmBackend::kGenerated || (backend == GemmBackend::kAuto && gemm_generated_by_rule(shape.M, shape.isa));
}

std::string gemm_source(const GemmSpec& spec) {
  return gemm_prelude(spec.isa) + generate_gemm(spec).code;
}

std::string generate_gemm_parallel(const GeneratedGemm& g) {
  return fmt::format(
      "// {0} over the runtime's thread pool: tasks [0, {1}) in contiguous chunks.\n"
      "struct {0}_args {{ const float* x; const float* wp; const float* b; const float* residual; float* y; }};\n"
      "static void {0}_range(void* ctx, int64_t t0, int64_t t1) {{\n"
      "  const struct {0}_args* a = (const struct {0}_args*)ctx;\n"
      "  {0}(a->x, a->wp, a->b, a->residual, a->y, t0, t1);\n"
      "}}\n"
      "extern \"C\" void {0}_mt(const MgRuntime* rt, const float* x, const float* wp, const float* b,\n"
      "    const float* residual, float* y, int64_t grain) {{\n"
      "  struct {0}_args a = {{x, wp, b, residual, y}};\n"
      "  rt->parallel_for(rt->pool, {1}, grain, {0}_range, &a);\n"
      "}}\n\n",
      g.name, g.tasks);
}

void gemm_pack_weights(const GeneratedGemm& g, const float* W, float* packed) {
  const int64_t K = g.spec.K, N = g.spec.N, P = g.panel_width;
  for (int64_t p = 0; p < g.panels; ++p)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < P; ++c) {
        const int64_t n = p * P + c;
        packed[(p * K + k) * P + c] = n < N ? W[n * K + k] : 0.0f;
      }
}

}  // namespace minigpt::compile
