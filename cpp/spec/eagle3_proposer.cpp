// eagle3_proposer.cpp: the EAGLE-3 head's weights, layer and hooks (eagle3_proposer.h).
#include "spec/eagle3_proposer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "common/errors.h"
#include "spec/draft_heads.h"

namespace trt_spec {

namespace {

int config_int(const Json& cfg, const char* key) {
  return static_cast<int>(cfg.at(key).as_int());
}

}  // namespace

Eagle3Proposer::Eagle3Proposer(Backend& be, const EngineFile& file, Model& target, int max_batch,
                               int max_k, int topk)
    : HeadProposer(max_batch, max_k), be_(be), target_(target), max_batch_(max_batch) {
  const Json& entry = file.meta().at("draft_heads");
  const Json cfg = entry.at("config");
  dim_ = config_int(cfg, "dim");
  ffn_ = config_int(cfg, "ffn_dim");
  draft_vocab_ = config_int(cfg, "draft_vocab");
  const int heads = config_int(cfg, "n_heads"), kv_heads = config_int(cfg, "n_kv_heads");
  const int hd = config_int(cfg, "head_dim"), vocab = config_int(cfg, "vocab_size");
  eps_ = static_cast<float>(cfg.at("rms_eps").as_number());
  norm_before_residual_ = cfg.get_bool("norm_before_residual", false);
  topk_ = topk;
  if (topk_ < 1 || topk_ > kEagle3MaxTopK || topk_ > draft_vocab_)
    throw InvalidArgument("eagle_topk must be in [1, " + std::to_string(kEagle3MaxTopK) +
                          "] (1: chains), got " + std::to_string(topk_));
  const ModelConfig& tc = target.config();
  if (dim_ != tc.dim || vocab != tc.vocab_size)
    throw EngineFileError("EAGLE-3 head of hidden size " + std::to_string(dim_) +
                          " and vocabulary " + std::to_string(vocab) +
                          " does not fit the target (" + std::to_string(tc.dim) + ", " +
                          std::to_string(tc.vocab_size) + ")");
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || hd < 2 || hd % 2 != 0 || ffn_ < 1 ||
      draft_vocab_ < 1)
    throw EngineFileError("EAGLE-3 head: bad heads, head_dim, ffn_dim or draft_vocab");
  std::vector<int> taps;
  const Json tl = cfg.at("taps");
  for (size_t i = 0; i < tl.size(); ++i) taps.push_back(static_cast<int>(tl.at(i).as_int()));
  if (taps.size() != 3) throw EngineFileError("EAGLE-3 head: taps must list 3 target layers");
  target.set_taps(taps);  // (InvalidArgument for a layer the target lacks)
  attn_ = {heads, kv_heads, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
  const int qkv = (heads + 2 * kv_heads) * hd, D = dim_;

  const auto w = [&](const std::string& name, int64_t rows, int64_t cols, bool matmul) {
    return import_head_tensor(be, file, "eagle3." + name + ".weight", rows, cols, matmul);
  };
  for (int t = 0; t < 3; ++t) fc_[t] = w("fc." + std::to_string(t), D, D, true);
  input_norm_ = w("input_norm", 1, D, false);
  hidden_norm_ = w("hidden_norm", 1, D, false);
  post_norm_ = w("post_norm", 1, D, false);
  norm_ = w("norm", 1, D, false);
  qkv_e_ = w("qkv_embed", qkv, D, true);
  qkv_h_ = w("qkv_hidden", qkv, D, true);
  o_ = w("o", D, static_cast<int64_t>(heads) * hd, true);
  gate_up_ = w("gate_up", 2 * static_cast<int64_t>(ffn_), D, true);
  down_ = w("down", D, ffn_, true);
  head_ = w("head", draft_vocab_, D, true);

  // The draft vocabulary's target ids.
  const Json list = entry.at("draft_tokens");
  if (list.size() != static_cast<size_t>(draft_vocab_))
    throw EngineFileError(list.path() + " must list " + std::to_string(draft_vocab_) + " tokens");
  std::vector<int32_t> ids(draft_vocab_);
  for (int i = 0; i < draft_vocab_; ++i) {
    const int64_t t = list.at(i).as_int();
    if (t < 0 || t >= vocab) throw EngineFileError(list.path() + ": a token id out of range");
    ids[i] = static_cast<int32_t>(t);
  }
  tokens_ = BackendBuffer(be, ids.size() * 4);
  be.upload(tokens_.as<void>(), ids.data(), ids.size() * 4);

  // Its cache (one layer, f32; a tree's rows use kEagle3TreeCacheRoom indices past a sequence's
  // end) and RoPE tables from the inverse frequencies (scaling applied).
  max_seq_ = target.limits().max_seq;
  // (>= max_batch (max_k + 1): Iteration checks it; a tree step's rows are max_batch w)
  max_rows_ = std::max(target.limits().max_rows, max_batch * topk_);
  const int room = topk_ > 1 ? kEagle3TreeCacheRoom : 0;
  kv_ = KvCache{nullptr, nullptr, KvType::F32, max_batch, 1, kv_heads, max_seq_ + room, hd};
  k_buf_ = BackendBuffer(be, kv_.elements() * 4);
  v_buf_ = BackendBuffer(be, kv_.elements() * 4);
  kv_.k = k_buf_.as<void>();
  kv_.v = v_buf_.as<void>();
  const Json freq = cfg.at("rope_freq");
  const int half = hd / 2;
  if (freq.size() != static_cast<size_t>(half))
    throw EngineFileError(freq.path() + " must list head_dim / 2 frequencies");
  std::vector<float> c(static_cast<size_t>(max_seq_) * half), s(c.size());
  for (int i = 0; i < half; ++i) {
    const float inv = static_cast<float>(freq.at(i).as_number());
    for (int p = 0; p < max_seq_; ++p) {
      const double angle = static_cast<double>(static_cast<float>(p) * inv);
      c[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(angle));
      s[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  cos_ = BackendBuffer(be, c.size() * 4);
  sin_ = BackendBuffer(be, s.size() * 4);
  be.upload(cos_.as<void>(), c.data(), c.size() * 4);
  be.upload(sin_.as<void>(), s.data(), s.size() * 4);

  ops_ = make_eagle3_ops(be, max_batch);
  allowed_.assign(max_batch, 0);
  pending_.assign(max_batch, 0);
  ready_.assign(max_batch, 0);
  const size_t R = max_rows_;
  const auto ints = [&] { return BackendBuffer(be, R * 4); };
  tok_ = ints();
  pos_ = ints();
  slot_ = ints();
  src_ = ints();
  last_ = ints();
  if (topk_ > 1) {
    kv_idx_ = ints();
    tree_base_ = ints();
    tree_bits_ = BackendBuffer(be, R * 8);
    trees_ = BackendBuffer(be, static_cast<size_t>(max_batch) * sizeof(Eagle3Tree));
  }
  feat_ = BackendBuffer(be, static_cast<size_t>(max_batch) * D * 4);
  pend_ = BackendBuffer(be, static_cast<size_t>(max_batch) * 3 * D * 4);
  const auto rows_of = [&](size_t cols) { return BackendBuffer(be, R * cols * 4); };
  for (BackendBuffer& a : a_) a = rows_of(D);
  g_ = rows_of(D);
  e_ = rows_of(D);
  en_ = rows_of(D);
  gn_ = rows_of(D);
  qkv_ = rows_of(qkv);
  att_ = rows_of(static_cast<size_t>(heads) * hd);
  x_ = rows_of(D);
  gu_ = rows_of(2 * static_cast<size_t>(ffn_));
  act_ = rows_of(ffn_);
  tmp_ = rows_of(std::max(D, qkv));
  logits_ = BackendBuffer(be, static_cast<size_t>(max_batch) * topk_ * draft_vocab_ * 4);
}

Rows Eagle3Proposer::rows() const {
  return Rows{tok_.as<int32_t>(), pos_.as<int32_t>(), slot_.as<int32_t>()};
}

void Eagle3Proposer::fuse(const float* const taps[3], int n, float* g) {
  float* tmp = tmp_.as<float>();
  be_.linear(fc_[0], WeightView{}, taps[0], n, g);  // [n, D]
  be_.linear_residual(fc_[1], taps[1], n, g, tmp);
  be_.linear_residual(fc_[2], taps[2], n, g, tmp);
}

void Eagle3Proposer::layer(const Rows& r, int n, const float* g, float* out) {
  const int D = dim_;
  float *e = e_.as<float>(), *en = en_.as<float>(), *gn = gn_.as<float>(), *qkv = qkv_.as<float>(),
        *att = att_.as<float>(), *gu = gu_.as<float>(), *act = act_.as<float>(),
        *tmp = tmp_.as<float>();
  be_.embed(target_.embedding(), r.tokens, n, e);  // [n, D]
  be_.rmsnorm(e, input_norm_, eps_, n, D, en);
  be_.rmsnorm(g, hidden_norm_, eps_, n, D, gn);
  be_.gather_rows(norm_before_residual_ ? gn : g, target_.row_ids(), n, D, out);  // residual
  be_.linear(qkv_e_, WeightView{}, en, n, qkv);  // [n, qkv]: the embedding half of x
  be_.linear_residual(qkv_h_, gn, n, qkv, tmp);  // and the feature half
  be_.rope(qkv, r.pos, n, attn_, cos_.as<float>(), sin_.as<float>());
  be_.kv_write(qkv, r, n, attn_, kv_, 0);
  be_.attention(qkv, r, n, attn_, kv_, 0, att);                                         // [n, H hd]
  be_.linear_residual(o_, att, n, out, tmp);                                            // h
  be_.norm_linear(out, nullptr, post_norm_, eps_, gate_up_, WeightView{}, n, gu, tmp);  // [n, 2F]
  be_.swiglu_linear_residual(down_, gu, n, out, act, tmp);                              // out
}

void Eagle3Proposer::head(const float* x, int n, float* logits) {
  be_.norm_linear(x, nullptr, norm_, eps_, head_, WeightView{}, n, logits, tmp_.as<float>());
}

void Eagle3Proposer::begin(int slot, const Admission& a) {
  HeadProposer::begin(slot, a);
  // Prompt rows copied from another slot: so are the head's entries, where that one read them.
  if (a.copy_from >= 0 && allowed_[a.copy_from])
    be_.kv_copy_prefix(kv_, a.copy_from, slot, a.cached);
  allowed_[slot] = a.allowed;
  pending_[slot] = 0;
  ready_[slot] = 0;
}

void Eagle3Proposer::prompt_done(int slot, const std::vector<int32_t>& prompt, int first, int n,
                                 int row, bool others_decoding) {
  if (!allowed_[slot] || n <= 0) return;
  const int P = static_cast<int>(prompt.size()), D = dim_;
  const bool last = first + n == P;
  const int m = last ? n - 1 : n;  // (the prompt's last row reads the first token: start())
  if (m > 0) {
    std::vector<int32_t> tok(prompt.begin() + first + 1, prompt.begin() + first + 1 + m), pos(m),
        slots(m, slot);
    std::iota(pos.begin(), pos.end(), first);
    be_.upload(tok_.as<void>(), tok.data(), m * 4);
    be_.upload(pos_.as<void>(), pos.data(), m * 4);
    be_.upload(slot_.as<void>(), slots.data(), m * 4);
    const size_t off = static_cast<size_t>(row) * D;
    const float* taps[3] = {target_.tap(0) + off, target_.tap(1) + off, target_.tap(2) + off};
    fuse(taps, m, g_.as<float>());
    layer(rows(), m, g_.as<float>(), x_.as<float>());
  }
  if (last) {
    const int32_t r = row + n - 1;
    be_.upload(src_.as<void>(), &r, 4);
    for (int t = 0; t < 3; ++t)
      be_.gather_rows(target_.tap(t), src_.as<int32_t>(), 1, D,
                      pend_.as<float>() + (static_cast<size_t>(slot) * 3 + t) * D);
    pending_[slot] = 1;
  }
}

void Eagle3Proposer::start(int slot, SeqState& seq) {
  if (!std::exchange(pending_[slot], 0) || seq.n_past < 1) return;
  const int D = dim_;
  const int32_t tok = seq.last, pos = std::min(seq.n_past - 1, max_seq_ - 1), s32 = slot;
  be_.upload(tok_.as<void>(), &tok, 4);
  be_.upload(pos_.as<void>(), &pos, 4);
  be_.upload(slot_.as<void>(), &s32, 4);
  const float* p = pend_.as<float>() + static_cast<size_t>(slot) * 3 * D;
  const float* taps[3] = {p, p + D, p + 2 * D};
  fuse(taps, 1, g_.as<float>());
  layer(rows(), 1, g_.as<float>(), x_.as<float>());
  ops_->keep(slot_.as<int32_t>(), 1, target_.row_ids(), x_.as<float>(), D, feat_.as<float>());
  ready_[slot] = 1;
}

void Eagle3Proposer::issue_propose(IterationContext& ctx, int k) {
  const int B = ctx.B;
  float *cur = g_.as<float>(), *next = x_.as<float>(), *logits = logits_.as<float>();
  be_.gather_rows(feat_.as<float>(), ctx.slots, B, dim_, cur);  // [B, D]: each one's last output
  if (topk_ > 1) {
    propose_tree(ctx, k, cur);
    return;
  }
  const Eagle3Rows out{tok_.as<int32_t>(), pos_.as<int32_t>(), slot_.as<int32_t>()};
  for (int j = 0; j < k; ++j) {
    head(cur, B, logits);  // [B, draft_vocab]
    if (ctx.mask_draft)    // (the host: draft id c is token tokens_[c])
      ctx.mask_draft(logits, j, draft_vocab_, draft_vocab_, tokens_.as<int32_t>());
    ops_->chain_step(ctx.st, ctx.slots, B, j, max_seq_, logits, draft_vocab_, tokens_.as<int32_t>(),
                     out);
    if (j + 1 == k) break;
    layer(rows(), B, cur, next);  // node j at position n_past + j
    std::swap(cur, next);
  }
}

void Eagle3Proposer::propose_tree(IterationContext& ctx, int k, float* cur) {
  const int B = ctx.B, w = topk_;
  float *next = x_.as<float>(), *g = a_[0].as<float>(), *logits = logits_.as<float>();
  Eagle3Tree* trees = trees_.as<Eagle3Tree>();
  const Eagle3TreeRows meta{
      {tok_.as<int32_t>(), pos_.as<int32_t>(), slot_.as<int32_t>(), kv_idx_.as<int32_t>(),
       tree_base_.as<int32_t>(), tree_bits_.as<uint64_t>()},
      src_.as<int32_t>()};
  const Rows rows = meta.rows.rows(true);
  for (int j = 0; j < k; ++j) {
    head(cur, B * (j == 0 ? 1 : w), logits);  // [B, 1 or w, draft_vocab]
    const bool expand = j + 1 < k;
    ops_->tree_step(ctx.st, ctx.slots, B, j, w, expand, max_seq_, logits, draft_vocab_,
                    tokens_.as<int32_t>(), trees, meta);
    if (!expand) break;
    be_.gather_rows(cur, meta.src, B * w, dim_, g);  // [B, w, D]: the proposing rows' outputs
    layer(rows, B * w, g, next);                     // the frontier's rows
    std::swap(cur, next);
  }
  ops_->tree_select(ctx.st, ctx.slots, B, k, trees);
}

void Eagle3Proposer::issue_after_accept(IterationContext& ctx) {
  if (!ctx.verified) return;  // (a sequence's start: start() absorbed its prompt's last row)
  const int B = ctx.B, k = ctx.k, R = B * (k + 1), D = dim_;
  const Eagle3Rows out{tok_.as<int32_t>(), pos_.as<int32_t>(), slot_.as<int32_t>(),
                       src_.as<int32_t>()};
  ops_->absorb_rows(ctx.st, ctx.slots, B, k, max_seq_, out, last_.as<int32_t>());  // [B, k + 1]
  for (int t = 0; t < 3; ++t)
    be_.gather_rows(target_.tap(t), src_.as<int32_t>(), R, D, a_[t].as<float>());
  const float* taps[3] = {a_[0].as<float>(), a_[1].as<float>(), a_[2].as<float>()};
  fuse(taps, R, g_.as<float>());
  layer(rows(), R, g_.as<float>(), x_.as<float>());
  ops_->keep(ctx.slots, B, last_.as<int32_t>(), x_.as<float>(), D, feat_.as<float>());
}

std::vector<float> Eagle3Proposer::prompt_logits(const std::vector<int32_t>& ids, int32_t next) {
  const int n = static_cast<int>(ids.size());
  if (n < 1 || n > max_rows_) throw InvalidArgument("eagle3 prompt_logits: 1 to max_rows tokens");
  std::vector<int32_t> pos(n), slots(n, 0), tok(ids.begin() + 1, ids.end());
  tok.push_back(next);
  std::iota(pos.begin(), pos.end(), 0);
  be_.upload(tok_.as<void>(), ids.data(), n * 4);
  be_.upload(pos_.as<void>(), pos.data(), n * 4);
  be_.upload(slot_.as<void>(), slots.data(), n * 4);
  target_.forward(rows(), n, target_.row_ids(), 0, nullptr);  // (its taps)
  be_.upload(tok_.as<void>(), tok.data(), n * 4);
  const float* taps[3] = {target_.tap(0), target_.tap(1), target_.tap(2)};
  fuse(taps, n, g_.as<float>());
  layer(rows(), n, g_.as<float>(), x_.as<float>());
  BackendBuffer logits(be_, static_cast<size_t>(n) * draft_vocab_ * 4);
  head(x_.as<float>(), n, logits.as<float>());
  std::vector<float> out(static_cast<size_t>(n) * draft_vocab_);
  be_.download(out.data(), logits.as<void>(), out.size() * 4);
  be_.synchronize();
  return out;
}

std::unique_ptr<Proposer> make_eagle3_proposer(const ProposerEnv& env) {
  if (env.max_k == 0 || draft_heads_kind(env.file) != "eagle3") return nullptr;
  return std::make_unique<Eagle3Proposer>(env.be, env.file, env.target, env.max_batch, env.max_k,
                                          env.opts.eagle_topk);
}

}  // namespace trt_spec
