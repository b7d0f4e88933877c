//===- CompileCache.cpp - pipeline results keyed by the tile IR -----------===//
#include "CompileCache.h"
#include "TesselBuildId.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Layout/LayoutSvg.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Files.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/MLIRContext.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <mutex>
#include <unistd.h>

using namespace tessel;
using namespace tessel::detail;
namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'T', 'E', 'S', 'S', 'T', 'I', 'R', '1'};

std::mutex mutex;
std::map<std::string, std::shared_ptr<const CompiledIr>> memory;
std::atomic<uint64_t> tmpCounter{0};

/// Fields as (8-byte length, bytes), after the magic and before a hash of
/// everything before it.
void put(std::string &out, const std::string &field) {
  uint64_t n = field.size();
  out.append(reinterpret_cast<const char *>(&n), sizeof(n));
  out += field;
}

bool take(const std::string &in, size_t &at, size_t end, std::string &field) {
  uint64_t n = 0;
  if (end - at < sizeof(n)) return false;
  std::memcpy(&n, in.data() + at, sizeof(n));
  at += sizeof(n);
  if (n > end - at) return false;
  field.assign(in, at, n);
  at += n;
  return true;
}

std::string encode(const CompiledIr &e) {
  std::string out(kMagic, sizeof(kMagic));
  put(out, e.lowered);
  put(out, e.source);
  put(out, rt::encodeSpec(e.spec));
  put(out, std::to_string(e.layouts.size()));
  for (const BufferLayout &b : e.layouts) {
    put(out, b.name);
    put(out, b.where);
    put(out, b.type);
    put(out, b.layout);
  }
  out += rt::KernelCache::hash(out);
  return out;
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

bool decode(const std::string &bytes, CompiledIr &out) {
  size_t hashDigits = 32;
  if (bytes.size() < sizeof(kMagic) + hashDigits ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return false;
  size_t end = bytes.size() - hashDigits;
  if (rt::KernelCache::hash(bytes.substr(0, end)) != bytes.substr(end)) return false;
  size_t at = sizeof(kMagic);
  CompiledIr e;
  std::string spec, count;
  if (!take(bytes, at, end, e.lowered) || !take(bytes, at, end, e.source) ||
      !take(bytes, at, end, spec) || !take(bytes, at, end, count) ||
      !rt::decodeSpec(spec, e.spec))
    return false;
  size_t n = 0;
  try {
    n = std::stoul(count);
  } catch (...) {
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    BufferLayout b;
    if (!take(bytes, at, end, b.name) || !take(bytes, at, end, b.where) ||
        !take(bytes, at, end, b.type) || !take(bytes, at, end, b.layout))
      return false;
    b.draw = drawFromText(b.layout, b.name);
    e.layouts.push_back(std::move(b));
  }
  if (at != end) return false;
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

std::shared_ptr<const CompiledIr> tessel::detail::findCompiledIr(const std::string &key) {
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
  std::string bytes;
  auto entry = std::make_shared<CompiledIr>();
  if (!rt::readWholeFile(file, bytes) || !decode(bytes, *entry)) {
    // Damaged or from an incompatible writer: drop it; the compile that
    // follows writes a good one.
    fs::remove(file, ec);
    return nullptr;
  }
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
  // Written beside and renamed over, so a concurrent reader (another
  // thread or process) sees the whole entry or none. An unusable
  // directory is reported by the binary cache; here it only costs the
  // passes next time.
  std::error_code ec;
  fs::create_directories(dir, ec);
  fs::path file = entryPath(dir, key), tmp = file;
  tmp += fmt::format(".tmp{}.{}", getpid(), ++tmpCounter);
  std::string bytes = encode(entry);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), bytes.size());
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
}
