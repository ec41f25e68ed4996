"""The type stub _minigpt_core.pyi (nanobind's stubgen, run by the build after every relink of the
module, python/CMakeLists.txt) against the module that is imported: the same public functions,
classes, methods and properties, and each callable with the same parameter names
(stub_check.py). A stub left over from an older build, or one that lost a name, fails here. The
stub sits beside the module file (build/<preset>/python in-tree, minigpt/ in an installed
package, which test_package.py checks with the same function).
"""
from __future__ import annotations

from pathlib import Path

from conftest import require
from stub_check import check_stub, stub_names

core = require("minigpt.core", "the C++ module _minigpt_core is not built", module_level=True)


def test_stub_matches_module():
    check_stub(core._module)


def test_stub_has_the_package_api():
    """The names the package's users call: a regression guard on the bindings themselves."""
    names = stub_names(Path(core._module.__file__).with_name("_minigpt_core.pyi"))
    assert {"load", "forward", "predict", "generate", "device"} <= set(names["Model"])
    assert names["Model"]["load"] == ["path", "device"]
    assert {"softmax", "softmax_cuda_into", "softmax_kernels"} <= set(names)
