#!/usr/bin/env bash
# The compile matrix: every header on its own, as C99 and as C++, with gcc and clang, warnings as
# errors; OMNICONN_STATIC; two translation units linked together; the header included twice; and
# every feature-macro combination. Each cell prints PASS/FAIL; the last line is
# "compile-matrix: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
OUT=${BUILD:-build}/compile
mkdir -p "$OUT"
pass=0; fail=0
WARN="-Wall -Wextra -Werror -pedantic -Wshadow"
CWARN="$WARN -Wstrict-prototypes"
LIBS="-ldl -lpthread -lm"           # libzmq and libibverbs are loaded at run time
CUDA_INC=/usr/local/cuda/include

cell() {   # cell NAME COMMAND...
    local name=$1; shift
    if "$@" >"$OUT/$name.log" 2>&1; then pass=$((pass+1)); echo "PASS compile.$name"
    else fail=$((fail+1)); echo "FAIL compile.$name"; sed 's/^/    /' "$OUT/$name.log" | head -20; fi
}

headers=(omniconn.h)
for h in omniconn_shm.h omniconn_rdma.h omniconn_pipeline.h omniconn_store.h; do [ -f "$h" ] && headers+=("$h"); done

# a translation unit that builds the implementation of header $1 with extra defines $2
impl_tu() {
    local f=$OUT/impl_$RANDOM$RANDOM.c
    { printf '%s\n' $2 | sed -n 's/^-D\([A-Z_]*\)$/#define \1/p'
      echo "#define OMNICONN_IMPLEMENTATION"
      echo "#include \"$1\""
      echo "#include \"$1\"   /* a second include must be harmless */"
      echo "int main(void) { return omc_version() == OMNICONN_VERSION ? 0 : 1; }"; } > "$f"
    echo "$f"
}

for h in "${headers[@]}"; do
    base=${h%.h}
    decl=$OUT/decl_$base.c
    printf '#include "%s"\nint omc_test_decl_only(void);\nint omc_test_decl_only(void) { return (int)sizeof(omc_range); }\n' "$h" > "$decl"
    cell "$base.decl.c99"   gcc -std=c99 $CWARN -I. -c "$decl" -o "$OUT/decl_$base.o"
    cell "$base.decl.cxx"   g++ -std=c++11 $WARN -I. -x c++ -c "$decl" -o "$OUT/decl_${base}_cxx.o"
    tu=$(impl_tu "$h" "")
    cell "$base.impl.gcc-c99"   gcc -std=c99 $CWARN -I. "$tu" -o "$OUT/$base.gcc" $LIBS
    cell "$base.impl.clang-c99" clang -std=c99 $CWARN -I. "$tu" -o "$OUT/$base.clang" $LIBS
    cell "$base.impl.g++-c++11" g++ -std=c++11 $WARN -I. -x c++ "$tu" -o "$OUT/$base.gxx" $LIBS
    cell "$base.impl.clang++-c++17" clang++ -std=c++17 $WARN -I. -x c++ "$tu" -o "$OUT/$base.clangxx" $LIBS
    tu=$(impl_tu "$h" "-DOMNICONN_STATIC")
    cell "$base.static"     gcc -std=c99 $CWARN -I. "$tu" -o "$OUT/$base.static" $LIBS
    # two translation units: one holds the implementation, the other only calls the API
    a=$OUT/tu_a_$base.c; b=$OUT/tu_b_$base.c
    printf '#define OMNICONN_IMPLEMENTATION\n#include "%s"\nint omc_tu_b(void);\nint main(void) { return omc_tu_b(); }\n' "$h" > "$a"
    printf '#include "%s"\nint omc_tu_b(void);\nint omc_tu_b(void) { return omc_has(OMC_FEATURE_LOCAL) ? 0 : 1; }\n' "$h" > "$b"
    cell "$base.two-tus"    gcc -std=c99 $CWARN -I. "$a" "$b" -o "$OUT/$base.2tu" $LIBS
    # static mode in two TUs: each keeps its own private copy, nothing clashes at link time
    printf '#define OMNICONN_STATIC\n#define OMNICONN_IMPLEMENTATION\n#include "%s"\nint omc_tu_b(void);\nint main(void) { return omc_tu_b() + (omc_has(OMC_FEATURE_LOCAL) ? 0 : 1); }\n' "$h" > "$a"
    printf '#define OMNICONN_STATIC\n#define OMNICONN_IMPLEMENTATION\n#include "%s"\nint omc_tu_b(void);\nint omc_tu_b(void) { return omc_has(OMC_FEATURE_LOCAL) ? 0 : 1; }\n' "$h" > "$b"
    cell "$base.static-two-tus" gcc -std=c99 $CWARN -I. "$a" "$b" -o "$OUT/$base.s2tu" $LIBS
done

# feature-macro combinations, with every header at once
all_impl() {   # all_impl DEFINES...
    local f=$OUT/feat_$RANDOM$RANDOM.c
    { for d in "$@"; do echo "#define ${d#-D}"; done
      echo "#define OMNICONN_IMPLEMENTATION"
      for h in "${headers[@]}"; do echo "#include \"$h\""; done
      echo "int main(void) { return 0; }"; } > "$f"
    echo "$f"
}
combos=("" "-DOMNICONN_NO_SHM" "-DOMNICONN_NO_ZMQ" "-DOMNICONN_NO_RDMA" "-DOMNICONN_NO_SHM -DOMNICONN_NO_ZMQ"
        "-DOMNICONN_NO_SHM -DOMNICONN_NO_RDMA" "-DOMNICONN_NO_RUNTIME_LINKING" "-DOMNICONN_STATIC -DOMNICONN_NO_ZMQ")
for c in "${combos[@]}"; do
    name=$(echo "${c:-default}" | sed 's/-DOMNICONN_//g; s/ /+/g' | tr 'A-Z' 'a-z')
    tu=$(all_impl $c)
    libs="-ldl -lpthread -lm"
    case "$c" in *NO_RUNTIME_LINKING*) libs="-lzmq $libs -libverbs";; esac
    cell "features.$name.c99" gcc -std=c99 $CWARN -I. "$tu" -o "$OUT/feat_$name" $libs
    cell "features.$name.c++" g++ -std=c++11 $WARN -I. -x c++ "$tu" -o "$OUT/feat_${name}_cxx" $libs
done
# a stage wired in code: transfer ids and streams without the configuration reader
f=$OUT/pipeline_no_config.c
printf '#define OMNICONN_PIPELINE_NO_CONFIG\n#define OMNICONN_IMPLEMENTATION\n#include "omniconn.h"\n#include "omniconn_pipeline.h"\nint main(void) { return omc_xfer_map_count(NULL) == 0 ? 0 : 1; }\n' > "$f"
cell "pipeline.no-config.c99" gcc -std=c99 $CWARN -I. "$f" -o "$OUT/pipeline_no_config" -ldl -lpthread -lm
cell "pipeline.no-config.c++" g++ -std=c++11 $WARN -I. -x c++ "$f" -o "$OUT/pipeline_no_config_cxx" -ldl -lpthread -lm

# OMC__PRIVATE (static + unused) hides unused-function warnings in the builds above; once, with it
# defined as plain static, every header must still compile warning-free with -Wunused-function
# (a private function no code calls is deleted, or made OMC__PRIVATE on purpose in a
# combination that leaves it unused - see the rule in omniconn.h's companion interface section).
tu=$(all_impl)
cell "private-as-plain-static.unused-function" gcc -std=c99 $CWARN -Wunused-function -DOMC__PRIVATE=static -I. "$tu" -o "$OUT/feat_private_static" -ldl -lpthread -lm

# The plain build: an SHM program and a TCP program, each built with exactly
# `cc -std=c99 app.c -lpthread -ldl` (no -lzmq: libzmq is loaded at run time) and run. The SHM
# program also checks that libzmq never got mapped into it.
plain_app() {   # plain_app NAME: build tests/compile/app_NAME.c as app.c next to the headers, run it
    local dir=$OUT/plain_$1
    mkdir -p "$dir"
    cp omniconn*.h "$dir/" && cp "tests/compile/app_$1.c" "$dir/app.c"
    (cd "$dir" && cc -std=c99 app.c -lpthread -ldl && ./a.out)
}
cell "plain-cc.shm-app" plain_app shm
cell "plain-cc.tcp-app" plain_app tcp
# the same SHM program linked directly (OMNICONN_NO_RUNTIME_LINKING links libzmq and libibverbs)
cell "direct-linking.tcp-app" gcc -std=c99 $CWARN -DOMNICONN_NO_RUNTIME_LINKING -I. tests/compile/app_tcp.c -o "$OUT/app_tcp_direct" -lzmq -ldl -lpthread
# Embedded: the SHM program as a static musl binary (musl-gcc -static, nothing else: no kernel UAPI
# header, no libzmq), run; and a static program asked for the remote connector, whose reason must
# name the fix for a static build (OMNICONN_NO_RUNTIME_LINKING and -lzmq)
static_app() {   # static_app NAME: build tests/compile/app_NAME.c with musl-gcc -static and run it
    local dir=$OUT/static_$1
    mkdir -p "$dir"
    cp omniconn*.h "$dir/" && cp "tests/compile/app_$1.c" "$dir/app.c"
    (cd "$dir" && musl-gcc -static -std=c99 $CWARN app.c -o app -lpthread -ldl && ./app)
}
if command -v musl-gcc >/dev/null; then
    cell "musl-static.shm-app" static_app shm
    cell "musl-static.tcp-reason-names-static-fix" static_app static_tcp
else
    fail=$((fail+1)); echo "FAIL compile.musl-static (musl-gcc missing: bash scripts/install-deps.sh installs musl-tools)"
fi
# C++: every desc initialised with "= {}" as the manuals say (C's "= {0}" does not compile there
# for a desc that starts with an enum), with g++ and clang++, run
cell "cxx-desc-init.g++" bash -c "g++ -std=c++11 $WARN -I. tests/compile/app_cxx_init.cpp -o '$OUT/app_cxx_init' -ldl -lpthread -lm && '$OUT/app_cxx_init'"
cell "cxx-desc-init.clang++" bash -c "clang++ -std=c++17 $WARN -I. tests/compile/app_cxx_init.cpp -o '$OUT/app_cxx_init_clang' -ldl -lpthread -lm && '$OUT/app_cxx_init_clang'"
# CUDA: compiled here (cuda_runtime_api.h from nvcc's toolkit), not run: no GPU on these machines
if [ -f "$CUDA_INC/cuda_runtime_api.h" ]; then
    tu=$(all_impl -DOMNICONN_ENABLE_CUDA)
    cell "features.enable_cuda.c99" gcc -std=c99 $CWARN -I. -isystem "$CUDA_INC" -c "$tu" -o "$OUT/feat_cuda.o"
    if [ -x /usr/local/cuda/bin/nvcc ]; then    # nvcc compiles the file as C++ (CUDA translation unit)
        cp "$tu" "$OUT/feat_cuda.cu"
        cell "features.enable_cuda.nvcc" /usr/local/cuda/bin/nvcc -I. -Xcompiler -Wall,-Wextra,-Werror -c "$OUT/feat_cuda.cu" -o "$OUT/feat_cuda_nvcc.o"
    fi
else
    echo "SKIP compile.features.enable_cuda (no CUDA headers at $CUDA_INC)"
fi

# Include order in the implementation file: a system header before omniconn.h (without
# _GNU_SOURCE) stops with one #error that says the fix; with _GNU_SOURCE defined by the user
# first, the same order compiles warning-free; OMNICONN_IMPLEMENTATION defined only for a second
# include stops with its own fix.
expect_error() {   # expect_error TEXT COMMAND...: passes when the command fails and prints TEXT
    local text=$1; shift
    if "$@"; then echo "compiled, but should have stopped with: $text"; return 1; fi
    grep -qF "$text" "$OUT/last_expect.log" 2>/dev/null || { echo "no fix text ($text) in the errors"; return 1; }
}
io=$OUT/include_order
mkdir -p "$io"
printf '#include <stdio.h>\n#define OMNICONN_IMPLEMENTATION\n#include "omniconn.h"\nint main(void) { puts(omc_version_string()); return 0; }\n' > "$io/system_first.c"
printf '#define _GNU_SOURCE 1\n#include <stdio.h>\n#define OMNICONN_IMPLEMENTATION\n#include "omniconn.h"\nint main(void) { puts(omc_version_string()); return 0; }\n' > "$io/gnu_source_by_user.c"
printf '#include "omniconn.h"\n#define OMNICONN_IMPLEMENTATION\n#include "omniconn.h"\nint main(void) { return (int)omc_version(); }\n' > "$io/impl_defined_late.c"
compile_io() { gcc -std=c99 $CWARN -I. "$1" -o "$io/a.out" $LIBS >"$OUT/last_expect.log" 2>&1; local rc=$?; cat "$OUT/last_expect.log"; return $rc; }
cell "include-order.system-header-first.errors-with-fix" \
    expect_error "Include omniconn.h before any system header in that file, or define _GNU_SOURCE yourself" compile_io "$io/system_first.c"
cell "include-order.system-header-first.only-that-error" \
    bash -c "[ \$(grep -c 'error' '$OUT/last_expect.log') -le 2 ] || { echo 'more than the one #error:'; cat '$OUT/last_expect.log'; exit 1; }"
cell "include-order.gnu-source-by-user.compiles" compile_io "$io/gnu_source_by_user.c"
cell "include-order.implementation-defined-late.errors-with-fix" \
    expect_error "Define OMNICONN_IMPLEMENTATION before the first omniconn include" compile_io "$io/impl_defined_late.c"

echo "compile-matrix: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
