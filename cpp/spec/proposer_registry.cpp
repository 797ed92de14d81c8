// proposer_registry.cpp: the table of draft methods (proposer_registry.h).
#include "spec/proposer_registry.h"

#include "common/errors.h"
#include "spec/draft_model_proposer.h"
#include "spec/eagle3_proposer.h"
#include "spec/lookup_proposer.h"
#include "spec/medusa_proposer.h"
#include "spec/pard_proposer.h"

namespace trt_spec {

const std::vector<ProposerEntry>& proposer_registry() {
  static const std::vector<ProposerEntry> table = {
      {"pard", make_pard_proposer},     {"draft-model", make_draft_model_proposer},
      {"medusa", make_medusa_proposer}, {"eagle3", make_eagle3_proposer},
      {"lookup", make_lookup_proposer},
  };
  return table;
}

Proposers attach_proposers(Iteration& iter, Backend& be, const EngineFile& file, Model& target,
                           Model* draft, int max_batch, int max_k, const ProposerOptions& opts) {
  Proposers made;
  const ProposerEnv e{be, file, target, draft, max_batch, max_k, opts, made};
  for (const ProposerEntry& entry : proposer_registry()) {
    std::unique_ptr<Proposer> p = entry.make(e);
    if (!p || iter.proposer(p->source())) continue;  // (a source's first applicable one serves)
    iter.set_proposer(p->source(), p.get());
    made.push_back(std::move(p));
  }
  return made;
}

}  // namespace trt_spec
