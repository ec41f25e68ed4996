"""Plots of benchmark results. Only matplotlib (Agg backend) and the standard library; nothing
from the rest of the package, so `python -m minigpt.plot` works without the C++ module.

    python -m minigpt.plot roofline BENCH.json -o roofline.png [--device cpu|cuda] [--shape 4096x600]

roofline: BENCH.json is `minigpt bench softmax -o json` (a Report: {"meta", "columns",
"rows": [{"kernel", "B", "V", "time_us", ...}]}). Log-log, x = arithmetic intensity (FLOP per
byte), y = FLOP/s; the memory slope is the copy bandwidth the bench measured; the ceilings are
the fp32 FMA peak and the exp unit's rate (times FLOP per element: the FLOP/s a kernel reaches
when exp is its bottleneck). One point per kernel row (naive, smem, fused, simd, triton,
torch.softmax, ...) at one shape: --shape, else the largest B at V = 600, else the largest shape.
FLOP and byte counts come from meta.roofline (the bench states its counting); rates from there
too where the bench measured or computed them, else the documented defaults below.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Defaults when the JSON does not carry a rate.
# H200: 132 SMs x 1.98 GHz x 128 FP32 lanes x 2 (FMA); SFU: 16 ops per SM per cycle;
# copy bandwidth 4.27 TB/s, a 1 GiB device-to-device copy measured on an H200 (experiment 24 has
# a run of it: 4255 GB/s).
H200_FMA_FLOPS = 132 * 1.98e9 * 128 * 2
H200_SFU_OPS = 132 * 1.98e9 * 16
H200_COPY_BPS = 4.27e12
# CPU: threads x GHz x lanes (AVX-512: 16) x 2 FMA units x 2 FLOP; exp at ~15 vector ops per
# 16 lanes on 2 ports (the polynomial exp of softmax_simd); copy bandwidth must be measured.
CPU_DEFAULT_GHZ = 2.1
CPU_DEFAULT_LANES = 16
SOFTMAX_FLOPS_PER_ELEMENT = 5.0  # max, sub, exp, sum, div
SOFTMAX_BYTES_PER_ELEMENT = 8.0  # read x, write y (fp32)


def _rate(d: dict, key: str, scale: float):
    v = d.get(key)
    return float(v) * scale if isinstance(v, (int, float)) else None


def roofline_params(report: dict, device: str) -> dict:
    """FLOP/byte counts and ceilings (in FLOP/s, exp/s, bytes/s) from the report, else defaults."""
    meta = report.get("meta", {})
    rl = meta.get("roofline", {}) or {}
    flops = float(rl.get("flops_per_element", SOFTMAX_FLOPS_PER_ELEMENT))
    nbytes = float(rl.get("bytes_per_element", SOFTMAX_BYTES_PER_ELEMENT))
    copy = _rate(rl, "copy_bandwidth_GBps", 1e9) or _rate(meta, "copy_bandwidth_GBps", 1e9)
    fma = _rate(rl, "fma_peak_GFLOPs", 1e9)
    exp = _rate(rl, "exp_rate_Gps", 1e9)
    sources = []
    if device == "cuda":
        if copy is None:
            copy, _ = H200_COPY_BPS, sources.append("copy bandwidth: H200 default 4.27 TB/s")
        if fma is None:
            fma, _ = H200_FMA_FLOPS, sources.append("FMA peak: H200 default")
        if exp is None:
            exp, _ = H200_SFU_OPS, sources.append("SFU rate: H200 default")
    else:
        threads = int(meta.get("threads", 1) or 1)
        ghz = float(rl.get("cpu_GHz", CPU_DEFAULT_GHZ) or CPU_DEFAULT_GHZ)
        if copy is None:
            raise ValueError("the report has no copy bandwidth (meta.roofline.copy_bandwidth_GBps)")
        if fma is None:
            fma, _ = threads * ghz * 1e9 * CPU_DEFAULT_LANES * 2 * 2, sources.append("FMA peak: computed default")
        if exp is None:
            exp, _ = threads * ghz * 1e9 * CPU_DEFAULT_LANES * 2 / 15, sources.append("exp rate: computed default")
    return {"flops": flops, "bytes": nbytes, "copy": copy, "fma": fma, "exp": exp, "defaults": sources}


def softmax_rows(report: dict) -> list[dict]:
    """The rows to plot: timed softmax kernels. The CPU bench's copy rows ("memcpy",
    "memcpy-stream": the same bytes copied) are no softmax and have no FLOPs."""
    return [r for r in report.get("rows", [])
            if isinstance(r.get("time_us"), (int, float)) and r["time_us"] > 0
            and not str(r.get("kernel", "")).startswith("memcpy")]


def pick_shape(rows: list[dict], shape: str | None) -> tuple[int, int]:
    shapes = {(int(r["B"]), int(r["V"])) for r in rows}
    if not shapes:
        raise ValueError("the report has no rows")
    if shape:
        b, v = (int(s) for s in shape.lower().split("x"))
        if (b, v) not in shapes:
            raise ValueError(f"shape {b}x{v} is not in the report (has {sorted(shapes)})")
        return b, v
    v600 = [s for s in shapes if s[1] == 600]
    return max(v600) if v600 else max(shapes, key=lambda s: s[0] * s[1])


def roofline(report: dict, out: Path, device: str | None = None, shape: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = report.get("meta", {})
    device = device or meta.get("device", "cpu")
    p = roofline_params(report, device)
    rows = softmax_rows(report)
    b, v = pick_shape(rows, shape)
    ai = p["flops"] / p["bytes"]

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    ridge_fma = p["fma"] / p["copy"]
    xs = sorted([2.0 ** k for k in range(-6, 9)] + [ridge_fma])  # the ridge itself: a sharp corner
    ax.plot(xs, [min(p["copy"] * x, p["fma"]) for x in xs], color="black", lw=1.5,
            label=f"copy {p['copy'] / 1e9:.3g} GB/s, FMA peak {p['fma'] / 1e9:.4g} GFLOP/s")
    exp_flops = p["exp"] * p["flops"]  # element rate when exp bounds it, in FLOP/s
    ax.axhline(exp_flops, color="tab:red", ls="--", lw=1.2,
               label=f"exp unit {p['exp'] / 1e9:.3g} G exp/s (x {p['flops']:g} FLOP/element)")
    ax.axvline(ai, color="grey", ls=":", lw=0.8)
    markers = "os^Dv<>phX*"
    for i, r in enumerate(x for x in rows if int(x["B"]) == b and int(x["V"]) == v):
        flops_s = p["flops"] * b * v / (r["time_us"] * 1e-6)
        ax.plot([ai], [flops_s], markers[i % len(markers)], ms=8,
                label=f"{r['kernel']}: {flops_s / 1e9:.3g} GFLOP/s, {r.get('GB/s', 0) or 0:.3g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"arithmetic intensity (FLOP/byte); softmax: {p['flops']:g} FLOP / {p['bytes']:g} B = {ai:.3g}")
    ax.set_ylabel("FLOP/s")
    threads = meta.get("threads")
    ax.set_title(f"softmax roofline, {device}, B={b}, V={v}" + (f", {threads} thread(s)" if device == "cpu" else "")
                 + f" (ridge at {ridge_fma:.3g} FLOP/B)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    if p["defaults"]:
        fig.text(0.01, 0.01, "defaults used: " + "; ".join(p["defaults"]), fontsize=6)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m minigpt.plot", description="Plots of benchmark results")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rl = sub.add_parser("roofline", help="roofline of `minigpt bench softmax -o json`")
    rl.add_argument("input", type=Path)
    rl.add_argument("-o", "--output", type=Path, default=Path("roofline.png"))
    rl.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: the report's")
    rl.add_argument("--shape", default=None, help="BxV (default: the largest B at V=600)")
    args = ap.parse_args(argv)
    try:
        report = json.loads(args.input.read_text())
        out = roofline(report, args.output, args.device, args.shape)
    except (OSError, ValueError, KeyError) as e:
        print(f"minigpt.plot: error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
