// errors.h: the exception types the runtime throws; the bindings map each to a Python class.
//
//   EngineFileError  -> trt_spec.EngineFileError (a ValueError): bad, truncated or foreign files
//   InvalidArgument  -> ValueError: bad request parameters, token ids, prompt lengths
//   Error            -> RuntimeError: anything else the runtime detects
#pragma once

#include <stdexcept>
#include <string>

namespace trt_spec {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct EngineFileError : Error {
  using Error::Error;
};
struct InvalidArgument : Error {
  using Error::Error;
};

}  // namespace trt_spec
