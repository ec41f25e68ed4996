#!/usr/bin/env python3
"""Experiment 24: the Triton softmax beside the CUDA C kernels, and the PyTorch port.

Regenerates this folder's figures from one run on a GPU machine (scripts/gpu-check.sh calls it):

    PYTHONPATH=python python3 experiments/24-triton-and-pytorch/bench.py \
        --minigpt build/cuda/minigpt [--bench-json bench_softmax_cuda.json] [--out DIR]

1. Softmax kernels: `minigpt bench softmax --device cuda -o json` (naive, smem, fused with its
   autotuned choice, torch.softmax, torch.compile and the Triton kernel, measured in the same
   run), or a JSON it already wrote (--bench-json). The manifest keeps each kernel's time at
   (512, 600) and its `frac_of_F_softmax` = torch.softmax time / kernel time (> 1: faster
   than F.softmax), both from the L2-flushed CUDA-event timings.
2. Triton autotune: the configuration it picked at (512, 600).
3. The PyTorch port against the NumPy reference on the CPU in fp32, one thread, ids (2, 16)
   from seed 42: `allclose(atol=1e-5, rtol=1e-5)` and the max abs difference.
4. The kernel swap: the port on CUDA with the Triton softmax in its LM head
   (set_lm_head_softmax) against the CPU port with torch.softmax, on "Yesterday I" with the
   shipped model: max |Δlogits|, max |Δprobs|, and whether the top-1 (and top-5) token changed.
5. roofline.png (python -m minigpt.plot roofline) and manifest.json, written to --out.
6. With --any-json (scripts/gpu-check.sh's `bench softmax --shapes ...` run on shapes nobody
   tuned for, issue 19): any_shape.md, the table in this folder's README, and the same figures
   under the manifest's "any_shape". Triton's pick per shape comes from --triton-cache (the
   JSON cache triton_autotune.py writes) when given.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from minigpt.model_io import load_model, random_model  # noqa: E402
from minigpt.numpy_minigpt import NumpyMiniGPT  # noqa: E402

SEED = 42
SHIPPED = ROOT / "models" / "grammar-minigpt.safetensors"


def bench_softmax(args) -> dict:
    if args.bench_json:
        return json.loads(Path(args.bench_json).read_text())
    cmd = [args.minigpt, "bench", "softmax", "--device", "cuda", "-o", "json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def kernel_figures(report: dict, b: int = 512, v: int = 600) -> dict:
    """{kernel: (time_us, torch_time_us / time_us)} at (b, v), from the L2-flushed rows."""
    rows = [r for r in report["rows"] if r["B"] == b and r["V"] == v]
    times = {r["kernel"]: r["time_us"] for r in rows}
    torch_us = times.get("torch.softmax")

    def entry(name):
        t = times.get(name)
        if t is None:
            return {"us_at_B512": None, "frac_of_F_softmax": None}
        return {"us_at_B512": round(t, 3), "frac_of_F_softmax": round(torch_us / t, 4) if torch_us else None}

    fused = next((k for k in times if k.startswith("fused") and "graph" not in k), "fused")
    return {"naive": entry("naive"), "smem": entry("smem"), "fused": entry(fused), "triton": entry("triton")}


ANY_SHAPE_COLUMNS = [("triton", "Triton (ours)"), ("torch.softmax", "torch.softmax"),
                     ("torch.compile", "torch.compile"), ("minigpt fused", "minigpt fused")]


def any_shape_rows(report: dict, picks: dict) -> list[dict]:
    """Per (B, V) of an any-shape run: each peer's L2-flushed time (us, None where it did not
    run), Triton's ratio to torch.softmax and to our fused kernel, and Triton's pick.
    "minigpt fused" is our kernel timed in the peers' process, alternating with them."""
    shapes: dict[tuple[int, int], dict] = {}
    for r in report["rows"]:
        shapes.setdefault((r["B"], r["V"]), {})[r["kernel"]] = r["time_us"]
    out = []
    for (b, v), times in shapes.items():
        row = {"B": b, "V": v, "MB_in": b * v * 4 / 1e6}
        row.update({name: times.get(name) for name, _ in ANY_SHAPE_COLUMNS})
        tri = row["triton"]
        row["triton_over_torch"] = tri / row["torch.softmax"] if tri and row["torch.softmax"] else None
        row["triton_over_fused"] = tri / row["minigpt fused"] if tri and row["minigpt fused"] else None
        row["triton_pick"] = picks.get(f"{b}x{v}")
        out.append(row)
    return out


def triton_picks(cache: dict, shapes) -> dict:
    """{"BxV": "kernel K=v, ..."} for each (B, V) in shapes, from a triton_autotune.json cache
    (python/minigpt/triton_autotune.py: entries keyed by shape bucket and machine)."""
    from minigpt.triton_autotune import shape_bucket

    configs = {e["key"]["bucket"]: e["config"] for e in cache.get("entries", {}).values()
               if isinstance(e, dict) and isinstance(e.get("config"), dict) and isinstance(e.get("key"), dict)}
    picks = {}
    for b, v in shapes:
        cfg = configs.get(shape_bucket(b, v))
        if cfg:
            params = ", ".join(f"{k}={val}" for k, val in cfg.items() if k != "kernel")
            picks[f"{b}x{v}"] = f"{cfg.get('kernel', '?')} {params}"
    return picks


def any_shape_markdown(rows: list[dict]) -> str:
    def us(v):
        return "-" if v is None else f"{v:.1f}"

    def ratio(v):
        return "-" if v is None else f"{v:.2f}"

    head = ["shape (B, V)", "MB in"] + [label for _, label in ANY_SHAPE_COLUMNS] + \
           ["Triton / torch", "Triton / fused", "Triton's pick"]
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: |" + " ---: |" * (len(ANY_SHAPE_COLUMNS) + 2) + " --- |"]
    for r in rows:
        cells = [f"({r['B']}, {r['V']})", f"{r['MB_in']:.0f}"] + [us(r[name]) for name, _ in ANY_SHAPE_COLUMNS]
        cells += [ratio(r["triton_over_torch"]), ratio(r["triton_over_fused"]), r["triton_pick"] or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def tokenize(text: str, vocab: list[str]) -> list[int]:
    """The C++ tokenizer's rule (src/data/tokenizer.h): lowercase words and punctuation tokens,
    preceded by <bos> as `minigpt predict` does."""
    index = {w: i for i, w in enumerate(vocab)}
    words = re.findall(r"[a-z0-9']+|[^\sa-z0-9']", text.lower())
    unknown = [w for w in words if w not in index]
    if unknown:
        raise SystemExit(f"unknown words in prompt: {unknown}")
    return [index["<bos>"]] + [index[w] for w in words]


TOL = 1e-5  # the contract's tolerance (docs/ARCHITECTURE.md)


def torch_port_checks(torch) -> dict:
    from minigpt.torch_minigpt import GrammarMiniGPT

    torch.set_num_threads(1)
    f = random_model(seed=SEED)
    ids = np.random.default_rng(SEED).integers(0, f.config.vocab_size, size=(2, 16))
    ref = NumpyMiniGPT.from_model_file(f).forward(ids).logits
    port = GrammarMiniGPT.from_model_file(f)
    with torch.no_grad():
        logits, _ = port(torch.from_numpy(ids))
    diff = float(np.max(np.abs(logits.numpy() - ref)))
    ok = bool(np.allclose(logits.numpy(), ref, atol=TOL, rtol=TOL))
    byte_equal = bool(np.array_equal(logits.numpy(), ref))
    # The seed's key, with what was really checked: torch's matmuls (its own BLAS) and NumPy's
    # (OpenBLAS) sum in other orders, so equal bytes are not expected; the contract is allclose.
    verdict = "byte-equal" if byte_equal else (
        f"not byte-equal; allclose(atol=rtol={TOL:g}) {'passed' if ok else 'FAILED'}")
    return {"byte_equivalence_at_fp32_cpu": verdict, "byte_equal": byte_equal,
            "check": "numpy.allclose on the logits (2, 16, 600)", "atol": TOL, "rtol": TOL,
            "allclose_passed": ok, "max_abs_diff_to_numpy_reference": diff}


def kernel_swap(torch, prompt: str) -> dict:
    from minigpt import triton_softmax
    from minigpt.torch_minigpt import GrammarMiniGPT

    if not SHIPPED.exists():
        return {"kernel_swap_changes_top1_token": None, "note": "no shipped model"}
    f = load_model(SHIPPED)
    ids = torch.tensor([tokenize(prompt, f.vocab)])
    cpu = GrammarMiniGPT.from_model_file(f)
    gpu = GrammarMiniGPT.from_model_file(f).cuda()
    gpu.set_lm_head_softmax(triton_softmax.softmax)
    with torch.no_grad():
        logits_c, probs_c = cpu(ids)
        logits_g, probs_g = gpu(ids.cuda())
    pc, pg = probs_c[0, -1], probs_g[0, -1].cpu()
    top_c = [f.vocab[i] for i in torch.topk(pc, 5).indices.tolist()]
    top_g = [f.vocab[i] for i in torch.topk(pg, 5).indices.tolist()]
    return {
        "kernel_swap_changes_top1_token": top_c[0] != top_g[0],
        "prompt": prompt,
        "top5_cpu_torch_softmax": top_c,
        "top5_cuda_triton_softmax": top_g,
        "max_abs_diff_logits_cuda_vs_cpu": float((logits_g.cpu() - logits_c).abs().max()),
        "max_abs_diff_probs_cuda_vs_cpu": float((probs_g.cpu() - probs_c).abs().max()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minigpt", default=str(ROOT / "build" / "cuda" / "minigpt"))
    ap.add_argument("--bench-json", default=None, help="reuse a `bench softmax --device cuda -o json` output")
    ap.add_argument("--out", default=str(Path(__file__).parent))
    ap.add_argument("--prompt", default="Yesterday I")
    ap.add_argument("--any-json", default=None, help="a `bench softmax --device cuda --shapes ... -o json` output")
    ap.add_argument("--triton-cache", default=None, help="triton_autotune.json, for Triton's pick per shape")
    args = ap.parse_args()
    args.minigpt = os.path.abspath(args.minigpt) if os.sep in args.minigpt else args.minigpt  # relative: from here
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import triton

    report = bench_softmax(args)
    (out / "bench_softmax_cuda.json").write_text(json.dumps(report, indent=2))
    kernels = kernel_figures(report)

    from minigpt import triton_softmax
    triton_softmax.tune()
    kernels["triton"]["autotune_picked"] = triton_softmax.picked_config(512, 600)

    port = torch_port_checks(torch)
    swap = kernel_swap(torch, args.prompt)
    port["kernel_swap_changes_top1_token"] = swap.pop("kernel_swap_changes_top1_token")
    port["kernel_swap"] = swap

    gpu = report["meta"].get("gpu", {})
    try:
        import cupy
        cupy_version = cupy.__version__
    except ImportError:
        cupy_version = None
    manifest = {
        "experiment": "24-triton-and-pytorch",
        "date": dt.date.today().isoformat(),
        "seed": SEED,
        "gpu": {"model": gpu.get("model"), "compute_capability": gpu.get("compute_capability")},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "triton": triton.__version__, "cupy": cupy_version},
        "softmax_kernels": kernels,
        "torch_port": port,
        "copy_bandwidth_GBps": report["meta"].get("copy_bandwidth_GBps"),
        "timing": "CUDA events, median of 100 launches, L2 flushed between launches; graph-mode rows in bench_softmax_cuda.json",
    }
    if args.any_json:
        any_report = json.loads(Path(args.any_json).read_text())
        cache = json.loads(Path(args.triton_cache).read_text()) if args.triton_cache else {}
        picks = triton_picks(cache, {(r["B"], r["V"]) for r in any_report["rows"]})
        rows = any_shape_rows(any_report, picks)
        (out / "any_shape.md").write_text(any_shape_markdown(rows))
        manifest["any_shape"] = rows
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    subprocess.run([sys.executable, "-m", "minigpt.plot", "roofline", str(out / "bench_softmax_cuda.json"),
                    "-o", str(out / "roofline.png"), "--device", "cuda", "--shape", "4096x600"], check=True)
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
