"""The special-value rows of docs/ARCHITECTURE.md for the GPU softmax tests (Triton, softmax_cuda_into):
one place that writes them and one that checks them."""
from __future__ import annotations


def write_special_rows(x) -> None:
    """Rows 0-4 of a (>= 5, V >= 3) torch tensor, in place: a NaN, a +inf, all -inf,
    [1e30, 0, -1e30] then -inf, and -inf in every other column."""
    v = x.shape[1]
    x[0, v // 2] = float("nan")
    x[1, v - 1] = float("inf")
    x[2, :] = float("-inf")
    x[3, :] = float("-inf")
    x[3, 0], x[3, 1], x[3, 2] = 1e30, 0.0, -1e30
    x[4, ::2] = float("-inf")


def check_special_rows(torch, y, what: str) -> None:
    """y = softmax of write_special_rows' rows (on the CPU): NaN rows, an exact one-hot, zeros."""
    assert torch.isnan(y[:3]).all(), f"{what}: NaN, +inf and all -inf rows must be NaN rows"
    assert y[3, 0].item() == 1.0 and (y[3, 1:] == 0).all(), what
    assert (y[4, ::2] == 0).all(), what
