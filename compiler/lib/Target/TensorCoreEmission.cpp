//===- TensorCoreEmission.cpp - Hopper's tensor cores as inline PTX -------===//
//
// ldmatrix, mma.sync and wgmma, each one asm statement whose operand lists
// name the register arrays' slots; the tcgen05 ops are passed on to
// Tcgen05Emission.cpp.
//
//===----------------------------------------------------------------------===//
#include "CudaEmitterImpl.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tessel;

namespace tessel {

// Tensor-core instructions are printed as inline PTX so that the emitted
// CUDA shows exactly what runs.
LogicalResult CudaEmitter::emitLdMatrix(tilenv::LdMatrixOp o) {
  int64_t count = o.getCount();
  std::string regs;
  for (int64_t i = 0; i < count; ++i) regs += (i ? ", %" : "%") + std::to_string(i);
  line() << "asm volatile(\"ldmatrix.sync.aligned.m8n8.x" << count << (o.getTrans() ? ".trans" : "")
         << ".shared.b16 {" << regs << "}, [%" << count << "];\"\n";
  line() << "    : ";
  for (int64_t i = 0; i < count; ++i)
    os << (i ? ", " : "") << "\"=r\"(" << slot(o.getDest(), o.getBase(), i) << ")";
  os << "\n";
  line() << "    : \"r\"(tessel::smem_address(&" << name(o.getSource()) << "["
         << name(o.getOffset()) << "])));\n";
  return success();
}

LogicalResult CudaEmitter::emitMmaSync(tilenv::MmaSyncOp o) {
  std::string t = ptxType(o.getOperandType());
  // 8-bit operands take k32: integers into s32 accumulators, FP8 (sm_89
  // and later) into f32 or f16. An f16 accumulator's four elements are two
  // registers.
  bool eightBit = o.getOperandType().getIntOrFloatBitWidth() == 8;
  Type accType = llvm::cast<MemRefType>(o.getAcc().getType()).getElementType();
  std::string shape = eightBit ? "m16n8k32" : "m16n8k16", acc = ptxAccumulatorType(accType);
  int64_t accRegs = accType.isF16() ? 2 : 4;
  std::string d;
  for (int64_t i = 0; i < accRegs; ++i) d += (i ? ", %" : "%") + std::to_string(i);
  auto operand = [&](int64_t i) {
    std::string text = "%";
    text += std::to_string(accRegs + i);
    return text;
  };
  line() << "asm volatile(\"mma.sync.aligned." << shape << ".row.col." << acc << "." << t << "."
         << t << "." << acc << " {" << d << "}, {" << operand(0) << ", " << operand(1) << ", "
         << operand(2) << ", " << operand(3) << "}, {" << operand(4) << ", " << operand(5) << "}, {"
         << d << "};\"\n";
  line() << "    : ";
  for (int64_t i = 0; i < accRegs; ++i)
    os << (i ? ", " : "") << accumulatorOperand(o.getAcc(), o.getAccBase(), i, false);
  os << "\n";
  line() << "    : ";
  for (int64_t i = 0; i < 4; ++i)
    os << (i ? ", " : "") << "\"r\"(" << pairSlot(o.getA(), o.getABase(), i) << ")";
  for (int64_t i = 0; i < 2; ++i)
    os << ", \"r\"(" << slot(o.getB(), o.getBBase(), i) << ")";
  os << ");\n";
  return success();
}

/// The scale-d operand of a wgmma: 1 (accumulate) unless `accumulate` says.
std::string CudaEmitter::scaleD(Value accumulate) {
  if (overwrites(accumulate)) return "0";
  return accumulate ? "int(" + name(accumulate) + ")" : "1";
}

/// A wgmma whose scale-d is a constant 0 writes its accumulator registers
/// without reading them; its asm says so ("=f"), so that the registers'
/// earlier values are dead to the compiler rather than live into it.
bool CudaEmitter::overwrites(Value accumulate) {
  return accumulate && matchPattern(accumulate, m_Zero());
}

bool CudaEmitter::printedInPlace(Value constant) {
  return llvm::all_of(constant.getUsers(), [&](Operation *user) {
    Value accumulate = llvm::TypeSwitch<Operation *, Value>(user)
                           .Case<tilenv::WgmmaOp, tilenv::WgmmaRegAOp>(
                               [](auto o) { return o.getAccumulate(); })
                           .Default([](Operation *) { return Value(); });
    return accumulate == constant && overwrites(constant);
  });
}

LogicalResult CudaEmitter::emitWgmmaRegA(tilenv::WgmmaRegAOp o) {
  Type accType = llvm::cast<MemRefType>(o.getAcc().getType()).getElementType();
  // n / 2 accumulator elements a thread: registers of their own (f32,
  // s32), or packed in pairs (f16).
  int64_t n = o.getN(), regs = accType.isF16() ? n / 4 : n / 2;
  Type operand = o.getOperandType();
  // 8-bit operands: k32, no transposed B; integers into s32 registers.
  bool eightBit = operand.getIntOrFloatBitWidth() == 8, integer = operand.isInteger(8);
  std::string t = ptxType(operand);
  std::string list;
  for (int64_t i = 0; i < regs; ++i) list += (i ? ", %" : "%") + std::to_string(i);
  std::string operandScales =
      integer ? "" : eightBit ? ", 1, 1" : ", 1, 1, " + std::to_string(o.getTransB() ? 1 : 0);
  line() << "asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << regs + 5
         << ", 0;\\nwgmma.mma_async.sync.aligned.m64n" << n << "k" << (eightBit ? 32 : 16) << "."
         << ptxAccumulatorType(accType) << "." << t << "." << t << " {" << list << "}, {%" << regs
         << ", %" << regs + 1 << ", %" << regs + 2 << ", %" << regs + 3 << "}, %" << regs + 4
         << ", p" << operandScales << ";\\n}\"\n";
  line() << "    : ";
  for (int64_t i = 0; i < regs; ++i) {
    os << (i ? ", " : "") << accumulatorOperand(o.getAcc(), o.getBase(), i, overwrites(o.getAccumulate()));
    if (i % 4 == 3 && i + 1 < regs) os << "\n" << std::string(2 * depth + 6, ' ');
  }
  os << "\n";
  line() << "    : ";
  for (int64_t i = 0; i < 4; ++i)
    os << "\"r\"(" << pairSlot(o.getA(), o.getABase(), i) << "), ";
  os << "\"l\"(" << name(o.getDescB()) << "), \"r\"(" << scaleD(o.getAccumulate()) << "));\n";
  return success();
}

LogicalResult CudaEmitter::emitWgmmaFence(tilenv::WgmmaFenceOp o) {
  // The A registers of the group's register-A products are packed (two
  // 16-bit values to a register) before the fence, not at each product:
  // a register the group reads that is written after the fence makes ptxas
  // inject another warpgroup.arrive (info C7519) ahead of that product.
  SetVector<Value> operands, halfAccumulators;
  auto accumulatesInHalves = [&](Value acc, Value accumulate) {
    if (llvm::cast<MemRefType>(acc.getType()).getElementType().isF16() && !overwrites(accumulate))
      halfAccumulators.insert(acc);
  };
  for (Operation *op = o->getNextNode(); op && !llvm::isa<tilenv::WgmmaCommitOp>(op);
       op = op->getNextNode())
    op->walk([&](Operation *nested) {
      if (auto product = llvm::dyn_cast<tilenv::WgmmaRegAOp>(nested)) {
        operands.insert(product.getA());
        accumulatesInHalves(product.getAcc(), product.getAccumulate());
      } else if (auto product = llvm::dyn_cast<tilenv::WgmmaOp>(nested)) {
        accumulatesInHalves(product.getAcc(), product.getAccumulate());
      }
    });
  // An f16 accumulator the group adds to is read as registers of two
  // elements: pairs that element code changed are packed here, before
  // the fence, rather than inside the wgmma's operand list after it.
  for (Value acc : halfAccumulators)
    line() << "tessel::fence_registers(" << name(acc) << ");\n";
  for (Value a : operands) {
    unsigned bits = llvm::cast<MemRefType>(a.getType()).getElementType().getIntOrFloatBitWidth();
    line() << (bits == 16  ? "tessel::fence_pairs("
               : bits == 8 ? "tessel::fence_quads("
                           : "tessel::fence_registers(")
           << name(a) << ");\n";
  }
  return asmStatement("wgmma.fence.sync.aligned");
}

LogicalResult CudaEmitter::emitWgmma(tilenv::WgmmaOp o) {
  Type accType = llvm::cast<MemRefType>(o.getAcc().getType()).getElementType();
  // n / 2 accumulator elements a thread: registers of their own (f32,
  // s32), or packed in pairs (f16).
  int64_t n = o.getN(), regs = accType.isF16() ? n / 4 : n / 2;
  Type operand = o.getOperandType();
  // 8-bit operands take 32 bytes of K an instruction, as 16-bit ones do, and
  // have no transposed form (both operands are K-major). Integer products
  // accumulate in s32 registers and have no operand scales either.
  bool eightBit = operand.getIntOrFloatBitWidth() == 8, integer = operand.isInteger(8);
  std::string t = ptxType(operand);
  std::string list;
  for (int64_t i = 0; i < regs; ++i) list += (i ? ", %" : "%") + std::to_string(i);
  std::string operandScales =
      integer ? "" : eightBit ? ", 1, 1" : ", 1, 1, " + std::to_string(o.getTransA() ? 1 : 0) + ", " +
                                               std::to_string(o.getTransB() ? 1 : 0);
  line() << "asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" << regs + 2
         << ", 0;\\nwgmma.mma_async.sync.aligned.m64n" << n << "k" << (eightBit ? 32 : 16) << "."
         << ptxAccumulatorType(accType) << "." << t << "." << t << " {" << list << "}, %" << regs
         << ", %" << regs + 1 << ", p" << operandScales << ";\\n}\"\n";
  line() << "    : ";
  for (int64_t i = 0; i < regs; ++i) {
    os << (i ? ", " : "") << accumulatorOperand(o.getAcc(), o.getBase(), i, overwrites(o.getAccumulate()));
    if (i % 4 == 3 && i + 1 < regs) os << "\n" << std::string(2 * depth + 6, ' ');
  }
  os << "\n";
  line() << "    : \"l\"(" << name(o.getDescA()) << "), \"l\"(" << name(o.getDescB())
         << "), \"r\"(" << scaleD(o.getAccumulate()) << "));\n";
  return success();
}

// Every Hopper and Blackwell tensor-core op, and the register packing
// that feeds them.
std::optional<LogicalResult> CudaEmitter::emitTensorCore(Operation &op) {
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&op)
      .Case([&](tilenv::LdMatrixOp o) { return emitLdMatrix(o); })
      .Case([&](tilenv::MmaSyncOp o) { return emitMmaSync(o); })
      .Case([&](tilenv::WgmmaDescOp o) {
        line() << "const long long " << name(o.getResult()) << " = tessel::wgmma_desc("
               << name(o.getAddress()) << ", " << o.getLeadingBytes() << ", " << o.getStrideBytes()
               << ", " << o.getSwizzleBytes() << ");\n";
        return success();
      })
      .Case([&](tilenv::WgmmaOp o) { return emitWgmma(o); })
      .Case([&](tilenv::WgmmaRegAOp o) { return emitWgmmaRegA(o); })
      .Case([&](tilenv::ConvertPairOp o) {
        std::string type = typeName(o.getLoResult().getType());
        line() << type << " " << name(o.getLoResult()) << ", " << name(o.getHiResult()) << ";\n";
        line() << "tessel::convert_pair(" << name(o.getLo()) << ", " << name(o.getHi()) << ", "
               << name(o.getLoResult()) << ", " << name(o.getHiResult()) << ");\n";
        return success();
      })
      .Case([&](tilenv::UnpackPairOp o) {
        std::string type = typeName(o.getLo().getType());
        line() << type << " " << name(o.getLo()) << ", " << name(o.getHi()) << ";\n";
        line() << "tessel::unpack_pair(unsigned(" << name(o.getPacked()) << "), " << name(o.getLo())
               << ", " << name(o.getHi()) << ");\n";
        return success();
      })
      .Case([&](tilenv::PackPairOp o) {
        line() << declare(o.getResult()) << " = int(tessel::pack_pair(" << name(o.getLo()) << ", "
               << name(o.getHi()) << "));\n";
        return success();
      })
      .Case<tilenv::Tcgen05AllocOp, tilenv::Tcgen05DeallocOp, tilenv::Tcgen05RelinquishOp,
            tilenv::Tcgen05FenceBeforeOp, tilenv::Tcgen05FenceAfterOp, tilenv::Tcgen05InstrDescOp,
            tilenv::Tcgen05SmemDescOp, tilenv::Tcgen05MmaOp, tilenv::Tcgen05CommitOp,
            tilenv::Tcgen05LdOp, tilenv::Tcgen05StOp, tilenv::Tcgen05WaitLdOp,
            tilenv::Tcgen05WaitStOp, tilenv::Tcgen05CpOp>([&](Operation *o) { return emitTcgen05(*o); })
      .Case([&](tilenv::WgmmaFenceOp o) { return emitWgmmaFence(o); })
      .Case([&](tilenv::WgmmaCommitOp) { return asmStatement("wgmma.commit_group.sync.aligned"); })
      .Case([&](tilenv::WgmmaWaitOp o) {
        if (failed(asmStatement("wgmma.wait_group.sync.aligned " + Twine(o.getPending()))))
          return failure();
        // Keeps the compiler from hoisting reads of the results above the
        // wait (the asm above names no registers).
        for (Value ready : o.getReady())
          if (Type t = llvm::cast<MemRefType>(ready.getType()).getElementType();
              t.isF32() || t.isInteger(32) || t.isF16())
            line() << "tessel::fence_registers(" << name(ready) << ");\n";
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}
} // namespace tessel
