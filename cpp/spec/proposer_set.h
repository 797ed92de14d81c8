// proposer_set.h: the proposers an engine runs, made once and wired to its iteration: the draft
// model's (when the engine has a draft and a draft length) and prompt lookup (any draft length),
// lookup sharing the draft model's controller so that auto picks between them on one cost model.
// The scheduler (engine/scheduler.cpp) and the launch planner (engine/launch_plan.cpp) both build
// their iteration this way, so the planner counts the launches the scheduler makes.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "model/model.h"
#include "spec/draft_model_proposer.h"
#include "spec/iteration.h"
#include "spec/lookup_proposer.h"

namespace trt_spec {

struct ProposerSet {
  std::unique_ptr<DraftModelProposer> model;  // null: no draft model or draft length 0
  std::unique_ptr<LookupProposer> lookup;     // null: draft length 0
};

// Makes the proposers for max_batch sequences and draft length max_k, and sets them on iter.
// draft may be null; vocab_target: the target's vocabulary (ids the draft lacks are guarded).
inline ProposerSet attach_proposers(Iteration& iter, Backend& be, Model* draft, int max_batch,
                                    int max_k, int vocab_target) {
  ProposerSet p;
  if (draft && max_k > 0) {
    p.model = std::make_unique<DraftModelProposer>(be, *draft, max_batch, max_k, vocab_target);
    iter.set_proposer(DraftSource::kModel, p.model.get());
  }
  if (max_k > 0) {
    p.lookup = std::make_unique<LookupProposer>(max_batch, max_k,
                                                p.model ? &p.model->controller() : nullptr);
    iter.set_proposer(DraftSource::kLookup, p.lookup.get());
  }
  return p;
}

}  // namespace trt_spec
