// matmul.h: the CPU matmul dispatch interface the runtime includes.
//
// y = x @ W^T for one weight matrix W [rows, cols] in any kernels/weight_format.h type and
// activations x [M, cols] (f32). One table of kernels per instruction set (matmul_avx2.cpp,
// matmul_avx512.cpp); matmul_dispatch.cpp picks the best one the CPU runs. Every kernel is
// thread-safe and computes only the output rows [r0, r1) it is given, so the runtime splits a
// matmul over threads by row ranges. Float weights (F32/F16/BF16) multiply f32 activations;
// Q8/Q4 weights multiply activations pre-quantized by quantize_acts() (int8, one f32 scale per
// group of 32 columns) with integer dot products.
//
// Work layout (matmul_tiling.h): tiles of R weight rows x up to 8-12 activation rows keep their
// accumulators in registers (Q8 / Q4: blocks of 8 or 16 rows, one per vector lane); weight panels,
// column blocks and activation-row blocks keep the activations in cache. A row's output is
// bit-identical whatever M and whatever other rows share the call (for every M): a verify pass, a
// batch, a prefill chunk and a decode step agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/weight_format.h"

namespace trt_spec::cpu {

// Activations quantized for Q8/Q4 weights: row m, group g of 32 columns.
struct QuantActs {
  int8_t* q = nullptr;  // [M, cols]       q = round(x / d), in [-127, 127]
  float* d = nullptr;   // [M, cols / 32]  scale: x ~= d * q, d = max|x| / 127
  float* ds = nullptr;  // [M, cols / 32]  d * sum(q in group)
  int M = 0;
  int cols = 0;
};

// Bytes of one buffer holding q, d and ds for [M, cols] activations (cols % 32 == 0), each part
// starting at a 64-byte boundary (the buffer itself should be 64-byte aligned).
size_t quant_acts_bytes(int M, int cols);
// Carves that buffer into a QuantActs view.
QuantActs quant_acts_view(void* buf, int M, int cols);

struct MatmulKernels {
  const char* isa;  // "avx2" or "avx512"
  // The layout of the Q8 / Q4 weights this table's matmul_quant reads fastest (repack_lanes.h):
  // blocks of 8 rows (Rows8, AVX2) or 16 (Rows16, AVX-512).
  CodeLayout lanes;
  // Quantize rows [m0, m1) of x [M, cols] (f32) into out (symmetric int8 per group of 32).
  void (*quantize_acts)(const float* x, int m0, int m1, QuantActs out);
  // For F32/F16/BF16 weights: y[m*ldy + r] = sum_c W(r,c) * x[m*cols + c], r in [r0,r1), m in
  // [0,M). Any cols.
  void (*matmul_float)(WeightView w, const float* x, int M, float* y, int64_t ldy, int64_t r0,
                       int64_t r1);
  // For Q8/Q4 weights (cols % 64 == 0), same output, activations pre-quantized (x.M >= M) by this
  // table's quantize_acts. Codes in the natural layout or in `lanes` (the same bits either way);
  // std::invalid_argument for another table's layout.
  void (*matmul_quant)(WeightView w, const QuantActs& x, int M, float* y, int64_t ldy, int64_t r0,
                       int64_t r1);
};

// Best table for this CPU; env TRT_SPEC_CPU_ISA=avx2|avx512 forces one (std::runtime_error
// if this CPU cannot run it or the name is unknown). Computed once.
const MatmulKernels& matmul_kernels();
// The table for one ISA name; nullptr when this CPU cannot run it (or the name is unknown).
const MatmulKernels* matmul_kernels_for(const char* isa);
// ISAs this CPU can run, best last, e.g. {"avx2"} or {"avx2", "avx512"}.
std::vector<std::string> supported_isas();

// The per-ISA tables (defined in matmul_avx2.cpp / matmul_avx512.cpp). Only call the functions
// of a table the CPU supports.
extern const MatmulKernels kMatmulKernelsAvx2;
extern const MatmulKernels kMatmulKernelsAvx512;

}  // namespace trt_spec::cpu
