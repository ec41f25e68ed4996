#!/usr/bin/env python3
"""The peers of `minigpt bench softmax`: torch.softmax, torch.compile of it and (on CUDA, when
importable) the Triton kernel minigpt.triton_softmax, timed per shape.

    python3 bench/peers/softmax_peers.py --device cpu --threads 2 --shapes 64x600,4096x32000 --json

`minigpt bench softmax` runs this as a subprocess (PYTHONPATH = the repo's python/ folder) and
merges the timings into its table; it can also run beside it. Timing follows the C++ side:
inputs uniform in [-8, 8) from --seed, a few untimed calls, then the median of timed calls
(at least 5, at most --repeats or about 1 s per row). CPU: time.perf_counter around each call,
torch.set_num_threads(--threads), each peer timed back to back. CUDA: CUDA events per call, L2
flushed before each call by writing a 256 MiB buffer (outside the timed region), the peers'
calls alternating so that all meet the same GPU state; minigpt's own fused kernel joins them
(peer "minigpt fused", through minigpt.core.softmax_cuda_into on the same tensors) when the C++
module is importable.

Output (--json): {"torch_version", "device", "threads", "results": [{"peer", "B", "V",
"time_us", "runs"}], "notes": [...]}; one note says how the sides were kept fair. Without
torch it prints the same object with no results ("torch_version": null) and a note saying why,
and exits 0: the caller leaves its peer columns empty.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

TIME_BUDGET_S = 1.0
MIN_RUNS = 5


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        if not item:
            continue
        b, v = item.split("x")
        shapes.append((int(b), int(v)))
    return shapes


def time_cpu(fn, warmup: int, repeats: int) -> tuple[float, int]:
    start = time.perf_counter()
    for _ in range(warmup):
        if time.perf_counter() - start > TIME_BUDGET_S / 2:
            break
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < max(repeats, 1) and (len(times) < MIN_RUNS or time.perf_counter() - start < TIME_BUDGET_S):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times), len(times)


def time_cuda(torch, fns: dict, warmup: int, repeats: int) -> dict:
    """{name: (median us, runs)} of single calls, L2 flushed before each (outside the events).
    The calls alternate between the fns, so that each meets the same GPU state."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            flush.zero_()  # evict x and y from L2
            # Keep the GPU busy (~0.5 ms) while the host enqueues the timed call, so that a slow
            # launch path (Triton's Python launcher: 30-60 us) is not timed as GPU idle time.
            torch.cuda._sleep(1_000_000)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3)
    return {name: (statistics.median(t), len(t)) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", default="64x600,512x600,4096x600,32768x600,262144x600,4096x32000,2048x50257")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--json", action="store_true", help="print JSON (for minigpt bench softmax)")
    args = ap.parse_args(argv)

    out = {"torch_version": None, "device": args.device, "threads": args.threads, "results": [], "notes": []}

    def emit() -> int:
        if args.json:
            print(json.dumps(out))
        else:
            print(f"torch {out['torch_version']}, {args.device}, {args.threads} thread(s)")
            for r in out["results"]:
                print(f"{r['peer']:>14} B={r['B']:>7} V={r['V']:>6} {r['time_us']:12.2f} us ({r['runs']} runs)")
            for n in out["notes"]:
                print("note:", n)
        return 0

    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        out["notes"].append(f"torch is not importable ({type(e).__name__}: {e}); no peer timings")
        return emit()
    out["torch_version"] = torch.__version__
    if args.device == "cuda" and not torch.cuda.is_available():
        out["notes"].append("torch sees no CUDA device; no peer timings")
        return emit()
    from torch_threads import use_threads  # beside this script
    use_threads(torch, args.threads)
    if args.device == "cpu":
        out["notes"].append(
            f"fairness: torch with {args.threads} intra-op thread(s) and 1 inter-op thread, on this process's "
            f"CPU set {sorted(os.sched_getaffinity(0))}; `minigpt bench softmax` runs this script to completion "
            "before it times its own kernels, so no torch thread exists while the C++ side is timed")
    else:
        out["notes"].append(
            "fairness: every peer and minigpt's own fused kernel (when importable) timed in this one process "
            "on the same tensors, their calls alternating, L2 flushed before each")

    peers = {"torch.softmax": lambda x: torch.softmax(x, dim=-1)}
    if not args.no_compile:
        # Default options: the first shape compiles static, the next recompiles with dynamic
        # shapes and serves the rest (compile time is not in the timings, warm-up absorbs it).
        peers["torch.compile"] = torch.compile(lambda x: torch.softmax(x, dim=-1))
    if args.device == "cuda":
        try:
            from minigpt import triton_softmax  # optional: needs Triton

            peers["triton"] = triton_softmax.softmax
            fused, reason = triton_softmax.minigpt_fused()  # our kernel, timed beside the peers
            if fused is not None:
                peers["minigpt fused"] = fused
            else:
                out["notes"].append(reason)
        except Exception as e:
            out["notes"].append(f"Triton kernel skipped ({type(e).__name__}: {e})")

    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    for b, v in parse_shapes(args.shapes):
        x = (torch.rand(b, v, generator=gen) * 16 - 8).to(args.device)
        timed = {}
        for name, fn in peers.items():
            try:
                call = lambda fn=fn: fn(x)  # noqa: E731
                if args.device == "cuda":
                    call()  # a peer that fails here is left out of the round-robin
                    timed[name] = call
                else:
                    timed[name] = time_cpu(call, args.warmup, args.repeats)
            except Exception as e:
                out["notes"].append(f"{name} at ({b}, {v}) failed: {type(e).__name__}: {e}")
        if args.device == "cuda":
            timed = time_cuda(torch, timed, args.warmup, args.repeats)
        for name, (us, runs) in timed.items():
            out["results"].append({"peer": name, "B": b, "V": v, "time_us": us, "runs": runs})
        del x
    return emit()


if __name__ == "__main__":
    sys.exit(main())
