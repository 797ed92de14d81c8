// json.h: typed, path-aware access to the engine file's JSON metadata. Parsing is done by
// nlohmann/json (third_party/nlohmann, v3.11.3); this class only adds what the loader needs on
// top: every accessor checks the value's type and throws EngineFileError naming where the value
// sits ("$.models.target.config.dim should be an integer"), so a corrupt or hand-edited file never
// escapes as a library exception. A Json is a cheap view (shared document + node pointer + path).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace trt_spec {

class Json {
 public:
  static constexpr int kMaxDepth = 64;  // deeper documents are rejected while parsing

  Json();  // a null value
  // Parses RFC 8259 JSON (UTF-8); throws EngineFileError "engine metadata is not valid JSON (...)".
  static Json parse(const std::string& text);

  const std::string& path() const { return path_; }
  bool is_null() const;
  bool has(const std::string& key) const;  // an object holding `key`

  // Typed access; each throws EngineFileError naming path() when the type or key is wrong.
  Json at(const std::string& key) const;
  Json at(size_t i) const;
  size_t size() const;  // of an array or object
  bool as_bool() const;
  double as_number() const;  // finite
  int64_t as_int() const;    // an integer (or an integral number) in int64 range
  std::string as_string() const;
  std::vector<std::pair<std::string, Json>> items() const;  // an object's members, by key

  // Lookups with a default when the key is absent or null (still type-checked when present).
  int64_t get_int(const std::string& key, int64_t dflt) const;
  double get_number(const std::string& key, double dflt) const;
  bool get_bool(const std::string& key, bool dflt) const;
  std::string get_string(const std::string& key, const std::string& dflt) const;

 private:
  Json(std::shared_ptr<const nlohmann::json> doc, const nlohmann::json* node, std::string path);
  [[noreturn]] void type_error(const char* want) const;

  std::shared_ptr<const nlohmann::json> doc_;  // keeps the parsed document alive
  const nlohmann::json* node_ = nullptr;       // null: a null value outside any document
  std::string path_ = "$";
};

}  // namespace trt_spec
