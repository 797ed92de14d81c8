// lookup_kernels.cuh: the CUDA kernel of prompt lookup's op (lookup_ops.h, lookup.h) and its
// launch code, header-only so that tests run it through the host emulation (tests/cpp/cuda_emu.h).
//
//   lookup_kernel         prompt lookup: matches by the whole block,
//                         the tree by one thread                         grid B
#pragma once

#include "kernels/cuda/sampling.cuh"
#include "spec/lookup.h"
#include "spec/seq_state.h"

namespace trt_spec::cuda {

// Block max of non-negative ints.
__device__ __forceinline__ int block_max_int(int v) {
  return static_cast<int>(block_argmax(ArgMax{static_cast<float>(v), 0}).v);
}

// Appends the ends e (thread order) with hit to matches, up to kMaxMatches in all.
__device__ __forceinline__ void collect_matches(bool hit, const int32_t* src, int e, int end,
                                                bool predicted, LookupMatch* matches,
                                                int* n_found) {
  unsigned long long total = 0;
  const int rank = static_cast<int>(block_exclusive_scan_u64(hit ? 1ull : 0ull, &total));
  const int base = *n_found;
  if (hit && base + rank < kMaxMatches) matches[base + rank] = LookupMatch{src, e, end, predicted};
  __syncthreads();
  if (threadIdx.x == 0) *n_found = min(kMaxMatches, base + static_cast<int>(total));
  __syncthreads();
}

// Prompt lookup (lookup.h) for each sequence that allows it: the same matches, in the same
// order, as lookup_propose_serial, then its tree.  grid B.
__global__ void __launch_bounds__(kSampleThreads)
    lookup_kernel(SeqState* seqs, const int32_t* __restrict__ slots,
                  const int32_t* __restrict__ history, const int32_t* __restrict__ prediction,
                  int max_seq) {
  __shared__ LookupMatch matches[kMaxMatches];
  __shared__ int n_found;
  const int b = blockIdx.x;
  SeqState* s = seqs + slots[b];
  if (!(s->sources & draft_source_bit(DraftSource::kLookup))) {
    if (threadIdx.x == 0) s->ready_n = 0;
    return;
  }
  const int32_t* h = history + static_cast<int64_t>(slots[b]) * max_seq;
  const int32_t* pred = prediction + static_cast<int64_t>(slots[b]) * max_seq;
  const int len = min(s->n_past + 1, max_seq), m = s->pred_len, max_nodes = s->max_nodes;
  int local = 0;
  for (int e = threadIdx.x; e < m; e += blockDim.x)
    local = max(local, lookup_match_len(pred, e, h, len));
  for (int e = threadIdx.x; e < len; e += blockDim.x)
    local = max(local, lookup_match_len(h, e, h, len));
  const int best = block_max_int(local);
  if (threadIdx.x == 0) n_found = 0;
  __syncthreads();
  if (best >= kNgramMin && max_nodes > 0) {
    for (int base = 0; base < m && n_found < kMaxMatches; base += blockDim.x) {
      const int e = base + static_cast<int>(threadIdx.x);
      collect_matches(e < m && lookup_match_len(pred, e, h, len) == best, pred, e, m, true, matches,
                      &n_found);
    }
    for (int base = len - 1; base >= 0 && n_found < kMaxMatches; base -= blockDim.x) {
      const int e = base - static_cast<int>(threadIdx.x);
      collect_matches(e >= 0 && lookup_match_len(h, e, h, len) == best, h, e, len, false, matches,
                      &n_found);
    }
  }
  if (threadIdx.x == 0) {
    if (n_found > 0)
      lookup_build_tree(matches, n_found, max_nodes, s->tree);
    else
      s->tree.n = 0;
    s->ready_n = s->tree.n;
    s->tree.tag = s->tree.n > 0 ? best : 0;
  }
}

inline void launch_lookup(cudaStream_t stream, SeqState* seqs, const int32_t* slots, int B,
                          const int32_t* history, const int32_t* prediction, int max_seq,
                          int threads = kSampleThreads) {
  TRT_SPEC_LAUNCH(lookup_kernel, B, threads, stream, seqs, slots, history, prediction, max_seq);
}

}  // namespace trt_spec::cuda
