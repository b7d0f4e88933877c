//===- TmemLayout.h - Blackwell tensor memory addressing --------*- C++ -*-===//
//
// Tensor memory (TMEM, sm_100a) is 128 lanes x 512 columns of 32 bits per
// CTA. An address is `lane << 16 | column`, columns always counted in 32-bit
// units. tcgen05.ld/st move data between a warp's registers and TMEM in a
// few fixed shapes, each repeated `.num` times along the columns; the maps
// below are the PTX ISA's data-movement tables for them (thread t of the
// warp, register r, base lane L and column C). The rules a compiler must get
// right are here too: allocation sizes, which lanes a warp may touch, where
// each warpgroup's share of a column-split tile starts (in 32-bit columns,
// whatever the element type), and how a column run that is not a power of
// two is issued.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_LAYOUT_TMEMLAYOUT_H
#define TESSEL_LAYOUT_TMEMLAYOUT_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessel::layout {

inline constexpr int kTmemLanes = 128;
inline constexpr int kTmemColumns = 512;

struct TmemCell {
  int lane = 0, column = 0;
  uint32_t address() const { return uint32_t(lane) << 16 | uint32_t(column); }
  bool operator==(const TmemCell &o) const { return lane == o.lane && column == o.column; }
};

/// tcgen05.ld/st data-movement shapes: lanes x bits per access.
enum class TmemShape { s32x32b, s16x64b, s16x128b, s16x256b, s16x32bx2 };
const char *name(TmemShape shape);
/// TMEM lanes one issue covers (32 or 16).
int lanesOf(TmemShape shape);
/// 32-bit columns one repetition (.x1) covers.
int columnsPerRepetition(TmemShape shape);

/// Registers per thread of a `.num` issue, or why the combination is not an
/// instruction (num a power of two in [1, 128], at most 128 registers).
std::optional<int> registersPerThread(TmemShape shape, int num, std::string *why = nullptr);

/// The cell register `reg` of warp thread `thread` moves, for an issue at
/// base (lane, column); `offset` is the .16x32bx2 immediate (in columns).
TmemCell tmemCell(TmemShape shape, int thread, int reg, TmemCell base, int offset = 0);

/// Columns to allocate for `columns` needed: a power of two in [32, 512];
/// nothing (and why) when more than 512 are needed.
std::optional<int> tmemAllocationColumns(int columns, std::string *why = nullptr);

/// Warp w of a warpgroup reaches only lanes [32 * (w % 4), +32).
bool warpReachesLane(int warp, int lane);

/// Where warpgroup `group` of `groups` starts on a [128, values] tile split
/// by columns, in 32-bit columns. `elementBits` 32, or 16 with `packed`
/// (two values per column, the operand format of tcgen05.mma) or unpacked
/// (one value per column, the 16-bit accumulator format).
int warpgroupColumnOffset(int group, int groups, int values, int elementBits, bool packed);

/// A run of `columns` 32-bit columns as power-of-two issues, largest first
/// (48 = 32 + 16), each with its first column and its first register: the
/// register pointer advances by whole 32-bit registers, `registersPerColumn`
/// per column of the shape's x1 (1 for .32x32b).
struct TmemIssue {
  int num, column, firstRegister;
};
std::vector<TmemIssue> splitColumnRun(TmemShape shape, int columns);

/// Why (m, n) is not a shape of tcgen05.mma.cta_group::1 (m 64 or 128, n 8
/// .. 256 in steps of 8), or "" when it is.
std::string tcgen05ShapeError(int m, int n);

/// The kinds of tcgen05.mma by operand type: kind::f16 (f16, bf16),
/// kind::f8f6f4 (e4m3, e5m2) and kind::i8 (s8, u8), and the block-scaled
/// kind::mxf8f6f4 (e4m3, e5m2 with a ue8m0 scale per 32 of K). An
/// instruction reads 32 bytes of K: 16 values of 16 bits, 32 of 8.
enum class Tcgen05Kind { f16, f8f6f4, i8, mxf8f6f4 };
/// The instruction descriptor's type fields: A and B (bits 7-9, 10-12:
/// kind::f16 f16 0 bf16 1; kind::f8f6f4 e4m3 0 e5m2 1; kind::i8 u8 0 s8 1)
/// and D (bits 4-5: f16 0, f32 1, s32 2).
struct Tcgen05Formats {
  Tcgen05Kind kind;
  int a, b, d;
};
/// The PTX spelling of a kind ("f16", "f8f6f4", "i8").
const char *name(Tcgen05Kind kind);

/// The 32-bit instruction descriptor of a tcgen05.mma (the PTX ISA's
/// instruction-descriptor table for kind::f16, f8f6f4 and i8): the formats,
/// MN-major A and B in bits 15 and 16, n >> 3 in 17-22 and m >> 4 in 24-28.
/// kind::mxf8f6f4 has no D format (f32 always): bits 4-5 and 29-30 are B's
/// and A's scale-factor ids (the byte of each scale column, 0 here) and bit
/// 23 says ue8m0 scales.
uint32_t tcgen05InstrDescriptor(int m, int n, Tcgen05Formats formats, bool transposeA,
                                bool transposeB);
/// The kind::f16 descriptor of f16 or bf16 operands.
uint32_t tcgen05InstrDescriptor(int m, int n, bool bf16, bool f32Accumulator, bool transposeA,
                                bool transposeB);

/// The 64-bit shared-memory matrix descriptor of sm_100: start address,
/// leading and stride byte offsets, each >> 4, in bits 0-13, 16-29 and
/// 32-45; version 1 in bits 46-48; the swizzle in bits 61-63 (none 0,
/// 128 bytes 2, 64 bytes 4, 32 bytes 6). Nothing for another swizzle.
std::optional<uint64_t> tcgen05SmemDescriptor(uint32_t address, int64_t leadingBytes,
                                              int64_t strideBytes, int swizzleBytes);

} // namespace tessel::layout

#endif
