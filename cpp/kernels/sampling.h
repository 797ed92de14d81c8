// sampling.h: sampling parameters and the definition of how one token is drawn from logits.
//
// The rule, identical on every backend:
//   temperature == 0: the argmax (lowest index among equal maxima).
//   otherwise: z = logits / temperature; candidates are all tokens, or with top_k > 0 the k
//   largest z (ties to the lower index); p = softmax(z) over candidates; with top_p < 1 keep
//   the shortest prefix, in order of decreasing p, whose mass reaches top_p; renormalise; draw
//   u = philox_uniform(seed, step, lane, kSampleStream) and take the first candidate, in that order
//   (token-index order when neither top_k nor top_p is active), whose cumulative mass exceeds
//   u * total.
//
// Log-probabilities (SamplingParams::logprobs >= 0): those of the distribution the rule draws
// from, with temperature T' = temperature, or 1 when greedy: lp(x) = (l_x - max) / T' -
// log(sum over the candidates c of exp((l_c - max) / T')) for a candidate x (top_k / top_p
// applied with T'), -inf for any other token; the top entries are the candidates of largest
// logit (ties to the lower index), at most `logprobs` of them.
#pragma once

#include <cstdint>

namespace trt_spec {

// The Philox stream of the rule's draws (speculative decoding keeps its other streams apart).
constexpr uint32_t kSampleStream = 0;

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  int32_t logprobs = -1;     // -1: off; n >= 0: each token's log-probability and the top n
  uint64_t seed = 0;
};

// The most top log-probabilities per token a request may ask for (OpenAI's limit).
constexpr int kMaxTopLogprobs = 20;

// One token's log-probability (id -1: no entry).
struct TokenLogprob {
  int32_t id;
  float logprob;
};
// Entries per emitted token: the token itself, then its top candidates.
constexpr int kLogprobEntries = 1 + kMaxTopLogprobs;

inline bool sampling_is_greedy(const SamplingParams& p) {
  return p.temperature == 0.0f;
}

}  // namespace trt_spec
