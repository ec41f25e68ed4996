#!/usr/bin/env python3
"""PyTorch peer of `minigpt bench train`: the PyTorch port's eager training step at (B=64, T=16)
beside the C++ engine's, same model shape, optimizer and thread count, in ONE table.

    PYTHONPATH=python python3 bench/peers/torch_train.py -t 2 [--minigpt BUILD/minigpt]

What one step is, on both sides: zero the gradients, forward to the mean cross-entropy, backward,
clip the global gradient norm to 1.0, AdamW (lr 2e-3, betas (0.9, 0.99), eps 1e-8, weight decay
0.1 on the rank >= 2 tensors only, as src/train/adamw.h). Torch: GrammarMiniGPT.forward_train
(the port in python/minigpt/torch_minigpt.py), torch.optim.AdamW with its default (for-loop)
implementation on CPU, torch.nn.utils.clip_grad_norm_. Ids: uniform random tokens (the cost of a
step does not depend on which tokens); the C++ side draws windows of the grammar corpus.

Timing: --warmup untimed steps, then the median of --steps timed ones (time.perf_counter around
the whole step). Unless --no-cpp it first runs `minigpt bench train -o json` with the same B, T,
-t, --steps and --warmup, then prints both rows with cpp_speedup = torch ms / C++ ms (how many
times faster the C++ step is), measured in one run on one machine.

Without torch it prints why and exits 0 (a skip, not a failure).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def find_minigpt(given: str | None) -> str | None:
    if given:
        return given
    candidates = [p for p in glob.glob(str(ROOT / "build" / "*" / "minigpt")) if os.access(p, os.X_OK)]
    candidates += [p for p in glob.glob(str(ROOT / "build" / "minigpt")) if os.access(p, os.X_OK)]
    return max(candidates, key=os.path.getmtime) if candidates else None  # the newest build


def render(rows: list[dict], meta: dict, fmt: str) -> str:
    columns = ["impl", "B", "T", "threads", "median_ms", "tokens_per_s", "cpp_speedup", "steps"]
    title = "GrammarMiniGPT training step: C++ vs the PyTorch port (CPU, fp32, AdamW)"
    if fmt == "json":
        return json.dumps({"title": title, "meta": meta, "columns": columns, "rows": rows}, indent=2)

    def cell(v):
        if v is None:
            return "-"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = [f"## {title}", ""] + [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    lines += ["", "cpp_speedup = this row's median ms / the C++ step's median ms (same run, same threads)."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-B", "--batch", type=int, default=64)
    ap.add_argument("-T", "--seq", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="V for the torch model (default: the C++ report's, else 611)")
    ap.add_argument("--no-cpp", action="store_true", help="do not run `minigpt bench train`")
    ap.add_argument("--minigpt", help="path to the minigpt binary (default: newest build/*/minigpt)")
    ap.add_argument("-o", "--output", choices=["md", "json"], default="md")
    args = ap.parse_args()

    B, T = args.batch, args.seq
    meta: dict = {}
    rows: list[dict] = []
    cpp_ms = None
    vocab_size = args.vocab_size
    if not args.no_cpp:  # C++ first, so the two measurements are minutes apart at most
        exe = find_minigpt(args.minigpt)
        if exe is None:
            meta["c++"] = "skipped: no minigpt binary found (build it, or pass --minigpt)"
        else:
            cmd = [exe, "bench", "train", "-o", "json", "-t", str(args.threads), "-B", str(B), "-T", str(T),
                   "--steps", str(args.steps), "--warmup", str(args.warmup)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"torch_train.py: `{' '.join(cmd)}` failed:\n{proc.stderr}", file=sys.stderr)
                return 1
            report = json.loads(proc.stdout)
            for k in ("machine", "build", "peak_rss_mib"):
                meta["c++ " + k if k == "peak_rss_mib" else k] = report["meta"].get(k)
            vocab_size = vocab_size or report["meta"].get("vocab_size")
            r = report["rows"][0]
            cpp_ms = r["median_ms"]
            rows.append({"impl": r["impl"], "B": r["B"], "T": r["T"], "threads": r["threads"],
                         "median_ms": cpp_ms, "tokens_per_s": r["tokens_per_s"], "steps": r["steps"]})

    try:  # imported after the C++ run: the child starts from a small parent
        import torch
    except Exception as e:  # ImportError, or a broken install
        print(render(rows, meta, args.output))
        print(f"torch_train.py: torch peer skipped: torch is not importable ({type(e).__name__}: {e})")
        return 0
    sys.path.insert(0, str(ROOT / "python"))
    from minigpt.model_io import ModelConfig
    from minigpt.torch_minigpt import GrammarMiniGPT

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set by an earlier parallel op
    torch.manual_seed(42)
    config = ModelConfig(vocab_size=vocab_size or 611)
    model = GrammarMiniGPT(config).init_gpt2_(seed=42).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.99), eps=1e-8)
    g = torch.Generator().manual_seed(42)
    batches = [torch.randint(0, config.vocab_size, (B, T + 1), generator=g) for _ in range(8)]

    def step(i: int) -> float:
        w = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = model.forward_train(w[:, :-1], w[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach().item()

    for i in range(args.warmup):
        step(i)
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(i)
        times.append((time.perf_counter() - t0) * 1e3)
    torch_ms = statistics.median(times)
    rows.append({"impl": "torch eager", "B": B, "T": T, "threads": torch.get_num_threads(),
                 "median_ms": torch_ms, "tokens_per_s": B * T / (torch_ms / 1e3), "steps": args.steps})
    meta.update({"torch": torch.__version__, "vocab_size": config.vocab_size,
                 "step": "zero grads + forward_train + backward + clip 1.0 + AdamW (wd 0.1 on matrices)"})
    if cpp_ms is not None:
        for r in rows:
            r["cpp_speedup"] = r["median_ms"] / cpp_ms
    print(render(rows, meta, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
