//===- TensorMapCache.h - tensor maps kept per (buffer, shape) --*- C++ -*-===//
//
// A kernel's tensor map is a function of its descriptor (element type,
// box, swizzle: fixed per kernel) and the buffer's address and extents, so
// a map encoded once is reused by every later launch on the same buffer
// and shape: encoding one costs about as much as the launch itself.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_TENSORMAPCACHE_H
#define TESSEL_RUNTIME_TENSORMAPCACHE_H

#include <cuda.h>
#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

namespace tessel::rt {

/// Safe to use from several threads.
class TensorMapCache {
public:
  /// Entries kept per map of a kernel: a kernel launched over a handful of
  /// buffers in turn (layers, double buffers) finds all of them.
  static constexpr int kEntriesPerMap = 8;
  /// Extents a key holds; TMA's limit.
  static constexpr int kMaxRank = 5;

  /// Copies into `out` the map `map` (its index in the kernel) of a buffer
  /// at `address` with extents `shape` if an entry has them.
  bool find(int map, CUdeviceptr address, const std::vector<int64_t> &shape, CUtensorMap *out);
  /// Keeps `value` as that map, in place of the map's oldest entry when
  /// all are taken. Shapes of more than kMaxRank extents are not kept.
  void insert(int map, CUdeviceptr address, const std::vector<int64_t> &shape,
              const CUtensorMap &value);
  /// How many maps were inserted (for tests and the benchmark).
  uint64_t insertions() const { return inserted; }

private:
  struct Entry {
    CUdeviceptr address = 0;
    std::array<int64_t, kMaxRank> shape{};
    int rank = -1; // -1: empty
    CUtensorMap value;
  };
  struct Slots {
    std::array<Entry, kEntriesPerMap> entries;
    int next = 0; // the entry a miss replaces (oldest first)
  };
  std::mutex mutex;
  std::vector<Slots> maps;
  uint64_t inserted = 0;
};

} // namespace tessel::rt

#endif
