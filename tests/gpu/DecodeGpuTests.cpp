//===- DecodeGpuTests.cpp - paged and MLA decode on the GPU ---------------===//
//
// The decode kernels through the harness's checks (random paged caches,
// ragged lengths, poisoned table entries past each sequence's pages,
// float64 references) on every target the GPU runs, split and unsplit; then
// tessel::decode's calls on views, which pick the splits themselves, against
// the same references.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "LibraryChecks.h"
#include "ScopedCacheDir.h"
#include "tessel/Tessel.h"
#include "tessel/kernels/Tuned.h"
#include "tessel/harness/LibrarySupport.h"
#include "tessel/runtime/Driver.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>
#include <random>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {
std::string nativeTarget() { return rt::nativeArch(rt::Driver::get().computeCapability()); }

void checkDecode(const std::string &name, const Params &overrides, std::string arch = "") {
  test::checkLibraryKernel(name, overrides, arch.empty() ? nativeTarget() : arch);
}

/// The targets whose code runs on this GPU: its own, and sm_80's (through
/// PTX) on a later one.
std::vector<std::string> runnableTargets() {
  std::vector<std::string> out = {nativeTarget()};
  if (out[0] != "sm_80") out.push_back("sm_80");
  return out;
}
} // namespace

TEST_CASE("paged_decode matches the reference over ragged paged caches", "[gpu][decode]") {
  for (const std::string &arch : runnableTargets()) {
    for (const char *split : {"0", "1"}) {
      // Several pages a step (16-key pages), a page a step, steps within a
      // page; groups 1, 4 and 8; sequences of one key and of none.
      checkDecode("paged_decode", {{"split", split}}, arch);
      checkDecode("paged_decode",
                  {{"split", split}, {"page_size", "64"}, {"group", "8"}, {"min_len", "0"}}, arch);
      checkDecode("paged_decode", {{"split", split}, {"page_size", "256"}, {"group", "1"},
                                   {"heads_kv", "3"}, {"block_n", "32"}},
                  arch);
    }
    checkDecode("paged_decode", {{"dtype", "f16"}, {"head_dim", "64"}, {"page_size", "32"},
                                 {"block_n", "128"}, {"stages", "2"}},
                arch);
    checkDecode("paged_decode", {{"split", "1"}, {"splits", "7"}, {"group", "16"},
                                 {"head_dim", "256"}, {"stages", "2"}, {"max_len", "2000"}},
                arch);
    // An e4m3 cache with random K and V scales, unsplit and split.
    checkDecode("paged_decode", {{"fp8_cache", "1"}}, arch);
    checkDecode("paged_decode", {{"fp8_cache", "1"}, {"split", "1"}, {"dtype", "f16"},
                                 {"page_size", "64"}, {"group", "8"}},
                arch);
  }
}

TEST_CASE("mla_decode matches the reference over ragged paged caches", "[gpu][decode]") {
  for (const std::string &arch : runnableTargets()) {
    for (const char *split : {"0", "1"}) {
      checkDecode("mla_decode", {{"split", split}}, arch);
      // 16 heads (DeepSeek-V3 over 8 GPUs) in a 64-row tile; 16-key pages.
      checkDecode("mla_decode",
                  {{"split", split}, {"heads", "16"}, {"page_size", "16"}, {"min_len", "0"}}, arch);
    }
    checkDecode("mla_decode", {{"split", "1"}, {"splits", "5"}, {"page_size", "256"},
                               {"heads", "100"}, {"max_len", "1500"}},
                arch);
  }
}

namespace {
/// A paged problem on the device with its host copy.
struct PagedCase {
  testing::HostTensor q, kCache, vCache, table, lengths, out;
  std::vector<std::unique_ptr<rt::DeviceBuffer>> buffers;
  int64_t batch, heads, kvHeads, dim, page, perSeq;

  double kScale = 1, vScale = 1; // an e4m3 cache's

  PagedCase(int64_t batch, int64_t heads, int64_t kvHeads, int64_t dim, int64_t page,
            std::vector<int64_t> lens, std::mt19937_64 &rng, DType cacheType = DType::bf16)
      : q(DType::bf16, {batch, heads, dim}), kCache(DType::bf16, {0}), vCache(DType::bf16, {0}),
        table(DType::i32, {0}), lengths(DType::i32, {batch}), out(DType::bf16, {batch, heads, dim}),
        batch(batch), heads(heads), kvHeads(kvHeads), dim(dim), page(page) {
    int64_t longest = *std::max_element(lens.begin(), lens.end()), pages = 0;
    perSeq = (longest + page - 1) / page;
    for (int64_t n : lens) pages += (n + page - 1) / page;
    kCache = testing::HostTensor(cacheType, {pages, page, kvHeads, dim});
    vCache = kCache;
    table = testing::HostTensor(DType::i32, {batch, perSeq});
    testing::randomize(q, rng);
    testing::randomize(kCache, rng);
    testing::randomize(vCache, rng);
    std::vector<int32_t> order(pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    int64_t next = 0;
    for (int64_t b = 0; b < batch; ++b) {
      lengths.set(b, float(lens[b]));
      for (int64_t i = 0; i < perSeq; ++i)
        table.set(b * perSeq + i, i < (lens[b] + page - 1) / page ? float(order[next++]) : -1.0f);
    }
  }
  rt::DeviceBuffer *outBuffer = nullptr;

  TensorView view(const testing::HostTensor &t, bool poison = false) {
    buffers.push_back(poison ? testing::poisoned(t) : testing::upload(t));
    if (poison) outBuffer = buffers.back().get();
    rt::ScalarType type = t.type == DType::i32      ? rt::ScalarType::I32
                          : t.type == DType::f8e4m3 ? rt::ScalarType::F8E4M3
                                                    : rt::ScalarType::BF16;
    return TensorView::contiguous(buffers.back()->ptr(), type, t.shape, buffers.back()->device());
  }
  /// The output as the kernel left it.
  void fetch() {
    outBuffer->download(out.bytes.data(), out.bytes.size());
    out.decode();
  }
  std::vector<double> reference() const {
    std::vector<double> ref(out.size(), 0.0);
    int64_t group = heads / kvHeads;
    double scale = 1 / std::sqrt(double(dim));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        int64_t n = int64_t(lengths.values[b]);
        std::vector<double> s(n);
        double top = -INFINITY, sum = 0;
        auto at = [&](int64_t j, int64_t e) {
          int64_t row = int64_t(table.values[b * perSeq + j / page]) * page + j % page;
          return (row * kvHeads + h / group) * dim + e;
        };
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < dim; ++e)
            dot += double(q.values[(b * heads + h) * dim + e]) * kCache.values[at(j, e)];
          top = std::max(top, s[j] = dot * kScale * scale);
        }
        for (int64_t j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - top);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t e = 0; e < dim; ++e)
            ref[(b * heads + h) * dim + e] += s[j] / sum * vCache.values[at(j, e)] * vScale;
      }
    return ref;
  }
};
} // namespace

TEST_CASE("tessel::decode::paged splits where the batch is small and matches the reference",
          "[gpu][decode]") {
  std::mt19937_64 rng(std::random_device{}());
  // Two sequences of 8 kv heads: 16 blocks unsplit, so the call splits.
  // Table entries past each sequence's pages are -1: never read.
  PagedCase c(2, 32, 8, 128, 16, {3000, 17}, rng);
  TensorView out = c.view(c.out, true);
  Choice choice = decode::paged(c.view(c.q), c.view(c.kCache), c.view(c.vCache), c.view(c.table),
                                c.view(c.lengths), out);
  testing::synchronize();
  c.fetch();
  double err = testing::relativeError(c.out, c.reference());
  INFO(choice.arch << " " << choice.config << ": rel error " << err);
  fmt::print("decode::paged {}: rel error {:.3e}\n", choice.config, err);
  CHECK(choice.config.find("splits=") != std::string::npos);
  CHECK(err < 1e-2);

  // Splits asked for, and a longest sequence given too short (it only
  // sizes the split count): the result is still whole.
  decode::PagedOptions shortLongest;
  shortLongest.maxSeqlen = 100;
  shortLongest.splits = 4;
  Choice under = decode::paged(c.view(c.q), c.view(c.kCache), c.view(c.vCache), c.view(c.table),
                               c.view(c.lengths), c.view(c.out, true), shortLongest);
  testing::synchronize();
  c.fetch();
  double underErr = testing::relativeError(c.out, c.reference());
  INFO(under.config << ": rel error " << underErr);
  CHECK_THAT(under.config, Catch::Contains("splits=4"));
  CHECK(underErr < 1e-2);

  // A batch that fills the GPU runs unsplit, with the caller's workspace
  // unused.
  PagedCase wide(300, 8, 2, 64, 32, std::vector<int64_t>(300, 100), rng);
  decode::PagedOptions o;
  CHECK(decode::pagedWorkspaceBytes(wide.view(wide.q), wide.view(wide.kCache),
                                    wide.view(wide.table), o) == 0);
  TensorView wideOut = wide.view(wide.out, true);
  Choice unsplit = decode::paged(wide.view(wide.q), wide.view(wide.kCache), wide.view(wide.vCache),
                                 wide.view(wide.table), wide.view(wide.lengths), wideOut, o);
  testing::synchronize();
  wide.fetch();
  double wideErr = testing::relativeError(wide.out, wide.reference());
  fmt::print("decode::paged {}: rel error {:.3e}\n", unsplit.config, wideErr);
  INFO(unsplit.config << ": rel error " << wideErr);
  CHECK(unsplit.config.find("splits=") == std::string::npos);
  CHECK(wideErr < 1e-2);
}

TEST_CASE("tessel::decode::paged runs the configuration tessel tune recorded", "[gpu][decode]") {
  test::ScopedCacheDir cache("tessel-tuned-decode-test");
  rt::Driver &d = rt::Driver::get();
  std::mt19937_64 rng(5);
  PagedCase c(300, 8, 2, 64, 32, std::vector<int64_t>(300, 90), rng);
  // The bucket `tessel tune paged_decode` files this problem under (the
  // longest sequence: the table's 3 pages of 32 keys).
  std::string bucket = kernels::tunedBucket({{"dtype", "bf16"},
                                             {"head_dim", "64"},
                                             {"group", "4"},
                                             {"page_size", "32"},
                                             {"split", "0"},
                                             {"fp8_cache", "0"}},
                                            {{"batch", 300}, {"heads_kv", 2}, {"max_len", 96}});
  kernels::recordTuned("paged_decode", d.deviceName(), bucket,
                       {{"block_n", "32"}, {"stages", "2"}, {"threads", "64"}});
  TensorView out = c.view(c.out, true);
  Choice tuned = decode::paged(c.view(c.q), c.view(c.kCache), c.view(c.vCache), c.view(c.table),
                               c.view(c.lengths), out);
  testing::synchronize();
  c.fetch();
  INFO(tuned.config);
  CHECK_THAT(tuned.config, Catch::Contains("block_n=32 stages=2 threads=64") &&
                               Catch::Contains("(tuned on " + d.deviceName() + ")"));
  CHECK(testing::relativeError(c.out, c.reference()) < 1e-2);
  // A caller's configuration wins over the record.
  decode::PagedOptions o;
  o.config = kernels::PagedDecodeConfig{};
  o.config->stages = 4;
  Choice asked = decode::paged(c.view(c.q), c.view(c.kCache), c.view(c.vCache), c.view(c.table),
                               c.view(c.lengths), c.view(c.out, true), o);
  testing::synchronize();
  c.fetch();
  CHECK_THAT(asked.config, Catch::Contains("stages=4") && !Catch::Contains("tuned on"));
  CHECK(testing::relativeError(c.out, c.reference()) < 1e-2);
}

TEST_CASE("tessel::decode::paged reads an e4m3 cache with its scales", "[gpu][decode]") {
  std::mt19937_64 rng(std::random_device{}());
  PagedCase c(5, 16, 4, 128, 32, {1, 40, 700, 1333, 64}, rng, DType::f8e4m3);
  decode::PagedOptions o;
  o.kScale = c.kScale = 0.37;
  o.vScale = c.vScale = 2.5;
  Choice choice = decode::paged(c.view(c.q), c.view(c.kCache), c.view(c.vCache), c.view(c.table),
                                c.view(c.lengths), c.view(c.out, true), o);
  testing::synchronize();
  c.fetch();
  double err = testing::relativeError(c.out, c.reference());
  fmt::print("decode::paged {}: rel error {:.3e}\n", choice.config, err);
  INFO(choice.config << ": rel error " << err);
  CHECK_THAT(choice.config, Catch::Contains("fp8_cache=1"));
  CHECK(err < 1e-2);
  // A scale that is not a finite positive number is refused before any
  // launch.
  o.vScale = 0;
  CHECK_THROWS_WITH(decode::paged(c.view(c.q), c.view(c.kCache), c.view(c.vCache),
                                  c.view(c.table), c.view(c.lengths), c.view(c.out, true), o),
                    Catch::Contains("vScale=0 is not a finite positive number"));
}
