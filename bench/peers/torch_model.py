#!/usr/bin/env python3
"""PyTorch peer of `minigpt bench model`: the PyTorch port's forward at (B=2, T=16), eager and
torch.compile, on the same model and thread count, beside the C++ engine in ONE table.

    PYTHONPATH=python python3 bench/peers/torch_model.py -t 2 [-m MODEL] [--minigpt BUILD/minigpt]

What it measures: GrammarMiniGPT.forward(ids) -> (logits, probs) under torch.inference_mode(),
median of --runs timed calls after --warmup untimed ones, ids from seed 42. torch.compile
(default mode): the first compiled call (compilation included) is reported on its own row and
the steady-state median beside eager. Unless --no-cpp, it then runs `minigpt bench model
-o json` with the same model file, -t and --runs and prints the C++ rows with the ratios
(peer time / C++ time: how many times faster the C++ forward is), so the ratio is read in one
run on one machine.

Model: -m if given, else models/grammar-minigpt.safetensors if present, else random weights
(model_io.random_model, default config, V=600, seed 42) written to a temporary file that both
sides load, so they time the very same weights.

Without torch it prints why and exits 0 (a skip, not a failure).
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


def time_us(fn, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


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

    lines = ["## GrammarMiniGPT forward: C++ vs the PyTorch port (CPU, fp32)", ""]
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
    ap.add_argument("--minigpt", help="the minigpt binary: a path (relative to the working directory) or a name "
                                      "on PATH (default: newest build/*/minigpt)")
    ap.add_argument("-o", "--output", choices=["md", "json"], default="md")
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
    meta = {"model": described, "threads": args.threads, "torch": None}
    notes: list[str] = []
    rows: list[dict] = []

    # The C++ side first, while this process has not imported torch: no torch thread, OpenMP
    # pool or compile worker exists anywhere while it is timed (cpp_side.FAIRNESS).
    cpp_rows = []
    if not args.no_cpp:
        exe = find_minigpt(args.minigpt)
        if exe is None:
            meta["c++"] = "skipped: no minigpt binary found (build it, or pass --minigpt)"
        else:
            report = run_cpp([exe, "bench", "model", "--no-peers", "-m", path, "-o", "json",
                              "-t", str(args.threads), "--runs", str(args.runs), "--warmup", str(args.warmup),
                              "--batch", str(B), "--seq", str(T)], "torch_model.py")
            if report is None:
                return 1
            for k in ("machine", "build"):
                meta[k] = report["meta"].get(k)
            meta["fairness"] = FAIRNESS + ", before this process imported torch"
            cpp_rows = report["rows"]

    try:
        import torch
    except Exception as e:  # ImportError, or a broken install: the C++ rows alone, and why
        notes.append(f"torch is not importable ({type(e).__name__}: {e}); no torch rows")
        torch = None
    if torch is not None:
        from minigpt.torch_minigpt import GrammarMiniGPT
        from torch_threads import use_threads  # beside this script

        use_threads(torch, args.threads)
        model = GrammarMiniGPT.from_file(path).eval()
        g = torch.Generator().manual_seed(42)
        ids = torch.randint(0, model.config.vocab_size, (B, T), generator=g)
        with torch.inference_mode():
            eager = statistics.median(time_us(lambda: model(ids), args.runs, args.warmup))
            rows.append({"impl": "torch eager", "B": B, "T": T, "median_us": eager, "runs": args.runs})
            if not args.no_compile:
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                compiled(ids)
                first_s = time.perf_counter() - t0
                comp = statistics.median(time_us(lambda: compiled(ids), args.runs, args.warmup))
                rows.append({"impl": "torch.compile", "B": B, "T": T, "median_us": comp, "runs": args.runs})
                rows.append({"impl": "torch.compile first call", "B": B, "T": T, "median_us": first_s * 1e6,
                             "runs": 1})
        meta.update({"torch": torch.__version__, "torch threads": torch.get_num_threads()})

    if cpp_rows:
        fwd = next(r for r in cpp_rows if r["case"].startswith("forward"))
        cpp_us = fwd["median_us"]
        rows.insert(0, {"impl": "minigpt C++", "B": fwd["B"], "T": fwd["T"], "median_us": cpp_us,
                        "runs": fwd["runs"]})
        for r in rows:
            if r["impl"] != "torch.compile first call":
                r["cpp_speedup"] = r["median_us"] / cpp_us
        for r in cpp_rows:
            if r["case"].startswith("kv decode"):
                rows.append({"impl": f"minigpt C++ {r['case']} ({r['tokens_per_s']:.0f} tokens/s)",
                             "B": r["B"], "T": r["T"], "median_us": r["median_us"], "runs": r["runs"]})
    print(render(rows, meta, args.output, notes))
    if tmpdir is not None:
        tmpdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
