// attention_impl.h: the tiled CPU attention kernel of attention.h, included by one translation
// unit per instruction set: attention.cpp (-mavx2 -mfma -mf16c) and attention_avx512.cpp (AVX-512
// F/BW/VL on top). Everything here has internal linkage; each includer wraps run_tasks()
// (attention.cpp also counts the tasks with shape_of()).
//
// A task holds, for each of its queries (rows x query heads of one kv group), the running max m,
// the running sum l and the unnormalised output o [head_dim] of the online softmax. Per key tile:
//   1. K tile [kt, head_dim] -> Kt [head_dim, kAttentionTile] (transposed once, zero-padded);
//   2. scores S = q . k for all active queries, 3 queries x 32 keys per register tile (AVX-512:
//      6 queries), summed over head_dim in ascending order; S = scale * S, entries outside the
//      row's set -> -inf;
//   3. per query: m' = max(m, max S), alpha = exp(m - m'), p = exp(S - m'), l = l alpha + sum p
//      (softmax_tile; AVX-512: 16 lanes);
//   4. o = o alpha + sum_t p_t v_t, 6 queries x 16 output columns per register tile (AVX-512:
//      x 64 columns), t ascending.
// Steps 2-4 are written once over the vector type (vec_f32.h). Every lane of steps 2 and 4 is
// one query and one key (2) or one output column (4) with its own chain of FMAs, and step 3 is
// lane-wise up to its max (exact in any order) and its sum (kept in 8-lane order): the 512-bit
// build runs the same operations per value as the 256-bit one, so both give the same bits
// (test_attention_cpu.py compares them).
// A query is active in a tile when its row's len reaches into the tile; every operation on a
// query is the same whichever other queries share its register tiles (they only share loads), so
// the result does not depend on the block (see attention.h). m starts at -FLT_MAX, not -inf, so a
// tile without entries of the row (possible with a tree mask) leaves m, l and o as they are:
// alpha = exp(0) = 1 and p = exp(-inf) = 0 exactly.
// An f16 / bf16 cache's tiles are converted to f32 (exactly) as they are loaded; an f32 cache's
// are read in place. Prompt rows (AttentionArgs::prompt_from) run steps 2 and 4 on bf16 or int16
// tiles instead (attention_bf16.h, attention_int16.h), made from those f32 ones once per task.
#pragma once

#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/vec_f32.h"

namespace trt_spec::cpu {
namespace {

constexpr int KT = kAttentionTile;
static_assert(KT == 32, "the register tiles and row masks below assume 32-entry tiles");
constexpr int kMaxHeadDim = 256;
// Queries a task aims at (rows of a block x group heads): at least kBlockQueries
// (kBlockQueriesPrompt in a call with prompt rows, whose bf16 / int16 tiles cost a conversion per
// task: attention_bf16.h, attention_int16.h), doubled up
// to kMaxQueries while every worker still gets two tasks (shape_of). Each task loads (and
// transposes or converts) every K / V tile of its rows, so fewer, larger blocks read the cache
// fewer times (benchmarks/cpp/bench_cpu_attention.cpp compares the blockings). A task's
// per-query state lives in per-thread scratch (SliceScratch); at 768 queries of head_dim 128 its
// outputs (384 KB) stay in L2.
constexpr int kBlockQueries = 96;
constexpr int kBlockQueriesPrompt = 192;
constexpr int kMaxQueries = 768;  // queries a task holds at most

inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// dst [count] = the f32 values of count (a multiple of 8) elements of type t at src (exact).
void to_f32(const void* src, KvType t, int64_t count, float* dst) {
  switch (t) {
    case KvType::F32: std::memcpy(dst, src, sizeof(float) * count); return;
    case KvType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; i += 8)
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
      return;
    }
    case KvType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; i += 8) {
        const __m256i w =
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
      return;
    }
  }
}

// Kt [hd, KT] = the first kt (<= KT) rows of K [kt, hd] transposed; columns kt.. are zero.
void transpose_tile(const float* k, int kt, int hd, float* kt_out) {
  for (int t0 = 0; t0 < KT; t0 += 8) {
    for (int d0 = 0; d0 < hd; d0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = t0 + i < kt ? _mm256_loadu_ps(k + (t0 + i) * hd + d0) : _mm256_setzero_ps();
      const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xee);
      const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xee);
      const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xee);
      const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xee);
      const __m256 c[8] = {
          _mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20),
          _mm256_permute2f128_ps(b2, b6, 0x20), _mm256_permute2f128_ps(b3, b7, 0x20),
          _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
          _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31)};
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt_out + (d0 + i) * KT + t0, c[i]);
    }
  }
}

// S[j][0, KT) = q_j . Kt[:, t] for NQ queries (unscaled), KT / X::W vectors of keys per query.
template <class X, int NQ>
void scores_tile(const float* const* q, const float* kt, int hd, float* const* s) {
  constexpr int NC = KT / X::W;
  typename X::V acc[NQ][NC];
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[j][c] = X::zero();
  for (int d = 0; d < hd; ++d) {
    typename X::V k[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) k[c] = X::load(kt + d * KT + X::W * c);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; ++j) {
      const typename X::V b = X::bcast(q[j] + d);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[j][c] = X::fma(b, k[c], acc[j][c]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) X::store(s[j] + X::W * c, acc[j][c]);
}

// o_j[d0, d0 + W ND) = o_j * alpha_j + sum_{t < kt} p_j[t] v[t] for NQ queries, t ascending.
template <class X, int NQ, int ND>
void pv_chunk(const float* const* p, const float* v, int kt, int hd, int d0, float* const* o,
              const float* alpha) {
  typename X::V acc[NQ][ND];
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c)
      acc[j][c] = X::mul(X::load(o[j] + d0 + X::W * c), X::set1(alpha[j]));
  for (int t = 0; t < kt; ++t) {
    typename X::V vv[ND];
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) vv[c] = X::load(v + t * hd + d0 + X::W * c);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; ++j) {
      const typename X::V b = X::bcast(p[j] + t);
#pragma GCC unroll 4
      for (int c = 0; c < ND; ++c) acc[j][c] = X::fma(b, vv[c], acc[j][c]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) X::store(o[j] + d0 + X::W * c, acc[j][c]);
}

template <int NQ>
void pv_tile(const float* const* p, const float* v, int kt, int hd, float* const* o,
             const float* alpha) {
  int d0 = 0;
#if defined(__AVX512F__)
  for (; d0 + 64 <= hd; d0 += 64) pv_chunk<VecF32x16, NQ, 4>(p, v, kt, hd, d0, o, alpha);
  for (; d0 + 16 <= hd; d0 += 16) pv_chunk<VecF32x16, NQ, 1>(p, v, kt, hd, d0, o, alpha);
#endif
  for (; d0 + 16 <= hd; d0 += 16) pv_chunk<VecF32x8, NQ, 2>(p, v, kt, hd, d0, o, alpha);
  if (d0 < hd) pv_chunk<VecF32x8, NQ, 1>(p, v, kt, hd, d0, o, alpha);
}

// The build's widest vector (score tiles, the softmax), and the queries per scores register
// tile: 6 x 2 accumulators of 16 keys, or 3 x 4 of 8.
#if defined(__AVX512F__)
using WideVec = VecF32x16;
constexpr int kScoreQueries = 6;
#else
using WideVec = VecF32x8;
constexpr int kScoreQueries = 3;
#endif

// f(N, x) for each register tile [x, x + N) of queries [0, n): N = min(Max, n - x), passed as a
// std::integral_constant so the tile functions get it as a template argument (scores_tile, pv_tile
// and their bf16 twins each instantiate counts 1..Max).
template <int N, int Max, class F>
inline void with_count(int n, const F& f) {
  if constexpr (N == Max) {
    f(std::integral_constant<int, N>{});
  } else {
    if (n == N) return f(std::integral_constant<int, N>{});
    with_count<N + 1, Max>(n, f);
  }
}

template <int Max, class F>
inline void register_tiles(int n, const F& f) {
  for (int x = 0; x < n; x += Max)
    with_count<1, Max>(n - x < Max ? n - x : Max, [&](auto nq) { f(nq, x); });
}

#if defined(__AVX512BF16__)
#include "kernels/cpu/attention_bf16.h"  // prompt rows' bf16 tiles
constexpr bool kHaveBf16 = true;
#else
constexpr bool kHaveBf16 = false;
#endif
#include "kernels/cpu/attention_int16.h"  // prompt rows' int16 tiles (every build)

// How a run of rows multiplies: f32 FMAs, or one of the prompt precisions (attention.h).
enum class RowMath { F32, Bf16, Int16 };

// Step 3 for one query: s [KT] (its scores, unscaled) -> p = exp(scale s - m') where its mask
// bit is set (0 elsewhere), with m, l and its alpha updated. Lane-wise at any width, except the
// max (exact in any order) and l's sum of p, which X::add8 keeps in 8-lane order
// (((p[0..8) + p[8..16)) + p[16..24)) + p[24..32), then hsum8): the same bits from both builds.
template <class X>
inline void softmax_tile(float* s, uint32_t mask, float scale, float& m, float& l, float& alpha) {
  constexpr int NC = KT / X::W;
  using V = typename X::V;
  const V neg_inf = X::set1(-INFINITY), sc = X::set1(scale);
  V sv[NC];
  V mx = neg_inf;
  for (int c = 0; c < NC; ++c) {
    sv[c] = X::select(mask >> (X::W * c), X::mul(X::load(s + X::W * c), sc), neg_inf);
    mx = X::max(mx, sv[c]);
  }
  const float tile_max = hmax8(X::max8(mx));
  const float m_new = tile_max > m ? tile_max : m;
  const V mn = X::set1(m_new);
  __m256 sum = _mm256_setzero_ps();
  for (int c = 0; c < NC; ++c) {
    const V p = exp_lanes<X>(X::sub(sv[c], mn));
    X::store(s + X::W * c, p);
    sum = X::add8(sum, p);
  }
  // exp1(0) is 1 exactly: a tile that leaves the max where it was (most tiles of a long row)
  // skips the scalar exp, same bits.
  alpha = m_new == m ? 1.0f : exp1(m - m_new);
  l = __builtin_fmaf(l, alpha, hsum8(sum));
  m = m_new;
}

// A row's entries in LOGICAL order: entry t < tree_base is cache entry t; entry tree_base + j is
// the j-th set bit of tree_bits (a node's ancestors in depth order, then itself), i.e. where the
// accepted path's entries stand once they are moved to their positions. So a tree row reads the
// same values at the same logical indices as the decode row it equals after acceptance, and
// every sum runs in the same order: identical bits whatever the branch layout.
int logical_len(const AttentionArgs& a, int i) {
  const int len = a.len[i];
  if (a.tree_bits == nullptr || len <= a.tree_base[i]) return len;
  const int span = len - a.tree_base[i];
  const uint64_t bits = span >= 64 ? a.tree_bits[i] : a.tree_bits[i] & ((uint64_t{1} << span) - 1);
  return a.tree_base[i] + __builtin_popcountll(bits);
}

// Whether row i's logical entries [t0, min(t0 + kt, llog)) are its cache entries in place (no
// gather): the tree bits below that end are all set.
bool in_place(const AttentionArgs& a, int i, int t0, int kt, int llog) {
  if (a.tree_bits == nullptr) return true;
  const int end = (t0 + kt < llog ? t0 + kt : llog) - a.tree_base[i];
  if (end <= 0) return true;
  if (end >= 64) return a.tree_bits[i] == ~uint64_t{0};
  const uint64_t low = (uint64_t{1} << end) - 1;
  return (a.tree_bits[i] & low) == low;
}

// Copies row i's logical entries [t0, t0 + n) of one kv head (base: its entry 0, elements of
// a.kv_type) to dst [n, hd] as f32; the rest of the tile (up to kt) is zero.
void gather_tile(const AttentionArgs& a, int i, const uint8_t* base, int t0, int n, int kt, int hd,
                 float* dst) {
  const int64_t eb = kv_type_bytes(a.kv_type);
  uint64_t bits = a.tree_bits[i];
  int j = 0;  // logical tree index of the next set bit
  for (int t = t0; t < t0 + n; ++t) {
    int phys = t;
    if (t >= a.tree_base[i]) {
      const int want = t - a.tree_base[i];
      for (; j < want; ++j) bits &= bits - 1;  // drop set bits below the wanted one
      phys = a.tree_base[i] + __builtin_ctzll(bits);
    }
    to_f32(base + static_cast<int64_t>(phys) * hd * eb, a.kv_type, hd, dst + (t - t0) * hd);
  }
  std::memset(dst + n * hd, 0, sizeof(float) * (kt - n) * hd);
}

// Bits t < (llog - t0) of a tile: the row's logical entries are a prefix.
uint32_t prefix_mask(int t0, int kt, int llog) {
  const int n = llog - t0 < kt ? llog - t0 : kt;
  return n >= 32 ? 0xffffffffu : (uint32_t{1} << n) - 1;
}

struct Shape {
  int group;       // query heads per kv head
  int head_chunk;  // query heads of a group per task
  int n_chunks;    // head chunks per group
  int block_rows;  // rows per block
  int64_t n_blocks;
};

Shape shape_of(const AttentionArgs& a) {
  if (a.head_dim <= 0 || a.head_dim % 8 != 0 || a.head_dim > kMaxHeadDim)
    throw std::invalid_argument("attention: head_dim must be a multiple of 8, at most 256");
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    throw std::invalid_argument("attention: n_heads must be a multiple of n_kv_heads");
  if (a.prompt_from < a.n_rows && a.head_dim % 16 != 0)
    throw std::invalid_argument("attention: prompt rows need head_dim a multiple of 16");
  Shape s;
  s.group = a.n_heads / a.n_kv_heads;
  s.head_chunk = s.group < kMaxQueries ? s.group : kMaxQueries;
  s.n_chunks = (s.group + s.head_chunk - 1) / s.head_chunk;
  // Blocks of block_rows(aim) rows; the aim doubles while the tasks stay >= 2 per worker, and
  // only where the rows read on average at least as many entries as there are rows: then the
  // K / V tile work the blocks share outweighs the causal imbalance between fewer, larger blocks
  // (a first prompt chunk, at context 0, keeps many small tasks). A decode or verify call keeps
  // the smallest blocks. No row's bits depend on it (attention.h).
  auto block_rows = [&](int aim) { return aim / s.head_chunk > 1 ? aim / s.head_chunk : 1; };
  auto tasks = [&](int aim) {
    const int64_t br = block_rows(aim);
    return (a.n_rows + br - 1) / br * a.n_kv_heads * s.n_chunks;
  };
  int aim = a.prompt_from < a.n_rows ? kBlockQueriesPrompt : kBlockQueries;
  int64_t entries = 0;  // the rows' lengths, summed (an upper bound on what a tree row reads)
  for (int i = 0; a.workers > 0 && a.len != nullptr && i < a.n_rows; ++i) entries += a.len[i];
  if (entries >= int64_t{a.n_rows} * a.n_rows)
    while (2 * aim <= kMaxQueries && tasks(2 * aim) >= 2 * int64_t{a.workers}) aim *= 2;
  s.block_rows = block_rows(aim);
  s.n_blocks = (a.n_rows + s.block_rows - 1) / s.block_rows;
  return s;
}

// A task's per-query state for up to kMaxQueries queries (1.3 MB: not on the stack), one per
// thread, kept between calls; o is 64-byte aligned, and o, s, q2 and p2 rows are whole vectors.
struct SliceScratch {
  float* o;          // [nq, hd] unnormalised outputs
  float* s;          // [nq, KT] a tile's scores, then probabilities
  uint32_t* q2;      // [nq, hd / 2] the queries' bf16 / int16 pairs (prompt rows)
  uint32_t* p2;      // [nq, KT / 2] the probabilities' bf16 / int16 pairs (prompt rows)
  float *m, *l;      // [nq] running max and sum
  float* qs;         // [nq] the queries' int16 scales
  int* llog;         // [rows] logical lengths
  const float** qp;  // [nq] the queries
};

SliceScratch slice_scratch() {
  constexpr size_t Q = kMaxQueries;
  constexpr size_t kBytes = Q * sizeof(const float*)                         // qp
                            + Q * (kMaxHeadDim + KT + 3) * sizeof(float)     // o, s, m, l, qs
                            + Q * (kMaxHeadDim + KT) / 2 * sizeof(uint32_t)  // q2, p2
                            + Q * sizeof(int);                               // llog
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local const std::unique_ptr<uint8_t, Free> buf(
      static_cast<uint8_t*>(std::aligned_alloc(64, (kBytes + 63) / 64 * 64)));
  if (!buf) throw std::bad_alloc();
  SliceScratch sc;
  sc.qp = reinterpret_cast<const float**>(buf.get());
  sc.o = reinterpret_cast<float*>(sc.qp + Q);
  sc.s = sc.o + Q * kMaxHeadDim;
  sc.m = sc.s + Q * KT;
  sc.l = sc.m + Q;
  sc.qs = sc.l + Q;
  sc.q2 = reinterpret_cast<uint32_t*>(sc.qs + Q);
  sc.p2 = sc.q2 + Q * kMaxHeadDim / 2;
  sc.llog = reinterpret_cast<int*>(sc.p2 + Q * KT / 2);
  return sc;
}

// Rows [r0, r1) (one slice, all of them prompt rows unless M is F32), query heads [h0, h1) of kv
// head g.
template <RowMath M>
void run_slice(const AttentionArgs& a, int r0, int r1, int g, int h0, int h1) {
  const int hd = a.head_dim, nh = h1 - h0, nq = (r1 - r0) * nh;
  alignas(32) float kt_buf[kMaxHeadDim * KT];
  alignas(32) float gk_buf[kMaxHeadDim * KT];  // a gathered K tile [KT, hd] (tree rows)
  alignas(32) float gv_buf[kMaxHeadDim * KT];  // its V tile
  const SliceScratch sc = slice_scratch();
  float *o_buf = sc.o, *s_buf = sc.s, *m = sc.m, *l = sc.l;
  int* llog = sc.llog;
  const float** qp = sc.qp;
  // Prompt rows (attention_bf16.h, attention_int16.h): the queries', the tile's and the
  // probabilities' bf16 / int16 pairs (a dependent type: the AVX2 build, which never runs bf16
  // rows, has no attention_bf16.h).
  constexpr bool kPairs = M != RowMath::F32;
  using U32 = std::conditional_t<kPairs, uint32_t, uint32_t>;
  U32 *q2_buf = sc.q2, *p2_buf = sc.p2;
  float* qs = sc.qs;
  alignas(64) uint32_t kp_buf[kPairs ? KT * kMaxHeadDim / 2 : 1];  // [KT, hd / 2] before kt2
  alignas(64) uint32_t kt2_buf[kPairs ? KT * kMaxHeadDim / 2 : 1];
  alignas(64) uint32_t v2_buf[kPairs ? KT * kMaxHeadDim / 2 : 1];
  const float qk_r = qk_range(hd);  // int16 codes of q and k in [-qk_r, qk_r]
  std::memset(o_buf, 0, sizeof(float) * nq * hd);
  int max_len = 0;
  for (int r = r0; r < r1; ++r) {
    llog[r - r0] = logical_len(a, r);
    max_len = llog[r - r0] > max_len ? llog[r - r0] : max_len;
  }
  for (int j = 0; j < nq; ++j) {
    qp[j] = a.q + (r0 + j / nh) * a.q_stride + (h0 + j % nh) * hd;
    m[j] = -FLT_MAX;
    l[j] = 0.0f;
  }
  if constexpr (M == RowMath::Bf16 && kHaveBf16)
    for (int j = 0; j < nq; ++j) to_bf16_pairs(qp[j], hd, q2_buf + j * (hd / 2));
  if constexpr (M == RowMath::Int16)
    for (int j = 0; j < nq; ++j) qs[j] = to_i16_pairs(qp[j], hd, qk_r, q2_buf + j * (hd / 2));
  const int64_t eb = kv_type_bytes(a.kv_type);
  const uint8_t* kb = static_cast<const uint8_t*>(a.k[r0]) + g * a.kv_head_stride * eb;
  const uint8_t* vb = static_cast<const uint8_t*>(a.v[r0]) + g * a.kv_head_stride * eb;
  // One key tile (K [kt, hd] and V [kt, hd], f32) for the active queries act[0, n_act).
  auto tile = [&](const int* act, const uint32_t* mask, int n_act, const float* kf, const float* vt,
                  int kt) {
    float* sa[kMaxQueries];
    float* oa[kMaxQueries];
    float aa[kMaxQueries];
    for (int x = 0; x < n_act; ++x) {
      sa[x] = s_buf + act[x] * KT;
      oa[x] = o_buf + act[x] * hd;
    }
    if constexpr (M == RowMath::Int16) {
      const uint32_t* qa[kMaxQueries];
      const uint32_t* pa[kMaxQueries];
      float sqa[kMaxQueries], spa[kMaxQueries];
      alignas(32) float sk[KT], sv[KT];
      for (int x = 0; x < n_act; ++x) {
        qa[x] = q2_buf + act[x] * (hd / 2);
        pa[x] = p2_buf + act[x] * (KT / 2);
        sqa[x] = qs[act[x]];
      }
      k_i16_tile(kf, kt, hd, qk_r, kp_buf, kt2_buf, sk);
      v_i16_tile(vt, kt, hd, kp_buf, v2_buf, sv);
      scores_i16(n_act, qa, sqa, kt2_buf, sk, hd, sa);
      for (int x = 0; x < n_act; ++x) {  // scale, mask, online softmax update; p to int16
        softmax_tile<WideVec>(sa[x], mask[x], a.scale, m[act[x]], l[act[x]], aa[x]);
        spa[x] = p_i16_pairs(sa[x], sv, p2_buf + act[x] * (KT / 2));
      }
      pv_i16(n_act, pa, spa, v2_buf, (kt + 1) / 2, hd, oa, aa);
    } else if constexpr (M == RowMath::Bf16 && kHaveBf16) {
      const uint32_t* qa[kMaxQueries];
      const uint32_t* pa[kMaxQueries];
      for (int x = 0; x < n_act; ++x) {
        qa[x] = q2_buf + act[x] * (hd / 2);
        pa[x] = p2_buf + act[x] * (KT / 2);
      }
      k_pairs_tile(kf, kt, hd, kp_buf, kt2_buf);
      v_pairs_tile(vt, kt, hd, v2_buf);
      scores_bf16(n_act, qa, kt2_buf, hd, sa);
      for (int x = 0; x < n_act; ++x) {  // scale, mask, online softmax update; p to bf16
        softmax_tile<WideVec>(sa[x], mask[x], a.scale, m[act[x]], l[act[x]], aa[x]);
        p_pairs(sa[x], p2_buf + act[x] * (KT / 2));
      }
      pv_bf16(n_act, pa, v2_buf, (kt + 1) / 2, hd, oa, aa);
    } else {
      const float* qa[kMaxQueries];
      for (int x = 0; x < n_act; ++x) qa[x] = qp[act[x]];
      transpose_tile(kf, kt, hd, kt_buf);
      register_tiles<kScoreQueries>(n_act, [&](auto nq, int x) {
        scores_tile<WideVec, decltype(nq)::value>(qa + x, kt_buf, hd, sa + x);
      });
      for (int x = 0; x < n_act; ++x)  // scale, mask, online softmax update
        softmax_tile<WideVec>(sa[x], mask[x], a.scale, m[act[x]], l[act[x]], aa[x]);
      const float* pa[kMaxQueries];
      for (int x = 0; x < n_act; ++x) pa[x] = sa[x];
      register_tiles<6>(n_act, [&](auto nq, int x) {
        pv_tile<decltype(nq)::value>(pa + x, vt, kt, hd, oa + x, aa + x);
      });
    }
  };
  for (int t0 = 0; t0 < max_len; t0 += KT) {
    const int kt = a.max_seq - t0 < KT ? a.max_seq - t0 : KT;
    int act[kMaxQueries], n_act = 0;  // active queries reading the tile in place, in order
    uint32_t mask[kMaxQueries];
    int gathered[kMaxQueries], n_gathered = 0;  // rows whose tile is gathered
    for (int r = r0; r < r1; ++r) {
      const int lr = llog[r - r0];
      if (lr <= t0) continue;
      if (!in_place(a, r, t0, kt, lr)) {
        gathered[n_gathered++] = r;
        continue;
      }
      const uint32_t rm = prefix_mask(t0, kt, lr);
      for (int h = 0; h < nh; ++h) {
        act[n_act] = (r - r0) * nh + h;
        mask[n_act++] = rm;
      }
    }
    if (n_act > 0) {
      const uint8_t* kp = kb + static_cast<int64_t>(t0) * hd * eb;
      const uint8_t* vp = vb + static_cast<int64_t>(t0) * hd * eb;
      if (a.kv_type == KvType::F32) {  // in place
        tile(act, mask, n_act, reinterpret_cast<const float*>(kp),
             reinterpret_cast<const float*>(vp), kt);
      } else {  // converted (through the gather buffers, free until the gathered rows below)
        to_f32(kp, a.kv_type, static_cast<int64_t>(kt) * hd, gk_buf);
        to_f32(vp, a.kv_type, static_cast<int64_t>(kt) * hd, gv_buf);
        tile(act, mask, n_act, gk_buf, gv_buf, kt);
      }
    }
    for (int x = 0; x < n_gathered; ++x) {
      const int r = gathered[x], lr = llog[r - r0];
      const int n = lr - t0 < kt ? lr - t0 : kt;
      gather_tile(a, r, kb, t0, n, kt, hd, gk_buf);
      gather_tile(a, r, vb, t0, n, kt, hd, gv_buf);
      int ract[kMaxQueries];
      uint32_t rmask[kMaxQueries];
      const uint32_t rm = prefix_mask(t0, kt, lr);
      for (int h = 0; h < nh; ++h) {
        ract[h] = (r - r0) * nh + h;
        rmask[h] = rm;
      }
      tile(ract, rmask, nh, gk_buf, gv_buf, kt);
    }
  }
  for (int j = 0; j < nq; ++j) {
    const __m256 inv = _mm256_set1_ps(1.0f / l[j]);
    float* dst = a.out + (r0 + j / nh) * a.out_stride + (h0 + j % nh) * hd;
    for (int d = 0; d < hd; d += 8)
      _mm256_storeu_ps(dst + d, _mm256_mul_ps(_mm256_loadu_ps(o_buf + j * hd + d), inv));
  }
}

void run_tasks(const AttentionArgs& a, int64_t task0, int64_t task1) {
  if (task0 >= task1) return;
  const Shape s = shape_of(a);
  for (int64_t task = task0; task < task1; ++task) {
    const int c = static_cast<int>(task % s.n_chunks);
    const int g = static_cast<int>(task / s.n_chunks % a.n_kv_heads);
    const int64_t b = task / s.n_chunks / a.n_kv_heads;
    const int i0 = static_cast<int>(b * s.block_rows);
    const int i1 = i0 + s.block_rows < a.n_rows ? i0 + s.block_rows : a.n_rows;
    const int h0 = g * s.group + c * s.head_chunk;
    const int h1 = h0 + s.head_chunk < (g + 1) * s.group ? h0 + s.head_chunk : (g + 1) * s.group;
    for (int r0 = i0; r0 < i1;) {  // runs of rows sharing a slice and a precision
      const bool prompt = r0 >= a.prompt_from;
      int r1 = r0 + 1;
      while (r1 < i1 && a.k[r1] == a.k[r0] && a.v[r1] == a.v[r0] && (r1 >= a.prompt_from) == prompt)
        ++r1;
      if (!prompt) {
        run_slice<RowMath::F32>(a, r0, r1, g, h0, h1);
      } else if (a.prompt_math == PromptMath::Int16) {
        run_slice<RowMath::Int16>(a, r0, r1, g, h0, h1);
      } else if (kHaveBf16) {
        run_slice<RowMath::Bf16>(a, r0, r1, g, h0, h1);
      } else {
        throw std::logic_error("attention: bf16 rows in a build without AVX512_BF16");
      }
      r0 = r1;
    }
  }
}

}  // namespace
}  // namespace trt_spec::cpu
