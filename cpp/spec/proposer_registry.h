// proposer_registry.h: the proposers an engine runs, made once from the registry's table
// (proposer_registry.cpp: one line per draft method) and wired to its iteration. The scheduler
// (engine/scheduler.cpp) and the launch planner (engine/launch_plan.cpp) both build their
// iteration this way, so the planner counts the launches the scheduler makes.
#pragma once

#include <memory>
#include <vector>

#include "spec/iteration.h"
#include "spec/proposer.h"

namespace trt_spec {

// Makes the proposer of an engine where it applies (null where it does not: no draft of its
// kind, draft length 0).
using ProposerFactory = std::unique_ptr<Proposer> (*)(const ProposerEnv& env);

struct ProposerEntry {
  const char* name;  // the method's name (trt-spec info, errors)
  ProposerFactory make;
};

// The table, in the order the scheduler asks for offers (ties go to the earlier); a draft
// source is served by the first entry that applies to the engine (a PARD draft before the plain
// draft model).
const std::vector<ProposerEntry>& proposer_registry();

using Proposers = std::vector<std::unique_ptr<Proposer>>;

// Makes the proposers that apply to an engine (at most one per draft source) and sets them on
// iter. draft (the engine's draft model) may be null.
Proposers attach_proposers(Iteration& iter, Backend& be, const EngineFile& file, Model& target,
                           Model* draft, int max_batch, int max_k,
                           const ProposerOptions& opts = {});

}  // namespace trt_spec
