//===- Error.h - the error type of Tessel's C++ API -------------*- C++ -*-===//
#ifndef TESSEL_RUNTIME_ERROR_H
#define TESSEL_RUNTIME_ERROR_H

#include <stdexcept>
#include <string>

namespace tessel {
/// Every failure a user can act on: misuse of the DSL (with the user's
/// file:line), compile errors, driver and NVRTC failures (with the call).
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};
} // namespace tessel

#endif
