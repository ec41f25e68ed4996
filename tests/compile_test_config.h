// The small model config the compiler's IR and pass tests capture (2 blocks, 2 heads of 16,
// d 32, V 50: a row length that is not a multiple of the vector width).
#pragma once

#include "model/config.h"

inline minigpt::ModelConfig compile_tiny_config() {
  minigpt::ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 32;
  c.block_size = 16;
  c.vocab_size = 50;
  return c;
}
