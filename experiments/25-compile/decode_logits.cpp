// The CPU eager decoder's logits over the 64 tokens of tests/cuda/compile_cuda_test.cpp's decode
// tests (std::mt19937_64 seed 5, % vocabulary), as one raw float32 file (64 x V), for
// decode_conditioning.py. From the repository root, after `cmake --build build/default`:
//   g++ -std=c++20 -O2 -Isrc experiments/25-compile/decode_logits.cpp -o /tmp/decode_logits \
//     build/default/src/model/libminigpt_model.a build/default/src/kernels/cpu/libminigpt_kernels_cpu.a \
//     build/default/src/io/libminigpt_io.a build/default/src/data/libminigpt_data.a \
//     build/default/src/core/libminigpt_core.a -lfmt -lopenblas -lz -lpthread \
//     -L$(dirname $(which nvcc))/../lib64 -lcudart
//   /tmp/decode_logits /tmp/decoder_logits.bin
#include "core/thread_pool.h"
#include "model/decoder.h"
#include "model/gpt.h"
#include "model/model_file.h"

#include <cstdio>
#include <random>

using namespace minigpt;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.bin\n", argv[0]);
    return 2;
  }
  ModelFile f = load_model("models/grammar-minigpt.safetensors");
  const GrammarMiniGPT model(f.config, std::move(f.weights));
  Decoder eager(model);
  ThreadPool pool(1);
  std::mt19937_64 rng(5);
  FILE* out = std::fopen(argv[1], "wb");
  if (!out) return 1;
  for (int64_t t = 0; t < f.config.block_size; ++t) {
    const int32_t id = static_cast<int32_t>(rng() % static_cast<uint64_t>(f.config.vocab_size));
    const auto logits = eager.step(id, pool);
    std::fwrite(logits.data(), sizeof(float), logits.size(), out);
  }
  return std::fclose(out) == 0 ? 0 : 1;
}
