"""The one place that knows how this project starts MPI jobs (Open MPI's mpirun).

- ``--allow-run-as-root``: CI and the dev containers run as root, which mpirun refuses
  otherwise (added only when running as root).
- ``--oversubscribe``: more ranks than cores is allowed (the 2-core machine, 5 engineers).
- ``--bind-to none``: the OS places the ranks; pinning on a shared machine stacks jobs.

Used by the tests (python/tests/test_distributed.py) and for benchmarks from the shell::

    python3 -m minigpt.mpi_launch -np 2 -- build/default/minigpt -t 1 bench train --dist mpi
"""
from __future__ import annotations

import os
import shutil
import sys


def mpirun_command(ranks: int, command: list[str]) -> list[str]:
    """The argv that runs ``command`` as ``ranks`` MPI ranks on this host."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun is not installed: `make setup` installs openmpi-bin")
    argv = [mpirun]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    argv += ["--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
    return argv + list(command)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "-np" or "--" not in argv:
        print("usage: python3 -m minigpt.mpi_launch -np N -- COMMAND...", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1:]
    args = mpirun_command(int(argv[1]), command)
    os.execv(args[0], args)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
