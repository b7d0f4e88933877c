//===- Program.cpp - the Tessel C++ tile DSL ------------------------------===//
#include "tessel/dsl/Program.h"
#include "DslInternal.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

using namespace mlir;
using namespace tessel;
using namespace tessel::detail;
using tessel::tile::MemorySpace;

//===----------------------------------------------------------------------===//
// Program state
//===----------------------------------------------------------------------===//

struct Program::Impl {
  std::unique_ptr<MLIRContext> ctx;
  OwningOpRef<ModuleOp> module;
  std::unique_ptr<OpBuilder> builder;
  std::string name;
  std::vector<ParamInfo> params;
  std::vector<std::vector<Expr>> tensorShapes; // per param (empty for scalars)
  std::vector<int> symParam;                   // symbol index -> param index
  std::vector<Value> paramValues;              // while building the kernel
  bool built = false;
};

static thread_local Program *buildingProgram = nullptr;

void tessel::fail(SrcLoc loc, const std::string &message) {
  throw Error(fmt::format("{}:{}: error: {}", loc.file_name(), loc.line(), message));
}

const char *tessel::name(DType t) {
  static const char *names[] = {"f16", "bf16", "f32", "f64", "i32", "i64", "index", "i1"};
  return names[static_cast<int>(t)];
}

int64_t tessel::byteSize(DType t) {
  switch (t) {
  case DType::f16: case DType::bf16: return 2;
  case DType::f64: case DType::i64: return 8;
  case DType::i1: return 1;
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
  return DType::index;
}

bool tessel::detail::isFloat(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}


const char *tessel::detail::spaceName(Space s) {
  static const char *names[] = {"global", "shared", "fragment", "local", "tensor-memory"};
  return names[static_cast<int>(s)];
}

std::string tessel::detail::shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  return s + "]";
}

/// Turns MLIR diagnostics raised while `fn` runs into a tessel::Error.
template <class Fn> static void withDiagnostics(MLIRContext &ctx, Fn &&fn) {
  std::string messages;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    std::string loc;
    llvm::raw_string_ostream os(loc);
    if (auto fl = llvm::dyn_cast<FileLineColLoc>(diag.getLocation()))
      os << fl.getFilename().getValue() << ":" << fl.getLine() << ": ";
    else
      os << diag.getLocation() << ": ";
    const char *sev = diag.getSeverity() == DiagnosticSeverity::Error ? "error" : "note";
    messages += loc + sev + ": " + diag.str() + "\n";
    for (Diagnostic &note : diag.getNotes()) {
      std::string nloc;
      llvm::raw_string_ostream nos(nloc);
      if (auto fl = llvm::dyn_cast<FileLineColLoc>(note.getLocation()))
        nos << fl.getFilename().getValue() << ":" << fl.getLine() << ": ";
      messages += nloc + "note: " + note.str() + "\n";
    }
    return success();
  });
  bool ok = fn();
  if (!ok || !messages.empty()) {
    if (messages.empty()) messages = "compilation failed without a diagnostic\n";
    messages.pop_back();
    throw Error(messages);
  }
}

/// The generated code names its kernel function after the program: the name
/// must be one a function of its own may take there.
static bool isKernelName(llvm::StringRef name) {
  static const llvm::StringSet<> taken = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
      "case", "catch", "char", "char16_t", "char32_t", "char8_t", "class", "compl", "concept",
      "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
      "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
      "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
      "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
      "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
      "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
      "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
      "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
      "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "main", "threadIdx",
      "blockIdx", "blockDim", "gridDim", "warpSize", "max", "min"};
  if (name.empty() || !(llvm::isAlpha(name[0]) || name[0] == '_')) return false;
  if (!llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; })) return false;
  // "_" alone is PTX's sink operand.
  if (name == "_" || name.starts_with("__") || (name[0] == '_' && llvm::isUpper(name[1])) ||
      name.starts_with("tessel"))
    return false;
  return !taken.contains(name);
}

Program::Program(std::string name, SrcLoc loc) : impl(std::make_unique<Impl>()) {
  impl->ctx = std::make_unique<MLIRContext>();
  // A diagnostic points at the user's line; the whole kernel's IR in a note
  // would bury it.
  impl->ctx->printOpOnDiagnostic(false);
  impl->ctx->loadDialect<tile::TileDialect, tilenv::TileNVDialect, arith::ArithDialect,
                         math::MathDialect, memref::MemRefDialect, scf::SCFDialect>();
  impl->builder = std::make_unique<OpBuilder>(impl->ctx.get());
  impl->module = ModuleOp::create(location(loc));
  impl->name = std::move(name);
  if (!isKernelName(impl->name))
    fail(loc, "kernel name '" + impl->name + "' must be a C identifier that is not a C++ keyword, "
              "a CUDA built-in or reserved (tessel..., __..., _X..., _)");
}
Program::~Program() = default;
Program::Program(Program &&) noexcept = default;
Program &Program::operator=(Program &&) noexcept = default;

const std::string &Program::name() const { return impl->name; }
const std::vector<ParamInfo> &Program::params() const { return impl->params; }
MLIRContext &Program::context() { return *impl->ctx; }
ModuleOp Program::module() { return *impl->module; }
OpBuilder &Program::builder() { return *impl->builder; }

Location Program::location(SrcLoc loc) {
  return FileLineColLoc::get(impl->ctx.get(), loc.file_name(), loc.line(), loc.column());
}

Program &Program::current(SrcLoc loc) {
  if (!buildingProgram) fail(loc, "tile operations can only be used inside Program::kernel's body");
  return *buildingProgram;
}

std::string Program::str(bool generic) {
  std::string s;
  llvm::raw_string_ostream os(s);
  OpPrintingFlags flags;
  if (generic) flags.printGenericOpForm();
  impl->module->print(os, flags);
  return s;
}

Expr Program::sym(const std::string &name, SrcLoc loc) { return scalar(name, DType::index, loc); }

Expr Program::scalar(const std::string &name, DType type, SrcLoc loc) {
  if (impl->built) fail(loc, "parameters must be declared before the kernel is built");
  ParamInfo p;
  p.name = name;
  p.dtype = type;
  impl->params.push_back(p);
  impl->tensorShapes.emplace_back();
  auto node = std::make_shared<ExprNode>();
  if (type == DType::index) {
    node->kind = ExprNode::Sym;
    node->i = impl->symParam.size();
    impl->symParam.push_back(impl->params.size() - 1);
  } else {
    // Non-index scalars are kernel values only.
    node->kind = ExprNode::Sym;
    node->i = -static_cast<int64_t>(impl->params.size()); // -(param + 1)
    node->type = type;
  }
  return Expr(node);
}

/// An expression the host can evaluate from the index symbols.
static bool isHostExpression(const ExprNode &n) {
  switch (n.kind) {
  case ExprNode::Const: return true;
  case ExprNode::Sym: return n.i >= 0;
  case ExprNode::Bin: return isHostExpression(*n.lhs) && isHostExpression(*n.rhs);
  default: return false;
  }
}

int64_t tessel::evaluate(const Expr &e, const std::vector<int64_t> &symbols) {
  const ExprNode &n = *e.node;
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
    }
    break;
  }
  default: break;
  }
  throw Error("evaluate: the expression is not computed from constants and index symbols");
}

Tensor Program::tensor(const std::string &name, std::vector<Expr> shape, DType type, SrcLoc loc) {
  if (impl->built) fail(loc, "parameters must be declared before the kernel is built");
  if (shape.empty()) fail(loc, "tensor '" + name + "' needs at least one dimension");
  ParamInfo p;
  p.name = name;
  p.isTensor = true;
  p.dtype = type;
  Tensor t;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t c;
    ExprNode &n = *shape[d].node;
    if (shape[d].isConstant(&c)) {
      if (c <= 0) fail(loc, fmt::format("tensor '{}' dimension {} must be positive, got {}", name, d, c));
      p.extents.push_back(c);
      t.dims.push_back(c);
    } else if (n.kind == ExprNode::Sym && n.i >= 0) {
      p.extents.push_back(-(1 + n.i));
      t.dims.push_back(-1);
    } else if (isHostExpression(n)) {
      // Checked against the symbols at launch, like a symbol extent.
      p.extents.push_back(kExtentExpression);
      t.dims.push_back(-1);
    } else {
      fail(loc, fmt::format("tensor '{}' dimension {} must be computed from constants and index "
                            "symbols (Program::sym) with + - * / % ceil_div min max",
                            name, d));
    }
  }
  p.extentExprs = shape;
  t.elt = type;
  t.where = Space::global;
  t.param = impl->params.size();
  t.exts = std::move(shape);
  t.label = name;
  impl->params.push_back(p);
  impl->tensorShapes.push_back(t.exts);
  return t;
}

/// A symbolic (host) expression as an affine expression over the symbols.
static AffineExpr toAffine(const ExprNode &n, MLIRContext *ctx, SrcLoc loc) {
  switch (n.kind) {
  case ExprNode::Const: return getAffineConstantExpr(n.i, ctx);
  case ExprNode::Sym:
    if (n.i < 0) fail(loc, "the grid can only depend on index symbols (Program::sym)");
    return getAffineSymbolExpr(n.i, ctx);
  case ExprNode::Bin: {
    AffineExpr l = toAffine(*n.lhs, ctx, loc), r = toAffine(*n.rhs, ctx, loc);
    bool rhsConst = llvm::isa<AffineConstantExpr>(r);
    switch (n.op) {
    case '+': return l + r;
    case '-': return l - r;
    case '*':
      if (!rhsConst && !llvm::isa<AffineConstantExpr>(l)) break;
      return l * r;
    case '/': if (rhsConst) return l.floorDiv(r); break;
    case '%': if (rhsConst) return l % r; break;
    case 'c': if (rhsConst) return l.ceilDiv(r); break;
    }
    fail(loc, "grid extents must be affine in the symbols (divide and multiply by constants)");
  }
  default: fail(loc, "grid extents must be computed from constants and symbols");
  }
}

void Program::buildKernel(std::vector<Expr> grid, int threads, int dims,
                          const std::function<void(std::vector<Expr>)> &body, SrcLoc loc) {
  if (impl->built) fail(loc, "a Program holds one kernel; it was already built");
  if (grid.size() != static_cast<size_t>(dims))
    fail(loc, fmt::format("the body takes {} block indices but the grid has {} dimensions", dims, grid.size()));
  if (threads <= 0 || threads % 32 || threads > 1024)
    fail(loc, fmt::format("threads must be a positive multiple of 32 up to 1024, got {}", threads));
  MLIRContext *ctx = impl->ctx.get();
  SmallVector<AffineExpr> gridExprs;
  for (Expr &g : grid) {
    int64_t c;
    if (g.isConstant(&c) && c <= 0) fail(loc, fmt::format("grid extents must be positive, got {}", c));
    gridExprs.push_back(toAffine(*g.node, ctx, loc));
  }
  AffineMap gridMap = AffineMap::get(0, impl->symParam.size(), gridExprs, ctx);

  OpBuilder &b = builder();
  b.setInsertionPointToEnd(impl->module->getBody());
  Location l = location(loc);
  OperationState state(l, tile::KernelOp::getOperationName());
  state.addAttribute("sym_name", b.getStringAttr(impl->name));
  state.addAttribute("grid", AffineMapAttr::get(gridMap));
  state.addAttribute("threads", b.getI64IntegerAttr(threads));
  state.addAttribute("num_params", b.getI64IntegerAttr(impl->params.size()));
  Region *region = state.addRegion();
  Block *block = new Block();
  region->push_back(block);
  for (auto [i, p] : llvm::enumerate(impl->params)) {
    Type t = toMlir(ctx, p.dtype);
    if (p.isTensor) {
      SmallVector<int64_t> shape;
      for (int64_t e : p.extents) shape.push_back(e < 0 ? ShapedType::kDynamic : e);
      t = tile::getTileMemRefType(shape, t, MemorySpace::global);
    }
    impl->paramValues.push_back(block->addArgument(t, l));
  }
  std::vector<Expr> blockIdx;
  for (int d = 0; d < dims; ++d) {
    auto n = std::make_shared<ExprNode>();
    n->kind = ExprNode::Val;
    n->val = block->addArgument(b.getIndexType(), l).getAsOpaquePointer();
    blockIdx.emplace_back(n);
  }
  auto kernel = llvm::cast<tile::KernelOp>(b.create(state));
  b.setInsertionPointToStart(&kernel.getBodyBlock());
  struct Reset {
    Program *prev;
    ~Reset() { buildingProgram = prev; }
  } reset{buildingProgram};
  buildingProgram = this;
  body(blockIdx);
  impl->built = true;
  withDiagnostics(*ctx, [&] { return succeeded(mlir::verify(*impl->module)); });
}

void Program::kernel(std::vector<Expr> grid, int threads, std::function<void(Expr)> body, SrcLoc loc) {
  buildKernel(std::move(grid), threads, 1, [&](std::vector<Expr> i) { body(i[0]); }, loc);
}
void Program::kernel(std::vector<Expr> grid, int threads, std::function<void(Expr, Expr)> body,
                     SrcLoc loc) {
  buildKernel(std::move(grid), threads, 2, [&](std::vector<Expr> i) { body(i[0], i[1]); }, loc);
}
void Program::kernel(std::vector<Expr> grid, int threads,
                     std::function<void(Expr, Expr, Expr)> body, SrcLoc loc) {
  buildKernel(std::move(grid), threads, 3,
              [&](std::vector<Expr> i) { body(i[0], i[1], i[2]); }, loc);
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

thread_local SrcLoc tessel::detail::lastLoc = SrcLoc::current();

/// Converts between the scalar types a kernel computes with.
Value tessel::detail::convertTo(OpBuilder &b, Location l, Value v, Type to) {
  Type from = v.getType();
  if (from == to) return v;
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
  Program &p = Program::current(lastLoc);
  OpBuilder &b = p.builder();
  Location l = p.location(lastLoc);
  Type t = toMlir(&p.context(), as);
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
    }
    llvm_unreachable("hostBinary builds only the operators above");
  }
  case ExprNode::Val: return Value::getFromOpaquePointer(node->val);
  }
  return {};
}

Value Program::paramValue(size_t index, SrcLoc loc) {
  if (index >= impl->paramValues.size())
    fail(loc, "a kernel parameter is used outside Program::kernel's body");
  return impl->paramValues[index];
}
size_t Program::symbolParam(int64_t symbol) const { return impl->symParam.at(symbol); }
void Program::setLocation(SrcLoc loc) { lastLoc = loc; }

/// The common type two operands compute in: a kernel value's type wins over
/// a constant's; two kernel values must agree.
static DType commonType(const Expr &a, const Expr &b) {
  bool aVal = a.node->kind == ExprNode::Val || (a.node->kind == ExprNode::Sym && a.node->i < 0);
  bool bVal = b.node->kind == ExprNode::Val || (b.node->kind == ExprNode::Sym && b.node->i < 0);
  DType ta = a.type(), tb = b.type();
  if (aVal && bVal && ta != tb)
    fail(lastLoc, fmt::format("operands have types {} and {}; convert one with cast()", name(ta), name(tb)));
  if (aVal) return ta;
  if (bVal) return tb;
  if (a.node->kind == ExprNode::FConst || b.node->kind == ExprNode::FConst) return DType::f32;
  return DType::index;
}

static Expr hostBinary(char op, Expr a, Expr b) {
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprNode::Bin;
  n->op = op;
  n->lhs = a.node;
  n->rhs = b.node;
  return Expr(n);
}

static Expr binary(char op, Expr a, Expr b) {
  int64_t x, y;
  if (a.isConstant(&x) && b.isConstant(&y)) {
    switch (op) {
    case '+': return x + y;
    case '-': return x - y;
    case '*': return x * y;
    case '/': if (y) return floorDivide(x, y); break;
    case '%': if (y) return floorRemainder(x, y); break;
    case 'c': if (y) return -floorDivide(-x, y); break;
    case 'M': return std::max(x, y);
    case 'm': return std::min(x, y);
    }
    if (op != '&' && op != '|') fail(lastLoc, "division by zero in a constant expression");
  }
  if (isHost(*a.node) && isHost(*b.node) && llvm::StringRef("+-*/%cMm").contains(op))
    return hostBinary(op, a, b);
  DType t = commonType(a, b);
  Program &p = Program::current(lastLoc);
  OpBuilder &bld = p.builder();
  Location l = p.location(lastLoc);
  Value lhs = a.value(t), rhs = b.value(t);
  if (isFloat(t)) {
    switch (op) {
    case '+': return fromValue(arith::AddFOp::create(bld, l, lhs, rhs));
    case '-': return fromValue(arith::SubFOp::create(bld, l, lhs, rhs));
    case '*': return fromValue(arith::MulFOp::create(bld, l, lhs, rhs));
    case '/': return fromValue(arith::DivFOp::create(bld, l, lhs, rhs));
    case 'M': return fromValue(arith::MaxNumFOp::create(bld, l, lhs, rhs));
    case 'm': return fromValue(arith::MinNumFOp::create(bld, l, lhs, rhs));
    default: fail(lastLoc, "this operator needs integer operands");
    }
  }
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
  }
  return {0};
}

static Expr compare(arith::CmpIPredicate ip, arith::CmpFPredicate fp, Expr a, Expr b) {
  DType t = commonType(a, b);
  Program &p = Program::current(lastLoc);
  Location l = p.location(lastLoc);
  Value lhs = a.value(t), rhs = b.value(t);
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
Expr tessel::operator&&(Expr a, Expr b) { return binary('&', a, b); }
Expr tessel::operator||(Expr a, Expr b) { return binary('|', a, b); }
using CI = arith::CmpIPredicate;
using CF = arith::CmpFPredicate;
Expr tessel::operator<(Expr a, Expr b) { return compare(CI::slt, CF::OLT, a, b); }
Expr tessel::operator<=(Expr a, Expr b) { return compare(CI::sle, CF::OLE, a, b); }
Expr tessel::operator>(Expr a, Expr b) { return compare(CI::sgt, CF::OGT, a, b); }
Expr tessel::operator>=(Expr a, Expr b) { return compare(CI::sge, CF::OGE, a, b); }
Expr tessel::operator==(Expr a, Expr b) { return compare(CI::eq, CF::OEQ, a, b); }
Expr tessel::exp(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::ExpOp::create(b, l, v); });
}
Expr tessel::exp2(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::Exp2Op::create(b, l, v); });
}
Expr tessel::log(Expr a) {
  return unary(a, [](OpBuilder &b, Location l, Value v) -> Value { return math::LogOp::create(b, l, v); });
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
  return fromValue(arith::SelectOp::create(p.builder(), p.location(lastLoc), cond.value(DType::i1),
                                           a.value(t), b.value(t)));
}
Expr tessel::cast(Expr a, DType to, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  Value v = a.value(a.node->kind == ExprNode::FConst ? DType::f32 : a.type());
  return fromValue(convertTo(p.builder(), p.location(loc), v, toMlir(&p.context(), to)));
}

//===----------------------------------------------------------------------===//
// Buffers and element access
//===----------------------------------------------------------------------===//

Value Buffer::value() const {
  if (param >= 0) return Program::current(lastLoc).paramValue(param, lastLoc);
  if (!impl) fail(lastLoc, "use of an empty Buffer");
  return Value::getFromOpaquePointer(impl);
}

Ref Buffer::operator()(Expr i, SrcLoc loc) const { return at({i}, loc); }
Ref Buffer::operator()(Expr i, Expr j, SrcLoc loc) const { return at({i, j}, loc); }
Ref Buffer::operator()(Expr i, Expr j, Expr k, SrcLoc loc) const { return at({i, j, k}, loc); }

Ref Buffer::at(std::vector<Expr> idx, SrcLoc loc) const {
  if (static_cast<int64_t>(idx.size()) != rank())
    fail(loc, fmt::format("a rank-{} buffer is indexed with {} indices", rank(), idx.size()));
  return Ref(*this, std::move(idx), loc);
}

SmallVector<Value> tessel::detail::indexValues(const std::vector<Expr> &idx) {
  SmallVector<Value> out;
  for (const Expr &e : idx) {
    if (isFloat(e.type()) || e.node->kind == ExprNode::FConst)
      fail(lastLoc, "buffer indices must be integers");
    out.push_back(e.value(DType::index));
  }
  return out;
}

Ref::operator Expr() const {
  lastLoc = where;
  Program &p = Program::current(where);
  Value v = memref::LoadOp::create(p.builder(), p.location(where), buf.value(), indexValues(indices));
  return fromValue(v);
}

Ref &Ref::operator=(const Expr &v) {
  lastLoc = where;
  Program &p = Program::current(where);
  OpBuilder &b = p.builder();
  Location l = p.location(where);
  Type elt = toMlir(&p.context(), buf.dtype());
  DType src = v.node->kind == ExprNode::FConst ? buf.dtype() : v.type();
  Value value = convertTo(b, l, v.value(isHost(*v.node) ? buf.dtype() : src), elt);
  memref::StoreOp::create(b, l, value, buf.value(), indexValues(indices));
  return *this;
}

Ref &Ref::operator+=(const Expr &v) {
  Expr sum = static_cast<Expr>(*this) + v;
  return *this = sum;
}

Buffer Buffer::tile(std::vector<Expr> offsets, std::vector<int64_t> sizes, SrcLoc loc) const {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (offsets.size() != dims.size() || sizes.size() != dims.size())
    fail(loc, fmt::format("a tile of a rank-{} buffer needs {} offsets and sizes, got {} and {}",
                          rank(), rank(), offsets.size(), sizes.size()));
  std::vector<int64_t> window(sizes), shape;
  llvm::SmallVector<bool> dropped(sizes.size(), false);
  for (size_t d = 0; d < dims.size(); ++d) {
    if (sizes[d] == drop) window[d] = 1, dropped[d] = true;
    else shape.push_back(sizes[d]);
    if (window[d] < 0)
      fail(loc, fmt::format("tile sizes must be positive (or `drop`), got {}", shapeText(sizes)));
    int64_t off;
    if (dims[d] >= 0 && window[d] > dims[d])
      fail(loc, fmt::format("tile {} does not fit in buffer {} (dimension {})", shapeText(sizes),
                            shapeText(dims), d));
    if (dims[d] >= 0 && offsets[d].isConstant(&off) && (off < 0 || off + window[d] > dims[d]))
      fail(loc, fmt::format("tile {} at offset {} lies outside buffer {} in dimension {}",
                            shapeText(sizes), off, shapeText(dims), d));
  }
  if (shape.empty()) fail(loc, "a tile keeps at least one dimension; index the buffer instead");
  auto region = tile::RegionOp::create(p.builder(), p.location(loc), value(), indexValues(offsets),
                                       ArrayRef<int64_t>(window), dropped);
  return Buffer::wrap(region.getResult().getAsOpaquePointer(), shape, elt, where);
}

Buffer Tensor::bounded(std::vector<Expr> limits, SrcLoc loc) const {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (limits.size() != dims.size())
    fail(loc, fmt::format("tensor '{}' has {} dimensions; bounded() takes one limit for each, "
                          "got {}", label, dims.size(), limits.size()));
  for (Expr &limit : limits)
    if (limit.type() != DType::index && limit.type() != DType::i32 && limit.type() != DType::i64)
      fail(loc, fmt::format("bounded(): limits are integers, got {}", tessel::name(limit.type())));
  SmallVector<Value> values;
  for (Expr &limit : limits) {
    Value v = limit.value(limit.type() == DType::index || limit.node->kind != ExprNode::Val
                              ? DType::index
                              : limit.type());
    if (!v.getType().isIndex())
      v = arith::IndexCastOp::create(p.builder(), p.location(loc), p.builder().getIndexType(), v);
    values.push_back(v);
  }
  Value source = value();
  auto bound = tile::BoundOp::create(p.builder(), p.location(loc), source.getType(), source, values);
  return Buffer::wrap(bound.getResult().getAsOpaquePointer(), dims, elt, where);
}

Buffer tessel::peer(const Tensor &tensor, Expr rank, SrcLoc loc) {
  lastLoc = loc;
  Program &p = Program::current(loc);
  if (rank.type() != DType::index && rank.type() != DType::i32 && rank.type() != DType::i64)
    fail(loc, fmt::format("peer(): the rank is an integer, got {}", tessel::name(rank.type())));
  Value r = rank.value(rank.type() == DType::index || rank.node->kind != ExprNode::Val ? DType::index
                                                                                      : rank.type());
  if (!r.getType().isIndex())
    r = arith::IndexCastOp::create(p.builder(), p.location(loc), p.builder().getIndexType(), r);
  Value source = tensor.value();
  if (!llvm::isa<BlockArgument>(source))
    fail(loc, fmt::format("peer(): '{}' is not a kernel tensor parameter", tensor.name()));
  auto peerOp = tile::PeerOp::create(p.builder(), p.location(loc), source.getType(), source, r);
  return Buffer::wrap(peerOp.getResult().getAsOpaquePointer(), tensor.shape(), tensor.dtype(),
                      Space::global);
}

Buffer Buffer::wrap(void *opaqueValue, std::vector<int64_t> shape, DType type, Space space) {
  Buffer b;
  b.impl = opaqueValue;
  b.dims = std::move(shape);
  b.elt = type;
  b.where = space;
  return b;
}

void tessel::detail::verifyAtUserLine(Operation *op) {
  withDiagnostics(*op->getContext(), [&] { return succeeded(mlir::verify(op)); });
}
