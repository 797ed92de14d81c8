// matmul_dispatch.cpp: picks the CPU matmul kernel table (no ISA flags: runs on any x86-64).
//
// The CPU's features come from __builtin_cpu_supports; TRT_SPEC_CPU_ISA=avx2|avx512 forces a
// table. Also the QuantActs buffer helpers, which need no vector code.
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/matmul.h"

namespace trt_spec::cpu {
namespace {

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

// The instructions matmul_avx512.cpp uses. It is built with -mavx512bf16 too but uses no BF16
// instruction (bf16 weights widen with shifts; `objdump -d | grep -i bf16` finds none), so CPUs
// with VNNI but without AVX512_BF16 (Cascade Lake, Ice Lake) run it as well.
bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

const MatmulKernels& pick_kernels() {
  const char* forced = std::getenv("TRT_SPEC_CPU_ISA");
  if (forced != nullptr && forced[0] != '\0') {
    const MatmulKernels* k = matmul_kernels_for(forced);
    if (k == nullptr)
      throw std::runtime_error(std::string("TRT_SPEC_CPU_ISA=") + forced +
                               ": unknown ISA or not supported by this CPU (use avx2 or avx512)");
    return *k;
  }
  if (cpu_has_avx512()) return kMatmulKernelsAvx512;
  if (cpu_has_avx2()) return kMatmulKernelsAvx2;
  throw std::runtime_error("trt-spec CPU kernels need AVX2, FMA and F16C");
}

constexpr size_t kPartAlign = 64;
size_t round_part(size_t n) {
  return (n + kPartAlign - 1) / kPartAlign * kPartAlign;
}

}  // namespace

size_t quant_acts_bytes(int M, int cols) {
  const size_t n = static_cast<size_t>(M) * cols, groups = n / kQuantGroup;
  return round_part(n) + 2 * round_part(groups * sizeof(float));
}

QuantActs quant_acts_view(void* buf, int M, int cols) {
  const size_t n = static_cast<size_t>(M) * cols, groups = n / kQuantGroup;
  auto* p = static_cast<uint8_t*>(buf);
  QuantActs v;
  v.q = reinterpret_cast<int8_t*>(p);                                           // [M, cols]
  v.d = reinterpret_cast<float*>(p + round_part(n));                            // [M, groups]
  v.ds = reinterpret_cast<float*>(p + round_part(n) + round_part(groups * 4));  // [M, groups]
  v.M = M;
  v.cols = cols;
  return v;
}

const MatmulKernels& matmul_kernels() {
  static const MatmulKernels& k = pick_kernels();
  return k;
}

const MatmulKernels* matmul_kernels_for(const char* isa) {
  if (isa == nullptr) return nullptr;
  if (std::strcmp(isa, "avx2") == 0) return cpu_has_avx2() ? &kMatmulKernelsAvx2 : nullptr;
  if (std::strcmp(isa, "avx512") == 0) return cpu_has_avx512() ? &kMatmulKernelsAvx512 : nullptr;
  return nullptr;
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> out;
  if (cpu_has_avx2()) out.push_back("avx2");
  if (cpu_has_avx512()) out.push_back("avx512");
  return out;
}

}  // namespace trt_spec::cpu
