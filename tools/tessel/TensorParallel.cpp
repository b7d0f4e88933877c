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
const Params kTpDefaults = {{"M", "1000"},   {"K", "392"},      {"N", "520"},
                            {"dtype", "bf16"}, {"out", ""},      {"transpose_b", "0"},
                            {"transport", ""}};
const Params kTpBenchShape = {{"M", "8192"},   {"K", "8192"},     {"N", "7168"},
                              {"dtype", "bf16"}, {"out", ""},       {"transpose_b", "0"},
                              {"transport", ""}};

struct TpRun {
  bool allGather = true;
  int64_t m = 0, k = 0, n = 0; // M all ranks' rows
  DType in = DType::bf16, out = DType::bf16;
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
  r.in = choiceParam<DType>(p, "dtype", {{"bf16", DType::bf16}, {"f16", DType::f16}});
  r.out = p.at("out").empty() ? r.in
                              : choiceParam<DType>(p, "out", {{"bf16", DType::bf16},
                                                              {"f16", DType::f16},
                                                              {"f32", DType::f32}});
  r.transposeB = flagParam(p, "transpose_b");
  r.transport = p.at("transport");
  // The default M grows to a multiple of the ranks; a given one must split.
  if (ranks > 0 && !given.count("M")) r.m = (r.m + ranks - 1) / ranks * ranks;
  if (ranks > 0 && r.m % ranks)
    throw Error(fmt::format("{}: M={} rows do not split into {} ranks' equal shares", command, r.m,
                            ranks));
  return r;
}

/// Rank q's inputs, the same on every rank that makes them: a (ag_gemm: its
/// [M / R, K] rows; gemm_rs: its [M, K] slice) and b ([K, N], or [N, K]
/// transposed).
struct RankInputs {
  HostTensor a, b;
};
RankInputs inputsOf(const TpRun &r, int ranks, int q) {
  std::mt19937_64 rng(0x7e55e1 + 977 * uint64_t(q));
  int64_t aRows = r.allGather ? r.m / ranks : r.m;
  RankInputs x{HostTensor(r.in, {aRows, r.k}),
               HostTensor(r.in, r.transposeB ? std::vector<int64_t>{r.n, r.k}
                                             : std::vector<int64_t>{r.k, r.n})};
  testing::randomize(x.a, rng);
  testing::randomize(x.b, rng);
  return x;
}

double bAt(const TpRun &r, const HostTensor &b, int64_t kk, int64_t j) {
  return r.transposeB ? b.values[j * r.k + kk] : b.values[kk * r.n + j];
}

/// Float64 rows `rows` of this rank's c.
std::vector<double> referenceRows(const TpRun &r, int ranks, int me,
                                  const std::vector<RankInputs> &all,
                                  const std::vector<int64_t> &rows) {
  std::vector<double> ref;
  int64_t m = r.m / ranks;
  for (int64_t row : rows)
    for (int64_t j = 0; j < r.n; ++j) {
      double sum = 0;
      if (r.allGather) {
        const HostTensor &a = all[row / m].a;
        for (int64_t kk = 0; kk < r.k; ++kk)
          sum += double(a.values[(row % m) * r.k + kk]) * bAt(r, all[me].b, kk, j);
      } else {
        for (int q = 0; q < ranks; ++q)
          for (int64_t kk = 0; kk < r.k; ++kk)
            sum += double(all[q].a.values[(me * m + row) * r.k + kk]) * bAt(r, all[q].b, kk, j);
      }
      ref.push_back(sum);
    }
  return ref;
}

ScalarType scalarOf(DType t) {
  return t == DType::bf16 ? ScalarType::BF16 : t == DType::f16 ? ScalarType::F16 : ScalarType::F32;
}

struct DeviceInputs {
  std::unique_ptr<DeviceBuffer> a, b, c;
  TensorView av, bv, cv;
};
DeviceInputs deviceInputs(const TpRun &r, int ranks, int device, const RankInputs &mine) {
  DeviceInputs d;
  d.a = testing::upload(mine.a);
  d.b = testing::upload(mine.b);
  int64_t cRows = r.allGather ? r.m : r.m / ranks;
  d.c = testing::poisoned(HostTensor(r.out, {cRows, r.n}));
  d.av = TensorView::contiguous(d.a->ptr(), scalarOf(r.in), mine.a.shape, device);
  d.bv = TensorView::contiguous(d.b->ptr(), scalarOf(r.in), mine.b.shape, device);
  d.cv = TensorView::contiguous(d.c->ptr(), scalarOf(r.out), {cRows, r.n}, device);
  return d;
}

Choice callLayer(Communicator &comm, const TpRun &r, const DeviceInputs &d,
                 const std::string &transport) {
  tp::Options o;
  o.transposeB = r.transposeB;
  o.transport = transport;
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
  std::vector<RankInputs> all;
  for (int q = 0; q < ranks; ++q) all.push_back(inputsOf(r, ranks, q));
  DeviceInputs d = deviceInputs(r, ranks, comm.device(), all[me]);
  int64_t cRows = r.allGather ? r.m : r.m / ranks;
  // Every row when the float64 reference is cheap, else every 37th.
  double work = double(cRows) * r.n * r.k * (r.allGather ? 1 : ranks);
  int64_t stride = work < 2e9 ? 1 : 37;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < cRows; i += stride) rows.push_back(i);
  std::vector<double> ref = referenceRows(r, ranks, me, all, rows);
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
  double tolerance = testing::toleranceFor(r.out == DType::f32 ? r.in : r.out);
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

/// Random bf16/f16 bits in about [-1, 1], made on the host quickly.
std::unique_ptr<DeviceBuffer> randomHalves(int64_t count, uint64_t seed, DType t) {
  std::vector<uint16_t> bits(count);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint16_t &b : bits) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    uint16_t sign = uint16_t((x >> 63) << 15);
    b = t == DType::bf16 ? uint16_t(sign | (0x3c00 + ((x >> 20) & 0x3ff))) // [2^-7, 1)
                         : uint16_t(sign | (0x2000 + ((x >> 20) & 0x1bff)));
  }
  auto buffer = std::make_unique<DeviceBuffer>(size_t(count) * 2);
  buffer->upload(bits.data(), size_t(count) * 2);
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
  auto a = randomHalves(aRows * r.k, 2 * me + 1, r.in), b = randomHalves(r.k * r.n, 2 * me + 2, r.in);
  DeviceBuffer c(size_t(cRows * r.n) * scalarBytes(scalarOf(r.out)));
  DeviceInputs d;
  d.av = TensorView::contiguous(a->ptr(), scalarOf(r.in), {aRows, r.k}, device);
  d.bv = TensorView::contiguous(b->ptr(), scalarOf(r.in),
                                r.transposeB ? std::vector<int64_t>{r.n, r.k}
                                             : std::vector<int64_t>{r.k, r.n},
                                device);
  d.cv = TensorView::contiguous(c.ptr(), scalarOf(r.out), {cRows, r.n}, device);
  std::string config;
  double overlapped = slowestMedian(comm, reps, [&] { config = callLayer(comm, r, d, r.transport).config; });
  // The whole GEMM alone: all M rows against this rank's b.
  auto whole = randomHalves(r.m * r.k, 99, r.in);
  DeviceBuffer product(size_t(r.m * r.n) * scalarBytes(scalarOf(r.out)));
  GemmCallOptions go;
  go.transposeB = r.transposeB;
  TensorView wholeA = TensorView::contiguous(whole->ptr(), scalarOf(r.in), {r.m, r.k}, device);
  TensorView wholeC = TensorView::contiguous(product.ptr(), scalarOf(r.out), {r.m, r.n}, device);
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
  int64_t inBytes = scalarBytes(scalarOf(r.in)), outBytes = scalarBytes(scalarOf(r.out));
  double stepsAlone = slowestMedian(comm, reps, [&] {
    TESSEL_CU(dr, cuEventRecord, forked, comm.stream());
    for (int i = 0; i < 2; ++i) TESSEL_CU(dr, cuStreamWaitEvent, steps[i], forked, 0);
    for (int s = 0; s < ranks; ++s)
      gemm(TensorView::contiguous(whole->ptr() + uint64_t(s * m * r.k * inBytes), scalarOf(r.in),
                                  {m, r.k}, device),
           d.bv,
           TensorView::contiguous(product.ptr() + uint64_t(s * m * r.n * outBytes),
                                  scalarOf(r.out), {m, r.n}, device),
           go, steps[s % 2]);
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
                                      reinterpret_cast<void *>(whole->ptr()), size_t(m * r.k),
                                      r.in == DType::f16 ? ncclFloat16 : ncclBfloat16, nc,
                                      comm.stream()),
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
