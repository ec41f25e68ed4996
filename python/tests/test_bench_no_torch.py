"""Every `minigpt bench` subcommand (model, train, softmax on the CPU) run end to end against
peer interpreters that cannot help it: one without torch, one that fails, one that prints
garbage, one whose JSON has every field null or of the wrong type. Each time the bench must
print its own rows, leave the peer cells empty, say in a note why, and exit 0.

The interpreters are small shell wrappers in tmp_path passed with --peer-python (torch stays
installed on the machine: "no torch" is a `torch` package first on PYTHONPATH whose import
raises, as a missing install does). Sizes are tiny so that the whole file runs in seconds;
the one run with the real interpreter (and so real torch, where installed) checks that the
peer rows do join the table.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require

REPO = Path(__file__).resolve().parents[2]

# Each subcommand at a size that runs in about a second (softmax: a 1 MiB copy ceiling).
BENCHES = {
    "model": ["bench", "model", "-t", "1", "--runs", "3", "--warmup", "1", "--no-torch-compile"],
    "train": ["bench", "train", "-t", "1", "-B", "2", "-T", "4", "--steps", "2", "--warmup", "1"],
    "softmax": ["bench", "softmax", "--device", "cpu", "-t", "1", "--shapes", "3x5,2x7", "--repeats", "5",
                "--warmup", "1", "--copy-mib", "1"],
}
# Our own rows, by the first column (kernel / case / impl); others may join (simd-avx2, ...).
OWN_ROWS = {
    "model": {"forward (logits+probs)", "kv decode, per token"},
    "train": {"minigpt C++"},
    "softmax": {"naive", "fused", "simd", "memcpy", "memcpy-stream"},
}
# The column a peer would fill on our rows.
PEER_COLUMN = {"model": None, "train": None, "softmax": "vs_torch"}

WRONG_TYPES = json.dumps({
    "torch_version": None, "device": 3,
    "results": [{"peer": None, "B": "3", "V": 5, "time_us": "fast", "runs": "many"}, 7,
                {"peer": "torch.softmax", "B": 3, "V": 5, "time_us": -1.0}],
    "rows": [{"impl": 5, "B": None, "T": 4, "median_us": None, "median_ms": "1", "runs": 1.5}, "row"],
    "notes": [None, 4, "a note from the peer"],
})


def _minigpt() -> Path:
    exe = Path(os.environ.get("MINIGPT_BIN", REPO / "build" / "default" / "minigpt"))
    if not exe.is_file():
        if os.environ.get("MINIGPT_REQUIRE_ALL", "") not in ("", "0"):
            pytest.fail(f"no minigpt binary at {exe} (MINIGPT_BIN); `make test` builds it", pytrace=False)
        pytest.skip(f"no minigpt binary at {exe}; build it (`make build`) or set MINIGPT_BIN")
    return exe


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture(scope="module")
def interpreters(tmp_path_factory) -> dict[str, str]:
    """name -> an interpreter for --peer-python."""
    d = tmp_path_factory.mktemp("peer-python")
    hidden = d / "hide-torch" / "torch"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'torch\' (hidden by test_bench_no_torch.py)")\n')
    py = sys.executable
    return {
        "no torch": _script(d / "no-torch", f'PYTHONPATH="{hidden.parent}${{PYTHONPATH:+:$PYTHONPATH}}" '
                                             f'exec "{py}" "$@"\n'),
        "fails": _script(d / "fails", 'echo "peer: deliberate failure" >&2\nexit 3\n'),
        "garbage": _script(d / "garbage", 'echo "Traceback? no: {this is not JSON"\n'),
        "wrong types": _script(d / "wrong-types", f"cat <<'EOF'\n{WRONG_TYPES}\nEOF\n"),
        "missing": str(d / "no-such-interpreter"),
    }


# Why the peer cells are empty, as the note must say it, per interpreter.
WHY = {
    "no torch": "torch is not importable",
    "fails": "exit code 3",
    "garbage": "not a JSON object",
    "wrong types": "ignored",
    "missing": "not found",
}


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(_minigpt()), *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def _own_and_peer_rows(report: dict) -> tuple[list[dict], list[dict]]:
    """(our rows, the peers' rows): every peer's name starts with torch or triton."""
    first = report["columns"][0]
    rows = [dict(zip(report["columns"], r)) if isinstance(r, list) else r for r in report["rows"]]
    is_peer = [r[first].startswith(("torch", "triton")) for r in rows]
    return [r for r, p in zip(rows, is_peer) if not p], [r for r, p in zip(rows, is_peer) if p]


@pytest.mark.parametrize("peer", list(WHY))
@pytest.mark.parametrize("bench", list(BENCHES))
def test_bench_without_a_working_peer(bench, peer, interpreters):
    proc = _run([*BENCHES[bench], "-o", "json", "--peer-python", interpreters[peer]])
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    report = json.loads(proc.stdout)
    own, peers = _own_and_peer_rows(report)
    assert {r[report["columns"][0]] for r in own} >= OWN_ROWS[bench] - {"memcpy-stream"}, report["rows"]
    assert peers == [], f"peer rows from a peer that cannot run: {peers}"
    if PEER_COLUMN[bench]:
        assert all(r[PEER_COLUMN[bench]] is None for r in own)
    notes = " | ".join(report["notes"])
    assert "peer" in notes and WHY[peer] in notes, notes
    if bench != "softmax":
        assert all(r["cpp_speedup"] is None or r["cpp_speedup"] == 1.0 for r in own)


@pytest.mark.parametrize("bench", list(BENCHES))
def test_bench_markdown_without_torch(bench, interpreters):
    """The default output (markdown) too: our rows, and the reason in the notes under them."""
    proc = _run([*BENCHES[bench], "--peer-python", interpreters["no torch"]])
    assert proc.returncode == 0, proc.stderr
    assert "torch is not importable" in proc.stdout
    for row in OWN_ROWS[bench] - {"memcpy-stream"}:
        assert f"| {row} |" in proc.stdout, proc.stdout


@pytest.mark.parametrize("bench", list(BENCHES))
def test_bench_with_the_real_peer(bench):
    """With the machine's own python3 (torch installed under `make test`) the peer rows join."""
    require("torch", "torch is not importable: the peers cannot be timed")
    proc = _run([*BENCHES[bench], "-o", "json", "--peer-python", sys.executable])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    own, peers = _own_and_peer_rows(report)
    assert peers, f"no peer rows; notes: {report['notes']}"
    assert isinstance(report["meta"]["torch"], str) and report["meta"]["torch"] != "none"
    if bench == "softmax":
        assert all(isinstance(r["vs_torch"], float) and r["vs_torch"] > 0 for r in own), own
    else:
        assert all(r["cpp_speedup"] is None or r["cpp_speedup"] > 0 for r in peers), peers
