/* The remote connector (ZMQ side channel + TCP data plane) across real processes on loopback:
   the full contract suite (consumer in a second process built from "host:port", and in threads),
   metadata and metadata-less gets, two senders to one receiver, fan-out across processes, a
   receiver killed mid-transfer, a killed and a restarted sender, garbage and truncated messages on
   the listener's ports, CURVE, the port-offset table, host detection, and the wire codec.

   Child processes are plain fork()s that build their own connectors (never the parent's: a ZMQ
   context does not survive fork); the contract's consumer is this binary re-executed. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omc_test.h"
#include "contract.h"
#include <zmq.h>      /* the raw-socket tests call libzmq themselves (-lzmq) */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>

OMC_TEST_TSAN_IGNORE_LIBZMQ()    /* libzmq is not instrumented: see omc_test.h */

/* ---- helpers -------------------------------------------------------------------------------- */

static omc_conn* make_sender_ex(omc_role role, uint16_t port, uint64_t pool, const char* secret, const char* const* allowed, uint32_t nallowed) {
    omc_tcp_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.role = role;
    d.port = port;
    d.pool_size = pool ? pool : (64u << 20);
    d.curve.secret_key = secret;
    d.curve.allowed_clients = allowed;
    d.curve.allowed_count = nallowed;
    if (getenv("TCP_LOG")) { d.hooks.log_fn = omc_log_stderr; d.hooks.max_level = OMC_LOG_DEBUG; }
    if (omc_tcp_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static __attribute__((unused)) omc_conn* make_sender(uint16_t port, uint64_t pool) { return make_sender_ex(OMC_ROLE_SENDER, port, pool, NULL, NULL, 0); }

static omc_conn* make_receiver_ex(uint64_t pool, const char* server_key, const char* secret) {
    omc_tcp_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_RECEIVER;
    d.pool_size = pool ? pool : (64u << 20);
    d.curve.server_key = server_key;
    d.curve.secret_key = secret;
    if (getenv("TCP_LOG")) { d.hooks.log_fn = omc_log_stderr; d.hooks.max_level = OMC_LOG_DEBUG; }
    if (omc_tcp_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static __attribute__((unused)) omc_conn* make_receiver(uint64_t pool) { return make_receiver_ex(pool, NULL, NULL); }

static uint16_t port_of(omc_conn* c) {
    uint16_t p = 0;
    omc_tcp_endpoint(c, NULL, 0, &p, NULL);
    return p;
}

/* The consumer process of a contract run: spec is "host:port" of the producer's listener. */
static omc_conn* make_from_spec(const char* spec) {
    char host[256];
    uint16_t port;
    omc_conn* c;
    if (omc_tcp_parse_endpoint(spec, host, sizeof(host), &port) != OMC_OK) return NULL;
    c = make_receiver(0);
    if (c && omc_tcp_add_sender(c, "producer", host, port) != OMC_OK) { omc_conn_destroy(c); return NULL; }
    return c;
}

static __attribute__((unused)) void put_bytes(omc_conn* c, const char* key, uint64_t n, uint64_t seed, uint32_t readers, int64_t ttl, omc_meta* m) {
    void* data = malloc(n ? n : 1);
    omc_payload p;
    memset(&p, 0, sizeof(p));
    omc_test_fill(data, n, seed);
    p.data = data; p.size = n; p.readers = readers; p.ttl_ms = ttl;
    CHECK_OK(omc_conn_put(c, "s0", "s1", key, &p, m));
    free(data);
}

/* ---- the contract ---------------------------------------------------------------------------- */

OMC_TEST(tcp_contract_two_processes) {
    omc_conn* s = make_sender(0, 256u << 20);
    char spec[64];
    REQUIRE(s);
    snprintf(spec, sizeof(spec), "127.0.0.1:%u", (unsigned)port_of(s));
    ct_run_all("tcp.process", s, NULL, spec, getenv("CT_FILTER"));
    omc_conn_destroy(s);
}

OMC_TEST(tcp_contract_threads) {
    omc_conn* s = make_sender(0, 256u << 20);
    omc_conn* r = make_receiver(256u << 20);
    REQUIRE(s && r);
    CHECK_OK(omc_tcp_add_sender(r, "producer", "127.0.0.1", port_of(s)));
    ct_run_all("tcp.threads", s, r, NULL, getenv("CT_FILTER"));
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* The contract once more with what older peers do: no payload inside the metadata (sender) and
   every PULL on the side channel (receiver), so the side-channel push path stays covered. */
OMC_TEST(tcp_contract_threads_side_channel_pulls_without_inline) {
    omc_tcp_desc sd, rd;
    omc_conn *s = NULL, *r = NULL;
    memset(&sd, 0, sizeof(sd));
    memset(&rd, 0, sizeof(rd));
    sd.role = OMC_ROLE_SENDER; sd.pool_size = 256u << 20; sd.disable_inline = 1;
    rd.role = OMC_ROLE_RECEIVER; rd.pool_size = 256u << 20; rd.pull_on_side_channel = 1;
    REQUIRE(omc_tcp_create(&sd, &s) == OMC_OK && omc_tcp_create(&rd, &r) == OMC_OK);
    CHECK_OK(omc_tcp_add_sender(r, "producer", "127.0.0.1", port_of(s)));
    ct_run_all("tcp.sidechannel", s, r, NULL, getenv("CT_FILTER"));
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- small payloads inside the metadata; requests on the data connection -------------------- */

static uint64_t tcp_pushes(omc_conn* s) {
    omc_tcp_health_info th;
    memset(&th, 0, sizeof(th));
    CHECK_OK(omc_tcp_health(s, &th));
    return th.pushes;
}

/* The sender's push count once it reaches `want` (or 10 s pass): the worker counts a push after
   its last byte is written, which can come just after the receiver's get has returned. */
static uint64_t tcp_pushes_reach(omc_conn* s, uint64_t want) {
    omc_time_ns end = omc_deadline_after_ms(10000);
    uint64_t n;
    while ((n = tcp_pushes(s)) < want && omc_now_ns() < end) usleep(1000);
    return n;
}

static uint64_t live_entries(omc_conn* s) {
    omc_health h;
    memset(&h, 0, sizeof(h));
    omc_conn_health(s, &h);
    return h.live_entries;
}

/* A put of at most the threshold carries its bytes in the metadata (envelope flag bit 0, the
   bytes after the host); a get with that metadata sends one CLAIM on its data connection - the
   read is recorded, no payload byte travels (no push) - and the contract holds: a second get with
   the same metadata, a get after cleanup, and a get after the last reader are NOT_FOUND; a
   metadata-less get of an inline put pulls it like any other; one byte over the threshold is not
   inline. */
OMC_TEST(tcp_small_payloads_ride_in_the_metadata_and_a_claim_records_the_read) {
    omc_conn* s = make_sender(0, 0);
    omc_conn* r = make_receiver(0);
    omc_meta m = {0}, big = {0}, fan = {0}, gone = {0};
    omc_meta_info mi;
    omc_tcp_health_info th;
    omc_buffer b;
    uint64_t pushes;
    int i;
    REQUIRE(s && r);
    memset(&th, 0, sizeof(th));
    CHECK_OK(omc_tcp_health(s, &th));
    CHECK_EQ(th.inline_threshold, 16384);
    put_bytes(s, "small", 16384, 201, 1, 0, &m);
    put_bytes(s, "big", 16385, 202, 1, 0, &big);
    CHECK_OK(omc_meta_parse(m.data, m.size, &mi));
    CHECK((mi.flags & OMC_META_FLAG_INLINE) && mi.body_len == 16 + 9 + 16384);
    CHECK(omc_test_verify(mi.body + 16 + 9, 16384, 201));
    CHECK_OK(omc_meta_parse(big.data, big.size, &mi));
    CHECK(!(mi.flags & OMC_META_FLAG_INLINE) && mi.body_len == 16 + 9);
    pushes = tcp_pushes(s);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "small", m.data, m.size, omc_deadline_after_ms(5000), &b));
    CHECK(b.size == 16384 && omc_test_verify(b.data, b.size, 201));
    omc_buffer_release(&b);
    CHECK_EQ(tcp_pushes(s), pushes);                /* no payload byte went over the network */
    CHECK_RES(omc_conn_exists(s, "s0", "s1", "small"), OMC_ERR_NOT_FOUND);     /* the read is recorded */
    CHECK_RES(omc_conn_get(r, "s0", "s1", "small", m.data, m.size, omc_deadline_after_ms(2000), &b), OMC_ERR_NOT_FOUND);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "big", big.data, big.size, omc_deadline_after_ms(5000), &b));
    CHECK(b.size == 16385 && omc_test_verify(b.data, b.size, 202));
    omc_buffer_release(&b);
    CHECK_EQ(tcp_pushes_reach(s, pushes + 1), pushes + 1);
    /* fan-out: three readers, claims and a metadata-less pull share them */
    put_bytes(s, "fan", 1000, 203, 3, 0, &fan);
    CHECK_OK(omc_tcp_add_sender(r, "s", "127.0.0.1", port_of(s)));
    for (i = 0; i < 3; i++) {
        if (i == 1) CHECK_OK(omc_conn_get(r, "s0", "s1", "fan", NULL, 0, omc_deadline_after_ms(5000), &b));
        else CHECK_OK(omc_conn_get(r, "s0", "s1", "fan", fan.data, fan.size, omc_deadline_after_ms(5000), &b));
        CHECK(b.size == 1000 && omc_test_verify(b.data, b.size, 203));
        omc_buffer_release(&b);
    }
    CHECK_RES(omc_conn_get(r, "s0", "s1", "fan", fan.data, fan.size, omc_deadline_after_ms(2000), &b), OMC_ERR_NOT_FOUND);
    /* cleaned up: the bytes are in the metadata, but the get is refused */
    put_bytes(s, "gone", 10, 204, 1, 0, &gone);
    CHECK_OK(omc_conn_cleanup(s, "s0", "s1", "gone"));
    CHECK_RES(omc_conn_get(r, "s0", "s1", "gone", gone.data, gone.size, omc_deadline_after_ms(2000), &b), OMC_ERR_NOT_FOUND);
    CHECK_EQ(live_entries(s), 0);
    CHECK_OK(omc_conn_wait_consumed(s, OMC_NO_WAIT));
    omc_meta_free(&m); omc_meta_free(&big); omc_meta_free(&fan); omc_meta_free(&gone);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

static uint64_t inline_threshold_of(const omc_tcp_desc* d) {
    omc_conn* c = NULL;
    omc_tcp_health_info th;
    memset(&th, 0, sizeof(th));
    if (omc_tcp_create(d, &c) != OMC_OK) return (uint64_t)-1;
    omc_tcp_health(c, &th);
    omc_conn_destroy(c);
    return th.inline_threshold;
}

/* The threshold: the desc, else $OMNICONN_TCP_INLINE_THRESHOLD (0 = off, junk or too large is
   ignored), else 16 KiB; disable_inline; more than OMC_TCP_MAX_INLINE is refused; a CURVE sender
   inlines nothing unless inline_with_curve says so. */
OMC_TEST(tcp_inline_threshold_desc_environment_and_curve) {
    omc_tcp_desc d;
    char pub[41], sec[41];
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_SENDER;
    d.hooks.log_fn = omc_log_discard;
    CHECK_EQ(inline_threshold_of(&d), 16384);
    d.inline_threshold = 100;
    CHECK_EQ(inline_threshold_of(&d), 100);
    d.inline_threshold = OMC_TCP_MAX_INLINE + 1;
    CHECK_RES(omc_tcp_create(&d, &c), OMC_ERR_INVALID_ARG);
    d.inline_threshold = 0;
    d.disable_inline = 1;
    CHECK_EQ(inline_threshold_of(&d), 0);
    d.disable_inline = 0;
    setenv("OMNICONN_TCP_INLINE_THRESHOLD", "0", 1);
    CHECK_EQ(inline_threshold_of(&d), 0);
    setenv("OMNICONN_TCP_INLINE_THRESHOLD", "2048", 1);
    CHECK_EQ(inline_threshold_of(&d), 2048);
    d.inline_threshold = 100;                       /* the desc wins */
    CHECK_EQ(inline_threshold_of(&d), 100);
    d.inline_threshold = 0;
    setenv("OMNICONN_TCP_INLINE_THRESHOLD", "4k", 1);
    CHECK_EQ(inline_threshold_of(&d), 16384);
    setenv("OMNICONN_TCP_INLINE_THRESHOLD", "1000000", 1);
    CHECK_EQ(inline_threshold_of(&d), 16384);
    unsetenv("OMNICONN_TCP_INLINE_THRESHOLD");
    CHECK_OK(omc_tcp_curve_keypair(pub, sec));
    d.curve.secret_key = sec;
    CHECK_EQ(inline_threshold_of(&d), 0);
    d.inline_with_curve = 1;
    CHECK_EQ(inline_threshold_of(&d), 16384);
}

/* Gets with metadata travel as requests on the data connection, PULLs of receivers that ask for
   the side channel as before, both against one sender and one fan-out entry; sizes across the
   listener's non-blocking start and the workers (4 KiB .. 8 MiB), inline off. */
OMC_TEST(tcp_requests_on_the_data_connection_and_side_channel_pulls_mix) {
    omc_tcp_desc sd, rd;
    omc_conn *s = NULL, *a = NULL, *b = NULL;
    static const uint64_t sizes[] = { 0, 1, 4096, 65536, 300000, 8u << 20 };
    size_t i;
    memset(&sd, 0, sizeof(sd));
    memset(&rd, 0, sizeof(rd));
    sd.role = OMC_ROLE_SENDER; sd.pool_size = 128u << 20; sd.disable_inline = 1;
    rd.role = OMC_ROLE_RECEIVER; rd.pool_size = 64u << 20;
    REQUIRE(omc_tcp_create(&sd, &s) == OMC_OK && omc_tcp_create(&rd, &a) == OMC_OK);
    rd.pull_on_side_channel = 1;
    REQUIRE(omc_tcp_create(&rd, &b) == OMC_OK);
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char key[32];
        omc_meta m = {0};
        omc_buffer x;
        int k;
        snprintf(key, sizeof(key), "mix-%zu", i);
        put_bytes(s, key, sizes[i], 210 + i, 4, 0, &m);
        for (k = 0; k < 4; k++) {
            CHECK_OK(omc_conn_get(k & 1 ? b : a, "s0", "s1", key, m.data, m.size, omc_deadline_after_ms(10000), &x));
            CHECK(x.size == sizes[i] && omc_test_verify(x.data, x.size, 210 + i));
            omc_buffer_release(&x);
        }
        CHECK_RES(omc_conn_get(a, "s0", "s1", key, m.data, m.size, omc_deadline_after_ms(2000), &x), OMC_ERR_NOT_FOUND);
        CHECK_RES(omc_conn_get(b, "s0", "s1", key, m.data, m.size, omc_deadline_after_ms(2000), &x), OMC_ERR_NOT_FOUND);
        omc_meta_free(&m);
    }
    {   /* too small a destination: refused on the data connection, nothing consumed, channel kept */
        omc_meta m = {0};
        char small[100];
        uint64_t need = 0;
        put_bytes(s, "toolarge", 5000, 220, 1, 0, &m);
        CHECK_RES(omc_conn_get_copy(a, "s0", "s1", "toolarge", m.data, m.size, omc_deadline_after_ms(2000), small, sizeof(small), &need),
                  OMC_ERR_TOO_LARGE);
        CHECK_EQ(need, 5000);
        CHECK_OK(omc_conn_exists(s, "s0", "s1", "toolarge"));
        omc_meta_free(&m);
    }
    CHECK_EQ(live_entries(s), 1);
    omc_conn_destroy(b);
    omc_conn_destroy(a);
    omc_conn_destroy(s);
}

/* A get by request that gives up in the middle of a 128 MiB payload: OMC_ERR_TIMEOUT at its
   deadline; closing its data connection stops the push, which gives the read back (no ABORT
   message on this path); the next get takes every byte. */
OMC_TEST(tcp_a_request_that_times_out_mid_transfer_gives_the_read_back) {
    omc_conn* s = make_sender(0, 256u << 20);
    omc_conn* r = make_receiver(256u << 20);
    omc_meta small = {0}, big = {0};
    omc_tcp_health_info th;
    omc_buffer b;
    omc_time_ns t0;
    int i;
    REQUIRE(s && r);
    put_bytes(s, "warm", 100000, 230, 1, 0, &small);
    put_bytes(s, "big", 128u << 20, 231, 1, 0, &big);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "warm", small.data, small.size, omc_deadline_after_ms(5000), &b));  /* channel open */
    omc_buffer_release(&b);
    t0 = omc_now_ns();
    CHECK_RES(omc_conn_get(r, "s0", "s1", "big", big.data, big.size, omc_deadline_after_ms(10), &b), OMC_ERR_TIMEOUT);
    CHECK(omc_now_ns() - t0 < 1000000000LL);
    for (i = 0; i < 200; i++) {         /* the push notices the closed connection */
        memset(&th, 0, sizeof(th));
        omc_tcp_health(s, &th);
        if (th.pushes_in_flight == 0) break;
        usleep(10000);
    }
    CHECK_EQ(th.pushes_in_flight, 0);
    CHECK(th.pushes_failed >= 1);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "big"));            /* the read was given back */
    CHECK_OK(omc_conn_get(r, "s0", "s1", "big", big.data, big.size, omc_deadline_after_ms(20000), &b));
    CHECK(b.size == (128u << 20) && omc_test_verify(b.data, b.size, 231));
    omc_buffer_release(&b);
    omc_meta_free(&small);
    omc_meta_free(&big);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- child processes: a sender or a receiver driven by commands over a socketpair ------------ */

typedef struct child { pid_t pid; ct_env e; } child;

static int msg_send(child* c, const void* p, uint32_t n) { return ct_send(&c->e, p, n); }
static char* msg_recv(child* c, uint32_t* n) { return (char*)ct_recv(&c->e, n); }

/* A sender process. Commands: "put KEY SIZE SEED READERS TTL" -> the metadata blob (or "ERR name"),
   "health" -> "pushes failed inflight live in_use reclaims", "quit". It announces its port first. */
static void sender_child(ct_env* e, uint16_t port) {
    omc_conn* s = make_sender_ex(OMC_ROLE_SENDER, port, 512u << 20, NULL, NULL, 0);
    char buf[64];
    if (!s) { ct_send(e, "0", 1); return; }
    snprintf(buf, sizeof(buf), "%u", (unsigned)port_of(s));
    ct_send(e, buf, (uint32_t)strlen(buf));
    for (;;) {
        uint32_t n = 0;
        char* cmd = (char*)ct_recv(e, &n);
        if (!cmd || strcmp(cmd, "quit") == 0) { free(cmd); break; }
        if (strncmp(cmd, "put ", 4) == 0) {
            char key[128];
            unsigned long long size, seed;
            unsigned readers;
            long long ttl;
            omc_meta m = {0};
            void* data;
            omc_payload p;
            omc_result r;
            sscanf(cmd + 4, "%127s %llu %llu %u %lld", key, &size, &seed, &readers, &ttl);
            data = malloc(size ? size : 1);
            omc_test_fill(data, size, seed);
            memset(&p, 0, sizeof(p));
            p.data = data; p.size = size; p.readers = readers; p.ttl_ms = ttl;
            r = omc_conn_put(s, "s0", "s1", key, &p, &m);
            free(data);
            if (r == OMC_OK) ct_send(e, m.data, m.size);
            else { snprintf(buf, sizeof(buf), "ERR %s", omc_result_name(r)); ct_send(e, buf, (uint32_t)strlen(buf)); }
            omc_meta_free(&m);
        } else if (strcmp(cmd, "health") == 0) {
            omc_health h;
            omc_tcp_health_info th;
            char out[256];
            omc_conn_sweep(s);
            omc_conn_health(s, &h);
            omc_tcp_health(s, &th);
            snprintf(out, sizeof(out), "%llu %llu %llu %llu %llu %llu", (unsigned long long)th.pushes, (unsigned long long)th.pushes_failed,
                     (unsigned long long)th.pushes_in_flight, (unsigned long long)h.live_entries, (unsigned long long)h.pool_in_use,
                     (unsigned long long)h.ttl_reclaims);
            ct_send(e, out, (uint32_t)strlen(out));
        }
        free(cmd);
    }
    omc_conn_destroy(s);
}

/* KEY*N: N threads of one receiver get the payload at once (each on a channel of its own). */
typedef struct child_get { omc_conn* r; const char* key; const void* meta; uint32_t n; uint64_t seed; omc_result res; } child_get;

static void* child_get_main(void* arg) {
    child_get* g = (child_get*)arg;
    omc_buffer b;
    g->res = omc_conn_get(g->r, "s0", "s1", g->key, g->meta, g->n, omc_deadline_after_ms(30000), &b);
    if (g->res == OMC_OK && !omc_test_verify(b.data, b.size, g->seed)) g->res = OMC_ERR_CHECKSUM;
    if (g->res == OMC_OK) omc_buffer_release(&b);
    return NULL;
}

static omc_result child_get_many(omc_conn* r, const char* key, int nthreads, const void* meta, uint32_t n, uint64_t seed) {
    child_get g[16];
    pthread_t th[16];
    int i, started = 0;
    omc_result res = OMC_OK;
    for (i = 0; i < nthreads && i < 16; i++) {
        g[i].r = r; g[i].key = key; g[i].meta = meta; g[i].n = n; g[i].seed = seed; g[i].res = OMC_ERR_INTERNAL;
        if (pthread_create(&th[i], NULL, child_get_main, &g[i]) != 0) break;
        started++;
    }
    for (i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        if (g[i].res != OMC_OK && res == OMC_OK) res = g[i].res;
    }
    return started == nthreads ? res : OMC_ERR_SYSTEM;
}

/* A receiver process: gets one payload with the metadata it is sent, checks it is pattern `seed`,
   answers "OK" or "ERR name". Repeats until "quit". A key "K*N" has N threads get K at once. */
static void receiver_child(ct_env* e, uint64_t seed) {
    omc_conn* r = make_receiver(512u << 20);
    char key[128];
    const char* star;
    int nthreads = 0;
    snprintf(key, sizeof(key), "%s", getenv("TCP_KEY") ? getenv("TCP_KEY") : "k");
    if ((star = strchr(key, '*')) != NULL) { nthreads = atoi(star + 1); key[star - key] = '\0'; }
    for (;;) {
        uint32_t n = 0;
        char* meta = (char*)ct_recv(e, &n);
        omc_buffer b;
        omc_result res;
        char out[64];
        if (!meta || strcmp(meta, "quit") == 0) { free(meta); break; }
        if (r && nthreads > 0) res = child_get_many(r, key, nthreads, meta, n, seed);
        else {
            res = r ? omc_conn_get(r, "s0", "s1", key, meta, n, omc_deadline_after_ms(30000), &b) : OMC_ERR_INTERNAL;
            if (res == OMC_OK && !omc_test_verify(b.data, b.size, seed)) res = OMC_ERR_CHECKSUM;
            if (res == OMC_OK) omc_buffer_release(&b);
        }
        snprintf(out, sizeof(out), res == OMC_OK ? "OK" : "ERR %s", omc_result_name(res));
        ct_send(e, out, (uint32_t)strlen(out));
        free(meta);
    }
    omc_conn_destroy(r);
}

typedef enum { KIND_SENDER, KIND_RECEIVER } child_kind;

/* Children are this binary re-executed ("--tcp-child sender|receiver ARG FD [KEY]"), not plain
   forks: a forked copy of a multi-threaded process may not start threads (TSan refuses it, and a
   ZMQ context does not survive fork anyway). */
static child spawn(child_kind kind, uint64_t arg, const char* key) {
    child c;
    int sv[2];
    memset(&c, 0, sizeof(c));
    c.pid = -1;
    c.e.fd = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return c;
    fflush(stdout);
    fflush(stderr);
    c.pid = fork();
    if (c.pid == 0) {
        char a[32], fd[16];
        char* args[7];
        close(sv[0]);
        snprintf(a, sizeof(a), "%llu", (unsigned long long)arg);
        snprintf(fd, sizeof(fd), "%d", sv[1]);
        args[0] = (char*)"/proc/self/exe"; args[1] = (char*)"--tcp-child";
        args[2] = (char*)(kind == KIND_SENDER ? "sender" : "receiver"); args[3] = a; args[4] = fd;
        args[5] = (char*)(key ? key : "k"); args[6] = NULL;
        execv("/proc/self/exe", args);
        _exit(101);
    }
    close(sv[1]);
    c.e.fd = sv[0];
    return c;
}

/* The child side: called first thing in main. */
static void child_main(int argc, char** argv) {
    ct_env e;
    if (argc < 6 || strcmp(argv[1], "--tcp-child") != 0) return;
    memset(&e, 0, sizeof(e));
    e.fd = atoi(argv[4]);
    setenv("TCP_KEY", argv[5], 1);
    if (strcmp(argv[2], "sender") == 0) sender_child(&e, (uint16_t)strtoull(argv[3], NULL, 10));
    else receiver_child(&e, strtoull(argv[3], NULL, 10));
    exit(omc_test_failed_checks ? 1 : 0);
}

static void reap(child* c, int kill_it) {
    int st;
    if (c->pid <= 0) return;
    if (kill_it) kill(c->pid, SIGKILL);
    else msg_send(c, "quit", 4);
    waitpid(c->pid, &st, 0);
    close(c->e.fd);
    c->pid = -1;
}

/* A sender child's port (it says it first). */
static uint16_t child_port(child* c) {
    uint32_t n = 0;
    char* m = msg_recv(c, &n);
    uint16_t p = m ? (uint16_t)atoi(m) : 0;
    free(m);
    return p;
}

/* Ask a sender child to put; returns its metadata (malloc'd) or NULL. */
static uint8_t* child_put(child* c, const char* key, uint64_t size, uint64_t seed, uint32_t readers, int64_t ttl, uint32_t* n) {
    char cmd[256];
    uint8_t* m;
    snprintf(cmd, sizeof(cmd), "put %s %llu %llu %u %lld", key, (unsigned long long)size, (unsigned long long)seed, readers, (long long)ttl);
    msg_send(c, cmd, (uint32_t)strlen(cmd));
    m = (uint8_t*)msg_recv(c, n);
    if (m && *n >= 4 && memcmp(m, "ERR ", 4) == 0) { fprintf(stderr, "  child put: %s\n", m); free(m); return NULL; }
    return m;
}

static void get_and_verify(omc_conn* r, const char* key, const void* meta, uint32_t n, uint64_t size, uint64_t seed) {
    omc_buffer b;
    CHECK_OK(omc_conn_get(r, "s0", "s1", key, meta, n, omc_deadline_after_ms(20000), &b));
    CHECK(b.size == size && omc_test_verify(b.data, b.size, seed));
    omc_buffer_release(&b);
}

/* A child's answer must be `want` (printed when it is not). */
static void expect_answer(child* c, const char* want) {
    uint32_t n = 0;
    char* a = msg_recv(c, &n);
    CHECK(a && strcmp(a, want) == 0);
    if (!a || strcmp(a, want) != 0) fprintf(stderr, "  child answered '%s', expected '%s'\n", a ? a : "(nothing)", want);
    free(a);
}

/* ---- metadata-less gets, several senders -------------------------------------------------------- */

OMC_TEST(tcp_two_senders_one_receiver) {
    child a = spawn(KIND_SENDER, 0, NULL), b = spawn(KIND_SENDER, 0, NULL);
    uint16_t pa = child_port(&a), pb = child_port(&b);
    omc_conn* r = make_receiver(0);
    uint8_t *ma, *mb;
    uint32_t na = 0, nb = 0, i;
    omc_tcp_found f;
    omc_buffer buf;
    REQUIRE(r && pa && pb);
    CHECK_OK(omc_tcp_add_sender(r, "thinker", "127.0.0.1", pa));
    CHECK_OK(omc_tcp_add_sender(r, "talker", "127.0.0.1", pb));
    CHECK_RES(omc_tcp_add_sender(r, "thinker", "127.0.0.1", 9), OMC_ERR_EXISTS);
    CHECK_RES(omc_tcp_add_sender(r, "again", "127.0.0.1", pa), OMC_ERR_EXISTS);
    /* metadata-less: each key lives on one sender; the receiver finds it wherever it is */
    for (i = 0; i < 3; i++) {
        char ka[32], kb[32];
        snprintf(ka, sizeof(ka), "a%u", i);
        snprintf(kb, sizeof(kb), "b%u", i);
        free(child_put(&a, ka, 3000 + i, 10 + i, 1, 0, &na));
        free(child_put(&b, kb, 5000 + i, 20 + i, 1, 0, &nb));
    }
    for (i = 0; i < 3; i++) {
        char ka[32], kb[32];
        snprintf(ka, sizeof(ka), "a%u", i);
        snprintf(kb, sizeof(kb), "b%u", i);
        CHECK_OK(omc_conn_get(r, "s0", "s1", kb, NULL, 0, omc_deadline_after_ms(5000), &buf));
        CHECK(buf.size == 5000 + i && omc_test_verify(buf.data, buf.size, 20 + i));
        omc_buffer_release(&buf);
        CHECK_OK(omc_conn_get(r, "s0", "s1", ka, NULL, 0, omc_deadline_after_ms(5000), &buf));
        CHECK(buf.size == 3000 + i && omc_test_verify(buf.data, buf.size, 10 + i));
        omc_buffer_release(&buf);
    }
    /* query asks without consuming; get_from asks one sender only */
    free(child_put(&b, "q", 777, 5, 1, 0, &nb));
    CHECK_OK(omc_tcp_query(r, NULL, "s0", "s1", "q", omc_deadline_after_ms(5000), &f));
    CHECK(f.size == 777 && strcmp(f.sender, "talker") == 0 && f.readers_left == 1 && f.incarnation != 0);
    CHECK_RES(omc_tcp_query(r, "thinker", "s0", "s1", "q", omc_deadline_after_ms(5000), &f), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_tcp_get_from(r, "thinker", "s0", "s1", "q", omc_deadline_after_ms(300), &buf), OMC_ERR_TIMEOUT);
    CHECK_OK(omc_tcp_get_from(r, "talker", "s0", "s1", "q", omc_deadline_after_ms(5000), &buf));
    CHECK(buf.size == 777 && omc_test_verify(buf.data, buf.size, 5));
    omc_buffer_release(&buf);
    CHECK_RES(omc_tcp_get_from(r, "nobody", "s0", "s1", "q", omc_deadline_after_ms(300), &buf), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_conn_get(r, "s0", "s1", "absent", NULL, 0, OMC_NO_WAIT, &buf), OMC_ERR_TIMEOUT);    /* no time to ask */
    /* with metadata, from both, interleaved */
    ma = child_put(&a, "ma", 70000, 31, 1, 0, &na);
    mb = child_put(&b, "mb", 90000, 32, 1, 0, &nb);
    REQUIRE(ma && mb);
    get_and_verify(r, "mb", mb, nb, 90000, 32);
    get_and_verify(r, "ma", ma, na, 70000, 31);
    CHECK_EQ(omc_tcp_peer_count(r), 2);
    {
        omc_tcp_peer_info ph;
        CHECK_OK(omc_tcp_peer_health(r, 0, &ph));
        CHECK(strcmp(ph.name, "thinker") == 0 && ph.registered && ph.port == pa && ph.bytes >= 70000 && ph.incarnation != 0);
        CHECK_RES(omc_tcp_peer_health(r, 2, &ph), OMC_ERR_NOT_FOUND);
    }
    CHECK_OK(omc_tcp_remove_sender(r, "talker"));
    CHECK_RES(omc_tcp_remove_sender(r, "talker"), OMC_ERR_NOT_FOUND);
    free(ma);
    free(mb);
    omc_conn_destroy(r);
    reap(&a, 0);
    reap(&b, 0);
}

OMC_TEST(tcp_no_sender_registered) {
    omc_conn* r = make_receiver(0);
    omc_buffer b;
    omc_payload p;
    char x = 1;
    REQUIRE(r);
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(200), &b), OMC_ERR_NOT_FOUND);
    memset(&p, 0, sizeof(p));
    p.data = &x; p.size = 1;
    CHECK_RES(omc_conn_put(r, "s0", "s1", "k", &p, NULL), OMC_ERR_WRONG_ROLE);
    CHECK_RES(omc_tcp_endpoint(r, NULL, 0, NULL, NULL), OMC_ERR_WRONG_ROLE);
    CHECK_RES(omc_tcp_add_sender(r, "", "127.0.0.1", 1), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_tcp_add_sender(r, "x", "127.0.0.1", 0), OMC_ERR_INVALID_ARG);
    omc_conn_destroy(r);
}

/* ---- fan-out across processes ------------------------------------------------------------------ */

OMC_TEST(tcp_fanout_three_receiver_processes) {
    omc_conn* s = make_sender(0, 0);
    omc_meta m = {0};
    child c[3];
    omc_health h;
    int i;
    REQUIRE(s);
    put_bytes(s, "k", 1u << 20, 41, 3, 0, &m);
    for (i = 0; i < 3; i++) c[i] = spawn(KIND_RECEIVER, 41, "k");
    for (i = 0; i < 3; i++) msg_send(&c[i], m.data, m.size);
    for (i = 0; i < 3; i++) expect_answer(&c[i], "OK");
    /* all three read it: it is gone, a fourth reader is told so */
    msg_send(&c[0], m.data, m.size);
    expect_answer(&c[0], "ERR OMC_ERR_NOT_FOUND");
    omc_conn_health(s, &h);
    CHECK_EQ(h.live_entries, 0);
    CHECK_EQ(h.pool_in_use, 0);
    for (i = 0; i < 3; i++) reap(&c[i], 0);
    omc_meta_free(&m);
    omc_conn_destroy(s);
}

/* ---- a receiver killed in the middle of a transfer ------------------------------------------- */

/* Wait until the sender reports a push in flight (up to 10 s); 1 if seen. */
static int wait_in_flight(omc_conn* s) {
    int i;
    for (i = 0; i < 200000; i++) {
        omc_tcp_health_info th;
        omc_tcp_health(s, &th);
        if (th.pushes_in_flight) return 1;
        usleep(50);
    }
    return 0;
}

OMC_TEST(tcp_killed_receiver_mid_transfer) {
    const uint64_t big = 128u << 20;
    omc_conn* s = make_sender(0, 512u << 20);
    omc_meta m = {0};
    omc_tcp_health_info th;
    omc_health h0, h;
    child c;
    int i, seen;
    /* A TTL the receiver's start-up, the push and the kill fit in on an idle host; on a loaded one
       they may not, and then the entry is gone by its TTL before the check below: that case is
       judged by the clock (not read = not consumed), never by a fixed delay. */
    const int64_t ttl_ms = 1500;
    omc_time_ns t_put, t_failed;
    REQUIRE(s);
    omc_conn_health(s, &h0);
    put_bytes(s, "k", big, 51, 1, ttl_ms, &m);
    t_put = omc_now_ns();       /* the TTL runs from the put's end (filling 128 MiB is slow under a sanitizer) */
    c = spawn(KIND_RECEIVER, 51, "k");
    msg_send(&c, m.data, m.size);
    seen = wait_in_flight(s);
    kill(c.pid, SIGSTOP);        /* it stops reading: the push is surely in flight now */
    CHECK(seen);
    usleep(100000);
    omc_tcp_health(s, &th);
    CHECK_EQ(th.pushes_in_flight, 1);
    reap(&c, 1);                 /* SIGKILL: its sockets close under the push */
    for (i = 0; i < 3000; i++) {     /* the push fails at its next write: waited for, up to 30 s */
        omc_tcp_health(s, &th);
        if (th.pushes_failed >= 1 && th.pushes_in_flight == 0) break;
        usleep(10000);
    }
    CHECK(th.pushes_failed >= 1 && th.pushes_in_flight == 0);
    CHECK_EQ(th.pushes, 0);
    /* the reader was given back (a failed pull does not consume) ... */
    omc_conn_health(s, &h);
    t_failed = omc_now_ns();
    if (t_failed - t_put < ttl_ms * 1000000LL) CHECK_EQ(h.live_entries, 1);
    else CHECK(h.live_entries == 1 || h.ttl_reclaims >= h0.ttl_reclaims + 1);   /* its TTL took it, no read did */
    /* ... and the TTL reclaims the buffer (waited for until well past the TTL) */
    while (omc_now_ns() - t_put < (ttl_ms + 30000) * 1000000LL) {
        omc_conn_sweep(s);
        omc_conn_health(s, &h);
        if (h.live_entries == 0 && h.pool_in_use == h0.pool_in_use) break;
        usleep(10000);
    }
    CHECK_EQ(h.live_entries, 0);
    CHECK_EQ(h.pool_in_use, h0.pool_in_use);
    CHECK(h.ttl_reclaims >= h0.ttl_reclaims + 1);
    omc_meta_free(&m);
    /* the sender keeps serving */
    put_bytes(s, "k", 3u << 20, 52, 1, 0, &m);
    c = spawn(KIND_RECEIVER, 52, "k");
    msg_send(&c, m.data, m.size);
    expect_answer(&c, "OK");
    reap(&c, 0);
    omc_meta_free(&m);
    omc_conn_destroy(s);
}

/* A receiver with several gets in flight at once - four threads, four channels, four requests
   on four data connections for a 48 MiB entry of four readers - is killed while the sender's two
   workers push (and the other requests wait for a worker). Want: nothing is consumed (no push
   counted, all four readers left), every worker is free again (nothing in flight), and a new
   receiver's four concurrent gets of the same entry then all succeed with every byte right. */
OMC_TEST(tcp_a_receiver_dying_with_gets_in_flight_consumes_nothing_and_frees_the_workers) {
    const uint64_t big = 48u << 20;
    omc_conn* s = make_sender(0, 256u << 20);
    omc_meta m = {0};
    omc_tcp_health_info th;
    omc_health h;
    child c;
    int i, seen;
    REQUIRE(s);
    put_bytes(s, "k", big, 71, 4, 0, &m);
    c = spawn(KIND_RECEIVER, 71, "k*4");
    msg_send(&c, m.data, m.size);
    seen = wait_in_flight(s);
    for (i = 0; seen && i < 2000; i++) {         /* both workers busy: as many requests in flight as can be */
        omc_tcp_health(s, &th);
        if (th.pushes_in_flight >= 2) break;
        usleep(1000);
    }
    kill(c.pid, SIGSTOP);
    CHECK(seen);
    omc_tcp_health(s, &th);
    printf("  %llu pushes in flight when the receiver stopped\n", (unsigned long long)th.pushes_in_flight);
    CHECK(th.pushes_in_flight >= 1);
    reap(&c, 1);
    for (i = 0; i < 1000; i++) {
        omc_tcp_health(s, &th);
        if (th.pushes_in_flight == 0) break;
        usleep(10000);
    }
    CHECK_EQ(th.pushes_in_flight, 0);
    CHECK_EQ(th.pushes, 0);
    omc_conn_health(s, &h);
    CHECK_EQ(h.live_entries, 1);
    c = spawn(KIND_RECEIVER, 71, "k*4");
    msg_send(&c, m.data, m.size);
    expect_answer(&c, "OK");                    /* four gets at once, every byte checked in the child */
    reap(&c, 0);
    omc_tcp_health(s, &th);
    CHECK_EQ(th.pushes, 4);
    omc_conn_health(s, &h);
    CHECK_EQ(h.live_entries, 0);                /* the four reads were recorded */
    omc_meta_free(&m);
    omc_conn_destroy(s);
}

/* The TTL passes while a push reads the entry: the bytes stay until the push ends, and the
   receiver gets them intact. */
OMC_TEST(tcp_ttl_never_frees_a_buffer_being_pushed) {
    const uint64_t big = 64u << 20;
    omc_conn* s = make_sender(0, 256u << 20);
    omc_meta m = {0};
    omc_health h;
    child c;
    int seen;
    omc_time_ns t_put;
    /* The TTL must outlast the receiver's start-up (exec, connect, HELLO) even when it runs under
       TSan on a loaded 2-core box: a 200 ms TTL expired before the push began there. */
    const int64_t ttl_ms = 3000;
    REQUIRE(s);
    put_bytes(s, "k", big, 61, 1, ttl_ms, &m);
    t_put = omc_now_ns();       /* after: filling 64 MiB takes seconds under TSan, the TTL starts at put */
    c = spawn(KIND_RECEIVER, 61, "k");
    msg_send(&c, m.data, m.size);
    seen = wait_in_flight(s);
    kill(c.pid, SIGSTOP);
    CHECK(seen);
    {   /* the TTL passes while the push is stuck */
        omc_time_ns until = t_put + (ttl_ms + 300) * 1000000LL, now = omc_now_ns();
        if (until > now) usleep((useconds_t)((until - now) / 1000));
    }
    omc_conn_sweep(s);          /* (the listener sweeps on its own too) */
    omc_conn_health(s, &h);
    CHECK_EQ(h.ttl_reclaims, 1);
    CHECK_EQ(h.live_entries, 0);            /* gone from the table ... */
    CHECK(h.pool_in_use >= big);            /* ... but not from the pool */
    kill(c.pid, SIGCONT);
    expect_answer(&c, "OK");                /* pattern verified in the child */
    omc_conn_health(s, &h);
    CHECK_EQ(h.pool_in_use, 0);
    reap(&c, 0);
    omc_meta_free(&m);
    omc_conn_destroy(s);
}

/* ---- killed and restarted senders ---------------------------------------------------------------- */

/* A get that must fail at its deadline of ms: not before it, and not long after. "Long" is judged
   against the host: a return more than slack_ms late is compared with how late a plain sleep of
   the same length wakes right after (on a loaded host both are late; a get that overran by itself
   is not excused by a quiet host). */
static void check_returned_at_deadline(omc_time_ns took, int ms, int slack_ms) {
    omc_time_ns want = (omc_time_ns)ms * 1000000LL, slack = (omc_time_ns)slack_ms * 1000000LL, t0, lag;
    CHECK(took >= want - 50000000LL);
    if (took < want + slack) return;
    t0 = omc_now_ns();
    usleep((useconds_t)ms * 1000u);
    lag = omc_now_ns() - t0 - want;
    printf("  returned %.0f ms after a %d ms deadline; a %d ms sleep woke %.0f ms late\n", (double)(took - want) / 1e6, ms, ms,
           (double)lag / 1e6);
    CHECK(took < want + slack + 4 * lag);
}

OMC_TEST(tcp_killed_sender_fails_at_deadline) {
    child a = spawn(KIND_SENDER, 0, NULL);
    uint16_t pa = child_port(&a);
    omc_conn* r = make_receiver(0);
    uint8_t* m;
    uint32_t n = 0;
    omc_buffer b;
    omc_time_ns t0, dt;
    omc_tcp_peer_info ph;
    REQUIRE(r && pa);
    m = child_put(&a, "k", 4096, 71, 1, 0, &n);
    REQUIRE(m);
    reap(&a, 1);
    t0 = omc_now_ns();
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", m, n, omc_deadline_after_ms(700), &b), OMC_ERR_CONNECTION);
    dt = omc_now_ns() - t0;
    check_returned_at_deadline(dt, 700, 500);
    CHECK_OK(omc_tcp_add_sender(r, "dead", "127.0.0.1", pa));
    t0 = omc_now_ns();
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(500), &b), OMC_ERR_CONNECTION);
    dt = omc_now_ns() - t0;
    check_returned_at_deadline(dt, 500, 500);
    CHECK_OK(omc_tcp_peer_health(r, 0, &ph));
    CHECK(ph.failures >= 2 && ph.last_error != OMC_OK && ph.incarnation == 0);
    free(m);
    omc_conn_destroy(r);
}

OMC_TEST(tcp_restarted_sender_refuses_stale_metadata) {
    child a = spawn(KIND_SENDER, 0, NULL), b;
    uint16_t pa = child_port(&a), pb;
    omc_conn* r = make_receiver(0);
    uint8_t *m1, *m0, *m2;
    uint32_t n1 = 0, n0 = 0, n2 = 0;
    omc_buffer buf;
    omc_tcp_peer_info ph;
    REQUIRE(r && pa);
    m0 = child_put(&a, "warm", 10000, 80, 1, 0, &n0);
    m1 = child_put(&a, "k", 10000, 81, 1, 0, &n1);
    REQUIRE(m0 && m1);
    get_and_verify(r, "warm", m0, n0, 10000, 80);     /* a cached channel to the first process */
    reap(&a, 1);
    b = spawn(KIND_SENDER, pa, NULL);                   /* same port, new process */
    pb = child_port(&b);
    CHECK_EQ(pb, pa);
    m2 = child_put(&b, "k", 20000, 82, 1, 0, &n2);
    REQUIRE(m2);
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", m1, n1, omc_deadline_after_ms(3000), &buf), OMC_ERR_PEER_RESTARTED);
    get_and_verify(r, "k", m2, n2, 20000, 82);           /* new puts work at once */
    CHECK_OK(omc_tcp_peer_health(r, 0, &ph));
    CHECK(ph.restarts >= 1);
    free(m0); free(m1); free(m2);
    omc_conn_destroy(r);
    reap(&b, 0);
}

/* ---- garbage on the listener's ports ------------------------------------------------------------ */

static int raw_connect(uint16_t port) {
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) { close(fd); return -1; }
    return fd;
}

/* Send one (possibly multi-frame) message on a raw DEALER and return the reply's decoded error
   code (0 if the reply is no ERROR, 1 if none came). */
static int dealer_exchange(void* d, const void* a, size_t an, const void* b, size_t bn, uint8_t type_expected) {
    uint8_t buf[OMC__WIRE_MAX];
    omc__wire m;
    zmq_pollitem_t it;
    int n;
    zmq_send(d, a, an, b ? ZMQ_SNDMORE : 0);
    if (b) zmq_send(d, b, bn, 0);
    memset(&it, 0, sizeof(it));
    it.socket = d; it.events = ZMQ_POLLIN;
    if (zmq_poll(&it, 1, 3000) <= 0) return 1;
    n = zmq_recv(d, buf, sizeof(buf), 0);
    if (n < 0 || omc__wire_decode(buf, (size_t)n, &m) != OMC_OK) return 2;
    if (type_expected && m.type != type_expected) return 3;
    return m.type == OMC__MSG_ERROR ? m.code : 0;
}

OMC_TEST(tcp_garbage_on_the_listener) {
    omc_conn* s = make_sender(0, 0);
    uint16_t port = 0, dport = 0;
    void* ctx = zmq_ctx_new();
    void* d = zmq_socket(ctx, ZMQ_DEALER);
    char ep[64];
    uint8_t good[OMC__WIRE_MAX], bad[OMC__WIRE_MAX];
    uint32_t glen = 0;
    omc__wire m;
    omc_tcp_health_info th;
    omc_meta meta = {0};
    int zero = 0, fd, i;
    REQUIRE(s && ctx && d);
    CHECK_OK(omc_tcp_endpoint(s, NULL, 0, &port, &dport));
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", (unsigned)port);
    CHECK(zmq_connect(d, ep) == 0);
    /* a valid QUERY, to have something to break */
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_QUERY; m.xfer = 9; m.incarnation = 1; m.seq = 1; m.key = "s0\x1fs1\x1fnope"; m.key_len = 10;
    CHECK_OK(omc__wire_encode(&m, good, sizeof(good), &glen));
    CHECK_EQ(dealer_exchange(d, good, glen, NULL, 0, OMC__MSG_NOT_FOUND), 0);
    /* random bytes, truncated headers, every truncation of a valid message, wrong version,
       wrong magic, lying body length, unknown type, reserved bits, two frames, an empty frame */
    CHECK_EQ(dealer_exchange(d, "hello there", 11, NULL, 0, 0), OMC_ERR_MALFORMED);
    CHECK_EQ(dealer_exchange(d, "", 0, NULL, 0, 0), OMC_ERR_MALFORMED);
    for (i = 1; i < (int)glen; i += 3) CHECK_EQ(dealer_exchange(d, good, (size_t)i, NULL, 0, 0), OMC_ERR_MALFORMED);
    memcpy(bad, good, glen); bad[4] = 2;
    CHECK_EQ(dealer_exchange(d, bad, glen, NULL, 0, 0), OMC_ERR_VERSION);
    memcpy(bad, good, glen); bad[0] ^= 1;
    CHECK_EQ(dealer_exchange(d, bad, glen, NULL, 0, 0), OMC_ERR_MALFORMED);
    memcpy(bad, good, glen); omc__put_u32(bad + 28, 5000);
    CHECK_EQ(dealer_exchange(d, bad, glen, NULL, 0, 0), OMC_ERR_MALFORMED);
    memcpy(bad, good, glen); bad[5] = 99;
    CHECK_EQ(dealer_exchange(d, bad, glen, NULL, 0, 0), OMC_ERR_PROTOCOL);
    memcpy(bad, good, glen); bad[5] = OMC__MSG_DONE;        /* a sender does not take DONE */
    CHECK_EQ(dealer_exchange(d, bad, 32, NULL, 0, 0), OMC_ERR_MALFORMED);
    memcpy(bad, good, glen); bad[6] = 1;
    CHECK_EQ(dealer_exchange(d, bad, glen, NULL, 0, 0), OMC_ERR_MALFORMED);
    memcpy(bad, good, glen); omc__put_u16(bad + 32 + 4, 200);
    CHECK_EQ(dealer_exchange(d, bad, glen, NULL, 0, 0), OMC_ERR_MALFORMED);
    CHECK_EQ(dealer_exchange(d, good, glen, good, glen, 0), OMC_ERR_PROTOCOL);
    {   /* a PULL for a key that is not there, and one naming a data connection that does not exist */
        uint8_t pull[OMC__WIRE_MAX], tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        uint32_t pl = 0;
        memset(&m, 0, sizeof(m));
        m.type = OMC__MSG_PULL; m.xfer = 10; m.incarnation = 1; m.seq = 2; m.key = "s0\x1fs1\x1fnope"; m.key_len = 10;
        m.capacity = 100; m.dp_kind = OMC__DP_TCP; m.desc = tok; m.desc_len = 8;
        CHECK_OK(omc__wire_encode(&m, pull, sizeof(pull), &pl));
        CHECK_EQ(dealer_exchange(d, pull, pl, NULL, 0, 0), OMC_ERR_NOT_FOUND);
        put_bytes(s, "there", 100, 1, 1, 0, NULL);
        m.key = "s0\x1fs1\x1fthere"; m.key_len = 11; m.dp_kind = 7;
        CHECK_OK(omc__wire_encode(&m, pull, sizeof(pull), &pl));
        CHECK_EQ(dealer_exchange(d, pull, pl, NULL, 0, 0), OMC_ERR_UNAVAILABLE);
        m.dp_kind = OMC__DP_TCP;
        CHECK_OK(omc__wire_encode(&m, pull, sizeof(pull), &pl));
        CHECK_EQ(dealer_exchange(d, pull, pl, NULL, 0, 0), OMC_ERR_CONNECTION);
        m.capacity = 99;
        CHECK_OK(omc__wire_encode(&m, pull, sizeof(pull), &pl));
        CHECK_EQ(dealer_exchange(d, pull, pl, NULL, 0, 0), OMC_ERR_TOO_LARGE);
        m.capacity = 100; m.expect_incarnation = omc_incarnation() ^ 1;
        CHECK_OK(omc__wire_encode(&m, pull, sizeof(pull), &pl));
        CHECK_EQ(dealer_exchange(d, pull, pl, NULL, 0, 0), OMC_ERR_PEER_RESTARTED);
    }
    {   /* an oversized frame: libzmq cuts that connection (ZMQ_MAXMSGSIZE), nothing else happens */
        uint8_t* huge = (uint8_t*)calloc(1, 100000);
        zmq_send(d, huge, 100000, 0);
        free(huge);
    }
    /* raw TCP: junk on the side-channel port and on the data port, a truncated data hello, a
       data hello with a bad magic, and a connection that never says anything */
    fd = raw_connect(port);
    CHECK(fd >= 0);
    if (fd >= 0) { CHECK(write(fd, "GET / HTTP/1.1\r\n\r\n", 18) == 18); close(fd); }
    fd = raw_connect(port);
    if (fd >= 0) { uint8_t junk[300]; omc_test_fill(junk, sizeof(junk), 3); CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk)); usleep(50000); close(fd); }
    fd = raw_connect(dport);
    if (fd >= 0) { CHECK(write(fd, "junk", 4) == 4); close(fd); }
    fd = raw_connect(dport);
    if (fd >= 0) {
        uint8_t h[OMC__TCP_HELLO_SIZE], ack[8], nonce[OMC__TCP_NONCE_SIZE], id[OMC__TCP_TICKET_SIZE] = {0}, secret[OMC__TCP_SECRET_SIZE] = {0};
        CHECK(recv(fd, nonce, sizeof(nonce), MSG_WAITALL) == (ssize_t)sizeof(nonce) && omc__get_u32(nonce) == OMC__TCP_NONCE_MAGIC);
        omc__tcp_hello_encode(h, 42, 1, id, secret, nonce + 8);
        h[0] ^= 0xFF;
        CHECK(write(fd, h, sizeof(h)) == (ssize_t)sizeof(h));
        CHECK(read(fd, ack, sizeof(ack)) == 8 && (int32_t)omc__get_u32(ack + 4) == OMC_ERR_MALFORMED);
        close(fd);
    }
    {
        int idle = raw_connect(dport);
        usleep(100000);
        /* the listener still serves: a real receiver gets a real payload */
        omc_conn* r = make_receiver(0);
        REQUIRE(r);
        put_bytes(s, "after", 200000, 91, 1, 0, &meta);
        get_and_verify(r, "after", meta.data, meta.size, 200000, 91);
        omc_meta_free(&meta);
        CHECK_OK(omc_tcp_add_sender(r, "s", "127.0.0.1", port));
        put_bytes(s, "after2", 5000, 92, 1, 0, NULL);
        {
            omc_buffer b;
            CHECK_OK(omc_conn_get(r, "s0", "s1", "after2", NULL, 0, omc_deadline_after_ms(5000), &b));
            CHECK(b.size == 5000 && omc_test_verify(b.data, b.size, 92));
            omc_buffer_release(&b);
        }
        omc_conn_destroy(r);
        if (idle >= 0) close(idle);
    }
    for (i = 0; i < 100; i++) {      /* the listener counts monitor events as they come */
        CHECK_OK(omc_tcp_health(s, &th));
        if (th.handshake_failures >= 1) break;
        usleep(10000);
    }
    CHECK(th.protocol_errors >= 20);
    CHECK(th.handshake_failures >= 1);
    zmq_close(d);
    zmq_ctx_term(ctx);
    omc_conn_destroy(s);
}

/* ---- pushes the sender bounds ------------------------------------------------------------------ */

/* A raw session (DEALER + the library's own codec): HELLO, the ticket from the answer, a data
   connection with a 4 KiB window that nobody drains, and a PULL of 32 MiB with a 60 s budget.
   Want: the sender aborts the push once the receiver has taken no byte for
   OMNICONN_TCP_STALL_MS - ERROR OMC_ERR_TIMEOUT long before the budget - and gives the reader
   back, so a real receiver then gets the payload. */
OMC_TEST(tcp_a_push_whose_receiver_takes_nothing_is_aborted_at_the_stall_timeout) {
    const uint64_t size = 32u << 20;
    omc_conn *s = make_sender(0, 128u << 20), *r = make_receiver(64u << 20);
    void* ctx = zmq_ctx_new();
    void* d = zmq_socket(ctx, ZMQ_DEALER);
    uint8_t buf[OMC__WIRE_MAX], hello[OMC__TCP_HELLO_SIZE], ack[OMC__TCP_ACK_SIZE], desc[8], nonce[OMC__TCP_NONCE_SIZE];
    const uint8_t* ticket;
    uint32_t len = 0, tlen = 0;
    uint16_t port = 0, dport = 0;
    omc__wire m;
    omc_meta meta = {0};
    omc_buffer b;
    zmq_pollitem_t it;
    char ep[64];
    int zero = 0, fd, n, rcv = 4096;
    omc_time_ns t0;
    double waited;
    REQUIRE(s && r && ctx && d);
    put_bytes(s, "k", size, 61, 1, 0, &meta);
    CHECK_OK(omc_tcp_endpoint(s, NULL, 0, &port, &dport));
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", (unsigned)port);
    CHECK(zmq_connect(d, ep) == 0);
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_HELLO; m.xfer = 1; m.incarnation = 7; m.seq = 1; m.caps = OMC_NET_CAP_TCP;
    CHECK_OK(omc__wire_encode(&m, buf, sizeof(buf), &len));
    CHECK(zmq_send(d, buf, len, 0) == (int)len);
    memset(&it, 0, sizeof(it));
    it.socket = d; it.events = ZMQ_POLLIN;
    REQUIRE(zmq_poll(&it, 1, 3000) == 1);
    n = zmq_recv(d, buf, sizeof(buf), 0);
    REQUIRE(n > 0 && omc__wire_decode(buf, (size_t)n, &m) == OMC_OK && m.type == OMC__MSG_HELLO);
    ticket = omc__wire_find_record(&m, OMC__REC_TICKET, &tlen);
    REQUIRE(ticket && tlen == OMC__TCP_TICKET_SIZE + OMC__TCP_SECRET_SIZE);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    {
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET; a.sin_port = htons(dport); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(connect(fd, (struct sockaddr*)&a, sizeof(a)) == 0);
    }
    REQUIRE(recv(fd, nonce, sizeof(nonce), MSG_WAITALL) == (ssize_t)sizeof(nonce));   /* the port speaks first */
    omc__tcp_hello_encode(hello, 0xABCD, 7, ticket, ticket + OMC__TCP_TICKET_SIZE, nonce + 8);
    CHECK(write(fd, hello, sizeof(hello)) == (ssize_t)sizeof(hello));
    CHECK(recv(fd, ack, sizeof(ack), MSG_WAITALL) == (ssize_t)sizeof(ack) && omc__get_u32(ack + 4) == 0);
    omc__put_u64(desc, 0xABCD);
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_PULL; m.xfer = 2; m.incarnation = 7; m.seq = 2; m.capacity = size; m.budget_ms = 60000;
    m.key = "s0\x1fs1\x1fk"; m.key_len = 7; m.dp_kind = OMC__DP_TCP; m.desc = desc; m.desc_len = 8;
    CHECK_OK(omc__wire_encode(&m, buf, sizeof(buf), &len));
    t0 = omc_now_ns();
    CHECK(zmq_send(d, buf, len, 0) == (int)len);
    n = zmq_poll(&it, 1, OMNICONN_TCP_STALL_MS + 4000) == 1 ? zmq_recv(d, buf, sizeof(buf), 0) : -1;
    waited = (double)(omc_now_ns() - t0) / 1e9;
    printf("  push aborted after %.2f s (stall timeout %d ms, budget 60 s)\n", waited, (int)OMNICONN_TCP_STALL_MS);
    CHECK(n > 0 && omc__wire_decode(buf, (size_t)n, &m) == OMC_OK && m.type == OMC__MSG_ERROR && m.code == (int32_t)OMC_ERR_TIMEOUT);
    CHECK(waited >= OMNICONN_TCP_STALL_MS / 1000.0 - 0.5 && waited < OMNICONN_TCP_STALL_MS / 1000.0 + 4.0);
    close(fd);
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k", meta.data, meta.size, omc_deadline_after_ms(10000), &b));
    CHECK(b.size == size && omc_test_verify(b.data, b.size, 61));
    omc_buffer_release(&b);
    omc_meta_free(&meta);
    zmq_close(d);
    zmq_ctx_term(ctx);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- CURVE ------------------------------------------------------------------------------------ */

/* A get that must be refused for want of the right key, at its deadline: OMC_ERR_AUTH with a
   wrong key, OMC_ERR_CONNECTION with no CURVE at all (a dropped handshake, as from a dying peer). */
static void get_refused(omc_conn* r, const omc_meta* m, const char* key, omc_result want) {
    omc_buffer b;
    omc_time_ns t0 = omc_now_ns(), dt;
    CHECK_RES(omc_conn_get(r, "s0", "s1", key, m->data, m->size, omc_deadline_after_ms(600), &b), want);
    dt = omc_now_ns() - t0;
    check_returned_at_deadline(dt, 600, 900);
}

static uint64_t auth_failures_after(omc_conn* s, uint64_t at_least) {
    omc_tcp_health_info th;
    int i;
    for (i = 0; i < 100; i++) {     /* the listener counts monitor events as they come */
        omc_tcp_health(s, &th);
        if (th.auth_failures >= at_least) break;
        usleep(10000);
    }
    return th.auth_failures;
}

OMC_TEST(tcp_curve_right_key_works_wrong_or_none_refused) {
    char spub[41], ssec[41], xpub[41], xsec[41];
    omc_conn *s, *good, *wrong, *none;
    omc_meta m = {0};
    omc_tcp_health_info th;
    omc_buffer b;
    omc_tcp_peer_info ph;
    uint64_t af;
    if (!zmq_has("curve")) { printf("SKIP tcp_curve (libzmq without CURVE)\n"); return; }
    CHECK_OK(omc_tcp_curve_keypair(spub, ssec));
    CHECK_OK(omc_tcp_curve_keypair(xpub, xsec));
    s = make_sender_ex(OMC_ROLE_SENDER, 0, 0, ssec, NULL, 0);
    good = make_receiver_ex(0, spub, NULL);
    wrong = make_receiver_ex(0, xpub, NULL);        /* someone else's server key */
    none = make_receiver(0);                        /* no CURVE at all */
    REQUIRE(s && good && wrong && none);
    CHECK_OK(omc_tcp_health(s, &th));
    CHECK_EQ(th.curve, 1);
    put_bytes(s, "k", 100000, 101, 3, 0, &m);
    get_and_verify(good, "k", m.data, m.size, 100000, 101);
    get_refused(wrong, &m, "k", OMC_ERR_AUTH);
    af = auth_failures_after(s, 1);
    CHECK(af >= 1);
    get_refused(none, &m, "k", OMC_ERR_CONNECTION);
    CHECK(auth_failures_after(s, af + 1) >= af + 1);
    /* refusals consumed nothing: the two readers left still read it */
    get_and_verify(good, "k", m.data, m.size, 100000, 101);
    CHECK_OK(omc_tcp_peer_health(wrong, 0, &ph));
    CHECK(ph.auth_failures >= 1 && ph.last_error == OMC_ERR_AUTH);
    /* metadata-less too, with a per-sender key on a receiver created without CURVE */
    CHECK_OK(omc_tcp_add_sender_key(none, "s", "127.0.0.1", port_of(s), spub));
    CHECK_OK(omc_conn_get(none, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(5000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 101));
    omc_buffer_release(&b);
    CHECK_OK(omc_tcp_add_sender(wrong, "s", "127.0.0.1", port_of(s)));
    put_bytes(s, "k2", 10, 102, 1, 0, NULL);
    CHECK_RES(omc_conn_get(wrong, "s0", "s1", "k2", NULL, 0, omc_deadline_after_ms(500), &b), OMC_ERR_AUTH);
    omc_meta_free(&m);
    omc_conn_destroy(good);
    omc_conn_destroy(wrong);
    omc_conn_destroy(none);
    omc_conn_destroy(s);
}

OMC_TEST(tcp_curve_allowed_clients) {
    char spub[41], ssec[41], apub[41], asec[41], path[64];
    const char* allowed[1];
    omc_conn *s, *a, *intruder;
    omc_meta m = {0};
    FILE* f;
    char key[41];
    if (!zmq_has("curve")) { printf("SKIP tcp_curve_allowed_clients (libzmq without CURVE)\n"); return; }
    CHECK_OK(omc_tcp_curve_keypair(spub, ssec));
    CHECK_OK(omc_tcp_curve_keypair(apub, asec));
    /* keys from files: surrounding whitespace is fine, anything else is not a key */
    snprintf(path, sizeof(path), "/tmp/omc-tcp-key-%ld", (long)getpid());
    f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "  %s\n", spub);
    fclose(f);
    CHECK_OK(omc_tcp_read_key(path, key));
    CHECK(strcmp(key, spub) == 0);
    f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "%s-", spub);
    fclose(f);
    CHECK_RES(omc_tcp_read_key(path, key), OMC_ERR_MALFORMED);
    unlink(path);
    CHECK_RES(omc_tcp_read_key(path, key), OMC_ERR_NOT_FOUND);
    allowed[0] = apub;
    s = make_sender_ex(OMC_ROLE_SENDER, 0, 0, ssec, allowed, 1);
    a = make_receiver_ex(0, spub, asec);
    intruder = make_receiver_ex(0, spub, NULL);     /* knows the server key, is not on the list */
    REQUIRE(s && a && intruder);
    put_bytes(s, "k", 5000, 111, 1, 0, &m);
    get_refused(intruder, &m, "k", OMC_ERR_AUTH);
    CHECK(auth_failures_after(s, 1) >= 1);
    get_and_verify(a, "k", m.data, m.size, 5000, 111);
    omc_meta_free(&m);
    omc_conn_destroy(a);
    omc_conn_destroy(intruder);
    omc_conn_destroy(s);
    {   /* bad keys are refused at create */
        omc_tcp_desc d;
        omc_conn* c = NULL;
        memset(&d, 0, sizeof(d));
        d.curve.secret_key = "not a key";
        CHECK_RES(omc_tcp_create(&d, &c), OMC_ERR_INVALID_ARG);
        CHECK(c == NULL);
    }
}

/* ---- sizes that lie: a fake sender ------------------------------------------------------------- */

/* A call made on another thread while the test closes or destroys the connector under it. */
typedef struct inside_call {
    omc_conn* c;
    const omc_meta* meta;               /* meta_get_main: the metadata of the key "k" */
    omc_result result;
    uint64_t returned;                  /* atomic: the call has returned */
    uint64_t calls;                     /* health loop: calls made */
} inside_call;

static void* meta_get_main(void* arg) {
    inside_call* g = (inside_call*)arg;
    omc_buffer b;
    g->result = omc_conn_get(g->c, "s0", "s1", "k", g->meta->data, g->meta->size, omc_deadline_after_ms(120000), &b);
    if (g->result == OMC_OK) omc_buffer_release(&b);
    __atomic_store_n(&g->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* FAKE LAYER, on purpose: a raw ROUTER socket and a raw TCP listener that speak just enough of the
   protocol to answer HELLO and PULL, and then lie about sizes or break off. A real sender never
   does this, so these faults cannot be produced with the real stack. */
enum { FAKE_HONEST, FAKE_BIGGER_HEADER, FAKE_WRONG_XFER, FAKE_DONE_WRONG, FAKE_SHORT_EOF, FAKE_MORE_BYTES };

typedef struct fake_sender {
    void* ctx;
    void* router;
    int lfd, dfd;
    uint16_t port, dport;
    int mode;                   /* atomic */
    int stop;                   /* atomic */
    int close_hellos;           /* atomic: this many data connections are closed after their hello, unacked */
    int refuse_code;            /* atomic: nonzero: every hello is acked with this code (a refusal) */
    int accepted;               /* atomic: data connections accepted */
    int silent;                 /* atomic: nonzero: data connections are accepted and kept, and never sent a byte */
    int mute_fd[8];             /* those connections (closed at fake_stop) */
    int nmute;
    pthread_t th;
} fake_sender;

static void fake_reply(fake_sender* f, const uint8_t* rid, int rn, omc__wire* m) {
    uint8_t buf[OMC__WIRE_MAX];
    uint32_t len = 0;
    m->incarnation = omc_incarnation();     /* the metadata below names this process */
    if (omc__wire_encode(m, buf, sizeof(buf), &len) != OMC_OK) return;
    zmq_send(f->router, rid, (size_t)rn, ZMQ_SNDMORE);
    zmq_send(f->router, buf, len, 0);
}

static void fake_push(fake_sender* f, const omc__wire* in, const uint8_t* rid, int rn) {
    int mode = __atomic_load_n(&f->mode, __ATOMIC_ACQUIRE);
    uint64_t size = in->capacity, sent_size = size;
    uint8_t hdr[OMC__TCP_HEADER_SIZE], *payload = (uint8_t*)malloc(size + 4096);
    omc__wire m;
    omc_test_fill(payload, size + 4096, 7);
    if (mode == FAKE_BIGGER_HEADER) sent_size = size + 4096;
    omc__tcp_header_encode(hdr, mode == FAKE_WRONG_XFER ? in->xfer + 1 : in->xfer, sent_size);
    if (write(f->dfd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr)) {}
    if (mode == FAKE_SHORT_EOF) {
        if (write(f->dfd, payload, size / 2) < 0) {}
        close(f->dfd);
        f->dfd = -1;
        free(payload);
        return;
    }
    if (write(f->dfd, payload, mode == FAKE_MORE_BYTES || mode == FAKE_BIGGER_HEADER ? size + 4096 : size) < 0) {}
    if (mode == FAKE_HONEST) {      /* the trailer a real sender writes after recording the read */
        uint8_t trl[OMC__TCP_TRAILER_SIZE];
        omc__put_u32(trl, OMC__TCP_END_MAGIC);
        omc__put_u32(trl + 4, 0);
        if (write(f->dfd, trl, sizeof(trl)) < 0) {}
    }
    free(payload);
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_DONE; m.xfer = in->xfer; m.seq = in->seq; m.bytes = mode == FAKE_DONE_WRONG ? size + 1 : size;
    fake_reply(f, rid, rn, &m);
}

static void* fake_main(void* arg) {
    fake_sender* f = (fake_sender*)arg;
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        zmq_pollitem_t it[3];
        int n = 2;
        memset(it, 0, sizeof(it));
        it[0].socket = f->router; it[0].events = ZMQ_POLLIN;
        it[1].fd = f->lfd; it[1].events = ZMQ_POLLIN;
        if (zmq_poll(it, n, 50) <= 0) continue;
        if (it[1].revents) {    /* a data connection: take its hello, ack it */
            uint8_t h[OMC__TCP_HELLO_SIZE], ack[OMC__TCP_ACK_SIZE], nonce[OMC__TCP_NONCE_SIZE], zero16[16] = {0};
            int fd = accept(f->lfd, NULL, NULL);
            if (fd >= 0 && __atomic_load_n(&f->silent, __ATOMIC_ACQUIRE)) {     /* no nonce, ever */
                if (f->nmute < 8) f->mute_fd[f->nmute++] = fd; else close(fd);
                __atomic_add_fetch(&f->accepted, 1, __ATOMIC_ACQ_REL);
                continue;
            }
            if (fd >= 0) __atomic_add_fetch(&f->accepted, 1, __ATOMIC_ACQ_REL);
            omc__tcp_nonce_encode(nonce, zero16);       /* a fake: a fixed nonce, the hello is not checked */
            if (fd >= 0 && write(fd, nonce, sizeof(nonce)) == (ssize_t)sizeof(nonce) &&
                recv(fd, h, sizeof(h), MSG_WAITALL) == (ssize_t)sizeof(h)) {
                if (__atomic_load_n(&f->close_hellos, __ATOMIC_ACQUIRE) > 0) {     /* as an evicted connection */
                    __atomic_sub_fetch(&f->close_hellos, 1, __ATOMIC_ACQ_REL);
                    close(fd);
                    continue;
                }
                omc__put_u32(ack, OMC__TCP_ACK_MAGIC);
                omc__put_u32(ack + 4, (uint32_t)__atomic_load_n(&f->refuse_code, __ATOMIC_ACQUIRE));
                if (__atomic_load_n(&f->refuse_code, __ATOMIC_ACQUIRE)) {
                    if (write(fd, ack, sizeof(ack)) != (ssize_t)sizeof(ack)) {}
                    close(fd);
                    continue;
                }
                if (write(fd, ack, sizeof(ack)) != (ssize_t)sizeof(ack)) {}
                if (f->dfd >= 0) close(f->dfd);
                f->dfd = fd;
            } else if (fd >= 0) close(fd);
        }
        if (it[0].revents) {
            uint8_t rid[256], buf[OMC__WIRE_MAX];
            int rn = zmq_recv(f->router, rid, sizeof(rid), 0), bn = zmq_recv(f->router, buf, sizeof(buf), 0);
            omc__wire in, m;
            if (rn <= 0 || bn <= 0 || omc__wire_decode(buf, (size_t)bn, &in) != OMC_OK) continue;
            memset(&m, 0, sizeof(m));
            m.xfer = in.xfer;
            m.seq = in.seq;
            if (in.type == OMC__MSG_HELLO) {
                uint8_t recs[128], val[4], ticket[OMC__TCP_TICKET_SIZE + OMC__TCP_SECRET_SIZE];
                uint32_t rl = 0, cnt = 0;
                omc__put_u16(val, f->dport);
                omc__put_u16(val + 2, 0);
                memset(ticket, 0x42, sizeof(ticket));
                omc__wire_add_record(recs, sizeof(recs), &rl, &cnt, OMC__DP_TCP, val, 4);
                omc__wire_add_record(recs, sizeof(recs), &rl, &cnt, OMC__REC_TICKET, ticket, sizeof(ticket));
                m.type = OMC__MSG_HELLO; m.caps = OMC_NET_CAP_TCP; m.nrecords = cnt; m.records = recs; m.records_len = rl;
                fake_reply(f, rid, rn, &m);
            } else if (in.type == OMC__MSG_PULL && f->dfd >= 0) fake_push(f, &in, rid, rn);
            else if (in.type == OMC__MSG_LIST) {    /* as a sender of the first release answers a type it does not know */
                m.type = OMC__MSG_ERROR; m.code = (int32_t)OMC_ERR_PROTOCOL; m.text = "unknown message type"; m.text_len = 20;
                fake_reply(f, rid, rn, &m);
            }
        }
    }
    return NULL;
}

static int fake_start(fake_sender* f) {
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    char ep[64];
    size_t n = sizeof(ep);
    int zero = 0;
    memset(f, 0, sizeof(*f));
    f->dfd = -1;
    f->ctx = zmq_ctx_new();
    f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
    zmq_setsockopt(f->router, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_bind(f->router, "tcp://127.0.0.1:*") != 0) return -1;
    zmq_getsockopt(f->router, ZMQ_LAST_ENDPOINT, ep, &n);
    f->port = (uint16_t)atoi(strrchr(ep, ':') + 1);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(f->lfd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(f->lfd, 8) != 0) return -1;
    getsockname(f->lfd, (struct sockaddr*)&a, &al);
    f->dport = ntohs(a.sin_port);
    return pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(fake_sender* f) {
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    pthread_join(f->th, NULL);
    while (f->nmute > 0) close(f->mute_fd[--f->nmute]);
    if (f->dfd >= 0) close(f->dfd);
    close(f->lfd);
    zmq_close(f->router);
    zmq_ctx_term(f->ctx);
}

/* Metadata naming the fake sender (as a real one would write it). */
static void fake_meta(const fake_sender* f, const char* key, uint64_t size, omc_meta* m) {
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    uint8_t* body = NULL;
    omc_qualify_key("s0", "s1", key, qkey, &qlen);
    omc__meta_begin(OMC_TRANSPORT_TCP, 0, size, qkey, qlen, omc__net_meta_body_size("127.0.0.1"), m, &body);
    omc__net_meta_body_encode(body, 1, f->port, OMC_NET_CAP_TCP, "127.0.0.1");
    omc__meta_seal(m);
}

/* The receiver's pool (white box: the connector's own state). */
static omc_pool* omc__net_pool(omc_conn* c) { omc__net* N = omc__net_of(c); return N ? N->pool : NULL; }

static int pool_untouched(omc_conn* r, uint64_t from) {
    omc_pool* pool = omc__net_pool(r);
    const uint8_t* p = (const uint8_t*)omc_pool_base(pool);
    uint64_t i;
    for (i = from; i < omc_pool_size(pool); i++) if (p[i] != 0xEE) return 0;
    return 1;
}

OMC_TEST(tcp_sizes_that_lie_are_rejected) {
    /* untouched: pool bytes from here on must keep their pattern (a header that lies is
       refused before any payload byte is read; otherwise bytes land only inside the destination) */
    static const struct { int mode; omc_result want; uint64_t untouched; } cases[] = {
        { FAKE_BIGGER_HEADER, OMC_ERR_PROTOCOL, 0 }, { FAKE_WRONG_XFER, OMC_ERR_PROTOCOL, 0 },
        { FAKE_DONE_WRONG, OMC_ERR_PROTOCOL, 1000 }, { FAKE_SHORT_EOF, OMC_ERR_CONNECTION, 500 },
        { FAKE_MORE_BYTES, OMC_ERR_PROTOCOL, 1000 }, { FAKE_HONEST, OMC_OK, 1000 }
    };
    fake_sender f;
    omc_conn* r = make_receiver(1u << 20);
    omc_meta m = {0};
    omc_buffer b;
    size_t i;
    REQUIRE(r && fake_start(&f) == 0);
    fake_meta(&f, "k", 1000, &m);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        omc_result res;
        memset(omc_pool_base(omc__net_pool(r)), 0xEE, (size_t)omc_pool_size(omc__net_pool(r)));
        __atomic_store_n(&f.mode, cases[i].mode, __ATOMIC_RELEASE);
        res = omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(3000), &b);
        CHECK_RES(res, cases[i].want);
        if (res == OMC_OK) {
            CHECK(b.size == 1000 && omc_test_verify(b.data, 1000, 7));
            omc_buffer_release(&b);
        }
        CHECK(pool_untouched(r, cases[i].untouched));     /* not one byte past what was announced */
    }
    omc_meta_free(&m);
    {   /* metadata that lies about the size: the destination is what it says, never more */
        fake_meta(&f, "k", 10, &m);
        __atomic_store_n(&f.mode, FAKE_BIGGER_HEADER, __ATOMIC_RELEASE);
        memset(omc_pool_base(omc__net_pool(r)), 0xEE, (size_t)omc_pool_size(omc__net_pool(r)));
        CHECK_RES(omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(3000), &b), OMC_ERR_PROTOCOL);
        CHECK(pool_untouched(r, 0));
        omc_meta_free(&m);
    }
    omc_conn_destroy(r);
    fake_stop(&f);
}

/* A data connection the sender closes after its hello without an ack (what a sender does to a
   connection it evicted while the hello was on its way) is tried again, a bounded number of
   times within the get's deadline; an explicit refusal (an ack with a code) is not. Want: two
   such closes and the get still succeeds (3 connections); closed every time, the get fails
   with OMC_ERR_CONNECTION after exactly OMC__TCP_CONNECT_TRIES connections; refused, after 1. */
OMC_TEST(tcp_a_data_connection_closed_before_its_ack_is_tried_again) {
    static const struct { int closes, code; omc_result want; int conns; } cases[] = {
        { 2, 0, OMC_OK, 3 }, { 1000, 0, OMC_ERR_CONNECTION, OMC__TCP_CONNECT_TRIES },
        { 0, (int)OMC_ERR_BUSY, OMC_ERR_PROTOCOL, 1 }
    };
    fake_sender f;
    omc_meta m = {0};
    size_t i;
    REQUIRE(fake_start(&f) == 0);
    fake_meta(&f, "k", 1000, &m);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        omc_conn* r = make_receiver(1u << 20);      /* a fresh receiver: no data connection cached */
        omc_buffer b;
        omc_result res;
        REQUIRE(r);
        __atomic_store_n(&f.close_hellos, cases[i].closes, __ATOMIC_RELEASE);
        __atomic_store_n(&f.refuse_code, cases[i].code, __ATOMIC_RELEASE);
        __atomic_store_n(&f.accepted, 0, __ATOMIC_RELEASE);
        res = omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(10000), &b);
        CHECK_RES(res, cases[i].want);
        if (res == OMC_OK) {
            CHECK(b.size == 1000 && omc_test_verify(b.data, 1000, 7));
            omc_buffer_release(&b);
        }
        CHECK_EQ(__atomic_load_n(&f.accepted, __ATOMIC_ACQUIRE), cases[i].conns);
        omc_conn_destroy(r);
    }
    __atomic_store_n(&f.close_hellos, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&f.refuse_code, 0, __ATOMIC_RELEASE);
    omc_meta_free(&m);
    fake_stop(&f);
}

/* Counts the receiver's "trying again" log lines: the event that it has entered a retry pause. */
static void count_retry_pauses(omc_log_level l, omc_log_item item, const char* msg, const char* f, int line, void* u) {
    (void)l; (void)item; (void)f; (void)line;
    if (strstr(msg, "trying again in")) __atomic_add_fetch((int*)u, 1, __ATOMIC_ACQ_REL);
}

/* A receiver in its pause before it tries a data connection again (the fake sender closes every
   hello unacked; white box: the first pause lengthened to 30..60 s, the get's deadline 120 s)
   while another thread destroys it. Want: destroy returns promptly - it wakes the pause instead
   of sitting it out - the get says OMC_ERR_CLOSED, and no second connection was tried. */
OMC_TEST(tcp_destroy_wakes_a_receiver_in_its_retry_pause) {
    fake_sender f;
    omc_tcp_desc d;
    omc_conn* r = NULL;
    omc_meta m = {0};
    inside_call g;
    pthread_t t;
    omc_time_ns t0;
    int pauses = 0, i;
    REQUIRE(fake_start(&f) == 0);
    fake_meta(&f, "k", 1000, &m);
    __atomic_store_n(&f.close_hellos, 1000, __ATOMIC_RELEASE);
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_RECEIVER;
    d.pool_size = 1u << 20;
    d.hooks.log_fn = count_retry_pauses;
    d.hooks.max_level = OMC_LOG_DEBUG;
    d.hooks.user_data = &pauses;
    REQUIRE(omc_tcp_create(&d, &r) == OMC_OK);
    omc__net_of(r)->tcp.retry_ms = 60000;
    memset(&g, 0, sizeof(g));
    g.c = r;
    g.meta = &m;
    REQUIRE(pthread_create(&t, NULL, meta_get_main, &g) == 0);
    for (i = 0; i < 3000 && __atomic_load_n(&pauses, __ATOMIC_ACQUIRE) == 0; i++) usleep(10000);   /* the event: it pauses */
    CHECK_EQ(__atomic_load_n(&pauses, __ATOMIC_ACQUIRE), 1);
    t0 = omc_now_ns();
    omc_conn_destroy(r);
    pthread_join(t, NULL);
    printf("  destroy and the get done after %.3f s; the get said %s\n", (double)(omc_now_ns() - t0) / 1e9, omc_result_str(g.result));
    CHECK(omc_now_ns() - t0 < 10 * 1000000000LL);         /* the pause is 30 s at least */
    CHECK_RES(g.result, OMC_ERR_CLOSED);
    CHECK_EQ(__atomic_load_n(&f.accepted, __ATOMIC_ACQUIRE), 1);
    __atomic_store_n(&f.close_hellos, 0, __ATOMIC_RELEASE);
    omc_meta_free(&m);
    fake_stop(&f);
}

/* A receiver that connected to a data port that never says a word (no nonce: a stalled or
   hostile sender) while another thread destroys it; the get's deadline is 120 s. Want: destroy
   returns promptly - the wait for the nonce sees the close - and the get says OMC_ERR_CLOSED. */
OMC_TEST(tcp_destroy_wakes_a_receiver_waiting_on_a_silent_data_port) {
    fake_sender f;
    omc_conn* r = make_receiver(1u << 20);
    omc_meta m = {0};
    inside_call g;
    pthread_t t;
    omc_time_ns t0;
    int i;
    REQUIRE(r && fake_start(&f) == 0);
    fake_meta(&f, "k", 1000, &m);
    __atomic_store_n(&f.silent, 1, __ATOMIC_RELEASE);
    memset(&g, 0, sizeof(g));
    g.c = r;
    g.meta = &m;
    REQUIRE(pthread_create(&t, NULL, meta_get_main, &g) == 0);
    for (i = 0; i < 3000 && __atomic_load_n(&f.accepted, __ATOMIC_ACQUIRE) == 0; i++) usleep(10000);   /* the event: connected */
    CHECK_EQ(__atomic_load_n(&f.accepted, __ATOMIC_ACQUIRE), 1);
    t0 = omc_now_ns();
    omc_conn_destroy(r);
    pthread_join(t, NULL);
    printf("  destroy and the get done after %.3f s; the get said %s\n", (double)(omc_now_ns() - t0) / 1e9, omc_result_str(g.result));
    CHECK(omc_now_ns() - t0 < 10 * 1000000000LL);
    CHECK_RES(g.result, OMC_ERR_CLOSED);
    __atomic_store_n(&f.silent, 0, __ATOMIC_RELEASE);
    omc_meta_free(&m);
    fake_stop(&f);
}

/* exists and list over the side channel; a sender that predates LIST makes list UNAVAILABLE */
OMC_TEST(tcp_list_from_an_older_sender_is_unavailable) {
    fake_sender f;
    omc_conn* r = make_receiver(1u << 20);
    uint64_t n = 7;
    REQUIRE(r && fake_start(&f) == 0);
    CHECK_OK(omc_tcp_add_sender(r, "old", "127.0.0.1", f.port));
    CHECK_RES(omc_conn_list(r, NULL, NULL, NULL, NULL, &n), OMC_ERR_UNAVAILABLE);
    CHECK_EQ(n, 0);
    omc_conn_destroy(r);
    fake_stop(&f);
}

OMC_TEST(tcp_list_pages_through_many_keys) {
    omc_conn* s = make_sender(0, 8u << 20);
    omc_conn* r = make_receiver(1u << 20);
    char host[OMC_TCP_HOST_MAX], key[64];
    uint16_t port = 0;
    uint64_t n = 0;
    omc_payload p;
    int i;
    REQUIRE(s && r);
    CHECK_OK(omc_tcp_endpoint(s, host, sizeof(host), &port, NULL));
    CHECK_OK(omc_tcp_add_sender(r, "s", host, port));
    memset(&p, 0, sizeof(p));
    p.data = "x"; p.size = 1;
    for (i = 0; i < 300; i++) {     /* ~50 bytes a key: several LIST_REPLY pages */
        snprintf(key, sizeof(key), "a-rather-long-key-so-that-pages-fill-up-%04d", i);
        CHECK_OK(omc_conn_put(s, "from", "to", key, &p, NULL));
    }
    CHECK_OK(omc_conn_list(r, "from", "to", NULL, NULL, &n));
    CHECK_EQ(n, 300);
    CHECK_OK(omc_conn_exists(r, "from", "to", "a-rather-long-key-so-that-pages-fill-up-0299"));
    CHECK_RES(omc_conn_exists(r, "from", "to", "absent"), OMC_ERR_NOT_FOUND);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- vLLM-Omni's port table, collisions, hosts, endpoints ------------------------------------------ */

OMC_TEST(tcp_port_offsets_seed_table) {
    omc_port_spec sp[5];
    uint16_t ports[5], p;
    uint32_t a = 9, b = 9;
    int dp, rank, i = 0;
    memset(sp, 0, sizeof(sp));
    for (dp = 0; dp < 2; dp++)
        for (rank = 0; rank < 2; rank++, i++) {
            sp[i].base = 50051; sp[i].purpose = OMC_PORT_KV_TRANSFER; sp[i].from_stage = 0;
            sp[i].dp_index = dp; sp[i].tp_size = 2; sp[i].tp_rank = rank;
        }
    sp[4].base = 50051; sp[4].orchestrator = 1;
    CHECK_OK(omc_port_check(sp, 5, ports, &a, &b));
    CHECK_EQ(ports[0], 50151); CHECK_EQ(ports[1], 50152); CHECK_EQ(ports[2], 50153); CHECK_EQ(ports[3], 50154);
    CHECK_EQ(ports[4], 50251);
    /* base 0 is vLLM-Omni's default; request forwarding sits 100 below KV transfer */
    memset(&sp[0], 0, sizeof(sp[0]));
    CHECK_OK(omc_port_compute(&sp[0], &p));
    CHECK_EQ(p, 50051);
    sp[0].from_stage = 1;
    CHECK_OK(omc_port_compute(&sp[0], &p));
    CHECK_EQ(p, 50052);
    /* a collision: stage 1 DP0 rank 0 lands where stage 0 DP0 rank 1 is (TP 2) */
    memset(sp, 0, sizeof(sp));
    sp[0].purpose = OMC_PORT_KV_TRANSFER; sp[0].tp_size = 2; sp[0].tp_rank = 1;
    sp[1].purpose = OMC_PORT_KV_TRANSFER; sp[1].from_stage = 1;
    CHECK_RES(omc_port_check(sp, 2, NULL, &a, &b), OMC_ERR_EXISTS);
    CHECK(a == 0 && b == 1);
    /* range checks */
    memset(&sp[0], 0, sizeof(sp[0]));
    sp[0].tp_size = 2; sp[0].tp_rank = 2;
    CHECK_RES(omc_port_compute(&sp[0], &p), OMC_ERR_INVALID_ARG);
    sp[0].tp_rank = -1;
    CHECK_RES(omc_port_compute(&sp[0], &p), OMC_ERR_INVALID_ARG);
    memset(&sp[0], 0, sizeof(sp[0]));
    sp[0].purpose = (omc_port_purpose)50;
    CHECK_RES(omc_port_compute(&sp[0], &p), OMC_ERR_INVALID_ARG);
    memset(&sp[0], 0, sizeof(sp[0]));
    sp[0].base = 65500; sp[0].purpose = OMC_PORT_KV_TRANSFER;
    CHECK_RES(omc_port_compute(&sp[0], &p), OMC_ERR_INVALID_ARG);
    memset(&sp[0], 0, sizeof(sp[0]));
    sp[0].dp_index = 50; sp[0].tp_size = 2;     /* offset 100: into the KV transfer range */
    CHECK_RES(omc_port_compute(&sp[0], &p), OMC_ERR_INVALID_ARG);
    sp[0].from_stage = -1; sp[0].dp_index = 0;
    CHECK_RES(omc_port_compute(&sp[0], &p), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_port_compute(NULL, &p), OMC_ERR_INVALID_ARG);
}

OMC_TEST(tcp_host_detection_and_endpoints) {
    char h[64];
    const char* how = NULL;
    uint16_t port = 0;
    struct in_addr a4;
    struct in6_addr a6;
    CHECK_OK(omc_detect_host(4, h, sizeof(h), &how));
    CHECK(how && inet_pton(AF_INET, h, &a4) == 1);
    CHECK(strcmp(how, "loopback") != 0 || strcmp(h, "127.0.0.1") == 0);
    CHECK_OK(omc_detect_host(6, h, sizeof(h), &how));
    CHECK(how && inet_pton(AF_INET6, h, &a6) == 1);
    CHECK_OK(omc_detect_host(0, h, sizeof(h), &how));
    CHECK_RES(omc_detect_host(5, h, sizeof(h), &how), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_detect_host(4, h, 3, &how), OMC_ERR_TOO_LARGE);
    CHECK_OK(omc_tcp_parse_endpoint("10.0.0.7:50151", h, sizeof(h), &port));
    CHECK(strcmp(h, "10.0.0.7") == 0 && port == 50151);
    CHECK_OK(omc_tcp_parse_endpoint("[fe80::1]:9", h, sizeof(h), &port));
    CHECK(strcmp(h, "fe80::1") == 0 && port == 9);
    CHECK_OK(omc_tcp_parse_endpoint("node-3:1", h, sizeof(h), &port));
    CHECK_RES(omc_tcp_parse_endpoint("fe80::1:9", h, sizeof(h), &port), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_tcp_parse_endpoint("host:0", h, sizeof(h), &port), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_tcp_parse_endpoint("host:65536", h, sizeof(h), &port), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_tcp_parse_endpoint("host:12x", h, sizeof(h), &port), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_tcp_parse_endpoint(":12", h, sizeof(h), &port), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_tcp_parse_endpoint("host", h, sizeof(h), &port), OMC_ERR_INVALID_ARG);
}

/* A sender on "auto" and on IPv6 loopback: the advertised host is what receivers reach. */
OMC_TEST(tcp_auto_host_and_ipv6) {
    omc_tcp_desc d;
    omc_conn *s = NULL, *r = make_receiver(0);
    omc_meta m = {0};
    char host[OMC_TCP_HOST_MAX];
    REQUIRE(r);
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_SENDER;
    d.pool_size = 16u << 20;
    d.host = "auto";
    CHECK_OK(omc_tcp_create(&d, &s));
    if (s) {
        CHECK_OK(omc_tcp_endpoint(s, host, sizeof(host), NULL, NULL));
        CHECK(strcmp(host, "auto") != 0 && host[0]);
        put_bytes(s, "k", 3000, 121, 1, 0, &m);
        get_and_verify(r, "k", m.data, m.size, 3000, 121);
        omc_meta_free(&m);
        omc_conn_destroy(s);
    }
    d.host = "::1";
    s = NULL;
    if (omc_tcp_create(&d, &s) == OMC_OK) {      /* hosts without IPv6 loopback skip this half */
        put_bytes(s, "k6", 3000, 122, 1, 0, &m);
        get_and_verify(r, "k6", m.data, m.size, 3000, 122);
        omc_meta_free(&m);
        omc_conn_destroy(s);
    } else printf("SKIP tcp_auto_host_and_ipv6: no IPv6 loopback\n");
    d.host = "no-such-host.invalid";
    s = NULL;
    CHECK_RES(omc_tcp_create(&d, &s), OMC_ERR_INVALID_ARG);
    omc_conn_destroy(r);
}

/* ---- the codec on its own --------------------------------------------------------------------- */

OMC_TEST(tcp_wire_codec_roundtrip_and_limits) {
    uint8_t buf[OMC__WIRE_MAX], recs[64], tok[8] = {0};
    uint32_t len = 0, rl = 0, cnt = 0, t;
    omc__wire m, d;
    static const char key[] = "a\x1f" "b\x1f" "k";
    CHECK_OK(omc__wire_add_record(recs, sizeof(recs), &rl, &cnt, OMC__DP_TCP, (const uint8_t*)"\x39\x30\0\0" "h", 5));
    for (t = OMC__MSG_HELLO; t <= OMC__MSG_LIST_REPLY; t++) {
        memset(&m, 0, sizeof(m));
        m.type = (uint8_t)t; m.xfer = 0x0102030405060708ull; m.incarnation = 99; m.seq = 7;
        m.caps = 3; m.nrecords = cnt; m.records = recs; m.records_len = rl;
        m.wait_ms = 5; m.key = key; m.key_len = 5; m.entry_id = 11; m.size = 12; m.pflags = OMC_BUFFER_FRAME; m.readers_left = 2;
        m.expect_incarnation = 13; m.capacity = 14; m.budget_ms = 15; m.dp_kind = 1; m.desc = tok; m.desc_len = 8;
        m.bytes = 16; m.code = (int32_t)OMC_ERR_STALE; m.detail = 17; m.text = "why"; m.text_len = 3;
        m.cursor = 18; m.nkeys = 1; m.keys = (const uint8_t*)"\x05\x00" "a\x1f" "b\x1f" "k"; m.keys_len = 7;
        CHECK_OK(omc__wire_encode(&m, buf, sizeof(buf), &len));
        CHECK_OK(omc__wire_decode(buf, len, &d));
        CHECK(d.type == t && d.xfer == m.xfer && d.incarnation == 99 && d.seq == 7);
        if (t >= OMC__MSG_LIST) CHECK(d.cursor == 18);
        if (t == OMC__MSG_LIST_REPLY) CHECK(d.nkeys == 1 && d.keys_len == 7 && memcmp(d.keys + 2, key, 5) == 0);
        CHECK_RES(omc__wire_decode(buf, len - 1, &d), OMC_ERR_MALFORMED);
    }
    CHECK_EQ(buf[0], 0x4F);     /* little-endian magic "OMCZ" */
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_QUERY; m.key = key; m.key_len = 0;
    CHECK_RES(omc__wire_encode(&m, buf, sizeof(buf), &len), OMC_ERR_INVALID_ARG);
    m.key_len = 5;
    CHECK_RES(omc__wire_encode(&m, buf, 20, &len), OMC_ERR_TOO_LARGE);
    m.type = OMC__MSG_ERROR; m.code = 5;
    CHECK_RES(omc__wire_encode(&m, buf, sizeof(buf), &len), OMC_ERR_INVALID_ARG);
    {   /* a record count that does not match the records, and a record that runs past the body */
        memset(&m, 0, sizeof(m));
        m.type = OMC__MSG_HELLO; m.nrecords = cnt; m.records = recs; m.records_len = rl;
        CHECK_OK(omc__wire_encode(&m, buf, sizeof(buf), &len));
        buf[32 + 4] = 2;
        CHECK_RES(omc__wire_decode(buf, len, &d), OMC_ERR_MALFORMED);
        buf[32 + 4] = 1;
        buf[32 + 8 + 2] = 6;
        CHECK_RES(omc__wire_decode(buf, len, &d), OMC_ERR_MALFORMED);
    }
}

/* A sender that answers late is slow, not broken: with the sender process stopped (SIGSTOP,
   so it answers nothing until SIGCONT; its port still takes connections), metadata-less gets
   and queries end at their deadline with OMC_ERR_TIMEOUT, never OMC_ERR_CONNECTION - for a
   sender that answered before and for one never heard from; once it runs again the key is
   there. (A sender whose port refuses: tcp_killed_sender_fails_at_deadline.) */
/* Wait until our child pid has really stopped (SIGSTOP is delivered asynchronously: a thread of it
   may still answer a request for a moment on a loaded machine): an event, not a delay. */
static int stopped(pid_t pid) {
    int st = 0;
    return waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st);
}

OMC_TEST(tcp_a_slow_sender_is_a_timeout_not_a_connection_failure) {
    child a = spawn(KIND_SENDER, 0, NULL), c = spawn(KIND_SENDER, 0, NULL);
    uint16_t pa = child_port(&a), pc = child_port(&c);
    omc_conn* r = make_receiver(0);
    omc_conn* r2 = make_receiver(0);
    omc_buffer b;
    omc_tcp_found f;
    uint32_t n = 0;
    int i;
    REQUIRE(r && r2 && pa && pc);
    /* never heard from: stopped before the first question */
    CHECK_OK(omc_tcp_add_sender(r2, "new", "127.0.0.1", pc));
    free(child_put(&c, "n0", 100, 43, 1, 0, &n));
    REQUIRE(kill(c.pid, SIGSTOP) == 0);
    REQUIRE(stopped(c.pid));
    CHECK_RES(omc_conn_get(r2, "s0", "s1", "n0", NULL, 0, omc_deadline_after_ms(300), &b), OMC_ERR_TIMEOUT);
    REQUIRE(kill(c.pid, SIGCONT) == 0);
    CHECK_OK(omc_conn_get(r2, "s0", "s1", "n0", NULL, 0, omc_deadline_after_ms(5000), &b));
    CHECK(b.size == 100 && omc_test_verify(b.data, b.size, 43));
    omc_buffer_release(&b);
    omc_conn_destroy(r2);
    reap(&c, 0);
    /* answered before */
    CHECK_OK(omc_tcp_add_sender(r, "slow", "127.0.0.1", pa));
    free(child_put(&a, "k0", 3000, 41, 1, 0, &n));
    free(child_put(&a, "k1", 3000, 42, 1, 0, &n));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k0", NULL, 0, omc_deadline_after_ms(5000), &b));     /* the channel is up */
    CHECK(b.size == 3000 && omc_test_verify(b.data, b.size, 41));
    omc_buffer_release(&b);
    REQUIRE(kill(a.pid, SIGSTOP) == 0);
    REQUIRE(stopped(a.pid));
    for (i = 0; i < 3; i++) {
        CHECK_RES(omc_conn_get(r, "s0", "s1", "k1", NULL, 0, omc_deadline_after_ms(i ? 2 : 50), &b), OMC_ERR_TIMEOUT);
        CHECK_RES(omc_tcp_query(r, "slow", "s0", "s1", "k1", omc_deadline_after_ms(2), &f), OMC_ERR_TIMEOUT);
    }
    REQUIRE(kill(a.pid, SIGCONT) == 0);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k1", NULL, 0, omc_deadline_after_ms(5000), &b));
    CHECK(b.size == 3000 && omc_test_verify(b.data, b.size, 42));
    omc_buffer_release(&b);
    omc_conn_destroy(r);
    reap(&a, 0);
}

/* A host without libzmq: the test hook $OMNICONN_ZMQ_LIB makes the loader open a library that
   does not exist. Runs in a fresh process (exec of this binary), because a process that already
   loaded libzmq keeps it. The child prints the log line and exits 0 only if the create answered
   UNAVAILABLE and the ERROR names the Debian package. */
static char nozmq_log[1024];
static void nozmq_logger(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level == OMC_LOG_ERROR && !nozmq_log[0]) snprintf(nozmq_log, sizeof(nozmq_log), "%s", message);
}
static void nozmq_child_main(int argc, char** argv) {
    omc_tcp_desc d;
    omc_conn* c = NULL;
    omc_result r;
    char why[512];
    if (argc < 2 || strcmp(argv[1], "--no-libzmq-child") != 0) return;
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_SENDER;
    d.host = "127.0.0.1";
    d.hooks.log_fn = nozmq_logger;
    d.hooks.max_level = OMC_LOG_ERROR;
    r = omc_tcp_create(&d, &c);
    printf("create: %s; log: %s\n", omc_result_name(r), nozmq_log);
    if (omc_available(OMC_FEATURE_ZMQ, why, sizeof(why)) != OMC_ERR_UNAVAILABLE || !strstr(why, "libzmq5")) {
        printf("omc_available(ZMQ) did not report the missing library: %s\n", why);
        exit(1);
    }
    exit(r == OMC_ERR_UNAVAILABLE && !c && strstr(nozmq_log, "libzmq5") && strstr(nozmq_log, "libzmq-missing.so.0") ? 0 : 1);
}

OMC_TEST(a_host_without_libzmq_gets_unavailable_naming_the_package) {
    pid_t pid;
    int st = -1;
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        char* args[] = { (char*)"/proc/self/exe", (char*)"--no-libzmq-child", NULL };
        setenv("OMNICONN_ZMQ_LIB", "libzmq-missing.so.0", 1);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- the key proof's hash --------------------------------------------------------------------- */

static int sha256_is(const void* msg, size_t n, const char* hex) {
    omc__sha256 h;
    uint8_t out[32];
    char got[65];
    int i;
    omc__sha256_init(&h);
    omc__sha256_update(&h, msg, n);
    omc__sha256_final(&h, out);
    for (i = 0; i < 32; i++) snprintf(got + 2 * i, 3, "%02x", out[i]);
    return strcmp(got, hex) == 0;
}

/* SHA-256 padding at every position in a block: the empty message and FIPS 180-4's two-block
   example (56 bytes: the length no longer fits after the 0x80), then every length 0..199 of a
   pattern (byte i of the length-n message is 7i+n), each digest checked against the same message
   fed one byte at a time, and all 200 digests hashed in order: that digest was computed with
   Python's hashlib, an independent implementation. */
OMC_TEST(tcp_key_proof_sha256_pads_every_length_like_fips_180_4) {
    static const char two_block[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    uint8_t msg[200], one[32], bytewise[32];
    omc__sha256 all, h;
    size_t n, i;
    int same = 1;
    CHECK(sha256_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CHECK(sha256_is(two_block, sizeof(two_block) - 1, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    omc__sha256_init(&all);
    for (n = 0; n < sizeof(msg); n++) {
        for (i = 0; i < n; i++) msg[i] = (uint8_t)(i * 7 + n);
        omc__sha256_init(&h);
        omc__sha256_update(&h, msg, n);
        omc__sha256_final(&h, one);
        omc__sha256_init(&h);
        for (i = 0; i < n; i++) omc__sha256_update(&h, msg + i, 1);
        omc__sha256_final(&h, bytewise);
        if (memcmp(one, bytewise, 32) != 0) same = 0;
        omc__sha256_update(&all, one, 32);
    }
    CHECK(same);
    omc__sha256_final(&all, one);
    {
        char hex[65];
        for (i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", one[i]);
        CHECK(strcmp(hex, "8c7c9ff69da76fc28823a1cb97268672663e628e1ea955868b16db46bab0545d") == 0);
    }
}

/* ---- the side channel's libzmq loader, as a companion uses it ------------------------------- */

/* What a companion header that needs libzmq (the RDMA engine's CURVE channel) may use instead of
   a loader of its own: load, version, a PAIR of sockets over inproc set up with the ZMQ_*
   constants (ZMQ_SNDTIMEO read back), a message each way through send/recv and msg_recv, and an
   empty socket's EAGAIN through errnum. */
OMC_TEST(tcp_the_side_channels_libzmq_loader_serves_a_companion) {
    char why[512] = "", buf[16];
    int major = 0, minor = 0, patch = 0, linger = 0, tmo = 100, got = 0;
    size_t n = sizeof(got);
    void *ctx, *a, *b;
    omc__zmq_msg msg;
    REQUIRE(omc__zmq_load(why, sizeof(why)) == OMC_OK);
    omc__zmq_version(&major, &minor, &patch);
    CHECK(major == 4 && minor >= 3);
    ctx = omc__zmq_ctx_new();
    REQUIRE(ctx);
    a = omc__zmq_socket(ctx, ZMQ_PAIR);
    b = omc__zmq_socket(ctx, ZMQ_PAIR);
    REQUIRE(a && b);
    CHECK(omc__zmq_setsockopt(a, ZMQ_LINGER, &linger, sizeof(linger)) == 0);
    CHECK(omc__zmq_setsockopt(b, ZMQ_LINGER, &linger, sizeof(linger)) == 0);
    CHECK(omc__zmq_setsockopt(a, ZMQ_SNDTIMEO, &tmo, sizeof(tmo)) == 0);
    CHECK(omc__zmq_getsockopt(a, ZMQ_SNDTIMEO, &got, &n) == 0 && got == 100);
    CHECK(omc__zmq_bind(a, "inproc://omc-loader-test") == 0);
    CHECK(omc__zmq_connect(b, "inproc://omc-loader-test") == 0);
    CHECK(omc__zmq_send(a, "hello", 5, 0) == 5);
    CHECK(omc__zmq_recv(b, buf, sizeof(buf), 0) == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK(omc__zmq_send(b, "again", 5, 0) == 5);
    CHECK(omc__zmq_msg_init(&msg) == 0);
    CHECK(omc__zmq_msg_recv(&msg, a, 0) == 5);
    CHECK(omc__zmq_msg_size(&msg) == 5 && memcmp(omc__zmq_msg_data(&msg), "again", 5) == 0);
    CHECK(omc__zmq_msg_close(&msg) == 0);
    CHECK(omc__zmq_recv(b, buf, sizeof(buf), ZMQ_DONTWAIT) == -1 && omc__zmq_errnum() == EAGAIN);
    CHECK(omc__zmq_close(a) == 0 && omc__zmq_close(b) == 0);
    CHECK(omc__zmq_ctx_term(ctx) == 0);
}

/* ---- destroy while calls are inside, connectors after fork(), buffers after destroy --------- */

static void* blocked_get_main(void* arg) {
    inside_call* g = (inside_call*)arg;
    omc_buffer b;
    g->result = omc_conn_get(g->c, "s0", "s1", "never-put", NULL, 0, omc_deadline_after_ms(60000), &b);
    if (g->result == OMC_OK) omc_buffer_release(&b);
    __atomic_store_n(&g->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A metadata-less get waits for a key that never comes (60 s deadline) while another thread
   destroys the receiver. Want: the get returns OMC_ERR_CLOSED promptly, destroy returns only
   after it has left (no use after free: run under ASan), well before the get's deadline. */
OMC_TEST(tcp_destroy_from_another_thread_wakes_a_blocked_get_and_waits_for_it) {
    omc_conn *s = make_sender(0, 0), *r = make_receiver(0);
    omc_tcp_health_info th;
    inside_call g;
    pthread_t t;
    omc_time_ns t0;
    int i;
    REQUIRE(s && r);
    CHECK_OK(omc_tcp_add_sender(r, "s", "127.0.0.1", port_of(s)));
    memset(&g, 0, sizeof(g));
    g.c = r;
    REQUIRE(pthread_create(&t, NULL, blocked_get_main, &g) == 0);
    memset(&th, 0, sizeof(th));
    for (i = 0; i < 3000 && th.pending_queries == 0; i++) {   /* an event: the sender holds its QUERY */
        CHECK_OK(omc_tcp_health(s, &th));
        if (th.pending_queries == 0) usleep(10000);
    }
    REQUIRE(th.pending_queries >= 1);
    t0 = omc_now_ns();
    omc_conn_destroy(r);        /* returns once the get has left the library */
    pthread_join(t, NULL);
    printf("  destroy and the get done after %.3f s; the get said %s\n", (double)(omc_now_ns() - t0) / 1e9, omc_result_str(g.result));
    CHECK_RES(g.result, OMC_ERR_CLOSED);
    CHECK(omc_now_ns() - t0 < 30 * 1000000000LL);                  /* not at the get's deadline */
    omc_conn_destroy(s);
}

static void* blocked_query_main(void* arg) {
    inside_call* g = (inside_call*)arg;
    omc_tcp_found f;
    g->result = omc_tcp_query(g->c, "mute", "s0", "s1", "never-put", omc_deadline_after_ms(60000), &f);
    __atomic_store_n(&g->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* omc_tcp_query asks a sender that never answers (a port that accepts connections and says
   nothing: the ZMTP handshake never completes) with a 60 s deadline, while another thread
   destroys the receiver. Want: as for omc_conn_get - the query returns OMC_ERR_CLOSED promptly
   and destroy returns only after it has left (ASan: no use after free of the connector it was
   inside); on a closed connector the omc_tcp_* calls say OMC_ERR_CLOSED. */
OMC_TEST(tcp_destroy_from_another_thread_wakes_a_blocked_query_and_waits_for_it) {
    omc_conn *s = make_sender(0, 0), *r = make_receiver(0);
    omc_tcp_health_info th;
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    struct pollfd pf;
    inside_call g;
    pthread_t t;
    omc_time_ns t0;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), cfd = -1;
    REQUIRE(s && r && lfd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(lfd, (struct sockaddr*)&a, sizeof(a)) == 0 && listen(lfd, 4) == 0 && getsockname(lfd, (struct sockaddr*)&a, &al) == 0);
    CHECK_OK(omc_tcp_add_sender(r, "mute", "127.0.0.1", ntohs(a.sin_port)));
    memset(&g, 0, sizeof(g));
    g.c = r;
    REQUIRE(pthread_create(&t, NULL, blocked_query_main, &g) == 0);
    pf.fd = lfd; pf.events = POLLIN; pf.revents = 0;
    CHECK(poll(&pf, 1, 10000) == 1);            /* an event: the query's channel connected */
    cfd = accept(lfd, NULL, NULL);
    CHECK(cfd >= 0);
    CHECK(__atomic_load_n(&g.returned, __ATOMIC_ACQUIRE) == 0);
    t0 = omc_now_ns();
    omc_conn_destroy(r);
    pthread_join(t, NULL);
    printf("  destroy and the query done after %.3f s; the query said %s\n", (double)(omc_now_ns() - t0) / 1e9, omc_result_str(g.result));
    CHECK_RES(g.result, OMC_ERR_CLOSED);
    CHECK(omc_now_ns() - t0 < 30 * 1000000000LL);
    if (cfd >= 0) close(cfd);
    close(lfd);
    omc_conn_close(s);
    CHECK_RES(omc_tcp_health(s, &th), OMC_ERR_CLOSED);
    CHECK_RES(omc_tcp_endpoint(s, NULL, 0, NULL, NULL), OMC_ERR_CLOSED);
    CHECK_EQ(omc_tcp_peer_count(s), 0);
    CHECK_RES(omc_tcp_health(NULL, &th), OMC_ERR_INVALID_ARG);
    omc_conn_destroy(s);
}

static void* health_loop_main(void* arg) {
    inside_call* g = (inside_call*)arg;
    omc_health h;
    for (;;) {
        g->result = omc_conn_health(g->c, &h);
        g->calls++;
        if (g->result != OMC_OK || h.state == OMC_CONN_CLOSED) break;
    }
    __atomic_store_n(&g->returned, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Health in a loop on two threads (a sender and a receiver with a channel open) while the main
   thread closes them. Want: the loops see OMC_CONN_CLOSED and stop, close tears the transport
   down only after the calls inside have left (TSan: no race between health and the teardown). */
OMC_TEST(tcp_health_in_a_loop_while_close_runs) {
    omc_conn *s = make_sender(0, 0), *r = make_receiver(0);
    inside_call gs, gr;
    pthread_t ts, tr;
    omc_meta m = {0};
    REQUIRE(s && r);
    put_bytes(s, "h", 100000, 5, 1, 0, &m);
    get_and_verify(r, "h", m.data, (uint32_t)m.size, 100000, 5);       /* a channel in the cache */
    omc_meta_free(&m);
    memset(&gs, 0, sizeof(gs)); gs.c = s;
    memset(&gr, 0, sizeof(gr)); gr.c = r;
    REQUIRE(pthread_create(&ts, NULL, health_loop_main, &gs) == 0);
    REQUIRE(pthread_create(&tr, NULL, health_loop_main, &gr) == 0);
    while (__atomic_load_n(&gs.returned, __ATOMIC_ACQUIRE) == 0 && gs.calls < 1000) sched_yield();
    omc_conn_close(r);
    omc_conn_close(s);
    pthread_join(ts, NULL);
    pthread_join(tr, NULL);
    CHECK_OK(gs.result);
    CHECK_OK(gr.result);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* A child made with fork() gets a copy of a live sender and receiver, refuses to use them, destroys
   its copies and exits normally. Want: every call there is refused (OMC_ERR_CLOSED), the child
   exits 0 promptly (no join of threads that are not there, no libzmq), and the parent's entry is
   still readable through its own listener afterwards. */
OMC_TEST(tcp_a_forked_child_that_destroys_its_copy_leaves_the_parents_entries_readable) {
    omc_conn *s = make_sender(0, 0), *r = make_receiver(0);
    omc_meta m = {0}, m2 = {0};
    pid_t pid;
    int st = -1, i;
    REQUIRE(s && r);
    put_bytes(s, "kept", 300000, 77, 1, 0, &m);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        omc_health h;
        omc_buffer b;
        int ok = omc_conn_health(s, &h) == OMC_ERR_CLOSED &&
                 omc_conn_get(r, "s0", "s1", "kept", m.data, m.size, omc_deadline_after_ms(1000), &b) == OMC_ERR_CLOSED;
        omc_conn_destroy(r);
        omc_conn_destroy(s);
        exit(ok ? 0 : 3);                       /* normally: atexit handlers and all */
    }
    for (i = 0; i < 3000 && waitpid(pid, &st, WNOHANG) == 0; i++) usleep(10000);
    if (i == 3000) { kill(pid, SIGKILL); waitpid(pid, &st, 0); }
    CHECK(i < 3000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    get_and_verify(r, "kept", m.data, (uint32_t)m.size, 300000, 77);
    put_bytes(s, "after", 5000, 78, 1, 0, &m2);                      /* the listener still serves */
    get_and_verify(r, "after", m2.data, (uint32_t)m2.size, 5000, 78);
    omc_meta_free(&m);
    omc_meta_free(&m2);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* Buffers from omc_conn_alloc outlive their connector (the manual's promise). Want: after
   destroy the bytes are still writable and readable, and releasing them is OMC_OK (the pool goes
   with the last one; ASan sees no use after unmap). A put of such a buffer still works. */
OMC_TEST(tcp_a_buffer_from_alloc_outlives_its_connector) {
    omc_conn* s = make_sender(0, 0);
    omc_buffer b, b2, b3;
    omc_payload p;
    omc_meta m = {0};
    REQUIRE(s);
    CHECK_OK(omc_conn_alloc(s, 1u << 20, OMC_NO_WAIT, &b));
    CHECK_OK(omc_conn_alloc(s, 4096, OMC_NO_WAIT, &b2));
    CHECK_OK(omc_conn_alloc(s, 4096, OMC_NO_WAIT, &b3));
    memset(&p, 0, sizeof(p));
    p.buffer = &b3;
    p.size = 4096;
    CHECK_OK(omc_conn_put(s, "s0", "s1", "zc", &p, &m));               /* the entry takes b3 */
    omc_meta_free(&m);
    omc_conn_destroy(s);
    memset(b.data, 0xAB, (size_t)b.size);
    CHECK(((const uint8_t*)b.data)[b.size - 1] == 0xAB);
    CHECK_OK(omc_buffer_release(&b));
    CHECK_OK(omc_buffer_release(&b2));
}

/* ---- many receivers at once ------------------------------------------------------------------ */

#define STORM_MAX 512

typedef struct storm_rx {
    omc_conn* r;
    omc_meta m;
    char key[32];
    uint64_t seed;
    pthread_barrier_t* go;
    omc_result res;
    int verified;
} storm_rx;

static void* storm_get_main(void* arg) {
    storm_rx* x = (storm_rx*)arg;
    omc_buffer b;
    memset(&b, 0, sizeof(b));
    pthread_barrier_wait(x->go);
    x->res = omc_conn_get(x->r, "s0", "s1", x->key, x->m.data, x->m.size, omc_deadline_after_ms(60000), &b);
    if (x->res == OMC_OK) {
        x->verified = b.size == 100000 && omc_test_verify(b.data, b.size, x->seed);
        omc_buffer_release(&b);
    }
    return NULL;
}

/* The data port's accept queue: connections the kernel completed that the listener has not
   accepted yet (Linux reports it for a listening socket in tcpi_unacked, its limit in
   tcpi_sacked). -1 if unknown. */
static int storm_accept_queue(int listen_fd, int* limit) {
    struct tcp_info ti;
    socklen_t n = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    if (getsockopt(listen_fd, IPPROTO_TCP, TCP_INFO, &ti, &n) != 0) return -1;
    *limit = (int)ti.tcpi_sacked;
    return (int)ti.tcpi_unacked;
}

/* One sender, N receivers (200; STORM_N overrides) whose first gets - so their first data
   connections - all start together behind a barrier. Each receiver has its ticket already (an
   exists() call said HELLO on the side channel), so the get goes straight to the data port.
   A loaded host is modelled without a sleep: the test holds the sender's TCP plane lock (its
   listener blocks before its next poll, as if descheduled) until the kernel has queued every
   connection it will (the accept queue, read with TCP_INFO), then lets go - so the listener
   meets far more new connections at once than it keeps waiting for their hello (64). Want:
   every get succeeds with its own bytes (100 KB each, over the inline threshold, so every one
   needs a data connection). */
OMC_TEST(tcp_many_receivers_first_gets_at_once_all_succeed) {
    static storm_rx rx[STORM_MAX];
    pthread_t th[STORM_MAX];
    pthread_barrier_t go;
    omc_conn* s = make_sender(0, 64u << 20);
    omc__tcp_plane* T = s ? &omc__net_of(s)->tcp : NULL;
    int n = getenv("STORM_N") ? atoi(getenv("STORM_N")) : 200, i, made = 0, ok = 0, started = 0, shown = 0;
    if (n < 1 || n > STORM_MAX) n = 200;
    REQUIRE(s);
    memset(rx, 0, sizeof(rx));
    for (i = 0; i < n; i++) {
        rx[i].r = make_receiver(1u << 20);
        if (!rx[i].r || omc_tcp_add_sender(rx[i].r, "s0", "127.0.0.1", port_of(s)) != OMC_OK) break;
        snprintf(rx[i].key, sizeof(rx[i].key), "storm-%d", i);
        rx[i].seed = 7000u + (uint64_t)i;
        put_bytes(s, rx[i].key, 100000, rx[i].seed, 1, 0, &rx[i].m);
        if (omc_conn_exists(rx[i].r, "s0", "s1", rx[i].key) != OMC_OK) break;     /* HELLO: the ticket */
        made++;
    }
    CHECK_EQ(made, n);
    REQUIRE(pthread_barrier_init(&go, NULL, (unsigned)made + 1) == 0);
    for (i = 0; i < made; i++) {
        rx[i].go = &go;
        if (pthread_create(&th[i], NULL, storm_get_main, &rx[i]) != 0) break;
        started++;
    }
    REQUIRE(started == made);        /* (else the barrier would never open) */
    pthread_mutex_lock(&T->mu);
    pthread_barrier_wait(&go);
    {   /* an event, bounded: every connection queued, or the queue full (its limit + 1) */
        double end = omc_now_ns() / 1e9 + 20;
        int q = 0, limit = 0;
        while (omc_now_ns() / 1e9 < end) {
            q = storm_accept_queue(T->listen_fd, &limit);
            if (q < 0 || q >= made || (limit > 0 && q > limit)) break;
            usleep(2000);
        }
        printf("  %d receivers, %d connections queued on the data port (accept queue limit %d)\n", made, q, limit);
    }
    pthread_mutex_unlock(&T->mu);
    for (i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (i = 0; i < made; i++) {
        if (rx[i].res == OMC_OK && rx[i].verified) ok++;
        else if (shown++ < 5) fprintf(stderr, "  receiver %d: %s%s\n", i, omc_result_name(rx[i].res), rx[i].res == OMC_OK ? " (wrong bytes)" : "");
    }
    CHECK_EQ(ok, made);
    for (i = 0; i < n; i++) {
        omc_meta_free(&rx[i].m);
        if (rx[i].r) omc_conn_destroy(rx[i].r);
    }
    pthread_barrier_destroy(&go);
    omc_conn_destroy(s);
}

/* ---- many gets at once: a batch, and threads ---------------------------------------------------- */

#define MANY_ENTRIES 48
static uint64_t many_size(int i) { return i % 3 == 0 ? 4096 : i % 3 == 1 ? (64u << 10) + (uint64_t)i : (1u << 20) + (uint64_t)i; }

typedef struct many_rx {
    omc_conn* r;
    omc_meta* m;
    int first, count, ok;
} many_rx;

static void* many_get_main(void* arg) {
    many_rx* x = (many_rx*)arg;
    int i;
    for (i = x->first; i < x->first + x->count; i++) {
        char key[32];
        omc_buffer b;
        snprintf(key, sizeof(key), "t%d", i);
        if (omc_conn_get(x->r, "s0", "s1", key, x->m[i].data, x->m[i].size, omc_deadline_after_ms(30000), &b) != OMC_OK) continue;
        if (b.size == many_size(i) && omc_test_verify(b.data, b.size, 900u + (uint64_t)i)) x->ok++;
        omc_buffer_release(&b);
    }
    return NULL;
}

/* A get_batch of 48 entries (4 KiB inline, 64 KiB, 1 MiB), then 8 threads of one receiver getting
   48 more at once (each on a channel of its own, so requests on several data connections and
   pushes of several sessions at the same time). Want: every item OK with its own bytes, every
   read recorded once (no entry left), nothing in flight afterwards. */
OMC_TEST(tcp_a_get_batch_and_threads_getting_at_once_get_every_byte) {
    static omc_meta tm[MANY_ENTRIES];
    omc_batch_item items[MANY_ENTRIES];
    many_rx rx[8];
    pthread_t th[8];
    omc_conn* s = make_sender(0, 256u << 20);
    omc_conn* r = make_receiver(256u << 20);
    omc_tcp_health_info info;
    omc_health h;
    char keys[MANY_ENTRIES][32];
    int i, ok = 0, started = 0;
    REQUIRE(s && r);
    memset(items, 0, sizeof(items));
    for (i = 0; i < MANY_ENTRIES; i++) {
        snprintf(keys[i], sizeof(keys[i]), "b%d", i);
        put_bytes(s, keys[i], many_size(i), 800u + (uint64_t)i, 1, 0, &items[i].meta);
        items[i].key = keys[i];
    }
    CHECK_OK(omc_conn_get_batch(r, "s0", "s1", items, MANY_ENTRIES, omc_deadline_after_ms(60000)));
    for (i = 0; i < MANY_ENTRIES; i++) {
        if (items[i].result == OMC_OK && items[i].buffer.size == many_size(i) &&
            omc_test_verify(items[i].buffer.data, items[i].buffer.size, 800u + (uint64_t)i)) ok++;
        if (items[i].result == OMC_OK) omc_buffer_release(&items[i].buffer);
        omc_meta_free(&items[i].meta);
    }
    CHECK_EQ(ok, MANY_ENTRIES);
    for (i = 0; i < MANY_ENTRIES; i++) {
        char key[32];
        snprintf(key, sizeof(key), "t%d", i);
        put_bytes(s, key, many_size(i), 900u + (uint64_t)i, 1, 0, &tm[i]);
    }
    for (i = 0; i < 8; i++) {
        rx[i].r = r; rx[i].m = tm; rx[i].first = i * (MANY_ENTRIES / 8); rx[i].count = MANY_ENTRIES / 8; rx[i].ok = 0;
        if (pthread_create(&th[i], NULL, many_get_main, &rx[i]) != 0) break;
        started++;
    }
    ok = 0;
    for (i = 0; i < started; i++) { pthread_join(th[i], NULL); ok += rx[i].ok; }
    CHECK_EQ(started, 8);
    CHECK_EQ(ok, MANY_ENTRIES);
    /* a get returns on the trailer; the sender records the read when the receipt reaches it,
       a moment later: wait for that (an event; 30 s only bounds a hang) */
    for (i = 0; i < 3000; i++) {
        omc_conn_health(s, &h);
        omc_tcp_health(s, &info);
        if (h.live_entries == 0 && info.pushes_in_flight == 0) break;
        usleep(10000);
    }
    CHECK_EQ(h.live_entries, 0);
    CHECK_EQ(info.pushes_in_flight, 0);
    for (i = 0; i < MANY_ENTRIES; i++) omc_meta_free(&tm[i]);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- a batch's gets pipelined on one data connection ------------------------------------------ */

/* Counts the receiver's "N of a batch's M gets ... pipelined" lines: the sum of N, and lines. */
typedef struct pipe_log { int lines, gets; } pipe_log;
static void pipe_logger(omc_log_level lvl, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    pipe_log* pl = (pipe_log*)user;
    unsigned n = 0, m = 0;
    (void)lvl; (void)item; (void)file; (void)line;
    if (strstr(msg, "pipelined on ") && sscanf(msg, "receiver: %u of a batch's %u gets", &n, &m) == 2) {
        __atomic_add_fetch(&pl->lines, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&pl->gets, (int)n, __ATOMIC_RELAXED);
    }
}

static omc_conn* make_logged_receiver(uint64_t pool, pipe_log* pl) {
    omc_tcp_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_RECEIVER;
    d.pool_size = pool;
    d.hooks.log_fn = pipe_logger;
    d.hooks.max_level = OMC_LOG_DEBUG;
    d.hooks.user_data = pl;
    if (omc_tcp_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static uint64_t pipe_size(int i) { return i % 4 == 0 ? 4096 : i % 4 == 1 ? (64u << 10) + (uint64_t)i : i % 4 == 2 ? 300 : (1u << 20) + (uint64_t)i; }

/* Two senders' entries interleaved in one batch, with inline (a CLAIM) and pulled payloads, one
   entry another get already took (a PULL refused in the middle of the pipeline: the stream must
   stay in step), one damaged metadata blob and one metadata-less get. Want: every other item OK
   with its own bytes, the taken one NOT_FOUND, the damaged one refused, the metadata-less one
   found; both senders' runs pipelined (the receiver's log says so for every get of them); every
   read recorded once on both senders (the damaged item's entry stays). */
OMC_TEST(tcp_get_batch_pipelines_each_senders_gets_and_keeps_the_stream_in_step) {
    enum { NB = 40 };
    static omc_batch_item items[NB];
    static char keys[NB][32];
    omc_conn* s[2];
    pipe_log pl = {0, 0};
    omc_conn* r = make_logged_receiver(256u << 20, &pl);
    omc_buffer b;
    omc_health h;
    int i, ok = 0;
    s[0] = make_sender(0, 128u << 20);
    s[1] = make_sender(0, 128u << 20);
    REQUIRE(s[0] && s[1] && r);
    memset(items, 0, sizeof(items));
    for (i = 0; i < NB; i++) {
        snprintf(keys[i], sizeof(keys[i]), "p%d", i);
        items[i].key = keys[i];
        if (i == NB - 1) continue;                          /* metadata-less: found through the registry */
        put_bytes(s[i % 2], keys[i], pipe_size(i), 1300u + (uint64_t)i, 1, 0, &items[i].meta);
    }
    put_bytes(s[1], keys[NB - 1], 5000, 1300u + NB - 1, 1, 0, NULL);
    CHECK_OK(omc_tcp_add_sender(r, "one", "127.0.0.1", port_of(s[1])));
    /* item 5 (64 KiB, pulled) is taken before the batch; item 7's metadata is damaged */
    CHECK_OK(omc_conn_get(r, "s0", "s1", keys[5], items[5].meta.data, items[5].meta.size, omc_deadline_after_ms(30000), &b));
    omc_buffer_release(&b);
    ((uint8_t*)items[7].meta.data)[items[7].meta.size / 2] ^= 0x5A;
    CHECK_RES(omc_conn_get_batch(r, "s0", "s1", items, NB, omc_deadline_after_ms(60000)), OMC_ERR_NOT_FOUND);
    for (i = 0; i < NB; i++) {
        uint64_t want = i == NB - 1 ? 5000 : pipe_size(i);
        if (i == 5) { CHECK_RES(items[i].result, OMC_ERR_NOT_FOUND); CHECK_EQ(items[i].buffer.data, NULL); }
        else if (i == 7) { CHECK(items[i].result != OMC_OK); CHECK_EQ(items[i].buffer.data, NULL); }
        else if (items[i].result == OMC_OK && items[i].buffer.size == want &&
                 omc_test_verify(items[i].buffer.data, items[i].buffer.size, 1300u + (uint64_t)i)) ok++;
        if (items[i].result == OMC_OK) omc_buffer_release(&items[i].buffer);
        omc_meta_free(&items[i].meta);
    }
    CHECK_EQ(ok, NB - 2);
    /* sender 0 had items 0, 2, ..., 38 but 7 is odd (sender 1), so its run is 20 gets; sender 1's
       run is 19 - 1 (the damaged one never reaches the connector): 18. Each run's log line. */
    CHECK_EQ(__atomic_load_n(&pl.lines, __ATOMIC_RELAXED), 2);
    CHECK_EQ(__atomic_load_n(&pl.gets, __ATOMIC_RELAXED), 20 + 18);
    for (i = 0; i < 2; i++) {
        int w;
        for (w = 0; w < 3000; w++) {        /* the last receipt reaches the sender a moment later: the event */
            omc_conn_health(s[i], &h);
            if (h.live_entries == (uint64_t)i) break;
            usleep(10000);
        }
        CHECK_EQ(h.live_entries, (uint64_t)i);     /* sender 1 keeps the damaged item's entry */
    }
    omc_conn_destroy(r);
    omc_conn_destroy(s[0]);
    omc_conn_destroy(s[1]);
}

/* A batch larger than the receiver's pool can hold at once (the caller keeps every buffer until
   the batch returns): 8 gets of 1 MiB into a 4 MiB pool, 10 s for the batch (the gets that find
   no room wait for it until then; the ones that fit need far less). Want: the gets that
   found room succeed; the others fail with a pool result (their requests never went), and stay
   live on the sender: after the buffers are released a second batch gets exactly them. Nothing
   is consumed that was not received. */
OMC_TEST(tcp_get_batch_beyond_the_pool_consumes_only_what_it_received) {
    enum { NB = 8 };
    omc_batch_item items[NB], again[NB];
    char keys[NB][32];
    omc_conn* s = make_sender(0, 64u << 20);
    omc_conn* r = make_receiver(4u << 20);
    omc_health h;
    int i, ok = 0, failed = 0, n = 0, ok2 = 0;
    REQUIRE(s && r);
    memset(items, 0, sizeof(items));
    for (i = 0; i < NB; i++) {
        snprintf(keys[i], sizeof(keys[i]), "big%d", i);
        items[i].key = keys[i];
        put_bytes(s, keys[i], 1u << 20, 1400u + (uint64_t)i, 1, 0, &items[i].meta);
    }
    (void)omc_conn_get_batch(r, "s0", "s1", items, NB, omc_deadline_after_ms(10000));
    for (i = 0; i < NB; i++) {
        if (items[i].result == OMC_OK) {
            if (omc_test_verify(items[i].buffer.data, items[i].buffer.size, 1400u + (uint64_t)i)) ok++;
            omc_buffer_release(&items[i].buffer);
            omc_meta_free(&items[i].meta);
        } else {
            CHECK(items[i].result == OMC_ERR_TIMEOUT || items[i].result == OMC_ERR_POOL_FULL);
            failed++;
            again[n++] = items[i];
        }
    }
    printf("  %d of %d fit the pool, %d failed\n", ok, NB, failed);
    CHECK(ok >= 1);
    CHECK(failed >= 1);
    CHECK_EQ(ok + failed, NB);
    omc_conn_health(s, &h);
    CHECK_EQ(h.live_entries, (uint64_t)failed);      /* nothing consumed that was not received */
    for (i = 0; i < n; i++) {                        /* now there is room: exactly those, one at a time */
        omc_batch_item one[1];
        one[0] = again[i];
        memset(&one[0].buffer, 0, sizeof(one[0].buffer));
        (void)omc_conn_get_batch(r, "s0", "s1", one, 1, omc_deadline_after_ms(60000));
        if (one[0].result == OMC_OK && omc_test_verify(one[0].buffer.data, one[0].buffer.size, 1400u + (uint64_t)(one[0].key[3] - '0'))) ok2++;
        if (one[0].result == OMC_OK) omc_buffer_release(&one[0].buffer);
        omc_meta_free(&again[i].meta);
    }
    CHECK_EQ(ok2, n);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* Two threads run batches at once on one receiver against one sender (each on a channel of its
   own): every item of both arrives intact and is read once. Run under TSan in the suite. */
typedef struct pipe_thread { omc_conn* r; omc_batch_item items[24]; char keys[24][32]; int ok; } pipe_thread;
static void* pipe_batch_main(void* arg) {
    pipe_thread* t = (pipe_thread*)arg;
    int i;
    (void)omc_conn_get_batch(t->r, "s0", "s1", t->items, 24, omc_deadline_after_ms(60000));
    for (i = 0; i < 24; i++) {
        if (t->items[i].result == OMC_OK && t->items[i].buffer.size == pipe_size(i) &&
            omc_test_verify(t->items[i].buffer.data, t->items[i].buffer.size, (uint64_t)(t->keys[i][1] - 'a') * 100u + (uint64_t)i)) t->ok++;
        if (t->items[i].result == OMC_OK) omc_buffer_release(&t->items[i].buffer);
    }
    return NULL;
}

OMC_TEST(tcp_two_threads_batching_at_once_each_get_their_own_bytes) {
    static pipe_thread t[2];
    pthread_t th[2];
    omc_conn* s = make_sender(0, 128u << 20);
    omc_conn* r = make_receiver(128u << 20);
    omc_health h;
    int i, k, started = 0;
    REQUIRE(s && r);
    memset(t, 0, sizeof(t));
    for (k = 0; k < 2; k++) {
        t[k].r = r;
        for (i = 0; i < 24; i++) {
            snprintf(t[k].keys[i], sizeof(t[k].keys[i]), "t%c%d", 'a' + k, i);
            t[k].items[i].key = t[k].keys[i];
            put_bytes(s, t[k].keys[i], pipe_size(i), (uint64_t)k * 100u + (uint64_t)i, 1, 0, &t[k].items[i].meta);
        }
    }
    for (k = 0; k < 2; k++) if (pthread_create(&th[k], NULL, pipe_batch_main, &t[k]) == 0) started++;
    for (k = 0; k < started; k++) pthread_join(th[k], NULL);
    CHECK_EQ(started, 2);
    CHECK_EQ(t[0].ok, 24);
    CHECK_EQ(t[1].ok, 24);
    for (i = 0; i < 3000; i++) {
        omc_conn_health(s, &h);
        if (h.live_entries == 0) break;
        usleep(10000);
    }
    CHECK_EQ(h.live_entries, 0);
    for (k = 0; k < 2; k++) for (i = 0; i < 24; i++) omc_meta_free(&t[k].items[i].meta);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

int main(int argc, char** argv) {
    nozmq_child_main(argc, argv);
    ct_consumer_main(argc, argv, make_from_spec);
    child_main(argc, argv);
    return omc_test_main(argc, argv);
}
