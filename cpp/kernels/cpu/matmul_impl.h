// matmul_impl.h: the ISA-generic body of the CPU matmul kernels.
//
// Included by matmul_avx2.cpp and matmul_avx512.cpp after each defines `struct Isa`, its vector
// primitives (listed in matmul_avx2.cpp). Everything here lives in an anonymous namespace, so the
// two translation units, built with different -m flags, never share a symbol; for the same reason
// this code calls no inline function with external linkage that the compiler might emit out of
// line (the linker would keep one copy, possibly the AVX-512 one, for both): no std::min/max, and
// section pointers come from section_ptr() instead of WeightView::section().
//
// Parts, included in this order into the namespace:
//   matmul_tiling.h       tile shapes and the walk over rows, activation rows and columns; why a
//                         row's result does not depend on M (exactness)
//   matmul_float_impl.h   F32 / F16 / BF16 weights times f32 activations
//   matmul_quant_impl.h   activation quantization and Q8 / Q4 weights times int8 activations,
//                         in blocks of Isa::W weight rows (row_blocks.h)
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/weight_format.h"

namespace trt_spec::cpu {
namespace {

// clang-format off: the parts in dependency order
#include "kernels/cpu/matmul_tiling.h"
#include "kernels/cpu/matmul_float_impl.h"
#include "kernels/cpu/matmul_quant_impl.h"
// clang-format on

}  // namespace
}  // namespace trt_spec::cpu
