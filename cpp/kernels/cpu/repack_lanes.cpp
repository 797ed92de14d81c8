// repack_lanes.cpp: natural -> row-block layouts of Q8 / Q4 weights (repack_lanes.h,
// row_blocks.h). Portable scalar code: it runs once per weight at load.
#include "kernels/cpu/repack_lanes.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trt_spec::cpu {

namespace {

#include "kernels/cpu/row_blocks.h"

// Block b (of R rows) of w (natural) -> out (row-block layout), codes, scales and offsets; out is
// a blob of w's type and shape.
void repack_block(const WeightView& w, int R, uint8_t* out, int64_t b) {
  const int64_t groups = w.cols / 32, row_bytes = natural_row_bytes(w.type, w.cols);
  const size_t codes_off = weight_section_offset(w.type, w.rows, w.cols, 0);
  std::vector<const uint8_t*> row(R);
  for (int i = 0; i < R; ++i) row[i] = w.data + codes_off + (b * R + i) * row_bytes;
  uint8_t* codes = out + codes_off + b * R * row_bytes;
  const int gb = row_block_group_bytes(w.type, R);
  for (int64_t g = 0; g < groups; ++g)
    row_block_pack_group(w.type, R, row.data(), g, codes + g * gb);
  // Scales and offsets: [rows, groups] -> [blocks][groups][R].
  for (int s = 1; s < weight_section_count(w.type); ++s) {
    const size_t off = weight_section_offset(w.type, w.rows, w.cols, s);
    const uint16_t* from = reinterpret_cast<const uint16_t*>(w.data + off);
    uint16_t* to = reinterpret_cast<uint16_t*>(out + off);
    for (int64_t g = 0; g < groups; ++g)
      for (int i = 0; i < R; ++i) to[(b * groups + g) * R + i] = from[(b * R + i) * groups + g];
  }
}

}  // namespace

bool lanes_apply(const WeightView& w, CodeLayout layout) {
  const int R = row_block_rows(layout);
  return (w.type == WeightType::Q8 || w.type == WeightType::Q4) && w.cols % 64 == 0 &&
         w.layout == CodeLayout::Natural && R > 0 && w.rows % R == 0;
}

void repack_lanes(const WeightView& w, uint8_t* out, CodeLayout layout) {
  if (row_block_rows(layout) == 0)
    throw std::invalid_argument("repack_lanes: the layout must be Rows8 or Rows16");
  if (!lanes_apply(w, layout))
    throw std::invalid_argument(
        "repack_lanes: needs a Q8 / Q4 weight in the natural layout with cols % 64 == 0 and rows "
        "a multiple of the layout's block");
  const int R = row_block_rows(layout);
  // Each section's padding as it is; the threads then write every block's codes, scales and
  // offsets (so the blob's pages are first touched, and faulted in, by two threads or more).
  // (The offset of the section past the last is the blob's size.)
  for (int s = 0; s < weight_section_count(w.type); ++s) {
    const size_t end = weight_section_offset(w.type, w.rows, w.cols, s) +
                       weight_section_bytes(w.type, w.rows, w.cols, s);
    const size_t next = weight_section_offset(w.type, w.rows, w.cols, s + 1);
    std::memcpy(out + end, w.data + end, next - end);
  }
  const int64_t blocks = w.rows / R, row_bytes = natural_row_bytes(w.type, w.cols);
  int threads = static_cast<int>(std::min<unsigned>(std::thread::hardware_concurrency(), 8));
  threads = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(threads, w.rows * row_bytes / (1 << 20) + 1)));
  auto work = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) repack_block(w, R, out, b);
  };
  if (threads <= 1) {
    work(0, blocks);
    return;
  }
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back(work, blocks * i / threads, blocks * (i + 1) / threads);
  for (std::thread& t : pool) t.join();
}

}  // namespace trt_spec::cpu
