// Blackwell's tensor memory and tcgen05 instructions in software, for the
// sm_100a-emu target: kernels lowered for sm_100a run on an sm_90a GPU with
// each tcgen05 op a call into this header (included after tessel_device.h).
//
// Tensor memory is an image in global memory, 128 lanes x 512 32-bit
// columns per SM (as on the hardware, blocks resident on one SM share it):
// tcgen05.alloc takes an aligned power-of-two run of columns from its SM's
// 512 and waits while there is none, dealloc gives them back. ld/st move
// cells by the PTX ISA's data-movement tables and trap (with a report the
// host prints) when a warp touches a lane outside its quarter or a column
// outside its block's allocation. mma decodes both shared-memory
// descriptors and the instruction descriptor, so their encodings are
// checked too, and computes D in fp32 in the issuing thread; commit then
// arrives on the mbarrier. Everything is synchronous: the emulation vouches
// for addresses, layouts and synchronisation points, not for timing.
//
// The tables (TESSEL_EMU_TABLES) are plain functions, also compiled on the
// host by the unit tests; they are written from the ISA's tables, apart from
// the compiler's own (compiler/include/tessel/Layout/TmemLayout.h).
#pragma once

#ifndef TESSEL_EMU_HD
#define TESSEL_EMU_HD __device__
#endif

namespace tessel {
namespace emu {

// ---- TESSEL_EMU_TABLES --------------------------------------------------

enum Shape { s32x32b = 0, s16x64b = 1, s16x128b = 2, s16x256b = 3, s16x32bx2 = 4 };

/// 32-bit registers one repetition (.x1) of a shape moves per thread.
TESSEL_EMU_HD inline int registers_per_repetition(int shape) {
  return shape == s16x128b ? 2 : shape == s16x256b ? 4 : 1;
}
/// Columns one repetition covers.
TESSEL_EMU_HD inline int columns_per_repetition(int shape) {
  return shape == s32x32b ? 1 : shape == s16x64b ? 2 : shape == s16x128b ? 4
       : shape == s16x256b ? 8 : 1;
}

/// Lane and column of register `reg` of warp thread `t` (0..31) for an
/// access at lane `lane0`, column `column0` (the PTX ISA's data-movement
/// shape tables for tcgen05.ld/st); repetitions step along the columns.
struct Cell {
  int lane, column;
};
TESSEL_EMU_HD inline Cell cell(int shape, int t, int reg, int lane0, int column0, int offset) {
  int per = registers_per_repetition(shape);
  int repetition = reg / per, r = reg % per;
  int column = column0 + repetition * columns_per_repetition(shape);
  Cell c = {lane0, column};
  switch (shape) {
  case s32x32b: // one row per thread, one column per register
    c.lane = lane0 + t;
    break;
  case s16x64b: // 16 lanes x 2 columns: pairs of threads split the rows' halves
    c.lane = lane0 + (t / 4) + 8 * (t % 2);
    c.column = column + (t / 2) % 2;
    break;
  case s16x128b: // 16 lanes x 4 columns: the upper 8 lanes in the second register
    c.lane = lane0 + t / 4 + 8 * r;
    c.column = column + t % 4;
    break;
  case s16x256b: // the mma.sync m16n8 accumulator: c0 c1 at row t/4, c2 c3 eight below
    c.lane = lane0 + t / 4 + 8 * (r / 2);
    c.column = column + 2 * (t % 4) + r % 2;
    break;
  case s16x32bx2: // half-warps on two column bases
    c.lane = lane0 + t % 16;
    c.column = column + (t < 16 ? 0 : offset);
    break;
  }
  return c;
}

/// Swizzled byte address of a canonical shared-memory layout: the 16-byte
/// chunk bits [4, 7) take an XOR of the 128-byte row bits [7, 10) (128 B),
/// two of them (64 B) or one (32 B); the hardware applies it to the final
/// address, which is why swizzled operands start on 1024 bytes.
TESSEL_EMU_HD inline unsigned swizzle_address(unsigned address, int mode) {
  unsigned mask = mode == 2 ? 7u : mode == 4 ? 3u : mode == 6 ? 1u : 0u;
  return address ^ (((address >> 7) & mask) << 4);
}

/// Byte address (before the swizzle) of element (mn, k) of an operand of
/// `bytes`-byte elements (2 for kind::f16, 1 for kind::f8f6f4 and i8)
/// described by a tcgen05 shared-memory descriptor: start, leading and
/// stride byte offsets, swizzle mode (0 none, 2 128 B, 4 64 B, 6 32 B),
/// K-major (K contiguous) or MN-major. The canonical layouts, with T =
/// 16 / bytes elements (16 bytes) and S the swizzle width in bytes:
///   K-major, swizzled:  rows S bytes apart in 8-row groups SBO apart, K contiguous
///   K-major, none:      8 x 16-byte core matrices, rows 16 B apart, LBO along K, SBO along MN
///   MN-major, swizzled: S / bytes elements along MN contiguous, panels LBO apart along MN,
///                       K rows S bytes apart in 8-row groups SBO apart
///   MN-major, none:     T along MN contiguous, groups SBO apart; K rows 16 B apart,
///                       8-row groups LBO apart
TESSEL_EMU_HD inline unsigned operand_address(unsigned start, unsigned lbo, unsigned sbo, int mode,
                                              bool mn_major, int mn, int k, int bytes = 2) {
  unsigned s = mode == 2 ? 128u : mode == 4 ? 64u : mode == 6 ? 32u : 0u;
  unsigned t = 16u / bytes, a;
  if (!mn_major) {
    if (s) a = start + (mn / 8) * sbo + (mn % 8) * s + k * bytes;
    else a = start + (mn / 8) * sbo + (k / t) * lbo + (mn % 8) * 16 + (k % t) * bytes;
  } else {
    if (s) {
      unsigned panel = s / bytes;
      a = start + (mn / panel) * lbo + (k / 8) * sbo + (k % 8) * s + (mn % panel) * bytes;
    } else {
      a = start + (mn / t) * sbo + (k / 8) * lbo + (k % 8) * 16 + (mn % t) * bytes;
    }
  }
  return swizzle_address(a, static_cast<int>(mode));
}

/// The tcgen05.mma kinds, as the compiler numbers them (tilenv::Tcgen05Kind).
enum Kind { kind_f16 = 0, kind_f8f6f4 = 1, kind_i8 = 2, kind_mxf8f6f4 = 3 };
/// The tcgen05.cp shapes, as the compiler numbers them (tilenv::TmemCopyShape).
enum CopyShape { cp_128x256b = 0, cp_4x256b = 1, cp_128x128b = 2, cp_32x128b_warpx4 = 3 };

/// Bytes of an operand element and K of one instruction (32 bytes of K).
TESSEL_EMU_HD constexpr int operand_bytes(int kind) { return kind == kind_f16 ? 2 : 1; }
TESSEL_EMU_HD constexpr int instruction_k(int kind) { return 32 / operand_bytes(kind); }

/// The fields of an instruction descriptor. kind::mxf8f6f4 has no D type:
/// bits 4-5 are B's scale-factor id, 29-30 A's, bit 23 says ue8m0 scales.
struct InstrDesc {
  int d_type, a_type, b_type; // D: 0 f16, 1 f32, 2 s32; A, B: the kind's formats
  bool a_mn_major, b_mn_major;
  int m, n;
  int a_scale_id, b_scale_id;
  bool ue8m0_scales;
};
TESSEL_EMU_HD inline InstrDesc decode_instr_desc(unsigned d) {
  InstrDesc x;
  x.d_type = (d >> 4) & 3;
  x.b_scale_id = (d >> 4) & 3;
  x.a_scale_id = (d >> 29) & 3;
  x.ue8m0_scales = (d >> 23) & 1;
  x.a_type = (d >> 7) & 7;
  x.b_type = (d >> 10) & 7;
  x.a_mn_major = (d >> 15) & 1;
  x.b_mn_major = (d >> 16) & 1;
  x.n = static_cast<int>((d >> 17) & 0x3F) << 3;
  x.m = static_cast<int>((d >> 24) & 0x1F) << 4;
  return x;
}

/// The fields of an sm_100 shared-memory matrix descriptor.
struct SmemDesc {
  unsigned start, lbo, sbo; // bytes
  int version, mode;
};
TESSEL_EMU_HD inline SmemDesc decode_smem_desc(unsigned long long d) {
  SmemDesc x;
  x.start = static_cast<unsigned>(d & 0x3FFF) << 4;
  x.lbo = static_cast<unsigned>((d >> 16) & 0x3FFF) << 4;
  x.sbo = static_cast<unsigned>((d >> 32) & 0x3FFF) << 4;
  x.version = static_cast<int>((d >> 46) & 3);
  x.mode = static_cast<int>((d >> 61) & 7);
  return x;
}

// ---- end of TESSEL_EMU_TABLES -------------------------------------------

#ifndef TESSEL_EMU_TABLES_ONLY

constexpr int kMaxSms = 160;
constexpr int kLanes = 128, kColumns = 512;

} // namespace emu
} // namespace tessel

extern "C" {
// Per SM: the tensor-memory image and a bit per 32-column granule in use.
__device__ unsigned tessel_tmem_image[tessel::emu::kMaxSms * tessel::emu::kLanes *
                                      tessel::emu::kColumns];
__device__ unsigned tessel_tmem_granules[tessel::emu::kMaxSms];
}

namespace tessel {
namespace emu {

// The block's allocation: its first column, width (0 when none) and SM, in
// the last 16 bytes of dynamic shared memory, which the compiler reserves
// for the emulation target. (A static __shared__ variable would move the
// 1024-byte aligned dynamic region 1 KiB on.)
struct BlockAllocation {
  unsigned first_column, columns, sm, unused;
};
__device__ inline BlockAllocation &block_allocation() {
  extern __shared__ __align__(1024) unsigned char tessel_smem[];
  unsigned size;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
  return *reinterpret_cast<BlockAllocation *>(tessel_smem + size - sizeof(BlockAllocation));
}
/// Whether columns [first, end) leave the block's allocation.
__device__ inline bool outside_allocation(int first, int end) {
  const BlockAllocation &own = block_allocation();
  return first < static_cast<int>(own.first_column) ||
         end > static_cast<int>(own.first_column + own.columns);
}
__device__ inline int allocation_end() {
  const BlockAllocation &own = block_allocation();
  return static_cast<int>(own.first_column + own.columns);
}

__device__ inline unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
__device__ inline void fail(const char *what, int held, int expected) {
  trap_with_report(what, held, expected, 0, -1);
}
__device__ inline unsigned &image(unsigned sm, int lane, int column) {
  return tessel_tmem_image[(sm * kLanes + lane) * kColumns + column];
}
__device__ inline unsigned shared_u32(unsigned address) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(address));
  return v;
}
__device__ inline unsigned short shared_u16(unsigned address) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(address));
  return v;
}
__device__ inline unsigned char shared_u8(unsigned address) {
  unsigned short v;
  asm volatile("ld.shared.u8 %0, [%1];" : "=h"(v) : "r"(address));
  return static_cast<unsigned char>(v);
}
__device__ inline float as_float(unsigned short bits, bool bf16) {
  if (bf16) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}
__device__ inline unsigned warp_lane() { return threadIdx.x % 32; }
// Registers are f32 or 32-bit integers; tensor memory holds their bits.
template <class T> __device__ inline T from_bits(unsigned v) { return static_cast<T>(v); }
template <> __device__ inline float from_bits<float>(unsigned v) { return __uint_as_float(v); }
__device__ inline unsigned to_bits(float v) { return __float_as_uint(v); }
__device__ inline unsigned to_bits(int v) { return static_cast<unsigned>(v); }
__device__ inline unsigned to_bits(unsigned v) { return v; }

/// tcgen05.alloc by a whole warp: `columns` (a power of two in [32, 512])
/// from this SM's 512, aligned to their width; waits while none are free.
__device__ inline void tcgen05_alloc(unsigned dest, int columns) {
  if (columns < 32 || columns > kColumns || (columns & (columns - 1)))
    fail("tcgen05.alloc of a column count that is not a power of two in [32, 512]", columns, 512);
  if (warp_lane() == 0) {
    unsigned sm = sm_id();
    if (sm >= kMaxSms) fail("the tensor-memory emulation has no image for this SM", sm, kMaxSms);
    unsigned count = columns / 32, mask = (count == 32 ? 0xFFFFFFFFu : (1u << count) - 1);
    unsigned first = 0;
    for (bool taken = false; !taken;) {
      unsigned used = atomicAdd(&tessel_tmem_granules[sm], 0u);
      for (unsigned g = 0; g + count <= kColumns / 32 && !taken; g += count) {
        if (used & (mask << g)) continue;
        taken = atomicCAS(&tessel_tmem_granules[sm], used, used | (mask << g)) == used;
        first = g * 32;
        break;
      }
      if (!taken) __nanosleep(200);
    }
    block_allocation() = BlockAllocation{first, static_cast<unsigned>(columns), sm, 0};
    asm volatile("st.shared.u32 [%0], %1;" :: "r"(dest), "r"(first) : "memory");
  }
  __syncwarp();
}

__device__ inline void tcgen05_dealloc(unsigned address, int columns) {
  if (warp_lane() == 0) {
    BlockAllocation &own = block_allocation();
    if ((address & 0xFFFF) != own.first_column || static_cast<unsigned>(columns) != own.columns)
      fail("tcgen05.dealloc of columns this block did not allocate", address & 0xFFFF,
           own.first_column);
    unsigned count = columns / 32, mask = (count == 32 ? 0xFFFFFFFFu : (1u << count) - 1);
    atomicAnd(&tessel_tmem_granules[own.sm], ~(mask << (own.first_column / 32)));
    own.columns = 0;
  }
  __syncwarp();
}

__device__ inline void tcgen05_relinquish() {}
// The image is global memory, ordered by the barriers the fences go with.
__device__ inline void tcgen05_fence() { __threadfence_block(); }
__device__ inline void tcgen05_wait() { __syncwarp(); }

/// The cell (lane, column) a thread moves, checked against the warp's
/// lanes and the block's columns.
__device__ inline unsigned &checked_cell(int shape, int reg, unsigned address, int offset) {
  int lane0 = static_cast<int>(address >> 16), column0 = static_cast<int>(address & 0xFFFF);
  Cell c = cell(shape, static_cast<int>(warp_lane()), reg, lane0, column0, offset);
  int quarter = static_cast<int>((threadIdx.x / 32) % 4);
  if (c.lane / 32 != quarter)
    fail("tcgen05.ld/st: a warp reaches only the 32 lanes of its quarter (warp % 4)", c.lane,
         quarter * 32);
  if (outside_allocation(c.column, c.column + 1))
    fail("tcgen05.ld/st: a column outside the block's tensor-memory allocation", c.column,
         allocation_end());
  return image(block_allocation().sm, c.lane, c.column);
}

/// tcgen05.ld: registers dest[0 .. registers) of this thread. With `pack`,
/// each register takes the low halves of two adjacent columns.
template <class T>
__device__ inline void tcgen05_ld(int shape, int num, bool pack, int offset, unsigned address,
                                  T *dest) {
  int regs = registers_per_repetition(shape) * num;
  for (int r = 0; r < regs; ++r) {
    unsigned v;
    if (pack) {
      // Two 16-bit columns per register: the shape's cells at doubled columns.
      unsigned lo = checked_cell(shape, 2 * r, address, offset);
      unsigned hi = checked_cell(shape, 2 * r + 1, address, offset);
      v = (lo & 0xFFFF) | (hi << 16);
    } else {
      v = checked_cell(shape, r, address, offset);
    }
    dest[r] = from_bits<T>(v);
  }
}

template <class T>
__device__ inline void tcgen05_st(int shape, int num, bool unpack, int offset, unsigned address,
                                  const T *source) {
  int regs = registers_per_repetition(shape) * num;
  for (int r = 0; r < regs; ++r) {
    unsigned v = to_bits(source[r]);
    if (unpack) {
      checked_cell(shape, 2 * r, address, offset) = v & 0xFFFF;
      checked_cell(shape, 2 * r + 1, address, offset) = v >> 16;
    } else {
      checked_cell(shape, r, address, offset) = v;
    }
  }
}

/// An operand element's value: kind::f16 f16 (format 0) or bf16 (1),
/// kind::f8f6f4 e4m3 (0) or e5m2 (1), kind::i8 u8 (0) or s8 (1). Every
/// 8-bit value is exact in a float, and so is each product of two.
__device__ inline float element_value(int kind, int format, unsigned bits) {
  if (kind == kind_f16) return as_float(static_cast<unsigned short>(bits), format == 1);
  if (kind == kind_i8)
    return format == 1 ? static_cast<float>(static_cast<signed char>(bits))
                       : static_cast<float>(bits & 0xFF);
  if (format == 1) {
    f8e5m2 v;
    v.bits = static_cast<unsigned char>(bits);
    return static_cast<float>(v);
  }
  f8e4m3 v;
  v.bits = static_cast<unsigned char>(bits);
  return static_cast<float>(v);
}

/// One operand element of an MMA from its shared-memory descriptor.
template <int kind>
__device__ inline float operand(const SmemDesc &d, int format, bool mn_major, int mn, int k) {
  constexpr int bytes = operand_bytes(kind);
  unsigned address = operand_address(d.start, d.lbo, d.sbo, d.mode, mn_major, mn, k, bytes);
  return element_value(kind, format, bytes == 2 ? shared_u16(address) : shared_u8(address));
}

/// Where the MMA's A comes from: shared memory through a descriptor (ss),
/// or tensor memory (ts: row m in lane m + the address's lane, K packed two
/// 16-bit values a column from the address's column; kind::f16 only).
struct OperandA {
  bool in_tmem;
  SmemDesc desc;
  int lane0, column0;
};

template <int kind>
__device__ inline float a_element(const OperandA &a, int format, bool mn_major, int m, int k) {
  if (!a.in_tmem) return operand<kind>(a.desc, format, mn_major, m, k);
  unsigned cellA = image(block_allocation().sm, a.lane0 + m, a.column0 + k / 2);
  return as_float(static_cast<unsigned short>(k % 2 ? cellA >> 16 : cellA & 0xFFFF), format == 1);
}

/// The checks of an instruction descriptor against its kind.
__device__ inline void check_formats(int kind, const InstrDesc &x) {
  if (kind == kind_f16) {
    if (x.d_type > 1) fail("tcgen05.mma kind::f16: D is f16 (0) or f32 (1)", x.d_type, 1);
    if (x.a_type > 1 || x.a_type != x.b_type)
      fail("tcgen05.mma kind::f16: A and B both f16 (0) or both bf16 (1)", x.a_type, x.b_type);
  } else if (kind == kind_f8f6f4) {
    if (x.d_type > 1) fail("tcgen05.mma kind::f8f6f4: D is f16 (0) or f32 (1)", x.d_type, 1);
    if (x.a_type > 1 || x.b_type > 1)
      fail("tcgen05.mma kind::f8f6f4 emulation: A and B e4m3 (0) or e5m2 (1)", x.a_type, x.b_type);
  } else if (kind == kind_mxf8f6f4) {
    if (!x.ue8m0_scales) fail("tcgen05.mma kind::mxf8f6f4: ue8m0 scales (bit 23 set)", 0, 1);
    if (x.a_type > 1 || x.b_type > 1)
      fail("tcgen05.mma kind::mxf8f6f4 emulation: A and B e4m3 (0) or e5m2 (1)", x.a_type,
           x.b_type);
    return; // f32, no D type field
  } else if (kind == kind_i8) {
    if (x.d_type != 2) fail("tcgen05.mma kind::i8: D is s32 (2)", x.d_type, 2);
    if (x.a_type > 1 || x.b_type > 1)
      fail("tcgen05.mma kind::i8: A and B u8 (0) or s8 (1)", x.a_type, x.b_type);
  } else {
    fail("tcgen05.mma emulation: an unknown kind", kind, 0);
  }
  if (x.d_type == 0) fail("tcgen05.mma emulation: only an f32 or s32 accumulator", x.d_type, 1);
}

/// A ue8m0 scale's value: 2^(bits - 127), 0xFF NaN (0x00 is 2^-127, a
/// float denormal).
__device__ inline float ue8m0_value(unsigned bits) {
  bits &= 0xFF;
  return __uint_as_float(bits == 0xFF ? 0x7FC00000u : bits == 0 ? 0x00400000u : bits << 23);
}

/// The ue8m0 scale of row (or column) `i` from the scale columns at
/// `address` (lane 0): lane i % 32, column i / 32, the byte `id` picks; the
/// copies tcgen05.cp .warpx4 put in the other lane quarters must agree.
__device__ inline float block_scale(unsigned address, int i, int id, const char *which) {
  int column = static_cast<int>(address & 0xFFFF) + i / 32;
  if ((address >> 16) != 0) fail("tcgen05.mma: scale addresses start at lane 0", address >> 16, 0);
  if (outside_allocation(column, column + 1))
    fail(which, column, allocation_end());
  unsigned sm = block_allocation().sm;
  unsigned byte = (image(sm, i % 32, column) >> (8 * id)) & 0xFF;
  for (int quarter = 1; quarter < 4; ++quarter)
    if (((image(sm, i % 32 + 32 * quarter, column) >> (8 * id)) & 0xFF) != byte)
      fail("tcgen05.mma block scale: the lane quarters' copies differ (scales are copied to all "
           "four, as tcgen05.cp .warpx4 does)",
           i, quarter);
  return ue8m0_value(byte);
}

/// tcgen05.mma.cta_group::1.kind::{f16, f8f6f4, i8, mxf8f6f4}, by the
/// issuing thread: D[m, n] (+)= sum over one instruction's K of A[m, k]
/// B[k, n], in fp32 (exactly in s32 for kind::i8), times A's row scale and
/// B's column scale for kind::mxf8f6f4 (`scale_a`, `scale_b`). The kind is
/// a template argument, so that each kernel carries only its own kind's
/// code, its K loop unrolled into registers.
template <int kind>
__device__ inline void mma(unsigned d, const OperandA &a, unsigned long long b_desc,
                           unsigned idesc, bool accumulate, unsigned scale_a = 0,
                           unsigned scale_b = 0) {
  InstrDesc x = decode_instr_desc(idesc);
  SmemDesc b = decode_smem_desc(b_desc);
  check_formats(kind, x);
  if (x.m != 128) fail("tcgen05.mma emulation: M = 128 only (every TMEM lane)", x.m, 128);
  if (x.n < 16 || x.n > 256 || x.n % 16)
    fail("tcgen05.mma M = 128: N from 16 to 256 in steps of 16", x.n, 256);
  if (b.version != 1 || (!a.in_tmem && a.desc.version != 1))
    fail("tcgen05 shared-memory descriptor without version 1 in bits 46-47", b.version, 1);
  if ((b.mode & 1) || (!a.in_tmem && (a.desc.mode & 1)))
    fail("tcgen05 shared-memory descriptor with an odd swizzle mode", b.mode, 0);
  if (a.in_tmem) {
    if (kind != kind_f16) fail("tcgen05.mma: A in tensor memory only for kind::f16 here", kind, 0);
    if (x.a_mn_major) fail("tcgen05.mma: A in tensor memory is K-major (bit 15 clear)", 1, 0);
    if (a.lane0 != 0) fail("tcgen05.mma: A in tensor memory starts at lane 0", a.lane0, 0);
    if (outside_allocation(a.column0, a.column0 + 8))
      fail("tcgen05.mma: A's columns outside the block's tensor-memory allocation", a.column0 + 8,
           allocation_end());
  }
  int column0 = static_cast<int>(d & 0xFFFF);
  if ((d >> 16) != 0) fail("tcgen05.mma: D starts at lane 0", static_cast<int>(d >> 16), 0);
  if (outside_allocation(column0, column0 + x.n))
    fail("tcgen05.mma: D's columns outside the block's tensor-memory allocation", column0 + x.n,
         allocation_end());
  constexpr int k_count = kind == kind_f16 ? 16 : 32;
  constexpr bool scaled = kind == kind_mxf8f6f4;
  unsigned sm = block_allocation().sm;
  for (int m = 0; m < x.m; ++m) {
    float row[k_count];
    for (int k = 0; k < k_count; ++k) row[k] = a_element<kind>(a, x.a_type, x.a_mn_major, m, k);
    float row_scale = 1.0f;
    if constexpr (scaled)
      row_scale = block_scale(scale_a, m, x.a_scale_id, "tcgen05.mma: A's scales outside the allocation");
    for (int n = 0; n < x.n; ++n) {
      unsigned &cellD = image(sm, m, column0 + n);
      if constexpr (kind == kind_i8) {
        int acc = accumulate ? static_cast<int>(cellD) : 0;
        for (int k = 0; k < k_count; ++k)
          acc += static_cast<int>(row[k]) *
                 static_cast<int>(operand<kind>(b, x.b_type, x.b_mn_major, n, k));
        cellD = static_cast<unsigned>(acc);
        continue;
      }
      if constexpr (scaled) {
        float sum = 0.0f;
        for (int k = 0; k < k_count; ++k) sum += row[k] * operand<kind>(b, x.b_type, x.b_mn_major, n, k);
        sum *= row_scale * block_scale(scale_b, n, x.b_scale_id,
                                       "tcgen05.mma: B's scales outside the allocation");
        cellD = __float_as_uint((accumulate ? __uint_as_float(cellD) : 0.0f) + sum);
      } else {
        float acc = accumulate ? __uint_as_float(cellD) : 0.0f;
        for (int k = 0; k < k_count; ++k) acc += row[k] * operand<kind>(b, x.b_type, x.b_mn_major, n, k);
        cellD = __float_as_uint(acc);
      }
    }
  }
}

/// The ss form: A and B in shared memory.
template <int kind>
__device__ inline void tcgen05_mma(unsigned d, unsigned long long a_desc,
                                   unsigned long long b_desc, unsigned idesc, bool accumulate) {
  static_assert(kind != kind_mxf8f6f4, "kind::mxf8f6f4 reads scale addresses");
  mma<kind>(d, OperandA{false, decode_smem_desc(a_desc), 0, 0}, b_desc, idesc, accumulate);
}

/// The block-scaled ss form (kind::mxf8f6f4): scales at `scale_a`, `scale_b`.
template <int kind>
__device__ inline void tcgen05_mma(unsigned d, unsigned long long a_desc,
                                   unsigned long long b_desc, unsigned idesc, bool accumulate,
                                   unsigned scale_a, unsigned scale_b) {
  static_assert(kind == kind_mxf8f6f4, "only kind::mxf8f6f4 reads scale addresses");
  mma<kind>(d, OperandA{false, decode_smem_desc(a_desc), 0, 0}, b_desc, idesc, accumulate, scale_a,
            scale_b);
}

/// The ts form: A in tensor memory at address `a`.
template <int kind>
__device__ inline void tcgen05_mma(unsigned d, unsigned a, unsigned long long b_desc,
                                   unsigned idesc, bool accumulate) {
  mma<kind>(d, OperandA{true, SmemDesc{}, static_cast<int>(a >> 16), static_cast<int>(a & 0xFFFF)},
            b_desc, idesc, accumulate);
}

/// tcgen05.commit: the thread's MMAs are done (they ran synchronously), so
/// it arrives on the mbarrier at once, releasing the image's writes.
__device__ inline void tcgen05_commit(unsigned barrier) {
  __threadfence_block();
  mbarrier_arrive(barrier);
}

/// tcgen05.cp.cta_group::1 by the issuing thread, synchronously. The
/// .32x128b.warpx4 shape: 32 rows of 16 bytes from the descriptor's matrix
/// (rows 16 bytes apart in 8-row core matrices SBO apart, swizzled as the
/// descriptor says) into lanes 0-31 of 4 columns from `address`, copied to
/// the three other lane quarters. Other shapes trap.
__device__ inline void tcgen05_cp(unsigned address, unsigned long long desc, int shape) {
  if (shape != cp_32x128b_warpx4)
    fail("tcgen05.cp emulation: only the .32x128b.warpx4 shape", shape, cp_32x128b_warpx4);
  SmemDesc s = decode_smem_desc(desc);
  if (s.version != 1) fail("tcgen05 shared-memory descriptor without version 1 in bits 46-47", s.version, 1);
  if ((address >> 16) != 0) fail("tcgen05.cp .warpx4 starts at lane 0", address >> 16, 0);
  int column0 = static_cast<int>(address & 0xFFFF);
  if (outside_allocation(column0, column0 + 4))
    fail("tcgen05.cp: columns outside the block's tensor-memory allocation", column0 + 4,
         allocation_end());
  unsigned sm = block_allocation().sm;
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 4; ++c) {
      unsigned at = s.start + (r / 8) * s.sbo + (r % 8) * 16 + 4 * c;
      unsigned word = shared_u32(swizzle_address(at, s.mode));
      for (int quarter = 0; quarter < 4; ++quarter) image(sm, r + 32 * quarter, column0 + c) = word;
    }
}

#endif // TESSEL_EMU_TABLES_ONLY

} // namespace emu
} // namespace tessel
