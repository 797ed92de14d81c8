// attention.cpp: the CPU attention kernel of attention.h for AVX2 + FMA (built with -mavx2 -mfma
// -mf16c; the kernel itself is attention_impl.h), and the choice of build at run time: the
// AVX-512 one (attention_avx512.cpp) where the matmul table is AVX-512 (matmul_dispatch.cpp:
// the CPU's features, or TRT_SPEC_CPU_ISA), so one process runs one instruction set throughout.
#include <cstring>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/matmul.h"

namespace trt_spec::cpu {

void attention_run_avx512(const AttentionArgs& a, int64_t task0, int64_t task1);

int64_t attention_tasks(const AttentionArgs& a) {
  if (a.n_rows <= 0) return 0;
  const Shape s = shape_of(a);
  return s.n_blocks * a.n_kv_heads * s.n_chunks;
}

AttentionRunFn attention_run_for(const char* isa) {
  if (matmul_kernels_for(isa) == nullptr) return nullptr;  // unknown, or not on this CPU
  return std::strcmp(isa, "avx512") == 0 ? &attention_run_avx512 : &run_tasks;
}

bool attention_bf16_supported(const char* isa) {
  if (isa == nullptr) isa = matmul_kernels().isa;
  return attention_run_for(isa) == &attention_run_avx512 && __builtin_cpu_supports("avx512bf16");
}

void attention_run(const AttentionArgs& a, int64_t task0, int64_t task1) {
  static const AttentionRunFn run = attention_run_for(matmul_kernels().isa);
  run(a, task0, task1);
}

}  // namespace trt_spec::cpu
