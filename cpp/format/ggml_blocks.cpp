// ggml_blocks.cpp: ggml block decode, one function per block type (see ggml_blocks.h).
#include "format/ggml_blocks.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/split_rows.h"
#include "kernels/half_float.h"

namespace trt_spec::format {
namespace {

constexpr int kQK = 32;    // elements of a Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 block
constexpr int kQKK = 256;  // elements of a K-quant super-block

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Low nibbles of q[0..15] are elements 0-15, high nibbles elements 16-31.
inline int nibble32(const uint8_t* q, int j) {
  return j < 16 ? (q[j] & 0x0F) : (q[j - 16] >> 4);
}

// block: d f16, q[16]: d * (q - 8)
void q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(nibble32(b + 2, j) - 8);
}

// block: d f16, m f16, q[16]: d * q + m
void q4_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(nibble32(b + 4, j)) + m;
}

// block: d f16, qh u32 (bit 4 of each element), q[16]: d * (q - 16)
void q5_0(const uint8_t* b, float* y) {
  const float d = half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < kQK; ++j) {
    const int q = nibble32(b + 6, j) | (((qh >> j) & 1) << 4);
    y[j] = d * static_cast<float>(q - 16);
  }
}

// block: d f16, m f16, qh u32, q[16]: d * q + m
void q5_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < kQK; ++j) {
    const int q = nibble32(b + 8, j) | (((qh >> j) & 1) << 4);
    y[j] = d * static_cast<float>(q) + m;
  }
}

// block: d f16, q int8[32]: q * d
void q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// The 6-bit scale and min of sub-block j (0-7) from a K-quant's 12 packed bytes.
inline void scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 0x3F;
    *m = s[j + 4] & 0x3F;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 2) & 0x30);
    *m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

// Q4_K super-block: d f16, dmin f16, scales[12], q[128]; Q5_K adds qh[32] before q (bit j of
// qh[l]: bit 4 of sub-block j's element l). Sub-block j of 32: low (j even) or high (j odd)
// nibbles of q[32 * (j / 2) ..]; value (d * sc) * q - dmin * m.
template <bool kFiveBits>
void q45_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* s = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (kFiveBits ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min(s, j, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    const uint8_t* qj = q + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (qj[l] >> shift) & 0x0F;
      if (kFiveBits) v |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = dl * static_cast<float>(v) - ml;
    }
  }
}

// super-block: ql[128], qh[64], scales int8[16], d f16. Element e = 128 h + r: low 4 bits from
// ql[64 h + r % 64] (low nibble for r < 64), high 2 bits from qh[32 h + r % 32] >> 2 (r / 32);
// value (d * scales[e / 16]) * (q - 32).
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, r = e % 128;
    const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
    const float dl = d * static_cast<float>(sc[e / 16]);
    y[e] = dl * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

struct BlockCodec {
  int elements, bytes;
  void (*decode)(const uint8_t*, float*);
};

BlockCodec codec_of(int type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return {kQK, 18, q4_0};
    case GgmlType::Q4_1: return {kQK, 20, q4_1};
    case GgmlType::Q5_0: return {kQK, 22, q5_0};
    case GgmlType::Q5_1: return {kQK, 24, q5_1};
    case GgmlType::Q8_0: return {kQK, 34, q8_0};
    case GgmlType::Q4_K: return {kQKK, 144, q45_k<false>};
    case GgmlType::Q5_K: return {kQKK, 176, q45_k<true>};
    case GgmlType::Q6_K: return {kQKK, 210, q6_k};
  }
  return {0, 0, nullptr};
}

}  // namespace

bool ggml_type_decodable(int type) {
  return codec_of(type).decode != nullptr;
}

void ggml_block_size(int type, int64_t* elements, int64_t* bytes) {
  const BlockCodec c = codec_of(type);
  *elements = c.elements;
  *bytes = c.bytes;
}

void decode_ggml_rows(int type, const uint8_t* blocks, int64_t rows, int64_t cols, float* out) {
  const BlockCodec c = codec_of(type);
  if (c.decode == nullptr) throw std::invalid_argument("ggml type " + std::to_string(type));
  if (cols % c.elements != 0)
    throw std::invalid_argument("ggml rows of " + std::to_string(cols) + " elements");
  const int64_t per_row = cols / c.elements, row_bytes = per_row * c.bytes;
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t k = 0; k < per_row; ++k)
        c.decode(blocks + r * row_bytes + k * c.bytes, out + r * cols + k * c.elements);
  };
  split_rows(rows, static_cast<double>(rows) * cols, run);
}

}  // namespace trt_spec::format
