// matmul_quant512_impl.h: the AVX-512 tile of the Q8 / Q4 CPU matmul and its activation layout
// (part of matmul_quant_impl.h, compiled only in the AVX-512 VNNI translation unit).
//
// The 512 lane layout (CodeLayout::Lanes512, repack_lanes.h). A 512-column chunk holds 16 groups
// g0..g15 of 32 columns; word k of a group is its columns 4k..4k+3. The chunk is 8 vectors of 16
// words,
//   V_k = [g0_k g1_k ... g15_k]                                                k = 0..7
// so lane i of every product belongs to group i, and a chunk of one (row, activation row) is
//   s = sum_k vpdpbusd(V_k, X_k)                          // [16] int32, lane i: group i's dot
//   acc = fma(o_w, ds, acc)                               // the offset term (Q4 m, Q8's bias)
//   acc = fma(float(s), d_w * d_x, acc)                   // [16] f32
// 8 vpdpbusd, one multiply and two FMAs per 512 columns, where the 128-column layout of the AVX2
// tile (4 vectors of [A_k B_k C_k D_k | ...]) needs a conversion, a scale multiply and an FMA per
// 128 columns: 18 operations on the multiply pipes per 512 columns instead of 11 (vpdpbusd, FMA and
// multiply share Zen 5's two 512-bit multiply pipes). A row's last chunk may hold G < 16 groups
// (G even, cols % 64 == 0): the same vectors with G words, stored as 4G bytes and read with masks.
//
// Storage: quantize_acts stores X_0..X_7 of every chunk in order (64 bytes each, 4G in the last);
// repacked weights store V_0..V_7 (Q8) or 4 blocks, V_2s in the low nibbles and V_2s+1 in the high
// ones (Q4). Natural weights (the file's layout) go through transpose16 as they are read, to the
// same vectors: both give the same bits.
//
// Measured on a Zen 5 EPYC (bench_cpu_matmul --quick --m 1,5,9,12, q4, 2 threads, weights from
// DRAM), the 128-column tile this replaced -> this one, us at 1 / 5 / 9 / 12 rows:
//   8960 x 1536   175 / 210 / 353 / 466 -> 132 / 162 / 235 / 297
//   1536 x 8960   169 / 230 / 385 / 511 -> 103 / 187 / 287 / 363
// (one row is memory-bound and noisy). The draft's 896 columns are one chunk and a 12-group one,
// which costs nearly as much: there it is no faster at 1 and 5 rows (9728 x 896: 94 / 157 ->
// 120 / 166 in that run, 113 / 162 -> 116 / 160 in the next), faster from 9 (266 -> 232).
//
// Exactness as in matmul_tiling.h: one zmm accumulator per (row, activation row), the same
// operations in the same order whatever M; it is spilled as 16 floats between column blocks (whole
// chunks: kQuantColStep) and reduced with Isa::hsum (16 lanes) at the end.
#pragma once

constexpr int64_t kQuantColStep = 512;  // column blocks are whole chunks
constexpr CodeLayout kQuantLanes = CodeLayout::Lanes512;

// Bytes [0, n) of 64 (n <= 64).
inline __mmask64 byte_mask(int n) {
  return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

inline __m512i join256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// z[j] = [group 2j | group 2j + 1] (8 words each, column order) -> v[k] = [g0_k g1_k ... g15_k].
inline void transpose16(const __m512i z[8], __m512i v[8]) {
  // y[j] qword k = (g2j_k, g2j+1_k); then v[k] qword j = y[j] qword k: an 8 x 8 qword transpose.
  const __m512i pairs = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  __m512i y[8], t[8], u[8];
  for (int j = 0; j < 8; ++j) y[j] = _mm512_permutexvar_epi32(pairs, z[j]);
  for (int j = 0; j < 8; j += 2) {  // t[j] = y[j].q0 y[j+1].q0 y[j].q2 ..., t[j+1]: q1, q3, ...
    t[j] = _mm512_unpacklo_epi64(y[j], y[j + 1]);
    t[j + 1] = _mm512_unpackhi_epi64(y[j], y[j + 1]);
  }
  for (int j : {0, 1, 4, 5}) {  // u[0] = y0..y3 q0, q4; u[1]: q1, q5; u[2]: q2, q6; u[3]: q3, q7
    u[j] = _mm512_permutex2var_epi64(t[j], lo, t[j + 2]);
    u[j + 2] = _mm512_permutex2var_epi64(t[j], hi, t[j + 2]);
  }
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm512_shuffle_i64x2(u[k], u[k + 4], 0x44);
    v[k + 4] = _mm512_shuffle_i64x2(u[k], u[k + 4], 0xee);
  }
}

// ------------------------------------------------------------------------------------------
// Activation quantization: per group of 32, d = max|x| / 127, q = round_even(x / d)
// (quantize_group); q stored in the 512 lane layout.

void quantize_acts(const float* x, int m0, int m1, QuantActs out) {
  const int cols = out.cols, groups = cols / kQuantGroup;
  for (int m = m0; m < m1; ++m) {
    const float* xr = x + int64_t{m} * cols;  // [cols]
    int8_t* q = out.q + int64_t{m} * cols;    // [cols], chunk after chunk
    float* d = out.d + int64_t{m} * groups;
    float* ds = out.ds + int64_t{m} * groups;
    for (int g = 0; g < groups; g += 16) {
      const int ng = imin(16, groups - g), vb = 4 * ng;
      auto group = [&](int i) {
        return i < ng ? quantize_group(xr + (g + i) * kQuantGroup, d + g + i, ds + g + i)
                      : _mm256_setzero_si256();
      };
      __m512i z[8], v[8];
      for (int j = 0; j < 8; ++j) {
        const __m256i a = group(2 * j);
        z[j] = join256(a, group(2 * j + 1));
      }
      transpose16(z, v);
      for (int k = 0; k < 8; ++k)
        _mm512_mask_storeu_epi8(q + g * kQuantGroup + k * vb, byte_mask(vb), v[k]);
    }
  }
}

// ------------------------------------------------------------------------------------------
// The tile.

template <WeightType T, bool Lanes>
struct QuantTile512 {
  static constexpr bool kOffsets = kQuantOffsets<T>;
  static constexpr int64_t kRowBytesPerCol2 = kCodeBytesPer2Cols<T>;

  // The 8 vectors of a chunk of ng groups (Full: 16) whose codes start at p.
  template <bool Full>
  static inline void decode(const uint8_t* p, int ng, __m512i v[8]) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    if constexpr (Lanes) {
      const int vb = Full ? 64 : 4 * ng;
      const __mmask64 mk = byte_mask(vb);
      auto load = [&](int i) {
        return Full ? _mm512_loadu_si512(p + i * 64) : _mm512_maskz_loadu_epi8(mk, p + i * vb);
      };
      if constexpr (T == WeightType::Q4) {
        for (int s = 0; s < 4; ++s) {
          const __m512i b = load(s);
          v[2 * s] = _mm512_and_si512(b, nib);
          v[2 * s + 1] = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);
        }
      } else {
        for (int k = 0; k < 8; ++k) v[k] = load(k);
      }
    } else {  // natural: group after group (Q4: super-block s = group 2s low, 2s + 1 high)
      constexpr int kGroupBytes = T == WeightType::Q4 ? 16 : 32;
      auto load = [&](int i) {
        const int left = ng * kGroupBytes - 64 * i;
        return Full ? _mm512_loadu_si512(p + i * 64)
                    : _mm512_maskz_loadu_epi8(byte_mask(imax(0, left)), p + i * 64);
      };
      __m512i z[8];
      if constexpr (T == WeightType::Q4) {
        for (int j = 0; j < 4; ++j) {
          const __m512i b = load(j);
          const __m512i lo = _mm512_and_si512(b, nib);                        // [g4j | g4j+2]
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);  // [g4j+1 | g4j+3]
          z[2 * j] = _mm512_shuffle_i64x2(lo, hi, 0x44);
          z[2 * j + 1] = _mm512_shuffle_i64x2(lo, hi, 0xee);
        }
      } else {
        for (int j = 0; j < 8; ++j) z[j] = load(j);
      }
      transpose16(z, v);
    }
  }

  template <int MT>
  struct K {
    // Weight rows [r0, r1) x activation rows [m0, m0 + MT), columns [c0, c1).
    static void run(const QuantArgs& a, int64_t r0, int64_t r1, int m0, int64_t c0, int64_t c1,
                    const Spill& sp) {
      for (int64_t r = r0; r < r1; ++r) row(a, r, m0, c0, c1, sp.row(r - r0));
    }

    // Row r's chunk of ng groups at group g (Full: 16).
    template <bool Full>
    static inline void chunk(const QuantArgs& a, int64_t r, int m0, int64_t g, int ng,
                             __m512* acc) {
      const int64_t cols = a.cols, groups = cols / kQuantGroup;
      const int64_t row_bytes = cols * kRowBytesPerCol2 / 2;
      const uint8_t* w = a.codes + r * row_bytes + g * kQuantGroup * kRowBytesPerCol2 / 2;
      const uint16_t* dp = a.d + r * groups + g;
      const uint16_t* mp = T == WeightType::Q4 ? a.m + r * groups + g : nullptr;
      const int64_t pre = kPrefetchRows * row_bytes, pre_g = kPrefetchRows * groups;
      for (int64_t o = 0; o < 16 * kQuantGroup * kRowBytesPerCol2 / 2; o += 64)
        prefetch(w + pre + o);
      prefetch(dp + pre_g);
      prefetch(dp + pre_g + 15);
      if constexpr (T == WeightType::Q4) {
        prefetch(mp + pre_g);
        prefetch(mp + pre_g + 15);
      }
      const __mmask16 gm = Full ? __mmask16(0xffff) : __mmask16((1u << ng) - 1);
      auto f16 = [&](const uint16_t* p) {
        return _mm512_cvtph_ps(Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                    : _mm256_maskz_loadu_epi16(gm, p));
      };
      auto f32 = [&](const float* p) {
        return Full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(gm, p);
      };
      const __m512 dw = f16(dp);  // [16] d_w of the chunk's groups
      __m512 ow = _mm512_setzero_ps();
      if constexpr (T == WeightType::Q4) {
        ow = f16(mp);
      } else if constexpr (kOffsets) {
        ow = _mm512_mul_ps(dw, _mm512_set1_ps(Isa::kQ8Bias));
      }
      __m512i v[8];
      decode<Full>(w, ng, v);
      const int vb = Full ? 64 : 4 * ng;
      const __mmask64 mk = byte_mask(vb);
      auto xload = [&](const int8_t* p, int k) {
        return Full ? _mm512_loadu_si512(p + k * 64) : _mm512_maskz_loadu_epi8(mk, p + k * vb);
      };
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) {
        const int64_t xg = int64_t{m0 + m} * groups + g;
        const int8_t* x = a.x->q + xg * kQuantGroup;  // row m0 + m's chunk at group g
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[0], xload(x, 0));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[1], xload(x, 1));
        s0 = _mm512_dpbusd_epi32(s0, v[2], xload(x, 2));
        s1 = _mm512_dpbusd_epi32(s1, v[3], xload(x, 3));
        s0 = _mm512_dpbusd_epi32(s0, v[4], xload(x, 4));
        s1 = _mm512_dpbusd_epi32(s1, v[5], xload(x, 5));
        s0 = _mm512_dpbusd_epi32(s0, v[6], xload(x, 6));
        s1 = _mm512_dpbusd_epi32(s1, v[7], xload(x, 7));
        if constexpr (kOffsets) acc[m] = _mm512_fmadd_ps(ow, f32(a.x->ds + xg), acc[m]);
        const __m512 sc = _mm512_mul_ps(dw, f32(a.x->d + xg));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), sc, acc[m]);
      }
    }

    static __attribute__((noinline)) void row(const QuantArgs& a, int64_t r, int m0, int64_t c0,
                                              int64_t c1, Spill sp) {
      const int64_t cols = a.cols;
      __m512 acc[MT];  // [MT][16]
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m)
        acc[m] = c0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(sp.at(0, m, 16));
      int64_t c = c0;
      for (; c + kQuantColStep <= c1; c += kQuantColStep)
        chunk<true>(a, r, m0, c / kQuantGroup, 16, acc);
      if (c < c1)  // the row's last chunk, of fewer than 16 groups
        chunk<false>(a, r, m0, c / kQuantGroup, static_cast<int>((c1 - c) / kQuantGroup), acc);
      if (c1 < cols) {  // not the last column block: keep the accumulators
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) _mm512_storeu_ps(sp.at(0, m, 16), acc[m]);
        return;
      }
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) a.y[(m0 + m) * a.ldy + r] = Isa::hsum(acc[m]);
    }
  };
};
