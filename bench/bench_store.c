/* bench_store.c - the store connector against redis-benchmark on the same Redis server, side by
   side in one run, and the priority executor's effect on GET latency under a PUT flood.

   usage: bench_store [out.json]          (make bench-store writes bench/results/store.json)
   env:   BENCH_ROUNDS=N                  alternating rounds per size (default 5; medians)
          BENCH_STORE_QUICK=1             a fast smoke run (fewer operations)

   Starts its own redis-server (loopback port, temporary directory, no persistence) and kills
   it at exit. Per payload size (4 KiB, 1 MiB, 16 MiB):
     omniconn_put_mbps / get_mbps   one thread: omc_conn_put of the payload (copy path), then
                                    omc_conn_get with the put's metadata (a view into the reader's
                                    pool, released), N times, put and get timed apart; MB/s.
     baseline_set_mbps / get_mbps   redis-benchmark -c 1 -P 1 -t set,get -d SIZE on the same
                                    server: a plain client doing SET and GET of the same size.
     ratio_put / ratio_get          omniconn / baseline, medians of alternating rounds.
   Note the store connector does more per payload than a SET: two keys (metadata hash + data),
   a script that refuses a second writer, and a claim script on get (one round trip each).

   Batched gets (32 cache entries per size: 64 KiB, 1 MiB, 4 MiB; one warm-up round, then
   alternating rounds, medians):
     batch_get_mbps / single_get_mbps  omc_store_get_batch of the 32 keys (one pipelined request)
                                       beside 32 omc_conn_get one after another (the baseline);
                                       ratio_batch = batch / single.

   Priority effect (4 KiB GETs, max_inflight 2, a flood of 1 MiB PUTs kept 64 deep in the queue):
     get_p50_us / get_p99_us  idle              no flood
     ... flood_prio                              flood; GETs at OMC_STORE_GET priority
     ... flood_fifo                              flood; GETs submitted at PUT priority, i.e.
                                                 what one FIFO queue would do */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_store.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static pid_t srv_pid;
static int srv_port;
static char srv_dir[64];

static void srv_stop(void) {
    if (srv_pid > 0) { kill(srv_pid, SIGKILL); waitpid(srv_pid, NULL, 0); srv_pid = 0; }
    if (srv_dir[0]) { char cmd[128]; snprintf(cmd, sizeof(cmd), "rm -rf '%s'", srv_dir); if (system(cmd) != 0) {} }
}

static int srv_start(void) {
    struct sockaddr_in a;
    socklen_t l = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), i;
    char ps[16], cmd[128];
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr*)&a, &l) != 0) return -1;
    srv_port = ntohs(a.sin_port);
    close(fd);
    snprintf(srv_dir, sizeof(srv_dir), "/tmp/omc-bench-store-%ld", (long)getpid());
    mkdir(srv_dir, 0700);
    snprintf(ps, sizeof(ps), "%d", srv_port);
    srv_pid = fork();
    if (srv_pid == 0) {
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0) { dup2(dn, 1); dup2(dn, 2); }
        execlp("redis-server", "redis-server", "--port", ps, "--bind", "127.0.0.1", "--dir", srv_dir, "--save", "",
               "--appendonly", "no", (char*)NULL);
        _exit(127);
    }
    for (i = 0; i < 3000; i++) {     /* until it answers */
        snprintf(cmd, sizeof(cmd), "redis-cli -p %d PING >/dev/null 2>&1", srv_port);
        if (system(cmd) == 0) return 0;
        usleep(5000);
    }
    return -1;
}

static int cmp_d(const void* x, const void* y) {
    double a = *(const double*)x, b = *(const double*)y;
    return a < b ? -1 : a > b;
}
static double median(double* v, int n) { qsort(v, (size_t)n, sizeof(double), cmp_d); return n ? v[n / 2] : 0; }

/* our side: put a payload, get it with its metadata, N times (the server's memory is reused,
   as redis-benchmark's one key reuses it); put and get timed apart */
static void run_ours(omc_conn* c, uint64_t size, int n, int round, double* put_mbps, double* get_mbps) {
    void* data = malloc(size);
    char key[64];
    omc_time_ns tp = 0, tg = 0;
    int i;
    memset(data, 0x5a, size);
    for (i = 0; i < n; i++) {
        omc_payload p;
        omc_meta m = {0};
        omc_buffer b;
        omc_time_ns t0, t1, t2;
        memset(&p, 0, sizeof(p));
        p.data = data; p.size = size;
        snprintf(key, sizeof(key), "b%d-%llu-%d", round, (unsigned long long)size, i);
        t0 = omc_now_ns();
        if (omc_conn_put(c, "bench", "x", key, &p, &m) != OMC_OK) { fprintf(stderr, "put failed\n"); exit(1); }
        t1 = omc_now_ns();
        if (omc_conn_get(c, "bench", "x", key, m.data, m.size, omc_deadline_after_ms(20000), &b) != OMC_OK) {
            fprintf(stderr, "get failed\n"); exit(1);
        }
        omc_buffer_release(&b);
        t2 = omc_now_ns();
        omc_meta_free(&m);
        tp += t1 - t0;
        tg += t2 - t1;
    }
    *put_mbps = (double)size * n / ((double)tp / 1e9) / 1e6;
    *get_mbps = (double)size * n / ((double)tg / 1e9) / 1e6;
    free(data);
}

/* the baseline: redis-benchmark's SET and GET rps at this size */
static void run_baseline(uint64_t size, int n, double* set_mbps, double* get_mbps) {
    char cmd[256], line[512];
    FILE* f;
    *set_mbps = *get_mbps = 0;
    snprintf(cmd, sizeof(cmd), "redis-benchmark -p %d -c 1 -P 1 -n %d -d %llu -t set,get --csv 2>/dev/null", srv_port, n,
             (unsigned long long)size);
    f = popen(cmd, "r");
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        double rps;
        if (sscanf(line, "\"SET\",\"%lf\"", &rps) == 1) *set_mbps = rps * (double)size / 1e6;
        else if (sscanf(line, "\"GET\",\"%lf\"", &rps) == 1) *get_mbps = rps * (double)size / 1e6;
    }
    pclose(f);
    if (system("true") != 0) {}
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d FLUSHALL >/dev/null 2>&1", srv_port);
    if (system(cmd) != 0) {}
}

/* batched gets beside single gets of the same 32 cache entries (metadata-less, as LMCache reads) */
#define BATCH_N 32
static double batch_once(omc_conn* c, uint64_t size, int batch) {
    omc_batch_item it[BATCH_N];
    omc_buffer b[BATCH_N];
    char keys[BATCH_N][32];
    omc_time_ns t0;
    int i, ok = 1;
    for (i = 0; i < BATCH_N; i++) snprintf(keys[i], sizeof(keys[i]), "batch-%llu-%d", (unsigned long long)size, i);
    t0 = omc_now_ns();
    if (batch) {
        memset(it, 0, sizeof(it));
        for (i = 0; i < BATCH_N; i++) it[i].key = keys[i];
        ok = omc_store_get_batch(c, "bench", "x", it, BATCH_N, OMC_STORE_GET, omc_deadline_after_ms(60000)) == OMC_OK;
        for (i = 0; i < BATCH_N; i++) { ok = ok && it[i].buffer.size == size; omc_buffer_release(&it[i].buffer); }
    } else {
        for (i = 0; i < BATCH_N; i++)
            ok = ok && omc_conn_get(c, "bench", "x", keys[i], NULL, 0, omc_deadline_after_ms(60000), &b[i]) == OMC_OK && b[i].size == size;
        for (i = 0; i < BATCH_N; i++) omc_buffer_release(&b[i]);
    }
    if (!ok) { fprintf(stderr, "bench_store: a batched or single get failed\n"); exit(1); }
    return (double)size * BATCH_N / ((double)(omc_now_ns() - t0) / 1e9) / 1e6;
}
static void run_batches(omc_conn* c, uint64_t size, int rounds, double* batch_mbps, double* single_mbps) {
    void* data = malloc(size);
    double bm[32], sm[32];
    int i, r;
    memset(data, 3, size);
    for (i = 0; i < BATCH_N; i++) {
        omc_payload p;
        char key[32];
        memset(&p, 0, sizeof(p));
        p.data = data; p.size = size; p.readers = OMC_STORE_READERS_CACHE; p.ttl_ms = 600000;
        snprintf(key, sizeof(key), "batch-%llu-%d", (unsigned long long)size, i);
        if (omc_conn_put(c, "bench", "x", key, &p, NULL) != OMC_OK) { fprintf(stderr, "bench_store: put failed\n"); exit(1); }
    }
    batch_once(c, size, 1);         /* warm-up: the pool's pages are touched the first time here */
    batch_once(c, size, 0);
    for (r = 0; r < rounds && r < 32; r++) {      /* alternating, the first one swapped every round */
        if (r % 2) { sm[r] = batch_once(c, size, 0); bm[r] = batch_once(c, size, 1); }
        else { bm[r] = batch_once(c, size, 1); sm[r] = batch_once(c, size, 0); }
    }
    *batch_mbps = median(bm, r);
    *single_mbps = median(sm, r);
    free(data);
}

/* the priority effect */
typedef struct flood { omc_conn* c; volatile int stop; uint64_t done; } flood;
static void* flood_fn(void* arg) {
    flood* F = (flood*)arg;
    void* data = malloc(1u << 20);
    omc_store_ticket* q[64];
    int head = 0, n = 0;
    uint64_t k = 0;
    memset(data, 1, 1u << 20);
    while (!F->stop) {
        omc_payload p;
        char key[64];
        memset(&p, 0, sizeof(p));
        p.data = data; p.size = 1u << 20; p.ttl_ms = 20000;
        if (n == 64) {      /* keep 64 in the queue */
            omc_store_ticket_wait(q[head], OMC_WAIT_FOREVER, NULL);
            omc_store_ticket_free(q[head]);
            head = (head + 1) % 64;
            n--;
            F->done++;
        }
        snprintf(key, sizeof(key), "flood-%llu", (unsigned long long)k++);
        if (omc_store_submit_put(F->c, "bench", "x", key, &p, OMC_STORE_PUT, omc_deadline_after_ms(60000), &q[(head + n) % 64]) == OMC_OK) n++;
    }
    while (n) { omc_store_ticket_wait(q[head], OMC_WAIT_FOREVER, NULL); omc_store_ticket_free(q[head]); head = (head + 1) % 64; n--; }
    free(data);
    return NULL;
}

static void get_latency(omc_conn* c, int with_flood, omc_store_priority prio, int n, double* p50, double* p99) {
    double* lat = (double*)malloc(sizeof(double) * (size_t)n);
    char buf[4096];
    flood F;
    pthread_t th;
    int i;
    memset(buf, 2, sizeof(buf));
    memset(&F, 0, sizeof(F));
    F.c = c;
    if (with_flood) {
        pthread_create(&th, NULL, flood_fn, &F);
        while (__atomic_load_n(&F.done, __ATOMIC_RELAXED) < 8) usleep(1000);     /* the queue is full */
    }
    for (i = 0; i < n; i++) {
        omc_payload p;
        omc_store_ticket* t = NULL;
        omc_buffer b;
        omc_time_ns t0;
        char key[64];
        memset(&p, 0, sizeof(p));
        p.data = buf; p.size = sizeof(buf);
        snprintf(key, sizeof(key), "lat-%d-%d-%d", with_flood, (int)prio, i);
        omc_conn_put(c, "bench", "x", key, &p, NULL);      /* (not timed) */
        t0 = omc_now_ns();
        if (omc_store_submit_get(c, "bench", "x", key, prio, omc_deadline_after_ms(60000), &t) == OMC_OK &&
            omc_store_ticket_wait(t, OMC_WAIT_FOREVER, &b) == OMC_OK)
            omc_buffer_release(&b);
        lat[i] = (double)(omc_now_ns() - t0) / 1000.0;
        omc_store_ticket_free(t);
    }
    if (with_flood) { F.stop = 1; pthread_join(th, NULL); }
    qsort(lat, (size_t)n, sizeof(double), cmp_d);
    *p50 = lat[n / 2];
    *p99 = lat[(n * 99) / 100];
    free(lat);
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "redis-cli -p %d FLUSHALL >/dev/null 2>&1", srv_port);
        if (system(cmd) != 0) {}
    }
}

int main(int argc, char** argv) {
    static const uint64_t sizes[] = { 4096, 1u << 20, 16u << 20 };
    int quick = getenv("BENCH_STORE_QUICK") != NULL, rounds = getenv("BENCH_ROUNDS") ? atoi(getenv("BENCH_ROUNDS")) : 5;
    FILE* out = argc > 1 ? fopen(argv[1], "w") : NULL;
    omc_store_desc d;
    omc_conn* c = NULL;
    char url[64];
    size_t si;
    double p50[3], p99[3];
    if (rounds < 1) rounds = 1;
    if (quick) rounds = 1;
    if (system("command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null") != 0) {
        fprintf(stderr, "bench_store: redis-server / redis-benchmark not installed (scripts/install-deps.sh)\n");
        return 1;
    }
    atexit(srv_stop);
    if (srv_start() != 0) { fprintf(stderr, "bench_store: cannot start redis-server\n"); return 1; }
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", srv_port);
    memset(&d, 0, sizeof(d));
    d.url = url;
    d.pool_size = 256u << 20;
    if (omc_store_create(&d, &c) != OMC_OK) return 1;
    printf("%-10s %12s %12s %12s %12s %8s %8s\n", "size", "omc_put", "redis_set", "omc_get", "redis_get", "put", "get");
    if (out) {
        char load[64] = "";
        FILE* lf = fopen("/proc/loadavg", "r");
        if (lf) { if (!fgets(load, sizeof(load), lf)) load[0] = '\0'; fclose(lf); }
        load[strcspn(load, "\n")] = '\0';
        fprintf(out, "{\n  \"baseline\": \"redis-benchmark -c 1 -P 1 -t set,get -d SIZE, same server\",\n  \"rounds\": %d,\n"
                "  \"loadavg_at_start\": \"%s\",\n  \"sizes\": [\n", rounds, load);
    }
    for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        uint64_t size = sizes[si];
        int n = size <= 4096 ? (quick ? 2000 : 20000) : size <= (1u << 20) ? (quick ? 50 : 400) : (quick ? 5 : 30);
        double op[16], og[16], bs[16], bg[16], rp[16], rg[16];
        int r;
        for (r = 0; r < rounds && r < 16; r++) {     /* alternating: ours, then the baseline */
            run_ours(c, size, n, r, &op[r], &og[r]);
            run_baseline(size, n, &bs[r], &bg[r]);
            rp[r] = bs[r] > 0 ? op[r] / bs[r] : 0;
            rg[r] = bg[r] > 0 ? og[r] / bg[r] : 0;
        }
        {
            double mop = median(op, r), mog = median(og, r), mbs = median(bs, r), mbg = median(bg, r), mrp = median(rp, r), mrg = median(rg, r);
            printf("%-10llu %9.1f MB/s %9.1f MB/s %9.1f MB/s %9.1f MB/s %7.2fx %7.2fx\n", (unsigned long long)size, mop, mbs, mog, mbg, mrp, mrg);
            if (out) fprintf(out, "    {\"size\": %llu, \"omniconn_put_mbps\": %.1f, \"baseline_set_mbps\": %.1f, \"omniconn_get_mbps\": %.1f, "
                             "\"baseline_get_mbps\": %.1f, \"ratio_put\": %.3f, \"ratio_get\": %.3f}%s\n", (unsigned long long)size, mop, mbs,
                             mog, mbg, mrp, mrg, si + 1 < sizeof(sizes) / sizeof(sizes[0]) ? "," : "");
        }
    }
    {
        static const uint64_t bsizes[] = { 64u << 10, 1u << 20, 4u << 20 };
        int brounds = quick ? 3 : rounds * 3;
        if (out) fprintf(out, "  ],\n  \"batched_get\": {\"baseline\": \"%d omc_conn_get one after another\", \"rounds\": %d, \"sizes\": [\n",
                         BATCH_N, brounds);
        for (si = 0; si < sizeof(bsizes) / sizeof(bsizes[0]); si++) {
            double bm, sm;
            run_batches(c, bsizes[si], brounds, &bm, &sm);
            printf("get_batch of %d x %-8llu %9.1f MB/s, single gets %9.1f MB/s, ratio %.2fx\n", BATCH_N,
                   (unsigned long long)bsizes[si], bm, sm, sm > 0 ? bm / sm : 0);
            if (out) fprintf(out, "    {\"size\": %llu, \"batch_get_mbps\": %.1f, \"single_get_mbps\": %.1f, \"ratio_batch\": %.3f}%s\n",
                             (unsigned long long)bsizes[si], bm, sm, sm > 0 ? bm / sm : 0,
                             si + 1 < sizeof(bsizes) / sizeof(bsizes[0]) ? "," : "");
        }
        if (out) fprintf(out, "  ]},\n");
    }
    omc_conn_destroy(c);
    d.max_inflight = 2;
    if (omc_store_create(&d, &c) != OMC_OK) return 1;
    get_latency(c, 0, OMC_STORE_GET, quick ? 50 : 300, &p50[0], &p99[0]);
    get_latency(c, 1, OMC_STORE_GET, quick ? 50 : 300, &p50[1], &p99[1]);
    get_latency(c, 1, OMC_STORE_PUT, quick ? 20 : 100, &p50[2], &p99[2]);
    printf("4 KiB GET latency (max_inflight 2): idle p50 %.0f us p99 %.0f us | PUT flood, GET priority p50 %.0f p99 %.0f | "
           "PUT flood, one FIFO p50 %.0f p99 %.0f\n", p50[0], p99[0], p50[1], p99[1], p50[2], p99[2]);
    if (out) {
        char load[64] = "";
        FILE* lf = fopen("/proc/loadavg", "r");
        if (lf) { if (!fgets(load, sizeof(load), lf)) load[0] = '\0'; fclose(lf); }
        load[strcspn(load, "\n")] = '\0';
        fprintf(out, "  \"loadavg_at_end\": \"%s\",\n", load);
        fprintf(out, "  \"get_latency_us\": {\"idle\": {\"p50\": %.1f, \"p99\": %.1f}, \"flood_prio\": {\"p50\": %.1f, \"p99\": %.1f}, "
                "\"flood_fifo\": {\"p50\": %.1f, \"p99\": %.1f}}\n}\n", p50[0], p99[0], p50[1], p99[1], p50[2], p99[2]);
        fclose(out);
    }
    omc_conn_destroy(c);
    return 0;
}
