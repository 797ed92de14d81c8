// matmul_impl.h: the ISA-generic body of the CPU matmul kernels.
//
// Included by matmul_avx2.cpp and matmul_avx512.cpp after each defines `struct Isa`, its vector
// primitives (listed in matmul_avx2.cpp). Everything here lives in an anonymous namespace, so the
// two translation units, built with different -m flags, never share a symbol; for the same reason
// this code calls no inline function with external linkage that the compiler might emit out of
// line (the linker would keep one copy, possibly the AVX-512 one, for both): no std::min/max, and
// section pointers come from section_ptr() below instead of WeightView::section().
//
// Structure (both ISAs): a tile computes R output rows x MT activation rows over a column range,
// keeping R*MT vector accumulators in registers and loading (and decoding) each weight vector
// once for the MT rows; it prefetches the next row tile's weights. drive() walks the tiles: for
// M <= 9 one M tile holds every row of x, so each weight is read once; larger M runs tiles of
// TilePolicy::big_rows x big_m over column blocks sized so the activation block stays in L2,
// accumulating into y between blocks.
//
// Quantized weights: per group of 32 columns the integer dot product of the weight codes with the
// int8 activations (Isa::dot_q4 / Isa::dot_q8, 8 int32 partial sums) is converted to float and
// multiplied by d_w * d_x; the offset term sum_g o_w[g] * ds[g] (Q4: o_w = m; Q8 with unsigned
// codes: o_w = -128 * d_w) is a separate vector FMA per 8 groups.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/weight_format.h"

namespace trt_spec::cpu {
namespace {

constexpr int kMaxSmallM = 9;  // M held in one tile
// Up to this M every output is one pass over all columns, accumulated in the same order as for
// M = 1 (tiles of 1 x up to kMaxSmallM rows, no column blocks): a row's result does not depend
// on how many rows share the call, so a K+1-row verify pass, a batch and a single decode step
// give bit-identical logits (greedy speculation is exact). Larger M (prefill) blocks columns.
constexpr int kMaxExactM = 64;

// Tile shapes: R output rows x MT activation rows. For M <= kMaxSmallM, MT = M and R comes from
// small_rows[M]; larger M uses big_rows x big_m tiles (R * MT accumulators must fit the 16
// vector registers together with the weight vectors).
struct TilePolicy {
  int small_rows[kMaxSmallM + 1];
  int big_rows, big_m;
};
constexpr TilePolicy kFloatTiles = {{1, 4, 4, 3, 2, 2, 2, 1, 1, 1}, 2, 6};
constexpr TilePolicy kQuantTiles = {{1, 4, 2, 2, 1, 1, 1, 1, 1, 1}, 1, 8};
constexpr int64_t kL2Budget = 192 * 1024;  // activation block bytes

template <class V>
inline V imin(V a, V b) {
  return a < b ? a : b;
}
template <class V>
inline V imax(V a, V b) {
  return a < b ? b : a;
}

// Start of section s of w: the layout of kernels/weight_format.h (sections padded to
// kSectionAlign), for the Q8 / Q4 sections the kernels read.
inline const uint8_t* section_ptr(const WeightView& w, int s) {
  const size_t n = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols);
  const size_t a = kSectionAlign;
  const size_t codes = ((w.type == WeightType::Q4 ? n / 2 : n) + a - 1) / a * a;
  const size_t scales = (n / kQuantGroup * 2 + a - 1) / a * a;
  return w.data + (s == 0 ? 0 : (s == 1 ? codes : codes + scales));
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Calls tile(R, MT, r, m, c0, c1, accumulate) over rows [r0, r1), M activation rows and column
// blocks of kc (a multiple of the tile's column step).
template <class Tile>
void drive(const TilePolicy& p, int M, int64_t r0, int64_t r1, int64_t cols, int64_t kc,
           const Tile& tile) {
  const bool small = M <= kMaxSmallM, exact = M <= kMaxExactM;
  const int R = small ? p.small_rows[M] : (exact ? 1 : p.big_rows);
  const int MT = small ? M : (exact ? kMaxSmallM : p.big_m);
  for (int64_t c0 = 0; c0 < cols; c0 += kc) {
    const int64_t c1 = imin(cols, c0 + kc);
    int64_t r = r0;
    for (; r + R <= r1; r += R)
      for (int m = 0; m < M; m += MT) tile(R, imin(MT, M - m), r, m, c0, c1, c0 > 0);
    for (; r < r1; ++r)
      for (int m = 0; m < M; m += MT) tile(1, imin(MT, M - m), r, m, c0, c1, c0 > 0);
  }
}

// Software prefetch of the weights kPrefetchTiles row tiles ahead: the hardware prefetcher alone
// lets the quantized kernels (more arithmetic per byte than the float ones) alternate between
// computing and waiting for DRAM. Prefetching past the matrix end is harmless.
constexpr int kPrefetchTiles = 1;
inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// The (R, MT) tile shapes instantiated, as an X-macro: tile_fn() dispatches over them and the
// static_assert below checks that they cover every shape drive() can ask for.
// clang-format off
#define TRT_SPEC_TILES(X) \
  X(4, 1) X(4, 2) X(3, 3) X(2, 1) X(2, 2) X(2, 3) X(2, 4) X(2, 5) X(2, 6) \
  X(1, 1) X(1, 2) X(1, 3) X(1, 4) X(1, 5) X(1, 6) X(1, 7) X(1, 8) X(1, 9)
// clang-format on

constexpr bool tile_listed(int R, int MT) {
#define TRT_SPEC_TILE_EQ(r, mt) || (R == r && MT == mt)
  return false TRT_SPEC_TILES(TRT_SPEC_TILE_EQ);
#undef TRT_SPEC_TILE_EQ
}

constexpr bool policy_covered(const TilePolicy& p) {
  for (int M = 1; M <= kMaxSmallM; ++M)  // one M tile; the remainder rows run with R = 1
    if (!tile_listed(p.small_rows[M], M) || !tile_listed(1, M)) return false;
  for (int mt = 1; mt <= p.big_m; ++mt)  // big tiles and their last, partial M tile
    if (!tile_listed(p.big_rows, mt) || !tile_listed(1, mt)) return false;
  return true;
}
static_assert(policy_covered(kFloatTiles) && policy_covered(kQuantTiles),
              "a tile shape drive() can ask for is missing from TRT_SPEC_TILES");

template <template <int, int> class K, class Fn>
Fn tile_fn(int R, int MT) {
#define TRT_SPEC_TILE_FN(r, mt) \
  if (R == r && MT == mt) return &K<r, mt>::run;
  TRT_SPEC_TILES(TRT_SPEC_TILE_FN)
#undef TRT_SPEC_TILE_FN
  return nullptr;  // unreachable: see policy_covered()
}

// ------------------------------------------------------------------------------------------
// Float weights (F32 / F16 / BF16).

template <WeightType T>
inline float load_scalar(const uint8_t* row, int64_t c) {
  if constexpr (T == WeightType::F32) {
    return reinterpret_cast<const float*>(row)[c];
  } else {
    const uint16_t h = reinterpret_cast<const uint16_t*>(row)[c];
    return T == WeightType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

struct FloatArgs {
  const uint8_t* w;  // weight row 0
  int64_t wstride;   // bytes per weight row
  const float* x;    // [M, cols]
  int64_t cols;
  float* y;
  int64_t ldy;
};

template <WeightType T>
struct FloatTile {
  static constexpr int64_t kElem = T == WeightType::F32 ? 4 : 2;  // bytes per weight
  template <int R, int MT>
  struct K {
    static void run(const FloatArgs& a, int64_t r0, int m0, int64_t c0, int64_t c1, bool accum) {
      using VF = typename Isa::VF;
      VF acc[R][MT];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) acc[r][m] = Isa::zero();
      const uint8_t* w = a.w + r0 * a.wstride;      // [R, cols] rows of W
      const float* x = a.x + int64_t{m0} * a.cols;  // [MT, cols] rows of x
      int64_t c = c0;
      for (; c + Isa::W <= c1; c += Isa::W) {
        VF wv[R];
        const bool line_start = ((c * kElem) & 63) == 0;  // one prefetch per cache line
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          if (line_start) prefetch(w + (r + R * kPrefetchTiles) * a.wstride + c * kElem);
          wv[r] = Isa::template load_w<T>(w + r * a.wstride, c);
        }
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const VF xv = Isa::loadu(x + m * a.cols + c);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) acc[r][m] = Isa::fma(wv[r], xv, acc[r][m]);
        }
      }
      float tail[R][MT] = {};
      for (; c < c1; ++c)
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const float wr = load_scalar<T>(w + r * a.wstride, c);
#pragma GCC unroll 16
          for (int m = 0; m < MT; ++m) tail[r][m] += wr * x[m * a.cols + c];
        }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          float& out = a.y[(m0 + m) * a.ldy + r0 + r];
          const float v = Isa::hsum(acc[r][m]) + tail[r][m];
          out = accum ? out + v : v;
        }
    }
  };
};

template <WeightType T>
void matmul_float_t(WeightView w, const float* x, int M, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  using Fn = void (*)(const FloatArgs&, int64_t, int, int64_t, int64_t, bool);
  const int64_t esize = T == WeightType::F32 ? 4 : 2;
  const FloatArgs a{w.data, w.cols * esize, x, w.cols, y, ldy};
  int64_t kc = w.cols;
  if (M > kMaxExactM) kc = imax<int64_t>(256, kL2Budget / (int64_t{M} * 4) / 64 * 64);
  drive(kFloatTiles, M, r0, r1, w.cols, kc,
        [&](int R, int MT, int64_t r, int m, int64_t c0, int64_t c1, bool accum) {
          tile_fn<FloatTile<T>::template K, Fn>(R, MT)(a, r, m, c0, c1, accum);
        });
}

void matmul_float(WeightView w, const float* x, int M, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  switch (w.type) {
    case WeightType::F32: return matmul_float_t<WeightType::F32>(w, x, M, y, ldy, r0, r1);
    case WeightType::F16: return matmul_float_t<WeightType::F16>(w, x, M, y, ldy, r0, r1);
    case WeightType::BF16: return matmul_float_t<WeightType::BF16>(w, x, M, y, ldy, r0, r1);
    default: throw std::invalid_argument("matmul_float: weight type is not F32/F16/BF16");
  }
}

// ------------------------------------------------------------------------------------------
// Activation quantization: per group of 32, d = max|x| / 127, q = round_even(x / d).

void quantize_acts(const float* x, int m0, int m1, QuantActs out) {
  const int cols = out.cols, groups = cols / kQuantGroup;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int m = m0; m < m1; ++m) {
    const float* xr = x + int64_t{m} * cols;  // [cols]
    for (int g = 0; g < groups; ++g) {
      const float* p = xr + g * kQuantGroup;
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
      const __m256i s32 =
          _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      // packs work per 128-bit lane: q0 q1 -> [q0lo q1lo | q0hi q1hi]; the permute restores order.
      const __m256i p8 =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + int64_t{m} * cols + g * kQuantGroup),
                          _mm256_permutevar8x32_epi32(p8, perm));
      out.d[int64_t{m} * groups + g] = d;
      out.ds[int64_t{m} * groups + g] = d * static_cast<float>(_mm_cvtsi128_si32(s4));
    }
  }
}

// ------------------------------------------------------------------------------------------
// Quantized weights (Q8 / Q4).

struct QuantArgs {
  WeightView w;
  const uint8_t* codes;  // section 0
  const uint16_t* d;     // [rows, groups] f16 scales
  const uint16_t* m;     // [rows, groups] f16 offsets (Q4 only)
  const QuantActs* x;
  float* y;
  int64_t ldy;
};

// 8 consecutive f16 values (n <= 8 of them, the rest zero) as floats.
inline __m256 load8_f16(const uint16_t* p, int n) {
  if (n == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) uint16_t t[8] = {};
  std::memcpy(t, p, n * 2);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

inline __m256 load8_f32(const float* p, int n) {
  if (n == 8) return _mm256_loadu_ps(p);
  alignas(32) float t[8] = {};
  std::memcpy(t, p, n * 4);
  return _mm256_load_ps(t);
}

template <WeightType T>
struct QuantTile {
  static constexpr bool kOffsets = T == WeightType::Q4 || Isa::kQ8Bias != 0.0f;

  template <int R, int MT>
  struct K {
    static void run(const QuantArgs& a, int64_t r0, int m0, int64_t c0, int64_t c1, bool accum) {
      const int64_t cols = a.w.cols, groups = cols / kQuantGroup;
      const int8_t* xq = a.x->q + int64_t{m0} * cols;  // [MT, cols]
      __m256 acc[R][MT];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) acc[r][m] = _mm256_setzero_ps();
      alignas(32) float sc[R][MT][8];  // d_w * d_x for the 8 groups of the current chunk

      for (int64_t g0 = c0 / kQuantGroup; g0 < c1 / kQuantGroup; g0 += 8) {
        const int ng = static_cast<int>(imin<int64_t>(8, c1 / kQuantGroup - g0));
        __m256 dw[R], ow[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          // The next row tile's scales / offsets (see kPrefetchTiles).
          prefetch(a.d + (r0 + r + R * kPrefetchTiles) * groups + g0);
          if constexpr (T == WeightType::Q4)
            prefetch(a.m + (r0 + r + R * kPrefetchTiles) * groups + g0);
          dw[r] = load8_f16(a.d + (r0 + r) * groups + g0, ng);
          if constexpr (T == WeightType::Q4) {
            ow[r] = load8_f16(a.m + (r0 + r) * groups + g0, ng);
          } else if constexpr (kOffsets) {
            ow[r] = _mm256_mul_ps(dw[r], _mm256_set1_ps(Isa::kQ8Bias));
          }
        }
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const int64_t gi = (m0 + m) * groups + g0;
          const __m256 dx = load8_f32(a.x->d + gi, ng);
          const __m256 ds = kOffsets ? load8_f32(a.x->ds + gi, ng) : _mm256_setzero_ps();
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
            _mm256_store_ps(sc[r][m], _mm256_mul_ps(dw[r], dx));
            if constexpr (kOffsets) acc[r][m] = _mm256_fmadd_ps(ow[r], ds, acc[r][m]);
          }
        }
        if constexpr (T == WeightType::Q4) {
          for (int j = 0; j < ng; j += 2) {  // one 64-column super-block: groups j, j + 1
            const int64_t g = g0 + j;
            __m256i lo[R], hi[R];
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
              const uint8_t* p = a.codes + (r0 + r) * (cols / 2) + g * (kQuantGroup / 2);
              prefetch(p + R * kPrefetchTiles * (cols / 2));
              Isa::q4_unpack(p, lo[r], hi[r]);
            }
#pragma GCC unroll 16
            for (int m = 0; m < MT; ++m) {
              const int8_t* xp = xq + m * cols + g * kQuantGroup;
              const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp));
              const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xp + 32));
#pragma GCC unroll 16
              for (int r = 0; r < R; ++r) {
                const __m256 pl = _mm256_cvtepi32_ps(Isa::dot_q4(lo[r], xl));
                const __m256 ph = _mm256_cvtepi32_ps(Isa::dot_q4(hi[r], xh));
                acc[r][m] = _mm256_fmadd_ps(pl, _mm256_broadcast_ss(&sc[r][m][j]), acc[r][m]);
                acc[r][m] = _mm256_fmadd_ps(ph, _mm256_broadcast_ss(&sc[r][m][j + 1]), acc[r][m]);
              }
            }
          }
        } else {
          for (int j = 0; j < ng; ++j) {  // one group of 32 columns
            const int64_t g = g0 + j;
            typename Isa::Q8Prep wp[R];
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
              const uint8_t* p = a.codes + (r0 + r) * cols + g * kQuantGroup;
              prefetch(p + R * kPrefetchTiles * cols);
              wp[r] = Isa::q8_prep(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
            }
#pragma GCC unroll 16
            for (int m = 0; m < MT; ++m) {
              const __m256i xv = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(xq + m * cols + g * kQuantGroup));
#pragma GCC unroll 16
              for (int r = 0; r < R; ++r) {
                const __m256 p = _mm256_cvtepi32_ps(Isa::dot_q8(wp[r], xv));
                acc[r][m] = _mm256_fmadd_ps(p, _mm256_broadcast_ss(&sc[r][m][j]), acc[r][m]);
              }
            }
          }
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          float& out = a.y[(m0 + m) * a.ldy + r0 + r];
          const float v = hsum256(acc[r][m]);
          out = accum ? out + v : v;
        }
    }
  };
};

template <WeightType T>
void matmul_quant_t(WeightView w, const QuantActs& x, int M, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  using Fn = void (*)(const QuantArgs&, int64_t, int, int64_t, int64_t, bool);
  const QuantArgs a{w,
                    section_ptr(w, 0),
                    reinterpret_cast<const uint16_t*>(section_ptr(w, 1)),
                    reinterpret_cast<const uint16_t*>(section_ptr(w, 2)),
                    &x,
                    y,
                    ldy};
  int64_t kc = w.cols;
  if (M > kMaxExactM) kc = imax<int64_t>(256, kL2Budget / M / 256 * 256);
  drive(kQuantTiles, M, r0, r1, w.cols, kc,
        [&](int R, int MT, int64_t r, int m, int64_t c0, int64_t c1, bool accum) {
          tile_fn<QuantTile<T>::template K, Fn>(R, MT)(a, r, m, c0, c1, accum);
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

}  // namespace
}  // namespace trt_spec::cpu
