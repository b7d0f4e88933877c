//===- Tcgen05Emission.cpp - tensor memory and MMA as inline PTX ----------===//
//
// The tilenv tcgen05 ops, each one asm statement; the instruction text is
// Tcgen05Ptx.cpp's, the operand plumbing the emitter's.
//
//===----------------------------------------------------------------------===//
#include "CudaEmitterImpl.h"
#include "Tcgen05Ptx.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace tessel;

static layout::TmemShape layoutShape(tilenv::TmemShape shape) {
  switch (shape) {
  case tilenv::TmemShape::s32x32b: return layout::TmemShape::s32x32b;
  case tilenv::TmemShape::s16x64b: return layout::TmemShape::s16x64b;
  case tilenv::TmemShape::s16x128b: return layout::TmemShape::s16x128b;
  case tilenv::TmemShape::s16x256b: return layout::TmemShape::s16x256b;
  case tilenv::TmemShape::s16x32bx2: return layout::TmemShape::s16x32bx2;
  }
  return layout::TmemShape::s32x32b;
}

// sm_100a tensor memory and MMA, as inline PTX (Tcgen05Ptx.h has the text).
LogicalResult CudaEmitter::emitTcgen05(Operation &op) {
  auto r = [&](Value v) { return "\"r\"(" + name(v) + ")"; };
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](tilenv::Tcgen05AllocOp o) {
        asmWithOperands(target::tcgen05AllocPtx(), "",
                        r(o.getDest()) + ", \"r\"(" + std::to_string(o.getColumns()) + ")");
        return success();
      })
      .Case([&](tilenv::Tcgen05DeallocOp o) {
        asmWithOperands(target::tcgen05DeallocPtx(), "",
                        r(o.getAddress()) + ", \"r\"(" + std::to_string(o.getColumns()) + ")");
        return success();
      })
      .Case([&](tilenv::Tcgen05RelinquishOp) {
        return asmStatement("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned");
      })
      .Case([&](tilenv::Tcgen05FenceBeforeOp) {
        return asmStatement("tcgen05.fence::before_thread_sync");
      })
      .Case([&](tilenv::Tcgen05FenceAfterOp) {
        return asmStatement("tcgen05.fence::after_thread_sync");
      })
      .Case([&](tilenv::Tcgen05InstrDescOp o) {
        uint32_t d = layout::tcgen05InstrDescriptor(
            static_cast<int>(o.getM()), static_cast<int>(o.getN()), o.getOperandType().isBF16(),
            o.getAccType().isF32(), o.getTransA(), o.getTransB());
        line() << "const " << declare(o.getResult()) << " = int(" << llvm::format_hex(d, 10)
               << "u);\n";
        return success();
      })
      .Case([&](tilenv::Tcgen05SmemDescOp o) {
        // The address's field is computed here; everything else is fixed.
        uint64_t fixed = *layout::tcgen05SmemDescriptor(0, o.getLeadingBytes(), o.getStrideBytes(),
                                                         static_cast<int>(o.getSwizzleBytes()));
        line() << declare(o.getResult()) << " = (long long)((((unsigned long long)(unsigned)"
               << name(o.getAddress()) << " & 0x3FFFFull) >> 4) | " << llvm::format_hex(fixed, 18)
               << "ull);\n";
        return success();
      })
      .Case([&](tilenv::Tcgen05MmaOp o) {
        bool aInTmem = o.getA().getType().isInteger(32);
        asmWithOperands(target::tcgen05MmaPtx(aInTmem), "",
                        r(o.getD()) + ", \"" + (aInTmem ? "r" : "l") + "\"(" + name(o.getA()) +
                            "), \"l\"(" + name(o.getDescB()) + "), " + r(o.getIdesc()) +
                            ", \"r\"(int(" + name(o.getAccumulate()) + "))");
        return success();
      })
      .Case([&](tilenv::Tcgen05CommitOp o) {
        asmWithOperands(target::tcgen05CommitPtx(), "", r(o.getBarrier()));
        return success();
      })
      .Case([&](tilenv::Tcgen05CpOp o) {
        std::string shape = tilenv::stringifyTmemCopyShape(o.getShape()).drop_front().str();
        asmWithOperands(target::tcgen05CopyPtx(shape), "",
                        r(o.getAddress()) + ", \"l\"(" + name(o.getDesc()) + ")");
        return success();
      })
      .Case([&](tilenv::Tcgen05LdOp o) {
        layout::TmemShape shape = layoutShape(o.getShape());
        int num = static_cast<int>(o.getNum());
        int regs = *layout::registersPerThread(shape, num);
        asmWithOperands(target::tcgen05LoadPtx(shape, num, o.getPack(), o.getOffset(), regs),
                        registerOperands("=", o.getDest(), o.getBase(), regs), r(o.getAddress()));
        return success();
      })
      .Case([&](tilenv::Tcgen05StOp o) {
        layout::TmemShape shape = layoutShape(o.getShape());
        int num = static_cast<int>(o.getNum());
        int regs = *layout::registersPerThread(shape, num);
        asmWithOperands(target::tcgen05StorePtx(shape, num, o.getUnpack(), o.getOffset(), regs), "",
                        r(o.getAddress()) + ", " +
                            registerOperands("", o.getSource(), o.getBase(), regs));
        return success();
      })
      .Case([&](tilenv::Tcgen05WaitLdOp) { return asmStatement("tcgen05.wait::ld.sync.aligned"); })
      .Case([&](tilenv::Tcgen05WaitStOp) { return asmStatement("tcgen05.wait::st.sync.aligned"); })
      .Default([&](Operation *o) { return o->emitError("not a tcgen05 op"); });
}

