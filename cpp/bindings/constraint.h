// constraint.h (bindings): engine/constraint.h's TokenConstraint as a Python base class whose
// subclasses (trt_spec/grammar.py) implement masks() and commit(), and the holder a request keeps.
//
// The scheduler calls a constraint from its step, which runs with the GIL released: the
// trampoline takes the GIL for each call, and the holder (PyConstraintRef) drops its reference to
// the Python object under the GIL wherever the last copy of the request dies.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>
#include <nanobind/trampoline.h>

#include <memory>
#include <vector>

#include "engine/constraint.h"

namespace trt_spec::bindings {

namespace nb = nanobind;
using namespace nb::literals;

// Python subclasses' methods, called from C++.
struct PyTokenConstraint : TokenConstraint {
  NB_TRAMPOLINE(TokenConstraint);

  void masks(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
             MaskRows out) override {
    nb::gil_scoped_acquire gil;
    const size_t shape[2] = {static_cast<size_t>(out.rows), static_cast<size_t>(out.words)};
    nb::ndarray<nb::numpy, uint32_t, nb::ndim<2>> view(out.bits, 2, shape, nb::handle());
    // (a view of out's memory, not a copy: the Python side writes the masks in place)
    nb::object arr = nb::cast(view, nb::rv_policy::reference);
    nb::detail::ticket t(nb_trampoline, "masks", nb::detail::str_hash("masks"), true);
    nb_trampoline.base().attr(t.key)(tokens, parents, arr);
  }
  void commit(const std::vector<int32_t>& tokens) override {
    nb::gil_scoped_acquire gil;
    nb::detail::ticket t(nb_trampoline, "commit", nb::detail::str_hash("commit"), true);
    nb_trampoline.base().attr(t.key)(tokens);
  }
  std::vector<int32_t> forced(int max_tokens) override {
    nb::gil_scoped_acquire gil;
    nb::detail::ticket t(nb_trampoline, "forced", nb::detail::str_hash("forced"), false);
    if (!t.key.is_valid()) return TokenConstraint::forced(max_tokens);
    return nb::cast<std::vector<int32_t>>(nb_trampoline.base().attr(t.key)(max_tokens));
  }
};

// What a request holds: the Python object (kept alive) and its C++ face.
struct PyConstraintRef final : TokenConstraint {
  nb::object obj;
  TokenConstraint* impl;
  PyConstraintRef(nb::object o, TokenConstraint* i) : obj(std::move(o)), impl(i) {}
  ~PyConstraintRef() override {
    nb::gil_scoped_acquire gil;
    obj.reset();
  }
  void masks(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
             MaskRows out) override {
    impl->masks(tokens, parents, out);
  }
  void commit(const std::vector<int32_t>& tokens) override { impl->commit(tokens); }
  std::vector<int32_t> forced(int max_tokens) override { return impl->forced(max_tokens); }
};

inline void bind_token_constraint(nb::module_& m) {
  nb::class_<TokenConstraint, PyTokenConstraint>(
      m, "TokenConstraint",
      "Base class of a request's token constraint (structured output): override "
      "masks(tokens, parents, out) and commit(tokens) (engine/constraint.h)")
      .def(nb::init<>())
      .def(
          "masks",
          [](TokenConstraint& c, const std::vector<int32_t>& tokens,
             const std::vector<int32_t>& parents,
             nb::ndarray<uint32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> out) {
            c.masks(tokens, parents,
                    MaskRows{out.data(), static_cast<int>(out.shape(0)),
                             static_cast<int>(out.shape(1))});
          },
          "tokens"_a, "parents"_a, "out"_a,
          "Fill out [1 + len(tokens), words] (uint32 bits): row 0 after the text, row 1 + i "
          "after draft node i's path (parents[i]: -1 the root)")
      .def("commit", &TokenConstraint::commit, "tokens"_a, "Tokens that became final")
      .def("forced", &TokenConstraint::forced, "max_tokens"_a,
           "Up to max_tokens tokens forced next (default: none)");
}

// The holder of a Python TokenConstraint (None: no constraint).
inline std::shared_ptr<TokenConstraint> constraint_ref(nb::object o) {
  if (o.is_none()) return nullptr;
  TokenConstraint* impl = nb::cast<TokenConstraint*>(o);
  return std::make_shared<PyConstraintRef>(std::move(o), impl);
}

}  // namespace trt_spec::bindings
