//===- tessel.cpp - compile, inspect and run library kernels --------------===//
//
//   tessel list
//   tessel compile KERNEL [--param k=v ...] [--arch sm_80|sm_90a|sm_100a|sm_100a-emu]
//                  [--emit mlir|lowered|cuda|ptx|cubin] [--dump-ir DIR] [-o FILE]
//                  [--show-layouts] [--layout-svg BUFFER=FILE.svg] [--no-tma] [--timing]
//                  [--remarks]
//   tessel run KERNEL [--param k=v ...] [--arch A] [--seed N] [--dump-ir DIR]
//   tessel bench KERNEL [--param k=v ...] [--arch A] [--reps N]
//   tessel bench gemm [--param k=v ...] [--shapes LIST] [--reference FILE[,FILE]]...
//   tessel bench attention [--param k=v ...] [--reference FILE[,FILE]]...
//   tessel bench launch [--reps N]
//
//===----------------------------------------------------------------------===//
#include "tessel/harness/Library.h"
#include "tessel/kernels/attention/Attention.h"
#include "LaunchBench.h"
#include "MultiGpu.h"
#include "tessel/harness/ReferenceTimes.h"
#include "Tune.h"
#include "tessel/harness/Tuning.h"
#include "tessel/runtime/Cache.h"
#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Files.h"
#include "tessel/Transforms/Passes.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <cstring>
#include <random>
#include <fmt/format.h>
#include <set>
#include <fstream>
#include <iostream>

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::harness;

namespace {
struct Args {
  std::string command, kernel, arch, emit = "cuda", dumpDir, output;
  Params params;
  uint64_t seed = 0;
  bool seedGiven = false;
  int reps = 30;
  int ranks = 0; // multi-GPU commands: 0 means one per GPU
  bool showLayouts = false, emitGiven = false, tma = true;
  std::vector<std::pair<std::string, std::string>> svgs; // buffer name, file
  bool timing = false; // compile: each pass's time
  bool remarks = false; // compile: what the compiler declined to do, and why
  int jobs = 0;         // tune: compile threads (0: one per core)
  bool compileOnly = false;
  // bench attention|gemm: reference_anchors.py --json files, each item a
  // path or a comma-separated list of them.
  std::vector<std::string> references;
  std::string shapes; // bench gemm: MxNxK,... or llm
};

[[noreturn]] void usage(const std::string &why) {
  std::cerr << "tessel: " << why << "\n"
            << "usage: tessel list\n"
            << "       tessel compile KERNEL [--param k=v ...] [--arch sm_80|sm_90a|sm_100a|sm_100a-emu]\n"
            << "                      [--emit mlir|lowered|cuda|ptx|cubin] [--dump-ir DIR] [-o FILE]\n"
            << "                      [--show-layouts] [--layout-svg BUFFER=FILE.svg] [--no-tma] [--timing]\n"
            << "                      [--remarks]\n"
            << "       tessel run KERNEL [--param k=v ...] [--arch A] [--seed N] [--dump-ir DIR]\n"
            << "       tessel bench KERNEL [--param k=v ...] [--arch A] [--reps N]\n"
            << "       tessel bench gemm [--param k=v ...] [--shapes MxNxK,...|llm] [--reference TIMES.json]\n"
            << "         (one row per shape; llm: M 128/1024/8192 by (N, K) (4096, 4096), (14336, 4096),\n"
            << "          (4096, 14336); ratios to cuBLAS / cuBLASLt FP8 / cuBLAS int8 as `in` calls for)\n"
            << "       tessel bench attention [--param k=v ...] [--reference TIMES.json]\n"
            << "         (forward and backward: FA3 shapes, 32k/64k contexts, 32/8 and 64/8 heads;\n"
            << "          --param table=fa3|long|all; ratios to tools/attention-reference.py's JSON)\n"
            << "         --reference may be repeated or take FILE,FILE (a bf16 and a --lowp run,\n"
            << "         say); ratio = reference ms / Tessel ms, above 1 is Tessel faster\n"
            << "       tessel bench launch [--reps N]   (host time of one launch; a CUDA graph of 100)\n"
            << "       tessel tune KERNEL [--param k=v ...] [--arch A] [--reps N] [--jobs N] [--compile-only]\n"
            << "         (times candidate configurations; --param config=auto then uses the fastest)\n"
            << "       tessel run|bench all2all|sp_attention|ag_gemm|gemm_rs [--ranks N] [--param k=v ...]   (one process per GPU)\n"
            << "       tessel launch -n N -- PROGRAM [ARGS...]   (N local ranks, torchrun's variables)\n";
  std::exit(2);
}

int64_t parseOption(const std::string &opt, const std::string &value, int64_t lo, int64_t hi) {
  try {
    return parseInteger(value, lo, hi, opt);
  } catch (const Error &e) {
    usage(e.what());
  }
}

Args parse(int argc, char **argv) {
  Args a;
  if (argc < 2) usage("no command");
  a.command = argv[1];
  int i = 2;
  if (a.command != "list") {
    if (argc < 3 || argv[2][0] == '-') usage("no kernel named");
    a.kernel = argv[i++];
  }
  for (; i < argc; ++i) {
    std::string opt = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(opt + " needs a value");
      return argv[++i];
    };
    if (opt == "--param") {
      std::string kv = next();
      size_t eq = kv.find('=');
      if (eq == std::string::npos) usage("--param takes key=value, got '" + kv + "'");
      a.params[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (opt == "--timing") {
      a.timing = true;
    } else if (opt == "--arch") {
      a.arch = next();
      if (!lookupTarget(a.arch)) usage("--arch takes sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu, got '" + a.arch + "'");
    }
    else if (opt == "--emit") { a.emit = next(); a.emitGiven = true; }
    else if (opt == "--dump-ir") a.dumpDir = next();
    else if (opt == "-o") a.output = next();
    else if (opt == "--seed") {
      a.seed = uint64_t(parseOption(opt, next(), 0, INT64_MAX));
      a.seedGiven = true;
    } else if (opt == "--reps") a.reps = int(parseOption(opt, next(), 1, 1000000));
    else if (opt == "--ranks") a.ranks = int(parseOption(opt, next(), 1, 1024));
    else if (opt == "--jobs") a.jobs = int(parseOption(opt, next(), 1, 1024));
    else if (opt == "--compile-only") a.compileOnly = true;
    else if (opt == "--reference") a.references.push_back(next());
    else if (opt == "--shapes") a.shapes = next();
    else if (opt == "--show-layouts") a.showLayouts = true;
    else if (opt == "--remarks") a.remarks = true;
    else if (opt == "--no-tma") a.tma = false;
    else if (opt == "--layout-svg") {
      std::string kv = next();
      size_t eq = kv.find('=');
      if (eq == std::string::npos) usage("--layout-svg takes BUFFER=FILE.svg, got '" + kv + "'");
      a.svgs.push_back({kv.substr(0, eq), kv.substr(eq + 1)});
    }
    else usage("unknown option '" + opt + "'");
  }
  if (!a.references.empty() && (a.command != "bench" || (a.kernel != "attention" && a.kernel != "gemm")))
    usage("--reference is an option of bench attention and bench gemm");
  if (!a.shapes.empty() && (a.command != "bench" || a.kernel != "gemm"))
    usage("--shapes is an option of bench gemm");
  return a;
}

int list() {
  for (const LibraryKernel &k : library()) {
    fmt::print("{:<12} {}\n", k.name, k.summary);
    std::string params;
    for (auto &[key, value] : k.defaults) params += fmt::format(" {}={}", key, value);
    fmt::print("{:<12} params:{}\n", "", params);
  }
  return 0;
}

void printTimes(const Kernel &k, bool perPass = false) {
  const CompileTimes &t = k.times();
  if (t.irCacheHit)
    fmt::print(stderr, "compile: passes skipped (tile IR cache hit, {:.1f} ms), nvrtc {:.1f} ms ({}), "
               "total {:.1f} ms\n",
               t.passesMs, t.nvrtcMs, t.nvrtcCalled ? "compiled" : "cache hit", t.totalMs);
  else
    fmt::print(stderr, "compile: passes {:.1f} ms, emit {:.1f} ms, nvrtc {:.1f} ms ({}), total {:.1f} ms\n",
               t.passesMs, t.emitMs, t.nvrtcMs, t.nvrtcCalled ? "compiled" : "cache hit", t.totalMs);
  if (!perPass) return;
  for (auto &[pass, ms] : t.passMs) fmt::print(stderr, "  {:8.2f} ms  {}\n", ms, pass);
}

/// `params` with `config=auto` resolved to the tuned configuration for
/// this device (else for the target), saying which on stderr.
Params resolvedConfig(const LibraryKernel &entry, const Params &params, const std::string &arch) {
  std::string device;
  if (params.count("config") && rt::Driver::available()) device = rt::Driver::get().deviceName();
  std::string said;
  Params p = resolveConfig(entry, params, device, arch, &said);
  if (!said.empty()) fmt::print(stderr, "{}\n", said);
  return p;
}

/// The settings a command runs with: the tuned configuration where asked
/// for, then the defaults.
Params configured(const LibraryKernel &entry, const Params &params, const std::string &arch) {
  return withDefaults(entry, resolvedConfig(entry, params, arch), arch);
}

int compileCommand(const Args &a) {
  const LibraryKernel &entry = findKernel(a.kernel);
  std::string arch = a.arch.empty() ? "sm_90a" : a.arch;
  Params p = configured(entry, a.params, arch);
  Program program = entry.build(p);
  CompileOptions options{arch, a.dumpDir, a.tma};
  // --remarks prints the warnings with the rest, once.
  options.printWarnings = !a.remarks;
  Kernel k = compile(program, options);
  printTimes(k, a.timing);
  if (a.remarks) {
    for (const Remark &r : k.remarks()) fmt::print("{}\n", r.str());
    if (k.remarks().empty()) fmt::print("no remarks: nothing was declined\n");
  }
  if (a.showLayouts)
    for (const BufferLayout &b : k.layouts())
      fmt::print("{} ({}, {}):\n  {}\n", b.name, b.type, b.where, b.layout);
  for (auto &[buffer, file] : a.svgs) {
    auto it = std::find_if(k.layouts().begin(), k.layouts().end(),
                           [&](const BufferLayout &b) { return b.name == buffer; });
    if (it == k.layouts().end()) {
      std::string names;
      for (const BufferLayout &b : k.layouts()) names += (names.empty() ? "" : ", ") + b.name;
      throw Error(fmt::format("no buffer named '{}' in {}; its buffers are: {}", buffer, a.kernel, names));
    }
    std::string svg = it->svg();
    if (svg.empty()) throw Error(fmt::format("buffer '{}' has no layout picture", buffer));
    rt::writeFile(file, svg);
    fmt::print(stderr, "wrote the layout of {} to {}\n", buffer, file);
  }
  // Inspection alone prints no code unless --emit asks for it.
  if ((a.showLayouts || !a.svgs.empty() || a.remarks) && !a.emitGiven) return 0;
  std::string text;
  if (a.emit == "mlir") text = k.tileIr();
  else if (a.emit == "lowered") text = k.loweredIr();
  else if (a.emit == "cuda") text = k.cuda();
  else if (a.emit == "ptx") text = k.ptx();
  else if (a.emit == "cubin") text = k.cubin();
  else usage("--emit takes mlir, lowered, cuda, ptx or cubin");
  if (a.output.empty()) {
    if (a.emit == "cubin") usage("--emit cubin needs -o FILE");
    std::cout << text;
  } else {
    rt::writeFile(a.output, text);
    fmt::print(stderr, "wrote {} ({} bytes)\n", a.output, text.size());
  }
  if (!a.dumpDir.empty()) fmt::print(stderr, "IR after every pass, CUDA and PTX in {}\n", a.dumpDir);
  return 0;
}

int runCommand(const Args &a) {
  if (a.kernel == "all2all") return allToAllCommand(false, a.params, a.ranks, a.reps);
  if (a.kernel == "sp_attention") return spAttentionCommand(false, a.params, a.ranks, a.reps);
  if (a.kernel == "ag_gemm" || a.kernel == "gemm_rs")
    return tensorParallelCommand(false, a.kernel == "ag_gemm", a.params, a.ranks, a.reps);
  const LibraryKernel &entry = findKernel(a.kernel);
  std::string why;
  bool gpu = rt::Driver::available(&why);
  std::string arch = a.arch;
  if (arch.empty()) {
    arch = rt::nativeArch(gpu ? rt::Driver::get().computeCapability() : 90);
  }
  Params p = configured(entry, a.params, arch);
  Program program = entry.build(p);
  Kernel k = compile(program, {arch, a.dumpDir, a.tma});
  printTimes(k);
  fmt::print("compiled {} for {}: {} bytes of cubin, {} bytes of PTX\n", entry.name, arch,
             k.cubin().size(), k.ptx().size());
  if (!a.dumpDir.empty()) fmt::print("IR after every pass, CUDA and PTX in {}\n", a.dumpDir);
  if (!gpu) {
    fmt::print("NO GPU: cannot run {} here ({}). The cubin was produced; run on a machine with an "
               "NVIDIA GPU to check it.\n", entry.name, why);
    return 0;
  }
  auto &d = rt::Driver::get();
  fmt::print("device: {} (sm_{}) — {}\n", d.deviceName(), d.computeCapability(),
             k.loadedKernel().resourceUsage());
  uint64_t seed = a.seedGiven ? a.seed : std::random_device{}();
  CheckResult r = entry.check(k, p, seed);
  fmt::print("{} {}: rel error {:.3e} (tolerance {:.0e}), {:.4f} ms — {}\n", entry.name, r.shape,
             r.relError, r.tolerance, r.ms, r.passed ? "PASS" : "FAIL");
  return r.passed ? 0 : 1;
}

/// --reference's files, read before anything else so that a bad one is an
/// error on any machine.
std::optional<ReferenceTimes> readReferences(const Args &a) {
  if (a.references.empty()) return std::nullopt;
  return readReferenceTimes(a.references);
}

/// Says which device the reference rows come from, and where that is not
/// this one: ratios across machines compare the machines as much as the code.
void describeReference(const ReferenceTimes &reference) {
  fmt::print("reference: {} ({} rows)\n",
             reference.device.empty() ? "unnamed device" : reference.device, reference.rows.size());
  std::string here = rt::Driver::get().deviceName();
  if (!reference.device.empty() && reference.device.find(here) == std::string::npos)
    fmt::print(stderr, "note: the reference was timed on {}, not on this {}\n", reference.device, here);
}

/// One row shape of `tessel bench attention`'s table.
struct AttentionRowShape {
  int64_t headDim, seqlen, batch, heads, headsKv;
};

/// FlashAttention-3's shapes (batch * seqlen = 16k, heads * head_dim =
/// 2048), then long contexts (batch 1, 32 heads, head_dim 128, 32k and 64k
/// tokens) and grouped K/V heads (32/8 and 64/8, 8k, batch 2). `which`:
/// fa3, long (the long and grouped rows) or all.
std::vector<AttentionRowShape> attentionTable(const std::string &which) {
  if (which != "fa3" && which != "long" && which != "all")
    usage("bench attention: --param table= takes fa3, long or all, got '" + which + "'");
  std::vector<AttentionRowShape> rows;
  if (which != "long")
    for (int64_t d : {64, 128, 256})
      for (int64_t s : {1024, 4096, 8192})
        rows.push_back({d, s, 16384 / s, 2048 / d, 2048 / d});
  if (which != "fa3") {
    rows.push_back({128, 32768, 1, 32, 32});
    rows.push_back({128, 65536, 1, 32, 32});
    rows.push_back({128, 8192, 2, 32, 8});
    rows.push_back({128, 8192, 2, 64, 8});
  }
  return rows;
}

/// The settings of one row and pass of the table: the shape, then what
/// attention::forward would choose without a record, then --param.
Params attentionRowSettings(const LibraryKernel &entry, const AttentionRowShape &row, int causal,
                            const std::string &pass, const std::string &arch, bool tuned,
                            const Params &given) {
  Params shape = {{"head_dim", std::to_string(row.headDim)},
                  {"batch", std::to_string(row.batch)},
                  {"seqlen_q", std::to_string(row.seqlen)},
                  {"seqlen_k", std::to_string(row.seqlen)},
                  {"heads_q", std::to_string(row.heads)},
                  {"heads_kv", std::to_string(row.headsKv)},
                  {"causal", std::to_string(causal)}};
  // The schedule attention::forward takes without a record.
  if (pass == "fwd" && !tuned) {
    AttentionConfig chosen, plain;
    chosen.headDim = plain.headDim = row.headDim;
    chosen.causal = plain.causal = causal;
    chooseForwardSchedule(chosen, arch, row.seqlen, row.seqlen, row.heads, row.headsKv,
                          rt::Driver::get().l2CacheBytes(rt::Driver::get().currentDevice()));
    Settings differ = attentionSettings().write(chosen);
    for (auto &[key, value] : attentionSettings().write(plain))
      if (differ.at(key) != value) shape[key] = differ.at(key);
  }
  // The backward's grid order as attention::backward takes it.
  if (pass == "bwd" && !tuned) {
    AttentionBackwardConfig chosen;
    chosen.headDim = row.headDim;
    chosen.causal = causal;
    chooseBackwardGridOrder(chosen, row.seqlen, row.heads,
                            rt::Driver::get().l2CacheBytes(rt::Driver::get().currentDevice()));
    shape["grid_order"] = attentionBackwardSettings().write(chosen).at("grid_order");
  }
  // dK and dV as attention::backward reduces them: per K/V head, or added
  // over a group's query heads.
  if (pass == "bwd") shape["kv_reduction"] = row.heads == row.headsKv ? "direct" : "atomic";
  for (auto &[key, value] : given)
    if (entry.defaults.count(key)) shape[key] = value;
  return shape;
}

/// `tessel bench attention`: forward and backward over attentionTable()
/// (head_dim 256 forward only), or at the shape the --param settings give;
/// other settings (stages, block sizes) apply to both passes. With
/// --reference, each row's cuDNN time from that file and the ratio (cuDNN
/// ms / Tessel ms, above 1 is faster), and the geometric mean per pass.
int benchAttention(const Args &a) {
  // The file is read first: a bad one is an error on any machine.
  std::optional<ReferenceTimes> reference = readReferences(a);
  Params given = a.params;
  std::string which = given.count("table") ? given.at("table") : "all";
  given.erase("table");
  std::vector<AttentionRowShape> table = attentionTable(which);
  std::string why;
  if (!rt::Driver::available(&why)) {
    fmt::print("NO GPU: cannot benchmark attention here ({})\n", why);
    return 1;
  }
  std::string arch =
      !a.arch.empty() ? a.arch : rt::nativeArch(rt::Driver::get().computeCapability());
  bool oneShape = given.count("seqlen_q") || given.count("head_dim");
  if (oneShape) {
    // The shape --param gives, the rest as FlashAttention-3's table has it.
    auto given64 = [&](const char *key, int64_t otherwise) {
      return given.count(key) ? parseInteger(given.at(key), 1, INT32_MAX, key) : otherwise;
    };
    int64_t d = given64("head_dim", 64), s = given64("seqlen_q", 1024);
    int64_t heads = given64("heads_q", 2048 / d);
    table = {{d, s, given64("batch", std::max<int64_t>(16384 / s, 1)), heads,
              given64("heads_kv", heads)}};
  }
  if (reference) describeReference(*reference);
  fmt::print("{:>4} {:>6} {:>9} {:>6} {:>4} {:>10} {:>10}{}\n", "d", "seqlen", "b x h/hkv",
             "mask", "pass", "ms", "TFLOP/s",
             reference ? fmt::format(" {:>10} {:>6}", "cudnn ms", "ratio") : "");
  std::map<std::string, std::vector<double>> ratios; // by pass
  for (const AttentionRowShape &row : table)
    for (int causal : {0, 1})
      for (std::string pass : {"fwd", "bwd"}) {
        const LibraryKernel &entry = findKernel("flash_attention_" + pass);
        bool tuned = given.count("config") && entry.tuning.candidates;
        Params shape = attentionRowSettings(entry, row, causal, pass, arch, tuned, given);
        // The backward takes head_dim 64 and 128.
        if (pass == "bwd" && std::stoll(shape.at("head_dim")) > 128) continue;
        // config=auto: the tuned configuration for this shape (the passes
        // without one keep the settings above).
        if (tuned) {
          shape["config"] = given.at("config");
          shape = resolvedConfig(entry, shape, arch);
        }
        Params p = withDefaults(entry, shape, arch);
        Program program = entry.build(p);
        Kernel k = compile(program, {arch, ""});
        BenchResult r = entry.bench(k, p, a.reps);
        std::string compared;
        if (reference) {
          std::optional<double> ms = reference->attentionMs(
              "cudnn", std::stoll(p.at("seqlen_q")), std::stoll(p.at("head_dim")),
              p.at("causal") == "1", pass, std::stoll(p.at("batch")), std::stoll(p.at("heads_q")),
              std::stoll(p.at("heads_kv")));
          compared = ms ? fmt::format(" {:>10.3f} {:>6.2f}", *ms, *ms / r.ms)
                        : fmt::format(" {:>10} {:>6}", "-", "-");
          if (ms) ratios[pass].push_back(*ms / r.ms);
        }
        fmt::print("{:>4} {:>6} {:>9} {:>6} {:>4} {:>10.3f} {:>10.1f}{}   {}\n", p.at("head_dim"),
                   p.at("seqlen_q"),
                   fmt::format("{}x{}/{}", p.at("batch"), p.at("heads_q"), p.at("heads_kv")),
                   p.at("causal") == "1" ? "causal" : "full", pass, r.ms, r.tflops, compared,
                   r.shape);
      }
  for (auto &[pass, values] : ratios) {
    double logSum = 0;
    for (double v : values) logSum += std::log(v);
    fmt::print("{}: geometric mean {:.2f}x cuDNN, lowest {:.2f}x, over {} rows\n", pass,
               std::exp(logSum / values.size()), *std::min_element(values.begin(), values.end()),
               values.size());
  }
  return 0;
}

/// A gemm's time beside its reference's: the reference's impl, ms and
/// reference ms / Tessel ms, or "-" where the file has no such row (the
/// ratio also goes to `ratios`).
std::string gemmComparison(const ReferenceTimes &reference, const Params &p, double ms,
                           std::vector<double> &ratios) {
  std::optional<GemmReference> ref = gemmReferenceFor(p);
  std::optional<double> refMs;
  if (ref)
    refMs = reference.gemmMs(ref->impl, ref->dtype, std::stoll(p.at("M")), std::stoll(p.at("N")),
                             std::stoll(p.at("K")));
  if (!refMs) return fmt::format(" {:>20} {:>10} {:>6}", ref ? ref->impl : "-", "-", "-");
  ratios.push_back(*refMs / ms);
  return fmt::format(" {:>20} {:>10.3f} {:>6.2f}", ref->impl, *refMs, *refMs / ms);
}

/// The geometric mean and the lowest of the ratios, if there are any.
void summarizeRatios(const std::vector<double> &ratios) {
  if (ratios.empty()) return;
  double logSum = 0;
  for (double v : ratios) logSum += std::log(v);
  fmt::print("geometric mean {:.2f}x the reference, lowest {:.2f}x, over {} rows\n",
             std::exp(logSum / ratios.size()), *std::min_element(ratios.begin(), ratios.end()),
             ratios.size());
}

/// `tessel bench gemm --shapes LIST`: one row per shape, the other settings
/// from --param (config=auto resolved per shape, as its records are by shape
/// bucket); settings that differ from the first row's end the row.
int benchGemmShapes(const Args &a, const std::vector<GemmShape> &shapes, const std::string &arch,
                    const std::optional<ReferenceTimes> &reference) {
  const LibraryKernel &entry = findKernel("gemm");
  if (reference) describeReference(*reference);
  auto settingsOf = [](const Params &p, const Params *besides) {
    std::string out;
    for (auto &[key, value] : p)
      if (key != "M" && key != "N" && key != "K" &&
          (!besides || !besides->count(key) || besides->at(key) != value))
        out += fmt::format(" {}={}", key, value);
    return out;
  };
  std::optional<Params> first;
  std::vector<double> ratios;
  for (const GemmShape &shape : shapes) {
    Params shaped = a.params;
    shaped["M"] = std::to_string(shape.m);
    shaped["N"] = std::to_string(shape.n);
    shaped["K"] = std::to_string(shape.k);
    Params p = configured(entry, shaped, arch);
    Program program = entry.build(p);
    Kernel k = compile(program, {arch, ""});
    BenchResult r = entry.bench(k, p, a.reps);
    if (!first) {
      first = p;
      fmt::print("gemm on {}, median of {} after warm-up:{} ({})\n", arch, a.reps,
                 settingsOf(p, nullptr), k.loadedKernel().resourceUsage());
      fmt::print("{:>20} {:>10} {:>10}{}\n", "MxNxK", "ms", "TFLOP/s",
                 reference ? fmt::format(" {:>20} {:>10} {:>6}", "reference", "ref ms", "ratio")
                           : "");
    }
    std::string compared = reference ? gemmComparison(*reference, p, r.ms, ratios) : "";
    fmt::print("{:>20} {:>10.3f} {:>10.1f}{}{}\n",
               fmt::format("{}x{}x{}", shape.m, shape.n, shape.k), r.ms, r.tflops, compared,
               settingsOf(p, &*first));
  }
  summarizeRatios(ratios);
  return 0;
}

/// `tessel bench gemm` given only a problem (types, scale, transposes,
/// extents) times what tessel::gemm runs for it, shape by shape
/// (config=library), not the settings table's one-size defaults, which a
/// user would otherwise take for the library's speed.
Params libraryByDefault(const LibraryKernel &entry, Params params) {
  static const std::set<std::string> problem = {"in", "out", "scale", "transpose_a",
                                                "transpose_b", "M", "N", "K"};
  if (entry.name != "gemm" || params.count("config")) return params;
  for (auto &[key, value] : params)
    if (!problem.count(key)) return params;
  fmt::print("gemm: no tile settings given, so each shape runs what tessel::gemm picks for it "
             "(config=library; config=auto for a tuned record, or give the settings)\n");
  params["config"] = "library";
  return params;
}

/// Times a kernel at a (possibly large) shape without the CPU reference.
int benchCommand(const Args &given) {
  Args a = given;
  if (a.kernel == "attention") return benchAttention(a);
  if (a.kernel == "launch") return launchBenchCommand(a.reps == 30 ? 4000 : a.reps);
  if (a.kernel == "all2all") return allToAllCommand(true, a.params, a.ranks, a.reps);
  if (a.kernel == "sp_attention") return spAttentionCommand(true, a.params, a.ranks, a.reps);
  if (a.kernel == "ag_gemm" || a.kernel == "gemm_rs")
    return tensorParallelCommand(true, a.kernel == "ag_gemm", a.params, a.ranks, a.reps);
  const LibraryKernel &entry = findKernel(a.kernel);
  if (!entry.bench) usage("kernel " + entry.name + " has no benchmark");
  a.params = libraryByDefault(entry, a.params);
  // The files and the shapes are read first: a bad one is an error on any
  // machine.
  std::optional<ReferenceTimes> reference = readReferences(a);
  std::vector<GemmShape> shapes;
  if (!a.shapes.empty()) {
    try {
      shapes = parseGemmShapes(a.shapes);
    } catch (const Error &e) {
      usage(e.what());
    }
  }
  std::string why;
  if (!rt::Driver::available(&why)) {
    fmt::print("NO GPU: cannot benchmark {} here ({})\n", entry.name, why);
    return 1;
  }
  std::string arch =
      !a.arch.empty() ? a.arch : rt::nativeArch(rt::Driver::get().computeCapability());
  if (!shapes.empty()) return benchGemmShapes(a, shapes, arch, reference);
  Params p = configured(entry, a.params, arch);
  Program program = entry.build(p);
  Kernel k = compile(program, {arch, ""});
  BenchResult r = entry.bench(k, p, a.reps);
  std::string config;
  for (auto &[key, value] : p) config += fmt::format(" {}={}", key, value);
  fmt::print("bench {} {}: median {:.3f} ms of {} after warm-up, {:.1f} TFLOP/s, {:.1f} GB/s ({}){}\n",
             entry.name, r.shape, r.ms, a.reps, r.tflops, r.gbps,
             k.loadedKernel().resourceUsage(), config);
  if (reference) {
    describeReference(*reference);
    std::vector<double> ratios;
    fmt::print("{:>20} {:>10} {:>6}\n{}\n", "reference", "ref ms", "ratio",
               gemmComparison(*reference, p, r.ms, ratios).substr(1));
  }
  return 0;
}
} // namespace

/// `tessel launch -n N -- PROGRAM [ARGS...]`
int launch(int argc, char **argv) {
  int ranks = 0, i = 2;
  for (; i < argc && std::strcmp(argv[i], "--"); ++i) {
    if (!std::strcmp(argv[i], "-n") && i + 1 < argc)
      ranks = int(parseOption("-n", argv[++i], 1, 1024));
    else
      usage(fmt::format("launch: unknown option '{}'", argv[i]));
  }
  if (ranks == 0) usage("launch needs -n N");
  if (i >= argc) usage("launch: put the program after --");
  return launchCommand(ranks, std::vector<std::string>(argv + i + 1, argv + argc));
}

int main(int argc, char **argv) {
  setCommandLine(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "launch") {
    try {
      return launch(argc, argv);
    } catch (const std::exception &e) {
      std::cerr << "tessel: " << e.what() << "\n";
      return 1;
    }
  }
  Args a = parse(argc, argv);
  try {
    if (a.command == "list") return list();
    if (a.command == "compile") return compileCommand(a);
    if (a.command == "run") return runCommand(a);
    if (a.command == "bench") return benchCommand(a);
    if (a.command == "tune")
      return tuneCommand(a.kernel, a.params, a.arch, a.reps, a.jobs, a.compileOnly);
    usage("unknown command '" + a.command + "'");
  } catch (const Error &e) {
    std::cerr << "tessel: " << e.what() << "\n";
    return 1;
  } catch (const std::exception &e) {
    // Not a Tessel error: still a message and an exit code, never an abort.
    std::cerr << "tessel: internal error: " << e.what() << "\n";
    return 1;
  }
}
