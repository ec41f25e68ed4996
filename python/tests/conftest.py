"""Shared fixtures of the Python tests: the contract model and ids, optional torch and C++
module, and a table of every measured difference printed at the end of the run.

Skips: a test that needs torch, the C++ module or matplotlib skips, saying why, where they are
missing (a developer may run pytest without torch). Under `make test` the Makefile sets
MINIGPT_REQUIRE_ALL=1, and then a missing one FAILS the test instead (`require` below): the
only skips left are the tests that need a GPU, each saying so.

The contract (issue 2): random weights from seed 42 (model_io.random_model: non-trivial
LayerNorm gains and biases), token ids (2, 16) from seed 42, one thread. Comparisons go
through `compare(...)`, which asserts allclose and records the actual max abs difference;
pytest's terminal summary then prints them all (visible with a plain `pytest -q`).
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

# --- import paths: the repo's python/ and the build's python/ (where _minigpt_core lands) ---
_REPO = Path(__file__).resolve().parents[2]
_candidates = [_REPO / "python"]
if os.environ.get("MINIGPT_PYTHON_BUILD"):
    _candidates.append(Path(os.environ["MINIGPT_PYTHON_BUILD"]))
_candidates += [_REPO / "build" / "default" / "python", _REPO / "build" / "python" / "python"]
for _p in _candidates:
    if _p.is_dir() and str(_p) not in sys.path and not any(
            Path(s).resolve() == _p.resolve() for s in sys.path if s):
        sys.path.append(str(_p))

from minigpt.model_io import ModelConfig, random_model, save_model  # noqa: E402

CONTRACT_SEED = 42
CONTRACT_CONFIG = ModelConfig(n_layer=4, n_head=4, d_model=64, block_size=64, vocab_size=600)
CONTRACT_SHAPE = (2, 16)
ATOL = RTOL = 1e-5

# --- optional dependencies ---------------------------------------------------------------------

REQUIRE_ALL = os.environ.get("MINIGPT_REQUIRE_ALL", "") not in ("", "0")


def missing(reason: str, module_level: bool = False):
    """A prerequisite that is not a module (the minigpt binary, the shipped model) is missing:
    skip saying why, or under MINIGPT_REQUIRE_ALL=1 (`make test`) fail."""
    if REQUIRE_ALL:
        pytest.fail(f"{reason}; MINIGPT_REQUIRE_ALL=1 (set by `make test`) lets only GPU tests skip", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)


def require(module: str, reason: str, module_level: bool = False):
    """import `module`, or skip saying `reason` and the import error; under MINIGPT_REQUIRE_ALL=1
    (`make test`) fail instead, since there only a missing GPU may skip a test."""
    try:
        return importlib.import_module(module)
    except Exception as e:  # ImportError, or a broken install
        why = f"{reason} ({type(e).__name__}: {e})"
        if REQUIRE_ALL:
            pytest.fail(f"{why}; MINIGPT_REQUIRE_ALL=1 (set by `make test`) lets only GPU tests skip",
                        pytrace=False)
        pytest.skip(why, allow_module_level=module_level)


# --- the difference table -------------------------------------------------------------------

_DIFFS: list[tuple[str, str, float, float, str]] = []  # (comparison, what, max abs, bound, verdict)


def compare(comparison: str, what: str, actual, expected, atol: float = ATOL, rtol: float = RTOL):
    """assert_allclose(actual, expected), NaN never passing; records max |actual - expected|."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{comparison}: {what}: shape {actual.shape} != {expected.shape}"
    diff = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    if np.isnan(diff):
        diff = float("nan")
    try:
        np.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol, equal_nan=False,
                                   err_msg=f"{comparison}: layer/tensor '{what}' differs")
    except AssertionError:
        _DIFFS.append((comparison, what, diff, atol, "FAIL"))
        raise
    _DIFFS.append((comparison, what, diff, atol, "ok"))
    return diff


U = 2.0 ** -24  # one float rounding, relative


def compare_probs(comparison: str, what: str, actual, expected, rtol: float, cond=None):
    """Probabilities by relative error, element by element: |actual - expected| <= expected *
    (rtol + cond) + 2^-126, NaN never passing (an absolute atol of 1e-5 would leave every
    probability below it, two thirds of a V = 600 row, unchecked: a kernel writing 0 there
    passed). cond: an optional per-element allowance (the rounding of x - max in float,
    |x - max| u). Records the worst relative error beyond cond (comparable with rtol)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{comparison}: {what}: shape {actual.shape} != {expected.shape}"
    allowed = expected * (rtol + (0.0 if cond is None else np.asarray(cond, dtype=np.float64))) + 2.0 ** -126
    err = np.abs(actual - expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(expected > 0, err / expected, 0.0)
    excess = rel - (0.0 if cond is None else cond)
    worst = float(np.max(excess)) if rel.size else 0.0
    bad = ~(err <= allowed)  # NaN fails
    if bad.any():
        i = np.unravel_index(np.argmax(bad), bad.shape)
        _DIFFS.append((comparison, what + " (rel.)", worst, rtol, "FAIL"))
        raise AssertionError(f"{comparison}: '{what}' differs at {tuple(int(k) for k in i)}: {actual[i]} vs "
                             f"{expected[i]} (relative error {rel[i]:.3g}, allowed {allowed[i] / expected[i]:.3g}); "
                             f"{int(bad.sum())} of {bad.size} elements out of bounds")
    _DIFFS.append((comparison, what + " (rel.)", worst, rtol, "ok"))
    return worst


def record(comparison: str, what: str, value: float, bound: float, ok: bool) -> None:
    """Records a figure that is not an allclose (a relative gradient error, say)."""
    _DIFFS.append((comparison, what, float(value), float(bound), "ok" if ok else "FAIL"))


def pytest_configure(config):
    # Skips must say why (torch missing, C++ module not built, no GPU) even under a plain
    # `pytest -q`: add "s" to the short-summary characters (-rs).
    chars = getattr(config.option, "reportchars", "") or ""
    if "s" not in chars and "a" not in chars.lower():
        config.option.reportchars = chars + "s"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _DIFFS:
        return
    tr = terminalreporter
    tr.section("minigpt: measured differences (max abs unless named; bound = atol or rel. tol.)")
    width = max(len(c) for c, *_ in _DIFFS)
    wwhat = max(len(w) for _, w, *_ in _DIFFS)
    tr.write_line(f"{'comparison':<{width}}  {'what':<{wwhat}}  {'difference':>10}  {'bound':>7}  verdict")
    for comparison, what, diff, bound, verdict in _DIFFS:
        tr.write_line(f"{comparison:<{width}}  {what:<{wwhat}}  {diff:10.2e}  {bound:7.0e}  {verdict}")


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def contract_model():
    """The contract's ModelFile: random weights from seed 42, V = 600."""
    return random_model(CONTRACT_CONFIG, seed=CONTRACT_SEED)


@pytest.fixture(scope="session")
def contract_ids(contract_model):
    """Token ids (2, 16) int64 from seed 42."""
    rng = np.random.default_rng(CONTRACT_SEED)
    return rng.integers(0, contract_model.config.vocab_size, size=CONTRACT_SHAPE, dtype=np.int64)


@pytest.fixture(scope="session")
def contract_targets(contract_model):
    """Next-token targets (2, 16) from seed 43, with a few -1 (ignored) positions."""
    rng = np.random.default_rng(CONTRACT_SEED + 1)
    targets = rng.integers(0, contract_model.config.vocab_size, size=CONTRACT_SHAPE, dtype=np.int64)
    targets[0, -3:] = -1
    targets[1, 5] = -1
    return targets


@pytest.fixture(scope="session")
def contract_files(contract_model, tmp_path_factory):
    """The contract model saved by model_io as both formats: {"safetensors": path, "npz": path}."""
    folder = tmp_path_factory.mktemp("contract")
    paths = {"safetensors": folder / "contract.safetensors", "npz": folder / "contract.npz"}
    for path in paths.values():
        save_model(path, contract_model)
    return paths


@pytest.fixture(scope="session")
def torch():
    """torch with one intra-op thread (the contract), or a skip saying why."""
    module = require("torch", "PyTorch is not importable: the PyTorch port tests are skipped")
    module.set_num_threads(1)
    return module


@pytest.fixture(scope="session")
def core():
    """The C++ module _minigpt_core with one thread, or a skip saying why."""
    module = require("minigpt.core", "the C++ module _minigpt_core is not importable; `make test` builds it")
    module.set_num_threads(1)
    return module
