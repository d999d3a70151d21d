/* bench_tcp.c - the remote connector (ZMQ side channel + TCP data plane) against plain sockets and
   bare libzmq, side by side in one run, sender and receiver in two processes on loopback.

   usage: bench_tcp [out.json]          (make bench-tcp writes bench/results/tcp.json)
   env:   BENCH_TCP_QUICK=1             a fast smoke run (fewer iterations; figures are rough)
          BENCH_TCP_SIZES=4096,65536    only these payload sizes (bytes, comma-separated, <= 186 MiB)
          BENCH_ROUNDS=1                fewer rounds (1..3; make bench-peers alternates single rounds
                                        with the other tools and takes medians itself)

   Method. A child process (forked before anything else exists) is the server side: an omniconn
   sender connector, a plain TCP server thread and a libzmq REP server thread. The parent is the
   receiver side and measures.
     omniconn_gbps: the sender has put the payload once, with enough fan-out readers for every
       iteration; each iteration is one omc_conn_get with the metadata and its release, as a
       default receiver does it: a request on the cached channel's data connection, the bytes
       read straight into a buffer of the receiver's pool, the receipt, the trailer the sender
       writes after recording the read. A payload of at most the sender's inline threshold
       (16 KiB) came inside the metadata: the get copies it from there and sends one CLAIM.
     omniconn_noinline_gbps: the same from a second sender that inlines nothing (the request
       and the payload on the data connection at every size).
     omniconn_side_channel_gbps: the same non-inline payload fetched by a receiver created with
       pull_on_side_channel (PULL through libzmq on the side channel, as before data-connection
       requests): the figure to compare the requests with, in the same run.
     omniconn_metaless_gbps: a get without metadata (QUERY on the side channel, then the request).
     raw_tcp_gbps: one persistent TCP connection (TCP_NODELAY, like ours); each iteration the
       receiver sends an 8-byte request and reads the payload into one reused, faulted-in buffer;
       the server writes it from one faulted-in buffer. The plain-socket cost of a pull.
     query_rtt: omc_tcp_query (QUERY -> QUERY_REPLY for a key that exists) against a bare REQ/REP
       round trip carrying the same bytes (the QUERY frame out, a QUERY_REPLY-sized frame back).
   Every figure is per iteration (clock_gettime around one get / one request); the ways being
   compared take turns in blocks of a tenth of a round, so they all see the same load on this
   shared machine; a row's throughput is size / median iteration time; each figure is the median
   of 3 rounds. GB/s are 1e9 bytes per second. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include <zmq.h>      /* the bare-libzmq baseline calls libzmq itself (-lzmq) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)
#define ROUNDS 3
#define MAX_SIZE (186 * MiB)

#define MAX_SIZES 8
static uint64_t sizes[MAX_SIZES] = { 4 * KiB, 1 * MiB, 16 * MiB, 186 * MiB };
static size_t nsizes = 4;
static int quick, nr = ROUNDS;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static double percentile(double* v, int n, double p) {
    int i;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* the median of the nr rounds' figures */
static double med(const double* a) {
    double v[ROUNDS];
    int i;
    for (i = 0; i < nr; i++) v[i] = a[i];
    return percentile(v, nr, 0.5);
}

static int iterations_for(uint64_t size) {
    int n = size <= 4 * KiB ? 2000 : size <= 1 * MiB ? 300 : size <= 16 * MiB ? 40 : 6;
    return quick ? (n / 10 > 2 ? n / 10 : 2) : n;
}

/* ---- control messages between the two processes: u32 length + bytes -------------------------- */

static int io_all(int fd, void* p, size_t n, int writing) {
    size_t done = 0;
    while (done < n) {
        ssize_t k = writing ? send(fd, (char*)p + done, n - done, MSG_NOSIGNAL) : recv(fd, (char*)p + done, n - done, 0);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        done += (size_t)k;
    }
    return 0;
}

static int ctl_send(int fd, const void* p, uint32_t n) { return io_all(fd, &n, 4, 1) || (n && io_all(fd, (void*)p, n, 1)) ? -1 : 0; }

static void* ctl_recv(int fd, uint32_t* n) {
    char* p;
    if (io_all(fd, n, 4, 0) || *n > (64u << 20)) return NULL;
    p = (char*)malloc(*n + 1);
    if (!p || (*n && io_all(fd, p, *n, 0))) { free(p); return NULL; }
    p[*n] = '\0';
    return p;
}

/* ---- the server process ---------------------------------------------------------------------- */

static uint8_t* server_buf;

static int listen_any(uint16_t* port) {
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, 4) != 0) return -1;
    getsockname(fd, (struct sockaddr*)&a, &al);
    *port = ntohs(a.sin_port);
    return fd;
}

/* plain TCP: per request (u64 size) write that many bytes */
static void* raw_tcp_server(void* arg) {
    int lfd = (int)(intptr_t)arg, one = 1;
    int fd = accept(lfd, NULL, NULL);
    uint64_t size;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    while (io_all(fd, &size, 8, 0) == 0 && size <= MAX_SIZE)
        if (io_all(fd, server_buf, (size_t)size, 1)) break;
    close(fd);
    close(lfd);
    return NULL;
}

/* bare libzmq REQ/REP: answer every request with a reply the size of a QUERY_REPLY */
static void* raw_zmq_server(void* arg) {
    void* rep = arg;
    uint8_t buf[OMC__WIRE_MAX], reply[OMC__WIRE_HEADER + 24];
    memset(reply, 0x5A, sizeof(reply));
    for (;;) {
        int n = zmq_recv(rep, buf, sizeof(buf), 0);
        if (n < 0 || (n == 4 && memcmp(buf, "quit", 4) == 0)) break;
        zmq_send(rep, reply, sizeof(reply), 0);
    }
    return NULL;
}

static int server_main(int ctl) {
    omc_tcp_desc d;
    omc_conn *s = NULL, *s2 = NULL;
    uint16_t oport = 0, tport = 0;
    void *zctx, *rep;
    char ep[64], msg[128];
    size_t epn = sizeof(ep);
    pthread_t t1, t2;
    int lfd, zero = 0;
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_SENDER;
    d.pool_size = 512 * MiB;
    if (omc_tcp_create(&d, &s) != OMC_OK) return 1;
    d.disable_inline = 1;                         /* the second sender: every payload on the wire */
    if (omc_tcp_create(&d, &s2) != OMC_OK) return 1;
    omc_tcp_endpoint(s, NULL, 0, &oport, NULL);
    server_buf = (uint8_t*)malloc(MAX_SIZE);
    memset(server_buf, 0x33, MAX_SIZE);          /* faulted in, like the pool bytes a put wrote */
    lfd = listen_any(&tport);
    pthread_create(&t1, NULL, raw_tcp_server, (void*)(intptr_t)lfd);
    zctx = zmq_ctx_new();
    rep = zmq_socket(zctx, ZMQ_REP);
    zmq_setsockopt(rep, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_bind(rep, "tcp://127.0.0.1:*");
    zmq_getsockopt(rep, ZMQ_LAST_ENDPOINT, ep, &epn);
    pthread_create(&t2, NULL, raw_zmq_server, rep);
    snprintf(msg, sizeof(msg), "%u %u %s", (unsigned)oport, (unsigned)tport, ep);
    ctl_send(ctl, msg, (uint32_t)strlen(msg));
    for (;;) {      /* "put KEY SIZE READERS" / "put2 ..." (no inline) -> metadata; "clean KEY"; "quit" */
        uint32_t n = 0;
        char* cmd = (char*)ctl_recv(ctl, &n);
        char key[64], verb[8];
        unsigned long long size;
        unsigned readers;
        if (!cmd || strcmp(cmd, "quit") == 0) { free(cmd); break; }
        if (sscanf(cmd, "%7s %63s %llu %u", verb, key, &size, &readers) == 4 && (!strcmp(verb, "put") || !strcmp(verb, "put2"))) {
            omc_conn* c = strcmp(verb, "put2") == 0 ? s2 : s;
            omc_buffer b;
            omc_payload p;
            omc_meta m = {0};
            memset(&p, 0, sizeof(p));
            /* zero copy: fill a pool buffer in place (the bytes are faulted in) */
            if (omc_conn_alloc(c, size, omc_deadline_after_ms(5000), &b) != OMC_OK) { ctl_send(ctl, "ERR", 3); free(cmd); continue; }
            memset(b.data, 0x44, (size_t)size);
            p.buffer = &b; p.readers = readers; p.ttl_ms = -1;
            if (omc_conn_put(c, "bench", "bench", key, &p, &m) != OMC_OK) { omc_buffer_release(&b); ctl_send(ctl, "ERR", 3); }
            else ctl_send(ctl, m.data, m.size);
            omc_meta_free(&m);
        } else if (sscanf(cmd, "clean %63s", key) == 1) {
            omc_conn_cleanup(s, "bench", "bench", key);
            omc_conn_cleanup(s2, "bench", "bench", key);
            ctl_send(ctl, "ok", 2);
        }
        free(cmd);
    }
    {   /* stop the REP thread with a last request of its own */
        void* req = zmq_socket(zctx, ZMQ_REQ);
        zmq_setsockopt(req, ZMQ_LINGER, &zero, sizeof(zero));
        zmq_connect(req, ep);
        zmq_send(req, "quit", 4, 0);
        pthread_join(t2, NULL);
        zmq_close(req);
    }
    zmq_close(rep);
    zmq_ctx_term(zctx);
    pthread_join(t1, NULL);
    omc_conn_destroy(s2);
    omc_conn_destroy(s);
    free(server_buf);
    return 0;
}

/* ---- the measuring side ------------------------------------------------------------------------- */

typedef struct row {
    uint64_t size;
    int iterations;
    double omc_gbps[ROUNDS], metaless_gbps[ROUNDS], raw_gbps[ROUNDS], noinline_gbps[ROUNDS], side_gbps[ROUNDS];
} row;

/* One get (timed, in us): with metadata, or without (meta NULL). */
static double omc_once(omc_conn* r, const char* key, const void* meta, uint32_t mn, uint64_t size) {
    omc_buffer b;
    double t0 = now_us(), dt;
    omc_result res = omc_conn_get(r, "bench", "bench", key, meta, meta ? mn : 0, omc_deadline_after_ms(60000), &b);
    dt = now_us() - t0;
    if (res != OMC_OK || b.size != size) { fprintf(stderr, "bench_tcp: get failed: %s\n", omc_result_name(res)); exit(1); }
    omc_buffer_release(&b);
    return dt;
}

/* One plain-socket copy (timed, in us): an 8-byte request, then the payload. */
static double raw_once(int fd, uint8_t* buf, uint64_t size) {
    double t0 = now_us();
    if (io_all(fd, &size, 8, 1) || io_all(fd, buf, (size_t)size, 0)) { fprintf(stderr, "bench_tcp: raw TCP failed\n"); exit(1); }
    return now_us() - t0;
}

/* The metadata of one payload: m from the default sender (inline when small), m2 from the one
   that inlines nothing. */
typedef struct metas { const void* m; uint32_t mn; const void* m2; uint32_t mn2; } metas;

/* One round: the five ways take turns in blocks of iterations (a tenth of the round each), so
   all of them see the same load on this shared machine while each still runs back to back like
   a steady stream; throughput = size / median time. r2 is the receiver that PULLs on the side
   channel. */
static void size_round(omc_conn* r, omc_conn* r2, int fd, uint8_t* buf, const char* key, const metas* M, uint64_t size, int iters,
                       row* w, int round) {
    double* t[5];
    int block = iters >= 20 ? iters / 10 : 1, done, i, k;
    for (k = 0; k < 5; k++) t[k] = (double*)malloc(sizeof(double) * (size_t)iters);
    for (i = 0; i < 2; i++) {   /* warm up: channels and data connections open */
        omc_once(r, key, M->m, M->mn, size); raw_once(fd, buf, size); omc_once(r, key, NULL, 0, size);
        omc_once(r, key, M->m2, M->mn2, size); omc_once(r2, key, M->m2, M->mn2, size);
    }
    for (done = 0; done < iters; done += block) {
        int n = omc__min(block, iters - done);
        for (i = 0; i < n; i++) t[0][done + i] = omc_once(r, key, M->m, M->mn, size);
        for (i = 0; i < n; i++) t[1][done + i] = raw_once(fd, buf, size);
        for (i = 0; i < n; i++) t[2][done + i] = omc_once(r, key, NULL, 0, size);
        for (i = 0; i < n; i++) t[3][done + i] = omc_once(r, key, M->m2, M->mn2, size);
        for (i = 0; i < n; i++) t[4][done + i] = omc_once(r2, key, M->m2, M->mn2, size);
    }
    /* bytes per us / 1e3 = GB/s */
    w->omc_gbps[round] = (double)size / (percentile(t[0], iters, 0.5) * 1e3);
    w->raw_gbps[round] = (double)size / (percentile(t[1], iters, 0.5) * 1e3);
    w->metaless_gbps[round] = (double)size / (percentile(t[2], iters, 0.5) * 1e3);
    w->noinline_gbps[round] = (double)size / (percentile(t[3], iters, 0.5) * 1e3);
    w->side_gbps[round] = (double)size / (percentile(t[4], iters, 0.5) * 1e3);
    for (k = 0; k < 5; k++) free(t[k]);
}

static void rtt_round(omc_conn* r, void* req, int iters, double* omc_p50, double* zmq_p50, double* omc_p99, double* zmq_p99, uint32_t* qbytes) {
    double* a = (double*)malloc(sizeof(double) * (size_t)iters);
    double* b = (double*)malloc(sizeof(double) * (size_t)iters);
    uint8_t q[OMC__WIRE_MAX], rep[OMC__WIRE_MAX];
    uint32_t qlen = 0;
    omc__wire m;
    char qkey[OMC_KEY_MAX];
    uint32_t kl = 0;
    int i;
    /* the bytes of the very QUERY omc_tcp_query sends; the two take turns iteration by iteration */
    omc_qualify_key("bench", "bench", "rtt", qkey, &kl);
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_QUERY; m.xfer = 1; m.incarnation = 1; m.seq = 1; m.key = qkey; m.key_len = kl;
    omc__wire_encode(&m, q, sizeof(q), &qlen);
    *qbytes = qlen;
    for (i = -20; i < iters; i++) {
        omc_tcp_found f;
        double t0 = now_us();
        if (omc_tcp_query(r, "s", "bench", "bench", "rtt", omc_deadline_after_ms(10000), &f) != OMC_OK) { fprintf(stderr, "bench_tcp: query failed\n"); exit(1); }
        if (i >= 0) a[i] = now_us() - t0;
        t0 = now_us();
        zmq_send(req, q, qlen, 0);
        zmq_recv(req, rep, sizeof(rep), 0);
        if (i >= 0) b[i] = now_us() - t0;
    }
    *omc_p50 = percentile(a, iters, 0.5);
    *omc_p99 = percentile(a, iters, 0.99);
    *zmq_p50 = percentile(b, iters, 0.5);
    *zmq_p99 = percentile(b, iters, 0.99);
    free(a);
    free(b);
}

static uint8_t* put_remote(int ctl, const char* verb, const char* key, uint64_t size, uint32_t readers, uint32_t* n) {
    char cmd[128];
    uint8_t* m;
    snprintf(cmd, sizeof(cmd), "%s %s %llu %u", verb, key, (unsigned long long)size, readers);
    ctl_send(ctl, cmd, (uint32_t)strlen(cmd));
    m = (uint8_t*)ctl_recv(ctl, n);
    if (!m || *n < 8) { fprintf(stderr, "bench_tcp: remote put failed\n"); exit(1); }
    return m;
}

static void clean_remote(int ctl, const char* key) {
    char cmd[96];
    uint32_t n = 0;
    snprintf(cmd, sizeof(cmd), "clean %s", key);
    ctl_send(ctl, cmd, (uint32_t)strlen(cmd));
    free(ctl_recv(ctl, &n));
}

static void cpu_name(char* out, size_t n) {
    FILE* f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(out, n, "unknown");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "model name", 10) == 0) {
            char* c = strchr(line, ':');
            if (c) { c += 2; c[strcspn(c, "\n")] = '\0'; snprintf(out, n, "%s", c); }
            break;
        }
    if (f) fclose(f);
}

int main(int argc, char** argv) {
    const char* out_path = argc > 1 ? argv[1] : NULL;
    int sv[2], tfd, one = 1, zero = 0;
    pid_t pid;
    uint32_t n = 0, qbytes = 0;
    char* hello;
    unsigned oport, tport;
    char zep[64], cpu[128];
    omc_tcp_desc d;
    omc_conn *r = NULL, *r2 = NULL;
    uint8_t* buf;
    row rows[MAX_SIZES];
    double rtt_o[ROUNDS], rtt_z[ROUNDS], rtt_o99[ROUNDS], rtt_z99[ROUNDS];
    void *zctx, *req;
    struct sockaddr_in a;
    size_t i;
    int round;
    double load0[3] = {0, 0, 0}, load1[3] = {0, 0, 0};
    quick = getenv("BENCH_TCP_QUICK") != NULL;
    if (getenv("BENCH_ROUNDS") && atoi(getenv("BENCH_ROUNDS")) >= 1 && atoi(getenv("BENCH_ROUNDS")) <= ROUNDS) nr = atoi(getenv("BENCH_ROUNDS"));
    if (getenv("BENCH_TCP_SIZES")) {       /* a subset or other sizes, up to MAX_SIZE each */
        const char* p = getenv("BENCH_TCP_SIZES");
        nsizes = 0;
        while (*p && nsizes < MAX_SIZES) {
            char* end;
            uint64_t v = strtoull(p, &end, 10);
            if (end == p) break;
            if (v && v <= MAX_SIZE) sizes[nsizes++] = v;
            p = *end ? end + 1 : end;
        }
        if (!nsizes) { fprintf(stderr, "bench_tcp: BENCH_TCP_SIZES: no size in 1..%llu\n", (unsigned long long)MAX_SIZE); return 2; }
    }
    getloadavg(load0, 3);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    pid = fork();        /* before any thread or ZMQ context exists in this process */
    if (pid == 0) { close(sv[0]); _exit(server_main(sv[1])); }
    close(sv[1]);
    hello = (char*)ctl_recv(sv[0], &n);
    if (!hello || sscanf(hello, "%u %u %63s", &oport, &tport, zep) != 3 || !oport) { fprintf(stderr, "bench_tcp: server did not start\n"); return 1; }
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_RECEIVER;
    d.pool_size = 512 * MiB;
    if (omc_tcp_create(&d, &r) != OMC_OK || omc_tcp_add_sender(r, "s", "127.0.0.1", (uint16_t)oport) != OMC_OK) return 1;
    d.pull_on_side_channel = 1;
    if (omc_tcp_create(&d, &r2) != OMC_OK) return 1;
    tfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)tport);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(tfd, (struct sockaddr*)&a, sizeof(a)) != 0) return 1;
    setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    buf = (uint8_t*)malloc(MAX_SIZE);
    memset(buf, 0, MAX_SIZE);
    zctx = zmq_ctx_new();
    req = zmq_socket(zctx, ZMQ_REQ);
    zmq_setsockopt(req, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_connect(req, zep);

    for (i = 0; i < nsizes; i++) {
        uint8_t *meta, *meta2;
        uint32_t n2 = 0;
        metas M;
        char key[32];
        int iters = iterations_for(sizes[i]);
        rows[i].size = sizes[i];
        rows[i].iterations = iters;
        snprintf(key, sizeof(key), "p%zu", i);
        meta = put_remote(sv[0], "put", key, sizes[i], (uint32_t)(nr * 2 * (iters + 2) + 4), &n);
        meta2 = put_remote(sv[0], "put2", key, sizes[i], (uint32_t)(nr * 2 * (iters + 2) + 4), &n2);
        M.m = meta; M.mn = n; M.m2 = meta2; M.mn2 = n2;
        for (round = 0; round < nr; round++) size_round(r, r2, tfd, buf, key, &M, sizes[i], iters, &rows[i], round);
        clean_remote(sv[0], key);
        free(meta);
        free(meta2);
        fprintf(stderr, "bench_tcp: %llu B: omniconn %.3f GB/s (not inline %.3f, side-channel PULL %.3f), metadata-less %.3f GB/s, raw TCP %.3f GB/s\n",
                (unsigned long long)sizes[i], med(rows[i].omc_gbps), med(rows[i].noinline_gbps), med(rows[i].side_gbps),
                med(rows[i].metaless_gbps), med(rows[i].raw_gbps));
    }
    free(put_remote(sv[0], "put", "rtt", 64, 1, &n));
    for (round = 0; round < nr; round++)
        rtt_round(r, req, quick ? 200 : 2000, &rtt_o[round], &rtt_z[round], &rtt_o99[round], &rtt_z99[round], &qbytes);
    getloadavg(load1, 3);

    {
        FILE* f = out_path ? fopen(out_path, "w") : stdout;
        double min_ratio = 1e9, o50 = med(rtt_o), z50 = med(rtt_z);
        int met_tp;
        if (!f) { perror(out_path); return 1; }
        cpu_name(cpu, sizeof(cpu));
        fprintf(f, "{\n  \"benchmark\": \"tcp\",\n  \"omniconn_version\": \"%s\",\n", omc_version_string());
        fprintf(f, "  \"machine\": {\"cpu\": \"%s\", \"cores\": %ld, \"load_average_start\": %.2f, \"load_average_end\": %.2f, "
                   "\"note\": \"shared with other jobs; loopback\"},\n", cpu, sysconf(_SC_NPROCESSORS_ONLN), load0[0], load1[0]);
        fprintf(f, "  \"method\": \"two processes on loopback. omniconn_gbps: the sender put the payload once (fan-out readers for "
                   "every iteration); each iteration is one get with its metadata and a release, as a default receiver does it: a request "
                   "on the cached channel's TCP data connection, bytes read straight into the receiver's pool buffer, receipt, completion on "
                   "the trailer; a payload of at most 16 KiB came inside the metadata and the get sends one CLAIM instead. "
                   "omniconn_noinline_gbps: the same from a sender that inlines nothing. omniconn_side_channel_gbps: that payload pulled "
                   "by a receiver with pull_on_side_channel (PULL through libzmq, as before data-connection requests). "
                   "omniconn_metaless_gbps: a get without metadata (QUERY on the side channel, then the request). "
                   "raw_tcp_gbps: one persistent TCP connection with TCP_NODELAY; per iteration an 8-byte request, then the payload "
                   "written from and read into faulted-in buffers. query_rtt: omc_tcp_query of an existing key vs a bare libzmq "
                   "REQ/REP round trip of the same bytes (the QUERY frame out, a QUERY_REPLY-sized frame back). The ways compared "
                   "take turns in blocks of a tenth of a round (same load for all, each still back to back); per-iteration times; throughput = size / median time; "
                   "each figure is the median of %d rounds. GB/s = 1e9 B/s.\",\n", nr);
        fprintf(f, "  \"quick\": %s,\n  \"rows\": [\n", quick ? "true" : "false");
        for (i = 0; i < nsizes; i++) {
            double o = med(rows[i].omc_gbps);
            double ml = med(rows[i].metaless_gbps);
            double t = med(rows[i].raw_gbps);
            if (rows[i].size >= MiB && o / t < min_ratio) min_ratio = o / t;
            double ni = med(rows[i].noinline_gbps), sc = med(rows[i].side_gbps);
            fprintf(f, "    {\"size_bytes\": %llu, \"omniconn_gbps\": %.4f, \"omniconn_metaless_gbps\": %.4f, \"raw_tcp_gbps\": %.4f, "
                       "\"omniconn_vs_raw_tcp\": %.3f, \"omniconn_get_us_p50\": %.2f, \"raw_tcp_us_p50\": %.2f, "
                       "\"omniconn_inline\": %s, \"omniconn_noinline_gbps\": %.4f, \"omniconn_noinline_get_us_p50\": %.2f, "
                       "\"omniconn_side_channel_gbps\": %.4f, \"omniconn_side_channel_get_us_p50\": %.2f, \"iterations\": %d},\n",
                    (unsigned long long)rows[i].size, o, ml, t, o / t, (double)rows[i].size / (o * 1e3), (double)rows[i].size / (t * 1e3),
                    rows[i].size <= 16 * KiB ? "true" : "false", ni, (double)rows[i].size / (ni * 1e3), sc, (double)rows[i].size / (sc * 1e3),
                    rows[i].iterations);
        }
        fprintf(f, "    {\"case\": \"query_rtt\", \"size_bytes\": %u, \"omniconn_us_p50\": %.2f, \"raw_zmq_us_p50\": %.2f, "
                   "\"omniconn_us_p99\": %.2f, \"raw_zmq_us_p99\": %.2f, \"omniconn_vs_raw_zmq\": %.3f, \"iterations\": %d}\n  ],\n",
                qbytes, o50, z50, med(rtt_o99), med(rtt_z99), o50 / z50,
                quick ? 200 : 2000);
        met_tp = min_ratio >= 0.8;
        fprintf(f, "  \"targets\": {\n");
        fprintf(f, "    \"omniconn_ge_0_8x_raw_tcp_from_1MiB\": {\"min_ratio\": %.3f, \"limit\": 0.8, \"met\": %s},\n", min_ratio, met_tp ? "true" : "false");
        fprintf(f, "    \"query_rtt_le_1_2x_raw_zmq\": {\"ratio\": %.3f, \"limit\": 1.2, \"met\": %s}\n", o50 / z50, o50 / z50 <= 1.2 ? "true" : "false");
        fprintf(f, "  }\n}\n");
        if (out_path) fclose(f);
    }
    close(tfd);                 /* the raw server thread ends on EOF */
    ctl_send(sv[0], "quit", 4);
    waitpid(pid, NULL, 0);
    zmq_close(req);
    zmq_ctx_term(zctx);
    omc_conn_destroy(r2);
    omc_conn_destroy(r);
    free(buf);
    free(hello);
    return 0;
}
