// matmul_avx2.cpp: the AVX2 + FMA + F16C CPU matmul kernels (built with -mavx2 -mfma -mf16c).
//
// Defines the vector primitives matmul_impl.h is written against, then the kMatmulKernelsAvx2
// table. Primitives an Isa provides:
//   VF, W                 float vector type of W lanes (float-weight kernels)
//   zero, loadu, fma, hsum, load_w<T>(row, c)   W weights of type T from column c, as floats
//   q4_unpack(p, lo, hi)  32 bytes of a Q4 super-block -> low / high nibbles (unsigned bytes)
//   dot_q4(code, x)       8 int32 partial sums of code (u8, 0..15) * x (s8) over 32 bytes
//   Q8Prep, q8_prep(q), dot_q8(prep, x): the same for Q8 codes q = w + 128
//   kQ8Bias               what dot_q8 adds per code unit: 0 if it computes sum(w * x) directly,
//                         -128 if it computes sum(q * x) (the kernel then adds -128 * d_w * ds)
//
// Q8 here: _mm256_maddubs_epi16(u8, s8) would saturate on (q = 255) * (x = 127) pairs, so the
// codes are turned back to signed (q ^ 0x80) and multiplied with the sign trick:
// maddubs(|w|, sign(x, w)), whose pair sums stay below 2 * 127 * 127 < 32768.
#include <immintrin.h>

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

  static void q4_unpack(const uint8_t* p, __m256i& lo, __m256i& hi) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i mask = _mm256_set1_epi8(0x0f);
    lo = _mm256_and_si256(v, mask);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  }
  static __m256i dot_q4(__m256i code, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(code, x), _mm256_set1_epi16(1));
  }

  struct Q8Prep {
    __m256i abs_w;  // |w|, u8 0..127
    __m256i w;      // w, s8 -127..127
  };
  static constexpr float kQ8Bias = 0.0f;
  static Q8Prep q8_prep(__m256i q) {
    const __m256i w = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
    return {_mm256_abs_epi8(w), w};
  }
  static __m256i dot_q8(const Q8Prep& p, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(p.abs_w, _mm256_sign_epi8(x, p.w)),
                             _mm256_set1_epi16(1));
  }
};

}  // namespace
}  // namespace trt_spec::cpu

#include "kernels/cpu/matmul_impl.h"

namespace trt_spec::cpu {

const MatmulKernels kMatmulKernelsAvx2 = {"avx2", &quantize_acts, &matmul_float, &matmul_quant};

}  // namespace trt_spec::cpu
