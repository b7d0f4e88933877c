//===- LowerTcgen05.cpp - tile ops on tensor memory as tcgen05 ------------===//
//
// Part of tessel-lower-tile-ops (sm_100a). Tensor memory is the block's
// 128 lanes x 512 32-bit columns; tessel-tmem-allocation placed each buffer
// at a column and recorded, on every copy and fill, the step between
// warpgroups' column shares. Here each access becomes addresses and
// instructions:
//
//  - A copy between a [128, n] tensor-memory tile and a fragment (the
//    .32x32b layout: thread = lane = row, register = column) is
//    tcgen05.ld/st .32x32b by every warp at lane 32 * (warp % 4) and column
//    `first + group * tmem_group_columns`, the warpgroup's share split into
//    power-of-two issues. A copy to or from shared or global memory goes
//    through registers the same way, 32 at a time (not tcgen05.cp). tcgen05.wait::ld/st completes the warp's part and
//    tcgen05.fence::before_thread_sync orders it before the barrier
//    tessel-insert-barriers puts between it and a later MMA.
//  - A gemm into tensor memory is tcgen05.mma.cta_group::1 from
//    shared-memory descriptors, of the operands' kind (kind::f16, f8f6f4 or
//    i8), issued by the first thread of the code that runs it, one per 32
//    bytes of K (D overwritten on the first when the gemm
//    clears it); tcgen05.commit arrives on the gemm's own mbarrier and every
//    thread waits for its phase, then fences (fence::after_thread_sync), so
//    the gemm is complete when the tile op is, as wgmma's is. An
//    `issue_only` gemm (warp-specialized loops) stops after the issue: a
//    tile.mma_commit releases its operands' stage by tcgen05.commit, and a
//    tile.mma_wait completes everything issued, as above.
//
//===----------------------------------------------------------------------===//
#include "TileLowering.h"
#include "tessel/Layout/TmemLayout.h"
#include "tessel/Transforms/BufferUtils.h"

using namespace mlir;
using namespace tessel;
using namespace tessel::tile;

bool TileLowering::touchesTmem(Operation *op) {
  return llvm::any_of(op->getOperands(), [](Value v) {
    auto type = llvm::dyn_cast<MemRefType>(v.getType());
    return type && getMemorySpace(type) == MemorySpace::tmem;
  });
}

std::optional<TileLowering::TmemView> TileLowering::resolveTmem(Operation *op, Value view) {
  TmemView t;
  auto viewType = llvm::cast<MemRefType>(view.getType());
  t.element = viewType.getElementType();
  t.values = viewType.getShape().back();
  t.column = zeroIdx;
  Value root = view;
  while (auto region = root.getDefiningOp<RegionOp>()) {
    if (region.getOffsets().size() != 2 || region.getSizes().size() != 2) {
      fail(op, "tensor-memory views keep both dimensions (lanes, columns)");
      return std::nullopt;
    }
    t.column = add(t.column, region.getOffsets()[1]);
    root = region.getSource();
  }
  // An alias starts at its source's first column.
  if (auto alias = root.getDefiningOp<TmemAliasOp>()) root = alias.getSource();
  t.alloc = root.getDefiningOp<AllocOp>();
  if (!t.alloc || !t.alloc.getOffset()) {
    fail(op, "tensor-memory buffer has no column; run tessel-tmem-allocation");
    return std::nullopt;
  }
  t.packed = t.element.getIntOrFloatBitWidth() == 16 && !t.alloc.getUnpacked();
  return t;
}

Value TileLowering::tmemAddress(const TmemView &view, Value lane, Value valueOffset) {
  // Columns are 32-bit: a packed 16-bit value is half of one.
  Value values = add(view.column, valueOffset);
  Value columns = view.packed ? divC(values, 2) : values;
  int64_t first = *const_cast<AllocOp &>(view.alloc).getOffset();
  Value offset = add(add(mul(lane, idx(1 << 16)), idx(first)), columns);
  Value offset32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), offset);
  return arith::AddIOp::create(b, loc, tmemBase, offset32);
}

Value TileLowering::warpTmemAddress(const TmemView &view, int64_t groupColumns) {
  // Warp w reaches lanes 32 * (w % 4) ..; warpgroup g starts g steps on.
  Value warp = divC(threadId, 32);
  Value first = tmemAddress(view, mul(remC(warp, 4), idx(32)), zeroIdx);
  Value step = arith::IndexCastOp::create(b, loc, b.getI32Type(), mul(divC(warp, 4), idx(groupColumns)));
  return arith::AddIOp::create(b, loc, first, step);
}

void TileLowering::moveTmemRuns(bool load, Value address, Value regs, int64_t registers,
                                bool halves, int64_t widest) {
  // .32x32b moves one register per column, or two columns per register in
  // the .pack::16b/.unpack::16b forms; runs are split into power-of-two
  // issues of at most `widest` registers (the register pointer advances by
  // whole registers, the address by their columns). A `widest` run of
  // registers is reused by every issue when `registers` is larger (a fill).
  int64_t columnsPerRegister = halves ? 2 : 1;
  for (int64_t first = 0; first < registers; first += widest) {
    int64_t run = std::min(widest, registers - first);
    for (layout::TmemIssue issue :
         layout::splitColumnRun(layout::TmemShape::s32x32b, static_cast<int>(run))) {
      // Within the run: a copy has one run of all its registers, a fill
      // reuses its run.
      int64_t reg = issue.firstRegister;
      Value at = arith::AddIOp::create(
          b, loc, address,
          arith::ConstantIntOp::create(b, loc, b.getI32Type(),
                                       (first + issue.firstRegister) * columnsPerRegister));
      if (load)
        tilenv::Tcgen05LdOp::create(b, loc, at, regs, idx(reg), tilenv::TmemShape::s32x32b,
                                    issue.num, halves, IntegerAttr());
      else
        tilenv::Tcgen05StOp::create(b, loc, regs, idx(reg), at, tilenv::TmemShape::s32x32b,
                                    issue.num, halves, IntegerAttr());
    }
  }
  if (load) tilenv::Tcgen05WaitLdOp::create(b, loc);
  else tilenv::Tcgen05WaitStOp::create(b, loc);
  // Ordered before the barrier that hands the columns (or the registers'
  // values) on, as the PTX ISA's tcgen05 memory model asks.
  tilenv::Tcgen05FenceBeforeOp::create(b, loc);
}

void TileLowering::moveTmemValues(bool load, const TmemView &view, Value address, Value values,
                                  int64_t count) {
  if (view.element.getIntOrFloatBitWidth() == 32)
    return moveTmemRuns(load, address, values, count, false, count);
  // 16-bit values travel in pairs, value 2w and 2w + 1 in word w: one
  // column (packed) or two with .pack/.unpack::16b.
  int64_t words = count / 2;
  Value pairs = allocLocal(words, b.getI32Type());
  if (!load)
    unrolledFor(words, [&](Value w) {
      Value lo = memref::LoadOp::create(b, loc, values, ValueRange{mul(w, idx(2))});
      Value hi = memref::LoadOp::create(b, loc, values, ValueRange{add(mul(w, idx(2)), idx(1))});
      Value packed = tilenv::PackPairOp::create(b, loc, b.getI32Type(), lo, hi);
      memref::StoreOp::create(b, loc, packed, pairs, ValueRange{w});
    });
  moveTmemRuns(load, address, pairs, words, !view.packed, words);
  if (load)
    unrolledFor(words, [&](Value w) {
      Value packed = memref::LoadOp::create(b, loc, pairs, ValueRange{w});
      auto halves = tilenv::UnpackPairOp::create(b, loc, view.element, view.element, packed);
      memref::StoreOp::create(b, loc, halves.getLo(), values, ValueRange{mul(w, idx(2))});
      memref::StoreOp::create(b, loc, halves.getHi(), values, ValueRange{add(mul(w, idx(2)), idx(1))});
    });
}

/// Whether the threads running `op` are whole warpgroups, as copies and
/// fills between tensor memory and registers need (each warp reaches its
/// quarter of the 128 lanes); fails `op` otherwise.
bool TileLowering::wholeWarpgroupsReachTmem(Operation *op) {
  if (threads >= 128 && threads % 128 == 0) return true;
  fail(op, "tensor memory is reached by whole warpgroups (each warp its quarter of the 128 "
           "lanes); this code runs on " + std::to_string(threads) + " threads");
  return false;
}

void TileLowering::copyTmem(CopyOp op) {
  bool load = getMemorySpace(llvm::cast<MemRefType>(op.getSource().getType())) == MemorySpace::tmem;
  Value tmem = load ? op.getSource() : op.getDest();
  if (!wholeWarpgroupsReachTmem(op)) return;
  std::optional<TmemView> view = resolveTmem(op, tmem);
  if (!view) return;
  auto step = op->getAttrOfType<IntegerAttr>("tmem_group_columns");
  if (!step) return fail(op, "tensor-memory copy has no column step; run tessel-tmem-allocation");
  int64_t share = view->values / (threads / 128);
  Value address = warpTmemAddress(*view, step.getInt());
  Access other = resolve(load ? op.getDest() : op.getSource());
  if (other.isFragment()) {
    // The fragment's .32x32b layout: register r is column r of the share.
    if (other.elementType != view->element)
      return fail(op, "a tensor-memory copy to or from a fragment does not convert: the "
                      "fragment holds the buffer's type, converted in registers before or after");
    return moveTmemValues(load, *view, address, other.root, share);
  }

  // Shared or global memory, through registers: each thread moves its row
  // (its TMEM lane) of its warpgroup's share, 32 registers at a time, with
  // the element type converted on the memory side.
  Value warp = divC(threadId, 32);
  Value row = add(mul(remC(warp, 4), idx(32)), remC(threadId, 32));
  Value firstColumn = mul(divC(warp, 4), idx(share));
  bool halves = view->element.getIntOrFloatBitWidth() == 16;
  int64_t chunk = std::min<int64_t>(share, halves ? 64 : 32);
  Value regs = allocLocal(chunk, view->element);
  for (int64_t at = 0; at < share; at += chunk) {
    Value chunkAddress = arith::AddIOp::create(
        b, loc, address,
        arith::ConstantIntOp::create(b, loc, b.getI32Type(), view->packed ? at / 2 : at));
    auto column = [&](Value i) { return add(add(firstColumn, idx(at)), i); };
    if (!load)
      unrolledFor(chunk, [&](Value i) {
        Value v = convert(this->load(other, ValueRange{row, column(i)}), view->element);
        memref::StoreOp::create(b, loc, v, regs, ValueRange{i});
      });
    moveTmemValues(load, *view, chunkAddress, regs, chunk);
    if (load)
      unrolledFor(chunk, [&](Value i) {
        Value v = memref::LoadOp::create(b, loc, regs, ValueRange{i});
        store(other, ValueRange{row, column(i)}, convert(v, other.elementType));
      });
  }
}

void TileLowering::fillTmem(FillOp op) {
  if (!wholeWarpgroupsReachTmem(op)) return;
  std::optional<TmemView> view = resolveTmem(op, op.getDest());
  if (!view) return;
  auto step = op->getAttrOfType<IntegerAttr>("tmem_group_columns");
  if (!step) return fail(op, "tensor-memory fill has no column step; run tessel-tmem-allocation");
  int64_t share = view->values / (threads / 128);
  bool halves = view->element.getIntOrFloatBitWidth() == 16;
  // One run of at most 32 registers holding the value (a pair of it for
  // 16-bit values), stored by every issue: a .x128 store of a constant
  // would hold 128 registers.
  int64_t registers = halves ? share / 2 : share;
  int64_t widest = std::min<int64_t>(32, registers);
  Value value = convert(op.getValue(), view->element);
  Value word = halves ? tilenv::PackPairOp::create(b, loc, b.getI32Type(), value, value).getResult()
                      : value;
  Value regs = allocLocal(widest, word.getType());
  unrolledFor(widest, [&](Value r) { memref::StoreOp::create(b, loc, word, regs, ValueRange{r}); });
  moveTmemRuns(false, warpTmemAddress(*view, step.getInt()), regs, registers,
               halves && !view->packed, widest);
}

void TileLowering::lowerTcgen05Gemm(GemmOp op) {
  std::optional<TmemView> c = resolveTmem(op, op.getC());
  if (!c) return;
  // A from shared memory through descriptors (ss), or from tensor memory
  // (ts: row m in lane m, K packed along the columns).
  std::optional<TmemView> aTmem;
  if (getMemorySpace(llvm::cast<MemRefType>(op.getA().getType())) == MemorySpace::tmem) {
    aTmem = resolveTmem(op, op.getA());
    if (!aTmem) return;
  }
  Access a = aTmem ? Access{} : resolve(op.getA()), bOp = resolve(op.getB());
  std::optional<layout::SharedLayout> la =
      aTmem ? std::optional<layout::SharedLayout>() : descriptorLayout(op, a, "A");
  std::optional<layout::SharedLayout> lb = descriptorLayout(op, bOp, "B");
  if ((!aTmem && !la) || !lb) return;
  int64_t n = c->values;
  auto aType = llvm::cast<MemRefType>(op.getA().getType());
  int64_t k = op.getTransposeA() ? aType.getDimSize(0) : aType.getDimSize(1);
  Type operandType = aType.getElementType();
  bool aMnMajor = op.getTransposeA(), bMnMajor = !op.getTransposeB();
  const bool scaled = static_cast<bool>(op.getScaleA());
  std::string why;
  std::optional<layout::Tcgen05Formats> formats =
      tilenv::tcgen05Formats(operandType, c->element, why, scaled);
  if (!formats) return fail(op, why);
  // One instruction reads 32 bytes of K.
  int64_t kStep = 32 / (operandType.getIntOrFloatBitWidth() / 8);
  tilenv::Tcgen05Kind kind = tilenv::toDialect(formats->kind);
  std::optional<BlockScaleColumns> scales;
  if (scaled && !(scales = blockScaleColumns(op, n))) return;

  // Ordered after the barrier that published the operands and the
  // accumulator's earlier readers.
  tilenv::Tcgen05FenceAfterOp::create(b, loc);
  {
    OpBuilder::InsertionGuard g(b);
    guard(eq(threadId, zeroIdx));
    Value idesc = tilenv::Tcgen05InstrDescOp::create(
        b, loc, b.getI32Type(), b.getI64IntegerAttr(128), b.getI64IntegerAttr(n),
        TypeAttr::get(operandType), TypeAttr::get(c->element),
        aMnMajor ? b.getUnitAttr() : UnitAttr(), bMnMajor ? b.getUnitAttr() : UnitAttr(),
        scaled ? b.getUnitAttr() : UnitAttr());
    Value d = tmemAddress(*c, zeroIdx, zeroIdx);
    if (scales) copyBlockScales(op, *scales, k / 128);
    Value always = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
    unrolledFor(k / kStep, [&](Value step) {
      Value k0 = mul(step, idx(kStep));
      Value accumulate =
          op.getClearAccum()
              ? arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, step, idx(0)).getResult()
              : always;
      Value descA = aTmem ? tmemAddress(*aTmem, zeroIdx, k0)
                    : aMnMajor ? operandDescriptor(a, *la, true, k0, zeroIdx, true)
                               : operandDescriptor(a, *la, false, zeroIdx, k0, true);
      Value descB = bMnMajor ? operandDescriptor(bOp, *lb, true, k0, zeroIdx, true)
                             : operandDescriptor(bOp, *lb, false, zeroIdx, k0, true);
      if (!scales) {
        tilenv::Tcgen05MmaOp::create(b, loc, d, descA, descB, idesc, accumulate, Value(), Value(),
                                     kind);
        return;
      }
      // K step s reads byte s % 4 of its group's scale columns (group s / 4,
      // 4 columns of A's scales, 4 a 128-column atom of B's).
      Value group = divC(step, 4), id = i32(remC(step, 4));
      Value scaleA = add32(tmemBase, i32(add(idx(scales->aColumn), mul(group, idx(4)))));
      Value scaleB = add32(tmemBase, i32(add(idx(scales->bColumn),
                                             mul(group, idx(4 * scales->bAtoms)))));
      Value ids = arith::OrIOp::create(b, loc, shl32(id, 29), shl32(id, 4));
      Value stepDesc = arith::OrIOp::create(b, loc, idesc, ids);
      tilenv::Tcgen05MmaOp::create(b, loc, d, descA, descB, stepDesc, accumulate, scaleA, scaleB,
                                   kind);
    });
  }
  if (!op.getIssueOnly()) completeMmas(op);
}

Value TileLowering::i32(Value index) {
  return arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
}
Value TileLowering::add32(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
Value TileLowering::shl32(Value x, int64_t bits) {
  return arith::ShLIOp::create(b, loc, x, arith::ConstantIntOp::create(b, loc, b.getI32Type(), bits));
}

std::optional<TileLowering::BlockScaleColumns> TileLowering::blockScaleColumns(GemmOp op,
                                                                               int64_t n) {
  auto a = op->getAttrOfType<IntegerAttr>("scale_a_column");
  auto bColumn = op->getAttrOfType<IntegerAttr>("scale_b_column");
  if (!a || !bColumn) {
    fail(op, "block scales have no tensor-memory columns; run tessel-tmem-allocation");
    return std::nullopt;
  }
  return BlockScaleColumns{a.getInt(), bColumn.getInt(), (n + 127) / 128};
}

void TileLowering::copyBlockScales(GemmOp op, const BlockScaleColumns &columns, int64_t groups) {
  // Each 512-byte atom (128 rows x 4 K blocks) is one tcgen05.cp
  // .32x128b.warpx4: 32 rows of 16 bytes, 16 bytes apart (a canonical
  // layout without swizzle: rows 16 B apart in 8-row core matrices 128 B
  // apart), into lanes 0-31 of 4 columns and copied to every lane quarter,
  // so that row r's scale lands in lane r % 32 (+ 32 w), column r / 32,
  // byte j. Issued by the MMA thread, so the MMAs after it read them.
  Access sa = resolve(op.getScaleA()), sb = resolve(op.getScaleB());
  auto copyAtom = [&](const Access &from, int64_t atom, int64_t column) {
    Value start = sharedAddress(from, idx(atom * 512));
    Value desc = tilenv::Tcgen05SmemDescOp::create(b, loc, b.getI64Type(), start, 16, 128, 0);
    tilenv::Tcgen05CpOp::create(b, loc, desc, add32(tmemBase, i32(idx(column))),
                                tilenv::TmemCopyShape::s32x128b_warpx4);
  };
  for (int64_t g = 0; g < groups; ++g) {
    copyAtom(sa, g, columns.aColumn + 4 * g);
    for (int64_t j = 0; j < columns.bAtoms; ++j)
      copyAtom(sb, g * columns.bAtoms + j, columns.bColumn + 4 * (g * columns.bAtoms + j));
  }
}

void TileLowering::completeMmas(Operation *op) {
  // The issuing thread commits its MMAs to the op's barrier; every thread
  // waits for that phase, flips its copy of the parity and fences, so that
  // tcgen05.ld of the result comes after.
  int64_t index = tcgen05GemmIndex.lookup(op);
  Value barrier = sharedAddress(resolve(tcgen05Barriers), idx(index));
  {
    OpBuilder::InsertionGuard g(b);
    guard(eq(threadId, zeroIdx));
    tilenv::Tcgen05CommitOp::create(b, loc, barrier);
  }
  Value slot = idx(index);
  Value phases = storage.lookup(tcgen05Phases).first;
  Value phase = memref::LoadOp::create(b, loc, phases, ValueRange{slot});
  tilenv::MbarrierWaitOp::create(b, loc, barrier,
                                 arith::IndexCastOp::create(b, loc, b.getIndexType(), phase));
  Value flipped = arith::XOrIOp::create(b, loc, phase,
                                        arith::ConstantIntOp::create(b, loc, b.getI32Type(), 1));
  memref::StoreOp::create(b, loc, flipped, phases, ValueRange{slot});
  tilenv::Tcgen05FenceAfterOp::create(b, loc);
}

void TileLowering::lowerMmaCommit(MmaCommitOp op) {
  OpBuilder::InsertionGuard g(b);
  Value barrier = mbarrierAddress(op.getBarriers(), op.getIndex());
  guard(eq(threadId, zeroIdx));
  tilenv::Tcgen05CommitOp::create(b, loc, barrier);
}
