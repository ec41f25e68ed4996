"""The C++ engine from Python: a thin re-export of the nanobind module ``_minigpt_core``.

    from minigpt import core
    core.set_num_threads(1)
    model = core.Model.load("models/grammar-minigpt.safetensors")
    logits, probs = model.forward(ids)                 # ids (B, T) int32/int64
    logits, probs, layers = model.forward(ids, trace=True)
    loss, grads = model.loss_and_grads(ids, targets)   # grads: dict name -> float32 array
    y = core.softmax(x, kernel="simd")                 # reference | naive | fused | simd
    tok = core.Tokenizer(model.vocab); tok.encode("Yesterday I")

Float arrays must be float32 and C-contiguous (a TypeError/ValueError says so otherwise); C++
errors arrive as ``core.Error`` (a RuntimeError). Compute releases the GIL.

Installed (``pip install .``) the module is ``minigpt/_minigpt_core*.so`` with its stub
``_minigpt_core.pyi``; in-tree it lives in the build tree (``<build>/python/``), which ``make
test`` puts on PYTHONPATH. This file adds nothing of its own beyond the import error message.
"""
from __future__ import annotations

try:  # installed by `pip install .`: the module lives inside the package
    from ._minigpt_core import *  # noqa: F401,F403
    from ._minigpt_core import Error, Model, Tokenizer, build_info, get_num_threads, set_num_threads  # noqa: F401
    from . import _minigpt_core as _module
except ImportError as packaged:
    try:  # in-tree development: <build>/python on PYTHONPATH (make test)
        from _minigpt_core import *  # noqa: F401,F403
        from _minigpt_core import Error, Model, Tokenizer, build_info, get_num_threads, set_num_threads  # noqa: F401
        import _minigpt_core as _module
    except ImportError as e:  # not built, or built for another Python
        raise ImportError(
            "minigpt.core needs the C++ module _minigpt_core, which is not importable "
            f"(as minigpt._minigpt_core: {packaged}; as _minigpt_core: {e}). Install the package "
            "with `pip install .` from the repository, or build it in-tree with\n"
            "    cmake -S . -B build/default -DMINIGPT_PYTHON=ON && "
            "cmake --build build/default --target _minigpt_core\n"
            "(needs Python development headers and `pip install nanobind`), then put "
            "build/default/python on PYTHONPATH (`make test` does both).") from e

__doc__ = (__doc__ or "") + "\n" + (_module.__doc__ or "")
