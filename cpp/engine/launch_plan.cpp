// launch_plan.cpp: CUDA launch counts of an engine's programs on a planning backend
// (launch_plan.h).
#include "engine/launch_plan.h"

#include <memory>
#include <numeric>
#include <vector>

#include "common/errors.h"
#include "engine/runtime.h"
#include "spec/draft_heads.h"
#include "spec/iteration.h"
#include "spec/proposer_registry.h"
#ifdef TRT_SPEC_WITH_CUDA
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#endif

namespace trt_spec {

#ifdef TRT_SPEC_WITH_CUDA
namespace {

// Launches of model.forward over one row at position 1 of slot 0 (its logits included).
int count_forward(CudaBackend& be, Model& model) {
  BackendBuffer tok(be, 4), pos(be, 4), slot(be, 4), rows(be, 4);
  BackendBuffer logits(be, static_cast<size_t>(model.config().vocab_size) * 4);
  const int32_t one = 1;
  be.upload(pos.as<void>(), &one, 4);
  be.clear_launches();
  model.forward(Rows{tok.as<int32_t>(), pos.as<int32_t>(), slot.as<int32_t>()}, 1,
                rows.as<int32_t>(), 1, logits.as<float>());
  const int n = static_cast<int>(be.launches().size());
  be.clear_launches();
  return n;
}

}  // namespace

LaunchPlan cuda_launch_plan(const std::string& engine_path, int batch, int draft_len, int sm_count,
                            bool persistent) {
  RuntimeOptions opts;
  Runtime rt(engine_path, opts, CudaBackend::planning(sm_count));
  auto& be = static_cast<CudaBackend&>(rt.backend());
  be.set_persistent(persistent);
  if (batch < 1 || batch > rt.max_batch())
    throw InvalidArgument("plan: batch " + std::to_string(batch) + " outside [1, " +
                          std::to_string(rt.max_batch()) + "] (the engine's max_batch)");
  const bool has_draft = rt.draft() || !draft_heads_kind(rt.file()).empty();
  if (draft_len < 0 || draft_len > rt.max_draft_len() || (draft_len > 0 && !has_draft))
    throw InvalidArgument("plan: draft length " + std::to_string(draft_len) +
                          (has_draft ? " outside [0, " + std::to_string(rt.max_draft_len()) + "]"
                                     : " needs a draft; this engine has none"));
  LaunchPlan plan;
  plan.batch = batch;
  plan.draft_len = draft_len;
  plan.sm_count = sm_count;
  plan.persistent = persistent;
  plan.target_layers = rt.target().config().n_layers;
  plan.target_step = count_forward(be, rt.target());
  if (rt.draft()) {
    plan.draft_layers = rt.draft()->config().n_layers;
    plan.draft_step = count_forward(be, *rt.draft());
  }

  // One iteration as the scheduler builds it (attach_proposers), graphs on.
  const int B = rt.max_batch(), K = rt.max_draft_len();
  Iteration iter(be, rt.target(), rt.draft(), B, K, rt.max_seq_len());
  const Proposers proposers = attach_proposers(iter, be, rt.file(), rt.target(), rt.draft(), B, K);
  std::vector<int32_t> slots(batch);
  std::iota(slots.begin(), slots.end(), 0);
  iter.set_slots(slots.data(), batch);
  const DraftSource source = draft_len > 0 ? DraftSource::kModel : DraftSource::kNone;
  iter.capture(source, draft_len);
  be.clear_launches();
  iter.run(source, draft_len);
  plan.iteration = static_cast<int>(be.launches().size());
  for (const std::string& k : be.launches()) ++plan.iteration_kernels[k];
  return plan;
}

KernelWave cuda_matmul_wave(WeightType type, int64_t rows, int64_t cols, int n, int sm_count) {
  return cuda_plan_matmul_wave(type, rows, cols, n, sm_count);
}

KernelWave cuda_attention_wave(int n, int n_heads, int n_kv_heads, int head_dim, int max_seq,
                               int sm_count) {
  return cuda_plan_attention_wave(n, n_heads, n_kv_heads, head_dim, max_seq, sm_count);
}

#else

namespace {
[[noreturn]] void no_cuda() {
  throw Error(
      "this build of trt-spec has no CUDA backend (no CUDA compiler was found when it was "
      "built), so it cannot plan CUDA launches");
}
}  // namespace

LaunchPlan cuda_launch_plan(const std::string&, int, int, int, bool) {
  no_cuda();
}
KernelWave cuda_matmul_wave(WeightType, int64_t, int64_t, int, int) {
  no_cuda();
}
KernelWave cuda_attention_wave(int, int, int, int, int, int) {
  no_cuda();
}

#endif

}  // namespace trt_spec
