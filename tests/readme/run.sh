#!/usr/bin/env bash
# The README's programs, exactly as the README prints them.
#   1. Every code block marked <!-- readme-test: PATH --> is byte for byte the file PATH
#      (the README and examples/ cannot drift apart).
#   2. The blocks themselves (not the files) are compiled, in a scratch directory holding only the
#      headers and the extracted programs, by the command lines of the block marked
#      <!-- readme-test: commands -->, verbatim.
#   3. Every "./..." line of that block runs (two processes joined by a pipe), must exit 0 and
#      must deliver the payload; the sample output printed after the block must be what a run prints.
#   4. What the programs promise: the producer stays until its payload is consumed, gives up at its
#      deadline and removes its segment, and the consumer refuses metadata that is not metadata.
#   5. The docs around them: docs/troubleshooting.md explains every result code of omniconn.h, and
#      every relative link in README.md, docs/ and examples/README.md leads to a file (and heading).
# Ends with "readme: N passed, M failed"; exit status 0 only if nothing failed.
set -u
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | tail -n 20 | sed 's/^/    /'; }
finish() { echo "readme: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

TMP=$(mktemp -d /tmp/omc-readme.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
cp omniconn*.h "$TMP"/
mkdir -p "$TMP/examples"

# block MARKER: the body of the fenced block right after the line <!-- readme-test: MARKER -->
block() {
    awk -v m="<!-- readme-test: $1 -->" '
        $0 == m { armed = 1; next }
        armed == 1 && /^```/ { armed = 2; next }
        armed == 2 && /^```/ { exit }
        armed == 2 { print }' README.md
}
# the plain fenced block that follows the commands block: the sample output
sample_output() {
    awk '
        $0 == "<!-- readme-test: commands -->" { state = 1; next }
        state == 1 && /^```/ { state = 2; next }
        state == 2 && /^```/ { state = 3; next }
        state == 3 && /^```/ { state = 4; next }
        state == 4 && /^```/ { exit }
        state == 4 { print }' README.md
}

# 1. the README's programs are the files in examples/
files=$(grep -oE '<!-- readme-test: [^ ]+\.c -->' README.md | sed -E 's/<!-- readme-test: (.*) -->/\1/')
[ -n "$files" ] && ok "README marks its programs: $(echo $files)" || bad "README marks no program (<!-- readme-test: examples/NAME.c -->)"
for f in $files; do
    block "$f" > "$TMP/$f"
    if [ ! -s "$TMP/$f" ]; then
        bad "$f: no code block after its marker in README.md"
    elif cmp -s "$TMP/$f" "$f"; then
        ok "$f: README.md shows it byte for byte"
    else
        bad "$f: README.md and $f differ (copy the file into the README, or the README into the file)" \
            "$(diff -u "$f" "$TMP/$f" | head -n 20)"
    fi
done

# 2. built exactly as printed
cmds=$(block commands)
[ -n "$cmds" ] || { bad "README has no <!-- readme-test: commands --> block"; finish; }
builds=$(printf '%s\n' "$cmds" | grep -E '^cc ')
runs=$(printf '%s\n' "$cmds" | grep -E '^\./')
[ -n "$builds" ] && [ -n "$runs" ] || { bad "the commands block has no cc line or no ./ line"; finish; }
while IFS= read -r line; do
    if out=$(cd "$TMP" && bash -c "$line" 2>&1); then
        ok "builds: $line"
    else
        bad "builds: $line" "$out"
    fi
done <<< "$builds"
[ -x "$TMP/hello_producer" ] && [ -x "$TMP/hello_consumer" ] || { bad "the build lines made no hello_producer/hello_consumer"; finish; }

# 3. run as printed: exit 0 and the payload arrived
first_run=""
while IFS= read -r line; do
    out=$(cd "$TMP" && timeout 60 bash -c "set -o pipefail; $line" 2>&1); rc=$?
    if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q '^hello_consumer: got .* every byte as sent$' \
                      && printf '%s\n' "$out" | grep -q '^hello_producer: .* was consumed$'; then
        ok "runs: $line"
    else
        bad "runs: $line (exit status $rc)" "$out"
    fi
    [ -n "$first_run" ] || first_run=$out
done <<< "$runs"
missing=""
while IFS= read -r want; do
    [ -z "$want" ] && continue
    printf '%s\n' "$first_run" | grep -qxF -- "$want" || missing="$missing$want"$'\n'
done < <(sample_output)
if [ -z "$(sample_output)" ]; then
    bad "README shows no sample output after the commands"
elif [ -z "$missing" ]; then
    ok "the sample output in README.md is what the first run printed"
else
    bad "README.md's sample output has lines the first run did not print" "$missing--- the run printed:
$first_run"
fi

# 4. what the programs promise
cd "$TMP"
./hello_producer -k late > late.meta 2> late.err &
ppid=$!
sleep 1
if kill -0 "$ppid" 2>/dev/null; then
    ok "the producer waits for its consumer (still running 1 s after its put)"
else
    bad "the producer exited before anyone consumed its payload" "$(cat late.err)"
fi
out=$(timeout 30 ./hello_consumer -k late < late.meta 2>&1); rc=$?
[ $rc -eq 0 ] && ok "a consumer that comes 1 s late gets the payload" || bad "a consumer that comes 1 s late (exit status $rc)" "$out"
for _ in $(seq 100); do kill -0 "$ppid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$ppid" 2>/dev/null; then
    kill "$ppid"; bad "the producer did not exit within 10 s of the consumption" "$(cat late.err)"
else
    wait "$ppid"; rc=$?
    [ $rc -eq 0 ] && ok "the producer exits 0 once its payload is consumed" || bad "the producer exited $rc after the consumption" "$(cat late.err)"
fi

./hello_producer -k nobody -w 300 > /dev/null 2> nobody.err &
ppid=$!
wait "$ppid"; rc=$?
if [ $rc -eq 1 ] && grep -q 'OMC_ERR_TIMEOUT' nobody.err; then
    ok "with no consumer the producer gives up at its deadline (exit 1, OMC_ERR_TIMEOUT)"
else
    bad "with no consumer the producer (exit status $rc) should give up with OMC_ERR_TIMEOUT" "$(cat nobody.err)"
fi
left=$(ls /dev/shm 2>/dev/null | grep -E "^omc-$(id -u)-hello-$ppid-" || true)
[ -z "$left" ] && ok "the producer that gave up removed its segment" || bad "the producer that gave up left /dev/shm/$left behind"

out=$(echo 'omc1.not-metadata' | ./hello_consumer 2>&1); rc=$?
if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q 'OMC_ERR_MALFORMED'; then
    ok "the consumer refuses a line that is not metadata (exit 1, OMC_ERR_MALFORMED)"
else
    bad "the consumer given garbage (exit status $rc) should refuse it with OMC_ERR_MALFORMED" "$out"
fi
cd "$ROOT"

# 5. the docs a newcomer follows from here
codes=$(sed -n '/define OMC__RESULT_LIST/,/^$/p' omniconn.h | grep -oE 'X\(OMC_[A-Z0-9_]+' | sed 's/X(//')
undocumented=""
for c in $codes; do grep -q "\`$c\`" docs/troubleshooting.md || undocumented="$undocumented $c"; done
if [ -z "$codes" ]; then
    bad "found no result codes in omniconn.h's OMC__RESULT_LIST"
elif [ -z "$undocumented" ]; then
    ok "docs/troubleshooting.md explains every result code ($(echo $codes | wc -w))"
else
    bad "docs/troubleshooting.md does not explain:$undocumented"
fi
# anchors as GitHub makes them from headings: lower case, punctuation dropped, spaces to hyphens
anchors() { grep -E '^#{1,6} ' "$1" | sed -E 's/^#+ +//' | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'; }
broken=""
for md in README.md docs/*.md examples/README.md; do
    dir=$(dirname "$md")
    for link in $(grep -oE '\]\([^)[:space:]]+\)' "$md" | sed -E 's/^\]\((.*)\)$/\1/' | grep -vE '^[a-z]+:'); do
        file=${link%%#*}; anchor=""
        case "$link" in *#*) anchor=${link#*#} ;; esac
        if [ -z "$file" ]; then target=$md; else target=$dir/$file; fi
        if [ ! -e "$target" ]; then broken="$broken $md->$link"
        elif [ -n "$anchor" ] && ! anchors "$target" | grep -qxF -- "$anchor"; then broken="$broken $md->$link"
        fi
    done
done
[ -z "$broken" ] && ok "every relative link in README.md, docs/ and examples/README.md leads to a file and heading" \
                 || bad "links to files or headings that do not exist:$broken"
finish
