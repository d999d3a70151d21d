/* bench_shm.c - the shared-memory connector against memcpy and against vLLM-Omni's design, side by
   side in one run, across two real processes.

   usage: bench_shm [out.json]            (make bench-shm writes bench/results/shm.json)
   env:   BENCH_SHM_QUICK=1               a fast smoke run (few iterations, no 1 GiB row)
          BENCH_SHM_SIZES=4096,1048576    only these payload sizes (bytes, comma-separated)
          BENCH_ROUNDS=1                  fewer rounds (1..3; make bench-peers alternates single
                                          rounds with the other tools and takes medians itself)
          BENCH_SHM_NO_BASELINE=1         skip the per-request-segment baseline
          BENCH_SHM_CPUS=0,1              pin the producer to CPU 0 and the consumer to CPU 1
                                          (default: not pinned; the scheduler places them)
          BENCH_SHM_SPIN_US=N             the consumer's spin before it sleeps (omc_shm_desc.
                                          spin_ns): microseconds, 0 = never spin, -1 = never
                                          sleep; default: the connector's (20 us, or
                                          $OMNICONN_SHM_SPIN_US)

   Per payload size (64 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB, 186 MiB, and 1 GiB if memory allows):
     memcpy_gbps               one thread copies the payload from one private buffer into
                               another (both faulted in), repeatedly: the cost of one copy.
     omniconn_gbps             a producer process puts payloads (copy path: one copy into the
                               sender's pool) as fast as it can; a consumer process takes each
                               with a metadata-less get (a zero-copy view; the bytes are not
                               read) and releases it. Bytes / (first put .. last release).
     omniconn_noinline_gbps    the same with disable_inline (rows below the 64 KiB threshold:
                               what the inline copy into the metadata costs the producer).
     per_request_segment_gbps  vLLM-Omni's design, in C: per request the producer opens a lock
                               file and flock()s it, creates a new /dev/shm segment (O_EXCL),
                               ftruncate()s, mmap()s, copies in, unmaps, unlocks; the consumer
                               (told the request number through a pipe) flock()s, opens, fstat()s,
                               maps, copies out into a private buffer, unmaps, unlinks segment
                               and lock file. Both sides pipelined, as in vLLM-Omni's connector.
     handoff_us_p50 / p99      ping-pong: the producer waits until the consumer has released
                               the previous payload, writes the time into the payload's first
                               8 bytes and puts it; the consumer, blocked in a metadata-less get
                               (the connector's own waiting: spin 20 us, then futex), takes it,
                               releases it and records now - that time. So: put + wake-up + get
                               + release, one payload at a time. With the settings above
                               (BENCH_SHM_CPUS, BENCH_SHM_SPIN_US, else the defaults).
     handoff_spin_us_p50 / p99 the same ping-pong the way ucx_perftest's tag_lat runs: producer
                               and consumer pinned to two different CPUs (BENCH_SHM_CPUS, else
                               0 and 1), the consumer spinning without ever sleeping
                               (spin_ns = OMC_SHM_SPIN_FOREVER). Only on hosts with 2+ CPUs.
     memcpy_pool_gbps          the fair baseline for the stream: the same copy into destinations
                               cycling through a faulted-in region the size of the stream's pool.
     first_pass_gbps           a fresh pool's first pass, alone: one process creates a sender (the
                               default growing pool, the stream's pool_size) and puts payloads,
                               all held, until they fill the pool (at most 64): every put grows
                               the pool. Median over several fresh pools.
     refill_pass_gbps          in each of those pools, the same puts again after a cleanup of all:
                               every page already reserved and mapped.
   env:   BENCH_SHM_FIRST_ONLY=1          only the first-put and refill rows (quick before/after
                                          comparisons of the growing pool)
   Throughput figures are the median of ROUNDS interleaved rounds (the machine is shared);
   handoff percentiles are over all samples of all rounds. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB (1024ull)
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)
#define ROUNDS 3
#define MAX_LAT 20000
#define FIRST_REPS 3                /* fresh pools per round for the first-pass rows */

/* ---- a page shared by the two processes of one measurement ---------------------------------- */

typedef struct shared_page {
    uint32_t ready;             /* consumer is set up */
    uint32_t done;              /* payloads released so far (handoff) */
    int64_t t_end;              /* consumer: time of the last release */
    int32_t failed;
    uint32_t nlat;
    int64_t lat_ns[MAX_LAT];
} shared_page;

static shared_page* shared_new(void) {
    void* p = mmap(NULL, sizeof(shared_page), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    memset(p, 0, sizeof(shared_page));
    return (shared_page*)p;
}

static void wait_for(uint32_t* word, uint32_t value) {
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value) {
#if defined(__x86_64__)
        __asm__ __volatile__("pause");
#endif
    }
}

static void* big_buffer(uint64_t size, int fill) {
    void* p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    memset(p, fill, (size_t)size);
    return p;
}

static int finish_child(pid_t pid) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

static double median3(double* v, int n) {
    double t[ROUNDS];
    int i, j;
    for (i = 0; i < n; i++) t[i] = v[i];
    for (i = 1; i < n; i++) for (j = i; j > 0 && t[j] < t[j - 1]; j--) { double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
    return t[n / 2];
}

/* ---- memcpy ---------------------------------------------------------------------------------- */

static double bench_memcpy(uint64_t size, uint64_t reps) {
    uint8_t* src = (uint8_t*)big_buffer(size, 1);
    uint8_t* dst = (uint8_t*)big_buffer(size, 2);
    omc_time_ns t0;
    uint64_t i;
    double gbps;
    memcpy(dst, src, (size_t)size);        /* warm */
    t0 = omc_now_ns();
    for (i = 0; i < reps; i++) {
        src[i % size] = (uint8_t)i;         /* the compiler must not hoist the copy */
        memcpy(dst, src, (size_t)size);
        __asm__ __volatile__("" ::"r"(dst) : "memory");
    }
    gbps = (double)size * (double)reps / (double)(omc_now_ns() - t0);
    munmap(src, (size_t)size);
    munmap(dst, (size_t)size);
    return gbps;
}

/* The fair baseline for a stream: the same copy the producer makes (one source, reused) into
   destinations that cycle through a faulted-in region as large as the stream's pool, the way the
   allocator hands out ranges of the pool; above the last-level cache the destination is as cold
   as the transfer's. */
static uint64_t pool_for(uint64_t size);
static double bench_memcpy_pool(uint64_t size, uint64_t reps) {
    uint64_t region = pool_for(size), stride = (size + 4095) & ~4095ull, slots = region / stride, i;
    uint8_t* src = (uint8_t*)big_buffer(size, 1);
    uint8_t* dst = (uint8_t*)big_buffer(region, 2);
    omc_time_ns t0;
    double gbps;
    if (slots == 0) slots = 1;
    t0 = omc_now_ns();
    for (i = 0; i < reps; i++) {
        uint8_t* d = dst + (i % slots) * stride;
        src[i % size] = (uint8_t)i;
        memcpy(d, src, (size_t)size);
        __asm__ __volatile__("" ::"r"(d) : "memory");
    }
    gbps = (double)size * (double)reps / (double)(omc_now_ns() - t0);
    munmap(src, (size_t)size);
    munmap(dst, (size_t)region);
    return gbps;
}

/* ---- omniconn: stream and handoff ------------------------------------------------------------ */

static int nchan;
static int cpu_producer = -1, cpu_consumer = -1;     /* BENCH_SHM_CPUS; -1 = not pinned */
static int64_t consumer_spin_ns;                     /* BENCH_SHM_SPIN_US; 0 = the connector's default */
static uint64_t producer_pool_full;                  /* puts that found the pool or the entries full */

static void pin_to(int cpu) {
    cpu_set_t set;
    if (cpu < 0) return;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) { perror("bench_shm: sched_setaffinity"); exit(1); }
}

static void unpin(void) {
    cpu_set_t set;
    long i, n = sysconf(_SC_NPROCESSORS_ONLN);
    CPU_ZERO(&set);
    for (i = 0; i < n && i < CPU_SETSIZE; i++) CPU_SET((int)i, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

/* The producer retries a put that finds the pool (or all entries) full until the consumer
   releases: count those instead of printing two lines per retry (the printing would slow the
   producer down and flood the terminal); every other message goes to stderr. */
static void producer_log(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    if (strstr(message, "are in flight") || strstr(message, "no free range")) { producer_pool_full++; return; }
    omc_log_stderr(level, item, message, file, line, user);
}
/* A private directory on /dev/shm's tmpfs for this run's segments: other programs sweeping
   /dev/shm (every sender's start does) never see them. */
static char bench_dir[64];

static omc_conn* shm_conn(const char* ch, omc_role role, uint64_t pool, int no_inline, int64_t spin_ns) {
    omc_shm_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.spin_ns = spin_ns;
    if (role == OMC_ROLE_SENDER) d.hooks.log_fn = producer_log;
    d.channel = ch;
    d.role = role;
    d.shm_dir = bench_dir[0] ? bench_dir : NULL;
    d.pool_size = pool;
    d.disable_inline = no_inline;
    d.max_entries = 4096;
    if (omc_shm_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static void key_of(char* out, uint64_t i) { snprintf(out, 24, "k%llu", (unsigned long long)i); }

/* The consumer process: take n payloads with metadata-less gets, release each; handoff mode
   also records put-to-release latencies from the time stamp in the payload. */
static void consumer(const char* ch, shared_page* sp, uint64_t n, int handoff, int cpu, int64_t spin_ns) {
    omc_conn* r;
    pin_to(cpu);
    r = shm_conn(ch, OMC_ROLE_RECEIVER, 0, 0, spin_ns);
    omc_buffer w;
    uint64_t i;
    if (!r) _exit(2);
    /* warm-up outside the timed region: finding and mapping the sender's segment happens once
       per receiver (a directory scan and an mmap of the whole pool) */
    if (omc_conn_get(r, "p", "c", "warm", NULL, 0, omc_deadline_after_ms(30000), &w) != OMC_OK) _exit(2);
    omc_buffer_release(&w);
    __atomic_store_n(&sp->ready, 1u, __ATOMIC_RELEASE);
    for (i = 0; i < n; i++) {
        char key[24];
        omc_buffer b;
        int64_t stamp = 0;
        key_of(key, i);
        if (omc_conn_get(r, "p", "c", key, NULL, 0, omc_deadline_after_ms(30000), &b) != OMC_OK) { sp->failed = 1; _exit(3); }
        if (handoff) memcpy(&stamp, b.data, sizeof(stamp));
        omc_buffer_release(&b);
        if (handoff) {
            int64_t t = omc_now_ns();
            if (sp->nlat < MAX_LAT) sp->lat_ns[sp->nlat++] = t - stamp;
            __atomic_store_n(&sp->done, (uint32_t)(i + 1), __ATOMIC_RELEASE);
        }
    }
    sp->t_end = omc_now_ns();
    omc_conn_destroy(r);
    _exit(0);
}

static uint64_t pool_for(uint64_t size) { return omc__max(32 * MiB, 3 * size + 8 * MiB); }

/* Producer side of a stream: GB/s from first put to the consumer's last release. */
static double bench_omniconn(uint64_t size, uint64_t n, int no_inline, const uint8_t* src) {
    char ch[32];
    shared_page* sp = shared_new();
    omc_conn* s;
    omc_payload p;
    omc_time_ns t0;
    uint64_t i;
    pid_t pid;
    double gbps = 0;
    snprintf(ch, sizeof(ch), "bench%ldn%d", (long)getpid(), ++nchan);
    s = shm_conn(ch, OMC_ROLE_SENDER, pool_for(size), no_inline, 0);
    if (!s) { fprintf(stderr, "bench_shm: cannot create a %llu-byte pool\n", (unsigned long long)pool_for(size)); exit(1); }
    pid = fork();
    if (pid == 0) consumer(ch, sp, n, 0, cpu_consumer, consumer_spin_ns);
    pin_to(cpu_producer);
    memset(&p, 0, sizeof(p));
    p.data = src;
    p.size = 8;
    {
        omc_result wr = omc_conn_put(s, "p", "c", "warm", &p, NULL);
        if (wr != OMC_OK) { fprintf(stderr, "bench_shm: warm-up put failed: %s\n", omc_result_str(wr)); exit(1); }
    }
    wait_for(&sp->ready, 1);
    p.size = size;
    t0 = omc_now_ns();
    for (i = 0; i < n; i++) {
        char key[24];
        omc_result r;
        key_of(key, i);
        while ((r = omc_conn_put(s, "p", "c", key, &p, NULL)) == OMC_ERR_POOL_FULL) sched_yield();   /* wait for releases */
        if (r != OMC_OK) { fprintf(stderr, "bench_shm: put: %s\n", omc_result_str(r)); exit(1); }
    }
    if (finish_child(pid) && !sp->failed) gbps = (double)size * (double)n / (double)(sp->t_end - t0);
    if (cpu_producer >= 0) unpin();
    omc_conn_destroy(s);
    munmap(sp, sizeof(*sp));
    return gbps;
}

/* Ping-pong; appends latencies (ns) to lat/nlat. The consumer spins spin_ns (0: the connector's
   default); cpu_p / cpu_c pin producer and consumer (-1: not pinned). */
static void bench_handoff(uint64_t size, uint64_t n, uint8_t* src, int64_t* lat, uint32_t* nlat, uint32_t cap, int cpu_p, int cpu_c,
                          int64_t spin_ns) {
    char ch[32];
    shared_page* sp = shared_new();
    omc_conn* s;
    omc_payload p;
    uint64_t i;
    uint32_t k;
    pid_t pid;
    snprintf(ch, sizeof(ch), "bench%ldn%d", (long)getpid(), ++nchan);
    s = shm_conn(ch, OMC_ROLE_SENDER, pool_for(size), 0, 0);
    if (!s) { fprintf(stderr, "bench_shm: cannot create a %llu-byte pool (handoff)\n", (unsigned long long)pool_for(size)); exit(1); }
    pid = fork();
    if (pid == 0) consumer(ch, sp, n, 1, cpu_c, spin_ns);
    pin_to(cpu_p);
    memset(&p, 0, sizeof(p));
    p.data = src;
    p.size = 8;
    {
        omc_result wr = omc_conn_put(s, "p", "c", "warm", &p, NULL);
        if (wr != OMC_OK) { fprintf(stderr, "bench_shm: warm-up put failed (handoff): %s\n", omc_result_str(wr)); exit(1); }
    }
    wait_for(&sp->ready, 1);
    usleep(1000);
    p.size = size;
    for (i = 0; i < n; i++) {
        char key[24];
        int64_t t;
        key_of(key, i);
        wait_for(&sp->done, (uint32_t)i);     /* the previous one is released */
        t = omc_now_ns();
        memcpy(src, &t, sizeof(t));
        if (omc_conn_put(s, "p", "c", key, &p, NULL) != OMC_OK) { fprintf(stderr, "bench_shm: handoff put failed\n"); exit(1); }
    }
    if (!finish_child(pid) || sp->failed) { fprintf(stderr, "bench_shm: handoff consumer failed\n"); exit(1); }
    for (k = 0; k < sp->nlat && *nlat < cap; k++) lat[(*nlat)++] = sp->lat_ns[k];
    if (cpu_p >= 0) unpin();
    omc_conn_destroy(s);
    munmap(sp, sizeof(*sp));
}

/* A fresh pool's first pass, alone (no consumer): GB/s of puts that fill a fresh pool of the
   stream's size (up to 64 payloads, all held, so every one takes a new range and the pool grows
   under each), then of the same puts again after a cleanup of all (every page already reserved
   and mapped: the refill). */
static void bench_first_pass(uint64_t size, const uint8_t* src, double* first_gbps, double* refill_gbps) {
    char ch[32], key[24];
    omc_conn* s;
    omc_payload p;
    omc_time_ns t0, t1;
    uint64_t n = (pool_for(size) - 8 * MiB) / size, i;
    int pass;
    if (n > 64) n = 64;
    if (n < 1) n = 1;
    snprintf(ch, sizeof(ch), "bench%ldn%d", (long)getpid(), ++nchan);
    s = shm_conn(ch, OMC_ROLE_SENDER, pool_for(size), 1, 0);
    if (!s) { fprintf(stderr, "bench_shm: cannot create a %llu-byte pool (first pass)\n", (unsigned long long)pool_for(size)); exit(1); }
    memset(&p, 0, sizeof(p));
    p.data = src;
    p.size = size;
    for (pass = 0; pass < 2; pass++) {
        t0 = omc_now_ns();
        for (i = 0; i < n; i++) {
            key_of(key, i);
            if (omc_conn_put(s, "p", "c", key, &p, NULL) != OMC_OK) { fprintf(stderr, "bench_shm: first-pass put failed\n"); exit(1); }
        }
        t1 = omc_now_ns();
        *(pass ? refill_gbps : first_gbps) = (double)size * (double)n / (double)(t1 - t0);
        for (i = 0; i < n; i++) { key_of(key, i); omc_conn_cleanup(s, "p", "c", key); }
    }
    omc_conn_destroy(s);
}

static double median_d(double* v, int n) {
    int i, j;
    for (i = 1; i < n; i++) for (j = i; j > 0 && v[j] < v[j - 1]; j--) { double x = v[j]; v[j] = v[j - 1]; v[j - 1] = x; }
    return n ? v[n / 2] : 0;
}

/* ---- vLLM-Omni's design: a new segment and a lock file per request ----------------------------- */

static void base_names(char* seg, char* lock, long owner, uint64_t i) {
    snprintf(seg, 96, "/dev/shm/omcbase-%ld-%llu", owner, (unsigned long long)i);
    snprintf(lock, 96, "/dev/shm/shm_omcbase-%ld-%llu_lockfile.lock", owner, (unsigned long long)i);
}

static void base_consumer(int rfd, shared_page* sp, uint64_t size, uint64_t n, long owner) {
    uint8_t* dst = (uint8_t*)big_buffer(size, 3);
    uint64_t i;
    for (i = 0; i < n; i++) {
        char seg[96], lock[96];
        uint64_t j;
        struct stat st;
        void* m;
        int lfd, fd;
        if (read(rfd, &j, sizeof(j)) != (ssize_t)sizeof(j) || j != i) _exit(3);
        base_names(seg, lock, owner, j);
        lfd = open(lock, O_RDWR | O_CREAT, 0600);
        flock(lfd, LOCK_EX);
        fd = open(seg, O_RDWR);
        if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != size) _exit(4);
        m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) _exit(5);
        memcpy(dst, m, (size_t)size);       /* the reader copies the bytes out */
        munmap(m, (size_t)size);
        close(fd);
        unlink(seg);
        flock(lfd, LOCK_UN);
        close(lfd);
        unlink(lock);
    }
    sp->t_end = omc_now_ns();
    _exit(0);
}

static double bench_per_request(uint64_t size, uint64_t n, const uint8_t* src) {
    shared_page* sp = shared_new();
    int fds[2];
    uint64_t i;
    pid_t pid;
    omc_time_ns t0;
    double gbps = 0;
    long owner = (long)getpid();
    if (pipe(fds) != 0) { perror("pipe"); exit(1); }
    pid = fork();
    if (pid == 0) { close(fds[1]); base_consumer(fds[0], sp, size, n, owner); }
    close(fds[0]);
    t0 = omc_now_ns();
    for (i = 0; i < n; i++) {
        char seg[96], lock[96];
        void* m;
        int lfd, fd;
        base_names(seg, lock, owner, i);
        lfd = open(lock, O_RDWR | O_CREAT, 0600);
        flock(lfd, LOCK_EX);
        fd = open(seg, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)size) != 0) { perror("per-request segment"); exit(1); }
        m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) { perror("mmap"); exit(1); }
        memcpy(m, src, (size_t)size);
        munmap(m, (size_t)size);
        close(fd);
        flock(lfd, LOCK_UN);
        close(lfd);
        if (write(fds[1], &i, sizeof(i)) != (ssize_t)sizeof(i)) { perror("bench_shm: per-request pipe"); exit(1); }   /* "the metadata" */
    }
    close(fds[1]);
    if (finish_child(pid)) gbps = (double)size * (double)n / (double)(sp->t_end - t0);
    munmap(sp, sizeof(*sp));
    return gbps;
}

/* ---- the run ---------------------------------------------------------------------------------- */

typedef struct row {
    uint64_t size;
    uint64_t n_stream, n_base, n_handoff, n_memcpy;
    double memcpy_gbps[ROUNDS], memcpy_pool_gbps[ROUNDS], omc_gbps[ROUNDS], omc_noinline_gbps[ROUNDS], base_gbps[ROUNDS];
    double first_gbps[ROUNDS * FIRST_REPS], refill_gbps[ROUNDS * FIRST_REPS];
    int nfirst;
    int64_t *lat, *lat_spin;
    uint32_t nlat, nlat_spin;
    double p50_us, p99_us;
} row;

static double pct_us(int64_t* v, uint32_t n, uint32_t pct) {
    if (!n) return 0;
    qsort(v, n, sizeof(int64_t), cmp_i64);
    return (double)v[(uint64_t)n * pct / 100] / 1000.0;
}

/* iterations: about `bytes` per measurement, within [lo, hi] */
static uint64_t iters(uint64_t size, uint64_t bytes, uint64_t lo, uint64_t hi) {
    uint64_t n = bytes / size;
    return n < lo ? lo : n > hi ? hi : n;
}

static uint64_t meminfo_kib(const char* field) {
    char line[256];
    uint64_t v = 0;
    FILE* f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0) { v = strtoull(line + strlen(field), NULL, 10); break; }
    fclose(f);
    return v;
}

static void cpu_name(char* out, size_t n) {
    char line[256];
    FILE* f = fopen("/proc/cpuinfo", "r");
    snprintf(out, n, "unknown");
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char* c = strchr(line, ':');
            if (c) { c += 2; c[strcspn(c, "\n")] = 0; snprintf(out, n, "%s", c); }
            break;
        }
    }
    fclose(f);
}

static double loadavg(void) {
    double l = -1;
    FILE* f = fopen("/proc/loadavg", "r");
    if (f) { if (fscanf(f, "%lf", &l) != 1) l = -1; fclose(f); }
    return l;
}

int main(int argc, char** argv) {
    const int quick = getenv("BENCH_SHM_QUICK") != NULL, no_base = getenv("BENCH_SHM_NO_BASELINE") != NULL;
    const int first_only = getenv("BENCH_SHM_FIRST_ONLY") != NULL;
    const int rounds = quick ? 1 : getenv("BENCH_ROUNDS") && atoi(getenv("BENCH_ROUNDS")) >= 1 && atoi(getenv("BENCH_ROUNDS")) <= ROUNDS
                                       ? atoi(getenv("BENCH_ROUNDS")) : ROUNDS;
    const char* path = argc > 1 ? argv[1] : NULL;
    uint64_t sizes[] = { 64, 4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 186 * MiB, 1 * GiB };
    int nsizes = 7, i, round;
    row rows[7];
    struct statvfs sv;
    uint64_t avail_kib = meminfo_kib("MemAvailable:"), shm_free = 0;
    char cpu[128];
    double load0 = loadavg(), load1;
    int spin_cpu_p, spin_cpu_c, two_cpus = sysconf(_SC_NPROCESSORS_ONLN) >= 2;
    uint8_t* src;
    FILE* f;
    omc_shm_desc sd;
    memset(&sd, 0, sizeof(sd));
    omc_shm_sweep_dead(&sd, NULL);
    snprintf(bench_dir, sizeof(bench_dir), "/dev/shm/omniconn-bench-XXXXXX");
    if (!mkdtemp(bench_dir)) bench_dir[0] = '\0';          /* then /dev/shm itself */
    if (statvfs("/dev/shm", &sv) == 0) shm_free = (uint64_t)sv.f_bavail * sv.f_frsize;
    /* 1 GiB needs ~6 GiB: pool (3 x size) + source + memcpy pair; leave room for everyone else */
    if (quick || avail_kib < 10 * (GiB / KiB) || shm_free < 5 * GiB) nsizes = 6;
    if (getenv("BENCH_SHM_SIZES")) {       /* a subset, for quick looks at one row */
        const char* p = getenv("BENCH_SHM_SIZES");
        nsizes = 0;
        while (*p && nsizes < 7) {
            char* end;
            uint64_t v = strtoull(p, &end, 10);
            if (end == p) break;
            if (v) sizes[nsizes++] = v;
            p = *end ? end + 1 : end;
        }
    }
    if (getenv("BENCH_SHM_CPUS") && sscanf(getenv("BENCH_SHM_CPUS"), "%d,%d", &cpu_producer, &cpu_consumer) != 2) {
        fprintf(stderr, "bench_shm: BENCH_SHM_CPUS must be P,C (two CPU numbers)\n");
        return 2;
    }
    if (getenv("BENCH_SHM_SPIN_US")) {
        long long us = atoll(getenv("BENCH_SHM_SPIN_US"));
        consumer_spin_ns = us < 0 ? OMC_SHM_SPIN_FOREVER : us == 0 ? -1 : us * 1000;
    }
    spin_cpu_p = cpu_producer >= 0 ? cpu_producer : 0;
    spin_cpu_c = cpu_producer >= 0 ? cpu_consumer : 1;
    cpu_name(cpu, sizeof(cpu));
    printf("bench_shm: %s, %ld cores, MemAvailable %.1f GiB, /dev/shm free %.1f GiB, load %.2f%s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN),
           (double)avail_kib / (1024.0 * 1024.0), (double)shm_free / (double)GiB, load0, quick ? " (QUICK run)" : "");
    memset(rows, 0, sizeof(rows));
    for (i = 0; i < nsizes; i++) {
        uint64_t s = sizes[i];
        row* r = &rows[i];
        r->size = s;
        r->n_stream = quick ? iters(s, 64 * MiB, 4, 20000) : iters(s, 2 * GiB, 8, 200000);
        r->n_base = quick ? iters(s, 16 * MiB, 2, 1000) : iters(s, 512 * MiB, 3, 10000);
        r->n_handoff = quick ? iters(s, 64 * MiB, 3, 2000) : iters(s, 1 * GiB, 5, 10000);
        r->n_memcpy = iters(s, quick ? 256 * MiB : 4 * GiB, 4, 4000000);
        r->lat = (int64_t*)calloc(MAX_LAT * ROUNDS, sizeof(int64_t));
        r->lat_spin = (int64_t*)calloc(MAX_LAT * ROUNDS, sizeof(int64_t));
    }
    for (round = 0; round < rounds; round++) {
        for (i = 0; i < nsizes; i++) {
            row* r = &rows[i];
            int k;
            src = (uint8_t*)big_buffer(r->size, 0x5A);
            for (k = 0; k < FIRST_REPS; k++, r->nfirst++) bench_first_pass(r->size, src, &r->first_gbps[r->nfirst], &r->refill_gbps[r->nfirst]);
            if (first_only) {
                printf("  round %d %10llu B: first pass %6.2f GB/s  refill %6.2f GB/s\n", round, (unsigned long long)r->size,
                       r->first_gbps[r->nfirst - 1], r->refill_gbps[r->nfirst - 1]);
                munmap(src, (size_t)r->size);
                continue;
            }
            r->memcpy_gbps[round] = bench_memcpy(r->size, r->n_memcpy);
            r->memcpy_pool_gbps[round] = bench_memcpy_pool(r->size, r->n_stream);
            r->omc_gbps[round] = bench_omniconn(r->size, r->n_stream, 0, src);
            if (r->size < 64 * KiB) r->omc_noinline_gbps[round] = bench_omniconn(r->size, r->n_stream, 1, src);
            r->base_gbps[round] = no_base ? 0 : bench_per_request(r->size, r->n_base, src);
            bench_handoff(r->size, r->n_handoff, src, r->lat, &r->nlat, MAX_LAT * ROUNDS, cpu_producer, cpu_consumer, consumer_spin_ns);
            if (two_cpus && r->size <= 64 * KiB)
                bench_handoff(r->size, r->n_handoff, src, r->lat_spin, &r->nlat_spin, MAX_LAT * ROUNDS, spin_cpu_p, spin_cpu_c, OMC_SHM_SPIN_FOREVER);
            printf("  round %d %10llu B: memcpy %6.2f GB/s  omniconn %6.2f GB/s  per-request %6.3f GB/s\n", round,
                   (unsigned long long)r->size, r->memcpy_gbps[round], r->omc_gbps[round], r->base_gbps[round]);
            fflush(stdout);
            munmap(src, (size_t)r->size);
        }
    }
    load1 = loadavg();
    {
        int nr = rounds;
        double min_ratio_ge_1m = 1e9, r186 = 0, r4k = 0, p50_small = 0;
        f = path ? fopen(path, "w") : stdout;
        if (!f) { perror(path); return 1; }
        fprintf(f, "{\n  \"benchmark\": \"shm\",\n  \"omniconn_version\": \"%s\",\n", OMNICONN_VERSION_STRING);
        fprintf(f, "  \"machine\": {\"cpu\": \"%s\", \"cores\": %ld, \"mem_available_gib\": %.1f, \"dev_shm_free_gib\": %.1f, "
                   "\"load_average_start\": %.2f, \"load_average_end\": %.2f, \"note\": \"shared with other jobs\"},\n",
                cpu, sysconf(_SC_NPROCESSORS_ONLN), (double)avail_kib / (1024.0 * 1024.0), (double)shm_free / (double)GiB, load0, load1);
        fprintf(f, "  \"method\": \"two processes per measurement. omniconn_gbps: producer puts (copy path) payloads as fast as the pool "
                   "allows, consumer takes each with a metadata-less get (zero-copy view, bytes not read) and releases it; bytes / "
                   "(first put .. last release). memcpy_gbps: one thread, one copy between two faulted-in private buffers (warm: small sizes run from cache). "
                   "memcpy_pool_gbps: the same source copied into destinations cycling through a faulted-in region the size of the "
                   "stream's pool, as many copies as the stream has transfers (as cold as the transfer's destination; the transfer's "
                   "first pass through its fresh pool also pays page faults, this baseline does not). "
                   "per_request_segment_gbps: vLLM-Omni's SharedMemoryConnector design in C (lock file + flock, new O_EXCL segment, ftruncate, mmap, copy in; "
                   "reader flock, open, fstat, mmap, copy out, unlink segment and lock file), pipelined through a pipe. handoff: "
                   "ping-pong, time stamp in the payload, put -> metadata-less get (the consumer's spin, then futex) -> release, "
                   "with the settings below. handoff_spin: the same with producer and consumer pinned to two CPUs and the consumer "
                   "never sleeping (spin_ns = OMC_SHM_SPIN_FOREVER), as ucx_perftest tag_lat runs. Throughput "
                   "figures: median of the rounds; percentiles over all samples.%s%s\",\n", quick ? " QUICK run: rough figures." : "", no_base ? " The per-request baseline was skipped (its figures and ratios read 0)." : "");
        fprintf(f, "  \"settings\": {\"cpus\": \"%s\", \"consumer_spin_ns\": %lld, \"handoff_spin_cpus\": \"%d,%d\", "
                   "\"producer_puts_that_found_the_pool_full\": %llu},\n",
                cpu_producer >= 0 ? getenv("BENCH_SHM_CPUS") : "not pinned", (long long)consumer_spin_ns, spin_cpu_p, spin_cpu_c,
                (unsigned long long)producer_pool_full);
        fprintf(f, "  \"rounds\": %d,\n  \"rows\": [\n", nr);
        for (i = 0; i < nsizes; i++) {
            row* r = &rows[i];
            double mc = median3(r->memcpy_gbps, nr), mp = median3(r->memcpy_pool_gbps, nr), om = median3(r->omc_gbps, nr), ba = median3(r->base_gbps, nr);
            r->p50_us = pct_us(r->lat, r->nlat, 50);
            r->p99_us = pct_us(r->lat, r->nlat, 99);
            if (r->size >= MiB && mc > 0 && om / mc < min_ratio_ge_1m) min_ratio_ge_1m = om / mc;
            if (r->size == 186 * MiB) r186 = (ba > 0 ? om / ba : 0);
            if (r->size == 4 * KiB) r4k = (ba > 0 ? om / ba : 0);
            if (r->size == 64) p50_small = r->p50_us;
            fprintf(f, "    {\"size_bytes\": %llu, \"omniconn_gbps\": %.4f, ", (unsigned long long)r->size, om);
            if (r->size < 64 * KiB) fprintf(f, "\"omniconn_noinline_gbps\": %.4f, ", median3(r->omc_noinline_gbps, nr));
            if (r->nlat_spin)
                fprintf(f, "\"handoff_spin_us_p50\": %.3f, \"handoff_spin_us_p99\": %.3f, ", pct_us(r->lat_spin, r->nlat_spin, 50),
                        pct_us(r->lat_spin, r->nlat_spin, 99));
            fprintf(f, "\"first_pass_gbps\": %.4f, \"refill_pass_gbps\": %.4f, ", median_d(r->first_gbps, r->nfirst),
                    median_d(r->refill_gbps, r->nfirst));
            fprintf(f, "\"memcpy_pool_gbps\": %.4f, \"omniconn_vs_memcpy_pool\": %.3f, ", mp, mp > 0 ? om / mp : 0);
            fprintf(f, "\"memcpy_gbps\": %.4f, \"per_request_segment_gbps\": %.4f, \"handoff_us_p50\": %.3f, \"handoff_us_p99\": %.3f, "
                       "\"omniconn_vs_memcpy\": %.3f, \"omniconn_vs_per_request\": %.1f, \"iterations\": {\"stream\": %llu, \"per_request\": %llu, "
                       "\"handoff\": %u, \"memcpy\": %llu}}%s\n",
                    mc, ba, r->p50_us, r->p99_us, mc > 0 ? om / mc : 0, ba > 0 ? om / ba : 0, (unsigned long long)r->n_stream, (unsigned long long)r->n_base,
                    r->nlat, (unsigned long long)r->n_memcpy, i + 1 < nsizes ? "," : "");
        }
        fprintf(f, "  ],\n  \"targets\": {\n");
        fprintf(f, "    \"omniconn_ge_0_9x_memcpy_from_1MiB\": {\"min_ratio\": %.3f, \"limit\": 0.9, \"met\": %s},\n", min_ratio_ge_1m,
                min_ratio_ge_1m >= 0.9 ? "true" : "false");
        fprintf(f, "    \"ge_5x_per_request_at_186MiB\": {\"ratio\": %.1f, \"limit\": 5, \"met\": %s},\n", r186, r186 >= 5 ? "true" : "false");
        fprintf(f, "    \"ge_100x_per_request_at_4KiB\": {\"ratio\": %.1f, \"limit\": 100, \"met\": %s},\n", r4k, r4k >= 100 ? "true" : "false");
        fprintf(f, "    \"small_handoff_p50_le_1us\": {\"p50_us_at_64B\": %.3f, \"limit_us\": 1.0, \"met\": %s}\n", p50_small,
                p50_small > 0 && p50_small <= 1.0 ? "true" : "false");
        fprintf(f, "  }%s\n}\n", nsizes < 7 ? ",\n  \"skipped\": \"1 GiB row: needs MemAvailable >= 10 GiB and /dev/shm free >= 5 GiB (or QUICK run)\"" : "");
        if (path) { fclose(f); printf("bench_shm: wrote %s\n", path); }
    }
    if (bench_dir[0]) rmdir(bench_dir);
    return 0;
}
