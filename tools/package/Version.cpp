//===- Version.cpp - the version libtessel.so was built as ----------------===//
#include "tessel/Tessel.h"

const char *tessel::version() { return TESSEL_VERSION; }
