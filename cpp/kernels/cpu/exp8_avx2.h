// exp8_avx2.h: e^x for 8 floats at a time (AVX2 + FMA), shared by the CPU kernels that need it
// (attention's softmax, the SwiGLU activation).
//
// Included only by translation units built with -mavx2 -mfma. Lane-wise: a value's result does
// not depend on the other lanes, so rows computed in any grouping give identical bits.
#pragma once

#include <immintrin.h>

namespace trt_spec::cpu {
namespace {

// e^x for 8 floats (Cephes expf: x = n ln2 + r, a degree-6 polynomial for e^r, times 2^n);
// exactly 0 below -87.34 (and for -inf), exactly 1 at 0; x <= 88.37.
inline __m256 exp8(__m256 x) {
  const __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_blendv_ps(v, _mm256_setzero_ps(),
                          _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ));
}

inline float exp1(float x) {
  return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x)));
}

}  // namespace
}  // namespace trt_spec::cpu
