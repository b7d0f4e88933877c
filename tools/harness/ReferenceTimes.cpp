//===- ReferenceTimes.cpp - reference timings from reference_anchors.py ---===//
//
// A reader for the one JSON shape reference_anchors.py writes: an object
// with a "device" string and a "rows" array of flat objects whose values are
// strings, numbers or booleans. Anything else is an error with its offset,
// not a guess.
//
//===----------------------------------------------------------------------===//
#include "tessel/harness/ReferenceTimes.h"

#include "tessel/kernels/Settings.h"
#include "tessel/runtime/Error.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

using namespace tessel;

using namespace tessel::harness;

namespace {
struct Reader {
  const std::string &text;
  size_t at = 0;

  [[noreturn]] void fail(const std::string &expected) const {
    throw Error(fmt::format("reference timings: expected {} at byte {}", expected, at));
  }
  void skipSpace() {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\n' || text[at] == '\t' ||
                                text[at] == '\r'))
      ++at;
  }
  bool take(char c) {
    skipSpace();
    if (at < text.size() && text[at] == c) {
      ++at;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(fmt::format("'{}'", c));
  }
  std::string string() {
    skipSpace();
    if (at >= text.size() || text[at] != '"') fail("a string");
    ++at;
    std::string out;
    while (at < text.size() && text[at] != '"') {
      char c = text[at++];
      if (c == '\\') {
        if (at >= text.size()) break;
        char e = text[at++];
        switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'u': // names and devices are ASCII; keep the escape as written
          out += "\\u";
          break;
        default: out += e;
        }
        continue;
      }
      out += c;
    }
    if (at >= text.size()) fail("the end of a string");
    ++at;
    return out;
  }
  /// A number, boolean or null, as written.
  std::string scalar() {
    skipSpace();
    for (const char *word : {"true", "false", "null"})
      if (text.compare(at, std::char_traits<char>::length(word), word) == 0) {
        at += std::char_traits<char>::length(word);
        return word;
      }
    size_t start = at;
    const char *begin = text.c_str() + at;
    char *end = nullptr;
    std::strtod(begin, &end);
    if (end == begin) fail("a value");
    at += size_t(end - begin);
    return text.substr(start, at - start);
  }
  std::string value() {
    skipSpace();
    if (at < text.size() && text[at] == '"') return string();
    if (at < text.size() && (text[at] == '{' || text[at] == '['))
      fail("a string, number or boolean (rows are flat)");
    return scalar();
  }
  ReferenceRow row() {
    ReferenceRow out;
    expect('{');
    if (take('}')) return out;
    do {
      std::string key = string();
      expect(':');
      out[key] = value();
    } while (take(','));
    expect('}');
    return out;
  }
};
} // namespace

ReferenceTimes tessel::harness::parseReferenceTimes(const std::string &text) {
  Reader r{text};
  ReferenceTimes out;
  bool sawRows = false;
  r.expect('{');
  if (!r.take('}')) {
    do {
      std::string key = r.string();
      r.expect(':');
      if (key == "rows") {
        sawRows = true;
        r.expect('[');
        if (!r.take(']')) {
          do out.rows.push_back(r.row());
          while (r.take(','));
          r.expect(']');
        }
      } else if (key == "device") {
        out.device = r.string();
      } else {
        r.value();
      }
    } while (r.take(','));
    r.expect('}');
  }
  r.skipSpace();
  if (r.at != text.size()) r.fail("the end of the file");
  if (!sawRows) throw Error("reference timings: the file has no \"rows\" (write it with "
                            "reference_anchors.py --json FILE)");
  return out;
}

ReferenceTimes tessel::harness::readReferenceTimes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("reference timings: cannot read {}", path));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parseReferenceTimes(text.str());
  } catch (const Error &e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
}

namespace {
bool fieldIs(const ReferenceRow &row, const char *key, const std::string &want) {
  auto it = row.find(key);
  return it != row.end() && it->second == want;
}

/// A whole-number field equal to `want` (json.dump writes Python ints as
/// plain digits; a float such as 4096.0 is compared by value too).
bool fieldIs(const ReferenceRow &row, const char *key, int64_t want) {
  auto it = row.find(key);
  if (it == row.end()) return false;
  char *end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end != it->second.c_str() && *end == 0 && v == double(want);
}

/// The row's positive `ms`, if it has one.
std::optional<double> msOf(const ReferenceRow &row) {
  auto ms = row.find("ms");
  if (ms == row.end()) return std::nullopt;
  char *end = nullptr;
  double v = std::strtod(ms->second.c_str(), &end);
  if (end != ms->second.c_str() && v > 0) return v;
  return std::nullopt;
}
} // namespace

std::optional<double> ReferenceTimes::attentionMs(const std::string &impl, int64_t seqlen,
                                                  int64_t headDim, bool causal,
                                                  const std::string &pass, int64_t batch,
                                                  int64_t heads, int64_t headsKv) const {
  // A field the row leaves out, or a value of 0 asked for, matches.
  auto agrees = [](const ReferenceRow &row, const char *key, int64_t want) {
    return want == 0 || !row.count(key) || fieldIs(row, key, want);
  };
  for (const ReferenceRow &row : rows) {
    if (!fieldIs(row, "op", "attention") || !fieldIs(row, "impl", impl) ||
        !fieldIs(row, "pass", pass) || !fieldIs(row, "seqlen", std::to_string(seqlen)) ||
        !fieldIs(row, "head_dim", std::to_string(headDim)) ||
        !fieldIs(row, "causal", causal ? "true" : "false") || !agrees(row, "batch", batch) ||
        !agrees(row, "heads", heads) ||
        !agrees(row, row.count("heads_kv") ? "heads_kv" : "heads", headsKv))
      continue;
    if (std::optional<double> ms = msOf(row)) return ms;
  }
  return std::nullopt;
}

std::optional<double> ReferenceTimes::gemmMs(const std::string &impl, const std::string &dtype,
                                             int64_t m, int64_t n, int64_t k) const {
  for (const ReferenceRow &row : rows) {
    if (!fieldIs(row, "op", "gemm") || !fieldIs(row, "impl", impl) ||
        (!dtype.empty() && !fieldIs(row, "dtype", dtype)) || !fieldIs(row, "M", m) ||
        !fieldIs(row, "N", n) || !fieldIs(row, "K", k))
      continue;
    if (std::optional<double> ms = msOf(row)) return ms;
  }
  return std::nullopt;
}

void ReferenceTimes::append(const ReferenceTimes &other) {
  if (device.empty()) device = other.device;
  else if (!other.device.empty() && device != other.device &&
           (", " + device + ", ").find(", " + other.device + ", ") == std::string::npos)
    device += ", " + other.device;
  rows.insert(rows.end(), other.rows.begin(), other.rows.end());
}

ReferenceTimes tessel::harness::readReferenceTimes(const std::vector<std::string> &paths) {
  ReferenceTimes out;
  for (const std::string &item : paths) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = std::min(item.find(',', start), item.size());
      std::string path = item.substr(start, comma - start);
      if (path.empty()) throw Error(fmt::format("reference timings: an empty path in '{}'", item));
      out.append(readReferenceTimes(path));
      start = comma + 1;
    }
  }
  return out;
}

std::optional<GemmReference>
tessel::harness::gemmReferenceFor(const std::map<std::string, std::string> &settings) {
  auto in = settings.find("in");
  // The kernel's own default input type is f16.
  std::string type = in == settings.end() ? "f16" : in->second;
  if (type == "f16") return GemmReference{"cublas", "float16"};
  if (type == "bf16") return GemmReference{"cublas", "bfloat16"};
  if (type == "f8e4m3" || type == "e4m3") {
    auto scale = settings.find("scale");
    std::string scaling = scale == settings.end() ? "tensor" : scale->second;
    return GemmReference{"cublaslt_fp8_" + scaling, "e4m3->bf16"};
  }
  if (type == "i8") return GemmReference{"cublas_int8", "i8->i32"};
  return std::nullopt;
}

std::vector<GemmShape> tessel::harness::parseGemmShapes(const std::string &text) {
  std::vector<GemmShape> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (item == "llm") {
      for (int64_t m : {128, 1024, 8192})
        for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {14336, 4096}, {4096, 14336}})
          out.push_back({m, n, k});
      continue;
    }
    size_t x1 = item.find('x'), x2 = x1 == std::string::npos ? x1 : item.find('x', x1 + 1);
    if (x2 == std::string::npos || item.find('x', x2 + 1) != std::string::npos)
      throw Error(fmt::format("--shapes: '{}' is not MxNxK or llm", item));
    std::string what = fmt::format("--shapes {}", item);
    out.push_back({kernels::parseInteger(item.substr(0, x1), 1, INT32_MAX, what + ": M"),
                   kernels::parseInteger(item.substr(x1 + 1, x2 - x1 - 1), 1, INT32_MAX, what + ": N"),
                   kernels::parseInteger(item.substr(x2 + 1), 1, INT32_MAX, what + ": K")});
  }
  return out;
}
