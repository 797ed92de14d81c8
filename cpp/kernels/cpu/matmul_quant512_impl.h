// matmul_quant512_impl.h: the AVX-512 tile of the Q8 / Q4 CPU matmul (part of
// matmul_quant_impl.h, compiled only in the AVX-512 VNNI translation unit).
//
// Same work, layouts and offsets as QuantTile (matmul_quant_impl.h), on 512-bit vectors: a
// 128-column chunk's 4 lane-layout vectors are 2 zmm, [v0 | v1] and [v2 | v3], and so are its
// activations, which quantize_acts already stores as v0 v1 v2 v3 (64 contiguous bytes each
// pair). Every 32-bit lane of either still belongs to one group (lane i: group i % 4), so
//   s = vpdpbusd(vpdpbusd(0, [w0 | w1], [x0 | x1]), [w2 | w3], [x2 | x3])     // [16] int32
//   acc += float(s) * [sA sB sC sD] x 4                                        // [16] f32
// is the chunk's contribution: 2 vpdpbusd of 64 multiply-adds where the 256-bit tile issues 4
// of 32, and one conversion and FMA for 128 columns. A 64-column tail is one zmm [v0 | v1]
// (lane i: group i % 2, scales [sA sB] x 8). The per-block offset term (8 groups) goes into the
// low 8 lanes. With 32 vector registers a tile holds up to 12 activation rows. The scales are
// multiplied in registers per chunk (d_w broadcast once per block, d_x loaded per row): storing
// d_w * d_x to a stack buffer and broadcasting it back, as the 256-bit tile does, stalled on
// store forwarding, and recomputing row addresses per block cost as much again.
// Measured on a Zen 5 EPYC (2 threads, weights from DRAM, bench_cpu_matmul --quick --m 1,5,9):
// q4 1536 x 1536 at 5 / 9 rows 108 / 197 us with the 256-bit tile, 41 / 70 us with this one;
// q4 1536 x 8960 342 / 617 -> 261 / 448 us; q8 1536 x 8960 917 / 1248 -> 401 / 441 us; one row
// unchanged (memory-bound). Not measured on Zen 4, which runs a 512-bit op as two halves.
//
// Exactness as in matmul_tiling.h: one zmm accumulator per (row, activation row), the same
// operations in the same order whatever M; it is spilled as 16 floats between column blocks and
// reduced with Isa::hsum (16 lanes) at the end. Lanes (the backend's repacked copy) and natural
// codes decode to the same vectors, so both give the same bits.
#pragma once

template <WeightType T, bool Lanes>
struct QuantTile512 {
  static constexpr bool kOffsets = kQuantOffsets<T>;
  static constexpr int64_t kRowBytesPerCol2 = kCodeBytesPer2Cols<T>;

  static __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }

  // The chunk's weights as [v0 | v1], [v2 | v3] (p: its codes, as decode_chunk reads them).
  static void decode4(const uint8_t* p, __m512i w[2]) {
    if constexpr (Lanes && T == WeightType::Q4) {
      // Super-block s (32 bytes): v_2s in its low nibbles, v_2s+1 in its high ones.
      const __m512i mask = _mm512_set1_epi8(0x0f);
      const __m512i shift = join(_mm256_setzero_si256(), _mm256_set1_epi16(4));
      for (int s = 0; s < 2; ++s) {
        const __m512i b =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p) + s));
        w[s] = _mm512_and_si512(_mm512_srlv_epi16(b, shift), mask);
      }
    } else if constexpr (Lanes) {  // Q8: the 4 vectors are stored in order
      w[0] = _mm512_loadu_si512(p);
      w[1] = _mm512_loadu_si512(p + 64);
    } else {
      __m256i v[4];
      decode_chunk<T, 4, false>(p, v);
      w[0] = join(v[0], v[1]);
      w[1] = join(v[2], v[3]);
    }
  }

  // The 64-column tail's weights as [v0 | v1].
  static __m512i decode2(const uint8_t* p) {
    __m256i v[2];
    decode_chunk<T, 2, Lanes>(p, v);
    return join(v[0], v[1]);
  }

  template <int MT>
  struct K {
    // Weight rows [r0, r1) x activation rows [m0, m0 + MT), columns [c0, c1).
    static void run(const QuantArgs& a, int64_t r0, int64_t r1, int m0, int64_t c0, int64_t c1,
                    const Spill& sp) {
      for (int64_t r = r0; r < r1; ++r) row(a, r, m0, c0, c1, sp.row(r - r0));
    }

    // Row r's weights and scales, and the MT activation rows' codes and scales, from group g.
    struct Ptrs {
      const uint8_t* w;   // codes of the current block
      const uint16_t* d;  // its f16 scales [8]
      const uint16_t* m;  // its f16 offsets [8] (Q4)
      const int8_t* xq;   // activation row m0's codes at the block; row m0 + i: + i * cols
      const float* xd;    // its scales; row m0 + i: + i * groups
      const float* xds;   // its d * sum(q); row m0 + i: + i * groups
    };

    // One block of ng (<= 8) groups (Full: ng == 8, plain loads of its scales).
    template <bool Full>
    static inline void block(const Ptrs& p, int ng, int64_t cols, int64_t groups, int64_t pre_bytes,
                             int64_t pre_groups, __m512* acc) {
      prefetch(p.d + pre_groups);
      if constexpr (T == WeightType::Q4) prefetch(p.m + pre_groups);
      __m256 dw, ow = _mm256_setzero_ps();
      if constexpr (Full) {
        dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.d)));
        if constexpr (T == WeightType::Q4)
          ow = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.m)));
      } else {
        dw = load8_f16(p.d, ng);
        if constexpr (T == WeightType::Q4) ow = load8_f16(p.m, ng);
      }
      if constexpr (T != WeightType::Q4 && kOffsets)
        ow = _mm256_mul_ps(dw, _mm256_set1_ps(Isa::kQ8Bias));
      if constexpr (kOffsets) {
        const __m512 owz = _mm512_zextps256_ps512(ow);
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const float* ds = p.xds + m * groups;
          const __m256 dsv = Full ? _mm256_loadu_ps(ds) : load8_f32(ds, ng);
          acc[m] = _mm512_fmadd_ps(owz, _mm512_zextps256_ps512(dsv), acc[m]);
        }
      }
      // d_w of the block's two chunks, each as [dA dB dC dD] x 4.
      const __m512 dwz[2] = {_mm512_broadcast_f32x4(_mm256_castps256_ps128(dw)),
                             _mm512_broadcast_f32x4(_mm256_extractf128_ps(dw, 1))};
      int j = 0;
      for (; j + 4 <= ng; j += 4) {  // 128-column chunks
        const uint8_t* wc = p.w + j * kQuantGroup * kRowBytesPerCol2 / 2;
        for (int64_t o = 0; o < 128 * kRowBytesPerCol2 / 2; o += 64) prefetch(wc + pre_bytes + o);
        __m512i w[2];
        decode4(wc, w);
        const __m512 dwj = dwz[j / 4];
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const __m512i* xv = reinterpret_cast<const __m512i*>(p.xq + m * cols + j * kQuantGroup);
          __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], _mm512_loadu_si512(xv));
          s = _mm512_dpbusd_epi32(s, w[1], _mm512_loadu_si512(xv + 1));
          const __m512 sc =
              _mm512_mul_ps(dwj, _mm512_broadcast_f32x4(_mm_loadu_ps(p.xd + m * groups + j)));
          acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[m]);
        }
      }
      if (!Full && j < ng) {  // the 64-column tail of the matrix: groups j, j + 1
        const __m512i w = decode2(p.w + j * kQuantGroup * kRowBytesPerCol2 / 2);
        // Scales [sA sB] x 8 (lane i: group i % 2).
        const __m128 dq = j == 0 ? _mm256_castps256_ps128(dw) : _mm256_extractf128_ps(dw, 1);
        const __m512 dwt = _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_castps_pd(dq)));
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const __m512i s = _mm512_dpbusd_epi32(
              _mm512_setzero_si512(), w, _mm512_loadu_si512(p.xq + m * cols + j * kQuantGroup));
          const __m512 xd = _mm512_castpd_ps(_mm512_broadcastsd_pd(
              _mm_load_sd(reinterpret_cast<const double*>(p.xd + m * groups + j))));
          acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dwt, xd), acc[m]);
        }
      }
    }

    static __attribute__((noinline)) void row(const QuantArgs& a, int64_t r, int m0, int64_t c0,
                                              int64_t c1, Spill sp) {
      const int64_t cols = a.cols, groups = cols / kQuantGroup;
      const int64_t row_bytes = cols * kRowBytesPerCol2 / 2;
      __m512 acc[MT];  // [MT][16]
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m)
        acc[m] = c0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(sp.at(0, m, 16));
      const int64_t g_begin = c0 / kQuantGroup, g_end = c1 / kQuantGroup;
      Ptrs p;
      p.w = a.codes + r * row_bytes + c0 * kRowBytesPerCol2 / 2;
      p.d = a.d + r * groups + g_begin;
      p.m = T == WeightType::Q4 ? a.m + r * groups + g_begin : nullptr;
      p.xq = a.x->q + int64_t{m0} * cols + c0;
      p.xd = a.x->d + int64_t{m0} * groups + g_begin;
      p.xds = a.x->ds + int64_t{m0} * groups + g_begin;
      const int64_t pre_bytes = kPrefetchRows * row_bytes, pre_groups = kPrefetchRows * groups;
      int64_t g = g_begin;
      for (; g + 8 <= g_end; g += 8) {
        block<true>(p, 8, cols, groups, pre_bytes, pre_groups, acc);
        p.w += 8 * kQuantGroup * kRowBytesPerCol2 / 2;
        p.d += 8;
        if constexpr (T == WeightType::Q4) p.m += 8;
        p.xq += 8 * kQuantGroup;
        p.xd += 8;
        p.xds += 8;
      }
      if (g < g_end)
        block<false>(p, static_cast<int>(g_end - g), cols, groups, pre_bytes, pre_groups, acc);
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
