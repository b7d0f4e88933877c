//===- Program.cpp - a Tessel program and its kernel ----------------------===//
//
// A Program owns the MLIR context and module its one kernel is built into:
// the parameters declared before it (tensors with their extents, index
// symbols, scalars), the kernel op with its grid and block indices, the
// program whose body is being built (Program::current) and the user's line
// of the DSL call in progress, for errors raised below it.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Program.h"
#include "DslInternal.h"
#include "ExprInternal.h"
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

thread_local SrcLoc tessel::detail::lastLoc = SrcLoc::current();

void tessel::fail(SrcLoc loc, const std::string &message) {
  throw Error(fmt::format("{}:{}: error: {}", loc.file_name(), loc.line(), message));
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

void tessel::detail::verifyAtUserLine(Operation *op) {
  withDiagnostics(*op->getContext(), [&] { return succeeded(mlir::verify(op)); });
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

Value Program::paramValue(size_t index, SrcLoc loc) {
  if (index >= impl->paramValues.size())
    fail(loc, "a kernel parameter is used outside Program::kernel's body");
  return impl->paramValues[index];
}
size_t Program::symbolParam(int64_t symbol) const { return impl->symParam.at(symbol); }
void Program::setLocation(SrcLoc loc) { lastLoc = loc; }

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
    } else if (isHost(n)) {
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

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

/// A symbolic (host) expression as an expression over the symbols: affine,
/// or semi-affine where symbols multiply or divide each other (`ranks *
/// tiles`, `ceil_div(n, block)` with a symbol block); the launch evaluates
/// it and refuses a divisor below 1. `dim` names the grid dimension in
/// messages.
static AffineExpr toAffine(const ExprNode &n, MLIRContext *ctx, SrcLoc loc, size_t dim) {
  if (n.kind == ExprNode::Unset) fail(loc, fmt::format("grid dimension {}: {}", dim, kUnsetExpr));
  switch (n.kind) {
  case ExprNode::Const: return getAffineConstantExpr(n.i, ctx);
  case ExprNode::Sym:
    if (n.i < 0)
      fail(loc, fmt::format("grid dimension {}: the grid can only depend on index symbols "
                            "(Program::sym), not on scalars or values computed in the kernel",
                            dim));
    return getAffineSymbolExpr(n.i, ctx);
  case ExprNode::Bin: {
    AffineExpr l = toAffine(*n.lhs, ctx, loc, dim), r = toAffine(*n.rhs, ctx, loc, dim);
    switch (n.op) {
    case '+': return l + r;
    case '-': return l - r;
    case '*': return l * r;
    case '/': return l.floorDiv(r);
    case '%': return l % r;
    case 'c': return l.ceilDiv(r);
    }
    fail(loc, fmt::format("grid dimension {}: grid extents are computed with +, -, *, /, % and "
                          "ceil_div of constants and index symbols",
                          dim));
  }
  default:
    fail(loc, fmt::format("grid dimension {}: grid extents are computed from constants and index "
                          "symbols (Program::sym)",
                          dim));
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
  for (size_t d = 0; d < grid.size(); ++d) {
    int64_t c;
    if (grid[d].isConstant(&c) && c <= 0)
      fail(loc, fmt::format("grid dimension {}: grid extents must be positive, got {}", d, c));
    gridExprs.push_back(toAffine(*grid[d].node, ctx, loc, d));
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

tile::KernelOp tessel::detail::enclosingKernel(Program &p, SrcLoc loc) {
  Operation *at = p.builder().getInsertionBlock()->getParentOp();
  auto kernel = llvm::dyn_cast<tile::KernelOp>(at);
  if (!kernel) kernel = at->getParentOfType<tile::KernelOp>();
  if (!kernel) fail(loc, "this belongs inside a kernel body");
  return kernel;
}
