// json.cpp: Json (json.h) over nlohmann::json: the parse with its depth limit, the mapping of the
// library's exceptions to EngineFileError, and the type-checked accessors.
#include "format/json.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/errors.h"

namespace trt_spec {

namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest is plain English
// ("parse error at line 1, column 2: syntax error while parsing object key - ..."). They quote
// the bytes last read, which may be invalid UTF-8 (Python could not decode the message), so any
// byte outside printable ASCII is written as \xNN.
std::string library_message(const std::exception& e) {
  std::string s = e.what();
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

struct TooDeep {};  // thrown by the parse callback, turned into EngineFileError below

}  // namespace

Json::Json() = default;

Json::Json(std::shared_ptr<const nlohmann::json> doc, const nlohmann::json* node, std::string path)
    : doc_(std::move(doc)), node_(node), path_(std::move(path)) {}

Json Json::parse(const std::string& text) {
  auto doc = std::make_shared<nlohmann::json>();
  try {
    *doc =
        nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMaxDepth) throw TooDeep{};
          return true;
        });
  } catch (const TooDeep&) {
    throw EngineFileError("engine metadata is not valid JSON (nesting deeper than " +
                          std::to_string(kMaxDepth) + " levels)");
  } catch (const nlohmann::json::exception& e) {
    throw EngineFileError("engine metadata is not valid JSON (" + library_message(e) + ")");
  }
  const nlohmann::json* root = doc.get();
  return Json(std::move(doc), root, "$");
}

void Json::type_error(const char* want) const {
  throw EngineFileError("engine metadata: " + path_ + " should be " + want);
}

bool Json::is_null() const {
  return node_ == nullptr || node_->is_null();
}

bool Json::has(const std::string& key) const {
  return node_ != nullptr && node_->is_object() && node_->contains(key);
}

Json Json::at(const std::string& key) const {
  if (node_ == nullptr || !node_->is_object()) type_error("an object");
  auto it = node_->find(key);
  if (it == node_->end()) throw EngineFileError("engine metadata: missing " + path_ + "." + key);
  return Json(doc_, &*it, path_ + "." + key);
}

Json Json::at(size_t i) const {
  if (node_ == nullptr || !node_->is_array()) type_error("an array");
  if (i >= node_->size()) throw EngineFileError("engine metadata: " + path_ + " is too short");
  return Json(doc_, &(*node_)[i], path_ + "[" + std::to_string(i) + "]");
}

size_t Json::size() const {
  if (node_ == nullptr || !(node_->is_array() || node_->is_object()))
    type_error("an array or object");
  return node_->size();
}

bool Json::as_bool() const {
  if (node_ == nullptr || !node_->is_boolean()) type_error("a boolean");
  return node_->get<bool>();
}

double Json::as_number() const {
  if (node_ == nullptr || !node_->is_number()) type_error("a number");
  const double d = node_->get<double>();
  if (!std::isfinite(d)) type_error("a finite number");
  return d;
}

int64_t Json::as_int() const {
  if (node_ == nullptr || !node_->is_number()) type_error("a number");
  if (node_->is_number_integer() && !node_->is_number_unsigned()) return node_->get<int64_t>();
  if (node_->is_number_unsigned()) {
    const uint64_t u = node_->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) type_error("an integer");
    return static_cast<int64_t>(u);
  }
  // A float such as 4.0: accepted when integral and exactly representable (below 2^53).
  const double d = node_->get<double>();
  if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9007199254740992.0)
    type_error("an integer");
  return static_cast<int64_t>(d);
}

std::string Json::as_string() const {
  if (node_ == nullptr || !node_->is_string()) type_error("a string");
  return node_->get_ref<const std::string&>();
}

std::vector<std::pair<std::string, Json>> Json::items() const {
  if (node_ == nullptr || !node_->is_object()) type_error("an object");
  std::vector<std::pair<std::string, Json>> out;
  out.reserve(node_->size());
  for (auto it = node_->begin(); it != node_->end(); ++it)
    out.emplace_back(it.key(), Json(doc_, &it.value(), path_ + "." + it.key()));
  return out;
}

int64_t Json::get_int(const std::string& key, int64_t dflt) const {
  return has(key) && !at(key).is_null() ? at(key).as_int() : dflt;
}
double Json::get_number(const std::string& key, double dflt) const {
  return has(key) && !at(key).is_null() ? at(key).as_number() : dflt;
}
bool Json::get_bool(const std::string& key, bool dflt) const {
  return has(key) && !at(key).is_null() ? at(key).as_bool() : dflt;
}
std::string Json::get_string(const std::string& key, const std::string& dflt) const {
  return has(key) && !at(key).is_null() ? at(key).as_string() : dflt;
}

}  // namespace trt_spec
