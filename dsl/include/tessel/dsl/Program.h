//===- Program.h - the Tessel C++ tile DSL ----------------------*- C++ -*-===//
//
// A kernel is written as C++ calls that build `tile` dialect IR as they run.
// Every call takes the caller's std::source_location, which becomes the op's
// MLIR location, so errors found by the DSL, the verifiers or the passes
// point at the user's line.
//
//   Program p("scale");
//   Expr n = p.sym("N");
//   Tensor x = p.tensor("x", {n}, DType::f32);
//   p.kernel({ceil_div(n, 256)}, 128, [&](Expr bx) {
//     Buffer xt = x.tile({bx * 256}, {256});
//     parallel({256}, [&](Expr i) { xt(i) = xt(i) * 2.0; });
//   });
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_DSL_PROGRAM_H
#define TESSEL_DSL_PROGRAM_H

#include "tessel/runtime/Error.h"

#include <climits>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
class ModuleOp;
class OpBuilder;
class Value;
class Location;
} // namespace mlir

namespace tessel {

using SrcLoc = std::source_location;

/// f8e4m3 is OCP FP8 E4M3 (finite, max 448, NaN 0x7f; torch's float8_e4m3fn),
/// f8e5m2 is E5M2 (IEEE-like, max 57344). ue8m0 is the OCP MX scale type
/// (torch's float8_e8m0fnu): 2^(bits - 127), no sign, zero or infinity,
/// 0xff NaN; casts to it round up to a power of two (an MX block's scale,
/// so that amax / scale stays within the element format's range). u8
/// values are moved by copies and gemms; element code reads and writes
/// them as i32.
enum class DType { f16, bf16, f32, f64, i32, i64, index, i1, i8, u8, f8e4m3, f8e5m2, ue8m0 };
enum class Space { global, shared, fragment, local, tmem };
enum class MemoryOrder { relaxed, acquire, release, acq_rel, seq_cst };
const char *name(DType t);
int64_t byteSize(DType t);

class Program;
struct ExprNode;

/// An index or scalar expression. Constants and symbols (and arithmetic on
/// them) stay symbolic, so they can size grids on the host; anything that
/// touches a kernel value becomes IR where it is written.
class Expr {
public:
  /// No value yet (to be assigned on each path, as a C++ variable is);
  /// reading it is an error at the line that reads it.
  Expr();
  Expr(int v);
  Expr(int64_t v);
  Expr(double v);
  explicit Expr(std::shared_ptr<ExprNode> n) : node(std::move(n)) {}
  /// The value this expression has in IR at the current insertion point.
  mlir::Value value(DType as = DType::index) const;
  DType type() const;
  /// Known constant, if any.
  bool isConstant(int64_t *v = nullptr) const;
  std::shared_ptr<ExprNode> node;
};

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
/// Integer `/` rounds toward negative infinity and `%` has the divisor's
/// sign, as in Python: -7 / 4 == -2 and -7 % 4 == 1 (in kernels, constants
/// and host expressions alike; ceil_div(-7, 4) == -1). Floats divide.
Expr operator/(Expr a, Expr b);
Expr operator%(Expr a, Expr b);
Expr operator-(Expr a);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
Expr operator==(Expr a, Expr b);
/// NaN != x is true, as in C++.
Expr operator!=(Expr a, Expr b);
/// C++'s logical operators: an operand is true where nonzero. Both sides
/// are always evaluated (element code has no short circuit).
Expr operator&&(Expr a, Expr b);
Expr operator||(Expr a, Expr b);
Expr operator!(Expr a);
/// Bit operations on integers, as C++ does them: i8 and u8 operands are
/// promoted to i32 first (u8 zero-extended, i8 sign-extended), `>>` of a
/// signed value shifts its sign in, and a constant shift amount outside
/// [0, bits) is an error (C++ leaves it undefined). Float operands are an
/// error; reinterpret bits with bitcast().
Expr operator&(Expr a, Expr b);
Expr operator|(Expr a, Expr b);
Expr operator^(Expr a, Expr b);
Expr operator<<(Expr a, Expr b);
Expr operator>>(Expr a, Expr b);
Expr operator~(Expr a);
Expr ceil_div(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr min(Expr a, Expr b);
Expr exp(Expr a);
Expr exp2(Expr a);
/// 2^x with one register in `fmaEvery` of each thread's fragment computed by
/// a polynomial on the FMA pipe rather than the special-function unit
/// (tile.exp2): for element code that MUFU.EX2's rate holds back, such as an
/// FP8 attention's softmax. 1 puts every element on the FMA pipe. The two
/// forms agree to about 1e-4 relative; f32, f16 or bf16 operands.
Expr exp2(Expr a, int64_t fmaEvery);
Expr log(Expr a);
/// Hyperbolic tangent (CUDA's tanhf: about 2 ulp): soft-capped logits,
/// GELU's tanh approximation.
Expr tanh(Expr a);
Expr sqrt(Expr a);
Expr abs(Expr a);
Expr select(Expr cond, Expr a, Expr b);
/// C++'s conversions: floats to integers truncate, anything nonzero is a
/// true i1, and true is 1.
Expr cast(Expr a, DType to, SrcLoc loc = SrcLoc::current());
/// The same bits read as another type of their width: f32 and i32, or f64
/// and i64 (`bitcast(Expr(0x4b000000 | (q & 15)), DType::f32) - 8388608.0`
/// turns a 4-bit code into a float without a conversion instruction).
Expr bitcast(Expr a, DType to, SrcLoc loc = SrcLoc::current());

class Ref;

/// A tile size that indexes one element of a dimension and drops it.
inline constexpr int64_t drop = 0;

/// A buffer, or a rectangular window of one, in a memory space.
class Buffer {
public:
  Buffer() = default;
  Ref operator()(Expr i, SrcLoc loc = SrcLoc::current()) const;
  Ref operator()(Expr i, Expr j, SrcLoc loc = SrcLoc::current()) const;
  Ref operator()(Expr i, Expr j, Expr k, SrcLoc loc = SrcLoc::current()) const;
  Ref operator()(Expr i, Expr j, Expr k, Expr l, SrcLoc loc = SrcLoc::current()) const;
  Ref operator()(Expr i, Expr j, Expr k, Expr l, Expr m, SrcLoc loc = SrcLoc::current()) const;
  Ref operator()(Expr i, Expr j, Expr k, Expr l, Expr m, Expr n,
                 SrcLoc loc = SrcLoc::current()) const;
  Ref at(std::vector<Expr> idx, SrcLoc loc = SrcLoc::current()) const;
  /// The window of static `sizes` at `offsets`. A size of `drop` takes the
  /// one index at its offset and leaves the dimension out of the tile:
  /// `q.tile({b, row, h, 0}, {drop, 64, drop, 128})` is a 64x128 tile of a
  /// [batch, seq, heads, dim] tensor. A window of a global tensor may reach
  /// outside it on either side (an offset below 0 at run time, or past the
  /// extent): elements there read 0 and writes to them are dropped.
  Buffer tile(std::vector<Expr> offsets, std::vector<int64_t> sizes,
              SrcLoc loc = SrcLoc::current()) const;
  /// Copy `index` of a buffer from alloc_shared_stages (a whole buffer of
  /// its shape).
  Buffer stage(Expr index, SrcLoc loc = SrcLoc::current()) const;
  const std::vector<int64_t> &shape() const { return dims; } // -1 where dynamic
  DType dtype() const { return elt; }
  Space space() const { return where; }
  int64_t rank() const { return dims.size(); }
  mlir::Value value() const;
  /// Another rank's copy of a tensor (a peer() result) seen only up to
  /// `limits`, as Tensor::bounded sees a tensor: `peer(cache,
  /// r).bounded({len, 64}).tile(...)`. Other buffers are an error.
  Buffer bounded(std::vector<Expr> limits, SrcLoc loc = SrcLoc::current()) const;
  /// Wraps an IR value (used by the DSL's own builders).
  static Buffer wrap(void *opaqueValue, std::vector<int64_t> shape, DType type, Space space);

private:
  friend class Program;
  friend class Tensor;
  void *impl = nullptr; // mlir::Value's opaque pointer
  int param = -1;       // kernel parameter index, for tensors
  std::vector<int64_t> dims;
  DType elt = DType::f32;
  Space where = Space::global;
};

/// One element of a buffer, readable and assignable inside element code.
class Ref {
public:
  Ref(Buffer b, std::vector<Expr> idx, SrcLoc loc) : buf(std::move(b)), indices(std::move(idx)), where(loc) {}
  operator Expr() const;
  Ref &operator=(const Expr &v);
  Ref &operator=(const Ref &r) { return *this = static_cast<Expr>(r); }
  Ref &operator+=(const Expr &v);
  const Buffer &buffer() const { return buf; }
  const std::vector<Expr> &index() const { return indices; }
  SrcLoc location() const { return where; }

private:
  Buffer buf;
  std::vector<Expr> indices;
  SrcLoc where;
};

/// A kernel parameter in global memory; its dimensions are constants or
/// symbols.
class Tensor : public Buffer {
public:
  const std::vector<Expr> &extents() const { return exts; }
  /// The tensor seen only up to `limits` (one per dimension, run-time
  /// values): its tiles read zero past a limit and drop writes there, as
  /// past the tensor's extent. For a sequence's rows inside a cache, say:
  /// `cache.bounded({len, 64}).tile({row, 0}, {64, 64})`. Never carried by
  /// TMA.
  Buffer bounded(std::vector<Expr> limits, SrcLoc loc = SrcLoc::current()) const;
  const std::string &name() const { return label; }

private:
  friend class Program;
  std::vector<Expr> exts;
  std::string label;
};

/// Rank `rank`'s copy of a symmetric kernel tensor (the node's GPUs each
/// hold one; the launch passes every rank's address with
/// rt::LaunchArg::symmetric): tiles of it are read and written over NVLink
/// with ordinary copies (plain loads and stores, or cp.async), loaded by TMA
/// in pipelined loops and reduce-added into by AtomicPath::tma, through a
/// tensor map per rank (plain TMA stores into it are not issued).
Buffer peer(const Tensor &tensor, Expr rank, SrcLoc loc = SrcLoc::current());

/// A tensor extent computed from symbols (see ParamInfo::extents).
inline constexpr int64_t kExtentExpression = INT64_MIN;

/// The value of a host expression (constants and index symbols, as tensor
/// extents and grids use) for the symbols' values in declaration order.
/// Throws tessel::Error for anything else, or a division by zero.
int64_t evaluate(const Expr &e, const std::vector<int64_t> &symbols);

/// Describes what a kernel expects at launch, for binding host arguments.
struct ParamInfo {
  std::string name;
  bool isTensor = false;
  DType dtype = DType::f32;
  /// For tensors: per dimension, the constant extent, -(1 + symbol index),
  /// or kExtentExpression for an expression of symbols (`groups + 1`).
  std::vector<int64_t> extents;
  /// For tensors: each dimension's extent as written.
  std::vector<Expr> extentExprs;
};

class Program {
public:
  explicit Program(std::string name, SrcLoc loc = SrcLoc::current());
  ~Program();
  Program(Program &&) noexcept;
  Program &operator=(Program &&) noexcept;

  /// A symbolic dimension: a kernel parameter of type index, never negative
  /// (a launch with a negative value is an error; a signed value is a
  /// scalar of an integer type).
  Expr sym(const std::string &name, SrcLoc loc = SrcLoc::current());
  /// A scalar kernel parameter.
  Expr scalar(const std::string &name, DType type, SrcLoc loc = SrcLoc::current());
  /// A global tensor parameter.
  Tensor tensor(const std::string &name, std::vector<Expr> shape, DType type,
                SrcLoc loc = SrcLoc::current());

  /// The kernel body, called once with one block index per grid dimension.
  void kernel(std::vector<Expr> grid, int threads, std::function<void(Expr)> body,
              SrcLoc loc = SrcLoc::current());
  void kernel(std::vector<Expr> grid, int threads, std::function<void(Expr, Expr)> body,
              SrcLoc loc = SrcLoc::current());
  void kernel(std::vector<Expr> grid, int threads, std::function<void(Expr, Expr, Expr)> body,
              SrcLoc loc = SrcLoc::current());

  const std::string &name() const;
  const std::vector<ParamInfo> &params() const;
  mlir::MLIRContext &context();
  mlir::ModuleOp module();
  /// The module as text (generic or custom form).
  std::string str(bool generic = false);

  // Internal: the program whose kernel is being built on this thread.
  static Program &current(SrcLoc loc);
  mlir::OpBuilder &builder();
  mlir::Value paramValue(size_t index, SrcLoc loc);
  size_t symbolParam(int64_t symbol) const;
  static void setLocation(SrcLoc loc);
  mlir::Location location(SrcLoc loc);
  struct Impl;

private:
  void buildKernel(std::vector<Expr> grid, int threads, int dims,
                   const std::function<void(std::vector<Expr>)> &body, SrcLoc loc);
  std::unique_ptr<Impl> impl;
};

/// A tessel::Error whose message starts with the user's file:line.
[[noreturn]] void fail(SrcLoc loc, const std::string &message);

// Buffers.
/// `name` labels the buffer in dumps, `tessel compile --show-layouts` and
/// layout pictures.
Buffer alloc_shared(std::vector<int64_t> shape, DType type, std::string name = "",
                    SrcLoc loc = SrcLoc::current());
Buffer alloc_fragment(std::vector<int64_t> shape, DType type, std::string name = "",
                      SrcLoc loc = SrcLoc::current());
Buffer alloc_local(std::vector<int64_t> shape, DType type, std::string name = "",
                   SrcLoc loc = SrcLoc::current());
/// Tensor memory (sm_100a): [64 or 128 rows, columns] of f32/i32, or of
/// f16/bf16 packed two to a 32-bit column (`unpacked`: one to a column, the
/// format of a 16-bit accumulator). tessel-tmem-allocation places it.
/// `stages` copies of a shared buffer for a hand-scheduled pipeline; pick
/// one with Buffer::stage. The code that fills and drains them orders them
/// with mbarriers (tessel-insert-barriers leaves them alone).
Buffer alloc_shared_stages(int64_t stages, std::vector<int64_t> shape, DType type,
                           std::string name = "", SrcLoc loc = SrcLoc::current());
Buffer alloc_tmem(std::vector<int64_t> shape, DType type, std::string name = "",
                  bool unpacked = false, SrcLoc loc = SrcLoc::current());
/// A tensor-memory buffer over the first columns of `of` (same rows;
/// 16-bit values packed): P written over the scores S it came from. It takes
/// no columns of its own.
Buffer alias_tmem(const Buffer &of, std::vector<int64_t> shape, DType type,
                  SrcLoc loc = SrcLoc::current());
/// Shared buffers: storage offset of element (i0, i1, ...) =
/// sum(i_d * strides[d]), e.g. padded rows.
void annotate_layout(const Buffer &b, std::vector<int64_t> strides, SrcLoc loc = SrcLoc::current());

// Loops.
void parallel(std::vector<int64_t> extents, std::function<void(std::vector<Expr>)> body,
              SrcLoc loc = SrcLoc::current());
void parallel(int64_t n, std::function<void(Expr)> body, SrcLoc loc = SrcLoc::current());
void parallel(int64_t m, int64_t n, std::function<void(Expr, Expr)> body,
              SrcLoc loc = SrcLoc::current());
/// How a pipelined loop may be scheduled.
enum class WarpSpecialize { automatic, on, off };
struct PipelineOptions {
  /// sm_90a: split into a TMA producer warpgroup and consumer warpgroups
  /// (automatic: whenever every load can be TMA). A loop that cannot be
  /// split runs without a producer and warns why (Kernel::remarks), `on`
  /// or automatic.
  WarpSpecialize warp_specialize = WarpSpecialize::automatic;
  /// sm_90a, split loops with two consumer warpgroups and at least two
  /// stages: the warpgroups take turns at the tensor cores, each one's
  /// element-wise work running while the other's gemms do (ignored on other
  /// targets).
  bool pingpong = false;
  /// sm_90a, split loops whose body is a plain gemm into an accumulator
  /// cleared before the loop: each iteration's wgmmas keep running while
  /// the next iteration issues its own (the stage they read is released an
  /// iteration late; needs two stages or more; ignored on other targets).
  bool overlap_mma = false;
};
/// A serial loop whose global-to-shared copies are loaded `stages - 1`
/// iterations ahead of the compute that reads them.
void pipelined(Expr count, int stages, std::function<void(Expr)> body, SrcLoc loc = SrcLoc::current());
void pipelined(Expr count, int stages, PipelineOptions options, std::function<void(Expr)> body,
               SrcLoc loc = SrcLoc::current());
/// Block rasterization for L2 reuse: remaps the block indices (bx along a
/// grid of grid_x, by along grid_y) so that consecutive blocks walk down
/// `panel` rows before moving right, and returns the new (bx, by).
std::pair<Expr, Expr> use_swizzle(Expr bx, Expr by, Expr grid_x, Expr grid_y, int panel,
                                  SrcLoc loc = SrcLoc::current());
/// Persistent blocks, at the top of a kernel body: the kernel launches at
/// most as many blocks as the device runs at once (one-dimensional, never
/// more than its grid's blocks, which should count the same tiles), and
/// `body` runs once per work tile of `tiles` (innermost first: tile (x, y)
/// is number y * tiles[0] + x), each block taking every num-blocks-th tile.
/// A warp-specialized loop in the body keeps its pipeline running from one
/// tile to the next: the producer loads the next tile's stages while the
/// consumers finish the current one.
void persistent(std::vector<Expr> tiles, std::function<void(std::vector<Expr>)> body,
                SrcLoc loc = SrcLoc::current());
/// How persistent blocks share the tiles. Each round hands one tile to each
/// block, in tile order.
enum class TileWalk {
  /// Block b takes tile b of every round.
  round_robin,
  /// Rounds alternate direction (block b takes tile b of one round and the
  /// b-th from its end of the next), ending on a forward round. With tiles
  /// ordered longest first (causal attention's row blocks) round robin
  /// gives block 0 the longest tile of every round, 3-6% more work than
  /// the average at 4k-8k; alternating rounds evens it to under 1%.
  serpentine,
};
void persistent(std::vector<Expr> tiles, TileWalk walk,
                std::function<void(std::vector<Expr>)> body, SrcLoc loc = SrcLoc::current());
/// Launches the kernel's blocks in thread block clusters (sm_90a and newer)
/// of `dims` blocks along each grid dimension (at most 8 in all): blocks
/// (bx, by) with the same bx / dims[0] and by / dims[1] run together and can
/// share multicast loads. The grid must divide into whole clusters.
void cluster_dims(std::vector<int64_t> dims, SrcLoc loc = SrcLoc::current());

// Hand-scheduled warp specialization (sm_90a), as tessel-warp-specialize
// builds it: roles, mbarriers and TMA copies.
/// A shared buffer of `count` mbarriers, each initialised for `arrivals`.
Buffer alloc_barriers(int64_t count, int64_t arrivals, std::string name = "",
                      SrcLoc loc = SrcLoc::current());
/// Runs `body` on threads [first, first + threads) only; collective ops
/// inside are collective over them. `max_registers` (whole warpgroups)
/// becomes setmaxnreg.
void role(int64_t first, int64_t threads, std::function<void()> body, int64_t max_registers = 0,
          SrcLoc loc = SrcLoc::current());
/// One thread arrives on barriers[index] expecting `bytes` more bytes.
void mbarrier_expect_tx(const Buffer &barriers, Expr index, int64_t bytes,
                        SrcLoc loc = SrcLoc::current());
/// Each warp of the executing threads arrives once on barriers[index].
void mbarrier_arrive(const Buffer &barriers, Expr index, SrcLoc loc = SrcLoc::current());
/// Each executing thread arrives once (a barrier counting threads): each
/// thread's release covers its own writes, as compute-sanitizer models it.
void mbarrier_arrive_each(const Buffer &barriers, Expr index, SrcLoc loc = SrcLoc::current());
/// Every executing thread waits for the phase with this parity.
void mbarrier_wait(const Buffer &barriers, Expr index, Expr parity, SrcLoc loc = SrcLoc::current());
/// barriers[index] gets one arrival once every tcgen05 MMA the executing
/// threads issued so far is complete (tcgen05.commit by their first thread).
void mma_commit(const Buffer &barriers, Expr index, SrcLoc loc = SrcLoc::current());
/// A TMA copy of a global window into a whole shared buffer, completing on
/// barriers[index].
void copy_async(const Buffer &src, const Buffer &dst, const Buffer &barriers, Expr index,
                SrcLoc loc = SrcLoc::current());
void serial(Expr count, std::function<void(Expr)> body, SrcLoc loc = SrcLoc::current());
/// A serial loop carrying scalar values from one iteration to the next:
/// `body(i, carried)` returns the next values (each of its initial value's
/// type); the loop returns the values after its last iteration, the initial
/// ones when `count` is 0.
///   Expr sum = serial(4, Expr(0), [&](Expr i, Expr acc) { return acc + off(i); });
std::vector<Expr> serial(Expr count, std::vector<Expr> init,
                         std::function<std::vector<Expr>(Expr, std::vector<Expr>)> body,
                         SrcLoc loc = SrcLoc::current());
Expr serial(Expr count, Expr init, std::function<Expr(Expr, Expr)> body,
            SrcLoc loc = SrcLoc::current());
void if_(Expr cond, std::function<void()> then, std::function<void()> otherwise = nullptr,
         SrcLoc loc = SrcLoc::current());

// Flags between blocks and GPUs (multi-GPU kernels).
/// Once every thread of the block has finished its earlier writes, one
/// thread stores `value` into flags[index] with release semantics at system
/// scope: what the block wrote is visible to whoever waits for the value,
/// on any GPU. Flags are i32 global tensors holding epochs that only grow.
void signal(const Buffer &flags, std::vector<Expr> index, Expr value,
            SrcLoc loc = SrcLoc::current());
/// The same, adding `value` to flags[index] (an atomic reduction, release
/// at system scope) instead of storing it: blocks count into one flag, and
/// the waiter waits (wait()) for the total, a count that only grows.
void signal_add(const Buffer &flags, std::vector<Expr> index, Expr value,
                SrcLoc loc = SrcLoc::current());
/// The block waits until flags[index] reaches `value` (wrap-safe epoch
/// comparison), then sees what the signalling side wrote before its signal
/// (TMA loads too). Past `timeout_ms` the kernel traps; the CUDA error that
/// follows on the host names the flag, its value and the block. In a
/// `pipelined` body, waits placed before the body's copies (alone, or in an
/// if_ of waits) guard those copies: they are issued with the copies, ahead
/// of the compute, by the producer warpgroup when the loop is split.
void wait(const Buffer &flags, std::vector<Expr> index, Expr value, int64_t timeout_ms = 10000,
          SrcLoc loc = SrcLoc::current());

// Tile operations.
void copy(const Buffer &src, const Buffer &dst, SrcLoc loc = SrcLoc::current());
struct CopyOptions {
  /// Every block of the kernel's cluster copies this same global tile
  /// (cluster_dims): a warp-specialized loop's TMA load fetches it once for
  /// the cluster and delivers it to every block. Elsewhere each block loads
  /// it itself.
  bool multicast = false;
};
void copy(const Buffer &src, const Buffer &dst, CopyOptions options, SrcLoc loc = SrcLoc::current());
void fill(const Buffer &dst, Expr value, SrcLoc loc = SrcLoc::current());
void clear(const Buffer &dst, SrcLoc loc = SrcLoc::current());
/// How gemm splits its tile over warps (warpgroups for wgmma): as square as
/// possible per warp, warps along M only, or along N only.
enum class WarpPolicy { square, full_row, full_col };
/// The tensor-core instruction: chosen by target and shape, or forced.
/// A gemm whose accumulator is in tensor memory is always tcgen05 (sm_100a).
enum class GemmInstruction { automatic, mma_sync, wgmma, tcgen05 };
struct GemmOptions {
  bool transpose_a = false, transpose_b = false, clear_accum = false;
  WarpPolicy policy = WarpPolicy::square;
  GemmInstruction instruction = GemmInstruction::automatic;
  /// tcgen05 only: issue the MMAs and go on; mma_commit says when they are
  /// done (hand-scheduled warp specialization). Otherwise the gemm is
  /// complete when the op is.
  bool issue_only = false;
  /// MX block scales (tcgen05, FP8 operands): shared ue8m0 tiles of 512-byte
  /// atoms, K group by K group, A's one per group, B's one per 128 columns
  /// ([K / 128, 512] and [K / 128, ceil(N / 128) * 512], or [32, 16] and
  /// [atoms, 32, 16] for one group), the scale of row r and K block j (of
  /// 32) at byte 16 (r % 32) + 4 (r / 32 % 4) + j of its atom (see tile.gemm).
  std::optional<Buffer> scale_a, scale_b;
  /// An 8-bit A in registers (an accumulator-shaped fragment) is read with
  /// K permuted within each 16: a thread's pairs at 2q and 8 + 2q (q = lane
  /// % 4) go to the instruction as the four values at 4q. B's K must be
  /// permuted the same way; the compiler copies B so (a remark says what
  /// it costs) unless B is already stored with logical k = 8 b + 2 q + e
  /// at position 4 q + 2 b + e of each 16 (b, e in {0, 1}), which this
  /// option says (register_k_position gives the position).
  bool b_register_k_order = false;
};
/// Where logical K index k of a B stored for an 8-bit A in registers sits
/// (GemmOptions::b_register_k_order): k = 16 g + 8 b + 2 q + e at
/// 16 g + 4 q + 2 b + e.
Expr register_k_position(Expr k);
void gemm(const Buffer &a, const Buffer &b, const Buffer &c, GemmOptions options = {},
          SrcLoc loc = SrcLoc::current());
void reduce_sum(const Buffer &src, const Buffer &dst, int dim, bool clear = true,
                SrcLoc loc = SrcLoc::current());
void reduce_max(const Buffer &src, const Buffer &dst, int dim, bool clear = true,
                SrcLoc loc = SrcLoc::current());
void reduce_min(const Buffer &src, const Buffer &dst, int dim, bool clear = true,
                SrcLoc loc = SrcLoc::current());
void reduce_absmax(const Buffer &src, const Buffer &dst, int dim, bool clear = true,
                   SrcLoc loc = SrcLoc::current());
/// dst += src, element by element, atomically.
void atomic_add(const Buffer &dst, const Buffer &src, MemoryOrder order = MemoryOrder::relaxed,
                SrcLoc loc = SrcLoc::current());
/// Who performs a region atomic_add: the threads, element by element, or
/// TMA (sm_90a: a shared buffer added into a global window with
/// cp.reduce.async.bulk.tensor, relaxed).
enum class AtomicPath { threads, tma };
void atomic_add(const Buffer &dst, const Buffer &src, MemoryOrder order, AtomicPath path,
                SrcLoc loc = SrcLoc::current());
/// One element += value, atomically.
void atomic_add(const Ref &dst, Expr value, MemoryOrder order = MemoryOrder::relaxed,
                SrcLoc loc = SrcLoc::current());

} // namespace tessel

#endif
