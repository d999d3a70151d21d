#!/usr/bin/env bash
# docs/getting-started.md's "Across hosts, with keys", run exactly as the page prints it.
#   1. The tool and the two programs are built by the page's own build lines (the blocks of
#      "What you need"), in a scratch directory holding only the headers and the sources.
#   2. The blocks marked <!-- keys-test: terminal-N-... --> run verbatim, each in a fresh shell (a
#      terminal): keys for "host A" and "host B" (directories of their own), the exchange of the
#      public keys, doctor's check; then the producer in the background and, once its metadata is
#      there (an event, not a delay), the consumer. It must print the success lines the page shows.
#   3. The same again with this host's non-loopback address instead of 127.0.0.1, if it has one.
#   4. The failures the page lists print what the page says they print.
# Called by tests/test_cli.c (so it runs in every build of the suite); standalone:
#   bash tests/getting_started_keys.sh
# Ends with "getting-started keys: N passed, M failed"; exit status 0 only if nothing failed.
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DOC=$ROOT/docs/getting-started.md
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | tail -n 25 | sed 's/^/    /'; }
finish() { echo "getting-started keys: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

TMP=$(mktemp -d /tmp/omc-gs-keys.XXXXXX)
ppid=""
trap '[ -n "$ppid" ] && kill "$ppid" 2>/dev/null; rm -rf "$TMP"' EXIT
cp omniconn*.h "$TMP"/
mkdir -p "$TMP/examples" "$TMP/tools"
cp examples/hello_producer.c examples/hello_consumer.c "$TMP/examples/"
cp tools/omniconn_cli.c "$TMP/tools/"

# block MARKER: the body of the fenced block right after the line <!-- keys-test: MARKER -->
block() {
    awk -v m="<!-- keys-test: $1 -->" '
        $0 == m { armed = 1; next }
        armed == 1 && /^```/ { armed = 2; next }
        armed == 2 && /^```/ { exit }
        armed == 2 { print }' "$DOC"
}

# 1. built by the page's lines (the hello programs' lines are the fenced block before the tool's)
builds=$(awk '/^## What you need/ { on = 1 } /^## 1\./ { on = 0 } on && /^cc / { print }' "$DOC")
[ "$(printf '%s\n' "$builds" | grep -c '^cc ')" -ge 3 ] || { bad "$DOC: 'What you need' has no three cc lines" "$builds"; finish; }
while IFS= read -r line; do
    if out=$(cd "$TMP" && bash -c "$line" 2>&1); then ok "builds: $line"; else bad "builds: $line" "$out"; fi
done <<< "$builds"
for p in omniconn hello_producer hello_consumer; do
    [ -x "$TMP/$p" ] || { bad "the build lines made no $p"; finish; }
done

for m in terminal-1-keys terminal-2-keys terminal-1-run terminal-2-run; do
    [ -n "$(block $m)" ] || { bad "$DOC has no <!-- keys-test: $m --> block"; finish; }
done

# 2./3. the sequence, with HOST in place of the page's 127.0.0.1
rehearse() {   # rehearse HOST
    local host=$1 t1run out rc i
    rm -rf "$TMP/hostA" "$TMP/hostB"
    out=$(cd "$TMP" && bash -e -c "$(block terminal-1-keys)" 2>&1); rc=$?
    [ $rc -eq 0 ] && ok "[$host] terminal 1 makes its keys" || { bad "[$host] terminal 1's keys (exit $rc)" "$out"; return; }
    out=$(cd "$TMP" && bash -e -c "$(block terminal-2-keys)" 2>&1); rc=$?
    if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q "^OK    keys          --key 'consumer.key': a valid secret key, mode 0600, and 'consumer.pub' is its public key$" \
                     && printf '%s\n' "$out" | grep -q "^OK    keys          --server-key 'producer.pub': a valid public key" \
                     && ! printf '%s\n' "$out" | grep -q "^FAIL"; then
        ok "[$host] terminal 2 makes its keys, exchanges the .pub files, doctor says OK"
    else
        bad "[$host] terminal 2's keys and check (exit $rc)" "$out"; return
    fi
    [ "$(stat -c %a "$TMP/hostA/producer.key")" = 600 ] && [ "$(stat -c %a "$TMP/hostB/consumer.key")" = 600 ] \
        && [ -f "$TMP/hostA/consumer.pub" ] && [ -f "$TMP/hostB/producer.pub" ] && [ ! -e "$TMP/hostA/consumer.key" ] \
        && [ ! -e "$TMP/hostB/producer.key" ] \
        && ok "[$host] each 'host' holds its own .key (0600) and the other's .pub, no other .key" \
        || bad "[$host] the key files are not where the page says" "$(ls -l "$TMP"/hostA "$TMP"/hostB)"
    t1run=$(block terminal-1-run)
    t1run=${t1run//127.0.0.1/$host}
    (cd "$TMP" && exec bash -c "$t1run" 2> "$TMP/producer.err") &
    ppid=$!
    for i in $(seq 600); do         # until the metadata line is there, or the producer died
        [ -s "$TMP/hostA/meta.txt" ] && break
        kill -0 "$ppid" 2>/dev/null || break
        sleep 0.1
    done
    if [ ! -s "$TMP/hostA/meta.txt" ]; then
        bad "[$host] the producer wrote no metadata" "$(cat "$TMP/producer.err")"; kill "$ppid" 2>/dev/null; wait "$ppid"; ppid=""; return
    fi
    out=$(cd "$TMP" && timeout 60 bash -c "$(block terminal-2-run)" 2>&1); rc=$?
    if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -qx 'hello_consumer: got 1048576 bytes of req-42 over tcp, every byte as sent'; then
        ok "[$host] terminal 2's consumer gets every byte, as the page shows"
    else
        bad "[$host] terminal 2's consumer (exit $rc)" "$out"
    fi
    for i in $(seq 600); do kill -0 "$ppid" 2>/dev/null || break; sleep 0.1; done
    kill "$ppid" 2>/dev/null
    wait "$ppid"; rc=$?
    ppid=""
    if [ $rc -eq 0 ] && grep -qx 'hello_producer: put 1048576 bytes under req-42 over tcp with CURVE; waiting for the consumer' "$TMP/producer.err" \
                     && grep -qx 'hello_producer: req-42 was consumed' "$TMP/producer.err"; then
        ok "[$host] terminal 1's producer sees its payload consumed and exits 0, as the page shows"
    else
        bad "[$host] terminal 1's producer (exit $rc)" "$(cat "$TMP/producer.err")"
    fi
    if grep -q "^../hello_producer .*-H $host " <<< "$t1run"; then :; else bad "[$host] the producer line has no -H to replace" "$t1run"; fi
}

rehearse 127.0.0.1
addr=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
if [ -n "$addr" ]; then rehearse "$addr"; else echo "skip this host has no non-loopback IPv4 address"; fi

# 4. the failures of the page's table: the consumer's lines, as the page quotes them
failure() {   # failure LABEL EXPECTED_EXIT PAGE_LINE CONSUMER_ARGS...
    local label=$1 want=$2 line=$3 out rc i; shift 3
    grep -qF -- "$line" "$DOC" || { bad "$label: $DOC does not quote: $line"; return; }
    rm -f "$TMP/hostA/meta.txt"
    (cd "$TMP/hostA" && exec ../hello_producer -t tcp -H 127.0.0.1 -w 60000 --key producer.key --allow consumer.pub > meta.txt 2> "$TMP/producer.err") &
    ppid=$!
    for i in $(seq 600); do [ -s "$TMP/hostA/meta.txt" ] && break; kill -0 "$ppid" 2>/dev/null || break; sleep 0.1; done
    out=$(cd "$TMP/hostB" && timeout 60 ../hello_consumer -t tcp -w 4000 "$@" < ../hostA/meta.txt 2>&1); rc=$?
    kill "$ppid" 2>/dev/null; wait "$ppid" 2>/dev/null; ppid=""
    if [ $rc -eq "$want" ] && printf '%s\n' "$out" | grep -qF -- "$line"; then ok "$label"; else bad "$label (exit $rc, want $want)" "$out"; fi
}
rm -rf "$TMP/hostA" "$TMP/hostB"
(cd "$TMP" && bash -e -c "$(block terminal-1-keys)" && bash -e -c "$(block terminal-2-keys)") > /dev/null 2>&1
(cd "$TMP/hostB" && ../omniconn keygen stranger > /dev/null)
failure "no --server-key: the page's hint" 1 \
    "hello_consumer: if the producer runs with --key, give us its NAME.pub with --server-key"
failure "a consumer not on the allow-list: the page's words" 1 \
    "hello_consumer: the producer refused our keys: --server-key is not its NAME.pub, or our --key's NAME.pub is not on its --allow list" \
    --server-key producer.pub --key stranger.key
failure "the wrong server key: the page's words" 1 \
    "hello_consumer: the producer refused our keys: --server-key is not its NAME.pub, or our --key's NAME.pub is not on its --allow list" \
    --server-key stranger.pub --key consumer.key
mv "$TMP/hostB/producer.pub" "$TMP/hostB/producer.pub.away"
failure "a missing key file: the page's words, at once" 2 \
    "hello_consumer: --server-key producer.pub: cannot open the key file (make a pair with: omniconn keygen NAME)" \
    --server-key producer.pub
mv "$TMP/hostB/producer.pub.away" "$TMP/hostB/producer.pub"
failure "a .key where a .pub belongs: the page's words, at once" 2 \
    "hello_consumer: --server-key producer.key: that is a secret key; --server-key wants a public one (NAME.pub; a .key never leaves its host)" \
    --server-key producer.key
finish
