//===- TileLowering.h - state shared by the tile-op lowering ----*- C++ -*-===//
//
// tessel-lower-tile-ops is one pass; its gemm lowering lives in its own file
// (LowerGemm.cpp) and shares this class.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_TRANSFORMS_TILELOWERING_H
#define TESSEL_TRANSFORMS_TILELOWERING_H

#include "tessel/Layout/SharedLayout.h"
#include "tessel/Transforms/Passes.h"

namespace tessel {

/// Where the elements of a (region of a) buffer live after lowering.
struct Access {
  mlir::Value root;          // global parameter, or the lowered 1-D buffer
  mlir::Attribute layout;    // SharedLayoutAttr, AffineMapAttr, FragmentLayoutAttr or null
  llvm::SmallVector<mlir::Value> offsets; // region origin in the root's index space
  llvm::SmallVector<int64_t> rootShape;
  llvm::ArrayRef<int64_t> tileShape;
  /// The root dimension each tile dimension walks (rank-reducing windows
  /// leave some out), and the window's extent in every root dimension.
  llvm::SmallVector<unsigned> rootDims;
  llvm::SmallVector<int64_t> windowShape;
  mlir::Type elementType;
  tile::MemorySpace space;
  bool isGlobal() const { return space == tile::MemorySpace::global; }
  bool isFragment() const { return space == tile::MemorySpace::fragment; }
  /// Aligned runs of up to 16 bytes along the last index are contiguous.
  bool vectorizable;
  /// Per root dimension, a run-time limit from tile.bound (null where the
  /// extent alone bounds it).
  llvm::SmallVector<mlir::Value> limits;
  /// Element offset of the pipeline stage a tile.stage view selects (shared
  /// buffers only); null for the first or only copy.
  mlir::Value stageBase;
};

/// Marks element code's loads and stores of kernel tensors (see
/// TileLowering::markTensorElementAccesses).
constexpr llvm::StringLiteral kTensorElementAccess = "tessel.tensor_element_access";

class TileLowering {
public:
  TileLowering(tile::KernelOp kernel, const TargetInfo &target)
      : kernel(kernel), target(target), b(kernel.getContext()) {}
  mlir::LogicalResult run();

private:
  // The steps of run(), in order.
  /// A shared scratch buffer for each reduction across warps.
  void createReduceScratch();
  /// Every allocation becomes a 1-D buffer; sets the kernel's shared bytes.
  mlir::LogicalResult lowerStorage();
  /// Places the shared buffers (`scratch` the reductions' among them);
  /// returns the bytes they take.
  int64_t lowerSharedBuffers(const llvm::DenseSet<mlir::Operation *> &scratch);
  /// Fragments and local buffers become per-thread arrays.
  mlir::LogicalResult lowerRegisterBuffers(llvm::ArrayRef<tile::AllocOp> allocs);
  /// Lowers every collective op, then erases them.
  mlir::LogicalResult lowerCollectiveOps();
  void lowerCollectiveOp(mlir::Operation *op, bool insideParallel);
  /// Tags element code's accesses of kernel tensors, before anything lowers.
  void markTensorElementAccesses();
  /// Loads and stores of tile buffers (and element code's of kernel
  /// tensors) by logical index, through their layouts, checked.
  void lowerElementAccesses();
  /// Erases the logical buffers; fails where one is still used.
  mlir::LogicalResult eraseLogicalBuffers();

  tile::KernelOp kernel;
  TargetInfo target;
  mlir::OpBuilder b;
  mlir::Location loc = mlir::UnknownLoc::get(kernel.getContext());
  mlir::Value threadId, numThreads, zeroIdx;
  int64_t threads = 0;
  /// Original allocation -> lowered 1-D buffer and its layout.
  llvm::DenseMap<mlir::Value, std::pair<mlir::Value, mlir::Attribute>> storage;
  /// Per fragment layout, each dimension's part of the index that the
  /// thread's lane and warp select (computed once at kernel entry).
  llvm::DenseMap<mlir::Attribute, llvm::SmallVector<mlir::Value>> threadCoordCache;
  /// Scratch shared buffers for reductions across warps.
  llvm::DenseMap<mlir::Operation *, mlir::Value> reduceScratch;
  /// wgmma gemms whose A registers are packed before the group's fence.
  llvm::DenseSet<mlir::Operation *> packAFirst;
  /// Whether `fragment` is (or will be, once lowered) the register A
  /// operand of a wgmma.
  bool feedsWgmmaRegisters(mlir::Value fragment);
  /// The kernel-wide thread index and count; threadId/threads are the
  /// current role's while an op inside a tile.role is lowered.
  mlir::Value blockThreadId;
  int64_t blockThreads = 0;
  llvm::DenseMap<mlir::Operation *, mlir::Value> roleThreadIds;
  /// The tile.role each collective op runs in, recorded before lowering
  /// moves role bodies into plain conditionals.
  llvm::DenseMap<mlir::Operation *, tile::RoleOp> roleOf;
  mlir::LogicalResult failure = mlir::success();

  // Arithmetic.
  mlir::Value idx(int64_t v);
  mlir::Value add(mlir::Value x, mlir::Value y);
  mlir::Value mul(mlir::Value x, mlir::Value y);
  mlir::Value lt(mlir::Value x, mlir::Value y);
  mlir::Value eq(mlir::Value x, mlir::Value y);
  mlir::Value andI(mlir::Value x, mlir::Value y);
  mlir::Value xorI(mlir::Value x, mlir::Value y);
  mlir::Value shr(mlir::Value x, int64_t bits);
  mlir::Value bit(mlir::Value x, unsigned position);
  mlir::Value divC(mlir::Value x, int64_t c);
  mlir::Value remC(mlir::Value x, int64_t c);
  mlir::Value convert(mlir::Value v, mlir::Type to);
  /// scf.for 0..count marked for full unrolling (register indices must be
  /// constants once unrolled); the body gets the induction variable.
  void unrolledFor(int64_t count, llvm::function_ref<void(mlir::Value)> body);
  /// scf.if without else; the builder is left inside it. Null means always.
  void guard(mlir::Value cond);

  // Memory.
  Access resolve(mlir::Value buffer);
  mlir::Value physicalIndex(const Access &a, mlir::ValueRange logical);
  mlir::Value layoutIndex(const Access &a, mlir::ValueRange logical);
  /// 32-bit shared address of element `elements` of a shared access's root
  /// (plus its stage).
  mlir::Value sharedAddress(const Access &a, mlir::Value elements);
  llvm::SmallVector<mlir::Value> rootIndices(const Access &a, mlir::ValueRange tileIdx);
  /// `userIndices`: the indices are element code's own (values read from
  /// memory, a stencil's i + 1), which may leave the window; the compiler's
  /// (copies, reductions) stay inside it by construction.
  mlir::Value inBounds(const Access &a, mlir::ValueRange rootIdx, int64_t innerExtra = 0,
                       bool userIndices = false);
  mlir::Value insideBuffer(const Access &a, mlir::ValueRange rootIdx);
  /// A window of a shared or local buffer at a run-time offset that may
  /// leave the buffer traps there, saying which (tilenv.trap_unless):
  /// nothing would stop its copies reading and writing other buffers.
  void checkWindowOffsets();
  mlir::Value aligned(const Access &a, llvm::ArrayRef<mlir::Value> rootIdx, int64_t vector);
  llvm::SmallVector<mlir::Value> operandIndices(const Access &a, llvm::ArrayRef<mlir::Value> rootIdx);
  /// An element of a tile: 0 where it lies outside a global root (or, for
  /// `userIndices`, outside a shared or local buffer); a store drops it.
  mlir::Value load(const Access &a, mlir::ValueRange tileIdx, bool userIndices = false);
  void store(const Access &a, mlir::ValueRange tileIdx, mlir::Value value,
             bool userIndices = false);
  mlir::Value allocLocal(int64_t elements, mlir::Type type);
  void forEachElement(llvm::ArrayRef<int64_t> shape, int64_t vector,
                      llvm::function_ref<void(llvm::ArrayRef<mlir::Value>)> body);
  llvm::SmallVector<mlir::Value> delinearize(mlir::Value linear, llvm::ArrayRef<int64_t> shape);

  // Fragments.
  llvm::ArrayRef<mlir::Value> threadCoords(tile::FragmentLayoutAttr layout);
  /// The logical index register `r` of this thread holds.
  llvm::SmallVector<mlir::Value> coordsAt(tile::FragmentLayoutAttr layout, mlir::Value r);
  /// Inside the real extents where they are not powers of two; null if always.
  /// With the coordinates' layout, only the dimensions whose padding a thread
  /// that exists holds (three warpgroups on a layout of four: the fourth's
  /// padding rows need no check).
  mlir::Value insideShape(llvm::ArrayRef<mlir::Value> coords, llvm::ArrayRef<int64_t> shape,
                          tile::FragmentLayoutAttr layout = {});
  /// Bit d set: some thread of the `threads` running the code holds a
  /// padding element of dimension d of the layout.
  uint64_t paddedDimsReached(tile::FragmentLayoutAttr layout);
  llvm::DenseMap<std::pair<mlir::Attribute, int64_t>, uint64_t> paddedDimsCache;
  /// The thread owns (is the first replica of) its elements; null if always.
  mlir::Value threadOwns(const layout::FragmentLayout &l);
  /// Register `r` is not a duplicate of a lower register; null if always.
  mlir::Value registerOwns(const layout::FragmentLayout &l, mlir::Value r);
  mlir::Value applyMap(const layout::LinearMap &map, mlir::Value input);
  /// The register holding the element at `coords` of a fragment every
  /// thread holds whole; nothing when the layout spreads it over threads.
  std::optional<mlir::Value> replicatedRegister(const layout::FragmentLayout &l,
                                                mlir::ValueRange coords);
  int64_t vectorRegisters(const layout::FragmentLayout &l, mlir::Type memType);

  void lowerCopy(tile::CopyOp op);
  void copyGlobalShared(const Access &src, const Access &dst, bool async);
  /// For a run of `v` fragment registers at `coords` (consecutive along the
  /// last dimension): `vector` with the memory indices where the whole run is
  /// inside the fragment's shape and the memory's bounds and aligned there,
  /// otherwise `scalar` (element by element).
  void vectorRunOrScalar(const Access &frag, llvm::ArrayRef<mlir::Value> coords, const Access &mem,
                         int64_t v, llvm::function_ref<void(llvm::ArrayRef<mlir::Value>)> vector,
                         llvm::function_ref<void()> scalar);
  /// A fragment's element offsets in a shared buffer as (offset of this
  /// thread's register 0) combined with (what the register index adds),
  /// where that holds for every thread and register: an accumulator's rows
  /// and columns split between lane and register bits, and the layouts of
  /// power-of-two tiles, swizzled or not, are linear over their bits.
  struct SplitOffsets {
    mlir::Value threadPart;
    /// The part register-index bit i contributes (XOR over the set bits).
    llvm::SmallVector<int64_t> registerBits;
    /// The two parts never share a set bit: combined by addition, which
    /// the CUDA compiler folds into each access's immediate offset.
    bool disjoint;
  };
  /// Checked exhaustively at compile time: every register run of `v` is
  /// inside the tile, contiguous and aligned to `v` elements. Nothing where
  /// any of that fails (the copy then computes each address in full, with
  /// run-time checks).
  std::optional<SplitOffsets> splitSharedOffsets(const Access &frag, const Access &mem, int64_t v);
  /// The physical index (stage included) of register run `r0`.
  mlir::Value splitIndex(const Access &mem, const SplitOffsets &split, mlir::Value r0);
  void copyToFragment(const Access &src, const Access &dst);
  /// For each run of `v` registers of fragment `frag` that this thread owns
  /// (replicas skip): its first register and its first element's coordinates
  /// (none without `withCoords`).
  void forEachOwnedRun(const Access &frag, int64_t v,
                       llvm::function_ref<void(mlir::Value, llvm::ArrayRef<mlir::Value>)> body,
                       bool withCoords = true);
  /// Each element of such a run inside the tile: its coordinates and value.
  void forEachRunElement(const Access &frag, mlir::Value r0, llvm::ArrayRef<mlir::Value> coords,
                         int64_t v,
                         llvm::function_ref<void(llvm::ArrayRef<mlir::Value>, mlir::Value)> body);
  void copyFromFragment(const Access &src, const Access &dst);
  /// Between a window of a fragment (tessel-fragment-windows) and the
  /// window's own registers: a move per register inside each thread.
  void copyFragmentWindow(tile::CopyOp op, const Access &src, const Access &dst);
  void lowerFill(tile::FillOp op);
  void lowerGemm(tile::GemmOp op);
  void lowerMmaSync(tile::GemmOp op);
  void lowerWgmma(tile::GemmOp op);
  /// The shared layout of a tensor-core operand read through a descriptor
  /// (a whole swizzled shared buffer), or an error at `op`.
  std::optional<layout::SharedLayout> descriptorLayout(mlir::Operation *op, const Access &x,
                                                       llvm::StringRef name);
  /// The wgmma (or tcgen05, whose encoding differs) matrix descriptor of the
  /// core matrices at stored (r, col) of an operand.
  mlir::Value operandDescriptor(const Access &x, const layout::SharedLayout &l, bool mnMajor,
                                mlir::Value r, mlir::Value col, bool tcgen05 = false);

  // Tensor memory (LowerTcgen05.cpp).
  /// A view of a tensor-memory buffer: the buffer, the first value column
  /// of the view, its columns of values.
  struct TmemView {
    tile::AllocOp alloc;
    mlir::Value column;
    int64_t values = 0;
    mlir::Type element;
    bool packed = false;
  };
  static bool touchesTmem(mlir::Operation *op);
  std::optional<TmemView> resolveTmem(mlir::Operation *op, mlir::Value view);
  /// The i32 tcgen05 address of `lane` and value column `valueOffset` of a
  /// view (columns counted in 32-bit units).
  mlir::Value tmemAddress(const TmemView &view, mlir::Value lane, mlir::Value valueOffset);
  /// This warp's address in a view: its lane quarter, its warpgroup's
  /// share `groupColumns` 32-bit columns per warpgroup on.
  mlir::Value warpTmemAddress(const TmemView &view, int64_t groupColumns);
  /// .32x32b ld/st of `registers` 32-bit registers of `regs`, from column
  /// `address` on, in issues of at most `widest` registers, then the wait
  /// and tcgen05.fence::before_thread_sync.
  void moveTmemRuns(bool load, mlir::Value address, mlir::Value regs, int64_t registers,
                    bool halves, int64_t widest);
  /// `count` values of the view's type in `values` (a thread's registers)
  /// to or from the columns at `address`; 16-bit values in pairs.
  void moveTmemValues(bool load, const TmemView &view, mlir::Value address, mlir::Value values,
                      int64_t count);
  bool wholeWarpgroupsReachTmem(mlir::Operation *op);
  void copyTmem(tile::CopyOp op);
  void fillTmem(tile::FillOp op);
  void lowerTcgen05Gemm(tile::GemmOp op);
  /// Where a block-scaled gemm's scales sit in tensor memory (the columns
  /// tessel-tmem-allocation gave them) and how many 128-column atoms B's
  /// take per K group.
  struct BlockScaleColumns {
    int64_t aColumn, bColumn, bAtoms;
  };
  std::optional<BlockScaleColumns> blockScaleColumns(tile::GemmOp op, int64_t n);
  /// tcgen05.cp of the gemm's shared scale atoms, `groups` of them (K /
  /// 128) for A and groups x bAtoms for B, into their columns.
  void copyBlockScales(tile::GemmOp op, const BlockScaleColumns &columns, int64_t groups);
  /// i32 arithmetic on tensor-memory addresses and descriptors.
  mlir::Value i32(mlir::Value index);
  mlir::Value add32(mlir::Value x, mlir::Value y);
  mlir::Value shl32(mlir::Value x, int64_t bits);
  /// The issuing thread commits the MMAs issued so far to `op`'s barrier;
  /// every thread waits for them and fences.
  void completeMmas(mlir::Operation *op);
  void lowerMmaCommit(tile::MmaCommitOp op);
  /// Fills packAFirst, before any gemm is lowered.
  void decidePacking();
  void lowerReduce(tile::ReduceOp op);
  /// A reduction of a shared or global tile into a fragment.
  void reduceIntoFragment(tile::ReduceOp op, const Access &src, const Access &dst);
  void reduceFragment(tile::ReduceOp op);
  void lowerAtomicAdd(tile::AtomicAddOp op, bool insideParallel);
  /// Region atomic_add of a fragment: one vector reduction per run of
  /// contiguous registers where the target has them.
  void atomicAddFragment(tile::AtomicAddOp op, const Access &src, const Access &dst);
  void lowerParallel(tile::ParallelOp op);
  /// An element loop two registers an iteration, FP8 conversions paired.
  void lowerParallelPairs(tile::ParallelOp op, const layout::FragmentLayout &l, bool sixteenBit);
  /// A load or store of an element loop's body for register `r` (`dims`:
  /// the loop dimensions that index it): a fragment's becomes a register
  /// access; another memory's runs under `owner`, where given.
  void lowerRegisterAccess(mlir::Operation *nested, const layout::FragmentLayout &l,
                           llvm::ArrayRef<unsigned> dims, mlir::Value r, mlir::Value owner);
  /// tile.exp2 for register `reg` of an element loop (null outside one):
  /// math.exp2 on the special-function unit, or tilenv.exp2_fma where the
  /// register is one of those the op puts on the FMA pipe. `residue`, where
  /// known, is the register's index modulo the op's fma_every.
  void lowerExp2(tile::Exp2Op op, mlir::Value reg,
                 std::optional<int64_t> residue = std::nullopt);
  void lowerPipelined(tile::PipelinedOp op);
  void lowerRole(tile::RoleOp op);
  void lowerCopyAsync(tile::CopyAsyncOp op);
  /// Issues one TMA box per swizzle panel (and per 256 rows) of a whole
  /// shared buffer, with its descriptor, the rank of a peer tile (null for
  /// this rank's), its shared address and global coordinates; fails at `op`
  /// when TMA cannot move it.
  bool forEachTmaBox(mlir::Operation *op, const Access &global, const Access &shared,
                     llvm::function_ref<void(int64_t, mlir::Value, mlir::Value,
                                             llvm::ArrayRef<mlir::Value>)>
                         issue);
  /// TMA store (or reduce-add) of a whole shared buffer, waited for.
  /// `onlyIf`, when given, predicates the boxes (not their group's commit
  /// and wait, which tessel-defer-bulk-waits then still finds).
  void storeWithTma(mlir::Operation *op, const Access &src, const Access &dst, bool add,
                    mlir::Value onlyIf = {});
  /// A shared-to-global copy by TMA, or by threads where its window may
  /// start before the tensor.
  void storeTileWithTma(tile::CopyOp op, const Access &src, const Access &dst);
  /// The kernel's tensor map of `param` for boxes of `box` (one per rank of
  /// a symmetric tensor with `perRank`), added to tma_descriptors if new.
  int64_t tensorMapIndex(mlir::BlockArgument param, llvm::ArrayRef<int64_t> box, int64_t swizzle,
                         bool perRank = false);
  mlir::Value mbarrierAddress(mlir::Value barriers, mlir::Value index);
  void lowerMbarrier(mlir::Operation *op);
  /// fence.mbarrier_init, and in a cluster kernel a cluster barrier after it.
  void fenceMbarrierInits(tile::FenceMbarrierInitOp op);
  /// tile.signal and tile.wait.
  void lowerFlag(mlir::Operation *op);
  /// A barrier over the threads that run `op`: its tile.role's named
  /// barrier, or __syncthreads outside roles.
  void syncExecutingThreads(mlir::Operation *op);
  /// Tensor memory (sm_100a): checks what tessel-tmem-allocation placed and
  /// adds the shared word tcgen05.alloc writes the base address to.
  mlir::LogicalResult prepareTensorMemory();
  /// Once shared memory is laid out: warp 0 allocates the kernel's columns
  /// at the start (the address published through the word, between
  /// tcgen05 fences and a barrier) and frees them at the end.
  void allocateTensorMemory();
  /// The shared word of the base address (null without tensor memory), and
  /// the base every thread read from it.
  tile::AllocOp tmemBaseWord;
  mlir::Value tmemBase;
  /// The commit mbarrier of each tcgen05 gemm that completes in place and
  /// each tile.mma_wait (an element of one shared buffer), and the phase
  /// every thread waits for next (a local i32 each).
  mlir::Value tcgen05Barriers, tcgen05Phases;
  llvm::DenseMap<mlir::Operation *, int64_t> tcgen05GemmIndex;
  /// Makes threadId/threads those of the tile.role around `op` (or the block).
  void enterRoleOf(mlir::Operation *op);
  void fail(mlir::Operation *op, const llvm::Twine &message);
};

} // namespace tessel

#endif
