// matmul_avx2.cpp: the AVX2 + FMA + F16C CPU matmul kernels (built with -mavx2 -mfma -mf16c).
//
// Defines the vector primitives matmul_impl.h is written against, then the kMatmulKernelsAvx2
// table. Primitives an Isa provides:
//   VF, W                 float vector type of W lanes; W is also the rows of a weight block of
//                         the quantized tile (kRowLayout: Rows8 here, Rows16 for AVX-512)
//   zero, loadu, storeu, fma, mul, set1, hsum
//   load_w<T>(row, c)     W weights of type T from column c, as floats
//   VI, to_float(VI)      int32 vector of W lanes, converted to floats
//   load_f16(p)           W f16 values as floats
//   store_rows(p, lo, hi, v)  lanes [lo, hi) of v to p + lo .. p + hi
//   group_dots<T, MT>(w, x, ld, s)  s[m] = the W rows' int32 dots of one group (the block's
//                         codes at w, row_blocks.h) with activation row m's 32 codes at x + m * ld
//   kQuantMt<T>           activation rows per quantized tile
//
// Q4: maddubs(code, bcast(x word)) (u8 x s8 pairs; each pair sum <= 2 * 15 * 127), the 8 words'
// products summed in int16 (<= 8 * 3810 < 32768), then one madd to int32 lanes. Q8: the codes'
// low and high nibbles as two Q4-like planes (q = 16 h + l): s = 16 * dot(h, x) + dot(l, x), each
// summed the same way; maddubs(q, x) itself would saturate on (q = 255) * (x = 127) pairs.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul.h"

namespace trt_spec::cpu {
namespace {

struct Isa {
  using VF = __m256;
  using VI = __m256i;
  static constexpr int W = 8;
  static constexpr CodeLayout kRowLayout = CodeLayout::Rows8;
  static VF zero() { return _mm256_setzero_ps(); }
  static VF loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, VF v) { _mm256_storeu_ps(p, v); }
  static VF fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
  static VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
  static VF set1(float v) { return _mm256_set1_ps(v); }
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

  static VF to_float(VI v) { return _mm256_cvtepi32_ps(v); }
  static VF load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_rows(float* p, int lo, int hi, VF v) {
    const __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i keep = _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(lo - 1)),
                                          _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
    _mm256_maskstore_ps(p, keep, v);
  }

  // Q8 keeps two int16 sums per activation row: at most 6 rows fit the 16 registers.
  template <WeightType T>
  static constexpr int kQuantMt = T == WeightType::Q4 ? 8 : 6;

  // x word k of activation row m (4 codes) in every lane.
  static __m256i word(const int8_t* x, int k) {
    int32_t v;
    std::memcpy(&v, x + 4 * k, 4);
    return _mm256_set1_epi32(v);
  }
  // Keeps v in a register and the sums in program order (GCC otherwise hoists every product of
  // the group and spills them, which halved the tile's speed).
  static void pin(__m256i& v) { asm("" : "+x"(v)); }

  template <WeightType T, int MT>
  static void group_dots(const uint8_t* w, const int8_t* x, int64_t ld, VI* s) {
    const __m256i nib = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    if constexpr (T == WeightType::Q4) {
      __m256i s16[MT];
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) s16[m] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {  // vector j: V_2j low, V_2j+1 high
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w) + j);
        const __m256i lo = _mm256_and_si256(v, nib);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          s16[m] = _mm256_add_epi16(s16[m], _mm256_maddubs_epi16(lo, word(x + m * ld, 2 * j)));
          s16[m] = _mm256_add_epi16(s16[m], _mm256_maddubs_epi16(hi, word(x + m * ld, 2 * j + 1)));
          pin(s16[m]);
        }
      }
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) s[m] = _mm256_madd_epi16(s16[m], ones);
    } else {
      __m256i sl[MT], sh[MT];
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) sl[m] = sh[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {  // V_k: low and high nibbles of its codes
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w) + k);
        const __m256i lo = _mm256_and_si256(v, nib);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const __m256i xk = word(x + m * ld, k);
          sl[m] = _mm256_add_epi16(sl[m], _mm256_maddubs_epi16(lo, xk));
          sh[m] = _mm256_add_epi16(sh[m], _mm256_maddubs_epi16(hi, xk));
          pin(sl[m]);
          pin(sh[m]);
        }
      }
      const __m256i sixteen = _mm256_set1_epi16(16);
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m)
        s[m] = _mm256_add_epi32(_mm256_madd_epi16(sh[m], sixteen), _mm256_madd_epi16(sl[m], ones));
    }
  }
};

}  // namespace
}  // namespace trt_spec::cpu

#include "kernels/cpu/matmul_impl.h"

namespace trt_spec::cpu {

const MatmulKernels kMatmulKernelsAvx2 = {"avx2", CodeLayout::Rows8, &quantize_acts, &matmul_float,
                                          &matmul_quant};

}  // namespace trt_spec::cpu
