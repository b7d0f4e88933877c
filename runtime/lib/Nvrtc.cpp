//===- Nvrtc.cpp - CUDA C++ to cubin at run time --------------------------===//
#include "tessel/runtime/Nvrtc.h"
#include "tessel/runtime/Error.h"

#include <fmt/format.h>
#include <nvrtc.h>
#include <regex>
#include <sstream>

using namespace tessel;
using namespace tessel::rt;

static const char kDeviceHeader[] = {
#include "tessel_device.h.inc"
    0};
static const char kTcgen05EmulationHeader[] = {
#include "tessel_tcgen05_emu.h.inc"
    0};

const char *tessel::rt::deviceHeader() { return kDeviceHeader; }
const char *tessel::rt::tcgen05EmulationHeader() { return kTcgen05EmulationHeader; }

std::string tessel::rt::nvrtcVersion() {
  int major = 0, minor = 0;
  ::nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

static void checkNvrtc(nvrtcResult r, const char *call) {
  if (r != NVRTC_SUCCESS)
    throw Error(fmt::format("{} failed: {}", call, nvrtcGetErrorString(r)));
}

/// The name NVRTC knows the generated source by; the device headers have
/// their own, and their line numbers are theirs.
static const char kSourceName[] = "tessel_kernel.cu";

/// NVRTC's log with the generated source line under each diagnostic about
/// the generated source; `firstError` gets the first error's line.
static std::string annotateLog(const std::string &log, const std::string &source, int &firstError) {
  std::vector<std::string> lines;
  std::istringstream in(source);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::ostringstream out;
  std::istringstream logIn(log);
  static const std::regex where(R"(^tessel_kernel\.cu\((\d+)\): (error|warning))");
  firstError = 0;
  for (std::string l; std::getline(logIn, l);) {
    out << l << "\n";
    std::smatch m;
    if (!std::regex_search(l, m, where)) continue;
    size_t n = std::stoul(m[1]);
    if (n < 1 || n > lines.size()) continue;
    out << "    generated line " << n << ": " << lines[n - 1] << "\n";
    if (!firstError && m[2] == "error") firstError = static_cast<int>(n);
  }
  return out.str();
}

Binary tessel::rt::compileCuda(const std::string &source, const std::string &arch,
                               const std::vector<std::string> &options) {
  nvrtcProgram prog;
  const char *headers[] = {kDeviceHeader, kTcgen05EmulationHeader};
  const char *names[] = {"tessel_device.h", "tessel_tcgen05_emu.h"};
  checkNvrtc(nvrtcCreateProgram(&prog, source.c_str(), kSourceName, 2, headers, names),
             "nvrtcCreateProgram");
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "-std=c++17", "-lineinfo",
                                   "--ptxas-options=-v"};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char *> argv;
  for (auto &o : opts) argv.push_back(o.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog, argv.size(), argv.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  std::string log(logSize, '\0');
  if (logSize) nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    int firstError = 0;
    std::string annotated = annotateLog(log, source, firstError);
    throw NvrtcError(fmt::format("nvrtcCompileProgram failed for {}: {}\n{}", arch,
                                 nvrtcGetErrorString(r), annotated),
                     firstError);
  }
  Binary bin;
  std::istringstream logLines(log);
  static const std::regex spills(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  for (std::string l; std::getline(logLines, l);) {
    if (std::smatch m; std::regex_search(l, m, spills)) {
      bin.spillStoreBytes += std::stoll(m[1]);
      bin.spillLoadBytes += std::stoll(m[2]);
    }
    if (size_t at = l.find("Potential Performance Loss"); at != std::string::npos) {
      // "ptxas info    : (C7512) Potential Performance Loss: ..." -> from "(C7512)".
      size_t code = l.rfind('(', at);
      bin.performanceWarnings += l.substr(code == std::string::npos ? at : code) + "\n";
    } else if (size_t at = l.find("(C7519)"); at != std::string::npos) {
      // "warpgroup.arrive is injected ... to allow use of registers in
      // GMMA": a wait before a wgmma the schedule did not plan.
      bin.performanceWarnings += l.substr(at) + "\n";
    }
  }
  size_t size = 0;
  checkNvrtc(nvrtcGetPTXSize(prog, &size), "nvrtcGetPTXSize");
  bin.ptx.resize(size);
  checkNvrtc(nvrtcGetPTX(prog, bin.ptx.data()), "nvrtcGetPTX");
  if (!bin.ptx.empty() && bin.ptx.back() == '\0') bin.ptx.pop_back();
  checkNvrtc(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
  bin.cubin.resize(size);
  checkNvrtc(nvrtcGetCUBIN(prog, bin.cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&prog);
  return bin;
}
