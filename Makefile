# The README's two commands:
#   make run   set up, build, run the main job (`minigpt demo`) on the shipped model
#   make test  set up (with torch: the PyTorch port's contract needs it), build, run every C++
#              test (ctest), every Python test (pytest; a missing torch or C++ module fails
#              there, only GPU tests may skip; one of them pip-installs the package into a
#              venv) and the fuzzers
# Development runs Python in-tree (PYTHONPATH below); `pip install .` installs the package.
PRESET ?= default
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)
PYTHON ?= python3
export PYTHONPATH := $(CURDIR)/python:$(CURDIR)/$(BUILD)/python
export MINIGPT_BIN := $(CURDIR)/$(BUILD)/minigpt

# ccache, when installed (scripts/setup.sh installs it), for every compile of a fresh build tree
# and for the wheel build of `pip install .` that python/tests/test_package.py runs, whose
# objects are then hits of the ones compiled here (CCACHE_BASEDIR: paths relative to the repo).
# Recursively expanded, so looked up when a recipe runs: after `setup` has installed ccache.
# Values already in the environment win.
HAVE_CCACHE = $(shell command -v ccache 2>/dev/null)
export CMAKE_CXX_COMPILER_LAUNCHER ?= $(if $(HAVE_CCACHE),ccache)
export CMAKE_CUDA_COMPILER_LAUNCHER ?= $(if $(HAVE_CCACHE),ccache)
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= true

.PHONY: all setup setup-torch configure build run test test-cpp test-python fuzz clean

all: build

setup:
	@PYTHON=$(PYTHON) scripts/setup.sh

# torch from PyPI (about 1 minute and 5 GB once per machine); fails, saying why, if it cannot.
setup-torch: setup
	@PYTHON=$(PYTHON) scripts/setup.sh --torch

configure:
	@cmake --preset $(PRESET) > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: setup build
	$(BUILD)/minigpt demo

test: setup setup-torch build
	@$(MAKE) --no-print-directory test-cpp test-python fuzz

test-cpp:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# MINIGPT_REQUIRE_ALL=1: a test that needs torch, the C++ module or matplotlib fails where they
# are missing instead of skipping (python/tests/conftest.py); run pytest directly to allow it.
test-python:
	MINIGPT_REQUIRE_ALL=1 $(PYTHON) -m pytest -q python/tests

fuzz:
	@scripts/fuzz.sh

clean:
	rm -rf build
