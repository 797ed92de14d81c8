// repack_lanes.cpp: natural -> lane layouts of Q8 / Q4 weight codes (repack_lanes.h). Portable
// scalar code: it runs once per weight at load.
#include "kernels/cpu/repack_lanes.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trt_spec::cpu {

namespace {

// Codes of one 128-column chunk (N = 4 groups) or 64-column tail (N = 2), one byte per column:
// in = groups in column order [N][32], out = the N lane-layout vectors [N][32].
template <int N>
void lanes_of(const uint8_t* in, uint8_t* out) {
  for (int k = 0; k < N; ++k)
    for (int lane = 0; lane < 8; ++lane) {
      const int half = lane / 4, p = lane % 4;
      int g, word;
      if (N == 4) {
        g = p;
        word = k + 4 * half;
      } else {
        g = p % 2;
        word = 2 * k + p / 2 + 4 * half;
      }
      std::memcpy(out + k * 32 + lane * 4, in + g * 32 + word * 4, 4);
    }
}

// Row r's codes: natural (src) -> Lanes128 (dst); cols % 64 == 0.
void repack_row128(WeightType t, const uint8_t* src, uint8_t* dst, int64_t cols) {
  uint8_t nat[4 * 32], v[4 * 32];
  for (int64_t c = 0; c < cols; c += 128) {
    const int n = cols - c >= 128 ? 4 : 2;  // groups in this chunk (2: the 64-column tail)
    if (t == WeightType::Q8) {
      if (n == 4)
        lanes_of<4>(src + c, dst + c);
      else
        lanes_of<2>(src + c, dst + c);
      continue;
    }
    const uint8_t* s = src + c / 2;  // Q4: n / 2 super-blocks of 32 bytes
    for (int b = 0; b < n / 2; ++b)
      for (int i = 0; i < 32; ++i) {
        nat[(2 * b) * 32 + i] = s[b * 32 + i] & 0x0f;
        nat[(2 * b + 1) * 32 + i] = s[b * 32 + i] >> 4;
      }
    if (n == 4)
      lanes_of<4>(nat, v);
    else
      lanes_of<2>(nat, v);
    uint8_t* d = dst + c / 2;
    for (int b = 0; b < n / 2; ++b)
      for (int i = 0; i < 32; ++i)
        d[b * 32 + i] = static_cast<uint8_t>(v[(2 * b) * 32 + i] | (v[(2 * b + 1) * 32 + i] << 4));
  }
}

// Code of column c of a natural row (one byte per column; Q4: group g = c / 32 sits in
// super-block g / 2, low nibbles for even g).
uint8_t natural_code(WeightType t, const uint8_t* src, int64_t c) {
  if (t == WeightType::Q8) return src[c];
  const int64_t g = c / 32;
  const uint8_t b = src[(g / 2) * 32 + c % 32];
  return g % 2 == 0 ? (b & 0x0f) : (b >> 4);
}

// Row r's codes: natural (src) -> Lanes512 (dst); cols % 64 == 0.
void repack_row512(WeightType t, const uint8_t* src, uint8_t* dst, int64_t cols) {
  uint8_t v[8][64];
  for (int64_t c = 0; c < cols; c += 512) {
    const int ng = static_cast<int>(std::min<int64_t>(512, cols - c) / 32);  // groups here
    const int vb = 4 * ng;                                                   // bytes a vector
    for (int k = 0; k < 8; ++k)
      for (int i = 0; i < ng; ++i)
        for (int b = 0; b < 4; ++b) v[k][4 * i + b] = natural_code(t, src, c + 32 * i + 4 * k + b);
    if (t == WeightType::Q8) {
      for (int k = 0; k < 8; ++k) std::memcpy(dst + c + k * vb, v[k], vb);
    } else {
      uint8_t* d = dst + c / 2;
      for (int s = 0; s < 4; ++s)
        for (int b = 0; b < vb; ++b)
          d[s * vb + b] = static_cast<uint8_t>(v[2 * s][b] | (v[2 * s + 1][b] << 4));
    }
  }
}

}  // namespace

bool lanes_apply(const WeightView& w) {
  return (w.type == WeightType::Q8 || w.type == WeightType::Q4) && w.cols % 64 == 0 &&
         w.layout == CodeLayout::Natural;
}

void repack_lanes(const WeightView& w, uint8_t* out, CodeLayout layout) {
  if (!lanes_apply(w))
    throw std::invalid_argument(
        "repack_lanes: needs a Q8 / Q4 weight with cols % 64 == 0, in "
        "the natural layout");
  if (layout != CodeLayout::Lanes128 && layout != CodeLayout::Lanes512)
    throw std::invalid_argument("repack_lanes: the layout must be Lanes128 or Lanes512");
  // Sections 1.. (scales, offsets) and every padding byte as they are; then the codes.
  const size_t total = weight_blob_bytes(w.type, w.rows, w.cols);
  const size_t codes_off = weight_section_offset(w.type, w.rows, w.cols, 0);
  std::memcpy(out, w.data, total);
  const int64_t row_bytes = w.type == WeightType::Q4 ? w.cols / 2 : w.cols;
  const uint8_t* src = w.data + codes_off;
  uint8_t* dst = out + codes_off;
  const int64_t rows = w.rows;
  int threads = static_cast<int>(std::min<unsigned>(std::thread::hardware_concurrency(), 8));
  threads = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(threads, rows * row_bytes / (1 << 20) + 1)));
  auto work = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (layout == CodeLayout::Lanes128)
        repack_row128(w.type, src + r * row_bytes, dst + r * row_bytes, w.cols);
      else
        repack_row512(w.type, src + r * row_bytes, dst + r * row_bytes, w.cols);
    }
  };
  if (threads <= 1) {
    work(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back(work, rows * i / threads, rows * (i + 1) / threads);
  for (std::thread& t : pool) t.join();
}

}  // namespace trt_spec::cpu
