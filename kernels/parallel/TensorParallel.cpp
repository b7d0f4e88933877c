//===- TensorParallel.cpp - tessel::tp's overlapped GEMMs -----------------===//
//
// The two halves of a tensor-parallel MLP, each GEMM split into one step per
// rank's rows so that the copy engines move one step's rows while the SMs
// multiply another's:
//
//  allgather_gemm: own rows first (no wait); the copy engines publish a
//    into symmetric memory, the ranks meet (the epoch handshake), and the
//    peers' rows are pulled one after another in step order; step s
//    multiplies rank (me + s)'s rows once they have arrived.
//  gemm_reducescatter: step s computes the partial rows of rank
//    (me + 1 + s), its own last; each peer's partial is pushed by a copy
//    lane into that rank's inbox while the next step runs; after the ranks
//    meet (every push landed), partial_sum adds the inbox in rank order.
//
// Symmetric buffers are used on alternate calls (by parity): a rank can
// start its next call, and overwrite a buffer, while a slower peer still
// reads the last one; it cannot get two calls ahead, since each call's
// handshake needs every peer's, which follows that peer's previous call.
//
//===----------------------------------------------------------------------===//
#include "SpAttentionProblem.h"
#include "common/LibraryCalls.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Nccl.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using rt::Communicator;
using rt::Driver;
using rt::ScalarType;

namespace {

enum class Layer { allGather, reduceScatter };
/// The scales of 8-bit inputs (tessel::gemm's): none, one each, or a's
/// rows' and b's columns'.
enum class Scaling { none, tensor, row };

int64_t roundUp256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

/// What every rank must agree on: rows of a step (m), the inner and outer
/// extents of the GEMM each step runs, the types and the transport.
struct TpProblem {
  Layer layer;
  int ranks = 1;
  int64_t m = 0, k = 0, n = 0;
  ScalarType in = ScalarType::BF16, out = ScalarType::BF16;
  Scaling scaling = Scaling::none;
  Transport transport = Transport::copyEngine;
  std::string why, arch;
  int64_t inBytes() const { return rt::scalarBytes(in); }
  int64_t outBytes() const { return rt::scalarBytes(out); }
  /// f32 scales of one step's rows of a: m, 1 or none.
  int64_t scaleRows() const {
    return scaling == Scaling::row ? m : scaling == Scaling::tensor ? 1 : 0;
  }
  /// Where a step's scales start in a step's bytes (allgather).
  int64_t scaleOffset() const { return roundUp256(m * k * inBytes()); }
  /// One step of allgather's moves (its rows of a, then their scales; whole
  /// 256 bytes, so that every step's rows are aligned for TMA) or of
  /// reducescatter's partial.
  int64_t stepBytes() const {
    return layer == Layer::allGather ? roundUp256(scaleOffset() + scaleRows() * 4)
                                     : m * n * outBytes();
  }
};

const char *callName(Layer l) {
  return l == Layer::allGather ? "tp::allgather_gemm" : "tp::gemm_reducescatter";
}

std::string describe(const TpProblem &p, const tp::Options &o) {
  const char *scales[] = {"none", "tensor", "row"};
  return fmt::format("{} ranks={} m={} k={} n={} in={} out={} scale={} transpose_b={} arch={} "
                     "transport={}{}",
                     callName(p.layer), p.ranks, p.m, p.k, p.n, name(dtypeOf(p.in)),
                     name(dtypeOf(p.out)), scales[int(p.scaling)], o.transposeB ? 1 : 0, p.arch,
                     transportName(p.transport),
                     o.config ? " config=" + gemmSettings().describe(*o.config) : "");
}

/// This rank's views as one problem; throws naming the view and rule.
TpProblem problemOf(Communicator &comm, Layer layer, const TensorView &a, const TensorView &b,
                    const TensorView &c, const tp::Options &o) {
  TpProblem p;
  p.layer = layer;
  p.ranks = comm.size();
  requireView(a, "a", 2,
              {ScalarType::BF16, ScalarType::F16, ScalarType::F8E4M3, ScalarType::F8E5M2});
  requireView(b, "b", 2, {a.dtype});
  bool eightBit = rt::scalarBytes(a.dtype) == 1;
  if (eightBit) requireView(c, "c", 2, {ScalarType::BF16, ScalarType::F16, ScalarType::F32});
  else requireView(c, "c", 2, {a.dtype, ScalarType::F32});
  if (eightBit && !o.transposeB)
    throw Error(fmt::format("a is {}: 8-bit a and b are K-major, b [n, K] with transposeB, as "
                            "the tensor cores read them",
                            a.str()));
  int device = commonDevice({&a, &b, &c});
  if (device != comm.device())
    throw Error(fmt::format("the tensors are on device {}, the communicator's rank on device {}",
                            device, comm.device()));
  p.in = a.dtype;
  p.out = c.dtype;
  p.k = a.shape[1];
  int64_t bk = o.transposeB ? b.shape[1] : b.shape[0];
  p.n = o.transposeB ? b.shape[0] : b.shape[1];
  if (bk != p.k)
    throw Error(fmt::format("a is {} and b is {}{}: a has {} columns but op(b) has {} rows",
                            a.str(), b.str(), o.transposeB ? " (transposed)" : "", p.k, bk));
  if (layer == Layer::allGather) {
    p.m = a.shape[0];
    requireShape(c, "c", {p.ranks * p.m, p.n});
  } else {
    if (a.shape[0] % p.ranks)
      throw Error(fmt::format("a is {}: its {} rows do not split into {} ranks' equal shares",
                              a.str(), a.shape[0], p.ranks));
    p.m = a.shape[0] / p.ranks;
    requireShape(c, "c", {p.m, p.n});
  }
  if (o.scaleA || o.scaleB) {
    if (!o.scaleA || !o.scaleB)
      throw Error("give both scaleA and scaleB (or neither): the product is scaled by both");
    requireView(*o.scaleA, "scaleA", 1, {ScalarType::F32});
    requireView(*o.scaleB, "scaleB", 1, {ScalarType::F32});
    commonDevice({&a, &*o.scaleA, &*o.scaleB});
    if (o.scaleA->shape[0] == 1 && o.scaleB->shape[0] == 1) {
      p.scaling = Scaling::tensor;
    } else {
      requireShape(*o.scaleA, "scaleA (a's rows)", {a.shape[0]});
      requireShape(*o.scaleB, "scaleB (op(b)'s columns)", {p.n});
      p.scaling = Scaling::row;
    }
  }
  // Each step's views start m rows into a caller's tensor (allgather: c;
  // reducescatter: a): at 16-byte boundaries, as the GEMM reads them, or
  // no step could run on some rank.
  auto requireStepAligned = [&](const TensorView &v, const char *what, int64_t bytes) {
    if (bytes % 16)
      throw Error(fmt::format("{} is {}: each rank's {} rows of it are {} bytes, not a multiple "
                              "of 16, so the steps' views would not be 16-byte aligned",
                              what, v.str(), p.m, bytes));
  };
  if (layer == Layer::allGather) {
    requireStepAligned(c, "c", p.m * p.n * p.outBytes());
  } else {
    requireStepAligned(a, "a", p.m * p.k * p.inBytes());
    requireStepAligned(c, "c (each step's partial)", p.m * p.n * p.outBytes());
  }
  if (p.k == 0 && p.m * p.n > 0)
    throw Error(fmt::format("a is {}: K = 0 leaves c undefined", a.str()));
  p.arch = targetFor(o.arch, device);
  p.transport = chooseTransport(comm, o.transport, p.why, /*hierarchicalOk=*/false);
  return p;
}

/// A contiguous [rows, cols] view at `address`.
TensorView matrixAt(CUdeviceptr address, ScalarType t, int64_t rows, int64_t cols, int device) {
  return TensorView::contiguous(address, t, {rows, cols}, device);
}

/// Streams the steps' GEMMs take turns on: a step's first blocks fill the
/// SMs its predecessor's last wave leaves idle (a step of 1024 rows by 7168
/// columns is 1.7 waves of 128 x 256 tiles on an H100).
constexpr int kWorkStreams = 2;

/// One rank's buffers for one problem.
struct TpPlan : SpPlan {
  TpProblem problem;
  Communicator *comm = nullptr;
  /// Symmetric: allgather, the published rows (2 x [m, k]); reducescatter,
  /// the inbox of every rank's partial (2 x [N, m, n]). Empty for nccl.
  std::unique_ptr<rt::SymmetricBuffer> shared, flags;
  /// allgather: the gathered rows [N, m, k]; reducescatter: the partials
  /// that leave, [N, m, n] (nccl: the whole [N * m, n]).
  std::unique_ptr<rt::DeviceBuffer> local;
  /// reducescatter with row scales: each step's scales, 256 bytes aligned
  /// (a step's rows of scaleA start at m * 4 bytes, which need not be).
  std::unique_ptr<rt::DeviceBuffer> stepScales;
  /// One per rank (reducescatter: the pushes to it; allgather: this
  /// rank's pulls, a mark per step), urgent so that the handshakes on them
  /// start while a step's GEMM still has blocks queued (at default
  /// priority they waited for its last wave: 0.1-0.25 ms exposed per call
  /// on H100s); and the streams the steps take turns on.
  std::unique_ptr<CopyLanes> lanes, work;
  std::vector<CUevent> computed;    // reducescatter: each peer's partial
  CUevent lastCall = nullptr;       // the end of this plan's last call
  uint32_t epoch = 0;
  uint64_t calls = 0;
  std::shared_ptr<Kernel> sum;

  ~TpPlan() override {
    Driver &d = Driver::get();
    // No peer's copy into or out of this rank's symmetric memory may still
    // run when the buffers' destructors (collective) unmap it.
    d.setDevice(comm->device());
    d.api().cuCtxSynchronize();
    for (CUevent e : computed) d.api().cuEventDestroy(e);
    if (lastCall) d.api().cuEventDestroy(lastCall);
  }
};

std::unique_ptr<TpPlan> makePlan(Communicator &comm, const TpProblem &p, bool &compiled) {
  auto plan = std::make_unique<TpPlan>();
  plan->problem = p;
  plan->comm = &comm;
  Driver &d = Driver::get();
  d.setDevice(comm.device());
  TESSEL_CU(d, cuEventCreate, &plan->lastCall, CU_EVENT_DISABLE_TIMING);
  int64_t step = p.stepBytes();
  // nccl: also a 256-byte slot per rank for one scale each (a GEMM's scale
  // views are 16-byte aligned).
  int64_t slots = p.transport == Transport::nccl ? p.ranks * 256 : 0;
  plan->local = std::make_unique<rt::DeviceBuffer>(
      size_t(std::max<int64_t>(p.ranks * step + slots, 1)));
  if (p.transport == Transport::nccl) return plan;
  if (p.layer == Layer::reduceScatter && p.scaling == Scaling::row)
    plan->stepScales = std::make_unique<rt::DeviceBuffer>(size_t(p.ranks * roundUp256(p.m * 4)));
  plan->flags = exchangeFlags(comm, 2 * size_t(p.ranks) * sizeof(uint32_t));
  int64_t sharedBytes = p.layer == Layer::allGather ? 2 * step : 2 * p.ranks * step;
  plan->shared = std::make_unique<rt::SymmetricBuffer>(comm, size_t(std::max<int64_t>(sharedBytes, 1)));
  plan->lanes = std::make_unique<CopyLanes>(p.ranks, p.ranks, /*urgent=*/true);
  plan->work = std::make_unique<CopyLanes>(kWorkStreams);
  if (p.layer == Layer::reduceScatter) {
    plan->computed.resize(p.ranks);
    for (CUevent &e : plan->computed) TESSEL_CU(d, cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
    PartialSumConfig sum;
    sum.dtype = dtypeOf(p.out);
    plan->sum = cachedKernel(fmt::format("partial_sum {}", partialSumSettings().describe(sum)),
                             p.arch, [&] { return partialSum(sum); }, compiled);
    // Loaded now: a module load waits for running kernels, and a peer's
    // handshake may soon spin on this rank's.
    plan->sum->loadedKernel().resourceUsage();
  }
  return plan;
}

/// A step's GEMM options: the call's, with `scaleA` for the step's rows.
GemmCallOptions gemmOptions(const tp::Options &o, std::optional<TensorView> scaleA = {}) {
  GemmCallOptions g;
  g.transposeB = o.transposeB;
  g.arch = o.arch;
  g.config = o.config;
  if (scaleA) {
    g.scaleA = scaleA;
    g.scaleB = o.scaleB;
  }
  return g;
}

/// `rows` f32 scales at `address`, when there are scales.
std::optional<TensorView> scalesAt(const TpProblem &p, CUdeviceptr address, int64_t rows,
                                   int device) {
  if (p.scaling == Scaling::none) return std::nullopt;
  return TensorView::contiguous(address, ScalarType::F32, {rows}, device);
}

ncclDataType_t ncclTypeOf(ScalarType t) {
  return t == ScalarType::BF16 ? ncclBfloat16 : t == ScalarType::F16 ? ncclFloat16 : ncclFloat32;
}

/// The collective and the whole GEMM, one after the other.
Choice runNccl(Communicator &comm, TpPlan &plan, const TensorView &a, const TensorView &b,
               const TensorView &c, const tp::Options &o, CUstream stream) {
  const TpProblem &p = plan.problem;
  rt::Nccl &nccl = rt::Nccl::get();
  ncclComm_t nc = comm.nccl();
  int device = comm.device();
  Choice g;
  if (p.layer == Layer::allGather) {
    // The rows as bytes, then their scales.
    int64_t rowBytes = p.m * p.k * p.inBytes();
    CUdeviceptr scales = plan.local->ptr() + uint64_t(roundUp256(p.ranks * rowBytes));
    nccl.check(nccl.api().ncclAllGather(reinterpret_cast<const void *>(a.data),
                                        reinterpret_cast<void *>(plan.local->ptr()),
                                        size_t(rowBytes), ncclInt8, nc, stream),
               "ncclAllGather", nc);
    if (p.scaling != Scaling::none)
      nccl.check(nccl.api().ncclAllGather(reinterpret_cast<const void *>(o.scaleA->data),
                                          reinterpret_cast<void *>(scales), size_t(p.scaleRows()),
                                          ncclFloat32, nc, stream),
                 "ncclAllGather", nc);
    if (p.scaling != Scaling::tensor)
      return gemm(matrixAt(plan.local->ptr(), p.in, p.ranks * p.m, p.k, device), b, c,
                  gemmOptions(o, scalesAt(p, scales, p.ranks * p.m, device)), stream);
    // One scale per rank: a GEMM per rank's rows, its scale moved to an
    // aligned slot.
    CUdeviceptr slots = plan.local->ptr() + uint64_t(p.ranks * p.stepBytes());
    copyPitched(scales, 4, slots, 256, 4, p.ranks, stream);
    for (int src = 0; src < p.ranks; ++src)
      g = gemm(matrixAt(plan.local->ptr() + uint64_t(src * rowBytes), p.in, p.m, p.k, device), b,
               matrixAt(c.data + uint64_t(src * p.m * p.n * p.outBytes()), p.out, p.m, p.n,
                        device),
               gemmOptions(o, scalesAt(p, slots + uint64_t(256 * src), 1, device)), stream);
  } else {
    g = gemm(a, b, matrixAt(plan.local->ptr(), p.out, p.ranks * p.m, p.n, device),
             gemmOptions(o, o.scaleA), stream);
    nccl.check(nccl.api().ncclReduceScatter(reinterpret_cast<const void *>(plan.local->ptr()),
                                            reinterpret_cast<void *>(c.data), size_t(p.m * p.n),
                                            ncclTypeOf(p.out), ncclSum, nc, stream),
               "ncclReduceScatter", nc);
  }
  return g;
}

/// One call of a plan on `stream`: it starts after the plan's last call,
/// its lanes and work streams fork from `stream` and join it again, and
/// its end is marked for the next call, also when a step throws (a GEMM
/// that cannot compile): no stream of the plan runs on past the call.
class CallScope {
public:
  CallScope(TpPlan &plan, CUstream stream) : plan(plan), stream(stream) {
    TESSEL_CU(Driver::get(), cuStreamWaitEvent, stream, plan.lastCall, 0);
  }
  CallScope(const CallScope &) = delete;
  CallScope &operator=(const CallScope &) = delete;
  /// The call's parity: which half of the symmetric buffers it uses.
  int64_t fork() {
    plan.lanes->fork(stream);
    plan.work->fork(stream);
    forked = true;
    return int64_t(plan.calls++ & 1);
  }
  void join() {
    if (!forked) return;
    forked = false;
    plan.lanes->join(stream);
    plan.work->join(stream);
  }
  ~CallScope() {
    try {
      join();
      TESSEL_CU(Driver::get(), cuEventRecord, plan.lastCall, stream);
    } catch (const Error &) {
    }
  }

private:
  TpPlan &plan;
  CUstream stream;
  bool forked = false;
};

/// allgather_gemm over the copy engines (see the file comment).
Choice runAllGather(Communicator &comm, TpPlan &plan, const TensorView &a, const TensorView &b,
                    const TensorView &c, const tp::Options &o, CUstream stream) {
  const TpProblem &p = plan.problem;
  Driver &d = Driver::get();
  CopyLanes &lanes = *plan.lanes;
  const int n = p.ranks, me = comm.localRank(), device = comm.device();
  CallScope call(plan, stream);
  const int64_t step = p.stepBytes(), parity = call.fork();
  // The own rows first: this GEMM loads its module before any handshake of
  // this call can spin.
  auto cRows = [&](int r) {
    return matrixAt(c.data + uint64_t(r * p.m * p.n * p.outBytes()), p.out, p.m, p.n, device);
  };
  auto work = [&](int s) { return (*plan.work)[s % kWorkStreams]; };
  Choice g = gemm(a, b, cRows(me), gemmOptions(o, o.scaleA), work(0));
  CUstream own = lanes[me];
  CUdeviceptr published = plan.shared->local() + uint64_t(parity * step);
  TESSEL_CU(d, cuMemcpyAsync, published, a.data, size_t(p.m * p.k * p.inBytes()), own);
  if (p.scaling != Scaling::none)
    TESSEL_CU(d, cuMemcpyAsync, published + uint64_t(p.scaleOffset()), o.scaleA->data,
              size_t(p.scaleRows() * 4), own);
  plan.epoch = startExchangeCall(comm, *plan.flags, plan.epoch, own);
  // One pull after another, in the steps' order: every rank pulls from
  // its s-th successor at once, so each source serves one puller at a time
  // and step 1's rows arrive after one pull, not after all of them
  // (pulling from every peer at once shared the links: none of the
  // all-gather was hidden at four H100s, M 8192).
  for (int s = 1; s < n; ++s) {
    int src = (me + s) % n;
    TESSEL_CU(d, cuMemcpyAsync, plan.local->ptr() + uint64_t(src * step),
              plan.shared->peer(src) + uint64_t(parity * step), size_t(step), own);
    lanes.mark(me, s);
  }
  for (int s = 1; s < n; ++s) {
    int src = (me + s) % n;
    lanes.waitForMark(work(s), me, s);
    CUdeviceptr rows = plan.local->ptr() + uint64_t(src * step);
    gemm(matrixAt(rows, p.in, p.m, p.k, device), b, cRows(src),
         gemmOptions(o, scalesAt(p, rows + uint64_t(p.scaleOffset()), p.scaleRows(), device)),
         work(s));
  }
  call.join();
  return g;
}

/// gemm_reducescatter over the copy engines (see the file comment).
Choice runReduceScatter(Communicator &comm, TpPlan &plan, const TensorView &a, const TensorView &b,
                        const TensorView &c, const tp::Options &o, CUstream stream) {
  const TpProblem &p = plan.problem;
  Driver &d = Driver::get();
  CopyLanes &lanes = *plan.lanes;
  const int n = p.ranks, me = comm.localRank(), device = comm.device();
  const int64_t step = p.stepBytes(), scalePitch = roundUp256(p.m * 4);
  CallScope call(plan, stream);
  // Each step's row scales at an aligned place, before the steps fork.
  if (plan.stepScales)
    copyPitched(o.scaleA->data, p.m * 4, plan.stepScales->ptr(), scalePitch, p.m * 4, n, stream);
  const int64_t parity = call.fork();
  // Rank q's partial for rank `to` lands at inbox(to, q).
  auto inbox = [&](CUdeviceptr base, int from) {
    return base + uint64_t((parity * n + from) * step);
  };
  Choice g;
  for (int s = 0; s < n; ++s) {
    int to = (me + 1 + s) % n;
    CUstream on = (*plan.work)[s % kWorkStreams];
    TensorView rows = matrixAt(a.data + uint64_t(to * p.m * p.k * p.inBytes()), p.in, p.m, p.k,
                               device);
    CUdeviceptr target = to == me ? inbox(plan.shared->local(), me)
                                  : plan.local->ptr() + uint64_t(to * step);
    std::optional<TensorView> scales = o.scaleA;
    if (p.scaling == Scaling::row)
      scales = scalesAt(p, plan.stepScales->ptr() + uint64_t(to * scalePitch), p.m, device);
    Choice made = gemm(rows, b, matrixAt(target, p.out, p.m, p.n, device),
                       gemmOptions(o, scales), on);
    if (s == 0) g = made;
    if (to == me) continue;
    TESSEL_CU(d, cuEventRecord, plan.computed[to], on);
    TESSEL_CU(d, cuStreamWaitEvent, lanes[to], plan.computed[to], 0);
    TESSEL_CU(d, cuMemcpyAsync, inbox(plan.shared->peer(to), me), target, size_t(step), lanes[to]);
    lanes.mark(to, 0);
  }
  // Every push of this rank done, then every rank's.
  CUstream own = lanes[me];
  for (int r = 0; r < n; ++r)
    if (r != me) lanes.waitForMark(own, r, 0);
  plan.epoch = startExchangeCall(comm, *plan.flags, plan.epoch, own);
  call.join();
  plan.sum->launch({rt::LaunchArg::integer(n), rt::LaunchArg::integer(p.m * p.n),
                    rt::LaunchArg::buffer(inbox(plan.shared->local(), 0), {n, p.m * p.n}),
                    rt::LaunchArg::buffer(c.data, {p.m * p.n})},
                   stream);
  return g;
}

Choice runLayer(Communicator &comm, Layer layer, const TensorView &a, const TensorView &b,
                const TensorView &c, const tp::Options &o, CUstream stream) {
  TpProblem problem;
  std::string description = agreeOnProblem(comm, callName(layer), [&] {
    problem = problemOf(comm, layer, a, b, c, o);
    return describe(problem, o);
  });
  Choice choice;
  choice.arch = problem.arch;
  std::string form = fmt::format("{} transport={} ({}) ranks={}", callName(layer),
                                 transportName(problem.transport), problem.why, problem.ranks);
  if (problem.m * problem.n == 0) {
    choice.config = form + " | nothing to compute";
    return choice;
  }
  bool compiled = false;
  TpPlan &plan = planOf<TpPlan>(comm, description, [&] {
    return makePlan(comm, problem, compiled);
  });
  Driver &d = Driver::get();
  d.setDevice(comm.device());
  Choice g;
  if (plan.problem.transport == Transport::nccl) {
    // After the plan's last call, whose buffers this one reuses (the
    // caller may change streams between calls).
    TESSEL_CU(d, cuStreamWaitEvent, stream, plan.lastCall, 0);
    g = runNccl(comm, plan, a, b, c, o, stream);
    TESSEL_CU(d, cuEventRecord, plan.lastCall, stream);
  } else {
    g = layer == Layer::allGather ? runAllGather(comm, plan, a, b, c, o, stream)
                                  : runReduceScatter(comm, plan, a, b, c, o, stream);
  }
  choice.compiled = compiled || g.compiled;
  choice.config = fmt::format("{} steps={} | {}", form,
                              plan.problem.transport == Transport::nccl ? 1 : problem.ranks,
                              g.config);
  return choice;
}

} // namespace

Choice tp::allgather_gemm(Communicator &comm, const TensorView &a, const TensorView &b,
                          const TensorView &c, const Options &o, CUstream stream) {
  return runLayer(comm, Layer::allGather, a, b, c, o, stream);
}

Choice tp::gemm_reducescatter(Communicator &comm, const TensorView &a, const TensorView &b,
                              const TensorView &c, const Options &o, CUstream stream) {
  return runLayer(comm, Layer::reduceScatter, a, b, c, o, stream);
}

void tp::release(Communicator &comm) { releasePlans(comm); }
