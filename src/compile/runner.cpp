// The compiled call (runner.h): lowering, JIT loading, weight binding, the shape guard, the
// debug files and max-autotune's choice between code generation variants.
#include "compile/runner.h"

#include "compile/autotune_gemm.h"
#include "compile/jit.h"
#include "compile/runtime.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/atomic_file.h"
#include "kernels/cpu/linear.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace minigpt::compile {

bool env_logs_output_code() {
  const char* v = std::getenv("MINIGPT_LOGS");
  return v && std::string_view(v).find("output_code") != std::string_view::npos;
}

bool env_compile_debug() {
  const char* v = std::getenv("MINIGPT_COMPILE_DEBUG");
  return v && *v && std::string_view(v) != "0";
}

std::filesystem::path debug_dir_for(const std::string& graph, const std::string& key) {
  if (const char* d = std::getenv("MINIGPT_COMPILE_DEBUG_DIR"); d && *d)
    return std::filesystem::path(d) / fmt::format("{}_{}", graph, key.substr(0, 12));
  return std::filesystem::temp_directory_path() / "minigpt_compile_debug" / fmt::format("{}_{}", graph, key.substr(0, 12));
}

std::string runtime_abi_text() { return std::string(runtime_abi_source()); }

const float* WeightBinding::packed_for(const std::string& name) {
  auto it = packed.find(name);
  if (it != packed.end()) return it->second.data();
  const auto v = values.find(name);
  const auto s = shapes.find(name);
  MINIGPT_CHECK(v != values.end() && s != shapes.end(), "compile: no weight '{}' to pack", name);
  const auto [out, in] = s->second;
  Tensor p = Tensor::empty({cpu::linear_packed_floats(in, out)});
  cpu::linear_pack_weights(v->second, p.data(), in, out);
  return packed.emplace(name, std::move(p)).first->second.data();
}

const float* WeightBinding::packed_gemm(const GeneratedGemm& gemm, const std::string& name) {
  const std::string key = name + "|" + gemm.name;
  auto it = packed.find(key);
  if (it != packed.end()) return it->second.data();
  const auto v = values.find(name);
  MINIGPT_CHECK(v != values.end(), "compile: no weight '{}' to pack", name);
  Tensor p = Tensor::empty({gemm.packed_floats});
  gemm_pack_weights(gemm, v->second, p.data());
  return packed.emplace(key, std::move(p)).first->second.data();
}

WeightBinding bind_weights(const ModelWeights& w) {
  WeightBinding b;
  for (const auto& [name, t] : w.named()) {
    b.values[name] = t->data();
    if (t->dim() == 2) b.shapes[name] = {t->shape()[0], t->shape()[1]};
  }
  return b;
}

WeightBinding bind_tinyhead(const TinyHead& h) {
  WeightBinding b;
  b.values["fc.weight"] = h.weight.data();
  b.values["fc.bias"] = h.bias.data();
  b.shapes["fc.weight"] = {TinyHead::kOut, TinyHead::kIn};
  return b;
}

Lowered lower(const Graph& captured, const CompileOptions& opt) {
  Lowered l;
  const Timer t0;
  const Graph planned = run_passes(captured, opt.passes);
  l.schedule = schedule(planned, opt.codegen.gemm, opt.codegen.gemm_picks);
  l.passes_s = t0.elapsed_s();
  const Timer t1;
  CodegenOptions cg = opt.codegen;
  cg.runtime_abi = runtime_abi_text();
  l.code = generate_cpp(l.schedule, cg);
  l.codegen_s = t1.elapsed_s();
  return l;
}

void write_debug_files(const std::filesystem::path& dir, const Graph& captured, const Lowered& l) {
  std::filesystem::create_directories(dir);
  io::write_file_atomic((dir / "ir_pre_fusion.txt").string(), print_graph(captured, "pre-fusion"));
  io::write_file_atomic((dir / "ir_post_fusion.txt").string(), print_graph(l.schedule.graph, "post-fusion, buffers planned"));
  io::write_file_atomic((dir / "schedule.txt").string(), print_schedule(l.schedule));
  io::write_file_atomic((dir / "output_code.cpp").string(), l.code.source);
  std::filesystem::create_directories(dir / "kernels");
  for (const GeneratedKernel& k : l.code.kernels)
    io::write_file_atomic((dir / "kernels" / (k.name + ".cpp")).string(), k.text);
}

// ---- CompiledGraph ----------------------------------------------------------------------

namespace {

// One lowering + JIT load; what max-autotune compares.
struct Built {
  Lowered lowered;
  std::shared_ptr<JitLibrary> lib;
  std::string variant;
};

Built build(const Graph& captured, const CompileOptions& opt, const std::string& variant) {
  Built b;
  b.variant = variant;
  b.lowered = lower(captured, opt);
  JitRequest req;
  req.source = b.lowered.code.source;
  req.key_extra = fmt::format("codegen_cpp v{} graph {} {}", kCodegenCppVersion, graph_hash(b.lowered.schedule.graph), variant);
  req.name = captured.name;
  req.cache_dir = opt.cache_dir;
  b.lib = jit_load(req);
  return b;
}

}  // namespace

CompiledGraph::CompiledGraph(const Graph& captured, WeightBinding& weights, const CompileOptions& opt)
    : captured_(captured) {
  const Timer t0;
  Built built;
  if (opt.mode == "max-autotune") {
    // every distinct GEMM shape's generated variants against the engine's GEMM, timed by the
    // shared harness (autotune_gemm.h, one source for all shapes), then one build with the picks
    MINIGPT_CHECK(opt.codegen.gemm != GemmBackend::kEngine || opt.codegen.gemm_picks.empty(),
                  "compile: max-autotune with the engine's GEMM forced has nothing to tune");
    CompileOptions o = opt;
    const Graph planned = run_passes(captured, opt.passes);
    auto weight = [&](const std::string& name) {
      const auto it = weights.values.find(name);
      MINIGPT_CHECK(it != weights.values.end(), "compile: graph {} needs weight '{}', which the model does not have", captured.name, name);
      return it->second;
    };
    std::string report;
    o.codegen.gemm_picks = autotune_graph_gemms(planned, weight, {}, opt.cache_dir, &report);
    if (!opt.quiet && !report.empty()) fmt::print(stderr, "minigpt compile: max-autotune GEMM picks for {}:\n{}", captured.name, report);
    built = build(captured, o, fmt::format("vec{} tuned-gemm", o.codegen.vec_width));
  } else {
    MINIGPT_CHECK(opt.mode == "default", "compile: unknown mode '{}' (default | max-autotune)", opt.mode);
    built = build(captured, opt, fmt::format("vec{} {}", opt.codegen.vec_width, gemm_backend_name(opt.codegen.gemm)));
  }
  // bind weights (and their packed forms) into io slots
  auto adopt = [&](Built& b) {
    schedule_ = b.lowered.schedule;
    code_ = b.lowered.code;
    lib_ = b.lib;
    stats_.passes_s = b.lowered.passes_s;
    stats_.codegen_s = b.lowered.codegen_s;
    stats_.cache_hit = lib_->cache_hit();
    stats_.jit_s = lib_->compile_seconds() + lib_->load_seconds();
    stats_.key = lib_->key();
    stats_.variant = b.variant;
    call_ = reinterpret_cast<decltype(call_)>(lib_->symbol(code_.entry));
    call_kernel_ = reinterpret_cast<decltype(call_kernel_)>(lib_->symbol("call_kernel"));
    arena_ = Tensor::empty({std::max<int64_t>(16, (schedule_.graph.arena_bytes + 3) / 4)});
    io_.assign(code_.io.size(), nullptr);
    position_caps_.clear();
    const Graph& sg = schedule_.graph;
    for (size_t k = 0; k < sg.inputs.size(); ++k)
      if (const int64_t cap = position_capacity(sg, sg.inputs[k]); cap > 0) position_caps_.emplace_back(k, cap);
    for (size_t i = 0; i < code_.io.size(); ++i) {
      const IoSlot& s = code_.io[i];
      if (s.kind == IoSlot::Kind::Weight) {
        const auto it = weights.values.find(s.name);
        MINIGPT_CHECK(it != weights.values.end(), "compile: graph {} needs weight '{}', which the model does not have", captured.name, s.name);
        io_[i] = const_cast<float*>(it->second);
      } else if (s.kind == IoSlot::Kind::Packed && s.gemm.empty()) {
        io_[i] = const_cast<float*>(weights.packed_for(s.name));
      } else if (s.kind == IoSlot::Kind::Packed) {
        const auto gm = std::find_if(code_.gemms.begin(), code_.gemms.end(), [&](const GeneratedGemm& g) { return g.name == s.gemm; });
        MINIGPT_CHECK(gm != code_.gemms.end(), "compile: io slot names GEMM {} which the source lacks", s.gemm);
        io_[i] = const_cast<float*>(weights.packed_gemm(*gm, s.name));
      }
    }
  };
  adopt(built);
  stats_.total_s = t0.elapsed_s();
  const bool debug = env_compile_debug() || !opt.dump_dir.empty();
  if (env_logs_output_code() && !opt.quiet) fmt::print(stderr, "{}\n", code_.source);
  if (debug) {
    const Lowered l{schedule_, code_, stats_.passes_s, stats_.codegen_s};
    const std::filesystem::path dir = opt.dump_dir.empty() ? debug_dir_for(captured.name, stats_.key) : opt.dump_dir;
    write_debug_files(dir, captured, l);
    if (!opt.quiet) fmt::print(stderr, "minigpt compile: debug files for {} in {}\n", captured.name, dir.string());
  }
}

CompiledGraph::~CompiledGraph() = default;

void CompiledGraph::bind_io(std::span<const void* const> inputs, std::span<float* const> outputs) {
  const Graph& g = schedule_.graph;
  MINIGPT_CHECK(inputs.size() == g.inputs.size() && outputs.size() == g.outputs.size(),
                "compiled {}: expected {} inputs and {} outputs, got {} and {}", g.name, g.inputs.size(),
                g.outputs.size(), inputs.size(), outputs.size());
  // the guard on runtime positions: the generated code indexes the caches with them unchecked
  for (const auto& [k, cap] : position_caps_) {
    const int32_t pos = *static_cast<const int32_t*>(inputs[k]);
    MINIGPT_CHECK(pos >= 0 && pos < cap, "compiled {}: position {} ('{}') outside the compiled capacity [0, {})", g.name, pos,
                  g.tensor(g.inputs[k]).name, cap);
  }
  size_t i = 0;
  for (const void* p : inputs) io_[i++] = const_cast<void*>(p);
  for (float* p : outputs) io_[i++] = p;
}

void CompiledGraph::run(std::span<const void* const> inputs, std::span<float* const> outputs, ThreadPool& pool) {
  bind_io(inputs, outputs);
  const MgRuntime rt = make_runtime(pool);
  call_(&rt, reinterpret_cast<char*>(arena_.data()), io_.data());
}

void CompiledGraph::run_kernel(int index, ThreadPool& pool) {
  MINIGPT_CHECK(index >= 0 && index < static_cast<int>(schedule_.kernels.size()), "run_kernel: no kernel {}", index);
  const MgRuntime rt = make_runtime(pool);
  call_kernel_(&rt, reinterpret_cast<char*>(arena_.data()), io_.data(), index);
}

// ---- CompiledModel ----------------------------------------------------------------------

void prepare_forward(const ModelConfig& c, const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs) {
  MINIGPT_CHECK(B >= 0 && T >= 1 && T <= c.block_size, "compiled forward: bad shape (B={}, T={}), block_size {}", B, T, c.block_size);
  for (int64_t i = 0; i < B * T; ++i)
    MINIGPT_CHECK(ids[i] >= 0 && ids[i] < c.vocab_size, "token id {} at (batch {}, position {}) is outside the vocabulary [0, {})",
                  ids[i], i / T, i % T, c.vocab_size);
  const Shape shape{B, T, c.vocab_size};
  if (!logits.defined() || logits.shape() != shape) logits = Tensor::empty(shape);
  if (!probs.defined() || probs.shape() != shape) probs = Tensor::empty(shape);
}

CompiledModel::CompiledModel(const GrammarMiniGPT& model, CompileOptions opt)
    : model_(&model), opt_(std::move(opt)), weights_(bind_weights(model.weights())) {}

CompiledGraph& CompiledModel::graph_for(int64_t B, int64_t T) {
  return graphs_.get(B, T, "gpt", opt_.quiet, [&] {
    const Graph g = capture_gpt(model_->config(), B, T);
    auto cg = std::make_unique<CompiledGraph>(g, weights_, opt_);
    if (!opt_.quiet)
      fmt::print(stderr, "minigpt compile: {} ready in {:.3f} s ({}; {} kernels)\n", g.name, cg->stats().total_s,
                 cg->stats().cache_hit ? "cache hit" : "compiled", cg->schedule().kernels.size());
    return cg;
  });
}

void CompiledModel::forward(const int32_t* ids, int64_t B, int64_t T, Tensor& logits, Tensor& probs, ThreadPool& pool) {
  prepare_forward(model_->config(), ids, B, T, logits, probs);
  if (B == 0) return;  // empty batch: no kernel runs
  CompiledGraph& g = graph_for(B, T);
  const void* in[] = {ids};
  float* out[] = {logits.data(), probs.data()};
  g.run(in, out, pool);
}

// ---- CompiledDecoder --------------------------------------------------------------------

CompiledDecoder::CompiledDecoder(const GrammarMiniGPT& model, CompileOptions opt)
    : model_(&model), opt_(std::move(opt)), weights_(bind_weights(model.weights())) {
  const ModelConfig& c = model.config();
  for (int l = 0; l < c.n_layer; ++l) {
    k_cache_.push_back(Tensor::zeros({c.block_size, c.d_model}));
    v_cache_.push_back(Tensor::zeros({c.block_size, c.d_model}));
  }
  // the graph's inputs: id and t (set per step), then each layer's caches (fixed)
  in_.assign(2, nullptr);
  for (int l = 0; l < c.n_layer; ++l) {
    in_.push_back(k_cache_[static_cast<size_t>(l)].data());
    in_.push_back(v_cache_[static_cast<size_t>(l)].data());
  }
  logits_ = Tensor::empty({1, 1, c.vocab_size});
}

CompiledGraph& CompiledDecoder::graph() {
  if (graph_) return *graph_;
  CompileOptions o = opt_;
  o.quiet = true;
  graph_ = std::make_unique<CompiledGraph>(capture_gpt_decode(model_->config()), weights_, o);
  ++compiles_;
  return *graph_;
}

std::span<const float> CompiledDecoder::step(int32_t id, ThreadPool& pool) {
  const ModelConfig& c = model_->config();
  MINIGPT_CHECK(id >= 0 && id < c.vocab_size, "token id {} is outside the vocabulary [0, {})", id, c.vocab_size);
  MINIGPT_CHECK(pos_ < c.block_size, "the context is full: the model's block_size is {} tokens and {} were fed", c.block_size, pos_);
  CompiledGraph& g = graph();  // one graph for every position: t is its "pos" input
  const int32_t t = static_cast<int32_t>(pos_);
  in_[0] = &id;
  in_[1] = &t;
  float* out[] = {logits_.data()};
  g.run(in_, out, pool);
  ++pos_;
  return {logits_.data(), static_cast<size_t>(c.vocab_size)};
}

}  // namespace minigpt::compile
