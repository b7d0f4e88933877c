//===- tessel-translate.cpp - lowered Tessel IR to CUDA C++ ---------------===//
//
//   tessel-translate --emit-cuda [input.mlir] [-o output.cu]
//
// Translates every tile.kernel of a module of lowered (thread-level) IR, as
// tessel-opt's `tessel-pipeline` leaves it, to the CUDA C++ that Tessel's JIT
// compiles, for lit tests of the emitter. Input the emitter cannot print is
// an error at the op's location.
//
//===----------------------------------------------------------------------===//
#include "../common/InputGuards.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Target/CudaEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

static llvm::cl::opt<std::string> inputName(llvm::cl::Positional, llvm::cl::desc("<input>"),
                                            llvm::cl::init("-"));
static llvm::cl::opt<std::string> outputName("o", llvm::cl::desc("output file"),
                                             llvm::cl::value_desc("filename"), llvm::cl::init("-"));
static llvm::cl::opt<bool> emitCudaFlag("emit-cuda",
                                        llvm::cl::desc("print each kernel as CUDA C++"));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::ParseCommandLineOptions(argc, argv, "Tessel translation driver\n");
  if (!emitCudaFlag) {
    llvm::errs() << "tessel-translate: choose a translation: --emit-cuda\n";
    return 2;
  }
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = openInputFile(inputName, &error);
  if (!input) {
    llvm::errs() << "tessel-translate: " << error << "\n";
    return 1;
  }
  if (tessel::rejectUnparsableInput(*input)) return 1;

  DialectRegistry registry;
  registry.insert<tessel::tile::TileDialect, tessel::tilenv::TileNVDialect, arith::ArithDialect,
                  math::MathDialect, memref::MemRefDialect, scf::SCFDialect>();
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(sources, &context);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sources, &context);
  if (!module) return 1;

  std::string text;
  llvm::raw_string_ostream os(text);
  bool any = false;
  for (auto kernel : module->getOps<tessel::tile::KernelOp>()) {
    any = true;
    if (failed(tessel::emitCuda(kernel, os))) return 1;
  }
  if (!any) {
    emitError(module->getLoc()) << "the module has no tile.kernel to translate";
    return 1;
  }
  std::unique_ptr<llvm::ToolOutputFile> output = openOutputFile(outputName, &error);
  if (!output) {
    llvm::errs() << "tessel-translate: " << error << "\n";
    return 1;
  }
  output->os() << text;
  output->os().flush();
  if (output->os().has_error()) {
    llvm::errs() << "tessel-translate: cannot write " << outputName << ": "
                 << output->os().error().message() << "\n";
    output->os().clear_error();
    return 1;
  }
  output->keep();
  return 0;
}
