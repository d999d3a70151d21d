/* omniconn_store.h - v0.1.0 - the store connector: payloads in Redis / Redis Cluster - SPDX-License-Identifier: MIT OR Unlicense

    A connector whose bytes live in a shared store that outlives the process that wrote them and
    that every node can read: Redis 7 (Debian's redis-server) or a Redis Cluster. It speaks the
    same omc_conn_* contract as every other omniconn connector (put / get / exists / list /
    batches / cleanup / health / TTL), so a stage moves from shared memory or TCP to the store by
    changing one create call. It is the C counterpart of LMCache's remote connectors (the
    RemoteConnector family and its Redis connector): two keys per payload, a priority executor
    (PEEK > PREFETCH > GET > PUT) and a bound on the requests in flight to each server.

    Do this:
        #define OMNICONN_IMPLEMENTATION
    before you include omniconn.h and this file in *one* C or C++ file (see omniconn.h):

        #define OMNICONN_IMPLEMENTATION
        #include "omniconn.h"
        #include "omniconn_store.h"

    Build: cc -std=c99 app.c -lpthread -ldl    (no client library: see DEPENDENCIES & LINKING)

    CONTENTS (search for a title; the code follows "[SECTION]" banners in the same order)
      QUICK START
      STEP BY STEP: HOW IT WORKS
      CONFIGURATION
      ERRORS & LOGGING
      THREAD SAFETY
      DEPENDENCIES & LINKING
      WIRE FORMATS
      NON-GOALS
      RECENT REVISIONS
      then the code, by [SECTION]: Store connector: declarations
        Store: configuration | Store: RESP client (sockets, encoder, decoder)
        Store: keys, slots and scripts | Store: the executor (queues, workers, routing)
        Store: operations (put, get, exists, drop, scan) | Store: the contract
        Store: batches, tickets, stats | Store: create | Store: the shared key directory
      and the licence

================================================================================================
QUICK START
================================================================================================

        omc_store_desc d = {0};
        d.url = "redis://127.0.0.1:6379";          // or unix:///run/redis.sock, or a cluster node
        omc_conn* conn;
        if (omc_store_create(&d, &conn) != OMC_OK) ...  // OMC_ERR_CONNECTION: server unreachable

        omc_payload p = {0};
        p.data = kv; p.size = nbytes; p.ttl_ms = 60000;  // the keys expire with the TTL
        omc_conn_put(conn, "prefill", "decode", "chunk-17", &p, NULL);

        // any process on any node with the same URL:
        omc_buffer b;
        omc_conn_get(conn, "prefill", "decode", "chunk-17", NULL, 0, omc_deadline_after_ms(1000), &b);
        use(b.data, b.size);                       // a view into the reader's own pool
        omc_buffer_release(&b);

    LMCache-style calls with a priority: omc_store_get_ex(..., OMC_STORE_PREFETCH, ...),
    omc_store_exists_batch, omc_store_put_batch / omc_store_get_batch (one pipeline per server),
    and asynchronous tickets (omc_store_submit_put / omc_store_submit_get / omc_store_ticket_wait).

    A directory for the remote connector (the bytes stay with their producer; the store says
    where): omc_store_dir_create({store, remote, name}), omc_store_dir_put on producers,
    omc_store_dir_get(key) on any node - no sender list.

================================================================================================
STEP BY STEP: HOW IT WORKS
================================================================================================

    1. Two keys per payload. A put writes a data key (the bytes) and a metadata key (a hash:
       length, format, dtype, shape, readers left, the writer's token). exists() and list()
       touch only metadata keys; a reader learns the length before the bytes arrive, allocates
       once from its pool and refuses a data key whose length differs from what the metadata says
       (OMC_ERR_MALFORMED). Both keys carry the hash tag of the payload, so in a cluster they live
       in one slot (one node) and a small server-side script can act on both atomically.
    2. Put = SET data-key (named by a fresh random token) + a script that creates the metadata
       only if none exists (a live key refuses a second put: OMC_ERR_EXISTS, and the loser's data
       key is deleted by the same script). A cache entry (readers = OMC_STORE_READERS_CACHE)
       put again as a cache entry with the same bytes and flags is kept as it is: the put is
       done (OMC_OK, the metadata names the kept entry, both keys' expiry renewed, a DEBUG log
       line); other bytes over a cache entry are OMC_ERR_EXISTS. Both commands go out in one
       write: the bytes are sent straight from the caller's memory or pool buffer (writev), never
       copied into a command buffer.
    3. Get = a claim script (checks the token the metadata from put names, counts one read off
       "left", and moves the data key to a private name - RENAME for the last reader, COPY for
       the others) + GETDEL of that private name, pipelined: one round trip. The bytes are read
       from the socket straight into a buffer of the reader's pool: the usual zero-copy view.
       A metadata-less get polls the claim until the deadline. A payload larger than the
       reader's whole pool, or than a get_copy destination, is refused by the script before
       anything is consumed or sent (OMC_ERR_TOO_LARGE, both sizes in the log): the entry stays
       for a reader with room, and the connection stays in step.
    4. TTL = key expiry (PEXPIRE on both keys; the data key lives 2 s longer so a reader never
       finds metadata without bytes). The writer remembers its own puts for health(),
       wait_consumed() and the ttl_reclaims counter; the store does the expiring.
    5. The executor. Every request goes through one queue per server with four priorities,
       PEEK > PREFETCH > GET > PUT. A server has max_inflight request slots, each with its own
       connection, and max_inflight workers that take the most urgent request whenever a slot is
       free: so at most max_inflight requests are in flight to one server, and a GET waits for at
       most the requests already in flight, never for queued PUTs. A synchronous call whose server
       has nothing queued and a slot free runs on the caller's thread (same slot, same bound; no
       hand-off to a worker and back). A request whose deadline passes while it is queued is
       answered OMC_ERR_TIMEOUT and never sent. A batch is one request per server: its commands
       are pipelined on one connection (on the caller's thread when the server is idle), sent at
       most a reply window (512 KiB of expected payload) ahead of the reply being read, so the
       server never holds a whole batch of large replies at once.
    6. Redis Cluster. On create the connector asks INFO whether the server is a cluster node; if
       so it reads CLUSTER SLOTS, routes each payload by the CRC16 slot of its hash tag, follows
       MOVED (updates the slot) and ASK (one ASKING + retry) redirections, and when a master goes
       away re-reads the slot map from the other nodes and retries requests that were not sent
       (connect refused, CLUSTERDOWN, TRYAGAIN) until their deadline. A request whose reply was
       lost with its connection is answered OMC_ERR_CONNECTION (it may or may not have happened).

================================================================================================
CONFIGURATION
================================================================================================

    omc_store_desc (zero means default):
      url              "redis://[user:password@]host[:port][/db]" or "unix:///path[?db=N]";
                       NULL = "redis://127.0.0.1:6379". For a cluster, any one node.
      user, password   override the URL's; a password alone is AUTH <password>, with a user it is
                       ACL AUTH <user> <password>
      key_prefix       prefix of every key; NULL = "omc:" (one store shared by several pipelines)
      max_inflight     requests in flight per server (= connections per server); 0 = 8
      pool_size        the reader's pool (where gets land, and omc_conn_alloc); 0 = 256 MiB of
                       address space (pages come on first touch)
      default_ttl_ms   0 = OMNICONN_DEFAULT_TTL_MS (5 min), < 0 = keys never expire
      request_timeout_ms  deadline of calls that take none (put, exists, cleanup); 0 = 10 s
      connect_timeout_ms  0 = 2000
      role, hooks      as on every connector: every allocation of the connector goes through
                       hooks.alloc_fn / free_fn, else OMNICONN_MALLOC / OMNICONN_FREE (the FFI
                       handles of the *_flat calls always come from OMNICONN_MALLOC: the caller
                       frees them without hooks)

    Macros (set in the implementation file): OMNICONN_STORE_MAX_INFLIGHT (8),
    OMNICONN_STORE_POOL_SIZE (256 MiB), OMNICONN_STORE_BATCH_BYTES (64 MiB: a batch is cut into
    pipelines of at most this many payload bytes), OMNICONN_STORE_MAX_REPLY (1 MiB: the largest
    reply other than payload bytes the client accepts).

================================================================================================
ERRORS & LOGGING
================================================================================================

    Every failure has a result code and one log line (item CONN_ERROR) naming the server:
      OMC_ERR_CONNECTION   server unreachable, connection reset, reply lost with its connection
      OMC_ERR_AUTH         AUTH / ACL refused (WRONGPASS, NOAUTH, NOPERM)
      OMC_ERR_POOL_FULL    the server is full: OOM, maxmemory reached with a noeviction policy
      OMC_ERR_TOO_LARGE    a value over the server's proto-max-bulk-len (checked before sending),
                           or a payload larger than the reader's pool (not consumed, not sent)
      OMC_ERR_EXISTS       a live key of that name (another writer's, or ours not yet consumed),
                           or a cache entry holding other bytes
      OMC_ERR_STALE        the metadata names a put that another writer replaced
      OMC_ERR_MALFORMED    the data key's length differs from the metadata key's (a lying key)
      OMC_ERR_PROTOCOL     a reply the client cannot parse (the connection is dropped)
      OMC_ERR_REMOTE       any other error reply (its text is in the log)
      OMC_ERR_TIMEOUT      the deadline passed (also while queued: the request was never sent)

================================================================================================
THREAD SAFETY
================================================================================================

    Like every omc_conn: any call from any thread. Tickets belong to the thread that waits on
    them. The executor's workers are threads of the connector (max_inflight per server).

================================================================================================
DEPENDENCIES & LINKING
================================================================================================

    None beyond libc and pthreads. RESP is spoken by a small client in this file instead of
    libhiredis, for three reasons: (1) zero copy both ways - the payload goes from the caller's
    memory to the socket with writev, and the reply's bytes go from the socket straight into the
    pool buffer the reader keeps, where hiredis copies a value into its command buffer on the way
    out and into a reply object on the way in; (2) deadlines on every read and write, on the
    executor's terms; (3) no library to load or link (Debian 12 ships hiredis 0.14, whose ABI
    differs from 1.x). The client speaks RESP2 only: the commands used are SET, GETDEL, EXISTS,
    HGET, EVAL, SCAN, AUTH, SELECT, CLIENT SETNAME, CONFIG GET, INFO, CLUSTER SLOTS, ASKING.
    Needs Redis >= 6.2 (GETDEL, COPY).

================================================================================================
WIRE FORMATS
================================================================================================

    Keys (P = key_prefix, H = 16 lowercase hex digits of FNV-1a-64 over the qualified key
    "from\x1Fto\x1Fkey"; {..} is the cluster hash tag, so every key of a payload is in one slot):
      P{H}m:<qualified key>   metadata, a hash:
                                tok    16 hex digits, the writer's random token
                                len    payload bytes (decimal)
                                left   reads left (decimal; the last read deletes both keys),
                                       or "cache" (OMC_STORE_READERS_CACHE: reads never consume)
                                fl     omniconn buffer flags (1 = an omniconn frame)
                                fmt    "raw" or "frame"
                                dtype  the first tensor segment's dtype name ("f32"), or ""
                                shape  its shape, comma-separated ("16,1024"), or ""
                                inc    the writer's incarnation (16 hex digits)
      P{H}d:<tok>             the payload bytes (a string)
      P{H}t:<nonce>           a reader's private copy between claim and GETDEL (expires in 60 s)

    Directory record (a cache entry of the store on the edge "omc.dir|<from>" -> <to>, same key):
      [0..2) u16 producer name length n | [2..2+n) name | [2+n..10+n) u64 producer incarnation |
      then the remote connector's metadata blob of the put (sender host, port, entry)

    Metadata blob returned by put (omniconn envelope, transport byte = OMC_TRANSPORT_TCP because
    the envelope has no store transport yet; the body says which): 32 bytes
      [0..4)   u32 0x5453434F "OCST"      [4..8)   u32 body version (1)
      [8..16)  u64 token                  [16..24) u64 payload length
      [24..32) u64 FNV-1a-64 of the qualified key (the H above)

================================================================================================
NON-GOALS
================================================================================================

    No TLS (put a TLS proxy such as stunnel in front, or use unix sockets). No RESP3, no
    Sentinel. No eviction policy of our own: a full server is reported, not worked around.
    No S3 or LMCache-server backend (docs/store.md says what either would take).

================================================================================================
RECENT REVISIONS
================================================================================================

    unreleased   first version: Redis and Redis Cluster, priority executor, batches, tickets;
                 every allocation through the desc's hooks (or OMNICONN_MALLOC / OMNICONN_FREE);
                 a payload larger than the reader's pool refused by the claim; batched gets
                 sent a reply window ahead; a cache entry put again with the same bytes kept.

LICENSE: see the end of this file (MIT or public domain, your choice).
*/
#ifndef OMNICONN_STORE_H_INCLUDED
#define OMNICONN_STORE_H_INCLUDED

#include "omniconn.h"

#if !defined(OMC__COMPANION_INTERFACE) || OMC__COMPANION_INTERFACE != 0x0001
    #error "omniconn_store.h 0.1 uses the companion interface of omniconn.h 0.1: use the omniconn.h of the same 0.1.x release."
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================== */
/* [SECTION] Store connector: declarations                                                       */
/* ============================================================================================== */

#define OMC_STORE_BODY_MAGIC 0x5453434Fu     /* "OCST": the metadata body of a store put */
#define OMC_STORE_BODY_SIZE 32
#define OMC_STORE_URL_MAX 512
/* payload.readers = OMC_STORE_READERS_CACHE: gets never consume the payload; it stays until its
   TTL or a cleanup (a cache entry, LMCache's semantics) */
#define OMC_STORE_READERS_CACHE 0xFFFFFFFFu

/* The executor's priorities, most urgent first. DEFAULT = what the call implies (exists: PEEK,
   get: GET, put: PUT). */
typedef enum omc_store_priority {
    OMC_STORE_PRIORITY_DEFAULT = 0,
    OMC_STORE_PEEK = 1,             /* exists, list, contains: a cache lookup */
    OMC_STORE_PREFETCH = 2,         /* a get for later */
    OMC_STORE_GET = 3,              /* a get someone waits for */
    OMC_STORE_PUT = 4               /* puts and evictions: may wait */
} omc_store_priority;
#define OMC_STORE_PRIORITIES 4

typedef struct omc_store_desc {
    omc_role role;
    const char* url;                /* see CONFIGURATION; NULL = "redis://127.0.0.1:6379" */
    const char* user;               /* overrides the URL's user */
    const char* password;           /* overrides the URL's password */
    const char* key_prefix;         /* NULL = "omc:" */
    uint32_t max_inflight;          /* per server; 0 = OMNICONN_STORE_MAX_INFLIGHT (8) */
    uint64_t pool_size;             /* 0 = OMNICONN_STORE_POOL_SIZE (256 MiB) */
    int64_t default_ttl_ms;         /* 0 = OMNICONN_DEFAULT_TTL_MS, < 0 = no expiry */
    int64_t request_timeout_ms;     /* 0 = 10000 */
    int64_t connect_timeout_ms;     /* 0 = 2000 */
    omc_hooks hooks;
} omc_store_desc;

/* Create a store connector: parses the URL, connects once (AUTH, SELECT) to check the server,
   and, on a cluster node, reads the slot map. Returns OMC_ERR_INVALID_ARG (bad URL, see log),
   OMC_ERR_CONNECTION (unreachable), OMC_ERR_AUTH, OMC_ERR_NO_MEMORY, OMC_ERR_SYSTEM. */
OMNICONN_API omc_result omc_store_create(const omc_store_desc* desc, omc_conn** out);

/* The same with scalar arguments (for FFI callers): url, role, pool_size, ttl, max_inflight. */
OMNICONN_API omc_result omc_store_create_url(const char* url, int role, uint64_t pool_size, int64_t default_ttl_ms,
                                             uint32_t max_inflight, omc_conn** out);

/* omc_conn_get with a priority (OMC_STORE_GET or OMC_STORE_PREFETCH). */
OMNICONN_API omc_result omc_store_get_ex(omc_conn* conn, const char* from, const char* to, const char* key,
                                         const void* meta, size_t meta_size, omc_store_priority priority,
                                         omc_time_ns deadline, omc_buffer* out);

/* Pipelined batches: one request per server, every item's result in items[i].result; returns
   OMC_OK or the first failure. put: items[i].payload (copy path or zero copy), meta filled.
   get: items[i].meta (or empty: metadata-less, retried until the deadline), buffer filled. */
OMNICONN_API omc_result omc_store_put_batch(omc_conn* conn, const char* from, const char* to, omc_batch_item* items,
                                            uint32_t count, omc_time_ns deadline);
OMNICONN_API omc_result omc_store_get_batch(omc_conn* conn, const char* from, const char* to, omc_batch_item* items,
                                            uint32_t count, omc_store_priority priority, omc_time_ns deadline);
/* LMCache's batched contains: results[i] = OMC_OK or OMC_ERR_NOT_FOUND (or an error). */
OMNICONN_API omc_result omc_store_exists_batch(omc_conn* conn, const char* from, const char* to, const char* const* keys,
                                               uint32_t count, omc_result* results, omc_time_ns deadline);

/* Asynchronous requests. A ticket is one request in the executor; wait for it once, then free
   it. submit_put: payload->data must stay valid until the wait returns (payload->buffer moves to
   the connector on success, as with omc_conn_put). */
typedef struct omc_store_ticket omc_store_ticket;
OMNICONN_API omc_result omc_store_submit_put(omc_conn* conn, const char* from, const char* to, const char* key,
                                             const omc_payload* payload, omc_store_priority priority,
                                             omc_time_ns deadline, omc_store_ticket** out);
OMNICONN_API omc_result omc_store_submit_get(omc_conn* conn, const char* from, const char* to, const char* key,
                                             omc_store_priority priority, omc_time_ns deadline, omc_store_ticket** out);
/* Wait until the request is answered (or wait_deadline passes: OMC_ERR_TIMEOUT, the ticket stays
   valid). Returns the request's result; a get's view goes to *out (release it). */
OMNICONN_API omc_result omc_store_ticket_wait(omc_store_ticket* t, omc_time_ns wait_deadline, omc_buffer* out);
/* The order in which the request reached a server (1 = first request of this connector; 0 = never
   sent: expired in the queue, refused before sending, or not yet dispatched). */
OMNICONN_API uint64_t omc_store_ticket_sequence(const omc_store_ticket* t);
/* Free a ticket; one not yet answered is waited for first (an unreleased get view is released). */
OMNICONN_API void omc_store_ticket_free(omc_store_ticket* t);

/* A pipelined batch get with scalar arguments (for FFI callers): for each of count keys,
   results[i], and on OMC_OK handles[i] (an omc_buffer from OMNICONN_MALLOC, malloc unless you
   define it: omc_buffer_release it, then OMNICONN_FREE it - libomniconn's omc_ffi_buffer_release
   does both), datas[i], sizes[i], flags[i].
   metadata-less; wait_missing != 0: wait for missing keys until the deadline (else
   OMC_ERR_NOT_FOUND at once). */
OMNICONN_API omc_result omc_store_get_batch_flat(omc_conn* conn, const char* from, const char* to, const char* const* keys,
                                                 uint32_t count, int priority, int wait_missing, omc_time_ns deadline,
                                                 omc_buffer** handles, void** datas, uint64_t* sizes, uint32_t* flags,
                                                 int32_t* results);

typedef struct omc_store_stats {
    uint64_t dispatched;            /* requests sent to a server (= the last sequence number) */
    uint64_t expired_in_queue;      /* requests whose deadline passed while queued: never sent */
    uint64_t by_priority[OMC_STORE_PRIORITIES];   /* dispatched per priority (PEEK first) */
    uint64_t moved, ask;            /* cluster redirections followed */
    uint64_t retries;               /* requests re-queued (not sent, CLUSTERDOWN, TRYAGAIN) */
    uint64_t connects;              /* connections opened */
    uint32_t inflight;              /* requests in flight now (all servers) */
    uint32_t inflight_max;          /* the most ever in flight to one server */
    uint32_t queued;                /* requests waiting now */
    uint32_t servers;               /* servers known (1, or the cluster's masters) */
    uint32_t max_inflight;          /* the bound in force */
    int cluster;                    /* 1 if the server is a cluster node */
} omc_store_stats;

/* Executor and routing counters. OMC_ERR_TYPE for a connector of another kind. */
OMNICONN_API omc_result omc_store_get_stats(omc_conn* conn, omc_store_stats* out);

/* ---- the shared key directory for the remote connector ------------------------------------- */
#if OMC__HAS_ZMQ
/* Producers register each put's location (the remote connector's metadata: sender host, port,
   incarnation, entry) in the store; a metadata-less get on any node reads it there and pulls the
   bytes from that sender (TCP or RDMA, as the remote connector does). N producers and M
   consumers need no sender list. A record expires with the payload's TTL, goes when a get finds
   its sender gone or restarted, and a restarted producer removes the records of its previous
   incarnation when it creates its directory. Built on the public API of both connectors. */
typedef struct omc_store_dir omc_store_dir;
typedef struct omc_store_dir_desc {
    omc_conn* store;            /* a store connector: where the records live (not owned) */
    omc_conn* remote;           /* a remote connector (omc_tcp_create, RDMA): the payloads (not owned) */
    const char* name;           /* this producer's name, unique among producers, 1..63 bytes
                                   (required for a producer; NULL for a consumer) */
} omc_store_dir_desc;

OMNICONN_API omc_result omc_store_dir_create(const omc_store_dir_desc* desc, omc_store_dir** out);
OMNICONN_API void       omc_store_dir_destroy(omc_store_dir* dir);
/* Put on the remote connector, then register the location. OMC_ERR_EXISTS if another producer
   registered the key (this put is then cleaned up). meta_out as omc_conn_put (may be NULL). */
OMNICONN_API omc_result omc_store_dir_put(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                          const omc_payload* payload, omc_meta* meta_out);
/* Wait (until deadline) for the key's record, then get the payload from its sender: out is the
   remote connector's view. Records whose sender is gone are removed and the wait goes on. */
OMNICONN_API omc_result omc_store_dir_get(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                          omc_time_ns deadline, omc_buffer* out);
/* The same with scalar arguments (for FFI callers). put: a copy-path payload. get: *handle is an
   omc_buffer from OMNICONN_MALLOC (omc_buffer_release it, then OMNICONN_FREE it - libomniconn's
   omc_ffi_buffer_release does both). */
OMNICONN_API omc_result omc_store_dir_create_flat(omc_conn* store, omc_conn* remote, const char* name, omc_store_dir** out);
OMNICONN_API omc_result omc_store_dir_put_flat(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                               const void* data, uint64_t size, uint32_t flags, uint32_t readers,
                                               int64_t ttl_ms);
OMNICONN_API omc_result omc_store_dir_get_flat(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                               omc_time_ns deadline, omc_buffer** handle, void** data, uint64_t* size,
                                               uint32_t* flags);
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

/* -------------------------------- stop here if you only need the API ------------------------- */
#endif /* OMNICONN_STORE_H_INCLUDED */

/* ============================================================================================== */
/*                                                                                                */
/*                                     IMPLEMENTATION                                             */
/*                                                                                                */
/* ============================================================================================== */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_STORE_IMPL_INCLUDED)
#define OMNICONN_STORE_IMPL_INCLUDED

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/* ============================================================================================== */
/* [SECTION] Store: configuration                                                                */
/* ============================================================================================== */

#ifndef OMNICONN_STORE_MAX_INFLIGHT
    #define OMNICONN_STORE_MAX_INFLIGHT 8u
#endif
#ifndef OMNICONN_STORE_POOL_SIZE
    #define OMNICONN_STORE_POOL_SIZE ((uint64_t)256 << 20)
#endif
#ifndef OMNICONN_STORE_BATCH_BYTES
    #define OMNICONN_STORE_BATCH_BYTES ((uint64_t)64 << 20)
#endif
#ifndef OMNICONN_STORE_MAX_REPLY
    #define OMNICONN_STORE_MAX_REPLY ((uint64_t)1 << 20)
#endif
#define OMC__ST_MAX_NODES 64
#define OMC__ST_SLOTS 16384
#define OMC__ST_BATCH_OPS 256u          /* ops in one pipeline at most */
#define OMC__ST_DATA_GRACE_MS 2000      /* the data key outlives its metadata by this much */
#define OMC__ST_TEMP_TTL_MS 60000       /* a reader's private copy, if the reader dies */
#define OMC__ST_RBUF 65536
/* Payload bytes a pipeline may have asked for beyond the reply being read. A pipeline of large
   gets sent at once makes the server hold every reply at the same time (tens of MiB that go
   through main memory several times on both sides); sent within this window the bytes stay in
   the caches. Half a typical L2. */
#define OMC__ST_REPLY_WINDOW ((uint64_t)512 << 10)

/* ============================================================================================== */
/* [SECTION] Store: RESP client (sockets, encoder, decoder)                                      */
/* ============================================================================================== */
/*
    One connection = one socket and a read buffer. Every call takes a deadline; a socket error or
    a passed deadline closes the connection (the reply stream is then out of step). Replies are
    decoded into omc__rv trees (bounded: OMNICONN_STORE_MAX_REPLY per string, depth 4); payload
    bytes are the exception and go straight to the caller's buffer (omc__rc_read_bulk_into).
*/

typedef struct omc__rc {
    int fd;                     /* -1 = not connected */
    uint8_t* buf;
    size_t pos, len;            /* unread bytes are buf[pos..len) */
} omc__rc;

enum { OMC__RV_NIL = 0, OMC__RV_STATUS, OMC__RV_ERROR, OMC__RV_INT, OMC__RV_BULK, OMC__RV_ARRAY };
typedef struct omc__rv {
    int type;
    int64_t i;                  /* INT; BULK/ARRAY: -1 never (nil is its own type) */
    char* s;                    /* STATUS, ERROR, BULK: NUL-terminated copy */
    uint64_t len;
    uint32_t n;                 /* ARRAY */
    struct omc__rv* e;
} omc__rv;

/* Every allocation of this file goes through the connector's hooks (omc__malloc / omc__free,
   which fall back to OMNICONN_MALLOC / OMNICONN_FREE): the decoder, the command buffers and the
   read buffers take the hooks as an argument. */
static void omc__rv_clear(const omc_hooks* h, omc__rv* v) {
    uint32_t k;
    if (!v) return;
    for (k = 0; k < v->n && v->e; k++) omc__rv_clear(h, &v->e[k]);
    omc__free(h, v->e);
    omc__free(h, v->s);
    memset(v, 0, sizeof(*v));
}

/* The core has no realloc hook: a larger block from the hooks, the old_size bytes copied, the
   old block freed. NULL (old block untouched) when the hooks have no memory. */
static void* omc__st_grow(const omc_hooks* h, void* p, size_t old_size, size_t new_size) {
    void* np = omc__malloc(h, new_size);
    if (!np) return NULL;
    if (p && old_size) memcpy(np, p, old_size);
    omc__free(h, p);
    return np;
}

static void omc__rc_close(omc__rc* rc) {
    if (rc->fd >= 0) close(rc->fd);
    rc->fd = -1;
    rc->pos = rc->len = 0;
}

/* Wait for fd to be ready (events) until deadline: 0 ready, OMC_ERR_TIMEOUT, OMC_ERR_CONNECTION. */
static omc_result omc__rc_wait(int fd, short events, omc_time_ns deadline) {
    for (;;) {
        struct pollfd p;
        int ms, pr;
        if (deadline == OMC_WAIT_FOREVER) ms = -1;
        else {
            omc_time_ns left = deadline - omc_now_ns();
            if (left <= 0) return OMC_ERR_TIMEOUT;
            ms = (int)omc__min((left + 999999) / 1000000, (omc_time_ns)INT32_MAX);
        }
        p.fd = fd; p.events = events; p.revents = 0;
        pr = poll(&p, 1, ms);
        if (pr > 0) return (p.revents & (events | POLLHUP | POLLERR)) ? OMC_OK : OMC_ERR_CONNECTION;
        if (pr < 0 && errno != EINTR) return OMC_ERR_CONNECTION;
    }
}

/* Connect to host:port, or to path when path[0]. Non-blocking socket afterwards. */
static omc_result omc__rc_connect(const omc_hooks* h, omc__rc* rc, const char* host, int port, const char* path,
                                  omc_time_ns deadline, char* why, size_t why_n) {
    int fd = -1, one = 1, err = 0;
    socklen_t elen = sizeof(err);
    omc_result r;
    omc__rc_close(rc);
    if (!rc->buf) { rc->buf = (uint8_t*)omc__malloc(h, OMC__ST_RBUF); if (!rc->buf) return OMC_ERR_NO_MEMORY; }
    if (path && path[0]) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof(sa));
        sa.sun_family = AF_UNIX;
        if (strlen(path) >= sizeof(sa.sun_path)) { snprintf(why, why_n, "unix socket path too long"); return OMC_ERR_INVALID_ARG; }
        memcpy(sa.sun_path, path, strlen(path));
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) { snprintf(why, why_n, "socket: %s", strerror(errno)); return OMC_ERR_SYSTEM; }
        if (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS && errno != EAGAIN) {
            snprintf(why, why_n, "connect unix:%.100s: %.60s", path, strerror(errno));
            close(fd);
            return OMC_ERR_CONNECTION;
        }
    } else {
        struct addrinfo hints, *ai = NULL, *a;
        char ps[16];
        int gr;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        snprintf(ps, sizeof(ps), "%d", port);
        gr = getaddrinfo(host, ps, &hints, &ai);
        if (gr != 0 || !ai) { snprintf(why, why_n, "resolve %.100s: %.60s", host, gai_strerror(gr)); return OMC_ERR_CONNECTION; }
        r = OMC_ERR_CONNECTION;
        for (a = ai; a; a = a->ai_next) {
            fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) continue;
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) { r = OMC_OK; break; }
            snprintf(why, why_n, "connect %.100s:%d: %.60s", host, port, strerror(errno));
            close(fd);
            fd = -1;
        }
        freeaddrinfo(ai);
        if (fd < 0) { if (!why[0]) snprintf(why, why_n, "connect %.100s:%d failed", host, port); return OMC_ERR_CONNECTION; }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    r = omc__rc_wait(fd, POLLOUT, deadline);
    if (r == OMC_OK && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0)) r = OMC_ERR_CONNECTION;
    if (r != OMC_OK) {
        if (path && path[0]) snprintf(why, why_n, "connect unix:%.100s: %.60s", path, r == OMC_ERR_TIMEOUT ? "timed out" : strerror(err ? err : errno));
        else snprintf(why, why_n, "connect %.100s:%d: %.60s", host, port, r == OMC_ERR_TIMEOUT ? "timed out" : strerror(err ? err : errno));
        close(fd);
        return r == OMC_ERR_TIMEOUT ? OMC_ERR_CONNECTION : r;
    }
    rc->fd = fd;
    return OMC_OK;
}

/* Write every byte of iov[0..n) until deadline. */
static omc_result omc__rc_writev(omc__rc* rc, struct iovec* iov, int n, omc_time_ns deadline) {
    int i = 0;
    while (i < n) {
        ssize_t k = writev(rc->fd, iov + i, omc__min(n - i, 1024));
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                omc_result r = omc__rc_wait(rc->fd, POLLOUT, deadline);
                if (r != OMC_OK) return r;
                continue;
            }
            return OMC_ERR_CONNECTION;
        }
        while (i < n && (size_t)k >= iov[i].iov_len) { k -= (ssize_t)iov[i].iov_len; i++; }
        if (i < n) { iov[i].iov_base = (uint8_t*)iov[i].iov_base + k; iov[i].iov_len -= (size_t)k; }
    }
    return OMC_OK;
}

/* Read at least one more byte into the buffer (compacting it first). */
static omc_result omc__rc_fill(omc__rc* rc, omc_time_ns deadline) {
    if (rc->pos > 0) {
        memmove(rc->buf, rc->buf + rc->pos, rc->len - rc->pos);
        rc->len -= rc->pos;
        rc->pos = 0;
    }
    if (rc->len == OMC__ST_RBUF) return OMC_ERR_PROTOCOL;        /* a line longer than the buffer */
    for (;;) {
        ssize_t k = recv(rc->fd, rc->buf + rc->len, OMC__ST_RBUF - rc->len, 0);
        if (k > 0) { rc->len += (size_t)k; return OMC_OK; }
        if (k == 0) return OMC_ERR_CONNECTION;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            omc_result r = omc__rc_wait(rc->fd, POLLIN, deadline);
            if (r != OMC_OK) return r;
            continue;
        }
        return OMC_ERR_CONNECTION;
    }
}

/* Exactly n bytes into dst (dst NULL: discard them): first what is buffered, then straight from
   the socket. */
static omc_result omc__rc_read_exact(omc__rc* rc, uint8_t* dst, uint64_t n, omc_time_ns deadline) {
    while (n > 0) {
        size_t have = rc->len - rc->pos;
        if (have) {
            size_t k = (size_t)omc__min((uint64_t)have, n);
            if (dst) { memcpy(dst, rc->buf + rc->pos, k); dst += k; }
            rc->pos += k;
            n -= k;
            continue;
        }
        if (dst && n >= 16384) {        /* large: no detour through the buffer */
            ssize_t k = recv(rc->fd, dst, (size_t)omc__min(n, (uint64_t)1 << 30), 0);
            if (k > 0) { dst += k; n -= (uint64_t)k; continue; }
            if (k == 0) return OMC_ERR_CONNECTION;
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                omc_result r = omc__rc_wait(rc->fd, POLLIN, deadline);
                if (r != OMC_OK) return r;
                continue;
            }
            return OMC_ERR_CONNECTION;
        }
        rc->pos = rc->len = 0;
        {
            omc_result r = omc__rc_fill(rc, deadline);
            if (r != OMC_OK) return r;
        }
    }
    return OMC_OK;
}

/* One CRLF-terminated line: *line points into the buffer (valid until the next read), without
   the CRLF. */
static omc_result omc__rc_line(omc__rc* rc, const char** line, size_t* n, omc_time_ns deadline) {
    for (;;) {
        uint8_t* s = rc->buf + rc->pos;
        uint8_t* nl = (uint8_t*)memchr(s, '\n', rc->len - rc->pos);
        if (nl) {
            if (nl == s || nl[-1] != '\r') return OMC_ERR_PROTOCOL;
            *line = (const char*)s;
            *n = (size_t)(nl - 1 - s);
            rc->pos += (size_t)(nl + 1 - s);
            return OMC_OK;
        }
        {
            omc_result r = omc__rc_fill(rc, deadline);
            if (r != OMC_OK) return r;
        }
    }
}

static int omc__parse_i64(const char* s, size_t n, int64_t* out) {
    int64_t v = 0;
    size_t i = 0;
    int neg = 0;
    if (n == 0 || n > 20) return -1;
    if (s[0] == '-') { neg = 1; i = 1; if (n == 1) return -1; }
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        if (v > (INT64_MAX - (s[i] - '0')) / 10) return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static char* omc__strndup(const omc_hooks* h, const char* s, size_t n) {
    char* d = (char*)omc__malloc(h, n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Decode one reply into v (depth-limited; strings up to OMNICONN_STORE_MAX_REPLY). */
static omc_result omc__rc_reply_depth(const omc_hooks* h, omc__rc* rc, omc__rv* v, omc_time_ns deadline, int depth) {
    const char* l;
    size_t n;
    int64_t x;
    omc_result r;
    memset(v, 0, sizeof(*v));
    r = omc__rc_line(rc, &l, &n, deadline);
    if (r != OMC_OK) return r;
    if (n < 1) return OMC_ERR_PROTOCOL;
    switch (l[0]) {
        case '+': case '-':
            v->type = l[0] == '+' ? OMC__RV_STATUS : OMC__RV_ERROR;
            v->s = omc__strndup(h, l + 1, n - 1);
            v->len = n - 1;
            return v->s ? OMC_OK : OMC_ERR_NO_MEMORY;
        case ':':
            if (omc__parse_i64(l + 1, n - 1, &x)) return OMC_ERR_PROTOCOL;
            v->type = OMC__RV_INT;
            v->i = x;
            return OMC_OK;
        case '$':
            if (omc__parse_i64(l + 1, n - 1, &x) || x < -1) return OMC_ERR_PROTOCOL;
            if (x == -1) { v->type = OMC__RV_NIL; return OMC_OK; }
            if ((uint64_t)x > OMNICONN_STORE_MAX_REPLY) return OMC_ERR_PROTOCOL;
            v->type = OMC__RV_BULK;
            v->s = (char*)omc__malloc(h, (size_t)x + 2);
            if (!v->s) return OMC_ERR_NO_MEMORY;
            v->len = (uint64_t)x;
            r = omc__rc_read_exact(rc, (uint8_t*)v->s, (uint64_t)x + 2, deadline);
            if (r != OMC_OK) return r;
            if (v->s[x] != '\r' || v->s[x + 1] != '\n') return OMC_ERR_PROTOCOL;
            v->s[x] = '\0';
            return OMC_OK;
        case '*': {
            uint32_t k;
            if (omc__parse_i64(l + 1, n - 1, &x) || x < -1 || x > 1000000) return OMC_ERR_PROTOCOL;
            if (x == -1) { v->type = OMC__RV_NIL; return OMC_OK; }
            if (depth >= 4) return OMC_ERR_PROTOCOL;
            v->type = OMC__RV_ARRAY;
            v->e = (omc__rv*)omc__calloc(h, (size_t)(x ? x : 1) * sizeof(omc__rv));
            if (!v->e) return OMC_ERR_NO_MEMORY;
            for (k = 0; k < (uint32_t)x; k++) {
                v->n = k + 1;
                r = omc__rc_reply_depth(h, rc, &v->e[k], deadline, depth + 1);
                if (r != OMC_OK) return r;
            }
            v->n = (uint32_t)x;
            return OMC_OK;
        }
        default:
            return OMC_ERR_PROTOCOL;
    }
}
static omc_result omc__rc_reply(const omc_hooks* h, omc__rc* rc, omc__rv* v, omc_time_ns deadline) {
    omc_result r = omc__rc_reply_depth(h, rc, v, deadline, 0);
    if (r != OMC_OK) omc__rv_clear(h, v);
    return r;
}

/* A growing byte buffer for encoded commands, in memory from the hooks it names. */
typedef struct omc__wb { const omc_hooks* hooks; uint8_t* p; size_t len, cap; int oom; } omc__wb;

static void omc__wb_init(omc__wb* w, const omc_hooks* h) { memset(w, 0, sizeof(*w)); w->hooks = h; }
static void omc__wb_uninit(omc__wb* w) { omc__free(w->hooks, w->p); w->p = NULL; w->len = w->cap = 0; }

static void omc__wb_put(omc__wb* w, const void* s, size_t n) {
    if (w->oom) return;
    if (w->len + n > w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 1024;
        uint8_t* np;
        while (nc < w->len + n) nc *= 2;
        np = (uint8_t*)omc__st_grow(w->hooks, w->p, w->len, nc);
        if (!np) { w->oom = 1; return; }
        w->p = np;
        w->cap = nc;
    }
    memcpy(w->p + w->len, s, n);
    w->len += n;
}

static void omc__wb_fmt(omc__wb* w, const char* prefix, uint64_t v) {
    char t[32];
    int n = snprintf(t, sizeof(t), "%s%llu\r\n", prefix, (unsigned long long)v);
    omc__wb_put(w, t, (size_t)n);
}

/* A command: "*argc", then each argument as a bulk string. */
static void omc__wb_cmd(omc__wb* w, int argc) { omc__wb_fmt(w, "*", (uint64_t)argc); }
static void omc__wb_arg(omc__wb* w, const void* s, size_t n) {
    omc__wb_fmt(w, "$", n);
    omc__wb_put(w, s, n);
    omc__wb_put(w, "\r\n", 2);
}
static void omc__wb_str(omc__wb* w, const char* s) { omc__wb_arg(w, s, strlen(s)); }
static void omc__wb_int(omc__wb* w, int64_t v) {
    char t[32];
    int n = snprintf(t, sizeof(t), "%lld", (long long)v);
    omc__wb_arg(w, t, (size_t)n);
}

/* ============================================================================================== */
/* [SECTION] Store: keys, slots and scripts                                                      */
/* ============================================================================================== */

static uint64_t omc__fnv64(const char* s, size_t n) {
    uint64_t h = 14695981039346656037ull;
    size_t i;
    for (i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
    return h;
}

/* CRC16-CCITT (XMODEM), as Redis Cluster hashes key slots. */
static uint16_t omc__crc16(const char* s, size_t n) {
    uint16_t crc = 0;
    size_t i;
    int b;
    for (i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint8_t)s[i] << 8);
        for (b = 0; b < 8; b++) crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/* The put: create the metadata only if none exists; the caller's SET of the data key came first.
   KEYS: meta, data. ARGV: tok len left ttl_ms fl fmt dtype shape inc.
   Returns 1 stored, 0 the key holds a put still waiting for its readers, -1 the data key is gone
   (the server is full), -2 a cache entry with other bytes holds the key. A cache entry put again
   with the same bytes and flags (LMCache stores a chunk under a key that names its content, and
   stores it again routinely) is kept as it is, its expiry renewed like the new put's (the data
   key's grace as OMC__ST_DATA_GRACE_MS), and the answer is its token: the put is done. */
static const char omc__lua_put[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
    "  local f = redis.call('HMGET', KEYS[1], 'left', 'tok', 'fl')\n"
    "  if f[1] ~= 'cache' or ARGV[3] ~= 'cache' or not f[2] then redis.call('DEL', KEYS[2]) return 0 end\n"
    "  local old = string.sub(KEYS[2], 1, #KEYS[2] - 16) .. f[2]\n"
    "  local same = f[3] == ARGV[5] and redis.call('STRLEN', old) == tonumber(ARGV[2])\n"
    "  if same then same = redis.call('GET', old) == redis.call('GET', KEYS[2]) end\n"
    "  redis.call('DEL', KEYS[2])\n"
    "  if not same then return -2 end\n"
    "  if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) redis.call('PEXPIRE', old, tonumber(ARGV[4]) + 2000)\n"
    "  else redis.call('PERSIST', KEYS[1]) redis.call('PERSIST', old) end\n"
    "  return f[2]\n"
    "end\n"
    "if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end\n"
    "redis.call('HSET', KEYS[1], 'tok', ARGV[1], 'len', ARGV[2], 'left', ARGV[3], 'fl', ARGV[5], 'fmt', ARGV[6],"
    " 'dtype', ARGV[7], 'shape', ARGV[8], 'inc', ARGV[9])\n"
    "if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end\n"
    "return 1\n";

/* The claim: one read of a payload. KEYS: meta, data-key prefix, the reader's private key.
   ARGV: the token the reader's metadata names ('' = any), max_size (0 = any).
   Returns {1, len, fl} claimed (the bytes are under KEYS[3]), {0} not found, {-1, tok} another
   writer's put, {-2, len} larger than max_size (nothing consumed), {-3} a metadata key whose
   len or left is not a number. */
static const char omc__lua_claim[] =
    "local f = redis.call('HMGET', KEYS[1], 'tok', 'len', 'left', 'fl')\n"
    "if not f[1] then return {0} end\n"
    "if ARGV[1] ~= '' and f[1] ~= ARGV[1] then return {-1, f[1]} end\n"
    "local len = tonumber(f[2])\n"
    "if not len or len < 0 or (f[3] ~= 'cache' and not tonumber(f[3])) then return {-3} end\n"
    "local max = tonumber(ARGV[2])\n"
    "if max > 0 and len > max then return {-2, len} end\n"
    "local d = KEYS[2] .. f[1]\n"
    "if redis.call('EXISTS', d) == 0 then redis.call('DEL', KEYS[1]) return {0} end\n"
    "local left = (tonumber(f[3]) or 2) - 1\n"
    "if f[3] == 'cache' then redis.call('COPY', d, KEYS[3], 'REPLACE')\n"
    "elseif left <= 0 then redis.call('RENAME', d, KEYS[3]) redis.call('DEL', KEYS[1])\n"
    "else redis.call('COPY', d, KEYS[3], 'REPLACE') redis.call('HSET', KEYS[1], 'left', left) end\n"
    "redis.call('PEXPIRE', KEYS[3], " "60000" ")\n"
    "return {1, len, tonumber(f[4])}\n";

/* The cleanup: KEYS: meta, data-key prefix. Returns 1 if there was a put. */
static const char omc__lua_drop[] =
    "local t = redis.call('HGET', KEYS[1], 'tok')\n"
    "if not t then return 0 end\n"
    "redis.call('DEL', KEYS[1], KEYS[2] .. t)\n"
    "return 1\n";

/* ============================================================================================== */
/* [SECTION] Store: the executor (queues, workers, routing)                                      */
/* ============================================================================================== */
/*
    An op is one thing a caller wants (put, get, exists, drop, owned, raw); a request is a list of
    ops for one server, sent as one pipeline by one worker. Ops belong to a group that the caller
    waits on; a redirected op moves to a new request for its new server and stays in its group.
*/

typedef struct omc__st_state omc__st_state;
typedef struct omc__snode omc__snode;

enum { OMC__OP_PUT = 1, OMC__OP_GET, OMC__OP_EXISTS, OMC__OP_DROP, OMC__OP_OWNED, OMC__OP_RAW };

typedef struct omc__sgroup {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t pending;           /* ops not yet answered */
} omc__sgroup;

typedef struct omc__sop {
    int kind;
    omc__sgroup* group;
    char qkey[OMC_KEY_MAX];
    uint32_t qlen;
    uint64_t h;                 /* FNV-1a-64 of qkey: the hash tag */
    uint16_t slot;
    int asking;                 /* send ASKING first (an ASK redirection) */
    /* put */
    const void* data;
    uint64_t size;
    uint64_t tok;
    uint32_t readers, flags;
    int64_t ttl_ms;             /* < 0 none */
    char fmt[8], dtype[8], shape[160];
    /* get */
    uint64_t want_tok;          /* 0 = any */
    uint64_t want_size;         /* from the metadata, 0 = unknown */
    uint64_t max_size;
    omc_buffer out;
    /* owned: the token to compare */
    /* raw */
    const char* const* argv;
    const size_t* argl;
    int argc;
    omc__rv reply;
    /* results */
    omc_result result;
    uint64_t seq;               /* dispatch order */
    int retry;                  /* not sent or refused for now: route again */
    int kept;                   /* put: the same bytes were already stored as a cache entry */
    char err[320];
} omc__sop;

typedef struct omc__sreq {
    struct omc__sreq* next;
    int prio;                   /* 0..3 = PEEK..PUT */
    omc_time_ns deadline;
    uint32_t nops;
    omc__sop** ops;
} omc__sreq;

struct omc__snode {
    omc__st_state* S;
    char host[256];
    int port;
    char path[108];
    char name[300];             /* "host:port" or "unix:path", for logs */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    omc__sreq* head[OMC_STORE_PRIORITIES];
    omc__sreq* tail[OMC_STORE_PRIORITIES];
    uint32_t queued, inflight, inflight_max;
    int stop;
    pthread_t* th;
    uint32_t nth;
    omc__rc* conns;             /* max_inflight connections, lent to whoever runs a request */
    uint32_t* free_conn;        /* indices of the idle ones */
    uint32_t nfree;
    int64_t max_bulk;           /* proto-max-bulk-len, 0 = unknown */
};

struct omc__st_state {
    omc_conn* conn;
    omc_hooks hooks;            /* the desc's, resolved: every allocation of the connector */
    char prefix[64];
    char user[128], password[256];
    int db;
    int cluster;
    uint32_t max_inflight;
    int64_t default_ttl_ms, request_timeout_ms, connect_timeout_ms;
    omc_pool* pool;
    pthread_mutex_t route_mu;
    omc__snode* nodes[OMC__ST_MAX_NODES];
    uint32_t nnodes;
    uint8_t* slots;             /* slot -> node index + 1 (0 = unknown) */
    omc_time_ns last_refresh;
    /* counters (atomic) */
    uint64_t dispatched, expired_in_queue, moved, ask, retries, connects, by_prio[OMC_STORE_PRIORITIES];
    uint32_t inflight_max;
    uint64_t last_get_len;      /* the last payload a get read: the guess for gets of unknown size */
    /* this connector's own puts: qkey -> omc__sown */
    pthread_mutex_t own_mu;
    omc__smap own;
};

typedef struct omc__sown { uint64_t tok, h; omc_time_ns expires; } omc__sown;

/* Tell an op's caller that its result is in (the caller may free the op right after). */
static void omc__st_wake(omc__sop* op) {
    omc__sgroup* g = op->group;
    pthread_mutex_lock(&g->mu);
    if (--g->pending == 0) pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}
static void omc__st_complete(omc__sop* op, omc_result r) {
    op->result = r;
    omc__st_wake(op);
}

/* The ops a run answered, woken only after the run's connection slot is back among the free
   ones: a caller woken while the slot still looks taken would start its next request on another
   connection (and open it). A request holds at most OMC__ST_BATCH_OPS ops. */
typedef struct omc__st_done {
    uint32_t n;
    int refresh;                /* a cluster node refused the connection: read the slot map after */
    omc__sop* op[OMC__ST_BATCH_OPS];
} omc__st_done;

static void omc__st_settle(omc__st_done* d, omc__sop* op, omc_result r) {
    if (d->n == OMC__ST_BATCH_OPS) { omc__st_complete(op, r); return; }    /* no room: answered at once */
    op->result = r;
    d->op[d->n++] = op;
}
static void omc__st_wake_all(omc__st_done* d) {
    uint32_t k;
    for (k = 0; k < d->n; k++) omc__st_wake(d->op[k]);
    d->n = 0;
}

static omc_result omc__st_group_init(omc__sgroup* g, uint32_t n) {
    g->pending = n;
    if (pthread_mutex_init(&g->mu, NULL) != 0) return OMC_ERR_SYSTEM;
    if (omc__cond_init_monotonic(&g->cv) != 0) { pthread_mutex_destroy(&g->mu); return OMC_ERR_SYSTEM; }
    return OMC_OK;
}
static void omc__st_group_uninit(omc__sgroup* g) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}
/* Wait for every op of the group (0) or the deadline (OMC_ERR_TIMEOUT). */
static omc_result omc__st_group_wait(omc__sgroup* g, omc_time_ns deadline) {
    omc_result r = OMC_OK;
    pthread_mutex_lock(&g->mu);
    while (g->pending && r == OMC_OK)
        if (omc__cond_wait_until(&g->cv, &g->mu, deadline) == ETIMEDOUT && g->pending) r = OMC_ERR_TIMEOUT;
    pthread_mutex_unlock(&g->mu);
    return r;
}

static void* omc__st_worker(void* arg);

/* A request and its op list (the ops belong to their callers). */
static void omc__st_req_free(omc__st_state* S, omc__sreq* q) {
    omc__free(&S->hooks, q->ops);
    omc__free(&S->hooks, q);
}

/* A node's arrays and the node itself (what node_new got before it failed, or node_free). */
static void omc__st_node_release(omc__snode* N) {
    const omc_hooks* h = &N->S->hooks;
    omc__free(h, N->th);
    omc__free(h, N->conns);
    omc__free(h, N->free_conn);
    pthread_cond_destroy(&N->cv);
    pthread_mutex_destroy(&N->mu);
    omc__free(h, N);
}

static omc__snode* omc__st_node_new(omc__st_state* S, const char* host, int port, const char* path) {
    omc__snode* N = (omc__snode*)omc__calloc(&S->hooks, sizeof(omc__snode));
    uint32_t i;
    if (!N) return NULL;
    N->S = S;
    snprintf(N->host, sizeof(N->host), "%s", host ? host : "");
    N->port = port;
    snprintf(N->path, sizeof(N->path), "%s", path ? path : "");
    if (path && path[0]) snprintf(N->name, sizeof(N->name), "unix:%.107s", path);
    else snprintf(N->name, sizeof(N->name), "%.255s:%d", host, port);
    if (pthread_mutex_init(&N->mu, NULL) != 0) { omc__free(&S->hooks, N); return NULL; }
    if (omc__cond_init_monotonic(&N->cv) != 0) { pthread_mutex_destroy(&N->mu); omc__free(&S->hooks, N); return NULL; }
    N->th = (pthread_t*)omc__calloc(&S->hooks, S->max_inflight * sizeof(pthread_t));
    N->conns = (omc__rc*)omc__calloc(&S->hooks, S->max_inflight * sizeof(omc__rc));
    N->free_conn = (uint32_t*)omc__calloc(&S->hooks, S->max_inflight * sizeof(uint32_t));
    if (!N->th || !N->conns || !N->free_conn) { omc__st_node_release(N); return NULL; }
    for (i = 0; i < S->max_inflight; i++) { N->conns[i].fd = -1; N->free_conn[i] = i; }
    N->nfree = S->max_inflight;
    for (i = 0; i < S->max_inflight; i++) {
        if (pthread_create(&N->th[i], NULL, omc__st_worker, N) != 0) break;
        N->nth++;
    }
    if (N->nth == 0) { omc__st_node_release(N); return NULL; }
    return N;
}

static void omc__st_node_stop(omc__snode* N) {
    uint32_t i, p;
    pthread_mutex_lock(&N->mu);
    N->stop = 1;
    pthread_cond_broadcast(&N->cv);
    pthread_mutex_unlock(&N->mu);
    for (i = 0; i < N->nth; i++) pthread_join(N->th[i], NULL);
    N->nth = 0;
    for (p = 0; p < OMC_STORE_PRIORITIES; p++) {   /* what was still queued: answered, never sent */
        omc__sreq* q = N->head[p];
        while (q) {
            omc__sreq* nx = q->next;
            uint32_t k;
            for (k = 0; k < q->nops; k++) omc__st_complete(q->ops[k], OMC_ERR_CLOSED);
            omc__st_req_free(N->S, q);
            q = nx;
        }
        N->head[p] = N->tail[p] = NULL;
    }
}

static void omc__st_node_free(omc__snode* N) {
    uint32_t i;
    for (i = 0; N->conns && i < N->S->max_inflight; i++) { omc__rc_close(&N->conns[i]); omc__free(&N->S->hooks, N->conns[i].buf); }
    omc__st_node_release(N);
}

/* The node for host:port, created if new (route_mu held). */
static omc__snode* omc__st_node_find(omc__st_state* S, const char* host, int port) {
    uint32_t i;
    for (i = 0; i < S->nnodes; i++)
        if (S->nodes[i]->port == port && strcmp(S->nodes[i]->host, host) == 0) return S->nodes[i];
    if (S->nnodes >= OMC__ST_MAX_NODES) return NULL;
    S->nodes[S->nnodes] = omc__st_node_new(S, host, port, NULL);
    if (!S->nodes[S->nnodes]) return NULL;
    return S->nodes[S->nnodes++];
}
static uint32_t omc__st_node_index(omc__st_state* S, omc__snode* N) {
    uint32_t i;
    for (i = 0; i < S->nnodes; i++) if (S->nodes[i] == N) return i;
    return 0;
}

/* Queue a request on a node (taking ownership). */
static void omc__st_enqueue(omc__snode* N, omc__sreq* q) {
    pthread_mutex_lock(&N->mu);
    if (N->stop) {
        uint32_t k;
        pthread_mutex_unlock(&N->mu);
        for (k = 0; k < q->nops; k++) omc__st_complete(q->ops[k], OMC_ERR_CLOSED);
        omc__st_req_free(N->S, q);
        return;
    }
    q->next = NULL;
    if (N->tail[q->prio]) N->tail[q->prio]->next = q;
    else N->head[q->prio] = q;
    N->tail[q->prio] = q;
    N->queued++;
    pthread_cond_signal(&N->cv);
    pthread_mutex_unlock(&N->mu);
}

static omc__sreq* omc__st_req_new(omc__st_state* S, uint32_t nops, int prio, omc_time_ns deadline) {
    omc__sreq* q = (omc__sreq*)omc__calloc(&S->hooks, sizeof(omc__sreq));
    if (!q) return NULL;
    q->ops = (omc__sop**)omc__calloc(&S->hooks, (nops ? nops : 1) * sizeof(omc__sop*));
    if (!q->ops) { omc__free(&S->hooks, q); return NULL; }
    q->prio = prio;
    q->deadline = deadline;
    return q;
}

/* Which node serves an op now (NULL: none known). */
static omc__snode* omc__st_route(omc__st_state* S, const omc__sop* op) {
    omc__snode* N = NULL;
    pthread_mutex_lock(&S->route_mu);
    if (!S->cluster) N = S->nnodes ? S->nodes[0] : NULL;
    else if (S->slots[op->slot]) N = S->nodes[S->slots[op->slot] - 1];
    pthread_mutex_unlock(&S->route_mu);
    return N;
}

/* Send ops: group them by node into requests of at most OMC__ST_BATCH_OPS ops and
   OMNICONN_STORE_BATCH_BYTES bytes. An op with no node is answered at once. */
static void omc__st_dispatch(omc__st_state* S, omc__sop** ops, uint32_t n, int prio, omc_time_ns deadline) {
    uint32_t i, j;
    uint8_t* done = (uint8_t*)omc__calloc(&S->hooks, n ? n : 1);
    if (!done) { for (i = 0; i < n; i++) omc__st_complete(ops[i], OMC_ERR_NO_MEMORY); return; }
    for (i = 0; i < n; i++) {
        omc__snode* N;
        omc__sreq* q;
        uint64_t bytes = 0;
        if (done[i]) continue;
        N = omc__st_route(S, ops[i]);
        if (!N) {
            done[i] = 1;
            snprintf(ops[i]->err, sizeof(ops[i]->err), "no server serves slot %u (cluster slot map incomplete)", ops[i]->slot);
            omc__st_complete(ops[i], OMC_ERR_CONNECTION);
            continue;
        }
        q = omc__st_req_new(S, omc__min(n - i, OMC__ST_BATCH_OPS), prio, deadline);
        if (!q) { done[i] = 1; omc__st_complete(ops[i], OMC_ERR_NO_MEMORY); continue; }
        for (j = i; j < n && q->nops < OMC__ST_BATCH_OPS; j++) {
            uint64_t b;
            if (done[j] || (j != i && omc__st_route(S, ops[j]) != N)) continue;
            b = ops[j]->kind == OMC__OP_PUT ? ops[j]->size : ops[j]->kind == OMC__OP_GET ? ops[j]->want_size : 0;
            if (q->nops && bytes + b > OMNICONN_STORE_BATCH_BYTES) break;
            bytes += b;
            q->ops[q->nops++] = ops[j];
            done[j] = 1;
        }
        omc__st_enqueue(N, q);
    }
    omc__free(&S->hooks, done);
}

/* A failed op of a run: its error text (with the server's name), answered with the run's others. */
static void omc__st_fail(omc__st_done* d, omc__snode* N, omc__sop* op, omc_result r, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
static void omc__st_fail(omc__st_done* d, omc__snode* N, omc__sop* op, omc_result r, const char* fmt, ...) {
    va_list ap;
    char msg[180];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(op->err, sizeof(op->err), "%.120s: %.190s", N ? N->name : "store", msg);
    omc__st_settle(d, op, r);
}

/* ============================================================================================== */
/* [SECTION] Store: operations (put, get, exists, drop, scan)                                    */
/* ============================================================================================== */

static void omc__st_hex(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

/* "<prefix>{H}" + what ("m:" + qkey, "d:" + tok, "t:" + nonce, or "d:" alone) */
static size_t omc__st_key(const omc__st_state* S, uint64_t h, const char* what, const char* tail, size_t tail_len,
                          char* out, size_t cap) {
    char hx[17];
    int n;
    omc__st_hex(h, hx);
    n = snprintf(out, cap, "%s{%s}%s", S->prefix, hx, what);
    if (n < 0 || (size_t)n + tail_len >= cap) return 0;
    memcpy(out + n, tail, tail_len);
    out[(size_t)n + tail_len] = '\0';
    return (size_t)n + tail_len;
}

/* Map an error reply to a result; ASK/MOVED/TRYAGAIN/... set op->retry and the target. */
static omc_result omc__st_error_reply(omc__st_state* S, omc__snode* N, omc__sop* op, const char* e, int* moved_to,
                                      char* host, size_t host_n, int* port) {
    *moved_to = 0;
    if (!strncmp(e, "MOVED ", 6) || !strncmp(e, "ASK ", 4)) {
        const char* a = strchr(e + (e[0] == 'M' ? 6 : 4), ' ');     /* after the slot number */
        const char* colon = a ? strrchr(a, ':') : NULL;
        if (a && colon && (size_t)(colon - a - 1) < host_n) {
            memcpy(host, a + 1, (size_t)(colon - a - 1));
            host[colon - a - 1] = '\0';
            if (!host[0]) snprintf(host, host_n, "%s", N->host);   /* "MOVED 1 :6380": same host */
            *port = atoi(colon + 1);
            *moved_to = e[0] == 'M' ? 1 : 2;
            return OMC_OK;
        }
        return OMC_ERR_PROTOCOL;
    }
    if (!strncmp(e, "TRYAGAIN", 8) || !strncmp(e, "CLUSTERDOWN", 11) || !strncmp(e, "LOADING", 7) ||
        !strncmp(e, "MASTERDOWN", 10) || !strncmp(e, "READONLY", 8)) {
        op->retry = 1;
        return OMC_ERR_CONNECTION;
    }
    (void)S;
    if (strstr(e, "OOM")) return OMC_ERR_POOL_FULL;
    if (!strncmp(e, "NOAUTH", 6) || !strncmp(e, "WRONGPASS", 9) || !strncmp(e, "NOPERM", 6)) return OMC_ERR_AUTH;
    if (strstr(e, "invalid bulk length") || strstr(e, "proto-max-bulk-len")) return OMC_ERR_TOO_LARGE;
    return OMC_ERR_REMOTE;
}

/* Encode one op's commands into w (payload bytes become their own iovec: marks[] records where).
   Returns how many replies it will produce. */
typedef struct omc__st_mark { size_t at; const void* data; uint64_t size; } omc__st_mark;

/* The largest payload a get may claim: the caller's destination (get_copy) and the reader's whole
   pool. The claim script refuses a larger one before it consumes anything or sends a byte, so the
   entry stays for a reader with room and the connection stays in step. */
static uint64_t omc__st_claim_max(const omc__st_state* S, const omc__sop* op) {
    uint64_t pool = omc_pool_size(S->pool);
    return op->max_size && op->max_size < pool ? op->max_size : pool;
}

static int omc__st_encode(omc__st_state* S, omc__sop* op, omc__wb* w, omc__st_mark* mark, uint64_t nonce) {
    char mk[OMC_KEY_MAX + 96], dk[128], tk[128], dp[128], hx[17];
    size_t ml = omc__st_key(S, op->h, "m:", op->qkey, op->qlen, mk, sizeof(mk));
    int replies = 0;
    mark->data = NULL;
    if (op->asking) { omc__wb_cmd(w, 1); omc__wb_str(w, "ASKING"); replies++; }
    switch (op->kind) {
        case OMC__OP_PUT: {
            char ttl2[32], num[32];
            omc__st_hex(op->tok, hx);
            omc__st_key(S, op->h, "d:", hx, 16, dk, sizeof(dk));
            omc__wb_cmd(w, op->ttl_ms > 0 ? 5 : 3);
            omc__wb_str(w, "SET");
            omc__wb_str(w, dk);
            omc__wb_fmt(w, "$", op->size);
            mark->at = w->len;
            mark->data = op->data;
            mark->size = op->size;
            omc__wb_put(w, "\r\n", 2);
            if (op->ttl_ms > 0) {
                snprintf(ttl2, sizeof(ttl2), "%lld", (long long)(op->ttl_ms + OMC__ST_DATA_GRACE_MS));
                omc__wb_str(w, "PX");
                omc__wb_str(w, ttl2);
            }
            replies++;
            if (op->asking) { omc__wb_cmd(w, 1); omc__wb_str(w, "ASKING"); replies++; }
            omc__wb_cmd(w, 14);
            omc__wb_str(w, "EVAL");
            omc__wb_arg(w, omc__lua_put, sizeof(omc__lua_put) - 1);
            omc__wb_str(w, "2");
            omc__wb_arg(w, mk, ml);
            omc__wb_str(w, dk);
            omc__wb_arg(w, hx, 16);
            omc__wb_int(w, (int64_t)op->size);
            if (op->readers == OMC_STORE_READERS_CACHE) omc__wb_str(w, "cache");
            else omc__wb_int(w, (int64_t)(op->readers ? op->readers : 1));
            omc__wb_int(w, op->ttl_ms > 0 ? op->ttl_ms : 0);
            snprintf(num, sizeof(num), "%u", op->flags);
            omc__wb_str(w, num);
            omc__wb_str(w, op->fmt);
            omc__wb_str(w, op->dtype);
            omc__wb_str(w, op->shape);
            omc__st_hex(omc_incarnation(), hx);
            omc__wb_arg(w, hx, 16);
            replies++;
            break;
        }
        case OMC__OP_GET: {
            char want[17];
            omc__st_key(S, op->h, "d:", "", 0, dp, sizeof(dp));
            omc__st_hex(nonce, hx);
            omc__st_key(S, op->h, "t:", hx, 16, tk, sizeof(tk));
            if (op->want_tok) omc__st_hex(op->want_tok, want);
            else want[0] = '\0';
            omc__wb_cmd(w, 8);
            omc__wb_str(w, "EVAL");
            omc__wb_arg(w, omc__lua_claim, sizeof(omc__lua_claim) - 1);
            omc__wb_str(w, "3");
            omc__wb_arg(w, mk, ml);
            omc__wb_str(w, dp);
            omc__wb_str(w, tk);
            omc__wb_str(w, want);
            omc__wb_int(w, (int64_t)omc__st_claim_max(S, op));
            replies++;
            if (op->asking) { omc__wb_cmd(w, 1); omc__wb_str(w, "ASKING"); replies++; }
            omc__wb_cmd(w, 2);
            omc__wb_str(w, "GETDEL");
            omc__wb_str(w, tk);
            replies++;
            break;
        }
        case OMC__OP_EXISTS:
            omc__wb_cmd(w, 2);
            omc__wb_str(w, "EXISTS");
            omc__wb_arg(w, mk, ml);
            replies++;
            break;
        case OMC__OP_OWNED:
            omc__wb_cmd(w, 3);
            omc__wb_str(w, "HGET");
            omc__wb_arg(w, mk, ml);
            omc__wb_str(w, "tok");
            replies++;
            break;
        case OMC__OP_DROP:
            omc__st_key(S, op->h, "d:", "", 0, dp, sizeof(dp));
            omc__wb_cmd(w, 5);
            omc__wb_str(w, "EVAL");
            omc__wb_arg(w, omc__lua_drop, sizeof(omc__lua_drop) - 1);
            omc__wb_str(w, "2");
            omc__wb_arg(w, mk, ml);
            omc__wb_str(w, dp);
            replies++;
            break;
        case OMC__OP_RAW: {
            int k;
            omc__wb_cmd(w, op->argc);
            for (k = 0; k < op->argc; k++) omc__wb_arg(w, op->argv[k], op->argl ? op->argl[k] : strlen(op->argv[k]));
            replies++;
            break;
        }
        default: break;
    }
    return replies;
}

/* Read a bulk reply of a claimed payload into a pool buffer, checking its length against what
   the metadata said. */
static omc_result omc__st_read_payload(omc__st_state* S, omc__snode* N, omc__rc* rc, omc__sop* op, uint64_t len, uint32_t fl,
                                       omc_time_ns deadline, int* io_broken) {
    const char* l;
    size_t n;
    int64_t x;
    omc_result r = omc__rc_line(rc, &l, &n, deadline);
    if (r != OMC_OK) { *io_broken = 1; return r; }
    if (n >= 1 && l[0] == '-') {
        char e[160];
        snprintf(e, sizeof(e), "%.*s", (int)(n - 1), l + 1);
        snprintf(op->err, sizeof(op->err), "%.120s: GETDEL: %.150s", N->name, e);
        return OMC_ERR_REMOTE;
    }
    if (n < 2 || l[0] != '$' || omc__parse_i64(l + 1, n - 1, &x) || x < -1) { *io_broken = 1; return OMC_ERR_PROTOCOL; }
    if (x == -1) {
        snprintf(op->err, sizeof(op->err), "%.120s: the payload's bytes vanished between claim and read", N->name);
        return OMC_ERR_NOT_FOUND;
    }
    if ((uint64_t)x != len || (op->want_size && op->want_size != len)) {
        snprintf(op->err, sizeof(op->err), "%.120s: the data key holds %lld bytes but its metadata says %llu%s: refused (a lying "
                 "or damaged metadata key)", N->name, (long long)x, (unsigned long long)len,
                 op->want_size && op->want_size != len ? " and the put's metadata another size" : "");
        r = omc__rc_read_exact(rc, NULL, (uint64_t)x + 2, deadline);
        if (r != OMC_OK) *io_broken = 1;
        return OMC_ERR_MALFORMED;
    }
    if (!op->out.data && len) {
        r = omc_pool_alloc_buffer_wait(S->pool, len, deadline, &op->out);
        if (r != OMC_OK) {
            snprintf(op->err, sizeof(op->err), "%.120s: no room in the reader's pool for %llu bytes: the claimed payload is dropped",
                     N->name, (unsigned long long)len);
            if (omc__rc_read_exact(rc, NULL, len + 2, deadline) != OMC_OK) *io_broken = 1;
            return r == OMC_ERR_TIMEOUT ? OMC_ERR_POOL_FULL : r;
        }
    }
    r = omc__rc_read_exact(rc, (uint8_t*)op->out.data, len, deadline);
    if (r == OMC_OK) {
        char crlf[2];
        r = omc__rc_read_exact(rc, (uint8_t*)crlf, 2, deadline);
        if (r == OMC_OK && (crlf[0] != '\r' || crlf[1] != '\n')) r = OMC_ERR_PROTOCOL;
    }
    if (r != OMC_OK) { *io_broken = 1; return r; }
    op->out.size = len;
    op->out.flags = (fl & OMC_BUFFER_FRAME) ? OMC_BUFFER_FRAME : 0;
    __atomic_store_n(&S->last_get_len, len, __ATOMIC_RELAXED);
    return OMC_OK;
}

/* Skip one reply of any size whose bytes nobody wants (a bulk string is discarded as it arrives,
   never held): the connection stays usable. */
static omc_result omc__st_drain_bulk(omc__rc* rc, omc_time_ns deadline) {
    const char* l;
    size_t n;
    int64_t x;
    omc_result r = omc__rc_line(rc, &l, &n, deadline);
    if (r != OMC_OK) return r;
    if (n >= 1 && (l[0] == '-' || l[0] == '+' || l[0] == ':')) return OMC_OK;
    if (n < 2 || l[0] != '$' || omc__parse_i64(l + 1, n - 1, &x) || x < -1) return OMC_ERR_PROTOCOL;
    return x < 0 ? OMC_OK : omc__rc_read_exact(rc, NULL, (uint64_t)x + 2, deadline);
}

/* A token as the metadata key holds it: 16 hex digits. */
static omc_result omc__st_parse_tok(const char* s, uint64_t n, uint64_t* tok) {
    uint64_t v = 0, i;
    if (n != 16) return OMC_ERR_PROTOCOL;
    for (i = 0; i < n; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) return OMC_ERR_PROTOCOL;
        v = v << 4 | (uint64_t)d;
    }
    *tok = v;
    return v ? OMC_OK : OMC_ERR_PROTOCOL;
}

/* Read one reply and turn an error reply into a result (redirection in *moved). */
static omc_result omc__st_read_one(omc__st_state* S, omc__snode* N, omc__rc* rc, omc__sop* op, omc__rv* v, omc_time_ns deadline,
                                   int* io_broken, int* moved, char* host, size_t host_n, int* port) {
    omc_result r = omc__rc_reply(&S->hooks, rc, v, deadline);
    *moved = 0;
    if (r != OMC_OK) { *io_broken = 1; return r; }
    if (v->type == OMC__RV_ERROR) {
        r = omc__st_error_reply(S, N, op, v->s, moved, host, host_n, port);
        if (*moved) return OMC_OK;
        snprintf(op->err, sizeof(op->err), "%.120s: %.190s", N->name, v->s);
        return r;
    }
    return OMC_OK;
}

/* Read every reply of one op; returns its result. *moved != 0: redirect to host:port. */
static omc_result omc__st_read_op(omc__st_state* S, omc__snode* N, omc__rc* rc, omc__sop* op, omc_time_ns deadline, int* io_broken,
                                  int* moved, char* host, size_t host_n, int* port) {
    omc__rv v;
    omc_result r = OMC_OK, r2;
    int mv = 0;
    memset(&v, 0, sizeof(v));
    *moved = 0;
    if (op->asking) {               /* +OK of ASKING */
        r = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, &mv, host, host_n, port);
        omc__rv_clear(&S->hooks, &v);
        if (*io_broken) return r;
    }
    switch (op->kind) {
        case OMC__OP_PUT:
            r = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, moved, host, host_n, port);
            omc__rv_clear(&S->hooks, &v);
            if (*io_broken) return r;
            if (op->asking) {
                r2 = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, &mv, host, host_n, port);
                omc__rv_clear(&S->hooks, &v);
                if (*io_broken) return r2;
            }
            r2 = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, &mv, host, host_n, port);
            if (*io_broken) { omc__rv_clear(&S->hooks, &v); return r2; }
            if (*moved) { omc__rv_clear(&S->hooks, &v); return OMC_OK; }
            if (r == OMC_OK && r2 == OMC_OK) {
                if (v.type == OMC__RV_BULK) {       /* a cache entry with these bytes: kept, its token */
                    r = omc__st_parse_tok(v.s, v.len, &op->tok);
                    op->kept = r == OMC_OK;
                } else if (v.type != OMC__RV_INT) r = OMC_ERR_PROTOCOL;
                else if (v.i == 0) {
                    r = OMC_ERR_EXISTS;
                    snprintf(op->err, sizeof(op->err), "%.120s: an earlier put of this key is still waiting for its readers: get it, "
                             "clean it up or use a new key", N->name);
                } else if (v.i == -2) {
                    r = OMC_ERR_EXISTS;
                    snprintf(op->err, sizeof(op->err), "%.120s: the key holds a cache entry with other bytes (reads never consume "
                             "it; it stays until its TTL): clean it up to store new bytes under this key", N->name);
                } else if (v.i < 0) {
                    r = OMC_ERR_POOL_FULL;
                    snprintf(op->err, sizeof(op->err), "%.120s: the data key was not stored (the server is full?)", N->name);
                }
            } else if (r == OMC_OK) r = r2;
            if (r == OMC_ERR_POOL_FULL && !strstr(op->err, "full"))
                snprintf(op->err, sizeof(op->err), "%.120s: the server is full (maxmemory reached, policy noeviction): %.100s", N->name,
                         v.s ? v.s : "OOM");
            omc__rv_clear(&S->hooks, &v);
            return r;
        case OMC__OP_GET: {
            uint64_t len = 0;
            uint32_t fl = 0;
            r = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, moved, host, host_n, port);
            if (*io_broken) { omc__rv_clear(&S->hooks, &v); return r; }
            if (r == OMC_OK && !*moved) {
                if (v.type != OMC__RV_ARRAY || v.n < 1 || v.e[0].type != OMC__RV_INT) r = OMC_ERR_PROTOCOL;
                else if (v.e[0].i == 0) r = OMC_ERR_NOT_FOUND;
                else if (v.e[0].i == -1) {
                    r = OMC_ERR_STALE;
                    snprintf(op->err, sizeof(op->err), "%.120s: another writer replaced this key since the put the metadata names", N->name);
                } else if (v.e[0].i == -3) {
                    r = OMC_ERR_MALFORMED;
                    snprintf(op->err, sizeof(op->err), "%.120s: the metadata key's len or left is not a number: refused", N->name);
                } else if (v.e[0].i == -2 && v.n >= 2 && v.e[1].type == OMC__RV_INT) {
                    r = OMC_ERR_TOO_LARGE;
                    op->out.size = (uint64_t)v.e[1].i;
                    if (!op->max_size || op->out.size <= op->max_size)      /* the pool, not a get_copy destination */
                        snprintf(op->err, sizeof(op->err), "%.120s: the payload (%llu bytes) is larger than the reader's pool "
                                 "(%llu bytes): not read, the entry stays; raise pool_size in omc_store_desc", N->name,
                                 (unsigned long long)op->out.size, (unsigned long long)omc_pool_size(S->pool));
                } else if (v.e[0].i == 1 && v.n >= 3 && v.e[1].type == OMC__RV_INT && v.e[1].i >= 0 && v.e[2].type == OMC__RV_INT) {
                    len = (uint64_t)v.e[1].i;
                    fl = (uint32_t)v.e[2].i;
                } else r = OMC_ERR_PROTOCOL;
            }
            omc__rv_clear(&S->hooks, &v);
            if (op->asking) {
                r2 = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, &mv, host, host_n, port);
                omc__rv_clear(&S->hooks, &v);
                if (*io_broken) return r2;
            }
            if (r == OMC_OK && !*moved) {
                if (len > omc_pool_size(S->pool)) {
                    snprintf(op->err, sizeof(op->err), "%.120s: the payload (%llu bytes) is larger than the reader's pool (%llu bytes): "
                             "raise pool_size in omc_store_desc", N->name, (unsigned long long)len,
                             (unsigned long long)omc_pool_size(S->pool));
                    if (omc__st_drain_bulk(rc, deadline) != OMC_OK) *io_broken = 1;    /* the stream stays in step */
                    op->out.size = len;
                    return OMC_ERR_TOO_LARGE;
                }
                return omc__st_read_payload(S, N, rc, op, len, fl, deadline, io_broken);
            }
            r2 = omc__rc_reply(&S->hooks, rc, &v, deadline);      /* GETDEL of nothing: nil */
            if (r2 != OMC_OK) { *io_broken = 1; return r2; }
            omc__rv_clear(&S->hooks, &v);
            return r;
        }
        case OMC__OP_EXISTS:
        case OMC__OP_DROP:
            r = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, moved, host, host_n, port);
            if (r == OMC_OK && !*moved) r = v.type != OMC__RV_INT ? OMC_ERR_PROTOCOL : v.i > 0 ? OMC_OK : OMC_ERR_NOT_FOUND;
            omc__rv_clear(&S->hooks, &v);
            return r;
        case OMC__OP_OWNED: {
            char hx[17];
            r = omc__st_read_one(S, N, rc, op, &v, deadline, io_broken, moved, host, host_n, port);
            omc__st_hex(op->tok, hx);
            if (r == OMC_OK && !*moved) r = v.type == OMC__RV_BULK && v.len == 16 && !memcmp(v.s, hx, 16) ? OMC_OK : OMC_ERR_NOT_FOUND;
            omc__rv_clear(&S->hooks, &v);
            return r;
        }
        case OMC__OP_RAW:
            r = omc__st_read_one(S, N, rc, op, &op->reply, deadline, io_broken, moved, host, host_n, port);
            return r;
        default:
            return OMC_ERR_INTERNAL;
    }
}

/* Open a worker's connection: connect, AUTH, SELECT, name it. */
static omc_result omc__st_open(omc__st_state* S, omc__snode* N, omc__rc* rc, omc_time_ns deadline, char* why, size_t why_n) {
    omc__wb w;
    omc__rv v;
    omc_result r;
    int nrep = 0, k;
    struct iovec iov;
    char name[64];
    omc_time_ns cdl = omc_deadline_after_ms(S->connect_timeout_ms);
    why[0] = '\0';
    if (deadline < cdl) cdl = deadline;
    r = omc__rc_connect(&S->hooks, rc, N->host, N->port, N->path, cdl, why, why_n);
    if (r != OMC_OK) return r;
    omc__add(&S->connects, 1u);
    omc__wb_init(&w, &S->hooks);
    if (S->password[0]) {
        omc__wb_cmd(&w, S->user[0] ? 3 : 2);
        omc__wb_str(&w, "AUTH");
        if (S->user[0]) omc__wb_str(&w, S->user);
        omc__wb_str(&w, S->password);
        nrep++;
    }
    if (S->db && !S->cluster) { omc__wb_cmd(&w, 2); omc__wb_str(&w, "SELECT"); omc__wb_int(&w, S->db); nrep++; }
    snprintf(name, sizeof(name), "omniconn-%ld", (long)getpid());
    omc__wb_cmd(&w, 3); omc__wb_str(&w, "CLIENT"); omc__wb_str(&w, "SETNAME"); omc__wb_str(&w, name); nrep++;
    omc__wb_cmd(&w, 3); omc__wb_str(&w, "CONFIG"); omc__wb_str(&w, "GET"); omc__wb_str(&w, "proto-max-bulk-len"); nrep++;
    if (w.oom) { omc__wb_uninit(&w); omc__rc_close(rc); return OMC_ERR_NO_MEMORY; }
    iov.iov_base = w.p;
    iov.iov_len = w.len;
    r = omc__rc_writev(rc, &iov, 1, cdl);
    omc__wb_uninit(&w);
    for (k = 0; r == OMC_OK && k < nrep; k++) {
        r = omc__rc_reply(&S->hooks, rc, &v, cdl);
        if (r != OMC_OK) break;
        if (v.type == OMC__RV_ERROR) {
            if (k == 0 && S->password[0]) { snprintf(why, why_n, "AUTH refused: %s", v.s); r = OMC_ERR_AUTH; }
            else if (!strncmp(v.s, "NOAUTH", 6)) { snprintf(why, why_n, "the server wants a password: %s", v.s); r = OMC_ERR_AUTH; }
            else if (k == nrep - 1) { /* CONFIG may be refused by an ACL: the limit stays unknown */ }
            else { snprintf(why, why_n, "%s", v.s); r = OMC_ERR_REMOTE; }
        } else if (k == nrep - 1 && v.type == OMC__RV_ARRAY && v.n == 2 && v.e[1].type == OMC__RV_BULK) {
            int64_t mb = 0;
            if (!omc__parse_i64(v.e[1].s, v.e[1].len, &mb)) __atomic_store_n(&N->max_bulk, mb, __ATOMIC_RELAXED);
        }
        omc__rv_clear(&S->hooks, &v);
    }
    if (r != OMC_OK) {
        if (!why[0]) snprintf(why, why_n, "handshake: %s", omc_result_str(r));
        omc__rc_close(rc);
    }
    return r;
}

static void omc__st_refresh(omc__st_state* S);

/* The reply bytes an op asks for: a get's payload (from its metadata, else the size of the last
   payload this connector read; nothing read yet: more than the window, so the first get of
   unknown size goes out alone), nothing worth counting for the others. */
static uint64_t omc__st_reply_bytes(omc__st_state* S, const omc__sop* op) {
    uint64_t guess;
    if (!op || op->kind != OMC__OP_GET) return 0;
    if (op->want_size) return op->want_size;
    guess = __atomic_load_n(&S->last_get_len, __ATOMIC_RELAXED);
    return guess ? guess : OMC__ST_REPLY_WINDOW + 1;
}

/* The encoded commands of a request and where each op's bytes start (starts[nops] = the end). */
typedef struct omc__st_wire {
    omc__wb w;
    omc__st_mark* marks;
    size_t* starts;
    struct iovec* iov;
    uint32_t sent;              /* ops [0, sent) are written */
} omc__st_wire;

/* Before op k's replies are read: write op k if it is not out yet, and the ops after it while the
   payload bytes they ask for fit the reply window. Small values stay pipelined (the server
   produces the next replies while this one is read); values of the window's size or more go one
   at a time, as single gets do: measured, even one large reply ahead halved a batch of 4 MiB
   values (bench/bench_store.c). Puts and the other ops ask for no reply bytes: a batch of them
   goes out in one write. */
static omc_result omc__st_send_ahead(omc__st_state* S, omc__rc* rc, omc__sreq* q, omc__st_wire* x, uint32_t k, omc_time_ns deadline) {
    uint32_t j, a = x->sent;
    uint64_t ahead = 0;
    int niov = 0;
    size_t from;
    for (j = k + 1; j < x->sent; j++) ahead += omc__st_reply_bytes(S, q->ops[j]);
    while (x->sent < q->nops) {
        uint64_t b = x->sent > k ? omc__st_reply_bytes(S, q->ops[x->sent]) : 0;
        if (x->sent > k && ahead + b > OMC__ST_REPLY_WINDOW) break;
        ahead += b;
        x->sent++;
    }
    if (a == x->sent) return OMC_OK;
    from = x->starts[a];
    for (j = a; j < x->sent; j++) {     /* header bytes, then each payload straight from its memory */
        if (!q->ops[j] || !x->marks[j].data) continue;
        x->iov[niov].iov_base = x->w.p + from; x->iov[niov].iov_len = x->marks[j].at - from; niov++;
        x->iov[niov].iov_base = (void*)x->marks[j].data; x->iov[niov].iov_len = (size_t)x->marks[j].size; niov++;
        from = x->marks[j].at;
    }
    x->iov[niov].iov_base = x->w.p + from; x->iov[niov].iov_len = x->starts[x->sent] - from; niov++;
    return omc__rc_writev(rc, x->iov, niov, deadline);
}

static void omc__st_wire_free(omc__st_state* S, omc__st_wire* x) {
    omc__wb_uninit(&x->w);
    omc__free(&S->hooks, x->marks);
    omc__free(&S->hooks, x->starts);
    omc__free(&S->hooks, x->iov);
}

/* Run one request on a worker's connection (or the caller's, see omc__st_try_direct). The ops
   answered go to *d, to be woken once the connection's slot is given back; a redirected op goes
   to its new server's queue instead. */
static void omc__st_run(omc__st_state* S, omc__snode* N, omc__rc* rc, omc__sreq* q, omc__st_done* d) {
    omc__st_wire x;
    uint32_t k;
    int io_broken = 0;
    omc_result r = OMC_OK;
    char why[200];
    memset(&x, 0, sizeof(x));
    omc__wb_init(&x.w, &S->hooks);
    x.marks = (omc__st_mark*)omc__calloc(&S->hooks, (size_t)q->nops * sizeof(omc__st_mark));
    x.starts = (size_t*)omc__calloc(&S->hooks, ((size_t)q->nops + 1) * sizeof(size_t));
    x.iov = (struct iovec*)omc__calloc(&S->hooks, ((size_t)q->nops * 2 + 1) * sizeof(struct iovec));
    if (!x.marks || !x.starts || !x.iov) {
        for (k = 0; k < q->nops; k++) omc__st_settle(d, q->ops[k], OMC_ERR_NO_MEMORY);
        omc__st_wire_free(S, &x);
        return;
    }
    /* values over the server's limit never go out (the server would drop the connection) */
    for (k = 0; k < q->nops; k++) {
        omc__sop* op = q->ops[k];
        int64_t mb = __atomic_load_n(&N->max_bulk, __ATOMIC_RELAXED);
        if (op->kind == OMC__OP_PUT && mb > 0 && op->size > (uint64_t)mb) {
            omc__st_fail(d, N, op, OMC_ERR_TOO_LARGE, "the value (%llu bytes) is larger than the server's proto-max-bulk-len "
                         "(%lld bytes): raise it (CONFIG SET proto-max-bulk-len) or split the payload",
                         (unsigned long long)op->size, (long long)mb);
            q->ops[k] = NULL;
        }
    }
    if (rc->fd >= 0) {          /* an idle connection the server closed (restart, failover): open a new one first */
        struct pollfd pf;
        pf.fd = rc->fd; pf.events = POLLIN; pf.revents = 0;
        if (poll(&pf, 1, 0) != 0) omc__rc_close(rc);
    }
    if (rc->fd < 0) {
        r = omc__st_open(S, N, rc, q->deadline, why, sizeof(why));
        if (r != OMC_OK) {
            for (k = 0; k < q->nops; k++) {
                if (!q->ops[k]) continue;
                q->ops[k]->retry = S->cluster && r == OMC_ERR_CONNECTION;
                omc__st_fail(d, N, q->ops[k], r, "%s", why);
            }
            if (S->cluster && r == OMC_ERR_CONNECTION) d->refresh = 1;
            omc__st_wire_free(S, &x);
            return;
        }
    }
    for (k = 0; k < q->nops; k++) {
        x.starts[k] = x.w.len;
        if (!q->ops[k]) continue;
        q->ops[k]->seq = omc__add(&S->dispatched, 1u);
        omc__st_encode(S, q->ops[k], &x.w, &x.marks[k], q->ops[k]->seq ^ omc__random_u64());
    }
    x.starts[q->nops] = x.w.len;
    if (x.w.oom) r = OMC_ERR_NO_MEMORY;
    /* replies in order, the commands sent a window ahead of them; after a broken stream every op
       left is failed */
    for (k = 0; k < q->nops; k++) {
        omc__sop* op = q->ops[k];
        int moved = 0, port = 0;
        char host[256];
        if (!op) continue;
        if (r == OMC_OK && !io_broken) {
            r = omc__st_send_ahead(S, rc, q, &x, k, q->deadline);
            if (r != OMC_OK) io_broken = 1;
        }
        if (io_broken || r != OMC_OK) {
            omc__st_fail(d, N, op, r == OMC_ERR_TIMEOUT ? OMC_ERR_TIMEOUT : r == OMC_ERR_NO_MEMORY ? r : OMC_ERR_CONNECTION,
                         "%s (the request may or may not have been carried out)",
                         r == OMC_ERR_TIMEOUT ? "deadline passed while waiting for the reply" : "connection lost");
            continue;
        }
        op->retry = 0;
        r = omc__st_read_op(S, N, rc, op, q->deadline, &io_broken, &moved, host, sizeof(host), &port);
        if (io_broken) {
            omc_result rb = r;
            r = rb == OMC_ERR_TIMEOUT ? OMC_ERR_TIMEOUT : rb == OMC_ERR_PROTOCOL ? OMC_ERR_PROTOCOL : OMC_ERR_CONNECTION;
            if (op->out.data) omc_buffer_release(&op->out);
            omc__st_fail(d, N, op, r, "%s", rb == OMC_ERR_PROTOCOL ? "a reply the client cannot parse: connection dropped"
                                              : rb == OMC_ERR_TIMEOUT ? "deadline passed while reading the reply"
                                              : "connection lost while reading the reply");
            continue;
        }
        if (moved) {                /* re-queue this op at its new server */
            omc__snode* T;
            omc__sreq* nq;
            pthread_mutex_lock(&S->route_mu);
            T = omc__st_node_find(S, host, port);
            if (T && moved == 1) S->slots[op->slot] = (uint8_t)(omc__st_node_index(S, T) + 1);
            pthread_mutex_unlock(&S->route_mu);
            omc__add(moved == 1 ? &S->moved : &S->ask, 1u);
            op->asking = moved == 2;
            nq = T ? omc__st_req_new(S, 1, q->prio, q->deadline) : NULL;
            if (!nq) { omc__st_fail(d, N, op, OMC_ERR_CONNECTION, "redirected to %s:%d, which cannot be reached", host, port); continue; }
            nq->ops[nq->nops++] = op;
            omc__st_enqueue(T, nq);
            r = OMC_OK;
            continue;
        }
        op->asking = 0;
        if (r == OMC_OK || r == OMC_ERR_NOT_FOUND) { omc__st_settle(d, op, r); r = OMC_OK; continue; }
        if (op->out.data && r != OMC_OK) omc_buffer_release(&op->out);
        omc__st_settle(d, op, r);
        r = OMC_OK;
    }
    if (io_broken) omc__rc_close(rc);
    omc__st_wire_free(S, &x);
}

/* A request slot on a node (mu held; inflight < max_inflight): one of its connections. The slots
   are the in-flight bound: a worker or a caller runs a request only while it holds one. */
static uint32_t omc__st_slot_take(omc__st_state* S, omc__snode* N) {
    uint32_t cur = ++N->inflight, m;
    if (cur > N->inflight_max) N->inflight_max = cur;
    m = __atomic_load_n(&S->inflight_max, __ATOMIC_RELAXED);
    while (cur > m && !__atomic_compare_exchange_n(&S->inflight_max, &m, cur, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return N->free_conn[--N->nfree];
}
static void omc__st_slot_give(omc__snode* N, uint32_t ci) {
    pthread_mutex_lock(&N->mu);
    N->free_conn[N->nfree++] = ci;
    N->inflight--;
    pthread_cond_signal(&N->cv);        /* a worker may wait for a slot */
    pthread_mutex_unlock(&N->mu);
}

/* After a run: the slot back, then the callers woken, then the slot map read if the run asked
   (the callers do not wait for it; their retries find the new map). */
static void omc__st_run_end(omc__st_state* S, omc__snode* N, uint32_t ci, omc__st_done* d) {
    omc__st_slot_give(N, ci);
    omc__st_wake_all(d);
    if (d->refresh) omc__st_refresh(S);
    d->refresh = 0;
}

static void* omc__st_worker(void* arg) {
    omc__snode* N = (omc__snode*)arg;
    omc__st_state* S = N->S;
    omc__st_done done;
    done.n = 0;
    done.refresh = 0;
    for (;;) {
        omc__sreq* q = NULL;
        int p;
        uint32_t k, ci;
        pthread_mutex_lock(&N->mu);
        while (!N->stop) {
            for (p = 0; p < OMC_STORE_PRIORITIES && !q && N->inflight < S->max_inflight; p++) {
                if (!N->head[p]) continue;
                q = N->head[p];
                N->head[p] = q->next;
                if (!N->head[p]) N->tail[p] = NULL;
                N->queued--;
            }
            if (q) break;
            pthread_cond_wait(&N->cv, &N->mu);
        }
        if (!q) { pthread_mutex_unlock(&N->mu); break; }
        if (q->deadline != OMC_WAIT_FOREVER && omc_now_ns() >= q->deadline) {
            /* expired while queued: answered here, never sent */
            pthread_mutex_unlock(&N->mu);
            omc__add(&S->expired_in_queue, 1u);
            for (k = 0; k < q->nops; k++) {
                snprintf(q->ops[k]->err, sizeof(q->ops[k]->err), "%.120s: deadline passed while queued (never sent)", N->name);
                omc__st_complete(q->ops[k], OMC_ERR_TIMEOUT);
            }
            omc__st_req_free(S, q);
            continue;
        }
        ci = omc__st_slot_take(S, N);
        pthread_mutex_unlock(&N->mu);
        omc__add(&S->by_prio[q->prio], (uint64_t)q->nops);
        omc__st_run(S, N, &N->conns[ci], q, &done);
        omc__st_run_end(S, N, ci, &done);
        omc__st_req_free(S, q);
    }
    return NULL;
}

/* Ops for one server run on the caller's own thread, when that server has nothing queued and a
   slot free: no hand-off to a worker and back (two thread wake-ups saved, and on a loaded host
   the wait for a worker to be scheduled). A batch qualifies when every op routes to the same
   server and it fits one request (OMC__ST_BATCH_OPS ops, OMNICONN_STORE_BATCH_BYTES bytes).
   Returns 0 if it did not run them. */
static int omc__st_try_direct(omc__st_state* S, omc__sop** ops, uint32_t n, int prio, omc_time_ns deadline) {
    omc__snode* N = n ? omc__st_route(S, ops[0]) : NULL;
    omc__sreq q;
    omc__sop* list[OMC__ST_BATCH_OPS];      /* the request's own list: running it may clear entries */
    omc__st_done done;
    uint32_t ci, i;
    uint64_t bytes = 0;
    if (!N || n > OMC__ST_BATCH_OPS || deadline == OMC_NO_WAIT || (deadline != OMC_WAIT_FOREVER && omc_now_ns() >= deadline))
        return 0;
    for (i = 0; i < n; i++) {
        bytes += ops[i]->kind == OMC__OP_PUT ? ops[i]->size : ops[i]->kind == OMC__OP_GET ? ops[i]->want_size : 0;
        if (i && omc__st_route(S, ops[i]) != N) return 0;
    }
    if (n > 1 && bytes > OMNICONN_STORE_BATCH_BYTES) return 0;
    pthread_mutex_lock(&N->mu);
    if (N->stop || N->queued || N->inflight >= S->max_inflight) { pthread_mutex_unlock(&N->mu); return 0; }
    ci = omc__st_slot_take(S, N);
    pthread_mutex_unlock(&N->mu);
    omc__add(&S->by_prio[prio], (uint64_t)n);
    memset(&q, 0, sizeof(q));
    q.prio = prio;
    q.deadline = deadline;
    memcpy(list, ops, (size_t)n * sizeof(omc__sop*));
    q.ops = list;
    q.nops = n;
    done.n = 0;
    done.refresh = 0;
    omc__st_run(S, N, &N->conns[ci], &q, &done);
    omc__st_run_end(S, N, ci, &done);
    return 1;
}

/* Run ops to completion: dispatch, wait, and route again the ones that asked for it (a
   connection refused in a cluster, CLUSTERDOWN, TRYAGAIN) until the deadline. */
static void omc__st_exec(omc__st_state* S, omc__sop** ops, uint32_t n, int prio, omc_time_ns deadline) {
    omc__sgroup g;
    uint32_t i, again;
    omc__sop** todo = (omc__sop**)omc__malloc(&S->hooks, sizeof(omc__sop*) * (n ? n : 1));
    int64_t nap_us = 2000;
    if (!todo || omc__st_group_init(&g, 0) != OMC_OK) {
        for (i = 0; i < n; i++) ops[i]->result = OMC_ERR_NO_MEMORY;
        omc__free(&S->hooks, todo);
        return;
    }
    for (i = 0; i < n; i++) todo[i] = ops[i];
    again = n;
    while (again) {
        uint32_t m = again;
        for (i = 0; i < m; i++) { todo[i]->group = &g; todo[i]->retry = 0; todo[i]->result = OMC_OK; }
        g.pending = m;
        if (!omc__st_try_direct(S, todo, m, prio, deadline)) omc__st_dispatch(S, todo, m, prio, deadline);
        omc__st_group_wait(&g, OMC_WAIT_FOREVER);     /* every request is bounded by its own deadline */
        again = 0;
        for (i = 0; i < m; i++)
            if (todo[i]->retry && (deadline == OMC_WAIT_FOREVER || omc_now_ns() + nap_us * 1000 < deadline)) todo[again++] = todo[i];
        if (again) {
            struct timespec ts;
            omc__add(&S->retries, (uint64_t)again);
            ts.tv_sec = 0;
            ts.tv_nsec = nap_us * 1000;
            nanosleep(&ts, NULL);
            if (nap_us < 100000) nap_us *= 2;
            if (S->cluster) omc__st_refresh(S);
        }
    }
    omc__st_group_uninit(&g);
    omc__free(&S->hooks, todo);
}

/* One raw command to one node, reply into *out (caller clears it). */
static omc_result omc__st_raw_on(omc__snode* N, const char* const* argv, int argc, omc_time_ns deadline, omc__rv* out,
                                 char* err, size_t err_n) {
    omc__st_state* S = N->S;
    omc__sop* op = (omc__sop*)omc__calloc(&S->hooks, sizeof(omc__sop));
    omc__sgroup g;
    omc__sreq* q;
    omc_result r;
    memset(out, 0, sizeof(*out));
    if (!op) return OMC_ERR_NO_MEMORY;
    if (omc__st_group_init(&g, 1) != OMC_OK) { omc__free(&S->hooks, op); return OMC_ERR_SYSTEM; }
    op->kind = OMC__OP_RAW;
    op->argv = argv;
    op->argc = argc;
    op->group = &g;
    q = omc__st_req_new(S, 1, 0, deadline);
    if (!q) { omc__st_group_uninit(&g); omc__free(&S->hooks, op); return OMC_ERR_NO_MEMORY; }
    q->ops[q->nops++] = op;
    omc__st_enqueue(N, q);
    omc__st_group_wait(&g, OMC_WAIT_FOREVER);
    omc__st_group_uninit(&g);
    r = op->result;
    *out = op->reply;
    if (r == OMC_OK && out->type == OMC__RV_ERROR) r = OMC_ERR_REMOTE;
    if (err && err_n) snprintf(err, err_n, "%.280s", op->err[0] ? op->err : out->type == OMC__RV_ERROR && out->s ? out->s : "");
    omc__free(&S->hooks, op);
    return r;
}

/* Read the slot map (CLUSTER SLOTS) from the first node that answers; at most every 50 ms.
   A fresh connection of its own, so a worker may call it. */
static void omc__st_refresh(omc__st_state* S) {
    char hosts[OMC__ST_MAX_NODES][256];
    int ports[OMC__ST_MAX_NODES];
    uint32_t n = 0, i;
    omc_time_ns now = omc_now_ns();
    pthread_mutex_lock(&S->route_mu);
    if (now - S->last_refresh < 50000000LL) { pthread_mutex_unlock(&S->route_mu); return; }
    S->last_refresh = now;
    for (i = 0; i < S->nnodes; i++) { snprintf(hosts[n], 256, "%s", S->nodes[i]->host); ports[n++] = S->nodes[i]->port; }
    pthread_mutex_unlock(&S->route_mu);
    for (i = 0; i < n; i++) {
        omc__rc rc;
        omc__rv v;
        omc__wb w;
        struct iovec iov;
        char why[200];
        omc__snode tmp;
        uint32_t k;
        omc_time_ns dl = omc_deadline_after_ms(omc__min(S->connect_timeout_ms, 1000));
        memset(&rc, 0, sizeof(rc));
        rc.fd = -1;
        memset(&tmp, 0, sizeof(tmp));
        snprintf(tmp.host, sizeof(tmp.host), "%.255s", hosts[i]);
        tmp.port = ports[i];
        snprintf(tmp.name, sizeof(tmp.name), "%.255s:%d", hosts[i], ports[i]);
        if (omc__st_open(S, &tmp, &rc, dl, why, sizeof(why)) != OMC_OK) { omc__free(&S->hooks, rc.buf); continue; }
        omc__wb_init(&w, &S->hooks);
        omc__wb_cmd(&w, 2); omc__wb_str(&w, "CLUSTER"); omc__wb_str(&w, "SLOTS");
        iov.iov_base = w.p; iov.iov_len = w.len;
        if (w.oom || omc__rc_writev(&rc, &iov, 1, dl) != OMC_OK || omc__rc_reply(&S->hooks, &rc, &v, dl) != OMC_OK) {
            omc__wb_uninit(&w); omc__rc_close(&rc); omc__free(&S->hooks, rc.buf); continue;
        }
        omc__wb_uninit(&w);
        omc__rc_close(&rc);
        omc__free(&S->hooks, rc.buf);
        if (v.type != OMC__RV_ARRAY || v.n == 0) { omc__rv_clear(&S->hooks, &v); continue; }
        pthread_mutex_lock(&S->route_mu);
        for (k = 0; k < v.n; k++) {
            omc__rv* e = &v.e[k];
            omc__snode* T;
            int64_t a, b, s;
            if (e->type != OMC__RV_ARRAY || e->n < 3 || e->e[0].type != OMC__RV_INT || e->e[1].type != OMC__RV_INT ||
                e->e[2].type != OMC__RV_ARRAY || e->e[2].n < 2 || e->e[2].e[0].type != OMC__RV_BULK ||
                e->e[2].e[1].type != OMC__RV_INT) continue;
            a = e->e[0].i; b = e->e[1].i;
            if (a < 0 || b >= OMC__ST_SLOTS || a > b) continue;
            T = omc__st_node_find(S, e->e[2].e[0].len ? e->e[2].e[0].s : hosts[i], (int)e->e[2].e[1].i);
            if (!T) continue;
            for (s = a; s <= b; s++) S->slots[s] = (uint8_t)(omc__st_node_index(S, T) + 1);
        }
        pthread_mutex_unlock(&S->route_mu);
        omc__rv_clear(&S->hooks, &v);
        return;
    }
}

/* ============================================================================================== */
/* [SECTION] Store: the contract                                                                 */
/* ============================================================================================== */

static omc__st_state* omc__st_of(omc_conn* c) { return (omc__st_state*)c->impl; }

/* The state's own memory (its mutexes are the caller's business). */
static void omc__st_state_free(omc__st_state* S) {
    omc_hooks h = S->hooks;
    omc__free(&h, S->slots);
    omc__free(&h, S);
}

static void omc__st_op_key(omc__sop* op, const char* qkey, uint32_t qlen) {
    memcpy(op->qkey, qkey, qlen);
    op->qkey[qlen] = '\0';
    op->qlen = qlen;
    op->h = omc__fnv64(qkey, qlen);
    {
        char hx[17];
        omc__st_hex(op->h, hx);
        op->slot = (uint16_t)(omc__crc16(hx, 16) & 0x3FFF);
    }
}

static omc_time_ns omc__st_req_deadline(omc__st_state* S) { return omc_deadline_after_ms(S->request_timeout_ms); }

/* Describe a payload for the metadata key: format, and a frame's first tensor (dtype, shape). */
static void omc__st_describe(omc__sop* op, const void* data, uint64_t size, uint32_t flags) {
    snprintf(op->fmt, sizeof(op->fmt), "%s", (flags & OMC_PAYLOAD_FRAME) ? "frame" : "raw");
    op->dtype[0] = op->shape[0] = '\0';
    if (flags & OMC_PAYLOAD_FRAME) {
        omc_frame f;
        omc_segment s;
        if (omc_frame_decode(data, size, 0, &f) == OMC_OK && f.count >= 1 && omc_frame_segment(&f, 0, &s) == OMC_OK &&
            s.kind == OMC_SEGMENT_TENSOR) {
            uint32_t d;
            size_t n = 0;
            snprintf(op->dtype, sizeof(op->dtype), "%s", omc_dtype_name(s.dtype));
            for (d = 0; d < s.ndim && n + 24 < sizeof(op->shape); d++)
                n += (size_t)snprintf(op->shape + n, sizeof(op->shape) - n, d ? ",%lld" : "%lld", (long long)s.shape[d]);
        }
    }
}

/* A put op for payload p (op already keyed by omc__st_op_key). */
static void omc__st_prepare_put(omc__st_state* S, omc__sop* op, const omc_payload* p) {
    const void* data = p->buffer ? p->buffer->data : p->data;
    uint64_t size = p->buffer ? (p->size ? p->size : p->buffer->size) : p->size;
    int64_t ttl = p->ttl_ms ? p->ttl_ms : S->default_ttl_ms;
    op->kind = OMC__OP_PUT;
    op->data = data;
    op->size = size;
    do op->tok = omc__random_u64(); while (op->tok == 0);
    op->readers = p->readers ? p->readers : 1;
    op->flags = (p->flags & OMC_PAYLOAD_FRAME) ? OMC_BUFFER_FRAME : 0;
    op->ttl_ms = ttl > 0 ? ttl : -1;
    omc__st_describe(op, data, size, p->flags);
}

/* After a put: remember it (health, wait_consumed, ttl_reclaims) and build the metadata. */
static omc_result omc__st_after_put(omc__st_state* S, omc__sop* op, const omc_payload* p, omc_meta* meta_out) {
    omc__sown* o = (omc__sown*)omc__malloc(&S->hooks, sizeof(omc__sown));
    omc_result r = OMC_OK;
    if (op->kept) {     /* a routine event for a cache (LMCache puts a chunk again), not a problem */
        char printable[OMC_KEY_MAX];
        uint32_t i;
        for (i = 0; i < op->qlen && i < OMC_KEY_MAX - 1; i++) printable[i] = op->qkey[i] == '\x1f' ? '/' : op->qkey[i];
        printable[i] = '\0';
        OMC__LOG(&S->conn->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_OK, "store put %s: the same bytes are already stored there as a "
                 "cache entry: kept, its expiry renewed", printable);
    }
    if (o) {
        void* old;
        o->tok = op->tok;
        o->h = op->h;
        o->expires = op->ttl_ms > 0 ? omc_now_ns() + op->ttl_ms * 1000000LL : 0;
        pthread_mutex_lock(&S->own_mu);
        old = omc__smap_del(&S->own, &S->hooks, op->qkey, op->qlen);
        omc__free(&S->hooks, old);
        if (omc__smap_put(&S->own, &S->hooks, op->qkey, op->qlen, o) != OMC_OK) omc__free(&S->hooks, o);
        pthread_mutex_unlock(&S->own_mu);
    }
    if (p->buffer) { omc_buffer_release(p->buffer); memset(p->buffer, 0, sizeof(*p->buffer)); }
    if (meta_out && meta_out->size != OMC__META_UNWANTED) {
        uint8_t* body;
        r = omc__meta_begin(OMC_TRANSPORT_TCP, op->flags & OMC_BUFFER_FRAME ? OMC_META_FLAG_FRAME : 0, op->size, op->qkey, op->qlen,
                            OMC_STORE_BODY_SIZE, meta_out, &body);
        if (r != OMC_OK) return r;
        omc__put_u32(body, OMC_STORE_BODY_MAGIC);
        omc__put_u32(body + 4, 1);
        omc__put_u64(body + 8, op->tok);
        omc__put_u64(body + 16, op->size);
        omc__put_u64(body + 24, op->h);
        omc__meta_seal(meta_out);
    } else if (meta_out) { meta_out->data = NULL; meta_out->size = 0; }
    return r;
}

static void omc__st_log_op(omc__st_state* S, const omc__sop* op, omc_result r) {
    if (op->err[0] && r != OMC_ERR_NOT_FOUND && r != OMC_OK)
        OMC__LOG(&S->conn->hooks, r == OMC_ERR_TIMEOUT ? OMC_LOG_INFO : OMC_LOG_WARN, OMC_LOGITEM_CONN_ERROR, "store %s", op->err);
}

static omc_result omc__st_put(omc_conn* c, const char* qkey, uint32_t qlen, const omc_payload* p, omc_meta* meta_out) {
    omc__st_state* S = omc__st_of(c);
    omc__sop* op = (omc__sop*)omc__calloc(&S->hooks, sizeof(omc__sop));
    omc_result r;
    if (!op) return OMC_ERR_NO_MEMORY;
    omc__st_op_key(op, qkey, qlen);
    omc__st_prepare_put(S, op, p);
    omc__st_exec(S, &op, 1, OMC_STORE_PUT - 1, omc__st_req_deadline(S));
    r = op->result;
    omc__st_log_op(S, op, r);
    if (r == OMC_OK) r = omc__st_after_put(S, op, p, meta_out);
    omc__free(&S->hooks, op);
    return r;
}

/* Parse a store metadata body: token and length. */
static omc_result omc__st_body(const omc_meta_info* m, uint64_t* tok, uint64_t* size) {
    if (m->body_len != OMC_STORE_BODY_SIZE || omc__get_u32(m->body) != OMC_STORE_BODY_MAGIC || omc__get_u32(m->body + 4) != 1)
        return OMC_ERR_TYPE;
    *tok = omc__get_u64(m->body + 8);
    *size = omc__get_u64(m->body + 16);
    if (*size != m->data_size) return OMC_ERR_MALFORMED;
    return OMC_OK;
}

/* A view from get: its range goes back to the pool, and the connector may go with the last one. */
static omc_result omc__st_release(omc_buffer* b) {
    omc_conn* c = (omc_conn*)b->owner;
    omc_result r;
    if (!c || !b->pool) return OMC_ERR_INVALID_ARG;
    r = omc_alloc_free(omc_pool_allocator(b->pool), b->range);
    if (r != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_ALLOC_BAD_FREE, "release of a store view that is no longer held: %s",
                 omc_result_str(r));
        return r;
    }
    omc__add(&c->releases, 1u);
    omc__conn_unref(c);     /* may destroy the connector: nothing after this line */
    return OMC_OK;
}

static omc_result omc__st_get_prio(omc_conn* c, const char* qkey, uint32_t qlen, const omc_meta_info* meta, omc_time_ns deadline,
                                   uint64_t max_size, omc_buffer* out, int prio) {
    omc__st_state* S = omc__st_of(c);
    omc__sop* op = (omc__sop*)omc__calloc(&S->hooks, sizeof(omc__sop));
    omc_result r;
    int64_t nap_us = 1000;
    if (!op) return OMC_ERR_NO_MEMORY;
    op->kind = OMC__OP_GET;
    omc__st_op_key(op, qkey, qlen);
    op->max_size = max_size;
    if (meta) {
        r = omc__st_body(meta, &op->want_tok, &op->want_size);
        if (r != OMC_OK) { omc__free(&S->hooks, op); return r; }
        if (max_size && op->want_size > max_size) { out->size = op->want_size; omc__free(&S->hooks, op); return OMC_ERR_TOO_LARGE; }
        if (op->want_size > omc_pool_size(S->pool)) {
            snprintf(op->err, sizeof(op->err), "the payload (%llu bytes) is larger than the reader's pool (%llu bytes): raise pool_size",
                     (unsigned long long)op->want_size, (unsigned long long)omc_pool_size(S->pool));
            omc__st_log_op(S, op, OMC_ERR_TOO_LARGE);
            omc__free(&S->hooks, op);
            return OMC_ERR_TOO_LARGE;
        }
    }
    for (;;) {
        /* OMC_NO_WAIT: one look now (a request needs a deadline that has not passed) */
        omc__st_exec(S, &op, 1, prio, deadline == OMC_NO_WAIT ? omc__st_req_deadline(S) : deadline);
        r = op->result;
        /* a metadata-less get waits for the key to appear */
        if (r != OMC_ERR_NOT_FOUND || meta || omc_now_ns() >= deadline) break;
        {
            struct timespec ts;
            omc_time_ns left = deadline - omc_now_ns();
            int64_t us = omc__min(nap_us, left / 1000);
            if (us > 0) { ts.tv_sec = (time_t)(us / 1000000); ts.tv_nsec = (long)(us % 1000000) * 1000; nanosleep(&ts, NULL); }
            if (nap_us < 20000) nap_us *= 2;
        }
        if (omc__load(&c->closed)) { r = OMC_ERR_CLOSED; break; }
    }
    if (r == OMC_ERR_NOT_FOUND && !meta) r = OMC_ERR_TIMEOUT;
    omc__st_log_op(S, op, r);
    if (r == OMC_OK) {
        *out = op->out;
        if (out->pool) {        /* the view keeps the connector (and its pool) alive until released */
            out->release_fn = omc__st_release;
            out->owner = c;
            omc__conn_ref(c);
        }
    } else if (r == OMC_ERR_TOO_LARGE) {
        out->size = op->out.size;
    }
    omc__free(&S->hooks, op);
    return r;
}

static omc_result omc__st_get(omc_conn* c, const char* qkey, uint32_t qlen, const omc_meta_info* meta, omc_time_ns deadline,
                              uint64_t max_size, omc_buffer* out) {
    return omc__st_get_prio(c, qkey, qlen, meta, deadline, max_size, out, OMC_STORE_GET - 1);
}

static omc_result omc__st_alloc(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    return omc_pool_alloc_buffer_wait(omc__st_of(c)->pool, size, deadline, out);
}

static omc_result omc__st_simple(omc_conn* c, int kind, const char* qkey, uint32_t qlen, int prio) {
    omc__st_state* S = omc__st_of(c);
    omc__sop op;
    omc__sop* p = &op;
    memset(&op, 0, sizeof(op));
    op.kind = kind;
    omc__st_op_key(&op, qkey, qlen);
    omc__st_exec(S, &p, 1, prio, omc__st_req_deadline(S));
    omc__st_log_op(S, &op, op.result);
    return op.result;
}

static omc_result omc__st_cleanup(omc_conn* c, const char* qkey, uint32_t qlen) {
    omc__st_state* S = omc__st_of(c);
    omc_result r = omc__st_simple(c, OMC__OP_DROP, qkey, qlen, OMC_STORE_PUT - 1);
    if (r == OMC_OK || r == OMC_ERR_NOT_FOUND) {
        pthread_mutex_lock(&S->own_mu);
        omc__free(&S->hooks, omc__smap_del(&S->own, &S->hooks, qkey, qlen));
        pthread_mutex_unlock(&S->own_mu);
    }
    return r;
}

static omc_result omc__st_exists(omc_conn* c, const char* qkey, uint32_t qlen) {
    return omc__st_simple(c, OMC__OP_EXISTS, qkey, qlen, OMC_STORE_PEEK - 1);
}

/* Ask the store which of our own puts are still there (one pipelined HGET per put); forget the
   rest, counting those past their TTL as reclaimed. Returns how many are left. */
static uint64_t omc__st_own_refresh(omc_conn* c) {
    omc__st_state* S = omc__st_of(c);
    omc__sop* ops;
    omc__sop** pp;
    uint32_t n, i = 0, it = 0;
    const char* k;
    uint32_t kl;
    void* v;
    uint64_t left = 0;
    omc_time_ns now;
    pthread_mutex_lock(&S->own_mu);
    n = S->own.count;
    ops = (omc__sop*)omc__calloc(&S->hooks, (n ? n : 1) * sizeof(omc__sop));
    pp = (omc__sop**)omc__calloc(&S->hooks, (n ? n : 1) * sizeof(omc__sop*));
    if (!ops || !pp) { pthread_mutex_unlock(&S->own_mu); omc__free(&S->hooks, ops); omc__free(&S->hooks, pp); return n; }
    while (i < n && omc__smap_next(&S->own, &it, &k, &kl, &v)) {
        omc__sop* op = &ops[i];
        op->kind = OMC__OP_OWNED;
        omc__st_op_key(op, k, kl);
        op->tok = ((omc__sown*)v)->tok;
        pp[i] = op;
        i++;
    }
    n = i;
    pthread_mutex_unlock(&S->own_mu);
    if (n) omc__st_exec(S, pp, n, OMC_STORE_PEEK - 1, omc__st_req_deadline(S));
    now = omc_now_ns();
    pthread_mutex_lock(&S->own_mu);
    for (i = 0; i < n; i++) {
        omc__sown* o = (omc__sown*)omc__smap_get(&S->own, ops[i].qkey, ops[i].qlen);
        if (!o || o->tok != ops[i].tok) continue;
        if (ops[i].result == OMC_ERR_NOT_FOUND) {
            if (o->expires && now >= o->expires) omc__add(&c->ttl_reclaims, 1u);
            omc__free(&S->hooks, omc__smap_del(&S->own, &S->hooks, ops[i].qkey, ops[i].qlen));
        }
    }
    left = S->own.count;
    pthread_mutex_unlock(&S->own_mu);
    omc__free(&S->hooks, ops);
    omc__free(&S->hooks, pp);
    return left;
}

static void omc__st_health(omc_conn* c, omc_health* h) {
    omc__st_state* S = omc__st_of(c);
    omc_alloc_stats st;
    uint32_t i;
    int bad = 0;
    h->live_entries = omc__load(&c->closed) ? 0 : omc__st_own_refresh(c);
    omc_alloc_get_stats(omc_pool_allocator(S->pool), &st);
    h->pool_capacity = st.capacity;
    h->pool_in_use = st.bytes_in_use;
    pthread_mutex_lock(&S->route_mu);
    for (i = 0; i < S->nnodes; i++) bad |= S->nodes[i]->nth == 0;
    pthread_mutex_unlock(&S->route_mu);
    if (bad || h->last_error == OMC_ERR_CONNECTION) h->state = OMC_CONN_DEGRADED;
    h->transport = OMC_TRANSPORT_TCP;
}

static uint64_t omc__st_sweep(omc_conn* c) {
    uint64_t before = omc__load(&c->ttl_reclaims);
    omc__st_own_refresh(c);
    return omc__load(&c->ttl_reclaims) - before;
}

static uint64_t omc__st_pending(omc_conn* c) { return omc__st_own_refresh(c); }

/* SCAN every master for metadata keys; hand each qualified key to sink. */
static omc_result omc__st_list(omc_conn* c, omc__key_sink sink, void* user) {
    omc__st_state* S = omc__st_of(c);
    omc__snode* nodes[OMC__ST_MAX_NODES];
    uint32_t n, i;
    char pattern[160];
    size_t pl = 0, j;
    omc_result r = OMC_OK;
    for (j = 0; S->prefix[j] && pl + 2 < 100; j++) {      /* the prefix, glob-escaped */
        char ch = S->prefix[j];
        if (ch == '*' || ch == '?' || ch == '[' || ch == ']' || ch == '\\') pattern[pl++] = '\\';
        pattern[pl++] = ch;
    }
    snprintf(pattern + pl, sizeof(pattern) - pl, "{*}m:*");
    pthread_mutex_lock(&S->route_mu);
    n = S->nnodes;
    for (i = 0; i < n; i++) nodes[i] = S->nodes[i];
    pthread_mutex_unlock(&S->route_mu);
    for (i = 0; i < n && r == OMC_OK; i++) {
        char cursor[32] = "0";
        do {
            const char* argv[7];
            omc__rv v;
            char err[200];
            uint32_t k;
            argv[0] = "SCAN"; argv[1] = cursor; argv[2] = "MATCH"; argv[3] = pattern; argv[4] = "COUNT"; argv[5] = "1000";
            r = omc__st_raw_on(nodes[i], argv, 6, omc__st_req_deadline(S), &v, err, sizeof(err));
            if (r != OMC_OK) {
                if (S->cluster && r == OMC_ERR_CONNECTION) { r = OMC_OK; omc__rv_clear(&S->hooks, &v); break; }   /* a master gone: its keys with it */
                OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_CONN_ERROR, "store list: SCAN on %s: %s", nodes[i]->name, err);
                omc__rv_clear(&S->hooks, &v);
                break;
            }
            if (v.type != OMC__RV_ARRAY || v.n != 2 || v.e[0].type != OMC__RV_BULK || v.e[1].type != OMC__RV_ARRAY) {
                omc__rv_clear(&S->hooks, &v);
                r = OMC_ERR_PROTOCOL;
                break;
            }
            snprintf(cursor, sizeof(cursor), "%s", v.e[0].s);
            for (k = 0; k < v.e[1].n && r == OMC_OK; k++) {
                const omc__rv* key = &v.e[1].e[k];
                const char* m;
                if (key->type != OMC__RV_BULK) continue;
                m = strstr(key->s + strlen(S->prefix), "}m:");
                if (!m) continue;
                m += 3;
                if ((size_t)(key->s + key->len - m) == 0 || (size_t)(key->s + key->len - m) >= OMC_KEY_MAX) continue;
                r = sink(m, (uint32_t)(key->s + key->len - m), user);
            }
            omc__rv_clear(&S->hooks, &v);
        } while (r == OMC_OK && strcmp(cursor, "0") != 0);
    }
    return r;
}

static void omc__st_close(omc_conn* c) {
    omc__st_state* S = omc__st_of(c);
    uint32_t i, n;
    omc__snode* nodes[OMC__ST_MAX_NODES];
    pthread_mutex_lock(&S->route_mu);
    n = S->nnodes;
    for (i = 0; i < n; i++) nodes[i] = S->nodes[i];
    pthread_mutex_unlock(&S->route_mu);
    for (i = 0; i < n; i++) omc__st_node_stop(nodes[i]);
}

static void omc__st_destroy(omc_conn* c) {
    omc__st_state* S = omc__st_of(c);
    uint32_t i, it = 0;
    void* v;
    omc_hooks h;
    if (!S) return;
    h = S->hooks;
    for (i = 0; i < S->nnodes; i++) { omc__st_node_stop(S->nodes[i]); omc__st_node_free(S->nodes[i]); }
    while (omc__smap_next(&S->own, &it, NULL, NULL, &v)) omc__free(&h, v);
    omc__smap_free(&S->own, &h);
    if (S->pool) omc_pool_destroy(S->pool);
    pthread_mutex_destroy(&S->route_mu);
    pthread_mutex_destroy(&S->own_mu);
    omc__st_state_free(S);
    c->impl = NULL;
}

static const omc__conn_vtable omc__st_vt = {
    "store", OMC_TRANSPORT_TCP, omc__st_put, omc__st_get, omc__st_alloc, omc__st_cleanup, omc__st_health, omc__st_sweep,
    omc__st_close, omc__st_destroy, omc__st_exists, omc__st_list, omc__st_pending, "omc_store_desc"
};

/* ============================================================================================== */
/* [SECTION] Store: batches, tickets, stats                                                      */
/* ============================================================================================== */

/* A get op succeeded: its buffer becomes the caller's view (holding the connector). */
static void omc__st_hand_view(omc_conn* c, omc__sop* op, omc_buffer* out) {
    *out = op->out;
    memset(&op->out, 0, sizeof(op->out));
    if (out->pool) {
        out->release_fn = omc__st_release;
        out->owner = c;
        omc__conn_ref(c);
    }
}

static omc_result omc__st_enter(omc_conn* c, int need_put, const char* from, const char* to, const char* key, char* q, uint32_t* ql) {
    if (!c || !omc__conn_is(c, "store")) return c ? OMC_ERR_TYPE : OMC_ERR_INVALID_ARG;
    if (omc__load(&c->closed)) return OMC_ERR_CLOSED;
    if (need_put == 1 && c->role == OMC_ROLE_RECEIVER) return OMC_ERR_WRONG_ROLE;
    if (need_put == 0 && c->role == OMC_ROLE_SENDER) return OMC_ERR_WRONG_ROLE;
    if (key && omc_qualify_key(from, to, key, q, ql) != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_CONN_KEY, "key must be non-empty, without 0x1F, and fit %d bytes with both stage names",
                 OMC_KEY_MAX - 1);
        return OMC_ERR_INVALID_ARG;
    }
    return OMC_OK;
}

static int omc__st_prio(omc_store_priority p, int dflt) {
    return p >= OMC_STORE_PEEK && p <= OMC_STORE_PUT ? (int)p - 1 : dflt;
}

OMNICONN_API omc_result omc_store_get_ex(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                         size_t meta_size, omc_store_priority priority, omc_time_ns deadline, omc_buffer* out) {
    char q[OMC_KEY_MAX];
    uint32_t ql = 0;
    omc_meta_info info;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    r = omc__st_enter(c, 0, from, to, key, q, &ql);
    if (r != OMC_OK) return r;
    if (meta) {
        r = omc_meta_parse(meta, meta_size, &info);
        if (r == OMC_OK && (info.key_len != ql || memcmp(info.key, q, ql) != 0)) r = OMC_ERR_INVALID_ARG;
        if (r != OMC_OK) return r;
    }
    r = omc__st_get_prio(c, q, ql, meta ? &info : NULL, deadline, 0, out, omc__st_prio(priority, OMC_STORE_GET - 1));
    if (r != OMC_OK) memset(out, 0, sizeof(*out));
    return r;
}

/* What every batch call starts with: the connector checked (a store, open, in the role), count
   ops and the pointer list omc__st_exec takes, each op keyed by its qualified key (from
   items[i].key, or keys[i] when items is NULL). A key that does not qualify leaves the result of
   omc_qualify_key in its op's result and the op unkeyed. args_ok = 0: OMC_ERR_INVALID_ARG after
   the connector checks. */
typedef struct omc__st_batch { omc__st_state* S; omc__sop* ops; omc__sop** pp; } omc__st_batch;

static void omc__st_batch_end(omc__st_batch* b) {
    if (!b->S) return;
    omc__free(&b->S->hooks, b->ops);
    omc__free(&b->S->hooks, b->pp);
    memset(b, 0, sizeof(*b));
}

static omc_result omc__st_batch_begin(omc_conn* c, int need_put, int args_ok, const char* from, const char* to,
                                      const omc_batch_item* items, const char* const* keys, uint32_t count, omc__st_batch* b) {
    uint32_t i;
    omc_result r = omc__st_enter(c, need_put, NULL, NULL, NULL, NULL, NULL);
    memset(b, 0, sizeof(*b));
    if (r != OMC_OK) return r;
    if (!args_ok) return OMC_ERR_INVALID_ARG;
    b->S = omc__st_of(c);
    b->ops = (omc__sop*)omc__calloc(&b->S->hooks, (count ? count : 1) * sizeof(omc__sop));
    b->pp = (omc__sop**)omc__calloc(&b->S->hooks, (count ? count : 1) * sizeof(omc__sop*));
    if (!b->ops || !b->pp) { omc__st_batch_end(b); return OMC_ERR_NO_MEMORY; }
    for (i = 0; i < count; i++) {
        char q[OMC_KEY_MAX];
        uint32_t ql = 0;
        b->ops[i].result = omc_qualify_key(from, to, items ? items[i].key : keys[i], q, &ql);
        if (b->ops[i].result == OMC_OK) omc__st_op_key(&b->ops[i], q, ql);
    }
    return OMC_OK;
}

OMNICONN_API omc_result omc_store_put_batch(omc_conn* c, const char* from, const char* to, omc_batch_item* items, uint32_t count,
                                            omc_time_ns deadline) {
    omc__st_batch b;
    omc__st_state* S;
    uint32_t i, n = 0;
    omc_result first = OMC_OK, r;
    r = omc__st_batch_begin(c, 1, items || !count, from, to, items, NULL, count, &b);
    if (r != OMC_OK) return r;
    S = b.S;
    for (i = 0; i < count; i++) {
        items[i].meta.data = NULL;
        items[i].meta.size = 0;
        items[i].result = b.ops[i].result;
        if (items[i].result == OMC_OK && !items[i].payload.buffer && !items[i].payload.data && items[i].payload.size)
            items[i].result = OMC_ERR_INVALID_ARG;
        if (items[i].result != OMC_OK) continue;
        omc__st_prepare_put(S, &b.ops[i], &items[i].payload);
        b.pp[n++] = &b.ops[i];
    }
    omc__st_exec(S, b.pp, n, OMC_STORE_PUT - 1, deadline);
    for (i = 0; i < count; i++) {
        if (items[i].result == OMC_OK) {
            items[i].result = b.ops[i].result;
            omc__st_log_op(S, &b.ops[i], b.ops[i].result);
            if (b.ops[i].result == OMC_OK) items[i].result = omc__st_after_put(S, &b.ops[i], &items[i].payload, &items[i].meta);
        }
        if (items[i].result != OMC_OK && first == OMC_OK) first = items[i].result;
    }
    omc__st_batch_end(&b);
    return first;
}

OMNICONN_API omc_result omc_store_get_batch(omc_conn* c, const char* from, const char* to, omc_batch_item* items, uint32_t count,
                                            omc_store_priority priority, omc_time_ns deadline) {
    omc__st_batch b;
    omc__st_state* S;
    omc__sop* ops;
    uint32_t i, n;
    omc_result first = OMC_OK, r;
    int prio = omc__st_prio(priority, OMC_STORE_GET - 1);
    int64_t nap_us = 1000;
    r = omc__st_batch_begin(c, 0, items || !count, from, to, items, NULL, count, &b);
    if (r != OMC_OK) return r;
    S = b.S;
    ops = b.ops;
    for (i = 0; i < count; i++) {
        memset(&items[i].buffer, 0, sizeof(items[i].buffer));
        items[i].result = ops[i].result;
        if (items[i].result != OMC_OK) continue;
        ops[i].kind = OMC__OP_GET;
        if (items[i].meta.size) {
            omc_meta_info info;
            items[i].result = omc_meta_parse(items[i].meta.data, items[i].meta.size, &info);
            if (items[i].result == OMC_OK && (info.key_len != ops[i].qlen || memcmp(info.key, ops[i].qkey, ops[i].qlen) != 0))
                items[i].result = OMC_ERR_INVALID_ARG;
            if (items[i].result == OMC_OK) items[i].result = omc__st_body(&info, &ops[i].want_tok, &ops[i].want_size);
        }
        if (items[i].result == OMC_OK) items[i].result = OMC_ERR_NOT_FOUND;     /* = still to do */
    }
    for (;;) {      /* one pipeline per server; metadata-less items not there yet: again until the deadline */
        n = 0;
        for (i = 0; i < count; i++) if (items[i].result == OMC_ERR_NOT_FOUND) b.pp[n++] = &ops[i];
        if (!n) break;
        omc__st_exec(S, b.pp, n, prio, deadline == OMC_NO_WAIT ? omc__st_req_deadline(S) : deadline);
        for (i = 0; i < count; i++) {
            if (items[i].result != OMC_ERR_NOT_FOUND) continue;
            items[i].result = ops[i].result;
            if (ops[i].result == OMC_OK) omc__st_hand_view(c, &ops[i], &items[i].buffer);
            else if (ops[i].result == OMC_ERR_NOT_FOUND && items[i].meta.size) { items[i].result = OMC_ERR_INTERNAL; ops[i].readers = 1; }
            else omc__st_log_op(S, &ops[i], ops[i].result);
        }
        for (n = 0, i = 0; i < count; i++) if (items[i].result == OMC_ERR_NOT_FOUND) n++;
        if (!n || omc_now_ns() >= deadline) break;     /* nothing left to wait for: no nap */
        {
            struct timespec ts;
            int64_t us = omc__min(nap_us, (deadline - omc_now_ns()) / 1000);
            if (us > 0) { ts.tv_sec = (time_t)(us / 1000000); ts.tv_nsec = (long)(us % 1000000) * 1000; nanosleep(&ts, NULL); }
            if (nap_us < 20000) nap_us *= 2;
        }
    }
    for (i = 0; i < count; i++) {
        if (ops[i].readers == 1) items[i].result = OMC_ERR_NOT_FOUND;          /* with metadata: gone (marked above) */
        else if (items[i].result == OMC_ERR_NOT_FOUND) items[i].result = OMC_ERR_TIMEOUT;          /* metadata-less: never came */
        if (items[i].result != OMC_OK && first == OMC_OK) first = items[i].result;
    }
    omc__st_batch_end(&b);
    return first;
}

OMNICONN_API omc_result omc_store_exists_batch(omc_conn* c, const char* from, const char* to, const char* const* keys, uint32_t count,
                                               omc_result* results, omc_time_ns deadline) {
    omc__st_batch b;
    uint32_t i, n = 0;
    omc_result r = omc__st_batch_begin(c, 2, !count || (keys && results), from, to, NULL, keys, count, &b);
    if (r != OMC_OK) return r;
    for (i = 0; i < count; i++) {
        results[i] = b.ops[i].result;
        if (results[i] != OMC_OK) continue;
        b.ops[i].kind = OMC__OP_EXISTS;
        b.pp[n++] = &b.ops[i];
    }
    omc__st_exec(b.S, b.pp, n, OMC_STORE_PEEK - 1, deadline);
    for (i = 0; i < count; i++) {
        if (results[i] == OMC_OK) results[i] = b.ops[i].result;
        if (results[i] != OMC_OK && results[i] != OMC_ERR_NOT_FOUND && r == OMC_OK) { r = results[i]; omc__st_log_op(b.S, &b.ops[i], r); }
    }
    omc__st_batch_end(&b);
    return r;
}

struct omc_store_ticket {
    omc_conn* c;
    omc__sgroup g;
    omc__sop op;
    omc_payload payload;
    int answered;               /* the group finished and the result was processed */
    omc_result result;
};

static omc_result omc__st_submit(omc_conn* c, omc_store_ticket* t, int prio, omc_time_ns deadline, omc_store_ticket** out) {
    omc__sop* p = &t->op;
    if (omc__st_group_init(&t->g, 1) != OMC_OK) { omc__free(&omc__st_of(c)->hooks, t); return OMC_ERR_SYSTEM; }
    t->c = c;
    t->op.group = &t->g;
    omc__conn_ref(c);
    *out = t;
    omc__st_dispatch(omc__st_of(c), &p, 1, prio, deadline);
    return OMC_OK;
}

OMNICONN_API omc_result omc_store_submit_put(omc_conn* c, const char* from, const char* to, const char* key, const omc_payload* payload,
                                             omc_store_priority priority, omc_time_ns deadline, omc_store_ticket** out) {
    char q[OMC_KEY_MAX];
    uint32_t ql = 0;
    omc_store_ticket* t;
    omc_result r;
    if (!out || !payload) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    r = omc__st_enter(c, 1, from, to, key, q, &ql);
    if (r != OMC_OK) return r;
    if (!payload->buffer && !payload->data && payload->size) return OMC_ERR_INVALID_ARG;
    t = (omc_store_ticket*)omc__calloc(&omc__st_of(c)->hooks, sizeof(*t));
    if (!t) return OMC_ERR_NO_MEMORY;
    t->payload = *payload;
    omc__st_op_key(&t->op, q, ql);
    omc__st_prepare_put(omc__st_of(c), &t->op, payload);
    return omc__st_submit(c, t, omc__st_prio(priority, OMC_STORE_PUT - 1), deadline, out);
}

OMNICONN_API omc_result omc_store_submit_get(omc_conn* c, const char* from, const char* to, const char* key, omc_store_priority priority,
                                             omc_time_ns deadline, omc_store_ticket** out) {
    char q[OMC_KEY_MAX];
    uint32_t ql = 0;
    omc_store_ticket* t;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    r = omc__st_enter(c, 0, from, to, key, q, &ql);
    if (r != OMC_OK) return r;
    t = (omc_store_ticket*)omc__calloc(&omc__st_of(c)->hooks, sizeof(*t));
    if (!t) return OMC_ERR_NO_MEMORY;
    t->op.kind = OMC__OP_GET;
    omc__st_op_key(&t->op, q, ql);
    return omc__st_submit(c, t, omc__st_prio(priority, OMC_STORE_GET - 1), deadline, out);
}

OMNICONN_API omc_result omc_store_ticket_wait(omc_store_ticket* t, omc_time_ns wait_deadline, omc_buffer* out) {
    omc__st_state* S;
    if (out) memset(out, 0, sizeof(*out));
    if (!t) return OMC_ERR_INVALID_ARG;
    if (!t->answered) {
        if (omc__st_group_wait(&t->g, wait_deadline) != OMC_OK) return OMC_ERR_TIMEOUT;
        S = omc__st_of(t->c);
        t->answered = 1;
        t->result = t->op.result;
        omc__st_log_op(S, &t->op, t->result);
        if (t->op.kind == OMC__OP_PUT && t->result == OMC_OK) {
            omc_meta none;
            none.data = NULL;
            none.size = OMC__META_UNWANTED;
            t->result = omc__st_after_put(S, &t->op, &t->payload, &none);
        }
    }
    if (t->op.kind == OMC__OP_GET && t->result == OMC_OK && out && t->op.out.data) omc__st_hand_view(t->c, &t->op, out);
    return t->result;
}

OMNICONN_API uint64_t omc_store_ticket_sequence(const omc_store_ticket* t) { return t ? __atomic_load_n(&t->op.seq, __ATOMIC_ACQUIRE) : 0; }

OMNICONN_API void omc_store_ticket_free(omc_store_ticket* t) {
    omc_hooks h;
    if (!t) return;
    if (!t->answered) omc_store_ticket_wait(t, OMC_WAIT_FOREVER, NULL);
    if (t->op.out.data) omc_buffer_release(&t->op.out);
    omc__st_group_uninit(&t->g);
    h = omc__st_of(t->c)->hooks;        /* the ticket's reference may be the connector's last */
    omc__conn_unref(t->c);
    omc__free(&h, t);
}

OMNICONN_API omc_result omc_store_get_stats(omc_conn* c, omc_store_stats* out) {
    omc__st_state* S;
    uint32_t i, p;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!c || !omc__conn_is(c, "store")) return c ? OMC_ERR_TYPE : OMC_ERR_INVALID_ARG;
    S = omc__st_of(c);
    out->dispatched = omc__load(&S->dispatched);
    out->expired_in_queue = omc__load(&S->expired_in_queue);
    for (p = 0; p < OMC_STORE_PRIORITIES; p++) out->by_priority[p] = omc__load(&S->by_prio[p]);
    out->moved = omc__load(&S->moved);
    out->ask = omc__load(&S->ask);
    out->retries = omc__load(&S->retries);
    out->connects = omc__load(&S->connects);
    out->inflight_max = __atomic_load_n(&S->inflight_max, __ATOMIC_RELAXED);
    out->max_inflight = S->max_inflight;
    out->cluster = S->cluster;
    pthread_mutex_lock(&S->route_mu);
    for (i = 0; i < S->nnodes; i++) {
        omc__snode* N = S->nodes[i];
        pthread_mutex_lock(&N->mu);
        out->inflight += N->inflight;
        out->queued += N->queued;
        pthread_mutex_unlock(&N->mu);
    }
    out->servers = S->nnodes;
    pthread_mutex_unlock(&S->route_mu);
    return OMC_OK;
}

OMNICONN_API omc_result omc_store_get_batch_flat(omc_conn* c, const char* from, const char* to, const char* const* keys,
                                                 uint32_t count, int priority, int wait_missing, omc_time_ns deadline,
                                                 omc_buffer** handles, void** datas, uint64_t* sizes, uint32_t* flags,
                                                 int32_t* results) {
    omc_batch_item* it;
    const omc_hooks* h;
    uint32_t i;
    omc_result r, first = OMC_OK;
    if (count && (!keys || !handles || !results)) return OMC_ERR_INVALID_ARG;
    if (!c || !omc__conn_is(c, "store")) return c ? OMC_ERR_TYPE : OMC_ERR_INVALID_ARG;
    h = &omc__st_of(c)->hooks;
    it = (omc_batch_item*)omc__calloc(h, (count ? count : 1) * sizeof(omc_batch_item));
    if (!it) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < count; i++) it[i].key = keys[i];
    r = omc_store_get_batch(c, from, to, it, count, (omc_store_priority)priority, wait_missing ? deadline : OMC_NO_WAIT);
    if (r == OMC_ERR_INVALID_ARG || r == OMC_ERR_TYPE || r == OMC_ERR_CLOSED || r == OMC_ERR_WRONG_ROLE || r == OMC_ERR_NO_MEMORY) {
        omc__free(h, it);
        return r;
    }
    for (i = 0; i < count; i++) {
        omc_result ri = it[i].result;
        handles[i] = NULL;
        if (ri == OMC_ERR_TIMEOUT && !wait_missing) ri = OMC_ERR_NOT_FOUND;
        if (ri == OMC_OK) {
            handles[i] = (omc_buffer*)OMNICONN_MALLOC(sizeof(omc_buffer));     /* the caller frees it: no hooks there */
            if (!handles[i]) { omc_buffer_release(&it[i].buffer); ri = OMC_ERR_NO_MEMORY; }
            else *handles[i] = it[i].buffer;
        }
        if (datas) datas[i] = ri == OMC_OK ? it[i].buffer.data : NULL;
        if (sizes) sizes[i] = ri == OMC_OK ? it[i].buffer.size : 0;
        if (flags) flags[i] = ri == OMC_OK ? it[i].buffer.flags : 0;
        results[i] = (int32_t)ri;
        if (ri != OMC_OK && first == OMC_OK) first = ri;
    }
    omc__free(h, it);
    return first;
}

/* ============================================================================================== */
/* [SECTION] Store: create                                                                       */
/* ============================================================================================== */

/* Percent-decoding of a URL part into out (NUL-terminated); -1 if it does not fit or is bad. */
static int omc__st_unescape(const char* s, size_t n, char* out, size_t cap) {
    size_t i, o = 0;
    for (i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '%') {
            unsigned v = 0;
            int k;
            if (i + 2 >= n) return -1;
            for (k = 1; k <= 2; k++) {
                char d = s[i + (size_t)k];
                v <<= 4;
                if (d >= '0' && d <= '9') v |= (unsigned)(d - '0');
                else if (d >= 'a' && d <= 'f') v |= (unsigned)(d - 'a' + 10);
                else if (d >= 'A' && d <= 'F') v |= (unsigned)(d - 'A' + 10);
                else return -1;
            }
            ch = (char)v;
            i += 2;
        }
        if (o + 1 >= cap) return -1;
        out[o++] = ch;
    }
    out[o] = '\0';
    return 0;
}

/* redis://[user[:password]@]host[:port][/db] and unix://[user[:password]@]/path[?db=N] */
static omc_result omc__st_parse_url(omc__st_state* S, const char* url, char* host, size_t host_n, int* port, char* path, size_t path_n,
                                    char* why, size_t why_n) {
    const char* p;
    const char* at;
    const char* end;
    int is_unix = 0;
    *port = 6379;
    host[0] = path[0] = '\0';
    if (!strncmp(url, "redis://", 8)) p = url + 8;
    else if (!strncmp(url, "unix://", 7)) { p = url + 7; is_unix = 1; }
    else if (!strncmp(url, "rediss://", 9)) { snprintf(why, why_n, "TLS (rediss://) is not supported: use a TLS proxy or a unix socket"); return OMC_ERR_INVALID_ARG; }
    else { snprintf(why, why_n, "the URL must start with redis:// or unix://"); return OMC_ERR_INVALID_ARG; }
    end = p + strcspn(p, is_unix ? "?" : "/?");
    at = NULL;
    {   /* userinfo: up to the last '@' before the host (unix: before the path) */
        const char* s = p;
        const char* lim = is_unix ? p + strcspn(p, "/") : end;
        const char* a;
        while ((a = (const char*)memchr(s, '@', (size_t)(lim - s))) != NULL) { at = a; s = a + 1; }
    }
    if (at) {
        const char* colon = (const char*)memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (colon > p && omc__st_unescape(p, (size_t)(colon - p), S->user, sizeof(S->user))) goto bad;
            if (omc__st_unescape(colon + 1, (size_t)(at - colon - 1), S->password, sizeof(S->password))) goto bad;
        } else if (omc__st_unescape(p, (size_t)(at - p), S->password, sizeof(S->password))) goto bad;   /* redis://secret@host */
        p = at + 1;
    }
    if (is_unix) {
        size_t n = strcspn(p, "?");
        if (n == 0 || p[0] != '/' || n >= path_n) { snprintf(why, why_n, "unix:// needs an absolute socket path"); return OMC_ERR_INVALID_ARG; }
        memcpy(path, p, n);
        path[n] = '\0';
        if (p[n] == '?' && !strncmp(p + n + 1, "db=", 3)) S->db = atoi(p + n + 4);
        return OMC_OK;
    }
    {
        size_t hn;
        const char* colon;
        if (*p == '[') {            /* [v6]:port */
            const char* rb = strchr(p, ']');
            if (!rb || rb > end) goto bad;
            hn = (size_t)(rb - p - 1);
            if (hn == 0 || hn >= host_n) goto bad;
            memcpy(host, p + 1, hn);
            host[hn] = '\0';
            colon = rb[1] == ':' ? rb + 1 : NULL;
        } else {
            colon = (const char*)memchr(p, ':', (size_t)(end - p));
            hn = (size_t)((colon ? colon : end) - p);
            if (hn >= host_n) goto bad;
            memcpy(host, p, hn);
            host[hn] = '\0';
            if (!hn) snprintf(host, host_n, "127.0.0.1");
        }
        if (colon) {
            int64_t v;
            if (omc__parse_i64(colon + 1, (size_t)(end - colon - 1), &v) || v < 1 || v > 65535) goto bad;
            *port = (int)v;
        }
        if (*end == '/' && end[1]) {
            int64_t v;
            if (omc__parse_i64(end + 1, strcspn(end + 1, "?"), &v) || v < 0 || v > 100000) goto bad;
            S->db = (int)v;
        }
    }
    return OMC_OK;
bad:
    snprintf(why, why_n, "cannot parse the URL (redis://[user[:password]@]host[:port][/db] or unix:///path[?db=N])");
    return OMC_ERR_INVALID_ARG;
}

OMNICONN_API omc_result omc_store_create(const omc_store_desc* desc, omc_conn** out) {
    omc_store_desc d;
    omc_hooks hooks;
    omc__st_state* S = NULL;
    omc_conn* c = NULL;
    omc_pool_desc pd;
    char host[256], path[108], why[300];
    int port = 6379;
    omc_result r;
    omc__rv v;
    const char* info_argv[2];
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    memset(&d, 0, sizeof(d));
    if (desc) d = *desc;
    hooks = omc__hooks_resolve(&d.hooks);
    if (d.role < OMC_ROLE_DEFAULT || d.role > OMC_ROLE_DUAL) {
        OMC__LOG(&hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "omc_store_desc.role is not a role");
        return OMC_ERR_INVALID_ARG;
    }
    S = (omc__st_state*)omc__calloc(&hooks, sizeof(omc__st_state));
    if (!S) return OMC_ERR_NO_MEMORY;
    S->hooks = hooks;
    S->slots = (uint8_t*)omc__calloc(&hooks, OMC__ST_SLOTS);
    if (!S->slots) { omc__st_state_free(S); return OMC_ERR_NO_MEMORY; }
    r = omc__st_parse_url(S, d.url ? d.url : "redis://127.0.0.1:6379", host, sizeof(host), &port, path, sizeof(path), why, sizeof(why));
    if (r != OMC_OK) {
        OMC__LOG(&hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "omc_store_desc.url: %s", why);
        omc__st_state_free(S);
        return r;
    }
    if (d.user) snprintf(S->user, sizeof(S->user), "%s", d.user);
    if (d.password) snprintf(S->password, sizeof(S->password), "%s", d.password);
    if (d.key_prefix && (strlen(d.key_prefix) >= sizeof(S->prefix) - 1 || strchr(d.key_prefix, '{') || strchr(d.key_prefix, '}'))) {
        OMC__LOG(&hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "omc_store_desc.key_prefix: at most 62 bytes, without { or }");
        omc__st_state_free(S);
        return OMC_ERR_INVALID_ARG;
    }
    snprintf(S->prefix, sizeof(S->prefix), "%s", d.key_prefix ? d.key_prefix : "omc:");
    S->max_inflight = d.max_inflight ? d.max_inflight : OMNICONN_STORE_MAX_INFLIGHT;
    if (S->max_inflight > 1024) S->max_inflight = 1024;
    S->default_ttl_ms = d.default_ttl_ms ? d.default_ttl_ms : OMNICONN_DEFAULT_TTL_MS;
    S->request_timeout_ms = d.request_timeout_ms > 0 ? d.request_timeout_ms : 10000;
    S->connect_timeout_ms = d.connect_timeout_ms > 0 ? d.connect_timeout_ms : 2000;
    if (pthread_mutex_init(&S->route_mu, NULL) != 0) { omc__st_state_free(S); return OMC_ERR_SYSTEM; }
    if (pthread_mutex_init(&S->own_mu, NULL) != 0) { pthread_mutex_destroy(&S->route_mu); omc__st_state_free(S); return OMC_ERR_SYSTEM; }
    r = omc__conn_create(&hooks, &omc__st_vt, d.role, &c);
    if (r != OMC_OK) { pthread_mutex_destroy(&S->route_mu); pthread_mutex_destroy(&S->own_mu); omc__st_state_free(S); return r; }
    c->impl = S;
    S->conn = c;
    memset(&pd, 0, sizeof(pd));
    pd.size = d.pool_size ? d.pool_size : OMNICONN_STORE_POOL_SIZE;
    pd.thread_safe = 1;
    pd.hooks = hooks;
    r = omc_pool_create(&pd, &S->pool);
    if (r != OMC_OK) { omc_conn_destroy(c); return r; }
    S->nodes[0] = omc__st_node_new(S, host, port, path);
    if (!S->nodes[0]) { omc_conn_destroy(c); return OMC_ERR_SYSTEM; }
    S->nnodes = 1;
    /* one request through the executor: reachable, authenticated, and a cluster node or not */
    info_argv[0] = "INFO";
    info_argv[1] = "cluster";
    r = omc__st_raw_on(S->nodes[0], info_argv, 2, omc_deadline_after_ms(S->connect_timeout_ms + 1000), &v, why, sizeof(why));
    if (r != OMC_OK) {
        OMC__LOG(&hooks, OMC_LOG_WARN, OMC_LOGITEM_CONN_ERROR, "store: cannot use the server at %s: %s (%s)", S->nodes[0]->name,
                 why[0] ? why : "no answer", omc_result_str(r));
        omc__rv_clear(&S->hooks, &v);
        omc_conn_destroy(c);
        return r;
    }
    if (v.type == OMC__RV_BULK && strstr(v.s, "cluster_enabled:1")) {
        S->cluster = 1;
        if (path[0]) {
            OMC__LOG(&hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "store: a cluster is reached over TCP (redis://host:port), not a unix socket");
            omc__rv_clear(&S->hooks, &v);
            omc_conn_destroy(c);
            return OMC_ERR_INVALID_ARG;
        }
        omc__st_refresh(S);
    }
    omc__rv_clear(&S->hooks, &v);
    *out = c;
    return OMC_OK;
}

OMNICONN_API omc_result omc_store_create_url(const char* url, int role, uint64_t pool_size, int64_t default_ttl_ms,
                                             uint32_t max_inflight, omc_conn** out) {
    omc_store_desc d;
    memset(&d, 0, sizeof(d));
    d.url = url && *url ? url : NULL;
    d.role = role >= OMC_ROLE_DEFAULT && role <= OMC_ROLE_DUAL ? (omc_role)role : (omc_role)-1;
    d.pool_size = pool_size;
    d.default_ttl_ms = default_ttl_ms;
    d.max_inflight = max_inflight;
    return omc_store_create(&d, out);
}

/* ============================================================================================== */
/* [SECTION] Store: the shared key directory                                                     */
/* ============================================================================================== */
/*
    A record is a cache entry of the store connector (OMC_STORE_READERS_CACHE, the payload's TTL)
    on the edge ("omc.dir|" + from, to), key = the payload's key. Its bytes:
      [0..2)   u16 producer name length n      [2..2+n)  the name
      [2+n..10+n) u64 the producer's incarnation (omc_incarnation())
      then the remote connector's metadata blob for the put
*/
#if OMC__HAS_ZMQ
#define OMC__DIR_PREFIX "omc.dir|"

struct omc_store_dir {
    omc_conn* store;
    omc_conn* remote;
    omc_hooks hooks;            /* the store connector's, copied: the directory may outlive it */
    char name[64];
};

static omc_result omc__dir_stage(const char* from, char out[OMC_KEY_MAX]) {
    int n = snprintf(out, OMC_KEY_MAX, "%s%s", OMC__DIR_PREFIX, from ? from : "");
    return n < 0 || n >= OMC_KEY_MAX ? OMC_ERR_INVALID_ARG : OMC_OK;
}

/* Parse a record: name, incarnation, metadata. */
static omc_result omc__dir_parse(const uint8_t* p, uint64_t n, const char** name, uint32_t* name_len, uint64_t* inc,
                                 const uint8_t** meta, uint64_t* meta_len) {
    uint32_t nl;
    if (n < 10) return OMC_ERR_MALFORMED;
    nl = (uint32_t)p[0] | ((uint32_t)p[1] << 8);
    if (nl == 0 || nl > 63 || n < 10u + nl + OMC_META_HEADER_SIZE) return OMC_ERR_MALFORMED;
    *name = (const char*)p + 2;
    *name_len = nl;
    *inc = omc__get_u64(p + 2 + nl);
    *meta = p + 10 + nl;
    *meta_len = n - 10 - nl;
    return OMC_OK;
}

typedef struct omc__dir_scan { omc_store_dir* dir; uint32_t removed; } omc__dir_scan;

/* A restarted producer: drop the records of its earlier incarnations. */
static int omc__dir_visit(const char* from, const char* to, const char* key, void* user) {
    omc__dir_scan* sc = (omc__dir_scan*)user;
    omc_buffer b;
    const char* nm;
    uint32_t nl;
    uint64_t inc, ml;
    const uint8_t* meta;
    if (strncmp(from, OMC__DIR_PREFIX, strlen(OMC__DIR_PREFIX)) != 0) return 0;
    if (omc_conn_get(sc->dir->store, from, to, key, NULL, 0, OMC_NO_WAIT, &b) != OMC_OK) return 0;
    if (omc__dir_parse((const uint8_t*)b.data, b.size, &nm, &nl, &inc, &meta, &ml) == OMC_OK && nl == strlen(sc->dir->name) &&
        memcmp(nm, sc->dir->name, nl) == 0 && inc != omc_incarnation()) {
        if (omc_conn_cleanup(sc->dir->store, from, to, key) == OMC_OK) sc->removed++;
    }
    omc_buffer_release(&b);
    return 0;
}

OMNICONN_API omc_result omc_store_dir_create(const omc_store_dir_desc* desc, omc_store_dir** out) {
    omc_store_dir* d;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (!desc || !desc->store || !desc->remote || !omc__conn_is(desc->store, "store")) return OMC_ERR_INVALID_ARG;
    if (desc->name && (!desc->name[0] || strlen(desc->name) > 63)) return OMC_ERR_INVALID_ARG;
    d = (omc_store_dir*)omc__calloc(&desc->store->hooks, sizeof(*d));
    if (!d) return OMC_ERR_NO_MEMORY;
    d->hooks = desc->store->hooks;
    d->store = desc->store;
    d->remote = desc->remote;
    if (desc->name) {
        omc__dir_scan sc;
        snprintf(d->name, sizeof(d->name), "%s", desc->name);
        sc.dir = d;
        sc.removed = 0;
        omc_conn_list(d->store, NULL, NULL, omc__dir_visit, &sc, NULL);
        if (sc.removed)
            OMC__LOG(&desc->store->hooks, OMC_LOG_INFO, OMC_LOGITEM_CONN_ERROR,
                     "store directory: producer %s restarted: removed %u records of its earlier incarnation", d->name, sc.removed);
    }
    *out = d;
    return OMC_OK;
}

OMNICONN_API void omc_store_dir_destroy(omc_store_dir* dir) {
    omc_hooks h;
    if (!dir) return;
    h = dir->hooks;
    omc__free(&h, dir);
}

OMNICONN_API omc_result omc_store_dir_put(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                          const omc_payload* payload, omc_meta* meta_out) {
    omc_meta m = {NULL, 0};
    omc_payload rec;
    uint8_t* buf;
    char stage[OMC_KEY_MAX];
    size_t nl, total;
    omc_result r;
    if (meta_out) { meta_out->data = NULL; meta_out->size = 0; }
    if (!dir || !payload || !dir->name[0]) return OMC_ERR_INVALID_ARG;
    r = omc__dir_stage(from, stage);
    if (r != OMC_OK) return r;
    r = omc_conn_put(dir->remote, from, to, key, payload, &m);
    if (r != OMC_OK) return r;
    nl = strlen(dir->name);
    total = 10 + nl + m.size;
    buf = (uint8_t*)omc__malloc(&dir->hooks, total);
    if (!buf) { omc_conn_cleanup(dir->remote, from, to, key); omc_meta_free(&m); return OMC_ERR_NO_MEMORY; }
    buf[0] = (uint8_t)(nl & 0xFF);
    buf[1] = (uint8_t)(nl >> 8);
    memcpy(buf + 2, dir->name, nl);
    omc__put_u64(buf + 2 + nl, omc_incarnation());
    memcpy(buf + 10 + nl, m.data, m.size);
    memset(&rec, 0, sizeof(rec));
    rec.data = buf;
    rec.size = total;
    rec.readers = OMC_STORE_READERS_CACHE;
    rec.ttl_ms = payload->ttl_ms;
    r = omc_conn_put(dir->store, stage, to, key, &rec, NULL);
    omc__free(&dir->hooks, buf);
    if (r != OMC_OK) {          /* not registered: nobody could find it, take it back */
        omc_conn_cleanup(dir->remote, from, to, key);
        omc_meta_free(&m);
        return r;
    }
    if (meta_out) *meta_out = m;
    else omc_meta_free(&m);
    return OMC_OK;
}

OMNICONN_API omc_result omc_store_dir_get(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                          omc_time_ns deadline, omc_buffer* out) {
    char stage[OMC_KEY_MAX];
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!dir) return OMC_ERR_INVALID_ARG;
    r = omc__dir_stage(from, stage);
    if (r != OMC_OK) return r;
    for (;;) {
        omc_buffer rec;
        const char* nm;
        uint32_t nl;
        uint64_t inc, ml;
        const uint8_t* meta;
        r = omc_conn_get(dir->store, stage, to, key, NULL, 0, deadline, &rec);     /* waits for the record */
        if (r != OMC_OK) return r;
        r = omc__dir_parse((const uint8_t*)rec.data, rec.size, &nm, &nl, &inc, &meta, &ml);
        if (r == OMC_OK) r = omc_conn_get(dir->remote, from, to, key, meta, (size_t)ml, deadline, out);
        omc_buffer_release(&rec);
        if (r == OMC_OK || r == OMC_ERR_TIMEOUT) return r;
        if (r != OMC_ERR_CONNECTION && r != OMC_ERR_PEER_RESTARTED && r != OMC_ERR_NOT_FOUND && r != OMC_ERR_MALFORMED &&
            r != OMC_ERR_STALE)
            return r;
        /* the sender is gone, restarted, or its entry is consumed: the record is stale */
        omc_conn_cleanup(dir->store, stage, to, key);
        if (deadline != OMC_WAIT_FOREVER && omc_now_ns() >= deadline) return OMC_ERR_TIMEOUT;
    }
}

OMNICONN_API omc_result omc_store_dir_create_flat(omc_conn* store, omc_conn* remote, const char* name, omc_store_dir** out) {
    omc_store_dir_desc d;
    d.store = store;
    d.remote = remote;
    d.name = name && *name ? name : NULL;
    return omc_store_dir_create(&d, out);
}

OMNICONN_API omc_result omc_store_dir_put_flat(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                               const void* data, uint64_t size, uint32_t flags, uint32_t readers,
                                               int64_t ttl_ms) {
    omc_payload p;
    memset(&p, 0, sizeof(p));
    p.data = data;
    p.size = size;
    p.flags = flags;
    p.readers = readers;
    p.ttl_ms = ttl_ms;
    return omc_store_dir_put(dir, from, to, key, &p, NULL);
}

OMNICONN_API omc_result omc_store_dir_get_flat(omc_store_dir* dir, const char* from, const char* to, const char* key,
                                               omc_time_ns deadline, omc_buffer** handle, void** data, uint64_t* size,
                                               uint32_t* flags) {
    omc_buffer b;
    omc_result r;
    if (!handle) return OMC_ERR_INVALID_ARG;
    *handle = NULL;
    r = omc_store_dir_get(dir, from, to, key, deadline, &b);
    if (r != OMC_OK) return r;
    *handle = (omc_buffer*)OMNICONN_MALLOC(sizeof(omc_buffer));       /* the caller frees it: no hooks there */
    if (!*handle) { omc_buffer_release(&b); return OMC_ERR_NO_MEMORY; }
    **handle = b;
    if (data) *data = b.data;
    if (size) *size = b.size;
    if (flags) *flags = b.flags;
    return OMC_OK;
}
#endif /* OMC__HAS_ZMQ */

#endif /* OMNICONN_IMPLEMENTATION && !OMNICONN_STORE_IMPL_INCLUDED */

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
