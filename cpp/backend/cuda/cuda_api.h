// cuda_api.h: what the rest of the runtime (plain C++, no CUDA headers) may ask of the CUDA
// backend. Only compiled in with TRT_SPEC_WITH_CUDA; every function works on a machine without a
// GPU or driver (the CUDA runtime is linked statically and loads the driver on first use).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/kernel_wave.h"
#include "kernels/weight_format.h"

namespace trt_spec {

// Usable CUDA devices; 0 without a driver or GPU, with the reason in *why.
int cuda_device_count(std::string* why = nullptr);

// The CUDA backend on one device; throws Error when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device);

struct CudaDeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  size_t total_bytes = 0, free_bytes = 0;
  double peak_bandwidth_gbps = 0.0;  // from the memory clock and bus width (0 if unknown)
};
CudaDeviceInfo cuda_device_info(int device);

// Measured device-to-device copy bandwidth (read + write bytes per second, GB/s) with a buffer
// of `bytes`, the best of `iters` copies.
double cuda_copy_bandwidth_gbps(int device, size_t bytes, int iters);

// Whether `be`, a CUDA backend, launches its matmuls as programmatic dependents from now on
// (sm_90+; CudaBackend::set_pdl). Returns whether it does; false for any other backend.
bool cuda_set_pdl(Backend& be, bool on);

// The fewest activation rows of a q8 / q4 matmul that run the tensor-core kernel from now on
// (CudaBackend::set_imma_rows; 0: the default, prefill tiles only). Returns the value in force;
// -1 for any other backend.
int cuda_set_imma_rows(Backend& be, int rows);

// Whether decode and verify launches of `be`, a CUDA backend, plan one wave from now on
// (CudaBackend::set_one_wave). Returns false for any other backend.
bool cuda_set_one_wave(Backend& be, bool on);

// Warps per attention block of `be`, a CUDA backend, from now on: 4 or 8
// (CudaBackend::set_attention_warps). Returns the value in force; -1 for any other backend.
int cuda_set_attention_warps(Backend& be, int warps);

// Whether one-row attention launches of `be`, a CUDA backend, run the decode instance from now
// on (CudaBackend::set_attention_one_row; the same bits). Returns it; false for any other
// backend.
bool cuda_set_attention_one_row(Backend& be, bool on);

// Times each attention launch, or each qkv projection, of `be`, a CUDA backend, is issued in a
// row from now on (CudaBackend::set_repeat_attention / set_repeat_qkv: a measurement aid; the
// same bits). Returns the value in force; -1 for any other backend.
int cuda_set_repeat_attention(Backend& be, int times);
int cuda_set_repeat_qkv(Backend& be, int times);

// Bytes of its weights (at most) each matmul block of `be`, a CUDA backend, streams toward L2
// ahead of its use from now on (CudaBackend::set_prefetch; 0: none). Returns the value in force;
// -1 for any other backend.
int cuda_set_prefetch(Backend& be, int bytes);

// Bytes (at most) of the next ops' weights each launch of the graphs `be`, a CUDA backend,
// captures from now on streams toward L2 (CudaBackend::set_prefetch_next; 0: none). Returns the
// value in force; -1 for any other backend.
int64_t cuda_set_prefetch_next(Backend& be, int64_t bytes);

// Whether the model forwards of `be`, a CUDA backend, run as one persistent launch from now on
// (CudaBackend::set_persistent; sm_90+). Returns false for any other backend.
bool cuda_set_persistent(Backend& be, bool on);

// The launches plan_matmul and plan_attention give (launch_plan.h's cuda_matmul_wave and
// cuda_attention_wave, which these implement).
KernelWave cuda_plan_matmul_wave(WeightType type, int64_t rows, int64_t cols, int n, int sm_count);
KernelWave cuda_plan_attention_wave(int n, int n_heads, int n_kv_heads, int head_dim, int max_seq,
                                    int sm_count);

}  // namespace trt_spec
