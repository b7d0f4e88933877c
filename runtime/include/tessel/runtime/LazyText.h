//===- LazyText.h - text read on first use ----------------------*- C++ -*-===//
//
// Parts of a cached kernel that launching does not need (its PTX, its
// lowered IR) stay on disk until asked for: a warm compile of a large
// kernel would otherwise spend most of its time reading them.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_LAZYTEXT_H
#define TESSEL_RUNTIME_LAZYTEXT_H

#include <functional>
#include <mutex>
#include <string>

namespace tessel::rt {

class LazyText {
public:
  explicit LazyText(std::function<std::string()> load) : load(std::move(load)) {}
  /// The text, loaded by the first caller (others wait for it). A load
  /// that throws is retried by the next call.
  const std::string &get() {
    std::call_once(once, [this] {
      text = load();
      load = nullptr;
    });
    return text;
  }

private:
  std::once_flag once;
  std::function<std::string()> load;
  std::string text;
};

} // namespace tessel::rt

#endif
