// draft_heads.cpp: the engine's draft heads (draft_heads.h).
#include "spec/draft_heads.h"

#include "common/errors.h"

namespace trt_spec {

namespace {
constexpr const char* kRole = "draft_heads";
}

std::string draft_heads_kind(const EngineFile& file) {
  const Json& meta = file.meta();
  return meta.has(kRole) ? meta.at(kRole).get_string("kind", "") : "";
}

WeightView import_head_tensor(Backend& be, const EngineFile& file, const std::string& name,
                              int64_t rows, int64_t cols, bool matmul) {
  const TensorEntry& e = file.tensor(kRole, name);
  if (e.rows != rows || e.cols != cols)
    throw EngineFileError("draft head tensor " + name + " is [" + std::to_string(e.rows) + ", " +
                          std::to_string(e.cols) + "], expected [" + std::to_string(rows) + ", " +
                          std::to_string(cols) + "]");
  if (e.random) throw EngineFileError("draft heads with random weights are not supported");
  const WeightView host = e.view(file.data());
  const WeightView w = matmul ? be.import_matmul_weight(host) : be.import_weight(host);
  if (w.data != host.data) file.drop_pages(host.data, e.bytes);
  return w;
}

}  // namespace trt_spec
