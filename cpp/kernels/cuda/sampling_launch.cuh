// sampling_launch.cuh: the host launch code of Backend::sample's kernel (sampling.cuh), written
// with TRT_SPEC_LAUNCH: CudaBackend (cuda_sampling.cu) and the emulated tests
// (tests/cpp/cuda_emu_ops.cpp) run this same function.
#pragma once

#include "kernels/cuda/sampling.cuh"

namespace trt_spec::cuda {

// Backend::sample: tokens out_tokens [n] from logits [n, vocab] and states [slot[i]] (steps
// advanced). Two launches over grid (g.chunks, n) of g.threads threads (sample_grid(vocab, SMs));
// scratch: sample_scratch(p, n, g.chunks) of sample_scratch_bytes(n, g.chunks) bytes whose
// counters are zero (and are left zero).
inline void launch_sample(cudaStream_t stream, const SampleGrid& g, const float* logits, int n,
                          int vocab, const int32_t* slot, DevSamplingState* states,
                          int32_t* out_tokens, SampleScratch scratch) {
  if (n <= 0) return;
  const dim3 grid(static_cast<unsigned>(g.chunks), static_cast<unsigned>(n));
  for (int phase = 0; phase < 2; ++phase)
    TRT_SPEC_LAUNCH(sample_rows_kernel, grid, g.threads, stream, phase, logits, n, vocab, g.chunk,
                    slot, states, out_tokens, scratch);
}

}  // namespace trt_spec::cuda
