// common.h: helpers shared by the two nanobind modules (core.cpp: the public trt_spec._core;
// testing.cpp: the test-only module): numpy results, weight blobs, exception translation.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kernels/weight_format.h"

namespace trt_spec::bindings {

namespace nb = nanobind;

template <typename T, int D>
using HostArray = nb::ndarray<const T, nb::ndim<D>, nb::c_contig, nb::device::cpu>;
using U8Array = HostArray<uint8_t, 1>;

// A numpy array owning a moved-in vector.
template <typename T>
nb::ndarray<nb::numpy, T> owned_array(std::vector<T>&& v, std::initializer_list<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner);
}

inline void check_blob(const U8Array& blob, WeightType t, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) throw InvalidArgument("rows and cols must be positive");
  if (weight_type_needs_groups(t) && cols % kQ4SuperBlock != 0)
    throw InvalidArgument("q8/q4 need cols to be a multiple of 64");
  if (blob.shape(0) != weight_blob_bytes(t, rows, cols))
    throw InvalidArgument("blob has " + std::to_string(blob.shape(0)) + " bytes, expected " +
                          std::to_string(weight_blob_bytes(t, rows, cols)));
}

// A 64-byte aligned copy of a blob (kernels assume aligned sections).
inline std::shared_ptr<uint8_t> aligned_copy(const U8Array& blob) {
  const size_t n = align_up(blob.shape(0), 64);
  std::shared_ptr<uint8_t> p(static_cast<uint8_t*>(std::aligned_alloc(64, n)), std::free);
  std::memcpy(p.get(), blob.data(), blob.shape(0));
  return p;
}

// InvalidArgument (and std::invalid_argument) -> ValueError; other runtime Errors keep
// nanobind's default (RuntimeError).
inline void register_value_errors() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace trt_spec::bindings
