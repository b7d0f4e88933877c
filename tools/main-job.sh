#!/usr/bin/env bash
# The main job: set up, build, then JIT-compile the library GEMM, dump its IR
# after every pass, and run and check it on the GPU when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build tessel tessel-opt
./build/bin/tessel run gemm --dump-ir build/gemm-ir "$@"
