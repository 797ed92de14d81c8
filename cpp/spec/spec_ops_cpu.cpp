// spec_ops_cpu.cpp: SpecOps on the CPU backend (spec_ops.h): the shared speculative ops over host
// memory, with the backend's thread pool for the per-row work and the rules of accept.h.
#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "spec/accept.h"
#include "spec/mask_rows.h"
#include "spec/penalty_rows.h"
#include "spec/spec_ops.h"

namespace trt_spec {

namespace {

// The target's verdicts for one sequence (accept.h's Scores).
struct CpuScores {
  const float* P;       // [k + 1, vocab] dense p of the rows that have a dense child (sampling)
  const int32_t* best;  // [k + 1] t(row) of the rows the walk may test against it
  const float* qb;      // q [k, B, vocab_draft] + b * vocab_draft
  int B, vocab, vocab_draft;
  int target(int row) const { return best[row]; }
  float p(int row, int32_t t) const {
    return t < vocab ? P[static_cast<size_t>(row) * vocab + t] : 0.0f;
  }
  float q(int node, int32_t t) const {
    return t < vocab_draft ? qb[static_cast<size_t>(node) * B * vocab_draft + t] : 0.0f;
  }
};

class CpuSpecOps final : public SpecOps {
 public:
  CpuSpecOps(CpuBackend& be, int max_batch, int max_k, int vocab)
      : pool_(be.pool()),
        P_(static_cast<size_t>(max_batch) * (max_k + 1) * vocab),
        best_(static_cast<size_t>(max_batch) * (max_k + 1)),
        limits_{max_batch, max_k, vocab} {}

  void verify_rows(const SpecState& st, const int32_t* slots, int B, int k, DraftSource source,
                   const RowBuffers& out) override {
    for (int b = 0; b < B; ++b) {
      SeqState& s = st.seqs[slots[b]];
      int n = 0;
      if (k > 0 && (s.sources & draft_source_bit(source))) n = std::min({k, s.max_nodes, s.tree.n});
      s.tree.n = n;
      s.source = static_cast<int32_t>(n > 0 ? source : DraftSource::kNone);
      for (int r = 0; r <= k; ++r) {
        const int row = b * (k + 1) + r, node = r - 1;
        const bool real = node < n;
        out.tokens[row] = r == 0 || !real ? s.last : s.tree.token[node];
        out.pos[row] = s.n_past + (r == 0 || !real ? 0 : s.tree.depth[node]);
        out.slot[row] = slots[b];
        out.kv_idx[row] = s.n_past + r;
        out.tree_base[row] = s.n_past;
        out.tree_bits[row] =
            r == 0 ? 1 : (real ? tree_row_mask(s.tree, node) : (1 | uint64_t{1} << r));
      }
    }
  }

  void accept(const SpecState& st, const int32_t* slots, int B, int k, const float* logits,
              int vocab, const float* q, int vocab_draft, const KvMoves& moves) override {
    limits_.check_accept(B, k, vocab);
    const int R = k + 1;
    float* P = P_.data();
    int32_t* best = best_.data();
    // 1. Per verify row: t(row) (the argmax, or where the row has one-hot children the
    //    target's draw at its generation index), or where it has a dense child the dense p.
    pool_.parallel_for(static_cast<int64_t>(B) * R, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int b = static_cast<int>(r / R), row = static_cast<int>(r % R);
        const SeqState& s = st.seqs[slots[b]];
        const SamplingParams& p = st.states[slots[b]].params;
        const float* l = logits + r * vocab;
        if (sampling_is_greedy(p)) {
          best[r] = argmax_row(l, vocab);
          continue;
        }
        const int kind = tree_row_children(s.tree, row);
        if (kind == kRowDense)
          sampling_probs(l, vocab, vocab, p, P + r * vocab);
        else if (kind == kRowOneHot)
          best[r] = sample_row(l, vocab, p, static_cast<uint64_t>(spec_row_gen_index(s, row)), 0);
      }
    });
    // 2. Walk, emit, commit, append to the history, list the cache moves.
    pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
      thread_local std::vector<float> resid;
      for (int64_t b = b0; b < b1; ++b) {
        SeqState& s = st.seqs[slots[b]];
        const SamplingParams& p = st.states[slots[b]].params;
        const bool greedy = sampling_is_greedy(p);
        float* Pb = P + b * R * vocab;
        const CpuScores sc{Pb, best + b * R, q ? q + b * vocab_draft : nullptr,
                           B,  vocab,        vocab_draft};
        const WalkResult w = spec_walk(s.tree, s.tree.n, greedy, sc, p.seed, s.n_gen, s.path);
        for (int d = 0; d < w.accepted; ++d) s.out[d] = s.tree.token[s.path[d]];
        const int64_t m = s.n_gen + w.accepted;
        const float* stop_logits = logits + (b * R + w.stop_row) * static_cast<int64_t>(vocab);
        int32_t tok;
        if (w.dense_node < 0 && (greedy || tree_row_children(s.tree, w.stop_row) == kRowOneHot)) {
          tok = best[b * R + w.stop_row];  // t(stop_row), from step 1
        } else if (w.dense_node < 0) {     // a leaf: t(stop_row), the bonus, drawn only here
          tok = sample_row(stop_logits, vocab, p, static_cast<uint64_t>(m), 0);
        } else {  // the dense child was rejected: draw from the residual max(0, p - q)
          const float* pr = Pb + static_cast<size_t>(w.stop_row) * vocab;
          resid.resize(vocab);
          bool any = false;
          for (int x = 0; x < vocab; ++x) {
            resid[x] = accept_residual_weight(pr[x], sc.q(w.dense_node, x));
            any = any || resid[x] > 0.0f;
          }
          tok = sample_dense(any ? resid.data() : pr, vocab,
                             spec_uniform(p.seed, m, kStreamResidual));
        }
        s.out[w.accepted] = tok;
        const int32_t old_past = s.n_past;
        spec_commit(s, w.accepted);
        int32_t* h = st.history + static_cast<size_t>(slots[b]) * st.max_seq;
        for (int d = 0; d < s.n_new && old_past + 1 + d < st.max_seq; ++d)
          h[old_past + 1 + d] = s.out[d];
        for (int d = 0; d < kMaxDraftNodes; ++d) {
          const int e = static_cast<int>(b) * kMaxDraftNodes + d;
          moves.slot[e] = slots[b];
          moves.src[e] = d < w.accepted ? old_past + 1 + s.path[d] : -1;
          moves.dst[e] = old_past + 1 + d;
        }
      }
    });
  }

  void penalize(const SpecState& st, const PenaltyState& ps, const int32_t* slots, int B, int k,
                float* logits, int vocab) override {
    const int R = k + 1;
    pool_.parallel_for(static_cast<int64_t>(B) * R, 1, [&](int64_t r0, int64_t r1) {
      int32_t path[kMaxDraftNodes];
      for (int64_t r = r0; r < r1; ++r) {
        const int b = static_cast<int>(r / R), row = static_cast<int>(r % R), slot = slots[b];
        const PenaltyParams& p = ps.params[slot];
        const DraftTree& t = st.seqs[slot].tree;
        if (!p.active || row - 1 >= t.n) continue;  // (a padding row)
        const int n_path = penalty_path(t, row - 1, path);
        penalty_row(logits + r * vocab, vocab, ps.counts + static_cast<int64_t>(slot) * ps.vocab,
                    ps.prompt + static_cast<int64_t>(slot) * ps.words, path, n_path, p);
      }
    });
  }

  void penalize_rows(const PenaltyState& ps, const int32_t* row_slots, int n, float* logits,
                     int vocab) override {
    for (int r = 0; r < n; ++r) {
      const int slot = row_slots[r];
      if (!ps.params[slot].active) continue;
      penalty_row(logits + static_cast<int64_t>(r) * vocab, vocab,
                  ps.counts + static_cast<int64_t>(slot) * ps.vocab,
                  ps.prompt + static_cast<int64_t>(slot) * ps.words, nullptr, 0, ps.params[slot]);
    }
  }

  void penalize_draft(const SpecState& st, const PenaltyState& ps, const int32_t* slots, int B,
                      int j, float* logits, int stride, int vocab) override {
    pool_.parallel_for(B, 1, [&](int64_t b0, int64_t b1) {
      int32_t path[kMaxDraftNodes];
      for (int64_t b = b0; b < b1; ++b) {
        const int slot = slots[b];
        if (!ps.params[slot].active) continue;
        const int n_path = penalty_path(st.seqs[slot].tree, j - 1, path);
        penalty_row(logits + b * stride, vocab, ps.counts + static_cast<int64_t>(slot) * ps.vocab,
                    ps.prompt + static_cast<int64_t>(slot) * ps.words, path, n_path,
                    ps.params[slot]);
      }
    });
  }

  void mask_rows(float* logits, int n, int vocab, const uint32_t* masks, int words) override {
    pool_.parallel_for(n, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        mask_row(logits + r * vocab, vocab, masks + r * words, words);
    });
  }

  void count_emitted(const SpecState& st, const PenaltyState& ps, const int32_t* slots,
                     int B) override {
    for (int b = 0; b < B; ++b)
      if (ps.params[slots[b]].active)
        penalty_count_emitted(st.seqs[slots[b]],
                              ps.counts + static_cast<int64_t>(slots[b]) * ps.vocab, ps.vocab);
  }

  void emitted_rows(const SpecState& st, const int32_t* slots, int B, int k, int32_t* rows,
                    int32_t* tokens, int32_t* row_slots) override {
    for (int b = 0; b < B; ++b) {
      const SeqState& s = st.seqs[slots[b]];
      for (int d = 0; d <= k; ++d) {
        const int e = b * (k + 1) + d;
        const bool real = d < s.n_new;
        rows[e] = real ? b * (k + 1) + spec_emitted_row(s, d) : -1;
        tokens[e] = real ? s.out[d] : -1;
        row_slots[e] = slots[b];
      }
    }
  }

 private:
  ThreadPool& pool_;
  std::vector<float> P_;       // [max_batch, max_k + 1, vocab]
  std::vector<int32_t> best_;  // [max_batch, max_k + 1]
  SpecOpsLimits limits_;
};

}  // namespace

std::unique_ptr<SpecOps> make_cpu_spec_ops(CpuBackend& be, int max_batch, int max_k, int vocab) {
  return std::make_unique<CpuSpecOps>(be, max_batch, max_k, vocab);
}

}  // namespace trt_spec
