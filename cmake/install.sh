#!/usr/bin/env bash
# `make install` / `make uninstall`: the headers, libomniconn.so (+ its soname and dev symlinks),
# omniconn.pc, the CMake package and the Python package under $DESTDIR$PREFIX.
# Environment (set by the Makefile): PREFIX LIBDIR INCLUDEDIR PYTHONDIR DESTDIR BUILD LIB_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-install}
: "${PREFIX:=/usr/local}" "${LIBDIR:=$PREFIX/lib}" "${INCLUDEDIR:=$PREFIX/include}"
: "${PYTHONDIR:=$PREFIX/lib/python3/dist-packages}" "${DESTDIR:=}" "${BUILD:=build}"
: "${LIB_VERSION:?}"
MAJOR=${LIB_VERSION%%.*}
HEADERS=(omniconn.h omniconn_shm.h omniconn_rdma.h omniconn_pipeline.h)
CMAKEDIR=$LIBDIR/cmake/omniconn
PCDIR=$LIBDIR/pkgconfig
D=$DESTDIR

# a path relative from the CMake package directory to PREFIX (the package stays relocatable)
rel() { python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$1" "$2"; }

if [ "$mode" = uninstall ]; then
    for h in "${HEADERS[@]}"; do rm -f "$D$INCLUDEDIR/$h"; done
    rm -f "$D$LIBDIR/libomniconn.so" "$D$LIBDIR/libomniconn.so.$MAJOR" "$D$LIBDIR/libomniconn.so.$LIB_VERSION"
    rm -f "$D$PCDIR/omniconn.pc"
    rm -rf "$D$CMAKEDIR" "$D$PYTHONDIR/omniconn"
    rm -rf "$D$PYTHONDIR/omniconn.egg-info"
    [ -z "$D" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null && ldconfig
    echo "uninstalled omniconn $LIB_VERSION from $D$PREFIX"
    exit 0
fi

install -d "$D$INCLUDEDIR" "$D$LIBDIR" "$D$PCDIR" "$D$CMAKEDIR" "$D$PYTHONDIR/omniconn"
install -m 644 "${HEADERS[@]}" "$D$INCLUDEDIR/"
install -m 755 "$BUILD/libomniconn.so.$LIB_VERSION" "$D$LIBDIR/"
ln -sf "libomniconn.so.$LIB_VERSION" "$D$LIBDIR/libomniconn.so.$MAJOR"
ln -sf "libomniconn.so.$MAJOR" "$D$LIBDIR/libomniconn.so"
sed -e "s|@PREFIX@|$PREFIX|; s|@LIBDIR@|$LIBDIR|; s|@INCLUDEDIR@|$INCLUDEDIR|; s|@VERSION@|$LIB_VERSION|" \
    -e "s|@LIBS_PRIVATE@|-ldl -lpthread -lm|" \
    omniconn.pc.in > "$D$PCDIR/omniconn.pc"
sub=(-e "s|@VERSION@|$LIB_VERSION|g" -e "s|@MAJOR@|$MAJOR|g"
     -e "s|@REL_PREFIX@|$(rel "$PREFIX" "$CMAKEDIR")|" -e "s|@REL_INCLUDEDIR@|$(rel "$INCLUDEDIR" "$PREFIX")|"
     -e "s|@REL_LIBDIR@|$(rel "$LIBDIR" "$PREFIX")|")
sed "${sub[@]}" cmake/omniconnConfig.cmake.in > "$D$CMAKEDIR/omniconnConfig.cmake"
sed "${sub[@]}" cmake/omniconnConfigVersion.cmake.in > "$D$CMAKEDIR/omniconnConfigVersion.cmake"
install -m 644 python/omniconn/*.py "$D$PYTHONDIR/omniconn/"
printf '# written by make install: the library directory, relative to this package\nLIBDIR_FROM_PACKAGE = "%s"\n' \
    "$(rel "$LIBDIR" "$PYTHONDIR/omniconn")" > "$D$PYTHONDIR/omniconn/_install.py"
# a real install (no DESTDIR) as root: refresh the loader's cache, so programs and pkg-config
# users find libomniconn.so.$MAJOR at once (a DESTDIR staging tree is the packager's to do)
if [ -z "$D" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
    ldconfig
elif [ -z "$D" ]; then
    echo "note: run ldconfig as root if $LIBDIR is not in the loader's path yet"
fi
echo "installed omniconn $LIB_VERSION under $D$PREFIX (headers, libomniconn.so.$MAJOR, omniconn.pc, cmake/omniconn;" \
     "python package in $PYTHONDIR)"
