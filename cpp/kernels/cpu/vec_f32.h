// vec_f32.h: f32 vector types for the CPU kernels' templates, and e^x on them (the attention's
// softmax, the SwiGLU activation).
//
// VecF32x8 (AVX2 + FMA) and, in translation units built with AVX-512 F, VecF32x16: the same
// operations on 8 or 16 lanes. A kernel written once over X gives, in each lane, the same
// operations whatever the width, so its AVX2 and AVX-512 builds give the same bits.
// Included only by translation units built with at least -mavx2 -mfma.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace trt_spec::cpu {
namespace {

struct VecF32x8 {
  using V = __m256;
  using I = __m256i;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a b
  static V cvt(I i) { return _mm256_cvtepi32_ps(i); }                 // int32 lanes
  // Lane i: v where bit i of bits is set, else other.
  static V select(uint32_t bits, V v, V other) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i b = _mm256_set1_epi32(static_cast<int>(bits & 0xffu));
    return _mm256_blendv_ps(
        other, v, _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(b, lane_bit), lane_bit)));
  }
  // Reductions kept in 8-lane order: acc + v, and v itself (the max of v's lanes is max8's).
  static __m256 add8(__m256 acc, V v) { return _mm256_add_ps(acc, v); }
  static __m256 max8(V v) { return v; }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in range: the exponent field n + 127.
  static V pow2(V n) {
    const I e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  // v where x >= limit (or unordered), else 0.
  static V zero_below(V x, float limit, V v) {
    return _mm256_blendv_ps(v, _mm256_setzero_ps(),
                            _mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_LT_OQ));
  }
};

#if defined(__AVX512F__)
struct VecF32x16 {
  using V = __m512;
  using I = __m512i;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V cvt(I i) { return _mm512_cvtepi32_ps(i); }
  static V select(uint32_t bits, V v, V other) {
    return _mm512_mask_blend_ps(static_cast<__mmask16>(bits & 0xffffu), other, v);
  }
  // (acc + lanes 0-7) + lanes 8-15: the sums of two 8-lane vectors in a row.
  static __m256 add8(__m256 acc, V v) { return _mm256_add_ps(_mm256_add_ps(acc, lo(v)), hi(v)); }
  static __m256 max8(V v) { return _mm256_max_ps(lo(v), hi(v)); }
  static __m256 lo(V v) { return _mm512_castps512_ps256(v); }
  static __m256 hi(V v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
  static V round(V a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static V pow2(V n) {
    const I e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static V zero_below(V x, float limit, V v) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_LT_OQ), v,
                                _mm512_setzero_ps());
  }
};
#endif

// e^x per lane (Cephes expf: x = n ln2 + r, a degree-6 polynomial for e^r, times 2^n);
// exactly 0 below -87.34 (and for -inf), exactly 1 at 0; x <= 88.37. Lane-wise: a value's
// result does not depend on the other lanes or on the width.
template <class X>
inline typename X::V exp_lanes(typename X::V x) {
  using V = typename X::V;
  const V xc = X::min(x, X::set1(88.3762626647949f));
  const V n = X::round(X::mul(xc, X::set1(1.44269504088896341f)));
  V r = X::fnma(n, X::set1(0.693359375f), xc);
  r = X::fnma(n, X::set1(-2.12194440e-4f), r);
  V y = X::set1(1.9875691500e-4f);
  y = X::fma(y, r, X::set1(1.3981999507e-3f));
  y = X::fma(y, r, X::set1(8.3334519073e-3f));
  y = X::fma(y, r, X::set1(4.1665795894e-2f));
  y = X::fma(y, r, X::set1(1.6666665459e-1f));
  y = X::fma(y, r, X::set1(5.0000001201e-1f));
  y = X::fma(y, X::mul(r, r), X::add(r, X::set1(1.0f)));
  return X::zero_below(x, -87.33654f, X::mul(y, X::pow2(n)));
}

inline __m256 exp8(__m256 x) {
  return exp_lanes<VecF32x8>(x);
}

inline float exp1(float x) {
  return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x)));
}

}  // namespace
}  // namespace trt_spec::cpu
