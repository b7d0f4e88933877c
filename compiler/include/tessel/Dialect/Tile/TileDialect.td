//===- TileDialect.td - the tile dialect -------------------*- tablegen -*-===//
//
// The tile dialect is what the DSL emits: collective tile operations (copy,
// gemm, fill, reduce, atomic_add) over buffers in explicit memory spaces,
// inside a kernel launched on a grid of thread blocks.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TILE_DIALECT
#define TESSEL_TILE_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Tile_Dialect : Dialect {
  let name = "tile";
  let cppNamespace = "::tessel::tile";
  let summary = "Tile-level GPU kernels";
  let description = [{
    Collective operations over tiles of buffers. Buffers are memrefs whose
    memory space is a `#tile.space<...>`: `global` (kernel parameters),
    `shared` (one copy per thread block), `fragment` (a tile distributed over
    the block's threads) and `local` (private to each thread).
  }];
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect", "mlir::math::MathDialect"];
}

def Tile_MemorySpace : I32EnumAttr<"MemorySpace", "tile memory space", [
    I32EnumAttrCase<"global", 0>, I32EnumAttrCase<"shared", 1>,
    I32EnumAttrCase<"fragment", 2>, I32EnumAttrCase<"local", 3>]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::tessel::tile";
}

def Tile_MemorySpaceAttr : EnumAttr<Tile_Dialect, Tile_MemorySpace, "space"> {
  let assemblyFormat = "`<` $value `>`";
}

def Tile_ReduceKind : I32EnumAttr<"ReduceKind", "reduction kind", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>, I32EnumAttrCase<"absmax", 3>]> {
  let cppNamespace = "::tessel::tile";
}

def Tile_MemoryOrder : I32EnumAttr<"MemoryOrder", "atomic memory order", [
    I32EnumAttrCase<"relaxed", 0>, I32EnumAttrCase<"acquire", 1>,
    I32EnumAttrCase<"release", 2>, I32EnumAttrCase<"acq_rel", 3>,
    I32EnumAttrCase<"seq_cst", 4>]> {
  let cppNamespace = "::tessel::tile";
}

#endif // TESSEL_TILE_DIALECT
