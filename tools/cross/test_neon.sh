#!/usr/bin/env bash
# Cross-compiles cera's generic common/format/backend sources and the NEON kernel test for AArch64
# and runs the test under qemu-aarch64 user-mode emulation: the plain build on an ARMv8.0 CPU
# model (cortex-a53, so a stray dot product instruction would trap), the dotprod build on `max`.
# Idempotent: installs missing Debian packages, then incremental Ninja builds in build-neon/.
# Usage: tools/cross/test_neon.sh [build-dir]   (default: <repo>/build-neon)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-neon}"
sysroot=/usr/aarch64-linux-gnu

need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
[[ -f /usr/include/nlohmann/json.hpp ]] || need+=(nlohmann-json3-dev)
if ((${#need[@]})); then
  echo "installing: ${need[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${need[@]}"
fi

# Host's header-only nlohmann/json, without the rest of the x86 /usr/include.
mkdir -p "$build/host-headers"
ln -sfn /usr/include/nlohmann "$build/host-headers/nlohmann"

cmake -S "$root/tools/cross" -B "$build" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$root/tools/cross/aarch64-toolchain.cmake" \
  -DCERA_HOST_HEADERS="$build/host-headers" >/dev/null
ninja -C "$build"

run() {  # run <cpu> <binary> [env...]
  local cpu=$1 bin=$2
  shift 2
  echo "== qemu-aarch64 -cpu $cpu $(basename "$bin") $*"
  env "$@" qemu-aarch64 -cpu "$cpu" -L "$sysroot" "$bin"
}
run cortex-a53 "$build/neon_test_plain"
run max "$build/neon_test_dotprod"
# Registry / CERA_CPU_ISA behaviour on AArch64 (kernel tests skipped when the variable is set).
run max "$build/neon_test_dotprod" CERA_CPU_ISA=neon
run max "$build/neon_test_dotprod" CERA_CPU_ISA=scalar
run max "$build/neon_test_dotprod" CERA_CPU_ISA=avx2
echo "NEON kernels: all emulated tests passed"
