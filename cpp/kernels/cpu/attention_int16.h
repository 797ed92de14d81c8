// attention_int16.h: the int16 tiles of the CPU attention kernel, for prompt rows
// (attention.h: AttentionArgs::prompt_from with PromptMath::Int16). Included by attention_impl.h
// inside its anonymous namespace, in both builds (256-bit AVX2 code): the prompt precision of
// CPUs without AVX512_BF16, Zen 3 and other AVX2-only ones included.
//
// A prompt row's scores and output run the same tile walk and online softmax as every other row
// (attention_impl.h), with integer products summed exactly in int32 lanes by pmaddwd (2 products
// per lane and instruction, twice the multiply rate of f32 FMAs; the AVX-512 build: vpdpwssd on
// 16 lanes, which adds them to the lane in the same instruction):
//   scores  S[t] = (sq sk_t) * sum_e q'(2e) k'_t(2e) + q'(2e+1) k'_t(2e+1)
//   output  o[d] = o[d] alpha + sp * sum_u p'(2u) v'_2u(d) + p'(2u+1) v'_2u+1(d)
// where
//   q = sq q'      per query (once per call): q' in [-R, R], sq = max|q| / R
//   k_t = sk_t k'_t    per key entry (once per K tile)
//   v_t = sv_t v'_t    per key entry: v' in [-kV, kV], sv_t = max|v_t| / kV
//   p_t sv_t = sp p'_t    per query and tile: p' in [0, kP], sp = max_t (p_t sv_t) / kP
// with every code rounded to nearest even and R = floor(sqrt((2^31 - 1) / head_dim)) (4,095 at
// head_dim 128), so that no int32 sum overflows: |S| <= hd R^2 and the 32 products of a tile's
// output lane <= 32 kP kV < 2^31. The softmax (max, exp, the sum l) stays f32 on the scores; p is
// quantized after it, with the V entries' scales folded in.
//
// Operands (dwords: an int16 pair, low half first), the layout of the bf16 tiles:
//   q2 [hd / 2]        q2[e] = (q'(2e), q'(2e+1))                  per query, once per call
//   kt2 [hd / 2, KT]   kt2[e][t] = (k'_t(2e), k'_t(2e+1))          per K tile (transposed once)
//   v2 [KT / 2, hd]    v2[u][d] = (v'_2u(d), v'_2u+1(d))           per V tile
//   p2 [KT / 2]        p2[u] = (p'(2u), p'(2u+1))                  per query and tile
// Entries past a tile's kt are zero in kt2, v2 and their scales; p is 0 there (masked). Each
// lane is one query and one key (scores) or one output column (output) with its own exact
// integer sum and the same float steps after it: a row's bits do not depend on the other rows
// sharing its register tiles, nor on the build (8 or 16 lanes). Needs head_dim % 16 == 0.
#pragma once

constexpr int kV16 = 8191;  // v' range
constexpr int kP16 = 8191;  // p' range (32 kP kV < 2^31)

// R for a head_dim: q' and k' in [-R, R], hd R^2 < 2^31.
inline float qk_range(int hd) {
  return std::floor(std::sqrt(2147483647.0 / hd));
}

// int32 lanes summed with +=: one vpaddd each (the intrinsic form made GCC 12 copy every
// accumulator once per step).
typedef int I32x8 __attribute__((vector_size(32)));

// v kept in a register: without it GCC folds a loaded operand into each pmaddwd that uses it, one
// load per query instead of one per step.
inline __m256i in_reg(__m256i v) {
  asm("" : "+x"(v));
  return v;
}

// The float steps after a tile's exact sums, per vector of X::W lanes (both widths: the same
// bits). Scores: s = float(acc) * (sq * sk); output: o = o * alpha + float(acc) * sp.
template <class X>
inline void scores_finish(float* s, typename X::I acc, typename X::V sq, const float* sk) {
  X::store(s, X::mul(X::cvt(acc), X::mul(sq, X::load(sk))));
}
template <class X>
inline void pv_finish(float* o, typename X::I acc, typename X::V sp, typename X::V alpha) {
  X::store(o, X::fma(X::cvt(acc), sp, X::mul(X::load(o), alpha)));
}

// 16 int32 codes (a, b: 8 each, in order) -> 16 int16 in order.
inline __m256i pack16(__m256i a, __m256i b) {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
}

// dst [n / 2] dwords = the n (% 16 == 0) values at x as int16 codes round(x * r / max|x|);
// returns their scale max|x| / r (0 for a zero row: codes 0).
inline float to_i16_pairs(const float* x, int n, float r, uint32_t* dst) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8)
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  const float amax = hmax8(mx);
  const __m256 inv = _mm256_set1_ps(amax > 0.0f ? r / amax : 0.0f);
  for (int i = 0; i < n; i += 16) {  // cvtps rounds to nearest even under the default MXCSR
    const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), inv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i / 2), pack16(a, b));
  }
  return amax / r;
}

// kt2 [hd / 2, KT] and sk [KT] from K [kt, hd] f32 (keys kt.. zero); tmp [KT, hd / 2] dwords.
void k_i16_tile(const float* k, int kt, int hd, float r, uint32_t* tmp, uint32_t* kt2, float* sk) {
  for (int t = 0; t < KT; ++t)
    sk[t] = t < kt ? to_i16_pairs(k + t * hd, hd, r, tmp + t * (hd / 2)) : 0.0f;
  // The pairs transposed as 32-bit words: transpose_tile only moves bits.
  transpose_tile(reinterpret_cast<const float*>(tmp), kt, hd / 2, reinterpret_cast<float*>(kt2));
}

// v2 [(kt + 1) / 2, hd] and sv [KT] from V [kt, hd] f32 (an odd kt's last pair has a zero high
// half; sv zero past kt); tmp [2, hd / 2] dwords.
void v_i16_tile(const float* v, int kt, int hd, uint32_t* tmp, uint32_t* v2, float* sv) {
  for (int t = kt; t < KT; ++t) sv[t] = 0.0f;
  for (int t = 0; t < kt; t += 2) {
    sv[t] = to_i16_pairs(v + t * hd, hd, kV16, tmp);
    if (t + 1 < kt) {
      sv[t + 1] = to_i16_pairs(v + (t + 1) * hd, hd, kV16, tmp + hd / 2);
    } else {
      std::memset(tmp + hd / 2, 0, sizeof(uint32_t) * (hd / 2));
    }
    uint32_t* dst = v2 + (t / 2) * hd;
    for (int d = 0; d < hd; d += 16) {  // [a0..a15], [b0..b15] -> (a_i, b_i) for i = d..d+15
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tmp + d / 2));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tmp + hd / 2 + d / 2));
      const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d),
                          _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d + 8),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}

// p2 [KT / 2] = the codes of p_t sv_t (t < KT); returns their scale sp.
inline float p_i16_pairs(const float* p, const float* sv, uint32_t* p2) {
  __m256 w[4];
  __m256 mx = _mm256_setzero_ps();
  for (int c = 0; c < 4; ++c) {
    w[c] = _mm256_mul_ps(_mm256_loadu_ps(p + 8 * c), _mm256_loadu_ps(sv + 8 * c));
    mx = _mm256_max_ps(mx, w[c]);
  }
  const float m = hmax8(mx);
  const __m256 inv = _mm256_set1_ps(m > 0.0f ? kP16 / m : 0.0f);
  for (int c = 0; c < 4; c += 2)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p2 + 4 * c),
                        pack16(_mm256_cvtps_epi32(_mm256_mul_ps(w[c], inv)),
                               _mm256_cvtps_epi32(_mm256_mul_ps(w[c + 1], inv))));
  return m / kP16;
}

// S[j][0, KT) = sq_j sk_t (q'_j . k'_t) for NQ (<= 2: 8 accumulators, 4 key vectors) queries.
template <int NQ>
void scores_tile_i16(const uint32_t* const* q2, const float* sq, const uint32_t* kt2,
                     const float* sk, int hd, float* const* s) {
  I32x8 acc[NQ][4] = {};
  for (int e = 0; e < hd / 2; ++e) {
    __m256i k[4];
    for (int c = 0; c < 4; ++c)
      k[c] = in_reg(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kt2 + e * KT + 8 * c)));
#pragma GCC unroll 2
    for (int j = 0; j < NQ; ++j) {
      const __m256i b = _mm256_set1_epi32(static_cast<int>(q2[j][e]));
      for (int c = 0; c < 4; ++c) acc[j][c] += (I32x8)_mm256_madd_epi16(b, k[c]);
    }
  }
#pragma GCC unroll 2
  for (int j = 0; j < NQ; ++j)
    for (int c = 0; c < 4; ++c)
      scores_finish<VecF32x8>(s[j] + 8 * c, (__m256i)acc[j][c], _mm256_set1_ps(sq[j]), sk + 8 * c);
}

// o_j[d0, d0 + 8 ND) = o_j alpha_j + sp_j sum_u p2_j[u] . v2[u] for NQ (<= 2) queries, u < n_pairs.
template <int NQ, int ND>
void pv_chunk_i16(const uint32_t* const* p2, const float* sp, const uint32_t* v2, int n_pairs,
                  int hd, int d0, float* const* o, const float* alpha) {
  I32x8 acc[NQ][ND] = {};
  for (int u = 0; u < n_pairs; ++u) {
    __m256i vv[ND];
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c)
      vv[c] =
          in_reg(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v2 + u * hd + d0 + 8 * c)));
#pragma GCC unroll 2
    for (int j = 0; j < NQ; ++j) {
      const __m256i b = _mm256_set1_epi32(static_cast<int>(p2[j][u]));
#pragma GCC unroll 4
      for (int c = 0; c < ND; ++c) acc[j][c] += (I32x8)_mm256_madd_epi16(b, vv[c]);
    }
  }
#pragma GCC unroll 2
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c)
      pv_finish<VecF32x8>(o[j] + d0 + 8 * c, (__m256i)acc[j][c], _mm256_set1_ps(sp[j]),
                          _mm256_set1_ps(alpha[j]));
}

template <int NQ>
void pv_tile_i16(const uint32_t* const* p2, const float* sp, const uint32_t* v2, int n_pairs,
                 int hd, float* const* o, const float* alpha) {
  int d0 = 0;
  for (; d0 + 32 <= hd; d0 += 32) pv_chunk_i16<NQ, 4>(p2, sp, v2, n_pairs, hd, d0, o, alpha);
  for (; d0 < hd; d0 += 8) pv_chunk_i16<NQ, 1>(p2, sp, v2, n_pairs, hd, d0, o, alpha);
}

#if defined(__AVX512VNNI__)
// The AVX-512 build: 16 lanes, and vpdpwssd adds the pair of products to the lane in one
// instruction (the same exact int32 sums, the same float steps per lane: the same bits).

// acc += the lane's pairs of products a . b. As inline asm: with _mm512_dpwssd_epi32 GCC 12
// copies every accumulator twice per step.
inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// S[j][0, KT) as scores_tile_i16, for NQ (<= 6) queries: 2 key vectors of 16.
template <int NQ>
void scores_tile_i16x16(const uint32_t* const* q2, const float* sq, const uint32_t* kt2,
                        const float* sk, int hd, float* const* s) {
  __m512i acc[NQ][2];
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_si512();
  for (int e = 0; e < hd / 2; ++e) {
    const __m512i k0 = _mm512_loadu_si512(kt2 + e * KT), k1 = _mm512_loadu_si512(kt2 + e * KT + 16);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; ++j) {
      const __m512i b = _mm512_set1_epi32(static_cast<int>(q2[j][e]));
      acc[j][0] = dpwssd(acc[j][0], b, k0);
      acc[j][1] = dpwssd(acc[j][1], b, k1);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
    for (int c = 0; c < 2; ++c)
      scores_finish<VecF32x16>(s[j] + 16 * c, acc[j][c], _mm512_set1_ps(sq[j]), sk + 16 * c);
}

// o_j[d0, d0 + 16 ND) as pv_chunk_i16, for NQ (<= 6) queries.
template <int NQ, int ND>
void pv_chunk_i16x16(const uint32_t* const* p2, const float* sp, const uint32_t* v2, int n_pairs,
                     int hd, int d0, float* const* o, const float* alpha) {
  __m512i acc[NQ][ND];
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) acc[j][c] = _mm512_setzero_si512();
  for (int u = 0; u < n_pairs; ++u) {
    __m512i vv[ND];
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c) vv[c] = _mm512_loadu_si512(v2 + u * hd + d0 + 16 * c);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; ++j) {
      const __m512i b = _mm512_set1_epi32(static_cast<int>(p2[j][u]));
#pragma GCC unroll 4
      for (int c = 0; c < ND; ++c) acc[j][c] = dpwssd(acc[j][c], b, vv[c]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NQ; ++j)
#pragma GCC unroll 4
    for (int c = 0; c < ND; ++c)
      pv_finish<VecF32x16>(o[j] + d0 + 16 * c, acc[j][c], _mm512_set1_ps(sp[j]),
                           _mm512_set1_ps(alpha[j]));
}
#endif

template <int NQ>
void pv_tile_i16x16(const uint32_t* const* p2, const float* sp, const uint32_t* v2, int n_pairs,
                    int hd, float* const* o, const float* alpha) {
  int d0 = 0;
#if defined(__AVX512VNNI__)
  for (; d0 + 64 <= hd; d0 += 64) pv_chunk_i16x16<NQ, 4>(p2, sp, v2, n_pairs, hd, d0, o, alpha);
  for (; d0 + 16 <= hd; d0 += 16) pv_chunk_i16x16<NQ, 1>(p2, sp, v2, n_pairs, hd, d0, o, alpha);
#endif
  for (; d0 < hd; d0 += 8) pv_chunk_i16<NQ, 1>(p2, sp, v2, n_pairs, hd, d0, o, alpha);
}

// The two tiles for n queries, in register tiles of up to 2 (AVX2 build) or 6 (AVX-512 build)
// (register_tiles, attention_impl.h).
void scores_i16(int n, const uint32_t* const* q2, const float* sq, const uint32_t* kt2,
                const float* sk, int hd, float* const* s) {
#if defined(__AVX512VNNI__)
  register_tiles<6>(n, [&](auto nq, int x) {
    scores_tile_i16x16<decltype(nq)::value>(q2 + x, sq + x, kt2, sk, hd, s + x);
  });
#else
  register_tiles<2>(n, [&](auto nq, int x) {
    scores_tile_i16<decltype(nq)::value>(q2 + x, sq + x, kt2, sk, hd, s + x);
  });
#endif
}

void pv_i16(int n, const uint32_t* const* p2, const float* sp, const uint32_t* v2, int n_pairs,
            int hd, float* const* o, const float* alpha) {
#if defined(__AVX512VNNI__)
  register_tiles<6>(n, [&](auto nq, int x) {
    pv_tile_i16x16<decltype(nq)::value>(p2 + x, sp + x, v2, n_pairs, hd, o + x, alpha + x);
  });
#else
  register_tiles<2>(n, [&](auto nq, int x) {
    pv_tile_i16<decltype(nq)::value>(p2 + x, sp + x, v2, n_pairs, hd, o + x, alpha + x);
  });
#endif
}
