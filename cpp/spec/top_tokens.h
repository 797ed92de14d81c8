// top_tokens.h: a row's top tokens and their log-probabilities, as a draft head's tree reads them
// (Medusa's, EAGLE-3's), on the CPU; the CUDA kernels' block version is top_tokens.cuh.
#pragma once

#include <cmath>
#include <cstdint>

namespace trt_spec {

// Row x [n]'s top w tokens (larger logit first, then lower id) into tok [w] and their
// log-softmax into logp [w] (n >= w).
inline void top_tokens(const float* x, int n, int w, int32_t* tok, float* logp) {
  int m = 0;
  for (int i = 0; i < n; ++i) {  // one pass, a sorted list of the best so far (logp: logits)
    if (m == w && !(x[i] > logp[m - 1])) continue;
    int j = m < w ? m++ : m - 1;
    for (; j > 0 && x[i] > logp[j - 1]; --j) {
      logp[j] = logp[j - 1];
      tok[j] = tok[j - 1];
    }
    logp[j] = x[i];
    tok[j] = i;
  }
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - logp[0]);
  const float lse = logp[0] + std::log(sum);
  for (int r = 0; r < w; ++r) logp[r] -= lse;
}

}  // namespace trt_spec
