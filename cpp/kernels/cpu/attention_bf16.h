// attention_bf16.h: the bf16 tiles of the CPU attention kernel, for prompt rows (attention.h:
// AttentionArgs::bf16_from). Included by attention_impl.h inside its anonymous namespace, in the
// translation unit built with AVX512_BF16 (attention_avx512.cpp); run only where the CPU has it.
//
// A prompt row's scores and output run the same tile walk and online softmax as every other row
// (attention_impl.h), with the two products in bf16:
//   scores  S[t] = sum_e  q(2e) k_t(2e) + q(2e+1) k_t(2e+1)      e ascending, f32 lanes
//   output  o[d] = o[d] alpha + sum_u p(2u) v_2u(d) + p(2u+1) v_2u+1(d)    u ascending
// where q, k, p and v are rounded to bf16 (nearest even) and each pair of products is added to
// the f32 lane by one vdpbf16ps (16 lanes: 16 keys of a score tile, 16 output columns). The
// softmax (max, exp, the sum l) stays f32 on the unrounded scores; p is rounded after it.
// vdpbf16ps halves the multiply instructions of the f32 FMAs (2 products per lane each), which
// are what long prompts spend on attention once the matmul is integer.
//
// Operands (dwords: a bf16 pair, low half first):
//   q2 [hd / 2]        q2[e] = (q(2e), q(2e+1))                   per query, once per call
//   kt2 [hd / 2, KT]   kt2[e][t] = (k_t(2e), k_t(2e+1))           per K tile (transposed once)
//   v2 [KT / 2, hd]    v2[u][d] = (v_2u(d), v_2u+1(d))            per V tile
//   p2 [KT / 2]        p2[u] = (p(2u), p(2u+1))                   per query and tile
// Entries past a tile's kt are zero in kt2 and v2; p is 0 there (masked), so they add 0.
// Each lane is one query and one key (scores) or one output column (output) with its own chain
// of vdpbf16ps: a row's bits do not depend on the other rows sharing its register tiles.
// Needs head_dim % 16 == 0 (the K tile transposes 8 x 8 blocks of pairs).
#pragma once

// 8 floats -> 8 bf16 (nearest even) in the low 128 bits.
inline __m128i bf16x8(const float* p) {
  return (__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(p));
}

// dst [n / 2] dwords = the n floats at src (n % 16 == 0) as bf16 pairs.
inline void to_bf16_pairs(const float* src, int n, uint32_t* dst) {
  int i = 0;
  for (; i + 32 <= n; i += 32)  // 32 floats: [src[i, i + 16) | src[i + 16, i + 32)]
    _mm512_storeu_si512(dst + i / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16),
                                                                  _mm512_loadu_ps(src + i)));
  for (; i < n; i += 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i / 2), bf16x8(src + i));
}

// kt2 [hd / 2, KT] from K [kt, hd] f32 (keys kt.. zero); tmp [KT, hd / 2] dwords.
void k_pairs_tile(const float* k, int kt, int hd, uint32_t* tmp, uint32_t* kt2) {
  for (int t = 0; t < kt; ++t) to_bf16_pairs(k + t * hd, hd, tmp + t * (hd / 2));
  // The pairs transposed as 32-bit words: transpose_tile only moves bits.
  transpose_tile(reinterpret_cast<const float*>(tmp), kt, hd / 2, reinterpret_cast<float*>(kt2));
}

// v2 [(kt + 1) / 2, hd] from V [kt, hd] f32 (an odd kt's last pair has a zero high half).
void v_pairs_tile(const float* v, int kt, int hd, uint32_t* v2) {
  // 16 columns of two keys: [a0..a15 | b0..b15] converted, then interleaved to (a_i, b_i).
  const __m512i mix = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int t = 0; t < kt; t += 2) {
    uint32_t* dst = v2 + (t / 2) * hd;
    const float* a = v + t * hd;
    const float* b = a + hd;
    for (int d = 0; d < hd; d += 16) {
      const __m512 bv = t + 1 < kt ? _mm512_loadu_ps(b + d) : _mm512_setzero_ps();
      const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(bv, _mm512_loadu_ps(a + d));
      _mm512_storeu_si512(dst + d, _mm512_permutexvar_epi16(mix, ab));
    }
  }
}

// p2 [KT / 2] = the KT probabilities at p as bf16 pairs.
inline void p_pairs(const float* p, uint32_t* p2) {
  const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
  _mm512_storeu_si512(p2, (__m512i)v);
}

inline __m512bh bcast_pair(const uint32_t* p) {
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(*p));
}

// S[j][0, KT) = q_j . k_t (unscaled) for NQ queries.
template <int NQ>
void scores_tile_bf16(const uint32_t* const* q2, const uint32_t* kt2, int hd, float* const* s) {
  __m512 acc[NQ][2];
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  for (int e = 0; e < hd / 2; ++e) {
    const __m512bh k0 = (__m512bh)_mm512_loadu_si512(kt2 + e * KT);
    const __m512bh k1 = (__m512bh)_mm512_loadu_si512(kt2 + e * KT + 16);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; ++j) {
      const __m512bh b = bcast_pair(q2[j] + e);
      acc[j][0] = _mm512_dpbf16_ps(acc[j][0], b, k0);
      acc[j][1] = _mm512_dpbf16_ps(acc[j][1], b, k1);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j) {
    _mm512_storeu_ps(s[j], acc[j][0]);
    _mm512_storeu_ps(s[j] + 16, acc[j][1]);
  }
}

// o_j[d0, d0 + 16 ND) = o_j * alpha_j + sum_u p2_j[u] . v2[u] for NQ queries, u < n_pairs.
template <int NQ, int ND>
void pv_chunk_bf16(const uint32_t* const* p2, const uint32_t* v2, int n_pairs, int hd, int d0,
                   float* const* o, const float* alpha) {
  __m512 acc[NQ][ND];
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c)
      acc[j][c] = _mm512_mul_ps(_mm512_loadu_ps(o[j] + d0 + 16 * c), _mm512_set1_ps(alpha[j]));
  for (int u = 0; u < n_pairs; ++u) {
    __m512bh vv[ND];
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(v2 + u * hd + d0 + 16 * c);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; ++j) {
      const __m512bh b = bcast_pair(p2[j] + u);
#pragma GCC unroll 4
      for (int c = 0; c < ND; ++c) acc[j][c] = _mm512_dpbf16_ps(acc[j][c], b, vv[c]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) _mm512_storeu_ps(o[j] + d0 + 16 * c, acc[j][c]);
}

template <int NQ>
void pv_tile_bf16(const uint32_t* const* p2, const uint32_t* v2, int n_pairs, int hd,
                  float* const* o, const float* alpha) {
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) pv_chunk_bf16<NQ, 4>(p2, v2, n_pairs, hd, d0, o, alpha);
  for (; d0 < hd; d0 += 16) pv_chunk_bf16<NQ, 1>(p2, v2, n_pairs, hd, d0, o, alpha);
}

// The two tiles for n queries, in register tiles of up to 6 (register_tiles, attention_impl.h).
void scores_bf16(int n, const uint32_t* const* q2, const uint32_t* kt2, int hd, float* const* s) {
  register_tiles<6>(
      n, [&](auto nq, int x) { scores_tile_bf16<decltype(nq)::value>(q2 + x, kt2, hd, s + x); });
}

void pv_bf16(int n, const uint32_t* const* p2, const uint32_t* v2, int n_pairs, int hd,
             float* const* o, const float* alpha) {
  register_tiles<6>(n, [&](auto nq, int x) {
    pv_tile_bf16<decltype(nq)::value>(p2 + x, v2, n_pairs, hd, o + x, alpha + x);
  });
}
