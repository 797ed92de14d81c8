// scripted_backend.cpp: the scripted-clock test backend (scripted_backend.h).
#include "bindings/scripted_backend.h"

#include "common/errors.h"

namespace trt_spec::testing {

namespace {

class ScriptedTimer final : public Backend::Timer {
 public:
  explicit ScriptedTimer(ScriptedBackend& be) : be_(be) {}
  void start() override { t0_ = be_.clock(); }
  void stop() override {
    t1_ = be_.clock();
    stop_mark_ = be_.mark();
  }
  double seconds() override {
    if (stop_mark_ == 0) throw Error("scripted timer: read before start() and stop()");
    if (!be_.reached(stop_mark_))
      throw Error("scripted timer: read before a synchronisation followed its stop()");
    return t1_ - t0_;
  }

 private:
  ScriptedBackend& be_;
  double t0_ = 0.0, t1_ = 0.0;
  uint64_t stop_mark_ = 0;
};

// The recorded ops, run again at each launch (they read whatever memory holds then).
class ScriptedGraph final : public BackendGraph {
 public:
  ScriptedGraph(ScriptedBackend& be, std::function<void()> ops) : be_(be), ops_(std::move(ops)) {}
  void launch() override {
    if (!launched_) be_.advance(be_.costs().first_launch);
    launched_ = true;
    ops_();
  }

 private:
  ScriptedBackend& be_;
  std::function<void()> ops_;
  bool launched_ = false;
};

}  // namespace

ScriptedBackend::ScriptedBackend(int n_threads, bool graphs)
    : CpuBackend(n_threads), graphs_(graphs) {}

std::string ScriptedBackend::name() const {
  return std::string("scripted-clock ") + (graphs_ ? "graphs " : "host ") + CpuBackend::name();
}

void ScriptedBackend::synced() {
  syncs_ += 1;
  synced_ = marks_;
}

void ScriptedBackend::download(void* dst, const void* src, size_t bytes) {
  CpuBackend::download(dst, src, bytes);
  synced();
}

void ScriptedBackend::synchronize() {
  synced();
}

std::unique_ptr<BackendGraph> ScriptedBackend::capture(const std::function<void()>& issue_ops) {
  if (!graphs_) return nullptr;
  captures_ += 1;
  clock_ += costs_.capture;  // host work: the stream idles meanwhile
  return std::make_unique<ScriptedGraph>(*this, issue_ops);
}

void ScriptedBackend::attention(const float* qkv, const Rows& rows, int n,
                                const AttentionShape& shape, KvCache& cache, int layer,
                                float* out) {
  CpuBackend::attention(qkv, rows, n, shape, cache, layer, out);
  if (layer != 0) return;
  const bool draft = draft_k_ != nullptr && cache.k == draft_k_;
  clock_ += draft ? costs_.draft_fixed + costs_.draft_row * n
                  : costs_.target_fixed + costs_.target_row * n;
}

std::unique_ptr<Backend::Timer> ScriptedBackend::timer() {
  return std::make_unique<ScriptedTimer>(*this);
}

}  // namespace trt_spec::testing
