#!/usr/bin/env bash
# Install the Debian packages omniconn's build, tests and demo need - only the missing ones, and
# say which. Safe to run again; does nothing when everything is there.
set -euo pipefail

# what each package is for:
#   build-essential     gcc, make            libzmq3-dev        the ZMQ side channel
#   clang               libFuzzer targets    libclang-rt-14-dev sanitizer and fuzzer runtimes for clang
#   libibverbs-dev      verbs headers        ibverbs-providers  rdma_rxe user-space provider
#   rdma-core iproute2  rdma link add        ibverbs-utils      ibv_devinfo
#   perftest            ib_write_bw baseline  gnuplot-nox       the bench plot
#   ucx-utils iperf3    the peers in make bench-peers (ucx_perftest, iperf3)
#   qemu-system-x86 busybox-static cpio kmod   the Soft-RoCE test bed (tests/rdma/bed.sh)
#   python3-pytest python3-msgpack   the Python package's tests, its vLLM-Omni metadata/objects
#   python3-numpy python3-torch      zero-copy array and tensor views (optional for users)
#   pkg-config cmake                 tests/install: building against an installed copy
#   redis-server redis-tools         the store connector's tests and bench (a real Redis and Redis Cluster)
#   musl-tools                       musl-gcc: the static (embedded) build in tests/compile
PKGS=(build-essential clang libclang-rt-14-dev libzmq3-dev libibverbs-dev ibverbs-providers ibverbs-utils
      rdma-core iproute2 perftest gnuplot-nox ucx-utils iperf3 qemu-system-x86 busybox-static cpio kmod
      python3-pytest python3-msgpack python3-numpy python3-torch pkg-config cmake musl-tools redis-server redis-tools)
[ "${OMC_DEPS_MINIMAL:-0}" = 1 ] && PKGS=(build-essential libzmq3-dev libibverbs-dev)   # the demo: verbs headers, loaded at run time

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]}" >&2
    echo "install-deps: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# another apt may hold the lock (unattended upgrades): wait for it instead of failing
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
