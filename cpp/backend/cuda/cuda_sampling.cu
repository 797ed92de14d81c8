// cuda_sampling.cu: CudaBackend's token selection (cuda_backend.h): sample(), launching the
// kernel of kernels/cuda/sampling.cuh. Same rule and the same Philox draws as the CPU backend
// (cpu_sampling.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "common/errors.h"
#include "kernels/cuda/sampling.cuh"

namespace trt_spec {

static_assert(sizeof(cuda::DevSamplingState) == sizeof(SamplingState) &&
                  offsetof(cuda::DevSamplingState, step) == offsetof(SamplingState, step),
              "the kernels' view of SamplingState must match backend.h");

namespace {
const cuda::DevSamplingState* dev_states(const SamplingState* s) {
  return reinterpret_cast<const cuda::DevSamplingState*>(s);
}
// Fixed-point masses need vocab * 2^kMassBits < 2^63.
void check_vocab(int vocab) {
  if (vocab <= 0 || vocab >= (1 << (63 - cuda::kMassBits)))
    throw InvalidArgument("CUDA sampling: vocabulary size " + std::to_string(vocab) +
                          " out of range");
}
}  // namespace

void CudaBackend::sample(const float* logits, int n, int vocab, const int32_t* slot,
                         SamplingState* states, int32_t* out_tokens) {
  check_vocab(vocab);
  if (sizing() || n <= 0) return;
  cuda::sample_kernel<<<1, cuda::kSampleThreads, 0, stream_>>>(
      logits, n, vocab, slot, reinterpret_cast<cuda::DevSamplingState*>(states), out_tokens);
  check_launch("sample");
}

}  // namespace trt_spec
