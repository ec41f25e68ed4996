"""Data-parallel training over MPI (`mpirun -np N minigpt train --dist mpi`) and, on GPUs, NCCL
(`--device cuda --dist nccl`), end to end.

- Two ranks with b sequences each train the same model as one rank with 2b: after 20 steps
  the weights agree to 1e-5 relative (L2 over all parameters; AdamW divides by sqrt(v), so a
  gradient that is zero up to rounding, like the key bias's, turns summation-order noise into
  +-lr steps in a few elements; the global norm is the meaningful measure).
- Faults: a rank SIGKILLed, or stopped (SIGSTOP: hung), ends every rank with a non-zero status
  within 60 s and a message naming the rank; the checkpoint left behind is whole and the run
  resumes from it (to the same final weights as an uninterrupted run, bit for bit); resuming
  with another world size is refused.
- GPUs over NCCL (`--device cuda --dist nccl`): one rank over NCCL equals the plain 1-GPU run bit
  for bit; two GPUs (skipped below two) equal one GPU with the whole batch, and a killed rank ends
  the other within 60 s; without a GPU `--dist nccl` is a clear error.

Tiny configs (2 layers, d 32, batch 8 x 16 tokens), a few seconds each. The launcher flags
(root, oversubscription) live in python/minigpt/mpi_launch.py.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from minigpt.mpi_launch import mpirun_command

REPO = Path(__file__).resolve().parents[2]
EXE = Path(os.environ.get("MINIGPT_BIN", REPO / "build" / "default" / "minigpt"))
TINY = ["--batch", "8", "--seq", "16", "--layers", "2", "--d-model", "32", "--heads", "2",
        "--corpus-tokens", "20000", "--eval-every", "0", "--warmup", "2", "--log-every", "50"]


@pytest.fixture(scope="module", autouse=True)
def _binary():
    if not EXE.exists():
        pytest.fail(f"no minigpt binary at {EXE} (MINIGPT_BIN); `make test` builds it", pytrace=False)


def train(ranks: int, args: list[str], **kw) -> subprocess.CompletedProcess:
    base = [str(EXE), "-t", "1", "train", *args]
    argv = mpirun_command(ranks, [*base, "--dist", "mpi"]) if ranks > 1 else base
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def load(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file
    return load_file(str(path))


def relative_l2(a: dict, b: dict) -> float:
    diff = sum(float(((a[k].astype(np.float64) - b[k]) ** 2).sum()) for k in a)
    norm = sum(float((a[k].astype(np.float64) ** 2).sum()) for k in a)
    return (diff / norm) ** 0.5


def test_two_ranks_equal_one_rank_with_the_whole_batch(tmp_path):
    one = train(1, [*TINY, "--steps", "20", "-o", str(tmp_path / "one.safetensors")])
    assert one.returncode == 0, one.stderr
    two = train(2, [*TINY, "--steps", "20", "-o", str(tmp_path / "two.safetensors")])
    assert two.returncode == 0, two.stdout + two.stderr
    assert "data parallel: 2 ranks (mpi), 4 sequences per rank" in two.stdout
    a, b = load(tmp_path / "one.safetensors"), load(tmp_path / "two.safetensors")
    assert a.keys() == b.keys()
    err = relative_l2(a, b)
    assert err <= 1e-5, f"2 ranks differ from 1 rank by {err:.3g} (relative L2)"
    assert err > 0 or all(np.array_equal(a[k], b[k]) for k in a)
    # Every tensor is reduced: a bucket left out would differ by far more than rounding.
    for k in a:
        assert np.abs(a[k] - b[k]).max() <= 1e-3 * max(np.abs(a[k]).max(), 1e-3), k


def rank_pids(mpirun: subprocess.Popen) -> dict[int, int]:
    """{rank: pid} of the ranks mpirun started (its children, OMPI_COMM_WORLD_RANK)."""
    ranks = {}
    children = Path(f"/proc/{mpirun.pid}/task/{mpirun.pid}/children").read_text().split()
    for pid in children:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in env:
            if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(entry.split(b"=")[1])] = int(pid)
    return ranks


def start_and_wait_for_checkpoint(tmp_path: Path, extra: list[str], model: list[str] = TINY, dist: str = "mpi",
                                  steps: int = 400, every: int = 10, wait_s: float = 60) -> subprocess.Popen:
    ckpt = tmp_path / "ckpt.safetensors"
    argv = mpirun_command(2, [str(EXE), "-t", "1", "train", *model, "--steps", str(steps), "--dist", dist,
                              "--checkpoint", str(ckpt), "--checkpoint-every", str(every),
                              "-o", str(tmp_path / "model.safetensors"), *extra])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + wait_s
    while not ckpt.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no checkpoint within {wait_s} s"
        time.sleep(0.01)
    return proc


def end_within(proc: subprocess.Popen, seconds: float) -> tuple[int, str]:
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"ranks still running {seconds} s after the fault:\n{out}\n{err}")
    print(f"ended {time.monotonic() - start:.1f} s after the fault")
    return proc.returncode, out + err


def stop_rank_and_wait(proc: subprocess.Popen, rank: int, seconds: float) -> tuple[int, str]:
    """SIGSTOPs one rank (hung, not dead) and waits for every rank to end (end_within)."""
    pid = rank_pids(proc)[rank]
    os.kill(pid, signal.SIGSTOP)
    try:
        return end_within(proc, seconds)
    finally:
        try:  # a stopped process ignores SIGTERM until continued
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def check_resumes(tmp_path: Path) -> None:
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name not in {"ckpt.safetensors"})
    assert leftovers == [], f"half-written files left behind: {leftovers}"
    ckpt = tmp_path / "ckpt.safetensors"
    # Another world size is refused, naming both.
    other = train(1, ["--resume", str(ckpt), "-o", str(tmp_path / "x.safetensors")])
    assert other.returncode != 0
    assert "written by a run of 2 rank(s) and this run has 1" in other.stderr, other.stderr
    # The same world size continues to the weights of an uninterrupted run, bit for bit.
    resumed = train(2, ["--resume", str(ckpt), "-o", str(tmp_path / "resumed.safetensors")])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    ref_dir = tmp_path / "reference"
    ref_dir.mkdir()
    ref = train(2, [*TINY, "--steps", "400", "-o", str(ref_dir / "ref.safetensors")])
    assert ref.returncode == 0, ref.stderr
    a, b = load(tmp_path / "resumed.safetensors"), load(ref_dir / "ref.safetensors")
    assert all(np.array_equal(a[k], b[k]) for k in a), "resumed run differs from an uninterrupted one"


def test_a_killed_rank_ends_every_rank_and_the_run_resumes(tmp_path):
    proc = start_and_wait_for_checkpoint(tmp_path, [])
    os.kill(rank_pids(proc)[1], signal.SIGKILL)
    rc, text = end_within(proc, 60)
    assert rc != 0, text
    assert "rank 1" in text, text
    check_resumes(tmp_path)


def test_a_hung_rank_ends_every_rank_naming_it(tmp_path):
    proc = start_and_wait_for_checkpoint(tmp_path, ["--dist-timeout", "5"])
    rc, text = stop_rank_and_wait(proc, 1, 60)
    assert rc != 0, text
    # Stopped before the wait ("never reached it") or inside it ("silent"): either way, named.
    assert re.search(r"rank 0 of 2: .* rank 1 (never reached it|reached it but has been silent)", text), text
    check_resumes(tmp_path)


def test_planner_ddp_bytes_equal_the_measured_bytes():
    import json
    cfg = ["--layers", "2", "--d-model", "32", "--heads", "2"]
    bench = subprocess.run(mpirun_command(2, [str(EXE), "-t", "1", "bench", "train", "--dist", "mpi", *cfg,
                                              "-B", "4", "-T", "16", "--steps", "2", "--warmup", "1", "-o", "json"]),
                           capture_output=True, text=True, timeout=120)
    assert bench.returncode == 0, bench.stderr
    row = json.loads(bench.stdout)["rows"][0]
    plan = subprocess.run([str(EXE), "parallel-plan", *cfg, "--vocab", "611", "--seq", "16", "--context", "64",
                           "--batch", "4", "--gpus", "2", "-o", "json"], capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    ddp = json.loads(plan.stdout)["rows"][0]
    assert ddp["pattern"] == "DDP"
    assert ddp["payload_bytes"] == row["allreduce_bytes"] > 0
    assert ddp["wire_bytes_per_gpu"] == row["wire_bytes_per_rank"]
    assert 0.0 <= row["hidden"] <= 1.0


def gpus_visible() -> int:
    """How many GPUs nvidia-smi lists (0 without nvidia-smi or a driver)."""
    import shutil
    if shutil.which("nvidia-smi") is None:
        return 0
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    return listed.stdout.count("GPU ") if listed.returncode == 0 else 0


def gpu_visible() -> bool:
    return gpus_visible() > 0


def test_gpus_n_is_refused_clearly_where_it_cannot_start_its_ranks(tmp_path):
    # `--gpus N` starts N local GPU ranks itself (dist/local_ranks.h); it needs --device cuda, as
    # many GPUs as ranks, and not to be under mpirun already. Nothing is written when refused.
    out = tmp_path / "m.safetensors"
    base = [str(EXE), "-t", "1", "train", *TINY, "--steps", "1", "-o", str(out)]
    cpu = subprocess.run([*base, "--gpus", "2"], capture_output=True, text=True, timeout=120)
    assert cpu.returncode != 0 and "train --gpus 2: one rank per GPU needs --device cuda" in cpu.stderr, cpu.stderr
    bench = subprocess.run([str(EXE), "bench", "train", "--gpus", "2"], capture_output=True, text=True, timeout=120)
    assert bench.returncode != 0 and "bench train --gpus 2: one rank per GPU needs --device cuda" in bench.stderr
    many = gpus_visible() + 1
    run = subprocess.run([*base, "--device", "cuda", "--gpus", str(many)], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0, run.stdout + run.stderr
    # without a GPU (or CUDA) the device check speaks first; with fewer GPUs than ranks, the count
    assert re.search(r"train --device cuda: .*(built without CUDA|no CUDA device is visible)"
                     rf"|train --gpus {many}: \d+ CUDA GPUs? (is|are) visible; one rank per GPU needs {many}", run.stderr), \
        run.stderr
    assert not out.exists()


def test_dist_nccl_without_a_gpu_is_a_clear_error(tmp_path):
    args = [str(EXE), "-t", "1", "train", *TINY, "--steps", "1", "-o", str(tmp_path / "m.safetensors")]
    # NCCL reduces GPU buffers: without --device cuda it is refused on any machine.
    cpu = subprocess.run([*args, "--dist", "nccl"], capture_output=True, text=True, timeout=120)
    assert cpu.returncode != 0 and "train --dist nccl trains on GPUs: add --device cuda" in cpu.stderr, cpu.stderr
    if gpu_visible():
        pytest.skip("a GPU is visible: `--device cuda --dist nccl` is tested by tests/cuda/nccl_test.cpp and "
                    "scripts/gpu-check.sh")
    for argv in (args, mpirun_command(1, args)):  # alone, and as the one rank of mpirun
        run = subprocess.run([*argv, "--device", "cuda", "--dist", "nccl"], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode != 0, run.stdout + run.stderr
        # A build without CUDA says so; one with CUDA says that no GPU is visible.
        assert re.search(r"train --device cuda: .*(built without CUDA|no CUDA device is visible)", run.stderr), \
            run.stderr
    assert not (tmp_path / "m.safetensors").exists()


# GPU ranks over NCCL (`--device cuda --dist nccl`). One GPU: the 1-rank NCCL path (the gradient
# all-reduce inside the step's graph) equals the plain 1-GPU run bit for bit (averaging over one
# rank is a copy). Two GPUs (issue 17; skipped below two): 2 ranks x b equal 1 rank x 2b after
# 20 steps within 1e-5 relative, and a killed or a stopped (hung) rank ends the other within 60 s.
CUDA_TRAIN = [*TINY, "--device", "cuda"]


def gpu_train(ranks: int, args: list[str], dist: str = "nccl") -> subprocess.CompletedProcess:
    base = [str(EXE), "-t", "1", "train", *CUDA_TRAIN, *args]
    argv = mpirun_command(ranks, [*base, "--dist", dist]) if dist == "nccl" else base
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_one_gpu_rank_over_nccl_equals_one_gpu(tmp_path):
    if not gpu_visible():
        pytest.skip("no CUDA GPU visible (nvidia-smi lists none)")
    plain = gpu_train(1, ["--steps", "20", "-o", str(tmp_path / "plain.safetensors")], dist="single")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    nccl = gpu_train(1, ["--steps", "20", "-o", str(tmp_path / "nccl.safetensors")])
    assert nccl.returncode == 0, nccl.stdout + nccl.stderr
    a, b = load(tmp_path / "plain.safetensors"), load(tmp_path / "nccl.safetensors")
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a), "1 rank over NCCL differs from the plain GPU run"


def test_two_gpus_equal_one_gpu_with_the_whole_batch(tmp_path):
    if gpus_visible() < 2:
        pytest.skip(f"needs 2 CUDA GPUs, {gpus_visible()} visible (issue 17 runs it on nvidia-h200-x2)")
    one = gpu_train(1, ["--steps", "20", "-o", str(tmp_path / "one.safetensors")], dist="single")
    assert one.returncode == 0, one.stdout + one.stderr
    two = gpu_train(2, ["--steps", "20", "-o", str(tmp_path / "two.safetensors")])
    assert two.returncode == 0, two.stdout + two.stderr
    assert "data parallel: 2 ranks (nccl), 4 sequences per rank" in two.stdout
    a, b = load(tmp_path / "one.safetensors"), load(tmp_path / "two.safetensors")
    err = relative_l2(a, b)
    assert err <= 1e-5, f"2 GPUs differ from 1 GPU by {err:.3g} (relative L2)"
    for k in a:  # a tensor left out of the all-reduce would differ by far more than rounding
        assert np.abs(a[k] - b[k]).max() <= 1e-3 * max(np.abs(a[k]).max(), 1e-3), k


def test_a_killed_gpu_rank_ends_every_rank(tmp_path):
    if gpus_visible() < 2:
        pytest.skip(f"needs 2 CUDA GPUs, {gpus_visible()} visible (issue 17 runs it on nvidia-h200-x2)")
    proc = start_and_wait_for_checkpoint(tmp_path, ["--dist-timeout", "10"], model=CUDA_TRAIN, dist="nccl",
                                         steps=100_000, every=50, wait_s=120)
    os.kill(rank_pids(proc)[1], signal.SIGKILL)
    rc, text = end_within(proc, 60)
    assert rc != 0, text
    assert "rank 1" in text, text
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name != "ckpt.safetensors")
    assert leftovers == [], f"half-written files left behind: {leftovers}"


def test_a_hung_gpu_rank_ends_every_rank_naming_it(tmp_path):
    if gpus_visible() < 2:
        pytest.skip(f"needs 2 CUDA GPUs, {gpus_visible()} visible (issue 17 runs it on nvidia-h200-x2)")
    proc = start_and_wait_for_checkpoint(tmp_path, ["--dist-timeout", "10"], model=CUDA_TRAIN, dist="nccl",
                                         steps=100_000, every=50, wait_s=120)
    rc, text = stop_rank_and_wait(proc, 1, 60)
    assert rc != 0, text
    # Rank 0 waits in the step's graph (its all-reduce: NCCL's bounded wait) or in the loss's
    # host all-reduce (MPI's, which names rank 1): either way it says so and ends every rank.
    assert re.search(r"rank 0 of 2: .*(did not complete within 10 s|rank 1 (never reached it|reached it but has "
                     r"been silent))", text), text
