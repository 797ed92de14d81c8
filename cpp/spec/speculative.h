// speculative.h: the state of one sequence during speculative decoding and the acceptance rule,
// shared by every backend (plain C++, host and device).
//
// One iteration with draft length k, for a sequence whose caches hold positions [0, n_past) and
// whose newest token `last` is not yet in them:
//   draft:  d_0 .. d_{k-1}, each d_j ~ q_j = the draft's distribution after (.., last, d_<j);
//   verify: the target scores [last, d_0 .. d_{k-1}] at positions n_past .. n_past + k in one
//           pass, giving p_0 .. p_k;
//   accept: for j = 0 .. k-1, keep d_j with probability min(1, p_j(d_j) / q_j(d_j)); at the
//           first rejection emit a token drawn from normalize(max(0, p_j - q_j)) and stop;
//           if all k are kept emit a bonus token drawn from p_k. (Temperature 0 makes p and q
//           one-hot at their argmax, and the rule reduces to: keep d_j while it equals the
//           target's argmax, then emit the target's argmax.) Every token emitted is therefore
//           distributed exactly as target-only sampling would draw it (Leviathan et al. 2023,
//           Chen et al. 2023).
//   rollback: n_past += accepted + 1. KV entries past n_past are stale but never read
//           (attention reads positions [0, pos]) and are overwritten by later writes.
//
// p and q are the dense distributions of the sampling rule (sampling.h: temperature, top_k,
// top_p), the same parameters applied to both models.
//
// Random numbers: every draw for the token at generation index m (m = n_gen + j) uses
// philox_uniform(seed, m, 0, stream) with one stream per purpose, so the uniforms behind each
// emitted token are consumed by exactly one kept decision, and CPU and GPU draw the same ones.
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace trt_spec {

// The longest draft an engine may be built with.
constexpr int kMaxDraftLen = 16;

// RNG streams (the last Philox counter word).
enum RngStream : uint32_t {
  kStreamTarget = 0,    // a token drawn from p by sample_row (target-only steps, the bonus)
  kStreamDraft = 1,     // draft proposal d_j ~ q_j
  kStreamAccept = 2,    // the acceptance test of d_j
  kStreamResidual = 3,  // the token drawn from normalize(max(0, p_j - q_j)) after a rejection
};

// Per-sequence state in backend memory, indexed by KV slot. Written by the iteration's ops and
// read back by the host once per iteration.
struct SeqState {
  int32_t n_past = 0;  // positions [0, n_past) hold this sequence in the target's KV cache
  int32_t last = 0;    // newest token, not in the caches yet
  int32_t prev = 0;    // the token at position n_past - 1
  int32_t n_gen = 0;   // tokens generated so far: the generation index of the next token
  int32_t n_new = 0;   // tokens emitted by the last iteration (accepted + 1)
  int32_t n_acc = 0;   // draft tokens accepted by the last iteration
  int32_t draft[kMaxDraftLen] = {};    // d_0 .. d_{k-1} of the current iteration
  int32_t out[kMaxDraftLen + 1] = {};  // tokens emitted by the last iteration
};

// The acceptance test of draft token x: u in [0, 1) uniform; keep iff u < p(x) / q(x).
// q(x) > 0 because x was drawn from q.
TRT_SPEC_HD bool spec_accept_draw(float p_x, float q_x, float u) {
  return u * q_x < p_x;
}

// The uniform number behind a draw for generation index m of a request.
TRT_SPEC_HD float spec_uniform(uint64_t seed, int64_t m, RngStream stream) {
  return philox_uniform(seed, static_cast<uint64_t>(m), 0, static_cast<uint32_t>(stream));
}

// Rolls a sequence forward after acceptance: `emitted` tokens out[0 .. accepted] of which the
// first `accepted` were draft tokens.
TRT_SPEC_HD void spec_commit(SeqState& s, int accepted) {
  const int32_t before_last = accepted == 0 ? s.last : s.draft[accepted - 1];
  s.n_acc = accepted;
  s.n_new = accepted + 1;
  s.n_past += accepted + 1;
  s.n_gen += accepted + 1;
  s.prev = before_last;
  s.last = s.out[accepted];
}

}  // namespace trt_spec
