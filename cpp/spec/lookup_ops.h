// lookup_ops.h: prompt lookup's device op (lookup.h, lookup_proposer.h), one implementation per
// kind of backend (lookup_ops_cpu.cpp, lookup_ops_cuda.cu), reading and writing backend memory
// only, so that a graph can hold it.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "spec/spec_ops.h"

namespace trt_spec {

class LookupOps {
 public:
  virtual ~LookupOps() = default;
  // For each of B sequences (slots[b]) that allows prompt lookup: its next tree (tree.tag: the
  // n-gram length the nodes continue) and ready_n = its nodes; ready_n = 0 for the others.
  virtual void lookup(const SpecState& st, const int32_t* slots, int B) = 0;
};

// The op of a backend (CPU or CUDA); Error for a backend without it.
std::unique_ptr<LookupOps> make_lookup_ops(Backend& be);

}  // namespace trt_spec
