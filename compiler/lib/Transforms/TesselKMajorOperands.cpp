//===- TesselKMajorOperands.cpp - 8-bit gemm operands made K-major --------===//
//
// The 8-bit tensor-core instructions (wgmma's e4m3/e5m2/s8/u8 forms,
// mma.sync m16n8k32) read both operands K-major: A as [M, K] and B as
// [N, K]; unlike the 16-bit forms they have no transposed layout (sm_100a's
// tcgen05.mma has: a gemm into tensor memory keeps its operands, unless an
// MN-major one's rows are narrower than the 32 bytes of the smallest
// swizzled descriptor, an 8-bit B of 16 columns say). A gemm
// whose 8-bit operand sits in shared memory the other way round ([K, M] A,
// [K, N] B, as a row-major weight is stored) gets a K-major copy of it,
// written by element code before the gemm each time it runs, and a remark
// that says what that costs and how to avoid it. An 8-bit A in registers
// (an accumulator-shaped fragment) is read with K permuted within each 16
// (see tile.gemm's b_register_k_order): B gets a copy with K permuted the
// same way, unless the gemm says B is stored so.
//
//===----------------------------------------------------------------------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"
#include "tessel/Transforms/Remarks.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace tessel {
#define GEN_PASS_DEF_TESSELKMAJOROPERANDS
#include "tessel/Transforms/Passes.h.inc"
} // namespace tessel

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace {
constexpr llvm::StringLiteral kPass = "tessel-k-major-operands";

/// The logical K index at position `p` of a B stored in register order
/// (tile.gemm's b_register_k_order): within each 16, position bits
/// (e, b, q1, q0) hold k = 8 b + 2 q + e.
Value registerOrderK(OpBuilder &b, Location loc, Value p) {
  auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v).getResult(); };
  auto bits = [&](int64_t shift, int64_t mask) {
    return arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, p, c(shift)), c(mask))
        .getResult();
  };
  Value group = arith::AndIOp::create(b, loc, p, c(~int64_t{15}));
  Value e = arith::AndIOp::create(b, loc, p, c(1));
  Value half = arith::ShLIOp::create(b, loc, bits(1, 1), c(3)); // b
  Value pair = arith::ShLIOp::create(b, loc, bits(2, 3), c(1)); // q
  Value k = arith::OrIOp::create(b, loc, group, e);
  k = arith::OrIOp::create(b, loc, k, half);
  return arith::OrIOp::create(b, loc, k, pair);
}

/// A K-major shared copy of `operand` ([rows, cols], K along `cols`, or
/// along `rows` where `transpose`), with K in register order where
/// `registerOrder`, filled by a parallel loop placed before `gemm` (the
/// buffer itself at the kernel's top, so that a loop around the gemm reuses
/// it).
Value kMajorCopy(KernelOp kernel, GemmOp gemm, Value operand, bool transpose, bool registerOrder,
                 StringRef name) {
  auto type = llvm::cast<MemRefType>(operand.getType());
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t outRows = transpose ? cols : rows, outCols = transpose ? rows : cols;
  Location loc = gemm.getLoc();
  OpBuilder top = OpBuilder::atBlockBegin(&kernel.getBody().front());
  Value copy = AllocOp::create(top, loc,
                               getTileMemRefType({outRows, outCols}, type.getElementType(),
                                                 MemorySpace::shared),
                               IntegerAttr(), Attribute(), top.getStringAttr(name), IntegerAttr())
                   .getResult();
  OpBuilder b(gemm);
  OperationState state(loc, ParallelOp::getOperationName());
  state.addAttribute("extents", b.getDenseI64ArrayAttr({outRows, outCols}));
  Block *body = new Block();
  state.addRegion()->push_back(body);
  Value i = body->addArgument(b.getIndexType(), loc), j = body->addArgument(b.getIndexType(), loc);
  b.create(state);
  b.setInsertionPointToStart(body);
  Value k = registerOrder ? registerOrderK(b, loc, j) : j;
  Value element = memref::LoadOp::create(b, loc, operand,
                                         transpose ? ValueRange{k, i} : ValueRange{i, k});
  memref::StoreOp::create(b, loc, element, copy, ValueRange{i, j});
  return copy;
}

/// Whether `gemm` accumulates in tensor memory (tcgen05.mma).
bool intoTensorMemory(GemmOp gemm) {
  return getMemorySpace(llvm::cast<MemRefType>(gemm.getC().getType())) == MemorySpace::tmem;
}

/// Whether the MN-major `operand` of a tcgen05 gemm has rows too narrow
/// for a swizzled descriptor (32 bytes the least): an 8-bit B of 16
/// columns, say.
bool tooNarrowForDescriptor(Value operand) {
  auto type = llvm::cast<MemRefType>(operand.getType());
  return type.getDimSize(1) * getElementBytes(type.getElementType()) < 32;
}

/// Whether `gemm` reads an 8-bit A from registers whose B is not yet
/// stored in register order.
bool needsRegisterOrderB(GemmOp gemm) {
  auto a = llvm::cast<MemRefType>(gemm.getA().getType());
  return a.getElementTypeBitWidth() == 8 && getMemorySpace(a) == MemorySpace::fragment &&
         !gemm.getBRegisterKOrder();
}

struct TesselKMajorOperands : tessel::impl::TesselKMajorOperandsBase<TesselKMajorOperands> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    SmallVector<GemmOp> gemms;
    kernel.walk([&](GemmOp gemm) {
      auto a = llvm::cast<MemRefType>(gemm.getA().getType());
      if (a.getElementTypeBitWidth() == 8 &&
          (gemm.getTransposeA() || !gemm.getTransposeB() || needsRegisterOrderB(gemm)))
        gemms.push_back(gemm);
    });
    for (GemmOp gemm : gemms) {
      bool registerOrder = needsRegisterOrderB(gemm);
      // tcgen05.mma reads MN-major 8-bit operands as stored, through a
      // swizzled descriptor where their rows are wide enough for one.
      bool tcgen05 = intoTensorMemory(gemm);
      for (bool isA : {true, false}) {
        Value operand = isA ? gemm.getA() : gemm.getB();
        bool mnMajor = isA ? gemm.getTransposeA() : !gemm.getTransposeB();
        bool permute = !isA && registerOrder && !tcgen05;
        auto type = llvm::cast<MemRefType>(operand.getType());
        // Registers and tensor memory are the verifiers' business.
        if ((!mnMajor && !permute) || getMemorySpace(type) != MemorySpace::shared) continue;
        if (tcgen05 && !tooNarrowForDescriptor(operand)) continue;
        Value copy = kMajorCopy(kernel, gemm, operand, mnMajor, permute,
                                isA ? "a_k_major" : "b_k_major");
        if (isA) {
          gemm.getAMutable().assign(copy);
          gemm.removeTransposeAAttr();
        } else {
          gemm.getBMutable().assign(copy);
          gemm.setTransposeB(true);
          if (permute) gemm.setBRegisterKOrder(true);
        }
        InFlightDiagnostic remark = emitMissed(gemm, kPass, missed::kTensorCores);
        if (tcgen05)
          remark << "operand " << (isA ? "A" : "B") << " is stored " << (isA ? "[K, M]" : "[K, N]")
                 << " in rows of " << type.getDimSize(1) * getElementBytes(type.getElementType())
                 << " bytes, too narrow for the swizzled descriptor tcgen05.mma reads an MN-major "
                    "operand through (32 bytes the least): ";
        else if (mnMajor)
          remark << "operand " << (isA ? "A" : "B") << " is stored " << (isA ? "[K, M]" : "[K, N]")
                 << " and 8-bit tensor-core instructions read it K-major only: ";
        else
          remark << "operand A is 8-bit in registers, read four consecutive K values a register "
                    "where a thread holds pairs 8 apart: ";
        remark << "element code copies " << (mnMajor ? "it" : "B") << " into a " << type.getDimSize(mnMajor ? 1 : 0) << " x "
               << type.getDimSize(mnMajor ? 0 : 1) << " shared tile"
               << (permute ? " with K in register order" : "") << " before each gemm ("
               << type.getNumElements() << " bytes); ";
        if (permute)
          remark << "store B [N, K] in that order (register_k_position) and set "
                    "b_register_k_order to skip the copy";
        else
          remark << "store it " << (isA ? "[M, K]" : "[N, K] (transpose_b)") << " to skip the copy";
      }
    }
  }
};
} // namespace
