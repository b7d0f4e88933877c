#!/usr/bin/env bash
# Sets up, builds and runs every test: unit (Catch2), lit (FileCheck), the
# compile matrix (NVRTC + ptxas for sm_80, sm_90a, sm_100a) and the GPU tests
# (which skip, saying so, without a GPU), and a bounded fuzz run of
# tessel-opt and tessel-translate. Warnings fail the build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release -DTESSEL_WERROR=ON >/dev/null
ninja -C build
# A private cache, so the tests exercise compilation rather than old entries.
export TESSEL_CACHE_DIR="$PWD/build/test-cache"
rm -rf "$TESSEL_CACHE_DIR"
ctest --test-dir build --output-on-failure
# ctest hides the output of passing tests; say whether the GPU tests ran.
grep -h -m1 "GPU tests" build/Testing/Temporary/LastTest.log || true
