// attention.cuh: attention over the f32 KV cache for any number of query rows (decode: one per
// sequence; verify: the k + 1 rows of a draft chain or tree; prefill chunks).
//
//   kv_write_kernel      writes each row's k and v into cache (slot[i], layer, :, kv_idx[i])
//   attention_kernel     one block per (row, q head, split): online softmax over its share of
//                        entries (4 warps, one entry per warp at a time); a tree row's entries
//                        in logical order, its hidden indices skipped (RowsView)
//   attention_combine    merges the splits of each (row, head) (flash-decoding)
//
// A row attends to its own sequence's entries [0, kv_idx[i]] only (backend.h Rows: kv_idx is
// the position unless a draft tree gives siblings distinct indices, and a tree mask leaves a
// verify row its ancestors only), so rows of one verify block see the block's earlier tokens
// (written by kv_write_kernel first) and never the later ones.
// The number of splits depends on the model alone (never on n), so a row's result is the same
// whatever the other rows of the batch. KV layout (backend.h KvCache):
// [slots, layers, kv_heads, max_seq, head_dim].
#pragma once

#include "kernels/cuda/common.cuh"

namespace trt_spec::cuda {

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = 32 * kAttnWarps;
constexpr int kAttnMaxPerLane = 8;  // head_dim <= 256

struct KvView {
  float* k;
  float* v;
  int layers, kv_heads, max_seq, head_dim;

  __device__ __forceinline__ int64_t head_offset(int slot, int layer, int g) const {
    return ((static_cast<int64_t>(slot) * layers + layer) * kv_heads + g) *
           static_cast<int64_t>(max_seq) * head_dim;
  }
};

// Device view of backend.h's Rows (the optional arrays may be null).
struct RowsView {
  const int32_t* pos;
  const int32_t* slot;
  const int32_t* kv_idx;     // null: pos
  const int32_t* tree_base;  // with tree_bits
  const uint64_t* tree_bits;

  __device__ __forceinline__ int index(int i) const { return kv_idx ? kv_idx[i] : pos[i]; }
  // Row i reads its entries in LOGICAL order (as the CPU kernel, kernels/cpu/attention.h):
  // entry t < tree_base is cache index t, entry tree_base + j the j-th set bit of tree_bits (the
  // ancestors in depth order, then the row itself), where the accepted path stands once moved.
  // So a tree row sums the same values in the same order as the decode row it equals after
  // acceptance: identical bits whatever the branch layout.
  __device__ __forceinline__ int logical_len(int i) const {
    const int len = index(i) + 1;
    if (!tree_bits || len <= tree_base[i]) return len;
    const int span = len - tree_base[i];
    uint64_t b = span >= 64 ? tree_bits[i] : tree_bits[i] & ((uint64_t{1} << span) - 1);
    int c = 0;
    for (; b; b &= b - 1) ++c;
    return tree_base[i] + c;
  }
  // The cache index of row i's logical entry t (t < logical_len(i)).
  __device__ __forceinline__ int physical(int i, int t) const {
    if (!tree_bits || t < tree_base[i]) return t;
    uint64_t b = tree_bits[i];
    for (int j = t - tree_base[i]; j > 0; --j) b &= b - 1;  // drop the lower set bits
    int at = 0;
    for (; !((b >> at) & 1u); ++at) {
    }
    return tree_base[i] + at;
  }
};

// grid n, block kRowThreads-ish: copies the k and v heads of qkv row i into the cache.
__global__ void kv_write_kernel(const float* __restrict__ qkv, RowsView rows, int n_heads,
                                KvView kv, int layer) {
  const int i = blockIdx.x, hd = kv.head_dim, nkv = kv.kv_heads;
  const int64_t stride = static_cast<int64_t>(n_heads + 2 * nkv) * hd;
  const float* row = qkv + i * stride;
  for (int e = threadIdx.x; e < nkv * hd; e += blockDim.x) {
    const int g = e / hd, d = e % hd;
    const int64_t dst =
        kv.head_offset(rows.slot[i], layer, g) + static_cast<int64_t>(rows.index(i)) * hd + d;
    kv.k[dst] = row[static_cast<int64_t>(n_heads + g) * hd + d];
    kv.v[dst] = row[static_cast<int64_t>(n_heads + nkv + g) * hd + d];
  }
}

// grid (n * n_heads, splits), block kAttnThreads. With one split it writes out [n, n_heads hd]
// directly; otherwise partial [n * n_heads, splits, hd + 2] = (max, sum, unnormalised acc[hd]).
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(const float* __restrict__ qkv, RowsView rows, int n_heads, float scale,
                     KvView kv, int layer, float* __restrict__ out, float* __restrict__ partial) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int i = blockIdx.x / n_heads, h = blockIdx.x % n_heads;
  const int hd = kv.head_dim, group = n_heads / kv.kv_heads, g = h / group;
  const int splits = gridDim.y, split = blockIdx.y;
  const int len = rows.logical_len(i);
  const int span = (len + splits - 1) / splits;
  const int start = split * span, end = min(len, start + span);

  const int64_t stride = static_cast<int64_t>(n_heads + 2 * kv.kv_heads) * hd;
  const float* q = qkv + i * stride + static_cast<int64_t>(h) * hd;
  float qr[kAttnMaxPerLane], acc[kAttnMaxPerLane];
#pragma unroll
  for (int j = 0; j < kAttnMaxPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < hd ? q[d] : 0.0f;
    acc[j] = 0.0f;
  }
  const int64_t base = kv.head_offset(rows.slot[i], layer, g);
  const float* kc = kv.k + base;
  const float* vc = kv.v + base;
  float m = -INFINITY, l = 0.0f;
  for (int t = start + warp; t < end; t += kAttnWarps) {
    const int64_t pt = rows.physical(i, t);  // (the same for the whole warp)
    const float* kt = kc + pt * hd;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kAttnMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) s = fmaf(qr[j], kt[d], s);
    }
    s = warp_sum(s) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    const float* vt = vc + pt * hd;
#pragma unroll
    for (int j = 0; j < kAttnMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) acc[j] = acc[j] * corr + p * vt[d];
    }
    m = m_new;
  }

  // Merge the warps: (m, l, acc) of each through shared memory.
  __shared__ float sm_m[kAttnWarps], sm_l[kAttnWarps];
  __shared__ float sm_acc[kAttnWarps][32 * kAttnMaxPerLane];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kAttnMaxPerLane; ++j) sm_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float M = -INFINITY;
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm_m[w]);
  float L = 0.0f;
  float f[kAttnWarps];
#pragma unroll
  for (int w = 0; w < kAttnWarps; ++w) {
    f[w] = sm_m[w] == -INFINITY ? 0.0f : expf(sm_m[w] - M);  // empty warp: no weight
    L += sm_l[w] * f[w];
  }
  const int64_t row_head = static_cast<int64_t>(blockIdx.x);
  if (splits == 1) {
    float* o = out + static_cast<int64_t>(i) * n_heads * hd + static_cast<int64_t>(h) * hd;
    const float inv = 1.0f / L;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float a = 0.0f;
#pragma unroll
      for (int w = 0; w < kAttnWarps; ++w) a += sm_acc[w][d] * f[w];
      o[d] = a * inv;
    }
    return;
  }
  float* part = partial + (row_head * splits + split) * (hd + 2);
  if (threadIdx.x == 0) {
    part[0] = M;  // -inf for an empty split (start >= end)
    part[1] = L;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) a += sm_acc[w][d] * f[w];
    part[2 + d] = a;
  }
}

// out [n, n_heads hd] from partial [n * n_heads, splits, hd + 2].  grid n * n_heads,
// block kAttnThreads.
__global__ void __launch_bounds__(kAttnThreads)
    attention_combine_kernel(const float* __restrict__ partial, int splits, int n_heads, int hd,
                             float* __restrict__ out) {
  const int64_t rh = blockIdx.x;
  const float* part = partial + rh * splits * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, part[s * (hd + 2)]);
  float L = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float ms = part[s * (hd + 2)];
    if (ms != -INFINITY) L += part[s * (hd + 2) + 1] * expf(ms - M);
  }
  const float inv = 1.0f / L;
  const int i = static_cast<int>(rh / n_heads), h = static_cast<int>(rh % n_heads);
  float* o = out + static_cast<int64_t>(i) * n_heads * hd + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float ms = part[s * (hd + 2)];
      if (ms != -INFINITY) a += part[s * (hd + 2) + 2 + d] * expf(ms - M);
    }
    o[d] = a * inv;
  }
}

// Backend::kv_copy: entry (slot[i], src[i]) -> (slot[i], dst[i]) of every layer and kv head, in
// order of i (a later move may read an entry an earlier one wrote).  grid 1, block 256.
__global__ void kv_copy_kernel(KvView kv, const int32_t* __restrict__ slot,
                               const int32_t* __restrict__ src, const int32_t* __restrict__ dst,
                               int n) {
  const int hd = kv.head_dim, per_entry = kv.layers * kv.kv_heads * hd;
  for (int i = 0; i < n; ++i) {
    const int s = src[i], d = dst[i];
    if (s >= 0 && s != d) {
      for (int e = threadIdx.x; e < per_entry; e += blockDim.x) {
        const int l = e / (kv.kv_heads * hd), g = (e / hd) % kv.kv_heads, c = e % hd;
        const int64_t base = kv.head_offset(slot[i], l, g);
        kv.k[base + static_cast<int64_t>(d) * hd + c] =
            kv.k[base + static_cast<int64_t>(s) * hd + c];
        kv.v[base + static_cast<int64_t>(d) * hd + c] =
            kv.v[base + static_cast<int64_t>(s) * hd + c];
      }
    }
    __syncthreads();
  }
}

}  // namespace trt_spec::cuda
