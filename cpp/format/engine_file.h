// engine_file.h: the engine file format (defined here once; Python reads these constants
// through the bindings) and its memory-mapped reader.
//
// Layout of a .engine file:
//   [0, 64)             header: magic "TRTSPEC\0", u32 format version, u32 flags (0),
//                       u64 json_offset, u64 json_bytes, u64 data_offset, u64 data_bytes,
//                       u64 json_checksum, u64 reserved; all little-endian
//   [data_offset, ...)  tensor blobs (weight_format.h layouts), data_offset a multiple of
//                       kDataAlign, each tensor at a multiple of kSectionAlign from it
//   [json_offset, ...)  UTF-8 JSON metadata: models (config + tensor table), tokenizer,
//                       chat template, special tokens, build options, source checksums; the
//                       builder writes it after the data (the two regions must not overlap)
// Checksums are XXH64 with seed 0 (xxhash64.h), written as 16 lowercase hex digits for a tensor
// and as a u64 in the header for the metadata, so `xxhsum -H64` can check them. The reader checks
// sizes always and tensor checksums on request, so a truncated, corrupted or foreign file fails
// with EngineFileError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "format/json.h"
#include "format/xxhash64.h"
#include "kernels/weight_format.h"

namespace trt_spec {

constexpr char kEngineMagic[8] = {'T', 'R', 'T', 'S', 'P', 'E', 'C', '\0'};
// Version 2: checksums are XXH64 (version 1 used an xxHash-like function of its own).
// Version 3: a model may have a reduced output head (config head_vocab, the model's head_tokens:
// schema.h); the builder writes 3 only for such engines, so that others stay readable by
// versions of trt-spec that read 2.
// Version 4: a model may hold random weights instead of tensor data (its "random_weights":
// {"seed": S}; its tensors have no offset or checksum, and the backend makes each one with
// kernels/random_fill.h at load): engines for timing runs, written without their gigabytes of
// data (benchmarks/random_engine.py writes them; the builder never does).
// Version 5: the engine's draft may be feature-level heads instead of a draft model (metadata
// "draft_heads": {"kind": "medusa", "config", "tensors", ...}; spec/medusa_proposer.h); the
// builder writes 5 only for such engines.
constexpr uint32_t kEngineFormatVersion = 5;               // the newest version read and written
constexpr uint32_t kEngineFormatOldestVersion = 2;         // the oldest version read
constexpr uint32_t kEngineFormatHeadVocabVersion = 3;      // the first with reduced heads
constexpr uint32_t kEngineFormatRandomWeightsVersion = 4;  // the first with random weights
constexpr uint32_t kEngineFormatDraftHeadsVersion = 5;     // the first with draft heads
constexpr size_t kEngineHeaderBytes = 64;
constexpr size_t kDataAlign = 4096;

// The engine file's checksum: XXH64, seed 0. The builder calls this same function through the
// bindings (_core.checksum64).
inline uint64_t checksum64(const void* data, size_t bytes) {
  return xxh64(data, bytes, 0);
}

WeightType weight_type_from_name(const std::string& name);  // throws EngineFileError

struct TensorEntry {
  std::string name;
  WeightType type = WeightType::F32;
  int64_t rows = 0;  // 1-D tensors have rows == 1
  int64_t cols = 0;
  uint64_t offset = 0;  // from data_offset
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  bool random = false;      // no data: made from random_key at load (version 4)
  uint64_t random_key = 0;  // XXH64 of "role/name", seeded with the model's random seed
  WeightView view(const uint8_t* data_base) const { return {type, rows, cols, data_base + offset}; }
};

class EngineFile {
 public:
  // Maps the file and validates the header, the JSON and every tensor's bounds and size;
  // with verify_checksums, also each tensor's bytes.
  explicit EngineFile(const std::string& path, bool verify_checksums = true);
  ~EngineFile();
  EngineFile(const EngineFile&) = delete;
  EngineFile& operator=(const EngineFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& json_text() const { return json_text_; }
  const Json& meta() const { return meta_; }  // the parsed metadata (root "$")
  const uint8_t* data() const { return base_ + data_offset_; }
  uint64_t file_bytes() const { return size_; }

  // Tensors of one model ("target" or "draft"), or of the draft heads ("draft_heads").
  bool has_model(const std::string& role) const;
  const std::map<std::string, TensorEntry>& tensors(const std::string& role) const;
  const TensorEntry& tensor(const std::string& role, const std::string& name) const;

  // Hands the whole pages inside [p, p + bytes) of the mapping back to the kernel (madvise
  // MADV_DONTNEED): for a tensor a backend has copied into its own memory (the CPU backend's
  // repacked matrices, every tensor on a GPU), or one read sparsely (the embedding table). The
  // mapping is read-only and private, so a later read of those bytes faults them in again from
  // the file, unchanged; until then they no longer count in the process's resident memory
  // (about 1.6 GB for the default pair on the CPU). p outside the mapping: nothing happens.
  void drop_pages(const void* p, uint64_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t data_bytes_ = 0;
  std::string json_text_;
  Json meta_;
  std::map<std::string, std::map<std::string, TensorEntry>> tensors_;
};

}  // namespace trt_spec
