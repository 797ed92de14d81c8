// cuda_check.h: CUDA runtime errors as trt_spec::Error exceptions (for the .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/errors.h"

namespace trt_spec {

// Throws Error("CUDA error in <what>: <message>") unless e is cudaSuccess (and clears the error
// state of non-sticky errors).
inline void cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace trt_spec
