// backend_ops.h: picks the implementation of a family of device ops (the shared SpecOps, a
// proposer's own ops) for the kind of a backend: one maker per kind, the CUDA one only in builds
// with the CUDA backend (TRT_SPEC_CUDA_MAKER gives null elsewhere).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "common/errors.h"

#ifdef TRT_SPEC_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#define TRT_SPEC_CUDA_MAKER(f) (f)
#else
#define TRT_SPEC_CUDA_MAKER(f) nullptr
#endif

namespace trt_spec {

class CudaBackend;

template <class T>
struct OpsArg {  // (a non-deduced context: the CPU maker's parameter types decide)
  using type = T;
};

template <class Ops, class... A>
using CpuOpsMaker = std::unique_ptr<Ops> (*)(CpuBackend&, A...);
template <class Ops, class... A>
using CudaOpsMaker = std::unique_ptr<Ops> (*)(CudaBackend&, A...);

// The ops of be's kind, made with args; Error for a backend without them (what: their name).
template <class Ops, class... A>
std::unique_ptr<Ops> make_backend_ops(Backend& be, const char* what, CpuOpsMaker<Ops, A...> cpu,
                                      typename OpsArg<CudaOpsMaker<Ops, A...>>::type cuda,
                                      typename OpsArg<A>::type... args) {
  if (auto* c = dynamic_cast<CpuBackend*>(&be)) return cpu(*c, args...);
#ifdef TRT_SPEC_WITH_CUDA
  if (auto* g = dynamic_cast<CudaBackend*>(&be); g && cuda) return cuda(*g, args...);
#endif
  throw Error(std::string(what) + " has no ops for the backend '" + be.name() + "'");
}

}  // namespace trt_spec
