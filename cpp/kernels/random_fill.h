// random_fill.h: random weights made where they are used, for engines whose models carry
// `random_weights` instead of tensor data (engine_file.h, format version 4; written by
// benchmarks/random_engine.py for timing runs, as vLLM's dummy load format).
//
// A weight blob (weight_format.h) is filled section by section in blocks of 16 bytes. Block b
// of section s of the tensor with key k is a pure function of (k, s, b): one Philox4x32-10 draw
// with counter (b low, b high, s, 0). So the CPU and the GPU (kernels/cuda/random_fill.cuh) fill
// the same bits, whatever the threads or blocks, and a tensor read twice (a tied head) is the
// same both times. Values are u in [-1, 1) (exact: 24 or 16 random bits scaled by a power of 2)
// mapped to fmaf(scale, u, offset):
//   F32 / F16 / BF16   one value per 32 or 16 bits, rounded to nearest even to the type;
//   Q8                 codes in [1, 255] (w_int8 in [-127, 127]), every scale d = scale / 127
//                      (values in [-scale, scale]: the format has no offset);
//   Q4                 codes any nibble, d = 2 scale / 15, m = offset - scale: values in
//                      [offset - scale, offset + scale].
// Section bytes are multiples of 4 and padded to kSectionAlign (64): a block never crosses into
// the next section.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/half_float.h"
#include "kernels/philox.h"
#include "kernels/weight_format.h"

namespace trt_spec {

// One tensor's fill: its key (a hash of seed, role and name) and its values' range.
struct RandomFill {
  uint64_t key = 0;
  float offset = 0.0f;  // centre of the values
  float scale = 1.0f;   // half-width of the values
};

// What one section holds.
enum class FillKind : int32_t {
  kF32 = 0,      // floats
  kF16 = 1,      // IEEE halves
  kBF16 = 2,     // bfloat16
  kQ8Codes = 3,  // bytes in [1, 255]
  kQ4Codes = 4,  // any bytes
  kHalf = 5,     // one constant 16-bit word (a scale or offset section): `half`
};

struct SectionFill {
  uint64_t offset = 0;  // bytes from the blob's start
  uint64_t bytes = 0;   // a multiple of 4
  FillKind kind = FillKind::kF32;
  uint16_t half = 0;  // kHalf's word
};

// The sections of a [rows, cols] weight of type t, with the fill f (at most 3).
inline int random_fill_sections(WeightType t, int64_t rows, int64_t cols, const RandomFill& f,
                                SectionFill out[3]) {
  const int n = weight_section_count(t);
  for (int s = 0; s < n; ++s) {
    SectionFill& o = out[s];
    o.offset = weight_section_offset(t, rows, cols, s);
    o.bytes = align_up(weight_section_bytes(t, rows, cols, s), 4);
    switch (t) {
      case WeightType::F32: o.kind = FillKind::kF32; break;
      case WeightType::F16: o.kind = FillKind::kF16; break;
      case WeightType::BF16: o.kind = FillKind::kBF16; break;
      case WeightType::Q8:
        o.kind = s == 0 ? FillKind::kQ8Codes : FillKind::kHalf;
        o.half = f32_to_f16(f.scale / 127.0f);
        break;
      case WeightType::Q4:
        o.kind = s == 0 ? FillKind::kQ4Codes : FillKind::kHalf;
        o.half = f32_to_f16(s == 1 ? 2.0f * f.scale / 15.0f : f.offset - f.scale);
        break;
    }
  }
  return n;
}

// u in [-1, 1) from the top 24 bits of w, or from 16 bits h (exact in float).
TRT_SPEC_HD float random_unit24(uint32_t w) {
  return static_cast<float>(w >> 8) * (1.0f / 8388608.0f) - 1.0f;
}
TRT_SPEC_HD float random_unit16(uint32_t h) {
  return static_cast<float>(h & 0xffffu) * (1.0f / 32768.0f) - 1.0f;
}

// The 4 words of block b of section `section` of a fill (kinds other than kF16 / kBF16; those
// round on the caller's side: random_fill_halves).
TRT_SPEC_HD Philox4 random_fill_draw(const RandomFill& f, uint32_t section, uint64_t b) {
  return philox4x32_10(
      Philox4{{static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), section, 0u}}, f.key);
}

// Word i (0..3) of a block, for the kinds that need no half rounding.
TRT_SPEC_HD uint32_t random_fill_word(const RandomFill& f, const SectionFill& s, uint32_t bits) {
  switch (s.kind) {
    case FillKind::kQ8Codes: {
      uint32_t w = 0;
      for (int k = 0; k < 4; ++k) {
        const uint32_t x = (bits >> (8 * k)) & 0xffu;
        w |= (1u + ((x * 255u) >> 8)) << (8 * k);  // [1, 255]
      }
      return w;
    }
    case FillKind::kQ4Codes: return bits;
    case FillKind::kHalf: return static_cast<uint32_t>(s.half) * 0x10001u;
    default: {  // kF32
      const float v = fmaf(f.scale, random_unit24(bits), f.offset);
      union {
        float f;
        uint32_t u;
      } c{v};
      return c.u;
    }
  }
}

// The two values of a 16-bit-per-value word (kF16 / kBF16), before rounding: low half first.
TRT_SPEC_HD void random_fill_halves(const RandomFill& f, uint32_t bits, float* lo, float* hi) {
  *lo = fmaf(f.scale, random_unit16(bits), f.offset);
  *hi = fmaf(f.scale, random_unit16(bits >> 16), f.offset);
}

// The whole blob on the host (the CPU backend, the tests), blocks [b0, b1) of every section's
// block range; dst: the blob's start. Section blocks are ceil(bytes / 16); the last block of a
// section writes only its bytes.
inline void random_fill_host(const RandomFill& f, const SectionFill& s, uint32_t section,
                             uint64_t b0, uint64_t b1, uint8_t* dst) {
  uint8_t* base = dst + s.offset;
  for (uint64_t b = b0; b < b1; ++b) {
    const Philox4 r = random_fill_draw(f, section, b);
    for (int i = 0; i < 4; ++i) {
      const uint64_t at = 16 * b + 4 * static_cast<uint64_t>(i);
      if (at >= s.bytes) return;
      uint32_t w;
      if (s.kind == FillKind::kF16 || s.kind == FillKind::kBF16) {
        float lo, hi;
        random_fill_halves(f, r.v[i], &lo, &hi);
        const bool h = s.kind == FillKind::kF16;
        w = static_cast<uint32_t>(h ? f32_to_f16(lo) : f32_to_bf16(lo)) |
            static_cast<uint32_t>(h ? f32_to_f16(hi) : f32_to_bf16(hi)) << 16;
      } else {
        w = random_fill_word(f, s, r.v[i]);
      }
      base[at] = static_cast<uint8_t>(w);
      base[at + 1] = static_cast<uint8_t>(w >> 8);
      base[at + 2] = static_cast<uint8_t>(w >> 16);
      base[at + 3] = static_cast<uint8_t>(w >> 24);
    }
  }
}

}  // namespace trt_spec
