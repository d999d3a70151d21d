/* omniconn_pipeline.h: the edge-configuration loader (on vLLM-Omni's own example, on YAML/JSON
   twins, on broken files whose errors must name the check and the line:column), the port-offset
   scheme and collision check, the transfer-id map's lifecycle, batches / exists / list on the
   same-process connector, and streams (in order, out of order, error mid-stream, back-pressure).
   Configuration files live in tests/data/. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_pipeline.h"
#include "omc_test.h"
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define CHECK_STR(a, b) CHECK((a) != NULL && strcmp((a), (b)) == 0)

/* ---- helpers ---------------------------------------------------------------------------------- */

/* tests/data/<name>, found next to this source file (so the binary runs from any directory
   when it was built with an absolute path, and from the repository root otherwise). */
static const char* data_path(const char* name) {
    static char buf[1024];
    const char* f = __FILE__;
    const char* slash = strrchr(f, '/');
    if (slash) snprintf(buf, sizeof(buf), "%.*s/data/%s", (int)(slash - f), f, name);
    else snprintf(buf, sizeof(buf), "data/%s", name);
    return buf;
}

static omc_result load_file(const char* name, omc_pipeline_config** cfg, omc_config_diag* err) {
    return omc_pipeline_config_load_file(data_path(name), NULL, cfg, err);
}

static omc_result load_text(const char* text, omc_pipeline_config** cfg, omc_config_diag* err) {
    omc_pipeline_config_desc d;
    memset(&d, 0, sizeof(d));
    d.name = "inline";
    return omc_pipeline_config_load_string(text, strlen(text), &d, cfg, err);
}

static void sleep_ms(int ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static omc_conn* make_local(uint64_t pool, omc_role role) {
    omc_local_desc d;
    omc_conn* c = NULL;
    memset(&d, 0, sizeof(d));
    d.pool_size = pool;
    d.role = role;
    if (omc_local_create(&d, &c) != OMC_OK) return NULL;
    return c;
}

/* Everything a config resolves to, as text without file positions: two configs that resolve
   the same print the same. */
static void dump_config(const omc_pipeline_config* cfg, char* out, size_t size) {
    size_t o = 0;
    uint32_t i;
#define DUMP(...) do { int k_ = snprintf(out + o, size - o, __VA_ARGS__); if (k_ > 0 && (size_t)k_ < size - o) o += (size_t)k_; } while (0)
    out[0] = '\0';
    for (i = 0; i < omc_pipeline_config_stage_count(cfg); i++) {
        omc_pipeline_stage s;
        omc_pipeline_config_stage(cfg, i, &s);
        DUMP("stage %d role %d in %u out %u tp %u dp %u\n", s.stage_id, (int)s.role, s.inbound, s.outbound, s.tp_size, s.dp_size);
    }
    for (i = 0; i < omc_pipeline_config_connector_count(cfg); i++) {
        omc_connector_spec c;
        omc_pipeline_config_connector(cfg, i, &c);
        DUMP("conn %s %s %d %d host=%s port=%u proto=%s dev=%s pool=%llu pooldev=%d thr=%llu auto=%d\n", c.name, c.type_name, (int)c.type,
             (int)c.transport, c.host, c.zmq_port, c.protocol, c.device_name, (unsigned long long)c.memory_pool_size,
             (int)c.memory_pool_device, (unsigned long long)c.shm_threshold_bytes, c.auto_filled);
    }
    for (i = 0; i < omc_pipeline_config_edge_count(cfg); i++) {
        omc_pipeline_edge e;
        omc_pipeline_config_edge(cfg, i, &e);
        DUMP("edge %d->%d %s %d %d declared %u\n", e.from_stage, e.to_stage, e.connector_name, (int)e.type, (int)e.transport, e.declared);
    }
    for (i = 0; i < omc_pipeline_config_port_count(cfg); i++) {
        omc_port_use u;
        omc_pipeline_config_port(cfg, i, &u);
        DUMP("port %u %s edge %u %d->%d purpose %d dp %u tp %u orch %d\n", u.port, u.host, u.edge, u.from_stage, u.to_stage,
             (int)u.purpose, u.dp_index, u.tp_rank, u.orchestrator);
    }
#undef DUMP
}

/* A log hook that counts configuration warnings and errors. */
typedef struct log_count { int warnings, errors; char last[512]; } log_count;
static void count_log(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    log_count* lc = (log_count*)user;
    (void)file; (void)line;
    if (item != OMC_LOGITEM_CONFIG) return;
    if (level == OMC_LOG_WARN) lc->warnings++;
    if (level == OMC_LOG_ERROR) lc->errors++;
    snprintf(lc->last, sizeof(lc->last), "%s", msg);
}

/* ---- configuration: vLLM-Omni's example -------------------------------------------------------- */

OMC_TEST(config_seed_example) {
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    omc_pipeline_stage s;
    omc_pipeline_edge e;
    omc_connector_spec c;
    omc_port_use u;
    omc_result r = load_file("seed_mooncake.yaml", &cfg, &err);
    if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    REQUIRE(r == OMC_OK && cfg);
    CHECK_EQ(omc_pipeline_config_warning_count(cfg), 0);
    CHECK_EQ(omc_pipeline_config_stage_count(cfg), 2);
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 0, &s));
    CHECK_EQ(s.role, OMC_ROLE_SENDER);
    CHECK_EQ(s.outbound, 1);
    CHECK_EQ(s.inbound, 0);
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 1, &s));
    CHECK_EQ(s.role, OMC_ROLE_RECEIVER);
    CHECK_RES(omc_pipeline_config_find_stage(cfg, 2, &s), OMC_ERR_NOT_FOUND);

    CHECK_EQ(omc_pipeline_config_edge_count(cfg), 1);
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 0, 1, &e));
    CHECK(strcmp(e.connector_name, "rdma_connector") == 0);
    CHECK_EQ(e.type, OMC_CONNECTOR_MOONCAKE);
    CHECK_EQ(e.transport, OMC_TRANSPORT_RDMA);
    CHECK_EQ(e.declared, OMC_EDGE_DECLARED_BY_SENDER | OMC_EDGE_DECLARED_BY_RECEIVER);
    CHECK_EQ(e.line, 18);           /* to_stage_1: its first mention */
    CHECK_EQ(e.column, 7);
    CHECK_EQ(omc_pipeline_edge_role(&e, 0), OMC_ROLE_SENDER);
    CHECK_EQ(omc_pipeline_edge_role(&e, 1), OMC_ROLE_RECEIVER);
    CHECK_EQ(omc_pipeline_edge_role(&e, 7), OMC_ROLE_DEFAULT);
    CHECK_RES(omc_pipeline_config_find_edge(cfg, 1, 0, &e), OMC_ERR_NOT_FOUND);

    CHECK_EQ(omc_pipeline_config_connector_count(cfg), 1);
    CHECK_OK(omc_pipeline_config_connector(cfg, 0, &c));
    CHECK(strcmp(c.name, "rdma_connector") == 0);
    CHECK(strcmp(c.type_name, "MooncakeTransferEngineConnector") == 0);
    CHECK(strcmp(c.host, "auto") == 0);
    CHECK_EQ(c.zmq_port, 50051);
    CHECK(strcmp(c.protocol, "rdma") == 0);
    CHECK(strcmp(c.device_name, "") == 0);
    CHECK_EQ(c.memory_pool_size, 4294967296ull);
    CHECK_EQ(c.memory_pool_device, OMC_MEMORY_HOST);
    CHECK_EQ(c.shm_threshold_bytes, 65536);
    CHECK_EQ(c.auto_filled, 0);
    CHECK_EQ(c.line, 5);
    CHECK_EQ(c.column, 5);

#if OMC__PIPELINE_PORTS
    /* one TCP/RDMA edge from stage 0, TP = DP = 1: request forwarding, kv transfer, orchestrator */
    CHECK_EQ(omc_pipeline_config_port_count(cfg), 3);
    CHECK_OK(omc_pipeline_config_port(cfg, 0, &u));
    CHECK_EQ(u.port, 50051);
    CHECK_EQ(u.purpose, OMC_PORT_REQUEST_FORWARDING);
    CHECK_OK(omc_pipeline_config_port(cfg, 1, &u));
    CHECK_EQ(u.port, 50151);
    CHECK_EQ(u.purpose, OMC_PORT_KV_TRANSFER);
    CHECK_OK(omc_pipeline_config_port(cfg, 2, &u));
    CHECK_EQ(u.port, 50251);
    CHECK_EQ(u.orchestrator, 1);
    CHECK_RES(omc_pipeline_config_port(cfg, 3, &u), OMC_ERR_NOT_FOUND);
#else
    CHECK_EQ(omc_pipeline_config_port_count(cfg), 0);
    (void)u;
    printf("NOTE port tests skipped: %s\n", OMC__HAS_ZMQ ? "the remote connector's omc_port_compute is not declared (yet)" : "built without ZMQ");
#endif
    omc_pipeline_config_destroy(cfg);
}

/* Only seed 001's connector block: a pipeline config needs stages. */
OMC_TEST(config_seed_shm_snippet_alone_is_incomplete) {
    omc_pipeline_config* cfg = (omc_pipeline_config*)1;
    omc_config_diag err;
    CHECK_RES(load_file("bad_no_stages.yaml", &cfg, &err), OMC_ERR_INVALID_ARG);
    CHECK(cfg == NULL);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_MISSING);
    CHECK(strstr(err.message, "stage_args") != NULL);
}

OMC_TEST(config_yaml_and_json_resolve_the_same) {
    static const char* pairs[][2] = { { "seed_mooncake.yaml", "seed_mooncake.json" }, { "three_stage.yaml", "three_stage.json" } };
    static char a[16384], b[16384];
    size_t i;
    for (i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        omc_pipeline_config *ya = NULL, *js = NULL;
        omc_config_diag err;
        omc_result r = load_file(pairs[i][0], &ya, &err);
        if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
        CHECK_OK(r);
        r = load_file(pairs[i][1], &js, &err);
        if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
        CHECK_OK(r);
        if (ya && js) {
            dump_config(ya, a, sizeof(a));
            dump_config(js, b, sizeof(b));
            CHECK(strlen(a) > 100);
            if (strcmp(a, b) != 0) { CHECK(strcmp(a, b) == 0); fprintf(stderr, "  YAML:\n%s  JSON:\n%s", a, b); }
        }
        omc_pipeline_config_destroy(ya);
        omc_pipeline_config_destroy(js);
    }
}

OMC_TEST(config_three_stage_resolution) {
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    omc_pipeline_stage s;
    omc_pipeline_edge e;
    omc_connector_spec c;
    omc_config_value v;
    omc_result r = load_file("three_stage.yaml", &cfg, &err);
    if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    REQUIRE(r == OMC_OK);
    CHECK_EQ(omc_pipeline_config_warning_count(cfg), 0);
    CHECK_EQ(omc_pipeline_config_stage_count(cfg), 4);
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 0, &s)); CHECK_EQ(s.role, OMC_ROLE_SENDER); CHECK_EQ(s.tp_size, 2); CHECK_EQ(s.dp_size, 1);
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 1, &s)); CHECK_EQ(s.role, OMC_ROLE_DUAL);
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 2, &s)); CHECK_EQ(s.role, OMC_ROLE_DUAL);
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 3, &s)); CHECK_EQ(s.role, OMC_ROLE_RECEIVER);
    CHECK_EQ(omc_pipeline_config_edge_count(cfg), 3);

    /* 1 -> 2: declared by the talker only; both ends use tcp_connector (Mooncake over tcp) */
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 1, 2, &e));
    CHECK(strcmp(e.connector_name, "tcp_connector") == 0);
    CHECK_EQ(e.declared, OMC_EDGE_DECLARED_BY_SENDER);
    CHECK_EQ(e.transport, OMC_TRANSPORT_TCP);
    CHECK_OK(omc_pipeline_config_connector(cfg, e.connector, &c));
    CHECK_EQ(c.memory_pool_device, OMC_MEMORY_CUDA);
    CHECK_EQ(c.memory_pool_size, 2147483648ull);        /* the cuda default */
    CHECK_EQ(c.zmq_port, 52000);

    /* 2 -> 3: an inline spec */
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 2, 3, &e));
    CHECK(strcmp(e.connector_name, "stage2.to_stage_3") == 0);
    CHECK_EQ(e.type, OMC_CONNECTOR_SHM);
    CHECK_EQ(e.transport, OMC_TRANSPORT_SHM);
    CHECK_OK(omc_pipeline_config_connector(cfg, e.connector, &c));
    CHECK_EQ(c.shm_threshold_bytes, 0);

    /* the raw extra values, typed as written */
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 0, 1, &e));
    CHECK_OK(omc_pipeline_connector_option(cfg, e.connector, "device_name", &v));
    CHECK_EQ(v.kind, OMC_CONFIG_STRING);
    CHECK(strcmp(v.string, "mlx5_0,mlx5_1") == 0);
    CHECK_OK(omc_pipeline_connector_option(cfg, e.connector, "zmq_port", &v));
    CHECK_EQ(v.kind, OMC_CONFIG_INT);
    CHECK_EQ(v.integer, 50051);
    CHECK_EQ(v.line, 8);
    CHECK_RES(omc_pipeline_connector_option(cfg, e.connector, "memory_pool_size", &v), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_pipeline_connector_option(cfg, 99, "host", &v), OMC_ERR_NOT_FOUND);
    omc_pipeline_config_destroy(cfg);
}

OMC_TEST(config_shm_autofill) {
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    omc_pipeline_edge e;
    omc_connector_spec c;
    omc_pipeline_stage s;
    omc_result r = load_file("seed_shm.yaml", &cfg, &err);
    if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    REQUIRE(r == OMC_OK);
    CHECK_EQ(omc_pipeline_config_edge_count(cfg), 3);
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 0, 1, &e));
    CHECK(strcmp(e.connector_name, "connector_of_shared_memory") == 0);
    CHECK_EQ(e.declared, OMC_EDGE_DECLARED_BY_SENDER);
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 0, 2, &e));     /* named with a null reference */
    CHECK(strcmp(e.connector_name, "auto_shm") == 0);
    CHECK_EQ(e.declared, OMC_EDGE_DECLARED_BY_SENDER);
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 1, 2, &e));     /* engine_input_source only */
    CHECK(strcmp(e.connector_name, "auto_shm") == 0);
    CHECK_EQ(e.declared, 0);
    CHECK_EQ(e.transport, OMC_TRANSPORT_SHM);
    CHECK_OK(omc_pipeline_config_connector(cfg, e.connector, &c));
    CHECK_EQ(c.auto_filled, 1);
    CHECK_EQ(c.type, OMC_CONNECTOR_SHM);
    CHECK_EQ(c.shm_threshold_bytes, 65536);
    CHECK_EQ(c.line, 0);
    CHECK_EQ(omc_pipeline_config_connector_count(cfg), 2);     /* one auto_shm for every such edge */
    CHECK_EQ(omc_pipeline_config_port_count(cfg), 0);          /* shared memory needs no ports */
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 1, &s));
    CHECK_EQ(s.role, OMC_ROLE_DUAL);
    CHECK_OK(omc_pipeline_config_find_stage(cfg, 2, &s));
    CHECK_EQ(s.role, OMC_ROLE_RECEIVER);
    CHECK_EQ(s.inbound, 2);
    omc_pipeline_config_destroy(cfg);
}

/* ---- configuration: broken files --------------------------------------------------------------- */

OMC_TEST(config_broken_files_name_the_error_and_position) {
    static const struct { const char* file; omc_config_code code; omc_result result; uint32_t line, col; const char* says; } cases[] = {
        { "bad_type_mismatch.yaml",     OMC_CONFIG_ERR_TYPE_MISMATCH,     OMC_ERR_INVALID_ARG, 13, 21, "both ends" },
        { "bad_unknown_connector.yaml", OMC_CONFIG_ERR_UNKNOWN_CONNECTOR, OMC_ERR_NOT_FOUND,    8, 19, "rdma_conector" },
        { "bad_unknown_stage.yaml",     OMC_CONFIG_ERR_UNKNOWN_STAGE,     OMC_ERR_NOT_FOUND,    7,  7, "stage 2" },
        { "bad_indent.yaml",            OMC_CONFIG_ERR_SYNTAX,            OMC_ERR_MALFORMED,    5,  6, "indentation" },
        { "bad_trailing_comma.json",    OMC_CONFIG_ERR_SYNTAX,            OMC_ERR_MALFORMED,    4,  3, "trailing comma" },
        { "bad_port_type.yaml",         OMC_CONFIG_ERR_TYPE,              OMC_ERR_TYPE,         6, 19, "zmq_port" },
        { "bad_protocol.yaml",          OMC_CONFIG_ERR_VALUE,             OMC_ERR_INVALID_ARG,  6, 19, "\"rdma\" or \"tcp\"" },
        { "bad_duplicate_stage.yaml",   OMC_CONFIG_ERR_DUPLICATE_STAGE,   OMC_ERR_INVALID_ARG,  4, 15, "line 2:15" },
        { "bad_duplicate_key.yaml",     OMC_CONFIG_ERR_DUPLICATE_KEY,     OMC_ERR_MALFORMED,    4,  1, "runtime" },
        { "bad_edge_key.yaml",          OMC_CONFIG_ERR_BAD_EDGE,          OMC_ERR_INVALID_ARG,  4,  7, "to_stage_one" },
        { "bad_self_edge.yaml",         OMC_CONFIG_ERR_BAD_EDGE,          OMC_ERR_INVALID_ARG,  4,  7, "itself" },
        { "bad_unknown_type.yaml",      OMC_CONFIG_ERR_UNKNOWN_TYPE,      OMC_ERR_NOT_FOUND,    4, 13, "NixlConnector" },
        { "bad_tab.yaml",               OMC_CONFIG_ERR_SYNTAX,            OMC_ERR_MALFORMED,    2,  1, "tab" },
        { "bad_anchor.yaml",            OMC_CONFIG_ERR_UNSUPPORTED,       OMC_ERR_MALFORMED,    3, 11, "anchors" },
        { "bad_port_range.yaml",        OMC_CONFIG_ERR_PORT_RANGE,        OMC_ERR_TOO_LARGE,    8, 25, "65600" },
        { "bad_collision_tp.yaml",      OMC_CONFIG_ERR_PORT_COLLISION,    OMC_ERR_INVALID_ARG, 11, 25, "port 50052" },
        { "bad_collision_base.yaml",    OMC_CONFIG_ERR_PORT_COLLISION,    OMC_ERR_INVALID_ARG, 10, 25, "port 50051" },
        { "bad_no_stages.yaml",         OMC_CONFIG_ERR_MISSING,           OMC_ERR_INVALID_ARG,  1,  1, "stage_args" },
    };
    size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        omc_pipeline_config* cfg = NULL;
        omc_config_diag err;
        char prefix[1200];
        omc_result r;
        if (!OMC__PIPELINE_PORTS && (cases[i].code == OMC_CONFIG_ERR_PORT_RANGE || cases[i].code == OMC_CONFIG_ERR_PORT_COLLISION)) continue;
        r = load_file(cases[i].file, &cfg, &err);
        int bad = r != cases[i].result || err.code != cases[i].code || err.line != cases[i].line || err.column != cases[i].col ||
                  !strstr(err.message, cases[i].says) || cfg != NULL || err.result != r;
        snprintf(prefix, sizeof(prefix), "%s:%u:%u: ", data_path(cases[i].file), cases[i].line, cases[i].col);
        if (strncmp(err.message, prefix, strlen(prefix)) != 0) bad = 1;
        if (bad) {
            OMC_TEST_FAIL();
            fprintf(stderr, "  %s: got %s %s at %u:%u \"%s\"; expected %s at %u:%u mentioning \"%s\"\n", cases[i].file, omc_result_name(r),
                    omc_config_code_name(err.code), err.line, err.column, err.message, omc_config_code_name(cases[i].code),
                    cases[i].line, cases[i].col, cases[i].says);
        }
        omc_pipeline_config_destroy(cfg);
    }
}

/* Broken text: every parser and resolver check, with the position it must report. */
OMC_TEST(config_broken_text) {
    static const struct { const char* text; omc_config_code code; uint32_t line, col; } cases[] = {
        { "stage_args: []\n---\nstage_args: []\n", OMC_CONFIG_ERR_UNSUPPORTED, 2, 1 },
        { "%YAML 1.2\n---\nstage_args: []\n", OMC_CONFIG_ERR_UNSUPPORTED, 1, 1 },
        { "stage_args:\n  - stage_id: |\n      0\n", OMC_CONFIG_ERR_UNSUPPORTED, 2, 15 },
        { "stage_args: [ {stage_id: *x} ]\n", OMC_CONFIG_ERR_UNSUPPORTED, 1, 26 },
        { "stage_args: [\n  {stage_id: 0},\n", OMC_CONFIG_ERR_SYNTAX, 1, 13 },
        { "stage_args: [a, b}\n", OMC_CONFIG_ERR_SYNTAX, 1, 18 },
        { "stage_args: 'abc\n", OMC_CONFIG_ERR_SYNTAX, 1, 13 },
        { "stage_args: \"a\\qb\"\n", OMC_CONFIG_ERR_SYNTAX, 1, 15 },
        { "stage_args: \"\\ud800\"\n", OMC_CONFIG_ERR_SYNTAX, 1, 14 },
        { "stage_args: 99999999999999999999\n", OMC_CONFIG_ERR_VALUE, 1, 13 },
        { "a: b: c\n", OMC_CONFIG_ERR_SYNTAX, 1, 5 },
        { "key: - a\n", OMC_CONFIG_ERR_SYNTAX, 1, 6 },
        { "stage_args:\n  - a\n  b: 1\n", OMC_CONFIG_ERR_SYNTAX, 3, 3 },
        { "stage_args:\n- stage_id: 0\n  extra: 1\n   more: 2\n", OMC_CONFIG_ERR_SYNTAX, 4, 4 },
        { "x: \"a\"b\n", OMC_CONFIG_ERR_SYNTAX, 1, 7 },
        { "x: 1 #ok\ny: 2#not a comment\nstage_args: []\nz: [a]x\n", OMC_CONFIG_ERR_SYNTAX, 4, 7 },
        { "{stage_args: []}", OMC_CONFIG_ERR_SYNTAX, 1, 2 },                          /* JSON: keys are quoted */
        { "{\"stage_args\": []} x", OMC_CONFIG_ERR_SYNTAX, 1, 20 },
        { "{\"stage_args\": [tru]}", OMC_CONFIG_ERR_SYNTAX, 1, 17 },
        { "{\"stage_args\": [01]}", OMC_CONFIG_ERR_SYNTAX, 1, 18 },
        { "{\"stage_args\": [1.]}", OMC_CONFIG_ERR_SYNTAX, 1, 19 },
        { "{\"a\": 1, \"a\": 2}", OMC_CONFIG_ERR_DUPLICATE_KEY, 1, 10 },
        { "[1, 2]", OMC_CONFIG_ERR_TYPE, 1, 1 },
        { "", OMC_CONFIG_ERR_MISSING, 0, 0 },
        { "# only a comment\n", OMC_CONFIG_ERR_MISSING, 0, 0 },
        { "stage_args: {}\n", OMC_CONFIG_ERR_TYPE, 1, 13 },
        { "stage_args:\n  - 0\n", OMC_CONFIG_ERR_TYPE, 2, 5 },
        { "stage_args:\n  - input_connectors: {}\n", OMC_CONFIG_ERR_MISSING, 2, 5 },
        { "stage_args:\n  - stage_id: -1\n", OMC_CONFIG_ERR_VALUE, 2, 15 },
        { "stage_args:\n  - stage_id: 1.5\n", OMC_CONFIG_ERR_TYPE, 2, 15 },
        { "stage_args:\n  - {stage_id: 0, engine_input_source: [4]}\n", OMC_CONFIG_ERR_UNKNOWN_STAGE, 2, 41 },
        { "stage_args:\n  - {stage_id: 0, engine_input_source: 0}\n", OMC_CONFIG_ERR_BAD_EDGE, 2, 40 },
        { "runtime:\n  edges:\n    - {from: 0}\nstage_args: [{stage_id: 0}]\n", OMC_CONFIG_ERR_MISSING, 3, 7 },
        { "runtime:\n  connectors:\n    x: SharedMemoryConnector\nstage_args: []\n", OMC_CONFIG_ERR_TYPE, 3, 8 },
        { "runtime:\n  connectors:\n    x: {extra: {}}\nstage_args: []\n", OMC_CONFIG_ERR_MISSING, 3, 5 },
        { "runtime:\n  connectors:\n    x: {name: TcpConnector, extra: {protocol: rdma}}\nstage_args: []\n", OMC_CONFIG_ERR_VALUE, 3, 47 },
        { "runtime:\n  connectors:\n    x: {name: shm, extra: {memory_pool_device: gpu}}\nstage_args: []\n", OMC_CONFIG_ERR_VALUE, 3, 48 },
        { "runtime:\n  connectors:\n    x: {name: shm, extra: {zmq_port: 0}}\nstage_args: []\n", OMC_CONFIG_ERR_VALUE, 3, 38 },
        { "runtime:\n  connectors:\n    x: {name: shm, extra: {host: \"\"}}\nstage_args: []\n", OMC_CONFIG_ERR_VALUE, 3, 34 },
        { "runtime:\n  connectors:\n    x: {name: shm, extra: [1]}\nstage_args: []\n", OMC_CONFIG_ERR_TYPE, 3, 27 },
        { "stage_args:\n  - stage_id: 0\n    output_connectors: {to_stage_1: 7}\n  - stage_id: 1\n", OMC_CONFIG_ERR_TYPE, 3, 37 },
        { "stage_args:\n  - stage_id: 0\n    input_connectors: {to_stage_1: ~}\n", OMC_CONFIG_ERR_BAD_EDGE, 3, 24 },
        { "stage_args:\n  - stage_id: 0\n    output_connectors: {to_stage_99999: ~}\n", OMC_CONFIG_ERR_BAD_EDGE, 3, 25 },
        { "stage_args: []\nstages: []\n", OMC_CONFIG_ERR_VALUE, 2, 1 },
        { "runtime: {connectors: {}}\nconnectors: {}\nstage_args: []\n", OMC_CONFIG_ERR_VALUE, 2, 1 },
        { "stage_args:\n  - {stage_id: 0, engine_args: {tensor_parallel_size: 0}}\n", OMC_CONFIG_ERR_VALUE, 2, 55 },
        { "stage_args:\n  - {stage_id: 0, engine_args: 3}\n", OMC_CONFIG_ERR_TYPE, 2, 32 },
        /* an inline spec belongs to its edge: nobody else can name it */
        { "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: {name: shm}}}\n"
          "  - {stage_id: 1, output_connectors: {to_stage_2: stage0.to_stage_1}}\n  - {stage_id: 2}\n", OMC_CONFIG_ERR_UNKNOWN_CONNECTOR, 3, 51 },
    };
    size_t i;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        omc_pipeline_config* cfg = NULL;
        omc_config_diag err;
        omc_result r = load_text(cases[i].text, &cfg, &err);
        if (r == OMC_OK || err.code != cases[i].code || err.line != cases[i].line || err.column != cases[i].col || cfg) {
            OMC_TEST_FAIL();
            fprintf(stderr, "  case %u: got %s at %u:%u \"%s\"; expected %s at %u:%u\n", (unsigned)i, omc_config_code_name(err.code),
                    err.line, err.column, err.message, omc_config_code_name(cases[i].code), cases[i].line, cases[i].col);
        }
        omc_pipeline_config_destroy(cfg);
    }
}

OMC_TEST(config_nul_bytes_depth_and_size_limits) {
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    static char deep[1000];
    static const char with_nul[] = "stage_args:\n  - stage_id: 0\x00\n";
    int i;
    CHECK_RES(omc_pipeline_config_load_string(with_nul, sizeof(with_nul) - 1, NULL, &cfg, &err), OMC_ERR_MALFORMED);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_SYNTAX);
    CHECK_EQ(err.line, 2);
    CHECK_EQ(err.column, 16);
    CHECK(strstr(err.message, "<string>:2:16: ") == err.message);
    for (i = 0; i < 200; i++) deep[i] = '[';
    deep[200] = '\0';
    CHECK_RES(load_text(deep, &cfg, &err), OMC_ERR_TOO_LARGE);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_LIMIT);
    for (i = 0; i < 200; i++) { deep[2 * i] = '-'; deep[2 * i + 1] = ' '; }
    deep[400] = '1';
    deep[401] = '\0';
    CHECK_RES(load_text(deep, &cfg, &err), OMC_ERR_TOO_LARGE);     /* "- - - - ... 1" */
    CHECK_EQ(err.code, OMC_CONFIG_ERR_LIMIT);
    CHECK_RES(omc_pipeline_config_load_string("x", (size_t)OMNICONN_PIPELINE_MAX_CONFIG_BYTES + 1, NULL, &cfg, &err), OMC_ERR_TOO_LARGE);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_LIMIT);
    CHECK_RES(omc_pipeline_config_load_string(NULL, 3, NULL, &cfg, &err), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_pipeline_config_load_string("a", 1, NULL, NULL, &err), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_pipeline_config_load_file("/nonexistent/omniconn.yaml", NULL, &cfg, &err), OMC_ERR_SYSTEM);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_IO);
    CHECK(strstr(err.message, "/nonexistent/omniconn.yaml: cannot open") == err.message);
    CHECK(cfg == NULL);
    CHECK_RES(omc_pipeline_config_load_file(NULL, NULL, &cfg, NULL), OMC_ERR_INVALID_ARG);   /* error may be NULL */
}

/* ---- configuration: the YAML subset and JSON, value by value ----------------------------------- */

OMC_TEST(config_scalars_and_flow_style) {
    /* every scalar form, in the extra mapping of one connector, read back through the option getter;
       CRLF line ends, a BOM, document markers, comments, flow collections over several lines */
    static const char text[] =
        "\xEF\xBB\xBF--- # start\r\n"
        "runtime:\r\n"
        "  connectors:\r\n"
        "    c:\r\n"
        "      name: \"LocalConnector\"   # a comment\r\n"
        "      extra:\r\n"
        "        i: -42\r\n"
        "        h: 0x1F\r\n"
        "        o: 0o17\r\n"
        "        f: 1.5e3\r\n"
        "        g: -.inf\r\n"
        "        nan: .nan\r\n"
        "        t: True\r\n"
        "        n1: ~\r\n"
        "        n2:\r\n"
        "        s1: 'it''s'\r\n"
        "        s2: \"tab\\there \\u00e9 \\x41 \\U0001F600\"\r\n"
        "        s3: a#b  # a plain scalar may hold '#' when no blank precedes it\r\n"
        "        s4: http://host:80/x\r\n"
        "        s5: \"123\"\r\n"
        "        s6: -x\r\n"
        "        seq:\r\n"
        "        - 1\r\n"
        "        - [a, 'b', {k: v}]\r\n"
        "        fm: {a: 1, b: [2, 3,\r\n"
        "              4], c}\r\n"
        "        empty_map: {}\r\n"
        "        empty_seq: []\r\n"
        "stage_args: []\r\n"
        "...\r\n";
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    omc_config_value v;
    omc_result r = load_text(text, &cfg, &err);
    if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    REQUIRE(r == OMC_OK);
    CHECK_EQ(omc_pipeline_config_warning_count(cfg), 19);      /* every option here is unknown to omniconn */
#define OPT(k) (memset(&v, 0, sizeof(v)), omc_pipeline_connector_option(cfg, 0, (k), &v))
    CHECK_OK(OPT("i")); CHECK_EQ(v.kind, OMC_CONFIG_INT); CHECK_EQ(v.integer, -42); CHECK_EQ(v.line, 7); CHECK_EQ(v.column, 12);
    CHECK_OK(OPT("h")); CHECK_EQ(v.integer, 31);
    CHECK_OK(OPT("o")); CHECK_EQ(v.integer, 15);
    CHECK_OK(OPT("f")); CHECK_EQ(v.kind, OMC_CONFIG_FLOAT); CHECK(v.number == 1500.0);
    CHECK_OK(OPT("g")); CHECK_EQ(v.kind, OMC_CONFIG_FLOAT); CHECK(v.number < 0 && isinf(v.number));
    CHECK_OK(OPT("nan")); CHECK(isnan(v.number));
    CHECK_OK(OPT("t")); CHECK_EQ(v.kind, OMC_CONFIG_BOOL); CHECK_EQ(v.boolean, 1);
    CHECK_OK(OPT("n1")); CHECK_EQ(v.kind, OMC_CONFIG_NULL);
    CHECK_OK(OPT("n2")); CHECK_EQ(v.kind, OMC_CONFIG_NULL);
    CHECK_OK(OPT("s1")); CHECK(v.string && strcmp(v.string, "it's") == 0);
    CHECK_OK(OPT("s2")); CHECK(v.string && strcmp(v.string, "tab\there \xC3\xA9 A \xF0\x9F\x98\x80") == 0);
    CHECK_OK(OPT("s3")); CHECK(v.string && strcmp(v.string, "a#b") == 0);
    CHECK_OK(OPT("s4")); CHECK(v.string && strcmp(v.string, "http://host:80/x") == 0);
    CHECK_OK(OPT("s5")); CHECK_EQ(v.kind, OMC_CONFIG_STRING); CHECK(strcmp(v.string, "123") == 0);
    CHECK_OK(OPT("s6")); CHECK(v.string && strcmp(v.string, "-x") == 0);
    CHECK_OK(OPT("seq")); CHECK_EQ(v.kind, OMC_CONFIG_SEQUENCE); CHECK_EQ(v.length, 2);
    CHECK_OK(OPT("fm")); CHECK_EQ(v.kind, OMC_CONFIG_MAPPING); CHECK_EQ(v.length, 3);
    CHECK_OK(OPT("empty_map")); CHECK_EQ(v.kind, OMC_CONFIG_MAPPING); CHECK_EQ(v.length, 0);
    CHECK_OK(OPT("empty_seq")); CHECK_EQ(v.kind, OMC_CONFIG_SEQUENCE); CHECK_EQ(v.length, 0);
#undef OPT
    omc_pipeline_config_destroy(cfg);
}

/* "s3: plain text with: colon-free" has ": " inside a plain value: YAML rejects that. */
OMC_TEST(config_plain_value_with_colon_space_is_an_error) {
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    CHECK_RES(load_text("x: plain text with: colon\nstage_args: []\n", &cfg, &err), OMC_ERR_MALFORMED);
    CHECK_EQ(err.line, 1);
    CHECK_EQ(err.column, 19);
    CHECK(strstr(err.message, "quote") != NULL);
}

OMC_TEST(config_json_strings_and_numbers) {
    static const char text[] =
        "{\"stage_args\": [], \"runtime\": {\"connectors\": {\"c\": {\"name\": \"shm\", \"extra\": {"
        "\"e\": \"\\ud83d\\ude00 \\\" \\\\ \\/ \\b\\f\\n\\r\\t\", \"big\": -9223372036854775808, \"f\": -0.5e-2,"
        " \"z\": 0, \"t\": true, \"n\": null, \"a\": [[], {}]}}}}}";
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    omc_config_value v;
    omc_result r = load_text(text, &cfg, &err);
    if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    REQUIRE(r == OMC_OK);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "e", &v));
    CHECK(strcmp(v.string, "\xF0\x9F\x98\x80 \" \\ / \b\f\n\r\t") == 0);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "big", &v));
    CHECK(v.integer == INT64_MIN);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "f", &v));
    CHECK_EQ(v.kind, OMC_CONFIG_FLOAT);
    CHECK(v.number == -0.005);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "z", &v)); CHECK_EQ(v.kind, OMC_CONFIG_INT);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "t", &v)); CHECK_EQ(v.kind, OMC_CONFIG_BOOL);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "n", &v)); CHECK_EQ(v.kind, OMC_CONFIG_NULL);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "a", &v)); CHECK_EQ(v.length, 2);
    omc_pipeline_config_destroy(cfg);
    /* the same file forced through the YAML reader (JSON is YAML flow style) */
    {
        omc_pipeline_config_desc d;
        memset(&d, 0, sizeof(d));
        d.format = OMC_CONFIG_FORMAT_YAML;
        r = omc_pipeline_config_load_string(text, strlen(text), &d, &cfg, &err);
        if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
        CHECK_OK(r);
        CHECK_OK(omc_pipeline_connector_option(cfg, 0, "e", &v));
        CHECK(v.string && strcmp(v.string, "\xF0\x9F\x98\x80 \" \\ / \b\f\n\r\t") == 0);
        omc_pipeline_config_destroy(cfg);
    }
}

/* ---- configuration: warnings -------------------------------------------------------------------- */

OMC_TEST(config_unknown_keys_warn_and_load) {
    omc_pipeline_config* cfg = NULL;
    omc_pipeline_config_desc d;
    omc_config_diag err, w;
    omc_config_value v;
    log_count lc;
    omc_result r;
    memset(&d, 0, sizeof(d));
    memset(&lc, 0, sizeof(lc));
    d.hooks.log_fn = count_log;
    d.hooks.user_data = &lc;
    r = omc_pipeline_config_load_file(data_path("warn_keys.yaml"), &d, &cfg, &err);
    if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    REQUIRE(r == OMC_OK);
    CHECK_EQ(omc_pipeline_config_warning_count(cfg), 3);
    CHECK_EQ(lc.warnings, 3);
    CHECK_EQ(lc.errors, 0);
    CHECK_OK(omc_pipeline_config_warning(cfg, 0, &w));
    CHECK_EQ(w.code, OMC_CONFIG_WARN_UNKNOWN_KEY); CHECK_EQ(w.line, 15); CHECK_EQ(w.column, 1); CHECK_EQ(w.result, OMC_OK);
    CHECK(strstr(w.message, "colour") != NULL);
    CHECK_OK(omc_pipeline_config_warning(cfg, 1, &w));
    CHECK_EQ(w.code, OMC_CONFIG_WARN_IGNORED_KEY); CHECK_EQ(w.line, 7); CHECK_EQ(w.column, 9);
    CHECK_OK(omc_pipeline_config_warning(cfg, 2, &w));
    CHECK_EQ(w.code, OMC_CONFIG_WARN_UNKNOWN_KEY); CHECK_EQ(w.line, 9); CHECK(strstr(w.message, "pool_flavour") != NULL);
    CHECK_RES(omc_pipeline_config_warning(cfg, 3, &w), OMC_ERR_NOT_FOUND);
    CHECK_OK(omc_pipeline_connector_option(cfg, 0, "pool_flavour", &v));   /* kept for the transport */
    CHECK(strcmp(v.string, "vanilla") == 0);
    omc_pipeline_config_destroy(cfg);

    /* an error is logged once, at ERROR */
    memset(&lc, 0, sizeof(lc));
    r = omc_pipeline_config_load_file(data_path("bad_type_mismatch.yaml"), &d, &cfg, &err);
    CHECK_RES(r, OMC_ERR_INVALID_ARG);
    CHECK_EQ(lc.errors, 1);
    CHECK(strcmp(lc.last, err.message) == 0);
}

OMC_TEST(config_same_type_different_names_warns_and_sender_wins) {
    static const char text[] =
        "runtime:\n"
        "  connectors:\n"
        "    a: {name: MooncakeTransferEngineConnector, extra: {zmq_port: 40000}}\n"
        "    b: {name: MooncakeTransferEngineConnector, extra: {zmq_port: 41000}}\n"
        "stage_args:\n"
        "  - {stage_id: 0, output_connectors: {to_stage_1: a}}\n"
        "  - {stage_id: 1, input_connectors: {from_stage_0: b}}\n";
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err, w;
    omc_pipeline_edge e;
    REQUIRE(load_text(text, &cfg, &err) == OMC_OK);
    CHECK_EQ(omc_pipeline_config_warning_count(cfg), 1);
    CHECK_OK(omc_pipeline_config_warning(cfg, 0, &w));
    CHECK_EQ(w.code, OMC_CONFIG_WARN_CONNECTOR_CONFLICT);
    CHECK_EQ(w.line, 7);
    CHECK_OK(omc_pipeline_config_find_edge(cfg, 0, 1, &e));
    CHECK(strcmp(e.connector_name, "a") == 0);
    omc_pipeline_config_destroy(cfg);
    /* the same type over two protocols is a mismatch: they cannot talk */
    {
        static const char t2[] =
            "runtime:\n"
            "  connectors:\n"
            "    a: {name: MooncakeTransferEngineConnector}\n"
            "    b: {name: MooncakeTransferEngineConnector, extra: {protocol: tcp}}\n"
            "stage_args:\n"
            "  - {stage_id: 1, input_connectors: {from_stage_0: b}}\n"
            "  - {stage_id: 0, output_connectors: {to_stage_1: a}}\n";
        CHECK_RES(load_text(t2, &cfg, &err), OMC_ERR_INVALID_ARG);
        CHECK_EQ(err.code, OMC_CONFIG_ERR_TYPE_MISMATCH);
        CHECK_EQ(err.line, 7);
        CHECK(strstr(err.message, "protocol rdma") && strstr(err.message, "protocol tcp") && strstr(err.message, "line 6:52"));
    }
}

/* The loader allocates only through the hooks, frees all of it, and survives every allocation
   failing (each load either succeeds or says OMC_ERR_NO_MEMORY). */
typedef struct alloc_hooks { long live, calls, fail_after; } alloc_hooks;
static void* counting_alloc(size_t n, void* user) {
    alloc_hooks* h = (alloc_hooks*)user;
    if (h->fail_after >= 0 && h->calls >= h->fail_after) return NULL;
    h->calls++;
    h->live++;
    return malloc(n);
}
static void counting_free(void* p, void* user) { ((alloc_hooks*)user)->live--; free(p); }

OMC_TEST(config_allocations_go_through_hooks_and_fail_cleanly) {
    omc_pipeline_config_desc d;
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    alloc_hooks h;
    long n;
    int succeeded = 0;
    memset(&d, 0, sizeof(d));
    memset(&h, 0, sizeof(h));
    h.fail_after = -1;
    d.hooks.alloc_fn = counting_alloc;
    d.hooks.free_fn = counting_free;
    d.hooks.user_data = &h;
    REQUIRE(omc_pipeline_config_load_file(data_path("three_stage.yaml"), &d, &cfg, &err) == OMC_OK);
    CHECK(h.live > 0);
    omc_pipeline_config_destroy(cfg);
    CHECK_EQ(h.live, 0);
    for (n = 0; n < 400 && !succeeded; n++) {
        omc_result r;
        h.calls = 0;
        h.fail_after = n;
        r = omc_pipeline_config_load_file(data_path("three_stage.yaml"), &d, &cfg, &err);
        if (r == OMC_OK) { succeeded = 1; omc_pipeline_config_destroy(cfg); }
        else CHECK_RES(r, OMC_ERR_NO_MEMORY);
        CHECK_EQ(h.live, 0);
    }
    CHECK(succeeded);
}

/* ---- ports ------------------------------------------------------------------------------------- */

#if OMC__PIPELINE_PORTS     /* ports come from the remote connector's omc_port_compute */
/* vLLM-Omni's table through omc_port_compute (the function the loader uses). */
OMC_TEST(ports_seed_table) {
    /* base 50051, stage 0 -> 1, DP = 2, TP = 2, kv_transfer */
    static const struct { int dp, rank; uint16_t port; } table[] = { { 0, 0, 50151 }, { 0, 1, 50152 }, { 1, 0, 50153 }, { 1, 1, 50154 } };
    omc_port_spec d;
    uint16_t port;
    size_t i;
    for (i = 0; i < 4; i++) {
        memset(&d, 0, sizeof(d));
        d.base = 50051;
        d.purpose = OMC_PORT_KV_TRANSFER;
        d.from_stage = 0;
        d.dp_index = table[i].dp;
        d.tp_size = 2;
        d.tp_rank = table[i].rank;
        CHECK_OK(omc_port_compute(&d, &port));
        CHECK_EQ(port, table[i].port);
    }
    memset(&d, 0, sizeof(d));
    d.base = 50051;
    d.orchestrator = 1;
    CHECK_OK(omc_port_compute(&d, &port));
    CHECK_EQ(port, 50251);
}

/* RDMA edges never depend on include order: this program has no omniconn_rdma.h, so an RDMA edge
   fails with UNAVAILABLE and a log line naming the header; a constructor named in the desc is
   what is used. */
static char rdma_log[512];
static void rdma_logger(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    (void)level; (void)item; (void)file; (void)line; (void)user;
    if (!rdma_log[0]) snprintf(rdma_log, sizeof(rdma_log), "%s", message);
}
static int rdma_fake_calls;
static omc_result rdma_fake(const struct omc_tcp_desc* net, const char* device, const char* local_addr, int require_rdma, omc_conn** out) {
    (void)net; (void)device; (void)local_addr;
    rdma_fake_calls++;
    CHECK_EQ(require_rdma, 1);
    *out = NULL;
    return OMC_ERR_RDMA_DEVICE;
}

OMC_TEST(rdma_edge_needs_the_rdma_header_or_an_explicit_constructor) {
    static const char text[] =
        "runtime: {connectors: {r: {name: rdma, extra: {host: 127.0.0.1, zmq_port: 47100}}}}\n"
        "stage_args:\n"
        "  - {stage_id: 0, output_connectors: {to_stage_1: r}}\n"
        "  - {stage_id: 1}\n";
    omc_pipeline_config* cfg = NULL;
    omc_pipeline_connect_desc d;
    omc_config_diag err;
    omc_conn* c = (omc_conn*)&rdma_fake_calls;
    REQUIRE(load_text(text, &cfg, &err) == OMC_OK);
    memset(&d, 0, sizeof(d));
    d.hooks.log_fn = rdma_logger;
    d.hooks.max_level = OMC_LOG_ERROR;
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_UNAVAILABLE);
    CHECK(c == NULL);
    CHECK(strstr(rdma_log, "omniconn_rdma.h") != NULL);
    d.rdma_connector = rdma_fake;
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_RDMA_DEVICE);
    CHECK_EQ(rdma_fake_calls, 1);
    omc_pipeline_config_destroy(cfg);
}

/* ---- CURVE and insecure listeners on TCP/RDMA edges -------------------------------------------- */

/* Every pipeline log line of one call, and how many WARNs. */
typedef struct pipe_log { int warnings, errors; char text[4096]; } pipe_log;
static void pipe_logger(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    pipe_log* pl = (pipe_log*)user;
    size_t n = strlen(pl->text);
    (void)file; (void)line;
    if (item != OMC_LOGITEM_PIPELINE) return;
    if (level == OMC_LOG_WARN) pl->warnings++;
    if (level == OMC_LOG_ERROR) pl->errors++;
    if (level <= OMC_LOG_WARN) snprintf(pl->text + n, sizeof(pl->text) - n, "%s\n", msg);
}

static void write_text(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    fclose(f);
}

/* the config's connector binds its side channel on the base (its data port is ephemeral) */
static int test_port_base(void) { return omc_test_free_port_base(4); }

OMC_TEST(config_curve_keys_insecure_and_their_errors) {
    char dir[] = "/tmp/omc-curve-cfg-XXXXXX", path[300], want[320];
    omc_pipeline_config* cfg = NULL;
    omc_connector_spec spec;
    omc_config_diag err;
    static const char good[] =
        "runtime:\n  connectors:\n    t:\n      name: TcpConnector\n      extra:\n        host: 127.0.0.1\n"
        "        curve_server_secret_key_file: keys/server.key\n"
        "        curve_server_public_key_file: /etc/omc/server.pub\n"
        "        curve_client_secret_key_file: keys/client.key\n"
        "        curve_allowed_clients_file: keys/allowed\n"
        "        insecure: true\n"
        "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: t}}\n  - {stage_id: 1}\n";
    /* from text: paths as written */
    REQUIRE(load_text(good, &cfg, &err) == OMC_OK);
    CHECK_EQ(omc_pipeline_config_warning_count(cfg), 0);
    CHECK_OK(omc_pipeline_config_connector(cfg, 0, &spec));
    CHECK_STR(spec.curve_server_secret_key_file, "keys/server.key");
    CHECK_STR(spec.curve_server_public_key_file, "/etc/omc/server.pub");
    CHECK_STR(spec.curve_client_secret_key_file, "keys/client.key");
    CHECK_STR(spec.curve_allowed_clients_file, "keys/allowed");
    CHECK_EQ(spec.insecure, 1);
    omc_pipeline_config_destroy(cfg);
    /* from a file: relative paths are relative to the file, absolute ones stay */
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/p.yaml", dir);
    write_text(path, good);
    REQUIRE(omc_pipeline_config_load_file(path, NULL, &cfg, &err) == OMC_OK);
    CHECK_OK(omc_pipeline_config_connector(cfg, 0, &spec));
    snprintf(want, sizeof(want), "%s/keys/server.key", dir);
    CHECK_STR(spec.curve_server_secret_key_file, want);
    CHECK_STR(spec.curve_server_public_key_file, "/etc/omc/server.pub");
    omc_pipeline_config_destroy(cfg);
    unlink(path);
    rmdir(dir);
    /* unset: NULL, and insecure is off */
    REQUIRE(load_text("runtime: {connectors: {t: {name: tcp, extra: {host: 127.0.0.1}}}}\nstage_args: [{stage_id: 0}]\n",
                      &cfg, &err) == OMC_OK);
    CHECK_OK(omc_pipeline_config_connector(cfg, 0, &spec));
    CHECK(spec.curve_server_secret_key_file == NULL && spec.curve_allowed_clients_file == NULL && spec.insecure == 0);
    omc_pipeline_config_destroy(cfg);
    /* errors name the check and the position */
    CHECK_RES(load_text("runtime:\n  connectors:\n    t:\n      name: tcp\n      extra: {insecure: \"yes\"}\nstage_args: [{stage_id: 0}]\n",
                        &cfg, &err), OMC_ERR_TYPE);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_TYPE);
    CHECK(strncmp(err.message, "inline:5:25: insecure", 21) == 0);
    CHECK_RES(load_text("runtime:\n  connectors:\n    t:\n      name: tcp\n      extra:\n        curve_server_secret_key_file: 7\n"
                        "stage_args: [{stage_id: 0}]\n", &cfg, &err), OMC_ERR_TYPE);
    CHECK(strncmp(err.message, "inline:6:39: curve_server_secret_key_file", 41) == 0);
    CHECK_RES(load_text("runtime:\n  connectors:\n    t:\n      name: tcp\n      extra:\n        curve_server_public_key_file: \"\"\n"
                        "stage_args: [{stage_id: 0}]\n", &cfg, &err), OMC_ERR_INVALID_ARG);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_VALUE);
    CHECK_RES(load_text("runtime:\n  connectors:\n    t:\n      name: tcp\n      extra:\n        curve_allowed_clients_file: a\n"
                        "stage_args: [{stage_id: 0}]\n", &cfg, &err), OMC_ERR_INVALID_ARG);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_MISSING);
    CHECK(strncmp(err.message, "inline:6:37: ", 13) == 0 && strstr(err.message, "curve_server_secret_key_file") != NULL);
    CHECK(cfg == NULL);
}

/* A key file that is missing or malformed, and an allow-list with a bad line: the connector is
   not created, and the log names the option's file:line:column and the path. */
OMC_TEST(connect_bad_key_files_name_the_file_and_line) {
    char dir[] = "/tmp/omc-curve-keys-XXXXXX", sec[300], bad[300], allowed[300], text[2048];
    char pub_k[OMC_CURVE_KEY_LEN + 1], sec_k[OMC_CURVE_KEY_LEN + 1], line[400];
    omc_pipeline_config* cfg = NULL;
    omc_pipeline_connect_desc d;
    omc_config_diag err;
    omc_tcp_health_info th;
    omc_conn* c = NULL;
    pipe_log pl;
    int base = test_port_base();
    REQUIRE(mkdtemp(dir) != NULL);
    REQUIRE(omc_tcp_curve_keypair(pub_k, sec_k) == OMC_OK);
    snprintf(sec, sizeof(sec), "%s/server.key", dir);
    snprintf(bad, sizeof(bad), "%s/garbage.key", dir);
    snprintf(allowed, sizeof(allowed), "%s/allowed", dir);
    write_text(sec, sec_k);
    write_text(bad, "not a key\n");
    snprintf(line, sizeof(line), "# receivers\n%s\nshort\n", pub_k);
    write_text(allowed, line);
    snprintf(text, sizeof(text),
             "runtime:\n  connectors:\n    t:\n      name: TcpConnector\n      extra:\n        host: 127.0.0.1\n"
             "        zmq_port: %d\n        curve_server_secret_key_file: %s/missing.key\n"
             "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: t}}\n  - {stage_id: 1}\n", base, dir);
    REQUIRE(load_text(text, &cfg, &err) == OMC_OK);
    memset(&d, 0, sizeof(d));
    memset(&pl, 0, sizeof(pl));
    d.hooks.log_fn = pipe_logger;
    d.hooks.user_data = &pl;
    d.hooks.max_level = OMC_LOG_WARN;
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_NOT_FOUND);
    CHECK(c == NULL);
    CHECK(strstr(pl.text, "inline:8:39: curve_server_secret_key_file") != NULL && strstr(pl.text, "missing.key") != NULL);
    /* the desc overrides the file: a malformed key */
    memset(&pl, 0, sizeof(pl));
    d.curve_server_secret_key_file = bad;
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_INVALID_ARG);
    CHECK(strstr(pl.text, "desc.curve_server_secret_key_file") != NULL && strstr(pl.text, "garbage.key") != NULL);
    /* a good key, an allow-list whose third line is not a key */
    memset(&pl, 0, sizeof(pl));
    d.curve_server_secret_key_file = sec;
    d.curve_allowed_clients_file = allowed;
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_INVALID_ARG);
    snprintf(line, sizeof(line), "%s:3: not a 40-character Z85", allowed);
    CHECK(strstr(pl.text, line) != NULL);
    /* a good allow-list: CURVE on, no warning */
    snprintf(line, sizeof(line), "# receivers\n%s\n\n", pub_k);
    write_text(allowed, line);
    memset(&pl, 0, sizeof(pl));
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &c));
    REQUIRE(c);
    memset(&th, 0, sizeof(th));
    CHECK_OK(omc_tcp_health(c, &th));
    CHECK_EQ(th.curve, 1);
    CHECK_EQ(pl.warnings, 0);
    omc_conn_destroy(c);
    c = NULL;
    /* CURVE without an allow-list works and says what it admits */
    memset(&pl, 0, sizeof(pl));
    d.curve_allowed_clients_file = NULL;
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &c));
    CHECK_EQ(pl.warnings, 1);
    CHECK(strstr(pl.text, "allow-list") != NULL);
    omc_conn_destroy(c);
    omc_pipeline_config_destroy(cfg);
    unlink(sec); unlink(bad); unlink(allowed);
    rmdir(dir);
}

/* A listener on the host's own address without CURVE: refused, saying which edge, which address
   and what to do; with insecure (file or desc) it listens and warns once. */
OMC_TEST(connect_insecure_listener_is_refused_unless_the_config_says_so) {
    char text[1024], host[OMC_TCP_HOST_MAX];
    const char* how = NULL;
    omc_pipeline_config* cfg = NULL;
    omc_pipeline_connect_desc d;
    omc_config_diag err;
    omc_conn* c = NULL;
    pipe_log pl;
    int base = test_port_base();
    if (omc_detect_host(0, host, sizeof(host), &how) != OMC_OK || (how && strcmp(how, "loopback") == 0)) {
        printf("  (this host has no address but loopback: nothing to refuse)\n");
        return;
    }
    snprintf(text, sizeof(text), "runtime: {connectors: {t: {name: tcp, extra: {host: auto, zmq_port: %d}}}}\n"
             "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: t}}\n  - {stage_id: 1}\n", base);
    REQUIRE(load_text(text, &cfg, &err) == OMC_OK);
    memset(&d, 0, sizeof(d));
    memset(&pl, 0, sizeof(pl));
    d.hooks.log_fn = pipe_logger;
    d.hooks.user_data = &pl;
    d.hooks.max_level = OMC_LOG_WARN;
    CHECK_RES(omc_pipeline_connect(cfg, 0, 0, &d, &c), OMC_ERR_INVALID_ARG);
    CHECK(c == NULL);
    CHECK(strstr(pl.text, "edge 0->1") != NULL && strstr(pl.text, host) != NULL && strstr(pl.text, "without CURVE") != NULL &&
          strstr(pl.text, "curve_server_secret_key_file") != NULL && strstr(pl.text, "insecure: true") != NULL);
    /* the receiving stage does not listen: nothing to refuse */
    CHECK_OK(omc_pipeline_connect(cfg, 0, 1, &d, &c));
    omc_conn_destroy(c);
    c = NULL;
    /* desc.insecure */
    memset(&pl, 0, sizeof(pl));
    d.insecure = 1;
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &c));
    CHECK_EQ(pl.warnings, 1);
    CHECK(strstr(pl.text, "insecure") != NULL);
    omc_conn_destroy(c);
    c = NULL;
    omc_pipeline_config_destroy(cfg);
    /* insecure: true in the file */
    snprintf(text, sizeof(text), "runtime: {connectors: {t: {name: tcp, extra: {host: auto, zmq_port: %d, insecure: true}}}}\n"
             "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: t}}\n  - {stage_id: 1}\n", base);
    REQUIRE(load_text(text, &cfg, &err) == OMC_OK);
    memset(&pl, 0, sizeof(pl));
    d.insecure = 0;
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &c));
    CHECK_EQ(pl.warnings, 1);
    omc_conn_destroy(c);
    omc_pipeline_config_destroy(cfg);
    /* loopback needs neither */
    snprintf(text, sizeof(text), "runtime: {connectors: {t: {name: tcp, extra: {host: 127.0.0.1, zmq_port: %d}}}}\n"
             "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: t}}\n  - {stage_id: 1}\n", base);
    REQUIRE(load_text(text, &cfg, &err) == OMC_OK);
    memset(&pl, 0, sizeof(pl));
    c = NULL;
    CHECK_OK(omc_pipeline_connect(cfg, 0, 0, &d, &c));
    CHECK_EQ(pl.warnings, 0);
    omc_conn_destroy(c);
    omc_pipeline_config_destroy(cfg);
}

/* What the loader says when the scheme runs out of room. */
OMC_TEST(ports_out_of_room) {
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    static const char spill[] =
        "runtime: {connectors: {r: {name: rdma}}}\n"
        "stage_args:\n"
        "  - {stage_id: 0, engine_args: {tensor_parallel_size: 8, data_parallel_size: 13}, output_connectors: {to_stage_1: r}}\n"
        "  - {stage_id: 1}\n";
    CHECK_RES(load_text(spill, &cfg, &err), OMC_ERR_TOO_LARGE);
    CHECK_EQ(err.code, OMC_CONFIG_ERR_PORT_RANGE);
    CHECK_EQ(err.line, 3);
    CHECK(strstr(err.message, "offset 100") != NULL && strstr(err.message, "dp 12, tp rank 4") != NULL);
    CHECK_RES(load_file("bad_port_range.yaml", &cfg, &err), OMC_ERR_TOO_LARGE);
    CHECK(strstr(err.message, "would be 65600") != NULL);
}

OMC_TEST(ports_of_a_config_dp2_tp2) {
    static const uint16_t want[] = { 50051, 50052, 50053, 50054, 50151, 50152, 50153, 50154, 50251 };
    omc_pipeline_config* cfg = NULL;
    omc_config_diag err;
    omc_port_use u;
    uint32_t i;
    omc_result r = load_file("ports_dp2_tp2.yaml", &cfg, &err);
    if (r != OMC_OK) fprintf(stderr, "  %s\n", err.message);
    REQUIRE(r == OMC_OK);
    CHECK_EQ(omc_pipeline_config_port_count(cfg), 9);
    for (i = 0; i < 9 && i < omc_pipeline_config_port_count(cfg); i++) {
        CHECK_OK(omc_pipeline_config_port(cfg, i, &u));
        CHECK_EQ(u.port, want[i]);
        CHECK_EQ(u.from_stage, 0);
        CHECK_EQ(u.to_stage, 1);
        if (i < 8) {
            CHECK_EQ(u.orchestrator, 0);
            CHECK_EQ(u.purpose, i < 4 ? OMC_PORT_REQUEST_FORWARDING : OMC_PORT_KV_TRANSFER);
            CHECK_EQ(u.dp_index, (i % 4) / 2);
            CHECK_EQ(u.tp_rank, i % 2);
        } else {
            CHECK_EQ(u.orchestrator, 1);
        }
    }
    omc_pipeline_config_destroy(cfg);
}

OMC_TEST(ports_shared_listeners_hosts_and_skip_check) {
    omc_pipeline_config* cfg = NULL;
    omc_pipeline_config_desc d;
    omc_config_diag err;
    omc_port_use a, b;
    uint32_t i, dup = 0;
    /* two edges out of stage 0 over one connector share its listeners: no collision */
    static const char shared[] =
        "runtime: {connectors: {r: {name: rdma}}}\n"
        "stage_args:\n"
        "  - {stage_id: 0, output_connectors: {to_stage_1: r, to_stage_2: r}}\n"
        "  - {stage_id: 1}\n"
        "  - {stage_id: 2}\n";
    /* the same numbers on different explicit hosts do not collide */
    static const char hosts[] =
        "runtime: {connectors: {a: {name: tcp, extra: {host: 10.0.0.1}}, b: {name: tcp, extra: {host: 10.0.0.2, zmq_port: 50050}}}}\n"
        "stage_args:\n"
        "  - {stage_id: 0, output_connectors: {to_stage_1: a}}\n"
        "  - {stage_id: 1, output_connectors: {to_stage_2: b}}\n"
        "  - {stage_id: 2}\n";
    REQUIRE(load_text(shared, &cfg, &err) == OMC_OK);
    CHECK_EQ(omc_pipeline_config_port_count(cfg), 3);
    omc_pipeline_config_destroy(cfg);
    if (load_text(hosts, &cfg, &err) != OMC_OK) { fprintf(stderr, "  %s\n", err.message); OMC_TEST_FAIL(); }
    else {
        CHECK_EQ(omc_pipeline_config_port_count(cfg), 6);
        omc_pipeline_config_destroy(cfg);
    }
    /* a doctor can list a colliding config's ports */
    memset(&d, 0, sizeof(d));
    d.skip_port_check = 1;
    REQUIRE(omc_pipeline_config_load_file(data_path("bad_collision_tp.yaml"), &d, &cfg, &err) == OMC_OK);
    for (i = 1; i < omc_pipeline_config_port_count(cfg); i++) {
        omc_pipeline_config_port(cfg, i - 1, &a);
        omc_pipeline_config_port(cfg, i, &b);
        if (a.port == b.port) { dup++; CHECK(a.port == 50052 || a.port == 50152); CHECK(a.edge != b.edge); }
    }
    CHECK_EQ(dup, 2);                       /* request forwarding and kv transfer both overlap */
    omc_pipeline_config_destroy(cfg);
}

#endif /* OMC__PIPELINE_PORTS */

/* ---- transfer ids ------------------------------------------------------------------------------ */

OMC_TEST(xfer_id_format) {
    static char ids[200][OMC_XFER_ID_SIZE];
    int i, j, k;
    for (i = 0; i < 200; i++) {
        CHECK_OK(omc_xfer_id_generate(ids[i]));
        CHECK_EQ(strlen(ids[i]), OMC_XFER_ID_SIZE - 1);
        CHECK(strncmp(ids[i], "xfer-", 5) == 0);
        for (k = 5; k < OMC_XFER_ID_SIZE - 1; k++) {
            int dash = k == 13 || k == 18 || k == 23 || k == 28;
            char c = ids[i][k];
            CHECK(dash ? c == '-' : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')));
        }
        CHECK_EQ(ids[i][19], '4');                          /* version 4 */
        CHECK(strchr("89ab", ids[i][24]) != NULL);          /* RFC 4122 variant */
        for (j = 0; j < i; j++) CHECK(strcmp(ids[i], ids[j]) != 0);
    }
    CHECK_RES(omc_xfer_id_generate(NULL), OMC_ERR_INVALID_ARG);
}

OMC_TEST(xfer_map_lifecycle) {
    omc_xfer_map* m = NULL;
    char x1[OMC_XFER_ID_SIZE], x2[OMC_XFER_ID_SIZE], out[OMC_XFER_MAX_ID], tiny[4];
    REQUIRE(omc_xfer_map_create(NULL, &m) == OMC_OK);
    omc_xfer_id_generate(x1);
    omc_xfer_id_generate(x2);
    /* established when the transfer starts */
    CHECK_OK(omc_xfer_map_begin(m, x1, "cmpl-1-abc123"));
    CHECK_OK(omc_xfer_map_begin(m, x2, "cmpl-2-def456"));
    CHECK_EQ(omc_xfer_map_count(m), 2);
    CHECK_RES(omc_xfer_map_begin(m, x1, "cmpl-9"), OMC_ERR_EXISTS);         /* transfer id taken */
    CHECK_RES(omc_xfer_map_begin(m, "xfer-other", "cmpl-1-abc123"), OMC_ERR_EXISTS);   /* request id taken */
    CHECK_EQ(omc_xfer_map_count(m), 2);
    /* used in both directions while it runs */
    CHECK_OK(omc_xfer_map_request_id(m, x1, out, sizeof(out)));
    CHECK(strcmp(out, "cmpl-1-abc123") == 0);
    CHECK_OK(omc_xfer_map_transfer_id(m, "cmpl-2-def456", out, sizeof(out)));
    CHECK(strcmp(out, x2) == 0);
    CHECK_RES(omc_xfer_map_request_id(m, "xfer-unknown", out, sizeof(out)), OMC_ERR_NOT_FOUND);
    CHECK_EQ(out[0], '\0');
    /* a completion reported with a too small buffer leaves the entry */
    CHECK_RES(omc_xfer_map_complete(m, x1, tiny, sizeof(tiny)), OMC_ERR_TOO_LARGE);
    CHECK_EQ(omc_xfer_map_count(m), 2);
    /* removed by the call that returns the completion under the local id */
    CHECK_OK(omc_xfer_map_complete(m, x1, out, sizeof(out)));
    CHECK(strcmp(out, "cmpl-1-abc123") == 0);
    CHECK_EQ(omc_xfer_map_count(m), 1);
    CHECK_RES(omc_xfer_map_complete(m, x1, out, sizeof(out)), OMC_ERR_NOT_FOUND);     /* a duplicate completion */
    CHECK_RES(omc_xfer_map_transfer_id(m, "cmpl-1-abc123", out, sizeof(out)), OMC_ERR_NOT_FOUND);
    /* the ids are free again */
    CHECK_OK(omc_xfer_map_begin(m, x1, "cmpl-1-abc123"));
    /* abort by the local id */
    CHECK_OK(omc_xfer_map_abort(m, "cmpl-1-abc123"));
    CHECK_RES(omc_xfer_map_abort(m, "cmpl-1-abc123"), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_xfer_map_request_id(m, x1, out, sizeof(out)), OMC_ERR_NOT_FOUND);
    /* bad ids */
    CHECK_RES(omc_xfer_map_begin(m, "", "r"), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_xfer_map_begin(m, "x", NULL), OMC_ERR_INVALID_ARG);
    {
        char longid[OMC_XFER_MAX_ID + 1];
        memset(longid, 'a', OMC_XFER_MAX_ID);
        longid[OMC_XFER_MAX_ID] = '\0';
        CHECK_RES(omc_xfer_map_begin(m, longid, "r"), OMC_ERR_INVALID_ARG);
    }
    CHECK_RES(omc_xfer_map_complete(m, x2, NULL, 5), OMC_ERR_INVALID_ARG);
    CHECK_EQ(omc_xfer_map_count(m), 1);
    omc_xfer_map_destroy(m);    /* with one entry still in it: destroy frees it (ASan checks) */
}

typedef struct expired_log { omc_xfer_map* map; int n; uint64_t count_inside; char last_req[64]; } expired_log;
static void on_expired(const char* xfer, const char* req, void* user) {
    expired_log* el = (expired_log*)user;
    (void)xfer;
    el->n++;
    el->count_inside = omc_xfer_map_count(el->map);   /* outside the map's lock: no deadlock */
    snprintf(el->last_req, sizeof(el->last_req), "%s", req);
}

OMC_TEST(xfer_map_ttl_drops_abandoned_entries) {
    omc_xfer_map* m = NULL;
    omc_xfer_map_desc d;
    expired_log el;
    char x[OMC_XFER_ID_SIZE];
    uint64_t swept;
    int i;
    memset(&d, 0, sizeof(d));
    memset(&el, 0, sizeof(el));
    d.ttl_ms = 60;
    d.on_expired = on_expired;
    d.user_data = &el;
    REQUIRE(omc_xfer_map_create(&d, &m) == OMC_OK);
    el.map = m;
    for (i = 0; i < 3; i++) {
        char req[32];
        snprintf(req, sizeof(req), "req-%d", i);
        omc_xfer_id_generate(x);
        CHECK_OK(omc_xfer_map_begin(m, x, req));
    }
    CHECK_EQ(omc_xfer_map_sweep(m), 0);         /* not old yet */
    sleep_ms(100);
    omc_xfer_id_generate(x);
    CHECK_OK(omc_xfer_map_begin(m, x, "req-young"));
    swept = omc_xfer_map_sweep(m);
    CHECK_EQ(swept, 3);
    CHECK_EQ(el.n, 3);
    CHECK_EQ(el.count_inside, 1);
    CHECK_EQ(omc_xfer_map_count(m), 1);
    CHECK(strncmp(el.last_req, "req-", 4) == 0 && strcmp(el.last_req, "req-young") != 0);
    CHECK_OK(omc_xfer_map_complete(m, x, el.last_req, sizeof(el.last_req)));
    CHECK_EQ(omc_xfer_map_count(m), 0);
    omc_xfer_map_destroy(m);
}

/* Several stages' threads start and complete transfers at once; nothing leaks. */
typedef struct xfer_worker { omc_xfer_map* m; int id, errors; } xfer_worker;
static void* xfer_thread(void* arg) {
    xfer_worker* w = (xfer_worker*)arg;
    static const int n = 1500;
    char (*ids)[OMC_XFER_ID_SIZE] = (char (*)[OMC_XFER_ID_SIZE])malloc((size_t)n * OMC_XFER_ID_SIZE);
    char req[64], out[OMC_XFER_MAX_ID];
    int i;
    if (!ids) { w->errors++; return NULL; }
    for (i = 0; i < n; i++) {
        omc_xfer_id_generate(ids[i]);
        snprintf(req, sizeof(req), "cmpl-%d-%d", w->id, i);
        if (omc_xfer_map_begin(w->m, ids[i], req) != OMC_OK) w->errors++;
        if (i % 3 == 0) omc_xfer_map_sweep(w->m);
    }
    for (i = n - 1; i >= 0; i--) {
        snprintf(req, sizeof(req), "cmpl-%d-%d", w->id, i);
        if (i % 10 == 0) { if (omc_xfer_map_abort(w->m, req) != OMC_OK) w->errors++; continue; }
        if (omc_xfer_map_complete(w->m, ids[i], out, sizeof(out)) != OMC_OK || strcmp(out, req) != 0) w->errors++;
    }
    free(ids);
    return NULL;
}

OMC_TEST(xfer_map_threads) {
    omc_xfer_map* m = NULL;
    pthread_t t[4];
    xfer_worker w[4];
    int i;
    REQUIRE(omc_xfer_map_create(NULL, &m) == OMC_OK);
    for (i = 0; i < 4; i++) { w[i].m = m; w[i].id = i; w[i].errors = 0; pthread_create(&t[i], NULL, xfer_thread, &w[i]); }
    for (i = 0; i < 4; i++) { pthread_join(t[i], NULL); CHECK_EQ(w[i].errors, 0); }
    CHECK_EQ(omc_xfer_map_count(m), 0);
    omc_xfer_map_destroy(m);
}

/* ---- batches, exists, list --------------------------------------------------------------------- */

static int collect_key(const char* from, const char* to, const char* key, void* user) {
    char* acc = (char*)user;
    size_t n = strlen(acc);
    snprintf(acc + n, 1024 - n, "%s/%s/%s;", from, to, key);
    return 0;
}

static int stop_after_one(const char* from, const char* to, const char* key, void* user) {
    (void)from; (void)to; (void)key;
    (*(int*)user)++;
    return 1;
}

OMC_TEST(batch_put_get_exists_list) {
    omc_conn* c = make_local(8u << 20, OMC_ROLE_DEFAULT);
    omc_batch_item items[8];
    static uint8_t data[8][70000];
    char keys[8][16];
    char acc[1024];
    uint64_t count = 0;
    int i, stops = 0;
    REQUIRE(c);
    memset(items, 0, sizeof(items));
    for (i = 0; i < 8; i++) {
        snprintf(keys[i], sizeof(keys[i]), "k%d", i);
        omc_test_fill(data[i], sizeof(data[i]), (uint64_t)i);
        items[i].key = keys[i];
        items[i].payload.data = data[i];
        items[i].payload.size = (uint64_t)(i * 9973);          /* 0 .. 69811 bytes, one empty */
    }
    CHECK_OK(omc_conn_put_batch(c, "0", "1", items, 8, omc_deadline_after_ms(2000)));
    for (i = 0; i < 8; i++) {
        CHECK_OK(items[i].result);
        CHECK(items[i].meta.size > 0);
        CHECK_OK(omc_conn_exists(c, "0", "1", keys[i]));
    }
    CHECK_RES(omc_conn_exists(c, "1", "0", "k1"), OMC_ERR_NOT_FOUND);     /* keys are per edge */
    {
        omc_payload p;
        memset(&p, 0, sizeof(p));
        p.data = data[0]; p.size = 10;
        CHECK_OK(omc_conn_put(c, "1", "2", "other", &p, NULL));
    }
    CHECK_OK(omc_conn_list(c, NULL, NULL, NULL, NULL, &count));
    CHECK_EQ(count, 9);
    CHECK_OK(omc_conn_list(c, "0", "1", NULL, NULL, &count));
    CHECK_EQ(count, 8);
    acc[0] = '\0';
    CHECK_OK(omc_conn_list(c, "1", NULL, collect_key, acc, &count));
    CHECK_EQ(count, 1);
    CHECK(strcmp(acc, "1/2/other;") == 0);
    CHECK_OK(omc_conn_list(c, NULL, NULL, stop_after_one, &stops, &count));
    CHECK_EQ(stops, 1);
    CHECK_EQ(count, 1);
    /* a batch of gets with the metadata, one deadline; item 7 is asked for twice: the second misses */
    {
        omc_batch_item gets[9];
        memset(gets, 0, sizeof(gets));
        for (i = 0; i < 8; i++) { gets[i].key = keys[i]; gets[i].meta = items[i].meta; }
        gets[8].key = keys[7];
        CHECK_RES(omc_conn_get_batch(c, "0", "1", gets, 9, omc_deadline_after_ms(50)), OMC_ERR_TIMEOUT);
        for (i = 0; i < 8; i++) {
            CHECK_OK(gets[i].result);
            CHECK_EQ(gets[i].buffer.size, (uint64_t)(i * 9973));
            CHECK(omc_test_verify(gets[i].buffer.data, gets[i].buffer.size, (uint64_t)i));
            omc_buffer_release(&gets[i].buffer);
            CHECK_RES(omc_conn_exists(c, "0", "1", keys[i]), OMC_ERR_NOT_FOUND);    /* taken */
        }
        CHECK_RES(gets[8].result, OMC_ERR_TIMEOUT);
    }
    for (i = 0; i < 8; i++) omc_meta_free(&items[i].meta);
    CHECK_OK(omc_conn_list(c, "0", "1", NULL, NULL, &count));
    CHECK_EQ(count, 0);
    CHECK_RES(omc_conn_put_batch(c, "0", "1", NULL, 1, OMC_NO_WAIT), OMC_ERR_INVALID_ARG);
    CHECK_OK(omc_conn_put_batch(c, "0", "1", NULL, 0, OMC_NO_WAIT));
    omc_conn_destroy(c);
}

OMC_TEST(exists_follows_readers_cleanup_ttl_and_close) {
    omc_conn* c = make_local(1u << 20, OMC_ROLE_DEFAULT);
    omc_payload p;
    omc_buffer b;
    char x = 7;
    REQUIRE(c);
    memset(&p, 0, sizeof(p));
    p.data = &x; p.size = 1; p.readers = 2;
    CHECK_OK(omc_conn_put(c, "a", "b", "fan", &p, NULL));
    CHECK_OK(omc_conn_get(c, "a", "b", "fan", NULL, 0, OMC_NO_WAIT, &b));
    CHECK_OK(omc_conn_exists(c, "a", "b", "fan"));          /* one reader left */
    omc_buffer_release(&b);
    CHECK_OK(omc_conn_get(c, "a", "b", "fan", NULL, 0, OMC_NO_WAIT, &b));
    CHECK_RES(omc_conn_exists(c, "a", "b", "fan"), OMC_ERR_NOT_FOUND);
    omc_buffer_release(&b);
    p.readers = 0;
    CHECK_OK(omc_conn_put(c, "a", "b", "gone", &p, NULL));
    CHECK_OK(omc_conn_cleanup(c, "a", "b", "gone"));
    CHECK_RES(omc_conn_exists(c, "a", "b", "gone"), OMC_ERR_NOT_FOUND);
    p.ttl_ms = 20;
    CHECK_OK(omc_conn_put(c, "a", "b", "short", &p, NULL));
    CHECK_OK(omc_conn_exists(c, "a", "b", "short"));
    sleep_ms(150);                                           /* past the TTL and the 100 ms sweep pacing */
    CHECK_RES(omc_conn_exists(c, "a", "b", "short"), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_conn_exists(c, "a", "b", ""), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_conn_exists(c, "a\x1f", "b", "k"), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_conn_exists(NULL, "a", "b", "k"), OMC_ERR_INVALID_ARG);
    omc_conn_close(c);
    CHECK_RES(omc_conn_exists(c, "a", "b", "fan"), OMC_ERR_CLOSED);
    CHECK_RES(omc_conn_list(c, NULL, NULL, NULL, NULL, NULL), OMC_ERR_CLOSED);
    omc_conn_destroy(c);
}

/* A connector whose table has no exists/list says so (every built-in connector has them; a
   companion's connector may not). FAKE: a connector with no transport behind it: only a table
   with those entries empty, which no real connector has. */
static void fake_destroy(omc_conn* c) { (void)c; }
static const omc__conn_vtable fake_vtable = { "fake", OMC_TRANSPORT_TCP, NULL, NULL, NULL, NULL, NULL, NULL, NULL, fake_destroy, NULL, NULL, NULL };

OMC_TEST(exists_list_unavailable_elsewhere) {
    omc_hooks h = omc__hooks_resolve(NULL);
    omc_conn* c = NULL;
    uint64_t n = 5;
    REQUIRE(omc__conn_create(&h, &fake_vtable, OMC_ROLE_DEFAULT, &c) == OMC_OK);
    CHECK_RES(omc_conn_exists(c, "a", "b", "k"), OMC_ERR_UNAVAILABLE);
    CHECK_RES(omc_conn_list(c, NULL, NULL, NULL, NULL, &n), OMC_ERR_UNAVAILABLE);
    CHECK_EQ(n, 0);
    omc__conn_unref(c);
}

/* Batched puts wait for pool space until the one deadline (back-pressure), while a consumer frees it. */
typedef struct batch_consumer { omc_conn* c; int n, errors; } batch_consumer;
static void* batch_consume(void* arg) {
    batch_consumer* bc = (batch_consumer*)arg;
    int i;
    for (i = 0; i < bc->n; i++) {
        char key[16];
        omc_buffer b;
        snprintf(key, sizeof(key), "big%d", i);
        if (omc_conn_get(bc->c, "0", "1", key, NULL, 0, omc_deadline_after_ms(5000), &b) != OMC_OK) { bc->errors++; continue; }
        if (!omc_test_verify(b.data, b.size, (uint64_t)i + 100)) bc->errors++;
        sleep_ms(2);
        omc_buffer_release(&b);
    }
    return NULL;
}

OMC_TEST(batch_put_waits_for_space) {
    omc_conn* c = make_local(128u << 10, OMC_ROLE_DEFAULT);      /* room for three 40 KiB items */
    omc_batch_item items[12];
    static uint8_t data[12][40000];
    char keys[12][16];
    batch_consumer bc;
    pthread_t t;
    int i;
    REQUIRE(c);
    memset(items, 0, sizeof(items));
    for (i = 0; i < 12; i++) {
        snprintf(keys[i], sizeof(keys[i]), "big%d", i);
        omc_test_fill(data[i], sizeof(data[i]), (uint64_t)i + 100);
        items[i].key = keys[i];
        items[i].payload.data = data[i];
        items[i].payload.size = sizeof(data[i]);
    }
    /* nobody consumes: the fourth item waits until the deadline and times out, the rest fail fast */
    CHECK_RES(omc_conn_put_batch(c, "0", "1", items, 5, omc_deadline_after_ms(30)), OMC_ERR_TIMEOUT);
    CHECK_OK(items[0].result); CHECK_OK(items[2].result);
    CHECK_RES(items[3].result, OMC_ERR_TIMEOUT);
    CHECK_RES(items[4].result, OMC_ERR_TIMEOUT);
    for (i = 0; i < 5; i++) { omc_meta_free(&items[i].meta); if (i < 3) omc_conn_cleanup(c, "0", "1", keys[i]); }
    /* with a consumer the whole batch goes through a pool a quarter of its size */
    bc.c = c; bc.n = 12; bc.errors = 0;
    pthread_create(&t, NULL, batch_consume, &bc);
    CHECK_OK(omc_conn_put_batch(c, "0", "1", items, 12, omc_deadline_after_ms(10000)));
    pthread_join(t, NULL);
    CHECK_EQ(bc.errors, 0);
    for (i = 0; i < 12; i++) omc_meta_free(&items[i].meta);
    omc_conn_destroy(c);
}

/* ---- streams ----------------------------------------------------------------------------------- */

static uint64_t chunk_size(uint64_t i) { return (i * 7919u) % 50000u + (i % 5 == 0 ? 0 : 1); }

typedef struct stream_side {
    omc_conn* c;
    const char* key;
    int n;                          /* chunks */
    const uint64_t* order;          /* send_at order, or NULL for send */
    int fail_at;                    /* producer: fail instead of sending chunk fail_at (-1: never) */
    char token[OMC_STREAM_TOKEN_SIZE];      /* agreed up front: the consumer may start first */
    omc_stream_desc desc;
    int hold_ms;                    /* consumer: how long it holds each chunk */
    int errors;
    int received;
    omc_result last;
    int32_t error_code;
    char error_text[300];
} stream_side;

static void* stream_producer(void* arg) {
    stream_side* s = (stream_side*)arg;
    omc_stream_writer* w = NULL;
    static uint8_t buf[2][50001];
    int i;
    if (omc_stream_writer_create(s->c, "thinker", "talker", s->key, &s->desc, &w) != OMC_OK) { s->errors++; return NULL; }
    for (i = 0; i < s->n; i++) {
        uint64_t idx = s->order ? s->order[i] : (uint64_t)i;
        uint8_t* b = buf[s->order ? 1 : 0];
        omc_payload p;
        omc_result r;
        if ((int)idx == s->fail_at) break;
        memset(&p, 0, sizeof(p));
        p.size = chunk_size(idx);
        omc_test_fill(b, p.size, idx);
        p.data = b;
        r = s->order ? omc_stream_send_at(w, idx, &p, 0, omc_deadline_after_ms(10000)) : omc_stream_send(w, &p, 0, omc_deadline_after_ms(10000));
        if (r != OMC_OK) { s->errors++; fprintf(stderr, "  send %llu: %s\n", (unsigned long long)idx, omc_result_name(r)); }
        if (s->order) sleep_ms(3);         /* let the consumer wait for a missing index */
    }
    if (s->fail_at >= 0) {
        if (omc_stream_fail(w, 42, "vocoder crashed", omc_deadline_after_ms(10000)) != OMC_OK) s->errors++;
        if (omc_stream_finish(w, OMC_NO_WAIT) != OMC_ERR_CLOSED) s->errors++;
    } else if (omc_stream_finish(w, omc_deadline_after_ms(10000)) != OMC_OK) {
        s->errors++;
    }
    {
        omc_payload p;
        memset(&p, 0, sizeof(p));
        if ((s->order ? omc_stream_send_at(w, 999, &p, 0, OMC_NO_WAIT) : omc_stream_send(w, &p, 0, OMC_NO_WAIT)) != OMC_ERR_CLOSED) s->errors++;
    }
    omc_stream_writer_destroy(w);
    return NULL;
}

static void* stream_consumer(void* arg) {
    stream_side* s = (stream_side*)arg;
    omc_stream_reader* rd = NULL;
    omc_stream_chunk ch;
    uint64_t expect = 0;
    if (omc_stream_reader_create(s->c, "thinker", "talker", s->key, &s->desc, &rd) != OMC_OK) { s->errors++; return NULL; }
    for (;;) {
        omc_result r = omc_stream_next(rd, omc_deadline_after_ms(10000), &ch);
        s->last = r;
        if (r != OMC_OK) {
            s->error_code = ch.error;
            snprintf(s->error_text, sizeof(s->error_text), "%s", ch.text);
            if (r == OMC_ERR_REMOTE && !(ch.flags & OMC_STREAM_ERROR)) s->errors++;
            break;
        }
        if (ch.index != expect) s->errors++;
        if (ch.flags & OMC_STREAM_DATA) {
            if (ch.buffer.size != chunk_size(ch.index) || !omc_test_verify(ch.buffer.data, ch.buffer.size, ch.index)) s->errors++;
            s->received++;
            if (s->hold_ms) sleep_ms(s->hold_ms);
            omc_buffer_release(&ch.buffer);
        } else if (ch.buffer.data) {
            s->errors++;
        }
        expect++;
        if (ch.flags & OMC_STREAM_END) {
            if (ch.flags & OMC_STREAM_DATA) s->errors++;        /* finish() sends a control-only END */
            if (omc_stream_next(rd, OMC_NO_WAIT, &ch) != OMC_ERR_CLOSED) s->errors++;
            break;
        }
    }
    omc_stream_reader_destroy(rd);
    return NULL;
}

static void run_stream(omc_conn* c, stream_side* prod, stream_side* cons) {
    pthread_t tp, tc;
    pthread_create(&tc, NULL, stream_consumer, cons);
    pthread_create(&tp, NULL, stream_producer, prod);
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    (void)c;
}

static void stream_sides(stream_side* p, stream_side* q, omc_conn* c, const char* key, int n) {
    memset(p, 0, sizeof(*p));
    memset(q, 0, sizeof(*q));
    p->c = q->c = c;
    p->key = q->key = key;
    p->n = q->n = n;
    p->fail_at = q->fail_at = -1;
    omc_stream_token_generate(p->token);
    memcpy(q->token, p->token, sizeof(q->token));
    p->desc.token = p->token;
    q->desc.token = q->token;
}

static uint64_t live_entries(omc_conn* c) {
    omc_health h;
    omc_conn_health(c, &h);
    return h.live_entries;
}

OMC_TEST(stream_in_order) {
    omc_conn* c = make_local(16u << 20, OMC_ROLE_DEFAULT);
    stream_side p, q;
    REQUIRE(c);
    stream_sides(&p, &q, c, "req-7", 40);
    run_stream(c, &p, &q);
    CHECK_EQ(p.errors, 0);
    CHECK_EQ(q.errors, 0);
    CHECK_EQ(q.received, 40);
    CHECK_EQ(q.last, OMC_OK);
    CHECK_EQ(live_entries(c), 0);           /* every chunk and record was consumed */
    omc_conn_destroy(c);
}

OMC_TEST(stream_out_of_order_is_delivered_in_order) {
    static const uint64_t order[] = { 3, 0, 5, 1, 4, 2, 7, 6 };
    omc_conn* c = make_local(16u << 20, OMC_ROLE_DEFAULT);
    stream_side p, q;
    REQUIRE(c);
    stream_sides(&p, &q, c, "req-ooo", 8);
    p.order = order;
    run_stream(c, &p, &q);
    CHECK_EQ(p.errors, 0);
    CHECK_EQ(q.errors, 0);
    CHECK_EQ(q.received, 8);
    CHECK_EQ(live_entries(c), 0);
    omc_conn_destroy(c);
}

OMC_TEST(stream_error_mid_stream) {
    omc_conn* c = make_local(16u << 20, OMC_ROLE_DEFAULT);
    stream_side p, q;
    REQUIRE(c);
    stream_sides(&p, &q, c, "req-err", 10);
    p.fail_at = 6;
    run_stream(c, &p, &q);
    CHECK_EQ(p.errors, 0);
    CHECK_EQ(q.errors, 0);
    CHECK_EQ(q.received, 6);
    CHECK_RES(q.last, OMC_ERR_REMOTE);
    CHECK_EQ(q.error_code, 42);
    CHECK(strcmp(q.error_text, "vocoder crashed") == 0);
    CHECK_EQ(live_entries(c), 0);
    omc_conn_destroy(c);
}

/* A pool that holds only a few chunks: the stream completes only because every chunk is
   announced before the producer waits for space for the next one (and the consumer, slow on
   purpose, frees what it has read). */
OMC_TEST(stream_backpressure_small_pool) {
    omc_conn* c = make_local(192u << 10, OMC_ROLE_DEFAULT);
    stream_side p, q;
    REQUIRE(c);
    stream_sides(&p, &q, c, "req-bp", 60);     /* about 1.5 MB through 192 KiB */
    q.hold_ms = 1;
    run_stream(c, &p, &q);
    CHECK_EQ(p.errors, 0);
    CHECK_EQ(q.errors, 0);
    CHECK_EQ(q.received, 60);
    CHECK_EQ(live_entries(c), 0);
    omc_conn_destroy(c);
}

/* Two producer threads send the even and the odd chunks of one stream. */
typedef struct half_sender { omc_stream_writer* w; int parity, n, errors; } half_sender;
static void* half_send(void* arg) {
    half_sender* h = (half_sender*)arg;
    static uint8_t bufs[2][50001];
    int i;
    for (i = h->parity; i < h->n; i += 2) {
        omc_payload p;
        memset(&p, 0, sizeof(p));
        p.size = chunk_size((uint64_t)i);
        omc_test_fill(bufs[h->parity], p.size, (uint64_t)i);
        p.data = bufs[h->parity];
        if (omc_stream_send_at(h->w, (uint64_t)i, &p, 0, omc_deadline_after_ms(10000)) != OMC_OK) h->errors++;
    }
    return NULL;
}

OMC_TEST(stream_parallel_producers) {
    omc_conn* c = make_local(16u << 20, OMC_ROLE_DEFAULT);
    omc_stream_writer* w = NULL;
    stream_side q, unused;
    half_sender h[2];
    pthread_t t[2], tc;
    int i;
    REQUIRE(c);
    stream_sides(&unused, &q, c, "req-par", 30);
    REQUIRE(omc_stream_writer_create(c, "thinker", "talker", "req-par", &q.desc, &w) == OMC_OK);
    pthread_create(&tc, NULL, stream_consumer, &q);
    for (i = 0; i < 2; i++) { h[i].w = w; h[i].parity = i; h[i].n = 30; h[i].errors = 0; pthread_create(&t[i], NULL, half_send, &h[i]); }
    for (i = 0; i < 2; i++) { pthread_join(t[i], NULL); CHECK_EQ(h[i].errors, 0); }
    CHECK_OK(omc_stream_finish(w, omc_deadline_after_ms(5000)));
    pthread_join(tc, NULL);
    CHECK_EQ(q.errors, 0);
    CHECK_EQ(q.received, 30);
    omc_stream_writer_destroy(w);
    CHECK_EQ(live_entries(c), 0);
    omc_conn_destroy(c);
}

/* Two threads call omc_stream_send on one writer: they take turns, every chunk gets its own index. */
typedef struct seq_sender { omc_stream_writer* w; uint32_t id; int errors; } seq_sender;
static void* seq_send(void* arg) {
    seq_sender* ss = (seq_sender*)arg;
    uint32_t i;
    for (i = 0; i < 25; i++) {
        uint8_t b[8];
        omc_payload p;
        omc__put_u32(b, ss->id);
        omc__put_u32(b + 4, i);
        memset(&p, 0, sizeof(p));
        p.data = b; p.size = 8;
        if (omc_stream_send(ss->w, &p, 0, omc_deadline_after_ms(5000)) != OMC_OK) ss->errors++;
    }
    return NULL;
}

/* A reader of writer w's stream: the writer's token, handed over as a stage would. */
static omc_result reader_of(omc_conn* c, omc_stream_writer* w, const char* from, const char* to, const char* key, omc_stream_reader** rd) {
    char token[OMC_STREAM_TOKEN_SIZE];
    omc_stream_desc d;
    omc_result r = omc_stream_writer_token(w, token);
    if (r != OMC_OK) return r;
    memset(&d, 0, sizeof(d));
    d.token = token;
    return omc_stream_reader_create(c, from, to, key, &d, rd);
}

OMC_TEST(stream_concurrent_sends_take_turns) {
    omc_conn* c = make_local(4u << 20, OMC_ROLE_DEFAULT);
    omc_stream_writer* w = NULL;
    omc_stream_reader* rd = NULL;
    omc_stream_chunk ch;
    seq_sender ss[2];
    pthread_t t[2];
    uint32_t next_seq[2] = { 0, 0 }, i;
    REQUIRE(c);
    REQUIRE(omc_stream_writer_create(c, "0", "1", "seq", NULL, &w) == OMC_OK);
    REQUIRE(reader_of(c, w, "0", "1", "seq", &rd) == OMC_OK);
    for (i = 0; i < 2; i++) { ss[i].w = w; ss[i].id = i; ss[i].errors = 0; pthread_create(&t[i], NULL, seq_send, &ss[i]); }
    for (i = 0; i < 2; i++) { pthread_join(t[i], NULL); CHECK_EQ(ss[i].errors, 0); }
    CHECK_OK(omc_stream_finish(w, OMC_NO_WAIT));
    for (i = 0; i < 50; i++) {
        uint32_t id, seq;
        if (omc_stream_next(rd, OMC_NO_WAIT, &ch) != OMC_OK || ch.index != i || ch.buffer.size != 8) { OMC_TEST_FAIL(); break; }
        id = omc__get_u32((const uint8_t*)ch.buffer.data);
        seq = omc__get_u32((const uint8_t*)ch.buffer.data + 4);
        CHECK(id < 2 && seq == next_seq[id & 1]);       /* each thread's chunks in its own order */
        next_seq[id & 1]++;
        omc_buffer_release(&ch.buffer);
    }
    CHECK_OK(omc_stream_next(rd, OMC_NO_WAIT, &ch));
    CHECK_EQ(ch.flags, OMC_STREAM_END);
    CHECK_EQ(ch.index, 50);
    omc_stream_reader_destroy(rd);
    omc_stream_writer_destroy(w);
    CHECK_EQ(live_entries(c), 0);
    omc_conn_destroy(c);
}

OMC_TEST(stream_details) {
    omc_conn* c = make_local(4u << 20, OMC_ROLE_DEFAULT);
    omc_conn* rx = make_local(1u << 20, OMC_ROLE_RECEIVER);
    omc_stream_writer* w = NULL;
    omc_stream_reader* rd = NULL;
    omc_stream_chunk ch;
    omc_payload p;
    omc_buffer zb;
    char longkey[300];
    omc_stream_desc sd;
    uint64_t n;
    REQUIRE(c && rx);
    /* names: the key must leave room for the suffix; roles */
    memset(longkey, 'k', 240);
    longkey[240] = '\0';
    CHECK_RES(omc_stream_writer_create(c, "a", "b", longkey, NULL, &w), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_stream_writer_create(c, "a", "b", "", NULL, &w), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_stream_writer_create(rx, "a", "b", "k", NULL, &w), OMC_ERR_WRONG_ROLE);
    CHECK(w == NULL);
    REQUIRE(omc_stream_writer_create(c, "a", "b", "s", NULL, &w) == OMC_OK);
    REQUIRE(reader_of(c, w, "a", "b", "s", &rd) == OMC_OK);
    /* nothing yet: a timeout, and nothing lost */
    CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_TIMEOUT);
    /* a zero-copy chunk with END: the last chunk carries data */
    CHECK_OK(omc_conn_alloc(c, 1000, OMC_NO_WAIT, &zb));
    omc_test_fill(zb.data, 1000, 0);
    memset(&p, 0, sizeof(p));
    p.buffer = &zb;
    CHECK_RES(omc_stream_send(w, &p, 0x80, OMC_NO_WAIT), OMC_ERR_INVALID_ARG);    /* unknown flag */
    CHECK_OK(omc_stream_send(w, &p, OMC_STREAM_END, OMC_NO_WAIT));
    CHECK(zb.data == NULL);                 /* handed over */
    CHECK_RES(omc_stream_send_at(w, 5, &p, 0, OMC_NO_WAIT), OMC_ERR_INVALID_ARG);  /* no mixing */
    CHECK_OK(omc_stream_next(rd, OMC_NO_WAIT, &ch));
    CHECK_EQ(ch.flags, OMC_STREAM_DATA | OMC_STREAM_END);
    CHECK_EQ(ch.buffer.size, 1000);
    CHECK(omc_test_verify(ch.buffer.data, 1000, 0));
    omc_buffer_release(&ch.buffer);
    CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_CLOSED);
    CHECK_RES(omc_stream_finish(w, OMC_NO_WAIT), OMC_ERR_CLOSED);
    omc_stream_writer_destroy(w);
    omc_stream_reader_destroy(rd);

    /* abort takes back what no reader took */
    REQUIRE(omc_stream_writer_create(c, "a", "b", "ab", NULL, &w) == OMC_OK);
    memset(&p, 0, sizeof(p));
    p.data = longkey; p.size = 100;
    CHECK_OK(omc_stream_send(w, &p, 0, OMC_NO_WAIT));
    CHECK_OK(omc_stream_send(w, &p, 0, OMC_NO_WAIT));
    CHECK_OK(omc_conn_list(c, "a", "b", NULL, NULL, &n));
    CHECK_EQ(n, 4);                         /* two chunks, two control records */
    omc_stream_writer_abort(w);
    CHECK_OK(omc_conn_list(c, "a", "b", NULL, NULL, &n));
    CHECK_EQ(n, 0);
    CHECK_RES(omc_stream_send(w, &p, 0, OMC_NO_WAIT), OMC_ERR_CLOSED);
    omc_stream_writer_destroy(w);

    /* a forged control record breaks the stream for good, with a clear result (whoever forges
       it knows the token: a stage that holds it, or a bug) */
    memset(&sd, 0, sizeof(sd));
    sd.token = "00112233445566778899aabbccddeeff";
    REQUIRE(omc_stream_reader_create(c, "a", "b", "forged", &sd, &rd) == OMC_OK);
    p.data = "not a control record at all, but long enough"; p.size = 44;
    CHECK_OK(omc_conn_put(c, "a", "b", "forged#00112233445566778899aabbccddeeff#c0", &p, NULL));
    CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_MALFORMED);
    CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_MALFORMED);
    omc_stream_reader_destroy(rd);
    /* a valid record announcing the wrong index */
    {
        omc_stream_record rec;
        uint8_t bytes[64];
        size_t len;
        memset(&rec, 0, sizeof(rec));
        rec.index = 3;
        rec.flags = OMC_STREAM_END;
        CHECK_OK(omc_stream_record_encode(&rec, bytes, sizeof(bytes), &len));
        REQUIRE(omc_stream_reader_create(c, "a", "b", "wrong", &sd, &rd) == OMC_OK);
        p.data = bytes; p.size = len;
        CHECK_OK(omc_conn_put(c, "a", "b", "wrong#00112233445566778899aabbccddeeff#c0", &p, NULL));
        CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_MALFORMED);
        omc_stream_reader_destroy(rd);
    }
    /* an announced chunk that is gone (cleaned up) */
    REQUIRE(omc_stream_writer_create(c, "a", "b", "lost", NULL, &w) == OMC_OK);
    REQUIRE(reader_of(c, w, "a", "b", "lost", &rd) == OMC_OK);
    p.data = longkey; p.size = 10;
    CHECK_OK(omc_stream_send(w, &p, 0, OMC_NO_WAIT));
    {
        char tok[OMC_STREAM_TOKEN_SIZE], k[128];
        CHECK_OK(omc_stream_writer_token(w, tok));
        snprintf(k, sizeof(k), "lost#%s#0", tok);
        CHECK_OK(omc_conn_cleanup(c, "a", "b", k));
    }
    CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_NOT_FOUND);
    omc_stream_reader_destroy(rd);
    omc_stream_writer_destroy(w);
    CHECK_RES(omc_stream_reader_create(c, "a", "b", "k", NULL, NULL), OMC_ERR_INVALID_ARG);
    CHECK_EQ(live_entries(c), 0);
    omc_conn_destroy(c);
    omc_conn_destroy(rx);
}

/* Every key of a stream carries the writer's 128-bit token: "K#<token>#<i>", "K#<token>#c<i>".
   A reader without it cannot be created; one with another token finds nothing. */
static int collect_stream_key(const char* from, const char* to, const char* key, void* user) {
    char* out = (char*)user;
    (void)from; (void)to;
    size_t n = strlen(key);
    if (n > 3 && strcmp(key + n - 3, "#c0") == 0) snprintf(out, 128, "%s", key);     /* the control record */
    return 0;
}

OMC_TEST(stream_keys_carry_the_writers_token) {
    omc_conn* c = make_local(4u << 20, OMC_ROLE_DEFAULT);
    omc_stream_writer *w = NULL, *w2 = NULL;
    omc_stream_reader* rd = NULL;
    omc_stream_desc sd;
    omc_stream_chunk ch;
    omc_payload p;
    char tok[OMC_STREAM_TOKEN_SIZE], tok2[OMC_STREAM_TOKEN_SIZE], want[128], seen[128] = "";
    int i;
    REQUIRE(c);
    REQUIRE(omc_stream_writer_create(c, "a", "b", "req", NULL, &w) == OMC_OK);
    REQUIRE(omc_stream_writer_create(c, "a", "b", "req2", NULL, &w2) == OMC_OK);
    CHECK_OK(omc_stream_writer_token(w, tok));
    CHECK_OK(omc_stream_writer_token(w2, tok2));
    CHECK_EQ(strlen(tok), 32);
    for (i = 0; i < 32; i++) CHECK((tok[i] >= '0' && tok[i] <= '9') || (tok[i] >= 'a' && tok[i] <= 'f'));
    CHECK(strcmp(tok, tok2) != 0);
    memset(&p, 0, sizeof(p));
    p.data = "chunk"; p.size = 5;
    CHECK_OK(omc_stream_send(w, &p, OMC_STREAM_END, OMC_NO_WAIT));
    CHECK_OK(omc_conn_list(c, "a", "b", collect_stream_key, seen, NULL));
    snprintf(want, sizeof(want), "req#%s#c0", tok);
    CHECK_STR(seen, want);
    CHECK_RES(omc_conn_exists(c, "a", "b", "req#c0"), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_conn_exists(c, "a", "b", "req#0"), OMC_ERR_NOT_FOUND);
    /* no token, a malformed one, another writer's */
    CHECK_RES(omc_stream_reader_create(c, "a", "b", "req", NULL, &rd), OMC_ERR_INVALID_ARG);
    memset(&sd, 0, sizeof(sd));
    sd.token = "0123456789ABCDEF0123456789abcdef";
    CHECK_RES(omc_stream_reader_create(c, "a", "b", "req", &sd, &rd), OMC_ERR_INVALID_ARG);
    sd.token = "0123";
    {
        omc_stream_writer* w3 = NULL;
        CHECK_RES(omc_stream_writer_create(c, "a", "b", "req", &sd, &w3), OMC_ERR_INVALID_ARG);
        CHECK(w3 == NULL);
    }
    sd.token = tok2;
    REQUIRE(omc_stream_reader_create(c, "a", "b", "req", &sd, &rd) == OMC_OK);
    CHECK_RES(omc_stream_next(rd, OMC_NO_WAIT, &ch), OMC_ERR_TIMEOUT);
    omc_stream_reader_destroy(rd);
    /* the writer's token reads it */
    sd.token = tok;
    REQUIRE(omc_stream_reader_create(c, "a", "b", "req", &sd, &rd) == OMC_OK);
    CHECK_OK(omc_stream_next(rd, OMC_NO_WAIT, &ch));
    CHECK(ch.buffer.size == 5 && memcmp(ch.buffer.data, "chunk", 5) == 0);
    omc_buffer_release(&ch.buffer);
    omc_stream_reader_destroy(rd);
    omc_stream_writer_destroy(w);
    omc_stream_writer_destroy(w2);
    CHECK_EQ(live_entries(c), 0);
    omc_conn_destroy(c);
}

OMC_TEST(stream_record_codec) {
    omc_stream_record rec, back;
    uint8_t meta[100], buf[512];
    size_t len, i;
    int bit;
    memset(&rec, 0, sizeof(rec));
    omc_test_fill(meta, sizeof(meta), 9);
    rec.index = 0x0102030405060708ull;
    rec.flags = OMC_STREAM_DATA | OMC_STREAM_END;
    rec.data_size = 123456789;
    rec.meta = meta;
    rec.meta_len = sizeof(meta);
    CHECK_EQ(omc_stream_record_size(&rec), OMC_STREAM_HEADER_SIZE + 100);
    CHECK_RES(omc_stream_record_encode(&rec, buf, 100, &len), OMC_ERR_TOO_LARGE);
    CHECK_OK(omc_stream_record_encode(&rec, buf, sizeof(buf), &len));
    CHECK_EQ(len, 140);
    CHECK_EQ(buf[0], 'O'); CHECK_EQ(buf[1], 'M'); CHECK_EQ(buf[2], 'C'); CHECK_EQ(buf[3], 'S');
    CHECK_EQ(buf[8], 0x08);                 /* little-endian index */
    CHECK_OK(omc_stream_record_decode(buf, len, &back));
    CHECK(back.index == rec.index && back.flags == rec.flags && back.data_size == rec.data_size && back.meta_len == 100);
    CHECK(memcmp(back.meta, meta, 100) == 0);
    /* every single-bit flip is caught; no truncation decodes */
    for (i = 0; i < len; i++)
        for (bit = 0; bit < 8; bit++) {
            omc_result r;
            buf[i] ^= (uint8_t)(1u << bit);
            r = omc_stream_record_decode(buf, len, &back);
            if (r == OMC_OK) { OMC_TEST_FAIL(); fprintf(stderr, "  flip at byte %u bit %d decoded\n", (unsigned)i, bit); }
            buf[i] ^= (uint8_t)(1u << bit);
        }
    for (i = 0; i < len; i++) CHECK(omc_stream_record_decode(buf, i, &back) != OMC_OK);
    /* the rules */
    rec.flags = OMC_STREAM_ERROR | OMC_STREAM_DATA;
    CHECK_RES(omc_stream_record_encode(&rec, buf, sizeof(buf), &len), OMC_ERR_INVALID_ARG);
    rec.flags = 0;
    CHECK_RES(omc_stream_record_encode(&rec, buf, sizeof(buf), &len), OMC_ERR_INVALID_ARG);
    rec.flags = OMC_STREAM_END;             /* END without DATA carries nothing */
    CHECK_RES(omc_stream_record_encode(&rec, buf, sizeof(buf), &len), OMC_ERR_INVALID_ARG);
    rec.meta_len = 0; rec.data_size = 0;
    CHECK_OK(omc_stream_record_encode(&rec, buf, sizeof(buf), &len));
    rec.flags = OMC_STREAM_ERROR; rec.error = -5; rec.text = "boom"; rec.text_len = 4;
    CHECK_OK(omc_stream_record_encode(&rec, buf, sizeof(buf), &len));
    CHECK_OK(omc_stream_record_decode(buf, len, &back));
    CHECK_EQ(back.error, -5);
    CHECK(back.text_len == 4 && memcmp(back.text, "boom", 4) == 0);
    rec.text_len = 256;
    CHECK_RES(omc_stream_record_encode(&rec, buf, sizeof(buf), &len), OMC_ERR_INVALID_ARG);
    rec.flags = 0x10;
    CHECK_RES(omc_stream_record_encode(&rec, buf, sizeof(buf), &len), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_stream_record_decode(NULL, 40, &back), OMC_ERR_INVALID_ARG);
}

OMC_TEST_MAIN()
