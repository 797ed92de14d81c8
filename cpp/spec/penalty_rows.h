// penalty_rows.h: the penalties of one verify row (kernels/penalties.h), written once for the
// host and the device: which tokens the draft path above the row adds to the generated ones, and
// the pass over a row's logits. spec_ops_cpu.cpp runs penalty_row over its rows; the CUDA
// kernels (penalty_kernels.cuh) split the same pass over a block's threads.
#pragma once

#include <cstdint>

#include "kernels/penalties.h"
#include "spec/draft_tree.h"
#include "spec/seq_state.h"

namespace trt_spec {

// The tokens the path of node `node` (it and its ancestors; none for the root, node -1) adds
// to the text: path[0 .. returned).
TRT_SPEC_HD int penalty_path(const DraftTree& t, int node, int32_t* path) {
  int n = 0;
  for (int i = node; i >= 0; i = t.parent[i]) path[n++] = t.token[i];
  return n;
}

// Logit x of a row after steps 1 and 2 (the bias is added afterwards, once per entry).
TRT_SPEC_HD float penalty_logit(float l, int x, const int32_t* counts, const uint32_t* prompt,
                                const int32_t* path, int n_path, const PenaltyParams& p) {
  int c = counts[x];
  for (int j = 0; j < n_path; ++j) c += path[j] == x ? 1 : 0;
  const bool in_prompt = (prompt[x >> 5] >> (x & 31)) & 1u;
  return penalized_logit(l, c, in_prompt, p);
}

// counts [vocab] += the tokens the sequence's last iteration emitted (out[0 .. n_new)).
TRT_SPEC_HD void penalty_count_emitted(const SeqState& s, int32_t* counts, int vocab) {
  for (int d = 0; d < s.n_new; ++d)
    if (s.out[d] >= 0 && s.out[d] < vocab) counts[s.out[d]] += 1;
}

// A row's whole pass on one thread (the host's): logits l [vocab].
inline void penalty_row(float* l, int vocab, const int32_t* counts, const uint32_t* prompt,
                        const int32_t* path, int n_path, const PenaltyParams& p) {
  for (int x = 0; x < vocab; ++x) l[x] = penalty_logit(l[x], x, counts, prompt, path, n_path, p);
  for (int j = 0; j < p.n_bias; ++j)
    if (p.bias_id[j] >= 0 && p.bias_id[j] < vocab) l[p.bias_id[j]] += p.bias[j];
}

}  // namespace trt_spec
