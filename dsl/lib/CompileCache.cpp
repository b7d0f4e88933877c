//===- CompileCache.cpp - pipeline results keyed by the tile IR -----------===//
//
// The entries' format on disk and in memory (CompileCache.h), and the
// remarks an entry keeps, their op locations made positions so that a hit
// names its own program's lines.
//
//===----------------------------------------------------------------------===//
#include "CompileCache.h"
#include "TesselBuildId.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Layout/LayoutSvg.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Files.h"

#include "tessel/Transforms/Remarks.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <mutex>

using namespace tessel;
using namespace tessel::detail;
namespace fs = std::filesystem;

namespace {
// An entry: magic, the head's length (8 bytes), the head (length-prefixed
// fields: CUDA source, spec, layouts, the lowered IR's size and hash), the
// head's hash (32 hex digits), then the lowered IR, which is read only when
// asked for.
constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'T', 'I', 'R', '3'};
constexpr size_t kHashDigits = 32;

std::mutex mutex;
std::map<std::string, std::shared_ptr<const CompiledIr>> memory;

void put(std::string &out, const std::string &field) {
  uint64_t n = field.size();
  out.append(reinterpret_cast<const char *>(&n), sizeof(n));
  out += field;
}

bool take(const std::string &in, size_t &at, std::string &field) {
  uint64_t n = 0;
  if (in.size() - at < sizeof(n)) return false;
  std::memcpy(&n, in.data() + at, sizeof(n));
  at += sizeof(n);
  if (n > in.size() - at) return false;
  field.assign(in, at, n);
  at += n;
  return true;
}

/// A count written as decimal text; false when the field is missing or is
/// not a number (a damaged entry).
bool takeCount(const std::string &in, size_t &at, size_t &count) {
  std::string text;
  if (!take(in, at, text)) return false;
  try {
    count = std::stoul(text);
  } catch (...) {
    return false;
  }
  return true;
}

std::string encode(const CompiledIr &e) {
  const std::string &lowered = e.lowered->get();
  std::string head;
  put(head, *e.source);
  put(head, rt::encodeSpec(e.spec));
  put(head, std::to_string(e.layouts.size()));
  for (const BufferLayout &b : e.layouts) {
    put(head, b.name);
    put(head, b.where);
    put(head, b.type);
    put(head, b.layout);
  }
  put(head, std::to_string(e.remarks.size()));
  for (const auto &[r, op] : e.remarks) {
    put(head, r.pass);
    put(head, r.category);
    put(head, r.location);
    put(head, r.message);
    put(head, r.isWarning ? "w" : "r");
    put(head, std::to_string(op));
  }
  put(head, std::to_string(lowered.size()));
  put(head, rt::KernelCache::hash(lowered));
  std::string out(kMagic, sizeof(kMagic));
  uint64_t n = head.size();
  out.append(reinterpret_cast<const char *>(&n), sizeof(n));
  out += head;
  out += rt::KernelCache::hash(head);
  return out + lowered;
}

/// The picture of a cached layout, drawn from its printed attribute.
std::function<std::string()> drawFromText(const std::string &layout, const std::string &title) {
  if (layout.rfind("#tile.fragment", 0) != 0 && layout.rfind("#tile.shared", 0) != 0) return {};
  return [layout, title]() -> std::string {
    mlir::MLIRContext ctx(mlir::MLIRContext::Threading::DISABLED);
    ctx.loadDialect<tile::TileDialect>();
    mlir::Attribute attr = mlir::parseAttribute(layout, &ctx);
    if (auto f = llvm::dyn_cast_or_null<tile::FragmentLayoutAttr>(attr))
      return layout::renderFragmentSvg(f.getLayout(), title);
    if (auto s = llvm::dyn_cast_or_null<tile::SharedLayoutAttr>(attr))
      return layout::renderSharedSvg(s.getLayout(), title);
    return "";
  };
}

/// Reads and checks an entry's head; sets where and what the lowered IR is.
bool readHead(const fs::path &file, CompiledIr &out, uint64_t &loweredAt, uint64_t &loweredSize,
              std::string &loweredHash) {
  std::FILE *f = std::fopen(file.c_str(), "rb");
  if (!f) return false;
  auto read = [&](void *to, size_t n) { return std::fread(to, 1, n, f) == n; };
  char magic[sizeof(kMagic)];
  uint64_t n = 0;
  std::string head, hash(kHashDigits, '\0');
  bool ok = std::fseek(f, 0, SEEK_END) == 0;
  long total = ok ? std::ftell(f) : -1;
  ok = ok && std::fseek(f, 0, SEEK_SET) == 0 && read(magic, sizeof(magic)) &&
       !std::memcmp(magic, kMagic, sizeof(kMagic)) && read(&n, sizeof(n)) &&
       n <= uint64_t(total);
  if (ok) {
    head.resize(n);
    ok = read(head.data(), n) && read(hash.data(), kHashDigits) &&
         rt::KernelCache::hash(head) == hash;
  }
  std::fclose(f);
  if (!ok) return false;
  size_t at = 0;
  CompiledIr e;
  std::string source, spec, size;
  size_t layouts = 0;
  if (!take(head, at, source) || !take(head, at, spec) || !takeCount(head, at, layouts) ||
      !rt::decodeSpec(spec, e.spec))
    return false;
  for (size_t i = 0; i < layouts; ++i) {
    BufferLayout b;
    if (!take(head, at, b.name) || !take(head, at, b.where) || !take(head, at, b.type) ||
        !take(head, at, b.layout))
      return false;
    b.draw = drawFromText(b.layout, b.name);
    e.layouts.push_back(std::move(b));
  }
  size_t remarks = 0;
  if (!takeCount(head, at, remarks)) return false;
  for (size_t i = 0; i < remarks; ++i) {
    Remark r;
    std::string severity, op;
    if (!take(head, at, r.pass) || !take(head, at, r.category) || !take(head, at, r.location) ||
        !take(head, at, r.message) || !take(head, at, severity) || !take(head, at, op))
      return false;
    r.isWarning = severity == "w";
    int64_t index = -1;
    try {
      index = std::stoll(op);
    } catch (...) {
      return false;
    }
    e.remarks.emplace_back(std::move(r), index);
  }
  if (!take(head, at, size) || !take(head, at, loweredHash) || at != head.size()) return false;
  try {
    loweredSize = std::stoull(size);
  } catch (...) {
    return false;
  }
  loweredAt = sizeof(kMagic) + sizeof(n) + n + kHashDigits;
  if (loweredAt + loweredSize != uint64_t(total)) return false;
  e.source = std::make_shared<const std::string>(std::move(source));
  out = std::move(e);
  return true;
}

fs::path entryPath(const std::string &dir, const std::string &key) {
  return fs::path(dir) / (key + ".tir");
}
} // namespace

std::string tessel::detail::compiledIrKey(const std::string &tileIr, const std::string &arch,
                                          bool tma) {
  return rt::KernelCache::hash(tileIr + '\0' + arch + '\0' + (tma ? "tma" : "no-tma") + '\0' +
                               TESSEL_BUILD_ID);
}

std::shared_ptr<const CompiledIr>
tessel::detail::findCompiledIr(const std::string &key, std::function<std::string()> lowerAgain) {
  if (!rt::KernelCache::enabled()) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = memory.find(key); it != memory.end()) return it->second;
  }
  std::string dir = rt::KernelCache::global().directory();
  if (dir.empty()) return nullptr;
  fs::path file = entryPath(dir, key);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return nullptr;
  auto entry = std::make_shared<CompiledIr>();
  uint64_t at = 0, size = 0;
  std::string hash;
  if (!readHead(file, *entry, at, size, hash)) {
    // Damaged or from an incompatible writer: drop it; the compile that
    // follows writes a good one.
    fs::remove(file, ec);
    return nullptr;
  }
  entry->lowered = std::make_shared<rt::LazyText>([file, at, size, hash, lowerAgain] {
    std::string text(size, '\0');
    std::FILE *f = std::fopen(file.c_str(), "rb");
    bool ok = f && std::fseek(f, long(at), SEEK_SET) == 0 &&
              std::fread(text.data(), 1, size, f) == size;
    if (f) std::fclose(f);
    if (ok && rt::KernelCache::hash(text) == hash) return text;
    // The entry went away or was replaced since it was found.
    return lowerAgain();
  });
  std::lock_guard<std::mutex> lock(mutex);
  memory[key] = entry;
  return entry;
}

void tessel::detail::storeCompiledIr(const std::string &key, const CompiledIr &entry) {
  if (!rt::KernelCache::enabled()) return;
  auto kept = std::make_shared<CompiledIr>(entry);
  {
    std::lock_guard<std::mutex> lock(mutex);
    memory[key] = kept;
  }
  std::string dir = rt::KernelCache::global().directory();
  if (dir.empty()) return;
  // Written whole, so a concurrent reader (another thread or process) sees
  // the entry or none. An unusable directory is reported by the binary
  // cache; here it only costs the passes next time.
  std::error_code ec;
  fs::create_directories(dir, ec);
  rt::replaceFile(entryPath(dir, key), encode(entry));
}

void tessel::clearCompileCacheMemory() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    memory.clear();
  }
  rt::KernelCache::global().clearMemory();
}

//===----------------------------------------------------------------------===//
// Remarks in an entry
//===----------------------------------------------------------------------===//

namespace {
/// The first op at each location in a walk of `module`, by position.
llvm::DenseMap<mlir::Location, int64_t> firstOpAt(mlir::ModuleOp module) {
  llvm::DenseMap<mlir::Location, int64_t> first;
  int64_t position = 0;
  module->walk([&](mlir::Operation *op) { first.try_emplace(op->getLoc(), position++); });
  return first;
}

/// The location of the op at each position of a walk of `module`.
std::vector<std::string> opLocations(mlir::ModuleOp module) {
  std::vector<std::string> out;
  module->walk([&](mlir::Operation *op) { out.push_back(describeLocation(op->getLoc())); });
  return out;
}

// A remark's message names other ops by file:line; the cache keeps those as
// positions in the walk (between these marks), so that a hit from the same
// tile IR built at other lines names its own.
constexpr char kPositionOpen = '\x01', kPositionClose = '\x02';

/// `message` with each op location in `locations` (by walk position)
/// replaced by its marked position; a location is whole where no digit
/// follows it.
std::string markPositions(std::string message, const std::vector<std::string> &locations) {
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < locations.size(); ++i) first.try_emplace(locations[i], i);
  // Longest first, so that no location is taken for a prefix of another.
  std::vector<std::pair<std::string, size_t>> byLength(first.begin(), first.end());
  llvm::sort(byLength, [](auto &a, auto &b) { return a.first.size() > b.first.size(); });
  for (auto &[where, position] : byLength) {
    if (where.empty()) continue;
    std::string marked = kPositionOpen + std::to_string(position) + kPositionClose;
    for (size_t at = message.find(where); at != std::string::npos; at = message.find(where, at)) {
      size_t end = at + where.size();
      if (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) {
        at = end;
        continue;
      }
      message.replace(at, where.size(), marked);
      at += marked.size();
    }
  }
  return message;
}

/// `message` with its marked positions replaced by those ops' locations.
std::string unmarkPositions(const std::string &message, const std::vector<std::string> &locations) {
  std::string out;
  for (size_t at = 0; at < message.size();) {
    size_t open = message.find(kPositionOpen, at), close = message.find(kPositionClose, open);
    if (open == std::string::npos || close == std::string::npos) {
      out += message.substr(at);
      break;
    }
    out += message.substr(at, open - at);
    size_t position = std::stoul(message.substr(open + 1, close - open - 1));
    out += position < locations.size() ? locations[position] : std::string("?");
    at = close + 1;
  }
  return out;
}
} // namespace

std::vector<std::pair<Remark, int64_t>>
tessel::detail::remarksForEntry(const std::vector<std::pair<Remark, mlir::Location>> &remarks,
                                mlir::ModuleOp module) {
  std::vector<std::pair<Remark, int64_t>> cachedRemarks;
  llvm::DenseMap<mlir::Location, int64_t> positions;
  std::vector<std::string> locations;
  if (!remarks.empty()) {
    positions = firstOpAt(module);
    locations = opLocations(module);
  }
  for (auto &[remark, loc] : remarks) {
    auto it = positions.find(loc);
    cachedRemarks.emplace_back(remark, it == positions.end() ? -1 : it->second);
    cachedRemarks.back().first.message = markPositions(remark.message, locations);
  }
  return cachedRemarks;
}

std::vector<Remark> tessel::detail::remarksFromEntry(const CompiledIr &entry,
                                                     mlir::ModuleOp module) {
  std::vector<Remark> declined;
  std::vector<std::string> locations;
  if (!entry.remarks.empty()) locations = opLocations(module);
  for (const auto &[remark, position] : entry.remarks) {
    declined.push_back(remark);
    declined.back().message = unmarkPositions(remark.message, locations);
    if (position >= 0 && size_t(position) < locations.size())
      declined.back().location = locations[position];
  }
  return declined;
}
