// matmul_plan.cuh: the plan of the fused matmul (matmul.cuh): plan_matmul, the single source of
// grids, tiles and split-K (its launch: matmul_launch.cuh; the persistent forward runs its blocks:
// forward_program.cuh). Host code only: including it instantiates no kernel.
//
// Plan (pure arithmetic on the shape, the pointers' alignment and the SM count):
//   pairs = ceil(rows / 2), row groups = ceil(pairs / 8) (16 output rows each);
//   tile = 1, 2, 4 or 8 activation rows for n <= 16 (the smallest that holds n, at most 8:
//   9 to 16 rows, a batch's verify pass, take two 8-row tiles), 16 for prefill chunks (n > 16);
//   tiles = ceil(n / tile);
//   splits: 1 when row groups >= 2 SMs; else floor(2 SMs / row groups) (the verify tiles'
//   resident blocks), at most units / 32 and 64, the split length rounded up to whole lane
//   rounds (32 units) - never a function of n;
//   decode and verify (n <= 16): one wave. A block runs every tile (tile_loop) and
//   reps = splits > 1 ? 1 : ceil(groups / (blocks per SM * SMs)) row groups (staging shared),
//   grid (ceil(groups / reps), splits) <= the resident blocks (matmul_blocks_per_sm);
//   prefill (n > 16): a block per tile, reps clamp(groups / (4 SMs), 1, 8), grid
//   (ceil(groups / reps) * tiles, splits);
//   q8 / q4 products of at least imma_rows rows (default: none) run matmul_imma_kernel (the same
//   bits on the tensor cores, matmul_imma.cuh), one row group and tile per block (reps 1);
//   block 256; static shared memory: the stage (<= 40 KiB) + 4 bytes per tile row for the
//   RMSNorm factors and 32 for the warps' sums.
// Scratch when splits > 1: partial f32 [splits, n, rows], counters int32 [row blocks * tiles]
// (zero before the first launch; every launch leaves them zero).
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_imma.cuh"

namespace trt_spec::cuda {

struct MatmulPlan {
  dim3 grid, block;
  int splits = 1, tile_rows = 1;
  bool vectorized = true;  // false: matmul_fallback_kernel
  bool imma = false;       // matmul_imma_kernel (q8 / q4, prefill tiles): matmul_imma.cuh
  size_t smem_bytes = 0, partial_bytes = 0, counter_bytes = 0;
  MatmulGeom geom{};
};

// Activation rows per tile for n rows: 1, 2, 4 or 8 up to 16 rows, 16 beyond (more rows:
// several tiles). 9 to 16 rows (K = 8 at batch 1, K = 4 at batch 2 or 3) take two 8-row tiles:
// the 16-row tile holds one block of 168 registers per SM and, for inputs of more than 32 q4
// units (2,048 columns), stages its activations again for every row group.
inline int matmul_tile_rows(int n) {
  return n <= 1 ? 1 : (n <= 2 ? 2 : (n <= 4 ? 4 : (n <= kMatmulMaxTile ? 8 : kMatmulMaxTile)));
}

// Static shared memory of matmul_kernel<t, tile>.
inline size_t matmul_smem_bytes(WeightType t, int tile) {
  const size_t units = static_cast<size_t>(matmul_stage_units(t, tile));
  const size_t groups = units * matmul_stage_groups(t) * tile;
  return units * matmul_stage_slots(t) * 16 * tile + (groups ? groups : 1) * 4 +
         (t == WeightType::Q4 ? groups * 4 : 4) + tile * 4 + kMatmulWarps * tile * 4 + 4;
}

inline bool matmul_aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Whether matmul_kernel takes this product (else matmul_fallback_kernel).
inline bool matmul_vectorized(const MatmulArgs& a) {
  return a.W.cols % matmul_unit_cols(a.W.type) == 0 && matmul_aligned16(a.x) &&
         matmul_aligned16(a.W.q) && (a.in != MatmulIn::kRmsNorm || matmul_aligned16(a.norm_w));
}

// imma_rows: the fewest activation rows a q8 / q4 product takes to run matmul_imma_kernel (one
// 16-row tile per block); fewer rows run matmul_kernel's dp4a tiles (more than 16: 16-row tiles).
// The default is never (the dp4a tiles were faster at every row count measured:
// benchmarks/results/HISTORY.md). The CUDA backend's switch (set_imma_rows) times both in one
// process.
// imma_rows <= 0 means the default.
constexpr int kImmaRowsDefault = 0x7fffffff;

// The matmul tile of every op of a persistent forward of n rows (1 <= n <= 16;
// forward_program.cuh): its kernel's instance.
inline int fwd_tile(int n) {
  return n <= 1 ? 1 : 8;
}

// Whether the persistent forward runs this product: matmul_kernel's decode / verify path for f16,
// bf16, q8 or q4 weights (an f32 matmul, the fallback or the tensor-core kernel: per operation).
inline bool fwd_holds_matmul(WeightType t, const MatmulPlan& p) {
  return t != WeightType::F32 && p.vectorized && !p.imma && p.tile_rows < kMatmulMaxTile;
}

// tile > 0 (decode and verify, n <= 16, not imma): the tile rows to plan with, at least those n
// asks for (the persistent forward plans every op of a pass with the pass's tile: the head's
// fewer rows too). A row's bits do not depend on the tile.
// one_wave false: the earlier rules, kept behind the CUDA backend's switch (set_one_wave) so
// that a GPU run times both in one process: splits ceil(2 SMs / groups), a block per tile, reps
// at most 8 (decode and verify grids of more blocks than the resident slots).
inline MatmulPlan plan_matmul(const MatmulArgs& a, int sm_count, int imma_rows = kImmaRowsDefault,
                              bool one_wave = true, int tile = 0) {
  auto fail = [](const char* what) { throw std::invalid_argument(std::string("matmul: ") + what); };
  if (sm_count < 1) fail("sm_count < 1");
  if (a.n < 1 || a.W.rows < 1 || a.W.cols < 1) fail("empty product");
  if (!a.x || !a.out || !a.W.q) fail("null x, out or weight");
  if (matmul_quantized(a.W.type) && a.W.cols % kQ4SuperBlock != 0) fail("q8/q4 need cols % 64");
  if (a.in == MatmulIn::kRmsNorm && !a.norm_w) fail("rmsnorm without weights");
  if (a.epi == MatmulOut::kAccumulate && a.bias) fail("accumulate takes no bias");
  if (a.epi == MatmulOut::kRopeKv) {
    if (a.head_dim < 2 || a.head_dim % 2 != 0 || a.n_heads < 1 || a.n_kv_heads < 1 ||
        a.W.rows != static_cast<int64_t>(a.n_heads + 2 * a.n_kv_heads) * a.head_dim)
      fail("rope-kv: rows != (n_heads + 2 n_kv_heads) head_dim");
    if (!a.pos || !a.slot || !a.cos_t || !a.sin_t || !a.kv.k || !a.kv.v) fail("rope-kv: null");
    if (a.kv.kv_heads != a.n_kv_heads || a.kv.head_dim != a.head_dim) fail("rope-kv: cache shape");
  }
  MatmulPlan p;
  MatmulGeom& g = p.geom;
  g.half = a.epi == MatmulOut::kRopeKv ? a.head_dim / 2 : 1;
  g.pairs = (a.W.rows + 1) / 2;
  const int64_t groups = (g.pairs + kMatmulWarps - 1) / kMatmulWarps;
  p.block = dim3(kMatmulThreads);
  p.vectorized = matmul_vectorized(a);
  if (!p.vectorized) {
    if (a.n > 65535 || groups > 0x7fffffff) fail("too many rows");
    g.reps = g.splits = g.tiles = 1;
    g.units = g.split_units = a.W.cols;
    p.grid = dim3(static_cast<unsigned>(groups), static_cast<unsigned>(a.n));
    return p;
  }
  g.units = a.W.cols / matmul_unit_cols(a.W.type);
  // Split-K where the row groups leave SMs idle: as many splits as fit the resident slots of
  // the verify tiles (2 blocks per SM), so that a decode or verify grid is one wave.
  const int64_t target = static_cast<int64_t>(matmul_blocks_per_sm(kMatmulMaxTile / 2)) * sm_count;
  int64_t splits = 1;
  if (groups < target) {
    splits = one_wave ? target / groups : (target + groups - 1) / groups;
    const int64_t most = g.units / kMatmulMinSplitUnits;
    splits = splits < most ? splits : most;
    splits = splits < 64 ? (splits > 1 ? splits : 1) : 64;
  }
  int64_t su = (g.units + splits - 1) / splits;
  su = (su + 31) / 32 * 32;
  g.split_units = su;
  g.splits = static_cast<int>((g.units + su - 1) / su);
  p.imma = matmul_quantized(a.W.type) && a.n >= (imma_rows > 0 ? imma_rows : kImmaRowsDefault);
  p.tile_rows = p.imma ? kMatmulMaxTile : matmul_tile_rows(a.n);
  if (tile > 0) {
    if (p.imma || p.tile_rows >= kMatmulMaxTile || tile < p.tile_rows || tile >= kMatmulMaxTile ||
        tile != matmul_tile_rows(tile))
      fail("tile does not hold the rows");
    p.tile_rows = tile;
  }
  g.tiles = (a.n + p.tile_rows - 1) / p.tile_rows;
  // Decode and verify (n <= 16): one wave. A block runs every tile of the pass (9-16 rows: two
  // 8-row tiles) and its reps back to back, each rep's (and tile's) first weights fetched during
  // the last unit of the one before, so one wave of blocks with ceil(groups / resident) reps
  // pays one prologue (a block per row group and tile left a second, partial wave: 1.5B gate /
  // up on an H200, 1,120 groups for 396 resident blocks). Prefill: a block per row group and
  // tile, blocks enough.
  const bool verify = p.tile_rows < kMatmulMaxTile;
  g.tile_loop = verify && one_wave ? 1 : 0;
  const int64_t resident = static_cast<int64_t>(matmul_blocks_per_sm(p.tile_rows)) * sm_count;
  const int64_t tiles_x = g.tile_loop ? 1 : g.tiles;  // tiles across blocks
  int64_t reps = verify ? (groups * tiles_x + resident - 1) / resident
                        : groups / (4 * static_cast<int64_t>(sm_count));
  if (!verify || !one_wave) reps = reps > 8 ? 8 : reps;
  if (p.imma) reps = 1;  // matmul_imma_kernel: one row group per block
  g.reps = g.splits > 1 ? 1 : static_cast<int>(reps < 1 ? 1 : reps);
  const int64_t blocks_x = (groups + g.reps - 1) / g.reps * (g.tile_loop ? 1 : g.tiles);
  if (blocks_x > 0x7fffffff) fail("too many rows");
  p.grid = dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(g.splits));
  p.splits = g.splits;
  p.smem_bytes =
      p.imma ? matmul_imma_smem_bytes(a.W.type) : matmul_smem_bytes(a.W.type, p.tile_rows);
  if (p.smem_bytes > kMatmulSmemLimit) fail("shared memory over 48 KiB");
  if (g.splits > 1) {
    p.partial_bytes = static_cast<size_t>(g.splits) * a.n * a.W.rows * sizeof(float);
    p.counter_bytes = static_cast<size_t>((groups + g.reps - 1) / g.reps * g.tiles) * sizeof(int);
  }
  return p;
}

}  // namespace trt_spec::cuda
