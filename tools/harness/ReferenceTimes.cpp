//===- ReferenceTimes.cpp - reference timings from reference_anchors.py ---===//
//
// A reader for the one JSON shape reference_anchors.py writes: an object
// with a "device" string and a "rows" array of flat objects whose values are
// strings, numbers or booleans. Anything else is an error with its offset,
// not a guess.
//
//===----------------------------------------------------------------------===//
#include "tessel/harness/ReferenceTimes.h"

#include "tessel/runtime/Error.h"

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

std::optional<double> ReferenceTimes::attentionMs(const std::string &impl, int64_t seqlen,
                                                  int64_t headDim, bool causal,
                                                  const std::string &pass) const {
  auto is = [](const ReferenceRow &row, const char *key, const std::string &want) {
    auto it = row.find(key);
    return it != row.end() && it->second == want;
  };
  for (const ReferenceRow &row : rows) {
    if (!is(row, "op", "attention") || !is(row, "impl", impl) || !is(row, "pass", pass) ||
        !is(row, "seqlen", std::to_string(seqlen)) || !is(row, "head_dim", std::to_string(headDim)) ||
        !is(row, "causal", causal ? "true" : "false"))
      continue;
    auto ms = row.find("ms");
    if (ms == row.end()) continue;
    char *end = nullptr;
    double v = std::strtod(ms->second.c_str(), &end);
    if (end != ms->second.c_str() && v > 0) return v;
  }
  return std::nullopt;
}
