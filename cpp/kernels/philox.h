// philox.h: the Philox4x32-10 counter-based generator, the one source of random numbers for
// sampling on every backend (plain C++ so host and device code can include it).
//
// A draw is a pure function of (key = request seed, counter = (step, lane, stream, 0)), so a
// token sampled at generation step s gets the same uniform number whichever backend draws it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TRT_SPEC_HD __host__ __device__ __forceinline__
#else
#define TRT_SPEC_HD inline
#endif

namespace trt_spec {

struct Philox4 {
  uint32_t v[4];
};

TRT_SPEC_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
TRT_SPEC_HD Philox4 philox4x32_10(Philox4 ctr, uint64_t seed) {
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, ctr.v[0], &hi0, &lo0);
    philox_mulhilo(0xCD9E8D57u, ctr.v[2], &hi1, &lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Uniform float in [0, 1) with 24 random bits.
TRT_SPEC_HD float philox_uniform(uint64_t seed, uint64_t step, uint32_t lane, uint32_t stream) {
  Philox4 c{{static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), lane, stream}};
  Philox4 r = philox4x32_10(c, seed);
  return static_cast<float>(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace trt_spec
