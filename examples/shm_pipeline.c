/* shm_pipeline.c - two pipeline stages in two processes, over the shared-memory connector.

   The producer stage (this process) and the consumer stage (a forked child) move payloads
   through omniconn_shm.h, the way two stages of an inference pipeline on one host would:

     throughput phase  the producer takes a buffer straight from the connector's pool
                       (omc_conn_alloc), builds a frame in it - a "hidden" f32 tensor and a
                       "tokens" i64 tensor - with a CRC-32C over the data, and puts it: zero
                       copy, the buffer changes hands. The metadata goes to the consumer through
                       a pipe (your pipeline's queue). The consumer gets a zero-copy view,
                       decodes the frame, verifies the CRC and the values, and releases it.
     latency phase     one small payload at a time; the consumer waits in a metadata-less get
                       (it spins briefly, then sleeps on a futex) and we time put -> get ->
                       release across the two processes.

   It prints throughput (GB/s) and handoff latency, and exits 0 only if every payload arrived
   intact. This is the README's demo.

   Build (from the repository root, one line):
       cc -std=c99 -O2 -I. examples/shm_pipeline.c -o shm_pipeline -lpthread -ldl
   Run:
       ./shm_pipeline                  defaults: about 4 GiB in 4 MiB frames, then 20000 handoffs
       ./shm_pipeline -h               the options */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct options {
    long count;                 /* payloads in the throughput phase */
    uint64_t size;              /* bytes per payload (approximate: a whole number of rows) */
    long lat_count;             /* round trips in the latency phase */
    uint64_t lat_size;
    uint64_t pool;
    char channel[OMC_SHM_CHANNEL_MAX + 1];
    const char* dir;
} options;

static void usage(const char* argv0) {
    printf("usage: %s [options]\n", argv0);
    printf("  -n COUNT   payloads in the throughput phase     (default 1000)\n");
    printf("  -s BYTES   payload size                         (default 4194304)\n");
    printf("  -l COUNT   round trips in the latency phase     (default 20000, 0 = skip)\n");
    printf("  -b BYTES   latency payload size                 (default 64)\n");
    printf("  -p BYTES   the producer's pool size             (default 268435456)\n");
    printf("  -c NAME    channel name                         (default demo<pid>)\n");
    printf("  -d DIR     shared-memory directory              (default /dev/shm)\n");
}

/* ---- the payload: a frame with two tensors whose values depend on the payload number ------- */

#define TOKENS 64
#define ROW_FLOATS 1024

static uint32_t rows_for(uint64_t size) {
    uint64_t rows = size > 8192 ? (size - 8192) / (ROW_FLOATS * 4) : 1;
    return (uint32_t)(rows ? rows : 1);
}

static void frame_descs(uint32_t rows, omc_segment_desc segs[2]) {
    memset(segs, 0, 2 * sizeof(omc_segment_desc));
    segs[0].name = "hidden";
    segs[0].dtype = OMC_DTYPE_F32;
    segs[0].ndim = 2;
    segs[0].shape[0] = rows;
    segs[0].shape[1] = ROW_FLOATS;
    segs[1].name = "tokens";
    segs[1].dtype = OMC_DTYPE_I64;
    segs[1].ndim = 1;
    segs[1].shape[0] = TOKENS;
}

/* cheap to generate (no division: the fill must not be what we measure), different per payload */
static float hidden_value(long n, uint64_t i) { return (float)(((uint64_t)n * 31u + i) & 4095u) * 0.25f; }

/* Build payload n in place in buf (from the pool); returns the frame size. */
static uint64_t build_frame(void* buf, uint64_t cap, uint32_t rows, long n) {
    omc_segment_desc segs[2];
    void* where[2];
    uint64_t size = 0, i, count = (uint64_t)rows * ROW_FLOATS;
    float* h;
    int64_t* t;
    frame_descs(rows, segs);
    if (omc_frame_build(buf, cap, segs, 2, OMC_FRAME_FLAG_PAYLOAD_CRC, where, &size) != OMC_OK) return 0;
    h = (float*)where[0];
    t = (int64_t*)where[1];
    for (i = 0; i < count; i++) h[i] = hidden_value(n, i);
    for (i = 0; i < TOKENS; i++) t[i] = n * 1000 + (int64_t)i;
    omc_frame_seal(buf, size);          /* the CRC over the data we just wrote */
    return size;
}

/* Decode (CRC included) and spot-check payload n. 1 if intact. */
static int check_frame(const omc_buffer* b, uint32_t rows, long n) {
    omc_frame f;
    omc_segment hid, tok;
    uint64_t count = (uint64_t)rows * ROW_FLOATS, i;
    if (!(b->flags & OMC_BUFFER_FRAME) || omc_frame_decode(b->data, b->size, 1, &f) != OMC_OK) return 0;
    if (omc_frame_find(&f, "hidden", &hid) != OMC_OK || omc_frame_find(&f, "tokens", &tok) != OMC_OK) return 0;
    if (hid.dtype != OMC_DTYPE_F32 || hid.shape[0] != rows || tok.shape[0] != TOKENS) return 0;
    for (i = 0; i < count; i += 997) if (((const float*)hid.data)[i] != hidden_value(n, i)) return 0;
    return ((const int64_t*)tok.data)[TOKENS - 1] == n * 1000 + TOKENS - 1;
}

/* ---- plumbing ------------------------------------------------------------------------------ */

static int write_all(int fd, const void* p, size_t n) {
    const char* c = (const char*)p;
    while (n) { ssize_t k = write(fd, c, n); if (k <= 0) return -1; c += k; n -= (size_t)k; }
    return 0;
}

static int read_all(int fd, void* p, size_t n) {
    char* c = (char*)p;
    while (n) { ssize_t k = read(fd, c, n); if (k <= 0) return -1; c += k; n -= (size_t)k; }
    return 0;
}

/* Memory both processes share: the latency phase's "released" counter, and time samples
   (ns): handoff latencies, and the consumer's get and release times per payload. */
typedef struct shared {
    uint32_t released;
    uint32_t pad;
    int64_t* samples;           /* lat_count */
    int64_t* get_ns;            /* count */
    int64_t* release_ns;        /* count */
} shared;

static omc_conn* connect_stage(const options* o, omc_role role) {
    omc_shm_desc d;
    omc_conn* c = NULL;
    omc_result r;
    memset(&d, 0, sizeof(d));
    d.channel = o->channel;
    d.shm_dir = o->dir;
    d.role = role;
    d.pool_size = o->pool;
    d.hooks.log_fn = omc_log_stderr;        /* warnings and errors go to stderr */
    r = omc_shm_create(&d, &c);
    if (r != OMC_OK) fprintf(stderr, "shm_pipeline: omc_shm_create: %s\n", omc_result_str(r));
    return c;
}

static int cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

static double median_us(int64_t* v, long n) {
    qsort(v, (size_t)n, sizeof(int64_t), cmp_i64);
    return (double)v[n / 2] / 1000.0;
}

/* ---- the consumer stage (child process) ---------------------------------------------------- */

static int consumer_stage(const options* o, int meta_fd, shared* sh) {
    omc_conn* c = connect_stage(o, OMC_ROLE_RECEIVER);
    uint32_t rows = rows_for(o->size);
    long n, bad = 0;
    if (!c) return 1;
    for (n = 0; n < o->count; n++) {
        uint8_t meta[4096];
        uint32_t len;
        omc_buffer b;
        char key[32];
        omc_result r;
        if (read_all(meta_fd, &len, 4) != 0 || len > sizeof(meta) || read_all(meta_fd, meta, len) != 0) { bad++; break; }
        omc_time_ns t0, t1;
        snprintf(key, sizeof(key), "frame-%ld", n);
        t0 = omc_now_ns();
        r = omc_conn_get(c, "producer", "consumer", key, meta, len, omc_deadline_after_ms(10000), &b);
        sh->get_ns[n] = omc_now_ns() - t0;
        if (r != OMC_OK) { fprintf(stderr, "consumer: get %s: %s\n", key, omc_result_str(r)); bad++; continue; }
        if (!check_frame(&b, rows, n)) { fprintf(stderr, "consumer: %s is damaged\n", key); bad++; }
        t1 = omc_now_ns();
        omc_buffer_release(&b);
        sh->release_ns[n] = omc_now_ns() - t1;
    }
    for (n = 0; n < o->lat_count && !bad; n++) {
        char key[32];
        omc_buffer b;
        int64_t stamp;
        snprintf(key, sizeof(key), "ping-%ld", n);
        if (omc_conn_get(c, "producer", "consumer", key, NULL, 0, omc_deadline_after_ms(10000), &b) != OMC_OK) { bad++; break; }
        memcpy(&stamp, b.data, sizeof(stamp));
        omc_buffer_release(&b);
        sh->samples[n] = omc_now_ns() - stamp;
        __atomic_store_n(&sh->released, (uint32_t)(n + 1), __ATOMIC_RELEASE);
    }
    omc_conn_destroy(c);
    return bad ? 1 : 0;
}

/* ---- the producer stage (this process) ----------------------------------------------------- */

static int producer_throughput(const options* o, omc_conn* c, int meta_fd, double* gbps, int64_t* put_ns) {
    omc_segment_desc segs[2];
    uint32_t rows = rows_for(o->size);
    uint64_t frame_size = 0, moved = 0;
    omc_time_ns t0;
    long n;
    frame_descs(rows, segs);
    omc_frame_size(segs, 2, &frame_size);
    t0 = omc_now_ns();
    for (n = 0; n < o->count; n++) {
        omc_buffer buf;
        omc_payload p;
        omc_meta meta;
        char key[32];
        omc_time_ns t;
        /* back-pressure: wait (up to 10 s) until the consumer has released enough of the pool */
        omc_result r = omc_conn_alloc(c, frame_size, omc_deadline_after_ms(10000), &buf);
        if (r != OMC_OK) { fprintf(stderr, "producer: alloc: %s\n", omc_result_str(r)); return 1; }
        build_frame(buf.data, buf.size, rows, n);
        memset(&p, 0, sizeof(p));
        p.buffer = &buf;                /* zero copy: the pool buffer itself is the payload */
        p.flags = OMC_PAYLOAD_FRAME;
        snprintf(key, sizeof(key), "frame-%ld", n);
        t = omc_now_ns();
        r = omc_conn_put(c, "producer", "consumer", key, &p, &meta);
        put_ns[n] = omc_now_ns() - t;
        if (r != OMC_OK) { fprintf(stderr, "producer: put: %s\n", omc_result_str(r)); omc_buffer_release(&buf); return 1; }
        if (write_all(meta_fd, &meta.size, 4) != 0 || write_all(meta_fd, meta.data, meta.size) != 0) return 1;
        omc_meta_free(&meta);
        moved += frame_size;
    }
    *gbps = (double)moved / (double)(omc_now_ns() - t0);
    return 0;
}

static int producer_latency(const options* o, omc_conn* c, shared* sh) {
    uint8_t* small = (uint8_t*)calloc(1, (size_t)(o->lat_size < 8 ? 8 : o->lat_size));
    long n;
    for (n = 0; n < o->lat_count; n++) {
        char key[32];
        omc_payload p;
        int64_t t;
        while (__atomic_load_n(&sh->released, __ATOMIC_ACQUIRE) < (uint32_t)n) {}   /* one at a time */
        snprintf(key, sizeof(key), "ping-%ld", n);
        memset(&p, 0, sizeof(p));
        p.data = small;
        p.size = o->lat_size < 8 ? 8 : o->lat_size;
        t = omc_now_ns();
        memcpy(small, &t, sizeof(t));   /* the consumer subtracts this from its release time */
        if (omc_conn_put(c, "producer", "consumer", key, &p, NULL) != OMC_OK) { free(small); return 1; }
    }
    free(small);
    return 0;
}

int main(int argc, char** argv) {
    options o;
    int fds[2], opt, status = 0, failed = 0;
    shared* sh;
    omc_conn* c;
    pid_t pid;
    int64_t* put_ns;
    double gbps = 0;
    memset(&o, 0, sizeof(o));
    o.count = 1000;
    o.size = 4u << 20;
    o.lat_count = 20000;
    o.lat_size = 64;
    o.pool = 256u << 20;
    o.dir = "/dev/shm";
    snprintf(o.channel, sizeof(o.channel), "demo%ld", (long)getpid());
    while ((opt = getopt(argc, argv, "n:s:l:b:p:c:d:h")) != -1) {
        switch (opt) {
            case 'n': o.count = atol(optarg); break;
            case 's': o.size = strtoull(optarg, NULL, 0); break;
            case 'l': o.lat_count = atol(optarg); break;
            case 'b': o.lat_size = strtoull(optarg, NULL, 0); break;
            case 'p': o.pool = strtoull(optarg, NULL, 0); break;
            case 'c': snprintf(o.channel, sizeof(o.channel), "%s", optarg); break;
            case 'd': o.dir = optarg; break;
            default: usage(argv[0]); return opt == 'h' ? 0 : 2;
        }
    }
    if (o.count < 0 || o.lat_count < 0) { usage(argv[0]); return 2; }
    sh = (shared*)mmap(NULL, sizeof(shared) + sizeof(int64_t) * (size_t)(o.lat_count + 2 * o.count + 1), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    put_ns = (int64_t*)calloc((size_t)o.count + 1, sizeof(int64_t));
    if (sh == MAP_FAILED || !put_ns || pipe(fds) != 0) { perror("shm_pipeline"); return 1; }
    sh->samples = (int64_t*)(sh + 1);       /* the arrays follow the struct in the same mapping */
    sh->get_ns = sh->samples + o.lat_count;
    sh->release_ns = sh->get_ns + o.count;
    c = connect_stage(&o, OMC_ROLE_SENDER);     /* the segment exists before the consumer looks */
    if (!c) return 1;
    printf("shm_pipeline: channel %s, %ld payloads of %llu bytes, then %ld handoffs of %llu bytes\n", o.channel, o.count,
           (unsigned long long)o.size, o.lat_count, (unsigned long long)o.lat_size);
    fflush(stdout);
    pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        close(fds[1]);
        _exit(consumer_stage(&o, fds[0], sh));
    }
    close(fds[0]);
    failed |= producer_throughput(&o, c, fds[1], &gbps, put_ns);
    close(fds[1]);
    if (!failed) failed |= producer_latency(&o, c, sh);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    if (!failed) {
        printf("throughput: %.2f GB/s end to end: %llu MB, every frame built in place by the producer, CRC-checked\n"
               "            and spot-checked by the consumer\n", gbps, (unsigned long long)((uint64_t)o.count * o.size / 1000000));
        if (o.count)
            printf("connector:  put %.1f us, get %.1f us, release %.1f us per payload (medians; every call comes right after\n"
                   "            megabytes of frame work, so with cold caches): the payload bytes are never copied\n",
                   median_us(put_ns, o.count), median_us(sh->get_ns, o.count), median_us(sh->release_ns, o.count));
        if (o.lat_count) {
            qsort(sh->samples, (size_t)o.lat_count, sizeof(int64_t), cmp_i64);
            printf("handoff:    p50 %.2f us, p99 %.2f us (put -> metadata-less get in the other process -> release, %ld round trips)\n",
                   (double)sh->samples[o.lat_count / 2] / 1000.0, (double)sh->samples[(o.lat_count * 99) / 100] / 1000.0, o.lat_count);
        }
        printf("every payload arrived intact\n");
    } else printf("FAILED: see the messages above\n");
    omc_conn_destroy(c);
    free(put_ns);
    return failed;
}
