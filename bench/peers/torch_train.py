#!/usr/bin/env python3
"""PyTorch peer of `minigpt bench train`: the PyTorch port's eager training step at (B=64, T=16)
beside the C++ engine's, same model shape, optimizer and thread count, in ONE table.

    PYTHONPATH=python python3 bench/peers/torch_train.py -t 2 [--minigpt BUILD/minigpt]
    PYTHONPATH=python python3 bench/peers/torch_train.py --device cuda    # both sides on the GPU

What one step is, on both sides: zero the gradients, forward to the mean cross-entropy, backward,
clip the global gradient norm to 1.0, AdamW (lr 2e-3, betas (0.9, 0.99), eps 1e-8, weight decay
0.1 on the rank >= 2 tensors only, as src/train/adamw.h). Torch: GrammarMiniGPT.forward_train
(the port in python/minigpt/torch_minigpt.py), torch.optim.AdamW with its default (for-loop)
implementation on CPU, torch.nn.utils.clip_grad_norm_. Ids: uniform random tokens (the cost of a
step does not depend on which tokens); the C++ side draws windows of the grammar corpus.

Timing: --warmup untimed steps, then the median of --steps timed ones (time.perf_counter around
the whole step). Unless --no-cpp it runs `minigpt bench train --no-peers -o json` with the same B, T, -t,
--steps and --warmup. The two sides alternate for --rounds rounds (C++, torch, C++, torch, ...),
so that a busy minute on a shared machine slows both; each side's figure is the median of its
per-round medians, and the table prints cpp_speedup = torch ms / C++ ms (how many times faster
the C++ step is), measured in one run on one machine, with the per-round figures above it.

Fairness (printed in the header): the two sides never run at once. Each C++ round is a child
process (`minigpt bench train --no-peers`) started on the CPU set this script had at start
(cpp_side.py) while the script waits; the first runs before torch is imported, the others after
a pause that lets torch's idle threads go to sleep. Each round's CPU share (CPU time / (threads x
wall)) is printed: well below 1, other processes held the cores. `minigpt bench train` runs this
script with --no-cpp --rounds 1 after its own timing. --minigpt may be relative (to the directory
the script is started in) or a name on PATH.

--device cuda: both sides on the GPU (`minigpt bench train --device cuda`: the whole step as one
CUDA graph; torch eager with its default foreach AdamW on CUDA). The torch step ends with
loss.item(), which waits for the GPU, so its wall time is the step's time; -t then only sets
the host threads.

Without torch it prints the C++ row and why (JSON: "torch_version": null and a note), exit 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from cpp_side import FAIRNESS, ROOT, find_minigpt, run_cpp  # beside this script; before torch


# Seconds between a torch round and the next C++ round, so that torch's intra-op threads, which
# spin for a while after their last parallel region, are asleep before the C++ side is timed.
SETTLE_S = 0.5


def render(rows: list[dict], meta: dict, fmt: str, notes: list[str] | None = None) -> str:
    """The table; JSON (for `minigpt bench train`) is {"title", "torch_version", "meta", "columns",
    "rows", "notes"}, with torch_version null when torch is not importable."""
    columns = ["impl", "B", "T", "threads", "median_ms", "tokens_per_s", "cpp_speedup", "steps"]
    title = f"GrammarMiniGPT training step: C++ vs the PyTorch port ({meta.get('device', 'cpu').upper()}, fp32, AdamW)"
    notes = notes or []
    if fmt == "json":
        return json.dumps({"title": title, "torch_version": meta.get("torch"), "meta": meta, "columns": columns,
                           "rows": rows, "notes": notes}, indent=2)

    def cell(v):
        if v is None:
            return "-"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = [f"## {title}", ""] + [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    lines += ["", "cpp_speedup = this row's median ms / the C++ step's median ms (same run, same threads)."]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-B", "--batch", type=int, default=64)
    ap.add_argument("-T", "--seq", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating C++/torch rounds; each side reports the median of its round medians")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="V for the torch model (default: the C++ report's, else 611)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both sides train")
    ap.add_argument("--no-cpp", action="store_true", help="do not run `minigpt bench train`")
    ap.add_argument("--minigpt", help="the minigpt binary: a path (relative to the working directory) or a name "
                                      "on PATH (default: newest build/*/minigpt)")
    ap.add_argument("-o", "--output", choices=["md", "json"], default="md")
    args = ap.parse_args()

    B, T = args.batch, args.seq
    meta: dict = {"torch": None, "device": args.device}
    exe = None if args.no_cpp else find_minigpt(args.minigpt)
    if not args.no_cpp and exe is None:
        meta["c++"] = "skipped: no minigpt binary found (build it, or pass --minigpt)"

    def cpp_round() -> dict | None:
        """One `minigpt bench train` run: its JSON report, or None after printing the error."""
        return run_cpp([exe, "bench", "train", "--no-peers", "-o", "json", "-t", str(args.threads), "-B", str(B),
                        "-T", str(T), "--steps", str(args.steps), "--warmup", str(args.warmup),
                        "--device", args.device], "torch_train.py")

    cpp_rounds: list[float] = []
    cpp_shares: list = []  # each C++ round's cpu_share (its report's meta)
    cpp_row = None
    vocab_size = args.vocab_size
    if exe is not None:  # the first round's C++ run also gives the vocabulary size
        report = cpp_round()
        if report is None:
            return 1
        meta["fairness"] = (FAIRNESS + "; the first C++ round runs before this process imports torch, the "
                            f"later ones after a {SETTLE_S:g} s pause that lets torch's idle threads stop spinning; "
                            "cpu share = CPU time / (threads x wall) of a round's timed steps, well below 1 when "
                            "other processes held the cores")
        for k in ("machine", "build", "peak_rss_mib"):
            meta["c++ " + k if k == "peak_rss_mib" else k] = report["meta"].get(k)
        vocab_size = vocab_size or report["meta"].get("vocab_size")
        cpp_row = report["rows"][0]
        cpp_rounds.append(cpp_row["median_ms"])
        cpp_shares.append(report["meta"].get("cpu_share"))

    try:  # imported after the first C++ run: the child starts from a small parent
        import torch
    except Exception as e:  # ImportError, or a broken install
        rows = []
        if cpp_row is not None:
            rows.append({k: cpp_row[k] for k in ("impl", "B", "T", "threads", "median_ms", "tokens_per_s", "steps")})
        print(render(rows, meta, args.output, [f"torch is not importable ({type(e).__name__}: {e}); no torch rows"]))
        return 0
    sys.path.insert(0, str(ROOT / "python"))
    from minigpt.model_io import ModelConfig
    from minigpt.torch_minigpt import GrammarMiniGPT
    from torch_threads import use_threads  # beside this script

    use_threads(torch, args.threads)
    torch.manual_seed(42)
    config = ModelConfig(vocab_size=vocab_size or 611)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(render([], meta, args.output, ["--device cuda: torch sees no CUDA GPU; no torch rows"]))
        return 0
    model = GrammarMiniGPT(config).init_gpt2_(seed=42).train().to(args.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=2e-3, betas=(0.9, 0.99), eps=1e-8)
    g = torch.Generator().manual_seed(42)
    batches = [torch.randint(0, config.vocab_size, (B, T + 1), generator=g).to(args.device) for _ in range(8)]

    def step(i: int) -> float:
        w = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = model.forward_train(w[:, :-1], w[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach().item()

    torch_shares: list[float] = []

    def run_torch() -> float:
        """--warmup untimed steps, then the median ms of --steps timed ones (and their CPU share:
        CPU time / (threads x wall), in torch_shares)."""
        for i in range(args.warmup):
            step(i)
        times = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(args.steps):
            t0 = time.perf_counter()
            step(i)
            times.append((time.perf_counter() - t0) * 1e3)
        torch_shares.append((time.process_time() - cpu0) / (args.threads * (time.perf_counter() - wall0)))
        return statistics.median(times)

    # Rounds alternate the two sides (C++, torch, C++, torch, ...), so a slow minute on a shared
    # machine hits both; each side's figure is the median of its per-round medians.
    torch_rounds = [run_torch()]
    for _ in range(args.rounds - 1):
        if exe is not None:
            time.sleep(SETTLE_S)
            report = cpp_round()
            if report is None:
                return 1
            cpp_rounds.append(report["rows"][0]["median_ms"])
            cpp_shares.append(report["meta"].get("cpu_share"))
        torch_rounds.append(run_torch())

    rows = []
    cpp_ms = statistics.median(cpp_rounds) if cpp_rounds else None
    if cpp_row is not None:
        rows.append({"impl": cpp_row["impl"], "B": B, "T": T, "threads": cpp_row["threads"],
                     "median_ms": cpp_ms, "tokens_per_s": B * T / (cpp_ms / 1e3),
                     "steps": args.steps * len(cpp_rounds)})
    torch_ms = statistics.median(torch_rounds)
    rows.append({"impl": "torch eager" + (" cuda" if args.device == "cuda" else ""), "B": B, "T": T, "threads": torch.get_num_threads(),
                 "median_ms": torch_ms, "tokens_per_s": B * T / (torch_ms / 1e3),
                 "steps": args.steps * len(torch_rounds)})
    meta.update({"torch": torch.__version__, "vocab_size": config.vocab_size, "device": args.device,
                 "step": "zero grads + forward_train + backward + clip 1.0 + AdamW (wd 0.1 on matrices)",
                 "rounds": f"{args.rounds} (alternating C++ and torch; median of the per-round medians)",
                 "torch ms per round (cpu share)": ", ".join(f"{t:.2f} ({sh:.3f})"
                                                             for t, sh in zip(torch_rounds, torch_shares))})
    if cpp_ms is not None:
        meta["c++ ms per round (cpu share)"] = ", ".join(f"{t:.2f} ({sh})" for t, sh in zip(cpp_rounds, cpp_shares))
        meta["speedup per round"] = ", ".join(f"{t / c:.2f}x" for t, c in zip(torch_rounds, cpp_rounds))
        for r in rows:
            r["cpp_speedup"] = r["median_ms"] / cpp_ms
    print(render(rows, meta, args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
