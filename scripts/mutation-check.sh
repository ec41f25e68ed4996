#!/usr/bin/env bash
# The mutation check (issue 18): breaks each CPU kernel in a small, realistic way, one mutation
# at a time, in a copy of the tree (build/mutation/), rebuilds the test that covers it and runs
# it under every ISA this CPU has that executes the mutated code (MINIGPT_ISA); prints a table
# (mutation, ISA, caught) and exits 1 if any mutation survives. Slow (a rebuild per mutation):
# not part of `make test`. The mutations are listed in scripts/mutation_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/mutation_check.py "$@"
