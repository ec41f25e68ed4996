"""`pip install .` into a fresh virtual environment, then `import minigpt` from outside the
repository with no PYTHONPATH: the installed package (pure-Python modules, the compiled module,
its type stub and py.typed) computes a softmax of a NumPy array (and of a torch tensor where
torch is installed), loads the shipped model on the CPU and predicts, and on device="cuda"
predicts the same token with a GPU or says clearly why not without one.

Nothing is downloaded: the venv sees this Python's packages (--system-site-packages: numpy, and
scikit-build-core and nanobind for --no-build-isolation) and pip runs with --no-index. The CMake
tree is build/wheel-<tag> (pyproject.toml), kept between runs, and ccache is used when it is
installed (CCACHE_BASEDIR = the repository, so the objects `make` compiled in build/default, at
the same depth, are hits). Measured on the shared 2-core machine: warm 10-22 s; a fresh clone's
first run after `make`'s build (build/wheel-<tag> new, every object a ccache hit) 21-40 s; with
no ccache hits at all ~12.5 min (the whole library, CUDA kernels included, compiled again).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import missing, require

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "grammar-minigpt.safetensors"


def build_env() -> dict[str, str]:
    """This process's environment without the in-tree import path, with ccache when it exists.
    CC/CXX: scikit-build-core would otherwise take Python's sysconfig compilers (g++, or
    x86_64-linux-gnu-g++), and ccache keys on the compiler's name: cc/c++ are what CMake picks
    for `make`'s build tree, so its objects are hits here."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "MINIGPT_PYTHON_BUILD")}
    env.setdefault("CC", "cc")
    env.setdefault("CXX", "c++")
    if shutil.which("ccache"):  # (the Makefile may export these empty: "" counts as unset)
        for key, value in [("CMAKE_CXX_COMPILER_LAUNCHER", "ccache"), ("CMAKE_CUDA_COMPILER_LAUNCHER", "ccache"),
                           ("CCACHE_BASEDIR", str(REPO)), ("CCACHE_NOHASHDIR", "true")]:
            env[key] = env.get(key) or value
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}"
    return r


# What the installed package must do, run by the venv's python in an empty folder.
CHECK = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    import minigpt
    from minigpt import core
    pkg = Path(minigpt.__file__).parent
    assert "site-packages" in str(pkg), pkg
    assert Path(core._module.__file__).parent == pkg, core._module.__file__
    assert (pkg / "_minigpt_core.pyi").is_file() and (pkg / "py.typed").is_file()
    y = minigpt.softmax(np.array([[0.0, 1.0, 2.0]], dtype=np.float32))
    want = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    assert np.allclose(y, want, rtol=1e-6), y
    try:
        import torch  # the venv sees this Python's torch, if it has one
    except ImportError:
        torch = None
    if torch is not None:
        t = minigpt.softmax(torch.tensor([[0.0, 1.0, 2.0]]))
        assert isinstance(t, torch.Tensor) and np.allclose(t.numpy(), want, rtol=1e-6), t
    model = minigpt.Model.load(sys.argv[1])
    top = model.predict("Yesterday I", k=3)
    try:
        gpu = minigpt.Model.load(sys.argv[1], device="cuda")
        assert gpu.predict("Yesterday I", k=1)[0][0] == top[0][0]
        cuda = "loaded"
    except minigpt.Error as e:
        cuda = str(e)
    sys.path.insert(0, sys.argv[2])  # the tests folder, for the stub check only
    from stub_check import check_stub
    check_stub(core._module)
    print(json.dumps({"package": str(pkg), "top": top, "cuda": cuda,
                      "gpus": core.build_info()["gpus"],
                      "cuda_build": core.build_info()["cuda"]}))
""")


def test_pip_install_into_a_fresh_venv(tmp_path):
    require("scikit_build_core", "scikit-build-core is not installed (scripts/setup.sh installs it)")
    require("nanobind", "nanobind is not installed (scripts/setup.sh installs it)")
    require("venv", "this Python has no venv module (Debian: python3-venv)")
    if not MODEL.is_file():
        missing(f"the shipped model {MODEL} is missing")
    env = build_env()
    venv = tmp_path / "venv"
    start = time.perf_counter()
    # --without-pip: this Python's pip installs into the venv (pip --python), saving ensurepip's
    # ~10 s; the build backend still runs under the venv's interpreter.
    run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], tmp_path, env, 120)
    python = venv / "bin" / "python"
    r = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-build-isolation", "--no-index",
             "--no-cache-dir", str(REPO)], tmp_path, env, 1500)
    installed = time.perf_counter() - start
    if env.get("CMAKE_CXX_COMPILER_LAUNCHER"):  # pyproject.toml passes the launcher through
        caches = sorted((REPO / "build").glob("wheel-*/CMakeCache.txt"), key=lambda p: p.stat().st_mtime)
        launcher = re.escape(env["CMAKE_CXX_COMPILER_LAUNCHER"])
        assert caches and re.search(rf"^CMAKE_CXX_COMPILER_LAUNCHER:\w+={launcher}$", caches[-1].read_text(), re.M), \
            f"the wheel build did not use {env['CMAKE_CXX_COMPILER_LAUNCHER']}"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    r = run([str(python), "-c", CHECK, str(MODEL), str(Path(__file__).parent)], outside, env, 300)
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(result["package"]).is_relative_to(venv), result["package"]
    assert len(result["top"]) == 3 and all(0 < p <= 1 for _, p in result["top"])
    if result["gpus"] == 0 or not result["cuda_build"]:
        assert "device='cuda'" in result["cuda"], result["cuda"]
    else:
        assert result["cuda"] == "loaded", result["cuda"]
    print(f"\npip install . into a fresh venv: {installed:.1f} s (import and checks: "
          f"{time.perf_counter() - start - installed:.1f} s)")


def test_import_needs_only_numpy(tmp_path):
    """In-tree without the compiled module on the path: `import minigpt` works (NumPy only), and
    the first use of the C++ API is an ImportError that says how to get the module."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "MINIGPT_PYTHON_BUILD")}
    env["PYTHONPATH"] = str(REPO / "python")
    code = textwrap.dedent("""
        import minigpt
        assert minigpt.ModelConfig and "Model" in dir(minigpt)
        try:
            minigpt.Model
        except ImportError as e:
            print(e)
        else:
            print("imported")  # a minigpt package is installed in this Python
    """)
    r = run([sys.executable, "-c", code], tmp_path, env, 120)
    if r.stdout.strip() != "imported":
        assert "pip install ." in r.stdout and "_minigpt_core" in r.stdout, r.stdout
