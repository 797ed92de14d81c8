// weight_format.h: the byte layout of every weight type an engine file can hold.
//
// This header is the single definition of the weight formats. The builder (through the
// bindings), the CPU kernels and any later GPU kernels all read it. A weight tensor is
// a matrix W[rows, cols] (rows = output features, cols = input features, the layout of
// a Linear weight) stored as one blob of sections, each section starting at a multiple
// of kSectionAlign bytes from the start of the blob:
//
//   F32   section 0: float    [rows, cols]
//   F16   section 0: uint16   [rows, cols]           IEEE half
//   BF16  section 0: uint16   [rows, cols]           bfloat16 (upper half of a float)
//   Q8    section 0: uint8    [rows, cols]           q = w_int8 + 128, w_int8 in [-127, 127]
//         section 1: uint16   [rows, cols / 32]      f16 scale d per group of 32
//         value(r, c) = d[r, c / 32] * (q[r, c] - 128)
//   Q4    section 0: uint8    [rows, cols / 2]       two 4-bit codes per byte
//         section 1: uint16   [rows, cols / 32]      f16 scale d per group of 32
//         section 2: uint16   [rows, cols / 32]      f16 offset m per group of 32
//         Codes are packed per super-block of 64 columns (32 bytes): byte j of super-block s
//         holds column 64 s + j in its low nibble and column 64 s + 32 + j in its high nibble.
//         value(r, c) = d[r, c / 32] * code(r, c) + m[r, c / 32], code in [0, 15]
//
// Q8 and Q4 need cols % 64 == 0 (the builder stores other tensors as F16 or F32).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trt_spec {

enum class WeightType : int32_t { F32 = 0, F16 = 1, BF16 = 2, Q8 = 3, Q4 = 4 };

constexpr int kQuantGroup = 32;       // columns sharing one scale (and offset)
constexpr int kQ4SuperBlock = 64;     // columns per packed Q4 super-block
constexpr size_t kSectionAlign = 64;  // bytes; sections and tensors start at multiples of this

inline const char* weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::F32: return "f32";
    case WeightType::F16: return "f16";
    case WeightType::BF16: return "bf16";
    case WeightType::Q8: return "q8";
    case WeightType::Q4: return "q4";
  }
  return "?";
}

inline size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

inline bool weight_type_needs_groups(WeightType t) {
  return t == WeightType::Q8 || t == WeightType::Q4;
}

// Byte size of section `s` of a [rows, cols] tensor of type t; 0 when the section does not exist.
inline size_t weight_section_bytes(WeightType t, int64_t rows, int64_t cols, int s) {
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  const size_t groups = n / kQuantGroup;
  switch (t) {
    case WeightType::F32: return s == 0 ? n * 4 : 0;
    case WeightType::F16:
    case WeightType::BF16: return s == 0 ? n * 2 : 0;
    case WeightType::Q8: return s == 0 ? n : (s == 1 ? groups * 2 : 0);
    case WeightType::Q4: return s == 0 ? n / 2 : (s == 1 || s == 2 ? groups * 2 : 0);
  }
  return 0;
}

inline int weight_section_count(WeightType t) {
  return t == WeightType::Q4 ? 3 : (t == WeightType::Q8 ? 2 : 1);
}

// Byte offset of section s from the start of the blob.
inline size_t weight_section_offset(WeightType t, int64_t rows, int64_t cols, int s) {
  size_t off = 0;
  for (int i = 0; i < s; ++i)
    off += align_up(weight_section_bytes(t, rows, cols, i), kSectionAlign);
  return off;
}

// Total blob size, the last section padded to kSectionAlign too.
inline size_t weight_blob_bytes(WeightType t, int64_t rows, int64_t cols) {
  return weight_section_offset(t, rows, cols, weight_section_count(t));
}

// How a Q8 / Q4 weight's codes (section 0) are ordered: as in the file, or in the layout of one
// CPU matmul tile (kernels/cpu/row_blocks.h): blocks of 8 rows (the AVX2 tile) or 16 (the AVX-512
// one), scales and offsets included.
enum class CodeLayout : uint8_t { Natural = 0, Rows8 = 1, Rows16 = 2 };

// A view of one weight matrix in memory (engine mmap or backend buffer). The runtime fills
// it from the engine file; kernels take it by value.
struct WeightView {
  WeightType type = WeightType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;  // blob start, kSectionAlign-aligned
  // Q8 / Q4 codes: the natural layout above, as in the file, or one of the CPU matmul tiles' lane
  // layouts (kernels/cpu/repack_lanes.h: the CPU backend repacks the weights its matmul reads).
  CodeLayout layout = CodeLayout::Natural;

  const void* section(int s) const { return data + weight_section_offset(type, rows, cols, s); }
};

}  // namespace trt_spec
