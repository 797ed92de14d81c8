// sampling.cuh: the sampling rule of kernels/sampling.h on the GPU and the token-selection ops
// of the speculative iteration (spec/spec_ops.h): one block per row, or several
// (sample_rows.cuh).
//
// Mirrors cpu_sampling.cpp function by function, over rows split into chunks, several blocks per
// row (sample_rows.cuh):
//   binned_rule          kept_tokens with top-k / top-p: the candidates (a key threshold, see
//                        select.cuh) and their mass, from the row's rule-bin histogram
//   binned_draw          sample_row's draw from those kept tokens in rule order
//   block_sample_dense   sample_dense (one block)
//   rows_draw_pass       sample_row, given the row maximum (pass 1: rows_max_pass)
//   rows_rule_pass       the kept set and mass of sampling_probs
//   rows_probs_pass      sampling_probs' values, a chunk per block
//   rows_dense_draw      sample_dense over those probs
// and the kernel of Backend::sample with its launch function (launch_sample). The random numbers
// are the same Philox draws (same seed, counter and stream) as on the CPU. The speculative
// iteration's kernels (spec/spec_kernels.cuh) build on these.
#pragma once

#include "kernels/cuda/sample_rows.cuh"
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

// The kept tokens of a top-k / top-p rule over ids [0, n) (temperature > 0): {key >= floor}
// (in decreasing key order), total their mass; found from the row's rule-bin histogram h
// (sample_rows.cuh rows_bin_pass) with key searches inside single bins. floor_bin: the bin of
// the floor (kRuleBins: no floor, every bin whole); floor_part: the mass of that bin's kept
// part. kept_tokens on the CPU, exactly: the thresholds are those of a search over the row.
struct Rule {
  RowWeights w;
  uint64_t floor;
  uint64_t total;
  int floor_bin;
  uint64_t floor_part;
};

// The first bin b <= last (bins before `last` whole, `last` itself weighing last_part) with
// candidates at which the running count (count) or mass reaches x (">= x", or "> x" with
// above): {b, sum before b} in every thread; {-1, .} when none does.
struct BinHit {
  int b;
  uint64_t before;
};
__device__ inline BinHit find_bin(const BinHist& h, int last, uint64_t last_part, bool count,
                                  bool above, uint64_t x) {
  __shared__ BinHit hit_sh;
  if (threadIdx.x == 0) {
    BinHit hit{-1, 0};
    uint64_t acc = 0;
    for (int b = 0; b <= min(last, kRuleBins - 1); ++b) {
      if (h.cnt[b] == 0) continue;
      const uint64_t v = count ? h.cnt[b] : (b < last ? h.mass[b] : last_part);
      if (above ? acc + v > x : acc + v >= x) {
        hit = BinHit{b, acc};
        break;
      }
      acc += v;
    }
    hit_sh = hit;
  }
  __syncthreads();
  const BinHit r = hit_sh;
  __syncthreads();
  return r;
}

// Mass of bins [0, b) (thread 0's value is the one used).
__device__ inline uint64_t mass_before(const BinHist& h, int b) {
  uint64_t m = 0;
  for (int x = 0; x < min(b, kRuleBins); ++x) m += h.mass[x];
  return m;
}

__device__ inline Rule binned_rule(const float* l, int n, const SamplingParams& p, float mx,
                                   const BinHist& h) {
  Rule r{RowWeights{l, n, mx, 1.0f / p.temperature}, 0, 0, kRuleBins, 0};
  __shared__ unsigned long long total_sh;
  uint64_t key = 0;
  if (p.top_k > 0 && p.top_k < n) {
    const BinHit k = find_bin(h, kRuleBins, 0, true, false, static_cast<uint64_t>(p.top_k));
    if (k.b >= 0 &&
        block_key_search(r.w, 0, Reach::kCountAtLeast, static_cast<uint64_t>(p.top_k) - k.before,
                         &key, k.b, h.cnt[k.b])) {
      r.floor = key;  // the top_k-th token in rule order
      r.floor_bin = k.b;
      r.floor_part = block_bin_mass(r.w, k.b, key);
    }
  }
  if (p.top_p < 1.0f) {
    // The shortest prefix whose mass reaches top_p of the candidates' mass (all kept if rounding
    // keeps it from ever reaching it, as on the CPU).
    if (threadIdx.x == 0) total_sh = mass_before(h, r.floor_bin) + r.floor_part;
    __syncthreads();
    const uint64_t cand = total_sh;
    __syncthreads();
    const double need_d = ceil(static_cast<double>(p.top_p) * static_cast<double>(cand));
    const uint64_t need = static_cast<uint64_t>(need_d);
    const BinHit b = find_bin(h, r.floor_bin, r.floor_part, false, false, need);
    if (b.b >= 0 && block_key_search(r.w, b.b == r.floor_bin ? r.floor : 0, Reach::kMassAtLeast,
                                     need - b.before, &key, b.b, h.cnt[b.b])) {
      r.floor = key;
      r.floor_bin = b.b;
      r.floor_part = block_bin_mass(r.w, b.b, key);
    }
  }
  if (threadIdx.x == 0) total_sh = mass_before(h, r.floor_bin) + r.floor_part;
  __syncthreads();
  r.total = total_sh;
  __syncthreads();
  return r;
}

// The draw of a binned rule for the uniform r24 / 2^24: the bin the target falls in, then the
// key search inside it.
__device__ inline int binned_draw(const Rule& r, const BinHist& h, int n, uint32_t r24) {
  const uint64_t target = scale_by_uniform(r24, r.total);
  const BinHit b = find_bin(h, r.floor_bin, r.floor_part, false, true, target);
  uint64_t key = 0;
  if (b.b >= 0 && block_key_search(r.w, b.b == r.floor_bin ? r.floor : 0, Reach::kMassAbove,
                                   target - b.before, &key, b.b, h.cnt[b.b]))
    return key_index(key);
  // Unreachable with exact fixed-point sums (the target is below the kept mass): the last kept.
  return r.floor != 0 ? key_index(r.floor) : n - 1;
}

// sample_dense: index-order inverse CDF of probs [n] for the uniform u.
__device__ inline int block_sample_dense(const float* probs, int n, float u) {
  const IndexDraw d =
      block_index_draw(n, [&](int i) { return mass_fx(probs[i]); }, uniform_bits(u));
  if (d.index >= 0) return d.index;
  return d.last_nonzero >= 0 ? d.last_nonzero : 0;
}

// ---- multi-block rows (sample_rows.cuh) ---------------------------------------------------

__device__ __forceinline__ bool rule_sorted(const SamplingParams& p, int n) {
  return (p.top_k > 0 && p.top_k < n) || p.top_p < 1.0f;
}

// Pass 2, a draw of the rule (sample_row) for a non-greedy row of n ids whose maximum mx pass 1
// found. Index order: each block's chunk mass; the last block picks the chunk the target falls
// in (partials in chunk order) and walks it. Top-k / top-p: each block's rule bins; the last
// block searches the bins the thresholds and the target fall in (binned_rule, binned_draw).
// Returns the token in the block that finishes the row, -1 in the others.
__device__ inline int rows_draw_pass(const float* l, int n, int chunk, const SamplingParams& p,
                                     float mx, uint32_t r24, SampleScratch s, int row) {
  const int c = blockIdx.x, chunks = gridDim.x;
  const float inv_t = 1.0f / p.temperature;
  if (rule_sorted(p, n)) {
    BinHist h;
    if (!rows_bin_pass(l, n, chunk, mx, inv_t, s, row, &h)) return -1;
    return binned_draw(binned_rule(l, n, p, mx, h), h, n, r24);
  }
  const int begin = c * chunk, end = min(n, begin + chunk);
  const uint64_t m = block_mass_range(l, begin, end, mx, inv_t);
  ChunkPartial* part = s.part(row);
  if (threadIdx.x == 0) part[c].mass = m;
  if (!block_arrive_last(s.count(row), chunks)) return -1;
  __shared__ unsigned long long target_sh;
  if (threadIdx.x == 0) target_sh = scale_by_uniform(r24, partial_total(part, chunks));
  __syncthreads();
  const uint64_t target = target_sh;
  const ChunkHit h = find_chunk(part, chunks, target);  // (synchronises)
  if (h.c < 0) return n - 1;
  const int b = h.c * chunk, e = min(n, b + chunk);
  const int i =
      block_first_above(b, e, [&](int x) { return weight_of(l[x], mx, inv_t); }, target - h.before);
  return i >= 0 ? i : n - 1;
}

// Pass 2 of a dense distribution: RowStat {sorted, floor, total} of a non-greedy row (written
// by the block that finishes the row: the last to arrive).
__device__ inline void rows_rule_pass(const float* l, int n, int chunk, const SamplingParams& p,
                                      float mx, SampleScratch s, int row) {
  const int c = blockIdx.x, chunks = gridDim.x;
  RowStat* rs = &s.row(row);
  if (rule_sorted(p, n)) {
    BinHist h;
    if (!rows_bin_pass(l, n, chunk, mx, 1.0f / p.temperature, s, row, &h)) return;
    const Rule r = binned_rule(l, n, p, mx, h);
    if (threadIdx.x == 0) {
      rs->sorted = 1;
      rs->floor = r.floor;
      rs->total = r.total;
    }
    return;
  }
  const int begin = c * chunk, end = min(n, begin + chunk);
  const uint64_t m = block_mass_range(l, begin, end, mx, 1.0f / p.temperature);
  ChunkPartial* part = s.part(row);
  if (threadIdx.x == 0) part[c].mass = m;
  if (!block_arrive_last(s.count(row), chunks)) return;
  if (threadIdx.x == 0) {
    rs->sorted = 0;
    rs->floor = 0;
    rs->total = partial_total(part, chunks);
  }
}

// Pass 3: probs of this block's chunk of [0, vocab) = the rule's dense distribution
// (sampling_probs; zero at ids >= n_valid). probs may be l (each element is read, then written,
// by the same thread). Returns the chunk's sum of mass_fx(probs) and its last nonzero id.
struct ProbsSum {
  uint64_t mass;
  int last_nz;
};
__device__ inline ProbsSum rows_probs_pass(const float* l, int n_valid, int vocab, int chunk,
                                           const SamplingParams& p, const RowStat& rs,
                                           float* probs) {
  __shared__ int last_sh;
  if (threadIdx.x == 0) last_sh = -1;
  __syncthreads();
  const int begin = blockIdx.x * chunk, end = min(vocab, begin + chunk);
  const double inv_total = 1.0 / static_cast<double>(rs.total);
  const float inv_t = 1.0f / p.temperature;
  uint64_t m = 0;
  int last = -1;
  for_range(l, begin, end, [&](int i, float x) {
    float v = 0.0f;
    if (i < n_valid && (!rs.sorted || sort_key(x, i) >= rs.floor))
      v = static_cast<float>(static_cast<double>(weight_of(x, rs.mx, inv_t)) * inv_total);
    probs[i] = v;
    const uint64_t fx = mass_fx(v);
    m += fx;
    if (fx > 0 && i > last) last = i;
  });
  if (last >= 0) atomicMax(&last_sh, last);
  const uint64_t total = block_sum_u64(m);  // (synchronises)
  return ProbsSum{total, last_sh};
}

// After pass 3: the index-order draw over the row's probs [vocab] for the uniform u
// (sample_dense), from the chunks' ProbsSum. The token in the last block, -1 in the others.
__device__ inline int rows_dense_draw(const float* probs, int vocab, int chunk, ProbsSum ps,
                                      float u, SampleScratch s, int row) {
  const int c = blockIdx.x, chunks = gridDim.x;
  ChunkPartial* part = s.part(row);
  if (threadIdx.x == 0) {
    part[c].mass = ps.mass;
    part[c].last_nz = ps.last_nz;
  }
  if (!block_arrive_last(s.count(row), chunks)) return -1;
  __shared__ unsigned long long target_sh;
  __shared__ int last_sh;
  if (threadIdx.x == 0) {
    int last = -1;
    for (int x = 0; x < chunks; ++x) last = max(last, load_cg(&part[x].last_nz));
    last_sh = last;
    target_sh = scale_by_uniform(uniform_bits(u), partial_total(part, chunks));
  }
  __syncthreads();
  const uint64_t target = target_sh;
  const int last = last_sh;
  const ChunkHit h = find_chunk(part, chunks, target);  // (synchronises)
  int i = -1;
  if (h.c >= 0) {
    const int b = h.c * chunk, e = min(vocab, b + chunk);
    i = block_first_above(
        b, e, [&](int x) { return mass_fx(load_cg(probs + x)); }, target - h.before);
  }
  return i >= 0 ? i : (last >= 0 ? last : 0);
}

// ---- Backend ops --------------------------------------------------------------------------

// Backend::sample over grid (chunks, n), two launches: phase 0 the maxima (greedy rows: the
// token), phase 1 the draws and the steps. Row i draws at its slot's step plus the number of
// earlier rows of that slot (a slot listed twice advances its step twice, as rows in order do).
// (static: this header is shared by several translation units.)
static __global__ void __launch_bounds__(kSampleThreads)
    sample_rows_kernel(int phase, const float* __restrict__ logits, int n, int vocab, int chunk,
                       const int32_t* __restrict__ slot, DevSamplingState* states,
                       int32_t* __restrict__ out_tokens, SampleScratch s) {
  const int i = blockIdx.y;
  DevSamplingState* st = states + slot[i];
  const SamplingParams p = st->params;
  const float* l = logits + static_cast<int64_t>(i) * vocab;
  if (phase == 0) {
    const ArgMax a = rows_max_pass(l, vocab, chunk, s, i);
    if (a.i < 0 || threadIdx.x != 0) return;
    int earlier = 0;
    for (int j = 0; j < i; ++j) earlier += slot[j] == slot[i] ? 1 : 0;
    s.row(i).mx = a.v;
    s.row(i).arg = a.i;
    s.row(i).step = st->step + static_cast<uint64_t>(earlier);
    if (is_greedy(p)) out_tokens[i] = a.i;
    return;
  }
  const float mx = s.row(i).mx;
  const uint64_t step = s.row(i).step;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    bool last = true;
    for (int j = i + 1; j < n; ++j) last = last && slot[j] != slot[i];
    if (last) st->step = step + 1;  // nothing reads st->step in this phase
  }
  if (is_greedy(p)) return;
  const uint32_t r24 = uniform_bits(philox_uniform(p.seed, step, 0, kSampleStream));
  const int tok = rows_draw_pass(l, vocab, chunk, p, mx, r24, s, i);
  if (tok >= 0 && threadIdx.x == 0) out_tokens[i] = tok;
}

// ---- host launch (TRT_SPEC_LAUNCH: CudaBackend and the emulated tests run this function) ----

// Backend::sample: tokens out_tokens [n] from logits [n, vocab] and states [slot[i]] (steps
// advanced). Two launches over grid (g.chunks, n) of g.threads threads (sample_grid(vocab, SMs));
// scratch: sample_scratch(p) of at least sample_scratch_bytes(n) bytes whose counters and
// histograms are zero (and are left zero).
inline void launch_sample(cudaStream_t stream, const SampleGrid& g, const float* logits, int n,
                          int vocab, const int32_t* slot, DevSamplingState* states,
                          int32_t* out_tokens, SampleScratch scratch) {
  if (n <= 0) return;
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(n));
  for (int phase = 0; phase < 2; ++phase)
    TRT_SPEC_LAUNCH(sample_rows_kernel, grid, g.threads, stream, phase, logits, n, vocab, g.chunk,
                    slot, states, out_tokens, scratch);
}

}  // namespace trt_spec::cuda
