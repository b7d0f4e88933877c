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

/// The emulation header's Shape enumerator for an ld/st shape.
static const char *emulatedShape(tilenv::TmemShape shape) {
  switch (shape) {
  case tilenv::TmemShape::s32x32b: return "tessel::emu::s32x32b";
  case tilenv::TmemShape::s16x64b: return "tessel::emu::s16x64b";
  case tilenv::TmemShape::s16x128b: return "tessel::emu::s16x128b";
  case tilenv::TmemShape::s16x256b: return "tessel::emu::s16x256b";
  case tilenv::TmemShape::s16x32bx2: return "tessel::emu::s16x32bx2";
  }
  return "";
}

/// A tcgen05.cp shape as the PTX ISA writes it.
static std::string copyShapePtx(tilenv::TmemCopyShape shape) {
  switch (shape) {
  case tilenv::TmemCopyShape::s128x256b: return "128x256b";
  case tilenv::TmemCopyShape::s4x256b: return "4x256b";
  case tilenv::TmemCopyShape::s128x128b: return "128x128b";
  case tilenv::TmemCopyShape::s32x128b_warpx4: return "32x128b.warpx4";
  }
  return "";
}

// sm_100a-emu: each op a call into tessel_tcgen05_emu.h; the descriptors
// are the real ones, which the emulated MMA decodes.
LogicalResult CudaEmitter::emitTcgen05Emulated(Operation &op) {
  auto call = [&](StringRef fn, const std::string &args) {
    line() << "tessel::emu::" << fn << "(" << args << ");\n";
    return success();
  };
  auto u32 = [&](Value v) { return "unsigned(" + name(v) + ")"; };
  auto move = [&](StringRef fn, tilenv::TmemShape shape, int64_t num, bool packing,
                  std::optional<int64_t> offset, Value address, Value array, Value base) {
    return call(fn, std::string(emulatedShape(shape)) + ", " + std::to_string(num) + ", " +
                        (packing ? "true" : "false") + ", " + std::to_string(offset.value_or(0)) +
                        ", " + u32(address) + ", &" + name(array) + "[" + name(base) + "]");
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](tilenv::Tcgen05AllocOp o) {
        return call("tcgen05_alloc", u32(o.getDest()) + ", " + std::to_string(o.getColumns()));
      })
      .Case([&](tilenv::Tcgen05DeallocOp o) {
        return call("tcgen05_dealloc", u32(o.getAddress()) + ", " + std::to_string(o.getColumns()));
      })
      .Case([&](tilenv::Tcgen05RelinquishOp) { return call("tcgen05_relinquish", ""); })
      .Case<tilenv::Tcgen05FenceBeforeOp, tilenv::Tcgen05FenceAfterOp>(
          [&](Operation *) { return call("tcgen05_fence", ""); })
      .Case<tilenv::Tcgen05WaitLdOp, tilenv::Tcgen05WaitStOp>(
          [&](Operation *) { return call("tcgen05_wait", ""); })
      .Case<tilenv::Tcgen05InstrDescOp, tilenv::Tcgen05SmemDescOp>(
          [&](Operation *o) { return emitTcgen05(*o); })
      .Case([&](tilenv::Tcgen05MmaOp o) {
        bool aInTmem = o.getA().getType().isInteger(32);
        std::string a = aInTmem ? u32(o.getA()) : "(unsigned long long)" + name(o.getA());
        std::string args = u32(o.getD()) + ", " + a + ", (unsigned long long)" +
                           name(o.getDescB()) + ", " + u32(o.getIdesc()) + ", " +
                           name(o.getAccumulate());
        if (o.getScaleA()) args += ", " + u32(o.getScaleA()) + ", " + u32(o.getScaleB());
        // The kind as a template argument: the emulation is specialised.
        return call("tcgen05_mma<tessel::emu::kind_" +
                        tilenv::stringifyTcgen05Kind(o.getKind()).str() + ">",
                    args);
      })
      .Case([&](tilenv::Tcgen05CommitOp o) { return call("tcgen05_commit", u32(o.getBarrier())); })
      .Case([&](tilenv::Tcgen05CpOp o) {
        return call("tcgen05_cp", u32(o.getAddress()) + ", (unsigned long long)" +
                                      name(o.getDesc()) + ", " +
                                      std::to_string(static_cast<int>(o.getShape())));
      })
      .Case([&](tilenv::Tcgen05LdOp o) {
        return move("tcgen05_ld", o.getShape(), o.getNum(), o.getPack(), o.getOffset(),
                    o.getAddress(), o.getDest(), o.getBase());
      })
      .Case([&](tilenv::Tcgen05StOp o) {
        return move("tcgen05_st", o.getShape(), o.getNum(), o.getUnpack(), o.getOffset(),
                    o.getAddress(), o.getSource(), o.getBase());
      })
      .Default([&](Operation *o) { return o->emitError("not a tcgen05 op"); });
}

// sm_100a tensor memory and MMA, as inline PTX (Tcgen05Ptx.h has the text).
LogicalResult CudaEmitter::emitTcgen05(Operation &op) {
  if (emulateTcgen05 && !llvm::isa<tilenv::Tcgen05InstrDescOp, tilenv::Tcgen05SmemDescOp>(op))
    return emitTcgen05Emulated(op);
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
        std::string why;
        std::optional<layout::Tcgen05Formats> formats =
            tilenv::tcgen05Formats(o.getOperandType(), o.getAccType(), why, o.getBlockScaled());
        if (!formats) return LogicalResult(o.emitOpError(why));
        uint32_t d = layout::tcgen05InstrDescriptor(static_cast<int>(o.getM()),
                                                    static_cast<int>(o.getN()), *formats,
                                                    o.getTransA(), o.getTransB());
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
        bool scaled = o.getKind() == tilenv::Tcgen05Kind::mxf8f6f4;
        std::string text =
            scaled ? target::tcgen05BlockScaledMmaPtx(aInTmem)
                   : target::tcgen05MmaPtx(aInTmem, tilenv::stringifyTcgen05Kind(o.getKind()).str());
        std::string operands = r(o.getD()) + ", \"" + (aInTmem ? "r" : "l") + "\"(" +
                               name(o.getA()) + "), \"l\"(" + name(o.getDescB()) + "), " +
                               r(o.getIdesc()) + ", \"r\"(int(" + name(o.getAccumulate()) + "))";
        if (scaled) operands += ", " + r(o.getScaleA()) + ", " + r(o.getScaleB());
        asmWithOperands(text, "", operands);
        return success();
      })
      .Case([&](tilenv::Tcgen05CommitOp o) {
        asmWithOperands(target::tcgen05CommitPtx(), "", r(o.getBarrier()));
        return success();
      })
      .Case([&](tilenv::Tcgen05CpOp o) {
        std::string shape = copyShapePtx(o.getShape());
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

