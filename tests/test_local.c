/* The same-process connector: the full contract suite (both halves in one process, two threads)
   plus what is specific to it (roles, lifetimes of views across cleanup/close/destroy). */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omc_test.h"
#include "contract.h"

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

OMC_TEST_MAIN()
