# The README's two commands:
#   make run   set up, build, run the main job (`minigpt demo`) on the shipped model
#   make test  set up, build, run every C++ test (ctest), the Python tests (pytest) and the fuzzers
PRESET ?= default
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)
PYTHON ?= python3
export PYTHONPATH := $(CURDIR)/python:$(CURDIR)/$(BUILD)/python
export MINIGPT_BIN := $(CURDIR)/$(BUILD)/minigpt

.PHONY: all setup configure build run test test-cpp test-python fuzz clean

all: build

setup:
	@scripts/setup.sh

configure:
	@cmake --preset $(PRESET) > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: setup build
	$(BUILD)/minigpt demo

test: setup build
	@$(MAKE) --no-print-directory test-cpp test-python fuzz

test-cpp:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# MINIGPT_TEST_STRICT: a missing C++ module or minigpt binary fails the run (conftest.require);
# only GPU tests may skip.
test-python:
	MINIGPT_TEST_STRICT=1 $(PYTHON) -m pytest -q python/tests

fuzz:
	@scripts/fuzz.sh

clean:
	rm -rf build
