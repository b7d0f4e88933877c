//===- TensorParallel.cpp - tessel run/bench ag_gemm|gemm_rs --------------===//
//
// The tensor-parallel layers on one process per GPU. `run` checks every
// rank's c against float64 over the same inputs (all of them on small
// problems, sampled rows on large ones) and, where NCCL runs, against the
// nccl transport. `bench` times the overlapped call against its parts: the
// whole GEMM alone, NCCL's collective alone, and the two one after the other
// (the nccl transport), and says how much of the communication is hidden.
//
//===----------------------------------------------------------------------===//
#include "MultiGpu.h"
#include "tessel/Tessel.h"
#include "tessel/Testing.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/harness/TensorParallel.h"
#include "tessel/runtime/Communicator.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Nccl.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::harness;
using namespace tessel::rt;
using tessel::testing::HostTensor;

namespace {

// M: all ranks' tokens; K and N: the GEMM each rank runs (ag_gemm: K the
// hidden size, N the rank's columns; gemm_rs: K the rank's slice, N the
// hidden size). The checked defaults are ragged; the bench's are Llama-70B's
// MLP at four ranks.
// dtype e4m3 or e5m2: FP8 a and b (b K-major: transpose_b defaults to 1)
// with `scale` row (the default), tensor or none; out defaults to bf16.
const Params kTpDefaults = {{"M", "1000"},   {"K", "392"}, {"N", "520"},      {"dtype", "bf16"},
                            {"out", ""},       {"scale", ""}, {"transpose_b", ""}, {"transport", ""}};
const Params kTpBenchShape = {{"M", "8192"},   {"K", "8192"}, {"N", "7168"},      {"dtype", "bf16"},
                              {"out", ""},       {"scale", ""}, {"transpose_b", ""}, {"transport", ""}};

using harness::TpRankInputs;
using Scales = harness::TpScales;

struct TpRun {
  bool allGather = true;
  int64_t m = 0, k = 0, n = 0; // M all ranks' rows
  DType in = DType::bf16, out = DType::bf16;
  Scales scales = Scales::none;
  bool transposeB = false;
  std::string transport;
  int64_t rowsPerRank(int ranks) const { return m / ranks; }
};

TpRun runFrom(bool allGather, const Params &given, bool bench, int ranks) {
  const char *command = allGather ? "ag_gemm" : "gemm_rs";
  Params p = mergeParams(given, bench ? kTpBenchShape : kTpDefaults, command);
  TpRun r;
  r.allGather = allGather;
  auto get = [&](const char *key, int64_t lo) {
    return parseInteger(p.at(key), lo, INT32_MAX, std::string("parameter ") + key);
  };
  r.m = get("M", 0);
  r.k = get("K", 1);
  r.n = get("N", 0);
  r.in = choiceParam<DType>(p, "dtype",
                            {{"bf16", DType::bf16}, {"f16", DType::f16}, {"e4m3", DType::f8e4m3},
                             {"e5m2", DType::f8e5m2}});
  bool eightBit = r.in == DType::f8e4m3 || r.in == DType::f8e5m2;
  r.out = p.at("out").empty() ? (eightBit ? DType::bf16 : r.in)
                              : choiceParam<DType>(p, "out", {{"bf16", DType::bf16},
                                                              {"f16", DType::f16},
                                                              {"f32", DType::f32}});
  if (p.at("scale").empty()) p["scale"] = eightBit ? "row" : "none";
  r.scales = choiceParam<Scales>(
      p, "scale", {{"none", Scales::none}, {"tensor", Scales::tensor}, {"row", Scales::row}});
  if (r.scales != Scales::none && !eightBit)
    throw Error(fmt::format("{}: scale={} scales 8-bit inputs; dtype={} has none", command,
                            p.at("scale"), p.at("dtype")));
  if (p.at("transpose_b").empty()) p["transpose_b"] = eightBit ? "1" : "0";
  r.transposeB = flagParam(p, "transpose_b");
  r.transport = p.at("transport");
  // The default M grows to a multiple of the ranks; a given one must split.
  if (ranks > 0 && !given.count("M")) r.m = (r.m + ranks - 1) / ranks * ranks;
  if (ranks > 0 && r.m % ranks)
    throw Error(fmt::format("{}: M={} rows do not split into {} ranks' equal shares", command, r.m,
                            ranks));
  return r;
}

/// The layer as the shared inputs and reference see it.
harness::TpShape shapeOf(const TpRun &r, int ranks) {
  return {r.allGather, r.m / ranks, r.k, r.n, r.in, r.transposeB, r.scales};
}

constexpr uint64_t kSeed = 0x7e55e1;

struct DeviceInputs {
  std::unique_ptr<DeviceBuffer> a, b, c, scaleA, scaleB;
  TensorView av, bv, cv;
  std::optional<TensorView> sa, sb;
};

/// `host` (f32 scales) on the device, and its view, when there are any.
void uploadScales(const HostTensor &host, int device, std::unique_ptr<DeviceBuffer> &buffer,
                  std::optional<TensorView> &view) {
  if (host.size() == 0) return;
  buffer = testing::upload(host);
  view = testing::viewOf(*buffer, host, device);
}
DeviceInputs deviceInputs(const TpRun &r, int ranks, int device, const TpRankInputs &mine) {
  DeviceInputs d;
  d.a = testing::upload(mine.a);
  d.b = testing::upload(mine.b);
  int64_t cRows = r.allGather ? r.m : r.m / ranks;
  d.c = testing::poisoned(HostTensor(r.out, {cRows, r.n}));
  d.av = testing::viewOf(*d.a, mine.a, device);
  d.bv = testing::viewOf(*d.b, mine.b, device);
  d.cv = testing::viewOf(*d.c, HostTensor(r.out, {cRows, r.n}), device);
  uploadScales(mine.scaleA, device, d.scaleA, d.sa);
  uploadScales(mine.scaleB, device, d.scaleB, d.sb);
  return d;
}

Choice callLayer(Communicator &comm, const TpRun &r, const DeviceInputs &d,
                 const std::string &transport) {
  tp::Options o;
  o.transposeB = r.transposeB;
  o.transport = transport;
  o.scaleA = d.sa;
  o.scaleB = d.sb;
  return r.allGather ? tp::allgather_gemm(comm, d.av, d.bv, d.cv, o, comm.stream())
                     : tp::gemm_reducescatter(comm, d.av, d.bv, d.cv, o, comm.stream());
}

bool ncclRuns(Communicator &comm, std::string &why) {
  std::vector<int> devices = comm.localDevices();
  std::sort(devices.begin(), devices.end());
  if (std::adjacent_find(devices.begin(), devices.end()) != devices.end()) {
    why = "ranks share a GPU (virtual ranks), which NCCL refuses";
    return false;
  }
  return Nccl::available(&why);
}

int checkRank(Communicator &comm, const TpRun &r) {
  int ranks = comm.size(), me = comm.rank();
  std::vector<TpRankInputs> all;
  for (int q = 0; q < ranks; ++q)
    all.push_back(harness::tpRankInputs(shapeOf(r, ranks), ranks, q, kSeed));
  DeviceInputs d = deviceInputs(r, ranks, comm.device(), all[me]);
  int64_t cRows = r.allGather ? r.m : r.m / ranks;
  // Every row when the float64 reference is cheap, else every 37th.
  double work = double(cRows) * r.n * r.k * (r.allGather ? 1 : ranks);
  int64_t stride = work < 2e9 ? 1 : 37;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < cRows; i += stride) rows.push_back(i);
  std::vector<double> ref = harness::tpReference(shapeOf(r, ranks), me, all, rows);
  auto errorOf = [&](const std::string &transport, std::string &config) {
    d.c->fillBytes(0xff);
    // Twice: the second call runs on the other half of the symmetric memory.
    for (int i = 0; i < 2; ++i) config = callLayer(comm, r, d, transport).config;
    TESSEL_CU(Driver::get(), cuStreamSynchronize, comm.stream());
    HostTensor c(r.out, {cRows, r.n});
    testing::download(*d.c, c);
    std::vector<float> sampled;
    for (int64_t row : rows)
      sampled.insert(sampled.end(), c.values.begin() + row * r.n,
                     c.values.begin() + (row + 1) * r.n);
    return testing::relativeError(sampled, ref);
  };
  std::string config, ncclConfig, why;
  double error = errorOf(r.transport, config);
  // A product of 16-bit or FP8 inputs rounds only into c.
  double tolerance = testing::toleranceFor(r.out == DType::f32 ? DType::bf16 : r.out);
  bool ok = error < tolerance;
  std::string nccl = "NCCL not compared: ";
  if (ncclRuns(comm, why)) {
    double ncclError = errorOf("nccl", ncclConfig);
    ok = ok && ncclError < tolerance;
    nccl = fmt::format("the nccl transport: rel error {:.2e}", ncclError);
  } else {
    nccl += why;
  }
  fmt::print("rank {} (device {}): {} M={} K={} N={} {}->{}{}: rel error {:.2e} against float64 "
             "({} rows), tolerance {:.0e}; {}; {} — {}\n",
             me, comm.device(), r.allGather ? "ag_gemm" : "gemm_rs", r.m, r.k, r.n, name(r.in),
             name(r.out), r.transposeB ? " transpose_b" : "", error, rows.size(), tolerance, nccl,
             config, ok ? "PASS" : "FAIL");
  tp::release(comm);
  return ok ? 0 : 1;
}

/// `count` random elements of type t (finite, about [-2, 2]), made on the
/// host quickly.
std::unique_ptr<DeviceBuffer> randomValues(int64_t count, uint64_t seed, DType t) {
  bool eightBit = t == DType::f8e4m3 || t == DType::f8e5m2;
  std::vector<uint16_t> halves(eightBit ? 0 : count);
  std::vector<uint8_t> bytes(eightBit ? count : 0);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < count; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    uint16_t sign = uint16_t((x >> 63) << 15), bits = uint16_t(x >> 20);
    if (t == DType::bf16) halves[i] = uint16_t(sign | (0x3c00 + (bits & 0x3ff))); // [2^-7, 2)
    else if (t == DType::f16) halves[i] = uint16_t(sign | (0x2000 + (bits & 0x1bff)));
    else bytes[i] = uint8_t((sign >> 8) | (0x20 + (bits & 0x1f))); // e4m3 [2^-3, 1), e5m2 [2^-7, 0.5)
  }
  auto buffer = std::make_unique<DeviceBuffer>(size_t(count) * (eightBit ? 1 : 2));
  if (eightBit) buffer->upload(bytes.data(), size_t(count));
  else buffer->upload(halves.data(), size_t(count) * 2);
  return buffer;
}

double slowestMedian(Communicator &comm, int reps, const std::function<void()> &work) {
  for (int i = 0; i < 3; ++i) work();
  TESSEL_CU(Driver::get(), cuStreamSynchronize, comm.stream());
  comm.barrier();
  return slowestRank(comm, timeMedian([&](int) { work(); }, 0, reps, comm.stream()));
}

int benchRank(Communicator &comm, const TpRun &r, int reps) {
  int ranks = comm.size(), me = comm.rank(), device = comm.device();
  int64_t m = r.m / ranks, aRows = r.allGather ? m : r.m, cRows = r.allGather ? r.m : m;
  auto a = randomValues(aRows * r.k, 2 * me + 1, r.in), b = randomValues(r.k * r.n, 2 * me + 2, r.in);
  const ScalarType in = testing::scalarTypeOf(r.in), out = testing::scalarTypeOf(r.out);
  DeviceBuffer c(size_t(cRows * r.n) * scalarBytes(out));
  DeviceInputs d;
  d.av = TensorView::contiguous(a->ptr(), in, {aRows, r.k}, device);
  d.bv = TensorView::contiguous(b->ptr(), in,
                                r.transposeB ? std::vector<int64_t>{r.n, r.k}
                                             : std::vector<int64_t>{r.k, r.n},
                                device);
  d.cv = TensorView::contiguous(c.ptr(), out, {cRows, r.n}, device);
  // Scales as the check's (random, [0.25, 2)), for this rank and the whole.
  TpRun whole1 = r;
  whole1.allGather = false;
  TpRankInputs scales = harness::tpRankInputs(shapeOf(whole1, 1), 1, me, kSeed);
  uploadScales(scales.scaleB, device, d.scaleB, d.sb);
  HostTensor rankScales(DType::f32, {r.scales == Scales::row ? aRows : scales.scaleA.size()});
  for (int64_t i = 0; i < rankScales.size(); ++i) rankScales.set(i, scales.scaleA.values[i]);
  uploadScales(rankScales, device, d.scaleA, d.sa);
  std::unique_ptr<DeviceBuffer> wholeScaleBuffer;
  std::optional<TensorView> wholeScales;
  uploadScales(scales.scaleA, device, wholeScaleBuffer, wholeScales);
  std::string config;
  double overlapped = slowestMedian(comm, reps, [&] { config = callLayer(comm, r, d, r.transport).config; });
  // The whole GEMM alone: all M rows against this rank's b.
  auto whole = randomValues(r.m * r.k, 99, r.in);
  DeviceBuffer product(size_t(r.m * r.n) * scalarBytes(out));
  GemmCallOptions go;
  go.transposeB = r.transposeB;
  if (wholeScales) {
    go.scaleA = wholeScales;
    go.scaleB = d.sb;
  }
  TensorView wholeA = TensorView::contiguous(whole->ptr(), in, {r.m, r.k}, device);
  TensorView wholeC = TensorView::contiguous(product.ptr(), out, {r.m, r.n}, device);
  double gemmAlone = slowestMedian(comm, reps, [&] { gemm(wholeA, d.bv, wholeC, go, comm.stream()); });
  // The same GEMM as the layer's N steps of m rows on two streams in turn,
  // without communication: what splitting it costs.
  CUstream steps[2];
  CUevent forked, joined[2];
  Driver &dr = Driver::get();
  for (int i = 0; i < 2; ++i) {
    TESSEL_CU(dr, cuStreamCreate, &steps[i], CU_STREAM_NON_BLOCKING);
    TESSEL_CU(dr, cuEventCreate, &joined[i], CU_EVENT_DISABLE_TIMING);
  }
  TESSEL_CU(dr, cuEventCreate, &forked, CU_EVENT_DISABLE_TIMING);
  int64_t inBytes = scalarBytes(in), outBytes = scalarBytes(out);
  // (A step's row scales are a GEMM's view: 16-byte aligned, or not timed.)
  bool stepsAligned = r.scales != Scales::row || (4 * m) % 16 == 0;
  double stepsAlone = !stepsAligned ? 0 : slowestMedian(comm, reps, [&] {
    TESSEL_CU(dr, cuEventRecord, forked, comm.stream());
    for (int i = 0; i < 2; ++i) TESSEL_CU(dr, cuStreamWaitEvent, steps[i], forked, 0);
    for (int s = 0; s < ranks; ++s) {
      GemmCallOptions step = go;
      if (r.scales == Scales::row)
        step.scaleA = TensorView::contiguous(wholeScales->data + uint64_t(4 * s * m),
                                             ScalarType::F32, {m}, device);
      gemm(TensorView::contiguous(whole->ptr() + uint64_t(s * m * r.k * inBytes), in,
                                  {m, r.k}, device),
           d.bv,
           TensorView::contiguous(product.ptr() + uint64_t(s * m * r.n * outBytes),
                                  out, {m, r.n}, device),
           step, steps[s % 2]);
    }
    for (int i = 0; i < 2; ++i) {
      TESSEL_CU(dr, cuEventRecord, joined[i], steps[i]);
      TESSEL_CU(dr, cuStreamWaitEvent, comm.stream(), joined[i], 0);
    }
  });
  for (int i = 0; i < 2; ++i) {
    dr.api().cuStreamDestroy(steps[i]);
    dr.api().cuEventDestroy(joined[i]);
  }
  dr.api().cuEventDestroy(forked);
  std::string why;
  double commAlone = 0, sequential = 0;
  bool nccl = ncclRuns(comm, why);
  if (nccl) {
    Nccl &n = Nccl::get();
    ncclComm_t nc = comm.nccl();
    ncclDataType_t type = r.out == DType::f32 ? ncclFloat32 : r.out == DType::f16 ? ncclFloat16 : ncclBfloat16;
    commAlone = slowestMedian(comm, reps, [&] {
      if (r.allGather)
        n.check(n.api().ncclAllGather(reinterpret_cast<void *>(a->ptr()),
                                      reinterpret_cast<void *>(whole->ptr()),
                                      size_t(m * r.k * inBytes), ncclInt8, nc, comm.stream()),
                "ncclAllGather", nc);
      else
        n.check(n.api().ncclReduceScatter(reinterpret_cast<void *>(product.ptr()),
                                          reinterpret_cast<void *>(c.ptr()), size_t(m * r.n), type,
                                          ncclSum, nc, comm.stream()),
                "ncclReduceScatter", nc);
    });
    sequential = slowestMedian(comm, reps, [&] { callLayer(comm, r, d, "nccl"); });
  }
  if (me == 0) {
    const char *layer = r.allGather ? "ag_gemm" : "gemm_rs";
    double flops = 2.0 * r.m * r.n * r.k;
    fmt::print("{} on {} ranks, M={} K={} N={} {} (median of {}, slowest rank):\n", layer, ranks,
               r.m, r.k, r.n, name(r.in), reps);
    fmt::print("  tessel::tp overlapped      {:8.3f} ms  {:6.0f} TFLOP/s  {}\n", overlapped,
               flops / overlapped / 1e9, config);
    fmt::print("  the GEMM alone             {:8.3f} ms  {:6.0f} TFLOP/s\n", gemmAlone,
               flops / gemmAlone / 1e9);
    if (stepsAligned)
      fmt::print("  its {} steps alone          {:8.3f} ms  {:6.0f} TFLOP/s  (no communication)\n",
                 ranks, stepsAlone, flops / stepsAlone / 1e9);
    if (nccl) {
      fmt::print("  NCCL {} {} alone  {:8.3f} ms\n", Nccl::get().version(),
                 r.allGather ? "all-gather    " : "reduce-scatter", commAlone);
      fmt::print("  nccl transport (in turn)   {:8.3f} ms  (overlapped {:.2f}x faster)\n", sequential,
                 sequential / overlapped);
      double hidden = (gemmAlone + commAlone - overlapped) / commAlone;
      fmt::print("  communication hidden: {:.0f}% ((GEMM + NCCL - overlapped) / NCCL)\n",
                 100 * hidden);
      fmt::print("TESSEL tp layer={} ranks={} M={} K={} N={} tessel_ms={:.4f} gemm_ms={:.4f} "
                 "comm_ms={:.4f} sequential_ms={:.4f}\n",
                 layer, ranks, r.m, r.k, r.n, overlapped, gemmAlone, commAlone, sequential);
    } else {
      fmt::print("  NCCL not timed: {}\n", why);
    }
  }
  tp::release(comm);
  return 0;
}

} // namespace

int tessel::tensorParallelCommand(bool bench, bool allGather, const Params &params, int ranks,
                                  int reps) {
  return asRanks(
      allGather ? "ag_gemm" : "gemm_rs", bench, ranks,
      [&](int n) { runFrom(allGather, params, bench, n); },
      [&] {
        auto comm = Communicator::fromEnvironment();
        TpRun r = runFrom(allGather, params, bench, comm->size());
        return bench ? benchRank(*comm, r, reps) : checkRank(*comm, r);
      });
}
