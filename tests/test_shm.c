/* The shared-memory connector: the full contract suite across two real processes and in threads,
   crash safety (SIGKILL of a producer or a consumer at a random moment, then sweep: no segment and
   no pool byte left), every kind of bad input (metadata pointing outside the segment, wrong
   generation, a segment shrunk, replaced, reached through a symlink or owned by someone else, a
   full tmpfs), the inline threshold boundary, fan-out across two consumer processes, and how fast
   a sleeping getter wakes up.

   Every test uses its own channel name (with our pid), so parallel runs never see each other.
   Child processes are plain fork()s that build their own connectors; the contract's consumer
   process is this binary re-executed (ct_consumer_main). */
#define OMNICONN_IMPLEMENTATION
#define OMNICONN_SHM_IDLE_MS 200        /* growing pools give memory back after 0.2 s idle (default 2 s) */
#include "omniconn.h"
#include "omniconn_shm.h"
#include "omc_test.h"
#include "contract.h"

#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define SHM_DIR "/dev/shm"

/* Context switches and CPU time of the waiting thread only: a sanitizer's background thread
   (TSan's sleeps and wakes) or a library thread would otherwise count in RUSAGE_SELF. */
#if defined(RUSAGE_THREAD)
#define SHM_RUSAGE_WAITER RUSAGE_THREAD
#else
#define SHM_RUSAGE_WAITER RUSAGE_SELF
#endif

/* A directory of our own inside /dev/shm for the crash and sweep tests: every omc_shm_create on
   this machine sweeps /dev/shm itself, so a test counting what ITS sweep removed there would race
   with other processes. Removed at the end - which fails if anything was left in it. */
static char priv_dir[64];

/* ---- helpers -------------------------------------------------------------------------------- */

static void unique_channel(char* out, size_t n) {
    static int seq;
    snprintf(out, n, "t%ldn%d", (long)getpid(), ++seq);
}

static omc_conn* make_shm_in(const char* dir, const char* channel, omc_role role, uint64_t pool) {
    omc_shm_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.shm_dir = dir;
    d.channel = channel;
    d.role = role;
    d.pool_size = pool;
    d.max_entries = 1024;
    if (omc_shm_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static omc_conn* make_shm(const char* channel, omc_role role, uint64_t pool) { return make_shm_in(SHM_DIR, channel, role, pool); }
static omc_conn* make_priv(const char* channel, omc_role role, uint64_t pool) { return make_shm_in(priv_dir, channel, role, pool); }

/* The consumer process of a contract run: spec is "<channel>". */
static omc_conn* make_from_spec(const char* spec) { return make_shm(spec, OMC_ROLE_RECEIVER, 0); }

/* Files in dir whose name starts with omc-<uid>-<channel>- (channel NULL: any of ours). */
static int count_segments(const char* dir, const char* channel) {
    char prefix[96];
    DIR* d = opendir(dir);
    struct dirent* de;
    int n = 0;
    if (!d) return -1;
    if (channel) snprintf(prefix, sizeof(prefix), "omc-%u-%s-", (unsigned)geteuid(), channel);
    else snprintf(prefix, sizeof(prefix), "omc-%u-", (unsigned)geteuid());
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

/* Lines of /proc/self/maps that mention the channel: mappings we still hold. */
static int count_mappings(const char* channel) {
    char line[1024];
    int n = 0;
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) if (strstr(line, channel)) n++;
    fclose(f);
    return n;
}

static uint64_t pool_in_use(omc_conn* c) {
    omc_health h;
    omc_conn_health(c, &h);
    return h.pool_in_use;
}

static omc_result put_pattern(omc_conn* c, const char* key, uint64_t size, uint64_t seed, uint32_t readers, omc_meta* meta) {
    void* data = malloc(size ? size : 1);
    omc_payload p;
    omc_result r;
    memset(&p, 0, sizeof(p));
    omc_test_fill(data, size, seed);
    p.data = data;
    p.size = size;
    p.readers = readers;
    r = omc_conn_put(c, "a", "b", key, &p, meta);
    free(data);
    return r;
}


/* ---- the contract ---------------------------------------------------------------------------- */

/* omc_available(SHM) is the SHM companion's own answer (its directory), not a guess of the core */
OMC_TEST(shm_available_is_answered_by_the_companion) {
    char why[256] = "";
    struct statvfs sv;
    int usable = statvfs(OMNICONN_SHM_DIR, &sv) == 0 && access(OMNICONN_SHM_DIR, W_OK) == 0;
    omc_result r = omc_available(OMC_FEATURE_SHM, why, sizeof(why));
    CHECK_RES(r, usable ? OMC_OK : OMC_ERR_UNAVAILABLE);
    if (!usable) CHECK(strstr(why, OMNICONN_SHM_DIR) != NULL);
}

OMC_TEST(shm_contract_two_processes) {
    char ch[32];
    omc_conn* prod;
    unique_channel(ch, sizeof(ch));
    prod = make_shm(ch, OMC_ROLE_SENDER, 64u << 20);
    REQUIRE(prod);
    ct_run_all("shm.process", prod, NULL, ch, getenv("CT_FILTER"));
    omc_conn_destroy(prod);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
}

OMC_TEST(shm_contract_threads_sender_and_receiver) {
    char ch[32];
    omc_conn *prod, *cons;
    unique_channel(ch, sizeof(ch));
    prod = make_shm(ch, OMC_ROLE_SENDER, 64u << 20);
    cons = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(prod && cons);
    ct_run_all("shm.threads", prod, cons, NULL, getenv("CT_FILTER"));
    omc_conn_destroy(cons);
    omc_conn_destroy(prod);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
    CHECK_EQ(count_mappings(ch), 0);
}

OMC_TEST(shm_contract_threads_one_dual_connector) {
    char ch[32];
    omc_conn* c;
    unique_channel(ch, sizeof(ch));
    c = make_shm(ch, OMC_ROLE_DEFAULT, 64u << 20);
    REQUIRE(c);
    ct_run_all("shm.dual", c, c, NULL, getenv("CT_FILTER"));
    omc_conn_destroy(c);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
}

/* ---- the segment itself ----------------------------------------------------------------------- */

OMC_TEST(shm_segment_is_private_named_and_removed_by_close) {
    char ch[32], path[OMC_SHM_PATH_MAX], want[64];
    struct stat st;
    omc_conn *c, *r;
    unique_channel(ch, sizeof(ch));
    c = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(c && r);
    CHECK_OK(omc_shm_segment_path(c, path, sizeof(path)));
    CHECK_RES(omc_shm_segment_path(r, path + 0, 0), OMC_ERR_INVALID_ARG);
    {
        char tmp[OMC_SHM_PATH_MAX];
        CHECK_RES(omc_shm_segment_path(r, tmp, sizeof(tmp)), OMC_ERR_WRONG_ROLE);
        CHECK_RES(omc_shm_segment_path(c, tmp, 10), OMC_ERR_TOO_LARGE);
    }
    snprintf(want, sizeof(want), SHM_DIR "/omc-%u-%s-%ld-", (unsigned)geteuid(), ch, (long)getpid());
    CHECK(strncmp(path, want, strlen(want)) == 0);
    CHECK(strlen(path) == strlen(want) + 16);                  /* 64 random bits in hex */
    REQUIRE(lstat(path, &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_EQ(st.st_mode & 0777, 0600);
    CHECK(st.st_blocks * 512 >= (1 << 20));                    /* reserved up front, not sparse */
    CHECK_EQ(count_segments(SHM_DIR, ch), 1);                  /* a receiver creates none */
    omc_conn_close(c);
    CHECK(lstat(path, &st) != 0 && errno == ENOENT);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
    omc_conn_destroy(c);
    omc_conn_destroy(r);
    {
        omc_conn* lc = NULL;
        omc_local_desc ld;
        memset(&ld, 0, sizeof(ld));
        ld.pool_size = 1u << 20;
        REQUIRE(omc_local_create(&ld, &lc) == OMC_OK);
        CHECK_RES(omc_shm_segment_path(lc, path, sizeof(path)), OMC_ERR_TYPE);
        omc_conn_destroy(lc);
    }
}

OMC_TEST(shm_bad_desc_refused) {
    omc_shm_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.channel = "has-dash";
    CHECK_RES(omc_shm_create(&d, &c), OMC_ERR_INVALID_ARG);
    d.channel = "../x";
    CHECK_RES(omc_shm_create(&d, &c), OMC_ERR_INVALID_ARG);
    d.channel = "ok";
    d.inline_threshold = OMC_SHM_MAX_INLINE + 1;
    CHECK_RES(omc_shm_create(&d, &c), OMC_ERR_INVALID_ARG);
    d.inline_threshold = 0;
    d.alignment = 8192;
    CHECK_RES(omc_shm_create(&d, &c), OMC_ERR_INVALID_ARG);
    d.alignment = 0;
    d.shm_dir = "/nonexistent-omc-dir";
    CHECK_RES(omc_shm_create(&d, &c), OMC_ERR_UNAVAILABLE);
    CHECK(c == NULL);
    CHECK_RES(omc_shm_create(NULL, NULL), OMC_ERR_INVALID_ARG);
}

OMC_TEST(shm_roles_are_enforced) {
    char ch[32];
    omc_conn *s, *r;
    omc_buffer b;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "k", 10, 1, 1, NULL));
    CHECK_RES(omc_conn_get(s, "a", "b", "k", NULL, 0, OMC_NO_WAIT, &b), OMC_ERR_WRONG_ROLE);
    CHECK_RES(put_pattern(r, "k2", 10, 1, 1, NULL), OMC_ERR_WRONG_ROLE);
    CHECK_RES(omc_conn_alloc(r, 100, OMC_NO_WAIT, &b), OMC_ERR_WRONG_ROLE);
    CHECK_OK(omc_conn_get(r, "a", "b", "k", NULL, 0, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == 10 && omc_test_verify(b.data, 10, 1));
    CHECK_OK(omc_buffer_release(&b));
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

/* ---- inline payloads -------------------------------------------------------------------------- */

static int meta_is_inline(const omc_meta* m) {
    omc_meta_info info;
    return omc_meta_parse(m->data, m->size, &info) == OMC_OK && (info.flags & OMC_META_FLAG_INLINE) != 0;
}

/* Is p inside one of our mappings of this channel's segments? (else it is a heap copy) */
static int in_segment_mapping(const void* p, const char* channel) {
    char line[1024];
    int found = 0;
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (strstr(line, channel) && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
            found = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    }
    fclose(f);
    return found;
}

OMC_TEST(shm_inline_threshold_boundary) {
    static const uint64_t sizes[] = { 0, 1, 65535, 65536, 65537 };
    char ch[32];
    omc_conn *s, *r;
    size_t i;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 4u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char key[16];
        omc_meta m = {0};
        omc_buffer b;
        int want_inline = sizes[i] < 65536;
        snprintf(key, sizeof(key), "k%zu", i);
        CHECK_OK(put_pattern(s, key, sizes[i], i, 1, &m));
        CHECK_EQ(meta_is_inline(&m), want_inline);
        CHECK_EQ(m.size > sizes[i], want_inline);              /* the bytes ride in the metadata */
        CHECK_OK(omc_conn_get(r, "a", "b", key, m.data, m.size, omc_deadline_after_ms(1000), &b));
        CHECK(b.data != NULL && b.size == sizes[i] && omc_test_verify(b.data, b.size, i));
        CHECK_EQ(in_segment_mapping(b.data, ch), !want_inline); /* inline: a private copy */
        if (want_inline) {     /* an inline view pins nothing: the sender reclaims its pool copy now */
            omc_conn_sweep(s);
            CHECK_EQ(pool_in_use(s), 0);
        }
        CHECK_OK(omc_buffer_release(&b));
        omc_meta_free(&m);
    }
    omc_conn_sweep(s);
    CHECK_EQ(pool_in_use(s), 0);
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

OMC_TEST(shm_inline_threshold_configurable_and_disabled) {
    char ch[32];
    omc_shm_desc d;
    omc_conn *s = NULL, *n = NULL;
    omc_meta m = {0};
    unique_channel(ch, sizeof(ch));
    memset(&d, 0, sizeof(d));
    d.channel = ch;
    d.pool_size = 1u << 20;
    d.inline_threshold = 1000;
    REQUIRE(omc_shm_create(&d, &s) == OMC_OK);
    CHECK_OK(put_pattern(s, "a", 999, 1, 1, &m));
    CHECK(meta_is_inline(&m));
    omc_meta_free(&m);
    CHECK_OK(put_pattern(s, "b", 1000, 1, 1, &m));
    CHECK(!meta_is_inline(&m));
    omc_meta_free(&m);
    d.inline_threshold = 0;
    d.disable_inline = 1;
    REQUIRE(omc_shm_create(&d, &n) == OMC_OK);
    CHECK_OK(put_pattern(n, "c", 1, 1, 1, &m));
    CHECK(!meta_is_inline(&m));
    omc_meta_free(&m);
    omc_conn_destroy(s);
    omc_conn_destroy(n);
}

/* ---- lifetimes -------------------------------------------------------------------------------- */

OMC_TEST(shm_ttl_never_frees_a_held_view) {
    char ch[32];
    omc_conn *s, *r;
    omc_payload p;
    omc_buffer b;
    static char data[200000];
    omc_health h;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    memset(&p, 0, sizeof(p));
    omc_test_fill(data, sizeof(data), 77);
    p.data = data; p.size = sizeof(data); p.readers = 2; p.ttl_ms = 50;
    CHECK_OK(omc_conn_put(s, "a", "b", "k", &p, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "k", NULL, 0, omc_deadline_after_ms(1000), &b));
    usleep(150000);
    CHECK(omc_conn_sweep(s) >= 1);                             /* the second read is withdrawn ... */
    omc_conn_health(s, &h);
    CHECK_EQ(h.live_entries, 0);
    CHECK(h.pool_in_use >= sizeof(data));                      /* ... but the held range stays */
    CHECK(omc_test_verify(b.data, b.size, 77));
    CHECK_OK(omc_buffer_release(&b));
    omc_conn_sweep(s);
    CHECK_EQ(pool_in_use(s), 0);
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

static int warnings;
static void count_warnings(omc_log_level l, omc_log_item item, const char* msg, const char* f, int line, void* u) {
    (void)item; (void)f; (void)line; (void)u;
    if (l <= OMC_LOG_WARN) { __atomic_add_fetch(&warnings, 1, __ATOMIC_RELAXED); fprintf(stderr, "  logged: %s\n", msg); }
}

OMC_TEST(shm_view_outlives_close_and_destroy) {
    char ch[32];
    omc_conn *s, *r, *d = NULL;
    omc_buffer b1, b2;
    omc_shm_desc dd;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    memset(&dd, 0, sizeof(dd));
    dd.channel = ch;
    dd.pool_size = 1u << 20;
    dd.hooks.log_fn = count_warnings;       /* closing with views out is normal: nothing to warn about */
    warnings = 0;
    REQUIRE(omc_shm_create(&dd, &d) == OMC_OK);
    REQUIRE(s && r && d);
    CHECK_OK(put_pattern(s, "k", 300000, 5, 1, NULL));
    CHECK_OK(put_pattern(d, "own", 300000, 6, 1, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "k", NULL, 0, omc_deadline_after_ms(1000), &b1));
    CHECK_OK(omc_conn_get(d, "a", "b", "own", NULL, 0, omc_deadline_after_ms(1000), &b2));
    omc_conn_destroy(s);                /* the sender is gone, its name too ... */
    omc_conn_destroy(d);                /* ... and a dual connector's own view survives it as well */
    omc_conn_destroy(r);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
    CHECK(omc_test_verify(b1.data, b1.size, 5));
    CHECK(omc_test_verify(b2.data, b2.size, 6));
    CHECK_OK(omc_buffer_release(&b1));
    usleep(2000);                        /* past the re-check interval: the own segment is fstat'ed */
    CHECK_OK(omc_buffer_release(&b2));
    CHECK_EQ(count_mappings(ch), 0);     /* the last release unmapped everything */
    CHECK_EQ(warnings, 0);
}

static void* close_later(void* arg) { usleep(100000); omc_conn_close((omc_conn*)arg); return NULL; }

OMC_TEST(shm_close_wakes_waiting_getter) {
    char ch[32];
    omc_conn *s, *r;
    pthread_t th;
    omc_buffer b;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    pthread_create(&th, NULL, close_later, r);
    /* CLOSED, not TIMEOUT: the close woke it, long before its deadline */
    CHECK_RES(omc_conn_get(r, "a", "b", "never", NULL, 0, omc_deadline_after_ms(60000), &b), OMC_ERR_CLOSED);
    pthread_join(th, NULL);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

typedef struct alloc_arg { omc_conn* c; omc_result r; omc_time_ns done; omc_buffer b; } alloc_arg;
static void* alloc_thread(void* p) {
    alloc_arg* a = (alloc_arg*)p;
    a->r = omc_conn_alloc(a->c, 600000, omc_deadline_after_ms(30000), &a->b);
    a->done = omc_now_ns();
    return NULL;
}

/* The owner's segment header, read-only, as another process would map it: the tests below watch
   its words (release_seq at offset 320, the owner's "may sleep" word at 324). NULL on failure. */
static volatile uint32_t* map_header(omc_conn* s) {
    char path[OMC_SHM_PATH_MAX];
    void* m;
    int fd;
    if (omc_shm_segment_path(s, path, sizeof(path)) != OMC_OK || (fd = open(path, O_RDONLY)) < 0) return NULL;
    m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : (volatile uint32_t*)m;
}

OMC_TEST(shm_alloc_waits_for_a_release_by_a_receiver) {
    char ch[32];
    omc_conn *s, *r;
    omc_buffer b;
    pthread_t th;
    alloc_arg a;
    volatile uint32_t* hdr;
    omc_time_ns end, released;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    hdr = map_header(s);
    REQUIRE(hdr);
    CHECK_OK(put_pattern(s, "k", 600000, 3, 1, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "k", NULL, 0, omc_deadline_after_ms(1000), &b));
    CHECK_RES(omc_conn_alloc(s, 600000, omc_deadline_after_ms(50), &a.b), OMC_ERR_TIMEOUT);
    memset(&a, 0, sizeof(a));
    a.c = s;
    pthread_create(&th, NULL, alloc_thread, &a);
    /* the release comes only once the allocating thread waits (the owner's "may sleep" word, header
       offset 324, as in the next case): a thread that started late must not find the space free */
    end = omc_now_ns() + 20000000000LL;
    while (__atomic_load_n(&hdr[324 / 4], __ATOMIC_ACQUIRE) == 0 && omc_now_ns() < end) sched_yield();
    CHECK_EQ(__atomic_load_n(&hdr[324 / 4], __ATOMIC_ACQUIRE), 1);
    released = omc_now_ns();
    CHECK_OK(omc_buffer_release(&b));
    pthread_join(th, NULL);
    CHECK_OK(a.r);
    CHECK(a.done >= released);          /* it had to wait for that release */
    munmap((void*)hdr, 4096);
    if (a.r == OMC_OK) {    /* zero-copy put of the buffer we waited for */
        omc_payload p;
        memset(a.b.data, 9, 600000);
        memset(&p, 0, sizeof(p));
        p.buffer = &a.b;
        CHECK_OK(omc_conn_put(s, "a", "b", "k2", &p, NULL));
        CHECK_OK(omc_conn_get(r, "a", "b", "k2", NULL, 0, omc_deadline_after_ms(1000), &b));
        CHECK(b.size == 600000 && ((unsigned char*)b.data)[599999] == 9);
        CHECK_OK(omc_buffer_release(&b));
    }
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

/* A release moves one line to the owner's side (the dirty bitmap's): release_seq (header offset
   320) is written only by a release that finds the owner asleep waiting for space, which it
   wakes. Watched through a mapping of the segment's header. */
OMC_TEST(shm_release_touches_release_seq_only_to_wake_a_sleeping_owner) {
    char ch[32];
    omc_conn *s, *r;
    omc_buffer b;
    pthread_t th;
    alloc_arg a;
    volatile uint32_t* hdr;
    omc_time_ns end;
    uint32_t rel0;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    hdr = map_header(s);
    REQUIRE(hdr);
    CHECK_OK(put_pattern(s, "k1", 600000, 3, 1, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "k1", NULL, 0, omc_deadline_after_ms(1000), &b));
    CHECK_OK(omc_buffer_release(&b));
    CHECK_EQ(__atomic_load_n(&hdr[320 / 4], __ATOMIC_ACQUIRE), 0);      /* nobody slept: untouched */
    CHECK_OK(put_pattern(s, "k2", 600000, 4, 1, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "k2", NULL, 0, omc_deadline_after_ms(1000), &b));
    memset(&a, 0, sizeof(a));
    a.c = s;
    pthread_create(&th, NULL, alloc_thread, &a);
    end = omc_now_ns() + 5000000000LL;           /* until the owner says it may sleep */
    while (__atomic_load_n(&hdr[324 / 4], __ATOMIC_ACQUIRE) == 0 && omc_now_ns() < end) sched_yield();
    CHECK_EQ(__atomic_load_n(&hdr[324 / 4], __ATOMIC_ACQUIRE), 1);
    rel0 = __atomic_load_n(&hdr[320 / 4], __ATOMIC_ACQUIRE);
    CHECK_OK(omc_buffer_release(&b));
    pthread_join(th, NULL);
    CHECK_OK(a.r);
    CHECK_EQ(__atomic_load_n(&hdr[320 / 4], __ATOMIC_ACQUIRE), rel0 + 1);
    CHECK_EQ(__atomic_load_n(&hdr[324 / 4], __ATOMIC_ACQUIRE), 0);
    if (a.r == OMC_OK) CHECK_OK(omc_buffer_release(&a.b));
    munmap((void*)hdr, 4096);
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

OMC_TEST(shm_fanout_limit_and_entry_table_full) {
    char ch[32];
    omc_shm_desc d;
    omc_conn* s = NULL;
    int i;
    unique_channel(ch, sizeof(ch));
    memset(&d, 0, sizeof(d));
    d.channel = ch;
    d.pool_size = 1u << 20;
    d.max_entries = 4;
    REQUIRE(omc_shm_create(&d, &s) == OMC_OK);
    CHECK_RES(put_pattern(s, "x", 10, 1, OMC_SHM_MAX_READERS + 1, NULL), OMC_ERR_INVALID_ARG);
    CHECK_OK(put_pattern(s, "y", 10, 1, OMC_SHM_MAX_READERS, NULL));
    for (i = 0; i < 3; i++) { char k[8]; snprintf(k, sizeof(k), "k%d", i); CHECK_OK(put_pattern(s, k, 10, 1, 1, NULL)); }
    CHECK_RES(put_pattern(s, "z", 10, 1, 1, NULL), OMC_ERR_POOL_FULL);
    CHECK_OK(omc_conn_cleanup(s, "a", "b", "y"));
    CHECK_OK(put_pattern(s, "z", 10, 1, 1, NULL));
    omc_conn_destroy(s);
}

/* a receiver may also withdraw a key it no longer wants */
OMC_TEST(shm_receiver_cleanup_withdraws_reads) {
    char ch[32];
    omc_conn *s, *r;
    omc_buffer b;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "k", 100000, 1, 2, NULL));
    CHECK_OK(omc_conn_cleanup(r, "a", "b", "k"));
    CHECK_RES(omc_conn_cleanup(r, "a", "b", "k"), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_conn_get(r, "a", "b", "k", NULL, 0, omc_deadline_after_ms(50), &b), OMC_ERR_TIMEOUT);
    omc_conn_sweep(s);
    CHECK_EQ(pool_in_use(s), 0);
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

/* ---- fan-out across processes ---------------------------------------------------------------- */

OMC_TEST(shm_fanout_across_two_consumer_processes) {
    char ch[32];
    omc_conn* s;
    omc_meta m = {0};
    int to_child[2][2], from_child[2][2], k, status;
    pid_t pid[2];
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 4u << 20);
    REQUIRE(s);
    CHECK_OK(put_pattern(s, "fan", 300000, 42, 2, &m));
    for (k = 0; k < 2; k++) {
        REQUIRE(pipe(to_child[k]) == 0 && pipe(from_child[k]) == 0);
        pid[k] = fork();
        REQUIRE(pid[k] >= 0);
        if (pid[k] == 0) {      /* consumer process: get with the metadata, hold, report, release */
            uint32_t n = 0;
            uint8_t buf[4096], ok = 0;
            omc_conn* r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
            omc_buffer b;
            if (r && omc_test_read_all(to_child[k][0], &n, 4) == 0 && n <= sizeof(buf) && omc_test_read_all(to_child[k][0], buf, n) == 0 &&
                omc_conn_get(r, "a", "b", "fan", buf, n, omc_deadline_after_ms(5000), &b) == OMC_OK) {
                ok = b.size == 300000 && omc_test_verify(b.data, b.size, 42) && (b.flags & OMC_BUFFER_READONLY);
                omc_test_write_all(from_child[k][1], &ok, 1);
                omc_test_read_all(to_child[k][0], &n, 4);         /* hold the view until told */
                ok = ok && omc_test_verify(b.data, b.size, 42) && omc_buffer_release(&b) == OMC_OK;
            }
            omc_test_write_all(from_child[k][1], &ok, 1);
            omc_conn_destroy(r);
            _exit(ok ? 0 : 1);
        }
        CHECK(omc_test_write_all(to_child[k][1], &m.size, 4) == 0 && omc_test_write_all(to_child[k][1], m.data, m.size) == 0);
    }
    for (k = 0; k < 2; k++) { uint8_t ok = 0; CHECK(omc_test_read_all(from_child[k][0], &ok, 1) == 0 && ok); }
    {   /* both reads are taken: a third reader finds nothing */
        omc_conn* r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
        omc_buffer b;
        REQUIRE(r);
        CHECK_RES(omc_conn_get(r, "a", "b", "fan", m.data, m.size, omc_deadline_after_ms(100), &b), OMC_ERR_NOT_FOUND);
        omc_conn_destroy(r);
    }
    omc_conn_sweep(s);
    CHECK(pool_in_use(s) >= 300000);           /* still held by both */
    for (k = 0; k < 2; k++) {
        uint32_t go = 1;
        uint8_t ok = 0;
        CHECK(omc_test_write_all(to_child[k][1], &go, 4) == 0);
        CHECK(omc_test_read_all(from_child[k][0], &ok, 1) == 0 && ok);
        CHECK(waitpid(pid[k], &status, 0) == pid[k] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        close(to_child[k][0]); close(to_child[k][1]); close(from_child[k][0]); close(from_child[k][1]);
    }
    omc_conn_sweep(s);
    CHECK_EQ(pool_in_use(s), 0);
    omc_meta_free(&m);
    omc_conn_destroy(s);
}

/* ---- waiting -------------------------------------------------------------------------------- */

/* ---- waiting getters (a child process), measured against a pipe's wake-up ------------------- */

/* A getter waits in a child process (desc spin_ns, or $OMNICONN_SHM_SPIN_US when spin_ns is 0);
   the parent puts `others` keys of other wake-up classes, 1 ms apart, then `key`. The child
   reports the get's result, its voluntary context switches (each sleep that ends is one), the CPU
   its waiting thread used, and the time from the last put to its return - and, as the yardstick
   that time is judged by, how long the same child then took to wake from a blocking read of a
   pipe the parent wrote to once it saw the child asleep. On a loaded host both wake-ups wait for
   a CPU alike; a bound fixed in milliseconds would fail there, one relative to the pipe does not. */
typedef struct wait_report { int64_t res, nvcsw, woke_ns, base_ns, cpu_us, waited_ns; } wait_report;
static wait_report wait_in_child(const char* ch, omc_conn* s, const char* key, int64_t spin_ns, int others, int sleeps);

/* The longest a futex (or a spinning getter) may take to see a put: 10 ms, plus three times what
   a pipe's wake-up of the same child took just after (the host's load at that moment). A getter
   left to a 50 ms slice misses it on an idle host. */
static int64_t wake_bound_ns(const wait_report* rep) {
    return 10000000LL + 3 * (rep->base_ns > 0 ? rep->base_ns : 0);
}

/* A getter asleep in another process (spinning disabled, so only the futex can wake it) wakes
   within milliseconds of the put, and burns no CPU while it sleeps. */
OMC_TEST(shm_futex_wakes_a_sleeping_getter_promptly) {
    char ch[32];
    omc_conn* s;
    wait_report rep;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    REQUIRE(s);
    rep = wait_in_child(ch, s, "wake", -1, 0, 1);
    CHECK_EQ(rep.res, OMC_OK);
    CHECK(rep.woke_ns >= 0 && rep.woke_ns < wake_bound_ns(&rep));   /* woken by the futex, not by a 50 ms slice */
    CHECK(rep.cpu_us >= 0 && rep.cpu_us < 100000);                    /* < 100 ms of CPU over a wait of 200 ms or more: it slept */
    if (!(rep.woke_ns >= 0 && rep.woke_ns < wake_bound_ns(&rep)) || rep.cpu_us >= 100000)
        fprintf(stderr, "  wake-up after %.3f ms (a pipe's: %.3f ms), %lld us CPU\n", (double)rep.woke_ns / 1e6,
                (double)rep.base_ns / 1e6, (long long)rep.cpu_us);
    omc_conn_destroy(s);
}

/* ---- crash safety --------------------------------------------------------------------------- */

static uint64_t crash_size(int i) { return 1 + (uint64_t)((i * 7919) % 5) * 60000 + (uint64_t)(i % 3) * 100; }

/* A producer that puts k0, k1, ... as fast as the pool lets it, until it is killed. */
static void producer_forever(const char* ch, int ready_fd) {
    omc_conn* s = make_priv(ch, OMC_ROLE_SENDER, 2u << 20);
    int i;
    char one = 1;
    if (!s) _exit(2);
    omc_test_write_all(ready_fd, &one, 1);
    for (i = 0;; i++) {
        char key[32];
        omc_result r;
        snprintf(key, sizeof(key), "k%d", i);
        while ((r = put_pattern(s, key, crash_size(i), (uint64_t)i, 1, NULL)) == OMC_ERR_POOL_FULL) usleep(200);
        if (r != OMC_OK) _exit(3);
    }
}

OMC_TEST(shm_sigkill_producer_mid_run_then_sweep_leaves_nothing) {
    int round;
    srand((unsigned)getpid());
    for (round = 0; round < 4; round++) {
        char ch[32];
        omc_conn* r;
        omc_shm_desc sd;
        omc_buffer held;
        int fds[2], status, i = 0, got_after = 0, bad = 0;
        uint32_t removed = 0;
        char one;
        pid_t pid;
        omc_time_ns kill_at;
        unique_channel(ch, sizeof(ch));
        REQUIRE(pipe(fds) == 0);
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) producer_forever(ch, fds[1]);
        r = make_priv(ch, OMC_ROLE_RECEIVER, 0);
        REQUIRE(r && omc_test_read_all(fds[0], &one, 1) == 0);
        memset(&held, 0, sizeof(held));
        kill_at = omc_now_ns() + (10 + rand() % 60) * 1000000LL;
        while (omc_now_ns() < kill_at || i < 5) {  /* consume while the producer runs */
            char key[32];
            omc_buffer b;
            snprintf(key, sizeof(key), "k%d", i);
            if (omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(2000), &b) != OMC_OK) { bad++; break; }
            if (b.size != crash_size(i) || !omc_test_verify(b.data, b.size, (uint64_t)i)) bad++;
            if (i == 3) held = b;               /* keep one view across the kill */
            else omc_buffer_release(&b);
            i++;
        }
        kill(pid, SIGKILL);
        CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
        for (;; i++) {                          /* what was published before the kill is intact */
            char key[32];
            omc_buffer b;
            snprintf(key, sizeof(key), "k%d", i);
            if (omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(100), &b) != OMC_OK) break;
            if (b.size != crash_size(i) || !omc_test_verify(b.data, b.size, (uint64_t)i)) bad++;
            omc_buffer_release(&b);
            got_after++;
        }
        CHECK_EQ(bad, 0);
        CHECK(i > 3);
        if (held.data) { CHECK(omc_test_verify(held.data, held.size, 3)); CHECK_OK(omc_buffer_release(&held)); }
        memset(&sd, 0, sizeof(sd));
        sd.shm_dir = priv_dir;
        CHECK_OK(omc_shm_sweep_dead(&sd, &removed));
        CHECK_EQ(removed, 1);
        CHECK_EQ(count_segments(priv_dir, ch), 0);
        omc_conn_sweep(r);                      /* unmaps the dead segment: its memory is freed */
        CHECK_EQ(count_mappings(ch), 0);
        omc_conn_destroy(r);
        close(fds[0]); close(fds[1]);
        (void)got_after;
    }
}

/* Killed while creating its segment (between O_CREAT and READY, or during the fallocate, or
   the mapping): whatever was left, the sweep removes it. A 64 MiB pool makes create take long
   enough for the random delays to land inside it. */
OMC_TEST(shm_sigkill_producer_during_create_then_sweep_leaves_nothing) {
    int round;
    for (round = 0; round < 12; round++) {
        char ch[32];
        omc_shm_desc sd;
        int status;
        pid_t pid;
        unique_channel(ch, sizeof(ch));
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            omc_conn* s = make_priv(ch, OMC_ROLE_SENDER, 64u << 20);
            (void)s;
            pause();
            _exit(0);
        }
        usleep((useconds_t)(round * 15000));     /* 0 .. 165 ms: creating 64 MiB takes ~160 ms here */
        kill(pid, SIGKILL);
        CHECK(waitpid(pid, &status, 0) == pid);
        memset(&sd, 0, sizeof(sd));
        sd.shm_dir = priv_dir;
        CHECK_OK(omc_shm_sweep_dead(&sd, NULL));
        CHECK_EQ(count_segments(priv_dir, ch), 0);
    }
}

/* A consumer that takes everything it can and never releases, until it is killed. */
static void consumer_hoarding(const char* ch, int ready_fd, int hoard_at_least) {
    omc_conn* r = make_priv(ch, OMC_ROLE_RECEIVER, 0);
    int i;
    char one = 1;
    if (!r) _exit(2);
    for (i = 0;; i++) {
        char key[32];
        omc_buffer b;
        snprintf(key, sizeof(key), "k%d", i);
        if (omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(10000), &b) != OMC_OK) _exit(3);
        if (i % 2) omc_buffer_release(&b);      /* release some, hoard the rest */
        if (i + 1 == hoard_at_least) omc_test_write_all(ready_fd, &one, 1);
    }
}

OMC_TEST(shm_sigkill_consumer_holding_views_then_sweep_reclaims_all) {
    int round;
    for (round = 0; round < 3; round++) {
        char ch[32];
        omc_conn* s;
        int fds[2], status, i;
        char one;
        pid_t pid;
        unique_channel(ch, sizeof(ch));
        s = make_priv(ch, OMC_ROLE_SENDER, 8u << 20);
        REQUIRE(s && pipe(fds) == 0);
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) consumer_hoarding(ch, fds[1], 20);
        for (i = 0; i < 40; i++) {              /* inline and pool payloads, the child hoards half */
            char key[32];
            snprintf(key, sizeof(key), "k%d", i);
            CHECK_OK(put_pattern(s, key, (i % 4) ? 70000 + (uint64_t)i : 1000, (uint64_t)i, 1, NULL));
            if (i == 20 + round * 5) {          /* kill it at a different moment each round */
                REQUIRE(omc_test_read_all(fds[0], &one, 1) == 0);
                usleep((useconds_t)(round * 3000));
                kill(pid, SIGKILL);
            }
        }
        CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
        for (i = 0; i < 40; i++) {              /* whatever it never took: withdraw */
            char key[32];
            snprintf(key, sizeof(key), "k%d", i);
            omc_conn_cleanup(s, "a", "b", key);
        }
        /* the child never released its even-numbered views: only the dead-reader reclaim (in this
           sweep, or in a periodic pass inside the puts above) can bring the pool back to zero */
        omc_conn_sweep(s);
        CHECK_EQ(pool_in_use(s), 0);
        {
            omc_health h;
            omc_conn_health(s, &h);
            CHECK_EQ(h.live_entries, 0);
        }
        omc_conn_destroy(s);
        CHECK_EQ(count_segments(priv_dir, ch), 0);
        close(fds[0]); close(fds[1]);
    }
}

/* ---- lifetime after the producer exits ---------------------------------------------------- */

/* A producer that puts one payload (and hands its metadata to the parent through fd), then
   leaves: how = 0 returns from "main" without closing anything (exit), 1 waits to be SIGKILLed,
   2 puts with a 200 ms TTL and exits. */
static void producer_put_and_leave(const char* ch, int fd, int how) {
    omc_conn* s = make_priv(ch, OMC_ROLE_SENDER, 4u << 20);
    omc_meta m;
    omc_payload p;
    uint32_t len;
    static uint8_t data[300000];
    if (!s) _exit(2);
    memset(&p, 0, sizeof(p));
    omc_test_fill(data, sizeof(data), 77);
    p.data = data;
    p.size = sizeof(data);
    if (how == 2) p.ttl_ms = 200;
    if (omc_conn_put(s, "a", "b", "left", &p, &m) != OMC_OK) _exit(3);
    len = (uint32_t)m.size;
    if (omc_test_write_all(fd, &len, sizeof(len)) != 0 || omc_test_write_all(fd, m.data, m.size) != 0) _exit(4);
    omc_meta_free(&m);
    if (how == 1) for (;;) pause();
    _exit(0);       /* no destroy: what a program that returns from main after its put does */
}

static void payload_outlives_producer(int how) {
    char ch[32];
    omc_shm_desc sd;
    omc_conn* r;
    omc_buffer b;
    uint8_t meta[4096];
    uint32_t len = 0, removed = 0;
    int fds[2], status;
    pid_t pid;
    unique_channel(ch, sizeof(ch));
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) producer_put_and_leave(ch, fds[1], how);
    REQUIRE(omc_test_read_all(fds[0], &len, sizeof(len)) == 0 && len <= sizeof(meta) && omc_test_read_all(fds[0], meta, len) == 0);
    if (how == 1) kill(pid, SIGKILL);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(how == 1 ? WIFSIGNALED(status) : (WIFEXITED(status) && WEXITSTATUS(status) == 0));
    memset(&sd, 0, sizeof(sd));
    sd.shm_dir = priv_dir;
    if (how == 2) {         /* never consumed: once its TTL passed, a sweep may remove it */
        CHECK_OK(omc_shm_sweep_dead(&sd, &removed));
        CHECK_EQ(removed, 0);
        usleep(300000);
        CHECK_OK(omc_shm_sweep_dead(&sd, &removed));
        CHECK_EQ(removed, 1);
        CHECK_EQ(count_segments(priv_dir, ch), 0);
        close(fds[0]); close(fds[1]);
        return;
    }
    /* the consumer starts after the producer is gone; its create sweeps the directory */
    r = make_priv(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(r);
    CHECK_EQ(count_segments(priv_dir, ch), 1);
    CHECK_OK(omc_shm_sweep_dead(&sd, &removed));        /* unconsumed: no sweep removes it */
    CHECK_EQ(removed, 0);
    memset(&b, 0, sizeof(b));
    if (how == 0) CHECK_OK(omc_conn_get(r, "a", "b", "left", meta, len, omc_deadline_after_ms(1000), &b));
    else CHECK_OK(omc_conn_get(r, "a", "b", "left", NULL, 0, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == 300000 && omc_test_verify(b.data, b.size, 77));
    CHECK_OK(omc_buffer_release(&b));
    CHECK_OK(omc_shm_sweep_dead(&sd, &removed));        /* consumed: now it goes */
    CHECK_EQ(removed, 1);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
    omc_conn_sweep(r);
    CHECK_EQ(count_mappings(ch), 0);
    omc_conn_destroy(r);
    close(fds[0]); close(fds[1]);
}

OMC_TEST(shm_payload_stays_readable_after_its_producer_exits) { payload_outlives_producer(0); }
OMC_TEST(shm_payload_stays_readable_after_its_producer_is_killed) { payload_outlives_producer(1); }
OMC_TEST(shm_unconsumed_payload_of_an_exited_producer_goes_when_its_ttl_passes) { payload_outlives_producer(2); }

/* The producer of the README: put, hand the metadata over as text, wait until it is consumed,
   close, exit. wait_consumed returns once the consumer's get took the read, not before. */
OMC_TEST(shm_producer_waits_for_consumption_then_exits) {
    char ch[32], text[8192];
    omc_conn* r;
    omc_meta m;
    omc_buffer b;
    uint32_t len = 0;
    int fds[2], status;
    pid_t pid;
    unique_channel(ch, sizeof(ch));
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        omc_conn* s = make_priv(ch, OMC_ROLE_SENDER, 4u << 20);
        omc_meta pm;
        char t[8192];
        int rc;
        if (!s || put_pattern(s, "hello", 100000, 5, 1, &pm) != OMC_OK) _exit(2);
        if (omc_meta_to_text(pm.data, pm.size, t, sizeof(t)) != OMC_OK) _exit(3);
        len = (uint32_t)strlen(t);
        if (omc_test_write_all(fds[1], &len, sizeof(len)) != 0 || omc_test_write_all(fds[1], t, len) != 0) _exit(4);
        omc_meta_free(&pm);
        if (omc_conn_wait_consumed(s, omc_deadline_after_ms(50)) != OMC_ERR_TIMEOUT) _exit(5);   /* nobody read yet */
        rc = omc_conn_wait_consumed(s, omc_deadline_after_ms(60000)) == OMC_OK ? 0 : 6;   /* an upper bound: it returns at the read */
        omc_conn_destroy(s);
        _exit(rc);
    }
    REQUIRE(omc_test_read_all(fds[0], &len, sizeof(len)) == 0 && len < sizeof(text) && omc_test_read_all(fds[0], text, len) == 0);
    text[len] = '\0';
    usleep(100000);
    CHECK(waitpid(pid, &status, WNOHANG) == 0);      /* still waiting for its consumer */
    r = make_priv(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(r);
    CHECK_OK(omc_meta_from_text(text, len, &m));
    CHECK_OK(omc_conn_get(r, "a", "b", "hello", m.data, m.size, omc_deadline_after_ms(20000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 5));
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_sweep(r);
    omc_conn_destroy(r);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
    close(fds[0]); close(fds[1]);
}

/* ---- first contact: a consumer started first, a large sender pool ---------------------------- */

static uint64_t alarm_lines;
static void alarm_log(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level <= OMC_LOG_WARN) {
        __atomic_add_fetch(&alarm_lines, 1u, __ATOMIC_RELAXED);
        printf("  logged: %s\n", msg);
    }
}

/* The consumer is waiting (metadata-less get) before the producer exists; the producer's create
   of a 128 MiB segment takes long enough that the consumer's scans see the file empty, being
   reserved, and with its header half written. None of that is a problem worth a WARN. */
OMC_TEST(shm_consumer_started_first_logs_no_alarm_while_the_producer_creates) {
    int round;
    for (round = 0; round < 3; round++) {
        char ch[32];
        omc_shm_desc d;
        omc_conn* r = NULL;
        omc_buffer b;
        int status;
        pid_t pid;
        unique_channel(ch, sizeof(ch));
        memset(&d, 0, sizeof(d));
        d.shm_dir = priv_dir;
        d.channel = ch;
        d.role = OMC_ROLE_RECEIVER;
        d.hooks.log_fn = alarm_log;
        d.hooks.max_level = OMC_LOG_WARN;
        REQUIRE(omc_shm_create(&d, &r) == OMC_OK);
        alarm_lines = 0;
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            omc_conn* s;
            usleep((useconds_t)(round * 20000));
            s = make_priv(ch, OMC_ROLE_SENDER, 128u << 20);
            if (!s || put_pattern(s, "k", 100000, 9, 1, NULL) != OMC_OK) _exit(2);
            _exit(omc_conn_wait_consumed(s, omc_deadline_after_ms(10000)) == OMC_OK ? 0 : 3);
        }
        memset(&b, 0, sizeof(b));
        CHECK_OK(omc_conn_get(r, "a", "b", "k", NULL, 0, omc_deadline_after_ms(10000), &b));
        CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 9));
        omc_buffer_release(&b);
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK_EQ(__atomic_load_n(&alarm_lines, __ATOMIC_RELAXED), 0);
        omc_shm_sweep_dead(&d, NULL);
        omc_conn_sweep(r);
        omc_conn_destroy(r);
        CHECK_EQ(count_segments(priv_dir, ch), 0);
    }
}

/* A receiver's first get from a sender with a 1 GiB pool: it maps the segment, but touches only
   the pages it reads. Want: well inside a 50 ms deadline, with metadata and without. */
OMC_TEST(shm_first_get_cost_does_not_grow_with_the_senders_pool) {
    char ch[32];
    omc_conn *s, *r1, *r2;
    omc_meta m;
    omc_buffer b;
    double t0, t1, t2;
    omc_result res;
    unique_channel(ch, sizeof(ch));
    s = make_priv(ch, OMC_ROLE_SENDER, 1u << 30);
    REQUIRE(s);
    r1 = make_priv(ch, OMC_ROLE_RECEIVER, 0);
    r2 = make_priv(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(r1 && r2);
    CHECK_OK(put_pattern(s, "with-meta", 100000, 3, 1, &m));
    CHECK_OK(put_pattern(s, "by-key", 100000, 4, 1, NULL));
    t0 = (double)omc_now_ns() / 1e9;
    res = omc_conn_get(r1, "a", "b", "with-meta", m.data, m.size, omc_deadline_after_ms(50), &b);
    t1 = (double)omc_now_ns() / 1e9;
    CHECK_OK(res);
    if (res == OMC_OK) { CHECK(omc_test_verify(b.data, b.size, 3)); omc_buffer_release(&b); }
    res = omc_conn_get(r2, "a", "b", "by-key", NULL, 0, omc_deadline_after_ms(50), &b);
    t2 = (double)omc_now_ns() / 1e9;
    CHECK_OK(res);
    if (res == OMC_OK) { CHECK(omc_test_verify(b.data, b.size, 4)); omc_buffer_release(&b); }
    printf("  first get from a 1 GiB pool: %.2f ms with metadata, %.2f ms by key (deadline 50 ms)\n", (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    CHECK(t1 - t0 < 0.05);
    CHECK(t2 - t1 < 0.05);
    omc_meta_free(&m);
    omc_conn_destroy(r1);
    omc_conn_destroy(r2);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
}

/* ---- refusals that say which side, which object and the fix -------------------------------- */

static char said[8][1024];
static int nsaid;
static void said_log(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level <= OMC_LOG_WARN && nsaid < 8) snprintf(said[nsaid++], sizeof(said[0]), "%s", msg);
}
static int said_has(const char* a, const char* b) {
    int i;
    for (i = 0; i < nsaid; i++) if (strstr(said[i], a) && (!b || strstr(said[i], b))) return 1;
    return 0;
}

/* Two producers of one channel put the same key (the second in another process): a consumer
   that sees both says so, naming both processes, once. */
OMC_TEST(shm_two_producers_of_one_key_are_reported_naming_both) {
    char ch[32], pidtxt[32];
    omc_shm_desc d;
    omc_conn *s, *r = NULL;
    omc_buffer b;
    int fds[2], go[2], status, warned;
    char one;
    pid_t pid;
    unique_channel(ch, sizeof(ch));
    REQUIRE(pipe(fds) == 0 && pipe(go) == 0);
    s = make_priv(ch, OMC_ROLE_SENDER, 1u << 20);
    REQUIRE(s);
    CHECK_OK(put_pattern(s, "dup", 100000, 1, 1, NULL));
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        omc_conn* s2 = make_priv(ch, OMC_ROLE_SENDER, 1u << 20);
        if (!s2 || put_pattern(s2, "dup", 100000, 2, 1, NULL) != OMC_OK) _exit(2);
        one = 1;
        if (omc_test_write_all(fds[1], &one, 1) != 0 || omc_test_read_all(go[0], &one, 1) != 0) _exit(3);
        omc_conn_destroy(s2);
        _exit(0);
    }
    REQUIRE(omc_test_read_all(fds[0], &one, 1) == 0);
    memset(&d, 0, sizeof(d));
    d.shm_dir = priv_dir;
    d.channel = ch;
    d.role = OMC_ROLE_RECEIVER;
    d.hooks.log_fn = said_log;
    d.hooks.max_level = OMC_LOG_WARN;
    REQUIRE(omc_shm_create(&d, &r) == OMC_OK);
    nsaid = 0;
    CHECK_OK(omc_conn_get(r, "a", "b", "dup", NULL, 0, omc_deadline_after_ms(1000), &b));
    omc_buffer_release(&b);
    CHECK_OK(omc_conn_get(r, "a", "b", "dup", NULL, 0, omc_deadline_after_ms(1000), &b));   /* the other copy */
    omc_buffer_release(&b);
    snprintf(pidtxt, sizeof(pidtxt), "pid %ld ", (long)pid);
    warned = said_has("two producers", pidtxt);
    CHECK(warned);
    snprintf(pidtxt, sizeof(pidtxt), "pid %ld ", (long)getpid());
    CHECK(said_has("two producers", pidtxt));
    CHECK_EQ(nsaid, 1);                                 /* once, not per get */
    if (!warned) printf("  nothing said about the duplicate key\n");
    one = 1;
    CHECK(omc_test_write_all(go[1], &one, 1) == 0);
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
    close(fds[0]); close(fds[1]); close(go[0]); close(go[1]);
}

/* Each refusal names the field (or the side and the key) and says what would be accepted. */
OMC_TEST(shm_refusals_name_the_field_the_side_and_the_fix) {
    char ch[32];
    omc_shm_desc d;
    omc_conn *c = NULL, *s, *r = NULL;
    omc_meta m;
    uint8_t small[10];
    uint64_t need = 0;
    unique_channel(ch, sizeof(ch));
    memset(&d, 0, sizeof(d));
    d.shm_dir = priv_dir;
    d.channel = ch;
    d.hooks.log_fn = said_log;
    d.hooks.max_level = OMC_LOG_WARN;
    nsaid = 0;
    d.pool_size = 1;
    CHECK_RES(omc_shm_create(&d, &c), OMC_ERR_INVALID_ARG);
    CHECK(said_has("pool_size 1 ", "at least the alignment (4096 bytes)"));
    nsaid = 0;
    d.pool_size = 0;
    d.max_entries = 1u << 21;
    CHECK_RES(omc_shm_create(&d, &c), OMC_ERR_INVALID_ARG);
    CHECK(said_has("max_entries 2097152", "at most 1048576"));
    CHECK(!said_has("pool_size", NULL));
    d.max_entries = 0;
    d.role = OMC_ROLE_SENDER;
    d.pool_size = 1u << 20;
    REQUIRE(omc_shm_create(&d, &s) == OMC_OK);
    d.role = OMC_ROLE_RECEIVER;
    REQUIRE(omc_shm_create(&d, &r) == OMC_OK);
    CHECK_OK(put_pattern(s, "big", 100000, 1, 1, &m));
    nsaid = 0;                                          /* a receiver buffer smaller than the payload */
    CHECK_RES(omc_conn_get_copy(r, "a", "b", "big", m.data, m.size, omc_deadline_after_ms(100), small, sizeof(small), &need), OMC_ERR_TOO_LARGE);
    CHECK_EQ(need, 100000);
    CHECK(said_has("receiver side", "100000 bytes"));
    nsaid = 0;                                          /* the same key again while unread */
    CHECK_RES(put_pattern(s, "big", 1000, 1, 1, NULL), OMC_ERR_EXISTS);
    CHECK(said_has("sender side", "unread"));
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
}

OMC_TEST(shm_sweep_removes_dead_owners_only) {
    char ch[32], path[OMC_SHM_PATH_MAX], dead[OMC_SHM_PATH_MAX], link_path[OMC_SHM_PATH_MAX], target[OMC_SHM_PATH_MAX];
    omc_shm_desc sd;
    omc_conn* live;
    uint32_t removed = 0;
    int fd;
    struct stat st;
    unique_channel(ch, sizeof(ch));
    live = make_priv(ch, OMC_ROLE_SENDER, 1u << 20);
    REQUIRE(live);
    CHECK_OK(omc_shm_segment_path(live, path, sizeof(path)));
    /* garbage named like a segment of a process that no longer exists */
    snprintf(dead, sizeof(dead), "%s/omc-%u-%s-%d-00000000deadbeef", priv_dir, (unsigned)geteuid(), ch, 0x3FFFFFF0);
    fd = open(dead, O_CREAT | O_WRONLY | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    CHECK(write(fd, "junk", 4) == 4);
    close(fd);
    /* a symbolic link with our prefix, pointing at a file the sweep must never touch */
    snprintf(target, sizeof(target), "/tmp/omc-sweep-target-%ld", (long)getpid());
    fd = open(target, O_CREAT | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    close(fd);
    snprintf(link_path, sizeof(link_path), "%s/omc-%u-%s-%d-00000000000001ee", priv_dir, (unsigned)geteuid(), ch, 0x3FFFFFF1);
    REQUIRE(symlink(target, link_path) == 0);
    memset(&sd, 0, sizeof(sd));
    sd.shm_dir = priv_dir;
    CHECK_OK(omc_shm_sweep_dead(&sd, &removed));
    CHECK_EQ(removed, 1);
    CHECK(stat(dead, &st) != 0);                /* removed */
    CHECK(stat(path, &st) == 0);                /* the live owner's segment stays */
    CHECK(stat(target, &st) == 0);              /* never followed */
    CHECK(lstat(link_path, &st) == 0);          /* links are left alone */
    unlink(link_path);
    unlink(target);
    omc_conn_destroy(live);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
    sd.shm_dir = "/nonexistent-omc-dir";
    CHECK_RES(omc_shm_sweep_dead(&sd, NULL), OMC_ERR_UNAVAILABLE);
}

/* ---- bad input -------------------------------------------------------------------------------- */

/* Rebuild a valid envelope around a modified copy of the body (a forger with a correct CRC). */
typedef struct body_edit { int field; uint64_t value; const char* name; } body_edit;
enum { F_NONE, F_ENTRY, F_GEN, F_OFFSET, F_SIZE, F_NAME, F_SEGID, F_PID };

static void forge(const omc_meta* in, body_edit ed, omc_meta* out) {
    omc_meta_info info;
    uint8_t body[1024], *dst;
    uint32_t blen, nlen;
    memset(out, 0, sizeof(*out));
    if (omc_meta_parse(in->data, in->size, &info) != OMC_OK || info.body_len > sizeof(body)) return;
    memcpy(body, info.body, info.body_len);
    blen = info.body_len;
    switch (ed.field) {
        case F_ENTRY: omc__put_u32(body + 20, (uint32_t)ed.value); break;
        case F_GEN: omc__put_u32(body + 24, (uint32_t)ed.value); break;
        case F_OFFSET: omc__put_u64(body + 32, ed.value); break;
        case F_SIZE: omc__put_u64(body + 40, ed.value); break;
        case F_SEGID: omc__put_u64(body + 0, ed.value); break;
        case F_PID: omc__put_u32(body + 16, (uint32_t)ed.value); break;
        case F_NAME:
            nlen = (uint32_t)strlen(ed.name);
            body[48] = (uint8_t)nlen;
            memcpy(body + 56, ed.name, nlen);
            blen = 56 + nlen;
            break;
        default: break;
    }
    if (omc__meta_begin(info.transport, info.flags, ed.field == F_SIZE ? ed.value : info.data_size, info.key, info.key_len,
                        blen, out, &dst) != OMC_OK) return;
    memcpy(dst, body, blen);
    omc__meta_seal(out);
}

static uint32_t meta_gen(const omc_meta* m) {
    omc_meta_info info;
    return omc_meta_parse(m->data, m->size, &info) == OMC_OK ? omc__get_u32(info.body + 24) : 0;
}

static omc_result get_with(omc_conn* r, const char* key, const omc_meta* m) {
    omc_buffer b;
    omc_result res;
    if (!m->data) return OMC_ERR_INTERNAL;      /* a forge that failed must not become a metadata-less get */
    res = omc_conn_get(r, "a", "b", key, m->data, m->size, omc_deadline_after_ms(200), &b);
    if (res == OMC_OK) omc_buffer_release(&b);
    return res;
}

OMC_TEST(shm_forged_metadata_refused) {
    char ch[32], other[128];
    omc_conn *s, *r;
    omc_meta m = {0}, f;
    body_edit ed;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "k", 100000, 1, 1, &m));
    memset(&ed, 0, sizeof(ed));
    ed.field = F_OFFSET; ed.value = (1u << 20) + 4096;        /* past the end of the data area */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    ed.field = F_OFFSET; ed.value = UINT64_MAX - 10;           /* overflow */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    ed.field = F_SIZE; ed.value = 2u << 20;                    /* bigger than the segment */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    ed.field = F_SIZE; ed.value = 99999;                       /* inside, but not what was put */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    ed.field = F_ENTRY; ed.value = 1u << 30;                   /* no such entry */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    ed.field = F_GEN; ed.value = 0;
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    ed.field = F_NAME; ed.name = "../../etc/passwd";           /* never leaves the directory */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    snprintf(other, sizeof(other), "omc-%u-x-1-00", (unsigned)geteuid() + 1);
    ed.name = other;                                            /* another user's name */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_MALFORMED); omc_meta_free(&f);
    snprintf(other, sizeof(other), "omc-%u-%s-%ld-0000000000000000", (unsigned)geteuid(), ch, (long)getpid());
    ed.name = other;                                            /* absent, owner alive */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_NOT_FOUND);
    ed.field = F_PID; ed.value = 0x3FFFFFF2;                    /* absent, and its owner is dead */
    {
        omc_meta f2;
        forge(&f, ed, &f2);
        REQUIRE(f2.data != NULL);
        CHECK_RES(get_with(r, "k", &f2), OMC_ERR_PEER_DEAD);
        omc_meta_free(&f2);
    }
    omc_meta_free(&f);
    ed.field = F_SEGID; ed.value = 12345;                       /* a different segment under this name */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_SHM_CHANGED); omc_meta_free(&f);
    ed.field = F_GEN; ed.value = meta_gen(&m) + 1;              /* a generation that is not the live one */
    forge(&m, ed, &f); CHECK_RES(get_with(r, "k", &f), OMC_ERR_STALE); omc_meta_free(&f);
    CHECK_RES(put_pattern(s, "k", 100000, 1, 1, NULL), OMC_ERR_EXISTS);
    /* nothing above consumed it: the genuine metadata still works, once */
    CHECK_OK(get_with(r, "k", &m));
    CHECK_RES(get_with(r, "k", &m), OMC_ERR_NOT_FOUND);
    {   /* an older put's metadata after the key was put again: stale */
        omc_meta m2 = {0};
        CHECK_OK(put_pattern(s, "k", 100000, 2, 1, &m2));
        CHECK_RES(get_with(r, "k", &m), OMC_ERR_STALE);
        CHECK_OK(get_with(r, "k", &m2));
        omc_meta_free(&m2);
    }
    omc_meta_free(&m);
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

/* A producer whose segment another process truncates: every later call says SHM_CHANGED, and
   neither side ever touches the missing pages (no SIGBUS). new_size 0 and half the file. */
static void shrink_case(uint64_t divisor) {
    char ch[32], path[OMC_SHM_PATH_MAX];
    omc_conn *s, *r_mapped, *r_fresh;
    omc_meta m = {0};
    omc_buffer b;
    omc_health h;
    struct stat st;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r_mapped = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    r_fresh = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r_mapped && r_fresh);
    CHECK_OK(put_pattern(s, "first", 100000, 1, 1, NULL));
    CHECK_OK(omc_conn_get(r_mapped, "a", "b", "first", NULL, 0, omc_deadline_after_ms(1000), &b));   /* maps it */
    CHECK_OK(omc_buffer_release(&b));
    CHECK_OK(put_pattern(s, "k", 100000, 1, 1, &m));
    CHECK_OK(omc_shm_segment_path(s, path, sizeof(path)));
    REQUIRE(stat(path, &st) == 0);
    REQUIRE(truncate(path, divisor ? st.st_size / (off_t)divisor : 0) == 0);
    usleep(5000);                                   /* past the re-check interval */
    CHECK_RES(get_with(r_fresh, "k", &m), OMC_ERR_SHM_CHANGED);
    CHECK_RES(get_with(r_mapped, "k", &m), OMC_ERR_SHM_CHANGED);
    CHECK_RES(omc_conn_get(r_mapped, "a", "b", "k", NULL, 0, omc_deadline_after_ms(50), &b), OMC_ERR_TIMEOUT);
    CHECK_RES(put_pattern(s, "k2", 100000, 1, 1, NULL), OMC_ERR_SHM_CHANGED);
    CHECK_RES(omc_conn_alloc(s, 100, OMC_NO_WAIT, &b), OMC_ERR_SHM_CHANGED);
    CHECK_RES(omc_conn_cleanup(s, "a", "b", "k"), OMC_ERR_SHM_CHANGED);
    CHECK_OK(omc_conn_health(s, &h));
    CHECK(h.state == OMC_CONN_DEGRADED && h.last_error == OMC_ERR_SHM_CHANGED);
    omc_conn_sweep(s);
    omc_conn_sweep(r_mapped);
    omc_meta_free(&m);
    omc_conn_destroy(s);                            /* close must not touch the pages either */
    omc_conn_destroy(r_mapped);
    omc_conn_destroy(r_fresh);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
}

OMC_TEST(shm_truncated_segment_is_refused_without_sigbus) {
    shrink_case(2);
    shrink_case(0);
}

static int copy_file(const char* from, const char* to, int garbage) {
    int in = open(from, O_RDONLY), out = open(to, O_CREAT | O_EXCL | O_WRONLY, 0600);
    char buf[65536];
    ssize_t n;
    int ok = in >= 0 && out >= 0;
    while (ok && (n = read(in, buf, sizeof(buf))) > 0) {
        if (garbage) memset(buf, 0x5A, (size_t)n);
        ok = write(out, buf, (size_t)n) == n;
    }
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return ok;
}

/* Someone unlinks the segment and puts another file under its name: a byte-exact copy (caught by
   the inode in the metadata), or garbage (caught by the header). Receivers that had mapped the
   real segment keep reading the real data. */
OMC_TEST(shm_replaced_segment_is_detected) {
    int garbage;
    for (garbage = 0; garbage < 2; garbage++) {
        char ch[32], path[OMC_SHM_PATH_MAX], saved[OMC_SHM_PATH_MAX + 8];
        omc_conn *s, *r_mapped, *r_fresh;
        omc_meta m = {0};
        omc_buffer b;
        unique_channel(ch, sizeof(ch));
        s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
        r_mapped = make_shm(ch, OMC_ROLE_RECEIVER, 0);
        r_fresh = make_shm(ch, OMC_ROLE_RECEIVER, 0);
        REQUIRE(s && r_mapped && r_fresh);
        CHECK_OK(put_pattern(s, "first", 100000, 1, 1, NULL));
        CHECK_OK(omc_conn_get(r_mapped, "a", "b", "first", NULL, 0, omc_deadline_after_ms(1000), &b));
        CHECK_OK(put_pattern(s, "k", 100000, 7, 1, &m));
        CHECK_OK(omc_shm_segment_path(s, path, sizeof(path)));
        snprintf(saved, sizeof(saved), "%s.copy", path);
        REQUIRE(copy_file(path, saved, garbage));
        REQUIRE(unlink(path) == 0 && rename(saved, path) == 0);
        CHECK_RES(get_with(r_fresh, "k", &m), OMC_ERR_SHM_CHANGED);
        {   /* the receiver that holds a view of the real segment still reads the real bytes */
            omc_buffer b2;
            CHECK_OK(omc_conn_get(r_mapped, "a", "b", "k", m.data, m.size, omc_deadline_after_ms(1000), &b2));
            CHECK(b2.size == 100000 && omc_test_verify(b2.data, b2.size, 7));
            CHECK_OK(omc_buffer_release(&b2));
        }
        CHECK_OK(omc_buffer_release(&b));
        usleep(5000);
        CHECK_RES(put_pattern(s, "k2", 10, 1, 1, NULL), OMC_ERR_SHM_CHANGED);   /* the owner notices too */
        omc_meta_free(&m);
        omc_conn_destroy(s);
        CHECK(access(path, F_OK) == 0);         /* not ours any more: close leaves it */
        unlink(path);
        omc_conn_destroy(r_mapped);
        omc_conn_destroy(r_fresh);
        CHECK_EQ(count_segments(SHM_DIR, ch), 0);
    }
}

OMC_TEST(shm_symlink_and_foreign_owner_refused) {
    char ch[32], path[OMC_SHM_PATH_MAX], moved[OMC_SHM_PATH_MAX + 8];
    omc_conn *s, *r;
    omc_meta m = {0};
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "k", 100000, 1, 1, &m));
    CHECK_OK(omc_shm_segment_path(s, path, sizeof(path)));
    snprintf(moved, sizeof(moved), "%s.real", path);
    REQUIRE(rename(path, moved) == 0 && symlink(moved, path) == 0);
    CHECK_RES(get_with(r, "k", &m), OMC_ERR_SHM_CHANGED);        /* O_NOFOLLOW */
    REQUIRE(unlink(path) == 0 && rename(moved, path) == 0);
    if (geteuid() == 0) {       /* root can give the file away: a segment of another uid is refused */
        REQUIRE(chown(path, 4242, 4242) == 0);
        CHECK_RES(get_with(r, "k", &m), OMC_ERR_SHM_CHANGED);
        REQUIRE(chown(path, 0, 0) == 0);
    }
    CHECK_OK(get_with(r, "k", &m));
    omc_meta_free(&m);
    omc_conn_destroy(s);
    omc_conn_destroy(r);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
}

/* A 4 MiB tmpfs, mounted in a private mount namespace of a child process (needs root; said so
   and skipped otherwise). A pool reserved whole (reserve_all) that does not fit fails at create
   with SHM_FULL, leaving no file; a growing pool of the same size is created (it reserves a
   little), carries the payloads that fit, right up to the tmpfs's last bytes, and refuses one that
   does not with SHM_FULL and an ERROR naming the directory, its size and the fix - and works
   again for the next payload that fits. */
static char full_log[1024];
static void full_logger(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level == OMC_LOG_ERROR) snprintf(full_log, sizeof(full_log), "%s", message);
}
OMC_TEST(shm_full_tmpfs_fails_at_create_or_at_the_put_that_does_not_fit) {
    pid_t pid;
    int status;
    if (geteuid() != 0) { printf("SKIP shm_full_tmpfs_fails_at_create_or_at_the_put_that_does_not_fit: needs root to mount a small tmpfs\n"); return; }
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        char dir[64], ch[32];
        omc_conn* c = NULL;
        omc_shm_desc d;
        int fails = 0;
        snprintf(dir, sizeof(dir), "/tmp/omc-full-%ld", (long)getpid());
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mkdir(dir, 0700) != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=4m") != 0) _exit(77);
        unique_channel(ch, sizeof(ch));
        memset(&d, 0, sizeof(d));
        d.shm_dir = dir;
        d.channel = ch;
        d.max_entries = 64;                     /* control area: 64 x 512 bytes */
        d.pool_size = 8u << 20;
        d.hooks.log_fn = full_logger;
        d.reserve_all = 1;
        if (omc_shm_create(&d, &c) != OMC_ERR_SHM_FULL || c) fails |= 1;
        if (count_segments(dir, NULL) != 0) fails |= 2;
        d.reserve_all = 0;                      /* the default: grow on demand */
        if (omc_shm_create(&d, &c) != OMC_OK) fails |= 4;
        else {
            omc_conn* r = make_shm_in(dir, ch, OMC_ROLE_RECEIVER, 0);
            omc_buffer b;
            if (!r || put_pattern(c, "fits", 3u << 20, 1, 1, NULL) != OMC_OK ||
                omc_conn_get(r, "a", "b", "fits", NULL, 0, omc_deadline_after_ms(1000), &b) != OMC_OK ||
                !omc_test_verify(b.data, b.size, 1) || omc_buffer_release(&b) != OMC_OK) fails |= 8;
            full_log[0] = 0;
            if (put_pattern(c, "too-big", 6u << 20, 2, 1, NULL) != OMC_ERR_SHM_FULL) fails |= 16;
            if (!strstr(full_log, dir) || !strstr(full_log, "4 MiB") || !strstr(full_log, "--shm-size")) fails |= 32;
            if (fails & 32) fprintf(stderr, "  log: %s\n", full_log);
            if (put_pattern(c, "fits-again", 1u << 20, 3, 1, NULL) != OMC_OK ||
                omc_conn_get(r, "a", "b", "fits-again", NULL, 0, omc_deadline_after_ms(1000), &b) != OMC_OK ||
                !omc_test_verify(b.data, b.size, 3) || omc_buffer_release(&b) != OMC_OK) fails |= 64;
            omc_conn_destroy(r);
            omc_conn_destroy(c);
        }
        if (count_segments(dir, NULL) != 0) fails |= 128;
        umount(dir);
        rmdir(dir);
        _exit(fails);
    }
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) { printf("SKIP shm_full_tmpfs_fails_at_create_or_at_the_put_that_does_not_fit: cannot mount a tmpfs here\n"); return; }
    CHECK_EQ(WEXITSTATUS(status), 0);
}

/* What a segment holds of its tmpfs (allocated blocks, not its size). */
static uint64_t segment_bytes(omc_conn* c) {
    char path[OMC_SHM_PATH_MAX];
    struct stat st;
    if (omc_shm_segment_path(c, path, sizeof(path)) != OMC_OK || stat(path, &st) != 0) return UINT64_MAX;
    return (uint64_t)st.st_blocks * 512u;
}

/* Sweep until the segment holds at most `limit` bytes, or 10 s pass. */
static uint64_t sweep_until_at_most(omc_conn* c, uint64_t limit) {
    omc_time_ns end = omc_now_ns() + 10000000000LL;
    uint64_t held = segment_bytes(c);
    while (held > limit && omc_now_ns() < end) {
        struct timespec ts = { 0, 20000000 };
        nanosleep(&ts, NULL);
        omc_conn_sweep(c);
        held = segment_bytes(c);
    }
    return held;
}

/* A growing pool (the default): an idle edge holds a few MiB of /dev/shm whatever its pool_size;
   a put grows it, a view of a grown range stays valid while held (no shrink under it, however
   long it is idle), and once nothing is in use a sweep gives the growth back; the next put grows
   it again, data intact every time. */
OMC_TEST(shm_pool_grows_on_demand_and_gives_it_back_when_idle) {
    char ch[32];
    omc_conn *s, *r;
    omc_buffer b;
    omc_time_ns t0;
    int round;
    unique_channel(ch, sizeof(ch));
    s = make_priv(ch, OMC_ROLE_SENDER, 512u << 20);
    r = make_priv(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    CHECK(segment_bytes(s) <= (8u << 20));
    for (round = 0; round < 2; round++) {
        CHECK_OK(put_pattern(s, "big", 40u << 20, 7 + round, 1, NULL));
        CHECK(segment_bytes(s) >= (40u << 20));
        CHECK_OK(omc_conn_get(r, "a", "b", "big", NULL, 0, omc_deadline_after_ms(5000), &b));
        /* idle, but a view is held: nothing is given back */
        t0 = omc_now_ns();
        while (omc_now_ns() - t0 < 3 * (omc_time_ns)OMNICONN_SHM_IDLE_MS * 1000000LL) {
            struct timespec ts = { 0, 20000000 };
            nanosleep(&ts, NULL);
            omc_conn_sweep(s);
        }
        CHECK(segment_bytes(s) >= (40u << 20));
        CHECK(b.size == (40u << 20) && omc_test_verify(b.data, b.size, 7 + round));
        CHECK_OK(omc_buffer_release(&b));
        CHECK(sweep_until_at_most(s, 8u << 20) <= (8u << 20));
    }
    /* small payloads stay in the first reservation */
    CHECK_OK(put_pattern(s, "small", 100000, 9, 1, NULL));
    CHECK(segment_bytes(s) <= (8u << 20));
    CHECK_OK(omc_conn_get(r, "a", "b", "small", NULL, 0, omc_deadline_after_ms(5000), &b));
    CHECK(omc_test_verify(b.data, b.size, 9));
    CHECK_OK(omc_buffer_release(&b));
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
}

/* A fresh growing pool's first pass: the part of a put that falls into new growth is written into
   the file (pwrite), the part below the old reservation through the mapping. Payloads that lie
   inside the first reservation, straddle its end, or lie wholly in new growth, of odd sizes, all
   held at once (so their ranges differ), arrive byte for byte in a receiver's own mapping. */
OMC_TEST(shm_first_pass_of_a_growing_pool_arrives_byte_for_byte) {
    static const uint64_t sizes[] = { 1, (1u << 20) + 13, (3u << 20) + 7, (9u << 20) + 4095, 4096, (5u << 20) + 1 };
    char ch[32], key[16];
    omc_conn *s, *r;
    omc_buffer b[6];
    unsigned i;
    unique_channel(ch, sizeof(ch));
    s = make_priv(ch, OMC_ROLE_SENDER, 64u << 20);
    r = make_priv(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    for (i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "first%u", i);
        CHECK_OK(put_pattern(s, key, sizes[i], 40 + i, 1, NULL));
        CHECK_OK(omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(5000), &b[i]));
    }
    CHECK(segment_bytes(s) >= (18u << 20));
    for (i = 0; i < 6; i++) {
        CHECK(b[i].size == sizes[i] && omc_test_verify(b[i].data, b[i].size, 40 + i));
        CHECK_OK(omc_buffer_release(&b[i]));
    }
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
}

/* Minor page faults of a put into the range that the first put grew the pool for (the pool is
   sized so that both must use the same range). */
static long second_put_faults(const char* ch, int no_prefault) {
    omc_shm_desc d;
    omc_conn* s = NULL;
    struct rusage ru0, ru1;
    const uint64_t size = 8u << 20;
    void* data = malloc(size);
    omc_payload p;
    long faults = -1;
    memset(&d, 0, sizeof(d));
    d.shm_dir = priv_dir;
    d.channel = ch;
    d.role = OMC_ROLE_SENDER;
    d.pool_size = size + (512u << 10);
    d.no_prefault = no_prefault;
    memset(data, 7, size);          /* the source's own faults happen here, not in the puts */
    memset(&p, 0, sizeof(p));
    p.data = data;
    p.size = size;
    if (omc_shm_create(&d, &s) == OMC_OK) {
        if (omc_conn_put(s, "a", "b", "one", &p, NULL) == OMC_OK && omc_conn_cleanup(s, "a", "b", "one") == OMC_OK) {
            getrusage(RUSAGE_SELF, &ru0);
            if (omc_conn_put(s, "a", "b", "two", &p, NULL) == OMC_OK) {
                getrusage(RUSAGE_SELF, &ru1);
                faults = ru1.ru_minflt - ru0.ru_minflt;
            }
        }
        omc_conn_destroy(s);
    }
    free(data);
    return faults;
}

/* The pages a put's pwrite filled while the pool grew are mapped in the owner at once (writable,
   by fault-around): the next put into that range takes no page fault for them, where a pool
   with no_prefault takes one per 4 KiB page (2048 for 8 MiB). Compared as a difference: a
   sanitizer's shadow memory adds faults of its own to both. */
OMC_TEST(shm_grown_range_is_mapped_for_the_next_put) {
    char ch[32];
    long with, without;
    unique_channel(ch, sizeof(ch));
    with = second_put_faults(ch, 0);
    without = second_put_faults(ch, 1);
    CHECK(with >= 0 && without - with >= 1500);
    if (with < 0 || without - with < 1500) fprintf(stderr, "  second 8 MiB put: %ld faults prefaulted, %ld not\n", with, without);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
}

/* A put that runs out of tmpfs while it grows the pool (a 4 MiB tmpfs in a private mount
   namespace, as above; needs root): its pwrite stops with ENOSPC part-way, the put fails with
   OMC_ERR_SHM_FULL and an ERROR naming the directory - no SIGBUS - and every page the failed
   growth took is given back (the tmpfs's free space and the segment's blocks are what they were
   before). Puts that fit still work, every byte checked, before and after. */
static uint64_t dir_free(const char* dir) {
    struct statvfs vs;
    return statvfs(dir, &vs) == 0 ? (uint64_t)vs.f_bavail * vs.f_frsize : 0;
}
OMC_TEST(shm_full_tmpfs_while_growing_gives_back_what_the_failed_put_took) {
    pid_t pid;
    int status;
    if (geteuid() != 0) { printf("SKIP shm_full_tmpfs_while_growing_gives_back_what_the_failed_put_took: needs root to mount a small tmpfs\n"); return; }
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        char dir[64], ch[32];
        omc_conn *c = NULL, *r;
        omc_shm_desc d;
        omc_buffer b, held;
        uint64_t free0, held0;
        int fails = 0;
        snprintf(dir, sizeof(dir), "/tmp/omc-grow-%ld", (long)getpid());
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mkdir(dir, 0700) != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=4m") != 0) _exit(77);
        unique_channel(ch, sizeof(ch));
        memset(&d, 0, sizeof(d));
        d.shm_dir = dir;
        d.channel = ch;
        d.max_entries = 64;
        d.pool_size = 16u << 20;
        d.hooks.log_fn = full_logger;
        memset(&held, 0, sizeof(held));
        if (omc_shm_create(&d, &c) != OMC_OK) _exit(1);
        r = make_shm_in(dir, ch, OMC_ROLE_RECEIVER, 0);
        /* "one" is held throughout: its MiB stays taken */
        if (!r || put_pattern(c, "one", (1u << 20) + 5, 11, 1, NULL) != OMC_OK ||
            omc_conn_get(r, "a", "b", "one", NULL, 0, omc_deadline_after_ms(2000), &held) != OMC_OK ||
            !omc_test_verify(held.data, held.size, 11)) fails |= 2;
        free0 = dir_free(dir);
        held0 = segment_bytes(c);
        full_log[0] = 0;
        /* more than the tmpfs has left, and most of it in new growth: the pwrite fills what fits */
        if (put_pattern(c, "too-big", (3u << 20) + (600u << 10), 12, 1, NULL) != OMC_ERR_SHM_FULL) fails |= 4;
        if (!strstr(full_log, dir) || !strstr(full_log, "does not fit")) fails |= 8;
        if (dir_free(dir) != free0 || segment_bytes(c) != held0) fails |= 16;
        if (fails & 16) fprintf(stderr, "  free %llu -> %llu, segment %llu -> %llu\n", (unsigned long long)free0,
                                (unsigned long long)dir_free(dir), (unsigned long long)held0, (unsigned long long)segment_bytes(c));
        if (omc_conn_get(r, "a", "b", "too-big", NULL, 0, omc_deadline_after_ms(20), &b) != OMC_ERR_TIMEOUT) fails |= 32;
        if (put_pattern(c, "fits", (1u << 20) + 3, 13, 1, NULL) != OMC_OK ||
            omc_conn_get(r, "a", "b", "fits", NULL, 0, omc_deadline_after_ms(2000), &b) != OMC_OK ||
            !omc_test_verify(b.data, b.size, 13) || omc_buffer_release(&b) != OMC_OK) fails |= 64;
        if (!omc_test_verify(held.data, held.size, 11) || omc_buffer_release(&held) != OMC_OK) fails |= 2;
        omc_conn_destroy(r);
        omc_conn_destroy(c);
        if (count_segments(dir, NULL) != 0) fails |= 128;
        umount(dir);
        rmdir(dir);
        _exit(fails);
    }
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));        /* not killed: no SIGBUS */
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) { printf("SKIP shm_full_tmpfs_while_growing_gives_back_what_the_failed_put_took: cannot mount a tmpfs here\n"); return; }
    CHECK_EQ(WEXITSTATUS(status), 0);
}

/* A segment of another layout version (here: the previous one, written over a live segment's
   header) is refused by a receiver with a WARN that names both versions and says what to do; a
   get with its metadata fails with OMC_ERR_VERSION, a get by key does not find the key there. */
static char version_log[1024];
static void version_logger(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level == OMC_LOG_WARN && strstr(message, "layout version")) snprintf(version_log, sizeof(version_log), "%s", message);
}
OMC_TEST(shm_segment_of_another_layout_version_is_refused_naming_both) {
    char ch[32], path[OMC_SHM_PATH_MAX], want[64];
    omc_conn *s, *r = NULL;
    omc_shm_desc d;
    omc_meta m;
    omc_buffer b;
    uint16_t old_version, version;
    int fd;
    unique_channel(ch, sizeof(ch));
    s = make_priv(ch, OMC_ROLE_SENDER, 1u << 20);
    REQUIRE(s);
    CHECK_OK(put_pattern(s, "k", 100000, 5, 1, &m));
    CHECK_OK(omc_shm_segment_path(s, path, sizeof(path)));
    fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(pread(fd, &version, 2, 4) == 2);
    old_version = (uint16_t)(version - 1);
    REQUIRE(pwrite(fd, &old_version, 2, 4) == 2);
    memset(&d, 0, sizeof(d));
    d.shm_dir = priv_dir;
    d.channel = ch;
    d.role = OMC_ROLE_RECEIVER;
    d.hooks.log_fn = version_logger;
    version_log[0] = 0;
    REQUIRE(omc_shm_create(&d, &r) == OMC_OK);
    CHECK_RES(omc_conn_get(r, "a", "b", "k", m.data, m.size, omc_deadline_after_ms(1000), &b), OMC_ERR_VERSION);
    snprintf(want, sizeof(want), "layout version %u; this release reads version %u", (unsigned)old_version, (unsigned)version);
    CHECK(strstr(version_log, want) != NULL && strstr(version_log, "same release on both sides") != NULL);
    if (!strstr(version_log, want)) fprintf(stderr, "  log: %s\n", version_log);
    CHECK_RES(omc_conn_get(r, "a", "b", "k", NULL, 0, omc_deadline_after_ms(50), &b), OMC_ERR_TIMEOUT);
    REQUIRE(pwrite(fd, &version, 2, 4) == 2);
    close(fd);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(priv_dir, ch), 0);
}

/* Another process of our uid scribbles over the control area (entries and key index): nothing
   may hang (every probe is bounded) or crash; calls return codes; close still cleans up. */
OMC_TEST(shm_scribbled_control_area_is_survived) {
    char ch[32], path[OMC_SHM_PATH_MAX];
    omc_conn *s, *r;
    omc_buffer b;
    struct stat st;
    uint8_t* map;
    uint64_t idx_off, data_off, i;
    int fd, round;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "before", 5000, 1, 1, NULL));
    CHECK_OK(omc_shm_segment_path(s, path, sizeof(path)));
    fd = open(path, O_RDWR);
    REQUIRE(fd >= 0 && fstat(fd, &st) == 0);
    map = (uint8_t*)mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(map != MAP_FAILED);
    memcpy(&idx_off, map + 32, 8);
    memcpy(&data_off, map + 48, 8);
    /* 1: every bucket non-empty and pointing at entry 1: probes must stop, put must rebuild */
    for (i = idx_off; i + 4 <= data_off; i += 4) { uint32_t v = 2; memcpy(map + i, &v, 4); }
    CHECK_RES(omc_conn_get(r, "a", "b", "nothere", NULL, 0, omc_deadline_after_ms(50), &b), OMC_ERR_TIMEOUT);
    CHECK_OK(put_pattern(s, "after", 5000, 2, 1, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "after", NULL, 0, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == 5000 && omc_test_verify(b.data, b.size, 2));
    CHECK_OK(omc_buffer_release(&b));
    /* 2: random bytes over entries and index, a few times, with traffic in between */
    srand(7);
    for (round = 0; round < 5; round++) {
        char key[16];
        omc_result res;
        for (i = 4096; i < data_off; i++) map[i] = (uint8_t)rand();
        snprintf(key, sizeof(key), "r%d", round);
        res = put_pattern(s, key, 70000, 3, 2, NULL);
        CHECK(res == OMC_OK || res == OMC_ERR_POOL_FULL || res == OMC_ERR_EXISTS);
        res = omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(50), &b);
        if (res == OMC_OK) { CHECK(b.size == 70000); omc_buffer_release(&b); }
        omc_conn_sweep(s);
        omc_conn_sweep(r);
    }
    munmap(map, (size_t)st.st_size);
    close(fd);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
}

/* ---- spinning, wake-up classes, puts without metadata, prefault ----------------------------- */

/* A getter waits in a child process (desc spin_ns, or $OMNICONN_SHM_SPIN_US when spin_ns is 0);
   the parent puts `others` keys of other wake-up classes, 1 ms apart, then `key`. The child
   reports the get's result, its voluntary context switches (each sleep that ends is one) and
   the time from the last put to its return. */


static int same_class(const char* key, const char* other) {
    char q1[OMC_KEY_MAX], q2[OMC_KEY_MAX];
    uint32_t l1, l2;
    omc__shm_key k1, k2;
    if (omc_qualify_key("a", "b", key, q1, &l1) != OMC_OK || omc_qualify_key("a", "b", other, q2, &l2) != OMC_OK) return 1;
    omc__shm_key_make(&k1, q1, l1);
    omc__shm_key_make(&k2, q2, l2);
    return omc__shm_wake_bit(k1.hash) == omc__shm_wake_bit(k2.hash);
}

/* Wait (up to 10 s) until process pid is asleep (state S in /proc): an event, not a delay. */
static void wait_until_asleep(pid_t pid) {
    char path[64], text[256];
    int i;
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    for (i = 0; i < 10000; i++) {
        FILE* f = fopen(path, "r");
        size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
        const char* close_paren;
        if (f) fclose(f);
        text[n] = '\0';
        close_paren = strrchr(text, ')');
        if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'S') return;
        usleep(1000);
    }
}

/* sleeps: the getter is expected to sleep (no spin), so the parent waits until it does before it
   puts; a spinning getter is only waited for until it starts its get. */
static wait_report wait_in_child(const char* ch, omc_conn* s, const char* key, int64_t spin_ns, int others, int sleeps) {
    wait_report rep = { -1, -1, -1, -1, -1, -1 };
    int fds[2], go[2], base[2], status, i, sent = 0;
    char c = 0;
    pid_t pid;
    if (pipe(fds) != 0) return rep;
    if (pipe(go) != 0) { close(fds[0]); close(fds[1]); return rep; }
    if (pipe(base) != 0) { close(fds[0]); close(fds[1]); close(go[0]); close(go[1]); return rep; }
    pid = fork();
    if (pid < 0) return rep;
    if (pid == 0) {
        omc_shm_desc d;
        omc_conn* r = NULL;
        omc_buffer b;
        struct rusage ru0, ru1;
        memset(&d, 0, sizeof(d));
        d.channel = ch;
        d.role = OMC_ROLE_RECEIVER;
        d.spin_ns = spin_ns;
        if (omc_shm_create(&d, &r) == OMC_OK) {
            /* map the segment first (a scan, an mmap): the wait below is then only the wait */
            omc_conn_get(r, "a", "b", "not-there", NULL, 0, omc_deadline_after_ms(1), &b);
            if (write(go[1], &c, 1) != 1) _exit(1);         /* the get starts now */
            getrusage(SHM_RUSAGE_WAITER, &ru0);
            rep.waited_ns = omc_now_ns();
            rep.res = omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(5000), &b);
            rep.woke_ns = omc_now_ns();
            rep.waited_ns = rep.woke_ns - rep.waited_ns;
            getrusage(SHM_RUSAGE_WAITER, &ru1);
            rep.nvcsw = ru1.ru_nvcsw - ru0.ru_nvcsw;
            rep.cpu_us = (ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1000000LL +
                         (ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
            if (rep.res == OMC_OK) omc_buffer_release(&b);
            omc_conn_destroy(r);
        }
        if (write(go[1], &c, 1) != 1) _exit(1);             /* now asleep on the pipe */
        if (read(base[0], &c, 1) == 1) rep.base_ns = omc_now_ns();
        omc_test_write_all(fds[1], &rep, sizeof(rep));
        _exit(0);
    }
    if (read(go[0], &c, 1) != 1) { waitpid(pid, &status, 0); return rep; }
    if (sleeps) {
        wait_until_asleep(pid);
        usleep(200000);         /* a getter that spun instead would burn this much CPU (checked by some tests) */
    }
    for (i = 0; sent < others && i < 100000; i++) {
        char other[32];
        snprintf(other, sizeof(other), "other%d", i);
        if (same_class(key, other)) continue;
        if (put_pattern(s, other, 64, 1, 1, NULL) != OMC_OK) break;
        sent++;
        usleep(1000);
    }
    {
        omc_time_ns t_put = omc_now_ns(), t_base = 0;
        int put_ok = put_pattern(s, key, 100, 2, 1, NULL) == OMC_OK;
        if (put_ok && read(go[0], &c, 1) == 1) {    /* the get is over: time a pipe's wake-up */
            wait_until_asleep(pid);
            t_base = omc_now_ns();
        }
        if (write(base[1], &c, 1) != 1) t_base = 0;
        if (!put_ok) rep.res = -2;                  /* the child times out */
        else if (omc_test_read_all(fds[0], &rep, sizeof(rep)) != 0) rep.res = -3;
        else {
            rep.woke_ns -= t_put;
            rep.base_ns = (t_base && rep.base_ns > 0) ? rep.base_ns - t_base : -1;
        }
    }
    waitpid(pid, &status, 0);
    close(fds[0]);
    close(fds[1]);
    close(go[0]);
    close(go[1]);
    close(base[0]);
    close(base[1]);
    return rep;
}

/* Puts of keys in other wake-up classes do not wake a sleeping getter; its own key does, at once.
   (One futex word per segment for every getter used to wake all of them on every put.) */
OMC_TEST(shm_a_put_wakes_only_getters_of_its_key_class) {
    char ch[32];
    omc_conn* s;
    wait_report rep;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 4u << 20);
    REQUIRE(s);
    rep = wait_in_child(ch, s, "mine", -1, 150, 1);
    CHECK_EQ(rep.res, OMC_OK);
    CHECK(rep.woke_ns >= 0 && rep.woke_ns < wake_bound_ns(&rep));  /* its own put woke it, not a 50 ms slice */
    /* asleep through 150 puts of other keys: one wake per 50 ms slice (twice that, for slack) and
       the final one, not one per put - counted against how long the wait really took, which on a
       busy host is much more than the 150 ms of an idle one */
    CHECK(rep.nvcsw >= 1 && rep.nvcsw < 10 + 2 * (rep.waited_ns / 50000000LL) && rep.nvcsw < 150);
    if (!(rep.nvcsw >= 1 && rep.nvcsw < 10 + 2 * (rep.waited_ns / 50000000LL)))
        fprintf(stderr, "  %lld voluntary switches over 150 other puts in %.0f ms\n", (long long)rep.nvcsw, (double)rep.waited_ns / 1e6);
    omc_conn_destroy(s);
}

/* OMC_SHM_SPIN_FOREVER: the getter never sleeps (no voluntary context switch while it waits,
   through several 50 ms slices) and still sees the put at once. */
OMC_TEST(shm_spin_forever_getter_never_sleeps) {
    char ch[32];
    omc_conn* s;
    wait_report rep;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 4u << 20);
    REQUIRE(s);
    rep = wait_in_child(ch, s, "spun", OMC_SHM_SPIN_FOREVER, 120, 0);
    CHECK_EQ(rep.res, OMC_OK);
    /* No bound on how long it took: a getter that never blocks sees the put on its next run, and
       when that is depends only on how many other programs want the CPU (a busy host preempts a
       spinner for tens of milliseconds). That it never blocked is what shows it waited no slice. */
    CHECK(rep.woke_ns >= 0);
    CHECK(rep.nvcsw >= 0 && rep.nvcsw <= 3);     /* a spinning getter makes no blocking call */
    if (rep.nvcsw > 3) fprintf(stderr, "  %lld voluntary switches while spinning\n", (long long)rep.nvcsw);
    omc_conn_destroy(s);
}

/* $OMNICONN_SHM_SPIN_US sets the spin of a desc that leaves spin_ns 0: -1 never sleeps, 0 never
   spins; a value that is not a number is reported once, by name, and the default applies. */
OMC_TEST(shm_spin_env_var_sets_the_default_spin) {
    char ch[32];
    omc_conn *s, *r = NULL;
    omc_shm_desc d;
    wait_report rep;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 4u << 20);
    REQUIRE(s);
    setenv("OMNICONN_SHM_SPIN_US", "-1", 1);
    rep = wait_in_child(ch, s, "env-forever", 0, 120, 0);
    CHECK_EQ(rep.res, OMC_OK);
    CHECK(rep.nvcsw >= 0 && rep.nvcsw <= 3);
    setenv("OMNICONN_SHM_SPIN_US", "0", 1);
    rep = wait_in_child(ch, s, "env-nospin", 0, 0, 1);
    CHECK_EQ(rep.res, OMC_OK);
    CHECK(rep.nvcsw >= 1);                      /* it slept: woken by the futex */
    setenv("OMNICONN_SHM_SPIN_US", "fast", 1);
    memset(&d, 0, sizeof(d));
    d.channel = ch;
    d.role = OMC_ROLE_RECEIVER;
    d.hooks.log_fn = count_warnings;
    warnings = 0;
    CHECK_OK(omc_shm_create(&d, &r));
    CHECK_EQ(warnings, 1);
    unsetenv("OMNICONN_SHM_SPIN_US");
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* A put whose caller wants no metadata builds none: a payload below the inline threshold then
   lives only in the pool (a metadata-less get takes a view of it, pinning its range until the
   release), while a put with metadata still carries it inline. */
OMC_TEST(shm_put_without_metadata_skips_the_inline_copy) {
    char ch[32];
    omc_conn *s, *r;
    omc_buffer b;
    omc_meta m;
    omc_meta_info mi;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "bare", 1000, 5, 1, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "bare", NULL, 0, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == 1000 && omc_test_verify(b.data, b.size, 5));
    CHECK(pool_in_use(s) > 0);
    CHECK_OK(omc_buffer_release(&b));
    CHECK_OK(put_pattern(s, "dressed", 1000, 6, 1, &m));
    CHECK_OK(omc_meta_parse(m.data, m.size, &mi));
    CHECK((mi.flags & OMC_META_FLAG_INLINE) != 0);
    CHECK_OK(omc_conn_get(r, "a", "b", "dressed", m.data, m.size, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == 1000 && omc_test_verify(b.data, b.size, 6));
    CHECK_OK(omc_buffer_release(&b));
    omc_meta_free(&m);
    omc_conn_sweep(s);
    CHECK_EQ(pool_in_use(s), 0);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* Minor page faults of one 1 MiB put into a fresh pool. */
static long first_put_faults(const char* ch, int no_prefault) {
    omc_shm_desc d;
    omc_conn* s = NULL;
    struct rusage ru0, ru1;
    void* data = malloc(1u << 20);
    omc_payload p;
    long faults = -1;
    memset(&d, 0, sizeof(d));
    d.channel = ch;
    d.role = OMC_ROLE_SENDER;
    d.pool_size = 4u << 20;
    d.no_prefault = no_prefault;
    memset(data, 7, 1u << 20);      /* the source's own faults happen here, not in the put */
    memset(&p, 0, sizeof(p));
    p.data = data;
    p.size = 1u << 20;
    if (omc_shm_create(&d, &s) == OMC_OK) {
        getrusage(RUSAGE_SELF, &ru0);
        if (omc_conn_put(s, "a", "b", "first", &p, NULL) == OMC_OK) {
            getrusage(RUSAGE_SELF, &ru1);
            faults = ru1.ru_minflt - ru0.ru_minflt;
        }
        omc_conn_destroy(s);
    }
    free(data);
    return faults;
}

/* The pool is mapped and faulted in at create: the first put into a fresh pool takes no page
   fault of the pool (with no_prefault it takes one per 4 KiB page it writes: 256 more). Compared
   as a difference: a sanitizer's shadow memory adds faults of its own to both. */
OMC_TEST(shm_pool_is_prefaulted_at_create_unless_opted_out) {
    char ch[32];
    long with, without;
    unique_channel(ch, sizeof(ch));
    with = first_put_faults(ch, 0);
    without = first_put_faults(ch, 1);
    CHECK(with >= 0 && without - with >= 200);
    if (with < 0 || without - with < 200) fprintf(stderr, "  first 1 MiB put: %ld faults prefaulted, %ld not\n", with, without);
}

/* A put from OMNICONN_SHM_STREAM_MIN on copies with streaming stores: every byte arrives, the
   tail after the last whole 64-byte line and a source that is not aligned included. */
OMC_TEST(shm_large_put_copies_every_byte) {
    char ch[32];
    omc_conn *s, *r;
    omc_buffer b;
    omc_payload p;
    uint64_t size = OMNICONN_SHM_STREAM_MIN + 4096 + 13;
    uint8_t* raw = (uint8_t*)malloc((size_t)size + 1);
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 2 * size);
    r = make_shm(ch, OMC_ROLE_RECEIVER, 0);
    REQUIRE(s && r && raw);
    omc_test_fill(raw + 1, size, 9);          /* raw + 1: an odd source address */
    memset(&p, 0, sizeof(p));
    p.data = raw + 1;
    p.size = size;
    CHECK_OK(omc_conn_put(s, "a", "b", "big", &p, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "big", NULL, 0, omc_deadline_after_ms(2000), &b));
    CHECK(b.size == size && omc_test_verify(b.data, b.size, 9));
    CHECK_OK(omc_buffer_release(&b));
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    free(raw);
}

/* ---- reader ids held by a squatter ----------------------------------------------------------- */

/* The squatter: this binary again (--squat PATH READY_FD HOLD_FD SPARE), not a fork of a process
   that may run sanitizer threads. It write-locks every reader-id byte of the segment but SPARE
   (0: all of them), says so on READY_FD and holds the locks until HOLD_FD reaches end of file. */
static void squat_main(int argc, char** argv) {
    struct flock fl;
    uint32_t spare;
    int fd, ready, hold;
    char c = 1;
    if (argc < 6 || strcmp(argv[1], "--squat") != 0) return;
    ready = atoi(argv[3]);
    hold = atoi(argv[4]);
    spare = (uint32_t)strtoul(argv[5], NULL, 10);
    fd = open(argv[2], O_RDWR);
    if (fd < 0) _exit(2);
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 1;
    fl.l_len = (off_t)((spare ? spare : (1u << 24)) - 1u);
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0) _exit(3);                       /* HOSTILE: ids 1 .. spare-1 */
    if (spare) {
        fl.l_start = (off_t)spare + 1;
        fl.l_len = (off_t)((1u << 24) - spare - 1u);
        if (fcntl(fd, F_OFD_SETLK, &fl) != 0) _exit(3);                   /* HOSTILE: ids spare+1 .. 2^24-1 */
    }
    if (write(ready, &c, 1) != 1) _exit(4);
    while (read(hold, &c, 1) > 0) {}
    _exit(0);
}

/* Start a squatter on path; *hold is the pipe end whose close lets it go. */
static pid_t squat_start(const char* path, uint32_t spare, int* hold) {
    int ready[2], h[2];
    char a[16], b[16], sp[16], c = 0;
    pid_t pid;
    if (pipe(ready) != 0) return -1;
    if (pipe(h) != 0) { close(ready[0]); close(ready[1]); return -1; }
    snprintf(a, sizeof(a), "%d", ready[1]);
    snprintf(b, sizeof(b), "%d", h[0]);
    snprintf(sp, sizeof(sp), "%u", spare);
    pid = fork();
    if (pid == 0) {
        close(ready[0]);
        close(h[1]);
        execl("/proc/self/exe", "test_shm", "--squat", path, a, b, sp, (char*)NULL);
        _exit(127);
    }
    close(ready[1]);
    close(h[0]);
    if (pid < 0 || read(ready[0], &c, 1) != 1) {
        close(ready[0]);
        close(h[1]);
        if (pid > 0) waitpid(pid, NULL, 0);
        return -1;
    }
    close(ready[0]);
    *hold = h[1];
    return pid;
}

static char squat_said[1024];
static void squat_logger(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level <= OMC_LOG_WARN && strstr(msg, "reader ids")) snprintf(squat_said, sizeof(squat_said), "%s", msg);
}

static omc_conn* make_squat_receiver(const char* ch) {
    omc_shm_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.channel = ch;
    d.role = OMC_ROLE_RECEIVER;
    d.hooks.log_fn = squat_logger;
    return omc_shm_create(&d, &c) == OMC_OK ? c : NULL;
}

/* Every reader id locked by another process of our uid: the get is refused with OMC_ERR_BUSY and
   a line that says why, instead of reading under an id nobody ever reclaims; once the squatter
   is gone the same get succeeds. */
OMC_TEST(shm_reader_ids_all_held_by_a_squatter_refuse_with_busy_and_a_log_line) {
    char ch[32], path[OMC_SHM_PATH_MAX];
    omc_conn *s, *r;
    omc_meta m = {0};
    omc_buffer b;
    int hold = -1, status = 0;
    pid_t pid;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_squat_receiver(ch);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "k", 100000, 21, 1, &m));
    REQUIRE(omc_shm_segment_path(s, path, sizeof(path)) == OMC_OK);
    pid = squat_start(path, 0, &hold);
    REQUIRE(pid > 0);
    squat_said[0] = '\0';
    CHECK_EQ(omc_conn_get(r, "a", "b", "k", m.data, m.size, omc_deadline_after_ms(1000), &b), OMC_ERR_BUSY);
    CHECK(strstr(squat_said, "refused") != NULL && strstr(squat_said, "lslocks") != NULL);
    {   /* a get by key (another receiver: the line is said once per 10 s per connector) passes
           the segment by and says why; it does not read under an id nobody reclaims */
        omc_conn* r2 = make_squat_receiver(ch);
        REQUIRE(r2 != NULL);
        squat_said[0] = '\0';
        CHECK_EQ(omc_conn_get(r2, "a", "b", "k", NULL, 0, omc_deadline_after_ms(300), &b), OMC_ERR_TIMEOUT);
        CHECK(strstr(squat_said, "refused") != NULL);
        omc_conn_destroy(r2);
    }
    close(hold);
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_OK(omc_conn_get(r, "a", "b", "k", m.data, m.size, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 21));
    CHECK_OK(omc_buffer_release(&b));
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* A squatter that leaves one id free: the reader finds that one (its lock byte is held while
   the reader maps the segment, so its views can be reclaimed if it dies). */
OMC_TEST(shm_reader_takes_the_one_id_a_squatter_left_free) {
    char ch[32], path[OMC_SHM_PATH_MAX];
    const uint32_t spare = 9876543u;
    omc_conn *s, *r;
    omc_meta m = {0};
    omc_buffer b;
    struct flock fl;
    int hold = -1, fd;
    pid_t pid;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    r = make_squat_receiver(ch);
    REQUIRE(s && r);
    CHECK_OK(put_pattern(s, "k", 100000, 22, 1, &m));
    REQUIRE(omc_shm_segment_path(s, path, sizeof(path)) == OMC_OK);
    pid = squat_start(path, spare, &hold);
    REQUIRE(pid > 0);
    squat_said[0] = '\0';
    CHECK_OK(omc_conn_get(r, "a", "b", "k", m.data, m.size, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 22));
    CHECK_EQ(squat_said[0], '\0');
    fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)spare;
    fl.l_len = 1;
    CHECK(fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK);      /* the reader holds the spare id */
    close(fd);
    CHECK_OK(omc_buffer_release(&b));
    close(hold);
    waitpid(pid, NULL, 0);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- after fork(), and buffers that outlive their connector ----------------------------------- */

/* A child's exit code: 0 if every refused call said OMC_ERR_CLOSED, else the first step that did
   not. It destroys both connectors whatever the calls answered. */
static int forked_child_calls_and_destroys(omc_conn* s, omc_conn* r) {
    omc_buffer b;
    omc_health h;
    int bad = 0;
    if (put_pattern(s, "child", 1000, 1, 1, NULL) != OMC_ERR_CLOSED) bad = bad ? bad : 10;
    if (omc_conn_get(r, "a", "b", "m0", NULL, 0, OMC_NO_WAIT, &b) != OMC_ERR_CLOSED) bad = bad ? bad : 11;
    if (omc_conn_alloc(s, 4096, OMC_NO_WAIT, &b) != OMC_ERR_CLOSED) bad = bad ? bad : 12;
    if (omc_conn_cleanup(s, "a", "b", "m1") != OMC_ERR_CLOSED) bad = bad ? bad : 13;
    if (omc_conn_exists(r, "a", "b", "m1") != OMC_ERR_CLOSED) bad = bad ? bad : 14;
    if (omc_conn_wait_consumed(s, OMC_NO_WAIT) != OMC_ERR_CLOSED) bad = bad ? bad : 15;
    omc_conn_health(s, &h);
    if (h.state != OMC_CONN_CLOSED) bad = bad ? bad : 16;
    omc_conn_destroy(s);
    omc_conn_destroy(r);
    return bad;
}

/* A parent with entries in flight, a view and an allocated buffer out forks twice: one child
   gives back the inherited view and buffer and exits normally, the other calls (refused) and
   destroys both connectors. The parent's segment, entries, view and buffer are untouched: every
   entry is then read intact, by metadata and by key. */
OMC_TEST(shm_forked_children_leave_the_parents_segment_and_entries_alone) {
    enum { N = 6, SIZE = 300000 };
    char ch[32], key[16];
    omc_conn *s, *r;
    omc_shm_desc rd;
    omc_meta m[N];
    omc_buffer held, alloced, b;
    pid_t kid[2];
    int i, status;
    memset(m, 0, sizeof(m));
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 8u << 20);
    memset(&rd, 0, sizeof(rd));
    rd.channel = ch;
    rd.role = OMC_ROLE_RECEIVER;
    rd.hooks.log_fn = count_warnings;
    r = NULL;
    REQUIRE(s && omc_shm_create(&rd, &r) == OMC_OK);
    for (i = 0; i < N; i++) {       /* m0.. with metadata, k0.. by key */
        snprintf(key, sizeof(key), "m%d", i);
        CHECK_OK(put_pattern(s, key, SIZE, 100 + (uint64_t)i, 1, &m[i]));
        snprintf(key, sizeof(key), "k%d", i);
        CHECK_OK(put_pattern(s, key, SIZE, 200 + (uint64_t)i, 1, NULL));
    }
    CHECK_OK(put_pattern(s, "held", SIZE, 300, 1, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "held", NULL, 0, omc_deadline_after_ms(1000), &held));
    CHECK_OK(omc_conn_alloc(s, SIZE, omc_deadline_after_ms(1000), &alloced));
    omc_test_fill(alloced.data, SIZE, 301);
    warnings = 0;
    fflush(NULL);
    kid[0] = fork();
    REQUIRE(kid[0] >= 0);
    if (kid[0] == 0) {              /* gives back what it inherited, exits normally */
        omc_buffer_release(&held);
        omc_buffer_release(&alloced);
        exit(0);
    }
    kid[1] = fork();
    REQUIRE(kid[1] >= 0);
    if (kid[1] == 0) _exit(forked_child_calls_and_destroys(s, r));
    for (i = 0; i < 2; i++) {
        status = -1;
        CHECK(waitpid(kid[i], &status, 0) == kid[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_EQ(count_segments(SHM_DIR, ch), 1);                   /* not unlinked by a child */
    for (i = 0; i < 4; i++) {       /* reuse of a range a child "released" would overwrite it */
        snprintf(key, sizeof(key), "after%d", i);
        CHECK_OK(put_pattern(s, key, SIZE, 400 + (uint64_t)i, 1, NULL));
    }
    CHECK(omc_test_verify(held.data, SIZE, 300));
    CHECK(omc_test_verify(alloced.data, SIZE, 301));
    for (i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "m%d", i);
        CHECK_OK(omc_conn_get(r, "a", "b", key, m[i].data, m[i].size, omc_deadline_after_ms(1000), &b));
        CHECK(b.size == SIZE && omc_test_verify(b.data, b.size, 100 + (uint64_t)i));
        CHECK_OK(omc_buffer_release(&b));
        snprintf(key, sizeof(key), "k%d", i);
        CHECK_OK(omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(1000), &b));
        CHECK(b.size == SIZE && omc_test_verify(b.data, b.size, 200 + (uint64_t)i));
        CHECK_OK(omc_buffer_release(&b));
        omc_meta_free(&m[i]);
    }
    for (i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "after%d", i);
        CHECK_OK(omc_conn_get(r, "a", "b", key, NULL, 0, omc_deadline_after_ms(1000), &b));
        CHECK(b.size == SIZE && omc_test_verify(b.data, b.size, 400 + (uint64_t)i));
        CHECK_OK(omc_buffer_release(&b));
    }
    CHECK_OK(omc_buffer_release(&held));
    CHECK_OK(omc_conn_put(s, "a", "b", "alloced", &(omc_payload){.buffer = &alloced}, NULL));
    CHECK_OK(omc_conn_get(r, "a", "b", "alloced", NULL, 0, omc_deadline_after_ms(1000), &b));
    CHECK(b.size == SIZE && omc_test_verify(b.data, b.size, 301));
    CHECK_OK(omc_buffer_release(&b));
    CHECK_EQ(warnings, 0);          /* no view of ours was finished by someone else */
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);
}

/* A buffer from omc_conn_alloc keeps the pool mapped after destroy, until it is released. */
OMC_TEST(shm_alloc_buffer_outlives_destroy_until_released) {
    char ch[32];
    omc_conn* s;
    omc_buffer b;
    unique_channel(ch, sizeof(ch));
    s = make_shm(ch, OMC_ROLE_SENDER, 1u << 20);
    REQUIRE(s != NULL);
    CHECK_OK(omc_conn_alloc(s, 200000, omc_deadline_after_ms(1000), &b));
    omc_conn_destroy(s);
    CHECK_EQ(count_segments(SHM_DIR, ch), 0);                   /* the name goes with destroy ... */
    REQUIRE(count_mappings(ch) > 0);                            /* ... the mapping stays */
    omc_test_fill(b.data, b.size, 7);
    CHECK(omc_test_verify(b.data, b.size, 7));
    CHECK_OK(omc_buffer_release(&b));
    CHECK_EQ(count_mappings(ch), 0);                            /* the last release unmapped it */
}

int main(int argc, char** argv) {
    int status;
    ct_consumer_main(argc, argv, make_from_spec);
    squat_main(argc, argv);
    snprintf(priv_dir, sizeof(priv_dir), SHM_DIR "/omc-tests-%ld", (long)getpid());
    if (mkdir(priv_dir, 0700) != 0) { perror(priv_dir); return 1; }
    status = omc_test_main(argc, argv);
    if (rmdir(priv_dir) != 0) {             /* not empty: a test left a segment behind */
        printf("FAIL %s is not empty at exit: a segment leaked\n", priv_dir);
        return 1;
    }
    return status;
}
