// `minigpt generate -m MODEL -p "..." -n N --temp T --top-k K -s SEED`: samples a continuation
// of the prompt with the KV-cache Decoder, one token at a time, and prints it.
//
// The prompt is preceded by <bos> (as training sentences are). Generation stops after N new
// tokens, at <eos>, or when the context (block_size) is full, which is reported on stderr.
// --temp 0 is greedy decoding. The same seed, prompt and model give the same text.
// --device cuda: CudaDecoder::generate, which chooses the tokens on the GPU where it can (the
// megakernel's decode loop: one launch for all the tokens) and gives the CPU loop's tokens.
#include "cli/commands.h"
#include "cli/device.h"
#include "compile/runner.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "data/tokenizer.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/model_file.h"
#include "model/sampling.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace minigpt::cli {

namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int n = 32;
  float temperature = 0.8f;
  int top_k = 40;
  uint64_t seed = 42;
  bool compile = false;
  std::string device = "cpu";
};

void run_generate(const GenerateOptions& opt, const GlobalOptions& global) {
  const SamplingParams params{opt.temperature, opt.top_k};
  params.validate();
  ModelFile file = load_model(resolve_model_path(opt.model));
  const Tokenizer tokenizer(file.vocab);
  const GrammarMiniGPT model(file.config, std::move(file.weights));

  Tokenizer::Encoded enc = tokenizer.encode(opt.prompt);
  for (const std::string& w : enc.unknown) {
    fmt::print(stderr, "minigpt: warning: '{}' is not in the model's vocabulary; it becomes <unk>\n", w);
  }
  std::vector<int32_t> prompt = {Tokenizer::kBos};
  prompt.insert(prompt.end(), enc.ids.begin(), enc.ids.end());

  auto report = [&](const Generation& g, int64_t capacity) {
    const std::string text = tokenizer.decode(enc.ids);
    const std::string continuation = tokenizer.decode(g.tokens);
    const std::string stop = g.stop == Generation::Stop::Eos           ? std::string("<eos>")
                             : g.stop == Generation::Stop::ContextFull ? fmt::format("context full ({} tokens)", capacity)
                                                                       : fmt::format("-n {}", opt.n);
    fmt::print("{}{}{}\n", text, text.empty() || continuation.empty() ? "" : " ", continuation);
    fmt::print(stderr, "[{} tokens generated, stopped at {}; seed {}, temp {}, top-k {}]\n", g.tokens.size(), stop,
               opt.seed, opt.temperature, opt.top_k);
  };
  if (is_cuda(opt.device)) {  // the loop below, on the GPU (CudaDecoder::generate)
    CudaGPT gpu(model);
    CudaDecoder decoder(gpu);
    check_room_to_generate(static_cast<int64_t>(prompt.size()), decoder.capacity());
    return report(decoder.generate(prompt, opt.n, params, opt.seed, Tokenizer::kEos), decoder.capacity());
  }

  ThreadPool pool(global.resolved_threads());
  // eager Decoder (CPU), or the compiled decode step (one graph for every position, JIT-cached
  // on disk)
  DeviceDecoder decoder(model, opt.device);
  std::unique_ptr<compile::CompiledDecoder> compiled;
  if (opt.compile) compiled = std::make_unique<compile::CompiledDecoder>(model);
  auto step = [&](int32_t id) { return compiled ? compiled->step(id, pool) : decoder.step(id, pool); };
  auto position = [&] { return compiled ? compiled->position() : decoder.position(); };
  check_room_to_generate(static_cast<int64_t>(prompt.size()), decoder.capacity());
  std::span<const float> logits;
  if (compiled) {
    for (int32_t id : prompt) logits = step(id);
  } else {
    logits = decoder.prefill(prompt, pool);
  }
  const auto full = [&] { return position() == decoder.capacity(); };
  report(sample_loop(logits, step, full, params, opt.seed, opt.n, Tokenizer::kEos), decoder.capacity());
}

}  // namespace

void add_generate_command(CLI::App& app, GlobalOptions& global) {
  auto opt = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample a continuation of a prompt (KV-cache decoding)");
  cmd->add_option("-m,--model", opt->model, "model file (default: the shipped model)");
  cmd->add_option("-p,--prompt", opt->prompt, "text to continue (may be empty: start of a sentence)");
  cmd->add_option("-n,--n-predict", opt->n, "most new tokens to generate")->check(CLI::Range(0, 1000000));
  cmd->add_option("--temp", opt->temperature, "sampling temperature; 0 = greedy");
  cmd->add_option("--top-k", opt->top_k, "sample from the k most likely tokens; 0 = all");
  cmd->add_option("-s,--seed", opt->seed, "random seed");
  auto* compile = cmd->add_flag("--compile", opt->compile, "run the compiled decode step (minigpt compile) instead of eager");
  add_device_option(cmd, opt->device)->excludes(compile);
  cmd->callback([opt, &global] { run_generate(*opt, global); });
}

}  // namespace minigpt::cli
