// spec_program.h: one speculative iteration as a fixed program of backend ops.
//
// For B sequences (KV slots in `slots`, device memory) and draft length k, run(B, k) issues:
//   draft step 0   rows [prev, last] per sequence -> d_0        (2B rows)
//   draft step j   rows [d_{j-1}]                 -> d_j        (B rows), j = 1 .. k-1
//   verify         rows [last, d_0 .. d_{k-1}]    -> p_0 .. p_k (B (k+1) rows, one pass)
//   accept         acceptance, output tokens, rollback (spec_commit) per sequence
// Every input of every op (tokens, positions, slots, lengths, random counters) is read from
// backend memory written by the previous op: the host only picks (B, k) and, afterwards, reads
// the SeqState array back. k = 0 is a plain target step (one verify row per sequence, the
// token drawn as target-only decoding draws it).
//
// Graphs: on a backend that supports them (CUDA), run(k) replays one graph per (B, k), captured
// the first time that pair runs: the whole iteration is one launch. The graph reads the slots
// buffer, so set_slots() with the same B reuses it. use_graphs(false) issues the same ops one by
// one instead (for tests and timing).
//
// Draft step 0 re-feeds `prev` (the token at n_past - 1): after a rejection that position
// already holds it (the write is idempotent); after a fully accepted block, or a k = 0
// iteration, it is the one token the draft has not seen. The draft therefore needs its cache
// to hold positions [0, n_past - 1) before an iteration with k > 0 (Decoder::catch_up_draft).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "backend/backend.h"
#include "model/model.h"

namespace trt_spec {

// Wall time of an iteration's phases, measured when the backend runs synchronously (CPU) or
// when profiling (a synchronisation between phases).
struct PhaseTimes {
  double draft_s = 0.0;   // k draft steps
  double verify_s = 0.0;  // the verify pass and the acceptance step
};

class SpecProgram {
 public:
  // draft may be null (target-only engines: k must be 0). max_k: the engine's draft length.
  SpecProgram(Backend& be, Model& target, Model* draft, int max_batch, int max_k);

  // Backend-memory state, indexed by KV slot.
  SeqState* seqs() { return seqs_.as<SeqState>(); }
  SamplingState* states() { return states_.as<SamplingState>(); }
  // Sets the sequences of the next iterations: rows b = 0 .. B-1 are slots[b].
  void set_slots(const int32_t* host_slots, int B);

  // Issues one iteration for the B sequences of set_slots(). Asynchronous on a GPU backend;
  // times the phases when `times` is given (synchronising between them).
  void run(int k, PhaseTimes* times = nullptr);

  // Graph replay where the backend has graphs (default on); off: the ops launched one by one.
  void set_use_graphs(bool on) { use_graphs_ = on; }
  bool use_graphs() const { return use_graphs_; }
  int graphs_captured() const { return static_cast<int>(graphs_.size()); }

 private:
  void issue(int k, PhaseTimes* times);  // the ops of one iteration for B_ sequences

  Backend& be_;
  Model& target_;
  Model* draft_;
  int max_batch_, max_k_, B_ = 0;
  int vocab_t_, vocab_d_;
  BackendBuffer seqs_, states_, slots_;
  BackendBuffer tok_, pos_, row_slots_;  // row metadata [max_batch (max_k + 1)]
  BackendBuffer identity_, odd_;         // logit rows 0, 1, 2, .. and 1, 3, 5, ..
  BackendBuffer q_;                      // draft logits -> q  [max_k, max_batch, vocab_d]
  BackendBuffer logits_;                 // verify logits      [max_batch, max_k + 1, vocab_t]
  bool use_graphs_ = true;
  std::map<std::pair<int, int>, std::unique_ptr<BackendGraph>> graphs_;  // by (B, k)
};

}  // namespace trt_spec
