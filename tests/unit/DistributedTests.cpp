//===- DistributedTests.cpp - ranks, bootstrap and NCCL loading -----------===//
//
// Real processes, no GPU: the environment a launcher sets, the node channel
// that carries records and file descriptors between ranks, the launcher
// itself, and the NCCL loader's messages.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/runtime/Distributed.h"
#include "tessel/runtime/Error.h"
#include "tessel/runtime/Nccl.h"
#include "tessel/dsl/Compile.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/kernels/parallel/PlanCache.h"
#include "tessel/kernels/parallel/Ulysses.h"
#include "tessel/harness/TensorParallel.h"

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <map>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tessel;
using namespace tessel::rt;

namespace {
RankInfo fromMap(const std::map<std::string, std::string> &env) {
  return rankInfoFromEnvironment([&](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
} // namespace

TEST_CASE("rank variables are read strictly") {
  RankInfo single = fromMap({});
  CHECK(single.worldSize == 1);
  CHECK(single.rank == 0);
  RankInfo torchrun = fromMap({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"},
                               {"LOCAL_WORLD_SIZE", "4"}, {"TORCHELASTIC_RUN_ID", "abc"},
                               {"MASTER_PORT", "29500"}});
  CHECK(torchrun.rank == 3);
  CHECK(torchrun.localWorldSize == 4);
  CHECK_FALSE(torchrun.singleNode());
  CHECK(torchrun.jobId == "abc-29500");
  CHECK_THROWS_WITH(fromMap({{"RANK", "0"}}), Catch::Contains("WORLD_SIZE is not set"));
  CHECK_THROWS_WITH(fromMap({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                             {"LOCAL_WORLD_SIZE", "2"}, {"TESSEL_JOB_ID", "j"}}),
                    Catch::Contains("RANK=2 is outside WORLD_SIZE=2"));
  CHECK_THROWS_WITH(fromMap({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}),
                    Catch::Contains("RANK=x1 is not a non-negative integer"));
  CHECK_THROWS_WITH(fromMap({{"RANK", "0"}, {"WORLD_SIZE", "6"}, {"LOCAL_RANK", "0"},
                             {"LOCAL_WORLD_SIZE", "4"}, {"TESSEL_JOB_ID", "j"}}),
                    Catch::Contains("LOCAL_WORLD_SIZE=4 does not divide WORLD_SIZE=6"));
  CHECK_THROWS_WITH(fromMap({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                             {"LOCAL_WORLD_SIZE", "2"}}),
                    Catch::Contains("set TESSEL_JOB_ID"));
}

TEST_CASE("local ranks exchange records and file descriptors") {
  for (int ranks : {1, 2, 3, 5}) {
    int result = runLocalRanks(ranks, [&](const RankInfo &info) {
      NodeChannel channel(info, 30);
      std::vector<std::string> all = channel.allGather(fmt::format("rank {}", info.localRank));
      for (int r = 0; r < ranks; ++r)
        if (all[r] != fmt::format("rank {}", r)) return 10;
      // A descriptor per rank: a memory file holding its rank, read back
      // through every peer's descriptor.
      int fd = memfd_create("tessel-test", MFD_CLOEXEC);
      std::string text = fmt::format("payload of {}", info.localRank);
      if (fd < 0 || write(fd, text.data(), text.size()) != (ssize_t)text.size()) return 11;
      std::vector<int> fds = channel.allGatherFds(fd);
      close(fd);
      if ((int)fds.size() != ranks) return 12;
      for (int r = 0; r < ranks; ++r) {
        char buffer[64] = {};
        ssize_t n = pread(fds[r], buffer, sizeof(buffer) - 1, 0);
        if (n <= 0 || std::string(buffer, n) != fmt::format("payload of {}", r)) return 13;
        close(fds[r]);
      }
      channel.barrier();
      return 0;
    });
    INFO(ranks << " ranks");
    CHECK(result == 0);
  }
}

TEST_CASE("a rank that never joins is an error, not a hang") {
  int result = runLocalRanks(2, [](const RankInfo &info) {
    if (info.localRank == 1) return 0; // exits without joining
    try {
      NodeChannel channel(info, 1.0);
      return 20; // must not succeed
    } catch (const Error &e) {
      return std::string(e.what()).find("of the 1 other local ranks sent nothing for 1 s") !=
                     std::string::npos
                 ? 0
                 : 21;
    }
  });
  CHECK(result == 0);
  // A rank that leaves mid-exchange.
  result = runLocalRanks(2, [](const RankInfo &info) {
    NodeChannel channel(info, 10);
    if (info.localRank == 1) return 0;
    try {
      channel.allGather("x");
      return 22;
    } catch (const Error &e) {
      return std::string(e.what()).find("local rank 1 closed its connection") != std::string::npos
                 ? 0
                 : 23;
    }
  });
  CHECK(result == 0);
}

TEST_CASE("the launcher sets the rank variables and stops the others when one fails") {
  CHECK(launchLocalRanks(3, {"sh", "-c",
                             "test \"$RANK\" = \"$LOCAL_RANK\" && test \"$WORLD_SIZE\" = 3 && "
                             "test \"$RANK\" -lt 3 && test -n \"$TESSEL_JOB_ID\""}) == 0);
  auto start = std::chrono::steady_clock::now();
  CHECK(launchLocalRanks(2, {"sh", "-c", "if [ $RANK = 0 ]; then exit 3; fi; sleep 60"}) == 3);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK(launchLocalRanks(1, {"/nonexistent/program"}) == 127);
  CHECK_THROWS_WITH(launchLocalRanks(0, {"true"}), Catch::Contains("cannot launch 0 ranks"));
}

TEST_CASE("a launcher told to stop stops its ranks") {
  // Each rank leads its own process group, which a signal to the launcher
  // alone (as `timeout` sends it) does not reach: the launcher passes it on.
  auto dir = std::filesystem::temp_directory_path() / fmt::format("tessel-stop-{}", ::getpid());
  std::filesystem::create_directories(dir);
  pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    std::string script = fmt::format("echo $$ > {}/$RANK.tmp && mv {}/$RANK.tmp {}/$RANK && exec sleep 60",
                                     dir.string(), dir.string(), dir.string());
    ::_exit(launchLocalRanks(2, {"sh", "-c", script}));
  }
  // Both ranks running, then the launcher is told to stop.
  auto start = std::chrono::steady_clock::now();
  while ((!std::filesystem::exists(dir / "0") || !std::filesystem::exists(dir / "1")) &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(launcher, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(launcher, &status, 0) == launcher);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
  for (const char *rank : {"0", "1"}) {
    pid_t pid = 0;
    std::ifstream(dir / rank) >> pid;
    REQUIRE(pid > 0);
    // Reaped by the launcher, so gone rather than a zombie.
    CHECK(::kill(pid, 0) == -1);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  std::filesystem::remove_all(dir);
}

TEST_CASE("NCCL is loaded at run time and a missing one is named") {
  // The loader caches its outcome per process: each case in its own.
  int missing = runLocalRanks(1, [](const RankInfo &) {
    setenv("TESSEL_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    std::string why;
    if (Nccl::available(&why)) return 30;
    return why.find("no NCCL: dlopen(\"/nonexistent/libnccl.so.2\") failed") != std::string::npos &&
                   why.find("TESSEL_NCCL_LIBRARY") != std::string::npos
               ? 0
               : 31;
  });
  CHECK(missing == 0);
  int found = runLocalRanks(1, [](const RankInfo &) {
    setenv("TESSEL_NCCL_LIBRARY", TESSEL_TOOLKIT_NCCL, 1);
    std::string why;
    if (!Nccl::available(&why)) {
      std::fprintf(stderr, "%s\n", why.c_str());
      return 32;
    }
    // What the exchanges and tensor-parallel layers reach for.
    const NcclApi &api = Nccl::get().api();
    if (!api.ncclReduceScatter || !api.ncclAllGather || !api.ncclSend || !api.ncclRecv ||
        !api.ncclGroupStart || !api.ncclBroadcast)
      return 34;
    return Nccl::get().version().rfind("2.", 0) == 0 ? 0 : 33;
  });
  CHECK(found == 0);
}

TEST_CASE("the Ulysses exchange moves every input element to exactly one output place") {
  for (int ranks : {1, 2, 4, 8}) {
    kernels::UlyssesShape s;
    s.batch = 2, s.seqlen = 8 * ranks, s.headsQ = 2 * ranks, s.headsKV = ranks, s.headDim = 4;
    s.ranks = ranks;
    kernels::validateUlysses(s);
    for (int tensor : {0, 1}) {
      // Every (source rank, input offset) is hit once over all ranks' outputs.
      std::vector<int> hits(ranks * s.inputElements(tensor), 0);
      for (int r = 0; r < ranks; ++r)
        for (int64_t b = 0; b < s.batch; ++b)
          for (int64_t t = 0; t < s.seqlen; ++t)
            for (int64_t h = 0; h < s.headsPerRank(tensor); ++h)
              for (int64_t d = 0; d < s.headDim; ++d) {
                kernels::UlyssesSource src =
                    kernels::ulyssesSource(s, tensor, r, b * s.seqlen + t, h, d);
                REQUIRE(src.rank == t / s.localSeq());
                ++hits[src.rank * s.inputElements(tensor) + src.offset];
              }
      CHECK(std::all_of(hits.begin(), hits.end(), [](int n) { return n == 1; }));
    }
  }
  // Output head h of rank r is global head r * heads/N + h, row t of the
  // sequence is row t % (S/N) of rank t / (S/N).
  kernels::UlyssesShape s;
  s.batch = 1, s.seqlen = 8, s.headsQ = 4, s.headsKV = 2, s.headDim = 2, s.ranks = 2;
  kernels::UlyssesSource src = kernels::ulyssesSource(s, 0, 1, 5, 1, 1);
  CHECK(src.rank == 1);
  CHECK(src.offset == ((0 * 4 + 1) * 4 + 3) * 2 + 1);
}

// Packed batches: each sequence is split over the ranks on its own; the
// exchange puts rank s's 1/N of sequence i at rows cu[i] + s*len/N of the
// whole packed rows, and K/V follow their own lengths.
TEST_CASE("a packed batch goes through the exchange sequence by sequence") {
  for (int ranks : {1, 2, 4}) {
    kernels::UlyssesShape s;
    s.batch = 1, s.headsQ = 2 * ranks, s.headsKV = ranks, s.headDim = 2, s.ranks = ranks;
    s.cuSeqlensQ = {0, 2 * ranks, 2 * ranks, 7 * ranks, 8 * ranks}; // an empty sequence too
    s.cuSeqlensK = {0, 3 * ranks, 4 * ranks, 9 * ranks, 9 * ranks};
    kernels::validateUlysses(s);
    for (int tensor : {0, 1}) {
      const std::vector<int32_t> &cu = tensor ? s.cuSeqlensK : s.cuSeqlensQ;
      CHECK(s.totalRows(tensor) == cu.back());
      std::vector<int> hits(ranks * s.inputElements(tensor), 0);
      for (int r = 0; r < ranks; ++r)
        for (int64_t row = 0; row < s.totalRows(tensor); ++row) {
          // The sequence holding the row, and the rank whose shard holds it.
          size_t i = 0;
          while (cu[i + 1] <= row) ++i;
          int64_t shard = (cu[i + 1] - cu[i]) / ranks, within = row - cu[i];
          for (int64_t h = 0; h < s.headsPerRank(tensor); ++h)
            for (int64_t d = 0; d < s.headDim; ++d) {
              kernels::UlyssesSource src = kernels::ulyssesSource(s, tensor, r, row, h, d);
              REQUIRE(src.rank == within / shard);
              int64_t localRow = cu[i] / ranks + within % shard;
              REQUIRE(src.offset / (s.heads(tensor) * s.headDim) == localRow);
              ++hits[src.rank * s.inputElements(tensor) + src.offset];
            }
        }
      CHECK(std::all_of(hits.begin(), hits.end(), [](int n) { return n == 1; }));
    }
  }
}

TEST_CASE("K/V heads that do not split over the ranks are replicated to the ranks that share them") {
  // 8 query heads share 2 K/V heads (groups of 4); over 4 ranks each rank's
  // two query heads share one K/V head, which goes to two ranks.
  kernels::UlyssesShape s;
  s.batch = 1, s.seqlen = 8, s.headsQ = 8, s.headsKV = 2, s.headDim = 2, s.ranks = 4;
  kernels::validateUlysses(s);
  CHECK(s.headsPerRank(1) == 1);
  for (int r = 0; r < 4; ++r) {
    CHECK(s.firstHead(1, r) == r / 2);
    // Every query head of the rank uses that K/V head.
    for (int64_t h = 0; h < s.headsPerRank(0); ++h)
      CHECK((s.firstHead(0, r) + h) / (s.headsQ / s.headsKV) == s.firstHead(1, r));
    kernels::UlyssesSource src = kernels::ulyssesSource(s, 1, r, 3, 0, 1);
    CHECK(src.offset == (1 * 2 + r / 2) * 2 + 1);
  }
  // MQA over 2 ranks: the one K/V head everywhere.
  s.headsKV = 1, s.ranks = 2;
  kernels::validateUlysses(s);
  CHECK(s.firstHead(1, 0) == 0);
  CHECK(s.firstHead(1, 1) == 0);
}

TEST_CASE("Ulysses shapes are validated before anything moves") {
  kernels::UlyssesShape s;
  s.batch = 2, s.seqlen = 8192, s.headsQ = 32, s.headsKV = 8, s.headDim = 128, s.ranks = 2;
  kernels::validateUlysses(s);
  auto with = [&](auto change) {
    kernels::UlyssesShape t = s;
    change(t);
    return t;
  };
  CHECK_THROWS_WITH(kernels::validateUlysses(with([](auto &t) { t.seqlen = 8191; })),
                    Catch::Contains("seqlen=8191 does not split over 2 ranks"));
  auto packed = [](auto &t) {
    t.batch = 1;
    t.cuSeqlensQ = {0, 4, 10};
    t.cuSeqlensK = {0, 6, 8};
  };
  kernels::validateUlysses(with(packed));
  CHECK_THROWS_WITH(kernels::validateUlysses(with([&](auto &t) { packed(t), t.batch = 2; })),
                    Catch::Contains("a packed batch is one tensor of batch 1, not 2"));
  CHECK_THROWS_WITH(kernels::validateUlysses(with([&](auto &t) { packed(t), t.cuSeqlensK = {0, 8}; })),
                    Catch::Contains("cu_seqlens_q has 3 entries and cu_seqlens_k 2"));
  CHECK_THROWS_WITH(kernels::validateUlysses(with([&](auto &t) { packed(t), t.cuSeqlensQ = {0, 4, 9}; })),
                    Catch::Contains("sequence 1 has 5 rows, not a multiple of the 2 ranks"));
  CHECK_THROWS_WITH(
      kernels::validateUlysses(with([&](auto &t) { packed(t), t.cuSeqlensQ = {0, 0, 0}; })),
      Catch::Contains("the packed batch has 0 query and 8 key/value rows"));
  CHECK_THROWS_WITH(kernels::validateUlysses(with([](auto &t) { t.headsKV = 3, t.headsQ = 33; })),
                    Catch::Contains("heads_q=33 does not split over 2 ranks"));
  CHECK_THROWS_WITH(kernels::validateUlysses(with([](auto &t) { t.headsKV = 5, t.headsQ = 10; })),
                    Catch::Contains("heads_kv=5 does not split over 2 ranks, and the 5 query heads "
                                    "of a rank do not share one K/V head (group of 2)"));
  CHECK_THROWS_WITH(kernels::validateUlysses(with([](auto &t) { t.headsKV = 6; })),
                    Catch::Contains("heads_q=32 is not a multiple of heads_kv=6"));
  CHECK_THROWS_WITH(kernels::validateUlysses(with([](auto &t) { t.headDim = 0; })),
                    Catch::Contains("head_dim=0 must be positive"));
}

TEST_CASE("head groups split a rank's heads with whole K/V heads each") {
  kernels::UlyssesShape s;
  s.batch = 1, s.seqlen = 8192, s.headsQ = 32, s.headsKV = 8, s.headDim = 128, s.ranks = 2;
  // 16 query and 4 K/V heads a rank, 4 query heads to a K/V head.
  CHECK(kernels::evenHeadGroups(s, 4) == std::vector<int64_t>{4, 4, 4, 4});
  CHECK_THROWS_WITH(kernels::evenHeadGroups(s, 8),
                    Catch::Contains("groups=8 does not divide a rank's K/V heads: heads_kv=8 "
                                    "over 2 ranks leaves 4"));
  kernels::validateHeadGroups(s, {4, 8, 4});
  CHECK_THROWS_WITH(kernels::validateHeadGroups(s, {2, 10, 4}),
                    Catch::Contains("a head group of 2 query heads does not cover whole K/V heads "
                                    "(4 query heads per K/V head on a rank)"));
  CHECK_THROWS_WITH(kernels::validateHeadGroups(s, {4, 4, 4}),
                    Catch::Contains("head groups of 12 query heads in all; a rank has 16"));
  CHECK_THROWS_WITH(kernels::validateHeadGroups(s, {0, 16}),
                    Catch::Contains("a head group of 0 query heads"));
  // Replicated K/V (one K/V head for a rank's 4 query heads): one group.
  s.headsQ = 8, s.headsKV = 1;
  kernels::validateHeadGroups(s, {4});
  CHECK_THROWS(kernels::validateHeadGroups(s, {2, 2}));
}

namespace {
/// The exchange's flags as atomics, one array per rank, and ranks as
/// threads: the CPU model of the protocol the streams carry out.
struct AtomicFlags {
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> &flags;
  int me;
  void store(int owner, int slot, uint32_t value) {
    flags[owner][slot].store(value, std::memory_order_release);
  }
  void waitAtLeast(int slot, uint32_t value) {
    while (flags[me][slot].load(std::memory_order_acquire) < value) std::this_thread::yield();
  }
};
} // namespace

// Each rank writes its input for the call, announces it, reads every
// peer's input (which must be of this call: not the last call's, not the
// next one's), announces that, and only then may overwrite its input. The
// epochs start just below the limit, so the flags are reset on the way.
TEST_CASE("epoch flags order the exchange's writes and reads across calls, through a reset") {
  using namespace tessel::kernels;
  const int ranks = 4, calls = 50;
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> flags;
  std::vector<std::unique_ptr<std::atomic<int>[]>> inputs;
  for (int r = 0; r < ranks; ++r) {
    flags.emplace_back(new std::atomic<uint32_t>[2 * ranks]);
    inputs.emplace_back(new std::atomic<int>[64]);
    for (int i = 0; i < 2 * ranks; ++i) flags[r][i] = 0;
    for (int i = 0; i < 64; ++i) inputs[r][i] = -1;
  }
  std::atomic<int> arrived{0}, mismatches{0}, resets{0};
  // The host meeting of a reset (the communicator's barrier).
  auto barrier = [&](int round) {
    arrived.fetch_add(1);
    while (arrived.load() < ranks * round) std::this_thread::yield();
  };
  std::vector<std::thread> threads;
  for (int me = 0; me < ranks; ++me)
    threads.emplace_back([&, me] {
      std::mt19937 rng(me);
      AtomicFlags ops{flags, me};
      uint32_t epoch = kEpochLimit - 10;
      int meetings = 0;
      for (int call = 0; call < calls; ++call) {
        NextEpoch next = nextEpoch(epoch);
        if (next.reset) {
          barrier(++meetings);
          for (int i = 0; i < 2 * ranks; ++i) flags[me][i] = 0;
          barrier(++meetings);
          if (me == 0) ++resets;
        }
        epoch = next.epoch;
        for (int i = 0; i < 64; ++i) inputs[me][i] = call * ranks + me;
        announceAndAwait(ops, ranks, me, 0, epoch);
        for (int src = 0; src < ranks; ++src) {
          if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
          for (int i = 0; i < 64; ++i)
            if (inputs[src][i].load() != call * ranks + src) ++mismatches;
        }
        announceAndAwait(ops, ranks, me, ranks, epoch);
      }
    });
  for (std::thread &t : threads) t.join();
  CHECK(mismatches == 0);
  CHECK(resets == 1);
}

// Without the 'read' step a fast rank overwrites its input while a slow
// peer still reads it: the model catches what the protocol prevents.
TEST_CASE("without the read announcement the model sees inputs overwritten early") {
  using namespace tessel::kernels;
  const int ranks = 2, calls = 200;
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> flags;
  std::vector<std::unique_ptr<std::atomic<int>[]>> inputs;
  for (int r = 0; r < ranks; ++r) {
    flags.emplace_back(new std::atomic<uint32_t>[2 * ranks]);
    inputs.emplace_back(new std::atomic<int>[1]);
    for (int i = 0; i < 2 * ranks; ++i) flags[r][i] = 0;
    inputs[r][0] = -1;
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int me = 0; me < ranks; ++me)
    threads.emplace_back([&, me] {
      AtomicFlags ops{flags, me};
      for (int call = 0; call < calls; ++call) {
        inputs[me][0] = call * ranks + me;
        announceAndAwait(ops, ranks, me, 0, call + 1);
        // Rank 1 reads late; rank 0 races ahead to its next write.
        if (me == 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
        if (inputs[1 - me][0].load() != call * ranks + 1 - me) ++mismatches;
      }
    });
  for (std::thread &t : threads) t.join();
  CHECK(mismatches > 0);
}

// On the GPUs the same protocol is one kernel: block r publishes the epoch
// into rank r's flags (a release store at system scope, over NVLink) and
// waits for rank r's (an acquire load), every peer at once.
TEST_CASE("the exchange handshake publishes with release and awaits with acquire on every target") {
  Program p = tessel::kernels::exchangeHandshake();
  for (const char *arch : {"sm_80", "sm_90a", "sm_100a"}) {
    INFO(arch);
    Kernel k = compile(p, {arch, ""});
    const std::string &ptx = k.ptx();
    CHECK(ptx.find("st.release.sys.global.u32") != std::string::npos);
    CHECK(ptx.find("ld.acquire.sys.global.u32") != std::string::npos);
    // The peer's address comes from the symmetric launch argument.
    std::vector<std::string> names;
    for (const ParamInfo &info : k.params()) names.push_back(info.name);
    CHECK(names == std::vector<std::string>{"slots", "ranks", "me", "base", "epoch", "flags"});
  }
}

// A rank busy on the host (a checkpoint) must not make its peers' waiting
// handshakes trap: the default timeout is torch's NCCL watchdog's 10
// minutes, and TESSEL_EXCHANGE_TIMEOUT_S sets it.
TEST_CASE("the exchange handshake's timeout is 600 s unless TESSEL_EXCHANGE_TIMEOUT_S says") {
  ::unsetenv("TESSEL_EXCHANGE_TIMEOUT_S");
  CHECK(tessel::kernels::exchangeTimeoutMs() == 600000);
  Program standard = tessel::kernels::exchangeHandshake();
  CHECK(compile(standard, {"sm_90a", ""}).cuda().find("600000LL") != std::string::npos);
  ::setenv("TESSEL_EXCHANGE_TIMEOUT_S", "30", 1);
  CHECK(tessel::kernels::exchangeTimeoutMs() == 30000);
  Program shorter = tessel::kernels::exchangeHandshake();
  std::string cuda = compile(shorter, {"sm_90a", ""}).cuda();
  CHECK(cuda.find("30000LL") != std::string::npos);
  CHECK(cuda.find("600000LL") == std::string::npos);
  for (const char *bad : {"0", "3601", "ten"}) {
    ::setenv("TESSEL_EXCHANGE_TIMEOUT_S", bad, 1);
    CHECK_THROWS_WITH(tessel::kernels::exchangeTimeoutMs(),
                      Catch::Contains("TESSEL_EXCHANGE_TIMEOUT_S"));
  }
  ::unsetenv("TESSEL_EXCHANGE_TIMEOUT_S");
}

// The float64 reference the tp layers' checks share, on values worked by hand.
TEST_CASE("the tp layers' reference gathers rows and sums partials with their scales") {
  using tessel::harness::TpRankInputs;
  using tessel::testing::HostTensor;
  auto t = [](std::vector<int64_t> shape, std::vector<float> v) {
    return HostTensor(DType::f32, std::move(shape), v);
  };
  // allgather_gemm on 2 ranks, one row each: rank 1's c is both ranks' rows
  // times its b, scaled by the owner's row scale and its column scale.
  tessel::harness::TpShape ag{true, 1, 2, 1, DType::f32, false, tessel::harness::TpScales::row};
  std::vector<TpRankInputs> all = {
      {t({1, 2}, {1, 2}), t({2, 1}, {9, 9}), t({1}, {2}), t({1}, {7})},
      {t({1, 2}, {3, 4}), t({2, 1}, {5, 6}), t({1}, {0.5f}), t({1}, {3})}};
  CHECK(tessel::harness::tpReference(ag, 1, all) == std::vector<double>{17 * 2 * 3, 39 * 0.5 * 3});
  CHECK(tessel::harness::tpReference(ag, 1, all, {1}) == std::vector<double>{39 * 0.5 * 3});
  // gemm_reducescatter: rank 1's row is the sum of every rank's partial of
  // that row (b transposed: [n, k]).
  tessel::harness::TpShape rs{false, 1, 2, 1, DType::f32, true, tessel::harness::TpScales::none};
  std::vector<TpRankInputs> parts = {
      {t({2, 2}, {1, 1, 1, 2}), t({1, 2}, {3, 4}), t({0}, {}), t({0}, {})},
      {t({2, 2}, {0, 0, 2, 1}), t({1, 2}, {1, 1}), t({0}, {}), t({0}, {})}};
  CHECK(tessel::harness::tpReference(rs, 1, parts) == std::vector<double>{11 + 3});
  CHECK(tessel::harness::tpReference(rs, 0, parts) == std::vector<double>{7 + 0});
}

// The multi-GPU calls' plans: the most recently used kept, the least
// recently used freed first (after waiting for the device, and before the
// new plan is made, so its memory is back), and all of them freed in that
// order by clear().
TEST_CASE("a plan cache keeps the most recently used plans") {
  std::vector<std::string> events;
  struct Counted : kernels::SpPlan {
    std::vector<std::string> *events;
    std::string name;
    Counted(std::vector<std::string> *e, std::string n) : events(e), name(std::move(n)) {}
    ~Counted() override { events->push_back("free " + name); }
  };
  kernels::PlanCache cache(2);
  auto get = [&](const std::string &key) {
    kernels::SpPlan &plan = cache.get(
        key,
        [&] {
          events.push_back("make " + key);
          return std::make_unique<Counted>(&events, key);
        },
        [&] { events.push_back("wait"); });
    CHECK(static_cast<Counted &>(plan).name == key);
  };
  get("a");
  get("b");
  get("a"); // a is now the most recent
  get("c"); // frees b, the least recent, before making c
  get("a");
  get("d"); // frees c
  CHECK(cache.size() == 2);
  cache.clear(); // a, then d
  CHECK(cache.size() == 0);
  CHECK(events == std::vector<std::string>{"make a", "make b", "wait", "free b", "make c",
                                           "wait", "free c", "make d", "free a", "free d"});
  // A plan whose making throws leaves nothing behind.
  kernels::PlanCache one(1);
  CHECK_THROWS_WITH(one.get(
                        "x", []() -> std::unique_ptr<kernels::SpPlan> { throw Error("cannot plan"); },
                        [] {}),
                    "cannot plan");
  CHECK(one.size() == 0);
}
