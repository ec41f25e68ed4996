"""The Triton softmax's autotune cache (minigpt.triton_autotune), on the CPU: an entry is found
only under its whole key, saves merge with what another process wrote, a corrupt file is
ignored with a warning and rewritten."""
from __future__ import annotations

import json

from minigpt import triton_autotune as ta

KEY = {"gpu_name": "NVIDIA H200", "cc": "9.0", "triton": "3.6.0", "cuda_runtime": "12.8",
       "driver": "13000", "source_sha256": "ab" * 32, "bucket": ta.shape_bucket(1000, 1000)}
CFG = {"kernel": "rows", "ROWS": 4, "BLOCK": 1024, "num_warps": 4}


def test_bucket_rounds_rows_up_and_keeps_cols():
    assert ta.shape_bucket(1000, 1000) == "V1000_B1024"
    assert ta.shape_bucket(1024, 7) == "V7_B1024"
    assert ta.shape_bucket(1, 1) == "V1_B1"


def test_found_only_under_the_whole_key(tmp_path):
    c = ta.Cache(tmp_path / "t.json")
    c.put(KEY, CFG, 5.0, [])
    c.save()
    again = ta.Cache(tmp_path / "t.json")
    assert again.find(KEY)["config"] == CFG
    for field, other in [("gpu_name", "NVIDIA H100"), ("triton", "3.7.0"), ("source_sha256", "cd" * 32),
                         ("bucket", "V1000_B2048"), ("driver", "12000")]:
        assert again.find(dict(KEY, **{field: other})) is None, field


def test_save_merges_with_another_writer(tmp_path):
    path = tmp_path / "t.json"
    a, b = ta.Cache(path), ta.Cache(path)  # both read the empty file
    a.put(KEY, CFG, 5.0, [])
    a.save()
    other = dict(KEY, bucket="V7_B1")
    b.put(other, dict(CFG, BLOCK=8), 1.0, [])
    b.save()  # must keep a's entry, written after b read the file
    final = ta.Cache(path)
    assert final.find(KEY)["config"] == CFG
    assert final.find(other)["config"]["BLOCK"] == 8
    assert not list(tmp_path.glob("*.tmp"))


def test_corrupt_file_is_ignored_and_rewritten(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text("{ not json")
    c = ta.Cache(path)
    assert c.find(KEY) is None
    assert "unreadable" in capsys.readouterr().err
    c.put(KEY, CFG, 5.0, [])
    c.save()
    assert json.loads(path.read_text())["format"] == ta.FORMAT
    path.write_text(json.dumps({"format": "something else", "entries": {}}))
    assert ta.Cache(path).find(KEY) is None
    assert "is not a" in capsys.readouterr().err
