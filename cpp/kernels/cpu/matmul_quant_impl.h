// matmul_quant_impl.h: activation quantization and the Q8 / Q4 CPU matmul (part of
// matmul_impl.h).
//
// Included by matmul_impl.h inside the anonymous namespace of an ISA translation unit.
//
// Lane layout. A 128-column chunk holds 4 groups A, B, C, D of 32 columns; word k of a group is
// its columns 4k..4k+3. The chunk is stored (activations, by quantize_acts) and decoded
// (weights, by interleave4) as 4 vectors of 8 words each:
//   vector k = [A_k B_k C_k D_k | A_k+4 B_k+4 C_k+4 D_k+4]        k = 0..3
// so every 32-bit lane of a product vector belongs to one group. A tile sums the 4 vectors'
// integer products per lane (Isa::dot4: int16 sums then one pmaddwd on AVX2, a vpdpbusd chain on
// AVX-512) and converts once per chunk: acc += float(lanes) * [sA sB sC sD sA sB sC sD], with
// s = d_w * d_x per group, instead of one conversion and one FMA per group. A 64-column tail
// (cols % 128 == 64) uses 2 vectors [A_k B_k A_k+1 B_k+1 | A_k+4 B_k+4 A_k+5 B_k+5], k = 0, 2,
// with scales [sA sB sA sB ...].
//
// Per group of 8 (256 columns) the tile also adds the offset term o_w * ds (Q4: o_w = m; Q8 with
// unsigned codes on AVX-512: o_w = -128 d_w), ds = d_x * sum(q_x) per group.
//
// That is the AVX2 unit's layout and tile. The AVX-512 unit stores activations and reads weights
// in 512-column chunks of 8 vectors [g0_k .. g15_k] instead, one group per 32-bit lane, with its
// own quantize_acts and tile (matmul_quant512_impl.h); the two units share quantize_group and the
// walk (matmul_quant_t), with column blocks of whole chunks (kQuantColStep).
#pragma once

constexpr int64_t kQuantL1Bytes = 20 * 1024;   // one m tile's activations in a column block
constexpr int64_t kQuantL2Bytes = 192 * 1024;  // one block's activations
constexpr int kPrefetchRows = 2;               // rows ahead the weights are prefetched

// Whether a tile adds the per-group offset term o_w * ds (see the top of this file), and the code
// bytes of two columns of a row.
template <WeightType T>
constexpr bool kQuantOffsets = T == WeightType::Q4 || Isa::kQ8Bias != 0.0f;
template <WeightType T>
constexpr int64_t kCodeBytesPer2Cols = T == WeightType::Q4 ? 1 : 2;

// The 4 vectors of a 128-column chunk from its natural groups a, b, c, d (32 bytes each).
inline void interleave4(__m256i a, __m256i b, __m256i c, __m256i d, __m256i v[4]) {
  const __m256i ab0 = _mm256_unpacklo_epi32(a, b), ab1 = _mm256_unpackhi_epi32(a, b);
  const __m256i cd0 = _mm256_unpacklo_epi32(c, d), cd1 = _mm256_unpackhi_epi32(c, d);
  v[0] = _mm256_unpacklo_epi64(ab0, cd0);
  v[1] = _mm256_unpackhi_epi64(ab0, cd0);
  v[2] = _mm256_unpacklo_epi64(ab1, cd1);
  v[3] = _mm256_unpackhi_epi64(ab1, cd1);
}

// The 2 vectors of a 64-column tail from its natural groups a, b.
inline void interleave2(__m256i a, __m256i b, __m256i v[2]) {
  v[0] = _mm256_unpacklo_epi32(a, b);
  v[1] = _mm256_unpackhi_epi32(a, b);
}

// ------------------------------------------------------------------------------------------
// Activation quantization: per group of 32, d = max|x| / 127, q = round_even(x / d); q stored in
// the lane layout above.

// One group of 32 floats -> 32 int8 codes in column order; *d and *ds get its scale and d*sum(q).
inline __m256i quantize_group(const float* p, float* d_out, float* ds_out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(p + 8 * i);
  __m256 amax =
      _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                    _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
  __m128 a4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  a4 = _mm_max_ps(a4, _mm_movehl_ps(a4, a4));
  a4 = _mm_max_ss(a4, _mm_movehdup_ps(a4));
  const float d = _mm_cvtss_f32(a4) / 127.0f;
  const __m256 id = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
  __m256i q[4];  // cvtps rounds to nearest even under the default MXCSR
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  const __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  *d_out = d;
  *ds_out = d * static_cast<float>(_mm_cvtsi128_si32(s4));
  // packs work per 128-bit lane: q0 q1 -> [q0lo q1lo | q0hi q1hi]; the permute restores order.
  const __m256i p8 =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  return _mm256_permutevar8x32_epi32(p8, perm);
}

#if !defined(__AVX512VNNI__)  // (the AVX-512 unit stores its own layout: matmul_quant512_impl.h)
void quantize_acts(const float* x, int m0, int m1, QuantActs out) {
  const int cols = out.cols, groups = cols / kQuantGroup;
  for (int m = m0; m < m1; ++m) {
    const float* xr = x + int64_t{m} * cols;                             // [cols]
    __m256i* q = reinterpret_cast<__m256i*>(out.q + int64_t{m} * cols);  // [cols / 32] vectors
    float* d = out.d + int64_t{m} * groups;
    float* ds = out.ds + int64_t{m} * groups;
    for (int g = 0; g < groups; g += 4) {
      auto group = [&](int i) {
        return quantize_group(xr + (g + i) * kQuantGroup, d + g + i, ds + g + i);
      };
      __m256i v[4];
      const __m256i a = group(0), b = group(1);
      if (g + 4 <= groups) {  // a 128-column chunk
        const __m256i c = group(2);
        interleave4(a, b, c, group(3), v);
        for (int i = 0; i < 4; ++i) _mm256_storeu_si256(q + g + i, v[i]);
      } else {  // the 64-column tail
        interleave2(a, b, v);
        for (int i = 0; i < 2; ++i) _mm256_storeu_si256(q + g + i, v[i]);
      }
    }
  }
}
#endif

// ------------------------------------------------------------------------------------------
// Quantized weights (Q8 / Q4).

struct QuantArgs {
  const uint8_t* codes;  // section 0
  const uint16_t* d;     // [rows, groups] f16 scales
  const uint16_t* m;     // [rows, groups] f16 offsets (Q4 only)
  const QuantActs* x;
  int64_t cols;
  float* y;
  int64_t ldy;
};

// Lanes [0, n) of a vector of 8 set (all bits), the rest clear.
inline __m256i lane_mask8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// 8 consecutive f16 values (n <= 8 of them, the rest zero) as floats. A block of fewer than 8
// groups (the last of a row whose groups are not a multiple of 8, e.g. 896 columns) has an even
// n (cols % 64 == 0): a masked load of n / 2 words, which reads nothing past them. (Copying
// through a stack buffer cost a libc memcpy call and a store-forwarding stall per load: four per
// row, which doubled a 1-row matmul's time at 896 columns.)
inline __m256 load8_f16(const uint16_t* p, int n) {
  if (n == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if (n % 2 == 0) {
    const __m128i words = _mm_cmpgt_epi32(_mm_set1_epi32(n / 2), _mm_setr_epi32(0, 1, 2, 3));
    return _mm256_cvtph_ps(_mm_maskload_epi32(reinterpret_cast<const int*>(p), words));
  }
  alignas(16) uint16_t t[8] = {};
  std::memcpy(t, p, n * 2);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

inline __m256 load8_f32(const float* p, int n) {
  if (n == 8) return _mm256_loadu_ps(p);
  return _mm256_maskload_ps(p, lane_mask8(n));
}

// The n (4 or 2) decoded weight vectors of one chunk of one row, in the lane layout.
// Q4: p = the chunk's n / 2 super-blocks (32 bytes each: low nibbles one group, high the next).
// Q8: p = the chunk's n groups of 32 codes q = w + 128.
// Lanes: the codes are stored in the lane layout already (repack_lanes.h): no interleave.
template <WeightType T, int N, bool Lanes>
inline void decode_chunk(const uint8_t* p, typename Isa::template WVec<T>* out) {
  __m256i nat[4], v[4];
  if constexpr (T == WeightType::Q4) {
    const __m256i mask = _mm256_set1_epi8(0x0f);
    for (int s = 0; s < N / 2; ++s) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p) + s);
      nat[2 * s] = _mm256_and_si256(b, mask);
      nat[2 * s + 1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), mask);
    }
  } else {
    for (int s = 0; s < N; ++s)
      nat[s] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p) + s);
  }
  if constexpr (Lanes) {
    for (int i = 0; i < N; ++i) v[i] = nat[i];
  } else if constexpr (N == 4) {
    interleave4(nat[0], nat[1], nat[2], nat[3], v);
  } else {
    interleave2(nat[0], nat[1], v);
  }
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) out[i] = Isa::template wvec<T>(v[i]);
}

#if defined(__AVX512VNNI__)
#include "kernels/cpu/matmul_quant512_impl.h"
template <WeightType T, bool Lanes>
using QuantTileIsa = QuantTile512<T, Lanes>;  // the AVX-512 translation unit
constexpr int kQuantMaxMt = 12;               // activation rows per tile (32 vector registers)
#else
constexpr int64_t kQuantColStep = 256;  // column blocks are whole blocks of 8 groups
constexpr CodeLayout kQuantLanes = CodeLayout::Lanes128;

template <WeightType T, bool Lanes>
struct QuantTile {
  static constexpr bool kOffsets = kQuantOffsets<T>;
  static constexpr int64_t kRowBytesPerCol2 = kCodeBytesPer2Cols<T>;

  template <int MT>
  struct K {
    // Weight rows [r0, r1) x activation rows [m0, m0 + MT), columns [c0, c1).
    static void run(const QuantArgs& a, int64_t r0, int64_t r1, int m0, int64_t c0, int64_t c1,
                    const Spill& sp) {
      for (int64_t r = r0; r < r1; ++r) row(a, r, m0, c0, c1, sp.row(r - r0));
    }

    // One weight row. Not inlined into run(): inlined, the 8,960-column down projection (column
    // blocks, spilled accumulators) ran 1.5x slower in bench_cpu_matmul.
    static __attribute__((noinline)) void row(const QuantArgs& a, int64_t r, int m0, int64_t c0,
                                              int64_t c1, Spill sp) {
      using WV = typename Isa::template WVec<T>;
      const int64_t cols = a.cols, groups = cols / kQuantGroup;
      const int64_t row_bytes = cols * kRowBytesPerCol2 / 2;
      const uint8_t* wrow = a.codes + r * row_bytes;
      const int8_t* xq = a.x->q + int64_t{m0} * cols;  // [MT, cols], lane layout
      __m256 acc[MT];
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m)
        acc[m] = c0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(sp.at(0, m, 8));
      alignas(32) float sc[MT][8];  // d_w * d_x of the 8 groups of the current block

      for (int64_t g0 = c0 / kQuantGroup; g0 < c1 / kQuantGroup; g0 += 8) {
        const int ng = static_cast<int>(imin<int64_t>(8, c1 / kQuantGroup - g0));
        prefetch(a.d + (r + kPrefetchRows) * groups + g0);
        if constexpr (T == WeightType::Q4) prefetch(a.m + (r + kPrefetchRows) * groups + g0);
        const __m256 dw = load8_f16(a.d + r * groups + g0, ng);
        __m256 ow = _mm256_setzero_ps();
        if constexpr (T == WeightType::Q4) {
          ow = load8_f16(a.m + r * groups + g0, ng);
        } else if constexpr (kOffsets) {
          ow = _mm256_mul_ps(dw, _mm256_set1_ps(Isa::kQ8Bias));
        }
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const int64_t gi = (m0 + m) * groups + g0;
          _mm256_store_ps(sc[m], _mm256_mul_ps(dw, load8_f32(a.x->d + gi, ng)));
          if constexpr (kOffsets) acc[m] = _mm256_fmadd_ps(ow, load8_f32(a.x->ds + gi, ng), acc[m]);
        }
        int j = 0;
        for (; j + 4 <= ng; j += 4) {  // 128-column chunks
          const int64_t c = (g0 + j) * kQuantGroup;
          const uint8_t* p = wrow + c * kRowBytesPerCol2 / 2;
          for (int64_t o = 0; o < 128 * kRowBytesPerCol2 / 2; o += 64)
            prefetch(p + kPrefetchRows * row_bytes + o);
          WV wv[4];
          decode_chunk<T, 4, Lanes>(p, wv);
#pragma GCC unroll 16
          for (int m = 0; m < MT; ++m) {
            const __m256i dot = Isa::template dot<T, 4>(wv, xq + m * cols + c);
            acc[m] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(dot),
                _mm256_broadcast_ps(reinterpret_cast<const __m128*>(&sc[m][j])), acc[m]);
          }
        }
        if (j < ng) {  // the 64-column tail of the matrix
          const int64_t c = (g0 + j) * kQuantGroup;
          const uint8_t* p = wrow + c * kRowBytesPerCol2 / 2;
          WV wv[2];
          decode_chunk<T, 2, Lanes>(p, wv);
#pragma GCC unroll 16
          for (int m = 0; m < MT; ++m) {
            const __m256i dot = Isa::template dot<T, 2>(wv, xq + m * cols + c);
            const __m256 s =
                _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(&sc[m][j])));
            acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, acc[m]);
          }
        }
      }
      if (c1 < cols) {  // not the last column block: keep the accumulators
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) _mm256_storeu_ps(sp.at(0, m, 8), acc[m]);
        return;
      }
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) a.y[(m0 + m) * a.ldy + r] = hsum256(acc[m]);
    }
  };
};

template <WeightType T, bool Lanes>
using QuantTileIsa = QuantTile<T, Lanes>;
constexpr int kQuantMaxMt = 8;  // activation rows per tile (16 vector registers)
#endif

// Quantized kernels: 1 weight row x up to kQuantMaxMt activation rows at a time (the 256-bit tile:
// 8 accumulators + 4 decoded weight vectors + temporaries fill the 16 vector registers), one call
// walking a panel's rows (no row tiles: rows_for stays empty). Q4 runs at most 6 on AVX2 (measured
// faster than 8 on Zen 1); the AVX-512 tile takes up to 12.
template <WeightType T>
constexpr TilePolicy kQuantTiles =
    kQuantMaxMt > 8 ? TilePolicy{kQuantMaxMt, kQuantMaxMt, {}}
                    : (T == WeightType::Q4 ? TilePolicy{8, 6, {}} : TilePolicy{8, 8, {}});

// The rows x MT tile (MT <= kQuantMaxMt).
template <WeightType T, bool Lanes, class Fn>
Fn quant_tile_fn(int MT) {
  using Q = QuantTileIsa<T, Lanes>;
  switch (MT) {
    case 1: return &Q::template K<1>::run;
    case 2: return &Q::template K<2>::run;
    case 3: return &Q::template K<3>::run;
    case 4: return &Q::template K<4>::run;
    case 5: return &Q::template K<5>::run;
    case 6: return &Q::template K<6>::run;
    case 7: return &Q::template K<7>::run;
    case 8: return &Q::template K<8>::run;
  }
  if constexpr (kQuantMaxMt > 8) {
    switch (MT) {
      case 9: return &Q::template K<9>::run;
      case 10: return &Q::template K<10>::run;
      case 11: return &Q::template K<11>::run;
      default: return &Q::template K<12>::run;
    }
  }
  return &Q::template K<8>::run;
}
static_assert(kQuantTiles<WeightType::Q8>.small_max <= kQuantMaxMt &&
                  kQuantTiles<WeightType::Q8>.big_mt <= kQuantMaxMt &&
                  kQuantTiles<WeightType::Q4>.small_max <= kQuantMaxMt &&
                  kQuantTiles<WeightType::Q4>.big_mt <= kQuantMaxMt,
              "see quant_tile_fn");

template <WeightType T>
void matmul_quant_t(WeightView w, const QuantActs& x, int M, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  using Fn = void (*)(const QuantArgs&, int64_t, int64_t, int, int64_t, int64_t, const Spill&);
  const QuantArgs a{section_ptr(w, 0),
                    reinterpret_cast<const uint16_t*>(section_ptr(w, 1)),
                    reinterpret_cast<const uint16_t*>(section_ptr(w, 2)),
                    &x,
                    w.cols,
                    y,
                    ldy};
  if (w.layout != CodeLayout::Natural && w.layout != kQuantLanes)
    throw std::invalid_argument("matmul_quant: codes repacked for another ISA's tile");
  const bool lanes = w.layout == kQuantLanes;
  // Column blocks of whole chunks (kQuantColStep); activation row blocks whose quantized rows
  // (cols bytes + 8 bytes per group) fit kQuantL2Bytes.
  constexpr TilePolicy tiles = kQuantTiles<T>;
  const int mt = imin(M, tiles.big_mt);
  const int64_t kc =
      imax<int64_t>(kQuantColStep, kQuantL1Bytes / mt / kQuantColStep * kQuantColStep);
  const int mb =
      static_cast<int>(imax<int64_t>(tiles.big_mt, kQuantL2Bytes / (w.cols + w.cols / 4) / 8 * 8));
  drive(tiles, M, r0, r1, w.cols, kc, mb,
        [&](int MT, int64_t ra, int64_t rb, int m, int64_t c0, int64_t c1, const Spill& sp) {
          (lanes ? quant_tile_fn<T, true, Fn>(MT) : quant_tile_fn<T, false, Fn>(MT))(a, ra, rb, m,
                                                                                     c0, c1, sp);
        });
}

void matmul_quant(WeightView w, const QuantActs& x, int M, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  switch (w.type) {
    case WeightType::Q8: return matmul_quant_t<WeightType::Q8>(w, x, M, y, ldy, r0, r1);
    case WeightType::Q4: return matmul_quant_t<WeightType::Q4>(w, x, M, y, ldy, r0, r1);
    default: throw std::invalid_argument("matmul_quant: weight type is not Q8/Q4");
  }
}
