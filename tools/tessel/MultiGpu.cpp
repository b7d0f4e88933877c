//===- MultiGpu.cpp - tessel run/bench all2all, tessel launch ------------===//
//
// Multi-GPU commands run one process per GPU. Started without a launcher
// (no RANK in the environment), they start the ranks themselves: this
// program again, once per rank, with the torchrun variables set.
//
//===----------------------------------------------------------------------===//
#include "MultiGpu.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/kernels/parallel/Ulysses.h"
#include "tessel/dsl/Compile.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/Nccl.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <fmt/format.h>
#include <unistd.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;
using namespace tessel::rt;

namespace {
// `seqlens` (and `seqlens_k`): a packed batch's lengths instead of batch
// and seqlen.
const Params kAllToAllDefaults = {{"batch", "2"},     {"seqlen", "1024"}, {"heads_q", "8"},
                                  {"heads_kv", "4"},   {"head_dim", "128"}, {"dtype", "bf16"},
                                  {"seqlens", ""},     {"seqlens_k", ""},   {"local", "kernel"},
                                  {"transfer", "auto"}, {"tile", ""}, {"leak_cycles", "1000"},
                                  {"handshakes", "auto"}};
const Params kAllToAllBenchShape = {{"batch", "2"},   {"seqlen", "8192"}, {"heads_q", "32"},
                                    {"heads_kv", "8"}, {"head_dim", "128"}, {"dtype", "bf16"},
                                    {"seqlens", ""},   {"seqlens_k", ""}, {"local", "kernel"},
                                    {"transfer", "auto"}, {"tile", ""},
                                    {"leak_cycles", "1000"}, {"handshakes", "auto"}};

UlyssesShape shapeFrom(const Params &given, const Params &defaults, int ranks) {
  Params p = mergeParams(given, scaledUlyssesDefaults(defaults, ranks, 1, 1), "all2all");
  UlyssesShape s;
  auto get = [&](const char *k) { return parseInteger(p.at(k), 1, INT32_MAX, "parameter " + std::string(k)); };
  s.batch = get("batch");
  s.seqlen = get("seqlen");
  s.headsQ = get("heads_q");
  s.headsKV = get("heads_kv");
  s.headDim = get("head_dim");
  const std::string &dtype = p.at("dtype");
  if (dtype == "bf16" || dtype == "f16") s.elementBytes = 2;
  else if (dtype == "f32") s.elementBytes = 4;
  else throw Error(fmt::format("parameter dtype={}: use bf16, f16 or f32", dtype));
  s.ranks = ranks;
  setPackedBatch(s, p);
  validateUlysses(s);
  return s;
}

/// The 16-bit pattern of element `offset` of tensor `t` on rank `rank`:
/// distinct enough that a misplaced element shows.
uint16_t pattern(int rank, int t, int64_t offset) {
  uint64_t x = (uint64_t(rank) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(t) << 56) ^ uint64_t(offset);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return static_cast<uint16_t>(x ^ (x >> 32));
}

void fillInputs(UlyssesExchange &x, const UlyssesShape &s, int rank) {
  Driver &d = Driver::get();
  for (int t = 0; t < 3; ++t) {
    int64_t n = s.inputElements(t) * s.elementBytes / 2;
    std::vector<uint16_t> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = pattern(rank, t, i);
    TESSEL_CU(d, cuMemcpyHtoD, x.input(t), host.data(), n * 2);
  }
  // Landed before a peer's kernel reads it: a pageable copy may return
  // early, on the legacy stream.
  TESSEL_CU(d, cuStreamSynchronize, nullptr);
}

/// Elements of `out` (tensor t on `rank`) that are not where the CPU model
/// puts them.
int64_t countMisplaced(const UlyssesShape &s, int t, int rank, const std::vector<uint16_t> &out) {
  int64_t mine = s.headsPerRank(t), words = s.elementBytes / 2, bad = 0;
  for (int64_t row = 0; row < s.totalRows(t); ++row)
    for (int64_t h = 0; h < mine; ++h)
      for (int64_t e = 0; e < s.headDim * words; ++e) {
        UlyssesSource src = ulyssesSource(s, t, rank, row, h, e / words);
        int64_t at = (row * mine + h) * s.headDim * words + e;
        bad += out[at] != pattern(src.rank, t, src.offset * words + e % words);
      }
  return bad;
}

std::vector<uint16_t> download(CUdeviceptr p, int64_t bytes) {
  std::vector<uint16_t> host(bytes / 2);
  Driver &d = Driver::get();
  TESSEL_CU(d, cuMemcpyDtoH, host.data(), p, bytes);
  return host;
}

/// A DSL kernel copies the next rank's Q input, [rows, 64] of 16-bit words,
/// tile by tile through shared memory with peer(); the words that differ
/// from that rank's pattern.
int64_t readPeerInput(Communicator &comm, UlyssesExchange &x, const UlyssesShape &s, int rank) {
  int64_t words = s.inputElements(0) * s.elementBytes / 2, rows = words / 64;
  int from = (rank + 1) % s.ranks;
  Program p("peer_read");
  Expr n = p.sym("rows"), source = p.sym("from");
  Tensor in = p.tensor("in", {n, 64}, DType::f16), out = p.tensor("out", {n, 64}, DType::f16);
  p.kernel({ceil_div(n, 64)}, 128, [&](Expr bx) {
    Buffer tile = alloc_shared({64, 64}, DType::f16, "tile");
    copy(peer(in, source).tile({bx * 64, 0}, {64, 64}), tile);
    copy(tile, out.tile({bx * 64, 0}, {64, 64}));
  });
  Kernel k = compile(p, {nativeArch(Driver::get().computeCapability())});
  DeviceBuffer result(rows * 64 * 2);
  // Every rank has filled its inputs before any reads them.
  comm.barrier();
  k.launch({LaunchArg::integer(rows), LaunchArg::integer(from),
            LaunchArg::symmetric(x.input(0), x.inputOnEveryRank(0), {rows, 64}),
            LaunchArg::buffer(result.ptr(), {rows, 64})});
  TESSEL_CU(Driver::get(), cuCtxSynchronize);
  std::vector<uint16_t> got = download(result.ptr(), rows * 64 * 2);
  int64_t bad = 0;
  for (int64_t i = 0; i < rows * 64; ++i) bad += got[i] != pattern(from, 0, i);
  return bad;
}

/// Median over `reps` after warming up on every rank together.
double medianMs(Communicator &comm, int reps, const std::function<void()> &work) {
  for (int i = 0; i < 5; ++i) work();
  TESSEL_CU(Driver::get(), cuStreamSynchronize, comm.stream());
  comm.barrier();
  return timeMedian([&](int) { work(); }, 0, reps, comm.stream());
}

bool distinctDevices(Communicator &comm) {
  std::vector<int> devices = comm.localDevices();
  std::sort(devices.begin(), devices.end());
  return std::adjacent_find(devices.begin(), devices.end()) == devices.end();
}

int runRank(const Params &params, bool bench, int reps) {
  auto comm = Communicator::fromEnvironment();
  UlyssesShape s = shapeFrom(params, bench ? kAllToAllBenchShape : kAllToAllDefaults, comm->size());
  Params merged = mergeParams(params, bench ? kAllToAllBenchShape : kAllToAllDefaults, "all2all");
  UlyssesExchange x(*comm, s, 1, localShardParam(merged));
  // `transfer`: the peers' pieces pulled by the copy engines (copy), or
  // moved by thread blocks, pulled (kernel_pull) or pushed (kernel_push);
  // auto takes the exchange's preferred one for the shape.
  using Transfer = UlyssesExchange::PeerTransfer;
  using Handshakes = UlyssesExchange::Handshakes;
  // `handshakes`: a kernel transfer's handshakes in its own blocks
  // (kernel), as kernels of their own around it (separate), or auto.
  Handshakes handshakes = choiceParam<Handshakes>(merged, "handshakes",
                                                  {{"auto", Handshakes::automatic},
                                                   {"kernel", Handshakes::inKernel},
                                                   {"separate", Handshakes::separate}});
  // `tile`: ROWSxCOLSxTHREADS of the kernel transfers.
  std::array<int64_t, 3> tile = {0, 0, 0};
  if (!merged.at("tile").empty() &&
      std::sscanf(merged.at("tile").c_str(), "%ldx%ldx%ld", &tile[0], &tile[1], &tile[2]) != 3)
    throw Error(fmt::format("parameter tile={}: use ROWSxCOLSxTHREADS, as 64x128x128",
                            merged.at("tile")));
  Transfer transfer = Transfer::copyEngine;
  if (merged.at("transfer") == "auto") {
    transfer = x.usePreferredTransfer();
    if (transfer != Transfer::copyEngine && handshakes != Handshakes::automatic)
      x.setPeerTransfer(transfer, tile, handshakes);
  } else {
    transfer = choiceParam<Transfer>(merged, "transfer",
                                     {{"copy", Transfer::copyEngine},
                                      {"kernel_pull", Transfer::kernelPull},
                                      {"kernel_push", Transfer::kernelPush}});
    x.setPeerTransfer(transfer, tile, handshakes);
  }
  bool inKernel = x.handshakesInKernel();
  const char *how = transfer == Transfer::copyEngine ? "copy-engine pull"
                    : transfer == Transfer::kernelPull
                        ? (inKernel ? "kernel pull, flags in it" : "kernel pull, flag kernels")
                        : (inKernel ? "kernel push, flags in it" : "kernel push, flag kernels");
  fillInputs(x, s, comm->rank());
  Driver &d = Driver::get();
  std::string ncclWhy;
  bool useNccl = distinctDevices(*comm) && Nccl::available(&ncclWhy);
  if (!distinctDevices(*comm)) ncclWhy = "ranks share a GPU (virtual ranks), which NCCL refuses";
  std::unique_ptr<NcclUlysses> reference;
  if (useNccl) reference = std::make_unique<NcclUlysses>(*comm, s, x);
  int rank = comm->rank();
  if (!bench) {
    x.forward(comm->stream());
    TESSEL_CU(d, cuStreamSynchronize, comm->stream());
    int64_t bad = 0, differs = 0;
    for (int t = 0; t < 3; ++t) {
      int64_t bytes = s.outputElements(t) * s.elementBytes;
      std::vector<uint16_t> out = download(x.output(t), bytes);
      bad += countMisplaced(s, t, rank, out);
      if (reference) {
        reference->forward(comm->stream());
        TESSEL_CU(d, cuStreamSynchronize, comm->stream());
        differs += download(reference->output(t), bytes) != out;
      }
    }
    // The way back: Q's head layout as the attention output, returned,
    // must be the rank's own Q shard.
    int64_t headBytes = s.outputElements(0) * s.elementBytes;
    TESSEL_CU(d, cuMemcpyAsync, x.attentionOutput(), x.output(0), headBytes, comm->stream());
    x.reverse(comm->stream());
    TESSEL_CU(d, cuStreamSynchronize, comm->stream());
    int64_t shardBytes = s.inputElements(0) * s.elementBytes;
    bool roundTrip = download(x.result(), shardBytes) == download(x.input(0), shardBytes);
    bad += !roundTrip;
    // A kernel reads the next rank's Q shard through peer().
    int64_t peerBad = readPeerInput(*comm, x, s, rank);
    // Symmetric memory comes and goes without leaking (`leak_cycles`
    // times; 0 under compute-sanitizer's racecheck, which keeps mapped
    // memory it has tracked).
    int64_t cycles = intParam(merged, "leak_cycles");
    size_t before = 0, after = 0, total = 0;
    { SymmetricBuffer warm(*comm, 1 << 20); }
    TESSEL_CU(d, cuMemGetInfo, &before, &total);
    for (int64_t i = 0; i < cycles; ++i) SymmetricBuffer cycle(*comm, 1 << 20);
    TESSEL_CU(d, cuMemGetInfo, &after, &total);
    int64_t grown = int64_t(before) - int64_t(after);
    bool ok = bad == 0 && peerBad == 0 && differs == 0 && grown <= (4 << 20);
    fmt::print("rank {} (device {}): all2all {}, {}: {} "
               "misplaced elements, the way back {}; a kernel reading rank {}'s input through peer(): {} wrong "
               "words; {}; {} symmetric alloc/free cycles grew device use by {} bytes — {}\n",
               rank, comm->device(), shapeText(s),
               how, bad,
               roundTrip ? "returns the shard" : "DOES NOT return the shard",
               (rank + 1) % s.ranks, peerBad,
               reference ? (differs ? "DIFFERS from NCCL's all-to-all"
                                    : "bit-identical to NCCL's all-to-all")
                         : "NCCL not compared: " + ncclWhy,
               cycles, grown, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  }
  int64_t sent = 0;
  for (int t = 0; t < 3; ++t) sent += s.inputElements(t) * s.elementBytes;
  double leaving = double(sent) * (s.ranks - 1) / s.ranks;
  double tessel = slowestRank(*comm, medianMs(*comm, reps, [&] { x.forward(comm->stream()); }));
  double fixed = slowestRank(*comm, medianMs(*comm, reps, [&] { x.handshakes(comm->stream()); }));
  // The same transfer with its handshakes the other way (in the blocks
  // against kernels of their own), timed in the same run.
  double other = 0;
  if (transfer != Transfer::copyEngine && handshakes == Handshakes::automatic &&
      distinctDevices(*comm)) {
    x.setPeerTransfer(transfer, tile, inKernel ? Handshakes::separate : Handshakes::inKernel);
    other = slowestRank(*comm, medianMs(*comm, reps, [&] { x.forward(comm->stream()); }));
  }
  double nccl = 0, ncclBare = 0;
  if (reference) {
    nccl = slowestRank(*comm, medianMs(*comm, reps, [&] { reference->forward(comm->stream()); }));
    ncclBare = slowestRank(*comm, medianMs(*comm, reps, [&] {
      reference->forward(comm->stream(), /*packing=*/false);
    }));
  }
  if (rank == 0) {
    fmt::print("all2all on {} ranks, {} ({:.1f} MiB "
               "of Q, K, V per rank, {:.1f} MiB leaving each GPU); median of {}, slowest rank:\n",
               s.ranks, shapeText(s), sent / 1048576.0,
               leaving / 1048576.0, reps);
    fmt::print("  tessel {:<25} {:8.3f} ms  {:7.1f} GB/s\n", how, tessel, leaving / tessel / 1e6);
    if (other > 0)
      fmt::print("  same, {:<24} {:8.3f} ms  {:7.1f} GB/s\n",
                 inKernel ? "flag kernels around it" : "flags in its blocks", other,
                 leaving / other / 1e6);
    fmt::print("  its handshakes alone, no data   {:8.3f} ms\n", fixed);
    if (reference) {
      Nccl &n = Nccl::get();
      fmt::print("  NCCL {} pack+alltoall+unpack {:8.3f} ms  {:7.1f} GB/s  (tessel {:.2f}x "
                 "faster)\n",
                 n.version(), nccl, leaving / nccl / 1e6, nccl / tessel);
      fmt::print("  NCCL {} alltoall alone       {:8.3f} ms  {:7.1f} GB/s  (tessel {:.2f}x "
                 "faster)\n",
                 n.version(), ncclBare, leaving / ncclBare / 1e6, ncclBare / tessel);
      fmt::print("  NCCL library: {}\n", n.path());
    } else {
      fmt::print("  NCCL not timed: {}\n", ncclWhy);
    }
  }
  return 0;
}

} // namespace

static std::vector<std::string> savedArgs;

Params tessel::mergeParams(const Params &given, const Params &defaults, const char *command) {
  Params p = defaults;
  for (auto &[k, v] : given) {
    if (!p.count(k)) {
      std::string known;
      for (auto &[dk, dv] : defaults) known += (known.empty() ? "" : ", ") + dk;
      throw Error(fmt::format("{} has no parameter '{}'; it takes: {}", command, k, known));
    }
    p[k] = v;
  }
  return p;
}

Params tessel::scaledUlyssesDefaults(const Params &defaults, int ranks, int64_t kvHeadsPerRank,
                                     int64_t rowsPerRank) {
  auto roundUp = [](int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; };
  Params scaled = defaults;
  int64_t headsQ = intParam(defaults, "heads_q"), headsKV = intParam(defaults, "heads_kv");
  int64_t kv = roundUp(headsKV, ranks * kvHeadsPerRank);
  scaled["heads_kv"] = std::to_string(kv);
  scaled["heads_q"] = std::to_string(kv * (headsQ / headsKV));
  scaled["seqlen"] = std::to_string(roundUp(intParam(defaults, "seqlen"), ranks * rowsPerRank));
  return scaled;
}

UlyssesExchange::LocalShard tessel::localShardParam(const Params &p) {
  return choiceParam<UlyssesExchange::LocalShard>(
      p, "local", {{"copy", UlyssesExchange::LocalShard::copyEngine},
                   {"kernel", UlyssesExchange::LocalShard::kernel}});
}

std::string tessel::shapeText(const UlyssesShape &s) {
  std::string rows = s.packed() ? fmt::format("packed {} sequences of {} + {} rows",
                                              s.cuSeqlensQ.size() - 1, s.totalRows(0), s.totalRows(1))
                                : fmt::format("batch={} seqlen={}", s.batch, s.seqlen);
  return fmt::format("{} heads_q={} heads_kv={} d={}", rows, s.headsQ, s.headsKV, s.headDim);
}

std::vector<int32_t> tessel::prefixSumsParam(const Params &p, const char *key) {
  const std::string &list = p.at(key);
  std::vector<int32_t> cu;
  if (list.empty()) return cu;
  cu.push_back(0);
  for (size_t at = 0; at <= list.size();) {
    size_t comma = std::min(list.find(',', at), list.size());
    int64_t length = parseInteger(list.substr(at, comma - at), 0, INT32_MAX,
                                  fmt::format("parameter {}={}: length", key, list));
    if (cu.back() + length > INT32_MAX)
      throw Error(fmt::format("parameter {}={}: more than 2^31 - 1 rows in all", key, list));
    cu.push_back(static_cast<int32_t>(cu.back() + length));
    at = comma + 1;
  }
  return cu;
}

void tessel::setPackedBatch(UlyssesShape &s, const Params &p) {
  s.cuSeqlensQ = prefixSumsParam(p, "seqlens");
  s.cuSeqlensK = p.at("seqlens_k").empty() ? s.cuSeqlensQ : prefixSumsParam(p, "seqlens_k");
  if (s.cuSeqlensQ.empty() && !s.cuSeqlensK.empty())
    throw Error("parameter seqlens_k needs seqlens (the packed batch's query lengths)");
  if (s.packed()) s.batch = 1;
}

double tessel::slowestRank(Communicator &comm, double mine) {
  double worst = 0;
  for (const std::string &v : comm.node().allGather(fmt::format("{}", mine)))
    worst = std::max(worst, std::atof(v.c_str()));
  return worst;
}

double tessel::fastestRank(Communicator &comm, double mine) {
  double best = INFINITY;
  for (const std::string &v : comm.node().allGather(fmt::format("{}", mine)))
    best = std::min(best, std::atof(v.c_str()));
  return best;
}

int tessel::relaunchAsRanks(int ranks) {
  std::vector<std::string> argv;
  std::string self = "/proc/self/exe";
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) self = std::string(path, n);
  argv.push_back(self);
  for (const std::string &a : commandLine()) argv.push_back(a);
  return launchLocalRanks(ranks, argv);
}

void tessel::setCommandLine(int argc, char **argv) { savedArgs.assign(argv + 1, argv + argc); }
const std::vector<std::string> &tessel::commandLine() { return savedArgs; }

int tessel::asRanks(const char *command, bool bench, int ranks,
                    const std::function<void(int)> &validate, const std::function<int()> &rank) {
  if (std::getenv("RANK")) return rank();
  // Checked here first, so that a bad shape is one message (not one per
  // rank), with or without a GPU; 0 while the rank count is unknown.
  validate(std::max(ranks, 0));
  std::string why;
  if (!Driver::available(&why)) {
    fmt::print("NO GPU: cannot run {} here ({})\n", command, why);
    return bench ? 1 : 0;
  }
  if (ranks <= 0) ranks = Driver::get().deviceCount();
  validate(ranks);
  return relaunchAsRanks(ranks);
}

int tessel::allToAllCommand(bool bench, const Params &params, int ranks, int reps) {
  return asRanks(
      "all2all", bench, ranks,
      [&](int n) {
        const Params &defaults = bench ? kAllToAllBenchShape : kAllToAllDefaults;
        shapeFrom(params, defaults, std::max(n, 1));
        localShardParam(mergeParams(params, defaults, "all2all"));
      },
      [&] { return runRank(params, bench, reps); });
}

int tessel::launchCommand(int ranks, const std::vector<std::string> &program) {
  if (program.empty()) throw Error("tessel launch -n N -- PROGRAM [ARGS...]: no program given");
  return launchLocalRanks(ranks, program);
}
