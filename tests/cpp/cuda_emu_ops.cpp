// cuda_emu_ops.cpp: the CUDA kernels (cpp/kernels/cuda/*.cuh, cpp/spec/spec_kernels.cuh)
// compiled as host code against cuda_emu.h, behind a C interface for
// tests/test_cuda_emulated.py (ctypes), on host memory. The transformer ops launch the same
// kernels, grids and blocks as CudaBackend does (cpp/backend/cuda/*.cu); the speculative ops call
// the CUDA SpecOps' own launch functions (cpp/spec/spec_launch.cuh).
//
// The shared library target cuda_emu_ops of CMakeLists.txt (TRT_SPEC_BUILD_TESTS=ON).
#include <cstddef>

#include "kernels/cuda/logprobs.cuh"
#include "kernels/cuda/norm_rope.cuh"
#include "kernels/cuda/random_fill.cuh"
#include "kernels/cuda/sampling.cuh"
#include "spec/draft_model_kernels.cuh"
#include "spec/eagle3_kernels.cuh"
#include "spec/lookup_kernels.cuh"
#include "spec/medusa_kernels.cuh"
#include "spec/pard_kernels.cuh"
#include "spec/penalty_kernels.cuh"
#include "spec/spec_launch.cuh"

using namespace trt_spec;
using namespace trt_spec::cuda;
using cuda_emu::launch;

namespace {

DevWeight host_weight(int type, const uint8_t* blob, int64_t rows, int64_t cols) {
  return dev_weight(WeightView{static_cast<WeightType>(type), rows, cols, blob});
}

}  // namespace

extern "C" {

// A random weight blob (kernels/random_fill.h) of weight_blob_bytes(type, rows, cols) at dst:
// device = 1 through the CUDA kernel (random_fill.cuh, emulated), 0 through the host loop the
// CPU backend runs.
void emu_random_fill(int device, int type, int64_t rows, int64_t cols, uint64_t key, float offset,
                     float scale, uint8_t* dst) {
  const RandomFill f{key, offset, scale};
  const auto t = static_cast<WeightType>(type);
  if (device) {
    launch_random_fill(nullptr, t, rows, cols, f, dst);
    return;
  }
  SectionFill sections[3];
  const int n = random_fill_sections(t, rows, cols, f, sections);
  for (int s = 0; s < n; ++s)
    random_fill_host(f, sections[s], static_cast<uint32_t>(s), 0, (sections[s].bytes + 15) / 16,
                     dst);
}

int emu_sampling_state_bytes() {
  return static_cast<int>(sizeof(DevSamplingState));
}
int emu_seq_state_bytes() {
  return static_cast<int>(sizeof(SeqState));
}

void emu_embed(int type, const uint8_t* blob, int64_t rows, int64_t cols, const int32_t* tokens,
               int n, float* out) {
  launch_embed(nullptr, host_weight(type, blob, rows, cols), tokens, n, out);
}

void emu_rmsnorm(const float* x, const float* g, float eps, int n, int dim, float* out) {
  launch_rmsnorm(nullptr, x, g, eps, n, dim, out);
}

void emu_rope(float* qkv, const int32_t* pos, int n, int nh, int nkv, int hd, const float* cos_t,
              const float* sin_t) {
  launch_rope(nullptr, qkv, pos, n, nh, nkv, hd, cos_t, sin_t);
}

void emu_expand_columns(const float* src, int src_cols, const int32_t* index, int n, int width,
                        float* out) {
  launch_expand_columns(nullptr, src, src_cols, index, n, width, out);
}

void emu_swiglu(const float* gate_up, int n, int ffn, float* out) {
  launch_swiglu(nullptr, gate_up, n, ffn, out);
}

// The multi-block rows' grid: sample_grid(vocab, sms, threads, min_chunk) (the backend: its SM
// count, kSampleThreads = 512 and kSampleChunkMin; fewer threads and smaller chunks keep the
// emulation fast and split small rows into several chunks). Returns the chunks per row.
int emu_sample_chunks(int vocab, int sms, int threads, int min_chunk) {
  return sample_grid(vocab, sms, threads, min_chunk).chunks;
}
long long emu_sample_scratch_bytes(int rows) {
  return static_cast<long long>(sample_scratch_bytes(rows));
}
// The layout of one row's scratch record (RowScratch): 0 its bytes, 1 the offset of the counter,
// 2 of the bin counts [kRuleBins] (uint32), 3 of the bin masses [kRuleBins] (uint64).
long long emu_sample_scratch_layout(int what) {
  switch (what) {
    case 0: return static_cast<long long>(sizeof(RowScratch));
    case 1: return static_cast<long long>(offsetof(RowScratch, count));
    case 2: return static_cast<long long>(offsetof(RowScratch, bin_cnt));
    case 3: return static_cast<long long>(offsetof(RowScratch, bin_mass));
    default: return -1;
  }
}

// Backend::sample through the backend's own launch function (sampling.cuh); scratch:
// emu_sample_scratch_bytes(n) bytes, counters zero.
void emu_sample(const float* logits, int n, int vocab, const int32_t* slot, void* states,
                int32_t* out, int threads, int sms, int min_chunk, void* scratch) {
  const SampleGrid g = sample_grid(vocab, sms, threads, min_chunk);
  launch_sample(nullptr, g, logits, n, vocab, slot, static_cast<DevSamplingState*>(states), out,
                sample_scratch(scratch));
}

// Backend::logprobs through its launch function (logprobs.cuh); out [n, kLogprobEntries] of
// (id, logprob); scratch: emu_sample_scratch_bytes(n) bytes, counters zero.
void emu_logprobs(const float* logits, int vocab, int n, const int32_t* rows, const int32_t* tokens,
                  const int32_t* slot, const void* states, void* out, int threads, int sms,
                  int min_chunk, void* scratch) {
  const SampleGrid g = sample_grid(vocab, sms, threads, min_chunk);
  launch_logprobs(nullptr, g, logits, vocab, n, rows, tokens, slot,
                  static_cast<const DevSamplingState*>(states), static_cast<TokenLogprob*>(out),
                  sample_scratch(scratch));
}

// The penalties (penalty_kernels.cuh) through their launch functions: k >= 0 verify rows
// [rows / (k + 1), k + 1] of slots[b], k < 0 plain rows of slots[r] (node >= 0: draft rows seeing
// that node's path; rows of stride floats).
long long emu_penalty_params_bytes() {
  return static_cast<long long>(sizeof(PenaltyParams));
}
void emu_spec_penalize(const void* seqs, void* params, int32_t* counts, uint32_t* prompt, int vocab,
                       const int32_t* slots, int rows, int k, float* logits, int node, int stride) {
  const PenaltyState ps{static_cast<PenaltyParams*>(params), counts, prompt, vocab,
                        (vocab + 31) / 32};
  launch_penalize(nullptr, static_cast<const SeqState*>(seqs), ps, slots, rows, k, logits, vocab,
                  node, stride);
}
void emu_spec_mask_rows(float* logits, int n, int vocab, const uint32_t* masks, int words) {
  launch_mask_rows(nullptr, logits, n, vocab, masks, words);
}
void emu_spec_count_emitted(const void* seqs, void* params, int32_t* counts, int vocab,
                            const int32_t* slots, int B) {
  const PenaltyState ps{static_cast<PenaltyParams*>(params), counts, nullptr, vocab,
                        (vocab + 31) / 32};
  launch_count_emitted(nullptr, static_cast<const SeqState*>(seqs), ps, slots, B);
}

// The speculative ops, through their CUDA launch functions (spec_launch.cuh, and the
// proposers' draft_model_kernels.cuh and lookup_kernels.cuh).
void emu_spec_draft_rows(const void* seqs, const int32_t* slots, int B, int j, int32_t* tokens,
                         int32_t* pos, int32_t* row_slots) {
  launch_draft_rows(nullptr, static_cast<const SeqState*>(seqs), slots, B, j, tokens, pos,
                    row_slots);
}

// scratch: emu_sample_scratch_bytes(B) bytes, counters zero.
void emu_spec_draft_sample(float* logits_q, int B, int vocab, int vocab_common, int j, void* seqs,
                           const int32_t* slots, const void* states, int threads, int sms,
                           int min_chunk, void* scratch, int32_t* next_tokens, int32_t* next_pos,
                           int32_t* next_slots) {
  const SampleGrid g = sample_grid(vocab, sms, threads, min_chunk);
  launch_draft_sample(nullptr, g, logits_q, B, vocab, vocab_common, j, static_cast<SeqState*>(seqs),
                      slots, static_cast<const DevSamplingState*>(states), sample_scratch(scratch),
                      NextRows{next_tokens, next_pos, next_slots});
}

void emu_spec_verify_rows(void* seqs, const int32_t* slots, int B, int k, int source,
                          int32_t* tokens, int32_t* pos, int32_t* row_slots, int32_t* kv_idx,
                          int32_t* tree_base, uint64_t* tree_bits) {
  launch_verify_rows(nullptr, static_cast<SeqState*>(seqs), slots, B, k, source, tokens, pos,
                     row_slots, kv_idx, tree_base, tree_bits);
}

// P: [B, k + 1, vocab] scratch, best: [B (k + 1)] scratch; history [slots, max_seq]; moves
// [B kMaxDraftNodes] each; scratch: emu_sample_scratch_bytes(B (k + 1)), counters zero.
void emu_spec_accept(const float* logits, const float* q, int B, int k, int vocab, int vocab_draft,
                     void* seqs, const int32_t* slots, const void* states, float* P, int32_t* best,
                     int32_t* history, int max_seq, int32_t* mv_slot, int32_t* mv_src,
                     int32_t* mv_dst, int threads, int sms, int min_chunk, void* scratch) {
  const SampleGrid g = sample_grid(vocab, sms, threads, min_chunk);
  launch_accept(nullptr, g, logits, q, B, k, vocab, vocab_draft, static_cast<SeqState*>(seqs),
                slots, static_cast<const DevSamplingState*>(states),
                AcceptScratch{P, best, sample_scratch(scratch)}, history, max_seq, mv_slot, mv_src,
                mv_dst);
}

void emu_spec_pard_rows(const void* seqs, const int32_t* slots, int B, int k, int32_t mask,
                        int32_t* tokens, int32_t* pos, int32_t* row_slots) {
  launch_pard_rows(nullptr, static_cast<const SeqState*>(seqs), slots, B, k, mask, tokens, pos,
                   row_slots);
}

// top: scratch of B MedusaTopK records (emu_medusa_topk_bytes(B)).
void emu_spec_medusa_tree(void* seqs, const int32_t* slots, int B, int k, const float* logits,
                          int heads, int vocab, void* top, int threads) {
  launch_medusa_tree(nullptr, static_cast<SeqState*>(seqs), slots, B, k, logits, heads, vocab,
                     static_cast<MedusaTopK*>(top), threads);
}

size_t emu_medusa_topk_bytes(int B) {
  return sizeof(MedusaTopK) * static_cast<size_t>(B);
}

void emu_spec_medusa_keep(const void* seqs, const int32_t* slots, int B, int k, const float* hidden,
                          int dim, float* kept) {
  launch_medusa_keep(nullptr, static_cast<const SeqState*>(seqs), slots, B, k, hidden, dim, kept);
}

// rows: tokens, pos, slot, src [B (k + 1)] each; last [B].
void emu_spec_eagle3_absorb(const void* seqs, const int32_t* slots, int B, int k, int max_seq,
                            int32_t* tok, int32_t* pos, int32_t* slot, int32_t* src,
                            int32_t* last) {
  launch_eagle3_absorb(nullptr, static_cast<const SeqState*>(seqs), slots, B, k, max_seq,
                       Eagle3Rows{tok, pos, slot, src}, last);
}

// next: tokens, pos, slot [B] each.
void emu_spec_eagle3_chain(void* seqs, const int32_t* slots, int B, int j, int max_seq,
                           const float* logits, int draft_vocab, const int32_t* tokens,
                           int32_t* tok, int32_t* pos, int32_t* slot, int threads) {
  launch_eagle3_chain(nullptr, static_cast<SeqState*>(seqs), slots, B, j, max_seq, logits,
                      draft_vocab, tokens, Eagle3Rows{tok, pos, slot}, threads);
}

// A tree step (eagle3_tree.h); trees: [B] Eagle3Tree scratch; next: tokens, pos, slot, kv_idx,
// tree_base [B w] each, tree_bits [B w], src [B w].
void emu_spec_eagle3_tree_step(const void* seqs, const int32_t* slots, int B, int j, int w,
                               int expand, int max_seq, const float* logits, int draft_vocab,
                               const int32_t* tokens, void* trees, int32_t* tok, int32_t* pos,
                               int32_t* slot, int32_t* kv_idx, int32_t* tree_base,
                               uint64_t* tree_bits, int32_t* src, int threads) {
  launch_eagle3_tree_step(nullptr, static_cast<const SeqState*>(seqs), slots, B, j, w, expand != 0,
                          max_seq, logits, draft_vocab, tokens, static_cast<Eagle3Tree*>(trees),
                          Eagle3TreeRows{{tok, pos, slot, kv_idx, tree_base, tree_bits}, src},
                          threads);
}

void emu_spec_eagle3_tree_select(void* seqs, const int32_t* slots, int B, int k,
                                 const void* trees) {
  launch_eagle3_tree_select(nullptr, static_cast<SeqState*>(seqs), slots, B, k,
                            static_cast<const Eagle3Tree*>(trees));
}

void emu_spec_eagle3_keep(const int32_t* slots, int B, const int32_t* rows, const float* x, int dim,
                          float* feat) {
  launch_eagle3_keep(nullptr, slots, B, rows, x, dim, feat);
}

void emu_spec_lookup(void* seqs, const int32_t* slots, int B, const int32_t* history,
                     const int32_t* prediction, int max_seq, int threads) {
  launch_lookup(nullptr, static_cast<SeqState*>(seqs), slots, B, history, prediction, max_seq,
                threads);
}

}  // extern "C"
