"""Model files in Python (model_io): exact round trips and malformed files named clearly.

C++ <-> Python exchange is in test_contract.py (it needs the C++ module).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from minigpt.model_io import (ModelConfig, ModelFile, ModelFileError, expected_parameters, load_model,
                              save_model)


def _assert_same(a: ModelFile, b: ModelFile):
    assert a.config == b.config
    assert a.vocab == b.vocab
    assert list(a.weights) == list(b.weights) == [n for n, _ in expected_parameters(a.config)]
    for name in a.weights:
        assert a.weights[name].dtype == b.weights[name].dtype == np.float32
        assert np.array_equal(a.weights[name], b.weights[name]), name


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_round_trip_is_exact(fmt, contract_model, contract_files, tmp_path):
    first = load_model(contract_files[fmt])
    _assert_same(first, contract_model)
    save_model(tmp_path / f"again.{fmt}", first)
    _assert_same(load_model(tmp_path / f"again.{fmt}"), contract_model)


def test_npz_to_safetensors_and_back(contract_model, contract_files, tmp_path):
    save_model(tmp_path / "x.safetensors", load_model(contract_files["npz"]))
    save_model(tmp_path / "x.npz", load_model(tmp_path / "x.safetensors"))
    _assert_same(load_model(tmp_path / "x.npz"), contract_model)


def test_unicode_vocab_survives(tmp_path):
    from minigpt.model_io import random_model

    config = ModelConfig(n_layer=1, n_head=1, d_model=4, block_size=2, vocab_size=6)
    f = random_model(config, vocab=["<pad>", "<bos>", "<eos>", "<unk>", "café", "naïve"])
    for name in ("u.safetensors", "u.npz"):
        save_model(tmp_path / name, f)
        assert load_model(tmp_path / name).vocab[4:] == ["café", "naïve"]


def test_npz_metadata_layout(contract_files):
    with np.load(contract_files["npz"], allow_pickle=False) as z:
        meta = z["__metadata__"]
        assert meta.dtype == np.uint8 and meta.ndim == 1
        j = json.loads(meta.tobytes())
        assert set(j) == {"config", "vocab"}
        assert j["config"]["vocab_size"] == 600


def _npz(path, metadata, weights):
    np.savez(path, __metadata__=np.frombuffer(json.dumps(metadata).encode(), np.uint8), **weights)


@pytest.fixture()
def parts(contract_model):
    return {"config": contract_model.config.to_json(), "vocab": contract_model.vocab}, dict(contract_model.weights)


def test_misshapen_tensor_is_named(parts, tmp_path):
    meta, weights = parts
    weights["lm_head.bias"] = np.zeros(599, np.float32)
    _npz(tmp_path / "bad.npz", meta, weights)
    with pytest.raises(ModelFileError, match=r"bad\.npz.*'lm_head\.bias'.*\(599,\).*\(600,\)"):
        load_model(tmp_path / "bad.npz")


def test_missing_and_extra_tensors_are_named(parts, tmp_path):
    meta, weights = parts
    del weights["blocks.3.ln2.bias"]
    _npz(tmp_path / "missing.npz", meta, weights)
    with pytest.raises(ModelFileError, match=r"missing tensor 'blocks\.3\.ln2\.bias'"):
        load_model(tmp_path / "missing.npz")
    meta, weights = dict(meta), dict(parts[1])
    weights["blocks.9.ln1.weight"] = np.zeros(64, np.float32)
    _npz(tmp_path / "extra.npz", meta, weights)
    with pytest.raises(ModelFileError, match=r"unexpected tensor 'blocks\.9\.ln1\.weight'"):
        load_model(tmp_path / "extra.npz")


def test_wrong_dtype_is_named(parts, tmp_path):
    meta, weights = parts
    weights["wpe.weight"] = weights["wpe.weight"].astype(np.float64)
    _npz(tmp_path / "f64.npz", meta, weights)
    with pytest.raises(ModelFileError, match=r"'wpe\.weight' has dtype float64"):
        load_model(tmp_path / "f64.npz")


def test_object_arrays_are_refused(parts, tmp_path):
    meta, weights = parts
    weights["wte.weight"] = np.array([{"evil": 1}], dtype=object)
    np.savez(tmp_path / "pickle.npz", __metadata__=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             **weights)
    with pytest.raises(ModelFileError, match=r"pickle\.npz"):
        load_model(tmp_path / "pickle.npz")


def test_bad_metadata_is_named(parts, tmp_path):
    meta, weights = parts
    bad = dict(meta, config=dict(meta["config"], vocab_size=601))
    _npz(tmp_path / "vocab.npz", bad, weights)
    with pytest.raises(ModelFileError, match=r"vocab has 600 tokens, config says vocab_size = 601"):
        load_model(tmp_path / "vocab.npz")
    bad = dict(meta, config=dict(meta["config"], n_heads=4))
    _npz(tmp_path / "key.npz", bad, weights)
    with pytest.raises(ModelFileError, match=r"unknown key 'n_heads'"):
        load_model(tmp_path / "key.npz")
    np.savez(tmp_path / "nometa.npz", **weights)
    with pytest.raises(ModelFileError, match=r"no __metadata__"):
        load_model(tmp_path / "nometa.npz")


def test_safetensors_without_minigpt_metadata(contract_model, tmp_path):
    from safetensors.numpy import save_file

    save_file(dict(contract_model.weights), str(tmp_path / "plain.safetensors"))
    with pytest.raises(ModelFileError, match=r"'format'.*expected 'minigpt'"):
        load_model(tmp_path / "plain.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ModelFileError, match=r"junk\.safetensors: not a valid safetensors file"):
        load_model(tmp_path / "junk.safetensors")


def test_unknown_extension(tmp_path):
    with pytest.raises(ModelFileError, match=r"unknown model file extension '\.bin'"):
        load_model(tmp_path / "model.bin")
