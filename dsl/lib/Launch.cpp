//===- Launch.cpp - a compiled kernel's launch ----------------------------===//
//
// Kernel::launch checks the arguments against the parameters (device
// buffers, views, extents against the index symbols) before it launches;
// a kernel built with TMA whose tensor maps cannot describe the arguments
// launches its build without TMA, made on first need.
//
//===----------------------------------------------------------------------===//
#include "tessel/dsl/Compile.h"
#include "CompileInternal.h"
#include "tessel/Dialect/Tile/TileDialect.h"
#include "tessel/Target/CudaEmitter.h"
#include "tessel/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace mlir;
using namespace tessel;

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
    OwningOpRef<ModuleOp> module =
        detail::lowerTileIr(ctx, tile, *target, /*dropWarpSpecialize=*/true,
                            fmt::format("kernel {}: the build without TMA", s.name));
    std::string source;
    llvm::raw_string_ostream os(source);
    std::vector<EmittedLine> lines;
    FailureOr<rt::KernelSpec> spec = emitCuda(*module->getOps<tile::KernelOp>().begin(), os, &lines);
    if (failed(spec)) throw Error(fmt::format("kernel {}: the build without TMA failed", s.name));
    std::shared_ptr<const rt::Binary> bin =
        detail::compileEmitted(source, lines, target->binaryArch());
    withoutTma = std::make_shared<rt::LoadedKernel>(*spec, bin, target->binaryArch());
  }
  return *withoutTma;
}

/// "N = 5, M = 7" for a message: the index symbols among the parameters
/// and their values.
static std::string symbolText(const std::vector<ParamInfo> &info,
                              const std::vector<int64_t> &values) {
  std::vector<std::string> out;
  for (size_t i = 0, s = 0; i < info.size(); ++i)
    if (!info[i].isTensor && info[i].dtype == DType::index)
      out.push_back(fmt::format("{} = {}", info[i].name, values[s++]));
  return fmt::format("{}", fmt::join(out, ", "));
}

/// The name of index symbol `s` (its position among the symbols).
static const std::string &symbolName(const std::vector<ParamInfo> &info, size_t s) {
  for (const ParamInfo &p : info)
    if (!p.isTensor && p.dtype == DType::index && s-- == 0) return p.name;
  return info.front().name;
}

void Kernel::checkArguments(const std::vector<rt::LaunchArg> &args) const {
  if (args.size() != info.size())
    throw Error(fmt::format("kernel {} takes {} arguments, got {}", spec().name, info.size(), args.size()));
  // Symbol values, by symbol index (the buffer is reused: a launch
  // allocates nothing here once it has grown).
  static thread_local std::vector<int64_t> symbols;
  symbols.clear();
  for (size_t i = 0; i < info.size(); ++i)
    if (!info[i].isTensor && info[i].dtype == DType::index) symbols.push_back(args[i].i);
  // Before the extents that mention them: the message names the symbol.
  for (size_t s = 0; s < symbols.size(); ++s)
    if (symbols[s] < 0)
      throw Error(fmt::format("kernel {}: {} = {} is an index symbol (Program::sym), which is never "
                              "negative; pass a signed value as a scalar of an integer type",
                              spec().name, symbolName(info, s), symbols[s]));
  for (size_t i = 0; i < info.size(); ++i) {
    if (!info[i].isTensor) continue;
    if (args[i].kind != rt::LaunchArg::Buffer)
      throw Error(fmt::format("kernel {}: argument {} ('{}') must be a device buffer", spec().name, i, info[i].name));
    if (!rt::viewFits(spec().params[i], args[i]))
      throw Error(fmt::format("kernel {}: {}", spec().name,
                              rt::viewMismatch(spec().params[i], args[i],
                                               fmt::format("argument {} ('{}')", i, info[i].name))));
    for (size_t d = 0; d < info[i].extents.size() && d < args[i].shape.size(); ++d) {
      int64_t e = info[i].extents[d];
      if (e >= 0) continue;
      if (e == kExtentExpression) {
        int64_t expected = evaluate(info[i].extentExprs[d], symbols);
        if (args[i].shape[d] != expected)
          throw Error(fmt::format("kernel {}: tensor '{}' has extent {} in dimension {}, but its "
                                  "declared extent evaluates to {} for {}",
                                  spec().name, info[i].name, args[i].shape[d], d, expected,
                                  symbolText(info, symbols)));
        continue;
      }
      size_t s = -(e + 1);
      if (args[i].shape[d] != symbols[s])
        throw Error(fmt::format("kernel {}: tensor '{}' has extent {} in dimension {}, but {} = {}",
                                spec().name, info[i].name, args[i].shape[d], d,
                                symbolName(info, s), symbols[s]));
    }
  }
}

void Kernel::launch(const std::vector<rt::LaunchArg> &args, CUstream stream,
                    const rt::LaunchOptions &options) {
  checkArguments(args);
  loadedFor(args).launch(args, stream, options);
}
