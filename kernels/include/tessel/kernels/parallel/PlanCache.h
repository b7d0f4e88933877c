//===- PlanCache.h - the multi-GPU calls' plans -----------------*- C++ -*-===//
//
// The plans of the multi-GPU calls (sp_attention, tp) by problem. Each
// holds symmetric memory and streams; the cache keeps the most recently
// used and frees the rest, in an order every rank shares.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_PLANCACHE_H
#define TESSEL_KERNELS_PARALLEL_PLANCACHE_H

#include <list>
#include <memory>
#include <string>
#include <utility>

namespace tessel::kernels {

/// A plan of any multi-GPU call (sp_attention, tp), kept by problem.
struct SpPlan {
  virtual ~SpPlan() = default;
};

/// Plans by problem, the `capacity` most recently used kept. Each holds
/// symmetric memory, and a job whose shapes vary (serving, with a new
/// token count each call) would otherwise keep one per shape it ever saw
/// until it ran out of memory. Freeing a plan is collective; it happens at
/// the same call on every rank, since every rank makes the same calls in
/// the same order (each call's agreement on its problem checks that).
class PlanCache {
public:
  explicit PlanCache(size_t capacity) : capacity(capacity) {}
  ~PlanCache() { clear(); }
  /// The plan for `key`, made by `make` when there is none, after freeing
  /// the least recently used plans past the capacity (so their memory is
  /// back before the new plan takes its own); `beforeFreeing` runs first,
  /// once, when any is freed (the device's work on them must be done).
  template <class Make, class BeforeFreeing>
  SpPlan &get(const std::string &key, Make &&make, BeforeFreeing &&beforeFreeing) {
    for (auto it = recent.begin(); it != recent.end(); ++it)
      if (it->first == key) {
        recent.splice(recent.begin(), recent, it);
        return *recent.front().second;
      }
    if (!recent.empty() && recent.size() >= capacity) beforeFreeing();
    while (!recent.empty() && recent.size() >= capacity) recent.pop_back();
    std::unique_ptr<SpPlan> made = make();
    recent.emplace_front(key, std::move(made));
    return *recent.front().second;
  }
  /// Frees every plan, least recently used first.
  void clear() {
    while (!recent.empty()) recent.pop_back();
  }
  size_t size() const { return recent.size(); }

private:
  size_t capacity;
  std::list<std::pair<std::string, std::unique_ptr<SpPlan>>> recent; // most recent first
};

/// The plans a communicator keeps. (Sixteen: a tensor-parallel model has
/// about four GEMM problems per token count, and a server sees a few token
/// counts, beside attention's.)
inline constexpr size_t kPlansKept = 16;

} // namespace tessel::kernels

#endif
