// matmul_kernel.cuh: the GPU matmul kernels over the pieces of matmul.cuh (which describes the
// work layout, the arithmetic and why a row's bits do not depend on n): matmul_kernel, the
// vectorized path (a block's walk over its tile rows, row groups and column units, fetching each
// unit one iteration ahead), and matmul_fallback_kernel for any shape and alignment. Host side
// (plan and launch): matmul_launch.cuh; q8 / q4 prefill tiles on tensor cores: matmul_imma.cuh.
#pragma once

#include "kernels/cuda/l2_prefetch.cuh"
#include "kernels/cuda/matmul.cuh"

namespace trt_spec::cuda {

// matmul_prefetch: the weights depend on no earlier op, so a block may ask L2 for them before it
// waits for its inputs (l2_prefetch.cuh): matmul_kernel before its grid dependency (with PDL,
// during the previous kernel's tail), the persistent forward (forward_program.cuh) for its NEXT
// instruction before it waits for its current one. Block (bx, by)'s weight rows (every row of
// its row pairs, the units of its split, and for q8 / q4 the group scales and offsets of those
// units): one range per (row, section) in the order the block reads them ((rep, pair row a then
// b)), at most `budget` bytes (kPrefetchBlockBytes: what L2 holds for every resident block at
// once), dealt over the block's threads.
__device__ __forceinline__ void matmul_prefetch(const MatmulArgs& a, const MatmulGeom& g,
                                                int64_t bx, int by, int budget) {
  const DevWeight& W = a.W;
  const int64_t row_block = g.tile_loop ? bx : bx / g.tiles;
  const int64_t u0 = by * g.split_units;
  const int64_t u1 = u0 + g.split_units < g.units ? u0 + g.split_units : g.units;
  // (weight_section_count, host only: the codes, then q8 / q4 scales, then q4 offsets)
  const int sections = W.type == WeightType::Q4 ? 3 : (W.type == WeightType::Q8 ? 2 : 1);
  // Group scales (and q4 offsets) per unit: f16 each; a row's units: 32 bytes each.
  const int64_t gpu = matmul_stage_groups(W.type);
  const int64_t row_bytes = g.units * 32, row_groups = W.cols / kQuantGroup;
  const int64_t slice = (u1 - u0) * (32 + 2 * gpu * (sections - 1));  // one row's bytes here
  constexpr int kRows = 2 * kMatmulWarps;                             // rows a, b of a group
  const int64_t rows_cap = slice > 0 ? budget / slice : 0;
  const int64_t want = static_cast<int64_t>(g.reps) * kRows;
  const int64_t rows_in = want < rows_cap ? want : rows_cap;
  for (int64_t it = threadIdx.x; it < rows_in * sections; it += blockDim.x) {
    const int sec = static_cast<int>(it % sections);
    const int64_t k = it / sections, rep = k / kRows, w = k % kMatmulWarps;
    const int64_t p = (row_block * g.reps + rep) * kMatmulWarps + w;
    if (p >= g.pairs) continue;
    int64_t r = matmul_pair_row(g, p);
    if (k % kRows >= kMatmulWarps) {  // row b of the pair
      r += g.half;
      if (r >= W.rows) continue;
    }
    if (sec == 0) {
      prefetch_l2_range(W.q, W.rows * row_bytes, r * row_bytes + u0 * 32, r * row_bytes + u1 * 32);
    } else {
      const int64_t g0 = r * row_groups + u0 * gpu, g1 = r * row_groups + u1 * gpu;
      prefetch_l2_range(sec == 1 ? W.d : W.m, W.rows * row_groups * 2, g0 * 2, g1 * 2);
    }
  }
}

// Shared memory of one matmul_block<T, kTile>.
template <WeightType T, int kTile>
struct MatmulSmem {
  MatmulStage<T, kTile> st;
  float rs[kTile];  // RMSNorm factors of the tile's rows
  float red[kMatmulWarps][kTile];
  int last;
};

// The vectorized path, one block of it: block (bx, by) of the grid (row blocks * tiles, splits)
// with W.cols % unit columns == 0, 16-byte aligned x (and norm_w); kMatmulThreads threads; partial
// [splits, n, rows] and counters [row blocks * tiles] (zero) when splits > 1. `wait` runs (every
// thread) after the first weight fetches and before anything an earlier op writes is read: the
// standalone kernel's grid dependency, or the persistent forward's counters (forward_program.cuh).
// prefetch > 0: before them, up to that many bytes of the block's weights toward L2
// (matmul_prefetch; the persistent forward prefetches an instruction ahead instead).
template <WeightType T, int kTile, class Wait>
__device__ __forceinline__ void matmul_block(const MatmulArgs& a, const MatmulGeom& g,
                                             float* partial, int* counters, int64_t bx, int by,
                                             MatmulSmem<T, kTile>& sm, int prefetch, Wait&& wait) {
  using S = MatmulStage<T, kTile>;
  constexpr int kUC = matmul_unit_cols(T);
  S& st = sm.st;
  float* rs = sm.rs;
  auto& red = sm.red;
  int& last = sm.last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // The block's row block and tiles: every tile (tile_loop: a verify pass's two 8-row tiles
  // through one block, the weights of the second from L2) or tile bx % tiles.
  const int64_t row_block = g.tile_loop ? bx : bx / g.tiles;
  const int tile0 = g.tile_loop ? 0 : static_cast<int>(bx % g.tiles);
  const int tile1 = g.tile_loop ? g.tiles : tile0 + 1;
  const int split = by;
  const int64_t rows = a.W.rows;
  const int64_t u0 = split * g.split_units;
  const int64_t u1 = u0 + g.split_units < g.units ? u0 + g.split_units : g.units;

  // The weights depend on no earlier kernel: each warp fetches its first unit of both rows
  // before anything else, so that the loads are in flight during the prologue (and, launched as
  // a programmatic dependent, during the previous kernel's tail: grid_dependency_wait).
  auto pair_rows = [&](int rep, int64_t& ra, int64_t& rb_load) {
    const int64_t p = (row_block * g.reps + rep) * kMatmulWarps + warp;
    ra = p < g.pairs ? matmul_pair_row(g, p) : 0;
    rb_load = ra + g.half < rows ? ra + g.half : ra;
    return p < g.pairs;  // uniform over the warp
  };
  // na / nb: the next unit of rows a and b; `have`: they hold this lane's first unit of the
  // (rep, piece) about to run. A lane fetches that unit while computing its last unit of the
  // previous (rep, piece), and rep 0's first here, before the prologue.
  auto piece_units = [&](int pc, int64_t& pu0) {  // piece pc: units [pu0, pu0 + result)
    pu0 = u0 + static_cast<int64_t>(pc) * S::kUnits;
    return static_cast<int>(u1 - pu0 < S::kUnits ? u1 - pu0 : S::kUnits);
  };
  MatmulRaw na{}, nb{};
  auto fetch_first = [&](int rep, int pc) {
    int64_t ra, rb_load, pu0;
    const int np = piece_units(pc, pu0);
    if (!pair_rows(rep, ra, rb_load) || lane >= np) return false;
    na = matmul_fetch<T>(a.W, ra, pu0 + lane);
    nb = matmul_fetch<T>(a.W, rb_load, pu0 + lane);
    return true;
  };
  // (The prefetch first: issued while little is live, it leaves the registers to the loop.)
  if (prefetch > 0) matmul_prefetch(a, g, bx, by, prefetch);
  bool have = fetch_first(0, 0);
  wait();  // x, the output and the scratch: after the op before

  for (int tile = tile0; tile < tile1; ++tile) {
    const int i0 = tile * kTile, nr = min(kTile, a.n - i0);
    if (tile > tile0) __syncthreads();  // the previous tile's readers of rs and st are done
    if (a.in == MatmulIn::kRmsNorm) {
      matmul_rms_factors<kTile>(a, i0, nr, red, rs);
    } else if (threadIdx.x < kTile) {
      rs[threadIdx.x] = 1.0f;
    }
    __syncthreads();
    const int pieces = static_cast<int>((u1 - u0 + S::kUnits - 1) / S::kUnits);
    if (pieces == 1) {  // staged once for all row groups of the block
      matmul_stage<T, kTile>(a, i0, nr, u0 * kUC, static_cast<int>(u1 - u0) * kUC, rs, st);
      __syncthreads();
    }

    for (int rep = 0; rep < g.reps; ++rep) {
      int64_t ra, rb_load;
      const bool active = pair_rows(rep, ra, rb_load);
      const int64_t rb = ra + g.half;
      float acc_a[kTile], acc_b[kTile];
#pragma unroll
      for (int i = 0; i < kTile; ++i) acc_a[i] = acc_b[i] = 0.0f;
      for (int pc = 0; pc < pieces; ++pc) {
        int64_t pu0;
        const int np = piece_units(pc, pu0);
        if (pieces > 1) {
          __syncthreads();
          matmul_stage<T, kTile>(a, i0, nr, pu0 * kUC, np * kUC, rs, st);
          __syncthreads();
        }
        if (!active) continue;
        if (!have) have = fetch_first(rep, pc);
        for (int it = 0; it * 32 < np; ++it) {
          const int uu = it * 32 + lane;
          if (uu >= np) continue;
          const MatmulRaw ca = na, cb = nb;
          if (uu + 32 < np) {  // one unit ahead
            na = matmul_fetch<T>(a.W, ra, pu0 + uu + 32);
            nb = matmul_fetch<T>(a.W, rb_load, pu0 + uu + 32);
          } else {  // this lane's last unit here: the next piece's first, the next rep's, or
                    // the next tile's (rep 0's again: the same weights)
            have = pc + 1 < pieces    ? fetch_first(rep, pc + 1)
                   : rep + 1 < g.reps ? fetch_first(rep + 1, 0)
                                      : tile + 1 < tile1 && fetch_first(0, 0);
          }
          const MatmulUnit<T> wa(ca), wb(cb);
          const int xs = it * S::kSlots * 32 + lane, gs = it * S::kGroups * 32 + lane;
#pragma unroll
          for (int i = 0; i < kTile; ++i) {
            if (i < nr) {
              acc_a[i] = matmul_dot<T, kTile>(wa, st, i * S::kRowSlots + xs, i * S::kRowGroups + gs,
                                              acc_a[i]);
              acc_b[i] = matmul_dot<T, kTile>(wb, st, i * S::kRowSlots + xs, i * S::kRowGroups + gs,
                                              acc_b[i]);
            }
          }
        }
      }
      if (!active) continue;
      float va = 0.0f, vb = 0.0f;  // lane i: the sums of tile row i
#pragma unroll
      for (int i = 0; i < kTile; ++i) {
        if (i < nr) {
          const float sa = warp_sum(acc_a[i]), sb = warp_sum(acc_b[i]);
          if (lane == i) va = sa, vb = sb;
        }
      }
      if (lane < nr)
        matmul_finish(a, g, partial, split, i0 + lane, ra, rb < rows ? rb : -1, va, vb);
    }
    if (g.splits == 1 || !matmul_split_last(counters, row_block * g.tiles + tile, g.splits, last))
      continue;
    // The last block of this (row block, tile) to arrive: the sums in split order.
    for (int rep = 0; rep < g.reps; ++rep) {
      const int64_t p = (row_block * g.reps + rep) * kMatmulWarps + warp;
      if (p >= g.pairs || lane >= nr) continue;
      const int64_t ra = matmul_pair_row(g, p), rb = ra + g.half;
      matmul_split_sum(a, g, partial, i0 + lane, ra, rb < rows ? rb : -1);
    }
  }
}

// The vectorized path as a kernel: grid (row blocks * tiles, splits), block kMatmulThreads. A
// one-row tile (decode) is held to 3 blocks per SM (80 registers; it spills some, see the ptxas
// figures in benchmarks/results/HISTORY.md), tiles of 2 to 8 rows (verify) to 2 blocks (128
// registers); 16-row tiles (prefill of float weights; q8 / q4 prefill runs matmul_imma.cuh) are
// left unbounded (bounded, they spill). prefetch: bytes of the block's weights toward L2 before
// its grid dependency (0: none; matmul_prefetch); next: the weights of the ops after it,
// each block a share (l2_prefetch.cuh).
template <WeightType T, int kTile>
__global__ void __launch_bounds__(kMatmulThreads, matmul_blocks_per_sm(kTile))
    matmul_kernel(MatmulArgs a, MatmulGeom g, float* __restrict__ partial, int* counters,
                  int prefetch, const __grid_constant__ WeightHint next) {
  __shared__ MatmulSmem<T, kTile> sm;
  prefetch_hint(next, blockIdx.x + static_cast<int64_t>(blockIdx.y) * gridDim.x,
                static_cast<int64_t>(gridDim.x) * gridDim.y);
  matmul_block<T, kTile>(a, g, partial, counters, blockIdx.x, static_cast<int>(blockIdx.y), sm,
                         prefetch, [] {
                           grid_dependency_launch();  // the next kernel may fetch its weights
                           grid_dependency_wait();    // as a programmatic dependent
                         });
}

// Any shape and alignment (float arithmetic on the dequantized weights, no split):
// grid (row groups, n), block kMatmulThreads; one warp per output row pair and activation row.
static __global__ void __launch_bounds__(kMatmulThreads)
    matmul_fallback_kernel(MatmulArgs a, MatmulGeom g) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gi = static_cast<int>(blockIdx.y);
  const int64_t src = matmul_src_row(a, gi), rows = a.W.rows;
  const float r = a.in == MatmulIn::kRmsNorm ? matmul_rms_factor(a, src) : 1.0f;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kMatmulWarps + warp;
  if (p >= g.pairs) return;
  const int64_t ra = matmul_pair_row(g, p), rb = ra + g.half;
  const int64_t rb_load = rb < rows ? rb : ra;
  float sa = 0.0f, sb = 0.0f;
  for (int64_t c = lane; c < a.W.cols; c += 32) {
    const float v = matmul_in1(a, src, c, r);
    sa = fmaf(weight_at(a.W, ra, c), v, sa);
    sb = fmaf(weight_at(a.W, rb_load, c), v, sb);
  }
  sa = warp_sum(sa);
  sb = warp_sum(sb);
  if (lane == 0) matmul_epilogue(a, gi, ra, rb < rows ? rb : -1, sa, sb);
}

}  // namespace trt_spec::cuda
