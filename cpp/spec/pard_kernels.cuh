// pard_kernels.cuh: the CUDA kernel of the PARD proposer's op (pard_ops.h) and its launch,
// header-only so that tests run it through the host emulation (tests/cpp/cuda_emu.h).
//
//   pard_rows_kernel   the [B, k + 1] rows of a parallel draft            grid-stride
#pragma once

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "spec/seq_state.h"

namespace trt_spec::cuda {

__global__ void pard_rows_kernel(const SeqState* __restrict__ seqs,
                                 const int32_t* __restrict__ slots, int B, int k, int32_t mask,
                                 int32_t* __restrict__ tokens, int32_t* __restrict__ pos,
                                 int32_t* __restrict__ row_slots) {
  for (int row = blockIdx.x * blockDim.x + threadIdx.x; row < B * (k + 1);
       row += gridDim.x * blockDim.x) {
    const int b = row / (k + 1), r = row % (k + 1);
    const SeqState& s = seqs[slots[b]];
    tokens[row] = r == 0 ? s.prev : (r == 1 ? s.last : mask);
    pos[row] = spec_draft_pos(s, s.n_past - 1 + r);
    row_slots[row] = slots[b];
  }
}

inline void launch_pard_rows(cudaStream_t stream, const SeqState* seqs, const int32_t* slots, int B,
                             int k, int32_t mask, int32_t* tokens, int32_t* pos,
                             int32_t* row_slots) {
  const int rows = B * (k + 1), threads = 128;
  const int blocks = std::max(1, std::min(64, (rows + threads - 1) / threads));
  TRT_SPEC_LAUNCH(pard_rows_kernel, blocks, threads, stream, seqs, slots, B, k, mask, tokens, pos,
                  row_slots);
}

}  // namespace trt_spec::cuda
