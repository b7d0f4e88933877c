//===- LoadOnce.h - libraries loaded on first use ---------------*- C++ -*-===//
//
// The CUDA driver and NCCL are opened when first needed, once per process.
// A failure is kept and reported again at every later use, so that a
// missing library is the same clear error each time rather than a crash.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_LOADONCE_H
#define TESSEL_RUNTIME_LOADONCE_H

#include <functional>
#include <mutex>
#include <string>

namespace tessel::rt {
/// Runs `load` the first time; throws the tessel::Error it threw (then or at
/// any later call) as long as it failed.
void loadOnce(std::once_flag &once, std::string &failure, const std::function<void()> &load);
/// Whether `use` runs without a tessel::Error; its message in `why` if not.
bool succeeds(const std::function<void()> &use, std::string *why);
} // namespace tessel::rt

#endif
