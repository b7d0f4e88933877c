//===- TesselKMajorOperands.cpp - 8-bit gemm operands made K-major --------===//
//
// The 8-bit tensor-core instructions (wgmma's e4m3/e5m2/s8/u8 forms,
// mma.sync m16n8k32) read both operands K-major: A as [M, K] and B as
// [N, K]; unlike the 16-bit forms they have no transposed layout (sm_100a's
// tcgen05.mma has: a gemm into tensor memory keeps its operands). A gemm
// whose 8-bit operand sits in shared memory the other way round ([K, M] A,
// [K, N] B, as a row-major weight is stored) gets a K-major copy of it,
// written by element code before the gemm each time it runs, and a remark
// that says what that costs and how to avoid it.
//
//===----------------------------------------------------------------------===//
#include "tessel/Transforms/BufferUtils.h"
#include "tessel/Transforms/Passes.h"
#include "tessel/Transforms/Remarks.h"

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

/// A [cols, rows] shared copy of the [rows, cols] `operand`, filled by a
/// parallel loop placed before `gemm` (the buffer itself at the kernel's
/// top, so that a loop around the gemm reuses it).
Value transposedCopy(KernelOp kernel, GemmOp gemm, Value operand, StringRef name) {
  auto type = llvm::cast<MemRefType>(operand.getType());
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  Location loc = gemm.getLoc();
  OpBuilder top = OpBuilder::atBlockBegin(&kernel.getBody().front());
  Value copy = AllocOp::create(top, loc,
                               getTileMemRefType({cols, rows}, type.getElementType(),
                                                 MemorySpace::shared),
                               IntegerAttr(), Attribute(), top.getStringAttr(name), IntegerAttr())
                   .getResult();
  OpBuilder b(gemm);
  OperationState state(loc, ParallelOp::getOperationName());
  state.addAttribute("extents", b.getDenseI64ArrayAttr({cols, rows}));
  Block *body = new Block();
  state.addRegion()->push_back(body);
  Value i = body->addArgument(b.getIndexType(), loc), j = body->addArgument(b.getIndexType(), loc);
  b.create(state);
  b.setInsertionPointToStart(body);
  Value element = memref::LoadOp::create(b, loc, operand, ValueRange{j, i});
  memref::StoreOp::create(b, loc, element, copy, ValueRange{i, j});
  return copy;
}

struct TesselKMajorOperands : tessel::impl::TesselKMajorOperandsBase<TesselKMajorOperands> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    SmallVector<GemmOp> gemms;
    kernel.walk([&](GemmOp gemm) {
      auto a = llvm::cast<MemRefType>(gemm.getA().getType());
      auto c = llvm::cast<MemRefType>(gemm.getC().getType());
      if (getMemorySpace(c) == MemorySpace::tmem) return;
      if (a.getElementTypeBitWidth() == 8 && (gemm.getTransposeA() || !gemm.getTransposeB()))
        gemms.push_back(gemm);
    });
    for (GemmOp gemm : gemms) {
      for (bool isA : {true, false}) {
        Value operand = isA ? gemm.getA() : gemm.getB();
        bool mnMajor = isA ? gemm.getTransposeA() : !gemm.getTransposeB();
        auto type = llvm::cast<MemRefType>(operand.getType());
        // Registers and tensor memory are the verifiers' business.
        if (!mnMajor || getMemorySpace(type) != MemorySpace::shared) continue;
        Value copy = transposedCopy(kernel, gemm, operand, isA ? "a_k_major" : "b_k_major");
        if (isA) {
          gemm.getAMutable().assign(copy);
          gemm.removeTransposeAAttr();
        } else {
          gemm.getBMutable().assign(copy);
          gemm.setTransposeB(true);
        }
        emitMissed(gemm, kPass, missed::kTensorCores)
            << "operand " << (isA ? "A" : "B") << " is stored "
            << (isA ? "[K, M]" : "[K, N]") << " and 8-bit tensor-core instructions read it "
            << "K-major only: element code copies it into a " << type.getDimSize(1) << " x "
            << type.getDimSize(0) << " shared tile before each gemm (" << type.getNumElements()
            << " bytes); store it " << (isA ? "[M, K]" : "[N, K] (transpose_b)")
            << " to skip the copy";
      }
    }
  }
};
} // namespace
