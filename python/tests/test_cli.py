"""End-to-end tests of the `minigpt` command (src/cli): every subcommand's happy path on the
shipped model at small sizes, and bad inputs (missing or malformed model, bad ids, out-of-range
options, unwritable outputs, an unknown subcommand, a bad MINIGPT_ISA), each checked for a
non-zero exit code, a message on stderr that names the cause, and no output file left behind.

The binary is $MINIGPT_BIN (the Makefile exports it), else build/default/minigpt. The bench
subcommands without torch are python/tests/test_bench_no_torch.py's; here only their happy
paths at tiny sizes and their option checks.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import missing

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "grammar-minigpt.safetensors"


@pytest.fixture(scope="module")
def minigpt() -> str:
    path = Path(os.environ.get("MINIGPT_BIN") or REPO / "build" / "default" / "minigpt")
    if not path.is_file():
        missing(f"the minigpt binary {path} is not built (`make build`; MINIGPT_BIN names another)")
    if not MODEL.is_file():
        missing(f"the shipped model {MODEL} is missing")
    return str(path)


def run(minigpt: str, *args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([minigpt, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})), cwd=cwd)


def ok(minigpt: str, *args: str, **kw) -> subprocess.CompletedProcess:
    r = run(minigpt, *args, **kw)
    assert r.returncode == 0, f"minigpt {' '.join(args)} exited {r.returncode}: {r.stderr}"
    return r


def fails(minigpt: str, *args: str, names: list[str], code: int | None = 1, **kw) -> subprocess.CompletedProcess:
    """Runs a command that must fail: non-zero exit (`code` when given), and stderr naming the
    cause (every string in `names`), with no traceback-like internal error."""
    r = run(minigpt, *args, **kw)
    assert r.returncode != 0, f"minigpt {' '.join(args)} succeeded; stdout: {r.stdout[:300]}"
    if code is not None:
        assert r.returncode == code, f"exit {r.returncode}, want {code}; stderr: {r.stderr}"
    for text in names:
        assert text in r.stderr, f"stderr does not name {text!r}: {r.stderr!r}"
    assert "internal error" not in r.stderr
    return r


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- happy paths --------------------------------------------------------------------------------


def test_info_names_the_isa_and_a_bad_isa_is_an_error(minigpt):
    r = ok(minigpt, "info")
    assert "isa:" in r.stdout and "cpu features:" in r.stdout
    r = ok(minigpt, "info", env={"MINIGPT_ISA": "scalar"})
    assert "isa:           scalar (MINIGPT_ISA" in r.stdout
    r = fails(minigpt, "info", env={"MINIGPT_ISA": "avx9000"},
              names=["MINIGPT_ISA=avx9000", "unknown instruction set", "scalar, avx2, avx512"])
    assert r.stdout == ""


def test_predict_text_and_json(minigpt):
    r = ok(minigpt, "predict", "-k", "3", "the cat")
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "prompt: the cat" and len(lines) == 4
    assert [line.split()[0] for line in lines[1:]] == ["1.", "2.", "3."]
    doc = json.loads(ok(minigpt, "predict", "--json", "-k", "5", "the cat").stdout)
    assert doc["prompt"] == "the cat" and len(doc["top"]) == 5
    probs = [t["prob"] for t in doc["top"]]
    assert all(isinstance(t["token"], str) and t["token"] for t in doc["top"])
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    assert doc["top"][0]["token"] == lines[1].split()[1]  # the same model, the same answer


def test_predict_warns_about_unknown_words(minigpt):
    r = ok(minigpt, "predict", "-k", "1", "the zzyzx")
    assert "'zzyzx' is not in the model's vocabulary" in r.stderr


def test_generate_greedy_is_deterministic(minigpt):
    args = ("generate", "-p", "the cat", "-n", "5", "--temp", "0", "-s", "1")
    a, b = ok(minigpt, *args), ok(minigpt, *args)
    assert a.stdout == b.stdout and a.stdout.startswith("the cat")
    assert "tokens generated" in a.stderr


def test_forward_prints_and_writes_npy(minigpt, tmp_path):
    r = ok(minigpt, "forward", "--ids", "1 5 7")
    assert r.stdout.startswith("# logits (1, 3, ")
    out = tmp_path / "logits.npy"
    ok(minigpt, "forward", "--ids", "1 5 7", "--out", str(out))
    logits = np.load(out)
    assert logits.dtype == np.float32 and logits.shape[:2] == (1, 3) and np.isfinite(logits).all()
    printed = np.array(r.stdout.splitlines()[1].split(":", 1)[1].split(), dtype=np.float32)
    np.testing.assert_allclose(printed, logits[0, 0], rtol=1e-6)  # printed with 7 digits
    ids = tmp_path / "ids.npy"
    np.save(ids, np.array([[1, 5, 7], [2, 3, 4]], dtype=np.int32))
    ok(minigpt, "forward", "--ids-file", str(ids), "--out", str(out))
    both = np.load(out)
    assert both.shape[:2] == (2, 3)
    # The same sequence in a batch of two: its own rows (B*T = 6 takes the GEMM, 3 the decode dot
    # products: the same sums in another order, so float rounding, not bits).
    np.testing.assert_allclose(both[0], logits[0], rtol=1e-5, atol=1e-5)
    assert files_in(tmp_path) == ["ids.npy", "logits.npy"]


def test_corpus_stdout_and_file_agree(minigpt, tmp_path):
    out = tmp_path / "c.txt"
    printed = ok(minigpt, "corpus", "-n", "4", "-s", "3").stdout
    ok(minigpt, "corpus", "-n", "4", "-s", "3", "-o", str(out))
    assert out.read_text() == printed and len(printed.splitlines()) == 4
    assert files_in(tmp_path) == ["c.txt"]


def test_eval_probes_json_schema(minigpt):
    doc = json.loads(ok(minigpt, "eval-probes", "--json").stdout)
    assert doc["categories"], doc.keys()
    for c in doc["categories"]:
        assert {"category", "accuracy", "correct", "total"} <= set(c)
        assert 0 <= c["correct"] <= c["total"] and c["accuracy"] == pytest.approx(c["correct"] / c["total"])


def test_train_tiny_then_use_the_model(minigpt, tmp_path):
    out = tmp_path / "m.safetensors"
    r = ok(minigpt, "train", "--steps", "2", "--batch", "2", "--seq", "8", "--corpus-tokens", "2000",
           "--eval-every", "0", "-o", str(out), "-t", "1")
    assert f"wrote '{out}'" in r.stdout + r.stderr
    assert files_in(tmp_path) == ["m.safetensors"]
    doc = json.loads(ok(minigpt, "predict", "-m", str(out), "--json", "-k", "2", "the cat").stdout)
    assert len(doc["top"]) == 2


def test_bench_model_and_train_json_at_tiny_sizes(minigpt):
    doc = json.loads(ok(minigpt, "bench", "model", "--runs", "2", "--warmup", "0", "-o", "json").stdout)
    assert {"columns", "meta"} <= set(doc) and "median_us" in doc["columns"]
    doc = json.loads(ok(minigpt, "bench", "train", "--steps", "1", "--warmup", "0", "-B", "2", "-T", "8",
                        "-o", "json").stdout)
    assert {"columns", "meta"} <= set(doc) and "tokens_per_s" in doc["columns"]


# --- bad inputs ---------------------------------------------------------------------------------


def test_unknown_subcommand_is_named(minigpt):
    fails(minigpt, "frobnicate", names=["frobnicate"], code=None)
    fails(minigpt, "bench", "frobnicate", names=["frobnicate"], code=None)


def test_missing_and_malformed_model_files(minigpt, tmp_path):
    absent = tmp_path / "nope.safetensors"
    fails(minigpt, "predict", "-m", str(absent), "the cat", names=[str(absent), "does not exist"])
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"garbage, not a safetensors file")
    fails(minigpt, "predict", "-m", str(bad), "the cat", names=[str(bad)])
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(MODEL.read_bytes()[:5000])
    fails(minigpt, "forward", "-m", str(truncated), "--ids", "1 2", names=[str(truncated)])
    fails(minigpt, "eval-probes", "--probes", str(tmp_path / "none.tsv"), names=["none.tsv"])


def test_bad_token_ids(minigpt, tmp_path):
    fails(minigpt, "forward", "--ids", "1 x 3", names=["--ids", "'x' is not an integer token id"])
    fails(minigpt, "forward", "--ids", "99999", names=["token id 99999", "outside the vocabulary"])
    fails(minigpt, "forward", "--ids", "-3", names=["-3"], code=None)
    fails(minigpt, "forward", names=["--ids"])
    ids = tmp_path / "ids.npy"
    np.save(ids, np.zeros((1, 2, 3), dtype=np.int64))
    fails(minigpt, "forward", "--ids-file", str(ids), names=[str(ids)])


@pytest.mark.parametrize("args,option", [
    (("predict", "-k", "0", "the cat"), "--top-k"),
    (("generate", "-n", "-1"), "--n-predict"),
    (("train", "--seq", "1025"), "--seq"),  # 1..1024 (the context grows past 64)
    (("train", "--batch", "0"), "--batch"),
    (("bench", "model", "-o", "xml"), "--output"),
    (("bench", "model", "--runs", "0"), "--runs"),
    (("corpus", "-n", "-5"), "--sentences"),
    (("-t", "0", "info"), "--threads"),
])
def test_out_of_range_options_name_the_option(minigpt, args, option):
    fails(minigpt, *args, names=[option], code=None)



def gpu_visible() -> bool:
    """nvidia-smi lists a GPU (the binary may still be built without CUDA: then --device cuda
    must fail saying so)."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and "GPU" in r.stdout


CUDA_COMMANDS = [
    ("predict", "--json", "-k", "3", "Yesterday I"),
    ("forward", "--ids", "1 5 9"),
    ("generate", "-p", "Yesterday I", "-n", "4", "--temp", "0"),
    ("eval-probes", "--json"),
    ("bench", "model", "--runs", "5", "--warmup", "1", "--no-peers", "-o", "json"),
    ("bench", "train", "--steps", "3", "--warmup", "1", "-B", "2", "-T", "8", "--no-peers", "-o", "json"),
]


@pytest.mark.parametrize("args", CUDA_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_device_cuda_runs_on_a_gpu_else_fails_clearly(minigpt, args):
    cmd = (*args[:2], "--device", "cuda", *args[2:]) if args[0] == "bench" else (args[0], "--device", "cuda", *args[1:])
    r = run(minigpt, *cmd)
    built_with_cuda = "CUDA on" in ok(minigpt, "info").stdout
    if gpu_visible() and built_with_cuda:
        assert r.returncode == 0, f"minigpt {' '.join(cmd)} exited {r.returncode} on a GPU: {r.stderr}"
        if args[0] == "predict":  # the GPU's answer is the CPU's
            cpu = json.loads(ok(minigpt, *args).stdout)
            gpu = json.loads(r.stdout)
            assert [t["token"] for t in gpu["top"]] == [t["token"] for t in cpu["top"]]
            assert max(abs(a["prob"] - b["prob"]) for a, b in zip(gpu["top"], cpu["top"])) < 1e-5
        return
    assert r.returncode == 1, f"exit {r.returncode}, want 1; stderr: {r.stderr}"
    assert "no CUDA device is visible" in r.stderr or "built without CUDA" in r.stderr, r.stderr
    assert "internal error" not in r.stderr and not r.stdout.strip()


def test_train_on_cuda_on_a_gpu_else_fails_clearly(minigpt, tmp_path):
    """`train --device cuda`: on a GPU it trains and writes the model; without one (or in a build
    without CUDA) exit 1 before the corpus is made, the reason on stderr, no file written."""
    out = tmp_path / "m.safetensors"
    r = run(minigpt, "train", "--device", "cuda", "--steps", "2", "--batch", "2", "--seq", "8",
            "--corpus-tokens", "2000", "--eval-every", "0", "-o", str(out), "-t", "1")
    if gpu_visible() and "CUDA on" in ok(minigpt, "info").stdout:
        assert r.returncode == 0, f"train --device cuda exited {r.returncode} on a GPU: {r.stderr}"
        assert files_in(tmp_path) == ["m.safetensors"]
        return
    assert r.returncode == 1, r.stderr
    assert "train --device cuda" in r.stderr
    assert "no CUDA device is visible" in r.stderr or "built without CUDA" in r.stderr, r.stderr
    assert "internal error" not in r.stderr and "corpus:" not in r.stdout
    assert files_in(tmp_path) == []
    fails(minigpt, "train", "--device", "gpu", names=["--device", "gpu"], code=None)


def test_device_must_be_cpu_or_cuda(minigpt):
    fails(minigpt, "predict", "--device", "gpu", "the cat", names=["--device", "gpu"], code=None)
    fails(minigpt, "predict", "--device", "cuda", "--compile", "the cat", names=["--compile"], code=None)

def test_unwritable_outputs_leave_no_file(minigpt, tmp_path):
    # The output is a directory: the atomic write's rename fails, and its temporary is removed.
    target = tmp_path / "out"
    target.mkdir()
    fails(minigpt, "corpus", "-n", "3", "-o", str(target), names=[str(target)])
    fails(minigpt, "forward", "--ids", "1 2", "--out", str(target), names=[str(target)])
    assert files_in(tmp_path) == ["out"] and files_in(target) == []
    # The parent is a file: nothing can be created under it.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    fails(minigpt, "forward", "--ids", "1 2", "--out", str(blocker / "x.npy"), names=[str(blocker)])
    fails(minigpt, "train", "--steps", "1", "--batch", "1", "--seq", "4", "--corpus-tokens", "500",
          "-o", str(blocker / "m.safetensors"), names=[str(blocker)])
    assert files_in(tmp_path) == ["file", "out"]


def test_failed_forward_leaves_no_output(minigpt, tmp_path):
    out = tmp_path / "logits.npy"
    fails(minigpt, "forward", "--ids", "99999", "--out", str(out), names=["99999"])
    assert files_in(tmp_path) == []
