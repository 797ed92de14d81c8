// stop_strings.h: stop strings over a request's output text, as it grows token by token.
//
// The text is the UTF-8 bytes of the output tokens (the engine's token byte table; special
// tokens have no text). feed() appends a token's bytes and reports whether a stop string now
// occurs; the text is then cut where the earliest one begins. ready() hands out the text that
// can no longer become part of a stop string: everything but the longest suffix that is a proper
// prefix of some stop string (byte-level matching equals matching the decoded text, UTF-8 being
// self-synchronising).
#pragma once

#include <string>
#include <vector>

namespace trt_spec {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Appends bytes; true once a stop string occurs (later calls do nothing).
  bool feed(const std::string& bytes);
  bool hit() const { return hit_; }
  // Text that is final now (not handed out before); all of it once hit() or at the end.
  std::string ready(bool end = false);
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;
  size_t emitted_ = 0;
  bool hit_ = false;
};

}  // namespace trt_spec
