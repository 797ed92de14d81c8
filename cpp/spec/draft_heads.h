// draft_heads.h: an engine's draft heads (its metadata entry "draft_heads": kind, config,
// tensors), as the head proposers (Medusa, EAGLE-3) load them.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "format/engine_file.h"

namespace trt_spec {

// The kind of the engine's draft heads ("medusa", "eagle3"), or "" where it holds none.
std::string draft_heads_kind(const EngineFile& file);

// The backend's view of one tensor of the heads, checked against the shape [rows, cols] their
// config implies (a vector: rows 1); matmul: read by the matmul only (the backend may keep it in
// its own layout). Where the backend copied it, the file's pages are dropped.
WeightView import_head_tensor(Backend& be, const EngineFile& file, const std::string& name,
                              int64_t rows, int64_t cols, bool matmul);

}  // namespace trt_spec
