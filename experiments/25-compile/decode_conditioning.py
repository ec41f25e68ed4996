"""How far apart two fp32 implementations of the shipped model may be over a 64-token decode
(REPORT.md section 7b): the NumPy reference in float32 and in float64 on the 64 tokens of
tests/cuda/compile_cuda_test.cpp's decode tests (std::mt19937_64 seed 5, % 611, listed below),
and, given the CPU eager decoder's logits (a raw float32 file of 64 x 611 values written by
decode_logits.cpp beside this file), that decoder against both.

    PYTHONPATH=python python3 experiments/25-compile/decode_conditioning.py [decoder_logits.bin]

Prints per-position and maximum differences. NumPy only; minutes on one core at most.
"""
import sys

import numpy as np

import minigpt.numpy_minigpt as nm
from minigpt.model_io import load_model

# std::mt19937_64 rng(5); rng() % 611, 64 times (the C++ tests' draw)
IDS = [430, 50, 526, 10, 238, 277, 585, 433, 308, 387, 574, 340, 12, 135, 2, 599, 135, 436, 347, 281, 88, 220,
       405, 319, 442, 449, 27, 271, 94, 534, 492, 507, 203, 61, 184, 241, 515, 48, 381, 291, 534, 29, 268, 285,
       384, 271, 486, 479, 105, 276, 41, 534, 294, 481, 71, 208, 48, 504, 453, 548, 21, 532, 46, 497]


def main():
    f = load_model("models/grammar-minigpt.safetensors")
    exact = nm.logits_in_precision(f, np.array([IDS]), np.float64)[0]
    f32 = nm.logits_in_precision(f, np.array([IDS]), np.float32)[0]
    d = np.abs(f32 - exact).max(axis=-1)
    print(f"NumPy fp32 vs float64: max {d.max():.3g} at position {d.argmax()}")
    if len(sys.argv) > 1:
        dec = np.fromfile(sys.argv[1], dtype=np.float32).reshape(len(IDS), -1).astype(np.float64)
        e = np.abs(dec - exact).max(axis=-1)
        print(f"CPU eager decoder vs float64: max {e.max():.3g} at position {e.argmax()}; "
              f"above 1e-5 at {int((e > 1e-5).sum())} of {len(IDS)} positions")
        print("  per position (1e-6):", np.round(e * 1e6, 1).tolist())
        g = np.abs(dec - f32).max(axis=-1)
        print(f"CPU eager decoder vs NumPy fp32: max {g.max():.3g} at position {g.argmax()}")


if __name__ == "__main__":
    main()
