/* fuzz_config.c - libFuzzer target for the pipeline configuration loader: the YAML subset and
   JSON parsers and the resolver behind omc_pipeline_config_load_string.

   For every input, loaded as YAML, as JSON and with format detection:
     - a rejection hands nothing out, names an error code (never a warning), returns the result
       that code maps to, and points inside the input (line <= lines + 1, column <= bytes + 1) with
       a message that starts with the name;
     - an accepted config is consistent: every edge's connector exists and its type/transport
       agree with the spec, both ends are stages, find_edge/find_stage find what the tables
       hold, stage roles match the edge counts, ports are sorted and collision-free and belong
       to TCP/RDMA edges, warnings are readable;
     - loading the same bytes twice resolves to the same thing.

   Built by tests/fuzz/run.sh (see fuzz_frame.c); -DOMC_FUZZ_SEEDS gives the seed writer, which
   writes a few inline configs and every file of tests/data/ into the corpus directory. */
#define OMNICONN_IMPLEMENTATION
#define OMNICONN_NO_ZMQ
#include "omniconn.h"
#include "omniconn_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_config"
#include "fuzz_common.h"

/* A fingerprint of the whole resolution (two loads of one input must agree). */
static uint32_t fingerprint(const omc_pipeline_config* cfg) {
    uint32_t h = 2166136261u, i;
#define MIX(v) do { uint64_t v_ = (uint64_t)(v); int k_; for (k_ = 0; k_ < 8; k_++) { h ^= (uint8_t)(v_ >> (8 * k_)); h *= 16777619u; } } while (0)
    for (i = 0; i < omc_pipeline_config_stage_count(cfg); i++) {
        omc_pipeline_stage s;
        omc_pipeline_config_stage(cfg, i, &s);
        MIX(s.stage_id); MIX(s.role); MIX(s.inbound); MIX(s.outbound); MIX(s.tp_size); MIX(s.dp_size);
    }
    for (i = 0; i < omc_pipeline_config_edge_count(cfg); i++) {
        omc_pipeline_edge e;
        omc_pipeline_config_edge(cfg, i, &e);
        MIX(e.from_stage); MIX(e.to_stage); MIX(e.connector); MIX(e.declared); MIX(e.line); MIX(e.column);
    }
    for (i = 0; i < omc_pipeline_config_port_count(cfg); i++) {
        omc_port_use u;
        omc_pipeline_config_port(cfg, i, &u);
        MIX(u.port); MIX(u.edge); MIX(u.purpose); MIX(u.dp_index); MIX(u.tp_rank);
    }
#undef MIX
    return h;
}

static void check_accepted(const omc_pipeline_config* cfg) {
    uint32_t i, ns = omc_pipeline_config_stage_count(cfg), ne = omc_pipeline_config_edge_count(cfg);
    uint32_t nc = omc_pipeline_config_connector_count(cfg), np = omc_pipeline_config_port_count(cfg);
    omc_config_diag w;
    for (i = 0; i < ns; i++) {
        omc_pipeline_stage s, t;
        FUZZ_REQUIRE(omc_pipeline_config_stage(cfg, i, &s) == OMC_OK);
        FUZZ_REQUIRE(omc_pipeline_config_find_stage(cfg, s.stage_id, &t) == OMC_OK && t.stage_id == s.stage_id);
        FUZZ_REQUIRE(s.tp_size >= 1 && s.dp_size >= 1);
        FUZZ_REQUIRE(s.role == (s.inbound && s.outbound ? OMC_ROLE_DUAL : s.outbound ? OMC_ROLE_SENDER :
                                s.inbound ? OMC_ROLE_RECEIVER : OMC_ROLE_DEFAULT));
        if (i) { omc_pipeline_stage p; omc_pipeline_config_stage(cfg, i - 1, &p); FUZZ_REQUIRE(p.stage_id < s.stage_id); }
    }
    for (i = 0; i < ne; i++) {
        omc_pipeline_edge e, f;
        omc_connector_spec c;
        omc_pipeline_stage s;
        FUZZ_REQUIRE(omc_pipeline_config_edge(cfg, i, &e) == OMC_OK);
        FUZZ_REQUIRE(e.from_stage != e.to_stage);
        FUZZ_REQUIRE(omc_pipeline_config_find_stage(cfg, e.from_stage, &s) == OMC_OK);
        FUZZ_REQUIRE(omc_pipeline_config_find_stage(cfg, e.to_stage, &s) == OMC_OK);
        FUZZ_REQUIRE(omc_pipeline_config_find_edge(cfg, e.from_stage, e.to_stage, &f) == OMC_OK && f.connector == e.connector);
        FUZZ_REQUIRE(e.connector < nc && omc_pipeline_config_connector(cfg, e.connector, &c) == OMC_OK);
        FUZZ_REQUIRE(c.type == e.type && c.transport == e.transport && strcmp(c.name, e.connector_name) == 0);
        FUZZ_REQUIRE(omc_pipeline_edge_role(&e, e.from_stage) == OMC_ROLE_SENDER);
        FUZZ_REQUIRE(omc_pipeline_edge_role(&e, e.to_stage) == OMC_ROLE_RECEIVER);
    }
    for (i = 0; i < nc; i++) {
        omc_connector_spec c;
        omc_config_value v;
        FUZZ_REQUIRE(omc_pipeline_config_connector(cfg, i, &c) == OMC_OK);
        FUZZ_REQUIRE(c.type >= OMC_CONNECTOR_SHM && c.type <= OMC_CONNECTOR_LOCAL && c.transport != OMC_TRANSPORT_NONE);
        FUZZ_REQUIRE(c.zmq_port >= 1 && c.zmq_port <= 65535 && c.memory_pool_size > 0);
        FUZZ_REQUIRE(c.name && c.host && c.host[0] && c.protocol && c.device_name && c.type_name);
        if (omc_pipeline_connector_option(cfg, i, "host", &v) == OMC_OK && v.kind == OMC_CONFIG_STRING)
            FUZZ_REQUIRE(strcmp(v.string, c.host) == 0);
    }
    for (i = 0; i < np; i++) {
        omc_port_use u, prev;
        omc_pipeline_edge e;
        FUZZ_REQUIRE(omc_pipeline_config_port(cfg, i, &u) == OMC_OK);
        FUZZ_REQUIRE(u.edge < ne && omc_pipeline_config_edge(cfg, u.edge, &e) == OMC_OK);
        FUZZ_REQUIRE(e.transport == OMC_TRANSPORT_TCP || e.transport == OMC_TRANSPORT_RDMA);
        FUZZ_REQUIRE(u.port >= 1);
        if (i) {
            omc_pipeline_config_port(cfg, i - 1, &prev);
            FUZZ_REQUIRE(strcmp(prev.host, u.host) < 0 || (strcmp(prev.host, u.host) == 0 && prev.port < u.port));
        }
    }
    for (i = 0; i < omc_pipeline_config_warning_count(cfg) && i < 64; i++) {
        FUZZ_REQUIRE(omc_pipeline_config_warning(cfg, i, &w) == OMC_OK);
        FUZZ_REQUIRE(w.code >= OMC_CONFIG_WARN_UNKNOWN_KEY && w.result == OMC_OK);
    }
}

static void check_rejected(const uint8_t* data, size_t size, omc_result r, const omc_config_diag* err) {
    size_t lines = 1, i;
    for (i = 0; i < size; i++) if (data[i] == '\n') lines++;
    FUZZ_REQUIRE(r != OMC_OK && err->result == r);
    FUZZ_REQUIRE(err->code > OMC_CONFIG_OK && err->code < OMC_CONFIG_WARN_UNKNOWN_KEY);
    FUZZ_REQUIRE(err->line <= lines + 1 && err->column <= size + 1);
    FUZZ_REQUIRE(strncmp(err->message, "fuzz", 4) == 0);
    FUZZ_REQUIRE(strlen(err->message) < sizeof(err->message));
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const omc_config_format formats[3] = { OMC_CONFIG_FORMAT_AUTO, OMC_CONFIG_FORMAT_YAML, OMC_CONFIG_FORMAT_JSON };
    int f;
    for (f = 0; f < 3; f++) {
        omc_pipeline_config_desc d;
        omc_pipeline_config* cfg = (omc_pipeline_config*)&d;   /* must be overwritten */
        omc_config_diag err;
        omc_result r;
        memset(&d, 0, sizeof(d));
        d.format = formats[f];
        d.name = "fuzz";
        r = omc_pipeline_config_load_string((const char*)data, size, &d, &cfg, &err);
        if (r != OMC_OK) {
            FUZZ_REQUIRE(cfg == NULL);
            check_rejected(data, size, r, &err);
            continue;
        }
        FUZZ_REQUIRE(cfg != NULL);
        check_accepted(cfg);
        {
            omc_pipeline_config* again = NULL;
            FUZZ_REQUIRE(omc_pipeline_config_load_string((const char*)data, size, &d, &again, &err) == OMC_OK);
            FUZZ_REQUIRE(fingerprint(cfg) == fingerprint(again));
            omc_pipeline_config_destroy(again);
        }
        omc_pipeline_config_destroy(cfg);
    }
    return 0;
}

#if defined(OMC_FUZZ_SEEDS)
#include <dirent.h>

static int write_seed(const char* dir, const char* name, const void* data, size_t size) {
    char path[1024];
    FILE* f;
    snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
    f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    fwrite(data, 1, size, f);
    fclose(f);
    return 0;
}

int main(int argc, char** argv) {
    static const char* inline_seeds[] = {
        "stage_args:\n  - {stage_id: 0, output_connectors: {to_stage_1: r}}\n  - stage_id: 1\n    engine_input_source: [0]\n"
        "runtime:\n  connectors:\n    r: {name: rdma, extra: {zmq_port: 50051, protocol: \"tcp\"}}\n  edges:\n  - from: 1\n    to: 0\n",
        "{\"stages\": [{\"stage_id\": 0, \"engine_args\": {\"tensor_parallel_size\": 4}}, {\"stage_id\": 2, \"input_connectors\": "
        "{\"from_stage_0\": {\"name\": \"TcpConnector\", \"extra\": {\"host\": \"h\\u00e9\"}}}}]}",
        "--- # doc\nstage_args:\n- stage_id: 0x10\n  output_connectors:\n    to_stage_17: 'sh''m'\n- {stage_id: 17}\n...\n",
    };
    const char* dir = argc > 1 ? argv[1] : ".";
    DIR* dd;
    size_t i;
    int bad = 0;
    for (i = 0; i < sizeof(inline_seeds) / sizeof(inline_seeds[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "inline-%u", (unsigned)i);
        bad |= write_seed(dir, name, inline_seeds[i], strlen(inline_seeds[i]));
    }
    dd = opendir("tests/data");             /* run from the repository root, as run.sh does */
    if (dd) {
        struct dirent* ent;
        while ((ent = readdir(dd)) != NULL) {
            char path[1024];
            static char buf[1 << 16];
            size_t n;
            FILE* f;
            if (ent->d_name[0] == '.') continue;
            snprintf(path, sizeof(path), "tests/data/%s", ent->d_name);
            f = fopen(path, "rb");
            if (!f) continue;
            n = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            bad |= write_seed(dir, ent->d_name, buf, n);
        }
        closedir(dd);
    }
    return bad;
}
#endif
