//===- ReferenceTimes.h - reference timings from reference_anchors.py -*- C++ -*-===//
//
// `reference_anchors.py [--lowp] --json FILE` times cuBLAS, cuBLASLt and
// torch's attention backends on the GPU machine; `tessel bench attention|gemm
// --reference FILE` reads that file and prints each row's ratio to the
// reference timed on the same machine. The file is JSON: {"device": ...,
// "rows": [{"op": "attention", "impl": "cudnn", "seqlen": 4096, "head_dim":
// 128, "causal": true, "pass": "fwd", "ms": 1.2, ...}, {"op": "gemm", "impl":
// "cublas", "M": 4096, "N": 4096, "K": 4096, "dtype": "bfloat16", "ms":
// 0.2, ...}, ...]}.
//
//===----------------------------------------------------------------------===//
#ifndef TESSEL_HARNESS_REFERENCETIMES_H
#define TESSEL_HARNESS_REFERENCETIMES_H

#include <cstdint>
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
  /// file has it. A row's batch and heads, where it gives them, must be
  /// `batch` and `heads`, and its heads_kv (else its heads) `headsKv`;
  /// zero for any of the three matches every row.
  std::optional<double> attentionMs(const std::string &impl, int64_t seqlen, int64_t headDim,
                                    bool causal, const std::string &pass, int64_t batch = 0,
                                    int64_t heads = 0, int64_t headsKv = 0) const;
  /// The `ms` of the gemm row of `impl` at M x N x K, if the file has it;
  /// an empty `dtype` matches any.
  std::optional<double> gemmMs(const std::string &impl, const std::string &dtype, int64_t m,
                               int64_t n, int64_t k) const;
  /// Adds another file's rows (a bf16 run and a --lowp run, say); the
  /// devices are listed together where they differ.
  void append(const ReferenceTimes &other);
};

/// A gemm's reference in reference_anchors.py's rows: its `impl` and
/// `dtype` fields.
struct GemmReference {
  std::string impl, dtype;
};

/// The reference a gemm of these settings is compared with: cuBLAS at f16
/// and bf16 inputs, cuBLASLt's FP8 at e4m3 inputs (`scale` tensor or row,
/// tensor where absent), cuBLAS's int8 at i8 inputs; none for other inputs
/// (f32, e5m2), which reference_anchors.py does not time.
std::optional<GemmReference> gemmReferenceFor(const std::map<std::string, std::string> &settings);

struct GemmShape {
  int64_t m, n, k;
  bool operator==(const GemmShape &o) const { return m == o.m && n == o.n && k == o.k; }
};

/// `--shapes`: comma-separated MxNxK, and `llm` for reference_anchors.py's
/// nine LLM shapes (M 128, 1024, 8192 by (N, K) (4096, 4096), (14336, 4096),
/// (4096, 14336)). Throws tessel::Error naming the item it cannot read.
std::vector<GemmShape> parseGemmShapes(const std::string &text);

/// Parses the JSON text; throws tessel::Error naming the byte offset and
/// what was expected when the text is not such a file.
ReferenceTimes parseReferenceTimes(const std::string &text);
/// Reads and parses `path` (an Error names the path).
ReferenceTimes readReferenceTimes(const std::string &path);
/// Reads every file of `paths`, each item a path or a comma-separated list
/// of them, into one set of rows.
ReferenceTimes readReferenceTimes(const std::vector<std::string> &paths);

} // namespace tessel::harness

#endif
