#!/usr/bin/env bash
# RDMA test bed: run one command where a real kernel RDMA stack is available.
#
#   tests/rdma/bed.sh [--bed auto|hardware|host-rxe|qemu-rxe] [--] CMD [ARGS...]
#
# CMD and ARGS are joined with spaces into one shell command line, run as `bash -c LINE`
# inside the bed, in the current directory. The bed is the first available of:
#   hardware  a real RDMA device (`ibv_devices`) with an ACTIVE port
#   host-rxe  Soft-RoCE (rdma_rxe) loaded into this host's kernel, on a veth pair
#   qemu-rxe  Debian's own kernel booted in QEMU (TCG), Soft-RoCE inside the guest
# It prints `rdma bed: NAME` and exports to the command:
#   OMC_BED, OMC_RDMA_DEVICE, OMC_RDMA_IP, OMC_RDMA_GID_INDEX, OMC_BED_OUT
# Exit status: the command's; 77 if no bed could be brought up (report as "skipped").
#
# Environment knobs (all optional):
#   OMC_BED_OUT      writable folder shared with the guest (default: <repo>/build); the
#                    host root is read-only in the guest, so outputs go here
#   OMC_BED_CACHE    kernel + initramfs cache (default /var/cache/omniconn-bed)
#   OMC_BED_TIMEOUT  seconds before the QEMU run is killed (default 1200)
#   OMC_BED_KERNEL   Debian kernel package to boot (default: what linux-image-amd64 depends on)
#   OMC_BED_ACCEL    QEMU accelerator (default tcg; KVM fails on the Firecracker machines)
#   OMC_BED_KEEP=1   keep the guest run folder (console log, output) even on success
#   OMC_RDMA_IP      address given to the veth end that carries rxe (default 10.99.0.1)
set -euo pipefail

BED_SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)/$(basename "${BASH_SOURCE[0]}")"
REPO_ROOT="$(cd "$(dirname "$BED_SCRIPT")/../.." && pwd -P)"

: "${OMC_BED_CACHE:=/var/cache/omniconn-bed}"
: "${OMC_BED_TIMEOUT:=1200}"
: "${OMC_BED_ACCEL:=tcg}"
: "${OMC_RDMA_IP:=10.99.0.1}"

# Names used by the soft beds. va carries the rxe device; vb only exists so va has carrier.
VETH_A=va
VETH_B=vb
RXE_DEV=rxe0

# Packages every bed needs (userspace verbs, tools, `rdma` from iproute2), and the extra
# ones for booting a guest.
BASE_PKGS=(rdma-core ibverbs-providers ibverbs-utils libibverbs-dev perftest iproute2 kmod)
QEMU_PKGS=(qemu-system-x86 busybox-static cpio)

# Modules the guest loads, in this order; their dependencies are resolved from modules.dep
# and loaded first. crc32_generic is needed because rxe asks the crypto layer for crc32 and
# nothing autoloads it (without it `rdma link add` fails with "No such file or directory").
GUEST_MODULES=(virtio_pci 9pnet 9pnet_virtio netfs fscache 9p crc32_generic
               ib_core ib_uverbs ip6_udp_tunnel udp_tunnel rdma_rxe veth)

EXIT_SKIP=77

say()  { echo "rdma bed: $*" >&2; }
skip() { say "no bed: $*"; exit "$EXIT_SKIP"; }

usage() {
    sed -n '2,13s/^# \{0,1\}//p' "$BED_SCRIPT" >&2
    exit 2
}

# ---------------------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------------------

APT_UPDATED=0
# Another apt/dpkg may be running (CI setup, a developer): wait for its lock, don't fail.
APT_OPTS=(-o DPkg::Lock::Timeout=900 -o Acquire::Retries=3)

apt_update_once() {
    [[ $APT_UPDATED == 1 ]] && return 0
    APT_UPDATED=1
    say "apt-get update"
    # The lists lock has no wait option of its own: retry while someone else holds it,
    # fail at once for anything else (offline, broken sources).
    local _ err
    for _ in $(seq 1 90); do
        if err=$(apt-get "${APT_OPTS[@]}" update -qq 2>&1); then return 0; fi
        [[ $err == *"Could not get lock"* ]] || { echo "$err" >&2; return 1; }
        sleep 10
    done
    echo "$err" >&2
    return 1
}

pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# ensure_pkgs PKG...: install whichever are missing; false if that is impossible.
ensure_pkgs() {
    local missing=() p
    for p in "$@"; do pkg_installed "$p" || missing+=("$p"); done
    [[ ${#missing[@]} == 0 ]] && return 0
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
        say "missing packages and cannot install them (need root + apt-get): ${missing[*]}"
        return 1
    fi
    apt_update_once || return 1
    say "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get "${APT_OPTS[@]}" install -y -qq \
        --no-install-recommends "${missing[@]}" >&2
}

# ---------------------------------------------------------------------------------------
# Soft-RoCE setup (shared by host-rxe and the inside of qemu-rxe)
# ---------------------------------------------------------------------------------------

# Index of the RoCE v2 GID that holds the IPv4-mapped address $2 on device $1 port 1, or
# nothing. Index 0 is usually the IPv6 link-local GID, so it must be looked up, not assumed.
roce_v2_ipv4_gid_index() {
    local dev=$1 ip=$2 hex gid_file n octets
    IFS=. read -ra octets <<< "$ip"
    hex=$(printf '%02x%02x:%02x%02x' "${octets[@]}")
    for gid_file in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
        n=${gid_file##*/}
        [[ $(cat "$gid_file" 2>/dev/null) == "0000:0000:0000:0000:0000:ffff:$hex" ]] || continue
        [[ $(cat /sys/class/infiniband/"$dev"/ports/1/gid_attrs/types/"$n" 2>/dev/null) == "RoCE v2" ]] \
            || continue
        echo "$n"
        return 0
    done
}

port_active() {
    ibv_devinfo -d "$1" 2>/dev/null | grep -q 'PORT_ACTIVE'
}

# Create va/vb, put OMC_RDMA_IP on va and an rxe device on top of it. Both ends of a test
# use this ONE device: rxe loops traffic to its own address back internally. (Two rxe
# devices on the two ends of the veth do not work: local traffic is routed through lo.)
setup_rxe() {
    ip link set lo up   # down in a fresh guest; the perftest/CM TCP side channel needs it
    ip link add "$VETH_A" type veth peer name "$VETH_B"
    ip addr add "$OMC_RDMA_IP/24" dev "$VETH_A"
    ip link set "$VETH_A" up
    ip link set "$VETH_B" up
    rdma link add "$RXE_DEV" type rxe netdev "$VETH_A"
    # Port state and GID table follow the netdev asynchronously: wait for both.
    local _
    for _ in $(seq 1 100); do
        if port_active "$RXE_DEV" && [[ -n $(roce_v2_ipv4_gid_index "$RXE_DEV" "$OMC_RDMA_IP") ]]; then
            OMC_RDMA_GID_INDEX=$(roce_v2_ipv4_gid_index "$RXE_DEV" "$OMC_RDMA_IP")
            OMC_RDMA_DEVICE=$RXE_DEV
            return 0
        fi
        sleep 0.1
    done
    say "$RXE_DEV did not get an ACTIVE port with a RoCE v2 GID for $OMC_RDMA_IP"
    return 1
}

teardown_rxe() {
    rdma link delete "$RXE_DEV" 2>/dev/null || true
    ip link delete "$VETH_A" 2>/dev/null || true
}

# Run the command line with the bed's variables exported; returns its exit status.
run_command() {
    export OMC_BED OMC_RDMA_DEVICE OMC_RDMA_IP OMC_RDMA_GID_INDEX OMC_BED_OUT
    local rc=0
    bash -c "$CMD" || rc=$?
    return "$rc"
}

# ---------------------------------------------------------------------------------------
# Bed: hardware
# ---------------------------------------------------------------------------------------

# First verbs device with an ACTIVE port that is backed by a real device (soft devices such
# as rxe/siw have no `device` link in sysfs; those are left to the soft beds).
find_hardware_device() {
    command -v ibv_devices >/dev/null || return 1
    local dev
    for dev in $(ibv_devices 2>/dev/null | awk 'NR > 2 { print $1 }'); do
        [[ -e /sys/class/infiniband/$dev/device ]] || continue
        port_active "$dev" || continue
        echo "$dev"
        return 0
    done
    return 1
}

bed_hardware() {
    local dev
    dev=$(find_hardware_device) || return "$EXIT_SKIP"
    OMC_BED=hardware
    OMC_RDMA_DEVICE=$dev
    # RoCE NICs: use the IPv4 RoCE v2 GID of OMC_RDMA_IP if it has one; IB: GID 0.
    OMC_RDMA_GID_INDEX=$(roce_v2_ipv4_gid_index "$dev" "$OMC_RDMA_IP")
    : "${OMC_RDMA_GID_INDEX:=0}"
    echo "rdma bed: $OMC_BED"
    run_command
}

# ---------------------------------------------------------------------------------------
# Bed: host-rxe
# ---------------------------------------------------------------------------------------

host_rxe_possible() {
    [[ $(id -u) == 0 ]] || return 1
    command -v rdma >/dev/null || return 1
    modprobe rdma_rxe 2>/dev/null || return 1
    modprobe crc32_generic 2>/dev/null || true   # may be built in; see GUEST_MODULES
    modprobe veth 2>/dev/null || true
    # Do not trample an existing setup with the same names.
    ! ip link show "$VETH_A" >/dev/null 2>&1 && [[ ! -e /sys/class/infiniband/$RXE_DEV ]]
}

bed_host_rxe() {
    host_rxe_possible || return "$EXIT_SKIP"
    trap teardown_rxe EXIT
    if ! setup_rxe; then
        teardown_rxe
        return "$EXIT_SKIP"
    fi
    OMC_BED=host-rxe
    echo "rdma bed: $OMC_BED"
    run_command
}

# ---------------------------------------------------------------------------------------
# Bed: qemu-rxe
# ---------------------------------------------------------------------------------------

# The guest's /init (busybox sh). It loads the modules, mounts the host's root read-only
# and OMC_BED_OUT writable at the same path inside it, then chroots into the host root and
# runs this very script in --guest mode, which sets up rxe and runs the command.
# The run folder's name comes from the kernel command line (omc.run=NAME).
# shellcheck disable=SC2016   # expanded by the guest, not here
GUEST_INIT='#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.list); do
    insmod /modules/$m || echo "init: insmod $m failed"
done
run=$(sed -n "s/.*omc\.run=\([^ ]*\).*/\1/p" /proc/cmdline)
mkdir -p /out /host
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 omcout /out
. "/out/$run/guest.conf"   # sets HOST_OUT, BED_SCRIPT
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro,cache=loose hostroot /host
# Host folders under /tmp, /run or /dev/shm (a checkout there) would be hidden by the fresh
# tmpfs mounts below: hold them aside first, then put them back inside the tmpfs.
i=0
for p in $KEEP_PATHS; do
    i=$((i + 1)); mkdir -p /keep$i; mount --bind "/host$p" /keep$i
done
mount -t proc proc /host/proc
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
mkdir -p /host/dev/shm /host/dev/pts
mount -t devpts devpts /host/dev/pts
for d in /tmp /run /dev/shm; do mount -t tmpfs tmpfs "/host$d"; done
i=0
for p in $KEEP_PATHS; do
    i=$((i + 1)); mkdir -p "/host$p"; mount --bind /keep$i "/host$p"
done
mkdir -p "/host$HOST_OUT" 2>/dev/null
mount --bind /out "/host$HOST_OUT"
chroot /host /usr/bin/env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash "$BED_SCRIPT" --guest "$HOST_OUT/$run"
echo "init: guest part exited with $?"
sync
poweroff -f
'

init_hash() { printf '%s' "$GUEST_INIT" "${GUEST_MODULES[*]}" | sha256sum | cut -c1-12; }

# Decide which kernel package to boot: explicit, else what linux-image-amd64 depends on,
# else (offline) whatever the cache already holds.
pick_kernel_pkg() {
    if [[ -n ${OMC_BED_KERNEL:-} ]]; then echo "$OMC_BED_KERNEL"; return 0; fi
    local pkg=""
    if command -v apt-cache >/dev/null; then
        pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
              | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
        if [[ -z $pkg && $(id -u) == 0 ]]; then
            apt_update_once || true
            pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
                  | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
        fi
    fi
    if [[ -z $pkg ]]; then
        local cached=("$OMC_BED_CACHE"/linux-image-*/.ready)
        [[ -e ${cached[0]} ]] && pkg=$(printf '%s\n' "${cached[@]}" | sort -V | tail -n1 | xargs dirname | xargs basename)
    fi
    [[ -n $pkg ]] && echo "$pkg"
}

# Download + unpack the kernel package (once) into $OMC_BED_CACHE/<pkg>/root and run
# depmod there. Sets KVER and KROOT.
prepare_kernel() {
    local pkg=$1 dir="$OMC_BED_CACHE/$1"
    KVER=${pkg#linux-image-}
    KROOT="$dir/root"
    [[ -f $dir/.ready ]] && return 0
    say "fetching kernel $pkg into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    # apt-get download writes into the current directory; as root it warns that _apt cannot
    # reach it, which is harmless.
    (cd "$dir" && apt-get "${APT_OPTS[@]}" -o APT::Sandbox::User=root download -qq "$pkg" >&2) || return 1
    dpkg -x "$dir"/"$pkg"_*.deb "$KROOT"
    rm -f "$dir"/"$pkg"_*.deb
    depmod -b "$KROOT" "$KVER"
    [[ -f $KROOT/boot/vmlinuz-$KVER ]] || { say "no vmlinuz in $pkg"; return 1; }
    touch "$dir/.ready"
}

# Build the initramfs (once per kernel version and init script) and set INITRD.
prepare_initramfs() {
    INITRD="$OMC_BED_CACHE/initramfs-$KVER-$(init_hash).cpio.gz"
    [[ -f $INITRD ]] && return 0
    say "building $INITRD"
    rm -f "$OMC_BED_CACHE/initramfs-$KVER-"*.cpio.gz   # older init scripts for this kernel
    local tmp list m line ko
    tmp=$(mktemp -d)
    mkdir -p "$tmp"/{bin,proc,sys,dev,modules}
    cp "$(command -v busybox)" "$tmp/bin/busybox"
    printf '%s' "$GUEST_INIT" > "$tmp/init"
    chmod 755 "$tmp/init"
    # modprobe --show-depends prints "insmod PATH" lines, dependencies first.
    list="$tmp/modules.list"
    : > "$list"
    for m in "${GUEST_MODULES[@]}"; do
        modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" > "$tmp/deps" \
            || { say "module $m not found in kernel $KVER"; rm -rf "$tmp"; return 1; }
        while read -r line; do
            [[ $line == insmod\ * ]] || continue   # "builtin X" lines need nothing
            ko=$(awk '{ print $2 }' <<< "$line")
            local name=${ko##*/}
            grep -qxF "${name%%.ko*}.ko" "$list" && continue
            # busybox insmod cannot read compressed modules: store them plain.
            case $ko in
                *.ko)     cp "$ko" "$tmp/modules/$name" ;;
                *.ko.xz)  xz -dc "$ko" > "$tmp/modules/${name%.xz}" ;;
                *.ko.zst) zstd -qdc "$ko" > "$tmp/modules/${name%.zst}" ;;
                *.ko.gz)  gzip -dc "$ko" > "$tmp/modules/${name%.gz}" ;;
            esac
            echo "${name%%.ko*}.ko" >> "$list"
        done < "$tmp/deps"
    done
    rm -f "$tmp/deps"
    (cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
    mv "$INITRD.tmp" "$INITRD"
    rm -rf "$tmp"
}

# Write the shell-quoted environment for the guest: OMC_*, PATH, and the cwd.
write_guest_env() {
    local f=$1 name
    {
        for name in $(compgen -e | grep -E '^(OMC_[A-Za-z0-9_]*|PATH)$'); do
            printf 'export %s=%q\n' "$name" "${!name}"
        done
        printf 'export HOME=/tmp\n'   # the host root is read-only in the guest
        printf 'BED_CWD=%q\n' "$PWD"
        printf 'CMD=%q\n' "$CMD"
    } > "$f"
}

bed_qemu_rxe() {
    [[ $(id -u) == 0 ]] || say "not root: package installs and the kernel cache may fail"
    ensure_pkgs "${QEMU_PKGS[@]}" || return "$EXIT_SKIP"
    mkdir -p "$OMC_BED_CACHE"
    # One preparer at a time per cache (concurrent CI jobs).
    exec 9> "$OMC_BED_CACHE/.lock"
    flock 9
    local pkg
    pkg=$(pick_kernel_pkg) || true
    [[ -n $pkg ]] || { say "cannot find a Debian kernel package to boot"; return "$EXIT_SKIP"; }
    prepare_kernel "$pkg" || { say "cannot fetch kernel $pkg"; return "$EXIT_SKIP"; }
    prepare_initramfs || { say "cannot build the initramfs"; return "$EXIT_SKIP"; }
    flock -u 9

    # The run folder lives in the shared writable folder: the guest reads its config and
    # command there and leaves the output, the exit status and the console log beside it.
    mkdir -p "$OMC_BED_OUT/rdma-bed"
    OMC_BED_OUT=$(cd "$OMC_BED_OUT" && pwd -P)
    [[ $OMC_BED_OUT != *[[:space:]]* ]] || { say "OMC_BED_OUT must not contain spaces"; return 2; }
    # The guest sees the host root, but with fresh tmpfs on /tmp, /run and /dev/shm and its own
    # /proc, /sys and /dev: the checkout and the current directory, if they live under one of
    # the tmpfs folders, are mounted back into the guest at the same path (KEEP_PATHS).
    local keep="" p k
    for p in "$REPO_ROOT" "$(pwd -P)"; do
        case "$p/" in
            /tmp/*|/run/*|/dev/shm/*)
                [[ $p != *[[:space:]]* ]] || { say "a folder under /tmp, /run or /dev/shm must not contain spaces: $p"; return 2; }
                for k in $keep; do [[ $p/ == "$k"/* ]] && continue 2; done
                keep="$keep $p" ;;
            /proc/*|/sys/*|/dev/*)
                say "the folder $p is not visible in the guest (it has its own /proc, /sys, /dev); run from elsewhere"
                return 2 ;;
        esac
    done
    local run rundir
    run="rdma-bed/run-$(date +%Y%m%d-%H%M%S)-$$"
    rundir="$OMC_BED_OUT/$run"
    mkdir -p "$rundir"
    printf 'HOST_OUT=%q\nBED_SCRIPT=%q\nKEEP_PATHS="%s"\n' "$OMC_BED_OUT" "$BED_SCRIPT" "${keep# }" > "$rundir/guest.conf"
    OMC_BED=qemu-rxe
    write_guest_env "$rundir/guest.env"
    : > "$rundir/output"

    echo "rdma bed: $OMC_BED"
    say "booting kernel $KVER under QEMU ($OMC_BED_ACCEL), timeout ${OMC_BED_TIMEOUT}s, log $rundir/console.log"
    local t0=$SECONDS qrc=0
    # stdin from /dev/null: CI has none, and -nographic fails on a closed stdin.
    timeout -k 10 "$OMC_BED_TIMEOUT" qemu-system-x86_64 \
        -accel "$OMC_BED_ACCEL" -cpu max -smp 2 -m 2048 \
        -nographic -no-reboot -nic none \
        -kernel "$KROOT/boot/vmlinuz-$KVER" -initrd "$INITRD" \
        -append "console=ttyS0 panic=-1 omc.run=$run" \
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
        -virtfs "local,path=$OMC_BED_OUT,mount_tag=omcout,security_model=none,multidevs=remap" \
        < /dev/null > "$rundir/console.log" 2>&1 &
    local qpid=$!
    trap 'kill '"$qpid"' 2>/dev/null || true' EXIT
    # Stream the command's output (written by the guest into the shared folder) live.
    tail -n +1 -f --pid="$qpid" "$rundir/output" &
    local tpid=$!
    wait "$qpid" || qrc=$?
    wait "$tpid" 2>/dev/null || true
    trap - EXIT
    say "guest ran for $((SECONDS - t0)) s"

    local rc
    if [[ -s $rundir/status ]]; then
        rc=$(cat "$rundir/status")
        [[ -n ${OMC_BED_KEEP:-} || $rc != 0 ]] || rm -rf "$rundir"
        [[ $rc == 0 ]] || say "command exited with $rc (guest files kept in $rundir)"
        return "$rc"
    fi
    # No status: the guest died or hung. Before the command started, that is a bed that
    # could not be brought up (skip); after, it is the command's failure.
    if [[ $qrc == 124 || $qrc == 137 ]]; then
        say "QEMU killed after ${OMC_BED_TIMEOUT}s (OMC_BED_TIMEOUT)"
    else
        say "guest stopped without an exit status (QEMU exit $qrc)"
    fi
    say "last lines of $rundir/console.log:"
    tail -n 40 "$rundir/console.log" >&2
    if [[ -e $rundir/started ]]; then
        [[ $qrc == 124 || $qrc == 137 ]] && return 124
        return 1
    fi
    [[ -s $rundir/bed-error ]] && say "$(cat "$rundir/bed-error")"
    return "$EXIT_SKIP"
}

# Inside the guest, chrooted into the host root: set up rxe, run the command, leave the
# exit status in the run folder (QEMU's own exit status cannot carry it).
guest_main() {
    local rundir=$1
    # shellcheck disable=SC1091
    . "$rundir/guest.env"
    exec > "$rundir/output" 2>&1
    if ! setup_rxe; then
        echo "rxe setup failed inside the guest" > "$rundir/bed-error"
        ip addr >&2 || true
        rdma link >&2 || true
        exit "$EXIT_SKIP"
    fi
    cd "$BED_CWD" || { echo "cannot enter $BED_CWD in the guest" > "$rundir/bed-error"; exit 1; }
    OMC_BED=qemu-rxe
    touch "$rundir/started"
    local rc=0
    run_command || rc=$?
    echo "$rc" > "$rundir/status.tmp"
    mv "$rundir/status.tmp" "$rundir/status"
    sync
    exit "$rc"
}

# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

main() {
    local bed=auto
    if [[ ${1:-} == --guest ]]; then guest_main "$2"; fi
    while [[ $# -gt 0 ]]; do
        case $1 in
            --bed) bed=${2:-}; shift 2 ;;
            --bed=*) bed=${1#--bed=}; shift ;;
            --) shift; break ;;
            -h|--help) usage ;;
            -*) say "unknown option $1"; usage ;;
            *) break ;;
        esac
    done
    [[ $# -gt 0 ]] || usage
    CMD="$*"
    : "${OMC_BED_OUT:=$REPO_ROOT/build}"
    mkdir -p "$OMC_BED_OUT"
    OMC_BED_OUT=$(cd "$OMC_BED_OUT" && pwd -P)
    OMC_RDMA_GID_INDEX=""
    OMC_BED=""
    export OMC_BED_OUT OMC_RDMA_IP   # the guest gets exported OMC_* only

    # The verbs userspace is needed by every bed (and to detect hardware at all).
    ensure_pkgs "${BASE_PKGS[@]}" || skip "cannot install ${BASE_PKGS[*]}"

    local rc=0
    case $bed in
        hardware) bed_hardware || rc=$?
                  [[ $rc != "$EXIT_SKIP" || -n ${OMC_BED:-} ]] || skip "no RDMA device with an ACTIVE port" ;;
        host-rxe) bed_host_rxe || rc=$?
                  [[ $rc != "$EXIT_SKIP" || -n ${OMC_BED:-} ]] || skip "rdma_rxe cannot be loaded in this kernel ($(uname -r)) or setup failed" ;;
        qemu-rxe) bed_qemu_rxe || rc=$? ;;
        auto)
            if find_hardware_device >/dev/null; then
                bed_hardware || rc=$?
            elif host_rxe_possible; then
                bed_host_rxe || rc=$?
            else
                say "no RDMA device and no rdma_rxe in kernel $(uname -r): using QEMU"
                bed_qemu_rxe || rc=$?
            fi ;;
        *) say "unknown bed '$bed'"; usage ;;
    esac
    exit "$rc"
}

main "$@"
