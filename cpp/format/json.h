// json.h: a small JSON reader for the engine file's metadata block.
//
// The runtime only reads JSON that the builder wrote, but the file may be corrupt, so every
// accessor checks its type and throws EngineFileError naming the key. Numbers are doubles
// (offsets stay exact below 2^53 bytes).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace trt_spec {

class Json {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  static Json parse(const std::string& text);  // throws EngineFileError on malformed input

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool has(const std::string& key) const;

  // Typed access; `what` names the value in error messages.
  const Json& at(const std::string& key) const;
  const Json& at(size_t i) const;
  size_t size() const;
  bool as_bool() const;
  double as_number() const;
  int64_t as_int() const;  // a number that must be integral
  const std::string& as_string() const;
  const std::map<std::string, Json>& as_object() const;
  const std::vector<Json>& as_array() const;

  // Lookups with a default when the key is absent (still type-checked when present).
  int64_t get_int(const std::string& key, int64_t dflt) const;
  double get_number(const std::string& key, double dflt) const;
  bool get_bool(const std::string& key, bool dflt) const;
  std::string get_string(const std::string& key, const std::string& dflt) const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::Null;
  bool b_ = false;
  double num_ = 0.0;
  std::string str_;
  std::vector<Json> arr_;
  std::map<std::string, Json> obj_;
  std::string path_;  // where this value sits, for error messages
};

}  // namespace trt_spec
