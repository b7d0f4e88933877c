//===- Graph.h - capturing launches into a CUDA graph -----------*- C++ -*-===//
//
// Kernel launches (Kernel::launch, LoadedKernel::launch and the library's
// calls that allocate nothing) can be captured into a CUDA graph and
// replayed: the arguments, tensor maps included, are fixed when captured.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_RUNTIME_GRAPH_H
#define TESSEL_RUNTIME_GRAPH_H

#include <cuda.h>
#include <cstddef>
#include <functional>

namespace tessel::rt {

/// The work `record` enqueues on a stream, captured once and replayed as a
/// CUDA graph on the thread's current device.
class CapturedGraph {
public:
  /// Captures what `record(stream)` enqueues on `stream`, which must be a
  /// stream of the caller's (the legacy default stream cannot be
  /// captured). Work `record` enqueues on other streams joins the graph
  /// only through events it records and waits on. Throws tessel::Error
  /// naming the call that cannot be captured; the stream is left out of
  /// capture either way.
  CapturedGraph(CUstream stream, const std::function<void(CUstream)> &record);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph &) = delete;
  CapturedGraph &operator=(const CapturedGraph &) = delete;
  /// Enqueues one run of the graph on `stream`.
  void replay(CUstream stream);
  /// The graph's nodes (kernels, memsets, copies).
  size_t nodes() const;

private:
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
};

/// Whether `stream` is being captured into a graph right now.
bool isCapturing(CUstream stream);

} // namespace tessel::rt

#endif
