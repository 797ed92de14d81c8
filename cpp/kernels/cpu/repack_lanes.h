// repack_lanes.h: Q8 / Q4 weight codes stored in the CPU matmul's lane layout, so that the
// matmul decodes a chunk with loads and nibble masks only, without the word transpose it
// otherwise runs for every chunk of every row at every step.
//
// Two layouts, one for each tile (CodeLayout):
//
// Lanes128 (the AVX2 tile, matmul_quant_impl.h): a 128-column chunk of groups A, B, C, D (32
// columns each; word k = columns 4k..4k+3) is 4 vectors of 8 words,
//   vector k = [A_k B_k C_k D_k | A_k+4 B_k+4 C_k+4 D_k+4]            k = 0..3,
// and a 64-column tail (cols % 128 == 64) of groups A, B is 2 vectors
//   vector k = [A_2k B_2k A_2k+1 B_2k+1 | A_2k+4 B_2k+4 A_2k+5 B_2k+5]   k = 0, 1.
// Repacked, a Q8 chunk stores those vectors in order (32 bytes each); a Q4 chunk stores vector
// pairs as one 32-byte super-block each: vector 2s in the low nibbles, vector 2s + 1 in the high
// ones (the natural layout's super-block holds group 2s low and group 2s + 1 high).
//
// Lanes512 (the AVX-512 tile, matmul_quant512_impl.h): a 512-column chunk of 16 groups g0..g15 is
// 8 vectors of 16 words, V_k = [g0_k g1_k ... g15_k] (k = 0..7); a row's last chunk may hold
// G < 16 groups (G even), and then its vectors have G words (4G bytes). Q8 stores V_0..V_7 in
// order; Q4 stores 4 blocks of 4G bytes, block s = V_2s in the low nibbles and V_2s+1 in the high.
//
// Scales and offsets (sections 1, 2) are unchanged in both.
//
// The CPU backend repacks the weights the matmul reads when it loads an engine
// (CpuBackend::import_matmul_weight), into the layout of its kernel table
// (MatmulKernels::lanes); the engine file keeps the natural layout every other reader (the CUDA
// kernels, the embedding rows) uses.
#pragma once

#include <cstdint>

#include "kernels/weight_format.h"

namespace trt_spec::cpu {

// out [weight_blob_bytes(w.type, w.rows, w.cols)] = w's blob with its codes in `layout` (Lanes128
// or Lanes512; w: Q8 or Q4, natural layout, cols % 64 == 0). Rows are split over a few threads.
void repack_lanes(const WeightView& w, uint8_t* out, CodeLayout layout);

// Whether the matmul can read w in the lane layout (Q8 / Q4 with cols % 64 == 0).
bool lanes_apply(const WeightView& w);

}  // namespace trt_spec::cpu
