// split_rows.h: runs fn(r0, r1) over a few std::threads that split [0, rows), for the host-side
// encoders and decoders (quantize, the builder's ggml decode) whose rows are independent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace trt_spec {

// Threads: at most min(hardware threads, 8), one per 2^20 units of `work`, one per row; the
// calling thread runs the first part. Each row is computed the same way whatever the split.
template <typename Fn>
void split_rows(int64_t rows, double work, Fn fn) {
  int threads = static_cast<int>(std::min<double>(std::thread::hardware_concurrency(), 8));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(work / (1 << 20)) + 1));
  threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(rows, 1)));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i)
    pool.emplace_back(fn, rows * i / threads, rows * (i + 1) / threads);
  fn(int64_t{0}, rows / threads);
  for (auto& th : pool) th.join();
}

}  // namespace trt_spec
