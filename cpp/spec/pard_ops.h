// pard_ops.h: the PARD proposer's device op (pard_proposer.h), one implementation per kind of
// backend (pard_ops_cpu.cpp, pard_ops_cuda.cu), reading and writing backend memory only, so that
// a graph can hold it.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "spec/spec_ops.h"

namespace trt_spec {

class PardOps {
 public:
  virtual ~PardOps() = default;
  // The draft rows [B, k + 1] of one parallel draft: per sequence b, row b (k + 1) + r is
  // r = 0: prev at position n_past - 1; r = 1: last at n_past; r >= 2: the mask token at
  // n_past + r - 1 (draft positions: spec_draft_pos), KV slot slots[b].
  virtual void rows(const SpecState& st, const int32_t* slots, int B, int k, int32_t mask,
                    const RowBuffers& out) = 0;
};

// The op of a backend (CPU or CUDA); Error for a backend without it.
std::unique_ptr<PardOps> make_pard_ops(Backend& be);

}  // namespace trt_spec
