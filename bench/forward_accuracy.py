"""How far the engine's logits are from the exact forward, on the CPU and on the GPU.

The forward at (B = 2, T = 16) of `minigpt bench model` (its ids: std::mt19937_64(42) % 611, 32
draws, listed below), computed five ways and each set against a float64 forward of the NumPy
reference (python/minigpt/numpy_minigpt.py with every op in float64) and against the CPU engine:
NumPy in float32, the CPU engine, and, when a CUDA device is visible, the GPU's default plan and
its megakernel with either summation order of the attention's projection (MINIGPT_MEGA_PROJ=
columns: k in order, as the CPU; heads: each head's 16-term partial, then the heads in order).
A GPU figure against the CPU says little alone: two fp32 forwards that sum in different orders
differ by about what each is from float64 (REPORT.md 7b of experiments/25-compile), so the
float64 column says which one is nearer the exact result.

    PYTHONPATH=python:build/default/python python3 bench/forward_accuracy.py [model]

FORWARD_ACCURACY_ROWS_VARIANTS="bitw" adds a row per named MINIGPT_MEGA_ROWS_VARIANT of
the default plan (at (2, 16) the row-split forward, kernels/cuda/gpt_mega_rows.h).
Each GPU setting runs in its own process (the plan, with its proj, is made once per shape).
"""
import os
import subprocess
import sys

import numpy as np

import minigpt.numpy_minigpt as nm
from minigpt.model_io import load_model

# std::mt19937_64 rng(42); rng() % 611, 32 times (src/cli/cmd_bench_model.cpp's draw)
IDS = np.array([482, 307, 480, 526, 370, 277, 185, 10, 333, 362, 288, 459, 12, 345, 412, 116,
                363, 542, 233, 494, 271, 568, 24, 98, 299, 85, 219, 525, 270, 609, 24, 483],
               dtype=np.int32).reshape(2, 16)


def engine_logits(path, device):
    """The C++ engine's logits on `device`, as float64."""
    import minigpt
    logits, _ = minigpt.Model.load(path, device=device).forward(IDS)
    return np.asarray(logits, dtype=np.float64)


def gpu_logits_in_child(path, proj, rows_variant=""):
    """The GPU's logits with MINIGPT_MEGA_PROJ=proj ("" = the default plan) and
    MINIGPT_MEGA_ROWS_VARIANT=rows_variant ("" = the default), from a child process (the variant
    is always set: one exported by the caller does not reach the default rows)."""
    env = dict(os.environ, MINIGPT_MEGA_PROJ=proj, MINIGPT_MEGA_ROWS_VARIANT=rows_variant)
    out = subprocess.run([sys.executable, __file__, "--child", path], env=env, check=True,
                         stdout=subprocess.PIPE).stdout
    return np.frombuffer(out, dtype=np.float64).reshape(IDS.shape + (-1,))


def cuda_visible(path):
    try:
        import minigpt
        minigpt.Model.load(path, device="cuda")
        return True
    except Exception as e:  # no GPU, or a build without CUDA: say so, and compare the CPU only
        print(f"(no GPU rows: {e})")
        return False


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        sys.stdout.buffer.write(engine_logits(sys.argv[2], "cuda").tobytes())
        return
    path = sys.argv[1] if len(sys.argv) > 1 else "models/grammar-minigpt.safetensors"
    f = load_model(path)
    exact = nm.logits_in_precision(f, IDS, np.float64)
    cpu = engine_logits(path, "cpu")
    rows = [("NumPy float32", nm.logits_in_precision(f, IDS, np.float32)), ("CPU engine", cpu)]
    if cuda_visible(path):
        for label, proj in (("GPU default plan", ""), ("GPU megakernel, proj by columns", "columns"),
                            ("GPU megakernel, proj by heads", "heads")):
            rows.append((label, gpu_logits_in_child(path, proj)))
        for variant in os.environ.get("FORWARD_ACCURACY_ROWS_VARIANTS", "").split():
            rows.append((f"GPU default plan, rows {variant}", gpu_logits_in_child(path, "", variant)))
    print(f"forward (B, T) = {IDS.shape}, max |logit difference|")
    print(f"{'':34} {'vs float64':>11} {'vs CPU engine':>14}")
    for label, logits in rows:
        print(f"{label:34} {np.abs(logits - exact).max():11.3g} {np.abs(logits - cpu).max():14.3g}")


if __name__ == "__main__":
    main()
