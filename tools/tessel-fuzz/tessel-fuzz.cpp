//===- tessel-fuzz.cpp - differential fuzzing of DSL programs -------------===//
//
//   tessel-fuzz --compile-only (--seconds S | --programs N) [--seed N] [--archs A,B] [--jobs J] --out DIR
//   tessel-fuzz --run N [--seed S] [--archs A,B] [--jobs J] [--timeout SEC] [--no-cpu-reference]
//               --out DIR
//   tessel-fuzz --one SEED [--archs A,B]      (in this process: compute-sanitizer)
//   tessel-fuzz --sample K [--seed S] [--archs A,B]
//   tessel-fuzz --print SEED                  (the program as C++)
//   tessel-fuzz --cpu-dump SEED               (its inputs and the CPU reference's outputs)
//   tessel-fuzz --print-cases K [--seed S]    (K programs as a C++ file, for SnippetCheck.cpp)
//
// Random valid programs (Generate.cpp), each compiled for every build and,
// with --run, run on the GPU and compared with the first build's outputs.
// Every failure is shrunk to a small program that fails the same way and
// kept in DIR as C++ with its outcome.
//
//===----------------------------------------------------------------------===//
#include "Execute.h"
#include "Pool.h"

#include "tessel/runtime/Driver.h"
#include "tessel/runtime/Error.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <set>

using namespace tessel;
using namespace tessel::fuzz;

namespace {

struct Options {
  enum Mode { none, compileOnly, run, one, sample, print, printCases, cpuDump } mode = none;
  uint64_t seed = 1;
  int64_t count = 0;
  double seconds = 60;
  int jobs = 2;
  double timeout = 20, compileTimeout = 300;
  bool shrink = true;
  bool cpuReference = true;
  std::string out = "tessel-fuzz-out";
  std::vector<Build> builds;
};

[[noreturn]] void usage(const std::string &why) {
  std::cerr << "tessel-fuzz: " << why << "\n"
            << "usage: tessel-fuzz --compile-only (--seconds S | --programs N) [--seed N] [--archs A,B] [--jobs J]\n"
            << "                   --out DIR\n"
            << "       tessel-fuzz --run N [--seed S] [--archs A,B] [--jobs J] [--timeout SEC] [--no-cpu-reference]\n"
            << "                   --out DIR\n"
            << "       tessel-fuzz --one SEED [--archs A,B] | --sample K [--seed S] [--archs A,B]\n"
            << "       tessel-fuzz --print SEED\n"
            << "  builds: sm_80, sm_89, sm_90a, sm_100a or sm_100a-emu, then optionally -notma (no TMA) and\n"
            << "  -plain (no pipelining, persistence, wgmma or tensor memory); the first is the\n"
            << "  reference the others are compared with (default for runs, all of which run on\n"
            << "  Hopper: sm_90a-notma-plain,sm_90a,sm_90a-notma,sm_100a-emu); --no-shrink keeps\n"
            << "  failures as found; every build is also compared with the program's result\n"
            << "  computed on the CPU unless --no-cpu-reference is given; --timeout and\n"
            << "  --compile-timeout (seconds, default 20 and 300) bound a program's runs and\n"
            << "  its compiles\n";
  std::exit(2);
}

int64_t integer(const std::string &flag, const std::string &text, int64_t lo) {
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || v < lo) usage(fmt::format("{} takes an integer >= {}, got '{}'", flag, lo, text));
  return v;
}

std::vector<Build> parseBuilds(const std::string &list) {
  std::vector<Build> builds;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    try {
      builds.push_back(parseBuild(item));
    } catch (const Error &e) {
      usage(e.what());
    }
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return builds;
}

Options parse(int argc, char **argv) {
  Options o;
  auto value = [&](int &i) -> std::string {
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", argv[i]));
    return argv[++i];
  };
  auto setMode = [&](Options::Mode m) {
    if (o.mode != Options::none) usage("give one of --compile-only, --run, --one, --sample, --print");
    o.mode = m;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--compile-only") setMode(Options::compileOnly);
    else if (a == "--run") setMode(Options::run), o.count = integer(a, value(i), 1);
    else if (a == "--one") setMode(Options::one), o.seed = integer(a, value(i), 0);
    else if (a == "--sample") setMode(Options::sample), o.count = integer(a, value(i), 1);
    else if (a == "--print") setMode(Options::print), o.seed = integer(a, value(i), 0);
    else if (a == "--cpu-dump") setMode(Options::cpuDump), o.seed = integer(a, value(i), 0);
    else if (a == "--print-cases") setMode(Options::printCases), o.count = integer(a, value(i), 1);
    else if (a == "--programs") o.count = integer(a, value(i), 1);
    else if (a == "--seed") o.seed = integer(a, value(i), 0);
    else if (a == "--seconds") o.seconds = double(integer(a, value(i), 1));
    else if (a == "--jobs") o.jobs = int(integer(a, value(i), 1));
    else if (a == "--timeout") o.timeout = double(integer(a, value(i), 1));
    else if (a == "--compile-timeout") o.compileTimeout = double(integer(a, value(i), 1));
    else if (a == "--archs") o.builds = parseBuilds(value(i));
    else if (a == "--out") o.out = value(i);
    else if (a == "--no-shrink") o.shrink = false;
    else if (a == "--no-cpu-reference") o.cpuReference = false;
    else usage(fmt::format("unknown argument '{}'", a));
  }
  if (o.mode == Options::none) usage("no mode given");
  if (o.builds.empty())
    o.builds = parseBuilds(o.mode == Options::compileOnly ? "sm_80,sm_90a,sm_100a"
                                                          : "sm_90a-notma-plain,sm_90a,sm_90a-notma,sm_100a-emu");
  return o;
}

/// A program's work in a child: compile only, or compile and run.
Task task(const Spec &s, const Options &o) {
  bool run = o.mode == Options::run, cpu = o.cpuReference;
  std::vector<Build> builds = o.builds;
  return {s.seed, [s, builds, run, cpu](const std::function<void()> &compiled) {
            return run ? runAll(s, builds, compiled, cpu) : compileAll(s, builds);
          }};
}

double elapsedSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// What must stay the same for a smaller program to fail "the same way":
/// the kind, and the first line of the message without its numbers (the
/// builds, the error or the tensor that differs).
std::string signature(const Outcome &o) {
  std::string first = o.message.substr(0, o.message.find('\n')), text = name(o.kind);
  for (char c : first.substr(0, 120))
    if (!std::isdigit(static_cast<unsigned char>(c))) text += c;
  return text;
}

/// The smallest variant of `s` that still fails as `outcome` (greedy: the
/// first smaller candidate that fails the same way replaces it), within a
/// budget of attempts and `seconds`.
Spec shrink(const Spec &s, Outcome &outcome, const Options &o, const Limits &limits, double seconds) {
  Spec best = s;
  auto start = std::chrono::steady_clock::now();
  int attempts = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (const Spec &candidate : shrinkCandidates(best)) {
      if (++attempts > 80 || elapsedSince(start) > seconds) return best;
      Outcome c = runIsolated(task(candidate, o), limits, o.out);
      if (signature(c) != signature(outcome)) continue;
      best = candidate;
      outcome = c;
      progress = true;
      break;
    }
  }
  return best;
}

/// Writes the reproduction to DIR/fuzz-SEED.cpp and prints it.
void keep(const Spec &original, const Spec &smallest, const Outcome &outcome, const Options &o) {
  std::string builds;
  for (const Build &b : o.builds) {
    if (!builds.empty()) builds += ',';
    builds += b.label();
  }
  std::string message;
  for (char c : outcome.message) {
    message += c;
    if (c == '\n') message += "// ";
  }
  std::string text = fmt::format("// tessel-fuzz: seed {} {} (builds {}, reference {}){}\n// {}\n{}", original.seed,
                                 name(outcome.kind), builds, o.builds[0].label(),
                                 smallest.stmts.size() != original.stmts.size() || smallest.m != original.m ||
                                         smallest.n != original.n || smallest.k != original.k
                                     ? ", shrunk"
                                     : "",
                                 message, snippet(smallest));
  std::string path = fmt::format("{}/fuzz-{}.cpp", o.out, original.seed);
  std::ofstream(path) << text;
  std::cout << "tessel-fuzz: FAILED (" << path << ")\n" << text << std::flush;
}

int fuzzPrograms(const Options &o) {
  std::filesystem::create_directories(o.out);
  // Each child compiles its program afresh: a disk cache would only grow.
  ::setenv("TESSEL_CACHE", "off", 0);
  Limits limits;
  limits.runSeconds = o.timeout;
  limits.compileSeconds = o.compileTimeout;
  if (o.mode == Options::run) {
    // Asked in a child: a parent that initialised CUDA could not fork
    // children that use it.
    Task probe{0, [](const std::function<void()> &) {
                 std::string why;
                 return rt::Driver::available(&why) ? Outcome{} : Outcome{Outcome::runError, why};
               }};
    Outcome gpu = runIsolated(probe, limits, o.out);
    if (gpu.kind != Outcome::passed) {
      std::cerr << "tessel-fuzz: --run needs a GPU: " << gpu.message << "\n";
      return 2;
    }
  }
  auto start = std::chrono::steady_clock::now();
  uint64_t seed = o.seed;
  int64_t given = 0, passed = 0, failed = 0, hung = 0, skipped = 0;
  std::vector<std::pair<Spec, Outcome>> failures;
  auto next = [&]() -> std::optional<Task> {
    bool more = o.count ? given < o.count : elapsedSince(start) < o.seconds;
    if (!more) return std::nullopt;
    ++given;
    return task(generate(seed++), o);
  };
  auto done = [&](uint64_t id, const Outcome &outcome) {
    if (outcome.kind == Outcome::passed) return void(++passed);
    if (outcome.kind == Outcome::skipped) return void(++skipped);
    ++(outcome.kind == Outcome::hung && o.mode == Options::run ? hung : failed);
    std::cout << fmt::format("tessel-fuzz: seed {} {}: {}\n", id, name(outcome.kind),
                             outcome.message.substr(0, outcome.message.find('\n')))
              << std::flush;
    failures.push_back({generate(id), outcome});
  };
  runPool(next, o.jobs, limits, o.out, done);
  // The first failure of each kind is shrunk, for at most 5 minutes each
  // and 10 in all; the others are kept as found.
  std::set<std::string> shrunk;
  auto shrinking = std::chrono::steady_clock::now();
  for (auto &[spec, outcome] : failures) {
    Outcome kept = outcome;
    bool first = shrunk.insert(signature(outcome)).second;
    double budget = std::min(300.0, 600 - elapsedSince(shrinking));
    Spec smallest = o.shrink && first && budget > 0 ? shrink(spec, kept, o, limits, budget) : spec;
    keep(spec, smallest, kept, o);
  }
  std::cout << fmt::format("tessel-fuzz: {} passed, {} failed", passed, failed)
            << (o.mode == Options::run ? fmt::format(", {} hung", hung) : std::string())
            << (skipped ? fmt::format(", {} skipped", skipped) : std::string())
            << fmt::format(" ({} programs from seed {} in {:.0f} s)\n", given, o.seed, elapsedSince(start));
  if (failed + hung) return 1;
  // Nothing checked is not a pass.
  if (passed == 0 && skipped > 0) {
    std::cerr << "tessel-fuzz: every program was skipped: give builds that can target them (--archs)\n";
    return 1;
  }
  return 0;
}

/// --one and --sample: programs run in this process, one after the other,
/// as compute-sanitizer wants them.
int inProcess(const Options &o) {
  int64_t count = o.mode == Options::one ? 1 : o.count, failed = 0, skipped = 0;
  for (int64_t i = 0; i < count; ++i) {
    Spec s = generate(o.seed + uint64_t(i));
    Outcome outcome = runAll(s, o.builds, {}, o.cpuReference);
    std::cout << fmt::format("tessel-fuzz: seed {} {}{}\n", s.seed, name(outcome.kind),
                             outcome.message.empty() ? "" : ": " + outcome.message)
              << std::flush;
    if (outcome.kind == Outcome::skipped) ++skipped;
    else if (outcome.kind != Outcome::passed) ++failed;
  }
  std::cout << fmt::format("tessel-fuzz: {} passed, {} failed", count - failed - skipped, failed)
            << (skipped ? fmt::format(", {} skipped", skipped) : std::string()) << "\n";
  return failed || skipped == count ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  try {
    if (o.mode == Options::print) {
      std::cout << snippet(generate(o.seed));
      return 0;
    }
    if (o.mode == Options::cpuDump) {
      std::cout << describeReference(generate(o.seed));
      return 0;
    }
    if (o.mode == Options::printCases) {
      std::cout << snippetCases(o.seed, o.count);
      return 0;
    }
    if (o.mode == Options::one || o.mode == Options::sample) return inProcess(o);
    return fuzzPrograms(o);
  } catch (const std::exception &e) {
    std::cerr << "tessel-fuzz: " << e.what() << "\n";
    return 2;
  }
}
