// penalties.h: repetition, frequency and presence penalties and logit bias, and the definition
// of how they change one logit (plain C++, host and device).
//
// At every position, with the text up to it (the prompt, then the tokens generated so far:
// under speculation, those before the verify row and the draft path above it), a logit l_x is
// replaced, before temperature, top-k, top-p, the argmax, the draws and the log-probabilities
// (kernels/sampling.h), by
//   1. repetition (x in the prompt or generated at least once; HF / vLLM):
//        l > 0 ? l / repetition : l * repetition
//   2. frequency and presence (c: x's count among the generated tokens; OpenAI):
//        l - (c * frequency + (c > 0 ? presence : 0))
//   3. logit bias: + bias[x]
// Each applies only where its condition holds, so a token that none touches keeps its bits, and
// the result depends on the text's tokens and counts, not on their order: a verify row gets the
// value a target-only step at its position gets.
#pragma once

#include <cstdint>

#include "kernels/philox.h"  // (TRT_SPEC_HD)

namespace trt_spec {

// The most logit_bias entries one request may hold.
constexpr int kMaxLogitBias = 300;

// One request's penalties (backend memory, one per KV slot).
struct PenaltyParams {
  int32_t active = 0;  // 0: none of the below applies (the defaults)
  float repetition = 1.0f;
  float frequency = 0.0f;
  float presence = 0.0f;
  int32_t n_bias = 0;
  int32_t bias_id[kMaxLogitBias] = {};
  float bias[kMaxLogitBias] = {};
};

// Whether params change any logit.
inline bool penalties_active(float repetition, float frequency, float presence, int n_bias) {
  return repetition != 1.0f || frequency != 0.0f || presence != 0.0f || n_bias > 0;
}

// Steps 1 and 2 for a logit of a token counted c times among the generated tokens (in_prompt:
// it occurs in the prompt).
TRT_SPEC_HD float penalized_logit(float l, int c, bool in_prompt, const PenaltyParams& p) {
  if (c > 0 || in_prompt) l = l > 0.0f ? l / p.repetition : l * p.repetition;
  if (c > 0) l -= static_cast<float>(c) * p.frequency + p.presence;
  return l;
}

}  // namespace trt_spec
