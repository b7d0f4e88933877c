//===- Compile.cpp - Program to a launchable kernel -----------------------===//
#include "tessel/dsl/Compile.h"
#include "CompileCache.h"
#include "tessel/Layout/LayoutSvg.h"
#include "tessel/Target/CudaEmitter.h"
#include "tessel/Transforms/Passes.h"
#include "tessel/Transforms/Remarks.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Files.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <cctype>
#include <map>

using namespace mlir;
using namespace tessel;
namespace fs = std::filesystem;

namespace {
/// Writes the IR after every pass to NN-<pass>.mlir.
/// A write that fails is kept in `error` (an exception must not unwind
/// through the pass manager) and reported once the pipeline returns.
struct DumpAfterEachPass : PassInstrumentation {
  fs::path dir;
  std::string &error;
  int counter = 1;
  DumpAfterEachPass(fs::path d, std::string &error) : dir(std::move(d)), error(error) {}
  void runAfterPass(Pass *pass, Operation *op) override {
    if (pass->getArgument().empty() || !error.empty()) return; // the nesting adaptor
    ModuleOp module = op->getParentOfType<ModuleOp>();
    std::string text;
    llvm::raw_string_ostream os(text);
    (module ? module.getOperation() : op)->print(os);
    try {
      rt::writeFile(dir / fmt::format("{:02}-{}.mlir", counter++, pass->getArgument().str()), text);
    } catch (const Error &e) {
      error = e.what();
    }
  }
};

/// Each pass's wall time, for CompileTimes::passMs.
struct TimePasses : PassInstrumentation {
  std::vector<std::pair<std::string, double>> &out;
  std::chrono::steady_clock::time_point started;
  explicit TimePasses(std::vector<std::pair<std::string, double>> &out) : out(out) {}
  void runBeforePass(Pass *pass, Operation *) override {
    if (!pass->getArgument().empty()) started = std::chrono::steady_clock::now();
  }
  void runAfterPass(Pass *pass, Operation *) override {
    if (pass->getArgument().empty()) return; // the nesting adaptor
    out.emplace_back(pass->getArgument().str(),
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                               started)
                         .count());
  }
  void runAfterPassFailed(Pass *pass, Operation *op) override { runAfterPass(pass, op); }
};

/// CompileOptions::afterPass.
struct CallAfterEachPass : PassInstrumentation {
  std::function<void(const std::string &, Operation *)> hook;
  explicit CallAfterEachPass(std::function<void(const std::string &, Operation *)> hook)
      : hook(std::move(hook)) {}
  void runAfterPass(Pass *pass, Operation *op) override {
    if (!pass->getArgument().empty()) hook(pass->getArgument().str(), op);
  }
};

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

/// "file:line" of the first file location in `loc`; empty where none.
std::string fileLine(Location loc) {
  std::string out;
  loc->walk([&](Location inner) {
    auto fl = llvm::dyn_cast<FileLineColLoc>(inner);
    if (!fl) return WalkResult::advance();
    out = fmt::format("{}:{}", fl.getFilename().getValue(), fl.getLine());
    return WalkResult::interrupt();
  });
  return out;
}

/// The binary of emitted CUDA. Should NVRTC reject it, the message leads
/// with the op its first error's line was printed for, at the user's line,
/// and goes on with NVRTC's log.
std::shared_ptr<const rt::Binary> compileEmitted(const std::string &source,
                                                 const std::vector<EmittedLine> &lines,
                                                 const std::string &arch) {
  try {
    return rt::KernelCache::global().getOrCompile(source, arch);
  } catch (const rt::NvrtcError &e) {
    if (e.line < 1 || size_t(e.line) > lines.size()) throw;
    const EmittedLine &at = lines[e.line - 1];
    std::string where = fileLine(at.loc);
    if (where.empty()) throw;
    throw Error(fmt::format("{}: error: the CUDA generated for '{}' does not compile for {} "
                            "(generated line {})\n{}",
                            where, at.op, arch, e.line, e.what()));
  }
}

/// The first op at each location in a walk of `module`, by position.
DenseMap<Location, int64_t> firstOpAt(ModuleOp module) {
  DenseMap<Location, int64_t> first;
  int64_t position = 0;
  module->walk([&](Operation *op) { first.try_emplace(op->getLoc(), position++); });
  return first;
}

/// The location of the op at each position of a walk of `module`.
std::vector<std::string> opLocations(ModuleOp module) {
  std::vector<std::string> out;
  module->walk([&](Operation *op) { out.push_back(describeLocation(op->getLoc())); });
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

const char *severityName(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error: return "error";
  case DiagnosticSeverity::Warning: return "warning";
  case DiagnosticSeverity::Remark: return "remark";
  case DiagnosticSeverity::Note: return "note";
  }
  return "note";
}

std::string printOp(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}
} // namespace

/// Records every buffer's layout right after tessel-layout-inference.
struct RecordLayouts : PassInstrumentation {
  std::vector<BufferLayout> &out;
  explicit RecordLayouts(std::vector<BufferLayout> &out) : out(out) {}
  void runAfterPass(Pass *pass, Operation *op) override {
    if (pass->getArgument() != "tessel-layout-inference") return;
    int index = 0;
    op->walk([&](tile::AllocOp alloc) {
      BufferLayout b;
      b.name = alloc.getName() ? alloc.getName()->str() : fmt::format("buffer {}", index);
      ++index;
      if (auto fl = llvm::dyn_cast<FileLineColLoc>(alloc.getLoc()))
        b.where = fmt::format("{}:{}", fl.getFilename().getValue().str(), fl.getLine());
      llvm::raw_string_ostream ts(b.type), ls(b.layout);
      alloc.getType().print(ts);
      if (auto f = llvm::dyn_cast_or_null<tile::FragmentLayoutAttr>(alloc.getLayoutAttr())) {
        Attribute(f).print(ls);
        b.draw = [l = f.getLayout(), title = b.name] { return layout::renderFragmentSvg(l, title); };
      } else if (auto sh = llvm::dyn_cast_or_null<tile::SharedLayoutAttr>(alloc.getLayoutAttr())) {
        Attribute(sh).print(ls);
        b.draw = [l = sh.getLayout(), title = b.name] { return layout::renderSharedSvg(l, title); };
      } else {
        b.layout = "(annotated affine map or row-major local)";
      }
      out.push_back(std::move(b));
    });
  }
};

/// Tessel's pipeline run again on a kernel's printed tile IR (for the
/// build without TMA, and for lowered IR a cache entry no longer has).
/// Throws naming `what`.
/// TESSEL_DUMP_CUDA=DIR: every kernel's emitted CUDA, compiled or from a
/// cache, goes to DIR/NAME.ARCH.HASH.cu (the hash of the source, so that
/// equal sources share a file and two runs' folders compare by name).
static void dumpEmittedSource(const std::string &source, const std::string &name,
                              const std::string &arch) {
  const char *dir = std::getenv("TESSEL_DUMP_CUDA");
  if (!dir || !*dir) return;
  rt::createDirectories(dir, "TESSEL_DUMP_CUDA");
  std::string file = fmt::format("{}.{}.{}.cu", name, arch, rt::KernelCache::hash(source));
  rt::writeFile(fs::path(dir) / file, source);
}

static OwningOpRef<ModuleOp> lowerTileIr(MLIRContext &ctx, const std::string &tileIr,
                                         const TargetInfo &target, bool dropWarpSpecialize,
                                         const std::string &what) {
  ctx.loadDialect<tile::TileDialect, tilenv::TileNVDialect, arith::ArithDialect, math::MathDialect,
                  memref::MemRefDialect, scf::SCFDialect>();
  std::string messages;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    messages += "\n" + diag.str();
    return success();
  });
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(tileIr, &ctx);
  if (!module) throw Error(fmt::format("{}: cannot re-read the tile IR:{}", what, messages));
  if (dropWarpSpecialize)
    module->walk([](tile::PipelinedOp loop) { loop.removeWarpSpecializeAttr(); });
  PassManager pm(&ctx);
  buildTesselPipeline(pm, target);
  if (failed(pm.run(*module))) throw Error(fmt::format("{} failed:{}", what, messages));
  return module;
}

Kernel tessel::compile(Program &program, const CompileOptions &options) {
  auto start = std::chrono::steady_clock::now();
  std::optional<TargetInfo> target = lookupTarget(options.arch);
  if (!target)
    throw Error(fmt::format("unknown target '{}'; use sm_80, sm_90a, sm_100a or sm_100a-emu", options.arch));
  if (program.module().getBody()->empty())
    throw Error(fmt::format("program '{}' has no kernel; call Program::kernel first", program.name()));
  Kernel k;
  k.info = program.params();
  k.tile = program.str();
  // A program compiled before (same tile IR, target and build of Tessel)
  // skips the passes and the emitter. Dumps and per-pass hooks need the
  // passes to run.
  bool reuse = options.dumpIrDir.empty() && !options.afterPass;
  std::string irKey = reuse ? detail::compiledIrKey(k.tile, options.arch, options.tma) : "";
  auto lowerAgain = [tile = k.tile, arch = options.arch, tma = options.tma] {
    MLIRContext ctx;
    std::optional<TargetInfo> target = lookupTarget(arch);
    target->tma = tma;
    return printOp(*lowerTileIr(ctx, tile, *target, false, "lowering the cached kernel again"));
  };
  std::shared_ptr<const detail::CompiledIr> hit =
      reuse ? detail::findCompiledIr(irKey, lowerAgain) : nullptr;
  rt::KernelSpec spec;
  // What each line of the CUDA was emitted for (empty when the IR cache
  // gave the source: it compiled before).
  std::vector<EmittedLine> emittedLines;
  if (hit) {
    k.lowered = hit->lowered;
    k.source = hit->source;
    k.bufferLayouts = hit->layouts;
    // The same tile IR may come from other lines: each remark is placed at
    // this program's op where the compiled one was.
    std::vector<std::string> locations;
    if (!hit->remarks.empty()) locations = opLocations(program.module());
    for (const auto &[remark, position] : hit->remarks) {
      k.declined.push_back(remark);
      k.declined.back().message = unmarkPositions(remark.message, locations);
      if (position >= 0 && size_t(position) < locations.size())
        k.declined.back().location = locations[position];
    }
    spec = hit->spec;
    k.timing.irCacheHit = true;
    k.timing.passesMs = msSince(start);
  } else {
    OwningOpRef<ModuleOp> module(program.module().clone());

    std::string messages;
    // Remarks of declined optimizations, with their ops' locations.
    std::vector<std::pair<Remark, Location>> remarks;
    ScopedDiagnosticHandler handler(&program.context(), [&](Diagnostic &diag) {
      std::string where;
      llvm::raw_string_ostream os(where);
      if (auto fl = llvm::dyn_cast<FileLineColLoc>(diag.getLocation()))
        os << fl.getFilename().getValue() << ":" << fl.getLine();
      else
        os << diag.getLocation();
      std::string text = diag.str();
      if (diag.getSeverity() != DiagnosticSeverity::Error)
        if (std::optional<MissedRemark> missed = parseMissed(text)) {
          remarks.push_back({Remark{missed->pass, missed->category,
                                    describeLocation(diag.getLocation()), missed->reason,
                                    diag.getSeverity() == DiagnosticSeverity::Warning},
                             diag.getLocation()});
          return success();
        }
      messages += fmt::format("{}: {}: {}\n", where, severityName(diag.getSeverity()), text);
      for (Diagnostic &note : diag.getNotes()) {
        std::string nw;
        llvm::raw_string_ostream nos(nw);
        if (auto fl = llvm::dyn_cast<FileLineColLoc>(note.getLocation()))
          nos << fl.getFilename().getValue() << ":" << fl.getLine();
        messages += fmt::format("{}: note: {}\n", nw, note.str());
      }
      return success();
    });

    std::string dumpError;
    PassManager pm(&program.context());
    target->tma = options.tma;
    buildTesselPipeline(pm, *target);
    pm.addInstrumentation(std::make_unique<TimePasses>(k.timing.passMs));
    pm.addInstrumentation(std::make_unique<RecordLayouts>(k.bufferLayouts));
    if (!options.dumpIrDir.empty()) {
      rt::createDirectories(options.dumpIrDir, "--dump-ir");
      rt::writeFile(fs::path(options.dumpIrDir) / "00-input.mlir", k.tile);
      pm.addInstrumentation(std::make_unique<DumpAfterEachPass>(options.dumpIrDir, dumpError));
    }
    if (options.afterPass) pm.addInstrumentation(std::make_unique<CallAfterEachPass>(options.afterPass));
    if (failed(pm.run(*module)))
      throw Error(messages.empty() ? "the Tessel pipeline failed" : messages.substr(0, messages.size() - 1));
    if (!dumpError.empty()) throw Error("--dump-ir: " + dumpError);
    k.timing.passesMs = msSince(start);
    k.lowered = std::make_shared<rt::LazyText>([text = printOp(*module)] { return text; });

    auto emitStart = std::chrono::steady_clock::now();
    tile::KernelOp kernelOp = *module->getOps<tile::KernelOp>().begin();
    std::string source;
    llvm::raw_string_ostream os(source);
    FailureOr<rt::KernelSpec> emitted = emitCuda(kernelOp, os, &emittedLines);
    if (failed(emitted)) throw Error(messages.empty() ? "CUDA emission failed" : messages);
    os.flush();
    k.source = std::make_shared<const std::string>(std::move(source));
    spec = *emitted;
    k.timing.emitMs = msSince(emitStart);

    std::vector<std::pair<Remark, int64_t>> cachedRemarks;
    DenseMap<Location, int64_t> positions;
    std::vector<std::string> locations;
    if (!remarks.empty()) {
      positions = firstOpAt(program.module());
      locations = opLocations(program.module());
    }
    for (auto &[remark, loc] : remarks) {
      k.declined.push_back(remark);
      auto it = positions.find(loc);
      cachedRemarks.emplace_back(remark, it == positions.end() ? -1 : it->second);
      cachedRemarks.back().first.message = markPositions(remark.message, locations);
    }
    if (reuse)
      detail::storeCompiledIr(irKey,
                              {k.lowered, k.source, spec, k.bufferLayouts, std::move(cachedRemarks)});
  }
  dumpEmittedSource(*k.source, spec.name, target->arch);
  if (options.printWarnings)
    for (const Remark &r : k.declined)
      if (r.isWarning) fmt::print(stderr, "{}\n", r.str());

  auto nvrtcStart = std::chrono::steady_clock::now();
  rt::KernelCache &cache = rt::KernelCache::global();
  int before = cache.stats().nvrtcCompiles;
  std::shared_ptr<const rt::Binary> bin = compileEmitted(*k.source, emittedLines, target->binaryArch());
  k.timing.nvrtcCalled = cache.stats().nvrtcCompiles != before;
  k.timing.nvrtcMs = msSince(nvrtcStart);
  k.loaded = std::make_shared<rt::LoadedKernel>(spec, bin, target->binaryArch());
  k.compiledWith = options;
  // The kernel runs, but not as the IR says (e.g. wgmmas serialized for
  // want of registers): say so rather than leave it to a profiler.
  if (bin->spillStoreBytes || bin->spillLoadBytes)
    fmt::print(stderr, "tessel: warning: ptxas spills registers in kernel {} for {} ({} bytes "
               "stored, {} loaded)\n", spec.name, target->arch, bin->spillStoreBytes,
               bin->spillLoadBytes);
  if (!bin->performanceWarnings.empty())
    fmt::print(stderr, "tessel: warning: ptxas slows kernel {} for {}:\n{}", spec.name,
               target->arch, bin->performanceWarnings);
  k.timing.totalMs = msSince(start);

  if (!options.dumpIrDir.empty()) {
    fs::path dir(options.dumpIrDir);
    rt::writeFile(dir / "kernel.cu", *k.source);
    rt::writeFile(dir / "kernel.ptx", bin->ptxText());
    rt::writeFile(dir / "kernel.cubin", bin->cubin);
  }
  return k;
}

std::string Remark::str() const {
  return fmt::format("{}: {}: {} [{}]: {}", location, isWarning ? "warning" : "remark", pass,
                     category, message);
}

rt::LoadedKernel &Kernel::loadedFor(const std::vector<rt::LaunchArg> &args) {
  const rt::KernelSpec &s = loaded->spec();
  bool fits = llvm::all_of(s.tensorMaps, [&](const rt::TensorMapSpec &map) {
    return map.param < (int)args.size() && args[map.param].kind == rt::LaunchArg::Buffer &&
           rt::tensorMapFits(s, map, args);
  });
  if (fits) return *loaded;
  std::lock_guard<std::mutex> lock(*rebuild);
  if (!withoutTma) {
    // Rebuild from the kernel's tile IR with cp.async loads. Warp
    // specialization needs TMA loads: a loop that asked for it runs as a
    // plain cp.async pipeline in this build.
    MLIRContext ctx;
    std::optional<TargetInfo> target = lookupTarget(compiledWith.arch);
    target->tma = false;
    OwningOpRef<ModuleOp> module = lowerTileIr(ctx, tile, *target, /*dropWarpSpecialize=*/true,
                                               fmt::format("kernel {}: the build without TMA", s.name));
    std::string source;
    llvm::raw_string_ostream os(source);
    std::vector<EmittedLine> lines;
    FailureOr<rt::KernelSpec> spec = emitCuda(*module->getOps<tile::KernelOp>().begin(), os, &lines);
    if (failed(spec)) throw Error(fmt::format("kernel {}: the build without TMA failed", s.name));
    std::shared_ptr<const rt::Binary> bin =
        compileEmitted(source, lines, target->binaryArch());
    withoutTma = std::make_shared<rt::LoadedKernel>(*spec, bin, target->binaryArch());
  }
  return *withoutTma;
}

/// "N = 5, M = 7" for a message.
static std::vector<std::string> symbolText(const std::vector<std::string> &names,
                                           const std::vector<int64_t> &values) {
  std::vector<std::string> out;
  for (size_t i = 0; i < names.size(); ++i) out.push_back(fmt::format("{} = {}", names[i], values[i]));
  return out;
}

void Kernel::launch(const std::vector<rt::LaunchArg> &args, CUstream stream) {
  if (args.size() != info.size())
    throw Error(fmt::format("kernel {} takes {} arguments, got {}", spec().name, info.size(), args.size()));
  // Symbol values, by symbol index.
  std::vector<int64_t> symbols;
  std::vector<std::string> symbolNames;
  for (size_t i = 0; i < info.size(); ++i)
    if (!info[i].isTensor && info[i].dtype == DType::index) {
      symbols.push_back(args[i].i);
      symbolNames.push_back(info[i].name);
    }
  // Before the extents that mention them: the message names the symbol.
  for (size_t s = 0; s < symbols.size(); ++s)
    if (symbols[s] < 0)
      throw Error(fmt::format("kernel {}: {} = {} is an index symbol (Program::sym), which is never "
                              "negative; pass a signed value as a scalar of an integer type",
                              spec().name, symbolNames[s], symbols[s]));
  for (size_t i = 0; i < info.size(); ++i) {
    if (!info[i].isTensor) continue;
    if (args[i].kind != rt::LaunchArg::Buffer)
      throw Error(fmt::format("kernel {}: argument {} ('{}') must be a device buffer", spec().name, i, info[i].name));
    std::string why =
        rt::viewMismatch(spec().params[i], args[i], fmt::format("argument {} ('{}')", i, info[i].name));
    if (!why.empty()) throw Error(fmt::format("kernel {}: {}", spec().name, why));
    for (size_t d = 0; d < info[i].extents.size() && d < args[i].shape.size(); ++d) {
      int64_t e = info[i].extents[d];
      if (e >= 0) continue;
      if (e == kExtentExpression) {
        int64_t expected = evaluate(info[i].extentExprs[d], symbols);
        if (args[i].shape[d] != expected)
          throw Error(fmt::format("kernel {}: tensor '{}' has extent {} in dimension {}, but its "
                                  "declared extent evaluates to {} for {}",
                                  spec().name, info[i].name, args[i].shape[d], d, expected,
                                  fmt::join(symbolText(symbolNames, symbols), ", ")));
        continue;
      }
      size_t s = -(e + 1);
      if (args[i].shape[d] != symbols[s])
        throw Error(fmt::format("kernel {}: tensor '{}' has extent {} in dimension {}, but {} = {}",
                                spec().name, info[i].name, args[i].shape[d], d, symbolNames[s], symbols[s]));
    }
  }
  loadedFor(args).launch(args, stream);
}
