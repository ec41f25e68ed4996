#!/usr/bin/env bash
# Installs everything minigpt.cpp needs on a fresh Debian 12 machine: compilers and libraries
# from apt, Python packages from pip. Idempotent and quiet when everything is already there.
# The CUDA toolkit is not installed here: the build uses it when nvcc is on the machine.
#
#   scripts/setup.sh           what `make run` needs (no torch: it is large)
#   scripts/setup.sh --torch   torch from PyPI, for `make test` (the PyTorch port's tests and the
#                              benchmarks' peers): about 1 minute and 5 GB, once per machine.
#                              Exits non-zero, saying why, when torch cannot be installed.
set -euo pipefail

PYTHON=${PYTHON:-python3}

# pip_install PACKAGE...: pip into $PYTHON; Debian's own python3 is "externally managed", a
# pyenv or venv python is not.
pip_install() {
  "$PYTHON" -m pip install -q "$@" 2>/dev/null || "$PYTHON" -m pip install -q --break-system-packages "$@"
}

if [[ ${1:-} == --torch ]]; then
  if "$PYTHON" -c "import torch" 2>/dev/null; then exit 0; fi
  echo "setup: installing torch from PyPI for the PyTorch tests (about 1 minute and 5 GB, once)"
  log=$(mktemp)
  if ! { "$PYTHON" -m pip install -q torch >>"$log" 2>&1 ||
         "$PYTHON" -m pip install -q --break-system-packages torch >>"$log" 2>&1; } ||
     ! "$PYTHON" -c "import torch" >>"$log" 2>&1; then
    echo "setup: ERROR: torch could not be installed with '$PYTHON -m pip install torch'; pip said:" >&2
    tail -n 15 "$log" >&2
    echo "setup: \`make test\` runs the PyTorch port's contract tests and needs torch: fix the cause above" >&2
    echo "       (network, disk space: about 5 GB), or install torch yourself, then run it again." >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  exit 0
fi

APT_PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev
  libssl-dev                     # libcrypto's SHA-256 for the compiler's JIT cache
  openmpi-bin libopenmpi-dev     # MPI for data-parallel training (minigpt train --dist mpi)
  clang libclang-rt-dev          # libFuzzer + ASan/UBSan for the fuzz targets
  python3 python3-dev python3-pip
  python3-venv                   # python/tests/test_package.py installs the package into a venv
  ccache                         # the Makefile compiles through it when present (fast rebuilds)
)
# module[:pip name]; scikit-build-core (with nanobind) builds the package for `pip install .`
PIP_PACKAGES=(numpy pytest matplotlib nanobind safetensors scikit_build_core:scikit-build-core)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

need_pip=()
for p in "${PIP_PACKAGES[@]}"; do
  "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('${p%%:*}') is None)" 2>/dev/null \
    || need_pip+=("${p#*:}")
done
if ((${#need_pip[@]})); then
  echo "setup: installing pip packages: ${need_pip[*]}"
  pip_install "${need_pip[@]}"
fi
