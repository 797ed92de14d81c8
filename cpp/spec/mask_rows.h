// mask_rows.h: a token mask on a row of logits (engine/constraint.h), for the host and the
// device: logit x becomes -inf where bit x of the mask is clear (ids past the mask's words too).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/philox.h"  // (TRT_SPEC_HD)

namespace trt_spec {

TRT_SPEC_HD bool mask_allows(const uint32_t* mask, int words, int x) {
  return (x >> 5) < words && ((mask[x >> 5] >> (x & 31)) & 1u);
}

inline void mask_row(float* l, int vocab, const uint32_t* mask, int words) {
  for (int x = 0; x < vocab; ++x)
    if (!mask_allows(mask, words, x)) l[x] = -INFINITY;
}

}  // namespace trt_spec
