/* omc_pipeline_connect (every connector type a spec can name, roles, ports, registered senders,
   the errors) and the three-stage example examples/pipeline3.c run as real processes: over shared
   memory and over TCP, started together (--all) and one by one in reverse order (--stage), with a
   corrupted request (the checksum check must catch it), a missing stage (a clear failure, not a
   hang), a broken config and an RDMA config (refused, or run over TCP with --rdma-fallback).

   The example is compiled into this binary (its main() left out), so `make test` needs nothing
   else built; its stages are forked children whose output is captured and checked. */
#define PIPELINE3_NO_MAIN
#include "examples/pipeline3.c"     /* defines OMNICONN_IMPLEMENTATION, includes the headers */
#include "omc_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <limits.h>
#include <stdlib.h>

OMC_TEST_TSAN_IGNORE_LIBZMQ()    /* libzmq is not instrumented: see omc_test.h */

/* ---- helpers -------------------------------------------------------------------------------- */


/* A base port P such that P, P+1 and P+2 can be bound now (a pick, not a reservation). */
static int free_base_port(void) { return omc_test_free_port_base(3); }

static omc_pipeline_config* load_text(const char* text) {
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    omc_pipeline_config_desc d;
    memset(&d, 0, sizeof(d));
    d.name = "inline";
    if (omc_pipeline_config_load_string(text, strlen(text), &d, &cfg, &err) != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    return cfg;
}

/* Write text to a fresh temporary file; returns its path (static buffer, one at a time). */
static const char* temp_config(const char* text) {
    static char path[64];
    FILE* f;
    int fd;
    snprintf(path, sizeof(path), "/tmp/omc_p3_XXXXXX");
    fd = mkstemp(path);
    if (fd < 0) return NULL;
    f = fdopen(fd, "w");
    if (!f) { close(fd); return NULL; }
    fputs(text, f);
    fclose(f);
    return path;
}

/* The three-stage chain over one connector spec, as text: `spec_yaml` is the spec's body. */
static void chain_config(char* out, size_t n, const char* spec_yaml) {
    snprintf(out, n,
             "runtime:\n  connectors:\n    c:\n%s"
             "stage_args:\n"
             "  - stage_id: 0\n    output_connectors: {to_stage_1: c}\n"
             "  - stage_id: 1\n    input_connectors: {from_stage_0: c}\n    output_connectors: {to_stage_2: c}\n"
             "  - stage_id: 2\n    input_connectors: {from_stage_1: c}\n", spec_yaml);
}

typedef struct run_result {
    int status;                 /* exit status, or 128 + signal */
    char out[65536];            /* stdout and stderr, interleaved */
    double seconds;
} run_result;

/* Run pipeline3 with these arguments in a child process (stdout and stderr captured). Several
   runs may go at once: start_run / finish_run. */
typedef struct run_handle { pid_t pid; int fd; omc_time_ns t0; } run_handle;

static run_handle start_run(const char* const* args) {
    run_handle h;
    int fds[2];
    h.pid = -1;
    h.fd = -1;
    h.t0 = omc_now_ns();
    if (pipe(fds) != 0) return h;
    fflush(stdout);
    fflush(stderr);
    h.pid = fork();
    if (h.pid == 0) {
        char* argv[64];
        int argc = 0;
        close(fds[0]);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[1]);
        argv[argc++] = (char*)"pipeline3";
        while (args[argc - 1] && argc < 63) { argv[argc] = (char*)args[argc - 1]; argc++; }
        argv[argc] = NULL;
        exit(pipeline3_main(argc, argv));
    }
    close(fds[1]);
    h.fd = fds[0];
    return h;
}

static void finish_run(run_handle h, run_result* res) {
    size_t len = 0;
    int st = 0;
    memset(res, 0, sizeof(*res));
    for (;;) {
        ssize_t k = read(h.fd, res->out + len, sizeof(res->out) - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
        if (len == sizeof(res->out) - 1) len = 0;    /* keep the tail (the verdicts are at the end) */
    }
    res->out[len] = '\0';
    close(h.fd);
    waitpid(h.pid, &st, 0);
    res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    res->seconds = (double)(omc_now_ns() - h.t0) / 1e9;
    /* a sanitizer report in any stage process fails the test, whatever the exit status says */
    if (strstr(res->out, "Sanitizer") || strstr(res->out, "runtime error:")) {
        OMC_TEST_FAIL();
        fprintf(stderr, "  a stage process reported a sanitizer error:\n%s\n", res->out);
    }
}

static void run(const char* const* args, run_result* res) { finish_run(start_run(args), res); }

static void show_on_failure(const run_result* r, int failed) {
    if (failed) fprintf(stderr, "  ---- pipeline3 output (exit %d, %.1f s) ----\n%s  ----\n", r->status, r->seconds, r->out);
}

/* Small requests: the point is the plumbing, not the volume. */
#define SMALL "--requests", "5", "--tokens", "40", "--chunk", "8", "--dim", "256", "--think-us", "200", "--pool", "16777216"

/* ---- omc_pipeline_connect ------------------------------------------------------------------- */

static const char* const shm_then_auto =
    "runtime:\n"
    "  connectors:\n"
    "    raw: {name: SharedMemoryConnector, extra: {shm_threshold_bytes: 0}}\n"
    "stage_args:\n"
    "  - stage_id: 0\n    output_connectors: {to_stage_1: raw}\n"
    "  - stage_id: 1\n"
    "  - stage_id: 2\n    engine_input_source: [1]\n";

static omc_role role_of(omc_conn* c) {
    omc_health h;
    memset(&h, 0, sizeof(h));
    omc_conn_health(c, &h);
    return h.role;
}

/* Put a 100-byte payload on c and say whether its metadata carries the bytes inline. */
static int small_put_is_inline(omc_conn* c, const char* key) {
    char bytes[100];
    omc_payload p;
    omc_meta m;
    omc_meta_info info;
    int inl = -1;
    memset(bytes, 7, sizeof(bytes));
    memset(&p, 0, sizeof(p));
    p.data = bytes;
    p.size = sizeof(bytes);
    if (omc_conn_put(c, "0", "1", key, &p, &m) != OMC_OK) return -1;
    if (omc_meta_parse(m.data, m.size, &info) == OMC_OK) inl = (info.flags & OMC_META_FLAG_INLINE) != 0;
    omc_meta_free(&m);
    omc_conn_cleanup(c, "0", "1", key);
    return inl;
}

OMC_TEST(connect_shm_roles_and_threshold) {
    omc_pipeline_config* cfg = load_text(shm_then_auto);
    omc_pipeline_connect_desc d;
    omc_pipeline_edge e0, e1;
    omc_conn *s0 = NULL, *s1_in = NULL, *s1_out = NULL, *s2 = NULL;
    char chan[32];
    REQUIRE(cfg);
    snprintf(chan, sizeof(chan), "t3_%ld", (long)getpid());
    memset(&d, 0, sizeof(d));
    d.channel = chan;
    d.pool_size = 4u << 20;
    CHECK_OK(omc_pipeline_config_edge(cfg, 0, &e0));
    CHECK_OK(omc_pipeline_config_edge(cfg, 1, &e1));
    CHECK(e0.connector != e1.connector);            /* 'raw' and the auto-filled SHM spec */
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &s0));
    CHECK_OK(omc_pipeline_connect(cfg, 0, 1, &d, &s1_in));
    CHECK_OK(omc_pipeline_connect(cfg, 1, 1, &d, &s1_out));
    CHECK_OK(omc_pipeline_connect(cfg, 1, 2, &d, &s2));
    REQUIRE(s0 && s1_in && s1_out && s2);
    CHECK_EQ(omc_conn_transport(s0), OMC_TRANSPORT_SHM);
    /* roles come from the stage's edges over each spec: the talker receives on 'raw' and sends
       on auto_shm, so it gets a receiver and a sender, not two dual connectors */
    CHECK_EQ(role_of(s0), OMC_ROLE_SENDER);
    CHECK_EQ(role_of(s1_in), OMC_ROLE_RECEIVER);
    CHECK_EQ(role_of(s1_out), OMC_ROLE_SENDER);
    CHECK_EQ(role_of(s2), OMC_ROLE_RECEIVER);
    /* shm_threshold_bytes 0 = never inline; auto_shm keeps vLLM-Omni's 65536 */
    CHECK_EQ(small_put_is_inline(s0, "a"), 0);
    CHECK_EQ(small_put_is_inline(s1_out, "b"), 1);
    /* and the connectors really carry data between the stages */
    {
        omc_payload p;
        omc_buffer b;
        memset(&p, 0, sizeof(p));
        p.data = "hello";
        p.size = 5;
        CHECK_OK(omc_conn_put(s0, "0", "1", "k", &p, NULL));
        CHECK_OK(omc_conn_get(s1_in, "0", "1", "k", NULL, 0, omc_deadline_after_ms(2000), &b));
        CHECK(b.size == 5 && memcmp(b.data, "hello", 5) == 0);
        omc_buffer_release(&b);
    }
    omc_conn_destroy(s2);
    omc_conn_destroy(s1_out);
    omc_conn_destroy(s1_in);
    omc_conn_destroy(s0);
    omc_pipeline_config_destroy(cfg);
}

OMC_TEST(connect_one_spec_both_edges_is_dual) {
    char text[2048];
    omc_pipeline_config* cfg;
    omc_pipeline_connect_desc d;
    omc_conn* c = NULL;
    char chan[32];
    chain_config(text, sizeof(text), "      name: SharedMemoryConnector\n");
    cfg = load_text(text);
    REQUIRE(cfg);
    snprintf(chan, sizeof(chan), "t3d_%ld", (long)getpid());
    memset(&d, 0, sizeof(d));
    d.channel = chan;
    d.pool_size = 4u << 20;
    CHECK_OK(omc_pipeline_connect(cfg, 1, 1, &d, &c));
    CHECK_EQ(role_of(c), OMC_ROLE_DUAL);
    omc_conn_destroy(c);
    omc_pipeline_config_destroy(cfg);
}

OMC_TEST(connect_bad_arguments) {
    char text[2048];
    omc_pipeline_config* cfg;
    omc_pipeline_connect_desc d;
    omc_conn* c = (omc_conn*)&d;        /* must come back NULL on every failure */
    chain_config(text, sizeof(text), "      name: TcpConnector\n      extra: {host: 127.0.0.1, zmq_port: 40100}\n");
    cfg = load_text(text);
    REQUIRE(cfg);
    memset(&d, 0, sizeof(d));
    CHECK_RES(omc_pipeline_connect(NULL, 0, 0, &d, &c), OMC_ERR_INVALID_ARG);
    CHECK(c == NULL);
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, NULL), OMC_ERR_INVALID_ARG);
    c = (omc_conn*)&d;
    CHECK_RES(omc_pipeline_connect(cfg, 7, 0, &d, &c), OMC_ERR_NOT_FOUND);
    CHECK(c == NULL);
    CHECK_RES(omc_pipeline_connect(cfg, 0, 2, &d, &c), OMC_ERR_INVALID_ARG);     /* stage 2 is not on edge 0->1 */
    d.dp_index = 1;                                                             /* the stage has one replica */
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_INVALID_ARG);
    d.dp_index = 0;
    d.tp_rank = 1;
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_INVALID_ARG);
    d.tp_rank = 0;
    d.purpose = 5;                                                              /* neither 0 nor 100 */
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_INVALID_ARG);
    CHECK(c == NULL);
    omc_pipeline_config_destroy(cfg);
    /* a CUDA pool on a host-memory connector is refused, not silently made a host pool */
    chain_config(text, sizeof(text), "      name: SharedMemoryConnector\n      extra: {memory_pool_device: cuda}\n");
    cfg = load_text(text);
    REQUIRE(cfg);
    memset(&d, 0, sizeof(d));
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_UNAVAILABLE);
    CHECK(c == NULL);
    omc_pipeline_config_destroy(cfg);
}

OMC_TEST(connect_tcp_ports_and_senders) {
    char spec[256], text[2048], detected[OMC_TCP_HOST_MAX];
    omc_pipeline_config* cfg;
    omc_pipeline_connect_desc d;
    omc_conn *s0 = NULL, *s1 = NULL, *s2 = NULL;
    omc_tcp_peer_info peer;
    uint16_t port = 0;
    int base = free_base_port();
    REQUIRE(base > 0);
    REQUIRE(omc_detect_host(0, detected, sizeof(detected), NULL) == OMC_OK);
    /* the host's address without CURVE: allowed only with insecure: true */
    snprintf(spec, sizeof(spec), "      name: TcpConnector\n      extra: {host: auto, zmq_port: %d, memory_pool_size: 8388608, insecure: true}\n", base);
    chain_config(text, sizeof(text), spec);
    cfg = load_text(text);
    REQUIRE(cfg);
    memset(&d, 0, sizeof(d));
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &s0));
    CHECK_OK(omc_pipeline_connect(cfg, 0, 1, &d, &s1));
    CHECK_OK(omc_pipeline_connect(cfg, 1, 2, &d, &s2));
    REQUIRE(s0 && s1 && s2);
    CHECK_EQ(omc_conn_transport(s0), OMC_TRANSPORT_TCP);
    CHECK_EQ(role_of(s0), OMC_ROLE_SENDER);
    CHECK_EQ(role_of(s1), OMC_ROLE_DUAL);
    CHECK_EQ(role_of(s2), OMC_ROLE_RECEIVER);
    /* the listeners are vLLM-Omni's request-forwarding ports: base + from_stage */
    CHECK_OK(omc_tcp_endpoint(s0, NULL, 0, &port, NULL));
    CHECK_EQ(port, base);
    CHECK_OK(omc_tcp_endpoint(s1, NULL, 0, &port, NULL));
    CHECK_EQ(port, base + 1);
    CHECK_RES(omc_tcp_endpoint(s2, NULL, 0, &port, NULL), OMC_ERR_WRONG_ROLE);
    /* receivers know their upstream sender by name, at the detected host ("auto") */
    CHECK_EQ(omc_tcp_peer_count(s1), 1);
    CHECK_OK(omc_tcp_peer_health(s1, 0, &peer));
    CHECK(strcmp(peer.name, "stage0") == 0 && peer.port == base && strcmp(peer.host, detected) == 0);
    CHECK_EQ(omc_tcp_peer_count(s2), 1);
    CHECK_OK(omc_tcp_peer_health(s2, 0, &peer));
    CHECK(strcmp(peer.name, "stage1") == 0 && peer.port == base + 1);
    /* so a metadata-less get finds the data */
    {
        omc_payload p;
        omc_buffer b;
        memset(&p, 0, sizeof(p));
        p.data = "over tcp";
        p.size = 8;
        CHECK_OK(omc_conn_put(s0, "0", "1", "k", &p, NULL));
        CHECK_OK(omc_conn_get(s1, "0", "1", "k", NULL, 0, omc_deadline_after_ms(5000), &b));
        CHECK(b.size == 8 && memcmp(b.data, "over tcp", 8) == 0);
        omc_buffer_release(&b);
    }
    /* a second listener on a port already taken fails, and hands out nothing */
    {
        omc_conn* again = (omc_conn*)&d;
        CHECK(omc_pipeline_connect(cfg, 0, 0, &d, &again) != OMC_OK);
        CHECK(again == NULL);
    }
    /* sender_host overrides where receivers look */
    {
        omc_conn* r = NULL;
        d.sender_host = "127.0.0.9";
        CHECK_OK(omc_pipeline_connect(cfg, 1, 2, &d, &r));
        CHECK_OK(omc_tcp_peer_health(r, 0, &peer));
        CHECK(strcmp(peer.host, "127.0.0.9") == 0);
        omc_conn_destroy(r);
        d.sender_host = NULL;
    }
    omc_conn_destroy(s2);
    omc_conn_destroy(s1);
    omc_conn_destroy(s0);
    omc_pipeline_config_destroy(cfg);
}

/* TP and DP: stage 0 runs TP 2, stage 5 (far enough for no collision) receives with TP 2. */
OMC_TEST(connect_tcp_tensor_parallel_ranks) {
    char text[2048];
    omc_pipeline_config* cfg;
    omc_pipeline_connect_desc d;
    omc_conn *tx = NULL, *rx = NULL;
    omc_tcp_peer_info peer;
    uint16_t port = 0;
    int base = free_base_port();
    REQUIRE(base > 0);
    snprintf(text, sizeof(text),
             "runtime:\n  connectors:\n    c: {name: TcpConnector, extra: {host: 127.0.0.1, zmq_port: %d, memory_pool_size: 8388608}}\n"
             "stage_args:\n"
             "  - stage_id: 0\n    engine_args: {tensor_parallel_size: 2}\n    output_connectors: {to_stage_5: c}\n"
             "  - stage_id: 5\n    engine_args: {tensor_parallel_size: 2}\n    input_connectors: {from_stage_0: c}\n", base);
    cfg = load_text(text);
    REQUIRE(cfg);
    memset(&d, 0, sizeof(d));
    d.tp_rank = 1;
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &tx));
    CHECK_OK(omc_pipeline_connect(cfg, 0, 5, &d, &rx));
    REQUIRE(tx && rx);
    CHECK_OK(omc_tcp_endpoint(tx, NULL, 0, &port, NULL));
    CHECK_EQ(port, base + 1);                           /* base + stage 0 + dp 0 x 2 + rank 1 */
    CHECK_OK(omc_tcp_peer_health(rx, 0, &peer));
    CHECK_EQ(peer.port, base + 1);                      /* rank 1 connects to the sender's rank 1 */
    omc_conn_destroy(rx);
    omc_conn_destroy(tx);
    omc_pipeline_config_destroy(cfg);
}

/* An RDMA spec makes omniconn_rdma.h's connector (this file includes it through the example).
   Where RDMA cannot start (no device: these machines) it fails, or with rdma_fallback_tcp runs
   over TCP and says why; where it can (the RDMA bed runs its own tests), both calls succeed. */
OMC_TEST(connect_rdma_local_and_fallback) {
    char spec[256], text[2048], why[256];
    omc_pipeline_config* cfg;
    omc_pipeline_connect_desc d;
    omc_rdma_connector_info info;
    omc_conn* c = NULL;
    int base = free_base_port(), have_rdma = omc_rdma_probe(NULL, why, sizeof(why)) == OMC_OK;
    REQUIRE(base > 0);
    snprintf(spec, sizeof(spec), "      name: MooncakeTransferEngineConnector\n      extra: {host: 127.0.0.1, zmq_port: %d, "
             "protocol: rdma, memory_pool_size: 8388608}\n", base);
    chain_config(text, sizeof(text), spec);
    cfg = load_text(text);
    REQUIRE(cfg);
    memset(&d, 0, sizeof(d));
    if (!have_rdma) {
        c = (omc_conn*)&d;
        CHECK(omc_pipeline_connect(cfg, 0, 0, &d, &c) != OMC_OK);      /* RDMA required by default */
        CHECK(c == NULL);
    } else printf("  (an RDMA device is present: %s)\n", why);
    d.rdma_fallback_tcp = 1;
    c = NULL;
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &c));
    REQUIRE(c);
    CHECK_EQ(omc_conn_transport(c), OMC_TRANSPORT_RDMA);              /* what the metadata will say */
    CHECK_OK(omc_rdma_connector_query(c, &info));
    if (!have_rdma) CHECK(info.rdma_enabled == 0 && info.reason[0] != '\0');
    omc_conn_destroy(c);
    omc_pipeline_config_destroy(cfg);
    /* LocalConnector: a same-process connector (both stages share the one handle) */
    chain_config(text, sizeof(text), "      name: LocalConnector\n");
    cfg = load_text(text);
    REQUIRE(cfg);
    memset(&d, 0, sizeof(d));
    c = NULL;
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &c));
    CHECK(c && omc_conn_transport(c) == OMC_TRANSPORT_LOCAL && role_of(c) == OMC_ROLE_DUAL);
    omc_conn_destroy(c);
    omc_pipeline_config_destroy(cfg);
}

/* ---- the example, as processes -------------------------------------------------------------- */

static int contains(const char* hay, const char* needle) { return strstr(hay, needle) != NULL; }

OMC_TEST(pipeline3_shm_three_processes) {
    static run_result r;
    const char* args[] = { "--config", omc_test_repo_path("examples/configs/pipeline3_shm.yaml"), SMALL, "--timeout", "20", NULL };
    int bad;
    run(args, &r);
    bad = r.status != 0 || !contains(r.out, "[vocoder] checksums verified: 5 of 5 requests match the thinker's") ||
          !contains(r.out, "pipeline3: OK") || !contains(r.out, "over shm");
    CHECK(!bad);
    /* every stage ends with its transfer-id map empty: completions removed every pair */
    CHECK(contains(r.out, "[thinker] sent 5 requests") && contains(r.out, "[talker]  5 requests"));
    CHECK(!contains(r.out, "map empty: no"));
    show_on_failure(&r, bad);
}

/* A TCP chain on the host's address, as the shipped TCP config has it: CURVE with an allow-list,
   using the example's TEST-ONLY keys (examples/configs/test-keys). */
static const char* key_path(const char* file, char out[PATH_MAX]) {
    char rel[256];
    snprintf(rel, sizeof(rel), "examples/configs/test-keys/%s", file);
    if (!realpath(omc_test_repo_path(rel), out)) snprintf(out, PATH_MAX, "%s", omc_test_repo_path(rel));
    return out;
}

static const char* tcp_config(const char* name, const char* protocol) {
    static char text[24576];
    char spec[20480], k[4][PATH_MAX];
    int base = free_base_port();
    if (!base) return NULL;
    snprintf(spec, sizeof(spec), "      name: %s\n      extra: {host: auto, zmq_port: %d, protocol: %s, memory_pool_size: 16777216,\n"
             "        curve_server_secret_key_file: \"%s\",\n        curve_allowed_clients_file: \"%s\",\n"
             "        curve_server_public_key_file: \"%s\",\n        curve_client_secret_key_file: \"%s\"}\n",
             name, base, protocol, key_path("server.key", k[0]), key_path("allowed_clients", k[1]), key_path("server.pub", k[2]),
             key_path("client.key", k[3]));
    chain_config(text, sizeof(text), spec);
    return temp_config(text);
}

OMC_TEST(pipeline3_tcp_three_processes) {
    static run_result r;
    const char* path = tcp_config("TcpConnector", "tcp");
    int bad;
    REQUIRE(path);
    {
        const char* args[] = { "--config", path, SMALL, "--timeout", "20", NULL };
        run(args, &r);
    }
    bad = r.status != 0 || !contains(r.out, "checksums verified: 5 of 5") || !contains(r.out, "over tcp");
    CHECK(!bad);
    show_on_failure(&r, bad);
    unlink(path);
}

/* Three separate --stage processes, started downstream first: receivers wait for senders that
   do not exist yet (no launcher orders them), over SHM and over TCP. */
/* stages started on their own agree on the "requests" streams' token */
#define P3_TOKEN "5f0c2a9e81d34b7796a1c0de3b2f4e68"

static void stages_apart(const char* config, const char* channel) {
    static run_result r[3];
    run_handle h[3];
    int k, bad = 0;
    for (k = 2; k >= 0; k--) {
        char id[4];
        const char* args[] = { "--config", config, "--stage", id, "--channel", channel, "--token", P3_TOKEN, SMALL, "--timeout", "20", NULL };
        snprintf(id, sizeof(id), "%d", k);
        h[k] = start_run(args);
        usleep(30000);
    }
    for (k = 0; k < 3; k++) finish_run(h[k], &r[k]);
    for (k = 0; k < 3; k++) bad |= r[k].status != 0;
    bad |= !contains(r[2].out, "checksums verified: 5 of 5");
    CHECK(!bad);
    for (k = 0; k < 3; k++) show_on_failure(&r[k], bad);
}

OMC_TEST(pipeline3_stages_started_apart) {
    char chan[32];
    const char* path;
    snprintf(chan, sizeof(chan), "t3s_%ld", (long)getpid());
    stages_apart(omc_test_repo_path("examples/configs/pipeline3_shm.yaml"), chan);
    path = tcp_config("TcpConnector", "tcp");
    REQUIRE(path);
    stages_apart(path, chan);
    unlink(path);
}

/* The check can fail: one code changed by the talker must show up as a mismatch, exit status 1. */
OMC_TEST(pipeline3_detects_a_corrupted_request) {
    static run_result r;
    const char* args[] = { "--config", omc_test_repo_path("examples/configs/pipeline3_shm.yaml"), SMALL, "--fault", "2", "--timeout", "20", NULL };
    int bad;
    run(args, &r);
    bad = r.status == 0 || !contains(r.out, "CHECKSUM MISMATCH: 1 of 5 requests differ") || !contains(r.out, "pipeline3: FAILED");
    CHECK(!bad);
    show_on_failure(&r, bad);
}

/* A stage started on its own cannot guess the "requests" streams' token: it must be given one. */
OMC_TEST(pipeline3_stage_without_a_token_is_refused) {
    static run_result r;
    const char* args[] = { "--config", omc_test_repo_path("examples/configs/pipeline3_shm.yaml"), "--stage", "1", NULL };
    int bad;
    run(args, &r);
    bad = r.status != 2 || !contains(r.out, "--stage needs --token");
    CHECK(!bad);
    show_on_failure(&r, bad);
}

/* A thinker alone: nobody takes its data; it must say so and fail at its timeout, not hang. */
OMC_TEST(pipeline3_missing_stage_fails_at_the_timeout) {
    static run_result r;
    char chan[32];
    const char* args[] = { "--config", omc_test_repo_path("examples/configs/pipeline3_shm.yaml"), "--stage", "0", "--channel", chan, "--token", P3_TOKEN, SMALL,
                           "--timeout", "2", NULL };
    int bad;
    snprintf(chan, sizeof(chan), "t3m_%ld", (long)getpid());
    run(args, &r);
    bad = r.status != 1 || !contains(r.out, "the talker did not take everything within 2 s") || r.seconds > 10;
    CHECK(!bad);
    show_on_failure(&r, bad);
}

OMC_TEST(pipeline3_config_errors) {
    static run_result r;
    const char* path = temp_config("stage_args:\n  - stage_id: 0\n  - stage_id: 1\n    engine_input_source: [0]\n  - stage_id: 2\n");
    int bad;
    REQUIRE(path);
    {
        const char* args[] = { "--config", path, NULL };
        run(args, &r);
    }
    bad = r.status != 2 || !contains(r.out, "has no edge 1 -> 2 (talker -> vocoder)");
    CHECK(!bad);
    show_on_failure(&r, bad);
    unlink(path);
    {
        const char* args[] = { "--config", "/nonexistent/p3.yaml", NULL };
        run(args, &r);
    }
    bad = r.status != 2 || !contains(r.out, "/nonexistent/p3.yaml");
    CHECK(!bad);
    show_on_failure(&r, bad);
    {
        const char* args[] = { "--requests", "zero", NULL };
        run(args, &r);
    }
    CHECK(r.status == 2 && contains(r.out, "usage: pipeline3"));
}

/* An RDMA config on a machine without RDMA: refused with the reason, or run over TCP with
   --rdma-fallback (on the RDMA bed, tests/rdma/, the same config runs over RDMA). */
OMC_TEST(pipeline3_rdma_config) {
    static run_result r;
    const char* path = tcp_config("MooncakeTransferEngineConnector", "rdma");
    char why[256];
    int bad;
    REQUIRE(path);
    if (omc_rdma_probe(NULL, why, sizeof(why)) != OMC_OK) {
        const char* args[] = { "--config", path, SMALL, "--timeout", "20", NULL };
        run(args, &r);
        bad = r.status == 0 || !contains(r.out, "cannot create the MooncakeTransferEngineConnector connector") ||
              !contains(r.out, "pipeline3: FAILED");
        CHECK(!bad);
        show_on_failure(&r, bad);
    }
    {
        const char* args[] = { "--config", path, SMALL, "--rdma-fallback", "--timeout", "20", NULL };
        run(args, &r);
    }
    bad = r.status != 0 || !contains(r.out, "checksums verified: 5 of 5") || !contains(r.out, "over rdma") ||
          (omc_rdma_probe(NULL, why, sizeof(why)) != OMC_OK && !contains(r.out, "[vocoder] inbound edge went over TCP, not RDMA"));
    CHECK(!bad);
    show_on_failure(&r, bad);
    unlink(path);
}

OMC_TEST_MAIN()
