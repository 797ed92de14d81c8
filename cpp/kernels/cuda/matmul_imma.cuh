// matmul_imma.cuh: the q8 / q4 matmul on the tensor cores, for products of at least plan_matmul's
// imma_rows rows (off by default: matmul_launch.cuh says why): the integer dot products of each
// group of 32 columns as int8 WMMA tiles (16 x 16 x 16, exact int32 sums), then the float
// arithmetic of matmul_kernel (matmul.cuh) replayed operation for operation, so every row gets the
// bits of a one-row decode.
//
// Why the same bits are possible. matmul_kernel's q8 / q4 arithmetic per (activation row r,
// output row o) is: for each unit u of the split (64 q4 or 32 q8 columns), lane (u - u0) % 32
// adds, in ascending unit order, fmaf(d_w d_x, isum_g, acc) (+ fmaf(m_w, d_x sum(q_x), acc) for
// q4) for each group g of 32 columns of the unit, where isum_g is an exact int32 dot product of
// the codes; the 32 lane sums are then added by warp_sum's butterfly (xor 16, 8, 4, 2, 1) and
// split-K partials in split order. Integer sums are exact whatever computes them, so a tensor
// core's isum_g is the dp4a chain's; the rest is float and is repeated here in the same order:
// 32 "virtual lane" accumulators per (r, o), the same fmaf sequence, the same butterfly tree.
//
// Work layout. A block (8 warps) serves 16 activation rows (a tile) x 16 output rows (8 pairs of
// the row group, as matmul_kernel: pair p = rows a and a + half) for one split, in pieces of 8
// units: warp w takes unit w of each piece, so it serves the virtual lanes w, w + 8, w + 16,
// w + 24 (piece pc: lane 8 (pc % 4) + w). Per piece the block stages the tile's
// activation codes and the 16 rows' weight codes as int8 in WMMA blocks of 16 x 16 ([kslice]
// [row][16]: 256 bytes, aligned), the scales as floats; a warp multiplies its unit's groups into
// int32 16 x 16 tiles in shared memory; lane t then updates the accumulators of output row
// t % 16 and activation rows 8 (t / 16) .. + 7, in its virtual lane's slot. After the last
// piece the 32 slots of each (r, o) are summed as the butterfly would and go to the epilogue
// (or split-K partials; the last block sums those in split order, as matmul_kernel).
//
// Latency: a thread's weight unit of the next piece is fetched while the current one is
// multiplied (the first before the grid dependency wait). With its 32 accumulators a thread
// takes 125-128 registers for q8 (two blocks of 8 warps per SM) and 190-192 for q4 (one; bounded
// to 128 it spilled) (ptxas, sm_80 / sm_90). The emulated and the GPU tests check the bits
// against the one-row kernel.
#pragma once

#include "kernels/cuda/matmul.cuh"

#if !defined(TRT_SPEC_CUDA_EMU)
#include <mma.h>
#endif

namespace trt_spec::cuda {

constexpr int kImmaTile = 16;  // activation rows per block
constexpr int kImmaOut = 16;   // output rows per block (8 pairs)
constexpr int kImmaUnits = 8;  // units per staged piece (one per warp)
constexpr int kImmaSlots = 4;  // virtual lanes per warp (32 / kMatmulWarps)
static_assert(kMatmulWarps * kImmaSlots == 32 && kImmaUnits == kMatmulWarps, "one unit per warp");

template <WeightType T>
struct ImmaStage {
  static constexpr int kGroups = matmul_stage_groups(T);     // per unit: 2 q4, 1 q8
  static constexpr int kSlices = kImmaUnits * kGroups * 2;   // 16 columns each
  static constexpr int kPieceGroups = kImmaUnits * kGroups;  // groups per piece
  union {
    struct {
      alignas(32) int8_t a[kSlices][kImmaTile][16];  // activation codes [slice][r][16 columns]
      alignas(32) int8_t b[kSlices][kImmaOut][16];   // weight codes [slice][o][16 columns]
      alignas(32) int32_t c[kMatmulWarps][kGroups][kImmaTile][kImmaOut];  // sums [g][r][o]
    } mm;
    float lanes[kImmaTile][kImmaOut][33];  // the 32 virtual lane sums per (r, o) (padded)
  };
  // (WMMA pointers must be 32-byte aligned: a, b and c are, the union first in the struct.)
  float dx[kImmaTile][kPieceGroups];  // d_x per (r, group of the piece)
  float ds[kImmaTile][kPieceGroups];  // d_x sum(q_x) (q4)
  float dw[kImmaOut][kPieceGroups];   // d_w per (o, group)
  float mw[kImmaOut][kPieceGroups];   // m_w (q4)
};

// Output row of block column o (0..15): pair p0 + o % 8, row a (o < 8) or b = a + half.
__device__ __forceinline__ int64_t imma_out_row(const MatmulGeom& g, int64_t p0, int o,
                                                int64_t rows, bool& valid) {
  const int64_t p = p0 + o % 8;
  valid = p < g.pairs;
  const int64_t a = valid ? matmul_pair_row(g, p) : 0;
  const int64_t r = o < 8 ? a : a + g.half;
  valid = valid && r < rows;
  return valid ? r : a;
}

// Stages piece units [pu0, pu0 + np) of the tile's activation rows [0, nr): quantized by
// matmul_quantize_quad as matmul_stage does (8 lanes per group of 32 columns), written as WMMA
// blocks; rows past nr and units past np are zero codes. All threads
// call it; a thread issues its loads in batches of 4 before using them.
template <WeightType T>
__device__ __forceinline__ void imma_stage_acts(const MatmulArgs& a, int i0, int nr, int64_t pu0,
                                                int np, const float* rs, ImmaStage<T>& st) {
  constexpr int kUC = matmul_unit_cols(T);
  constexpr int kQuads = kImmaUnits * kUC / 4;                 // per row
  constexpr int kIters = kImmaTile * kQuads / kMatmulThreads;  // 8 q4, 4 q8
  static_assert(kImmaTile * kQuads % kMatmulThreads == 0, "whole rounds of the block");
  constexpr int kBatch = kIters < 4 ? kIters : 4;  // loads in flight per thread (registers)
#pragma unroll
  for (int b0 = 0; b0 < kIters; b0 += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int e = (b0 + j) * kMatmulThreads + static_cast<int>(threadIdx.x);
      const int i = e / kQuads, cc = (e % kQuads) * 4;  // 8-lane groups: 32 columns each
      const bool ok = i < nr && cc / kUC < np;          // uniform over each 8-lane group
      v[j] =
          ok ? matmul_in4(a, matmul_src_row(a, i0 + i), pu0 * kUC + cc, rs[i]) : float4{0, 0, 0, 0};
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int e = (b0 + j) * kMatmulThreads + static_cast<int>(threadIdx.x);
      const int i = e / kQuads, cc = (e % kQuads) * 4;
      const MatmulQuad q = matmul_quantize_quad(v[j]);
      *reinterpret_cast<uint32_t*>(&st.mm.a[cc / 16][i][cc % 16]) = q.word;
      if ((threadIdx.x & 7) == 0) {
        st.dx[i][cc / kQuantGroup] = q.d;
        st.ds[i][cc / kQuantGroup] = q.ds;
      }
    }
  }
}

// Thread t < 128 of the block: weight row o = t / 8 and unit t % 8 of the piece at pu0 (np
// units): whether it exists, and its fetch (issued one piece ahead of its staging).
template <WeightType T>
__device__ __forceinline__ bool imma_fetch_weights(const MatmulArgs& a, const MatmulGeom& g,
                                                   int64_t p0, int64_t pu0, int np,
                                                   MatmulRaw& raw) {
  const int t = static_cast<int>(threadIdx.x), o = t / kImmaUnits, uu = t % kImmaUnits;
  bool valid = false;
  const int64_t r = t < kImmaOut * kImmaUnits ? imma_out_row(g, p0, o, a.W.rows, valid) : 0;
  const bool ok = valid && uu < np;
  raw = ok ? matmul_fetch<T>(a.W, r, pu0 + uu) : MatmulRaw{};
  return ok;
}

// Stages a fetched unit (thread t < 128: row t / 8, unit t % 8) as int8 codes (q8: made signed)
// in WMMA blocks and its scales; zeros where it does not exist.
template <WeightType T>
__device__ __forceinline__ void imma_stage_weights(const MatmulRaw& raw, bool ok,
                                                   ImmaStage<T>& st) {
  constexpr int kUC = matmul_unit_cols(T);
  const int t = static_cast<int>(threadIdx.x), o = t / kImmaUnits, uu = t % kImmaUnits;
  if (t >= kImmaOut * kImmaUnits) return;
  const MatmulUnit<T> w(raw);
  if constexpr (T == WeightType::Q8) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // columns 4k .. 4k + 3 of the unit
      const int c = uu * kUC + 4 * k;
      *reinterpret_cast<uint32_t*>(&st.mm.b[c / 16][o][c % 16]) =
          ok ? static_cast<uint32_t>(w.w[k]) : 0u;
    }
    st.dw[o][uu] = ok ? w.d : 0.0f;
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // lo[k]: columns 4k .. 4k + 3 (group A), hi[k]: 32 + 4k ..
      const int ca = uu * kUC + 4 * k, cb = ca + 32;
      *reinterpret_cast<uint32_t*>(&st.mm.b[ca / 16][o][ca % 16]) =
          ok ? static_cast<uint32_t>(w.lo[k]) : 0u;
      *reinterpret_cast<uint32_t*>(&st.mm.b[cb / 16][o][cb % 16]) =
          ok ? static_cast<uint32_t>(w.hi[k]) : 0u;
    }
    st.dw[o][2 * uu] = ok ? w.dA : 0.0f;
    st.dw[o][2 * uu + 1] = ok ? w.dB : 0.0f;
    st.mw[o][2 * uu] = ok ? w.mA : 0.0f;
    st.mw[o][2 * uu + 1] = ok ? w.mB : 0.0f;
  }
}

// A warp's int32 sums of its unit's groups: c[g][r][o] = sum over the group's 32 columns of
// activation code (r) x weight code (o), exact (two 16-column WMMA steps per group).
template <WeightType T>
__device__ __forceinline__ void imma_unit_sums(ImmaStage<T>& st, int warp) {
  using S = ImmaStage<T>;
  namespace wmma = nvcuda::wmma;
#pragma unroll
  for (int gg = 0; gg < S::kGroups; ++gg) {
    const int g = warp * S::kGroups + gg;  // group of the piece
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc;
    wmma::fill_fragment(acc, 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, &st.mm.a[2 * g + h][0][0], 16);  // (r, k) at [r * 16 + k]
      wmma::load_matrix_sync(fb, &st.mm.b[2 * g + h][0][0], 16);  // (k, o) at [o * 16 + k]
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(&st.mm.c[warp][gg][0][0], acc, 16, wmma::mem_row_major);
  }
}

// grid (row groups * tiles, splits), block kMatmulThreads; geometry and scratch as
// matmul_kernel (plan_matmul with tile_rows kMatmulMaxTile; reps ignored: one row group per
// block). Q8 / Q4 weights on the vectorized path only.
template <WeightType T>
__global__ void __launch_bounds__(kMatmulThreads, 1)
    matmul_imma_kernel(MatmulArgs a, MatmulGeom g, float* __restrict__ partial, int* counters) {
  using S = ImmaStage<T>;
  __shared__ S st;
  __shared__ float rs[kImmaTile];
  __shared__ float red[kMatmulWarps][kImmaTile];
  __shared__ int last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row_block = blockIdx.x / g.tiles, p0 = row_block * kMatmulWarps;
  const int tile = static_cast<int>(blockIdx.x % g.tiles), split = static_cast<int>(blockIdx.y);
  const int i0 = tile * kImmaTile, nr = min(kImmaTile, a.n - i0);
  const int64_t rows = a.W.rows;
  const int64_t u0 = split * g.split_units;
  const int64_t u1 = u0 + g.split_units < g.units ? u0 + g.split_units : g.units;
  const int pieces = static_cast<int>((u1 - u0 + kImmaUnits - 1) / kImmaUnits);
  auto piece_units = [&](int pc) {  // units of piece pc (0 past the last)
    const int64_t pu0 = u0 + static_cast<int64_t>(pc) * kImmaUnits;
    return pc < pieces ? static_cast<int>(u1 - pu0 < kImmaUnits ? u1 - pu0 : kImmaUnits) : 0;
  };
  // The next piece's weight unit of this thread, fetched a piece ahead; the first before the
  // wait (weights depend on no earlier kernel: with PDL the fetch overlaps its tail).
  MatmulRaw raw;
  bool raw_ok = imma_fetch_weights<T>(a, g, p0, u0, piece_units(0), raw);
  grid_dependency_launch();
  grid_dependency_wait();
  if (a.in == MatmulIn::kRmsNorm) {
    matmul_rms_factors<kImmaTile>(a, i0, nr, red, rs);
  } else if (threadIdx.x < kImmaTile) {
    rs[threadIdx.x] = 1.0f;
  }
  __syncthreads();

  // Lane t: output row o = t % 16 of the block, activation rows rb .. rb + 7; acc[k][i]: virtual
  // lane 8 ((pc + k) % 4) + warp of (rb + i, o) while piece pc runs (piece pc serves virtual
  // lanes 8 (pc % 4) + warp): acc[0] is always the current piece's, and the slots rotate after
  // each piece (register moves; no unrolled round of 4 pieces, no indexing by a variable).
  const int o = lane % 16, rb = (lane / 16) * 8;
  float acc[kImmaSlots][8];
#pragma unroll
  for (int k = 0; k < kImmaSlots; ++k)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[k][i] = 0.0f;
  for (int pc = 0; pc < pieces; ++pc) {
    const int64_t pu0 = u0 + static_cast<int64_t>(pc) * kImmaUnits;
    const int np = piece_units(pc);
    __syncthreads();  // the previous piece's readers are done
    imma_stage_acts<T>(a, i0, nr, pu0, np, rs, st);
    imma_stage_weights<T>(raw, raw_ok, st);
    __syncthreads();
    raw_ok = imma_fetch_weights<T>(a, g, p0, pu0 + kImmaUnits, piece_units(pc + 1), raw);
    if (warp < np) {  // this warp's unit of the piece (uniform over the warp)
      imma_unit_sums<T>(st, warp);
      __syncwarp();
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // matmul_dot's arithmetic, in its order
        const int r = rb + i;
        if constexpr (T == WeightType::Q8) {
          const float is = static_cast<float>(st.mm.c[warp][0][r][o]);
          acc[0][i] = fmaf(st.dw[o][warp] * st.dx[r][warp], is, acc[0][i]);
        } else {
          const int gA = 2 * warp, gB = gA + 1;
          const float iA = static_cast<float>(st.mm.c[warp][0][r][o]);
          const float iB = static_cast<float>(st.mm.c[warp][1][r][o]);
          acc[0][i] = fmaf(st.dw[o][gA] * st.dx[r][gA], iA, acc[0][i]);
          acc[0][i] = fmaf(st.mw[o][gA], st.ds[r][gA], acc[0][i]);
          acc[0][i] = fmaf(st.dw[o][gB] * st.dx[r][gB], iB, acc[0][i]);
          acc[0][i] = fmaf(st.mw[o][gB], st.ds[r][gB], acc[0][i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // rotate: the next piece's slot to acc[0]
      const float first = acc[0][i];
#pragma unroll
      for (int k = 0; k + 1 < kImmaSlots; ++k) acc[k][i] = acc[k + 1][i];
      acc[kImmaSlots - 1][i] = first;
    }
  }

  // The 32 virtual lanes of each (r, o) to shared memory (acc[k]: lane 8 ((pieces + k) % 4) +
  // warp), then warp_sum's butterfly: after the steps xor 16, 8, 4, 2, 1 every lane holds
  // (((v0 + v16) + (v8 + v24)) + ..), the same tree.
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kImmaSlots; ++k)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      st.lanes[rb + i][o][8 * ((pieces + k) % kImmaSlots) + warp] = acc[k][i];
  __syncthreads();
  const int r = threadIdx.x / 16, oc = threadIdx.x % 16;  // (r, oc): one sum per thread
  {
    const float* x = st.lanes[r][oc];
    float v[16];  // (constant loop bounds: v stays in registers)
#pragma unroll
    for (int l = 0; l < 16; ++l) v[l] = x[l] + x[l + 16];
#pragma unroll
    for (int l = 0; l < 8; ++l) v[l] = v[l] + v[l + 8];
#pragma unroll
    for (int l = 0; l < 4; ++l) v[l] = v[l] + v[l + 4];
#pragma unroll
    for (int l = 0; l < 2; ++l) v[l] = v[l] + v[l + 2];
    v[0] = v[0] + v[1];
    st.lanes[r][oc][32] = v[0];  // the (r, oc) sum (the pad column: no other thread reads it)
  }
  __syncthreads();
  if (threadIdx.x < kImmaTile * 8) {
    const int ri = threadIdx.x / 8, pi = threadIdx.x % 8;  // (row, pair)
    bool va_ok, vb_ok;
    const int64_t ra = imma_out_row(g, p0, pi, rows, va_ok);
    const int64_t rbw = imma_out_row(g, p0, pi + 8, rows, vb_ok);
    if (va_ok && ri < nr)
      matmul_finish(a, g, partial, split, i0 + ri, ra, vb_ok ? rbw : -1, st.lanes[ri][pi][32],
                    st.lanes[ri][pi + 8][32]);
  }
  if (g.splits == 1 || !matmul_split_last(counters, blockIdx.x, g.splits, last)) return;
  // The last block of this (row group, tile) to arrive: the sums in split order.
  if (threadIdx.x >= kImmaTile * 8) return;
  const int ri = threadIdx.x / 8, pi = threadIdx.x % 8;
  bool va_ok, vb_ok;
  const int64_t ra = imma_out_row(g, p0, pi, rows, va_ok);
  const int64_t rbw = imma_out_row(g, p0, pi + 8, rows, vb_ok);
  if (va_ok && ri < nr) matmul_split_sum(a, g, partial, i0 + ri, ra, vb_ok ? rbw : -1);
}

// Static shared memory of matmul_imma_kernel<t> (t: q8 or q4).
inline size_t matmul_imma_smem_bytes(WeightType t) {
  const size_t extra = sizeof(float) * (kImmaTile + kMatmulWarps * kImmaTile) + sizeof(int);
  return (t == WeightType::Q8 ? sizeof(ImmaStage<WeightType::Q8>)
                              : sizeof(ImmaStage<WeightType::Q4>)) +
         extra;
}

}  // namespace trt_spec::cuda
