//===- Graph.cpp - capturing launches into a CUDA graph -------------------===//
#include "tessel/runtime/Graph.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::rt;

CapturedGraph::CapturedGraph(CUstream stream, const std::function<void(CUstream)> &record) {
  if (!stream)
    throw Error("CapturedGraph: the legacy default stream cannot be captured; create a stream "
                "(cuStreamCreate) and launch on it");
  Driver &d = Driver::get();
  d.makeCurrent();
  // Thread-local mode: other threads' launches and allocations go on
  // while this one captures; this thread's unsafe calls still fail.
  TESSEL_CU(d, cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  try {
    record(stream);
  } catch (...) {
    CUgraph partial = nullptr;
    d.api().cuStreamEndCapture(stream, &partial);
    if (partial) d.api().cuGraphDestroy(partial);
    throw;
  }
  TESSEL_CU(d, cuStreamEndCapture, stream, &graph);
  CUresult r = d.api().cuGraphInstantiateWithFlags(&exec, graph, 0);
  if (r != CUDA_SUCCESS) {
    d.api().cuGraphDestroy(graph);
    graph = nullptr;
    d.check(r, "cuGraphInstantiateWithFlags");
  }
}

CapturedGraph::~CapturedGraph() {
  try {
    Driver &d = Driver::get();
    if (exec) d.api().cuGraphExecDestroy(exec);
    if (graph) d.api().cuGraphDestroy(graph);
  } catch (const Error &) {
  }
}

void CapturedGraph::replay(CUstream stream) {
  Driver &d = Driver::get();
  d.makeCurrent();
  TESSEL_CU(d, cuGraphLaunch, exec, stream);
}

size_t CapturedGraph::nodes() const {
  size_t count = 0;
  TESSEL_CU(Driver::get(), cuGraphGetNodes, graph, nullptr, &count);
  return count;
}

bool tessel::rt::isCapturing(CUstream stream) {
  Driver &d = Driver::get();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  TESSEL_CU(d, cuStreamIsCapturing, stream, &status);
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}
