//===- Nvrtc.h - CUDA C++ to cubin at run time ------------------*- C++ -*-===//
#ifndef TESSEL_RUNTIME_NVRTC_H
#define TESSEL_RUNTIME_NVRTC_H

#include "tessel/runtime/Error.h"
#include "tessel/runtime/LazyText.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessel::rt {

struct Binary {
  std::string cubin;
  /// Empty when a cache entry left it on disk: read it through ptxText().
  std::string ptx;
  /// ptxas's "Potential Performance Loss" notes, one per line (wgmmas
  /// serialized, setmaxnreg ignored, ...): the code runs, but slower than
  /// written.
  std::string performanceWarnings;
  /// Bytes of register spill stores and loads ptxas reports (summed over
  /// the module's functions).
  int64_t spillStoreBytes = 0, spillLoadBytes = 0;
  /// The PTX of a binary found in the disk cache, read on first use.
  std::shared_ptr<LazyText> lazyPtx;
  const std::string &ptxText() const { return lazyPtx ? lazyPtx->get() : ptx; }
};

/// "major.minor" of the linked NVRTC.
std::string nvrtcVersion();
/// Tessel's embedded device header.
const char *deviceHeader();
/// The sm_100a-emu target's tcgen05 emulation (tessel_tcgen05_emu.h).
const char *tcgen05EmulationHeader();
/// NVRTC rejected a generated translation unit. The message is NVRTC's log,
/// each diagnostic about the generated source followed by the line it
/// points at; `line` is the generated line of the first error (1-based; 0
/// where the log names none), for callers that know what it was printed for.
class NvrtcError : public Error {
public:
  NvrtcError(const std::string &message, int line) : Error(message), line(line) {}
  int line;
};

/// Compiles a Tessel-generated translation unit for `arch` (sm_80, sm_90a,
/// sm_100a). Throws NvrtcError when NVRTC rejects it. ptxas reports in the
/// log, which is how its performance warnings reach the Binary.
Binary compileCuda(const std::string &source, const std::string &arch,
                   const std::vector<std::string> &options = {});

} // namespace tessel::rt

#endif
