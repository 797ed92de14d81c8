// engine_file.cpp: header checks, JSON parse, tensor table and checksums (engine_file.h).
#include "format/engine_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errors.h"

namespace trt_spec {

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;

template <typename T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint64_t parse_hex64(const std::string& s, const std::string& tensor) {
  if (s.empty() || s.size() > 16)
    throw EngineFileError("engine metadata: tensor " + tensor + " has a malformed checksum");
  uint64_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (d < 0)
      throw EngineFileError("engine metadata: tensor " + tensor + " has a malformed checksum");
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

std::string hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

WeightType weight_type_from_name(const std::string& name) {
  for (WeightType t :
       {WeightType::F32, WeightType::F16, WeightType::BF16, WeightType::Q8, WeightType::Q4}) {
    if (name == weight_type_name(t)) return t;
  }
  throw EngineFileError("unsupported tensor type '" + name + "' in engine file");
}

EngineFile::EngineFile(const std::string& path, bool verify_checksums) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw EngineFileError("cannot open engine file " + path + ": " + strerror(errno));
  struct stat st{};
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw EngineFileError(path + " is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < kEngineHeaderBytes) {
    ::close(fd_);
    throw EngineFileError(path + " is too small to be a trt-spec engine (" + std::to_string(size_) +
                          " bytes)");
  }
  void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) {
    ::close(fd_);
    throw EngineFileError("cannot map engine file " + path + ": " + strerror(errno));
  }
  base_ = static_cast<const uint8_t*>(m);
  try {
    if (std::memcmp(base_, kEngineMagic, 8) != 0)
      throw EngineFileError(path + " is not a trt-spec engine (wrong magic bytes)");
    uint32_t version = read_le<uint32_t>(base_ + 8);
    if (version < kEngineFormatOldestVersion || version > kEngineFormatVersion)
      throw EngineFileError(
          path + " has engine format version " + std::to_string(version) +
          (version < kEngineFormatOldestVersion ? " (an older trt-spec built it)"
                                                : " (a newer trt-spec built it)") +
          "; this trt-spec reads versions " + std::to_string(kEngineFormatOldestVersion) + " to " +
          std::to_string(kEngineFormatVersion) + " only: rebuild the engine with this trt-spec");
    if (read_le<uint32_t>(base_ + 12) != 0)
      throw EngineFileError(path +
                            " uses engine features this trt-spec does not know (header "
                            "flags set): rebuild the engine or update trt-spec");
    uint64_t json_offset = read_le<uint64_t>(base_ + 16);
    uint64_t json_bytes = read_le<uint64_t>(base_ + 24);
    data_offset_ = read_le<uint64_t>(base_ + 32);
    data_bytes_ = read_le<uint64_t>(base_ + 40);
    uint64_t json_sum = read_le<uint64_t>(base_ + 48);
    if (json_offset < kEngineHeaderBytes || json_offset > size_ || json_bytes > size_ - json_offset)
      throw EngineFileError(path + " is truncated or corrupt (metadata out of bounds)");
    const bool overlap =
        json_offset < data_offset_ + data_bytes_ && data_offset_ < json_offset + json_bytes;
    if (data_offset_ % kDataAlign != 0 || data_offset_ < kEngineHeaderBytes || overlap ||
        data_offset_ > size_ || data_bytes_ > size_ - data_offset_)
      throw EngineFileError(path +
                            " is truncated or corrupt (tensor data out of bounds: file has " +
                            std::to_string(size_) + " bytes, header promises " +
                            std::to_string(data_offset_ + data_bytes_) + ")");
    json_text_.assign(reinterpret_cast<const char*>(base_ + json_offset), json_bytes);
    if (checksum64(json_text_.data(), json_text_.size()) != json_sum)
      throw EngineFileError(path + " is corrupt (metadata checksum mismatch)");
    meta_ = Json::parse(json_text_);
    if (meta_.at("format_version").as_int() != static_cast<int64_t>(version))
      throw EngineFileError(path + ": metadata format_version disagrees with the header");

    // The models' tensors, and those of the engine's draft heads (version 5) under their own
    // role, "draft_heads".
    std::vector<std::pair<std::string, Json>> roles;
    for (const auto& [role, model] : meta_.at("models").items()) roles.emplace_back(role, model);
    if (meta_.has("draft_heads")) {
      if (version < kEngineFormatDraftHeadsVersion)
        throw EngineFileError(path + ": draft heads need engine format version " +
                              std::to_string(kEngineFormatDraftHeadsVersion) +
                              "; the header says " + std::to_string(version));
      roles.emplace_back("draft_heads", meta_.at("draft_heads"));
    }
    for (const auto& [role, model] : roles) {
      auto& table = tensors_[role];
      const bool random = model.has("random_weights");
      if (random && version < kEngineFormatRandomWeightsVersion)
        throw EngineFileError(path + ": the " + role +
                              " model has random weights, which need engine format version 4; "
                              "the header says " +
                              std::to_string(version));
      const uint64_t seed =
          random ? static_cast<uint64_t>(model.at("random_weights").at("seed").as_int()) : 0;
      for (const auto& [name, t] : model.at("tensors").items()) {
        TensorEntry e;
        e.name = name;
        e.type = weight_type_from_name(t.at("type").as_string());
        const Json shape = t.at("shape");
        if (shape.size() == 1) {
          e.rows = 1;
          e.cols = shape.at(0).as_int();
        } else if (shape.size() == 2) {
          e.rows = shape.at(0).as_int();
          e.cols = shape.at(1).as_int();
        } else {
          throw EngineFileError("tensor " + name + " has rank " + std::to_string(shape.size()));
        }
        e.bytes = static_cast<uint64_t>(t.at("bytes").as_int());
        e.random = random;
        if (random) {
          const std::string id = role + "/" + name;
          e.random_key = xxh64(id.data(), id.size(), seed);
        } else {
          e.offset = static_cast<uint64_t>(t.at("offset").as_int());
          e.checksum = parse_hex64(t.at("checksum").as_string(), name);
        }
        if (e.rows <= 0 || e.cols <= 0)
          throw EngineFileError("tensor " + name + " has an empty shape");
        if (e.rows > kMaxDim || e.cols > kMaxDim)  // keeps rows * cols * 4 far from overflow
          throw EngineFileError("tensor " + name + " has a dimension above 2^31");
        if (weight_type_needs_groups(e.type) && e.cols % kQ4SuperBlock != 0)
          throw EngineFileError("tensor " + name + ": quantized columns must be a multiple of 64");
        if (e.bytes != weight_blob_bytes(e.type, e.rows, e.cols))
          throw EngineFileError("tensor " + name + ": byte size does not match its shape and type");
        if (random) {
          table.emplace(name, e);
          continue;
        }
        if (e.offset % kSectionAlign != 0 || e.offset > data_bytes_ ||
            e.bytes > data_bytes_ - e.offset)
          throw EngineFileError(path + " is truncated or corrupt (tensor " + name +
                                " lies outside the data block)");
        if (verify_checksums && checksum64(data() + e.offset, e.bytes) != e.checksum)
          throw EngineFileError(path + " is corrupt (checksum mismatch in tensor " + role + "/" +
                                name + ": stored " + hex64(e.checksum) + ")");
        table.emplace(name, e);
      }
      if (version < kEngineFormatHeadVocabVersion && model.at("config").has("head_vocab"))
        throw EngineFileError(path + ": the " + role +
                              " model has a reduced output head (head_vocab), which needs engine "
                              "format version 3; the header says " +
                              std::to_string(version));
    }
    if (!has_model("target")) throw EngineFileError(path + " holds no target model");
  } catch (...) {
    munmap(const_cast<uint8_t*>(base_), size_);
    ::close(fd_);
    throw;
  }
}

void EngineFile::drop_pages(const void* p, uint64_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(base_);
  if (at < base || at + bytes > base + size_) return;  // not this mapping's bytes
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (at + page - 1) / page * page, end = (at + bytes) / page * page;
  if (end > first)  // (advice: a failure leaves the pages mapped, which is harmless)
    madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

EngineFile::~EngineFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

bool EngineFile::has_model(const std::string& role) const {
  return tensors_.count(role) != 0;
}

const std::map<std::string, TensorEntry>& EngineFile::tensors(const std::string& role) const {
  auto it = tensors_.find(role);
  if (it == tensors_.end()) throw EngineFileError("engine file holds no " + role + " model");
  return it->second;
}

const TensorEntry& EngineFile::tensor(const std::string& role, const std::string& name) const {
  const auto& t = tensors(role);
  auto it = t.find(name);
  if (it == t.end()) throw EngineFileError("engine file: " + role + " model lacks tensor " + name);
  return it->second;
}

}  // namespace trt_spec
