//===- Ulysses.cpp - the sequence-parallel all-to-all ---------------------===//
#include "tessel/kernels/parallel/Ulysses.h"
#include "tessel/dsl/Compile.h"
#include "tessel/kernels/basic/Basic.h"
#include "tessel/kernels/parallel/ExchangeFlags.h"
#include "tessel/kernels/parallel/PeerTileCopy.h"
#include "tessel/kernels/parallel/SequenceShards.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <algorithm>
#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::rt;

int64_t UlyssesShape::totalRows(int tensor) const {
  if (!packed()) return batch * seqlen;
  return (tensor == 0 ? cuSeqlensQ : cuSeqlensK).back();
}

std::vector<UlyssesShape::Sequence> UlyssesShape::sequences(int tensor) const {
  std::vector<Sequence> out;
  if (!packed()) {
    for (int64_t b = 0; b < batch; ++b) out.push_back({b * seqlen, seqlen});
    return out;
  }
  const std::vector<int32_t> &cu = tensor == 0 ? cuSeqlensQ : cuSeqlensK;
  for (size_t i = 0; i + 1 < cu.size(); ++i) out.push_back({cu[i], cu[i + 1] - cu[i]});
  return out;
}

void tessel::kernels::validateUlysses(const UlyssesShape &s) {
  if (s.ranks < 1) throw Error(fmt::format("Ulysses: {} ranks", s.ranks));
  for (auto [name, v] : {std::pair{"batch", s.batch}, {"heads_q", s.headsQ},
                         {"heads_kv", s.headsKV}, {"head_dim", s.headDim}})
    if (v <= 0) throw Error(fmt::format("Ulysses: {}={} must be positive", name, v));
  if (s.elementBytes != 2 && s.elementBytes != 4)
    throw Error(fmt::format("Ulysses: {}-byte elements; use 16- or 32-bit types", s.elementBytes));
  if (s.packed()) {
    if (s.batch != 1)
      throw Error(fmt::format("Ulysses: a packed batch is one tensor of batch 1, not {}", s.batch));
    if (s.cuSeqlensQ.size() != s.cuSeqlensK.size())
      throw Error(fmt::format("Ulysses: cu_seqlens_q has {} entries and cu_seqlens_k {}",
                              s.cuSeqlensQ.size(), s.cuSeqlensK.size()));
    // Each sequence splits over the ranks on its own (the longest bounds
    // nothing here: the shard of a sequence is its length over N).
    for (const std::vector<int32_t> *cu : {&s.cuSeqlensQ, &s.cuSeqlensK}) {
      int64_t longest = 0;
      for (size_t i = 0; i + 1 < cu->size(); ++i)
        longest = std::max<int64_t>(longest, (*cu)[i + 1] - (*cu)[i]);
      validatePackedShards(*cu, s.ranks, longest);
    }
    if (s.totalRows(0) == 0 || s.totalRows(1) == 0)
      throw Error(fmt::format("Ulysses: the packed batch has {} query and {} key/value rows; both "
                              "must be positive",
                              s.totalRows(0), s.totalRows(1)));
  } else {
    if (s.seqlen <= 0) throw Error(fmt::format("Ulysses: seqlen={} must be positive", s.seqlen));
    if (s.seqlen % s.ranks)
      throw Error(fmt::format("Ulysses: seqlen={} does not split over {} ranks", s.seqlen, s.ranks));
  }
  if (s.headsQ % s.headsKV)
    throw Error(fmt::format("Ulysses: heads_q={} is not a multiple of heads_kv={}", s.headsQ,
                            s.headsKV));
  if (s.headsQ % s.ranks)
    throw Error(fmt::format("Ulysses: heads_q={} does not split over {} ranks", s.headsQ, s.ranks));
  // K/V heads split over the ranks, or each rank's query heads share one
  // K/V head, which is then replicated to every rank that needs it.
  int64_t group = s.headsQ / s.headsKV, queryPerRank = s.headsQ / s.ranks;
  if (s.headsKV % s.ranks && group % queryPerRank)
    throw Error(fmt::format("Ulysses: heads_kv={} does not split over {} ranks, and the {} query "
                            "heads of a rank do not share one K/V head (group of {}) to replicate",
                            s.headsKV, s.ranks, queryPerRank, group));
}

UlyssesSource tessel::kernels::ulyssesSource(const UlyssesShape &s, int tensor, int rank,
                                             int64_t row, int64_t h, int64_t d) {
  for (const UlyssesShape::Sequence &q : s.sequences(tensor)) {
    if (row >= q.start + q.length) continue;
    int64_t shard = q.length / s.ranks, within = row - q.start;
    int64_t localRow = q.start / s.ranks + within % shard, head = s.firstHead(tensor, rank) + h;
    return {static_cast<int>(within / shard), (localRow * s.heads(tensor) + head) * s.headDim + d};
  }
  throw Error(fmt::format("Ulysses: row {} is past the {} rows of tensor {}", row,
                          s.totalRows(tensor), tensor));
}

/// "heads_q=32 over 2 ranks": where a rank's share of heads comes from.
static std::string headsOverRanks(const UlyssesShape &s, int tensor) {
  return fmt::format("{}={} over {} rank{}", tensor == 0 ? "heads_q" : "heads_kv", s.heads(tensor),
                     s.ranks, s.ranks == 1 ? "" : "s");
}

std::vector<int64_t> tessel::kernels::evenHeadGroups(const UlyssesShape &s, int groups) {
  if (groups < 1) throw Error(fmt::format("Ulysses: groups={}; use 1 or more", groups));
  for (int t = 0; t < 2; ++t)
    if (s.headsPerRank(t) % groups)
      throw Error(fmt::format("Ulysses: groups={} does not divide a rank's {} heads: {} leaves {}",
                              groups, t == 0 ? "query" : "K/V", headsOverRanks(s, t),
                              s.headsPerRank(t)));
  return std::vector<int64_t>(groups, s.headsPerRank(0) / groups);
}

void tessel::kernels::validateHeadGroups(const UlyssesShape &s,
                                         const std::vector<int64_t> &queryHeads) {
  int64_t q = s.headsPerRank(0), kv = s.headsPerRank(1), sum = 0;
  if (queryHeads.empty()) throw Error("Ulysses: no head groups");
  for (int64_t h : queryHeads) {
    if (h <= 0) throw Error(fmt::format("Ulysses: a head group of {} query heads", h));
    if (h * kv % q)
      throw Error(fmt::format("Ulysses: a head group of {} query heads does not cover whole K/V "
                              "heads ({} query heads per K/V head on a rank); make it a multiple "
                              "of {}",
                              h, q / kv, q / kv));
    sum += h;
  }
  if (sum != q)
    throw Error(fmt::format("Ulysses: head groups of {} query heads in all; a rank has {} ({})",
                            sum, q, headsOverRanks(s, 0)));
}

UlyssesExchange::UlyssesExchange(Communicator &c, const UlyssesShape &s, int g, LocalShard local)
    : UlyssesExchange(c, s, (validateUlysses(s), evenHeadGroups(s, g)), local) {}

UlyssesExchange::UlyssesExchange(Communicator &c, const UlyssesShape &s,
                                 std::vector<int64_t> queryHeads, LocalShard local)
    : comm(c), shape(s), groups(static_cast<int>(queryHeads.size())) {
  if (c.size() != c.localSize())
    throw Error("Ulysses: the copy-engine exchange runs within one node; this job spans several");
  if (s.ranks != c.size())
    throw Error(fmt::format("Ulysses: the shape is for {} ranks, the job has {}", s.ranks, c.size()));
  validateUlysses(s);
  validateHeadGroups(s, queryHeads);
  for (int k = 0; k < 2; ++k) {
    firstInGroup[k] = {0};
    for (int64_t h : queryHeads)
      firstInGroup[k].push_back(firstInGroup[k].back() +
                                (k == 0 ? h : h * s.headsPerRank(1) / s.headsPerRank(0)));
  }
  for (int t = 0; t < 3; ++t) {
    inputs[t] = std::make_unique<SymmetricBuffer>(c, shape.inputElements(t) * s.elementBytes);
    outputs[t] = std::make_unique<SymmetricBuffer>(c, shape.outputElements(t) * s.elementBytes);
  }
  headOutput = std::make_unique<SymmetricBuffer>(c, shape.outputElements(0) * s.elementBytes);
  sequenceOutput = std::make_unique<SymmetricBuffer>(c, shape.inputElements(0) * s.elementBytes);
  flags = exchangeFlags(c, sizeof(uint32_t) * (doneBase() + s.ranks));
  lanes = std::make_unique<CopyLanes>(3 * s.ranks, groups);
  if (local == LocalShard::kernel) {
    // Whole blocks of columns: every slice is a multiple of head_dim wide.
    int64_t block = 256;
    while (s.headDim % block) block /= 2;
    if (block < 8)
      throw Error(fmt::format("Ulysses: head_dim={} is not a multiple of 8 elements, which the "
                              "local shard's copy kernel takes",
                              s.headDim));
    Program program = columnSlice({s.elementBytes == 2 ? DType::f16 : DType::f32, 32, block, 128});
    Driver::get().setDevice(c.device());
    localCopy = std::make_unique<Kernel>(
        compile(program, {nativeArch(Driver::get().computeCapability())}));
    // Loaded now: a module load waits for running kernels, which may spin
    // on flags that this rank's streams have yet to write.
    localCopy->loadedKernel().resourceUsage();
  }
}

UlyssesExchange::~UlyssesExchange() = default;

CUdeviceptr UlyssesExchange::output(int tensor, int group) const {
  return outputs[tensor]->local() +
         shape.totalRows(tensor) * groupFirst(tensor, group) * shape.headDim * shape.elementBytes;
}

CUdeviceptr UlyssesExchange::attentionOutput(int group) const {
  return headOutput->local() +
         shape.totalRows(0) * groupFirst(0, group) * shape.headDim * shape.elementBytes;
}

void UlyssesExchange::begin(CUstream stream) {
  startCall(stream);
  lanes->fork(stream);
}

void UlyssesExchange::end(CUstream stream) {
  lanes->join(stream);
  // Sources may be overwritten once every reader has them.
  finishExchangeCall(comm, *flags, epoch, stream);
}

void UlyssesExchange::copyColumns(CUdeviceptr src, int64_t pitch, int64_t first, CUdeviceptr dst,
                                  int64_t cols, int64_t rows, CUstream stream, bool local) {
  int64_t eb = shape.elementBytes;
  if (!local || !localCopy || rows == 0)
    return copyPitched(src + first * eb, pitch * eb, dst, cols * eb, cols * eb, rows, stream);
  localCopy->launch({LaunchArg::integer(rows), LaunchArg::integer(pitch), LaunchArg::integer(first),
                     LaunchArg::integer(cols), LaunchArg::buffer(src, {rows, pitch}),
                     LaunchArg::buffer(dst, {rows, cols})},
                    stream);
}

void UlyssesExchange::pull(int s, int t, int g) {
  // From Q (K, V) [rows/N, H, D] on s: this rank's heads of group g, into
  // group g's [rows, heads/N/groups, D]; sequence by sequence, s's 1/N of
  // each goes to rows start + s*length/N (batch entries are sequences).
  int me = comm.localRank(), n = shape.ranks;
  int64_t eb = shape.elementBytes, dim = shape.headDim;
  int64_t all = shape.heads(t), mine = groupHeads(t, g);
  int64_t first = shape.firstHead(t, me) + groupFirst(t, g);
  for (const UlyssesShape::Sequence &q : shape.sequences(t))
    copyColumns(inputs[t]->peer(s) + q.start / n * all * dim * eb, all * dim, first * dim,
                output(t, g) + ((q.start + s * (q.length / n)) * mine) * dim * eb, mine * dim,
                q.length / n, lane(s, t), s == me);
}

void UlyssesExchange::pullBack(int s, int g) {
  // From group g of O' [rows, Hq/N/groups, D] on s: this rank's rows of
  // each sequence, into heads s*Hq/N + g*.. of O [rows/N, Hq, D].
  int me = comm.localRank(), n = shape.ranks;
  int64_t eb = shape.elementBytes, dim = shape.headDim;
  int64_t all = shape.headsQ, mine = groupHeads(0, g);
  CUdeviceptr source = headOutput->peer(s) + shape.totalRows(0) * groupFirst(0, g) * dim * eb;
  for (const UlyssesShape::Sequence &q : shape.sequences(0))
    copyPitched(source + ((q.start + me * (q.length / n)) * mine) * dim * eb, mine * dim * eb,
             result() + (q.start / n * all + s * shape.headsPerRank(0) + groupFirst(0, g)) * dim * eb,
             all * dim * eb, mine * dim * eb, q.length / n, lane(s, 0));
}

/// Whether two of the node's ranks run on one GPU.
static bool ranksShareAGpu(Communicator &comm) {
  std::vector<int> devices = comm.localDevices();
  std::sort(devices.begin(), devices.end());
  return std::adjacent_find(devices.begin(), devices.end()) != devices.end();
}

void UlyssesExchange::setPeerTransfer(PeerTransfer how, std::array<int64_t, 3> tile,
                                      Handshakes handshakes) {
  transfer = how;
  tileCopy.reset();
  flagsInKernel = false;
  if (how == PeerTransfer::copyEngine) return;
  auto refuse = [&](const std::string &why) {
    transfer = PeerTransfer::copyEngine;
    throw Error("Ulysses: kernel transfers " + why);
  };
  if (shape.packed())
    refuse("take a fixed batch; a packed batch's sequences go by the copy engines");
  if (how == PeerTransfer::kernelPush && shape.headsKV % shape.ranks)
    refuse(fmt::format("push whole K/V heads per rank; heads_kv={} over {} ranks replicates them "
                       "(pull instead)",
                       shape.headsKV, shape.ranks));
  // The largest tile (of the one asked for) that divides a shard's rows
  // and every group's columns.
  int64_t rows = tile[0] ? tile[0] : 64, cols = tile[1] ? tile[1] : 128;
  int threads = tile[2] ? static_cast<int>(tile[2]) : 128;
  while (rows >= 8 && shape.localSeq() % rows) rows /= 2;
  for (int t = 0; t < 2; ++t)
    for (int g = 0; g < groups; ++g)
      while (cols >= 8 && groupHeads(t, g) * shape.headDim % cols) cols /= 2;
  if (rows < 8 || cols < 8)
    refuse(fmt::format("need shards of a multiple of 8 rows and heads of a multiple of 8 "
                       "elements; seqlen/N = {}, head_dim = {}",
                       shape.localSeq(), shape.headDim));
  if ((tile[0] && rows != tile[0]) || (tile[1] && cols != tile[1]))
    refuse(fmt::format("tiles of {}x{} do not divide seqlen/N = {} rows and the head groups' "
                       "columns",
                       tile[0], tile[1], shape.localSeq()));
  bool shared = ranksShareAGpu(comm);
  if (handshakes == Handshakes::inKernel && shared)
    refuse("keep their handshakes in their blocks only where every rank has a GPU of its own: "
           "ranks here share one (a spinning block could hold the SM its peer's block needs)");
  Driver::get().setDevice(comm.device());
  std::string arch = nativeArch(Driver::get().computeCapability());
  PeerTileCopyConfig config{shape.elementBytes == 2 ? DType::f16 : DType::f32, rows, cols, threads,
                            how == PeerTransfer::kernelPush};
  // Measured on 4 H200s, in-block handshakes lost at every size (0.155
  // against 0.148 ms at 8k tokens, 0.509 against 0.485 at 32k): each block's
  // announcement, wait and count cost more than the two launches they save.
  config.flagsInKernel = handshakes == Handshakes::inKernel;
  config.timeoutMs = exchangeTimeoutMs();
  Program program = peerTileCopy(config);
  tileCopy = std::make_unique<Kernel>(compile(program, {arch}));
  // Loaded now: a module load waits for running kernels.
  tileCopy->loadedKernel().resourceUsage();
  if (config.flagsInKernel && !arrivals) {
    Program wait = exchangeArrivals(config.timeoutMs);
    arrivals = std::make_unique<Kernel>(compile(wait, {arch}));
    arrivals->loadedKernel().resourceUsage();
  }
  flagsInKernel = config.flagsInKernel;
  tileRows = rows;
  tileCols = cols;
}

void UlyssesExchange::launchTiles(std::vector<rt::LaunchArg> args, int64_t rows, int64_t cols,
                                  int64_t entries, CUstream stream) {
  if (flagsInKernel) {
    int n = shape.ranks;
    int64_t slots = int64_t(flags->bytes() / sizeof(uint32_t));
    // The symbols after first_rank, then the flags after dst.
    std::vector<rt::LaunchArg> extra;
    for (int64_t v : {int64_t(comm.localRank()), int64_t(epoch), int64_t(0), doneBase(), slots})
      extra.push_back(rt::LaunchArg::integer(v));
    args.insert(args.end() - 2, extra.begin(), extra.end());
    std::vector<CUdeviceptr> all;
    for (int r = 0; r < n; ++r) all.push_back(flags->peer(r));
    args.push_back(rt::LaunchArg::symmetric(flags->local(), all, {slots}));
    // Each peer's blocks of this launch count into this rank's slot of it.
    doneCount += uint32_t((rows + tileRows - 1) / tileRows * ((cols + tileCols - 1) / tileCols) *
                          entries);
  }
  tileCopy->launch(args, stream);
}

void UlyssesExchange::startCounting(CUstream stream) {
  NextEpoch next = advanceEpoch(comm, *flags, epoch, stream);
  epoch = next.epoch;
  if (next.reset) doneCount = 0;
}

void UlyssesExchange::startCall(CUstream stream) {
  epoch = startExchangeCall(comm, *flags, epoch, stream);
  // Epoch 1 follows a reset of every flag (or is the first call): the
  // counts start over with them, whichever handshakes come next.
  if (epoch == 1) doneCount = 0;
}

void UlyssesExchange::awaitCounts(CUstream stream) {
  int64_t slots = int64_t(flags->bytes() / sizeof(uint32_t));
  std::vector<rt::LaunchArg> args;
  for (int64_t v : {slots, int64_t(shape.ranks), doneBase(), int64_t(doneCount)})
    args.push_back(rt::LaunchArg::integer(v));
  args.push_back(rt::LaunchArg::buffer(flags->local(), {slots}));
  arrivals->launch(args, stream);
}

UlyssesExchange::PeerTransfer UlyssesExchange::usePreferredTransfer() {
  // The ranks must move the pieces alike (a rank that pushes never pulls
  // what a pulling peer left for it): each says the best it can run, and
  // all take the least of them.
  PeerTransfer best = PeerTransfer::copyEngine;
  for (PeerTransfer how : {PeerTransfer::kernelPush, PeerTransfer::kernelPull}) {
    try {
      setPeerTransfer(how);
      best = how;
      break;
    } catch (const Error &) {
      // This shape cannot take it; the next one is tried.
    }
  }
  PeerTransfer agreed = best;
  for (const std::string &other : comm.node().allGather(std::to_string(int(best))))
    agreed = std::min(agreed, static_cast<PeerTransfer>(std::stoi(other)));
  if (agreed != transfer) setPeerTransfer(agreed);
  return transfer;
}

/// Every rank's copy of a symmetric buffer at `offset`, as a launch
/// argument of `shape`.
static rt::LaunchArg everyRank(const SymmetricBuffer &b, int ranks, int64_t offset,
                               std::vector<int64_t> shape) {
  std::vector<CUdeviceptr> all;
  for (int r = 0; r < ranks; ++r) all.push_back(b.peer(r) + offset);
  return rt::LaunchArg::symmetric(b.local() + offset, all, std::move(shape));
}

/// The symbols of one peerTileCopy launch, in its order.
struct TileMoves {
  int64_t rows, cols, entries, ranks;
  int64_t srcRows, srcPitch, srcEntry, srcRank, srcRow, srcColRank, srcCol;
  int64_t dstRows, dstPitch, dstEntry, dstRank, dstRow, dstColRank, dstCol;
  int64_t firstRank;
  std::vector<rt::LaunchArg> args(rt::LaunchArg src, rt::LaunchArg dst) const {
    std::vector<rt::LaunchArg> a;
    for (int64_t v : {rows, cols, entries, ranks, srcRows, srcPitch, srcEntry, srcRank, srcRow,
                      srcColRank, srcCol, dstRows, dstPitch, dstEntry, dstRank, dstRow, dstColRank,
                      dstCol, firstRank})
      a.push_back(rt::LaunchArg::integer(v));
    a.push_back(std::move(src));
    a.push_back(std::move(dst));
    return a;
  }
};

void UlyssesExchange::moveAllWithKernel(CUstream stream) {
  // Pull, tile (e, s): rows e*S/N + .. of source s's [rows/N, H, D] input,
  // columns of this rank's heads of the group, into rows e*S + s*S/N + ..
  // Push, tile (e, d): rows e*S/N + .. of this rank's input, columns of d's
  // heads of the group, into rows e*S + me*S/N + .. of d's output.
  int n = shape.ranks, me = comm.localRank();
  int64_t dim = shape.headDim, local = shape.localSeq(), eb = shape.elementBytes;
  bool push = transfer == PeerTransfer::kernelPush;
  for (int t = 0; t < 3; ++t)
    for (int g = 0; g < groups; ++g) {
      int64_t all = shape.heads(t) * dim, cols = groupHeads(t, g) * dim;
      int64_t inGroup = groupFirst(t, g) * dim, rows = shape.localRows(t);
      int64_t groupAt = shape.totalRows(t) * groupFirst(t, g) * dim * eb;
      std::vector<int64_t> outShape = {shape.totalRows(t), cols};
      if (push) {
        TileMoves m{local, cols, shape.batch, n, rows, all, local, 0, 0,
                    shape.headsPerRank(t) * dim, inGroup, shape.totalRows(t), cols,
                    shape.seqlen, 0, me * local, 0, 0, me};
        launchTiles(m.args(rt::LaunchArg::buffer(inputs[t]->local(), {rows, all}),
                           everyRank(*outputs[t], n, groupAt, outShape)),
                    m.rows, m.cols, m.entries, stream);
        continue;
      }
      TileMoves m{local, cols, shape.batch, n, rows, all, local, 0, 0, 0,
                  shape.firstHead(t, me) * dim + inGroup, shape.totalRows(t), cols, shape.seqlen,
                  local, 0, 0, 0, me};
      launchTiles(m.args(everyRank(*inputs[t], n, 0, {rows, all}),
                         rt::LaunchArg::buffer(output(t, g), outShape)),
                  m.rows, m.cols, m.entries, stream);
    }
}

void UlyssesExchange::moveBackAllWithKernel(CUstream stream) {
  // Pull, tile (e, s): rows e*S + me*S/N + .. of s's group g of O' [rows,
  // heads of g, D] into rows e*S/N + .. of O [rows/N, Hq, D] at the
  // columns of s's heads of the group. Push, tile (e, d): rows e*S +
  // d*S/N + .. of this rank's O' into d's O at this rank's columns.
  int n = shape.ranks, me = comm.localRank();
  int64_t dim = shape.headDim, local = shape.localSeq(), all = shape.headsQ * dim;
  int64_t perRank = shape.headsPerRank(0) * dim, total = shape.totalRows(0);
  bool push = transfer == PeerTransfer::kernelPush;
  for (int g = 0; g < groups; ++g) {
    int64_t cols = groupHeads(0, g) * dim, inGroup = groupFirst(0, g) * dim;
    int64_t at = total * groupFirst(0, g) * dim * shape.elementBytes;
    std::vector<int64_t> sequenceShape = {shape.localRows(0), all};
    if (push) {
      TileMoves m{local, cols, shape.batch, n, total, cols, shape.seqlen, local, 0, 0, 0,
                  shape.localRows(0), all, local, 0, 0, 0, me * perRank + inGroup, me};
      launchTiles(m.args(rt::LaunchArg::buffer(headOutput->local() + at, {total, cols}),
                         everyRank(*sequenceOutput, n, 0, sequenceShape)),
                  m.rows, m.cols, m.entries, stream);
      continue;
    }
    TileMoves m{local, cols, shape.batch, n, total, cols, shape.seqlen, 0, me * local, 0, 0,
                shape.localRows(0), all, local, 0, 0, perRank, inGroup, me};
    launchTiles(m.args(everyRank(*headOutput, n, at, {total, cols}),
                       rt::LaunchArg::buffer(result(), sequenceShape)),
                m.rows, m.cols, m.entries, stream);
  }
}

void UlyssesExchange::forward(CUstream stream) {
  if (tileCopy && flagsInKernel) {
    startCounting(stream);
    moveAllWithKernel(stream);
    return awaitCounts(stream);
  }
  if (tileCopy) {
    startCall(stream);
    moveAllWithKernel(stream);
    return finishExchangeCall(comm, *flags, epoch, stream);
  }
  begin(stream);
  int n = shape.ranks, me = comm.localRank();
  for (int i = 0; i < n; ++i) // ring order, own shard first
    for (int t = 0; t < 3; ++t)
      for (int g = 0; g < groups; ++g) pull((me + i) % n, t, g);
  end(stream);
}

void UlyssesExchange::reverse(CUstream stream) {
  if (tileCopy && flagsInKernel) {
    startCounting(stream);
    moveBackAllWithKernel(stream);
    return awaitCounts(stream);
  }
  if (tileCopy) {
    startCall(stream);
    moveBackAllWithKernel(stream);
    return finishExchangeCall(comm, *flags, epoch, stream);
  }
  begin(stream);
  int n = shape.ranks, me = comm.localRank();
  for (int i = 0; i < n; ++i)
    for (int g = 0; g < groups; ++g) pullBack((me + i) % n, g);
  end(stream);
}

void UlyssesExchange::pipeline(CUstream stream, const std::function<void(int, CUstream)> &attend,
                               Arrival arrival, int attentionStreams) {
  Driver &d = Driver::get();
  if (attentionStreams < 1)
    throw Error(fmt::format("Ulysses: {} attention streams; at least one", attentionStreams));
  begin(stream);
  int n = shape.ranks, me = comm.localRank();
  // Every group's pulls, group by group, each lane marking where a group ends.
  for (int g = 0; g < groups; ++g)
    for (int i = 0; i < n; ++i) {
      int s = (me + i) % n;
      for (int t = 0; t < 3; ++t) {
        pull(s, t, g);
        lanes->mark(laneOf(s, t), g);
      }
      if (arrival == Arrival::kernel && s != me) {
        // Q, K and V of the group from s are in: flag it for the kernel
        // (the write follows the copies on the stream, fenced system-wide).
        for (int t : {1, 2}) lanes->waitForMark(lane(s, 0), laneOf(s, t), g);
        TESSEL_CU(d, cuStreamWriteValue32, lane(s, 0), arrivalFlags(g) + 4 * s, epoch, 0);
      }
    }
  int turns = std::min(attentionStreams, groups);
  if (turns > 1) {
    if (!attentionLanes || attentionLanes->size() != turns)
      attentionLanes = std::make_unique<CopyLanes>(turns);
    attentionLanes->fork(stream);
  }
  auto outputReady = [&](int owner, int g, int from) { return flag(owner, (2 + g) * n + from); };
  for (int g = 0; g < groups; ++g) {
    CUstream on = turns > 1 ? (*attentionLanes)[g % turns] : stream;
    // The rank's own shard (a local copy) is in before attention starts, so
    // that no spinning block waits for a copy that might need its SM.
    for (int s = 0; s < n; ++s)
      if (arrival == Arrival::stream || s == me)
        for (int t = 0; t < 3; ++t) lanes->waitForMark(on, laneOf(s, t), g);
    if (arrival == Arrival::kernel)
      TESSEL_CU(d, cuStreamWriteValue32, on, arrivalFlags(g) + 4 * me, epoch, 0);
    attend(g, on);
    // Group g of this rank's attention output is ready for every rank.
    for (int s = 0; s < n; ++s)
      TESSEL_CU(d, cuStreamWriteValue32, on, outputReady(s, g, me), epoch, 0);
    for (int i = 0; i < n; ++i) {
      int s = (me + i) % n;
      TESSEL_CU(d, cuStreamWaitValue32, lane(s, 0), outputReady(me, g, s), epoch,
                CU_STREAM_WAIT_VALUE_GEQ);
      pullBack(s, g);
    }
  }
  if (turns > 1) attentionLanes->join(stream);
  end(stream);
}

NcclUlysses::NcclUlysses(Communicator &c, const UlyssesShape &s, UlyssesExchange &x)
    : comm(c), shape(s), exchange(x) {
  for (int t = 0; t < 3; ++t) {
    perPeer += shape.outputElements(t) / shape.ranks * shape.elementBytes;
    outputs[t] = std::make_unique<DeviceBuffer>(shape.outputElements(t) * s.elementBytes);
  }
  send = std::make_unique<DeviceBuffer>(perPeer * shape.ranks);
  recv = std::make_unique<DeviceBuffer>(perPeer * shape.ranks);
  comm.nccl();
}

void NcclUlysses::forward(CUstream stream, bool packing) {
  Driver &d = Driver::get();
  d.setDevice(comm.device());
  int n = shape.ranks;
  int64_t eb = shape.elementBytes, dim = shape.headDim;
  // Chunk for destination r: for each tensor, [rows/N, heads/N, D], the
  // rank's shard of each sequence at start/N.
  auto chunk = [&](CUdeviceptr base, int r, int t, int64_t shardRow) {
    CUdeviceptr at = base + r * perPeer;
    for (int u = 0; u < t; ++u) at += shape.localRows(u) * shape.headsPerRank(u) * dim * eb;
    return at + shardRow * shape.headsPerRank(t) * dim * eb;
  };
  if (packing)
    for (int r = 0; r < n; ++r)
      for (int t = 0; t < 3; ++t) {
        int64_t all = shape.heads(t), mine = shape.headsPerRank(t), first = shape.firstHead(t, r);
        for (const UlyssesShape::Sequence &q : shape.sequences(t)) {
          copyPitched(exchange.input(t) + (q.start / n * all + first) * dim * eb, all * dim * eb,
                      chunk(send->ptr(), r, t, q.start / n), mine * dim * eb, mine * dim * eb,
                      q.length / n, stream);
        }
      }
  Nccl &nccl = Nccl::get();
  TESSEL_NCCL(nccl, ncclAlltoAll, reinterpret_cast<void *>(send->ptr()),
              reinterpret_cast<void *>(recv->ptr()), static_cast<size_t>(perPeer), ncclChar,
              comm.nccl(), stream);
  if (!packing) return;
  // From source r: its 1/N of each sequence, contiguous on both sides.
  for (int r = 0; r < n; ++r)
    for (int t = 0; t < 3; ++t) {
      int64_t mine = shape.headsPerRank(t);
      for (const UlyssesShape::Sequence &q : shape.sequences(t))
        TESSEL_CU(d, cuMemcpyAsync, output(t) + (q.start + r * (q.length / n)) * mine * dim * eb,
                  chunk(recv->ptr(), r, t, q.start / n), q.length / n * mine * dim * eb, stream);
    }
}
