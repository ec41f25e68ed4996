#!/usr/bin/env python3
"""Experiment 25: minigpt's graph compiler set against torch.compile. Writes manifest.json.

    PYTHONPATH=python python3 experiments/25-compile/run.py [--minigpt build/default/minigpt] \
        [--threads 1,2] [--work out/25-compile] [--quick] [--torch-json FILE]

1. PyTorch: bench/peers/torch_compile_dump.py --out WORK/torch (TinyHead and the port of the
   grammar MiniGPT, torch.compile default and max-autotune, eager against compiled at every
   --threads count, a cold private Inductor cache), or a torch_compile.json it already wrote
   (--torch-json). Inductor's kernel files are copied here: kernel_inductor.cpp (TinyHead's fused
   softmax and its call()) and kernels_gpt_inductor.cpp.
2. minigpt: `minigpt compile --graph tinyhead|gpt --dump DIR --explain` and, at every thread
   count, `minigpt bench model -o json` (eager) and `minigpt bench model --compile -o json`,
   each pinned to the first n CPUs as the torch side is. A command the binary does not have yet
   (the compiler is being built) is recorded in the manifest with its exit status and message,
   never a crash. Our fused softmax kernel, if the dump has one, is copied to kernel.cpp.
3. manifest.json here: machine, load averages, versions, threads, every command run, every
   figure with its unit, and the compile-match results with the tolerance actually checked
   (an allclose-style bound, never "byte equal").

--quick passes --quick to the torch script (TinyHead and the GPT, default mode, first thread
count, 30 runs) for a smoke run of the whole driver; its manifest says quick: true.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PEERS = ROOT / "bench" / "peers"
SHIPPED = ROOT / "models" / "grammar-minigpt.safetensors"
sys.path.insert(0, str(PEERS))
from torch_model import find_minigpt  # noqa: E402  (newest build/*/minigpt)


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def tail(text: str, n: int = 1500) -> str:
    return text[-n:] if text else ""


def run_cmd(cmd: list[str], cpus: list[int] | None = None, timeout: int = 3600) -> dict:
    """Runs cmd (pinned to cpus if given); {command, rc, stdout, stderr tail, seconds}."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    t0 = dt.datetime.now()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=pin)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except FileNotFoundError as e:
        rc, out, err = 127, "", str(e)
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, e.stdout or "", f"timed out after {timeout} s"
    return {"command": " ".join(cmd), "pinned_cpus": cpus, "rc": rc, "stdout": out,
            "stderr_tail": tail(err), "seconds": (dt.datetime.now() - t0).total_seconds()}


def record(entry: dict, keep_stdout: bool = False) -> dict:
    """The manifest's view of a command: status ok / not available / failed, no bulky stdout."""
    e = {k: v for k, v in entry.items() if k != "stdout"}
    if keep_stdout:
        e["stdout_tail"] = tail(entry["stdout"], 4000)
    if entry["rc"] == 0:
        e["status"] = "ok"
    else:
        # CLI11 says "The following argument was not expected" or names an unknown subcommand:
        # the binary predates the compiler. Anything else is a real failure.
        msg = entry["stderr_tail"]
        missing = any(s in msg for s in ("not expected", "was not expected", "Extras", "not recognized",
                                          "unknown", "Unknown", "No such file"))
        e["status"] = "not available in this binary" if missing else "failed"
    return e


def torch_side(args, work: Path) -> tuple[dict | None, dict]:
    """(torch_compile.json, its command record)."""
    if args.torch_json:
        path = Path(args.torch_json)
        return json.loads(path.read_text()), {"command": f"(read {path})", "rc": 0, "status": "ok"}
    cmd = [sys.executable, str(PEERS / "torch_compile_dump.py"), "--out", str(work / "torch"),
           "--threads", args.threads, "-m", str(args.model)]
    if args.quick:
        cmd.append("--quick")
    entry = run_cmd(cmd, timeout=4 * 3600)
    rec = record(entry)
    report_path = work / "torch" / "torch_compile.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else None
    if entry["rc"] != 0:
        print(f"run.py: torch side exited {entry['rc']}:\n{entry['stderr_tail']}", file=sys.stderr)
    return report, rec


def copy_torch_kernels(work: Path) -> dict:
    kept = {}
    for src in sorted((work / "torch").glob("kernel*_inductor*")):
        name = src.name
        if src.is_file():
            shutil.copyfile(src, HERE / name)
            kept[name] = f"copied from {os.path.relpath(src, ROOT)}"
    return kept


def minigpt_side(args, work: Path, threads: list[int], cpus: list[int]) -> dict:
    exe = args.minigpt or find_minigpt(None)
    side = {"binary": exe, "commands": [], "compile": {}, "bench": []}
    if exe is None or not os.access(exe, os.X_OK):
        side["status"] = "no minigpt binary found (build it: cmake --build build/default --target minigpt)"
        return side
    model = ["-m", str(args.model)]
    for graph in ("tinyhead", "gpt"):
        dump = work / "minigpt" / graph
        shutil.rmtree(dump, ignore_errors=True)
        entry = run_cmd([exe, "compile", "--graph", graph, "--dump", str(dump), "--explain"],
                        cpus=cpus[:threads[0]])
        rec = record(entry, keep_stdout=True)
        side["commands"].append(rec)
        if rec["status"] == "ok":
            (work / "minigpt").mkdir(parents=True, exist_ok=True)
            explain = work / "minigpt" / f"explain_{graph}.txt"
            explain.write_text(entry["stdout"])
            side["compile"][graph] = {"dump": os.path.relpath(dump, ROOT), "explain": os.path.relpath(explain, ROOT),
                                      "files": sorted(p.name for p in dump.iterdir()) if dump.is_dir() else []}
    for n in threads:
        for extra in ([], ["--compile"]):
            cmd = [exe, "bench", "model", *model, "-o", "json", "-t", str(n), "--runs", str(args.runs), *extra]
            entry = run_cmd(cmd, cpus=cpus[:n])
            rec = record(entry)
            side["commands"].append(rec)
            if rec["status"] == "ok":
                try:
                    side["bench"].append({"threads": n, "compiled_flag": bool(extra),
                                          "report": json.loads(entry["stdout"])})
                except json.JSONDecodeError as e:
                    rec["status"] = f"failed: stdout is not JSON ({e})"
    return side


def copy_our_kernel(side: dict) -> str | None:
    """Our fused softmax kernel (the tinyhead dump's cpp_fused_softmax_* file) -> kernel.cpp."""
    info = side.get("compile", {}).get("tinyhead")
    if not info:
        return None
    dump = ROOT / info["dump"]
    found = sorted(p for p in dump.rglob("*") if p.is_file() and "softmax" in p.name)
    if not found:
        return None
    shutil.copyfile(found[0], HERE / "kernel.cpp")
    return f"copied from {os.path.relpath(found[0], ROOT)}"


def versions() -> dict:
    out = {"python": platform.python_version()}
    try:
        out["g++"] = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        out["g++"] = None
    try:
        out["git_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip()
    except OSError:
        out["git_commit"] = None
    return out


def torch_figures(report: dict) -> dict:
    """The manifest's torch block: one row per (model, device, mode, threads), units in names."""
    rows = []
    for r in report.get("results", []):
        rows.append({k: r.get(k) for k in ("model", "device", "mode", "threads", "first_call_s",
                                            "warm_first_call_s", "eager_median_us", "compiled_median_us",
                                            "speedup", "cache", "warm_cache", "kernels", "load_average")})
    return {"torch": report.get("torch"), "command": report.get("command"), "settings": report.get("settings"),
            "machine": report.get("machine"), "units": report.get("units"),
            "load_average_before": report.get("load_average_before"),
            "load_average_after": report.get("load_average_after"), "rows": rows,
            "kernel_files": report.get("kernel_files"), "error": report.get("error")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minigpt", help="minigpt binary (default: newest build/*/minigpt)")
    ap.add_argument("-m", "--model", default=str(SHIPPED))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=500, help="timed calls of `minigpt bench model`")
    ap.add_argument("--work", default=str(ROOT / "out" / "25-compile"), help="scratch folder (dumps, caches)")
    ap.add_argument("--torch-json", help="use this torch_compile.json instead of running the torch side")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()

    threads = [int(s) for s in args.threads.split(",") if s.strip()]
    cpus = sorted(os.sched_getaffinity(0))
    if not threads or min(threads) < 1 or max(threads) > len(cpus):
        print(f"run.py: error: --threads {args.threads}: counts must be in [1, {len(cpus)}]", file=sys.stderr)
        return 2
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)

    manifest = {
        "experiment": "25-compile",
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": args.quick,
        "machine": {"platform": platform.platform(), "cpus_usable": len(cpus)},
        "versions": versions(),
        "threads": threads,
        "model": os.path.relpath(args.model, ROOT) if Path(args.model).is_absolute() else args.model,
        "load_average_start": load_average(),
        "commands": [],
    }
    report, rec = torch_side(args, work)
    manifest["commands"].append(rec)
    if report is not None:
        manifest["machine"]["cpu"] = report["machine"]["cpu"]
        manifest["versions"]["torch"] = report["torch"]
        manifest["pytorch"] = torch_figures(report)
        manifest["compile_match"] = [
            {"model": r["model"], "device": r["device"], "mode": r["mode"], "threads": r["threads"], **r["match"]}
            for r in report.get("results", [])]
        manifest["compile_match_passed"] = report.get("compile_match_passed")
        manifest["kernel_files"] = copy_torch_kernels(work)
    else:
        manifest["pytorch"] = {"status": "torch_compile.json not written; see commands[0]"}

    ours = minigpt_side(args, work, threads, cpus)
    manifest["commands"] += ours.pop("commands")
    manifest["minigpt"] = ours
    kernel = copy_our_kernel(ours)
    manifest.setdefault("kernel_files", {})["kernel.cpp"] = kernel or "not written: no `minigpt compile --dump` output yet"
    manifest["load_average_end"] = load_average()

    out = HERE / "manifest.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(out)
    print(f"run.py: wrote {os.path.relpath(out, ROOT)}", file=sys.stderr)
    return 0 if manifest.get("compile_match_passed") else 1


if __name__ == "__main__":
    sys.exit(main())
