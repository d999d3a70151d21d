/* The same-process connector: the full contract suite (both halves in one process, two threads)
   plus what is specific to it (roles, lifetimes of views across cleanup/close/destroy). */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omc_test.h"
#include "contract.h"
#include <signal.h>
#include <sys/wait.h>

static omc_conn* make_local(uint64_t pool, omc_role role) {
    omc_local_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.pool_size = pool;
    d.role = role;
    if (omc_local_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

OMC_TEST(local_contract) {
    omc_conn* c = make_local(64u << 20, OMC_ROLE_DEFAULT);
    REQUIRE(c);
    ct_run_all("local", c, c, NULL, getenv("CT_FILTER"));
    omc_conn_destroy(c);
}

OMC_TEST(local_roles_are_enforced) {
    omc_conn* s = make_local(1u << 20, OMC_ROLE_SENDER);
    omc_conn* r = make_local(1u << 20, OMC_ROLE_RECEIVER);
    omc_payload p;
    omc_buffer b;
    char x = 1;
    REQUIRE(s && r);
    memset(&p, 0, sizeof(p));
    p.data = &x; p.size = 1;
    CHECK_OK(omc_conn_put(s, "a", "b", "k", &p, NULL));
    CHECK_RES(omc_conn_get(s, "a", "b", "k", NULL, 0, OMC_NO_WAIT, &b), OMC_ERR_WRONG_ROLE);
    CHECK_RES(omc_conn_put(r, "a", "b", "k", &p, NULL), OMC_ERR_WRONG_ROLE);
    omc_conn_destroy(s);
    omc_conn_destroy(r);
}

OMC_TEST(local_keys_are_stage_qualified) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    omc_payload p;
    omc_buffer b;
    char x = 1, y = 2;
    char qk[OMC_KEY_MAX];
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    p.data = &x; p.size = 1;
    CHECK_OK(omc_conn_put(c, "0", "1", "req", &p, NULL));
    p.data = &y;
    CHECK_OK(omc_conn_put(c, "1", "2", "req", &p, NULL));    /* same key, other edge: no clash */
    CHECK_OK(omc_conn_get(c, "1", "2", "req", NULL, 0, OMC_NO_WAIT, &b));
    CHECK(*(char*)b.data == 2);
    omc_buffer_release(&b);
    CHECK_OK(omc_conn_get(c, "0", "1", "req", NULL, 0, OMC_NO_WAIT, &b));
    CHECK(*(char*)b.data == 1);
    omc_buffer_release(&b);
    CHECK_RES(omc_conn_put(c, "0", "1", "", &p, NULL), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_conn_put(c, "0\x1f", "1", "k", &p, NULL), OMC_ERR_INVALID_ARG);
    {
        char longkey[300];
        memset(longkey, 'k', sizeof(longkey) - 1);
        longkey[sizeof(longkey) - 1] = 0;
        CHECK_RES(omc_conn_put(c, "0", "1", longkey, &p, NULL), OMC_ERR_INVALID_ARG);
    }
    CHECK_RES(omc_qualify_key("a", "b", "c\x1f", qk, NULL), OMC_ERR_INVALID_ARG);
    omc_conn_destroy(c);
}

OMC_TEST(local_view_outlives_cleanup_close_and_destroy) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    omc_payload p;
    omc_buffer b, b2;
    char data[5000];
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    omc_test_fill(data, sizeof(data), 1);
    p.data = data; p.size = sizeof(data); p.readers = 2;
    CHECK_OK(omc_conn_put(c, "a", "b", "k", &p, NULL));
    CHECK_OK(omc_conn_get(c, "a", "b", "k", NULL, 0, OMC_NO_WAIT, &b));
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "k"));             /* no second reader any more ... */
    CHECK_RES(omc_conn_get(c, "a", "b", "k", NULL, 0, OMC_NO_WAIT, &b2), OMC_ERR_TIMEOUT);
    omc_conn_close(c);
    omc_conn_close(c);                                        /* idempotent */
    CHECK_RES(omc_conn_put(c, "a", "b", "k2", &p, NULL), OMC_ERR_CLOSED);
    {
        omc_health h;
        CHECK_OK(omc_conn_health(c, &h));
        CHECK(h.state == OMC_CONN_CLOSED);
    }
    /* ... but the first reader's view is intact even after destroy (ASan would see otherwise) */
    omc_conn_destroy(c);
    CHECK(b.size == sizeof(data) && omc_test_verify(b.data, b.size, 1));
    CHECK_OK(omc_buffer_release(&b));
}

static void* close_later(void* arg) { usleep(100000); omc_conn_close((omc_conn*)arg); return NULL; }

OMC_TEST(local_close_wakes_waiting_getter) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    pthread_t th;
    omc_buffer b;
    omc_time_ns t0;
    REQUIRE(c);
    pthread_create(&th, NULL, close_later, c);
    t0 = omc_now_ns();
    CHECK_RES(omc_conn_get(c, "a", "b", "never", NULL, 0, omc_deadline_after_ms(10000), &b), OMC_ERR_CLOSED);
    CHECK(omc_now_ns() - t0 < 5000000000LL);
    pthread_join(th, NULL);
    omc_conn_destroy(c);
}

typedef struct local_waiter { omc_conn* c; omc_result r; int returned; } local_waiter;

static void* local_wait_main(void* arg) {
    local_waiter* w = (local_waiter*)arg;
    omc_buffer b;
    w->r = omc_conn_get(w->c, "a", "b", "never", NULL, 0, omc_deadline_after_ms(60000), &b);
    if (w->r == OMC_OK) omc_buffer_release(&b);
    __atomic_store_n(&w->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Destroy (not just close) from another thread while a get waits for a key (60 s deadline).
   Want: the get returns OMC_ERR_CLOSED, destroy returns only after it left (ASan: no use after
   free), long before the get's deadline. The waiter is inside before destroy starts (the
   connector's count of calls inside says so). */
OMC_TEST(local_destroy_from_another_thread_waits_for_the_blocked_get) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    local_waiter w;
    pthread_t th;
    int i;
    REQUIRE(c);
    memset(&w, 0, sizeof(w));
    w.c = c;
    REQUIRE(pthread_create(&th, NULL, local_wait_main, &w) == 0);
    for (i = 0; i < 3000 && __atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) == 0; i++) usleep(1000);   /* the get is inside */
    CHECK(__atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) == 1);
    omc_conn_destroy(c);        /* returns once the get has left the library (its thread may not have stored the result yet) */
    pthread_join(th, NULL);
    CHECK_RES(w.r, OMC_ERR_CLOSED);
}

/* A buffer from omc_conn_alloc keeps the pool mapped after destroy; releasing it is OMC_OK. */
OMC_TEST(local_a_buffer_from_alloc_outlives_its_connector) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    omc_buffer b;
    REQUIRE(c);
    CHECK_OK(omc_conn_alloc(c, 100000, OMC_NO_WAIT, &b));
    omc_conn_destroy(c);
    memset(b.data, 0x5A, (size_t)b.size);
    CHECK(((const uint8_t*)b.data)[99999] == 0x5A);
    CHECK_OK(omc_buffer_release(&b));
}

/* ---- connectors copied by fork() ----------------------------------------------------------- */

/* One byte put and read back under key k: 1 if the connector works in this process. */
static int local_round_trip(omc_conn* c, const char* k, char v) {
    omc_payload p;
    omc_buffer b;
    int ok;
    memset(&p, 0, sizeof(p));
    p.data = &v; p.size = 1;
    if (omc_conn_put(c, "f", "g", k, &p, NULL) != OMC_OK) return 0;
    if (omc_conn_get(c, "f", "g", k, NULL, 0, OMC_NO_WAIT, &b) != OMC_OK) return 0;
    ok = b.size == 1 && *(const char*)b.data == v;
    return omc_buffer_release(&b) == OMC_OK && ok;
}

/* 1 if c is a forked copy here: put, get and alloc refused with OMC_ERR_CLOSED. */
static int local_refused(omc_conn* c) {
    omc_payload p;
    omc_buffer b;
    char v = 9;
    memset(&p, 0, sizeof(p));
    p.data = &v; p.size = 1;
    return omc_conn_put(c, "f", "g", "x", &p, NULL) == OMC_ERR_CLOSED &&
           omc_conn_get(c, "f", "g", "x", NULL, 0, OMC_NO_WAIT, &b) == OMC_ERR_CLOSED &&
           omc_conn_alloc(c, 64, OMC_NO_WAIT, &b) == OMC_ERR_CLOSED;
}

/* Wait for a child's exit (an event; 30 s only bounds a hang). Its exit status, or -1. */
static int local_wait_child(pid_t pid) {
    int st = 0, i;
    for (i = 0; i < 3000 && waitpid(pid, &st, WNOHANG) == 0; i++) usleep(10000);
    if (i == 3000) { kill(pid, SIGKILL); waitpid(pid, &st, 0); return -1; }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The fork guard down a chain: parent -> child -> grandchild. Want: each process refuses every
   connector it inherited (however many forks ago), a connector it creates itself works, its own
   fork() does not disturb its own connectors (the parent's A after the child, the child's B after
   the grandchild), and the parent's entry put before the fork is still there for the parent. The
   exit codes say which step failed. */
OMC_TEST(local_fork_copies_refuse_calls_down_a_chain_of_children) {
    omc_conn* a = make_local(1u << 20, OMC_ROLE_DEFAULT);
    omc_conn* late;
    omc_payload p;
    omc_buffer b;
    char v = 42;
    pid_t pid;
    REQUIRE(a);
    memset(&p, 0, sizeof(p));
    p.data = &v; p.size = 1;
    CHECK_OK(omc_conn_put(a, "f", "g", "kept", &p, NULL));
    fflush(stdout);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        omc_conn* bc;
        pid_t gpid;
        int code = 0;
        if (!local_refused(a)) _exit(10);
        bc = make_local(1u << 20, OMC_ROLE_DEFAULT);
        if (!bc || !local_round_trip(bc, "child", 1)) _exit(11);
        gpid = fork();
        if (gpid < 0) _exit(12);
        if (gpid == 0) {
            omc_conn* cc;
            if (!local_refused(a) || !local_refused(bc)) _exit(20);
            cc = make_local(1u << 20, OMC_ROLE_DEFAULT);
            if (!cc || !local_round_trip(cc, "grandchild", 2)) _exit(21);
            omc_conn_destroy(cc);
            omc_conn_destroy(bc);
            omc_conn_destroy(a);
            _exit(0);
        }
        code = local_wait_child(gpid);
        if (code != 0) _exit(code < 0 ? 13 : code);
        if (!local_round_trip(bc, "child-after", 3)) _exit(14);
        omc_conn_destroy(bc);
        omc_conn_destroy(a);
        _exit(0);
    }
    CHECK_EQ(local_wait_child(pid), 0);
    CHECK(local_round_trip(a, "parent-after", 4));
    CHECK_OK(omc_conn_get(a, "f", "g", "kept", NULL, 0, OMC_NO_WAIT, &b));
    CHECK(b.size == 1 && *(const char*)b.data == 42);
    CHECK_OK(omc_buffer_release(&b));
    late = make_local(1u << 20, OMC_ROLE_DEFAULT);
    REQUIRE(late);
    CHECK(local_round_trip(late, "late", 5));
    omc_conn_destroy(late);
    omc_conn_destroy(a);
}

/* A budget that ran out is a deadline in the past: the get times out at once instead of waiting
   for ever (the closer turns a wrong wait into OMC_ERR_CLOSED instead of a hang). */
OMC_TEST(deadline_after_negative_ms_has_already_passed) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    pthread_t th;
    omc_buffer b;
    omc_time_ns t0 = omc_now_ns();
    REQUIRE(c);
    CHECK(omc_deadline_after_ms(-1) <= omc_now_ns());
    CHECK(omc_deadline_after_ms(-1) != OMC_WAIT_FOREVER);
    CHECK(omc_deadline_after_ms(INT64_MIN) == OMC_NO_WAIT);            /* no overflow */
    CHECK(omc_deadline_after_ms(-1000) <= t0 - 999000000LL || omc_deadline_after_ms(-1000) == OMC_NO_WAIT);
    CHECK(omc_deadline_after_ms(INT64_MAX) == OMC_WAIT_FOREVER);       /* saturates the other way */
    pthread_create(&th, NULL, close_later, c);
    /* TIMEOUT, not CLOSED: it returned at once instead of waiting for close_later's close (the
       result says so whatever the host's load; a bound in milliseconds would not) */
    CHECK_RES(omc_conn_get(c, "a", "b", "never", NULL, 0, omc_deadline_after_ms(-5), &b), OMC_ERR_TIMEOUT);
    pthread_join(th, NULL);
    omc_conn_destroy(c);
}

OMC_TEST(local_pool_full_and_foreign_buffer) {
    omc_conn* c = make_local(64 * 1024, OMC_ROLE_DEFAULT);
    omc_conn* d = make_local(64 * 1024, OMC_ROLE_DEFAULT);
    omc_payload p;
    omc_buffer b;
    static char big[100000];
    REQUIRE(c && d);
    memset(&p, 0, sizeof(p));
    p.data = big; p.size = sizeof(big);
    CHECK_RES(omc_conn_put(c, "a", "b", "k", &p, NULL), OMC_ERR_TOO_LARGE);
    p.size = 40000;
    CHECK_OK(omc_conn_put(c, "a", "b", "k1", &p, NULL));
    CHECK_RES(omc_conn_put(c, "a", "b", "k2", &p, NULL), OMC_ERR_POOL_FULL);
    {   /* a buffer of another connector's pool is not accepted for zero copy */
        CHECK_OK(omc_conn_alloc(d, 1000, OMC_NO_WAIT, &b));
        memset(&p, 0, sizeof(p));
        p.buffer = &b;
        CHECK_RES(omc_conn_put(c, "a", "b", "k3", &p, NULL), OMC_ERR_INVALID_ARG);
        CHECK(b.data != NULL);          /* still the caller's on error */
        CHECK_OK(omc_buffer_release(&b));
    }
    {   /* omc_conn_alloc waits for space: times out when nothing is released */
        omc_time_ns t0 = omc_now_ns();
        CHECK_RES(omc_conn_alloc(c, 40000, omc_deadline_after_ms(200), &b), OMC_ERR_TIMEOUT);
        CHECK(omc_now_ns() - t0 >= 150000000LL);
    }
    omc_conn_destroy(c);
    omc_conn_destroy(d);
}

static int log_count;
static void count_log(omc_log_level l, omc_log_item item, const char* msg, const char* f, int line, void* u) {
    (void)l; (void)item; (void)msg; (void)f; (void)line; (void)u;
    __atomic_add_fetch(&log_count, 1, __ATOMIC_RELAXED);
}

OMC_TEST(local_errors_reach_logger_and_health) {
    omc_local_desc d;
    omc_conn* c = NULL;
    omc_health h;
    omc_buffer b;
    memset(&d, 0, sizeof(d));
    d.pool_size = 1u << 20;
    d.hooks.log_fn = count_log;
    d.hooks.max_level = OMC_LOG_DEBUG;
    CHECK_OK(omc_local_create(&d, &c));
    REQUIRE(c);
    log_count = 0;
    CHECK_RES(omc_conn_get(c, "a", "b", "nope", NULL, 0, omc_deadline_after_ms(10), &b), OMC_ERR_TIMEOUT);
    CHECK(log_count > 0);
    CHECK_OK(omc_conn_health(c, &h));
    CHECK_EQ(h.timeouts, 1);
    CHECK_EQ(h.errors, 0);     /* a timeout counts only in timeouts */
    CHECK(h.last_error == OMC_ERR_TIMEOUT);
    CHECK(strstr(h.last_error_text, "nope") != NULL);
    omc_conn_destroy(c);
}

OMC_TEST(local_metadata_of_older_put_is_stale) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    omc_payload p;
    omc_meta m1 = {0}, m2 = {0};
    omc_buffer b;
    char x = 1;
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    p.data = &x; p.size = 1;
    CHECK_OK(omc_conn_put(c, "a", "b", "k", &p, &m1));
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "k"));
    CHECK_OK(omc_conn_put(c, "a", "b", "k", &p, &m2));
    CHECK_RES(omc_conn_get(c, "a", "b", "k", m1.data, m1.size, OMC_NO_WAIT, &b), OMC_ERR_STALE);
    CHECK_OK(omc_conn_get(c, "a", "b", "k", m2.data, m2.size, OMC_NO_WAIT, &b));
    omc_buffer_release(&b);
    omc_meta_free(&m1);
    omc_meta_free(&m2);
    omc_conn_destroy(c);
}

/* ---- refusals say which object, which side and the fix (a capturing logger) ------------------ */

static char cap_text[8][600];
static int cap_items[8], cap_levels[8], cap_n;
static void cap_log(omc_log_level l, omc_log_item item, const char* msg, const char* f, int line, void* u) {
    (void)f; (void)line; (void)u;
    if (cap_n < 8) {
        snprintf(cap_text[cap_n], sizeof(cap_text[0]), "%s", msg);
        cap_items[cap_n] = (int)item;
        cap_levels[cap_n] = (int)l;
    }
    cap_n++;
}
static omc_conn* make_captured(uint64_t pool) {
    omc_local_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.pool_size = pool;
    d.hooks.log_fn = cap_log;
    if (omc_local_create(&d, &c) != OMC_OK) return NULL;
    cap_n = 0;
    return c;
}
/* one message logged since the last check was a WARN with this item containing every needle
   (the pool's allocator may add its own line about the same refusal) */
static int logged_once(int item, const char* a, const char* b, const char* c3, const char* d) {
    const char* needles[4];
    int i, k, found = 0;
    needles[0] = a; needles[1] = b; needles[2] = c3; needles[3] = d;
    for (k = 0; k < cap_n && k < 8; k++) {
        int ok = cap_items[k] == item && cap_levels[k] == OMC_LOG_WARN;
        for (i = 0; i < 4 && ok; i++) if (needles[i] && !strstr(cap_text[k], needles[i])) ok = 0;
        found += ok;
    }
    if (found != 1) {
        fprintf(stderr, "  %d message(s) logged, %d matching:\n", cap_n, found);
        for (k = 0; k < cap_n && k < 8; k++) fprintf(stderr, "    item %d level %d: %s\n", cap_items[k], cap_levels[k], cap_text[k]);
    }
    cap_n = 0;
    return found == 1;
}

OMC_TEST(metadata_for_another_key_names_both_keys_and_the_fix) {
    omc_conn* c = make_captured(1u << 20);
    omc_payload p;
    omc_meta m = {0};
    omc_buffer b;
    char x = 1;
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    p.data = &x; p.size = 1;
    CHECK_OK(omc_conn_put(c, "thinker", "talker", "req-1", &p, &m));
    CHECK_RES(omc_conn_get(c, "thinker", "talker", "req-2", m.data, m.size, OMC_NO_WAIT, &b), OMC_ERR_INVALID_ARG);
    CHECK(logged_once(OMC_LOGITEM_META_MALFORMED, "thinker/talker/req-1", "thinker/talker/req-2",
                      "pass the metadata that put() returned", NULL));
    /* damaged metadata: says so, and how metadata should travel */
    ((uint8_t*)m.data)[m.size - 1] ^= 0xFF;
    CHECK_RES(omc_conn_get(c, "thinker", "talker", "req-1", m.data, m.size, OMC_NO_WAIT, &b), OMC_ERR_CHECKSUM);
    CHECK(logged_once(OMC_LOGITEM_META_MALFORMED, "thinker/talker/req-1", "checksum", "omc_meta_to_text", NULL));
    omc_meta_free(&m);
    omc_conn_destroy(c);
}

OMC_TEST(local_put_larger_than_the_pool_names_both_sizes_and_the_desc_field) {
    omc_conn* c = make_captured(64 * 1024);
    omc_payload p;
    static char big[100000];
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    p.data = big; p.size = sizeof(big);
    CHECK_RES(omc_conn_put(c, "a", "b", "k", &p, NULL), OMC_ERR_TOO_LARGE);
    CHECK(logged_once(OMC_LOGITEM_CONN_ERROR, "put a/b/k", "100000 bytes", "65536 bytes", "sender's omc_local_desc"));
    omc_conn_destroy(c);
}

OMC_TEST(local_refusals_name_the_side_and_the_fix) {
    omc_conn* c = make_captured(64 * 1024);
    omc_conn* other = make_local(64 * 1024, OMC_ROLE_DEFAULT);
    omc_payload p;
    omc_buffer b;
    omc_meta m1 = {0}, m2 = {0};
    static char data[40000];
    REQUIRE(c && other);
    memset(&p, 0, sizeof(p));
    p.data = data; p.size = 10;
    CHECK_OK(omc_conn_put(c, "a", "b", "k1", &p, &m1));
    cap_n = 0;
    /* the same key again while the first put waits for its reader */
    CHECK_RES(omc_conn_put(c, "a", "b", "k1", &p, NULL), OMC_ERR_EXISTS);
    CHECK(logged_once(OMC_LOGITEM_CONN_ERROR, "put a/b/k1", "still live on this sender (a put not yet read by all its readers",
                      "omc_conn_cleanup", NULL));
    /* no room left: how much is in use and what to do */
    p.size = sizeof(data);
    CHECK_OK(omc_conn_put(c, "a", "b", "k2", &p, NULL));
    CHECK_RES(omc_conn_put(c, "a", "b", "k4", &p, NULL), OMC_ERR_POOL_FULL);
    CHECK(logged_once(OMC_LOGITEM_CONN_ERROR, "put a/b/k4", "of the sender's 65536 pool bytes are in use", "40000 more wanted",
                      "omc_local_desc"));
    /* a zero-copy buffer of another connector */
    CHECK_OK(omc_conn_alloc(other, 1000, OMC_NO_WAIT, &b));
    memset(&p, 0, sizeof(p));
    p.buffer = &b;
    CHECK_RES(omc_conn_put(c, "a", "b", "k3", &p, NULL), OMC_ERR_INVALID_ARG);
    CHECK(logged_once(OMC_LOGITEM_CONN_ERROR, "put a/b/k3", "not from this sender's pool", "omc_conn_alloc", NULL));
    CHECK_OK(omc_buffer_release(&b));
    /* metadata of a put that a newer put of the key replaced */
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "k1"));
    memset(&p, 0, sizeof(p));
    p.data = data; p.size = 10;
    CHECK_OK(omc_conn_put(c, "a", "b", "k1", &p, &m2));
    cap_n = 0;
    CHECK_RES(omc_conn_get(c, "a", "b", "k1", m1.data, m1.size, OMC_NO_WAIT, &b), OMC_ERR_STALE);
    CHECK(logged_once(OMC_LOGITEM_CONN_ERROR, "get a/b/k1", "a newer put replaced", "newest put's metadata", NULL));
    omc_meta_free(&m1);
    omc_meta_free(&m2);
    omc_conn_destroy(c);
    omc_conn_destroy(other);
}

OMC_TEST_MAIN()
