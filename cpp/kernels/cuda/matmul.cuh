// matmul.cuh: the transformer's matrix products on the GPU for 1 to any number of activation
// rows (decode, verify, prefill chunks): out [n, W.rows] = f(x) [n, W.cols] @ W^T for every
// weight type (kernels/weight_format.h), with a fused input transform (plain, RMSNorm, SwiGLU,
// optional row gather) and a fused epilogue (store + bias, residual accumulate, QKV bias + RoPE +
// KV-cache write). This header holds the arguments, the activations' staging (input transform and
// quantization), the weight units (a lane's fetch, decode and dot product), the epilogues and the
// split-K sum; the kernels that walk them are in matmul_kernel.cuh; host side (plan and launch):
// matmul_launch.cuh.
//
// Work layout. A block of 8 warps stages the activations of one tile of up to kTile rows (its
// split's column range, in pieces that fit 40 KiB of static shared memory) and then computes
// 16 output rows per row group: each warp owns a pair of output rows (a, b), b = a + half (RoPE
// partners for the QKV projection, adjacent rows otherwise), so one thread holds both operands
// of the rotation. A lane walks the columns in units of 32 weight bytes (two 16-byte loads per
// row: f32 8, f16/bf16 16, q8 32, q4 64 columns); unit u of the split goes to lane u % 32 in
// ascending order, consecutive lanes reading consecutive units (coalesced). The staged
// activations are stored lane-interleaved (16-byte slot h of unit u at [u / 32][h][u % 32]): the
// reads of a warp are conflict-free.
//
// Latency (a decode step is ~5 of these per layer, each reading a few MB: their fixed costs, not
// the bandwidth, set its time). The weights depend on no earlier kernel, so a warp fetches its
// first unit of both rows before anything else, then waits for the previous kernel
// (grid_dependency_wait: with TRT_SPEC_LAUNCH_PDL the fetch overlaps that kernel's tail), and
// every later unit one iteration before it is used. The RMSNorm factors are computed by the
// whole block with every row's loads in flight at once (matmul_rms_factors), not by one warp
// walking each row serially. None of this changes a row's arithmetic.
//
// Arithmetic. Float weights: fp32 FMA on the staged floats, column order. Q8 / Q4: the staged
// activations are quantized per group of 32 columns (d = max|x| / 127, q = round-even(x / d), as
// the CPU's quantize_acts), then per group and row one int32 dot product (__dp4a) and one float
// FMA: q8 acc += (d_w d_x) * isum with the codes made signed by xor 0x80 (q - 128 exactly);
// q4 acc += (d_w d_x) * isum, acc += m_w * (d_x sum(q_x)). The lane sums are reduced by one
// warp_sum per row; split-K partials are summed in split order by the last-arriving block.
//
// Exactness: a row's result goes through the same operations in the same order whatever n, the
// tile it lands in and the other rows (the split count and unit -> lane map depend on the shape
// only): a 1-row decode and an n-row verify compute each row bit-identically.
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv.cuh"

namespace trt_spec::cuda {

// Input transform applied while staging the activations.
enum class MatmulIn : int32_t {
  kPlain = 0,    // x [n, cols]
  kRmsNorm = 1,  // x * rsqrt(mean(x^2) + eps) * norm_w       (x [n, cols], norm_w f32 [cols])
  kSwiGLU = 2,   // silu(x[:, c]) * x[:, cols + c]            (x [n, 2 cols])
};

// Epilogue applied to the full sums.
enum class MatmulOut : int32_t {
  kStore = 0,       // out = acc (+ bias[row])
  kAccumulate = 1,  // out += acc (residual add; no bias)
  kRopeKv = 2,      // qkv: acc + bias, RoPE of q and k, all of q, k, v to out, k and v to the cache
};

struct MatmulArgs {
  DevWeight W;                       // [rows, cols]
  const float* x = nullptr;          // [n or gathered rows, cols] (kSwiGLU: [.., 2 cols])
  const int32_t* in_rows = nullptr;  // [n] staged row i is x row in_rows[i]; null: row i
  int n = 0;
  MatmulIn in = MatmulIn::kPlain;
  const float* norm_w = nullptr;  // kRmsNorm: [cols]
  float eps = 0.0f;
  const float* bias = nullptr;  // [rows] or null
  MatmulOut epi = MatmulOut::kStore;
  float* out = nullptr;  // [n, rows]
  // kRopeKv: rows == (n_heads + 2 n_kv_heads) head_dim; pos, slot [n]; kv_idx [n] or null (pos);
  // cos_t / sin_t [max_seq, head_dim / 2]; k, v of row i go to (slot, layer, g, kv_idx or pos).
  const int32_t* pos = nullptr;
  const int32_t* slot = nullptr;
  const int32_t* kv_idx = nullptr;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float* cos_t = nullptr;
  const float* sin_t = nullptr;
  KvView kv{};
  int layer = 0;
};

constexpr int kMatmulWarps = 8;  // output row pairs per row group
constexpr int kMatmulThreads = kMatmulWarps * 32;
constexpr int kMatmulMaxTile = 16;          // activation rows per tile
constexpr int kMatmulStageBudget = 40960;   // bytes of staged activations per block
constexpr int kMatmulMaxStageUnits = 128;   // units per staged piece, at most
constexpr int kMatmulMinSplitUnits = 32;    // units per split, at least (one per lane)
constexpr size_t kMatmulSmemLimit = 49152;  // static shared memory per block

// The kernel's geometry (from plan_matmul; depends on the shape and the SM count, never on n).
struct MatmulGeom {
  int64_t pairs;        // output row pairs: (rows + 1) / 2
  int half;             // pair p = rows a = (p / half) 2 half + p % half and b = a + half
  int reps;             // row groups (kMatmulWarps pairs) per block
  int splits;           // column splits (blockIdx.y)
  int tiles;            // activation tiles
  int tile_loop;        // 1: a block runs every tile (blockIdx.x = row block); 0: one each
                        // (blockIdx.x = row block * tiles + tile)
  int64_t units;        // units of the row (cols / unit columns)
  int64_t split_units;  // units per split (the last one: the rest)
};

// Resident blocks per SM that matmul_kernel<T, tile> is compiled for (its __launch_bounds__;
// see the kernel) and that plan_matmul sizes the waves of a decode / verify grid by.
__host__ __device__ constexpr int matmul_blocks_per_sm(int tile) {
  return tile == 1 ? 3 : (tile <= 8 ? 2 : 1);
}

// ---- units and staging layout --------------------------------------------------------------

// Columns per unit (32 weight bytes).
__host__ __device__ constexpr int matmul_unit_cols(WeightType t) {
  return t == WeightType::F32 ? 8 : (t == WeightType::Q4 ? 64 : (t == WeightType::Q8 ? 32 : 16));
}
__host__ __device__ constexpr bool matmul_quantized(WeightType t) {
  return t == WeightType::Q8 || t == WeightType::Q4;
}
// 16-byte slots of staged activations per unit and row (floats, or int8 codes).
__host__ __device__ constexpr int matmul_stage_slots(WeightType t) {
  return matmul_quantized(t) ? matmul_unit_cols(t) / 16 : matmul_unit_cols(t) / 4;
}
// Quantization groups per unit.
__host__ __device__ constexpr int matmul_stage_groups(WeightType t) {
  return matmul_quantized(t) ? matmul_unit_cols(t) / kQuantGroup : 0;
}
// Staged bytes per unit and row: the slots, d_x per group (q8, q4) and d_x sum(q_x) (q4).
__host__ __device__ constexpr int matmul_unit_row_bytes(WeightType t) {
  return matmul_stage_slots(t) * 16 + matmul_stage_groups(t) * (t == WeightType::Q4 ? 8 : 4);
}
// Units per staged piece: a multiple of 32 within the budget.
__host__ __device__ constexpr int matmul_stage_units(WeightType t, int tile) {
  const int u = 32 * (kMatmulStageBudget / (tile * 32 * matmul_unit_row_bytes(t)));
  return u < kMatmulMaxStageUnits ? u : kMatmulMaxStageUnits;
}

template <WeightType T, int kTile>
struct MatmulStage {
  static constexpr int kSlots = matmul_stage_slots(T), kGroups = matmul_stage_groups(T);
  static constexpr int kUnits = matmul_stage_units(T, kTile);
  static constexpr int kRowSlots = kUnits * kSlots, kRowGroups = kUnits * kGroups;
  static_assert(kUnits >= 32 && kUnits % 32 == 0, "a piece holds whole lane rounds");
  uint4 x[kTile * kRowSlots];                              // [kTile][units / 32][slot][32]
  float dx[kGroups > 0 ? kTile * kRowGroups : 1];          // [kTile][units / 32][group][32]
  float ds[T == WeightType::Q4 ? kTile * kRowGroups : 1];  // same, q4 only
};

// ---- input transform ------------------------------------------------------------------------

// Input row of activation row gi.
__device__ __forceinline__ int64_t matmul_src_row(const MatmulArgs& a, int gi) {
  return a.in_rows ? a.in_rows[gi] : gi;
}

// f(x)[src, c] for one column; r: the row's RMSNorm factor.
__device__ __forceinline__ float matmul_in1(const MatmulArgs& a, int64_t src, int64_t c, float r) {
  const int64_t cols = a.W.cols;
  switch (a.in) {
    case MatmulIn::kPlain: return a.x[src * cols + c];
    case MatmulIn::kRmsNorm: return a.norm_w[c] * (a.x[src * cols + c] * r);
    case MatmulIn::kSwiGLU: {
      const float g = a.x[src * 2 * cols + c], u = a.x[src * 2 * cols + cols + c];
      return g / (1.0f + expf(-g)) * u;
    }
  }
  return 0.0f;
}

// f(x)[src, c .. c + 3] (16-byte aligned loads; same arithmetic as matmul_in1).
__device__ __forceinline__ float4 matmul_in4(const MatmulArgs& a, int64_t src, int64_t c, float r) {
  const int64_t cols = a.W.cols;
  if (a.in == MatmulIn::kSwiGLU) {
    const float4 g = *reinterpret_cast<const float4*>(a.x + src * 2 * cols + c);
    const float4 u = *reinterpret_cast<const float4*>(a.x + src * 2 * cols + cols + c);
    return float4{g.x / (1.0f + expf(-g.x)) * u.x, g.y / (1.0f + expf(-g.y)) * u.y,
                  g.z / (1.0f + expf(-g.z)) * u.z, g.w / (1.0f + expf(-g.w)) * u.w};
  }
  const float4 v = *reinterpret_cast<const float4*>(a.x + src * cols + c);
  if (a.in == MatmulIn::kPlain) return v;
  const float4 g = __ldg(reinterpret_cast<const float4*>(a.norm_w + c));
  return float4{g.x * (v.x * r), g.y * (v.y * r), g.z * (v.z * r), g.w * (v.w * r)};
}

// 1 / sqrt(mean(x^2) + eps) of input row src, by one warp (fixed order: lane stride, warp_sum).
__device__ __forceinline__ float matmul_rms_factor(const MatmulArgs& a, int64_t src) {
  const int64_t cols = a.W.cols;
  const float* xr = a.x + src * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x & 31; c < cols; c += 32) ss = fmaf(xr[c], xr[c], ss);
  ss = warp_sum(ss) / static_cast<float>(cols);
  return 1.0f / sqrtf(ss + a.eps);
}

// rs[i] = 1 / sqrt(mean(x^2) + eps) of tile rows [0, nr) (activation rows i0 + i), by the whole
// block: thread t sums the squares of its quads t, t + kMatmulThreads, .. of each row (all rows'
// loads in flight at once, not one warp's serial walk per row), then warp_sum, then the 8 warps'
// sums in warp order. A fixed order per row whatever n and the other rows. red: shared scratch.
template <int kTile>
__device__ __forceinline__ void matmul_rms_factors(const MatmulArgs& a, int i0, int nr,
                                                   float (&red)[kMatmulWarps][kTile], float* rs) {
  const int64_t cols = a.W.cols, quads = cols / 4;  // vectorized path: cols % 8 == 0
  float ss[kTile];
#pragma unroll
  for (int i = 0; i < kTile; ++i) ss[i] = 0.0f;
#pragma unroll 2
  for (int64_t q = threadIdx.x; q < quads; q += kMatmulThreads) {
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
      if (i < nr) {
        const float4 v =
            *reinterpret_cast<const float4*>(a.x + matmul_src_row(a, i0 + i) * cols + 4 * q);
        ss[i] = fmaf(v.x, v.x, ss[i]);
        ss[i] = fmaf(v.y, v.y, ss[i]);
        ss[i] = fmaf(v.z, v.z, ss[i]);
        ss[i] = fmaf(v.w, v.w, ss[i]);
      }
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < kTile; ++i) {
    const float w = warp_sum(ss[i]);  // every lane of every warp: the shuffles need whole warps
    if (lane == 0) red[warp][i] = w;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < nr) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kMatmulWarps; ++w) t += red[w][threadIdx.x];
    rs[threadIdx.x] = 1.0f / sqrtf(t / static_cast<float>(cols) + a.eps);
  }
}

// The int8 quantization of a group of 32 activations held by 8 consecutive lanes (4 each; all
// 32 lanes of the warp call it): d = max|x| / 127, codes round-even(x / d) packed in a word (the
// lane's 4 columns, low byte first), ds = d * (sum of the group's codes). The one definition
// the dp4a staging (matmul_stage) and the tensor-core staging (matmul_imma.cuh) share.
struct MatmulQuad {
  uint32_t word;
  float d, ds;
};
__device__ __forceinline__ MatmulQuad matmul_quantize_quad(float4 v) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, o));
  const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
  const int q0 = __float2int_rn(v.x * id), q1 = __float2int_rn(v.y * id);
  const int q2 = __float2int_rn(v.z * id), q3 = __float2int_rn(v.w * id);
  int qs = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) qs += __shfl_xor_sync(kFullMask, qs, o);
  const uint32_t word =
      (static_cast<uint32_t>(q0) & 0xffu) | ((static_cast<uint32_t>(q1) & 0xffu) << 8) |
      ((static_cast<uint32_t>(q2) & 0xffu) << 16) | (static_cast<uint32_t>(q3) << 24);
  return MatmulQuad{word, d, d * static_cast<float>(qs)};
}

// Stages columns [col0, col0 + ncols) of tile rows [0, nr) (activation rows i0 + i). All threads
// of the block call it (the quantizer's shuffles need whole warps).
template <WeightType T, int kTile>
__device__ __forceinline__ void matmul_stage(const MatmulArgs& a, int i0, int nr, int64_t col0,
                                             int ncols, const float* rs,
                                             MatmulStage<T, kTile>& st) {
  using S = MatmulStage<T, kTile>;
  constexpr int kUC = matmul_unit_cols(T);
  const int quads = ncols / 4, total = nr * quads;
  for (int e0 = 0; e0 < total; e0 += kMatmulThreads) {
    const int e = e0 + static_cast<int>(threadIdx.x);
    const bool ok = e < total;  // uniform over each 8-lane group (quads % 8 == 0 when quantized)
    const int i = ok ? e / quads : 0, cc = ok ? (e % quads) * 4 : 0;
    const float4 v =
        ok ? matmul_in4(a, matmul_src_row(a, i0 + i), col0 + cc, rs[i]) : float4{0, 0, 0, 0};
    const int uu = cc / kUC, off = cc % kUC, it = uu / 32, l = uu % 32;
    if constexpr (!matmul_quantized(T)) {
      if (ok)
        reinterpret_cast<float4*>(st.x)[i * S::kRowSlots + (it * S::kSlots + off / 4) * 32 + l] = v;
    } else {
      const MatmulQuad q = matmul_quantize_quad(v);  // 8 lanes: one group of 32 columns
      if (ok) {
        reinterpret_cast<uint32_t*>(
            st.x)[(i * S::kRowSlots + (it * S::kSlots + off / 16) * 32 + l) * 4 + (off % 16) / 4] =
            q.word;
        if ((threadIdx.x & 7) == 0) {
          const int gidx = i * S::kRowGroups + (it * S::kGroups + off / kQuantGroup) * 32 + l;
          st.dx[gidx] = q.d;
          if constexpr (T == WeightType::Q4) st.ds[gidx] = q.ds;
        }
      }
    }
  }
}

// ---- weight units -------------------------------------------------------------------------

// Unit u of weight row r as loaded (fetch): its 32 bytes and, for q8 / q4, the group scales
// (q8: d in the low half of d2; q4: the pair of groups' d and m). The kernel fetches a unit one
// iteration before it decodes it, and a warp's first unit before the prologue (matmul_kernel).
struct MatmulRaw {
  uint4 x, y;
  uint32_t d2, m2;
};

template <WeightType T>
__device__ __forceinline__ MatmulRaw matmul_fetch(const DevWeight& W, int64_t r, int64_t u) {
  MatmulRaw w;
  // 32 bytes (two uint4) per unit, W.cols / unit columns units per row (the vectorized path)
  const uint4* p =
      reinterpret_cast<const uint4*>(W.q + r * (W.cols / matmul_unit_cols(T)) * 32) + 2 * u;
  w.x = __ldg(p);
  w.y = __ldg(p + 1);
  w.d2 = w.m2 = 0;
#if defined(TRT_SPEC_CUDA_EMU)
  cuda_emu::note_weight_read(p, 32);
#endif
  if constexpr (T == WeightType::Q8) {
    w.d2 = __ldg(W.d + r * (W.cols / kQuantGroup) + u);
#if defined(TRT_SPEC_CUDA_EMU)
    cuda_emu::note_weight_read(W.d + r * (W.cols / kQuantGroup) + u, 2);
#endif
  } else if constexpr (T == WeightType::Q4) {
    const int64_t g = r * (W.cols / kQuantGroup) + 2 * u;  // even: a 4-byte aligned pair
    w.d2 = __ldg(reinterpret_cast<const uint32_t*>(W.d + g));
    w.m2 = __ldg(reinterpret_cast<const uint32_t*>(W.m + g));
#if defined(TRT_SPEC_CUDA_EMU)
    cuda_emu::note_weight_read(W.d + g, 4);
    cuda_emu::note_weight_read(W.m + g, 4);
#endif
  }
  return w;
}

// A fetched unit, decoded as far as it is shared by all activation rows.
template <WeightType T>
struct MatmulUnit;

template <>
struct MatmulUnit<WeightType::F32> {
  float w[8];
  __device__ __forceinline__ explicit MatmulUnit(const MatmulRaw& r) {
    const uint32_t words[8] = {r.x.x, r.x.y, r.x.z, r.x.w, r.y.x, r.y.y, r.y.z, r.y.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = __uint_as_float(words[k]);
  }
};

template <bool kBf16>
struct MatmulUnitHalf {
  float w[16];
  __device__ __forceinline__ explicit MatmulUnitHalf(const MatmulRaw& r) {
    const uint32_t words[8] = {r.x.x, r.x.y, r.x.z, r.x.w, r.y.x, r.y.y, r.y.z, r.y.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint16_t lo = static_cast<uint16_t>(words[k] & 0xffffu);
      const uint16_t hi = static_cast<uint16_t>(words[k] >> 16);
      w[2 * k] = kBf16 ? bf16_bits_to_float(lo) : f16_bits_to_float(lo);
      w[2 * k + 1] = kBf16 ? bf16_bits_to_float(hi) : f16_bits_to_float(hi);
    }
  }
};
template <>
struct MatmulUnit<WeightType::F16> : MatmulUnitHalf<false> {
  using MatmulUnitHalf<false>::MatmulUnitHalf;
};
template <>
struct MatmulUnit<WeightType::BF16> : MatmulUnitHalf<true> {
  using MatmulUnitHalf<true>::MatmulUnitHalf;
};

// q8: one group of 32 codes, made signed (q - 128 == q ^ 0x80 as int8).
template <>
struct MatmulUnit<WeightType::Q8> {
  int w[8];
  float d;
  __device__ __forceinline__ explicit MatmulUnit(const MatmulRaw& r) {
    const uint32_t words[8] = {r.x.x, r.x.y, r.x.z, r.x.w, r.y.x, r.y.y, r.y.z, r.y.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = static_cast<int>(words[k] ^ 0x80808080u);
    d = f16_bits_to_float(static_cast<uint16_t>(r.d2 & 0xffffu));
  }
};

// q4: one super-block (64 columns, groups A and B): lo[k] = codes of columns 4k .. 4k + 3 (A),
// hi[k] = codes of columns 32 + 4k .. (B).
template <>
struct MatmulUnit<WeightType::Q4> {
  int lo[8], hi[8];
  float dA, mA, dB, mB;
  __device__ __forceinline__ explicit MatmulUnit(const MatmulRaw& r) {
    const uint32_t words[8] = {r.x.x, r.x.y, r.x.z, r.x.w, r.y.x, r.y.y, r.y.z, r.y.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      lo[k] = static_cast<int>(words[k] & 0x0f0f0f0fu);
      hi[k] = static_cast<int>((words[k] >> 4) & 0x0f0f0f0fu);
    }
    dA = f16_bits_to_float(static_cast<uint16_t>(r.d2 & 0xffffu));
    dB = f16_bits_to_float(static_cast<uint16_t>(r.d2 >> 16));
    mA = f16_bits_to_float(static_cast<uint16_t>(r.m2 & 0xffffu));
    mB = f16_bits_to_float(static_cast<uint16_t>(r.m2 >> 16));
  }
};

__device__ __forceinline__ int dp4a_16(const int* w, uint4 x0, uint4 x1) {
  int s = __dp4a(w[0], static_cast<int>(x0.x), 0);
  s = __dp4a(w[1], static_cast<int>(x0.y), s);
  s = __dp4a(w[2], static_cast<int>(x0.z), s);
  s = __dp4a(w[3], static_cast<int>(x0.w), s);
  s = __dp4a(w[4], static_cast<int>(x1.x), s);
  s = __dp4a(w[5], static_cast<int>(x1.y), s);
  s = __dp4a(w[6], static_cast<int>(x1.z), s);
  return __dp4a(w[7], static_cast<int>(x1.w), s);
}

// acc += unit . staged activations of one row; xs: the row's slot 0 of this unit (slot h at
// xs[32 h]), gs: its group 0 (group k at gs[32 k]).
template <WeightType T, int kTile>
__device__ __forceinline__ float matmul_dot(const MatmulUnit<T>& w, const MatmulStage<T, kTile>& st,
                                            int xs, int gs, float acc) {
  if constexpr (T == WeightType::Q8) {
    const int is = dp4a_16(w.w, st.x[xs], st.x[xs + 32]);
    return fmaf(w.d * st.dx[gs], static_cast<float>(is), acc);
  } else if constexpr (T == WeightType::Q4) {
    const int iA = dp4a_16(w.lo, st.x[xs], st.x[xs + 32]);
    const int iB = dp4a_16(w.hi, st.x[xs + 64], st.x[xs + 96]);
    acc = fmaf(w.dA * st.dx[gs], static_cast<float>(iA), acc);
    acc = fmaf(w.mA, st.ds[gs], acc);
    acc = fmaf(w.dB * st.dx[gs + 32], static_cast<float>(iB), acc);
    return fmaf(w.mB, st.ds[gs + 32], acc);
  } else {
    const float4* x = reinterpret_cast<const float4*>(st.x);
#pragma unroll
    for (int h = 0; h < MatmulStage<T, kTile>::kSlots; ++h) {
      const float4 v = x[xs + 32 * h];
      acc = fmaf(w.w[4 * h], v.x, acc);
      acc = fmaf(w.w[4 * h + 1], v.y, acc);
      acc = fmaf(w.w[4 * h + 2], v.z, acc);
      acc = fmaf(w.w[4 * h + 3], v.w, acc);
    }
    return acc;
  }
}

// ---- epilogue and split-K sum -------------------------------------------------------------

// The epilogue of activation row gi for output rows ra and rb (rb < 0: none), full sums va, vb.
__device__ __forceinline__ void matmul_epilogue(const MatmulArgs& a, int gi, int64_t ra, int64_t rb,
                                                float va, float vb) {
  float* o = a.out + static_cast<int64_t>(gi) * a.W.rows;  // [rows]
  switch (a.epi) {
    case MatmulOut::kStore:
      o[ra] = a.bias ? va + a.bias[ra] : va;
      if (rb >= 0) o[rb] = a.bias ? vb + a.bias[rb] : vb;
      break;
    case MatmulOut::kAccumulate:
      o[ra] += va;
      if (rb >= 0) o[rb] += vb;
      break;
    case MatmulOut::kRopeKv: {
      // ra = (head h, dim j), rb = (h, j + half): rotate-half partners (rope_kernel's formula).
      if (a.bias) va += a.bias[ra], vb += a.bias[rb];
      const int hd = a.head_dim, half = hd / 2;
      const int h = static_cast<int>(ra / hd), j = static_cast<int>(ra % hd);
      if (h < a.n_heads + a.n_kv_heads) {
        const int64_t t = static_cast<int64_t>(a.pos[gi]) * half + j;
        const float c = a.cos_t[t], s = a.sin_t[t], x0 = va, x1 = vb;
        va = x0 * c - x1 * s;
        vb = x1 * c + x0 * s;
      }
      o[ra] = va;
      o[rb] = vb;
      if (h >= a.n_heads) {  // k or v head g: to the cache too
        const bool is_k = h < a.n_heads + a.n_kv_heads;
        const int g = is_k ? h - a.n_heads : h - a.n_heads - a.n_kv_heads;
        const int64_t idx = a.kv_idx ? a.kv_idx[gi] : a.pos[gi];
        const int64_t e = a.kv.head_offset(a.slot[gi], a.layer, g) + idx * hd + j;
        void* base = is_k ? a.kv.k : a.kv.v;
        kv_store(base, a.kv.type, e, va);
        kv_store(base, a.kv.type, e + half, vb);
      }
      break;
    }
  }
}

// Row gi's full sums of output rows ra and rb (rb < 0: none): the epilogue (one split) or this
// split's partial [split, n, rows] (the last block to arrive sums them: matmul_split_sum).
__device__ __forceinline__ void matmul_finish(const MatmulArgs& a, const MatmulGeom& g,
                                              float* partial, int split, int gi, int64_t ra,
                                              int64_t rb, float va, float vb) {
  if (g.splits == 1) {
    matmul_epilogue(a, gi, ra, rb, va, vb);
  } else {
    float* pp = partial + (static_cast<int64_t>(split) * a.n + gi) * a.W.rows;  // [rows]
    pp[ra] = va;
    if (rb >= 0) pp[rb] = vb;
  }
}

// Split-K arrival: whether this block is the last of the splits of its (row block, tile) to
// finish, counted at counters[at] (all threads call it after writing their partials; the last block
// resets the counter for the next launch, as graph replays need). last: a __shared__ int.
__device__ __forceinline__ bool matmul_split_last(int* counters, int64_t at, int splits,
                                                  int& last) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int old = atomicAdd(counters + at, 1);
    last = old == splits - 1;
    if (last) counters[at] = 0;  // ready for the next launch (graph replays)
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
  return true;
}

// The split partials of row gi, output rows ra and rb (rb < 0: none), summed in split order,
// then the epilogue. The loads of 4 splits are in flight at once (one load per round trip left
// the splits' reads serial); the adds are the same whatever the batching.
__device__ __forceinline__ void matmul_split_sum(const MatmulArgs& a, const MatmulGeom& g,
                                                 const float* partial, int gi, int64_t ra,
                                                 int64_t rb) {
  constexpr int kBatch = 4;
  const int64_t rows = a.W.rows, rb_load = rb >= 0 ? rb : ra;
  float va = 0.0f, vb = 0.0f;
  for (int s0 = 0; s0 < g.splits; s0 += kBatch) {
    float xa[kBatch], xb[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float* pp = partial + (static_cast<int64_t>(s0 + u) * a.n + gi) * rows;  // [rows]
      xa[u] = s0 + u < g.splits ? __ldcg(pp + ra) : 0.0f;
      xb[u] = s0 + u < g.splits ? __ldcg(pp + rb_load) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (s0 + u >= g.splits) break;
      va = s0 + u == 0 ? xa[u] : va + xa[u];
      vb = s0 + u == 0 ? xb[u] : vb + xb[u];
    }
  }
  matmul_epilogue(a, gi, ra, rb, va, vb);
}

// Output rows of pair p.
__device__ __forceinline__ int64_t matmul_pair_row(const MatmulGeom& g, int64_t p) {
  return (p / g.half) * 2 * g.half + p % g.half;
}

}  // namespace trt_spec::cuda
