/* xhost_tests.c - the remote connector between two hosts: TCP and RDMA, sender and receiver in
   different kernels, with a sender killed, a link taken down and a sender restarted.

   Runs in the two-guest RDMA bed (tests/rdma/bed.sh --hosts 2, driven by
   tests/rdma/xhost-tests.sh). The same binary runs in both guests:
     host a (OMC_BED_HOST=a)   the driver: every sender, and the test list; prints the results
     host b (OMC_BED_HOST=b)   "--serve": a control server on the control link. Each request is
                               one connection; it forks a child that builds its own receiver
                               connector, runs the receiver's half of a case, checks that
                               nothing leaked, and answers with its count of failed checks
   The halves talk over that control connection (length-prefixed messages, tests/contract.h),
   on a link of its own (ctl) so that taking a data link down never cuts it. Payloads travel
   over rail0 (OMC_RDMA_IP / OMC_RDMA_PEER_IP), by TCP or by RDMA (rxe0).
   Only omniconn's public API is used: omc_tcp_create and omc_rdma_connector_create.

   Outside the two-guest bed it prints a SKIP line and "xhost_tests: 0 passed, 0 failed".
   OMC_TEST_VERBOSE=1 shows the library's log at INFO; otherwise warnings and errors. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"
#include "omc_test.h"
#include "contract.h"
#include "xhost.h"

#define XH_GET_DEADLINE_MS 40000    /* a fault case's get: its result must come inside this */
#define XH_KILL_DEADLINE_MS 20000   /* ... when its sender is killed (RDMA waits for all of it) */

/* XH_RDMA_RAIL1: RDMA on the second rail (rxe1 on rail1, 10.99.1.0/24) */
typedef enum xh_transport { XH_TCP = 0, XH_RDMA = 1, XH_RDMA_RAIL1 = 2 } xh_transport;
static const char* xh_tname(xh_transport t) { return t == XH_RDMA_RAIL1 ? "rdma-rail1" : t == XH_RDMA ? "rdma" : "tcp"; }
static xh_transport xh_tparse(const char* n) {
    return strcmp(n, "rdma-rail1") == 0 ? XH_RDMA_RAIL1 : strcmp(n, "rdma") == 0 ? XH_RDMA : XH_TCP;
}

/* ---- connectors ------------------------------------------------------------------------------ */

/* A sender on rail0 (ports 0 = ephemeral). */
static omc_conn* xh_sender(xh_transport t, uint16_t port, uint16_t data_port, uint64_t pool) {
    omc_conn* c = NULL;
    omc_result r;
    if (t != XH_TCP) {
        omc_rdma_connector_desc d;
        memset(&d, 0, sizeof(d));
        d.net.role = OMC_ROLE_SENDER; d.net.host = my_ip(); d.net.port = port; d.net.data_port = data_port;
        d.net.pool_size = pool; d.net.hooks = xh_hooks();
        d.rdma.devices = my_device(); d.rdma.local_addr = my_ip(); d.rdma.hooks = xh_hooks();
        d.require_rdma = 1;
        r = omc_rdma_connector_create(&d, &c);
    } else {
        omc_tcp_desc d;
        memset(&d, 0, sizeof(d));
        d.role = OMC_ROLE_SENDER; d.host = my_ip(); d.port = port; d.data_port = data_port;
        d.pool_size = pool; d.hooks = xh_hooks();
        r = omc_tcp_create(&d, &c);
    }
    if (r != OMC_OK) { fprintf(stderr, "  %s sender on %s:%u: %s\n", xh_tname(t), my_ip(), port, omc_result_name(r)); return NULL; }
    return c;
}

/* A receiver on rail0 that knows the sender at spec ("host:port") as "producer", with its
   channel opened before the case starts (a long-lived consumer has one). */
static omc_conn* xh_receiver(xh_transport t, const char* spec, uint64_t pool) {
    char host[256];
    uint16_t port;
    omc_conn* c = NULL;
    omc_result r;
    omc_tcp_found found;
    if (omc_tcp_parse_endpoint(spec, host, sizeof(host), &port) != OMC_OK) return NULL;
    if (t != XH_TCP) {
        omc_rdma_connector_desc d;
        memset(&d, 0, sizeof(d));
        d.net.role = OMC_ROLE_RECEIVER; d.net.host = my_ip(); d.net.pool_size = pool; d.net.hooks = xh_hooks();
        d.rdma.devices = my_device(); d.rdma.local_addr = my_ip(); d.rdma.hooks = xh_hooks();
        d.require_rdma = 1;
        r = omc_rdma_connector_create(&d, &c);
    } else {
        omc_tcp_desc d;
        memset(&d, 0, sizeof(d));
        d.role = OMC_ROLE_RECEIVER; d.host = my_ip(); d.pool_size = pool; d.hooks = xh_hooks();
        r = omc_tcp_create(&d, &c);
    }
    if (r != OMC_OK) { fprintf(stderr, "  %s receiver: %s\n", xh_tname(t), omc_result_name(r)); return NULL; }
    if (omc_tcp_add_sender(c, "producer", host, port) != OMC_OK) { omc_conn_destroy(c); return NULL; }
    omc_tcp_query(c, "producer", "warm", "up", "channel", omc_deadline_after_ms(20000), &found);
    return c;
}

/* ---- fault cases: both halves ---------------------------------------------------------------- */

/* Every fault case moves a payload big enough that it is still in flight when the fault hits
   (Soft-RoCE under TCG moves about 10-40 MB/s, TCP between the guests somewhat more). */
#define XH_BIG (48 * MIB)
#define XH_SMALL (4 * MIB + 123)

static uint64_t g_seed = 100;

/* The documented codes a get may end with when its sender dies or its link fails: those of the
   remote connector (omniconn.h), over TCP and RDMA alike (the RDMA plane reports the engine's
   codes as OMC_ERR_CONNECTION and keeps the detail in the health's last error text). */
static int fault_code_ok(xh_transport t, omc_result r) {
    (void)t;
    return r == OMC_OK || r == OMC_ERR_CONNECTION || r == OMC_ERR_TIMEOUT;
}

/* Receiver half shared by the fault cases: get key with meta, report the code, verify on OK. */
static omc_result b_get_checked(ct_env* e, omc_conn* c, const char* key, const void* meta, uint32_t n, uint64_t size, uint64_t seed,
                                int64_t deadline_ms, const char* label) {
    omc_buffer b;
    omc_time_ns t0 = omc_now_ns();
    omc_result r;
    double dt;
    memset(&b, 0, sizeof(b));
    r = omc_conn_get(c, e->from, e->to, key, meta, n, omc_deadline_after_ms(deadline_ms), &b);
    dt = (double)(omc_now_ns() - t0) / 1e9;
    printf("  %s: get returned %s after %.2f s\n", label, omc_result_name(r), dt);
    fflush(stdout);
    CHECK(dt * 1000.0 < (double)(deadline_ms + XH_SLACK_MS));
    if (r == OMC_OK) {
        CHECK_EQ(b.size, size);
        CHECK(b.data && b.size == size && omc_test_verify(b.data, b.size, seed));
        CHECK_OK(omc_buffer_release(&b));
    } else {
        CHECK(b.data == NULL);
    }
    return r;
}

/* A sender in its own process (this binary re-executed with "--sender"): it puts size bytes of
   seed under key and reports the endpoint and the metadata through a socket, then waits to be
   killed. Returns its pid (or -1); *meta and spec are filled from that socket. */
static int sender_main(int argc, char** argv) {
    omc_conn* c;
    omc_payload pl;
    omc_meta m = {0};
    ct_env pe;
    char sp[300];
    uint16_t bound = 0;
    uint64_t size, seed;
    void* data;
    if (argc < 11) return 2;
    memset(&pe, 0, sizeof(pe));
    pe.fd = atoi(argv[10]);
    size = strtoull(argv[8], NULL, 10);
    seed = strtoull(argv[9], NULL, 10);
    g_rail = xh_tparse(argv[2]) == XH_RDMA_RAIL1;
    c = xh_sender(xh_tparse(argv[2]), (uint16_t)atoi(argv[3]), (uint16_t)atoi(argv[4]), size * 2 + 16 * MIB);
    if (!c) return 3;
    omc_tcp_endpoint(c, NULL, 0, &bound, NULL);
    snprintf(sp, sizeof(sp), "%s:%u", my_ip(), bound);
    data = malloc(size);
    if (!data) return 4;
    omc_test_fill(data, size, seed);
    memset(&pl, 0, sizeof(pl));
    pl.data = data; pl.size = size; pl.ttl_ms = -1;
    if (omc_conn_put(c, argv[5], argv[6], argv[7], &pl, &m) != OMC_OK) return 5;
    free(data);
    ct_send(&pe, sp, (uint32_t)strlen(sp));
    ct_send(&pe, m.data, (uint32_t)m.size);
    for (;;) pause();
}

static pid_t spawn_sender(xh_transport t, uint16_t port, uint16_t data_port, const char* from, const char* to, const char* key,
                          uint64_t size, uint64_t seed, char** meta, uint32_t* meta_len, char* spec, size_t spec_cap) {
    int p[2];
    pid_t pid;
    ct_env pe;
    char* s;
    char a_port[16], a_dport[16], a_size[32], a_seed[32], a_fd[16];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) != 0) return -1;   /* contract.h messages use send/recv */
    snprintf(a_port, sizeof(a_port), "%u", port);
    snprintf(a_dport, sizeof(a_dport), "%u", data_port);
    snprintf(a_size, sizeof(a_size), "%llu", (unsigned long long)size);
    snprintf(a_seed, sizeof(a_seed), "%llu", (unsigned long long)seed);
    snprintf(a_fd, sizeof(a_fd), "%d", p[1]);
    fflush(stdout); fflush(stderr);
    pid = fork();
    if (pid == 0) {
        char* args[12];
        close(p[0]);
        args[0] = (char*)"/proc/self/exe"; args[1] = (char*)"--sender"; args[2] = (char*)xh_tname(t);
        args[3] = a_port; args[4] = a_dport; args[5] = (char*)from; args[6] = (char*)to; args[7] = (char*)key;
        args[8] = a_size; args[9] = a_seed; args[10] = a_fd; args[11] = NULL;
        execv("/proc/self/exe", args);
        _exit(101);
    }
    close(p[1]);
    if (pid < 0) { close(p[0]); return -1; }
    memset(&pe, 0, sizeof(pe));
    pe.fd = p[0];
    s = (char*)ct_recv(&pe, NULL);
    *meta = (char*)ct_recv(&pe, meta_len);
    close(p[0]);
    if (!s || !*meta) {
        int st;
        free(s); free(*meta); *meta = NULL;
        kill(pid, SIGKILL); waitpid(pid, &st, 0);
        fprintf(stderr, "  the sender process did not start (%s %d)\n", WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        return -1;
    }
    snprintf(spec, spec_cap, "%s", s);
    free(s);
    return pid;
}

static void reap(pid_t pid) {
    int st;
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
}

/* 1. The sender's process is killed while a 48 MiB get is in flight: the get ends inside its
   20 s deadline with a documented code and no buffer (or, if the bytes all arrived first,
   OMC_OK with the bytes checked). */
static void a_sender_killed(ct_env* e, xh_transport t) {
    char spec[300], *meta = NULL, *m;
    uint32_t n = 0;
    pid_t pid = spawn_sender(t, 0, 0, e->from, e->to, e->key, XH_BIG, g_seed, &meta, &n, spec, sizeof(spec));
    REQUIRE(pid > 0);
    CHECK(ctl_sendf(e->fd, "%s", spec) == 0);
    CHECK(ct_send(e, meta, n) == 0);
    free(meta);
    m = ctl_recv(e->fd);                    /* "getting": the get starts now */
    CHECK(m && strcmp(m, "getting") == 0);
    free(m);
    usleep(400000);
    reap(pid);
    printf("  sender process killed 0.4 s into the get\n");
    fflush(stdout);
}

static void b_sender_killed(ct_env* e, xh_transport t) {
    char* spec = ctl_recv(e->fd);
    uint32_t n = 0;
    char* meta = (char*)ct_recv(e, &n);
    xh_usage before = usage_now();
    omc_conn* c;
    omc_result r;
    REQUIRE(spec && meta);
    c = xh_receiver(t, spec, XH_BIG + 16 * MIB);
    REQUIRE(c != NULL);
    ct_say(e, "getting");
    r = b_get_checked(e, c, e->key, meta, n, XH_BIG, g_seed, XH_KILL_DEADLINE_MS, "sender killed mid-transfer");
    CHECK(fault_code_ok(t, r));
    if (r == OMC_OK) printf("  note: the transfer finished before the kill\n");
    b_check_pool_empty(c);
    omc_conn_destroy(c);
    check_no_leak("receiver (sender killed)", before);
    free(spec); free(meta);
}

/* 2. rail0 goes down (on the sender's host) during a 48 MiB get and comes back 3 s later; the
   get ends with a documented code, and the next get over the same receiver works. */
static void a_link_down(ct_env* e, xh_transport t) {
    omc_conn* s;
    omc_payload pl;
    omc_meta m = {0};
    char spec[300], *msg;
    uint16_t port = 0;
    void* data = malloc(XH_BIG);
    char key2[96];
    xh_usage before = usage_now();
    REQUIRE(data);
    s = xh_sender(t, 0, 0, 2 * XH_BIG);
    if (!s) { free(data); REQUIRE(s); }
    CHECK_OK(omc_tcp_endpoint(s, NULL, 0, &port, NULL));
    snprintf(spec, sizeof(spec), "%s:%u", my_ip(), port);
    CHECK(ctl_sendf(e->fd, "%s", spec) == 0);
    omc_test_fill(data, XH_BIG, g_seed);
    memset(&pl, 0, sizeof(pl));
    pl.data = data; pl.size = XH_BIG;
    CHECK_OK(omc_conn_put(s, e->from, e->to, e->key, &pl, &m));
    ct_send_meta(e, &m);
    omc_meta_free(&m);
    msg = ctl_recv(e->fd);
    CHECK(msg && strcmp(msg, "getting") == 0);
    free(msg);
    usleep(400000);
    CHECK_EQ(link_cmd("rail0", "down"), 0);
    printf("  rail0 down 0.4 s into the get\n");
    fflush(stdout);
    sleep(3);
    CHECK_EQ(link_cmd("rail0", "up"), 0);
    CHECK(wait_port_active(env_or("OMC_RDMA_DEVICE", "rxe0"), 20000));
    printf("  rail0 up again after 3 s\n");
    fflush(stdout);
    ct_expect(e, "first done");
    /* after the flap: a new payload over the same sender and receiver */
    snprintf(key2, sizeof(key2), "%s.after", e->key);
    omc_test_fill(data, XH_SMALL, g_seed + 1);
    pl.size = XH_SMALL;
    CHECK_OK(omc_conn_put(s, e->from, e->to, key2, &pl, &m));
    ct_send_meta(e, &m);
    omc_meta_free(&m);
    ct_expect(e, "done");
    omc_conn_cleanup(s, e->from, e->to, e->key);   /* the first payload, if its get failed */
    omc_conn_destroy(s);
    free(data);
    check_no_leak("sender (link down)", before);
}

static void b_link_down(ct_env* e, xh_transport t) {
    char* spec = ctl_recv(e->fd);
    uint32_t n = 0, n2 = 0;
    char *meta, *meta2, key2[96];
    xh_usage before = usage_now();
    omc_conn* c;
    omc_result r;
    REQUIRE(spec);
    c = xh_receiver(t, spec, XH_BIG + 16 * MIB);
    REQUIRE(c != NULL);
    meta = (char*)ct_recv(e, &n);
    REQUIRE(meta);
    ct_say(e, "getting");
    r = b_get_checked(e, c, e->key, meta, n, XH_BIG, g_seed, XH_GET_DEADLINE_MS, "rail0 down for 3 s mid-transfer");
    CHECK(fault_code_ok(t, r));
    ct_say(e, "first done");
    meta2 = (char*)ct_recv(e, &n2);
    REQUIRE(meta2);
    snprintf(key2, sizeof(key2), "%s.after", e->key);
    r = b_get_checked(e, c, key2, meta2, n2, XH_SMALL, g_seed + 1, XH_GET_DEADLINE_MS, "after the link came back");
    CHECK_OK(r);
    ct_say(e, "done");
    b_check_pool_empty(c);
    omc_conn_destroy(c);
    check_no_leak("receiver (link down)", before);
    free(spec); free(meta); free(meta2);
}

/* 3. A sender restarts with the same ports: the old metadata gets OMC_ERR_PEER_RESTARTED, the
   new put (same key) arrives intact through the same receiver, which counts the restart. */
static void a_restart(ct_env* e, xh_transport t) {
    char spec[300], spec2[300], *meta = NULL;
    uint32_t n = 0;
    uint16_t port = (uint16_t)(7800 + 10 * (int)t), data_port = (uint16_t)(port + 1);
    pid_t pid = spawn_sender(t, port, data_port, e->from, e->to, e->key, XH_SMALL, g_seed, &meta, &n, spec, sizeof(spec));
    REQUIRE(pid > 0);
    CHECK(ctl_sendf(e->fd, "%s", spec) == 0);
    CHECK(ct_send(e, meta, n) == 0);
    free(meta); meta = NULL;
    ct_expect(e, "got first");
    reap(pid);
    pid = spawn_sender(t, port, data_port, e->from, e->to, e->key, XH_SMALL, g_seed + 2, &meta, &n, spec2, sizeof(spec2));
    CHECK(pid > 0);
    if (pid <= 0) { ctl_sendf(e->fd, "no sender"); return; }
    CHECK(strcmp(spec, spec2) == 0);
    printf("  restarted sender on the same ports %u/%u\n", port, data_port);
    fflush(stdout);
    CHECK(ct_send(e, meta, n) == 0);
    free(meta);
    ct_expect(e, "done");
    reap(pid);
}

static void b_restart(ct_env* e, xh_transport t) {
    char* spec = ctl_recv(e->fd);
    uint32_t n = 0, n2 = 0;
    char *meta, *meta2;
    xh_usage before = usage_now();
    omc_conn* c;
    omc_tcp_peer_info pi;
    uint32_t i;
    uint64_t restarts = 0;
    REQUIRE(spec);
    meta = (char*)ct_recv(e, &n);
    REQUIRE(meta);
    c = xh_receiver(t, spec, 32 * MIB);
    REQUIRE(c != NULL);
    CHECK_OK(b_get_checked(e, c, e->key, meta, n, XH_SMALL, g_seed, XH_GET_DEADLINE_MS, "first sender"));
    ct_say(e, "got first");
    meta2 = (char*)ct_recv(e, &n2);
    REQUIRE(meta2 && strcmp(meta2, "no sender") != 0);
    /* the old metadata names the dead incarnation: refused, nothing consumed */
    CHECK_RES(b_get_checked(e, c, e->key, meta, n, XH_SMALL, g_seed, 20000, "old metadata after the restart"), OMC_ERR_PEER_RESTARTED);
    CHECK_OK(b_get_checked(e, c, e->key, meta2, n2, XH_SMALL, g_seed + 2, XH_GET_DEADLINE_MS, "restarted sender"));
    for (i = 0; i < omc_tcp_peer_count(c); i++)
        if (omc_tcp_peer_health(c, i, &pi) == OMC_OK) restarts += pi.restarts;
    printf("  restarts seen by the receiver: %llu\n", (unsigned long long)restarts);
    CHECK(restarts >= 1);
    ct_say(e, "done");
    b_check_pool_empty(c);
    omc_conn_destroy(c);
    check_no_leak("receiver (sender restart)", before);
    free(spec); free(meta); free(meta2);
}

typedef struct xh_case {
    const char* name;
    void (*a)(ct_env* e, xh_transport t);
    void (*b)(ct_env* e, xh_transport t);
} xh_case;

static const xh_case xh_cases[] = {
    { "sender_killed_mid_transfer", a_sender_killed, b_sender_killed },
    { "link_down_mid_transfer", a_link_down, b_link_down },
    { "sender_restarts_on_the_same_ports", a_restart, b_restart },
};
#define XH_NCASES ((int)(sizeof(xh_cases) / sizeof(xh_cases[0])))

/* ---- host b: the control server ------------------------------------------------------------ */

/* One request in a child (xhost.h's xh_serve): "ct T INDEX KEY SPEC" (a contract case's consumer
   half, with a receiver built here) or "xh T INDEX KEY SEED" (a fault case's receiver half). */
static void serve_request(int fd, const char* req) {
    char kind[8], tn[16], key[64], spec[300];
    int index = -1, k;
    xh_transport t;
    ct_env e;
    memset(&e, 0, sizeof(e));
    e.fd = fd; e.side = 1; e.from = "stage0"; e.to = "stage1";
    spec[0] = 0;
    k = sscanf(req, "%7s %15s %d %63s %299s", kind, tn, &index, key, spec);
    if (k < 4) { OMC_TEST_FAIL(); fprintf(stderr, "  bad request '%s'\n", req); return; }
    t = xh_tparse(tn);
    g_rail = t == XH_RDMA_RAIL1;
    snprintf(e.key, sizeof(e.key), "%s", key);
    if (strcmp(kind, "ct") == 0 && index >= 0 && index < CT_NCASES && k == 5) {
        xh_usage before = usage_now();
        omc_conn* c = xh_receiver(t, spec, 64 * MIB);
        if (!c) { OMC_TEST_FAIL(); fprintf(stderr, "  cannot make a %s receiver for %s\n", tn, spec); }
        else {
            e.conn = c;
            ct_cases[index].consumer(&e);
            omc_conn_destroy(c);
            check_no_leak("receiver", before);
        }
    } else if (strcmp(kind, "xh") == 0 && index >= 0 && index < XH_NCASES && k == 5) {
        g_seed = strtoull(spec, NULL, 10);      /* the fifth word is the case's seed */
        xh_cases[index].b(&e, t);
    } else {
        OMC_TEST_FAIL();
        fprintf(stderr, "  unknown request '%s'\n", req);
    }
}

/* The connector contract (tests/contract.h) with the consumer on the other host. */
static void contract_across_hosts(xh_transport t) {
    omc_conn* prod;
    char spec[300];
    uint16_t port = 0;
    int i;
    xh_usage before = usage_now();
    omc_time_ns t0 = omc_now_ns();
    prod = xh_sender(t, 0, 0, 64 * MIB);
    REQUIRE(prod != NULL);
    CHECK_EQ(omc_conn_transport(prod), t != XH_TCP ? OMC_TRANSPORT_RDMA : OMC_TRANSPORT_TCP);
    CHECK_OK(omc_tcp_endpoint(prod, NULL, 0, &port, NULL));
    snprintf(spec, sizeof(spec), "%s:%u", my_ip(), port);
    for (i = 0; i < CT_NCASES; i++) {
        char name[160];
        int fd, before_checks = __atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED);
        ct_env pe;
        if (getenv("CT_FILTER") && !strstr(ct_cases[i].name, getenv("CT_FILTER"))) continue;
        snprintf(name, sizeof(name), "cross-host.%s.%s", xh_tname(t), ct_cases[i].name);
        memset(&pe, 0, sizeof(pe));
        pe.conn = prod; pe.side = 0; pe.from = "stage0"; pe.to = "stage1";
        make_key(pe.key, sizeof(pe.key), "ct");
        fd = ctl_connect();
        if (fd < 0) { OMC_TEST_FAIL(); fprintf(stderr, "  no control connection to host b\n"); omc_test_sub(name, 1); continue; }
        pe.fd = fd;
        if (ctl_sendf(fd, "ct %s %d %s %s", xh_tname(t), i, pe.key, spec) == 0) {
            ct_cases[i].producer(&pe);
            collect_peer(fd, name);
        } else OMC_TEST_FAIL();
        close(fd);
        omc_test_sub(name, __atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED) - before_checks);
    }
    if (t != XH_TCP) {
        omc_rdma_connector_info info;
        CHECK_OK(omc_rdma_connector_query(prod, &info));
        printf("  sender: RDMA %s on %s, %llu connections accepted, %llu pushes (%llu bytes) over RDMA, %llu failed\n",
               info.rdma_enabled ? "on" : "off", info.engine.device, (unsigned long long)info.accepted,
               (unsigned long long)info.pushes, (unsigned long long)info.push_bytes, (unsigned long long)info.push_failures);
        CHECK(info.rdma_enabled);
        CHECK(strcmp(info.engine.device, my_device()) == 0);   /* the rail asked for */
        CHECK(info.accepted > 0);
        CHECK(info.pushes >= 30);       /* the payloads crossed by RDMA, not TCP */
        CHECK_EQ(info.push_failures, 0);
    }
    omc_conn_destroy(prod);
    check_no_leak("sender", before);
    printf("  contract over %s across hosts: %.1f s\n", xh_tname(t), (double)(omc_now_ns() - t0) / 1e9);
}

static void fault_case(int index, xh_transport t) {
    char name[160];
    int fd, before_checks = __atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED);
    ct_env pe;
    omc_time_ns t0 = omc_now_ns();
    snprintf(name, sizeof(name), "cross-host.%s.%s", xh_tname(t), xh_cases[index].name);
    memset(&pe, 0, sizeof(pe));
    pe.side = 0; pe.from = "stage0"; pe.to = "stage1";
    make_key(pe.key, sizeof(pe.key), "fault");
    fd = ctl_connect();
    if (fd < 0) { OMC_TEST_FAIL(); fprintf(stderr, "  no control connection to host b\n"); omc_test_sub(name, 1); return; }
    pe.fd = fd;
    g_seed++;
    if (ctl_sendf(fd, "xh %s %d %s %llu", xh_tname(t), index, pe.key, (unsigned long long)g_seed) == 0) {
        xh_cases[index].a(&pe, t);
        collect_peer(fd, name);
    } else OMC_TEST_FAIL();
    close(fd);
    printf("  %s: %.1f s\n", name, (double)(omc_now_ns() - t0) / 1e9);
    omc_test_sub(name, __atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED) - before_checks);
}

OMC_TEST(contract_tcp_across_hosts) { if (on_two_hosts()) contract_across_hosts(XH_TCP); }
OMC_TEST(contract_rdma_across_hosts) { if (on_two_hosts()) contract_across_hosts(XH_RDMA); }
OMC_TEST(faults_tcp_across_hosts) { int i; if (on_two_hosts()) for (i = 0; i < XH_NCASES; i++) fault_case(i, XH_TCP); }
/* The second rail on its own: the engine on rxe1 / rail1 carries the contract just as well
   (what a multi-rail engine builds on). */
OMC_TEST(contract_rdma_rail1_across_hosts) {
    if (!on_two_hosts()) return;
    if (atoi(env_or("OMC_BED_RAILS", "1")) < 2) { printf("  skipped: the bed has one rail (%s)\n", env_or("OMC_BED_RAIL_NOTE", "")); return; }
    g_rail = 1;
    contract_across_hosts(XH_RDMA_RAIL1);
    g_rail = 0;
}
OMC_TEST(faults_rdma_across_hosts) { int i; if (on_two_hosts()) for (i = 0; i < XH_NCASES; i++) fault_case(i, XH_RDMA); }

int main(int argc, char** argv) {
    int rc;
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1 && strcmp(argv[1], "--serve") == 0) return xh_serve(serve_request);
    if (argc > 1 && strcmp(argv[1], "--sender") == 0) return sender_main(argc, argv);
    if (!is_host_a()) {
        printf("SKIP cross-host tests (not host a of the two-guest bed: run through tests/rdma/xhost-tests.sh)\n");
        printf("xhost_tests: 0 passed, 0 failed\n");
        return 0;
    }
    rc = omc_test_main(argc, argv);
    xh_quit_server();
    return rc;
}
