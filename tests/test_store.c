/* The store connector against real Redis servers that this test starts and stops itself
   (redis-server on a private loopback port and a unix socket, each in its own temporary
   directory; a 3-master Redis Cluster with one replica per master): the contract suite in threads
   and across two processes, the executor's priority order and in-flight bound (checked against
   the server's own CLIENT LIST), a deadline that passes in the queue, the server killed in the
   middle of a batch and restarted, maxmemory, proto-max-bulk-len, a lying metadata key, two
   writers of one key, AUTH / ACL, an unreachable server, and in the cluster: slot routing over
   all masters, MOVED and ASK redirections, and a master stopped (its replica takes over).

   redis-server missing is a failure with the fix (scripts/install-deps.sh installs it), never a
   skip. Every server is killed at exit, also when a check fails. */
/* This program is the build with OMNICONN_MALLOC / OMNICONN_FREE defined to counting functions
   (the library's fallback when a desc sets no alloc_fn/free_fn): see "allocations" below. */
static void* counting_fallback_malloc(__SIZE_TYPE__ size);     /* no system header before omniconn.h */
static void counting_fallback_free(void* p);
#define OMNICONN_MALLOC(sz) counting_fallback_malloc(sz)
#define OMNICONN_FREE(p) counting_fallback_free(p)
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
/* The store's implementation is compiled with the libc allocator's names taken away: a bare
   malloc / calloc / realloc / free in omniconn_store.h calls an undeclared function, and this
   file does not compile (warnings are errors). */
#define malloc(n) omniconn_store_h_calls_libc_malloc(n)
#define calloc(n, s) omniconn_store_h_calls_libc_calloc(n, s)
#define realloc(p, n) omniconn_store_h_calls_libc_realloc(p, n)
#define free(p) omniconn_store_h_calls_libc_free(p)
#include "omniconn_store.h"
#undef malloc
#undef calloc
#undef realloc
#undef free
#include "omc_test.h"
#include "contract.h"

#include <dirent.h>
#include <signal.h>

OMC_TEST_TSAN_IGNORE_LIBZMQ()    /* the directory tests use the remote connector: see omc_test.h */
#include <sys/stat.h>
#include <sys/wait.h>

/* ---- servers -------------------------------------------------------------------------------- */

typedef struct rsrv {
    pid_t pid;
    int port;
    char dir[128];
    char sock[200];
    char url[256];
    char usock[256];
} rsrv;

#define MAX_SERVERS 12
static rsrv* all_servers[MAX_SERVERS];
static int nservers;
static char top_dir[64];

static void kill_all(void) {
    int i;
    for (i = 0; i < nservers; i++)
        if (all_servers[i] && all_servers[i]->pid > 0) { kill(all_servers[i]->pid, SIGKILL); waitpid(all_servers[i]->pid, NULL, 0); all_servers[i]->pid = 0; }
    if (top_dir[0]) { char cmd[200]; snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top_dir); if (system(cmd) != 0) {} }
}
static void on_signal(int sig) { kill_all(); signal(sig, SIG_DFL); raise(sig); }

static int free_port(void) {      /* a loopback port nobody uses now, with port + 10000 free too (cluster bus) */
    int tries;
    for (tries = 0; tries < 50; tries++) {
        struct sockaddr_in a;
        socklen_t l = sizeof(a);
        int fd = socket(AF_INET, SOCK_STREAM, 0), port, fd2, ok;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr*)&a, &l) != 0) { close(fd); continue; }
        port = ntohs(a.sin_port);
        close(fd);
        if (port > 55000 || port < 1024) continue;
        fd2 = socket(AF_INET, SOCK_STREAM, 0);
        a.sin_port = htons((uint16_t)(port + 10000));
        ok = bind(fd2, (struct sockaddr*)&a, sizeof(a)) == 0;
        close(fd2);
        if (ok) return port;
    }
    return -1;
}

/* A raw RESP command over a fresh blocking socket; the reply's first line (and a bulk's body)
   into out. Independent of the library: the test's own look at the server. */
static int raw_cmd_v(int port, const char* sock, char* out, size_t cap, int argc, const char** argv, const size_t* lens) {
    int fd, i;
    char hdr[64];
    size_t n = 0;
    struct timeval tv = {5, 0};
    if (sock) {
        struct sockaddr_un a;
        memset(&a, 0, sizeof(a));
        a.sun_family = AF_UNIX;
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) { close(fd); return -1; }
    } else {
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)port);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) { close(fd); return -1; }
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    snprintf(hdr, sizeof(hdr), "*%d\r\n", argc);
    if (omc_test_write_all(fd, hdr, strlen(hdr))) { close(fd); return -1; }
    for (i = 0; i < argc; i++) {
        size_t l = lens ? lens[i] : strlen(argv[i]);
        snprintf(hdr, sizeof(hdr), "$%zu\r\n", l);
        if (omc_test_write_all(fd, hdr, strlen(hdr)) || omc_test_write_all(fd, argv[i], l) || omc_test_write_all(fd, "\r\n", 2)) { close(fd); return -1; }
    }
    /* read until a complete reply of the simple kinds we use (+ - : $ with body) */
    for (;;) {
        ssize_t k = read(fd, out + n, cap - 1 - n);
        char* nl;
        if (k <= 0) break;
        n += (size_t)k;
        out[n] = '\0';
        nl = strstr(out, "\r\n");
        if (!nl) { if (n >= cap - 1) break; continue; }
        if (out[0] != '$') break;
        if (atoi(out + 1) < 0) break;
        if (n >= (size_t)(nl - out) + 2 + (size_t)atoi(out + 1) + 2 || n >= cap - 1) break;
    }
    out[n] = '\0';
    close(fd);
    return n ? 0 : -1;
}
static int raw_cmd(const rsrv* s, char* out, size_t cap, int argc, const char** argv) {
    return raw_cmd_v(s->port, NULL, out, cap, argc, argv, NULL);
}
#define RAW(s, buf, ...) do { const char* raw_argv_[] = { __VA_ARGS__ }; \
    if (raw_cmd((s), (buf), sizeof(buf), (int)(sizeof(raw_argv_) / sizeof(raw_argv_[0])), raw_argv_) != 0) buf[0] = '\0'; } while (0)

static int have_redis(void) {
    if (system("command -v redis-server >/dev/null 2>&1") != 0 || system("command -v redis-cli >/dev/null 2>&1") != 0) {
        printf("FAIL redis-server / redis-cli are not installed: run scripts/install-deps.sh (Debian packages redis-server, redis-tools)\n");
        return 0;
    }
    return 1;
}

/* Start redis-server with extra "--name value" arguments; wait until it answers PING. */
static int srv_start_args(rsrv* s, int port, const char* const* extra) {
    const char* args[64];
    char ps[16];
    int n = 0, i;
    omc_time_ns until = omc_deadline_after_ms(15000);
    char reply[64];
    if (!s->dir[0]) {
        static int counter;
        snprintf(s->dir, sizeof(s->dir), "%s/s%d", top_dir, counter++);
        mkdir(s->dir, 0700);
    }
    s->port = port;
    snprintf(s->sock, sizeof(s->sock), "%s/redis.sock", s->dir);
    snprintf(s->url, sizeof(s->url), "redis://127.0.0.1:%d", port);
    snprintf(s->usock, sizeof(s->usock), "unix://%s", s->sock);
    snprintf(ps, sizeof(ps), "%d", port);
    args[n++] = "redis-server";
    args[n++] = "--port"; args[n++] = ps;
    args[n++] = "--bind"; args[n++] = "127.0.0.1";
    args[n++] = "--unixsocket"; args[n++] = s->sock;
    args[n++] = "--unixsocketperm"; args[n++] = "700";
    args[n++] = "--dir"; args[n++] = s->dir;
    args[n++] = "--save"; args[n++] = "";
    args[n++] = "--appendonly"; args[n++] = "no";
    args[n++] = "--logfile"; args[n++] = "redis.log";
    args[n++] = "--enable-debug-command"; args[n++] = "local";
    for (i = 0; extra && extra[i] && n < 62; i++) args[n++] = extra[i];
    args[n] = NULL;
    s->pid = fork();
    if (s->pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) { dup2(devnull, 1); dup2(devnull, 2); }
        execvp("redis-server", (char* const*)args);
        _exit(127);
    }
    if (s->pid < 0) return -1;
    for (i = 0; i < nservers; i++) if (all_servers[i] == s) break;
    if (i == nservers && nservers < MAX_SERVERS) all_servers[nservers++] = s;
    while (omc_now_ns() < until) {      /* the event: it answers */
        const char* ping[1] = { "PING" };
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) { s->pid = 0; return -1; }
        if (raw_cmd(s, reply, sizeof(reply), 1, ping) == 0 && strncmp(reply, "+PONG", 5) == 0) return 0;
        usleep(5000);
    }
    return -1;
}
static int srv_start(rsrv* s) { return srv_start_args(s, free_port(), NULL); }
static void srv_kill(rsrv* s) { if (s->pid > 0) { kill(s->pid, SIGKILL); waitpid(s->pid, NULL, 0); s->pid = 0; } }

static rsrv main_srv;     /* the plain server most tests use */

static omc_conn* store_make(const char* url, omc_role role, uint32_t inflight) {
    omc_store_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.url = url;
    d.role = role;
    d.max_inflight = inflight;
    d.pool_size = 64u << 20;
    if (omc_store_create(&d, &c) != OMC_OK) return NULL;
    return c;
}
static omc_conn* make_from_spec(const char* spec) { return store_make(spec, OMC_ROLE_RECEIVER, 0); }

/* log capture: every WARN and ERROR line since the last log_clear() (the most recent 16 KiB) */
static char last_log[16384];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static void capture_log(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level > OMC_LOG_WARN) return;
    pthread_mutex_lock(&log_mu);
    if (strlen(last_log) + strlen(message) + 2 >= sizeof(last_log)) last_log[0] = '\0';
    strcat(last_log, message);
    strcat(last_log, "\n");
    pthread_mutex_unlock(&log_mu);
}
static int log_has(const char* word) {
    int r;
    pthread_mutex_lock(&log_mu);
    r = strstr(last_log, word) != NULL;
    pthread_mutex_unlock(&log_mu);
    return r;
}
static omc_conn* store_make_logged(const char* url) {
    omc_store_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.url = url;
    d.pool_size = 64u << 20;
    d.hooks.log_fn = capture_log;
    if (omc_store_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static omc_result put_bytes(omc_conn* c, const char* key, uint64_t size, uint64_t seed, int64_t ttl, omc_meta* meta) {
    void* d = malloc(size ? size : 1);
    omc_payload p;
    omc_result r;
    omc_test_fill(d, size, seed);
    memset(&p, 0, sizeof(p));
    p.data = d; p.size = size; p.ttl_ms = ttl;
    r = omc_conn_put(c, "a", "b", key, &p, meta);
    free(d);
    return r;
}
static omc_result get_check(omc_conn* c, const char* key, uint64_t size, uint64_t seed, const omc_meta* m) {
    omc_buffer b;
    omc_result r = omc_conn_get(c, "a", "b", key, m ? m->data : NULL, m ? m->size : 0, omc_deadline_after_ms(5000), &b);
    if (r != OMC_OK) return r;
    if (b.size != size || !omc_test_verify(b.data, b.size, seed)) r = OMC_ERR_INTERNAL;   /* wrong bytes: never acceptable */
    omc_buffer_release(&b);
    return r;
}

/* The names the connector gives a payload's keys (the manual's WIRE FORMATS), for the tests
   that reach into the store. */
static void meta_key_of(const char* key, char* out, size_t cap, size_t* len) {
    char q[OMC_KEY_MAX];
    uint32_t ql = 0;
    uint64_t h = 14695981039346656037ull;
    uint32_t i;
    int n;
    omc_qualify_key("a", "b", key, q, &ql);
    for (i = 0; i < ql; i++) { h ^= (uint8_t)q[i]; h *= 1099511628211ull; }
    n = snprintf(out, cap, "omc:{%016llx}m:", (unsigned long long)h);
    memcpy(out + n, q, ql);
    *len = (size_t)n + ql;
}

/* ---- allocations ---------------------------------------------------------------------------- */
/* Every block handed out by a counting allocator carries a 16-byte header (a magic word naming
   the allocator, the size): a free by the other allocator, or of a block neither handed out, is
   seen as "foreign" instead of going unnoticed. */
typedef struct alloc_count { long allocs, frees, foreign; long long live; } alloc_count;
#define HOOK_MAGIC 0x484f4f4b484f4f4bull      /* "HOOKHOOK" */
#define FALLBACK_MAGIC 0x46414c4c4241434bull  /* "FALLBACK" */
static alloc_count fallback_count;

static void* counted_alloc(alloc_count* a, uint64_t magic, size_t size) {
    uint64_t* h = (uint64_t*)malloc(size + 16);
    if (!h) return NULL;
    h[0] = magic;
    h[1] = size;
    __atomic_add_fetch(&a->allocs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&a->live, (long long)size, __ATOMIC_RELAXED);
    return h + 2;
}
static void counted_free(alloc_count* a, uint64_t magic, void* p) {
    uint64_t* h;
    if (!p) return;
    h = (uint64_t*)p - 2;
    if (h[0] != magic) { __atomic_add_fetch(&a->foreign, 1, __ATOMIC_RELAXED); return; }   /* leaked on purpose: not ours to free */
    h[0] = 0;
    __atomic_add_fetch(&a->frees, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&a->live, (long long)h[1], __ATOMIC_RELAXED);
    free(h);
}
static void* counting_fallback_malloc(size_t size) { return counted_alloc(&fallback_count, FALLBACK_MAGIC, size); }
static void counting_fallback_free(void* p) { counted_free(&fallback_count, FALLBACK_MAGIC, p); }
static void* counting_hook_alloc(size_t size, void* user) { return counted_alloc((alloc_count*)user, HOOK_MAGIC, size); }
static void counting_hook_free(void* p, void* user) { counted_free((alloc_count*)user, HOOK_MAGIC, p); }

static int count_key(const char* from, const char* to, const char* key, void* user) {
    (void)from; (void)to; (void)key;
    (*(int*)user)++;
    return 0;
}

/* One session that touches every allocating path a single server has: put and get (with and
   without metadata), batches, exists, list, cleanup, tickets, the flat batch get, health, stats.
   Returns how many blocks the caller received from OMNICONN_MALLOC (metadata blobs, flat
   handles), all given back before it returns. */
static long store_session(omc_conn* c, const char* tag) {
    enum { NB = 12 };
    omc_batch_item it[NB];
    char keys[NB][32], k1[32], k2[32];
    const char* ks[NB + 1];
    omc_result res[NB + 1];
    omc_buffer* handles[NB];
    int32_t results[NB];
    uint8_t data[NB][3000];
    omc_meta m;
    omc_buffer b;
    omc_health h;
    omc_store_stats st;
    omc_store_ticket* tp = NULL;
    omc_store_ticket* tg = NULL;
    omc_payload p;
    long received = 0;
    int i, listed = 0;
    snprintf(k1, sizeof(k1), "%s-one", tag);
    snprintf(k2, sizeof(k2), "%s-two", tag);
    /* put with metadata, get with it; put without, metadata-less get */
    CHECK_OK(put_bytes(c, k1, 70000, 901, 60000, &m));
    received++;
    CHECK_OK(get_check(c, k1, 70000, 901, &m));
    omc_meta_free(&m);
    CHECK_OK(put_bytes(c, k2, 5000, 902, 60000, NULL));
    CHECK_OK(get_check(c, k2, 5000, 902, NULL));
    /* batches, exists, list, cleanup */
    memset(it, 0, sizeof(it));
    for (i = 0; i < NB; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s-b%d", tag, i);
        omc_test_fill(data[i], sizeof(data[i]), 910 + (uint64_t)i);
        it[i].key = keys[i]; it[i].payload.data = data[i]; it[i].payload.size = sizeof(data[i]);
        ks[i] = keys[i];
    }
    ks[NB] = "never-put";
    CHECK_OK(omc_store_put_batch(c, "a", "b", it, NB, omc_deadline_after_ms(20000)));
    for (i = 0; i < NB; i++) if (it[i].meta.data) received++;
    CHECK_OK(omc_store_exists_batch(c, "a", "b", ks, NB + 1, res, omc_deadline_after_ms(5000)));
    CHECK_RES(res[NB], OMC_ERR_NOT_FOUND);
    CHECK_OK(omc_conn_list(c, "a", "b", count_key, &listed, NULL));
    CHECK(listed >= NB);
    CHECK_OK(omc_conn_cleanup(c, "a", "b", keys[NB - 1]));
    CHECK_OK(omc_store_get_batch(c, "a", "b", it, NB - 2, OMC_STORE_GET, omc_deadline_after_ms(20000)));
    for (i = 0; i < NB - 2; i++) {
        CHECK_OK(it[i].result);
        CHECK(it[i].buffer.size == sizeof(data[i]) && omc_test_verify(it[i].buffer.data, it[i].buffer.size, 910 + (uint64_t)i));
        omc_buffer_release(&it[i].buffer);
    }
    for (i = 0; i < NB; i++) omc_meta_free(&it[i].meta);
    /* the flat batch get: key NB-2 is there, NB-1 was cleaned up */
    CHECK_RES(omc_store_get_batch_flat(c, "a", "b", ks + NB - 2, 2, OMC_STORE_GET, 0, omc_deadline_after_ms(5000),
                                       handles, NULL, NULL, NULL, results), OMC_ERR_NOT_FOUND);
    CHECK_OK(results[0]);
    CHECK_RES(results[1], OMC_ERR_NOT_FOUND);
    if (handles[0]) { received++; omc_buffer_release(handles[0]); OMNICONN_FREE(handles[0]); }
    /* tickets */
    memset(&p, 0, sizeof(p));
    p.data = data[0]; p.size = sizeof(data[0]); p.ttl_ms = 60000;
    CHECK_OK(omc_store_submit_put(c, "a", "b", k1, &p, OMC_STORE_PUT, omc_deadline_after_ms(20000), &tp));
    CHECK_OK(omc_store_ticket_wait(tp, omc_deadline_after_ms(20000), NULL));
    omc_store_ticket_free(tp);
    CHECK_OK(omc_store_submit_get(c, "a", "b", k1, OMC_STORE_PREFETCH, omc_deadline_after_ms(20000), &tg));
    CHECK_OK(omc_store_ticket_wait(tg, omc_deadline_after_ms(20000), &b));
    CHECK(b.size == sizeof(data[0]) && omc_test_verify(b.data, b.size, 910));
    omc_buffer_release(&b);
    omc_store_ticket_free(tg);
    omc_conn_health(c, &h);
    CHECK_OK(omc_store_get_stats(c, &st));
    return received;
}

OMC_TEST(store_every_allocation_goes_through_the_desc_hooks_and_the_counts_balance) {
    alloc_count hk;
    omc_store_desc d;
    omc_conn* c = NULL;
    long fb_allocs, fb_frees, received;
    memset(&hk, 0, sizeof(hk));
    memset(&d, 0, sizeof(d));
    d.url = main_srv.url;
    d.role = OMC_ROLE_DUAL;
    d.pool_size = 16u << 20;
    d.max_inflight = 2;
    d.hooks.alloc_fn = counting_hook_alloc;
    d.hooks.free_fn = counting_hook_free;
    d.hooks.user_data = &hk;
    fb_allocs = __atomic_load_n(&fallback_count.allocs, __ATOMIC_RELAXED);
    fb_frees = __atomic_load_n(&fallback_count.frees, __ATOMIC_RELAXED);
    REQUIRE(omc_store_create(&d, &c) == OMC_OK);
    received = store_session(c, "hooked");
    omc_conn_destroy(c);
    printf("  desc hooks: %ld allocations, %ld frees, %lld bytes live, %ld foreign frees\n", hk.allocs, hk.frees, hk.live, hk.foreign);
    CHECK(hk.allocs > 100);              /* the session allocates: requests, replies, buffers, the state */
    CHECK_EQ(hk.allocs, hk.frees);
    CHECK_EQ(hk.live, 0);
    CHECK_EQ(hk.foreign, 0);
    /* the fallback saw only the blocks handed to the caller (metadata, flat handles) */
    CHECK_EQ(__atomic_load_n(&fallback_count.allocs, __ATOMIC_RELAXED) - fb_allocs, received);
    CHECK_EQ(__atomic_load_n(&fallback_count.frees, __ATOMIC_RELAXED) - fb_frees, received);
    CHECK_EQ(__atomic_load_n(&fallback_count.foreign, __ATOMIC_RELAXED), 0);
}

OMC_TEST(store_without_hooks_allocates_from_OMNICONN_MALLOC_and_the_counts_balance) {
    long a0 = __atomic_load_n(&fallback_count.allocs, __ATOMIC_RELAXED);
    long long live0 = __atomic_load_n(&fallback_count.live, __ATOMIC_RELAXED);
    long allocs;
    omc_conn* c = store_make(main_srv.url, OMC_ROLE_DUAL, 2);
    REQUIRE(c);
    store_session(c, "fallback");
    omc_conn_destroy(c);
    allocs = __atomic_load_n(&fallback_count.allocs, __ATOMIC_RELAXED) - a0;
    printf("  OMNICONN_MALLOC: %ld allocations in the session\n", allocs);
    CHECK(allocs > 100);
    CHECK_EQ(__atomic_load_n(&fallback_count.live, __ATOMIC_RELAXED), live0);
    CHECK_EQ(__atomic_load_n(&fallback_count.foreign, __ATOMIC_RELAXED), 0);
}

/* The source itself: outside comments and string literals, omniconn_store.h names no libc
   allocation call (everything goes through omc__malloc / omc__calloc / omc__free, and the FFI
   handles the caller frees through OMNICONN_MALLOC). */
OMC_TEST(store_header_has_no_bare_libc_allocation_call) {
    char path[512];
    const char* slash = strrchr(__FILE__, '/');
    FILE* f;
    char* src;
    long n, i, line = 1, found = 0;
    static const char* const names[] = { "malloc", "calloc", "realloc", "free" };
    snprintf(path, sizeof(path), "%.*s/../omniconn_store.h", slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
    f = fopen(path, "rb");
    if (!f) f = fopen("omniconn_store.h", "rb");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    src = (char*)malloc((size_t)n + 1);
    REQUIRE(src && fread(src, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    src[n] = '\0';
    for (i = 0; i < n; i++) {           /* blank comments and literals, keep the newlines */
        if (src[i] == '/' && src[i + 1] == '*') {
            for (; i < n && !(src[i] == '*' && src[i + 1] == '/'); i++) if (src[i] != '\n') src[i] = ' ';
            if (i < n) { src[i] = ' '; src[i + 1] = ' '; i++; }
        } else if (src[i] == '/' && src[i + 1] == '/') {
            for (; i < n && src[i] != '\n'; i++) src[i] = ' ';
        } else if (src[i] == '"' || src[i] == '\'') {
            char q = src[i++];
            for (; i < n && src[i] != q; i++) { if (src[i] == '\\') src[i++] = ' '; if (src[i] != '\n') src[i] = ' '; }
        }
    }
    for (i = 0; i < n; i++) {
        size_t k;
        if (src[i] == '\n') { line++; continue; }
        if (i > 0 && (isalnum((unsigned char)src[i - 1]) || src[i - 1] == '_')) continue;
        for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            size_t l = strlen(names[k]);
            long j = i + (long)l;
            if (strncmp(src + i, names[k], l) != 0 || isalnum((unsigned char)src[j]) || src[j] == '_') continue;
            while (src[j] == ' ' || src[j] == '\t') j++;
            if (src[j] != '(') continue;
            printf("  omniconn_store.h:%ld calls %s directly\n", line, names[k]);
            found++;
        }
    }
    free(src);
    CHECK_EQ(found, 0);
}

/* ---- the contract --------------------------------------------------------------------------- */

OMC_TEST(store_contract_suite_in_threads_over_tcp) {
    omc_conn* prod = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_conn* cons = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    REQUIRE(prod && cons);
    ct_run_all("store.threads", prod, cons, NULL, getenv("CT_FILTER"));
    omc_conn_destroy(prod);
    omc_conn_destroy(cons);
}

OMC_TEST(store_contract_suite_across_processes_over_a_unix_socket) {
    omc_conn* prod = store_make(main_srv.usock, OMC_ROLE_SENDER, 0);
    REQUIRE(prod);
    ct_run_all("store.process", prod, NULL, main_srv.usock, getenv("CT_FILTER"));
    omc_conn_destroy(prod);
}

/* ---- the executor --------------------------------------------------------------------------- */

#define FLOOD 1000
OMC_TEST(store_a_get_overtakes_a_thousand_queued_puts) {
    omc_conn* c = store_make(main_srv.url, OMC_ROLE_DUAL, 1);
    omc_store_ticket* puts[FLOOD];
    omc_store_ticket* get = NULL;
    omc_store_stats st;
    omc_payload p;
    char buf[64], reply[64], key[64];
    omc_buffer b;
    int i, later = 0;
    uint64_t gseq;
    REQUIRE(c);
    CHECK_OK(put_bytes(c, "prio-hit", 4096, 5, 0, NULL));
    /* the server holds every write until we say so: the first put stays in flight, the rest
       queue behind it in the executor (CLIENT UNPAUSE is not a write, so it gets through) */
    RAW(&main_srv, reply, "CLIENT", "PAUSE", "60000", "WRITE");
    CHECK(strncmp(reply, "+OK", 3) == 0);
    memset(&p, 0, sizeof(p));
    memset(buf, 1, sizeof(buf));
    p.data = buf; p.size = sizeof(buf);
    for (i = 0; i < FLOOD; i++) {
        snprintf(key, sizeof(key), "flood-%d", i);
        CHECK_OK(omc_store_submit_put(c, "a", "b", key, &p, OMC_STORE_PUT, omc_deadline_after_ms(60000), &puts[i]));
    }
    CHECK_OK(omc_store_submit_get(c, "a", "b", "prio-hit", OMC_STORE_GET, omc_deadline_after_ms(60000), &get));
    RAW(&main_srv, reply, "CLIENT", "UNPAUSE");
    CHECK(strncmp(reply, "+OK", 3) == 0);
    CHECK_OK(omc_store_ticket_wait(get, omc_deadline_after_ms(60000), &b));
    CHECK(b.size == 4096 && omc_test_verify(b.data, b.size, 5));
    omc_buffer_release(&b);
    gseq = omc_store_ticket_sequence(get);
    /* the get went out right after the one put that was in flight: at most two requests before it */
    CHECK(gseq >= 1 && gseq <= omc_store_ticket_sequence(puts[0]) + 1 + 1);
    for (i = 0; i < FLOOD; i++) {
        CHECK_OK(omc_store_ticket_wait(puts[i], omc_deadline_after_ms(60000), NULL));
        if (omc_store_ticket_sequence(puts[i]) > gseq) later++;
        omc_store_ticket_free(puts[i]);
    }
    CHECK(later >= FLOOD - 2);
    omc_store_get_stats(c, &st);
    CHECK(st.inflight_max == 1);
    CHECK(st.by_priority[OMC_STORE_GET - 1] >= 1);
    printf("  get dispatched as request %llu of %d (puts after it: %d)\n", (unsigned long long)gseq, FLOOD + 1, later);
    omc_store_ticket_free(get);
    omc_conn_destroy(c);
}

OMC_TEST(store_a_request_whose_deadline_passes_in_the_queue_is_never_sent) {
    omc_conn* c = store_make(main_srv.url, OMC_ROLE_DUAL, 1);
    omc_store_ticket* first = NULL;
    omc_store_ticket* late[5];
    omc_store_stats st;
    omc_payload p;
    char buf[100], reply[64], key[32];
    int i;
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    memset(buf, 2, sizeof(buf));
    p.data = buf; p.size = sizeof(buf);
    RAW(&main_srv, reply, "CLIENT", "PAUSE", "60000", "WRITE");
    CHECK_OK(omc_store_submit_put(c, "a", "b", "dl-first", &p, OMC_STORE_PUT, omc_deadline_after_ms(20000), &first));
    {
        omc_time_ns dl = omc_deadline_after_ms(100);
        for (i = 0; i < 5; i++) {
            snprintf(key, sizeof(key), "dl-late-%d", i);
            CHECK_OK(omc_store_submit_put(c, "a", "b", key, &p, OMC_STORE_PUT, dl, &late[i]));
        }
        while (omc_now_ns() <= dl) usleep(10000);       /* their deadline has passed, still queued */
    }
    RAW(&main_srv, reply, "CLIENT", "UNPAUSE");
    CHECK(strncmp(reply, "+OK", 3) == 0);
    CHECK_OK(omc_store_ticket_wait(first, omc_deadline_after_ms(20000), NULL));
    for (i = 0; i < 5; i++) {
        CHECK_RES(omc_store_ticket_wait(late[i], omc_deadline_after_ms(20000), NULL), OMC_ERR_TIMEOUT);
        CHECK_EQ(omc_store_ticket_sequence(late[i]), 0);        /* never reached the server */
        omc_store_ticket_free(late[i]);
        snprintf(key, sizeof(key), "dl-late-%d", i);
        CHECK_RES(omc_conn_exists(c, "a", "b", key), OMC_ERR_NOT_FOUND);
    }
    omc_store_get_stats(c, &st);
    CHECK(st.expired_in_queue >= 5);
    omc_store_ticket_free(first);
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "dl-first"));
    omc_conn_destroy(c);
}

/* Connections the server sees from this process (CLIENT LIST, name=omniconn-<pid>). */
static int server_connections(const rsrv* s) {
    char cmd[200], line[1024], name[64];
    FILE* f;
    int n = 0;
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d CLIENT LIST 2>/dev/null", s->port);
    snprintf(name, sizeof(name), "name=omniconn-%ld ", (long)getpid());
    f = popen(cmd, "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) if (strstr(line, name)) n++;
    pclose(f);
    return n;
}

OMC_TEST(store_requests_in_flight_never_exceed_the_bound) {
    omc_conn* c = store_make(main_srv.url, OMC_ROLE_DUAL, 3);
    omc_store_ticket* t[200];
    omc_store_stats st;
    omc_payload p;
    char key[32];
    void* data = malloc(256u << 10);
    int i, conns;
    REQUIRE(c && data);
    memset(data, 3, 256u << 10);
    memset(&p, 0, sizeof(p));
    p.data = data; p.size = 256u << 10;
    for (i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "bound-%d", i);
        CHECK_OK(omc_store_submit_put(c, "a", "b", key, &p, OMC_STORE_PUT, omc_deadline_after_ms(60000), &t[i]));
    }
    for (i = 0; i < 200; i++) { CHECK_OK(omc_store_ticket_wait(t[i], omc_deadline_after_ms(60000), NULL)); omc_store_ticket_free(t[i]); }
    omc_store_get_stats(c, &st);
    conns = server_connections(&main_srv);
    printf("  in flight at most %u (bound 3), server sees %d connections of ours\n", st.inflight_max, conns);
    CHECK(st.inflight_max >= 1 && st.inflight_max <= 3);
    CHECK(conns >= 1 && conns <= 3);
    for (i = 0; i < 200; i++) { snprintf(key, sizeof(key), "bound-%d", i); CHECK_OK(omc_conn_cleanup(c, "a", "b", key)); }
    free(data);
    omc_conn_destroy(c);
}

OMC_TEST(store_batches_are_pipelined_and_exists_batch_answers_each_key) {
    omc_conn* c = store_make(main_srv.url, OMC_ROLE_DUAL, 1);
    omc_batch_item it[40];
    char keys[40][32];
    const char* ks[41];
    omc_result res[41];
    void* data[40];
    omc_store_stats s0, s1;
    int i;
    REQUIRE(c);
    memset(it, 0, sizeof(it));
    for (i = 0; i < 40; i++) {
        uint64_t size = 100 + (uint64_t)i * 3000;
        snprintf(keys[i], sizeof(keys[i]), "pb-%d", i);
        data[i] = malloc(size);
        omc_test_fill(data[i], size, 60 + (uint64_t)i);
        it[i].key = keys[i]; it[i].payload.data = data[i]; it[i].payload.size = size;
        ks[i] = keys[i];
    }
    ks[40] = "pb-none";
    omc_store_get_stats(c, &s0);
    CHECK_OK(omc_store_put_batch(c, "a", "b", it, 40, omc_deadline_after_ms(20000)));
    omc_store_get_stats(c, &s1);
    CHECK_EQ(s1.by_priority[OMC_STORE_PUT - 1] - s0.by_priority[OMC_STORE_PUT - 1], 40);   /* 40 ops ... */
    /* ... on one connection: the one the create's check opened (back among the free slots before
       the create returned) */
    CHECK_EQ(s1.connects, s0.connects);
    CHECK_OK(omc_store_exists_batch(c, "a", "b", ks, 41, res, omc_deadline_after_ms(5000)));
    for (i = 0; i < 40; i++) CHECK_OK(res[i]);
    CHECK_RES(res[40], OMC_ERR_NOT_FOUND);
    for (i = 0; i < 40; i++) { omc_meta_free(&it[i].meta); it[i].meta.size = 0; }
    CHECK_OK(omc_store_get_batch(c, "a", "b", it, 40, OMC_STORE_PREFETCH, omc_deadline_after_ms(20000)));
    for (i = 0; i < 40; i++) {
        CHECK_OK(it[i].result);
        CHECK(it[i].buffer.size == 100 + (uint64_t)i * 3000 && omc_test_verify(it[i].buffer.data, it[i].buffer.size, 60 + (uint64_t)i));
        omc_buffer_release(&it[i].buffer);
        free(data[i]);
    }
    CHECK_OK(omc_store_exists_batch(c, "a", "b", ks, 41, res, omc_deadline_after_ms(5000)));
    for (i = 0; i < 41; i++) CHECK_RES(res[i], OMC_ERR_NOT_FOUND);      /* consumed */
    omc_conn_destroy(c);
}

/* A batch mixing small and large values, read on a fresh connector (sizes unknown: the first get
   goes alone, then the reply window decides what is sent ahead), metadata-less and with the
   puts' metadata: every value byte for byte, in one request on the caller's thread. */
OMC_TEST(store_a_batch_of_small_and_large_values_arrives_byte_for_byte) {
    static const uint64_t sizes[10] = { 65536, 3, 1u << 20, 70000, 65536, 2u << 20, 10, 700000, 4096, 1u << 20 };
    omc_conn* w = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_conn* r1 = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_batch_item it[10];
    omc_meta metas[10];
    char keys[10][32];
    omc_store_stats s0, s1;
    int i, pass;
    REQUIRE(w && r1);
    memset(metas, 0, sizeof(metas));
    for (i = 0; i < 10; i++) {
        snprintf(keys[i], sizeof(keys[i]), "mix-%d", i);
        CHECK_OK(put_bytes(w, keys[i], sizes[i], 70 + (uint64_t)i, 0, &metas[i]));
        CHECK_OK(put_bytes(w, keys[i] + 1, sizes[i], 90 + (uint64_t)i, 0, NULL));   /* "ix-N": the metadata-less pass */
    }
    for (pass = 0; pass < 2; pass++) {
        memset(it, 0, sizeof(it));
        for (i = 0; i < 10; i++) {
            it[i].key = pass ? keys[i] : keys[i] + 1;
            if (pass) it[i].meta = metas[i];
        }
        omc_store_get_stats(r1, &s0);
        CHECK_OK(omc_store_get_batch(r1, "a", "b", it, 10, OMC_STORE_GET, omc_deadline_after_ms(30000)));
        omc_store_get_stats(r1, &s1);
        CHECK_EQ(s1.dispatched - s0.dispatched, 10);
        /* one connection for the whole batch, both passes: the one the create's check opened (a
           request's connection is back among the free slots before its caller wakes) */
        CHECK_EQ(s1.connects, s0.connects);
        for (i = 0; i < 10; i++) {
            CHECK_OK(it[i].result);
            CHECK(it[i].buffer.size == sizes[i] && omc_test_verify(it[i].buffer.data, sizes[i], (pass ? 70 : 90) + (uint64_t)i));
            omc_buffer_release(&it[i].buffer);
        }
    }
    for (i = 0; i < 10; i++) omc_meta_free(&metas[i]);
    omc_conn_destroy(r1);
    omc_conn_destroy(w);
}

/* ---- a request's connection is back before its caller hears the answer ------------------------ */
/* The desc's free_fn sees every free of the connector, on the thread that frees. Armed with a
   ticket, it looks at that ticket (without waiting) at each free on a worker's thread; at the
   first free after the ticket is answered it holds that worker there and tells the test, which
   then looks at the executor while the worker cannot move: the request's slot must already be
   free, and the next request must take the same connection. While the test submits, a worker's
   frees wait (the ticket to watch is not known yet), so no answer goes unseen. */
enum { GATE_IDLE, GATE_SUBMITTING, GATE_ARMED, GATE_POLLING, GATE_HELD };
typedef struct slot_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t caller;           /* the test's thread: its frees are never watched */
    int state;
    int round;                  /* which arming: a worker held in an earlier one is let go */
    omc_store_ticket* ticket;   /* the ticket watched while ARMED */
    omc_result answer;          /* the ticket's result, as the worker saw it */
} slot_gate;

static void gate_free(void* p, void* user) {
    slot_gate* g = (slot_gate*)user;
    free(p);
    if (pthread_equal(pthread_self(), g->caller)) return;
    pthread_mutex_lock(&g->mu);
    while (g->state == GATE_SUBMITTING) pthread_cond_wait(&g->cv, &g->mu);
    if (g->state == GATE_ARMED) {
        omc_result r;
        g->state = GATE_POLLING;
        pthread_mutex_unlock(&g->mu);
        r = omc_store_ticket_wait(g->ticket, OMC_NO_WAIT, NULL);
        pthread_mutex_lock(&g->mu);
        if (r == OMC_ERR_TIMEOUT) g->state = GATE_ARMED;     /* not answered yet */
        else {
            int mine = g->round;
            g->answer = r;
            g->state = GATE_HELD;
            pthread_cond_broadcast(&g->cv);
            while (g->state == GATE_HELD && g->round == mine) pthread_cond_wait(&g->cv, &g->mu);
        }
    }
    pthread_mutex_unlock(&g->mu);
}
static void* gate_alloc(size_t size, void* user) { (void)user; return malloc(size); }

static void gate_set(slot_gate* g, int state) {
    pthread_mutex_lock(&g->mu);
    g->state = state;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
/* Wait until a worker holds at its first free after the answer (0), or give up after a minute
   (-1: no such free came, a failure, never a wait the test passes on). */
static int gate_wait_held(slot_gate* g) {
    struct timespec until;
    int rc = 0;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&g->mu);
    while (g->state != GATE_HELD && rc == 0) rc = pthread_cond_timedwait(&g->cv, &g->mu, &until);
    rc = g->state == GATE_HELD ? 0 : -1;
    pthread_mutex_unlock(&g->mu);
    return rc;
}

OMC_TEST(store_a_request_gives_its_connection_back_before_its_caller_wakes) {
    slot_gate g;
    omc_store_desc d;
    omc_conn* c = NULL;
    omc_store_stats s0, st;
    int round, held = 0;
    memset(&g, 0, sizeof(g));
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    g.caller = pthread_self();
    memset(&d, 0, sizeof(d));
    d.url = main_srv.url;
    d.role = OMC_ROLE_DUAL;
    d.pool_size = 16u << 20;
    d.max_inflight = 2;             /* a second connection is allowed: only the order keeps it closed */
    d.hooks.alloc_fn = gate_alloc;
    d.hooks.free_fn = gate_free;
    d.hooks.user_data = &g;
    REQUIRE(omc_store_create(&d, &c) == OMC_OK);
    omc_store_get_stats(c, &s0);
    CHECK_EQ(s0.connects, 1);                                   /* the create's check (run by a worker) ... */
    CHECK_EQ(s0.inflight, 0);                                   /* ... gave its slot back before create returned */
    CHECK_OK(put_bytes(c, "gate-key", 1000, 5, 0, NULL));      /* so the next request finds that connection */
    for (round = 0; round < 20; round++) {
        omc_store_ticket* t = NULL;
        omc_result r;
        gate_set(&g, GATE_SUBMITTING);
        r = omc_store_submit_get(c, "a", "b", "gate-none", OMC_STORE_GET, omc_deadline_after_ms(60000), &t);
        pthread_mutex_lock(&g.mu);
        g.ticket = t;
        g.round++;
        g.state = r == OMC_OK ? GATE_ARMED : GATE_IDLE;
        pthread_cond_broadcast(&g.cv);
        pthread_mutex_unlock(&g.mu);
        CHECK_OK(r);
        if (r != OMC_OK) break;
        if (gate_wait_held(&g) != 0) { CHECK(!"a worker freed nothing after answering the ticket"); gate_set(&g, GATE_IDLE); break; }
        held++;
        CHECK_RES(g.answer, OMC_ERR_NOT_FOUND);
        omc_store_get_stats(c, &st);
        CHECK_EQ(st.inflight, 0);                               /* the worker is stopped after the answer: its slot is back */
        CHECK_OK(omc_conn_exists(c, "a", "b", "gate-key"));     /* the next request, on the caller's thread ... */
        omc_store_get_stats(c, &st);
        CHECK_EQ(st.connects, s0.connects);                     /* ... on the same connection */
        gate_set(&g, GATE_IDLE);
        CHECK_RES(omc_store_ticket_wait(t, OMC_WAIT_FOREVER, NULL), OMC_ERR_NOT_FOUND);
        omc_store_ticket_free(t);
    }
    CHECK_EQ(held, 20);
    /* without the gate, many times: a worker's request, then one on the caller's thread */
    for (round = 0; round < 200; round++) {
        omc_store_ticket* t = NULL;
        CHECK_OK(omc_store_submit_get(c, "a", "b", "gate-none", OMC_STORE_GET, omc_deadline_after_ms(60000), &t));
        CHECK_RES(omc_store_ticket_wait(t, OMC_WAIT_FOREVER, NULL), OMC_ERR_NOT_FOUND);
        omc_store_ticket_free(t);
        CHECK_OK(omc_conn_exists(c, "a", "b", "gate-key"));
    }
    omc_store_get_stats(c, &st);
    printf("  %d rounds held after the answer, %llu connections opened in %d+200 rounds\n", held,
           (unsigned long long)st.connects, held);
    CHECK_EQ(st.connects, 1);
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "gate-key"));
    omc_conn_destroy(c);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
}

OMC_TEST(store_a_cache_entry_is_read_many_times_and_stays_until_cleanup) {
    omc_conn* c = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_payload p;
    char buf[3000];
    int i;
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    omc_test_fill(buf, sizeof(buf), 8);
    p.data = buf; p.size = sizeof(buf); p.readers = OMC_STORE_READERS_CACHE;
    CHECK_OK(omc_conn_put(c, "a", "b", "cached", &p, NULL));
    for (i = 0; i < 5; i++) CHECK_OK(get_check(c, "cached", sizeof(buf), 8, NULL));
    CHECK_OK(omc_conn_exists(c, "a", "b", "cached"));
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "cached"));
    CHECK_RES(omc_conn_exists(c, "a", "b", "cached"), OMC_ERR_NOT_FOUND);
    omc_conn_destroy(c);
}

/* ---- failures ------------------------------------------------------------------------------- */

OMC_TEST(store_unreachable_server_is_a_connection_error) {
    omc_store_desc d;
    omc_conn* c = NULL;
    char url[64];
    omc_time_ns t0 = omc_now_ns();
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", free_port());
    memset(&d, 0, sizeof(d));
    d.url = url;
    d.hooks.log_fn = capture_log;
    CHECK_RES(omc_store_create(&d, &c), OMC_ERR_CONNECTION);
    CHECK(log_has("127.0.0.1"));
    CHECK(omc_now_ns() - t0 < 10000000000LL);
    d.url = "http://nowhere";
    CHECK_RES(omc_store_create(&d, &c), OMC_ERR_INVALID_ARG);
    d.url = "rediss://127.0.0.1:1";
    CHECK_RES(omc_store_create(&d, &c), OMC_ERR_INVALID_ARG);
    CHECK(log_has("TLS"));
}

typedef struct batch_run { omc_conn* c; omc_batch_item* it; uint32_t n; omc_result r; } batch_run;
static void* batch_thread(void* arg) {
    batch_run* b = (batch_run*)arg;
    b->r = omc_store_put_batch(b->c, "a", "b", b->it, b->n, omc_deadline_after_ms(20000));
    return NULL;
}

OMC_TEST(store_server_killed_mid_batch_then_restarted) {
    rsrv s;
    omc_conn* c;
    omc_batch_item it[64];
    char keys[64][32];
    void* data = malloc(1u << 20);
    batch_run br;
    pthread_t th;
    omc_store_stats st;
    int i, ok = 0, conn_err = 0, port;
    memset(&s, 0, sizeof(s));
    REQUIRE(data && srv_start(&s) == 0);
    port = s.port;
    c = store_make(s.url, OMC_ROLE_DUAL, 1);
    REQUIRE(c);
    memset(it, 0, sizeof(it));
    omc_test_fill(data, 1u << 20, 77);
    for (i = 0; i < 64; i++) {
        snprintf(keys[i], sizeof(keys[i]), "kill-%d", i);
        it[i].key = keys[i]; it[i].payload.data = data; it[i].payload.size = 1u << 20;
    }
    br.c = c; br.it = it; br.n = 64;
    {   /* the server holds the batch's writes, so the kill lands while it is on the wire */
        char reply[64];
        RAW(&s, reply, "CLIENT", "PAUSE", "60000", "WRITE");
        CHECK(strncmp(reply, "+OK", 3) == 0);
    }
    omc_store_get_stats(c, &st);
    {
        uint64_t before = st.dispatched;
        pthread_create(&th, NULL, batch_thread, &br);
        do { omc_store_get_stats(c, &st); } while (st.dispatched == before && (usleep(200), 1));   /* the batch is on the wire */
    }
    srv_kill(&s);
    pthread_join(th, NULL);
    for (i = 0; i < 64; i++) {
        if (it[i].result == OMC_OK) ok++;
        else if (it[i].result == OMC_ERR_CONNECTION) conn_err++;
        omc_meta_free(&it[i].meta);
    }
    printf("  batch of 64: %d stored before the kill, %d connection errors\n", ok, conn_err);
    CHECK_EQ(ok + conn_err, 64);        /* every item: stored or a clear connection error */
    CHECK(conn_err > 0);
    CHECK_RES(put_bytes(c, "kill-after", 100, 1, 0, NULL), OMC_ERR_CONNECTION);     /* the server is gone */
    REQUIRE(srv_start_args(&s, port, NULL) == 0);                                  /* back, empty */
    CHECK_OK(put_bytes(c, "kill-after", 100, 1, 0, NULL));                          /* the connector reconnects */
    CHECK_OK(get_check(c, "kill-after", 100, 1, NULL));
    omc_conn_destroy(c);
    srv_kill(&s);
    free(data);
}

OMC_TEST(store_maxmemory_reached_is_reported_and_recovers) {
    omc_conn* c = store_make_logged(main_srv.url);
    char reply[64], key[32];
    int i;
    omc_result r = OMC_OK;
    REQUIRE(c);
    RAW(&main_srv, reply, "CONFIG", "SET", "maxmemory-policy", "noeviction");
    RAW(&main_srv, reply, "CONFIG", "SET", "maxmemory", "6mb");
    CHECK(strncmp(reply, "+OK", 3) == 0);
    for (i = 0; i < 64 && r == OMC_OK; i++) {
        snprintf(key, sizeof(key), "full-%d", i);
        r = put_bytes(c, key, 1u << 20, 1, 0, NULL);
    }
    CHECK_RES(r, OMC_ERR_POOL_FULL);
    CHECK(log_has("full"));
    RAW(&main_srv, reply, "CONFIG", "SET", "maxmemory", "0");
    CHECK_OK(put_bytes(c, "full-after", 1u << 20, 2, 0, NULL));
    CHECK_OK(get_check(c, "full-after", 1u << 20, 2, NULL));
    for (i = 0; i < 64; i++) { snprintf(key, sizeof(key), "full-%d", i); omc_conn_cleanup(c, "a", "b", key); }
    omc_conn_destroy(c);
}

OMC_TEST(store_value_over_proto_max_bulk_len_is_refused_before_sending) {
    char reply[64];
    omc_conn* c;
    RAW(&main_srv, reply, "CONFIG", "SET", "proto-max-bulk-len", "1mb");
    CHECK(strncmp(reply, "+OK", 3) == 0);
    c = store_make_logged(main_srv.url);
    REQUIRE(c);
    CHECK_RES(put_bytes(c, "big", (1u << 20) + 1, 1, 0, NULL), OMC_ERR_TOO_LARGE);
    CHECK(log_has("proto-max-bulk-len"));
    CHECK_OK(put_bytes(c, "small", 1000, 1, 0, NULL));       /* the connection is fine */
    CHECK_OK(get_check(c, "small", 1000, 1, NULL));
    RAW(&main_srv, reply, "CONFIG", "SET", "proto-max-bulk-len", "512mb");
    omc_conn_destroy(c);
}

OMC_TEST(store_a_lying_metadata_key_is_refused) {
    omc_conn* c = store_make_logged(main_srv.url);
    char mk[400], reply[64];
    size_t ml;
    const char* argv[4];
    size_t lens[4];
    omc_meta m = {0};
    REQUIRE(c);
    /* the metadata key says 1000 bytes, the data key holds 4096 */
    CHECK_OK(put_bytes(c, "liar", 4096, 9, 0, NULL));
    meta_key_of("liar", mk, sizeof(mk), &ml);
    argv[0] = "HSET"; argv[1] = mk; argv[2] = "len"; argv[3] = "1000";
    lens[0] = 4; lens[1] = ml; lens[2] = 3; lens[3] = 4;
    CHECK(raw_cmd_v(main_srv.port, NULL, reply, sizeof(reply), 4, argv, lens) == 0 && reply[0] == ':');
    CHECK_RES(get_check(c, "liar", 4096, 9, NULL), OMC_ERR_MALFORMED);
    CHECK(log_has("metadata"));
    /* a length larger than the reader's whole pool: refused before a byte is read */
    CHECK_OK(put_bytes(c, "liar2", 4096, 9, 0, &m));
    meta_key_of("liar2", mk, sizeof(mk), &ml);
    argv[3] = "99999999999"; lens[3] = strlen(argv[3]); argv[1] = mk; lens[1] = ml;
    CHECK(raw_cmd_v(main_srv.port, NULL, reply, sizeof(reply), 4, argv, lens) == 0 && reply[0] == ':');
    CHECK_RES(get_check(c, "liar2", 4096, 9, NULL), OMC_ERR_TOO_LARGE);
    /* a metadata key whose length is not a number */
    CHECK_OK(put_bytes(c, "liar3", 4096, 9, 0, NULL));
    meta_key_of("liar3", mk, sizeof(mk), &ml);
    argv[3] = "lots"; lens[3] = 4; argv[1] = mk; lens[1] = ml;
    CHECK(raw_cmd_v(main_srv.port, NULL, reply, sizeof(reply), 4, argv, lens) == 0 && reply[0] == ':');
    CHECK_RES(get_check(c, "liar3", 4096, 9, NULL), OMC_ERR_MALFORMED);
    /* the connection stayed in step: the next get works */
    CHECK_OK(put_bytes(c, "honest", 5000, 10, 0, NULL));
    CHECK_OK(get_check(c, "honest", 5000, 10, NULL));
    omc_meta_free(&m);
    omc_conn_destroy(c);
}

/* A reader whose pool is smaller than a stored value: OMC_ERR_TOO_LARGE naming both sizes, the
   value not consumed (a reader with room still gets it), and the reader's connection kept: the
   next get and a batch around the large value work on it. */
OMC_TEST(store_a_value_larger_than_the_readers_pool_is_too_large_and_the_connection_stays) {
    omc_conn* w = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_conn* big = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_conn* rd = NULL;
    omc_store_desc d;
    omc_store_stats s0, s1;
    omc_batch_item it[3];
    omc_payload p;
    omc_buffer b;
    void* data = malloc(2u << 20);
    char want[64];
    int i;
    REQUIRE(w && big && data);
    memset(&d, 0, sizeof(d));
    d.url = main_srv.url;
    d.pool_size = 1u << 20;
    d.max_inflight = 1;                 /* one connection: the test sees whether it was dropped */
    d.hooks.log_fn = capture_log;
    REQUIRE(omc_store_create(&d, &rd) == OMC_OK);
    omc_test_fill(data, 2u << 20, 31);
    CHECK_OK(put_bytes(w, "tl-big", 2u << 20, 31, 0, NULL));
    memset(&p, 0, sizeof(p));
    p.data = data; p.size = 2u << 20; p.readers = OMC_STORE_READERS_CACHE;
    CHECK_OK(omc_conn_put(w, "a", "b", "tl-cache", &p, NULL));
    CHECK_OK(put_bytes(w, "tl-small-1", 5000, 32, 0, NULL));
    CHECK_OK(put_bytes(w, "tl-small-2", 6000, 33, 0, NULL));
    CHECK_OK(put_bytes(w, "tl-small-3", 7000, 34, 0, NULL));
    CHECK_OK(get_check(rd, "tl-small-1", 5000, 32, NULL));        /* the connection is open */
    omc_store_get_stats(rd, &s0);
    for (i = 0; i < 2; i++) {
        const char* key = i ? "tl-cache" : "tl-big";
        memset(&b, 0, sizeof(b));
        pthread_mutex_lock(&log_mu); last_log[0] = '\0'; pthread_mutex_unlock(&log_mu);
        CHECK_RES(omc_conn_get(rd, "a", "b", key, NULL, 0, omc_deadline_after_ms(5000), &b), OMC_ERR_TOO_LARGE);
        CHECK(b.data == NULL);
        snprintf(want, sizeof(want), "%llu bytes", (unsigned long long)(2u << 20));
        CHECK(log_has(want));                                         /* the value's size ... */
        snprintf(want, sizeof(want), "%llu bytes", (unsigned long long)(1u << 20));
        CHECK(log_has(want));                                         /* ... and the pool's */
        CHECK(!log_has("connection lost"));
        CHECK_OK(omc_conn_exists(w, "a", "b", key));                  /* not consumed */
    }
    /* a batch around it: the small values arrive, the large one is refused, one connection */
    memset(it, 0, sizeof(it));
    it[0].key = "tl-small-2"; it[1].key = "tl-big"; it[2].key = "tl-small-3";
    CHECK_RES(omc_store_get_batch(rd, "a", "b", it, 3, OMC_STORE_GET, omc_deadline_after_ms(5000)), OMC_ERR_TOO_LARGE);
    CHECK_OK(it[0].result);
    CHECK_RES(it[1].result, OMC_ERR_TOO_LARGE);
    CHECK_OK(it[2].result);
    CHECK(it[0].buffer.size == 6000 && omc_test_verify(it[0].buffer.data, 6000, 33));
    CHECK(it[2].buffer.size == 7000 && omc_test_verify(it[2].buffer.data, 7000, 34));
    omc_buffer_release(&it[0].buffer);
    omc_buffer_release(&it[2].buffer);
    CHECK_OK(put_bytes(w, "tl-small-4", 8000, 35, 0, NULL));
    CHECK_OK(get_check(rd, "tl-small-4", 8000, 35, NULL));         /* the next get works ... */
    omc_store_get_stats(rd, &s1);
    CHECK_EQ(s1.connects, s0.connects);                               /* ... on the same connection */
    /* a reader with room gets both values, byte for byte */
    CHECK_OK(get_check(big, "tl-big", 2u << 20, 31, NULL));
    CHECK_OK(get_check(big, "tl-cache", 2u << 20, 31, NULL));
    omc_conn_cleanup(w, "a", "b", "tl-cache");
    free(data);
    omc_conn_destroy(rd);
    omc_conn_destroy(big);
    omc_conn_destroy(w);
}

/* every log line of any level, "LEVEL message" (for the cache re-put test) */
static char all_log[16384];
static void capture_all(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    pthread_mutex_lock(&log_mu);
    if (strlen(all_log) + strlen(message) + 16 >= sizeof(all_log)) all_log[0] = '\0';
    strcat(all_log, level == OMC_LOG_DEBUG ? "DEBUG " : level == OMC_LOG_INFO ? "INFO " : level == OMC_LOG_WARN ? "WARN " : "ERROR ");
    strcat(all_log, message);
    strcat(all_log, "\n");
    pthread_mutex_unlock(&log_mu);
}
static int all_log_has(const char* word) {
    int r;
    pthread_mutex_lock(&log_mu);
    r = strstr(all_log, word) != NULL;
    pthread_mutex_unlock(&log_mu);
    return r;
}

/* LMCache stores a chunk under a key naming its content, and stores it again routinely: a put of
   a live cache entry with the same bytes is done (OMC_OK, the entry kept, its token in the
   metadata), said at DEBUG, never as a warning about readers; other bytes over a cache entry are
   OMC_ERR_EXISTS saying it is a cache entry; a put over a payload still waiting for its readers
   says that. */
OMC_TEST(store_a_cache_entry_put_again_is_kept_and_the_log_says_so) {
    omc_conn* c = NULL;
    omc_store_desc d;
    omc_payload p;
    omc_meta m1 = {0}, m2 = {0};
    omc_meta_info i1, i2;
    char buf[3000], other[3000], mk[400], reply[64];
    size_t ml;
    const char* argv[2];
    size_t lens[2];
    memset(&d, 0, sizeof(d));
    d.url = main_srv.url;
    d.pool_size = 64u << 20;
    d.hooks.log_fn = capture_all;
    d.hooks.max_level = OMC_LOG_DEBUG;
    REQUIRE(omc_store_create(&d, &c) == OMC_OK);
    omc_test_fill(buf, sizeof(buf), 41);
    omc_test_fill(other, sizeof(other), 42);
    memset(&p, 0, sizeof(p));
    p.data = buf; p.size = sizeof(buf); p.readers = OMC_STORE_READERS_CACHE; p.ttl_ms = 60000;
    CHECK_OK(omc_conn_put(c, "a", "b", "again", &p, &m1));
    CHECK_OK(get_check(c, "again", sizeof(buf), 41, NULL));
    pthread_mutex_lock(&log_mu); all_log[0] = '\0'; pthread_mutex_unlock(&log_mu);
    CHECK_OK(omc_conn_put(c, "a", "b", "again", &p, &m2));          /* the same bytes again */
    CHECK(all_log_has("DEBUG store put a/b/again: the same bytes are already stored"));
    CHECK(!all_log_has("WARN"));
    CHECK(!all_log_has("waiting for its readers"));
    CHECK_OK(omc_meta_parse(m1.data, m1.size, &i1));
    CHECK_OK(omc_meta_parse(m2.data, m2.size, &i2));
    CHECK(i1.body_len == i2.body_len && memcmp(i1.body, i2.body, i1.body_len) == 0);   /* the kept entry's token */
    CHECK_OK(get_check(c, "again", sizeof(buf), 41, &m2));
    CHECK_OK(get_check(c, "again", sizeof(buf), 41, &m1));
    /* its expiry renewed: the server says a TTL again after the key lost it */
    meta_key_of("again", mk, sizeof(mk), &ml);
    argv[0] = "PERSIST"; argv[1] = mk; lens[0] = 7; lens[1] = ml;
    CHECK(raw_cmd_v(main_srv.port, NULL, reply, sizeof(reply), 2, argv, lens) == 0 && reply[0] == ':');
    CHECK_OK(omc_conn_put(c, "a", "b", "again", &p, NULL));
    argv[0] = "PTTL";
    lens[0] = 4;
    CHECK(raw_cmd_v(main_srv.port, NULL, reply, sizeof(reply), 2, argv, lens) == 0 && reply[0] == ':' && atoll(reply + 1) > 0);
    /* other bytes: refused, and the log says why */
    pthread_mutex_lock(&log_mu); all_log[0] = '\0'; pthread_mutex_unlock(&log_mu);
    p.data = other;
    CHECK_RES(omc_conn_put(c, "a", "b", "again", &p, NULL), OMC_ERR_EXISTS);
    CHECK(all_log_has("holds a cache entry with other bytes"));
    CHECK(!all_log_has("waiting for its readers"));                  /* no line says it waits for readers */
    CHECK_OK(get_check(c, "again", sizeof(buf), 41, NULL));          /* the first bytes stay */
    /* a counted put is not a cache entry: the readers it waits for are the truth there */
    p.data = buf; p.readers = 1;
    CHECK_OK(omc_conn_put(c, "a", "b", "counted", &p, NULL));
    pthread_mutex_lock(&log_mu); all_log[0] = '\0'; pthread_mutex_unlock(&log_mu);
    CHECK_RES(omc_conn_put(c, "a", "b", "counted", &p, NULL), OMC_ERR_EXISTS);
    CHECK(all_log_has("still waiting for its readers"));
    CHECK_OK(get_check(c, "counted", sizeof(buf), 41, NULL));
    omc_conn_cleanup(c, "a", "b", "again");
    omc_meta_free(&m1);
    omc_meta_free(&m2);
    omc_conn_destroy(c);
}

typedef struct racer { omc_conn* c; int id; int round; omc_result r; } racer;
static void* race_put(void* arg) {
    racer* x = (racer*)arg;
    char key[32];
    snprintf(key, sizeof(key), "race-%d", x->round);
    x->r = put_bytes(x->c, key, 30000 + (uint64_t)x->id, 100 + (uint64_t)x->id, 0, NULL);
    return NULL;
}

OMC_TEST(store_two_writers_of_one_key) {
    omc_conn* w1 = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_conn* w2 = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_conn* rd = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    omc_meta m1 = {0};
    int round;
    REQUIRE(w1 && w2 && rd);
    for (round = 0; round < 30; round++) {      /* both at once: exactly one wins, the reader gets the winner's bytes */
        racer a, b;
        pthread_t ta, tb;
        char key[32];
        a.c = w1; a.id = 1; a.round = round;
        b.c = w2; b.id = 2; b.round = round;
        pthread_create(&ta, NULL, race_put, &a);
        pthread_create(&tb, NULL, race_put, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK((a.r == OMC_OK) != (b.r == OMC_OK));
        CHECK(a.r == OMC_ERR_EXISTS || b.r == OMC_ERR_EXISTS);
        snprintf(key, sizeof(key), "race-%d", round);
        CHECK_OK(get_check(rd, key, a.r == OMC_OK ? 30001 : 30002, a.r == OMC_OK ? 101 : 102, NULL));
    }
    /* a reader holding writer 1's metadata after writer 2 replaced the key: refused, not wrong bytes */
    CHECK_OK(put_bytes(w1, "replaced", 1000, 1, 0, &m1));
    CHECK_OK(omc_conn_cleanup(w2, "a", "b", "replaced"));
    CHECK_OK(put_bytes(w2, "replaced", 1000, 2, 0, NULL));
    CHECK_RES(get_check(rd, "replaced", 1000, 1, &m1), OMC_ERR_STALE);
    CHECK_OK(get_check(rd, "replaced", 1000, 2, NULL));
    omc_meta_free(&m1);
    omc_conn_destroy(w1);
    omc_conn_destroy(w2);
    omc_conn_destroy(rd);
}

OMC_TEST(store_auth_with_password_and_acl_user) {
    rsrv s;
    const char* extra[] = { "--requirepass", "s3cret", "--user", "alice", "on", ">wonder", "~*", "&*", "+@all", NULL };
    char url[300];
    omc_store_desc d;
    omc_conn* c = NULL;
    memset(&s, 0, sizeof(s));
    REQUIRE(srv_start_args(&s, free_port(), extra) != 0 || 1);   /* PING needs auth: started, but not "ready" by PING */
    {   /* ready = answers (NOAUTH counts) */
        omc_time_ns until = omc_deadline_after_ms(10000);
        char reply[128];
        const char* ping[1] = { "PING" };
        while (omc_now_ns() < until && !(raw_cmd(&s, reply, sizeof(reply), 1, ping) == 0 && reply[0] == '-')) usleep(5000);
    }
    memset(&d, 0, sizeof(d));
    d.hooks.log_fn = capture_log;
    d.url = s.url;
    CHECK_RES(omc_store_create(&d, &c), OMC_ERR_AUTH);                       /* no password */
    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d", s.port);
    d.url = url;
    CHECK_RES(omc_store_create(&d, &c), OMC_ERR_AUTH);
    CHECK(log_has("AUTH"));
    snprintf(url, sizeof(url), "redis://:s3cret@127.0.0.1:%d/2", s.port);   /* default user, database 2 */
    CHECK_OK(omc_store_create(&d, &c));
    if (c) { CHECK_OK(put_bytes(c, "authed", 100, 3, 0, NULL)); CHECK_OK(get_check(c, "authed", 100, 3, NULL)); omc_conn_destroy(c); c = NULL; }
    snprintf(url, sizeof(url), "redis://alice:wonder@127.0.0.1:%d", s.port); /* an ACL user */
    CHECK_OK(omc_store_create(&d, &c));
    if (c) { CHECK_OK(put_bytes(c, "acl", 100, 4, 0, NULL)); CHECK_OK(get_check(c, "acl", 100, 4, NULL)); omc_conn_destroy(c); c = NULL; }
    d.url = s.url;
    d.user = "alice";
    d.password = "wonder";
    CHECK_OK(omc_store_create(&d, &c));
    omc_conn_destroy(c);
    srv_kill(&s);
}

OMC_TEST(store_ttl_is_key_expiry_on_the_server) {
    omc_conn* c = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    char mk[400], reply[64];
    size_t ml;
    const char* argv[2];
    size_t lens[2];
    REQUIRE(c);
    CHECK_OK(put_bytes(c, "ttl", 1000, 1, 5000, NULL));
    meta_key_of("ttl", mk, sizeof(mk), &ml);
    argv[0] = "PTTL"; argv[1] = mk; lens[0] = 4; lens[1] = ml;
    CHECK(raw_cmd_v(main_srv.port, NULL, reply, sizeof(reply), 2, argv, lens) == 0);
    CHECK(reply[0] == ':' && atoi(reply + 1) > 0 && atoi(reply + 1) <= 5000);
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "ttl"));
    omc_conn_destroy(c);
}

/* ---- Redis Cluster --------------------------------------------------------------------------- */

static rsrv cl[6];
static int cluster_up;

static int cluster_start(void) {
    const char* extra[] = { "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1500", NULL };
    char cmd[1024];
    size_t n;
    int i, k;
    omc_time_ns until;
    for (i = 0; i < 6; i++) if (srv_start_args(&cl[i], free_port(), extra) != 0) return -1;
    n = (size_t)snprintf(cmd, sizeof(cmd), "redis-cli --cluster create");
    for (i = 0; i < 6; i++) n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " 127.0.0.1:%d", cl[i].port);
    snprintf(cmd + n, sizeof(cmd) - n, " --cluster-replicas 1 --cluster-yes >%s/cluster-create.log 2>&1", top_dir);
    if (system(cmd) != 0) return -1;
    until = omc_deadline_after_ms(30000);
    for (;;) {      /* the event: every node says cluster_state:ok */
        char reply[2048];
        for (k = 0, i = 0; i < 6; i++) { RAW(&cl[i], reply, "CLUSTER", "INFO"); if (strstr(reply, "cluster_state:ok")) k++; }
        if (k == 6) return 0;
        if (omc_now_ns() > until) return -1;
        usleep(20000);
    }
}

static int role_is_master(const rsrv* s) {
    char reply[4096];
    RAW(s, reply, "INFO", "replication");
    return strstr(reply, "role:master") != NULL;
}

OMC_TEST(store_cluster_routes_by_slot_over_every_master) {
    omc_conn* c;
    omc_store_stats st;
    char key[32], reply[64];
    int i, masters_with_keys = 0;
    if (!cluster_up) { cluster_up = cluster_start() == 0 ? 1 : -1; }
    REQUIRE(cluster_up == 1);
    c = store_make(cl[0].url, OMC_ROLE_DUAL, 2);
    REQUIRE(c);
    omc_store_get_stats(c, &st);
    CHECK(st.cluster == 1 && st.servers >= 3);
    for (i = 0; i < 60; i++) { snprintf(key, sizeof(key), "cl-%d", i); CHECK_OK(put_bytes(c, key, 5000 + (uint64_t)i, (uint64_t)i, 0, NULL)); }
    for (i = 0; i < 6; i++) {
        if (!role_is_master(&cl[i])) continue;
        RAW(&cl[i], reply, "DBSIZE");
        if (reply[0] == ':' && atoi(reply + 1) > 0) masters_with_keys++;
    }
    CHECK_EQ(masters_with_keys, 3);
    for (i = 0; i < 60; i++) { snprintf(key, sizeof(key), "cl-%d", i); CHECK_OK(get_check(c, key, 5000 + (uint64_t)i, (uint64_t)i, NULL)); }
    omc_store_get_stats(c, &st);
    CHECK_EQ(st.moved, 0);
    omc_conn_destroy(c);
}

OMC_TEST(store_cluster_contract_suite) {
    omc_conn* prod;
    omc_conn* cons;
    if (!cluster_up) { cluster_up = cluster_start() == 0 ? 1 : -1; }
    REQUIRE(cluster_up == 1);
    prod = store_make(cl[1].url, OMC_ROLE_DUAL, 0);
    cons = store_make(cl[2].url, OMC_ROLE_DUAL, 0);
    REQUIRE(prod && cons);
    ct_run_all("store.cluster", prod, cons, NULL, getenv("CT_FILTER"));
    omc_conn_destroy(prod);
    omc_conn_destroy(cons);
}

OMC_TEST(store_cluster_follows_moved_with_a_stale_slot_map) {
    omc_conn* c;
    omc__st_state* S;
    omc_store_stats st;
    char key[32];
    int i;
    if (!cluster_up) { cluster_up = cluster_start() == 0 ? 1 : -1; }
    REQUIRE(cluster_up == 1);
    c = store_make(cl[0].url, OMC_ROLE_DUAL, 2);
    REQUIRE(c);
    /* fault injection a live cluster only shows after a resharding: the connector believes one
       master serves every slot */
    S = (omc__st_state*)c->impl;
    pthread_mutex_lock(&S->route_mu);
    memset(S->slots, 1, OMC__ST_SLOTS);
    S->last_refresh = omc_now_ns() + 3600000000000LL;
    pthread_mutex_unlock(&S->route_mu);
    for (i = 0; i < 30; i++) { snprintf(key, sizeof(key), "mv-%d", i); CHECK_OK(put_bytes(c, key, 2000, (uint64_t)i, 0, NULL)); }
    for (i = 0; i < 30; i++) { snprintf(key, sizeof(key), "mv-%d", i); CHECK_OK(get_check(c, key, 2000, (uint64_t)i, NULL)); }
    omc_store_get_stats(c, &st);
    printf("  MOVED followed: %llu\n", (unsigned long long)st.moved);
    CHECK(st.moved > 0);
    omc_conn_destroy(c);
}

OMC_TEST(store_cluster_master_stopped_replica_takes_over) {
    omc_conn* c;
    char key[32];
    int i, victim = -1, ok_after = 0, wrong = 0;
    omc_result r;
    if (!cluster_up) { cluster_up = cluster_start() == 0 ? 1 : -1; }
    REQUIRE(cluster_up == 1);
    c = store_make(cl[0].url, OMC_ROLE_DUAL, 2);
    REQUIRE(c);
    for (i = 0; i < 40; i++) { snprintf(key, sizeof(key), "fo-%d", i); CHECK_OK(put_bytes(c, key, 3000, (uint64_t)i, 0, NULL)); }
    for (i = 1; i < 6 && victim < 0; i++) if (role_is_master(&cl[i])) victim = i;     /* not the seed */
    REQUIRE(victim > 0);
    {   /* replication has caught up before the stop: WAIT on the victim for its replica */
        char reply[64];
        RAW(&cl[victim], reply, "WAIT", "1", "5000");
    }
    srv_kill(&cl[victim]);
    for (i = 0; i < 40; i++) {     /* requests move to the promoted replica; nothing comes back wrong */
        snprintf(key, sizeof(key), "fo-%d", i);
        r = get_check(c, key, 3000, (uint64_t)i, NULL);
        if (r == OMC_OK) ok_after++;
        else if (r == OMC_ERR_INTERNAL) wrong++;
    }
    printf("  after the master stopped: %d of 40 read back, %d wrong\n", ok_after, wrong);
    CHECK_EQ(wrong, 0);
    CHECK(ok_after >= 30);
    CHECK_OK(put_bytes(c, "fo-new", 3000, 99, 0, NULL));
    CHECK_OK(get_check(c, "fo-new", 3000, 99, NULL));
    omc_conn_destroy(c);
}

/* The hash tag of a payload's keys, as the manual's WIRE FORMATS says. */
static void tag_of(const char* key, char* out, size_t cap) {
    char mk[400];
    size_t ml;
    char* open_;
    meta_key_of(key, mk, sizeof(mk), &ml);
    open_ = strchr(mk, '{');
    snprintf(out, cap, "%.18s", open_);      /* "{" + 16 hex + "}" */
}

static int node_id(const rsrv* s, char* out, size_t cap) {
    char reply[128];
    char* nl;
    RAW(s, reply, "CLUSTER", "MYID");
    nl = strstr(reply, "\r\n");
    if (reply[0] != '$' || !nl) return -1;
    snprintf(out, cap, "%.40s", nl + 2);
    return 0;
}

static omc_result exists_ask(omc_conn* c) {    /* a single-key command of a migrating slot: ASK, then NOT_FOUND at the target */
    omc_result r = omc_conn_exists(c, "a", "b", "ask-1");
    return r == OMC_ERR_NOT_FOUND ? OMC_OK : r;
}
static void* ask_put(void* arg) {
    racer* x = (racer*)arg;
    x->r = put_bytes(x->c, "ask-1", 7005, 105, 0, NULL);
    return NULL;
}

OMC_TEST(store_cluster_follows_ask_during_a_slot_migration) {
    omc_conn* c;
    omc_store_stats st;
    char tag[32], probe[64], slot[16], reply[256], src_id[48], dst_id[48];
    int i, src = -1, dst = -1;
    if (!cluster_up) { cluster_up = cluster_start() == 0 ? 1 : -1; }
    REQUIRE(cluster_up == 1);
    tag_of("ask-1", tag, sizeof(tag));
    snprintf(probe, sizeof(probe), "%sprobe", tag);
    RAW(&cl[0], reply, "CLUSTER", "KEYSLOT", probe);
    REQUIRE(reply[0] == ':');
    snprintf(slot, sizeof(slot), "%d", atoi(reply + 1));
    for (i = 0; i < 6; i++) {       /* the owner answers a GET of the slot; another master says MOVED */
        if (cl[i].pid <= 0 || !role_is_master(&cl[i])) continue;
        RAW(&cl[i], reply, "GET", probe);
        if (strncmp(reply, "$-1", 3) == 0) src = i;
        else if (dst < 0) dst = i;
    }
    REQUIRE(src >= 0 && dst >= 0 && node_id(&cl[src], src_id, sizeof(src_id)) == 0 && node_id(&cl[dst], dst_id, sizeof(dst_id)) == 0);
    c = store_make(cl[src].url, OMC_ROLE_DUAL, 1);
    REQUIRE(c);
    RAW(&cl[dst], reply, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id);
    CHECK(strncmp(reply, "+OK", 3) == 0);
    RAW(&cl[src], reply, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id);
    CHECK(strncmp(reply, "+OK", 3) == 0);
    /* a new key of a migrating slot: the source says ASK, the connector asks the target; there
       Redis refuses the two-key script with TRYAGAIN until the migration ends (multi-key commands
       wait for a resharding), and the connector retries until its deadline */
    CHECK_OK(exists_ask(c));
    {
        racer a;
        pthread_t th;
        a.c = c; a.id = 5; a.round = -1;
        pthread_create(&th, NULL, ask_put, &a);
        do { omc_store_get_stats(c, &st); } while (st.retries == 0 && (usleep(1000), 1));   /* it hit TRYAGAIN */
        RAW(&cl[src], reply, "CLUSTER", "SETSLOT", slot, "NODE", dst_id);     /* finish: the slot is the target's */
        RAW(&cl[dst], reply, "CLUSTER", "SETSLOT", slot, "NODE", dst_id);
        pthread_join(th, NULL);
        CHECK_OK(a.r);
    }
    CHECK_OK(get_check(c, "ask-1", 7005, 105, NULL));
    omc_store_get_stats(c, &st);
    printf("  ASK followed: %llu, MOVED: %llu, retried: %llu\n", (unsigned long long)st.ask, (unsigned long long)st.moved,
           (unsigned long long)st.retries);
    CHECK(st.ask >= 2);
    CHECK(st.moved >= 1);
    omc_conn_destroy(c);
}

/* ---- the shared key directory: 3 producer processes, 2 consumer threads ---------------------- */

typedef struct prod_proc { pid_t pid; int stop_w; } prod_proc;

/* A producer process: a TCP sender + a store connector + a directory named prod-<idx>; puts
   keys <prefix>-<idx>-<j> (j < nkeys, 10000 + j bytes, seed base + j), says "ready", then serves
   pulls until its stop pipe closes. Never returns (and never runs the parent's atexit). */
static void producer_main(const char* url, int idx, const char* prefix, int nkeys, uint64_t base, int ready_w, int stop_r) {
    omc_tcp_desc td;
    omc_conn* tcp = NULL;
    omc_conn* st;
    omc_store_dir* dir = NULL;
    omc_store_dir_desc dd;
    char name[32], key[64], c;
    int j, bad = 0;
    memset(&td, 0, sizeof(td));
    td.role = OMC_ROLE_SENDER;
    td.host = "127.0.0.1";
    td.pool_size = 64u << 20;
    st = store_make(url, OMC_ROLE_DUAL, 0);
    if (omc_tcp_create(&td, &tcp) != OMC_OK || !st) _exit(2);
    snprintf(name, sizeof(name), "prod-%d", idx);
    memset(&dd, 0, sizeof(dd));
    dd.store = st; dd.remote = tcp; dd.name = name;
    if (omc_store_dir_create(&dd, &dir) != OMC_OK) _exit(3);
    for (j = 0; j < nkeys; j++) {
        void* d = malloc(10000 + (size_t)j);
        omc_payload p;
        omc_test_fill(d, 10000 + (uint64_t)j, base + (uint64_t)j);
        memset(&p, 0, sizeof(p));
        p.data = d; p.size = 10000 + (uint64_t)j; p.ttl_ms = 60000;
        snprintf(key, sizeof(key), "%s-%d-%d", prefix, idx, j);
        if (omc_store_dir_put(dir, "a", "b", key, &p, NULL) != OMC_OK) bad++;
        free(d);
    }
    c = bad ? 'x' : 'r';
    if (write(ready_w, &c, 1) != 1) _exit(4);
    while (read(stop_r, &c, 1) > 0) {}       /* serve until the parent closes the pipe */
    omc_store_dir_destroy(dir);
    omc_conn_destroy(tcp);
    omc_conn_destroy(st);
    _exit(0);
}

static int producer_start(prod_proc* pp, int idx, const char* prefix, int nkeys, uint64_t base) {
    int ready[2], stop[2];
    char c = 0;
    if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(stop, O_CLOEXEC) != 0) return -1;   /* no other child keeps them */
    fflush(stdout);
    pp->pid = fork();
    if (pp->pid == 0) {         /* a fresh process image: this one has threads that fork() does not copy */
        char a[7][32];
        char* args[10];
        close(ready[0]); close(stop[1]);
        fcntl(ready[1], F_SETFD, 0);        /* these two survive the exec */
        fcntl(stop[0], F_SETFD, 0);
        snprintf(a[0], 32, "%d", idx); snprintf(a[1], 32, "%s", prefix); snprintf(a[2], 32, "%d", nkeys);
        snprintf(a[3], 32, "%llu", (unsigned long long)base); snprintf(a[4], 32, "%d", ready[1]); snprintf(a[5], 32, "%d", stop[0]);
        args[0] = (char*)"/proc/self/exe"; args[1] = (char*)"--dir-producer"; args[2] = main_srv.url;
        args[3] = a[0]; args[4] = a[1]; args[5] = a[2]; args[6] = a[3]; args[7] = a[4]; args[8] = a[5]; args[9] = NULL;
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(ready[1]); close(stop[0]);
    pp->stop_w = stop[1];
    if (read(ready[0], &c, 1) != 1) c = 0;     /* the event: its puts are registered */
    close(ready[0]);
    return c == 'r' ? 0 : -1;
}
static void producer_stop(prod_proc* pp, int hard) {
    if (pp->pid <= 0) return;
    if (hard) kill(pp->pid, SIGKILL);
    close(pp->stop_w);
    waitpid(pp->pid, NULL, 0);
    pp->pid = 0;
}

typedef struct consumer { int id; int ok, bad; omc_result first_err; } consumer;

static omc_store_dir* consumer_dir(omc_conn** tcp, omc_conn** st) {
    omc_tcp_desc td;
    omc_store_dir_desc dd;
    omc_store_dir* dir = NULL;
    memset(&td, 0, sizeof(td));
    td.role = OMC_ROLE_RECEIVER;
    td.pool_size = 64u << 20;
    *st = store_make(main_srv.url, OMC_ROLE_DUAL, 0);
    if (omc_tcp_create(&td, tcp) != OMC_OK || !*st) return NULL;
    memset(&dd, 0, sizeof(dd));
    dd.store = *st; dd.remote = *tcp;
    if (omc_store_dir_create(&dd, &dir) != OMC_OK) return NULL;
    return dir;
}

static void* consumer_fn(void* arg) {
    consumer* C = (consumer*)arg;
    omc_conn* tcp = NULL;
    omc_conn* st = NULL;
    omc_store_dir* dir = consumer_dir(&tcp, &st);
    int i, j;
    C->first_err = OMC_OK;
    for (i = 0; dir && i < 3; i++)
        for (j = 0; j < 10; j++) {
            char key[64];
            omc_buffer b;
            omc_result r;
            if ((i * 10 + j) % 2 != C->id) continue;        /* each key has one reader */
            snprintf(key, sizeof(key), "dk-%d-%d", i, j);
            r = omc_store_dir_get(dir, "a", "b", key, omc_deadline_after_ms(20000), &b);
            if (r == OMC_OK && b.size == 10000 + (uint64_t)j && omc_test_verify(b.data, b.size, (uint64_t)(i * 100 + j))) C->ok++;
            else { C->bad++; if (C->first_err == OMC_OK) C->first_err = r; }
            if (r == OMC_OK) omc_buffer_release(&b);
        }
    omc_store_dir_destroy(dir);
    omc_conn_destroy(tcp);
    omc_conn_destroy(st);
    return NULL;
}

OMC_TEST(store_directory_three_producers_two_consumers_metadata_less) {
    prod_proc pp[3];
    consumer cs[2];
    pthread_t th[2];
    omc_conn* tcp = NULL;
    omc_conn* st = NULL;
    omc_store_dir* dir;
    int i, j;
    memset(pp, 0, sizeof(pp));
    for (i = 0; i < 3; i++) REQUIRE(producer_start(&pp[i], i, "dk", 10, (uint64_t)(i * 100)) == 0);
    for (i = 0; i < 2; i++) { memset(&cs[i], 0, sizeof(cs[i])); cs[i].id = i; pthread_create(&th[i], NULL, consumer_fn, &cs[i]); }
    for (i = 0; i < 2; i++) pthread_join(th[i], NULL);
    printf("  consumers: %d + %d payloads from 3 producers found through the store, %d + %d wrong\n", cs[0].ok, cs[1].ok,
           cs[0].bad, cs[1].bad);
    CHECK_EQ(cs[0].ok + cs[1].ok, 30);
    CHECK_EQ(cs[0].bad + cs[1].bad, 0);

    /* producer 0 puts 10 more, nobody reads them, and it is killed */
    producer_stop(&pp[0], 1);
    {
        prod_proc p0;
        memset(&p0, 0, sizeof(p0));
        REQUIRE(producer_start(&p0, 0, "late", 10, 500) == 0);
        producer_stop(&p0, 1);                     /* SIGKILL: its 10 records point at a dead sender */
    }
    dir = consumer_dir(&tcp, &st);
    REQUIRE(dir);
    {   /* a get of a dead producer's key: the stale record goes, the get times out, no bytes */
        omc_buffer b;
        CHECK_RES(omc_store_dir_get(dir, "a", "b", "late-0-9", omc_deadline_after_ms(1500), &b), OMC_ERR_TIMEOUT);
        CHECK_RES(omc_conn_exists(st, OMC__DIR_PREFIX "a", "b", "late-0-9"), OMC_ERR_NOT_FOUND);
        CHECK_OK(omc_conn_exists(st, OMC__DIR_PREFIX "a", "b", "late-0-5"));       /* the others are still there ... */
    }
    {   /* ... until producer 0 restarts: it removes its old records and puts 0..4 again, new bytes */
        prod_proc p0;
        memset(&p0, 0, sizeof(p0));
        REQUIRE(producer_start(&p0, 0, "late", 5, 900) == 0);
        for (j = 5; j < 10; j++) {
            char key[32];
            snprintf(key, sizeof(key), "late-0-%d", j);
            CHECK_RES(omc_conn_exists(st, OMC__DIR_PREFIX "a", "b", key), OMC_ERR_NOT_FOUND);
        }
        for (j = 0; j < 5; j++) {
            char key[32];
            omc_buffer b;
            snprintf(key, sizeof(key), "late-0-%d", j);
            CHECK_OK(omc_store_dir_get(dir, "a", "b", key, omc_deadline_after_ms(20000), &b));
            CHECK(b.size == 10000 + (uint64_t)j && omc_test_verify(b.data, b.size, 900 + (uint64_t)j));
            omc_buffer_release(&b);
        }
        producer_stop(&p0, 0);
    }
    omc_store_dir_destroy(dir);
    omc_conn_destroy(tcp);
    omc_conn_destroy(st);
    for (i = 1; i < 3; i++) producer_stop(&pp[i], 0);
}

int main(int argc, char** argv) {
    int status;
    ct_consumer_main(argc, argv, make_from_spec);
    if (argc == 9 && strcmp(argv[1], "--dir-producer") == 0)
        producer_main(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), strtoull(argv[6], NULL, 10), atoi(argv[7]), atoi(argv[8]));
    if (!have_redis()) { printf("test_store: 0 passed, 1 failed\n"); return 1; }
    snprintf(top_dir, sizeof(top_dir), "/tmp/omc-store-%ld", (long)getpid());
    if (mkdir(top_dir, 0700) != 0) { perror(top_dir); return 1; }
    atexit(kill_all);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    if (srv_start(&main_srv) != 0) { printf("FAIL cannot start redis-server (see %s)\ntest_store: 0 passed, 1 failed\n", top_dir); return 1; }
    status = omc_test_main(argc, argv);
    kill_all();
    return status;
}
