// launch_plan.h: how many CUDA kernel launches an engine's steps and speculative iterations make,
// counted without a GPU (`trt-spec info --plan`).
//
// The engine is opened on a planning CUDA backend (CudaBackend::planning: host memory, nothing
// runs, every launch recorded by the same launch code that runs on a GPU), and the same
// programs the scheduler runs are issued on it: a one-row target forward, a one-row draft
// forward, and one speculative iteration of the draft model (B sequences, k draft tokens) with
// the scheduler's proposers, captured as a graph the way the GPU path does.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "backend/kernel_wave.h"
#include "kernels/weight_format.h"

namespace trt_spec {

struct LaunchPlan {
  int batch = 1, draft_len = 0;  // the iteration counted: B sequences, k draft tokens
  int sm_count = 0;              // the device planned for
  bool persistent = false;       // the persistent forward (CudaBackend::set_persistent)
  int target_layers = 0, draft_layers = 0;
  int target_step = 0;  // launches of one target forward, one row (decode)
  int draft_step = 0;   // launches of one draft forward, one row (0 without a draft model)
  int iteration = 0;    // launches of one iteration (the captured graph's nodes)
  std::map<std::string, int> iteration_kernels;  // kernel name -> launches in the iteration
};

// persistent: with the persistent forward on (each model forward of at most 16 rows one launch).
// Throws Error when this build has no CUDA backend, InvalidArgument for a batch beyond the
// engine's max_batch or a draft length beyond its draft_len (or without a draft model).
LaunchPlan cuda_launch_plan(const std::string& engine_path, int batch, int draft_len,
                            int sm_count = 132, bool persistent = false);

// The fused matmul of a [rows, cols] weight of `type` over n activation rows (16-byte aligned
// operands, the backend's case). Throws InvalidArgument for a shape the kernel rejects.
KernelWave cuda_matmul_wave(WeightType type, int64_t rows, int64_t cols, int n, int sm_count);

// The attention of n rows (a verify pass of one sequence, or one row per sequence).
KernelWave cuda_attention_wave(int n, int n_heads, int n_kv_heads, int head_dim, int max_seq,
                               int sm_count);

}  // namespace trt_spec
