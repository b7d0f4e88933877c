//===- TensorMapCache.cpp - tensor maps kept per (buffer, shape) ----------===//
#include "tessel/runtime/TensorMapCache.h"

#include <algorithm>

using namespace tessel::rt;

bool TensorMapCache::find(int map, CUdeviceptr address, const std::vector<int64_t> &shape,
                          CUtensorMap *out) {
  int rank = static_cast<int>(shape.size());
  std::lock_guard<std::mutex> lock(mutex);
  if (rank > kMaxRank || map < 0 || size_t(map) >= maps.size()) return false;
  for (const Entry &e : maps[map].entries)
    if (e.rank == rank && e.address == address &&
        std::equal(shape.begin(), shape.end(), e.shape.begin())) {
      *out = e.value;
      return true;
    }
  return false;
}

void TensorMapCache::insert(int map, CUdeviceptr address, const std::vector<int64_t> &shape,
                            const CUtensorMap &value) {
  int rank = static_cast<int>(shape.size());
  if (rank > kMaxRank || map < 0) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (size_t(map) >= maps.size()) maps.resize(map + 1);
  Slots &slots = maps[map];
  Entry &e = slots.entries[slots.next];
  slots.next = (slots.next + 1) % kEntriesPerMap;
  e.address = address;
  e.rank = rank;
  std::copy(shape.begin(), shape.end(), e.shape.begin());
  e.value = value;
  ++inserted;
}
