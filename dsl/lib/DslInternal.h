//===- DslInternal.h - what the DSL's source files share --------*- C++ -*-===//
//
// Not installed. The DSL's library, by file:
//   Program.cpp        a Program: its parameters (tensors, symbols, scalars),
//                      building its one kernel, the current program and user
//                      line, errors and verification at that line
//   Expressions.cpp    Expr and DType: constants, arithmetic, comparisons,
//                      math functions, conversions, host evaluation
//   Division.cpp       integer `/` and `%` that floor
//   Buffers.cpp        allocations, layout annotations, element access
//                      (Ref) and views (tiles, bounds, peers)
//   TileOps.cpp        copy, fill, gemm, reductions and atomics
//   ControlFlow.cpp    element, pipelined, persistent and serial loops,
//                      block swizzling, conditionals
//   Synchronisation.cpp  clusters, roles, mbarriers, TMA copies and flags
//   Compile.cpp        tessel::compile: the pipeline, the CUDA emitter and
//                      NVRTC run on a Program
//   CompileCache.cpp   their results kept by tile IR, with the remarks made
//                      independent of the user's lines (CompileCache.h)
//   Launch.cpp         a compiled Kernel's launch checks, and its build
//                      without TMA (CompileInternal.h)
// This header: the helpers the files that build IR share. What an Expr is
// made of is in ExprInternal.h.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_DSL_DSLINTERNAL_H
#define TESSEL_DSL_DSLINTERNAL_H

#include "tessel/dsl/Program.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <string>
#include <vector>

namespace mlir {
class Operation;
}

namespace tessel {

namespace tile {
class KernelOp;
}

namespace detail {
/// The user's line of the DSL call being built, for errors raised below it
/// (Program.cpp).
extern thread_local SrcLoc lastLoc;
/// The kernel whose body `p` is building (an error at `loc` outside one;
/// Program.cpp).
tile::KernelOp enclosingKernel(Program &p, SrcLoc loc);
/// Runs the op's verifier; its diagnostics become a tessel::Error at the
/// user's line (Program.cpp).
void verifyAtUserLine(mlir::Operation *op);
/// Index values of `idx` at the current insertion point (Buffers.cpp).
llvm::SmallVector<mlir::Value> indexValues(const std::vector<Expr> &idx);
/// "shared", "fragment", ... for messages (Buffers.cpp).
const char *spaceName(Space s);
/// "[64, ?]" for messages (-1 is a dynamic extent; Buffers.cpp).
std::string shapeText(const std::vector<int64_t> &shape);
} // namespace detail

} // namespace tessel

#endif
