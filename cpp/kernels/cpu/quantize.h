// quantize.h: portable (scalar, no ISA flags) weight quantization and the reference decode.
//
// quantize_weight() turns a float matrix into a blob in the layout of kernels/weight_format.h;
// dequantize_weight() is the reference decode every kernel is tested against. The scalar
// f16/bf16 conversions are kernels/half_float.h's.
#pragma once

#include <cstdint>

#include "kernels/half_float.h"
#include "kernels/weight_format.h"

namespace trt_spec::cpu {

using trt_spec::bf16_to_f32;  // (kernels/half_float.h)
using trt_spec::f16_to_f32;
using trt_spec::f32_to_bf16;
using trt_spec::f32_to_f16;

// Writes weight_blob_bytes(t, rows, cols) bytes to blob (section padding zeroed).
// w: [rows, cols] row-major. Q8/Q4 need cols % 64 == 0 (throws std::invalid_argument otherwise).
//   Q8: symmetric per group of 32, d = max|w| / 127 stored as f16, q = round(w / d) + 128.
//   Q4: asymmetric per group of 32, value = d * code + m, code in [0, 15]; (d, m) are chosen
//       among min/max and a small search of least-squares fits minimising the squared error, and
//       the codes are computed with the f16-rounded d and m.
// Large tensors are split over a few std::threads (deterministic: every row is independent).
void quantize_weight(const float* w, int64_t rows, int64_t cols, WeightType t, uint8_t* blob);

// Reference decode of rows [r0, r1): out [r1 - r0, cols]. (The CPU embedding lookup uses it.)
void dequantize_rows(WeightView w, int64_t r0, int64_t r1, float* out);
// Reference decode of the whole matrix: out [rows, cols].
void dequantize_weight(WeightView w, float* out);
// ||decode(blob) - w||_F / ||w||_F (||.||_F alone where w is zero), accumulated in double per
// row and summed in row order: the same value for any thread count. w: [rows, cols].
double weight_relative_error(WeightView blob, const float* w);

}  // namespace trt_spec::cpu
