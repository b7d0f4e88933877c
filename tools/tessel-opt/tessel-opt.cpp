//===- tessel-opt.cpp - pass driver for Tessel's dialects -----------------===//
#include "../common/InputGuards.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  registry.insert<tessel::tile::TileDialect, tessel::tilenv::TileNVDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect>();
  tessel::registerTesselPasses();
  tessel::registerTesselPipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  auto [inputName, outputName] =
      mlir::registerAndParseCLIOptions(argc, argv, "Tessel optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // Listings need no input.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, inputName, outputName, registry));

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = mlir::openInputFile(inputName, &error);
  if (!input) {
    llvm::errs() << "tessel-opt: " << error << "\n";
    return 1;
  }
  if (tessel::rejectUnparsableInput(*input)) return 1;
  std::unique_ptr<llvm::ToolOutputFile> output = mlir::openOutputFile(outputName, &error);
  if (!output) {
    llvm::errs() << "tessel-opt: " << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry, config))) return 1;
  output->keep();
  output->os().flush();
  if (output->os().has_error()) {
    llvm::errs() << "tessel-opt: cannot write " << outputName << ": "
                 << output->os().error().message() << "\n";
    output->os().clear_error();
    return 1;
  }
  return 0;
}
