//===- UlyssesPieces.cpp - Ulysses layouts as exchange plans --------------===//
#include "tessel/kernels/parallel/UlyssesPieces.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>

using namespace tessel;
using namespace tessel::kernels;

namespace {

int tensorOf(UlyssesTensor kind) { return kind == UlyssesTensor::keyValueRows ? 1 : 0; }

int64_t elementBytesOf(const UlyssesShape &s, UlyssesTensor kind) {
  return kind == UlyssesTensor::logSumExp ? 4 : s.elementBytes;
}

int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

/// Heads of `kind` in group g, and the first of them among the rank's.
struct GroupHeads {
  int64_t count, first;
};
GroupHeads groupHeads(const UlyssesShape &s, UlyssesTensor kind, const HeadGroups &groups, int g) {
  int64_t first = 0;
  for (int i = 0; i < g; ++i) first += groups[i];
  if (tensorOf(kind) == 0) return {groups[g], first};
  // K/V heads in proportion to the group's query heads (validateHeadGroups).
  int64_t q = s.headsPerRank(0), kv = s.headsPerRank(1);
  return {groups[g] * kv / q, first * kv / q};
}

/// The log-sum-exp's entries: batch entries of `seqlen` rows, each one
/// sequence; or the packed batch, one entry of all its sequences.
struct Entry {
  int64_t index, rows;
  std::vector<UlyssesShape::Sequence> sequences; // starts within the entry
};
std::vector<Entry> entriesOf(const UlyssesShape &s) {
  if (s.packed()) return {{0, s.totalRows(0), s.sequences(0)}};
  std::vector<Entry> entries;
  for (int64_t b = 0; b < s.batch; ++b) entries.push_back({b, s.seqlen, {{0, s.seqlen}}});
  return entries;
}

/// One direction's pieces: `shardRank` holds the shard, `headRank` the head
/// layout; `toHeads` says which way they go.
std::vector<Piece> piecesBetween(const UlyssesShape &s, UlyssesTensor kind,
                                 const HeadGroups &groups, int shardRank, int headRank,
                                 bool toHeads, int group) {
  int n = s.ranks, t = tensorOf(kind);
  int64_t eb = elementBytesOf(s, kind), dim = s.headDim;
  // Replicated K/V gradients come back one copy per replica.
  int64_t copyAt = 0;
  if (!toHeads && kind == UlyssesTensor::keyValueRows)
    copyAt = headRank % kvReplicas(s) * shardBytes(s, kind);
  std::vector<Piece> pieces;
  auto add = [&](int64_t shardOffset, int64_t shardPitch, int64_t headOffset, int64_t headPitch,
                 int64_t width, int64_t height) {
    if (width * height == 0) return;
    if (toHeads) pieces.push_back({shardOffset, shardPitch, headOffset, headPitch, width, height});
    else pieces.push_back({headOffset, headPitch, copyAt + shardOffset, shardPitch, width, height});
  };
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    if (group >= 0 && g != group) continue;
    GroupHeads heads = groupHeads(s, kind, groups, g);
    int64_t groupAt = headGroupOffset(s, kind, groups, g);
    int64_t firstHead = s.firstHead(t, headRank) + heads.first;
    if (kind != UlyssesTensor::logSumExp) {
      // Each sequence's 1/N on the shard rank is rows start/N ..; in the
      // head layout, rows start + shardRank * length/N ...
      int64_t all = s.heads(t), width = heads.count * dim * eb;
      for (const UlyssesShape::Sequence &q : s.sequences(t))
        add((q.start / n * all + firstHead) * dim * eb, all * dim * eb,
            groupAt + (q.start + shardRank * (q.length / n)) * width, width, width, q.length / n);
      continue;
    }
    // Rows of the log-sum-exp are its last dimension: one piece per
    // sequence covers the group's heads, a head a row.
    for (const Entry &e : entriesOf(s))
      for (const UlyssesShape::Sequence &q : e.sequences)
        add(((e.index * s.headsQ + firstHead) * (e.rows / n) + q.start / n) * eb, e.rows / n * eb,
            groupAt + ((e.index * heads.count) * e.rows + q.start + shardRank * (q.length / n)) * eb,
            e.rows * eb, q.length / n * eb, heads.count);
  }
  return pieces;
}

} // namespace

int64_t tessel::kernels::kvReplicas(const UlyssesShape &s) {
  return s.headsKV % s.ranks == 0 ? 1 : s.ranks / s.headsKV;
}

int64_t tessel::kernels::shardBytes(const UlyssesShape &s, UlyssesTensor kind) {
  if (kind == UlyssesTensor::logSumExp) return s.totalRows(0) / s.ranks * s.headsQ * 4;
  return s.inputElements(tensorOf(kind)) * s.elementBytes;
}

int64_t tessel::kernels::headGroupOffset(const UlyssesShape &s, UlyssesTensor kind,
                                         const HeadGroups &groups, int g) {
  int t = tensorOf(kind);
  int64_t at = 0;
  for (int i = 0; i < g; ++i) {
    int64_t bytes = s.totalRows(t) * groupHeads(s, kind, groups, i).count *
                    (kind == UlyssesTensor::logSumExp ? 4 : s.headDim * s.elementBytes);
    // A log-sum-exp group is a kernel argument of its own: 16-byte aligned.
    at += kind == UlyssesTensor::logSumExp ? align16(bytes) : bytes;
  }
  return at;
}

int64_t tessel::kernels::headLayoutBytes(const UlyssesShape &s, UlyssesTensor kind,
                                         const HeadGroups &groups) {
  return headGroupOffset(s, kind, groups, static_cast<int>(groups.size()));
}

std::vector<Piece> tessel::kernels::toHeadsPieces(const UlyssesShape &s, UlyssesTensor kind,
                                                  const HeadGroups &groups, int src, int dst,
                                                  int group) {
  return piecesBetween(s, kind, groups, src, dst, /*toHeads=*/true, group);
}

std::vector<Piece> tessel::kernels::toShardsPieces(const UlyssesShape &s, UlyssesTensor kind,
                                                   const HeadGroups &groups, int src, int dst,
                                                   int group) {
  return piecesBetween(s, kind, groups, dst, src, /*toHeads=*/false, group);
}

/// A plan over `kinds`, either way: shards to the head layout or back.
static ExchangePlan ulyssesPlan(const UlyssesShape &s, std::vector<UlyssesTensor> kinds,
                                HeadGroups groups, bool partPerGroup, bool toHeads) {
  validateUlysses(s);
  validateHeadGroups(s, groups);
  ExchangePlan plan;
  plan.ranks = s.ranks;
  for (UlyssesTensor kind : kinds) {
    int64_t shard = shardBytes(s, kind), heads = headLayoutBytes(s, kind, groups);
    // Replicated K/V heads come back one copy per replica.
    int64_t copies = !toHeads && kind == UlyssesTensor::keyValueRows ? kvReplicas(s) : 1;
    plan.sourceBytes.push_back(toHeads ? shard : heads);
    plan.destinationBytes.push_back(toHeads ? heads : copies * shard);
  }
  plan.parts = partPerGroup ? static_cast<int>(groups.size()) : 1;
  plan.pieces = [s, kinds, groups, partPerGroup, toHeads](int t, int src, int dst, int part) {
    int group = partPerGroup ? part : -1;
    return toHeads ? toHeadsPieces(s, kinds[t], groups, src, dst, group)
                   : toShardsPieces(s, kinds[t], groups, src, dst, group);
  };
  return plan;
}

ExchangePlan tessel::kernels::toHeadsPlan(const UlyssesShape &s, std::vector<UlyssesTensor> kinds,
                                          HeadGroups groups, bool partPerGroup) {
  return ulyssesPlan(s, std::move(kinds), std::move(groups), partPerGroup, /*toHeads=*/true);
}

ExchangePlan tessel::kernels::toShardsPlan(const UlyssesShape &s, std::vector<UlyssesTensor> kinds,
                                           HeadGroups groups, bool partPerGroup) {
  return ulyssesPlan(s, std::move(kinds), std::move(groups), partPerGroup, /*toHeads=*/false);
}
