//===- Passes.td - Tessel passes ---------------------------*- tablegen -*-===//
#ifndef TESSEL_TRANSFORMS_PASSES
#define TESSEL_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def TesselVerifyKernel : Pass<"tessel-verify-kernel", "::tessel::tile::KernelOp"> {
  let summary = "Check whole-kernel rules the op verifiers cannot see";
  let description = [{
    Pre: tile-level IR. Checks: the thread count is a multiple of 32 and at most
    1024; `tile.parallel` bodies hold element code only (no collective tile
    op); the shared memory the kernel needs (its shared buffers)
    fits the target's per-block limit. Each failure is an error at the
    offending op's location, which the DSL sets to the user's source line.
    Post: the IR is unchanged.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselKMajorOperands : Pass<"tessel-k-major-operands", "::tessel::tile::KernelOp"> {
  let summary = "Give 8-bit gemms K-major copies of operands stored the other way";
  let description = [{
    Pre: tile-level IR. The 8-bit tensor-core instructions read A as [M, K]
    and B as [N, K] only. A `tile.gemm` of 8-bit operands whose A is
    transposed ([K, M]) or whose B is not ([K, N]) in shared memory gets a
    K-major shared copy of that operand (allocated at the kernel's top),
    written by a `tile.parallel` just before the gemm, and a remark at the
    gemm saying what the copy costs and how to store the operand instead.
    An 8-bit A in registers reads K in register order (tile.gemm's
    `b_register_k_order`): its B, unless the gemm says it is stored that
    way, gets a copy with K permuted to match, and the attribute.
    Post: every 8-bit gemm reads shared operands K-major, and B in register
    order where A is in registers.
  }];
  let dependentDialects = ["::tessel::tile::TileDialect", "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect"];
}

def TesselTmemAccumulators : Pass<"tessel-tmem-accumulators", "::tessel::tile::KernelOp"> {
  let summary = "Run register-accumulator gemms on tcgen05 through tensor memory (sm_100a)";
  let description = [{
    Pre: tile-level IR. On sm_100a (and sm_100a-emu) a `tile.gemm` whose
    accumulator is a fragment would otherwise run on mma.sync, a fraction of
    the target's tensor-core rate. Where tcgen05.mma can take it (A and B
    f16/bf16 in shared memory, an f32 [128, N] accumulator with N a power of
    two from 16 to 256, whole warpgroups, no instruction asked for, tensor
    memory left), the gemm accumulates into a tensor-memory buffer instead:
    one per accumulator fragment, allocated at the kernel's top, with the
    fragment copied in before the gemm (unless `clear_accum`) and out after
    it. A remark at the gemm says the accumulator moves through tensor
    memory (an alloc_tmem accumulator would stay there); a gemm it cannot
    move gets a warning saying why it stays on mma.sync.
    Post: every fragment-accumulator gemm on sm_100a is either rewritten or
    warned about; other targets are unchanged.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselTmemAllocation : Pass<"tessel-tmem-allocation", "::tessel::tile::KernelOp"> {
  let summary = "Place every tensor-memory buffer in the block's 512 columns";
  let description = [{
    Pre: tile-level IR. Each `#tile.space<tmem>` buffer takes its 32-bit
    columns (values, or half of them for packed 16-bit values) rounded up to
    a power of two of at least 32; the widest go first, so every buffer
    starts at a multiple of its own width. Over 512 columns in all is an
    error at the kernel listing every buffer with its columns; a kernel for
    a target without tensor memory (sm_80, sm_90a) that allocates some is an
    error at the buffer.
    Each copy or fill of tensor memory gets `tmem_group_columns`: the
    32-bit columns between consecutive warpgroups' shares of its [128, n]
    tile (warpgroups split columns; warp w reaches lanes 32 * (w % 4)).
    Post: every tensor-memory alloc has `offset` = its first column; the
    kernel has `tmem_columns`, the power of two tcgen05.alloc must take,
    and `tcgen05_emulated` for sm_100a-emu.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselFragmentWindows : Pass<"tessel-fragment-windows", "::tessel::tile::KernelOp"> {
  let summary = "Give each window of a fragment registers of its own, copied in and out";
  let description = [{
    Pre: tile-level IR. A `tile.region` of a fragment (windows of windows
    composed first) names some of each thread's registers, so its offsets
    must be known at compile time: a loop of constant trip count whose index
    they depend on is unrolled (at most 32 iterations over all such loops),
    and any other run-time offset is an error at the window. Equal windows
    used by one op share their registers; overlapping ones, or a window and
    its fragment whole, one of them written by the op, are an error. Each op that uses the window
    then gets a fragment of the window's shape: a `tile.copy` from the
    window into it before the op (the outermost `tile.parallel` around a use
    counts as the op) and, where the op may write it, a copy back after.
    The copies move registers within each thread; tessel-layout-inference
    gives the window's fragment the part of the fragment's layout the
    window covers (or the fragment a layout around its window's), and the
    CUDA compiler forwards the moves.
    Post: every `tile.region` of a fragment has constant offsets and is used
    only by copies to and from a fragment of its shape.
  }];
  let dependentDialects = ["::tessel::tile::TileDialect", "::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
}

def TesselLayoutInference : Pass<"tessel-layout-inference", "::tessel::tile::KernelOp"> {
  let summary = "Give every fragment a register layout and every shared buffer a layout";
  let description = [{
    Pre: tile-level IR. Strict constraints first: a `tile.annotate_layout`
    fixes a buffer's layout, and each `tile.gemm` picks its tensor-core
    instruction (tcgen05.mma when its accumulator is in tensor memory, wgmma
    on sm_90a when the tile allows it, mma.sync m16n8k16 otherwise), splits
    its tile over warps by its policy and fixes its accumulator's layout; a
    fragment copied to or from tensor memory takes the tcgen05 .32x32b
    layout (thread = lane = row, register = column). Then layouts propagate to a fixed point: a
    `tile.parallel` takes the layout of a fragment it indexes with all its
    indices (or extends one indexed with some of them), and every fragment it
    indexes gets the loop layout projected on that fragment's indices; a
    reduction's result gets its source's layout without the reduced
    dimension; a fragment-to-fragment copy shares one layout, except that a
    window of a fragment (see tessel-fragment-windows) gives its copy the
    fragment's layout restricted to the window, or the fragment the window's
    layout extended by registers. Fragments still
    free (windows before the fragments they window, the smallest first)
    then get an element-wise layout from a cost model: the widest
    vector (16 bytes of the narrowest element the fragment is copied from or
    to) along the last dimension, lanes next, warps on the slowest
    dimensions so that row reductions stay inside a warp; threads left over
    replicate and padding past a non-power-of-two extent is skipped.
    Shared operands of tensor-core gemms get the widest XOR swizzle their
    rows allow, other shared buffers a plain row-major layout.
    A layout conflict is an error naming both ops and both layouts; a gemm
    tile that is not a multiple of its instruction names the multiple.
    Post: every fragment alloc and shared alloc has `layout`, every
    fragment-touching `tile.parallel` has `layout`, every gemm has
    `instruction` and `warps`.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselWarpSpecialize : Pass<"tessel-warp-specialize", "::tessel::tile::KernelOp"> {
  let summary = "Split a TMA-fed pipelined loop into producer and consumer warpgroups";
  let description = [{
    Pre: tile-level IR with layouts (tessel-layout-inference). On sm_90a, a
    kernel's single top-level `tile.pipelined` loop whose loads can all be
    TMA copies (see tessel-software-pipeline) and whose thread count is
    whole warpgroups is split, unless the loop says `warp_specialize = false`:
    the kernel gains a producer warpgroup after its threads
    (`tile.role`, setmaxnreg 40) that issues every stage's loads with
    `tile.copy_async` once the stage's `empty` mbarrier has completed, and
    the consumer role (the kernel's threads, setmaxnreg up) runs everything
    else, waiting on each stage's `full` mbarrier and arriving on `empty`
    once per warp. A loop that asks for `warp_specialize = true` but cannot
    be split is an error saying why.
    Post: no split loop remains; its load buffers have `stages`, the kernel
    has `threads` + 128 threads.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">,
                 Option<"tma", "tma", "bool", "true",
                        "sm_90a loads may be TMA copies (off: cp.async)">];
  let dependentDialects = ["::tessel::tile::TileDialect", "mlir::scf::SCFDialect",
                           "mlir::arith::ArithDialect"];
}

def TesselSoftwarePipeline : Pass<"tessel-software-pipeline", "::tessel::tile::KernelOp"> {
  let summary = "Issue a pipelined loop's loads num_stages - 1 iterations ahead";
  let description = [{
    Pre: tile-level IR with layouts. The loads of a `tile.pipelined` loop
    are its top-level global-to-shared copies that fill a whole shared buffer
    used only inside the loop, with address arithmetic free of side effects.
    With num_stages S >= 2 each such buffer gets S copies (`stages = S` on
    its alloc, `tile.stage` views), a prologue issues iterations 0 .. S-2,
    and iteration k issues iteration k + S - 1 (predicated off past the trip
    count, which is the epilogue) before computing on stage k % S. On sm_90a
    with every load TMA-eligible (same element type, unpadded layout, rows of
    whole 16-byte units) the loads are `tile.copy_async` on a per-stage
    `full` mbarrier whose phase parity compute waits for; otherwise they are
    cp.async copies in one commit group per iteration, waited for with
    `tile.cp_async_wait pending(S - 2)` and published by a barrier.
    Loops with one stage or no loads are left alone; shared memory is checked
    against the target's limit after multi-buffering.
    Post: no `tile.pipelined` with loads and S >= 2 remains.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">,
                 Option<"tma", "tma", "bool", "true",
                        "sm_90a loads may be TMA copies (off: cp.async)">];
  let dependentDialects = ["::tessel::tile::TileDialect", "mlir::scf::SCFDialect",
                           "mlir::arith::ArithDialect"];
}

def TesselInsertBarriers : Pass<"tessel-insert-barriers", "::tessel::tile::KernelOp"> {
  let summary = "Insert barriers and proxy fences between tile ops that share memory";
  let description = [{
    Pre: tile-level IR after pipelining. A tile op distributes its elements
    over the threads differently from the next one, so when two tile ops (or
    block-uniform scalar accesses) touch the same shared buffer and one of
    them writes it, a barrier goes before the later one: `tile.barrier` in
    code every thread runs, `tile.barrier named(id, threads)` over the
    role's threads inside a `tile.role` (a block barrier there would
    deadlock); a conflict between code before a role and the role itself is
    ordered before the threads diverge. Fragments are registers, private to
    their threads, and need none; the loads that fill multi-buffered
    pipeline buffers are ordered by their pipeline's mbarriers or cp.async
    groups, every other access of them per stage, like any shared buffer
    (element code that masks a loaded stage before a gemm gets its barrier).
    Windows with constant offsets are boxes: writes into disjoint windows
    of one tile do not conflict. Loops are walked twice
    so that a write at the end of an iteration is ordered before a read at
    the start of the next. Never inside a `tile.parallel` body.
    mbarrier inits are followed by `tile.fence_mbarrier_init` and ordered
    before the first use; a generic-proxy write of a buffer wgmma reads is
    followed by `tile.fence_proxy_async` (wgmma operands, sources of TMA
    stores and TMA reduce-adds).
    Post: every cross-thread shared-memory dependence crosses a barrier.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">,
                 Option<"tma", "tma", "bool", "true",
                        "whether the lowering may store with TMA (as tessel-lower-tile-ops)">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselLowerTileOps : Pass<"tessel-lower-tile-ops", "::tessel::tile::KernelOp"> {
  let summary = "Lower collective tile ops to per-thread code";
  let description = [{
    Pre: tile-level IR with layouts (tessel-layout-inference) and barriers.
    Fragments become per-thread register arrays of their layout's register
    count; a collective op on a fragment becomes an unrolled loop over the
    thread's registers (the element of register r is the layout's thread
    part XOR register part), with 16-byte vector moves between registers
    and memory where the layout holds contiguous elements. Replicated
    elements are written to memory by their owner only. Shared buffers get
    offsets in dynamic shared memory and are addressed through their layout
    (swizzle or padding) or annotated affine map. Global/shared copies stay
    thread-strided and vectorized, with cp.async inside pipelined loops on
    sm_80+. gemm becomes ldmatrix + mma.sync m16n8k16 per warp, or wgmma
    m64nNk16 per warpgroup with swizzled shared-memory descriptors.
    Fragment reductions fold registers in the thread, then shuffle across
    lanes, then go through shared memory only across warps.
    Post: thread-level IR (scf, arith, math, memref, tilenv) with
    `smem_bytes` set on the kernel.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">,
                 Option<"tma", "tma", "bool", "true",
                        "sm_90a copies between whole shared buffers and global windows may be TMA">];
  let dependentDialects = ["::tessel::tile::TileDialect", "::tessel::tilenv::TileNVDialect",
                           "mlir::scf::SCFDialect", "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect", "mlir::memref::MemRefDialect"];
}

def TesselSchedulePingpong : Pass<"tessel-schedule-pingpong", "::tessel::tile::KernelOp"> {
  let summary = "Let the two consumer warpgroups of a split loop take turns at the tensor cores";
  let description = [{
    Pre: thread-level IR after tessel-defer-wgmma-waits;
    tessel-warp-specialize marked the consumer loop of a `tile.pipelined`
    loop with `pingpong` as `tessel.pingpong` (two consumer warpgroups, two
    or more stages). A turn is the gemms issued back to back, from a
    `wgmma_fence` to the next `wgmma_wait`: warpgroup w waits on named
    barrier 14 + w before the turn's first gemm and arrives on the other's
    after its last commit, with a first arrival that lets warpgroup 0 start
    and a last wait that takes warpgroup 1's final arrival. One warpgroup's
    element-wise work then overlaps the other's gemms. A marked loop whose
    warpgroups synchronize inside it, or whose gemms sit in control flow, is
    an error.
    Post: the loop's tensor-core phases alternate between the warpgroups;
    the mark is gone.
  }];
  let dependentDialects = ["::tessel::tilenv::TileNVDialect", "mlir::scf::SCFDialect",
                           "mlir::arith::ArithDialect"];
}

def TesselDeferWgmmaWaits : Pass<"tessel-defer-wgmma-waits", "::tessel::tile::KernelOp"> {
  let summary = "Wait for each wgmma group only where its result or operands are next touched";
  let description = [{
    Pre: thread-level IR from tessel-lower-tile-ops, where every gemm ends
    in `wgmma_commit; wgmma_wait 0`. Per block, the waits are removed and
    the weakest `wgmma_wait N` (N: groups committed after the one needed;
    groups complete in order) goes back before the first op that touches a
    pending group's accumulator or A registers, writes a shared buffer its
    descriptors read (also when another warpgroup may do so after a
    barrier later in the block), arrives on an mbarrier (which may free a
    pipeline stage), commits gemms in nested control flow, or is not
    understood; and before the block's terminator. Independent gemms then
    run back to back and element-wise work overlaps the gemms it does not
    read.
    Post: the same program with fewer, later and weaker waits; each wait
    lists the registers it makes safe in `ready`.
  }];
  let dependentDialects = ["::tessel::tilenv::TileNVDialect"];
}

def TesselReleaseStagesLate : Pass<"tessel-release-stages-late", "::tessel::tile::KernelOp"> {
  let summary = "Keep two wgmma groups in flight by releasing each pipeline stage an iteration late";
  let description = [{
    Pre: thread-level IR after tessel-defer-wgmma-waits. Warp specialization
    marks a consumer loop asked for with `overlap_mma` with
    `tessel.stage_ring` (its number of stages). Such a loop must be a plain
    gemm mainloop: one wgmma commit, then one `wgmma_wait 0`, then only
    address arithmetic, warp syncs and one arrival on the stage's `empty`
    barrier, nothing else touching registers, a ring of two stages or more,
    and one wgmma op writing an accumulator zero-filled right before the
    loop. The wait becomes `wgmma_wait 1`, the arrival releases the previous
    iteration's stage (from the second iteration on), and after the loop come
    `wgmma_wait 0` and the last stage's arrival. The zero fill goes (kept for
    a loop that runs no iteration): the wgmma overwrites each register the
    first time the loop reaches it (scale-d 0), since ptxas serializes the
    wgmmas of a loop whose accumulator ordinary instructions write. A marked
    loop of any other form is an error at its location, saying why.
    Post: iteration k's wgmmas run while iteration k+1 waits for its stage
    and issues; every stage is still released after the wgmmas that read it
    complete, and every stage the producer waits for is released. The mark
    is gone.
  }];
  let dependentDialects = ["::tessel::tilenv::TileNVDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect"];
}

def TesselDeferBulkWaits : Pass<"tessel-defer-bulk-waits", "::tessel::tile::KernelOp"> {
  let summary = "Wait for a TMA store's shared-memory reads only before they could be disturbed";
  let description = [{
    Pre: thread-level IR from tessel-lower-tile-ops, where one thread issues
    each TMA store or reduce-add as `scf.if %c { tma_store...; bulk_commit;
    bulk_wait read }`. The wait moves, under the same condition, before the
    first later op in its block that writes shared memory, is a barrier (it
    may order other threads' writes), issues or waits for bulk groups, or
    holds control flow other than scf.for/scf.if. Past the block's end in a
    loop (with the condition defined outside it), the wait goes before the
    first such op from the top of the body and once more after the loop;
    otherwise before the block's end.
    Post: the issuing thread (and its warpgroup) runs on while the copy
    engine reads the tile; every write of shared memory that the original
    wait ordered is still ordered.
  }];
  let dependentDialects = ["::tessel::tilenv::TileNVDialect", "::mlir::scf::SCFDialect"];
}

def TesselVerifySync : Pass<"tessel-verify-sync", "::tessel::tile::KernelOp"> {
  let summary = "Prove that every cross-thread shared or tensor memory dependence is ordered";
  let description = [{
    Pre: tile-level IR after tessel-insert-barriers (it runs in every
    target's pipeline right after it). For each pair of accesses to a shared
    or tensor-memory buffer by different threads where one writes, the pass
    finds the ordering in the IR or reports an error at the later access's
    location (the user's line), naming the buffer, the other access and what
    is missing:
    - "missing barrier": code one group of threads runs in order (the block,
      or a role) has no `tile.barrier` (named with the role's id in a role)
      between two tile ops that touch a buffer, one writing;
    - "missing mbarrier wait": a TMA load (`tile.copy_async`) is in flight
      when its buffer is accessed; only a wait on the mbarrier it completes
      on finishes it (cp.async loads: a `tile.cp_async_wait` retiring its
      group, then a barrier);
    - "missing proxy fence": a generic-proxy write is read by the async
      proxy (wgmma or tcgen05 operands, TMA store sources) with no
      `tile.fence_proxy_async` after it;
    - "stage mix-up": a pipeline stage accessed after waiting for another
      stage's loads, or a load that fills one stage and completes on
      another's mbarrier (indices compared as ((base + c) mod S) + d);
    - "no mbarrier orders two roles' accesses": sibling roles touch a buffer
      with no mbarrier one arrives on after its access and the other waits
      on before its own;
    - "wait in the wrong role": a flag wait before a pipeline's loads in
      program order that the role issuing those loads does not run;
    - "missing tcgen05 wait": an issue-only tcgen05 gemm's operands or
      accumulator touched before `tile.mma_wait`;
    - mbarriers used before a barrier follows their initialisation, and TMA
      on an mbarrier without `tile.fence_mbarrier_init`.
    (A block-wide barrier inside a role is rejected by `tile.barrier`'s
    verifier, and in lowered code by tessel-verify-barriers.)
    Not proved: global-memory races between blocks or GPUs, mbarrier phase
    parities, cp.async group counts across iterations, and tensor-memory
    rows across warpgroups.
    Post: the IR is unchanged.
  }];
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"",
                        "target architecture: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu">,
                 Option<"tma", "tma", "bool", "true",
                        "whether the lowering may store with TMA (as tessel-lower-tile-ops)">];
  let dependentDialects = ["::tessel::tile::TileDialect"];
}

def TesselVerifyBarriers : Pass<"tessel-verify-barriers", "::tessel::tile::KernelOp"> {
  let summary = "Check that no block-wide barrier is reachable from divergent code";
  let description = [{
    Pre: any level; run at the end of the pipeline on lowered IR. A
    `__syncthreads` (`tilenv.sync_threads`, or `tile.barrier` without an id)
    waits for every thread of the block, so one that only some threads can
    reach hangs the block. The pass rejects a block-wide barrier nested in a
    `tile.role`, or in an `scf.if`, `scf.for` or `scf.while` whose condition
    or bounds depend on the thread index (`tilenv.thread_id`, through
    arithmetic or the indices of memory reads). The error is at the barrier
    and a note names the divergent construct: a pass that lowered a
    collective op with the wrong barrier is caught here instead of as a hang
    on the GPU.
    Post: the IR is unchanged.
  }];
  let dependentDialects = ["::tessel::tile::TileDialect", "::tessel::tilenv::TileNVDialect"];
}

#endif
