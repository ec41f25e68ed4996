#!/usr/bin/env python3
"""torch.compile peer of `minigpt compile`: compiles TinyHead and the PyTorch port of the grammar
MiniGPT with Inductor, keeps the code Inductor generated, and measures compiled against eager.

    PYTHONPATH=python python3 bench/peers/torch_compile_dump.py --out DIR \
        [--threads 1,2] [--models tinyhead,gpt] [--modes default,max-autotune] [--quick]

What it does, in this order (one process, so the first compile pays Inductor's one-time costs):

1. Sets TORCH_LOGS=output_code, TORCH_COMPILE_DEBUG=1, TORCH_LOGS_OUT=DIR/torch_logs.txt,
   TORCH_COMPILE_DEBUG_DIR=DIR/debug and TORCHINDUCTOR_CACHE_DIR=DIR/inductor_cache (and
   TRITON_CACHE_DIR=DIR/triton_cache) BEFORE torch is imported. DIR/debug and the two caches are
   emptied first, so the first compile is cold and every generated file lies under DIR.
2. For each model (TinyHead: Linear(64, 600) then softmax, torch.manual_seed(42),
   x = torch.randn(2, 64); gpt: the port loaded from models/grammar-minigpt.safetensors through
   minigpt.torch_minigpt, ids (B=2, T=16) from seed 42), each mode and each thread count:
   torch._dynamo.reset(), torch.compile(model, mode=...), the first call timed (compilation
   included; Inductor's FX-graph cache hits and misses recorded beside it), the compile match
   (max |compiled - eager| against the tolerance), then eager and compiled timed per call,
   interleaved in blocks of 10 calls, median of --runs. At the first thread count of each
   (model, mode) the compile is repeated after torch._dynamo.reset() in the same process: that
   "warm" first call finds the FX graph in the cache the cold one wrote.
   Threads: torch.set_num_threads(n) with one inter-op thread (bench/peers/torch_threads.py),
   and every thread of the process pinned to the first n CPUs of its affinity (--no-pin: not).
   Everything runs under torch.inference_mode(), as bench/peers/torch_model.py times the port.
3. Cuts the kernels out of each compile's output_code.py (async_compile.cpp_pybinding /
   async_compile.cpp / async_compile.triton sources) and its call() wrapper, and writes:
     kernel_inductor.cpp    TinyHead's fused softmax kernel + its call() (as a comment)
     kernels_gpt_inductor.cpp   every fused kernel of the GPT (attention softmax, layernorms...)
       (from the default-mode compile at the first thread count; other counts: *_t<n>.cpp)
     output_code/<model>_<mode>_<device>_t<n>.py   each compile's whole output_code.py
     torch_compile.json     every figure with its unit (also printed on stdout)
   each kernel file with a header: torch version, command, the file it was cut from.

Tolerances: TinyHead probabilities < 1e-6 (the lab's acceptance); the GPT's logits < 1e-5 (the
issue's whole-model bound; probabilities < 1e-6 are checked too) and the same top-1 token at
every position. A failed match is recorded, and the exit status is 1 after all files are written.
Exit 2: bad arguments or torch missing (torch is required here, unlike torch_model.py).

Not here: the C++ engine (experiments/25-compile/run.py runs both), GPU autotuning details,
mode="reduce-overhead" (CUDA graphs).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SHIPPED = ROOT / "models" / "grammar-minigpt.safetensors"

MODELS = ("tinyhead", "gpt")
MODES = ("default", "max-autotune")
TINYHEAD_TOL = 1e-6        # the lab's acceptance: max |compiled - eager| < 1e-6
GPT_LOGITS_TOL = 1e-5      # the whole-model bound on logits
GPT_PROBS_TOL = 1e-6

# A kernel in output_code.py: `NAME = async_compile.KIND(<args on one line>r'''SOURCE''' ...`.
KERNEL_RE = re.compile(
    r"^(?P<name>\w+) = async_compile\.(?P<kind>cpp_pybinding|cpp|triton)\((?P<pre>[^\n]*?)r?'''(?P<src>.*?)'''",
    re.S | re.M)


class DumpError(RuntimeError):
    """A failure this script can name (bad arguments, no kernel found...)."""


# ---------------------------------------------------------------------------------- environment

def prepare_environment(out: Path, compile_threads: int | None) -> dict[str, str]:
    """Empties out/debug and the caches and sets the variables Inductor reads at import time.
    Must run before `import torch` anywhere in this process."""
    if "torch" in sys.modules:
        raise DumpError("torch was imported before the environment was set: TORCH_LOGS and "
                        "TORCH_COMPILE_DEBUG would be ignored (run this script as a program)")
    for sub in ("debug", "inductor_cache", "triton_cache", "output_code"):
        shutil.rmtree(out / sub, ignore_errors=True)
    env = {
        "TORCH_LOGS": "output_code",
        "TORCH_LOGS_OUT": str(out / "torch_logs.txt"),
        "TORCH_COMPILE_DEBUG": "1",
        "TORCH_COMPILE_DEBUG_DIR": str(out / "debug"),
        "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor_cache"),
        "TRITON_CACHE_DIR": str(out / "triton_cache"),
    }
    if compile_threads is not None:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(compile_threads)
    os.environ.update(env)
    return env


def pin_process(cpus: list[int]) -> None:
    """Pins every thread of this process (OpenMP workers included) to cpus."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass  # the thread ended meanwhile


def load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ---------------------------------------------------------------------------------- models

def build_models(torch, names: list[str], model_path: Path, device: str):
    """{name: (module, inputs tuple, describe)} on device; every input from seed 42."""
    import torch.nn as nn

    class TinyHead(nn.Module):
        """The lab's stand-in: Linear(64, 600) then softmax over the 600."""

        def __init__(self, d: int = 64, vocab: int = 600):
            super().__init__()
            self.fc = nn.Linear(d, vocab)

        def forward(self, x):
            return torch.softmax(self.fc(x), dim=-1)

    out = {}
    if "tinyhead" in names:
        torch.manual_seed(42)
        model = TinyHead().eval()
        x = torch.randn(2, 64)
        out["tinyhead"] = (model.to(device), (x.to(device),), "TinyHead: Linear(64, 600) -> softmax, "
                           "torch.manual_seed(42), x = torch.randn(2, 64)")
    if "gpt" in names:
        if not model_path.is_file():
            raise DumpError(f"model file {model_path} not found (pass -m)")
        sys.path.insert(0, str(ROOT / "python"))
        from minigpt.torch_minigpt import GrammarMiniGPT
        model = GrammarMiniGPT.from_file(model_path)
        g = torch.Generator().manual_seed(42)
        ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=g)
        out["gpt"] = (model.to(device), (ids.to(device),),
                      f"GrammarMiniGPT port from {model_path.name}, ids (2, 16) from seed 42")
    return out


def match_check(torch, name: str, eager_out, comp_out) -> dict:
    """Max abs differences of compiled against eager and the tolerances actually checked."""
    def diff(a, b):
        return float((a.float() - b.float()).abs().max().item())

    if name == "tinyhead":
        d = diff(comp_out, eager_out)
        return {"check": "max |compiled - eager| of the probabilities < tol", "tolerance": TINYHEAD_TOL,
                "max_abs_diff": d, "passed": d < TINYHEAD_TOL}
    (l_e, p_e), (l_c, p_c) = eager_out, comp_out
    dl, dp = diff(l_c, l_e), diff(p_c, p_e)
    top1 = bool(torch.equal(l_c.argmax(-1), l_e.argmax(-1)))
    return {"check": "max |compiled - eager|: logits < tolerance, probs < probs_tolerance, same top-1 everywhere",
            "tolerance": GPT_LOGITS_TOL, "probs_tolerance": GPT_PROBS_TOL,
            "max_abs_diff": dl, "max_abs_diff_probs": dp, "same_top1": top1,
            "passed": dl < GPT_LOGITS_TOL and dp < GPT_PROBS_TOL and top1}


# ---------------------------------------------------------------------------------- timing

def time_interleaved(fns: dict, runs: int, warmup: int, sync, block: int = 10) -> dict[str, dict]:
    """{fn: {"wall_us", "thread_cpu_us"}}: medians per call, timed one call at a time, blocks of
    `block` calls in turn (so a change in the machine's load falls on every fn alike).
    thread_cpu_us is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): at one thread it is
    the whole call's work, and unlike the wall time it does not grow while a busy machine keeps
    the process off the CPU; at more threads it leaves out the other threads' work."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
        sync()
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    while len(wall[next(iter(fns))]) < runs:
        for k, fn in fns.items():
            for _ in range(block):
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                fn()
                sync()
                t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                wall[k].append((t1 - t0) / 1e3)
                cpu[k].append((c1 - c0) / 1e3)
    return {k: {"wall_us": statistics.median(wall[k][:runs]), "thread_cpu_us": statistics.median(cpu[k][:runs])}
            for k in fns}


def cache_counters() -> dict[str, int]:
    from torch._dynamo.utils import counters
    out = {}
    for group in ("inductor", "aot_autograd"):
        for k, v in counters[group].items():
            if "cache" in k:
                out[f"{group}.{k}"] = int(v)
    return out


def delta(after: dict, before: dict) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


# ---------------------------------------------------------------------------------- code

def new_output_code(out: Path, before: set[Path]) -> Path | None:
    """The output_code.py a compile just wrote under out/debug (the newest new one)."""
    now = set((out / "debug").rglob("output_code.py"))
    fresh = sorted(now - before, key=lambda p: p.stat().st_mtime)
    return fresh[-1] if fresh else None


def parse_output_code(text: str) -> tuple[list[dict], str]:
    """([{name, kind, source}], call() source) of one output_code.py."""
    kernels = [{"name": m["name"], "kind": m["kind"], "source": m["src"].strip("\n")}
               for m in KERNEL_RE.finditer(text)]
    lines = text.splitlines()
    call = ""
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)def call\(", line)
        if m:
            indent = len(m.group(1))
            body = [line]
            for nxt in lines[i + 1:]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                body.append(nxt)
            call = "\n".join(body).rstrip()
            break
    return kernels, call


def header(torch, what: str, source: Path, out: Path, argv: list[str], c: str) -> str:
    """The kernel file's header, each line starting with the comment marker c."""
    rel = os.path.relpath(source, out)
    return "\n".join(f"{c} {line}".rstrip() for line in [
        f"{what}",
        f"Generated by torch {torch.__version__} Inductor (torch.compile), cut verbatim from",
        f"  {rel}  (relative to the output folder)",
        f"Produced by: {' '.join(argv).replace(str(ROOT) + os.sep, '')}",
        "  with TORCH_LOGS=output_code TORCH_COMPILE_DEBUG=1 set before torch was imported, a cold",
        f"  private TORCHINDUCTOR_CACHE_DIR, on {cpu_model()}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "Nothing between this header and the call() comment at the end was edited.",
    ]) + "\n"


def write_kernel_files(torch, out: Path, dumps: dict, argv: list[str]) -> dict:
    """Writes, from each default-mode compile: kernel_inductor.cpp (TinyHead's fused softmax and
    its call()) and kernels_gpt_inductor.cpp (every kernel of the GPT); the first thread count
    gets the plain name, the others a _t<n> suffix (Inductor generates different code for one
    thread: no OpenMP region). Returns {file: [kernel names]}."""
    written = {}
    for (model, mode, device, n), src_path in dumps.items():
        if mode != "default":
            continue
        kernels, call = parse_output_code(src_path.read_text())
        if not kernels:
            raise DumpError(f"no generated kernel found in {src_path}")
        first_n = min(k[3] for k in dumps if k[:3] == (model, mode, device))
        suffix = ("" if device == "cpu" else f"_{device}") + ("" if n == first_n else f"_t{n}")
        ext, comment = ("cpp", "//") if device == "cpu" else ("py", "#")
        if model == "tinyhead":
            chosen = [k for k in kernels if "softmax" in k["name"]]
            if not chosen:
                raise DumpError(f"no fused softmax kernel in {src_path}: kernels are "
                                f"{[k['name'] for k in kernels]}")
            fname = f"kernel_inductor{suffix}.{ext}"
            what = f"Inductor's fused softmax kernel for TinyHead: {chosen[0]['name']}"
        else:
            chosen, fname = kernels, f"kernels_gpt_inductor{suffix}.{ext}"
            what = f"Inductor's {len(kernels)} generated kernels for the GrammarMiniGPT forward at (B=2, T=16)"
        what += f" ({device}, torch.compile mode=default, compiled and run with torch.set_num_threads({n}))"
        parts = [header(torch, what, src_path, out, argv, comment)]
        for k in chosen:
            parts += [f"{comment} ---- {k['name']} (async_compile.{k['kind']}) ----", k["source"], ""]
        parts += [f"{comment} ---- call(): the Python wrapper that runs the kernels above and the extern ones ----"]
        parts += [f"{comment} {line}" if line else comment for line in call.splitlines()]
        (out / fname).write_text("\n".join(parts) + "\n")
        written[fname] = [k["name"] for k in chosen]
    return written


# ---------------------------------------------------------------------------------- main

def parse_list(text: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise DumpError(f"--{what}: empty list")
    if allowed:
        bad = [s for s in items if s not in allowed]
        if bad:
            raise DumpError(f"--{what}: unknown {bad[0]!r} (choose from {', '.join(allowed)})")
    return items


def main(argv: list[str] | None = None) -> int:
    argv_list = sys.argv if argv is None else [sys.argv[0], *argv]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (created; its debug/, inductor_cache/, "
                    "triton_cache/ and output_code/ are emptied first)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--models", default="tinyhead,gpt", help="tinyhead,gpt (default both)")
    ap.add_argument("--modes", default="default,max-autotune", help="torch.compile modes (default "
                    "default,max-autotune)")
    ap.add_argument("-m", "--model", default=str(SHIPPED), help="the GPT's model file (default: the shipped one)")
    ap.add_argument("--runs", type=int, default=500, help="timed calls per figure (median)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--no-pin", action="store_true", help="do not pin the process to the first n CPUs")
    ap.add_argument("--no-gpu", action="store_true", help="CPU only, even when CUDA is available")
    ap.add_argument("--compile-threads", type=int, help="TORCHINDUCTOR_COMPILE_THREADS (default: torch's)")
    ap.add_argument("--quick", action="store_true", help="smoke run: mode default only, the first thread "
                    "count only, 30 runs, 5 warm-up")
    args = ap.parse_args(argv)

    try:
        threads = [int(s) for s in parse_list(args.threads, None, "threads")]
        if any(n < 1 for n in threads):
            raise DumpError("--threads: counts must be >= 1")
        models = parse_list(args.models, MODELS, "models")
        modes = parse_list(args.modes, MODES, "modes")
        if args.runs < 1 or args.warmup < 0:
            raise DumpError("--runs must be >= 1 and --warmup >= 0")
        if args.quick:
            modes, threads, args.runs, args.warmup = ["default"], threads[:1], 30, 5
        cpus = sorted(os.sched_getaffinity(0))
        if not args.no_pin and max(threads) > len(cpus):
            raise DumpError(f"--threads {max(threads)} asks for more CPUs than this process may use ({len(cpus)})")
        out = Path(args.out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        env = prepare_environment(out, args.compile_threads)
    except DumpError as e:
        print(f"torch_compile_dump.py: error: {e}", file=sys.stderr)
        return 2

    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print(f"torch_compile_dump.py: error: torch is not importable ({type(e).__name__}: {e}); "
              "this peer needs it (pip install torch)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    from torch_threads import use_threads  # beside this script

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and not args.no_gpu else [])
    report = {
        "tool": "bench/peers/torch_compile_dump.py",
        "command": " ".join(argv_list),
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": {"cpu": cpu_model(), "cpus_usable": len(cpus), "platform": platform.platform(),
                    "cuda": torch.cuda.get_device_name(0) if "cuda" in devices else None},
        "environment": env,
        "settings": {"threads": threads, "models": models, "modes": modes, "devices": devices,
                     "runs": args.runs, "warmup": args.warmup, "pinned": not args.no_pin,
                     "grad": "torch.inference_mode()", "timing": "per call, perf_counter, eager and "
                     "compiled interleaved in blocks of 10 calls, median of runs"},
        "load_average_before": load_average(),
        "units": {"first_call_s": "s, wall, the first compiled call (tracing + compiling + running)",
                  "warm_first_call_s": "s, wall, the same after torch._dynamo.reset(): FX-graph cache hit",
                  "eager_median_us": "us per call, wall", "compiled_median_us": "us per call, wall",
                  "eager_thread_cpu_median_us": "us per call, CPU time of the calling thread",
                  "compiled_thread_cpu_median_us": "us per call, CPU time of the calling thread", "max_abs_diff": "absolute, fp32",
                  "speedup": "eager_median_us / compiled_median_us (> 1: compiled faster)"},
        "results": [],
    }
    failed = False
    dumps: dict[tuple[str, str, str, int], Path] = {}
    try:
        for device in devices:
            built = build_models(torch, models, Path(args.model), device)
            sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
            for name in models:
                module, inputs, describe = built[name]
                report.setdefault("models", {})[name] = describe
                for mode in modes:
                    for i, n in enumerate(threads):
                        use_threads(torch, n)
                        if not args.no_pin:
                            pin_process(cpus[:n])
                        row = {"model": name, "device": device, "mode": mode, "threads": n}
                        with torch.inference_mode():
                            eager_out = module(*inputs)
                            before_files = set((out / "debug").rglob("output_code.py"))
                            torch._dynamo.reset()
                            c0 = cache_counters()
                            compiled = torch.compile(module, mode=mode)
                            t0 = time.perf_counter()
                            comp_out = compiled(*inputs)
                            sync()
                            row["first_call_s"] = time.perf_counter() - t0
                            row["cache"] = delta(cache_counters(), c0)
                            src = new_output_code(out, before_files)
                            if src is not None:
                                dumps[(name, mode, device, n)] = src
                                kernels, _ = parse_output_code(src.read_text())
                                row["kernels"] = [k["name"] for k in kernels]
                                keep = out / "output_code" / f"{name}_{mode}_{device}_t{n}.py"
                                keep.parent.mkdir(exist_ok=True)
                                shutil.copyfile(src, keep)
                                row["output_code"] = os.path.relpath(keep, out)
                            else:
                                row["kernels"] = None
                                row["output_code"] = "none written (an FX-graph cache hit writes no debug dump)"
                            row["match"] = match_check(torch, name, eager_out, comp_out)
                            failed |= not row["match"]["passed"]
                            if i == 0:  # the same graph again: Inductor's cache now holds it
                                torch._dynamo.reset()
                                c0 = cache_counters()
                                again = torch.compile(module, mode=mode)
                                t0 = time.perf_counter()
                                again(*inputs)
                                sync()
                                row["warm_first_call_s"] = time.perf_counter() - t0
                                row["warm_cache"] = delta(cache_counters(), c0)
                                compiled = again
                            med = time_interleaved({"eager": lambda: module(*inputs),
                                                    "compiled": lambda: compiled(*inputs)},
                                                   args.runs, args.warmup, sync)
                        row["eager_median_us"] = med["eager"]["wall_us"]
                        row["compiled_median_us"] = med["compiled"]["wall_us"]
                        row["speedup"] = row["eager_median_us"] / row["compiled_median_us"]
                        row["eager_thread_cpu_median_us"] = med["eager"]["thread_cpu_us"]
                        row["compiled_thread_cpu_median_us"] = med["compiled"]["thread_cpu_us"]
                        row["load_average"] = load_average()
                        report["results"].append(row)
                        print(f"# {name} {device} mode={mode} t={n}: first call {row['first_call_s']:.2f} s, "
                              f"eager {row['eager_median_us']:.1f} us, compiled {row['compiled_median_us']:.1f} us (thread CPU "
                              f"{row['eager_thread_cpu_median_us']:.1f} / {row['compiled_thread_cpu_median_us']:.1f} us), "
                              f"max|diff| {row['match']['max_abs_diff']:.3g} "
                              f"({'pass' if row['match']['passed'] else 'FAIL'})", file=sys.stderr, flush=True)
        report["kernel_files"] = write_kernel_files(torch, out, dumps, argv_list)
    except DumpError as e:
        print(f"torch_compile_dump.py: error: {e}", file=sys.stderr)
        failed = True
        report["error"] = str(e)
    report["load_average_after"] = load_average()
    report["compile_match_passed"] = not failed and all(r["match"]["passed"] for r in report["results"])
    text = json.dumps(report, indent=2)
    tmp = out / "torch_compile.json.tmp"
    tmp.write_text(text + "\n")
    tmp.replace(out / "torch_compile.json")  # never a half-written report
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
