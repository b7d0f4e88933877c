//===- Expressions.cpp - the DSL's scalar expressions ---------------------===//
//
// DType's names and sizes, and Expr: constants, symbols and kernel values;
// arithmetic on index symbols stays on the host (so extents and grids can be
// computed from it) while anything else builds arith/math ops at the user's
// line; conversions between the scalar types; host evaluation.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Program.h"
#include "DslInternal.h"
#include "ExprInternal.h"

#include "tessel/Dialect/Tile/TileDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

#include <fmt/format.h>

using namespace mlir;
using namespace tessel;
using namespace tessel::detail;

//===----------------------------------------------------------------------===//
// Scalar types
//===----------------------------------------------------------------------===//

const char *tessel::name(DType t) {
  static const char *names[] = {"f16", "bf16", "f32",    "f64",    "i32",   "i64", "index",
                                "i1",  "i8",   "u8",     "f8e4m3", "f8e5m2", "ue8m0"};
  return names[static_cast<int>(t)];
}

int64_t tessel::byteSize(DType t) {
  switch (t) {
  case DType::f16: case DType::bf16: return 2;
  case DType::f64: case DType::i64: return 8;
  case DType::i1: case DType::i8: case DType::u8: case DType::f8e4m3: case DType::f8e5m2:
  case DType::ue8m0:
    return 1;
  default: return 4;
  }
}

Type tessel::detail::toMlir(MLIRContext *ctx, DType t) {
  Builder b(ctx);
  switch (t) {
  case DType::f16: return b.getF16Type();
  case DType::bf16: return b.getBF16Type();
  case DType::f32: return b.getF32Type();
  case DType::f64: return b.getF64Type();
  case DType::i32: return b.getI32Type();
  case DType::i64: return b.getI64Type();
  case DType::index: return b.getIndexType();
  case DType::i1: return b.getI1Type();
  case DType::i8: return b.getI8Type();
  case DType::u8: return b.getIntegerType(8, /*isSigned=*/false);
  case DType::f8e4m3: return b.getType<Float8E4M3FNType>();
  case DType::f8e5m2: return b.getType<Float8E5M2Type>();
  case DType::ue8m0: return b.getType<Float8E8M0FNUType>();
  }
  return {};
}

static DType fromMlir(Type t) {
  if (t.isF16()) return DType::f16;
  if (t.isBF16()) return DType::bf16;
  if (t.isF32()) return DType::f32;
  if (t.isF64()) return DType::f64;
  if (t.isInteger(32)) return DType::i32;
  if (t.isInteger(64)) return DType::i64;
  if (t.isInteger(1)) return DType::i1;
  if (t.isUnsignedInteger(8)) return DType::u8;
  if (t.isInteger(8)) return DType::i8;
  if (llvm::isa<Float8E4M3FNType>(t)) return DType::f8e4m3;
  if (llvm::isa<Float8E5M2Type>(t)) return DType::f8e5m2;
  if (llvm::isa<Float8E8M0FNUType>(t)) return DType::ue8m0;
  return DType::index;
}

bool tessel::detail::isFloat(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64 ||
         t == DType::f8e4m3 || t == DType::f8e5m2 || t == DType::ue8m0;
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

static Expr constant(int64_t v) {
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprNode::Const;
  n->i = v;
  return Expr(n);
}

Expr::Expr() : node(std::make_shared<ExprNode>()) { node->kind = ExprNode::Unset; }
Expr::Expr(int v) : Expr(constant(v)) {}
Expr::Expr(int64_t v) : Expr(constant(v)) {}
Expr::Expr(double v) : node(std::make_shared<ExprNode>()) {
  node->kind = ExprNode::FConst;
  node->f = v;
  node->type = DType::f32;
}

Expr tessel::detail::fromValue(Value v) {
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprNode::Val;
  n->val = v.getAsOpaquePointer();
  n->type = fromMlir(v.getType());
  return Expr(n);
}

DType Expr::type() const {
  if (node->kind == ExprNode::Unset) fail(lastLoc, kUnsetExpr);
  if (node->kind == ExprNode::Val) return fromMlir(Value::getFromOpaquePointer(node->val).getType());
  return node->type;
}

bool Expr::isConstant(int64_t *v) const {
  if (node->kind != ExprNode::Const) return false;
  if (v) *v = node->i;
  return true;
}

bool tessel::detail::isHost(const ExprNode &n) {
  return n.kind == ExprNode::Const || (n.kind == ExprNode::Sym && n.i >= 0) ||
         (n.kind == ExprNode::Bin && isHost(*n.lhs) && isHost(*n.rhs));
}

/// Converts between the scalar types a kernel computes with.
/// arith computes on signless integers only: a u8 is read as the i8 of its
/// bits (and written back the same way), then extended as unsigned.
static Value reinterpret(OpBuilder &b, Location l, Value v, Type to) {
  return UnrealizedConversionCastOp::create(b, l, to, v).getResult(0);
}

Value tessel::detail::convertTo(OpBuilder &b, Location l, Value v, Type to) {
  Type from = v.getType();
  if (from == to) return v;
  if (to.isUnsignedInteger()) {
    Type bits = b.getIntegerType(to.getIntOrFloatBitWidth());
    return reinterpret(b, l, convertTo(b, l, v, bits), to);
  }
  if (from.isUnsignedInteger()) {
    Value bits = reinterpret(b, l, v, b.getIntegerType(from.getIntOrFloatBitWidth()));
    if (llvm::isa<FloatType>(to)) return arith::UIToFPOp::create(b, l, to, bits);
    if (to.isIndex()) return arith::IndexCastUIOp::create(b, l, to, bits);
    if (to.isInteger(1) || to.getIntOrFloatBitWidth() <= from.getIntOrFloatBitWidth())
      return convertTo(b, l, bits, to);
    return arith::ExtUIOp::create(b, l, to, bits);
  }
  auto fFrom = llvm::dyn_cast<FloatType>(from), fTo = llvm::dyn_cast<FloatType>(to);
  if (fFrom && fTo) {
    if (fFrom.getWidth() < fTo.getWidth()) return arith::ExtFOp::create(b, l, to, v);
    if (fFrom.getWidth() > fTo.getWidth()) return arith::TruncFOp::create(b, l, to, v);
    Value wide = arith::ExtFOp::create(b, l, b.getF32Type(), v);
    return arith::TruncFOp::create(b, l, to, wide);
  }
  // As in C++: nonzero is true, and true is 1.
  if (to.isInteger(1)) {
    Value zero = arith::ConstantOp::create(b, l, b.getZeroAttr(from));
    if (fFrom) return arith::CmpFOp::create(b, l, arith::CmpFPredicate::UNE, v, zero);
    return arith::CmpIOp::create(b, l, arith::CmpIPredicate::ne, v, zero);
  }
  if (from.isInteger(1)) {
    if (fTo) return arith::UIToFPOp::create(b, l, to, v);
    if (to.isIndex()) return arith::IndexCastUIOp::create(b, l, to, v);
    return arith::ExtUIOp::create(b, l, to, v);
  }
  if (from.isIndex()) {
    Value i = arith::IndexCastOp::create(b, l, b.getI32Type(), v);
    return to.isInteger(32) ? i : convertTo(b, l, i, to);
  }
  if (to.isIndex()) return arith::IndexCastOp::create(b, l, to, convertTo(b, l, v, b.getI32Type()));
  if (fTo) return arith::SIToFPOp::create(b, l, to, v);
  if (fFrom) return arith::FPToSIOp::create(b, l, to, v);
  if (from.getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
    return arith::ExtSIOp::create(b, l, to, v);
  return arith::TruncIOp::create(b, l, to, v);
}

Value Expr::value(DType as) const {
  if (node->kind == ExprNode::Unset) fail(lastLoc, kUnsetExpr);
  Program &p = Program::current(lastLoc);
  OpBuilder &b = p.builder();
  Location l = p.location(lastLoc);
  Type t = toMlir(&p.context(), as);
  if (t.isUnsignedInteger() && node->kind != ExprNode::Val) // built signless, read as unsigned
    return convertTo(b, l, value(DType::i32), t);
  switch (node->kind) {
  case ExprNode::Const:
    if (isFloat(as)) return arith::ConstantOp::create(b, l, FloatAttr::get(t, (double)node->i));
    return arith::ConstantOp::create(b, l, IntegerAttr::get(t, node->i));
  case ExprNode::FConst:
    if (!isFloat(as)) fail(lastLoc, fmt::format("a floating-point constant is used as {}", name(as)));
    return arith::ConstantOp::create(b, l, FloatAttr::get(t, node->f));
  case ExprNode::Sym: {
    size_t param = node->i >= 0 ? p.symbolParam(node->i) : static_cast<size_t>(-node->i - 1);
    return convertTo(b, l, p.paramValue(param, lastLoc), t);
  }
  case ExprNode::Bin: {
    Value lhs = Expr(node->lhs).value(as);
    Value rhs = Expr(node->rhs).value(as);
    switch (node->op) {
    case '+': return arith::AddIOp::create(b, l, lhs, rhs);
    case '-': return arith::SubIOp::create(b, l, lhs, rhs);
    case '*': return arith::MulIOp::create(b, l, lhs, rhs);
    case '/': return floorDivide(b, l, lhs, rhs);
    case '%': return floorRemainder(b, l, lhs, rhs);
    case 'c': return arith::CeilDivSIOp::create(b, l, lhs, rhs);
    case 'M': return arith::MaxSIOp::create(b, l, lhs, rhs);
    case 'm': return arith::MinSIOp::create(b, l, lhs, rhs);
    case '&': return arith::AndIOp::create(b, l, lhs, rhs);
    case '|': return arith::OrIOp::create(b, l, lhs, rhs);
    case '^': return arith::XOrIOp::create(b, l, lhs, rhs);
    case '<': return arith::ShLIOp::create(b, l, lhs, rhs);
    case '>': return arith::ShRSIOp::create(b, l, lhs, rhs);
    }
    llvm_unreachable("hostBinary builds only the operators above");
  }
  case ExprNode::Val: return Value::getFromOpaquePointer(node->val);
  case ExprNode::Unset: break; // refused above
  }
  return {};
}

int64_t tessel::evaluate(const Expr &e, const std::vector<int64_t> &symbols) {
  const ExprNode &n = *e.node;
  if (n.kind == ExprNode::Unset) throw Error(fmt::format("evaluate: {}", kUnsetExpr));
  switch (n.kind) {
  case ExprNode::Const: return n.i;
  case ExprNode::Sym:
    if (n.i < 0 || size_t(n.i) >= symbols.size())
      throw Error("evaluate: the expression uses a value that is not an index symbol");
    return symbols[n.i];
  case ExprNode::Bin: {
    int64_t a = evaluate(Expr(n.lhs), symbols), b = evaluate(Expr(n.rhs), symbols);
    if ((n.op == '/' || n.op == '%' || n.op == 'c') && b == 0)
      throw Error("evaluate: division by zero");
    switch (n.op) {
    case '+': return a + b;
    case '-': return a - b;
    case '*': return a * b;
    case '/': return detail::floorDivide(a, b);
    case '%': return detail::floorRemainder(a, b);
    case 'c': return -detail::floorDivide(-a, b);
    case 'M': return std::max(a, b);
    case 'm': return std::min(a, b);
    case '&': return a & b;
    case '|': return a | b;
    case '^': return a ^ b;
    case '<': case '>':
      if (b < 0 || b >= 64) throw Error(fmt::format("evaluate: a shift by {} bits of an index", b));
      return n.op == '<' ? int64_t(uint64_t(a) << b) : a >> b;
    }
    break;
  }
  default: break;
  }
  throw Error("evaluate: the expression is not computed from constants and index symbols");
}

//===----------------------------------------------------------------------===//
// Operators and functions
//===----------------------------------------------------------------------===//

/// The common type two operands compute in: a kernel value's type wins over
/// a constant's; two kernel values must agree, except that 8-bit integers
/// compute as i32 (C++'s integer promotion).
static DType promoted(DType t) { return t == DType::i8 || t == DType::u8 ? DType::i32 : t; }

static DType commonType(const Expr &a, const Expr &b) {
  bool aVal = a.node->kind == ExprNode::Val || (a.node->kind == ExprNode::Sym && a.node->i < 0);
  bool bVal = b.node->kind == ExprNode::Val || (b.node->kind == ExprNode::Sym && b.node->i < 0);
  DType ta = promoted(a.type()), tb = promoted(b.type());
  // Integers of different types meet as C++'s usual conversions have them:
  // a bool or a loop index takes the other's type, i32 widens to i64.
  auto integer = [](DType t) { return t == DType::i32 || t == DType::i64 || t == DType::index || t == DType::i1; };
  if (aVal && bVal && ta != tb && integer(ta) && integer(tb)) {
    auto rank = [](DType t) { return t == DType::i64 ? 3 : t == DType::i32 ? 2 : t == DType::index ? 1 : 0; };
    return rank(ta) >= rank(tb) ? ta : tb;
  }
  if (aVal && bVal && ta != tb)
    fail(lastLoc, fmt::format("operands have types {} and {}; convert one with cast()", name(ta), name(tb)));
  if (aVal) return ta;
  if (bVal) return tb;
  if (a.node->kind == ExprNode::FConst || b.node->kind == ExprNode::FConst) return DType::f32;
  return DType::index;
}

/// `e` in the type `t` an operation computes in (a promoted 8-bit value
/// is extended, as its signedness says).
static Value operand(const Expr &e, DType t) {
  Value v = e.value(t);
  Program &p = Program::current(lastLoc);
  return convertTo(p.builder(), p.location(lastLoc), v, toMlir(&p.context(), t));
}

static Expr hostBinary(char op, Expr a, Expr b) {
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprNode::Bin;
  n->op = op;
  n->lhs = a.node;
  n->rhs = b.node;
  return Expr(n);
}

static const char *operatorName(char op) {
  switch (op) {
  case '&': return "&";
  case '|': return "|";
  case '^': return "^";
  case '<': return "<<";
  case '>': return ">>";
  case '%': return "%";
  }
  return "this operator";
}

/// A constant shift amount must be below the shifted type's width (C++
/// leaves anything else undefined; arith makes it poison).
static void checkShift(char op, const Expr &amount, int64_t bits) {
  int64_t n;
  if ((op == '<' || op == '>') && amount.isConstant(&n) && (n < 0 || n >= bits))
    fail(lastLoc, fmt::format("a shift by {} bits of a {}-bit value; shift amounts are 0 to {}", n,
                              bits, bits - 1));
}

static Expr binary(char op, Expr a, Expr b) {
  int64_t x, y;
  if (a.isConstant(&x) && b.isConstant(&y)) {
    checkShift(op, b, 64);
    switch (op) {
    case '+': return x + y;
    case '-': return x - y;
    case '*': return x * y;
    case '/': if (y) return floorDivide(x, y); break;
    case '%': if (y) return floorRemainder(x, y); break;
    case 'c': if (y) return -floorDivide(-x, y); break;
    case 'M': return std::max(x, y);
    case 'm': return std::min(x, y);
    case '&': return x & y;
    case '|': return x | y;
    case '^': return x ^ y;
    case '<': return int64_t(uint64_t(x) << y);
    case '>': return x >> y;
    }
    fail(lastLoc, "division by zero in a constant expression");
  }
  if (isHost(*a.node) && isHost(*b.node) && llvm::StringRef("+-*/%cMm&|^<>").contains(op)) {
    checkShift(op, b, 64);
    return hostBinary(op, a, b);
  }
  DType t = commonType(a, b);
  Program &p = Program::current(lastLoc);
  OpBuilder &bld = p.builder();
  Location l = p.location(lastLoc);
  if (llvm::StringRef("&|^<>").contains(op) && (isFloat(t) || a.node->kind == ExprNode::FConst ||
                                                b.node->kind == ExprNode::FConst))
    fail(lastLoc, fmt::format("operator {} needs integer operands, got {}", operatorName(op), name(t)));
  Value lhs = operand(a, t), rhs = operand(b, t);
  if (isFloat(t)) {
    switch (op) {
    case '+': return fromValue(arith::AddFOp::create(bld, l, lhs, rhs));
    case '-': return fromValue(arith::SubFOp::create(bld, l, lhs, rhs));
    case '*': return fromValue(arith::MulFOp::create(bld, l, lhs, rhs));
    case '/': return fromValue(arith::DivFOp::create(bld, l, lhs, rhs));
    case 'M': return fromValue(arith::MaxNumFOp::create(bld, l, lhs, rhs));
    case 'm': return fromValue(arith::MinNumFOp::create(bld, l, lhs, rhs));
    default:
      fail(lastLoc, fmt::format("operator {} needs integer operands, got {}", operatorName(op), name(t)));
    }
  }
  checkShift(op, b, t == DType::index ? 64 : lhs.getType().getIntOrFloatBitWidth());
  switch (op) {
  case '+': return fromValue(arith::AddIOp::create(bld, l, lhs, rhs));
  case '-': return fromValue(arith::SubIOp::create(bld, l, lhs, rhs));
  case '*': return fromValue(arith::MulIOp::create(bld, l, lhs, rhs));
  case '/': return fromValue(floorDivide(bld, l, lhs, rhs));
  case '%': return fromValue(floorRemainder(bld, l, lhs, rhs));
  case 'c': return fromValue(arith::CeilDivSIOp::create(bld, l, lhs, rhs));
  case 'M': return fromValue(arith::MaxSIOp::create(bld, l, lhs, rhs));
  case 'm': return fromValue(arith::MinSIOp::create(bld, l, lhs, rhs));
  case '&': return fromValue(arith::AndIOp::create(bld, l, lhs, rhs));
  case '|': return fromValue(arith::OrIOp::create(bld, l, lhs, rhs));
  case '^': return fromValue(arith::XOrIOp::create(bld, l, lhs, rhs));
  case '<': return fromValue(arith::ShLIOp::create(bld, l, lhs, rhs));
  case '>': return fromValue(arith::ShRSIOp::create(bld, l, lhs, rhs));
  }
  return {0};
}

/// C++'s `&&` and `||` on any scalars: each operand is true where nonzero.
/// Both operands are evaluated (element code has no short circuit).
static Expr logical(char op, Expr a, Expr b) {
  int64_t x, y;
  if (a.isConstant(&x) && b.isConstant(&y)) return op == '&' ? (x && y) : (x || y);
  Program &p = Program::current(lastLoc);
  Location l = p.location(lastLoc);
  Value lhs = cast(a, DType::i1, lastLoc).value(DType::i1);
  Value rhs = cast(b, DType::i1, lastLoc).value(DType::i1);
  if (op == '&') return fromValue(arith::AndIOp::create(p.builder(), l, lhs, rhs));
  return fromValue(arith::OrIOp::create(p.builder(), l, lhs, rhs));
}

static Expr compare(arith::CmpIPredicate ip, arith::CmpFPredicate fp, Expr a, Expr b) {
  DType t = commonType(a, b);
  Program &p = Program::current(lastLoc);
  Location l = p.location(lastLoc);
  Value lhs = operand(a, t), rhs = operand(b, t);
  if (isFloat(t)) return fromValue(arith::CmpFOp::create(p.builder(), l, fp, lhs, rhs));
  return fromValue(arith::CmpIOp::create(p.builder(), l, ip, lhs, rhs));
}

static Expr unary(Expr a, function_ref<Value(OpBuilder &, Location, Value)> make) {
  Program &p = Program::current(lastLoc);
  DType t = a.type();
  if (!isFloat(t)) fail(lastLoc, fmt::format("this function needs a floating-point operand, got {}", name(t)));
  return fromValue(make(p.builder(), p.location(lastLoc), a.value(t)));
}

Expr tessel::operator+(Expr a, Expr b) { return binary('+', a, b); }
Expr tessel::operator-(Expr a, Expr b) { return binary('-', a, b); }
Expr tessel::operator*(Expr a, Expr b) { return binary('*', a, b); }
Expr tessel::operator/(Expr a, Expr b) { return binary('/', a, b); }
Expr tessel::operator%(Expr a, Expr b) { return binary('%', a, b); }
Expr tessel::operator-(Expr a) {
  if (isFloat(a.type()) || a.node->kind == ExprNode::FConst) return Expr(0.0) - a;
  return Expr(0) - a;
}
Expr tessel::ceil_div(Expr a, Expr b) { return binary('c', a, b); }
Expr tessel::max(Expr a, Expr b) { return binary('M', a, b); }
Expr tessel::min(Expr a, Expr b) { return binary('m', a, b); }
Expr tessel::operator&&(Expr a, Expr b) { return logical('&', a, b); }
Expr tessel::operator||(Expr a, Expr b) { return logical('|', a, b); }
Expr tessel::operator!(Expr a) {
  int64_t x;
  if (a.isConstant(&x)) return int64_t(!x);
  return cast(a, DType::i1, lastLoc) == Expr(0);
}
Expr tessel::operator&(Expr a, Expr b) { return binary('&', a, b); }
Expr tessel::operator|(Expr a, Expr b) { return binary('|', a, b); }
Expr tessel::operator^(Expr a, Expr b) { return binary('^', a, b); }
Expr tessel::operator<<(Expr a, Expr b) { return binary('<', a, b); }
Expr tessel::operator>>(Expr a, Expr b) { return binary('>', a, b); }
Expr tessel::operator~(Expr a) {
  if (isFloat(a.type()) || a.node->kind == ExprNode::FConst)
    fail(lastLoc, fmt::format("operator ~ needs an integer operand, got {}", name(a.type())));
  return a ^ Expr(-1);
}
using CI = arith::CmpIPredicate;
using CF = arith::CmpFPredicate;
Expr tessel::operator<(Expr a, Expr b) { return compare(CI::slt, CF::OLT, a, b); }
Expr tessel::operator<=(Expr a, Expr b) { return compare(CI::sle, CF::OLE, a, b); }
Expr tessel::operator>(Expr a, Expr b) { return compare(CI::sgt, CF::OGT, a, b); }
Expr tessel::operator>=(Expr a, Expr b) { return compare(CI::sge, CF::OGE, a, b); }
Expr tessel::operator==(Expr a, Expr b) { return compare(CI::eq, CF::OEQ, a, b); }
// As in C++, NaN != anything is true.
Expr tessel::operator!=(Expr a, Expr b) { return compare(CI::ne, CF::UNE, a, b); }
Expr tessel::exp(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::ExpOp::create(b, l, v); });
}
Expr tessel::exp2(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::Exp2Op::create(b, l, v); });
}
Expr tessel::exp2(Expr a, int64_t fmaEvery) {
  if (fmaEvery < 1)
    fail(lastLoc, fmt::format("exp2's fmaEvery counts registers: one in every {} cannot be", fmaEvery));
  DType t = a.type();
  if (t != DType::f32 && t != DType::f16 && t != DType::bf16)
    fail(lastLoc, fmt::format("exp2 on the FMA pipe takes f32, f16 or bf16, got {}", name(t)));
  return unary(a, [&](OpBuilder &b, Location l, Value v) -> Value {
    return tile::Exp2Op::create(b, l, v.getType(), v, b.getI64IntegerAttr(fmaEvery));
  });
}
Expr tessel::log(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::LogOp::create(b, l, v); });
}
Expr tessel::tanh(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::TanhOp::create(b, l, v); });
}
Expr tessel::sqrt(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::SqrtOp::create(b, l, v); });
}
Expr tessel::abs(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::AbsFOp::create(b, l, v); });
}
Expr tessel::select(Expr cond, Expr a, Expr b) {
  DType t = commonType(a, b);
  Program &p = Program::current(lastLoc);
  Value c = cast(cond, DType::i1, lastLoc).value(DType::i1);
  return fromValue(arith::SelectOp::create(p.builder(), p.location(lastLoc), c, operand(a, t),
                                           operand(b, t)));
}
Expr tessel::cast(Expr a, DType to, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  Value v = a.value(a.node->kind == ExprNode::FConst ? DType::f32 : a.type());
  return fromValue(convertTo(p.builder(), p.location(loc), v, toMlir(&p.context(), to)));
}
Expr tessel::bitcast(Expr a, DType to, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  // Constants and index symbols take the integer (or float) type of `to`'s width.
  bool wide = byteSize(to) == 8;
  DType from = a.type();
  if (a.node->kind == ExprNode::FConst) from = wide ? DType::f64 : DType::f32;
  else if (isHost(*a.node)) from = wide ? DType::i64 : DType::i32;
  auto wordSized = [](DType t) {
    return t == DType::f32 || t == DType::i32 || t == DType::f64 || t == DType::i64;
  };
  if (!wordSized(from) || !wordSized(to) || byteSize(from) != byteSize(to))
    fail(loc, fmt::format("bitcast reinterprets between f32 and i32 or f64 and i64, not {} and {}",
                          name(from), name(to)));
  Value v = a.value(from);
  if (from == to) return fromValue(v);
  return fromValue(arith::BitcastOp::create(p.builder(), p.location(loc), toMlir(&p.context(), to), v));
}
