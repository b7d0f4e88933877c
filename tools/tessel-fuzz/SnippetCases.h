//===- SnippetCases.h - printed programs, compiled back ---------*- C++ -*-===//
#ifndef TESSEL_FUZZ_SNIPPETCASES_H
#define TESSEL_FUZZ_SNIPPETCASES_H

#include "tessel/dsl/Program.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace tessel::fuzz {

struct SnippetCase {
  uint64_t seed;
  Program (*build)(const std::string &arch);
};
/// Defined by the file tessel-fuzz --print-cases writes.
const std::vector<SnippetCase> &fuzzCases();

} // namespace tessel::fuzz

#endif
