//===- CudaEmitter.cpp - thread-level IR to CUDA C++ ----------------------===//
//
// Each SSA value becomes a local variable named after its number; structured
// control flow maps to C++ statements. 16-bit floats are stored as Tessel's
// own types and computed in float, which rounds +, -, * and / exactly as the
// native half instructions do.
//
//===----------------------------------------------------------------------===//
#include "tessel/Target/CudaEmitter.h"
#include "CudaEmitterImpl.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/BufferUtils.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include <cmath>

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

namespace tessel {

// One identifier each (the device header's aliases for the types of several
// words), so that every spelling is valid wherever a type goes: declarations,
// `T(x)` conversions, template arguments.
std::string CudaEmitter::typeName(Type t) {
  if (t.isIndex() || t.isInteger(32)) return "int";
  if (t.isInteger(1)) return "bool";
  if (t.isInteger(64)) return "tessel::i64";
  if (t.isUnsignedInteger(8)) return "tessel::u8";
  if (t.isInteger(8)) return "tessel::i8";
  if (llvm::isa<Float8E4M3FNType>(t)) return "tessel::f8e4m3";
  if (llvm::isa<Float8E5M2Type>(t)) return "tessel::f8e5m2";
  if (llvm::isa<Float8E8M0FNUType>(t)) return "tessel::ue8m0";
  if (t.isInteger(16)) return "short";
  if (t.isF32()) return "float";
  if (t.isF64()) return "double";
  if (t.isF16()) return "tessel::half";
  if (t.isBF16()) return "tessel::bfloat16";
  return "";
}

std::string CudaEmitter::unsignedTypeName(Type t) {
  if (t.isInteger(1)) return "bool";
  if (t.isInteger(64)) return "unsigned long long";
  if (t.isInteger(8)) return "unsigned char";
  if (t.isInteger(16)) return "unsigned short";
  return "unsigned";
}

FailureOr<rt::ScalarType> CudaEmitter::scalarType(Type t) {
  if (t.isIndex()) return rt::ScalarType::Index;
  if (t.isInteger(1)) return rt::ScalarType::I1;
  if (t.isInteger(32)) return rt::ScalarType::I32;
  if (t.isInteger(64)) return rt::ScalarType::I64;
  if (t.isF16()) return rt::ScalarType::F16;
  if (t.isBF16()) return rt::ScalarType::BF16;
  if (t.isF32()) return rt::ScalarType::F32;
  if (t.isF64()) return rt::ScalarType::F64;
  if (t.isUnsignedInteger(8)) return rt::ScalarType::U8;
  if (t.isInteger(8)) return rt::ScalarType::I8;
  if (llvm::isa<Float8E4M3FNType>(t)) return rt::ScalarType::F8E4M3;
  if (llvm::isa<Float8E5M2Type>(t)) return rt::ScalarType::F8E5M2;
  if (llvm::isa<Float8E8M0FNUType>(t)) return rt::ScalarType::UE8M0;
  return failure();
}

std::string CudaEmitter::element(Value memref, ValueRange indices) {
  auto it = dims.find(memref);
  if (it == dims.end()) return name(memref) + "[" + name(indices[0]) + "]";
  // Row-major global buffer: Horner's rule over the extents.
  std::string linear = name(indices[0]);
  for (size_t d = 1; d < indices.size(); ++d)
    linear = "(" + linear + ") * " + it->second[d] + " + " + name(indices[d]);
  return name(memref) + "[" + linear + "]";
}

std::string CudaEmitter::constant(Attribute attr, Type type) {
  if (auto i = llvm::dyn_cast<IntegerAttr>(attr)) {
    if (type.isInteger(1)) return i.getValue().isZero() ? "false" : "true";
    std::string v = std::to_string(i.getValue().getSExtValue());
    return type.isInteger(64) ? v + "LL" : v;
  }
  auto f = llvm::cast<FloatAttr>(attr);
  double v = f.getValueAsDouble();
  std::string text;
  if (std::isnan(v)) text = "__int_as_float(0x7fc00000)";
  else if (std::isinf(v)) text = v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  else text = llvm::formatv("{0:e17}", v).str();
  if (type.isF64()) return std::isfinite(v) ? text : "double(" + text + ")";
  if (type.isF32()) return std::isfinite(v) ? text + "f" : text;
  return typeName(type) + "(" + (std::isfinite(v) ? text + "f" : text) + ")";
}

LogicalResult CudaEmitter::emitBlock(Block &block) {
  for (Operation &op : block) {
    markOrigin(op);
    // A scalar the emitter cannot spell would be a declaration NVRTC
    // rejects; say so at the op instead.
    for (Type t : op.getResultTypes())
      if (llvm::isa<IntegerType, FloatType, IndexType>(t) && typeName(t).empty())
        return op.emitError("the CUDA emitter has no type for ") << t;
    if (failed(emitOp(op))) return failure();
  }
  // What follows (closing braces) belongs to the op around the block.
  markOrigin(*block.getParentOp());
  return success();
}

/// The same bits as another type of their width: CUDA's intrinsics for
/// f32/i32 and f64/i64, the only pairs the DSL builds.
LogicalResult CudaEmitter::emitBitcast(arith::BitcastOp op) {
  Type from = op.getIn().getType(), to = op.getType();
  const char *fn = from.isF32()   ? "__float_as_int"
                   : to.isF32()   ? "__int_as_float"
                   : from.isF64() ? "__double_as_longlong"
                   : to.isF64()   ? "__longlong_as_double"
                                  : nullptr;
  if (!fn || from.getIntOrFloatBitWidth() != to.getIntOrFloatBitWidth())
    return op.emitError("the CUDA emitter reinterprets f32/i32 and f64/i64 only");
  line() << declare(op.getResult()) << " = " << fn << "(" << name(op.getIn()) << ");\n";
  return success();
}

/// |x| of an integer of any width (CUDA's abs overloads stop at int).
LogicalResult CudaEmitter::emitIntegerAbs(math::AbsIOp op) {
  std::string x = name(op.getOperand());
  line() << declare(op.getResult()) << " = " << x << " < 0 ? -" << x << " : " << x << ";\n";
  return success();
}

LogicalResult CudaEmitter::emitArith(Operation &op) {
  Value r = op.getNumResults() ? op.getResult(0) : Value();
  auto binary = [&](StringRef sym) -> LogicalResult {
    Value a = op.getOperand(0), b = op.getOperand(1);
    if (llvm::isa<FloatType>(r.getType()))
      line() << declare(r) << " = " << fromFloat(r.getType(), asFloat(a) + " " + sym.str() + " " + asFloat(b)) << ";\n";
    else
      line() << declare(r) << " = " << name(a) << " " << sym << " " << name(b) << ";\n";
    return success();
  };
  auto call = [&](StringRef fn) -> LogicalResult {
    std::string args;
    for (auto [i, v] : llvm::enumerate(op.getOperands()))
      args += (i ? ", " : "") + asFloat(v);
    bool dbl = r.getType().isF64();
    line() << declare(r) << " = " << fromFloat(r.getType(), (fn + (dbl ? "" : "f")).str() + "(" + args + ")") << ";\n";
    return success();
  };
  // arith's conversions are C++'s `T(x)`; the unsigned ones first read the
  // operand as unsigned of its width (a bool needs nothing: true is 1).
  auto cast = [&](bool fromUnsigned) -> LogicalResult {
    Value a = op.getOperand(0);
    Type from = a.getType(), to = r.getType();
    std::string value = isHalfLike(from) ? asFloat(a) : name(a);
    if (fromUnsigned && !from.isInteger(1)) value = "(" + unsignedTypeName(from) + ")" + value;
    line() << declare(r) << " = " << typeName(to) << "(" << value << ");\n";
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](arith::ConstantOp c) {
        if (printedInPlace(r)) return success();
        line() << "const " << declare(r) << " = " << constant(c.getValue(), r.getType()) << ";\n";
        return success();
      })
      .Case([&](arith::AddIOp) { return binary("+"); })
      .Case([&](arith::SubIOp) { return binary("-"); })
      .Case([&](arith::MulIOp) { return binary("*"); })
      .Case<arith::DivSIOp, arith::DivUIOp>([&](auto) { return binary("/"); })
      .Case([&](arith::FloorDivSIOp o) {
        line() << declare(r) << " = tessel::floor_div(" << name(o.getLhs()) << ", "
               << name(o.getRhs()) << ");\n";
        return success();
      })
      .Case<arith::RemSIOp, arith::RemUIOp>([&](auto) { return binary("%"); })
      .Case([&](arith::AndIOp) { return binary(r.getType().isInteger(1) ? "&&" : "&"); })
      .Case([&](arith::OrIOp) { return binary(r.getType().isInteger(1) ? "||" : "|"); })
      .Case([&](arith::XOrIOp) { return binary("^"); })
      .Case([&](arith::ShLIOp) { return binary("<<"); })
      .Case([&](arith::ShRSIOp) { return binary(">>"); })
      .Case([&](arith::ShRUIOp o) {
        line() << declare(r) << " = " << typeName(r.getType()) << "((" << unsignedTypeName(r.getType())
               << ")" << name(o.getLhs()) << " >> " << name(o.getRhs()) << ");\n";
        return success();
      })
      .Case([&](arith::AddFOp) { return binary("+"); })
      .Case([&](arith::SubFOp) { return binary("-"); })
      .Case([&](arith::MulFOp) { return binary("*"); })
      .Case([&](arith::DivFOp) { return binary("/"); })
      .Case([&](arith::CeilDivUIOp o) {
        line() << declare(r) << " = (" << name(o.getLhs()) << " + " << name(o.getRhs())
               << " - 1) / " << name(o.getRhs()) << ";\n";
        return success();
      })
      .Case([&](arith::CeilDivSIOp o) {
        line() << declare(r) << " = tessel::ceil_div(" << name(o.getLhs()) << ", "
               << name(o.getRhs()) << ");\n";
        return success();
      })
      .Case([&](arith::NegFOp o) {
        line() << declare(r) << " = " << fromFloat(r.getType(), "-" + asFloat(o.getOperand())) << ";\n";
        return success();
      })
      .Case<arith::MaxNumFOp, arith::MaximumFOp>([&](auto) { return call("fmax"); })
      .Case<arith::MinNumFOp, arith::MinimumFOp>([&](auto) { return call("fmin"); })
      .Case([&](arith::MaxSIOp o) {
        line() << declare(r) << " = max(" << name(o.getLhs()) << ", " << name(o.getRhs()) << ");\n";
        return success();
      })
      .Case([&](arith::MinSIOp o) {
        line() << declare(r) << " = min(" << name(o.getLhs()) << ", " << name(o.getRhs()) << ");\n";
        return success();
      })
      .Case([&](arith::CmpIOp o) {
        static const char *syms[] = {"==", "!=", "<", "<=", ">", ">=", "<", "<=", ">", ">="};
        bool isUnsigned = o.getPredicate() >= arith::CmpIPredicate::ult;
        std::string lhs = name(o.getLhs()), rhs = name(o.getRhs());
        std::string asUnsigned = "(" + unsignedTypeName(o.getLhs().getType()) + ")";
        if (isUnsigned) lhs = asUnsigned + lhs, rhs = asUnsigned + rhs;
        line() << declare(r) << " = " << lhs << " " << syms[(int)o.getPredicate()] << " " << rhs << ";\n";
        return success();
      })
      .Case([&](arith::CmpFOp o) {
        using P = arith::CmpFPredicate;
        std::string a = asFloat(o.getLhs()), b = asFloat(o.getRhs());
        std::string expr;
        switch (o.getPredicate()) {
        case P::OEQ: case P::UEQ: expr = a + " == " + b; break;
        case P::ONE: case P::UNE: expr = a + " != " + b; break;
        case P::OLT: case P::ULT: expr = a + " < " + b; break;
        case P::OLE: case P::ULE: expr = a + " <= " + b; break;
        case P::OGT: case P::UGT: expr = a + " > " + b; break;
        case P::OGE: case P::UGE: expr = a + " >= " + b; break;
        case P::AlwaysTrue: expr = "true"; break;
        case P::AlwaysFalse: expr = "false"; break;
        case P::UNO: expr = "isnan(" + a + ") || isnan(" + b + ")"; break;
        case P::ORD: expr = "!isnan(" + a + ") && !isnan(" + b + ")"; break;
        }
        line() << declare(r) << " = " << expr << ";\n";
        return success();
      })
      .Case([&](arith::SelectOp o) {
        line() << declare(r) << " = " << name(o.getCondition()) << " ? " << name(o.getTrueValue())
               << " : " << name(o.getFalseValue()) << ";\n";
        return success();
      })
      .Case<arith::ExtFOp, arith::TruncFOp, arith::SIToFPOp, arith::FPToSIOp, arith::IndexCastOp,
            arith::ExtSIOp, arith::TruncIOp>([&](auto) { return cast(/*fromUnsigned=*/false); })
      .Case<arith::ExtUIOp, arith::UIToFPOp, arith::IndexCastUIOp>(
          [&](auto) { return cast(/*fromUnsigned=*/true); })
      .Case([&](arith::BitcastOp o) { return emitBitcast(o); })
      .Case([&](math::ExpOp) { return call("__exp"); })
      // exp2 is the hardware's ex2.approx (about 2 ulp, denormals flushed),
      // as exp is __expf: softmax needs throughput, not the last ulp.
      .Case([&](math::Exp2Op o) {
        if (!r.getType().isF32() && !r.getType().isF16() && !r.getType().isBF16()) return call("exp2");
        line() << declare(r) << " = "
               << fromFloat(r.getType(), "tessel::exp2_approx(" + asFloat(o.getOperand()) + ")")
               << ";\n";
        return success();
      })
      .Case([&](tilenv::Exp2FmaOp o) {
        line() << declare(r) << " = "
               << fromFloat(r.getType(), "tessel::exp2_fma(" + asFloat(o.getX()) + ")") << ";\n";
        return success();
      })
      .Case([&](math::LogOp) { return call("log"); })
      .Case([&](math::Log2Op) { return call("log2"); })
      .Case([&](math::SqrtOp) { return call("sqrt"); })
      .Case([&](math::RsqrtOp) { return call("rsqrt"); })
      .Case([&](math::AbsFOp) { return call("fabs"); })
      .Case([&](math::AbsIOp o) { return emitIntegerAbs(o); })
      .Case([&](math::TanhOp) { return call("tanh"); })
      .Case([&](math::FmaOp) { return call("fma"); })
      .Case([&](math::PowFOp) { return call("pow"); })
      .Default([&](Operation *) {
        return LogicalResult(op.emitError("the CUDA emitter cannot print '") << op.getName() << "'");
      });
}

// scf becomes C++ statements; a loop's or an if's results are variables
// declared before it and assigned by its yield.
std::optional<LogicalResult> CudaEmitter::emitControlFlow(Operation &op) {
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&op)
      .Case([&](scf::ForOp o) {
        for (auto [res, init] : llvm::zip(o.getResults(), o.getInitArgs()))
          line() << declare(res) << " = " << name(init) << ";\n";
        for (auto [arg, res] : llvm::zip(o.getRegionIterArgs(), o.getResults()))
          names[arg] = name(res);
        std::string iv = name(o.getInductionVar());
        // Loops over registers are unrolled so that register indices are
        // constants and the arrays stay in registers.
        if (o->hasAttr("tessel.unroll")) line() << "#pragma unroll\n";
        line() << "for (int " << iv << " = " << name(o.getLowerBound()) << "; " << iv << " < "
               << name(o.getUpperBound()) << "; " << iv << " += " << name(o.getStep()) << ") {\n";
        ++depth;
        if (failed(emitBlock(*o.getBody()))) return failure();
        --depth;
        line() << "}\n";
        return success();
      })
      .Case([&](scf::IfOp o) {
        for (Value res : o.getResults()) line() << declare(res) << ";\n";
        line() << "if (" << name(o.getCondition()) << ") {\n";
        ++depth;
        if (failed(emitBlock(*o.thenBlock()))) return failure();
        --depth;
        if (o.elseBlock() && (o.getNumResults() || !o.elseBlock()->without_terminator().empty())) {
          line() << "} else {\n";
          ++depth;
          if (failed(emitBlock(*o.elseBlock()))) return failure();
          --depth;
        }
        line() << "}\n";
        return success();
      })
      .Case([&](scf::YieldOp o) {
        Operation *parent = o->getParentOp();
        for (auto [res, v] : llvm::zip(parent->getResults(), o.getOperands()))
          if (name(res) != name(v)) line() << name(res) << " = " << name(v) << ";\n";
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

// Loads, stores and the buffers they address: registers are local arrays,
// shared buffers pointers at fixed offsets into the one dynamic allocation,
// another rank's buffer the address its peer table holds.
std::optional<LogicalResult> CudaEmitter::emitBuffer(Operation &op) {
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&op)
      .Case([&](memref::LoadOp o) {
        line() << declare(o.getResult()) << " = " << element(o.getMemRef(), o.getIndices()) << ";\n";
        return success();
      })
      .Case([&](memref::StoreOp o) {
        line() << element(o.getMemRef(), o.getIndices()) << " = " << name(o.getValue()) << ";\n";
        return success();
      })
      .Case([&](memref::DimOp o) {
        std::optional<int64_t> d = o.getConstantIndex();
        auto it = dims.find(o.getSource());
        if (!d || it == dims.end())
          return LogicalResult(o.emitError("the CUDA emitter needs memref.dim of a kernel parameter"));
        line() << "const int " << name(o.getResult()) << " = " << it->second[*d] << ";\n";
        return success();
      })
      .Case([&](AllocOp o) {
        MemRefType type = o.getType();
        std::string elt = typeName(type.getElementType());
        if (getMemorySpace(type) == MemorySpace::local) {
          // Unused, it would be a warning under NVRTC.
          if (o.getResult().use_empty()) return success();
          line() << "__align__(16) " << elt << " " << name(o.getResult()) << "["
                 << type.getNumElements() << "];\n";
        } else {
          if (!o.getOffset())
            return LogicalResult(o.emitError("shared buffer has no offset; run tessel-lower-tile-ops"));
          line() << elt << " *" << name(o.getResult()) << " = reinterpret_cast<" << elt
                 << " *>(tessel_smem + " << *o.getOffset() << ");\n";
        }
        return success();
      })
      .Case([&](PeerOp o) {
        // The source's table holds every rank's address; the extents are
        // the source's. (Unused where TMA moves its tiles: unused, it would
        // be a warning under NVRTC.)
        dims[o.getResult()] = dims[o.getSource()];
        if (o.getResult().use_empty()) return success();
        std::string elt = typeName(o.getType().getElementType());
        line() << elt << " *__restrict__ " << name(o.getResult()) << " = reinterpret_cast<" << elt
               << " *>(" << name(o.getSource()) << "_peers.at[" << name(o.getRank()) << "]);\n";
        return success();
      })
      .Case([&](tilenv::SmemAddressOp o) {
        line() << "const unsigned " << name(o.getResult()) << " = tessel::smem_address("
               << name(o.getBuffer()) << ");\n";
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

// What a thread asks of the hardware about itself: its index, the grid's
// size and its cluster rank, a value from another lane (warp shuffles), and
// its warpgroup's register count.
std::optional<LogicalResult> CudaEmitter::emitThreadOp(Operation &op) {
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&op)
      .Case([&](tilenv::ThreadIdOp o) {
        line() << "const int " << name(o.getResult()) << " = threadIdx.x;\n";
        return success();
      })
      .Case([&](tilenv::GridDimOp o) {
        line() << "const int " << name(o.getResult()) << " = gridDim.x;\n";
        return success();
      })
      .Case([&](tilenv::ShflXorOp o) {
        line() << declare(o.getResult()) << " = __shfl_xor_sync(0xffffffffu, " << name(o.getValue())
               << ", " << o.getOffset() << ", " << o.getWidth() << ");\n";
        return success();
      })
      .Case([&](tilenv::ClusterRankOp o) {
        line() << declare(o.getRank()) << " = tessel::cluster_rank();\n";
        return success();
      })
      .Case([&](tilenv::SetMaxNRegOp o) {
        line() << "asm volatile(\"setmaxnreg." << (o.getIncrease() ? "inc" : "dec")
               << ".sync.aligned.u32 " << o.getCount() << ";\");\n";
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

// Blocks and ranks meet in global memory: atomic adds, flags and vector
// reductions, each a device-header call that carries its memory order.
std::optional<LogicalResult> CudaEmitter::emitGlobalAtomic(Operation &op) {
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&op)
      .Case([&](tilenv::AtomicAddOp o) {
        line() << "tessel::atomic_add<tessel::order_" << stringifyMemoryOrder(o.getOrder())
               << ">(&" << element(o.getMemref(), o.getIndices()) << ", " << name(o.getValue())
               << ");\n";
        return success();
      })
      .Case([&](tilenv::FlagStoreOp o) {
        line() << (o.getAdd() ? "tessel::flag_add(&" : "tessel::flag_store(&") << element(o.getMemref(), o.getIndices()) << ", "
               << name(o.getValue()) << ");\n";
        return success();
      })
      .Case([&](tilenv::FlagWaitOp o) {
        line() << "tessel::flag_wait(&" << element(o.getMemref(), o.getIndices()) << ", "
               << name(o.getValue()) << ", " << o.getTimeoutMs() << "LL, \"" << o.getName()
               << "\");\n";
        return success();
      })
      .Case([&](tilenv::ReduceAddVectorOp o) {
        line() << "tessel::red_add_v" << o.getCount() << "<tessel::order_"
               << stringifyMemoryOrder(o.getOrder()) << ">(&"
               << element(o.getDest(), o.getDestIndices());
        for (int64_t i = 0, n = o.getCount(); i < n; ++i)
          os << ", " << slot(o.getSource(), o.getSourceIndex(), i);
        os << ");\n";
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

// Copies that bypass registers or run asynchronously (vector, cp.async,
// TMA, bulk), their commit and wait groups, and the proxy fences that
// order them against ordinary accesses.
std::optional<LogicalResult> CudaEmitter::emitCopy(Operation &op) {
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&op)
      .Case([&](tilenv::FenceProxyAsyncGlobalOp) {
        return asmStatement("fence.proxy.async.global");
      })
      .Case([&](tilenv::CopyVectorOp o) {
        line() << "tessel::copy_bytes<" << o.getBytes() << ">(&"
               << element(o.getDest(), o.getDestIndices()) << ", &"
               << element(o.getSource(), o.getSourceIndices()) << ");\n";
        return success();
      })
      .Case([&](tilenv::CpAsyncOp o) {
        line() << "tessel::cp_async<" << o.getBytes() << ">(&"
               << element(o.getDest(), o.getDestIndices()) << ", &"
               << element(o.getSource(), o.getSourceIndices()) << ");\n";
        return success();
      })
      .Case([&](tilenv::CpAsyncWaitOp o) {
        if (std::optional<int64_t> n = o.getPending())
          return asmStatement("cp.async.wait_group " + Twine(*n));
        return asmStatement("cp.async.wait_all");
      })
      .Case([&](tilenv::CpAsyncCommitOp) { return asmStatement("cp.async.commit_group"); })
      .Case([&](tilenv::TmaLoadOp o) {
        std::string map = tensorMapOf(o.getDescriptor(), o.getRank());
        if (std::optional<int64_t> mask = o.getMulticastMask())
          line() << "tessel::tma_load_multicast(" << map << ", " << name(o.getDest()) << ", "
                 << name(o.getBarrier()) << ", " << *mask;
        else
          line() << "tessel::tma_load(" << map << ", " << name(o.getDest()) << ", "
                 << name(o.getBarrier());
        return finishTmaCall(o.getCoords());
      })
      .Case([&](tilenv::TmaStoreOp o) {
        line() << (o.getReduceAdd() ? "tessel::tma_reduce_add(" : "tessel::tma_store(")
               << tensorMapOf(o.getDescriptor(), o.getRank()) << ", " << name(o.getSource());
        return finishTmaCall(o.getCoords());
      })
      .Case([&](tilenv::BulkCommitOp) { return asmStatement("cp.async.bulk.commit_group"); })
      .Case([&](tilenv::BulkWaitOp o) {
        return asmStatement(o.getRead() ? "cp.async.bulk.wait_group.read 0"
                                        : "cp.async.bulk.wait_group 0");
      })
      .Case([&](tilenv::FenceProxyAsyncOp) { return asmStatement("fence.proxy.async.shared::cta"); })
      .Default([](Operation *) { return std::nullopt; });
}

// Barriers: the block's, a warp's, named ones, the cluster's and mbarriers.
std::optional<LogicalResult> CudaEmitter::emitSync(Operation &op) {
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(&op)
      .Case([&](tilenv::SyncThreadsOp) {
        line() << "__syncthreads();\n";
        return success();
      })
      .Case([&](tilenv::ClusterBarrierOp) {
        line() << "tessel::cluster_sync();\n";
        return success();
      })
      .Case([&](tilenv::MbarrierArriveRemoteOp o) {
        line() << "tessel::mbarrier_arrive_cluster(" << name(o.getAddress()) << ", "
               << name(o.getRank()) << ");\n";
        return success();
      })
      .Case([&](tilenv::MbarrierInitOp o) {
        line() << "tessel::mbarrier_init(" << name(o.getAddress()) << ", " << o.getArrivals()
               << ");\n";
        return success();
      })
      .Case([&](tilenv::MbarrierArriveOp o) {
        if (std::optional<int64_t> bytes = o.getExpectBytes())
          line() << "tessel::mbarrier_arrive_expect_tx(" << name(o.getAddress()) << ", " << *bytes
                 << ");\n";
        else
          line() << "tessel::mbarrier_arrive(" << name(o.getAddress()) << ");\n";
        return success();
      })
      .Case([&](tilenv::MbarrierWaitOp o) {
        line() << "tessel::mbarrier_wait(" << name(o.getAddress()) << ", " << name(o.getParity())
               << ");\n";
        return success();
      })
      .Case([&](tilenv::FenceMbarrierInitOp) {
        return asmStatement("fence.mbarrier_init.release.cluster");
      })
      .Case([&](tilenv::NamedBarrierOp o) {
        return asmStatement((o.getArrive() ? "bar.arrive " : "bar.sync ") + Twine(o.getId()) +
                            ", " + Twine(o.getThreads()));
      })
      .Case([&](tilenv::SyncWarpOp) {
        line() << "__syncwarp();\n";
        return success();
      })
      .Case([&](tilenv::TrapUnlessOp o) {
        std::string what;
        for (char c : o.getWhat()) {
          if (c == '"' || c == '\\') what += '\\';
          what += c;
        }
        line() << "if (!" << name(o.getCondition()) << ") tessel::trap_with_report(\"" << what
               << "\", " << name(o.getHeld()) << ", " << name(o.getLimit()) << ", 0ull, -1);\n";
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

LogicalResult CudaEmitter::emitOp(Operation &op) {
  // An unsigned integer's bits read as the signless integer arith computes
  // with, or back: C++'s conversion between the two types of one width.
  if (auto bits = llvm::dyn_cast<UnrealizedConversionCastOp>(op)) {
    Type from = bits.getOperand(0).getType(), to = bits.getResult(0).getType();
    if (bits->getNumOperands() != 1 || bits->getNumResults() != 1 || !from.isInteger() ||
        !to.isInteger() || from.getIntOrFloatBitWidth() != to.getIntOrFloatBitWidth())
      return op.emitError("the CUDA emitter converts between integers of one width only, not ")
             << from << " to " << to;
    line() << declare(bits.getResult(0)) << " = " << typeName(to) << "(" << name(bits.getOperand(0))
           << ");\n";
    return success();
  }
  // tilenv.exp2_fma is element arithmetic too, printed beside math.exp2.
  if (op.getDialect() && (op.getDialect()->getNamespace() == "arith" ||
                          op.getDialect()->getNamespace() == "math" ||
                          llvm::isa<tilenv::Exp2FmaOp>(op)))
    return emitArith(op);
  // Each family prints the ops it knows and passes the others on; no op
  // belongs to two.
  for (auto family : {&CudaEmitter::emitControlFlow, &CudaEmitter::emitBuffer,
                      &CudaEmitter::emitThreadOp, &CudaEmitter::emitGlobalAtomic,
                      &CudaEmitter::emitCopy, &CudaEmitter::emitSync, &CudaEmitter::emitTensorCore})
    if (std::optional<LogicalResult> printed = (this->*family)(op)) return *printed;
  return op.emitError("the CUDA emitter cannot print '")
         << op.getName() << "'; lower tile ops first (tessel-lower-tile-ops)";
}

FailureOr<rt::KernelSpec> CudaEmitter::emitKernel(KernelOp kernel) {
  rt::KernelSpec spec;
  spec.name = kernel.getSymName().str();
  spec.threads = kernel.getThreads();
  spec.sharedBytes = kernel.getSmemBytes().value_or(0);
  spec.persistent = kernel.getPersistent();
  if (std::optional<ArrayRef<int64_t>> cluster = kernel.getCluster())
    for (auto [i, extent] : llvm::enumerate(*cluster)) spec.cluster[i] = unsigned(extent);
  if (!kernel.getSmemBytes())
    return kernel.emitError("kernel is not lowered; run tessel-lower-tile-ops first");

  // Grid: postfix programs over the index parameters.
  for (AffineExpr e : kernel.getGrid().getResults()) {
    std::vector<rt::GridToken> program;
    std::function<void(AffineExpr)> walk = [&](AffineExpr x) {
      if (auto c = llvm::dyn_cast<AffineConstantExpr>(x))
        return program.push_back({rt::GridToken::Const, c.getValue()});
      if (auto s = llvm::dyn_cast<AffineSymbolExpr>(x))
        return program.push_back({rt::GridToken::Symbol, (int64_t)s.getPosition()});
      auto bin = llvm::cast<AffineBinaryOpExpr>(x);
      walk(bin.getLHS());
      walk(bin.getRHS());
      rt::GridToken::Kind k = x.getKind() == AffineExprKind::Add        ? rt::GridToken::Add
                              : x.getKind() == AffineExprKind::Mul      ? rt::GridToken::Mul
                              : x.getKind() == AffineExprKind::FloorDiv ? rt::GridToken::FloorDiv
                              : x.getKind() == AffineExprKind::CeilDiv  ? rt::GridToken::CeilDiv
                                                                        : rt::GridToken::Mod;
      program.push_back({k, 0});
    };
    walk(e);
    spec.grid.push_back(std::move(program));
  }

  // Parameters with a tensor map per rank (tile.peer tiles moved by TMA):
  // their peer tables come too, whether or not a tile.peer still reads one.
  llvm::SmallDenseSet<unsigned> peerMapped;
  if (ArrayAttr maps = kernel.getTmaDescriptorsAttr())
    for (auto attr : maps.getAsRange<DictionaryAttr>())
      if (attr.get("peers"))
        peerMapped.insert(llvm::cast<IntegerAttr>(attr.get("param")).getInt());
  std::string params;
  for (BlockArgument arg : kernel.getParams()) {
    rt::ParamSpec p;
    std::string pname = "p" + std::to_string(arg.getArgNumber());
    names[arg] = pname;
    if (!params.empty()) params += ", ";
    if (auto m = llvm::dyn_cast<MemRefType>(arg.getType())) {
      FailureOr<rt::ScalarType> elt = scalarType(m.getElementType());
      if (failed(elt)) return kernel.emitError("unsupported element type ") << m.getElementType();
      p.isBuffer = true;
      p.type = *elt;
      params += typeName(m.getElementType()) + " *__restrict__ " + pname;
      SmallVector<std::string> extents;
      for (auto [d, size] : llvm::enumerate(m.getShape())) {
        p.shape.push_back(ShapedType::isDynamic(size) ? -1 : size);
        if (ShapedType::isDynamic(size)) {
          std::string dimName = pname + "_d" + std::to_string(d);
          params += ", int " + dimName;
          extents.push_back(dimName);
        } else {
          extents.push_back(std::to_string(size));
        }
      }
      dims[arg] = extents;
      // Reached on other ranks: every rank's address follows.
      if (llvm::any_of(arg.getUsers(), [](Operation *u) { return llvm::isa<PeerOp>(u); }) ||
          peerMapped.contains(arg.getArgNumber())) {
        p.peers = true;
        params += ", const tessel::PeerTable " + pname + "_peers";
      }
    } else {
      FailureOr<rt::ScalarType> t = scalarType(arg.getType());
      if (failed(t)) return kernel.emitError("unsupported parameter type ") << arg.getType();
      p.type = *t;
      params += typeName(arg.getType()) + " " + pname;
    }
    spec.params.push_back(std::move(p));
  }

  if (ArrayAttr maps = kernel.getTmaDescriptorsAttr()) {
    for (auto [i, attr] : llvm::enumerate(maps.getAsRange<DictionaryAttr>())) {
      rt::TensorMapSpec map;
      map.param = llvm::cast<IntegerAttr>(attr.get("param")).getInt();
      ArrayRef<int64_t> box = llvm::cast<DenseI64ArrayAttr>(attr.get("box")).asArrayRef();
      map.box.assign(box.begin(), box.end());
      map.swizzle = llvm::cast<IntegerAttr>(attr.get("swizzle")).getInt();
      // A map per rank (tile.peer tiles by TMA): the launch encodes one for
      // each address of the tensor's peer table.
      map.peers = bool(attr.get("peers"));
      params += std::string(", const __grid_constant__ tessel::") +
                (map.peers ? "PeerTensorMaps" : "TensorMap") + " tma" + std::to_string(i);
      spec.tensorMaps.push_back(std::move(map));
    }
  }

  // setmaxnreg moves registers between warpgroups from a known count at
  // entry; ptxas only fixes that count (65536 / threads) when the kernel
  // promises one block per SM, and otherwise ignores setmaxnreg (C7508).
  bool movesRegisters = false;
  kernel.walk([&](tilenv::SetMaxNRegOp) { movesRegisters = true; });
  emulateTcgen05 = kernel->hasAttr("tcgen05_emulated");
  os << "// Generated by Tessel from kernel @" << spec.name << ".\n"
     << "#include \"tessel_device.h\"\n"
     << (emulateTcgen05 ? "#include \"tessel_tcgen05_emu.h\"\n" : "") << "\n"
     << "extern \"C\" __global__ void __launch_bounds__(" << spec.threads
     << (movesRegisters ? ", 1" : "") << ") "
     << spec.name << "(" << params << ") {\n";
  if (spec.sharedBytes) line() << "extern __shared__ __align__(1024) unsigned char tessel_smem[];\n";
  static const char *axes[] = {"x", "y", "z"};
  for (auto [i, idx] : llvm::enumerate(kernel.getBlockIndices())) {
    names[idx] = std::string("b") + axes[i];
    // Unused, it would be a warning under NVRTC.
    if (!idx.use_empty()) line() << "const int " << names[idx] << " = blockIdx." << axes[i] << ";\n";
  }
  if (failed(emitBlock(kernel.getBodyBlock()))) return failure();
  os << "}\n";
  return spec;
}
} // namespace tessel

FailureOr<rt::KernelSpec> tessel::emitCuda(KernelOp kernel, raw_ostream &os,
                                           std::vector<EmittedLine> *lines) {
  if (!lines) return CudaEmitter(os).emitKernel(kernel);
  std::string text;
  llvm::raw_string_ostream buffer(text);
  std::vector<std::pair<uint64_t, Operation *>> origins;
  CudaEmitter emitter(buffer, &origins);
  FailureOr<rt::KernelSpec> spec = emitter.emitKernel(kernel);
  // Each line was printed for the last op whose text began at or before it;
  // the lines before the first op (includes, the signature) for the kernel.
  lines->clear();
  auto next = origins.begin();
  Operation *current = kernel;
  for (size_t start = 0; start < text.size();) {
    for (; next != origins.end() && next->first <= start; ++next) current = next->second;
    lines->push_back({current->getLoc(), current->getName().getStringRef().str()});
    size_t end = text.find('\n', start);
    start = end == std::string::npos ? text.size() : end + 1;
  }
  os << text;
  return spec;
}
