/* omniconn_pipeline.h - v0.1.0 - stage wiring for omniconn: edge configuration, ports, transfer ids, batches, streams - SPDX-License-Identifier: MIT OR Unlicense

    The transport-independent half of a pipeline runtime, on top of omniconn.h:
      - an edge configuration loader (the subset of YAML these files use, and JSON) that resolves
        every stage-to-stage edge to a connector spec, injects roles and computes ports, in the
        manner of vLLM-Omni's load_omni_transfer_config;
      - the port-offset scheme as a pure function, and a collision check over a whole config;
      - a transfer-id map (MoRIIO): one id shared by both ends of a transfer, translated to each
        side's own request id, with a lifecycle that cannot leak;
      - LMCache-style calls on any connector: batched put/get with one deadline, exists(key) and a
        listing of live keys;
      - streams: a producer sends a request's chunks (chunk id, end, error), each chunk's control
        record goes out before the producer waits for anything (sglang-omni's ordering), and the
        consumer receives the chunks in index order whatever order they were sent in.

    Do this:
        #define OMNICONN_IMPLEMENTATION
    before you include this file in *one* C or C++ file to create the implementation (it includes
    omniconn.h itself, so that file gets omniconn's implementation too).

        // in exactly one file:
        #define OMNICONN_IMPLEMENTATION
        #include "omniconn.h"
        #include "omniconn_pipeline.h"

    Vendoring: copy omniconn.h, omniconn_shm.h and this file. The configuration reader's
    omc_pipeline_connect creates shared-memory connectors, so this file includes omniconn_shm.h
    (a missing omniconn_shm.h is a compile error naming it). Stages wired in code that need only
    transfer ids and streams define OMNICONN_PIPELINE_NO_CONFIG and need omniconn.h alone.

    Build: cc -std=c99 app.c -lpthread -ldl      (like omniconn.h; no other library)

    CONTENTS (search for a title; the code follows "[SECTION]" banners in the same order)
      QUICK START
      STEP BY STEP
      CONFIGURATION
      ERRORS & LOGGING
      THREAD SAFETY
      DEPENDENCIES & LINKING
      FORMATS
      NON-GOALS
      RECENT REVISIONS
      then the code, by [SECTION]: Configuration: diagnostics
        Configuration: loading | Configuration: the resolved pipeline | Ports | Transfer ids
        Streams | Connecting a stage
      then the implementation ("[SECTION] Implementation: ..."), and the licence

================================================================================================
QUICK START
================================================================================================

    Load the pipeline's edge configuration and walk what every stage has to create:

        omc_pipeline_config* cfg = NULL;
        omc_config_diag err;
        if (omc_pipeline_config_load_file("pipeline.yaml", NULL, &cfg, &err) != OMC_OK) {
            fprintf(stderr, "%s\n", err.message);    // "pipeline.yaml:14:21: edge 0->1 names ..."
            return 1;
        }
        for (uint32_t i = 0; i < omc_pipeline_config_edge_count(cfg); i++) {
            omc_pipeline_edge e;
            omc_connector_spec spec;
            omc_pipeline_config_edge(cfg, i, &e);
            omc_pipeline_config_connector(cfg, e.connector, &spec);
            printf("%d -> %d over %s (%s)\n", e.from_stage, e.to_stage, spec.name,
                   omc_connector_type_name(spec.type));
        }
        omc_pipeline_config_destroy(cfg);

    Stream a request's chunks from one stage to the next (any connector, here the same-process one):

        // producer                                   // consumer
        omc_stream_writer* w;                         omc_stream_reader* r;
        char token[OMC_STREAM_TOKEN_SIZE];            omc_stream_desc d = {0};
        omc_stream_writer_create(conn, "0", "1",      d.token = token;    // the producer's, handed over
                                 "req-7", NULL, &w);  omc_stream_reader_create(conn, "0", "1",
        omc_stream_writer_token(w, token);                                     "req-7", &d, &r);
        // ... give `token` to the consumer with the request, as you would put()'s metadata
        for (each chunk) {                            omc_stream_chunk ch;
            omc_payload p = {0};                      while (omc_stream_next(r, deadline, &ch) == OMC_OK) {
            p.data = bytes; p.size = n;                   use(ch.buffer.data, ch.buffer.size);
            omc_stream_send(w, &p, 0, deadline);          omc_buffer_release(&ch.buffer);
        }                                                 if (ch.flags & OMC_STREAM_END) break;
        omc_stream_finish(w, deadline);               }
        omc_stream_writer_destroy(w);                 omc_stream_reader_destroy(r);

================================================================================================
STEP BY STEP
================================================================================================

    1. The configuration file (omc_pipeline_config_*)
       The file vLLM-Omni's stage configs use: named connectors under runtime.connectors, and per
       stage the edges it sends and receives on:

           runtime:
             connectors:
               rdma_connector:
                 name: MooncakeTransferEngineConnector
                 extra: {host: "auto", zmq_port: 50051, protocol: "rdma"}
           stage_args:
             - stage_id: 0
               output_connectors: {to_stage_1: rdma_connector}
             - stage_id: 1
               input_connectors: {from_stage_0: rdma_connector}

       Loading parses the text into a small document tree (arena-allocated through your hooks),
       then resolves it; the tree stays with the config so that omc_pipeline_connector_option()
       can hand you any key of a connector's extra mapping, including ones omniconn ignores.
       Resolution, in order (docs/pipeline.md has the full rules):
       - every connector spec gets vLLM-Omni's defaults for the keys it does not set:
           host "auto"   zmq_port 50051   protocol "rdma" (Mooncake) / "tcp" (TcpConnector)
           device_name ""   memory_pool_device "cpu"   memory_pool_size 4 GiB (cpu) / 2 GiB (cuda)
           shm_threshold_bytes 65536
       - an edge is declared by the upstream stage (output_connectors: to_stage_<id>), by the
         downstream stage (input_connectors: from_stage_<id>), or by both; an edge reference is a
         connector name or an inline {name, extra} mapping. Declared on one end only, the edge
         uses that end's connector for both ends (as vLLM-Omni does).
       - both ends naming connectors of different types (or protocols) is an error; of the same
         type but different names, a warning, and the sender's (output_connectors) one wins.
       - edges known only from the topology - runtime.edges [{from, to}] or a stage's
         engine_input_source [ids] - and edges declared with a null reference get the shared-memory
         connector (vLLM-Omni's auto-fill; spec name "auto_shm").
       - a stage with only inbound edges is a receiver, only outbound a sender, both dual.
       - the ports of every TCP/RDMA edge are computed (step 2) and checked for collisions.
       Errors carry the file position (line:column, 1-based, columns in bytes) and stop the load;
       warnings (unknown keys, ignored internal keys) are logged, kept, and do not.

    2. Ports (omc_pipeline_config_port)
       vLLM-Omni's offset scheme is the remote connector's omc_port_compute() (omniconn.h, ZMQ
       transport):
           port = zmq_port + purpose_offset + from_stage + dp_index * tp_size + tp_rank
           orchestrator: port = zmq_port + 200 + from_stage
       purpose_offset is 0 for request forwarding and 100 for KV transfer (and an offset that
       would reach the next purpose's range is refused). For a loaded config,
       omc_pipeline_config_port() lists every port its TCP/RDMA edges listen on (both purposes,
       every DP replica and TP rank of the sending stage - engine_args.data_parallel_size and
       tensor_parallel_size, default 1 - and the orchestrator's), and loading fails if two
       different listeners on the same host string would share a port, naming both edges.
       Built with OMNICONN_NO_ZMQ (no TCP/RDMA transports) the port table stays empty.

    3. Transfer ids (omc_xfer_map_*)
       Both ends of a transfer know it by one id ("xfer-<uuid>", omc_xfer_id_generate); each
       stage keeps its own request id. The map is established when a transfer starts
       (omc_xfer_map_begin), translates in both directions while it runs, and the entry is removed
       by the call that reports the completion (omc_xfer_map_complete returns the local id and
       forgets the pair), so completions are always reported under the local id and nothing stays
       behind. Entries whose completion never comes are dropped after a TTL (on_expired tells you).

    4. Batches, exists, list (omc_conn_put_batch, omc_conn_get_batch, omc_conn_exists, omc_conn_list)
       These are part of the connector contract in omniconn.h (every connector implements them;
       declared there, next to omc_conn_put). Batched put/get are loops over the contract with one
       deadline for the whole batch and a result per item; exists/list look where a metadata-less
       get would.

    5. Streams (omc_stream_*)
       Chunk i of request key K travels as an ordinary put under "K#<T>#<i>" and is announced by
       a small control record (index, flags END/ERROR/DATA, error code and text, the chunk's own
       metadata) put under "K#<T>#c<i>". T is the stream's token, 128 random bits the writer
       makes (omc_stream_writer_token) or is given (desc.token, omc_stream_token_generate); the
       reader must be given it in desc.token - hand it over with the request, as you would
       put()'s metadata. Without it nobody can name the stream's keys, so a neighbour who can
       reach a sender cannot guess "requests#c0" and take a chunk before the real reader (CURVE,
       below, decides who can reach the sender at all). The writer stages chunk i and publishes its control record
       before it waits for anything else (pool space for chunk i+1): a credit-limited receiver can
       always make progress. The reader asks for control record 0, 1, 2, ... by key, so chunks
       arrive in any order and are delivered in index order.

    6. Connecting a stage (omc_pipeline_connect)
       A process that runs stage N walks the config's edges and, once per connector spec it uses,
       creates that connector: omc_pipeline_connect(cfg, edge, N, &desc, &conn) maps the spec onto
       omc_shm_desc / omc_tcp_desc / omc_rdma_connector_desc / omc_local_desc (role from the
       stage's edges, listen port from the port table, "auto" hosts detected, upstream senders
       registered by name), so a config switches an edge from shared memory to TCP or RDMA with
       no code change (RDMA edges need omniconn_rdma.h in the implementation file, in any order,
       or desc.rdma_connector):

           for (i = 0; i < omc_pipeline_config_edge_count(cfg); i++) {
               omc_pipeline_edge e;
               omc_pipeline_config_edge(cfg, i, &e);
               if (e.from_stage != N && e.to_stage != N) continue;
               if (!conn_of_spec[e.connector])      // one connector per spec serves its edges
                   omc_pipeline_connect(cfg, i, N, &desc, &conn_of_spec[e.connector]);
           }

       Security: TCP/RDMA edges are network services. CURVE comes from key files in the spec's
       extra block (or the same fields of the desc, which win):
           curve_server_secret_key_file   senders: their secret key; turns CURVE on
           curve_allowed_clients_file     senders: receiver public keys let in, one a line
           curve_server_public_key_file   receivers: the senders' public key
           curve_client_secret_key_file   receivers: their own secret key
       (relative paths: relative to the configuration file). A sending stage whose host is not a
       loopback address ("auto" detects the host's own) and that has no CURVE is refused with
       OMC_ERR_INVALID_ARG and an ERROR naming the edge, the address and these keys, unless the
       spec says insecure: true (or desc.insecure): then it listens and logs one WARN. CURVE
       without an allow-list logs one WARN too: the public key is no secret, so anyone who has
       it gets in. Use an allow-list.

       examples/pipeline3.c runs a three-stage pipeline this way (docs/cli.md, examples/README.md);
       its TCP and RDMA configs use CURVE with an allow-list and TEST-ONLY keys
       (examples/configs/test-keys: published, so make your own for anything real).

================================================================================================
CONFIGURATION
================================================================================================

    macro                               default    where      meaning
    ----------------------------------  ---------  ---------  -------------------------------------
    OMNICONN_IMPLEMENTATION             undefined  impl file  emit the implementation
    OMNICONN_PIPELINE_NO_CONFIG         undefined  everywhere transfer ids and streams only: no
                                                              configuration file (YAML/JSON reader),
                                                              port table or omc_pipeline_connect,
                                                              and no omniconn_shm.h brought along -
                                                              for stages wired in code
    OMNICONN_PIPELINE_MAX_CONFIG_BYTES  16 MiB     impl file  largest configuration file accepted
    OMNICONN_PIPELINE_MAX_DEPTH         64         impl file  deepest nesting of mappings/sequences
    OMNICONN_PIPELINE_MAX_ENTRIES       4096       impl file  most entries in one mapping/sequence
    OMNICONN_PIPELINE_MAX_WARNINGS      64         impl file  warnings kept per config (all logged)
    OMNICONN_XFER_TTL_MS                300000     impl file  default lifetime of an uncompleted
                                                              transfer-id entry (vLLM-Omni's 300 s)

    Everything else (OMNICONN_STATIC, OMNICONN_API, hooks) is as in omniconn.h.

================================================================================================
ERRORS & LOGGING
================================================================================================

    Functions return omc_result as everywhere in omniconn. A configuration that cannot be loaded
    also fills an omc_config_diag: which check failed (omc_config_code, named by
    omc_config_code_name), the 1-based line and column, and a message that starts with
    "<file>:<line>:<column>: ". The codes:
        OMC_CONFIG_ERR_IO                 the file cannot be read                 (OMC_ERR_SYSTEM)
        OMC_CONFIG_ERR_SYNTAX             malformed YAML or JSON                  (OMC_ERR_MALFORMED)
        OMC_CONFIG_ERR_UNSUPPORTED        YAML outside the subset (anchors, |...) (OMC_ERR_MALFORMED)
        OMC_CONFIG_ERR_DUPLICATE_KEY      a mapping has the same key twice        (OMC_ERR_MALFORMED)
        OMC_CONFIG_ERR_LIMIT              a size, depth or count limit            (OMC_ERR_TOO_LARGE)
        OMC_CONFIG_ERR_TYPE               a value has the wrong type              (OMC_ERR_TYPE)
        OMC_CONFIG_ERR_VALUE              a value out of range / not allowed      (OMC_ERR_INVALID_ARG)
        OMC_CONFIG_ERR_MISSING            a required key is missing               (OMC_ERR_INVALID_ARG)
        OMC_CONFIG_ERR_UNKNOWN_TYPE       a connector's name is no connector type (OMC_ERR_NOT_FOUND)
        OMC_CONFIG_ERR_UNKNOWN_CONNECTOR  an edge names an undefined connector    (OMC_ERR_NOT_FOUND)
        OMC_CONFIG_ERR_UNKNOWN_STAGE      an edge names a stage not in stage_args (OMC_ERR_NOT_FOUND)
        OMC_CONFIG_ERR_BAD_EDGE           not from_stage_<id>/to_stage_<id>, or a loop (OMC_ERR_INVALID_ARG)
        OMC_CONFIG_ERR_DUPLICATE_STAGE    two stages with one stage_id            (OMC_ERR_INVALID_ARG)
        OMC_CONFIG_ERR_TYPE_MISMATCH      the ends of an edge disagree on the type (OMC_ERR_INVALID_ARG)
        OMC_CONFIG_ERR_PORT_RANGE         a computed port is above 65535          (OMC_ERR_TOO_LARGE)
        OMC_CONFIG_ERR_PORT_COLLISION     two listeners share a port              (OMC_ERR_INVALID_ARG)
        OMC_CONFIG_ERR_NO_MEMORY          the hooks' allocator failed             (OMC_ERR_NO_MEMORY)
    A NULL out or text/path is OMC_CONFIG_ERR_VALUE with OMC_ERR_INVALID_ARG.
    Warnings (load succeeds; omc_pipeline_config_warning): OMC_CONFIG_WARN_UNKNOWN_KEY,
    OMC_CONFIG_WARN_IGNORED_KEY (role, sender_host, sender_zmq_port: injected, not read),
    OMC_CONFIG_WARN_CONNECTOR_CONFLICT (same type, different names on the two ends).
    Log items: OMC_LOGITEM_CONFIG (errors at ERROR, warnings at WARN level) and
    OMC_LOGITEM_PIPELINE (transfer-id expiry, stream events).

================================================================================================
THREAD SAFETY
================================================================================================

    - omc_pipeline_config: immutable once loaded; any number of threads may read it at once.
    - omc_xfer_id_generate and the stream record codec: pure / reentrant.
    - omc_xfer_map: every call is thread-safe (one mutex). on_expired runs outside the lock.
    - batches, exists, list: as thread-safe as the connector (every omniconn connector is).
    - omc_stream_writer: send and send_at may be called from several threads (concurrent sends
      take turns; send_at calls run in parallel, for chunks produced in parallel). finish and
      fail go after the last send has returned; destroy must not race with anything.
    - omc_stream_reader: one consumer thread at a time.

================================================================================================
DEPENDENCIES & LINKING
================================================================================================

    omniconn.h and omniconn_shm.h (pthreads, -ldl; libzmq is loaded at run time by remote
    connectors); with OMNICONN_PIPELINE_NO_CONFIG, omniconn.h alone. The YAML and JSON
    readers are part of this file. The port table needs the remote connector's omc_port_compute
    (compiled with ZMQ). omc_pipeline_connect creates shared-memory connectors, so this file
    includes omniconn_shm.h (declarations and, in the implementation file, its implementation).
    RDMA edges use omniconn_rdma.h's connector (omc_rdma_pipeline_connector): named in
    desc.rdma_connector, or offered by omniconn_rdma.h's implementation when the program has it
    (include order does not matter); without either such edges fail with OMC_ERR_UNAVAILABLE
    and a log line saying what to include. omniconn_rdma.h needs the verbs headers to build.

================================================================================================
FORMATS
================================================================================================

    The configuration language: the YAML subset these files use, or JSON (RFC 8259).
      YAML: block mappings and sequences by indentation (spaces only), "- key: value" items,
      comments, flow collections [...] and {...} (nested, on one or several lines), scalars:
      plain, 'single' ('' is a quote), "double" with the escapes \0 \a \b \t \n \v \f \r \e \"
      \/ \\ \N \_ \L \P \xHH \uHHHH \UHHHHHHHH and a space or tab after \. Plain scalars resolve
      by the YAML 1.2 core schema: null ~ Null NULL (and an empty value), true/false (and the
      True/TRUE spellings), integers (decimal, 0x hex, 0o octal; must fit 64 bits), floats
      (1.5, 2e9, .inf, .nan); anything else is a string. Quoted scalars are always strings.
      A "---" start and a "..." end marker are allowed around the one document.
      Not supported (OMC_CONFIG_ERR_UNSUPPORTED): anchors, aliases, tags, block scalars (| >),
      complex keys (?), directives (%), several documents, multi-line plain or quoted scalars.
      Strings may not contain NUL. Floats are read with strtod (C locale assumed).
      Format choice: OMC_CONFIG_FORMAT_YAML / _JSON in the desc, else the file extension (.json,
      .yaml, .yml), else the content: JSON if the first non-blank character is '{' or '['.

    Stream keys: chunk i of key K is put under "K#<T>#<i>" and its control record under
    "K#<T>#c<i>", T the stream's token (32 lowercase hex digits: 128 bits from getrandom), i in
    decimal without leading zeros; both are qualified by the stage names as usual, so the key K
    plus 55 bytes must fit (OMC_ERR_INVALID_ARG at create otherwise).

    Stream control record, version 1 (all integers little-endian):
        0   u32  magic 0x53434D4F ("OMCS")
        4   u8   version (1)
        5   u8   flags: bit 0 END (last record), bit 1 ERROR (producer failed), bit 2 DATA
                 (a chunk is stored under the chunk key); other bits zero
        6   u16  error text length in bytes (0..255; 0 unless ERROR)
        8   u64  chunk index
        16  u64  chunk size in bytes (0 unless DATA)
        24  i32  error code (the producer's; 0 unless ERROR)
        28  u32  chunk metadata length (0..OMC_META_MAX_SIZE; 0 unless DATA)
        32  u32  CRC-32C of the whole record with this field zero
        36  u32  reserved, zero
        40  ...  chunk metadata (the envelope put() returned for the chunk), then the error text
      END may be set together with DATA (the last chunk carries data) or alone (a control-only
      end record at the index after the last chunk). ERROR is always alone.

    Transfer ids: "xfer-" followed by a random (version 4) UUID in lowercase 8-4-4-4-12 form.

================================================================================================
NON-GOALS
================================================================================================

    - Not a YAML library: the subset above, enough for pipeline configs, with clear errors
      outside it. No document is written back.
    - No process launching: omc_pipeline_connect creates one stage's connectors in the process
      you started for it.
    - Ports are compared as numbers on equal host strings: "auto" equals only "auto". The
      loader cannot know which stages share a machine.

================================================================================================
RECENT REVISIONS
================================================================================================

    0.1.0 (2026-11-22)  first release: configuration loader, ports, transfer-id map, batches,
                        exists/list (same-process connector), streams, omc_pipeline_connect.
                        Edges: CURVE key files and an allow-list in the config and the connect
                        desc; a non-loopback listener without CURVE needs insecure: true.
                        Stream keys carry a 128-bit token the reader is given (desc.token).

LICENSE: see the end of this file (MIT or public domain, your choice).
*/
#ifndef OMNICONN_PIPELINE_H_INCLUDED
#define OMNICONN_PIPELINE_H_INCLUDED

#include "omniconn.h"

#if !defined(OMC__COMPANION_INTERFACE) || OMC__COMPANION_INTERFACE != 0x0001
    #error "omniconn_pipeline.h 0.1 uses the companion interface of omniconn.h 0.1: take both headers from the same 0.1.x release."
#endif

/* The port scheme belongs to the remote connector (omc_port_compute, declared with the ZMQ
   transport in omniconn.h). Without ZMQ, configs list no ports (there are no TCP/RDMA
   transports). */
#if OMC__HAS_ZMQ && defined(OMC_TCP_HOST_MAX)
    #define OMC__PIPELINE_PORTS 1
#else
    #define OMC__PIPELINE_PORTS 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(OMNICONN_PIPELINE_NO_CONFIG)   /* the configuration file, its loader and the port table */

/* ============================================================================================== */
/* [SECTION] Configuration: diagnostics                                                          */
/* ============================================================================================== */

/* What a load error or warning is about. One list, so names and texts never disagree. */
#define OMC__CONFIG_CODES(X) \
    X(OMC_CONFIG_OK,                     "ok") \
    X(OMC_CONFIG_ERR_IO,                 "the configuration file cannot be read") \
    X(OMC_CONFIG_ERR_SYNTAX,             "malformed YAML or JSON") \
    X(OMC_CONFIG_ERR_UNSUPPORTED,        "YAML feature outside the supported subset") \
    X(OMC_CONFIG_ERR_DUPLICATE_KEY,      "a mapping has the same key twice") \
    X(OMC_CONFIG_ERR_LIMIT,              "a size, nesting or count limit was exceeded") \
    X(OMC_CONFIG_ERR_TYPE,               "a value has the wrong type") \
    X(OMC_CONFIG_ERR_VALUE,              "a value is out of range or not an allowed word") \
    X(OMC_CONFIG_ERR_MISSING,            "a required key is missing") \
    X(OMC_CONFIG_ERR_UNKNOWN_TYPE,       "a connector's name is not a known connector type") \
    X(OMC_CONFIG_ERR_UNKNOWN_CONNECTOR,  "an edge names a connector that is not defined") \
    X(OMC_CONFIG_ERR_UNKNOWN_STAGE,      "an edge names a stage that stage_args does not define") \
    X(OMC_CONFIG_ERR_BAD_EDGE,           "an edge key is not from_stage_<id> / to_stage_<id>, or loops") \
    X(OMC_CONFIG_ERR_DUPLICATE_STAGE,    "two stages have the same stage_id") \
    X(OMC_CONFIG_ERR_TYPE_MISMATCH,      "the two ends of an edge name connectors of different types") \
    X(OMC_CONFIG_ERR_PORT_RANGE,         "a computed port is outside 1..65535") \
    X(OMC_CONFIG_ERR_PORT_COLLISION,     "two listeners would use the same port") \
    X(OMC_CONFIG_ERR_NO_MEMORY,          "out of host memory") \
    X(OMC_CONFIG_WARN_UNKNOWN_KEY,       "unknown key (ignored)") \
    X(OMC_CONFIG_WARN_IGNORED_KEY,       "key is set by the runtime, the value in the file is ignored") \
    X(OMC_CONFIG_WARN_CONNECTOR_CONFLICT,"the ends of an edge name different connectors of one type")

typedef enum omc_config_code {
#define OMC__X(name, text) name,
    OMC__CONFIG_CODES(OMC__X)
#undef OMC__X
    OMC_CONFIG_CODE_COUNT
} omc_config_code;

/* "OMC_CONFIG_ERR_TYPE_MISMATCH" / its one-line description; never NULL. */
OMNICONN_API const char* omc_config_code_name(omc_config_code code);
OMNICONN_API const char* omc_config_code_str(omc_config_code code);

/* One error or warning. line and column are 1-based (column in bytes); 0 when there is no
   position (an I/O error, a limit on the whole file). */
typedef struct omc_config_diag {
    omc_config_code code;
    omc_result result;              /* the omc_result the load returned (OMC_OK for warnings) */
    uint32_t line, column;
    char message[384];              /* "<file>:<line>:<column>: <what, and how to fix it>" */
} omc_config_diag;

/* ============================================================================================== */
/* [SECTION] Configuration: loading                                                              */
/* ============================================================================================== */

typedef enum omc_config_format {
    OMC_CONFIG_FORMAT_AUTO = 0,     /* extension (.json / .yaml / .yml), else '{' or '[' first = JSON */
    OMC_CONFIG_FORMAT_YAML,
    OMC_CONFIG_FORMAT_JSON
} omc_config_format;

typedef struct omc_pipeline_config_desc {
    omc_config_format format;
    const char* name;               /* file name in messages; NULL = the path, or "<string>" */
    int skip_port_check;            /* list ports but do not fail on collisions (a doctor tool) */
    omc_hooks hooks;
} omc_pipeline_config_desc;

typedef struct omc_pipeline_config omc_pipeline_config;

/* Read, parse and resolve a configuration file. desc may be NULL (all defaults).
   On success *out is the config (destroy it). On failure *out is NULL, the result says what kind
   of failure (see ERRORS & LOGGING) and, if error is not NULL, *error says where and why.
   Thread safety: reentrant. */
OMNICONN_API omc_result omc_pipeline_config_load_file(const char* path, const omc_pipeline_config_desc* desc,
                                                      omc_pipeline_config** out, omc_config_diag* error);
/* The same from len bytes of text (no terminator needed; a NUL byte inside is a syntax error). */
OMNICONN_API omc_result omc_pipeline_config_load_string(const char* text, size_t len, const omc_pipeline_config_desc* desc,
                                                        omc_pipeline_config** out, omc_config_diag* error);
OMNICONN_API void       omc_pipeline_config_destroy(omc_pipeline_config* cfg);
/* Warnings found while loading (every one is also logged). The count includes warnings beyond
   OMNICONN_PIPELINE_MAX_WARNINGS, which are logged but not kept (then OMC_ERR_NOT_FOUND). */
OMNICONN_API uint32_t   omc_pipeline_config_warning_count(const omc_pipeline_config* cfg);
OMNICONN_API omc_result omc_pipeline_config_warning(const omc_pipeline_config* cfg, uint32_t index, omc_config_diag* out);

/* ============================================================================================== */
/* [SECTION] Configuration: the resolved pipeline                                                */
/* ============================================================================================== */

#define OMC_PIPELINE_DEFAULT_ZMQ_PORT       50051
#define OMC_PIPELINE_DEFAULT_POOL_CPU       ((uint64_t)4 << 30)    /* 4 GiB of pinned host memory */
#define OMC_PIPELINE_DEFAULT_POOL_CUDA      ((uint64_t)2 << 30)    /* 2 GiB of device memory */
#define OMC_PIPELINE_DEFAULT_SHM_THRESHOLD  65536
#define OMC_PIPELINE_MAX_STAGE_ID           65535

typedef enum omc_connector_type {
    OMC_CONNECTOR_DEFAULT = 0,      /* never in a resolved spec (edges default to SHM) */
    OMC_CONNECTOR_SHM,              /* "SharedMemoryConnector" (alias "shm") */
    OMC_CONNECTOR_MOONCAKE,         /* "MooncakeTransferEngineConnector" (alias "rdma"): RDMA or TCP by protocol */
    OMC_CONNECTOR_TCP,              /* "TcpConnector" (alias "tcp") */
    OMC_CONNECTOR_LOCAL             /* "LocalConnector" (alias "local"): stages in one process */
} omc_connector_type;

/* vLLM-Omni's spelling of a type ("SharedMemoryConnector"); never NULL. */
OMNICONN_API const char* omc_connector_type_name(omc_connector_type type);

/* A connector spec with every option resolved (strings live as long as the config). */
typedef struct omc_connector_spec {
    const char* name;               /* key under runtime.connectors, "stage<N>.<edge key>" for an
                                       inline spec, "auto_shm" for the auto-filled one */
    const char* type_name;          /* the name: value as written */
    omc_connector_type type;
    omc_transport transport;        /* what carries the bytes: SHM, TCP, RDMA or LOCAL */
    const char* host;               /* "auto" = detect at connect time */
    uint32_t zmq_port;              /* the base port; per-edge ports: omc_pipeline_config_port */
    const char* protocol;           /* "rdma" or "tcp" (MOONCAKE), "tcp" (TCP), "" otherwise
                                       unless the file sets it */
    const char* device_name;        /* "" = auto-detect; may be a comma-separated list */
    uint64_t memory_pool_size;
    omc_memory_kind memory_pool_device;     /* OMC_MEMORY_HOST ("cpu") or OMC_MEMORY_CUDA ("cuda") */
    uint64_t shm_threshold_bytes;
    int auto_filled;                /* 1 for "auto_shm" */
    uint32_t line, column;          /* where it is defined (0 for auto_shm) */
    /* CURVE on the side channel of TCP/RDMA edges (see omc_pipeline_connect). NULL = not set;
       a relative path is taken relative to the configuration file's directory. */
    const char* curve_server_public_key_file;   /* receivers: the senders' public key */
    const char* curve_server_secret_key_file;   /* senders: their secret key (turns CURVE on) */
    const char* curve_client_secret_key_file;   /* receivers: their own secret key */
    const char* curve_allowed_clients_file;     /* senders: receiver public keys let in, one a line */
    int insecure;                   /* insecure: true - a sender may listen on a non-loopback
                                       address without CURVE (logged at WARN) */
} omc_connector_spec;

typedef struct omc_pipeline_stage {
    int stage_id;
    omc_role role;                  /* RECEIVER: inbound edges only, SENDER: outbound only, DUAL:
                                       both, DEFAULT: no edges at all */
    uint32_t inbound, outbound;     /* edge counts */
    uint32_t tp_size, dp_size;      /* engine_args.tensor_parallel_size / data_parallel_size (1) */
    uint32_t line, column;
} omc_pipeline_stage;

#define OMC_EDGE_DECLARED_BY_SENDER    0x1u    /* the upstream stage's output_connectors names it */
#define OMC_EDGE_DECLARED_BY_RECEIVER  0x2u    /* the downstream stage's input_connectors names it */

typedef struct omc_pipeline_edge {
    int from_stage, to_stage;
    uint32_t connector;             /* index for omc_pipeline_config_connector */
    const char* connector_name;
    omc_connector_type type;
    omc_transport transport;
    uint32_t declared;              /* OMC_EDGE_DECLARED_* bits; 0 = topology only (auto SHM) */
    uint32_t line, column;          /* its first mention in the file */
} omc_pipeline_edge;

/* Stages sorted by stage_id, edges by (from_stage, to_stage), connectors in file order (the
   auto-filled one last). index >= count gives OMC_ERR_NOT_FOUND. */
OMNICONN_API uint32_t   omc_pipeline_config_stage_count(const omc_pipeline_config* cfg);
OMNICONN_API omc_result omc_pipeline_config_stage(const omc_pipeline_config* cfg, uint32_t index, omc_pipeline_stage* out);
OMNICONN_API omc_result omc_pipeline_config_find_stage(const omc_pipeline_config* cfg, int stage_id, omc_pipeline_stage* out);
OMNICONN_API uint32_t   omc_pipeline_config_edge_count(const omc_pipeline_config* cfg);
OMNICONN_API omc_result omc_pipeline_config_edge(const omc_pipeline_config* cfg, uint32_t index, omc_pipeline_edge* out);
OMNICONN_API omc_result omc_pipeline_config_find_edge(const omc_pipeline_config* cfg, int from_stage, int to_stage, omc_pipeline_edge* out);
OMNICONN_API uint32_t   omc_pipeline_config_connector_count(const omc_pipeline_config* cfg);
OMNICONN_API omc_result omc_pipeline_config_connector(const omc_pipeline_config* cfg, uint32_t index, omc_connector_spec* out);
/* The role stage_id plays on edge e: SENDER (it is from_stage), RECEIVER (to_stage), else DEFAULT.
   The connector a stage creates takes the stage's role (omc_pipeline_stage.role): a dual stage's
   connector both receives and sends. */
OMNICONN_API omc_role   omc_pipeline_edge_role(const omc_pipeline_edge* e, int stage_id);

typedef enum omc_config_kind {
    OMC_CONFIG_NULL = 0,
    OMC_CONFIG_BOOL,
    OMC_CONFIG_INT,
    OMC_CONFIG_FLOAT,
    OMC_CONFIG_STRING,
    OMC_CONFIG_MAPPING,
    OMC_CONFIG_SEQUENCE
} omc_config_kind;

/* One value of the document as written. */
typedef struct omc_config_value {
    omc_config_kind kind;
    int boolean;
    int64_t integer;
    double number;                  /* FLOAT, and INT converted */
    const char* string;             /* STRING: NUL-terminated, lives as long as the config */
    uint32_t length;                /* STRING: bytes; MAPPING/SEQUENCE: entries */
    uint32_t line, column;
} omc_config_value;

/* Any key of connector `connector`'s extra mapping as written - also keys omniconn does not know
   (a transport's own options). OMC_ERR_NOT_FOUND if the key is absent. */
OMNICONN_API omc_result omc_pipeline_connector_option(const omc_pipeline_config* cfg, uint32_t connector, const char* key,
                                                      omc_config_value* out);

/* ============================================================================================== */
/* [SECTION] Ports                                                                               */
/* ============================================================================================== */

/* The port-offset scheme itself is the remote connector's omc_port_compute() (omc_port_spec,
   omc_port_purpose; declared with the ZMQ transport in omniconn.h): the loader calls it for every
   listener of every TCP/RDMA edge. Built with OMNICONN_NO_ZMQ there are no such transports, and
   a config's port table stays empty. */

/* One port a loaded config's TCP/RDMA edges listen on. */
typedef struct omc_port_use {
    uint16_t port;
    const char* host;               /* the connector's host string */
    uint32_t edge;                  /* index for omc_pipeline_config_edge */
    int from_stage, to_stage;
    uint32_t purpose;               /* omc_port_purpose: 0 request forwarding, 100 KV transfer */
    uint32_t dp_index, tp_rank;
    int orchestrator;
} omc_port_use;

/* Sorted by (host, port). Edges from one stage over one connector share their listeners (keys are
   stage-qualified), so such an entry appears once, under the first of those edges. */
OMNICONN_API uint32_t   omc_pipeline_config_port_count(const omc_pipeline_config* cfg);
OMNICONN_API omc_result omc_pipeline_config_port(const omc_pipeline_config* cfg, uint32_t index, omc_port_use* out);

#endif /* !OMNICONN_PIPELINE_NO_CONFIG */

/* ============================================================================================== */
/* [SECTION] Transfer ids                                                                        */
/* ============================================================================================== */

#define OMC_XFER_ID_PREFIX  "xfer-"
#define OMC_XFER_ID_SIZE    42          /* "xfer-" + 36-character UUID + terminator */
#define OMC_XFER_MAX_ID     256         /* longest id of either domain, terminator included */

/* A fresh transfer id, "xfer-" + a random UUID (omc__random_bytes). Thread-safe. */
OMNICONN_API omc_result omc_xfer_id_generate(char out[OMC_XFER_ID_SIZE]);

typedef struct omc_xfer_map omc_xfer_map;

/* Told about every entry dropped by the TTL (runs outside the map's lock: you may call the map). */
typedef void (*omc_xfer_expired_fn)(const char* transfer_id, const char* request_id, void* user_data);

typedef struct omc_xfer_map_desc {
    int64_t ttl_ms;                 /* drop entries not completed after this; 0 = OMNICONN_XFER_TTL_MS,
                                       < 0 = never */
    omc_xfer_expired_fn on_expired; /* optional */
    void* user_data;                /* for on_expired */
    omc_hooks hooks;
} omc_xfer_map_desc;

OMNICONN_API omc_result omc_xfer_map_create(const omc_xfer_map_desc* desc, omc_xfer_map** out);
OMNICONN_API void       omc_xfer_map_destroy(omc_xfer_map* map);
/* A transfer starts: transfer_id <-> request_id. Both non-empty, shorter than OMC_XFER_MAX_ID.
   OMC_ERR_EXISTS if either id is already mapped (one transfer per request at a time). */
OMNICONN_API omc_result omc_xfer_map_begin(omc_xfer_map* map, const char* transfer_id, const char* request_id);
/* Translate without changing anything. OMC_ERR_NOT_FOUND if unmapped, OMC_ERR_TOO_LARGE if the id
   does not fit out_size (terminator included). */
OMNICONN_API omc_result omc_xfer_map_request_id(omc_xfer_map* map, const char* transfer_id, char* out, size_t out_size);
OMNICONN_API omc_result omc_xfer_map_transfer_id(omc_xfer_map* map, const char* request_id, char* out, size_t out_size);
/* The transfer finished (a completion arrived under transfer_id): returns the local request id
   and removes the pair, in one step. A second completion for the same id is OMC_ERR_NOT_FOUND.
   OMC_ERR_TOO_LARGE (out too small) leaves the entry in place. */
OMNICONN_API omc_result omc_xfer_map_complete(omc_xfer_map* map, const char* transfer_id, char* request_id_out, size_t out_size);
/* The request was aborted locally: remove its pair (OMC_ERR_NOT_FOUND if none). */
OMNICONN_API omc_result omc_xfer_map_abort(omc_xfer_map* map, const char* request_id);
/* Live pairs (for tests and metrics). */
OMNICONN_API uint64_t   omc_xfer_map_count(omc_xfer_map* map);
/* Drop pairs older than the TTL now (begin also does it, at most once a second); returns how many. */
OMNICONN_API uint64_t   omc_xfer_map_sweep(omc_xfer_map* map);

/* ============================================================================================== */
/* [SECTION] Streams                                                                             */
/* ============================================================================================== */

#define OMC_STREAM_MAGIC        0x53434D4Fu     /* "OMCS" */
#define OMC_STREAM_VERSION      1
#define OMC_STREAM_HEADER_SIZE  40
#define OMC_STREAM_MAX_TEXT     255
#define OMC_STREAM_END          0x1u    /* the last record of the stream */
#define OMC_STREAM_ERROR        0x2u    /* the producer failed (error code and text, no data) */
#define OMC_STREAM_DATA         0x4u    /* a chunk is stored under the chunk key */

#define OMC_STREAM_TOKEN_SIZE   33      /* 32 lowercase hex digits (128 random bits) + terminator */

typedef struct omc_stream_desc {
    int64_t ttl_ms;                 /* of the writer's puts; 0 = the connector's default */
    const char* token;              /* the stream's unguessable part, carried by every key of
                                       the stream (see FORMATS). Writer: NULL = a fresh one
                                       (omc_stream_writer_token tells it), or one agreed in
                                       advance (omc_stream_token_generate). Reader: required,
                                       the writer's token, received from the producing stage
                                       the way put()'s metadata is */
    omc_hooks hooks;
} omc_stream_desc;

/* A fresh stream token: 128 bits from the library's randomness, as 32 lowercase hex digits.
   For an orchestrator that hands the same token to a writer and its reader up front. */
OMNICONN_API omc_result omc_stream_token_generate(char out[OMC_STREAM_TOKEN_SIZE]);

typedef struct omc_stream_writer omc_stream_writer;
typedef struct omc_stream_reader omc_stream_reader;

/* A producer for request key `key` on the edge from_stage -> to_stage of conn (which must be able
   to put). desc may be NULL. The key must leave room for the chunk suffix (see FORMATS). */
OMNICONN_API omc_result omc_stream_writer_create(omc_conn* conn, const char* from_stage, const char* to_stage,
                                                 const char* key, const omc_stream_desc* desc, omc_stream_writer** out);
/* Send the next chunk (index 0, 1, 2, ...): stage the bytes (waiting until deadline for pool
   space), then publish the control record - before waiting for anything else. flags may be
   OMC_STREAM_END (this is the last chunk). A zero-copy payload (p->buffer) is handed over as in
   omc_conn_put. OMC_ERR_CLOSED after the stream ended or failed. */
OMNICONN_API omc_result omc_stream_send(omc_stream_writer* w, const omc_payload* p, uint32_t flags, omc_time_ns deadline);
/* Send chunk `index` (producers that finish chunks out of order; each index once). Do not mix
   with omc_stream_send. */
OMNICONN_API omc_result omc_stream_send_at(omc_stream_writer* w, uint64_t index, const omc_payload* p, uint32_t flags,
                                           omc_time_ns deadline);
/* End the stream with a control-only END record after the highest chunk sent. */
OMNICONN_API omc_result omc_stream_finish(omc_stream_writer* w, omc_time_ns deadline);
/* Fail the stream: a control-only ERROR record (code, text up to 255 bytes) after the highest
   chunk sent. The reader gets OMC_ERR_REMOTE with both. */
OMNICONN_API omc_result omc_stream_fail(omc_stream_writer* w, int32_t code, const char* text, omc_time_ns deadline);
/* The writer's token (desc.token, or the one it generated): give it to the reader's stage. */
OMNICONN_API omc_result omc_stream_writer_token(const omc_stream_writer* w, char out[OMC_STREAM_TOKEN_SIZE]);
/* Take back every chunk and record this writer put that no reader has taken (the abort path). */
OMNICONN_API void       omc_stream_writer_abort(omc_stream_writer* w);
/* Free the writer. What it sent stays for the reader (abort first to drop it). */
OMNICONN_API void       omc_stream_writer_destroy(omc_stream_writer* w);

typedef struct omc_stream_chunk {
    uint64_t index;
    uint32_t flags;                 /* OMC_STREAM_DATA, OMC_STREAM_END, OMC_STREAM_ERROR */
    omc_buffer buffer;              /* DATA: the chunk (release it); empty otherwise */
    int32_t error;                  /* ERROR: the producer's code */
    char text[OMC_STREAM_MAX_TEXT + 1];     /* ERROR: the producer's message */
} omc_stream_chunk;

/* A consumer of the stream for `key` on the edge (conn must be able to get). desc->token must be
   the writer's token (OMC_ERR_INVALID_ARG without one: a reader cannot find the keys). */
OMNICONN_API omc_result omc_stream_reader_create(omc_conn* conn, const char* from_stage, const char* to_stage,
                                                 const char* key, const omc_stream_desc* desc, omc_stream_reader** out);
/* The next chunk in index order. OMC_OK: out holds it (flags END: the last one; an END without
   DATA has an empty buffer). OMC_ERR_REMOTE: the producer failed (out->error, out->text).
   OMC_ERR_TIMEOUT: not there yet - call again, nothing is lost. OMC_ERR_CLOSED: the stream is
   over. OMC_ERR_MALFORMED: a control record failed validation (the stream cannot continue). */
OMNICONN_API omc_result omc_stream_next(omc_stream_reader* r, omc_time_ns deadline, omc_stream_chunk* out);
OMNICONN_API void       omc_stream_reader_destroy(omc_stream_reader* r);

/* The control record as values (pointers into the record you decoded). */
typedef struct omc_stream_record {
    uint64_t index;
    uint32_t flags;
    int32_t error;
    uint64_t data_size;
    const uint8_t* meta;            /* the chunk's metadata envelope */
    uint32_t meta_len;
    const char* text;               /* NOT NUL-terminated */
    uint32_t text_len;
} omc_stream_record;

/* Bytes the encoding of rec takes. */
OMNICONN_API size_t     omc_stream_record_size(const omc_stream_record* rec);
/* Encode into out (out_size >= omc_stream_record_size). OMC_ERR_INVALID_ARG for a record that
   breaks the rules in FORMATS. For runtimes that carry records over their own control plane. */
OMNICONN_API omc_result omc_stream_record_encode(const omc_stream_record* rec, void* out, size_t out_size, size_t* out_len);
/* Validate (every length, flag combination, CRC) and decode. Pure. */
OMNICONN_API omc_result omc_stream_record_decode(const void* data, size_t size, omc_stream_record* out);

#if !defined(OMNICONN_PIPELINE_NO_CONFIG)

/* ============================================================================================== */
/* [SECTION] Connecting a stage                                                                  */
/* ============================================================================================== */

/* What the configuration file cannot know: which process this is, and local choices. */
/* What makes an RDMA edge's connector (omniconn_rdma.h: omc_rdma_pipeline_connector). */
struct omc_tcp_desc;
typedef omc_result (*omc_pipeline_rdma_fn)(const struct omc_tcp_desc* net, const char* device_name, const char* local_addr,
                                           int require_rdma, omc_conn** out);

typedef struct omc_pipeline_connect_desc {
    const char* channel;            /* SHM: the pipeline's name, the same in every stage (1..32 of
                                       [A-Za-z0-9_.]); NULL = the connector's default ("default") */
    const char* shm_dir;            /* SHM: NULL = /dev/shm */
    uint64_t pool_size;             /* 0 = memory_pool_size if the file sets it, else the
                                       connector's own default (SHM 256 MiB, TCP 1 GiB of address
                                       space); RDMA: memory_pool_size always (vLLM-Omni's 4 GiB
                                       default is for its pinned pools) */
    uint32_t purpose;               /* TCP/RDMA: which of the stage's listeners, an
                                       omc_port_purpose (0 = request forwarding, vLLM-Omni's
                                       stage-to-stage purpose; 100 = KV transfer) */
    uint32_t dp_index, tp_rank;     /* TCP/RDMA: this process's replica and rank in its stage
                                       (0 and 0 are valid: the first) */
    const char* sender_host;        /* TCP/RDMA receivers: where the upstream senders listen;
                                       NULL = the spec's host ("auto" = omc_detect_host, i.e. the
                                       senders run on this host; vLLM-Omni's injected sender_host) */
    int rdma_fallback_tcp;          /* 1: an RDMA edge whose RDMA engine cannot start here (no
                                       device, no libibverbs, memlock) runs over TCP (logged);
                                       0: creating its connector fails */
    int64_t default_ttl_ms;         /* of the connector's puts; 0 = the connector's default */
    omc_hooks hooks;                /* for the connector, and for the log lines of this call */
    omc_pipeline_rdma_fn rdma_connector;    /* RDMA edges: omniconn_rdma.h's
                                       omc_rdma_pipeline_connector, or your own; NULL = the one
                                       this program's omniconn_rdma.h implementation offers (any
                                       include order); none: RDMA edges fail, saying so */
    /* CURVE for TCP/RDMA edges: each overrides the extra key of the same name (NULL = the
       file's; see omc_pipeline_connect for which keys a sender and a receiver read). */
    const char* curve_server_public_key_file;
    const char* curve_server_secret_key_file;
    const char* curve_client_secret_key_file;
    const char* curve_allowed_clients_file;
    int insecure;                   /* 1: as insecure: true in the file (a listener on a
                                       non-loopback address without CURVE is allowed, with a WARN) */
} omc_pipeline_connect_desc;

/* Create the connector stage `stage_id` uses on edge `edge` (an index for
   omc_pipeline_config_edge), from the edge's connector spec:
     SharedMemoryConnector            -> omc_shm_create (shm_threshold_bytes = inline_threshold;
                                         0 = never inline; above OMC_SHM_MAX_INLINE: capped, WARN)
     TcpConnector, Mooncake/tcp       -> omc_tcp_create: a sending stage listens on its port from
                                         omc_pipeline_config_port (desc purpose, dp_index, tp_rank)
                                         and advertises the spec's host ("auto" = detected); a
                                         receiving stage registers every upstream sender of this
                                         spec as "stage<id>" (omc_tcp_add_sender) at the same
                                         purpose/replica/rank (rank modulo the sender's TP size),
                                         so metadata-less gets and streams work
     Mooncake/rdma                    -> omc_rdma_connector_create (desc.rdma_connector, or
                                         omniconn_rdma.h in the program): the TCP mapping plus the engine
                                         on device_name ("" = the first ACTIVE one), its GID chosen
                                         for the host; pool = memory_pool_size (vLLM-Omni's 4 GiB
                                         by default: it is registered, mind the memlock limit).
                                         Without omniconn_rdma.h: OMC_ERR_UNAVAILABLE, saying so
     LocalConnector                   -> omc_local_create (one process: give the SAME handle to
                                         both stages; a second call makes a second, separate one)
   ONE connector serves every edge of the stage over the same spec (omc_pipeline_edge.connector):
   its keys are stage-qualified, and a TCP sender has one listener per stage and spec. So call
   this once per spec and reuse the handle for the stage's other edges on it. The role is the
   stage's role on those edges: SENDER if it only sends on them, RECEIVER if it only receives,
   DUAL if both (equal to omc_pipeline_stage.role when the stage uses one spec for everything).
   CURVE (TCP/RDMA): a sender reads curve_server_secret_key_file and curve_allowed_clients_file,
   a receiver curve_server_public_key_file and curve_client_secret_key_file (the desc's fields
   win over the spec's); a dual connector pulls with the server keypair, which the allow-list
   admits. A sender on a non-loopback host without CURVE is refused unless insecure (see STEP 6).
   desc may be NULL (all defaults). Returns OMC_ERR_INVALID_ARG (NULL cfg/out, stage not on the
   edge, dp_index/tp_rank outside the stage's engine_args, a listener on a non-loopback address
   without CURVE or insecure, a malformed key file or allow-list), OMC_ERR_NOT_FOUND (no such
   edge, a key file that cannot be opened),
   OMC_ERR_UNAVAILABLE (transport not compiled in or not usable here, a CUDA pool on a host-memory
   connector), or whatever the connector's create or omc_tcp_add_sender returns; every failure
   is logged with the edge, the spec and its position in the file. *out is NULL on failure.
   Thread safety: reentrant (the config is read only). */
OMNICONN_API omc_result omc_pipeline_connect(const omc_pipeline_config* cfg, uint32_t edge, int stage_id,
                                             const omc_pipeline_connect_desc* desc, omc_conn** out);

#endif /* !OMNICONN_PIPELINE_NO_CONFIG */

#ifdef __cplusplus
} /* extern "C" */
#endif

/* -------------------------------- stop here if you only need the API ------------------------- */
#endif /* OMNICONN_PIPELINE_H_INCLUDED */

/* ============================================================================================== */
/*                                                                                                */
/*                                     IMPLEMENTATION                                             */
/*                                                                                                */
/* ============================================================================================== */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_PIPELINE_IMPL_INCLUDED)
#define OMNICONN_PIPELINE_IMPL_INCLUDED

#if !defined(OMNICONN_IMPL_INCLUDED)
    #error "omniconn_pipeline.h: omniconn.h's implementation is missing: define OMNICONN_IMPLEMENTATION before the first omniconn header in this file."
#endif

/* ============================================================================================== */
/* [SECTION] Implementation: tunables                                                            */
/* ============================================================================================== */

#ifndef OMNICONN_PIPELINE_MAX_CONFIG_BYTES
    #define OMNICONN_PIPELINE_MAX_CONFIG_BYTES ((size_t)16 << 20)
#endif
#ifndef OMNICONN_PIPELINE_MAX_DEPTH
    #define OMNICONN_PIPELINE_MAX_DEPTH 64
#endif
#ifndef OMNICONN_PIPELINE_MAX_ENTRIES
    #define OMNICONN_PIPELINE_MAX_ENTRIES 4096
#endif
#ifndef OMNICONN_PIPELINE_MAX_WARNINGS
    #define OMNICONN_PIPELINE_MAX_WARNINGS 64
#endif
#ifndef OMNICONN_XFER_TTL_MS
    #define OMNICONN_XFER_TTL_MS 300000
#endif

#include <math.h>

/* Make room for one more element in a growable array *arrp of n elements (capacity *cap). */
OMC__PRIVATE int omc__vec_room(const omc_hooks* h, void* arrp, uint32_t n, uint32_t* cap, size_t elem) {
    void *old, *nd;
    uint32_t ncap;
    if (n < *cap) return 1;
    if (*cap >= (1u << 26)) return 0;
    ncap = *cap ? *cap * 2 : 8;
    nd = omc__malloc(h, (size_t)ncap * elem);
    if (!nd) return 0;
    memcpy(&old, arrp, sizeof(old));    /* arrp is the address of a T* */
    if (n) memcpy(nd, old, (size_t)n * elem);
    omc__free(h, old);
    memcpy(arrp, &nd, sizeof(nd));
    *cap = ncap;
    return 1;
}

#if !defined(OMNICONN_PIPELINE_NO_CONFIG)   /* the YAML/JSON reader and the configuration object */

/* ============================================================================================== */
/* [SECTION] Implementation: diagnostics                                                         */
/* ============================================================================================== */

OMNICONN_API const char* omc_config_code_name(omc_config_code code) {
    switch (code) {
#define OMC__X(name, text) case name: return #name;
        OMC__CONFIG_CODES(OMC__X)
#undef OMC__X
        default: return "OMC_CONFIG_UNKNOWN";
    }
}

OMNICONN_API const char* omc_config_code_str(omc_config_code code) {
    switch (code) {
#define OMC__X(name, text) case name: return text;
        OMC__CONFIG_CODES(OMC__X)
#undef OMC__X
        default: return "unknown configuration code";
    }
}

/* The omc_result a load returns for each error code. */
OMC__PRIVATE omc_result omc__config_result(omc_config_code code) {
    switch (code) {
        case OMC_CONFIG_OK: return OMC_OK;
        case OMC_CONFIG_ERR_IO: return OMC_ERR_SYSTEM;
        case OMC_CONFIG_ERR_SYNTAX: case OMC_CONFIG_ERR_UNSUPPORTED: case OMC_CONFIG_ERR_DUPLICATE_KEY: return OMC_ERR_MALFORMED;
        case OMC_CONFIG_ERR_LIMIT: case OMC_CONFIG_ERR_PORT_RANGE: return OMC_ERR_TOO_LARGE;
        case OMC_CONFIG_ERR_TYPE: return OMC_ERR_TYPE;
        case OMC_CONFIG_ERR_UNKNOWN_TYPE: case OMC_CONFIG_ERR_UNKNOWN_CONNECTOR: case OMC_CONFIG_ERR_UNKNOWN_STAGE: return OMC_ERR_NOT_FOUND;
        case OMC_CONFIG_ERR_NO_MEMORY: return OMC_ERR_NO_MEMORY;
        default: return code >= OMC_CONFIG_WARN_UNKNOWN_KEY ? OMC_OK : OMC_ERR_INVALID_ARG;
    }
}

/* Fill a diag: "<name>:<line>:<column>: <message>" (the position only when there is one). */
OMC__PRIVATE void omc__config_vdiag(omc_config_diag* d, const char* name, omc_config_code code, uint32_t line, uint32_t col,
                                    const char* fmt, va_list ap) {
    int n;
    d->code = code;
    d->result = omc__config_result(code);
    d->line = line;
    d->column = col;
    if (line) n = snprintf(d->message, sizeof(d->message), "%s:%u:%u: ", name, line, col);
    else n = snprintf(d->message, sizeof(d->message), "%s: ", name);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof(d->message)) vsnprintf(d->message + n, sizeof(d->message) - (size_t)n, fmt, ap);
}

/* ============================================================================================== */
/* [SECTION] Implementation: arena and document tree                                             */
/* ============================================================================================== */
/*
    The parsers build a tree of omc__cnode in an arena: a list of blocks from the hooks, freed in
    one go with the config. Nothing in the tree is ever freed on its own, so the parsers can bail
    out anywhere without cleanup. Every node knows where it starts (line, column), which is what
    every later error message points at. Mapping entries are nodes with a key attached.
*/

typedef struct omc__arena_block {
    struct omc__arena_block* next;
    size_t used, cap;
} omc__arena_block;

typedef struct omc__arena {
    omc_hooks hooks;
    omc__arena_block* head;
} omc__arena;

#define OMC__ARENA_BLOCK 16384u

OMC__PRIVATE void* omc__arena_alloc(omc__arena* a, size_t size) {
    omc__arena_block* b = a->head;
    size = (size + 7u) & ~(size_t)7u;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > OMC__ARENA_BLOCK ? size : OMC__ARENA_BLOCK;
        b = (omc__arena_block*)omc__malloc(&a->hooks, sizeof(omc__arena_block) + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    {
        void* p = (char*)(b + 1) + b->used;
        b->used += size;
        return p;
    }
}

OMC__PRIVATE void omc__arena_free(omc__arena* a) {
    while (a->head) {
        omc__arena_block* next = a->head->next;
        omc__free(&a->hooks, a->head);
        a->head = next;
    }
}

OMC__PRIVATE char* omc__arena_strndup(omc__arena* a, const char* s, size_t n) {
    char* p = (char*)omc__arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

typedef struct omc__cnode {
    omc_config_kind kind;
    uint32_t line, col;
    int boolean;
    int64_t integer;
    double number;
    const char* str;                /* STRING (NUL-terminated) */
    uint32_t len;                   /* STRING bytes / container entries */
    struct omc__cnode* first;       /* containers: entries in file order */
    struct omc__cnode* last;
    struct omc__cnode* next;        /* the next entry of the parent */
    const char* key;                /* mapping entries: the key (NUL-terminated) */
    uint32_t key_len, key_line, key_col;
} omc__cnode;

/* ============================================================================================== */
/* [SECTION] Implementation: the parser core (positions, errors, scalars, escapes)               */
/* ============================================================================================== */

typedef struct omc__cparse {
    const char* s;
    size_t n, i;
    uint32_t line;
    size_t line_start;              /* offset of the current line's first byte */
    omc__arena* arena;
    const char* name;
    omc_config_diag* err;
    int failed;
} omc__cparse;

#define omc__cp_col(p) ((uint32_t)((p)->i - (p)->line_start + 1))

/* Record the first error only; returns NULL so parsers can `return omc__cp_fail(...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
OMC__PRIVATE omc__cnode* omc__cp_fail(omc__cparse* p, omc_config_code code, uint32_t line, uint32_t col, const char* fmt, ...) {
    va_list ap;
    if (p->failed) return NULL;
    p->failed = 1;
    va_start(ap, fmt);
    omc__config_vdiag(p->err, p->name, code, line, col, fmt, ap);
    va_end(ap);
    return NULL;
}
#define omc__cp_fail_here(p, code, ...) omc__cp_fail((p), (code), (p)->line, omc__cp_col(p), __VA_ARGS__)

OMC__PRIVATE omc__cnode* omc__cp_node(omc__cparse* p, omc_config_kind kind, uint32_t line, uint32_t col) {
    omc__cnode* nd = (omc__cnode*)omc__arena_alloc(p->arena, sizeof(omc__cnode));
    if (!nd) return omc__cp_fail(p, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory while parsing");
    memset(nd, 0, sizeof(*nd));
    nd->kind = kind;
    nd->line = line;
    nd->col = col;
    return nd;
}

/* Find key in a mapping node (NULL if absent). */
OMC__PRIVATE const omc__cnode* omc__cnode_get(const omc__cnode* map, const char* key) {
    const omc__cnode* e;
    size_t len = strlen(key);
    if (!map || map->kind != OMC_CONFIG_MAPPING) return NULL;
    for (e = map->first; e; e = e->next)
        if (e->key_len == len && memcmp(e->key, key, len) == 0) return e;
    return NULL;
}

/* Append an entry; for mappings, refuse a duplicate key (the first one's position in the text). */
OMC__PRIVATE int omc__cp_append(omc__cparse* p, omc__cnode* parent, omc__cnode* child) {
    if (parent->len >= OMNICONN_PIPELINE_MAX_ENTRIES) {
        omc__cp_fail(p, OMC_CONFIG_ERR_LIMIT, child->line, child->col,
                     "more than %d entries in one %s (OMNICONN_PIPELINE_MAX_ENTRIES)", OMNICONN_PIPELINE_MAX_ENTRIES,
                     parent->kind == OMC_CONFIG_MAPPING ? "mapping" : "sequence");
        return 0;
    }
    if (parent->kind == OMC_CONFIG_MAPPING) {
        const omc__cnode* e;
        for (e = parent->first; e; e = e->next)
            if (e->key_len == child->key_len && memcmp(e->key, child->key, child->key_len) == 0) {
                omc__cp_fail(p, OMC_CONFIG_ERR_DUPLICATE_KEY, child->key_line, child->key_col,
                             "duplicate key '%s' (first defined at line %u:%u)", child->key, e->key_line, e->key_col);
                return 0;
            }
    }
    if (parent->last) parent->last->next = child;
    else parent->first = child;
    parent->last = child;
    parent->len++;
    return 1;
}

/* Advance over one line break ("\n" or "\r\n"). */
OMC__PRIVATE void omc__cp_newline(omc__cparse* p) {
    if (p->i < p->n && p->s[p->i] == '\r') p->i++;
    if (p->i < p->n && p->s[p->i] == '\n') p->i++;
    p->line++;
    p->line_start = p->i;
}

OMC__PRIVATE int omc__cp_at_eol(const omc__cparse* p) {
    return p->i >= p->n || p->s[p->i] == '\n' || (p->s[p->i] == '\r' && (p->i + 1 >= p->n || p->s[p->i + 1] == '\n'));
}

OMC__PRIVATE int omc__cp_is_space(char c) { return c == ' ' || c == '\t'; }

/* Append code point cp as UTF-8 to out. */
OMC__PRIVATE size_t omc__utf8_put(char* out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

OMC__PRIVATE int omc__hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Read `digits` hex digits at p->i + 1 (after the escape letter); -1 if they are not there. */
OMC__PRIVATE long omc__cp_hex(const omc__cparse* p, size_t at, int digits) {
    long v = 0;
    int k;
    for (k = 0; k < digits; k++) {
        int h = at + (size_t)k < p->n ? omc__hex_value(p->s[at + (size_t)k]) : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* A quoted scalar at p->i (' or "), on one line. yaml selects YAML's escape set (else JSON's).
   Produces a STRING node; the cursor ends after the closing quote. */
OMC__PRIVATE omc__cnode* omc__cp_quoted(omc__cparse* p, int yaml) {
    char q = p->s[p->i];
    uint32_t line = p->line, col = omc__cp_col(p);
    size_t start = ++p->i, o = 0;
    char* out;
    omc__cnode* nd;
    /* the raw length bounds the decoded one: no escape expands */
    size_t end = start;
    while (end < p->n && p->s[end] != '\n' && p->s[end] != '\r') end++;
    out = (char*)omc__arena_alloc(p->arena, end - start + 1);
    if (!out) return omc__cp_fail(p, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory while parsing");
    for (;;) {
        char c;
        if (p->i >= p->n || p->s[p->i] == '\n' || p->s[p->i] == '\r')
            return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, line, col,
                                "unterminated string: the quote opened here is not closed on this line%s",
                                yaml ? " (multi-line quoted strings are not supported)" : "");
        c = p->s[p->i];
        if (c == q) {
            if (q == '\'' && p->i + 1 < p->n && p->s[p->i + 1] == '\'') { out[o++] = '\''; p->i += 2; continue; }
            p->i++;
            break;
        }
        if ((unsigned char)c < 0x20 && c != '\t')
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "control character 0x%02x inside a string (write it as an escape)", (unsigned)(unsigned char)c);
        if (c != '\\' || q == '\'') { out[o++] = c; p->i++; continue; }
        /* an escape in a double-quoted string */
        {
            uint32_t eline = p->line, ecol = omc__cp_col(p);
            char e = p->i + 1 < p->n ? p->s[p->i + 1] : '\0';
            long cp = -1;
            int hex = 0;
            switch (e) {
                case '"': cp = '"'; break;
                case '\\': cp = '\\'; break;
                case '/': cp = '/'; break;
                case 'b': cp = '\b'; break;
                case 'f': cp = '\f'; break;
                case 'n': cp = '\n'; break;
                case 'r': cp = '\r'; break;
                case 't': cp = '\t'; break;
                case 'u': hex = 4; break;
                default:
                    if (yaml) {
                        switch (e) {
                            case '0': cp = 0; break;
                            case 'a': cp = 7; break;
                            case 'v': cp = 11; break;
                            case 'e': cp = 27; break;
                            case ' ': cp = ' '; break;
                            case '\t': cp = '\t'; break;
                            case 'N': cp = 0x85; break;
                            case '_': cp = 0xA0; break;
                            case 'L': cp = 0x2028; break;
                            case 'P': cp = 0x2029; break;
                            case 'x': hex = 2; break;
                            case 'U': hex = 8; break;
                            default: break;
                        }
                    }
                    break;
            }
            if (hex) {
                cp = omc__cp_hex(p, p->i + 2, hex);
                if (cp < 0) return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, eline, ecol, "\\%c needs %d hex digits", e, hex);
                p->i += (size_t)hex;
                if (hex == 4 && cp >= 0xD800 && cp <= 0xDBFF) {    /* a UTF-16 pair, as JSON writes them */
                    long lo = (p->i + 3 < p->n && p->s[p->i + 2] == '\\' && p->s[p->i + 3] == 'u') ? omc__cp_hex(p, p->i + 4, 4) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, eline, ecol, "\\u%04lX is half of a surrogate pair without its other half", cp);
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->i += 6;
                } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                    return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, eline, ecol, "lone surrogate \\u%04lX in a string", cp);
                }
                if (cp > 0x10FFFF) return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, eline, ecol, "code point beyond U+10FFFF");
            }
            if (cp < 0) {
                if ((unsigned char)e >= 0x21 && (unsigned char)e < 0x7F)
                    return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, eline, ecol, "unknown escape \\%c in a double-quoted string", e);
                return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, eline, ecol, "unknown escape in a double-quoted string");
            }
            if (cp == 0) return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, eline, ecol, "NUL characters are not allowed in strings");
            o += omc__utf8_put(out + o, (uint32_t)cp);
            p->i += 2;
        }
    }
    out[o] = '\0';
    nd = omc__cp_node(p, OMC_CONFIG_STRING, line, col);
    if (!nd) return NULL;
    nd->str = out;
    nd->len = (uint32_t)o;
    return nd;
}

/* Parse a decimal (or 0x / 0o) integer of exactly s[0..n); 0 if it is not one, -1 on overflow. */
OMC__PRIVATE int omc__parse_int(const char* s, size_t n, int radix_prefixes, int64_t* out) {
    size_t i = 0;
    int neg = 0, base = 10, any = 0;
    uint64_t v = 0, limit;
    if (i < n && (s[i] == '-' || s[i] == '+')) { neg = s[i] == '-'; i++; }
    if (radix_prefixes && !neg && i + 1 < n && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'o')) {
        base = s[i + 1] == 'x' ? 16 : 8;
        i += 2;
        if (s[0] == '+') return 0;
    }
    limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        int d = omc__hex_value(s[i]);
        if (d < 0 || d >= base) return 0;
        if (v > (limit - (uint64_t)d) / (uint64_t)base) return -1;
        v = v * (uint64_t)base + (uint64_t)d;
        any = 1;
    }
    if (!any) return 0;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* Is s[0..n) a YAML 1.2 core-schema float ([-+]? (.digits | digits(.digits?)?) ([eE][-+]?digits)?)? */
OMC__PRIVATE int omc__is_yaml_float(const char* s, size_t n) {
    size_t i = 0, digits = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    while (i < n && s[i] >= '0' && s[i] <= '9') { i++; digits++; }
    if (i < n && s[i] == '.') { i++; while (i < n && s[i] >= '0' && s[i] <= '9') { i++; digits++; } }
    if (!digits) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t e = 0;
        i++;
        if (i < n && (s[i] == '-' || s[i] == '+')) i++;
        while (i < n && s[i] >= '0' && s[i] <= '9') { i++; e++; }
        if (!e) return 0;
    }
    return i == n;
}

OMC__PRIVATE int omc__word_is(const char* s, size_t n, const char* a, const char* b, const char* c) {
    return (strlen(a) == n && memcmp(s, a, n) == 0) || (strlen(b) == n && memcmp(s, b, n) == 0) ||
           (strlen(c) == n && memcmp(s, c, n) == 0);
}

/* Turn a plain scalar into a node by the YAML 1.2 core schema. */
OMC__PRIVATE omc__cnode* omc__cp_plain(omc__cparse* p, const char* s, size_t n, uint32_t line, uint32_t col) {
    omc__cnode* nd = omc__cp_node(p, OMC_CONFIG_STRING, line, col);
    int64_t iv;
    int r;
    if (!nd) return NULL;
    if (n == 0 || (n == 1 && s[0] == '~') || omc__word_is(s, n, "null", "Null", "NULL")) { nd->kind = OMC_CONFIG_NULL; return nd; }
    if (omc__word_is(s, n, "true", "True", "TRUE")) { nd->kind = OMC_CONFIG_BOOL; nd->boolean = 1; return nd; }
    if (omc__word_is(s, n, "false", "False", "FALSE")) { nd->kind = OMC_CONFIG_BOOL; return nd; }
    r = (s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9')) ? omc__parse_int(s, n, 1, &iv) : 0;
    if (r < 0) return omc__cp_fail(p, OMC_CONFIG_ERR_VALUE, line, col, "integer %.*s does not fit in 64 bits", (int)omc__min(n, (size_t)40), s);
    if (r > 0) { nd->kind = OMC_CONFIG_INT; nd->integer = iv; nd->number = (double)iv; return nd; }
    nd->str = omc__arena_strndup(p->arena, s, n);
    if (!nd->str) return omc__cp_fail(p, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory while parsing");
    nd->len = (uint32_t)n;
    if (omc__is_yaml_float(s, n)) { nd->kind = OMC_CONFIG_FLOAT; nd->number = strtod(nd->str, NULL); return nd; }
    {
        size_t k = (s[0] == '-' || s[0] == '+') ? 1 : 0;
        if (omc__word_is(s + k, n - k, ".inf", ".Inf", ".INF")) { nd->kind = OMC_CONFIG_FLOAT; nd->number = s[0] == '-' ? -HUGE_VAL : HUGE_VAL; return nd; }
        if (k == 0 && omc__word_is(s, n, ".nan", ".NaN", ".NAN")) { nd->kind = OMC_CONFIG_FLOAT; nd->number = NAN; return nd; }
    }
    return nd;      /* a string */
}

/* ============================================================================================== */
/* [SECTION] Implementation: the YAML subset                                                     */
/* ============================================================================================== */
/*
    Block structure is decided by indentation, which here is simply the column of a node's first
    character: the cursor is always left on the first character of the next piece of content, and
    its column is that content's indentation - also in the middle of a line, so "- key: v" opens a
    mapping whose indentation is the column of "key", exactly as YAML's compact notation means.
      node(indent)   : "- "            -> block sequence at this column
                       "[" / "{"       -> flow collection (may span lines)
                       scalar then ":" -> block mapping at this column
                       scalar          -> scalar
      block mapping  : entries at the same column; a value on the key's line is a scalar or a
                       flow collection, on the following lines anything indented deeper (or a
                       sequence at the key's own column, which YAML allows)
      block sequence : "- " items at the same column
    A line indented deeper than the structure it would belong to is an error, as is one between
    two levels.
*/

/* Skip blanks, comments and line breaks up to the next content (or the end). A tab in a line's
   indentation is an error when the line has content. */
OMC__PRIVATE void omc__y_skip(omc__cparse* p) {
    while (p->i < p->n && !p->failed) {
        int at_start = p->i == p->line_start;
        size_t tab = (size_t)-1;
        while (p->i < p->n && (omc__cp_is_space(p->s[p->i]) || (p->s[p->i] == '\r' && !omc__cp_at_eol(p)))) {
            if (p->s[p->i] == '\t' && at_start && tab == (size_t)-1) tab = p->i;
            p->i++;
        }
        if (p->i < p->n && p->s[p->i] == '#') {
            while (!omc__cp_at_eol(p)) p->i++;
        }
        if (p->i >= p->n) return;
        if (omc__cp_at_eol(p)) { omc__cp_newline(p); continue; }
        if (tab != (size_t)-1) {
            p->i = tab;
            omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "tab character in indentation (YAML indents with spaces only)");
        }
        return;
    }
}

/* After a value: only blanks and a comment may follow on the line. */
OMC__PRIVATE int omc__y_end_of_line(omc__cparse* p, const char* what) {
    size_t before = p->i;
    while (p->i < p->n && (omc__cp_is_space(p->s[p->i]) || (p->s[p->i] == '\r' && !omc__cp_at_eol(p)))) p->i++;
    if (p->i < p->n && p->s[p->i] == '#') {
        if (p->i == before) { omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "a comment needs a blank before '#'"); return 0; }
        while (!omc__cp_at_eol(p)) p->i++;
    }
    if (!omc__cp_at_eol(p)) {
        if (p->s[p->i] == ':')
            omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "unexpected ':' after %s (a mapping cannot start here; quote the value if it contains ': ')", what);
        else
            omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "unexpected text after %s", what);
        return 0;
    }
    return 1;
}

/* Does the cursor stand on "- " (a block sequence entry)? */
OMC__PRIVATE int omc__y_dash(const omc__cparse* p) {
    return p->i < p->n && p->s[p->i] == '-' &&
           (p->i + 1 >= p->n || omc__cp_is_space(p->s[p->i + 1]) || p->s[p->i + 1] == '\n' || p->s[p->i + 1] == '\r');
}

/* "---" or "..." at the start of a line (document markers). */
OMC__PRIVATE int omc__y_doc_marker(const omc__cparse* p, char c) {
    size_t i = p->i;
    if (i != p->line_start || i + 3 > p->n || p->s[i] != c || p->s[i + 1] != c || p->s[i + 2] != c) return 0;
    return i + 3 == p->n || omc__cp_is_space(p->s[i + 3]) || p->s[i + 3] == '\n' || p->s[i + 3] == '\r';
}

/* Is ':' at p->s[i] a mapping indicator? In block context it must be followed by a blank or the
   end of the line; in flow context also by a flow indicator. */
OMC__PRIVATE int omc__y_colon(const omc__cparse* p, size_t i, int flow) {
    char c;
    if (i >= p->n || p->s[i] != ':') return 0;
    if (i + 1 >= p->n) return 1;
    c = p->s[i + 1];
    return omc__cp_is_space(c) || c == '\n' || c == '\r' || (flow && (c == ',' || c == ']' || c == '}'));
}

/* Characters that cannot start a plain scalar, with the reason. */
OMC__PRIVATE omc__cnode* omc__y_bad_start(omc__cparse* p) {
    char c = p->s[p->i];
    switch (c) {
        case '&': case '*': case '!':
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "anchors (&), aliases (*) and tags (!) are not supported: write the value out");
        case '|': case '>':
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "block scalars (| and >) are not supported: write the value as a quoted string");
        case '%':
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "directives (%%) are not supported");
        case '@': case '`':
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "'%c' is reserved in YAML: quote the value", c);
        case '?':
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "complex mapping keys (?) are not supported");
        default:
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "unexpected '%c'", c);
    }
}

OMC__PRIVATE int omc__y_plain_start_ok(const omc__cparse* p, int flow) {
    char c = p->s[p->i], nx = p->i + 1 < p->n ? p->s[p->i + 1] : '\0';
    if (c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '%' || c == '@' || c == '`' || c == '#' ||
        c == ',' || c == '[' || c == ']' || c == '{' || c == '}' || c == '"' || c == '\'')
        return 0;
    /* '-', '?' and ':' start a plain scalar only when a non-blank follows ("-1", ":x") */
    if ((c == '-' || c == '?' || c == ':') && (nx == '\0' || omc__cp_is_space(nx) || nx == '\n' || nx == '\r' ||
                                               (flow && (nx == ',' || nx == ']' || nx == '}'))))
        return 0;
    return 1;
}

/* Scan a plain scalar (the cursor is on its first character); s and n receive the trimmed text. */
OMC__PRIVATE void omc__y_scan_plain(omc__cparse* p, int flow, const char** s, size_t* n) {
    size_t start = p->i, end = p->i;
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '\n' || c == '\r') break;
        if (c == ':' && omc__y_colon(p, p->i, flow)) break;
        if (c == '#' && p->i > start && omc__cp_is_space(p->s[p->i - 1])) break;
        if (flow && (c == ',' || c == '[' || c == ']' || c == '{' || c == '}')) break;
        p->i++;
        if (!omc__cp_is_space(c)) end = p->i;
    }
    p->i = end;         /* trailing blanks stay: a comment after them needs them */
    *s = p->s + start;
    *n = end - start;
}

/* A plain scalar's text as a STRING node, unresolved: what mapping keys are ("1:" is the key "1"). */
OMC__PRIVATE omc__cnode* omc__y_text(omc__cparse* p, const char* s, size_t n, uint32_t line, uint32_t col) {
    omc__cnode* nd = omc__cp_node(p, OMC_CONFIG_STRING, line, col);
    if (!nd) return NULL;
    nd->str = omc__arena_strndup(p->arena, s, n);
    if (!nd->str) return omc__cp_fail(p, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory while parsing");
    nd->len = (uint32_t)n;
    return nd;
}

/* A scalar in block or flow context. as_key: keep a plain scalar's text (do not resolve it).
   *quoted (optional) tells whether it was quoted. */
OMC__PRIVATE omc__cnode* omc__y_scalar(omc__cparse* p, int flow, int as_key, int* quoted) {
    uint32_t line = p->line, col = omc__cp_col(p);
    const char* s;
    size_t n;
    if (quoted) *quoted = 0;
    if (p->s[p->i] == '"' || p->s[p->i] == '\'') {
        if (quoted) *quoted = 1;
        return omc__cp_quoted(p, 1);
    }
    if (!omc__y_plain_start_ok(p, flow)) return omc__y_bad_start(p);
    omc__y_scan_plain(p, flow, &s, &n);
    return as_key ? omc__y_text(p, s, n, line, col) : omc__cp_plain(p, s, n, line, col);
}

OMC__PRIVATE omc__cnode* omc__y_node(omc__cparse* p, int inline_value, uint32_t depth);

/* ---- flow collections ------------------------------------------------------------------------ */

/* Blanks, line breaks and comments between flow tokens. */
OMC__PRIVATE void omc__y_flow_skip(omc__cparse* p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (omc__cp_is_space(c) || (c == '\r' && !omc__cp_at_eol(p))) { p->i++; continue; }
        if (omc__cp_at_eol(p)) { omc__cp_newline(p); continue; }
        if (c == '#' && (p->i == p->line_start || omc__cp_is_space(p->s[p->i - 1]))) {
            while (!omc__cp_at_eol(p)) p->i++;
            continue;
        }
        break;
    }
}

OMC__PRIVATE omc__cnode* omc__y_flow(omc__cparse* p, uint32_t depth);

OMC__PRIVATE omc__cnode* omc__y_flow_value(omc__cparse* p, uint32_t depth) {
    omc__y_flow_skip(p);
    if (p->i >= p->n) return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "the file ends inside a flow collection");
    if (p->s[p->i] == '[' || p->s[p->i] == '{') return omc__y_flow(p, depth + 1);
    return omc__y_scalar(p, 1, 0, NULL);
}

/* One "key: value" (or a lone "key", whose value is null) of a flow mapping. */
OMC__PRIVATE omc__cnode* omc__y_flow_entry(omc__cparse* p, char close, uint32_t line, uint32_t col, uint32_t depth) {
    omc__cnode *key, *item;
    int quoted;
    if (p->s[p->i] == '[' || p->s[p->i] == '{')
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "collections as mapping keys are not supported");
    key = omc__y_scalar(p, 1, 1, &quoted);
    if (!key) return NULL;
    omc__y_flow_skip(p);
    /* after a quoted key the ':' may touch the next token ({"a":1}, as JSON writes it) */
    if (p->i < p->n && p->s[p->i] == ':' && (quoted || omc__y_colon(p, p->i, 1))) {
        p->i++;
        omc__y_flow_skip(p);
        if (p->i < p->n && (p->s[p->i] == ',' || p->s[p->i] == close)) item = omc__cp_node(p, OMC_CONFIG_NULL, p->line, omc__cp_col(p));
        else item = omc__y_flow_value(p, depth);
    } else if (p->i < p->n && (p->s[p->i] == ',' || p->s[p->i] == close)) {
        item = omc__cp_node(p, OMC_CONFIG_NULL, key->line, key->col);
    } else {
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "expected ':' after the key in the mapping opened at line %u:%u", line, col);
    }
    if (!item) return NULL;
    item->key = key->str;
    item->key_len = key->len;
    item->key_line = key->line;
    item->key_col = key->col;
    return item;
}

/* [ a, b ] or { k: v, k2 }: the cursor is on the opening bracket. */
OMC__PRIVATE omc__cnode* omc__y_flow(omc__cparse* p, uint32_t depth) {
    char open = p->s[p->i], close = open == '[' ? ']' : '}';
    uint32_t line = p->line, col = omc__cp_col(p);
    omc__cnode* coll;
    if (depth >= OMNICONN_PIPELINE_MAX_DEPTH)
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_LIMIT, "nesting deeper than %d (OMNICONN_PIPELINE_MAX_DEPTH)", OMNICONN_PIPELINE_MAX_DEPTH);
    coll = omc__cp_node(p, open == '[' ? OMC_CONFIG_SEQUENCE : OMC_CONFIG_MAPPING, line, col);
    if (!coll) return NULL;
    p->i++;
    for (;;) {
        omc__cnode* item;
        omc__y_flow_skip(p);
        if (p->i >= p->n)
            return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, line, col, "'%c' is never closed (expected '%c')", open, close);
        if (p->s[p->i] == close) { p->i++; return coll; }
        item = open == '[' ? omc__y_flow_value(p, depth) : omc__y_flow_entry(p, close, line, col, depth);
        if (!item || !omc__cp_append(p, coll, item)) return NULL;
        omc__y_flow_skip(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == close) { p->i++; return coll; }
        if (p->i >= p->n) return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, line, col, "'%c' is never closed (expected '%c')", open, close);
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "expected ',' or '%c' in the collection opened at line %u:%u", close, line, col);
    }
}

/* ---- block collections ----------------------------------------------------------------------- */

/* The indentation the cursor's content has (its 0-based column). */
#define omc__y_indent(p) ((p)->i - (p)->line_start)

/* What follows a "key:" or a "-": a value on the same line, or a block on the next lines that is
   indented deeper than `indent` (or a sequence at `indent` itself after a key, if seq_same_ok). */
OMC__PRIVATE omc__cnode* omc__y_block_value(omc__cparse* p, size_t indent, int seq_same_ok, uint32_t line, uint32_t col,
                                            int after_key, uint32_t depth) {
    while (p->i < p->n && (omc__cp_is_space(p->s[p->i]) || (p->s[p->i] == '\r' && !omc__cp_at_eol(p)))) p->i++;
    if (p->i < p->n && !omc__cp_at_eol(p) && p->s[p->i] != '#')
        return omc__y_node(p, after_key, depth + 1);  /* on the same line */
    omc__y_skip(p);
    if (p->failed) return NULL;
    if (p->i < p->n && !omc__y_doc_marker(p, '-') && !omc__y_doc_marker(p, '.')) {
        size_t ind = omc__y_indent(p);
        if (ind > indent || (seq_same_ok && ind == indent && omc__y_dash(p))) return omc__y_node(p, 0, depth + 1);
    }
    return omc__cp_node(p, OMC_CONFIG_NULL, line, col);     /* nothing: a null value */
}

/* After an entry: go to the next content and decide whether it continues this collection. */
OMC__PRIVATE int omc__y_continues(omc__cparse* p, size_t indent) {
    omc__y_skip(p);
    if (p->failed || p->i >= p->n) return 0;
    if (omc__y_doc_marker(p, '-') || omc__y_doc_marker(p, '.')) return 0;
    if (omc__y_indent(p) > indent) {
        omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX,
                          "unexpected indentation: this line is deeper than the entries it follows but starts "
                          "no value of theirs (line keys up in one column; multi-line plain values are not supported)");
        return 0;
    }
    return omc__y_indent(p) == indent;
}

OMC__PRIVATE omc__cnode* omc__y_block_seq(omc__cparse* p, uint32_t depth) {
    size_t indent = omc__y_indent(p);
    omc__cnode* seq = omc__cp_node(p, OMC_CONFIG_SEQUENCE, p->line, omc__cp_col(p));
    if (!seq) return NULL;
    for (;;) {
        omc__cnode* item;
        uint32_t line = p->line, col = omc__cp_col(p);
        p->i++;                                             /* the '-' */
        item = omc__y_block_value(p, indent, 0, line, col, 0, depth);
        if (!item || !omc__cp_append(p, seq, item)) return NULL;
        if (!omc__y_continues(p, indent)) return p->failed ? NULL : seq;
        if (!omc__y_dash(p)) return seq;    /* a key at our column: the mapping we sit in goes on */
    }
}

/* The cursor is on the ':' after a mapping's first key (first_key). */
OMC__PRIVATE omc__cnode* omc__y_block_map(omc__cparse* p, omc__cnode* first_key, size_t indent, uint32_t depth) {
    omc__cnode* map = omc__cp_node(p, OMC_CONFIG_MAPPING, first_key->line, first_key->col);
    omc__cnode* key = first_key;
    if (!map) return NULL;
    for (;;) {
        omc__cnode* value;
        p->i++;                                             /* the ':' */
        value = omc__y_block_value(p, indent, 1, key->line, key->col, 1, depth);
        if (!value) return NULL;
        value->key = key->str;
        value->key_len = key->len;
        value->key_line = key->line;
        value->key_col = key->col;
        if (!omc__cp_append(p, map, value)) return NULL;
        if (!omc__y_continues(p, indent)) return p->failed ? NULL : map;
        /* the next key, at our column */
        if (omc__y_dash(p))
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "a sequence entry ('- ') where a mapping key was expected (indent it under its key)");
        if (p->s[p->i] == '[' || p->s[p->i] == '{')
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "collections as mapping keys are not supported");
        key = omc__y_scalar(p, 0, 1, NULL);
        if (!key) return NULL;
        while (p->i < p->n && omc__cp_is_space(p->s[p->i])) p->i++;
        if (!omc__y_colon(p, p->i, 0))
            return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, key->line, key->col,
                                "expected 'key: value' (a line in a mapping needs a ':' followed by a blank)");
    }
}

/* A node whose first character is under the cursor. inline_value: it follows "key:" on the same
   line, where a block collection cannot start. */
OMC__PRIVATE omc__cnode* omc__y_node(omc__cparse* p, int inline_value, uint32_t depth) {
    char c = p->s[p->i];
    size_t indent = omc__y_indent(p), save_i = p->i, after;
    uint32_t save_line = p->line;
    omc__cnode* nd;
    if (depth >= OMNICONN_PIPELINE_MAX_DEPTH)
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_LIMIT, "nesting deeper than %d (OMNICONN_PIPELINE_MAX_DEPTH)", OMNICONN_PIPELINE_MAX_DEPTH);
    if (omc__y_dash(p)) {
        if (inline_value) return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "a block sequence cannot start on its key's line (put it on the next line)");
        return omc__y_block_seq(p, depth);
    }
    if (c == '[' || c == '{') {
        nd = omc__y_flow(p, depth);
        if (!nd) return NULL;
        save_i = p->i;
        while (p->i < p->n && omc__cp_is_space(p->s[p->i])) p->i++;
        if (omc__y_colon(p, p->i, 0)) return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "collections as mapping keys are not supported");
        p->i = save_i;                      /* the blanks belong to a comment that may follow */
        return omc__y_end_of_line(p, "the flow collection") ? nd : NULL;
    }
    /* a key (text kept as written) or a value (resolved): read it as a key, look for the ':' */
    nd = omc__y_scalar(p, 0, 1, NULL);
    if (!nd) return NULL;
    after = p->i;
    while (p->i < p->n && omc__cp_is_space(p->s[p->i])) p->i++;
    if (omc__y_colon(p, p->i, 0)) {
        if (inline_value)
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "a mapping cannot start on its key's line (quote the value if it contains ': ')");
        return omc__y_block_map(p, nd, indent, depth);
    }
    p->i = after;
    if (c != '"' && c != '\'') {          /* a plain value: scan it again, resolving it this time */
        p->i = save_i;
        p->line = save_line;
        nd = omc__y_scalar(p, 0, 0, NULL);
        if (!nd) return NULL;
    }
    return omc__y_end_of_line(p, "the value") ? nd : NULL;
}

/* The whole document: optional "---" / "...", one node, nothing else. */
OMC__PRIVATE omc__cnode* omc__y_document(omc__cparse* p) {
    omc__cnode* root = NULL;
    omc__y_skip(p);
    if (p->failed) return NULL;
    if (p->i < p->n && p->s[p->i] == '%' && p->i == p->line_start)
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "directives (%%YAML, %%TAG) are not supported");
    if (omc__y_doc_marker(p, '-')) {
        p->i += 3;
        while (p->i < p->n && omc__cp_is_space(p->s[p->i])) p->i++;
        if (p->i < p->n && !omc__cp_at_eol(p) && p->s[p->i] != '#') {
            root = omc__y_node(p, 1, 0);                    /* "--- {a: 1}" or "--- text" */
            if (!root) return NULL;
        }
        omc__y_skip(p);
        if (p->failed) return NULL;
    }
    if (!root && p->i < p->n && !omc__y_doc_marker(p, '.') && !omc__y_doc_marker(p, '-')) {
        root = omc__y_node(p, 0, 0);
        if (!root) return NULL;
        omc__y_skip(p);
        if (p->failed) return NULL;
    }
    if (omc__y_doc_marker(p, '.')) {
        p->i += 3;
        omc__y_skip(p);
        if (p->failed) return NULL;
    }
    if (omc__y_doc_marker(p, '-'))
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_UNSUPPORTED, "several documents in one file are not supported");
    if (p->i < p->n)
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "unexpected content: the document's top level ended above this line (check its indentation)");
    if (!root) root = omc__cp_node(p, OMC_CONFIG_NULL, 1, 1);
    return root;
}

/* ============================================================================================== */
/* [SECTION] Implementation: JSON                                                                */
/* ============================================================================================== */
/* RFC 8259, strictly: no comments, no trailing commas, keys are strings, numbers as the grammar
   says (an integer without fraction or exponent that fits 64 bits is an INT, else a FLOAT). */

OMC__PRIVATE void omc__j_skip(omc__cparse* p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r') p->i++;
        else if (c == '\n') omc__cp_newline(p);
        else break;
    }
}

OMC__PRIVATE omc__cnode* omc__j_unexpected(omc__cparse* p, const char* expected) {
    unsigned char c;
    if (p->i >= p->n) return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "the text ends where %s was expected", expected);
    c = (unsigned char)p->s[p->i];
    if (c >= 0x21 && c < 0x7F) return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "unexpected '%c' where %s was expected", c, expected);
    return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "unexpected byte 0x%02x where %s was expected", c, expected);
}

OMC__PRIVATE omc__cnode* omc__j_number(omc__cparse* p) {
    uint32_t line = p->line, col = omc__cp_col(p);
    size_t start = p->i;
    int is_float = 0;
    omc__cnode* nd;
    if (p->s[p->i] == '-') p->i++;
    if (p->i < p->n && p->s[p->i] == '0') p->i++;
    else if (p->i < p->n && p->s[p->i] >= '1' && p->s[p->i] <= '9') { while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++; }
    else return omc__j_unexpected(p, "a digit");
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return omc__j_unexpected(p, "a digit after '.'");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return omc__j_unexpected(p, "a digit in the exponent");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    nd = omc__cp_node(p, OMC_CONFIG_INT, line, col);
    if (!nd) return NULL;
    if (!is_float) {
        int r = omc__parse_int(p->s + start, p->i - start, 0, &nd->integer);
        if (r < 0)
            return omc__cp_fail(p, OMC_CONFIG_ERR_VALUE, line, col, "integer %.*s does not fit in 64 bits", (int)omc__min(p->i - start, (size_t)40), p->s + start);
        nd->number = (double)nd->integer;
        return nd;
    }
    nd->kind = OMC_CONFIG_FLOAT;
    nd->str = omc__arena_strndup(p->arena, p->s + start, p->i - start);
    if (!nd->str) return omc__cp_fail(p, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory while parsing");
    nd->len = (uint32_t)(p->i - start);
    nd->number = strtod(nd->str, NULL);
    return nd;
}

OMC__PRIVATE omc__cnode* omc__j_value(omc__cparse* p, uint32_t depth);

OMC__PRIVATE omc__cnode* omc__j_container(omc__cparse* p, uint32_t depth) {
    char open = p->s[p->i], close = open == '[' ? ']' : '}';
    uint32_t line = p->line, col = omc__cp_col(p);
    omc__cnode* coll;
    if (depth >= OMNICONN_PIPELINE_MAX_DEPTH)
        return omc__cp_fail_here(p, OMC_CONFIG_ERR_LIMIT, "nesting deeper than %d (OMNICONN_PIPELINE_MAX_DEPTH)", OMNICONN_PIPELINE_MAX_DEPTH);
    coll = omc__cp_node(p, open == '[' ? OMC_CONFIG_SEQUENCE : OMC_CONFIG_MAPPING, line, col);
    if (!coll) return NULL;
    p->i++;
    omc__j_skip(p);
    if (p->i < p->n && p->s[p->i] == close) { p->i++; return coll; }
    for (;;) {
        omc__cnode *key = NULL, *item;
        omc__j_skip(p);
        if (open == '{') {
            if (p->i < p->n && p->s[p->i] == '}') return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "trailing comma before '}' (JSON does not allow it)");
            if (p->i >= p->n || p->s[p->i] != '"') return omc__j_unexpected(p, "a \"key\" (JSON keys are double-quoted strings)");
            key = omc__cp_quoted(p, 0);
            if (!key) return NULL;
            omc__j_skip(p);
            if (p->i >= p->n || p->s[p->i] != ':') return omc__j_unexpected(p, "':' after the key");
            p->i++;
        } else if (p->i < p->n && p->s[p->i] == ']') {
            return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "trailing comma before ']' (JSON does not allow it)");
        }
        item = omc__j_value(p, depth + 1);
        if (!item) return NULL;
        if (key) {
            item->key = key->str;
            item->key_len = key->len;
            item->key_line = key->line;
            item->key_col = key->col;
        }
        if (!omc__cp_append(p, coll, item)) return NULL;
        omc__j_skip(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == close) { p->i++; return coll; }
        if (p->i >= p->n) return omc__cp_fail(p, OMC_CONFIG_ERR_SYNTAX, line, col, "'%c' is never closed (expected '%c')", open, close);
        return open == '[' ? omc__j_unexpected(p, "',' or ']'") : omc__j_unexpected(p, "',' or '}'");
    }
}

OMC__PRIVATE omc__cnode* omc__j_literal(omc__cparse* p, const char* word, omc_config_kind kind, int boolean) {
    size_t n = strlen(word);
    omc__cnode* nd;
    if (p->n - p->i < n || memcmp(p->s + p->i, word, n) != 0 ||
        (p->i + n < p->n && ((p->s[p->i + n] >= 'a' && p->s[p->i + n] <= 'z') || (p->s[p->i + n] >= 'A' && p->s[p->i + n] <= 'Z'))))
        return omc__j_unexpected(p, "a value (strings are double-quoted in JSON)");
    nd = omc__cp_node(p, kind, p->line, omc__cp_col(p));
    if (!nd) return NULL;
    nd->boolean = boolean;
    p->i += n;
    return nd;
}

OMC__PRIVATE omc__cnode* omc__j_value(omc__cparse* p, uint32_t depth) {
    omc__j_skip(p);
    if (p->i >= p->n) return omc__j_unexpected(p, "a value");
    switch (p->s[p->i]) {
        case '{': case '[': return omc__j_container(p, depth);
        case '"': return omc__cp_quoted(p, 0);
        case 't': return omc__j_literal(p, "true", OMC_CONFIG_BOOL, 1);
        case 'f': return omc__j_literal(p, "false", OMC_CONFIG_BOOL, 0);
        case 'n': return omc__j_literal(p, "null", OMC_CONFIG_NULL, 0);
        default:
            if (p->s[p->i] == '-' || (p->s[p->i] >= '0' && p->s[p->i] <= '9')) return omc__j_number(p);
            return omc__j_unexpected(p, "a value (strings are double-quoted in JSON)");
    }
}

OMC__PRIVATE omc__cnode* omc__j_document(omc__cparse* p) {
    omc__cnode* root = omc__j_value(p, 0);
    if (!root) return NULL;
    omc__j_skip(p);
    if (p->i < p->n) return omc__cp_fail_here(p, OMC_CONFIG_ERR_SYNTAX, "unexpected content after the JSON value");
    return root;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the configuration object                                            */
/* ============================================================================================== */

typedef struct omc__cconn {
    omc_connector_spec spec;
    const omc__cnode* extra;        /* the extra mapping as written, or NULL */
    int is_inline;                  /* defined inside an edge: no other edge can name it */
} omc__cconn;

typedef struct omc__cstage {
    omc_pipeline_stage st;
    const omc__cnode* node;
} omc__cstage;

typedef struct omc__cedge {
    omc_pipeline_edge e;
    uint32_t side_conn[2];          /* connector named by the sender [0] / receiver [1] end, or OMC__NIL */
    uint32_t side_line[2], side_col[2];
} omc__cedge;

struct omc_pipeline_config {
    omc_hooks hooks;
    omc__arena arena;
    const char* name;
    const char* dir;                /* the file's directory (relative key paths join it); "" for text */
    const omc__cnode* root;
    omc__cconn* conns;
    uint32_t nconn, capconn;
    omc__cstage* stages;
    uint32_t nstage, capstage;
    omc__cedge* edges;
    uint32_t nedge, capedge;
    omc_port_use* ports;
    uint32_t nport, capport;
    omc_config_diag* warnings;
    uint32_t nwarn_kept, capwarn, nwarn;
    uint32_t auto_shm;              /* index of the auto-filled SHM connector, or OMC__NIL */
    int skip_port_check;
};


OMNICONN_API void omc_pipeline_config_destroy(omc_pipeline_config* cfg) {
    omc_hooks hooks;
    if (!cfg) return;
    hooks = cfg->hooks;
    omc__free(&hooks, cfg->conns);
    omc__free(&hooks, cfg->stages);
    omc__free(&hooks, cfg->edges);
    omc__free(&hooks, cfg->ports);
    omc__free(&hooks, cfg->warnings);
    omc__arena_free(&cfg->arena);
    omc__free(&hooks, cfg);
}

/* ============================================================================================== */
/* [SECTION] Implementation: resolving the document                                              */
/* ============================================================================================== */
/*
    Five passes over the tree, each with its own errors:
      1. connectors: runtime.connectors (or a top-level connectors:) -> specs with defaults
      2. stages: stage_args (or stages:) -> ids (unique), tp/dp sizes
      3. declared edges: every stage's input_connectors / output_connectors, in file order, so a
         type mismatch is reported at the later of the two declarations
      4. topology edges: runtime.edges and engine_input_source; then every edge without a
         connector gets auto_shm, and the stages get their roles
      5. ports: every listener of every TCP/RDMA edge, checked for collisions
*/

typedef struct omc__cres {
    omc_pipeline_config* cfg;
    omc_config_diag* err;
    int failed;
    omc__smap stage_index;          /* 4-byte stage id -> index + 1 (during resolution only) */
    omc__smap edge_index;           /* 8-byte (from, to) -> index + 1 */
} omc__cres;

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
OMC__PRIVATE int omc__cr_fail(omc__cres* r, omc_config_code code, uint32_t line, uint32_t col, const char* fmt, ...) {
    va_list ap;
    if (r->failed) return 0;
    r->failed = 1;
    va_start(ap, fmt);
    omc__config_vdiag(r->err, r->cfg->name, code, line, col, fmt, ap);
    va_end(ap);
    return 0;
}

/* A warning: logged now, kept (up to OMNICONN_PIPELINE_MAX_WARNINGS) for omc_pipeline_config_warning. */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
OMC__PRIVATE void omc__cr_warn(omc__cres* r, omc_config_code code, uint32_t line, uint32_t col, const char* fmt, ...) {
    omc_pipeline_config* cfg = r->cfg;
    omc_config_diag d;
    va_list ap;
    va_start(ap, fmt);
    omc__config_vdiag(&d, cfg->name, code, line, col, fmt, ap);
    va_end(ap);
    OMC__LOG(&cfg->hooks, OMC_LOG_WARN, OMC_LOGITEM_CONFIG, "%s", d.message);
    cfg->nwarn++;
    if (cfg->nwarn_kept < OMNICONN_PIPELINE_MAX_WARNINGS &&
        omc__vec_room(&cfg->hooks, &cfg->warnings, cfg->nwarn_kept, &cfg->capwarn, sizeof(omc_config_diag)))
        cfg->warnings[cfg->nwarn_kept++] = d;
}

OMC__PRIVATE const char* omc__kind_name(omc_config_kind k) {
    switch (k) {
        case OMC_CONFIG_NULL: return "null";
        case OMC_CONFIG_BOOL: return "a boolean";
        case OMC_CONFIG_INT: return "an integer";
        case OMC_CONFIG_FLOAT: return "a float";
        case OMC_CONFIG_STRING: return "a string";
        case OMC_CONFIG_MAPPING: return "a mapping";
        case OMC_CONFIG_SEQUENCE: return "a sequence";
        default: return "a value";
    }
}

OMC__PRIVATE int omc__cr_expect(omc__cres* r, const omc__cnode* nd, omc_config_kind kind, const char* what) {
    if (nd->kind == kind) return 1;
    return omc__cr_fail(r, OMC_CONFIG_ERR_TYPE, nd->line, nd->col, "%s must be %s, not %s", what, omc__kind_name(kind), omc__kind_name(nd->kind));
}

/* An integer in [lo, hi]. */
OMC__PRIVATE int omc__cr_int(omc__cres* r, const omc__cnode* nd, const char* what, int64_t lo, int64_t hi, int64_t* out) {
    if (!omc__cr_expect(r, nd, OMC_CONFIG_INT, what)) return 0;
    if (nd->integer < lo || nd->integer > hi)
        return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, nd->line, nd->col, "%s must be between %lld and %lld, not %lld", what,
                            (long long)lo, (long long)hi, (long long)nd->integer);
    *out = nd->integer;
    return 1;
}

OMC__PRIVATE int omc__in_list(const char* key, const char* const* list) {
    for (; list && *list; list++) if (strcmp(key, *list) == 0) return 1;
    return 0;
}

/* Warn about keys of map that are neither known nor in the quietly ignored list. */
OMC__PRIVATE void omc__cr_check_keys(omc__cres* r, const omc__cnode* map, const char* where, const char* const* known,
                                     const char* const* quiet) {
    const omc__cnode* e;
    for (e = map->first; e; e = e->next) {
        if (omc__in_list(e->key, known)) continue;
        if (omc__in_list(e->key, quiet)) {
            OMC__LOG(&r->cfg->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_CONFIG, "%s:%u:%u: %s: '%s' is not for omniconn (ignored)",
                     r->cfg->name, e->key_line, e->key_col, where, e->key);
            continue;
        }
        omc__cr_warn(r, OMC_CONFIG_WARN_UNKNOWN_KEY, e->key_line, e->key_col, "%s: unknown key '%s' (ignored)", where, e->key);
    }
}

/* ---- pass 1: connectors ---------------------------------------------------------------------- */

static const struct { const char* name; omc_connector_type type; } omc__connector_names[] = {
    { "SharedMemoryConnector", OMC_CONNECTOR_SHM },
    { "MooncakeTransferEngineConnector", OMC_CONNECTOR_MOONCAKE },
    { "TcpConnector", OMC_CONNECTOR_TCP },
    { "LocalConnector", OMC_CONNECTOR_LOCAL },
    { "shm", OMC_CONNECTOR_SHM },
    { "rdma", OMC_CONNECTOR_MOONCAKE },
    { "tcp", OMC_CONNECTOR_TCP },
    { "local", OMC_CONNECTOR_LOCAL }
};

OMNICONN_API const char* omc_connector_type_name(omc_connector_type t) {
    switch (t) {
        case OMC_CONNECTOR_SHM: return "SharedMemoryConnector";
        case OMC_CONNECTOR_MOONCAKE: return "MooncakeTransferEngineConnector";
        case OMC_CONNECTOR_TCP: return "TcpConnector";
        case OMC_CONNECTOR_LOCAL: return "LocalConnector";
        default: return "DefaultConnector";
    }
}

OMC__PRIVATE omc_transport omc__spec_transport(const omc_connector_spec* s) {
    switch (s->type) {
        case OMC_CONNECTOR_SHM: return OMC_TRANSPORT_SHM;
        case OMC_CONNECTOR_LOCAL: return OMC_TRANSPORT_LOCAL;
        case OMC_CONNECTOR_TCP: return OMC_TRANSPORT_TCP;
        case OMC_CONNECTOR_MOONCAKE: return strcmp(s->protocol, "tcp") == 0 ? OMC_TRANSPORT_TCP : OMC_TRANSPORT_RDMA;
        default: return OMC_TRANSPORT_NONE;
    }
}

/* vLLM-Omni's defaults; the pool size is settled after memory_pool_device is known. */
OMC__PRIVATE void omc__spec_defaults(omc_connector_spec* s, omc_connector_type type) {
    s->type = type;
    s->host = "auto";
    s->zmq_port = OMC_PIPELINE_DEFAULT_ZMQ_PORT;
    s->protocol = type == OMC_CONNECTOR_MOONCAKE ? "rdma" : type == OMC_CONNECTOR_TCP ? "tcp" : "";
    s->device_name = "";
    s->memory_pool_size = 0;
    s->memory_pool_device = OMC_MEMORY_HOST;
    s->shm_threshold_bytes = OMC_PIPELINE_DEFAULT_SHM_THRESHOLD;
}

OMC__PRIVATE void omc__spec_finish(omc_connector_spec* s) {
    if (!s->memory_pool_size)
        s->memory_pool_size = s->memory_pool_device == OMC_MEMORY_CUDA ? OMC_PIPELINE_DEFAULT_POOL_CUDA : OMC_PIPELINE_DEFAULT_POOL_CPU;
    s->transport = omc__spec_transport(s);
}

static const char* const omc__option_names[] = { "host", "zmq_port", "protocol", "device_name", "memory_pool_size",
                                                 "memory_pool_device", "shm_threshold_bytes", "insecure",
                                                 "curve_server_public_key_file", "curve_server_secret_key_file",
                                                 "curve_client_secret_key_file", "curve_allowed_clients_file", NULL };

/* A key-file option: a non-empty string; a relative path joins the configuration file's directory. */
OMC__PRIVATE int omc__cr_path(omc__cres* r, const omc__cnode* v, const char* what, const char** out) {
    const char* dir = r->cfg->dir;
    size_t dl, vl;
    char* joined;
    if (!omc__cr_expect(r, v, OMC_CONFIG_STRING, what)) return 0;
    if (!v->len) return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, v->line, v->col, "%s is empty (a key file's path)", what);
    if (v->str[0] == '/' || !dir || !dir[0]) { *out = v->str; return 1; }
    dl = strlen(dir);
    vl = strlen(v->str);
    joined = (char*)omc__arena_alloc(&r->cfg->arena, dl + vl + 2);
    if (!joined) return omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
    memcpy(joined, dir, dl);
    joined[dl] = '/';
    memcpy(joined + dl + 1, v->str, vl + 1);
    *out = joined;
    return 1;
}

/* One option of an extra mapping into the spec. */
OMC__PRIVATE int omc__cr_option(omc__cres* r, omc_connector_spec* s, const omc__cnode* v, const char* cname) {
    char what[320];
    int64_t iv;
    snprintf(what, sizeof(what), "%s of connector '%s'", v->key, cname);
    if (v->kind == OMC_CONFIG_NULL && omc__in_list(v->key, omc__option_names)) return 1;   /* null: keep the default */
    if (strcmp(v->key, "host") == 0) {
        if (!omc__cr_expect(r, v, OMC_CONFIG_STRING, what)) return 0;
        if (!v->len) return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, v->line, v->col, "%s is empty (write \"auto\" to detect it)", what);
        s->host = v->str;
    } else if (strcmp(v->key, "zmq_port") == 0) {
        if (!omc__cr_int(r, v, what, 1, 65535, &iv)) return 0;
        s->zmq_port = (uint32_t)iv;
    } else if (strcmp(v->key, "protocol") == 0) {
        if (!omc__cr_expect(r, v, OMC_CONFIG_STRING, what)) return 0;
        if (strcmp(v->str, "rdma") != 0 && strcmp(v->str, "tcp") != 0)
            return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, v->line, v->col, "%s must be \"rdma\" or \"tcp\", not \"%s\"", what, v->str);
        if (s->type == OMC_CONNECTOR_TCP && strcmp(v->str, "tcp") != 0)
            return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, v->line, v->col, "%s: a TcpConnector speaks tcp only (use MooncakeTransferEngineConnector for rdma)", what);
        s->protocol = v->str;
    } else if (strcmp(v->key, "device_name") == 0) {
        if (!omc__cr_expect(r, v, OMC_CONFIG_STRING, what)) return 0;
        s->device_name = v->str;
    } else if (strcmp(v->key, "memory_pool_size") == 0) {
        if (!omc__cr_int(r, v, what, 1, INT64_MAX, &iv)) return 0;
        s->memory_pool_size = (uint64_t)iv;
    } else if (strcmp(v->key, "memory_pool_device") == 0) {
        if (!omc__cr_expect(r, v, OMC_CONFIG_STRING, what)) return 0;
        if (strcmp(v->str, "cpu") == 0) s->memory_pool_device = OMC_MEMORY_HOST;
        else if (strcmp(v->str, "cuda") == 0) s->memory_pool_device = OMC_MEMORY_CUDA;
        else return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, v->line, v->col, "%s must be \"cpu\" or \"cuda\", not \"%s\"", what, v->str);
    } else if (strcmp(v->key, "shm_threshold_bytes") == 0) {
        if (!omc__cr_int(r, v, what, 0, INT64_MAX, &iv)) return 0;
        s->shm_threshold_bytes = (uint64_t)iv;
    } else if (strcmp(v->key, "insecure") == 0) {
        if (!omc__cr_expect(r, v, OMC_CONFIG_BOOL, what)) return 0;
        s->insecure = v->boolean;
    } else if (strcmp(v->key, "curve_server_public_key_file") == 0) {
        return omc__cr_path(r, v, what, &s->curve_server_public_key_file);
    } else if (strcmp(v->key, "curve_server_secret_key_file") == 0) {
        return omc__cr_path(r, v, what, &s->curve_server_secret_key_file);
    } else if (strcmp(v->key, "curve_client_secret_key_file") == 0) {
        return omc__cr_path(r, v, what, &s->curve_client_secret_key_file);
    } else if (strcmp(v->key, "curve_allowed_clients_file") == 0) {
        return omc__cr_path(r, v, what, &s->curve_allowed_clients_file);
    } else if (strcmp(v->key, "role") == 0 || strcmp(v->key, "sender_host") == 0 || strcmp(v->key, "sender_zmq_port") == 0) {
        omc__cr_warn(r, OMC_CONFIG_WARN_IGNORED_KEY, v->key_line, v->key_col,
                     "connector '%s': '%s' is injected per stage from the edges; the value in the file is ignored", cname, v->key);
    } else {
        omc__cr_warn(r, OMC_CONFIG_WARN_UNKNOWN_KEY, v->key_line, v->key_col,
                     "connector '%s': unknown option '%s' (kept for omc_pipeline_connector_option, not used by omniconn)", cname, v->key);
    }
    return 1;
}

/* A connector definition {name: <type>, extra: {...}} -> a new spec; *out its index. */
OMC__PRIVATE int omc__cr_connector(omc__cres* r, const char* cname, const omc__cnode* def, uint32_t line, uint32_t col, uint32_t* out) {
    static const char* const known[] = { "name", "extra", NULL };
    omc_pipeline_config* cfg = r->cfg;
    const omc__cnode *nm, *extra, *v;
    omc__cconn* c;
    size_t i;
    char where[300];
    if (def->kind != OMC_CONFIG_MAPPING)
        return omc__cr_fail(r, OMC_CONFIG_ERR_TYPE, def->line, def->col, "connector '%s' must be a mapping with 'name' and 'extra', not %s",
                            cname, omc__kind_name(def->kind));
    snprintf(where, sizeof(where), "connector '%s'", cname);
    omc__cr_check_keys(r, def, where, known, NULL);
    nm = omc__cnode_get(def, "name");
    if (!nm) return omc__cr_fail(r, OMC_CONFIG_ERR_MISSING, line, col, "connector '%s' has no 'name' (its type, e.g. SharedMemoryConnector)", cname);
    if (!omc__cr_expect(r, nm, OMC_CONFIG_STRING, "a connector's name")) return 0;
    if (!omc__vec_room(&cfg->hooks, &cfg->conns, cfg->nconn, &cfg->capconn, sizeof(omc__cconn)))
        return omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
    c = &cfg->conns[cfg->nconn];
    memset(c, 0, sizeof(*c));
    for (i = 0; i < sizeof(omc__connector_names) / sizeof(omc__connector_names[0]); i++)
        if (strcmp(nm->str, omc__connector_names[i].name) == 0) omc__spec_defaults(&c->spec, omc__connector_names[i].type);
    if (!c->spec.type)
        return omc__cr_fail(r, OMC_CONFIG_ERR_UNKNOWN_TYPE, nm->line, nm->col,
                            "'%s' is not a connector type (known: SharedMemoryConnector, MooncakeTransferEngineConnector, "
                            "TcpConnector, LocalConnector)", nm->str);
    c->spec.name = cname;
    c->spec.type_name = nm->str;
    c->spec.line = line;
    c->spec.column = col;
    extra = omc__cnode_get(def, "extra");
    if (extra && extra->kind != OMC_CONFIG_NULL) {
        char what[300];
        snprintf(what, sizeof(what), "extra of connector '%s'", cname);
        if (!omc__cr_expect(r, extra, OMC_CONFIG_MAPPING, what)) return 0;
        c->extra = extra;
        for (v = extra->first; v; v = v->next)
            if (!omc__cr_option(r, &c->spec, v, cname)) return 0;
        v = omc__cnode_get(extra, "curve_allowed_clients_file");
        if (c->spec.curve_allowed_clients_file && !c->spec.curve_server_secret_key_file)
            return omc__cr_fail(r, OMC_CONFIG_ERR_MISSING, v->line, v->col, "connector '%s': curve_allowed_clients_file needs "
                                "curve_server_secret_key_file (the senders' secret key, which turns CURVE on)", cname);
        v = omc__cnode_get(extra, "curve_client_secret_key_file");
        if (c->spec.curve_client_secret_key_file && !c->spec.curve_server_public_key_file)
            return omc__cr_fail(r, OMC_CONFIG_ERR_MISSING, v->line, v->col, "connector '%s': curve_client_secret_key_file needs "
                                "curve_server_public_key_file (the senders' public key, which receivers authenticate them by)", cname);
    }
    omc__spec_finish(&c->spec);
    *out = cfg->nconn++;
    return 1;
}

OMC__PRIVATE uint32_t omc__cfg_find_conn(const omc_pipeline_config* cfg, const char* name) {
    uint32_t i;
    for (i = 0; i < cfg->nconn; i++)
        if (!cfg->conns[i].spec.auto_filled && !cfg->conns[i].is_inline && strcmp(cfg->conns[i].spec.name, name) == 0) return i;
    return OMC__NIL;
}

OMC__PRIVATE int omc__cr_connectors(omc__cres* r, const omc__cnode* map) {
    const omc__cnode* e;
    if (!map || map->kind == OMC_CONFIG_NULL) return 1;
    if (!omc__cr_expect(r, map, OMC_CONFIG_MAPPING, "connectors")) return 0;
    for (e = map->first; e; e = e->next) {
        uint32_t idx;
        if (!omc__cr_connector(r, e->key, e, e->key_line, e->key_col, &idx)) return 0;
    }
    return 1;
}

/* ---- pass 2: stages -------------------------------------------------------------------------- */

OMC__PRIVATE uint32_t omc__cr_stage_index(omc__cres* r, int id) {
    uint32_t key = (uint32_t)id;
    void* v = omc__smap_get(&r->stage_index, (const char*)&key, sizeof(key));
    return v ? (uint32_t)((uintptr_t)v - 1) : OMC__NIL;
}

/* engine_args: only the parallel sizes matter here; the rest belongs to the engine. */
OMC__PRIVATE int omc__cr_parallel(omc__cres* r, const omc__cnode* args, const char* key, uint32_t* out) {
    const omc__cnode* v = args ? omc__cnode_get(args, key) : NULL;
    int64_t iv;
    *out = 1;
    if (!v || v->kind == OMC_CONFIG_NULL) return 1;
    if (!omc__cr_int(r, v, key, 1, 65535, &iv)) return 0;
    *out = (uint32_t)iv;
    return 1;
}

OMC__PRIVATE int omc__cr_stages(omc__cres* r, const omc__cnode* seq) {
    static const char* const known[] = { "stage_id", "input_connectors", "output_connectors", "engine_input_source", "engine_args", NULL };
    /* keys vLLM-Omni stage entries carry for the engine, not for the transfer layer */
    static const char* const quiet[] = { "runtime", "stage_type", "final_output", "final_output_type", "is_comprehension",
                                         "default_sampling_params", "custom_process_input_func", "engine_output_type",
                                         "custom_process_next_stage_input_func", "model_stage", "worker_backend", NULL };
    omc_pipeline_config* cfg = r->cfg;
    const omc__cnode* item;
    if (!omc__cr_expect(r, seq, OMC_CONFIG_SEQUENCE, "stage_args")) return 0;
    for (item = seq->first; item; item = item->next) {
        const omc__cnode *id, *args;
        omc__cstage* s;
        int64_t iv;
        uint32_t key;
        char where[64];
        if (!omc__cr_expect(r, item, OMC_CONFIG_MAPPING, "a stage_args entry")) return 0;
        id = omc__cnode_get(item, "stage_id");
        if (!id) return omc__cr_fail(r, OMC_CONFIG_ERR_MISSING, item->line, item->col, "this stage_args entry has no stage_id");
        if (!omc__cr_int(r, id, "stage_id", 0, OMC_PIPELINE_MAX_STAGE_ID, &iv)) return 0;
        if (omc__cr_stage_index(r, (int)iv) != OMC__NIL) {
            const omc__cstage* first = &cfg->stages[omc__cr_stage_index(r, (int)iv)];
            return omc__cr_fail(r, OMC_CONFIG_ERR_DUPLICATE_STAGE, id->line, id->col, "stage_id %d is defined twice (first at line %u:%u)",
                                (int)iv, first->st.line, first->st.column);
        }
        snprintf(where, sizeof(where), "stage %d", (int)iv);
        omc__cr_check_keys(r, item, where, known, quiet);
        if (!omc__vec_room(&cfg->hooks, &cfg->stages, cfg->nstage, &cfg->capstage, sizeof(omc__cstage)))
            return omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
        s = &cfg->stages[cfg->nstage];
        memset(s, 0, sizeof(*s));
        s->st.stage_id = (int)iv;
        s->st.line = id->line;
        s->st.column = id->col;
        s->node = item;
        args = omc__cnode_get(item, "engine_args");
        if (args && args->kind != OMC_CONFIG_NULL && !omc__cr_expect(r, args, OMC_CONFIG_MAPPING, "engine_args")) return 0;
        if (!omc__cr_parallel(r, args, "tensor_parallel_size", &s->st.tp_size)) return 0;
        if (!omc__cr_parallel(r, args, "data_parallel_size", &s->st.dp_size)) return 0;
        key = (uint32_t)iv;
        if (omc__smap_put(&r->stage_index, &cfg->hooks, (const char*)&key, sizeof(key), (void*)(uintptr_t)(cfg->nstage + 1)) != OMC_OK)
            return omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
        cfg->nstage++;
    }
    return 1;
}

/* ---- pass 3 and 4: edges --------------------------------------------------------------------- */

/* The edge from -> to, created (first mentioned at line:col) if it does not exist yet. */
OMC__PRIVATE omc__cedge* omc__cr_edge(omc__cres* r, int from, int to, uint32_t line, uint32_t col) {
    omc_pipeline_config* cfg = r->cfg;
    uint32_t key[2];
    void* v;
    omc__cedge* e;
    key[0] = (uint32_t)from;
    key[1] = (uint32_t)to;
    v = omc__smap_get(&r->edge_index, (const char*)key, sizeof(key));
    if (v) return &cfg->edges[(uintptr_t)v - 1];
    if (cfg->nedge >= 4u * OMNICONN_PIPELINE_MAX_ENTRIES) {
        omc__cr_fail(r, OMC_CONFIG_ERR_LIMIT, line, col, "more than %d edges", 4 * OMNICONN_PIPELINE_MAX_ENTRIES);
        return NULL;
    }
    if (!omc__vec_room(&cfg->hooks, &cfg->edges, cfg->nedge, &cfg->capedge, sizeof(omc__cedge)) ||
        omc__smap_put(&r->edge_index, &cfg->hooks, (const char*)key, sizeof(key), (void*)(uintptr_t)(cfg->nedge + 1)) != OMC_OK) {
        omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
        return NULL;
    }
    e = &cfg->edges[cfg->nedge++];
    memset(e, 0, sizeof(*e));
    e->e.from_stage = from;
    e->e.to_stage = to;
    e->e.line = line;
    e->e.column = col;
    e->side_conn[0] = e->side_conn[1] = OMC__NIL;
    return e;
}

/* Both ends of an edge exist and differ. */
OMC__PRIVATE int omc__cr_endpoints(omc__cres* r, int self, int other, int from, int to, uint32_t line, uint32_t col) {
    if (self == other)
        return omc__cr_fail(r, OMC_CONFIG_ERR_BAD_EDGE, line, col, "stage %d cannot have an edge to itself", self);
    if (omc__cr_stage_index(r, other) == OMC__NIL)
        return omc__cr_fail(r, OMC_CONFIG_ERR_UNKNOWN_STAGE, line, col, "edge %d->%d: stage %d is not defined in stage_args", from, to, other);
    return 1;
}

/* "from_stage_12" -> 12 (prefix given); -1 if the key is not of that form. */
OMC__PRIVATE int omc__edge_key_id(const char* key, const char* prefix) {
    size_t pl = strlen(prefix), i;
    long v = 0;
    if (strncmp(key, prefix, pl) != 0 || !key[pl]) return -1;
    for (i = pl; key[i]; i++) {
        if (key[i] < '0' || key[i] > '9' || i - pl >= 5) return -1;
        v = v * 10 + (key[i] - '0');
    }
    return v <= OMC_PIPELINE_MAX_STAGE_ID ? (int)v : -1;
}

/* "a, b, c" of the defined connector names, for an unknown-connector message. */
OMC__PRIVATE void omc__cfg_conn_names(const omc_pipeline_config* cfg, char* out, size_t n) {
    uint32_t i;
    size_t o = 0;
    out[0] = '\0';
    for (i = 0; i < cfg->nconn && o + 4 < n; i++) {
        int k;
        if (cfg->conns[i].is_inline) continue;     /* inline specs cannot be named */
        k = snprintf(out + o, n - o, "%s%s", o ? ", " : "", cfg->conns[i].spec.name);
        if (k < 0 || (size_t)k >= n - o) { if (n > 4) memcpy(out + n - 4, "...", 4); return; }
        o += (size_t)k;
    }
}

OMC__PRIVATE const char* omc__spec_desc(const omc_connector_spec* s, char* buf, size_t n) {
    if (s->type == OMC_CONNECTOR_MOONCAKE) snprintf(buf, n, "%s, protocol %s", s->type_name, s->protocol);
    else snprintf(buf, n, "%s", s->type_name);
    return buf;
}

/* One entry of a stage's input_connectors (receiver side) or output_connectors (sender side). */
OMC__PRIVATE int omc__cr_declared_edge(omc__cres* r, const omc__cstage* st, const omc__cnode* ent, int receiver_side) {
    omc_pipeline_config* cfg = r->cfg;
    int self = st->st.stage_id;
    int other = omc__edge_key_id(ent->key, receiver_side ? "from_stage_" : "to_stage_");
    int from, to, side = receiver_side ? 1 : 0;
    uint32_t conn = OMC__NIL;
    omc__cedge* e;
    if (other < 0)
        return omc__cr_fail(r, OMC_CONFIG_ERR_BAD_EDGE, ent->key_line, ent->key_col, "stage %d: '%s' is not an edge key (keys under %s are %s<stage id>)",
                            self, ent->key, receiver_side ? "input_connectors" : "output_connectors", receiver_side ? "from_stage_" : "to_stage_");
    from = receiver_side ? other : self;
    to = receiver_side ? self : other;
    if (!omc__cr_endpoints(r, self, other, from, to, ent->key_line, ent->key_col)) return 0;
    if (ent->kind == OMC_CONFIG_STRING) {
        conn = omc__cfg_find_conn(cfg, ent->str);
        if (conn == OMC__NIL) {
            char names[200];
            omc__cfg_conn_names(cfg, names, sizeof(names));
            return omc__cr_fail(r, OMC_CONFIG_ERR_UNKNOWN_CONNECTOR, ent->line, ent->col,
                                "edge %d->%d names connector '%s', which runtime.connectors does not define (defined: %s)",
                                from, to, ent->str, names[0] ? names : "none");
        }
    } else if (ent->kind == OMC_CONFIG_MAPPING) {      /* an inline spec */
        char nm[96];
        const char* name;
        snprintf(nm, sizeof(nm), "stage%d.%s", self, ent->key);
        name = omc__arena_strndup(&cfg->arena, nm, strlen(nm));
        if (!name) return omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
        if (!omc__cr_connector(r, name, ent, ent->line, ent->col, &conn)) return 0;
        cfg->conns[conn].is_inline = 1;
    } else if (ent->kind != OMC_CONFIG_NULL) {
        return omc__cr_fail(r, OMC_CONFIG_ERR_TYPE, ent->line, ent->col,
                            "edge %d->%d: a connector reference must be a connector name or a {name, extra} mapping, not %s",
                            from, to, omc__kind_name(ent->kind));
    }
    e = omc__cr_edge(r, from, to, ent->key_line, ent->key_col);
    if (!e) return 0;
    e->e.declared |= receiver_side ? OMC_EDGE_DECLARED_BY_RECEIVER : OMC_EDGE_DECLARED_BY_SENDER;
    if (conn == OMC__NIL) return 1;     /* a null reference: the other end or auto_shm decides */
    e->side_conn[side] = conn;
    e->side_line[side] = ent->line;
    e->side_col[side] = ent->col;
    if (e->side_conn[!side] != OMC__NIL && e->side_conn[!side] != conn) {
        const omc_connector_spec* a = &cfg->conns[e->side_conn[!side]].spec;
        const omc_connector_spec* b = &cfg->conns[conn].spec;
        int a_stage = side ? from : to;
        char da[128], db[128];
        if (a->type != b->type || a->transport != b->transport)
            return omc__cr_fail(r, OMC_CONFIG_ERR_TYPE_MISMATCH, ent->line, ent->col,
                                "edge %d->%d: stage %d's %s names '%s' (%s) but stage %d's %s names '%s' (%s, line %u:%u); "
                                "both ends of an edge must use the same connector type",
                                from, to, self, receiver_side ? "input_connectors" : "output_connectors", b->name, omc__spec_desc(b, db, sizeof(db)),
                                a_stage, receiver_side ? "output_connectors" : "input_connectors", a->name, omc__spec_desc(a, da, sizeof(da)),
                                e->side_line[!side], e->side_col[!side]);
        omc__cr_warn(r, OMC_CONFIG_WARN_CONNECTOR_CONFLICT, ent->line, ent->col,
                     "edge %d->%d: the two ends name different connectors of type %s ('%s' and '%s'); using the sender's, '%s'",
                     from, to, a->type_name, cfg->conns[e->side_conn[0]].spec.name, cfg->conns[e->side_conn[1]].spec.name,
                     cfg->conns[e->side_conn[0]].spec.name);
    }
    return 1;
}

/* The edges a stage declares in its input_connectors and output_connectors. */
OMC__PRIVATE int omc__cr_declared_edges(omc__cres* r, uint32_t stage) {
    static const char* const sides[2] = { "output_connectors", "input_connectors" };
    int side;
    for (side = 1; side >= 0; side--) {        /* inputs first, as vLLM-Omni reads them */
        const omc__cnode* map = omc__cnode_get(r->cfg->stages[stage].node, sides[side]);
        const omc__cnode* ent;
        char what[96];
        if (!map || map->kind == OMC_CONFIG_NULL) continue;
        snprintf(what, sizeof(what), "%s of stage %d", sides[side], r->cfg->stages[stage].st.stage_id);
        if (!omc__cr_expect(r, map, OMC_CONFIG_MAPPING, what)) return 0;
        for (ent = map->first; ent; ent = ent->next)
            if (!omc__cr_declared_edge(r, &r->cfg->stages[stage], ent, side)) return 0;
    }
    return 1;
}

/* An edge known from the topology only (runtime.edges, engine_input_source). */
OMC__PRIVATE int omc__cr_topology_edge(omc__cres* r, const omc__cnode* from_nd, const omc__cnode* to_nd, int to_fixed,
                                       uint32_t line, uint32_t col) {
    int64_t from, to;
    if (!omc__cr_int(r, from_nd, "an edge's source stage", 0, OMC_PIPELINE_MAX_STAGE_ID, &from)) return 0;
    if (to_nd) { if (!omc__cr_int(r, to_nd, "an edge's target stage", 0, OMC_PIPELINE_MAX_STAGE_ID, &to)) return 0; }
    else to = to_fixed;
    if (omc__cr_stage_index(r, (int)to) == OMC__NIL)
        return omc__cr_fail(r, OMC_CONFIG_ERR_UNKNOWN_STAGE, line, col, "edge %d->%d: stage %d is not defined in stage_args", (int)from, (int)to, (int)to);
    if (!omc__cr_endpoints(r, (int)to, (int)from, (int)from, (int)to, line, col)) return 0;
    return omc__cr_edge(r, (int)from, (int)to, line, col) != NULL;
}

OMC__PRIVATE int omc__cr_topology(omc__cres* r, const omc__cnode* edges) {
    static const char* const known[] = { "from", "to", NULL };
    static const char* const quiet[] = { "window_size", "max_inflight", NULL };
    omc_pipeline_config* cfg = r->cfg;
    const omc__cnode* it;
    uint32_t s;
    if (edges && edges->kind != OMC_CONFIG_NULL) {
        if (!omc__cr_expect(r, edges, OMC_CONFIG_SEQUENCE, "edges")) return 0;
        for (it = edges->first; it; it = it->next) {
            const omc__cnode *f, *t;
            if (!omc__cr_expect(r, it, OMC_CONFIG_MAPPING, "an edges entry")) return 0;
            omc__cr_check_keys(r, it, "edges entry", known, quiet);
            f = omc__cnode_get(it, "from");
            t = omc__cnode_get(it, "to");
            if (!f || !t) return omc__cr_fail(r, OMC_CONFIG_ERR_MISSING, it->line, it->col, "an edges entry needs both 'from' and 'to'");
            if (!omc__cr_topology_edge(r, f, t, 0, it->line, it->col)) return 0;
        }
    }
    for (s = 0; s < cfg->nstage; s++) {
        const omc__cnode* src = omc__cnode_get(cfg->stages[s].node, "engine_input_source");
        int to = cfg->stages[s].st.stage_id;
        if (!src || src->kind == OMC_CONFIG_NULL) continue;
        if (src->kind == OMC_CONFIG_INT) { if (!omc__cr_topology_edge(r, src, NULL, to, src->line, src->col)) return 0; continue; }
        if (!omc__cr_expect(r, src, OMC_CONFIG_SEQUENCE, "engine_input_source")) return 0;
        for (it = src->first; it; it = it->next)
            if (!omc__cr_topology_edge(r, it, NULL, to, it->line, it->col)) return 0;
    }
    return 1;
}

/* The shared-memory spec that fills edges nobody gave a connector (created on first need). */
OMC__PRIVATE uint32_t omc__cr_auto_shm(omc__cres* r) {
    omc_pipeline_config* cfg = r->cfg;
    omc__cconn* c;
    if (cfg->auto_shm != OMC__NIL) return cfg->auto_shm;
    if (!omc__vec_room(&cfg->hooks, &cfg->conns, cfg->nconn, &cfg->capconn, sizeof(omc__cconn))) {
        omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
        return OMC__NIL;
    }
    c = &cfg->conns[cfg->nconn];
    memset(c, 0, sizeof(*c));
    omc__spec_defaults(&c->spec, OMC_CONNECTOR_SHM);
    c->spec.name = "auto_shm";
    c->spec.type_name = "SharedMemoryConnector";
    c->spec.auto_filled = 1;
    omc__spec_finish(&c->spec);
    cfg->auto_shm = cfg->nconn++;
    return cfg->auto_shm;
}

static int omc__stage_cmp(const void* a, const void* b) {
    int x = ((const omc__cstage*)a)->st.stage_id, y = ((const omc__cstage*)b)->st.stage_id;
    return (x > y) - (x < y);
}

static int omc__edge_cmp(const void* a, const void* b) {
    const omc_pipeline_edge *x = &((const omc__cedge*)a)->e, *y = &((const omc__cedge*)b)->e;
    if (x->from_stage != y->from_stage) return (x->from_stage > y->from_stage) - (x->from_stage < y->from_stage);
    return (x->to_stage > y->to_stage) - (x->to_stage < y->to_stage);
}

/* Every edge gets its connector (the sender's, else the receiver's, else auto_shm); stages get
   their edge counts and roles; both tables are sorted. */
OMC__PRIVATE int omc__cr_settle(omc__cres* r) {
    omc_pipeline_config* cfg = r->cfg;
    uint32_t i;
    for (i = 0; i < cfg->nedge; i++) {
        omc__cedge* e = &cfg->edges[i];
        uint32_t c = e->side_conn[0] != OMC__NIL ? e->side_conn[0] : e->side_conn[1];
        if (c == OMC__NIL) {
            c = omc__cr_auto_shm(r);
            if (c == OMC__NIL) return 0;
            OMC__LOG(&cfg->hooks, OMC_LOG_INFO, OMC_LOGITEM_CONFIG, "%s: edge %d->%d has no connector: shared memory (auto_shm)",
                     cfg->name, e->e.from_stage, e->e.to_stage);
        }
        e->e.connector = c;
        e->e.connector_name = cfg->conns[c].spec.name;
        e->e.type = cfg->conns[c].spec.type;
        e->e.transport = cfg->conns[c].spec.transport;
        cfg->stages[omc__cr_stage_index(r, e->e.from_stage)].st.outbound++;
        cfg->stages[omc__cr_stage_index(r, e->e.to_stage)].st.inbound++;
    }
    for (i = 0; i < cfg->nstage; i++) {
        omc_pipeline_stage* s = &cfg->stages[i].st;
        s->role = s->inbound && s->outbound ? OMC_ROLE_DUAL : s->outbound ? OMC_ROLE_SENDER : s->inbound ? OMC_ROLE_RECEIVER : OMC_ROLE_DEFAULT;
    }
    if (cfg->nstage > 1) qsort(cfg->stages, cfg->nstage, sizeof(omc__cstage), omc__stage_cmp);
    if (cfg->nedge > 1) qsort(cfg->edges, cfg->nedge, sizeof(omc__cedge), omc__edge_cmp);
    return 1;
}

/* ---- pass 5: ports --------------------------------------------------------------------------- */

OMC__PRIVATE int omc__port_cmp(const void* a, const void* b) {
    const omc_port_use *x = (const omc_port_use*)a, *y = (const omc_port_use*)b;
    int h = strcmp(x->host, y->host);
    if (h) return h;
    if (x->port != y->port) return (x->port > y->port) - (x->port < y->port);
    return (x->edge > y->edge) - (x->edge < y->edge);
}

OMC__PRIVATE const char* omc__port_what(const omc_port_use* u, char* buf, size_t n) {
    if (u->orchestrator) snprintf(buf, n, "orchestrator");
    else snprintf(buf, n, "%s, dp %u, tp rank %u", u->purpose ? "kv_transfer" : "request_forwarding", u->dp_index, u->tp_rank);
    return buf;
}

#if OMC__PIPELINE_PORTS
/* One listener of edge `edge` (the scheme is omc_port_compute's, the remote connector's). */
OMC__PRIVATE int omc__cr_port(omc__cres* r, uint32_t edge, const omc_port_spec* d) {
    omc_pipeline_config* cfg = r->cfg;
    const omc__cedge* e = &cfg->edges[edge];
    const omc_connector_spec* spec = &cfg->conns[e->e.connector].spec;
    omc_port_use* u;
    uint16_t port;
    if (omc_port_compute(d, &port) != OMC_OK) {
        uint64_t offset = (uint64_t)d->from_stage + (d->orchestrator ? 0 : (uint64_t)d->dp_index * (uint64_t)d->tp_size + (uint64_t)d->tp_rank);
        const char* what = d->orchestrator ? "orchestrator" : d->purpose == OMC_PORT_KV_TRANSFER ? "kv_transfer" : "request_forwarding";
        if (offset >= 100)
            return omc__cr_fail(r, OMC_CONFIG_ERR_PORT_RANGE, e->e.line, e->e.column,
                                "edge %d->%d: the %s port for dp %d, tp rank %d has offset %llu (stage + dp x tp + rank), which "
                                "runs into the next purpose's 100-port range (fewer replicas per stage, or lower stage ids)",
                                e->e.from_stage, e->e.to_stage, what, d->dp_index, d->tp_rank, (unsigned long long)offset);
        return omc__cr_fail(r, OMC_CONFIG_ERR_PORT_RANGE, e->e.line, e->e.column,
                            "edge %d->%d: the %s port for dp %d, tp rank %d would be %llu, above 65535 (lower zmq_port of connector '%s')",
                            e->e.from_stage, e->e.to_stage, what, d->dp_index, d->tp_rank,
                            (unsigned long long)d->base + (d->orchestrator ? 200u : (uint64_t)d->purpose) + offset, spec->name);
    }
    if (cfg->nport >= (1u << 20)) return omc__cr_fail(r, OMC_CONFIG_ERR_LIMIT, e->e.line, e->e.column, "more than 2^20 ports in one configuration");
    if (!omc__vec_room(&cfg->hooks, &cfg->ports, cfg->nport, &cfg->capport, sizeof(omc_port_use)))
        return omc__cr_fail(r, OMC_CONFIG_ERR_NO_MEMORY, 0, 0, "out of memory");
    u = &cfg->ports[cfg->nport++];
    memset(u, 0, sizeof(*u));
    u->port = port;
    u->host = spec->host;
    u->edge = edge;
    u->from_stage = e->e.from_stage;
    u->to_stage = e->e.to_stage;
    u->purpose = d->orchestrator ? 0u : (uint32_t)d->purpose;
    u->dp_index = (uint32_t)d->dp_index;
    u->tp_rank = (uint32_t)d->tp_rank;
    u->orchestrator = d->orchestrator;
    return 1;
}

/* Every listener of one TCP/RDMA edge: both purposes, every DP replica and TP rank of the
   sending stage, and the orchestrator's. */
OMC__PRIVATE int omc__cr_edge_ports(omc__cres* r, uint32_t i) {
    const omc__cedge* e = &r->cfg->edges[i];
    const omc_connector_spec* spec = &r->cfg->conns[e->e.connector].spec;
    omc_pipeline_stage st;
    omc_port_spec d;
    int purpose, dp, rank;
    omc_pipeline_config_find_stage(r->cfg, e->e.from_stage, &st);
    memset(&d, 0, sizeof(d));
    d.base = (int)spec->zmq_port;
    d.from_stage = e->e.from_stage;
    d.tp_size = (int)st.tp_size;
    for (purpose = 0; purpose < 2; purpose++)
        for (dp = 0; dp < (int)st.dp_size; dp++)
            for (rank = 0; rank < (int)st.tp_size; rank++) {
                d.purpose = purpose ? OMC_PORT_KV_TRANSFER : OMC_PORT_REQUEST_FORWARDING;
                d.dp_index = dp;
                d.tp_rank = rank;
                if (!omc__cr_port(r, i, &d)) return 0;
            }
    memset(&d, 0, sizeof(d));
    d.base = (int)spec->zmq_port;
    d.from_stage = e->e.from_stage;
    d.orchestrator = 1;
    return omc__cr_port(r, i, &d);
}
#endif

/* Every listener of every TCP/RDMA edge, then the collision check: sorted by (host, port), two
   neighbours with the same port are two listeners on one port. (omc_port_check knows neither
   hosts nor shared listeners, hence this check.) Edges from one stage over one connector share
   listeners (keys are stage-qualified), so only the first of them adds ports. */
OMC__PRIVATE int omc__cr_ports(omc__cres* r) {
#if OMC__PIPELINE_PORTS
    omc_pipeline_config* cfg = r->cfg;
    uint32_t i, k;
    for (i = 0; i < cfg->nedge; i++) {
        const omc__cedge* e = &cfg->edges[i];
        int shared = 0;
        if (e->e.transport != OMC_TRANSPORT_TCP && e->e.transport != OMC_TRANSPORT_RDMA) continue;
        for (k = i; k-- > 0 && cfg->edges[k].e.from_stage == e->e.from_stage;)  /* sorted: same source is adjacent */
            if (cfg->edges[k].e.connector == e->e.connector) shared = 1;
        if (!shared && !omc__cr_edge_ports(r, i)) return 0;
    }
    if (cfg->nport > 1) qsort(cfg->ports, cfg->nport, sizeof(omc_port_use), omc__port_cmp);
    if (cfg->skip_port_check) return 1;
    for (i = 1; i < cfg->nport; i++) {
        const omc_port_use *a = &cfg->ports[i - 1], *b = &cfg->ports[i];
        if (a->port == b->port && strcmp(a->host, b->host) == 0) {
            const omc__cedge* eb = &cfg->edges[b->edge];
            char wa[64], wb[64];
            return omc__cr_fail(r, OMC_CONFIG_ERR_PORT_COLLISION, eb->e.line, eb->e.column,
                                "port %u on host '%s' is used twice: by edge %d->%d (%s) and by edge %d->%d (%s); give one of "
                                "their connectors another zmq_port, or leave more room between the stage ids",
                                a->port, a->host, a->from_stage, a->to_stage, omc__port_what(a, wa, sizeof(wa)),
                                b->from_stage, b->to_stage, omc__port_what(b, wb, sizeof(wb)));
        }
    }
#else
    (void)r;
#endif
    return 1;
}

/* ---- the whole resolution -------------------------------------------------------------------- */

/* runtime.<key> or the top-level <key> (vLLM-Omni's newer schema), not both. */
OMC__PRIVATE int omc__cr_either(omc__cres* r, const omc__cnode* runtime, const char* key, const omc__cnode** out) {
    const omc__cnode* a = runtime ? omc__cnode_get(runtime, key) : NULL;
    const omc__cnode* b = omc__cnode_get(r->cfg->root, key);
    if (a && b)
        return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, b->key_line, b->key_col, "'%s' is defined both here and under runtime (line %u:%u): keep one",
                            key, a->key_line, a->key_col);
    *out = a ? a : b;
    return 1;
}

OMC__PRIVATE int omc__cr_resolve(omc__cres* r) {
    static const char* const top_known[] = { "runtime", "stage_args", "stages", "connectors", "edges", NULL };
    static const char* const runtime_known[] = { "connectors", "edges", NULL };
    static const char* const runtime_quiet[] = { "enabled", "defaults", NULL };
    const omc__cnode* root = r->cfg->root;
    const omc__cnode *runtime, *conns = NULL, *edges = NULL, *stages, *alt;
    uint32_t i;
    if (root->kind == OMC_CONFIG_NULL)
        return omc__cr_fail(r, OMC_CONFIG_ERR_MISSING, 0, 0, "the configuration is empty (it needs at least a stage_args list)");
    if (root->kind != OMC_CONFIG_MAPPING)
        return omc__cr_fail(r, OMC_CONFIG_ERR_TYPE, root->line, root->col, "the top level must be a mapping (runtime:, stage_args:), not %s",
                            omc__kind_name(root->kind));
    omc__cr_check_keys(r, root, "top level", top_known, NULL);
    runtime = omc__cnode_get(root, "runtime");
    if (runtime && runtime->kind == OMC_CONFIG_NULL) runtime = NULL;
    if (runtime) {
        if (!omc__cr_expect(r, runtime, OMC_CONFIG_MAPPING, "runtime")) return 0;
        omc__cr_check_keys(r, runtime, "runtime", runtime_known, runtime_quiet);
    }
    if (!omc__cr_either(r, runtime, "connectors", &conns) || !omc__cr_either(r, runtime, "edges", &edges)) return 0;
    stages = omc__cnode_get(root, "stage_args");
    alt = omc__cnode_get(root, "stages");
    if (stages && alt)
        return omc__cr_fail(r, OMC_CONFIG_ERR_VALUE, alt->key_line, alt->key_col, "both stage_args (line %u:%u) and stages are defined: keep one",
                            stages->key_line, stages->key_col);
    if (!stages) stages = alt;
    if (!stages) return omc__cr_fail(r, OMC_CONFIG_ERR_MISSING, root->line, root->col, "the configuration has no stage_args list");
    if (!omc__cr_connectors(r, conns)) return 0;
    if (!omc__cr_stages(r, stages)) return 0;
    for (i = 0; i < r->cfg->nstage; i++)
        if (!omc__cr_declared_edges(r, i)) return 0;
    if (!omc__cr_topology(r, edges)) return 0;
    if (!omc__cr_settle(r)) return 0;
    return omc__cr_ports(r);
}

/* ============================================================================================== */
/* [SECTION] Implementation: loading                                                             */
/* ============================================================================================== */

OMC__PRIVATE omc_config_format omc__config_sniff(const char* s, size_t n) {
    size_t i = (n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) ? 3 : 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i < n && (s[i] == '{' || s[i] == '[') ? OMC_CONFIG_FORMAT_JSON : OMC_CONFIG_FORMAT_YAML;
}

#if defined(__GNUC__)
__attribute__((format(printf, 6, 7)))
#endif
OMC__PRIVATE omc_result omc__config_error(const omc_hooks* hooks, omc_config_diag* err, const char* name, omc_config_code code,
                                          uint32_t line, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    omc__config_vdiag(err, name, code, line, line ? 1 : 0, fmt, ap);
    va_end(ap);
    OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_CONFIG, "%s", err->message);
    return err->result;
}

OMC__PRIVATE omc_result omc__config_load(const char* text, size_t len, omc_config_format format, const char* name, const char* dir,
                                         const omc_pipeline_config_desc* d, const omc_hooks* hooks,
                                         omc_pipeline_config** out, omc_config_diag* err) {
    omc_pipeline_config* cfg;
    omc__cparse p;
    omc__cres r;
    const char* nul;
    if (len > OMNICONN_PIPELINE_MAX_CONFIG_BYTES)
        return omc__config_error(hooks, err, name, OMC_CONFIG_ERR_LIMIT, 0, "%llu bytes is more than OMNICONN_PIPELINE_MAX_CONFIG_BYTES (%llu)",
                                 (unsigned long long)len, (unsigned long long)OMNICONN_PIPELINE_MAX_CONFIG_BYTES);
    cfg = (omc_pipeline_config*)omc__calloc(hooks, sizeof(omc_pipeline_config));
    if (!cfg) return omc__config_error(hooks, err, name, OMC_CONFIG_ERR_NO_MEMORY, 0, "out of memory");
    cfg->hooks = *hooks;
    cfg->arena.hooks = *hooks;
    cfg->auto_shm = OMC__NIL;
    cfg->skip_port_check = d->skip_port_check;
    cfg->name = omc__arena_strndup(&cfg->arena, name, strlen(name));
    cfg->dir = omc__arena_strndup(&cfg->arena, dir, strlen(dir));
    if (!cfg->name || !cfg->dir) { omc_pipeline_config_destroy(cfg); return omc__config_error(hooks, err, name, OMC_CONFIG_ERR_NO_MEMORY, 0, "out of memory"); }
    memset(&p, 0, sizeof(p));
    p.s = text;
    p.n = len;
    p.line = 1;
    p.arena = &cfg->arena;
    p.name = cfg->name;
    p.err = err;
    nul = len ? (const char*)memchr(text, '\0', len) : NULL;
    if (nul) {          /* position it like any other error: count the lines before it */
        size_t k;
        for (k = 0; k < (size_t)(nul - text); k++) if (text[k] == '\n') { p.line++; p.line_start = k + 1; }
        p.i = (size_t)(nul - text);
        omc__cp_fail_here(&p, OMC_CONFIG_ERR_SYNTAX, "NUL byte in the text (is this a binary file?)");
    } else {
        if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) p.i = p.line_start = 3;     /* UTF-8 byte order mark */
        if (format == OMC_CONFIG_FORMAT_AUTO) format = omc__config_sniff(text, len);
        cfg->root = format == OMC_CONFIG_FORMAT_JSON ? omc__j_document(&p) : omc__y_document(&p);
    }
    if (!p.failed) {
        memset(&r, 0, sizeof(r));
        r.cfg = cfg;
        r.err = err;
        omc__cr_resolve(&r);
        omc__smap_free(&r.stage_index, hooks);
        omc__smap_free(&r.edge_index, hooks);
        p.failed = r.failed;
    }
    if (p.failed) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_CONFIG, "%s", err->message);
        omc_pipeline_config_destroy(cfg);
        return err->result;
    }
    *out = cfg;
    return OMC_OK;
}

OMNICONN_API omc_result omc_pipeline_config_load_string(const char* text, size_t len, const omc_pipeline_config_desc* desc,
                                                        omc_pipeline_config** out, omc_config_diag* error) {
    omc_pipeline_config_desc d;
    omc_config_diag scratch;
    omc_config_diag* err = error ? error : &scratch;
    omc_hooks hooks;
    memset(err, 0, sizeof(*err));
    if (out) *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.hooks);
    if (!out || (!text && len))
        return omc__config_error(&hooks, err, d.name ? d.name : "<string>", OMC_CONFIG_ERR_VALUE, 0, "invalid argument (out or text is NULL)");
    return omc__config_load(text ? text : "", len, d.format, d.name ? d.name : "<string>", "", &d, &hooks, out, err);
}

OMC__PRIVATE int omc__ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), k = strlen(suffix), i;
    if (n < k) return 0;
    for (i = 0; i < k; i++) {
        char c = s[n - k + i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != suffix[i]) return 0;
    }
    return 1;
}

OMNICONN_API omc_result omc_pipeline_config_load_file(const char* path, const omc_pipeline_config_desc* desc,
                                                      omc_pipeline_config** out, omc_config_diag* error) {
    omc_pipeline_config_desc d;
    omc_config_diag scratch;
    omc_config_diag* err = error ? error : &scratch;
    omc_hooks hooks;
    const char* name;
    char* buf = NULL;
    size_t len = 0, cap = 0;
    FILE* f;
    omc_result r;
    memset(err, 0, sizeof(*err));
    if (out) *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.hooks);
    name = d.name ? d.name : path ? path : "<null>";
    if (!out || !path) return omc__config_error(&hooks, err, name, OMC_CONFIG_ERR_VALUE, 0, "invalid argument (out or path is NULL)");
    f = fopen(path, "rb");
    if (!f) return omc__config_error(&hooks, err, name, OMC_CONFIG_ERR_IO, 0, "cannot open the file: %s", strerror(errno));
    for (;;) {      /* read it all (a pipe has no size to ask for) */
        size_t got;
        if (len == cap) {
            char* nb;
            if (cap > OMNICONN_PIPELINE_MAX_CONFIG_BYTES) break;
            cap = cap ? cap * 2 : 65536;
            nb = (char*)omc__malloc(&hooks, cap);
            if (!nb) { omc__free(&hooks, buf); fclose(f); return omc__config_error(&hooks, err, name, OMC_CONFIG_ERR_NO_MEMORY, 0, "out of memory"); }
            if (len) memcpy(nb, buf, len);
            omc__free(&hooks, buf);
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        int e = errno;
        omc__free(&hooks, buf);
        fclose(f);
        return omc__config_error(&hooks, err, name, OMC_CONFIG_ERR_IO, 0, "cannot read the file: %s", strerror(e));
    }
    fclose(f);
    if (d.format == OMC_CONFIG_FORMAT_AUTO) {
        if (omc__ends_with(path, ".json")) d.format = OMC_CONFIG_FORMAT_JSON;
        else if (omc__ends_with(path, ".yaml") || omc__ends_with(path, ".yml")) d.format = OMC_CONFIG_FORMAT_YAML;
    }
    {   /* relative key-file paths in the file are relative to the file */
        const char* slash = strrchr(path, '/');
        char dir[1024];
        if (!slash) dir[0] = '\0';
        else if (slash == path) snprintf(dir, sizeof(dir), "/");
        else snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
        r = omc__config_load(buf ? buf : "", len, d.format, name, dir, &d, &hooks, out, err);
    }
    omc__free(&hooks, buf);
    return r;
}

/* ============================================================================================== */
/* [SECTION] Implementation: accessors                                                           */
/* ============================================================================================== */

OMNICONN_API uint32_t omc_pipeline_config_warning_count(const omc_pipeline_config* cfg) { return cfg ? cfg->nwarn : 0; }

OMNICONN_API omc_result omc_pipeline_config_warning(const omc_pipeline_config* cfg, uint32_t i, omc_config_diag* out) {
    if (out) memset(out, 0, sizeof(*out));     /* a failed lookup hands out nothing */
    if (!cfg || !out) return OMC_ERR_INVALID_ARG;
    if (i >= cfg->nwarn_kept) return OMC_ERR_NOT_FOUND;
    *out = cfg->warnings[i];
    return OMC_OK;
}

OMNICONN_API uint32_t omc_pipeline_config_stage_count(const omc_pipeline_config* cfg) { return cfg ? cfg->nstage : 0; }
OMNICONN_API uint32_t omc_pipeline_config_edge_count(const omc_pipeline_config* cfg) { return cfg ? cfg->nedge : 0; }
OMNICONN_API uint32_t omc_pipeline_config_connector_count(const omc_pipeline_config* cfg) { return cfg ? cfg->nconn : 0; }
OMNICONN_API uint32_t omc_pipeline_config_port_count(const omc_pipeline_config* cfg) { return cfg ? cfg->nport : 0; }

OMNICONN_API omc_result omc_pipeline_config_stage(const omc_pipeline_config* cfg, uint32_t i, omc_pipeline_stage* out) {
    if (out) memset(out, 0, sizeof(*out));     /* a failed lookup hands out nothing */
    if (!cfg || !out) return OMC_ERR_INVALID_ARG;
    if (i >= cfg->nstage) return OMC_ERR_NOT_FOUND;
    *out = cfg->stages[i].st;
    return OMC_OK;
}

/* Binary search: stages are sorted by id once loading has settled them. */
OMNICONN_API omc_result omc_pipeline_config_find_stage(const omc_pipeline_config* cfg, int id, omc_pipeline_stage* out) {
    uint32_t lo = 0, hi;
    if (out) memset(out, 0, sizeof(*out));     /* a failed lookup hands out nothing */
    if (!cfg || !out) return OMC_ERR_INVALID_ARG;
    hi = cfg->nstage;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int sid = cfg->stages[mid].st.stage_id;
        if (sid == id) { *out = cfg->stages[mid].st; return OMC_OK; }
        if (sid < id) lo = mid + 1; else hi = mid;
    }
    return OMC_ERR_NOT_FOUND;
}

OMNICONN_API omc_result omc_pipeline_config_edge(const omc_pipeline_config* cfg, uint32_t i, omc_pipeline_edge* out) {
    if (out) memset(out, 0, sizeof(*out));     /* a failed lookup hands out nothing */
    if (!cfg || !out) return OMC_ERR_INVALID_ARG;
    if (i >= cfg->nedge) return OMC_ERR_NOT_FOUND;
    *out = cfg->edges[i].e;
    return OMC_OK;
}

OMNICONN_API omc_result omc_pipeline_config_find_edge(const omc_pipeline_config* cfg, int from, int to, omc_pipeline_edge* out) {
    uint32_t lo = 0, hi;
    if (out) memset(out, 0, sizeof(*out));     /* a failed lookup hands out nothing */
    if (!cfg || !out) return OMC_ERR_INVALID_ARG;
    hi = cfg->nedge;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const omc_pipeline_edge* e = &cfg->edges[mid].e;
        if (e->from_stage == from && e->to_stage == to) { *out = *e; return OMC_OK; }
        if (e->from_stage < from || (e->from_stage == from && e->to_stage < to)) lo = mid + 1; else hi = mid;
    }
    return OMC_ERR_NOT_FOUND;
}

OMNICONN_API omc_result omc_pipeline_config_connector(const omc_pipeline_config* cfg, uint32_t i, omc_connector_spec* out) {
    if (out) memset(out, 0, sizeof(*out));     /* a failed lookup hands out nothing */
    if (!cfg || !out) return OMC_ERR_INVALID_ARG;
    if (i >= cfg->nconn) return OMC_ERR_NOT_FOUND;
    *out = cfg->conns[i].spec;
    return OMC_OK;
}

OMNICONN_API omc_result omc_pipeline_config_port(const omc_pipeline_config* cfg, uint32_t i, omc_port_use* out) {
    if (out) memset(out, 0, sizeof(*out));     /* a failed lookup hands out nothing */
    if (!cfg || !out) return OMC_ERR_INVALID_ARG;
    if (i >= cfg->nport) return OMC_ERR_NOT_FOUND;
    *out = cfg->ports[i];
    return OMC_OK;
}

OMNICONN_API omc_role omc_pipeline_edge_role(const omc_pipeline_edge* e, int stage_id) {
    if (!e) return OMC_ROLE_DEFAULT;
    if (e->from_stage == stage_id) return OMC_ROLE_SENDER;
    if (e->to_stage == stage_id) return OMC_ROLE_RECEIVER;
    return OMC_ROLE_DEFAULT;
}

OMNICONN_API omc_result omc_pipeline_connector_option(const omc_pipeline_config* cfg, uint32_t i, const char* key, omc_config_value* out) {
    const omc__cnode* v;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!cfg || !key) return OMC_ERR_INVALID_ARG;
    if (i >= cfg->nconn) return OMC_ERR_NOT_FOUND;
    v = omc__cnode_get(cfg->conns[i].extra, key);
    if (!v) return OMC_ERR_NOT_FOUND;
    out->kind = v->kind;
    out->boolean = v->boolean;
    out->integer = v->integer;
    out->number = v->number;
    out->string = v->kind == OMC_CONFIG_STRING ? v->str : NULL;
    out->length = v->len;
    out->line = v->line;
    out->column = v->col;
    return OMC_OK;
}

#endif /* !OMNICONN_PIPELINE_NO_CONFIG */

/* ============================================================================================== */
/* [SECTION] Implementation: transfer ids                                                        */
/* ============================================================================================== */
/*
    Two string maps over the same entries: transfer id -> entry and request id -> entry, under one
    mutex. An entry is one allocation holding both ids. It is created by begin and destroyed by
    exactly one of complete (the normal end: the caller gets the local id), abort (the request
    died locally) or the TTL sweep (the completion never came: on_expired hears about it), so an
    entry cannot outlive its transfer by more than the TTL.
*/

typedef struct omc__xfer_entry {
    struct omc__xfer_entry* next_expired;   /* sweep's list of victims */
    omc_time_ns started;
    uint32_t xlen, rlen;
    char* xfer;                             /* both point into this allocation */
    char* req;
} omc__xfer_entry;

struct omc_xfer_map {
    omc_hooks hooks;
    pthread_mutex_t mu;
    omc__smap by_xfer;
    omc__smap by_req;
    int64_t ttl_ms;
    omc_xfer_expired_fn on_expired;
    void* user_data;
    omc_time_ns next_sweep;
};

OMNICONN_API omc_result omc_xfer_id_generate(char out[OMC_XFER_ID_SIZE]) {
    uint8_t b[16];
    int i, o;
    static const char hex[] = "0123456789abcdef";
    if (!out) return OMC_ERR_INVALID_ARG;
    omc__random_bytes(b, sizeof(b));
    b[6] = (uint8_t)((b[6] & 0x0F) | 0x40);     /* version 4: random */
    b[8] = (uint8_t)((b[8] & 0x3F) | 0x80);     /* the RFC 4122 variant */
    memcpy(out, OMC_XFER_ID_PREFIX, 5);
    for (i = 0, o = 5; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        out[o++] = hex[b[i] >> 4];
        out[o++] = hex[b[i] & 15];
    }
    out[o] = '\0';
    return OMC_OK;
}

OMNICONN_API omc_result omc_xfer_map_create(const omc_xfer_map_desc* desc, omc_xfer_map** out) {
    omc_xfer_map_desc d;
    omc_hooks hooks;
    omc_xfer_map* m;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.hooks);
    m = (omc_xfer_map*)omc__calloc(&hooks, sizeof(omc_xfer_map));
    if (!m) return OMC_ERR_NO_MEMORY;
    if (pthread_mutex_init(&m->mu, NULL) != 0) { omc__free(&hooks, m); return OMC_ERR_SYSTEM; }
    m->hooks = hooks;
    m->ttl_ms = d.ttl_ms ? d.ttl_ms : OMNICONN_XFER_TTL_MS;
    m->on_expired = d.on_expired;
    m->user_data = d.user_data;
    *out = m;
    return OMC_OK;
}

OMNICONN_API void omc_xfer_map_destroy(omc_xfer_map* m) {
    uint32_t it = 0;
    void* v;
    if (!m) return;
    while (omc__smap_next(&m->by_xfer, &it, NULL, NULL, &v)) omc__free(&m->hooks, v);
    omc__smap_free(&m->by_xfer, &m->hooks);
    omc__smap_free(&m->by_req, &m->hooks);
    pthread_mutex_destroy(&m->mu);
    omc__free(&m->hooks, m);
}

OMC__PRIVATE int omc__xfer_id_ok(const char* id) { return id && id[0] && strlen(id) < OMC_XFER_MAX_ID; }

/* Take an entry out of both maps (caller holds mu). */
OMC__PRIVATE void omc__xfer_unlink(omc_xfer_map* m, omc__xfer_entry* e) {
    omc__smap_del(&m->by_xfer, &m->hooks, e->xfer, e->xlen);
    omc__smap_del(&m->by_req, &m->hooks, e->req, e->rlen);
}

/* Collect the expired entries (caller holds mu); they are reported and freed after unlocking. */
OMC__PRIVATE omc__xfer_entry* omc__xfer_collect_expired(omc_xfer_map* m, omc_time_ns now) {
    omc__xfer_entry* victims = NULL;
    uint32_t it = 0;
    void* v;
    m->next_sweep = now + 1000000000LL;
    if (m->ttl_ms < 0) return NULL;
    /* deleting leaves a tombstone and never moves other slots, so the walk can go on */
    while (omc__smap_next(&m->by_xfer, &it, NULL, NULL, &v)) {
        omc__xfer_entry* e = (omc__xfer_entry*)v;
        if (now - e->started < m->ttl_ms * 1000000LL) continue;
        omc__xfer_unlink(m, e);
        e->next_expired = victims;
        victims = e;
    }
    return victims;
}

OMC__PRIVATE uint64_t omc__xfer_report_expired(omc_xfer_map* m, omc__xfer_entry* victims) {
    uint64_t n = 0;
    while (victims) {
        omc__xfer_entry* next = victims->next_expired;
        OMC__LOG(&m->hooks, OMC_LOG_WARN, OMC_LOGITEM_PIPELINE, "transfer %s (request %s) got no completion within %lld ms: dropped",
                 victims->xfer, victims->req, (long long)m->ttl_ms);
        if (m->on_expired) m->on_expired(victims->xfer, victims->req, m->user_data);
        omc__free(&m->hooks, victims);
        victims = next;
        n++;
    }
    return n;
}

OMNICONN_API uint64_t omc_xfer_map_sweep(omc_xfer_map* m) {
    omc__xfer_entry* victims;
    if (!m) return 0;
    pthread_mutex_lock(&m->mu);
    victims = omc__xfer_collect_expired(m, omc_now_ns());
    pthread_mutex_unlock(&m->mu);
    return omc__xfer_report_expired(m, victims);
}

OMNICONN_API omc_result omc_xfer_map_begin(omc_xfer_map* m, const char* xfer, const char* req) {
    omc__xfer_entry *e, *victims = NULL;
    size_t xl, rl;
    omc_result r = OMC_OK;
    omc_time_ns now;
    if (!m || !omc__xfer_id_ok(xfer) || !omc__xfer_id_ok(req)) return OMC_ERR_INVALID_ARG;
    xl = strlen(xfer);
    rl = strlen(req);
    e = (omc__xfer_entry*)omc__malloc(&m->hooks, sizeof(omc__xfer_entry) + xl + rl + 2);
    if (!e) return OMC_ERR_NO_MEMORY;
    memset(e, 0, sizeof(*e));
    e->xfer = (char*)(e + 1);
    e->req = e->xfer + xl + 1;
    memcpy(e->xfer, xfer, xl + 1);
    memcpy(e->req, req, rl + 1);
    e->xlen = (uint32_t)xl;
    e->rlen = (uint32_t)rl;
    now = omc_now_ns();
    e->started = now;
    pthread_mutex_lock(&m->mu);
    if (now >= m->next_sweep) victims = omc__xfer_collect_expired(m, now);
    if (omc__smap_get(&m->by_xfer, xfer, e->xlen) || omc__smap_get(&m->by_req, req, e->rlen)) r = OMC_ERR_EXISTS;
    if (r == OMC_OK) r = omc__smap_put(&m->by_xfer, &m->hooks, xfer, e->xlen, e);
    if (r == OMC_OK) {
        r = omc__smap_put(&m->by_req, &m->hooks, req, e->rlen, e);
        if (r != OMC_OK) omc__smap_del(&m->by_xfer, &m->hooks, xfer, e->xlen);
    }
    pthread_mutex_unlock(&m->mu);
    omc__xfer_report_expired(m, victims);
    if (r != OMC_OK) {
        if (r == OMC_ERR_EXISTS)
            OMC__LOG(&m->hooks, OMC_LOG_WARN, OMC_LOGITEM_PIPELINE, "transfer %s / request %s: one of the two ids is already mapped", xfer, req);
        omc__free(&m->hooks, e);
    }
    return r;
}

/* Look up id in one of the maps and copy the other id out; remove: also forget the pair. */
OMC__PRIVATE omc_result omc__xfer_translate(omc_xfer_map* m, const char* id, int by_request, int remove, char* out, size_t out_size) {
    omc__xfer_entry* e;
    omc_result r = OMC_OK;
    if (out && out_size) out[0] = '\0';
    if (!m || !omc__xfer_id_ok(id) || (!out && out_size)) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&m->mu);
    e = (omc__xfer_entry*)omc__smap_get(by_request ? &m->by_req : &m->by_xfer, id, (uint32_t)strlen(id));
    if (!e) r = OMC_ERR_NOT_FOUND;
    else {
        const char* other = by_request ? e->xfer : e->req;
        uint32_t olen = by_request ? e->xlen : e->rlen;
        if (out_size < (size_t)olen + 1) r = OMC_ERR_TOO_LARGE;     /* the entry stays: call again */
        else {
            memcpy(out, other, (size_t)olen + 1);
            if (remove) omc__xfer_unlink(m, e);
            else e = NULL;
        }
        if (r != OMC_OK) e = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    if (e) omc__free(&m->hooks, e);
    if (r == OMC_ERR_NOT_FOUND && remove)
        OMC__LOG(&m->hooks, OMC_LOG_INFO, OMC_LOGITEM_PIPELINE, "no transfer is mapped for %s %s (completed twice, aborted or expired?)",
                 by_request ? "request" : "transfer", id);
    return r;
}

OMNICONN_API omc_result omc_xfer_map_request_id(omc_xfer_map* m, const char* xfer, char* out, size_t n) { return omc__xfer_translate(m, xfer, 0, 0, out, n); }
OMNICONN_API omc_result omc_xfer_map_transfer_id(omc_xfer_map* m, const char* req, char* out, size_t n) { return omc__xfer_translate(m, req, 1, 0, out, n); }
OMNICONN_API omc_result omc_xfer_map_complete(omc_xfer_map* m, const char* xfer, char* out, size_t n) { return omc__xfer_translate(m, xfer, 0, 1, out, n); }

OMNICONN_API omc_result omc_xfer_map_abort(omc_xfer_map* m, const char* req) {
    char scratch[OMC_XFER_MAX_ID];
    return omc__xfer_translate(m, req, 1, 1, scratch, sizeof(scratch));
}

OMNICONN_API uint64_t omc_xfer_map_count(omc_xfer_map* m) {
    uint64_t n;
    if (!m) return 0;
    pthread_mutex_lock(&m->mu);
    n = m->by_xfer.count;
    pthread_mutex_unlock(&m->mu);
    return n;
}

/* ============================================================================================== */
/* [SECTION] Implementation: stream control records                                              */
/* ============================================================================================== */

OMC__PRIVATE int omc__stream_record_ok(const omc_stream_record* rec) {
    uint32_t f = rec->flags;
    if (f & ~(OMC_STREAM_END | OMC_STREAM_ERROR | OMC_STREAM_DATA)) return 0;
    if (f & OMC_STREAM_ERROR) {                         /* an error is alone and carries no data */
        if (f != OMC_STREAM_ERROR || rec->data_size || rec->meta_len) return 0;
    } else {
        if (rec->text_len || rec->error) return 0;
        if (!(f & (OMC_STREAM_DATA | OMC_STREAM_END))) return 0;    /* a record says something */
        if (!(f & OMC_STREAM_DATA) && (rec->data_size || rec->meta_len)) return 0;
    }
    return rec->text_len <= OMC_STREAM_MAX_TEXT && rec->meta_len <= OMC_META_MAX_SIZE &&
           (!rec->meta_len || rec->meta) && (!rec->text_len || rec->text);
}

OMC__PRIVATE uint32_t omc__stream_crc(const uint8_t* rec, size_t size) {
    uint8_t h[OMC_STREAM_HEADER_SIZE];
    memcpy(h, rec, sizeof(h));
    memset(h + 32, 0, 4);
    return omc__crc32c(omc__crc32c(0, h, sizeof(h)), rec + OMC_STREAM_HEADER_SIZE, size - OMC_STREAM_HEADER_SIZE);
}

OMNICONN_API size_t omc_stream_record_size(const omc_stream_record* rec) {
    return rec ? OMC_STREAM_HEADER_SIZE + (size_t)rec->meta_len + rec->text_len : 0;
}

OMNICONN_API omc_result omc_stream_record_encode(const omc_stream_record* rec, void* out, size_t out_size, size_t* out_len) {
    uint8_t* o = (uint8_t*)out;
    size_t size;
    if (out_len) *out_len = 0;
    if (!rec || !out || !omc__stream_record_ok(rec)) return OMC_ERR_INVALID_ARG;
    size = omc_stream_record_size(rec);
    if (out_size < size) return OMC_ERR_TOO_LARGE;
    memset(o, 0, OMC_STREAM_HEADER_SIZE);
    omc__put_u32(o, OMC_STREAM_MAGIC);
    o[4] = OMC_STREAM_VERSION;
    o[5] = (uint8_t)rec->flags;
    omc__put_u16(o + 6, (uint16_t)rec->text_len);
    omc__put_u64(o + 8, rec->index);
    omc__put_u64(o + 16, rec->data_size);
    omc__put_u32(o + 24, (uint32_t)rec->error);
    omc__put_u32(o + 28, rec->meta_len);
    if (rec->meta_len) memcpy(o + OMC_STREAM_HEADER_SIZE, rec->meta, rec->meta_len);
    if (rec->text_len) memcpy(o + OMC_STREAM_HEADER_SIZE + rec->meta_len, rec->text, rec->text_len);
    omc__put_u32(o + 32, omc__stream_crc(o, size));
    if (out_len) *out_len = size;
    return OMC_OK;
}

OMNICONN_API omc_result omc_stream_record_decode(const void* data, size_t size, omc_stream_record* out) {
    const uint8_t* d = (const uint8_t*)data;
    omc_stream_record rec;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!data) return OMC_ERR_INVALID_ARG;
    if (size < OMC_STREAM_HEADER_SIZE || omc__get_u32(d) != OMC_STREAM_MAGIC) return OMC_ERR_MALFORMED;
    if (d[4] != OMC_STREAM_VERSION) return OMC_ERR_VERSION;
    memset(&rec, 0, sizeof(rec));
    rec.flags = d[5];
    rec.text_len = omc__get_u16(d + 6);
    rec.index = omc__get_u64(d + 8);
    rec.data_size = omc__get_u64(d + 16);
    rec.error = (int32_t)omc__get_u32(d + 24);
    rec.meta_len = omc__get_u32(d + 28);
    if (omc__get_u32(d + 36) != 0 || rec.meta_len > OMC_META_MAX_SIZE || rec.text_len > OMC_STREAM_MAX_TEXT ||
        (size_t)OMC_STREAM_HEADER_SIZE + rec.meta_len + rec.text_len != size)
        return OMC_ERR_MALFORMED;
    rec.meta = rec.meta_len ? d + OMC_STREAM_HEADER_SIZE : NULL;
    rec.text = rec.text_len ? (const char*)d + OMC_STREAM_HEADER_SIZE + rec.meta_len : NULL;
    if (!omc__stream_record_ok(&rec)) return OMC_ERR_MALFORMED;
    if (omc__stream_crc(d, size) != omc__get_u32(d + 32)) return OMC_ERR_CHECKSUM;
    *out = rec;
    return OMC_OK;
}

/* One put staged like a batch item: a copy-path payload waits for pool space until deadline. */
OMC__PRIVATE omc_result omc__stream_put(omc_conn* c, const char* from, const char* to, const char* key, const omc_payload* p,
                                        omc_time_ns deadline, omc_meta* meta) {
    omc_batch_item it;
    omc_result r;
    memset(&it, 0, sizeof(it));
    it.key = key;
    it.payload = *p;
    r = omc_conn_put_batch(c, from, to, &it, 1, deadline);
    if (meta) *meta = it.meta;
    else omc_meta_free(&it.meta);
    return r;
}

/* ============================================================================================== */
/* [SECTION] Implementation: streams                                                             */
/* ============================================================================================== */
/*
    A stream is nothing but puts and gets on one edge: chunk i under "K#<T>#<i>", its control
    record under "K#<T>#c<i>" (T the stream's random token, which only writer and reader know:
    nobody else can name the keys). The reader asks for the control record of the next index by key (a
    metadata-less get waits for it to appear), then for the chunk with the metadata the record
    carries. Order of arrival therefore never matters, and every wait the writer does (pool space
    for the next chunk) happens after everything it staged has been announced: the reader can
    always consume, and so free, what the writer waits for.
*/

#define OMC__STREAM_SUFFIX_MAX (1 + 32 + 22)     /* "#" + token + "#c" + 20 digits */

enum { OMC__STREAM_OPEN = 0, OMC__STREAM_ENDED, OMC__STREAM_BROKEN };
enum { OMC__STREAM_MODE_NONE = 0, OMC__STREAM_MODE_SEQUENTIAL, OMC__STREAM_MODE_INDEXED };

typedef struct omc__stream_names {
    omc_conn* conn;
    omc_hooks hooks;
    char from[OMC_KEY_MAX], to[OMC_KEY_MAX], key[OMC_KEY_MAX];
    char token[OMC_STREAM_TOKEN_SIZE];
} omc__stream_names;

OMNICONN_API omc_result omc_stream_token_generate(char out[OMC_STREAM_TOKEN_SIZE]) {
    static const char hex[] = "0123456789abcdef";
    uint8_t b[16];
    int i;
    if (!out) return OMC_ERR_INVALID_ARG;
    omc__random_bytes(b, sizeof(b));
    for (i = 0; i < 16; i++) { out[2 * i] = hex[b[i] >> 4]; out[2 * i + 1] = hex[b[i] & 15]; }
    out[32] = '\0';
    return OMC_OK;
}

OMC__PRIVATE int omc__stream_token_ok(const char* t) {
    int i;
    for (i = 0; i < 32; i++) if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f'))) return 0;
    return t[32] == '\0';
}

struct omc_stream_writer {
    omc__stream_names n;
    int64_t ttl_ms;
    uint64_t next;                  /* atomic: send()'s next index */
    uint64_t high;                  /* atomic: highest index sent + 1 */
    int mode;                       /* atomic: sequential or indexed, fixed by the first send */
    int ended;                      /* atomic: an END or ERROR record went out */
    pthread_mutex_t send_mu;        /* one omc_stream_send at a time: they share `next` */
    pthread_mutex_t mu;             /* guards sent[] */
    uint64_t* sent;                 /* indices put (for abort), the terminal record's too */
    uint32_t nsent, capsent;
};

struct omc_stream_reader {
    omc__stream_names n;
    uint64_t next;                  /* the index expected */
    int state;
    omc_result broken;              /* what next() keeps returning once BROKEN */
    uint8_t* pending;               /* a control record taken whose chunk is not fetched yet */
    size_t pending_len;
};

/* Check and copy the names; key must leave room for the longest suffix. */
OMC__PRIVATE omc_result omc__stream_names_init(omc__stream_names* n, omc_conn* c, const char* from, const char* to, const char* key,
                                               const omc_stream_desc* desc, int writer) {
    char probe[OMC_KEY_MAX], q[OMC_KEY_MAX];
    const char* token = desc ? desc->token : NULL;
    size_t kl;
    if (!c || !key || !key[0]) return OMC_ERR_INVALID_ARG;
    if (token && !omc__stream_token_ok(token)) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "stream %s: desc.token must be 32 lowercase hex digits "
                 "(omc_stream_writer_token, omc_stream_token_generate)", key);
        return OMC_ERR_INVALID_ARG;
    }
    if (!token && !writer) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "stream %s: a reader needs the writer's token in desc.token "
                 "(omc_stream_writer_token on the producing stage; the keys carry it, so nobody without it can name them)", key);
        return OMC_ERR_INVALID_ARG;
    }
    kl = strlen(key);
    if (kl + OMC__STREAM_SUFFIX_MAX >= OMC_KEY_MAX) return OMC_ERR_INVALID_ARG;
    memcpy(probe, key, kl);
    memcpy(probe + kl, "#0123456789abcdef0123456789abcdef#c18446744073709551615", OMC__STREAM_SUFFIX_MAX + 1);
    if (omc_qualify_key(from, to, probe, q, NULL) != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_CONN_KEY, "stream key '%s' leaves no room for the %d-byte chunk suffix", key, OMC__STREAM_SUFFIX_MAX);
        return OMC_ERR_INVALID_ARG;
    }
    memset(n, 0, sizeof(*n));
    n->conn = c;
    n->hooks = omc__hooks_resolve(desc ? &desc->hooks : NULL);
    snprintf(n->from, sizeof(n->from), "%s", from ? from : "");
    snprintf(n->to, sizeof(n->to), "%s", to ? to : "");
    memcpy(n->key, key, kl + 1);
    if (token) memcpy(n->token, token, OMC_STREAM_TOKEN_SIZE);
    else omc_stream_token_generate(n->token);
    return OMC_OK;
}

/* "K#<token>#<index>" or "K#<token>#c<index>"; the key's length was checked at create. */
OMC__PRIVATE void omc__stream_chunk_key(const omc__stream_names* n, uint64_t index, int control, char out[OMC_KEY_MAX]) {
    char digits[24];
    size_t kl = strlen(n->key), d = 0, o;
    do { digits[d++] = (char)('0' + index % 10); index /= 10; } while (index);
    memcpy(out, n->key, kl);
    o = kl;
    out[o++] = '#';
    memcpy(out + o, n->token, 32);
    o += 32;
    out[o++] = '#';
    if (control) out[o++] = 'c';
    while (d) out[o++] = digits[--d];
    out[o] = '\0';
}

OMNICONN_API omc_result omc_stream_writer_create(omc_conn* c, const char* from, const char* to, const char* key,
                                                 const omc_stream_desc* desc, omc_stream_writer** out) {
    omc_stream_writer* w;
    omc__stream_names n;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    r = omc__stream_names_init(&n, c, from, to, key, desc, 1);
    if (r != OMC_OK) return r;
    if (c->role == OMC_ROLE_RECEIVER) return OMC_ERR_WRONG_ROLE;
    w = (omc_stream_writer*)omc__calloc(&n.hooks, sizeof(omc_stream_writer));
    if (!w) return OMC_ERR_NO_MEMORY;
    if (pthread_mutex_init(&w->mu, NULL) != 0) { omc__free(&n.hooks, w); return OMC_ERR_SYSTEM; }
    if (pthread_mutex_init(&w->send_mu, NULL) != 0) { pthread_mutex_destroy(&w->mu); omc__free(&n.hooks, w); return OMC_ERR_SYSTEM; }
    w->n = n;
    w->ttl_ms = desc ? desc->ttl_ms : 0;
    *out = w;
    return OMC_OK;
}

/* Remember an index for abort. */
OMC__PRIVATE omc_result omc__stream_note(omc_stream_writer* w, uint64_t index) {
    omc_result r = OMC_OK;
    pthread_mutex_lock(&w->mu);
    if (omc__vec_room(&w->n.hooks, &w->sent, w->nsent, &w->capsent, sizeof(uint64_t))) w->sent[w->nsent++] = index;
    else r = OMC_ERR_NO_MEMORY;
    pthread_mutex_unlock(&w->mu);
    return r;
}

/* Encode and put the control record for index. */
OMC__PRIVATE omc_result omc__stream_publish(omc_stream_writer* w, const omc_stream_record* rec, omc_time_ns deadline) {
    char ckey[OMC_KEY_MAX];
    size_t size = omc_stream_record_size(rec), len = 0;
    uint8_t* bytes;
    omc_payload p;
    omc_result r;
    bytes = (uint8_t*)omc__malloc(&w->n.hooks, size);
    if (!bytes) return OMC_ERR_NO_MEMORY;
    r = omc_stream_record_encode(rec, bytes, size, &len);
    if (r == OMC_OK) {
        memset(&p, 0, sizeof(p));
        p.data = bytes;
        p.size = len;
        p.ttl_ms = w->ttl_ms;
        omc__stream_chunk_key(&w->n, rec->index, 1, ckey);
        r = omc__stream_put(w->n.conn, w->n.from, w->n.to, ckey, &p, deadline, NULL);
    }
    omc__free(&w->n.hooks, bytes);
    return r;
}

/* high = max(high, index + 1) */
OMC__PRIVATE void omc__stream_raise(omc_stream_writer* w, uint64_t index) {
    uint64_t cur = omc__load(&w->high);
    while (cur < index + 1 && !__atomic_compare_exchange_n(&w->high, &cur, index + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
}

OMC__PRIVATE omc_result omc__stream_send(omc_stream_writer* w, uint64_t index, const omc_payload* p, uint32_t flags, omc_time_ns deadline) {
    char dkey[OMC_KEY_MAX];
    omc_meta meta = { NULL, 0 };
    omc_stream_record rec;
    omc_payload data;
    omc_result r;
    if (omc__load(&w->ended)) return OMC_ERR_CLOSED;
    /* 1. stage the chunk (the only wait that may happen: for pool space; everything sent
          before is announced already, so the reader can free it) */
    data = *p;
    if (!data.ttl_ms) data.ttl_ms = w->ttl_ms;
    omc__stream_chunk_key(&w->n, index, 0, dkey);
    r = omc__stream_put(w->n.conn, w->n.from, w->n.to, dkey, &data, deadline, &meta);
    if (r != OMC_OK) return r;
    /* 2. announce it at once - before waiting for anything else */
    memset(&rec, 0, sizeof(rec));
    rec.index = index;
    rec.flags = OMC_STREAM_DATA | (flags & OMC_STREAM_END);
    rec.data_size = p->buffer ? (p->size ? p->size : 0) : p->size;
    rec.meta = meta.data;
    rec.meta_len = meta.size;
    {
        omc_meta_info info;
        if (omc_meta_parse(meta.data, meta.size, &info) == OMC_OK) rec.data_size = info.data_size;
    }
    r = omc__stream_publish(w, &rec, deadline);
    omc_meta_free(&meta);
    if (r != OMC_OK) {      /* an unannounced chunk would only wait for its TTL: take it back */
        omc_conn_cleanup(w->n.conn, w->n.from, w->n.to, dkey);
        return r;
    }
    omc__stream_raise(w, index);
    if (flags & OMC_STREAM_END) omc__store(&w->ended, 1);
    return omc__stream_note(w, index);
}

OMC__PRIVATE omc_result omc__stream_check_send(omc_stream_writer* w, const omc_payload* p, uint32_t flags, int mode) {
    int expected = OMC__STREAM_MODE_NONE;
    if (!w || !p || (flags & ~OMC_STREAM_END)) return OMC_ERR_INVALID_ARG;
    if (!__atomic_compare_exchange_n(&w->mode, &expected, mode, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) && expected != mode) {
        OMC__LOG(&w->n.hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "stream %s: omc_stream_send and omc_stream_send_at cannot be mixed", w->n.key);
        return OMC_ERR_INVALID_ARG;
    }
    return OMC_OK;
}

OMNICONN_API omc_result omc_stream_send(omc_stream_writer* w, const omc_payload* p, uint32_t flags, omc_time_ns deadline) {
    omc_result r = omc__stream_check_send(w, p, flags, OMC__STREAM_MODE_SEQUENTIAL);
    uint64_t index;
    if (r != OMC_OK) return r;
    pthread_mutex_lock(&w->send_mu);       /* concurrent callers would take the same index */
    index = omc__load(&w->next);
    r = omc__stream_send(w, index, p, flags, deadline);
    if (r == OMC_OK) omc__store(&w->next, index + 1);   /* a failed send can be retried under the same index */
    pthread_mutex_unlock(&w->send_mu);
    return r;
}

OMNICONN_API omc_result omc_stream_send_at(omc_stream_writer* w, uint64_t index, const omc_payload* p, uint32_t flags, omc_time_ns deadline) {
    omc_result r = omc__stream_check_send(w, p, flags, OMC__STREAM_MODE_INDEXED);
    if (r != OMC_OK) return r;
    if (index == UINT64_MAX) return OMC_ERR_INVALID_ARG;
    return omc__stream_send(w, index, p, flags, deadline);
}

/* The control-only END or ERROR record after the highest chunk sent. */
OMC__PRIVATE omc_result omc__stream_terminate(omc_stream_writer* w, uint32_t flags, int32_t code, const char* text, omc_time_ns deadline) {
    omc_stream_record rec;
    omc_result r;
    int expected = 0;
    if (!w) return OMC_ERR_INVALID_ARG;
    if (!__atomic_compare_exchange_n(&w->ended, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return OMC_ERR_CLOSED;
    memset(&rec, 0, sizeof(rec));
    rec.index = omc__load(&w->high);
    rec.flags = flags;
    if (flags & OMC_STREAM_ERROR) {
        rec.error = code;
        rec.text = text ? text : "";
        rec.text_len = (uint32_t)omc__min(strlen(rec.text), (size_t)OMC_STREAM_MAX_TEXT);
    }
    r = omc__stream_publish(w, &rec, deadline);
    if (r != OMC_OK) { omc__store(&w->ended, 0); return r; }      /* nothing went out: it may be tried again */
    return omc__stream_note(w, rec.index);
}

OMNICONN_API omc_result omc_stream_finish(omc_stream_writer* w, omc_time_ns deadline) {
    return omc__stream_terminate(w, OMC_STREAM_END, 0, NULL, deadline);
}

OMNICONN_API omc_result omc_stream_fail(omc_stream_writer* w, int32_t code, const char* text, omc_time_ns deadline) {
    return omc__stream_terminate(w, OMC_STREAM_ERROR, code, text, deadline);
}

OMNICONN_API omc_result omc_stream_writer_token(const omc_stream_writer* w, char out[OMC_STREAM_TOKEN_SIZE]) {
    if (!w || !out) return OMC_ERR_INVALID_ARG;
    memcpy(out, w->n.token, OMC_STREAM_TOKEN_SIZE);
    return OMC_OK;
}

OMNICONN_API void omc_stream_writer_abort(omc_stream_writer* w) {
    uint32_t i;
    if (!w) return;
    omc__store(&w->ended, 1);
    pthread_mutex_lock(&w->mu);
    for (i = 0; i < w->nsent; i++) {      /* NOT_FOUND is fine: the reader took it already */
        char k[OMC_KEY_MAX];
        omc__stream_chunk_key(&w->n, w->sent[i], 0, k);
        omc_conn_cleanup(w->n.conn, w->n.from, w->n.to, k);
        omc__stream_chunk_key(&w->n, w->sent[i], 1, k);
        omc_conn_cleanup(w->n.conn, w->n.from, w->n.to, k);
    }
    w->nsent = 0;
    pthread_mutex_unlock(&w->mu);
}

OMNICONN_API void omc_stream_writer_destroy(omc_stream_writer* w) {
    omc_hooks hooks;
    if (!w) return;
    hooks = w->n.hooks;
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->send_mu);
    omc__free(&hooks, w->sent);
    omc__free(&hooks, w);
}

OMNICONN_API omc_result omc_stream_reader_create(omc_conn* c, const char* from, const char* to, const char* key,
                                                 const omc_stream_desc* desc, omc_stream_reader** out) {
    omc_stream_reader* rd;
    omc__stream_names n;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    r = omc__stream_names_init(&n, c, from, to, key, desc, 0);
    if (r != OMC_OK) return r;
    if (c->role == OMC_ROLE_SENDER) return OMC_ERR_WRONG_ROLE;
    rd = (omc_stream_reader*)omc__calloc(&n.hooks, sizeof(omc_stream_reader));
    if (!rd) return OMC_ERR_NO_MEMORY;
    rd->n = n;
    *out = rd;
    return OMC_OK;
}

OMNICONN_API void omc_stream_reader_destroy(omc_stream_reader* rd) {
    omc_hooks hooks;
    if (!rd) return;
    hooks = rd->n.hooks;
    omc__free(&hooks, rd->pending);
    omc__free(&hooks, rd);
}

/* The stream cannot go on (a record or chunk is lost or forged): remember why. */
OMC__PRIVATE omc_result omc__stream_break(omc_stream_reader* rd, omc_result r, const char* why) {
    rd->state = OMC__STREAM_BROKEN;
    rd->broken = r;
    omc__free(&rd->n.hooks, rd->pending);
    rd->pending = NULL;
    OMC__LOG(&rd->n.hooks, OMC_LOG_WARN, OMC_LOGITEM_PIPELINE, "stream %s, chunk %llu: %s (%s)", rd->n.key, (unsigned long long)rd->next,
             why, omc_result_str(r));
    return r;
}

/* Take the control record of the next index (waits until deadline for it to appear). */
OMC__PRIVATE omc_result omc__stream_take_record(omc_stream_reader* rd, omc_time_ns deadline) {
    char ckey[OMC_KEY_MAX];
    omc_buffer b;
    omc_result r;
    omc__stream_chunk_key(&rd->n, rd->next, 1, ckey);
    r = omc_conn_get(rd->n.conn, rd->n.from, rd->n.to, ckey, NULL, 0, deadline, &b);
    if (r != OMC_OK) return r;      /* a timeout consumed nothing */
    rd->pending = (uint8_t*)omc__malloc(&rd->n.hooks, b.size ? (size_t)b.size : 1);
    if (!rd->pending) { omc_buffer_release(&b); return omc__stream_break(rd, OMC_ERR_NO_MEMORY, "no memory for the control record"); }
    r = omc_buffer_copy_out(&b, 0, rd->pending, b.size);
    rd->pending_len = (size_t)b.size;
    omc_buffer_release(&b);
    return r == OMC_OK ? OMC_OK : omc__stream_break(rd, r, "cannot read the control record");
}

OMNICONN_API omc_result omc_stream_next(omc_stream_reader* rd, omc_time_ns deadline, omc_stream_chunk* out) {
    omc_stream_record rec;
    omc_result r;
    if (out) memset(out, 0, sizeof(*out));
    if (!rd || !out) return OMC_ERR_INVALID_ARG;
    if (rd->state == OMC__STREAM_ENDED) return OMC_ERR_CLOSED;
    if (rd->state == OMC__STREAM_BROKEN) return rd->broken;
    if (!rd->pending) {
        r = omc__stream_take_record(rd, deadline);
        if (r != OMC_OK) return r;
    }
    r = omc_stream_record_decode(rd->pending, rd->pending_len, &rec);
    if (r != OMC_OK) return omc__stream_break(rd, OMC_ERR_MALFORMED, "the control record failed validation");
    if (rec.index != rd->next) return omc__stream_break(rd, OMC_ERR_MALFORMED, "the control record names another chunk index");
    out->index = rec.index;
    out->flags = rec.flags;
    if (rec.flags & OMC_STREAM_ERROR) {
        out->error = rec.error;
        memcpy(out->text, rec.text ? rec.text : "", rec.text_len);
        out->text[rec.text_len] = '\0';
        rd->state = OMC__STREAM_ENDED;
        omc__free(&rd->n.hooks, rd->pending);
        rd->pending = NULL;
        OMC__LOG(&rd->n.hooks, OMC_LOG_INFO, OMC_LOGITEM_PIPELINE, "stream %s failed at chunk %llu: error %d: %s", rd->n.key,
                 (unsigned long long)rec.index, (int)rec.error, out->text);
        return OMC_ERR_REMOTE;
    }
    if (rec.flags & OMC_STREAM_DATA) {
        char dkey[OMC_KEY_MAX];
        omc__stream_chunk_key(&rd->n, rec.index, 0, dkey);
        r = omc_conn_get(rd->n.conn, rd->n.from, rd->n.to, dkey, rec.meta_len ? rec.meta : NULL, rec.meta_len, deadline, &out->buffer);
        if (r == OMC_ERR_TIMEOUT) { out->flags = 0; return r; }     /* the record stays pending: call again */
        if (r != OMC_OK) { out->flags = 0; return omc__stream_break(rd, r, "the announced chunk cannot be fetched"); }
    }
    if (rec.flags & OMC_STREAM_END) rd->state = OMC__STREAM_ENDED;
    omc__free(&rd->n.hooks, rd->pending);
    rd->pending = NULL;
    rd->next++;
    return OMC_OK;
}

#if !defined(OMNICONN_PIPELINE_NO_CONFIG)

/* ============================================================================================== */
/* [SECTION] Implementation: connecting a stage                                                  */
/* ============================================================================================== */
/*
    omc_pipeline_connect is a mapping, nothing more: a resolved spec plus the process's own facts
    (stage, replica, rank, channel) become the create desc of the connector the spec names. The
    shared-memory connector lives in omniconn_shm.h, which is included here so that a pipeline
    program needs no other include (its implementation is emitted in this file like any
    companion's; including it again later is harmless). The remote connector is omniconn.h's.
*/
#if defined(__has_include)
    #if !__has_include("omniconn_shm.h")
        #error "omniconn_pipeline.h needs omniconn_shm.h next to it (omc_pipeline_connect creates shared-memory connectors): copy omniconn_shm.h from the same release, or define OMNICONN_PIPELINE_NO_CONFIG for transfer ids and streams without the configuration reader."
    #endif
#endif
#include "omniconn_shm.h"

/* RDMA edges use the constructor the desc names, or the one omniconn_rdma.h's implementation
   offered at start-up (omc__offered): never a guess from the include order, and a pipeline
   without RDMA does not need the verbs headers. */

/* "edge 0->1 of stage 1 over 'tcp_connector' (line 7:5)": the head of every log line below. */
OMC__PRIVATE const char* omc__pc_where(const omc_pipeline_edge* e, const omc_connector_spec* s, int stage, char* buf, size_t n) {
    if (s->line) snprintf(buf, n, "edge %d->%d of stage %d over '%s' (line %u:%u)", e->from_stage, e->to_stage, stage, s->name, s->line, s->column);
    else snprintf(buf, n, "edge %d->%d of stage %d over '%s'", e->from_stage, e->to_stage, stage, s->name);
    return buf;
}

/* The stage's role over every edge of one spec: one connector serves them all, so it must be
   able to do whatever any of them needs. */
OMC__PRIVATE omc_role omc__pc_role(const omc_pipeline_config* cfg, uint32_t spec, int stage) {
    uint32_t i, n = omc_pipeline_config_edge_count(cfg);
    int sends = 0, receives = 0;
    for (i = 0; i < n; i++) {
        omc_pipeline_edge e;
        if (omc_pipeline_config_edge(cfg, i, &e) != OMC_OK || e.connector != spec) continue;
        if (e.from_stage == stage) sends = 1;
        if (e.to_stage == stage) receives = 1;
    }
    return sends && receives ? OMC_ROLE_DUAL : sends ? OMC_ROLE_SENDER : OMC_ROLE_RECEIVER;
}

/* desc.pool_size, else memory_pool_size when the FILE sets it, else 0 (the connector's default):
   the loader's own default (4 GiB) is vLLM-Omni's figure for pinned RDMA pools, far too much to
   reserve in /dev/shm for every sending stage. */
OMC__PRIVATE uint64_t omc__pc_pool(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const omc_connector_spec* s,
                                   const omc_pipeline_connect_desc* d) {
    omc_config_value v;
    if (d->pool_size) return d->pool_size;
    if (s->transport == OMC_TRANSPORT_RDMA) return s->memory_pool_size;    /* vLLM-Omni's pinned pool */
    if (omc_pipeline_connector_option(cfg, e->connector, "memory_pool_size", &v) == OMC_OK && v.kind == OMC_CONFIG_INT)
        return s->memory_pool_size;
    return 0;
}

OMC__PRIVATE omc_result omc__pc_shm(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const omc_connector_spec* s,
                                    omc_role role, const omc_pipeline_connect_desc* d, const omc_hooks* h, const char* where,
                                    omc_conn** out) {
    omc_shm_desc sd;
    memset(&sd, 0, sizeof(sd));
    sd.role = role;
    sd.channel = d->channel;
    sd.shm_dir = d->shm_dir;
    sd.pool_size = omc__pc_pool(cfg, e, s, d);
    sd.default_ttl_ms = d->default_ttl_ms;
    sd.hooks = d->hooks;
    /* shm_threshold_bytes is vLLM-Omni's inline-vs-segment split: below it, bytes ride in the metadata */
    if (s->shm_threshold_bytes == 0) sd.disable_inline = 1;
    else if (s->shm_threshold_bytes > OMC_SHM_MAX_INLINE) {
        OMC__LOG(h, OMC_LOG_WARN, OMC_LOGITEM_PIPELINE, "%s: shm_threshold_bytes %llu is above the shared-memory connector's "
                 "inline limit; using %llu (larger payloads go through the segment anyway)", where,
                 (unsigned long long)s->shm_threshold_bytes, (unsigned long long)OMC_SHM_MAX_INLINE);
        sd.inline_threshold = OMC_SHM_MAX_INLINE;
    } else sd.inline_threshold = s->shm_threshold_bytes;
    return omc_shm_create(&sd, out);
}

#if OMC__PIPELINE_PORTS
/* The listener of stage `from` on spec `spec` for (purpose, replica, rank), from the config's
   port table: the numbers the loader checked for collisions are the numbers used. */
OMC__PRIVATE omc_result omc__pc_port(const omc_pipeline_config* cfg, uint32_t spec, int from, uint32_t purpose, uint32_t dp,
                                     uint32_t rank, uint16_t* out) {
    uint32_t i, n = omc_pipeline_config_port_count(cfg);
    for (i = 0; i < n; i++) {
        omc_port_use u;
        omc_pipeline_edge e;
        if (omc_pipeline_config_port(cfg, i, &u) != OMC_OK || u.orchestrator || u.from_stage != from) continue;
        if (u.purpose != purpose || u.dp_index != dp || u.tp_rank != rank) continue;
        if (omc_pipeline_config_edge(cfg, u.edge, &e) != OMC_OK || e.connector != spec) continue;
        *out = u.port;
        return OMC_OK;
    }
    return OMC_ERR_NOT_FOUND;
}

/* Receiving side: register every upstream stage that sends to `stage` over this spec, so that a
   metadata-less get (and a stream reader, which starts with one) knows whom to ask. Replica and
   rank follow vLLM-Omni ("receiver_connect = remote_side_channel_port + tp_rank"), taken modulo
   the sender's own sizes when the two stages are sharded differently. */
OMC__PRIVATE omc_result omc__pc_add_senders(const omc_pipeline_config* cfg, uint32_t spec, int stage, const char* host,
                                            const omc_pipeline_connect_desc* d, const omc_hooks* h, const char* where,
                                            omc_conn* conn) {
    uint32_t i, n = omc_pipeline_config_edge_count(cfg);
    for (i = 0; i < n; i++) {
        omc_pipeline_edge e;
        omc_pipeline_stage up;
        uint16_t port = 0;
        char name[OMC_TCP_NAME_MAX];
        omc_result r;
        if (omc_pipeline_config_edge(cfg, i, &e) != OMC_OK || e.connector != spec || e.to_stage != stage) continue;
        if (omc_pipeline_config_find_stage(cfg, e.from_stage, &up) != OMC_OK) return OMC_ERR_INTERNAL;
        r = omc__pc_port(cfg, spec, e.from_stage, d->purpose, d->dp_index % up.dp_size, d->tp_rank % up.tp_size, &port);
        if (r != OMC_OK) {
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: the configuration lists no port for stage %d's sender "
                     "(purpose %u, dp %u, tp rank %u)", where, e.from_stage, d->purpose, d->dp_index % up.dp_size, d->tp_rank % up.tp_size);
            return OMC_ERR_INTERNAL;
        }
        snprintf(name, sizeof(name), "stage%d", e.from_stage);
        r = omc_tcp_add_sender(conn, name, host, port);
        if (r != OMC_OK) {
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: cannot register stage %d's sender at %s:%u: %s", where,
                     e.from_stage, host, port, omc_result_str(r));
            return r;
        }
    }
    return OMC_OK;
}

/* The RDMA connector: the TCP desc plus the engine. Its GID is chosen for the address the side
   channel advertises, so an "auto" host is resolved here rather than left to the connector. */
#if OMC__PIPELINE_PORTS
OMC__PRIVATE omc_result omc__pc_rdma_create(const omc_tcp_desc* td, const omc_connector_spec* s, const omc_pipeline_connect_desc* d,
                                            const char* where, omc_conn** out) {
    omc_pipeline_rdma_fn make = d->rdma_connector ? d->rdma_connector : (omc_pipeline_rdma_fn)omc__offered(OMC__OFFER_RDMA_CONNECTOR);
    char local[OMC_TCP_HOST_MAX];
    const char* local_addr = NULL;
    if (!make) {
        OMC__LOG(&td->hooks, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: protocol rdma needs omniconn_rdma.h: include it in the "
                 "implementation file (any order; it needs libibverbs-dev to build), or set desc.rdma_connector, or set protocol: tcp", where);
        return OMC_ERR_UNAVAILABLE;
    }
    if (strcmp(s->host, "auto") == 0 && omc_detect_host(0, local, sizeof(local), NULL) == OMC_OK) local_addr = local;
    return make(td, s->device_name, local_addr, !d->rdma_fallback_tcp, out);
}
#endif

/* ---- CURVE from key files ---------------------------------------------------------------------- */

#define OMC__PC_MAX_ALLOWED 4096        /* keys in one allow-list file */

typedef struct omc__pc_curve {
    char server_public[OMC_CURVE_KEY_LEN + 1], server_secret[OMC_CURVE_KEY_LEN + 1], client_secret[OMC_CURVE_KEY_LEN + 1];
    char (*allowed)[OMC_CURVE_KEY_LEN + 1];
    const char** allowed_ptr;
    uint32_t nallowed;
} omc__pc_curve;

/* Where a key-file option comes from, for messages: "pipeline.yaml:9:39: curve_..._file" or
   "desc.curve_..._file". */
OMC__PRIVATE void omc__pc_origin(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const char* key, int from_desc,
                                 char* buf, size_t n) {
    omc_config_value v;
    if (!from_desc && omc_pipeline_connector_option(cfg, e->connector, key, &v) == OMC_OK)
        snprintf(buf, n, "%s:%u:%u: %s", cfg->name, v.line, v.column, key);
    else snprintf(buf, n, "%s%s", from_desc ? "desc." : "", key);
}

/* The path of one key-file option (the desc's, else the spec's), or NULL. */
OMC__PRIVATE const char* omc__pc_keypath(const char* from_desc, const char* from_spec, int* desc_wins) {
    *desc_wins = from_desc != NULL;
    return from_desc ? from_desc : from_spec;
}

/* Read one key file named by option `key`; 0 = not configured, 1 = read, -1 = failed (logged). */
OMC__PRIVATE int omc__pc_read_key(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const char* key, const char* dpath,
                                  const char* spath, const omc_hooks* h, const char* where, char out[OMC_CURVE_KEY_LEN + 1],
                                  omc_result* res) {
    char origin[512];
    int from_desc;
    const char* path = omc__pc_keypath(dpath, spath, &from_desc);
    omc_result r;
    if (!path) return 0;
    r = omc_tcp_read_key(path, out);
    if (r == OMC_OK) return 1;
    omc__pc_origin(cfg, e, key, from_desc, origin, sizeof(origin));
    OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: '%s': %s (%s)", origin, path,
             r == OMC_ERR_NOT_FOUND ? "cannot open the key file" : "the file does not hold one 40-character Z85 CURVE key "
             "(make a pair with: omniconn keygen NAME, or omc_tcp_curve_keypair)", where);
    *res = r == OMC_ERR_NOT_FOUND ? OMC_ERR_NOT_FOUND : OMC_ERR_INVALID_ARG;
    return -1;
}

OMC__PRIVATE int omc__pc_z85(const char* k) {
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    size_t i;
    if (strlen(k) != OMC_CURVE_KEY_LEN) return 0;
    for (i = 0; i < OMC_CURVE_KEY_LEN; i++) if (!strchr(alphabet, k[i])) return 0;
    return 1;
}

/* The allow-list: one Z85 public key a line; blank lines and lines starting with '#' are skipped.
   Returns OMC_OK, or an error (logged with the file and line). */
OMC__PRIVATE omc_result omc__pc_read_allowed(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const char* dpath,
                                             const char* spath, const omc_hooks* h, const char* where, omc__pc_curve* cv) {
    char origin[512], line[512];
    int from_desc;
    const char* path = omc__pc_keypath(dpath, spath, &from_desc);
    uint32_t lineno = 0, cap = 0;
    FILE* f;
    if (!path) return OMC_OK;
    omc__pc_origin(cfg, e, "curve_allowed_clients_file", from_desc, origin, sizeof(origin));
    f = fopen(path, "r");
    if (!f) {
        OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: '%s': cannot open the allow-list: %s (%s)", origin, path, strerror(errno), where);
        return OMC_ERR_NOT_FOUND;
    }
    while (fgets(line, sizeof(line), f)) {
        char* k = line;
        size_t n;
        lineno++;
        while (*k == ' ' || *k == '\t') k++;
        n = strlen(k);
        while (n && (k[n - 1] == '\n' || k[n - 1] == '\r' || k[n - 1] == ' ' || k[n - 1] == '\t')) k[--n] = '\0';
        if (!n || k[0] == '#') continue;
        if (!omc__pc_z85(k)) {
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s:%u: not a 40-character Z85 CURVE public key (allow-list of %s; %s)",
                     path, lineno, origin, where);
            fclose(f);
            return OMC_ERR_INVALID_ARG;
        }
        if (cv->nallowed >= OMC__PC_MAX_ALLOWED) {
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s:%u: more than %d keys in one allow-list (%s)", path, lineno,
                     OMC__PC_MAX_ALLOWED, where);
            fclose(f);
            return OMC_ERR_TOO_LARGE;
        }
        if (!omc__vec_room(h, &cv->allowed, cv->nallowed, &cap, sizeof(*cv->allowed))) { fclose(f); return OMC_ERR_NO_MEMORY; }
        memcpy(cv->allowed[cv->nallowed++], k, OMC_CURVE_KEY_LEN + 1);
    }
    fclose(f);
    if (!cv->nallowed) {
        OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: '%s' lists no key: no receiver could connect (%s)", origin, path, where);
        return OMC_ERR_INVALID_ARG;
    }
    return OMC_OK;
}

OMC__PRIVATE void omc__pc_curve_free(omc__pc_curve* cv, const omc_hooks* h) {
    omc__free(h, cv->allowed);
    omc__free(h, (void*)cv->allowed_ptr);
    memset(cv, 0, sizeof(*cv));
}

/* Is host (as the listener would bind it) a loopback address? "auto" asks omc_detect_host. */
OMC__PRIVATE int omc__pc_loopback(const char* host, char* resolved, size_t n) {
    const char* how = NULL;
    snprintf(resolved, n, "%s", host);
    if (strcmp(host, "auto") == 0) {
        if (omc_detect_host(0, resolved, n, &how) != OMC_OK) return 0;
        if (how && strcmp(how, "loopback") == 0) return 1;
        host = resolved;
    }
    return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 || strcmp(host, "[::1]") == 0;
}

/* Fill td->curve from the key files for this role, and refuse an open listener on a host
   address. A sender reads the server's secret key and the allow-list, a receiver the server's
   public key and its own secret key. A dual connector pulls with the server keypair (the
   connector has one identity), so a sender's allow-list always admits the server's public key
   when the spec names it. */
OMC__PRIVATE omc_result omc__pc_curve_setup(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const omc_connector_spec* s,
                                            omc_role role, const omc_pipeline_connect_desc* d, const omc_hooks* h, const char* where,
                                            omc_tcp_desc* td, omc__pc_curve* cv) {
    omc_result r = OMC_OK;
    int have_secret = 0, have_public, have_client = 0;
    uint32_t i;
    have_public = omc__pc_read_key(cfg, e, "curve_server_public_key_file", d->curve_server_public_key_file,
                                   s->curve_server_public_key_file, h, where, cv->server_public, &r);
    if (have_public < 0) return r;
    if (role != OMC_ROLE_RECEIVER) {
        char addr[OMC_TCP_HOST_MAX];
        have_secret = omc__pc_read_key(cfg, e, "curve_server_secret_key_file", d->curve_server_secret_key_file,
                                       s->curve_server_secret_key_file, h, where, cv->server_secret, &r);
        if (have_secret < 0) return r;
        if (!have_secret && (d->curve_allowed_clients_file || s->curve_allowed_clients_file)) {
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: curve_allowed_clients_file is set but curve_server_secret_key_file "
                     "is not: set both (the secret key turns CURVE on)", where);
            return OMC_ERR_INVALID_ARG;
        }
        if (have_secret) {
            r = omc__pc_read_allowed(cfg, e, d->curve_allowed_clients_file, s->curve_allowed_clients_file, h, where, cv);
            if (r != OMC_OK) return r;
            if (cv->nallowed && have_public) {     /* the spec's dual stages pull with the server keypair */
                char (*grown)[OMC_CURVE_KEY_LEN + 1] = cv->allowed;
                uint32_t cap = cv->nallowed;    /* vec_room grows from a full array */
                if (!omc__vec_room(h, &grown, cv->nallowed, &cap, sizeof(*grown))) return OMC_ERR_NO_MEMORY;
                cv->allowed = grown;
                memcpy(cv->allowed[cv->nallowed++], cv->server_public, OMC_CURVE_KEY_LEN + 1);
            }
            if (cv->nallowed) {
                cv->allowed_ptr = (const char**)omc__malloc(h, sizeof(const char*) * cv->nallowed);
                if (!cv->allowed_ptr) return OMC_ERR_NO_MEMORY;
                for (i = 0; i < cv->nallowed; i++) cv->allowed_ptr[i] = cv->allowed[i];
                td->curve.allowed_clients = cv->allowed_ptr;
                td->curve.allowed_count = cv->nallowed;
            } else {
                OMC__LOG(h, OMC_LOG_WARN, OMC_LOGITEM_PIPELINE, "%s: CURVE without an allow-list: any receiver that knows this "
                         "sender's public key gets in (the public key is no secret); set curve_allowed_clients_file", where);
            }
            td->curve.secret_key = cv->server_secret;
        } else if (!omc__pc_loopback(s->host, addr, sizeof(addr))) {
            if (!s->insecure && !d->insecure) {
                OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: refusing to listen on %s (host: %s) without CURVE: anyone who "
                         "can reach that address could read and take this stage's payloads. Set curve_server_secret_key_file and "
                         "curve_allowed_clients_file in the connector's extra (omniconn keygen NAME makes a pair), or host: 127.0.0.1 "
                         "for stages on one machine, or insecure: true on a network you trust", where, addr, s->host);
                return OMC_ERR_INVALID_ARG;
            }
            OMC__LOG(h, OMC_LOG_WARN, OMC_LOGITEM_PIPELINE, "%s: insecure: listening on %s (host: %s) without CURVE: anyone who can "
                     "reach that address can read and take this stage's payloads", where, addr, s->host);
        }
    }
    if (role != OMC_ROLE_SENDER && have_public) {
        td->curve.server_key = cv->server_public;
        if (role == OMC_ROLE_RECEIVER) {
            have_client = omc__pc_read_key(cfg, e, "curve_client_secret_key_file", d->curve_client_secret_key_file,
                                           s->curve_client_secret_key_file, h, where, cv->client_secret, &r);
            if (have_client < 0) return r;
            if (have_client) td->curve.secret_key = cv->client_secret;
        } else if (d->curve_client_secret_key_file || s->curve_client_secret_key_file) {
            OMC__LOG(h, OMC_LOG_DEBUG, OMC_LOGITEM_PIPELINE, "%s: a dual stage pulls with its server keypair (its public key is "
                     "admitted by its own allow-list); curve_client_secret_key_file is not used here", where);
        }
    }
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__pc_tcp_make(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const omc_connector_spec* s,
                                         int stage, omc_role role, const omc_pipeline_connect_desc* d, const omc_hooks* h,
                                         const char* where, omc__pc_curve* cv, omc_conn** out) {
    omc_tcp_desc td;
    omc_conn* conn = NULL;
    char detected[OMC_TCP_HOST_MAX];
    const char* sender_host = d->sender_host ? d->sender_host : s->host;
    omc_result r;
    if (d->purpose != OMC_PORT_REQUEST_FORWARDING && d->purpose != OMC_PORT_KV_TRANSFER) {
        OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "%s: purpose %u is neither 0 (request forwarding) nor 100 (KV transfer)",
                 where, d->purpose);
        return OMC_ERR_INVALID_ARG;
    }
    memset(&td, 0, sizeof(td));
    td.role = role;
    td.host = s->host;                      /* "auto" is resolved by the connector itself */
    td.pool_size = omc__pc_pool(cfg, e, s, d);
    td.default_ttl_ms = d->default_ttl_ms;
    td.hooks = d->hooks;
    r = omc__pc_curve_setup(cfg, e, s, role, d, h, where, &td, cv);
    if (r != OMC_OK) return r;
    if (role != OMC_ROLE_RECEIVER) {
        r = omc__pc_port(cfg, e->connector, stage, d->purpose, d->dp_index, d->tp_rank, &td.port);
        if (r != OMC_OK) {
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: the configuration lists no listener for this stage "
                     "(purpose %u, dp %u, tp rank %u)", where, d->purpose, d->dp_index, d->tp_rank);
            return OMC_ERR_INTERNAL;
        }
    }
    if (role != OMC_ROLE_SENDER && strcmp(sender_host, "auto") == 0) {
        /* the senders' "auto" is their own address; from here we can only know ours */
        r = omc_detect_host(0, detected, sizeof(detected), NULL);
        if (r != OMC_OK) {
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: host is \"auto\" and this host's address cannot be "
                     "detected: set host in the file, or desc.sender_host", where);
            return r;
        }
        sender_host = detected;
    }
    if (s->transport == OMC_TRANSPORT_RDMA) r = omc__pc_rdma_create(&td, s, d, where, &conn);
    else r = omc_tcp_create(&td, &conn);
    if (r != OMC_OK) {
        if (role != OMC_ROLE_RECEIVER && r == OMC_ERR_CONNECTION)
            OMC__LOG(h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: cannot listen on %s port %u (is another process on it? "
                     "omniconn doctor --config lists the ports)", where, s->host, td.port);
        return r;
    }
    if (role != OMC_ROLE_SENDER) {
        r = omc__pc_add_senders(cfg, e->connector, stage, sender_host, d, h, where, conn);
        if (r != OMC_OK) { omc_conn_destroy(conn); return r; }
    }
    *out = conn;
    return OMC_OK;
}

/* The connector copies the keys it is given: the file contents live only for the call. */
OMC__PRIVATE omc_result omc__pc_tcp(const omc_pipeline_config* cfg, const omc_pipeline_edge* e, const omc_connector_spec* s,
                                    int stage, omc_role role, const omc_pipeline_connect_desc* d, const omc_hooks* h,
                                    const char* where, omc_conn** out) {
    omc__pc_curve cv;
    omc_result r;
    memset(&cv, 0, sizeof(cv));
    r = omc__pc_tcp_make(cfg, e, s, stage, role, d, h, where, &cv, out);
    omc__pc_curve_free(&cv, h);
    return r;
}
#endif

OMNICONN_API omc_result omc_pipeline_connect(const omc_pipeline_config* cfg, uint32_t edge, int stage_id,
                                             const omc_pipeline_connect_desc* desc, omc_conn** out) {
    omc_pipeline_connect_desc d;
    omc_pipeline_edge e;
    omc_connector_spec s;
    omc_pipeline_stage st;
    omc_hooks h;
    omc_role role;
    char where[192];
    omc_result r;
    if (out) *out = NULL;
    memset(&d, 0, sizeof(d));
    if (desc) d = *desc;
    h = omc__hooks_resolve(&d.hooks);
    if (!cfg || !out) {
        OMC__LOG(&h, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_pipeline_connect: %s is NULL", !cfg ? "cfg" : "out");
        return OMC_ERR_INVALID_ARG;
    }
    r = omc_pipeline_config_edge(cfg, edge, &e);
    if (r != OMC_OK) {
        OMC__LOG(&h, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_pipeline_connect: no edge %u (the configuration has %u)", edge,
                 omc_pipeline_config_edge_count(cfg));
        return r;
    }
    if (omc_pipeline_config_connector(cfg, e.connector, &s) != OMC_OK || omc_pipeline_config_find_stage(cfg, stage_id, &st) != OMC_OK)
        return OMC_ERR_INTERNAL;            /* a loaded config has both: its edges join defined stages */
    omc__pc_where(&e, &s, stage_id, where, sizeof(where));
    if (e.from_stage != stage_id && e.to_stage != stage_id) {
        OMC__LOG(&h, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_pipeline_connect: stage %d is not an end of edge %d->%d", stage_id,
                 e.from_stage, e.to_stage);
        return OMC_ERR_INVALID_ARG;
    }
    if (d.dp_index >= st.dp_size || d.tp_rank >= st.tp_size) {
        OMC__LOG(&h, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "%s: dp_index %u / tp_rank %u outside the stage's "
                 "data_parallel_size %u / tensor_parallel_size %u", where, d.dp_index, d.tp_rank, st.dp_size, st.tp_size);
        return OMC_ERR_INVALID_ARG;
    }
    if (s.memory_pool_device == OMC_MEMORY_CUDA) {
        OMC__LOG(&h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: memory_pool_device is cuda, but this connector keeps its pool in "
                 "host memory (GPUDirect pools are not supported yet): set memory_pool_device: cpu", where);
        return OMC_ERR_UNAVAILABLE;
    }
    role = omc__pc_role(cfg, e.connector, stage_id);
    switch (s.transport) {
        case OMC_TRANSPORT_SHM:
            r = omc__pc_shm(cfg, &e, &s, role, &d, &h, where, out);
            break;
        case OMC_TRANSPORT_LOCAL: {
            omc_local_desc ld;
            memset(&ld, 0, sizeof(ld));
            ld.role = OMC_ROLE_DUAL;        /* both ends live in this process, on this one handle */
            ld.pool_size = omc__pc_pool(cfg, &e, &s, &d);
            ld.default_ttl_ms = d.default_ttl_ms;
            ld.hooks = d.hooks;
            r = omc_local_create(&ld, out);
            break;
        }
        case OMC_TRANSPORT_RDMA:
        case OMC_TRANSPORT_TCP:
#if OMC__PIPELINE_PORTS
            r = omc__pc_tcp(cfg, &e, &s, stage_id, role, &d, &h, where, out);
#else
            OMC__LOG(&h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: the remote connector is not compiled in (OMNICONN_NO_ZMQ)", where);
            r = OMC_ERR_UNAVAILABLE;
#endif
            break;
        default:
            r = OMC_ERR_INTERNAL;
            break;
    }
    if (r != OMC_OK) {
        if (*out) { omc_conn_destroy(*out); *out = NULL; }
        OMC__LOG(&h, OMC_LOG_ERROR, OMC_LOGITEM_PIPELINE, "%s: cannot create the %s connector: %s", where,
                 omc_connector_type_name(s.type), omc_result_str(r));
    }
    return r;
}

#endif /* !OMNICONN_PIPELINE_NO_CONFIG */

#endif /* OMNICONN_IMPLEMENTATION */

/*
------------------------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 The omniconn authors
Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this software,
either in source code form or as a compiled binary, for any purpose, commercial or
non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this software dedicate
any and all copyright interest in the software to the public domain. We make this dedication
for the benefit of the public at large and to the detriment of our heirs and successors. We
intend this dedication to be an overt act of relinquishment in perpetuity of all present and
future rights to this software under copyright law.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN
CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------------------------
*/
