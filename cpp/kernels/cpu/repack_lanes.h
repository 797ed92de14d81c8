// repack_lanes.h: Q8 / Q4 weights stored in the CPU matmul tile's layout, so that the tile reads
// a group of a block of rows with plain loads and nibble masks.
//
// Two layouts, one for each tile (CodeLayout, defined in row_blocks.h): blocks of 8 rows for the
// AVX2 tile (Rows8) and of 16 for the AVX-512 one (Rows16). In a block each group's codes are
// vectors whose 32-bit lane i holds 4 codes of the block's row i, so an activation word broadcast
// to every lane multiplies the whole block at once; scales and offsets are ordered by block too.
// A layout needs rows to be a multiple of its block.
//
// The CPU backend repacks the weights the matmul reads when it loads an engine
// (CpuBackend::import_matmul_weight), into the layout of its kernel table
// (MatmulKernels::lanes); the engine file keeps the natural layout every other reader (the CUDA
// kernels, the embedding rows) uses.
#pragma once

#include <cstdint>

#include "kernels/weight_format.h"

namespace trt_spec::cpu {

// out [weight_blob_bytes(w.type, w.rows, w.cols)] = w's blob in `layout` (Rows8 or Rows16; w: one
// lanes_apply() accepts). Blocks are split over a few threads.
void repack_lanes(const WeightView& w, uint8_t* out, CodeLayout layout);

// Whether w can be repacked into `layout`: Q8 / Q4 in the natural layout with cols % 64 == 0 and
// rows a multiple of the layout's block. (The matmul reads the natural layout too, more slowly.)
bool lanes_apply(const WeightView& w, CodeLayout layout);

}  // namespace trt_spec::cpu
