// `--gpus N` on `train` and `bench train --device cuda`: the command starts its N local ranks
// itself, one per GPU, so that no `mpirun` has to be typed. It re-executes this same binary
// under Open MPI's mpirun (the engine that bootstraps NCCL; never a home-made transport) with
// `--gpus N` taken out and `--dist nccl` put in; every rank then runs the ordinary
// `--dist nccl` path (train/cuda_data_parallel.h). What it does not do: start ranks on other
// hosts (use mpirun with a host file for that).
#pragma once

#include <string>
#include <vector>

namespace minigpt::dist {

// True when this process is already a rank of an MPI job (Open MPI sets OMPI_COMM_WORLD_SIZE).
bool launched_by_mpirun();

// How many ranks of this process's MPI job run on this host (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE); 1 when not under mpirun or when the variable is not a count.
// The default thread count divides the cores by it: 2 ranks on 2 cores take 1 thread each.
int local_rank_count();

// The mpirun command line that runs `argv` (this process's command line, argv[0] first) as
// `gpus` local ranks: argv[0] replaced by `self_exe`, every "--gpus N" / "--gpus=N" removed,
// "--dist X" / "--dist=X" replaced by "--dist nccl" (added when absent). Flags as
// python/minigpt/mpi_launch.py: --allow-run-as-root when root, --bind-to none. Pure: for tests.
std::vector<std::string> local_ranks_command(const std::string& mpirun, const std::string& self_exe,
                                             const std::vector<std::string>& argv, int gpus, bool as_root);

// What `--gpus N` does on `command` (gpus == 0: not asked, returns): refuses it without
// --device cuda or under mpirun (an Error naming the conflict), returns for N == 1 (the plain
// one-GPU path) and execs N local ranks (exec_local_ranks) for N > 1.
void start_local_ranks_if_asked(const std::vector<std::string>& argv, int gpus, bool on_cuda, const std::string& command);

// Checks that `gpus` GPUs are visible and that mpirun is installed (an Error naming what is
// missing otherwise), then replaces this process by `mpirun -np gpus ...`. Returns only by
// throwing.
[[noreturn]] void exec_local_ranks(const std::vector<std::string>& argv, int gpus, const std::string& command);

}  // namespace minigpt::dist
