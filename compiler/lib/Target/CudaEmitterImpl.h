//===- CudaEmitterImpl.h - the CUDA emitter's state -------------*- C++ -*-===//
//
// The emitter class, shared by CudaEmitter.cpp (kernels, control flow,
// arithmetic, memory, synchronization), TensorCoreEmission.cpp (Hopper's
// tensor-core instructions) and Tcgen05Emission.cpp (Blackwell's tensor
// memory and MMA).
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TARGET_CUDAEMITTERIMPL_H
#define TESSEL_TARGET_CUDAEMITTERIMPL_H

#include "tessel/Target/CudaEmitter.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/DenseMap.h"

namespace tessel {
// Internal to the Target library (its two emitter files); the class reads
// as the emitter's code always has.
using namespace mlir;
using namespace tessel::tile;

class CudaEmitter {
public:
  /// With `origins`, records where each op's text begins in `os`.
  explicit CudaEmitter(raw_ostream &os,
                       std::vector<std::pair<uint64_t, Operation *>> *origins = nullptr)
      : os(os), origins(origins) {}
  FailureOr<rt::KernelSpec> emitKernel(KernelOp kernel);

private:
  raw_ostream &os;
  std::vector<std::pair<uint64_t, Operation *>> *origins;
  void markOrigin(Operation &op) {
    if (origins) origins->push_back({os.tell(), &op});
  }
  DenseMap<Value, std::string> names;
  /// Extent expression of each dimension of global buffer parameters.
  DenseMap<Value, SmallVector<std::string>> dims;
  int nextId = 0;
  int depth = 1;
  /// sm_100a-emu: tcgen05 ops become calls into tessel_tcgen05_emu.h.
  bool emulateTcgen05 = false;

  raw_ostream &line() { return os.indent(2 * depth); }
  /// Closes a tessel::tma_* call with its coordinates, innermost first (the
  /// order TMA takes; the ops hold them outermost first).
  LogicalResult finishTmaCall(ValueRange coords) {
    for (Value c : llvm::reverse(coords)) os << ", " << name(c);
    os << ");\n";
    return success();
  }
  /// The address of tensor map `descriptor`: the parameter's own, or, for a
  /// map per rank, rank `rank`'s.
  std::string tensorMapOf(int64_t descriptor, Value rank) {
    std::string map = "&tma" + std::to_string(descriptor);
    return rank ? map + ".at[" + name(rank) + "]" : map;
  }
  /// One PTX instruction with no operands, as a memory-clobbering asm statement.
  LogicalResult asmStatement(const Twine &ptx) {
    line() << "asm volatile(\"" << ptx << ";\" ::: \"memory\");\n";
    return success();
  }
  std::string fresh(StringRef prefix = "v") { return (prefix + Twine(nextId++)).str(); }
  /// A copy, never a reference into `names`: a later insertion may rehash
  /// the map, and `names[arg] = name(res)` read a freed string (a loop's
  /// carried value then printed under a name no declaration had).
  std::string name(Value v) {
    std::string &n = names[v];
    if (n.empty()) n = fresh();
    return n;
  }
  std::string declare(Value v) { return typeName(v.getType()) + " " + name(v); }
  static std::string typeName(Type t);
  /// The unsigned type of an integer's width, for C-style casts.
  static std::string unsignedTypeName(Type t);
  static FailureOr<rt::ScalarType> scalarType(Type t);
  /// Floats stored narrower than float (f16, bf16, FP8): computed in float.
  static bool isHalfLike(Type t) {
    auto f = llvm::dyn_cast<FloatType>(t);
    return f && f.getWidth() < 32;
  }
  std::string asFloat(Value v) {
    return isHalfLike(v.getType()) ? "float(" + name(v) + ")" : name(v);
  }
  std::string fromFloat(Type t, const std::string &expr) {
    return isHalfLike(t) ? typeName(t) + "(" + expr + ")" : expr;
  }
  std::string element(Value memref, ValueRange indices);
  std::string constant(Attribute attr, Type type);

  LogicalResult emitBlock(Block &block);
  LogicalResult emitOp(Operation &op);
  LogicalResult emitBitcast(mlir::arith::BitcastOp op);
  LogicalResult emitIntegerAbs(mlir::math::AbsIOp op);
  LogicalResult emitArith(Operation &op);
  // The op families emitOp tries in turn: each prints an op of its own and
  // returns std::nullopt for any other.
  std::optional<LogicalResult> emitControlFlow(Operation &op);
  std::optional<LogicalResult> emitBuffer(Operation &op);
  std::optional<LogicalResult> emitThreadOp(Operation &op);
  std::optional<LogicalResult> emitGlobalAtomic(Operation &op);
  std::optional<LogicalResult> emitCopy(Operation &op);
  std::optional<LogicalResult> emitSync(Operation &op);
  std::optional<LogicalResult> emitTensorCore(Operation &op);
  LogicalResult emitLdMatrix(tilenv::LdMatrixOp op);
  LogicalResult emitMmaSync(tilenv::MmaSyncOp op);
  LogicalResult emitWgmma(tilenv::WgmmaOp op);
  LogicalResult emitWgmmaFence(tilenv::WgmmaFenceOp o);
  LogicalResult emitWgmmaRegA(tilenv::WgmmaRegAOp op);
  LogicalResult emitTcgen05(Operation &op);
  LogicalResult emitTcgen05Emulated(Operation &op);
  /// `asm volatile("ptx" : outputs : inputs : "memory");`
  void asmWithOperands(const std::string &ptx, const std::string &outputs,
                       const std::string &inputs) {
    line() << "asm volatile(\"" << ptx << "\"\n";
    line() << "    : " << outputs << "\n";
    line() << "    : " << inputs << " : \"memory\");\n";
  }
  /// A register array's constraint ("f" or "r") and its slots base + i.
  std::string registerOperands(const char *mode, Value array, Value base, int64_t count) {
    std::string c = llvm::cast<MemRefType>(array.getType()).getElementType().isF32() ? "f" : "r";
    std::string list;
    for (int64_t i = 0; i < count; ++i)
      list += (i ? ", \"" : "\"") + std::string(mode) + c + "\"(" + slot(array, base, i) + ")";
    return list;
  }
  std::string scaleD(Value accumulate);
  bool overwrites(Value accumulate);
  /// A constant every user prints as its value (a wgmma's zero scale-d):
  /// declared, it would be an unused variable, which NVRTC warns about.
  bool printedInPlace(Value constant);
  /// `array[base + i]` for an asm operand list.
  std::string slot(Value array, Value base, int64_t i) {
    return name(array) + "[" + name(base) + " + " + std::to_string(i) + "]";
  }
  /// The i-th 32-bit register of an operand array: an element of an i32
  /// array, elements 2i and 2i + 1 of a 16-bit one packed together, or four
  /// elements of an 8-bit one, in the order tessel::fence_quads states.
  std::string pairSlot(Value array, Value base, int64_t i) {
    unsigned bits = llvm::cast<MemRefType>(array.getType()).getElementType().getIntOrFloatBitWidth();
    if (bits == 8) {
      int64_t first = 8 * (i / 2) + 2 * (i % 2);
      return "tessel::pack_quad(" + slot(array, base, first) + ", " + slot(array, base, first + 1) +
             ", " + slot(array, base, first + 4) + ", " + slot(array, base, first + 5) + ")";
    }
    if (bits != 16)
      return slot(array, base, i);
    return "tessel::pack_pair(" + slot(array, base, 2 * i) + ", " + slot(array, base, 2 * i + 1) +
           ")";
  }
  /// The i-th 32-bit register of a 16-bit accumulator array (elements
  /// base + 2i and base + 2i + 1), read and written in place.
  std::string wordSlot(Value array, Value base, int64_t i) {
    return "tessel::word_at(" + name(array) + ", " + name(base) + " + " + std::to_string(2 * i) + ")";
  }
  /// An accumulator array's asm operand `i` (of the instruction's register
  /// list): an f32 or s32 element, or a register of two f16 elements.
  std::string accumulatorOperand(Value array, Value base, int64_t i, bool overwrite) {
    Type t = llvm::cast<MemRefType>(array.getType()).getElementType();
    std::string text = overwrite ? "\"=" : "\"+";
    text += t.isF32() ? "f\"(" : "r\"(";
    text += t.isF16() ? wordSlot(array, base, i) : slot(array, base, i);
    text += ')';
    return text;
  }
  /// An accumulator's type as the instruction spells it.
  static std::string ptxAccumulatorType(Type t) {
    return t.isF16() ? "f16" : t.isF32() ? "f32" : "s32";
  }
  /// A tensor-core operand type as PTX spells it.
  static std::string ptxType(Type t) {
    if (llvm::isa<Float8E4M3FNType>(t)) return "e4m3";
    if (llvm::isa<Float8E5M2Type>(t)) return "e5m2";
    if (t.isUnsignedInteger(8)) return "u8";
    if (t.isInteger(8)) return "s8";
    return t.isBF16() ? "bf16" : "f16";
  }
};

} // namespace tessel

#endif
