"""The NumPy reference against exact values and against the PyTorch port (issue 2, item 6).

NumPy vs PyTorch is compared layer by layer (embed, blocks.0..3, ln_f, logits, probs), one
test per layer, so a mismatch names its layer; both load the same model files. The PyTorch
tests skip with a printed reason where torch is missing.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import compare
from minigpt import numpy_minigpt as nm
from minigpt.model_io import ModelConfig, ModelFileError, random_model

LAYERS = ["embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "ln_f", "logits"]


# --- the NumPy layers against exact values ---------------------------------------------------


def test_erf_matches_math_erf():
    x = np.concatenate([np.linspace(-7.0, 7.0, 4001), [0.0, 1e-30, -1e-30, 5.999, 6.0, 6.001]])
    expected = np.array([math.erf(v) for v in x])
    compare("numpy erf vs math.erf", "erf on [-7, 7]", nm.erf(x), expected, atol=1e-14, rtol=0)
    assert nm.erf(np.array([np.inf]))[0] == 1.0 and nm.erf(np.array([-np.inf]))[0] == -1.0
    assert np.isnan(nm.erf(np.array([np.nan]))[0])


def test_gelu_special_values():
    y = nm.gelu(np.array([-np.inf, np.inf, np.nan, 0.0], dtype=np.float32))
    assert y[0] == 0.0 and np.signbit(y[0]), "GELU(-inf) must be -0"
    assert y[1] == np.inf
    assert np.isnan(y[2])
    assert y[3] == 0.0
    x = np.linspace(-6, 6, 101)
    expected = [0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x]
    compare("numpy gelu vs math.erf", "gelu on [-6, 6]", nm.gelu(x.astype(np.float32)), expected,
            atol=1e-6, rtol=1e-6)


def test_softmax_special_rows():
    x = np.array([[1e30, 0.0, -1e30], [np.nan, 0.0, 1.0], [np.inf, 0.0, 1.0],
                  [-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]], dtype=np.float32)
    y = nm.softmax(x)
    assert np.array_equal(y[0], [1.0, 0.0, 0.0])
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isnan(y[3]).all()
    e = np.exp([1.0, 2.0, 3.0])
    compare("numpy softmax vs exact", "softmax [1,2,3]", y[4], e / e.sum(), atol=1e-7, rtol=1e-6)


def test_layer_norm_constant_row_is_bias():
    x = np.full((3, 64), 0.1, dtype=np.float32)
    bias = np.arange(64, dtype=np.float32)
    y = nm.layer_norm(x, np.full(64, 2.0, np.float32), bias, 1e-5)
    assert np.array_equal(y, np.broadcast_to(bias, y.shape))


def test_attention_is_causal(contract_model, contract_ids):
    """Changing the last token must leave every earlier position's logits unchanged."""
    model = nm.NumpyMiniGPT.from_model_file(contract_model)
    a = model.forward(contract_ids).logits
    ids = contract_ids.copy()
    ids[:, -1] = (ids[:, -1] + 1) % contract_model.config.vocab_size
    b = model.forward(ids).logits
    assert np.array_equal(a[:, :-1], b[:, :-1])
    assert not np.allclose(a[:, -1], b[:, -1])


def test_numpy_forward_checks_inputs(contract_model):
    model = nm.NumpyMiniGPT.from_model_file(contract_model)
    with pytest.raises(ValueError, match="token ids"):
        model.forward(np.array([[0, 600]]))
    with pytest.raises(ValueError, match="block_size"):
        model.forward(np.zeros((1, 65), dtype=np.int64))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model.forward(np.zeros(5, dtype=np.int64))


def test_numpy_model_rejects_misshapen_weights(contract_model):
    weights = dict(contract_model.weights)
    weights["blocks.2.mlp.fc1.weight"] = weights["blocks.2.mlp.fc1.weight"].T.copy()
    with pytest.raises(ModelFileError, match=r"blocks\.2\.mlp\.fc1\.weight"):
        nm.NumpyMiniGPT(contract_model.config, weights)


def test_probs_are_distributions(contract_model, contract_ids):
    r = nm.NumpyMiniGPT.from_model_file(contract_model).forward(contract_ids)
    assert r.logits.shape == r.probs.shape == (2, 16, 600)
    assert r.logits.dtype == r.probs.dtype == np.float32
    compare("numpy probs", "row sums = 1", r.probs.sum(-1), np.ones((2, 16)), atol=1e-6, rtol=0)
    # The contract weights are chosen so the model is far from uniform (bugs must show).
    assert r.probs.max() > 5.0 / 600


def test_logits_in_precision_float32_is_the_reference_and_float64_is_near(contract_model, contract_ids):
    # float32 is the reference itself, bit for bit; float64 is the exact forward that fp32
    # implementations are set against (bench/forward_accuracy.py): near, not equal.
    ref = nm.NumpyMiniGPT.from_model_file(contract_model).forward(contract_ids).logits
    f32 = nm.logits_in_precision(contract_model, contract_ids, np.float32)
    f64 = nm.logits_in_precision(contract_model, contract_ids, np.float64)
    assert f32.dtype == f64.dtype == np.float64 and f64.shape == ref.shape
    assert np.array_equal(f32, ref.astype(np.float64))
    assert 0 < np.abs(f64 - f32).max() < 1e-4
    # the working precision is restored: the reference is float32 again afterwards
    assert nm.NumpyMiniGPT.from_model_file(contract_model).forward(contract_ids).logits.dtype == np.float32


# --- NumPy vs PyTorch, layer by layer ---------------------------------------------------------


@pytest.fixture(scope="module", params=["safetensors", "npz"])
def numpy_and_torch(request, torch, contract_files, contract_ids):
    """Both models loaded from the same file, run on the contract ids (one torch thread)."""
    from minigpt.torch_minigpt import GrammarMiniGPT

    path = contract_files[request.param]
    ref = nm.NumpyMiniGPT.from_file(path).forward(contract_ids)
    model = GrammarMiniGPT.from_file(path)
    assert not model.training, "from_file must return the model in eval() mode"
    trace = {}
    with torch.no_grad():
        logits, probs = model(torch.from_numpy(contract_ids), trace)
    trace = {k: v.numpy() for k, v in trace.items()}
    trace["probs"] = probs.numpy()
    return request.param, ref, trace


@pytest.mark.parametrize("layer", LAYERS + ["probs"])
def test_numpy_vs_torch(numpy_and_torch, layer):
    fmt, ref, trace = numpy_and_torch
    expected = ref.probs if layer == "probs" else ref.trace[layer]
    compare(f"NumPy vs PyTorch ({fmt})", layer, trace[layer], expected)


def test_torch_load_names_the_misshapen_tensor(torch, contract_model):
    from minigpt.torch_minigpt import GrammarMiniGPT

    model = GrammarMiniGPT(contract_model.config)
    weights = dict(contract_model.weights)
    weights["blocks.1.attn.qkv.weight"] = np.zeros((64, 192), dtype=np.float32)
    with pytest.raises(ModelFileError, match=r"blocks\.1\.attn\.qkv\.weight.*\(64, 192\).*\(192, 64\)"):
        model.load_weights(weights)
    del weights["blocks.1.attn.qkv.weight"]
    with pytest.raises(ModelFileError, match=r"missing tensor 'blocks\.1\.attn\.qkv\.weight'"):
        model.load_weights(weights)


def test_torch_state_dict_names_are_the_file_names(torch, contract_model):
    from minigpt.model_io import expected_parameters
    from minigpt.torch_minigpt import GrammarMiniGPT

    model = GrammarMiniGPT(contract_model.config)
    got = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    assert got == expected_parameters(contract_model.config)


def test_torch_forward_train_is_numpy_loss(torch, contract_model, contract_ids, contract_targets):
    from minigpt.torch_minigpt import GrammarMiniGPT

    model = GrammarMiniGPT.from_model_file(contract_model)
    with torch.no_grad():
        loss = model.forward_train(torch.from_numpy(contract_ids), torch.from_numpy(contract_targets))
    expected = nm.NumpyMiniGPT.from_model_file(contract_model).loss(contract_ids, contract_targets)
    compare("NumPy vs PyTorch", "loss (ignore -1)", loss.item(), expected)


def test_torch_softmax_hook_applies_only_on_cuda(torch, contract_model, contract_ids):
    from minigpt.torch_minigpt import GrammarMiniGPT

    model = GrammarMiniGPT.from_model_file(contract_model)
    calls = []

    def hook(x):
        calls.append(tuple(x.shape))
        return torch.softmax(x, dim=-1)

    model.set_lm_head_softmax(hook)
    ids = torch.from_numpy(contract_ids)
    with torch.no_grad():
        _, probs_cpu = model(ids)
    assert calls == [], "the hook is for CUDA tensors; CPU keeps torch.softmax"
    if torch.cuda.is_available():
        with torch.no_grad():
            _, probs_gpu = model.cuda()(ids.cuda())
        assert calls == [(32, 600)]
        compare("PyTorch CUDA (hook) vs CPU", "probs", probs_gpu.cpu().numpy(), probs_cpu.numpy(),
                atol=1e-5, rtol=1e-3)


def test_torch_save_round_trip(torch, contract_model, tmp_path):
    from minigpt.model_io import load_model
    from minigpt.torch_minigpt import GrammarMiniGPT

    model = GrammarMiniGPT.from_model_file(contract_model)
    for name in ("port.safetensors", "port.npz"):
        model.save(tmp_path / name)
        back = load_model(tmp_path / name)
        assert back.config == contract_model.config and back.vocab == contract_model.vocab
        for key, value in contract_model.weights.items():
            assert np.array_equal(back.weights[key], value), key


def test_small_config_also_agrees(torch):
    """A second shape (2 layers, 2 heads, d 32, T = block_size) so nothing hard-codes 4x4x64."""
    from minigpt.torch_minigpt import GrammarMiniGPT

    f = random_model(ModelConfig(n_layer=2, n_head=2, d_model=32, block_size=8, vocab_size=40), seed=7)
    ids = np.random.default_rng(7).integers(0, 40, (3, 8))
    ref = nm.NumpyMiniGPT.from_model_file(f).forward(ids)
    with torch.no_grad():
        logits, probs = GrammarMiniGPT.from_model_file(f)(torch.from_numpy(ids))
    compare("NumPy vs PyTorch (2x2x32)", "logits", logits.numpy(), ref.logits)


def test_torch_gpt2_init_distributions(torch):
    from minigpt.torch_minigpt import GrammarMiniGPT

    model = GrammarMiniGPT(ModelConfig(vocab_size=600)).init_gpt2_(seed=1)
    sd = model.state_dict()
    assert torch.all(sd["blocks.0.ln1.weight"] == 1) and torch.all(sd["lm_head.bias"] == 0)
    assert abs(sd["wte.weight"].std().item() - 0.02) < 0.002
    assert abs(sd["blocks.3.mlp.fc2.weight"].std().item() - 0.02 / math.sqrt(8)) < 0.001
