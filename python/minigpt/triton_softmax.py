"""The Triton row softmax for (B, V) fp32 on the GPU: a program per row.

    from minigpt.triton_softmax import softmax, picked_config
    y = softmax(x)                     # x: torch.float32 (B, V) on CUDA
    picked_config(B, V)                # {"BLOCK": 1024, "num_warps": 4} once tuned

One kernel, `@triton.autotune`d over BLOCK in {256, 512, 1024, 2048} and num_warps in {2, 4, 8},
keyed by V and by B rounded up to a power of two (so (64, 600), (512, 600) and (4096, 600) each
get their own choice). V <= BLOCK: the row is read once into registers (max, exp, sum, write).
V > BLOCK: an online first pass keeps a per-lane running max and sum over the row's blocks,
then a second pass writes exp(x - M) / S. The choice is cached by Triton's own autotune cache
(`cache_results=True`, on disk under Triton's cache folder, TRITON_CACHE_DIR or
~/.triton/cache) where the installed Triton supports it; always in memory for the process.

Semantics (docs/ARCHITECTURE.md): a row holding a NaN or +inf gives a NaN row, an all -inf row gives a
NaN row, [1e30, 0, -1e30] gives [1, 0, 0]; B == 0 launches nothing.

`python -m minigpt.triton_softmax graph-bench --shapes 64x600,512x600 --json` prints the graph-mode
times of torch.softmax, of this kernel and of minigpt's fused CUDA kernel (called on the same
torch tensors through minigpt.core.softmax_cuda_into when the C++ module is importable): 100
calls captured in one CUDA graph per kernel, the graphs replayed in turn, time per call. `minigpt
bench softmax --device cuda` merges them into its table.
"""
from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys

import torch
import triton
import triton.language as tl

BLOCKS = (256, 512, 1024, 2048)
WARPS = (2, 4, 8)
TUNED_SHAPES = ((64, 600), (512, 600), (4096, 600))

_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in BLOCKS for w in WARPS]
_AUTOTUNE_KW = {"configs": _CONFIGS, "key": ["V", "B_BUCKET"]}
# Triton >= 3.3 can keep the autotune choice on disk; older versions tune once per process.
if "cache_results" in inspect.signature(triton.autotune).parameters:
    _AUTOTUNE_KW["cache_results"] = True
AUTOTUNE_CACHE = "triton cache_results (disk)" if "cache_results" in _AUTOTUNE_KW else "in-process only"


@triton.autotune(**_AUTOTUNE_KW)
@triton.heuristics({"ONE_PASS": lambda args: args["V"] <= args["BLOCK"]})
@triton.jit
def _softmax_kernel(x_ptr, y_ptr, V, stride_x, stride_y, B_BUCKET, BLOCK: tl.constexpr,
                    ONE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < V
        x = tl.load(x_row + cols, mask=mask, other=-float("inf"))
        m = tl.max(x, axis=0)
        # all -inf: x - m = NaN -> NaN row; +inf: inf - inf = NaN; NaN propagates through the sum.
        e = tl.exp(x - m)
        e = tl.where(mask, e, 0.0)
        s = tl.sum(e, axis=0)
        tl.store(y_row + cols, e / s, mask=mask)
    else:
        # Pass 1: per lane, the running max m and the sum s of exp(x - m) over the row's blocks.
        # A lane that has seen only -inf shifts by 0 so that -inf - -inf never makes a NaN.
        m_vec = tl.full([BLOCK], -float("inf"), tl.float32)
        s_vec = tl.zeros([BLOCK], tl.float32)
        for off in range(0, V, BLOCK):
            mask = off + cols < V
            x = tl.load(x_row + off + cols, mask=mask, other=-float("inf"))
            m_new = tl.maximum(m_vec, x)
            sh = tl.where(m_new == -float("inf"), 0.0, m_new)
            s_vec = s_vec * tl.exp(m_vec - sh) + tl.exp(x - sh)
            m_vec = m_new
        M = tl.max(m_vec, axis=0)
        shM = tl.where(M == -float("inf"), 0.0, M)
        S = tl.sum(s_vec * tl.exp(m_vec - shM), axis=0)  # all -inf row: S = 0 -> 0/0 = NaN below
        # Pass 2: write.
        for off in range(0, V, BLOCK):
            mask = off + cols < V
            x = tl.load(x_row + off + cols, mask=mask, other=-float("inf"))
            tl.store(y_row + off + cols, tl.exp(x - shM) / S, mask=mask)


def _bucket(b: int) -> int:
    p = 1
    while p < b:
        p *= 2
    return p


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of a (B, V) float32 CUDA tensor; returns a new tensor."""
    if x.ndim != 2 or x.dtype != torch.float32:
        raise ValueError(f"softmax expects a (B, V) float32 tensor, got {tuple(x.shape)} {x.dtype}")
    if x.shape[1] < 1:
        raise ValueError("softmax needs V >= 1")
    x = x.contiguous()
    y = torch.empty_like(x)
    b, v = x.shape
    if b == 0:
        return y
    _softmax_kernel[(b,)](x, y, v, x.stride(0), y.stride(0), _bucket(b))
    return y


def picked_config(b: int, v: int) -> dict | None:
    """The autotuner's choice for (b, v) as {"BLOCK", "num_warps"}; None if not tuned yet."""
    for key, cfg in getattr(_softmax_kernel, "cache", {}).items():
        if len(key) >= 2 and key[0] == v and key[1] == _bucket(b):
            return {"BLOCK": cfg.kwargs["BLOCK"], "num_warps": cfg.num_warps}
    return None


def tune(shapes=TUNED_SHAPES, seed: int = 42) -> dict:
    """Runs (and so autotunes) the kernel once per shape; returns {"BxV": picked_config}."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for b, v in shapes:
        x = (torch.rand(b, v, generator=gen) * 16 - 8).cuda()
        softmax(x)
        out[f"{b}x{v}"] = picked_config(b, v)
    torch.cuda.synchronize()
    return out


def minigpt_fused():
    """minigpt's fused CUDA kernel (its autotuned config) as fn(x) -> y on torch CUDA tensors,
    through minigpt.core.softmax_cuda_into on the current stream (no copy), so that it is timed
    in the same process and the same CUDA graphs as torch.softmax and Triton. Returns (fn, None),
    or (None, reason) when the C++ module is not importable or was built without CUDA."""
    try:
        from minigpt import core
    except ImportError as e:
        return None, f"minigpt fused skipped: the C++ module is not importable ({e})"
    if not hasattr(core, "softmax_cuda_into") or "fused_tuned" not in core.softmax_kernels("cuda"):
        return None, "minigpt fused skipped: the C++ module was built without CUDA"

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        core.softmax_cuda_into(x, y, "fused_tuned", torch.cuda.current_stream().cuda_stream)
        return y

    return fn, None


def graph_times_us(fns: dict, x: torch.Tensor, launches: int = 100, reps: int = 7) -> dict:
    """Time per call of each fn(x) with `launches` calls captured in one CUDA graph per fn;
    median of `reps` replays. The replays alternate between the fns (round-robin, each waited
    for), so that every fn meets the same GPU state: on the H200 the time per launch of one
    tiny kernel drifted by ~12% between the start and the end of one process."""
    graphs = {}
    for name, fn in fns.items():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up (and autotune) outside the capture
            for _ in range(3):
                fn(x)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(launches):
                fn(x)
        g.replay()
        graphs[name] = g
    torch.cuda.synchronize()
    times = {name: [] for name in graphs}
    for _ in range(reps):
        for name, g in graphs.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times[name].append(a.elapsed_time(b) * 1e3 / launches)
    return {name: statistics.median(t) for name, t in times.items()}


def _graph_bench(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m minigpt.triton_softmax graph-bench")
    ap.add_argument("--shapes", default="64x600,512x600,4096x600")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--launches", type=int, default=100)
    ap.add_argument("--json", action="store_true", help="(default) print JSON")
    args = ap.parse_args(argv)
    out = {"torch_version": torch.__version__, "triton_version": triton.__version__,
           "autotune_cache": AUTOTUNE_CACHE, "results": [], "notes": [], "triton_autotune": {}}
    if not torch.cuda.is_available():
        out["notes"].append("torch sees no CUDA device; no graph-mode peer timings")
        print(json.dumps(out))
        return 0
    peers = {"torch.softmax graph": lambda t: torch.softmax(t, dim=-1), "triton graph": softmax}
    fused, reason = minigpt_fused()
    if fused is not None:
        peers["minigpt fused graph"] = fused
    else:
        out["notes"].append(reason)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    for item in filter(None, args.shapes.split(",")):
        b, v = (int(t) for t in item.split("x"))
        x = (torch.rand(b, v, generator=gen) * 16 - 8).cuda()
        working = {}
        for name, fn in peers.items():  # a peer that fails leaves its cells empty, with the reason
            try:
                fn(x)
                working[name] = fn
            except Exception as e:
                out["notes"].append(f"{name} at ({b}, {v}) failed: {type(e).__name__}: {e}")
        for name, us in graph_times_us(working, x, args.launches).items():
            out["results"].append({"peer": name, "B": b, "V": v, "time_us": us, "runs": args.launches})
        out["triton_autotune"][item] = picked_config(b, v)
    print(json.dumps(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "graph-bench":
        return _graph_bench(argv[1:])
    if argv and argv[0] == "tune":
        print(json.dumps({"autotune_cache": AUTOTUNE_CACHE, "picked": tune()}))
        return 0
    print("usage: python -m minigpt.triton_softmax graph-bench|tune [options]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
