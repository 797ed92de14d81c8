// scripted_backend.h: a test-only backend (the _trt_spec_testing module, never shipped): the CPU
// backend's ops, timed by a virtual device clock with scripted costs, so that a test of the cost
// measurements knows the exact device time of every phase, on the synchronous path the CPU takes
// and on the asynchronous one a GPU with graphs takes.
//
// The clock: each model forward of n rows costs fixed + per_row * n seconds (charged at its
// layer-0 attention; the draft model's KV cache tells the models apart); other ops cost nothing.
// Timers (Backend::Timer) read the clock at start() and stop(). Two modes:
//   host    like the CPU: ops in order on the caller, no graphs, timers readable at once.
//   graphs  like a GPU: runs_on_host() is false; capture() records the ops (running none) and
//           costs `capture` seconds of host work, which the stream sees as idle time (the clock
//           advances); a graph's first launch costs `first_launch` more (a GPU uploads a graph
//           at its first launch). A timer may be read only after a synchronisation (download(),
//           synchronize()) that followed its stop(); earlier it throws, where a device would
//           have to wait for it: a synchronisation the caller should not add.
// syncs() counts the synchronisations.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "backend/cpu/cpu_backend.h"

namespace trt_spec::testing {

struct ScriptedCosts {
  double target_fixed = 0.0, target_row = 0.0;  // a target forward: fixed + row * n
  double draft_fixed = 0.0, draft_row = 0.0;    // a draft forward
  double capture = 0.0;                         // host seconds of one capture
  double first_launch = 0.0;                    // a graph's first launch, on top of its ops
};

class ScriptedBackend final : public CpuBackend {
 public:
  ScriptedBackend(int n_threads, bool graphs);

  void set_costs(const ScriptedCosts& c) { costs_ = c; }
  const ScriptedCosts& costs() const { return costs_; }
  // The draft model's KV cache (its forwards cost the draft's costs; null: none).
  void set_draft_cache(const void* k) { draft_k_ = k; }
  double clock() const { return clock_; }
  void advance(double seconds) { clock_ += seconds; }
  int64_t syncs() const { return syncs_; }
  int64_t captures() const { return captures_; }
  // Timer bookkeeping: a stop point's mark, and whether a synchronisation has followed it.
  uint64_t mark() { return ++marks_; }
  bool reached(uint64_t m) const { return !graphs_ || m <= synced_; }

  std::string name() const override;
  bool runs_on_host() const override { return !graphs_; }
  void download(void* dst, const void* src, size_t bytes) override;
  void synchronize() override;
  bool supports_graphs() const override { return graphs_; }
  std::unique_ptr<BackendGraph> capture(const std::function<void()>& issue_ops) override;
  void attention(const float* qkv, const Rows& rows, int n, const AttentionShape& shape,
                 KvCache& cache, int layer, float* out) override;
  std::unique_ptr<Timer> timer() override;

 private:
  void synced();

  bool graphs_;
  ScriptedCosts costs_;
  const void* draft_k_ = nullptr;
  double clock_ = 0.0;
  uint64_t marks_ = 0, synced_ = 0;
  int64_t syncs_ = 0, captures_ = 0;
};

}  // namespace trt_spec::testing
