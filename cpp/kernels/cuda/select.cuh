// select.cuh: block-wide selection over one logits row, the building blocks of the sampling rule
// on the GPU (sampling.cuh). One thread block works on one row.
//
// The CPU sorts (cpu_sampling.cpp kept_tokens); the GPU never sorts. Instead:
//   * The order "before" of the rule (larger logit first, ties to the lower index) is the order
//     of a 64-bit key: sort_key(l, i) = (order-preserving bits of l) << 32 | ~i. A prefix of the
//     sorted order is then a key threshold: {i : key(i) >= floor}.
//   * block_key_search finds the element at which a running sum, in sorted order, first reaches
//     a target (top-k: a count; top-p: a mass; a draw: u * total), by a most-significant-digit
//     radix descent over the keys with 8-bit digits: a histogram of the remaining candidates per
//     digit, the bucket the running sum reaches the target in, then the next digit inside it.
//     Once a bucket holds at most kCompactCap candidates they are copied to shared memory and the
//     remaining digits read only those. Histogram updates are aggregated per warp and bucket.
//   * Rule bins (rule_bin) cut a row into kRuleBins ranges of the key by the logit's distance
//     below the row maximum, in 1/8 temperature-scaled nats: a monotone function of the logit,
//     so each bin is a contiguous range of the sorted order. The multi-block rows
//     (sample_rows.cuh) count and weigh every bin over all their blocks; the one block that
//     finishes a row then runs block_key_search inside a single bin (its candidates usually fit
//     the shared list at once), never over the whole row.
//   * block_index_draw is the inverse CDF in token-index order (pure temperature sampling,
//     sample_dense, sample_residual): a coalesced pass for the total, then tiles of blockDim
//     consecutive elements, one block scan each, up to the tile the target falls in
//     (block_first_above, which the multi-block rows of sample_rows.cuh use on one chunk).
// Masses are fixed point (kMassBits fractional bits, uint64): sums are exact and independent of
// the summation order, so a row gives the same token however the work is split, in a graph or
// not. Against the CPU's double sums they differ by rounding (~1e-13 relative), far below the
// float noise of the logits themselves.
#pragma once

#include "kernels/cuda/common.cuh"

namespace trt_spec::cuda {

constexpr int kSampleThreads = 512;  // threads of every sampling block
constexpr int kMassBits = 44;        // a weight w in [0, 1] is round(w * 2^44); sums < 2^63
constexpr int kCompactCap = 2048;    // candidates the key search keeps in shared memory
constexpr int kRuleBins = 256;       // rule bins per row (rule_bin)

// The rule bin of logit x under the row maximum mx and 1 / temperature: floor(8 (mx - x) / T),
// the last bin for everything from 31.875 scaled nats below the maximum (and -inf, NaN).
// Non-decreasing as x decreases: a larger logit never lies in a later bin.
__device__ __forceinline__ int rule_bin(float x, float mx, float inv_t) {
  const float d = (mx - x) * inv_t;
  return d < 31.875f ? static_cast<int>(d * 8.0f) : kRuleBins - 1;
}

__device__ __forceinline__ uint64_t mass_fx(float w) {
  return __float2ull_rn(fmaxf(w, 0.0f) * 17592186044416.0f);  // 2^44
}

// floor(r24 * total / 2^24) for r24 < 2^24: the fixed-point target of a draw u * total with
// u = r24 / 2^24 (philox_uniform's exact value); "acc > u * total" <=> "acc > this".
__device__ __forceinline__ uint64_t scale_by_uniform(uint32_t r24, uint64_t total) {
  const uint64_t lo = static_cast<uint64_t>(r24) * total;
  const uint64_t hi = __umul64hi(static_cast<uint64_t>(r24), total);
  return (hi << 40) | (lo >> 24);
}

__device__ __forceinline__ uint32_t uniform_bits(float u) {
  return static_cast<uint32_t>(u * 16777216.0f);  // exact: u = k / 2^24
}

__device__ __forceinline__ uint64_t sort_key(float l, int i) {
  if (l == 0.0f) l = 0.0f;  // -0 and +0 are equal logits: the index decides
  uint32_t u = __float_as_uint(l);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<uint64_t>(u) << 32) |
         static_cast<uint64_t>(0xffffffffu - static_cast<uint32_t>(i));
}

__device__ __forceinline__ int key_index(uint64_t key) {
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(key));
}

// The candidates of one row under a temperature: key(i) and the fixed-point weight
// exp((l_i - max) / T) (the CPU's weight(), in float).
struct RowWeights {
  const float* l;
  int n;
  float mx, inv_t;
  __device__ __forceinline__ uint64_t key(int i) const { return sort_key(l[i], i); }
  __device__ __forceinline__ uint64_t weight(int i) const {
    return mass_fx(expf((l[i] - mx) * inv_t));
  }
  __device__ __forceinline__ int bin(int i) const { return rule_bin(l[i], mx, inv_t); }
};

// Sum of weights over {i in rule bin `bin` : key(i) >= floor} (floor 0: the whole bin).
__device__ __forceinline__ uint64_t block_bin_mass(const RowWeights& r, int bin, uint64_t floor) {
  uint64_t s = 0;
  for (int i = threadIdx.x; i < r.n; i += blockDim.x)
    if (r.bin(i) == bin && (floor == 0 || r.key(i) >= floor)) s += r.weight(i);
  return block_sum_u64(s);
}

enum class Reach { kCountAtLeast, kMassAtLeast, kMassAbove };

struct KeySearchShared {
  unsigned long long mass[256];
  unsigned int cnt[256];
  unsigned long long list_key[kCompactCap];
  unsigned long long list_val[kCompactCap];
  int list_n;
  int choice;
  unsigned int choice_cnt;
  unsigned long long choice_above;
};

// Among E = {i : key(i) >= floor} (and, with bin >= 0, in that rule bin), walking E in
// decreasing key order and summing v(i) (1 per element for kCountAtLeast, the weight otherwise),
// finds the first element at which the sum reaches x (">= x", or "> x" for kMassAbove). Returns
// false when the whole of E does not. bin_count: the bin's size when known (at most
// kCompactCap: E goes to the shared list in the first scan, the only one over the row).
// All threads must call; all get the same result.
__device__ inline bool block_key_search(const RowWeights& r, uint64_t floor, Reach reach,
                                        uint64_t x, uint64_t* found_key, int bin = -1,
                                        unsigned bin_count = 0xffffffffu) {
  __shared__ KeySearchShared sh;
  const bool count = reach == Reach::kCountAtLeast;
  uint64_t prefix = 0, above = 0;
  // 0: scan the row; 1: scan the row and copy matches to the list; 2: the list
  int source = bin >= 0 && bin_count <= static_cast<unsigned>(kCompactCap) ? 1 : 0;
  if (threadIdx.x == 0) sh.list_n = 0;
  for (int level = 0; level < 8; ++level) {
    const int shift = 56 - 8 * level;
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
      sh.mass[b] = 0;
      sh.cnt[b] = 0;
    }
    __syncthreads();
    auto matches = [&](uint64_t key) {
      return (floor == 0 || key >= floor) &&
             (level == 0 || (key >> (shift + 8)) == (prefix >> (shift + 8)));
    };
    // One warp-wide step over element e (valid: e < count): the warp's matches are added to the
    // histogram once per distinct bucket (a few in the first digits, where contention on the
    // shared atomics would otherwise serialise the pass), and appended to the list in
    // source 1. Called by all lanes together (the loops below are warp-uniform).
    const int lane = threadIdx.x & 31;
    auto step = [&](bool valid, uint64_t key, bool from_row, int e) {
      const bool m = valid && matches(key) && (bin < 0 || !from_row || r.bin(e) == bin);
      const int b = m ? static_cast<int>((key >> shift) & 0xffu) : -1;
      uint64_t val = 0;
      if (m) val = count ? 1ull : (from_row ? r.weight(e) : sh.list_val[e]);
      unsigned todo = __ballot_sync(kFullMask, m);
      if (source == 1 && todo) {
        const int first = __ffs(todo) - 1;
        int at = 0;
        if (lane == first) at = atomicAdd(&sh.list_n, __popc(todo));  // total <= kCompactCap
        at = __shfl_sync(kFullMask, at, first) + __popc(todo & ((1u << lane) - 1u));
        if (m) {
          sh.list_key[at] = key;
          sh.list_val[at] = val;
        }
      }
      while (todo) {
        const int leader = __ffs(todo) - 1;
        const int b0 = __shfl_sync(kFullMask, b, leader);
        const unsigned same = __ballot_sync(kFullMask, b == b0);
        const unsigned long long sum = warp_sum_u64(b == b0 ? val : 0ull);
        if (lane == leader) {
          atomicAdd(&sh.mass[b0], sum);
          atomicAdd(&sh.cnt[b0], static_cast<unsigned>(__popc(same)));
        }
        todo &= ~same;
      }
    };
    if (source < 2) {
      for (int base = 0; base < r.n; base += blockDim.x) {
        const int i = base + threadIdx.x;
        const bool valid = i < r.n;
        step(valid, valid ? r.key(i) : 0ull, true, i);
      }
    } else {
      const int count_list = sh.list_n;
      for (int base = 0; base < count_list; base += blockDim.x) {
        const int e = base + threadIdx.x;
        const bool valid = e < count_list;
        step(valid, valid ? sh.list_key[e] : 0ull, false, e);
      }
    }
    __syncthreads();
    // Warp 0 picks the bucket: lane l holds buckets 255 - 8 l .. 248 - 8 l (descending).
    if (threadIdx.x < 32) {
      uint64_t lane_mass = 0;
      for (int j = 0; j < 8; ++j) lane_mass += sh.mass[255 - 8 * lane - j];
      uint64_t incl = lane_mass;
      for (int o = 1; o < 32; o <<= 1) {
        const uint64_t y = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += y;
      }
      uint64_t running = above + incl - lane_mass;
      int hit = -1;
      uint64_t hit_above = 0;
      for (int j = 0; j < 8 && hit < 0; ++j) {
        const int b = 255 - 8 * lane - j;
        if (sh.cnt[b] == 0) continue;
        const uint64_t before = running;
        running += sh.mass[b];
        const bool ok = reach == Reach::kMassAbove ? running > x : running >= x;
        if (ok) {
          hit = b;
          hit_above = before;
        }
      }
      const unsigned ballot = __ballot_sync(kFullMask, hit >= 0);
      if (ballot == 0) {
        if (lane == 0) sh.choice = -1;
      } else if (lane == __ffs(ballot) - 1) {
        sh.choice = hit;
        sh.choice_cnt = sh.cnt[hit];
        sh.choice_above = hit_above;
      }
    }
    __syncthreads();
    const int b = sh.choice;
    const unsigned cnt = sh.choice_cnt;
    above = sh.choice_above;
    __syncthreads();  // everyone has read the choice before the next level rewrites it
    if (b < 0) return false;
    prefix |= static_cast<uint64_t>(b) << shift;
    if (source == 1)
      source = 2;
    else if (source == 0 && cnt <= static_cast<unsigned>(kCompactCap))
      source = 1;
  }
  *found_key = prefix;
  return true;
}

struct IndexDraw {
  int index;         // the first i with prefix sum > target; -1 when none
  int last_nonzero;  // the last i with v(i) > 0; -1 when none
  uint64_t total;    // sum of v over [0, n)
};

// The first i in [begin, end) at which the running sum of v from `begin` exceeds target; -1 when
// none. Tiles of blockDim consecutive elements (coalesced reads), one block scan per tile, until
// the tile the target falls in. All threads must call; all get the same result.
template <class Value>
__device__ inline int block_first_above(int begin, int end, Value v, uint64_t target) {
  __shared__ int found;
  if (threadIdx.x == 0) found = -1;
  uint64_t acc = 0;  // the same in every thread
  for (int base = begin; base < end; base += blockDim.x) {
    const int i = base + static_cast<int>(threadIdx.x);
    const uint64_t x = i < end ? v(i) : 0ull;
    unsigned long long tile = 0;
    const uint64_t excl = block_exclusive_scan_u64(x, &tile);  // (synchronises)
    if (x > 0 && acc + excl <= target && target < acc + excl + x) found = i;
    acc += tile;
    if (acc > target) break;  // block-uniform: the tile held the target
  }
  __syncthreads();
  const int r = found;
  __syncthreads();
  return r;
}

// Inverse CDF in index order of the fixed-point values v(i), i in [0, n), for the uniform
// r24 / 2^24: the first i whose inclusive prefix sum exceeds floor(r24 * total / 2^24).
// Two coalesced passes: the total (and last nonzero), then block_first_above.
// All threads must call; all get the same result.
template <class Value>
__device__ inline IndexDraw block_index_draw(int n, Value v, uint32_t r24) {
  __shared__ int last_nz;
  if (threadIdx.x == 0) last_nz = -1;
  uint64_t sum = 0;
  int my_last = -1;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const uint64_t x = v(i);
    sum += x;
    if (x > 0) my_last = i;
  }
  __syncthreads();
  if (my_last >= 0) atomicMax(&last_nz, my_last);
  const uint64_t total = block_sum_u64(sum);  // (synchronises)
  const int last = last_nz;
  const int index = block_first_above(0, n, v, scale_by_uniform(r24, total));
  return IndexDraw{index, last, total};
}

}  // namespace trt_spec::cuda
