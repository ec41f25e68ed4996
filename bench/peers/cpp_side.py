"""How the torch peers (torch_model.py, torch_train.py) find and run the C++ side, so that both
sides are timed under the same conditions. Imported before torch, beside the scripts.

- find_minigpt: --minigpt as given (relative paths are taken from the directory the script was
  started in, and made absolute), else the newest build/*/minigpt of this checkout.
- abs_path: any path option made absolute, so that a child started elsewhere finds it.
- CPU_SET: the CPUs this process may run on when it starts (taskset's set), before torch has
  started a thread; run_cpp starts every C++ child on exactly that set, whatever torch or its
  OpenMP runtime did to this process's threads since.
- run_cpp: the C++ benchmark as a child process, with this process's torch quiet (see
  FAIRNESS) and its JSON report parsed.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_SET = sorted(os.sched_getaffinity(0))

# Said in every peer table's header (meta "fairness").
FAIRNESS = ("C++ and torch never run at the same time: the C++ benchmark is a child process started "
            f"on the script's CPU set {CPU_SET} while this process waits for it")


def abs_path(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(os.path.expanduser(path))


def find_minigpt(given: str | None) -> str | None:
    """The binary to run: --minigpt (a path, relative to the working directory, or a name on
    PATH), else the newest build/*/minigpt of this checkout; None when there is none."""
    if given:
        if os.sep not in given:  # a bare name: PATH, as a shell would; else the working directory
            found = shutil.which(given)
            if found:
                return found
        return abs_path(given)
    candidates = [p for p in glob.glob(str(ROOT / "build" / "*" / "minigpt")) if os.access(p, os.X_OK)]
    candidates += [p for p in glob.glob(str(ROOT / "build" / "minigpt")) if os.access(p, os.X_OK)]
    return max(candidates, key=os.path.getmtime) if candidates else None  # the newest build


def _on_cpu_set() -> None:  # in the child, between fork and exec
    os.sched_setaffinity(0, CPU_SET)


def run_cpp(cmd: list[str], who: str) -> dict | None:
    """Runs `cmd` (a `minigpt bench ... -o json`) on CPU_SET and returns its report, or None after
    printing why on stderr."""
    if not os.path.isfile(cmd[0]) or not os.access(cmd[0], os.X_OK):
        print(f"{who}: {cmd[0]} is not an executable file (--minigpt)", file=sys.stderr)
        return None
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_on_cpu_set)
    if proc.returncode != 0:
        print(f"{who}: `{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stderr}", file=sys.stderr)
        return None
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        print(f"{who}: `{' '.join(cmd)}` printed no JSON ({e})", file=sys.stderr)
        return None
