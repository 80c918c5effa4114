#!/usr/bin/env bash
# The Debian packages as a user gets them (docs/getting-started.md, "Debian package"): builds the .deb files
# of a built tree with CPack, installs them with dpkg, then builds and runs a program against the installed
# files three ways (find_package(cudarc), pkg-config, the tools on PATH) and removes (purges) the packages,
# also when a step fails. Run by `tools/dev test` after the build; needs dpkg-dev (dpkg-shlibdeps) and root or sudo.
#
#   tests/consumer/run_package_test.sh BUILD_DIR
#
# The machine is left as it was: when a cudarc package is installed already (someone's own), nothing is
# installed or removed and the test says it skipped.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail

build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=$build_dir/package-test
log=$work/log
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo

say() { echo "package test: $*"; }
fail() {
    say "FAILED: $*"
    [ -f "$log" ] && { echo "--- last lines of $log"; tail -40 "$log"; }
    exit 1
}
# Runs a step with its output in the log; on failure, shows the log's end.
step() {
    local what=$1
    shift
    echo "== $what: $*" >>"$log"
    "$@" >>"$log" 2>&1 || fail "$what"
}

if ! command -v dpkg >/dev/null; then
    say "SKIPPED: not a Debian system (no dpkg)"
    exit 0
fi
# (dpkg-query fails for a pattern that matches no package: only its output matters.)
if { dpkg-query -W -f='${Package} ${Status}\n' 'libcudarc*' cudarc-tools 2>/dev/null || true; } |
    grep -q 'install ok installed'; then
    say "SKIPPED: cudarc packages are installed on this machine already; they are left alone"
    exit 0
fi

command -v dpkg-shlibdeps >/dev/null || fail "dpkg-shlibdeps not found (Debian: apt-get install dpkg-dev)"

rm -rf "$work"
mkdir -p "$work"
: >"$log"

# 1. Build the packages.
step "cpack" cpack -G DEB --config "$build_dir/CPackConfig.cmake" -B "$work/debs"
mapfile -t debs < <(find "$work/debs" -maxdepth 1 -name '*.deb' | sort)
[ ${#debs[@]} -eq 3 ] || fail "expected 3 packages, cpack made ${#debs[@]}: ${debs[*]}"
declare -A depends
names=()
for deb in "${debs[@]}"; do
    name=$(dpkg-deb -f "$deb" Package)
    names+=("$name")
    depends[$name]=$(dpkg-deb -f "$deb" Depends)
    say "$(basename "$deb"): Depends: ${depends[$name]}"
done
version=$(dpkg-deb -f "${debs[0]}" Version)
runtime=""
for name in "${names[@]}"; do
    [[ $name =~ ^libcudarc[0-9] ]] && runtime=$name
done
[ -n "$runtime" ] || fail "no runtime package libcudarc<SOVERSION> among ${names[*]}"
for name in libcudarc-dev cudarc-tools; do
    [[ " ${names[*]} " == *" $name "* ]] || fail "no package $name among ${names[*]}"
    [[ ${depends[$name]} == *"$runtime (= $version)"* ]] || fail "$name does not depend on $runtime (= $version)"
done
# The library links fmt (shared, on Debian) and the C++ runtime; dpkg-shlibdeps found them.
[[ ${depends[$runtime]} == *libfmt* && ${depends[$runtime]} == *libstdc++* ]] ||
    fail "$runtime's dependencies miss libfmt or libstdc++: ${depends[$runtime]}"

# 2. Install them; whatever happens next, remove them again.
remove() {
    local installed=()
    for name in "${names[@]}"; do
        dpkg-query -W "$name" >/dev/null 2>&1 && installed+=("$name")
    done
    [ ${#installed[@]} -eq 0 ] && return 0
    $sudo dpkg --purge "${installed[@]}" >>"$log" 2>&1 || say "could not remove ${installed[*]}: see $log"
}
trap remove EXIT
step "dpkg -i" $sudo dpkg -i "${debs[@]}"

# What the consumers find must be the installed files only: no prefix, package path or registry from the
# environment.
clean_env=(env -u CMAKE_PREFIX_PATH -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH)

# 3a. find_package(cudarc) from the system's prefix.
step "configure (find_package)" "${clean_env[@]}" cmake -S "$source_dir/tests/consumer" -B "$work/cmake" -G Ninja \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
cudarc_dir=$(sed -n 's/^cudarc_DIR:PATH=//p' "$work/cmake/CMakeCache.txt")
[[ $cudarc_dir == /usr/lib/* ]] || fail "find_package(cudarc) found $cudarc_dir, not the package's /usr/lib/..."
step "build (find_package)" cmake --build "$work/cmake"
step "run (find_package)" "${clean_env[@]}" "$work/cmake/consumer"
ldd "$work/cmake/consumer" | grep -Eq 'libcudarc\.so[.0-9]* => (/usr)?/lib/' ||
    fail "the find_package consumer does not load the package's libcudarc (/usr/lib, or /lib where it is the same folder): $(ldd "$work/cmake/consumer" | grep cudarc)"

# 3b. pkg-config, with the system's search path.
step "pkg-config --modversion" "${clean_env[@]}" pkg-config --modversion cudarc
read -r -a cflags <<<"$("${clean_env[@]}" pkg-config --cflags cudarc)"
read -r -a libs <<<"$("${clean_env[@]}" pkg-config --libs cudarc)"
step "compile (pkg-config)" g++ -std=c++20 "${cflags[@]}" "$source_dir/tests/consumer/main.cpp" "${libs[@]}" \
    -o "$work/pkg-config-consumer"
step "run (pkg-config)" "${clean_env[@]}" "$work/pkg-config-consumer"

# 3c. The tools, on PATH.
for tool in cudarc-info cudarc-bench cudarc-nvrtc; do
    [ "$(command -v "$tool")" = "/usr/bin/$tool" ] || fail "$tool on PATH is '$(command -v "$tool")', not /usr/bin/$tool"
    out=$("${clean_env[@]}" "$tool" --version 2>&1) || fail "$tool --version: $out"
    [[ $out == *"$tool $version"* ]] || fail "$tool --version says '$out', not $tool $version"
    step "$tool --help" "${clean_env[@]}" "$tool" --help
done
# cudarc-info: 0 with a GPU, 1 without one (it says what it looked for); anything else is a failure.
status=0
"${clean_env[@]}" cudarc-info >>"$log" 2>&1 || status=$?
[[ $status == 0 || $status == 1 ]] || fail "cudarc-info exited with $status"

# 4. Remove them, and check that nothing is left behind. --purge rather than -r: a package with maintainer
# scripts (the runtime's ldconfig trigger) would otherwise stay known to dpkg as "config-files".
trap - EXIT
step "dpkg --purge" $sudo dpkg --purge "${names[@]}"
for name in "${names[@]}"; do
    dpkg-query -W "$name" >/dev/null 2>&1 && fail "dpkg still knows $name after the purge"
done
for path in /usr/include/cudarc /usr/bin/cudarc-info; do
    [ ! -e "$path" ] || fail "$path is left after the purge"
done
say "passed: $(IFS=,; echo "${names[*]}") $version built, installed, used through find_package, pkg-config and PATH, removed"
