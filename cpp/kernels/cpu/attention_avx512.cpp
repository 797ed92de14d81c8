// attention_avx512.cpp: the CPU attention kernel of attention.h with 512-bit score and output
// tiles (attention_impl.h), built with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 and the AVX2
// flags. Only called where the matmul table is AVX-512 (attention.cpp), i.e. on CPUs with AVX-512
// F, BW, VL and VNNI; its BF16 instructions (attention_bf16.h) run only for bf16 rows, which
// callers pass only where the CPU has AVX512_BF16 (attention_bf16_supported).
//
// GCC 12.2's AVX-512 headers trip a false -Wuninitialized at -O3 (GCC bug 105593, fixed in 12.3).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/cpu/attention_impl.h"

namespace trt_spec::cpu {

void attention_run_avx512(const AttentionArgs& a, int64_t task0, int64_t task1) {
  run_tasks(a, task0, task1);
}

}  // namespace trt_spec::cpu
