// thread_pool.cpp: spin-then-sleep worker pool (thread_pool.h).
#include "backend/cpu/thread_pool.h"

#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TRT_SPEC_PAUSE() _mm_pause()
#else
#define TRT_SPEC_PAUSE() ((void)0)
#endif

namespace trt_spec {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  while (true) {
    int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= n_chunks_) break;
    int64_t b = c * grain_;
    int64_t e = b + grain_ < n_ ? b + grain_ : n_;
    (*fn_)(b, e);
  }
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  const char* env = std::getenv("TRT_SPEC_SPIN_US");
  const auto spin_limit = std::chrono::microseconds(env ? std::atoi(env) : 100);
  while (true) {
    // Spin briefly waiting for the next op (TRT_SPEC_SPIN_US, default 100 us), then sleep.
    auto spin_start = std::chrono::steady_clock::now();
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      TRT_SPEC_PAUSE();
      if (++spins % 64 == 0 && std::chrono::steady_clock::now() - spin_start > spin_limit) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_.load() != seen; });
        break;
      }
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_chunks();
    busy_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunks = (n + grain - 1) / grain;
  if (n_threads_ == 1 || chunks == 1) {
    for (int64_t b = 0; b < n; b += grain) fn(b, b + grain < n ? b + grain : n);
    return;
  }
  n_ = n;
  grain_ = grain;
  n_chunks_ = chunks;
  fn_ = &fn;
  next_chunk_.store(0, std::memory_order_relaxed);
  busy_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunks();
  while (busy_.load(std::memory_order_acquire) != 0) TRT_SPEC_PAUSE();
  fn_ = nullptr;
}

}  // namespace trt_spec
