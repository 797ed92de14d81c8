// activation.cpp: the SwiGLU kernel of activation.h (built with -mavx2 -mfma -mf16c).
#include "kernels/cpu/activation.h"

#include <immintrin.h>

#include "kernels/cpu/vec_f32.h"

namespace trt_spec::cpu {
namespace {

// silu(g) * u for 8 lanes.
inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));  // e^-g
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

}  // namespace

void swiglu_rows(const float* gate_up, int64_t i0, int64_t i1, int ffn, float* out) {
  for (int64_t i = i0; i < i1; ++i) {
    const float* g = gate_up + i * 2 * ffn;  // [ffn] gate, then [ffn] up
    const float* u = g + ffn;
    float* o = out + i * ffn;
    int c = 0;
    for (; c + 8 <= ffn; c += 8)
      _mm256_storeu_ps(o + c, silu_mul8(_mm256_loadu_ps(g + c), _mm256_loadu_ps(u + c)));
    if (c < ffn) {  // the row's last ffn % 8 columns, padded with zeros
      const int n = ffn - c;
      const __m256i lanes =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      const __m256 r =
          silu_mul8(_mm256_maskload_ps(g + c, lanes), _mm256_maskload_ps(u + c, lanes));
      _mm256_maskstore_ps(o + c, lanes, r);
    }
  }
}

}  // namespace trt_spec::cpu
