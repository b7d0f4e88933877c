//===- ReferenceTimes.h - reference timings from reference_anchors.py -*- C++ -*-===//
//
// `reference_anchors.py --json FILE` times cuBLAS and torch's attention
// backends on the GPU machine; `tessel bench attention --reference FILE`
// reads that file and prints each row's ratio to the reference timed on the
// same machine. The file is JSON: {"device": ..., "rows": [{"op":
// "attention", "impl": "cudnn", "seqlen": 4096, "head_dim": 128, "causal":
// true, "pass": "fwd", "ms": 1.2, ...}, ...]}.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_HARNESS_REFERENCETIMES_H
#define TESSEL_HARNESS_REFERENCETIMES_H

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tessel::harness {

/// One timed row: its fields as text (numbers as written, booleans as
/// "true"/"false").
using ReferenceRow = std::map<std::string, std::string>;

struct ReferenceTimes {
  std::string device;
  std::vector<ReferenceRow> rows;

  /// The `ms` of the attention row of backend `impl` at this shape, if the
  /// file has it.
  std::optional<double> attentionMs(const std::string &impl, int64_t seqlen, int64_t headDim,
                                    bool causal, const std::string &pass) const;
};

/// Parses the JSON text; throws tessel::Error naming the byte offset and
/// what was expected when the text is not such a file.
ReferenceTimes parseReferenceTimes(const std::string &text);
/// Reads and parses `path` (an Error names the path).
ReferenceTimes readReferenceTimes(const std::string &path);

} // namespace tessel::harness

#endif
