# omniconn - build, test and benchmark.
#   make test        everything (installs missing Debian packages), ends with "N passed, M failed"
#   make demo        the two-process shared-memory demo (and the other transports where available)
#   make check       unit + functional tests of the default build only (fast inner loop)
#   make bench-alloc / bench-shm / bench-tcp / bench-rdma / bench-xfer   benchmarks -> bench/results/*.json
#   make bench-rails  1 rail vs 2 rails and a rail flap across two QEMU guests -> bench/results/rails.json
#   make bench-peers  omniconn beside ucx_perftest, iperf3 and memcpy -> bench/results/peers.json
#   make bench-scaling  cost per transfer vs size and transfers in flight -> bench/results/scaling.json, docs/scaling.png
#   make bench-peer-cost  memory, threads, fds and throughput per connected peer -> bench/results/peer_cost.json, docs/scaling.md
#   make fuzz        build the libFuzzer targets and run each for FUZZ_SECONDS
# Variables: BUILD (output dir), SAN (asan | tsan), CC, EXTRA_CFLAGS.

CC      ?= cc
BUILD   ?= build
SAN     ?=
OPT     ?= -O2
WARN    := -Wall -Wextra -Werror -pedantic -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers
CFLAGS  := -std=c99 $(OPT) -g $(WARN) -I. -Itests $(EXTRA_CFLAGS)
LDLIBS  := -ldl -lpthread -lm
# libzmq is loaded at run time; only programs that call libzmq themselves link it
$(BUILD)/test_tcp $(BUILD)/test_hostile $(BUILD)/bench_tcp: LDLIBS += -lzmq

ifeq ($(SAN),asan)
  CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(SAN),tsan)
  CFLAGS  += -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=thread
endif

HEADERS     := omniconn.h omniconn_shm.h omniconn_rdma.h omniconn_pipeline.h omniconn_store.h tests/omc_test.h tests/contract.h
TEST_SRCS   := $(wildcard tests/test_*.c)
TEST_BINS   := $(patsubst tests/%.c,$(BUILD)/%,$(TEST_SRCS))
EXAMPLE_SRCS:= $(wildcard examples/*.c)
EXAMPLE_BINS:= $(patsubst examples/%.c,$(BUILD)/%,$(EXAMPLE_SRCS))
BENCH_SRCS  := $(wildcard bench/*.c)
BENCH_BINS  := $(patsubst bench/%.c,$(BUILD)/%,$(BENCH_SRCS))

.PHONY: all deps build-cc build-deps test test-under-load check demo store-demo tests examples benches cli clean fuzz bench-alloc bench-shm bench-tcp bench-rdma bench-peers bench-scaling bench-peer-cost bench-rails bench-store bench-xfer

all: tests examples benches cli

deps:
	@bash scripts/install-deps.sh

# What compiling the programs needs, checked first (instead of hundreds of errors): a C compiler
# and the verbs headers omniconn_rdma.h compiles against (libzmq needs no header: loaded at run time).
# (the shared library needs only the compiler: without the verbs headers it is built without the
# RDMA engine, and says so)
build-cc:
	@command -v $(CC) >/dev/null 2>&1 || { echo "omniconn: no C compiler ($(CC)). Run: bash scripts/install-deps.sh (as root; Debian: apt-get install build-essential)" >&2; exit 1; }
build-deps: build-cc
	@printf '#include <infiniband/verbs.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 || { echo "omniconn: infiniband/verbs.h is missing (omniconn_rdma.h compiles against it). Run: bash scripts/install-deps.sh (as root; Debian: apt-get install libibverbs-dev)" >&2; exit 1; }

tests: $(TEST_BINS)
examples: $(EXAMPLE_BINS)
benches: $(BENCH_BINS)
cli: $(BUILD)/omniconn

$(BUILD)/%: tests/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)
$(BUILD)/%: examples/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)
$(BUILD)/%: bench/%.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -O2 -o $@ $< $(LDFLAGS) $(LDLIBS)
# the command-line tool (omniconn bench / doctor); tests that compile in a program's source depend on it
$(BUILD)/omniconn: tools/omniconn_cli.c $(HEADERS) | $(BUILD) build-deps
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) $(LDLIBS)
$(BUILD)/test_pipeline3: examples/pipeline3.c
$(BUILD)/test_cli: tools/omniconn_cli.c
$(BUILD):
	@mkdir -p $(BUILD)

# The whole suite: compile matrix, tests (plain, ASan+UBSan, TSan), fuzz smoke, RDMA bed.
test: deps
	@bash tests/run.sh

# The whole suite with two busy loops beside it (LOAD_LOOPS=N for another count): a shared CI host
test-under-load: deps
	@bash scripts/test-under-load.sh

# The quick loop: build and run the unit and functional tests once.
check: tests
	@bash tests/run.sh --quick

# the README's demo: scripts/demo.sh installs only what the demo needs, then runs examples/demo.sh
demo:
	@bash scripts/demo.sh

# The store connector against servers it starts itself (redis-server, a 3-master cluster).
store-demo: deps $(BUILD)/test_store
	$(BUILD)/test_store store_contract_suite_in_threads store_a_get_overtakes store_requests_in_flight store_cluster_routes

fuzz:
	@bash tests/fuzz/run.sh

bench-alloc: deps $(BUILD)/bench_alloc
	$(BUILD)/bench_alloc bench/results/alloc.json

bench-shm: deps $(BUILD)/bench_shm
	$(BUILD)/bench_shm bench/results/shm.json

bench-store: deps $(BUILD)/bench_store
	$(BUILD)/bench_store bench/results/store.json

bench-tcp: deps $(BUILD)/bench_tcp
	$(BUILD)/bench_tcp bench/results/tcp.json

# UCX's ucx_perftest (shm and tcp), iperf3, memcpy, the allocator and omniconn in alternating rounds on loopback (3-6 min)
#   -> bench/results/peers.json and the side-by-side table in docs/performance.md
bench-peers: deps $(BUILD)/bench_shm $(BUILD)/bench_tcp $(BUILD)/bench_alloc $(BUILD)/omniconn
	/usr/bin/python3 bench/peers.py --build $(BUILD)

# omniconn bench per transport at 1/4/16/64 transfers in flight (about a minute)
bench-scaling: $(BUILD)/omniconn
	/usr/bin/python3 bench/scaling.py --build $(BUILD)

# what one connected peer costs (TCP, SHM): one sender with 1/16/64/256 receiver processes, one receiver
# with 1/16 senders (well under a minute) -> bench/results/peer_cost.json, docs/peer_cost.svg, docs/scaling.md
bench-peer-cost: $(BUILD)/bench_peer_cost
	/usr/bin/python3 bench/peer_cost.py --build $(BUILD)

# ib_write_bw and omniconn's RDMA data plane in one boot of the RDMA bed -> bench/results/rdma.json
bench-rdma: deps $(BUILD)/bench_rdma
	BUILD=$(BUILD) bash tests/rdma/bench.sh

# omniconn bench across the two-guest bed over RDMA: perftest, 1 rail, 2 rails, a rail1 flap
# (one boot, about 3 minutes) -> bench/results/rails.json
bench-rails: deps
	BUILD=$(BUILD) bash tests/rdma/rails.sh bench

# the transfer engine's batched READ/WRITE (256 x 32 KiB, 1 x 8 MiB): against iperf3 on loopback, then
# against ib_read_bw / ib_write_bw in one boot of the RDMA bed -> bench/results/xfer.json
bench-xfer: deps $(BUILD)/bench_xfer
	BUILD=$(BUILD) bash tests/rdma/xfer-bench.sh tcp
	BUILD=$(BUILD) bash tests/rdma/xfer-bench.sh rdma

clean:
	rm -rf build

# ---- the shared library, install, Python --------------------------------------------------------
#   make lib            $(BUILD)/libomniconn.so (soname libomniconn.so.MAJOR, only omc_* exported);
#                       without infiniband/verbs.h (libibverbs-dev) it is built without the RDMA
#                       engine, and says so
#   make install        headers, library, omniconn.pc, CMake package under $(DESTDIR)$(PREFIX)
#                       (PREFIX=/usr/local), the Python package where Debian's python3 looks for
#                       that prefix (sysconfig's purelib: /usr/local/lib/python3.X/dist-packages),
#                       then ldconfig for a system prefix; make uninstall removes them
#   make bench-python   the Python connector against the C path -> bench/results/python.json
.PHONY: lib install uninstall bench-python
LIB_VERSION := $(shell sed -n 's/^\#define OMNICONN_VERSION_STRING "\(.*\)"/\1/p' omniconn.h)
LIB_MAJOR   := $(firstword $(subst ., ,$(LIB_VERSION)))
LIB_SONAME  := libomniconn.so.$(LIB_MAJOR)
# libzmq and libibverbs are loaded at run time: the library links only these
LIB_LDLIBS  ?= -ldl -lpthread -lm
PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
PYTHON      ?= /usr/bin/python3
# the purelib directory that $(PYTHON) searches for PREFIX (Debian: /usr/local -> posix_local,
# /usr -> deb_system; any other prefix: posix_prefix, which needs PYTHONPATH)
PYTHONDIR   ?= $(shell $(PYTHON) -c 'import sys, sysconfig as s; p = sys.argv[1].rstrip("/") or "/"; n = s.get_scheme_names();     k = "posix_local" if p == "/usr/local" and "posix_local" in n else "deb_system" if p == "/usr" and "deb_system" in n     else "posix_prefix"; b = "/usr" if k == "posix_local" else p; print(s.get_path("purelib", k, vars={"base": b, "platbase": b}))'     $(PREFIX) 2>/dev/null || echo $(PREFIX)/lib/python3/dist-packages)
# the verbs plane needs infiniband/verbs.h at build time (libibverbs itself is loaded at run time)
LIB_HAS_VERBS := $(shell printf '\043include <infiniband/verbs.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1)
LIB_CFLAGS  := $(if $(LIB_HAS_VERBS),,-DOMNICONN_NO_RDMA)

lib: $(BUILD)/libomniconn.so
$(BUILD)/libomniconn.so.$(LIB_VERSION): lib/libomniconn.c lib/libomniconn.map $(HEADERS) | $(BUILD)
	$(if $(LIB_HAS_VERBS),,@echo "libomniconn: infiniband/verbs.h not found: building without the RDMA engine (install libibverbs-dev for it)")
	$(CC) $(CFLAGS) $(LIB_CFLAGS) -fPIC -shared -Wl,-soname,$(LIB_SONAME) -Wl,--version-script=lib/libomniconn.map \
	    -Wl,--no-undefined -o $@ $< $(LDFLAGS) $(LIB_LDLIBS)
$(BUILD)/libomniconn.so: $(BUILD)/libomniconn.so.$(LIB_VERSION)
	ln -sf libomniconn.so.$(LIB_VERSION) $(BUILD)/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $@

install: lib
	PREFIX=$(PREFIX) LIBDIR=$(LIBDIR) INCLUDEDIR=$(INCLUDEDIR) PYTHONDIR=$(PYTHONDIR) DESTDIR=$(DESTDIR) \
	    BUILD=$(BUILD) LIB_VERSION=$(LIB_VERSION) bash cmake/install.sh install
uninstall:
	PREFIX=$(PREFIX) LIBDIR=$(LIBDIR) INCLUDEDIR=$(INCLUDEDIR) PYTHONDIR=$(PYTHONDIR) DESTDIR=$(DESTDIR) \
	    BUILD=$(BUILD) LIB_VERSION=$(LIB_VERSION) bash cmake/install.sh uninstall

bench-python: deps lib
	OMNICONN_LIBRARY=$(abspath $(BUILD))/libomniconn.so /usr/bin/python3 bench/bench_python.py bench/results/python.json

# ---- checked first (see build-cc): what the library needs to compile ----------------------------
$(BUILD)/libomniconn.so.$(LIB_VERSION): | build-cc
