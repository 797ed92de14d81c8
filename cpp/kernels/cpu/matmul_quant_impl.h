// matmul_quant_impl.h: activation quantization and the Q8 / Q4 CPU matmul (part of
// matmul_impl.h).
//
// Included by matmul_impl.h inside the anonymous namespace of an ISA translation unit.
//
// Activations are quantized per group of 32 columns (int8 codes in column order, a scale d and
// ds = d * sum(codes) per group). Weights are read in blocks of R = Isa::W rows (8 for AVX2,
// 16 for AVX-512) in the row-block layout of row_blocks.h: for a group, vector V_k holds word k
// (4 codes) of each of the block's rows, one row per 32-bit lane. Word k of an activation row's
// group is 4 bytes that the tile broadcasts to every lane, so per group, block and activation
// row m:
//   s_m = sum_k dot(V_k, bcast(x_m[g], k))               // [R] int32, lane i: row Rb + i
//   acc_m = fma(o_w, bcast(ds_m[g]), acc_m)              // the offset term (Q4 m; Q8 -128 d_w)
//   acc_m = fma(float(s_m), d_w * bcast(d_m[g]), acc_m)  // [R] f32, lane i: row Rb + i
// The integer dot is the Isa's (Isa::group_dots): vpdpbusd on AVX-512 VNNI; maddubs with int16
// sums then one madd on AVX2. A weight vector is loaded once for all of a tile's activation rows
// and the activation words come as 4-byte broadcasts, so loads never limit the multiply pipes;
// every lane is one output row, so no horizontal sum is left at the end.
// Its cycles per product against the multiply pipes' bound: benchmarks/results/HISTORY.md.
//
// Rows outside a tile's range [r0, r1) are computed with their block and not stored (masked
// stores), so any row range works; the CPU backend hands out multiples of 16. Codes in the
// natural layout (TRT_SPEC_CPU_LANES=0, or rows not a multiple of R) are packed one group at a
// time as they are read (row_block_pack_group: slow, but the same bits).
//
// Exactness as in matmul_tiling.h: one vector accumulator per (block, activation row), lane i
// updated group by group in ascending order with the same operations whatever M; it is spilled
// between column blocks and stored as it is after the last.
#pragma once

#include "kernels/cpu/row_blocks.h"

constexpr int64_t kQuantL1Bytes = 20 * 1024;   // one m tile's activations in a column block
constexpr int64_t kQuantL2Bytes = 192 * 1024;  // one block's activations
constexpr int64_t kQuantColStep = 512;         // column blocks: multiples of 512 columns
constexpr int kQuantMaxMt = 12;                // activation rows per tile, at most
// Bytes of codes prefetched ahead of the group read (and the scales of the group as far ahead);
// the distance swept with bench_cpu_model_pass: benchmarks/results/HISTORY.md.
constexpr int64_t kQuantPrefetch = 8192;

// Q8 codes are q = w + 128 (weight_format.h): the tile multiplies q and removes the bias through
// the offset term, o_w = kQ8Bias * d_w.
constexpr float kQ8Bias = -128.0f;

// ------------------------------------------------------------------------------------------
// Activation quantization: per group of 32, d = max|x| / 127, q = round_even(x / d).

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

void quantize_acts(const float* x, int m0, int m1, QuantActs out) {
  const int cols = out.cols, groups = cols / kQuantGroup;
  for (int m = m0; m < m1; ++m) {
    const float* xr = x + int64_t{m} * cols;                             // [cols]
    __m256i* q = reinterpret_cast<__m256i*>(out.q + int64_t{m} * cols);  // [groups] vectors
    float* d = out.d + int64_t{m} * groups;
    float* ds = out.ds + int64_t{m} * groups;
    for (int g = 0; g < groups; ++g)
      _mm256_storeu_si256(q + g, quantize_group(xr + g * kQuantGroup, d + g, ds + g));
  }
}

// ------------------------------------------------------------------------------------------
// Quantized weights (Q8 / Q4).

struct QuantArgs {
  const uint8_t* codes;  // section 0
  const uint16_t* d;     // [rows, groups] f16 scales (row-block order when repacked)
  const uint16_t* m;     // [rows, groups] f16 offsets (Q4 only)
  const QuantActs* x;
  int64_t rows, cols;
  float* y;
  int64_t ldy;
};

template <WeightType T, bool Lanes>
struct QuantTile {
  using VF = typename Isa::VF;
  using VI = typename Isa::VI;
  static constexpr int R = Isa::W;  // rows per block
  static constexpr int64_t kGroupBytes = row_block_group_bytes(T, R);

  // A block's codes, scales and offsets of one group, in the row-block layout.
  struct Group {
    const uint8_t* codes;  // [kGroupBytes]
    const uint16_t* d;     // [R] f16
    const uint16_t* m;     // [R] f16 (Q4)
  };

  // Groups of block b read from natural codes, packed one at a time (rows past the matrix: zeros).
  struct Packer {
    int64_t b;
    const uint8_t* row[R];
    alignas(64) uint8_t codes[kGroupBytes];
    alignas(64) uint16_t d[R], m[R];
    Packer(const QuantArgs& a, int64_t block) : b(block) {
      const int64_t row_bytes = natural_row_bytes(T, a.cols);
      for (int i = 0; i < R; ++i) {
        const int64_t r = b * R + i;
        row[i] = r < a.rows ? a.codes + r * row_bytes : nullptr;
      }
    }
    Group group(const QuantArgs& a, int64_t g) {
      row_block_pack_group(T, R, row, g, codes);
      const int64_t groups = a.cols / kQuantGroup;
      for (int i = 0; i < R; ++i) {
        const int64_t at = (b * R + i) * groups + g;
        d[i] = row[i] ? a.d[at] : 0;
        m[i] = row[i] && T == WeightType::Q4 ? a.m[at] : 0;
      }
      return {codes, d, m};
    }
  };
  struct NoPacker {  // row-block codes: read in place
    NoPacker(const QuantArgs&, int64_t) {}
  };

  template <int MT>
  struct K {
    // Weight rows [r0, r1) x activation rows [m0, m0 + MT), columns [c0, c1): the blocks of R
    // rows that meet [r0, r1) (at most 1 + kPanelRows / R for one panel).
    static void run(const QuantArgs& a, int64_t r0, int64_t r1, int m0, int64_t c0, int64_t c1,
                    const Spill& sp) {
      for (int64_t b = r0 / R; b * R < r1; ++b) block(a, b, r0, r1, m0, c0, c1, sp.row(b - r0 / R));
    }

    static __attribute__((noinline)) void block(const QuantArgs& a, int64_t b, int64_t r0,
                                                int64_t r1, int m0, int64_t c0, int64_t c1,
                                                Spill sp) {
      const int64_t cols = a.cols, groups = cols / kQuantGroup;
      VF acc[MT];  // [MT][R rows]
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) acc[m] = c0 == 0 ? Isa::zero() : Isa::loadu(sp.at(0, m, R));
      [[maybe_unused]] std::conditional_t<Lanes, NoPacker, Packer> packer(a, b);
      for (int64_t g = c0 / kQuantGroup; g < c1 / kQuantGroup; ++g) {
        Group gr;
        if constexpr (Lanes) {
          const int64_t at = b * groups + g;
          gr = {a.codes + at * kGroupBytes, a.d + at * R, a.m + at * R};
          for (int o = 0; o < kGroupBytes; o += 64) prefetch(gr.codes + kQuantPrefetch + o);
          prefetch(gr.d + kQuantPrefetch / kGroupBytes * R);
          if constexpr (T == WeightType::Q4) prefetch(gr.m + kQuantPrefetch / kGroupBytes * R);
        } else {
          gr = packer.group(a, g);
        }
        VI s[MT];
        Isa::template group_dots<T, MT>(gr.codes, a.x->q + m0 * cols + g * kQuantGroup, cols, s);
        const VF dw = Isa::load_f16(gr.d);
        const VF ow = T == WeightType::Q4 ? Isa::load_f16(gr.m) : Isa::mul(dw, Isa::set1(kQ8Bias));
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const int64_t xg = int64_t{m0 + m} * groups + g;
          acc[m] = Isa::fma(ow, Isa::set1(a.x->ds[xg]), acc[m]);
          const VF sc = Isa::mul(dw, Isa::set1(a.x->d[xg]));
          acc[m] = Isa::fma(Isa::to_float(s[m]), sc, acc[m]);
        }
      }
      if (c1 < cols) {  // not the last column block: keep the accumulators
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) Isa::storeu(sp.at(0, m, R), acc[m]);
        return;
      }
      // The block's rows inside [r0, r1) and the matrix.
      const int64_t first = b * R;
      const int lo = static_cast<int>(imax<int64_t>(r0, first) - first);
      const int hi = static_cast<int>(imin<int64_t>(imin<int64_t>(r1, a.rows), first + R) - first);
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) Isa::store_rows(a.y + (m0 + m) * a.ldy + first, lo, hi, acc[m]);
    }
  };
};

// Quantized kernels: one block of R weight rows x up to kQuantMaxMt activation rows at a time,
// one call walking a panel's blocks (no row tiles: rows_for stays empty).
template <WeightType T>
constexpr TilePolicy kQuantTiles =
    TilePolicy{Isa::template kQuantMt<T>, Isa::template kQuantMt<T>, {}};

// The block x MT tile (MT <= kQuantMaxMt).
template <WeightType T, bool Lanes, class Fn>
Fn quant_tile_fn(int MT) {
  using Q = QuantTile<T, Lanes>;
  switch (MT) {
    case 1: return &Q::template K<1>::run;
    case 2: return &Q::template K<2>::run;
    case 3: return &Q::template K<3>::run;
    case 4: return &Q::template K<4>::run;
    case 5: return &Q::template K<5>::run;
    case 6: return &Q::template K<6>::run;
    case 7: return &Q::template K<7>::run;
    case 8: return &Q::template K<8>::run;
    case 9: return &Q::template K<9>::run;
    case 10: return &Q::template K<10>::run;
    case 11: return &Q::template K<11>::run;
    default: return &Q::template K<12>::run;
  }
}
static_assert(kQuantTiles<WeightType::Q8>.small_max <= kQuantMaxMt &&
                  kQuantTiles<WeightType::Q4>.small_max <= kQuantMaxMt,
              "see quant_tile_fn");

template <WeightType T>
void matmul_quant_t(WeightView w, const QuantActs& x, int M, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  using Fn = void (*)(const QuantArgs&, int64_t, int64_t, int, int64_t, int64_t, const Spill&);
  const QuantArgs a{section_ptr(w, 0),
                    reinterpret_cast<const uint16_t*>(section_ptr(w, 1)),
                    reinterpret_cast<const uint16_t*>(section_ptr(w, 2)),
                    &x,
                    w.rows,
                    w.cols,
                    y,
                    ldy};
  if (w.layout != CodeLayout::Natural && w.layout != Isa::kRowLayout)
    throw std::invalid_argument("matmul_quant: codes repacked for another ISA's tile");
  const bool lanes = w.layout == Isa::kRowLayout;
  // Column blocks of whole steps (kQuantColStep); activation row blocks whose quantized rows
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
