//===- tessel-opt.cpp - pass driver for Tessel's dialects -----------------===//
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Dialect/TileNV/TileNVDialect.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<tessel::tile::TileDialect, tessel::tilenv::TileNVDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect>();
  tessel::registerTesselPasses();
  tessel::registerTesselPipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Tessel optimizer driver\n", registry));
}
