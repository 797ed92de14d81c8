// cuda_timer.cu: CudaBackend::timer() (backend.h, Backend::Timer): a pair of CUDA events recorded
// on the backend's stream; seconds() is cudaEventElapsedTime between them, the device's time of
// the span (work queued in it, and any idle gap while the host was still issuing it).
//
// The events stay out of graph capture: recording one on a capturing stream would add it to the
// graph (and a captured event has no time to read), so start() and stop() refuse a capturing
// stream; the iteration records them around graph launches. seconds() waits for the stop event,
// which is free when it is read after the iteration's read-back (the one synchronisation).
// In planning mode (no GPU) the timer is the host clock's default.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "common/errors.h"

namespace trt_spec {

namespace {

class CudaTimer final : public Backend::Timer {
 public:
  explicit CudaTimer(const CudaBackend& be) : be_(be) {
    be_.use_device();
    cuda_check(cudaEventCreate(&start_), "cudaEventCreate");
    const cudaError_t e = cudaEventCreate(&stop_);
    if (e != cudaSuccess) cudaEventDestroy(start_);
    cuda_check(e, "cudaEventCreate");
  }
  ~CudaTimer() override {
    cudaEventDestroy(start_);  // (never throws: the device may be gone)
    cudaEventDestroy(stop_);
  }
  CudaTimer(const CudaTimer&) = delete;
  CudaTimer& operator=(const CudaTimer&) = delete;

  void start() override { record(start_, "timer start"); }
  void stop() override {
    record(stop_, "timer stop");
    recorded_ = true;
  }
  double seconds() override {
    if (!recorded_) throw Error("CUDA timer: seconds() before start() and stop()");
    be_.use_device();
    cuda_check(cudaEventSynchronize(stop_), "timer (cudaEventSynchronize)");
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  void record(cudaEvent_t e, const char* what) {
    be_.use_device();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cuda_check(cudaStreamIsCapturing(be_.stream(), &status), "cudaStreamIsCapturing");
    if (status != cudaStreamCaptureStatusNone)
      throw Error(std::string("CUDA timer: ") + what + " inside a graph capture");
    cuda_check(cudaEventRecord(e, be_.stream()), what);
  }

  const CudaBackend& be_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  bool recorded_ = false;
};

}  // namespace

std::unique_ptr<Backend::Timer> CudaBackend::timer() {
  if (planning_) return Backend::timer();  // no device: the host clock (nothing runs)
  return std::make_unique<CudaTimer>(*this);
}

}  // namespace trt_spec
