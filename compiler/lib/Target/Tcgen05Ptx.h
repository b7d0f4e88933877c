//===- Tcgen05Ptx.h - the PTX text of tcgen05 instructions ------*- C++ -*-===//
//
// The instruction strings the CUDA emitter wraps in inline asm for the
// tilenv tcgen05 ops, operands numbered %0, %1, ... in the order each
// function documents. Kept apart from the emitter so that the syntax, which
// ptxas checks for sm_100a in the tests, lives in one place.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TARGET_TCGEN05PTX_H
#define TESSEL_TARGET_TCGEN05PTX_H

#include "tessel/Layout/TmemLayout.h"

#include <cstdint>
#include <optional>
#include <string>

namespace tessel::target {

/// tcgen05.ld: outputs %0 .. %(registers-1), then the address.
std::string tcgen05LoadPtx(layout::TmemShape shape, int num, bool pack,
                           std::optional<int64_t> offset, int registers);
/// tcgen05.st: the address %0, then the registers %1 ...
std::string tcgen05StorePtx(layout::TmemShape shape, int num, bool unpack,
                            std::optional<int64_t> offset, int registers);
/// tcgen05.mma of `kind` ("f16", "f8f6f4", "i8"): D address %0, A
/// (descriptor, or tensor-memory address with `aInTmem`) %1, B descriptor
/// %2, instruction descriptor %3, and %4 nonzero to accumulate.
std::string tcgen05MmaPtx(bool aInTmem, const std::string &kind);
/// tcgen05.mma kind::mxf8f6f4.block_scale.scale_vec::1X: as tcgen05MmaPtx,
/// then the tensor-memory addresses of A's scales %5 and B's %6.
std::string tcgen05BlockScaledMmaPtx(bool aInTmem);
/// tcgen05.cp of a shared-memory matrix: address %0, descriptor %1; `shape`
/// as the PTX ISA writes it ("128x256b", "32x128b.warpx4").
std::string tcgen05CopyPtx(const std::string &shape);
/// alloc (shared word %0, columns %1), dealloc (address %0, columns %1) and
/// commit (mbarrier %0).
std::string tcgen05AllocPtx();
std::string tcgen05DeallocPtx();
std::string tcgen05CommitPtx();

} // namespace tessel::target

#endif
