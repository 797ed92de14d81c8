// cpu_sampling.cpp: token selection on the CPU backend: the sampling rule of kernels/sampling.h
// (one token, or the dense distribution it draws from) and the ops of the speculative iteration
// (kernels/speculative.h): row metadata, draft proposals, acceptance and rollback.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/philox.h"
#include "spec/speculative.h"
#include "backend/cpu/cpu_backend.h"

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

// Index-order inverse CDF of a dense distribution (sums to about 1) for the uniform u.
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

// Draw from normalize(max(0, p - q)); q is zero at ids >= nq. Falls back to p when the
// residual has no mass (p == q, where a rejection cannot happen but for rounding).
int32_t sample_residual(const float* p, int n, const float* q, int nq, float u) {
  thread_local std::vector<float> r;
  r.resize(n);
  bool any = false;
  for (int i = 0; i < n; ++i) {
    r[i] = std::max(0.0f, p[i] - (i < nq ? q[i] : 0.0f));
    any = any || r[i] > 0.0f;
  }
  return sample_dense(any ? r.data() : p, n, u);
}

}  // namespace

int32_t sample_row(const float* logits, int vocab, const SamplingParams& p, uint64_t step,
                   uint32_t lane) {
  if (sampling_is_greedy(p)) return argmax(logits, vocab);
  thread_local Kept k;
  kept_tokens(logits, vocab, p, k);
  const double u = static_cast<double>(philox_uniform(p.seed, step, lane, kStreamTarget)) * k.total;
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

void CpuBackend::sample(const float* logits, int n, int vocab, const int32_t* slot,
                        SamplingState* states, int32_t* out_tokens) {
  for (int i = 0; i < n; ++i) {
    SamplingState& st = states[slot[i]];
    out_tokens[i] =
        sample_row(logits + static_cast<int64_t>(i) * vocab, vocab, st.params, st.step, 0);
    st.step += 1;
  }
}

void CpuBackend::spec_rows(const SeqState* seqs, const int32_t* slots, int B, int first, int count,
                           int32_t* tokens, int32_t* pos, int32_t* row_slots) {
  for (int b = 0; b < B; ++b) {
    const SeqState& s = seqs[slots[b]];
    for (int r = 0; r < count; ++r) {
      const int i = first + r, row = b * count + r;
      tokens[row] = i < 0 ? s.prev : (i == 0 ? s.last : s.draft[i - 1]);
      pos[row] = s.n_past + i;
      row_slots[row] = slots[b];
    }
  }
}

void CpuBackend::spec_draft_sample(float* logits_q, int B, int vocab, int vocab_common, int j,
                                   SeqState* seqs, const int32_t* slots,
                                   const SamplingState* states) {
  pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      SeqState& s = seqs[slots[b]];
      const SamplingParams& p = states[slots[b]].params;
      float* row = logits_q + b * vocab;
      if (sampling_is_greedy(p)) {
        s.draft[j] = argmax(row, vocab_common);
        continue;
      }
      thread_local std::vector<float> q;
      q.resize(vocab);
      sampling_probs(row, vocab_common, vocab, p, q.data());
      std::copy(q.begin(), q.end(), row);
      s.draft[j] = sample_dense(row, vocab, spec_uniform(p.seed, s.n_gen + j, kStreamDraft));
    }
  });
}

void CpuBackend::spec_accept(const float* logits, const float* q, int B, int k, int vocab,
                             int vocab_draft, SeqState* seqs, const int32_t* slots,
                             const SamplingState* states) {
  // 1. Per verify row: the target's argmax (greedy sequences) or dense p_j (j < k, sampling).
  const int rows = B * (k + 1);
  std::vector<int32_t> best(rows, 0);  // (a thread_local would be another per worker thread)
  if (p_scratch_.size() < static_cast<size_t>(B) * k * vocab)
    p_scratch_.resize(static_cast<size_t>(B) * k * vocab);
  float* P = p_scratch_.data();  // [B, k, vocab]
  pool_.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int b = static_cast<int>(r / (k + 1)), j = static_cast<int>(r % (k + 1));
      const SamplingParams& p = states[slots[b]].params;
      const float* row = logits + r * vocab;
      if (sampling_is_greedy(p))
        best[r] = argmax(row, vocab);
      else if (j < k)
        sampling_probs(row, vocab, vocab, p, P + (static_cast<size_t>(b) * k + j) * vocab);
    }
  });
  // 2. Walk each sequence's drafts: keep while accepted, then the correction or the bonus.
  for (int b = 0; b < B; ++b) {
    SeqState& s = seqs[slots[b]];
    const SamplingParams& p = states[slots[b]].params;
    const bool greedy = sampling_is_greedy(p);
    int j = 0;
    for (; j < k; ++j) {
      const int32_t d = s.draft[j];
      if (greedy) {
        if (d != best[b * (k + 1) + j]) break;
      } else {
        const float* pj = P + (static_cast<size_t>(b) * k + j) * vocab;
        const float* qj = q + (static_cast<size_t>(j) * B + b) * vocab_draft;
        if (!spec_accept_draw(d < vocab ? pj[d] : 0.0f, qj[d],
                              spec_uniform(p.seed, s.n_gen + j, kStreamAccept)))
          break;
      }
      s.out[j] = d;
    }
    const float* last_row = logits + (static_cast<int64_t>(b) * (k + 1) + j) * vocab;
    if (greedy) {
      s.out[j] = best[b * (k + 1) + j];
    } else if (j < k) {  // rejected: draw from the residual
      const float* pj = P + (static_cast<size_t>(b) * k + j) * vocab;
      const float* qj = q + (static_cast<size_t>(j) * B + b) * vocab_draft;
      s.out[j] = sample_residual(pj, vocab, qj, std::min(vocab, vocab_draft),
                                 spec_uniform(p.seed, s.n_gen + j, kStreamResidual));
    } else {  // all kept: the bonus token from p_k, as a target-only step would draw it
      s.out[j] = sample_row(last_row, vocab, p, static_cast<uint64_t>(s.n_gen + j), 0);
    }
    spec_commit(s, j);
  }
}

}  // namespace trt_spec
