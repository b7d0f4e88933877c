//===- KernelSpec.h - what the runtime needs to launch a kernel -*- C++ -*-===//
//
// The contract between the compiler and the runtime, free of MLIR: the
// parameter list of the generated `extern "C" __global__` function, the grid
// as a function of the index parameters, the block size and shared memory.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_KERNELSPEC_H
#define TESSEL_RUNTIME_KERNELSPEC_H

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tessel::rt {

/// New types are appended: a cached kernel's spec stores the numbers.
enum class ScalarType { I1, I32, I64, Index, F16, BF16, F32, F64, I8, U8, F8E4M3, F8E5M2, UE8M0 };

/// Bytes of one value in generated code (index is a 32-bit int).
int scalarBytes(ScalarType t);
const char *scalarName(ScalarType t);

/// One kernel parameter. A buffer is passed as a device pointer followed by
/// one 32-bit int per dynamic dimension, in order; a scalar by value.
struct ParamSpec {
  bool isBuffer = false;
  ScalarType type = ScalarType::F32; // element type for buffers
  std::vector<int64_t> shape;        // buffers: -1 marks a dynamic dimension
  /// Buffers the kernel also reads or writes on other ranks (tile.peer):
  /// after the extents comes a table of every local rank's address of the
  /// buffer (kMaxPeers 64-bit addresses).
  bool peers = false;
};

/// Ranks a peer table holds (the GPUs of one node).
inline constexpr int kMaxPeers = 8;

/// One token of a grid extent in postfix order.
struct GridToken {
  enum Kind { Const, Symbol, Add, Mul, FloorDiv, CeilDiv, Mod } kind;
  int64_t value = 0; // the constant, or the index of the symbol
};

/// A TMA tensor map the kernel takes after its parameters, encoded at
/// launch from the buffer argument `param`.
struct TensorMapSpec {
  int param = 0;
  std::vector<int64_t> box; // elements per dimension, outermost first
  int swizzle = 0;          // 0, 32, 64 or 128 bytes
  /// One map per local rank (kMaxPeers, from the parameter's peer table,
  /// unused ones zero): the kernel picks a peer's (tile.peer by TMA).
  bool peers = false;
};

struct KernelSpec {
  std::string name;
  std::vector<ParamSpec> params;
  /// One postfix program per grid dimension; symbols are the index
  /// parameters in order.
  std::vector<std::vector<GridToken>> grid;
  int threads = 0;
  int64_t sharedBytes = 0;
  std::vector<TensorMapSpec> tensorMaps;
  /// Blocks per thread block cluster along each grid dimension (1, 1, 1:
  /// no clusters); the grid must divide into whole clusters.
  std::array<unsigned, 3> cluster = {1, 1, 1};
  /// The grid counts work tiles; the launch is one-dimensional, at most as
  /// many blocks as the device runs at once, and the kernel walks the tiles.
  bool persistent = false;

  /// Evaluates the grid for the given index-parameter values.
  std::array<unsigned, 3> evaluateGrid(const std::vector<int64_t> &symbols) const;
};

/// The spec as one line of text, and back (for the compile cache); decode
/// returns false on anything malformed.
std::string encodeSpec(const KernelSpec &spec);
bool decodeSpec(const std::string &text, KernelSpec &out);

} // namespace tessel::rt

#endif
