// The CUDA back end without a GPU: the generated source's text (kernel names, comments,
// generated loops rather than eager calls, a launch for every kernel) and, with the CUDA
// toolkit, NVRTC compiling every generated source (NVRTC needs no GPU) and the CUDA JIT cache
// (miss, hit, corrupt, truncated and stale entries, concurrent compiles, compile errors).
#include "compile/capture.h"
#include "compile/codegen_cuda_mega.h"
#include "compile/codegen_cuda_rows.h"
#include "compile/jit.h"
#include "compile/passes/passes.h"
#include "compile/lower_cuda.h"
#include "compile_jit_test_util.h"
#include "compile_test_config.h"
#include "core/error.h"
#include "expect_error.h"

#ifdef MINIGPT_HAVE_CUDA_COMPILE
#include "compile/cuda/jit_cuda.h"
#include "compile/cuda/runner_cuda.h"
#endif

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

using namespace minigpt;
using namespace minigpt::compile;

namespace {

CudaLowered lower_default(const Graph& g, bool generated_gemm = false) {
  CudaCodegenOptions cg;
  cg.generated_gemm = generated_gemm;
  return lower_cuda(g, PassOptions{}, cg);
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// How often `what` occurs in s.
size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The source without its // comments.
std::string code_only(const std::string& src) {
  std::string out, line;
  std::istringstream in(src);
  while (std::getline(in, line)) out += line.substr(0, line.find("//")) + "\n";
  return out;
}

}  // namespace

TEST(CompileCudaCodegen, CodeCarriesThePlannedGraphsHash) {
  // the runner keys its cubin cache on code.graph_hash (computed once, in generate_cuda)
  const ModelConfig c = compile_tiny_config();
  for (const Graph& g : {capture_tinyhead(2), capture_gpt(c, 2, 16), capture_gpt_decode(c)}) {
    for (int variant = 0; variant < 3; ++variant) {
      CudaCodegenOptions cg;
      cg.generated_gemm = variant > 0;
      cg.megakernel = variant == 2;
      const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
      EXPECT_EQ(l.code.graph_hash, graph_hash(l.schedule.graph)) << g.name << " variant " << variant;
      EXPECT_TRUE(contains(l.code.source, "(hash " + l.code.graph_hash + ")")) << g.name;
    }
  }
}

#ifdef MINIGPT_HAVE_CUDA_COMPILE
TEST(CompileCudaCodegen, DefaultVariantRuleByRowsAndComputeCapability) {
  // the runner's rule (default_cuda_variant on the GPU it finds), asked for a given architecture
  const ModelConfig c = compile_tiny_config();
  std::string why;
  const CudaCodegenOptions hopper = default_cuda_variant_for(capture_gpt(c, 2, 16), 9, why);
  EXPECT_TRUE(hopper.generated_gemm && hopper.pdl && hopper.fuse_mlp) << why;
  EXPECT_TRUE(contains(why, "PDL")) << why;
  EXPECT_TRUE(hopper.rows) << "a forward the rows form takes, on sm_90: the rows form (measured faster): " << why;
  EXPECT_FALSE(default_cuda_variant_for(capture_gpt_decode(c), 9, why).rows) << why;
  EXPECT_TRUE(contains(why, "not the rows form")) << why;
  const CudaCodegenOptions ampere = default_cuda_variant_for(capture_gpt(c, 2, 16), 8, why);
  EXPECT_TRUE(ampere.generated_gemm) << why;
  EXPECT_FALSE(ampere.pdl || ampere.fuse_mlp || ampere.rows) << why;
  // more rows than kLaunchBoundRows in a matmul: cuBLAS on any GPU
  const int64_t B = kLaunchBoundRows / c.block_size + 1;
  const CudaCodegenOptions big = default_cuda_variant_for(capture_gpt(c, B, c.block_size), 9, why);
  EXPECT_FALSE(big.generated_gemm || big.pdl) << why;
  EXPECT_TRUE(contains(why, "cuBLAS")) << why;
}
#endif

TEST(CompileCudaCodegen, TinyHeadIsAGeneratedFusedSoftmaxAfterCublas) {
  const CudaLowered l = lower_default(capture_tinyhead(2));
  ASSERT_EQ(l.schedule.kernels.size(), 2u);
  EXPECT_EQ(l.schedule.kernels[0].name, "cublas_linear_0");
  EXPECT_EQ(l.schedule.kernels[1].name, "cuda_fused_softmax_1");
  const std::string& src = l.code.source;
  EXPECT_TRUE(contains(src, "extern \"C\" __global__ void __launch_bounds__(32) cuda_fused_softmax_1("));
  EXPECT_TRUE(contains(src, "mg_warp_max(")) << "the max is reduced across the row's threads";
  EXPECT_TRUE(contains(src, "mg_warp_sum("));
  EXPECT_TRUE(contains(src, "if (c < 600) {")) << "600 columns over 32 lanes: the last step is masked";
  EXPECT_TRUE(contains(src, "float x")) << "a persistent row: loaded into registers once";
  EXPECT_TRUE(contains(src, "cublas_linear_0_epilogue")) << "the bias after cuBLAS";
  // a comment per kernel with ops, bytes, FLOPs and launch
  EXPECT_TRUE(contains(src, "//   ops: reduce_max sub exp reduce_sum div"));
  EXPECT_TRUE(contains(src, "bytes read 4800, written 4800; FLOPs"));
  EXPECT_TRUE(contains(src, "//   launch: grid 2, block 32"));
  // generated loops, never the eager kernels
  EXPECT_FALSE(contains(src, "softmax_fused(")) << "a wrapper around the hand-written kernel is not a compiler";
  EXPECT_FALSE(contains(code_only(src), "cpu::")) << "eager ops are named in comments only";
  EXPECT_FALSE(contains(src, "#include")) << "NVRTC compiles the source alone";
  // the plan: sgemm, its epilogue, the softmax
  ASSERT_EQ(l.code.launches.size(), 3u);
  EXPECT_EQ(l.code.launches[0].kind, CudaLaunch::Kind::Sgemm);
  EXPECT_EQ(l.code.launches[0].N, 2);
  EXPECT_EQ(l.code.launches[0].K, 64);
  EXPECT_EQ(l.code.launches[0].M, 600);
  EXPECT_EQ(l.code.launches[2].function, "cuda_fused_softmax_1");
  EXPECT_EQ(l.code.launches[2].grid, 2) << "a row per block: 2 rows";
}

TEST(CompileCudaCodegen, EveryLaunchNamesAFunctionOfTheSourceAndEveryKernelHasItsFile) {
  const ModelConfig c = compile_tiny_config();
  for (const Graph& g : {capture_gpt(c, 2, 16), capture_gpt_decode(c)}) {
    for (bool gen : {false, true}) {
      const CudaLowered l = lower_default(g, gen);
      EXPECT_EQ(l.code.kernels.size(), l.schedule.kernels.size());
      std::set<std::string> names;
      for (const Kernel& k : l.schedule.kernels) {
        names.insert(k.name);
        EXPECT_TRUE(k.name.rfind("cuda_", 0) == 0 || k.name.rfind("cublas_", 0) == 0) << k.name;
      }
      for (const CudaLaunch& launch : l.code.launches) {
        EXPECT_TRUE(names.count(launch.name)) << launch.name;
        if (launch.kind == CudaLaunch::Kind::Kernel) {
          EXPECT_TRUE(contains(l.code.source, "void __launch_bounds__(" + std::to_string(launch.block) + ") " + launch.function + "(") ||
                      contains(l.code.source, "void " + launch.function + "("))
              << launch.function;
          EXPECT_GE(launch.grid, 1);
          EXPECT_TRUE(launch.block % 32 == 0 && launch.block <= 1024) << launch.function;
        }
      }
      EXPECT_EQ(!gen, contains(l.code.source, "cublas_linear_")) << g.name << ": generated GEMMs or cuBLAS";
      EXPECT_TRUE(contains(l.code.source, "cuda_fused_attention_")) << g.name;
    }
  }
}

TEST(CompileCudaCodegen, GptKernelsAreNamedAfterWhatTheyFuse) {
  const CudaLowered l = lower_default(capture_gpt(compile_tiny_config(), 2, 16));
  std::string all;
  for (const Kernel& k : l.schedule.kernels) all += k.name + " ";
  EXPECT_TRUE(contains(all, "cuda_fused_attention_")) << all;
  EXPECT_TRUE(std::regex_search(all, std::regex("cuda_fused_[a-z_]*layernorm[a-z_]*_[0-9]+"))) << all;
  EXPECT_TRUE(std::regex_search(all, std::regex("cuda_fused_[a-z_]*softmax[a-z_]*_[0-9]+"))) << all;
  // the attention stages its head in shared memory and never writes a score matrix
  EXPECT_TRUE(contains(l.code.source, "__shared__ float ks["));
  EXPECT_TRUE(contains(l.code.source, "No (T, S) matrix exists"));
}

// With generated GEMMs each layernorm and each prefill attention is the prologue of the GEMM
// that reads it (passes.h's matmul_prologue): x computed into shared memory, never stored.
TEST(CompileCudaCodegen, GeneratedGemmsTakeLayerNormsAndAttentionsAsPrologues) {
  const ModelConfig c = compile_tiny_config();
  const Graph g = capture_gpt(c, 2, 16);
  CudaCodegenOptions cg;
  cg.generated_gemm = true;
  cg.fuse_mlp = false;           // each MLP one kernel (the default): GeneratedGemmsFuseEachMlpIntoOneKernel
  cg.attention_prologue = true;  // off by default (measured slower), max-autotune's "attn-prologue"
  const CudaLowered fused = lower_cuda(g, PassOptions{}, cg);
  cg.matmul_prologue = false;
  cg.attention_prologue = false;
  const CudaLowered plain = lower_cuda(g, PassOptions{}, cg);
  // the default's prologues: the layernorms' only
  cg.matmul_prologue = true;
  const CudaLowered def = lower_cuda(g, PassOptions{}, cg);
  EXPECT_EQ(plain.code.launches.size(), def.code.launches.size() + static_cast<size_t>(2 * c.n_layer + 1));
  for (const Kernel& k : def.schedule.kernels)
    EXPECT_EQ(k.kind == KernelKind::PrologueMatmul, contains(k.name, "layernorm")) << k.name;
  EXPECT_EQ(plain.code.launches.size(), fused.code.launches.size() + static_cast<size_t>(3 * c.n_layer + 1))
      << "2 layernorms and an attention per block, and ln_f, no longer launched alone";
  int prologues = 0;
  for (const Kernel& k : fused.schedule.kernels) {
    prologues += k.kind == KernelKind::PrologueMatmul;
    EXPECT_FALSE(k.kind == KernelKind::Rowwise && contains(k.name, "layernorm")) << k.name;
    EXPECT_NE(k.kind, KernelKind::Attention) << k.name;
  }
  EXPECT_EQ(prologues, 3 * c.n_layer + 1);
  for (const Kernel& k : plain.schedule.kernels) EXPECT_NE(k.kind, KernelKind::PrologueMatmul) << k.name;
  const std::string& src = fused.code.source;
  EXPECT_TRUE(contains(src, "__shared__ float xs[8][" + std::to_string(c.d_model) + "];  // the tile's rows of x"));
  EXPECT_TRUE(contains(src, "xs[warp][c] = ")) << "the layernorm's row stored to shared memory";
  EXPECT_TRUE(contains(src, "xs[p][h * 16 + lane] = o / l;")) << "the attention's heads stored to shared memory";
  EXPECT_TRUE(contains(src, "__shfl_sync(0xffffffffu, pk[j], u)")) << "a warp per (row, head): p_s from lane s";
  EXPECT_TRUE(std::regex_search(src, std::regex(R"(if \(blockIdx\.x % [0-9]+ == 0\) out_ptr0\[r \* [0-9]+ \+ c\] = )")))
      << "the residual stream the first block's prologue makes is stored by one column tile";
  EXPECT_TRUE(contains(src, "make_float4(xs[i][k]")) << "the K loop reads x from shared memory";
  // cuBLAS cannot take a prologue: its variant keeps the kernels apart
  for (const Kernel& k : lower_default(g, false).schedule.kernels) EXPECT_NE(k.kind, KernelKind::PrologueMatmul) << k.name;
}

// fuse_mlp (with generated GEMMs, the default; max-autotune's "mlp-apart" turns it off): each MLP
// one kernel (generate_mlp), fc1 (with its layernorm prologue) computing the tile's rows of h into
// shared memory, fc2 reading them there as float4s; h never stored; by default (mlp_cluster) a
// cluster of 8 CTAs per tile of mlp_rows rows. Off: fc1 and fc2 two GEMM kernels. With
// fuse_mlp_proj (the default) the attention's projection is the kernel's first stage: one launch
// fewer again; with fuse_mlp_attention (off by default, max-autotune's "attn-mlp") the prefill
// attention before it too. cuBLAS keeps them apart.
TEST(CompileCudaCodegen, GeneratedGemmsFuseEachMlpIntoOneKernel) {
  const ModelConfig c = compile_tiny_config();
  for (const Graph& g : {capture_gpt(c, 2, 16), capture_gpt(c, 3, 5), capture_gpt_decode(c)}) {
    CudaCodegenOptions cg;
    cg.generated_gemm = true;
    cg.fuse_mlp = true;
    cg.fuse_mlp_proj = false;
    const CudaLowered fused = lower_cuda(g, PassOptions{}, cg);
    cg.fuse_mlp_proj = true;
    cg.fuse_mlp_attention = false;
    const CudaLowered proj = lower_cuda(g, PassOptions{}, cg);
    cg.fuse_mlp_attention = true;
    const CudaLowered attn = lower_cuda(g, PassOptions{}, cg);
    cg.fuse_mlp = false;
    const CudaLowered apart = lower_cuda(g, PassOptions{}, cg);
    const bool decode = g.name.find("decode") != std::string::npos;  // (its attention reads the KV cache: apart)
    EXPECT_EQ(apart.code.launches.size(), fused.code.launches.size() + static_cast<size_t>(c.n_layer)) << g.name;
    EXPECT_EQ(fused.code.launches.size(), proj.code.launches.size() + static_cast<size_t>(c.n_layer)) << g.name;
    EXPECT_EQ(proj.code.launches.size(), attn.code.launches.size() + static_cast<size_t>(decode ? 0 : c.n_layer)) << g.name;
    EXPECT_EQ(lower_default(g, true).code.launches.size(), proj.code.launches.size()) << "the default: " << g.name;
    for (const Kernel& k : attn.schedule.kernels) {
      if (!contains(k.name, "mlp")) continue;
      EXPECT_EQ(k.name.rfind(decode ? "cuda_fused_proj_layernorm_mlp_" : "cuda_fused_attention_proj_layernorm_mlp_", 0), 0u) << k.name;
    }
    if (!decode) {
      // the attention's k and v staged once per CTA, a warp per (row, head), the result in shared memory
      EXPECT_TRUE(contains(attn.code.source, "__shared__ float ks[")) << g.name;
      EXPECT_TRUE(contains(attn.code.source, "xps[p][h * 16 + lane + 32 * i] = o[i] / l;")) << g.name;
      EXPECT_FALSE(contains(attn.code.source, "a warp per query")) << g.name << ": no attention kernel left";
    }
    int mlps = 0;
    for (const Kernel& k : fused.schedule.kernels) {
      if (!contains(k.name, "mlp")) continue;
      ++mlps;
      EXPECT_EQ(k.name.rfind("cuda_fused_layernorm_mlp_", 0), 0u) << k.name << ": the layernorm is fc1's prologue";
      EXPECT_EQ(k.kind, KernelKind::PrologueMatmul) << k.name;
      const Node& fc2 = fused.schedule.graph.nodes[static_cast<size_t>(k.nodes.back())];
      const int h = fc2.inputs[0];
      EXPECT_TRUE(std::count(k.removed.begin(), k.removed.end(), h)) << k.name << ": h kept on chip";
      EXPECT_EQ(k.cols, c.d_model) << "the prologue's rows: fc1's x";
    }
    EXPECT_EQ(mlps, c.n_layer) << g.name;
    const int64_t rows = g.tensor(g.inputs[0]).numel();  // the token ids: B T rows
    const int64_t tile = std::min<int64_t>(cg.mlp_rows, rows);  // (the decode step's tile: its one row)
    EXPECT_TRUE(contains(fused.code.source, "__shared__ __align__(16) float hs[" + std::to_string(tile) + "][" +
                                                std::to_string(4 * c.d_model / 8) + "];"))
        << g.name << ": the CTA's columns of h";
    EXPECT_TRUE(contains(fused.code.source, "*(const float4*)&hs[i][4 * u]")) << "fc2's K slice reads h from shared memory";
    // (pushed by default with st.async, CudaCodegenOptions::mlp_push and mlp_async; the pulled form and the
    // synchronous push: FusedMlpCompilesAtEveryTileHeight)
    EXPECT_TRUE(contains(fused.code.source, "mg_cluster_st_async(&pq[rank][i][m % "))
        << "the slices' partial sums pushed to the CTAs that finish them";
    EXPECT_FALSE(contains(fused.code.source, "mg_cluster_ld(&pp")) << "nothing read remotely by default";
    for (const CudaLaunch& l : fused.code.launches) {
      if (contains(l.name, "mlp")) {
        EXPECT_EQ(l.grid, 8 * ((rows + tile - 1) / tile)) << l.name << ": a cluster per row tile";
        EXPECT_EQ(l.cluster_dim, 8) << l.name;
      }
    }
    for (const Kernel& k : apart.schedule.kernels) EXPECT_FALSE(contains(k.name, "mlp")) << k.name;
    for (const Kernel& k : lower_default(g, false).schedule.kernels) EXPECT_FALSE(contains(k.name, "mlp")) << k.name;
  }
}

CudaLowered lower_mega(const Graph& g) {
  CudaCodegenOptions cg;
  cg.generated_gemm = true;
  cg.megakernel = true;
  return lower_cuda(g, PassOptions{}, cg);
}

// The megakernel form: every kernel a __device__ function of a virtual block, one __global__
// kernel calling them in schedule order with a cluster barrier between stages, one launch.
TEST(CompileCudaCodegen, MegakernelRunsEveryKernelAsAStageOfOneLaunch) {
  const CudaLowered l = lower_mega(capture_gpt(compile_tiny_config(), 2, 16));
  const std::string& src = l.code.source;
  ASSERT_EQ(l.code.launches.size(), 1u);
  const CudaLaunch& m = l.code.launches[0];
  EXPECT_EQ(m.function, "cuda_megakernel");
  EXPECT_EQ(m.cluster, 16);
  EXPECT_EQ(m.block, 256) << "the generated GEMM's block, the widest stage";
  size_t globals = 0;
  for (size_t at = src.find("__global__"); at != std::string::npos; at = src.find("__global__", at + 1)) ++globals;
  EXPECT_EQ(globals, 1u);
  // the stages in schedule order, a barrier between consecutive ones
  size_t at = 0, syncs = 0;
  for (const Kernel& k : l.schedule.kernels) {
    EXPECT_TRUE(contains(src, "__device__ __noinline__ void " + k.name + "(") || contains(src, "//   the same code as ")) << k.name;
    const size_t next = src.find("// stage ", at);
    ASSERT_NE(next, std::string::npos) << k.name;
    at = next + 1;
  }
  for (size_t p = src.find("  mg_cluster_sync();"); p != std::string::npos; p = src.find("  mg_cluster_sync();", p + 1)) ++syncs;
  EXPECT_EQ(syncs, l.schedule.kernels.size() - 1) << "in the forward every kernel reads its predecessor's output";
  // the decode step: each layer's key and value cache writes are independent, one barrier less
  const CudaLowered d = lower_mega(capture_gpt_decode(compile_tiny_config()));
  size_t dsyncs = 0;
  for (size_t p = d.code.source.find("  mg_cluster_sync();"); p != std::string::npos; p = d.code.source.find("  mg_cluster_sync();", p + 1))
    ++dsyncs;
  EXPECT_EQ(dsyncs, d.schedule.kernels.size() - 1 - static_cast<size_t>(compile_tiny_config().n_layer));
  size_t v_write = 0;  // the first layer's value cache write: no barrier after its key's
  while (v_write < d.schedule.kernels.size() && d.schedule.kernels[v_write].kind != KernelKind::KvWrite) ++v_write;
  ++v_write;
  ASSERT_LT(v_write, d.schedule.kernels.size());
  EXPECT_EQ(d.schedule.kernels[v_write].kind, KernelKind::KvWrite);
  EXPECT_TRUE(contains(d.code.source, "// no barrier: stage " + std::to_string(v_write) + " touches nothing"));
  // the rewrite: no block index, no restricted (non-coherent) pointer, no static shared array
  // left in the device functions; the megakernel's parameters are named after the buffers
  const std::string fns = code_only(src.substr(src.find("// ---- megakernel helpers"), src.find("extern \"C\" __global__") -
                                                                                              src.find("// ---- megakernel helpers")));
  EXPECT_FALSE(contains(fns, "blockIdx.x"));
  EXPECT_FALSE(contains(fns, "threadIdx.x"));
  EXPECT_FALSE(contains(fns, "__restrict__"));
  EXPECT_FALSE(contains(fns, "__shared__"));
  EXPECT_FALSE(contains(fns, "__syncthreads"));
  EXPECT_TRUE(contains(fns, "mg_bar_sync(bar, 256)")) << "the GEMM's barrier, over its virtual block";
  EXPECT_TRUE(contains(src, "float* blocks_0_attn_qkv_weight"));
  // the same GEMM of every layer is one function
  EXPECT_TRUE(contains(src, "the same code as cuda_fused_")) << "identical stages share a function";
  // the existing modes are refused with it where they cannot be stages
  CudaCodegenOptions cg;
  cg.megakernel = true;
  EXPECT_ERROR(lower_cuda(capture_tinyhead(2), PassOptions{}, cg), "the megakernel needs generated GEMMs");
}

TEST(CompileCudaCodegen, MegakernelSharedArraysBecomeSlicesOfOneBuffer) {
  int64_t smem = 0;
  const std::string k =
      "// k\nextern \"C\" __global__ void __launch_bounds__(64) k(const float* __restrict__ x, float* __restrict__ y) {\n"
      "  __shared__ float a[8][8][33];  // the partials\n  __shared__ double r[2], s[3];\n"
      "  y[blockIdx.x * 64 + threadIdx.x] = x[0];\n  __syncthreads();\n}\n";
  const std::string f = device_function(k, 64, smem);
  EXPECT_TRUE(contains(f, "__device__ __noinline__ void k(const int vb, const int tid, const int bar, char* mg_smem,\n    const float* x, float* y)"))
      << f;
  EXPECT_TRUE(contains(f, "float (*a)[8][33] = reinterpret_cast<float (*)[8][33]>(mg_smem + 0);  // the partials")) << f;
  EXPECT_TRUE(contains(f, "double* r = reinterpret_cast<double*>(mg_smem + 8448);")) << f;
  EXPECT_TRUE(contains(f, "double* s = reinterpret_cast<double*>(mg_smem + 8464);")) << f;
  EXPECT_TRUE(contains(f, "y[vb * 64 + tid] = x[0];")) << f;
  EXPECT_TRUE(contains(f, "mg_bar_sync(bar, 64);")) << f;
  EXPECT_EQ(smem, 8448 + 16 + 32);
  EXPECT_ERROR(device_function("// no kernel\n", 32, smem), "no __global__ function");
}

TEST(CompileCudaCodegen, DebugFilesAreWritten) {
  testjit::TempCacheDir dir;
  const Graph g = capture_tinyhead(2);
  const CudaLowered l = lower_default(g);
  write_cuda_debug_files(dir.path(), g, l);
  for (const char* f : {"ir_pre_fusion.txt", "ir_post_fusion.txt", "schedule.txt", "output_code.cu", "kernels/cuda_fused_softmax_1.cu"})
    EXPECT_TRUE(std::filesystem::exists(dir.path() / f)) << f;
}

#ifdef MINIGPT_HAVE_CUDA_COMPILE

// Every generated source compiles with NVRTC for Hopper (no GPU needed to compile).
TEST(CompileCudaNvrtc, EveryGeneratedSourceCompilesForSm90a) {
  const ModelConfig c = compile_tiny_config();
  ModelConfig shipped;  // the shipped model's shape (V 611: rows not a multiple of 32)
  shipped.vocab_size = 611;
  std::vector<Graph> graphs{capture_tinyhead(2), capture_gpt(c, 2, 16), capture_gpt(c, 3, 5), capture_gpt_decode(c),
                            capture_gpt(shipped, 2, 16), capture_gpt_decode(shipped)};
  for (const Graph& g : graphs) {
    for (bool gen : {false, true}) {
      const CudaLowered l = lower_default(g, gen);
      std::string ptx;
      ASSERT_NO_THROW(ptx = nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << g.name << (gen ? " generated gemm" : "");
      for (const CudaLaunch& launch : l.code.launches) {
        if (launch.kind != CudaLaunch::Kind::Kernel) continue;
        EXPECT_TRUE(contains(ptx, ".entry " + launch.function + "(")) << launch.function;
      }
    }
  }
}

// The attention kernel's layouts (a block per (sequence, head, query tile), a warp per query):
// heads of 12 floats (no float4 staging), of 40 (more than a warp: two dimensions per lane),
// more than 32 keys (two key chunks per lane), a last query tile part empty; with the attention
// standalone, as its projection's prologue and as the MLP kernel's first stage (heads of 40 stay
// apart: kPrologueMaxHeadDim; 4-row tiles of 74 rows span two sequences), and the decode step.
// Each compiles with NVRTC.
TEST(CompileCudaNvrtc, AttentionLayoutsCompileForSm90a) {
  std::vector<std::pair<Graph, bool>> graphs;  // and whether the attention may join the MLP kernel
  for (const auto& [heads, d] : {std::pair{2, 24}, std::pair{1, 40}}) {
    ModelConfig c = compile_tiny_config();
    c.n_head = heads;
    c.d_model = d;
    c.block_size = 40;
    graphs.emplace_back(capture_gpt(c, 2, 37), d / heads <= 32);  // (heads of 40: more than a warp)
    graphs.emplace_back(capture_gpt_decode(c), false);            // (the KV cache)
  }
  for (const auto& [g, joins] : graphs) {
    // 0 the attention a kernel of its own, 1 its projection's GEMM prologue, 2 the MLP kernel's first stage
    for (int form : {0, 1, 2}) {
      CudaCodegenOptions cg;
      cg.generated_gemm = true;
      cg.attention_prologue = form == 1;
      cg.fuse_mlp = true;  // and the MLP's fused kernel at these widths (fc1's K 24, 40), with the projection
      cg.fuse_mlp_proj = form != 1;  // in it when the attention is not the projection's prologue
      cg.fuse_mlp_attention = form == 2;
      const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
      const bool in_mlp = form == 2 && joins;
      EXPECT_EQ(contains(l.code.source, "cuda_fused_attention_proj_layernorm_mlp_"), in_mlp) << g.name << " form " << form;
      EXPECT_TRUE(contains(l.code.source, "a warp per query") || form == 1 || in_mlp) << g.name << " form " << form;
      ASSERT_NO_THROW(nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << g.name << " form " << form;
    }
  }
}

TEST(CompileCudaNvrtc, MegakernelSourcesCompileForSm90a) {
  const ModelConfig c = compile_tiny_config();
  ModelConfig shipped;
  shipped.vocab_size = 611;
  for (const Graph& g : {capture_gpt(c, 3, 5), capture_gpt_decode(c), capture_gpt(shipped, 2, 16), capture_gpt_decode(shipped)}) {
    const CudaLowered l = lower_mega(g);
    std::string ptx;
    ASSERT_NO_THROW(ptx = nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << g.name;
    EXPECT_TRUE(contains(ptx, ".entry cuda_megakernel(")) << g.name;
    EXPECT_TRUE(contains(ptx, "barrier.cluster.wait")) << g.name;
  }
}

TEST(CompileCudaNvrtc, PdlVariantWaitsInEveryKernelAndCompiles) {
  CudaCodegenOptions cg;
  cg.generated_gemm = true;
  cg.pdl = true;
  const CudaLowered l = lower_cuda(capture_gpt(compile_tiny_config(), 2, 16), PassOptions{}, cg);
  EXPECT_TRUE(l.code.pdl);
  size_t kernels = 0, waits = 0;
  for (size_t at = l.code.source.find("__global__"); at != std::string::npos; at = l.code.source.find("__global__", at + 1)) ++kernels;
  for (size_t at = l.code.source.find("griddepcontrol.wait;"); at != std::string::npos; at = l.code.source.find("griddepcontrol.wait;", at + 1))
    ++waits;
  EXPECT_EQ(waits, kernels);
  EXPECT_NO_THROW(nvrtc_compile_ptx(l.code.source, "compute_90a", "pdl"));
  cg.generated_gemm = false;  // cuBLAS's kernels do not wait: refused
  EXPECT_ERROR(lower_cuda(capture_tinyhead(2), PassOptions{}, cg), "PDL needs generated GEMMs");
}

// The parameters of the __global__ function `name` in src, as written ("const float* __restrict__ x").
std::vector<std::string> kernel_params(const std::string& src, const std::string& name) {
  size_t at = src.find("__global__");
  for (; at != std::string::npos; at = src.find("__global__", at + 1)) {  // its definition: the name on the __global__ line
    const size_t name_at = src.find(" " + name + "(", at);
    if (name_at != std::string::npos && name_at < src.find('\n', at)) break;
  }
  EXPECT_NE(at, std::string::npos) << name;
  if (at == std::string::npos) return {};
  const size_t close = src.find(") {", at), open = src.rfind('(', close);  // (no parens inside the list)
  std::vector<std::string> out;
  for (size_t p = open + 1; p <= close;) {
    const size_t end = std::min(src.find(',', p), close);
    std::string q = src.substr(p, end - p);
    q.erase(0, q.find_first_not_of(" \n"));
    out.push_back(q);
    p = end + 1;
  }
  return out;
}

// With PDL a kernel may start before the kernels it reads from have finished; what it reads of
// theirs must be loaded after griddepcontrol.wait. A `const T* __restrict__` parameter may be read
// through the non-coherent path, whose loads ptxas schedules across the wait (for sm_90a it put
// the MLP kernel's residual load above it: wrong logits, REPORT.md 7j). So under PDL every
// parameter of every launch whose tensor is not a graph weight is plain (`const float* x`), and
// with weights_plain off every weight keeps `__restrict__` (with it on, the default since 7m,
// nothing does: WeightsPlainLayerNormWeightsEarlyAndAsyncPushCompile); without PDL nothing
// changes. Over the forward (tile heights that divide its rows and not), the decode step, the
// shipped model's widths, and the forms of the MLP kernel (pushed, after the attention stage).
TEST(CompileCudaCodegen, PdlKernelsReadEarlierKernelsOutputsWithoutRestrict) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const ModelConfig tiny = compile_tiny_config();
  for (const Graph& g : {capture_gpt(tiny, 2, 16), capture_gpt(tiny, 3, 5), capture_gpt_decode(tiny), capture_gpt(shipped, 2, 16)}) {
    for (int form = 0; form < 4; ++form) {  // the default; pushed after the attention stage; pulled; the MLP apart
      CudaCodegenOptions cg;
      cg.generated_gemm = true;
      cg.fuse_mlp_attention = form == 1 || form == 2;
      cg.mlp_push = form == 1;
      cg.fuse_mlp = form != 3;
      cg.weights_plain = false;  // (weights_plain drops it from the weights too: WeightsPlainLayerNormWeightsEarlyAndAsyncPushCompile)
      cg.mlp_async = false;      // (7h's form: the synchronous push after the attention stage)
      for (bool pdl : {true, false}) {
        cg.pdl = pdl;
        const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
        const Graph& sg = l.schedule.graph;
        int activations = 0, weights = 0;
        for (const CudaLaunch& launch : l.code.launches) {
          const std::vector<std::string> params = kernel_params(l.code.source, launch.function);
          ASSERT_EQ(params.size(), launch.args.size()) << launch.function;
          for (size_t i = 0; i < params.size(); ++i) {
            if (launch.args[i] < 0 || !contains(params[i], "const ")) continue;  // (a null pointer; the output)
            const bool weight = sg.tensor(launch.args[i]).kind == TensorKind::Weight;
            (weight ? weights : activations) += 1;
            EXPECT_EQ(contains(params[i], "__restrict__"), weight || !pdl)
                << g.name << " form " << form << (pdl ? " PDL " : " ") << launch.function << ": " << params[i];
          }
        }
        EXPECT_GT(activations, 0) << g.name;
        EXPECT_GT(weights, 0) << g.name;
        if (form == 1 && pdl && !contains(g.name, "decode")) {
          EXPECT_TRUE(contains(l.code.source, "    const float* qkv,\n")) << "the attention stage's qkv: " << g.name;
          EXPECT_TRUE(contains(l.code.source, "mg_cluster_st(&pq[rank][i][m % ")) << "pushed after the attention stage: " << g.name;
        }
      }
    }
  }
}

// weights_early: each generated GEMM loads its lane's W slice and its bias before PDL's wait
// (weights only above it), the residual right after; off, W is read in the K loop. Both compile.
TEST(CompileCudaNvrtc, GemmsLoadTheirWeightsBeforePdlsWait) {
  CudaCodegenOptions cg;
  cg.generated_gemm = true;
  cg.pdl = true;
  const Graph g = capture_gpt(compile_tiny_config(), 2, 16);
  const CudaLowered early = lower_cuda(g, PassOptions{}, cg);
  int gemms = 0;
  for (const CudaKernelText& k : early.code.kernels) {
    // a GEMM emitted here (an identical one is emitted once, its later copies only a comment);
    // the MLP kernels: FusedMlpCompilesAtEveryTileHeight
    if (!contains(k.text, "__global__") || !(contains(k.name, "gemm") || contains(k.name, "matmul"))) continue;
    ++gemms;
    ASSERT_TRUE(contains(k.text, "float4 wr[")) << k.name;
    const size_t w = k.text.find("wr[u] = "), b = k.text.find("const float bias_m = "), wait = k.text.find("griddepcontrol.wait;");
    ASSERT_NE(wait, std::string::npos) << k.name;
    EXPECT_LT(w, wait) << k.name << ": W loaded before the wait";
    EXPECT_LT(b, wait) << k.name << ": the bias loaded before the wait";
    const size_t res = k.text.find("const float res_nm = "), xs = k.text.find("xs[");
    if (res != std::string::npos) {
      EXPECT_LT(wait, res) << k.name << ": the residual (an earlier kernel's) after it";
    }
    EXPECT_LT(wait, xs) << k.name << ": x (an earlier kernel's) after it";
  }
  EXPECT_GE(gemms, 3) << "the distinct GEMMs beside the MLP kernel: the first qkv (embedding prologue), qkv, the LM head";
  EXPECT_NO_THROW(nvrtc_compile_ptx(early.code.source, "compute_90a", "weights early"));
  cg.weights_early = false;
  const CudaLowered late = lower_cuda(g, PassOptions{}, cg);
  EXPECT_FALSE(contains(late.code.source, "float4 wr["));
  EXPECT_FALSE(contains(late.code.source, "PDL's wait, when launched with it, goes here")) << "every marker replaced";
  EXPECT_NO_THROW(nvrtc_compile_ptx(late.code.source, "compute_90a", "weights late"));
}

// The MLP kernel (fuse_mlp) at every tile height, with and without the projection before it
// (fuse_mlp_proj) and the attention before that (fuse_mlp_attention), with and without PDL, its layernorm prologue, the weights early, and in the
// megakernel; row counts that the tile does not divide (3 x 5 = 15, the decode step's 1), the
// shipped model's widths: W1's and W2's slices and the biases loaded before PDL's wait, the
// residual after it; each source compiles with NVRTC.
TEST(CompileCudaNvrtc, FusedMlpCompilesAtEveryTileHeight) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const ModelConfig tiny = compile_tiny_config();
  for (const Graph& g : {capture_gpt(tiny, 2, 16), capture_gpt(tiny, 3, 5), capture_gpt_decode(tiny), capture_gpt(shipped, 2, 16)}) {
    for (int rows : {1, 2, 4, 8}) {
      // 0 PDL, 1 weights late, 2 layernorms apart (x staged), 3 megakernel, 4 + projection and
      // attention (the prefill's); in clusters: 5 with the projection and the attention, 6 without
      // either, 7 with the projection alone, 8 that with fc2's partials pushed (mlp_push)
      for (int form = 0; form < 9; ++form) {
        if (form > 0 && form < 4 && rows != 4) continue;  // (each NVRTC compile takes a while: those forms at one height)
        if ((form == 6 && rows != 2) || (form == 7 && rows != 4) || (form == 8 && rows == 2)) continue;
        CudaCodegenOptions cg;
        cg.generated_gemm = true;
        cg.fuse_mlp = true;
        cg.fuse_mlp_proj = form == 4 || form == 5 || form >= 7;
        cg.fuse_mlp_attention = form < 7;
        cg.mlp_push = form == 8 || form == 5;
        cg.mlp_async = false;  // (the push with st.async: WeightsPlainLayerNormWeightsEarlyAndAsyncPushCompile)
        cg.mlp_cluster = form >= 5;
        cg.mlp_rows = rows;
        cg.pdl = form != 3;
        cg.megakernel = form == 3;
        cg.weights_early = form != 1;
        cg.matmul_prologue = form != 2;
        const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
        const std::string what = fmt::format("{} rows {} form {}", g.name, rows, form);
        int mlps = 0;
        for (const CudaKernelText& k : l.code.kernels) {
          if (!contains(k.name, "mlp") || !contains(k.text, "__global__") || form == 3) continue;
          ++mlps;
          const bool proj = form == 4 || form == 5 || form >= 7, attn = (form == 4 || form == 5) && !contains(g.name, "decode");
          EXPECT_EQ(contains(k.name, "_proj_"), proj) << what;
          EXPECT_EQ(contains(k.name, "_attention_proj_"), attn) << what;
          // (8 rows x 64 columns, more outputs than threads, in clusters too since 7m: two of one column per thread)
          const bool cl = form >= 5 && !contains(k.text, "not in clusters");
          EXPECT_TRUE(cl || form < 5) << what;
          EXPECT_EQ(cl, contains(k.text, "mg_cluster_barrier();")) << what;
          if (cl) {  // pulled: two whole barriers, the partials read remotely; pushed: one, written remotely after the arrive and the wait
            const std::string code = code_only(k.text);
            const bool pushed = form == 8 || form == 5;
            EXPECT_EQ(count_of(code, "mg_cluster_barrier();"), pushed ? 1u : 2u) << what;
            EXPECT_EQ(contains(code, "mg_cluster_ld("), !pushed) << what;
            if (pushed) {
              const size_t arrive = code.find("mg_cluster_arrive();"), wait = code.find("mg_cluster_wait();"),
                           push = code.find("mg_cluster_st(&pq[rank][i][m % "), barrier = code.find("mg_cluster_barrier();");
              ASSERT_NE(push, std::string::npos) << what;
              EXPECT_LT(arrive, code.find("griddepcontrol.wait;")) << what;
              EXPECT_LT(arrive, wait) << what;
              EXPECT_LT(wait, push) << what;
              EXPECT_LT(push, barrier) << what;
            }
          }
          const size_t wait = k.text.find("griddepcontrol.wait;"), w1 = k.text.find(cl ? "w1c[u] = " : "w1r[j][u] = "),
                       w2 = k.text.find(cl ? "w2c[u] = " : "fc2_w[j][u] = "),
                       res = k.text.find(proj ? "rpr[q] = " : cl ? "const float resc = " : "resr[q] = "),
                       hs = k.text.find(cl ? "hs[i][l] = v;" : "hs[i][c] = vi;");
          ASSERT_NE(wait, std::string::npos) << what;
          ASSERT_NE(hs, std::string::npos) << what;
          EXPECT_LT(wait, hs) << what;
          if (form == 1) {
            EXPECT_EQ(w1, std::string::npos) << what;
            continue;
          }
          ASSERT_NE(w1, std::string::npos) << what;
          ASSERT_NE(w2, std::string::npos) << what;
          ASSERT_NE(res, std::string::npos) << what;
          EXPECT_LT(w1, wait) << what << ": W1 before the wait";
          EXPECT_LT(w2, wait) << what << ": W2 before the wait";
          EXPECT_LT(k.text.find(cl ? "const float b2f = " : "fc2_b[q] = "), wait) << what;
          EXPECT_LT(wait, res) << what << ": the residual (an earlier kernel's) after it";
          if (attn) {
            EXPECT_LT(wait, k.text.find("ks[s][d] = ")) << what << ": the attention's k (an earlier kernel's) after it";
          }
          if (proj) {
            EXPECT_LT(k.text.find("proj_w[j][u] = "), wait) << what << ": the projection's W before the wait";
            EXPECT_TRUE(contains(k.text, "v = v + ms[i][m];")) << what << ": fc2's residual is the projection's rows";
          }
        }
        if (form != 3) {
          EXPECT_GE(mlps, 1) << what;
        }
        ASSERT_NO_THROW(nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << what;
      }
    }
  }
}

// smem_vec4: the K loop reads x's rows from shared memory as one float4 each (the arrays
// 16-byte aligned); with the MLP fused and in the megakernel too (whose shared-array rewrite
// drops the __align__: its slices start at multiples of 16). Each compiles with NVRTC.
// The two measuring aids of REPORT 7n (never candidates): pad_launches puts an empty kernel,
// under PDL with its trigger then its wait, after every kernel but the last, under that kernel's
// name (the explain table then times the two together) and touches nothing else; mlp_mbar_cta
// changes only the MLP kernel's mbarrier wait (acquire at CTA scope). Neither is in the default's
// launches or code. Each source compiles with NVRTC for sm_90a.
TEST(CompileCudaNvrtc, PadLaunchesAndCtaScopeMbarrierWaitCompile) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const Graph g = capture_gpt(shipped, 2, 16);
  CudaCodegenOptions base;
  base.generated_gemm = base.pdl = true;
  const CudaLowered d = lower_cuda(g, PassOptions{}, base);
  EXPECT_FALSE(contains(d.code.source, "cuda_pad_launch"));
  EXPECT_FALSE(contains(d.code.source, "mg_mbar_wait<false>"));
  CudaCodegenOptions pad = base;
  pad.pad_launches = true;
  const CudaLowered p = lower_cuda(g, PassOptions{}, pad);
  ASSERT_EQ(p.code.launches.size(), 2 * d.code.launches.size() - 1);
  for (size_t i = 0; i < p.code.launches.size(); ++i) {
    const CudaLaunch& l = p.code.launches[i];
    if (i % 2) {
      EXPECT_EQ(l.function, "cuda_pad_launch");
      EXPECT_EQ(l.name, p.code.launches[i - 1].name);  // (timed with the kernel before it)
      EXPECT_TRUE(l.args.empty());
      EXPECT_EQ(l.grid, 1);
      EXPECT_EQ(l.block, 32);
    } else {
      EXPECT_EQ(l.function, d.code.launches[i / 2].function);
      EXPECT_EQ(l.args, d.code.launches[i / 2].args);
    }
  }
  const size_t at = p.code.source.find("cuda_pad_launch() {");
  ASSERT_NE(at, std::string::npos);
  const std::string body = p.code.source.substr(at, p.code.source.find("\n}\n", at) - at);
  ASSERT_NE(body.find("griddepcontrol.wait;"), std::string::npos);
  EXPECT_LT(body.find("griddepcontrol.launch_dependents;"), body.find("griddepcontrol.wait;"))
      << "the trigger first: the next kernel's weight loads overlap the previous kernel, as without the pad";
  ASSERT_NO_THROW(nvrtc_compile_ptx(p.code.source, "compute_90a", g.name)) << "pad-launches";
  CudaCodegenOptions cta = base;
  cta.mlp_mbar_cta = true;
  const CudaLowered c = lower_cuda(g, PassOptions{}, cta);
  int mlps = 0;
  for (const CudaKernelText& k : c.code.kernels) {
    if (!contains(k.name, "mlp") || !contains(k.text, "__global__")) continue;
    ++mlps;
    EXPECT_TRUE(contains(code_only(k.text), "mg_mbar_wait<false>(&pq_bar, 0);")) << k.name;
    EXPECT_FALSE(contains(code_only(k.text), "mg_mbar_wait(&pq_bar, 0);")) << k.name;
  }
  EXPECT_GE(mlps, 1);
  ASSERT_NO_THROW(nvrtc_compile_ptx(c.code.source, "compute_90a", g.name)) << "mbar-cta";
}

// fuse_mlp_next ("mlp-next", REPORT 7n): the next block's layernorm and qkv matmul as the MLP
// kernel's tail, so the 4-block model at (2, 16) is 11 kernels instead of 14 (3 layernorm + qkv
// kernels gone; the last MLP keeps ln_f + the LM head apart: 611 columns), the decode step 3
// fewer too. In the tail: y's rows pushed into every CTA (st.async on ys_bar), waited on before
// the layernorm reads them from ys; CTA c computes qkv's columns [c MQ/8, (c + 1) MQ/8)
// (mlp_next_split) or all of them, storing c % 8 == rank; its weights loaded before PDL's wait.
// Each source compiles with NVRTC for sm_90a.
TEST(CompileCudaNvrtc, MlpWithTheNextLayerNormAndQkvCompiles) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const ModelConfig tiny = compile_tiny_config();
  for (const Graph& g : {capture_gpt(shipped, 2, 16), capture_gpt(tiny, 3, 5), capture_gpt_decode(tiny), capture_gpt(shipped, 1, 1)}) {
    for (int form : {4, 8, 1, -4}) {  // the rows per tile; -4: 4, every CTA all of qkv's columns (mlp_next_split off)
      const int rows = std::abs(form);
      CudaCodegenOptions cg;
      cg.generated_gemm = cg.pdl = true;
      cg.mlp_rows = rows;
      cg.mlp_next_split = form > 0;
      const CudaLowered d = lower_cuda(g, PassOptions{}, cg);
      cg.fuse_mlp_next = true;
      const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
      const std::string what = fmt::format("{} form {}", g.name, form);
      int tails = 0;
      for (const CudaKernelText& k : l.code.kernels) {
        if (!contains(k.name, "_mlp_next_")) continue;
        ++tails;
        const std::string code = code_only(k.text);
        EXPECT_LT(code.find("mg_mbar_init_tx(&ys_bar, "), code.find("mg_cluster_arrive();")) << what;
        EXPECT_LT(code.find("nxt_w["), code.find("griddepcontrol.wait;")) << what << ": qkv's weights before the wait";
        EXPECT_LT(code.find("nx_ptr0[lane"), code.find("griddepcontrol.wait;")) << what << ": the layernorm's gain before the wait";
        EXPECT_LT(code.find("mg_cluster_st_async(&ys[i][m], &ys_bar, c, v);"), code.find("mg_mbar_wait(&ys_bar, 0);")) << what;
        EXPECT_NE(code.find("ms[warp]", code.find("mg_mbar_wait(&ys_bar, 0);")), std::string::npos) << what << ": the layernorm after the wait";
        EXPECT_EQ(contains(code, "m % 8 == rank"), form < 0) << what << ": every CTA all of qkv, storing its share";
        EXPECT_EQ(contains(code, "nxt_w[u] = "), form > 0) << what << ": CTA c qkv's columns [c MQ/8, (c + 1) MQ/8), a K slice per warp";
      }
      EXPECT_GE(tails, 1) << what;
      EXPECT_EQ(l.code.launches.size() + static_cast<size_t>(tails), d.code.launches.size()) << what << ": a launch fewer per tail";
      ASSERT_NO_THROW(nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << what;
    }
  }
  // where the MLP does not fit the cluster form (d = 160: H / 8 = 80 columns of h per CTA, wider
  // than a warp), lower_cuda plans again without the tail: the same launches as without the option
  ModelConfig wide = tiny;
  wide.d_model = 160;
  const Graph g = capture_gpt(wide, 2, 5);
  CudaCodegenOptions cg;
  cg.generated_gemm = cg.pdl = true;
  const CudaLowered d = lower_cuda(g, PassOptions{}, cg);
  cg.fuse_mlp_next = true;
  const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
  EXPECT_FALSE(contains(l.code.source, "_mlp_next_"));
  EXPECT_EQ(l.code.launches.size(), d.code.launches.size());
}

TEST(CompileCudaNvrtc, SharedRowsReadAsFloat4Compile) {
  for (const Graph& g : {capture_gpt(compile_tiny_config(), 2, 16), capture_gpt(compile_tiny_config(), 3, 5),
                         capture_gpt_decode(compile_tiny_config())}) {
    for (bool mlp : {false, true}) {
      for (bool mega : {false, true}) {
        CudaCodegenOptions cg;
        cg.generated_gemm = true;
        cg.smem_vec4 = true;
        cg.fuse_mlp = mlp;
        cg.mlp_cluster = false;  // (the block form: its K loop reads hs[i][k])
        cg.pdl = !mega;
        cg.megakernel = mega;
        const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
        EXPECT_TRUE(contains(l.code.source, "const float4 xv = *(const float4*)&xs[i][k];")) << g.name;
        EXPECT_FALSE(contains(l.code.source, "make_float4(xs[i][k]")) << g.name << ": every GEMM reading xs";
        EXPECT_EQ(contains(l.code.source, "__align__(16) float xs["), !mega) << g.name;
        if (mlp) {
          EXPECT_TRUE(contains(l.code.source, "*(const float4*)&hs[i][k];")) << g.name;
        }
        ASSERT_NO_THROW(nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << g.name << (mlp ? " mlp" : "") << (mega ? " mega" : "");
      }
    }
  }
}

TEST(CompileCudaNvrtc, WithoutAGpuTheRunnerSaysSo) {
  if (cuda_gpu_visible()) GTEST_SKIP() << "a GPU is visible: tests/cuda/compile_cuda_test.cpp runs the graphs";
  const TinyHead head = TinyHead::init(42);
  const WeightBinding w = bind_tinyhead(head);
  EXPECT_ERROR(CudaCompiledGraph(capture_tinyhead(2), w, CudaCompileOptions{}), "no CUDA GPU visible");
}

TEST(CompileCudaNvrtc, ACompileErrorCarriesNvrtcsLog) {
  EXPECT_ERROR(nvrtc_compile_ptx("extern \"C\" __global__ void k() { undefined_thing(); }", "compute_90a", "bad"),
                        "undefined_thing");
}

namespace {

CudaJitRequest request_for(const std::filesystem::path& dir, const std::string& extra = "") {
  CudaJitRequest r;
  r.source = lower_default(capture_tinyhead(2)).code.source + "// " + extra + "\n";
  r.key_extra = "test " + extra;
  r.name = "tinyhead";
  r.arch = "sm_90a";  // given: this machine may have no GPU
  r.cache_dir = dir;
  return r;
}

void flip_byte(const std::filesystem::path& p, size_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char ch = 0;
  f.read(&ch, 1);
  ch = static_cast<char>(ch ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&ch, 1);
}

}  // namespace

TEST(CompileCudaJit, MissThenHitWithTheSameBytes) {
  testjit::TempCacheDir dir;
  const CudaJitRequest r = request_for(dir.path());
  const CudaBinary a = cuda_jit_compile(r);
  EXPECT_FALSE(a.cache_hit);
  EXPECT_GT(a.cubin.size(), 1000u);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / (a.key + ".cu")));
  const CudaBinary b = cuda_jit_compile(r);
  EXPECT_TRUE(b.cache_hit);
  EXPECT_EQ(a.cubin, b.cubin);
  EXPECT_EQ(a.key, b.key);
  std::printf("cold NVRTC compile %.3f s, warm lookup %.4f s\n", a.total_s, b.total_s);
}

TEST(CompileCudaJit, KeyCoversSourceExtraAndArchitecture) {
  testjit::TempCacheDir dir;
  CudaJitRequest r = request_for(dir.path());
  const std::string k = cuda_jit_key(r);
  CudaJitRequest other = r;
  other.arch = "sm_80";
  EXPECT_NE(cuda_jit_key(other), k);
  other = r;
  other.key_extra += "x";
  EXPECT_NE(cuda_jit_key(other), k);
  other = r;
  other.source += " ";
  EXPECT_NE(cuda_jit_key(other), k);
  EXPECT_EQ(cuda_jit_key(r), k);
}

TEST(CompileCudaJit, CorruptTruncatedAndStaleEntriesAreRebuiltNeverUsed) {
  testjit::TempCacheDir dir;
  const CudaJitRequest r = request_for(dir.path());
  const CudaBinary good = cuda_jit_compile(r);
  const std::filesystem::path cubin = dir.path() / (good.key + ".cubin"), json = dir.path() / (good.key + ".json");
  // a flipped byte
  flip_byte(cubin, good.cubin.size() / 2);
  CudaBinary b = cuda_jit_compile(r);
  EXPECT_FALSE(b.cache_hit);
  EXPECT_EQ(b.cubin, good.cubin);
  // truncated
  std::filesystem::resize_file(cubin, 100);
  b = cuda_jit_compile(r);
  EXPECT_FALSE(b.cache_hit);
  EXPECT_EQ(b.cubin, good.cubin);
  // a .json of another NVRTC (stale)
  {
    std::ifstream in(json);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"nvrtc_version\": \"");
    ASSERT_NE(at, std::string::npos);
    text.insert(at + 18, "0");
    std::ofstream(json, std::ios::trunc) << text;
  }
  b = cuda_jit_compile(r);
  EXPECT_FALSE(b.cache_hit);
  // garbage .json
  std::ofstream(json, std::ios::trunc) << "{not json";
  b = cuda_jit_compile(r);
  EXPECT_FALSE(b.cache_hit);
  b = cuda_jit_compile(r);
  EXPECT_TRUE(b.cache_hit);
  EXPECT_EQ(b.cubin, good.cubin);
}

TEST(CompileCudaJit, ConcurrentCompilesAllSucceedAndAgree) {
  testjit::TempCacheDir dir;
  const CudaJitRequest r = request_for(dir.path(), "concurrent");
  std::vector<CudaBinary> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = cuda_jit_compile(r); });
  for (std::thread& t : threads) t.join();
  int compiled = 0;
  for (const CudaBinary& b : got) {
    EXPECT_EQ(b.cubin, got[0].cubin);
    compiled += b.cache_hit ? 0 : 1;
  }
  EXPECT_EQ(compiled, 1) << "one compile; the others waited on the lock and loaded its entry";
}

TEST(CompileCudaJit, ASourceThatDoesNotCompileIsAnErrorAndKeptForTheReader) {
  testjit::TempCacheDir dir;
  CudaJitRequest r = request_for(dir.path());
  r.source = "extern \"C\" __global__ void k() { nope(); }\n";
  EXPECT_ERROR(cuda_jit_compile(r), "nope");
  bool kept = false;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) kept |= e.path().string().ends_with(".failed.cu");
  EXPECT_TRUE(kept);
}

// weights_plain, ln_weights_early and mlp_async (REPORT 7m): under PDL no const pointer keeps
// __restrict__ (the weights' loads coherent, so that ptxas keeps them above the wait); every
// layernorm prologue's gain and bias are loaded into registers (wreg) before the wait and read
// there after it; the MLP kernel's cluster form pushes fc2's partials with st.async counted on
// the receiving CTA's mbarrier (initialised before the cluster's arrive, waited on before pq is
// read), with no whole cluster barrier. Each source compiles with NVRTC for sm_90a.
TEST(CompileCudaNvrtc, WeightsPlainLayerNormWeightsEarlyAndAsyncPushCompile) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const ModelConfig tiny = compile_tiny_config();
  for (const Graph& g : {capture_gpt(tiny, 3, 5), capture_gpt_decode(tiny), capture_gpt(shipped, 2, 16)}) {
    // 0 clusters with st.async; 1 the block form, 1-row tiles; 2 the MLP apart; 3 clusters of 8-row tiles
    // (the shipped model's 8 x 64 outputs: two per thread)
    for (int form = 0; form < 4; ++form) {
      CudaCodegenOptions cg;
      cg.generated_gemm = true;
      cg.pdl = true;
      cg.weights_plain = cg.ln_weights_early = true;
      cg.mlp_async = form == 0 || form == 3;
      cg.mlp_cluster = form != 1;
      cg.mlp_rows = form == 1 ? 1 : form == 3 ? 8 : 4;
      cg.fuse_mlp = form != 2;
      const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
      const std::string what = fmt::format("{} form {}", g.name, form);
      for (const CudaLaunch& launch : l.code.launches) {
        const std::vector<std::string> params = kernel_params(l.code.source, launch.function);
        ASSERT_EQ(params.size(), launch.args.size()) << what << " " << launch.function;
        for (size_t i = 0; i < params.size(); ++i) {
          if (launch.args[i] >= 0 && contains(params[i], "const ")) {  // (a null pointer keeps it: nothing is read)
            EXPECT_FALSE(contains(params[i], "__restrict__")) << what << " " << launch.function << ": " << params[i];
          }
        }
      }
      int lns = 0, mlps = 0;
      for (const CudaKernelText& k : l.code.kernels) {
        if (!contains(k.text, "__global__")) continue;
        const std::string code = code_only(k.text);
        const size_t wait = code.find("griddepcontrol.wait;");
        if (contains(code, "prologue: warp w computes row") || contains(k.text, "prologue: warp w computes row")) {
          ++lns;
          ASSERT_NE(wait, std::string::npos) << what << " " << k.name;
          EXPECT_LT(code.find("wreg"), wait) << what << " " << k.name << ": the gain and bias loaded before the wait";
          EXPECT_GE(count_of(code.substr(wait), "wreg"), 2u) << what << " " << k.name << ": and read from registers after it";
        }
        if ((form == 0 || form == 3) && contains(k.name, "mlp")) {
          ++mlps;
          EXPECT_FALSE(contains(k.text, "not in clusters")) << what;
          if (form == 3) {  // fc2's partials: two outputs per thread where the tile has 8 x 64 (the shipped model's width)
            EXPECT_EQ(contains(k.text, "// the thread's outputs (i, m) = ((t + 256 q) / 64, t % 64)"), contains(code, "threadIdx.x % 64"))
                << what;
          }
          EXPECT_TRUE(contains(code, "mg_cluster_st_async(&pq[rank][i][m % ")) << what;
          EXPECT_FALSE(contains(code, "mg_cluster_barrier();")) << what << ": no whole cluster barrier";
          EXPECT_LT(code.find("mg_mbar_init_tx(&pq_bar, "), code.find("mg_cluster_arrive();")) << what;
          EXPECT_LT(code.find("mg_cluster_wait();"), code.find("mg_cluster_st_async(")) << what;
          EXPECT_LT(code.find("mg_cluster_st_async("), code.find("mg_mbar_wait(&pq_bar, 0);")) << what;
          EXPECT_LT(code.find("mg_mbar_wait(&pq_bar, 0);"), code.find("pq[0][i]")) << what;
        }
      }
      EXPECT_GE(lns, 1) << what;
      if (form == 0 || form == 3) {
        EXPECT_GE(mlps, 1) << what;
      }
      ASSERT_NO_THROW(nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << what;
    }
  }
}

#endif  // MINIGPT_HAVE_CUDA_COMPILE

// ---- the rows form (codegen_cuda_rows.h) ----

namespace {
CudaLowered lower_rows(const Graph& g) {
  CudaCodegenOptions cg;
  cg.generated_gemm = true;
  cg.rows = true;
  return lower_cuda(g, PassOptions{}, cg);
}

// the text MINIGPT_CUDA_VARIANT's words ask for ("rows", "rows-plain", ...)
CudaLowered lower_rows_words(const Graph& g, const char* words) {
  CudaCodegenOptions cg;
  cg.generated_gemm = true;
  apply_variant_words(cg, words);
  return lower_cuda(g, PassOptions{}, cg);
}

// The rows tests' nine shapes (the GPU's RowsFormDefaultAndPlainTextsAgreeBitwise runs the same ones):
// the shipped model at (2, 16), (3, 5), (1, 1); the tiny config at (2, 16), (3, 7); d_model 64 with
// V 300 (one head column per thread, some threads none) and V 660 (two chains in some warps); d_model
// 96 / V 200 (a stage whose threads wait on the mbarriers) and d_model 32 / V 1100 (three chains).
struct RowsCase {
  ModelConfig c;
  int64_t B, T;
};
std::vector<RowsCase> rows_cases() {
  ModelConfig shipped, c300, c660, d96, d32;
  shipped.vocab_size = 611;
  c300.vocab_size = 300;
  c660.vocab_size = 660;
  d96.d_model = 96;
  d96.vocab_size = 200;
  d32.d_model = 32;
  d32.vocab_size = 1100;
  const ModelConfig tiny = compile_tiny_config();
  return {{shipped, 2, 16}, {shipped, 3, 5}, {shipped, 1, 1}, {tiny, 2, 16}, {tiny, 3, 7},
          {c300, 2, 16},    {c660, 3, 5},    {d96, 2, 16},    {d32, 3, 5}};
}
}  // namespace

TEST(CompileCudaRows, AnalysisTakesTheForwardAndRefusesWhatIsNotRowLocal) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const RowsPlan p = plan_rows(capture_gpt(shipped, 2, 16));
  ASSERT_EQ(p.refused, "");
  EXPECT_EQ(p.B, 2);
  EXPECT_EQ(p.T, 16);
  EXPECT_EQ(p.attentions, shipped.n_layer);
  // per layer: ln1, qkv, attention, proj, ln2, fc1, fc2; the embedding, ln_f, lm_head, softmax
  ASSERT_EQ(p.stages.size(), static_cast<size_t>(7 * shipped.n_layer + 4));
  EXPECT_EQ(p.stages[0].kind, RowsStage::Kind::Pointwise);
  EXPECT_EQ(p.stages[0].nodes.size(), 3u) << "wte[id] + wpe[t]: the gathers inlined into the add";
  int kv = 0, pieces = 0;
  for (const RowsStage& s : p.stages) {
    if (s.kind != RowsStage::Kind::Matmul) continue;
    EXPECT_EQ(s.first_piece, pieces) << "pieces in consumption order";
    pieces += s.pieces;
    kv += s.kv;
    EXPECT_EQ(s.slices, s.M == 64 ? 4 : 1) << "proj and fc2: 4 k-slices, as the hand-written kernel";
  }
  EXPECT_EQ(kv, shipped.n_layer);
  EXPECT_EQ(pieces, 12 * shipped.n_layer + 10) << "the hand-written kernel's 12 pieces per layer and 10 of lm_head";
  // the decode step (a KV cache, a runtime position) is not row-local
  const RowsPlan d = plan_rows(capture_gpt_decode(shipped));
  EXPECT_NE(d.refused, "");
  EXPECT_TRUE(contains(d.refused, "node %")) << d.refused;
  // more rows than a cluster holds
  const RowsPlan longer = plan_rows(capture_gpt(shipped, 1, 17));
  EXPECT_TRUE(contains(longer.refused, "T = 17")) << longer.refused;
  // the analysis itself: an attention from a later position is not the causal attention over a
  // whole sequence, nor is a matmul of a weight by a weight row-local
  Graph g = fuse_attention(capture_gpt(shipped, 2, 4));
  int64_t B = 0, T = 0;
  EXPECT_EQ(row_local_refusal(matmul_epilogue(g), B, T), "");
  for (Node& n : g.nodes)
    if (n.op == Op::Attention) n.offset = 3;
  EXPECT_TRUE(contains(row_local_refusal(g, B, T), "an attention from position 3")) << row_local_refusal(g, B, T);
  // the fallback: lower_cuda says why and generates the other form
  const CudaLowered l = lower_rows(capture_gpt_decode(shipped));
  EXPECT_TRUE(contains(l.note, "rows form refused")) << l.note;
  EXPECT_GT(l.code.launches.size(), 1u);
}

TEST(CompileCudaRows, ShippedModelIsOneKernelOfGeneratedStages) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const Graph g = capture_gpt(shipped, 2, 16);
  const CudaLowered l = lower_rows(g);
  const std::string& src = l.code.source;
  ASSERT_EQ(l.code.launches.size(), 1u);
  const CudaLaunch& k = l.code.launches[0];
  EXPECT_EQ(k.function, "cuda_rows_forward");
  EXPECT_EQ(k.grid, 32);
  EXPECT_EQ(k.cluster_dim, 16);
  EXPECT_EQ(k.block, kRowsThreads);
  EXPECT_LE(k.smem, kRowsSmemBudget);
  EXPECT_EQ(k.args.back(), kCudaImageArg);
  EXPECT_EQ(count_of(src, "__global__"), 1u);
  EXPECT_EQ(l.schedule.kernels.size(), 1u);
  // every stage commented with its sources, in order; every matmul streams its pieces
  for (int s = 0; s < 7 * shipped.n_layer + 4; ++s) EXPECT_TRUE(contains(src, fmt::format("  // stage {}: ", s))) << s;
  EXPECT_TRUE(contains(src, "blocks.3.mlp.fc2")) << "a stage names its source op";
  EXPECT_EQ(count_of(code_only(src), "rw_refill<"), static_cast<size_t>(3 * shipped.n_layer + 1))
      << "after every matmul stage but the deferred ones (proj's pieces refilled after the attention stage, fc2's after fc1's)";
  EXPECT_EQ(count_of(code_only(src), "rw_kv_wait(&bars[kBarKv]"), static_cast<size_t>(shipped.n_layer));
  EXPECT_EQ(count_of(code_only(src), "  rw_cluster_arrive();"), static_cast<size_t>(shipped.n_layer)) << "the start's and one per layer but the last";
  EXPECT_EQ(count_of(code_only(src), "rw_layernorm<64>"), 1u) << "ln1 of layer 0 (after the embedding)";
  EXPECT_EQ(count_of(code_only(src), "rw_layernorm_parts<64, "), static_cast<size_t>(2 * shipped.n_layer)) << "the rest after a deferred matmul";
  EXPECT_TRUE(contains(src, "rw_gelu(")) << "fc1's GELU epilogue";
  // the image: the small vectors then 58 pieces, each row padded to K + 4
  EXPECT_EQ(count_of(src, "__constant__ int rw_piece_off[59]"), 1u);
  int64_t weights = 0;
  for (const CudaImageCopy& c : l.code.image) weights += c.rows * c.cols;
  int64_t expect = 0;
  for (int t : l.schedule.graph.weights) {
    const std::string& n = l.schedule.graph.tensor(t).name;
    if (n != "wte.weight" && n != "wpe.weight") expect += l.schedule.graph.tensor(t).numel();
  }
  EXPECT_EQ(weights, expect) << "every weight but the gathers' tables once in the image";
  // packing puts a weight's row where the piece says
  const CudaImageCopy& last = l.code.image.back();
  std::vector<float> lm(static_cast<size_t>(l.schedule.graph.tensor(last.tensor).numel()));
  for (size_t i = 0; i < lm.size(); ++i) lm[i] = static_cast<float>(i);
  const std::vector<float> img = pack_rows_image(l.code, [&](int) { return lm.data(); });
  ASSERT_EQ(static_cast<int64_t>(img.size()), l.code.image_floats);
  EXPECT_EQ(img[static_cast<size_t>(last.dst + last.dst_ld + 5)], static_cast<float>((last.src_row0 + 1) * last.cols + 5));
  EXPECT_EQ(img[static_cast<size_t>(last.dst + last.cols)], 0.0f) << "padding zero";
}

// The default text carries the hand-written kernel's measured variants (gpt_mega_rows.cu's kVar
// comments, codegen_cuda_rows.h), so that none is lost silently; rows-plain (CudaCodegenOptions::
// rows_plain) is the text before them, with none of them. Per form: the LayerNorm's gain and bias
// loaded with the row (kVarLnHoist), the attention's max by redux.sync, its sum's butterfly over 16
// lanes and its key loop unrolled to T keys (kVarRedux, kVarKeys), rw_dot's k loop fully unrolled
// for K <= 64, and every matmul stage's pieces waited for by the last warp before the barrier that
// precedes it (rw_prewait), read without a wait or a division (rw_slot; the refills likewise).
TEST(CompileCudaRows, DefaultTextCarriesTheHandWrittenKernelsVariantsAndPlainNone) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const int L = shipped.n_layer;
  // the matmul stages reading their pieces: qkv, the attention (proj's, deferred into it), fc1 (with
  // fc2's, deferred into it) per layer, and lm_head
  const size_t matmuls = static_cast<size_t>(3 * L + 1);
  CudaCodegenOptions plain_cg;
  apply_variant_words(plain_cg, "rows-plain");
  ASSERT_TRUE(plain_cg.rows && plain_cg.rows_plain) << "the word selects the rows form's plain text";
  plain_cg.generated_gemm = true;
  const Graph g = capture_gpt(shipped, 2, 16);
  const std::string src = lower_rows(g).code.source, code = code_only(src);
  const CudaLowered pl = lower_cuda(g, PassOptions{}, plain_cg);
  ASSERT_EQ(pl.code.launches.size(), 1u) << pl.note;
  const std::string plain = pl.code.source, plain_code = code_only(plain);
  // the same layout but for the deferred matmuls' partials (and their reads living to the LayerNorm)
  EXPECT_LT(pl.code.launches[0].smem, lower_rows(g).code.launches[0].smem);
  // LayerNorm: w, b loaded with the row (rw_lds1: the default's statistics, kLnGather); the output from registers
  EXPECT_TRUE(contains(code, "wv[e] = rw_lds1(w + sub + 16 * e);"));
  EXPECT_TRUE(contains(code, "bv[e] = rw_lds1(b + sub + 16 * e);"));
  EXPECT_TRUE(contains(code, "* rstd * wv[e] + bv[e];"));
  EXPECT_FALSE(contains(code, "rstd * w[sub + 16 * e]"));
  EXPECT_TRUE(contains(plain_code, "rstd * w[sub + 16 * e] + b[sub + 16 * e];"));
  // attention (attention2_text, DefaultAttentionIsAttention2TextAndPlainKeepsItsOwn below): redux max,
  // T = 16 keys unrolled with their v loads at min(k, nk - 1)
  EXPECT_TRUE(contains(code, "__reduce_max_sync(RW_FULL, "));
  EXPECT_EQ(count_of(code, "const float m = rw_warp_max(sc);"), static_cast<size_t>(L));
  EXPECT_EQ(count_of(code, "for (int k = 0; k < 16; ++k) {"), static_cast<size_t>(L));
  EXPECT_EQ(count_of(code, "+ min(k, nk - 1) * "), static_cast<size_t>(L));
  EXPECT_EQ(count_of(code, "if (k < nk) {"), static_cast<size_t>(L));
  EXPECT_FALSE(contains(code, "for (int k = 0; k < nk; ++k)")) << "no runtime trip count";
  EXPECT_EQ(count_of(code, "mx = rw_warp_max(mx);"), 1u) << "the vocabulary softmax's warp max";
  // rw_dot: the k loop fully unrolled for K <= 64
  EXPECT_TRUE(contains(code, "constexpr int kUnroll = K <= 64 ? K / 4 : 4;"));
  EXPECT_TRUE(contains(code, "#pragma unroll kUnroll\n  for (int k = 0; k < K; k += 4)"));
  // prewait: every matmul stage's pieces but the head's, by the last warp, right before the barrier
  // preceding it; its threads read the slots without a wait (no rw_piece call left) and refill without
  // a division. The head's (lm_head's) pieces are waited for by each thread before each of its chains
  // (rw_piece_at: codegen_cuda_rows.h "The head's waits")
  EXPECT_EQ(count_of(code, "  rw_prewait<"), matmuls - 1);
  const std::regex prewait_then_barrier(R"(  rw_prewait<\d+, \d+>\(bars\);\s*\n  __syncthreads\(\);\n)");
  EXPECT_EQ(static_cast<size_t>(std::distance(std::sregex_iterator(code.begin(), code.end(), prewait_then_barrier), std::sregex_iterator())), matmuls - 1)
      << "each right before a CTA barrier";
  // ... and each waits for the pieces the stage after that barrier reads: its A is the next rw_slot<A>'s
  const std::regex prewait_a(R"(  rw_prewait<(\d+), \d+>\(bars\);\s*\n  __syncthreads\(\);\n)");
  size_t paired = 0;
  for (auto it = std::sregex_iterator(code.begin(), code.end(), prewait_a); it != std::sregex_iterator(); ++it) {
    const size_t after = static_cast<size_t>(it->position(0) + it->length(0));
    const size_t slot = code.find("rw_slot<", after), next = code.find("rw_prewait<", after);
    ASSERT_NE(slot, std::string::npos) << it->str(0);
    EXPECT_LT(slot, next) << it->str(0) << ": no stage reads its slots before the next prewait";
    const std::string want = fmt::format("rw_slot<{}>(", (*it)[1].str());
    EXPECT_EQ(code.compare(slot, want.size(), want), 0)
        << it->str(0) << " then " << code.substr(slot, 20);
    ++paired;
  }
  EXPECT_EQ(paired, matmuls - 1);
  EXPECT_EQ(count_of(code, "rw_piece(ring, bars, "), 0u);
  EXPECT_EQ(count_of(code, "rw_piece_at<48>(ring, bars, "), 2u) << "lm_head's two columns per thread, each waited for before its chain";
  EXPECT_FALSE(contains(code, "rw_prewait<48, 58>(bars);")) << "lm_head's 10 pieces not prewaited";
  EXPECT_TRUE(contains(src, "// (stage 30's pieces not prewaited: its threads wait for their own chains' pieces)\n  __syncthreads();"));
  EXPECT_EQ(count_of(code, "rw_refill<"), matmuls);
  // the head: lm_head's chains by warp (kVarLmOne: warps 0..3 hold a second column, warp 3's lanes
  // columns 608..639 so 608..610; warps 4..15 none: one chain), and the softmax fused into its stage
  // (the logits in registers: never in shared memory, one CTA barrier fewer); the two-chain warps run
  // their chains one after the other, each after its own piece's wait
  EXPECT_EQ(count_of(code, "    if (warp < 4) {  \n      { float a1[1]; rw_dot<64, 1>(sm + "), 1u);
  EXPECT_EQ(count_of(code, "    } else {  \n      float a1[1];\n      rw_dot<64, 1>(sm + "), 1u);
  EXPECT_EQ(count_of(code, "rw_dot<64, 1>("), count_of(plain_code, "rw_dot<64, 1>(") + 3) << "lm_head's chains, one rw_dot each";
  EXPECT_TRUE(contains(code, "logits[row * 611 + n] = v; lg[0] = v; mx = fmaxf(mx, v);"));
  EXPECT_TRUE(contains(code, "logits[row * 611 + n] = v; lg[1] = v; mx = fmaxf(mx, v);"));
  EXPECT_TRUE(contains(code, "ev[j] = tid + j * 512 < 611 ? expf(lg[j] - mx) : 0.0f; sum += ev[j];"));
  EXPECT_TRUE(contains(src, "softmax over (1, 611) -> 'probs'; 2444 FLOPs per row; source: probs (cpu::softmax): fused into stage"));
  EXPECT_FALSE(contains(code, "const float* in = sm + ")) << "no softmax stage reading the logits back";
  const std::regex logits_smem(R"(sm\[\d+ \+ n\] = v; logits\[)");
  EXPECT_FALSE(std::regex_search(code, logits_smem)) << "the logits not written to shared memory";
  EXPECT_TRUE(std::regex_search(plain_code, logits_smem));
  // the fused softmax's CTA barrier and the deferred matmuls' (proj and fc2 per layer: 2 L = 8 fewer
  // than the default text before them, which had the plain text's but one)
  EXPECT_EQ(count_of(plain_code, "__syncthreads();"), count_of(code, "__syncthreads();") + 1 + 2 * static_cast<size_t>(L))
      << "one CTA barrier fewer for the softmax, two per layer for the deferred matmuls";
  // the plain text: none of them
  for (const char* gone : {"__reduce_max_sync", "rw_warp_max", "rw_prewait", "rw_slot", "rw_refill<", "min(k, nk - 1)", "kUnroll", "wv[e]", "float a1[1];",
                           "lg[j]", "fused into stage"})
    EXPECT_FALSE(contains(plain_code, gone)) << gone;
  EXPECT_TRUE(contains(plain_code, "#pragma unroll 4\n  for (int k = 0; k < K; k += 4)"));
  EXPECT_EQ(count_of(plain_code, "rw_refill(ring, bars, rw_image, "), static_cast<size_t>(4 * L + 1)) << "every matmul stage's (none deferred)";
  EXPECT_EQ(count_of(plain_code, "for (int k = 0; k < nk; ++k)"), static_cast<size_t>(L));
  // rw_piece (a slot by a division and a wait) only in the plain text (the default's rw_slot, rw_piece_at)
  EXPECT_TRUE(contains(plain_code, "const float* rw_piece(float* ring"));
  EXPECT_FALSE(contains(code, "rw_piece("));
  // the plain text pinned: the A/B baseline (rows-plain, the text before the default's changes) at
  // the shipped (2, 16) cannot drift; a deliberate change to it updates this hash and says why
  EXPECT_EQ(sha256_hex(plain), "6f93d857691bd48e00f0c426ccfb0348007d2fb8cf79993280c04a9ee14e7340")
      << "rows-plain's text at the shipped (2, 16) changed";
}

// The default text's attention stages (attention2_text; the previous default body, removed, measured
// slower: codegen_cuda_rows.h): every key's v row loaded by rw_lds4 before the scores, the k rows too
// (no branch), the exps gathered by W shuffles and summed in the butterfly's order written out
// (T = 16: offsets 8, 4, 2, 1; T = 5: 4, 2, 1; T = 1: the one exp), the probabilities
// ek[k] * (1.0f / sum); the plain text keeps its own attention (the butterflies from offset 16, the
// key loop to nk) and has none of it.
TEST(CompileCudaRows, DefaultAttentionIsAttention2TextAndPlainKeepsItsOwn) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  auto lower = [](const Graph& g, bool plain) {
    CudaCodegenOptions cg;
    cg.rows = true;
    cg.rows_plain = plain;
    return lower_cuda(g, PassOptions{}, cg);
  };
  const int L = 4;  // the shipped model's layers
  for (const Graph& g : {capture_gpt(shipped, 2, 16), capture_gpt(shipped, 3, 5), capture_gpt(shipped, 1, 1), capture_gpt(compile_tiny_config(), 2, 16)}) {
    const CudaLowered d = lower(g, false), pl = lower(g, true);
    const size_t A = static_cast<size_t>(plan_rows(g).attentions);
    ASSERT_EQ(d.code.launches.size(), 1u) << d.note;
    ASSERT_EQ(pl.code.launches.size(), 1u) << pl.note;
    const std::string code = code_only(d.code.source), plain_code = code_only(pl.code.source);
    EXPECT_EQ(count_of(code, "vv[k] = rw_lds4(sm + "), A) << g.name;
    EXPECT_EQ(count_of(code, "kr[i] = rw_lds4(sm + "), A) << g.name;
    EXPECT_FALSE(contains(code, "rw_dot_qk")) << g.name << ": the scores' FMAs written out (no rw_dot_qk, not even its prelude)";
    EXPECT_TRUE(contains(plain_code, "rw_dot_qk<")) << g.name;
    EXPECT_EQ(count_of(code, "const float pk = ek[k] * rs;"), A) << g.name;
    EXPECT_EQ(count_of(code, "__shfl_xor_sync(RW_FULL, sum"), 1u) << g.name << ": the vocabulary softmax's butterfly only";
    EXPECT_EQ(count_of(code, "    const float m = rw_warp_max(sc);"), A) << g.name;
    EXPECT_FALSE(contains(plain_code, "rw_lds4")) << g.name;
    EXPECT_FALSE(contains(plain_code, "ek[")) << g.name;
    EXPECT_EQ(count_of(plain_code, "for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(RW_FULL, sum, off);"), A + 1) << g.name << ": and the vocabulary softmax's";
    EXPECT_EQ(count_of(plain_code, "for (int k = 0; k < nk; ++k) {"), A) << g.name;
  }
  const std::string t16 = code_only(lower(capture_gpt(shipped, 2, 16), false).code.source);
  EXPECT_EQ(count_of(t16, "    const float rs = 1.0f / ((((ek[0] + ek[8]) + (ek[4] + ek[12])) + ((ek[2] + ek[10]) + (ek[6] + ek[14]))) + "
                          "(((ek[1] + ek[9]) + (ek[5] + ek[13])) + ((ek[3] + ek[11]) + (ek[7] + ek[15]))));\n"),
            static_cast<size_t>(L));
  EXPECT_EQ(count_of(t16, "for (int k = 0; k < 16; ++k) ek[k] = __shfl_sync(RW_FULL, ex, k);"), static_cast<size_t>(L));
  const std::string t5 = code_only(lower(capture_gpt(shipped, 3, 5), false).code.source);
  EXPECT_EQ(count_of(t5, "    const float rs = 1.0f / (((ek[0] + ek[4]) + (ek[2] + ek[6])) + ((ek[1] + ek[5]) + (ek[3] + ek[7])));\n"),
            static_cast<size_t>(L));
  EXPECT_EQ(count_of(t5, "for (int k = 0; k < 5; ++k) {"), static_cast<size_t>(L));
  const std::string t1 = code_only(lower(capture_gpt(shipped, 1, 1), false).code.source);
  EXPECT_EQ(count_of(t1, "    const float rs = 1.0f / ek[0];\n"), static_cast<size_t>(L));
}

// The default text's head at other vocabularies (d_model 64): V = 300 (one column per thread, no
// k-slices: the softmax fused, no chains to split; warp 9 partly, 10..15 wholly without a column),
// V = 660 (warps 0..4 two chains: warp 4 holds columns 640..671, 640..659 its second ones; warps
// 5..15 one), the tiny model's V = 50 (lm_head in k-slices: neither, the softmax its own stage).
// d_model 96, V = 200: a stage whose pieces' copies are not all in flight at the barrier before it
// (its threads wait themselves: rw_piece_at); d_model 32, V = 1100: three chains in warps 0..2, two
// in warps 3..15 (the last branch a plain else). Each text compiles for sm_90a (NVRTC, where built with it).
TEST(CompileCudaRows, HeadSplitsItsChainsByWarpAndFusesTheSoftmax) {
  ModelConfig v300, v660;
  v300.vocab_size = 300;
  v660.vocab_size = 660;
  const std::string a = lower_rows(capture_gpt(v300, 2, 16)).code.source, ac = code_only(a);
  EXPECT_TRUE(contains(ac, "  if (tid < 300) {\n    const float* w0 = rw_slot<"));
  EXPECT_TRUE(contains(ac, "logits[row * 300 + n] = v; lg[0] = v; mx = fmaxf(mx, v);"));
  EXPECT_TRUE(contains(ac, "ev[j] = tid + j * 512 < 300 ? expf(lg[j] - mx) : 0.0f;"));
  EXPECT_FALSE(contains(ac, "float a1[1];")) << "one chain per thread: nothing to split";
  EXPECT_FALSE(contains(ac, "const float* in = sm + "));
  const std::string b = lower_rows(capture_gpt(v660, 2, 16)).code.source, bc = code_only(b);
  EXPECT_EQ(count_of(bc, "    if (warp < 5) {  \n      { float a1[1]; rw_dot<64, 1>(sm + "), 1u) << "two chains, one after the other";
  EXPECT_TRUE(contains(b, "} else {  // warps 5..15: 1 chain\n      float a1[1];\n      rw_dot<64, 1>(sm + "));
  EXPECT_TRUE(contains(bc, "logits[row * 660 + n] = v; lg[1] = v; mx = fmaxf(mx, v);"));
  EXPECT_FALSE(contains(bc, "const float* in = sm + "));
  const std::string t = code_only(lower_rows(capture_gpt(compile_tiny_config(), 2, 16)).code.source);
  EXPECT_TRUE(contains(t, "const float* in = sm + ")) << "lm_head in k-slices: the softmax its own stage";
  EXPECT_FALSE(contains(t, "lg[j]"));
  ModelConfig d96, d32;
  d96.d_model = 96;
  d96.vocab_size = 200;
  d32.d_model = 32;
  d32.vocab_size = 1100;
  const CudaLowered l96 = lower_rows(capture_gpt(d96, 2, 16)), l32 = lower_rows(capture_gpt(d32, 2, 16));
  ASSERT_EQ(l96.code.launches.size(), 1u) << l96.note;
  ASSERT_EQ(l32.code.launches.size(), 1u) << l32.note;
  const std::string& c96 = l96.code.source;
  const std::string& c32 = l32.code.source;
  EXPECT_TRUE(contains(code_only(c96), "rw_piece_at<")) << "a stage whose threads wait on the mbarriers";
  EXPECT_TRUE(contains(c32, "    if (warp < 3) {  // warps 0..2: 3 chains\n      { float a1[1]; rw_dot<32, 1>(sm + ")) << "three chains, one after the other";
  EXPECT_TRUE(contains(c32, "    } else {  // warps 3..15: 2 chains\n      float a2[2];\n      rw_dot<32, 2>(sm + "));
  EXPECT_FALSE(contains(c32, "} else if (warp < 16)")) << "every warp left: a plain else";
  EXPECT_TRUE(contains(code_only(c32), "lg[2] = v; mx = fmaxf(mx, v);")) << "the softmax fused";
#ifdef MINIGPT_HAVE_CUDA_COMPILE
  for (const std::string* src : {&a, &b, &c96, &c32}) {
    std::string ptx;
    ASSERT_NO_THROW(ptx = nvrtc_compile_ptx(*src, "compute_90a", "head")) << src->substr(0, 80);
    EXPECT_TRUE(contains(ptx, ".entry cuda_rows_forward("));
  }
#endif
}

// The stage trace (CudaCodegenOptions::rows_trace, CudaCompiledGraph::trace_rows): the traced text
// has one clock64 stamp line per stage (after its closing barrier) plus the start's two, and inside
// each attention: in its qkv stage before the k, v wait (the wait its own interval), in the attention
// stage after the scores, the max, the sum and 1/sum, the probabilities times v and the store (thread
// 0: head 0), and (the default text, whose next stage is prewaited) the last warp's lane 0 after its
// prewait; into a __device__ buffer of intervals + 1 stamps, and names the intervals ("stage s: ..");
// the untraced text has no trace text at all and is byte-identical whatever the trace flag's default
// (the timed text unchanged); the traced text's launch (arguments, shared memory, image) is the
// untraced one's. Where the attention's closing barrier prewaits nothing (the default's proj deferred
// into it: its pieces prewaited with the attention's, before it) there is no last warp's stamp.
TEST(CompileCudaRows, TraceStampsEveryStageAndTheUntracedTextHasNone) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  for (const Graph& g : {capture_gpt(shipped, 2, 16), capture_gpt(shipped, 3, 5), capture_gpt(compile_tiny_config(), 2, 16)})
    for (const bool plain : {false, true}) {  // the default, rows-plain
      CudaCodegenOptions cg;
      cg.rows = true;
      cg.rows_plain = plain;
      const CudaLowered l = lower_cuda(g, PassOptions{}, cg);
      ASSERT_EQ(l.code.launches.size(), 1u) << l.note;
      const RowsPlan p = plan_rows(g);
      ASSERT_EQ(p.refused, "");
      Schedule sched;
      EXPECT_EQ(generate_rows(p, sched, plain, false).source, l.code.source) << g.name << ": the timed text, trace off";
      EXPECT_FALSE(contains(l.code.source, "rw_trace")) << g.name;
      EXPECT_FALSE(contains(l.code.source, "clock64")) << g.name;
      EXPECT_TRUE(l.code.trace_stages.empty());
      cg.rows_trace = true;
      const CudaLowered t = lower_cuda(g, PassOptions{}, cg);
      ASSERT_EQ(t.code.launches.size(), 1u) << t.note;
      const size_t S = p.stages.size();
      const size_t A = static_cast<size_t>(p.attentions);
      const std::string code = code_only(t.code.source);
      // the intervals: the start, every stage, per attention its k, v wait, 5 steps of thread 0 and
      // (not the plain text: it prewaits nothing; nor before a deferred proj) the last warp's prewait
      const size_t by_heads = count_of(l.code.source, "deferred (by heads)");
      if (plain) {
        EXPECT_EQ(by_heads, 0u);
      }
      const size_t P = plain ? 0 : A - by_heads;
      const size_t N = S + 1 + A * (1 + 5) + P;
      ASSERT_EQ(t.code.trace_stages.size(), N) << g.name;
      EXPECT_EQ(count_of(code, "if (rw_tracer) rw_trace["), N - P) << g.name << ": the start's end, every stage, the steps";
      EXPECT_EQ(count_of(code, "if (rw_tracer_last) rw_trace["), P) << g.name << ": the last warp's prewait";
      // each last warp's stamp right after a prewait, before the barrier
      const std::regex prewait_stamp(R"(  rw_prewait<\d+, \d+>\(bars\);[^\n]*\n  if \(rw_tracer_last\) rw_trace\[)");
      EXPECT_EQ(static_cast<size_t>(std::distance(std::sregex_iterator(code.begin(), code.end(), prewait_stamp), std::sregex_iterator())), P) << g.name;
      EXPECT_EQ(count_of(code, "rw_trace[0] = clock64();"), 1u) << g.name << ": the kernel's start";
      EXPECT_EQ(count_of(code, "= clock64();"), N + 1) << g.name;
      EXPECT_EQ(count_of(t.code.source, "= clock64();  // trace: stage "), N - 1) << g.name << ": one line each, with a comment";
      EXPECT_EQ(count_of(t.code.source, ", before the k, v wait\n"), A) << g.name;
      for (size_t i = 1; i <= N; ++i)
        EXPECT_EQ(count_of(code, fmt::format(" rw_trace[{}] = clock64();", i)), 1u) << g.name << " stamp " << i;
      for (size_t s = 0; s < S; ++s)
        EXPECT_EQ(count_of(t.code.source, fmt::format("= clock64();  // trace: stage {} (", s)), 1u) << g.name << " stage " << s << "'s own stamp";
      EXPECT_TRUE(contains(code, fmt::format("__device__ long long rw_trace[{}];", N + 1))) << g.name;
      EXPECT_EQ(count_of(code, "rw_globaltimer();"), 2u) << g.name;
      EXPECT_TRUE(contains(code, "const bool rw_tracer = tid == 0 && blockIdx.x == kT - 1;")) << g.name;
      EXPECT_TRUE(contains(code, "const bool rw_tracer_last = tid == 480 && blockIdx.x == kT - 1;")) << g.name;
      // the stamp after the last stage is the kernel's last statement but the end's %globaltimer
      const std::string& last = t.code.trace_stages.back();
      EXPECT_TRUE(contains(t.code.source, fmt::format("  if (rw_tracer) rw_trace[{}] = clock64();  // trace: stage {} ({}) done\n"
                                                      "  if (rw_tracer) rw_trace_ns[1] = rw_globaltimer();  // trace: the end\n}}\n",
                                                      N, S - 1, last.substr(last.find(": ") + 2))))
          << g.name;
      EXPECT_EQ(t.code.trace_stages[0], "start");
      for (size_t i = 1; i < N; ++i) EXPECT_TRUE(t.code.trace_stages[i].starts_with("stage ")) << t.code.trace_stages[i];
      EXPECT_EQ(t.code.launches[0].args, l.code.launches[0].args);
      EXPECT_EQ(t.code.launches[0].smem, l.code.launches[0].smem);
      EXPECT_EQ(t.code.image_floats, l.code.image_floats);
      if (g.nodes.size() == capture_gpt(shipped, 2, 16).nodes.size()) {
        const std::vector<std::string>& n = t.code.trace_stages;
        EXPECT_EQ(n[3], "stage 2: matmul -> blocks.0.attn.qkv.out (to the k, v wait)");
        EXPECT_EQ(n[4], "stage 2: matmul -> blocks.0.attn.qkv.out: the k, v wait (rw_kv_wait)");
        EXPECT_EQ(by_heads, plain ? 0u : 4u) << "proj deferred in every layer";
        EXPECT_EQ(n[5], !plain ? "stage 3: attention: q.k scores (warp 0 = head 0; the v loads issued)" : "stage 3: attention: q.k scores (warp 0 = head 0)");
        EXPECT_EQ(n[6], plain ? "stage 3: attention: max (butterfly)" : "stage 3: attention: max (redux.sync)");
        EXPECT_EQ(n[7], !plain ? "stage 3: attention: exp, sum, 1/sum (the gather)" : "stage 3: attention: exp, sum, 1/sum");
        EXPECT_EQ(n[8], "stage 3: attention: probabilities x v");
        EXPECT_EQ(n[9], "stage 3: attention: att stored");
        // (the default: proj deferred into the attention stage, no prewait at its barrier)
        EXPECT_EQ(n[10], plain ? "stage 3: attention -> blocks.0.attn.out (the barrier, the cluster arrive)"
                               : "stage 3: attention -> blocks.0.attn.out (stage 4's k-slice by heads, the barrier, the cluster arrive)");
        if (!plain) {
          EXPECT_TRUE(n[11].starts_with("stage 4: matmul -> ") && n[11].ends_with(" (deferred: in stages 3 and 5)")) << n[11];
        }
        // where a stage's work is: stage 0 during the start; the default's softmax in lm_head's stage
        EXPECT_EQ(n[1], "stage 0: embedding pos_embedding add -> embed.out (in the start)");
        EXPECT_EQ(n[N - 2], fmt::format("stage {}: {}", S - 2, plain ? "matmul -> logits" : "matmul softmax -> logits, probs"));
        EXPECT_EQ(n.back(), fmt::format("stage {}: {}", S - 1, plain ? "softmax -> probs" : fmt::format("softmax -> probs (fused into stage {})", S - 2)));
        EXPECT_EQ(contains(t.code.source, fmt::format("//   stage {}: softmax   softmax -> probs (1, 611) (fused into stage {})\n", S - 1, S - 2)), !plain);
      }
      // without the trace's lines, the traced text is the timed one
      std::string stripped, line;
      std::istringstream in(t.code.source);
      bool in_decl = false;
      while (std::getline(in, line)) {
        if (line.starts_with("// ---- the stage trace")) in_decl = true;
        if (in_decl) {
          if (line == "}") in_decl = false;
          continue;
        }
        if (contains(line, "rw_tracer")) continue;
        stripped += line + "\n";
      }
      EXPECT_EQ(stripped, l.code.source) << g.name << (plain ? " plain" : "");
    }
}

// A graph the analysis takes must also fit the generator's shared memory: a model whose fc1 needs
// 16 pieces (d_model 128) or whose lm_head does (vocabulary 1000) has more pieces in one stage than
// ring slots fit, and is refused by plan_rows with the reason (not thrown by generate_rows), so that
// the default mode falls back to the other forms.
TEST(CompileCudaRows, StagesLargerThanTheRingAreRefusedByTheAnalysis) {
  ModelConfig wide;
  wide.vocab_size = 611;
  wide.d_model = 128;
  const RowsPlan w = plan_rows(capture_gpt(wide, 2, 16));
  EXPECT_TRUE(contains(w.refused, "ring slots")) << w.refused;
  EXPECT_TRUE(w.stages.empty());
  ModelConfig big_vocab;
  big_vocab.vocab_size = 1000;
  const RowsPlan v = plan_rows(capture_gpt(big_vocab, 2, 16));
  EXPECT_TRUE(contains(v.refused, "ring slots")) << v.refused;
  // the fallback: lower_cuda generates the other form and says why
  const CudaLowered l = lower_rows(capture_gpt(big_vocab, 2, 16));
  EXPECT_TRUE(contains(l.note, "rows form refused")) << l.note;
  EXPECT_GT(l.code.launches.size(), 1u);
  // the shipped model still fits
  ModelConfig shipped;
  shipped.vocab_size = 611;
  EXPECT_EQ(plan_rows(capture_gpt(shipped, 2, 16)).refused, "");
}

// A stage reading one tensor twice (y = x + x W^T: after matmul_epilogue the residual is the
// matmul's own input; z = x * x) frees its shared-memory row once: RowAlloc::give checks that a
// block is not freed twice, so a duplicate would throw here.
TEST(CompileCudaRows, AStageReadingATensorTwiceFreesItOnce) {
  for (int form : {0, 1}) {
    GraphBuilder b(form == 0 ? "residual_of_own_input" : "square");
    const int ids = b.input("ids", {4}, DType::I32);
    const int wte = b.weight("wte.weight", {50, 64});
    const int x = b.embedding(ids, wte, "x", "wte");
    int y = -1;
    if (form == 0) {
      const int W = b.weight("fc.weight", {64, 64});
      const int bias = b.weight("fc.bias", {64});
      y = b.binary(Op::Add, x, b.linear(x, W, bias, "fc", "fc"), "y", "x + fc(x)");
    } else {
      y = b.binary(Op::Mul, x, x, "y", "x * x");
    }
    b.output(b.softmax(y, "p", "softmax"), "p");
    const Graph g = b.finish();
    const RowsPlan p = plan_rows(g);
    ASSERT_EQ(p.refused, "") << g.name;
    Schedule s;
    CudaCode code;
    ASSERT_NO_THROW(code = generate_rows(p, s)) << g.name;
    EXPECT_EQ(count_of(code.source, "__global__"), 1u) << g.name;
  }
}

// Shapes and uses the generator does not handle are refused with the check that failed named.
TEST(CompileCudaRows, UnhandledShapesAreRefusedWithTheReason) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  // a layernorm whose output is only a graph output
  {
    GraphBuilder b("ln_out");
    const int ids = b.input("ids", {4}, DType::I32);
    const int x = b.embedding(ids, b.weight("wte.weight", {50, 64}), "x", "wte");
    b.output(b.layernorm(x, b.weight("ln.weight", {64}), b.weight("ln.bias", {64}), 1e-5f, "ln", "ln"), "ln");
    const RowsPlan p = plan_rows(b.finish());
    EXPECT_TRUE(contains(p.refused, "graph output")) << p.refused;
  }
  // attention heads of more than 128 columns
  ModelConfig one_head;
  one_head.vocab_size = 50;
  one_head.d_model = 256;
  one_head.n_head = 1;
  one_head.n_layer = 1;
  const RowsPlan h = plan_rows(capture_gpt(one_head, 1, 4));
  EXPECT_TRUE(contains(h.refused, "dh = 256")) << h.refused;
}

#ifdef MINIGPT_HAVE_CUDA_COMPILE
TEST(CompileCudaNvrtc, RowsFormCompilesForSm90a) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const ModelConfig tiny = compile_tiny_config();
  const size_t shipped_nodes = capture_gpt(shipped, 2, 16).nodes.size();
  for (const Graph& g : {capture_gpt(shipped, 2, 16), capture_gpt(shipped, 3, 5), capture_gpt(tiny, 2, 16), capture_gpt(shipped, 1, 1)}) {
    const CudaLowered l = lower_rows(g);
    ASSERT_EQ(l.code.launches.size(), 1u) << g.name << ": " << l.note;
    std::string ptx;
    ASSERT_NO_THROW(ptx = nvrtc_compile_ptx(l.code.source, "compute_90a", g.name)) << g.name;
    EXPECT_TRUE(contains(ptx, ".entry cuda_rows_forward(")) << g.name;
    EXPECT_TRUE(contains(ptx, "cp.async.bulk")) << g.name;
    if (g.name != "gpt_B1_T1") {
      EXPECT_TRUE(contains(ptx, "st.async")) << g.name;
    }
    // rows-plain (the text before the hand-written kernel's variants) compiles too; only the
    // default's PTX has the attention's redux.sync max, and it computes no ring slot by a division
    // (a remainder by the constant kNs is a mul.hi in PTX; rw_slot's first pieces are compile-time
    // constants, so only the start's rw_issue(lane) may keep one)
    CudaCodegenOptions plain;
    plain.rows = true;
    plain.rows_plain = true;
    std::string plain_ptx;
    ASSERT_NO_THROW(plain_ptx = nvrtc_compile_ptx(lower_cuda(g, PassOptions{}, plain).code.source, "compute_90a", g.name)) << g.name << " rows-plain";
    EXPECT_TRUE(contains(ptx, "redux.sync.max.s32")) << g.name;
    EXPECT_FALSE(contains(plain_ptx, "redux.sync")) << g.name;
    // the default's attention (attention2_text): its v and k rows by rw_lds4's ld.shared.v4.f32
    EXPECT_TRUE(contains(ptx, "ld.shared.v4.f32")) << g.name;
    // the stage trace's text (rows_trace) compiles: its buffers are module globals, its stamps clock64
    CudaCodegenOptions traced;
    traced.rows = traced.rows_trace = true;
    std::string trace_ptx;
    ASSERT_NO_THROW(trace_ptx = nvrtc_compile_ptx(lower_cuda(g, PassOptions{}, traced).code.source, "compute_90a", g.name)) << g.name << " traced";
    EXPECT_TRUE(contains(trace_ptx, ".global .align 8 .b8 rw_trace[")) << g.name;
    EXPECT_TRUE(contains(trace_ptx, "%globaltimer")) << g.name;
    EXPECT_FALSE(contains(ptx, "%globaltimer")) << g.name;
    if (g.nodes.size() == shipped_nodes) {  // (the tiny model's pieces of 120 rows divide n by 120: not the ring's)
      EXPECT_LE(count_of(ptx, "mul.hi."), 1u) << g.name;
      EXPECT_GT(count_of(plain_ptx, "mul.hi."), 10u) << g.name << ": the plain text's i % kNs, kNs = 11";
    }
  }
}
#endif

// The deferred matmuls (issue 15, fuse15; the default text's, codegen_cuda_rows.h): at the shipped
// (2, 16) proj is computed by heads in the attention stage and fc2 by slices in fc1's stage, the
// LayerNorm after each forming its input from the partials: two CTA barriers fewer per layer, the
// default text pinned, every text compiling at the rows tests' shapes; shapes whose slicing does not
// line up (d_model 96: proj by 2 slices over 4 heads) keep the stage. The plain text defers none.
TEST(CompileCudaRows, DeferredMatmulsDropTwoStagesPerLayer) {
  ModelConfig shipped;
  shipped.vocab_size = 611;
  const size_t L = static_cast<size_t>(shipped.n_layer);
  const Graph g = capture_gpt(shipped, 2, 16);
  const std::string def = lower_rows(g).code.source, plain = lower_rows_words(g, "rows-plain").code.source;
  // the default text pinned (attention2_text's attentions, proj and fc2 deferred, kLnGather's statistics,
  // the head's waits per chain); a deliberate
  // change to it updates this hash and says why
  EXPECT_EQ(sha256_hex(def), "65f9889f982abac6c1570e149831d366fc11fc1c3c3ac912d4ba01f17c04fc1c") << "the default rows text at the shipped (2, 16) changed";
  EXPECT_FALSE(contains(plain, "rw_layernorm_parts"));
  EXPECT_FALSE(contains(plain, "bar.sync"));
  const std::string dc = code_only(def);
  EXPECT_EQ(count_of(dc, "rw_layernorm_parts<64, 4, true, true, "), 2 * L) << "ln2 from proj's partials, ln1 / ln_f from fc2's";
  EXPECT_EQ(count_of(def, "deferred (by heads)"), L);
  EXPECT_EQ(count_of(def, "deferred (by the producing warps' slices)"), L);
  EXPECT_EQ(count_of(dc, "rw_dot<16, 2>(sm + "), L) << "proj's slice per head: 2 outputs per lane";
  EXPECT_EQ(count_of(dc, "asm volatile(\"bar.sync %0, %1;\" ::\"r\"(1 + sl), \"n\"(64)"), L) << "fc2's slices after named barriers";
  EXPECT_EQ(count_of(dc, " + sl * 64, {rw_slot<"), L) << "fc2's partials: a chain of 64 per thread, from a prewaited slot";
  if (const char* d = std::getenv("MINIGPT_ROWS_DUMP")) {  // (a debugging aid: the two texts)
    for (const auto& [nm, t] : {std::pair<const char*, const std::string*>{"default", &def}, {"plain", &plain}})
      std::ofstream(fmt::format("{}/rows_{}.cu", d, nm)) << *t;
  }
  // every piece read from a prewaited slot but the head's (no other stage's threads wait on an mbarrier)
  EXPECT_EQ(count_of(dc, "rw_piece_at<"), count_of(dc, "rw_piece_at<48>(ring, bars, "));
  // the stages' barriers: the plain text's less the fused softmax's and the deferred matmuls'
  EXPECT_EQ(count_of(dc, "__syncthreads();") + 1 + 2 * L, count_of(code_only(plain), "__syncthreads();"));
  // the other shapes: those whose slices line up take it (fewer barriers), the rest keep it; all compile
  for (const RowsCase& k : rows_cases()) {
    const Graph gk = capture_gpt(k.c, k.B, k.T);
    const CudaLowered l = lower_rows(gk), pl = lower_rows_words(gk, "rows-plain");
    const std::string what = fmt::format("d_model {} V {} ({}, {})", k.c.d_model, k.c.vocab_size, k.B, k.T);
    ASSERT_EQ(l.code.launches.size(), 1u) << what << ": " << l.note;
    ASSERT_EQ(pl.code.launches.size(), 1u) << what << ": " << pl.note;
    const size_t nw = count_of(code_only(l.code.source), "__syncthreads();"), np = count_of(code_only(pl.code.source), "__syncthreads();");
    const size_t parts = count_of(code_only(l.code.source), "rw_layernorm_parts<");
    const bool fused = contains(l.code.source, "(fused into stage ");
    EXPECT_EQ(nw + parts + (fused ? 1 : 0), np) << what << ": a CTA barrier fewer per deferred matmul (and the fused softmax's)";
    std::printf("%s: %zu deferred matmuls, %zu CTA barriers (plain %zu), smem %d B\n", what.c_str(), parts, nw, np, l.code.launches[0].smem);
    if (k.c.d_model == 64) {
      EXPECT_EQ(parts, 2 * L) << what;
    }
    if (k.c.d_model == 96) {
      EXPECT_EQ(count_of(l.code.source, "deferred (by heads)"), 0u) << what << ": proj by 2 slices over 4 heads keeps its stage";
    }
#ifdef MINIGPT_HAVE_CUDA_COMPILE
    std::string ptx;
    ASSERT_NO_THROW(ptx = nvrtc_compile_ptx(l.code.source, "compute_90a", gk.name)) << what;
    EXPECT_TRUE(contains(ptx, ".entry cuda_rows_forward(")) << what;
    // the traced text too
    CudaCodegenOptions traced;
    traced.generated_gemm = true;
    traced.rows = traced.rows_trace = true;
    ASSERT_NO_THROW(nvrtc_compile_ptx(lower_cuda(gk, PassOptions{}, traced).code.source, "compute_90a", gk.name)) << what << " traced";
#endif
  }
}

// The head's waits (issue 15, head15; codegen_cuda_rows.h "The head's waits"; measured as the word
// rows-headw in gpu_head15/call1): in the default text the head (lm_head, more outputs than threads)
// is not prewaited before its barrier; each thread waits for its own chains' pieces (rw_piece_at) right
// before each chain. Per shape of the rows tests: where there is such a head, the barrier before it
// says so, no rw_prewait covers the head's pieces, the head stage waits with rw_piece_at (and compiles,
// NVRTC); elsewhere no such line. (Its values are the plain text's, bitwise:
// RowsFormDefaultAndPlainTextsAgreeBitwise, on the GPU.)
TEST(CompileCudaRows, DefaultHeadWaitsPerChain) {
  for (const RowsCase& k : rows_cases()) {
    const Graph gk = capture_gpt(k.c, k.B, k.T);
    const CudaLowered l = lower_rows(gk);
    const std::string what = fmt::format("d_model {} V {} ({}, {})", k.c.d_model, k.c.vocab_size, k.B, k.T);
    ASSERT_EQ(l.code.launches.size(), 1u) << what << ": " << l.note;
    const std::string& src = l.code.source;
    const bool head = k.c.vocab_size > kRowsThreads;  // lm_head of more outputs than threads
    const size_t note = src.find("pieces not prewaited: its threads wait for their own chains' pieces)");
    if (!head) {
      EXPECT_EQ(note, std::string::npos) << what << ": no head of two chains";
      continue;
    }
    ASSERT_NE(note, std::string::npos) << what;
    // from that barrier on (the head stage and the softmax): no prewait, the chains' own waits
    const std::string rest = src.substr(note);
    EXPECT_FALSE(contains(rest, "rw_prewait<")) << what;
    EXPECT_TRUE(contains(rest, "rw_piece_at<")) << what;
    EXPECT_FALSE(contains(lower_rows_words(gk, "rows-plain").code.source, "pieces not prewaited")) << what << ": the plain text prewaits";
#ifdef MINIGPT_HAVE_CUDA_COMPILE
    std::string ptx;
    ASSERT_NO_THROW(ptx = nvrtc_compile_ptx(src, "compute_90a", gk.name)) << what;
    EXPECT_TRUE(contains(ptx, ".entry cuda_rows_forward(")) << what;
#endif
  }
}

// The default text's LayerNorm statistics (issue 15, ln15; codegen_cuda_rows.cpp's kLnDefault and kLnParts with kLnGather, measured as
// the word rows-ln2 in gpu_final15): rw_layernorm's (and rw_layernorm_parts', with the deferred matmuls)
// 16-lane sums in 2 gather rounds, rsqrt without the denormal scaling, every lane storing, the gain and
// bias by rw_lds1; rows-plain keeps kPreludeLnText's butterfly; every default text compiles (NVRTC, where built with it) at the rows tests' shapes. (That
// the values are the plain text's, bitwise, is RowsFormDefaultAndPlainTextsAgreeBitwise's, on the GPU.)
TEST(CompileCudaRows, DefaultLayerNormStatisticsAreLn2TextsAndPlainKeepsItsOwn) {
  for (const RowsCase& k : rows_cases()) {
    const Graph g = capture_gpt(k.c, k.B, k.T);
    const CudaLowered d = lower_rows_words(g, "rows"), pl = lower_rows_words(g, "rows-plain");
    const std::string what = fmt::format("default at d_model {} V {} ({}, {})", k.c.d_model, k.c.vocab_size, k.B, k.T);
    ASSERT_EQ(d.code.launches.size(), 1u) << what << ": " << d.note;
    const size_t lns = 1 + (contains(d.code.source, "rw_layernorm_parts(") ? 1 : 0);  // the LayerNorm texts in the prelude
    const std::string code = code_only(d.code.source), plain = code_only(pl.code.source);
    EXPECT_EQ(count_of(code, "const int o1 = r == 0 ? 8 : 2, o2 = r == 0 ? 4 : 1;"), lns) << what;
    EXPECT_EQ(count_of(code, "    s = (s + s1) + (s2 + s3);\n    q = (q + q1) + (q2 + q3);\n"), lns) << what;
    EXPECT_EQ(count_of(code, "rstd = eps >= 1.17549435e-38f ? rw_rsqrt_normal(xr) : rsqrtf(xr);"), lns) << what;
    EXPECT_EQ(count_of(code, "s += __shfl_xor_sync(RW_FULL, s, off);"), 0u) << what << ": no butterfly left";
    EXPECT_EQ(count_of(code, "if ((threadIdx.x & 31) < 16) {\n#pragma unroll\n    for (int e = 0; e < E; ++e) out["), 0u) << what << ": every lane stores";
    EXPECT_EQ(count_of(code, "wv[e] = rw_lds1(w + "), lns) << what;
    EXPECT_EQ(count_of(plain, "s += __shfl_xor_sync(RW_FULL, s, off);"), 1u) << what << ": rows-plain keeps the butterfly";
    EXPECT_FALSE(contains(plain, "rw_rsqrt_normal")) << what;
#ifdef MINIGPT_HAVE_CUDA_COMPILE
    std::string ptx;
    ASSERT_NO_THROW(ptx = nvrtc_compile_ptx(d.code.source, "compute_90a", g.name)) << what;
    EXPECT_TRUE(contains(ptx, "rsqrt.approx.ftz.f32")) << what;
#endif
  }
}
