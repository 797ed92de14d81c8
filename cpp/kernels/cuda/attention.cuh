// attention.cuh: attention over a typed KV cache (kv.cuh: f32, f16, bf16) for any number of query
// rows (decode: one row per sequence; verify: the k + 1 rows of a draft chain or tree; prefill
// chunks), plus the cache writes (kv_write) and moves (kv_copy). Host side (plan and launch):
// attention_launch.cuh.
//
//   attention_kernel   one block per (row tile, kv head [, head chunk], split). A row tile is a
//                      run of consecutive rows of ONE slot (at most plan.tile_rows, aligned to
//                      multiples of it; a slot change starts a new tile: grid.x has a candidate
//                      block per row, the ones not starting a tile exit at once). The block
//                      serves every (row, query head) pair of its tile and the kv head's group:
//                      each K / V tile of kt entries is loaded once into shared memory (16-byte
//                      loads, converted to f32) and read by all of them. Pair j belongs to warp
//                      j % kW for the whole launch (kW = 4 warps by default, 8 behind a switch
//                      and in the persistent forward; kOneRow: a decode instance behind
//                      another): lane t scores entry t, lanes own output dims.
//   (combine)          splits: each split writes (max, sum, acc[hd]) per pair; the last block of
//                      a tile to arrive (atomic counter per (tile, kv head), reset by that block:
//                      graphs replay) merges them in split order, in the same launch.
//   kv_write_kernel    k and v of each row into cache (slot[i], layer, :, kv_idx[i] or pos[i]).
//   kv_copy_kernel     Backend::kv_copy, element bytes (every type).
//
// Exactness: a row reads its entries in LOGICAL order (RowsView; a tree row the values of the
// decode row it equals after acceptance) in tiles of kt entries at fixed logical offsets; its
// operations (dot products in dim order, online softmax, p.v in entry order, the split merge)
// never depend on the other rows of the tile, on n or on which warp or pass serves it, so its
// result is bitwise that of the row alone. Splits: the logical entries in granules of chunk (32)
// go round the splits (granule u to split u % splits, splits from the SM count and max_seq,
// never n); a row uses min(splits, ceil(len / chunk)) of them, each reading its granules in
// order; a one-split row's output is acc / l in either path. A row's split of its entries never
// depends on max_seq: a decode row of up to splits * 32 entries is read by that many blocks at
// once whatever the cache's length.
// A tile's entries past a row's length are masked (never multiplied), so stale cache values
// (even inf in f16) do not leak. Layout: [slots, layers, kv_heads, max_seq, head_dim].
#pragma once

#include <cstddef>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv.cuh"
#include "kernels/cuda/l2_prefetch.cuh"

namespace trt_spec::cuda {

constexpr int kAttnWarps = 4;  // the default block of attention_kernel (plan_attention: 4 or 8)
constexpr int kAttnBlocksPerSm = 4;  // resident blocks of the default kernel (<= 128 regs)
// Resident blocks per SM attention_kernel<HD, warps> is compiled for: 128 registers a thread.
__host__ __device__ constexpr int attn_blocks_per_sm(int warps) {
  return kAttnBlocksPerSm * kAttnWarps / warps;
}
constexpr int kAttnMinChunk = 32;           // logical entries per granule (whole key tiles)
constexpr int kAttnMaxSplits = 64;          // splits per row, at most
constexpr size_t kAttnMaxSmem = 48 * 1024;  // static shared memory of one block
constexpr int kKvThreads = 128;

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
  // Whether row i's logical entries [t0, min(t0 + kt, llog)) are its cache entries in place.
  __device__ __forceinline__ bool in_place(int i, int t0, int kt, int llog) const {
    if (!tree_bits) return true;
    const int end = min(t0 + kt, llog) - tree_base[i];
    if (end <= 0) return true;
    if (end >= 64) return tree_bits[i] == ~uint64_t{0};
    const uint64_t low = (uint64_t{1} << end) - 1;
    return (tree_bits[i] & low) == low;
  }
};

// Shapes of the kernel instance for head_dim <= HD.
template <int HD>
struct AttnTile {
  static constexpr int kt = HD <= 128 ? 32 : 16;      // entries per K / V tile
  static constexpr int queries = HD <= 128 ? 16 : 8;  // (row, head) pairs per block, at most
  static constexpr int lanes_per_entry = 32 / kt;     // lanes sharing an entry's dot product
  static constexpr int dims = HD / 32;                // output dims per lane
  static constexpr int k_stride = HD + 1;             // K rows padded: no bank conflicts
  static constexpr size_t smem =
      sizeof(float) * (queries * HD + kt * k_stride + kt * HD + queries * kt) +
      sizeof(int) * (kt + 2 * queries + 1);
};
static_assert(AttnTile<64>::smem <= kAttnMaxSmem && AttnTile<128>::smem <= kAttnMaxSmem &&
                  AttnTile<256>::smem <= kAttnMaxSmem,
              "attention tiles exceed static shared memory");

// load_kv_tile with kPer elements per 16 bytes (4: f32, 8: f16 / bf16). A thread issues up to
// kBatch loads of k and of v before the first conversion (one memory round trip per batch, not
// one per 16 bytes): kIters / kBatch batches per tile (f16 / bf16: one at head_dim 64 to 256;
// f32: one at 64, two at 128 and 256). Batches of 4 keep the kernel at 128 registers (all 8
// loads of an f32 tile at once took 221). kHalf (kPer 8): the 16-bit kind, KvType::F16 or BF16,
// or F32 to read kv.type for each element (the general kernel: one instance for both).
template <int HD, int kPer, int kThreads, KvType kHalf = KvType::F32>
__device__ __forceinline__ void load_kv_tile_typed(const KvView& kv, int64_t head, const int* phys,
                                                   int t0, int cnt, float* sk, float* sv) {
  using S = AttnTile<HD>;
  constexpr int kIters = (S::kt * HD / kPer + kThreads - 1) / kThreads;
  constexpr int kBatch = kIters < 4 ? kIters : 4;
  constexpr int64_t kElem = kPer == 4 ? 4 : 2;  // bytes per element
  if (threadIdx.x >= kThreads) return;          // a wider block's extra threads
  const int hd = kv.head_dim, vpr = hd / kPer, total = cnt * vpr;
  const char* kb = static_cast<const char*>(kv.k);
  const char* vb = static_cast<const char*>(kv.v);
  const bool f16 = kHalf == KvType::F32 ? kv.type == KvType::F16 : kHalf == KvType::F16;
#pragma unroll 1
  for (int i0 = static_cast<int>(threadIdx.x); i0 < total; i0 += kBatch * kThreads) {
    uint4 a[kBatch], b[kBatch];
#pragma unroll
    for (int it = 0; it < kBatch; ++it) {
      const int i = i0 + it * kThreads;
      if (i < total) {
        const int t = i / vpr, c = (i % vpr) * kPer;
        const int64_t e = head + static_cast<int64_t>(phys ? phys[t] : t0 + t) * hd + c;
        a[it] = *reinterpret_cast<const uint4*>(kb + e * kElem);
        b[it] = *reinterpret_cast<const uint4*>(vb + e * kElem);
      }
    }
#pragma unroll
    for (int it = 0; it < kBatch; ++it) {
      const int i = i0 + it * kThreads;
      if (i >= total) continue;
      const int t = i / vpr, c = (i % vpr) * kPer;
      float* dk = sk + t * S::k_stride + c;
      float* dv = sv + t * HD + c;
      const uint32_t wa[4] = {a[it].x, a[it].y, a[it].z, a[it].w};
      const uint32_t wb[4] = {b[it].x, b[it].y, b[it].z, b[it].w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if constexpr (kPer == 4) {
          dk[q] = __uint_as_float(wa[q]);
          dv[q] = __uint_as_float(wb[q]);
        } else {
          const uint16_t k0 = wa[q] & 0xffffu, k1 = wa[q] >> 16;
          const uint16_t v0 = wb[q] & 0xffffu, v1 = wb[q] >> 16;
          dk[2 * q] = f16 ? f16_bits_to_float(k0) : bf16_bits_to_float(k0);
          dk[2 * q + 1] = f16 ? f16_bits_to_float(k1) : bf16_bits_to_float(k1);
          dv[2 * q] = f16 ? f16_bits_to_float(v0) : bf16_bits_to_float(v0);
          dv[2 * q + 1] = f16 ? f16_bits_to_float(v1) : bf16_bits_to_float(v1);
        }
      }
    }
  }
}

// Loads cnt entries (entry t: phys[t] if phys, else t0 + t) of one kv head (k, v: its entry 0)
// into sk [t * k_stride + d] and sv [t * HD + d] as f32, 16 bytes per load. The whole block
// (kThreads threads or more) calls it. kByType: one copy of the loop per element type (each
// converting one way), instead of one for both 16-bit types choosing per element: more code in
// all, less of it run (the one-row kernel's).
template <int HD, int kThreads, bool kByType = false>
__device__ __forceinline__ void load_kv_tile(const KvView& kv, int64_t head, const int* phys,
                                             int t0, int cnt, float* sk, float* sv) {
  if (kv.type == KvType::F32)
    load_kv_tile_typed<HD, 4, kThreads>(kv, head, phys, t0, cnt, sk, sv);
  else if (!kByType)
    load_kv_tile_typed<HD, 8, kThreads>(kv, head, phys, t0, cnt, sk, sv);
  else if (kv.type == KvType::F16)
    load_kv_tile_typed<HD, 8, kThreads, KvType::F16>(kv, head, phys, t0, cnt, sk, sv);
  else
    load_kv_tile_typed<HD, 8, kThreads, KvType::BF16>(kv, head, phys, t0, cnt, sk, sv);
}

// The merge of one (row, head) pair's rs >= 2 split partials pp [rs, hd + 2] (max, sum, acc) into
// o [hd], by one warp, in split order: M = max_s m_s, w_s = exp(m_s - M), L = sum_s l_s w_s,
// o[d] = (sum_s acc_s[d] w_s) / L (fmaf chains in s order: a fixed sequence of operations per
// row, whatever the other rows). Latency: lane s % 32 loads split s's (max, sum) and the first
// kBatch splits' acc values are loaded with them (all in flight at once), later batches after,
// not one value per round trip (rs = 4: about 24 dependent L2 reads per pair).
template <int HD>
__device__ __forceinline__ void attention_merge(const float* __restrict__ pp, int rs, int hd,
                                                int lane, float* __restrict__ o) {
  constexpr int ND = AttnTile<HD>::dims, kBatch = ND <= 2 ? 8 : (ND <= 4 ? 4 : 2);
  const int64_t sstride = hd + 2;
  float mv[2], lv[2];  // splits lane and lane + 32 (rs <= kAttnMaxSplits = 64)
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int s = lane + 32 * k;
    mv[k] = s < rs ? __ldcg(pp + s * sstride) : -INFINITY;
    lv[k] = s < rs ? __ldcg(pp + s * sstride + 1) : 0.0f;
  }
  float v[kBatch][ND];
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
#pragma unroll
      for (int c = 0; c < ND; ++c) {
        const int s = s0 + u, d = lane + 32 * c;
        v[u][c] = s < rs && d < hd ? __ldcg(pp + s * sstride + 2 + d) : 0.0f;
      }
  };
  load_batch(0);
  float M = fmaxf(mv[0], mv[1]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(kFullMask, M, off));
  float wv[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) wv[k] = lane + 32 * k < rs ? expf(mv[k] - M) : 0.0f;
  auto weight = [&](int s) {  // w_s on every lane (s uniform over the warp)
    return __shfl_sync(kFullMask, s < 32 ? wv[0] : wv[1], s & 31);
  };
  float L = 0.0f;
  for (int s = 0; s < rs; ++s)
    L = fmaf(__shfl_sync(kFullMask, s < 32 ? lv[0] : lv[1], s & 31), weight(s), L);
  float a[ND];
#pragma unroll
  for (int c = 0; c < ND; ++c) a[c] = 0.0f;
  for (int s0 = 0; s0 < rs; s0 += kBatch) {
    if (s0 > 0) load_batch(s0);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (s0 + u >= rs) break;  // uniform over the warp
      const float w = weight(s0 + u);
#pragma unroll
      for (int c = 0; c < ND; ++c) a[c] = fmaf(v[u][c], w, a[c]);
    }
  }
  const float inv = 1.0f / L;
#pragma unroll
  for (int c = 0; c < ND; ++c)
    if (lane + 32 * c < hd) o[lane + 32 * c] = a[c] * inv;
}

// Shared memory of one attention_block<HD>.
template <int HD>
struct AttnSmem {
  using S = AttnTile<HD>;
  float4 sq4[S::queries * HD / 4];  // the pairs' q (16-byte aligned: float4 stores)
  float sk[S::kt * S::k_stride];
  float sv[S::kt * HD];
  float sp[S::queries * S::kt];  // probabilities of a tile, per pair
  int s_phys[S::kt];             // a gathered tile's cache indices
  int s_llog[S::queries];        // logical length per tile row
  int s_mode[S::queries];        // per tile row and key tile: 0 idle, 1 shared, 2 gathered
  int s_last;
};

// One attention launch's arguments: out [n, n_heads hd] = attention of the q of qkv [n, (n_heads +
// 2 kv_heads) hd] over the cache kv (layer) for rows `rows`, with plan_attention's numbers
// (tile_rows .. gy_total); partial [n, n_heads, splits, hd + 2] and counters [n, kv_heads
// head_chunks] (zero): the split scratch.
struct AttnArgs {
  const float* qkv = nullptr;
  RowsView rows{};
  int n = 0, n_heads = 0;
  float scale = 0.0f;
  KvView kv{};
  int layer = 0, tile_rows = 1, head_chunk = 1, chunk = 0, splits = 1, gy_total = 1;
  float* out = nullptr;
  float* partial = nullptr;
  unsigned* counters = nullptr;
};

// Work items (row x, y = kv group chunk gy * splits + split z): n * gy_total of them, dealt
// round the grid's blocks (grid = min(items, resident blocks): one wave), item-major; each
// item's work is the same whichever block takes it. One block of it: block bx of a grid of gx,
// 32 kW threads (kW warps: kAttnWarps in attention_kernel, the persistent forward's eight in
// its blocks; a wider block: the threads past them only reach the barriers). `wait`
// runs (every thread) before anything is read: the standalone kernel's grid dependency, or the
// persistent forward's counters (forward_program.cuh). See the file comment. The arguments are
// read where they are used, from wherever `a` lives (the kernel's parameters, or the persistent
// forward's shared memory): none of them has to stay in a register for the whole block.
// kOneRow: the decode instance, for launches of one row without tree bits (n == 1, no
// tree_bits): the same code with the tile's row count, its in-place tiles and the element type
// of its loads known, so the rows, modes and gathered tiles of the general path fold away.
template <int HD, int kW, bool kOneRow = false, class Wait>
__device__ __forceinline__ void attention_block(const AttnArgs& a, int64_t bx, int64_t gx,
                                                AttnSmem<HD>& sm, Wait&& wait) {
  const float* const& qkv = a.qkv;
  const RowsView& rows = a.rows;
  const KvView& kv = a.kv;
  const int &n = a.n, &n_heads = a.n_heads, &layer = a.layer, &tile_rows = a.tile_rows;
  const int &head_chunk = a.head_chunk, &chunk = a.chunk, &splits = a.splits;
  const int& gy_total = a.gy_total;
  const float& scale = a.scale;
  float* const& out = a.out;
  float* const& partial = a.partial;
  unsigned* const& counters = a.counters;
  using S = AttnTile<HD>;
  static_assert(S::queries % kW == 0, "the pairs are dealt evenly over the warps");
  constexpr int KT = S::kt, QW = S::queries / kW, ND = S::dims, KS = S::k_stride;
  constexpr int kThreads = 32 * kW;
  float* sq = reinterpret_cast<float*>(sm.sq4);
  float* sk = sm.sk;
  float* sv = sm.sv;
  float* sp = sm.sp;
  int* s_phys = sm.s_phys;
  int* s_llog = sm.s_llog;
  int* s_mode = sm.s_mode;
  int& s_last = sm.s_last;

  wait();  // nothing read before the qkv matmul ends
  // Warps past kW (a wider block) own no pairs: they only reach the barriers.
  const bool idle = threadIdx.x >= kThreads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = kv.head_dim, nkv = kv.kv_heads, group = n_heads / nkv;
  const int n_chunks = (group + head_chunk - 1) / head_chunk;
  const int64_t items = static_cast<int64_t>(n) * gy_total;
  for (int64_t item = bx; item < items; item += gx) {
    __syncthreads();  // the previous item's readers of shared memory are done
    const int y = static_cast<int>(item % gy_total);
    const int z = y % splits, gy = y / splits;
    const int g = gy / n_chunks, h0 = g * group + (gy % n_chunks) * head_chunk;
    const int nhb = min(head_chunk, (g + 1) * group - h0);
    // The tile: rows [x, x_end) of one slot.
    const int x = static_cast<int>(item / gy_total), slot = rows.slot[x];
    int x_end = x + 1;
    if constexpr (!kOneRow) {
      if (x % tile_rows != 0 && rows.slot[x - 1] == slot) continue;  // not a tile's first row
      const int lim = min(n, (x / tile_rows + 1) * tile_rows);
      while (x_end < lim && rows.slot[x_end] == slot) ++x_end;
    }
    const int nr = kOneRow ? 1 : x_end - x, nq = nr * nhb;
    // The rows' logical lengths and the pairs' q, their loads in flight together (one round trip,
    // not two: the lengths go to shared memory after the q loads are issued). A split with no
    // entries of this tile loads q for nothing and returns.
    int my_llog = 0;
    if (static_cast<int>(threadIdx.x) < nr)
      my_llog = kOneRow ? rows.index(x) + 1 : rows.logical_len(x + static_cast<int>(threadIdx.x));
    const int64_t stride = static_cast<int64_t>(n_heads + 2 * nkv) * hd;
    const int hd4 = hd / 4;  // 16-byte loads (head_dim % 8 == 0; qkv rows 16-byte aligned)
#pragma unroll 4
    for (int e = threadIdx.x; e < nq * hd4; e += blockDim.x) {
      const int j = e / hd4, d = (e % hd4) * 4;
      *reinterpret_cast<float4*>(sq + j * HD + d) = *reinterpret_cast<const float4*>(
          qkv + (x + j / nhb) * stride + static_cast<int64_t>(h0 + j % nhb) * hd + d);
    }
    if (static_cast<int>(threadIdx.x) < nr) s_llog[threadIdx.x] = my_llog;
    __syncthreads();
    int max_len = 0;
    for (int r = 0; r < nr; ++r) max_len = max(max_len, s_llog[r]);
    // The splits a row of len logical entries uses (granules of chunk dealt round the splits).
    auto splits_of = [&](int len) { return min(splits, (len + chunk - 1) / chunk); };
    const int tile_splits = splits_of(max_len);
    if (z >= tile_splits) continue;  // no entries of this tile in split z

    // This warp's pairs j = warp + 4 jj: state of the online softmax.
    float m[QW], l[QW], acc[QW][ND];
    int len[QW], row[QW];
#pragma unroll
    for (int jj = 0; jj < QW; ++jj) {
      const int j = warp + kW * jj;
      row[jj] = j < nq && !idle ? j / nhb : -1;
      len[jj] = j < nq ? s_llog[row[jj]] : 0;
      m[jj] = -INFINITY;
      l[jj] = 0.0f;
#pragma unroll
      for (int c = 0; c < ND; ++c) acc[jj][c] = 0.0f;
    }
    const int64_t head = kv.head_offset(slot, layer, g);
    const int t_lane = lane % KT, part = lane / KT, dlen = hd / S::lanes_per_entry;
    const int lo = z * chunk;  // this split's first granule; then every splits-th

    // One key tile [t0, t0 + KT) for this warp's pairs of rows in mode `want` (and row `only`
    // when >= 0), reading sk / sv.
    auto process = [&](int t0, int want, int only) {
      bool act[QW];
      int valid[QW], top = 0;
#pragma unroll
      for (int jj = 0; jj < QW; ++jj) {
        act[jj] =
            row[jj] >= 0 && (kOneRow || (s_mode[row[jj]] == want && (only < 0 || row[jj] == only)));
        valid[jj] = act[jj] ? min(KT, len[jj] - t0) : 0;
        top = max(top, valid[jj]);
      }
      // Scores: lane t (and its partner lanes) dots q with entry t over dims in order.
      float s[QW];
#pragma unroll
      for (int jj = 0; jj < QW; ++jj) s[jj] = 0.0f;
      const float* kr = sk + t_lane * KS + part * dlen;
#pragma unroll 8
      for (int d = 0; d < dlen; ++d) {  // (unrolled: the loads ahead of the FMAs, same order)
        const float kd = kr[d];
#pragma unroll
        for (int jj = 0; jj < QW; ++jj)
          if (act[jj]) s[jj] = fmaf(sq[(warp + kW * jj) * HD + part * dlen + d], kd, s[jj]);
      }
      float alpha[QW];
#pragma unroll
      for (int jj = 0; jj < QW; ++jj) {
        alpha[jj] = 1.0f;
        if (!act[jj]) continue;
        if (S::lanes_per_entry == 2) s[jj] += __shfl_xor_sync(kFullMask, s[jj], 16);
        const bool ok = t_lane < valid[jj];
        const float sc = ok ? s[jj] * scale : -INFINITY;
        float mt = sc;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(kFullMask, mt, o));
        const float m_new = fmaxf(m[jj], mt);
        alpha[jj] = expf(m[jj] - m_new);
        const float p = ok ? expf(sc - m_new) : 0.0f;
        l[jj] = l[jj] * alpha[jj] + warp_sum(part == 0 ? p : 0.0f);
        m[jj] = m_new;
        if (part == 0) sp[(warp + kW * jj) * KT + t_lane] = p;
      }
      __syncwarp();
#pragma unroll
      for (int jj = 0; jj < QW; ++jj)
#pragma unroll
        for (int c = 0; c < ND; ++c) acc[jj][c] *= alpha[jj];
#pragma unroll 4
      for (int t = 0; t < top; ++t) {  // acc += p_t v_t, entries in order
        float vv[ND];
#pragma unroll
        for (int c = 0; c < ND; ++c) vv[c] = lane + 32 * c < hd ? sv[t * HD + lane + 32 * c] : 0.0f;
#pragma unroll
        for (int jj = 0; jj < QW; ++jj) {
          if (t >= valid[jj]) continue;
          const float p = sp[(warp + kW * jj) * KT + t];
#pragma unroll
          for (int c = 0; c < ND; ++c) acc[jj][c] = fmaf(p, vv[c], acc[jj][c]);
        }
      }
      __syncwarp();
    };

    // Key tiles of KT entries through granules z, z + splits, z + 2 splits, .. (chunk entries
    // each).
    auto next_tile = [&](int t) {
      return (t + KT) % chunk == 0 ? t + KT + (splits - 1) * chunk : t + KT;
    };
    for (int t0 = lo; t0 < max_len; t0 = next_tile(t0)) {
      __syncthreads();          // the previous tile's readers are done
      if constexpr (kOneRow) {  // the row's entries here, in place (mode 1)
        load_kv_tile<HD, kThreads, true>(kv, head, nullptr, t0, min(KT, max_len - t0), sk, sv);
        __syncthreads();
        process(t0, 1, -1);
        continue;
      }
      if (static_cast<int>(threadIdx.x) < nr) {
        const int r = threadIdx.x, lr = s_llog[r];
        s_mode[r] = lr <= t0 ? 0 : rows.in_place(x + r, t0, KT, lr) ? 1 : 2;
      }
      __syncthreads();
      int cnt = 0;  // entries of the shared tile anyone reads
      for (int r = 0; r < nr; ++r)
        if (s_mode[r] == 1) cnt = max(cnt, min(KT, s_llog[r] - t0));
      if (cnt > 0) {
        load_kv_tile<HD, kThreads>(kv, head, nullptr, t0, cnt, sk, sv);
        __syncthreads();
        process(t0, 1, -1);
      }
      for (int r = 0; r < nr; ++r) {  // tree rows whose logical entries here are elsewhere
        if (s_mode[r] != 2) continue;
        const int c2 = min(KT, s_llog[r] - t0);
        __syncthreads();
        if (static_cast<int>(threadIdx.x) < c2)
          s_phys[threadIdx.x] = rows.physical(x + r, t0 + threadIdx.x);
        __syncthreads();
        load_kv_tile<HD, kThreads>(kv, head, s_phys, t0, c2, sk, sv);
        __syncthreads();
        process(t0, 2, r);
      }
    }

    // This split's results: the output (one split) or the partial of every pair with entries.
    const int64_t out_stride = static_cast<int64_t>(n_heads) * hd;
#pragma unroll
    for (int jj = 0; jj < QW; ++jj) {
      if (row[jj] < 0 || len[jj] <= lo) continue;
      const int j = warp + kW * jj, i = x + row[jj], h = h0 + j % nhb;
      if (tile_splits == 1) {
        const float inv = 1.0f / l[jj];
        float* o = out + i * out_stride + static_cast<int64_t>(h) * hd;
#pragma unroll
        for (int c = 0; c < ND; ++c)
          if (lane + 32 * c < hd) o[lane + 32 * c] = acc[jj][c] * inv;
      } else {
        float* pp = partial + ((static_cast<int64_t>(i) * n_heads + h) * splits + z) * (hd + 2);
        if (lane == 0) {
          pp[0] = m[jj];
          pp[1] = l[jj];
        }
#pragma unroll
        for (int c = 0; c < ND; ++c)
          if (lane + 32 * c < hd) pp[2 + lane + 32 * c] = acc[jj][c];
      }
    }
    if (tile_splits == 1) continue;

    // The last block of the tile to arrive merges the splits, in split order.
    __threadfence();
    __syncthreads();
    unsigned* counter = counters + static_cast<int64_t>(x) * (gy_total / splits) + gy;
    if (threadIdx.x == 0)
      s_last = atomicAdd(counter, 1u) == static_cast<unsigned>(tile_splits - 1) ? 1 : 0;
    __syncthreads();
    if (!s_last) continue;
    __threadfence();
    for (int j = warp; j < nq && !idle; j += kW) {
      const int r = j / nhb, i = x + r, h = h0 + j % nhb;
      const int rs = splits_of(s_llog[r]);  // the row's own splits
      const float* pp = partial + (static_cast<int64_t>(i) * n_heads + h) * splits * (hd + 2);
      float* o = out + i * out_stride + static_cast<int64_t>(h) * hd;
      if (rs == 1) {  // as the one-split path
        const float inv = 1.0f / __ldcg(pp + 1);
        for (int d = lane; d < hd; d += 32) o[d] = __ldcg(pp + 2 + d) * inv;
        continue;
      }
      attention_merge<HD>(pp, rs, hd, lane, o);
    }
    if (threadIdx.x == 0) *counter = 0;  // for the next launch (graphs replay)
  }
}

// attention_block as a kernel: grid min(items, attn_blocks_per_sm(kW) SMs), block 32 kW (4
// warps by default; 8: a pair per warp for up to 8 pairs, half the resident blocks). next: the
// weights of the ops after it, each block streaming a share toward L2 (l2_prefetch.cuh).
// kOneRow: the decode instance (attention_block), launched for one row without tree bits.
template <int HD, int kW = kAttnWarps, bool kOneRow = false>
__global__ void __launch_bounds__(32 * kW, attn_blocks_per_sm(kW))
    attention_kernel(const __grid_constant__ AttnArgs a, const __grid_constant__ WeightHint next) {
  __shared__ AttnSmem<HD> sm;
  prefetch_hint(next, blockIdx.x, gridDim.x);
  attention_block<HD, kW, kOneRow>(a, blockIdx.x, gridDim.x, sm, [] {
    grid_dependency_launch();  // the next matmul may fetch its weights
    grid_dependency_wait();    // as a programmatic dependent
  });
}

// grid n, block kKvThreads: the k and v heads of qkv row i into the cache, rounded to its type.
static __global__ void kv_write_kernel(const float* __restrict__ qkv, RowsView rows, int n_heads,
                                       KvView kv, int layer) {
  const int i = blockIdx.x, hd = kv.head_dim, nkv = kv.kv_heads;
  const int64_t stride = static_cast<int64_t>(n_heads + 2 * nkv) * hd;
  const float* row = qkv + i * stride;
  for (int e = threadIdx.x; e < nkv * hd; e += blockDim.x) {
    const int g = e / hd, d = e % hd;
    const int64_t dst =
        kv.head_offset(rows.slot[i], layer, g) + static_cast<int64_t>(rows.index(i)) * hd + d;
    kv_store(kv.k, kv.type, dst, row[static_cast<int64_t>(n_heads + g) * hd + d]);
    kv_store(kv.v, kv.type, dst, row[static_cast<int64_t>(n_heads + nkv + g) * hd + d]);
  }
}

inline void launch_kv_write(cudaStream_t stream, const float* qkv, RowsView rows, int n,
                            int n_heads, KvView kv, int layer) {
  if (n <= 0) return;
  TRT_SPEC_LAUNCH(kv_write_kernel, dim3(n), dim3(kKvThreads), stream, qkv, rows, n_heads, kv,
                  layer);
}

// Backend::kv_copy: entry (slot[i], src[i]) -> (slot[i], dst[i]) of every layer and kv head, in
// order of i (a later move may read an entry an earlier one wrote), as 16-bit words (every type
// moves bit for bit).  grid 1, block 256.
static __global__ void kv_copy_kernel(KvView kv, const int32_t* __restrict__ slot,
                                      const int32_t* __restrict__ src,
                                      const int32_t* __restrict__ dst, int n) {
  const int w = kv.type == KvType::F32 ? 2 : 1;  // 16-bit words per element
  const int hd = kv.head_dim, words = hd * w, per_entry = kv.layers * kv.kv_heads * words;
  auto* k = static_cast<uint16_t*>(kv.k);
  auto* v = static_cast<uint16_t*>(kv.v);
  for (int i = 0; i < n; ++i) {
    const int s = src[i], d = dst[i];
    if (s >= 0 && s != d) {
      for (int e = threadIdx.x; e < per_entry; e += blockDim.x) {
        const int l = e / (kv.kv_heads * words), g = (e / words) % kv.kv_heads, c = e % words;
        const int64_t base = kv.head_offset(slot[i], l, g) * w;
        k[base + static_cast<int64_t>(d) * words + c] =
            k[base + static_cast<int64_t>(s) * words + c];
        v[base + static_cast<int64_t>(d) * words + c] =
            v[base + static_cast<int64_t>(s) * words + c];
      }
    }
    __syncthreads();
  }
}

inline void launch_kv_copy(cudaStream_t stream, KvView kv, const int32_t* slot, const int32_t* src,
                           const int32_t* dst, int n) {
  if (n <= 0) return;
  TRT_SPEC_LAUNCH(kv_copy_kernel, dim3(1), dim3(256), stream, kv, slot, src, dst, n);
}

}  // namespace trt_spec::cuda
