// top_tokens.cuh: a row's top tokens and their log-probabilities, as a draft head's tree reads them
// (Medusa's, EAGLE-3's), by one CUDA block; the CPU's is top_tokens.h (the same tokens: larger
// logit first, then lower id).
#pragma once

#include "kernels/cuda/common.cuh"

namespace trt_spec::cuda {

constexpr int kMaxTopTokens = 8;  // the widest top list a block picks

// Row x [n]'s top w tokens (w <= kMaxTopTokens <= n) by w block argmaxes, then the log-sum-exp:
// tok [w] and logp [w] (their log-softmax) are written by thread 0. Every thread of the block
// calls it.
__device__ inline void block_top_tokens(const float* __restrict__ x, int n, int w, int32_t* tok,
                                        float* logp) {
  __shared__ int chosen[kMaxTopTokens];
  for (int r = 0; r < w; ++r) {
    ArgMax a{0.0f, -1};
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      bool taken = false;
      for (int j = 0; j < r; ++j) taken = taken || chosen[j] == i;
      if (!taken) a = argmax_pick(a, ArgMax{x[i], i});
    }
    a = block_argmax(a);
    if (threadIdx.x == 0) chosen[r] = a.i;
    __syncthreads();
  }
  const float mx = x[chosen[0]];
  float part = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) part += expf(x[i] - mx);
  const float lse = mx + logf(block_sum(part));
  if (threadIdx.x == 0)
    for (int r = 0; r < w; ++r) {
      tok[r] = chosen[r];
      logp[r] = x[chosen[r]] - lse;
    }
  __syncthreads();  // (chosen is reused by the block's next call)
}

}  // namespace trt_spec::cuda
