// mask_rows.h: a token mask on a row of logits (engine/constraint.h), for the host and the
// device: logit x becomes -inf where bit x of the mask is clear (ids past the mask's words too).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/philox.h"  // (TRT_SPEC_HD)
#include "spec/draft_tree.h"

namespace trt_spec {

TRT_SPEC_HD bool mask_allows(const uint32_t* mask, int words, int x) {
  return (x >> 5) < words && ((mask[x >> 5] >> (x & 31)) & 1u);
}

inline void mask_row(float* l, int vocab, const uint32_t* mask, int words) {
  for (int x = 0; x < vocab; ++x)
    if (!mask_allows(mask, words, x)) l[x] = -INFINITY;
}

// Prunes a draft tree by its verify rows' masks rows [t.n + 1, words] (row 0 the root's, 1 + i
// node i's): a node whose parent's row forbids its token could never be accepted, nor could its
// descendants, so they leave the tree and the rows follow their nodes. A tree holding a draft
// model's dense nodes keeps its indices (its q rows are indexed by node): it is cut before its
// first forbidden node. Returns the nodes removed.
inline int prune_forbidden(DraftTree& t, uint32_t* rows, int words) {
  bool keep[kMaxDraftNodes];
  bool dense = false;
  for (int i = 0; i < t.n; ++i) dense = dense || (t.flags[i] & kNodeDense);
  int cut = t.n;  // (dense: the first forbidden node)
  for (int i = 0; i < t.n; ++i) {
    const int p = t.parent[i];
    keep[i] = (p < 0 || keep[p]) &&
              mask_allows(rows + static_cast<size_t>(p + 1) * words, words, t.token[i]);
    if (!keep[i] && cut == t.n) cut = i;
  }
  if (cut == t.n) return 0;
  int n = 0, index[kMaxDraftNodes];
  for (int i = 0; i < t.n; ++i) {
    if (dense ? i >= cut : !keep[i]) continue;
    index[i] = n;
    if (n != i) {
      t.token[n] = t.token[i];
      t.parent[n] = static_cast<int8_t>(t.parent[i] < 0 ? -1 : index[t.parent[i]]);
      t.depth[n] = t.depth[i];
      t.flags[n] = t.flags[i];
      std::memmove(rows + static_cast<size_t>(n + 1) * words,
                   rows + static_cast<size_t>(i + 1) * words, sizeof(uint32_t) * words);
    }
    ++n;
  }
  const int removed = t.n - n;
  t.n = n;
  return removed;
}

}  // namespace trt_spec
