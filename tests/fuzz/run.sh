#!/usr/bin/env bash
# Build the libFuzzer targets and run each for FUZZ_SECONDS (default 30) on a seed corpus of valid
# inputs. `make fuzz` and tests/run.sh call this. Needs clang with the fuzzer runtime
# (libclang-rt-14-dev on Debian 12).
#   tests/fuzz/run.sh               build, seed, run every target
#   FUZZ_SECONDS=300 tests/fuzz/run.sh
#   FUZZ_TARGETS="meta" tests/fuzz/run.sh     (default: every tests/fuzz/fuzz_*.c)
# Corpora grow in tests/fuzz/corpus-<target>/ (not in git); a crashing input is saved in
# build/fuzz/crash-<target>-* and the run fails. Ends with "fuzz: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
SECS=${FUZZ_SECONDS:-30}
OUT=${FUZZ_BUILD:-build/fuzz}
CC=${FUZZ_CC:-clang}
# every tests/fuzz/fuzz_<name>.c is a target; -DOMC_FUZZ_SEEDS builds its seed writer (optional)
TARGETS=${FUZZ_TARGETS:-$(ls tests/fuzz/fuzz_*.c | sed -E 's|.*/fuzz_(.*)\.c|\1|')}
LIBS="-lzmq -ldl -lpthread -lm"
CFLAGS="-std=c99 -g -O1 -I. -Wall -Wextra -Werror -pedantic -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers"
mkdir -p "$OUT"
pass=0; fail=0

for t in $TARGETS; do
    src=tests/fuzz/fuzz_$t.c
    corpus=tests/fuzz/corpus-$t
    log=$OUT/fuzz_$t.log
    seeds=0; grep -q OMC_FUZZ_SEEDS "$src" && seeds=1
    : >"$log"
    # 1. the seed writer (same source, plain build) and the fuzzer itself
    if { [ $seeds -eq 1 ] && ! $CC $CFLAGS -DOMC_FUZZ_SEEDS -o "$OUT/seeds_$t" "$src" $LIBS >>"$log" 2>&1; } ||
       ! $CC $CFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
             -o "$OUT/fuzz_$t" "$src" $LIBS >>"$log" 2>&1; then
        echo "FAIL fuzz_$t: build failed (is clang with libclang-rt installed?)"; sed 's/^/    /' "$log" | tail -n 20
        fail=$((fail + 1)); continue
    fi
    # 2. seed the corpus with valid inputs (so the fuzzer starts past the magic and the CRC)
    mkdir -p "$corpus"
    if [ $seeds -eq 1 ] && ! "$OUT/seeds_$t" "$corpus" >>"$log" 2>&1; then
        echo "FAIL fuzz_$t: seed writer failed"; fail=$((fail + 1)); continue
    fi
    # 3. run
    "$OUT/fuzz_$t" -max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -artifact_prefix="$OUT/crash-$t-" "$corpus" >>"$log" 2>&1
    rc=$?
    execs=$(grep -E '^stat::number_of_executed_units:' "$log" | tail -n 1 | awk '{print $2}')
    files=$(ls "$corpus" | wc -l)
    if [ $rc -eq 0 ]; then
        echo "PASS fuzz_$t: ${execs:-?} executions in $SECS s, corpus $files inputs"
        pass=$((pass + 1))
    else
        echo "FAIL fuzz_$t: exit $rc after ${execs:-?} executions; crashing input: $(ls "$OUT"/crash-$t-* 2>/dev/null | head -n 1)"
        grep -E 'ERROR|SUMMARY|failed \(line' "$log" | head -n 5 | sed 's/^/    /'
        fail=$((fail + 1))
    fi
done

echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
