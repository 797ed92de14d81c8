// constraint.h: a request's token constraint (structured output: a JSON schema, a regex, a
// grammar), which tokens may come next after a given text. The grammar engine lives in Python
// (trt_spec/grammar.py, bound through the bindings' trampoline); the scheduler asks it, once per
// iteration and constrained sequence, for the masks of that iteration's verify rows, and tells it
// which tokens became final. The masks apply to the target's logits before acceptance (a token
// they forbid gets -inf), so a forbidden draft token is rejected as if the target never drew it
// and every emitted token is drawn from the masked distribution: speculation changes nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace trt_spec {

// Rows of token bits: bit x of row r (word x / 32, bit x % 32) set where token x is allowed.
struct MaskRows {
  uint32_t* bits;  // [rows, words]
  int rows;
  int words;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Fills out.rows rows: row 0 the tokens allowed after the text so far, row 1 + i those after
  // the path to draft node i (parents[i]: its parent, -1 the root; tokens[i]: its token; a
  // parent's index is lower). A row whose path the constraint forbids may hold anything. Every
  // row must allow at least one token.
  virtual void masks(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
                     MaskRows out) = 0;
  // The tokens that became final, in order (the first token, then each iteration's).
  virtual void commit(const std::vector<int32_t>& tokens) = 0;
  // Up to max_tokens tokens the constraint forces next (jump-forward): proposed as certain
  // draft tokens, verified like any other. None by default.
  virtual std::vector<int32_t> forced(int max_tokens) { return {}; }
};

}  // namespace trt_spec
