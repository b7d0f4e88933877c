//===- TileOps.td - tile dialect operations ----------------*- tablegen -*-===//
#ifndef TESSEL_TILE_OPS
#define TESSEL_TILE_OPS

include "tessel/Dialect/Tile/TileDialect.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

class Tile_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tile_Dialect, mnemonic, traits>;

def Tile_KernelOp : Tile_Op<"kernel", [Symbol, SingleBlock, NoTerminator,
                                       IsolatedFromAbove]> {
  let summary = "a kernel launched on a grid of thread blocks";
  let description = [{
    The entry block's arguments are the kernel parameters (global memrefs and
    index/integer/float scalars) followed by one block index per grid
    dimension. `grid` is an affine map whose symbols are the kernel's index
    parameters, in order; it gives the number of blocks per dimension (1 to 3
    results). Every thread of a block runs the body; tile operations are
    collective over the block's `threads` threads.

    ```mlir
    tile.kernel @add(%x: memref<?xf32, #tile.space<global>>, %n: index)
        grid(%bx) = ()[s0] -> (s0 ceildiv 256) threads(128) {
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, AffineMapAttr:$grid,
                       I64Attr:$threads, I64Attr:$num_params,
                       OptionalAttr<I64Attr>:$smem_bytes);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    mlir::Block &getBodyBlock() { return getBody().front(); }
    /// Kernel parameters (the leading entry-block arguments).
    llvm::ArrayRef<mlir::BlockArgument> getParams() {
      return getBodyBlock().getArguments().take_front(getNumParams());
    }
    /// One block index per grid dimension.
    llvm::ArrayRef<mlir::BlockArgument> getBlockIndices() {
      return getBodyBlock().getArguments().drop_front(getNumParams());
    }
    /// The index-typed parameters, which are the grid map's symbols.
    llvm::SmallVector<mlir::BlockArgument> getSymbolParams();
  }];
}

def Tile_AllocOp : Tile_Op<"alloc"> {
  let summary = "a shared, fragment or local buffer";
  let description = [{
    `offset` (bytes into dynamic shared memory) is set by the lowering for
    shared-backed buffers. `layout` is set by tessel-layout-inference: a
    `#tile.fragment` for fragments, a `#tile.shared` for shared buffers.
    `name` is the name the kernel author gave the buffer, for inspection.
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<AnyAttrOf<[Tile_FragmentLayoutAttr, Tile_SharedLayoutAttr]>>:$layout,
                       OptionalAttr<StrAttr>:$name);
  let results = (outs AnyStaticShapeMemRef:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tile_RegionOp : Tile_Op<"region", [Pure]> {
  let summary = "a rectangular window of a buffer";
  let description = [{
    The window of static `sizes` starting at `offsets`. A window may reach past
    the end of a dynamically sized global dimension: reads there give zero and
    writes there are dropped. A window outside a static dimension is an error.
  }];
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$offsets,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs AnyMemRef:$result);
  let assemblyFormat = [{
    $source `[` $offsets `]` $sizes attr-dict `:` type($source) `->` type($result)
  }];
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "mlir::Value":$source, "mlir::ValueRange":$offsets,
                                 "llvm::ArrayRef<int64_t>":$sizes)>];
}

def Tile_CopyOp : Tile_Op<"copy"> {
  let summary = "copy a tile, converting the element type if needed";
  let arguments = (ins AnyMemRef:$source, AnyMemRef:$dest);
  let assemblyFormat = "$source `,` $dest attr-dict `:` type($source) `,` type($dest)";
  let hasVerifier = 1;
}

def Tile_FillOp : Tile_Op<"fill"> {
  let summary = "set every element of a tile to a value";
  let arguments = (ins AnyMemRef:$dest, AnyTypeOf<[AnyFloat, AnyInteger, Index]>:$value);
  let assemblyFormat = "$dest `,` $value attr-dict `:` type($dest) `,` type($value)";
  let hasVerifier = 1;
}

def Tile_GemmOp : Tile_Op<"gemm"> {
  let summary = "C (+)= op(A) x op(B)";
  let description = [{
    A is MxK (KxM with `transpose_a`), B is KxN (NxK with `transpose_b`), C is
    MxN. A and B live in shared or fragment memory, C in a fragment. With
    `clear_accum` C is overwritten, otherwise accumulated into. `policy` says
    how the tile is split over warps: `square` (per-warp tiles as square as
    possible), `full_row` (warps along M only) or `full_col` (along N only).
    tessel-layout-inference sets `instruction` and `warps` (the warp grid, or
    for wgmma the warpgroup grid, as [along M, along N]).
  }];
  let arguments = (ins AnyMemRef:$a, AnyMemRef:$b, AnyMemRef:$c,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b,
                       UnitAttr:$clear_accum,
                       DefaultValuedAttr<Tile_WarpPolicyAttr, "::tessel::tile::WarpPolicy::square">:$policy,
                       OptionalAttr<Tile_GemmInstructionAttr>:$instruction,
                       OptionalAttr<DenseI64ArrayAttr>:$warps);
  let assemblyFormat = [{
    $a `,` $b `,` $c attr-dict `:` type($a) `,` type($b) `,` type($c)
  }];
  let hasVerifier = 1;
}

def Tile_ReduceOp : Tile_Op<"reduce"> {
  let summary = "reduce a tile along one dimension";
  let description = [{
    `dest` has the shape of `source` without dimension `dim`. With `clear` the
    result overwrites `dest`, otherwise it is combined with it.
  }];
  let arguments = (ins Tile_ReduceKind:$kind, AnyMemRef:$source, AnyMemRef:$dest,
                       I64Attr:$dim, UnitAttr:$clear);
  let assemblyFormat = [{
    $kind $source `->` $dest `dim` `=` $dim (`clear` $clear^)? attr-dict `:` type($source) `->` type($dest)
  }];
  let hasVerifier = 1;
}

def Tile_AtomicAddOp : Tile_Op<"atomic_add"> {
  let summary = "atomically add a scalar to an element, or a tile to a tile";
  let description = [{
    Scalar form: `value` is a scalar and `indices` name one element of `dest`.
    Region form: `value` is a tile of the same shape as `dest` and there are no
    indices. Inside `tile.parallel` the scalar form runs once per element;
    outside it runs once per block.
  }];
  let arguments = (ins AnyType:$value, AnyMemRef:$dest, Variadic<Index>:$indices,
                       DefaultValuedAttr<Tile_MemoryOrder, "::tessel::tile::MemoryOrder::relaxed">:$order);
  let assemblyFormat = [{
    $value `,` $dest (`[` $indices^ `]`)? `order` `=` $order attr-dict `:` type($value) `,` type($dest)
  }];
  let hasVerifier = 1;
}

def Tile_AnnotateLayoutOp : Tile_Op<"annotate_layout"> {
  let summary = "fix the physical layout of a shared or fragment buffer";
  let description = [{
    For a shared buffer, `layout` is an affine map from the logical index to
    a linear element offset (for instance padding rows:
    `(i, j) -> (i * 40 + j)`) or a `#tile.shared` layout. For a fragment it
    is a `#tile.fragment` layout. Layout inference treats it as a strict
    constraint.
  }];
  let arguments = (ins AnyMemRef:$buffer,
                       AnyAttrOf<[AffineMapAttr, Tile_FragmentLayoutAttr, Tile_SharedLayoutAttr]>:$layout);
  let assemblyFormat = "$buffer `:` type($buffer) `to` $layout attr-dict";
  let hasVerifier = 1;
}

def Tile_ParallelOp : Tile_Op<"parallel", [SingleBlock, NoTerminator]> {
  let summary = "an element-wise nest split across the block's threads";
  let description = [{
    The body runs once per point of the static iteration space; its block
    arguments are the point's indices. The body holds element code only
    (loads, stores, arithmetic, scalar atomics), no collective tile ops.
    `layout`, set by tessel-layout-inference when the body touches
    fragments, distributes the iteration space over the threads like a
    fragment of that shape.
  }];
  let arguments = (ins DenseI64ArrayAttr:$extents,
                       OptionalAttr<Tile_FragmentLayoutAttr>:$layout);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Tile_PipelinedOp : Tile_Op<"pipelined", [SingleBlock, NoTerminator]> {
  let summary = "a serial loop whose loads may be overlapped in num_stages stages";
  let arguments = (ins Index:$lower, Index:$upper, Index:$step, I64Attr:$num_stages);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Tile_BarrierOp : Tile_Op<"barrier"> {
  let summary = "block-wide barrier";
  let assemblyFormat = "attr-dict";
}

#endif // TESSEL_TILE_OPS
