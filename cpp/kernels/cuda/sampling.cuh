// sampling.cuh: the sampling rule of kernels/sampling.h on the GPU and the token-selection ops
// of the speculative iteration (kernels/speculative.h), one thread block per row / sequence.
//
// Mirrors cpu_sampling.cpp function by function:
//   block_rule           kept_tokens: the candidates (a key threshold, see select.cuh) and mass
//   block_sample_row     sample_row: argmax, or a draw from the kept tokens in rule order
//   block_sampling_probs sampling_probs: the dense distribution the rule draws from
//   block_sample_dense   sample_dense
// and the kernel of Backend::sample. The random numbers are the same Philox draws (same seed,
// counter and stream) as on the CPU. The speculative iteration's kernels (spec/spec_kernels.cuh)
// build on these.
#pragma once

#include "kernels/cuda/select.cuh"
#include "kernels/philox.h"
#include "kernels/sampling.h"

namespace trt_spec::cuda {

// Device copy of backend.h's SamplingState (same layout: the backend passes that array).
struct DevSamplingState {
  SamplingParams params;
  uint64_t step;
};

__device__ __forceinline__ bool is_greedy(const SamplingParams& p) {
  return p.temperature == 0.0f;
}

// The kept tokens of the rule over ids [0, n) (temperature > 0): sorted ? {key >= floor} (in
// decreasing key order) : every id (in index order); total: their mass.
struct Rule {
  RowWeights w;
  bool sorted;
  uint64_t floor;
  uint64_t total;
};

__device__ inline Rule block_rule(const float* l, int n, const SamplingParams& p, float mx) {
  Rule r;
  r.w = RowWeights{l, n, mx, 1.0f / p.temperature};
  const bool use_k = p.top_k > 0 && p.top_k < n;
  const bool use_p = p.top_p < 1.0f;
  r.sorted = use_k || use_p;
  r.floor = 0;
  uint64_t key = 0;
  if (use_k && block_key_search(r.w, 0, Reach::kCountAtLeast, static_cast<uint64_t>(p.top_k), &key))
    r.floor = key;  // the top_k-th token in rule order
  if (use_p) {
    // The shortest prefix whose mass reaches top_p of the candidates' mass (all kept if rounding
    // keeps it from ever reaching it, as on the CPU).
    const uint64_t cand = block_mass(r.w, r.floor);
    const double need_d = ceil(static_cast<double>(p.top_p) * static_cast<double>(cand));
    const uint64_t need = static_cast<uint64_t>(need_d);
    if (block_key_search(r.w, r.floor, Reach::kMassAtLeast, need, &key)) r.floor = key;
  }
  r.total = block_mass(r.w, r.floor);
  return r;
}

// sample_row: one token from logits [n] for (params, step, lane).
__device__ inline int block_sample_row(const float* l, int n, const SamplingParams& p,
                                       uint64_t step, uint32_t lane) {
  const ArgMax am = block_argmax_row(l, n);
  if (is_greedy(p)) return am.i;
  const Rule r = block_rule(l, n, p, am.v);
  const uint32_t r24 = uniform_bits(philox_uniform(p.seed, step, lane, kSampleStream));
  if (!r.sorted) {
    const RowWeights w = r.w;
    const IndexDraw d = block_index_draw(n, [&](int i) { return w.weight(i); }, r24);
    return d.index >= 0 ? d.index : n - 1;
  }
  uint64_t key = 0;
  if (block_key_search(r.w, r.floor, Reach::kMassAbove, scale_by_uniform(r24, r.total), &key))
    return key_index(key);
  // Unreachable with exact fixed-point sums (the target is below the kept mass): the last kept.
  return r.floor != 0 ? key_index(r.floor) : n - 1;
}

// sampling_probs: probs [vocab] = the rule's dense distribution over ids [0, n_valid), zero
// beyond; one-hot at the argmax when greedy. probs may be l itself (each thread reads its
// elements before writing them, after every block-wide read of the row is done).
__device__ inline void block_sampling_probs(const float* l, int n_valid, int vocab,
                                            const SamplingParams& p, float* probs) {
  const ArgMax am = block_argmax_row(l, n_valid);
  if (is_greedy(p)) {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) probs[i] = i == am.i ? 1.0f : 0.0f;
    __syncthreads();
    return;
  }
  const Rule r = block_rule(l, n_valid, p, am.v);
  const double inv_total = 1.0 / static_cast<double>(r.total);
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = 0.0f;
    if (i < n_valid && (!r.sorted || r.w.key(i) >= r.floor))
      v = static_cast<float>(static_cast<double>(r.w.weight(i)) * inv_total);
    probs[i] = v;
  }
  __syncthreads();
}

// sample_dense: index-order inverse CDF of probs [n] for the uniform u.
__device__ inline int block_sample_dense(const float* probs, int n, float u) {
  const IndexDraw d =
      block_index_draw(n, [&](int i) { return mass_fx(probs[i]); }, uniform_bits(u));
  if (d.index >= 0) return d.index;
  return d.last_nonzero >= 0 ? d.last_nonzero : 0;
}

// ---- Backend ops --------------------------------------------------------------------------

// Backend::sample: rows in order (a slot listed twice advances its step twice).  grid 1.
// (static: this header is shared by several translation units.)
static __global__ void __launch_bounds__(kSampleThreads)
    sample_kernel(const float* __restrict__ logits, int n, int vocab,
                  const int32_t* __restrict__ slot, DevSamplingState* states,
                  int32_t* __restrict__ out_tokens) {
  for (int i = 0; i < n; ++i) {
    DevSamplingState* st = states + slot[i];
    const SamplingParams p = st->params;
    const uint64_t step = st->step;
    const int tok = block_sample_row(logits + static_cast<int64_t>(i) * vocab, vocab, p, step, 0);
    if (threadIdx.x == 0) {
      out_tokens[i] = tok;
      st->step = step + 1;
    }
    __syncthreads();
  }
}

}  // namespace trt_spec::cuda
