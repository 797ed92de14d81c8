// proposer_registry.cpp: the table of draft methods (proposer_registry.h).
#include "spec/proposer_registry.h"

#include "common/errors.h"
#include "spec/draft_model_proposer.h"
#include "spec/lookup_proposer.h"

namespace trt_spec {

const std::vector<ProposerEntry>& proposer_registry() {
  static const std::vector<ProposerEntry> table = {
      {"draft-model", make_draft_model_proposer},
      {"lookup", make_lookup_proposer},
  };
  return table;
}

Proposers attach_proposers(Iteration& iter, Backend& be, Model* draft, int max_batch, int max_k,
                           int vocab_target, const ProposerOptions& opts) {
  Proposers made;
  const ProposerEnv e{be, draft, max_batch, max_k, vocab_target, opts, made};
  for (const ProposerEntry& entry : proposer_registry()) {
    std::unique_ptr<Proposer> p = entry.make(e);
    if (!p) continue;
    if (iter.proposer(p->source()))
      throw Error(std::string("two proposers for the draft source '") +
                  draft_source_name(p->source()) + "' (the second: " + entry.name + ")");
    iter.set_proposer(p->source(), p.get());
    made.push_back(std::move(p));
  }
  return made;
}

}  // namespace trt_spec
