// sample_rows.cuh: the sampling rule (kernels/sampling.h) over rows split into vocabulary chunks,
// several thread blocks per row: the building blocks of Backend::sample (sampling.cuh) and of the
// speculative iteration's row kernels (spec/spec_kernels.cuh).
//
// A row's vocabulary [0, vocab) is cut into `chunks` chunks of `chunk` elements (SampleGrid,
// from the vocabulary size and the SM count only, never from the data); grid (chunks, rows).
// Each block reduces its chunk (coalesced, float4 loads where aligned) to a ChunkPartial; the
// last block of the row to arrive (an atomic counter per row, reset by that block, so graphs
// replay) combines the partials in chunk order and finishes the row. No float atomics: maxima
// are exact, masses are fixed point (select.cuh), so the result never depends on the split.
//
// The rule takes up to three launches, each a pass over the row:
//   1. max:   the argmax (greedy: the token) and the row maximum           RowStat.mx / arg
//   2. rule:  the kept mass (index order: the sum over chunks), or, with top-k / top-p, the key
//             threshold and mass: every block counts and weighs its chunk's rule bins
//             (select.cuh) into the row's histogram, and the last block finds the bin each
//             threshold falls in from it and searches inside that bin only (rows_bin_pass);
//             or a draw: the chunk (or bin) the target falls in, then one block walks inside it
//                                                                          RowStat.floor / total
//   3. probs: the dense distribution (and its index-order draw: sample_dense)
#pragma once

#include <algorithm>
#include <cstddef>

#include "kernels/cuda/select.cuh"

namespace trt_spec::cuda {

constexpr int kSampleChunkMin = 4096;  // elements per chunk at least (the backend's choice)
constexpr int kSampleMaxChunks = 64;   // chunks per row at most

// The launch shape of the multi-block rows.
struct SampleGrid {
  int threads;  // per block: a multiple of 32, at most 1024
  int chunks;   // blocks per row
  int chunk;    // elements per chunk, a multiple of 4 (float4 loads)
};

// chunks = clamp(ceil(vocab / min_chunk), 1, min(kSampleMaxChunks, sm_count)), then the chunk
// length rounded up to a multiple of 4 and chunks recounted so that none is empty.
// (Host code; min_chunk below kSampleChunkMin lets the emulated tests split small rows.)
inline SampleGrid sample_grid(int vocab, int sm_count, int threads = kSampleThreads,
                              int min_chunk = kSampleChunkMin) {
  vocab = std::max(vocab, 1);
  min_chunk = std::max(min_chunk, 4);
  const int cap = std::max(1, std::min(kSampleMaxChunks, sm_count));
  const int want = std::max(1, std::min(cap, (vocab + min_chunk - 1) / min_chunk));
  const int chunk = ((vocab + want - 1) / want + 3) / 4 * 4;
  return SampleGrid{threads, (vocab + chunk - 1) / chunk, chunk};
}

// Per row, what the passes hand on.
struct RowStat {
  float mx;        // the row maximum (over the valid ids)
  int32_t arg;     // its lowest index
  int32_t sorted;  // top-k / top-p active
  int32_t pad;
  unsigned long long step;   // the draw's counter (Backend::sample: the slot's step + earlier rows)
  unsigned long long floor;  // kept keys >= floor (sorted)
  unsigned long long total;  // the kept mass
};

// Per (row, chunk): one block's reduction.
struct ChunkPartial {
  float v;          // chunk max
  int32_t i;        // its index (-1: empty chunk)
  int32_t last_nz;  // the last index with a nonzero mass (probs pass)
  int32_t pad;
  unsigned long long mass;  // fixed-point mass of the chunk
};

// One row's scratch, of fixed size: row r's record lies at the same place whatever the rows
// and chunks of a launch, so one buffer serves launches of any shape (Backend::sample's calls
// of any n; the speculative ops' draft rows B and verify rows B (k + 1), over the draft's and
// the target's vocabularies) and its counters and histograms stay zero between launches. (Arrays
// sized by each launch's row count would put one launch's row stats and partials where another
// launch's histograms lie: wrong top-k / top-p draws.)
struct RowScratch {
  unsigned count;  // blocks of the row that have arrived (zero between launches)
  unsigned pad[3];
  RowStat stat;
  unsigned bin_cnt[kRuleBins];             // rule-bin histogram (zero between launches)
  unsigned long long bin_mass[kRuleBins];  // (zero between launches)
  ChunkPartial part[kSampleMaxChunks];     // one per chunk of the row
};

// Scratch of the multi-block rows: one RowScratch per row.
struct SampleScratch {
  RowScratch* rows;
  __host__ __device__ __forceinline__ unsigned* count(int r) const { return &rows[r].count; }
  __host__ __device__ __forceinline__ RowStat& row(int r) const { return rows[r].stat; }
  __host__ __device__ __forceinline__ unsigned* bin_cnt(int r) const { return rows[r].bin_cnt; }
  __host__ __device__ __forceinline__ unsigned long long* bin_mass(int r) const {
    return rows[r].bin_mass;
  }
  __host__ __device__ __forceinline__ ChunkPartial* part(int r) const { return rows[r].part; }
};

// Bytes of scratch for `rows` rows; it must be zero when allocated (the kernels leave the
// counters and histograms zero).
inline size_t sample_scratch_bytes(int rows) {
  return static_cast<size_t>(std::max(rows, 1)) * sizeof(RowScratch);
}

// The scratch at base (sample_scratch_bytes of the most rows any launch on it has).
inline SampleScratch sample_scratch(void* base) {
  return SampleScratch{static_cast<RowScratch*>(base)};
}

// ---- device side --------------------------------------------------------------------------

// A load that bypasses L1: data other blocks of this launch wrote (after a fence).
template <class T>
__device__ __forceinline__ T load_cg(const T* p) {
#if defined(TRT_SPEC_CUDA_EMU)
  return *p;
#else
  return __ldcg(p);
#endif
}

// f(i, l[i]) for i in [begin, end): consecutive threads on consecutive elements, float4 loads
// when l + begin is 16-byte aligned.
template <class F>
__device__ __forceinline__ void for_range(const float* l, int begin, int end, F f) {
  int i0 = begin;
  if (end > begin && (reinterpret_cast<uintptr_t>(l + begin) & 15u) == 0) {
    const int n4 = (end - begin) / 4;
    const float4* l4 = reinterpret_cast<const float4*>(l + begin);
    for (int j = threadIdx.x; j < n4; j += blockDim.x) {
      const float4 v = l4[j];
      const int i = begin + 4 * j;
      f(i, v.x);
      f(i + 1, v.y);
      f(i + 2, v.z);
      f(i + 3, v.w);
    }
    i0 = begin + 4 * n4;
  }
  for (int i = i0 + static_cast<int>(threadIdx.x); i < end; i += blockDim.x) f(i, l[i]);
}

// True in every thread of the block that arrives last of the `chunks` blocks of its row; that
// block resets the counter. Writes of this block before the call are visible to the last one.
__device__ inline bool block_arrive_last(unsigned* count, int chunks) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(count, 1u);
    last = prev == static_cast<unsigned>(chunks - 1) ? 1 : 0;
    if (last) *count = 0;  // every block of the row has arrived: ready for the next launch
  }
  __syncthreads();
  const bool r = last != 0;
  if (r) __threadfence();
  return r;
}

// argmax over l [begin, end) (lowest index among equal maxima; i = -1 when empty).
__device__ inline ArgMax block_argmax_range(const float* l, int begin, int end) {
  ArgMax a{0.0f, -1};
  for_range(l, begin, end, [&](int i, float x) { a = argmax_pick(a, ArgMax{x, i}); });
  return block_argmax(a);
}

// The partials of one row combined in chunk order (thread 0).
__device__ inline ArgMax combine_argmax(const ChunkPartial* part, int chunks) {
  ArgMax a{0.0f, -1};
  for (int c = 0; c < chunks; ++c)
    a = argmax_pick(a, ArgMax{load_cg(&part[c].v), load_cg(&part[c].i)});
  return a;
}

// Pass 1 for row `row` of the grid: chunk argmax; the last block gets the row's argmax in every
// thread (index 0 when the row has no valid ids), the others {., -2}.
__device__ inline ArgMax rows_max_pass(const float* l, int n_valid, int chunk, SampleScratch s,
                                       int row) {
  const int c = blockIdx.x, chunks = gridDim.x;
  const int begin = c * chunk, end = min(n_valid, begin + chunk);
  const ArgMax a = block_argmax_range(l, begin, end);
  ChunkPartial* part = s.part(row);
  if (threadIdx.x == 0) {
    part[c].v = a.v;
    part[c].i = a.i;
  }
  __shared__ ArgMax best;
  if (!block_arrive_last(s.count(row), chunks)) return ArgMax{0.0f, -2};
  if (threadIdx.x == 0) {
    ArgMax m = combine_argmax(part, chunks);
    if (m.i < 0) m = ArgMax{n_valid > 0 ? l[0] : 0.0f, 0};
    best = m;
  }
  __syncthreads();
  return best;
}

// The fixed-point weight of logit x under (mx, inv_t): RowWeights::weight from a loaded value.
__device__ __forceinline__ uint64_t weight_of(float x, float mx, float inv_t) {
  return mass_fx(expf((x - mx) * inv_t));
}

// Sum of the weights over [begin, end).
__device__ inline uint64_t block_mass_range(const float* l, int begin, int end, float mx,
                                            float inv_t) {
  uint64_t m = 0;
  for_range(l, begin, end, [&](int, float x) { m += weight_of(x, mx, inv_t); });
  return block_sum_u64(m);
}

// The chunk the fixed-point target falls in, the partials' masses in chunk order: every thread
// gets {chunk, mass before it} ({-1, total} when the target is at or beyond the total).
struct ChunkHit {
  int c;
  uint64_t before;
};
__device__ inline ChunkHit find_chunk(const ChunkPartial* part, int chunks, uint64_t target) {
  __shared__ ChunkHit hit;
  if (threadIdx.x == 0) {
    ChunkHit h{-1, 0};
    uint64_t acc = 0;
    for (int c = 0; c < chunks && h.c < 0; ++c) {
      const uint64_t m = load_cg(&part[c].mass);
      if (acc + m > target) h = ChunkHit{c, acc};
      acc += m;
    }
    if (h.c < 0) h.before = acc;
    hit = h;
  }
  __syncthreads();
  const ChunkHit r = hit;
  __syncthreads();
  return r;
}

// A row's rule-bin histogram (shared memory of the block that finishes the row).
struct BinHist {
  const unsigned* cnt;             // [kRuleBins] candidates per bin
  const unsigned long long* mass;  // [kRuleBins] their fixed-point weight
};

// Pass 2 of a top-k / top-p row: each block counts and weighs the rule bins of its chunk
// (aggregated per warp and bin, then one global atomic per nonzero bin: integer sums, so the
// result never depends on the order). True in the block that arrives last: it gets the row's
// histogram in *h (shared memory) and has zeroed the global one for the next launch.
__device__ inline bool rows_bin_pass(const float* l, int n, int chunk, float mx, float inv_t,
                                     SampleScratch s, int row, BinHist* h) {
  __shared__ unsigned cnt[kRuleBins];
  __shared__ unsigned long long mass[kRuleBins];
  for (int b = threadIdx.x; b < kRuleBins; b += blockDim.x) {
    cnt[b] = 0;
    mass[b] = 0;
  }
  __syncthreads();
  const int c = blockIdx.x, chunks = gridDim.x;
  const int begin = c * chunk, end = min(n, begin + chunk);
  const int lane = threadIdx.x & 31;
  for (int base = begin; base < end; base += blockDim.x) {  // (warp-uniform trips)
    const int i = base + static_cast<int>(threadIdx.x);
    const bool valid = i < end;
    const float x = valid ? l[i] : 0.0f;
    const int b = valid ? rule_bin(x, mx, inv_t) : -1;
    const unsigned long long w = valid ? weight_of(x, mx, inv_t) : 0ull;
    unsigned todo = __ballot_sync(kFullMask, valid);
    while (todo) {
      const int leader = __ffs(todo) - 1;
      const int b0 = __shfl_sync(kFullMask, b, leader);
      const unsigned same = __ballot_sync(kFullMask, valid && b == b0);
      const unsigned long long sum = warp_sum_u64(valid && b == b0 ? w : 0ull);
      if (lane == leader) {
        atomicAdd(&mass[b0], sum);
        atomicAdd(&cnt[b0], static_cast<unsigned>(__popc(same)));
      }
      todo &= ~same;
    }
  }
  __syncthreads();
  unsigned* gc = s.bin_cnt(row);
  unsigned long long* gm = s.bin_mass(row);
  for (int b = threadIdx.x; b < kRuleBins; b += blockDim.x)
    if (cnt[b] != 0) {
      atomicAdd(&gc[b], cnt[b]);
      atomicAdd(&gm[b], mass[b]);
    }
  if (!block_arrive_last(s.count(row), chunks)) return false;
  for (int b = threadIdx.x; b < kRuleBins; b += blockDim.x) {
    cnt[b] = load_cg(&gc[b]);
    mass[b] = load_cg(&gm[b]);
    gc[b] = 0;
    gm[b] = 0;
  }
  __syncthreads();
  *h = BinHist{cnt, mass};
  return true;
}

// Sum of the partials' masses (thread 0's value is the one used).
__device__ inline uint64_t partial_total(const ChunkPartial* part, int chunks) {
  uint64_t t = 0;
  for (int c = 0; c < chunks; ++c) t += load_cg(&part[c].mass);
  return t;
}

}  // namespace trt_spec::cuda
