/* wip/net_decl.h - TEMPORARY: declarations of the ZMQ side channel and TCP data plane while they
   are developed; the lead merges this file into omniconn.h (replacing the #include). It is
   included inside omniconn.h's extern "C" block, after the same-process connector, only when
   OMC__HAS_ZMQ. It includes no system header of its own. */

/*
================================================================================================
THE REMOTE CONNECTOR (manual text: merge into STEP BY STEP, CONFIGURATION and WIRE FORMATS)
================================================================================================

    5. The remote connector (omc_tcp_create): ZMQ side channel + TCP data plane
       Stages on different hosts. A sender runs a listener on a ZMQ ROUTER socket (the side
       channel) and a TCP data port; put() copies the payload into the sender's pool (or takes a
       buffer from omc_conn_alloc) and returns metadata naming the sender's host, port and
       incarnation. A receiver's get() allocates a destination in its own pool, asks the sender
       (PULL), reads the bytes straight from a TCP connection into that destination, and returns
       once every byte is in place and the sender has recorded the read (the TCP trailer says
       so; other data planes wait for DONE).

           sender (omc_tcp_create, role SENDER)         receiver (omc_tcp_create, role RECEIVER)
           put(key) -> pool, metadata  ---- your control plane ---->  get(key, metadata)
                                       <--- HELLO (once per channel) ---
                                       ---- HELLO: incarnation, TCP data port ---->
                                       <--- PULL (entry, capacity, data token) ---
             listener/worker: push     ==== TCP: header + payload ====>  recv() into pool buffer
             record the read           ==== TCP: trailer ============>  return the buffer
                                       (other data planes: ---- DONE ---->)

       - Without metadata: register senders (omc_tcp_add_sender(conn, "thinker", host, port), as
         many as you like) and call get(meta = NULL). The receiver asks every registered sender
         (QUERY; a sender holds the query until the key appears or a second passes, so there is
         no busy polling) and pulls from the first that has it. omc_tcp_get_from() asks one named
         sender; omc_tcp_query() only asks ("exists?") and returns the size. With no sender
         registered at all, a metadata-less get fails at once with OMC_ERR_NOT_FOUND.
       - Fan-out: payload.readers = N lets N gets (from any receivers) pull the same put; the
         entry is dropped after the N-th successful pull. A failed pull does not use up a reader.
       - TTL: an unconsumed put is reclaimed after its TTL, but never while a push is reading it
         (each push pins its entry; the last unpin frees the range).
       - Deadlines: every blocking step of a get (connect, HELLO, QUERY, PULL, every read) is
         bounded by the get's deadline; the sender bounds a push by the budget in the PULL (and
         by the seed's rule, 30 s + 5 s per 100 MiB, when the receiver waits forever; the
         receiver applies the same rule to its own wait then). When a get fails at its deadline,
         the code says why: OMC_ERR_TIMEOUT (the senders answered, the key never came, or the
         push did not finish), OMC_ERR_CONNECTION (no sender ever answered, or a connection
         broke), OMC_ERR_AUTH (the CURVE handshake failed).
       - Restarts: every message carries its author's incarnation (omc_incarnation()). Metadata
         from a sender process that has since restarted gets OMC_ERR_PEER_RESTARTED; cached
         connections to the old process are dropped; new puts work at once.
       - health(): the generic counters, plus omc_tcp_health() (handshake and auth failures,
         garbage received, pushes in flight) and omc_tcp_peer_health() per sender (the last
         error, timeouts, restarts, auth failures).
       - Who may talk to a sender: optional CURVE (libzmq's Curve25519 authentication and
         encryption of the side channel), off by default. Give the sender a keypair
         (curve.secret_key) and the receivers its public key (curve.server_key); a receiver
         without it is refused, its get fails at its deadline with OMC_ERR_AUTH, and the sender
         counts it (omc_tcp_health().auth_failures). curve.allowed_clients restricts senders to
         known receiver keys (a ZAP handler). The TCP data plane is not encrypted: CURVE decides
         who may ask for data (a data connection is only used for a PULL that came over the
         authenticated channel), not who can read a wire. Use a private network or IPsec for that.
       - Helpers from the seed's orchestration: omc_port_compute() (the port-offset scheme),
         omc_port_check() (collisions in a set of edges), omc_detect_host() ("auto").

       The data plane is pluggable: the side channel, entries, fan-out, TTL and deadlines are
       shared; a data plane only moves bytes (see "[SECTION] Implementation: the data-plane
       interface"). The TCP data plane is built in; omniconn_rdma.h adds an RDMA one.

    CONFIGURATION (add to the table):
    OMNICONN_TCP_POOL_SIZE       1 GiB       impl file    remote connector pool when pool_size is 0
                                                          (address space; pages come on first touch)
    OMNICONN_TCP_WORKERS         2           impl file    sender push threads when workers is 0
    OMNICONN_TCP_MAX_WAIT_MS     1000        impl file    longest a sender holds a QUERY for an
                                                          absent key (long poll)
    OMNICONN_TCP_CHUNK           4 MiB       impl file    largest single send()/recv() of payload
    OMNICONN_TCP_INLINE          256 KiB     impl file    bytes of a push the listener writes itself
                                                          (without blocking) before a worker takes over

    WIRE FORMATS (add after the metadata envelope; docs/wire.md has the same, with examples):

    Side channel (ZMQ), protocol version 1. A receiver's DEALER socket talks to a sender's
    ROUTER socket. Every message is one ZMQ frame: a 32-byte header and a body whose layout
    depends on the type. Replies echo the request's transfer id and sequence number; a receiver
    drops replies that match neither (late answers to an abandoned request).
      header, 32 bytes:
        0   u32  magic 0x5A434D4F ("OMCZ")
        4   u8   protocol version (1)
        5   u8   type: 1 HELLO, 2 QUERY, 3 QUERY_REPLY, 4 NOT_FOUND, 5 PULL, 6 DONE, 7 ERROR, 8 ABORT
        6   u16  flags (0)
        8   u64  transfer id (chosen by the receiver, unique per get; 0 only in an ERROR that
                 answers a message too broken to name one)
        16  u64  incarnation of the message's author (random per process start, never 0)
        24  u32  sequence number of the request on its channel
        28  u32  body length (the frame is exactly 32 + body length bytes, at most 8192)
      HELLO body (receiver -> sender; the sender answers with its own HELLO), 8 + records:
        0   u32  capabilities: bit 0 TCP data plane, bit 1 RDMA data plane
        4   u16  endpoint record count (<= 32)
        6   u16  reserved (0)
        8   records, back to back, filling the body exactly: u16 type, u16 value length, value
            type 1, TCP data endpoint (sender only): u16 port (non-zero), u16 reserved (0),
                    host text (0..255 bytes, no NUL; empty = the host the side channel reached)
            type 2, RDMA endpoint: defined by omniconn_rdma.h
            a record type is the data plane's kind; any other type is skipped by a peer that
            does not know it: a new transport adds a record type, not a protocol version
      QUERY body (receiver -> sender), 8 + key length bytes:
        0   u32  wait in ms (hold the query while the key is absent, at most this long and at
                 most OMNICONN_TCP_MAX_WAIT_MS; 0 = answer now)
        4   u16  key length (1..255)
        6   u16  reserved (0)
        8   the qualified key
      QUERY_REPLY body (sender -> receiver), 24 bytes:
        0   u64  entry id
        8   u64  payload size in bytes
        16  u32  payload flags: bit 0 the payload is a frame
        20  u32  readers left
      NOT_FOUND: empty body (the key has no live entry, or the held query expired)
      PULL body (receiver -> sender), 36 + key length + descriptor length bytes:
        0   u64  entry id (0 = whatever entry the key has now)
        8   u64  expected sender incarnation (0 = any)
        16  u64  destination capacity in bytes (a larger payload is refused: OMC_ERR_TOO_LARGE)
        24  u32  time budget in ms (the sender abandons the push after it; 0 = the seed's rule)
        28  u16  key length (1..255)
        30  u8   data plane kind: 1 TCP, 2 RDMA
        31  u8   reserved (0)
        32  u16  descriptor length (0..1024)
        34  u16  reserved (0)
        36  the qualified key, then the data plane's descriptor (TCP: u64 connection token)
      DONE body (sender -> receiver, only once the data plane has moved every byte and the
        read is recorded; not sent after a TCP push, whose trailer says the same), 8 bytes:
        0   u64  bytes moved (= the payload size)
      ERROR body (either direction), 16 + text length bytes:
        0   i32  omc_result code (negative)
        4   u16  text length (0..255)
        6   u16  reserved (0)
        8   u64  detail (OMC_ERR_TOO_LARGE: the payload size; otherwise 0)
        16  text (not NUL-terminated)
        A sender answers a PULL with OMC_ERR_NOT_FOUND, OMC_ERR_STALE, OMC_ERR_TOO_LARGE,
        OMC_ERR_PEER_RESTARTED or OMC_ERR_UNAVAILABLE only before it has moved any byte.
      ABORT: empty body (the receiver gave up this transfer id: a held query is dropped without
        an answer, a push in progress stops at its next chunk)
      Reserved fields must be zero and lengths must add up exactly. A sender answers anything
      else with ERROR (OMC_ERR_MALFORMED, OMC_ERR_VERSION or OMC_ERR_PROTOCOL) and carries on.

    TCP data plane: a receiver opens one connection per channel to the port in the sender's
    type-1 record; at most one transfer is in flight on a connection.
      hello, receiver -> sender, 24 bytes:
        0   u32  magic 0x54434D4F ("OMCT")
        4   u16  version (1)
        6   u16  reserved (0)
        8   u64  token (random, non-zero; PULL descriptors name the connection by it)
        16  u64  receiver incarnation
      ack, sender -> receiver, 8 bytes: 0 u32 magic 0x41434D4F ("OMCA"), 4 i32 status (0 = OK,
        else an omc_result: the connection is closed after it)
      per transfer, sender -> receiver: a 24-byte header, exactly size payload bytes, and an
      8-byte trailer:
        header:
        0   u32  magic 0x44434D4F ("OMCD")
        4   u32  reserved (0)
        8   u64  transfer id
        16  u64  payload size
        trailer (written only after the sender has recorded the read - the entry's reader is
        used up, a last reader's entry is gone - so it tells the receiver what DONE would):
        0   u32  magic 0x45434D4F ("OMCE")
        4   u32  reserved (0)
      The receiver checks the header (transfer id; size equal to what the metadata or the
      QUERY_REPLY announced and no larger than its destination) before it reads any payload,
      never reads more than that into the destination, and completes the get on a valid
      trailer (the sender sends no DONE for a TCP push; one that arrives anyway is checked). A
      connection on which anything went wrong is closed by both sides, never reused.

    TCP metadata body (the envelope's transport OMC_TRANSPORT_TCP), 16 + host length bytes:
        0   u64  entry id (unique per put within the sender's process, never 0)
        8   u16  side-channel port
        10  u16  host length (1..255)
        12  u32  data-plane capabilities (as in HELLO)
        16  host text (as the sender advertises itself: an IPv4/IPv6 literal or a name)
*/

#define OMC_NET_CAP_TCP  0x1u       /* HELLO capabilities and metadata: the TCP data plane */
#define OMC_NET_CAP_RDMA 0x2u       /* the RDMA data plane (omniconn_rdma.h) */
#define OMC_TCP_HOST_MAX 256        /* host text, terminator included */
#define OMC_TCP_NAME_MAX 64         /* sender names, terminator included */
#define OMC_CURVE_KEY_LEN 40        /* a Z85-encoded Curve25519 key, without terminator */

/* CURVE authentication and encryption of the side channel. All NULL = off (the default).
   Keys are Z85 strings (40 characters) as zmq_curve_keypair() makes them; omc_tcp_curve_keypair()
   makes a pair, omc_tcp_read_key() reads one from a file. */
typedef struct omc_tcp_curve {
    const char* secret_key;             /* sender: its secret key; setting it turns CURVE on for
                                           the listener. receiver: optional own secret key (a
                                           fresh pair is made when NULL) */
    const char* public_key;             /* the public key of secret_key; NULL = derived from it */
    const char* server_key;             /* receiver: the senders' public key; setting it turns
                                           CURVE on for outgoing channels (per-sender keys:
                                           omc_tcp_add_sender_key) */
    const char* const* allowed_clients; /* sender: receiver public keys allowed in; NULL = any
                                           receiver that knows our public key */
    uint32_t allowed_count;
} omc_tcp_curve;

typedef struct omc_tcp_desc {
    omc_role role;              /* SENDER: listen; RECEIVER: pull; DUAL (default): both */
    const char* host;           /* sender: the address it advertises (and binds): NULL =
                                   "127.0.0.1", "auto" = omc_detect_host(), or a literal/name */
    const char* bind_host;      /* sender: bind here instead; "*" = every interface; NULL = host */
    uint16_t port;              /* sender: side-channel port; 0 = ephemeral (omc_tcp_endpoint) */
    uint16_t data_port;         /* sender: TCP data port; 0 = ephemeral */
    uint64_t pool_size;         /* 0 = OMNICONN_TCP_POOL_SIZE (1 GiB of address space) */
    uint64_t alignment;         /* 0 = 4096 */
    int prefault;               /* touch the pool's pages at creation (no page faults later) */
    int lock_memory;            /* mlock the pool (see omc_pool_desc) */
    int64_t default_ttl_ms;     /* 0 = OMNICONN_DEFAULT_TTL_MS, < 0 = no TTL */
    uint32_t workers;           /* sender push threads; 0 = OMNICONN_TCP_WORKERS (2) */
    uint32_t max_idle_channels; /* receiver: cached channels per sender; 0 = 8 */
    omc_tcp_curve curve;
    omc_hooks hooks;
} omc_tcp_desc;

/* What omc_tcp_health reports beyond omc_health. */
typedef struct omc_tcp_health_info {
    char host[OMC_TCP_HOST_MAX];    /* advertised host (sender) */
    uint16_t port, data_port;       /* bound ports (sender; 0 for a receiver) */
    int curve;                      /* 1 if the listener requires CURVE */
    uint64_t handshake_failures;    /* ZMTP handshakes that failed on the listener (any reason) */
    uint64_t auth_failures;         /* of those: wrong/missing CURVE key, ZAP refusals */
    uint64_t protocol_errors;       /* malformed or out-of-place messages and data hellos received */
    uint64_t pushes, pushes_failed; /* sender: pushes completed / failed or aborted */
    uint64_t pushes_in_flight;      /* sender: now */
    uint64_t pending_queries;       /* sender: QUERYs held for an absent key, now */
    uint64_t data_connections;      /* sender: registered TCP data connections, now */
    uint32_t peers;                 /* receiver: senders known (registered or from metadata) */
} omc_tcp_health_info;

/* One sender as a receiver sees it. */
typedef struct omc_tcp_peer_info {
    char name[OMC_TCP_NAME_MAX];    /* the registered name, or "host:port" if learned from metadata */
    char host[OMC_TCP_HOST_MAX];
    uint16_t port;
    int registered;
    uint64_t incarnation;           /* last seen; 0 = never answered */
    uint64_t requests, failures, timeouts, auth_failures, restarts;
    uint64_t bytes;                 /* payload bytes pulled from it */
    uint32_t idle_channels;
    omc_time_ns last_ok_ns;         /* omc_now_ns() of the last success, 0 = never */
    omc_result last_error;
    char last_error_text[160];
} omc_tcp_peer_info;

/* What omc_tcp_query found. */
typedef struct omc_tcp_found {
    uint64_t size;                  /* payload bytes */
    uint32_t flags;                 /* OMC_BUFFER_FRAME if it is a frame */
    uint32_t readers_left;
    uint64_t incarnation;           /* of the sender that has it */
    char sender[OMC_TCP_NAME_MAX];  /* its name */
} omc_tcp_found;

/* Create a remote connector. A sender (or dual) binds its side channel and data port at once:
   OMC_ERR_CONNECTION if a port is taken (the log names it). Returns OMC_ERR_INVALID_ARG for a
   bad key or host, OMC_ERR_UNAVAILABLE if CURVE is asked for and libzmq lacks it.
   Thread safety: the connector is thread-safe (see omc_conn_*). */
OMNICONN_API omc_result omc_tcp_create(const omc_tcp_desc* desc, omc_conn** out);

/* The sender's advertised host and bound ports (any pointer may be NULL). OMC_ERR_WRONG_ROLE for
   a receiver-only connector, OMC_ERR_INVALID_ARG if conn is not a remote connector. */
OMNICONN_API omc_result omc_tcp_endpoint(omc_conn* conn, char* host, size_t host_size, uint16_t* port, uint16_t* data_port);

/* Receiver: register a sender for metadata-less gets under a unique name (1..63 bytes).
   OMC_ERR_EXISTS if the name is taken. Safe from any thread, also while gets run. */
OMNICONN_API omc_result omc_tcp_add_sender(omc_conn* conn, const char* name, const char* host, uint16_t port);
/* The same with that sender's own CURVE public key (Z85), overriding curve.server_key. */
OMNICONN_API omc_result omc_tcp_add_sender_key(omc_conn* conn, const char* name, const char* host, uint16_t port,
                                               const char* server_key);
/* Forget a sender: cached channels close; gets already talking to it finish. OMC_ERR_NOT_FOUND. */
OMNICONN_API omc_result omc_tcp_remove_sender(omc_conn* conn, const char* name);

/* A metadata-less get from one registered sender (omc_conn_get(meta = NULL) asks them all). */
OMNICONN_API omc_result omc_tcp_get_from(omc_conn* conn, const char* sender, const char* from_stage, const char* to_stage,
                                         const char* key, omc_time_ns deadline, omc_buffer* out);
/* Does a sender have this key now? Asks the named sender (or every registered one, sender =
   NULL) once and consumes nothing. OMC_OK and *out, OMC_ERR_NOT_FOUND, or - if no sender
   answered by the deadline - OMC_ERR_TIMEOUT / OMC_ERR_CONNECTION / OMC_ERR_AUTH. */
OMNICONN_API omc_result omc_tcp_query(omc_conn* conn, const char* sender, const char* from_stage, const char* to_stage,
                                      const char* key, omc_time_ns deadline, omc_tcp_found* out);

OMNICONN_API omc_result omc_tcp_health(omc_conn* conn, omc_tcp_health_info* out);
/* Senders this receiver knows, indexed 0..count-1 (in the order it learned them). */
OMNICONN_API uint32_t   omc_tcp_peer_count(omc_conn* conn);
OMNICONN_API omc_result omc_tcp_peer_health(omc_conn* conn, uint32_t index, omc_tcp_peer_info* out);

/* CURVE keys: a fresh pair (Z85, 41 bytes each with the terminator), and one key read from a
   file that holds just the 40 Z85 characters (surrounding whitespace is ignored). */
OMNICONN_API omc_result omc_tcp_curve_keypair(char public_key[OMC_CURVE_KEY_LEN + 1], char secret_key[OMC_CURVE_KEY_LEN + 1]);
OMNICONN_API omc_result omc_tcp_read_key(const char* path, char key[OMC_CURVE_KEY_LEN + 1]);

/* Split "host:port" or "[v6-literal]:port" into host (brackets removed) and port (1..65535). */
OMNICONN_API omc_result omc_tcp_parse_endpoint(const char* text, char* host, size_t host_size, uint16_t* port);

/* ---- helpers the seed's orchestration uses --------------------------------------------------- */

/* The seed's port-offset scheme:
       worker:       base + purpose + from_stage + dp_index * tp_size + tp_rank
       orchestrator: base + 200 + from_stage
   e.g. base 50051, KV transfer, stage 0, DP 2 x TP 2: 50151, 50152, 50153, 50154; the
   orchestrator 50251. A worker's offset inside its purpose (from_stage + dp_index * tp_size +
   tp_rank) must stay below 100, the width of a purpose's range. */
typedef enum omc_port_purpose {
    OMC_PORT_REQUEST_FORWARDING = 0,
    OMC_PORT_KV_TRANSFER = 100
} omc_port_purpose;

typedef struct omc_port_spec {
    int base;                   /* 0 = 50051 (the seed's zmq_port default) */
    omc_port_purpose purpose;
    int from_stage;             /* >= 0 */
    int dp_index;               /* >= 0 */
    int tp_size;                /* 0 = 1 */
    int tp_rank;                /* 0 .. tp_size - 1 */
    int orchestrator;           /* 1: the orchestrator's port (purpose, DP and TP do not apply) */
} omc_port_spec;

/* One port. OMC_ERR_INVALID_ARG (logged to the default hooks) for a negative field, tp_rank
   outside the TP size, an unknown purpose, an offset that spills into the next purpose's
   range, or a result outside 1..65535. */
OMNICONN_API omc_result omc_port_compute(const omc_port_spec* spec, uint16_t* out_port);
/* Every spec's port (ports_out, optional, count entries) and the first collision: OMC_ERR_EXISTS
   with *clash_a < *clash_b the indices of two specs that land on the same port (logged). */
OMNICONN_API omc_result omc_port_check(const omc_port_spec* specs, uint32_t count, uint16_t* ports_out,
                                       uint32_t* clash_a, uint32_t* clash_b);

/* The address other hosts should use to reach this one ("auto"): the source address of the
   default route (a UDP connect() to a public address, which sends no packet), else the first
   non-loopback address of the host name, else loopback. family: 0 = IPv4 then IPv6, 4, or 6.
   how (optional) receives "route", "hostname" or "loopback". */
OMNICONN_API omc_result omc_detect_host(int family, char* out, size_t out_size, const char** how);
