/* test_xfer.c - the transfer engine (omc_xfer_*: registered memory, batched READ and WRITE,
   notifications) between two engines over real sockets: in one process, and across two
   processes (fork) for the paged-KV copy and a peer that restarts. Over TCP on loopback by
   default; on the RDMA bed (OMC_RDMA_DEVICE set, or OMC_XFER_TEST_TRANSPORT=rdma) the same
   cases run over verbs. The listener's hostile-input cases speak the wire format by hand. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"
#include "omc_test.h"
#include <signal.h>
#include <sys/wait.h>

OMC_TEST_TSAN_IGNORE_LIBZMQ()

#define BLOCK (32u * 1024u)
#define NBLOCKS 256u

static omc_xfer_transport transport(void) {
    const char* t = getenv("OMC_XFER_TEST_TRANSPORT");
    if (t && strcmp(t, "rdma") == 0) return OMC_XFER_TRANSPORT_RDMA;
    if (!t && getenv("OMC_RDMA_DEVICE")) return OMC_XFER_TRANSPORT_RDMA;
    return OMC_XFER_TRANSPORT_TCP;
}

static omc_xfer* engine(uint32_t port) {
    omc_xfer_desc d;
    omc_xfer* x = NULL;
    memset(&d, 0, sizeof(d));
    d.transport = transport();
    d.port = port;
    d.io_timeout_ms = 3000;
    if (d.transport == OMC_XFER_TRANSPORT_RDMA) {
        d.host = getenv("OMC_RDMA_IP") ? getenv("OMC_RDMA_IP") : "127.0.0.1";
        d.rdma.devices = getenv("OMC_RDMA_DEVICE");
        d.rdma.max_rails = 1;
    }
    CHECK_OK(omc_xfer_create(&d, &x));
    return x;
}

static uint8_t* pages(size_t n) {
    void* p = NULL;
    if (posix_memalign(&p, 4096, n) != 0) return NULL;
    memset(p, 0, n);
    return (uint8_t*)p;
}

/* ---- descriptor codec ------------------------------------------------------------------------ */

OMC_TEST(descriptor_round_trips_and_refuses_garbage) {
    static omc_xfer_descriptor d, e;
    uint8_t buf[OMC_XFER_DESC_MAX];
    size_t n = 0, i;
    memset(&d, 0, sizeof(d));
    d.incarnation = 0x1234567890abcdefull;
    snprintf(d.host, sizeof(d.host), "10.0.0.5");
    d.port = 7000;
    d.rails = 2;
    d.count = 3;
    for (i = 0; i < 3; i++) { d.range[i].addr = 0x10000 * (i + 1); d.range[i].length = 4096; d.range[i].id = (uint32_t)i + 1;
                              d.range[i].rkey[0] = 0x100 + (uint32_t)i; d.range[i].rkey[1] = 0x200 + (uint32_t)i; }
    CHECK_OK(omc_xfer_descriptor_encode(&d, buf, sizeof(buf), &n));
    CHECK_EQ(n, OMC_XFER_DESC_HEADER + 8 + 3 * (OMC_XFER_DESC_RANGE + 8) + 4);
    CHECK_OK(omc_xfer_descriptor_decode(buf, n, &e));
    CHECK_EQ(e.incarnation, d.incarnation);
    CHECK(strcmp(e.host, "10.0.0.5") == 0);
    CHECK_EQ(e.count, 3);
    CHECK_EQ(e.range[2].rkey[1], 0x202);
    CHECK_EQ(e.range[1].id, 2);
    CHECK_RES(omc_xfer_descriptor_encode(&d, buf, n - 1, &n), OMC_ERR_TOO_LARGE);
    CHECK_OK(omc_xfer_descriptor_encode(&d, buf, sizeof(buf), &n));
    for (i = 0; i < n; i++) {           /* every flipped byte is refused, never crashes */
        buf[i] ^= 0x5a;
        CHECK(omc_xfer_descriptor_decode(buf, n, &e) != OMC_OK);
        buf[i] ^= 0x5a;
    }
    for (i = 0; i < n; i++) CHECK(omc_xfer_descriptor_decode(buf, i, &e) != OMC_OK);   /* every truncation */
    buf[4] = 9;
    CHECK_RES(omc_xfer_descriptor_decode(buf, n, &e), OMC_ERR_VERSION);
    d.range[0].length = 0;
    CHECK_RES(omc_xfer_descriptor_encode(&d, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
}

OMC_TEST(traffic_class_and_service_level_settings_parse) {
    uint8_t v[OMC_RDMA_MAX_RAILS] = { 7, 7, 7, 7 };
    CHECK_OK(omc_rdma_parse_qos(NULL, 255, v));
    CHECK_EQ(v[0], 7);
    CHECK_OK(omc_rdma_parse_qos("106", 255, v));
    CHECK(v[0] == 106 && v[3] == 106);
    CHECK_OK(omc_rdma_parse_qos("106, 96", 255, v));
    CHECK(v[0] == 106 && v[1] == 96 && v[2] == 96 && v[3] == 96);
    CHECK_RES(omc_rdma_parse_qos("256", 255, v), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_parse_qos("16", 15, v), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_parse_qos("3,", 15, v), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_parse_qos("a", 15, v), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_parse_qos("1,2,3,4,5", 15, v), OMC_ERR_INVALID_ARG);
    CHECK(v[0] == 106 && v[1] == 96);   /* unchanged after a refusal */
}

/* ---- one process, two engines ---------------------------------------------------------------- */

typedef struct pair_t { omc_xfer *a, *b; omc_xfer_peer* p; uint8_t *ma, *mb; size_t n; } pair_t;

static int pair_open(pair_t* t, size_t n) {
    omc_xfer_info ib;
    memset(t, 0, sizeof(*t));
    t->n = n;
    t->a = engine(0);
    t->b = engine(0);
    t->ma = pages(n);
    t->mb = pages(n);
    if (!t->a || !t->b || !t->ma || !t->mb) return 0;
    CHECK_OK(omc_xfer_register(t->a, t->ma, n, 0));
    CHECK_OK(omc_xfer_register(t->b, t->mb, n, 0));
    CHECK_OK(omc_xfer_query(t->b, &ib));
    CHECK_OK(omc_xfer_peer_open(t->a, ib.name, omc_deadline_after_ms(5000), &t->p));
    return t->p != NULL;
}

static void pair_close(pair_t* t) {
    omc_xfer_peer_close(t->p);
    if (t->a) omc_xfer_destroy(t->a);
    if (t->b) omc_xfer_destroy(t->b);
    free(t->ma);
    free(t->mb);
}

OMC_TEST(batched_write_and_read_of_scattered_blocks_with_a_notification) {
    pair_t t;
    omc_xfer_entry e[64];
    omc_result st[64];
    omc_xfer_notif nf[2];
    uint32_t i;
    REQUIRE(pair_open(&t, 64 * 8192));
    omc_test_fill(t.ma, t.n, 1);
    for (i = 0; i < 64; i++) {          /* block i goes to slot (i * 37) % 64 */
        e[i].local = t.ma + (size_t)i * 8192;
        e[i].remote = (uint64_t)(uintptr_t)(t.mb + (size_t)((i * 37) % 64) * 8192);
        e[i].length = 8192 - i;
    }
    CHECK_OK(omc_xfer_run(t.p, OMC_XFER_WRITE, e, 64, "kv-ready", 8, omc_deadline_after_ms(10000), st));
    for (i = 0; i < 64; i++) {
        CHECK_EQ(st[i], OMC_OK);
        CHECK(memcmp(t.mb + (size_t)((i * 37) % 64) * 8192, t.ma + (size_t)i * 8192, 8192 - i) == 0);
    }
    CHECK_EQ(omc_xfer_notifs(t.b, nf, 2), 1);       /* once, after the data */
    CHECK(nf[0].length == 8 && memcmp(nf[0].data, "kv-ready", 8) == 0);
    CHECK(strstr(nf[0].peer, ":") != NULL);
    memset(t.ma, 0, t.n);               /* and back with READ */
    CHECK_OK(omc_xfer_run(t.p, OMC_XFER_READ, e, 64, NULL, 0, omc_deadline_after_ms(10000), st));
    omc_test_fill(t.mb, 0, 0);
    for (i = 0; i < 64; i++) CHECK(memcmp(t.ma + (size_t)i * 8192, t.mb + (size_t)((i * 37) % 64) * 8192, 8192 - i) == 0);
    CHECK_EQ(omc_xfer_notifs(t.b, nf, 2), 0);
    pair_close(&t);
}

OMC_TEST(out_of_range_and_unregistered_entries_are_refused_before_anything_moves) {
    pair_t t;
    omc_xfer_entry e[3];
    omc_result st[3];
    uint8_t stack_mem[64];
    REQUIRE(pair_open(&t, 65536));
    omc_test_fill(t.ma, t.n, 2);
    e[0].local = t.ma; e[0].remote = (uint64_t)(uintptr_t)t.mb; e[0].length = 4096;
    e[1].local = t.ma; e[1].remote = (uint64_t)(uintptr_t)t.mb + t.n - 100; e[1].length = 4096;   /* runs past the end */
    e[2].local = t.ma; e[2].remote = (uint64_t)(uintptr_t)t.mb - 1; e[2].length = 1;            /* one byte before */
    CHECK_RES(omc_xfer_run(t.p, OMC_XFER_WRITE, e, 3, NULL, 0, omc_deadline_after_ms(5000), st), OMC_ERR_RDMA_ACCESS);
    CHECK_EQ(st[0], OMC_ERR_CLOSED);
    CHECK_EQ(st[1], OMC_ERR_RDMA_ACCESS);
    CHECK_EQ(st[2], OMC_ERR_RDMA_ACCESS);
    CHECK(t.mb[0] == 0);                /* nothing moved */
    e[0].local = stack_mem;             /* local memory not registered */
    CHECK_RES(omc_xfer_run(t.p, OMC_XFER_READ, e, 1, NULL, 0, omc_deadline_after_ms(5000), st), OMC_ERR_INVALID_ARG);
    e[0].local = t.ma; e[0].length = 0;
    CHECK_RES(omc_xfer_run(t.p, OMC_XFER_READ, e, 1, NULL, 0, omc_deadline_after_ms(5000), st), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_xfer_run(t.p, (omc_xfer_op)9, e, 1, NULL, 0, omc_deadline_after_ms(5000), st), OMC_ERR_INVALID_ARG);
    pair_close(&t);
}

OMC_TEST(a_range_unregistered_at_the_target_is_stale) {
    pair_t t;
    omc_xfer_entry e;
    omc_result st;
    REQUIRE(pair_open(&t, 65536));
    e.local = t.ma; e.remote = (uint64_t)(uintptr_t)t.mb; e.length = 4096;
    CHECK_OK(omc_xfer_run(t.p, OMC_XFER_WRITE, &e, 1, NULL, 0, omc_deadline_after_ms(5000), &st));
    CHECK_OK(omc_xfer_unregister(t.b, t.mb));
    CHECK_RES(omc_xfer_unregister(t.b, t.mb), OMC_ERR_NOT_FOUND);
    /* the descriptor we hold still lists it: the target refuses (TCP: stale; RDMA: the key is gone) */
    CHECK_RES(omc_xfer_run(t.p, OMC_XFER_WRITE, &e, 1, NULL, 0, omc_deadline_after_ms(5000), &st),
              transport() == OMC_XFER_TRANSPORT_TCP ? OMC_ERR_STALE : OMC_ERR_RDMA_ACCESS);
    CHECK_OK(omc_xfer_register(t.b, t.mb, t.n, 0));         /* registered again: a new range id */
    CHECK_OK(omc_xfer_peer_refresh(t.p, omc_deadline_after_ms(5000)));
    CHECK_OK(omc_xfer_run(t.p, OMC_XFER_WRITE, &e, 1, NULL, 0, omc_deadline_after_ms(5000), &st));
    pair_close(&t);
}

OMC_TEST(unregister_of_local_memory_while_a_batch_runs_is_busy_and_cancel_stops_the_batch) {
    pair_t t;
    omc_xfer_entry* e;
    omc_result* st;
    omc_xfer_batch* b = NULL;
    omc_result r, unreg;
    uint32_t i, n = 4096, ok = 0, closed = 0;
    REQUIRE(pair_open(&t, (size_t)64 << 20));
    e = (omc_xfer_entry*)calloc(n, sizeof(*e));
    st = (omc_result*)calloc(n, sizeof(*st));
    for (i = 0; i < n; i++) { e[i].local = t.ma + (size_t)(i % 64) * (1 << 20); e[i].remote = (uint64_t)(uintptr_t)(t.mb + (size_t)(i % 64) * (1 << 20)); e[i].length = 1 << 20; }
    CHECK_OK(omc_xfer_submit(t.p, OMC_XFER_WRITE, e, n, "never", 5, omc_deadline_after_ms(60000), &b));
    REQUIRE(b != NULL);
    unreg = omc_xfer_unregister(t.a, t.ma);     /* the batch holds the range from submit until it ends (4 GiB) */
    omc_xfer_batch_cancel(b);
    r = omc_xfer_batch_wait(b, omc_deadline_after_ms(20000));
    CHECK_EQ(unreg, OMC_ERR_BUSY);
    CHECK_RES(r, OMC_ERR_CLOSED);
    CHECK_OK(omc_xfer_batch_status(b, st, n));
    for (i = 0; i < n; i++) { ok += st[i] == OMC_OK; closed += st[i] == OMC_ERR_CLOSED; }
    CHECK(closed > 0);
    CHECK_EQ(ok + closed, n);           /* every entry is done or cancelled, nothing else */
    omc_xfer_batch_destroy(b);
    {   omc_xfer_notif nf; CHECK_EQ(omc_xfer_notifs(t.b, &nf, 1), 0); }   /* no notification for a cancelled batch */
    CHECK_OK(omc_xfer_unregister(t.a, t.ma));   /* free once the batch is over */
    CHECK_OK(omc_xfer_register(t.a, t.ma, t.n, 0));
    /* the peer works again after the cancel (RDMA: a new connection) */
    CHECK_OK(omc_xfer_run(t.p, OMC_XFER_READ, e, 8, NULL, 0, omc_deadline_after_ms(20000), st));
    free(e);
    free(st);
    pair_close(&t);
}

OMC_TEST(async_batches_report_busy_then_their_result) {
    pair_t t;
    omc_xfer_entry e[16];
    omc_xfer_batch* b[4];
    omc_result st[16];
    uint32_t i, k;
    REQUIRE(pair_open(&t, 1 << 20));
    omc_test_fill(t.ma, t.n, 5);
    for (k = 0; k < 4; k++) {
        for (i = 0; i < 16; i++) { e[i].local = t.ma + (k * 16 + i) * 4096; e[i].remote = (uint64_t)(uintptr_t)(t.mb + (k * 16 + i) * 4096); e[i].length = 4096; }
        CHECK_OK(omc_xfer_submit(t.p, OMC_XFER_WRITE, e, 16, NULL, 0, omc_deadline_after_ms(10000), &b[k]));
    }
    for (k = 0; k < 4; k++) {
        omc_result r = omc_xfer_batch_test(b[k]);
        CHECK(r == OMC_OK || r == OMC_ERR_BUSY);
        CHECK_OK(omc_xfer_batch_wait(b[k], omc_deadline_after_ms(10000)));
        CHECK_OK(omc_xfer_batch_test(b[k]));
        CHECK_OK(omc_xfer_batch_status(b[k], st, 16));
        omc_xfer_batch_destroy(b[k]);
    }
    CHECK(memcmp(t.ma, t.mb, 64 * 4096) == 0);
    pair_close(&t);
}

/* ---- the listener against hostile clients ---------------------------------------------------- */

static int dial(uint32_t port) {
    int fd = -1;
    CHECK_OK(omc__xfer_dial_until("127.0.0.1", port, omc_deadline_after_ms(3000), NULL, &fd));
    return fd;
}

/* send bytes, read the 32-byte answer (status) or see the connection close (returns 1) */
static int exchange(int fd, const void* req, size_t n, omc_result* st) {
    uint8_t a[OMC_XFER_RPC_HEADER];
    if (n && omc__xfer_io(fd, (void*)(uintptr_t)req, n, 1, omc_deadline_after_ms(3000), NULL, NULL) != OMC_OK) return 1;
    if (omc__xfer_io(fd, a, sizeof(a), 0, omc_deadline_after_ms(3000), NULL, NULL) != OMC_OK) return 1;
    CHECK_EQ(omc__get_u32(a), OMC_XFER_RPC_ANSWER);
    *st = (omc_result)(int32_t)omc__get_u32(a + 12);
    return 0;
}

OMC_TEST(listener_survives_garbage_and_lying_sizes) {
    omc_xfer_desc d;
    omc_xfer* x = NULL;
    omc_xfer_info in;
    uint8_t h[OMC_XFER_RPC_HEADER], junk[300];
    uint8_t* mem = pages(65536);
    omc_result st = OMC_OK;
    int fd, i;
    memset(&d, 0, sizeof(d));
    d.transport = OMC_XFER_TRANSPORT_TCP;
    d.io_timeout_ms = 500;
    d.max_clients = 4;
    REQUIRE(omc_xfer_create(&d, &x) == OMC_OK);
    CHECK_OK(omc_xfer_register(x, mem, 65536, 0));
    CHECK_OK(omc_xfer_query(x, &in));
    /* random garbage: an answer saying PROTOCOL, then the connection closes */
    fd = dial(in.port);
    for (i = 0; i < (int)sizeof(junk); i++) junk[i] = omc_test_byte(9, (uint64_t)i);
    CHECK(exchange(fd, junk, sizeof(junk), &st) == 0 && st == OMC_ERR_PROTOCOL);
    close(fd);
    /* a HELLO that claims 1 GiB of name */
    fd = dial(in.port);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 1, 0, 0, 0, (uint64_t)1 << 30);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_MALFORMED);
    close(fd);
    /* READ past the range, of a range that does not exist, of 0 bytes: refused, connection stays */
    fd = dial(in.port);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 2, 1, 1, (uint64_t)(uintptr_t)mem + 65000, 1000);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_RDMA_ACCESS);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 2, 2, 77, (uint64_t)(uintptr_t)mem, 10);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_STALE);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 2, 3, 1, (uint64_t)(uintptr_t)mem, 0);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_MALFORMED);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 2, 4, 1, UINT64_MAX - 5, 100);   /* wraps around */
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_RDMA_ACCESS);
    /* a WRITE outside: its bytes are read and dropped, the connection goes on */
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 3, 5, 1, (uint64_t)(uintptr_t)mem + 65536, sizeof(junk));
    CHECK(omc__xfer_io(fd, h, sizeof(h), 1, omc_deadline_after_ms(3000), NULL, NULL) == OMC_OK);
    CHECK(exchange(fd, junk, sizeof(junk), &st) == 0 && st == OMC_ERR_RDMA_ACCESS);
    /* a WRITE that claims 1 TiB outside: closed without reading it */
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 3, 6, 1, 0, (uint64_t)1 << 40);
    CHECK(exchange(fd, h, sizeof(h), &st) != 0 || st != OMC_OK);
    close(fd);
    /* a header cut short: dropped after the I/O timeout, no hang */
    fd = dial(in.port);
    CHECK(omc__xfer_io(fd, h, 10, 1, omc_deadline_after_ms(3000), NULL, NULL) == OMC_OK);
    CHECK(exchange(fd, NULL, 0, &st) != 0);
    close(fd);
    /* an unknown type and a wrong version */
    fd = dial(in.port);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 99, 0, 0, 0, 0);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_PROTOCOL);
    close(fd);
    fd = dial(in.port);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 1, 0, 0, 0, 4);
    h[4] = 7;
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_VERSION);
    close(fd);
    /* a notification over the bound */
    fd = dial(in.port);
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, 4, 0, 0, 0, OMC_XFER_NOTIFY_MAX + 1);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0 && st == OMC_ERR_MALFORMED);
    close(fd);
    CHECK_OK(omc_xfer_query(x, &in));
    CHECK(in.refused >= 10);
    CHECK_EQ(in.notifies, 0);
    /* and it still serves a real peer */
    {
        omc_xfer* y = NULL;
        omc_xfer_peer* p = NULL;
        uint8_t* m2 = pages(4096);
        omc_xfer_entry e;
        CHECK_OK(omc_xfer_create(&d, &y));
        CHECK_OK(omc_xfer_register(y, m2, 4096, 0));
        omc_test_fill(mem, 4096, 3);
        CHECK_OK(omc_xfer_peer_open(y, in.name, omc_deadline_after_ms(3000), &p));
        e.local = m2; e.remote = (uint64_t)(uintptr_t)mem; e.length = 4096;
        CHECK_OK(omc_xfer_run(p, OMC_XFER_READ, &e, 1, NULL, 0, omc_deadline_after_ms(3000), NULL));
        CHECK(memcmp(m2, mem, 4096) == 0);
        omc_xfer_peer_close(p);
        omc_xfer_destroy(y);
        free(m2);
    }
    omc_xfer_destroy(x);
    free(mem);
}

OMC_TEST(peer_names_and_descriptors_from_elsewhere) {
    omc_xfer* x = engine(0);
    omc_xfer_peer* p = NULL;
    uint8_t junk[64];
    REQUIRE(x != NULL);
    CHECK_RES(omc_xfer_peer_open(x, "no-port", omc_deadline_after_ms(1000), &p), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_xfer_peer_open(x, "127.0.0.1:0", omc_deadline_after_ms(1000), &p), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_xfer_peer_open(x, "127.0.0.1:1", omc_deadline_after_ms(2000), &p), OMC_ERR_CONNECTION);
    memset(junk, 0x41, sizeof(junk));
    CHECK_RES(omc_xfer_peer_import(x, junk, sizeof(junk), &p), OMC_ERR_MALFORMED);
    CHECK(p == NULL);
    omc_xfer_destroy(x);
}

/* ---- two processes --------------------------------------------------------------------------- */

/* The target: registers a region, fills it, prints its descriptor's size and bytes on fd, then
   waits until told to stop (its stdin closes) or killed. */
static void target_main(int out_fd, int in_fd, uint32_t port, uint64_t seed) {
    omc_xfer* x = engine(port);
    uint8_t* mem = pages((size_t)NBLOCKS * BLOCK * 2);
    uint8_t desc[OMC_XFER_DESC_MAX];
    size_t n = 0;
    char c;
    if (!x || !mem) _exit(2);
    omc_test_fill(mem, (size_t)NBLOCKS * BLOCK * 2, seed);
    if (omc_xfer_register(x, mem, (size_t)NBLOCKS * BLOCK * 2, 0) != OMC_OK) _exit(3);
    if (omc_xfer_export(x, desc, sizeof(desc), &n) != OMC_OK) _exit(4);
    if (write(out_fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || write(out_fd, desc, n) != (ssize_t)n) _exit(5);
    while (read(in_fd, &c, 1) > 0) {}
    omc_xfer_destroy(x);
    _exit(0);
}

typedef struct child_t { pid_t pid; int to; uint8_t desc[OMC_XFER_DESC_MAX]; size_t n; } child_t;

static int spawn(child_t* c, uint32_t port, uint64_t seed) {
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) return 0;
    c->pid = fork();
    if (c->pid == 0) {      /* a fresh process image: no threads inherited (TSan refuses those) */
        char a1[16], a2[16], a3[16], a4[32];
        close(up[0]);
        close(down[1]);
        snprintf(a1, sizeof(a1), "%d", up[1]);
        snprintf(a2, sizeof(a2), "%d", down[0]);
        snprintf(a3, sizeof(a3), "%u", port);
        snprintf(a4, sizeof(a4), "%llu", (unsigned long long)seed);
        execl("/proc/self/exe", "test_xfer", "--target", a1, a2, a3, a4, (char*)NULL);
        _exit(127);
    }
    close(up[1]);
    close(down[0]);
    c->to = down[1];
    if (read(up[0], &c->n, sizeof(c->n)) != (ssize_t)sizeof(c->n) || c->n > sizeof(c->desc) ||
        read(up[0], c->desc, c->n) != (ssize_t)c->n) { close(up[0]); return 0; }
    close(up[0]);
    return 1;
}

static int reap(child_t* c) {
    int status = 0;
    close(c->to);
    waitpid(c->pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

OMC_TEST(paged_kv_256_blocks_of_32k_copied_by_one_batched_read_across_processes) {
    child_t c;
    omc_xfer* x = engine(0);
    omc_xfer_peer* p = NULL;
    omc_xfer_descriptor d;
    omc_xfer_entry e[NBLOCKS];
    omc_result st[NBLOCKS];
    uint8_t* mine = pages((size_t)NBLOCKS * BLOCK);
    uint32_t i, bad = 0;
    REQUIRE(x && mine);
    REQUIRE(spawn(&c, 0, 42));
    CHECK_OK(omc_xfer_register(x, mine, (size_t)NBLOCKS * BLOCK, 0));
    CHECK_OK(omc_xfer_peer_import(x, c.desc, c.n, &p));
    REQUIRE(p != NULL);
    CHECK_OK(omc_xfer_peer_descriptor(p, &d));
    REQUIRE(d.count == 1);
    for (i = 0; i < NBLOCKS; i++) {     /* the peer's block table: block i lives in slot (i * 97 + 13) % 512 */
        e[i].local = mine + (size_t)i * BLOCK;
        e[i].remote = d.range[0].addr + (uint64_t)((i * 97 + 13) % (2 * NBLOCKS)) * BLOCK;
        e[i].length = BLOCK;
    }
    CHECK_OK(omc_xfer_run(p, OMC_XFER_READ, e, NBLOCKS, NULL, 0, omc_deadline_after_ms(30000), st));
    for (i = 0; i < NBLOCKS; i++) {
        uint64_t slot = (uint64_t)((i * 97 + 13) % (2 * NBLOCKS)) * BLOCK, j;
        for (j = 0; j < BLOCK; j += 97) if (mine[(size_t)i * BLOCK + j] != omc_test_byte(42, slot + j)) { bad++; break; }
        CHECK_EQ(st[i], OMC_OK);
    }
    CHECK_EQ(bad, 0);
    omc_xfer_peer_close(p);
    CHECK_EQ(reap(&c), 0);
    omc_xfer_destroy(x);
    free(mine);
}

OMC_TEST(a_restarted_peer_is_detected_and_a_dead_one_fails_promptly) {
    child_t c, c2;
    omc_xfer* x = engine(0);
    omc_xfer_peer *p = NULL, *p2 = NULL;
    omc_xfer_descriptor d;
    omc_xfer_entry e;
    uint8_t* mine = pages(BLOCK);
    omc_time_ns t0;
    REQUIRE(x && mine);
    REQUIRE(spawn(&c, 0, 1));
    CHECK_OK(omc_xfer_register(x, mine, BLOCK, 0));
    CHECK_OK(omc_xfer_peer_import(x, c.desc, c.n, &p));
    CHECK_OK(omc_xfer_peer_descriptor(p, &d));
    e.local = mine; e.remote = d.range[0].addr; e.length = BLOCK;
    CHECK_OK(omc_xfer_run(p, OMC_XFER_READ, &e, 1, NULL, 0, omc_deadline_after_ms(10000), NULL));
    kill(c.pid, SIGKILL);
    CHECK_EQ(reap(&c), 100 + SIGKILL);
    t0 = omc_now_ns();
    {   omc_result r = omc_xfer_run(p, OMC_XFER_READ, &e, 1, NULL, 0, omc_deadline_after_ms(10000), NULL);
        CHECK(r == OMC_ERR_CONNECTION || r == OMC_ERR_RDMA_QP || r == OMC_ERR_RDMA_COMPLETION); }
    CHECK(omc_now_ns() - t0 < (omc_time_ns)9000000000ll);   /* not the deadline: the peer is gone */
    /* a new engine on the same port: the old descriptor is refused */
    REQUIRE(spawn(&c2, d.port, 2));
    CHECK_RES(omc_xfer_run(p, OMC_XFER_READ, &e, 1, NULL, 0, omc_deadline_after_ms(10000), NULL), OMC_ERR_PEER_RESTARTED);
    /* opened again by name, it works */
    {   char name[OMC_XFER_NAME_MAX];
        snprintf(name, sizeof(name), "%s:%u", d.host, d.port);
        CHECK_OK(omc_xfer_peer_open(x, name, omc_deadline_after_ms(5000), &p2)); }
    REQUIRE(p2 != NULL);
    CHECK_OK(omc_xfer_peer_descriptor(p2, &d));
    e.remote = d.range[0].addr;
    CHECK_OK(omc_xfer_run(p2, OMC_XFER_READ, &e, 1, NULL, 0, omc_deadline_after_ms(10000), NULL));
    CHECK(mine[5] == omc_test_byte(2, 5));
    omc_xfer_peer_close(p);
    omc_xfer_peer_close(p2);
    CHECK_EQ(reap(&c2), 0);
    omc_xfer_destroy(x);
    free(mine);
}

/* ---- CURVE on the descriptor exchange ---------------------------------------------------------- */

typedef struct logcap_t { pthread_mutex_t mu; char text[8192]; } logcap_t;

static void logcap_fn(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    logcap_t* c = (logcap_t*)user;
    size_t n;
    (void)level; (void)item; (void)file; (void)line;
    pthread_mutex_lock(&c->mu);
    n = strlen(c->text);
    if (n + strlen(message) + 2 < sizeof(c->text)) { strcat(c->text, message); strcat(c->text, "\n"); }
    pthread_mutex_unlock(&c->mu);
}

static int logcap_has(logcap_t* c, const char* what) {
    int r;
    pthread_mutex_lock(&c->mu);
    r = strstr(c->text, what) != NULL;
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* an engine with CURVE keys (any may be NULL), its log captured in cap (may be NULL); over the
   run's transport, or over TCP on loopback (tcp: the hand-made requests dial 127.0.0.1) */
static omc_xfer* curve_engine_on(int tcp, const char* secret, const char* server_key, logcap_t* cap) {
    omc_xfer_desc d;
    omc_xfer* x = NULL;
    memset(&d, 0, sizeof(d));
    d.transport = tcp ? OMC_XFER_TRANSPORT_TCP : transport();
    d.io_timeout_ms = 3000;
    if (d.transport == OMC_XFER_TRANSPORT_RDMA) {
        d.host = getenv("OMC_RDMA_IP") ? getenv("OMC_RDMA_IP") : "127.0.0.1";
        d.rdma.devices = getenv("OMC_RDMA_DEVICE");
        d.rdma.max_rails = 1;
    }
    d.curve.secret_key = secret;
    d.curve.server_key = server_key;
    if (cap) {
        d.hooks.log_fn = logcap_fn;
        d.hooks.max_level = OMC_LOG_INFO;
        d.hooks.user_data = cap;
    }
    CHECK_OK(omc_xfer_create(&d, &x));
    return x;
}
#define curve_engine(secret, server_key, cap) curve_engine_on(0, secret, server_key, cap)

/* HMAC-SHA-256 itself is the core's, checked against FIPS 180-4 and RFC 4231 in test_hostile. */

OMC_TEST(curve_right_key_moves_data_wrong_or_no_key_is_refused) {
    char pub[41], sec[41], pub2[41], sec2[41];
    logcap_t lb, lc, ld;
    omc_xfer *a, *b, *c, *d;
    omc_xfer_peer* p = NULL;
    omc_xfer_info ib;
    omc_xfer_entry e[16];
    omc_result st[16];
    omc_xfer_notif nf[2];
    uint8_t *ma = pages(16 * 4096), *mb = pages(16 * 4096);
    uint32_t i;
    omc_time_ns t0;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK);       /* libzmq with CURVE is a dependency */
    CHECK_OK(omc_tcp_curve_keypair(pub2, sec2));
    memset(&lb, 0, sizeof(lb)); memset(&lc, 0, sizeof(lc)); memset(&ld, 0, sizeof(ld));
    pthread_mutex_init(&lb.mu, NULL); pthread_mutex_init(&lc.mu, NULL); pthread_mutex_init(&ld.mu, NULL);
    b = curve_engine(sec, NULL, &lb);           /* the target: its exchange requires CURVE */
    a = curve_engine(NULL, pub, NULL);          /* knows b's public key */
    c = curve_engine(NULL, NULL, &lc);          /* no key */
    d = curve_engine(NULL, pub2, &ld);          /* the wrong key */
    REQUIRE(a && b && c && d && ma && mb);
    CHECK_OK(omc_xfer_register(a, ma, 16 * 4096, 0));
    CHECK_OK(omc_xfer_register(b, mb, 16 * 4096, 0));
    CHECK_OK(omc_xfer_query(b, &ib));
    CHECK(ib.curve_port != 0 && ib.curve_port != ib.port);

    /* right key: scattered WRITE with a notification, then READ back */
    CHECK_OK(omc_xfer_peer_open(a, ib.name, omc_deadline_after_ms(5000), &p));
    REQUIRE(p != NULL);
    omc_test_fill(ma, 16 * 4096, 3);
    for (i = 0; i < 16; i++) {
        e[i].local = ma + (size_t)i * 4096;
        e[i].remote = (uint64_t)(uintptr_t)(mb + (size_t)((i * 5) % 16) * 4096);
        e[i].length = 4096 - i;
    }
    CHECK_OK(omc_xfer_run(p, OMC_XFER_WRITE, e, 16, "curve", 5, omc_deadline_after_ms(10000), st));
    for (i = 0; i < 16; i++) CHECK(memcmp(mb + (size_t)((i * 5) % 16) * 4096, ma + (size_t)i * 4096, 4096 - i) == 0);
    CHECK_EQ(omc_xfer_notifs(b, nf, 2), 1);
    memset(ma, 0, 16 * 4096);
    CHECK_OK(omc_xfer_run(p, OMC_XFER_READ, e, 16, NULL, 0, omc_deadline_after_ms(10000), st));
    for (i = 0; i < 16; i++) CHECK(memcmp(ma + (size_t)i * 4096, mb + (size_t)((i * 5) % 16) * 4096, 4096 - i) == 0);
    CHECK(logcap_has(&lb, "descriptor exchange over CURVE"));
    CHECK_OK(omc_xfer_query(b, &ib));
    CHECK_EQ(ib.auth_failures, 0);

    /* no key: the plain HELLO is refused at once with OMC_ERR_AUTH, both sides say why */
    {
        omc_xfer_peer* q = NULL;
        CHECK_RES(omc_xfer_peer_open(c, ib.name, omc_deadline_after_ms(5000), &q), OMC_ERR_AUTH);
        CHECK(q == NULL);
        CHECK(logcap_has(&lc, "requires CURVE"));
        CHECK(logcap_has(&lb, "this engine requires CURVE"));
        CHECK_OK(omc_xfer_query(b, &ib));
        CHECK_EQ(ib.auth_failures, 1);
    }
    /* wrong key: the CURVE handshake never completes; OMC_ERR_AUTH at the deadline */
    {
        omc_xfer_peer* q = NULL;
        t0 = omc_now_ns();
        CHECK_RES(omc_xfer_peer_open(d, ib.name, omc_deadline_after_ms(1500), &q), OMC_ERR_AUTH);
        CHECK(q == NULL);
        CHECK(omc_now_ns() - t0 < (omc_time_ns)20 * 1000000000);
        CHECK(logcap_has(&ld, "CURVE handshake failed"));
        /* the target saw it too (its monitor reports the failed handshake, at once or soon) */
        t0 = omc_now_ns();
        while (!logcap_has(&lb, "CURVE handshake on the exchange port failed") && omc_now_ns() - t0 < (omc_time_ns)10 * 1000000000) poll(NULL, 0, 20);
        CHECK(logcap_has(&lb, "CURVE handshake on the exchange port failed"));
        CHECK_OK(omc_xfer_query(b, &ib));
        CHECK(ib.auth_failures >= 2);
    }
    /* a CURVE client at an engine without CURVE refuses it */
    {
        omc_xfer_peer* q = NULL;
        omc_xfer_info ic;
        CHECK_OK(omc_xfer_query(c, &ic));
        CHECK_RES(omc_xfer_peer_open(a, ic.name, omc_deadline_after_ms(5000), &q), OMC_ERR_AUTH);
        CHECK(q == NULL);
    }
    /* the session still works after all that */
    CHECK_OK(omc_xfer_run(p, OMC_XFER_READ, e, 16, NULL, 0, omc_deadline_after_ms(10000), st));
    omc_xfer_peer_close(p);
    omc_xfer_destroy(a);
    omc_xfer_destroy(b);
    omc_xfer_destroy(c);
    omc_xfer_destroy(d);
    free(ma);
    free(mb);
}

OMC_TEST(curve_keys_from_key_files_named_in_the_environment) {
    char pub[41], sec[41], fs[] = "/tmp/omc-xfer-sec-XXXXXX", fp[] = "/tmp/omc-xfer-pub-XXXXXX";
    omc_xfer *b, *a, *c;
    omc_xfer_peer *p = NULL, *q = NULL;
    omc_xfer_info ib;
    uint8_t* m = pages(4096);
    int f1, f2;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK && m);
    f1 = mkstemp(fs);
    f2 = mkstemp(fp);
    REQUIRE(f1 >= 0 && f2 >= 0);
    CHECK(write(f1, sec, 40) == 40 && write(f1, "\n", 1) == 1);
    CHECK(write(f2, pub, 40) == 40);
    close(f1);
    close(f2);
    setenv("OMNICONN_XFER_SECRET_KEY_FILE", fs, 1);
    b = curve_engine(NULL, NULL, NULL);
    unsetenv("OMNICONN_XFER_SECRET_KEY_FILE");
    setenv("OMNICONN_XFER_SERVER_KEY_FILE", fp, 1);
    a = curve_engine(NULL, NULL, NULL);
    setenv("OMNICONN_XFER_SERVER_KEY_FILE", "/nonexistent/key", 1);
    {
        omc_xfer_desc d;
        omc_xfer* z = NULL;
        memset(&d, 0, sizeof(d));
        d.transport = OMC_XFER_TRANSPORT_TCP;
        CHECK(omc_xfer_create(&d, &z) != OMC_OK && z == NULL);      /* a key file that cannot be read: refused */
    }
    unsetenv("OMNICONN_XFER_SERVER_KEY_FILE");
    c = curve_engine(NULL, NULL, NULL);
    REQUIRE(a && b && c);
    CHECK_OK(omc_xfer_register(b, m, 4096, 0));
    CHECK_OK(omc_xfer_query(b, &ib));
    CHECK(ib.curve_port != 0);
    CHECK_OK(omc_xfer_peer_open(a, ib.name, omc_deadline_after_ms(5000), &p));
    CHECK_RES(omc_xfer_peer_open(c, ib.name, omc_deadline_after_ms(5000), &q), OMC_ERR_AUTH);
    omc_xfer_peer_close(p);
    omc_xfer_destroy(a);
    omc_xfer_destroy(b);
    omc_xfer_destroy(c);
    unlink(fs);
    unlink(fp);
    free(m);
}

/* request header helper for the hand-made sessions below */
static void req(uint8_t* h, int type, uint32_t word, uint64_t a, uint64_t len) {
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, type, 0, word, a, len);
}

OMC_TEST(curve_listener_serves_only_what_an_authenticated_session_was_granted) {
    char pub[41], sec[41];
    omc_xfer* b;
    omc_xfer_info ib;
    uint8_t *m1 = pages(8192), *m2 = pages(8192);
    uint8_t h[OMC_XFER_RPC_HEADER], ch[OMC__XFER_CHALLENGE_LEN], secret[32], proof[32], msg[OMC_XFER_RPC_HEADER + 32], data[64];
    uint8_t old_proof[32];
    omc_result st = OMC_OK;
    int fd;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK);       /* libzmq with CURVE is a dependency */
    b = curve_engine_on(1, sec, NULL, NULL);
    REQUIRE(b && m1 && m2);
    memset(m1, 0x5a, 8192);
    memset(m2, 0xa5, 8192);
    CHECK_OK(omc_xfer_register(b, m1, 8192, 0));            /* range 1 */
    CHECK_OK(omc_xfer_query(b, &ib));

    /* a keyless client guessing an address and a range id: refused, connection closed */
    fd = dial(ib.port);
    req(h, OMC__XRPC_READ, 1, (uint64_t)(uintptr_t)m1, 64);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0);
    CHECK_EQ(st, OMC_ERR_AUTH);
    CHECK(omc__xfer_io(fd, data, 1, 0, omc_deadline_after_ms(3000), NULL, NULL) == OMC_ERR_CONNECTION);   /* closed, no bytes */
    close(fd);
    /* AUTH without a challenge, and a forged proof: refused */
    fd = dial(ib.port);
    req(msg, OMC__XRPC_CHALLENGE, 0, 0, 0);
    CHECK(exchange(fd, msg, OMC_XFER_RPC_HEADER, &st) == 0);
    CHECK_EQ(st, OMC_OK);
    CHECK(omc__xfer_io(fd, ch, sizeof(ch), 0, omc_deadline_after_ms(3000), NULL, NULL) == OMC_OK);
    CHECK_EQ(omc__get_u16(ch), ib.curve_port);
    memset(proof, 0x11, sizeof(proof));
    req(msg, OMC__XRPC_AUTH, 1, 7, 32);
    memcpy(msg + OMC_XFER_RPC_HEADER, proof, 32);
    CHECK(exchange(fd, msg, sizeof(msg), &st) == 0);
    CHECK_EQ(st, OMC_ERR_AUTH);
    close(fd);

    /* a session granted ranges up to id 1 (as the CURVE exchange grants it: the secret is
       computed here from the engine's master, standing in for the encrypted answer) */
    b->next_id = b->next_id;            /* (grant = 1) */
    omc__xfer_session_secret(b, 7, 1, secret);
    fd = dial(ib.port);
    req(msg, OMC__XRPC_CHALLENGE, 0, 0, 0);
    CHECK(exchange(fd, msg, OMC_XFER_RPC_HEADER, &st) == 0);
    CHECK(omc__xfer_io(fd, ch, sizeof(ch), 0, omc_deadline_after_ms(3000), NULL, NULL) == OMC_OK);
    omc__xfer_proof(secret, ch + 4, proof);
    memcpy(old_proof, proof, 32);
    req(msg, OMC__XRPC_AUTH, 1, 7, 32);
    memcpy(msg + OMC_XFER_RPC_HEADER, proof, 32);
    CHECK(exchange(fd, msg, sizeof(msg), &st) == 0);
    CHECK_EQ(st, OMC_OK);
    /* range 1 is served */
    req(h, OMC__XRPC_READ, 1, (uint64_t)(uintptr_t)m1, 64);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0);
    CHECK_EQ(st, OMC_OK);
    CHECK(omc__xfer_io(fd, data, 64, 0, omc_deadline_after_ms(3000), NULL, NULL) == OMC_OK);
    CHECK(data[0] == 0x5a && data[63] == 0x5a);
    /* a range registered after the exchange is not granted to this session */
    CHECK_OK(omc_xfer_register(b, m2, 8192, 0));            /* range 2 */
    req(h, OMC__XRPC_READ, 2, (uint64_t)(uintptr_t)m2, 64);
    CHECK(exchange(fd, h, sizeof(h), &st) == 0);
    CHECK_EQ(st, OMC_ERR_AUTH);
    close(fd);
    /* a recorded proof is worthless on a new connection (a fresh challenge) */
    fd = dial(ib.port);
    req(msg, OMC__XRPC_CHALLENGE, 0, 0, 0);
    CHECK(exchange(fd, msg, OMC_XFER_RPC_HEADER, &st) == 0);
    CHECK(omc__xfer_io(fd, ch, sizeof(ch), 0, omc_deadline_after_ms(3000), NULL, NULL) == OMC_OK);
    req(msg, OMC__XRPC_AUTH, 1, 7, 32);
    memcpy(msg + OMC_XFER_RPC_HEADER, old_proof, 32);
    CHECK(exchange(fd, msg, sizeof(msg), &st) == 0);
    CHECK_EQ(st, OMC_ERR_AUTH);
    /* nor can a session claim a larger grant than it was given */
    close(fd);
    fd = dial(ib.port);
    req(msg, OMC__XRPC_CHALLENGE, 0, 0, 0);
    CHECK(exchange(fd, msg, OMC_XFER_RPC_HEADER, &st) == 0);
    CHECK(omc__xfer_io(fd, ch, sizeof(ch), 0, omc_deadline_after_ms(3000), NULL, NULL) == OMC_OK);
    omc__xfer_proof(secret, ch + 4, proof);
    req(msg, OMC__XRPC_AUTH, 2, 7, 32);
    memcpy(msg + OMC_XFER_RPC_HEADER, proof, 32);
    CHECK(exchange(fd, msg, sizeof(msg), &st) == 0);
    CHECK_EQ(st, OMC_ERR_AUTH);
    close(fd);
    CHECK_OK(omc_xfer_query(b, &ib));
    CHECK_EQ(ib.auth_failures, 5);
    omc_xfer_destroy(b);
    free(m1);
    free(m2);
}

OMC_TEST(device_memory_is_refused_with_a_reason) {
    omc_xfer* x = engine(0);
    uint8_t* m = pages(4096);
    REQUIRE(x && m);
    CHECK_RES(omc_xfer_register(x, m, 4096, OMC_XFER_MEM_DEVICE), OMC_ERR_UNAVAILABLE);
    CHECK_RES(omc_xfer_register(x, m, 4096, 0x80), OMC_ERR_INVALID_ARG);
    CHECK_OK(omc_xfer_register(x, m, 4096, 0));
    CHECK_RES(omc_xfer_register(x, m + 100, 10, 0), OMC_ERR_EXISTS);
    omc_xfer_destroy(x);
    free(m);
}

int main(int argc, char** argv) {
    if (argc == 6 && strcmp(argv[1], "--target") == 0)
        target_main(atoi(argv[2]), atoi(argv[3]), (uint32_t)atoi(argv[4]), strtoull(argv[5], NULL, 10));
    return omc_test_main(argc, argv);
}
