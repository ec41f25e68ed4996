#!/usr/bin/env python3
"""Experiment 25: minigpt's graph compiler set against torch.compile. Writes manifest.json.

    PYTHONPATH=python python3 experiments/25-compile/run.py [--minigpt build/default/minigpt] \
        [--threads 1,2] [--work out/25-compile] [--quick] [--torch-json FILE ... | --torch-manifest FILE]
        [--repeats 3] [--runs 500] [--decode]

1. PyTorch: bench/peers/torch_compile_dump.py --out WORK/torch/<model>_<mode>, one fresh process
   and one emptied Inductor cache per (model, mode) so that every first call is cold (TinyHead and
   the port of the grammar MiniGPT; torch.compile default and max-autotune; eager against
   compiled at every --threads count), or the torch_compile.json files such runs wrote
   (--torch-json). Inductor's kernel files from the default-mode runs are copied here:
   kernel_inductor.cpp (TinyHead's fused softmax and its call()), kernels_gpt_inductor.cpp, and
   their *_t2.cpp twins compiled at 2 threads.
2. minigpt (the CLI's global -t goes before the subcommand): per graph (tinyhead; gpt at B=2,
   T=16) and mode (default, max-autotune), `minigpt -t 1 compile ... --dump DIR --explain` with an
   emptied MINIGPT_CACHE_DIR (cold), then the same in a new process (warm, a cache hit); the
   compile times are parsed from its output. Then --repeats times, at every thread count and
   mode: `minigpt -t n bench model -o json --no-peers --compile --compile-mode M` (our eager and
   compiled forward in one process; --decode adds --compile-decode) and tinyhead_bench (built
   here from tinyhead_bench.cpp against the same build's libraries: the CLI has no TinyHead
   bench), each pinned to the first n CPUs; medians over the repeats in minigpt.summary. A
   command the binary does not have is recorded with its exit status and message, never a
   crash. Our fused softmax kernel is copied from the TinyHead dump to kernel.cpp under a header
   naming the command, commit and compiler.
3. manifest.json here: machine, load averages, versions, threads, every command run, every
   figure with its unit, and the compile-match results with the tolerance actually checked
   (an allclose-style bound, never "byte equal").

--quick passes --quick to the torch script (TinyHead and the GPT, default mode, first thread
count, 30 runs) for a smoke run of the whole driver; its manifest says quick: true. Give it
--dest and --work elsewhere to leave this folder's files alone.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
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


def run_cmd(cmd: list[str], cpus: list[int] | None = None, timeout: int = 3600, env: dict | None = None) -> dict:
    """Runs cmd (pinned to cpus if given, in env if given); {command, rc, stdout, stderr tail, seconds}."""
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    t0 = dt.datetime.now()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=pin, env=env)
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
        # CLI11's words for an option or subcommand it does not know: the binary predates the
        # compiler (minigpt_features normally catches that before running). Else a real failure.
        msg = entry["stderr_tail"]
        missing = any(s in msg for s in ("was not expected", "A subcommand is required", "not recognized"))
        e["status"] = "not available in this binary" if missing else "failed"
    return e


def torch_side(args, work: Path) -> tuple[list[dict], list[dict]]:
    """([torch_compile.json of each run], [command records]). One process per (model, mode),
    each with its own emptied Inductor cache, so every (model, mode)'s first call is cold: the
    process's one-time costs (Inductor's imports, its probe of the CPU's vector ISA, the compile
    workers) included, as a user's first torch.compile of that model would pay them."""
    if args.torch_json:
        paths = [Path(p) for p in args.torch_json]
        return [json.loads(p.read_text()) for p in paths], [
            {"command": f"(read {p})", "rc": 0, "status": "ok"} for p in paths]
    models = ["tinyhead", "gpt"]
    modes = ["default"] if args.quick else ["default", "max-autotune"]
    reports, records = [], []
    for model in models:
        for mode in modes:
            out = work / "torch" / f"{model}_{mode}"
            cmd = [sys.executable, str(PEERS / "torch_compile_dump.py"), "--out", str(out),
                   "--models", model, "--modes", mode, "--threads", args.threads, "-m", str(args.model)]
            if args.quick:
                cmd.append("--quick")
            entry = run_cmd(cmd, timeout=3600)
            records.append(record(entry))
            if entry["rc"] != 0:
                print(f"run.py: `{entry['command']}` exited {entry['rc']}:\n{entry['stderr_tail']}", file=sys.stderr)
            report_path = out / "torch_compile.json"
            if report_path.is_file():
                reports.append(json.loads(report_path.read_text()))
    return reports, records


def copy_torch_kernels(work: Path, dest: Path) -> dict:
    """Inductor's kernel files of the default-mode runs -> this folder."""
    kept = {}
    for src in sorted((work / "torch").glob("*_default/kernel*_inductor*")):
        shutil.copyfile(src, dest / src.name)
        kept[src.name] = f"copied from {os.path.relpath(src, ROOT)}"
    return kept


def minigpt_features(exe: str) -> dict[str, bool]:
    """Which of the compiler's commands this binary has, read from its own --help."""
    top = run_cmd([exe, "--help"])["stdout"]
    bench = run_cmd([exe, "bench", "model", "--help"])["stdout"]
    return {"compile": re.search(r"^\s+compile\b", top, re.M) is not None,
            "bench_model_compile": "--compile" in bench}


def not_available(cmd: list[str], why: str) -> dict:
    return {"command": " ".join(cmd), "rc": None, "status": "not available in this binary", "reason": why}


def env_with(cache: Path | None) -> dict:
    env = dict(os.environ)
    if cache is not None:
        env["MINIGPT_CACHE_DIR"] = str(cache)
    return env


def parse_compile_times(stdout: str) -> dict:
    """`minigpt compile`'s line 'compile: 1.467 s (cold; passes .. ms, codegen .. ms, jit .. s);
    again: 31.9 ms (cache hit)' -> seconds, and the graph line's kernel count and variant."""
    out = {}
    m = re.search(r"^compile: ([\d.]+) s \((cold|cache hit); passes ([\d.]+) ms, codegen ([\d.]+) ms, jit ([\d.]+) s\); "
                  r"again: ([\d.]+) ms \(([^)]*)\)", stdout, re.M)
    if m:
        out = {"first_s": float(m[1]), "first": m[2], "passes_ms": float(m[3]), "codegen_ms": float(m[4]),
               "jit_s": float(m[5]), "again_same_process_ms": float(m[6]), "again": m[7]}
    g = re.search(r"-> (\d+) kernels, arena (\d+) bytes, mode (\S+) \(variant ([^)]*)\)", stdout)
    if g:
        out.update({"kernels": int(g[1]), "arena_bytes": int(g[2]), "mode": g[3], "variant": g[4]})
    k = re.search(r"\(key ([0-9a-f]+)\)", stdout)
    if k:
        out["key"] = k[1]
    w = re.search(r"whole call\(\) ([\d.]+) us", stdout)
    if w:
        out["explain_whole_call_us"] = float(w[1])
    return out


def median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def build_tinyhead_bench(exe: str, work: Path) -> tuple[str | None, dict]:
    """tinyhead_bench.cpp linked against the engine's libraries of exe's build tree (the link line
    of the minigpt target, read from build.ninja) -> WORK/tinyhead_bench."""
    build = Path(exe).resolve().parent
    ninja = (build / "build.ninja").read_text() if (build / "build.ninja").is_file() else ""
    m = re.search(r"^build minigpt: .*?\n((?:  .*\n)+)", ninja, re.M)
    if not m:
        return None, {"command": "(link line of minigpt in build.ninja)", "rc": 1, "status": "failed",
                      "stderr_tail": f"no minigpt target in {build / 'build.ninja'}"}
    var = dict(re.findall(r"^  (\w+) = (.*)$", m[1], re.M))
    libs = [p if p.startswith(("-", "/")) else str(build / p) for p in var.get("LINK_LIBRARIES", "").split()]
    out = work / "tinyhead_bench"
    cmd = ["g++", "-O3", "-DNDEBUG", "-std=c++20", "-DFMT_SHARED", f"-I{ROOT / 'src'}", f"-I{build / 'generated'}",
           str(HERE / "tinyhead_bench.cpp"), "-o", str(out), *libs, *var.get("LINK_PATH", "").split()]
    entry = run_cmd(cmd)
    return (str(out) if entry["rc"] == 0 else None), record(entry)


def minigpt_side(args, work: Path, threads: list[int], cpus: list[int]) -> dict:
    """Our compiler: cold and warm compiles with the dumps and --explain (each mode, each graph,
    a fresh MINIGPT_CACHE_DIR for the cold one), then eager against compiled at every thread
    count, args.repeats times in turn (medians kept, with the load before each)."""
    exe = args.minigpt or find_minigpt(None)
    side = {"binary": exe, "commands": [], "compile": {}, "bench": [], "tinyhead_bench": [],
            "units": {"median_us": "us, median: per forward call (B, T) or per decoded token",
                      "tokens_per_s": "tokens per second", "first_s": "s", "again_same_process_ms": "ms",
                      "warm_new_process_s": "s"}}
    if exe is None or not os.access(exe, os.X_OK):
        side["status"] = "no minigpt binary found (build it: cmake --build build/default --target minigpt)"
        return side
    features = minigpt_features(exe)
    side["features"] = features
    model = ["-m", str(args.model)]
    modes = ["default", "max-autotune"]
    for graph in ("tinyhead", "gpt"):
        for mode in modes:
            tag = graph if mode == "default" else f"{graph}_{mode}"
            dump = work / "minigpt" / tag
            shape = ["--batch", "2"] + (["--seq", "16"] if graph == "gpt" else [])
            cmd = [exe, "-t", str(threads[0]), "compile", "--graph", graph, *shape, "--mode", mode]
            if not features["compile"]:
                side["commands"].append(not_available(cmd, "`minigpt --help` lists no `compile` subcommand"))
                continue
            shutil.rmtree(dump, ignore_errors=True)
            cache = work / "minigpt" / f"cache_{tag}"
            shutil.rmtree(cache, ignore_errors=True)  # cold: an empty MINIGPT_CACHE_DIR
            cold_cmd = cmd + ["--dump", str(dump), "--explain"]
            la = load_average()
            entry = run_cmd(cold_cmd, cpus=cpus[:threads[0]], env=env_with(cache))
            rec = record(entry, keep_stdout=True)
            rec["env"] = {"MINIGPT_CACHE_DIR": os.path.relpath(cache, ROOT) + " (emptied first)"}
            side["commands"].append(rec)
            if rec["status"] != "ok":
                continue
            warm = run_cmd(cmd, cpus=cpus[:threads[0]], env=env_with(cache))  # a new process, the cache warm
            wrec = record(warm, keep_stdout=True)
            wrec["env"] = {"MINIGPT_CACHE_DIR": os.path.relpath(cache, ROOT) + " (as the cold run left it)"}
            side["commands"].append(wrec)
            explain = work / "minigpt" / f"explain_{tag}.txt"
            explain.write_text(entry["stdout"])
            shutil.copyfile(explain, args.dest / explain.name)
            times = parse_compile_times(entry["stdout"])
            wt = parse_compile_times(warm["stdout"]) if warm["rc"] == 0 else {}
            times["warm_new_process_s"] = wt.get("first_s")
            times["warm_new_process"] = wt.get("first")
            side["compile"][tag] = {"graph": graph, "mode": mode, "threads": threads[0], "load_average_before": la,
                                    "dump": os.path.relpath(dump, ROOT), "cache": os.path.relpath(cache, ROOT),
                                    "explain": explain.name, **times,
                                    "files": sorted(str(p.relative_to(dump)) for p in dump.rglob("*") if p.is_file())}
    tb, tb_rec = build_tinyhead_bench(exe, work)
    side["commands"].append(tb_rec)
    bench_cache = work / "minigpt" / "cache_bench"
    for rep in range(args.repeats):
        for n in threads:
            for mode in modes:
                cmd = [exe, "-t", str(n), "bench", "model", *model, "-o", "json", "--runs", str(args.runs),
                       "--no-peers", "--compile", "--compile-mode", mode]
                if args.decode:
                    cmd.append("--compile-decode")
                if not features["bench_model_compile"]:
                    side["commands"].append(not_available(cmd, "`minigpt bench model --help` has no --compile"))
                    continue
                la = load_average()
                entry = run_cmd(cmd, cpus=cpus[:n], env=env_with(bench_cache))
                rec = record(entry)
                side["commands"].append(rec)
                if rec["status"] == "ok":
                    try:
                        side["bench"].append({"repeat": rep, "threads": n, "mode": mode, "load_average_before": la,
                                              "report": json.loads(entry["stdout"])})
                    except json.JSONDecodeError as e:
                        rec["status"] = f"failed: stdout is not JSON ({e})"
            if tb:
                for mode in modes:
                    cmd = [tb, str(n), str(args.runs), "2", mode]
                    la = load_average()
                    entry = run_cmd(cmd, cpus=cpus[:n], env=env_with(bench_cache))
                    rec = record(entry)
                    side["commands"].append(rec)
                    if entry["rc"] in (0, 1):
                        try:
                            side["tinyhead_bench"].append({"repeat": rep, "mode": mode, "load_average_before": la,
                                                           **json.loads(entry["stdout"])})
                        except json.JSONDecodeError as e:
                            rec["status"] = f"failed: stdout is not JSON ({e})"
    side["summary"] = summarize(side)
    return side


def summarize(side: dict) -> list[dict]:
    """Medians over the repeats: per (graph, case, threads, mode), us per call, and the ratio."""
    rows: dict[tuple, list] = {}
    for b in side["bench"]:
        for r in b["report"].get("rows", []):
            case = r["case"]
            if case.startswith("forward compiled") or case.startswith("kv decode compiled"):
                key = ("gpt", case.split(" (")[0], b["threads"], b["mode"])
            else:  # eager rows: the same in every mode's run, pooled
                key = ("gpt", case.split(" (")[0], b["threads"], "eager")
            rows.setdefault(key, []).append((r["median_us"], b["load_average_before"][0] if b["load_average_before"] else None))
    for t in side["tinyhead_bench"]:
        rows.setdefault(("tinyhead", "forward", t["threads"], "eager"), []).append((t["eager_median_us"], t["load_average_before"][0]))
        rows.setdefault(("tinyhead", "forward compiled", t["threads"], t["mode"]), []).append(
            (t["compiled_median_us"], t["load_average_before"][0]))
    out = []
    for (graph, case, n, mode), vals in sorted(rows.items()):
        us = [v for v, _ in vals]
        out.append({"graph": graph, "case": case, "threads": n, "mode": mode, "median_us": median(us),
                    "samples_us": [round(v, 2) for v in us], "load_1min": [l for _, l in vals]})
    return out


def jit_command(side: dict) -> str:
    """The compiler and flags the JIT used for the cold TinyHead compile, from its cache entry's meta."""
    info = side.get("compile", {}).get("tinyhead", {})
    meta = ROOT / info.get("cache", "-") / f"{info.get('key')}.json"
    try:
        j = json.loads(meta.read_text())
        return f"{' '.join([j['compiler']['path'], *j['compiler']['flags']])} ({j['compiler']['version']})"
    except (OSError, KeyError, json.JSONDecodeError):
        return "(compiler not recorded: no cache entry)"


def copy_our_kernel(side: dict, dest: Path, header: str) -> str | None:
    """Our fused softmax kernel (the tinyhead dump's kernels/cpp_fused_softmax_*.cpp) -> kernel.cpp,
    as dumped, after a header comment naming the command, commit and compiler."""
    info = side.get("compile", {}).get("tinyhead")
    if not info:
        return None
    dump = ROOT / info["dump"]
    found = sorted(dump.glob("kernels/cpp_fused_softmax_*.cpp"))
    if not found:
        return None
    (dest / "kernel.cpp").write_text(header + found[0].read_text())
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


def torch_figures(reports: list[dict]) -> dict:
    """The manifest's torch block: one row per (model, device, mode, threads), units in names."""
    keys = ("model", "device", "mode", "threads", "first_call_s", "warm_first_call_s", "eager_median_us",
            "compiled_median_us", "speedup", "eager_thread_cpu_median_us", "compiled_thread_cpu_median_us",
            "cache", "warm_cache", "kernels", "load_average")
    first = reports[0]
    return {"torch": first.get("torch"), "commands": [r.get("command") for r in reports],
            "settings": {k: v for k, v in first.get("settings", {}).items() if k not in ("models", "modes")},
            "machine": first.get("machine"), "units": first.get("units"),
            "load_average_before_each_run": [r.get("load_average_before") for r in reports],
            "load_average_after_each_run": [r.get("load_average_after") for r in reports],
            "rows": [{k: row.get(k) for k in keys} for r in reports for row in r.get("results", [])],
            "kernel_files": {k: v for r in reports for k, v in (r.get("kernel_files") or {}).items()},
            "errors": [r["error"] for r in reports if r.get("error")]}


def markdown_tables(manifest: dict) -> str:
    """The torch figures as the markdown rows REPORT.md quotes (printed on stdout)."""
    rows = manifest.get("pytorch", {}).get("rows", [])
    match = {(m["model"], m["device"], m["mode"], m["threads"]): m for m in manifest.get("compile_match", [])}
    lines = ["| model | device | mode | threads | eager us | compiled us | eager/compiled | thread CPU us, "
             "eager / compiled | first call s | warm first call s | max abs diff (tol) |",
             "| " + " | ".join(["---"] * 11) + " |"]
    for r in rows:
        m = match.get((r["model"], r["device"], r["mode"], r["threads"]), {})
        warm = r.get("warm_first_call_s")
        lines.append(f"| {r['model']} | {r['device']} | {r['mode']} | {r['threads']} | {r['eager_median_us']:.1f} | "
                     f"{r['compiled_median_us']:.1f} | {r['speedup']:.2f} | {r['eager_thread_cpu_median_us']:.1f} / "
                     f"{r['compiled_thread_cpu_median_us']:.1f} | {r['first_call_s']:.1f} | "
                     f"{'-' if warm is None else f'{warm:.2f}'} | {m.get('max_abs_diff', float('nan')):.2g} "
                     f"(< {m.get('tolerance')}) |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minigpt", help="minigpt binary (default: newest build/*/minigpt)")
    ap.add_argument("-m", "--model", default=str(SHIPPED))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=500, help="timed calls of `minigpt bench model`")
    ap.add_argument("--work", default=str(ROOT / "out" / "25-compile"), help="scratch folder (dumps, caches)")
    ap.add_argument("--torch-json", nargs="+", help="use these torch_compile.json files (WORK/torch/*/) "
                    "instead of running the torch side again")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--torch-manifest", help="take the torch half (figures, compile match, kernel files) from this "
                    "earlier manifest.json instead of running torch again")
    ap.add_argument("--repeats", type=int, default=3, help="times the minigpt benches are repeated (medians kept)")
    ap.add_argument("--decode", action="store_true", help="also time the compiled decode step (--compile-decode: "
                    "compiles one graph per cache length on the first run)")
    ap.add_argument("--dest", type=Path, default=HERE, help="where manifest.json and the kept kernel files "
                    "go (default: this folder; give another for a smoke run)")
    args = ap.parse_args()

    threads = [int(s) for s in args.threads.split(",") if s.strip()]
    cpus = sorted(os.sched_getaffinity(0))
    if not threads or min(threads) < 1 or max(threads) > len(cpus):
        print(f"run.py: error: --threads {args.threads}: counts must be in [1, {len(cpus)}]", file=sys.stderr)
        return 2
    work = Path(args.work).resolve()
    args.dest = args.dest.resolve()
    args.dest.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)

    manifest = {
        "experiment": "25-compile",
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": args.quick,
        "machine": {"platform": platform.platform(), "cpus_usable": len(cpus), "cpus_online": os.cpu_count()},
        "versions": versions(),
        "threads": threads,
        "model": os.path.relpath(args.model, ROOT) if Path(args.model).is_absolute() else args.model,
        "load_average_start": load_average(),
        "commands": [],
    }
    if args.torch_manifest:  # the torch half as an earlier run of this script measured it
        old = json.loads(Path(args.torch_manifest).read_text())
        for k in ("pytorch", "compile_match", "compile_match_passed", "kernel_files"):
            if k in old:
                manifest[k] = old[k]
        manifest["versions"]["torch"] = old.get("versions", {}).get("torch")
        manifest["machine"]["cpu"] = old.get("machine", {}).get("cpu")
        manifest["pytorch_from"] = {"manifest": os.path.relpath(Path(args.torch_manifest).resolve(), ROOT),
                                    "date_utc": old.get("date_utc"), "commands": [c for c in old.get("commands", [])
                                                                                  if "torch_compile_dump" in c.get("command", "")]}
        reports = None
    else:
        reports, recs = torch_side(args, work)
        manifest["commands"] += recs
    if reports is None:
        pass
    elif reports:
        manifest["machine"]["cpu"] = reports[0]["machine"]["cpu"]
        manifest["versions"]["torch"] = reports[0]["torch"]
        manifest["pytorch"] = torch_figures(reports)
        manifest["compile_match"] = [
            {"model": r["model"], "device": r["device"], "mode": r["mode"], "threads": r["threads"], **r["match"]}
            for rep in reports for r in rep.get("results", [])]
        manifest["compile_match_passed"] = (all(rep.get("compile_match_passed") for rep in reports)
                                            and len(reports) == len(recs))
        manifest["kernel_files"] = copy_torch_kernels(work, args.dest)
    else:
        manifest["pytorch"] = {"status": "no torch_compile.json written; see commands"}

    ours = minigpt_side(args, work, threads, cpus)
    manifest["commands"] += ours.pop("commands")
    manifest["minigpt"] = ours
    v = manifest["versions"]
    header = (f"// minigpt's generated fused softmax kernel for TinyHead (B=2), as dumped by\n"
              f"//   {ours.get('compile', {}).get('tinyhead', {}).get('dump', 'DIR')}: minigpt -t {threads[0]} compile --graph tinyhead "
              f"--batch 2 --mode default --dump DIR --explain\n"
              f"// at commit {v.get('git_commit')}; the JIT compiled the whole output_code.cpp with\n"
              f"//   {jit_command(ours)}\n"
              f"// Everything below this comment is the dump's kernels/ file, unchanged;\n"
              f"// MG_W (16), mg_vf, mg_load/mg_store, mg_max_v, mg_exp_v, mg_hmax, mg_hsum are the helpers at the\n"
              f"// top of the dump's output_code.cpp. KERNEL_ANNOTATION.md section 2 reads it line by line.\n\n")
    kernel = copy_our_kernel(ours, args.dest, header)
    manifest.setdefault("kernel_files", {})["kernel.cpp"] = kernel or "not written: no `minigpt compile --dump` output yet"
    manifest["load_average_end"] = load_average()

    out = args.dest / "manifest.json"
    tmp = out.with_suffix(".json.tmp")
    # Paths inside the repository relative to its root, so the manifest reads the same anywhere.
    tmp.write_text(json.dumps(manifest, indent=2).replace(str(ROOT) + os.sep, "") + "\n")
    tmp.replace(out)
    print(f"run.py: wrote {os.path.relpath(out, ROOT)}", file=sys.stderr)
    print(markdown_tables(manifest))
    return 0 if manifest.get("compile_match_passed") else 1


if __name__ == "__main__":
    sys.exit(main())
