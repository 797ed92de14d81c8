// host_timer.cpp: Backend::timer()'s default (backend.h): the host's steady clock, right for
// backends whose ops run in order on the calling thread (the CPU): when stop() returns, the
// work it follows is done.
#include <chrono>

#include "backend/backend.h"

namespace trt_spec {

namespace {

class HostTimer final : public Backend::Timer {
 public:
  void start() override { t0_ = now(); }
  void stop() override { t1_ = now(); }
  double seconds() override { return std::chrono::duration<double>(t1_ - t0_).count(); }

 private:
  static std::chrono::steady_clock::time_point now() { return std::chrono::steady_clock::now(); }
  std::chrono::steady_clock::time_point t0_{}, t1_{};
};

}  // namespace

std::unique_ptr<Backend::Timer> Backend::timer() {
  return std::make_unique<HostTimer>();
}

}  // namespace trt_spec
