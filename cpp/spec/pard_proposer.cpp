// pard_proposer.cpp: the parallel draft's forward and bookkeeping (pard_proposer.h).
#include "spec/pard_proposer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/errors.h"

namespace trt_spec {

PardProposer::PardProposer(Backend& be, Model& draft, int max_batch, int max_k, int vocab_target,
                           ProposerOptions opts, int32_t mask_token)
    : DraftModelProposer(be, draft, max_batch, max_k, vocab_target, opts),
      pard_(make_pard_ops(be)),
      mask_(mask_token),
      max_batch_(max_batch),
      max_k_(max_k) {
  if (mask_token < 0 || mask_token >= draft.config().vocab_size)
    throw EngineFileError("PARD draft: mask token " + std::to_string(mask_token) +
                          " outside its vocabulary of " +
                          std::to_string(draft.config().vocab_size));
  if (draft.limits().max_rows < max_batch * (max_k + 1))
    throw InvalidArgument("PARD draft: its row budget holds fewer than max_batch (k + 1) rows");
  std::vector<int32_t> table(table_offset(max_batch + 1, 0));
  for (int B = 1; B <= max_batch; ++B)
    for (int k = 1; k <= max_k; ++k)
      for (int j = 0; j < k; ++j)
        for (int b = 0; b < B; ++b) table[table_offset(B, k) + j * B + b] = b * (k + 1) + 1 + j;
  logit_rows_ = BackendBuffer(be, std::max<size_t>(table.size(), 1) * 4);
  be.upload(logit_rows_.as<void>(), table.data(), table.size() * 4);
}

size_t PardProposer::table_offset(int B, int k) const {
  // Tables of (B', k') before (B, k): B' < B with every k' in [1, max_k], then B with k' < k.
  size_t off = 0;
  for (int b = 1; b < B; ++b) off += static_cast<size_t>(b) * max_k_ * (max_k_ + 1) / 2;
  return off + static_cast<size_t>(B) * (k > 0 ? k * (k - 1) / 2 : 0);
}

void PardProposer::issue_propose(IterationContext& ctx, int k) {
  const int B = ctx.B;
  pard_->rows(ctx.st, ctx.slots, B, k, mask_, ctx.rows);  // [B, k + 1]
  const int32_t* lrows = logit_rows_.as<int32_t>() + table_offset(B, k);
  draft_.forward(ctx.rows.rows(false), B * (k + 1), lrows, B * k, ctx.q);  // [k, B, vocab_d]
  for (int j = 0; j < k; ++j) {
    float* qj = ctx.q + static_cast<size_t>(j) * B * ctx.vocab_draft;  // [B, vocab_draft]
    if (ctx.penalize_draft) ctx.penalize_draft(qj, j, ctx.vocab_draft, vocab_common_);
    if (ctx.mask_draft) ctx.mask_draft(qj, j, ctx.vocab_draft, vocab_common_, nullptr);
    ops_->draft_sample(ctx.st, ctx.slots, B, j, qj, ctx.vocab_draft, vocab_common_);
  }
}

int PardProposer::valid_after(const SeqState& seq) const {
  return std::min(seq.n_past - seq.n_new + 1, seq.n_past - 1);
}

std::unique_ptr<Proposer> make_pard_proposer(const ProposerEnv& env) {
  if (!env.draft || env.max_k == 0) return nullptr;
  const Json draft = env.file.meta().at("models").at("draft");
  if (!draft.has("pard")) return nullptr;
  const int64_t mask = draft.at("pard").at("token").as_int();
  return std::make_unique<PardProposer>(env.be, *env.draft, env.max_batch, env.max_k,
                                        env.target.config().vocab_size, env.opts,
                                        static_cast<int32_t>(mask));
}

}  // namespace trt_spec
