#!/usr/bin/env bash
# Install omniconn into a temporary DESTDIR and build an out-of-tree program against it the ways
# users do - vendored headers, pkg-config, CMake (shared library and header-only targets) - run
# each, and use the installed Python package. Ends with "install: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
D=$tmp/dest; PREFIX=/opt/omniconn; LIBDIR=$PREFIX/lib
pass=0; fail=0
ok()  { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; [ -f "$tmp/log" ] && tail -n 20 "$tmp/log" | sed 's/^/    /'; fail=$((fail + 1)); }
step() {    # step NAME COMMAND...: run, PASS if it exits 0
    local name=$1; shift
    if "$@" >"$tmp/log" 2>&1; then ok "$name"; else bad "$name"; fi
}
runs_ok() { "$@" && "$@" | grep -q '^app: ok '; }

step "make install PREFIX=$PREFIX DESTDIR=..." make -s BUILD="${BUILD:-build}" install PREFIX=$PREFIX DESTDIR="$D"
export LD_LIBRARY_PATH=$D$LIBDIR

# 1. vendored headers: the installed headers, the implementation compiled into the program
step "vendored headers: build" cc -std=c99 -Wall -Wextra -Werror -DAPP_HEADER_ONLY -I"$D$PREFIX/include" \
    -o "$tmp/app_vendored" tests/install/app.c -ldl -lpthread -lm
step "vendored headers: run" runs_ok "$tmp/app_vendored"
step "neither the library nor the vendored program needs libzmq or libibverbs" sh -c \
    "out=\$(readelf -d '$D$LIBDIR/libomniconn.so' '$tmp/app_vendored') && echo \"\$out\" | grep -q 'NEEDED.*libc.so' \
     && ! echo \"\$out\" | grep -E 'NEEDED.*(libzmq|libibverbs)'"

# 2. pkg-config: link libomniconn.so
export PKG_CONFIG_PATH=$D$LIBDIR/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
step "pkg-config: omniconn.pc is found with the library's version" \
    test "$(pkg-config --modversion omniconn)" = "$(sed -n 's/^#define OMNICONN_VERSION_STRING "\(.*\)"/\1/p' omniconn.h)"
step "pkg-config: build" sh -c "cc -std=c99 -Wall -Werror \$(pkg-config --cflags omniconn) -o '$tmp/app_pc' \
    tests/install/app.c \$(pkg-config --libs omniconn)"
step "pkg-config: the program needs libomniconn.so.0 and runs" sh -c \
    "readelf -d '$tmp/app_pc' | grep -q 'NEEDED.*libomniconn.so' && '$tmp/app_pc' | grep -q '^app: ok '"

# 3. CMake: find_package(omniconn) with omniconn::omniconn and omniconn::headers
step "cmake: configure" cmake -S tests/install -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$D$PREFIX" -DCMAKE_BUILD_TYPE=Release
step "cmake: build" cmake --build "$tmp/cmake"
step "cmake: omniconn::omniconn program runs" runs_ok "$tmp/cmake/app_shared"
step "cmake: omniconn::headers program runs" runs_ok "$tmp/cmake/app_headers"
step "cmake: header-only program does not need the shared library" sh -c \
    "! readelf -d '$tmp/cmake/app_headers' | grep -q 'NEEDED.*libomniconn'"

# 4. the installed Python package
step "python: the installed package finds the installed library" env -u OMNICONN_LIBRARY \
    PYTHONPATH="$D$PREFIX/lib/python3/dist-packages" /usr/bin/python3 -c "
import omniconn, sys
assert omniconn.library_path.startswith('$D'), omniconn.library_path
with omniconn.LocalConnector() as c:
    m = c.put('a', 'b', 'k', b'installed')
    with c.get('a', 'b', 'k', m, timeout=5) as b:
        assert b.to_bytes() == b'installed'
print('python ok', omniconn.__version__)"

step "make uninstall removes everything it installed" sh -c "make -s BUILD='${BUILD:-build}' uninstall PREFIX=$PREFIX \
    DESTDIR='$D' >/dev/null && test -z \"\$(find '$D' -type f -o -type l)\""
echo "install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
