// Tessel's device header: the only header generated kernels include. It is
// self-contained (no CUDA or C++ standard headers), so NVRTC needs no include
// path and compiles it in milliseconds.
#pragma once

// Where a timed-out flag wait describes itself before it traps: host
// memory mapped into the device, set by the runtime when a module loads
// (Driver::trapReportAddress; runtime/lib/Driver.cpp has the host's copy of
// the layout). state: 0 empty, 1 being written, 2 written.
struct tessel_trap_report {
  unsigned state;
  int held, expected;
  unsigned block[3];
  unsigned long long address;
  long long timeout_ms;
  char what[96];
};
extern "C" {
__device__ tessel_trap_report *tessel_trap_report_slot;
}

namespace tessel {

// 16-bit floats are stored as bits and computed in float; conversions use the
// hardware's round-to-nearest-even cvt instructions.
struct half {
  unsigned short bits;
  half() = default;
  __device__ explicit half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(f)); }
  __device__ explicit operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
};

struct bfloat16 {
  unsigned short bits;
  bfloat16() = default;
  __device__ explicit bfloat16(float f) {
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f));
  }
  __device__ explicit operator float() const {
    return __uint_as_float(static_cast<unsigned>(bits) << 16);
  }
};

// Integer types of several words under one identifier each: generated code
// spells every type so that `T(x)` and declarations parse alike.
typedef long long i64;
typedef signed char i8;
typedef unsigned char u8;

// FP8 (OCP E4M3 "fn": finite, max 448, NaN 0x7f; E5M2: max 57344). Encoding
// rounds to nearest even and saturates (finite values and infinities beyond
// the largest finite value become it, with their sign; NaN stays NaN): the
// PTX `cvt.rn.satfinite` rule, which sm_89 and later run in hardware and
// earlier targets compute here bit for bit the same.
namespace fp8 {
// The quantum-scaled software encoder: a value rounds to a multiple of
// 2^(exponent - MANT) (or of the subnormal quantum), then saturates.
template <int EXP, int MANT, int BIAS, unsigned MAX_CODE>
__device__ inline unsigned char encode_soft(float f) {
  unsigned x = __float_as_uint(f);
  unsigned char sign = (x >> 24) & 0x80;
  float a = __uint_as_float(x & 0x7fffffffu);
  if (a != a) return 0x7f;
  int e = int((x >> 23) & 0xff) - 127;
  if (e < 1 - BIAS) e = 1 - BIAS;
  int q = e - MANT;                                   // the quantum's exponent
  float r;                                            // a / 2^q, rounded to even
  asm("cvt.rni.f32.f32 %0, %1;" : "=f"(r) : "f"(a * __uint_as_float(unsigned(127 - q) << 23)));
  unsigned m = unsigned(r);
  if (m == (2u << MANT)) { m >>= 1; ++q; }            // rounded up to the next binade
  if (m == 0) return sign;
  unsigned code = m < (1u << MANT) ? m                // subnormal
                                   : (unsigned(q + MANT + BIAS) << MANT) | (m - (1u << MANT));
  return sign | (code > MAX_CODE ? MAX_CODE : code);
}
} // namespace fp8

struct f8e4m3 {
  unsigned char bits;
  f8e4m3() = default;
  __device__ explicit f8e4m3(float f) {
#if __CUDA_ARCH__ >= 890
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
    bits = static_cast<unsigned char>(pair);
#else
    bits = fp8::encode_soft<4, 3, 7, 0x7e>(f);
#endif
  }
  // E4M3's exponent and mantissa bits, moved into f16's places, read as
  // an f16 2^8 times too small (the biases differ by 8): exact, subnormals
  // included, in a shift, a conversion and a multiply (a decode in element
  // code, such as an FP8 KV cache widened in shared memory, runs once per
  // element).
  __device__ explicit operator float() const {
    if ((bits & 0x7f) == 0x7f) return __uint_as_float(0x7fc00000u);
    unsigned short half = static_cast<unsigned short>(((bits & 0x80u) << 8) | ((bits & 0x7fu) << 7));
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(half));
    return f * 256.0f;
  }
};

struct f8e5m2 {
  unsigned char bits;
  f8e5m2() = default;
  __device__ explicit f8e5m2(float f) {
#if __CUDA_ARCH__ >= 890
    unsigned short pair;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
    bits = static_cast<unsigned char>(pair);
#else
    bits = fp8::encode_soft<5, 2, 15, 0x7b>(f);
#endif
  }
  // E5M2 is f16's upper byte: exact by a shift.
  __device__ explicit operator float() const {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(bits << 8)));
    return f;
  }
};

// Two f32 values to FP8 in one conversion (cvt's e4m3x2 / e5m2x2 forms,
// which take the first operand into the high byte), as the constructors
// convert each: the same bits, half the conversions.
template <class T> struct is_e4m3 { static constexpr bool value = false; };
template <> struct is_e4m3<f8e4m3> { static constexpr bool value = true; };
template <class T> __device__ inline void convert_pair(float lo, float hi, T &a, T &b) {
#if __CUDA_ARCH__ >= 890
  unsigned short pair;
  if constexpr (is_e4m3<T>::value)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  a.bits = static_cast<unsigned char>(pair);
  b.bits = static_cast<unsigned char>(pair >> 8);
#else
  a = T(lo);
  b = T(hi);
#endif
}
// Two f32 values to bf16 or f16 in one cvt (.bf16x2 / .f16x2, the first
// operand into the high half): the bits of the one-value constructors, one
// instruction where those take two and a pack.
__device__ inline void convert_pair(float lo, float hi, bfloat16 &a, bfloat16 &b) {
  unsigned pair;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));
  a.bits = static_cast<unsigned short>(pair);
  b.bits = static_cast<unsigned short>(pair >> 16);
}
__device__ inline void convert_pair(float lo, float hi, half &a, half &b) {
  unsigned pair;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(hi), "f"(lo));
  a.bits = static_cast<unsigned short>(pair);
  b.bits = static_cast<unsigned short>(pair >> 16);
}

// OCP MX scale factors (E8M0, torch's float8_e8m0fnu): 2^(bits - 127), no
// sign, zero or infinity; 0xff is NaN. Encoding rounds |f| up to the next
// power of two (an MX quantiser's rule for a block's scale, so that
// amax / scale never exceeds the element format's largest value) and
// saturates: the PTX `cvt.rp.satfinite.ue8m0x2.f32` rule, which the
// sm_100/110/120 families run in hardware and earlier targets compute here
// bit for bit the same. As the CUDA toolkit's emulation of the instruction
// (cuda_fp8.hpp, __nv_cvt_float_to_e8m0) reads it: the sign is ignored,
// |f| <= 2^-127 (zeros included) gives 0x00, |f| > 2^127 and infinities
// give 0xfe (2^127), NaN gives 0xff.
struct ue8m0 {
  unsigned char bits;
  ue8m0() = default;
  __device__ explicit ue8m0(float f) {
#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000 &&          \
    __CUDA_ARCH_FAMILY_SPECIFIC__ < 1300
    unsigned short pair;
    asm("cvt.rp.satfinite.ue8m0x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
    bits = static_cast<unsigned char>(pair);
#else
    unsigned x = __float_as_uint(f) & 0x7fffffffu;
    // Adding a mantissa of ones carries into the exponent field exactly
    // when some mantissa bit is set, which rounds a normal float up to its
    // power of two; subnormals above 2^-127 become 2^-126 (code 1) the same
    // way, and infinity and the floats past 2^127 reach 0xff and saturate.
    unsigned code = x <= 0x00400000u ? 0u : (x + 0x007fffffu) >> 23;
    bits = static_cast<unsigned char>(x > 0x7f800000u ? 0xffu : code > 0xfeu ? 0xfeu : code);
#endif
  }
  // The code is a float's exponent field, except 0x00 (2^-127, a float
  // subnormal) and 0xff (NaN, which the field would read as infinity).
  __device__ explicit operator float() const {
    if (bits == 0xff) return __uint_as_float(0x7fc00000u);
    return __uint_as_float(bits ? static_cast<unsigned>(bits) << 23 : 0x00400000u);
  }
};

// The DSL's integer division: rounded toward negative infinity (-7 / 4 = -2)
// and up (ceil_div(-7, 4) = -1), for either sign of either operand.
template <typename T> __device__ inline T floor_div(T a, T b) {
  return a / b - T(a % b != 0 && (a < 0) != (b < 0));
}
template <typename T> __device__ inline T ceil_div(T a, T b) {
  return a / b + T(a % b != 0 && (a < 0) == (b < 0));
}

// 2^x with the special-function unit: one MUFU.EX2 (about 2 ulp, flushes
// denormal results to zero; exp2(-inf) = 0).
__device__ inline float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA pipe, for kernels whose special-function unit is the
// bottleneck (an FP8 attention's softmax: the products run twice as fast
// as bf16's, MUFU.EX2 does not). x = n + f with n = floor(x) (an add
// rounded down against 1.5 * 2^23 puts n in the low mantissa bits), 2^f
// from a degree-3 minimax polynomial on [0, 1) with p(0) = 1 (relative
// error below 8.6e-5, about 13.5 bits: finer than the bf16, f16 or FP8
// values softmax probabilities become), times 2^n built from n's bits.
// Seven FMA-pipe instructions and three integer/min-max ones, against one
// MUFU.EX2 at a quarter of the FMA rate. Edges as ex2.approx.ftz has them:
// 2^-inf = 0, results below 2^-126 flush to 0 (2^n's bits are then 0),
// 2^x = inf from x = 128, NaN stays NaN (max.NaN/min.NaN propagate it).
__device__ inline float exp2_fma(float x) {
  asm("max.NaN.f32 %0, %0, 0fC2FE0000;" : "+f"(x)); // -127
  asm("min.NaN.f32 %0, %0, 0f43000000;" : "+f"(x)); // 128
  const float shifter = 12582912.0f;                 // 1.5 * 2^23
  float shifted = __fadd_rd(x, shifter);
  float f = x - (shifted - shifter);
  float p = __fmaf_rn(f, __fmaf_rn(f, __fmaf_rn(f, 0x1.3baaa6p-4f, 0x1.d2378ap-3f), 0x1.63e658p-1f),
                      1.0f);
  // n's two's complement sits in the shifted value's low bits (the
  // shifter's are zero), so shifting them into the exponent field and
  // adding the bias gives 2^n: 0 at n = -127, inf at n = 128.
  float scale = __int_as_float((__float_as_int(shifted) << 23) + (127 << 23));
  return p * scale;
}

// Two 16-bit values in one 32-bit register, `lo` in the low half: how
// tensor-core instructions take f16/bf16 operands.
template <class T> __device__ inline unsigned pack_pair(T lo, T hi) {
  return static_cast<unsigned>(lo.bits) | (static_cast<unsigned>(hi.bits) << 16);
}

template <class T> __device__ inline void unpack_pair(unsigned packed, T &lo, T &hi) {
  lo.bits = static_cast<unsigned short>(packed & 0xFFFF);
  hi.bits = static_cast<unsigned short>(packed >> 16);
}

// An empty asm that reads and writes every register of an array: accesses
// cannot move across it (after a wgmma wait, none move above the wait).
template <int N> __device__ inline void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

template <int N> __device__ inline void fence_registers(int (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The 32-bit register holding elements i and i + 1 (i even) of a 16-bit
// accumulator array, as the tensor cores' .f16 forms read and write it.
// Indexed by constants after unrolling, the array stays in registers.
template <class T, int N> __device__ inline unsigned &word_at(T (&r)[N], int i) {
  static_assert(sizeof(T) == 2, "words of 16-bit arrays only");
  return *reinterpret_cast<unsigned *>(&r[i]);
}

// fence_registers for a 16-bit accumulator array, a register (two
// elements) at a time.
template <int N> __device__ inline void fence_registers(half (&r)[N]) {
  static_assert(N % 2 == 0, "16-bit accumulator arrays hold whole registers");
#pragma unroll
  for (int i = 0; i < N; i += 2) asm volatile("" : "+r"(word_at(r, i))::"memory");
}

// The same for a 16-bit array, a packed pair of elements at a time: the
// pairs are formed here, before a wgmma fence, and what follows reads them
// back unchanged (ptxas folds the unpack and repack away).
template <class T, int N> __device__ inline void fence_pairs(T (&r)[N]) {
  static_assert(N % 2 == 0, "16-bit operand arrays hold whole pairs");
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    unsigned pair = pack_pair(r[i], r[i + 1]);
    asm volatile("" : "+r"(pair)::"memory");
    unpack_pair(pair, r[i], r[i + 1]);
  }
}

// The bits of a 1-byte element (FP8 structs, i8 and u8).
template <class T> __device__ inline unsigned byte_bits(T v) { return v.bits; }
__device__ inline unsigned byte_bits(i8 v) { return static_cast<unsigned char>(v); }
__device__ inline unsigned byte_bits(u8 v) { return v; }
template <class T> __device__ inline void set_byte_bits(T &v, unsigned bits) {
  v.bits = static_cast<unsigned char>(bits);
}
__device__ inline void set_byte_bits(i8 &v, unsigned bits) { v = static_cast<i8>(bits); }
__device__ inline void set_byte_bits(u8 &v, unsigned bits) { v = static_cast<u8>(bits); }

// Four 1-byte elements to a 32-bit register, the first in the low byte.
template <class T> __device__ inline unsigned pack_quad(T b0, T b1, T b2, T b3) {
  return byte_bits(b0) | (byte_bits(b1) << 8) | (byte_bits(b2) << 16) | (byte_bits(b3) << 24);
}

// An 8-bit A operand in registers (an accumulator-shaped fragment) as the
// tensor cores take it: of each 16 elements, registers {0, 1, 4, 5},
// {2, 3, 6, 7}, {8, 9, 12, 13} and {10, 11, 14, 15} (the pairs at 2q and
// 8 + 2q of K, in rows g and g + 8, read as four consecutive K values;
// the gemm's B is stored with K permuted to match). The words are formed
// here, before a wgmma fence, as fence_pairs does for 16-bit operands.
template <class T, int N> __device__ inline void fence_quads(T (&r)[N]) {
  static_assert(N % 16 == 0, "8-bit operand arrays hold whole 16-element groups");
#pragma unroll
  for (int g = 0; g < N; g += 16) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      int i = g + 8 * (w / 2) + 2 * (w % 2);
      unsigned word = pack_quad(r[i], r[i + 1], r[i + 4], r[i + 5]);
      asm volatile("" : "+r"(word)::"memory");
      set_byte_bits(r[i], word);
      set_byte_bits(r[i + 1], word >> 8);
      set_byte_bits(r[i + 4], word >> 16);
      set_byte_bits(r[i + 5], word >> 24);
    }
  }
}

// Raw moves of 4, 8 or 16 aligned bytes.
template <int Bytes> __device__ inline void copy_bytes(void *dst, const void *src);
template <> __device__ inline void copy_bytes<16>(void *dst, const void *src) {
  *static_cast<uint4 *>(dst) = *static_cast<const uint4 *>(src);
}
template <> __device__ inline void copy_bytes<8>(void *dst, const void *src) {
  *static_cast<uint2 *>(dst) = *static_cast<const uint2 *>(src);
}
template <> __device__ inline void copy_bytes<4>(void *dst, const void *src) {
  *static_cast<unsigned *>(dst) = *static_cast<const unsigned *>(src);
}

// The 32-bit shared-window address of a generic pointer into shared memory
// (what ldmatrix, cp.async and wgmma descriptors take).
__device__ inline unsigned smem_address(const void *p) {
  unsigned address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
      : "=r"(address) : "l"(p));
  return address;
}

// cp.async of 4, 8 or 16 bytes from global to shared memory; 16-byte copies
// bypass L1 (.cg).
template <int Bytes> __device__ inline void cp_async(void *dst, const void *src) {
  if (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(smem_address(dst)), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                 :: "r"(smem_address(dst)), "l"(src), "n"(Bytes) : "memory");
}

// A TMA tensor map (CUtensorMap), encoded on the host by
// cuTensorMapEncodeTiled and passed as a __grid_constant__ parameter.
struct alignas(64) TensorMap {
  unsigned long long words[16];
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// One TMA box into shared memory; coordinates innermost first. The bytes
// complete on the mbarrier at `bar`.
#define TESSEL_TMA_LOAD(DIMS, COORDS, ...)                                                     \
  asm volatile("cp.async.bulk.tensor." #DIMS "d.shared::cluster.global.tile"                  \
               ".mbarrier::complete_tx::bytes [%0], [%1, {" COORDS "}], [%2];"                 \
               :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar),          \
                  __VA_ARGS__ : "memory")
__device__ inline void tma_load(const TensorMap *map, unsigned dst, unsigned bar, int c0) {
  TESSEL_TMA_LOAD(1, "%3", "r"(c0));
}
__device__ inline void tma_load(const TensorMap *map, unsigned dst, unsigned bar, int c0, int c1) {
  TESSEL_TMA_LOAD(2, "%3, %4", "r"(c0), "r"(c1));
}
__device__ inline void tma_load(const TensorMap *map, unsigned dst, unsigned bar, int c0, int c1,
                                int c2) {
  TESSEL_TMA_LOAD(3, "%3, %4, %5", "r"(c0), "r"(c1), "r"(c2));
}
__device__ inline void tma_load(const TensorMap *map, unsigned dst, unsigned bar, int c0, int c1,
                                int c2, int c3) {
  TESSEL_TMA_LOAD(4, "%3, %4, %5, %6", "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}
#undef TESSEL_TMA_LOAD

// One TMA box delivered to the blocks of the cluster in `mask` (bit r for
// rank r): the same shared offsets in each, completing on the mbarrier at
// `bar`'s offset in each.
#define TESSEL_TMA_MULTICAST(DIMS, COORDS, ...)                                                \
  asm volatile("cp.async.bulk.tensor." #DIMS "d.shared::cluster.global.tile"                  \
               ".mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {" COORDS "}], [%2], %3;" \
               :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar),          \
                  "h"(static_cast<unsigned short>(mask)), __VA_ARGS__ : "memory")
__device__ inline void tma_load_multicast(const TensorMap *map, unsigned dst, unsigned bar, int mask,
                                          int c0) {
  TESSEL_TMA_MULTICAST(1, "%4", "r"(c0));
}
__device__ inline void tma_load_multicast(const TensorMap *map, unsigned dst, unsigned bar, int mask,
                                          int c0, int c1) {
  TESSEL_TMA_MULTICAST(2, "%4, %5", "r"(c0), "r"(c1));
}
__device__ inline void tma_load_multicast(const TensorMap *map, unsigned dst, unsigned bar, int mask,
                                          int c0, int c1, int c2) {
  TESSEL_TMA_MULTICAST(3, "%4, %5, %6", "r"(c0), "r"(c1), "r"(c2));
}
__device__ inline void tma_load_multicast(const TensorMap *map, unsigned dst, unsigned bar, int mask,
                                          int c0, int c1, int c2, int c3) {
  TESSEL_TMA_MULTICAST(4, "%4, %5, %6, %7", "r"(c0), "r"(c1), "r"(c2), "r"(c3));
}
#undef TESSEL_TMA_MULTICAST

// The block's rank in its thread block cluster.
__device__ inline int cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return int(rank);
}
// Every thread of the cluster arrives (release) and waits (acquire).
__device__ inline void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::: "memory");
}
// One arrival on the mbarrier at `bar`'s offset in block `rank` of the
// cluster. The default semantics (release at CTA scope) suffice for a stage
// whose readers were wgmmas the arriving thread waited for; release at
// cluster scope made a 4096^3 gemm 2.5x slower on an H100.
__device__ inline void mbarrier_arrive_cluster(unsigned bar, int rank) {
  asm volatile("{\n\t.reg .b32 remote;\n\t"
               "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}"
               :: "r"(bar), "r"(rank) : "memory");
}

// One TMA box from shared memory to global memory, stored or added
// (relaxed) element by element; completion through bulk groups.
#define TESSEL_TMA_STORE(OP, DIMS, COORDS, ...)                                                \
  asm volatile(OP "." #DIMS "d.global.shared::cta.bulk_group [%0, {" COORDS "}], [%1];"       \
               :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(src), __VA_ARGS__       \
               : "memory")
#define TESSEL_TMA_OUT(NAME, OP)                                                               \
  __device__ inline void NAME(const TensorMap *map, unsigned src, int c0) {                    \
    TESSEL_TMA_STORE(OP, 1, "%2", "r"(c0));                                                    \
  }                                                                                            \
  __device__ inline void NAME(const TensorMap *map, unsigned src, int c0, int c1) {            \
    TESSEL_TMA_STORE(OP, 2, "%2, %3", "r"(c0), "r"(c1));                                       \
  }                                                                                            \
  __device__ inline void NAME(const TensorMap *map, unsigned src, int c0, int c1, int c2) {    \
    TESSEL_TMA_STORE(OP, 3, "%2, %3, %4", "r"(c0), "r"(c1), "r"(c2));                          \
  }                                                                                            \
  __device__ inline void NAME(const TensorMap *map, unsigned src, int c0, int c1, int c2,      \
                              int c3) {                                                        \
    TESSEL_TMA_STORE(OP, 4, "%2, %3, %4, %5", "r"(c0), "r"(c1), "r"(c2), "r"(c3));             \
  }
TESSEL_TMA_OUT(tma_store, "cp.async.bulk.tensor")
TESSEL_TMA_OUT(tma_reduce_add, "cp.reduce.async.bulk.tensor.add")
#undef TESSEL_TMA_OUT
#undef TESSEL_TMA_STORE

__device__ inline void mbarrier_init(unsigned bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(arrivals) : "memory");
}
__device__ inline void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ inline void mbarrier_arrive_expect_tx(unsigned bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase with parity `parity` has completed. A fresh barrier
// is in phase 0, so waiting for parity 1 returns at once.
__device__ inline void mbarrier_wait(unsigned bar, int parity) {
  unsigned done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
#endif

// A wgmma shared-memory matrix descriptor (sm_90): start address, leading
// and stride byte offsets in 16-byte units, swizzle mode in bits 62-63
// (1 = 128 B, 2 = 64 B, 3 = 32 B).
__device__ inline long long wgmma_desc(unsigned address, int leading, int stride, int swizzle) {
  unsigned long long mode = swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
  unsigned long long d = (address >> 4) & 0x3FFF;
  d |= static_cast<unsigned long long>((leading >> 4) & 0x3FFF) << 16;
  d |= static_cast<unsigned long long>((stride >> 4) & 0x3FFF) << 32;
  d |= mode << 62;
  return static_cast<long long>(d);
}

// Atomic adds with a PTX memory-model order at GPU scope. seq_cst is a
// sequentially consistent fence followed by an acq_rel update, as in the PTX
// memory model's mapping of C++ atomics. The old value each atom returns
// stays in a PTX register of the asm's own (a C++ variable set and never
// read is a warning under NVRTC).
struct order_relaxed { static constexpr bool sc = false; };
struct order_acquire { static constexpr bool sc = false; };
struct order_release { static constexpr bool sc = false; };
struct order_acq_rel { static constexpr bool sc = false; };
struct order_seq_cst { static constexpr bool sc = true; };

#define TESSEL_ATOMIC_ADD(ORDER, SEM)                                                       \
  __device__ inline void atomic_add_impl(ORDER, float *p, float v) {                        \
    asm volatile("{\n.reg .f32 old;\natom." SEM ".gpu.add.f32 old, [%0], %1;\n}"            \
                 :: "l"(p), "f"(v) : "memory");                                             \
  }                                                                                         \
  __device__ inline void atomic_add_impl(ORDER, double *p, double v) {                      \
    asm volatile("{\n.reg .f64 old;\natom." SEM ".gpu.add.f64 old, [%0], %1;\n}"            \
                 :: "l"(p), "d"(v) : "memory");                                             \
  }                                                                                         \
  __device__ inline void atomic_add_impl(ORDER, int *p, int v) {                            \
    asm volatile("{\n.reg .b32 old;\natom." SEM ".gpu.add.s32 old, [%0], %1;\n}"            \
                 :: "l"(p), "r"(v) : "memory");                                             \
  }                                                                                         \
  __device__ inline void atomic_add_impl(ORDER, half *p, half v) {                          \
    asm volatile("{\n.reg .b16 old;\natom." SEM ".gpu.add.noftz.f16 old, [%0], %1;\n}"      \
                 :: "l"(p), "h"(v.bits) : "memory");                                        \
  }                                                                                         \
  __device__ inline void atomic_add_impl(ORDER, bfloat16 *p, bfloat16 v) {                  \
    atomic_add_bf16<ORDER>(p, v);                                                           \
  }

// bf16 atomics are native from sm_90; before that, a compare-and-swap loop on
// the aligned 32-bit word that holds the value.
template <class Order> __device__ inline void atomic_add_bf16(bfloat16 *p, bfloat16 v) {
#if __CUDA_ARCH__ >= 900
  asm volatile("{\n.reg .b16 old;\natom.acq_rel.gpu.add.noftz.bf16 old, [%0], %1;\n}"
               :: "l"(p), "h"(v.bits) : "memory");
#else
  unsigned long long addr = reinterpret_cast<unsigned long long>(p);
  unsigned *word = reinterpret_cast<unsigned *>(addr & ~3ull);
  unsigned shift = (addr & 2) ? 16 : 0;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    bfloat16 cur;
    cur.bits = static_cast<unsigned short>(assumed >> shift);
    bfloat16 sum(float(cur) + float(v));
    unsigned next = (assumed & ~(0xffffu << shift)) | (static_cast<unsigned>(sum.bits) << shift);
    old = atomicCAS(word, assumed, next);
  } while (old != assumed);
#endif
}

TESSEL_ATOMIC_ADD(order_relaxed, "relaxed")
TESSEL_ATOMIC_ADD(order_acquire, "acquire")
TESSEL_ATOMIC_ADD(order_release, "release")
TESSEL_ATOMIC_ADD(order_acq_rel, "acq_rel")
TESSEL_ATOMIC_ADD(order_seq_cst, "acq_rel")
#undef TESSEL_ATOMIC_ADD

// Vector reductions of 2 or 4 contiguous floats (sm_90): one memory
// transaction where per-element atomics would take 2 or 4.
#define TESSEL_RED_ADD_VECTOR(ORDER, SEM)                                                   \
  __device__ inline void red_add_v2_impl(ORDER, float *p, float a, float b) {               \
    asm volatile("red.global." SEM ".gpu.add.v2.f32 [%0], {%1, %2};"                        \
                 :: "l"(p), "f"(a), "f"(b) : "memory");                                     \
  }                                                                                         \
  __device__ inline void red_add_v4_impl(ORDER, float *p, float a, float b, float c,        \
                                         float d) {                                         \
    asm volatile("red.global." SEM ".gpu.add.v4.f32 [%0], {%1, %2, %3, %4};"                \
                 :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");                     \
  }
TESSEL_RED_ADD_VECTOR(order_relaxed, "relaxed")
TESSEL_RED_ADD_VECTOR(order_release, "release")
#undef TESSEL_RED_ADD_VECTOR

template <class Order> __device__ inline void red_add_v2(float *p, float a, float b) {
  red_add_v2_impl(Order{}, p, a, b);
}
template <class Order>
__device__ inline void red_add_v4(float *p, float a, float b, float c, float d) {
  red_add_v4_impl(Order{}, p, a, b, c, d);
}

template <class Order, class T> __device__ inline void atomic_add(T *p, T v) {
  if (Order::sc) asm volatile("fence.sc.gpu;" ::: "memory");
  atomic_add_impl(Order{}, p, v);
}

// Every local rank's address of a symmetric buffer (tile.peer), passed by
// value after the buffer's extents (rt::kMaxPeers entries).
struct PeerTable {
  unsigned long long at[8];
};
// A tensor map per rank of a symmetric tensor (tile.peer tiles moved by
// TMA), passed as one __grid_constant__ parameter; the kernel takes the
// address of rank r's.
struct PeerTensorMaps {
  TensorMap at[8];
};

// Flags between blocks and GPUs: epochs published with release stores and
// awaited with acquire loads, both at system scope.
__device__ inline void flag_store(int *p, int v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// A count that only grows: blocks add what they have done, a waiter waits
// for the total.
__device__ inline void flag_add(int *p, int v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ inline unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Describes a failure in the trap report (when the runtime has set one;
/// the first thread to get there writes it), then traps. `timeout_ms` < 0
/// marks a broken rule rather than a timed-out wait: `what` is the message,
/// `held` and `expected` the values it names.
__device__ inline void trap_with_report(const char *what, int held, int expected,
                                        unsigned long long address, long long timeout_ms) {
  tessel_trap_report *r = tessel_trap_report_slot;
  if (r && atomicCAS(&r->state, 0u, 1u) == 0u) {
    r->held = held;
    r->expected = expected;
    r->address = address;
    r->timeout_ms = timeout_ms;
    r->block[0] = blockIdx.x;
    r->block[1] = blockIdx.y;
    r->block[2] = blockIdx.z;
    int i = 0;
    for (; i + 1 < static_cast<int>(sizeof(r->what)) && what[i]; ++i) r->what[i] = what[i];
    r->what[i] = 0;
    __threadfence_system();
    atomicExch(&r->state, 2u);
    __threadfence_system();
  } else if (r) {
    // Another thread is writing it: a trap now would end the kernel before
    // the report is whole. Wait for it, a millisecond at most.
    unsigned long long start = global_timer_ns();
    while (*static_cast<volatile unsigned *>(&r->state) == 1u &&
           global_timer_ns() - start < 1000000ull) {
    }
  }
  __trap();
}

/// Spins until *p reaches v (wrap-safe epoch comparison). After
/// `timeout_ms` it describes itself in the trap report (when the runtime
/// has set one) and traps; the host reads the report once the context has
/// died. No printf: a call in the kernel makes ptxas serialize every wgmma
/// of the function (C7510).
__device__ inline void flag_wait(const int *p, int v, long long timeout_ms, const char *what) {
  unsigned long long start = global_timer_ns();
  while (true) {
    int f;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(f) : "l"(p) : "memory");
    if (static_cast<int>(static_cast<unsigned>(f) - static_cast<unsigned>(v)) >= 0) return;
    if (global_timer_ns() - start > static_cast<unsigned long long>(timeout_ms) * 1000000ull)
      trap_with_report(what, f, v, reinterpret_cast<unsigned long long>(p), timeout_ms);
    __nanosleep(100);
  }
}

} // namespace tessel
