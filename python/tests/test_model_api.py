"""minigpt.Model (python/bindings/model.cpp): Model.load(path, device=...), forward, predict and
generate on the shipped model. predict and generate must say what `minigpt predict --json` and
`minigpt generate` print for the same arguments (the binary: $MINIGPT_BIN, else
build/default/minigpt); forward's last row must be predict's distribution. Bad input is a Python
exception naming the cause: an unknown device, device="cuda" without a GPU (or without CUDA in
the module), a word outside the vocabulary, a token id out of range, bad sampling options.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import missing, require

core = require("minigpt.core", "the C++ module _minigpt_core is not built", module_level=True)
import minigpt  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "grammar-minigpt.safetensors"


@pytest.fixture(scope="module")
def model():
    if not MODEL.is_file():
        missing(f"the shipped model {MODEL} is missing")
    return minigpt.Model.load(str(MODEL))


@pytest.fixture(scope="module")
def cuda_model(model):
    """The shipped model on the GPU, or a skip saying why (no GPU, or no CUDA in the module)."""
    if core.build_info()["gpus"] == 0:
        pytest.skip("no CUDA GPU visible (core.build_info()['gpus'] == 0)")
    if not core.build_info()["cuda"]:
        pytest.skip("the C++ module was built without CUDA")
    return minigpt.Model.load(str(MODEL), device="cuda")


def cli(*args: str) -> str:
    binary = Path(os.environ.get("MINIGPT_BIN") or REPO / "build" / "default" / "minigpt")
    if not binary.is_file():
        missing(f"the minigpt binary {binary} is not built (`make build`; MINIGPT_BIN names another)")
    r = subprocess.run([str(binary), "-t", "1", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_load_on_the_cpu(model):
    assert minigpt.Model is core.Model
    assert model.device == "cpu"
    assert model.config["vocab_size"] == len(model.vocab)
    ids = np.array([[1, 5, 9, 14]], dtype=np.int64)
    logits, probs = model.forward(ids)
    assert logits.shape == probs.shape == (1, 4, len(model.vocab))
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


def test_predict_matches_the_cli(model):
    top = model.predict("Yesterday I", k=5)
    want = json.loads(cli("predict", "-m", str(MODEL), "-k", "5", "--json", "Yesterday I"))["top"]
    assert [t for t, _ in top] == [w["token"] for w in want]
    np.testing.assert_allclose([p for _, p in top], [w["prob"] for w in want], rtol=1e-5)
    # the distribution is forward's last row (prompt read after <bos>)
    tok = minigpt.Tokenizer(model.vocab)
    ids = np.array([[tok.BOS, *tok.encode("Yesterday I")]], dtype=np.int32)
    last = model.forward(ids)[1][0, -1]
    assert top[0][1] == pytest.approx(float(last.max()), rel=1e-6)
    assert tok.token(int(last.argmax())) == top[0][0]


@pytest.mark.parametrize("args", [dict(seed=42), dict(seed=7, temperature=1.0, top_k=0, n=10),
                                  dict(temperature=0.0, n=40), dict(prompt="", seed=3)])
def test_generate_matches_the_cli(model, args):
    kw = dict(prompt="Yesterday I", n=32, temperature=0.8, top_k=40, seed=42) | args
    text = model.generate(**kw)
    want = cli("generate", "-m", str(MODEL), "-p", kw["prompt"], "-n", str(kw["n"]), "--temp",
               str(kw["temperature"]), "--top-k", str(kw["top_k"]), "-s", str(kw["seed"])).rstrip("\n")
    assert text == want
    assert model.generate(**kw) == text  # the same seed, the same text


def test_generate_zero_tokens_is_the_prompt(model):
    assert model.generate("Yesterday I", n=0) == "yesterday i"


def test_cuda_without_a_gpu_is_a_clear_error():
    if core.build_info()["gpus"] > 0:
        pytest.skip("a GPU is visible: device='cuda' is tested by the CUDA tests")
    with pytest.raises(core.Error, match=r"device='cuda': (no CUDA device is visible|this minigpt was built without CUDA)"):
        minigpt.Model.load(str(MODEL), device="cuda")


def test_bad_arguments(model):
    with pytest.raises(ValueError, match="unknown device 'tpu' \\(cpu or cuda\\)"):
        minigpt.Model.load(str(MODEL), device="tpu")
    with pytest.raises(core.Error, match="no-such-model"):
        minigpt.Model.load("/nonexistent/no-such-model.safetensors")
    with pytest.raises(ValueError, match="not in the model's vocabulary: 'xyzzy', 'plugh'"):
        model.predict("yesterday xyzzy plugh")
    with pytest.raises(ValueError, match="generate: not in the model's vocabulary: 'xyzzy'"):
        model.generate("xyzzy")
    with pytest.raises(ValueError, match="k must be >= 1"):
        model.predict("Yesterday I", k=0)
    with pytest.raises(ValueError, match="n must be >= 0"):
        model.generate("Yesterday I", n=-1)
    with pytest.raises(core.Error, match="temperature must be a finite number >= 0"):
        model.generate("Yesterday I", temperature=-1.0)
    with pytest.raises(core.Error, match="top-k must be >= 0"):
        model.generate("Yesterday I", top_k=-2)
    with pytest.raises(core.Error, match="out of range|outside"):
        model.forward(np.array([[1, len(model.vocab)]], dtype=np.int64))
    with pytest.raises(TypeError, match="int32 or int64"):
        model.forward(np.array([[1.0, 2.0]], dtype=np.float32))
    with pytest.raises(ValueError, match=r"expected shape \(B, T\)"):
        model.forward(np.array([1, 2], dtype=np.int64))


# ------------------------------------------------------------------------------------ CUDA


def test_cuda_forward_matches_the_cpu(model, cuda_model):
    assert cuda_model.device == "cuda"
    rng = np.random.default_rng(42)
    for shape in [(2, 16), (1, 1), (3, 64)]:
        ids = rng.integers(0, len(model.vocab), size=shape, dtype=np.int64)
        logits_gpu, probs_gpu = cuda_model.forward(ids)
        logits_cpu, probs_cpu = model.forward(ids)
        # issue 14: logits within 1e-5, at most 1e-4 where a reduction order differs
        np.testing.assert_allclose(logits_gpu, logits_cpu, atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(probs_gpu, probs_cpu, atol=1e-5, rtol=1e-4)
        assert (logits_gpu.argmax(-1) == logits_cpu.argmax(-1)).all()
    with pytest.raises(ValueError, match="trace=True runs on the CPU only"):
        cuda_model.forward(ids, trace=True)


def test_cuda_predict_and_generate_match_the_cli(model, cuda_model):
    assert cuda_model.predict("Yesterday I", k=1)[0][0] == model.predict("Yesterday I", k=1)[0][0]
    want = json.loads(cli("predict", "--device", "cuda", "-m", str(MODEL), "-k", "5", "--json", "Yesterday I"))["top"]
    top = cuda_model.predict("Yesterday I", k=5)
    assert [t for t, _ in top] == [w["token"] for w in want]
    np.testing.assert_allclose([p for _, p in top], [w["prob"] for w in want], rtol=1e-5)
    for seed in (42, 7):
        text = cuda_model.generate("Yesterday I", n=32, seed=seed)
        assert text == cli("generate", "--device", "cuda", "-m", str(MODEL), "-p", "Yesterday I", "-n", "32",
                           "-s", str(seed)).rstrip("\n")
        assert cuda_model.generate("Yesterday I", n=32, seed=seed) == text  # the decoder is reset
