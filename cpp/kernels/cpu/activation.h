// activation.h: the CPU SwiGLU activation of the MLP, out = silu(gate) * up, 8 columns at a time.
//
// silu(g) = g / (1 + e^-g), with e^x from vec_f32.h (the attention softmax's, within 2 ulp of
// expf) and an IEEE division. Every value goes through the same lane-wise operations (the last
// partial vector of a row is padded, not computed by a scalar path), so a row's bits depend only
// on its values: decode, verify and prefill rows stay bit-identical. Needs AVX2 + FMA (the file
// is built with those flags; the CPU backend checks them).
#pragma once

#include <cstdint>

namespace trt_spec::cpu {

// out [i, ffn] = silu(gate_up[i, 0:ffn]) * gate_up[i, ffn:2 ffn] for rows i in [i0, i1).
void swiglu_rows(const float* gate_up, int64_t i0, int64_t i1, int ffn, float* out);

}  // namespace trt_spec::cpu
