#!/usr/bin/env bash
# The companions use only the public API and the companion interfaces. A companion is a header
# (omniconn_shm.h, omniconn_rdma.h, omniconn_pipeline.h) or Part B of omniconn.h (the remote
# connector), which stands on Part A (the core) exactly like a header does.
#   names:  every private name of the core (omc__* / OMC__*) a companion uses must be listed in
#           "[SECTION] Implementation: the companion interface" of Part A (companion-interface-begin
#           .. -end); the headers may also use what Part B lists for data planes
#           (remote-interface-begin .. -end).
#   fields: every field of a private struct of the core a companion reads or writes must be
#           listed there too ("fields TYPE: a b c", or "fields TYPE: all").
# Comments are stripped first (gcc -fpreprocessed), so only code counts. Then a self-test plants
# a name and a field violation in a copy of the tree and checks that both are caught.
# Last line: "companions: N passed, M failed".
# Also: the CONTENTS of omniconn.h give the true line spans of Part A and Part B.
# Usage: tests/check_companions.sh [--no-self-test | --fix-contents] [DIR]   (DIR: default this tree)
set -u
self_test=1
fix_contents=0
if [ "${1:-}" = "--no-self-test" ]; then self_test=0; shift; fi
if [ "${1:-}" = "--fix-contents" ]; then fix_contents=1; shift; fi
here=$(cd "$(dirname "$0")/.." && pwd)
cd "${1:-$here}"
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

strip() { gcc -fpreprocessed -dD -E -P -x c "$1" 2>/dev/null; }
names() { strip "$1" | grep -oE '\b(omc__|OMC__)[A-Za-z0-9_]+' | sort -u; }
block() { sed -n "/$1-begin/,/$1-end/p" "$2"; }

# Part A: everything before the seam; Part B: from the seam to its end marker
awk '/^##  PART B  THE REMOTE CONNECTOR/{exit} {print}' omniconn.h > "$tmp/part_a.h"
awk '/^##  PART B  THE REMOTE CONNECTOR/{on=1} on{print} /^\/\* ##  END OF PART B/{exit}' omniconn.h > "$tmp/part_b.h"
if [ ! -s "$tmp/part_a.h" ] || [ ! -s "$tmp/part_b.h" ] || [ "$(wc -l < "$tmp/part_a.h")" -ge "$(wc -l < omniconn.h)" ]; then
    echo "FAIL companions: cannot find the seam between Part A and Part B of omniconn.h"; echo "companions: 0 passed, 1 failed"; exit 1
fi
iface_a=$(block companion-interface omniconn.h | grep -oE '\b(omc__|OMC__)[A-Za-z0-9_]+' | sort -u)
iface_b=$(block remote-interface "$tmp/part_b.h" | grep -oE '\b(omc__|OMC__)[A-Za-z0-9_]+' | sort -u)
core_a=$(names "$tmp/part_a.h")
core_b=$(names "$tmp/part_b.h")
if [ -z "$iface_a" ] || [ -z "$iface_b" ] || [ -z "$core_a" ]; then
    echo "FAIL companions: cannot read the interface lists or the core"; echo "companions: 0 passed, 1 failed"; exit 1
fi
strip "$tmp/part_a.h" > "$tmp/part_a.c"
block companion-interface omniconn.h > "$tmp/iface.txt"
block remote-interface "$tmp/part_b.h" >> "$tmp/iface.txt"

# fields: a companion's accesses to private structs of the core, against the "fields" lines
fields() {   # fields COMPANION_SOURCE -> the violations, one per line
    python3 - "$tmp/part_a.c" "$tmp/iface.txt" "$1" <<'PY'
import re, sys
core, iface, comp = (open(p).read() for p in sys.argv[1:4])
# private structs of the core: defined in the core's implementation, with their fields
impl = core[re.search(r'#define OMNICONN_IMPL_INCLUDED\s*\n', core).start():]
structs = {}
for m in re.finditer(r'\bstruct\s+(omc_\w+)\s*\{(.*?)\}\s*(\w*)\s*;', impl, re.S):
    body = re.sub(r'\([^()]*\)\s*\([^()]*\)', '', m.group(2))            # function-pointer parameter lists
    fl = {}
    for decl in body.split(';'):
        decl = decl.strip()
        if not decl: continue
        fp = re.search(r'\(\s*\*\s*(\w+)\s*\)', decl)
        if fp: fl[fp.group(1)] = None; continue
        t = re.match(r'(?:const\s+|struct\s+|unsigned\s+)*(\w+)', decl)
        for n in re.findall(r'\**\s*(\w+)\s*(?:\[[^\]]*\])*\s*(?:,|$)', decl[t.end():] if t else decl):
            fl[n] = t.group(1) if t else None
    structs[m.group(3) or m.group(1)] = fl
    structs.setdefault(m.group(1), fl)
allowed = {}
for m in re.finditer(r'^\s*fields\s+([\w ]+?)\s*:\s*(.*)$', iface, re.M):
    for t in m.group(1).split():
        allowed[t] = None if m.group(2).strip() == 'all' else set(m.group(2).split())
checked = {t: f for t, f in structs.items() if allowed.get(t, set()) is not None}
# every struct in sight (the core's public ones, the companion's own) tells accesses apart
known = dict(structs)
for src in (core, comp):
    for m in re.finditer(r'\bstruct\s+(\w+)\s*\{(.*?)\}\s*(\w*)\s*;', src, re.S):
        name = m.group(3) or m.group(1)
        if name in structs: continue
        known[name] = {n: None for n in re.findall(r'(\w+)\s*(?:\[[^\]]*\])*\s*(?:;|,)', m.group(2))}
        known[name].update({n: None for n in re.findall(r'\(\s*\*\s*(\w+)\s*\)', m.group(2))})
# names a companion binds to a type: variables, parameters, members (its own or the core's)
bind = {}
decl_re = r'\b(%s)\b\s*(?:const\s*)?\**\s*(?:const\s*)?(\w+)\s*(?=[;,)=\[])' % '|'.join(sorted(known, key=len, reverse=True))
for src in (comp,):
    for m in re.finditer(decl_re, src):
        bind.setdefault(m.group(2), set()).add(m.group(1))
for t, fl in structs.items():                                              # the core's members of those types
    for n, ft in fl.items():
        if ft in structs: bind.setdefault(n, set()).add(ft)
bad = set()
for m in re.finditer(r'\b(?=(\w+)\s*(?:\[[^\]]*\])?\s*(->|\.)\s*(\w+))', comp):    # overlapping: a->b.c is a->b and b.c
    var, f = m.group(1), m.group(3)
    types = bind.get(var, set())
    for t in types:
        if t not in checked or f not in checked[t]: continue
        if allowed.get(t) is not None and f in allowed[t]: continue
        if any(f in known.get(o, {}) and (o not in checked or allowed.get(o, set()) is None or f in allowed.get(o, set())) for o in types if o != t): continue
        bad.add('%s.%s (as %s%s%s)' % (t, f, var, m.group(2), f))
print('\n'.join(sorted(bad)))
PY
}

check() {   # check LABEL SOURCE CORE_NAMES ALLOWED_NAMES
    local label=$1 src=$2 core=$3 allow=$4 used bad badf n
    used=$(comm -12 <(names "$src") <(echo "$core"))
    bad=$(comm -23 <(echo "$used") <(echo "$allow"))
    strip "$src" > "$tmp/comp.c"
    badf=$(fields "$tmp/comp.c")
    n=$(echo "$used" | grep -c . || true)
    if [ -z "$bad" ] && [ -z "$badf" ]; then
        pass=$((pass + 1)); echo "PASS companion $label: $n names of the core, all in the interface; fields too"
    else
        fail=$((fail + 1)); echo "FAIL companion $label uses the core outside the companion interface:"
        [ -n "$bad" ] && echo "$bad" | sed 's/^/    name  /'
        [ -n "$badf" ] && echo "$badf" | sed 's/^/    field /'
    fi
    echo "$used" | tr '\n' ' ' | fold -s -w 100 | sed 's/^/    /'; echo
}

check "omniconn.h Part B (the remote connector)" "$tmp/part_b.h" "$core_a" "$iface_a"
for h in omniconn_shm.h omniconn_rdma.h omniconn_pipeline.h omniconn_store.h; do
    [ -f "$h" ] || continue
    check "$h" "$h" "$(printf '%s\n%s\n' "$core_a" "$core_b" | sort -u)" "$(printf '%s\n%s\n' "$iface_a" "$iface_b" | sort -u)"
done

# the core names no companion's desc (a connector's table says its own: desc_name)
if strip "$tmp/part_a.h" | grep -qE '"omc_(shm|rdma|rdma_connector|tcp|pipeline|store)_desc"'; then
    fail=$((fail + 1)); echo "FAIL core: Part A names a companion's desc (use the connector table's desc_name)"
else pass=$((pass + 1)); echo "PASS core: Part A names no companion's desc"; fi

# the CONTENTS of omniconn.h give the line spans of both parts: they must be where the markers are
# (--fix-contents rewrites them)
spans() {   # spans [fix]
    python3 - omniconn.h "${1:-check}" <<'PY'
import re, sys
path, mode = sys.argv[1], sys.argv[2]
L = open(path).read().split('\n')
def at(pred, start=0):
    for i in range(start, len(L)):
        if pred(L[i]): return i + 1
    raise SystemExit('marker not found')
a0 = at(lambda l: l.startswith('##  PART A')) - 1
am1 = at(lambda l: l == '*/', a0) - 1
ad0 = at(lambda l: l == '#ifndef OMNICONN_H_INCLUDED'); ad1 = at(lambda l: l.startswith('#endif /* OMNICONN_H_INCLUDED'), ad0)
ai0 = at(lambda l: l.strip() != '', ad1); ai1 = at(lambda l: l.startswith('#endif /* OMNICONN_IMPLEMENTATION */'), ai0)
a1 = at(lambda l: 'END OF PART A' in l, ai1) + 1
b0 = at(lambda l: l.startswith('##  PART B'), a1) - 2
bm1 = at(lambda l: l == '*/', b0) - 1
bd0 = at(lambda l: l == '#if !defined(OMNICONN_REMOTE_H_INCLUDED)', bm1); bd1 = at(lambda l: l.startswith('#endif /* OMNICONN_REMOTE_H_INCLUDED'), bd0)
bi0 = at(lambda l: l.startswith('#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_REMOTE_IMPL_INCLUDED)'), bd1)
bi1 = at(lambda l: l.startswith('#endif /* OMNICONN_IMPLEMENTATION, Part B */'), bi0)
b1 = at(lambda l: 'END OF PART B' in l, bi1) + 1
l0 = at(lambda l: l.strip() != '', b1 + 1); l1 = len(L) - (1 if L[-1] == '' else 0)
want = {'PART A': (a0, a1), 'manual A': (a0 + 4, am1), 'declarations A': (ad0, ad1), 'implementation A': (ai0, ai1),
        'PART B': (b0, b1), 'manual B': (b0, bm1), 'declarations B': (bd0, bd1), 'implementation B': (bi0, bi1), 'LICENSE': (l0, l1)}
order = ['PART A', 'manual A', 'declarations A', 'implementation A', 'PART B', 'manual B', 'declarations B', 'implementation B', 'LICENSE']
c0 = at(lambda l: l.strip().startswith('CONTENTS'))
c1 = at(lambda l: l.strip().startswith('READING PATHS'), c0)
rows = [i for i in range(c0, c1) if re.search(r'\d+ - +\d+\s*$', L[i])]
if len(rows) != len(order): raise SystemExit('CONTENTS has %d spans, expected %d' % (len(rows), len(order)))
bad = []
end = max(len(L[i][:re.search(r'\d+ - +\d+\s*$', L[i]).start()].rstrip()) for i in rows) + 13
for k, i in zip(order, rows):
    m = re.search(r'(\d+) - +(\d+)\s*$', L[i])
    if (int(m.group(1)), int(m.group(2))) != want[k]:
        bad.append('%s: CONTENTS says %s - %s, the markers are at %d - %d' % (k, m.group(1), m.group(2), want[k][0], want[k][1]))
    if mode == 'fix':           # the numbers of every row end in one column
        head = L[i][:m.start()].rstrip()
        L[i] = head + ('%d - %4d' % want[k]).rjust(end - len(head))
if mode == 'fix': open(path, 'w').write('\n'.join(L))
print('\n'.join(bad) if mode == 'check' else 'CONTENTS: %d spans rewritten' % len(bad))
PY
}
if [ "$fix_contents" = 1 ]; then spans fix; exit 0; fi
bad=$(spans 2>&1)
if [ -z "$bad" ]; then pass=$((pass + 1)); echo "PASS omniconn.h CONTENTS: the line spans of Part A and Part B match the markers"
else fail=$((fail + 1)); echo "FAIL omniconn.h CONTENTS (fix: tests/check_companions.sh --fix-contents):"; echo "$bad" | sed 's/^/    /'; fi

# self-test: a copy of the tree with one planted violation each must fail, naming it
if [ "$self_test" = 1 ]; then
    plant() {   # plant LABEL FILE SED-EXPRESSION EXPECTED-TEXT
        local d=$tmp/plant_$RANDOM out
        mkdir -p "$d/tests"; cp omniconn*.h "$d/"; cp "$0" "$d/tests/"
        sed -i "$3" "$d/$2"
        out=$(bash "$d/tests/check_companions.sh" --no-self-test "$d" 2>&1)
        if [ $? -ne 0 ] && echo "$out" | grep -qF "$4"; then
            pass=$((pass + 1)); echo "PASS self-test: a planted $1 fails the check ($4)"
        else
            fail=$((fail + 1)); echo "FAIL self-test: a planted $1 went unnoticed"; echo "$out" | tail -5 | sed 's/^/    /'
        fi
    }
    # Part B calls a core helper the interface does not list
    plant "private name in Part B" omniconn.h '/^OMC__PRIVATE void omc__net_commit_job(omc__net_job\* j) {$/a\    (void)omc__etab_reindex;' "name  omc__etab_reindex"
    # a header reads a field of omc_conn the interface does not list
    plant "private field in a companion" omniconn_pipeline.h '0,/c->role/s/c->role/c->refs/' "field omc_conn.refs"
    # Part B reads a field of the owner the interface does not list
    plant "private field in Part B" omniconn.h '/^OMC__PRIVATE void omc__net_commit_job(omc__net_job\* j) {$/a\    (void)N->own.next_sweep;' "field omc__owner.next_sweep"
fi
echo "companions: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
