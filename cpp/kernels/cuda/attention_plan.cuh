// attention_plan.cuh: the plan of the attention kernel (attention.cuh): plan_attention, the single
// source of its tiles, splits and grid (its launch: attention_launch.cuh; the persistent forward
// runs its blocks: forward_program.cuh). Host code only: including it instantiates no kernel.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "kernels/cuda/attention.cuh"

namespace trt_spec::cuda {

// The launch of one attention call: the kernel instance, tiling, splits and scratch.
struct AttentionPlan {
  int hd_class = 0;          // the kernel instance: head_dim <= 64, 128 or 256
  int tile_rows = 1;         // rows of one slot per block, at most
  int head_chunk = 1;        // query heads of a kv group per block
  int head_chunks = 1;       // blocks per kv group (group > the block's pairs)
  int chunk = 0;             // logical entries per granule (granule u goes to split u % splits)
  int splits = 1;            // split blocks per tile
  int gy_total = 1;          // work items per row: kv_heads head_chunks splits
  int warps = kAttnWarps;    // the kernel instance's block: 4 or 8 warps
  dim3 grid, block;          // grid: min(n gy_total, resident blocks) (one wave); 32 warps
  size_t smem_bytes = 0;     // static shared memory per block
  size_t partial_bytes = 0;  // scratch: [n, n_heads, splits, hd + 2] f32 (splits > 1)
  size_t counter_bytes = 0;  // scratch: [n, kv_heads head_chunks] u32, zeroed at allocation
};

template <int HD>
inline void plan_tiles(AttentionPlan& p, int group) {
  using S = AttnTile<HD>;
  p.hd_class = HD;
  p.head_chunk = std::min(group, S::queries);
  p.head_chunks = (group + p.head_chunk - 1) / p.head_chunk;
  p.tile_rows = std::max(1, S::queries / p.head_chunk);
  p.smem_bytes = S::smem;
}

// The split rule depends on max_seq and the SM count alone (never on n or on the rows):
// granules of kAttnMinChunk (32) entries dealt round min(64, sm_count / 2, granules of max_seq)
// splits. A decode row is latency-bound: its splits are the blocks that read its entries at
// once (in one block, a short row's entries would be one chain of loads). Contiguous chunks
// of max_seq / splits entries, as before, gave a short row fewer
// blocks the longer the cache (at max_seq 4,096 two blocks of two tiles each for 128 entries,
// at 32,768 one block of four); dealt granules give it ceil(len / 32) blocks up to the split
// count, each a row's result the same whatever max_seq. A long row's split reads one granule
// every splits. The cost: scratch of n_heads * splits * (hd + 2) floats per row, and a merge of
// up to 64 partials. Throws std::invalid_argument
// for shapes the kernel does not take (head_dim a multiple of 8 up to 256, n_heads a multiple
// of n_kv_heads) or shared memory over 48 KiB.
// one_wave false: a block per work item (the earlier grid, kept behind the CUDA backend's
// switch so that a GPU run times both in one process). warps: the block's, 4 or 8 (the backend's
// switch; the same bits either way: a pair's result does not depend on the warp serving it).
inline AttentionPlan plan_attention(int n, int n_heads, int n_kv_heads, int head_dim, int max_seq,
                                    int sm_count, bool one_wave = true, int warps = kAttnWarps) {
  if (warps != 4 && warps != 8) throw std::invalid_argument("CUDA attention: 4 or 8 warps");
  if (head_dim <= 0 || head_dim % 8 != 0 || head_dim > 256)
    throw std::invalid_argument("CUDA attention: head_dim must be a multiple of 8, at most 256");
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || max_seq <= 0)
    throw std::invalid_argument("CUDA attention: n_heads must be a multiple of n_kv_heads");
  AttentionPlan p;
  p.warps = warps;
  const int group = n_heads / n_kv_heads;
  if (head_dim <= 64)
    plan_tiles<64>(p, group);
  else if (head_dim <= 128)
    plan_tiles<128>(p, group);
  else
    plan_tiles<256>(p, group);
  if (p.smem_bytes > kAttnMaxSmem)
    throw std::invalid_argument("CUDA attention: shared memory over 48 KiB");
  p.chunk = kAttnMinChunk;
  const int granules = (max_seq + p.chunk - 1) / p.chunk;
  p.splits = std::max(1, std::min({kAttnMaxSplits, sm_count / 2, granules}));
  const int gy = n_kv_heads * p.head_chunks;
  const size_t rows = static_cast<size_t>(std::max(n, 1));
  p.gy_total = gy * p.splits;
  const size_t items = rows * static_cast<size_t>(p.gy_total);
  const size_t resident = static_cast<size_t>(attn_blocks_per_sm(warps)) * std::max(sm_count, 1);
  p.grid = dim3(static_cast<unsigned>(one_wave ? std::min(items, resident) : items));
  p.block = dim3(32 * warps);
  if (p.splits > 1) {
    p.partial_bytes = sizeof(float) * rows * n_heads * p.splits * (head_dim + 2);
    p.counter_bytes = sizeof(unsigned) * rows * gy;
  }
  return p;
}

// The arguments of attention_block for plan p (plan_attention of the same n) and its scratch.
inline AttnArgs attention_args(const AttentionPlan& p, const float* qkv, RowsView rows, int n,
                               int n_heads, float scale, KvView kv, int layer, float* out,
                               float* partial, unsigned* counters) {
  return AttnArgs{qkv,          rows,    n,        n_heads,    scale, kv,      layer,   p.tile_rows,
                  p.head_chunk, p.chunk, p.splits, p.gy_total, out,   partial, counters};
}

}  // namespace trt_spec::cuda
