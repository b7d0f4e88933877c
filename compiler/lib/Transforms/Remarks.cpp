//===- Remarks.cpp - what the compiler declined to do, and why ------------===//
#include "tessel/Transforms/Remarks.h"

#include "mlir/IR/Location.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace tessel;

InFlightDiagnostic tessel::emitMissed(Operation *op, llvm::StringRef pass,
                                      llvm::StringRef category, RemarkSeverity severity) {
  InFlightDiagnostic diag =
      severity == RemarkSeverity::warning ? op->emitWarning() : op->emitRemark();
  diag << pass << " [" << category << "]: ";
  return diag;
}

std::optional<MissedRemark> tessel::parseMissed(llvm::StringRef message) {
  // Pass flags are tessel-* and have no spaces; categories no brackets.
  if (!message.starts_with("tessel-")) return std::nullopt;
  size_t open = message.find(" [");
  size_t close = message.find("]: ");
  if (open == llvm::StringRef::npos || close == llvm::StringRef::npos || close < open ||
      message.substr(0, open).contains(' '))
    return std::nullopt;
  return MissedRemark{message.substr(0, open).str(),
                      message.substr(open + 2, close - open - 2).str(),
                      message.substr(close + 3).str()};
}

std::string tessel::describeLocation(Location loc) {
  std::optional<FileLineColLoc> file;
  loc->walk([&](Location inner) {
    if (auto fl = llvm::dyn_cast<FileLineColLoc>(inner)) {
      file = fl;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  std::string out;
  llvm::raw_string_ostream os(out);
  if (file) os << file->getFilename().getValue() << ":" << file->getLine();
  else os << loc;
  return out;
}
