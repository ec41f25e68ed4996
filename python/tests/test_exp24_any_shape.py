"""Experiment 24's any-shape table (issue 19) is rendered by its bench.py from a bench report and
the Triton autotune cache; these check the ratios, the picks and the missing-peer cells."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    spec = importlib.util.spec_from_file_location("exp24_bench", ROOT / "experiments/24-triton-and-pytorch/bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(kernel, b, v, us):
    return {"kernel": kernel, "B": b, "V": v, "time_us": us}


def test_any_shape_rows_ratios_picks_and_gaps():
    bench = load_bench()
    from minigpt.triton_autotune import shape_bucket

    report = {"rows": [row("triton", 1000, 1000, 6.0), row("torch.softmax", 1000, 1000, 8.0),
                       row("minigpt fused", 1000, 1000, 5.0), row("torch.compile", 1000, 1000, 7.0),
                       row("naive", 1000, 1000, 280.0),
                       row("triton", 3, 100003, 10.0), row("torch.softmax", 3, 100003, 30.0)]}
    cache = {"entries": {"k": {"key": {"bucket": shape_bucket(1000, 1000)},
                               "config": {"kernel": "rows", "BLOCK": 1024, "num_warps": 4}}}}
    picks = bench.triton_picks(cache, {(1000, 1000), (3, 100003)})
    assert picks == {"1000x1000": "rows BLOCK=1024, num_warps=4"}
    rows = {(r["B"], r["V"]): r for r in bench.any_shape_rows(report, picks)}
    assert rows[(1000, 1000)]["triton_over_torch"] == 0.75
    assert rows[(1000, 1000)]["triton_over_fused"] == 1.2
    assert rows[(3, 100003)]["triton_over_fused"] is None and rows[(3, 100003)]["triton_pick"] is None
    table = bench.any_shape_markdown(list(rows.values())).splitlines()
    assert table[2] == "| (1000, 1000) | 4 | 6.0 | 8.0 | 7.0 | 5.0 | 0.75 | 1.20 | rows BLOCK=1024, num_warps=4 |"
    assert table[3] == "| (3, 100003) | 1 | 10.0 | 30.0 | - | - | 0.33 | - | - |"
