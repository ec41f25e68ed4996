"""Model.compile(): the compiled forward (minigpt compile) from Python, against Model.forward."""
import numpy as np
import pytest

from minigpt import core

MODEL = "models/grammar-minigpt.safetensors"


@pytest.fixture(scope="module")
def model():
    return core.Model.load(MODEL)


def test_compiled_forward_matches_eager(model):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, model.config["vocab_size"], size=(2, 16), dtype=np.int32)
    logits, probs = model.forward(ids)
    compiled = model.compile()
    clogits, cprobs = compiled.forward(ids)
    assert clogits.shape == logits.shape and cprobs.shape == probs.shape
    assert np.abs(clogits - logits).max() < 1e-5
    assert np.abs(cprobs - probs).max() < 1e-6
    assert compiled.compiles == 1
    names = compiled.kernels(2, 16)
    assert names[-1].startswith("cpp_fused_softmax_")
    assert any(n.startswith("cpp_fused_attention_") for n in names)
    assert 'extern "C" void call(' in compiled.source(2, 16)


def test_compiled_shape_guard_and_errors(model):
    compiled = model.compile()
    compiled.forward(np.zeros((1, 4), dtype=np.int32))
    compiled.forward(np.zeros((1, 5), dtype=np.int32))
    assert compiled.compiles == 2
    with pytest.raises(core.Error):
        compiled.forward(np.full((1, 3), model.config["vocab_size"], dtype=np.int32))
