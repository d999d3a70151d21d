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

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>

/* ThreadSanitizer: libzmq is not instrumented, so the hand-off between its I/O thread and ours
   (lock-free queues whose atomics TSan cannot see) is reported as races on the message bytes
   inside libzmq. Ignore exactly what happens inside libzmq; our own code stays checked. */
const char* __tsan_default_suppressions(void);
const char* __tsan_default_suppressions(void) { return "called_from_lib:libzmq.so.5\ncalled_from_lib:libstdc++.so.6\nrace:libzmq.so.5\n"; }

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

/* A receiver process: gets one payload with the metadata it is sent, checks it is pattern `seed`,
   answers "OK" or "ERR name". Repeats until "quit". */
static void receiver_child(ct_env* e, uint64_t seed) {
    omc_conn* r = make_receiver(512u << 20);
    for (;;) {
        uint32_t n = 0;
        char* meta = (char*)ct_recv(e, &n);
        omc_buffer b;
        omc_result res;
        char out[64];
        if (!meta || strcmp(meta, "quit") == 0) { free(meta); break; }
        res = r ? omc_conn_get(r, "s0", "s1", getenv("TCP_KEY") ? getenv("TCP_KEY") : "k", meta, n, omc_deadline_after_ms(30000), &b)
                : OMC_ERR_INTERNAL;
        if (res == OMC_OK && !omc_test_verify(b.data, b.size, seed)) res = OMC_ERR_CHECKSUM;
        if (res == OMC_OK) omc_buffer_release(&b);
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
    for (i = 0; i < 3; i++) {
        uint32_t n = 0;
        char* a = msg_recv(&c[i], &n);
        CHECK(a && strcmp(a, "OK") == 0);
        free(a);
    }
    /* all three read it: it is gone, a fourth reader is told so */
    msg_send(&c[0], m.data, m.size);
    {
        uint32_t n = 0;
        char* a = msg_recv(&c[0], &n);
        CHECK(a && strcmp(a, "ERR OMC_ERR_NOT_FOUND") == 0);
        free(a);
    }
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
    REQUIRE(s);
    omc_conn_health(s, &h0);
    put_bytes(s, "k", big, 51, 1, 1500, &m);
    c = spawn(KIND_RECEIVER, 51, "k");
    msg_send(&c, m.data, m.size);
    seen = wait_in_flight(s);
    kill(c.pid, SIGSTOP);        /* it stops reading: the push is surely in flight now */
    CHECK(seen);
    usleep(100000);
    omc_tcp_health(s, &th);
    CHECK_EQ(th.pushes_in_flight, 1);
    reap(&c, 1);                 /* SIGKILL: its sockets close under the push */
    for (i = 0; i < 500; i++) {
        omc_tcp_health(s, &th);
        if (th.pushes_failed >= 1 && th.pushes_in_flight == 0) break;
        usleep(10000);
    }
    CHECK(th.pushes_failed >= 1 && th.pushes_in_flight == 0);
    CHECK_EQ(th.pushes, 0);
    /* the reader was given back (a failed pull does not consume) ... */
    omc_conn_health(s, &h);
    CHECK_EQ(h.live_entries, 1);
    /* ... and the TTL reclaims the buffer */
    for (i = 0; i < 300; i++) {
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
    {
        uint32_t n = 0;
        char* a = msg_recv(&c, &n);
        CHECK(a && strcmp(a, "OK") == 0);
        free(a);
    }
    reap(&c, 0);
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
    uint32_t n = 0;
    char* a;
    int seen;
    REQUIRE(s);
    put_bytes(s, "k", big, 61, 1, 200, &m);
    c = spawn(KIND_RECEIVER, 61, "k");
    msg_send(&c, m.data, m.size);
    seen = wait_in_flight(s);
    kill(c.pid, SIGSTOP);
    CHECK(seen);
    usleep(400000);             /* the TTL (200 ms) passes while the push is stuck */
    omc_conn_sweep(s);          /* (the listener sweeps on its own too) */
    omc_conn_health(s, &h);
    CHECK_EQ(h.ttl_reclaims, 1);
    CHECK_EQ(h.live_entries, 0);            /* gone from the table ... */
    CHECK(h.pool_in_use >= big);            /* ... but not from the pool */
    kill(c.pid, SIGCONT);
    a = msg_recv(&c, &n);
    CHECK(a && strcmp(a, "OK") == 0);       /* pattern verified in the child */
    free(a);
    omc_conn_health(s, &h);
    CHECK_EQ(h.pool_in_use, 0);
    reap(&c, 0);
    omc_meta_free(&m);
    omc_conn_destroy(s);
}

/* ---- killed and restarted senders ---------------------------------------------------------------- */

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
    CHECK(dt >= 650000000LL && dt < 1200000000LL);
    CHECK_OK(omc_tcp_add_sender(r, "dead", "127.0.0.1", pa));
    t0 = omc_now_ns();
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(500), &b), OMC_ERR_CONNECTION);
    dt = omc_now_ns() - t0;
    CHECK(dt >= 450000000LL && dt < 1000000000LL);
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
        uint8_t h[OMC__TCP_HELLO_SIZE], ack[8];
        omc__tcp_hello_encode(h, 42, 1);
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
    CHECK_OK(omc_tcp_health(s, &th));
    CHECK(th.protocol_errors >= 20);
    CHECK(th.handshake_failures >= 1);
    zmq_close(d);
    zmq_ctx_term(ctx);
    omc_conn_destroy(s);
}

int main(int argc, char** argv) {
    ct_consumer_main(argc, argv, make_from_spec);
    child_main(argc, argv);
    return omc_test_main(argc, argv);
}
