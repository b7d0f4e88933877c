//===- Nccl.h - NCCL, loaded at run time -------------------------*- C++ -*-===//
//
// Like the driver, NCCL is opened with dlopen when first needed, so Tessel's
// binaries run where it is missing and say so when a collective is asked
// for. The library is $TESSEL_NCCL_LIBRARY when set, else libnccl.so.2 on the
// loader path; its types come from the toolkit's nccl.h. Every rank of a job
// must load the same NCCL.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_NCCL_H
#define TESSEL_RUNTIME_NCCL_H

#include <nccl.h>
#include <string>

namespace tessel::rt {

struct NcclApi {
#define TESSEL_NCCL_FN(name) decltype(&::name) name = nullptr;
#include "tessel/runtime/NcclFunctions.def"
};

class Nccl {
public:
  /// NCCL, loaded on first use. Throws tessel::Error saying which library
  /// was tried and why it could not be used.
  static Nccl &get();
  static bool available(std::string *why = nullptr);

  const NcclApi &api() const { return fns; }
  /// The loaded library's path and version ("2.28.3").
  const std::string &path() const { return where; }
  std::string version() const;
  /// Throws tessel::Error naming `call`, NCCL's explanation and, with a
  /// communicator, its last error.
  void check(ncclResult_t result, const char *call, ncclComm_t comm = nullptr) const;

private:
  Nccl() = default;
  void load();
  NcclApi fns;
  std::string where;
  int versionCode = 0;
};

#define TESSEL_NCCL(nccl, call, ...) (nccl).check((nccl).api().call(__VA_ARGS__), #call)

} // namespace tessel::rt

#endif
