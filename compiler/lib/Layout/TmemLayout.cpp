//===- TmemLayout.cpp - Blackwell tensor memory addressing ----------------===//
#include "tessel/Layout/TmemLayout.h"

#include "llvm/Support/MathExtras.h"

using namespace tessel::layout;

const char *tessel::layout::name(TmemShape shape) {
  switch (shape) {
  case TmemShape::s32x32b: return "32x32b";
  case TmemShape::s16x64b: return "16x64b";
  case TmemShape::s16x128b: return "16x128b";
  case TmemShape::s16x256b: return "16x256b";
  case TmemShape::s16x32bx2: return "16x32bx2";
  }
  return "?";
}

int tessel::layout::lanesOf(TmemShape shape) { return shape == TmemShape::s32x32b ? 32 : 16; }

int tessel::layout::columnsPerRepetition(TmemShape shape) {
  switch (shape) {
  case TmemShape::s16x64b: return 2;  // 16 lanes x 64 bits
  case TmemShape::s16x128b: return 4;
  case TmemShape::s16x256b: return 8;
  default: return 1; // .32x32b, .16x32bx2: one column per access
  }
}

/// Registers per thread of one repetition: the shape's bits over 32 threads.
static int registersPerRepetition(TmemShape shape) {
  return lanesOf(shape) * columnsPerRepetition(shape) * (shape == TmemShape::s16x32bx2 ? 2 : 1) /
         32;
}

std::optional<int> tessel::layout::registersPerThread(TmemShape shape, int num, std::string *why) {
  if (num < 1 || num > 128 || !llvm::isPowerOf2_32(num)) {
    if (why) *why = "`.num` is x1 to x128, a power of two; got x" + std::to_string(num);
    return std::nullopt;
  }
  int registers = registersPerRepetition(shape) * num;
  if (registers > 128) {
    if (why)
      *why = std::string(".") + name(shape) + ".x" + std::to_string(num) + " would take " +
             std::to_string(registers) + " registers per thread; at most 128";
    return std::nullopt;
  }
  return registers;
}

TmemCell tessel::layout::tmemCell(TmemShape shape, int t, int reg, TmemCell base, int offset) {
  int perRep = registersPerRepetition(shape);
  int rep = reg / perRep, r = reg % perRep;
  int column = base.column + rep * columnsPerRepetition(shape);
  switch (shape) {
  case TmemShape::s32x32b: return {base.lane + t, column};
  case TmemShape::s16x64b: return {base.lane + 8 * (t % 2) + t / 4, column + (t / 2) % 2};
  case TmemShape::s16x128b: return {base.lane + t / 4 + 8 * r, column + t % 4};
  case TmemShape::s16x256b:
    // r0, r1 at lane t/4; r2, r3 eight lanes below; two adjacent columns.
    return {base.lane + t / 4 + 8 * (r / 2), column + 2 * (t % 4) + r % 2};
  case TmemShape::s16x32bx2:
    return {base.lane + t % 16, column + (t < 16 ? 0 : offset)};
  }
  return base;
}

std::optional<int> tessel::layout::tmemAllocationColumns(int columns, std::string *why) {
  if (columns > kTmemColumns || columns < 1) {
    if (why)
      *why = "tensor memory holds 512 columns per CTA; " + std::to_string(columns) +
             " were asked for";
    return std::nullopt;
  }
  return std::max<int>(32, static_cast<int>(llvm::PowerOf2Ceil(columns)));
}

bool tessel::layout::warpReachesLane(int warp, int lane) { return lane / 32 == warp % 4; }

int tessel::layout::warpgroupColumnOffset(int group, int groups, int values, int elementBits,
                                          bool packed) {
  int share = values / groups; // values per warpgroup
  // Two 16-bit values share a column when packed; one column each otherwise.
  if (elementBits == 16 && packed) return group * share / 2;
  return group * share;
}

std::vector<TmemIssue> tessel::layout::splitColumnRun(TmemShape shape, int columns) {
  std::vector<TmemIssue> issues;
  int perRep = columnsPerRepetition(shape), column = 0, reg = 0;
  int reps = columns / perRep;
  while (reps > 0) {
    int num = 1 << llvm::Log2_32(static_cast<unsigned>(std::min(reps, 128)));
    issues.push_back({num, column, reg});
    column += num * perRep;
    reg += num * registersPerRepetition(shape);
    reps -= num;
  }
  return issues;
}

std::string tessel::layout::tcgen05ShapeError(int m, int n) {
  if (m != 64 && m != 128)
    return "m=" + std::to_string(m) + ": cta_group::1 MMAs are 64 or 128 rows";
  if (n < 8 || n > 256 || n % 8)
    return "n=" + std::to_string(n) + ": cta_group::1 MMAs are 8 to 256 columns in steps of 8";
  return "";
}

const char *tessel::layout::name(Tcgen05Kind kind) {
  switch (kind) {
  case Tcgen05Kind::f16: return "f16";
  case Tcgen05Kind::f8f6f4: return "f8f6f4";
  case Tcgen05Kind::i8: return "i8";
  case Tcgen05Kind::mxf8f6f4: return "mxf8f6f4";
  }
  return "";
}

uint32_t tessel::layout::tcgen05InstrDescriptor(int m, int n, Tcgen05Formats formats,
                                                bool transposeA, bool transposeB) {
  uint32_t d = 0;
  if (formats.kind == Tcgen05Kind::mxf8f6f4) d |= uint32_t(1) << 23; // ue8m0 scales
  else d |= uint32_t(formats.d & 3) << 4;
  d |= uint32_t(formats.a & 7) << 7;
  d |= uint32_t(formats.b & 7) << 10;
  d |= uint32_t(transposeA) << 15;
  d |= uint32_t(transposeB) << 16;
  d |= uint32_t(n >> 3) << 17;
  d |= uint32_t(m >> 4) << 24;
  return d;
}

uint32_t tessel::layout::tcgen05InstrDescriptor(int m, int n, bool bf16, bool f32Accumulator,
                                                bool transposeA, bool transposeB) {
  int type = bf16 ? 1 : 0;
  return tcgen05InstrDescriptor(m, n, {Tcgen05Kind::f16, type, type, f32Accumulator ? 1 : 0},
                                transposeA, transposeB);
}

std::optional<uint64_t> tessel::layout::tcgen05SmemDescriptor(uint32_t address,
                                                              int64_t leadingBytes,
                                                              int64_t strideBytes,
                                                              int swizzleBytes) {
  uint64_t swizzle;
  switch (swizzleBytes) {
  case 0: swizzle = 0; break;
  case 128: swizzle = 2; break;
  case 64: swizzle = 4; break;
  case 32: swizzle = 6; break;
  default: return std::nullopt;
  }
  auto field = [](uint64_t bytes) { return (bytes & 0x3FFFF) >> 4; };
  return field(address) | field(leadingBytes) << 16 | field(strideBytes) << 32 | uint64_t(1) << 46 |
         swizzle << 61;
}
