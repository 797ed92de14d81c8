// matmul_float_impl.h: the float-weight (F32 / F16 / BF16) CPU matmul (part of matmul_impl.h).
//
// Included by matmul_impl.h inside the anonymous namespace of an ISA translation unit. A tile of
// R weight rows x MT activation rows loads (and widens) one vector of Isa::W weights per row and
// column step and multiplies it into the MT rows' accumulators; columns past the last whole step
// (cols % Isa::W) are summed in scalar. Walk and exactness: matmul_tiling.h.
#pragma once

constexpr TilePolicy kFloatTiles = {9, 6, {0, 4, 4, 3, 2, 2, 2, 1, 1, 1}};
static_assert(policy_covered(kFloatTiles), "a float tile shape is missing from TRT_SPEC_TILES");
constexpr int64_t kFloatL1Bytes = 24 * 1024;  // one m tile's activations in a column block
constexpr int kFloatBlockM = 64;              // activation rows per block

template <WeightType T>
inline float load_scalar(const uint8_t* row, int64_t c) {
  if constexpr (T == WeightType::F32) {
    return reinterpret_cast<const float*>(row)[c];
  } else {
    const uint16_t h = reinterpret_cast<const uint16_t*>(row)[c];
    return T == WeightType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

struct FloatArgs {
  const uint8_t* w;  // weight row 0
  int64_t wstride;   // bytes per weight row
  const float* x;    // [M, cols]
  int64_t cols;
  float* y;
  int64_t ldy;
};

template <WeightType T>
struct FloatTile {
  static constexpr int64_t kElem = T == WeightType::F32 ? 4 : 2;  // bytes per weight
  template <int R, int MT>
  struct K {
    static void run(const FloatArgs& a, int64_t r0, int m0, int64_t c0, int64_t c1, Spill sp) {
      using VF = typename Isa::VF;
      VF acc[R][MT];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m)
          acc[r][m] = c0 == 0 ? Isa::zero() : Isa::loadu(sp.at(r, m, Isa::W));
      const uint8_t* w = a.w + r0 * a.wstride;      // [R, cols] rows of W
      const float* x = a.x + int64_t{m0} * a.cols;  // [MT, cols] rows of x
      int64_t c = c0;
      for (; c + Isa::W <= c1; c += Isa::W) {
        VF wv[R];
        const bool line_start = ((c * kElem) & 63) == 0;  // one prefetch per cache line
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          if (line_start) prefetch(w + (r + R) * a.wstride + c * kElem);  // the next row tile
          wv[r] = Isa::template load_w<T>(w + r * a.wstride, c);
        }
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m) {
          const VF xv = Isa::loadu(x + m * a.cols + c);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) acc[r][m] = Isa::fma(wv[r], xv, acc[r][m]);
        }
      }
      if (c1 < a.cols) {  // not the last column block (which ends on a whole step): keep going
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
          for (int m = 0; m < MT; ++m) Isa::storeu(sp.at(r, m, Isa::W), acc[r][m]);
        return;
      }
      float tail[R][MT] = {};
      for (; c < c1; ++c)
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const float wr = load_scalar<T>(w + r * a.wstride, c);
#pragma GCC unroll 16
          for (int m = 0; m < MT; ++m)
            tail[r][m] = __builtin_fmaf(wr, x[m * a.cols + c], tail[r][m]);
        }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int m = 0; m < MT; ++m)
          a.y[(m0 + m) * a.ldy + r0 + r] = Isa::hsum(acc[r][m]) + tail[r][m];
    }
  };
};

template <WeightType T>
void matmul_float_t(WeightView w, const float* x, int M, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  using Fn = void (*)(const FloatArgs&, int64_t, int, int64_t, int64_t, Spill);
  const int64_t esize = T == WeightType::F32 ? 4 : 2;
  const FloatArgs a{w.data, w.cols * esize, x, w.cols, y, ldy};
  const int mt = M <= kFloatTiles.small_max ? M : kFloatTiles.big_mt;
  const int64_t kc = imax<int64_t>(4 * Isa::W, kFloatL1Bytes / (4 * mt) / Isa::W * Isa::W);
  drive(kFloatTiles, M, r0, r1, w.cols, kc, kFloatBlockM,
        [&](int MT, int64_t ra, int64_t rb, int m, int64_t c0, int64_t c1, const Spill& sp) {
          for_row_tiles(kFloatTiles, MT, ra, rb, sp, [&](int R, int64_t r, Spill rsp) {
            tile_fn<FloatTile<T>::template K, Fn>(R, MT)(a, r, m, c0, c1, rsp);
          });
        });
}

void matmul_float(WeightView w, const float* x, int M, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  switch (w.type) {
    case WeightType::F32: return matmul_float_t<WeightType::F32>(w, x, M, y, ldy, r0, r1);
    case WeightType::F16: return matmul_float_t<WeightType::F16>(w, x, M, y, ldy, r0, r1);
    case WeightType::BF16: return matmul_float_t<WeightType::BF16>(w, x, M, y, ldy, r0, r1);
    default: throw std::invalid_argument("matmul_float: weight type is not F32/F16/BF16");
  }
}
