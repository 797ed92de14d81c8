// json.cpp: recursive-descent parser for json.h (RFC 8259, UTF-8 passed through as bytes).
#include "format/json.h"

#include <cmath>
#include <cstdlib>

#include "common/errors.h"

namespace trt_spec {

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}

  Json parse_document() {
    Json v = parse_value("$", 0);
    skip_ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& why) const {
    throw EngineFileError("engine metadata is not valid JSON (" + why + " at byte " +
                          std::to_string(i_) + ")");
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(i_, n, word) == 0) {
      i_ += n;
      return true;
    }
    return false;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        fail("bad \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    if (!eat('"')) fail("expected string");
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') break;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!(literal("\\u"))) fail("lone surrogate");
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
    return out;
  }

  bool digit_at(size_t k) const { return k < s_.size() && s_[k] >= '0' && s_[k] <= '9'; }

  // RFC 8259 number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  double parse_number() {
    size_t start = i_;
    if (s_[i_] == '-') ++i_;
    if (!digit_at(i_)) fail("bad number");
    if (s_[i_] == '0') {
      ++i_;
      if (digit_at(i_)) fail("number with a leading zero");
    } else {
      while (digit_at(i_)) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digit_at(i_)) fail("bad number");
      while (digit_at(i_)) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit_at(i_)) fail("bad number");
      while (digit_at(i_)) ++i_;
    }
    std::string num = s_.substr(start, i_ - start);
    double d = std::strtod(num.c_str(), nullptr);
    if (!std::isfinite(d)) fail("number out of range");
    return d;
  }

  Json parse_value(const std::string& path, int depth) {
    if (depth > 64) fail("nesting too deep");
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    v.path_ = path;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind_ = Json::Kind::Object;
      if (eat('}')) return v;
      do {
        skip_ws();
        std::string key = parse_string();
        expect(':');
        Json child = parse_value(path + "." + key, depth + 1);
        v.obj_[key] = std::move(child);
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind_ = Json::Kind::Array;
      if (eat(']')) return v;
      do {
        v.arr_.push_back(parse_value(path + "[" + std::to_string(v.arr_.size()) + "]", depth + 1));
      } while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.kind_ = Json::Kind::String;
      v.str_ = parse_string();
    } else if (literal("true")) {
      v.kind_ = Json::Kind::Bool;
      v.b_ = true;
    } else if (literal("false")) {
      v.kind_ = Json::Kind::Bool;
    } else if (literal("null")) {
      v.kind_ = Json::Kind::Null;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind_ = Json::Kind::Number;
      v.num_ = parse_number();
    } else {
      fail("unexpected character");
    }
    return v;
  }
};

Json Json::parse(const std::string& text) {
  return JsonParser(text).parse_document();
}

namespace {
[[noreturn]] void type_error(const std::string& path, const char* want) {
  throw EngineFileError("engine metadata: " + path + " should be " + want);
}
}  // namespace

bool Json::has(const std::string& key) const {
  return kind_ == Kind::Object && obj_.count(key) != 0;
}

const Json& Json::at(const std::string& key) const {
  if (kind_ != Kind::Object) type_error(path_, "an object");
  auto it = obj_.find(key);
  if (it == obj_.end()) throw EngineFileError("engine metadata: missing " + path_ + "." + key);
  return it->second;
}

const Json& Json::at(size_t i) const {
  if (kind_ != Kind::Array) type_error(path_, "an array");
  if (i >= arr_.size()) throw EngineFileError("engine metadata: " + path_ + " is too short");
  return arr_[i];
}

size_t Json::size() const {
  if (kind_ == Kind::Array) return arr_.size();
  if (kind_ == Kind::Object) return obj_.size();
  type_error(path_, "an array or object");
}

bool Json::as_bool() const {
  if (kind_ != Kind::Bool) type_error(path_, "a boolean");
  return b_;
}

double Json::as_number() const {
  if (kind_ != Kind::Number) type_error(path_, "a number");
  return num_;
}

int64_t Json::as_int() const {
  double d = as_number();
  if (std::floor(d) != d || std::fabs(d) > 9007199254740992.0) type_error(path_, "an integer");
  return static_cast<int64_t>(d);
}

const std::string& Json::as_string() const {
  if (kind_ != Kind::String) type_error(path_, "a string");
  return str_;
}

const std::map<std::string, Json>& Json::as_object() const {
  if (kind_ != Kind::Object) type_error(path_, "an object");
  return obj_;
}

const std::vector<Json>& Json::as_array() const {
  if (kind_ != Kind::Array) type_error(path_, "an array");
  return arr_;
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
