#!/usr/bin/env bash
# RDMA test bed: run one command where a real kernel RDMA stack is available.
#
#   tests/rdma/bed.sh [--bed auto|hardware|host-rxe|qemu-rxe] [--] CMD [ARGS...]
#   tests/rdma/bed.sh --hosts 2 [--] CMD [ARGS...]
#
# CMD and ARGS are joined with spaces into one shell command line, run as `bash -c LINE`
# inside the bed, in the current directory. The bed is the first available of:
#   hardware  a real RDMA device (`ibv_devices`) with an ACTIVE port
#   host-rxe  Soft-RoCE (rdma_rxe) loaded into this host's kernel, on a veth pair
#   qemu-rxe  Debian's own kernel booted in QEMU (TCG), Soft-RoCE inside the guest
# --hosts 2: two QEMU guests (own kernels) joined by two rails and a control link; CMD runs
# in both at once (OMC_BED_HOST=a|b). See tests/rdma/README.md for its variables.
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
#   OMC_BED_MEM      MiB per guest of the two-guest bed (default 1536)
#   OMC_BED_PEER_GRACE  seconds guest b may run on after guest a ended (default 60)
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
# virtio_net is for the two-guest bed's links; sch_tbf and sch_netem let a test make one rail
# slower or lossy (`tc qdisc add dev rail1 root tbf rate 16mbit burst 32kbit latency 400ms`).
GUEST_MODULES=(virtio_pci 9pnet 9pnet_virtio netfs fscache 9p crc32_generic
               ib_core ib_uverbs ip6_udp_tunnel udp_tunnel rdma_rxe veth virtio_net
               sch_tbf sch_netem)

EXIT_SKIP=77

say()  { echo "rdma bed: $*" >&2; }
skip() { say "no bed: $*"; exit "$EXIT_SKIP"; }

usage() {
    sed -n '2,16s/^# \{0,1\}//p' "$BED_SCRIPT" >&2
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

# Packages, kernel and initramfs (cached), the shared folder and the host folders the guest
# must see. Sets KVER, KROOT, INITRD, KEEP. Returns 77 (no bed) or 2 (usage) on failure.
qemu_prepare() {
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
    # the tmpfs folders, are mounted back into the guest at the same path (KEEP).
    local p k
    KEEP=""
    for p in "$REPO_ROOT" "$(pwd -P)"; do
        case "$p/" in
            /tmp/*|/run/*|/dev/shm/*)
                [[ $p != *[[:space:]]* ]] || { say "a folder under /tmp, /run or /dev/shm must not contain spaces: $p"; return 2; }
                for k in $KEEP; do [[ $p/ == "$k"/* ]] && continue 2; done
                KEEP="$KEEP $p" ;;
            /proc/*|/sys/*|/dev/*)
                say "the folder $p is not visible in the guest (it has its own /proc, /sys, /dev); run from elsewhere"
                return 2 ;;
        esac
    done
    KEEP=${KEEP# }
}

# guest_files DIR RUNREL [EXTRA-ENV-LINE...]: the guest's config and environment in DIR.
guest_files() {
    local dir=$1 line
    shift
    mkdir -p "$dir"
    printf 'HOST_OUT=%q\nBED_SCRIPT=%q\nKEEP_PATHS="%s"\n' "$OMC_BED_OUT" "$BED_SCRIPT" "$KEEP" > "$dir/guest.conf"
    write_guest_env "$dir/guest.env"
    for line in "$@"; do echo "$line" >> "$dir/guest.env"; done
    : > "$dir/output"
}

# launch_guest RUNREL SMP MEM [QEMU-ARGS...]: start QEMU in the background; QPID = its pid.
# stdin from /dev/null: CI has none, and -nographic fails on a closed stdin.
launch_guest() {
    local run=$1 smp=$2 mem=$3
    shift 3
    timeout -k 10 "$OMC_BED_TIMEOUT" qemu-system-x86_64 \
        -accel "$OMC_BED_ACCEL" -cpu max -smp "$smp" -m "$mem" \
        -nographic -no-reboot -nic none \
        -kernel "$KROOT/boot/vmlinuz-$KVER" -initrd "$INITRD" \
        -append "console=ttyS0 panic=-1 omc.run=$run" \
        -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
        -virtfs "local,path=$OMC_BED_OUT,mount_tag=omcout,security_model=none,multidevs=remap" \
        "$@" < /dev/null > "$OMC_BED_OUT/$run/console.log" 2>&1 &
    QPID=$!
}

# guest_result DIR QEMU-EXIT NAME: the command's exit status from a guest's run folder, or
# 77 (the bed never came up), 124 (timeout after the command started), 1 (guest died).
guest_result() {
    local dir=$1 qrc=$2 name=$3
    if [[ -s $dir/status ]]; then
        cat "$dir/status"
        return 0
    fi
    if [[ $qrc == 124 || $qrc == 137 ]]; then
        say "$name: QEMU killed after ${OMC_BED_TIMEOUT}s (OMC_BED_TIMEOUT) or stopped by the bed"
    else
        say "$name: guest stopped without an exit status (QEMU exit $qrc)"
    fi
    say "$name: last lines of $dir/console.log:"
    tail -n 40 "$dir/console.log" >&2
    if [[ -e $dir/started ]]; then
        [[ $qrc == 124 || $qrc == 137 ]] && { echo 124; return 0; }
        echo 1
        return 0
    fi
    [[ -s $dir/bed-error ]] && say "$name: $(cat "$dir/bed-error")"
    echo "$EXIT_SKIP"
}

bed_qemu_rxe() {
    local prc=0
    qemu_prepare || prc=$?
    [[ $prc == 0 ]] || return "$prc"
    local run rundir
    run="rdma-bed/run-$(date +%Y%m%d-%H%M%S)-$$"
    rundir="$OMC_BED_OUT/$run"
    OMC_BED=qemu-rxe
    guest_files "$rundir"

    echo "rdma bed: $OMC_BED"
    say "booting kernel $KVER under QEMU ($OMC_BED_ACCEL), timeout ${OMC_BED_TIMEOUT}s, log $rundir/console.log"
    local t0=$SECONDS qrc=0
    launch_guest "$run" 2 2048
    local qpid=$QPID
    trap 'kill '"$qpid"' 2>/dev/null || true' EXIT
    # Stream the command's output (written by the guest into the shared folder) live.
    tail -n +1 -f --pid="$qpid" "$rundir/output" &
    local tpid=$!
    wait "$qpid" || qrc=$?
    wait "$tpid" 2>/dev/null || true
    trap - EXIT
    say "guest ran for $((SECONDS - t0)) s"

    local rc
    rc=$(guest_result "$rundir" "$qrc" guest)
    [[ $rc == 0 && -z ${OMC_BED_KEEP:-} ]] && rm -rf "$rundir"
    [[ $rc == 0 || $rc == "$EXIT_SKIP" ]] || say "command exited with $rc (guest files kept in $rundir)"
    return "$rc"
}

# ---------------------------------------------------------------------------------------
# Bed: qemu-rxe, two guests (--hosts 2)
# ---------------------------------------------------------------------------------------
#
# Two guests, a and b, each with its own kernel, -smp 1. Three virtual links join them, each
# a pair of QEMU UDP socket netdevs on 127.0.0.1 (no host bridge, no other address): rail0 and
# rail1 carry one Soft-RoCE device each (rxe0, rxe1) on 10.99.0.0/24 and 10.99.1.0/24, and ctl
# (10.98.0.0/24) is left to the tests' own control messages, so taking a rail down never
# cuts them. Host a is .1 on every link, host b .2. The command runs in both guests at once;
# OMC_BED_HOST says which one it is in.

TWO_LINKS=(rail0 rail1 ctl)
link_mac() { printf '52:54:00:99:%02x:%02x' "$1" "$2"; }   # link index, host 1|2

# Six free UDP ports on 127.0.0.1 (two per link), as one base: base + 2*link + host-1.
pick_udp_base() {
    local base i used
    used=$(ss -Hunl 2>/dev/null | awk '{ print $4 }')
    for _ in $(seq 1 50); do
        base=$((20000 + (RANDOM % 2000) * 16))
        for i in 0 1 2 3 4 5; do
            grep -qE "[:.]$((base + i))\$" <<< "$used" && continue 2
        done
        echo "$base"
        return 0
    done
    return 1
}

bed_qemu_two() {
    local prc=0
    qemu_prepare || prc=$?
    [[ $prc == 0 ]] || return "$prc"
    local base
    base=$(pick_udp_base) || { say "no free UDP ports on 127.0.0.1"; return "$EXIT_SKIP"; }
    local run rundir
    run="rdma-bed/run-$(date +%Y%m%d-%H%M%S)-$$"
    rundir="$OMC_BED_OUT/$run"
    mkdir -p "$rundir/sync"
    OMC_BED=qemu-rxe-2host
    echo "rdma bed: $OMC_BED"
    say "booting two guests of kernel $KVER under QEMU ($OMC_BED_ACCEL, -smp 1 each), timeout ${OMC_BED_TIMEOUT}s, logs $rundir/{a,b}/console.log"
    local t0=$SECONDS h hi l args pids=() tails=()
    for h in a b; do
        hi=$([[ $h == a ]] && echo 1 || echo 2)
        guest_files "$rundir/$h" "OMC_BED_HOST=$h" "BED_HOST_INDEX=$hi" "BED_SYNC=$rundir/sync"
        args=()
        for l in 0 1 2; do
            args+=(-netdev "socket,id=n$l,udp=127.0.0.1:$((base + 2 * l + 2 - hi)),localaddr=127.0.0.1:$((base + 2 * l + hi - 1))"
                   -device "virtio-net-pci,netdev=n$l,mac=$(link_mac "$l" "$hi")")
        done
        launch_guest "$run/$h" 1 "${OMC_BED_MEM:-1536}" "${args[@]}"
        pids+=("$QPID")
    done
    trap 'kill '"${pids[*]}"' 2>/dev/null || true' EXIT
    tail -n +1 -f --pid="${pids[0]}" "$rundir/a/output" &
    tails+=($!)
    # b's lines are marked so the two streams can be told apart
    tail -n +1 -f --pid="${pids[1]}" "$rundir/b/output" | sed -u 's/^/[b] /' &
    tails+=($!)
    local qa=0 qb=0 i
    wait "${pids[0]}" || qa=$?
    say "guest a ran for $((SECONDS - t0)) s"
    # b's command should end with a's; give it a grace period, then stop it
    for i in $(seq 1 "${OMC_BED_PEER_GRACE:-60}"); do
        kill -0 "${pids[1]}" 2>/dev/null || break
        sleep 1
    done
    if kill -0 "${pids[1]}" 2>/dev/null; then
        say "guest b still running ${OMC_BED_PEER_GRACE:-60} s after a ended: stopping it"
        kill "${pids[1]}" 2>/dev/null || true
    fi
    wait "${pids[1]}" || qb=$?
    wait "${tails[@]}" 2>/dev/null || true
    trap - EXIT
    say "both guests ran for $((SECONDS - t0)) s"

    local ra rb rc
    ra=$(guest_result "$rundir/a" "$qa" "guest a")
    rb=$(guest_result "$rundir/b" "$qb" "guest b")
    rc=$ra
    [[ $rc == 0 ]] && rc=$rb
    [[ $rc == 0 && -z ${OMC_BED_KEEP:-} ]] && rm -rf "$rundir"
    [[ $rc == 0 || $rc == "$EXIT_SKIP" ]] || say "command exited with a: $ra, b: $rb (guest files kept in $rundir)"
    return "$rc"
}

# Inside a guest of the two-guest bed: name the links by MAC, address them, put rxe on each
# rail, and meet the other guest (files in the shared sync folder) before the command runs.
netdev_by_mac() {
    local f
    for f in /sys/class/net/*/address; do
        [[ $(cat "$f") == "$1" ]] && { basename "$(dirname "$f")"; return 0; }
    done
    return 1
}

setup_two() {
    local me=$BED_HOST_INDEX peer=$((3 - BED_HOST_INDEX)) l dev name r gi
    ip link set lo up
    for l in 0 1 2; do
        name=${TWO_LINKS[$l]}
        dev=$(netdev_by_mac "$(link_mac "$l" "$me")") || { say "no network device with MAC $(link_mac "$l" "$me")"; return 1; }
        ip link set "$dev" name "$name"
        ip link set "$name" up
    done
    ip addr add "10.98.0.$me/24" dev ctl
    OMC_BED_CTL_IP=10.98.0.$me
    OMC_BED_PEER_CTL_IP=10.98.0.$peer
    OMC_RDMA_DEVICES="" OMC_RDMA_IPS="" OMC_RDMA_PEER_IPS="" OMC_RDMA_GID_INDEXES="" OMC_BED_NETDEVS=""
    OMC_BED_RAIL_NOTE=""
    for r in 0 1; do
        ip addr add "10.99.$r.$me/24" dev "rail$r"
        if ! rdma link add "rxe$r" type rxe netdev "rail$r" 2> "/tmp/rxe$r.err"; then
            OMC_BED_RAIL_NOTE="$OMC_BED_RAIL_NOTE rxe$r: rdma link add failed: $(tr '\n' ' ' < "/tmp/rxe$r.err")"
            continue
        fi
        gi=""
        for _ in $(seq 1 100); do
            if port_active "rxe$r"; then
                gi=$(roce_v2_ipv4_gid_index "rxe$r" "10.99.$r.$me")
                [[ -n $gi ]] && break
            fi
            sleep 0.1
        done
        if [[ -z $gi ]]; then
            OMC_BED_RAIL_NOTE="$OMC_BED_RAIL_NOTE rxe$r: no ACTIVE port with a RoCE v2 GID for 10.99.$r.$me"
            continue
        fi
        OMC_RDMA_DEVICES="$OMC_RDMA_DEVICES rxe$r"
        OMC_RDMA_IPS="$OMC_RDMA_IPS 10.99.$r.$me"
        OMC_RDMA_PEER_IPS="$OMC_RDMA_PEER_IPS 10.99.$r.$peer"
        OMC_RDMA_GID_INDEXES="$OMC_RDMA_GID_INDEXES $gi"
        OMC_BED_NETDEVS="$OMC_BED_NETDEVS rail$r"
    done
    OMC_RDMA_DEVICES=${OMC_RDMA_DEVICES# } OMC_RDMA_IPS=${OMC_RDMA_IPS# }
    OMC_RDMA_PEER_IPS=${OMC_RDMA_PEER_IPS# } OMC_RDMA_GID_INDEXES=${OMC_RDMA_GID_INDEXES# }
    OMC_BED_NETDEVS=${OMC_BED_NETDEVS# } OMC_BED_RAIL_NOTE=${OMC_BED_RAIL_NOTE# }
    OMC_BED_RAILS=$(wc -w <<< "$OMC_RDMA_DEVICES")
    [[ $OMC_BED_RAILS -gt 0 ]] || { say "no rail came up: $OMC_BED_RAIL_NOTE"; return 1; }
    read -r OMC_RDMA_DEVICE _ <<< "$OMC_RDMA_DEVICES"
    read -r OMC_RDMA_IP _ <<< "$OMC_RDMA_IPS"
    read -r OMC_RDMA_PEER_IP _ <<< "$OMC_RDMA_PEER_IPS"
    read -r OMC_RDMA_GID_INDEX _ <<< "$OMC_RDMA_GID_INDEXES"
    OMC_BED_SYNC=$BED_SYNC
    export OMC_BED_HOST OMC_BED_HOSTS=2 OMC_BED_RAILS OMC_BED_RAIL_NOTE OMC_RDMA_DEVICES OMC_RDMA_IPS \
        OMC_RDMA_PEER_IPS OMC_RDMA_GID_INDEXES OMC_BED_NETDEVS OMC_BED_CTL_IP OMC_BED_PEER_CTL_IP \
        OMC_RDMA_PEER_IP OMC_BED_SYNC
    # Meet the other guest: both are set up when both files exist.
    echo "$OMC_BED_RAILS" > "$BED_SYNC/up.$OMC_BED_HOST"
    local other
    other=$([[ $OMC_BED_HOST == a ]] && echo b || echo a)
    for _ in $(seq 1 1200); do
        [[ -e $BED_SYNC/up.$other ]] && return 0
        sleep 0.1
    done
    say "host $other did not come up within 120 s"
    return 1
}

# Inside the guest, chrooted into the host root: set up rxe, run the command, leave the
# exit status in the run folder (QEMU's own exit status cannot carry it).
guest_main() {
    local rundir=$1
    # shellcheck disable=SC1091
    . "$rundir/guest.env"
    exec > "$rundir/output" 2>&1
    if [[ -n ${OMC_BED_HOST:-} ]]; then
        if ! setup_two; then
            echo "link/rxe setup failed inside guest $OMC_BED_HOST" > "$rundir/bed-error"
            ip addr >&2 || true
            rdma link >&2 || true
            exit "$EXIT_SKIP"
        fi
        OMC_BED=qemu-rxe-2host
    else
        if ! setup_rxe; then
            echo "rxe setup failed inside the guest" > "$rundir/bed-error"
            ip addr >&2 || true
            rdma link >&2 || true
            exit "$EXIT_SKIP"
        fi
        OMC_BED=qemu-rxe
    fi
    cd "$BED_CWD" || { echo "cannot enter $BED_CWD in the guest" > "$rundir/bed-error"; exit 1; }
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
    local bed=auto hosts=1
    if [[ ${1:-} == --guest ]]; then guest_main "$2"; fi
    while [[ $# -gt 0 ]]; do
        case $1 in
            --bed) bed=${2:-}; shift 2 ;;
            --hosts) hosts=${2:-}; shift 2 ;;
            --hosts=*) hosts=${1#--hosts=}; shift ;;
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
    if [[ $hosts == 2 ]]; then
        [[ $bed == auto || $bed == qemu-rxe ]] || { say "--hosts 2 is a QEMU bed: --bed $bed does not apply"; usage; }
        bed_qemu_two || rc=$?
        exit "$rc"
    fi
    [[ $hosts == 1 ]] || { say "--hosts takes 1 or 2"; usage; }
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
