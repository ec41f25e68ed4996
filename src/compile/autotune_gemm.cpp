// autotune_gemm (autotune_gemm.h): one source with every variant (and its thread-split
// wrapper), the library GEMM as a host candidate, autotune() to time them.
#include "compile/autotune_gemm.h"

#include "compile/jit.h"
#include "compile/runtime.h"
#include "compile/schedule.h"
#include "io/atomic_file.h"
#include "core/error.h"
#include "kernels/cpu/linear.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

namespace minigpt::compile {

std::vector<GemmSpec> gemm_variants(int64_t M, int64_t N, int64_t K, GemmEpilogueKind epilogue,
                                    bool bias, GemmIsa isa) {
  // (mr, nv, ksplit); 0 = the default's choice.
  // (4 x 2 and 4 x 6 tiles never won at the model's shapes in bench/compile_gemm_bench.cpp and
  // cost compile time: max-autotune's g++ run is most of its time.)
  const int grid[][3] = {{0, 0, 0}, {6, 4, 1}, {8, 3, 1}, {12, 2, 1}, {4, 4, 1}, {8, 2, 1},
                         {1, 4, 2}, {1, 4, 4}, {1, 3, 4}, {1, 2, 4}};
  std::vector<GemmSpec> out;
  for (const auto& g : grid) {
    if ((M >= 4) != (g[0] != 1) && g[0] != 0) continue;  // one-row schedules for one row
    GemmSpec s = gemm_spec(M, N, K, epilogue, bias, isa);
    s.mr = static_cast<int>(std::min<int64_t>(g[0], M));
    s.nv = g[1];
    s.ksplit = g[2];
    try {
      s = gemm_resolve(s);
    } catch (const Error&) {
      continue;  // does not fit this shape or ISA
    }
    bool seen = false;
    for (const GemmSpec& o : out) seen = seen || o.name == s.name;
    if (!seen) out.push_back(s);
  }
  return out;
}

namespace {

// One problem's inputs, its library result, its variants and their packed weights.
struct Prepared {
  struct Buffers {
    std::vector<float> x, res, y, want, lib_packed;
    std::vector<std::vector<float>> packed;
    MgRuntime rt{};
  };
  std::shared_ptr<Buffers> buf;
  std::vector<GeneratedGemm> gens;
  std::string code;  // the variants' functions (and their thread-split wrappers)
};

Prepared prepare(const GemmProblem& p, const std::vector<GemmSpec>& variants, GemmIsa isa) {
  MINIGPT_CHECK(p.W && p.pool && p.M > 0 && p.N > 0 && p.K > 0,
                "autotune_gemm: a problem needs W, a pool and a positive shape");
  MINIGPT_CHECK(!variants.empty(), "autotune_gemm: no variants");
  const bool threaded = p.pool->size() > 1;
  Prepared out;
  out.buf = std::make_shared<Prepared::Buffers>();
  auto& buf = *out.buf;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  buf.x.resize(p.M * p.K);
  buf.res.resize(p.M * p.N);
  for (float& v : buf.x) v = dist(rng);
  for (float& v : buf.res) v = dist(rng);
  buf.y.resize(p.M * p.N);
  buf.want.resize(p.M * p.N);
  buf.lib_packed.resize(static_cast<size_t>(cpu::linear_packed_floats(p.K, p.N)));
  cpu::linear_pack_weights(p.W, buf.lib_packed.data(), p.K, p.N);
  buf.rt = make_runtime(*p.pool);
  for (const GemmSpec& s : variants) {
    MINIGPT_CHECK(s.M == p.M && s.N == p.N && s.K == p.K && s.epilogue == p.epilogue &&
                      s.bias == (p.b != nullptr) && s.isa == isa,
                  "autotune_gemm: variant {} is not of this problem", s.name);
    out.gens.push_back(generate_gemm(s));
    out.code += out.gens.back().code;
    if (threaded) out.code += generate_gemm_parallel(out.gens.back());
    buf.packed.emplace_back(static_cast<size_t>(out.gens.back().packed_floats));
    gemm_pack_weights(out.gens.back(), p.W, buf.packed.back().data());
  }
  return out;
}

// The candidates of one problem (its variants, split and not, and the library) on `request`,
// timed by autotune().
GemmChoice tune(const GemmProblem& p, const Prepared& prep, const JitRequest& request,
                const AutotuneOptions& options) {
  const bool threaded = p.pool->size() > 1;
  const auto buf = prep.buf;
  const auto& gens = prep.gens;
  cpu::LinearEpilogue ep;
  ep.gelu = p.epilogue == GemmEpilogueKind::kGelu;
  ep.residual = p.epilogue == GemmEpilogueKind::kResidual ? buf->res.data() : nullptr;
  auto run_library = [buf, p, ep](float* y) {
    cpu::linear_forward_packed(buf->x.data(), p.W, buf->lib_packed.data(), p.b, y, p.M, p.K, p.N,
                               *p.pool, ep);
  };
  run_library(buf->want.data());
  auto check = [buf]() -> std::string {
    for (size_t i = 0; i < buf->want.size(); ++i)
      if (!(std::abs(buf->y[i] - buf->want[i]) <= 1e-5f + 1e-5f * std::abs(buf->want[i])))
        return fmt::format("y[{}] = {}, the library gives {}", i, buf->y[i], buf->want[i]);
    return "";
  };

  std::vector<AutotuneCandidate> cands;
  struct Which {
    int variant;  // -1: the library
    bool threaded;
  };
  std::vector<Which> which;
  for (size_t v = 0; v < gens.size(); ++v)
    for (bool mt : {false, true}) {
      if (mt && !threaded) continue;
      AutotuneCandidate c;
      c.label = fmt::format("generated {}{}", gens[v].name, mt ? " split over the pool" : "");
      c.request = request;  // one source: compiled once, the others load it
      c.symbol = gens[v].name + (mt ? "_mt" : "");
      const float* packed = buf->packed[v].data();
      const float* b = p.b;
      const int64_t tasks = gens[v].tasks;
      if (mt)
        c.call = [buf, packed, b](void* fn) {
          reinterpret_cast<GemmParallelFn>(fn)(&buf->rt, buf->x.data(), packed, b, buf->res.data(),
                                               buf->y.data(), 1);
        };
      else
        c.call = [buf, packed, b, tasks](void* fn) {
          reinterpret_cast<GemmFn>(fn)(buf->x.data(), packed, b, buf->res.data(), buf->y.data(), 0, tasks);
        };
      c.check = check;
      cands.push_back(std::move(c));
      which.push_back({static_cast<int>(v), mt});
    }
  AutotuneCandidate lib;
  lib.label = fmt::format("library linear_forward_packed ({} thread{})", p.pool->size(),
                          p.pool->size() > 1 ? "s" : "");
  lib.call = [buf, run_library](void*) { run_library(buf->y.data()); };
  lib.check = check;
  cands.push_back(std::move(lib));
  which.push_back({-1, threaded});

  GemmChoice choice;
  choice.result = autotune(cands, options);
  const Which& w = which[static_cast<size_t>(choice.result.best)];
  choice.library = w.variant < 0;
  choice.threaded = w.threaded && !choice.library;
  if (!choice.library) choice.spec = gens[static_cast<size_t>(w.variant)].spec;
  return choice;
}

}  // namespace

std::vector<GemmChoice> autotune_gemms(const std::vector<GemmProblem>& problems,
                                       const std::vector<std::vector<GemmSpec>>& variants,
                                       const AutotuneOptions& options,
                                       const std::filesystem::path& cache_dir) {
  MINIGPT_CHECK(!problems.empty() && problems.size() == variants.size(),
                "autotune_gemms: {} problems, {} variant lists", problems.size(), variants.size());
  MINIGPT_CHECK(!variants[0].empty(), "autotune_gemm: no variants");
  const GemmIsa isa = variants[0][0].isa;
  // The problems' variants in as many sources as compile threads, compiled at once (g++ is most of max-autotune's time), then each problem timed on its own.
  const size_t threads = options.compile_threads > 0 ? static_cast<size_t>(options.compile_threads)
                                                     : std::max(1u, std::thread::hardware_concurrency());
  const size_t units = std::min(problems.size(), threads);
  std::vector<JitRequest> requests(units);
  for (size_t u = 0; u < units; ++u) {
    requests[u].source = std::string(runtime_abi_source()) + gemm_prelude(isa);
    requests[u].key_extra = "autotune_gemm v1";
    requests[u].name = "autotune_gemm";
    requests[u].cache_dir = cache_dir;
  }
  // Each problem to the unit with the least work so far (a GELU epilogue, inlined in every
  // tile, costs g++ about three times the others).
  std::vector<size_t> unit_of(problems.size());
  std::vector<double> load(units, 0.0);
  std::vector<Prepared> preps;
  for (size_t i = 0; i < problems.size(); ++i) {
    preps.push_back(prepare(problems[i], variants[i], isa));
    unit_of[i] = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[unit_of[i]] += static_cast<double>(variants[i].size()) * (problems[i].epilogue == GemmEpilogueKind::kGelu ? 3.0 : 1.0);
    JitRequest& r = requests[unit_of[i]];
    r.source += preps.back().code;
    const GemmProblem& p = problems[i];
    if (r.name.size() < 100) r.name += fmt::format("_{}x{}x{}_{}", p.M, p.N, p.K, gemm_epilogue_name(p.epilogue));
  }
  if (units > 1) {
    std::vector<std::thread> pool;
    for (size_t u = 0; u < units; ++u)
      pool.emplace_back([&, u] {
        try {
          jit_load(requests[u]);  // into the cache; autotune() loads it from there
        } catch (const std::exception&) {
          // autotune() meets the same error when it loads the unit, and reports it per candidate
        }
      });
    for (std::thread& t : pool) t.join();
  }
  std::vector<GemmChoice> out;
  for (size_t i = 0; i < problems.size(); ++i) out.push_back(tune(problems[i], preps[i], requests[unit_of[i]], options));
  return out;
}

GemmChoice autotune_gemm(const GemmProblem& p, const std::vector<GemmSpec>& variants,
                         const AutotuneOptions& options, const std::filesystem::path& cache_dir) {
  MINIGPT_CHECK(!variants.empty(), "autotune_gemm: no variants");
  return autotune_gemms({p}, {variants}, options, cache_dir)[0];
}

std::vector<GemmPick> autotune_graph_gemms(const Graph& g,
                                           const std::function<const float*(const std::string&)>& weight,
                                           const AutotuneOptions& options,
                                           const std::filesystem::path& cache_dir, std::string* report) {
  std::vector<GemmSpec> shapes;
  std::vector<GemmProblem> problems;
  std::vector<std::vector<GemmSpec>> variants;
  ThreadPool pool(1);
  for (const Node& n : g.nodes) {
    if (n.op != Op::Matmul) continue;
    const GemmSpec shape = matmul_gemm_shape(g, n);
    if (std::any_of(shapes.begin(), shapes.end(), [&](const GemmSpec& s) { return gemm_same_shape(s, shape); })) continue;
    GemmProblem p;
    p.M = shape.M;
    p.N = shape.N;
    p.K = shape.K;
    p.epilogue = shape.epilogue;
    p.W = weight(g.tensor(n.inputs[1]).name);
    p.b = n.has_bias ? weight(g.tensor(n.inputs[2]).name) : nullptr;
    p.pool = &pool;
    std::vector<GemmSpec> v = gemm_variants(shape.M, shape.N, shape.K, shape.epilogue, shape.bias, shape.isa);
    if (v.empty()) continue;  // no generated schedule fits: the rule decides
    shapes.push_back(shape);
    problems.push_back(p);
    variants.push_back(std::move(v));
  }
  std::vector<GemmPick> picks;
  if (problems.empty()) return picks;
  // The picks are remembered beside the JIT cache, keyed like a JIT entry (the variants' names,
  // the compiler, the CPU's features): a warm max-autotune compile neither re-times (which
  // could pick otherwise under noise, and miss the graph's cache entry) nor rebuilds.
  JitRequest key_req;
  for (const auto& v : variants)
    for (const GemmSpec& s : v) key_req.source += s.name + "\n";
  key_req.key_extra = "gemm picks v1";
  const std::filesystem::path picks_file =
      (cache_dir.empty() ? default_cache_dir() : cache_dir) / (jit_key(key_req) + ".gemm_picks");
  if (std::ifstream in(picks_file); in) {
    std::vector<GemmPick> cached;
    for (size_t i = 0; i < shapes.size(); ++i) {
      GemmPick p;
      p.spec = shapes[i];
      int engine = 0;
      if (!(in >> engine >> p.spec.mr >> p.spec.nv >> p.spec.unroll >> p.spec.ksplit)) break;
      p.engine = engine != 0;
      if (!p.engine) {
        p.spec.name.clear();
        // an entry that names a schedule not among the variants is stale or corrupt: re-tune
        GemmSpec r;
        try {
          r = gemm_resolve(p.spec);
        } catch (const Error&) {
          break;  // a schedule no variant could have
        }
        if (std::none_of(variants[i].begin(), variants[i].end(), [&](const GemmSpec& v) { return v.name == r.name; })) break;
        p.spec = r;
      }
      cached.push_back(p);
    }
    if (cached.size() == shapes.size()) {
      if (report) *report += fmt::format("  (picks read from {})\n", picks_file.string());
      return cached;
    }
  }
  const std::vector<GemmChoice> choices = autotune_gemms(problems, variants, options, cache_dir);
  for (size_t i = 0; i < choices.size(); ++i) {
    GemmPick pick;
    pick.spec = choices[i].library ? shapes[i] : choices[i].spec;
    pick.engine = choices[i].library;
    picks.push_back(pick);
    if (report) {
      const AutotuneResult& r = choices[i].result;
      *report += fmt::format("  gemm {}x{}x{} {}: {} ({:.2f} us; {} candidates)\n", shapes[i].M, shapes[i].N, shapes[i].K,
                             gemm_epilogue_name(shapes[i].epilogue), r.timings[static_cast<size_t>(r.best)].label,
                             r.timings[static_cast<size_t>(r.best)].median_us, r.timings.size());
    }
  }
  std::string text;
  for (const GemmPick& p : picks)
    text += fmt::format("{} {} {} {} {}\n", p.engine ? 1 : 0, p.spec.mr, p.spec.nv, p.spec.unroll, p.spec.ksplit);
  std::filesystem::create_directories(picks_file.parent_path());
  io::write_file_atomic(picks_file.string(), text);
  return picks;
}

}  // namespace minigpt::compile
