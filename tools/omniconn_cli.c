/* omniconn_cli.c - the omniconn command-line tool, built from the headers.

     omniconn bench   throughput and latency of a transport across a size sweep, like perftest's
                      ib_write_bw for any omniconn transport: a producer and a consumer in two
                      processes, a table on stdout, JSON, and a PNG plot (gnuplot)
     omniconn keygen  a CURVE key pair in files: NAME.key (secret, 0600) and NAME.pub (public)
     omniconn doctor  a preflight of what pipelines trip over, each finding with its fix: key files, memlock
                      limit, RDMA devices/ports/GIDs (and the GID omniconn would choose), /dev/shm
                      size and segments left by dead processes, port collisions of a config,
                      libzmq and libibverbs

   Build: make cli      (or, from the repository root, one line:
          cc -std=c99 -O2 -I. tools/omniconn_cli.c -o omniconn -ldl -lpthread -lm; libzmq and
          libibverbs are loaded at run time, as by any omniconn program)
   Run:   omniconn help, omniconn bench -h, omniconn doctor -h. docs/cli.md shows them on real runs. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"
#include "omniconn_rdma.h"
#include "omniconn_pipeline.h"
#if OMC__HAS_ZMQ
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

/* ============================================================================================== */
/* small helpers                                                                                  */
/* ============================================================================================== */

/* "4K", "64k", "1M", "2G", "4096": bytes (binary multiples). 0 on a malformed size. */
static uint64_t parse_size(const char* s) {
    char* end;
    unsigned long long v;
    uint64_t mul = 1;
    if (!s || *s < '0' || *s > '9') return 0;
    v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k') { mul = 1ull << 10; end++; }
    else if (*end == 'M' || *end == 'm') { mul = 1ull << 20; end++; }
    else if (*end == 'G' || *end == 'g') { mul = 1ull << 30; end++; }
    if (*end == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    if (*end != '\0' || v == 0 || v > (1ull << 40) / mul) return 0;
    return (uint64_t)v * mul;
}

/* 4096 -> "4 KiB", 1048576 -> "1 MiB", 1500 -> "1500 B", 25275678720 -> "23.5 GiB" */
static const char* size_text(uint64_t v, char* buf, size_t n) {
    static const char* const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (u < 4 && v >= (1ull << (10 * (u + 1)))) u++;
    if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)v);
    else if (v % (1ull << (10 * u)) == 0) snprintf(buf, n, "%llu %s", (unsigned long long)(v >> (10 * u)), unit[u]);
    else snprintf(buf, n, "%.1f %s", (double)v / (double)(1ull << (10 * u)), unit[u]);
    return buf;
}

static int write_all(int fd, const void* p, size_t n) {
    const char* c = (const char*)p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void* p, size_t n) {
    char* c = (char*)p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return (x > y) - (x < y);
}

/* Is `name` an executable in $PATH? */
static int in_path(const char* name) {
    const char* path = getenv("PATH");
    char dir[4096];
    if (!path) path = "/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len && len < sizeof(dir) - strlen(name) - 2) {
            memcpy(dir, path, len);
            snprintf(dir + len, sizeof(dir) - len, "/%s", name);
            if (access(dir, X_OK) == 0) return 1;
        }
        path += len;
        if (*path == ':') path++;
    }
    return 0;
}

static void json_string(FILE* f, const char* s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* ============================================================================================== */
/* bench                                                                                          */
/* ============================================================================================== */
/*
    Two sides, two processes (two threads for the same-process connector, which cannot span
    processes), a pipe between them as the control plane, the way a pipeline's stages would have
    a queue:

      producer                                      consumer
      omc_conn_alloc (waits for pool space)
      memcpy the payload in, stamp its number
      omc_conn_put (zero copy: the buffer changes hands)
      metadata -> pipe  ---------------------------> omc_conn_get(metadata) -> a view (TCP: the
                                                     bytes are pulled into the consumer's pool)
                                                     check the stamps, omc_buffer_release

    For each size: a few warm-up transfers; the latency phase (one transfer at a time: the
    producer waits for the consumer's ack; latency = put start -> get returned in the other
    process, pipe hop included); the throughput phase (back to back, limited only by pool space:
    GB/s = bytes / (first put start -> last get returned)). Baseline: memcpy of the same size in
    one process, in the same run, reported as a ratio.
*/

#define BENCH_MAX_SIZES 32
#define BENCH_MAX_LAT 10000
#define BENCH_WARMUP 3

enum { MSG_DATA = 1, MSG_LAT = 2, MSG_SYNC = 3, MSG_QUIT = 4, MSG_DATA_ACK = 5 };   /* DATA_ACK: DATA, acked (--inflight) */

typedef struct bench_msg {
    uint32_t kind;
    uint32_t meta_len;
    uint64_t index;             /* the key is "m<index>"; also stamped into the payload */
    uint64_t size;
    int64_t t0;                 /* producer's clock at put start (CLOCK_MONOTONIC: one host) */
    uint32_t readers;           /* gets of this payload (fan-out); 0 = 1 */
    uint32_t pad;
} bench_msg;

/* What the consumer reports back (memory shared by both sides). */
typedef struct bench_shared {
    int64_t last_done;          /* clock when the last get of the throughput phase returned */
    int64_t lat[BENCH_MAX_LAT];
    uint64_t errors;
    char error_text[256];
    int plane_known;            /* rdma: what the consumer's connector says at the end */
    int rdma_enabled;
    uint64_t rdma_channels, tcp_fallbacks;
    char plane[320];
    uint64_t batches, batched_gets, batch_max;     /* --batch: omc_conn_get_batch calls, their items, the largest */
} bench_shared;

typedef struct bench_opts {
    const char* transport;
    uint64_t sizes[BENCH_MAX_SIZES];
    int nsizes;
    long iters;                 /* 0 = per size: about 1 s (16 .. 20000 transfers, 512 MiB at most) */
    const char* json;
    const char* plot;
    int progress;               /* 1 on, 0 off, -1 = when stderr is a terminal */
    const char* host;           /* tcp: the producer's address */
    const char* shm_dir;
    double duration;            /* seconds per size for the throughput phase (0 = 1 s); latency: half */
    uint64_t pool;              /* bytes per pool (0 = four of the largest payloads + 1 MiB, 64 MiB at least) */
    int copy_put;               /* put from the caller's memory (the connector copies) instead of alloc + memcpy + zero-copy put */
    int gbits;                  /* report Gb/s (10^9 bits/s) instead of GB/s (10^9 bytes/s) */
    int force;                  /* reserve more memory than is available */
    int cpu_producer, cpu_consumer; /* -1 = not pinned */
    long inflight;              /* at most this many transfers put and not yet released (0 = as many as the pool holds) */
    long batch;                 /* consumer: up to this many gets per omc_conn_get_batch, on one thread (0 = one get per call) */
    int serve;                  /* two hosts: the producer, waiting for a consumer on port */
    const char* peer;           /* two hosts: the consumer, connecting to this producer */
    unsigned port;              /* two hosts: the control connection's port */
    uint32_t readers;           /* fan-out: gets per payload (0 = 1) */
    int remote;                 /* the consumer is on another host: latency is a round trip measured here */
    const char* devices;        /* rdma: the engine's device list (desc.devices; NULL = $RDMA_DEVICE_NAME or every ACTIVE one) */
    const char* rdma_addr;      /* rdma: the engine's local_addr, one address per rail (NULL = --host) */
    int rails;                  /* rdma: at most this many rails (0 = the engine's default) */
    int gid_index, gid_index_set;   /* rdma: GID override */
    double timeline;            /* seconds per time slice of the throughput phase (0 = no timeline) */
    const char* flap_dev;       /* take this netdev down flap_down s into the throughput phase, up at flap_up */
    double flap_down, flap_up;
} bench_opts;

/* The throughput phase in time slices (--timeline): bytes acknowledged in each slice, and the
   producer's bytes per rail at the end of it (rdma with the multi-rail engine). Kept for the last
   size measured. */
#define BENCH_MAX_SLICES 1200
#define BENCH_RAILS 4
typedef struct bench_timeline {
    int slices, rails;
    double slice_s;
    uint64_t bytes[BENCH_MAX_SLICES];
    uint64_t rail_bytes[BENCH_MAX_SLICES][BENCH_RAILS];     /* cumulative, at the slice's last ack */
    uint64_t rail_start[BENCH_RAILS];                       /* cumulative, when the phase started */
    char rail_name[BENCH_RAILS][64];
    double flap_down_at, flap_up_at;    /* seconds into the phase, -1 = did not happen */
    int flap_down_rc, flap_up_rc;
} bench_timeline;
static bench_timeline bench_tl;

#define BENCH_PORT 18620        /* the control connection of the two-host mode */

/* What the producer tells a consumer on another host when it connects. */
typedef struct bench_hello {
    char magic[16];             /* "omniconn-bench1" */
    char transport[8];          /* "tcp" or "rdma" */
    uint64_t pool;              /* bytes: the consumer's pool */
} bench_hello;

typedef struct bench_row {
    uint64_t size;
    long iters, lat_iters;
    double gbps, memcpy_gbps, msg_rate;
    double min_us, avg_us, p50_us, p99_us, p999_us, max_us;     /* one-way latency, one transfer at a time */
    uint64_t batches, batched_gets, batch_max;     /* --batch, the throughput phase (same host: the consumer's counts) */
} bench_row;

typedef struct bench_side {
    omc_conn* conn;
    int msg_fd, ack_fd;         /* producer: write msgs, read acks; consumer: the other way */
    bench_shared* sh;
    long window;                /* consumer: gets in flight at once (--inflight; 0 or 1 = one at a time) */
    long batch;                 /* consumer: --batch (0 = not batched) */
    long ack_every;             /* consumer: write acks once this many are due (and before it waits); 0 = 1 */
} bench_side;

#define BENCH_MAX_WINDOW 16     /* consumer threads for --inflight: gets in flight at once */
#define BENCH_MAX_BATCH 64      /* --batch: metadata messages fetched by one omc_conn_get_batch */

/* Without --iters, a size's throughput phase stops after about a second (and at least 16
   transfers) and its latency phase after half a second (at least 10): the sweep takes seconds on
   every transport, whatever it costs per transfer. These are the upper bounds. */
#define BENCH_PHASE_NS 1000000000LL     /* --duration's default */
#define BENCH_MIN_ITERS 16
#define BENCH_MIN_LAT 10

static long iters_for(const bench_opts* o, uint64_t size) {
    long n;
    if (o->iters > 0) return o->iters;
    if (o->duration > 0) return 100000000;     /* the clock decides */
    n = (long)(((uint64_t)512 << 20) / size);
    return n < BENCH_MIN_ITERS ? BENCH_MIN_ITERS : n > 20000 ? 20000 : n;
}

static long lat_iters_for(const bench_opts* o, uint64_t size) {
    long n = o->duration > 0 ? BENCH_MAX_LAT : (long)(((uint64_t)128 << 20) / size);
    long cap = iters_for(o, size);
    if (n < BENCH_MIN_LAT) n = BENCH_MIN_LAT;
    if (n > BENCH_MAX_LAT) n = BENCH_MAX_LAT;
    return n < cap ? n : cap;
}

static uint64_t max_size(const bench_opts* o) {
    uint64_t m = 0;
    int i;
    for (i = 0; i < o->nsizes; i++) if (o->sizes[i] > m) m = o->sizes[i];
    return m;
}

/* Both pools hold at least four of the largest payloads (so the producer can run ahead). */
static uint64_t pool_for(const bench_opts* o) {
    uint64_t p = 4 * max_size(o) + (1u << 20);
    if (o->pool) return o->pool;
    return p < (64u << 20) ? (64u << 20) : p;
}

/* The payload's number, at both ends (cheap: it must not be what we measure). */
static void stamp(uint8_t* p, uint64_t size, uint64_t index) {
    memcpy(p, &index, size < 8 ? (size_t)size : 8);
    if (size >= 16) memcpy(p + size - 8, &index, 8);
}

static int stamped(const uint8_t* p, uint64_t size, uint64_t index) {
    uint64_t a = 0, b = index;
    memcpy(&a, p, size < 8 ? (size_t)size : 8);
    if (size < 8) { uint64_t mask = (1ull << (8 * size)) - 1; return a == (index & mask); }
    if (size >= 16) memcpy(&b, p + size - 8, 8);
    return a == index && b == index;
}

/* ---- consumer ------------------------------------------------------------------------------ */

/* The consumer's acks: one byte per released transfer, as the producer counts them, but the
   bytes due are written together, when ack_every of them are due or before the consumer waits
   for more messages. The bench's own pipe traffic is not what it measures: at 4 KiB over SHM a
   write and a read per ack (and the producer waking for each) cost more than the transfer itself.
   The producer's window still means "put and not yet released", seen up to ack_every transfers
   late; the consumer never sits on an ack while it waits, so the window never stalls on one. */
typedef struct acks { int fd; long due, every; } acks;

static int acks_flush(acks* a) {
    char ones[256];
    memset(ones, 1, sizeof(ones));
    while (a->due > 0) {
        size_t n = a->due < (long)sizeof(ones) ? (size_t)a->due : sizeof(ones);
        if (write_all(a->fd, ones, n) != 0) return -1;
        a->due -= (long)n;
    }
    return 0;
}

static int acks_add(acks* a, long n) {
    a->due += n;
    return a->due >= (a->every > 0 ? a->every : 1) ? acks_flush(a) : 0;
}

/* A small buffered reader over the message pipe (one read() gives many messages); before it
   waits for the pipe it writes the acks that are due (out; NULL for the producer's ack reader). */
typedef struct reader { int fd; uint8_t buf[65536]; size_t at, len; acks* out; } reader;

static int reader_get(reader* r, void* out, size_t n) {
    uint8_t* o = (uint8_t*)out;
    while (n) {
        size_t k;
        if (r->at == r->len) {
            ssize_t got;
            if (r->out && acks_flush(r->out) != 0) return -1;
            got = read(r->fd, r->buf, sizeof(r->buf));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) return -1;
            r->at = 0;
            r->len = (size_t)got;
        }
        k = r->len - r->at < n ? r->len - r->at : n;
        memcpy(o, r->buf + r->at, k);
        r->at += k;
        o += k;
        n -= k;
    }
    return 0;
}

/* Is the next whole message already here (in the buffer, or waiting in the pipe: taken without
   blocking)? 1 and its header in *m if so. A message larger than the buffer never is: it goes
   the ordinary way. */
static int reader_has_message(reader* r, bench_msg* m) {
    size_t have = r->len - r->at;
    if (have >= sizeof(*m)) memcpy(m, r->buf + r->at, sizeof(*m));
    if (have < sizeof(*m) || have < sizeof(*m) + m->meta_len) {
        struct pollfd p;
        ssize_t got;
        p.fd = r->fd;
        p.events = POLLIN;
        p.revents = 0;
        if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN)) return 0;
        memmove(r->buf, r->buf + r->at, have);
        r->at = 0;
        r->len = have;
        got = read(r->fd, r->buf + have, sizeof(r->buf) - have);
        if (got <= 0) return 0;         /* EOF or an error: the next blocking read reports it */
        r->len += (size_t)got;
        have += (size_t)got;
        if (have < sizeof(*m)) return 0;
        memcpy(m, r->buf, sizeof(*m));
    }
    return have >= sizeof(*m) + m->meta_len;
}

static void consumer_error(bench_shared* sh, const char* fmt, ...) {
    va_list ap;
    if (sh->errors++ == 0) {
        va_start(ap, fmt);
        vsnprintf(sh->error_text, sizeof(sh->error_text), fmt, ap);
        va_end(ap);
    }
}

/* One payload's gets (readers of them, one after the other), each checked and released; the
   time of the last into sh->last_done for the throughput phase. mu (NULL = one thread) guards sh. */
static omc_result consume_one(bench_side* s, const bench_msg* m, const uint8_t* meta, pthread_mutex_t* mu) {
    char key[32];
    omc_buffer b;
    omc_result r = OMC_OK;
    uint32_t k, readers = m->readers ? m->readers : 1;
    snprintf(key, sizeof(key), "m%llu", (unsigned long long)m->index);
    for (k = 0; k < readers; k++) {     /* fan-out: every reader's get, one after the other */
        uint64_t got;
        int damaged;
        r = omc_conn_get(s->conn, "producer", "consumer", key, meta, m->meta_len, omc_deadline_after_ms(30000), &b);
        if (r != OMC_OK) {
            if (mu) pthread_mutex_lock(mu);
            consumer_error(s->sh, "get %u of payload %llu: %s", k + 1, (unsigned long long)m->index, omc_result_str(r));
            if (mu) pthread_mutex_unlock(mu);
            break;
        }
        got = b.size;
        damaged = got != m->size || !stamped((const uint8_t*)b.data, got, m->index);
        omc_buffer_release(&b);
        if (damaged) {
            if (mu) pthread_mutex_lock(mu);
            consumer_error(s->sh, "payload %llu arrived damaged (%llu bytes)", (unsigned long long)m->index, (unsigned long long)got);
            if (mu) pthread_mutex_unlock(mu);
        }
    }
    if (r == OMC_OK) {
        int64_t now = omc_now_ns();
        if (mu) pthread_mutex_lock(mu);
        if (m->kind == MSG_LAT && m->index < BENCH_MAX_LAT) s->sh->lat[m->index] = now - m->t0;
        if ((m->kind == MSG_DATA || m->kind == MSG_DATA_ACK) && now > s->sh->last_done) s->sh->last_done = now;
        if (mu) pthread_mutex_unlock(mu);
    }
    return r;
}

/* --batch N: the consumer takes up to N metadata messages that have already arrived (at least
   one: it never waits to fill a batch) and fetches them with one omc_conn_get_batch on one
   thread, then checks and releases each, as a stage that drains its queue in batches does. */
typedef struct bench_batch {
    bench_msg msg[BENCH_MAX_BATCH];
    uint8_t* meta[BENCH_MAX_BATCH];
    uint32_t cap[BENCH_MAX_BATCH];      /* bytes allocated at meta[i] */
    int n;
} bench_batch;

/* Room for a message's metadata in slot i. */
static uint8_t* batch_meta(bench_batch* b, int i, uint32_t len) {
    if (len > b->cap[i] || !b->meta[i]) {
        uint32_t cap = len < 4096 ? 4096 : len;
        uint8_t* p = (uint8_t*)realloc(b->meta[i], cap);
        if (!p) return NULL;
        b->meta[i] = p;
        b->cap[i] = cap;
    }
    return b->meta[i];
}

/* The batch's gets (every reader's round of them: fan-out), each checked and released. */
static void consume_batch(bench_side* s, bench_batch* b) {
    omc_batch_item it[BENCH_MAX_BATCH];
    char key[BENCH_MAX_BATCH][32];
    uint32_t k, readers = b->msg[0].readers ? b->msg[0].readers : 1;   /* the same for the batch */
    int i, failed = 0;
    for (k = 0; k < readers; k++) {
        memset(it, 0, sizeof(it[0]) * (size_t)b->n);
        for (i = 0; i < b->n; i++) {
            snprintf(key[i], sizeof(key[i]), "m%llu", (unsigned long long)b->msg[i].index);
            it[i].key = key[i];
            it[i].meta.data = b->meta[i];
            it[i].meta.size = b->msg[i].meta_len;
        }
        (void)omc_conn_get_batch(s->conn, "producer", "consumer", it, (uint32_t)b->n, omc_deadline_after_ms(30000));  /* per item below */
        for (i = 0; i < b->n; i++) {
            uint64_t got;
            if (it[i].result != OMC_OK) {
                consumer_error(s->sh, "get %u of payload %llu (in a batch of %d): %s", k + 1, (unsigned long long)b->msg[i].index, b->n,
                               omc_result_str(it[i].result));
                failed = 1;
                continue;
            }
            got = it[i].buffer.size;
            if (got != b->msg[i].size || !stamped((const uint8_t*)it[i].buffer.data, got, b->msg[i].index)) {
                consumer_error(s->sh, "payload %llu arrived damaged (%llu bytes)", (unsigned long long)b->msg[i].index, (unsigned long long)got);
            }
            omc_buffer_release(&it[i].buffer);
        }
    }
    s->sh->batches += readers;
    s->sh->batched_gets += (uint64_t)b->n * readers;
    if ((uint64_t)b->n > s->sh->batch_max) s->sh->batch_max = (uint64_t)b->n;
    if (!failed) {
        int64_t now = omc_now_ns();
        if (now > s->sh->last_done) s->sh->last_done = now;
    }
}

/* A batch that starts with message m (its metadata still in the pipe): the messages of the same
   kind and fan-out that have already arrived join it, up to --batch; then the gets, and an ack
   per transfer. -1 when the producer has gone. */
static int consumer_batch(bench_side* s, reader* rd, bench_batch* b, const bench_msg* m) {
    bench_msg next;
    b->n = 0;
    do {
        uint8_t* meta;
        if (b->n) (void)reader_get(rd, &next, sizeof(next));    /* whole: reader_has_message said so */
        else next = *m;
        meta = batch_meta(b, b->n, next.meta_len);
        if (!meta || reader_get(rd, meta, next.meta_len) != 0) return -1;
        b->msg[b->n++] = next;
    } while (b->n < s->batch && reader_has_message(rd, &next) && next.kind == m->kind && next.readers == m->readers);
    consume_batch(s, b);
    return m->kind == MSG_DATA_ACK ? acks_add(rd->out, b->n) : 0;
}

/* --inflight N: the consumer keeps up to N gets in flight (threads of one connector, each on a
   channel of its own), as a stage with a window does; acks go back as each get is released. */
typedef struct bench_window {
    bench_side* s;
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    bench_msg msg[BENCH_MAX_WINDOW];
    uint8_t* meta[BENCH_MAX_WINDOW];
    int n, head, count, busy, quit;     /* n: workers, and slots in the ring */
} bench_window;

static void* window_worker(void* arg) {
    bench_window* w = (bench_window*)arg;
    uint8_t* meta = (uint8_t*)malloc(OMC_META_MAX_SIZE);
    for (;;) {
        bench_msg m;
        char ack = 1;
        uint8_t* slot;
        pthread_mutex_lock(&w->mu);
        while (!w->count && !w->quit) pthread_cond_wait(&w->work, &w->mu);
        if (!w->count) { pthread_mutex_unlock(&w->mu); break; }
        m = w->msg[w->head];
        slot = w->meta[w->head];
        w->meta[w->head] = meta;       /* swap buffers: the slot gets this worker's spare */
        meta = slot;
        w->head = (w->head + 1) % w->n;
        w->count--;
        w->busy++;
        pthread_cond_broadcast(&w->idle);  /* a slot is free */
        pthread_mutex_unlock(&w->mu);
        consume_one(w->s, &m, meta, &w->mu);
        if (m.kind == MSG_DATA_ACK) (void)write_all(w->s->ack_fd, &ack, 1);    /* failing: the producer went, the loop sees EOF */
        pthread_mutex_lock(&w->mu);
        w->busy--;
        pthread_cond_broadcast(&w->idle);
        pthread_mutex_unlock(&w->mu);
    }
    free(meta);
    return NULL;
}

static int consumer_loop(bench_side* s) {
    static reader rd;               /* one consumer per process or thread at a time */
    static bench_window win;
    static bench_batch batch;
    static acks out;
    pthread_t th[BENCH_MAX_WINDOW];
    int nth = 0, i;
    uint8_t* meta = (uint8_t*)malloc(OMC_META_MAX_SIZE);
    rd.fd = s->msg_fd;
    rd.at = rd.len = 0;
    rd.out = &out;
    out.fd = s->ack_fd;
    out.due = 0;
    out.every = s->ack_every;
    if (!meta) return 1;
    memset(&win, 0, sizeof(win));
    win.s = s;
    pthread_mutex_init(&win.mu, NULL);
    pthread_cond_init(&win.work, NULL);
    pthread_cond_init(&win.idle, NULL);
    memset(&batch, 0, sizeof(batch));
    if (s->window > 1 && !s->batch) {     /* --batch: one thread, its gets in batches instead */
        long want = s->window < BENCH_MAX_WINDOW ? s->window : BENCH_MAX_WINDOW;
        for (i = 0; i < want; i++) if (!(win.meta[i] = (uint8_t*)malloc(OMC_META_MAX_SIZE))) break;
        win.n = i;                      /* set before any worker runs */
        for (i = 0; i < win.n; i++) {
            if (pthread_create(&th[nth], NULL, window_worker, &win) != 0) break;
            nth++;
        }
        if (!nth) win.n = 0;
    }
    for (;;) {
        bench_msg m;
        char ack = 1;
        if (reader_get(&rd, &m, sizeof(m)) != 0 || m.kind == MSG_QUIT) break;
        if (m.kind == MSG_SYNC) {       /* 2: some gets failed (the text is in sh, or on the consumer's host) */
            pthread_mutex_lock(&win.mu);    /* every get in flight has returned first */
            while (win.count || win.busy) pthread_cond_wait(&win.idle, &win.mu);
            ack = s->sh->errors ? 2 : 1;
            pthread_mutex_unlock(&win.mu);
            if (acks_flush(&out) != 0 || write_all(s->ack_fd, &ack, 1) != 0) break;
            continue;
        }
        if (m.meta_len > OMC_META_MAX_SIZE) break;
        if (s->batch && (m.kind == MSG_DATA || m.kind == MSG_DATA_ACK)) {
            if (consumer_batch(s, &rd, &batch, &m) != 0) break;
            continue;
        }
        if (reader_get(&rd, meta, m.meta_len) != 0) break;
        if (nth && m.kind == MSG_DATA_ACK) {    /* to a worker: up to nth gets in flight */
            int at;
            pthread_mutex_lock(&win.mu);
            while (win.count == win.n) pthread_cond_wait(&win.idle, &win.mu);
            at = (win.head + win.count) % win.n;
            win.msg[at] = m;
            memcpy(win.meta[at], meta, m.meta_len);
            win.count++;
            pthread_cond_signal(&win.work);
            pthread_mutex_unlock(&win.mu);
            continue;
        }
        consume_one(s, &m, meta, nth ? &win.mu : NULL);
        if (m.kind == MSG_DATA_ACK && acks_add(&out, 1) != 0) break;
        if (m.kind == MSG_LAT && (acks_add(&out, 1) != 0 || acks_flush(&out) != 0)) break;  /* one at a time: at once */
    }
    pthread_mutex_lock(&win.mu);
    win.quit = 1;
    pthread_cond_broadcast(&win.work);
    pthread_mutex_unlock(&win.mu);
    for (i = 0; i < nth; i++) pthread_join(th[i], NULL);
    for (i = 0; i < BENCH_MAX_WINDOW; i++) free(win.meta[i]);
    for (i = 0; i < BENCH_MAX_BATCH; i++) free(batch.meta[i]);
    pthread_cond_destroy(&win.work);
    pthread_cond_destroy(&win.idle);
    pthread_mutex_destroy(&win.mu);
    free(meta);
    return 0;
}

/* ---- producer ------------------------------------------------------------------------------ */

typedef struct progress {
    int on, shown;
    omc_time_ns start, last;
    const char* transport;
} progress;

static void progress_tick(progress* p, const char* phase, uint64_t size, long done, long total, uint64_t bytes) {
    omc_time_ns now;
    char sz[32];
    if (!p->on) return;
    now = omc_now_ns();
    if (now - p->start < 300000000 || now - p->last < 100000000) return;     /* only runs that take a while */
    p->last = now;
    p->shown = 1;
    fprintf(stderr, "\r  %s %-9s %-10s %7ld/%-7ld %6.2f GB/s ", p->transport, size_text(size, sz, sizeof(sz)), phase, done, total,
            (double)bytes / (double)(now - p->start));
    fflush(stderr);
}

static void progress_clear(progress* p) {
    if (p->shown) { fprintf(stderr, "\r%72s\r", ""); fflush(stderr); }
    p->shown = 0;
}

static long bench_ack_every(const bench_opts* o);

/* A message and its metadata in one write (two would be two system calls per transfer). */
static int write_msg(int fd, const bench_msg* m, const void* meta, size_t n) {
    struct iovec v[2];
    ssize_t k;
    v[0].iov_base = (void*)(uintptr_t)m;
    v[0].iov_len = sizeof(*m);
    v[1].iov_base = (void*)(uintptr_t)meta;
    v[1].iov_len = n;
    do k = writev(fd, v, 2); while (k < 0 && errno == EINTR);
    if (k < 0) return -1;
    if ((size_t)k < sizeof(*m)) return write_all(fd, (const uint8_t*)m + k, sizeof(*m) - (size_t)k) != 0 || write_all(fd, meta, n) != 0 ? -1 : 0;
    return write_all(fd, (const uint8_t*)meta + ((size_t)k - sizeof(*m)), n - ((size_t)k - sizeof(*m)));
}

/* The producer's messages with a window (--inflight), written together as the consumer's acks
   are (see acks): when `every` are due, and before the producer waits (for an ack, or for pool
   space). A message per write would cost the producer a system call and the consumer a wake-up
   per transfer, more than a 4 KiB transfer over SHM itself; the consumer sees a message at most
   every-1 puts late, and never while the producer waits. One producer per process. */
typedef struct outbox { int fd; uint8_t buf[65536]; size_t len; long due; } outbox;
static outbox bench_out;

static int outbox_flush(outbox* b) {
    int rc = b->len ? write_all(b->fd, b->buf, b->len) : 0;
    b->len = 0;
    b->due = 0;
    return rc;
}

static int outbox_put(outbox* b, int fd, const bench_msg* m, const void* meta, size_t n, long every) {
    if (b->fd != fd && outbox_flush(b) != 0) return -1;
    b->fd = fd;
    if (sizeof(*m) + n > sizeof(b->buf) - b->len) {
        if (outbox_flush(b) != 0) return -1;
        if (sizeof(*m) + n > sizeof(b->buf)) return write_msg(fd, m, meta, n);
    }
    memcpy(b->buf + b->len, m, sizeof(*m));
    memcpy(b->buf + b->len + sizeof(*m), meta, n);
    b->len += sizeof(*m) + n;
    return ++b->due >= every ? outbox_flush(b) : 0;
}

/* The producer's end of the ack pipe: one read takes every ack already written; the messages
   due go out before it waits. */
static int ack_read(int fd, char* ack) {
    static reader in;       /* one producer per process */
    if (in.fd != fd) { in.fd = fd; in.at = in.len = 0; in.out = NULL; }
    if (in.at == in.len && outbox_flush(&bench_out) != 0) return -1;
    return reader_get(&in, ack, 1);
}

/* One transfer: a pool buffer, one memcpy, the stamp, a zero-copy put, the metadata down the pipe. */
static omc_result produce(bench_side* s, const uint8_t* src, uint64_t size, uint32_t kind, uint64_t index, const bench_opts* o) {
    const int copy_put = o->copy_put;
    omc_buffer buf;
    omc_payload p;
    omc_meta meta;
    bench_msg m;
    char key[32];
    omc_result r;
    memset(&m, 0, sizeof(m));
    m.t0 = kind == MSG_LAT ? omc_now_ns() : 0;     /* only the latency phase reads it: a clock read less per transfer */
    if (copy_put) {     /* from the caller's memory: the connector copies it into its pool */
        stamp((uint8_t*)(uintptr_t)src, size, index);
        memset(&p, 0, sizeof(p));
        p.data = src;
        p.size = size;
        p.readers = o->readers;
        snprintf(key, sizeof(key), "m%llu", (unsigned long long)index);
        r = omc_conn_put(s->conn, "producer", "consumer", key, &p, &meta);
        if (r != OMC_OK) return r;
        goto send;
    }
    r = bench_out.due ? omc_conn_alloc(s->conn, size, omc_now_ns(), &buf) : OMC_ERR_TIMEOUT;   /* no wait with messages due */
    if (r != OMC_OK && outbox_flush(&bench_out) != 0) return OMC_ERR_CONNECTION;
    if (r != OMC_OK) r = omc_conn_alloc(s->conn, size, omc_deadline_after_ms(30000), &buf);
    if (r != OMC_OK) return r;
    memcpy(buf.data, src, (size_t)size);
    stamp((uint8_t*)buf.data, size, index);
    memset(&p, 0, sizeof(p));
    p.buffer = &buf;
    p.readers = o->readers;
    snprintf(key, sizeof(key), "m%llu", (unsigned long long)index);
    r = omc_conn_put(s->conn, "producer", "consumer", key, &p, &meta);
    if (r != OMC_OK) { omc_buffer_release(&buf); return r; }
send:
    m.kind = kind;
    m.meta_len = meta.size;
    m.index = index;
    m.size = size;
    m.readers = o->readers;
    r = outbox_put(&bench_out, s->msg_fd, &m, meta.data, meta.size, kind == MSG_DATA_ACK ? bench_ack_every(o) : 1) == 0 ? OMC_OK : OMC_ERR_CONNECTION;
    omc_meta_free(&meta);
    return r;
}

/* The baseline: the one copy the producer makes, alone, in one process: same source, one reused
   destination (the transport's allocator also hands back the range just released, warm). The
   ratio says how much of a transfer's time is that copy; the rest is the transport. */
static double memcpy_gbps(uint8_t* dst, const uint8_t* src, uint64_t size) {
    long n = (long)(((uint64_t)256 << 20) / size), i;
    omc_time_ns t0;
    if (n < 4) n = 4;
    if (n > 20000) n = 20000;
    memcpy(dst, src, (size_t)size);                 /* first touches */
    t0 = omc_now_ns();
    for (i = 0; i < n; i++) {
        memcpy(dst, src, (size_t)size);
        __asm__ __volatile__("" : : "r"(dst) : "memory");   /* keep every copy */
    }
    return (double)size * (double)n / (double)(omc_now_ns() - t0);
}

/* The producer's bytes per rail (the multi-rail engine's counters), into out; how many rails. */
static int bench_rail_bytes(omc_conn* c, uint64_t* out, char (*names)[64]) {
#if defined(OMC_RDMA_MAX_RAILS) && OMC__HAS_ZMQ
    omc_rdma_rail_stat st[OMC_RDMA_MAX_RAILS];
    int n = omc_rdma_connector_rail_stats(c, st, OMC_RDMA_MAX_RAILS), i;
    if (n <= 0) return 0;
    if (n > BENCH_RAILS) n = BENCH_RAILS;
    for (i = 0; i < n; i++) {
        out[i] = st[i].bytes;
        if (names) {
            size_t len = strnlen(st[i].device, 63);
            memcpy(names[i], st[i].device, len);
            names[i][len] = '\0';
        }
    }
    return n;
#else
    (void)c; (void)out; (void)names;
    return 0;
#endif
}

/* One acknowledgement of the throughput phase (--inflight): counted in its time slice. */
static int bench_ack(bench_side* s, const bench_opts* o, uint64_t size, omc_time_ns t_first) {
    char ack;
    if (ack_read(s->ack_fd, &ack) != 0) { fprintf(stderr, "omniconn bench: the consumer is gone\n"); return -1; }
    if (o->timeline > 0) {
        int k = (int)((double)(omc_now_ns() - t_first) / 1e9 / o->timeline);
        if (k >= 0 && k < BENCH_MAX_SLICES) {
            bench_tl.bytes[k] += size;
            if (k + 1 > bench_tl.slices) bench_tl.slices = k + 1;
            if (strcmp(o->transport, "rdma") == 0) bench_tl.rails = bench_rail_bytes(s->conn, bench_tl.rail_bytes[k], bench_tl.rail_name);
        }
    }
    return 0;
}

/* --flap: a thread that takes a netdev down and up again at the given times into the phase. */
typedef struct bench_flap { const bench_opts* o; omc_time_ns t_first; } bench_flap;
static int bench_link(const char* dev, const char* state) {
    /* posix_spawn, not system(): fork() of a process with big pools takes long on slow hosts */
    char* argv[6];
    pid_t pid;
    int st;
    argv[0] = (char*)"ip"; argv[1] = (char*)"link"; argv[2] = (char*)"set"; argv[3] = (char*)dev; argv[4] = (char*)state; argv[5] = NULL;
    if (posix_spawnp(&pid, "ip", NULL, NULL, argv, environ) != 0) return -1;
    while (waitpid(pid, &st, 0) < 0) if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static void bench_sleep_until(omc_time_ns t) {
    omc_time_ns now;
    while ((now = omc_now_ns()) < t) {
        struct timespec ts;
        int64_t d = t - now;
        ts.tv_sec = (time_t)(d / 1000000000);
        ts.tv_nsec = (long)(d % 1000000000);
        nanosleep(&ts, NULL);
    }
}
static void* bench_flap_thread(void* arg) {
    bench_flap* f = (bench_flap*)arg;
    bench_sleep_until(f->t_first + (omc_time_ns)(f->o->flap_down * 1e9));
    bench_tl.flap_down_rc = bench_link(f->o->flap_dev, "down");
    bench_tl.flap_down_at = (double)(omc_now_ns() - f->t_first) / 1e9;
    bench_sleep_until(f->t_first + (omc_time_ns)(f->o->flap_up * 1e9));
    bench_tl.flap_up_rc = bench_link(f->o->flap_dev, "up");
    bench_tl.flap_up_at = (double)(omc_now_ns() - f->t_first) / 1e9;
    return NULL;
}

static int producer_size(bench_side* s, const bench_opts* o, progress* pg, uint64_t size, const uint8_t* src, uint8_t* scratch,
                         uint64_t* next_index, bench_row* row) {
    long iters = iters_for(o, size), lat_iters = lat_iters_for(o, size), i;
    const int64_t phase_ns = o->duration > 0 ? (int64_t)(o->duration * 1e9) : BENCH_PHASE_NS;
    const int timed = !o->iters;        /* without --iters the clock ends each phase */
    long acked = 0;
    double sum = 0;
    omc_time_ns t_first;
    bench_msg m;
    char ack;
    omc_result r;
    bench_flap flap;
    pthread_t flap_th;
    int flapping = 0, fail = 0;
    memset(row, 0, sizeof(*row));
    row->size = size;
    row->iters = iters;
    row->lat_iters = lat_iters;
    row->memcpy_gbps = memcpy_gbps(scratch, src, size);
    pg->start = pg->last = omc_now_ns();
    /* warm-up (connections, first touches), then one at a time: the latency phase */
    for (i = 0; i < BENCH_WARMUP + lat_iters; i++) {
        /* samples are indexed 0..lat_iters-1; warm-up transfers get numbers beyond them */
        uint64_t index = i < BENCH_WARMUP ? BENCH_MAX_LAT + (uint64_t)i : (uint64_t)(i - BENCH_WARMUP);
        if (timed && i >= BENCH_WARMUP + BENCH_MIN_LAT && omc_now_ns() - pg->start > phase_ns / 2) {
            lat_iters = i - BENCH_WARMUP;       /* enough samples for this size */
            break;
        }
        omc_time_ns t_put = omc_now_ns();
        r = produce(s, src, size, MSG_LAT, index, o);
        if (r != OMC_OK) { fprintf(stderr, "omniconn bench: put: %s\n", omc_result_str(r)); return -1; }
        if (ack_read(s->ack_fd, &ack) != 0) { fprintf(stderr, "omniconn bench: the consumer is gone\n"); return -1; }
        /* another host has another clock: there, latency is the round trip put -> get -> ack */
        if (o->remote && index < BENCH_MAX_LAT) s->sh->lat[index] = omc_now_ns() - t_put;
        progress_tick(pg, "latency", size, i + 1, BENCH_WARMUP + lat_iters, (uint64_t)(i + 1) * size);
    }
    row->lat_iters = lat_iters;
    qsort(s->sh->lat, (size_t)lat_iters, sizeof(int64_t), cmp_i64);
    for (i = 0; i < lat_iters; i++) sum += (double)s->sh->lat[i];
    row->min_us = (double)s->sh->lat[0] / 1e3;
    row->avg_us = sum / (double)lat_iters / 1e3;
    row->p50_us = (double)s->sh->lat[lat_iters / 2] / 1e3;
    row->p99_us = (double)s->sh->lat[(lat_iters * 99) / 100] / 1e3;
    row->p999_us = (double)s->sh->lat[(lat_iters * 999) / 1000] / 1e3;
    row->max_us = (double)s->sh->lat[lat_iters - 1] / 1e3;
    /* back to back: the throughput phase (the consumer is idle: every latency transfer was acked) */
    row->batches = s->sh->batches;
    row->batched_gets = s->sh->batched_gets;
    s->sh->batch_max = 0;
    pg->start = pg->last = t_first = omc_now_ns();
    memset(&bench_tl, 0, sizeof(bench_tl));
    bench_tl.slice_s = o->timeline;
    bench_tl.flap_down_at = bench_tl.flap_up_at = -1;
    if (o->timeline > 0 && strcmp(o->transport, "rdma") == 0) bench_tl.rails = bench_rail_bytes(s->conn, bench_tl.rail_start, bench_tl.rail_name);
    if (o->flap_dev) {
        flap.o = o;
        flap.t_first = t_first;
        if (pthread_create(&flap_th, NULL, bench_flap_thread, &flap) != 0) { fprintf(stderr, "omniconn bench: cannot start the --flap thread\n"); return -1; }
        flapping = 1;
    }
    for (i = 0; i < iters; i++) {
        if (timed && i >= BENCH_MIN_ITERS && omc_now_ns() - t_first > phase_ns) break;
        while (o->inflight && i - acked >= o->inflight) {      /* wait for a release */
            if (bench_ack(s, o, size, t_first) != 0) { fail = 1; break; }
            acked++;
        }
        if (fail) break;
        r = produce(s, src, size, o->inflight ? MSG_DATA_ACK : MSG_DATA, (*next_index)++, o);
        if (r != OMC_OK) { fprintf(stderr, "omniconn bench: put: %s\n", omc_result_str(r)); fail = 1; break; }
        progress_tick(pg, "throughput", size, i + 1, iters, (uint64_t)(i + 1) * size);
    }
    for (; !fail && o->inflight && acked < i; acked++)
        if (bench_ack(s, o, size, t_first) != 0) fail = 1;
    if (flapping) pthread_join(flap_th, NULL);     /* the link is up again before anything else */
    if (fail) return -1;
    memset(&m, 0, sizeof(m));
    m.kind = MSG_SYNC;
    if (outbox_flush(&bench_out) != 0 || write_all(s->msg_fd, &m, sizeof(m)) != 0 || ack_read(s->ack_fd, &ack) != 0) {
        fprintf(stderr, "omniconn bench: the consumer is gone\n");
        return -1;
    }
    if (o->remote) {
        s->sh->last_done = omc_now_ns();        /* the SYNC's round trip is included: one among many transfers */
        if (ack != 1) { fprintf(stderr, "omniconn bench: the consumer reports failed or damaged gets (its host says which)\n"); return -1; }
    }
    row->iters = iters = i;
    row->batches = s->sh->batches - row->batches;
    row->batched_gets = s->sh->batched_gets - row->batched_gets;
    row->batch_max = s->sh->batch_max;
    /* with fan-out every payload is read readers times: GB/s counts the bytes read */
    row->gbps = (double)size * (double)(o->readers ? o->readers : 1) * (double)iters / (double)(s->sh->last_done - t_first);
    row->msg_rate = (double)iters * 1e9 / (double)(s->sh->last_done - t_first);
    progress_clear(pg);
    if (s->sh->errors) { fprintf(stderr, "omniconn bench: %s (%llu errors)\n", s->sh->error_text, (unsigned long long)s->sh->errors); return -1; }
    return 0;
}

/* ---- sides: connectors per transport -------------------------------------------------------- */

static omc_conn* bench_connector(const bench_opts* o, omc_role role, const char* channel) {
    omc_conn* c = NULL;
    omc_result r = OMC_ERR_INVALID_ARG;
    omc_hooks hooks;
    memset(&hooks, 0, sizeof(hooks));
    hooks.log_fn = omc_log_stderr;
    if (strcmp(o->transport, "shm") == 0) {
        omc_shm_desc d;
        memset(&d, 0, sizeof(d));
        d.role = role;
        d.channel = channel;
        d.shm_dir = o->shm_dir;
        d.pool_size = pool_for(o);
        d.disable_inline = 1;       /* every payload through the segment: the path under test */
        d.hooks = hooks;
        r = omc_shm_create(&d, &c);
    } else if (strcmp(o->transport, "tcp") == 0 || strcmp(o->transport, "rdma") == 0) {
#if OMC__HAS_ZMQ
        omc_tcp_desc d;
        memset(&d, 0, sizeof(d));
        d.role = role;
        d.host = o->host;
        d.pool_size = pool_for(o);
        d.hooks = hooks;
        if (o->inflight > 8) d.max_idle_channels = (uint32_t)(o->inflight < BENCH_MAX_WINDOW ? o->inflight : BENCH_MAX_WINDOW);  /* a channel per get in flight */
        if (strcmp(o->transport, "tcp") == 0) r = omc_tcp_create(&d, &c);
        else {
            /* the remote connector with omniconn_rdma.h's data plane; RDMA or nothing here: a
               bench that quietly measured TCP would be worse than none */
            omc_rdma_connector_desc rd;
            memset(&rd, 0, sizeof(rd));
            rd.net = d;
            rd.rdma.local_addr = o->rdma_addr ? o->rdma_addr : o->host;
            rd.rdma.devices = o->devices;
            rd.rdma.gid_index = o->gid_index;
            rd.rdma.gid_index_set = o->gid_index_set;
#if defined(OMC_RDMA_MAX_RAILS)
            rd.rdma.max_rails = (uint32_t)o->rails;
#endif
            rd.require_rdma = 1;
            r = omc_rdma_connector_create(&rd, &c);
        }
#else
        r = OMC_ERR_UNAVAILABLE;
#endif
    } else if (strcmp(o->transport, "local") == 0) {
        omc_local_desc d;
        memset(&d, 0, sizeof(d));
        d.pool_size = 2 * pool_for(o);
        d.hooks = hooks;
        r = omc_local_create(&d, &c);
    }
    if (r != OMC_OK) { fprintf(stderr, "omniconn bench: cannot create the %s %s: %s\n", o->transport, role == OMC_ROLE_SENDER ? "producer" : "consumer", omc_result_str(r)); return NULL; }
    return c;
}

/* Gets the consumer keeps in flight at once: the window, for the transports whose get waits on
   the network (tcp, rdma). A same-host get (shm, local) waits for nothing, so more threads would
   only take turns on the same cores: there the consumer takes one at a time, as it always has. */
static long bench_remote_window(const bench_opts* o) {
    return strcmp(o->transport, "tcp") == 0 || strcmp(o->transport, "rdma") == 0 ? o->inflight : 0;
}

/* How many messages and acks are written together (see outbox and acks): one. Writing half a
   window at a time cost less per transfer on a loaded host, but on an idle one it turned the
   window into a ping-pong of half windows: SHM 4 KiB with a window of 16 fell from 2.9-3.3 to
   1.1 GB/s (alternating runs of both, load about 1.5). The machinery stays for a caller that
   wants it. */
static long bench_ack_every(const bench_opts* o) {
    (void)o;
    return 1;
}

static void* consumer_thread(void* arg) {
    consumer_loop((bench_side*)arg);
    return NULL;
}

/* The table: throughput and message rate back to back, latency one transfer at a time (us). */
static void print_header(const bench_opts* o) {
    printf("\n  %9s  %7s  %8s  %9s  %9s  %8s  %8s  %8s  %8s  %8s  %8s\n", "size", "iters", o->gbits ? "Gb/s" : "GB/s", "msg/s",
           "vs memcpy", "lat min", "avg", "p50", "p99", "p99.9", "max");
}

static void print_row(const bench_opts* o, const bench_row* r) {
    char sz[32];
    double v = o->gbits ? 8 * r->gbps : r->gbps;
    /* two decimals, or four below 0.1 (software RDMA, loopback TCP at 4 KiB): never a 0.00 */
    printf("  %9s  %7ld  %8.*f  %9.0f  %8.2fx  %8.1f  %8.1f  %8.1f  %8.1f  %8.1f  %8.1f\n", size_text(r->size, sz, sizeof(sz)), r->iters,
           v < 0.1 ? 4 : 2, v, r->msg_rate, r->memcpy_gbps > 0 ? r->gbps / r->memcpy_gbps : 0.0, r->min_us, r->avg_us, r->p50_us, r->p99_us,
           r->p999_us, r->max_us);
    fflush(stdout);
}

/* The throughput phase slice by slice: MB/s in all and per rail, and the --flap events. */
static void print_timeline(const bench_opts* o) {
    int k, r;
    printf("\n  timeline (%.2f s slices, acknowledged transfers; MB/s = 10^6 bytes/s)\n  %7s  %9s", o->timeline, "t (s)", "MB/s");
    for (r = 0; r < bench_tl.rails; r++) printf("  %9s", bench_tl.rail_name[r]);
    printf("\n");
    for (k = 0; k < bench_tl.slices; k++) {
        double t0 = k * o->timeline, t1 = t0 + o->timeline;
        printf("  %7.2f  %9.2f", t0, (double)bench_tl.bytes[k] / o->timeline / 1e6);
        for (r = 0; r < bench_tl.rails; r++) {
            uint64_t now = bench_tl.rail_bytes[k][r], prev = 0;
            int j;
            for (j = k - 1; j >= 0 && !prev; j--) prev = bench_tl.rail_bytes[j][r];
            if (!prev) prev = bench_tl.rail_start[r];   /* the latency phase's bytes are not this phase's */
            if (!now) now = prev;      /* no ack in this slice: nothing sampled */
            printf("  %9.2f", (double)(now - prev) / o->timeline / 1e6);
        }
        if (bench_tl.flap_down_at >= t0 && bench_tl.flap_down_at < t1) printf("  %s down%s", o->flap_dev, bench_tl.flap_down_rc ? " (ip failed)" : "");
        if (bench_tl.flap_up_at >= t0 && bench_tl.flap_up_at < t1) printf("  %s up%s", o->flap_dev, bench_tl.flap_up_rc ? " (ip failed)" : "");
        printf("\n");
    }
    fflush(stdout);
}

/* The producer's rails at the end of the run (rdma with the multi-rail engine). */
static void print_rails(omc_conn* c) {
#if defined(OMC_RDMA_MAX_RAILS) && OMC__HAS_ZMQ
    omc_rdma_rail_stat st[OMC_RDMA_MAX_RAILS];
    int n = omc_rdma_connector_rail_stats(c, st, OMC_RDMA_MAX_RAILS), i;
    for (i = 0; i < n && i < OMC_RDMA_MAX_RAILS; i++)
        printf("  rail %d: %s port %u (%s), %s, %llu bytes in %llu slices, weight %.2f, %u failure(s), %u rejoin(s)%s%s\n", i, st[i].device,
               st[i].port, st[i].netdev, st[i].up ? "up" : "down", (unsigned long long)st[i].bytes, (unsigned long long)st[i].slices,
               st[i].weight, st[i].failures, st[i].rejoins, st[i].why[0] ? ": " : "", st[i].why);
#else
    (void)c;
#endif
}

static const char* bench_method =
    "producer: omc_conn_alloc + one memcpy + zero-copy omc_conn_put; consumer: omc_conn_get(metadata) + release; "
    "metadata over a pipe; latency = put start -> get returned in the other side, one at a time (us); "
    "throughput = back to back (GB/s = 1e9 bytes/s; msg_rate = transfers/s); baseline = memcpy of the same size in one process";

static int write_json(const bench_opts* o, const bench_row* rows, int n, int processes) {
    FILE* f = fopen(o->json, "w");
    char host[256] = "";
    time_t now = time(NULL);
    struct tm tmv;
    char date[32];
    int i;
    if (!f) { fprintf(stderr, "omniconn bench: cannot write %s: %s\n", o->json, strerror(errno)); return -1; }
    gethostname(host, sizeof(host) - 1);
    gmtime_r(&now, &tmv);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tmv);
    fprintf(f, "{\n  \"tool\": \"omniconn bench\",\n  \"version\": \"%s\",\n  \"transport\": ", omc_version_string());
    json_string(f, o->transport);
    fprintf(f, ",\n  \"processes\": %d,\n  \"host\": ", processes);
    json_string(f, host);
    {
        double la[3] = {0, 0, 0};
        getloadavg(la, 3);
        fprintf(f, ",\n  \"cpus\": %ld,\n  \"load_average\": %.2f,\n  \"date\": \"%s\",\n", sysconf(_SC_NPROCESSORS_ONLN), la[0], date);
    }
    fprintf(f, "  \"options\": {\"put\": \"%s\", \"pool_bytes\": %llu, \"duration_s\": %.3f, \"inflight\": %ld, \"cpu_producer\": %d, "
               "\"cpu_consumer\": %d, \"readers\": %u, \"batch\": %ld},\n", o->copy_put ? "copy" : "zero-copy", (unsigned long long)pool_for(o),
            o->duration > 0 ? o->duration : (double)BENCH_PHASE_NS / 1e9, o->inflight, o->cpu_producer, o->cpu_consumer, o->readers ? o->readers : 1,
            o->batch);
    if (strcmp(o->transport, "rdma") == 0) {
        fprintf(f, "  \"rdma\": {\"devices\": ");
        json_string(f, o->devices ? o->devices : "");
        fprintf(f, ", \"rails\": %d, \"rdma_addr\": ", o->rails);
        json_string(f, o->rdma_addr ? o->rdma_addr : o->host);
        fprintf(f, "},\n");
    }
    if (o->timeline > 0) {
        int k, r;
        fprintf(f, "  \"timeline\": {\"slice_s\": %.3f, \"size\": %llu, \"rails\": [", o->timeline, (unsigned long long)rows[n - 1].size);
        for (r = 0; r < bench_tl.rails; r++) { if (r) fprintf(f, ", "); json_string(f, bench_tl.rail_name[r]); }
        fprintf(f, "], \"flap\": ");
        if (o->flap_dev) {
            fprintf(f, "{\"netdev\": ");
            json_string(f, o->flap_dev);
            fprintf(f, ", \"down_at_s\": %.3f, \"up_at_s\": %.3f, \"down_rc\": %d, \"up_rc\": %d}", bench_tl.flap_down_at, bench_tl.flap_up_at,
                    bench_tl.flap_down_rc, bench_tl.flap_up_rc);
        } else fprintf(f, "null");
        fprintf(f, ",\n    \"rail_bytes_at_start\": [");
        for (r = 0; r < bench_tl.rails; r++) fprintf(f, "%s%llu", r ? ", " : "", (unsigned long long)bench_tl.rail_start[r]);
        fprintf(f, "],\n    \"slices\": [");
        for (k = 0; k < bench_tl.slices; k++) {
            fprintf(f, "%s\n      {\"t_s\": %.3f, \"bytes\": %llu, \"rail_bytes_cumulative\": [", k ? "," : "", k * o->timeline,
                    (unsigned long long)bench_tl.bytes[k]);
            for (r = 0; r < bench_tl.rails; r++) fprintf(f, "%s%llu", r ? ", " : "", (unsigned long long)bench_tl.rail_bytes[k][r]);
            fprintf(f, "]}");
        }
        fprintf(f, "\n  ]},\n");
    }
    fprintf(f, "  \"units\": {\"gbps\": \"1e9 bytes/s\", \"msg_rate\": \"transfers/s\", \"latency\": \"microseconds, one way\"},\n  \"method\": ");
    json_string(f, bench_method);
    fprintf(f, ",\n  \"results\": [\n");
    for (i = 0; i < n; i++)
        fprintf(f, "    {\"size\": %llu, \"iters\": %ld, \"gbps\": %.4f, \"msg_rate\": %.1f, \"ns_per_transfer\": %.1f, \"memcpy_gbps\": %.4f, "
                   "\"ratio_vs_memcpy\": %.4f, \"lat_iters\": %ld, \"lat_min_us\": %.2f, \"lat_avg_us\": %.2f, \"lat_p50_us\": %.2f, "
                   "\"lat_p99_us\": %.2f, \"lat_p999_us\": %.2f, \"lat_max_us\": %.2f, \"batches\": %llu, \"batched_gets\": %llu, "
                   "\"batch_max\": %llu}%s\n",
                (unsigned long long)rows[i].size, rows[i].iters, rows[i].gbps, rows[i].msg_rate, rows[i].msg_rate > 0 ? 1e9 / rows[i].msg_rate : 0.0,
                rows[i].memcpy_gbps, rows[i].memcpy_gbps > 0 ? rows[i].gbps / rows[i].memcpy_gbps : 0.0, rows[i].lat_iters, rows[i].min_us,
                rows[i].avg_us, rows[i].p50_us, rows[i].p99_us, rows[i].p999_us, rows[i].max_us, (unsigned long long)rows[i].batches,
                (unsigned long long)rows[i].batched_gets, (unsigned long long)rows[i].batch_max, i + 1 < n ? "," : "");
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0) { fprintf(stderr, "omniconn bench: cannot write %s\n", o->json); return -1; }
    return 0;
}

/* Throughput against size (log scale), with the memcpy baseline, and latency below. */
static int write_plot(const bench_opts* o, const bench_row* rows, int n, int processes) {
    FILE* g;
    char host[256] = "", date[32], sz[32];
    time_t now = time(NULL);
    struct tm tmv;
    int i, st;
    if (!in_path("gnuplot")) {
        fprintf(stderr, "omniconn bench: gnuplot not found (Debian: apt-get install gnuplot-nox); %s was not written\n", o->plot);
        return 0;
    }
    gethostname(host, sizeof(host) - 1);
    gmtime_r(&now, &tmv);
    strftime(date, sizeof(date), "%Y-%m-%d", &tmv);
    g = popen("gnuplot", "w");
    if (!g) { fprintf(stderr, "omniconn bench: cannot run gnuplot\n"); return -1; }
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo enhanced size 1000,760 font 'DejaVu Sans,12' } "
               "else { set terminal png enhanced size 1000,760 }\n");
    fprintf(g, "set output '%s'\n", o->plot);
    fprintf(g, "$d << EOD\n");
    for (i = 0; i < n; i++)
        fprintf(g, "%llu \"%s\" %.4f %.4f %.2f %.2f\n", (unsigned long long)rows[i].size, size_text(rows[i].size, sz, sizeof(sz)),
                rows[i].gbps, rows[i].memcpy_gbps, rows[i].p50_us, rows[i].p99_us);
    fprintf(g, "EOD\n");
    fprintf(g, "set multiplot layout 2,1 title \"omniconn bench --transport %s   (%s, %ld CPUs, %s; producer and consumer in %s)\"\n",
            o->transport, host, sysconf(_SC_NPROCESSORS_ONLN), date, processes == 2 ? "two processes" : "two threads");
    fprintf(g, "set logscale x 2\nset grid\nset key top right box opaque\nset xlabel 'payload size'\nset format x ''\n");
    fprintf(g, "set offsets graph 0.04, graph 0.04, graph 0.08, 0\n");      /* room for the first and last points */
    /* log scale: a hot memcpy of 4 KiB and a transfer of 4 KiB differ by a factor of 100 */
    fprintf(g, "set logscale y 10\nset format y '%%g'\nset ylabel 'throughput (GB/s, 10^9 bytes/s)'\nset lmargin 12\n");
    fprintf(g, "plot $d using 1:3:xtic(2) with linespoints lw 3 pt 7 ps 1.3 lc rgb '#1f6fb4' title '%s: alloc + memcpy + put -> get + release', "
               "'' using 1:4 with linespoints lw 2 dt 2 pt 6 lc rgb '#888888' title 'baseline: memcpy in one process'\n", o->transport);
    fprintf(g, "set logscale y 10\nset format y '10^{%%L}'\nset ylabel 'one-way latency (us)'\nset yrange [*:*]\nset offsets graph 0.04, graph 0.04, 0, 0\n"
               "set key top left box opaque\n");
    fprintf(g, "plot $d using 1:5:xtic(2) with linespoints lw 3 pt 7 ps 1.3 lc rgb '#d4541a' title 'p50, one transfer at a time', "
               "'' using 1:6 with linespoints lw 2 dt 2 pt 6 lc rgb '#d4541a' title 'p99'\n");
    fprintf(g, "unset multiplot\n");
    st = pclose(g);
    if (st != 0) { fprintf(stderr, "omniconn bench: gnuplot failed (status %d); %s may be incomplete\n", st, o->plot); return -1; }
    fprintf(stderr, "omniconn bench: plot written to %s\n", o->plot);
    return 0;
}

static void bench_usage(void) {
    printf("usage: omniconn bench [options]                 producer and consumer on this host\n");
    printf("       omniconn bench --serve [options]         two hosts: the producer (prints the results)\n");
    printf("       omniconn bench HOST [--port P]           two hosts: the consumer, for the producer on HOST\n");
    printf("  --transport T    local | shm | tcp | rdma                  (default shm)\n");
    printf("  --sizes LIST     payload sizes, K/M/G = KiB/MiB/GiB        (default 4K,64K,1M,16M)\n");
    printf("  --iters N        transfers per size (throughput phase)     (default: about 1 s per size, 16..20000)\n");
    printf("  --json FILE      also write the results as JSON\n");
    printf("  --plot FILE.png  also plot throughput and latency against size (needs gnuplot)\n");
    printf("  --progress       show progress on stderr                   (default: when stderr is a terminal)\n");
    printf("  --no-progress    never show progress\n");
    printf("  --host ADDR      tcp: the producer's address               (default 127.0.0.1)\n");
    printf("  --shm-dir DIR    shm: the tmpfs directory                  (default /dev/shm)\n");
    printf("  --duration SEC   seconds per size: throughput phase SEC, latency phase SEC/2 (default 1; --iters wins)\n");
    printf("  --pool SIZE      bytes per pool                            (default 4 x the largest size + 1 MiB, 64 MiB at least)\n");
    printf("  --put MODE       zero-copy: alloc + memcpy + put of the buffer; copy: put from your memory (default zero-copy)\n");
    printf("  --readers N      fan-out: each payload is read by N gets (GB/s counts the bytes read) (default 1)\n");
    printf("  --inflight N     at most N transfers put and not yet released (default: as many as the pool holds);\n"
           "                   tcp, rdma: the consumer keeps up to N gets in flight (16 threads at most)\n");
    printf("  --batch N        the consumer takes up to N metadata messages already arrived (1..%d) and fetches them with one\n"
           "                   omc_conn_get_batch on one thread (no window threads); with --inflight: a window fetched in batches\n",
           BENCH_MAX_BATCH);
    printf("  --cpus P,C       pin the producer to CPU P and the consumer to CPU C (default: not pinned)\n");
    printf("  --gbits          report Gb/s (10^9 bits/s) instead of GB/s (10^9 bytes/s)\n");
    printf("  --force          reserve more memory than this host has available\n");
    printf("  --serve          two hosts, tcp or rdma: be the producer and wait for a consumer; --host is the address\n");
    printf("                   the consumer reaches this host's data plane at. The other host runs: omniconn bench HOST\n");
    printf("  --port P         two hosts: the control connection's port        (default %d)\n", BENCH_PORT);
    printf("  --devices LIST   rdma: devices for the engine, \"mlx5_0,mlx5_1\"   (default $RDMA_DEVICE_NAME, else every ACTIVE one)\n");
    printf("  --rails N        rdma: stripe over at most N rails (device ports)  (default: the engine's, every usable one)\n");
    printf("  --rdma-addr LIST rdma: this host's address on each rail, picks each rail's GID (default --host)\n");
    printf("  --gid-index N    rdma: use GID index N instead of the engine's choice\n");
    printf("  --timeline SEC   also show the throughput phase in slices of SEC seconds (and bytes per rail); implies --inflight 4\n");
    printf("  --flap DEV,D,U   ip link set DEV down D s into the throughput phase and up at U s (root; a failover test; never lo)\n");
    printf("Units: GB/s = 10^9 bytes/s, msg/s = transfers per second, latency in microseconds, one way, one transfer at a\n");
    printf("time (%d at most per size; p99.9 needs 1000 of them); the first %d transfers of a size are not counted.\n",
           BENCH_MAX_LAT, BENCH_WARMUP);
}

/* getopt_long with the error messages that name the argument ("omniconn bench: unknown option
   '--frob'"), not the program's argv[0]. */
static int next_opt(const char* cmd, int argc, char** argv, const struct option* longs) {
    int opt;
    opterr = 0;
    opt = getopt_long(argc, argv, ":h", longs, NULL);
    if (opt == '?') fprintf(stderr, "omniconn %s: unknown option '%s' (omniconn %s -h lists them)\n", cmd, argv[optind - 1], cmd);
    else if (opt == ':') fprintf(stderr, "omniconn %s: option '%s' needs a value\n", cmd, argv[optind - 1]);
    return opt;
}

/* ---- memory: say what the run reserves, refuse what is not there ------------------------------ */

static uint64_t meminfo_bytes(const char* field) {
    char line[256];
    uint64_t v = 0;
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0) { v = strtoull(line + strlen(field), NULL, 10) * 1024; break; }
    fclose(f);
    return v;
}

/* Pools (the shm producer's in the tmpfs directory, both ends' for tcp/rdma, one double pool for
   local) plus the source and scratch buffers of the largest size. */
static int bench_memory_check(const bench_opts* o) {
    uint64_t pool = pool_for(o), pools, buffers = 2 * max_size(o), need, avail = meminfo_bytes("MemAvailable:"), shm_free = 0;
    char a[32], b[32], c[32], d[32], e[32];
    struct statvfs sv;
    int shm = strcmp(o->transport, "shm") == 0;
    pools = strcmp(o->transport, "local") == 0 ? 2 * pool : shm ? pool : 2 * pool;
    need = pools + buffers;
    fprintf(stderr, "omniconn bench: reserving %s: %s of pools (%s each%s) + %s of payload buffers; %s available\n", size_text(need, a, sizeof(a)),
            size_text(pools, b, sizeof(b)), size_text(pool, c, sizeof(c)), shm ? ", in the shm directory" : "", size_text(buffers, d, sizeof(d)),
            avail ? size_text(avail, e, sizeof(e)) : "unknown");
    if (avail && need > avail && !o->force) {
        fprintf(stderr, "omniconn bench: that is more than the %s available (MemAvailable); use smaller --sizes or --pool, or --force\n",
                size_text(avail, a, sizeof(a)));
        return -1;
    }
    if (shm && statvfs(o->shm_dir ? o->shm_dir : "/dev/shm", &sv) == 0) {
        shm_free = (uint64_t)sv.f_bavail * sv.f_frsize;
        if (pool > shm_free && !o->force) {
            fprintf(stderr, "omniconn bench: the %s pool does not fit the %s free in %s; use smaller --sizes or --pool, or --force\n",
                    size_text(pool, a, sizeof(a)), size_text(shm_free, b, sizeof(b)), o->shm_dir ? o->shm_dir : "/dev/shm");
            return -1;
        }
    }
    return 0;
}

/* ---- Ctrl-C / SIGTERM: the producer's segment goes with the run ------------------------------- */

static char bench_segment[OMC_SHM_PATH_MAX];
static void bench_on_signal(int sig) {
    if (bench_segment[0]) unlink(bench_segment);    /* async-signal-safe; the consumer sees EOF and ends */
    signal(sig, SIG_DFL);
    raise(sig);
}

static int pin_to(int cpu) {
    cpu_set_t set;
    if (cpu < 0) return 0;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        fprintf(stderr, "omniconn bench: cannot pin to CPU %d: %s\n", cpu, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- two hosts ------------------------------------------------------------------------------- */

/* The producer's side: listen on the control port, take one consumer, tell it the transport and
   the pool size. The control connection then carries what the pipe carries in one host. */
static int bench_wait_for_consumer(const bench_opts* o) {
    struct sockaddr_in a;
    bench_hello h;
    int ls = socket(AF_INET, SOCK_STREAM, 0), s = -1, one = 1;
    if (ls < 0) { fprintf(stderr, "omniconn bench: socket: %s\n", strerror(errno)); return -1; }
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)o->port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(ls, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(ls, 1) != 0) {
        fprintf(stderr, "omniconn bench: cannot listen on port %u: %s (--port another)\n", o->port, strerror(errno));
        close(ls);
        return -1;
    }
    fprintf(stderr, "omniconn bench: waiting for a consumer on port %u (on the other host: omniconn bench <this host> --port %u)\n", o->port, o->port);
    while (s < 0) {
        s = accept(ls, NULL, NULL);
        if (s < 0 && errno != EINTR) { fprintf(stderr, "omniconn bench: accept: %s\n", strerror(errno)); close(ls); return -1; }
    }
    close(ls);
    memset(&h, 0, sizeof(h));
    snprintf(h.magic, sizeof(h.magic), "omniconn-bench1");
    snprintf(h.transport, sizeof(h.transport), "%s", o->transport);
    h.pool = pool_for(o);
    if (write_all(s, &h, sizeof(h)) != 0) { fprintf(stderr, "omniconn bench: the consumer hung up\n"); close(s); return -1; }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fprintf(stderr, "omniconn bench: a consumer connected\n");
    return s;
}

/* The consumer's side (omniconn bench HOST): connect, learn the transport, take every payload
   until the producer says quit. The producer prints the results. */
static int bench_consumer_for(bench_opts* o) {
    struct addrinfo hints, *res = NULL, *ai;
    char port[16];
    bench_hello h;
    bench_side cons;
    int s = -1, one = 1, gai, rc;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%u", o->port);
    if ((gai = getaddrinfo(o->peer, port, &hints, &res)) != 0) {
        fprintf(stderr, "omniconn bench: '%s': %s\n", o->peer, gai_strerror(gai));
        return 2;
    }
    for (ai = res; ai && s < 0; ai = ai->ai_next) {
        s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) != 0) { close(s); s = -1; }
    }
    freeaddrinfo(res);
    if (s < 0) { fprintf(stderr, "omniconn bench: no producer on %s port %u (start omniconn bench --serve there first)\n", o->peer, o->port); return 1; }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (read_all(s, &h, sizeof(h)) != 0 || memcmp(h.magic, "omniconn-bench1", 15) != 0 || !memchr(h.transport, 0, sizeof(h.transport))) {
        fprintf(stderr, "omniconn bench: %s port %u is not an omniconn bench producer\n", o->peer, o->port);
        close(s);
        return 1;
    }
    o->transport = h.transport;
    o->pool = h.pool;
    fprintf(stderr, "omniconn bench: consumer for the %s producer on %s (a %llu-byte pool here)\n", o->transport, o->peer, (unsigned long long)h.pool);
    memset(&cons, 0, sizeof(cons));
    cons.sh = (bench_shared*)calloc(1, sizeof(bench_shared));
    cons.msg_fd = cons.ack_fd = s;
    cons.window = bench_remote_window(o);   /* this host's --inflight */
    cons.batch = o->batch;                  /* and --batch */
    cons.ack_every = bench_ack_every(o);
    cons.conn = cons.sh ? bench_connector(o, OMC_ROLE_RECEIVER, "bench") : NULL;
    if (!cons.conn) { free(cons.sh); close(s); return 1; }
    consumer_loop(&cons);
    rc = cons.sh->errors ? 1 : 0;
    if (cons.sh->errors) fprintf(stderr, "omniconn bench: %s (%llu errors)\n", cons.sh->error_text, (unsigned long long)cons.sh->errors);
    else fprintf(stderr, "omniconn bench: done; the producer on %s has the results\n", o->peer);
    omc_conn_destroy(cons.conn);
    free(cons.sh);
    close(s);
    return rc;
}

/* The bench run: options, the producer's and the consumer's side, and what they share. */
typedef struct bench_run {
    bench_opts o;
    bench_row rows[BENCH_MAX_SIZES];
    bench_side prod, cons;
    progress pg;
    uint8_t *src, *scratch;
    uint64_t next_index;
    int processes, fds_msg[2], fds_ack[2], thread_started;
    char channel[OMC_SHM_CHANNEL_MAX + 1];
    pid_t pid;
    pthread_t th;
} bench_run;

/* Step 1: the options. Returns -1 to go on, else the exit code (0 after --help, 2 for a bad one). */
static int bench_parse_options(int argc, char** argv, bench_opts* o, const char** list) {
    static const struct option longs[] = {
        { "transport", required_argument, NULL, 't' }, { "sizes", required_argument, NULL, 's' }, { "iters", required_argument, NULL, 'n' },
        { "json", required_argument, NULL, 'j' }, { "plot", required_argument, NULL, 'p' }, { "progress", no_argument, NULL, 'P' },
        { "no-progress", no_argument, NULL, 'Q' }, { "host", required_argument, NULL, 'H' }, { "shm-dir", required_argument, NULL, 'D' },
        { "duration", required_argument, NULL, 'd' }, { "pool", required_argument, NULL, 'o' }, { "put", required_argument, NULL, 'u' },
        { "cpus", required_argument, NULL, 'c' }, { "gbits", no_argument, NULL, 'g' }, { "force", no_argument, NULL, 'f' },
        { "inflight", required_argument, NULL, 'i' }, { "batch", required_argument, NULL, 'b' }, { "serve", no_argument, NULL, 'S' }, { "readers", required_argument, NULL, 'r' }, { "port", required_argument, NULL, 'O' },
        { "devices", required_argument, NULL, 'E' }, { "rails", required_argument, NULL, 'R' }, { "rdma-addr", required_argument, NULL, 'A' },
        { "gid-index", required_argument, NULL, 'G' }, { "timeline", required_argument, NULL, 'T' }, { "flap", required_argument, NULL, 'F' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
    };
    char* end;
    int opt;
    o->transport = "shm";
    o->progress = -1;
    o->host = "127.0.0.1";
    o->cpu_producer = o->cpu_consumer = -1;
    optind = 1;
    while ((opt = next_opt("bench", argc, argv, longs)) != -1) {
        switch (opt) {
            case 't': o->transport = optarg; break;
            case 's': *list = optarg; break;
            case 'n':
                o->iters = strtol(optarg, &end, 10);
                if (*end || o->iters <= 0) { fprintf(stderr, "omniconn bench: --iters '%s' is not a positive number\n", optarg); return 2; }
                break;
            case 'd':
                o->duration = strtod(optarg, &end);
                if (*end || !(o->duration > 0) || o->duration > 3600) {
                    fprintf(stderr, "omniconn bench: --duration '%s' is not a number of seconds in (0, 3600]\n", optarg);
                    return 2;
                }
                break;
            case 'o':
                o->pool = parse_size(optarg);
                if (!o->pool) { fprintf(stderr, "omniconn bench: --pool '%s' is not a size (4096, 4K, 1M, 2G)\n", optarg); return 2; }
                break;
            case 'u':
                if (strcmp(optarg, "copy") == 0) o->copy_put = 1;
                else if (strcmp(optarg, "zero-copy") == 0) o->copy_put = 0;
                else { fprintf(stderr, "omniconn bench: --put '%s' is not copy or zero-copy\n", optarg); return 2; }
                break;
            case 'c':
                if (sscanf(optarg, "%d,%d", &o->cpu_producer, &o->cpu_consumer) != 2 || o->cpu_producer < 0 || o->cpu_consumer < 0 ||
                    o->cpu_producer >= CPU_SETSIZE || o->cpu_consumer >= CPU_SETSIZE) {
                    fprintf(stderr, "omniconn bench: --cpus '%s' is not two CPU numbers P,C\n", optarg);
                    return 2;
                }
                break;
            case 'i':
                o->inflight = strtol(optarg, &end, 10);
                if (*end || o->inflight <= 0 || o->inflight > 1000000) {
                    fprintf(stderr, "omniconn bench: --inflight '%s' is not a number of transfers (1..1000000)\n", optarg);
                    return 2;
                }
                break;
            case 'b':
                o->batch = strtol(optarg, &end, 10);
                if (*end || o->batch <= 0 || o->batch > BENCH_MAX_BATCH) {
                    fprintf(stderr, "omniconn bench: --batch '%s' is not a number of gets per batch (1..%d)\n", optarg, BENCH_MAX_BATCH);
                    return 2;
                }
                break;
            case 'g': o->gbits = 1; break;
            case 'S': o->serve = 1; break;
            case 'r': {
                unsigned long v = strtoul(optarg, &end, 10);
                if (*end || v == 0 || v > 1024) { fprintf(stderr, "omniconn bench: --readers '%s' is not a number of readers (1..1024)\n", optarg); return 2; }
                o->readers = (uint32_t)v;
                break;
            }
            case 'O':
                o->port = (unsigned)strtoul(optarg, &end, 10);
                if (*end || o->port == 0 || o->port > 65535) { fprintf(stderr, "omniconn bench: --port '%s' is not a port (1..65535)\n", optarg); return 2; }
                break;
            case 'E': o->devices = optarg; break;
            case 'A': o->rdma_addr = optarg; break;
            case 'R': {
                long v = strtol(optarg, &end, 10);
                if (*end || v < 1 || v > BENCH_RAILS) { fprintf(stderr, "omniconn bench: --rails '%s' is not a number of rails (1..%d)\n", optarg, BENCH_RAILS); return 2; }
#if !defined(OMC_RDMA_MAX_RAILS)
                if (v > 1) { fprintf(stderr, "omniconn bench: --rails %ld: this omniconn_rdma.h has one rail per engine\n", v); return 2; }
#endif
                o->rails = (int)v;
                break;
            }
            case 'G': {
                long v = strtol(optarg, &end, 10);
                if (*end || v < 0 || v > 255) { fprintf(stderr, "omniconn bench: --gid-index '%s' is not a GID index (0..255)\n", optarg); return 2; }
                o->gid_index = (int)v;
                o->gid_index_set = 1;
                break;
            }
            case 'T':
                o->timeline = strtod(optarg, &end);
                if (*end || !(o->timeline >= 0.01 && o->timeline <= 60)) {
                    fprintf(stderr, "omniconn bench: --timeline '%s' is not a slice length in seconds (0.01..60)\n", optarg);
                    return 2;
                }
                break;
            case 'F': {
                static char dev[64];
                int k = 0;
                if (sscanf(optarg, "%63[^,],%lf,%lf%n", dev, &o->flap_down, &o->flap_up, &k) != 3 || optarg[k] || !(o->flap_down >= 0) ||
                    !(o->flap_up > o->flap_down)) {
                    fprintf(stderr, "omniconn bench: --flap '%s' is not NETDEV,DOWN,UP (seconds into the throughput phase, DOWN < UP)\n", optarg);
                    return 2;
                }
                if (strcmp(dev, "lo") == 0) {  /* every local service (and a one-host bench's own channel) lives on it */
                    fprintf(stderr, "omniconn bench: --flap refuses the loopback device 'lo': name a data link (an RDMA rail's netdev)\n");
                    return 2;
                }
                o->flap_dev = dev;
                break;
            }
            case 'f': o->force = 1; break;
            case 'j': o->json = optarg; break;
            case 'p': o->plot = optarg; break;
            case 'P': o->progress = 1; break;
            case 'Q': o->progress = 0; break;
            case 'H': o->host = optarg; break;
            case 'D': o->shm_dir = optarg; break;
            case 'h': bench_usage(); return 0;
            default: return 2;
        }
    }
    if (!o->port) o->port = BENCH_PORT;
    if (optind < argc && !o->serve && argv[optind][0] != '-') o->peer = argv[optind++];    /* omniconn bench HOST */
    if (optind != argc) { fprintf(stderr, "omniconn bench: unexpected argument '%s' (options start with --)\n", argv[optind]); return 2; }
    return -1;
}

/* Step 2: the sizes (--sizes 4K,64K,...). 0 or 2 (a bad list). */
static int bench_parse_sizes(bench_opts* o, const char* list) {
    while (*list) {
        char item[32];
        size_t len = strcspn(list, ",");
        if (len == 0 || len >= sizeof(item) || o->nsizes == BENCH_MAX_SIZES) {
            fprintf(stderr, "omniconn bench: --sizes '%s': give 1..%d sizes separated by commas\n", list, BENCH_MAX_SIZES);
            return 2;
        }
        memcpy(item, list, len);
        item[len] = '\0';
        o->sizes[o->nsizes] = parse_size(item);
        if (!o->sizes[o->nsizes]) { fprintf(stderr, "omniconn bench: '%s' is not a size (4096, 4K, 1M, 2G)\n", item); return 2; }
        o->nsizes++;
        list += len;
        if (*list == ',') list++;
    }
    return 0;
}

/* Step 3: combinations that cannot work, said before anything is set up. -1 to go on, else the
   exit code. */
static int bench_check_options(bench_opts* o) {
    if (strcmp(o->transport, "local") && strcmp(o->transport, "shm") && strcmp(o->transport, "tcp") && strcmp(o->transport, "rdma")) {
        fprintf(stderr, "omniconn bench: unknown transport '%s' (local, shm, tcp, rdma)\n", o->transport);
        return 2;
    }
    if (strcmp(o->transport, "rdma") == 0) {
        char why[256] = "";
        if (omc_rdma_probe(NULL, why, sizeof(why)) != OMC_OK) {     /* say it once, before two processes say it twice */
            fprintf(stderr, "omniconn bench: rdma: %s\n", why);
            return 1;
        }
    }
    if (o->pool && o->pool < max_size(o)) {
        char a[32], b[32];
        fprintf(stderr, "omniconn bench: --pool %s cannot hold one %s payload\n", size_text(o->pool, a, sizeof(a)), size_text(max_size(o), b, sizeof(b)));
        return 2;
    }
    if (o->cpu_producer >= 0 && (o->cpu_producer >= sysconf(_SC_NPROCESSORS_ONLN) || o->cpu_consumer >= sysconf(_SC_NPROCESSORS_ONLN))) {
        fprintf(stderr, "omniconn bench: --cpus %d,%d: this host has CPUs 0..%ld\n", o->cpu_producer, o->cpu_consumer, sysconf(_SC_NPROCESSORS_ONLN) - 1);
        return 2;
    }
    if ((o->devices || o->rdma_addr || o->rails || o->gid_index_set) && strcmp(o->transport, "rdma")) {
        fprintf(stderr, "omniconn bench: --devices, --rails, --rdma-addr and --gid-index are for --transport rdma\n");
        return 2;
    }
    if (o->timeline > 0 && !o->inflight) o->inflight = 4;     /* slices count acknowledged transfers */
    if (o->flap_dev && o->timeline <= 0) { fprintf(stderr, "omniconn bench: --flap needs --timeline (to show before, during and after)\n"); return 2; }
    if (o->flap_dev && (o->iters || (o->duration > 0 ? o->duration : 1.0) <= o->flap_up)) {
        fprintf(stderr, "omniconn bench: --flap: the throughput phase must outlast the link's return: --duration > %.1f, no --iters\n", o->flap_up);
        return 2;
    }
    if (o->serve && strcmp(o->transport, "tcp") && strcmp(o->transport, "rdma")) {
        fprintf(stderr, "omniconn bench: --serve needs --transport tcp or rdma (%s cannot span hosts)\n", o->transport);
        return 2;
    }
    return -1;
}

/* Step 4: what both sides share (an anonymous shared page), the payload source and the pipes. */
static int bench_setup(bench_run* b) {
    bench_opts* o = &b->o;
    uint64_t k;
    b->pg.on = o->progress;
    b->pg.transport = o->transport;
    b->prod.sh = (bench_shared*)mmap(NULL, sizeof(bench_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    b->src = (uint8_t*)malloc((size_t)max_size(o));
    b->scratch = (uint8_t*)malloc((size_t)max_size(o));
    if (b->prod.sh == MAP_FAILED || !b->src || !b->scratch || pipe(b->fds_msg) != 0 || pipe(b->fds_ack) != 0) {
        fprintf(stderr, "omniconn bench: out of memory\n");
        free(b->src); free(b->scratch);
        return 1;
    }
    for (k = 0; k < max_size(o); k++) b->src[k] = (uint8_t)(k * 131u + 7u);
    memset(b->scratch, 0, (size_t)max_size(o));
    b->cons = b->prod;
    b->cons.window = bench_remote_window(o);
    b->cons.batch = o->batch;
    b->cons.ack_every = bench_ack_every(o);
    b->prod.msg_fd = b->fds_msg[1];
    b->prod.ack_fd = b->fds_ack[0];
    b->cons.msg_fd = b->fds_msg[0];
    b->cons.ack_fd = b->fds_ack[1];
    snprintf(b->channel, sizeof(b->channel), "bench_%ld", (long)getpid());
    return 0;
}

/* Step 5, one of three by mode. --serve: the consumer connects from another host; the control
   connection replaces the pipes. */
static int bench_start_serving(bench_run* b) {
    int sock = bench_wait_for_consumer(&b->o);
    close(b->fds_msg[0]); close(b->fds_msg[1]); close(b->fds_ack[0]); close(b->fds_ack[1]);
    b->fds_msg[1] = sock;
    b->fds_ack[0] = sock >= 0 ? dup(sock) : -1;
    b->prod.msg_fd = b->fds_msg[1];
    b->prod.ack_fd = b->fds_ack[0];
    b->o.remote = 1;
    if (sock < 0 || b->fds_ack[0] < 0) return 1;
    b->prod.conn = bench_connector(&b->o, OMC_ROLE_SENDER, b->channel);
    return b->prod.conn ? 0 : 1;
}

/* The same-process connector cannot span processes: two threads, one connector. */
static int bench_start_threads(bench_run* b) {
    b->processes = 1;
    b->prod.conn = b->cons.conn = bench_connector(&b->o, OMC_ROLE_DUAL, b->channel);
    if (!b->prod.conn || pthread_create(&b->th, NULL, consumer_thread, &b->cons) != 0) return 1;
    b->thread_started = 1;
    return 0;
}

/* The forked consumer: its own connector (a ZMQ context does not survive fork); never returns. */
static void bench_consumer_process(bench_run* b) {
    bench_opts o = b->o;
    bench_side cons = b->cons;
    int* fds_msg = b->fds_msg;
    int* fds_ack = b->fds_ack;
    uint8_t* src = b->src;
    uint8_t* scratch = b->scratch;
    const char* channel = b->channel;
    int crc = 1;
    close(fds_msg[1]);
    close(fds_ack[0]);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (pin_to(o.cpu_consumer) != 0) exit(1);
    cons.conn = bench_connector(&o, OMC_ROLE_RECEIVER, channel);
    if (cons.conn) {
        crc = consumer_loop(&cons);
#if OMC__HAS_ZMQ
        if (strcmp(o.transport, "rdma") == 0) {
            omc_rdma_connector_info info;
            if (omc_rdma_connector_query(cons.conn, &info) == OMC_OK) {
                char gid[64];
                omc_rdma_gid_to_text(info.engine.gid, gid, sizeof(gid));
                cons.sh->plane_known = 1;
                cons.sh->rdma_enabled = info.rdma_enabled;
                cons.sh->rdma_channels = info.rdma_channels;
                cons.sh->tcp_fallbacks = info.tcp_fallbacks;
                if (info.tcp_fallbacks) snprintf(cons.sh->plane, sizeof(cons.sh->plane), "%s", info.last_fallback);
                else snprintf(cons.sh->plane, sizeof(cons.sh->plane), "%s port %u, GID index %u (%s), MTU %u, %s", info.engine.device,
                              info.engine.port, info.engine.gid_index, gid, info.engine.active_mtu,
                              info.engine.protection == OMC_RDMA_PROTECT_WINDOWS ? "a memory window per destination"
                              : info.engine.protection == OMC_RDMA_PROTECT_REGIONS ? "a memory region per destination"
                              : "the pool's rkey");
            }
        }
#endif
        omc_conn_destroy(cons.conn);
    }
    close(fds_msg[0]);
    close(fds_ack[1]);
    free(src);
    free(scratch);
    exit(crc);
}

/* Two processes (shm, tcp, rdma on one host): fork the consumer, then make the producer. */
static int bench_start_processes(bench_run* b) {
    bench_opts* o = &b->o;
    char pool[32];
    sigset_t stop, old;
    fflush(stdout);
    fflush(stderr);
    signal(SIGINT, bench_on_signal);
    signal(SIGTERM, bench_on_signal);
    b->pid = fork();
    if (b->pid == 0) bench_consumer_process(b);
    close(b->fds_msg[0]);
    close(b->fds_ack[1]);
    if (b->pid < 0) return 1;
    /* Ctrl-C or SIGTERM while the segment is being made waits until its name is known, then
       removes it */
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, &old);
    fprintf(stderr, "omniconn bench: setting up the producer (%s pool)...\n", size_text(pool_for(o), pool, sizeof(pool)));
    b->prod.conn = pin_to(o->cpu_producer) == 0 ? bench_connector(o, OMC_ROLE_SENDER, b->channel) : NULL;
    if (b->prod.conn && strcmp(o->transport, "shm") == 0) omc_shm_segment_path(b->prod.conn, bench_segment, sizeof(bench_segment));
    sigprocmask(SIG_SETMASK, &old, NULL);
    return b->prod.conn ? 0 : 1;
}

/* Step 6: the table, one row per size. */
static int bench_measure(bench_run* b) {
    bench_opts* o = &b->o;
    char host[256] = "";
    int i, processes = b->processes;
    if (o->iters) fprintf(stderr, "omniconn bench: set up; measuring %d size%s (%ld transfers each)\n", o->nsizes, o->nsizes == 1 ? "" : "s", o->iters);
    else fprintf(stderr, "omniconn bench: set up; measuring %d size%s (at most about %.1f s each)\n", o->nsizes, o->nsizes == 1 ? "" : "s",
                 1.5 * (o->duration > 0 ? o->duration : (double)BENCH_PHASE_NS / 1e9));
    gethostname(host, sizeof(host) - 1);
    printf("omniconn bench: %s, producer and consumer in %s, %d size%s (%s, %ld CPUs)\n", o->transport,
           o->remote ? "two hosts (the consumer connected from the other)" : processes == 2 ? "two processes" : "two threads (the same-process connector)", o->nsizes, o->nsizes == 1 ? "" : "s", host, sysconf(_SC_NPROCESSORS_ONLN));
    printf("  put = %s; get = %s; metadata over %s\n", o->copy_put ? "put from the caller's memory (the connector copies)"
           : "pool buffer + one memcpy + zero-copy put",
           strcmp(o->transport, "tcp") == 0 ? "pull into the consumer's pool"
           : strcmp(o->transport, "rdma") == 0 ? "the producer RDMA-WRITEs into the consumer's pool" : "a zero-copy view",
           o->remote ? "the control connection" : "a pipe");
    printf("  units: %s, msg/s = transfers per second; latency in us, %s, one transfer at a time; put = %s; in flight: ",
           o->gbits ? "Gb/s = 10^9 bits/s" : "GB/s = 10^9 bytes/s", o->remote ? "round trip (put -> get there -> ack back)" : "one way",
           o->copy_put ? "copy from the caller's memory" : "zero-copy");
    if (o->inflight) printf("at most %ld", o->inflight);
    else printf("as many as the pool holds");
    if (o->batch) printf("; gets in batches of up to %ld (omc_conn_get_batch, one thread)", o->batch);
    if (o->readers > 1) printf("; fan-out: %u gets per payload, GB/s counts the bytes read\n", o->readers);
    else printf("\n");
    print_header(o);
    fflush(stdout);
    for (i = 0; i < o->nsizes; i++) {
        if (producer_size(&b->prod, o, &b->pg, o->sizes[i], b->src, b->scratch, &b->next_index, &b->rows[i]) != 0) return 1;
        print_row(o, &b->rows[i]);
        if (o->timeline > 0) print_timeline(o);
    }
    return 0;
}

/* Step 7: stop the consumer, check how it ended, tear down, write the files. */
static int bench_finish(bench_run* b, int rc) {
    bench_opts* o = &b->o;
    bench_msg m;
    memset(&m, 0, sizeof(m));
    m.kind = MSG_QUIT;
    write_all(b->fds_msg[1], &m, sizeof(m));
    close(b->fds_msg[1]);
    if (b->thread_started) pthread_join(b->th, NULL);
    if (b->pid > 0) {
        int st = 0;
        waitpid(b->pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { if (rc == 0) fprintf(stderr, "omniconn bench: the consumer failed\n"); rc = 1; }
    }
    if (rc == 0 && b->prod.sh->plane_known) {
        if (b->prod.sh->tcp_fallbacks || !b->prod.sh->rdma_channels) {
            fprintf(stderr, "omniconn bench: rdma: the consumer fell back to TCP: %s\n", b->prod.sh->plane);
            rc = 1;
        } else printf("\n  rdma: %llu connection(s): %s\n", (unsigned long long)b->prod.sh->rdma_channels, b->prod.sh->plane);
    }
    if (b->prod.conn && strcmp(o->transport, "rdma") == 0) print_rails(b->prod.conn);
    if (b->prod.conn) omc_conn_destroy(b->prod.conn);
    bench_segment[0] = '\0';
    if (b->processes == 2) { signal(SIGINT, SIG_DFL); signal(SIGTERM, SIG_DFL); }
    if (b->processes == 1) close(b->fds_msg[0]);
    close(b->fds_ack[0]);
    if (b->processes == 1) close(b->fds_ack[1]);
    munmap(b->prod.sh, sizeof(bench_shared));
    free(b->src);
    free(b->scratch);
    if (rc == 0 && o->json && write_json(o, b->rows, o->nsizes, b->processes) != 0) rc = 1;
    if (rc == 0 && o->plot && write_plot(o, b->rows, o->nsizes, b->processes) != 0) rc = 1;
    return rc;
}

/* omniconn bench: options, sizes, checks; a consumer for another host's bench (HOST given);
   else set up, start by mode (serve / threads / processes), measure, finish. */
static int cmd_bench(int argc, char** argv) {
    static bench_run run;
    bench_run* b = &run;
    const char* list = "4K,64K,1M,16M";
    int rc;
    memset(b, 0, sizeof(*b));
    b->next_index = 2 * BENCH_MAX_LAT;
    b->processes = 2;
    b->pid = -1;
    if ((rc = bench_parse_options(argc, argv, &b->o, &list)) >= 0) return rc;
    if (b->o.peer) return bench_consumer_for(&b->o);
    if ((rc = bench_parse_sizes(&b->o, list)) != 0) return rc;
    if ((rc = bench_check_options(&b->o)) >= 0) return rc;
    if (bench_memory_check(&b->o) != 0) return 1;
    signal(SIGPIPE, SIG_IGN);       /* a consumer gone: write() fails and we say so */
    if (b->o.progress < 0) b->o.progress = isatty(2);
    if (bench_setup(b) != 0) return 1;
    if (b->o.serve) rc = bench_start_serving(b);
    else if (strcmp(b->o.transport, "local") == 0) rc = bench_start_threads(b);
    else rc = bench_start_processes(b);
    if (rc == 0) rc = bench_measure(b);
    return bench_finish(b, rc);
}

/* ============================================================================================== */
/* doctor                                                                                         */
/* ============================================================================================== */

typedef struct doctor {
    int fails, warns, oks;
    const char* shm_dir;
    int sweep;
    omc_pipeline_config* cfg;
    const char* config;
    int rdma_edges, tcp_edges, shm_edges;
    int auto_hosts;             /* TCP/RDMA specs in use whose host is "auto" */
    uint64_t rdma_pool_need;    /* the most one stage registers (sum of its RDMA specs' pools) */
    uint64_t shm_need;          /* /dev/shm the config's sending stages reserve on one host */
    char host[OMC_TCP_HOST_MAX];    /* this host's address ("auto"), or "" */
    const char* host_how;
    const char* rdma_addr;      /* the address RDMA GIDs are chosen for: an RDMA spec's host, else ours */
    const char* sysfs;          /* where the NIC topology is read (default /sys) */
    int numa;                   /* the memory's NUMA node for the ranking (-2 = this CPU's) */
    const char* gpu;            /* rank for a GPU at this PCI address instead (NULL = host memory) */
    const char* key_opt[3][8];  /* --key, --server-key, --allow FILE (each repeatable) */
    int key_opts[3];
} doctor;

enum { OK, WARN, FAIL };

/* One finding: "OK    check         what was found. Fix: what to do." */
static void report(doctor* d, int level, const char* check, const char* fmt, ...) {
    static const char* const tag[] = { "OK", "WARN", "FAIL" };
    va_list ap;
    if (level == OK) d->oks++; else if (level == WARN) d->warns++; else d->fails++;
    printf("%-4s  %-13s ", tag[level], check);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* ---- config and ports ---------------------------------------------------------------------- */

static void doctor_config(doctor* d) {
    omc_pipeline_config_desc cd;
    omc_config_diag err;
    uint32_t i, j, n, ns;
    memset(&cd, 0, sizeof(cd));
    cd.skip_port_check = 1;         /* list every collision below instead of stopping at the first */
    if (omc_pipeline_config_load_file(d->config, &cd, &d->cfg, &err) != OMC_OK) {
        report(d, FAIL, "config", "%s", err.message);
        return;
    }
    n = omc_pipeline_config_edge_count(d->cfg);
    for (i = 0; i < n; i++) {
        omc_pipeline_edge e;
        omc_pipeline_config_edge(d->cfg, i, &e);
        if (e.transport == OMC_TRANSPORT_RDMA) d->rdma_edges++;
        else if (e.transport == OMC_TRANSPORT_TCP) d->tcp_edges++;
        else if (e.transport == OMC_TRANSPORT_SHM) d->shm_edges++;
        if (e.transport == OMC_TRANSPORT_RDMA || e.transport == OMC_TRANSPORT_TCP) {
            omc_connector_spec s;
            omc_pipeline_config_connector(d->cfg, e.connector, &s);
            d->auto_hosts += strcmp(s.host, "auto") == 0;
        }
    }
    report(d, OK, "config", "%s: %u stages, %u edges (%d shm, %d tcp, %d rdma), connector specs: %u", d->config,
           omc_pipeline_config_stage_count(d->cfg), n, d->shm_edges, d->tcp_edges, d->rdma_edges, omc_pipeline_config_connector_count(d->cfg));
    for (i = 0; i < omc_pipeline_config_warning_count(d->cfg); i++)
        if (omc_pipeline_config_warning(d->cfg, i, &err) == OMC_OK) report(d, WARN, "config", "%s", err.message);
    for (i = 0; i < omc_pipeline_config_connector_count(d->cfg); i++) {    /* who can reach the listeners */
        omc_connector_spec s;
        int loop;
        omc_pipeline_config_connector(d->cfg, i, &s);
        loop = strncmp(s.host, "127.", 4) == 0 || strcmp(s.host, "localhost") == 0 || strcmp(s.host, "::1") == 0;
        if ((s.transport != OMC_TRANSPORT_TCP && s.transport != OMC_TRANSPORT_RDMA) || (loop && !s.curve_server_secret_key_file)) continue;
        if (!s.curve_server_secret_key_file)
            report(d, s.insecure ? WARN : FAIL, "security", "connector '%s' (line %u): host %s without CURVE%s: anyone who can reach it can "
                   "read the payloads. Fix: curve_server_secret_key_file and curve_allowed_clients_file in its extra", s.name, s.line, s.host,
                   s.insecure ? " (insecure: true)" : ": its sending stages are refused");
        else if (!s.curve_allowed_clients_file)
            report(d, WARN, "security", "connector '%s' (line %u): CURVE without an allow-list: any receiver that knows the public key gets "
                   "in. Fix: curve_allowed_clients_file", s.name, s.line);
    }
    /* what each stage reserves: a stage creates one connector per spec it uses
       (omc_pipeline_connect); an SHM one owns a segment if the stage sends on that spec; an RDMA
       one registers (pins) its pool at both ends */
    ns = omc_pipeline_config_stage_count(d->cfg);
    for (i = 0; i < ns; i++) {
        omc_pipeline_stage st;
        uint64_t rdma = 0;
        uint32_t c, nc = omc_pipeline_config_connector_count(d->cfg);
        omc_pipeline_config_stage(d->cfg, i, &st);
        for (c = 0; c < nc; c++) {
            omc_connector_spec s;
            omc_config_value v;
            int uses = 0, sends = 0;
            for (j = 0; j < n; j++) {
                omc_pipeline_edge e;
                omc_pipeline_config_edge(d->cfg, j, &e);
                if (e.connector != c) continue;
                if (e.from_stage == st.stage_id) uses = sends = 1;
                if (e.to_stage == st.stage_id) uses = 1;
            }
            if (!uses) continue;
            omc_pipeline_config_connector(d->cfg, c, &s);
            if (s.transport == OMC_TRANSPORT_RDMA) rdma += s.memory_pool_size;
            if (s.transport == OMC_TRANSPORT_SHM && sends)      /* the file's size, else the connector's 256 MiB */
                d->shm_need += omc_pipeline_connector_option(d->cfg, c, "memory_pool_size", &v) == OMC_OK ? s.memory_pool_size
                                                                                                       : ((uint64_t)256 << 20);
        }
        if (rdma > d->rdma_pool_need) d->rdma_pool_need = rdma;
    }
}

/* Can we bind this TCP port on every interface right now? */
static int port_free(uint16_t port) {
    struct sockaddr_in a;
    int s = socket(AF_INET, SOCK_STREAM, 0), ok;
    if (s < 0) return 1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    ok = bind(s, (struct sockaddr*)&a, sizeof(a)) == 0 || errno != EADDRINUSE;
    close(s);
    return ok;
}

static int host_is_here(const doctor* d, const char* host) {
    return strcmp(host, "auto") == 0 || strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
           strcmp(host, "::1") == 0 || strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0 || (d->host[0] && strcmp(host, d->host) == 0);
}

static void doctor_ports(doctor* d) {
    uint32_t i, n = omc_pipeline_config_port_count(d->cfg), busy = 0, collisions = 0;
    uint16_t first_busy = 0;
    char busy_list[256] = "";
    if (!d->tcp_edges && !d->rdma_edges) { report(d, OK, "ports", "no TCP/RDMA edges: no ports to listen on"); return; }
    for (i = 0; i < n; i++) {
        omc_port_use a, b;
        omc_pipeline_config_port(d->cfg, i, &b);
        if (i > 0) {
            omc_pipeline_config_port(d->cfg, i - 1, &a);
            if (a.port == b.port && strcmp(a.host, b.host) == 0) {
                collisions++;
                report(d, FAIL, "ports", "port %u on host '%s' is used twice: by edge %d->%d (%s, dp %u, tp rank %u) and by edge %d->%d "
                       "(%s, dp %u, tp rank %u). Fix: give one of their connectors another zmq_port, or leave more room between "
                       "the stage ids", b.port, b.host, a.from_stage, a.to_stage, a.orchestrator ? "orchestrator" : a.purpose ? "kv_transfer" :
                       "request_forwarding", a.dp_index, a.tp_rank, b.from_stage, b.to_stage, b.orchestrator ? "orchestrator" : b.purpose ?
                       "kv_transfer" : "request_forwarding", b.dp_index, b.tp_rank);
            }
        }
        if (host_is_here(d, b.host) && !port_free(b.port)) {
            size_t len = strlen(busy_list);
            if (len < sizeof(busy_list) - 8) snprintf(busy_list + len, sizeof(busy_list) - len, "%s%u", busy ? " " : "", b.port);
            if (!busy++) first_busy = b.port;
        }
    }
    if (!collisions) report(d, OK, "ports", "%u listeners (both purposes, every DP replica and TP rank, orchestrators), no collision", n);
    if (busy)
        report(d, WARN, "ports", "%u of them are taken on this host right now: %s. Fix: stop what holds them (ss -ltnp 'sport = :%u'), "
               "or move zmq_port", busy, busy_list, first_busy);
}

static void doctor_host(doctor* d) {
    if (omc_detect_host(0, d->host, sizeof(d->host), &d->host_how) != OMC_OK) {
        d->host[0] = '\0';
        report(d, (d->tcp_edges || d->rdma_edges) ? FAIL : WARN, "host", "this host's address cannot be detected (host: auto). "
               "Fix: set host to this host's address in the connector's extra");
        return;
    }
    if (strcmp(d->host_how, "loopback") == 0 && (!d->cfg || d->auto_hosts))
        report(d, d->auto_hosts ? WARN : OK, "host", "host: auto gives %s (loopback: no default route, no address for the "
               "host name): only stages on this host can connect. Fix: set host to an address the other hosts reach", d->host);
    else if (strcmp(d->host_how, "loopback") == 0)
        report(d, OK, "host", "host: auto would give %s (loopback), but the config's TCP/RDMA connectors name their hosts", d->host);
    else report(d, OK, "host", "host: auto gives %s (from the %s)", d->host, strcmp(d->host_how, "route") == 0 ? "default route" : "host name");
}

/* ---- libraries ------------------------------------------------------------------------------ */

static void doctor_libs(doctor* d) {
    char why[256] = "";
    int need_rdma = d->rdma_edges > 0;
#if OMC__HAS_ZMQ
    {
        /* the libzmq omniconn itself loads (the one its remote connectors will use), not one
           linked into this tool */
        char zwhy[512] = "";
        int maj = 0, min = 0, pat = 0;
        if (omc__zmq_load(zwhy, sizeof(zwhy)) == OMC_OK) {
            omc__zmq_version(&maj, &min, &pat);
            report(d, OK, "libzmq", "%d.%d.%d (loaded by omniconn), CURVE %s", maj, min, pat,
                   omc__zmq_has("curve") ? "available" : "NOT available");
        } else report(d, d->tcp_edges || d->rdma_edges ? FAIL : WARN, "libzmq", "%s", zwhy);
    }
#else
    report(d, d->tcp_edges || d->rdma_edges ? FAIL : WARN, "libzmq", "built without ZMQ (OMNICONN_NO_ZMQ): no TCP/RDMA transports. "
           "Fix: rebuild without OMNICONN_NO_ZMQ (Debian: apt-get install libzmq3-dev)");
#endif
    {
        omc_result r = omc_rdma_probe(NULL, why, sizeof(why));
        if (r == OMC_OK) report(d, OK, "libibverbs", "libibverbs.so.1 loads and lists a device%s%s", why[0] ? ": " : "", why);
        else if (r == OMC_ERR_RDMA_DEVICE) report(d, OK, "libibverbs", "libibverbs.so.1 loads (it lists no device: see the rdma check)");
        else if (r == OMC_ERR_UNAVAILABLE)
            report(d, need_rdma ? FAIL : WARN, "libibverbs", "%s. Fix: apt-get install ibverbs-providers rdma-core%s", why,
                   need_rdma ? "" : " (needed only for RDMA)");
        else report(d, need_rdma ? FAIL : WARN, "libibverbs", "loads, but %s", why);
    }
}

/* ---- RDMA devices, ports, GIDs (sysfs: what libibverbs itself reads) ------------------------- */

static int read_line(const char* path, char* out, size_t n) {
    FILE* f = fopen(path, "r");
    size_t len;
    if (!f) return -1;
    if (!fgets(out, (int)n, f)) { fclose(f); return -1; }
    fclose(f);
    len = strlen(out);
    while (len && (out[len - 1] == '\n' || out[len - 1] == ' ')) out[--len] = '\0';
    return 0;
}

/* "fe80:0000:0000:0000:0211:22ff:fe33:4455" -> 16 bytes */
static int parse_gid(const char* s, uint8_t out[16]) {
    int i;
    for (i = 0; i < 8; i++) {
        unsigned v;
        if (sscanf(s, "%4x", &v) != 1) return -1;
        out[2 * i] = (uint8_t)(v >> 8);
        out[2 * i + 1] = (uint8_t)v;
        s = strchr(s, ':');
        if (i < 7) { if (!s) return -1; s++; }
    }
    return 0;
}

static void doctor_rdma_port(doctor* d, const char* dev, const char* port) {
    char path[1200], state[64] = "?", link[64] = "?", rate[64] = "?", line[128], want_text[64] = "";
    uint8_t want[16];
    int have_want = 0, active, i, n = 0, max_gids = 256;
    static const char* const type_name[] = { "?", "IB", "RoCE v1", "RoCE v2" };
    omc_rdma_gid_entry* table = (omc_rdma_gid_entry*)calloc((size_t)max_gids, sizeof(omc_rdma_gid_entry));
    omc_rdma_link lk;
    uint32_t chosen = 0;
    char why[256] = "";
    if (!table) return;
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/state", dev, port);
    read_line(path, state, sizeof(state));
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/link_layer", dev, port);
    read_line(path, link, sizeof(link));
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/rate", dev, port);
    read_line(path, rate, sizeof(rate));
    active = strstr(state, "ACTIVE") != NULL;
    report(d, active ? OK : WARN, "rdma port", "%s port %s: %s, %s, %s%s", dev, port, state, link, rate,
           active ? "" : ". Fix: bring the link up (ip link set <netdev> up; for Soft-RoCE the netdev of rdma link)");
    for (i = 0; i < max_gids; i++) {
        uint8_t gid[16];
        char type[32] = "", ndev[32] = "", text[128];
        int t = 0, zero = 1, k;
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/gids/%d", dev, port, i);
        if (read_line(path, line, sizeof(line)) != 0) break;
        if (parse_gid(line, gid) != 0) continue;
        for (k = 0; k < 16; k++) zero &= gid[k] == 0;
        if (zero) continue;
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/gid_attrs/types/%d", dev, port, i);
        read_line(path, type, sizeof(type));
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%s/gid_attrs/ndevs/%d", dev, port, i);
        read_line(path, ndev, sizeof(ndev));
        t = strstr(link, "InfiniBand") ? 1 : strstr(type, "v2") ? 3 : strstr(type, "v1") ? 2 : 0;
        snprintf(text, sizeof(text), "%s", line);
        omc_rdma_gid_to_text(gid, text, sizeof(text));
        memcpy(table[n].gid, gid, 16);
        table[n].index = (uint32_t)i;
        table[n].type = (omc_rdma_gid_type)t;
        snprintf(table[n].netdev, sizeof(table[n].netdev), "%s", ndev);
        printf("                    gid %-3d %-40s %-8s %s\n", i, text, type_name[t], ndev);
        n++;
    }
    if (d->rdma_addr && omc_rdma_addr_to_gid(d->rdma_addr, want) == OMC_OK) { have_want = 1; snprintf(want_text, sizeof(want_text), ", for %s", d->rdma_addr); }
    lk = strstr(link, "InfiniBand") ? OMC_RDMA_LINK_INFINIBAND : strstr(link, "Ethernet") ? OMC_RDMA_LINK_ETHERNET : OMC_RDMA_LINK_UNKNOWN;
    if (n == 0) report(d, WARN, "rdma gid", "%s port %s has no GID. Fix: give its netdev an IP address (RoCE fills the table from them)", dev, port);
    else if (omc_rdma_choose_gid(table, (uint32_t)n, lk, have_want ? want : NULL, -1, &chosen, why, sizeof(why)) == OMC_OK)
        report(d, OK, "rdma gid", "%s port %s%s: %s", dev, port, want_text, why);
    else report(d, WARN, "rdma gid", "%s port %s: no usable GID%s: %s", dev, port, want_text, why);
    free(table);
}

/* The engine's own choice, made the way a connector makes it (omc_rdma_create): the proof that
   what the lines above describe can be opened and used. Its log goes into a buffer so the
   reason can be shown on the check's line. */
static char rdma_log_last[320];
static void rdma_log(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level <= OMC_LOG_WARN) snprintf(rdma_log_last, sizeof(rdma_log_last), "%s", msg);
}

static void doctor_rdma_engine(doctor* d) {
    static const char* const prot[] = { "default", "memory windows", "a region per destination", "the pool's own rkey" };
    omc_rdma_desc rd;
    omc_rdma* eng = NULL;
    omc_rdma_info info;
    uint8_t gid[16];
    char text[64];
    const char* device = NULL;
    uint32_t i, n = d->cfg ? omc_pipeline_config_connector_count(d->cfg) : 0;
    omc_result r;
    memset(&rd, 0, sizeof(rd));
    rd.hooks.log_fn = rdma_log;
    if (d->rdma_addr && omc_rdma_addr_to_gid(d->rdma_addr, gid) == OMC_OK) rd.local_addr = d->rdma_addr;
    for (i = 0; i < n && !device; i++) {       /* the first RDMA spec's device_name, as a stage would use it */
        omc_connector_spec s;
        if (omc_pipeline_config_connector(d->cfg, i, &s) == OMC_OK && s.transport == OMC_TRANSPORT_RDMA && s.device_name[0]) device = s.device_name;
    }
    rd.devices = device;
    rdma_log_last[0] = '\0';
    r = omc_rdma_create(&rd, &eng);
    if (r != OMC_OK) {
        report(d, d->rdma_edges ? FAIL : WARN, "rdma engine", "omc_rdma_create%s%s: %s: %s", device ? " on " : "", device ? device : "",
               omc_result_str(r), rdma_log_last[0] ? rdma_log_last : "(no log line)");
        return;
    }
    omc_rdma_query(eng, &info);
    omc_rdma_gid_to_text(info.gid, text, sizeof(text));
    report(d, OK, "rdma engine", "omc_rdma_create%s%s opens %s port %u: GID index %u (%s), active MTU %u, destinations protected by %s%s",
           rd.local_addr ? " for " : "", rd.local_addr ? rd.local_addr : "", info.device, info.port, info.gid_index, text, info.active_mtu,
           (unsigned)info.protection < 4 ? prot[info.protection] : "?",
           info.window_bounds == 0 ? " (this device does not enforce window bounds)" : "");
#if defined(OMC_RDMA_MAX_RAILS)
    {   /* the rails it stripes over, in its order, and their state */
        omc_rdma_rail_stat st[OMC_RDMA_MAX_RAILS];
        int k, rails = omc_rdma_rail_stats(eng, st, OMC_RDMA_MAX_RAILS);
        for (k = 0; k < rails && k < OMC_RDMA_MAX_RAILS; k++)
            report(d, st[k].up ? OK : WARN, "rdma rail", "rail %d of %d: %s port %u%s%s%s, GID %s (index %u), NUMA node %d, traffic class %u, "
                   "service level %u (OMNICONN_IB_TC / OMNICONN_IB_SL): %s%s%s%s", k, rails,
                   st[k].device, st[k].port, st[k].netdev[0] ? " (" : "", st[k].netdev, st[k].netdev[0] ? ")" : "", st[k].gid, st[k].gid_index,
                   st[k].numa_node, st[k].traffic_class, st[k].service_level, st[k].up ? "up" : "down", st[k].why[0] ? ": " : "", st[k].why,
                   st[k].up ? "" : ". Fix: bring its link up (ip link set <netdev> up), or leave it out (desc.devices / RDMA_DEVICE_NAME)");
    }
#endif
    omc_rdma_destroy(eng);
}

/* ---- NIC choice by topology ----------------------------------------------------------------- */

/* The NUMA node of the CPU this runs on (<root>/devices/system/cpu/cpuN/nodeM), or -1. */
static int doctor_this_numa(const char* root) {
    char path[600];
    struct stat sb;
    int cpu = sched_getcpu(), node;
    if (cpu < 0) return -1;
    for (node = 0; node < 1024; node++) {
        snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu%d/node%d", root, cpu, node);
        if (stat(path, &sb) == 0) return node;
    }
    return -1;
}

/* Every RDMA device ranked for the memory a transfer would use (omc_rdma_topo_rank: PCIe switch,
   root complex, NUMA node), nearest first, each with why. The engine stripes over its rails in
   this order when no device list is given. */
static void doctor_topology(doctor* d) {
    enum { CAP = 32 };
    omc_rdma_topo_nic* nics = (omc_rdma_topo_nic*)calloc(CAP, sizeof(*nics));
    omc_rdma_topo_choice* rank = (omc_rdma_topo_choice*)calloc(CAP, sizeof(*rank));
    char gpu_path[OMC_RDMA_TOPO_PATH_MAX], what[160];
    int n, i, numa = d->numa, gpu_numa = -1, have_gpu = 0;
    if (!nics || !rank) { free(nics); free(rank); report(d, WARN, "rdma topology", "out of memory"); return; }
    n = omc_rdma_topo_read(d->sysfs, nics, CAP);
    if (n <= 0) {
        if (strcmp(d->sysfs, "/sys") != 0) report(d, WARN, "rdma topology", "%s/class/infiniband lists no device", d->sysfs);
        free(nics); free(rank);
        return;
    }
    if (n > CAP) n = CAP;
    if (d->gpu) {
        have_gpu = omc_rdma_topo_pci_device(d->sysfs, d->gpu, gpu_path, sizeof(gpu_path), &gpu_numa);
        if (!have_gpu) report(d, WARN, "rdma topology", "no PCI device %s under %s/bus/pci/devices: ranking for host memory", d->gpu, d->sysfs);
    }
    if (numa == -2) numa = have_gpu ? -1 : doctor_this_numa(d->sysfs);
    omc_rdma_topo_rank(nics, n, numa, have_gpu ? gpu_path : NULL, gpu_numa, rank);
    if (have_gpu) snprintf(what, sizeof(what), "the GPU at %s (NUMA node %d)", d->gpu, gpu_numa);
    else if (numa >= 0) snprintf(what, sizeof(what), "memory on NUMA node %d%s", numa, d->numa == -2 ? " (this CPU's; --numa, --gpu to change)" : "");
    else snprintf(what, sizeof(what), "memory on a NUMA node not known (--numa, --gpu to give one)");
    report(d, OK, "rdma topology", "%d device%s, nearest first for %s", n, n == 1 ? "" : "s", what);
    for (i = 0; i < n; i++) report(d, OK, "rdma rank", "%d. %s [%s]", i + 1, rank[i].why, omc_rdma_topo_tier_name(rank[i].tier));
    free(nics);
    free(rank);
}

static void doctor_rdma(doctor* d) {
    DIR* dir = opendir("/sys/class/infiniband");
    struct dirent* de;
    int devices = 0, level = d->rdma_edges ? FAIL : WARN;
    uint32_t i, n = d->cfg ? omc_pipeline_config_connector_count(d->cfg) : 0;
    /* GIDs follow the address the side channel uses: an RDMA spec's host if it names one */
    d->rdma_addr = d->host[0] ? d->host : NULL;
    for (i = 0; i < n; i++) {
        omc_connector_spec s;
        if (omc_pipeline_config_connector(d->cfg, i, &s) == OMC_OK && s.transport == OMC_TRANSPORT_RDMA && strcmp(s.host, "auto") != 0) {
            d->rdma_addr = s.host;
            break;
        }
    }
    if (!dir) {
        report(d, level, "rdma", "no RDMA device (/sys/class/infiniband does not exist: no HCA driver loaded)%s. Fix: load the driver "
               "(mlx5_ib, ...), or Soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <interface>%s",
               d->rdma_edges ? "" : "; needed only for RDMA edges",
               d->rdma_edges ? "; or run the RDMA edges over TCP: protocol: tcp, or rdma_fallback_tcp (pipeline3 --rdma-fallback)" : "");
        return;
    }
    while ((de = readdir(dir)) != NULL) {
        char path[1200];
        DIR* ports;
        struct dirent* pe;
        if (de->d_name[0] == '.') continue;
        devices++;
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports", de->d_name);
        ports = opendir(path);
        if (!ports) continue;
        while ((pe = readdir(ports)) != NULL) if (pe->d_name[0] != '.') doctor_rdma_port(d, de->d_name, pe->d_name);
        closedir(ports);
    }
    closedir(dir);
    if (!devices) report(d, level, "rdma", "/sys/class/infiniband lists no device. Fix: Soft-RoCE: rdma link add rxe0 type rxe netdev <interface>");
    else { doctor_topology(d); doctor_rdma_engine(d); }
}

/* ---- memlock -------------------------------------------------------------------------------- */

static int has_cap_ipc_lock(void) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[256];
    int yes = 0;
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "CapEff:", 7) == 0) { unsigned long long caps = strtoull(line + 7, NULL, 16); yes = (caps >> 14) & 1; }
    fclose(f);
    return yes;
}

static void doctor_memlock(doctor* d) {
    struct rlimit rl;
    char lim[32], need[32];
    const char* fix = "Fix: ulimit -l unlimited (as root), or memlock in /etc/security/limits.conf (\"* - memlock unlimited\"), "
                      "LimitMEMLOCK=infinity for systemd units, --ulimit memlock=-1 for docker run";
    int cap = has_cap_ipc_lock(), devices = access("/sys/class/infiniband", F_OK) == 0;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) { report(d, WARN, "memlock", "getrlimit(RLIMIT_MEMLOCK) failed: %s", strerror(errno)); return; }
    if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof(lim), "unlimited");
    else size_text((uint64_t)rl.rlim_cur, lim, sizeof(lim));
    if (rl.rlim_cur == RLIM_INFINITY || cap) {
        report(d, OK, "memlock", "ulimit -l is %s%s: RDMA pools of any size can be registered", lim, cap ? " but CAP_IPC_LOCK lifts it" : "");
        return;
    }
    if (d->rdma_edges) {
        size_text(d->rdma_pool_need, need, sizeof(need));
        if ((uint64_t)rl.rlim_cur < d->rdma_pool_need)
            report(d, FAIL, "memlock", "ulimit -l is %s, but a stage of this config registers %s of RDMA pool (memory_pool_size): "
                   "the registration fails with OMC_ERR_MEMLOCK. %s", lim, need, fix);
        else report(d, OK, "memlock", "ulimit -l is %s; the config's RDMA pools need %s per stage", lim, need);
        return;
    }
    if (devices)
        report(d, WARN, "memlock", "ulimit -l is %s: an RDMA pool larger than that cannot be registered (vLLM-Omni's default pool is "
               "4 GiB). %s", lim, fix);
    else report(d, OK, "memlock", "ulimit -l is %s (only RDMA registers memory, and %s)", lim,
                d->cfg ? "the config has no RDMA edge" : "this host has no RDMA device");
}

/* ---- /dev/shm -------------------------------------------------------------------------------- */

static void doctor_shm_space(doctor* d) {
    struct statvfs sv;
    char total[32], avail[32], need[32];
    uint64_t t, a;
    if (statvfs(d->shm_dir, &sv) != 0 || access(d->shm_dir, W_OK) != 0) {
        report(d, d->shm_edges ? FAIL : WARN, "shm", "%s is missing or not writable (%s). Fix: mount -t tmpfs -o size=2G tmpfs %s",
               d->shm_dir, strerror(errno), d->shm_dir);
        return;
    }
    t = (uint64_t)sv.f_blocks * sv.f_frsize;
    a = (uint64_t)sv.f_bavail * sv.f_frsize;
    size_text(t, total, sizeof(total));
    size_text(a, avail, sizeof(avail));
    if (d->cfg && d->shm_need) {
        size_text(d->shm_need, need, sizeof(need));
        if (a < d->shm_need)
            report(d, FAIL, "shm", "%s has %s free of %s, but the config's sending stages reserve %s: a sender fails with OMC_ERR_SHM_FULL. "
                   "Fix: mount -o remount,size=%lluM %s (docker run --shm-size=%lluM), or lower memory_pool_size", d->shm_dir, avail, total, need,
                   (unsigned long long)((d->shm_need + (t - a)) >> 20) + 64, d->shm_dir, (unsigned long long)((d->shm_need + (t - a)) >> 20) + 64);
        else report(d, OK, "shm", "%s: %s free of %s; the config's sending stages reserve %s (if all run on this host)", d->shm_dir, avail, total, need);
        return;
    }
    if (d->cfg) report(d, OK, "shm", "%s: %s free of %s; no stage of the config sends over shared memory", d->shm_dir, avail, total);
    else if (t < ((uint64_t)1 << 30))
        report(d, WARN, "shm", "%s is only %s (%s free): one sending stage reserves 256 MiB by default. Fix: mount -o remount,size=2G %s "
               "(docker run --shm-size=2g)", d->shm_dir, total, avail, d->shm_dir);
    else report(d, OK, "shm", "%s: %s free of %s", d->shm_dir, avail, total);
}

/* The owner of a segment: pid + the start time recorded in the header (the connector's own rule:
   alive = the pid exists, is not a zombie, and started at that time). */
static int owner_alive(uint32_t pid, uint64_t start) {
    char path[64], buf[1024], *p;
    FILE* f;
    size_t n;
    int field;
    unsigned long long st = 0;
    char state = '?';
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    f = fopen(path, "r");
    if (!f) return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');          /* the command name may hold spaces and parentheses */
    if (!p) return 1;
    p += 2;
    state = *p;
    for (field = 3; field < 22 && p; field++) { p = strchr(p, ' '); if (p) p++; }
    if (p) st = strtoull(p, NULL, 10);
    if (state == 'Z' || state == 'X') return 0;
    return start == 0 || st == start;
}

static void doctor_shm_leftovers(doctor* d) {
    DIR* dir = opendir(d->shm_dir);
    struct dirent* de;
    char prefix[32], listing[512] = "";
    uint32_t live = 0, dead = 0, foreign = 0, removed = 0;
    uint64_t dead_bytes = 0;
    if (!dir) return;
    snprintf(prefix, sizeof(prefix), "omc-%u-", (unsigned)geteuid());
    while ((de = readdir(dir)) != NULL) {
        char path[OMC_SHM_PATH_MAX];
        uint8_t hdr[128];
        uint32_t magic = 0, pid = 0, uid = 0;
        uint64_t start = 0;
        struct stat stt;
        int fd;
        ssize_t got;
        if (strncmp(de->d_name, "omc-", 4) != 0) continue;
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0) { foreign++; continue; }
        snprintf(path, sizeof(path), "%s/%s", d->shm_dir, de->d_name);
        fd = open(path, O_RDONLY | O_NOFOLLOW);
        if (fd < 0) continue;
        got = pread(fd, hdr, sizeof(hdr), 0);
        if (fstat(fd, &stt) != 0) stt.st_size = 0;
        close(fd);
        if (got == (ssize_t)sizeof(hdr) && stt.st_size >= 4096) {
            /* omniconn_shm.h's segment header (WIRE FORMATS there): magic at 0, owner start time
               at 80, owner pid at 88, owner uid at 92 */
            memcpy(&magic, hdr, 4);
            memcpy(&start, hdr + 80, 8);
            memcpy(&pid, hdr + 88, 4);
            memcpy(&uid, hdr + 92, 4);
        }
        if (magic != 0x53434D4Fu || pid == 0 || uid != (uint32_t)geteuid()) {
            /* too short to be a segment (being created, or cut short): the pid from the name,
               omc-<uid>-<channel>-<pid>-<id> */
            const char* dash = strrchr(de->d_name, '-');
            const char* p = dash;
            while (p && p > de->d_name && p[-1] != '-') p--;
            pid = p && dash ? (uint32_t)strtoul(p, NULL, 10) : 0;
            start = 0;
        }
        if (pid && owner_alive(pid, start)) { live++; continue; }
        dead++;
        dead_bytes += (uint64_t)stt.st_size;
        if (strlen(listing) + strlen(de->d_name) + 24 < sizeof(listing))
            snprintf(listing + strlen(listing), sizeof(listing) - strlen(listing), "%s%s (pid %u)", dead > 1 ? ", " : "", de->d_name, pid);
    }
    closedir(dir);
    if (dead && d->sweep) {
        omc_shm_desc sd;
        memset(&sd, 0, sizeof(sd));
        sd.shm_dir = d->shm_dir;
        omc_shm_sweep_dead(&sd, &removed);
    }
    if (!dead) report(d, OK, "shm leftovers", "%u omniconn segments in %s, all of live processes", live, d->shm_dir);
    else if (d->sweep)
        report(d, removed == dead ? OK : WARN, "shm leftovers", "%u segments of dead owners found, %u removed (omc_shm_sweep_dead)%s", dead, removed,
               removed == dead ? "" : ": the others were still being created or are not ours");
    else {
        char total[32];
        report(d, WARN, "shm leftovers", "%u segments of dead owners hold %s of %s: %s. Fix: omniconn doctor --sweep (every sending "
               "stage's start also removes them: omc_shm_sweep_dead)", dead, size_text(dead_bytes, total, sizeof(total)), d->shm_dir, listing);
    }
    if (foreign) report(d, OK, "shm leftovers", "%u segments of other users (not ours to judge)", foreign);
}

/* ============================================================================================== */
/* keys: keygen, and the key-file checks doctor runs                                              */
/* ============================================================================================== */

/* A CURVE key file holds one 40-character Z85 key and a newline: what omc_tcp_read_key and the
   config's curve_*_file options read, and what an allow-list holds one a line (so the .pub files
   of several receivers concatenated are an allow-list). */

static int ends_with(const char* s, const char* tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

static void keygen_usage(void) {
    printf("usage: omniconn keygen [--force] NAME\n");
    printf("  writes NAME.key (the secret key, mode 0600: it stays on this host) and NAME.pub (the public key:\n");
    printf("  copy it to the peers), one 40-character Z85 CURVE key each, as the key options and curve_*_file read\n");
    printf("  --force          replace NAME.key and NAME.pub if they exist (default: refuse)\n");
}

/* Create PATH anew (O_EXCL: never through an existing file or link) with exactly MODE and write
   TEXT. 0, or -1 with errno set. */
static int keygen_write(const char* path, mode_t mode, const char* text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode), e;
    if (fd < 0) return -1;
    if (fchmod(fd, mode) != 0 || write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
        e = errno;
        close(fd);
        unlink(path);
        errno = e ? e : EIO;
        return -1;
    }
    return close(fd);
}

static int cmd_keygen(int argc, char** argv) {
    static const struct option longs[] = { { "force", no_argument, NULL, 'f' }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1], kpath[4096], ppath[4096], line[OMC_CURVE_KEY_LEN + 2];
    int opt, force = 0, len;
    omc_result r;
    optind = 1;
    while ((opt = next_opt("keygen", argc, argv, longs)) != -1) {
        if (opt == 'f') force = 1;
        else if (opt == 'h') { keygen_usage(); return 0; }
        else return 2;
    }
    if (optind != argc - 1 || !argv[optind][0]) {
        fprintf(stderr, "omniconn keygen: give one NAME (the files are NAME.key and NAME.pub)\n");
        return 2;
    }
    len = (int)strlen(argv[optind]);       /* "keygen alice.key" means alice: not alice.key.key */
    if (len > 4 && (ends_with(argv[optind], ".key") || ends_with(argv[optind], ".pub"))) len -= 4;
    if (snprintf(kpath, sizeof(kpath), "%.*s.key", len, argv[optind]) >= (int)sizeof(kpath) ||
        snprintf(ppath, sizeof(ppath), "%.*s.pub", len, argv[optind]) >= (int)sizeof(ppath)) {
        fprintf(stderr, "omniconn keygen: the name is too long\n");
        return 2;
    }
    if (!force) {       /* both checked first: never half a new pair beside half an old one */
        const char* p = access(kpath, F_OK) == 0 ? kpath : access(ppath, F_OK) == 0 ? ppath : NULL;
        if (p) {
            fprintf(stderr, "omniconn keygen: %s exists: not replaced (peers may hold its public key). "
                    "Use another NAME, or --force to replace the pair\n", p);
            return 1;
        }
    } else {
        if (unlink(kpath) != 0 && errno != ENOENT) { fprintf(stderr, "omniconn keygen: cannot replace %s: %s\n", kpath, strerror(errno)); return 1; }
        if (unlink(ppath) != 0 && errno != ENOENT) { fprintf(stderr, "omniconn keygen: cannot replace %s: %s\n", ppath, strerror(errno)); return 1; }
    }
    r = omc_tcp_curve_keypair(pub, sec);
    if (r != OMC_OK) {
        char why[512] = "";
        if (omc__zmq_load(why, sizeof(why)) == OMC_OK) snprintf(why, sizeof(why), "this libzmq was built without CURVE (libsodium)");
        fprintf(stderr, "omniconn keygen: cannot make a CURVE key pair: %s\n", why);
        return 1;
    }
    snprintf(line, sizeof(line), "%s\n", sec);
    if (keygen_write(kpath, 0600, line) != 0) {
        fprintf(stderr, "omniconn keygen: cannot create %s: %s%s\n", kpath, strerror(errno),
                errno == EEXIST ? " (created by someone else meanwhile)" : "");
        memset(sec, 0, sizeof(sec));
        memset(line, 0, sizeof(line));
        return 1;
    }
    memset(sec, 0, sizeof(sec));
    memset(line, 0, sizeof(line));
    snprintf(line, sizeof(line), "%s\n", pub);
    if (keygen_write(ppath, 0644, line) != 0) {
        fprintf(stderr, "omniconn keygen: cannot create %s: %s (%s removed again)\n", ppath, strerror(errno), kpath);
        unlink(kpath);
        return 1;
    }
    printf("wrote %s (secret key, mode 0600: keep it on this host) and %s (public key: copy it to the peers)\n", kpath, ppath);
    printf("public key: %s\n", pub);
    return 0;
}

/* ---- doctor: key files ---------------------------------------------------------------------- */

/* One key file as doctor reads it. */
typedef struct keyfile {
    char key[OMC_CURVE_KEY_LEN + 1];    /* the key it holds */
    char pub[OMC_CURVE_KEY_LEN + 1];    /* a secret's public key (derived), or the key itself */
    int flawed;                         /* usable, but a FAIL/WARN line was reported for it */
} keyfile;


/* The text of a small file, trimmed of surrounding whitespace; 0, or -1 with errno. */
static int key_text(const char* path, char* buf, size_t n, size_t* len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC), e;
    ssize_t k;
    size_t s = 0, m;
    if (fd < 0) return -1;
    k = read(fd, buf, n - 1);
    e = errno;
    close(fd);
    if (k < 0) { errno = e; return -1; }
    m = (size_t)k;
    buf[m] = '\0';
    while (s < m && isspace((unsigned char)buf[s])) s++;
    while (m > s && isspace((unsigned char)buf[m - 1])) buf[--m] = '\0';
    memmove(buf, buf + s, m - s + 1);
    *len = m - s;
    return 0;
}

/* Why TEXT is not one Z85 CURVE key ("" if it is one). */
static const char* z85_problem(const char* text, size_t len, char* why, size_t n) {
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    size_t i;
    why[0] = '\0';
    if (len != OMC_CURVE_KEY_LEN) {
        snprintf(why, n, "it holds %zu characters, not one 40-character Z85 CURVE key%s", len,
                 len == 0 ? " (empty)" : strchr(text, '\n') ? " (more than one line)" : "");
        return why;
    }
    for (i = 0; i < len; i++)
        if (!strchr(alphabet, text[i])) {
            snprintf(why, n, "character %zu (0x%02x) is not Z85: not a CURVE key", i + 1, (unsigned)(unsigned char)text[i]);
            return why;
        }
    return why;
}

/* Check one key file (SECRET: a secret key) and fill *out. Each problem is one FAIL/WARN line
   naming WHAT (the option that names it); returns 1 if the key is usable. */
static int doctor_key_file(doctor* d, const char* what, const char* path, int secret, keyfile* out) {
    struct stat st;
    char text[512], why[160];
    size_t len = 0;
    memset(out, 0, sizeof(*out));
    if (stat(path, &st) != 0) {
        report(d, FAIL, "keys", "%s '%s': %s. Fix: omniconn keygen NAME makes NAME.key (secret) and NAME.pub (public)", what, path,
               strerror(errno));
        return 0;
    }
    if (!S_ISREG(st.st_mode)) { report(d, FAIL, "keys", "%s '%s': not a regular file", what, path); return 0; }
    if (key_text(path, text, sizeof(text), &len) != 0) {
        report(d, FAIL, "keys", "%s '%s': cannot read it: %s. Fix: run as its owner (uid %u), or chmod u+r", what, path, strerror(errno),
               (unsigned)st.st_uid);
        return 0;
    }
    out->flawed = (secret && ends_with(path, ".pub")) || (!secret && ends_with(path, ".key")) || (secret && (st.st_mode & 0177)) ||
                  (secret && st.st_uid != geteuid());
    if (secret && ends_with(path, ".pub"))
        report(d, FAIL, "keys", "%s '%s': names a public key file where the secret key belongs. Fix: name NAME.key", what, path);
    else if (!secret && ends_with(path, ".key"))
        report(d, WARN, "keys", "%s '%s': names a .key file where a public key belongs: if it is a secret key it leaks to "
               "whoever reads this config. Fix: name NAME.pub", what, path);
    if (secret && (st.st_mode & 0177))
        report(d, FAIL, "keys", "%s '%s': mode %04o is wider than 0600: %s can read or change the secret key. Fix: chmod 600 '%s'",
               what, path, (unsigned)(st.st_mode & 07777), (st.st_mode & 077) ? "other users" : "programs", path);
    if (secret && st.st_uid != geteuid())
        report(d, WARN, "keys", "%s '%s': owned by uid %u, not by this user (uid %u)", what, path, (unsigned)st.st_uid, (unsigned)geteuid());
    if (z85_problem(text, len, why, sizeof(why))[0]) {
        report(d, FAIL, "keys", "%s '%s': %s. Fix: omniconn keygen NAME writes a valid pair", what, path, why);
        return 0;
    }
    memcpy(out->key, text, OMC_CURVE_KEY_LEN + 1);
    memcpy(out->pub, text, OMC_CURVE_KEY_LEN + 1);
    memset(text, 0, sizeof(text));
    if (secret) {
        uint8_t bin[32];
        if (omc__zmq_load(NULL, 0) != OMC_OK || !omc__zmq_has("curve")) {
            report(d, WARN, "keys", "%s '%s': a Z85 key; its public key cannot be derived (libzmq with CURVE is not loadable here)", what, path);
            return 1;
        }
        if (!omc__zmq_z85_decode(bin, out->key) || omc__zmq_curve_public(out->pub, out->key) != 0) {
            report(d, FAIL, "keys", "%s '%s': not a valid CURVE secret key. Fix: omniconn keygen NAME", what, path);
            return 0;
        }
        memset(bin, 0, sizeof(bin));
    }
    return 1;
}

/* A secret key file NAME.key and the NAME.pub beside it (if there is one) must be one pair. */
static void doctor_key_pair(doctor* d, const char* what, const char* path, const keyfile* k) {
    char ppath[4096];
    keyfile p;
    size_t n = strlen(path);
    if (!ends_with(path, ".key") || n >= sizeof(ppath)) {
        if (!k->flawed) report(d, OK, "keys", "%s '%s': a valid secret key, mode 0600 (public key %s)", what, path, k->pub);
        return;
    }
    memcpy(ppath, path, n - 4);
    memcpy(ppath + n - 4, ".pub", 5);
    if (access(ppath, F_OK) != 0) {
        if (!k->flawed) report(d, OK, "keys", "%s '%s': a valid secret key, mode 0600 (public key %s; no %s beside it)", what, path, k->pub, ppath);
        return;
    }
    if (!doctor_key_file(d, "its public key", ppath, 0, &p)) return;
    if (strcmp(p.key, k->pub) != 0)
        report(d, FAIL, "keys", "%s '%s' and '%s' are not one pair: peers holding that .pub are refused. Fix: copy the .pub that "
               "omniconn keygen wrote with this .key to the peers again (or make a new pair)", what, path, ppath);
    else if (!k->flawed) report(d, OK, "keys", "%s '%s': a valid secret key, mode 0600, and '%s' is its public key", what, path, ppath);
}

static void doctor_public_key(doctor* d, const char* what, const char* path, keyfile* k) {
    if (doctor_key_file(d, what, path, 0, k) && !k->flawed) report(d, OK, "keys", "%s '%s': a valid public key (%s)", what, path, k->key);
}

/* An allow-list: one public key a line; blank lines and '#' lines skipped. Is KEY (if given) on it? */
static int doctor_allow_list(doctor* d, const char* what, const char* path, const char* key) {
    FILE* f;
    char line[512], why[160];
    unsigned lineno = 0, keys = 0, bad = 0;
    int found = 0;
    f = fopen(path, "r");
    if (!f) {
        report(d, FAIL, "keys", "%s '%s': %s. Fix: put the receivers' .pub files into it (cat a.pub b.pub > %s)", what, path,
               strerror(errno), path);
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        char* k = line;
        size_t n;
        lineno++;
        while (*k == ' ' || *k == '\t') k++;
        n = strlen(k);
        while (n && isspace((unsigned char)k[n - 1])) k[--n] = '\0';
        if (!n || k[0] == '#') continue;
        if (z85_problem(k, n, why, sizeof(why))[0]) {
            report(d, FAIL, "keys", "%s '%s' line %u: %s", what, path, lineno, why);
            bad++;
            continue;
        }
        keys++;
        if (key && strcmp(k, key) == 0) found = 1;
    }
    fclose(f);
    if (!keys && !bad) report(d, FAIL, "keys", "%s '%s' lists no key: no receiver could connect", what, path);
    else if (!bad) report(d, OK, "keys", "%s '%s': %u public key%s", what, path, keys, keys == 1 ? "" : "s");
    return found;
}

/* The key files of every TCP/RDMA connector spec of the config, and whether they fit together
   (the config holds both ends: the senders' pair, the receivers' key and the allow-list). */
static void doctor_config_keys(doctor* d) {
    uint32_t i, n = omc_pipeline_config_connector_count(d->cfg);
    for (i = 0; i < n; i++) {
        omc_connector_spec s;
        keyfile ss, sp, cs;
        int have_ss = 0, have_sp = 0, have_cs = 0;
        char what[160];
        omc_pipeline_config_connector(d->cfg, i, &s);
        if (s.transport != OMC_TRANSPORT_TCP && s.transport != OMC_TRANSPORT_RDMA) continue;
        if (s.curve_server_secret_key_file) {
            snprintf(what, sizeof(what), "'%s' curve_server_secret_key_file", s.name);
            if ((have_ss = doctor_key_file(d, what, s.curve_server_secret_key_file, 1, &ss))) doctor_key_pair(d, what, s.curve_server_secret_key_file, &ss);
        }
        if (s.curve_server_public_key_file) {
            snprintf(what, sizeof(what), "'%s' curve_server_public_key_file", s.name);
            have_sp = doctor_key_file(d, what, s.curve_server_public_key_file, 0, &sp);
            if (have_sp && have_ss && strcmp(sp.key, ss.pub) != 0)
                report(d, FAIL, "keys", "connector '%s': curve_server_public_key_file is not the public key of curve_server_secret_key_file: "
                       "the receivers would be refused (server key does not match). Fix: give the receivers the sender's .pub", s.name);
            else if (have_sp && !sp.flawed) report(d, OK, "keys", "%s '%s': a valid public key%s", what, s.curve_server_public_key_file,
                                     have_ss ? ", the senders' own" : "");
        }
        if (s.curve_client_secret_key_file) {
            snprintf(what, sizeof(what), "'%s' curve_client_secret_key_file", s.name);
            if ((have_cs = doctor_key_file(d, what, s.curve_client_secret_key_file, 1, &cs))) doctor_key_pair(d, what, s.curve_client_secret_key_file, &cs);
        }
        if (s.curve_allowed_clients_file) {
            snprintf(what, sizeof(what), "'%s' curve_allowed_clients_file", s.name);
            if (doctor_allow_list(d, what, s.curve_allowed_clients_file, have_cs ? cs.pub : NULL) == 0 && have_cs)
                report(d, FAIL, "keys", "connector '%s': the public key of curve_client_secret_key_file (%s) is not on curve_allowed_clients_file: "
                       "the receivers would be refused (client key not on the allow-list). Fix: add their .pub to it", s.name, cs.pub);
        }
        memset(&ss, 0, sizeof(ss));
        memset(&cs, 0, sizeof(cs));
    }
}

/* The key files given on the command line. */
static void doctor_key_options(doctor* d) {
    int i;
    keyfile k;
    for (i = 0; i < d->key_opts[0]; i++)
        if (doctor_key_file(d, "--key", d->key_opt[0][i], 1, &k)) doctor_key_pair(d, "--key", d->key_opt[0][i], &k);
    for (i = 0; i < d->key_opts[1]; i++) doctor_public_key(d, "--server-key", d->key_opt[1][i], &k);
    for (i = 0; i < d->key_opts[2]; i++) doctor_allow_list(d, "--allow", d->key_opt[2][i], NULL);
    memset(&k, 0, sizeof(k));
}

static void doctor_usage(void) {
    printf("usage: omniconn doctor [options]\n");
    printf("  --config FILE    also check this pipeline configuration (ports, pools, transports)\n");
    printf("  --shm-dir DIR    the shared-memory directory                (default /dev/shm)\n");
    printf("  --sweep          remove the segments of dead owners it finds\n");
    printf("  --numa N         rank the RDMA devices for memory on NUMA node N  (default: the node of the CPU it runs on)\n");
    printf("  --gpu PCI        rank them for a GPU at PCI address PCI (0000:3b:00.0) instead\n");
    printf("  --key FILE       check a secret key file: readable, mode 0600, one Z85 key, and the .pub beside it its pair\n");
    printf("  --server-key FILE  check a public key file (the sender's .pub a receiver is given)\n");
    printf("  --allow FILE     check an allow-list (receiver .pub keys, one a line); each key option repeatable\n");
    printf("                   (a config's curve_*_file options are checked the same way)\n");
    printf("  --sysfs DIR      read the device topology from DIR instead of /sys (a copy of another host's tree);\n");
    printf("                   with DIR given, only the topology is checked\n");
    printf("One line per check: OK, WARN or FAIL, and the fix. Exit status 1 if any check FAILs.\n");
}

static int cmd_doctor(int argc, char** argv) {
    static const struct option longs[] = {
        { "config", required_argument, NULL, 'c' }, { "shm-dir", required_argument, NULL, 'D' }, { "sweep", no_argument, NULL, 'S' },
        { "numa", required_argument, NULL, 'N' }, { "gpu", required_argument, NULL, 'G' }, { "sysfs", required_argument, NULL, 'Y' },
        { "key", required_argument, NULL, 'K' }, { "server-key", required_argument, NULL, 'P' }, { "allow", required_argument, NULL, 'A' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 }
    };
    doctor d;
    int opt;
    char* end;
    memset(&d, 0, sizeof(d));
    d.shm_dir = "/dev/shm";
    d.sysfs = "/sys";
    d.numa = -2;
    optind = 1;
    while ((opt = next_opt("doctor", argc, argv, longs)) != -1) {
        switch (opt) {
            case 'c': d.config = optarg; break;
            case 'D': d.shm_dir = optarg; break;
            case 'S': d.sweep = 1; break;
            case 'N': {
                long v = strtol(optarg, &end, 10);
                if (*end || v < 0 || v > 1023) { fprintf(stderr, "omniconn doctor: --numa '%s' is not a NUMA node (0..1023)\n", optarg); return 2; }
                d.numa = (int)v;
                break;
            }
            case 'G': d.gpu = optarg; break;
            case 'Y': d.sysfs = optarg; break;
            case 'K': case 'P': case 'A': {
                int k = opt == 'K' ? 0 : opt == 'P' ? 1 : 2;
                if (d.key_opts[k] == 8) { fprintf(stderr, "omniconn doctor: at most 8 of each key option\n"); return 2; }
                d.key_opt[k][d.key_opts[k]++] = optarg;
                break;
            }
            case 'h': doctor_usage(); return 0;
            default: return 2;
        }
    }
    if (optind != argc) { fprintf(stderr, "omniconn doctor: unexpected argument '%s' (options start with --)\n", argv[optind]); return 2; }
    printf("omniconn doctor (omniconn %s)%s%s\n", omc_version_string(), d.config ? ": " : "", d.config ? d.config : "");
    if (strcmp(d.sysfs, "/sys") != 0) {     /* another tree: its topology only (the rest is this host's) */
        doctor_topology(&d);
        printf("%d OK, %d WARN, %d FAIL\n", d.oks, d.warns, d.fails);
        return d.fails ? 1 : 0;
    }
    if (d.config) doctor_config(&d);
    if (d.cfg) doctor_config_keys(&d);
    doctor_key_options(&d);
    doctor_host(&d);
    if (d.cfg) doctor_ports(&d);
    doctor_libs(&d);
    doctor_rdma(&d);
    doctor_memlock(&d);
    doctor_shm_leftovers(&d);       /* first: --sweep frees space the next line then counts */
    doctor_shm_space(&d);
    printf("%d OK, %d WARN, %d FAIL\n", d.oks, d.warns, d.fails);
    omc_pipeline_config_destroy(d.cfg);
    return d.fails ? 1 : 0;
}

/* ============================================================================================== */
/* main                                                                                           */
/* ============================================================================================== */

static void usage(void) {
    printf("omniconn %s - move stage payloads between processes and hosts\n", omc_version_string());
    printf("usage: omniconn bench   [--transport local|shm|tcp|rdma] [--sizes 4K,64K,1M,16M] [--duration SEC] [--json FILE] ...\n");
    printf("       omniconn doctor  [--config FILE] [--shm-dir /dev/shm] [--sweep] [--key F] [--server-key F] [--allow F]\n");
    printf("       omniconn keygen  [--force] NAME   a CURVE key pair: NAME.key (secret, 0600) and NAME.pub\n");
    printf("       omniconn help    [bench|doctor|keygen]   this text, or a command's options and their defaults\n");
    printf("       omniconn version the library version\n");
}

static int omniconn_main(int argc, char** argv) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) { usage(); return argc < 2 ? 2 : 0; }
    if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(argv[1], "doctor") == 0) return cmd_doctor(argc - 1, argv + 1);
    if (strcmp(argv[1], "keygen") == 0) return cmd_keygen(argc - 1, argv + 1);
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) { printf("omniconn %s\n", omc_version_string()); return 0; }
    if (strcmp(argv[1], "help") == 0) {
        if (argc > 2 && strcmp(argv[2], "bench") == 0) bench_usage();
        else if (argc > 2 && strcmp(argv[2], "doctor") == 0) doctor_usage();
        else if (argc > 2 && strcmp(argv[2], "keygen") == 0) keygen_usage();
        else if (argc > 2) { fprintf(stderr, "omniconn help: unknown command '%s' (bench, doctor, keygen)\n", argv[2]); return 2; }
        else usage();
        return 0;
    }
    fprintf(stderr, "omniconn: unknown command '%s'\n", argv[1]);
    usage();
    return 2;
}

#ifndef OMNICONN_CLI_NO_MAIN
int main(int argc, char** argv) {
    signal(SIGPIPE, SIG_IGN);       /* a consumer gone: write() fails and we say so */
    return omniconn_main(argc, argv);
}
#endif
