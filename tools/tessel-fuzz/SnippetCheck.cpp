//===- SnippetCheck.cpp - reproductions build what was fuzzed -------------===//
//
// A reproduction is only as good as its C++: this compiles the snippets
// tessel-fuzz prints for a range of seeds and checks that each builds the
// same tile IR, for every target, as the program the fuzzer ran.
//
//===----------------------------------------------------------------------===//
#include "SnippetCases.h"
#include "Spec.h"

#include <iostream>

using namespace tessel;
using namespace tessel::fuzz;

int main() {
  int differing = 0, checked = 0;
  for (const SnippetCase &c : fuzzCases())
    for (std::string arch : {"sm_80", "sm_90a", "sm_100a"}) {
      ++checked;
      Program fromSpec = buildProgram(generate(c.seed), arch);
      Program fromSnippet = c.build(arch);
      if (fromSpec.str() == fromSnippet.str()) continue;
      ++differing;
      std::cerr << "seed " << c.seed << " on " << arch << ": the snippet builds other IR\n--- the fuzzed program\n"
                << fromSpec.str() << "--- the snippet\n" << fromSnippet.str();
    }
  std::cout << checked - differing << " of " << checked << " snippets build the fuzzed program's IR\n";
  return differing ? 1 : 0;
}
