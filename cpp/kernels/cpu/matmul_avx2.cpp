// matmul_avx2.cpp: the AVX2 + FMA + F16C CPU matmul kernels (built with -mavx2 -mfma -mf16c).
//
// Defines the vector primitives matmul_impl.h is written against, then the kMatmulKernelsAvx2
// table. Primitives an Isa provides:
//   VF, W                 float vector type of W lanes (float-weight kernels)
//   zero, loadu, fma, hsum, load_w<T>(row, c)   W weights of type T from column c, as floats
//   storeu(p, v)          store a float vector
//   WVec<T>, wvec<T>(v)   a decoded Q4 / Q8 weight vector from 32 codes in the lane layout of
//                         matmul_quant_impl.h (Q4: codes 0..15; Q8: q = w + 128)
//   dot<T, N>(w, x)       8 int32 lane sums of the N (4 or 2) weight vectors w times the N
//                         int8 activation vectors at x (32 bytes each)
//   kQ8Bias               what dot<Q8> adds per code unit: 0 if it computes sum(w * x) directly,
//                         -128 if it computes sum(q * x) (the kernel then adds -128 * d_w * ds)
//
// Q4 here: _mm256_maddubs_epi16(code, x) (u8 x s8 pairs; |pair sum| <= 2 * 15 * 127), the N
// products summed in int16 (<= 4 * 3810 < 32768), then one _mm256_madd_epi16 to int32 lanes.
// Q8: maddubs(q, x) would saturate on (q = 255) * (x = 127) pairs, so the codes are turned back
// to signed (q ^ 0x80) and multiplied with the sign trick, maddubs(|w|, sign(x, w)), whose pair
// sums stay below 2 * 127 * 127 < 32768 but cannot be added in int16: one madd per vector.
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/matmul.h"

namespace trt_spec::cpu {
namespace {

struct Isa {
  using VF = __m256;
  static constexpr int W = 8;
  static VF zero() { return _mm256_setzero_ps(); }
  static VF loadu(const float* p) { return _mm256_loadu_ps(p); }
  static VF fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(VF v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  template <WeightType T>
  static VF load_w(const uint8_t* row, int64_t c) {
    if constexpr (T == WeightType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
    } else {
      const __m128i h = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + c));
      if constexpr (T == WeightType::F16) {
        return _mm256_cvtph_ps(h);
      } else {  // bf16: the upper half of a float
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      }
    }
  }

  static void storeu(float* p, VF v) { _mm256_storeu_ps(p, v); }

  struct Q4W {
    __m256i code;  // u8 0..15
  };
  struct Q8W {
    __m256i abs_w;  // |w|, u8 0..127
    __m256i w;      // w, s8 -127..127
  };
  template <WeightType T>
  using WVec = std::conditional_t<T == WeightType::Q4, Q4W, Q8W>;
  static constexpr float kQ8Bias = 0.0f;

  template <WeightType T>
  static WVec<T> wvec(__m256i v) {
    if constexpr (T == WeightType::Q4) {
      return {v};
    } else {
      const __m256i w = _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));
      return {_mm256_abs_epi8(w), w};
    }
  }

  template <WeightType T, int N>
  static __m256i dot(const WVec<T>* w, const int8_t* x) {
    const __m256i* xv = reinterpret_cast<const __m256i*>(x);
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (T == WeightType::Q4) {
      __m256i s = _mm256_maddubs_epi16(w[0].code, _mm256_loadu_si256(xv));
#pragma GCC unroll 4
      for (int i = 1; i < N; ++i)
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[i].code, _mm256_loadu_si256(xv + i)));
      return _mm256_madd_epi16(s, ones);
    } else {
      __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) {
        const __m256i p =
            _mm256_maddubs_epi16(w[i].abs_w, _mm256_sign_epi8(_mm256_loadu_si256(xv + i), w[i].w));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
      }
      return s;
    }
  }
};

}  // namespace
}  // namespace trt_spec::cpu

#include "kernels/cpu/matmul_impl.h"

namespace trt_spec::cpu {

const MatmulKernels kMatmulKernelsAvx2 = {"avx2", CodeLayout::Lanes128, &quantize_acts,
                                          &matmul_float, &matmul_quant};

}  // namespace trt_spec::cpu
