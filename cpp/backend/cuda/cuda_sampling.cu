// cuda_sampling.cu: CudaBackend's token selection (cuda_backend.h): sample() and the ops of the
// speculative iteration, launching the kernels of kernels/cuda/sampling.cuh. Same rule and the
// same Philox draws as the CPU backend (cpu_sampling.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/cuda/sampling.cuh"
#include "common/errors.h"

namespace trt_spec {

static_assert(sizeof(cuda::DevSamplingState) == sizeof(SamplingState) &&
                  offsetof(cuda::DevSamplingState, step) == offsetof(SamplingState, step),
              "the kernels' view of SamplingState must match backend.h");

namespace {
const cuda::DevSamplingState* dev_states(const SamplingState* s) {
  return reinterpret_cast<const cuda::DevSamplingState*>(s);
}
// Fixed-point masses need vocab * 2^kMassBits < 2^63.
void check_vocab(int vocab) {
  if (vocab <= 0 || vocab >= (1 << (63 - cuda::kMassBits)))
    throw InvalidArgument("CUDA sampling: vocabulary size " + std::to_string(vocab) +
                          " out of range");
}
}  // namespace

void CudaBackend::sample(const float* logits, int n, int vocab, const int32_t* slot,
                         SamplingState* states, int32_t* out_tokens) {
  check_vocab(vocab);
  if (sizing() || n <= 0) return;
  cuda::sample_kernel<<<1, cuda::kSampleThreads, 0, stream_>>>(
      logits, n, vocab, slot, reinterpret_cast<cuda::DevSamplingState*>(states), out_tokens);
  check_launch("sample");
}

void CudaBackend::spec_rows(const SeqState* seqs, const int32_t* slots, int B, int first, int count,
                            int32_t* tokens, int32_t* pos, int32_t* row_slots) {
  if (sizing() || B * count <= 0) return;
  const int threads = 256, blocks = std::min(64, (B * count + threads - 1) / threads);
  cuda::spec_rows_kernel<<<blocks, threads, 0, stream_>>>(seqs, slots, B, first, count, tokens, pos,
                                                          row_slots);
  check_launch("spec_rows");
}

void CudaBackend::spec_draft_sample(float* logits_q, int B, int vocab, int vocab_common, int j,
                                    SeqState* seqs, const int32_t* slots,
                                    const SamplingState* states) {
  check_vocab(vocab);
  if (j < 0 || j >= kMaxDraftLen || vocab_common <= 0 || vocab_common > vocab)
    throw InvalidArgument("spec_draft_sample: bad draft index or vocabulary");
  if (sizing() || B <= 0) return;
  cuda::spec_draft_sample_kernel<<<B, cuda::kSampleThreads, 0, stream_>>>(
      logits_q, vocab, vocab_common, j, seqs, slots, dev_states(states));
  check_launch("spec_draft_sample");
}

void CudaBackend::spec_accept(const float* logits, const float* q, int B, int k, int vocab,
                              int vocab_draft, SeqState* seqs, const int32_t* slots,
                              const SamplingState* states) {
  check_vocab(vocab);
  if (k < 0 || k > kMaxDraftLen || (k > 0 && (q == nullptr || vocab_draft <= 0)))
    throw InvalidArgument("spec_accept: bad draft length or draft distributions");
  if (B <= 0) return;
  // P [B, k, vocab] (dense p_j of sampling sequences), best [B, k + 1] (greedy argmaxes).
  float* P = nullptr;
  if (k > 0)
    P = static_cast<float*>(
        scratch(kAcceptProbs, static_cast<size_t>(B) * k * vocab * sizeof(float)));
  auto* best = static_cast<int32_t*>(
      scratch(kAcceptBest, static_cast<size_t>(B) * (k + 1) * sizeof(int32_t)));
  if (sizing()) return;
  cuda::spec_accept_rows_kernel<<<B*(k + 1), cuda::kSampleThreads, 0, stream_>>>(
      logits, k, vocab, slots, dev_states(states), P, best);
  check_launch("spec_accept (rows)");
  cuda::spec_accept_walk_kernel<<<B, cuda::kSampleThreads, 0, stream_>>>(
      logits, q, B, k, vocab, vocab_draft, seqs, slots, dev_states(states), P, best);
  check_launch("spec_accept (walk)");
}

}  // namespace trt_spec
