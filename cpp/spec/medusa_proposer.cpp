// medusa_proposer.cpp: Medusa's heads, hooks and offers (medusa_proposer.h).
#include "spec/medusa_proposer.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "spec/draft_heads.h"

namespace trt_spec {

MedusaProposer::MedusaProposer(Backend& be, const EngineFile& file, const Model& target,
                               int max_batch, int max_k)
    : HeadProposer(max_batch, max_k), be_(be), max_batch_(max_batch) {
  const Json cfg = file.meta().at("draft_heads").at("config");
  heads_ = static_cast<int>(cfg.at("n_heads").as_int());
  layers_ = static_cast<int>(cfg.at("n_layers").as_int());
  dim_ = static_cast<int>(cfg.at("dim").as_int());
  vocab_ = static_cast<int>(cfg.at("vocab_size").as_int());
  if (heads_ < 1 || heads_ > kMedusaMaxHeads || layers_ < 0 || layers_ > 8)
    throw EngineFileError("Medusa heads: n_heads must be in [1, " +
                          std::to_string(kMedusaMaxHeads) + "] and n_layers in [0, 8]");
  if (dim_ != target.config().dim || vocab_ != target.config().vocab_size)
    throw EngineFileError("Medusa heads of hidden size " + std::to_string(dim_) +
                          " and vocabulary " + std::to_string(vocab_) + " do not fit the target (" +
                          std::to_string(target.config().dim) + ", " +
                          std::to_string(target.config().vocab_size) + ")");
  head_.resize(heads_);
  for (int h = 0; h < heads_; ++h) {
    const std::string p = "medusa." + std::to_string(h) + ".";
    for (int l = 0; l < layers_; ++l) {
      const std::string r = p + "res." + std::to_string(l) + ".";
      head_[h].res_w.push_back(import_head_tensor(be, file, r + "weight", 2 * dim_, dim_, true));
      head_[h].res_b.push_back(import_head_tensor(be, file, r + "bias", 1, 2 * dim_, false));
    }
    head_[h].out = import_head_tensor(be, file, p + "head.weight", vocab_, dim_, true);
  }
  ops_ = make_medusa_ops(be, max_batch);
  ready_.assign(max_batch, 0);
  const size_t B = max_batch, D = dim_;
  kept_ = BackendBuffer(be, B * D * 4);
  x_ = BackendBuffer(be, B * D * 4);
  gate_ = BackendBuffer(be, 2 * B * D * 4);
  act_ = BackendBuffer(be, B * D * 4);
  logits_ = BackendBuffer(be, static_cast<size_t>(heads_) * B * vocab_ * 4);
}

void MedusaProposer::begin(int slot, const Admission& a) {
  HeadProposer::begin(slot, a);
  ready_[slot] = 0;
}

void MedusaProposer::run_heads(const float* from, const int32_t* rows, int B, float* logits) {
  const int D = dim_;
  float *x = x_.as<float>(), *gate = gate_.as<float>(), *act = act_.as<float>();
  for (int h = 0; h < heads_; ++h) {
    be_.gather_rows(from, rows, B, D, x);  // [B, D]
    for (int l = 0; l < layers_; ++l) {
      be_.linear(head_[h].res_w[l], head_[h].res_b[l], x, B, gate);  // [B, 2 D]: Wx + b, 1
      be_.swiglu(gate, B, D, act);                                   // [B, D]: silu(Wx + b)
      be_.add(x, act, static_cast<size_t>(B) * D);
    }
    be_.linear(head_[h].out, WeightView{}, x, B,
               logits + static_cast<size_t>(h) * B * vocab_);  // [B, V]
  }
}

void MedusaProposer::issue_propose(IterationContext& ctx, int k) {
  float* logits = logits_.as<float>();  // [heads, B, V]
  run_heads(kept_.as<float>(), ctx.slots, ctx.B, logits);
  ops_->tree(ctx.st, ctx.slots, ctx.B, k, logits, heads_, vocab_);
}

void MedusaProposer::issue_after_accept(IterationContext& ctx) {
  if (ctx.hidden) ops_->keep(ctx.st, ctx.slots, ctx.B, ctx.k, ctx.hidden, dim_, kept_.as<float>());
}

void MedusaProposer::commit(int slot, const SeqState& seq, bool used) {
  ready_[slot] = 1;  // (the iteration's verify pass kept its hidden state)
  HeadProposer::commit(slot, seq, used);
}

std::vector<float> MedusaProposer::head_logits(const std::vector<float>& hidden, int n) {
  if (n < 1 || n > max_batch_ || static_cast<int>(hidden.size()) != n * dim_)
    throw InvalidArgument("head_logits: hidden must be [n, dim] with 1 <= n <= max_batch");
  std::vector<int32_t> rows(n);
  for (int i = 0; i < n; ++i) rows[i] = i;
  BackendBuffer h(be_, hidden.size() * 4), r(be_, n * 4);
  be_.upload(h.as<void>(), hidden.data(), hidden.size() * 4);
  be_.upload(r.as<void>(), rows.data(), n * 4);
  run_heads(h.as<float>(), r.as<int32_t>(), n, logits_.as<float>());
  std::vector<float> out(static_cast<size_t>(heads_) * n * vocab_);
  be_.download(out.data(), logits_.as<void>(), out.size() * 4);
  be_.synchronize();
  return out;
}

std::unique_ptr<Proposer> make_medusa_proposer(const ProposerEnv& env) {
  if (env.max_k == 0 || draft_heads_kind(env.file) != "medusa") return nullptr;
  return std::make_unique<MedusaProposer>(env.be, env.file, env.target, env.max_batch, env.max_k);
}

}  // namespace trt_spec
