//===- LoadOnce.cpp - libraries loaded on first use -----------------------===//
#include "tessel/runtime/LoadOnce.h"
#include "tessel/runtime/Error.h"

using namespace tessel;

void rt::loadOnce(std::once_flag &once, std::string &failure, const std::function<void()> &load) {
  std::call_once(once, [&] {
    try {
      load();
    } catch (const Error &e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(failure);
}

bool rt::succeeds(const std::function<void()> &use, std::string *why) {
  try {
    use();
    return true;
  } catch (const Error &e) {
    if (why) *why = e.what();
    return false;
  }
}
