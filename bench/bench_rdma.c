/* bench_rdma.c - omniconn's RDMA throughput, measured the way perftest's ib_write_bw measures.

   Not a test: tests/rdma/bench.sh runs it next to ib_write_bw on the same device in the same
   boot of the RDMA bed and writes the ratio to bench/results/rdma.json.

     bench_rdma connector SIZE COUNT DEPTH   the receiver's get of a payload already put (one put
                                             with COUNT + DEPTH readers), DEPTH gets in flight
                                             from DEPTH threads, each over its own cached channel
     bench_rdma engine SIZE COUNT DEPTH      the engine's write path alone: COUNT RDMA WRITEs of
                                             SIZE into one exposed destination, DEPTH in flight

   Both print one line "bench <mode> size=<bytes> count=<n> depth=<d> seconds=<s> mbps=<MiB/s>"
   (MiB/s, as perftest's "MB/sec"). The other process of each pair is this binary re-executed.
   Environment (set by tests/rdma/bed.sh): OMC_RDMA_DEVICE, OMC_RDMA_IP. OMC_BENCH_PROTECTION =
   windows | regions | pool overrides the engine's default protection (to see what it costs);
   OMC_BENCH_WORKERS sets the sender's push threads (default 2).
   Build: make bench-rdma (or cc -O2 -I. bench/bench_rdma.c -lzmq -ldl -lpthread) */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"

#include <sys/socket.h>
#include <sys/wait.h>

#define MIB ((uint64_t)1 << 20)

static const char* ip(void) { const char* s = getenv("OMC_RDMA_IP"); return s && s[0] ? s : "10.99.0.1"; }

static omc_hooks hooks(void) {
    omc_hooks h;
    memset(&h, 0, sizeof(h));
    if (getenv("OMC_BENCH_VERBOSE")) { h.log_fn = omc_log_stderr; h.max_level = OMC_LOG_INFO; }
    else h.log_fn = omc_log_stderr;     /* errors and warnings only */
    return h;
}

static omc_rdma_desc engine_desc(void) {
    omc_rdma_desc d;
    const char* prot = getenv("OMC_BENCH_PROTECTION");     /* windows | regions | pool; unset: default */
    memset(&d, 0, sizeof(d));
    d.devices = getenv("OMC_RDMA_DEVICE");
    d.local_addr = ip();
    d.hooks = hooks();
    if (prot && strcmp(prot, "windows") == 0) d.protection = OMC_RDMA_PROTECT_WINDOWS;
    if (prot && strcmp(prot, "regions") == 0) d.protection = OMC_RDMA_PROTECT_REGIONS;
    if (prot && strcmp(prot, "pool") == 0) d.protection = OMC_RDMA_PROTECT_POOL;
    return d;
}

static int die(const char* what, omc_result r) {
    fprintf(stderr, "bench_rdma: %s: %s\n", what, omc_result_name(r));
    return 1;
}

/* ---- a tiny side channel between the two processes: length-prefixed messages ------------------ */

static int xfer(int fd, void* p, size_t n, int out) {
    size_t d = 0;
    while (d < n) {
        ssize_t k = out ? write(fd, (char*)p + d, n - d) : read(fd, (char*)p + d, n - d);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        d += (size_t)k;
    }
    return 0;
}
static int put_msg(int fd, const void* p, uint32_t n) { return xfer(fd, &n, 4, 1) || xfer(fd, (void*)p, n, 1); }
static long get_msg(int fd, void* p, uint32_t cap) {
    uint32_t n;
    if (xfer(fd, &n, 4, 0) || n > cap || xfer(fd, p, n, 0)) return -1;
    return (long)n;
}

static pid_t spawn(char** argv, int fd) {
    char fds[16];
    pid_t pid;
    snprintf(fds, sizeof(fds), "%d", fd);
    pid = fork();
    if (pid == 0) {
        char* args[8];
        int i;
        args[0] = (char*)"/proc/self/exe";
        for (i = 1; i < 5; i++) args[i] = argv[i];
        args[5] = (char*)"--peer";
        args[6] = fds;
        args[7] = NULL;
        execv("/proc/self/exe", args);
        _exit(101);
    }
    return pid;
}

/* ---- connector mode ---------------------------------------------------------------------------- */

static omc_conn* connector(omc_role role, uint64_t pool) {
    omc_rdma_connector_desc d;
    omc_conn* c = NULL;
    omc_result r;
    memset(&d, 0, sizeof(d));
    d.net.role = role;
    d.net.host = ip();
    d.net.pool_size = pool;
    d.net.hooks = hooks();
    d.net.workers = getenv("OMC_BENCH_WORKERS") ? (uint32_t)atoi(getenv("OMC_BENCH_WORKERS")) : 0;   /* sender push threads */
    d.rdma = engine_desc();
    d.require_rdma = 1;                 /* a TCP number here would be meaningless */
    r = omc_rdma_connector_create(&d, &c);
    if (r != OMC_OK) { die("omc_rdma_connector_create", r); return NULL; }
    return c;
}

/* the sender: one put with count + depth readers, then wait until the receiver is done */
static int connector_sender(uint64_t size, uint32_t readers, int fd) {
    omc_conn* c = connector(OMC_ROLE_SENDER, size + 16 * MIB);
    omc_buffer b;
    omc_payload p;
    omc_meta m;
    char done[8];
    omc_result r;
    memset(&m, 0, sizeof(m));
    if (!c) return 1;
    r = omc_conn_alloc(c, size, omc_deadline_after_ms(10000), &b);
    if (r != OMC_OK) return die("omc_conn_alloc", r);
    memset(b.data, 0x3C, size);
    memset(&p, 0, sizeof(p));
    p.buffer = &b;
    p.readers = readers;
    p.ttl_ms = -1;
    r = omc_conn_put(c, "bench", "bench", "payload", &p, &m);
    if (r != OMC_OK) return die("omc_conn_put", r);
    put_msg(fd, m.data, m.size);
    get_msg(fd, done, sizeof(done));    /* the receiver has finished (or died) */
    omc_meta_free(&m);
    omc_conn_destroy(c);
    return 0;
}

typedef struct worker {
    omc_conn* c;
    const uint8_t* meta;
    uint32_t meta_len;
    uint32_t gets;
    int failed;
    pthread_barrier_t* start;
} worker;

static void* get_loop(void* arg) {
    worker* w = (worker*)arg;
    omc_buffer b;
    uint32_t i;
    omc_result r = omc_conn_get(w->c, "bench", "bench", "payload", w->meta, w->meta_len, omc_deadline_after_ms(60000), &b);
    if (r == OMC_OK) omc_buffer_release(&b);        /* warm-up: the channel and its RDMA connection */
    else { w->failed = 1; die("warm-up get", r); }
    pthread_barrier_wait(w->start);
    for (i = 0; i < w->gets && !w->failed; i++) {
        r = omc_conn_get(w->c, "bench", "bench", "payload", w->meta, w->meta_len, omc_deadline_after_ms(60000), &b);
        if (r != OMC_OK) { w->failed = 1; die("get", r); break; }
        omc_buffer_release(&b);
    }
    pthread_barrier_wait(w->start);
    return NULL;
}

static int connector_bench(char** argv, uint64_t size, uint32_t count, uint32_t depth) {
    int sv[2], failed = 0;
    uint8_t meta[4096];
    long ml;
    omc_conn* c;
    pthread_t th[64];
    worker w[64];
    pthread_barrier_t start;
    omc_rdma_connector_info info;
    omc_time_ns t0, t1;
    pid_t pid;
    uint32_t i;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    pid = spawn(argv, sv[1]);
    close(sv[1]);
    ml = get_msg(sv[0], meta, sizeof(meta));
    c = ml > 0 ? connector(OMC_ROLE_RECEIVER, depth * (size + MIB) + 16 * MIB) : NULL;
    if (!c) { kill(pid, SIGKILL); waitpid(pid, NULL, 0); return 1; }
    pthread_barrier_init(&start, NULL, depth + 1);
    for (i = 0; i < depth; i++) {
        w[i].c = c; w[i].meta = meta; w[i].meta_len = (uint32_t)ml; w[i].failed = 0; w[i].start = &start;
        w[i].gets = count / depth + (i < count % depth);
        pthread_create(&th[i], NULL, get_loop, &w[i]);
    }
    pthread_barrier_wait(&start);       /* every thread has its channel: the clock starts */
    t0 = omc_now_ns();
    pthread_barrier_wait(&start);
    t1 = omc_now_ns();
    for (i = 0; i < depth; i++) { pthread_join(th[i], NULL); failed |= w[i].failed; }
    omc_rdma_connector_query(c, &info);
    put_msg(sv[0], "done", 4);
    waitpid(pid, NULL, 0);
    if (failed) return 1;
    if (info.rdma_channels < depth) { fprintf(stderr, "bench_rdma: only %llu of %u channels used RDMA\n", (unsigned long long)info.rdma_channels, depth); return 1; }
    printf("bench connector size=%llu count=%u depth=%u seconds=%.3f mbps=%.2f protection=%s\n", (unsigned long long)size, count,
           depth, (double)(t1 - t0) / 1e9, (double)size * count / ((double)(t1 - t0) / 1e9) / (double)MIB,
           info.engine.protection == OMC_RDMA_PROTECT_WINDOWS ? "windows" : info.engine.protection == OMC_RDMA_PROTECT_REGIONS ? "regions" : "pool");
    omc_conn_destroy(c);
    pthread_barrier_destroy(&start);
    return 0;
}

/* ---- engine mode --------------------------------------------------------------------------------- */

typedef struct side { omc_rdma* e; omc_pool* pool; omc_rdma_conn* c; } side;

static omc_result side_open(side* s, uint64_t pool) {
    omc_rdma_desc d = engine_desc();
    omc_pool_desc pd;
    omc_result r;
    memset(s, 0, sizeof(*s));
    r = omc_rdma_create(&d, &s->e);
    if (r != OMC_OK) return r;
    memset(&pd, 0, sizeof(pd));
    pd.size = pool;
    pd.thread_safe = 1;
    pd.region = omc_rdma_region_hooks(s->e);
    return omc_pool_create(&pd, &s->pool);
}

static void side_close(side* s) {
    if (s->c) omc_rdma_conn_destroy(s->c);
    if (s->pool) omc_pool_destroy(s->pool);
    if (s->e) omc_rdma_destroy(s->e);
}

/* the receiver: accept, expose one destination, wait until the sender is done */
static int engine_receiver(uint64_t size, int fd) {
    side s;
    uint8_t rec[OMC_RDMA_RECORD_MAX], desc[OMC_RDMA_TARGET_MAX];
    size_t rn = 0, dn = 0;
    long n;
    omc_buffer b;
    omc_rdma_window* w = NULL;
    omc_result r = side_open(&s, size + MIB);
    if (r != OMC_OK) return die("receiver engine", r);
    n = get_msg(fd, rec, sizeof(rec));
    if (n <= 0) return 1;
    r = omc_rdma_conn_accept(s.e, rec, (size_t)n, &s.c);
    if (r == OMC_OK) r = omc_rdma_conn_record(s.c, rec, sizeof(rec), &rn);
    if (r != OMC_OK) return die("accept", r);
    put_msg(fd, rec, (uint32_t)rn);
    r = omc_pool_alloc_buffer(s.pool, size, &b);
    if (r == OMC_OK) r = omc_rdma_expose(s.c, b.data, size, omc_deadline_after_ms(10000), &w, desc, sizeof(desc), &dn);
    if (r != OMC_OK) return die("expose", r);
    put_msg(fd, desc, (uint32_t)dn);
    get_msg(fd, rec, sizeof(rec));
    omc_rdma_revoke(w, omc_deadline_after_ms(10000));
    omc_buffer_release(&b);
    side_close(&s);
    return 0;
}

static int engine_bench(char** argv, uint64_t size, uint32_t count, uint32_t depth) {
    side s;
    int sv[2];
    uint8_t rec[OMC_RDMA_RECORD_MAX], desc[OMC_RDMA_TARGET_MAX];
    size_t rn = 0;
    long n, dn;
    omc_buffer b;
    omc_rdma_sge sge;
    omc_rdma_op* ops[64];
    omc_time_ns t0, t1;
    omc_result r;
    pid_t pid;
    uint32_t posted = 0, done = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    pid = spawn(argv, sv[1]);
    close(sv[1]);
    r = side_open(&s, size + MIB);
    if (r == OMC_OK) r = omc_rdma_conn_create(s.e, &s.c);
    if (r == OMC_OK) r = omc_rdma_conn_record(s.c, rec, sizeof(rec), &rn);
    if (r != OMC_OK || put_msg(sv[0], rec, (uint32_t)rn) || (n = get_msg(sv[0], rec, sizeof(rec))) <= 0 ||
        (r = omc_rdma_conn_connect(s.c, rec, (size_t)n)) != OMC_OK || (dn = get_msg(sv[0], desc, sizeof(desc))) <= 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return die("connect", r);
    }
    r = omc_pool_alloc_buffer(s.pool, size, &b);
    if (r != OMC_OK) return die("source", r);
    memset(b.data, 0x5A, size);
    sge.addr = b.data;
    sge.length = size;
    t0 = omc_now_ns();
    while (done < count && r == OMC_OK) {   /* keep depth writes in flight, as ib_write_bw does */
        while (posted < count && posted - done < depth && r == OMC_OK)
            r = omc_rdma_write_start(s.c, &sge, 1, desc, (size_t)dn, omc_deadline_after_ms(60000), &ops[posted++ % depth]);
        if (r == OMC_OK) r = omc_rdma_op_wait(ops[done++ % depth], omc_deadline_after_ms(60000));
    }
    t1 = omc_now_ns();
    while (done < posted) omc_rdma_op_wait(ops[done++ % depth], omc_deadline_after_ms(60000));
    put_msg(sv[0], "done", 4);
    waitpid(pid, NULL, 0);
    omc_buffer_release(&b);
    side_close(&s);
    if (r != OMC_OK) return die("write", r);
    printf("bench engine size=%llu count=%u depth=%u seconds=%.3f mbps=%.2f\n", (unsigned long long)size, count, depth,
           (double)(t1 - t0) / 1e9, (double)size * count / ((double)(t1 - t0) / 1e9) / (double)MIB);
    return 0;
}

int main(int argc, char** argv) {
    uint64_t size;
    uint32_t count, depth;
    if (argc < 5 || (strcmp(argv[1], "connector") && strcmp(argv[1], "engine"))) {
        fprintf(stderr, "usage: bench_rdma connector|engine SIZE COUNT DEPTH   (inside tests/rdma/bed.sh; see tests/rdma/bench.sh)\n"
                        "  defaults used by make bench-rdma: sizes 65536 1048576 16777216, depth 4\n");
        return 2;
    }
    size = strtoull(argv[2], NULL, 10);
    count = (uint32_t)strtoul(argv[3], NULL, 10);
    depth = (uint32_t)strtoul(argv[4], NULL, 10);
    if (!size || !count || !depth || depth > 64) return 2;
    if (argc > 6 && strcmp(argv[5], "--peer") == 0) {     /* the other process of the pair */
        int fd = atoi(argv[6]);
        return strcmp(argv[1], "connector") == 0 ? connector_sender(size, count + depth, fd) : engine_receiver(size, fd);
    }
    return strcmp(argv[1], "connector") == 0 ? connector_bench(argv, size, count, depth) : engine_bench(argv, size, count, depth);
}
