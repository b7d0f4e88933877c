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

    `tma_descriptors`, set by tessel-lower-tile-ops, lists the TMA tensor
    maps the kernel takes after its parameters: each a dictionary with the
    tensor `param` index, the `box` extents (outermost first) and the
    `swizzle` bytes; the runtime encodes them at launch.

    `cluster` (sm_90a and newer) launches the blocks in thread block
    clusters of that many blocks per grid dimension (one extent per grid
    dimension, at most 8 blocks in all); the grid must divide into whole
    clusters at launch. Blocks of a cluster can receive one multicast load
    (`tile.copy` with `multicast`) and arrive on each other's mbarriers.

    `persistent` launches at most as many blocks as the device runs at
    once, in one dimension, whatever `grid` says (`grid` then counts the
    work tiles): the body walks the tiles itself, from its block index in
    steps of `tile.num_blocks`.

    ```mlir
    tile.kernel @add(%x: memref<?xf32, #tile.space<global>>, %n: index)
        grid(%bx) = ()[s0] -> (s0 ceildiv 256) threads(128) {
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, AffineMapAttr:$grid,
                       Tessel_I64Attr:$threads, Tessel_I64Attr:$num_params,
                       OptionalAttr<Tessel_I64Attr>:$smem_bytes,
                       OptionalAttr<DictArrayAttr>:$tma_descriptors,
                       OptionalAttr<DenseI64ArrayAttr>:$cluster, UnitAttr:$persistent);
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
    /// Blocks per cluster (1 without `cluster`).
    int64_t getClusterSize() {
      int64_t size = 1;
      if (std::optional<llvm::ArrayRef<int64_t>> dims = getCluster())
        for (int64_t d : *dims) size *= d;
      return size;
    }
  }];
}

def Tile_AllocOp : Tile_Op<"alloc"> {
  let summary = "a shared, fragment, local or tensor-memory buffer";
  let description = [{
    `offset` is where the buffer starts in its memory: bytes into dynamic
    shared memory for shared-backed buffers (set by the lowering), the first
    32-bit column for tensor memory (set by tessel-tmem-allocation). A
    tensor-memory buffer is [64 or 128 rows, columns] of a 32- or 16-bit
    type; 16-bit values are packed two to a column (the operand format of
    tcgen05.mma), or one to a column with `unpacked` (a 16-bit accumulator). `layout` is set by tessel-layout-inference: a
    `#tile.fragment` for fragments, a `#tile.shared` for shared buffers.
    `name` is the name the kernel author gave the buffer, for inspection.
    `stages` (shared buffers, set by the pipelining passes) reserves that
    many copies of the buffer, selected with `tile.stage`.
  }];
  let arguments = (ins OptionalAttr<Tessel_I64Attr>:$offset,
                       OptionalAttr<AnyAttrOf<[Tile_FragmentLayoutAttr, Tile_SharedLayoutAttr]>>:$layout,
                       OptionalAttr<StrAttr>:$name,
                       OptionalAttr<Tessel_I64Attr>:$stages,
                       UnitAttr:$unpacked);
  let results = (outs AnyStaticShapeMemRef:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// 32-bit tensor-memory columns the buffer spans (before allocation
    /// rounds the total to a power of two).
    int64_t getTmemColumns();
    mlir::LogicalResult verifyTmemBuffer();
  }];
}

def Tile_BoundOp : Tile_Op<"bound", [Pure, AllTypesMatch<["source", "result"]>]> {
  let summary = "a kernel tensor seen only up to run-time limits";
  let description = [{
    The same tensor, with each dimension ending at `min(extent, limit)`:
    windows of the result read zero past a limit and drop writes there, as
    they do past a tensor's extent. For a sequence's rows inside a larger
    cache tensor, say. Tiles of a bounded tensor are never carried by TMA
    (a tensor map holds fixed extents).

    ```mlir
    %kv = tile.bound %cache [%len, %c64] : memref<?x64xf16, #tile.space<global>>
    ```
  }];
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$limits);
  let results = (outs AnyMemRef:$result);
  let assemblyFormat = [{
    $source `[` $limits `]` attr-dict `:` type($source)
  }];
  let hasVerifier = 1;
}

def Tile_PeerOp : Tile_Op<"peer", [Pure, AllTypesMatch<["source", "result"]>]> {
  let summary = "another rank's copy of a symmetric kernel tensor";
  let description = [{
    The same tensor as rank `rank` (of the node's ranks) holds it: reads and
    writes of the result, or of windows of it, go to that GPU over NVLink.
    `source` is a kernel parameter; the launch passes every rank's address
    of it (rt::LaunchArg::symmetric). Such tiles are carried by plain loads
    and stores or cp.async, and by TMA (loads a pipeline plans, reduce-adds)
    through a tensor map per rank; not by TMA stores.

    ```mlir
    %next = tile.peer %x [%r] : memref<?x64xf16, #tile.space<global>>
    ```
  }];
  let arguments = (ins AnyMemRef:$source, Index:$rank);
  let results = (outs AnyMemRef:$result);
  let assemblyFormat = "$source `[` $rank `]` attr-dict `:` type($source)";
  let hasVerifier = 1;
}

def Tile_RegionOp : Tile_Op<"region", [Pure]> {
  let summary = "a rectangular window of a buffer";
  let description = [{
    The window of static `sizes` starting at `offsets`. A window may reach past
    the end of a dynamically sized global dimension: reads there give zero and
    writes there are dropped. A window outside a static dimension is an error.

    The result may leave out dimensions of size 1 (a rank-reducing window):
    `tile.region %q[%b, %s, %h, %c0] [1, 64, 1, 128]` may give a 64x128 tile of
    a [batch, seq, heads, dim] tensor. The kept dimensions are matched to the
    sizes from the left.
  }];
  let arguments = (ins AnyMemRef:$source, Variadic<Index>:$offsets,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs AnyMemRef:$result);
  let assemblyFormat = [{
    $source `[` $offsets `]` $sizes attr-dict `:` type($source) `->` type($result)
  }];
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "mlir::Value":$source, "mlir::ValueRange":$offsets,
                                 "llvm::ArrayRef<int64_t>":$sizes,
                                 CArg<"llvm::ArrayRef<bool>", "{}">:$dropped)>];
  let extraClassDeclaration = [{
    /// For each result dimension, the source dimension it windows; nothing
    /// when the result shape is not the sizes less some unit dimensions.
    std::optional<llvm::SmallVector<unsigned>> getKeptDims();
  }];
}

def Tile_CopyOp : Tile_Op<"copy"> {
  let summary = "copy a tile, converting the element type if needed";
  let description = [{
    With `async` (set by tessel-software-pipeline on global-to-shared loads)
    the copy is issued as cp.async and completes at a later
    `tile.cp_async_wait`.

    `multicast` states that every block of the kernel's cluster copies the
    same global tile: a warp-specialized loop's TMA load then fetches it
    once for the cluster (each block issuing a share of its boxes) and
    delivers it to every block's shared memory. Anywhere else each block
    loads the tile itself, with the same result.
  }];
  let arguments = (ins AnyMemRef:$source, AnyMemRef:$dest, UnitAttr:$async, UnitAttr:$multicast);
  let assemblyFormat = "$source `,` $dest attr-dict `:` type($source) `,` type($dest)";
  let hasVerifier = 1;
}

def Tile_FillOp : Tile_Op<"fill"> {
  let summary = "set every element of a tile to a value";
  let arguments = (ins AnyMemRef:$dest, AnyTypeOf<[AnyFloat, AnyInteger, Index]>:$value);
  let assemblyFormat = "$dest `,` $value attr-dict `:` type($dest) `,` type($value)";
  let hasVerifier = 1;
}

def Tile_GemmOp : Tile_Op<"gemm", [AttrSizedOperandSegments]> {
  let summary = "C (+)= op(A) x op(B)";
  let description = [{
    A is MxK (KxM with `transpose_a`), B is KxN (NxK with `transpose_b`), C is
    MxN. A and B live in shared or fragment memory, C in a fragment. With
    `clear_accum` C is overwritten, otherwise accumulated into. `policy` says
    how the tile is split over warps: `square` (per-warp tiles as square as
    possible), `full_row` (warps along M only) or `full_col` (along N only).
    tessel-layout-inference sets `instruction` and `warps` (the warp grid, or
    for wgmma the warpgroup grid, as [along M, along N]). C in tensor memory
    makes it tcgen05.mma; such a gemm is complete when the op is, unless
    `issue_only` (set by tessel-warp-specialize): then its MMAs are issued
    and complete later, through tile.mma_commit and tile.mma_wait.

    Block scales (MX: one ue8m0 scale per 32 of K, OCP's microscaling) come
    as `scale_a` and `scale_b`, shared tiles of 512-byte atoms, each the
    scales of 128 rows of A (columns of B) over 128 of K, in order: K
    group, then atom (K / 128 x ceil(N / 128) of B's, of any shape that
    holds them, [K / 128, 512] or [atoms, 32, 16] say), the scale of row r
    (mod 128) and K block j (mod 4) at byte 16 (r % 32) + 4 (r / 32) + j of
    its atom (cuBLAS's blocked layout, which tcgen05.cp moves into tensor
    memory as the MMA reads it). C (+)= sum over K blocks of sa sb (A x B over the block); tcgen05
    only (kind::mxf8f6f4).

    An 8-bit A in registers is an accumulator-shaped fragment (the scores
    of FlashAttention's first product, converted): a thread holds, in each
    16 of K, the pairs at 2q and 8 + 2q (q = lane % 4), while the 8-bit
    instructions read four consecutive K values a register, at 4q. The
    product is the same when B's K is permuted to match, so B is then read
    in the register order: with `b_register_k_order`, the stored B holds
    logical k = 8 b + 2 q + e (b, e in {0, 1}) at position 4 q + 2 b + e of
    each 16 of K. tessel-k-major-operands makes such a copy of B (and sets
    the attribute) unless the gemm already says B is stored that way.
  }];
  let arguments = (ins AnyMemRef:$a, AnyMemRef:$b, AnyMemRef:$c,
                       Optional<AnyMemRef>:$scale_a, Optional<AnyMemRef>:$scale_b,
                       UnitAttr:$transpose_a, UnitAttr:$transpose_b,
                       UnitAttr:$clear_accum,
                       DefaultValuedAttr<Tile_WarpPolicyAttr, "::tessel::tile::WarpPolicy::square">:$policy,
                       OptionalAttr<Tile_GemmInstructionAttr>:$instruction,
                       OptionalAttr<DenseI64ArrayAttr>:$warps, UnitAttr:$issue_only,
                       UnitAttr:$b_register_k_order);
  let assemblyFormat = [{
    $a `,` $b `,` $c (`scales` `(` $scale_a^ `,` $scale_b `:` type($scale_a) `,` type($scale_b) `)`)?
    attr-dict `:` type($a) `,` type($b) `,` type($c)
  }];
  let extraClassDeclaration = [{
    /// The buffers the gemm reads (C aside): A, B and any block scales.
    llvm::SmallVector<mlir::Value, 4> getOperandsRead() {
      llvm::SmallVector<mlir::Value, 4> read = {getA(), getB()};
      if (getScaleA()) read.push_back(getScaleA());
      if (getScaleB()) read.push_back(getScaleB());
      return read;
    }
    /// The verifier's checks of the block scales of an [m, n, k] product.
    mlir::LogicalResult verifyBlockScales(int64_t m, int64_t n, int64_t k);
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
                       Tessel_I64Attr:$dim, UnitAttr:$clear);
  let assemblyFormat = [{
    $kind $source `->` $dest `dim` `=` $dim (`clear` $clear^)? attr-dict `:` type($source) `->` type($dest)
  }];
  let hasVerifier = 1;
}

def Tile_Exp2Op : Tile_Op<"exp2", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "2^x, one register in `fma_every` on the FMA pipe";
  let description = [{
    `math.exp2` with a share of its elements computed by a polynomial on
    the FMA pipe (tilenv.exp2_fma) instead of the special-function unit,
    for element code whose MUFU.EX2 rate is the bottleneck: an FP8
    attention's softmax, whose products run at twice bf16's rate while
    ex2 does not. In an element loop over a fragment, register r of each
    thread takes the polynomial when r % fma_every == fma_every - 1, so
    the choice is the same in every thread and no branch diverges. With
    fma_every = 1 every element takes it; elsewhere (no registers) larger
    values take the special-function unit. Both forms flush results below
    2^-126 to zero and differ by at most about 1e-4 relative.

    ```mlir
    %p = tile.exp2 %x fma_every 4 : f32
    ```
  }];
  let arguments = (ins AnyTypeOf<[F32, F16, BF16]>:$x,
                       ConfinedAttr<I64Attr, [IntMinValue<1>]>:$fma_every);
  let results = (outs AnyTypeOf<[F32, F16, BF16]>:$result);
  let assemblyFormat = "$x `fma_every` $fma_every attr-dict `:` type($x)";
}

def Tile_AtomicAddOp : Tile_Op<"atomic_add"> {
  let summary = "atomically add a scalar to an element, or a tile to a tile";
  let description = [{
    Scalar form: `value` is a scalar and `indices` name one element of `dest`.
    Region form: `value` is a tile of the same shape as `dest` and there are no
    indices. Inside `tile.parallel` the scalar form runs once per element;
    outside it runs once per block. With `tma` (region form, a whole shared
    buffer added into a global window, relaxed order, sm_90a) the add is one
    TMA reduce (`cp.reduce.async.bulk.tensor.add`) per box.
  }];
  let arguments = (ins AnyType:$value, AnyMemRef:$dest, Variadic<Index>:$indices,
                       DefaultValuedAttr<Tile_MemoryOrder, "::tessel::tile::MemoryOrder::relaxed">:$order,
                       UnitAttr:$tma);
  let assemblyFormat = [{
    $value `,` $dest (`[` $indices^ `]`)? `order` `=` $order attr-dict `:` type($value) `,` type($dest)
  }];
  let hasVerifier = 1;
}

def Tile_SignalOp : Tile_Op<"signal"> {
  let summary = "publish a value to a flag, for other blocks and other GPUs";
  let description = [{
    Once every thread of the block (of the role, inside one) has finished its
    earlier writes, one thread stores `value` into `flags[indices]` with
    release semantics at system scope. The flag is usually a peer's: the
    waiter spins on its own memory. Flags hold epochs that only grow, so a
    flag needs no reset between calls.

    With `add`, the thread adds `value` to the flag instead (an atomic
    reduction, release at system scope): several blocks count into one flag,
    and the waiter waits for the total (a count that only grows, like an
    epoch).

    ```mlir
    tile.signal %epoch, %peer_flags[%rank] : i32, memref<8xi32, #tile.space<global>>
    tile.signal %one, %peer_flags[%rank] {add} : i32, memref<8xi32, #tile.space<global>>
    ```
  }];
  let arguments = (ins I32:$value, AnyMemRef:$flags, Variadic<Index>:$indices,
                       UnitAttr:$add);
  let assemblyFormat = [{
    $value `,` $flags `[` $indices `]` attr-dict `:` type($value) `,` type($flags)
  }];
  let hasVerifier = 1;
}

def Tile_WaitOp : Tile_Op<"wait"> {
  let summary = "wait until a flag reaches a value";
  let description = [{
    One thread spins, with acquire loads at system scope, until
    `flags[indices]` reaches `value` (`(int32)(flag - value) >= 0`, so epochs
    may wrap); then the block (or the role) continues together, and what the
    signalling side wrote before its signal is visible, to TMA loads too.
    Past `timeout_ms` the kernel traps with a message naming the flag.

    ```mlir
    tile.wait %flags[%src], %epoch timeout_ms(10000) : memref<8xi32, #tile.space<global>>, i32
    ```
  }];
  let arguments = (ins AnyMemRef:$flags, Variadic<Index>:$indices, I32:$value,
                       Tessel_I64Attr:$timeout_ms);
  let assemblyFormat = [{
    $flags `[` $indices `]` `,` $value `timeout_ms` `(` $timeout_ms `)` attr-dict `:`
    type($flags) `,` type($value)
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
  let description = [{
    The body's global-to-shared copies are the loads: tessel-software-pipeline
    (or tessel-warp-specialize on sm_90a) issues them up to `num_stages - 1`
    iterations ahead into `num_stages` copies of their shared buffers.
    `warp_specialize` forces the producer/consumer split on (true) or off
    (false); unset lets tessel-warp-specialize decide. `pingpong` asks that
    the two consumer warpgroups of a split loop take turns at the tensor
    cores (tessel-schedule-pingpong). `overlap_mma` asks that a split
    loop's gemms keep the previous iteration's wgmma group running while the
    next one issues, each stage released an iteration late
    (tessel-release-stages-late); it needs two stages or more.
  }];
  let arguments = (ins Index:$lower, Index:$upper, Index:$step, Tessel_I64Attr:$num_stages,
                       OptionalAttr<BoolAttr>:$warp_specialize, UnitAttr:$pingpong,
                       UnitAttr:$overlap_mma);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Tile_BarrierOp : Tile_Op<"barrier"> {
  let summary = "block-wide barrier, or a named barrier over a role's threads";
  let description = [{
    Without `threads` every thread of the block waits (`__syncthreads`). With
    `id` and `threads` only the threads of one `tile.role` take part
    (`bar.sync id, threads`); tessel-insert-barriers sets them inside roles.
  }];
  let arguments = (ins OptionalAttr<Tessel_I64Attr>:$id, OptionalAttr<Tessel_I64Attr>:$threads);
  let assemblyFormat = "(`named` `(` $id^ `,` $threads `)`)? attr-dict";
  let hasVerifier = 1;
}

def Tile_TmemAliasOp : Tile_Op<"tmem_alias", [Pure]> {
  let summary = "a tensor-memory buffer over the first columns of another";
  let description = [{
    The same lanes and columns seen as another shape and type: FlashAttention
    writes P (packed 16-bit) over the f32 scores S it came from. The result
    takes no columns of its own; it must fit in the source's 32-bit columns
    and have its rows. Accesses to either are ordered as accesses to one
    buffer.
  }];
  let arguments = (ins AnyMemRef:$source);
  let results = (outs AnyMemRef:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_StageOp : Tile_Op<"stage", [Pure, AllTypesMatch<["buffer", "result"]>]> {
  let summary = "one of the pipeline copies of a multi-buffered shared buffer";
  let description = [{
    `buffer` is a shared alloc with `stages = S` (set by the pipelining
    passes); the result is its copy number `index` (0 <= index < S), a whole
    buffer of the same type and layout.
  }];
  let arguments = (ins AnyStaticShapeMemRef:$buffer, Index:$index);
  let results = (outs AnyStaticShapeMemRef:$result);
  let assemblyFormat = "$buffer `[` $index `]` attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

def Tile_CopyAsyncOp : Tile_Op<"copy_async"> {
  let summary = "an asynchronous global-to-shared copy that completes on an mbarrier";
  let description = [{
    Issued by one thread of the executing threads; its bytes arrive on
    mbarrier `barriers[index]`, whose expected transaction count must cover
    them (`tile.mbarrier_expect_tx`). Lowers to TMA (`cp.async.bulk.tensor`)
    with a tensor map built on the host: `source` must be a window of a
    global tensor, `dest` a whole shared buffer (or pipeline stage).
    With `multicast` the blocks of the kernel's cluster share the copy: each
    issues every cluster-size-th TMA box, delivered to all of them, and the
    bytes complete on `barriers[index]` in every block.
  }];
  let arguments = (ins AnyMemRef:$source, AnyMemRef:$dest, AnyMemRef:$barriers, Index:$index,
                       UnitAttr:$multicast);
  let assemblyFormat = [{
    $source `,` $dest `arrive` $barriers `[` $index `]` attr-dict `:` type($source) `,` type($dest) `,` type($barriers)
  }];
  let hasVerifier = 1;
}

def Tile_MbarrierInitOp : Tile_Op<"mbarrier_init"> {
  let summary = "one thread initialises mbarrier barriers[index] for `arrivals` arrivals";
  let arguments = (ins AnyMemRef:$barriers, Index:$index, Tessel_I64Attr:$arrivals);
  let assemblyFormat = "$barriers `[` $index `]` `arrivals` `(` $arrivals `)` attr-dict `:` type($barriers)";
  let hasVerifier = 1;
}

def Tile_MbarrierArriveOp : Tile_Op<"mbarrier_arrive"> {
  let summary = "each warp of the executing threads arrives once on barriers[index]";
  let description = [{
    One arrival per warp, by its first lane after the warp synchronises;
    with `each_thread`, one arrival per thread (each releasing its own
    writes, as the CUDA sanitizers model it). With `cluster` the arrival
    goes to barriers[index] in every block of the kernel's cluster (a stage
    that peers multicast into is free only when every block is done).
  }];
  let arguments = (ins AnyMemRef:$barriers, Index:$index, UnitAttr:$each_thread, UnitAttr:$cluster);
  let assemblyFormat = "$barriers `[` $index `]` (`each_thread` $each_thread^)? attr-dict `:` type($barriers)";
  let hasVerifier = 1;
}

def Tile_MmaCommitOp : Tile_Op<"mma_commit"> {
  let summary = "barriers[index] gets one arrival once the MMAs issued so far complete";
  let description = [{
    tcgen05.commit by the thread that issues the executing threads' gemms
    (their first): releases what those MMAs read, such as a pipeline
    stage, without waiting for them.
  }];
  let arguments = (ins AnyMemRef:$barriers, Index:$index);
  let assemblyFormat = "$barriers `[` $index `]` attr-dict `:` type($barriers)";
  let hasVerifier = 1;
}

def Tile_MmaWaitOp : Tile_Op<"mma_wait"> {
  let summary = "the executing threads wait until every MMA they issued is complete";
  let description = [{
    After gemms with `issue_only`: a commit to a barrier of the lowering's
    and a wait on it by every executing thread, then the tcgen05 fence, so
    that the accumulator may be read.
  }];
  let assemblyFormat = "attr-dict";
}

def Tile_MbarrierExpectTxOp : Tile_Op<"mbarrier_expect_tx"> {
  let summary = "one thread arrives on barriers[index], expecting `bytes` more transaction bytes";
  let arguments = (ins AnyMemRef:$barriers, Index:$index, Tessel_I64Attr:$bytes);
  let assemblyFormat = "$barriers `[` $index `]` `bytes` `(` $bytes `)` attr-dict `:` type($barriers)";
  let hasVerifier = 1;
}

def Tile_MbarrierWaitOp : Tile_Op<"mbarrier_wait"> {
  let summary = "every executing thread waits for the phase of parity `parity` to complete";
  let arguments = (ins AnyMemRef:$barriers, Index:$index, Index:$parity);
  let assemblyFormat = "$barriers `[` $index `]` `parity` $parity attr-dict `:` type($barriers)";
  let hasVerifier = 1;
}

def Tile_CpAsyncCommitOp : Tile_Op<"cp_async_commit"> {
  let summary = "close each thread's group of `async` copies issued since the last commit";
  let assemblyFormat = "attr-dict";
}

def Tile_CpAsyncWaitOp : Tile_Op<"cp_async_wait"> {
  let summary = "wait until at most `pending` committed groups of `async` copies are in flight";
  let arguments = (ins Tessel_I64Attr:$pending);
  let assemblyFormat = "`pending` `(` $pending `)` attr-dict";
}

def Tile_FenceProxyAsyncOp : Tile_Op<"fence_proxy_async"> {
  let summary = "order this thread's generic shared-memory accesses before async-proxy ones";
  let assemblyFormat = "attr-dict";
}

def Tile_FenceMbarrierInitOp : Tile_Op<"fence_mbarrier_init"> {
  let summary = "make mbarrier initialisation visible to the async proxy";
  let assemblyFormat = "attr-dict";
}

def Tile_NumBlocksOp : Tile_Op<"num_blocks", [Pure]> {
  let summary = "the number of blocks launched along the first grid dimension";
  let description = [{
    What a persistent kernel steps its work tiles by: the launch, not the
    grid map, decides it.
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
}

def Tile_RoleOp : Tile_Op<"role", [SingleBlock, NoTerminator]> {
  let summary = "a region only threads [first, first + threads) run: a warp-group role";
  let description = [{
    Collective tile ops inside are collective over the role's threads.
    `max_registers`, when set, becomes `setmaxnreg` (inc or dec) for the role
    on sm_90a; roles must then be whole warpgroups.

    ```mlir
    tile.role threads(256, 128) max_registers(40) { ...producer... }
    ```
  }];
  let arguments = (ins Tessel_I64Attr:$first, Tessel_I64Attr:$threads, OptionalAttr<Tessel_I64Attr>:$max_registers);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `threads` `(` $first `,` $threads `)` (`max_registers` `(` $max_registers^ `)`)? attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
}

#endif // TESSEL_TILE_OPS
