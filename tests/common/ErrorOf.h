//===- ErrorOf.h - the message a call fails with ----------------*- C++ -*-===//
#ifndef TESSEL_TESTS_COMMON_ERROROF_H
#define TESSEL_TESTS_COMMON_ERROROF_H

#include "tessel/runtime/Error.h"

#include <functional>
#include <string>

namespace tessel::test {

/// What `fn` throws as a tessel::Error, or "(no error)": tests match the
/// message a user would see.
inline std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace tessel::test

#endif
