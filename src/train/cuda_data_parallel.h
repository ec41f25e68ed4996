// Data parallel on GPUs: connects a CudaTrainStep to the NCCL communicator of its rank.
//
// The step's gradient hook (between the backward and the clipping, inside its CUDA graph)
// enqueues one in-place ncclAllReduce with ncclAvg of the whole flat gradient buffer (the
// arena's alignment gaps are zeros and stay zeros), so every rank clips and steps with the mean
// gradient; the step's wait for its graph becomes NcclCommunicator::synchronize, bounded by
// --dist-timeout, so a dead or stuck peer ends the step with an Error naming this rank instead
// of a hang. The all-reduce is not overlapped with the backward: the step has one hook after
// the whole backward (overlap needs per-layer hooks: dist/device_grad_reducer.h has the buckets).
//
// What it does not do: split the batch or broadcast the weights (Trainer does, as on the CPU).
#pragma once

#include "dist/communicator.h"
#include "train/cuda_train_step.h"

namespace minigpt {

// comm must be an NcclCommunicator (`--dist nccl`; any world size, 1 included) and outlive
// step. Error naming the engine otherwise, or in a build without NCCL.
void connect_nccl(CudaTrainStep& step, dist::Communicator& comm);

}  // namespace minigpt
