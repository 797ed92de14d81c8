// matmul_avx512.cpp: the AVX-512 (F, BW, VL, VNNI) CPU matmul kernels, built with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c.
//
// Same structure as matmul_avx2.cpp (primitives listed there, body in matmul_impl.h) with:
//   - float weights: 512-bit vectors, 16 columns per step;
//   - Q4 / Q8: vpdpbusd (u8 x s8 -> int32, no saturation) on 256-bit vectors replaces
//     maddubs + madd, and Q8 multiplies its unsigned codes q = w + 128 directly; the kernel
//     removes the bias with -128 * d_w * ds per group (kQ8Bias).
// Only called when __builtin_cpu_supports reports AVX512 F, BW, VL and VNNI (matmul_dispatch.cpp;
// no BF16 instruction is used, so AVX512_BF16 is not required). Not runnable on AVX2-only
// machines: tests/cpp/test_cpu_kernels.cpp and tests/test_kernels_cpu.py cover it wherever the
// CPU has these features.
//
// GCC 12.2's AVX-512 headers trip a false -Wuninitialized at -O3 (GCC bug 105593, fixed in 12.3).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/matmul.h"

namespace trt_spec::cpu {
namespace {

struct Isa {
  using VF = __m512;
  static constexpr int W = 16;
  static VF zero() { return _mm512_setzero_ps(); }
  static VF loadu(const float* p) { return _mm512_loadu_ps(p); }
  static VF fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(VF v) {
    const __m256 s8 =
        _mm256_add_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  template <WeightType T>
  static VF load_w(const uint8_t* row, int64_t c) {
    if constexpr (T == WeightType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
    } else {
      const __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + c));
      if constexpr (T == WeightType::F16) {
        return _mm512_cvtph_ps(h);
      } else {  // bf16: the upper half of a float
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
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
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), code, x);
  }

  using Q8Prep = __m256i;  // the unsigned codes themselves
  static constexpr float kQ8Bias = -128.0f;
  static Q8Prep q8_prep(__m256i q) { return q; }
  static __m256i dot_q8(const Q8Prep& q, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x);
  }
};

}  // namespace
}  // namespace trt_spec::cpu

#include "kernels/cpu/matmul_impl.h"

namespace trt_spec::cpu {

const MatmulKernels kMatmulKernelsAvx512 = {"avx512", &quantize_acts, &matmul_float, &matmul_quant};

}  // namespace trt_spec::cpu
