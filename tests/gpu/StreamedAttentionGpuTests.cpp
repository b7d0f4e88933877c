//===- StreamedAttentionGpuTests.cpp - attention over arriving shards -----===//
//
// The forward kernel built with AttentionConfig::streamedShards on one GPU:
// launched while some shards' flags are still unset, it must keep waiting
// (no block reads a shard before its flag), finish once another stream sets
// them, and agree with the ordinary kernel, under both masks.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "tessel/kernels/Kernels.h"
#include "tessel/harness/LibrarySupport.h"

#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <thread>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

static std::string deviceArch() {
  return rt::nativeArch(rt::Driver::get().computeCapability());
}

TEST_CASE("attention over shards that arrive while it runs", "[gpu][user]") {
  const int64_t batch = 2, seq = 1024, headsQ = 4, headsKv = 2, d = 128;
  const int64_t shardRows = 256, shards = seq / shardRows, groups = 2, firstShard = 1;
  for (bool causal : {false, true}) {
    AttentionConfig c;
    c.causal = causal;
    Program plainProgram = flashAttentionForward(c);
    c.streamedShards = true;
    Program streamedProgram = flashAttentionForward(c);
    Kernel plain = compile(plainProgram, {deviceArch()});
    Kernel streamed = compile(streamedProgram, {deviceArch()});
    // Loaded before anything spins: a module load waits for running work.
    plain.loadedKernel().resourceUsage();
    streamed.loadedKernel().resourceUsage();

    std::mt19937_64 rng(31);
    HostTensor q(DType::bf16, {batch, seq, headsQ, d}), k(DType::bf16, {batch, seq, headsKv, d}),
        v(DType::bf16, {batch, seq, headsKv, d});
    for (HostTensor *t : {&q, &k, &v}) randomize(*t, rng);
    HostTensor o(DType::bf16, {batch, seq, headsQ, d}), lse(DType::f32, {batch, headsQ, seq});
    HostTensor flags(DType::i32, {groups * shards});
    DeviceRun run;
    for (HostTensor *t : {&q, &k, &v}) run.addTensor(*t, false);
    run.addTensor(o, true);
    run.addTensor(lse, true);
    rt::LaunchArg arrivals = run.addTensor(flags, false); // zeros
    double scale = 1.0 / std::sqrt(double(d));
    std::vector<rt::LaunchArg> args = {
        rt::LaunchArg::integer(batch), rt::LaunchArg::integer(seq), rt::LaunchArg::integer(seq),
        rt::LaunchArg::integer(headsQ), rt::LaunchArg::integer(headsKv), rt::LaunchArg::real(scale),
        run.args[0], run.args[1], run.args[2], run.args[3], run.args[4]};
    plain.launch(args);
    synchronize();
    HostTensor expected(DType::bf16, {batch, seq, headsQ, d});
    run.download(3, expected);
    std::vector<double> ref(expected.values.begin(), expected.values.end());
    run.buffers[3]->fillBytes(0xff);

    auto &drv = rt::Driver::get();
    CUstream compute, copies;
    TESSEL_CU(drv, cuStreamCreate, &compute, CU_STREAM_NON_BLOCKING);
    TESSEL_CU(drv, cuStreamCreate, &copies, CU_STREAM_NON_BLOCKING);
    CUdeviceptr flagBase = run.buffers[5]->ptr();
    // Two calls through the same flags, no reset: epochs 1 and 2.
    for (int epoch = 1; epoch <= 2; ++epoch) {
      INFO((causal ? "causal" : "full") << ", epoch " << epoch);
      // The first shard of every group is present from the start.
      for (int64_t g = 0; g < groups; ++g)
        TESSEL_CU(drv, cuStreamWriteValue32, compute, flagBase + 4 * (g * shards + firstShard),
                  epoch, 0);
      std::vector<rt::LaunchArg> streamedArgs = args;
      for (int64_t value : {shardRows, shards, groups, int64_t(epoch)})
        streamedArgs.push_back(rt::LaunchArg::integer(value));
      streamedArgs.push_back(arrivals);
      streamed.launch(streamedArgs, compute);
      // Every block needs a shard that has not arrived: it must still run.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      CHECK(drv.api().cuStreamQuery(compute) == CUDA_ERROR_NOT_READY);
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t s = 0; s < shards; ++s)
          if (s != firstShard)
            TESSEL_CU(drv, cuStreamWriteValue32, copies, flagBase + 4 * (g * shards + s), epoch, 0);
      TESSEL_CU(drv, cuStreamSynchronize, copies);
      TESSEL_CU(drv, cuStreamSynchronize, compute);
      HostTensor got(DType::bf16, {batch, seq, headsQ, d});
      run.download(3, got);
      CHECK(relativeError(got.values, ref) < toleranceFor(DType::bf16));
      run.buffers[3]->fillBytes(0xff);
    }
    drv.api().cuStreamDestroy(compute);
    drv.api().cuStreamDestroy(copies);
  }
}
