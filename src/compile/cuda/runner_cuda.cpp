// The compiled call on the GPU (runner_cuda.h): the arena, the module, the captured graph.
#include "compile/cuda/runner_cuda.h"

#include "compile/codegen_cuda_rows.h"
#include "compile/cuda/jit_cuda.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/atomic_file.h"

#include <cublas_v2.h>
#include <cuda.h>  // driver API types only: the functions come from cudaGetDriverEntryPointByVersion

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace minigpt::compile {

namespace {

#define MG_CUDA(call)                                                                                   \
  do {                                                                                                  \
    const cudaError_t mg_status_ = (call);                                                              \
    MINIGPT_CHECK(mg_status_ == cudaSuccess, "cuda: {} failed: {}", #call, cudaGetErrorString(mg_status_)); \
  } while (0)

#define MG_CU(call)                                                                  \
  do {                                                                               \
    const CUresult mg_status_ = (call);                                              \
    MINIGPT_CHECK(mg_status_ == CUDA_SUCCESS, "cuda driver: {} failed: error {}", #call, \
                  static_cast<int>(mg_status_));                                     \
  } while (0)

#define MG_CUBLAS(call)                                                                \
  do {                                                                                 \
    const cublasStatus_t mg_status_ = (call);                                          \
    MINIGPT_CHECK(mg_status_ == CUBLAS_STATUS_SUCCESS, "cublas: {} failed: {}", #call,  \
                  cublasGetStatusString(mg_status_));                                  \
  } while (0)

// The driver API functions the runner calls, looked up once through the runtime (which has
// already loaded libcuda): no link-time dependency on the driver library.
struct Driver {
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*module_unload)(CUmodule) = nullptr;
  CUresult (*module_get_global)(CUdeviceptr*, size_t*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                            void**) = nullptr;
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*occupancy_max_active_clusters)(int*, CUfunction, const CUlaunchConfig*) = nullptr;
};

template <class F>
void entry(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  MG_CUDA(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q));
  MINIGPT_CHECK(q == cudaDriverEntryPointSuccess && p, "cuda: the driver has no {}", name);
  fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    MG_CUDA(cudaFree(nullptr));  // the primary context, current on this thread
    Driver r;
    entry("cuModuleLoadData", r.module_load_data);
    entry("cuModuleGetFunction", r.module_get_function);
    entry("cuModuleUnload", r.module_unload);
    entry("cuModuleGetGlobal", r.module_get_global);
    entry("cuLaunchKernel", r.launch_kernel);
    entry("cuLaunchKernelEx", r.launch_kernel_ex);
    entry("cuFuncSetAttribute", r.func_set_attribute);
    entry("cuOccupancyMaxActiveClusters", r.occupancy_max_active_clusters);
    return r;
  }();
  return d;
}

// A launch of l (grid l.grid, block l.block, its dynamic shared memory) on `stream`; `attr`
// (may be null) its `n` launch attributes.
CUlaunchConfig launch_config(const CudaLaunch& l, cudaStream_t stream, CUlaunchAttribute* attr, unsigned n = 1) {
  CUlaunchConfig cfg{};
  cfg.gridDimX = static_cast<unsigned>(l.grid);
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = static_cast<unsigned>(l.block);
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(l.smem);
  cfg.hStream = reinterpret_cast<CUstream>(stream);
  cfg.attrs = attr;
  cfg.numAttrs = attr ? n : 0;
  return cfg;
}

CUlaunchAttribute cluster_attribute(int ctas) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = static_cast<unsigned>(ctas);
  a.value.clusterDim.y = a.value.clusterDim.z = 1;
  return a;
}

// The megakernel f may run as one cluster of how many CTAs: the largest of 16, 8, 4, 2, 1 (at
// most l.cluster) of which the GPU can co-schedule a cluster with l's block and shared memory.
int pick_cluster_size(CUfunction f, CudaLaunch l) {
  MG_CU(driver().func_set_attribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  MG_CU(driver().func_set_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l.smem));
  for (int n = l.cluster; n >= 1; n /= 2) {
    CUlaunchAttribute a = cluster_attribute(n);
    l.grid = n;
    const CUlaunchConfig cfg = launch_config(l, nullptr, &a);
    int clusters = 0;
    if (driver().occupancy_max_active_clusters(&clusters, f, &cfg) == CUDA_SUCCESS && clusters >= 1) return n;
  }
  MINIGPT_FAIL("compile (cuda): the GPU cannot run {} as a cluster ({} threads, {} B shared memory)", l.function, l.block, l.smem);
}

// A grid of clusters of l.cluster_dim CTAs (the MLP kernel's clusters, the rows form's clusters
// of T): its shared memory above the 48 KB default and a non-portable cluster size (> 8) allowed,
// and an Error if the GPU cannot co-schedule one cluster.
void prepare_cluster_grid(CUfunction f, const CudaLaunch& l) {
  if (l.smem > 48 * 1024) MG_CU(driver().func_set_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l.smem));
  if (l.cluster_dim > 8) MG_CU(driver().func_set_attribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  CUlaunchAttribute a = cluster_attribute(l.cluster_dim);
  CudaLaunch one = l;
  one.grid = l.cluster_dim;
  const CUlaunchConfig cfg = launch_config(one, nullptr, &a);
  int clusters = 0;
  MINIGPT_CHECK(driver().occupancy_max_active_clusters(&clusters, f, &cfg) == CUDA_SUCCESS && clusters >= 1,
                "compile (cuda): the GPU cannot run {} in clusters of {} CTAs ({} threads, {} B shared memory)", l.function, l.cluster_dim,
                l.block, l.smem);
}

// "cublas", "generated-gemm", "generated-gemm pdl", "megakernel": the variant's name in stats
// and in its cache key.
std::string variant_name(const CudaCodegenOptions& cg) {
  // what differs from the generated GEMMs' defaults
  const std::string unfused = std::string(cg.generated_gemm && !cg.matmul_prologue ? " unfused-ln" : "") +
                              (cg.generated_gemm && cg.attention_prologue ? " attn-prologue" : "") +
                              (cg.generated_gemm && !cg.stage_x ? " x-global" : "") +
                              (cg.generated_gemm && !cg.weights_early ? " weights-late" : "") +
                              (cg.generated_gemm && !cg.fuse_mlp ? " mlp-apart" : "") +
                              (cg.generated_gemm && cg.fuse_mlp && cg.mlp_rows != CudaCodegenOptions{}.mlp_rows
                                   ? fmt::format(" rows{}", cg.mlp_rows)
                                   : "") +
                              (cg.generated_gemm && cg.fuse_mlp && !cg.fuse_mlp_proj ? " proj-apart" : "") +
                              (cg.generated_gemm && cg.fuse_mlp && cg.fuse_mlp_proj && cg.fuse_mlp_attention && !cg.megakernel
                                   ? " attn-mlp"
                                   : "") +
                              (cg.generated_gemm && cg.fuse_mlp && !cg.mlp_cluster && !cg.megakernel ? " no-cluster" : "") +
                              (cg.generated_gemm && cg.smem_vec4 ? " smem-vec4" : "") +
                              (cg.generated_gemm && cg.fuse_mlp && cg.mlp_cluster && cg.mlp_push && !cg.megakernel &&
                                       cg.mlp_async != CudaCodegenOptions{}.mlp_async
                                   ? (cg.mlp_async ? " mlp-async" : " mlp-sync")
                                   : "") +
                              (cg.generated_gemm && cg.pdl && cg.weights_plain != CudaCodegenOptions{}.weights_plain
                                   ? (cg.weights_plain ? " weights-plain" : " weights-restrict")
                                   : "") +
                              (cg.generated_gemm && cg.ln_weights_early != CudaCodegenOptions{}.ln_weights_early
                                   ? (cg.ln_weights_early ? " ln-early" : " ln-late")
                                   : "") +
                              (cg.generated_gemm && cg.fuse_mlp && cg.mlp_cluster && !cg.megakernel && cg.mlp_push != CudaCodegenOptions{}.mlp_push
                                   ? (cg.mlp_push ? " mlp-push" : " mlp-pull")
                                   : "") +
                              (cg.generated_gemm && cg.fuse_mlp && cg.mlp_cluster && cg.mlp_push && cg.mlp_async && !cg.megakernel && cg.mlp_mbar_cta
                                   ? " mbar-cta"
                                   : "") +
                              (cg.generated_gemm && cg.fuse_mlp && cg.fuse_mlp_proj && cg.mlp_cluster && cg.mlp_push && cg.mlp_async && !cg.megakernel &&
                                       cg.fuse_mlp_next
                                   ? (cg.mlp_next_split ? " mlp-next" : " mlp-next next-all")
                                   : "") +
                              (cg.pad_launches && !cg.megakernel ? " pad-launches" : "");
  if (cg.rows)  // (the GEMM options do not apply)
    return std::string("rows") + (cg.rows_plain ? " rows-plain" : "");
  if (cg.megakernel) return (cg.megakernel_threads > 0 ? fmt::format("megakernel {}", cg.megakernel_threads) : "megakernel") + unfused;
  return std::string(cg.generated_gemm ? "generated-gemm" : "cublas") + (cg.pdl ? " pdl" : "") + unfused;
}


constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// `work` captured `repeat` times from `stream` into one instantiated CUDA graph.
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void(cudaStream_t)>& work, int repeat) {
  cudaGraph_t graph = nullptr;
  MG_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int r = 0; r < repeat; ++r) work(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  MG_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t st = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MG_CUDA(st);
  return exec;
}

// The median over `runs` of `work` (enqueued on `stream`) timed with CUDA events, divided by
// `per` (the repetitions of one unit inside work); microseconds.
double median_event_us(cudaStream_t stream, const std::function<void()>& work, int runs, int per) {
  cudaEvent_t a, b;
  MG_CUDA(cudaEventCreate(&a));
  MG_CUDA(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    float ms = 0;
    MG_CUDA(cudaEventRecord(a, stream));
    work();
    MG_CUDA(cudaEventRecord(b, stream));
    MG_CUDA(cudaEventSynchronize(b));
    MG_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1e3 * ms / per);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// The current device's compute capability major: 9 on Hopper (PDL, thread-block clusters).
int device_cc_major() {
  int major = 0, dev = 0;
  MG_CUDA(cudaGetDevice(&dev));
  MG_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

// A generated text's cubin (the JIT's cache, else NVRTC): the timed text's (build) and the rows
// form's traced one (trace_rows), keyed by the generator's version, the graph's hash and `what`
// (the variant; the trace's adds " trace")
CudaBinary jit_text(const CudaCode& code, const std::string& what, const std::string& name, const std::filesystem::path& cache_dir) {
  CudaJitRequest req;
  req.source = code.source;
  req.key_extra = fmt::format("codegen_cuda v{} graph {} {}", kCodegenCudaVersion, code.graph_hash, what);
  req.name = name;
  req.cache_dir = cache_dir;
  return cuda_jit_compile(req);
}

}  // namespace

class CudaModule {
 public:
  explicit CudaModule(const std::vector<uint8_t>& cubin) {
    MG_CUDA(cudaFree(nullptr));
    MG_CU(driver().module_load_data(&module_, cubin.data()));
  }
  ~CudaModule() {
    if (module_) driver().module_unload(module_);
  }
  CUfunction function(const std::string& name) const {
    CUfunction f = nullptr;
    MG_CU(driver().module_get_function(&f, module_, name.c_str()));
    return f;
  }
  // a __device__ variable's address and size (the rows form's trace buffers)
  void* global(const std::string& name, size_t& bytes) const {
    CUdeviceptr p = 0;
    MG_CU(driver().module_get_global(&p, &bytes, module_, name.c_str()));
    return reinterpret_cast<void*>(p);
  }

 private:
  CUmodule module_ = nullptr;
};

bool cuda_gpu_visible() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

double cuda_fp32_peak_flops() {
  int dev = 0, sms = 0, khz = 0;
  MG_CUDA(cudaGetDevice(&dev));
  MG_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MG_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  return static_cast<double>(sms) * 128.0 * 2.0 * static_cast<double>(khz) * 1e3;
}

double time_captured_us(cudaStream_t stream, const std::function<void(cudaStream_t)>& work, int runs, int repeat) {
  cudaGraphExec_t exec = capture_graph(stream, work, repeat);
  MG_CUDA(cudaGraphLaunch(exec, stream));  // warm up
  const double us = median_event_us(stream, [&] { MG_CUDA(cudaGraphLaunch(exec, stream)); }, runs, repeat);
  cudaGraphExecDestroy(exec);
  return us;
}

CudaCodegenOptions default_cuda_variant(const Graph& captured, std::string& why) {
  return default_cuda_variant_for(captured, device_cc_major(), why);
}

CudaCodegenOptions default_cuda_variant_for(const Graph& captured, int major, std::string& why) {
  int64_t rows = 0;
  for (const Node& n : captured.nodes)
    if (n.op == Op::Matmul) rows = std::max(rows, captured.tensor(n.inputs[0]).rows());
  CudaCodegenOptions cg;
  if (rows > kLaunchBoundRows) {
    why = fmt::format("default rule: a matmul of {} rows (> {}): cuBLAS", rows, kLaunchBoundRows);
    return cg;
  }
  cg.generated_gemm = true;
  cg.pdl = major >= 9;
  cg.fuse_mlp = major >= 9;  // the MLP kernel's clusters need sm_90 (its block form loses on the H200)
  why = fmt::format("default rule: every matmul launch-bound (at most {} rows <= {}): generated GEMMs{}", rows, kLaunchBoundRows,
                    cg.pdl ? " with PDL (the weights loaded before its wait) and the projection + MLP in 8-CTA clusters (sm_90+)" : "");
  if (major >= 9) {
    // the rows form where its analysis takes the graph (a forward of whole sequences of at most 16
    // rows): measured faster than the form above in the same run (H200, experiments/25-compile/
    // gpu_rows15/call1: 22.59 / 22.37 us per replay alone against 29.47 / 29.44; 100 back to back
    // 20.43 / 20.40 against 27.65 / 27.61); MINIGPT_CUDA_VARIANT=no-rows keeps the form above
    if (const RowsPlan rp = plan_rows(captured); rp.refused.empty()) {
      cg.rows = true;
      why += "; then the rows form (one kernel, a cluster of T CTAs per sequence: codegen_cuda_rows.h), measured faster than "
             "those on the H200 in the same run (22.4-22.6 us per replay against 29.4-29.5, experiments/25-compile/gpu_rows15)";
    } else {
      why += fmt::format("; not the rows form ({})", rp.refused);
    }
  }
  return cg;
}

// Members only; the public constructor delegates here first, so that if its body throws, the
// destructor releases what it had made (stream, cuBLAS handle, workspace, arena, module).
CudaCompiledGraph::CudaCompiledGraph(const Graph& captured, const WeightBinding& weights) : captured_(captured), weights_(&weights) {}

CudaCompiledGraph::CudaCompiledGraph(const Graph& captured, const WeightBinding& weights, const CudaCompileOptions& opt)
    : CudaCompiledGraph(captured, weights) {
  MINIGPT_CHECK(cuda_gpu_visible(), "compile --device cuda: no CUDA GPU visible");
  const Timer t0;
  MG_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cublasHandle_t h = nullptr;
  MG_CUBLAS(cublasCreate(&h));
  cublas_ = h;
  MG_CUBLAS(cublasSetStream(h, stream_));
  MG_CUBLAS(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // FP32 SGEMM: no TF32
  constexpr size_t kWorkspace = 4 << 20;                 // fixed: nothing allocated during capture
  MG_CUDA(cudaMalloc(&workspace_, kWorkspace));
  MG_CUBLAS(cublasSetWorkspace(h, workspace_, kWorkspace));
  if (opt.mode == "max-autotune") {
    // cuBLAS + generated epilogues, generated GEMMs with fused epilogues, and those launched with
    // PDL (Hopper and later) in several forms: each built and its graph timed; the fastest kept. A
    // candidate that fails to build or launch is skipped with a line saying why. Its name says
    // what differs from the generated GEMMs' defaults (variant_name, codegen_cuda.h; each MLP with
    // the attention's projection before it one kernel of 8-CTA clusters on 4-row tiles): "rowsN"
    // another tile height, "attn-mlp" the prefill attention in that kernel too (fuse_mlp_attention),
    // "proj-apart" without the projection, "mlp-pull" / "mlp-push" fc2's partials pulled by (pushed
    // to) the CTAs that finish them (mlp_push, the other way than the default), "no-cluster" a block per tile
    // owning every column, "mlp-apart" fc1 and fc2 two kernels (7d's default), "attn-prologue"
    // each attention fused into its projection's GEMM, "smem-vec4" the GEMMs' x read from shared
    // memory as float4s, "weights-late" W read in the K loop (not before PDL's wait), "x-global"
    // the K loop reading x from global memory, "unfused-ln" the layernorms as kernels of their
    // own; "unfused-ln x-global weights-late mlp-apart" is the generated GEMMs before the prologues.
    std::vector<CudaCodegenOptions> candidates;
    auto add = [&](bool gen, bool pdl, const std::function<void(CudaCodegenOptions&)>& edit) {
      CudaCodegenOptions cg = opt.codegen;
      cg.generated_gemm = gen;
      cg.pdl = pdl;
      edit(cg);
      candidates.push_back(cg);
    };
    const int major = device_cc_major();
    add(false, false, [](CudaCodegenOptions&) {});
    add(true, false, [major](CudaCodegenOptions& c) { c.fuse_mlp = major >= 9; });  // (clusters: sm_90+)
    if (major >= 9) {
      add(true, true, [](CudaCodegenOptions&) {});
      for (int rows : {2, 1}) add(true, true, [rows](CudaCodegenOptions& c) { c.mlp_rows = rows; });
      add(true, true, [](CudaCodegenOptions& c) { c.mlp_push = !c.mlp_push; });
      add(true, true, [](CudaCodegenOptions& c) { c.fuse_mlp_attention = true; });
      add(true, true, [](CudaCodegenOptions& c) { c.fuse_mlp_proj = false; });
      add(true, true, [](CudaCodegenOptions& c) {
        c.mlp_cluster = false;
        c.mlp_rows = 1;
      });
      add(true, true, [](CudaCodegenOptions& c) { c.fuse_mlp = false; });
      add(true, true, [](CudaCodegenOptions& c) { c.smem_vec4 = true; });
      // each of 7m's three the other way ("weights-restrict": the weights' loads left to ptxas, which
      // puts them after PDL's wait; "ln-late": the layernorms' gain and bias read in the row's
      // chain; "mlp-sync": fc2's partials through a whole cluster barrier), the first two together,
      // and all three (7l's default)
      add(true, true, [](CudaCodegenOptions& c) { c.weights_plain = !c.weights_plain; });
      add(true, true, [](CudaCodegenOptions& c) { c.ln_weights_early = !c.ln_weights_early; });
      add(true, true, [](CudaCodegenOptions& c) { c.mlp_async = !c.mlp_async; });
      add(true, true, [](CudaCodegenOptions& c) {
        c.weights_plain = !c.weights_plain;
        c.ln_weights_early = !c.ln_weights_early;
      });
      add(true, true, [](CudaCodegenOptions& c) {
        c.weights_plain = !c.weights_plain;
        c.ln_weights_early = !c.ln_weights_early;
        c.mlp_async = !c.mlp_async;
      });
      add(true, true, [](CudaCodegenOptions& c) { c.attention_prologue = true; });
      add(true, true, [](CudaCodegenOptions& c) { c.weights_early = false; });
      add(true, true, [](CudaCodegenOptions& c) { c.stage_x = false; });
      add(true, true, [](CudaCodegenOptions& c) { c.matmul_prologue = c.stage_x = c.weights_early = c.fuse_mlp = false; });
      add(true, false, [](CudaCodegenOptions& c) { c.megakernel = true; });
      add(true, false, [](CudaCodegenOptions& c) {
        c.megakernel = true;
        c.megakernel_threads = 1024;
      });
      // the rows form (codegen_cuda_rows.h), where its analysis takes the graph (else it would
      // time the fallback's form twice)
      if (const RowsPlan rp = plan_rows(captured); rp.refused.empty()) add(true, false, [](CudaCodegenOptions& c) { c.rows = true; });
      else if (!opt.quiet) fmt::print(stderr, "minigpt compile: max-autotune: no rows candidate: {}\n", rp.refused);
    }
    double best = 1e30;
    const CudaCodegenOptions* pick = nullptr;
    const Timer tuning;
    for (const CudaCodegenOptions& cg : candidates) {
      const std::string name = variant_name(cg);
      try {
        build(opt, cg, name);
        const double us = time_graph(50, 20).batched_us;
        stats_.candidates += fmt::format("{}{} {:.2f} us", stats_.candidates.empty() ? "" : ", ", name, us);
        ++stats_.tuned;
        if (!opt.quiet) fmt::print(stderr, "minigpt compile: max-autotune {} {}: {:.2f} us per forward\n", captured.name, name, us);
        if (us < best) {
          best = us;
          pick = &cg;
        }
      } catch (const Error& e) {
        cudaGetLastError();
        fmt::print(stderr, "minigpt compile: max-autotune candidate {} skipped: {}\n", name, e.what());
      }
    }
    stats_.tuning_s = tuning.elapsed_s();
    MINIGPT_CHECK(pick, "compile: max-autotune: no candidate built for {}", captured.name);
    stats_.why = "max-autotune: the fastest measured";  // (before the build, which adds its lowering's note: the rows form's)
    build(opt, *pick, variant_name(*pick));
  } else {
    MINIGPT_CHECK(opt.mode == "default", "compile: unknown mode '{}' (default | max-autotune)", opt.mode);
    CudaCodegenOptions cg = opt.codegen;
    if (opt.variant_by_rule) cg = default_cuda_variant(captured, stats_.why);
    else stats_.why = "as the caller asked";
    if (const char* v = std::getenv("MINIGPT_CUDA_VARIANT"); v && *v) {
      apply_variant_words(cg, v);
      stats_.why += fmt::format("; then MINIGPT_CUDA_VARIANT=\"{}\"", v);
    }
    try {
      build(opt, cg, variant_name(cg));
    } catch (const Error& e) {
      // the rows form built but this GPU cannot run it (e.g. cannot co-schedule a cluster of T
      // CTAs with its shared memory: prepare_cluster_grid): the rest of the options' form, as
      // max-autotune skips a candidate that fails
      if (!cg.rows || lowered_.code.image_floats == 0) throw;
      cudaGetLastError();
      cg.rows = false;
      stats_.why += fmt::format("; the rows form failed here ({}): without it", e.what());
      build(opt, cg, variant_name(cg));
    }
  }
  stats_.total_s = t0.elapsed_s();
  const bool debug = env_compile_debug() || !opt.dump_dir.empty();
  if (env_logs_output_code() && !opt.quiet) fmt::print(stderr, "{}\n", lowered_.code.source);
  if (debug) {
    const std::filesystem::path dir = opt.dump_dir.empty() ? debug_dir_for(captured.name + "_cuda", stats_.key) : opt.dump_dir;
    write_cuda_debug_files(dir, captured, lowered_);
    if (!opt.quiet) fmt::print(stderr, "minigpt compile: debug files for {} (cuda) in {}\n", captured.name, dir.string());
  }
}

void CudaCompiledGraph::release() {
  if (exec_) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
  if (arena_) cudaFree(arena_);
  arena_ = nullptr;
  module_.reset();
}

CudaCompiledGraph::~CudaCompiledGraph() {
  if (stream_) cudaStreamSynchronize(stream_);
  release();
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (workspace_) cudaFree(workspace_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaCompiledGraph::build(const CudaCompileOptions& opt, const CudaCodegenOptions& asked, const std::string& variant) {
  release();
  CudaCodegenOptions codegen = asked;
  const int major = device_cc_major();
  if (major < 9) codegen.mlp_cluster = false;  // thread-block clusters need sm_90: the MLP kernel's block form
  opt_ = opt;
  built_ = codegen;
  lowered_ = lower_cuda(captured_, opt.passes, codegen);
  stats_.passes_s = lowered_.passes_s;
  stats_.codegen_s = lowered_.codegen_s;
  stats_.variant = variant;
  if (codegen.rows && lowered_.code.image_floats == 0) {  // refused: the rest of the options' form
    CudaCodegenOptions rest = codegen;
    rest.rows = false;
    stats_.variant = variant_name(rest) + " (rows refused)";
  }
  if (!lowered_.note.empty() && stats_.why.find(lowered_.note) == std::string::npos) stats_.why += "; " + lowered_.note;
  const Graph& g = lowered_.schedule.graph;
  const CudaBinary bin = jit_text(lowered_.code, variant, captured_.name, opt.cache_dir);
  stats_.cache_hit = bin.cache_hit;
  stats_.nvrtc_s = bin.compile_s;
  stats_.key = bin.key;
  stats_.arch = bin.arch;
  const Timer tl;
  module_ = std::make_unique<CudaModule>(bin.cubin);

  // the arena: weights, inputs, outputs, then the planned intermediates at their offsets
  offset_.clear();
  size_t at = 0;
  auto place = [&](int t) {
    offset_[t] = at;
    at += align_up(static_cast<size_t>(g.tensor(t).bytes()));
  };
  for (int t : g.weights) place(t);
  for (int t : g.inputs) place(t);
  for (int t : g.outputs) place(t);
  const size_t inter = at;
  at += align_up(static_cast<size_t>(std::max<int64_t>(g.arena_bytes, 0)));
  image_at_ = at;  // the rows form's packed weight image (kCudaImageArg), after everything
  at += align_up(static_cast<size_t>(lowered_.code.image_floats) * sizeof(float));
  for (const Node& n : g.nodes) {
    const TensorInfo& ti = g.tensor(n.output);
    if (ti.arena_offset >= 0) offset_[n.output] = inter + static_cast<size_t>(ti.arena_offset);
  }
  arena_bytes_ = std::max<size_t>(at, kAlign);
  void* p = nullptr;
  MG_CUDA(cudaMalloc(&p, arena_bytes_));
  arena_ = static_cast<char*>(p);
  MG_CUDA(cudaMemsetAsync(arena_, 0, arena_bytes_, stream_));
  for (int t : g.weights) {
    const TensorInfo& ti = g.tensor(t);
    const auto it = weights_->values.find(ti.name);
    MINIGPT_CHECK(it != weights_->values.end(), "compile: graph {} needs weight '{}', which the model does not have", captured_.name,
                  ti.name);
    MG_CUDA(cudaMemcpyAsync(arena_ + offset_[t], it->second, static_cast<size_t>(ti.bytes()), cudaMemcpyHostToDevice, stream_));
  }
  std::vector<float> image;  // (kept until the stream's synchronisation below)
  if (lowered_.code.image_floats > 0) {
    image = pack_rows_image(lowered_.code, [&](int t) -> const float* {
      const auto it = weights_->values.find(g.tensor(t).name);
      MINIGPT_CHECK(it != weights_->values.end(), "compile: graph {} needs weight '{}', which the model does not have", captured_.name,
                    g.tensor(t).name);
      return it->second;
    });
    MG_CUDA(cudaMemcpyAsync(arena_ + image_at_, image.data(), image.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  position_caps_.clear();
  for (size_t k = 0; k < g.inputs.size(); ++k)
    if (const int64_t cap = position_capacity(g, g.inputs[k]); cap > 0) position_caps_.emplace_back(k, cap);

  // every launch's parameters, bound once to arena slots
  auto& launches = lowered_.code.launches;
  functions_.assign(launches.size(), nullptr);
  params_.assign(launches.size(), {});
  param_ptrs_.assign(launches.size(), {});
  for (size_t i = 0; i < launches.size(); ++i) {
    const CudaLaunch& l = launches[i];
    if (l.kind != CudaLaunch::Kind::Kernel) continue;
    functions_[i] = module_->function(l.function);
    if (l.cluster > 0) launches[i].grid = pick_cluster_size(static_cast<CUfunction>(functions_[i]), l);
    if (l.cluster_dim > 0) prepare_cluster_grid(static_cast<CUfunction>(functions_[i]), l);
    for (int t : l.args) params_[i].push_back(t == kCudaImageArg ? arena_ + image_at_ : t < 0 ? nullptr : slot(t));
    for (void*& v : params_[i]) param_ptrs_[i].push_back(&v);
  }
  MG_CUDA(cudaStreamSynchronize(stream_));
  exec_ = capture_graph(
      stream_, [&](cudaStream_t) {
        for (const CudaLaunch& l : launches) launch(l);
      },
      1);
  stats_.load_s = tl.elapsed_s();
}

void* CudaCompiledGraph::slot(int tensor) const {
  const TensorInfo& t = lowered_.schedule.graph.tensor(tensor);
  const int id = t.alias_of >= 0 ? t.alias_of : tensor;
  const auto it = offset_.find(id);
  MINIGPT_CHECK(it != offset_.end(), "compiled {} (cuda): tensor %{} '{}' has no arena slot", captured_.name, id, t.name);
  return arena_ + it->second;
}

void CudaCompiledGraph::launch(const CudaLaunch& l) {
  const size_t i = static_cast<size_t>(&l - lowered_.code.launches.data());
  if (l.kind == CudaLaunch::Kind::Sgemm) {
    // row-major y (N, M) = x (N, K) W (M, K)^T, in cuBLAS's column-major terms: the buffers
    // read column-major are y^T (M, N), x^T (K, N), W^T (K, M), so y^T = (W^T)^T x^T:
    // op(A) = A^T with A = W (lda K), op(B) = B with B = x (ldb K), m = M, n = N, k = K.
    const float one = 1.0f, zero = 0.0f;
    MG_CUBLAS(cublasSgemm(static_cast<cublasHandle_t>(cublas_), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(l.M), static_cast<int>(l.N),
                          static_cast<int>(l.K), &one, static_cast<const float*>(slot(l.w)), static_cast<int>(l.K),
                          static_cast<const float*>(slot(l.x)), static_cast<int>(l.K), &zero, static_cast<float*>(slot(l.y)),
                          static_cast<int>(l.M)));
    return;
  }
  if (l.cluster > 0) {
    // the megakernel: one cluster of l.grid CTAs (pick_cluster_size chose it at build)
    CUlaunchAttribute attr = cluster_attribute(l.grid);
    const CUlaunchConfig cfg = launch_config(l, stream_, &attr);
    MG_CU(driver().launch_kernel_ex(&cfg, static_cast<CUfunction>(functions_[i]), param_ptrs_[i].data(), nullptr));
    return;
  }
  if (lowered_.code.pdl || l.cluster_dim > 0) {
    // programmatic stream serialization: this kernel may launch while the previous one runs
    // (its griddepcontrol.wait holds it until the previous one's writes are visible); a grid of
    // thread-block clusters (the MLP kernel's mlp_cluster form)
    CUlaunchAttribute attr[2]{};
    unsigned n = 0;
    if (lowered_.code.pdl) {
      attr[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (l.cluster_dim > 0) attr[n++] = cluster_attribute(l.cluster_dim);
    const CUlaunchConfig cfg = launch_config(l, stream_, attr, n);
    MG_CU(driver().launch_kernel_ex(&cfg, static_cast<CUfunction>(functions_[i]), param_ptrs_[i].data(), nullptr));
    return;
  }
  MG_CU(driver().launch_kernel(static_cast<CUfunction>(functions_[i]), static_cast<unsigned>(l.grid), 1, 1,
                               static_cast<unsigned>(l.block), 1, 1, static_cast<unsigned>(l.smem),
                               reinterpret_cast<CUstream>(stream_), param_ptrs_[i].data(), nullptr));
}

CudaCompiledGraph::RowsTrace CudaCompiledGraph::trace_rows(int launches) {
  RowsTrace r;
  const CudaCode& code = lowered_.code;
  if (!built_.rows || code.image_floats == 0 || code.launches.size() != 1) return r;
  CudaCodegenOptions cg = built_;
  cg.rows_trace = true;
  const CudaLowered tl = lower_cuda(captured_, opt_.passes, cg);
  // the traced text: the timed one's stages, layout and arguments, plus the stamps
  MINIGPT_CHECK(tl.code.launches.size() == 1 && tl.code.launches[0].args == code.launches[0].args &&
                    tl.code.launches[0].smem == code.launches[0].smem && tl.code.image_floats == code.image_floats &&
                    tl.code.trace_stages.size() >= 2,
                "compiled {} (cuda): the traced rows text's launch differs from the timed one's", captured_.name);
  const CudaBinary bin = jit_text(tl.code, stats_.variant + " trace", captured_.name + "_trace", opt_.cache_dir);
  const CudaModule m(bin.cubin);
  const CUfunction f = m.function(code.launches[0].function);
  const CudaLaunch& l = code.launches[0];
  prepare_cluster_grid(f, l);
  size_t stamp_bytes = 0, ns_bytes = 0;
  void* stamps = m.global("rw_trace", stamp_bytes);
  void* ns = m.global("rw_trace_ns", ns_bytes);
  const size_t n = tl.code.trace_stages.size() + 1;  // stamps: one more than the intervals
  MINIGPT_CHECK(stamp_bytes == n * sizeof(long long) && ns_bytes == 2 * sizeof(unsigned long long),
                "compiled {} (cuda): the trace buffers have {} and {} B", captured_.name, stamp_bytes, ns_bytes);
  // the outputs before (the last replay's), to check the traced launches change none
  const Graph& g = lowered_.schedule.graph;
  auto outputs = [&] {
    std::vector<std::vector<char>> o;
    for (int t : g.outputs) {
      o.emplace_back(static_cast<size_t>(g.tensor(t).bytes()));
      MG_CUDA(cudaMemcpyAsync(o.back().data(), slot(t), o.back().size(), cudaMemcpyDeviceToHost, stream_));
    }
    MG_CUDA(cudaStreamSynchronize(stream_));
    return o;
  };
  const auto before = outputs();
  std::vector<long long> st(n, 0);
  unsigned long long t_ns[2] = {0, 0};
  for (int k = 0; k < std::max(launches, 1); ++k) {
    MG_CUDA(cudaMemsetAsync(stamps, 0, stamp_bytes, stream_));
    CUlaunchAttribute attr = cluster_attribute(l.cluster_dim);
    const CUlaunchConfig cfg = launch_config(l, stream_, &attr);
    MG_CU(driver().launch_kernel_ex(&cfg, f, param_ptrs_[0].data(), nullptr));
  }
  MG_CUDA(cudaMemcpyAsync(st.data(), stamps, stamp_bytes, cudaMemcpyDeviceToHost, stream_));
  MG_CUDA(cudaMemcpyAsync(t_ns, ns, ns_bytes, cudaMemcpyDeviceToHost, stream_));
  r.outputs_same = outputs() == before;
  r.stages = tl.code.trace_stages;
  for (size_t i = 0; i + 1 < n; ++i) r.cycles.push_back(st[i + 1] - st[i]);
  r.total_cycles = st[n - 1] - st[0];
  r.total_ns = static_cast<double>(t_ns[1] - t_ns[0]);
  r.source = tl.code.source;
  if (!opt_.dump_dir.empty()) {
    std::filesystem::create_directories(opt_.dump_dir);
    io::write_file_atomic((opt_.dump_dir / "output_code_trace.cu").string(), r.source);
    std::string txt = fmt::format("# the rows form's stage trace ({} launches, the last kept): interval, cycles\n", launches);
    for (size_t i = 0; i < r.cycles.size(); ++i) txt += fmt::format("{}\t{}\n", r.stages[i], r.cycles[i]);
    txt += fmt::format("total\t{}\t{:.0f} ns\toutputs bitwise unchanged: {}\n", r.total_cycles, r.total_ns, r.outputs_same ? "yes" : "no");
    io::write_file_atomic((opt_.dump_dir / "trace.txt").string(), txt);
  }
  return r;
}

void CudaCompiledGraph::run(std::span<const void* const> inputs, std::span<float* const> outputs) {
  const Graph& g = lowered_.schedule.graph;
  MINIGPT_CHECK(inputs.size() == g.inputs.size() && outputs.size() == g.outputs.size(),
                "compiled {} (cuda): expected {} inputs and {} outputs, got {} and {}", g.name, g.inputs.size(), g.outputs.size(),
                inputs.size(), outputs.size());
  for (const auto& [k, cap] : position_caps_) {
    const int32_t pos = *static_cast<const int32_t*>(inputs[k]);
    MINIGPT_CHECK(pos >= 0 && pos < cap, "compiled {} (cuda): position {} outside the compiled capacity [0, {})", g.name, pos, cap);
  }
  for (size_t k = 0; k < inputs.size(); ++k)
    MG_CUDA(cudaMemcpyAsync(slot(g.inputs[k]), inputs[k], static_cast<size_t>(g.tensor(g.inputs[k]).bytes()), cudaMemcpyHostToDevice,
                            stream_));
  replay();
  for (size_t k = 0; k < outputs.size(); ++k)
    MG_CUDA(cudaMemcpyAsync(outputs[k], slot(g.outputs[k]), static_cast<size_t>(g.tensor(g.outputs[k]).bytes()), cudaMemcpyDeviceToHost,
                            stream_));
  synchronize();
}

void CudaCompiledGraph::replay() { MG_CUDA(cudaGraphLaunch(exec_, stream_)); }

void CudaCompiledGraph::synchronize() { MG_CUDA(cudaStreamSynchronize(stream_)); }

CudaCompiledGraph::GraphTime CudaCompiledGraph::time_graph(int runs, int batch) {
  for (int w = 0; w < 10; ++w) replay();  // warm up
  GraphTime gt;
  gt.single_us = median_event_us(stream_, [&] { replay(); }, runs, 1);
  gt.batched_us = median_event_us(
      stream_, [&] {
        for (int i = 0; i < batch; ++i) replay();
      },
      std::max(3, runs / 10), batch);
  return gt;
}

std::vector<double> CudaCompiledGraph::time_kernels(int runs, int repeat) {
  std::vector<double> out;
  for (const Kernel& k : lowered_.schedule.kernels) {
    std::vector<const CudaLaunch*> steps;
    for (const CudaLaunch& l : lowered_.code.launches)
      if (l.name == k.name) steps.push_back(&l);
    if (steps.empty()) {  // a stage of the megakernel: no launch of its own to time
      out.push_back(std::nan(""));
      continue;
    }
    out.push_back(time_captured_us(
        stream_, [&](cudaStream_t) {
          for (const CudaLaunch* l : steps) launch(*l);
        },
        runs, repeat));
  }
  return out;
}

// ---- CudaCompiledModel ------------------------------------------------------------------

CudaCompiledModel::CudaCompiledModel(const GrammarMiniGPT& model, CudaCompileOptions opt)
    : model_(&model), opt_(std::move(opt)), weights_(bind_weights(model.weights())) {}

CudaCompiledGraph& CudaCompiledModel::graph_for(int64_t B, int64_t T) {
  return graphs_.get(B, T, "gpt (cuda)", opt_.quiet, [&] {
    const Graph g = capture_gpt(model_->config(), B, T);
    auto cg = std::make_unique<CudaCompiledGraph>(g, weights_, opt_);
    if (!opt_.quiet)
      fmt::print(stderr, "minigpt compile: {} (cuda, {}) ready in {:.3f} s ({}; {} kernels)\n", g.name, cg->stats().arch,
                 cg->stats().total_s, cg->stats().cache_hit ? "cache hit" : "compiled", cg->lowered().schedule.kernels.size());
    return cg;
  });
}

void CudaCompiledModel::forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs) {
  prepare_forward(model_->config(), ids, B, T, logits, probs);
  if (B == 0) return;  // empty batch: no kernel runs
  CudaCompiledGraph& g = graph_for(B, T);
  const void* in[] = {ids};
  float* out[] = {logits.data(), probs.data()};
  g.run(in, out);
}

// ---- CudaCompiledDecoder ----------------------------------------------------------------

CudaCompiledDecoder::CudaCompiledDecoder(const GrammarMiniGPT& model, CudaCompileOptions opt)
    : model_(&model), weights_(bind_weights(model.weights())) {
  opt.quiet = true;
  graph_ = std::make_unique<CudaCompiledGraph>(capture_gpt_decode(model.config()), weights_, opt);
  logits_.resize(static_cast<size_t>(model.config().vocab_size));
  reset();
}

void CudaCompiledDecoder::reset() {
  // the caches (inputs 2..) zeroed in their slots; they stay there across steps
  const Graph& g = graph_->lowered().schedule.graph;
  for (size_t k = 2; k < g.inputs.size(); ++k)
    MG_CUDA(cudaMemsetAsync(graph_->slot(g.inputs[k]), 0, static_cast<size_t>(g.tensor(g.inputs[k]).bytes()), graph_->stream()));
  graph_->synchronize();
  pos_ = 0;
}

std::span<const float> CudaCompiledDecoder::step(int32_t id) {
  const ModelConfig& c = model_->config();
  MINIGPT_CHECK(id >= 0 && id < c.vocab_size, "token id {} is outside the vocabulary [0, {})", id, c.vocab_size);
  MINIGPT_CHECK(pos_ < c.block_size, "the context is full: the model's block_size is {} tokens and {} were fed", c.block_size, pos_);
  const Graph& g = graph_->lowered().schedule.graph;
  const int32_t t = static_cast<int32_t>(pos_);
  MG_CUDA(cudaMemcpyAsync(graph_->slot(g.inputs[0]), &id, sizeof id, cudaMemcpyHostToDevice, graph_->stream()));
  MG_CUDA(cudaMemcpyAsync(graph_->slot(g.inputs[1]), &t, sizeof t, cudaMemcpyHostToDevice, graph_->stream()));
  graph_->replay();
  MG_CUDA(cudaMemcpyAsync(logits_.data(), graph_->slot(g.outputs[0]), logits_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                          graph_->stream()));
  graph_->synchronize();
  ++pos_;
  return {logits_.data(), logits_.size()};
}

}  // namespace minigpt::compile
