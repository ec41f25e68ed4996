"""minigpt.plot roofline: draws from a small synthetic bench report into tmp_path."""
from __future__ import annotations

import json

import pytest

from conftest import require  # noqa: E402

require("matplotlib", "matplotlib is not importable: the plot tests are skipped", module_level=True)

from minigpt import plot  # noqa: E402


def _report(device: str, with_rates: bool) -> dict:
    rows = []
    for kernel, us in [("naive", 900.0), ("fused", 400.0), ("simd", 60.0), ("memcpy", 30.0), ("memcpy-stream", 25.0),
                       ("torch.softmax", 150.0)]:
        for b, v in [(512, 600), (4096, 600), (64, 600)]:
            t = us * b / 4096
            rows.append({"kernel": kernel, "B": b, "V": v, "time_us": t, "GB/s": 8 * b * v / (t * 1e3)})
    meta = {"device": device, "threads": 2, "copy_bandwidth_GBps": 20.0}
    if with_rates:
        meta["roofline"] = {"flops_per_element": 5, "bytes_per_element": 8, "copy_bandwidth_GBps": 20.0,
                            "fma_peak_GFLOPs": 268.8, "exp_rate_Gps": 9.0, "cpu_GHz": 2.1}
    return {"title": "bench softmax", "meta": meta, "columns": ["kernel", "B", "V", "time_us"], "rows": rows}


@pytest.mark.parametrize("device,with_rates", [("cpu", True), ("cpu", False), ("cuda", False)])
def test_roofline_png_is_written_and_not_blank(tmp_path, device, with_rates):
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(_report(device, with_rates)))
    out = tmp_path / "roofline.png"
    assert plot.main(["roofline", str(src), "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000  # axes, lines, legend: far more than an empty canvas

    import matplotlib.image as mpimg

    img = mpimg.imread(out)
    assert img.shape[0] > 300 and img.shape[1] > 500
    assert img.std() > 0.05  # not a single colour


def test_default_shape_is_largest_v600_and_unknown_shape_fails(tmp_path):
    rows = _report("cpu", True)["rows"]
    assert plot.pick_shape(rows, None) == (4096, 600)
    assert plot.pick_shape(rows, "64x600") == (64, 600)
    with pytest.raises(ValueError, match=r"shape 7x7 is not in the report"):
        plot.pick_shape(rows, "7x7")
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(_report("cpu", True)))
    assert plot.main(["roofline", str(src), "-o", str(tmp_path / "x.png"), "--shape", "7x7"]) == 1


def test_copy_rows_are_not_plotted():
    kernels = {r["kernel"] for r in plot.softmax_rows(_report("cpu", True))}
    assert kernels == {"naive", "fused", "simd", "torch.softmax"}


def test_cpu_report_without_copy_bandwidth_is_an_error():
    report = _report("cpu", False)
    del report["meta"]["copy_bandwidth_GBps"]
    with pytest.raises(ValueError, match="the report has no copy bandwidth"):
        plot.roofline_params(report, "cpu")
