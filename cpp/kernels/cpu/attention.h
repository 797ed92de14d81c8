// attention.h: the CPU attention kernel (tiled, online softmax, optional tree mask).
//
// Raw pointers only, no runtime types, so any backend can call it. For n query rows: row i has
// its rotated queries (n_heads x head_dim floats), its KV slice (the K and V of one sequence
// slot and layer of a cache [slots, layers, kv_heads, max_seq, head_dim] of f32, f16 or bf16
// elements (kernels/kv_format.h): kv head g at g * kv_head_stride elements from the slice base,
// entry t at t * head_dim from there; tiles are converted to f32 as they are loaded) and its
// entry set: the entries t in [0, len_i), except that with a tree mask an entry t >= tree_base_i
// counts only if bit (t - tree_base_i) of tree_bits_i is set (bits past 63: not counted). Query
// head h reads kv head h / (n_heads / n_kv_heads) (GQA). Output per row and head:
// softmax(scale * q . k_t over the entry set) . v_t. The entry set is never empty (callers
// always include the row's own entry).
//
// Work: the rows are cut into blocks of consecutive rows (tasks = blocks x kv heads; the blocks
// as large as AttentionArgs::workers allows, up to 768 queries: attention_impl.h). A task
// walks key tiles of kAttentionTile entries aligned to absolute positions (tile j covers entries
// [j * tile, (j + 1) * tile) of the slice, clipped at max_seq) in ascending order; the rows of the
// block that share a slice, and all the query heads of the kv group, use each K / V tile it loads
// (K is transposed once per tile), so K and V are read once per block, not once per query row.
//
// Exactness: a row walks its entries in LOGICAL order: entry t < tree_base_i is cache entry t,
// entry tree_base_i + j the j-th set bit of tree_bits_i (a tree node's ancestors in depth order,
// then itself: where the accepted path's entries stand once moved to their positions). A row
// processes exactly the tiles that intersect its logical [0, n_i), each with the same operations
// (full-width tile, entries past n_i get probability 0), whatever n, the other rows, the branch
// layout of a tree or the split of tasks over threads; tiles whose logical entries are not the
// cache entries in place are gathered for that row. So a row's output bits depend only on its
// queries and the values of its entries: decode, verify (chain or tree) and prefill rows give
// identical bits for identical inputs (greedy speculation stays exact). Cache entries inside a
// row's tiles that it does not attend must be finite (they are multiplied by 0).
//
// Prompt rows in low precision (AttentionArgs::prompt_from, prompt_math): rows i >= prompt_from
// take the same walk with cheaper products, about twice the multiply rate of f32 FMAs:
//   bf16   q, k, the probabilities and v rounded to bf16, pairs of products added to f32 lanes
//          by vdpbf16ps (attention_bf16.h); only the AVX-512 build on a CPU with AVX512_BF16;
//   int16  q and k scaled per row to 13-bit integers, v per entry and the probabilities per tile
//          to 14-bit ones, pairs of products added to int32 lanes by pmaddwd, exactly
//          (attention_int16.h); any build (AVX2 is the floor).
// Their bits differ from an f32 row's but obey the same rule (a row's own queries and entries
// decide them), so a prompt row reads the same whichever pass, chunk or batch carries it.
// Callers mark prompt rows only, never a row whose bits must equal a decode row's (model.h,
// backend.h Rows).
//
// Limits: head_dim % 8 == 0 and <= 256 (prompt rows: % 16); n_heads % n_kv_heads == 0. Needs AVX2 +
// FMA (the CPU backend checks them); where the CPU has AVX-512 (the matmul table's choice,
// matmul.h) its 512-bit build runs, with the same bits (attention_impl.h).
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/kv_format.h"

namespace trt_spec::cpu {

constexpr int kAttentionTile = 32;  // key entries per tile

// The products of prompt rows (see above), and their names (TRT_SPEC_CPU_PROMPT_ATTENTION, the
// CPU backend's name, the test bindings).
enum class PromptMath : uint8_t { Bf16 = 0, Int16 = 1 };
inline const char* prompt_math_name(PromptMath m) {
  return m == PromptMath::Bf16 ? "bf16" : "int16";
}

struct AttentionArgs {
  int n_rows = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;  // usually 1 / sqrt(head_dim)
  // Row i, head h: q + i * q_stride + h * head_dim (already rotated).
  const float* q = nullptr;
  int64_t q_stride = 0;
  // Row i: its K and V slice bases (kv head 0, entry 0), elements of kv_type. Rows with equal
  // pointers share tiles.
  KvType kv_type = KvType::F32;
  const void* const* k = nullptr;
  const void* const* v = nullptr;
  int64_t kv_head_stride = 0;          // elements between kv heads of a slice (max_seq * head_dim)
  int max_seq = 0;                     // entries per kv head (tiles never read past it)
  const int32_t* len = nullptr;        // row i attends entries [0, len[i]) ...
  const int32_t* tree_base = nullptr;  // ... with this mask (both nullptr: none)
  const uint64_t* tree_bits = nullptr;
  // Rows i >= prompt_from attend with prompt_math's products (see the top of this file; INT_MAX:
  // none).
  int prompt_from = INT_MAX;
  PromptMath prompt_math = PromptMath::Bf16;
  // Threads the caller spreads the tasks over (0: unknown). Blocks grow while every worker still
  // gets two tasks, where the rows read on average at least n_rows entries, so a prompt chunk's
  // K / V tiles are read by fewer tasks; bits never change.
  int workers = 0;
  // Row i, head h: out + i * out_stride + h * head_dim.
  float* out = nullptr;
  int64_t out_stride = 0;
};

// Number of independent tasks of a call (0 when n_rows == 0). Throws std::invalid_argument on
// unsupported shapes.
int64_t attention_tasks(const AttentionArgs& a);
// Runs tasks [task0, task1): any split of [0, attention_tasks(a)) over threads, in any order,
// gives the same bits.
void attention_run(const AttentionArgs& a, int64_t task0, int64_t task1);
// attention_run of one ISA's build ("avx2", "avx512"); nullptr where this CPU cannot run it or
// the name is unknown. attention_run uses the one of matmul_kernels().isa.
using AttentionRunFn = void (*)(const AttentionArgs& a, int64_t task0, int64_t task1);
AttentionRunFn attention_run_for(const char* isa);
// Whether that build (isa nullptr: attention_run's) runs bf16 rows on this CPU: the AVX-512 one
// where the CPU has AVX512_BF16. (Every build runs int16 rows.)
bool attention_bf16_supported(const char* isa = nullptr);

}  // namespace trt_spec::cpu
