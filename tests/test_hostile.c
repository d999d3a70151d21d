/* Hostile peers against omniconn's trust boundaries: every case is a real program on loopback
   that does what an attacker without a key (or a careless neighbour) can do - a raw libzmq
   client with no CURVE key, raw TCP sockets on the data port, files planted in the shm
   directory, a connector in another pid namespace, a process that truncates a segment - and
   asserts the behaviour the library should have (see docs/security.md for the trust model).

   Cases whose fix is not in yet are listed in known_open[] below: they are skipped (a SKIP line
   names the open finding) unless OMC_HOSTILE_ALL=1, so the suite stays green while the fixes land
   and each fix flips one entry. Run one case: build/test_hostile NAME (substring match).

   Every hostile client below is marked HOSTILE. Side-channel messages are encoded by hand from
   the wire documentation (omniconn.h WIRE FORMATS, docs/wire.md), not with the library's
   encoder: an attacker does not use our code either. Each case is bounded (< 5 s). */
#define OMNICONN_IMPLEMENTATION
/* the data port's private tables, shrunk so one process can fill them (16 per address) */
#define OMC__TCP_MAX_CONNS 64
#define OMC__TCP_MAX_TICKETS 64
#include "omniconn.h"
#include "omniconn_shm.h"
#include "omniconn_pipeline.h"
#include "omc_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>      /* the hostile clients call libzmq themselves (-lzmq) */

OMC_TEST_TSAN_IGNORE_LIBZMQ()    /* libzmq is not instrumented: see omc_test.h */

/* ---- cases that fail today: skipped unless OMC_HOSTILE_ALL=1 --------------------------------- */

typedef struct known_open_case { const char* name; int finding; } known_open_case;
static const known_open_case known_open[] = {
    { NULL, 0 }     /* none open today; a new reproducer goes above this line */
};

static int open_finding(const char* name) {
    size_t i;
    for (i = 0; i < sizeof(known_open) / sizeof(known_open[0]); i++)
        if (known_open[i].name && strcmp(known_open[i].name, name) == 0) return known_open[i].finding;
    return 0;
}

/* ---- small helpers ---------------------------------------------------------------------------- */

#define QKEY(k) "s0\x1fs1\x1f" k         /* the qualified key of (s0, s1, k) */

static double now_s(void) { return (double)omc_now_ns() / 1e9; }

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static int quiet(void) { return getenv("HOSTILE_LOG") == NULL; }

/* A logger that counts WARN and ERROR lines (and prints them with HOSTILE_LOG set). */
static uint64_t warn_lines;
static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;
static char warn_ring[64][512];         /* the last 64 WARN/ERROR texts, for warn_seen() */
static unsigned warn_next;
static void counting_log(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    if (level <= OMC_LOG_WARN) {
        __atomic_add_fetch(&warn_lines, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&warn_mu);
        snprintf(warn_ring[warn_next++ % 64], sizeof(warn_ring[0]), "%s", msg);
        pthread_mutex_unlock(&warn_mu);
    }
    if (!quiet()) fprintf(stderr, "  log %d: %s\n", (int)level, msg);
}

/* Did a recent WARN/ERROR line contain every one of the (up to three) texts? Waits up to ms for it
   (the listener thread logs it): an event, not a delay. */
static int warn_seen(int ms, const char* a, const char* b, const char* c) {
    omc_time_ns until = omc_now_ns() + (omc_time_ns)ms * 1000000LL;
    do {
        int i, hit = 0;
        pthread_mutex_lock(&warn_mu);
        for (i = 0; i < 64 && !hit; i++)
            hit = strstr(warn_ring[i], a) && (!b || strstr(warn_ring[i], b)) && (!c || strstr(warn_ring[i], c));
        pthread_mutex_unlock(&warn_mu);
        if (hit) return 1;
        usleep(2000);
    } while (omc_now_ns() < until);
    return 0;
}

static omc_conn* make_sender(uint64_t pool, const char* secret, const char* const* allowed, uint32_t nallowed, uint32_t workers) {
    omc_tcp_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_SENDER;
    d.pool_size = pool ? pool : (64u << 20);
    d.workers = workers;
    d.curve.secret_key = secret;
    d.curve.allowed_clients = allowed;
    d.curve.allowed_count = nallowed;
    d.hooks.log_fn = counting_log;
    d.hooks.max_level = quiet() ? OMC_LOG_WARN : OMC_LOG_DEBUG;
    if (omc_tcp_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static omc_conn* make_receiver(uint64_t pool, const char* server_key, const char* secret, const char* public_key) {
    omc_tcp_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_RECEIVER;
    d.pool_size = pool ? pool : (64u << 20);
    d.curve.server_key = server_key;
    d.curve.secret_key = secret;
    d.curve.public_key = public_key;
    d.hooks.log_fn = counting_log;
    d.hooks.max_level = quiet() ? OMC_LOG_WARN : OMC_LOG_DEBUG;
    if (omc_tcp_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

static void ports_of(omc_conn* c, uint16_t* port, uint16_t* dport) { omc_tcp_endpoint(c, NULL, 0, port, dport); }

static omc_result put_bytes(omc_conn* c, const char* key, uint64_t n, uint64_t seed, omc_meta* m) {
    void* data = malloc(n ? n : 1);
    omc_payload p;
    omc_result r;
    memset(&p, 0, sizeof(p));
    if (!data) return OMC_ERR_NO_MEMORY;
    omc_test_fill(data, n, seed);
    p.data = data; p.size = n;
    r = omc_conn_put(c, "s0", "s1", key, &p, m);
    free(data);
    return r;
}

/* ---- HOSTILE: a side-channel client with no key, messages encoded by hand -------------------- */

enum { HZ_HELLO = 1, HZ_QUERY, HZ_QUERY_REPLY, HZ_NOT_FOUND, HZ_PULL, HZ_DONE, HZ_ERROR, HZ_ABORT };

/* ticket: record 0x101 of the HELLO answer, the ticket's id (16 bytes) then its secret (32) */
typedef struct hz { void* ctx; void* sock; uint32_t seq; uint8_t ticket[48]; int has_ticket, has_v2_ticket; } hz;

static void le16(uint8_t* p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void le32(uint8_t* p, uint32_t v) { le16(p, (uint16_t)v); le16(p + 2, (uint16_t)(v >> 16)); }
static void le64(uint8_t* p, uint64_t v) { le32(p, (uint32_t)v); le32(p + 4, (uint32_t)(v >> 32)); }
static uint32_t rd32(const uint8_t* p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t* p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int hz_open(hz* h, uint16_t port) {
    char ep[64];
    int zero = 0, send_ms = 2000;
    memset(h, 0, sizeof(*h));
    h->ctx = zmq_ctx_new();
    if (!h->ctx) return -1;
    h->sock = zmq_socket(h->ctx, ZMQ_DEALER);
    if (!h->sock) return -1;
    zmq_setsockopt(h->sock, ZMQ_LINGER, &zero, sizeof(zero));
    /* a refused handshake leaves no pipe to queue on: a send would block for ever, not fail */
    zmq_setsockopt(h->sock, ZMQ_SNDTIMEO, &send_ms, sizeof(send_ms));
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", (unsigned)port);
    return zmq_connect(h->sock, ep);
}

static void hz_close(hz* h) {
    if (h->sock) zmq_close(h->sock);
    if (h->ctx) zmq_ctx_term(h->ctx);
    memset(h, 0, sizeof(*h));
}

/* Send one message: the 32-byte header (magic "OMCZ", version 1, type, flags 0, transfer id,
   incarnation, sequence, body length) and the body. */
static int hz_send(hz* h, uint8_t type, uint64_t xfer, const void* body, uint32_t blen) {
    uint8_t msg[8192];
    if (32 + blen > sizeof(msg)) return -1;
    le32(msg, 0x5A434D4Fu);
    msg[4] = 1; msg[5] = type; le16(msg + 6, 0);
    le64(msg + 8, xfer);
    le64(msg + 16, 0x0BADC0DE0BADC0DEull);     /* any incarnation: nothing checks who we are */
    le32(msg + 24, ++h->seq);
    le32(msg + 28, blen);
    if (blen) memcpy(msg + 32, body, blen);
    return zmq_send(h->sock, msg, 32 + blen, 0) == (int)(32 + blen) ? 0 : -1;
}

/* The next reply (its type, or -1 after timeout_ms); the whole message in buf. */
static int hz_recv(hz* h, uint8_t* buf, size_t cap, int timeout_ms, int* len) {
    zmq_pollitem_t it;
    int n;
    it.socket = h->sock; it.fd = 0; it.events = ZMQ_POLLIN; it.revents = 0;
    if (zmq_poll(&it, 1, timeout_ms) <= 0) return -1;
    n = zmq_recv(h->sock, buf, cap, 0);
    if (n < 32) return -1;
    if (len) *len = n;
    return buf[5];
}

/* HELLO; the sender's answer carries this session's data-connection ticket (record type 0x101,
   48 bytes: id, secret), which the data hello of a connection used by this session must prove. */
static int hz_hello(hz* h) {
    uint8_t body[8] = {1, 0, 0, 0, 0, 0, 0, 0}, rep[8192];
    int len = 0, t, off;
    if (hz_send(h, HZ_HELLO, 1, body, 8) != 0) return -1;
    t = hz_recv(h, rep, sizeof(rep), 2000, &len);
    for (off = 40; t == HZ_HELLO && off + 4 <= len; ) {
        int type = rep[off] | rep[off + 1] << 8, vl = rep[off + 2] | rep[off + 3] << 8;
        if (type == 0x101 && vl == 48 && off + 4 + vl <= len) { memcpy(h->ticket, rep + off + 4, 48); h->has_ticket = 1; }
        if (type == 0x100) h->has_v2_ticket = 1;
        off += 4 + vl;
    }
    return t;
}

static int hz_query(hz* h, uint64_t xfer, const char* qkey, uint32_t wait_ms, int timeout_ms, uint64_t* size) {
    uint8_t body[8 + 256], rep[8192];
    uint16_t kl = (uint16_t)strlen(qkey);
    int t;
    le32(body, wait_ms); le16(body + 4, kl); le16(body + 6, 0);
    memcpy(body + 8, qkey, kl);
    if (hz_send(h, HZ_QUERY, xfer, body, 8u + kl) != 0) return -1;
    t = hz_recv(h, rep, sizeof(rep), timeout_ms, NULL);
    if (t == HZ_QUERY_REPLY && size) *size = rd64(rep + 32 + 8);
    return t;
}

/* PULL (entry 0 = whatever the key has now) onto the TCP data connection named by token. */
static int hz_pull(hz* h, uint64_t xfer, const char* qkey, uint64_t capacity, uint32_t budget_ms, uint64_t token) {
    uint8_t body[36 + 256 + 8];
    uint16_t kl = (uint16_t)strlen(qkey);
    memset(body, 0, sizeof(body));
    le64(body, 0); le64(body + 8, 0); le64(body + 16, capacity); le32(body + 24, budget_ms);
    le16(body + 28, kl); body[30] = 1; body[31] = 0; le16(body + 32, 8); le16(body + 34, 0);
    memcpy(body + 36, qkey, kl);
    le64(body + 36 + kl, token);
    return hz_send(h, HZ_PULL, xfer, body, 36u + kl + 8u);
}

/* ---- HOSTILE: raw TCP on the data port ---------------------------------------------------------- */

static int tcp_connect(uint16_t port, int rcvbuf) {
    struct sockaddr_in a;
    struct timeval tv = {2, 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (rcvbuf) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) { close(fd); return -1; }
    return fd;
}

/* Read exactly n bytes (the socket has a 2 s receive timeout): 0, or -1. */
static int read_exact(int fd, uint8_t* p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* The data port speaks first: a 24-byte nonce frame ("OMCN", u16 version 4, u16 0, 16 random
   bytes). 0 with the nonce, or -1. */
static int read_nonce(int fd, uint8_t* nonce) {
    uint8_t f[24];
    if (read_exact(fd, f, sizeof(f)) != 0 || rd32(f) != 0x4E434D4Fu || f[4] != 4 || f[5] != 0) return -1;
    memcpy(nonce, f + 8, 16);
    return 0;
}

/* A data hello into out (72 bytes): magic "OMCT", the version (4 now; 3 was the one whose
   requests carried a CRC of the key), token, incarnation, the ticket id, then HMAC-SHA-256 keyed
   with the ticket's secret over "omniconn data hello <version>", the nonce and the first 40 bytes
   (the header's HMAC, checked against RFC 4231 in its own test). */
static void hello_of(uint8_t* out, int version, uint64_t token, const uint8_t* ticket, const uint8_t* nonce) {
    char label[32];
    const void* part[3];
    size_t len[3];
    snprintf(label, sizeof(label), "omniconn data hello %d", version);
    le32(out, 0x54434D4Fu); le16(out + 4, (uint16_t)version); le16(out + 6, 0); le64(out + 8, token); le64(out + 16, 0x0BADC0DEull);
    memcpy(out + 24, ticket, 16);
    part[0] = label; len[0] = strlen(label);
    part[1] = nonce; len[1] = 16;
    part[2] = out; len[2] = 40;
    omc__hmac_sha256(ticket + 16, 32, part, len, 3, out + 40);
}

static void hello_v4(uint8_t* out, uint64_t token, const uint8_t* ticket, const uint8_t* nonce) { hello_of(out, 4, token, ticket, nonce); }

/* The ack after a hello: its status, 1 if the sender closed the connection instead, 2 if the
   bytes are not an ack. */
static int read_ack(int fd) {
    uint8_t ack[8];
    if (read_exact(fd, ack, sizeof(ack)) != 0) return 1;
    if (rd32(ack) != 0x41434D4Fu) return 2;
    return (int)(int32_t)rd32(ack + 4);
}

/* An old data hello: version 1 (24 bytes, no ticket) or version 2 (40 bytes, the ticket id where
   the ticket used to travel in clear). Returns the ack status, or 1 if closed without one. */
static int data_hello_old(int fd, uint64_t token, const uint8_t* ticket, int version) {
    uint8_t hello[40], nonce[16];
    size_t hl = version == 2 ? 40 : 24;
    if (read_nonce(fd, nonce) != 0) return 1;
    le32(hello, 0x54434D4Fu); le16(hello + 4, (uint16_t)version); le16(hello + 6, 0); le64(hello + 8, token); le64(hello + 16, 0x0BADC0DEull);
    if (version == 2) memcpy(hello + 24, ticket, 16);
    if (write(fd, hello, hl) != (ssize_t)hl) return 1;
    return read_ack(fd);
}

/* The data hello of this session's ticket (48 bytes, from hz_hello; NULL = a version-1 hello);
   returns the ack status, or 1 if the sender closed the connection instead of answering. */
static int data_hello(int fd, uint64_t token, const uint8_t* ticket) {
    uint8_t hello[72], nonce[16];
    if (!ticket) return data_hello_old(fd, token, NULL, 1);
    if (read_nonce(fd, nonce) != 0) return 1;
    hello_v4(hello, token, ticket, nonce);
    if (write(fd, hello, sizeof(hello)) != (ssize_t)sizeof(hello)) return 1;
    return read_ack(fd);
}

/* Has the peer closed fd (EOF or reset) within ms? */
static int closed_within(int fd, int ms) {
    struct pollfd p;
    char b[4096];
    double end = now_s() + ms / 1000.0;
    while (now_s() < end) {
        p.fd = fd; p.events = POLLIN; p.revents = 0;
        if (poll(&p, 1, 50) > 0) {
            ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return 1;
        }
    }
    return 0;
}

static uint64_t tcp_data_connections(omc_conn* s) {
    omc_tcp_health_info th;
    memset(&th, 0, sizeof(th));
    omc_tcp_health(s, &th);
    return th.data_connections;
}

/* ================================================================================================
   Finding 1: pipeline edges are open services
   ================================================================================================ */

static uint16_t free_base_port(void) {
    /* the config's side-channel port: probed, below the kernel's ephemeral range */
    return (uint16_t)omc_test_free_port_base(4);
}

/* A pipeline built from a config whose edge is CURVE-protected (key files in the connector's
   extra block). HOSTILE: a keyless raw libzmq client on loopback guesses the announcement key
   ("requests#c0", as examples/pipeline3.c names it) and tries to pull it. Want: refused, and the
   real downstream stage still gets chunk 0. */
OMC_TEST(keyless_client_cannot_read_a_pipeline_payload) {
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1], cpub[OMC_CURVE_KEY_LEN + 1], csec[OMC_CURVE_KEY_LEN + 1];
    char dir[] = "/tmp/omc-hostile-XXXXXX", path[4][300], yaml[2048];
    omc_pipeline_config* cfg = NULL;
    omc_pipeline_connect_desc cd;
    omc_conn *up = NULL, *down = NULL;
    omc_stream_writer* w = NULL;
    omc_stream_reader* rd = NULL;
    omc_stream_chunk ch;
    omc_payload p;
    uint8_t payload[4096];
    hz h;
    uint16_t base = free_base_port();
    int i, t;
    FILE* f;
    REQUIRE(mkdtemp(dir) != NULL);
    CHECK_OK(omc_tcp_curve_keypair(pub, sec));
    CHECK_OK(omc_tcp_curve_keypair(cpub, csec));
    {
        const char* names[4] = {"server.pub", "server.key", "client.key", "allowed"};
        const char* vals[4] = {pub, sec, csec, cpub};
        for (i = 0; i < 4; i++) {
            snprintf(path[i], sizeof(path[i]), "%s/%s", dir, names[i]);
            f = fopen(path[i], "w");
            REQUIRE(f);
            fprintf(f, "%s\n", vals[i]);
            fclose(f);
        }
    }
    snprintf(yaml, sizeof(yaml),
             "runtime:\n  connectors:\n    tcp_connector:\n      name: TcpConnector\n      extra:\n"
             "        host: 127.0.0.1\n        zmq_port: %u\n        memory_pool_size: 16777216\n"
             "        curve_server_public_key_file: %s\n        curve_server_secret_key_file: %s\n"
             "        curve_client_secret_key_file: %s\n        curve_allowed_clients_file: %s\n"
             "stage_args:\n  - stage_id: 0\n    output_connectors:\n      to_stage_1: tcp_connector\n"
             "  - stage_id: 1\n    input_connectors:\n      from_stage_0: tcp_connector\n",
             (unsigned)base, path[0], path[1], path[2], path[3]);
    memset(&cd, 0, sizeof(cd));
    cd.hooks.log_fn = counting_log;
    cd.hooks.max_level = quiet() ? OMC_LOG_ERROR : OMC_LOG_DEBUG;
    CHECK_OK(omc_pipeline_config_load_string(yaml, strlen(yaml), NULL, &cfg, NULL));
    if (cfg) {
        CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &cd, &up));
        CHECK_OK(omc_pipeline_connect(cfg, 0, 1, &cd, &down));
    }
    if (up && down) {
        uint16_t port = 0;
        ports_of(up, &port, NULL);
        omc_test_fill(payload, sizeof(payload), 11);
        memset(&p, 0, sizeof(p));
        p.data = payload; p.size = sizeof(payload);
        CHECK_OK(omc_stream_writer_create(up, "0", "1", "requests", NULL, &w));
        if (w) CHECK_OK(omc_stream_send(w, &p, OMC_STREAM_END, omc_deadline_after_ms(2000)));
        /* HOSTILE: no key, the guessed key; a refused CURVE handshake means no answer at all */
        REQUIRE(hz_open(&h, port) == 0);
        t = hz_query(&h, 7, "0\x1f" "1\x1f" "requests#c0", 0, 1500, NULL);
        CHECK(t != HZ_QUERY_REPLY);
        t = hz_query(&h, 8, "0\x1f" "1\x1f" "requests#0", 0, 1000, NULL);
        CHECK(t != HZ_QUERY_REPLY);
        hz_close(&h);
        /* the real downstream stage still gets it (with the writer's token, handed over as a
           stage hands over put()'s metadata) */
        if (w) {
            char token[OMC_STREAM_TOKEN_SIZE];
            omc_stream_desc sd;
            memset(&sd, 0, sizeof(sd));
            CHECK_OK(omc_stream_writer_token(w, token));
            sd.token = token;
            CHECK_OK(omc_stream_reader_create(down, "0", "1", "requests", &sd, &rd));
        }
        if (rd) {
            memset(&ch, 0, sizeof(ch));
            CHECK_OK(omc_stream_next(rd, omc_deadline_after_ms(2000), &ch));
            CHECK(ch.buffer.size == sizeof(payload) && omc_test_verify(ch.buffer.data, sizeof(payload), 11));
            omc_buffer_release(&ch.buffer);
            omc_stream_reader_destroy(rd);
        }
        if (w) omc_stream_writer_destroy(w);
    }
    if (down) omc_conn_destroy(down);
    if (up) omc_conn_destroy(up);
    omc_pipeline_config_destroy(cfg);
    for (i = 0; i < 4; i++) unlink(path[i]);
    rmdir(dir);
}

/* A TCP edge on the host's own address ("auto") without CURVE and without `insecure: true`:
   the sending stage must refuse to listen. */
OMC_TEST(pipeline_listener_on_a_host_address_without_curve_is_refused) {
    char host[OMC_TCP_HOST_MAX], yaml[1024];
    const char* how = NULL;
    omc_pipeline_config* cfg = NULL;
    omc_pipeline_connect_desc cd;
    omc_conn* up = NULL;
    omc_result r;
    if (omc_detect_host(4, host, sizeof(host), &how) != OMC_OK || (how && strcmp(how, "loopback") == 0)) {
        printf("  (this host has no address but loopback: the case needs one)\n");
        return;
    }
    snprintf(yaml, sizeof(yaml),
             "runtime:\n  connectors:\n    tcp_connector:\n      name: TcpConnector\n      extra:\n"
             "        host: auto\n        zmq_port: %u\n        memory_pool_size: 16777216\n"
             "stage_args:\n  - stage_id: 0\n    output_connectors:\n      to_stage_1: tcp_connector\n"
             "  - stage_id: 1\n    input_connectors:\n      from_stage_0: tcp_connector\n",
             (unsigned)free_base_port());
    memset(&cd, 0, sizeof(cd));
    cd.hooks.log_fn = counting_log;
    cd.hooks.max_level = quiet() ? OMC_LOG_ERROR : OMC_LOG_DEBUG;
    REQUIRE(omc_pipeline_config_load_string(yaml, strlen(yaml), NULL, &cfg, NULL) == OMC_OK);
    r = omc_pipeline_connect(cfg, 0, 0, &cd, &up);
    CHECK(r != OMC_OK);
    CHECK(up == NULL);
    if (up) omc_conn_destroy(up);
    omc_pipeline_config_destroy(cfg);
}

/* Stream keys carry an unguessable part. HOSTILE: a keyless client on loopback (any local user)
   asks a plain sender for the announcement and chunk keys of a stream it never heard of, by the
   names the format would give them ("requests#c0", "requests#0"). Want: NOT_FOUND - the
   reader learns the real names from its writer's stage, an outsider cannot. */
OMC_TEST(stream_keys_carry_an_unguessable_part) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_stream_writer* w = NULL;
    omc_payload p;
    uint8_t bytes[2048];
    uint16_t port = 0;
    hz h;
    REQUIRE(s);
    ports_of(s, &port, NULL);
    memset(&p, 0, sizeof(p));
    p.data = bytes; p.size = sizeof(bytes);
    CHECK_OK(omc_stream_writer_create(s, "s0", "s1", "requests", NULL, &w));
    if (w) CHECK_OK(omc_stream_send(w, &p, 0, omc_deadline_after_ms(1000)));
    REQUIRE(hz_open(&h, port) == 0);
    CHECK_EQ(hz_query(&h, 1, QKEY("requests#c0"), 0, 2000, NULL), HZ_NOT_FOUND);
    CHECK_EQ(hz_query(&h, 2, QKEY("requests#0"), 0, 2000, NULL), HZ_NOT_FOUND);
    hz_close(&h);
    if (w) { omc_stream_writer_abort(w); omc_stream_writer_destroy(w); }
    omc_conn_destroy(s);
}

/* ================================================================================================
   Finding 2: the TCP data port is outside CURVE
   ================================================================================================ */

/* HOSTILE: a raw TCP client that never spoke on the side channel sends a well-formed data hello.
   Want: no ticket, no registration - the connection is closed (or refused in the ack) and the
   sender's count of registered data connections does not move. */
OMC_TEST(data_hello_without_a_ticket_is_closed_and_never_registered) {
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1], cpub[OMC_CURVE_KEY_LEN + 1], csec[OMC_CURVE_KEY_LEN + 1];
    const char* allowed[1];
    omc_conn* s;
    uint16_t dport = 0;
    int fd, st;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK && omc_tcp_curve_keypair(cpub, csec) == OMC_OK);
    allowed[0] = cpub;
    s = make_sender(0, sec, allowed, 1, 0);
    REQUIRE(s);
    ports_of(s, NULL, &dport);
    fd = tcp_connect(dport, 0);
    REQUIRE(fd >= 0);
    st = data_hello(fd, 0x1122334455667788ull, NULL);
    CHECK(st != 0);                                 /* refused in the ack, or closed */
    CHECK(closed_within(fd, 1000));
    CHECK_EQ(tcp_data_connections(s), 0);
    close(fd);
    {   /* a version-3 hello with a made-up ticket: closed without an answer */
        uint8_t forged[48];
        int i;
        for (i = 0; i < 48; i++) forged[i] = (uint8_t)(0x5A ^ i);
        fd = tcp_connect(dport, 0);
        REQUIRE(fd >= 0);
        CHECK_EQ(data_hello(fd, 0x1122334455667789ull, forged), 1);
        CHECK(closed_within(fd, 1000));
        CHECK_EQ(tcp_data_connections(s), 0);
        close(fd);
    }
    omc_conn_destroy(s);
}

/* HOSTILE: 200 raw TCP connections to the data port that never say anything (a port scanner,
   or someone holding the 64 pre-hello slots). Want: a legitimate CURVE receiver on the
   allow-list still gets a payload at once. */
OMC_TEST(silent_data_connections_do_not_block_fresh_gets) {
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1], cpub[OMC_CURVE_KEY_LEN + 1], csec[OMC_CURVE_KEY_LEN + 1];
    const char* allowed[1];
    omc_conn *s, *r;
    omc_meta m = {0};
    omc_buffer b;
    uint16_t dport = 0;
    int fds[200], i, n = 0;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK && omc_tcp_curve_keypair(cpub, csec) == OMC_OK);
    allowed[0] = cpub;
    s = make_sender(0, sec, allowed, 1, 0);
    r = make_receiver(0, pub, csec, cpub);
    REQUIRE(s && r);
    ports_of(s, NULL, &dport);
    for (i = 0; i < 200; i++) { fds[n] = tcp_connect(dport, 0); if (fds[n] >= 0) n++; }
    usleep(200000);
    CHECK_OK(put_bytes(s, "k", 1u << 20, 21, &m));
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(3000), &b));
    CHECK(b.size == (1u << 20) && omc_test_verify(b.data, b.size, 21));
    omc_buffer_release(&b);
    for (i = 0; i < n; i++) close(fds[i]);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* HOSTILE: under a low descriptor limit (RLIMIT_NOFILE 48 in a child sender) 100 raw
   connections to the data port drive accept() into EMFILE. Want: the listener backs off - over
   1.5 s it uses under a fifth of a core and logs the condition at most a few times, not once per
   event. */
OMC_TEST(emfile_on_the_data_port_backs_off_and_logs_once_per_interval) {
    int pp[2], status = 0, fds[100], n = 0, i;
    uint16_t dport = 0;
    double res[2] = {0, 0};
    pid_t pid;
    REQUIRE(pipe(pp) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        struct rlimit rl;
        omc_conn* s;
        double c0, c1;
        uint64_t w0, w1;
        double out[2];
        uint16_t dp = 0;
        close(pp[0]);
        rl.rlim_cur = rl.rlim_max = 48;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(1);
        s = make_sender(0, NULL, NULL, 0, 0);
        if (!s) _exit(1);
        ports_of(s, NULL, &dp);
        if (write(pp[1], &dp, sizeof(dp)) != (ssize_t)sizeof(dp)) _exit(1);
        usleep(300000);                 /* the flood arrives meanwhile */
        c0 = cpu_s(); w0 = __atomic_load_n(&warn_lines, __ATOMIC_RELAXED);
        usleep(1500000);
        c1 = cpu_s(); w1 = __atomic_load_n(&warn_lines, __ATOMIC_RELAXED);
        out[0] = c1 - c0; out[1] = (double)(w1 - w0);
        if (write(pp[1], out, sizeof(out)) != (ssize_t)sizeof(out)) _exit(1);
        omc_conn_destroy(s);
        _exit(0);
    }
    close(pp[1]);
    if (read(pp[0], &dport, sizeof(dport)) == (ssize_t)sizeof(dport)) {
        for (i = 0; i < 100; i++) { fds[n] = tcp_connect(dport, 0); if (fds[n] >= 0) n++; }
        if (read(pp[0], res, sizeof(res)) == (ssize_t)sizeof(res)) {
            printf("  %d connections against a 48-fd limit: %.3f s CPU and %.0f WARN lines in 1.5 s\n", n, res[0], res[1]);
            CHECK(res[0] < 0.3);
            CHECK(res[1] <= 5);
        } else CHECK(!"the child sender did not report");
        for (i = 0; i < n; i++) close(fds[i]);
    } else CHECK(!"the child sender did not start");
    waitpid(pid, &status, 0);
    close(pp[0]);
}

/* ================================================================================================
   Finding 3: a puller chooses how long it holds a push worker
   ================================================================================================ */

/* HOSTILE: two PULLs of 64 MiB with the largest budget (0xFFFFFFFF ms) on data connections
   that never read (2 workers: both taken). Want: a legitimate get of another 64 MiB put still
   completes (the budget is capped, a push with no progress is aborted, or a receiver gets at
   most its share of the workers). */
OMC_TEST(stalled_pullers_cannot_starve_a_legitimate_get) {
    const uint64_t big = 64u << 20;
    omc_conn *s, *r;
    omc_meta m = {0};
    omc_buffer b;
    hz h;
    uint16_t port = 0, dport = 0;
    int fd[2] = {-1, -1}, i;
    omc_result res;
    s = make_sender(256u << 20, NULL, NULL, 0, 2);
    r = make_receiver(128u << 20, NULL, NULL, NULL);
    REQUIRE(s && r);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "a", big, 31, NULL));
    CHECK_OK(put_bytes(s, "b", big, 32, NULL));
    CHECK_OK(put_bytes(s, "c", big, 33, &m));
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    for (i = 0; i < 2; i++) {
        fd[i] = tcp_connect(dport, 4096);           /* a tiny window that nobody drains */
        REQUIRE(fd[i] >= 0);
        CHECK_EQ(data_hello(fd[i], 0xA000u + (uint64_t)i, h.ticket), 0);
        CHECK(hz_pull(&h, 100u + (uint64_t)i, i == 0 ? QKEY("a") : QKEY("b"), big, 0xFFFFFFFFu, 0xA000u + (uint64_t)i) == 0);
    }
    usleep(300000);
    CHECK_OK(put_bytes(s, "warm", 1, 1, NULL));
    memset(&b, 0, sizeof(b));
    res = omc_conn_get(r, "s0", "s1", "c", m.data, m.size, omc_deadline_after_ms(3500), &b);
    CHECK_OK(res);
    if (res == OMC_OK) CHECK(b.size == big && omc_test_verify(b.data, b.size, 33));
    omc_buffer_release(&b);
    for (i = 0; i < 2; i++) if (fd[i] >= 0) close(fd[i]);
    hz_close(&h);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ================================================================================================
   Finding 4: SHM liveness by pid and /proc
   ================================================================================================ */

static char shm_priv[64];

static const char* shm_dir(void) {
    if (!shm_priv[0]) snprintf(shm_priv, sizeof(shm_priv), "/dev/shm/omc-hostile-%ld", (long)getpid());
    mkdir(shm_priv, 0700);      /* again after every shm_dir_remove() */
    return shm_priv;
}

static void shm_dir_remove(void) {
    DIR* d;
    struct dirent* e;
    char p[600];
    if (!shm_priv[0]) return;
    d = opendir(shm_priv);
    if (d) {
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            snprintf(p, sizeof(p), "%s/%s", shm_priv, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(shm_priv);
}

static int shm_files(void) {
    DIR* d = opendir(shm_dir());
    struct dirent* e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) if (strncmp(e->d_name, "omc-", 4) == 0) n++;
    closedir(d);
    return n;
}

static omc_conn* make_shm(const char* channel, omc_role role, uint64_t pool) {
    omc_shm_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.channel = channel;
    d.role = role;
    d.shm_dir = shm_dir();
    d.pool_size = pool ? pool : (4u << 20);
    d.disable_inline = 1;
    d.hooks.log_fn = counting_log;
    d.hooks.max_level = quiet() ? OMC_LOG_WARN : OMC_LOG_DEBUG;
    if (omc_shm_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

/* Sweep the shared directory for dead owners from a child in another namespace: mode 1, a fresh
   pid namespace with its own /proc (`unshare --pid --fork --mount-proc`: no pid of ours exists
   there); mode 2, our pid namespace but no /proc (an empty tmpfs mounted over it). Returns how
   many segments that sweep removed, -2 if the namespaces cannot be made here, -1 on failure. */
static int sweep_from_elsewhere(int mode) {
    int status = 0;
    pid_t mid = fork();
    if (mid < 0) return -1;
    if (mid == 0) {
        pid_t inner;
        if (unshare(mode == 1 ? (CLONE_NEWPID | CLONE_NEWNS) : CLONE_NEWNS) != 0) _exit(102);
        inner = fork();
        if (inner == 0) {
            omc_shm_desc sd;
            uint32_t removed = 0;
            if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) _exit(102);
            if (mode == 1 ? mount("proc", "/proc", "proc", 0, NULL) != 0 : mount("tmpfs", "/proc", "tmpfs", 0, "size=4k") != 0) _exit(102);
            memset(&sd, 0, sizeof(sd));
            sd.shm_dir = shm_dir();
            sd.hooks.log_fn = counting_log;
            sd.hooks.max_level = quiet() ? OMC_LOG_ERROR : OMC_LOG_DEBUG;
            if (omc_shm_sweep_dead(&sd, &removed) != OMC_OK) _exit(101);
            _exit((int)(removed > 100 ? 100 : removed));
        }
        if (inner < 0 || waitpid(inner, &status, 0) != inner) _exit(101);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 101);
    }
    if (waitpid(mid, &status, 0) != mid || !WIFEXITED(status)) return -1;
    status = WEXITSTATUS(status);
    return status == 102 ? -2 : status == 101 ? -1 : status;
}

/* A live owner (this process) and a connector in another pid namespace sharing the shm directory
   (two containers in one pod). Want: that connector's sweep leaves the live owner's segment alone,
   and the owner's puts keep working. */
static void live_owner_survives_sweep(int mode) {
    char chan[32];
    omc_conn* s;
    omc_payload p;
    uint8_t bytes[1000];
    int removed;
    snprintf(chan, sizeof(chan), "ns%ldm%d", (long)getpid(), mode);
    s = make_shm(chan, OMC_ROLE_SENDER, 0);
    REQUIRE(s);
    memset(&p, 0, sizeof(p));
    omc_test_fill(bytes, sizeof(bytes), 41);
    p.data = bytes; p.size = sizeof(bytes);
    CHECK_OK(omc_conn_put(s, "s0", "s1", "k1", &p, NULL));
    removed = sweep_from_elsewhere(mode);
    if (removed == -2) printf("  (namespaces cannot be made here: the case needs CAP_SYS_ADMIN)\n");
    else {
        CHECK_EQ(removed, 0);
        CHECK_EQ(shm_files(), 1);
        CHECK_OK(omc_conn_put(s, "s0", "s1", "k2", &p, NULL));
        {   /* and a receiver still reads what was published */
            omc_conn* r = make_shm(chan, OMC_ROLE_RECEIVER, 0);
            omc_buffer b;
            memset(&b, 0, sizeof(b));
            CHECK(r != NULL);
            if (r) {
                CHECK_OK(omc_conn_get(r, "s0", "s1", "k1", NULL, 0, omc_deadline_after_ms(1000), &b));
                CHECK(b.size == 1000 && omc_test_verify(b.data, 1000, 41));
                omc_buffer_release(&b);
                omc_conn_destroy(r);
            }
        }
    }
    omc_conn_destroy(s);
    shm_dir_remove();
}

OMC_TEST(shm_live_owner_survives_a_sweep_from_another_pid_namespace) { live_owner_survives_sweep(1); }
OMC_TEST(shm_live_owner_survives_a_sweep_from_a_process_without_proc) { live_owner_survives_sweep(2); }

/* A reader in another pid namespace holds a view of a live owner's payload; the owner's full
   pass (omc_conn_sweep) must not reclaim it. The reader's pid there is chosen so that no process
   has that pid in the owner's namespace: by pid, the owner would call it dead. */
OMC_TEST(shm_live_reader_in_another_pid_namespace_keeps_its_view) {
    char chan[32];
    omc_conn* s;
    omc_payload p;
    omc_health h;
    static uint8_t bytes[200000];
    int up[2], down[2], status = 0;
    char x = 0;
    pid_t mid;
    snprintf(chan, sizeof(chan), "rv%ld", (long)getpid());
    s = make_shm(chan, OMC_ROLE_SENDER, 0);
    REQUIRE(s);
    memset(&p, 0, sizeof(p));
    omc_test_fill(bytes, sizeof(bytes), 43);
    p.data = bytes; p.size = sizeof(bytes);
    CHECK_OK(omc_conn_put(s, "s0", "s1", "held", &p, NULL));
    REQUIRE(pipe(up) == 0 && pipe(down) == 0);
    mid = fork();
    REQUIRE(mid >= 0);
    if (mid == 0) {
        pid_t inner;
        if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) { x = 'N'; if (write(up[1], &x, 1)) {} _exit(0); }
        inner = fork();
        if (inner == 0) {       /* pid 1 of the new namespace; /proc is still the parent's */
            char path[64];
            pid_t r;
            for (;;) {          /* a child whose pid means nothing in the owner's namespace */
                r = fork();
                if (r < 0) _exit(1);
                if (r == 0) break;
                snprintf(path, sizeof(path), "/proc/%ld", (long)r);
                if (access(path, F_OK) != 0) { waitpid(r, NULL, 0); _exit(0); }   /* it did the work */
                kill(r, SIGKILL);
                waitpid(r, NULL, 0);
            }
            {   /* the reader (it waits a moment for its parent's check above) */
                omc_conn* rd;
                omc_buffer b;
                usleep(20000);
                rd = make_shm(chan, OMC_ROLE_RECEIVER, 0);
                if (!rd || omc_conn_get(rd, "s0", "s1", "held", NULL, 0, omc_deadline_after_ms(2000), &b) != OMC_OK) _exit(2);
                x = 'H';
                if (write(up[1], &x, 1) != 1 || read(down[0], &x, 1) != 1) _exit(3);
                x = omc_test_verify(b.data, b.size, 43) ? 'V' : 'X';
                omc_buffer_release(&b);
                omc_conn_destroy(rd);
                if (write(up[1], &x, 1) != 1) _exit(4);
                _exit(0);
            }
        }
        if (inner < 0 || waitpid(inner, &status, 0) != inner) _exit(1);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    if (read(up[0], &x, 1) == 1 && x == 'H') {
        omc_conn_sweep(s);                  /* the full pass: dead readers' views are reclaimed here */
        memset(&h, 0, sizeof(h));
        omc_conn_health(s, &h);
        CHECK(h.pool_in_use > 0);           /* the live reader's view still pins its range */
        x = 'R';
        CHECK(write(down[1], &x, 1) == 1);
        CHECK(read(up[0], &x, 1) == 1 && x == 'V');
        omc_conn_sweep(s);
        omc_conn_health(s, &h);
        CHECK_EQ(h.pool_in_use, 0);         /* released: now it is free */
    } else if (x == 'N') printf("  (namespaces cannot be made here: the case needs CAP_SYS_ADMIN)\n");
    else CHECK(!"the reader in the other namespace did not get its view");
    CHECK(waitpid(mid, &status, 0) == mid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(up[0]); close(up[1]); close(down[0]); close(down[1]);
    omc_conn_destroy(s);
    shm_dir_remove();
}

/* ================================================================================================
   Finding 5: SIGBUS from a truncated segment
   ================================================================================================ */

/* The busy owner of the truncation case: creates its segment in `dir`, writes the segment's path
   to descriptor `fd`, then puts and cleans up 256 KiB payloads for 0.4 s and exits 0; a SIGBUS
   that the library did not contain kills it. It runs as a fresh program (the test binary run
   again with --busy-owner), not as a forked copy: a child forked from a multi-threaded process
   under ThreadSanitizer can deadlock inside the sanitizer on a loaded host (threads that held its
   locks at the fork do not exist in the child), which hung this case in a few TSan runs. */
static int busy_owner_main(const char* dir, const char* chan, int fd) {
    static uint8_t bytes[256 << 10];
    char name[OMC_SHM_PATH_MAX];
    omc_conn* s;
    double end;
    int k = 0;
    snprintf(shm_priv, sizeof(shm_priv), "%s", dir);
    s = make_shm(chan, OMC_ROLE_SENDER, 8u << 20);
    memset(name, 0, sizeof(name));
    if (!s || omc_shm_segment_path(s, name, sizeof(name)) != OMC_OK) return 1;
    if (write(fd, name, sizeof(name)) != (ssize_t)sizeof(name)) return 1;
    close(fd);
    end = now_s() + 0.4;
    while (now_s() < end) {
        omc_payload p;
        char key[32];
        memset(&p, 0, sizeof(p));
        p.data = bytes; p.size = sizeof(bytes);
        snprintf(key, sizeof(key), "k%d", k++);
        omc_conn_put(s, "s0", "s1", key, &p, NULL);
        omc_conn_cleanup(s, "s0", "s1", key);
    }
    omc_conn_destroy(s);
    return 0;
}

/* HOSTILE (same uid): truncate a busy owner's segment while it puts in a loop. Want: the owner
   survives every trial (its calls fail with OMC_ERR_SHM_CHANGED or the truncation is impossible),
   never SIGBUS. 6 trials of at most 400 ms of puts each. */
OMC_TEST(truncating_a_busy_owners_segment_does_not_kill_it) {
    int trial, killed = 0;
    for (trial = 0; trial < 6; trial++) {
        char chan[32], path[OMC_SHM_PATH_MAX], fdtext[16];
        int pp[2], status = 0;
        pid_t pid;
        snprintf(chan, sizeof(chan), "tr%ldn%d", (long)getpid(), trial);
        REQUIRE(pipe(pp) == 0);
        snprintf(fdtext, sizeof(fdtext), "%d", pp[1]);
        pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(pp[0]);
            execl("/proc/self/exe", "test_hostile", "--busy-owner", shm_dir(), chan, fdtext, (char*)NULL);
            _exit(127);
        }
        close(pp[1]);
        if (read(pp[0], path, sizeof(path)) == (ssize_t)sizeof(path)) {
            usleep(20000 + (useconds_t)(trial * 13000));
            if (truncate(path, 4096) != 0) {}        /* HOSTILE */
        }
        close(pp[0]);
        waitpid(pid, &status, 0);
        /* a survivor exits 0; a signal (or AddressSanitizer's report of one, exit 1) is a death */
        if (WIFSIGNALED(status)) { killed++; printf("  trial %d: the owner died of signal %d\n", trial, WTERMSIG(status)); }
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { killed++; printf("  trial %d: the owner exited with %d\n", trial, WEXITSTATUS(status)); }
    }
    CHECK_EQ(killed, 0);
    shm_dir_remove();
}

/* ================================================================================================
   Finding 7: a metadata-less get after the sender died mid-transfer
   ================================================================================================ */

/* The sender process is SIGKILLed while it pushes 128 MiB to a metadata-less get. Want: the get
   fails soon after (< 1.5 s) with OMC_ERR_CONNECTION, as the manual says, not at its deadline. */
OMC_TEST(metadataless_get_after_the_sender_died_mid_transfer_fails_fast) {
    const uint64_t big = 128u << 20;
    int pp[2], status;
    uint16_t port = 0;
    pid_t pid;
    REQUIRE(pipe(pp) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        omc_conn* s = make_sender(big + (16u << 20), NULL, NULL, 0, 0);
        omc_tcp_health_info th;
        char x = 'F';
        uint16_t p = 0;
        if (!s || put_bytes(s, "k", big, 71, NULL) != OMC_OK) _exit(1);
        ports_of(s, &p, NULL);
        if (write(pp[1], &p, sizeof(p)) != (ssize_t)sizeof(p)) _exit(1);
        for (;;) {                  /* tell the parent the moment the push is in flight */
            memset(&th, 0, sizeof(th));
            omc_tcp_health(s, &th);
            if (th.pushes_in_flight > 0) { if (write(pp[1], &x, 1)) {} break; }
        }
        for (;;) pause();
    }
    close(pp[1]);
    if (read(pp[0], &port, sizeof(port)) == (ssize_t)sizeof(port)) {
        omc_conn* r = make_receiver(big + (16u << 20), NULL, NULL, NULL);
        omc_buffer b;
        omc_result res;
        double t0, killed_at = 0, t1;
        char x;
        REQUIRE(r);
        CHECK_OK(omc_tcp_add_sender(r, "up", "127.0.0.1", port));
        {   /* the get runs here; a helper thread is not needed: the kill comes from a second child */
            pid_t killer = fork();
            if (killer == 0) {
                if (read(pp[0], &x, 1) == 1) { kill(pid, SIGSTOP); kill(pid, SIGKILL); }
                _exit(0);
            }
            memset(&b, 0, sizeof(b));
            t0 = now_s();
            res = omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(3000), &b);
            t1 = now_s();
            waitpid(killer, &status, 0);
            killed_at = t0;         /* the kill follows the start of the push within milliseconds */
        }
        if (res == OMC_OK) {
            printf("  (the 128 MiB push finished before the kill: not reproduced this time)\n");
            omc_buffer_release(&b);
        } else {
            printf("  get returned %s after %.2f s\n", omc_result_name(res), t1 - killed_at);
            CHECK_RES(res, OMC_ERR_CONNECTION);
            CHECK(t1 - killed_at < 1.5);
        }
        omc_conn_destroy(r);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(pp[0]);
}

/* HOSTILE: a "sender" port whose process accepts and closes every connection (what a sender that
   dies during the ZMTP handshake looks like, or a port that is not ours). No CURVE anywhere.
   Want: the metadata-less get says OMC_ERR_CONNECTION (nobody answered), not OMC_ERR_AUTH, which
   the manual reserves for a failed CURVE handshake. (The fault campaign met this case when it
   killed a sender during the handshake.) */
static int slam_fd = -1;
static void* slam_server(void* arg) {
    (void)arg;
    for (;;) {
        int c = accept(slam_fd, NULL, NULL);
        if (c < 0) return NULL;
        close(c);
    }
}

OMC_TEST(a_peer_that_drops_the_handshake_without_curve_is_a_connection_error) {
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    pthread_t t;
    omc_conn* r;
    omc_buffer b;
    slam_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(slam_fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(slam_fd, (struct sockaddr*)&a, sizeof(a)) == 0 && listen(slam_fd, 16) == 0);
    REQUIRE(getsockname(slam_fd, (struct sockaddr*)&a, &al) == 0);
    REQUIRE(pthread_create(&t, NULL, slam_server, NULL) == 0);
    r = make_receiver(0, NULL, NULL, NULL);
    REQUIRE(r);
    CHECK_OK(omc_tcp_add_sender(r, "dying", "127.0.0.1", ntohs(a.sin_port)));
    memset(&b, 0, sizeof(b));
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(1000), &b), OMC_ERR_CONNECTION);
    omc_conn_destroy(r);
    shutdown(slam_fd, SHUT_RDWR);
    close(slam_fd);
    pthread_join(t, NULL);
}

/* ================================================================================================
   Finding 8: names planted in the shm directory by another uid
   ================================================================================================ */

/* HOSTILE (another uid, here nobody = 65534): 5000 files named like our segments in the shm
   directory. A metadata-less get waits 1 s for a key that never comes. Want: the planted files
   are skipped without being reopened on every scan: at most one WARN per file and well under a
   quarter of a core. */
OMC_TEST(planted_files_in_the_shm_dir_cost_no_cpu_and_are_logged_once) {
    char chan[32], p[600];
    omc_conn* r;
    omc_buffer b;
    uint64_t w0;
    double c0, c1;
    int i, planted = 0;
    if (geteuid() != 0) { printf("  (planting files of another uid needs root)\n"); return; }
    snprintf(chan, sizeof(chan), "pl%ld", (long)getpid());
    for (i = 0; i < 5000; i++) {
        int fd;
        snprintf(p, sizeof(p), "%s/omc-%u-%s-%d-%016llx", shm_dir(), (unsigned)geteuid(), chan, 100000 + i, (unsigned long long)i);
        fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0600);
        if (fd < 0) continue;
        if (fchown(fd, 65534, 65534) == 0) planted++;
        close(fd);
    }
    CHECK_EQ(planted, 5000);
    r = make_shm(chan, OMC_ROLE_RECEIVER, 0);
    REQUIRE(r);
    w0 = __atomic_load_n(&warn_lines, __ATOMIC_RELAXED);
    c0 = cpu_s();
    memset(&b, 0, sizeof(b));
    CHECK_RES(omc_conn_get(r, "s0", "s1", "never", NULL, 0, omc_deadline_after_ms(1000), &b), OMC_ERR_TIMEOUT);
    c1 = cpu_s();
    printf("  1 s wait over %d planted files: %.3f s CPU, %llu WARN lines\n", planted, c1 - c0,
           (unsigned long long)(__atomic_load_n(&warn_lines, __ATOMIC_RELAXED) - w0));
    CHECK(c1 - c0 < 0.25);
    CHECK(__atomic_load_n(&warn_lines, __ATOMIC_RELAXED) - w0 <= (uint64_t)planted);
    omc_conn_destroy(r);
    shm_dir_remove();
}

/* ================================================================================================
   Finding 9: CURVE without an allow-list admits anyone with the public key (documented)
   ================================================================================================ */

/* The documented trade-off, pinned down: without allowed_clients any receiver that knows the
   sender's public key gets in (with any keypair of its own); with the allow-list only listed
   keys do, and the sender counts the refusal. */
OMC_TEST(curve_without_an_allow_list_admits_any_key_holder_and_with_one_only_listed_keys) {
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1], cpub[OMC_CURVE_KEY_LEN + 1], csec[OMC_CURVE_KEY_LEN + 1];
    char xpub[OMC_CURVE_KEY_LEN + 1], xsec[OMC_CURVE_KEY_LEN + 1];
    const char* allowed[1];
    omc_conn *open_s, *strict_s, *stranger, *friend_r;
    omc_meta m1 = {0}, m2 = {0};
    omc_buffer b;
    omc_tcp_health_info th;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK && omc_tcp_curve_keypair(cpub, csec) == OMC_OK &&
            omc_tcp_curve_keypair(xpub, xsec) == OMC_OK);
    allowed[0] = cpub;
    open_s = make_sender(0, sec, NULL, 0, 0);
    strict_s = make_sender(0, sec, allowed, 1, 0);
    stranger = make_receiver(0, pub, xsec, xpub);    /* knows the public key, is on no list */
    friend_r = make_receiver(0, pub, csec, cpub);
    REQUIRE(open_s && strict_s && stranger && friend_r);
    CHECK_OK(put_bytes(open_s, "k", 1000, 91, &m1));
    CHECK_OK(put_bytes(strict_s, "k", 1000, 92, &m2));
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(stranger, "s0", "s1", "k", m1.data, m1.size, omc_deadline_after_ms(3000), &b));
    omc_buffer_release(&b);
    CHECK_RES(omc_conn_get(stranger, "s0", "s1", "k", m2.data, m2.size, omc_deadline_after_ms(1000), &b), OMC_ERR_AUTH);
    memset(&th, 0, sizeof(th));
    omc_tcp_health(strict_s, &th);
    CHECK(th.auth_failures >= 1);
    CHECK_OK(omc_conn_get(friend_r, "s0", "s1", "k", m2.data, m2.size, omc_deadline_after_ms(3000), &b));
    CHECK(b.size == 1000 && omc_test_verify(b.data, 1000, 92));
    omc_buffer_release(&b);
    omc_meta_free(&m1); omc_meta_free(&m2);
    omc_conn_destroy(friend_r); omc_conn_destroy(stranger);
    omc_conn_destroy(strict_s); omc_conn_destroy(open_s);
}

/* ================================================================================================
   Finding 11: a payload that fits in the socket buffers is consumed when it reaches the kernel
   ================================================================================================ */

/* HOSTILE: PULL a 64 KiB put onto a data connection, let the bytes land in the socket buffer,
   and close without reading (a receiver that dies before its read). Want: the read is not used
   up - a real receiver still gets the payload. */
OMC_TEST(small_payload_pulled_by_a_receiver_that_never_reads_is_not_consumed) {
    omc_conn *s, *r;
    omc_meta m = {0};
    omc_buffer b;
    hz h;
    uint16_t port = 0, dport = 0;
    struct pollfd pf;
    int fd;
    s = make_sender(0, NULL, NULL, 0, 0);
    r = make_receiver(0, NULL, NULL, NULL);
    REQUIRE(s && r);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "small", 64u << 10, 111, &m));
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    fd = tcp_connect(dport, 0);
    REQUIRE(fd >= 0);
    CHECK_EQ(data_hello(fd, 0xBEEFu, h.ticket), 0);
    CHECK(hz_pull(&h, 5, QKEY("small"), 1u << 20, 2000, 0xBEEFu) == 0);
    pf.fd = fd; pf.events = POLLIN; pf.revents = 0;
    CHECK(poll(&pf, 1, 2000) == 1);         /* the bytes are in our socket buffer */
    usleep(100000);
    close(fd);                              /* ... and we die without reading them */
    hz_close(&h);
    usleep(200000);
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "small", m.data, m.size, omc_deadline_after_ms(2000), &b));
    CHECK(b.size == (64u << 10) && omc_test_verify(b.data, b.size, 111));
    omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ================================================================================================
   Finding 12: ABORT of a push still queued for a worker
   ================================================================================================ */

/* One worker, held by a 64 MiB push into a connection that never reads. A second PULL (16 MiB,
   more than the listener writes inline) waits in the queue; its receiver gives up and sends
   ABORT. Want: the sender closes that data connection and forgets it (no fd, no slot leaked). */
OMC_TEST(abort_of_a_queued_push_releases_its_data_connection) {
    omc_conn* s;
    hz h;
    uint16_t port = 0, dport = 0;
    int busy, queued;
    s = make_sender(128u << 20, NULL, NULL, 0, 1);
    REQUIRE(s);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "big", 64u << 20, 121, NULL));
    CHECK_OK(put_bytes(s, "mid", 16u << 20, 122, NULL));
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    busy = tcp_connect(dport, 4096);
    queued = tcp_connect(dport, 4096);
    REQUIRE(busy >= 0 && queued >= 0);
    CHECK_EQ(data_hello(busy, 0xC001u, h.ticket), 0);
    CHECK_EQ(data_hello(queued, 0xC002u, h.ticket), 0);
    CHECK(hz_pull(&h, 1, QKEY("big"), 64u << 20, 60000, 0xC001u) == 0);
    usleep(200000);
    CHECK(hz_pull(&h, 2, QKEY("mid"), 16u << 20, 60000, 0xC002u) == 0);
    usleep(200000);
    CHECK(hz_send(&h, HZ_ABORT, 2, NULL, 0) == 0);
    CHECK(closed_within(queued, 1500));
    CHECK_EQ(tcp_data_connections(s), 1);
    close(busy); close(queued);
    hz_close(&h);
    omc_conn_destroy(s);
}

/* ================================================================================================
   Finding 13: what the wire documentation says, checked from outside
   ================================================================================================ */

/* CRC-32C as the documentation should state it: Castagnoli polynomial 0x1EDC6F41 (reflected
   0x82F63B78), initial value 0xFFFFFFFF, input and output reflected, final XOR 0xFFFFFFFF; the
   check value of "123456789" is 0xE3069283. Written here bit by bit. */
static uint32_t crc32c_ref(const uint8_t* p, size_t n, uint32_t crc) {
    size_t i;
    int k;
    crc = ~crc;
    for (i = 0; i < n; i++) {
        crc ^= p[i];
        for (k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

OMC_TEST(crc32c_is_castagnoli_with_check_value_e3069283) {
    CHECK_EQ(crc32c_ref((const uint8_t*)"123456789", 9, 0), 0xE3069283u);
    CHECK_EQ(omc__crc32c(0, "123456789", 9), 0xE3069283u);
}

/* The metadata envelope's CRC covers bytes 0..39 (the whole 40-byte header) with the CRC field
   (32..35) zero, then the key and the body. */
OMC_TEST(envelope_crc_covers_bytes_0_to_39_with_the_crc_field_zero) {
    omc_conn* c;
    omc_local_desc d;
    omc_meta m = {0};
    omc_payload p;
    uint8_t bytes[100];
    memset(&d, 0, sizeof(d));
    REQUIRE(omc_local_create(&d, &c) == OMC_OK);
    memset(&p, 0, sizeof(p));
    p.data = bytes; p.size = sizeof(bytes);
    CHECK_OK(omc_conn_put(c, "s0", "s1", "k", &p, &m));
    if (m.data && m.size >= 40) {
        uint8_t* copy = (uint8_t*)malloc(m.size);
        uint32_t stored = rd32(m.data + 32);
        REQUIRE(copy);
        memcpy(copy, m.data, m.size);
        le32(copy + 32, 0);
        CHECK_EQ(crc32c_ref(copy, m.size, 0), stored);     /* 0..39, key, body */
        CHECK(crc32c_ref(copy, 32, 0) != stored);           /* not just 0..31 */
        copy[38] ^= 1;                                       /* a reserved byte is covered too */
        CHECK(crc32c_ref(copy, m.size, 0) != stored);
        free(copy);
    }
    omc_meta_free(&m);
    omc_conn_destroy(c);
}

/* ERROR is a reply, not a request: a sender answers an ERROR from a receiver with
   ERROR(OMC_ERR_PROTOCOL) and carries on. */
OMC_TEST(a_sender_answers_an_error_from_a_receiver_with_protocol) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint8_t body[16 + 4], rep[8192];
    uint16_t port = 0;
    hz h;
    REQUIRE(s);
    ports_of(s, &port, NULL);
    REQUIRE(hz_open(&h, port) == 0);
    memset(body, 0, sizeof(body));
    le32(body, (uint32_t)(int32_t)OMC_ERR_TIMEOUT); le16(body + 4, 4); memcpy(body + 16, "gone", 4);
    CHECK(hz_send(&h, HZ_ERROR, 77, body, sizeof(body)) == 0);
    CHECK_EQ(hz_recv(&h, rep, sizeof(rep), 2000, NULL), HZ_ERROR);
    CHECK_EQ((int32_t)rd32(rep + 32), OMC_ERR_PROTOCOL);
    CHECK_EQ(rd64(rep + 8), 77);
    CHECK_EQ(hz_query(&h, 78, QKEY("nope"), 0, 2000, NULL), HZ_NOT_FOUND);   /* and carries on */
    hz_close(&h);
    omc_conn_destroy(s);
}

/* At most 1024 QUERYs are held at once; the 1025th for an absent key is answered NOT_FOUND at
   once, whatever wait it asked for. */
OMC_TEST(held_queries_are_capped_at_1024_then_not_found_at_once) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint8_t body[8 + 32], rep[8192];
    uint16_t port = 0;
    double t0;
    int i, t;
    hz h;
    REQUIRE(s);
    ports_of(s, &port, NULL);
    REQUIRE(hz_open(&h, port) == 0);
    for (i = 0; i < 1024; i++) {        /* HOSTILE: fill the table with queries held 1 s */
        le32(body, 1000); le16(body + 4, 10); le16(body + 6, 0); memcpy(body + 8, QKEY("nope"), 10);
        CHECK(hz_send(&h, HZ_QUERY, 1000u + (uint64_t)i, body, 18) == 0);
    }
    usleep(100000);
    t0 = now_s();
    CHECK(hz_send(&h, HZ_QUERY, 5000, body, 18) == 0);
    /* the first NOT_FOUND to come back answers the 1025th, and it comes at once */
    t = hz_recv(&h, rep, sizeof(rep), 2000, NULL);
    CHECK_EQ(t, HZ_NOT_FOUND);
    CHECK_EQ(rd64(rep + 8), 5000);
    CHECK(now_s() - t0 < 0.5);
    hz_close(&h);
    omc_conn_destroy(s);
}

/* A data token belongs to the side-channel session that registered it. HOSTILE: a second
   channel (another DEALER) PULLs naming the first channel's token. Want: refused with an ERROR,
   and nothing is written on the first channel's data connection. */
OMC_TEST(pull_naming_another_channels_data_token_is_refused) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint8_t rep[8192];
    uint16_t port = 0, dport = 0;
    struct pollfd pf;
    hz victim, thief;
    int fd, t;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "k", 4096, 131, NULL));
    REQUIRE(hz_open(&victim, port) == 0 && hz_open(&thief, port) == 0);
    CHECK(hz_hello(&victim) == HZ_HELLO);
    CHECK(hz_hello(&thief) == HZ_HELLO);
    CHECK(victim.has_ticket && thief.has_ticket && memcmp(victim.ticket, thief.ticket, 16) != 0);
    fd = tcp_connect(dport, 0);                 /* the victim's data connection */
    REQUIRE(fd >= 0);
    CHECK_EQ(data_hello(fd, 0xD00Du, victim.ticket), 0);
    CHECK(hz_pull(&thief, 9, QKEY("k"), 1u << 20, 2000, 0xD00Du) == 0);
    t = hz_recv(&thief, rep, sizeof(rep), 2000, NULL);
    CHECK_EQ(t, HZ_ERROR);
    pf.fd = fd; pf.events = POLLIN; pf.revents = 0;
    CHECK(poll(&pf, 1, 300) == 0);              /* no push on the victim's connection */
    close(fd);
    hz_close(&victim); hz_close(&thief);
    omc_conn_destroy(s);
}

/* ================================================================================================
   Requests on the data connection, and payloads inside the metadata
   ================================================================================================ */

/* A data connection registered with this session's ticket (0 ack), or -1. */
static int data_conn(uint16_t dport, uint64_t token, const hz* h) {
    int fd = tcp_connect(dport, 0);
    if (fd < 0) return -1;
    if (data_hello(fd, token, h->ticket) != 0) { close(fd); return -1; }
    return fd;
}

/* The key proof of a request (bytes 48..63): the first 16 bytes of HMAC-SHA-256 keyed with the
   session's ticket secret (secret = the 32 bytes after the ticket id) over "omniconn request key
   4", the entry id (u64) and the qualified key the receiver asks for. */
static void key_proof(const uint8_t* secret, uint64_t entry, const char* qkey, uint8_t* out) {
    static const char label[] = "omniconn request key 4";
    uint8_t id[8], mac[32];
    const void* part[3];
    size_t len[3];
    le64(id, entry);
    part[0] = label; len[0] = sizeof(label) - 1;
    part[1] = id; len[1] = 8;
    part[2] = qkey; len[2] = strlen(qkey);
    omc__hmac_sha256(secret, 32, part, len, 3, mac);
    memcpy(out, mac, 16);
}

/* A request on a data connection, encoded from the documentation (64 bytes): magic "OMCP", op
   (1 PULL, 2 CLAIM), reserved, transfer id, entry id, expected incarnation, capacity, budget,
   reserved, the 16-byte key proof. */
static void dreq_encode(uint8_t* q, uint8_t op, uint64_t xfer, uint64_t entry, uint64_t expect, uint64_t capacity, uint32_t budget,
                        const uint8_t* proof) {
    memset(q, 0, 64);
    le32(q, 0x50434D4Fu); q[4] = op;
    le64(q + 8, xfer); le64(q + 16, entry); le64(q + 24, expect); le64(q + 32, capacity); le32(q + 40, budget);
    memcpy(q + 48, proof, 16);
}

/* The request for qkey, proven with session h's secret. */
static int dreq_key(int fd, const hz* h, uint8_t op, uint64_t xfer, uint64_t entry, uint64_t expect, uint64_t capacity, const char* qkey) {
    uint8_t q[64], proof[16];
    key_proof(h->ticket + 16, entry, qkey, proof);
    dreq_encode(q, op, xfer, entry, expect, capacity, 2000, proof);
    return write(fd, q, sizeof(q)) == (ssize_t)sizeof(q) ? 0 : -1;
}

/* The request for the key s0/s1/k (the one the cases below put). */
static int dreq(int fd, const hz* h, uint8_t op, uint64_t xfer, uint64_t entry, uint64_t expect, uint64_t capacity) {
    return dreq_key(fd, h, op, xfer, entry, expect, capacity, QKEY("k"));
}

/* Read exactly n bytes (the socket has a 2 s receive timeout); 0 on success. */
static int read_n(int fd, uint8_t* p, size_t n) {
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

/* The 24-byte status record the sender answers a refused request (or a claim) with: magic "OMCS",
   i32 code, the transfer id, detail. Returns the code, or 1 if something else came. */
static int dstatus(int fd, uint64_t xfer, uint64_t* detail) {
    uint8_t st[24];
    if (read_n(fd, st, sizeof(st)) != 0 || rd32(st) != 0x53434D4Fu || rd64(st + 8) != xfer) return 1;
    if (detail) *detail = rd64(st + 16);
    return (int)(int32_t)rd32(st + 4);
}

static uint64_t entry_of(const omc_meta* m) {
    omc_meta_info mi;
    return omc_meta_parse(m->data, m->size, &mi) == OMC_OK && mi.body_len >= 8 ? rd64(mi.body) : 0;
}

static uint64_t tcp_protocol_errors(omc_conn* s) {
    omc_tcp_health_info th;
    memset(&th, 0, sizeof(th));
    omc_tcp_health(s, &th);
    return th.protocol_errors;
}

/* HOSTILE: a receiver with a valid ticket sends garbage where a request belongs. Want: bytes that
   are not a request close the connection at once (never a push, a protocol error counted); a
   well-formed request the sender refuses (unknown entry, too small a destination, a claim whose
   size lies, another incarnation) gets a status record and nothing else, the connection stays in
   step and serves the next request; a real get still works afterwards. */
OMC_TEST(garbage_requests_on_a_data_connection_are_refused_or_closed) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn* r = make_receiver(0, NULL, NULL, NULL);
    static const char* junk[] = { "GET / HTTP/1.0\r\n\r\n", "OMCPxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" };
    uint8_t q[64], proof[16], hdr[24], payload[4096], rc[8], trl[8];
    omc_meta m = {0};
    omc_buffer b;
    uint16_t port = 0, dport = 0;
    uint64_t entry, detail = 0, errs0;
    hz h;
    int fd, i;
    REQUIRE(s && r);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "k", 4096, 141, &m));   /* inline, but a PULL may ask for the bytes all the same */
    entry = entry_of(&m);
    CHECK(entry != 0);
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    errs0 = tcp_protocol_errors(s);
    for (i = 0; i < 2; i++) {           /* not a request at all / the right magic, then junk */
        fd = data_conn(dport, 0xE000u + (uint64_t)i, &h);
        REQUIRE(fd >= 0);
        CHECK(write(fd, junk[i], strlen(junk[i])) > 0);
        CHECK(closed_within(fd, 1500));
        close(fd);
    }
    for (i = 0; i < 5; i++) {           /* bad op, a reserved byte, entry id 0, a reserved u16, a reserved u32 */
        fd = data_conn(dport, 0xE100u + (uint64_t)i, &h);
        REQUIRE(fd >= 0);
        key_proof(h.ticket + 16, entry, QKEY("k"), proof);
        dreq_encode(q, 1, 0, entry, 0, 1u << 20, 0, proof);
        if (i == 0) q[4] = 9;
        if (i == 1) q[5] = 1;
        if (i == 2) le64(q + 16, 0);
        if (i == 3) le16(q + 6, 1);
        if (i == 4) le32(q + 44, 0x3c4ab68cu);     /* where a version-3 request had its CRC of the key */
        CHECK(write(fd, q, sizeof(q)) == (ssize_t)sizeof(q));
        CHECK(closed_within(fd, 1500));
        close(fd);
    }
    CHECK(tcp_protocol_errors(s) >= errs0 + 7);
    fd = data_conn(dport, 0xE200u, &h);
    REQUIRE(fd >= 0);
    CHECK(dreq(fd, &h, 1, 1, entry ^ ((uint64_t)0x77 << 32), 0, 1u << 20) == 0);     /* an entry that is not there */
    CHECK_EQ(dstatus(fd, 1, NULL), OMC_ERR_NOT_FOUND);
    CHECK(dreq(fd, &h, 1, 2, entry, 0, 100) == 0);                                  /* too small a destination */
    CHECK_EQ(dstatus(fd, 2, &detail), OMC_ERR_TOO_LARGE);
    CHECK_EQ(detail, 4096);
    CHECK(dreq(fd, &h, 2, 3, entry, 0, 4095) == 0);                                 /* a claim whose size lies */
    CHECK_EQ(dstatus(fd, 3, NULL), OMC_ERR_NOT_FOUND);                         /* as if it did not exist */
    CHECK(dreq(fd, &h, 1, 4, entry, 0x1234u, 1u << 20) == 0);                       /* metadata of another process */
    CHECK_EQ(dstatus(fd, 4, NULL), OMC_ERR_PEER_RESTARTED);
    CHECK(dreq_key(fd, &h, 1, 7, entry, 0, 1u << 20, QKEY("other")) == 0);         /* the entry of another key */
    CHECK_EQ(dstatus(fd, 7, NULL), OMC_ERR_NOT_FOUND);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "k"));                              /* nothing was used up */
    CHECK(dreq(fd, &h, 1, 5, entry, 0, 1u << 20) == 0);                             /* now a real pull, by hand */
    CHECK(read_n(fd, hdr, sizeof(hdr)) == 0 && rd32(hdr) == 0x44434D4Fu && rd64(hdr + 8) == 5 && rd64(hdr + 16) == 4096);
    CHECK(read_n(fd, payload, sizeof(payload)) == 0 && omc_test_verify(payload, sizeof(payload), 141));
    le32(rc, 0x47434D4Fu); le32(rc + 4, 0);     /* the receipt, "OMCG" */
    CHECK(write(fd, rc, sizeof(rc)) == (ssize_t)sizeof(rc));
    CHECK(read_n(fd, trl, sizeof(trl)) == 0 && rd32(trl) == 0x45434D4Fu);
    CHECK(dreq(fd, &h, 1, 6, entry, 0, 1u << 20) == 0);                             /* its one reader is used up */
    CHECK_EQ(dstatus(fd, 6, NULL), OMC_ERR_NOT_FOUND);
    close(fd);
    hz_close(&h);
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(2000), &b), OMC_ERR_NOT_FOUND);
    omc_meta_free(&m);
    CHECK_OK(put_bytes(s, "k2", 100000, 142, &m));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k2", m.data, m.size, omc_deadline_after_ms(2000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 142));
    omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* HOSTILE: a receiver that asks on its data connection, takes the header of a small payload the
   listener wrote whole, never sends its receipt and goes away uses up nothing: the listener,
   which waits for that receipt itself, gives the reader back when the connection closes (or at
   the stall timeout), and the real receiver gets every byte. */
OMC_TEST(a_requester_that_never_sends_its_receipt_uses_up_nothing) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn* r = make_receiver(0, NULL, NULL, NULL);
    uint8_t hdr[24];
    omc_meta m = {0};
    omc_buffer b;
    uint16_t port = 0, dport = 0;
    hz h;
    int fd;
    REQUIRE(s && r);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "r", 32u << 10, 143, &m));
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    fd = data_conn(dport, 0xF00Du, &h);
    REQUIRE(fd >= 0);
    CHECK(dreq_key(fd, &h, 1, 1, entry_of(&m), 0, 1u << 20, QKEY("r")) == 0);
    CHECK(read_n(fd, hdr, sizeof(hdr)) == 0 && rd64(hdr + 16) == (32u << 10));
    usleep(100000);                 /* the payload sits in our socket; no receipt, and we go */
    close(fd);
    hz_close(&h);
    usleep(200000);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "r", m.data, m.size, omc_deadline_after_ms(2000), &b));
    CHECK(b.size == (32u << 10) && omc_test_verify(b.data, b.size, 143));
    omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* Forge an envelope: copy meta, let edit() change it, reseal the CRC. */
static void forged(const omc_meta* m, void (*edit)(uint8_t* p, uint32_t* n), omc_meta* out) {
    uint8_t* p = (uint8_t*)malloc(m->size + 64);
    uint32_t n = m->size;
    memcpy(p, m->data, m->size);
    edit(p, &n);
    le32(p + 28, n - 40 - (uint32_t)(p[24] | p[25] << 8));     /* body length follows the edit */
    out->data = p;
    out->size = n;
    omc__meta_seal(out);
}

static void edit_size_down(uint8_t* p, uint32_t* n) { (void)n; le64(p + 8, rd64(p + 8) - 1); }
static void edit_size_huge(uint8_t* p, uint32_t* n) { (void)n; le64(p + 8, (uint64_t)1 << 40); }
static void edit_drop_flag(uint8_t* p, uint32_t* n) { (void)n; p[6] &= (uint8_t)~1u; }
static void edit_cut_byte(uint8_t* p, uint32_t* n) { (void)p; (*n)--; }
static void edit_add_flag(uint8_t* p, uint32_t* n) { (void)n; p[6] |= 1u; }

/* HOSTILE: inline metadata that lies - a size that does not match the bytes carried, a size over
   OMC_TCP_MAX_INLINE, the inline flag dropped or added, a byte cut - is refused before anything
   is asked of the sender (OMC_ERR_MALFORMED, nothing consumed); the true metadata works after. */
OMC_TEST(inline_metadata_that_lies_is_refused_and_consumes_nothing) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn* r = make_receiver(0, NULL, NULL, NULL);
    void (*edits[])(uint8_t*, uint32_t*) = { edit_size_down, edit_size_huge, edit_drop_flag, edit_cut_byte };
    omc_meta m = {0}, big = {0}, f = {0};
    omc_buffer b;
    size_t i;
    REQUIRE(s && r);
    CHECK_OK(put_bytes(s, "in", 1000, 144, &m));
    CHECK_OK(put_bytes(s, "out", 100000, 145, &big));
    for (i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        forged(&m, edits[i], &f);
        memset(&b, 0, sizeof(b));
        CHECK_RES(omc_conn_get(r, "s0", "s1", "in", f.data, f.size, omc_deadline_after_ms(1000), &b), OMC_ERR_MALFORMED);
        omc_meta_free(&f);
    }
    forged(&big, edit_add_flag, &f);
    CHECK_RES(omc_conn_get(r, "s0", "s1", "out", f.data, f.size, omc_deadline_after_ms(1000), &b), OMC_ERR_MALFORMED);
    omc_meta_free(&f);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "in"));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "in", m.data, m.size, omc_deadline_after_ms(2000), &b));
    CHECK(b.size == 1000 && omc_test_verify(b.data, b.size, 144));
    omc_buffer_release(&b);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "out", big.data, big.size, omc_deadline_after_ms(2000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 145));
    omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_meta_free(&big);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* What a receiver's HELLO carries, and its sequence numbers, seen by a fake sender (a raw ROUTER
   that never answers): the first message on a channel is a HELLO with capability bit 0 (TCP) and
   no endpoint record (a receiver has no TCP record to offer; type 2 only with an RDMA plane), the
   QUERY is pipelined behind it, sequence numbers start at 1 and grow by one per request (later
   channels, after a retry, start again at 1: only the first two messages are checked); a get
   whose sender never answers fails with OMC_ERR_CONNECTION. */
OMC_TEST(a_receivers_hello_carries_its_capabilities_and_sequence_numbers_start_at_1) {
    void* ctx = zmq_ctx_new();
    void* router = zmq_socket(ctx, ZMQ_ROUTER);
    omc_conn* r;
    omc_buffer b;
    char ep[64];
    size_t el = sizeof(ep);
    int zero = 0, n, seen = 0, port = 0;
    uint8_t rid[256], msg[8192];
    uint32_t last_seq = 0;
    REQUIRE(ctx && router);
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof(zero));
    REQUIRE(zmq_bind(router, "tcp://127.0.0.1:*") == 0);
    REQUIRE(zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &el) == 0);
    port = atoi(strrchr(ep, ':') + 1);
    r = make_receiver(0, NULL, NULL, NULL);
    REQUIRE(r);
    CHECK_OK(omc_tcp_add_sender(r, "fake", "127.0.0.1", (uint16_t)port));
    memset(&b, 0, sizeof(b));
    CHECK_RES(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(600), &b), OMC_ERR_CONNECTION);
    for (;;) {                       /* what the receiver sent meanwhile */
        int more = 0;
        size_t ml = sizeof(more);
        if (zmq_recv(router, rid, sizeof(rid), ZMQ_DONTWAIT) < 0) break;
        zmq_getsockopt(router, ZMQ_RCVMORE, &more, &ml);
        if (!more) continue;
        n = zmq_recv(router, msg, sizeof(msg), ZMQ_DONTWAIT);
        if (n < 32) continue;
        if (seen == 0) {
            CHECK_EQ(msg[5], HZ_HELLO);
            CHECK_EQ(rd32(msg + 28), 8);                 /* caps, count, reserved: no record */
            CHECK(rd32(msg + 32) & 1u);
            CHECK_EQ(msg[36] | msg[37] << 8, 0);
            CHECK_EQ(rd32(msg + 24), 1);
        } else if (seen == 1) {
            CHECK_EQ(msg[5], HZ_QUERY);                  /* pipelined behind the HELLO */
            CHECK_EQ(rd32(msg + 24), last_seq + 1);
        }
        last_seq = rd32(msg + 24);
        seen++;
    }
    CHECK(seen >= 2);
    omc_conn_destroy(r);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

/* ================================================================================================
   Finding 14: a timed-out get counts only as a timeout
   ================================================================================================ */

static void timeout_counts_once(omc_conn* c, const char* what) {
    omc_health h0, h1;
    omc_buffer b;
    memset(&b, 0, sizeof(b));
    REQUIRE(c);
    omc_conn_health(c, &h0);
    CHECK_RES(omc_conn_get(c, "s0", "s1", "absent", NULL, 0, omc_deadline_after_ms(100), &b), OMC_ERR_TIMEOUT);
    omc_conn_health(c, &h1);
    if (h1.errors != h0.errors || h1.timeouts != h0.timeouts + 1)
        printf("  %s: errors %llu -> %llu, timeouts %llu -> %llu\n", what, (unsigned long long)h0.errors,
               (unsigned long long)h1.errors, (unsigned long long)h0.timeouts, (unsigned long long)h1.timeouts);
    CHECK_EQ(h1.timeouts, h0.timeouts + 1);
    CHECK_EQ(h1.errors, h0.errors);
}

OMC_TEST(timed_out_get_counts_only_as_a_timeout) {
    omc_local_desc ld;
    omc_conn *local = NULL, *shm, *s, *r;
    char chan[32];
    memset(&ld, 0, sizeof(ld));
    CHECK_OK(omc_local_create(&ld, &local));
    timeout_counts_once(local, "local");
    omc_conn_destroy(local);
    snprintf(chan, sizeof(chan), "to%ld", (long)getpid());
    shm = make_shm(chan, OMC_ROLE_DUAL, 0);
    timeout_counts_once(shm, "shm");
    if (shm) omc_conn_destroy(shm);
    shm_dir_remove();
    s = make_sender(0, NULL, NULL, 0, 0);
    r = make_receiver(0, NULL, NULL, NULL);
    if (s && r) {
        uint16_t port = 0;
        ports_of(s, &port, NULL);
        CHECK_OK(omc_tcp_add_sender(r, "up", "127.0.0.1", port));
        {   /* a channel in the cache first: a 100 ms get on a loaded machine must not spend its
               time on the first HELLO (no answer at all is a connection error, not a timeout) */
            omc_tcp_found f;
            CHECK_RES(omc_tcp_query(r, NULL, "s0", "s1", "absent", omc_deadline_after_ms(2000), &f), OMC_ERR_NOT_FOUND);
        }
        timeout_counts_once(r, "tcp");
    }
    if (r) omc_conn_destroy(r);
    if (s) omc_conn_destroy(s);
}

/* ================================================================================================
   Edges, round two: the data-port listener, requests, tickets
   ================================================================================================ */

/* Descriptors a process has open (/proc/PID/fd), or -1. */
static int fd_count(pid_t pid) {
    char path[64];
    struct dirent* de;
    DIR* d;
    int n = 0;
    snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
    if (!(d = opendir(path))) return -1;
    while ((de = readdir(d)) != NULL) if (de->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Wait until pid has at least n descriptors open (the listener accepted what we connected). */
static int fds_reach(pid_t pid, int n, int ms) {
    double end = now_s() + ms / 1000.0;
    while (now_s() < end) {
        if (fd_count(pid) >= n) return 1;
        usleep(2000);
    }
    return 0;
}

/* HOSTILE: 64 connections that owe their hello (the most the listener keeps), then - with the
   sender stopped, so one poll() round sees it all - a byte on each of them and a 65th connect.
   Accepting the 65th closes the oldest pending connection; the same round must not then read
   the readable, closed one (a heap use-after-free: ASan reports it, a plain build reads freed
   memory silently). The sender runs in a child, stopped with SIGSTOP between rounds; afterwards
   it must still serve a real get on its data port and exit cleanly. */
OMC_TEST(evicting_a_pending_connection_in_the_same_poll_round_never_touches_it_again) {
    int up[2], go[2], status = 0, round, i, fds[65], base;
    uint16_t dport = 0;
    pid_t pid;
    REQUIRE(pipe(up) == 0 && pipe(go) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
        omc_conn* r = make_receiver(0, NULL, NULL, NULL);
        omc_meta m = {0};
        omc_buffer b;
        uint16_t p = 0, dp = 0;
        char x;
        int ok;
        close(up[0]); close(go[1]);
        if (!s || !r) _exit(2);
        ports_of(s, &p, &dp);
        if (write(up[1], &dp, sizeof(dp)) != (ssize_t)sizeof(dp)) _exit(2);
        if (read(go[0], &x, 1) != 1) _exit(2);
        /* the data port still works: a 100 KB get through it */
        ok = put_bytes(s, "after", 100000, 201, &m) == OMC_OK &&
             omc_conn_get(r, "s0", "s1", "after", m.data, m.size, omc_deadline_after_ms(5000), &b) == OMC_OK &&
             b.size == 100000 && omc_test_verify(b.data, b.size, 201);
        if (ok) omc_buffer_release(&b);
        omc_meta_free(&m);
        omc_conn_destroy(r);
        omc_conn_destroy(s);
        _exit(ok ? 0 : 3);
    }
    close(up[1]); close(go[0]);
    REQUIRE(read(up[0], &dport, sizeof(dport)) == (ssize_t)sizeof(dport));
    base = fd_count(pid);
    REQUIRE(base > 0);
    for (round = 0; round < 4; round++) {
        for (i = 0; i < 64; i++) fds[i] = tcp_connect(dport, 0);
        for (i = 0; i < 64; i++) REQUIRE(fds[i] >= 0);
        /* an event, not a delay: the listener accepted all 64 (its descriptor count says so) */
        CHECK(fds_reach(pid, base + 64, 5000));
        REQUIRE(kill(pid, SIGSTOP) == 0);
        REQUIRE(waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status));
        for (i = 0; i < 64; i++) CHECK(write(fds[i], "O", 1) == 1);     /* every one readable... */
        fds[64] = tcp_connect(dport, 0);                                /* ...and the 65th in the backlog */
        CHECK(fds[64] >= 0);
        REQUIRE(kill(pid, SIGCONT) == 0);
        /* the oldest is closed for the 65th: wait for its EOF, then let the rest go */
        CHECK(closed_within(fds[0], 3000));
        for (i = 0; i < 65; i++) if (fds[i] >= 0) close(fds[i]);
        if (waitpid(pid, &status, WNOHANG) != 0) break;     /* the child died */
        {   /* the listener saw every close: back to its base count */
            double end = now_s() + 5;
            while (now_s() < end && fd_count(pid) > base) usleep(2000);
        }
    }
    CHECK(write(go[1], "g", 1) == 1);
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        printf("  sender child ended with %s %d\n", WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(up[0]); close(go[1]);
}

/* HOSTILE: a session with a valid ticket sends a CLAIM - "I have the bytes from inline metadata,
   record my read" - for an entry the sender never inlined (100 KB, over the inline threshold).
   The side-channel PULL has no such shortcut; a request must not have one either. Want: refused
   with a status record, no read used; the real receiver gets the bytes. */
OMC_TEST(claim_of_an_entry_that_was_never_inlined_is_refused) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn* r = make_receiver(0, NULL, NULL, NULL);
    omc_meta m = {0};
    omc_buffer b;
    uint16_t port = 0, dport = 0;
    hz h;
    int fd;
    REQUIRE(s && r);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "k", 100000, 202, &m));
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    fd = data_conn(dport, 0xC1A1u, &h);
    REQUIRE(fd >= 0);
    CHECK(dreq(fd, &h, 2, 1, entry_of(&m), 0, 100000) == 0);
    CHECK(dstatus(fd, 1, NULL) < 0);
    close(fd);
    hz_close(&h);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "k"));
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(3000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 202));
    if (b.data) omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* Put another entry's id into an envelope (body offset 0), keeping everything else. */
static uint64_t rekey_entry;
static void edit_entry_id(uint8_t* p, uint32_t* n) { (void)n; le64(p + 40 + (p[24] | p[25] << 8), rekey_entry); }

/* HOSTILE (whoever carries the metadata): B's envelope with A's entry id, CRC resealed. A
   side-channel PULL names the key and the sender checks both; a request names only the entry,
   so get(B) came back with A's bytes - and used up A's read. Want: the get of B fails, nothing is
   used up, both true envelopes still work. Once with payloads too large to inline, once inline
   (a CLAIM). */
static void rekeyed_envelope_case(uint64_t size) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn* r = make_receiver(0, NULL, NULL, NULL);
    omc_meta a = {0}, bm = {0}, f = {0};
    omc_buffer b;
    omc_result res;
    REQUIRE(s && r);
    CHECK_OK(put_bytes(s, "A", size, 203, &a));
    CHECK_OK(put_bytes(s, "B", size, 204, &bm));
    rekey_entry = entry_of(&a);
    forged(&bm, edit_entry_id, &f);
    memset(&b, 0, sizeof(b));
    res = omc_conn_get(r, "s0", "s1", "B", f.data, f.size, omc_deadline_after_ms(3000), &b);
    if (res == OMC_OK) {
        printf("  get(B) with A's entry id returned %s bytes\n", omc_test_verify(b.data, b.size, 203) ? "A's" : "some");
        omc_buffer_release(&b);
    }
    CHECK(res != OMC_OK);
    omc_meta_free(&f);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "A"));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "A", a.data, a.size, omc_deadline_after_ms(3000), &b));
    CHECK(b.size == size && omc_test_verify(b.data, b.size, 203));
    if (b.data) omc_buffer_release(&b);
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "B", bm.data, bm.size, omc_deadline_after_ms(3000), &b));
    CHECK(b.size == size && omc_test_verify(b.data, b.size, 204));
    if (b.data) omc_buffer_release(&b);
    omc_meta_free(&a);
    omc_meta_free(&bm);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

OMC_TEST(a_rekeyed_envelope_cannot_return_another_entrys_bytes) {
    rekeyed_envelope_case(100000);      /* a PULL request */
    rekeyed_envelope_case(1000);        /* inline: a CLAIM */
}

/* ---- finding: one address must not take the data port or the ticket table ------------------ */

/* A side-channel session from a chosen loopback address (127.0.0.x), on a shared context. */
static int hz_open_from(hz* h, void* ctx, const char* src, uint16_t port) {
    char ep[96];
    int zero = 0, send_ms = 2000;
    memset(h, 0, sizeof(*h));
    if (!(h->sock = zmq_socket(ctx, ZMQ_DEALER))) return -1;
    zmq_setsockopt(h->sock, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(h->sock, ZMQ_SNDTIMEO, &send_ms, sizeof(send_ms));
    snprintf(ep, sizeof(ep), "tcp://%s:0;127.0.0.1:%u", src, (unsigned)port);
    return zmq_connect(h->sock, ep);
}

/* A data connection from a chosen loopback address: the ack status (0 = registered), 1 if the
   sender closed it, -100 if we could not connect. */
static int data_conn_from(const char* src, uint16_t dport, uint64_t token, const hz* h, int* fd_out) {
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), st;
    struct timeval tv = {2, 0};
    *fd_out = -1;
    if (fd < 0) return -100;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    inet_pton(AF_INET, src, &a.sin_addr);
    if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0) { close(fd); return -100; }
    a.sin_port = htons(dport);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) { close(fd); return -100; }
    st = data_hello(fd, token, h->ticket);
    if (st == 0) *fd_out = fd;
    else close(fd);
    return st;
}

/* A side-channel client that chooses its own ZMQ routing id (ZMQ_ROUTING_ID). */
static int hz_open_rid(hz* h, uint16_t port, const char* rid) {
    char ep[64];
    int zero = 0, send_ms = 2000;
    memset(h, 0, sizeof(*h));
    h->ctx = zmq_ctx_new();
    if (!h->ctx || !(h->sock = zmq_socket(h->ctx, ZMQ_DEALER))) return -1;
    zmq_setsockopt(h->sock, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(h->sock, ZMQ_SNDTIMEO, &send_ms, sizeof(send_ms));
    zmq_setsockopt(h->sock, ZMQ_ROUTING_ID, rid, strlen(rid));
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", (unsigned)port);
    return zmq_connect(h->sock, ep);
}

/* HOSTILE: a session that chose its routing id takes a ticket and fills its 16 data-connection
   slots, then its side channel goes away (its data connections stay). A later connection that
   sets the same routing id (anyone can) must not inherit that ticket: it gets a ticket of its
   own (and so its own 16 slots), and it cannot have a push written to the first session's data
   connections. */
OMC_TEST(a_later_connection_with_the_same_routing_id_does_not_inherit_the_ticket) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint8_t first[16], rep[8192];
    uint16_t port = 0, dport = 0;
    int fds[16], i, t = -1, fd;
    double end;
    hz v, a;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "k", 100000, 205, NULL));
    REQUIRE(hz_open_rid(&v, port, "victim-session") == 0);
    REQUIRE(hz_hello(&v) == HZ_HELLO && v.has_ticket);
    memcpy(first, v.ticket, 16);
    for (i = 0; i < 16; i++) {  /* from an address of their own (this binary allows 16 per address) */
        CHECK_EQ(data_conn_from("127.0.0.6", dport, 0xAB00u + (uint64_t)i, &v, &fds[i]), 0);
    }
    hz_close(&v);
    /* the ROUTER refuses a second connection with a routing id in use: retry until it has seen
       the first one go (an event: the HELLO answer) */
    memset(&a, 0, sizeof(a));
    for (end = now_s() + 5; now_s() < end; ) {
        REQUIRE(hz_open_rid(&a, port, "victim-session") == 0);
        if ((t = hz_hello(&a)) == HZ_HELLO) break;
        hz_close(&a);
    }
    REQUIRE(t == HZ_HELLO);
    CHECK(a.has_ticket);
    CHECK(memcmp(a.ticket, first, 16) != 0);
    fd = data_conn(dport, 0xAC00u, &a);     /* its own slots: registered, not BUSY */
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    /* a PULL naming the first session's data connection is refused before a byte moves */
    CHECK(hz_pull(&a, 77, QKEY("k"), 1u << 20, 2000, 0xAB00u) == 0);
    t = hz_recv(&a, rep, sizeof(rep), 3000, NULL);
    CHECK_EQ(t, HZ_ERROR);
    if (t == HZ_ERROR) CHECK_EQ((int32_t)rd32(rep + 32), OMC_ERR_CONNECTION);
    hz_close(&a);
    for (i = 0; i < 16; i++) if (fds[i] >= 0) close(fds[i]);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "k"));
    omc_conn_destroy(s);
}

/* HOSTILE: from 127.0.0.2, 80 side-channel sessions, each with a data connection (a ticket with
   a connection is never dropped to make room), then 16 more connections on one ticket; then
   three more addresses fill their share. The sender's tables are shrunk for the test
   (OMC__TCP_MAX_CONNS = OMC__TCP_MAX_TICKETS = 64, so 16 per address). Want: one address holds
   at most its share of tickets and registrations; a receiver from another address gets a ticket
   and a data connection, also when every registration is taken (an idle connection of the
   address holding the most is closed for it). Before: the first address filled both tables and
   every get from elsewhere failed. */
OMC_TEST(one_address_cannot_take_the_data_port_or_the_ticket_table) {
    enum { SESSIONS = 80 };
    static hz hs[SESSIONS + 3];
    static int fds[SESSIONS + 3 * 16 + 16];
    const char* others[3] = {"127.0.0.3", "127.0.0.4", "127.0.0.5"};
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn *r = NULL, *r2 = NULL;
    void* ctx = zmq_ctx_new();
    omc_meta m = {0};
    omc_buffer b;
    uint16_t port = 0, dport = 0;
    int i, j, nfd = 0, tickets = 0, registered = 0, fd, st;
    REQUIRE(s && ctx);
    ports_of(s, &port, &dport);
    for (i = 0; i < SESSIONS; i++) {
        REQUIRE(hz_open_from(&hs[i], ctx, "127.0.0.2", port) == 0);
        if (hz_hello(&hs[i]) != HZ_HELLO || !hs[i].has_ticket) continue;
        tickets++;
        if ((st = data_conn_from("127.0.0.2", dport, 0x2000u + (uint64_t)i, &hs[i], &fd)) == 0) { fds[nfd++] = fd; registered++; }
        else if (!quiet()) printf("  session %d: data hello %d\n", i, st);
    }
    for (j = 0; j < 16 && tickets; j++) {      /* the rest of one ticket's 16 */
        for (i = 0; i < SESSIONS && !hs[i].has_ticket; i++) {}
        if (data_conn_from("127.0.0.2", dport, 0x3000u + (uint64_t)j, &hs[i], &fd) == 0) { fds[nfd++] = fd; registered++; }
    }
    printf("  127.0.0.2: %d of %d HELLOs got a ticket, %d data connections registered\n", tickets, SESSIONS, registered);
    CHECK(tickets <= OMC__TCP_SOURCE_TICKETS);
    CHECK(registered <= OMC__TCP_SOURCE_CONNS);
    CHECK(tcp_data_connections(s) <= OMC__TCP_SOURCE_CONNS);
    /* a receiver from elsewhere (127.0.0.1) still gets a ticket and its data connection */
    r = make_receiver(0, NULL, NULL, NULL);
    REQUIRE(r);
    CHECK_OK(put_bytes(s, "k", 100000, 206, &m));
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(3000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 206));
    if (b.data) omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_destroy(r);        /* its connection goes (wait for the sender to see it): the others fill the table now */
    {
        double end = now_s() + 5;
        while (now_s() < end && tcp_data_connections(s) > (uint64_t)registered) usleep(2000);
    }
    for (i = 0; i < 3; i++) {
        hz* h = &hs[SESSIONS + i];
        REQUIRE(hz_open_from(h, ctx, others[i], port) == 0);
        if (hz_hello(h) != HZ_HELLO || !h->has_ticket) continue;
        for (j = 0; j < 16; j++)
            if ((st = data_conn_from(others[i], dport, 0x4000u + (uint64_t)j, h, &fd)) == 0) fds[nfd++] = fd;
            else if (!quiet()) printf("  %s #%d: %d\n", others[i], j, st);
        if (!quiet()) printf("  after %s: %llu registered\n", others[i], (unsigned long long)tcp_data_connections(s));
    }
    {   /* the sender counts a registration just after its ack */
        double end = now_s() + 2;
        while (now_s() < end && tcp_data_connections(s) < OMC__TCP_MAX_CONNS) usleep(2000);
    }
    printf("  after three more addresses: %llu data connections registered (table: %d)\n",
           (unsigned long long)tcp_data_connections(s), OMC__TCP_MAX_CONNS);
    CHECK_EQ(tcp_data_connections(s), OMC__TCP_MAX_CONNS);
    /* every registration taken: a new receiver's data connection makes room */
    r2 = make_receiver(0, NULL, NULL, NULL);
    REQUIRE(r2);
    CHECK_OK(put_bytes(s, "k2", 100000, 207, &m));
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r2, "s0", "s1", "k2", m.data, m.size, omc_deadline_after_ms(3000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 207));
    if (b.data) omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_destroy(r2);
    for (i = 0; i < nfd; i++) close(fds[i]);
    for (i = 0; i < SESSIONS + 3; i++) if (hs[i].sock) zmq_close(hs[i].sock);
    zmq_ctx_term(ctx);
    omc_conn_destroy(s);
}

/* LIST by hand: one page from cursor; the reply's key count and next cursor; -1 if no reply. */
static int hz_list(hz* h, uint64_t xfer, uint32_t cursor, uint32_t* next, uint32_t* nkeys) {
    uint8_t body[8], rep[8192];
    int len = 0;
    le32(body, cursor); le32(body + 4, 0);
    if (hz_send(h, 9, xfer, body, 8) != 0) return -1;
    if (hz_recv(h, rep, sizeof(rep), 5000, &len) != 10 || len < 40) return -1;
    *next = rd32(rep + 32);
    *nkeys = (uint32_t)(rep[36] | rep[37] << 8);
    return 0;
}

/* HOSTILE: LIST needs no HELLO and no ticket, and it ran on the sender's listener thread at a
   cost of O(entries) per page (the cursor was a count of keys to skip), so a few clients paging
   through a large sender slowed every get. Want: a page costs about the same at the end of
   the list as at its start. Measured as the process's CPU time (the listener's work; nothing
   else runs), the median of 7 alternating rounds, over 60 000 keys: the last page may cost at
   most 3 times the first plus 0.25 ms (before: it walked all 60 000 entries: 3.8 ms here,
   28 times the first page). */
OMC_TEST(a_list_page_costs_the_same_at_the_end_of_a_long_list_as_at_its_start) {
    enum { KEYS = 60000, ROUNDS = 7 };
    omc_conn* s = make_sender(256u << 20, NULL, NULL, 0, 0);
    uint32_t cursor = 0, next = 0, n = 0, last = 0, total = 0, pages = 0;
    double first_cpu[ROUNDS], last_cpu[ROUNDS], t;
    uint16_t port = 0;
    char key[32];
    hz h;
    int i, j;
    REQUIRE(s);
    ports_of(s, &port, NULL);
    for (i = 0; i < KEYS; i++) {
        omc_payload p;
        uint8_t byte = (uint8_t)i;
        memset(&p, 0, sizeof(p));
        p.data = &byte; p.size = 1;
        snprintf(key, sizeof(key), "k%05d", i);
        if (omc_conn_put(s, "s0", "s1", key, &p, NULL) != OMC_OK) break;
    }
    REQUIRE(i == KEYS);
    REQUIRE(hz_open(&h, port) == 0);
    do {        /* page through once: every key, and the cursor of the last page */
        REQUIRE(hz_list(&h, 1000u + pages, cursor, &next, &n) == 0);
        total += n;
        pages++;
        if (next) last = next;
        cursor = next;
    } while (cursor && pages < 100000);
    printf("  %u keys in %u pages\n", total, pages);
    CHECK_EQ(total, KEYS);
    REQUIRE(last != 0);
    for (j = 0; j < ROUNDS; j++) {      /* alternating: the first page, then the last */
        t = cpu_s();
        CHECK(hz_list(&h, 1, 0, &next, &n) == 0);
        first_cpu[j] = cpu_s() - t;
        t = cpu_s();
        CHECK(hz_list(&h, 2, last, &next, &n) == 0);
        last_cpu[j] = cpu_s() - t;
        CHECK(n > 0 && next == 0);
    }
    for (i = 0; i < ROUNDS; i++)        /* sort both for their medians */
        for (j = i + 1; j < ROUNDS; j++) {
            if (first_cpu[j] < first_cpu[i]) { t = first_cpu[i]; first_cpu[i] = first_cpu[j]; first_cpu[j] = t; }
            if (last_cpu[j] < last_cpu[i]) { t = last_cpu[i]; last_cpu[i] = last_cpu[j]; last_cpu[j] = t; }
        }
    printf("  CPU per page: first %.3f ms, last %.3f ms (medians of %d)\n", first_cpu[ROUNDS / 2] * 1e3, last_cpu[ROUNDS / 2] * 1e3, ROUNDS);
    CHECK(last_cpu[ROUNDS / 2] <= 3 * first_cpu[ROUNDS / 2] + 0.00025);
    hz_close(&h);
    omc_conn_destroy(s);
}

/* A get on its own thread, timed. */
typedef struct timed_get { omc_conn* r; const char* key; omc_meta* m; int deadline_ms; omc_result res; double secs; uint64_t size; int ok; } timed_get;

static void* timed_get_main(void* arg) {
    timed_get* g = (timed_get*)arg;
    omc_buffer b;
    double t0 = now_s();
    memset(&b, 0, sizeof(b));
    g->res = omc_conn_get(g->r, "s0", "s1", g->key, g->m->data, g->m->size, omc_deadline_after_ms(g->deadline_ms), &b);
    g->secs = now_s() - t0;
    if (g->res == OMC_OK) { g->size = b.size; g->ok = omc_test_verify(b.data, b.size, 209); omc_buffer_release(&b); }
    __atomic_store_n(&g->deadline_ms, 0, __ATOMIC_RELEASE);     /* done */
    return NULL;
}

/* HOSTILE: two sessions from another address each ask for a 64 MiB entry on their data
   connection, with the longest budget, and then read 0.5 MiB/s - enough to never trip the
   "no byte for 5 s" stall abort. The sender has two push workers. Want: a legitimate 32 MiB get
   (which needs a worker) is served well within its 10 s deadline; the slow pushes are aborted
   (OMNICONN_TCP_MIN_RATE) and their connections closed. Before: both workers were held for
   128 s and the get timed out. */
OMC_TEST(slow_readers_cannot_hold_the_push_workers) {
    omc_conn* s = make_sender(256u << 20, NULL, NULL, 0, 2);
    omc_conn* r = make_receiver(64u << 20, NULL, NULL, NULL);
    void* ctx = zmq_ctx_new();
    omc_meta m1 = {0}, m2 = {0}, ml = {0};
    timed_get g;
    pthread_t th;
    uint16_t port = 0, dport = 0;
    hz h[2];
    int fd[2] = {-1, -1}, closed[2] = {0, 0}, i;
    uint8_t q[64], sink[65536], proof[16];
    double end;
    REQUIRE(s && r && ctx);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "slow0", 64u << 20, 207, &m1));
    CHECK_OK(put_bytes(s, "slow1", 64u << 20, 208, &m2));
    CHECK_OK(put_bytes(s, "legit", 32u << 20, 209, &ml));
    for (i = 0; i < 2; i++) {
        const omc_meta* m = i ? &m2 : &m1;
        REQUIRE(hz_open_from(&h[i], ctx, "127.0.0.2", port) == 0);
        REQUIRE(hz_hello(&h[i]) == HZ_HELLO);
        REQUIRE(data_conn_from("127.0.0.2", dport, 0x5100u + (uint64_t)i, &h[i], &fd[i]) == 0);
        key_proof(h[i].ticket + 16, entry_of(m), i ? QKEY("slow1") : QKEY("slow0"), proof);
        dreq_encode(q, 1, 1, entry_of(m), 0, 64u << 20, 0xFFFFFFFFu, proof);   /* a PULL asking for the longest budget */
        CHECK(write(fd[i], q, sizeof(q)) == (ssize_t)sizeof(q));
    }
    usleep(300000);                     /* both pushes have their worker (a real one would too) */
    memset(&g, 0, sizeof(g));
    g.r = r; g.key = "legit"; g.m = &ml; g.deadline_ms = 10000;
    REQUIRE(pthread_create(&th, NULL, timed_get_main, &g) == 0);
    for (end = now_s() + 15; now_s() < end && __atomic_load_n(&g.deadline_ms, __ATOMIC_ACQUIRE); ) {
        for (i = 0; i < 2; i++) {       /* 50 KiB per 100 ms each: 0.5 MiB/s */
            ssize_t k;
            if (closed[i]) continue;
            k = recv(fd[i], sink, 50u << 10, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed[i] = 1;
        }
        usleep(100000);
    }
    pthread_join(th, NULL);
    printf("  legitimate 32 MiB get: %s after %.2f s; slow connections closed by the sender: %d, %d\n",
           omc_result_name(g.res), g.secs, closed[0], closed[1]);
    CHECK_OK(g.res);
    CHECK(g.ok && g.size == (32u << 20));
    for (i = 0; i < 2; i++) if (!closed[i]) CHECK(closed_within(fd[i], 6000));
    for (i = 0; i < 2; i++) { close(fd[i]); zmq_close(h[i].sock); }
    zmq_ctx_term(ctx);
    omc_meta_free(&m1);
    omc_meta_free(&m2);
    omc_meta_free(&ml);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* HOSTILE (someone who saw a data hello on the wire): the ticket in it was good for 10 minutes,
   after its session had ended. Want: when the side-channel connection of a session goes, its
   ticket goes with it - the session's idle data connection is closed by the sender, and a data
   hello showing the ticket afterwards is closed without an ack. */
OMC_TEST(a_ticket_dies_with_its_side_channel_session) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint8_t ticket[48];
    uint16_t port = 0, dport = 0;
    int fd, fd2;
    hz h;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    REQUIRE(hz_open(&h, port) == 0);
    REQUIRE(hz_hello(&h) == HZ_HELLO && h.has_ticket);
    memcpy(ticket, h.ticket, 48);
    fd = data_conn(dport, 0xD1E0u, &h);
    REQUIRE(fd >= 0);
    hz_close(&h);                       /* the session ends */
    CHECK(closed_within(fd, 3000));     /* an event: the sender closes its data connection */
    close(fd);
    fd2 = tcp_connect(dport, 0);
    REQUIRE(fd2 >= 0);
    CHECK_EQ(data_hello(fd2, 0xD1E1u, ticket), 1);     /* the ticket is gone: closed, no ack */
    close(fd2);
    omc_conn_destroy(s);
}

/* A receiver whose first side-channel connection went (a query that gave up, say) and who at once
   opens another: the sender may hand the new connection the descriptor number of the old one, and
   its listener may read the new HELLO before it has heard from its monitor that the old connection
   went. That late word must end the old session only, not the ticket it has just given the new
   one (a data hello with that ticket was closed without an ack, and the receiver's first get
   failed with "connection failed" on a loaded host). The clients run in a program of their own
   (this binary with --reconnect-client) so the sender's descriptors are reused as a server's are;
   a third client floods queries so the listener reads long batches, as on a busy host. The race
   is narrow: before the fix this lost 2 tickets in 2,700 rounds beside two busy loops (0 in
   1,800 after), and a Python suite run under ASan at that load lost one on its first get. */
static int reconnect_client_main(uint16_t port, uint16_t dport, int rounds) {
    uint8_t body[8 + 16], rep[8192];
    hz f, a, b;
    int i, k, lost = 0;
    if (hz_open(&f, port) != 0 || hz_hello(&f) != HZ_HELLO) return 2;
    le32(body, 0); le16(body + 4, 16); le16(body + 6, 0);
    memcpy(body + 8, "s0\x1fs1\x1fno-such-k", 16);
    for (i = 0; i < rounds; i++) {
        int fd, st;
        for (k = 0; k < 256; k++) hz_send(&f, HZ_QUERY, 7000u + (uint64_t)k, body, sizeof(body));
        if (hz_open(&a, port) != 0) return 2;
        hz_hello(&a);
        hz_close(&a);                   /* the session goes ... */
        if (hz_open(&b, port) != 0) return 2;       /* ... and a new one comes at once */
        if (hz_hello(&b) != HZ_HELLO || !b.has_ticket) { lost++; hz_close(&b); continue; }
        fd = tcp_connect(dport, 0);
        st = fd >= 0 ? data_hello(fd, 0xAB00u + (uint64_t)i, b.ticket) : 1;
        if (st != 0) { lost++; fprintf(stderr, "  round %d: the new session's data hello got %d (1: closed without an ack)\n", i, st); }
        if (fd >= 0) close(fd);
        hz_close(&b);
        while (zmq_recv(f.sock, rep, sizeof(rep), ZMQ_DONTWAIT) >= 0) {}
    }
    hz_close(&f);
    printf("  %d of %d new sessions lost their ticket\n", lost, rounds);
    return lost ? 1 : 0;
}

OMC_TEST(a_new_session_on_a_reused_descriptor_keeps_its_ticket) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint16_t port = 0, dport = 0;
    char ps[16], ds[16];
    pid_t pid;
    int status = 0;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    snprintf(ds, sizeof(ds), "%u", (unsigned)dport);
    fflush(stdout);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_hostile", "--reconnect-client", ps, ds, "500", (char*)NULL);
        _exit(3);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    omc_conn_destroy(s);
}

/* Wait for the sender's count of registered data connections to reach n (it counts just after
   the ack): 1 if it did within ms. */
static int registered_within(omc_conn* s, uint64_t n, int ms) {
    omc_time_ns until = omc_now_ns() + (omc_time_ns)ms * 1000000LL;
    while (tcp_data_connections(s) != n && omc_now_ns() < until) usleep(2000);
    return tcp_data_connections(s) == n;
}

/* ---- finding: a ticket seen on the wire --------------------------------------------------------- */

/* The MAC the data hello rests on: SHA-256 of "abc" (FIPS 180-4) and HMAC-SHA-256 test cases 1,
   2 and 6 of RFC 4231 (6: a key longer than a block). */
OMC_TEST(hmac_sha256_matches_fips_180_4_and_rfc_4231) {
    static const uint8_t abc[32] = {0xba,0x78,0x16,0xbf,0x8f,0x01,0xcf,0xea,0x41,0x41,0x40,0xde,0x5d,0xae,0x22,0x23,
                                    0xb0,0x03,0x61,0xa3,0x96,0x17,0x7a,0x9c,0xb4,0x10,0xff,0x61,0xf2,0x00,0x15,0xad};
    static const uint8_t t1[32] = {0xb0,0x34,0x4c,0x61,0xd8,0xdb,0x38,0x53,0x5c,0xa8,0xaf,0xce,0xaf,0x0b,0xf1,0x2b,
                                   0x88,0x1d,0xc2,0x00,0xc9,0x83,0x3d,0xa7,0x26,0xe9,0x37,0x6c,0x2e,0x32,0xcf,0xf7};
    static const uint8_t t2[32] = {0x5b,0xdc,0xc1,0x46,0xbf,0x60,0x75,0x4e,0x6a,0x04,0x24,0x26,0x08,0x95,0x75,0xc7,
                                   0x5a,0x00,0x3f,0x08,0x9d,0x27,0x39,0x83,0x9d,0xec,0x58,0xb9,0x64,0xec,0x38,0x43};
    static const uint8_t t6[32] = {0x60,0xe4,0x31,0x59,0x1e,0xe0,0xb6,0x7f,0x0d,0x8a,0x26,0xaa,0xcb,0xf5,0xb7,0x7f,
                                   0x8e,0x0b,0xc6,0x21,0x37,0x28,0xc5,0x14,0x05,0x46,0x04,0x0f,0x0e,0xe3,0x7f,0x54};
    static const char m6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    uint8_t out[32], key[131];
    omc__sha256 h;
    const void* part[2];
    size_t len[2];
    omc__sha256_init(&h); omc__sha256_update(&h, "abc", 3); omc__sha256_final(&h, out);
    CHECK(memcmp(out, abc, 32) == 0);
    memset(key, 0x0b, 20);
    part[0] = "Hi "; len[0] = 3; part[1] = "There"; len[1] = 5;          /* split: the parts are one message */
    omc__hmac_sha256(key, 20, part, len, 2, out);
    CHECK(memcmp(out, t1, 32) == 0);
    part[0] = "what do ya want for nothing?"; len[0] = 28;
    omc__hmac_sha256((const uint8_t*)"Jefe", 4, part, len, 1, out);
    CHECK(memcmp(out, t2, 32) == 0);
    memset(key, 0xaa, sizeof(key));
    part[0] = m6; len[0] = sizeof(m6) - 1;
    omc__hmac_sha256(key, sizeof(key), part, len, 1, out);
    CHECK(memcmp(out, t6, 32) == 0);
}

/* HOSTILE (someone who sees the data port's traffic, without CURVE on it): the data hello used to
   carry the ticket itself, a bearer secret. Want: the HELLO answer has no clear-text ticket record
   any more; a data hello does not contain the ticket's secret; replayed byte for byte on another
   connection (which gets another nonce) it is closed without an ack and registers nothing; the
   old version-2 hello naming the ticket is refused with OMC_ERR_VERSION and a log line that
   names both versions. */
OMC_TEST(a_data_hello_seen_on_the_wire_opens_nothing_on_another_connection) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint8_t nonce[16], nonce2[16], seen[72];
    uint16_t port = 0, dport = 0;
    int fd, fd2;
    hz h;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    REQUIRE(hz_open(&h, port) == 0);
    REQUIRE(hz_hello(&h) == HZ_HELLO);
    CHECK(h.has_ticket);
    CHECK(!h.has_v2_ticket);
    fd2 = tcp_connect(dport, 0);                                        /* the old hello, ticket in clear */
    REQUIRE(fd2 >= 0);
    CHECK_EQ(data_hello_old(fd2, 0xE1E3u, h.ticket, 2), OMC_ERR_VERSION);
    CHECK(warn_seen(3000, "data hello version 2", "version 4", NULL));
    close(fd2);
    fd = tcp_connect(dport, 0);
    REQUIRE(fd >= 0);
    REQUIRE(read_nonce(fd, nonce) == 0);
    hello_v4(seen, 0xE1E1u, h.ticket, nonce);
    CHECK(memmem(seen, sizeof(seen), h.ticket + 16, 32) == NULL);      /* the secret is not on the wire */
    REQUIRE(write(fd, seen, sizeof(seen)) == (ssize_t)sizeof(seen));
    CHECK_EQ(read_ack(fd), 0);                                          /* the honest connection */
    CHECK(registered_within(s, 1, 3000));
    fd2 = tcp_connect(dport, 0);                                        /* the eavesdropper replays it */
    REQUIRE(fd2 >= 0);
    REQUIRE(read_nonce(fd2, nonce2) == 0);
    CHECK(memcmp(nonce, nonce2, 16) != 0);
    le64(seen + 8, 0xE1E2u);                                            /* another token, same proof */
    REQUIRE(write(fd2, seen, sizeof(seen)) == (ssize_t)sizeof(seen));
    CHECK_EQ(read_ack(fd2), 1);
    close(fd2);
    fd2 = tcp_connect(dport, 0);                                        /* byte for byte */
    REQUIRE(fd2 >= 0);
    REQUIRE(read_nonce(fd2, nonce2) == 0);
    le64(seen + 8, 0xE1E1u);
    REQUIRE(write(fd2, seen, sizeof(seen)) == (ssize_t)sizeof(seen));
    CHECK_EQ(read_ack(fd2), 1);
    close(fd2);
    CHECK_EQ(tcp_data_connections(s), 1);
    close(fd);
    hz_close(&h);
    omc_conn_destroy(s);
}

/* The whole status record for a request (24 bytes), 0 or -1. */
static int dstatus_raw(int fd, uint8_t* st) { return read_n(fd, st, 24); }

/* HOSTILE (a session probing entry ids): every way a request can name an entry wrongly - an id
   nobody holds, another key's check, a CLAIM of the wrong size, a CLAIM of bytes never inlined -
   must get the same answer as an entry that does not exist, so the answers tell nothing about
   which ids are live. Want: each status record is OMC_ERR_NOT_FOUND with detail 0, byte for byte
   the record of a made-up id (the transfer id aside), and nothing is used up. */
OMC_TEST(requests_naming_an_entry_wrongly_cannot_tell_whether_it_exists) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_meta small = {0}, big = {0};
    uint8_t none[24], st[24];
    uint16_t port = 0, dport = 0;
    uint64_t e_small, e_big;
    hz h;
    int fd;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "small", 4096, 301, &small));        /* inlined */
    CHECK_OK(put_bytes(s, "big", 200000, 302, &big));          /* not inlined */
    e_small = entry_of(&small);
    e_big = entry_of(&big);
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    fd = data_conn(dport, 0xF00Du, &h);
    REQUIRE(fd >= 0);
    CHECK(dreq_key(fd, &h, 2, 1, e_small ^ ((uint64_t)0x55 << 32), 0, 4096, QKEY("small")) == 0);   /* a made-up id */
    REQUIRE(dstatus_raw(fd, none) == 0);
    CHECK_EQ((int32_t)rd32(none + 4), OMC_ERR_NOT_FOUND);
    CHECK(dreq_key(fd, &h, 2, 1, e_small, 0, 4095, QKEY("small")) == 0);                              /* the wrong size */
    CHECK(dstatus_raw(fd, st) == 0 && memcmp(st, none, 24) == 0);
    CHECK(dreq_key(fd, &h, 2, 1, e_small, 0, 4096, QKEY("other")) == 0);                              /* another key */
    CHECK(dstatus_raw(fd, st) == 0 && memcmp(st, none, 24) == 0);
    CHECK(dreq_key(fd, &h, 2, 1, e_big, 0, 200000, QKEY("big")) == 0);                                /* never inlined */
    CHECK(dstatus_raw(fd, st) == 0 && memcmp(st, none, 24) == 0);
    CHECK(dreq_key(fd, &h, 2, 1, e_big, 0, 1, QKEY("big")) == 0);                                     /* both wrong */
    CHECK(dstatus_raw(fd, st) == 0 && memcmp(st, none, 24) == 0);
    close(fd);
    hz_close(&h);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "small"));
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "big"));
    omc_meta_free(&small);
    omc_meta_free(&big);
    omc_conn_destroy(s);
}

/* A client that pipelines requests without pause on its data connection (made-up ids, one thread
   writing, another reading the answers) while an honest receiver gets a key from the same sender.
   The listener reads a pipelined request right after answering the one before, a bounded number
   per pass (64), so one connection cannot keep it to itself. Want: the honest get succeeds, and
   every flood request is answered NOT_FOUND, in step, touching nothing. The bound itself is not
   judged here: without it the honest get still got through whenever the flood's writer fell
   behind (on 2 cores, after 20,000-125,000 flood answers instead of about 1,000), so how many
   answers it waited is printed, not asserted (a count that depends on scheduling). */
typedef struct req_flood { int fd; const hz* h; uint64_t entry; long n, answered, bad; } req_flood;
static void* req_flood_write_main(void* arg) {
    req_flood* f = (req_flood*)arg;
    static uint8_t buf[1000 * 64];
    uint8_t proof[16];
    long sent, i;
    key_proof(f->h->ticket + 16, f->entry, QKEY("small"), proof);
    for (i = 0; i < 1000; i++) dreq_encode(buf + i * 64, 2, (uint64_t)i + 1, f->entry, 0, 4096, 2000, proof);
    for (sent = 0; sent < f->n; sent += 1000) {
        size_t off = 0;
        while (off < sizeof(buf)) {
            ssize_t k = write(f->fd, buf + off, sizeof(buf) - off);
            if (k <= 0) return NULL;
            off += (size_t)k;
        }
    }
    return NULL;
}
static void* req_flood_read_main(void* arg) {
    req_flood* f = (req_flood*)arg;
    uint8_t st[24];
    while (__atomic_load_n(&f->answered, __ATOMIC_ACQUIRE) < f->n) {
        if (read_n(f->fd, st, sizeof(st)) != 0) break;
        if ((int32_t)rd32(st + 4) != OMC_ERR_NOT_FOUND) __atomic_add_fetch(&f->bad, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&f->answered, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

OMC_TEST(a_client_pipelining_requests_without_pause_is_answered_in_step_while_others_get) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn* r = make_receiver(0, NULL, NULL, NULL);
    omc_meta small = {0}, other = {0};
    omc_buffer b;
    uint16_t port = 0, dport = 0;
    struct timeval tv = {60, 0};
    req_flood f;
    pthread_t wt, rt;
    omc_result got;
    long during;
    hz h;
    int i, fd, started = 0;
    REQUIRE(s && r);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "small", 4096, 311, &small));
    CHECK_OK(put_bytes(s, "other", 4096, 312, &other));
    REQUIRE(hz_open(&h, port) == 0);
    CHECK(hz_hello(&h) == HZ_HELLO);
    fd = data_conn(dport, 0xF1D0u, &h);
    REQUIRE(fd >= 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));   /* a loaded host may pause the sender */
    memset(&f, 0, sizeof(f));
    f.fd = fd; f.h = &h; f.entry = entry_of(&small) ^ ((uint64_t)0x77 << 32); f.n = 300000;
    if (pthread_create(&rt, NULL, req_flood_read_main, &f) == 0) started++;
    if (started == 1 && pthread_create(&wt, NULL, req_flood_write_main, &f) == 0) started++;
    REQUIRE(started == 2);
    for (i = 0; i < 60000 && __atomic_load_n(&f.answered, __ATOMIC_ACQUIRE) < 2000; i++) usleep(1000);    /* the flood is on */
    got = omc_conn_get(r, "s0", "s1", "other", other.data, other.size, omc_deadline_after_ms(60000), &b);
    during = __atomic_load_n(&f.answered, __ATOMIC_ACQUIRE);
    if (got == OMC_OK) omc_buffer_release(&b);
    pthread_join(wt, NULL);
    pthread_join(rt, NULL);
    printf("  the honest get returned after %ld of %ld flood answers; %ld answered in all\n", during, f.n, f.answered);
    CHECK_OK(got);
    CHECK_EQ(f.answered, f.n);
    CHECK_EQ(f.bad, 0);
    close(fd);
    hz_close(&h);
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "small"));      /* the flood's made-up id touched nothing */
    omc_meta_free(&small);
    omc_meta_free(&other);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- CURVE that people turn on: what the logs say ------------------------------------------- */

/* How many of the last 64 WARN/ERROR lines contain text. */
static int warn_count(const char* a, const char* b) {
    int i, n = 0;
    pthread_mutex_lock(&warn_mu);
    for (i = 0; i < 64; i++) n += strstr(warn_ring[i], a) && (!b || strstr(warn_ring[i], b));
    pthread_mutex_unlock(&warn_mu);
    return n;
}

static void warn_reset(void) {
    pthread_mutex_lock(&warn_mu);
    memset(warn_ring, 0, sizeof(warn_ring));
    pthread_mutex_unlock(&warn_mu);
}

/* A receiver whose key is not on the allow-list, one with the wrong server key, one without
   CURVE, each retrying its get three times. Want: the sender says in words which client was
   refused and why, naming its address, once per interval however often it retries; each
   receiver says at WARN what is wrong (not on the allow-list / server key does not match / the
   sender requires CURVE), naming the sender's host and port, once per interval; the get's own
   failure line names the sender's host and port too. */
OMC_TEST(curve_failures_are_logged_in_words_naming_the_peer_once_per_interval) {
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1], cpub[OMC_CURVE_KEY_LEN + 1], csec[OMC_CURVE_KEY_LEN + 1];
    char opub[OMC_CURVE_KEY_LEN + 1], osec[OMC_CURVE_KEY_LEN + 1], where[64];
    const char* allowed[1];
    omc_conn *s, *r;
    omc_buffer b;
    uint16_t port = 0;
    int i;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK && omc_tcp_curve_keypair(cpub, csec) == OMC_OK &&
            omc_tcp_curve_keypair(opub, osec) == OMC_OK);
    allowed[0] = cpub;
    s = make_sender(0, sec, allowed, 1, 0);
    REQUIRE(s);
    ports_of(s, &port, NULL);
    snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)port);
    warn_reset();
    r = make_receiver(0, pub, osec, opub);                              /* a key not on the list */
    REQUIRE(r);
    CHECK_OK(omc_tcp_add_sender(r, "s", "127.0.0.1", port));
    for (i = 0; i < 3; i++) CHECK_RES(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(700), &b), OMC_ERR_AUTH);
    CHECK(warn_seen(3000, "client key", "not on the allow-list", "127.0.0.1"));     /* the sender, with the address */
    CHECK(warn_seen(3000, "not on the sender's allow-list", where, NULL));          /* the receiver, with host:port */
    CHECK_EQ(warn_count("refused: client key", NULL), 1);                           /* once, however many retries */
    CHECK_EQ(warn_count("not on the sender's allow-list", NULL), 1);
    omc_conn_destroy(r);
    warn_reset();
    r = make_receiver(0, opub, csec, cpub);                             /* the wrong server key */
    REQUIRE(r);
    CHECK_OK(omc_tcp_add_sender(r, "s", "127.0.0.1", port));
    for (i = 0; i < 3; i++) CHECK(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(700), &b) != OMC_OK);
    CHECK(warn_seen(3000, "curve.server_key is not", where, NULL));
    CHECK(warn_count("curve.server_key is not", where) == 1);
    CHECK(warn_seen(3000, "listener", "server key does not match", NULL) || warn_seen(10, "listener", "hung up during the CURVE handshake", NULL));
    omc_conn_destroy(r);
    warn_reset();
    r = make_receiver(0, NULL, NULL, NULL);                             /* no CURVE at all */
    REQUIRE(r);
    CHECK_OK(omc_tcp_add_sender(r, "s", "127.0.0.1", port));
    for (i = 0; i < 3; i++) CHECK(omc_conn_get(r, "s0", "s1", "k", NULL, 0, omc_deadline_after_ms(700), &b) != OMC_OK);
    CHECK(warn_seen(3000, "give this receiver its public key", where, NULL));      /* the key hint, at WARN */
    CHECK(warn_seen(3000, "get s0/s1/k: connection failed", where, NULL));        /* the failure names host and port */
    CHECK_EQ(warn_count("give this receiver its public key", NULL), 1);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* Listeners on a routable address without CURVE: one WARN each, naming the address; none on
   loopback and none with CURVE. */
OMC_TEST(a_listener_on_a_routable_address_without_curve_warns_once) {
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1];
    omc_tcp_desc d;
    omc_conn *c = NULL, *k = NULL, *l;
    REQUIRE(omc_tcp_curve_keypair(pub, sec) == OMC_OK);
    warn_reset();
    l = make_sender(0, NULL, NULL, 0, 0);                               /* 127.0.0.1 */
    REQUIRE(l);
    CHECK_EQ(warn_count("without CURVE", NULL), 0);
    memset(&d, 0, sizeof(d));
    d.role = OMC_ROLE_SENDER;
    d.bind_host = "0.0.0.0";
    d.hooks.log_fn = counting_log;
    d.hooks.max_level = OMC_LOG_WARN;
    REQUIRE(omc_tcp_create(&d, &c) == OMC_OK);
    CHECK_EQ(warn_count("without CURVE", "0.0.0.0"), 1);
    d.curve.secret_key = sec;
    REQUIRE(omc_tcp_create(&d, &k) == OMC_OK);
    CHECK_EQ(warn_count("without CURVE", NULL), 1);                   /* still only the first */
    omc_conn_destroy(k);
    omc_conn_destroy(c);
    omc_conn_destroy(l);
}

/* ---- finding: one CURVE key must not take the data port or the ticket table ------------------- */

/* A CURVE session from a chosen loopback address with the client keypair (cpub, csec). */
static int hz_open_curve(hz* h, void* ctx, const char* src, uint16_t port, const char* server, const char* cpub, const char* csec) {
    char ep[96];
    int zero = 0, send_ms = 2000;
    memset(h, 0, sizeof(*h));
    if (!(h->sock = zmq_socket(ctx, ZMQ_DEALER))) return -1;
    zmq_setsockopt(h->sock, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(h->sock, ZMQ_SNDTIMEO, &send_ms, sizeof(send_ms));
    zmq_setsockopt(h->sock, ZMQ_CURVE_SERVERKEY, server, 40);
    zmq_setsockopt(h->sock, ZMQ_CURVE_PUBLICKEY, cpub, 40);
    zmq_setsockopt(h->sock, ZMQ_CURVE_SECRETKEY, csec, 40);
    snprintf(ep, sizeof(ep), "tcp://%s:0;127.0.0.1:%u", src, (unsigned)port);
    return zmq_connect(h->sock, ep);
}

/* HOSTILE (CURVE without an allow-list: the sender's public key is all it takes): one client
   key opens sessions from eight addresses, so no address reaches its share, and registers every
   data connection it can. Want: that key holds at most its share of the tickets and of the
   registered connections whatever address it comes from; a receiver with another key still
   gets a ticket and its payload. */
OMC_TEST(one_curve_key_from_many_addresses_cannot_take_the_tickets_or_the_data_port) {
    enum { ADDRS = 8, PER = 10 };
    static hz hs[ADDRS * PER];
    static int fds[ADDRS * PER * 2];
    char pub[OMC_CURVE_KEY_LEN + 1], sec[OMC_CURVE_KEY_LEN + 1], cpub[OMC_CURVE_KEY_LEN + 1], csec[OMC_CURVE_KEY_LEN + 1];
    char rpub[OMC_CURVE_KEY_LEN + 1], rsec[OMC_CURVE_KEY_LEN + 1], src[32];
    omc_conn *s, *r;
    void* ctx = zmq_ctx_new();
    omc_meta m = {0};
    omc_buffer b;
    uint16_t port = 0, dport = 0;
    int i, nfd = 0, tickets = 0, registered = 0, fd;
    REQUIRE(ctx && omc_tcp_curve_keypair(pub, sec) == OMC_OK && omc_tcp_curve_keypair(cpub, csec) == OMC_OK &&
            omc_tcp_curve_keypair(rpub, rsec) == OMC_OK);
    s = make_sender(0, sec, NULL, 0, 0);
    REQUIRE(s);
    ports_of(s, &port, &dport);
    for (i = 0; i < ADDRS * PER; i++) {
        snprintf(src, sizeof(src), "127.0.1.%d", 10 + i / PER);
        REQUIRE(hz_open_curve(&hs[i], ctx, src, port, pub, cpub, csec) == 0);
        if (hz_hello(&hs[i]) != HZ_HELLO || !hs[i].has_ticket) continue;
        tickets++;
        if (data_conn_from(src, dport, 0x5000u + (uint64_t)i, &hs[i], &fd) == 0) { fds[nfd++] = fd; registered++; }
        if (data_conn_from(src, dport, 0x6000u + (uint64_t)i, &hs[i], &fd) == 0) { fds[nfd++] = fd; registered++; }
    }
    printf("  one key from %d addresses: %d of %d HELLOs answered with a ticket, %d data connections registered (share: %d)\n",
           ADDRS, tickets, ADDRS * PER, registered, OMC__TCP_KEY_CONNS);
    CHECK(registered <= OMC__TCP_KEY_CONNS);
    CHECK(tcp_data_connections(s) <= OMC__TCP_KEY_CONNS);
    CHECK(warn_seen(2000, "a CURVE client key at its share", NULL, NULL));
    for (i = 0, tickets = 0; i < ADDRS * PER; i++) {     /* which tickets still live: a dead one is closed without an ack */
        int st;
        snprintf(src, sizeof(src), "127.0.1.%d", 10 + i / PER);
        if (!hs[i].has_ticket) continue;
        st = data_conn_from(src, dport, 0x7000u + (uint64_t)i, &hs[i], &fd);
        if (st != 1) tickets++;
        if (st == 0) fds[nfd++] = fd;
    }
    printf("  tickets of that key still live: %d (share: %d)\n", tickets, OMC__TCP_KEY_TICKETS);
    CHECK(tickets <= OMC__TCP_KEY_TICKETS);
    r = make_receiver(0, pub, rsec, rpub);                      /* another key, from 127.0.0.1 */
    REQUIRE(r);
    CHECK_OK(put_bytes(s, "k", 100000, 208, &m));
    memset(&b, 0, sizeof(b));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "k", m.data, m.size, omc_deadline_after_ms(5000), &b));
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 208));
    if (b.data) omc_buffer_release(&b);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    for (i = 0; i < nfd; i++) close(fds[i]);
    for (i = 0; i < ADDRS * PER; i++) if (hs[i].sock) zmq_close(hs[i].sock);
    zmq_ctx_term(ctx);
    omc_conn_destroy(s);
}

/* ---- finding: a request's key check was a CRC of the key --------------------------------------- */

/* A receiver of data hello version 3 (its requests carried CRC-32C of the key) proves its ticket
   correctly. Want: refused with OMC_ERR_VERSION in the ack, nothing registered, and a log line
   naming both versions - never a crash, a hang or a registration that would take its requests. */
OMC_TEST(a_receiver_of_data_hello_version_3_is_refused_naming_both_versions) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    uint8_t nonce[16], hello[72];
    uint16_t port = 0, dport = 0;
    hz h;
    int fd;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    REQUIRE(hz_open(&h, port) == 0);
    REQUIRE(hz_hello(&h) == HZ_HELLO && h.has_ticket);
    fd = tcp_connect(dport, 0);
    REQUIRE(fd >= 0);
    REQUIRE(read_nonce(fd, nonce) == 0);            /* the data port says version 4 */
    hello_of(hello, 3, 0xE1E4u, h.ticket, nonce);
    REQUIRE(write(fd, hello, sizeof(hello)) == (ssize_t)sizeof(hello));
    CHECK_EQ(read_ack(fd), OMC_ERR_VERSION);
    CHECK(warn_seen(3000, "data hello version 3", "version 4", NULL));
    CHECK(closed_within(fd, 1500));
    CHECK_EQ(tcp_data_connections(s), 0);
    close(fd);
    hz_close(&h);
    omc_conn_destroy(s);
}

/* The status record a request gets, or all 0xFF bytes if none came. */
static void dstatus_or_ff(int fd, uint8_t* st) { if (dstatus_raw(fd, st) != 0) memset(st, 0xFF, 24); }

/* HOSTILE (a ticketed session that learned an entry id - from metadata it saw, or by probing -
   and everything the old request format gave away, but not the key): requests used to carry
   CRC-32C(key) in clear, a 32-bit check anyone on the wire could test guessed keys against
   offline, and a session could try keys online. Want: with the CRC where the old check was,
   with a proof it made for a guessed key, with the right key under a secret that is not the
   session's, or with no proof, PULL and CLAIM alike get OMC_ERR_NOT_FOUND with detail 0, byte
   for byte the record of an id nobody holds, and nothing is used up; the proof of the right key
   under the session's secret is then served (so the refusals were about the proof). */
OMC_TEST(a_request_without_the_key_gets_not_found_whatever_else_it_knows) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_meta big = {0}, small = {0};
    uint8_t q[64], proof[16], none[24], st[24], hdr[24], rc[8], trl[8], zero_secret[32];
    static uint8_t payload[100000];
    uint16_t port = 0, dport = 0;
    uint64_t e_big, e_small;
    uint32_t crc;
    hz h;
    int fd, i, op;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "hidden", 100000, 311, &big));       /* a PULL's entry */
    CHECK_OK(put_bytes(s, "tiny", 4096, 312, &small));         /* inlined: a CLAIM's */
    e_big = entry_of(&big);
    e_small = entry_of(&small);
    REQUIRE(hz_open(&h, port) == 0);
    REQUIRE(hz_hello(&h) == HZ_HELLO && h.has_ticket);
    fd = data_conn(dport, 0xA11Cu, &h);
    REQUIRE(fd >= 0);
    memset(zero_secret, 0, sizeof(zero_secret));
    for (op = 1; op <= 2; op++) {
        uint64_t entry = op == 1 ? e_big : e_small, cap = op == 1 ? 100000 : 4096;
        const char* qkey = op == 1 ? QKEY("hidden") : QKEY("tiny");
        CHECK(dreq_key(fd, &h, (uint8_t)op, 9, entry ^ ((uint64_t)0x66 << 32), 0, cap, qkey) == 0);   /* an id nobody holds */
        REQUIRE(dstatus_raw(fd, none) == 0);
        CHECK_EQ((int32_t)rd32(none + 4), OMC_ERR_NOT_FOUND);
        CHECK_EQ(rd64(none + 16), 0);
        for (i = 0; i < 4; i++) {
            crc = crc32c_ref((const uint8_t*)qkey, strlen(qkey), 0);
            memset(proof, 0, sizeof(proof));
            if (i == 0) le32(proof, crc);                                   /* the old check, where the proof goes */
            if (i == 1) key_proof(h.ticket + 16, entry, QKEY("guess"), proof);  /* our secret, a guessed key */
            if (i == 2) key_proof(zero_secret, entry, qkey, proof);         /* the key, not our secret */
            /* i == 3: no proof at all */
            dreq_encode(q, (uint8_t)op, 9, entry, 0, cap, 2000, proof);
            CHECK(write(fd, q, sizeof(q)) == (ssize_t)sizeof(q));
            dstatus_or_ff(fd, st);
            CHECK(memcmp(st, none, 24) == 0);
        }
    }
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "hidden"));        /* nothing was used up */
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "tiny"));
    CHECK(dreq_key(fd, &h, 2, 10, e_small, 0, 4096, QKEY("tiny")) == 0);       /* the honest CLAIM */
    CHECK_EQ(dstatus(fd, 10, NULL), OMC_OK);
    CHECK(dreq_key(fd, &h, 1, 11, e_big, 0, 100000, QKEY("hidden")) == 0);    /* the honest PULL */
    CHECK(read_n(fd, hdr, sizeof(hdr)) == 0 && rd32(hdr) == 0x44434D4Fu && rd64(hdr + 8) == 11 && rd64(hdr + 16) == 100000);
    CHECK(read_n(fd, payload, sizeof(payload)) == 0 && omc_test_verify(payload, sizeof(payload), 311));
    le32(rc, 0x47434D4Fu); le32(rc + 4, 0);
    CHECK(write(fd, rc, sizeof(rc)) == (ssize_t)sizeof(rc));
    CHECK(read_n(fd, trl, sizeof(trl)) == 0 && rd32(trl) == 0x45434D4Fu);
    CHECK_RES(omc_conn_exists(s, "s0", "s1", "hidden"), OMC_ERR_NOT_FOUND);   /* each read was recorded once */
    CHECK_RES(omc_conn_exists(s, "s0", "s1", "tiny"), OMC_ERR_NOT_FOUND);
    close(fd);
    hz_close(&h);
    omc_meta_free(&big);
    omc_meta_free(&small);
    omc_conn_destroy(s);
}

/* HOSTILE (another session that sees the victim's data connection): it copies a request byte
   for byte and sends it on its own connection, registered under its own ticket. Want: the
   copy gets OMC_ERR_NOT_FOUND with detail 0 and uses nothing up (the proof is keyed with the
   victim's session secret); the request bytes contain neither the key nor its CRC; the victim
   sending the same bytes on its own connection is served. */
OMC_TEST(a_request_copied_from_another_session_proves_nothing) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_meta m = {0};
    uint8_t q[64], proof[16], st[24], hdr[24], rc[8], trl[8], crc_bytes[4];
    static uint8_t payload[100000];
    uint16_t port = 0, dport = 0;
    uint64_t entry;
    hz victim, thief;
    int vfd, tfd, op;
    REQUIRE(s);
    ports_of(s, &port, &dport);
    CHECK_OK(put_bytes(s, "k", 100000, 321, &m));
    entry = entry_of(&m);
    REQUIRE(hz_open(&victim, port) == 0 && hz_hello(&victim) == HZ_HELLO && victim.has_ticket);
    REQUIRE(hz_open(&thief, port) == 0 && hz_hello(&thief) == HZ_HELLO && thief.has_ticket);
    CHECK(memcmp(victim.ticket + 16, thief.ticket + 16, 32) != 0);
    vfd = data_conn(dport, 0xB0B0u, &victim);
    tfd = data_conn(dport, 0xB0B1u, &thief);
    REQUIRE(vfd >= 0 && tfd >= 0);
    key_proof(victim.ticket + 16, entry, QKEY("k"), proof);
    dreq_encode(q, 1, 21, entry, 0, 100000, 2000, proof);            /* what the victim sends */
    le32(crc_bytes, crc32c_ref((const uint8_t*)QKEY("k"), strlen(QKEY("k")), 0));
    CHECK(memmem(q, sizeof(q), QKEY("k"), strlen(QKEY("k"))) == NULL);
    CHECK(memmem(q, sizeof(q), crc_bytes, sizeof(crc_bytes)) == NULL);
    for (op = 1; op <= 2; op++) {                                      /* sniffed, replayed; also as a CLAIM */
        q[4] = (uint8_t)op;
        CHECK(write(tfd, q, sizeof(q)) == (ssize_t)sizeof(q));
        dstatus_or_ff(tfd, st);
        CHECK_EQ(rd32(st), 0x53434D4Fu);
        CHECK_EQ((int32_t)rd32(st + 4), OMC_ERR_NOT_FOUND);
        CHECK_EQ(rd64(st + 8), 21);
        CHECK_EQ(rd64(st + 16), 0);
    }
    q[4] = 1;
    CHECK_OK(omc_conn_exists(s, "s0", "s1", "k"));
    CHECK(write(vfd, q, sizeof(q)) == (ssize_t)sizeof(q));             /* the victim's own */
    CHECK(read_n(vfd, hdr, sizeof(hdr)) == 0 && rd32(hdr) == 0x44434D4Fu && rd64(hdr + 16) == 100000);
    CHECK(read_n(vfd, payload, sizeof(payload)) == 0 && omc_test_verify(payload, sizeof(payload), 321));
    le32(rc, 0x47434D4Fu); le32(rc + 4, 0);
    CHECK(write(vfd, rc, sizeof(rc)) == (ssize_t)sizeof(rc));
    CHECK(read_n(vfd, trl, sizeof(trl)) == 0 && rd32(trl) == 0x45434D4Fu);
    CHECK_RES(omc_conn_exists(s, "s0", "s1", "k"), OMC_ERR_NOT_FOUND);
    close(vfd); close(tfd);
    hz_close(&victim); hz_close(&thief);
    omc_meta_free(&m);
    omc_conn_destroy(s);
}

/* The honest side of the key proof: a real receiver's gets go as requests on its data connection
   (a PULL for a payload over the inline threshold, a CLAIM for one that came inside the
   metadata) and each proves its key. Want: every byte right, each read recorded once, and no
   protocol error or refusal on the sender. */
OMC_TEST(honest_requests_prove_their_key_plain_and_inline_claim) {
    omc_conn* s = make_sender(0, NULL, NULL, 0, 0);
    omc_conn* r = make_receiver(0, NULL, NULL, NULL);
    omc_meta warm = {0}, big = {0}, small = {0};
    omc_buffer b;
    omc_tcp_health_info th;
    uint64_t errs0;
    REQUIRE(s && r);
    errs0 = tcp_protocol_errors(s);
    CHECK_OK(put_bytes(s, "warm", 100000, 331, &warm));
    CHECK_OK(put_bytes(s, "big", 200000, 332, &big));
    CHECK_OK(put_bytes(s, "small", 4096, 333, &small));
    CHECK_OK(omc_conn_get(r, "s0", "s1", "warm", warm.data, warm.size, omc_deadline_after_ms(3000), &b));  /* opens the channel */
    CHECK(b.size == 100000 && omc_test_verify(b.data, b.size, 331));
    omc_buffer_release(&b);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "big", big.data, big.size, omc_deadline_after_ms(3000), &b));      /* PULL request */
    CHECK(b.size == 200000 && omc_test_verify(b.data, b.size, 332));
    omc_buffer_release(&b);
    CHECK_OK(omc_conn_get(r, "s0", "s1", "small", small.data, small.size, omc_deadline_after_ms(3000), &b));  /* CLAIM request */
    CHECK(b.size == 4096 && omc_test_verify(b.data, b.size, 333));
    omc_buffer_release(&b);
    CHECK_RES(omc_conn_exists(s, "s0", "s1", "big"), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_conn_exists(s, "s0", "s1", "small"), OMC_ERR_NOT_FOUND);   /* the CLAIM was recorded */
    memset(&th, 0, sizeof(th));
    omc_tcp_health(s, &th);
    CHECK_EQ(th.protocol_errors, errs0);
    CHECK(th.data_connections >= 1);                  /* the gets went over a registered data connection */
    omc_meta_free(&warm); omc_meta_free(&big); omc_meta_free(&small);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

/* ---- main: the harness of omc_test.h, with the open cases skipped ----------------------------- */

int main(int argc, char** argv) {
    int i, j, passed = 0, failed = 0, skipped = 0, all = getenv("OMC_HOSTILE_ALL") && atoi(getenv("OMC_HOSTILE_ALL")) == 1;
    (void)omc_test_main;        /* replaced by this main (the skip table) */
    if (argc == 5 && strcmp(argv[1], "--busy-owner") == 0) return busy_owner_main(argv[2], argv[3], atoi(argv[4]));
    if (argc == 5 && strcmp(argv[1], "--reconnect-client") == 0)
        return reconnect_client_main((uint16_t)atoi(argv[2]), (uint16_t)atoi(argv[3]), atoi(argv[4]));
    signal(SIGPIPE, SIG_IGN);
    shm_dir();                  /* named after this process, before any child computes it */
    for (i = 0; i < omc_test_count; i++) {
        int selected = argc <= 1, before, finding;
        double t0;
        for (j = 1; j < argc; j++) if (strstr(omc_test_list[i].name, argv[j])) selected = 1;
        if (!selected) continue;
        finding = open_finding(omc_test_list[i].name);
        if (finding && !all) {
            printf("SKIP %s (open: finding %d)\n", omc_test_list[i].name, finding);
            skipped++;
            continue;
        }
        before = __atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED);
        t0 = now_s();
        omc_test_list[i].fn();
        if (__atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED) == before) { passed++; printf("PASS %s (%.2f s)\n", omc_test_list[i].name, now_s() - t0); }
        else { failed++; printf("FAIL %s (%.2f s)%s\n", omc_test_list[i].name, now_s() - t0, finding ? " [known open]" : ""); }
        fflush(stdout);
    }
    shm_dir_remove();
    printf("skipped %d open case(s); OMC_HOSTILE_ALL=1 runs them\n", skipped);
    printf("test_hostile: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
