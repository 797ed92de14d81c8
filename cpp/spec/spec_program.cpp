// spec_program.cpp: the ops of one speculative iteration (spec_program.h).
#include "spec/spec_program.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

#include "common/errors.h"

namespace trt_spec {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

SpecProgram::SpecProgram(Backend& be, Model& target, Model* draft, int max_batch, int max_k)
    : be_(be), target_(target), draft_(draft), max_batch_(max_batch), max_k_(max_k) {
  if (max_k < 0 || max_k > kMaxDraftLen || (max_k > 0 && draft == nullptr))
    throw InvalidArgument("speculative program: bad draft length");
  vocab_t_ = target.config().vocab_size;
  vocab_d_ = draft ? draft->config().vocab_size : 0;
  const size_t rows = static_cast<size_t>(max_batch) * (max_k + 1);
  if (static_cast<int>(rows) > target.limits().max_rows ||
      (draft && 2 * max_batch > draft->limits().max_rows))
    throw InvalidArgument("speculative program: the models' row budget is too small");
  seqs_ = BackendBuffer(be, sizeof(SeqState) * max_batch);
  states_ = BackendBuffer(be, sizeof(SamplingState) * max_batch);
  slots_ = BackendBuffer(be, sizeof(int32_t) * max_batch);
  const size_t meta_rows = std::max<size_t>(rows, 2 * max_batch);
  tok_ = BackendBuffer(be, meta_rows * 4);
  pos_ = BackendBuffer(be, meta_rows * 4);
  row_slots_ = BackendBuffer(be, meta_rows * 4);
  std::vector<int32_t> id(meta_rows), odd(max_batch);
  std::iota(id.begin(), id.end(), 0);
  for (int b = 0; b < max_batch; ++b) odd[b] = 2 * b + 1;
  identity_ = BackendBuffer(be, meta_rows * 4);
  odd_ = BackendBuffer(be, max_batch * 4);
  be.upload(identity_.as<void>(), id.data(), meta_rows * 4);
  be.upload(odd_.as<void>(), odd.data(), max_batch * 4);
  if (max_k > 0) q_ = BackendBuffer(be, static_cast<size_t>(max_k) * max_batch * vocab_d_ * 4);
  logits_ = BackendBuffer(be, rows * vocab_t_ * 4);
}

void SpecProgram::set_slots(const int32_t* host_slots, int B) {
  if (B < 1 || B > max_batch_) throw InvalidArgument("speculative program: bad batch size");
  be_.upload(slots_.as<void>(), host_slots, B * 4);
  B_ = B;
}

void SpecProgram::run(int k, PhaseTimes* times) {
  if (k < 0 || k > max_k_) throw InvalidArgument("speculative program: bad draft length");
  if (B_ == 0) throw InvalidArgument("speculative program: no sequences set");
  if (times == nullptr && use_graphs_ && be_.supports_graphs()) {
    const std::pair<int, int> key{B_, k};
    auto it = graphs_.find(key);
    if (it == graphs_.end())  // first use of (B, k): capture (nullptr: the backend declined)
      it = graphs_.emplace(key, be_.capture([this, k] { issue(k, nullptr); })).first;
    if (it->second) {
      it->second->launch();
      return;
    }
  }
  issue(k, times);
}

void SpecProgram::issue(int k, PhaseTimes* times) {
  const int B = B_;
  int32_t *tok = tok_.as<int32_t>(), *pos = pos_.as<int32_t>(), *rs = row_slots_.as<int32_t>();
  const int32_t* slots = slots_.as<int32_t>();
  const int vocab_common = std::min(vocab_t_, vocab_d_);
  double t0 = times ? now_s() : 0.0;
  for (int j = 0; j < k; ++j) {
    float* qj = q_.as<float>() + static_cast<size_t>(j) * B * vocab_d_;  // [B, vocab_d]
    if (j == 0) {
      be_.spec_rows(seqs(), slots, B, -1, 2, tok, pos, rs);  // [B, 2] rows: prev, last
      draft_->forward(tok, pos, rs, 2 * B, odd_.as<int32_t>(), B, qj);
    } else {
      be_.spec_rows(seqs(), slots, B, j, 1, tok, pos, rs);  // [B, 1] rows: d_{j-1}
      draft_->forward(tok, pos, rs, B, identity_.as<int32_t>(), B, qj);
    }
    be_.spec_draft_sample(qj, B, vocab_d_, vocab_common, j, seqs(), slots, states());
  }
  double t1 = 0.0;
  if (times) {
    be_.synchronize();
    t1 = now_s();
  }
  const int n = B * (k + 1);
  be_.spec_rows(seqs(), slots, B, 0, k + 1, tok, pos, rs);  // [B, k+1] rows: last, d_0 ..
  target_.forward(tok, pos, rs, n, identity_.as<int32_t>(), n, logits_.as<float>());
  be_.spec_accept(logits_.as<float>(), k > 0 ? q_.as<float>() : nullptr, B, k, vocab_t_, vocab_d_,
                  seqs(), slots, states());
  if (times) {
    be_.synchronize();
    double t2 = now_s();
    times->draft_s = t1 - t0;
    times->verify_s = t2 - t1;
  }
}

}  // namespace trt_spec
