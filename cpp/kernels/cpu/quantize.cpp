// quantize.cpp: portable weight quantization (F16/BF16/Q8/Q4 encoders), the reference decode and
// exact scalar f16/bf16 conversions. No ISA-specific code: this file builds without -m flags.
#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/split_rows.h"

namespace trt_spec::cpu {
namespace {

// Round to nearest integer, ties to even, for |v| < 2^22 (default FP rounding mode).
inline float round_ne(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// Q8, one group of 32: d = max|w| / 127 (f16), q = round(w / d) + 128.
void quantize_group_q8(const float* x, uint8_t* q, uint16_t* d_out) {
  float amax = 0.0f;
  for (int i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t dh = f32_to_f16(amax / 127.0f);
  const float d = f16_to_f32(dh);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kQuantGroup; ++i) {
    const float v = std::min(127.0f, std::max(-127.0f, round_ne(x[i] * id)));
    q[i] = static_cast<uint8_t>(static_cast<int>(v) + 128);
  }
  *d_out = dh;
}

// 4 floats as a GCC/Clang generic vector (lowered to whatever the target has, SSE2 on baseline
// x86-64): the Q4 search below runs a few hundred operations per group, and this keeps it fast
// without ISA flags. Lane-wise sums keep the float arithmetic deterministic.
typedef float F4 __attribute__((vector_size(16)));
constexpr int kLanes = 4;

inline F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline F4 splat(float f) {
  return F4{f, f, f, f};
}

inline float hsum(F4 v) {
  return (v[0] + v[1]) + (v[2] + v[3]);
}

// min/max written in the operand order of SSE minps/maxps so the compiler emits those.
inline F4 clamp(F4 v, float lo, float hi) {
  v = v > splat(lo) ? v : splat(lo);
  return v < splat(hi) ? v : splat(hi);
}

inline F4 min4(F4 v, float hi) {
  return v < splat(hi) ? v : splat(hi);
}

inline F4 round_ne4(F4 v) {
  const F4 magic = splat(12582912.0f);  // 1.5 * 2^23
  return (v + magic) - magic;
}

typedef uint32_t U4 __attribute__((vector_size(16)));

// f32_to_f16 of 4 floats: lanes in the normal half range round in vector code (the RNE trick:
// add 0xfff plus the kept lsb, then truncate); a chunk with any other lane goes scalar.
inline void f32_to_f16_x4(const float* in, uint16_t* out) {
  U4 x;
  std::memcpy(&x, in, sizeof(x));
  const U4 a = x & 0x7fffffffu;
  const U4 normal = (a - 0x38800000u) < (0x477ff000u - 0x38800000u);  // lanes: all ones / zero
  if (normal[0] & normal[1] & normal[2] & normal[3]) {
    const U4 h = ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13) | ((x >> 16) & 0x8000u);
    for (int k = 0; k < kLanes; ++k) out[k] = static_cast<uint16_t>(h[k]);
  } else {
    for (int k = 0; k < kLanes; ++k) out[k] = f32_to_f16(in[k]);
  }
}

// Codes of a Q4 group for given (d, m) after rounding both to f16; returns the squared error of
// the decode d16 * code + m16 (exactly what dequantization computes).
float q4_codes_rounded(const float* x, float d, float m, uint8_t* codes, uint16_t* dh,
                       uint16_t* mh) {
  *dh = f32_to_f16(d);
  *mh = f32_to_f16(m);
  const float df = f16_to_f32(*dh);
  const float mf = f16_to_f32(*mh);
  const float id = df > 0.0f ? 1.0f / df : 0.0f;
  F4 err = splat(0.0f);
  for (int i = 0; i < kQuantGroup; i += kLanes) {
    const F4 xv = load4(x + i);
    const F4 c = clamp(round_ne4((xv - mf) * id), 0.0f, 15.0f);
    const F4 e = c * df + mf - xv;
    err += e * e;
    for (int k = 0; k < kLanes; ++k) codes[i + k] = static_cast<uint8_t>(c[k]);
  }
  return hsum(err);
}

// Q4, one group of 32: value = d * code + m. Tries min/max, then a search over scales in the
// spirit of llama.cpp's make_qkx2_quants: for each trial scale, assign codes, solve the 2x2
// least-squares problem for (d, m) given the codes, and keep the fit with the least squared
// error; the winner is re-encoded with f16-rounded (d, m) and kept only if it beats min/max.
void quantize_group_q4(const float* x, uint8_t* codes, uint16_t* d_out, uint16_t* m_out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < kQuantGroup; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (!(hi > lo)) {  // constant group (or NaN): all codes 0, value = m
    std::memset(codes, 0, kQuantGroup);
    *d_out = 0;
    *m_out = f32_to_f16(lo);
    return;
  }
  const float range = hi - lo;
  float best_err = q4_codes_rounded(x, range / 15.0f, lo, codes, d_out, m_out);

  // The fit works on xs = x - lo (better conditioned): xs = d * l + m', m = m' + lo.
  F4 xs[kQuantGroup / kLanes];
  F4 sx4 = splat(0.0f), sxx4 = splat(0.0f);
  for (int i = 0; i < kQuantGroup / kLanes; ++i) {
    xs[i] = load4(x + kLanes * i) - lo;
    sx4 += xs[i];
    sxx4 += xs[i] * xs[i];
  }
  const float sx = hsum(sx4), sxx = hsum(sxx4);
  constexpr int kSteps = 8;
  constexpr float n = kQuantGroup;
  float fit_err = INFINITY, fit_d = 0.0f, fit_m = 0.0f;
  for (int s = 0; s <= kSteps; ++s) {
    const float iscale = (14.0f + 2.0f * s / kSteps) / range;
    F4 sl4 = splat(0.0f), sll4 = splat(0.0f), sxl4 = splat(0.0f);
    for (int i = 0; i < kQuantGroup / kLanes; ++i) {
      const F4 l = min4(round_ne4(xs[i] * iscale), 15.0f);  // xs >= 0: no lower clamp
      sl4 += l;
      sll4 += l * l;
      sxl4 += xs[i] * l;
    }
    const float sl = hsum(sl4), sll = hsum(sll4), sxl = hsum(sxl4);
    const float det = n * sll - sl * sl;
    if (!(det > 0.0f)) continue;
    const float d = (n * sxl - sl * sx) / det;
    const float m = (sll * sx - sl * sxl) / det;
    if (!(d > 0.0f)) continue;
    // sum (d l + m - xs)^2 expanded with the sums above.
    const float err =
        d * d * sll + 2.0f * d * m * sl + n * m * m - 2.0f * d * sxl - 2.0f * m * sx + sxx;
    if (err < fit_err) {
      fit_err = err;
      fit_d = d;
      fit_m = m + lo;
    }
  }
  if (fit_err < INFINITY) {
    uint8_t c2[kQuantGroup];
    uint16_t d2, m2;
    const float err = q4_codes_rounded(x, fit_d, fit_m, c2, &d2, &m2);
    if (err < best_err) {
      std::memcpy(codes, c2, kQuantGroup);
      *d_out = d2;
      *m_out = m2;
    }
  }
}

// Quantizes rows [r0, r1) of w [rows, cols] into the sections of blob.
void quantize_rows(const float* w, int64_t rows, int64_t cols, WeightType t, uint8_t* blob,
                   int64_t r0, int64_t r1) {
  WeightView v{t, rows, cols, blob};
  const int64_t groups = cols / kQuantGroup;
  switch (t) {
    case WeightType::F32:
      std::memcpy(blob + r0 * cols * 4, w + r0 * cols, (r1 - r0) * cols * 4);
      return;
    case WeightType::F16: {
      auto* out = static_cast<uint16_t*>(const_cast<void*>(v.section(0)));
      int64_t i = r0 * cols;
      for (; i + kLanes <= r1 * cols; i += kLanes) f32_to_f16_x4(w + i, out + i);
      for (; i < r1 * cols; ++i) out[i] = f32_to_f16(w[i]);
      return;
    }
    case WeightType::BF16: {
      auto* out = static_cast<uint16_t*>(const_cast<void*>(v.section(0)));
      for (int64_t i = r0 * cols; i < r1 * cols; ++i) out[i] = f32_to_bf16(w[i]);
      return;
    }
    case WeightType::Q8: {
      auto* q = static_cast<uint8_t*>(const_cast<void*>(v.section(0)));   // [rows, cols]
      auto* d = static_cast<uint16_t*>(const_cast<void*>(v.section(1)));  // [rows, groups]
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t g = 0; g < groups; ++g)
          quantize_group_q8(w + r * cols + g * kQuantGroup, q + r * cols + g * kQuantGroup,
                            d + r * groups + g);
      return;
    }
    case WeightType::Q4: {
      auto* q = static_cast<uint8_t*>(const_cast<void*>(v.section(0)));   // [rows, cols / 2]
      auto* d = static_cast<uint16_t*>(const_cast<void*>(v.section(1)));  // [rows, groups]
      auto* m = static_cast<uint16_t*>(const_cast<void*>(v.section(2)));  // [rows, groups]
      uint8_t lo[kQuantGroup], hi[kQuantGroup];
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t g = 0; g < groups; g += 2) {  // one 64-column super-block
          const float* x = w + r * cols + g * kQuantGroup;
          quantize_group_q4(x, lo, d + r * groups + g, m + r * groups + g);
          quantize_group_q4(x + kQuantGroup, hi, d + r * groups + g + 1, m + r * groups + g + 1);
          uint8_t* out = q + r * (cols / 2) + g * (kQuantGroup / 2);
          for (int j = 0; j < kQuantGroup; ++j) out[j] = static_cast<uint8_t>(lo[j] | (hi[j] << 4));
        }
      }
      return;
    }
  }
}

}  // namespace

void quantize_weight(const float* w, int64_t rows, int64_t cols, WeightType t, uint8_t* blob) {
  if (weight_type_needs_groups(t) && cols % kQ4SuperBlock != 0)
    throw std::invalid_argument(std::string("quantize_weight: ") + weight_type_name(t) +
                                " needs cols % 64 == 0, got " + std::to_string(cols));
  // Zero the padding after each section.
  for (int s = 0; s < weight_section_count(t); ++s) {
    const size_t off = weight_section_offset(t, rows, cols, s);
    const size_t n = weight_section_bytes(t, rows, cols, s);
    std::memset(blob + off + n, 0, align_up(n, kSectionAlign) - n);
  }
  const double work = static_cast<double>(rows) * cols * (t == WeightType::Q4 ? 8 : 1);
  split_rows(rows, work,
             [=](int64_t r0, int64_t r1) { quantize_rows(w, rows, cols, t, blob, r0, r1); });
}

void dequantize_rows(WeightView w, int64_t r0, int64_t r1, float* out) {
  if (w.layout != CodeLayout::Natural)  // (the CPU matmul's private layouts: never handed out)
    throw std::invalid_argument("dequantize_rows: a weight in the matmul's row-block layout");
  const int64_t cols = w.cols, groups = cols / kQuantGroup;
  for (int64_t r = r0; r < r1; ++r, out += cols) {
    switch (w.type) {
      case WeightType::F32:
        std::memcpy(out, static_cast<const float*>(w.section(0)) + r * cols, cols * 4);
        break;
      case WeightType::F16:
      case WeightType::BF16: {
        const auto* h = static_cast<const uint16_t*>(w.section(0)) + r * cols;
        for (int64_t c = 0; c < cols; ++c)
          out[c] = w.type == WeightType::F16 ? f16_to_f32(h[c]) : bf16_to_f32(h[c]);
        break;
      }
      case WeightType::Q8: {
        const auto* q = static_cast<const uint8_t*>(w.section(0)) + r * cols;     // [cols]
        const auto* d = static_cast<const uint16_t*>(w.section(1)) + r * groups;  // [groups]
        for (int64_t c = 0; c < cols; ++c)
          out[c] =
              f16_to_f32(d[c / kQuantGroup]) * static_cast<float>(static_cast<int>(q[c]) - 128);
        break;
      }
      case WeightType::Q4: {
        const auto* q = static_cast<const uint8_t*>(w.section(0)) + r * (cols / 2);  // [cols / 2]
        const auto* d = static_cast<const uint16_t*>(w.section(1)) + r * groups;     // [groups]
        const auto* m = static_cast<const uint16_t*>(w.section(2)) + r * groups;     // [groups]
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t sb = c / kQ4SuperBlock, j = c % kQ4SuperBlock;
          const uint8_t byte = q[sb * 32 + (j & 31)];
          const int code = j < 32 ? (byte & 0xf) : (byte >> 4);
          const int64_t g = c / kQuantGroup;
          out[c] = f16_to_f32(d[g]) * static_cast<float>(code) + f16_to_f32(m[g]);
        }
        break;
      }
    }
  }
}

void dequantize_weight(WeightView w, float* out) {
  dequantize_rows(w, 0, w.rows, out);
}

double weight_relative_error(WeightView blob, const float* w) {
  const int64_t rows = blob.rows, cols = blob.cols;
  std::vector<double> err(rows), norm(rows);  // [rows] sums of squares, in double
  auto run = [&](int64_t r0, int64_t r1) {
    std::vector<float> deq(cols);  // [cols]
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_rows(blob, r, r + 1, deq.data());
      const float* x = w + r * cols;
      double e = 0.0, n = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(deq[c]) - x[c];
        e += d * d;
        n += static_cast<double>(x[c]) * x[c];
      }
      err[r] = e;
      norm[r] = n;
    }
  };
  split_rows(rows, static_cast<double>(rows) * cols, run);
  double e = 0.0, n = 0.0;  // rows summed in order: the same value for any thread count
  for (int64_t r = 0; r < rows; ++r) {
    e += err[r];
    n += norm[r];
  }
  return n > 0.0 ? std::sqrt(e / n) : std::sqrt(e);
}

}  // namespace trt_spec::cpu
