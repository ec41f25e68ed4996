"""The contract (issue 2, item 6): the C++ engine against the NumPy reference, layer by layer,
on the seed-42 model and ids with one thread, plus model files exchanged between C++ and Python
and the bound kernels and tokenizer. Skips with a reason when _minigpt_core is not built.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import U, compare, compare_probs
from minigpt import numpy_minigpt as nm
from minigpt.model_io import ModelConfig, load_model, random_model, save_model

LAYERS = ["embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3", "ln_f", "logits"]


@pytest.fixture(scope="module", params=["safetensors", "npz"])
def cpp_and_numpy(request, core, contract_files, contract_ids):
    """The C++ loader and the NumPy model reading the same Python-written file."""
    path = contract_files[request.param]
    model = core.Model.load(str(path))
    logits, probs, layers = model.forward(contract_ids, trace=True)
    # The returned logits and probs, not the trace's copy of the logits, are what gets compared
    # with NumPy (a copy compared with its original proves nothing).
    layers = dict(layers, logits=logits, probs=probs)
    return request.param, nm.NumpyMiniGPT.from_file(path).forward(contract_ids), layers


def simd_rtol(core, v: int) -> float:
    """tests/softmax_cpu_test.cpp's bound for the simd kernel on the active ISA at V = v (derived
    there): 5 u per element, plus n / 4 + 2 sqrt(n + log2 L) u for L float lanes of n terms."""
    lanes = {"scalar": 1, "avx2": 16, "avx512": 32}[core.softmax_simd_isa()]
    n = -(-min(v, 2048) // lanes)
    return (5 + n / 4 + 2 * (n + np.log2(lanes)) ** 0.5) * U


def probs_rtol(core, logits, ref_logits) -> float:
    """The relative error probabilities may carry, given the logits they came from: softmax's
    relative condition (dp_i / p_i = dz_i - sum_j p_j dz_j, so at most 2 max |dz|) applied to
    the logits' measured difference, plus the C++ softmax's own float arithmetic (simd_rtol)
    and NumPy's float32 rounding (1 u)."""
    dz = float(np.max(np.abs(np.asarray(logits, np.float64) - np.asarray(ref_logits, np.float64))))
    return 2 * dz + simd_rtol(core, np.shape(logits)[-1]) + U


@pytest.mark.parametrize("layer", LAYERS + ["probs"])
def test_cpp_vs_numpy(core, cpp_and_numpy, layer):
    fmt, ref, layers = cpp_and_numpy
    assert layers[layer].dtype == np.float32
    if layer == "probs":
        compare_probs(f"C++ vs NumPy ({fmt})", layer, layers["probs"], ref.probs,
                      rtol=probs_rtol(core, layers["logits"], ref.trace["logits"]))
    else:
        compare(f"C++ vs NumPy ({fmt})", layer, layers[layer], ref.trace[layer])


def test_cpp_vs_numpy_int32_ids_and_other_shapes(core, contract_model):
    """int32 ids, B = 1 and T = block_size: the same answers as the NumPy model."""
    model = core.Model.from_weights(contract_model.config.to_json(), contract_model.vocab,
                                    contract_model.weights)
    ref = nm.NumpyMiniGPT.from_model_file(contract_model)
    ids = np.random.default_rng(5).integers(0, 600, (1, 64)).astype(np.int32)
    logits, probs = model.forward(ids)
    compare("C++ vs NumPy (1 x 64, int32 ids)", "logits", logits, ref.forward(ids).logits)
    ids = np.asfortranarray(np.random.default_rng(6).integers(0, 600, (3, 7)))  # strided ids are fine
    logits, probs = model.forward(ids)
    expected = ref.forward(ids)
    compare_probs("C++ vs NumPy (3 x 7, strided ids)", "probs", probs, expected.probs,
                  rtol=probs_rtol(core, logits, expected.logits))


def test_threads_do_not_change_the_answer_much(core, contract_files, contract_ids):
    model = core.Model.load(str(contract_files["safetensors"]))
    one = model.forward(contract_ids)[0]
    core.set_num_threads(2)
    try:
        two = model.forward(contract_ids)[0]
    finally:
        core.set_num_threads(1)
    compare("C++ 2 threads vs 1 thread", "logits", two, one, atol=1e-6, rtol=1e-6)


def test_empty_batch(core, contract_files):
    model = core.Model.load(str(contract_files["npz"]))
    logits, probs = model.forward(np.zeros((0, 4), dtype=np.int64))
    assert logits.shape == probs.shape == (0, 4, 600)


def test_bad_inputs_are_clear_errors(core, contract_files):
    model = core.Model.load(str(contract_files["npz"]))
    with pytest.raises(TypeError, match="int32 or int64"):
        model.forward(np.zeros((1, 4), dtype=np.float32))
    with pytest.raises(ValueError, match=r"expected shape \(B, T\), got \(4,\)"):
        model.forward(np.zeros(4, dtype=np.int64))
    with pytest.raises(core.Error, match=r"token id 600 at \(batch 0, position 0\) is outside the vocabulary \[0, 600\)"):
        model.forward(np.full((1, 4), 600, dtype=np.int64))
    with pytest.raises(core.Error, match="sequence length 65 exceeds the model's block_size 64"):
        model.forward(np.zeros((1, 65), dtype=np.int64))
    with pytest.raises(ValueError, match=r"targets: shape \(1, 3\) differs from ids \(1, 4\)"):
        model.loss_and_grads(np.zeros((1, 4), np.int64), np.zeros((1, 3), np.int64))


def test_from_weights_checks_every_tensor(core, contract_model):
    cfg, vocab, weights = contract_model.config.to_json(), contract_model.vocab, dict(contract_model.weights)
    bad = dict(weights, **{"ln_f.bias": np.zeros(63, np.float32)})
    with pytest.raises(ValueError, match=r"'ln_f\.bias' has shape \(63\), expected \(64\)"):
        core.Model.from_weights(cfg, vocab, bad)
    bad = dict(weights, **{"wte.weight": weights["wte.weight"].astype(np.float64)})
    with pytest.raises(TypeError, match=r"weights\['wte\.weight'\]: expected dtype float32"):
        core.Model.from_weights(cfg, vocab, bad)
    bad = dict(weights, **{"lm_head.weight": np.asfortranarray(weights["lm_head.weight"])})
    with pytest.raises(ValueError, match="C-contiguous"):
        core.Model.from_weights(cfg, vocab, bad)
    with pytest.raises(TypeError, match=r"weights\['ln_f\.weight'\]: expected an array"):
        core.Model.from_weights(cfg, vocab, dict(weights, **{"ln_f.weight": "oops"}))
    bad = {k: v for k, v in weights.items() if k != "blocks.0.attn.proj.bias"}
    with pytest.raises(ValueError, match=r"missing tensor 'blocks\.0\.attn\.proj\.bias'"):
        core.Model.from_weights(cfg, vocab, bad)
    with pytest.raises(ValueError, match=r"unexpected tensor 'extra'"):
        core.Model.from_weights(cfg, vocab, dict(weights, extra=np.zeros(1, np.float32)))
    with pytest.raises(core.Error, match="vocab"):
        core.Model.from_weights(cfg, vocab[:-1], weights)


# --- model files between C++ and Python -------------------------------------------------------


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_cpp_save_python_load_is_exact(fmt, core, contract_model, contract_files, tmp_path):
    model = core.Model.load(str(contract_files[fmt]))
    for out_fmt in ("safetensors", "npz"):
        out = tmp_path / f"from_cpp.{out_fmt}"
        model.save(str(out))
        back = load_model(out)
        assert back.config == contract_model.config
        assert back.vocab == contract_model.vocab
        assert list(back.weights) == list(contract_model.weights)
        for name, value in contract_model.weights.items():
            assert np.array_equal(back.weights[name], value), f"{fmt} -> C++ -> {out_fmt}: {name}"


def test_cpp_load_model_matches_python_load(core, contract_model, contract_files):
    config, vocab, weights = core.load_model(str(contract_files["safetensors"]))
    assert ModelConfig.from_json(config) == contract_model.config
    assert vocab == contract_model.vocab
    for name, value in contract_model.weights.items():
        assert np.array_equal(weights[name], value), name


def test_cpp_save_model_function(core, contract_model, tmp_path):
    core.save_model(str(tmp_path / "m.npz"), contract_model.config.to_json(), contract_model.vocab,
                    contract_model.weights)
    back = load_model(tmp_path / "m.npz")
    assert all(np.array_equal(back.weights[k], v) for k, v in contract_model.weights.items())


def test_cpp_loader_names_the_bad_tensor(core, contract_model, tmp_path):
    weights = dict(contract_model.weights)
    weights["blocks.2.ln1.weight"] = np.zeros(65, np.float32)
    from safetensors.numpy import save_file
    import json

    save_file(weights, str(tmp_path / "bad.safetensors"),
              metadata={"format": "minigpt", "config": json.dumps(contract_model.config.to_json()),
                        "vocab": json.dumps(contract_model.vocab)})
    with pytest.raises(core.Error, match=r"bad\.safetensors.*blocks\.2\.ln1\.weight"):
        core.Model.load(str(tmp_path / "bad.safetensors"))


# --- bound kernels and tokenizer --------------------------------------------------------------


# Each CPU kernel's relative bound at V = 600 (tests/softmax_cpu_test.cpp's, derived there), plus
# 1 u for NumPy's float32 rounding; per element, 2 |x - max| u: NumPy rounds x - max in float32
# and so do the float kernels, each an independent |x - max| u (the C++ reference subtracts in
# double: one term would do for it).
CPU_SOFTMAX_RTOL = {"reference": 2 * U, "naive": (6 + 600 / 4 + 2 * 600 ** 0.5) * U, "fused": 6 * U}


@pytest.mark.parametrize("kernel", ["reference", "naive", "fused", "simd"])
def test_cpu_softmax_kernels_vs_numpy(core, kernel):
    rng = np.random.default_rng(42)
    x = (rng.standard_normal((64, 600)) * 4).astype(np.float32)
    cond = 2 * np.abs(x.astype(np.float64) - x.max(axis=-1, keepdims=True)) * U
    compare_probs("C++ softmax vs NumPy", f"{kernel} (64, 600)", core.softmax(x, kernel=kernel), nm.softmax(x),
                  rtol=CPU_SOFTMAX_RTOL.get(kernel) or simd_rtol(core, 600) + U, cond=cond)
    if kernel == "simd":
        assert np.array_equal(core.softmax(x), core.softmax(x, kernel="simd")), "simd is the CPU default"
    y = core.softmax(np.array([[1e30, 0.0, -1e30]], np.float32), kernel=kernel)
    assert np.array_equal(y, [[1.0, 0.0, 0.0]])
    y = core.softmax(np.array([[np.nan, 0.0, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32), kernel=kernel)
    assert np.isnan(y).all()
    assert core.softmax(np.zeros((0, 5), np.float32), kernel=kernel).shape == (0, 5)


def test_softmax_bad_arguments(core):
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(core.Error, match="unknown CPU kernel 'fast'"):
        core.softmax(x, kernel="fast")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        core.softmax(x, device="tpu")
    with pytest.raises(TypeError, match="float32"):
        core.softmax(x.astype(np.float16))


def test_cuda_softmax_or_a_clear_reason(core):
    kernels = core.softmax_kernels("cuda")
    if not kernels:
        pytest.skip(f"no CUDA softmax in this build (cuda={core.build_info()['cuda']}, "
                    f"GPUs seen={core.build_info()['gpus']})")
    x = (np.random.default_rng(1).standard_normal((512, 600)) * 4).astype(np.float32)
    # tests/cuda/softmax_cuda_test.cpp's bounds at V = 600: naive V u / 4 + 8 u = 158 u; smem and
    # fused at most 3 + 8 * 8 levels + 8 = 75 u; per element 3 |x - max| u (x - max and its
    # product with log2 e in float on the GPU, x - max in float32 in NumPy).
    cond = 3 * np.abs(x.astype(np.float64) - x.max(axis=-1, keepdims=True)) * U
    rtol = {"naive": 158 * U}
    compare_probs("CUDA softmax vs NumPy", "default kernel (512, 600)", core.softmax(x, device="cuda"), nm.softmax(x),
                  rtol=75 * U, cond=cond)
    assert np.array_equal(core.softmax(np.array([[1e30, 0.0, -1e30]], np.float32), device="cuda"), [[1.0, 0.0, 0.0]])
    assert core.softmax(np.zeros((0, 7), np.float32), device="cuda").shape == (0, 7)
    for kernel in kernels:
        compare_probs("CUDA softmax vs NumPy", f"{kernel} (512, 600)", core.softmax(x, kernel=kernel, device="cuda"),
                      nm.softmax(x), rtol=rtol.get(kernel, 75 * U), cond=cond)


def test_tokenizer_round_trip(core):
    vocab = ["<pad>", "<bos>", "<eos>", "<unk>", "yesterday", "i", "walked", "home", ",", "."]
    tok = core.Tokenizer(vocab)
    ids = tok.encode("Yesterday, I walked home.")
    assert ids == [4, 8, 5, 6, 7, 9]
    assert tok.decode(ids) == "yesterday , i walked home ."
    assert tok.encode_with_unknown("yesterday you ran") == ([4, 3, 3], ["you", "ran"])
    assert tok.vocab == vocab and len(tok) == 10 and tok.id("home") == 7 and tok.token(6) == "walked"
    with pytest.raises(core.Error, match="token id 10 is out of range for a vocabulary of 10 tokens"):
        tok.decode([10])
    with pytest.raises(core.Error, match="id 0 must be '<pad>', got '<bos>'"):
        core.Tokenizer(["<bos>", "<pad>", "<eos>", "<unk>"])  # specials out of place


def test_model_vocab_feeds_the_tokenizer(core, contract_files):
    model = core.Model.load(str(contract_files["safetensors"]))
    tok = core.Tokenizer(model.vocab)
    assert tok.encode("w4 w599") == [4, 599]


def test_compute_releases_the_gil(core):
    """A large softmax on one thread while the main thread keeps running Python."""
    import threading
    import time

    x = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (core.softmax(x, kernel="reference"), done.set()))
    ticks = 0
    worker.start()
    start = time.perf_counter()
    while not done.is_set() and time.perf_counter() - start < 30:
        ticks += 1
        time.sleep(0.001)
    worker.join()
    assert ticks > 5, "the main thread was blocked: the GIL was held during compute"


def test_small_config_cpp_vs_numpy(core):
    f = random_model(ModelConfig(n_layer=2, n_head=2, d_model=32, block_size=8, vocab_size=40), seed=7)
    ids = np.random.default_rng(7).integers(0, 40, (3, 8))
    logits, _ = core.Model.from_weights(f.config.to_json(), f.vocab, f.weights).forward(ids)
    compare("C++ vs NumPy (2x2x32)", "logits", logits, nm.NumpyMiniGPT.from_model_file(f).forward(ids).logits)


def test_python_files_from_cpp_saved_model_run_the_same(core, contract_ids, tmp_path):
    """A model saved by Python then by C++ gives identical C++ logits (nothing lost in files)."""
    f = random_model(seed=3)
    save_model(tmp_path / "a.safetensors", f)
    a = core.Model.load(str(tmp_path / "a.safetensors"))
    a.save(str(tmp_path / "b.npz"))
    b = core.Model.load(str(tmp_path / "b.npz"))
    assert np.array_equal(a.forward(contract_ids)[0], b.forward(contract_ids)[0])


def test_kv_cache_decode_equals_forward(core, contract_files, contract_ids):
    model = core.Model.load(str(contract_files["safetensors"]))
    full = model.forward(contract_ids)[0]
    for b in range(contract_ids.shape[0]):
        step = model.decode(contract_ids[b:b + 1])
        compare("C++ KV-cache decode vs forward", f"logits, sequence {b}", step, full[b:b + 1])
