#!/usr/bin/env python3
"""PyTorch peer of `minigpt bench model`: the PyTorch port's forward at (B=2, T=16), eager and
torch.compile, on the same model and thread count, beside the C++ engine in ONE table.

    PYTHONPATH=python python3 bench/peers/torch_model.py -t 2 [-m MODEL] [--minigpt BUILD/minigpt]

What it measures: GrammarMiniGPT.forward(ids) -> (logits, probs) under torch.inference_mode(),
median of --runs timed calls after --warmup untimed ones, ids from seed 42. torch.compile
(default mode): the first compiled call (compilation included) is reported on its own row and
the steady-state median beside eager. Unless --no-cpp, it also runs `minigpt bench model
--no-peers -o json` with the same model file, -t, --runs and shape, and prints the ratios
(cpp_speedup = peer time / C++ time), read in one run on one machine.

Fairness (printed in the header): the two sides never run at once. The C++ side is a child
process started on the CPU set this script had at start (cpp_side.py) while the script waits;
its first round runs before torch is imported. --rounds (default 3) alternate C++ and torch,
so that load from other processes falls on both; each side's figure is the median of its round
medians, and each round's CPU share (CPU time / (threads x wall)) is printed: at -t 2 a share
well below 1 means other processes held the cores, and then both sides' times measure the load
(every op waits for its slowest thread), not the code. `minigpt bench model` runs this script
with --no-cpp --rounds 1 after its own timing.

Model: -m if given, else models/grammar-minigpt.safetensors if present, else random weights
(model_io.random_model, default config, V=600, seed 42) written to a temporary file that both
sides load, so they time the very same weights. Relative paths (-m, --minigpt) are taken from
the directory the script is started in.

--device cuda: the model and ids on the GPU; each call is timed alone between two CUDA events
(waited for), median of --runs after --warmup; torch.compile also in mode="reduce-overhead" (CUDA
graphs), whose first call is its own row too. `minigpt bench model --device cuda` runs it so with
--no-cpp after its own timing.

Without torch it prints the C++ rows and why (JSON: "torch_version": null and a note), exit 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from cpp_side import FAIRNESS, ROOT, abs_path, find_minigpt, run_cpp  # beside this script; before torch

SHIPPED = ROOT / "models" / "grammar-minigpt.safetensors"
# Seconds between a torch round and the next C++ round, so that torch's intra-op threads, which
# spin for a while after their last parallel region, are asleep before the C++ side is timed.
SETTLE_S = 0.5


def time_us(fn, runs: int, warmup: int, threads: int) -> tuple[float, float]:
    """(median us of `runs` timed calls after `warmup` untimed ones, CPU share of the timed calls:
    this process's CPU time over threads x wall time, as `minigpt bench model` reports it)."""
    for _ in range(warmup):
        fn()
    out = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    share = (time.process_time() - cpu0) / (threads * (time.perf_counter() - wall0))
    return statistics.median(out), share


def time_us_cuda(torch, fn, runs: int, warmup: int) -> tuple[float, None]:
    """(median us of `runs` calls, each alone between two CUDA events and waited for, after
    `warmup` untimed ones; no CPU share on the GPU)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(runs):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(out), None


def render(rows: list[dict], meta: dict, fmt: str, notes: list[str] | None = None) -> str:
    """The table; JSON (for `minigpt bench model`) is {"title", "torch_version", "meta", "columns",
    "rows", "notes"}, with torch_version null when torch is not importable."""
    columns = ["impl", "B", "T", "median_us", "cpp_speedup", "runs"]
    notes = notes or []
    if fmt == "json":
        return json.dumps({"title": "GrammarMiniGPT forward: C++ vs the PyTorch port",
                           "torch_version": meta.get("torch"), "meta": meta, "columns": columns,
                           "rows": rows, "notes": notes}, indent=2)

    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = [f"## GrammarMiniGPT forward: C++ vs the PyTorch port ({meta.get('device', 'cpu').upper()}, fp32)", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(cell(r.get(c)) for c in columns) + " |")
    lines += ["", "cpp_speedup = this row's median / the C++ forward median (same run, same threads)."]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", help="model file (.safetensors/.npz)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its first call takes minutes on 2 cores)")
    ap.add_argument("--no-cpp", action="store_true", help="do not run `minigpt bench model`")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating C++/torch rounds; each side reports the median of its round medians")
    ap.add_argument("--minigpt", help="the minigpt binary: a path (relative to the working directory) or a name "
                                      "on PATH (default: newest build/*/minigpt)")
    ap.add_argument("-o", "--output", choices=["md", "json"], default="md")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the PyTorch port runs (cuda: CUDA events, plus torch.compile reduce-overhead)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "python"))
    from minigpt.model_io import ModelConfig, random_model, save_model  # NumPy only: torch not yet loaded

    tmpdir = None
    if args.model:
        path = described = abs_path(args.model)
    elif SHIPPED.exists():
        path, described = str(SHIPPED), str(SHIPPED)
    else:
        tmpdir = tempfile.TemporaryDirectory(prefix="minigpt-bench-")
        path = os.path.join(tmpdir.name, "random.safetensors")
        save_model(path, random_model(ModelConfig(vocab_size=600), seed=42))
        described = "random weights (model_io.random_model, default config, V=600, seed 42)"
    B, T = args.batch, args.seq
    meta = {"model": described, "threads": args.threads, "torch": None, "device": args.device}
    cuda = args.device == "cuda"
    notes: list[str] = []
    exe = None if args.no_cpp else find_minigpt(args.minigpt)
    if not args.no_cpp and exe is None:
        meta["c++"] = "skipped: no minigpt binary found (build it, or pass --minigpt)"
    cpp_rounds: list[dict] = []  # the forward row of each C++ round, with the round's cpu_share

    def cpp_round() -> bool:
        report = run_cpp([exe, "bench", "model", "--no-peers", "--device", args.device, "-m", path, "-o", "json", "-t", str(args.threads),
                          "--runs", str(args.runs), "--warmup", str(args.warmup), "--batch", str(B),
                          "--seq", str(T)], "torch_model.py")
        if report is None:
            return False
        for k in ("machine", "build"):
            meta[k] = report["meta"].get(k)
        rows_by_case = {}  # the first row of each kind: with --device cuda, "forward graph ..." is ours
        for r in report["rows"]:
            rows_by_case.setdefault(r["case"].split(" ")[0], r)
        cpp_rounds.append({**rows_by_case["forward"], "cpu_share": report["meta"].get("cpu_share"),
                           "decode": rows_by_case.get("kv")})
        return True

    # Round 1 of the C++ side runs before this process imports torch: no torch thread exists yet.
    if exe is not None and not cpp_round():
        return 1
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install: the C++ rows alone, and why
        notes.append(f"torch is not importable ({type(e).__name__}: {e}); no torch rows")
        torch = None
    torch_rounds: dict[str, list[tuple[float, float]]] = {}  # impl -> [(median us, cpu share)] per round
    first_s = first_ro_s = None
    if torch is not None:
        from minigpt.torch_minigpt import GrammarMiniGPT
        from torch_threads import use_threads  # beside this script

        use_threads(torch, args.threads)
        model = GrammarMiniGPT.from_file(path).eval()
        g = torch.Generator().manual_seed(42)
        ids = torch.randint(0, model.config.vocab_size, (B, T), generator=g)
        if cuda:
            if not torch.cuda.is_available():
                print("torch_model.py: --device cuda but torch sees no CUDA GPU", file=sys.stderr)
                return 1
            model, ids = model.cuda(), ids.cuda()
            timer = lambda fn, runs, warmup, threads: time_us_cuda(torch, fn, runs, warmup)  # noqa: E731
        else:
            timer = time_us
        compiled = reduce_overhead = None
        with torch.inference_mode():
            if not args.no_compile:
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                compiled(ids)
                if cuda:
                    torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                if cuda:  # CUDA graphs: the mode the 20 us goal is compared with
                    reduce_overhead = torch.compile(model, mode="reduce-overhead")
                    t0 = time.perf_counter()
                    reduce_overhead(ids)
                    torch.cuda.synchronize()
                    first_ro_s = time.perf_counter() - t0
            for r in range(args.rounds):
                if r > 0 and exe is not None:  # C++ round r + 1, after a pause for torch's threads to sleep
                    time.sleep(SETTLE_S)
                    if not cpp_round():
                        return 1
                torch_rounds.setdefault("torch eager", []).append(
                    timer(lambda: model(ids), args.runs, args.warmup, args.threads))
                if compiled is not None:
                    torch_rounds.setdefault("torch.compile", []).append(
                        timer(lambda: compiled(ids), args.runs, args.warmup, args.threads))
                if reduce_overhead is not None:
                    torch_rounds.setdefault("torch.compile reduce-overhead", []).append(
                        timer(lambda: reduce_overhead(ids), args.runs, args.warmup, args.threads))
        meta.update({"torch": torch.__version__, "torch threads": torch.get_num_threads()})

    # Each side's figure: the median of its per-round medians.
    rows: list[dict] = []
    cpp_us = None
    if cpp_rounds:
        cpp_us = statistics.median(r["median_us"] for r in cpp_rounds)
        rows.append({"impl": "minigpt C++", "B": B, "T": T, "median_us": cpp_us,
                     "runs": sum(r["runs"] for r in cpp_rounds)})
        meta["c++ us per round (cpu share)"] = ", ".join(f"{r['median_us']:.1f} ({r['cpu_share']})"
                                                         for r in cpp_rounds)
    for impl, per_round in torch_rounds.items():
        rows.append({"impl": impl, "B": B, "T": T, "median_us": statistics.median(us for us, _ in per_round),
                     "runs": args.runs * len(per_round)})
        meta[f"{impl} us per round (cpu share)"] = ", ".join(
            f"{us:.1f} ({'-' if sh is None else f'{sh:.3f}'})" for us, sh in per_round)
    if first_s is not None:
        rows.append({"impl": "torch.compile first call", "B": B, "T": T, "median_us": first_s * 1e6, "runs": 1})
    if first_ro_s is not None:
        rows.append({"impl": "torch.compile reduce-overhead first call", "B": B, "T": T, "median_us": first_ro_s * 1e6,
                     "runs": 1})
    if cpp_us is not None:
        for r in rows:
            if "first call" not in r["impl"]:
                r["cpp_speedup"] = r["median_us"] / cpp_us
        decode = cpp_rounds[0]["decode"]
        if decode:
            rows.append({"impl": f"minigpt C++ {decode['case']} ({decode['tokens_per_s']:.0f} tokens/s)",
                         "B": decode["B"], "T": decode["T"], "median_us": decode["median_us"], "runs": decode["runs"]})
        meta["fairness"] = (FAIRNESS + f"; {len(cpp_rounds)} C++ round(s) alternate with the torch rounds, the "
                            f"first before this process imported torch, the others after a {SETTLE_S:g} s pause; "
                            "each side reports the median of its round medians; cpu share = CPU time / (threads x "
                            "wall) of a round's timed calls, well below 1 when other processes held the cores")
    print(render(rows, meta, args.output, notes))
    if tmpdir is not None:
        tmpdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
