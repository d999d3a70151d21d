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
# (a prefix outside Debian's python3 path, so PYTHONPATH names the package's directory here; the
# system prefix needs nothing: section 5)
pydir=$(dirname "$(dirname "$(find "$D$PREFIX" -path '*/omniconn/__init__.py' | head -n 1)")")
step "python: the installed package finds the installed library" env -u OMNICONN_LIBRARY \
    PYTHONPATH="$pydir" /usr/bin/python3 -c "
import omniconn, sys
assert omniconn.library_path.startswith('$D'), omniconn.library_path
with omniconn.LocalConnector() as c:
    m = c.put('a', 'b', 'k', b'installed')
    with c.get('a', 'b', 'k', m, timeout=5) as b:
        assert b.to_bytes() == b'installed'
print('python ok', omniconn.__version__)"

step "make uninstall removes everything it installed" sh -c "make -s BUILD='${BUILD:-build}' uninstall PREFIX=$PREFIX \
    DESTDIR='$D' >/dev/null && test -z \"\$(find '$D' -type f -o -type l)\""
# 5. the documented way, for real: `make install PREFIX=/usr/local` as root, then everything used
#    with nothing set by hand (no PYTHONPATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH). It runs in a
#    private mount namespace on an overlay of this machine's root: the install, ldconfig's cache
#    and the headers removed for the no-verbs build land in a throw-away upper layer, and the
#    host's /usr/local and /etc stay untouched. Skipped (and said so) where that is not allowed.
B=${BUILD:-build}
cat > "$tmp/system.sh" <<EOS
set -e
cd '$ROOT'
clean() { env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root "\$@"; }
case "\$1" in
install)
    make -s BUILD='$B' install PREFIX=/usr/local >/dev/null
    test -f /usr/local/lib/python3*/dist-packages/omniconn/__init__.py ;;
python)
    cd /
    clean /usr/bin/python3 -c "
import omniconn, omniconn.vllm_omni
assert omniconn.library_path.startswith('/usr/local/lib/'), omniconn.library_path
with omniconn.vllm_omni.OmniconnConnector({'protocol': 'local'}) as c:
    ok, n, md = c.put('0', '1', 'k', {'x': [1, 2]})
    assert c.get('0', '1', 'k', md)[0] == {'x': [1, 2]}
print('python ok', omniconn.__version__)" ;;
pkgconfig)
    clean sh -c "cc -std=c99 -Wall -Werror \$(pkg-config --cflags omniconn) -o /tmp/app_sys tests/install/app.c \$(pkg-config --libs omniconn)"
    clean /tmp/app_sys | grep -q '^app: ok ' ;;
noverbs)
    rm -rf /usr/include/infiniband
    out=\$(make BUILD=/tmp/build-noverbs lib 2>&1)
    echo "\$out" | grep -q 'infiniband/verbs.h not found: building without the RDMA engine'
    clean env OMNICONN_LIBRARY=/tmp/build-noverbs/libomniconn.so /usr/bin/python3 -c "
import sys; sys.path.insert(0, '$ROOT/python')
import omniconn
ok, why = omniconn.available('rdma')
assert not ok and 'not compiled in' in why, why
print('no-verbs ok')" ;;
uninstall)
    make -s BUILD='$B' uninstall PREFIX=/usr/local >/dev/null
    ! clean /usr/bin/python3 -c 'import omniconn' 2>/dev/null
    test ! -e /usr/local/lib/libomniconn.so.0 ;;
esac
EOS
printf '%s\n' install python pkgconfig noverbs uninstall > "$tmp/steps"   # in order, in one namespace and layer
mkdir -p "$tmp/root" "$tmp/ov"
if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
    unshare -m --propagation private sh -c "
        mount -t tmpfs tmpfs '$tmp/ov' && mkdir '$tmp/ov/up' '$tmp/ov/work' &&
        mount -t overlay overlay -o lowerdir=/,upperdir='$tmp/ov/up',workdir='$tmp/ov/work' '$tmp/root' &&
        mount --rbind /proc '$tmp/root/proc' && mount --rbind /dev '$tmp/root/dev' && mount --rbind /sys '$tmp/root/sys' ||
        { echo 'FAIL overlay root: mount refused'; exit 0; }
        while read -r st; do
            if chroot '$tmp/root' bash '$tmp/system.sh' \$st > '$tmp/log' 2>&1; then echo \"PASS system root: \$st\";
            else echo \"FAIL system root: \$st\"; tail -n 15 '$tmp/log' | sed 's/^/    /'; fi
        done < '$tmp/steps'" > "$tmp/sys.out"
    cat "$tmp/sys.out"
    pass=$((pass + $(grep -c '^PASS' "$tmp/sys.out"))); fail=$((fail + $(grep -c '^FAIL' "$tmp/sys.out")))
else
    echo "SKIP system root (make install PREFIX=/usr/local in an overlay root): needs root and unshare -m"
fi
echo "install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
