// logprobs.cuh: Backend::logprobs on the GPU: the log-probabilities of kernels/sampling.h (the
// distribution the rule draws from, temperature 1 for a greedy request) of chosen tokens and
// their top candidates, for entries that each name a logits row, a token and a sampling state.
//
//   logprobs_rows_kernel   phase 0: the row maximum (rows_max_pass), phase 1: the rule's kept
//                          set (rows_rule_pass: a key floor), several blocks per entry
//                                                                        grid (chunks, n) x 2
//   logprobs_out_kernel    the kept set's normaliser (float weights summed in double), the
//                          token's log-probability and the top `logprobs` candidates (rounds of a
//                          block maximum over the keys below the last one)        grid n
// Entries whose row is negative, or whose request asks for none (logprobs < 0), are skipped and
// their output is left as it is. The values equal the CPU backend's within float rounding (its
// weights are exp in double of the same float products).
#pragma once

#include <cmath>

#include "kernels/cuda/sampling.cuh"

namespace trt_spec::cuda {

// The params the log-probabilities use: the request's, at temperature 1 when greedy.
__device__ __forceinline__ SamplingParams logprob_params(SamplingParams p) {
  if (p.temperature == 0.0f) p.temperature = 1.0f;
  return p;
}

// Sum over the block in double (every thread gets it); block sizes a multiple of 32.
__device__ __forceinline__ double block_sum_f64(double v) {
  __shared__ double part[32];
  __shared__ double total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double s = lane < nw ? part[lane] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
    if (lane == 0) total = s;
  }
  __syncthreads();
  const double r = total;
  __syncthreads();
  return r;
}

// Largest key over the block (0: none).
__device__ __forceinline__ uint64_t block_max_u64(uint64_t v) {
  __shared__ unsigned long long part[32];
  __shared__ unsigned long long best;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long u = __shfl_xor_sync(kFullMask, static_cast<unsigned long long>(v), o);
    v = u > v ? u : v;
  }
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    unsigned long long s = lane < nw ? part[lane] : 0ull;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long u = __shfl_xor_sync(kFullMask, s, o);
      s = u > s ? u : s;
    }
    if (lane == 0) best = s;
  }
  __syncthreads();
  const uint64_t r = best;
  __syncthreads();
  return r;
}

__device__ __forceinline__ bool logprob_entry(const int32_t* rows, const int32_t* slot,
                                              const DevSamplingState* states, int i) {
  return rows[i] >= 0 && states[slot[i]].params.logprobs >= 0;
}

// Phases 0 and 1 over grid (chunks, n): RowStat {mx, sorted, floor} of entry i (scratch row i).
static __global__ void __launch_bounds__(kSampleThreads)
    logprobs_rows_kernel(int phase, const float* __restrict__ logits, int vocab, int chunk,
                         const int32_t* __restrict__ rows, const int32_t* __restrict__ slot,
                         const DevSamplingState* __restrict__ states, SampleScratch s) {
  const int i = blockIdx.y;
  if (!logprob_entry(rows, slot, states, i)) return;
  const SamplingParams p = logprob_params(states[slot[i]].params);
  const float* l = logits + static_cast<int64_t>(rows[i]) * vocab;
  if (phase == 0) {
    const ArgMax a = rows_max_pass(l, vocab, chunk, s, i);
    if (a.i >= 0 && threadIdx.x == 0) s.row(i).mx = a.v;
    return;
  }
  rows_rule_pass(l, vocab, chunk, p, s.row(i).mx, s, i);
}

// One block per entry: out [i, kLogprobEntries] = the token's, then the top candidates (id -1
// past the last).
static __global__ void __launch_bounds__(kSampleThreads)
    logprobs_out_kernel(const float* __restrict__ logits, int vocab,
                        const int32_t* __restrict__ rows, const int32_t* __restrict__ tokens,
                        const int32_t* __restrict__ slot,
                        const DevSamplingState* __restrict__ states, SampleScratch s,
                        TokenLogprob* __restrict__ out) {
  const int i = blockIdx.x;
  if (!logprob_entry(rows, slot, states, i)) return;
  const SamplingParams p = logprob_params(states[slot[i]].params);
  const float* l = logits + static_cast<int64_t>(rows[i]) * vocab;
  const RowStat rs = s.row(i);
  const float inv_t = 1.0f / p.temperature;
  const uint64_t floor = rs.sorted ? rs.floor : 0;
  double part = 0.0;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = l[j];
    if (sort_key(x, j) >= floor) part += static_cast<double>(expf((x - rs.mx) * inv_t));
  }
  const double log_total = log(block_sum_f64(part));
  auto lp = [&](int j) {
    return static_cast<float>(static_cast<double>((l[j] - rs.mx) * inv_t) - log_total);
  };
  TokenLogprob* o = out + static_cast<int64_t>(i) * kLogprobEntries;
  if (threadIdx.x == 0) {
    const int t = tokens[i];
    const bool kept = t >= 0 && t < vocab && sort_key(l[t], t) >= floor;
    o[0] = TokenLogprob{t, kept ? lp(t) : -INFINITY};
  }
  uint64_t below = ~uint64_t{0};  // keys strictly below the last top entry's
  int written = 0;
  for (; written < min(p.logprobs, kMaxTopLogprobs); ++written) {
    uint64_t best = 0;
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
      const uint64_t key = sort_key(l[j], j);
      if (key >= floor && key < below && key > best) best = key;
    }
    best = block_max_u64(best);  // (the same in every thread)
    if (best == 0) break;
    if (threadIdx.x == 0) o[1 + written] = TokenLogprob{key_index(best), lp(key_index(best))};
    below = best;
  }
  if (threadIdx.x == 0)
    for (int r = written; r < kMaxTopLogprobs; ++r) o[1 + r] = TokenLogprob{-1, 0.0f};
}

// Backend::logprobs: three launches; scratch as launch_sample's (sample_scratch_bytes(n), zero).
inline void launch_logprobs(cudaStream_t stream, const SampleGrid& g, const float* logits,
                            int vocab, int n, const int32_t* rows, const int32_t* tokens,
                            const int32_t* slot, const DevSamplingState* states, TokenLogprob* out,
                            SampleScratch scratch) {
  if (n <= 0) return;
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(n));
  for (int phase = 0; phase < 2; ++phase)
    TRT_SPEC_LAUNCH(logprobs_rows_kernel, grid, g.threads, stream, phase, logits, vocab, g.chunk,
                    rows, slot, states, scratch);
  TRT_SPEC_LAUNCH(logprobs_out_kernel, dim3(static_cast<unsigned>(n)), g.threads, stream, logits,
                  vocab, rows, tokens, slot, states, scratch, out);
}

}  // namespace trt_spec::cuda
