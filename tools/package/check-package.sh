#!/usr/bin/env bash
# Installs Tessel from BUILD_DIR into a fresh prefix and checks the package
# as a user meets it: libtessel.so needs no LLVM/MLIR library and exports
# only Tessel's symbols, and a separate project finds it with
# find_package(Tessel CONFIG), builds against it and runs (compiling a
# library kernel to cubin).
#   tools/package/check-package.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
work="$build/package-check"
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" --strip >/dev/null
lib="$work/prefix/lib/libtessel.so"
[ -f "$lib" ] || { echo "FAIL: no $lib after install"; exit 1; }
echo "libtessel.so: $(du -h "$(readlink -f "$lib")" | cut -f1) stripped"

if ldd "$lib" | grep -Ei "llvm|mlir"; then
  echo "FAIL: libtessel.so loads an LLVM/MLIR shared library"; exit 1
fi
echo "ldd: $(ldd "$lib" | awk '{print $1}' | tr '\n' ' ')"

# Every defined dynamic symbol is Tessel's (namespace tessel, its type
# info and vtables); the linker's own version node is the only other.
foreign=$(nm -D --defined-only "$lib" | awk '{print $3}' |
          grep -Ev '^_Z(N|NK|TI|TS|TV)N?6tessel' | grep -Ev '^TESSEL|^$' || true)
if [ -n "$foreign" ]; then
  echo "FAIL: libtessel.so exports symbols outside namespace tessel:"
  echo "$foreign" | head -20 | c++filt
  exit 1
fi
echo "exports: $(nm -D --defined-only "$lib" | wc -l) symbols, all in namespace tessel"
# Nor does it import C++ runtime symbols, which a host process could
# interpose with its own (it links libstdc++ statically and keeps it local).
if nm -D --undefined-only "$lib" | grep -E "GLIBCXX|CXXABI"; then
  echo "FAIL: libtessel.so imports C++ runtime symbols"; exit 1
fi

# The consumer sees only the installed tree: no LLVM/MLIR package paths.
cmake -G Ninja -S "$src/tests/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_IGNORE_PREFIX_PATH=/usr/lib/llvm-22 >/dev/null
ninja -C "$work/consumer" >/dev/null
if ldd "$work/consumer/consumer" | grep -Ei "llvm|mlir"; then
  echo "FAIL: the consumer loads LLVM/MLIR"; exit 1
fi
"$work/consumer/consumer" sm_90a
"$work/consumer/consumer" sm_100a
# Embedded in the consumer's tree (add_subdirectory): the project's CMake
# must configure there (PROJECT_* paths, no tests), and the build graph
# must reach the consumer (its commands listed, not run: building Tessel
# twice is the main build's job).
cmake -G Ninja -S "$src/tests/consumer" -B "$work/embedded" -DCMAKE_BUILD_TYPE=Release \
  -DTESSEL_SOURCE_DIR="$src" >/dev/null
ninja -C "$work/embedded" -t commands consumer | grep -q -- "-o consumer " ||
  { echo "FAIL: an embedding project cannot build its consumer"; exit 1; }
[ ! -d "$work/embedded/tessel/tests" ] ||
  { echo "FAIL: an embedded Tessel builds its tests"; exit 1; }
echo "embedded through add_subdirectory: configures, consumer planned"
echo "package check passed"
