// cpu_sampling.cpp: token selection on the CPU backend: the sampling rule of kernels/sampling.h
// (one token, or the dense distribution it draws from) and Backend::sample.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "kernels/philox.h"

namespace trt_spec {

namespace {

// Tokens whose weight exp((l - max) / T) is below e^-kCut are only looked at (sorted) when the
// tokens above it do not reach top_p.
constexpr float kCut = 24.0f;

// The tokens the rule keeps, in draw order, with unnormalised weights (temperature > 0).
struct Kept {
  std::vector<int32_t> idx;
  std::vector<double> w;
  double total = 0.0;
};

int32_t argmax(const float* x, int n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// Fills k with the candidates of the rule over ids [0, n).
void kept_tokens(const float* logits, int n, const SamplingParams& p, Kept& k) {
  const float inv_t = 1.0f / p.temperature;
  const bool use_k = p.top_k > 0 && p.top_k < n;
  const bool use_p = p.top_p < 1.0f;
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const float mx = logits[argmax(logits, n)];
  auto weight = [&](int32_t i) { return std::exp(static_cast<double>((logits[i] - mx) * inv_t)); };
  k.idx.resize(n);
  std::iota(k.idx.begin(), k.idx.end(), 0);
  double need = 0.0;
  if (use_k) {
    std::partial_sort(k.idx.begin(), k.idx.begin() + p.top_k, k.idx.end(), before);
    k.idx.resize(p.top_k);
  } else if (use_p) {
    // The mass to reach is top_p of everything; the tokens above the cut, sorted, are a prefix
    // of the fully sorted order, so if they reach it the kept set is the same as a full sort's.
    double all = 0.0;
    for (int i = 0; i < n; ++i) all += weight(i);
    need = static_cast<double>(p.top_p) * all;
    const float cut = mx - kCut * p.temperature;
    auto end =
        std::partition(k.idx.begin(), k.idx.end(), [&](int32_t i) { return logits[i] >= cut; });
    double above = 0.0;
    for (auto it = k.idx.begin(); it != end; ++it) above += weight(*it);
    if (above >= need) {
      k.idx.resize(end - k.idx.begin());
      std::sort(k.idx.begin(), k.idx.end(), before);
    } else {
      std::iota(k.idx.begin(), k.idx.end(), 0);
      std::sort(k.idx.begin(), k.idx.end(), before);
    }
  }
  const int m = static_cast<int>(k.idx.size());
  k.w.resize(m);
  k.total = 0.0;
  for (int i = 0; i < m; ++i) {
    k.w[i] = weight(k.idx[i]);
    k.total += k.w[i];
  }
  if (use_p) {
    // Keep the shortest prefix, in decreasing order, whose mass reaches top_p (of the top_k
    // candidates' mass when top_k is on too).
    if (use_k) need = static_cast<double>(p.top_p) * k.total;
    double acc = 0.0;
    int keep = 0;
    while (keep < m) {
      acc += k.w[keep++];
      if (acc >= need) break;
    }
    k.idx.resize(keep);
    k.w.resize(keep);
    k.total = acc;
  }
}

}  // namespace

int32_t argmax_row(const float* x, int n) {
  return argmax(x, n);
}

int32_t sample_dense(const float* probs, int n, float u) {
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += probs[i];
  const double target = static_cast<double>(u) * total;
  double acc = 0.0;
  int32_t last_nonzero = 0;
  for (int i = 0; i < n; ++i) {
    if (probs[i] <= 0.0f) continue;
    acc += probs[i];
    last_nonzero = i;
    if (acc > target) return i;
  }
  return last_nonzero;
}

int32_t sample_row(const float* logits, int vocab, const SamplingParams& p, uint64_t step,
                   uint32_t lane) {
  if (sampling_is_greedy(p)) return argmax(logits, vocab);
  thread_local Kept k;
  kept_tokens(logits, vocab, p, k);
  const double u = static_cast<double>(philox_uniform(p.seed, step, lane, kSampleStream)) * k.total;
  double acc = 0.0;
  for (size_t i = 0; i < k.idx.size(); ++i) {
    acc += k.w[i];
    if (acc > u) return k.idx[i];
  }
  return k.idx.back();
}

void sampling_probs(const float* logits, int n_valid, int vocab, const SamplingParams& p,
                    float* probs) {
  std::fill(probs, probs + vocab, 0.0f);
  if (sampling_is_greedy(p)) {
    probs[argmax(logits, n_valid)] = 1.0f;
    return;
  }
  thread_local Kept k;
  kept_tokens(logits, n_valid, p, k);
  for (size_t i = 0; i < k.idx.size(); ++i) probs[k.idx[i]] = static_cast<float>(k.w[i] / k.total);
}

void CpuBackend::logprobs(const float* logits, int vocab, int n, const int32_t* rows,
                          const int32_t* tokens, const int32_t* slot, const SamplingState* states,
                          TokenLogprob* out) {
  thread_local Kept k;
  thread_local std::vector<int32_t> order;
  for (int i = 0; i < n; ++i) {
    SamplingParams p = states[slot[i]].params;
    if (rows[i] < 0 || p.logprobs < 0) continue;
    if (p.temperature == 0.0f) p.temperature = 1.0f;  // a greedy request: the model's own
    const float* l = logits + static_cast<int64_t>(rows[i]) * vocab;
    const bool sorted = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f;
    const float inv_t = 1.0f / p.temperature;
    const float mx = l[argmax(l, vocab)];
    double total = 0.0;
    if (sorted) {
      kept_tokens(l, vocab, p, k);  // the candidates in rule order (decreasing logit)
      total = k.total;
    } else {
      for (int x = 0; x < vocab; ++x) total += std::exp(static_cast<double>((l[x] - mx) * inv_t));
    }
    const double log_total = std::log(total);
    auto lp = [&](int32_t x) {
      return static_cast<float>(static_cast<double>((l[x] - mx) * inv_t) - log_total);
    };
    auto kept = [&](int32_t x) {
      return !sorted || std::find(k.idx.begin(), k.idx.end(), x) != k.idx.end();
    };
    TokenLogprob* o = out + static_cast<int64_t>(i) * kLogprobEntries;
    const int32_t t = tokens[i];
    o[0] = TokenLogprob{t, t >= 0 && t < vocab && kept(t) ? lp(t) : -INFINITY};
    const int top = std::min(p.logprobs, kMaxTopLogprobs);
    int written = 0;
    if (sorted) {
      for (; written < top && written < static_cast<int>(k.idx.size()); ++written)
        o[1 + written] = TokenLogprob{k.idx[written], lp(k.idx[written])};
    } else if (top > 0) {
      const int m = std::min(top, vocab);
      order.resize(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int32_t a, int32_t b) {
        return l[a] > l[b] || (l[a] == l[b] && a < b);
      });
      for (; written < m; ++written)
        o[1 + written] = TokenLogprob{order[written], lp(order[written])};
    }
    for (int r = written; r < kMaxTopLogprobs; ++r) o[1 + r] = TokenLogprob{-1, 0.0f};
  }
}

void CpuBackend::sample(const float* logits, int n, int vocab, const int32_t* slot,
                        SamplingState* states, int32_t* out_tokens) {
  for (int i = 0; i < n; ++i) {
    SamplingState& st = states[slot[i]];
    out_tokens[i] =
        sample_row(logits + static_cast<int64_t>(i) * vocab, vocab, st.params, st.step, 0);
    st.step += 1;
  }
}

}  // namespace trt_spec
