//===- KernelSpec.cpp - the launch contract as text ------------------------===//
//
// Whitespace-separated integers after the kernel's name, each list preceded
// by its length: what the compile cache stores so that a cached kernel
// launches exactly as a freshly compiled one.
//
//===----------------------------------------------------------------------===//
#include "tessel/runtime/KernelSpec.h"

#include <cstdlib>
#include <sstream>

using namespace tessel::rt;

std::string tessel::rt::encodeSpec(const KernelSpec &s) {
  std::ostringstream os;
  os << s.name << ' ' << s.threads << ' ' << s.sharedBytes << ' ' << s.params.size();
  for (const ParamSpec &p : s.params) {
    os << ' ' << p.isBuffer << ' ' << static_cast<int>(p.type) << ' ' << p.peers << ' '
       << p.shape.size();
    for (int64_t e : p.shape) os << ' ' << e;
  }
  os << ' ' << s.grid.size();
  for (const auto &program : s.grid) {
    os << ' ' << program.size();
    for (const GridToken &t : program) os << ' ' << static_cast<int>(t.kind) << ' ' << t.value;
  }
  os << ' ' << s.tensorMaps.size();
  for (const TensorMapSpec &m : s.tensorMaps) {
    os << ' ' << m.param << ' ' << m.swizzle << ' ' << m.box.size();
    for (int64_t b : m.box) os << ' ' << b;
    os << ' ' << int(m.peers);
  }
  for (unsigned c : s.cluster) os << ' ' << c;
  os << ' ' << int(s.persistent);
  return os.str();
}

namespace {
/// Reads whitespace-separated integers off a C string (an istringstream
/// cost a warm compile a millisecond of locale set-up).
struct Tokens {
  const char *at;
  bool failed = false;
  template <class T> Tokens &operator>>(T &value) {
    char *end = nullptr;
    long long v = failed ? 0 : std::strtoll(at, &end, 10);
    if (failed || end == at) {
      failed = true;
      return *this;
    }
    at = end;
    value = static_cast<T>(v);
    return *this;
  }
  explicit operator bool() const { return !failed; }
  bool atEnd() const {
    const char *p = at;
    while (*p == ' ') ++p;
    return *p == '\0';
  }
};
} // namespace

bool tessel::rt::decodeSpec(const std::string &text, KernelSpec &out) {
  KernelSpec s;
  size_t space = text.find(' ');
  if (space == 0 || space == std::string::npos) return false;
  s.name = text.substr(0, space);
  Tokens is{text.c_str() + space};
  // Counts are bounded so that a damaged entry cannot ask for a huge
  // allocation.
  auto count = [&](size_t &n) { return static_cast<bool>(is >> n) && n < 4096; };
  size_t params = 0;
  if (!(is >> s.threads >> s.sharedBytes) || !count(params)) return false;
  for (size_t i = 0; i < params; ++i) {
    ParamSpec p;
    int type = 0;
    size_t rank = 0;
    if (!(is >> p.isBuffer >> type >> p.peers) || !count(rank)) return false;
    if (type < 0 || type > static_cast<int>(ScalarType::UE8M0)) return false;
    p.type = static_cast<ScalarType>(type);
    p.shape.resize(rank);
    for (int64_t &e : p.shape)
      if (!(is >> e)) return false;
    s.params.push_back(std::move(p));
  }
  size_t dims = 0;
  if (!count(dims)) return false;
  for (size_t d = 0; d < dims; ++d) {
    size_t tokens = 0;
    if (!count(tokens)) return false;
    std::vector<GridToken> program;
    for (size_t t = 0; t < tokens; ++t) {
      int kind = 0;
      int64_t value = 0;
      if (!(is >> kind >> value) || kind < 0 || kind > static_cast<int>(GridToken::Mod))
        return false;
      program.push_back({static_cast<GridToken::Kind>(kind), value});
    }
    s.grid.push_back(std::move(program));
  }
  size_t maps = 0;
  if (!count(maps)) return false;
  for (size_t m = 0; m < maps; ++m) {
    TensorMapSpec map;
    size_t rank = 0;
    if (!(is >> map.param >> map.swizzle) || !count(rank)) return false;
    map.box.resize(rank);
    for (int64_t &b : map.box)
      if (!(is >> b)) return false;
    int peers = 0;
    if (!(is >> peers) || peers < 0 || peers > 1) return false;
    map.peers = peers == 1;
    s.tensorMaps.push_back(std::move(map));
  }
  for (unsigned &c : s.cluster)
    if (!(is >> c) || c < 1 || c > 8) return false;
  int persistent = 0;
  if (!(is >> persistent) || persistent < 0 || persistent > 1) return false;
  s.persistent = persistent == 1;
  if (!is.atEnd()) return false; // trailing garbage
  out = std::move(s);
  return true;
}
