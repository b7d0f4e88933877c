//===- Compile.cpp - Program to a launchable kernel -----------------------===//
//
// Runs Tessel's pipeline and the CUDA emitter on a Program's tile IR (or
// takes their results from the compile cache), and NVRTC on the source;
// what each pass declined and each buffer's layout go into the Kernel.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Compile.h"
#include "CompileCache.h"
#include "CompileInternal.h"
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
#include <fstream>

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

std::shared_ptr<const rt::Binary>
tessel::detail::compileEmitted(const std::string &source, const std::vector<EmittedLine> &lines,
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

/// TESSEL_DUMP_CUDA=DIR: every kernel's emitted CUDA, compiled or from a
/// cache, goes to DIR/NAME.ARCH.HASH.cu (the hash of the source, so that
/// equal sources share a file and two runs' folders compare by name).
static void dumpEmittedSource(const std::string &source, const std::string &name,
                              const std::string &arch) {
  const char *dir = std::getenv("TESSEL_DUMP_CUDA");
  if (!dir || !*dir) return;
  // A dump that cannot be written is worth a warning, not a failed
  // compile; threads compiling the same source replace the file whole.
  std::error_code error;
  fs::create_directories(dir, error);
  std::string file = fmt::format("{}.{}.{}.cu", name, arch, rt::KernelCache::hash(source));
  std::string why = error ? error.message() : rt::replaceFile(fs::path(dir) / file, source);
  if (!why.empty())
    fmt::print(stderr, "tessel: warning: TESSEL_DUMP_CUDA: cannot write {}: {}\n",
               (fs::path(dir) / file).string(), why);
}

OwningOpRef<ModuleOp> tessel::detail::lowerTileIr(MLIRContext &ctx, const std::string &tileIr,
                                                  const TargetInfo &target,
                                                  bool dropWarpSpecialize,
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

namespace {
/// The diagnostics raised while the pipeline and the emitter run: remarks
/// of declined optimizations apart, with their ops' locations; the rest as
/// the text of the error a failure throws.
class PipelineDiagnostics {
public:
  std::string messages;
  std::vector<std::pair<Remark, Location>> remarks;

  explicit PipelineDiagnostics(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &diag) { return handle(diag); }) {}

private:
  LogicalResult handle(Diagnostic &diag) {
    std::string where;
    llvm::raw_string_ostream os(where);
    if (auto fl = llvm::dyn_cast<FileLineColLoc>(diag.getLocation()))
      os << fl.getFilename().getValue() << ":" << fl.getLine();
    else
      os << diag.getLocation();
    std::string text = diag.str();
    if (diag.getSeverity() != DiagnosticSeverity::Error)
      if (std::optional<MissedRemark> missed = parseMissed(text)) {
        Remark remark{missed->pass, missed->category, describeLocation(diag.getLocation()),
                      missed->reason, diag.getSeverity() == DiagnosticSeverity::Warning};
        // Ops made at one line of the program (copies in a C++ loop, a
        // gather's 64 rows) that are declined for one reason say it once.
        bool said = llvm::any_of(remarks, [&](const auto &r) {
          return r.first.pass == remark.pass && r.first.category == remark.category &&
                 r.first.location == remark.location && r.first.message == remark.message &&
                 r.first.isWarning == remark.isWarning;
        });
        if (!said) remarks.push_back({remark, diag.getLocation()});
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
  }

  ScopedDiagnosticHandler handler;
};

/// A program compiled anew: the compile cache's entry for it, its remarks
/// with their own locations, and what each line of the CUDA was emitted
/// for.
struct FreshCompile {
  tessel::detail::CompiledIr entry;
  std::vector<Remark> declined;
  std::vector<EmittedLine> lines;
};
} // namespace

/// The lowered `module`'s CUDA into `fresh`. A failure throws `messages`
/// (the diagnostics so far).
static void emitSource(ModuleOp module, const std::string &messages, FreshCompile &fresh,
                       CompileTimes &timing) {
  auto emitStart = std::chrono::steady_clock::now();
  tile::KernelOp kernelOp = *module.getOps<tile::KernelOp>().begin();
  std::string source;
  llvm::raw_string_ostream os(source);
  FailureOr<rt::KernelSpec> emitted = emitCuda(kernelOp, os, &fresh.lines);
  if (failed(emitted)) throw Error(messages.empty() ? "CUDA emission failed" : messages);
  os.flush();
  fresh.entry.source = std::make_shared<const std::string>(std::move(source));
  fresh.entry.spec = *emitted;
  timing.emitMs = msSince(emitStart);
}

/// Tessel's pipeline for `target` and the emitter run on a copy of
/// `program`'s IR (printed: `tileIr`), with the dumps and the hook
/// `options` asks for; each pass's time goes to `timing`.
static FreshCompile compileAnew(Program &program, const std::string &tileIr,
                                const CompileOptions &options, TargetInfo &target,
                                std::chrono::steady_clock::time_point start,
                                CompileTimes &timing) {
  FreshCompile fresh;
  OwningOpRef<ModuleOp> module(program.module().clone());
  PipelineDiagnostics diagnostics(program.context());

  std::string dumpError;
  PassManager pm(&program.context());
  target.tma = options.tma;
  buildTesselPipeline(pm, target);
  pm.addInstrumentation(std::make_unique<TimePasses>(timing.passMs));
  pm.addInstrumentation(std::make_unique<RecordLayouts>(fresh.entry.layouts));
  if (!options.dumpIrDir.empty()) {
    rt::createDirectories(options.dumpIrDir, "--dump-ir");
    rt::writeFile(fs::path(options.dumpIrDir) / "00-input.mlir", tileIr);
    pm.addInstrumentation(std::make_unique<DumpAfterEachPass>(options.dumpIrDir, dumpError));
  }
  if (options.afterPass) pm.addInstrumentation(std::make_unique<CallAfterEachPass>(options.afterPass));
  const std::string &messages = diagnostics.messages;
  if (failed(pm.run(*module)))
    throw Error(messages.empty() ? "the Tessel pipeline failed" : messages.substr(0, messages.size() - 1));
  if (!dumpError.empty()) throw Error("--dump-ir: " + dumpError);
  timing.passesMs = msSince(start);
  fresh.entry.lowered = std::make_shared<rt::LazyText>([text = printOp(*module)] { return text; });

  emitSource(*module, messages, fresh, timing);
  for (const auto &[remark, loc] : diagnostics.remarks) fresh.declined.push_back(remark);
  fresh.entry.remarks = tessel::detail::remarksForEntry(diagnostics.remarks, program.module());
  return fresh;
}

/// The binary of `source` for `target`, from NVRTC or the kernel cache.
static std::shared_ptr<const rt::Binary> compileBinary(const std::string &source,
                                                       const std::vector<EmittedLine> &lines,
                                                       const TargetInfo &target,
                                                       CompileTimes &timing) {
  auto nvrtcStart = std::chrono::steady_clock::now();
  rt::KernelCache &cache = rt::KernelCache::global();
  int before = cache.stats().nvrtcCompiles;
  std::shared_ptr<const rt::Binary> bin =
      tessel::detail::compileEmitted(source, lines, target.binaryArch());
  timing.nvrtcCalled = cache.stats().nvrtcCompiles != before;
  timing.nvrtcMs = msSince(nvrtcStart);
  return bin;
}

/// The kernel runs, but not as the IR says (e.g. wgmmas serialized for
/// want of registers), where ptxas spills or warns: say so rather than
/// leave it to a profiler.
static void warnAboutPtxas(const rt::Binary &bin, const rt::KernelSpec &spec,
                           const TargetInfo &target) {
  if (bin.spillStoreBytes || bin.spillLoadBytes)
    fmt::print(stderr, "tessel: warning: ptxas spills registers in kernel {} for {} ({} bytes "
               "stored, {} loaded)\n", spec.name, target.arch, bin.spillStoreBytes,
               bin.spillLoadBytes);
  if (!bin.performanceWarnings.empty())
    fmt::print(stderr, "tessel: warning: ptxas slows kernel {} for {}:\n{}", spec.name,
               target.arch, bin.performanceWarnings);
}

Kernel tessel::compile(Program &program, const CompileOptions &options) {
  auto start = std::chrono::steady_clock::now();
  std::optional<TargetInfo> target = lookupTarget(options.arch);
  if (!target)
    throw Error(fmt::format("unknown target '{}'; use sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu", options.arch));
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
    return printOp(*detail::lowerTileIr(ctx, tile, *target, false, "lowering the cached kernel again"));
  };
  std::shared_ptr<const detail::CompiledIr> hit =
      reuse ? detail::findCompiledIr(irKey, lowerAgain) : nullptr;
  rt::KernelSpec spec;
  // What each line of the CUDA was emitted for (empty when the IR cache
  // gave the source: it compiled before).
  std::vector<EmittedLine> emittedLines;
  // A fresh compile's entry, stored once NVRTC has taken its source: a
  // source NVRTC rejects is compiled again next time, so that its error
  // names the user's line then too (a cached source has no lines).
  std::optional<detail::CompiledIr> fresh;
  if (hit) {
    k.lowered = hit->lowered;
    k.source = hit->source;
    k.bufferLayouts = hit->layouts;
    k.declined = detail::remarksFromEntry(*hit, program.module());
    spec = hit->spec;
    k.timing.irCacheHit = true;
    k.timing.passesMs = msSince(start);
  } else {
    FreshCompile compiled = compileAnew(program, k.tile, options, *target, start, k.timing);
    k.lowered = compiled.entry.lowered;
    k.source = compiled.entry.source;
    k.bufferLayouts = compiled.entry.layouts;
    k.declined = std::move(compiled.declined);
    spec = compiled.entry.spec;
    emittedLines = std::move(compiled.lines);
    if (reuse) fresh = std::move(compiled.entry);
  }
  dumpEmittedSource(*k.source, spec.name, target->arch);
  if (options.printWarnings)
    for (const Remark &r : k.declined)
      if (r.isWarning) fmt::print(stderr, "{}\n", r.str());

  std::shared_ptr<const rt::Binary> bin = compileBinary(*k.source, emittedLines, *target, k.timing);
  if (fresh) detail::storeCompiledIr(irKey, *fresh);
  k.loaded = std::make_shared<rt::LoadedKernel>(spec, bin, target->binaryArch());
  k.compiledWith = options;
  warnAboutPtxas(*bin, spec, *target);
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
