// ggml_blocks.h: decode of llama.cpp's (ggml's) block-quantized tensor rows to float32, for the
// builder's GGUF reader. Each value is computed with the float32 operations, in the order, of the
// gguf package's numpy dequantizers (no fused multiply-add: the portable build has none), so
// the output equals theirs bit for bit (tests/test_ggml_blocks.py).
#pragma once

#include <cstdint>

namespace trt_spec::format {

// ggml type ids (ggml.h's enum ggml_type) this file decodes.
enum class GgmlType : int {
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
};

// Whether `type` is one of the above.
bool ggml_type_decodable(int type);
// (elements, bytes) of one block of `type`; {0, 0} for a type not decoded here.
void ggml_block_size(int type, int64_t* elements, int64_t* bytes);

// Decodes rows [rows, cols] of `type` from `blocks` [rows, cols / elements * bytes] into
// out [rows, cols]. cols must be a multiple of the block's elements. Rows are split over a
// few threads (each row independent: the bytes do not depend on the split).
void decode_ggml_rows(int type, const uint8_t* blocks, int64_t rows, int64_t cols, float* out);

}  // namespace trt_spec::format
