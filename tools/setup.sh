#!/usr/bin/env bash
# Installs what Tessel builds with (Debian packages) when missing, and checks
# for a CUDA toolkit whose NVRTC knows sm_100a (CUDA >= 12.8).
set -euo pipefail

packages=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools libfmt-dev catch2
          ninja-build cmake g++ libzstd-dev zlib1g-dev python3 libdlpack-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
header="$cuda/include/cuda.h"
if [ ! -f "$header" ] || ! ls "$cuda"/lib*/libnvrtc.so* >/dev/null 2>&1; then
  echo "setup: no CUDA toolkit with NVRTC at $cuda (set CUDA_HOME); Tessel needs CUDA >= 12.8" >&2
  exit 1
fi
version=$(awk '/#define CUDA_VERSION/ {print $3}' "$header")
if [ "${version:-0}" -lt 12080 ]; then
  echo "setup: CUDA $version at $cuda is too old: sm_100a needs CUDA >= 12.8 (12080)" >&2
  exit 1
fi
echo "setup: LLVM/MLIR 22, fmt, Catch2, DLPack, ninja present; CUDA $version at $cuda"
