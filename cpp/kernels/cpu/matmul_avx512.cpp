// matmul_avx512.cpp: the AVX-512 (F, BW, VL, VNNI) CPU matmul kernels, built with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c.
//
// Same structure as matmul_avx2.cpp (primitives listed there, body in matmul_impl.h) with:
//   - float weights: 512-bit vectors, 16 columns per step;
//   - Q4 / Q8: vpdpbusd (u8 x s8 -> int32, no saturation) replaces maddubs + int16 sums + madd,
//     and Q8 multiplies its unsigned codes q = w + 128 directly; the kernel removes the bias with
//     -128 * d_w * ds per group (kQ8Bias). The tiles are QuantTile512 (matmul_quant512_impl.h:
//     512-bit vectors, up to 12 activation rows), so this Isa has no dot<T, N>.
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

  static void storeu(float* p, VF v) { _mm512_storeu_ps(p, v); }

  // Q4 codes and Q8 unsigned codes both go to vpdpbusd as they are.
  template <WeightType T>
  using WVec = __m256i;
  static constexpr float kQ8Bias = -128.0f;

  template <WeightType T>
  static __m256i wvec(__m256i v) {
    return v;
  }
};

}  // namespace
}  // namespace trt_spec::cpu

#include "kernels/cpu/matmul_impl.h"

namespace trt_spec::cpu {

const MatmulKernels kMatmulKernelsAvx512 = {"avx512", CodeLayout::Lanes512, &quantize_acts,
                                            &matmul_float, &matmul_quant};

}  // namespace trt_spec::cpu
