#!/usr/bin/env bash
# Installs everything minigpt.cpp needs on a fresh Debian 12 machine: compilers and libraries
# from apt, Python packages from pip. Idempotent and quiet when everything is already there.
# The CUDA toolkit is not installed here: the build uses it when nvcc is on the machine.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev
  libssl-dev                     # libcrypto's SHA-256 for the compiler's JIT cache
  clang libclang-rt-dev          # libFuzzer + ASan/UBSan for the fuzz targets
  python3 python3-dev python3-pip
)
PIP_PACKAGES=(numpy pytest matplotlib nanobind safetensors)

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

PYTHON=${PYTHON:-python3}
need_pip=()
for p in "${PIP_PACKAGES[@]}"; do
  "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$p') is None)" 2>/dev/null \
    || need_pip+=("$p")
done
if ((${#need_pip[@]})); then
  echo "setup: installing pip packages: ${need_pip[*]}"
  # Debian's own python3 is "externally managed"; a pyenv or venv python is not.
  "$PYTHON" -m pip install -q "${need_pip[@]}" 2>/dev/null \
    || "$PYTHON" -m pip install -q --break-system-packages "${need_pip[@]}"
fi
