#!/usr/bin/env bash
# The companion headers use only the public API and the companion interface of omniconn.h.
# Lists, per companion, the private names of the core (omc__* / OMC__*) it uses, and fails on any
# that "[SECTION] Implementation: the companion interface" of omniconn.h does not list.
# Comments are stripped first (gcc -fpreprocessed), so only code counts.
# Last line: "companions: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
names() { gcc -fpreprocessed -dD -E -P -x c "$1" 2>/dev/null | grep -oE '\b(omc__|OMC__)[A-Za-z0-9_]+' | sort -u; }
interface=$(sed -n '/companion-interface-begin/,/companion-interface-end/p' omniconn.h | grep -oE '\b(omc__|OMC__)[A-Za-z0-9_]+' | sort -u)
core=$(names omniconn.h)
if [ -z "$interface" ] || [ -z "$core" ]; then echo "FAIL companions: cannot read the interface list or the core"; echo "companions: 0 passed, 1 failed"; exit 1; fi
for h in omniconn_shm.h omniconn_rdma.h omniconn_pipeline.h omniconn_store.h; do
    [ -f "$h" ] || continue
    used=$(comm -12 <(names "$h") <(echo "$core"))
    bad=$(comm -23 <(echo "$used") <(echo "$interface"))
    n=$(echo "$used" | grep -c . || true)
    if [ -z "$bad" ]; then
        pass=$((pass + 1)); echo "PASS companion $h: $n names of the core, all in the interface"
    else
        fail=$((fail + 1)); echo "FAIL companion $h uses names outside the companion interface:"; echo "$bad" | sed 's/^/    /'
    fi
    echo "$used" | tr '\n' ' ' | fold -s -w 100 | sed 's/^/    /'; echo
done
echo "companions: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
