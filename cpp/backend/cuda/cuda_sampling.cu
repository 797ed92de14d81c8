// cuda_sampling.cu: CudaBackend's token selection (cuda_backend.h): sample() and logprobs()
// (kernels/cuda/logprobs.cuh), sample() through
// launch_sample (kernels/cuda/sampling.cuh: several blocks per row, two launches) with
// its scratch (counters zeroed at allocation) from the backend's scratch(). Same rule and the
// same Philox draws as the CPU backend (cpu_sampling.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "common/errors.h"
#include "kernels/cuda/logprobs.cuh"
#include "kernels/cuda/sampling.cuh"

namespace trt_spec {

static_assert(sizeof(cuda::DevSamplingState) == sizeof(SamplingState) &&
                  offsetof(cuda::DevSamplingState, step) == offsetof(SamplingState, step),
              "the kernels' view of SamplingState must match backend.h");

namespace {
// Fixed-point masses need vocab * 2^kMassBits < 2^63.
void check_vocab(int vocab) {
  if (vocab <= 0 || vocab >= (1 << (63 - cuda::kMassBits)))
    throw InvalidArgument("CUDA sampling: vocabulary size " + std::to_string(vocab) +
                          " out of range");
}
}  // namespace

void CudaBackend::sample(const float* logits, int n, int vocab, const int32_t* slot,
                         SamplingState* states, int32_t* out_tokens) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  check_vocab(vocab);
  if (n <= 0) return;
  const cuda::SampleGrid g = cuda::sample_grid(vocab, sm_count_);
  void* buf = scratch(kSampleRows, cuda::sample_scratch_bytes(n));
  if (sizing()) return;
  cuda::launch_sample(stream_, g, logits, n, vocab, slot,
                      reinterpret_cast<cuda::DevSamplingState*>(states), out_tokens,
                      cuda::sample_scratch(buf));
  check_launch("sample");
}

void CudaBackend::logprobs(const float* logits, int vocab, int n, const int32_t* rows,
                           const int32_t* tokens, const int32_t* slot, const SamplingState* states,
                           TokenLogprob* out) {
  if (holding_) flush_forward();  // an op the persistent forward does not hold
  check_vocab(vocab);
  if (n <= 0) return;
  const cuda::SampleGrid g = cuda::sample_grid(vocab, sm_count_);
  void* buf = scratch(kLogprobRows, cuda::sample_scratch_bytes(n));
  if (sizing()) return;
  cuda::launch_logprobs(stream_, g, logits, vocab, n, rows, tokens, slot,
                        reinterpret_cast<const cuda::DevSamplingState*>(states), out,
                        cuda::sample_scratch(buf));
  check_launch("logprobs");
}

}  // namespace trt_spec
