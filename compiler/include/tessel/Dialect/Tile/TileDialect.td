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
    the block's threads), `local` (private to each thread) and `tmem`
    (sm_100a tensor memory: 128 lanes x 512 32-bit columns per block, rows
    in lanes, placed by tessel-tmem-allocation).
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
  let dependentDialects = ["mlir::arith::ArithDialect", "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect", "mlir::math::MathDialect"];
}

def Tile_MemorySpace : I32EnumAttr<"MemorySpace", "tile memory space", [
    I32EnumAttrCase<"global", 0>, I32EnumAttrCase<"shared", 1>,
    I32EnumAttrCase<"fragment", 2>, I32EnumAttrCase<"local", 3>, I32EnumAttrCase<"tmem", 4>]> {
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

def Tile_WarpPolicy : I32EnumAttr<"WarpPolicy", "how gemm splits its tile over warps", [
    I32EnumAttrCase<"square", 0>, I32EnumAttrCase<"full_row", 1>,
    I32EnumAttrCase<"full_col", 2>]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::tessel::tile";
}

def Tile_WarpPolicyAttr : EnumAttr<Tile_Dialect, Tile_WarpPolicy, "policy"> {
  let assemblyFormat = "`<` $value `>`";
}

def Tile_GemmInstruction : I32EnumAttr<"GemmInstruction", "tensor-core instruction", [
    I32EnumAttrCase<"mma_sync", 0>, I32EnumAttrCase<"wgmma", 1>,
    I32EnumAttrCase<"tcgen05", 2>]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::tessel::tile";
}

def Tile_GemmInstructionAttr : EnumAttr<Tile_Dialect, Tile_GemmInstruction, "instr"> {
  let assemblyFormat = "`<` $value `>`";
}

def Tile_FragmentLayoutAttr : AttrDef<Tile_Dialect, "FragmentLayout"> {
  let mnemonic = "fragment";
  let summary = "which thread holds which element of a fragment, in which register";
  let description = [{
    A linear map over GF(2) from the bits of (register, lane, warp) to the
    bits of the logical index. Each list gives, per input bit, the logical
    index that bit alone selects; an index of all zeros is replication.
    Extents that are not powers of two are padded, and the padding skipped.

    ```mlir
    #tile.fragment<[16, 8], reg = [[0, 1], [8, 0]],
                   lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape,
                        ArrayRefParameter<"uint64_t">:$reg,
                        ArrayRefParameter<"uint64_t">:$lane,
                        ArrayRefParameter<"uint64_t">:$warp);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    ::tessel::layout::FragmentLayout getLayout() const;
    static FragmentLayoutAttr get(::mlir::MLIRContext *ctx,
                                  const ::tessel::layout::FragmentLayout &layout);
  }];
}

def Tile_SharedLayoutAttr : AttrDef<Tile_Dialect, "SharedLayout"> {
  let mnemonic = "shared";
  let summary = "element offsets of a shared tile: padding or an XOR swizzle";
  let description = [{
    Rows are the leading extents flattened, columns the last. `swizzle` (0,
    32, 64 or 128 bytes) cuts the columns into panels of that many bytes and
    XORs the 16-byte chunk index with the row bits, as the TMA and wgmma
    swizzle modes do; `pad` adds elements at the end of each unswizzled row.

    ```mlir
    #tile.shared<[64, 64], elem = 2, swizzle = 128, pad = 0>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape, "int64_t":$elementBytes,
                        "int64_t":$swizzleBytes, "int64_t":$pad);
  let assemblyFormat = [{
    `<` `[` $shape `]` `,` `elem` `=` $elementBytes `,` `swizzle` `=` $swizzleBytes
    `,` `pad` `=` $pad `>`
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    ::tessel::layout::SharedLayout getLayout() const;
    static SharedLayoutAttr get(::mlir::MLIRContext *ctx,
                                const ::tessel::layout::SharedLayout &layout);
  }];
}

// A 64-bit integer attribute read as int64_t. MLIR's I64Attr reads as
// uint64_t, so a negative count or id would pass every `< 0` check.
def Tessel_I64Attr : TypedSignlessIntegerAttrBase<I64, "int64_t",
                                                  "64-bit signless integer attribute"> {
  let convertFromStorage = "$_self.getValue().getSExtValue()";
}

#endif // TESSEL_TILE_DIALECT
