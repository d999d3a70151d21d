/* pipeline3.c - a three-stage pipeline in three processes, wired by an edge configuration file.

   thinker -> talker -> vocoder, the shape of a speech model's pipeline, with synthetic tensors:

     thinker  stage 0  gives every request a transfer id (xfer-<uuid>) and streams its hidden
                       states ([tokens, dim] f32) chunk by chunk, each chunk a frame built in
                       place in the connector's pool (zero copy) with a CRC-32C over its data.
                       It also computes what the vocoder should end up with: the CRC-32C of the
                       request's audio, sent along in the last chunk.
     talker   stage 1  starts on chunk 0 as soon as it arrives (it does not wait for the whole
                       request), turns hidden states into codec codes ([tokens, 4] i32) and
                       streams them on.
     vocoder  stage 2  turns codes into audio samples (i16), checksums them, and reports each
                       completed request under its OWN request id - the transfer id is only
                       what the stages share - and whether its CRC-32C matches the thinker's.

   Each stage keeps its own request ids in an omc_xfer_map (established when a transfer starts,
   used to translate the completion, removed by it: the maps end empty). Requests are announced
   on a stream of their own ("requests") on each edge; a request's data travels as a stream
   keyed by its transfer id. Every stream's keys carry a 128-bit token nobody else can guess:
   a request stream's token travels in its announcement, and the "requests" streams use one
   the stages agree on at start (--all: the launcher makes it; --stage: --token). Every connector comes from the configuration through
   omc_pipeline_connect(): shared memory by default, TCP (or RDMA) when the file says so, with no
   change here.

   Build (from the repository root, one line; the verbs headers, libibverbs-dev, are needed to
   build the RDMA connector in, libibverbs only at run time and only for RDMA edges):
       cc -std=c99 -O2 -I. examples/pipeline3.c -o pipeline3 -lpthread -ldl
   Run:
       ./pipeline3                                              all three stages (forked), SHM
       ./pipeline3 --config examples/configs/pipeline3_tcp.yaml TCP between the stages
       ./pipeline3 --config FILE --stage 1                      one stage (start all three, in any
                                                                order, on one host or several)
       ./pipeline3 -h                                           the options */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"          /* RDMA edges use its connector (offered to the pipeline) */
#include "omniconn_pipeline.h"      /* brings omniconn_shm.h along */

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NQ 4            /* codebooks per token (the talker's output) */
#define HOP 240         /* audio samples per token: 24 kHz at 100 tokens per second */

typedef struct options {
    const char* config;
    int stage;                  /* a stage id, or -1: all three, one process each */
    int requests;
    int tokens;                 /* request n has tokens + 16 * (n % 4) tokens */
    int chunk;                  /* tokens per chunk */
    int dim;                    /* hidden size */
    int think_us;               /* the thinker's (simulated) time per chunk */
    char channel[OMC_SHM_CHANNEL_MAX + 1];
    uint64_t pool;
    int timeout_s;
    int rdma_fallback;
    int fault;                  /* testing: the talker alters request `fault` (-1 = none) */
    char token[OMC_STREAM_TOKEN_SIZE];  /* of the "requests" streams: the same in every stage */
    int verbose;
} options;

static void usage(void) {
    printf("usage: pipeline3 [options]\n");
    printf("  --config FILE    edge configuration (YAML or JSON)   (default examples/configs/pipeline3_shm.yaml)\n");
    printf("  --stage ID       run this one stage                   (default: all three, one process each)\n");
    printf("  --all            run all three stages (the default)\n");
    printf("  --requests N     requests                             (default 8)\n");
    printf("  --tokens N       tokens per request (+16 x (n %% 4))   (default 128)\n");
    printf("  --chunk N        tokens per streamed chunk            (default 16)\n");
    printf("  --dim N          hidden size                          (default 1024)\n");
    printf("  --think-us N     thinker's time per chunk, in us      (default 1000)\n");
    printf("  --channel NAME   shared-memory channel                (default p3_<pid> with --all, else pipeline3)\n");
    printf("  --pool BYTES     connector pool size                  (default: the file's memory_pool_size, else the connector's)\n");
    printf("  --timeout S      give up after S seconds              (default 30)\n");
    printf("  --rdma-fallback  run RDMA edges over TCP where RDMA cannot start (no device, memlock)\n");
    printf("  --token HEX      the \"requests\" streams' token, 32 hex digits, the same in every stage\n");
    printf("                   (needed with --stage; e.g. od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')\n");
    printf("  -v               log connector events at INFO level\n");
}

/* ---- the synthetic model: the same functions in every stage, so the thinker can compute what
        the vocoder must produce ------------------------------------------------------------ */

/* hidden state of token `pos` of request n, component j: exact in f32, cheap, different everywhere */
static float hidden_value(int n, int64_t pos, int j) {
    return (float)((n * 131 + pos * 31 + j * 7) % 2003) / 1024.0f - 1.0f;
}

static void think(int n, int64_t pos0, int rows, int dim, float* out) {
    int r, j;
    for (r = 0; r < rows; r++)
        for (j = 0; j < dim; j++) out[(size_t)r * (size_t)dim + (size_t)j] = hidden_value(n, pos0 + r, j);
}

/* one code per quarter of the hidden vector (a toy residual quantiser) */
static void talk(const float* hidden, int rows, int dim, int32_t* codes) {
    int r, q, j, part = dim / NQ;
    for (r = 0; r < rows; r++)
        for (q = 0; q < NQ; q++) {
            float sum = 0.0f;
            for (j = q * part; j < (q + 1) * part; j++) sum += hidden[(size_t)r * (size_t)dim + (size_t)j];
            codes[r * NQ + q] = (int32_t)(sum * 8.0f) & 1023;
        }
}

static void vocode(const int32_t* codes, const int64_t* pos, int rows, int16_t* audio) {
    int r, k;
    for (r = 0; r < rows; r++)
        for (k = 0; k < HOP; k++)
            audio[r * HOP + k] = (int16_t)(((codes[r * NQ + k % NQ] * 37 + k * 101 + (int)(pos[r] & 0xffff) * 13) & 0x7fff) - 16384);
}

/* omniconn's CRC-32C (hardware-accelerated where the CPU has it). It is a private function of
   omniconn.h; the example uses it rather than carrying a copy of its own. */
static uint32_t crc32c(uint32_t crc, const void* data, size_t n) { return omc__crc32c(crc, data, n); }

static int tokens_of(const options* o, int n) { return o->tokens + 16 * (n % 4); }

/* ---- the pipeline as the configuration describes it ------------------------------------------ */

static const char* const role_name[3] = { "thinker", "talker", "vocoder" };

typedef struct pipe3 {
    omc_pipeline_config* cfg;
    int id[3];                      /* stage ids of thinker, talker, vocoder */
    char key[3][16];                /* the same ids as stage names for omc_conn_* ("0", "1", "2") */
    uint32_t edge_index[2];         /* thinker -> talker, talker -> vocoder */
    omc_pipeline_edge edge[2];
    omc_connector_spec spec[2];
} pipe3;

static const char* transport_name(omc_transport t) {
    switch (t) {
        case OMC_TRANSPORT_LOCAL: return "local";
        case OMC_TRANSPORT_SHM: return "shm";
        case OMC_TRANSPORT_TCP: return "tcp";
        case OMC_TRANSPORT_RDMA: return "rdma";
        default: return "?";
    }
}

/* The three lowest stage ids are thinker, talker and vocoder; edges must join them in a chain. */
static int load_pipeline(const options* o, pipe3* p) {
    omc_config_diag err;
    omc_pipeline_config_desc cd;
    uint32_t i, k;
    memset(p, 0, sizeof(*p));
    memset(&cd, 0, sizeof(cd));
    cd.hooks.log_fn = omc_log_discard;  /* the diag says it all; warnings are printed below */
    if (omc_pipeline_config_load_file(o->config, &cd, &p->cfg, &err) != OMC_OK) {
        fprintf(stderr, "pipeline3: %s\n", err.message);
        return -1;
    }
    for (i = 0; i < omc_pipeline_config_warning_count(p->cfg); i++)
        if (omc_pipeline_config_warning(p->cfg, i, &err) == OMC_OK) fprintf(stderr, "pipeline3: warning: %s\n", err.message);
    if (omc_pipeline_config_stage_count(p->cfg) < 3) {
        fprintf(stderr, "pipeline3: %s defines %u stages; this example needs three (thinker, talker, vocoder)\n", o->config,
                omc_pipeline_config_stage_count(p->cfg));
        return -1;
    }
    for (k = 0; k < 3; k++) {
        omc_pipeline_stage st;
        omc_pipeline_config_stage(p->cfg, k, &st);
        p->id[k] = st.stage_id;
        snprintf(p->key[k], sizeof(p->key[k]), "%d", st.stage_id);
    }
    for (k = 0; k < 2; k++) {
        uint32_t n = omc_pipeline_config_edge_count(p->cfg);
        for (i = 0; i < n; i++) {
            omc_pipeline_config_edge(p->cfg, i, &p->edge[k]);
            if (p->edge[k].from_stage == p->id[k] && p->edge[k].to_stage == p->id[k + 1]) break;
        }
        if (i == n) {
            fprintf(stderr, "pipeline3: %s has no edge %d -> %d (%s -> %s): name it in output_connectors/input_connectors "
                    "or engine_input_source\n", o->config, p->id[k], p->id[k + 1], role_name[k], role_name[k + 1]);
            return -1;
        }
        p->edge_index[k] = i;
        omc_pipeline_config_connector(p->cfg, p->edge[k].connector, &p->spec[k]);
    }
    return 0;
}

/* --all: the launcher starts the stages in pipeline order and waits for each to be connected
   before it starts the next (as an orchestrator would), so no receiver has to find a sender's
   segment or listener while it is still being created; and the thinker starts on requests only
   once all three are up, so the latency figures are the pipeline's, not its start-up's. A stage
   started on its own (--stage) copes with any order: its gets simply wait. */
static int ready_fd = -1;       /* write one byte here once connected */
static int go_fd = -1;          /* thinker: read one byte here before the first request */

static void tell_launcher_ready(void) {
    char c = 1;
    if (ready_fd < 0) return;
    if (write(ready_fd, &c, 1) != 1) { /* the launcher is gone: nothing to tell */ }
    close(ready_fd);
    ready_fd = -1;
}

/* A stage's connectors: one per connector spec (a dual stage whose two edges use one spec gets
   one dual connector; otherwise a receiver for the inbound edge and a sender for the outbound). */
static int connect_stage(const options* o, const pipe3* p, int k, omc_conn** in, omc_conn** out) {
    omc_pipeline_connect_desc d;
    omc_result r = OMC_OK;
    memset(&d, 0, sizeof(d));
    d.channel = o->channel;
    d.pool_size = o->pool;
    d.rdma_fallback_tcp = o->rdma_fallback;
    d.hooks.log_fn = omc_log_stderr;
    d.hooks.max_level = o->verbose ? OMC_LOG_INFO : OMC_LOG_WARN;
    *in = *out = NULL;
    if (k > 0) r = omc_pipeline_connect(p->cfg, p->edge_index[k - 1], p->id[k], &d, in);
    if (r == OMC_OK && k < 2) {
        if (k > 0 && p->edge[k].connector == p->edge[k - 1].connector) *out = *in;
        else r = omc_pipeline_connect(p->cfg, p->edge_index[k], p->id[k], &d, out);
    }
    if (r != OMC_OK) {
        fprintf(stderr, "%s: cannot connect: %s (the log line above says why)\n", role_name[k], omc_result_str(r));
        if (*out && *out != *in) omc_conn_destroy(*out);
        if (*in) omc_conn_destroy(*in);
        *in = *out = NULL;
        return -1;
    }
    tell_launcher_ready();
    return 0;
}

/* RDMA edges: did the bytes really go by RDMA? The connector falls back to TCP per sender when
   RDMA cannot be brought up (--rdma-fallback), and says so here. */
static void print_plane(const char* who, omc_conn* in) {
    omc_rdma_connector_info info;
    char gid[64];
    if (!in || omc_conn_transport(in) != OMC_TRANSPORT_RDMA || omc_rdma_connector_query(in, &info) != OMC_OK) return;
    if (!info.rdma_enabled) { printf("[%s] inbound edge went over TCP, not RDMA (--rdma-fallback): %s\n", who, info.reason); return; }
    omc_rdma_gid_to_text(info.engine.gid, gid, sizeof(gid));
    printf("[%s] inbound edge over RDMA: %llu channel(s) on %s port %u (GID %u, %s), %llu fell back to TCP%s%s\n", who,
           (unsigned long long)info.rdma_channels, info.engine.device, info.engine.port, info.engine.gid_index, gid,
           (unsigned long long)info.tcp_fallbacks, info.tcp_fallbacks ? ": " : "", info.tcp_fallbacks ? info.last_fallback : "");
}

static void disconnect_stage(omc_conn* in, omc_conn* out) {
    if (out && out != in) omc_conn_destroy(out);
    if (in) omc_conn_destroy(in);
}

/* One wait of at most 5 s: a get that ends with TIMEOUT (not there yet) or - on TCP/RDMA -
   CONNECTION (the upstream listener not up yet) is simply asked again, until `end`. A slice
   must outlast one transfer's set-up, which takes seconds on a software RDMA device under
   emulation; a get cut short mid-transfer would break its stream. */
static omc_time_ns soon(omc_time_ns end) {
    omc_time_ns t = omc_deadline_after_ms(5000);
    return t < end ? t : end;
}

/* The next chunk of a stream, retrying while it is merely not there yet. Gives up at `end`. */
static omc_result next_chunk(omc_stream_reader* r, omc_time_ns end, omc_stream_chunk* ch) {
    for (;;) {
        omc_result res = omc_stream_next(r, soon(end), ch);
        if (res != OMC_ERR_TIMEOUT && res != OMC_ERR_CONNECTION) return res;
        if (omc_now_ns() >= end) return res;
    }
}

/* A sender must not close before the next stage has taken everything: close withdraws unread
   puts. Wait until the connector holds no live entry, then a little longer on TCP, where the
   DONE of the last pull is still on its way out of the side channel when the entry retires. */
static int drain(omc_conn* c, omc_time_ns end) {
    omc_health h;
    struct timespec ts = { 0, 2000000 };
    for (;;) {
        if (omc_conn_health(c, &h) != OMC_OK) return -1;
        if (h.live_entries == 0) break;
        if (omc_now_ns() >= end) return -1;
        nanosleep(&ts, NULL);
    }
    if (omc_conn_transport(c) == OMC_TRANSPORT_TCP || omc_conn_transport(c) == OMC_TRANSPORT_RDMA) {
        ts.tv_nsec = 200000000;
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* ---- frames ---------------------------------------------------------------------------------- */

static void seg_tensor(omc_segment_desc* s, const char* name, omc_dtype dt, int64_t d0, int64_t d1) {
    memset(s, 0, sizeof(*s));
    s->name = name;
    s->dtype = dt;
    s->ndim = d1 ? 2 : 1;
    s->shape[0] = d0;
    s->shape[1] = d1;
}

/* A frame laid out in a buffer from the connector's pool (waiting for space: back-pressure);
   the caller fills the segments at where[i] and sends it: the bytes are written once. */
static omc_result frame_alloc(omc_conn* c, const omc_segment_desc* segs, uint32_t n, omc_time_ns end, omc_buffer* buf, void** where) {
    uint64_t size = 0;
    omc_result r = omc_frame_size(segs, n, &size);
    if (r == OMC_OK) r = omc_conn_alloc(c, size, end, buf);
    if (r != OMC_OK) return r;
    r = omc_frame_build(buf->data, buf->size, segs, n, OMC_FRAME_FLAG_PAYLOAD_CRC, where, &size);
    if (r != OMC_OK) omc_buffer_release(buf);
    return r;
}

/* Seal (the data CRC) and hand the buffer to the stream: zero copy, it changes hands. */
static omc_result frame_send(omc_stream_writer* w, omc_buffer* buf, uint32_t flags, omc_time_ns end) {
    omc_payload pl;
    omc_result r = omc_frame_seal(buf->data, buf->size);
    memset(&pl, 0, sizeof(pl));
    pl.buffer = buf;
    pl.flags = OMC_PAYLOAD_FRAME;
    if (r == OMC_OK) r = omc_stream_send(w, &pl, flags, end);
    if (r != OMC_OK) omc_buffer_release(buf);      /* on failure it is still ours */
    return r;
}

/* The segment `name` with the expected dtype and rank, or -1. */
static int segment(const omc_frame* f, const char* name, omc_dtype dt, uint32_t ndim, omc_segment* out) {
    if (omc_frame_find(f, name, out) != OMC_OK || out->dtype != dt || out->ndim != ndim) return -1;
    return 0;
}

/* An announcement: the transfer id, the token of the request's stream, and {request number,
   tokens, dim, announce time (ns)}. */
typedef struct announce {
    char xfer[OMC_XFER_ID_SIZE];
    char token[OMC_STREAM_TOKEN_SIZE];
    int64_t params[4];
} announce;

/* A stream descriptor carrying a token (the reader's: the writer's token). */
static omc_stream_desc with_token(const char* token) {
    omc_stream_desc d;
    memset(&d, 0, sizeof(d));
    d.token = token;
    return d;
}

static omc_result announce_send(omc_conn* c, omc_stream_writer* w, const announce* a, omc_time_ns end) {
    omc_segment_desc segs[3];
    void* where[3];
    omc_buffer buf;
    omc_result r;
    memset(segs, 0, sizeof(segs));
    segs[0].name = "transfer_id";
    segs[0].size = strlen(a->xfer);
    seg_tensor(&segs[1], "params", OMC_DTYPE_I64, 4, 0);
    segs[2].name = "stream_token";
    segs[2].size = OMC_STREAM_TOKEN_SIZE - 1;
    r = frame_alloc(c, segs, 3, end, &buf, where);
    if (r != OMC_OK) return r;
    memcpy(where[0], a->xfer, segs[0].size);
    memcpy(where[1], a->params, sizeof(a->params));
    memcpy(where[2], a->token, segs[2].size);
    return frame_send(w, &buf, 0, end);
}

static int announce_parse(const omc_buffer* b, announce* a) {
    omc_frame f;
    omc_segment id, pr, tok;
    memset(a, 0, sizeof(*a));
    if (omc_frame_decode(b->data, b->size, 1, &f) != OMC_OK) return -1;
    if (omc_frame_find(&f, "transfer_id", &id) != OMC_OK || id.size == 0 || id.size >= sizeof(a->xfer)) return -1;
    if (omc_frame_find(&f, "stream_token", &tok) != OMC_OK || tok.size != OMC_STREAM_TOKEN_SIZE - 1) return -1;
    memcpy(a->token, tok.data, (size_t)tok.size);
    if (segment(&f, "params", OMC_DTYPE_I64, 1, &pr) != 0 || pr.shape[0] != 4) return -1;
    memcpy(a->xfer, id.data, (size_t)id.size);
    memcpy(a->params, pr.data, sizeof(a->params));
    return 0;
}

/* ---- thinker ---------------------------------------------------------------------------------- */

static int thinker(const options* o, const pipe3* p) {
    omc_time_ns end = omc_deadline_after_ms((int64_t)o->timeout_s * 1000), t0 = omc_now_ns();
    omc_conn *in, *out;
    omc_stream_writer* ann = NULL;
    omc_xfer_map* map = NULL;
    omc_xfer_map_desc md;
    float* hidden = (float*)malloc(sizeof(float) * (size_t)o->chunk * (size_t)o->dim);
    int32_t* codes = (int32_t*)malloc(sizeof(int32_t) * (size_t)o->chunk * NQ);
    int16_t* audio = (int16_t*)malloc(sizeof(int16_t) * (size_t)o->chunk * HOP);
    int64_t* pos = (int64_t*)malloc(sizeof(int64_t) * (size_t)o->chunk);
    uint64_t bytes = 0, chunks = 0;
    int n, failed = 0;
    memset(&md, 0, sizeof(md));
    if (!hidden || !codes || !audio || !pos || omc_xfer_map_create(&md, &map) != OMC_OK) { fprintf(stderr, "thinker: out of memory\n"); failed = 1; }
    if (!failed && connect_stage(o, p, 0, &in, &out) != 0) failed = 1;
    if (!failed && go_fd >= 0) {
        char c;
        if (read(go_fd, &c, 1) != 1) { disconnect_stage(in, out); failed = 1; }   /* the launcher gave up */
        close(go_fd);
        go_fd = -1;
        t0 = omc_now_ns();
    }
    if (failed) { free(hidden); free(codes); free(audio); free(pos); omc_xfer_map_destroy(map); return 1; }
    {
        omc_stream_desc ad = with_token(o->token);
        if (omc_stream_writer_create(out, p->key[0], p->key[1], "requests", &ad, &ann) != OMC_OK) failed = 1;
    }
    for (n = 0; n < o->requests && !failed; n++) {
        announce a;
        char local[32];
        omc_stream_writer* w = NULL;
        uint32_t expect = 0;
        int rows = tokens_of(o, n), done = 0;
        snprintf(local, sizeof(local), "thinker-req-%d", n);        /* this stage's own request id */
        omc_xfer_id_generate(a.xfer);                               /* the id both ends share */
        a.params[0] = n;
        a.params[1] = rows;
        a.params[2] = o->dim;
        a.params[3] = omc_now_ns();
        /* the request's stream gets a fresh token; the announcement tells the talker */
        if (omc_xfer_map_begin(map, a.xfer, local) != OMC_OK || omc_stream_writer_create(out, p->key[0], p->key[1], a.xfer, NULL, &w) != OMC_OK ||
            omc_stream_writer_token(w, a.token) != OMC_OK || announce_send(out, ann, &a, end) != OMC_OK) {
            fprintf(stderr, "thinker: cannot start %s\n", local);
            omc_stream_writer_destroy(w);
            failed = 1;
            break;
        }
        while (done < rows) {
            int k = rows - done < o->chunk ? rows - done : o->chunk, last = done + k == rows, i;
            omc_segment_desc segs[4];
            void* where[4];
            omc_buffer buf;
            omc_result r;
            int64_t sent;
            struct timespec ts = { 0, (long)o->think_us * 1000L };
            if (o->think_us) nanosleep(&ts, NULL);                  /* "generating" this chunk */
            for (i = 0; i < k; i++) pos[i] = done + i;
            think(n, done, k, o->dim, hidden);
            talk(hidden, k, o->dim, codes);                         /* what the next stages will do */
            vocode(codes, pos, k, audio);
            expect = crc32c(expect, audio, sizeof(int16_t) * (size_t)k * HOP);
            seg_tensor(&segs[0], "hidden", OMC_DTYPE_F32, k, o->dim);
            seg_tensor(&segs[1], "pos", OMC_DTYPE_I64, k, 0);
            seg_tensor(&segs[2], "sent_ns", OMC_DTYPE_I64, 1, 0);         /* for the latency figures */
            seg_tensor(&segs[3], "expect_crc32c", OMC_DTYPE_U32, 1, 0);   /* last chunk only */
            r = frame_alloc(out, segs, last ? 4 : 3, end, &buf, where);
            if (r == OMC_OK) {
                memcpy(where[0], hidden, sizeof(float) * (size_t)k * (size_t)o->dim);
                memcpy(where[1], pos, sizeof(int64_t) * (size_t)k);
                if (last) memcpy(where[3], &expect, sizeof(expect));
                sent = omc_now_ns();
                memcpy(where[2], &sent, sizeof(sent));
                bytes += buf.size;
                r = frame_send(w, &buf, last ? OMC_STREAM_END : 0, end);
            }
            if (r != OMC_OK) { fprintf(stderr, "thinker: %s: chunk at token %d: %s\n", local, done, omc_result_str(r)); failed = 1; break; }
            chunks++;
            done += k;
        }
        omc_stream_writer_destroy(w);           /* what it sent stays for the talker */
        if (!failed) {
            /* the thinker's side of the transfer is complete once its last chunk is announced */
            char back[32];
            omc_xfer_map_complete(map, a.xfer, back, sizeof(back));
            printf("[thinker] %s -> %s: %d tokens in %d chunks, expected audio crc32c %08x\n", back, a.xfer, rows,
                   (rows + o->chunk - 1) / o->chunk, expect);
            fflush(stdout);
        }
    }
    if (!failed && omc_stream_finish(ann, end) != OMC_OK) failed = 1;
    if (!failed && drain(out, end) != 0) { fprintf(stderr, "thinker: the talker did not take everything within %d s\n", o->timeout_s); failed = 1; }
    if (!failed)
        printf("[thinker] sent %d requests: %llu chunks, %.1f MB of hidden states in %.0f ms; transfer-id map empty: %s\n", o->requests,
               (unsigned long long)chunks, (double)bytes / 1e6, (double)(omc_now_ns() - t0) / 1e6, omc_xfer_map_count(map) ? "no" : "yes");
    fflush(stdout);
    omc_stream_writer_destroy(ann);
    disconnect_stage(in, out);
    omc_xfer_map_destroy(map);
    free(hidden); free(codes); free(audio); free(pos);
    return failed;
}

/* ---- talker ----------------------------------------------------------------------------------- */

/* One request: codes for every chunk of hidden states, forwarded as soon as each chunk is in. */
static int talk_request(const options* o, const pipe3* p, omc_conn* in, omc_conn* out, const announce* a, const announce* fwd,
                        omc_time_ns end) {
    omc_stream_reader* rd = NULL;
    omc_stream_writer* w = NULL;
    omc_stream_desc rdd = with_token(a->token), wd = with_token(fwd->token);
    int failed = 0, ended = 0;
    if (omc_stream_reader_create(in, p->key[0], p->key[1], a->xfer, &rdd, &rd) != OMC_OK ||
        omc_stream_writer_create(out, p->key[1], p->key[2], a->xfer, &wd, &w) != OMC_OK)
        failed = 1;
    while (!failed && !ended) {
        omc_stream_chunk ch;
        omc_frame f;
        omc_segment hid, pos, sent, exp;
        omc_segment_desc segs[4];
        void* where[4];
        omc_buffer buf;
        int rows, has_exp;
        omc_result r = next_chunk(rd, end, &ch);
        if (r == OMC_ERR_REMOTE) {          /* the thinker failed this request: pass its error on */
            fprintf(stderr, "talker: %s: the thinker failed it: %s\n", a->xfer, ch.text);
            omc_stream_fail(w, ch.error, ch.text, end);
            omc_stream_writer_destroy(w);
            omc_stream_reader_destroy(rd);
            return 1;
        }
        if (r != OMC_OK) { fprintf(stderr, "talker: %s: %s\n", a->xfer, omc_result_str(r)); failed = 1; break; }
        ended = (ch.flags & OMC_STREAM_END) != 0;
        if (!(ch.flags & OMC_STREAM_DATA)) { if (omc_stream_finish(w, end) != OMC_OK) failed = 1; break; }
        if (omc_frame_decode(ch.buffer.data, ch.buffer.size, 1, &f) != OMC_OK || segment(&f, "hidden", OMC_DTYPE_F32, 2, &hid) != 0 ||
            segment(&f, "pos", OMC_DTYPE_I64, 1, &pos) != 0 || segment(&f, "sent_ns", OMC_DTYPE_I64, 1, &sent) != 0 ||
            hid.shape[1] != a->params[2] || pos.shape[0] != hid.shape[0] || sent.shape[0] != 1) {
            fprintf(stderr, "talker: %s: chunk %llu is not a valid hidden-state frame\n", a->xfer, (unsigned long long)ch.index);
            omc_buffer_release(&ch.buffer);
            failed = 1;
            break;
        }
        rows = (int)hid.shape[0];
        has_exp = segment(&f, "expect_crc32c", OMC_DTYPE_U32, 1, &exp) == 0;
        seg_tensor(&segs[0], "codes", OMC_DTYPE_I32, rows, NQ);
        seg_tensor(&segs[1], "pos", OMC_DTYPE_I64, rows, 0);
        seg_tensor(&segs[2], "sent_ns", OMC_DTYPE_I64, 1, 0);
        seg_tensor(&segs[3], "expect_crc32c", OMC_DTYPE_U32, 1, 0);
        r = frame_alloc(out, segs, has_exp ? 4 : 3, end, &buf, where);
        if (r == OMC_OK) {
            talk((const float*)hid.data, rows, (int)hid.shape[1], (int32_t*)where[0]);
            if (o->fault == (int)a->params[0] && ch.index == 0) ((int32_t*)where[0])[0] ^= 1;     /* testing: one wrong code */
            memcpy(where[1], pos.data, sizeof(int64_t) * (size_t)rows);
            memcpy(where[2], sent.data, sizeof(int64_t));                 /* the thinker's, passed on */
            if (has_exp) memcpy(where[3], exp.data, sizeof(uint32_t));    /* the thinker's, passed on untouched */
            r = frame_send(w, &buf, ended ? OMC_STREAM_END : 0, end);
        }
        omc_buffer_release(&ch.buffer);     /* the thinker's pool space goes back now */
        if (r != OMC_OK) { fprintf(stderr, "talker: %s: forwarding chunk %llu: %s\n", a->xfer, (unsigned long long)ch.index, omc_result_str(r)); failed = 1; }
    }
    if (failed && w) omc_stream_fail(w, OMC_ERR_INTERNAL, "the talker failed this request", end);
    omc_stream_writer_destroy(w);
    omc_stream_reader_destroy(rd);
    return failed;
}

static int talker(const options* o, const pipe3* p) {
    omc_time_ns end = omc_deadline_after_ms((int64_t)o->timeout_s * 1000), t0 = omc_now_ns();
    omc_conn *in, *out;
    omc_stream_reader* ann_in = NULL;
    omc_stream_writer* ann_out = NULL;
    omc_xfer_map* map = NULL;
    omc_xfer_map_desc md;
    int failed = 0, count = 0;
    memset(&md, 0, sizeof(md));
    if (omc_xfer_map_create(&md, &map) != OMC_OK) return 1;
    if (connect_stage(o, p, 1, &in, &out) != 0) { omc_xfer_map_destroy(map); return 1; }
    {
        omc_stream_desc ad = with_token(o->token);
        if (omc_stream_reader_create(in, p->key[0], p->key[1], "requests", &ad, &ann_in) != OMC_OK ||
            omc_stream_writer_create(out, p->key[1], p->key[2], "requests", &ad, &ann_out) != OMC_OK)
            failed = 1;
    }
    while (!failed) {
        omc_stream_chunk ch;
        announce a, fwd;
        char local[48], back[48];
        omc_result r = next_chunk(ann_in, end, &ch);
        if (r != OMC_OK) { fprintf(stderr, "talker: waiting for requests: %s\n", omc_result_str(r)); failed = 1; break; }
        if (!(ch.flags & OMC_STREAM_DATA)) break;           /* END: no more requests */
        r = announce_parse(&ch.buffer, &a) == 0 ? OMC_OK : OMC_ERR_MALFORMED;
        omc_buffer_release(&ch.buffer);
        if (r != OMC_OK) { fprintf(stderr, "talker: announcement %llu is malformed\n", (unsigned long long)ch.index); failed = 1; break; }
        snprintf(local, sizeof(local), "talker-%ld-%d", (long)getpid(), count++);
        fwd = a;                                            /* the vocoder's stream: a token of its own */
        if (omc_stream_token_generate(fwd.token) != OMC_OK || omc_xfer_map_begin(map, a.xfer, local) != OMC_OK ||
            announce_send(out, ann_out, &fwd, end) != OMC_OK) { failed = 1; break; }
        if (talk_request(o, p, in, out, &a, &fwd, end) != 0) { omc_xfer_map_abort(map, local); failed = 1; break; }
        omc_xfer_map_complete(map, a.xfer, back, sizeof(back));     /* completion -> our own id */
        printf("[talker]  %s <- %s: codes streamed on chunk by chunk\n", back, a.xfer);
        fflush(stdout);
        if (ch.flags & OMC_STREAM_END) break;
    }
    if (!failed && omc_stream_finish(ann_out, end) != OMC_OK) failed = 1;
    if (!failed && drain(out, end) != 0) { fprintf(stderr, "talker: the vocoder did not take everything within %d s\n", o->timeout_s); failed = 1; }
    if (!failed) {
        printf("[talker]  %d requests in %.0f ms; transfer-id map empty: %s\n", count, (double)(omc_now_ns() - t0) / 1e6,
               omc_xfer_map_count(map) ? "no" : "yes");
        print_plane("talker", in);
    }
    fflush(stdout);
    omc_stream_writer_destroy(ann_out);
    omc_stream_reader_destroy(ann_in);
    disconnect_stage(in, out);
    omc_xfer_map_destroy(map);
    return failed;
}

/* ---- vocoder ---------------------------------------------------------------------------------- */

typedef struct result {
    char local[48];                 /* the vocoder's own request id: what completions report */
    char xfer[OMC_XFER_ID_SIZE];
    int tokens;
    uint32_t crc, expect;
    double ahead_ms;                /* first audio here -> the thinker's last chunk (one host): > 0
                                       means the audio started before the thinker had finished */
} result;

/* Latencies thinker -> vocoder of every chunk of the run (ns; CLOCK_MONOTONIC, one host). */
typedef struct latencies {
    int64_t* v;
    size_t n, cap;
} latencies;

static void lat_add(latencies* l, int64_t ns) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        int64_t* g = (int64_t*)realloc(l->v, cap * sizeof(int64_t));
        if (!g) return;             /* a figure less, not a failure */
        l->v = g;
        l->cap = cap;
    }
    l->v[l->n++] = ns;
}

static int cmp_i64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return (x > y) - (x < y);
}

/* One request: audio for every chunk of codes; returns 0 and fills res once the stream ended. */
static int vocode_request(const pipe3* p, omc_conn* in, const announce* a, omc_time_ns end, latencies* lat, result* res) {
    omc_stream_reader* rd = NULL;
    int16_t* audio = NULL;
    size_t cap = 0;
    int failed = 0, have_exp = 0;
    omc_time_ns first = 0;
    omc_stream_desc rdd = with_token(a->token);
    if (omc_stream_reader_create(in, p->key[1], p->key[2], a->xfer, &rdd, &rd) != OMC_OK) return 1;
    for (;;) {
        omc_stream_chunk ch;
        omc_frame f;
        omc_segment codes, pos, sent, exp;
        int64_t sent_ns;
        int rows;
        omc_result r = next_chunk(rd, end, &ch);
        if (r != OMC_OK) {
            fprintf(stderr, "vocoder: %s: %s%s%s\n", a->xfer, omc_result_str(r), r == OMC_ERR_REMOTE ? ": " : "", r == OMC_ERR_REMOTE ? ch.text : "");
            failed = 1;
            break;
        }
        if (ch.flags & OMC_STREAM_DATA) {
            if (omc_frame_decode(ch.buffer.data, ch.buffer.size, 1, &f) != OMC_OK || segment(&f, "codes", OMC_DTYPE_I32, 2, &codes) != 0 ||
                segment(&f, "pos", OMC_DTYPE_I64, 1, &pos) != 0 || segment(&f, "sent_ns", OMC_DTYPE_I64, 1, &sent) != 0 ||
                codes.shape[1] != NQ || pos.shape[0] != codes.shape[0] || sent.shape[0] != 1) {
                fprintf(stderr, "vocoder: %s: chunk %llu is not a valid codes frame\n", a->xfer, (unsigned long long)ch.index);
                omc_buffer_release(&ch.buffer);
                failed = 1;
                break;
            }
            rows = (int)codes.shape[0];
            if ((size_t)rows * HOP > cap) {
                int16_t* grown = (int16_t*)realloc(audio, sizeof(int16_t) * (size_t)rows * HOP);
                if (!grown) { omc_buffer_release(&ch.buffer); failed = 1; break; }
                audio = grown;
                cap = (size_t)rows * HOP;
            }
            vocode((const int32_t*)codes.data, (const int64_t*)pos.data, rows, audio);
            memcpy(&sent_ns, sent.data, sizeof(sent_ns));
            lat_add(lat, omc_now_ns() - sent_ns);
            if (ch.index == 0) first = omc_now_ns();
            if (ch.flags & OMC_STREAM_END) res->ahead_ms = (double)(sent_ns - first) / 1e6;
            res->crc = crc32c(res->crc, audio, sizeof(int16_t) * (size_t)rows * HOP);
            res->tokens += rows;
            if (segment(&f, "expect_crc32c", OMC_DTYPE_U32, 1, &exp) == 0) { memcpy(&res->expect, exp.data, 4); have_exp = 1; }
            omc_buffer_release(&ch.buffer);
        }
        if (ch.flags & OMC_STREAM_END) break;
    }
    if (!failed && !have_exp) { fprintf(stderr, "vocoder: %s: the last chunk carries no expected checksum\n", a->xfer); failed = 1; }
    free(audio);
    omc_stream_reader_destroy(rd);
    return failed;
}

static int vocoder(const options* o, const pipe3* p) {
    omc_time_ns end = omc_deadline_after_ms((int64_t)o->timeout_s * 1000), t0 = omc_now_ns();
    omc_conn *in, *out;
    omc_stream_reader* ann = NULL;
    omc_xfer_map* map = NULL;
    omc_xfer_map_desc md;
    result* res = (result*)calloc((size_t)o->requests + 1, sizeof(result));
    latencies lat = { NULL, 0, 0 };
    int failed = 0, count = 0, match = 0, i;
    memset(&md, 0, sizeof(md));
    if (!res || omc_xfer_map_create(&md, &map) != OMC_OK) { free(res); return 1; }
    if (connect_stage(o, p, 2, &in, &out) != 0) { omc_xfer_map_destroy(map); free(res); return 1; }
    {
        omc_stream_desc ad = with_token(o->token);
        if (omc_stream_reader_create(in, p->key[1], p->key[2], "requests", &ad, &ann) != OMC_OK) failed = 1;
    }
    while (!failed) {
        omc_stream_chunk ch;
        announce a;
        result one;
        char local[48];
        omc_result r = next_chunk(ann, end, &ch);
        if (r != OMC_OK) { fprintf(stderr, "vocoder: waiting for requests: %s\n", omc_result_str(r)); failed = 1; break; }
        if (!(ch.flags & OMC_STREAM_DATA)) break;
        r = announce_parse(&ch.buffer, &a) == 0 ? OMC_OK : OMC_ERR_MALFORMED;
        omc_buffer_release(&ch.buffer);
        if (r != OMC_OK || count >= o->requests) { fprintf(stderr, "vocoder: unexpected announcement %llu\n", (unsigned long long)ch.index); failed = 1; break; }
        snprintf(local, sizeof(local), "vocoder-%d-%04x", count, (unsigned)(getpid() & 0xffff));
        if (omc_xfer_map_begin(map, a.xfer, local) != OMC_OK) { failed = 1; break; }
        memset(&one, 0, sizeof(one));
        if (vocode_request(p, in, &a, end, &lat, &one) != 0) { omc_xfer_map_abort(map, local); failed = 1; break; }
        /* the transfer completed: report it under OUR request id, and forget the pair */
        if (omc_xfer_map_complete(map, a.xfer, one.local, sizeof(one.local)) != OMC_OK) { failed = 1; break; }
        snprintf(one.xfer, sizeof(one.xfer), "%s", a.xfer);
        res[count++] = one;
        printf("[vocoder] %s <- %s: %d tokens, %d samples, crc32c %08x %s thinker's %08x; first audio %.1f ms %s the thinker's last chunk\n",
               one.local, one.xfer, one.tokens, one.tokens * HOP, one.crc, one.crc == one.expect ? "==" : "!=", one.expect,
               one.ahead_ms < 0 ? -one.ahead_ms : one.ahead_ms, one.ahead_ms >= 0 ? "before" : "after");
        fflush(stdout);
        if (ch.flags & OMC_STREAM_END) break;
    }
    for (i = 0; i < count; i++) match += res[i].crc == res[i].expect;
    if (!failed && count != o->requests) { fprintf(stderr, "vocoder: %d requests arrived, %d expected\n", count, o->requests); failed = 1; }
    if (!failed && match == count) {
        printf("[vocoder] checksums verified: %d of %d requests match the thinker's (%.0f ms); transfer-id map empty: %s\n", match, count,
               (double)(omc_now_ns() - t0) / 1e6, omc_xfer_map_count(map) ? "no" : "yes");
        if (lat.n) {
            qsort(lat.v, lat.n, sizeof(int64_t), cmp_i64);
            printf("[vocoder] chunk latency thinker -> talker -> vocoder: p50 %.2f ms, p99 %.2f ms (%zu chunks, one host's clock)\n",
                   (double)lat.v[lat.n / 2] / 1e6, (double)lat.v[(lat.n * 99) / 100] / 1e6, lat.n);
        }
        print_plane("vocoder", in);
    }
    else if (!failed) {
        printf("[vocoder] CHECKSUM MISMATCH: %d of %d requests differ from the thinker's\n", count - match, count);
        failed = 1;
    }
    fflush(stdout);
    omc_stream_reader_destroy(ann);
    disconnect_stage(in, out);
    omc_xfer_map_destroy(map);
    free(lat.v);
    free(res);
    return failed;
}

/* ---- running stages ------------------------------------------------------------------------- */

static int run_stage(const options* o, const pipe3* p, int k) {
    return k == 0 ? thinker(o, p) : k == 1 ? talker(o, p) : vocoder(o, p);
}

/* One process per stage (fork: this process never touched a connector), started in pipeline
   order. The first stage to fail stops the others, so a broken run ends now, not at the timeout. */
static int run_all(const options* o, const pipe3* p) {
    pid_t pid[3] = { 0, 0, 0 };
    int k, alive = 0, failed = 0, go[2];
    omc_time_ns t0 = omc_now_ns();
    if (pipe(go) != 0) { perror("pipeline3: pipe"); return 1; }
    for (k = 0; k < 3 && !failed; k++) {
        int fds[2];
        char c;
        fflush(stdout);
        fflush(stderr);
        if (pipe(fds) != 0 || (pid[k] = fork()) < 0) { perror("pipeline3: fork"); pid[k] = 0; failed = 1; break; }
        if (pid[k] == 0) {
            int rc;
            close(fds[0]);
            close(go[1]);
            ready_fd = fds[1];
            if (k == 0) go_fd = go[0]; else close(go[0]);
            rc = run_stage(o, p, k);
            omc_pipeline_config_destroy(p->cfg);
            exit(rc);
        }
        alive++;
        close(fds[1]);
        if (read(fds[0], &c, 1) != 1) failed = 1;      /* it exited before it was connected */
        close(fds[0]);
    }
    close(go[0]);
    if (!failed) {
        char c = 1;
        if (write(go[1], &c, 1) != 1) failed = 1;      /* all three are up: go */
    }
    close(go[1]);                                       /* (if we failed, the thinker reads EOF) */
    if (failed) for (k = 0; k < 3; k++) if (pid[k] > 0) kill(pid[k], SIGTERM);
    while (alive > 0) {
        int status = 0;
        pid_t w = waitpid(-1, &status, 0);
        if (w < 0) break;
        for (k = 0; k < 3; k++) {
            if (pid[k] != w) continue;
            pid[k] = 0;
            alive--;
            if ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && !failed) {
                int j;
                fprintf(stderr, "pipeline3: the %s (stage %d) failed (%s %d); stopping the others\n", role_name[k], p->id[k],
                        WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                for (j = 0; j < 3; j++) if (pid[j] > 0) kill(pid[j], SIGTERM);
                failed = 1;
            }
        }
    }
    if (!failed)
        printf("pipeline3: OK: %d requests through thinker -> talker -> vocoder in three processes (%.0f ms)\n", o->requests,
               (double)(omc_now_ns() - t0) / 1e6);
    else printf("pipeline3: FAILED (see the messages above)\n");
    return failed;
}

static int parse_int(const char* s, int lo, int hi, int* out) {
    char* e;
    long v = strtol(s, &e, 10);
    if (*s == '\0' || *e != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The whole program; main() below, and tests/test_pipeline3.c, call it. */
static int pipeline3_main(int argc, char** argv) {
    static const struct option longs[] = {
        { "config", required_argument, NULL, 'c' }, { "stage", required_argument, NULL, 's' }, { "all", no_argument, NULL, 'a' },
        { "requests", required_argument, NULL, 'n' }, { "tokens", required_argument, NULL, 't' }, { "chunk", required_argument, NULL, 'k' },
        { "dim", required_argument, NULL, 'd' }, { "think-us", required_argument, NULL, 'u' }, { "channel", required_argument, NULL, 'C' },
        { "pool", required_argument, NULL, 'p' }, { "timeout", required_argument, NULL, 'T' }, { "rdma-fallback", no_argument, NULL, 'R' },
        { "fault", required_argument, NULL, 'F' }, { "token", required_argument, NULL, 'K' }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    options o;
    pipe3 p;
    int opt, bad = 0, rc, k, have_channel = 0;
    memset(&o, 0, sizeof(o));
    o.config = "examples/configs/pipeline3_shm.yaml";
    o.stage = -1;
    o.requests = 8;
    o.tokens = 128;
    o.chunk = 16;
    o.dim = 1024;
    o.think_us = 1000;
    o.timeout_s = 30;
    o.fault = -1;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "vh", longs, NULL)) != -1) {
        switch (opt) {
            case 'c': o.config = optarg; break;
            case 's': bad |= parse_int(optarg, 0, OMC_PIPELINE_MAX_STAGE_ID, &o.stage); break;
            case 'a': o.stage = -1; break;
            case 'n': bad |= parse_int(optarg, 1, 1000000, &o.requests); break;
            case 't': bad |= parse_int(optarg, 1, 1 << 20, &o.tokens); break;
            case 'k': bad |= parse_int(optarg, 1, 1 << 16, &o.chunk); break;
            case 'd': bad |= parse_int(optarg, NQ, 1 << 16, &o.dim); bad |= o.dim % NQ ? -1 : 0; break;
            case 'u': bad |= parse_int(optarg, 0, 1000000, &o.think_us); break;
            case 'C': snprintf(o.channel, sizeof(o.channel), "%s", optarg); have_channel = 1; break;
            case 'p': o.pool = strtoull(optarg, NULL, 0); break;
            case 'T': bad |= parse_int(optarg, 1, 86400, &o.timeout_s); break;
            case 'R': o.rdma_fallback = 1; break;
            case 'F': bad |= parse_int(optarg, 0, 1000000, &o.fault); break;
            case 'K': snprintf(o.token, sizeof(o.token), "%s", optarg); bad |= strlen(optarg) != OMC_STREAM_TOKEN_SIZE - 1; break;
            case 'v': o.verbose = 1; break;
            case 'h': usage(); return 0;
            default: bad = 1; break;
        }
    }
    if (bad || optind != argc) { usage(); return 2; }
    if (!o.token[0] && o.stage < 0) omc_stream_token_generate(o.token);      /* --all: the launcher's, inherited by every stage */
    else if (!o.token[0]) {
        fprintf(stderr, "pipeline3: --stage needs --token: the same 32 hex digits in every stage (the \"requests\" streams' token)\n");
        return 2;
    }
    if (!have_channel && o.stage < 0) snprintf(o.channel, sizeof(o.channel), "p3_%ld", (long)getpid());  /* this run's own */
    else if (!have_channel) snprintf(o.channel, sizeof(o.channel), "pipeline3");  /* what the other stages default to */
    if (load_pipeline(&o, &p) != 0) { omc_pipeline_config_destroy(p.cfg); return 2; }
    printf("pipeline3: %s: thinker %d -> talker %d over %s ('%s'), talker %d -> vocoder %d over %s ('%s')\n", o.config, p.id[0], p.id[1],
           transport_name(p.edge[0].transport), p.spec[0].name, p.id[1], p.id[2], transport_name(p.edge[1].transport), p.spec[1].name);
    if (o.stage < 0) rc = run_all(&o, &p);
    else {
        for (k = 0; k < 3 && p.id[k] != o.stage; k++) {}
        if (k == 3) {
            fprintf(stderr, "pipeline3: stage %d is none of thinker %d, talker %d, vocoder %d\n", o.stage, p.id[0], p.id[1], p.id[2]);
            rc = 2;
        } else rc = run_stage(&o, &p, k);
    }
    omc_pipeline_config_destroy(p.cfg);
    return rc;
}

#ifndef PIPELINE3_NO_MAIN
int main(int argc, char** argv) { return pipeline3_main(argc, argv); }
#endif
