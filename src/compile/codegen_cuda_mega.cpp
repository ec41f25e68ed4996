// The megakernel form (codegen_cuda_mega.h): kernel text -> device function of a virtual block,
// and the one __global__ kernel that runs them all as stages of one thread-block cluster.
#include "compile/codegen_cuda_mega.h"

#include "compile/codegen_text.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>

namespace minigpt::compile {

namespace {

constexpr int64_t kSmemAlign = 16;
constexpr int64_t kSmemBudget = 200 * 1024;  // of the 227 KiB an sm_90 CTA may have
constexpr int kMaxSide = 15;                 // named barriers 1..15 (0 is __syncthreads')

const char* kMegaPrelude = R"(
// ---- megakernel helpers (sm_90: thread-block clusters) --------------------------------------
// This CTA's rank in its cluster, and the cluster's CTAs.
__device__ __forceinline__ int mg_cluster_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return (int)r; }
__device__ __forceinline__ int mg_cluster_ctas() { unsigned n; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n)); return (int)n; }
// Every thread of the cluster arrives (release: its global and shared writes ordered before)
// and waits for all (acquire: everything the cluster wrote before arriving is visible after).
__device__ __forceinline__ void mg_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}
// A barrier over the `count` threads (a multiple of 32) of one virtual block: named barrier `id`.
__device__ __forceinline__ void mg_bar_sync(int id, int count) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory"); }
)";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

int64_t type_bytes(const std::string& type) {
  if (type == "float" || type == "int") return 4;
  if (type == "double") return 8;
  MINIGPT_FAIL("codegen_cuda_mega: shared array of unknown type '{}'", type);
}

// `__shared__ T a[d1][d2], b[d3];  // comment` -> pointers into mg_smem at the next offsets.
std::string rewrite_shared(const std::string& line, int64_t& offset) {
  // (an __align__(16) is dropped: every slice of mg_smem starts at a multiple of kSmemAlign)
  static const std::regex decl_re(R"(^(\s*)__shared__ (?:__align__\(\d+\) )?(\w+) ([^;]*);(.*)$)");
  static const std::regex var_re(R"((\w+)((?:\[\d+\])+))");
  std::smatch m;
  MINIGPT_CHECK(std::regex_match(line, m, decl_re), "codegen_cuda_mega: cannot rewrite shared declaration '{}'", line);
  const std::string indent = m[1], type = m[2], decls = m[3], rest = m[4];
  std::string out;
  const std::string list = decls;
  for (auto it = std::sregex_iterator(list.begin(), list.end(), var_re); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1], dims = (*it)[2];
    int64_t n = 1;
    std::vector<std::string> ds;
    for (size_t at = 0; (at = dims.find('[', at)) != std::string::npos; ++at) {
      const size_t end = dims.find(']', at);
      ds.push_back(dims.substr(at + 1, end - at - 1));
      n *= std::stoll(ds.back());
    }
    std::string inner;  // the shape after the first dimension: "[8][33]"
    for (size_t i = 1; i < ds.size(); ++i) inner += "[" + ds[i] + "]";
    const std::string ptr = inner.empty() ? fmt::format("{}*", type) : fmt::format("{} (*)", type) + inner;
    const std::string var = inner.empty() ? fmt::format("{}* {}", type, name) : fmt::format("{} (*{}){}", type, name, inner);
    out += fmt::format("{}{} = reinterpret_cast<{}>(mg_smem + {});{}\n", indent, var, ptr, offset, out.empty() ? rest : "");
    offset += (n * type_bytes(type) + kSmemAlign - 1) / kSmemAlign * kSmemAlign;
  }
  MINIGPT_CHECK(!out.empty(), "codegen_cuda_mega: no array in shared declaration '{}'", line);
  out.pop_back();
  return out;
}

// "blocks.0.ln1.out" -> "blocks_0_ln1_out"
std::string identifier(const std::string& name) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "t_" + s;
  return s;
}

// The bytes a tensor occupies: (buffer, begin, end). Planned intermediates share the arena
// (buffer -1) at their offsets; every other tensor (an alias: what it aliases) is its own buffer.
struct Footprint {
  int64_t buffer, begin, end;
  bool overlaps(const Footprint& o) const { return buffer == o.buffer && begin < o.end && o.begin < end; }
};

Footprint footprint(const Graph& g, int t) {
  const int id = g.tensor(t).alias_of >= 0 ? g.tensor(t).alias_of : t;
  const TensorInfo& ti = g.tensor(id);
  if (ti.arena_offset >= 0) return {-1, ti.arena_offset, ti.arena_offset + ti.bytes()};
  return {id, 0, ti.bytes()};
}

// What the stages since the last cluster barrier touched.
struct Pending {
  std::vector<Footprint> reads, writes;
  bool smem = false;
  bool conflicts(const std::vector<Footprint>& r, const std::vector<Footprint>& w, bool uses_smem) const {
    if (smem && uses_smem) return true;  // slices of one buffer laid out per stage; barrier ids 1..P
    auto any = [](const std::vector<Footprint>& a, const std::vector<Footprint>& b) {
      for (const Footprint& x : a)
        for (const Footprint& y : b)
          if (x.overlaps(y)) return true;
      return false;
    };
    return any(r, writes) || any(w, writes) || any(w, reads);
  }
};

}  // namespace

std::string device_function(const std::string& kernel_text, int block, int64_t& smem_bytes) {
  static const std::regex header_re(R"(extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\()");
  std::smatch m;
  MINIGPT_CHECK(std::regex_search(kernel_text, m, header_re), "codegen_cuda_mega: no __global__ function in the kernel text");
  const std::string name = m[1];
  MINIGPT_CHECK(kernel_text.find("__global__", static_cast<size_t>(m.position(0) + m.length(0))) == std::string::npos,
                "codegen_cuda_mega: {} has more than one __global__ function (a cuBLAS epilogue?): the megakernel needs generated GEMMs",
                name);
  const std::string rest = m.suffix().str();  // the kernel's parameters on, on this line or the next
  std::string s = kernel_text.substr(0, static_cast<size_t>(m.position(0))) +
                  fmt::format("__device__ __noinline__ void {}(const int vb, const int tid, const int bar, char* mg_smem,{}", name,
                              rest.starts_with("\n") ? "" : "\n    ") +
                  rest;
  s = replace_all(s, "__restrict__ ", "");
  s = replace_all(s, "blockIdx.x", "vb");
  s = replace_all(s, "threadIdx.x", "tid");
  s = replace_all(s, "__syncthreads()", fmt::format("mg_bar_sync(bar, {})", block));
  smem_bytes = 0;
  std::string out, line;
  for (size_t i = 0; i < s.size();) {
    const size_t j = s.find('\n', i);
    line = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
    out += (line.find("__shared__ ") != std::string::npos ? rewrite_shared(line, smem_bytes) : line) + "\n";
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

std::string assemble_megakernel(const Graph& g, const std::vector<MegaStage>& stages, const std::string& name, int threads,
                                CudaLaunch& launch) {
  MINIGPT_CHECK(!stages.empty(), "codegen_cuda_mega: a graph without kernels");
  int nt = std::max(32, threads);
  for (const MegaStage& st : stages) nt = std::max(nt, st.launch.block);
  MINIGPT_CHECK(nt <= 1024, "codegen_cuda_mega: a stage of {} threads exceeds a CTA", nt);

  // the megakernel's parameters: one per buffer (an alias resolves to what it aliases), in order
  // of first use
  std::map<int, std::string> param;
  std::vector<int> order;
  std::set<std::string> taken;
  auto param_of = [&](int t) -> std::string {
    if (t < 0) return "nullptr";
    const TensorInfo& ti = g.tensor(t);
    const int id = ti.alias_of >= 0 ? ti.alias_of : t;
    if (auto it = param.find(id); it != param.end()) return it->second;
    std::string p = identifier(g.tensor(id).name);
    if (!taken.insert(p).second) p += fmt::format("_{}", id), taken.insert(p);
    order.push_back(id);
    return param[id] = p;
  };

  std::string fns = kMegaPrelude, body, plan;
  std::map<std::string, std::string> seen;  // loops_key of a device function -> its name
  int64_t smem_max = 0;
  Pending pending;
  int barriers = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const MegaStage& st = stages[i];
    const CudaLaunch& l = st.launch;
    int64_t smem = 0;
    const std::string fn = device_function(st.text, l.block, smem);
    const auto [comment, code] = split_leading_comment(fn);
    const std::string key = loops_key(code, l.function, kCudaTempPrefixes);
    std::string callee = l.function;
    if (auto it = seen.find(key); it != seen.end()) {
      callee = it->second;
      fns += "\n" + comment + fmt::format("//   the same code as {}: the megakernel calls that function\n", callee);
    } else {
      seen.emplace(key, l.function);
      fns += "\n" + fn;
    }
    int side = std::min(nt / l.block, kMaxSide);
    if (smem > 0) {
      MINIGPT_CHECK(smem <= kSmemBudget, "codegen_cuda_mega: {} needs {} B of shared memory per virtual block", l.function, smem);
      side = std::min<int64_t>(side, kSmemBudget / smem);
    }
    smem_max = std::max(smem_max, side * smem);
    std::string args;
    for (int t : l.args) args += ", " + param_of(t);
    // its footprint: every pointer argument may be read; its writes, or (none listed) every argument
    std::vector<Footprint> r, w;
    for (int t : l.args)
      if (t >= 0) r.push_back(footprint(g, t));
    for (int t : st.reads) r.push_back(footprint(g, t));
    for (int t : st.writes) w.push_back(footprint(g, t));
    if (st.writes.empty()) w = r;
    // shared memory and named barriers: a stage using either never runs beside another that does
    const bool on_chip = smem > 0 || fn.find("mg_bar_sync") != std::string::npos;
    if (i > 0) {
      if (pending.conflicts(r, w, on_chip)) {
        body += "  mg_cluster_sync();\n";
        ++barriers;
        pending = Pending{};
      } else {
        body += fmt::format("  // no barrier: stage {} touches nothing the stages since the last barrier write, nor writes what they read\n", i);
      }
    }
    pending.reads.insert(pending.reads.end(), r.begin(), r.end());
    pending.writes.insert(pending.writes.end(), w.begin(), w.end());
    pending.smem = pending.smem || on_chip;
    plan += fmt::format("//   stage {:2}: {} ({} virtual block{} of {} threads, {} per CTA at once{})\n", i, l.function, l.grid,
                        l.grid > 1 ? "s" : "", l.block, side, smem ? fmt::format(", {} B shared each", smem) : "");
    body += fmt::format("  {{  // stage {}: {}\n", i, l.function);
    body += fmt::format("    const int sub = threadIdx.x / {}, tid = threadIdx.x % {};\n", l.block, l.block);
    body += fmt::format("    if (sub < {})\n", side);
    body += fmt::format("      for (int vb = rank + nctas * sub; vb < {}; vb += nctas * {}) {{\n", l.grid, side);
    body += fmt::format("        {}(vb, tid, 1 + sub, mg_smem + sub * {}{});\n", callee, smem, args);
    // the next virtual block of this slot reuses the shared slice: every thread done with it first
    if (smem > 0) body += fmt::format("        mg_bar_sync(1 + sub, {});  // the slice is free again\n", l.block);
    body += "      }\n  }\n";
  }

  std::string sig;
  for (size_t i = 0; i < order.size(); ++i) {
    const TensorInfo& ti = g.tensor(order[i]);
    sig += fmt::format("{}    {}* {}", i ? ",\n" : "", ti.dtype == DType::I32 ? "int" : "float", param[order[i]]);
  }
  std::string k = fmt::format(
      "\n// ---- {}: the whole graph as ONE launch ----------------------------------------------\n"
      "// One thread-block cluster of up to {} CTAs x {} threads runs the {} stages below in order; CTA `rank`\n"
      "// of `nctas` takes virtual blocks rank + nctas * (sub + P * i) of a stage, P side by side; {} cluster\n"
      "// barriers, each before a stage that depends on one since the last. Dynamic shared memory {} B (the\n"
      "// largest stage's slices).\n",
      name, kMegakernelMaxCtas, nt, stages.size(), barriers, smem_max);
  k += plan;
  k += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(\n{}) {{\n", nt, name, sig);
  k += "  extern __shared__ __align__(16) char mg_smem[];\n";
  k += "  const int rank = mg_cluster_rank(), nctas = mg_cluster_ctas();\n";
  k += body + "}\n";

  launch = CudaLaunch{};
  launch.name = name;
  launch.function = name;
  launch.grid = kMegakernelMaxCtas;
  launch.block = nt;
  launch.smem = static_cast<int>(smem_max);
  launch.cluster = kMegakernelMaxCtas;
  launch.args = order;
  return fns + k;
}

}  // namespace minigpt::compile
