//===- InputGuards.h - input the MLIR 22 parser cannot take -----*- C++ -*-===//
//
// MLIR 22's attribute parser crashes (a segfault, no message) on a dense
// array of `index` elements, `array<index: ...>`: DenseArrayAttr has no index
// form. Tessel's attributes use i64 arrays, so such text is never valid
// input; the tools reject it with a located error before parsing.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TOOLS_INPUTGUARDS_H
#define TESSEL_TOOLS_INPUTGUARDS_H

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/SourceMgr.h"

namespace tessel {
/// Prints an error at each construct of `buffer` the parser cannot take and
/// returns true if there was one.
inline bool rejectUnparsableInput(const llvm::MemoryBuffer &buffer) {
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBuffer(buffer.getMemBufferRef(), false),
                             llvm::SMLoc());
  llvm::Regex indexArray("array[[:space:]]*<[[:space:]]*index([^_[:alnum:]]|$)");
  llvm::StringRef text = buffer.getBuffer();
  bool found = false;
  for (size_t at = 0; at < text.size();) {
    llvm::SmallVector<llvm::StringRef, 2> match;
    if (!indexArray.match(text.substr(at), &match)) break;
    const char *where = match[0].data();
    sources.PrintMessage(llvm::SMLoc::getFromPointer(where), llvm::SourceMgr::DK_Error,
                         "dense arrays of index (array<index: ...>) are not supported; use "
                         "array<i64: ...>");
    found = true;
    at = (where - text.data()) + match[0].size();
  }
  return found;
}
} // namespace tessel

#endif
