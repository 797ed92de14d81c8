// thread_pool.h: a fixed pool of worker threads for the CPU backend's ops.
//
// An op calls parallel_for once; workers spin briefly between ops (a decode step runs a few
// hundred ops, and a wake-up through the kernel costs tens of microseconds), then sleep when no
// work comes. Spinning only pays on cores that are otherwise idle, so it is kept short.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace trt_spec {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // total threads, the caller included
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over [0, n) in chunks of `grain` (the last may be shorter), chunks
  // handed out dynamically to all threads. Returns when every chunk is done.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_chunks();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_{0};
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<bool> stop_{false};
  int64_t n_ = 0, grain_ = 1, n_chunks_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
};

}  // namespace trt_spec
