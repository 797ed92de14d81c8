// kernel_wave.h: one kernel launch's blocks against the blocks a device holds at once (plain
// C++: the engine's launch plan and the CUDA backend's planning code share it).
#pragma once

#include <cstdint>
#include <string>

namespace trt_spec {

// The grid that the CUDA backend's own planning code (plan_matmul, plan_attention) gives a
// launch, and the resident blocks per SM its kernel is compiled for (its launch bounds):
// waves = blocks / (blocks_per_sm sm_count); over 1.0, the last wave runs partly empty.
struct KernelWave {
  std::string kernel;  // e.g. "matmul_kernel<q4, 8>", "attention_kernel<128>"
  int64_t blocks = 0;  // grid.x grid.y grid.z
  int blocks_per_sm = 1;
  int sm_count = 1;
  double waves() const { return static_cast<double>(blocks) / (blocks_per_sm * sm_count); }
};

}  // namespace trt_spec
