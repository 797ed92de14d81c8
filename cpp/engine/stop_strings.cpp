// stop_strings.cpp: StopMatcher (stop_strings.h).
#include "engine/stop_strings.h"

#include <algorithm>

namespace trt_spec {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

bool StopMatcher::feed(const std::string& bytes) {
  if (hit_) return true;
  const size_t before = text_.size();
  text_ += bytes;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    // Only occurrences that end in the new bytes are new.
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut == std::string::npos) return false;
  text_.resize(std::max(cut, emitted_));
  hit_ = true;
  return true;
}

std::string StopMatcher::ready(bool end) {
  size_t upto = text_.size();
  if (!end && !hit_) {
    // Hold back the longest suffix that could still grow into a stop string.
    for (const std::string& s : stops_)
      for (size_t n = std::min(s.size() - 1, text_.size()); n > 0; --n)
        if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
          upto = std::min(upto, text_.size() - n);
          break;
        }
  }
  upto = std::max(upto, emitted_);
  std::string out = text_.substr(emitted_, upto - emitted_);
  emitted_ = upto;
  return out;
}

}  // namespace trt_spec
