//===- UlyssesPieces.h - Ulysses layouts as exchange plans --------*- C++ -*-===//
//
// The layouts of Ulysses sequence parallelism as PieceExchange plans, for
// every tensor attention and its backward move:
//  - rows tensors, [rows, heads, D] (Q, O, dO and their gradients with the
//    query heads; K, V, dK, dV with the K/V heads): a rank's shard holds
//    1/N of every sequence for all heads; the head layout the whole
//    sequences for the rank's heads, in head groups, each group a
//    contiguous [rows, heads of the group, D];
//  - the log-sum-exp, f32 [batch, heads, rows of an entry] (an entry is a
//    batch entry, or the whole packed batch): the shard [batch, Hq, rows/N],
//    the head layout per group [batch, heads of the group, rows], each group
//    starting on 16 bytes.
// toHeads moves shards to head layouts (the forward's exchange); toShards
// the way back. K/V heads replicated over several ranks (heads_kv < N)
// come back as one copy per replica, `replicas` shards of [rows/N, Hkv, D]
// one after another, for the caller to sum (the gradients of a shared head).
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_KERNELS_PARALLEL_ULYSSESPIECES_H
#define TESSEL_KERNELS_PARALLEL_ULYSSESPIECES_H

#include "tessel/kernels/parallel/PieceExchange.h"
#include "tessel/kernels/parallel/Ulysses.h"

namespace tessel::kernels {

enum class UlyssesTensor {
  /// [rows, heads_q, D] in the shape's element size.
  queryRows,
  /// [rows, heads_kv, D]; K/V heads replicated when heads_kv < N.
  keyValueRows,
  /// f32 [batch, heads_q, rows].
  logSumExp,
};

/// Query heads per head group of a rank (summing to heads_q / N).
using HeadGroups = std::vector<int64_t>;

/// Ranks holding each K/V head after the exchange: N / heads_kv where the
/// K/V heads are replicated, else 1.
int64_t kvReplicas(const UlyssesShape &s);

/// Bytes of a rank's shard and of its head layout of `kind`.
int64_t shardBytes(const UlyssesShape &s, UlyssesTensor kind);
int64_t headLayoutBytes(const UlyssesShape &s, UlyssesTensor kind, const HeadGroups &groups);
/// Where head group g starts in the head layout of `kind`.
int64_t headGroupOffset(const UlyssesShape &s, UlyssesTensor kind, const HeadGroups &groups,
                        int g);

/// The pieces of head group `group` (-1: of every group) rank `dst` takes
/// from rank `src`: of its shard into its head layout (toHeads), or of the
/// head layout back into shards (toShards; for keyValueRows with replicas,
/// into copy src % replicas of the shard).
std::vector<Piece> toHeadsPieces(const UlyssesShape &s, UlyssesTensor kind,
                                 const HeadGroups &groups, int src, int dst, int group = -1);
std::vector<Piece> toShardsPieces(const UlyssesShape &s, UlyssesTensor kind,
                                  const HeadGroups &groups, int src, int dst, int group = -1);

/// Plans over several tensors at once (one message per peer under NCCL);
/// with `partPerGroup` each head group is a part of its own (PartPipeline).
ExchangePlan toHeadsPlan(const UlyssesShape &s, std::vector<UlyssesTensor> kinds,
                         HeadGroups groups, bool partPerGroup = false);
ExchangePlan toShardsPlan(const UlyssesShape &s, std::vector<UlyssesTensor> kinds,
                          HeadGroups groups, bool partPerGroup = false);

} // namespace tessel::kernels

#endif
