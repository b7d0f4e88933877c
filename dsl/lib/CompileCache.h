//===- CompileCache.h - pipeline results keyed by the tile IR ---*- C++ -*-===//
//
// What Tessel's passes and the CUDA emitter make of a program, kept in
// memory and in the kernel cache's directory, so that compiling a program
// seen before (in this process or an earlier one) skips the passes: the
// key is the tile IR before the pipeline, the target, whether TMA may be
// used, and the build of Tessel's compiler (a hash of its sources), so
// that any change to a pass misses. Entries carry a checksum; a damaged
// one is deleted and rebuilt. TESSEL_CACHE=off keeps only the memory,
// TESSEL_CACHE=none neither.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_DSL_COMPILECACHE_H
#define TESSEL_DSL_COMPILECACHE_H

#include "tessel/dsl/Compile.h"
#include "tessel/runtime/KernelSpec.h"
#include "tessel/runtime/LazyText.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Location.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessel::detail {

struct CompiledIr {
  /// Read from the entry when first asked for (dumps, --emit lowered).
  std::shared_ptr<rt::LazyText> lowered;
  std::shared_ptr<const std::string> source;
  rt::KernelSpec spec;
  /// Without their pictures: a hit draws them from the layout text.
  std::vector<BufferLayout> layouts;
  /// The compile's remarks, each with the position (in a walk of the tile
  /// IR before the pipeline) of the first op at its location, or -1: a
  /// hit may come from the same IR built at other lines, and takes the
  /// location from its own op at that position.
  std::vector<std::pair<Remark, int64_t>> remarks;
};

/// The key of `tileIr` compiled for `arch` (with `tma`) by this build.
std::string compiledIrKey(const std::string &tileIr, const std::string &arch, bool tma);
/// The entry for `key`, or null. `lowerAgain` gives the lowered IR should
/// the entry's copy be gone by the time it is asked for.
std::shared_ptr<const CompiledIr> findCompiledIr(const std::string &key,
                                                 std::function<std::string()> lowerAgain);
void storeCompiledIr(const std::string &key, const CompiledIr &entry);

/// `remarks` (each with its op's location) as an entry keeps them: each
/// with the walk position in `module` (the tile IR before the pipeline) of
/// the first op at its location, and the op locations its message names
/// made positions too.
std::vector<std::pair<Remark, int64_t>>
remarksForEntry(const std::vector<std::pair<Remark, mlir::Location>> &remarks,
                mlir::ModuleOp module);
/// An entry's remarks for `module`, built from the same tile IR: each at
/// its op there, naming the ops there.
std::vector<Remark> remarksFromEntry(const CompiledIr &entry, mlir::ModuleOp module);

} // namespace tessel::detail

#endif
