/* omniconn.h - v0.1.0 - move stage payloads between processes and hosts - SPDX-License-Identifier: MIT OR Unlicense

    omniconn is a header-only C99 library (it also compiles as C++) that moves the payloads of a
    disaggregated inference pipeline - KV caches, hidden states, named tensors, opaque blobs from a
    few bytes to gigabytes - from one stage to the next. It is the C counterpart of vLLM-Omni's
    OmniConnector family: the same put / get / cleanup / health / close contract, the same metadata
    hand-off through whatever control plane you already have, but with a real allocator, real
    lifetimes and clear errors.

    Do this:
        #define OMNICONN_IMPLEMENTATION
    before you include this file (and any omniconn_*.h companion) in *one* C or C++ file to create
    the implementation. Every other file just includes the headers.

        // in exactly one file:
        #define OMNICONN_IMPLEMENTATION
        #include "omniconn.h"
        #include "omniconn_shm.h"      // optional: the shared-memory connector
        #include "omniconn_rdma.h"     // optional: the verbs RDMA engine

    Build: cc -std=c99 app.c -lpthread        (add -lzmq unless OMNICONN_NO_ZMQ is defined)

================================================================================================
QUICK START
================================================================================================

    Two stages in one process (the same-process connector, OMC_TRANSPORT_LOCAL):

        omc_local_desc desc = {0};                 // zero means default everywhere
        omc_conn* conn = NULL;
        omc_result r = omc_local_create(&desc, &conn);
        if (r != OMC_OK) { fprintf(stderr, "%s\n", omc_result_str(r)); return 1; }

        // producer stage: copy bytes in, get back a small metadata blob
        omc_payload p = {0};
        p.data = hidden_states; p.size = nbytes;
        omc_meta meta = {0};
        r = omc_conn_put(conn, "thinker", "talker", "req-42", &p, &meta);
        // ... forward meta.data / meta.size through your control plane (or not: see get below)

        // consumer stage: a zero-copy view, released when done
        omc_buffer buf = {0};
        r = omc_conn_get(conn, "thinker", "talker", "req-42", meta.data, meta.size,
                         omc_deadline_after_ms(1000), &buf);
        use(buf.data, buf.size);
        omc_buffer_release(&buf);
        omc_meta_free(&meta);
        omc_conn_destroy(conn);

    Every other connector (shared memory, TCP, RDMA) is created by its own *_create function and
    then used through exactly the same omc_conn_* calls.

================================================================================================
STEP BY STEP: THE PIECES OF THE CORE
================================================================================================

    1. The registered-memory allocator (omc_alloc_*)
       Transports register one large region once (with the NIC, as a shared segment, on a GPU)
       and then hand out sub-ranges of it per transfer. omc_alloc manages *offsets* of such a
       region; it never touches the region itself. Its bookkeeping lives in ordinary heap memory
       outside the managed range, so a peer that writes into the region (RDMA WRITE, another
       process mapping the segment) can never corrupt it.
       - Design: two-level segregated fit (TLSF): 64 first-level classes (powers of two) times
         16 second-level classes, one bitmap word per level, so alloc and free are O(1): a few
         bit scans and list splices. Adjacent free blocks coalesce on free.
       - Every allocation is an omc_range {offset, size, generation, slot}. The slot lets free()
         find the block in O(1); the generation (never 0, different for every allocation) makes a
         stale handle - freed and then reallocated - detectable (OMC_ERR_STALE).
       - Freeing a free range gives OMC_ERR_DOUBLE_FREE, a range that was never handed out gives
         OMC_ERR_INVALID_FREE, a range that straddles blocks or lies about its size gives
         OMC_ERR_OVERLAP. The allocator is unchanged after any of these.
       - With thread_safe set, calls are serialised by a mutex and omc_alloc_alloc_wait() blocks
         until enough is freed or a deadline passes (back-pressure instead of failure).

    2. Pools and buffers (omc_pool_*, omc_buffer_*)
       A pool is a memory region plus an allocator. The region is anonymous memory (optionally
       huge pages, optionally mlock()ed: a too-low memlock limit gives OMC_ERR_MEMLOCK with the
       fix in the log), memory you own (OMC_MEMORY_EXTERNAL: a shared segment, a GPU buffer), or
       CUDA device memory with OMNICONN_ENABLE_CUDA. Region hooks (attach/detach) let a transport
       register the region once (the RDMA engine registers it with the NIC there).
       A buffer (omc_buffer) is a value: a pointer and a size, plus who owns the bytes. View it
       as raw bytes, as a typed tensor (omc_buffer_view: dtype + shape, checked against the byte
       count and the alignment), copy it out, and release it (idempotent on the same handle).

    3. Payload frames (omc_frame_*)
       The seed's "generic object" becomes a frame: named segments (tensors with dtype and shape,
       or opaque bytes) laid out in one buffer behind a versioned, little-endian header with a
       CRC-32C. Build it directly inside a pool buffer (zero copy), decode it with zero-copy views.
       The decoder checks every count, offset and length against the buffer it was given.
       A raw single-buffer payload (the seed's fast path) needs no frame.

    4. The connector contract (omc_conn_*)
       put(from_stage, to_stage, key, payload) -> metadata blob (binary; omc_meta_to_text gives a
       printable form for JSON or a text queue). get(from_stage, to_stage, key, metadata or NULL,
       deadline) -> a zero-copy buffer you release (or omc_conn_get_copy into your memory).
       cleanup(key), health(), close() (idempotent) and destroy(). Keys are qualified internally
       by both stage names, so "req-1" from stage 0->1 and from 1->2 never collide.
       - Fan-out: payload.readers = N. The data stays until the N-th get has released its view,
         or until its TTL passes; a TTL never frees a range that a reader still holds.
       - Deadlines: absolute CLOCK_MONOTONIC nanoseconds (omc_deadline_after_ms()). Every call that
         can block takes one; OMC_NO_WAIT and OMC_WAIT_FOREVER are the two extremes.
       - Roles: sender (put), receiver (get), dual (both; the default).
       - Zero-copy put: omc_conn_alloc() a buffer from the connector's own pool, fill it (e.g.
         build a frame in place), put it with payload.buffer set: ownership moves to the
         connector on success.
       The same-process connector (omc_local_create) implements the contract fully: stages in one
       process hand buffers over by reference. It is also the reference for the contract tests
       every other connector must pass.

================================================================================================
CONFIGURATION
================================================================================================

    macro                        default     where        meaning
    ---------------------------  ----------  -----------  ----------------------------------------
    OMNICONN_IMPLEMENTATION      undefined   impl file    emit the implementation of every omniconn
                                                          header included after it
    OMNICONN_STATIC              undefined   everywhere   make all functions static (private copy)
    OMNICONN_API                 extern      everywhere   decoration of public functions
    OMNICONN_NO_SHM              undefined   everywhere   no shared-memory connector
    OMNICONN_NO_ZMQ              undefined   everywhere   no remote transports (no libzmq; implies
                                                          OMNICONN_NO_RDMA: RDMA needs the side channel)
    OMNICONN_NO_RDMA             undefined   everywhere   no verbs RDMA engine
    OMNICONN_NO_RUNTIME_LINKING  undefined   impl file    link libibverbs directly instead of dlopen
    OMNICONN_ENABLE_CUDA         undefined   everywhere   CUDA device memory pools (cuda_runtime_api.h)
    OMNICONN_MALLOC(sz)/FREE(p)  malloc/free impl file    default host allocator (define both or none)
    OMNICONN_ASSERT(c)           assert(c)   impl file    programmer errors only (never run-time ones)
    OMNICONN_DEFAULT_ALIGNMENT   4096        impl file    pool alignment when the desc says 0
    OMNICONN_DEFAULT_TTL_MS      300000      impl file    lifetime of an unconsumed put (seed: 300 s)

    omc_has(OMC_FEATURE_x) says what was compiled in; omc_available(OMC_FEATURE_x, why, n) says
    whether it is usable on this machine now, and if not, why.

================================================================================================
OVERRIDES (HOOKS)
================================================================================================

    Every *_desc struct has an omc_hooks member: alloc_fn/free_fn (host memory for the library's
    own bookkeeping - not the registered pools), log_fn, user_data. All zero means the process
    default, which omc_set_default_hooks() sets (call it before you create anything).
    Metadata blobs (omc_meta) are the one exception: they outlive the connector that made them and
    are freed by omc_meta_free() without hooks, so they come from OMNICONN_MALLOC/OMNICONN_FREE.

================================================================================================
ERRORS & LOGGING
================================================================================================

    Every fallible call returns omc_result: OMC_OK (0) or a negative code, grouped by area
    (-1.. general, -20.. allocator, -40.. formats, -60.. shared memory, -80.. network,
    -100.. RDMA). omc_result_str() names a code. Outputs go through out-parameters.
    The library never prints and never aborts at run time, not even on out-of-memory. It reports
    through your log_fn: (level, item id, message, file, line, user_data). omc_log_stderr is a
    ready-made log_fn that prints to stderr; it is used only if you set it.

================================================================================================
THREAD SAFETY
================================================================================================

    - omc_alloc / omc_pool: thread-safe when desc.thread_safe is set, otherwise single-threaded.
    - omc_conn: every connector is thread-safe (put/get/cleanup/health from any thread); destroy
      must not race with other calls on the same connector.
    - omc_buffer values may be released from any thread, once per handle.
    - frames and metadata helpers are pure functions over caller memory.

================================================================================================
DEPENDENCIES & LINKING
================================================================================================

    Linux, a C99 compiler (gcc or clang: the GCC __atomic builtins are used), pthreads.
    libzmq for the remote transports (link -lzmq, or define OMNICONN_NO_ZMQ). libibverbs is
    loaded at run time by omniconn_rdma.h (or linked with OMNICONN_NO_RUNTIME_LINKING).
    CUDA runtime only with OMNICONN_ENABLE_CUDA.

================================================================================================
WIRE FORMATS (all integers little-endian)
================================================================================================

    Frame (omc_frame_*), version 1:
      header, 32 bytes:
        0   u32  magic 0x46434D4F ("OMCF")
        4   u16  version (1)
        6   u16  header size (32)
        8   u32  segment count (<= OMC_FRAME_MAX_SEGMENTS)
        12  u32  flags: bit 0 = payload CRC present
        16  u64  total frame size in bytes (header + table + names + data + padding)
        24  u32  CRC-32C of header (this field and the next as zero), segment table and names
        28  u32  CRC-32C of every segment's data, in order (0 unless flag bit 0)
      segment table: count entries of 96 bytes each, right after the header:
        0   u64  data offset from the start of the frame (a multiple of 64)
        8   u64  data size in bytes
        16  u32  name offset from the start of the frame
        20  u16  name length in bytes (no terminator stored, 1..255)
        22  u8   kind: 0 = bytes, 1 = tensor
        23  u8   dtype (omc_dtype; 0 for bytes)
        24  u8   ndim (0..8; 0 for bytes, 0 = scalar for tensors)
        25  u8[7] reserved, zero
        32  i64[8] shape (unused dimensions zero)
      names: concatenated after the table; data: each segment at its 64-byte aligned offset.

    Metadata envelope (what put() returns), version 1:
        0   u32  magic 0x4D434D4F ("OMCM")
        4   u8   version (1)
        5   u8   transport (omc_transport)
        6   u16  flags: bit 0 inline (the payload bytes are the body), bit 1 frame
        8   u64  payload size in bytes
        16  u64  producer incarnation (random per process start)
        24  u16  qualified key length (1..OMC_KEY_MAX-1)
        26  u16  reserved, zero
        28  u32  body length (<= OMC_META_MAX_BODY)
        32  u32  CRC-32C of bytes 0..31 (this field zero), key and body
        36  u32  reserved, zero
        40  ...  qualified key bytes, then the transport's body
      The printable form is "omc1." followed by the envelope in unpadded base64url.
      A qualified key is from_stage, 0x1F, to_stage, 0x1F, key (0x1F is not allowed in the parts).

    Transport bodies are documented in each connector's section.

================================================================================================
NON-GOALS (what omniconn does not do)
================================================================================================

    - No object serialisation (no pickle): you move bytes, frames of tensors, or your own format.
    - No service discovery: metadata travels through your control plane; remote connectors only
      need a host and port.
    - No Windows or macOS: Linux only (shared memory, futexes, verbs).

================================================================================================
RECENT REVISIONS
================================================================================================

    0.1.0 (2026-11-22)  first release: allocator, pools, buffers, frames, metadata, the
                        connector contract and the same-process connector.

LICENSE: see the end of this file (MIT or public domain, your choice).
*/
#ifndef OMNICONN_H_INCLUDED
#define OMNICONN_H_INCLUDED

/* ============================================================================================== */
/* [SECTION] Version, platform and feature resolution                                            */
/* ============================================================================================== */

#define OMNICONN_VERSION_MAJOR 0
#define OMNICONN_VERSION_MINOR 1
#define OMNICONN_VERSION_PATCH 0
#define OMNICONN_VERSION_STRING "0.1.0"
/* one number, comparable: (major << 16) | (minor << 8) | patch */
#define OMNICONN_VERSION ((OMNICONN_VERSION_MAJOR << 16) | (OMNICONN_VERSION_MINOR << 8) | OMNICONN_VERSION_PATCH)

/* The implementation needs Linux extensions (MAP_ANONYMOUS, MAP_HUGETLB, getrandom, futex). They
   must be requested before the first system header, so include omniconn.h first in the file that
   defines OMNICONN_IMPLEMENTATION (or build it with -D_GNU_SOURCE). */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(_GNU_SOURCE)
    #define _GNU_SOURCE 1
#endif
#include <stddef.h>
#include <stdint.h>

#if defined(__linux__)
    #define OMC__LINUX 1
#else
    #error "omniconn supports Linux only (shared memory, futexes and verbs are Linux APIs)."
#endif

#if !defined(__GNUC__) && !defined(__clang__)
    #error "omniconn needs gcc or clang (it uses the __atomic builtins)."
#endif

/* the user says what is wanted, the platform what is possible; the code tests only OMC__HAS_* */
#if !defined(OMNICONN_NO_SHM)
    #define OMC__HAS_SHM 1
#else
    #define OMC__HAS_SHM 0
#endif
#if !defined(OMNICONN_NO_ZMQ)
    #define OMC__HAS_ZMQ 1
#else
    #define OMC__HAS_ZMQ 0
#endif
/* the RDMA engine exchanges queue pairs over the ZMQ side channel: no ZMQ, no RDMA */
#if !defined(OMNICONN_NO_RDMA) && OMC__HAS_ZMQ
    #define OMC__HAS_RDMA 1
#else
    #define OMC__HAS_RDMA 0
#endif
#if defined(OMNICONN_ENABLE_CUDA)
    #define OMC__HAS_CUDA 1
#else
    #define OMC__HAS_CUDA 0
#endif

#if defined(OMNICONN_STATIC)
    #define OMNICONN_API_DECL static __attribute__((unused))
#elif !defined(OMNICONN_API)
    #define OMNICONN_API_DECL extern
#else
    #define OMNICONN_API_DECL OMNICONN_API
#endif
#undef OMNICONN_API
#define OMNICONN_API OMNICONN_API_DECL

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================== */
/* [SECTION] Result codes                                                                         */
/* ============================================================================================== */

/* One list, so the enum and omc_result_str() can never disagree. */
#define OMC__RESULT_LIST(X) \
    X(OMC_OK,                    0, "ok") \
    X(OMC_ERR_INVALID_ARG,      -1, "invalid argument") \
    X(OMC_ERR_NO_MEMORY,        -2, "out of host memory") \
    X(OMC_ERR_UNAVAILABLE,      -3, "feature not compiled in or not usable on this machine") \
    X(OMC_ERR_TIMEOUT,          -4, "deadline passed") \
    X(OMC_ERR_CLOSED,           -5, "object is closed") \
    X(OMC_ERR_NOT_FOUND,        -6, "no such key") \
    X(OMC_ERR_EXISTS,           -7, "key already exists") \
    X(OMC_ERR_WRONG_ROLE,       -8, "operation not allowed in this role") \
    X(OMC_ERR_TOO_LARGE,        -9, "size exceeds what fits or what was allowed") \
    X(OMC_ERR_SYSTEM,          -10, "system call failed (see log)") \
    X(OMC_ERR_BUSY,            -11, "resource is in use") \
    X(OMC_ERR_INTERNAL,        -12, "internal inconsistency (a bug: please report)") \
    X(OMC_ERR_POOL_FULL,       -20, "pool has no free range of that size") \
    X(OMC_ERR_DOUBLE_FREE,     -21, "range is already free") \
    X(OMC_ERR_INVALID_FREE,    -22, "range was never handed out") \
    X(OMC_ERR_OVERLAP,         -23, "range overlaps blocks it does not own") \
    X(OMC_ERR_STALE,           -24, "stale handle: generation does not match") \
    X(OMC_ERR_ALIGNMENT,       -25, "misaligned offset, pointer or size") \
    X(OMC_ERR_MEMLOCK,         -26, "memory lock limit too low (see log for the fix)") \
    X(OMC_ERR_MALFORMED,       -40, "malformed data (a length, offset or count is out of bounds)") \
    X(OMC_ERR_VERSION,         -41, "unsupported format or protocol version") \
    X(OMC_ERR_CHECKSUM,        -42, "checksum mismatch") \
    X(OMC_ERR_TYPE,            -43, "dtype, shape or kind does not match") \
    X(OMC_ERR_SHM_FULL,        -60, "shared memory (/dev/shm) is full") \
    X(OMC_ERR_SHM_CHANGED,     -61, "shared segment was replaced, shrunk or is not ours") \
    X(OMC_ERR_PEER_DEAD,       -62, "owner process of the data is gone") \
    X(OMC_ERR_CONNECTION,      -80, "connection failed or was reset") \
    X(OMC_ERR_PROTOCOL,        -81, "peer sent a message that violates the protocol") \
    X(OMC_ERR_AUTH,            -82, "peer failed authentication") \
    X(OMC_ERR_PEER_RESTARTED,  -83, "peer restarted: request belongs to its previous incarnation") \
    X(OMC_ERR_REMOTE,          -84, "peer reported an error (see log)") \
    X(OMC_ERR_RDMA_DEVICE,    -100, "no usable RDMA device or port") \
    X(OMC_ERR_RDMA_QP,        -101, "queue pair transition failed (see log for attributes)") \
    X(OMC_ERR_RDMA_COMPLETION,-102, "work completion with error status") \
    X(OMC_ERR_RDMA_ACCESS,    -103, "remote key or address rejected")

typedef enum omc_result {
#define OMC__X(name, value, text) name = value,
    OMC__RESULT_LIST(OMC__X)
#undef OMC__X
    OMC_RESULT_FORCE_32BIT = 0x7fffffff
} omc_result;

/* The name of a result code ("OMC_ERR_TIMEOUT"); never NULL. */
OMNICONN_API const char* omc_result_name(omc_result r);
/* A one-line description ("deadline passed"); never NULL. */
OMNICONN_API const char* omc_result_str(omc_result r);

/* ============================================================================================== */
/* [SECTION] Logging and hooks                                                                    */
/* ============================================================================================== */

typedef enum omc_log_level {
    OMC_LOG_DEFAULT = 0,        /* in omc_hooks.max_level: deliver ERROR and WARN */
    OMC_LOG_ERROR = 1,
    OMC_LOG_WARN  = 2,
    OMC_LOG_INFO  = 3,
    OMC_LOG_DEBUG = 4
} omc_log_level;

/* Every message the library can log has an id from this list (greppable, stable). */
#define OMC__LOG_ITEMS(X) \
    X(OMC_LOGITEM_OK,                 "ok") \
    X(OMC_LOGITEM_BAD_ARGUMENT,       "a call received an invalid argument") \
    X(OMC_LOGITEM_OUT_OF_MEMORY,      "host memory allocation failed") \
    X(OMC_LOGITEM_SYSCALL_FAILED,     "a system call failed") \
    X(OMC_LOGITEM_ALLOC_FULL,         "allocator has no free range of the requested size") \
    X(OMC_LOGITEM_ALLOC_BAD_FREE,     "allocator rejected a free") \
    X(OMC_LOGITEM_ALLOC_TIMEOUT,      "waited for pool space until the deadline") \
    X(OMC_LOGITEM_POOL_MEMLOCK,       "memory lock limit too low for the pool") \
    X(OMC_LOGITEM_POOL_HUGEPAGES,     "huge pages unavailable for the pool") \
    X(OMC_LOGITEM_POOL_HOOK_FAILED,   "pool region attach hook failed") \
    X(OMC_LOGITEM_CUDA_FAILED,        "a CUDA runtime call failed") \
    X(OMC_LOGITEM_BUFFER_BAD_VIEW,    "buffer view does not match its bytes") \
    X(OMC_LOGITEM_FRAME_MALFORMED,    "frame failed validation") \
    X(OMC_LOGITEM_META_MALFORMED,     "metadata failed validation") \
    X(OMC_LOGITEM_CONN_CLOSED,        "call on a closed connector") \
    X(OMC_LOGITEM_CONN_ROLE,          "call not allowed in the connector's role") \
    X(OMC_LOGITEM_CONN_KEY,           "key is invalid or too long") \
    X(OMC_LOGITEM_CONN_TTL_RECLAIM,   "reclaimed an unconsumed payload after its TTL") \
    X(OMC_LOGITEM_CONN_ERROR,         "connector operation failed") \
    X(OMC_LOGITEM_CONFIG,             "pipeline configuration problem (file:line:column in the message)") \
    X(OMC_LOGITEM_PIPELINE,           "transfer-id map or stream event") \
    X(OMC_LOGITEM_SHM,                "shared-memory connector event") \
    X(OMC_LOGITEM_NET,                "side channel or TCP data plane event") \
    X(OMC_LOGITEM_RDMA,               "RDMA engine event")

typedef enum omc_log_item {
#define OMC__X(name, text) name,
    OMC__LOG_ITEMS(OMC__X)
#undef OMC__X
    OMC_LOGITEM_COUNT
} omc_log_item;

typedef void (*omc_log_fn)(omc_log_level level, omc_log_item item, const char* message,
                           const char* file, int line, void* user_data);

/* Host-memory and logging hooks. All zero = the process default (see omc_set_default_hooks).
   alloc_fn and free_fn go together: set both or neither. */
typedef struct omc_hooks {
    void* (*alloc_fn)(size_t size, void* user_data);
    void  (*free_fn)(void* ptr, void* user_data);
    omc_log_fn log_fn;              /* NULL = silent */
    omc_log_level max_level;        /* most verbose level delivered; 0 = OMC_LOG_WARN */
    void* user_data;
} omc_hooks;

/* Set the hooks used by every desc whose hooks are all zero. Not thread-safe: call it once at
   start-up, before creating anything. Passing NULL restores malloc/free and silence. */
OMNICONN_API void omc_set_default_hooks(const omc_hooks* hooks);
/* A ready-made log_fn that writes one line to stderr. Only used if you set it. */
OMNICONN_API void omc_log_stderr(omc_log_level level, omc_log_item item, const char* message,
                                 const char* file, int line, void* user_data);
/* The short description of a log item; never NULL. */
OMNICONN_API const char* omc_log_item_str(omc_log_item item);

/* ============================================================================================== */
/* [SECTION] Version, features, time                                                              */
/* ============================================================================================== */

/* OMNICONN_VERSION of the implementation that was compiled (may differ from the header you see). */
OMNICONN_API uint32_t omc_version(void);
OMNICONN_API const char* omc_version_string(void);

typedef enum omc_feature {
    OMC_FEATURE_LOCAL = 0,     /* same-process connector: always */
    OMC_FEATURE_SHM,           /* shared-memory connector */
    OMC_FEATURE_ZMQ,           /* ZMQ side channel + TCP data plane */
    OMC_FEATURE_RDMA,          /* verbs RDMA engine */
    OMC_FEATURE_CUDA,          /* CUDA device memory pools */
    OMC_FEATURE_COUNT
} omc_feature;

/* 1 if the feature was compiled in, else 0. */
OMNICONN_API int omc_has(omc_feature feature);
/* OMC_OK if the feature is usable on this machine now; otherwise OMC_ERR_UNAVAILABLE and a reason
   in why (if why is not NULL). May probe the system (e.g. dlopen libibverbs). */
OMNICONN_API omc_result omc_available(omc_feature feature, char* why, size_t why_size);

/* Time is CLOCK_MONOTONIC in nanoseconds. Deadlines are absolute times on that clock. */
typedef int64_t omc_time_ns;
#define OMC_NO_WAIT ((omc_time_ns)0)
#define OMC_WAIT_FOREVER ((omc_time_ns)INT64_MAX)
OMNICONN_API omc_time_ns omc_now_ns(void);
/* now + ms (ms < 0 means forever). */
OMNICONN_API omc_time_ns omc_deadline_after_ms(int64_t ms);

/* A random 64-bit id chosen once per process start (peers use it to notice restarts). */
OMNICONN_API uint64_t omc_incarnation(void);

/* ============================================================================================== */
/* [SECTION] The registered-memory allocator                                                     */
/* ============================================================================================== */

/* One allocation: a sub-range of the managed region. Treat it as an opaque handle you may copy. */
typedef struct omc_range {
    uint64_t offset;        /* bytes from the start of the region, a multiple of the alignment */
    uint64_t size;          /* the size that was requested */
    uint32_t generation;    /* never 0 for a real allocation */
    uint32_t slot;          /* the allocator's bookkeeping index, for O(1) free */
} omc_range;

typedef struct omc_alloc_desc {
    uint64_t capacity;      /* bytes managed (required, > 0) */
    uint64_t alignment;     /* power of two; 0 = OMNICONN_DEFAULT_ALIGNMENT (4096) */
    int thread_safe;        /* serialise calls with a mutex; needed for omc_alloc_alloc_wait */
    omc_hooks hooks;
} omc_alloc_desc;

typedef struct omc_alloc_stats {
    uint64_t capacity;          /* bytes managed (rounded down to the alignment) */
    uint64_t bytes_in_use;      /* bytes in allocated blocks (rounded up to the alignment) */
    uint64_t bytes_requested;   /* what callers asked for */
    uint64_t live_allocations;
    uint64_t largest_free;      /* the largest single range that could be allocated now */
    uint64_t free_blocks;
    double   fragmentation;     /* 1 - largest_free / free bytes; 0 = one free block */
} omc_alloc_stats;

typedef struct omc_alloc omc_alloc;

OMNICONN_API omc_result omc_alloc_create(const omc_alloc_desc* desc, omc_alloc** out);
OMNICONN_API void       omc_alloc_destroy(omc_alloc* a);
/* Allocate size bytes (> 0). OMC_ERR_POOL_FULL if no free range fits now, OMC_ERR_TOO_LARGE if
   it could never fit. O(1). */
OMNICONN_API omc_result omc_alloc_alloc(omc_alloc* a, uint64_t size, omc_range* out);
/* Like omc_alloc_alloc, but waits (thread-safe mode only) until space is freed or the deadline
   passes (OMC_ERR_TIMEOUT). */
OMNICONN_API omc_result omc_alloc_alloc_wait(omc_alloc* a, uint64_t size, omc_time_ns deadline, omc_range* out);
/* Give a range back. O(1) for a valid handle. Errors (allocator unchanged): OMC_ERR_DOUBLE_FREE,
   OMC_ERR_INVALID_FREE, OMC_ERR_OVERLAP, OMC_ERR_STALE. */
OMNICONN_API omc_result omc_alloc_free(omc_alloc* a, omc_range r);
/* OMC_OK if r is a live allocation with that generation; the free() error it would get otherwise. */
OMNICONN_API omc_result omc_alloc_check(omc_alloc* a, omc_range r);
OMNICONN_API void       omc_alloc_get_stats(omc_alloc* a, omc_alloc_stats* out);
/* Walk every block and check every invariant (O(n), for tests and debugging). */
OMNICONN_API omc_result omc_alloc_validate(omc_alloc* a);
/* The alignment in force (a power of two). */
OMNICONN_API uint64_t   omc_alloc_alignment(const omc_alloc* a);

/* ============================================================================================== */
/* [SECTION] Pools                                                                                */
/* ============================================================================================== */

typedef enum omc_memory_kind {
    OMC_MEMORY_DEFAULT = 0,     /* = OMC_MEMORY_HOST */
    OMC_MEMORY_HOST,            /* anonymous memory mapped by the pool */
    OMC_MEMORY_EXTERNAL,        /* desc.external_base: memory you own (a shared segment, ...) */
    OMC_MEMORY_CUDA             /* cudaMalloc'd device memory (OMNICONN_ENABLE_CUDA) */
} omc_memory_kind;

typedef struct omc_pool omc_pool;

/* Called once when the region is ready and once before it goes away: the place where a transport
   registers the region (ibv_reg_mr, cuFile, ...). A failing attach fails omc_pool_create. */
typedef struct omc_region_hooks {
    omc_result (*attach)(omc_pool* pool, void* base, uint64_t size, void* user_data);
    void       (*detach)(omc_pool* pool, void* base, uint64_t size, void* user_data);
    void* user_data;
} omc_region_hooks;

typedef struct omc_pool_desc {
    uint64_t size;                  /* bytes (required) */
    uint64_t alignment;             /* of every buffer; 0 = 4096 */
    omc_memory_kind memory;
    void* external_base;            /* OMC_MEMORY_EXTERNAL only */
    int hugepages;                  /* host: MAP_HUGETLB (fails clearly if none are reserved) */
    int lock_memory;                /* host: mlock (fails clearly if RLIMIT_MEMLOCK is too low) */
    int prefault;                   /* host: touch every page now (no page faults later) */
    int cuda_device;                /* OMC_MEMORY_CUDA: device ordinal (0 is valid) */
    int thread_safe;                /* see omc_alloc_desc */
    omc_region_hooks region;
    omc_hooks hooks;
} omc_pool_desc;

OMNICONN_API omc_result omc_pool_create(const omc_pool_desc* desc, omc_pool** out);
/* Runs detach, unmaps what the pool mapped. Buffers still out become dangling: release first. */
OMNICONN_API void       omc_pool_destroy(omc_pool* pool);
OMNICONN_API void*      omc_pool_base(const omc_pool* pool);
OMNICONN_API uint64_t   omc_pool_size(const omc_pool* pool);
OMNICONN_API omc_memory_kind omc_pool_memory(const omc_pool* pool);
OMNICONN_API omc_alloc* omc_pool_allocator(omc_pool* pool);
/* 1 if [ptr, ptr+len) lies inside the pool's region. */
OMNICONN_API int        omc_pool_contains(const omc_pool* pool, const void* ptr, uint64_t len);

/* ============================================================================================== */
/* [SECTION] Buffers and typed views                                                             */
/* ============================================================================================== */

typedef enum omc_dtype {
    OMC_DTYPE_INVALID = 0,
    OMC_DTYPE_U8, OMC_DTYPE_I8, OMC_DTYPE_U16, OMC_DTYPE_I16,
    OMC_DTYPE_U32, OMC_DTYPE_I32, OMC_DTYPE_U64, OMC_DTYPE_I64,
    OMC_DTYPE_F16, OMC_DTYPE_BF16, OMC_DTYPE_F32, OMC_DTYPE_F64,
    OMC_DTYPE_BOOL,
    OMC_DTYPE_COUNT
} omc_dtype;

#define OMC_MAX_DIMS 8

/* bytes per item (0 for an invalid dtype) and the name ("f32") */
OMNICONN_API size_t      omc_dtype_size(omc_dtype dtype);
OMNICONN_API const char* omc_dtype_name(omc_dtype dtype);

typedef struct omc_buffer omc_buffer;
/* How a buffer's bytes go back to whoever owns them (set by connectors; see omc_buffer). */
typedef omc_result (*omc_release_fn)(omc_buffer* buffer);

/* A buffer is a value handle: a pointer, a size, and who owns the bytes. Zeroed = empty.
   Buffers from a pool (omc_pool_alloc_buffer, omc_conn_alloc) have pool and range set; buffers
   returned by a connector's get may be views into memory the connector owns (release_fn set). */
struct omc_buffer {
    void* data;                 /* first byte (a device pointer for CUDA pools), NULL if empty */
    uint64_t size;              /* bytes */
    omc_pool* pool;             /* pool the bytes live in, or NULL */
    omc_range range;            /* the allocation inside pool */
    uint32_t flags;             /* OMC_BUFFER_* */
    omc_release_fn release_fn;  /* if set, release calls this instead of freeing range in pool */
    void* owner;                /* for release_fn */
    uint64_t cookie[2];         /* for release_fn */
};

#define OMC_BUFFER_FRAME     0x1u   /* the bytes are an omc frame */
#define OMC_BUFFER_READONLY  0x2u   /* a shared view: do not write (other readers see it) */

OMNICONN_API omc_result omc_pool_alloc_buffer(omc_pool* pool, uint64_t size, omc_buffer* out);
OMNICONN_API omc_result omc_pool_alloc_buffer_wait(omc_pool* pool, uint64_t size, omc_time_ns deadline, omc_buffer* out);
/* Give the bytes back and zero the handle. Releasing an empty handle is OMC_OK (idempotent);
   releasing a copy of an already released handle is detected (OMC_ERR_STALE / DOUBLE_FREE). */
OMNICONN_API omc_result omc_buffer_release(omc_buffer* buffer);
/* Copy len bytes at offset out of the buffer (works for CUDA pools too). */
OMNICONN_API omc_result omc_buffer_copy_out(const omc_buffer* buffer, uint64_t offset, void* dst, uint64_t len);

typedef struct omc_tensor_view {
    void* data;
    omc_dtype dtype;
    uint32_t ndim;
    int64_t shape[OMC_MAX_DIMS];
    uint64_t nbytes;
} omc_tensor_view;

/* Interpret nbytes(dtype, shape) bytes at byte_offset as a tensor. Checks: every dimension >= 0,
   no overflow, the bytes fit in the buffer (OMC_ERR_TOO_LARGE), and the address is aligned to the
   item size (OMC_ERR_ALIGNMENT). require_exact: the view must cover the buffer exactly
   (OMC_ERR_TYPE otherwise). */
OMNICONN_API omc_result omc_buffer_view(const omc_buffer* buffer, uint64_t byte_offset, omc_dtype dtype,
                                        uint32_t ndim, const int64_t* shape, int require_exact,
                                        omc_tensor_view* out);
/* Bytes of a dense tensor; OMC_ERR_INVALID_ARG on a bad dtype/shape, OMC_ERR_TOO_LARGE on overflow. */
OMNICONN_API omc_result omc_tensor_nbytes(omc_dtype dtype, uint32_t ndim, const int64_t* shape, uint64_t* out);

/* ============================================================================================== */
/* [SECTION] Payload frames                                                                       */
/* ============================================================================================== */

#define OMC_FRAME_MAGIC 0x46434D4Fu
#define OMC_FRAME_VERSION 1
#define OMC_FRAME_HEADER_SIZE 32
#define OMC_FRAME_ENTRY_SIZE 96
#define OMC_FRAME_DATA_ALIGN 64
#define OMC_FRAME_MAX_SEGMENTS 4096
#define OMC_FRAME_MAX_NAME 255
#define OMC_FRAME_FLAG_PAYLOAD_CRC 0x1u

typedef enum omc_segment_kind { OMC_SEGMENT_BYTES = 0, OMC_SEGMENT_TENSOR = 1 } omc_segment_kind;

/* What to put in a frame. For a tensor set dtype, ndim and shape (size is derived; if you set it,
   it must agree). For bytes leave dtype 0 and set size. data, if not NULL, is copied in; if NULL
   the segment is left for you to fill in place (omc_frame_build hands back its address). */
typedef struct omc_segment_desc {
    const char* name;           /* 1..255 bytes, unique within the frame */
    omc_dtype dtype;
    uint32_t ndim;
    int64_t shape[OMC_MAX_DIMS];
    uint64_t size;
    const void* data;
} omc_segment_desc;

/* A decoded segment: a zero-copy view into the frame's buffer. */
typedef struct omc_segment {
    const char* name;           /* NOT NUL-terminated: use name_len */
    uint32_t name_len;
    omc_segment_kind kind;
    omc_dtype dtype;
    uint32_t ndim;
    int64_t shape[OMC_MAX_DIMS];
    void* data;
    uint64_t size;
} omc_segment;

/* A decoded frame (all checks done at decode; accessing segments is then safe). */
typedef struct omc_frame {
    uint8_t* base;
    uint64_t size;
    uint32_t count;
    uint32_t flags;
} omc_frame;

/* Total bytes a frame with these segments needs. */
OMNICONN_API omc_result omc_frame_size(const omc_segment_desc* segs, uint32_t count, uint64_t* out_size);
/* Lay the frame out in dst (dst_size >= omc_frame_size). flags: OMC_FRAME_FLAG_PAYLOAD_CRC to
   checksum the data too (then call omc_frame_seal after filling segments in place).
   seg_data_out (optional, count entries) receives each segment's address for in-place filling. */
OMNICONN_API omc_result omc_frame_build(void* dst, uint64_t dst_size, const omc_segment_desc* segs,
                                        uint32_t count, uint32_t flags, void** seg_data_out, uint64_t* out_size);
/* Recompute the payload checksum after in-place filling (no-op without the CRC flag). */
OMNICONN_API omc_result omc_frame_seal(void* frame, uint64_t size);
/* Validate and decode. verify_payload: also check the payload CRC (reads every byte). */
OMNICONN_API omc_result omc_frame_decode(const void* src, uint64_t size, int verify_payload, omc_frame* out);
OMNICONN_API omc_result omc_frame_segment(const omc_frame* frame, uint32_t index, omc_segment* out);
/* Find a segment by name: OMC_ERR_NOT_FOUND if absent. */
OMNICONN_API omc_result omc_frame_find(const omc_frame* frame, const char* name, omc_segment* out);

/* ============================================================================================== */
/* [SECTION] Metadata                                                                             */
/* ============================================================================================== */

typedef enum omc_transport {
    OMC_TRANSPORT_NONE = 0,
    OMC_TRANSPORT_LOCAL = 1,
    OMC_TRANSPORT_SHM = 2,
    OMC_TRANSPORT_TCP = 3,
    OMC_TRANSPORT_RDMA = 4
} omc_transport;

#define OMC_META_MAGIC 0x4D434D4Fu
#define OMC_META_VERSION 1
#define OMC_META_HEADER_SIZE 40
#define OMC_KEY_MAX 256                          /* qualified key, terminator included */
#define OMC_META_MAX_BODY ((uint32_t)(1u << 20) + 4096u)
#define OMC_META_MAX_SIZE (OMC_META_HEADER_SIZE + OMC_KEY_MAX + OMC_META_MAX_BODY)
#define OMC_META_FLAG_INLINE 0x1u
#define OMC_META_FLAG_FRAME  0x2u
#define OMC_META_TEXT_PREFIX "omc1."

/* The blob put() returns. Owned by you: omc_meta_free() it. */
typedef struct omc_meta {
    uint8_t* data;
    uint32_t size;
} omc_meta;

/* What an envelope says (pointers into the blob you passed). */
typedef struct omc_meta_info {
    omc_transport transport;
    uint32_t flags;
    uint64_t data_size;
    uint64_t incarnation;
    const char* key;            /* qualified key, NOT NUL-terminated */
    uint32_t key_len;
    const uint8_t* body;
    uint32_t body_len;
} omc_meta_info;

OMNICONN_API void       omc_meta_free(omc_meta* meta);
/* Validate an envelope (bounds, version, CRC) and describe it. */
OMNICONN_API omc_result omc_meta_parse(const void* data, size_t size, omc_meta_info* out);
/* Printable form: "omc1." + base64url. out_size >= omc_meta_text_size(size). */
OMNICONN_API size_t     omc_meta_text_size(size_t meta_size);
OMNICONN_API omc_result omc_meta_to_text(const void* data, size_t size, char* out, size_t out_size);
/* Parse the printable form back into a binary blob (validated). */
OMNICONN_API omc_result omc_meta_from_text(const char* text, size_t len, omc_meta* out);

/* ============================================================================================== */
/* [SECTION] The connector contract                                                              */
/* ============================================================================================== */

typedef struct omc_conn omc_conn;

typedef enum omc_role {
    OMC_ROLE_DEFAULT = 0,       /* = OMC_ROLE_DUAL */
    OMC_ROLE_SENDER,            /* put only (an outgoing edge) */
    OMC_ROLE_RECEIVER,          /* get only (an incoming edge) */
    OMC_ROLE_DUAL               /* both */
} omc_role;

#define OMC_PAYLOAD_FRAME 0x1u   /* the bytes are an omc frame (receivers see OMC_BUFFER_FRAME) */

typedef struct omc_payload {
    const void* data;           /* copy path: size bytes at data are copied into the connector */
    uint64_t size;
    omc_buffer* buffer;         /* zero-copy path: a buffer from omc_conn_alloc() on this connector,
                                   filled by you. On OMC_OK the connector owns it and *buffer is
                                   zeroed; on error it is still yours. data/size are ignored. */
    uint32_t flags;             /* OMC_PAYLOAD_* */
    uint32_t readers;           /* fan-out: how many gets will read it; 0 = 1 */
    int64_t ttl_ms;             /* unconsumed lifetime; 0 = connector default, < 0 = no TTL */
} omc_payload;

typedef enum omc_conn_state {
    OMC_CONN_HEALTHY = 0,
    OMC_CONN_DEGRADED,          /* working, but some peer or resource is failing (see last_error) */
    OMC_CONN_CLOSED
} omc_conn_state;

typedef struct omc_health {
    omc_conn_state state;
    omc_transport transport;
    omc_role role;
    uint64_t puts, gets, releases;
    uint64_t bytes_put, bytes_got;
    uint64_t errors, timeouts, ttl_reclaims;
    uint64_t live_entries;      /* puts not yet fully consumed */
    uint64_t pool_capacity, pool_in_use;
    omc_result last_error;
    char last_error_text[160];
} omc_health;

/* Put a payload under (from_stage, to_stage, key). meta_out receives the metadata blob (may be
   NULL if you will only use metadata-less gets). OMC_ERR_EXISTS if the key is still live. */
OMNICONN_API omc_result omc_conn_put(omc_conn* conn, const char* from_stage, const char* to_stage,
                                     const char* key, const omc_payload* payload, omc_meta* meta_out);
/* Get a payload: with the metadata from put, or with meta = NULL (wait for the key to appear).
   Blocks until the deadline at most (OMC_ERR_TIMEOUT). out is a zero-copy view: release it. */
OMNICONN_API omc_result omc_conn_get(omc_conn* conn, const char* from_stage, const char* to_stage,
                                     const char* key, const void* meta, size_t meta_size,
                                     omc_time_ns deadline, omc_buffer* out);
/* Like get, but copies into dst. If the payload is larger than dst_size it is NOT consumed:
   OMC_ERR_TOO_LARGE and *out_size = the size needed. */
OMNICONN_API omc_result omc_conn_get_copy(omc_conn* conn, const char* from_stage, const char* to_stage,
                                          const char* key, const void* meta, size_t meta_size,
                                          omc_time_ns deadline, void* dst, uint64_t dst_size, uint64_t* out_size);
/* A buffer from the connector's own pool for a zero-copy put (waits for space until deadline). */
OMNICONN_API omc_result omc_conn_alloc(omc_conn* conn, uint64_t size, omc_time_ns deadline, omc_buffer* out);
/* Drop a put that is no longer wanted (readers holding views keep their bytes until release). */
OMNICONN_API omc_result omc_conn_cleanup(omc_conn* conn, const char* from_stage, const char* to_stage, const char* key);
OMNICONN_API omc_result omc_conn_health(omc_conn* conn, omc_health* out);
/* Reclaim puts whose TTL has passed (connectors also do this on their own); returns how many. */
OMNICONN_API uint64_t   omc_conn_sweep(omc_conn* conn);
/* Stop everything and free what the connector owns. Idempotent. Views still held stay valid
   until released; later calls return OMC_ERR_CLOSED. */
OMNICONN_API void       omc_conn_close(omc_conn* conn);
/* close + free the handle (the memory goes when the last view is released). */
OMNICONN_API void       omc_conn_destroy(omc_conn* conn);
OMNICONN_API omc_transport omc_conn_transport(const omc_conn* conn);
/* Build the qualified key ("from\x1Fto\x1Fkey"): OMC_ERR_INVALID_ARG if a part contains 0x1F or
   the result does not fit in OMC_KEY_MAX. */
OMNICONN_API omc_result omc_qualify_key(const char* from_stage, const char* to_stage, const char* key,
                                        char out[OMC_KEY_MAX], uint32_t* out_len);

/* ============================================================================================== */
/* [SECTION] The same-process connector                                                          */
/* ============================================================================================== */

/* Stages that live in one process hand over buffers by reference (sglang-omni's LOCAL_OBJECT).
   Copy-path puts are copied into the connector's pool; zero-copy puts hand the buffer over.
   Metadata body (16 bytes): u64 entry id, u64 pool generation of the entry. */
typedef struct omc_local_desc {
    omc_role role;
    uint64_t pool_size;         /* 0 = 256 MiB of address space (pages come on first touch) */
    uint64_t alignment;         /* 0 = 4096 */
    int64_t default_ttl_ms;     /* 0 = OMNICONN_DEFAULT_TTL_MS, < 0 = no TTL */
    omc_hooks hooks;
} omc_local_desc;

OMNICONN_API omc_result omc_local_create(const omc_local_desc* desc, omc_conn** out);

/* ============================================================================================== */
/* [SECTION] The remote connector: ZMQ side channel and TCP data plane                           */
/* ============================================================================================== */
#if OMC__HAS_ZMQ
#include "wip/net_decl.h"   /* TEMPORARY during development: merged into this file */
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

/* -------------------------------- stop here if you only need the API ------------------------- */
#endif /* OMNICONN_H_INCLUDED */

/* ============================================================================================== */
/*                                                                                                */
/*                                     IMPLEMENTATION                                             */
/*                                                                                                */
/* ============================================================================================== */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_IMPL_INCLUDED)
#define OMNICONN_IMPL_INCLUDED

/* ============================================================================================== */
/* [SECTION] Implementation: configuration and system headers                                    */
/* ============================================================================================== */

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>

#if OMC__HAS_CUDA
    #include <cuda_runtime_api.h>
#endif

#if defined(OMNICONN_MALLOC) != defined(OMNICONN_FREE)
    #error "omniconn: define both OMNICONN_MALLOC and OMNICONN_FREE, or neither."
#endif
#ifndef OMNICONN_MALLOC
    #define OMNICONN_MALLOC(sz) malloc(sz)
    #define OMNICONN_FREE(p) free(p)
#endif
#ifndef OMNICONN_ASSERT
    #include <assert.h>
    #define OMNICONN_ASSERT(c) assert(c)
#endif
#ifndef OMNICONN_DEFAULT_ALIGNMENT
    #define OMNICONN_DEFAULT_ALIGNMENT 4096u
#endif
#ifndef OMNICONN_DEFAULT_TTL_MS
    #define OMNICONN_DEFAULT_TTL_MS 300000
#endif
#ifndef OMNICONN_LOCAL_POOL_SIZE
    #define OMNICONN_LOCAL_POOL_SIZE ((uint64_t)256 << 20)
#endif

/* every private function is static and may go unused in some feature combination */
#define OMC__PRIVATE static __attribute__((unused))
#define OMC__NIL 0xFFFFFFFFu

#define omc__load(p)        __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define omc__store(p, v)    __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define omc__add(p, v)      __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define omc__sub(p, v)      __atomic_sub_fetch((p), (v), __ATOMIC_ACQ_REL)
#define omc__min(a, b)      ((a) < (b) ? (a) : (b))
#define omc__max(a, b)      ((a) > (b) ? (a) : (b))

/* ============================================================================================== */
/* [SECTION] Implementation: result codes, log items, hooks                                      */
/* ============================================================================================== */

OMNICONN_API const char* omc_result_name(omc_result r) {
    switch (r) {
#define OMC__X(name, value, text) case name: return #name;
        OMC__RESULT_LIST(OMC__X)
#undef OMC__X
        default: return "OMC_ERR_UNKNOWN";
    }
}

OMNICONN_API const char* omc_result_str(omc_result r) {
    switch (r) {
#define OMC__X(name, value, text) case name: return text;
        OMC__RESULT_LIST(OMC__X)
#undef OMC__X
        default: return "unknown result code";
    }
}

static const char* omc__log_item_texts[OMC_LOGITEM_COUNT] = {
#define OMC__X(name, text) text,
    OMC__LOG_ITEMS(OMC__X)
#undef OMC__X
};

OMNICONN_API const char* omc_log_item_str(omc_log_item item) {
    if ((int)item < 0 || item >= OMC_LOGITEM_COUNT) return "unknown log item";
    return omc__log_item_texts[item];
}

static omc_hooks omc__default_hooks; /* zero: malloc/free, silent */

OMNICONN_API void omc_set_default_hooks(const omc_hooks* hooks) {
    if (hooks) omc__default_hooks = *hooks;
    else memset(&omc__default_hooks, 0, sizeof(omc__default_hooks));
}

OMNICONN_API void omc_log_stderr(omc_log_level level, omc_log_item item, const char* message,
                                 const char* file, int line, void* user_data) {
    static const char* names[] = { "log", "error", "warn", "info", "debug" };
    const char* lv = ((int)level >= 0 && (int)level <= 4) ? names[level] : "log";
    (void)user_data;
    fprintf(stderr, "omniconn %s [%s] %s (%s:%d)\n", lv, omc_log_item_str(item), message ? message : "",
            file ? file : "?", line);
}

/* A desc's hooks if it set any, else the process default; alloc/free fall back to the libc pair. */
OMC__PRIVATE omc_hooks omc__hooks_resolve(const omc_hooks* in) {
    omc_hooks h;
    if (in && (in->alloc_fn || in->free_fn || in->log_fn || in->user_data || in->max_level)) h = *in;
    else h = omc__default_hooks;
    if (!h.alloc_fn || !h.free_fn) { h.alloc_fn = NULL; h.free_fn = NULL; }
    if (h.max_level == OMC_LOG_DEFAULT) h.max_level = OMC_LOG_WARN;
    return h;
}

OMC__PRIVATE void* omc__malloc(const omc_hooks* h, size_t size) {
    if (size == 0) size = 1;
    if (h && h->alloc_fn) return h->alloc_fn(size, h->user_data);
    return OMNICONN_MALLOC(size);
}

OMC__PRIVATE void* omc__calloc(const omc_hooks* h, size_t size) {
    void* p = omc__malloc(h, size);
    if (p) memset(p, 0, size);
    return p;
}

OMC__PRIVATE void omc__free(const omc_hooks* h, void* p) {
    if (!p) return;
    if (h && h->free_fn) h->free_fn(p, h->user_data);
    else OMNICONN_FREE(p);
}

#if defined(__GNUC__)
__attribute__((format(printf, 6, 7)))
#endif
OMC__PRIVATE void omc__log(const omc_hooks* h, omc_log_level level, omc_log_item item,
                           const char* file, int line, const char* fmt, ...) {
    char msg[512];
    va_list ap;
    if (!h || !h->log_fn || level > h->max_level) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    h->log_fn(level, item, msg, file, line, h->user_data);
}
#define OMC__LOG(h, level, item, ...) omc__log((h), (level), (item), __FILE__, __LINE__, __VA_ARGS__)

/* ============================================================================================== */
/* [SECTION] Implementation: version, time, randomness                                           */
/* ============================================================================================== */

OMNICONN_API uint32_t omc_version(void) { return (uint32_t)OMNICONN_VERSION; }
OMNICONN_API const char* omc_version_string(void) { return OMNICONN_VERSION_STRING; }

OMNICONN_API omc_time_ns omc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (omc_time_ns)ts.tv_sec * 1000000000LL + (omc_time_ns)ts.tv_nsec;
}

OMNICONN_API omc_time_ns omc_deadline_after_ms(int64_t ms) {
    omc_time_ns now = omc_now_ns();
    if (ms < 0 || ms > (INT64_MAX - now) / 1000000LL) return OMC_WAIT_FOREVER;
    return now + ms * 1000000LL;
}

/* Wait on cv until deadline (CLOCK_MONOTONIC; the cond must have been created with that clock).
   Returns 0 when woken, ETIMEDOUT when the deadline passed. */
OMC__PRIVATE int omc__cond_wait_until(pthread_cond_t* cv, pthread_mutex_t* mu, omc_time_ns deadline) {
    struct timespec ts;
    if (deadline == OMC_WAIT_FOREVER) return pthread_cond_wait(cv, mu);
    if (deadline <= omc_now_ns()) return ETIMEDOUT;
    ts.tv_sec = (time_t)(deadline / 1000000000LL);
    ts.tv_nsec = (long)(deadline % 1000000000LL);
    return pthread_cond_timedwait(cv, mu, &ts);
}

OMC__PRIVATE int omc__cond_init_monotonic(pthread_cond_t* cv) {
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc) return rc;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

/* Fill buf with random bytes: getrandom(2), falling back to /dev/urandom, then to the clock
   (ids only need to differ between process starts, not to be secret). */
OMC__PRIVATE void omc__random_bytes(void* buf, size_t len) {
    uint8_t* p = (uint8_t*)buf;
    size_t got = 0;
#if defined(SYS_getrandom)
    while (got < len) {
        long n = syscall(SYS_getrandom, p + got, len - got, 0);
        if (n <= 0) { if (n < 0 && errno == EINTR) continue; break; }
        got += (size_t)n;
    }
#endif
    if (got < len) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            while (got < len) {
                ssize_t n = read(fd, p + got, len - got);
                if (n <= 0) { if (n < 0 && errno == EINTR) continue; break; }
                got += (size_t)n;
            }
            close(fd);
        }
    }
    while (got < len) { /* last resort: mix the clock and pid */
        uint64_t x = (uint64_t)omc_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)got * 0x9E3779B97F4A7C15ull;
        x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;
        p[got] = (uint8_t)x; got++;
    }
}

OMC__PRIVATE uint64_t omc__random_u64(void) {
    uint64_t x = 0;
    omc__random_bytes(&x, sizeof(x));
    return x;
}

static uint64_t omc__incarnation_id;
static pthread_once_t omc__incarnation_once = PTHREAD_ONCE_INIT;
static void omc__incarnation_new(void) {
    uint64_t x;
    do { x = omc__random_u64(); } while (x == 0);
    omc__incarnation_id = x;
}
/* A fork()ed child is a new process start too (worker pools fork): it gets its own id, or peers
   could not tell a restarted worker from its predecessor. */
static void omc__incarnation_init(void) {
    omc__incarnation_new();
    pthread_atfork(NULL, NULL, omc__incarnation_new);
}
OMNICONN_API uint64_t omc_incarnation(void) {
    pthread_once(&omc__incarnation_once, omc__incarnation_init);
    return omc__incarnation_id;
}

/* ============================================================================================== */
/* [SECTION] Implementation: little-endian codecs, CRC-32C, base64url                           */
/* ============================================================================================== */

/* Byte by byte, so the wire format is little-endian on every host and no access is unaligned. */
OMC__PRIVATE void omc__put_u16(uint8_t* p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
OMC__PRIVATE void omc__put_u32(uint8_t* p, uint32_t v) { int i; for (i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
OMC__PRIVATE void omc__put_u64(uint8_t* p, uint64_t v) { int i; for (i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
OMC__PRIVATE uint16_t omc__get_u16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
OMC__PRIVATE uint32_t omc__get_u32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
OMC__PRIVATE uint64_t omc__get_u64(const uint8_t* p) { return (uint64_t)omc__get_u32(p) | ((uint64_t)omc__get_u32(p + 4) << 32); }

/* CRC-32C (Castagnoli, the iSCSI/ext4 polynomial): the SSE4.2 crc32 instruction when the CPU
   has it (several GB/s), else a table (a few hundred MB/s). */
static uint32_t omc__crc_table[256];
static pthread_once_t omc__crc_once = PTHREAD_ONCE_INIT;
static int omc__crc_hw;
static void omc__crc_init(void) {
    uint32_t i, j;
    for (i = 0; i < 256; i++) {
        uint32_t c = i;
        for (j = 0; j < 8; j++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        omc__crc_table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    omc__crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t omc__crc32c_hw(uint32_t crc, const uint8_t* p, size_t n) {
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) { c = __builtin_ia32_crc32qi((uint32_t)c, *p++); n--; }
    while (n >= 8) { uint64_t v; memcpy(&v, p, 8); c = __builtin_ia32_crc32di(c, v); p += 8; n -= 8; }
    while (n) { c = __builtin_ia32_crc32qi((uint32_t)c, *p++); n--; }
    return (uint32_t)c;
}
#endif

/* Continue a CRC: start with crc = 0; the pre/post inversion is done inside. */
OMC__PRIVATE uint32_t omc__crc32c(uint32_t crc, const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    pthread_once(&omc__crc_once, omc__crc_init);
    crc = ~crc;
#if defined(__x86_64__)
    if (omc__crc_hw) return ~omc__crc32c_hw(crc, p, n);
#endif
    while (n--) crc = omc__crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static const char omc__b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

OMC__PRIVATE size_t omc__b64_encoded_len(size_t n) { return (n / 3) * 4 + ((n % 3) ? (n % 3) + 1 : 0); }

OMC__PRIVATE void omc__b64_encode(const uint8_t* in, size_t n, char* out) {
    size_t i, o = 0;
    for (i = 0; i + 2 < n; i += 3) {
        uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8) | in[i + 2];
        out[o++] = omc__b64[(v >> 18) & 63]; out[o++] = omc__b64[(v >> 12) & 63];
        out[o++] = omc__b64[(v >> 6) & 63];  out[o++] = omc__b64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = omc__b64[(v >> 18) & 63]; out[o++] = omc__b64[(v >> 12) & 63];
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)in[i] << 16) | ((uint32_t)in[i + 1] << 8);
        out[o++] = omc__b64[(v >> 18) & 63]; out[o++] = omc__b64[(v >> 12) & 63]; out[o++] = omc__b64[(v >> 6) & 63];
    }
    out[o] = '\0';
}

OMC__PRIVATE int omc__b64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '-') return 62;
    if (c == '_') return 63;
    return -1;
}

/* Decode unpadded base64url; returns the byte count, or -1 on a bad character or length. */
OMC__PRIVATE long omc__b64_decode(const char* in, size_t n, uint8_t* out) {
    size_t i, o = 0;
    uint32_t acc = 0;
    int bits = 0;
    if (n % 4 == 1) return -1;
    for (i = 0; i < n; i++) {
        int v = omc__b64_value(in[i]);
        if (v < 0) return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) { bits -= 8; out[o++] = (uint8_t)(acc >> bits); }
    }
    if (acc & ((1u << bits) - 1u)) return -1;   /* canonical form only: one text per blob */
    return (long)o;
}

/* ============================================================================================== */
/* [SECTION] Implementation: string map (open addressing, for connector key tables)             */
/* ============================================================================================== */

typedef struct omc__smap_slot {
    char* key;          /* NULL = empty, omc__smap_tomb = deleted */
    uint32_t len;
    uint32_t hash;
    void* value;
} omc__smap_slot;

typedef struct omc__smap {
    omc__smap_slot* slots;
    uint32_t cap;       /* a power of two, or 0 */
    uint32_t count;     /* live keys */
    uint32_t used;      /* live keys + tombstones */
} omc__smap;

static char omc__smap_tomb_byte;
#define omc__smap_tomb (&omc__smap_tomb_byte)

OMC__PRIVATE uint32_t omc__hash(const char* s, uint32_t len) {
    uint32_t h = 2166136261u, i;   /* FNV-1a */
    for (i = 0; i < len; i++) { h ^= (uint8_t)s[i]; h *= 16777619u; }
    return h;
}

OMC__PRIVATE omc__smap_slot* omc__smap_find(const omc__smap* m, const char* key, uint32_t len, uint32_t h) {
    uint32_t i, mask;
    if (!m->cap) return NULL;
    mask = m->cap - 1;
    for (i = h & mask;; i = (i + 1) & mask) {
        omc__smap_slot* s = &m->slots[i];
        if (!s->key) return NULL;
        if (s->key != omc__smap_tomb && s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s;
    }
}

OMC__PRIVATE void* omc__smap_get(const omc__smap* m, const char* key, uint32_t len) {
    omc__smap_slot* s = omc__smap_find(m, key, len, omc__hash(key, len));
    return s ? s->value : NULL;
}

OMC__PRIVATE omc_result omc__smap_grow(omc__smap* m, const omc_hooks* hooks) {
    uint32_t ncap = m->cap ? m->cap * 2 : 16, i;
    omc__smap_slot* ns;
    if (m->cap && m->count * 2 < m->cap) ncap = m->cap; /* mostly tombstones: rehash in place size */
    ns = (omc__smap_slot*)omc__calloc(hooks, sizeof(omc__smap_slot) * ncap);
    if (!ns) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < m->cap; i++) {
        omc__smap_slot* s = &m->slots[i];
        uint32_t j;
        if (!s->key || s->key == omc__smap_tomb) continue;
        for (j = s->hash & (ncap - 1); ns[j].key; j = (j + 1) & (ncap - 1)) {}
        ns[j] = *s;
    }
    omc__free(hooks, m->slots);
    m->slots = ns;
    m->cap = ncap;
    m->used = m->count;
    return OMC_OK;
}

/* Insert key -> value; OMC_ERR_EXISTS if the key is present. */
OMC__PRIVATE omc_result omc__smap_put(omc__smap* m, const omc_hooks* hooks, const char* key, uint32_t len, void* value) {
    uint32_t h = omc__hash(key, len), i, mask;
    char* k;
    if (omc__smap_find(m, key, len, h)) return OMC_ERR_EXISTS;
    if ((m->used + 1) * 4 >= m->cap * 3) {
        omc_result r = omc__smap_grow(m, hooks);
        if (r != OMC_OK) return r;
    }
    k = (char*)omc__malloc(hooks, (size_t)len + 1);
    if (!k) return OMC_ERR_NO_MEMORY;
    memcpy(k, key, len);
    k[len] = '\0';
    mask = m->cap - 1;
    for (i = h & mask; m->slots[i].key && m->slots[i].key != omc__smap_tomb; i = (i + 1) & mask) {}
    if (!m->slots[i].key) m->used++;
    m->slots[i].key = k;
    m->slots[i].len = len;
    m->slots[i].hash = h;
    m->slots[i].value = value;
    m->count++;
    return OMC_OK;
}

/* Remove key; returns its value or NULL. */
OMC__PRIVATE void* omc__smap_del(omc__smap* m, const omc_hooks* hooks, const char* key, uint32_t len) {
    omc__smap_slot* s = omc__smap_find(m, key, len, omc__hash(key, len));
    void* v;
    if (!s) return NULL;
    v = s->value;
    omc__free(hooks, s->key);
    s->key = omc__smap_tomb;
    s->value = NULL;
    m->count--;
    return v;
}

/* Iterate: start with *it = 0; returns 0 at the end. Do not insert while iterating. */
OMC__PRIVATE int omc__smap_next(const omc__smap* m, uint32_t* it, const char** key, uint32_t* len, void** value) {
    while (*it < m->cap) {
        omc__smap_slot* s = &m->slots[(*it)++];
        if (s->key && s->key != omc__smap_tomb) {
            if (key) *key = s->key;
            if (len) *len = s->len;
            if (value) *value = s->value;
            return 1;
        }
    }
    return 0;
}

OMC__PRIVATE void omc__smap_free(omc__smap* m, const omc_hooks* hooks) {
    uint32_t i;
    for (i = 0; i < m->cap; i++)
        if (m->slots[i].key && m->slots[i].key != omc__smap_tomb) omc__free(hooks, m->slots[i].key);
    omc__free(hooks, m->slots);
    memset(m, 0, sizeof(*m));
}

/* ============================================================================================== */
/* [SECTION] Implementation: the registered-memory allocator (TLSF over offsets)                */
/* ============================================================================================== */
/*
    Blocks tile the managed range [0, capacity) without gaps. Each block is a record in a growable
    array (outside the region): its offset and size, its neighbours by address (phys_prev/next),
    and, while free, its links in one of 64 x 16 size-class lists. Sizes are kept in units of the
    alignment ("granules"), which makes every offset aligned by construction.

    Size classes: a size of n granules belongs to first level fl = floor(log2 n) - 3 and second
    level sl = the next 4 bits below the leading one (sizes below 16 granules map linearly to
    fl 0). Each class holds sizes in [lo, lo + 2^(fl-1)). fl_map has bit fl set when any list of
    that level is non-empty; sl_map[fl] has bit sl set when list (fl, sl) is.

    Allocation rounds the request *up* to the next class boundary first, so the head of any list
    found by two bit scans is big enough: O(1), at the cost of skipping blocks in the request's
    own class. When that fails we look through the request's own class list (bounded) before
    reporting the pool full, so the last fitting block is not missed (utilisation).
*/

#define OMC__SL_LOG2 4
#define OMC__SL_COUNT (1u << OMC__SL_LOG2)
#define OMC__FL_COUNT 64
#define OMC__FALLBACK_SCAN 64

enum { OMC__BLK_UNUSED = 0, OMC__BLK_FREE = 1, OMC__BLK_USED = 2 };

typedef struct omc__block {
    uint64_t offset;            /* bytes */
    uint64_t size;              /* bytes, a multiple of the granule */
    uint64_t requested;         /* bytes asked for (used blocks) */
    uint32_t phys_prev, phys_next;
    uint32_t link_prev, link_next;  /* size-class list (free) or spare-record list (unused) */
    uint32_t generation;
    uint8_t state;
    uint8_t pad[3];
} omc__block;

struct omc_alloc {
    omc_hooks hooks;
    uint64_t capacity;
    uint64_t granule;
    uint32_t shift;             /* log2(granule) */
    omc__block* blocks;
    uint32_t count, cap;        /* records in use (including spares) / allocated */
    uint32_t spare;             /* head of unused records */
    uint64_t fl_map;
    uint32_t sl_map[OMC__FL_COUNT];
    uint32_t heads[OMC__FL_COUNT][OMC__SL_COUNT];
    uint32_t next_generation;
    uint64_t in_use, requested, live, free_count;
    int thread_safe;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t waiters;
};

OMC__PRIVATE uint32_t omc__msb64(uint64_t x) { return 63u - (uint32_t)__builtin_clzll(x); }

OMC__PRIVATE void omc__size_class(uint64_t n, uint32_t* fl, uint32_t* sl) {
    if (n < OMC__SL_COUNT) { *fl = 0; *sl = (uint32_t)n; return; }
    {
        uint32_t m = omc__msb64(n);
        *fl = m - (OMC__SL_LOG2 - 1);
        *sl = (uint32_t)(n >> (m - OMC__SL_LOG2)) - OMC__SL_COUNT;
    }
}

OMC__PRIVATE void omc__blk_link(omc_alloc* a, uint32_t i) {
    omc__block* b = &a->blocks[i];
    uint32_t fl, sl, head;
    omc__size_class(b->size >> a->shift, &fl, &sl);
    head = a->heads[fl][sl];
    b->state = OMC__BLK_FREE;
    b->link_prev = OMC__NIL;
    b->link_next = head;
    if (head != OMC__NIL) a->blocks[head].link_prev = i;
    a->heads[fl][sl] = i;
    a->sl_map[fl] |= 1u << sl;
    a->fl_map |= 1ull << fl;
    a->free_count++;
}

OMC__PRIVATE void omc__blk_unlink(omc_alloc* a, uint32_t i) {
    omc__block* b = &a->blocks[i];
    uint32_t fl, sl;
    omc__size_class(b->size >> a->shift, &fl, &sl);
    if (b->link_prev != OMC__NIL) a->blocks[b->link_prev].link_next = b->link_next;
    else a->heads[fl][sl] = b->link_next;
    if (b->link_next != OMC__NIL) a->blocks[b->link_next].link_prev = b->link_prev;
    if (a->heads[fl][sl] == OMC__NIL) {
        a->sl_map[fl] &= ~(1u << sl);
        if (!a->sl_map[fl]) a->fl_map &= ~(1ull << fl);
    }
    b->link_prev = b->link_next = OMC__NIL;
    a->free_count--;
}

/* Make sure one spare record exists, so that a split can never fail half-way. */
OMC__PRIVATE int omc__blk_reserve(omc_alloc* a) {
    omc__block* nb;
    uint32_t ncap;
    if (a->spare != OMC__NIL || a->count < a->cap) return 1;
    if (a->cap >= 0x7FFFFFFFu) return 0;
    ncap = a->cap ? a->cap * 2 : 64;
    nb = (omc__block*)omc__malloc(&a->hooks, sizeof(omc__block) * ncap);
    if (!nb) return 0;
    if (a->blocks) memcpy(nb, a->blocks, sizeof(omc__block) * a->count);
    omc__free(&a->hooks, a->blocks);
    a->blocks = nb;
    a->cap = ncap;
    return 1;
}

OMC__PRIVATE uint32_t omc__blk_new(omc_alloc* a) {
    uint32_t i;
    if (a->spare != OMC__NIL) { i = a->spare; a->spare = a->blocks[i].link_next; }
    else i = a->count++;
    memset(&a->blocks[i], 0, sizeof(omc__block));
    a->blocks[i].phys_prev = a->blocks[i].phys_next = OMC__NIL;
    a->blocks[i].link_prev = a->blocks[i].link_next = OMC__NIL;
    return i;
}

OMC__PRIVATE void omc__blk_retire(omc_alloc* a, uint32_t i) {
    a->blocks[i].state = OMC__BLK_UNUSED;
    a->blocks[i].generation = 0;
    a->blocks[i].link_next = a->spare;
    a->spare = i;
}

/* The head of the first non-empty list whose every block holds n granules, or NIL. */
OMC__PRIVATE uint32_t omc__blk_find(omc_alloc* a, uint64_t n) {
    uint32_t fl, sl, slm;
    uint64_t rounded = n;
    if (n >= OMC__SL_COUNT) rounded = n + (1ull << (omc__msb64(n) - OMC__SL_LOG2)) - 1;
    omc__size_class(rounded, &fl, &sl);
    slm = (fl < OMC__FL_COUNT) ? a->sl_map[fl] & (~0u << sl) : 0;
    if (!slm) {
        uint64_t flm;
        if (fl + 1 >= OMC__FL_COUNT) return OMC__NIL;
        flm = a->fl_map & (~0ull << (fl + 1));
        if (!flm) return OMC__NIL;
        fl = (uint32_t)__builtin_ctzll(flm);
        slm = a->sl_map[fl];
    }
    sl = (uint32_t)__builtin_ctz(slm);
    return a->heads[fl][sl];
}

/* Second chance: a block in the request's own class that is large enough (bounded walk). */
OMC__PRIVATE uint32_t omc__blk_find_exact(omc_alloc* a, uint64_t n) {
    uint32_t fl, sl, i, steps = 0;
    omc__size_class(n, &fl, &sl);
    for (i = a->heads[fl][sl]; i != OMC__NIL && steps < OMC__FALLBACK_SCAN; i = a->blocks[i].link_next, steps++)
        if ((a->blocks[i].size >> a->shift) >= n) return i;
    return OMC__NIL;
}

OMC__PRIVATE uint32_t omc__next_generation(omc_alloc* a) {
    if (++a->next_generation == 0) a->next_generation = 1;   /* 0 means "no allocation" */
    return a->next_generation;
}

OMNICONN_API omc_result omc_alloc_create(const omc_alloc_desc* desc, omc_alloc** out) {
    omc_hooks hooks;
    omc_alloc* a;
    uint64_t align, cap;
    uint32_t fl, sl;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (!desc) return OMC_ERR_INVALID_ARG;
    hooks = omc__hooks_resolve(&desc->hooks);
    align = desc->alignment ? desc->alignment : OMNICONN_DEFAULT_ALIGNMENT;
    if (align & (align - 1)) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "alignment %llu is not a power of two", (unsigned long long)align);
        return OMC_ERR_INVALID_ARG;
    }
    cap = desc->capacity & ~(align - 1);
    if (cap == 0 || cap > UINT64_MAX / 2) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "capacity %llu must hold at least one aligned block of %llu bytes",
                 (unsigned long long)desc->capacity, (unsigned long long)align);
        return OMC_ERR_INVALID_ARG;
    }
    a = (omc_alloc*)omc__calloc(&hooks, sizeof(omc_alloc));
    if (!a) return OMC_ERR_NO_MEMORY;
    a->hooks = hooks;
    a->capacity = cap;
    a->granule = align;
    a->shift = omc__msb64(align);
    a->spare = OMC__NIL;
    for (fl = 0; fl < OMC__FL_COUNT; fl++)
        for (sl = 0; sl < OMC__SL_COUNT; sl++) a->heads[fl][sl] = OMC__NIL;
    if (!omc__blk_reserve(a)) { omc__free(&hooks, a); return OMC_ERR_NO_MEMORY; }
    {
        uint32_t first = omc__blk_new(a);    /* record 0 is always the block at offset 0 */
        a->blocks[first].offset = 0;
        a->blocks[first].size = cap;
        omc__blk_link(a, first);
    }
    a->thread_safe = desc->thread_safe;
    if (a->thread_safe) {
        if (pthread_mutex_init(&a->mu, NULL) != 0 || omc__cond_init_monotonic(&a->cv) != 0) {
            omc__free(&hooks, a->blocks);
            omc__free(&hooks, a);
            return OMC_ERR_SYSTEM;
        }
    }
    *out = a;
    return OMC_OK;
}

OMNICONN_API void omc_alloc_destroy(omc_alloc* a) {
    omc_hooks hooks;
    if (!a) return;
    hooks = a->hooks;
    if (a->thread_safe) { pthread_mutex_destroy(&a->mu); pthread_cond_destroy(&a->cv); }
    omc__free(&hooks, a->blocks);
    omc__free(&hooks, a);
}

OMNICONN_API uint64_t omc_alloc_alignment(const omc_alloc* a) { return a ? a->granule : 0; }

static void omc__alloc_lock(omc_alloc* a) { if (a->thread_safe) pthread_mutex_lock(&a->mu); }
static void omc__alloc_unlock(omc_alloc* a) { if (a->thread_safe) pthread_mutex_unlock(&a->mu); }

OMC__PRIVATE omc_result omc__alloc_locked(omc_alloc* a, uint64_t size, omc_range* out) {
    uint64_t n, need;
    uint32_t i;
    omc__block* b;
    if (size == 0) return OMC_ERR_INVALID_ARG;
    if (size > a->capacity) return OMC_ERR_TOO_LARGE;
    n = (size + a->granule - 1) >> a->shift;
    need = n << a->shift;
    if (!omc__blk_reserve(a)) return OMC_ERR_NO_MEMORY;
    i = omc__blk_find(a, n);
    if (i == OMC__NIL) i = omc__blk_find_exact(a, n);
    if (i == OMC__NIL) return OMC_ERR_POOL_FULL;
    omc__blk_unlink(a, i);
    if (a->blocks[i].size > need) {     /* split: the tail stays free */
        uint32_t j = omc__blk_new(a);   /* cannot fail: reserved above, and does not move blocks */
        omc__block* t = &a->blocks[j];
        b = &a->blocks[i];
        t->offset = b->offset + need;
        t->size = b->size - need;
        t->phys_prev = i;
        t->phys_next = b->phys_next;
        if (b->phys_next != OMC__NIL) a->blocks[b->phys_next].phys_prev = j;
        b->phys_next = j;
        b->size = need;
        omc__blk_link(a, j);
    }
    b = &a->blocks[i];
    b->state = OMC__BLK_USED;
    b->requested = size;
    b->generation = omc__next_generation(a);
    a->in_use += b->size;
    a->requested += size;
    a->live++;
    out->offset = b->offset;
    out->size = size;
    out->generation = b->generation;
    out->slot = i;
    return OMC_OK;
}

/* Why would freeing r fail? The slow path: walks the blocks by address (errors only). */
OMC__PRIVATE omc_result omc__alloc_classify(const omc_alloc* a, omc_range r) {
    uint32_t i;
    uint64_t end;
    if (r.size == 0 || r.offset >= a->capacity || r.size > a->capacity - r.offset) return OMC_ERR_INVALID_FREE;
    end = r.offset + r.size;
    for (i = 0; i != OMC__NIL; i = a->blocks[i].phys_next) {
        const omc__block* b = &a->blocks[i];
        uint64_t bend = b->offset + b->size;
        if (r.offset >= bend) continue;
        if (b->state == OMC__BLK_USED) {
            if (b->offset == r.offset) {
                if (b->generation != r.generation) return OMC_ERR_STALE;
                return (b->requested == r.size) ? OMC_OK : OMC_ERR_OVERLAP;
            }
            return end <= bend ? OMC_ERR_INVALID_FREE : OMC_ERR_OVERLAP;
        }
        return end <= bend ? OMC_ERR_DOUBLE_FREE : OMC_ERR_OVERLAP;
    }
    return OMC_ERR_INVALID_FREE;
}

/* O(1) check that r names the live block in its slot; anything else goes to classify. A range
   that is empty or leaves [0, capacity) is refused first, as classify would: a handle gets the
   same verdict whatever its slot says. */
OMC__PRIVATE omc_result omc__alloc_lookup(const omc_alloc* a, omc_range r) {
    if (r.size == 0 || r.offset >= a->capacity || r.size > a->capacity - r.offset) return OMC_ERR_INVALID_FREE;
    if (r.slot < a->count) {
        const omc__block* b = &a->blocks[r.slot];
        if (b->state == OMC__BLK_USED && b->offset == r.offset) {
            if (b->generation != r.generation) return OMC_ERR_STALE;
            return (b->requested == r.size) ? OMC_OK : OMC_ERR_OVERLAP;
        }
    }
    {
        omc_result c = omc__alloc_classify(a, r);
        return c == OMC_OK ? OMC_ERR_STALE : c;    /* right place, wrong slot: a forged handle */
    }
}

OMC__PRIVATE void omc__alloc_release(omc_alloc* a, uint32_t i) {
    omc__block* b = &a->blocks[i];
    uint32_t p = b->phys_prev, n = b->phys_next;
    a->in_use -= b->size;
    a->requested -= b->requested;
    a->live--;
    b->state = OMC__BLK_FREE;
    b->requested = 0;
    b->generation = 0;
    if (p != OMC__NIL && a->blocks[p].state == OMC__BLK_FREE) {   /* merge into the left neighbour */
        omc__blk_unlink(a, p);
        a->blocks[p].size += b->size;
        a->blocks[p].phys_next = n;
        if (n != OMC__NIL) a->blocks[n].phys_prev = p;
        omc__blk_retire(a, i);
        i = p;
    }
    n = a->blocks[i].phys_next;
    if (n != OMC__NIL && a->blocks[n].state == OMC__BLK_FREE) {   /* absorb the right neighbour */
        uint32_t nn = a->blocks[n].phys_next;
        omc__blk_unlink(a, n);
        a->blocks[i].size += a->blocks[n].size;
        a->blocks[i].phys_next = nn;
        if (nn != OMC__NIL) a->blocks[nn].phys_prev = i;
        omc__blk_retire(a, n);
    }
    omc__blk_link(a, i);
}

OMNICONN_API omc_result omc_alloc_alloc(omc_alloc* a, uint64_t size, omc_range* out) {
    omc_result r;
    if (!a || !out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    omc__alloc_lock(a);
    r = omc__alloc_locked(a, size, out);
    omc__alloc_unlock(a);
    if (r == OMC_ERR_TOO_LARGE || r == OMC_ERR_INVALID_ARG)
        OMC__LOG(&a->hooks, OMC_LOG_WARN, OMC_LOGITEM_ALLOC_FULL, "alloc of %llu bytes from a %llu-byte pool: %s",
                 (unsigned long long)size, (unsigned long long)a->capacity, omc_result_str(r));
    else if (r != OMC_OK)
        OMC__LOG(&a->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_ALLOC_FULL, "alloc of %llu bytes: %s", (unsigned long long)size, omc_result_str(r));
    return r;
}

OMNICONN_API omc_result omc_alloc_alloc_wait(omc_alloc* a, uint64_t size, omc_time_ns deadline, omc_range* out) {
    omc_result r;
    if (!a || !out) return OMC_ERR_INVALID_ARG;
    if (deadline == OMC_NO_WAIT) return omc_alloc_alloc(a, size, out);  /* no wait: the plain answer */
    if (!a->thread_safe) {
        OMC__LOG(&a->hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "waiting for space needs a thread_safe allocator");
        return OMC_ERR_INVALID_ARG;
    }
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&a->mu);
    for (;;) {
        r = omc__alloc_locked(a, size, out);
        if (r != OMC_ERR_POOL_FULL) break;
        if (deadline != OMC_WAIT_FOREVER && omc_now_ns() >= deadline) { r = OMC_ERR_TIMEOUT; break; }
        a->waiters++;
        omc__cond_wait_until(&a->cv, &a->mu, deadline);
        a->waiters--;
    }
    pthread_mutex_unlock(&a->mu);
    if (r == OMC_ERR_TIMEOUT)
        OMC__LOG(&a->hooks, OMC_LOG_INFO, OMC_LOGITEM_ALLOC_TIMEOUT, "no %llu-byte range came free before the deadline",
                 (unsigned long long)size);
    return r;
}

OMNICONN_API omc_result omc_alloc_free(omc_alloc* a, omc_range r) {
    omc_result res;
    if (!a) return OMC_ERR_INVALID_ARG;
    omc__alloc_lock(a);
    res = omc__alloc_lookup(a, r);
    if (res == OMC_OK) {
        omc__alloc_release(a, r.slot);
        if (a->thread_safe && a->waiters) pthread_cond_broadcast(&a->cv);
    }
    omc__alloc_unlock(a);
    if (res != OMC_OK)
        OMC__LOG(&a->hooks, OMC_LOG_WARN, OMC_LOGITEM_ALLOC_BAD_FREE, "free of [%llu, +%llu) generation %u: %s",
                 (unsigned long long)r.offset, (unsigned long long)r.size, r.generation, omc_result_str(res));
    return res;
}

OMNICONN_API omc_result omc_alloc_check(omc_alloc* a, omc_range r) {
    omc_result res;
    if (!a) return OMC_ERR_INVALID_ARG;
    omc__alloc_lock(a);
    res = omc__alloc_lookup(a, r);
    omc__alloc_unlock(a);
    return res;
}

OMNICONN_API void omc_alloc_get_stats(omc_alloc* a, omc_alloc_stats* out) {
    uint64_t largest = 0, free_bytes;
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (!a) return;
    omc__alloc_lock(a);
    if (a->fl_map) {    /* the largest block sits in the highest non-empty class */
        uint32_t fl = omc__msb64(a->fl_map), sl = 31u - (uint32_t)__builtin_clz(a->sl_map[fl]), i;
        for (i = a->heads[fl][sl]; i != OMC__NIL; i = a->blocks[i].link_next)
            largest = omc__max(largest, a->blocks[i].size);
    }
    free_bytes = a->capacity - a->in_use;
    out->capacity = a->capacity;
    out->bytes_in_use = a->in_use;
    out->bytes_requested = a->requested;
    out->live_allocations = a->live;
    out->largest_free = largest;
    out->free_blocks = a->free_count;
    out->fragmentation = free_bytes ? 1.0 - (double)largest / (double)free_bytes : 0.0;
    omc__alloc_unlock(a);
}

OMNICONN_API omc_result omc_alloc_validate(omc_alloc* a) {
    uint64_t expect = 0, in_use = 0, live = 0, free_blocks = 0, listed = 0;
    uint32_t i, prev = OMC__NIL, fl, sl;
    omc_result res = OMC_OK;
    if (!a) return OMC_ERR_INVALID_ARG;
    omc__alloc_lock(a);
    for (i = 0; i != OMC__NIL; prev = i, i = a->blocks[i].phys_next) {
        const omc__block* b = &a->blocks[i];
        if (i >= a->count || b->offset != expect || b->size == 0 || (b->size & (a->granule - 1)) ||
            b->phys_prev != prev || (b->state != OMC__BLK_FREE && b->state != OMC__BLK_USED)) { res = OMC_ERR_INTERNAL; break; }
        if (b->state == OMC__BLK_FREE) {
            free_blocks++;
            if (prev != OMC__NIL && a->blocks[prev].state == OMC__BLK_FREE) { res = OMC_ERR_INTERNAL; break; } /* not coalesced */
        } else { in_use += b->size; live++; }
        expect += b->size;
    }
    if (res == OMC_OK && (expect != a->capacity || in_use != a->in_use || live != a->live || free_blocks != a->free_count))
        res = OMC_ERR_INTERNAL;
    for (fl = 0; res == OMC_OK && fl < OMC__FL_COUNT; fl++) {
        for (sl = 0; sl < OMC__SL_COUNT; sl++) {
            uint32_t head = a->heads[fl][sl], f, s, p = OMC__NIL;
            int bit = (a->sl_map[fl] >> sl) & 1;
            if ((head != OMC__NIL) != bit) { res = OMC_ERR_INTERNAL; break; }
            for (i = head; i != OMC__NIL; p = i, i = a->blocks[i].link_next) {
                if (a->blocks[i].state != OMC__BLK_FREE || a->blocks[i].link_prev != p) { res = OMC_ERR_INTERNAL; break; }
                omc__size_class(a->blocks[i].size >> a->shift, &f, &s);
                if (f != fl || s != sl) { res = OMC_ERR_INTERNAL; break; }
                listed++;
            }
            if (res != OMC_OK) break;
        }
        if (res == OMC_OK && (((a->fl_map >> fl) & 1) != (a->sl_map[fl] != 0))) res = OMC_ERR_INTERNAL;
    }
    if (res == OMC_OK && listed != free_blocks) res = OMC_ERR_INTERNAL;
    omc__alloc_unlock(a);
    return res;
}

/* ============================================================================================== */
/* [SECTION] Implementation: pools                                                                */
/* ============================================================================================== */

struct omc_pool {
    omc_hooks hooks;
    omc_alloc* alloc;
    uint8_t* base;
    uint64_t size;
    omc_memory_kind memory;
    size_t mapped;              /* bytes we mmap'ed (host), 0 otherwise */
    int locked;
    int attached;
    int cuda_device;
    omc_region_hooks region;
};

/* Map the host region; fills pool->base/mapped. Errors name the limit and the fix. */
OMC__PRIVATE omc_result omc__pool_map_host(omc_pool* pool, const omc_pool_desc* desc) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t unit = desc->hugepages ? (size_t)2 << 20 : page;
    uint64_t align = desc->alignment ? desc->alignment : OMNICONN_DEFAULT_ALIGNMENT;
    size_t extra = align > unit ? (size_t)(align - unit) : 0;  /* mmap aligns to the page only */
    int flags = MAP_PRIVATE | MAP_ANONYMOUS;
    size_t len;
    void* p;
    if (desc->size > (uint64_t)SIZE_MAX - unit - extra) return OMC_ERR_TOO_LARGE;
    len = ((size_t)desc->size + unit - 1) & ~(unit - 1);
#if defined(MAP_HUGETLB)
    if (desc->hugepages) flags |= MAP_HUGETLB;
#endif
#if defined(MAP_POPULATE)
    if (desc->prefault) flags |= MAP_POPULATE;
#endif
    p = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p != MAP_FAILED && extra) {     /* keep the aligned part, give back the head and the tail */
        uint8_t* q = (uint8_t*)(((uintptr_t)p + (uintptr_t)(align - 1)) & ~(uintptr_t)(align - 1));
        size_t head = (size_t)(q - (uint8_t*)p);
        if (head) munmap(p, head);
        if (extra > head) munmap(q + len, extra - head);
        p = q;
    }
    if (p == MAP_FAILED) {
        int e = errno;
        if (desc->hugepages) {
            OMC__LOG(&pool->hooks, OMC_LOG_ERROR, OMC_LOGITEM_POOL_HUGEPAGES,
                     "mmap of %zu bytes with MAP_HUGETLB failed (%s): reserve huge pages first, e.g. "
                     "'echo %zu > /proc/sys/vm/nr_hugepages', or leave hugepages off", len, strerror(e), len >> 21);
            return OMC_ERR_UNAVAILABLE;
        }
        OMC__LOG(&pool->hooks, OMC_LOG_ERROR, OMC_LOGITEM_SYSCALL_FAILED, "mmap of %zu bytes failed: %s", len, strerror(e));
        return OMC_ERR_NO_MEMORY;
    }
    pool->base = (uint8_t*)p;
    pool->mapped = len;
    if (desc->lock_memory) {
        struct rlimit rl;
        int have_limit = getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
        /* check the limit first: without CAP_IPC_LOCK, mlock beyond it fails anyway, and users
           hit this more than anything else when they first register a large pool */
        if (mlock(p, len) != 0) {
            int e = errno;
            OMC__LOG(&pool->hooks, OMC_LOG_ERROR, OMC_LOGITEM_POOL_MEMLOCK,
                     "cannot lock a %zu-byte pool in memory (%s); RLIMIT_MEMLOCK is %s%llu bytes. Fix: 'ulimit -l unlimited' "
                     "in the launching shell, 'memlock' in /etc/security/limits.conf, LimitMEMLOCK=infinity for systemd, "
                     "or 'docker run --ulimit memlock=-1'", len, strerror(e), have_limit ? "" : "unlimited/",
                     have_limit ? (unsigned long long)rl.rlim_cur : 0ull);
            munmap(p, len);
            pool->base = NULL;
            pool->mapped = 0;
            return OMC_ERR_MEMLOCK;
        }
        pool->locked = 1;
    }
    return OMC_OK;
}

OMNICONN_API omc_result omc_pool_create(const omc_pool_desc* desc, omc_pool** out) {
    omc_hooks hooks;
    omc_pool* pool;
    omc_alloc_desc ad;
    omc_result r = OMC_OK;
    uint64_t align;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (!desc) return OMC_ERR_INVALID_ARG;
    hooks = omc__hooks_resolve(&desc->hooks);
    align = desc->alignment ? desc->alignment : OMNICONN_DEFAULT_ALIGNMENT;
    if (desc->size == 0 || (align & (align - 1)) || desc->size < align) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "pool size %llu / alignment %llu invalid",
                 (unsigned long long)desc->size, (unsigned long long)align);
        return OMC_ERR_INVALID_ARG;
    }
    pool = (omc_pool*)omc__calloc(&hooks, sizeof(omc_pool));
    if (!pool) return OMC_ERR_NO_MEMORY;
    pool->hooks = hooks;
    pool->size = desc->size;
    pool->memory = desc->memory == OMC_MEMORY_DEFAULT ? OMC_MEMORY_HOST : desc->memory;
    pool->region = desc->region;
    pool->cuda_device = desc->cuda_device;
    switch (pool->memory) {
        case OMC_MEMORY_HOST:
            r = omc__pool_map_host(pool, desc);
            break;
        case OMC_MEMORY_EXTERNAL:
            if (!desc->external_base) r = OMC_ERR_INVALID_ARG;
            else if ((uintptr_t)desc->external_base & (align - 1)) r = OMC_ERR_ALIGNMENT;
            else pool->base = (uint8_t*)desc->external_base;
            if (r != OMC_OK)
                OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "external pool memory must be non-NULL and %llu-aligned",
                         (unsigned long long)align);
            break;
        case OMC_MEMORY_CUDA:
#if OMC__HAS_CUDA
        {
            void* dptr = NULL;
            cudaError_t ce = cudaSetDevice(desc->cuda_device);
            if (ce == cudaSuccess) ce = cudaMalloc(&dptr, (size_t)desc->size);
            if (ce != cudaSuccess) {
                OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_CUDA_FAILED, "cudaMalloc of %llu bytes on device %d: %s",
                         (unsigned long long)desc->size, desc->cuda_device, cudaGetErrorString(ce));
                r = OMC_ERR_NO_MEMORY;
            } else pool->base = (uint8_t*)dptr;
        }
#else
            OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "CUDA pools need OMNICONN_ENABLE_CUDA");
            r = OMC_ERR_UNAVAILABLE;
#endif
            break;
        default:
            r = OMC_ERR_INVALID_ARG;
            break;
    }
    if (r != OMC_OK) { omc__free(&hooks, pool); return r; }
    memset(&ad, 0, sizeof(ad));
    ad.capacity = desc->size;
    ad.alignment = align;
    ad.thread_safe = desc->thread_safe;
    ad.hooks = hooks;
    r = omc_alloc_create(&ad, &pool->alloc);
    if (r == OMC_OK && pool->region.attach) {
        r = pool->region.attach(pool, pool->base, pool->size, pool->region.user_data);
        if (r != OMC_OK)
            OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_POOL_HOOK_FAILED, "region attach hook failed: %s", omc_result_str(r));
        else pool->attached = 1;
    }
    if (r != OMC_OK) { omc_pool_destroy(pool); return r; }
    *out = pool;
    return OMC_OK;
}

OMNICONN_API void omc_pool_destroy(omc_pool* pool) {
    omc_hooks hooks;
    if (!pool) return;
    hooks = pool->hooks;
    if (pool->attached && pool->region.detach) pool->region.detach(pool, pool->base, pool->size, pool->region.user_data);
    omc_alloc_destroy(pool->alloc);
    if (pool->mapped) {
        if (pool->locked) munlock(pool->base, pool->mapped);
        munmap(pool->base, pool->mapped);
    }
#if OMC__HAS_CUDA
    if (pool->memory == OMC_MEMORY_CUDA && pool->base) cudaFree(pool->base);
#endif
    omc__free(&hooks, pool);
}

OMNICONN_API void* omc_pool_base(const omc_pool* pool) { return pool ? pool->base : NULL; }
OMNICONN_API uint64_t omc_pool_size(const omc_pool* pool) { return pool ? pool->size : 0; }
OMNICONN_API omc_memory_kind omc_pool_memory(const omc_pool* pool) { return pool ? pool->memory : OMC_MEMORY_DEFAULT; }
OMNICONN_API omc_alloc* omc_pool_allocator(omc_pool* pool) { return pool ? pool->alloc : NULL; }

OMNICONN_API int omc_pool_contains(const omc_pool* pool, const void* ptr, uint64_t len) {
    uintptr_t p = (uintptr_t)ptr, b;
    if (!pool || !ptr) return 0;
    b = (uintptr_t)pool->base;
    return p >= b && (uint64_t)(p - b) <= pool->size && len <= pool->size - (uint64_t)(p - b);
}

/* ============================================================================================== */
/* [SECTION] Implementation: buffers, dtypes, typed views                                        */
/* ============================================================================================== */

OMC__PRIVATE void omc__buffer_from_range(omc_pool* pool, omc_range r, omc_buffer* out) {
    memset(out, 0, sizeof(*out));
    out->data = pool->base + r.offset;
    out->size = r.size;
    out->pool = pool;
    out->range = r;
}

OMNICONN_API omc_result omc_pool_alloc_buffer(omc_pool* pool, uint64_t size, omc_buffer* out) {
    omc_range r;
    omc_result res;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!pool) return OMC_ERR_INVALID_ARG;
    res = omc_alloc_alloc(pool->alloc, size, &r);
    if (res == OMC_OK) omc__buffer_from_range(pool, r, out);
    return res;
}

OMNICONN_API omc_result omc_pool_alloc_buffer_wait(omc_pool* pool, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    omc_range r;
    omc_result res;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!pool) return OMC_ERR_INVALID_ARG;
    res = omc_alloc_alloc_wait(pool->alloc, size, deadline, &r);
    if (res == OMC_OK) omc__buffer_from_range(pool, r, out);
    return res;
}

OMNICONN_API omc_result omc_buffer_release(omc_buffer* b) {
    omc_result r = OMC_OK;
    if (!b) return OMC_ERR_INVALID_ARG;
    if (b->release_fn) r = b->release_fn(b);
    else if (b->pool) r = omc_alloc_free(b->pool->alloc, b->range);
    memset(b, 0, sizeof(*b));   /* releasing this handle again is a no-op */
    return r;
}

OMNICONN_API omc_result omc_buffer_copy_out(const omc_buffer* b, uint64_t offset, void* dst, uint64_t len) {
    if (!b || (!dst && len)) return OMC_ERR_INVALID_ARG;
    if (offset > b->size || len > b->size - offset) return OMC_ERR_TOO_LARGE;
    if (!len) return OMC_OK;
#if OMC__HAS_CUDA
    if (b->pool && b->pool->memory == OMC_MEMORY_CUDA) {
        cudaError_t ce = cudaMemcpy(dst, (uint8_t*)b->data + offset, (size_t)len, cudaMemcpyDeviceToHost);
        if (ce != cudaSuccess) {
            OMC__LOG(&b->pool->hooks, OMC_LOG_ERROR, OMC_LOGITEM_CUDA_FAILED, "cudaMemcpy: %s", cudaGetErrorString(ce));
            return OMC_ERR_SYSTEM;
        }
        return OMC_OK;
    }
#endif
    memcpy(dst, (const uint8_t*)b->data + offset, (size_t)len);
    return OMC_OK;
}

static const struct { uint8_t size; const char* name; } omc__dtypes[OMC_DTYPE_COUNT] = {
    {0, "invalid"}, {1, "u8"}, {1, "i8"}, {2, "u16"}, {2, "i16"}, {4, "u32"}, {4, "i32"},
    {8, "u64"}, {8, "i64"}, {2, "f16"}, {2, "bf16"}, {4, "f32"}, {8, "f64"}, {1, "bool"}
};

OMNICONN_API size_t omc_dtype_size(omc_dtype d) {
    return ((int)d > 0 && d < OMC_DTYPE_COUNT) ? omc__dtypes[d].size : 0;
}

OMNICONN_API const char* omc_dtype_name(omc_dtype d) {
    return ((int)d >= 0 && d < OMC_DTYPE_COUNT) ? omc__dtypes[d].name : "invalid";
}

OMNICONN_API omc_result omc_tensor_nbytes(omc_dtype dtype, uint32_t ndim, const int64_t* shape, uint64_t* out) {
    uint64_t n;
    uint32_t i;
    if (out) *out = 0;
    if (!out || !omc_dtype_size(dtype) || ndim > OMC_MAX_DIMS || (ndim && !shape)) return OMC_ERR_INVALID_ARG;
    n = omc_dtype_size(dtype);
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0) return OMC_ERR_INVALID_ARG;
        if (shape[i] && n > UINT64_MAX / (uint64_t)shape[i]) return OMC_ERR_TOO_LARGE;
        n *= (uint64_t)shape[i];
    }
    *out = n;
    return OMC_OK;
}

OMNICONN_API omc_result omc_buffer_view(const omc_buffer* b, uint64_t byte_offset, omc_dtype dtype, uint32_t ndim,
                                        const int64_t* shape, int require_exact, omc_tensor_view* out) {
    uint64_t nbytes;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!b || !b->data) return OMC_ERR_INVALID_ARG;
    r = omc_tensor_nbytes(dtype, ndim, shape, &nbytes);
    if (r != OMC_OK) return r;
    if (byte_offset > b->size || nbytes > b->size - byte_offset) return OMC_ERR_TOO_LARGE;
    if (require_exact && nbytes != b->size - byte_offset) return OMC_ERR_TYPE;
    if (((uintptr_t)b->data + byte_offset) % omc_dtype_size(dtype)) return OMC_ERR_ALIGNMENT;
    out->data = (uint8_t*)b->data + byte_offset;
    out->dtype = dtype;
    out->ndim = ndim;
    if (ndim) memcpy(out->shape, shape, sizeof(int64_t) * ndim);
    out->nbytes = nbytes;
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: payload frames                                                      */
/* ============================================================================================== */

#define OMC__ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~(uint64_t)((a) - 1))

/* Check one segment desc and return the byte count of its data. */
OMC__PRIVATE omc_result omc__segment_bytes(const omc_segment_desc* s, uint64_t* out) {
    size_t nlen;
    if (!s->name) return OMC_ERR_INVALID_ARG;
    nlen = strlen(s->name);
    if (nlen == 0 || nlen > OMC_FRAME_MAX_NAME) return OMC_ERR_INVALID_ARG;
    if (s->dtype == OMC_DTYPE_INVALID) {
        if (s->ndim) return OMC_ERR_INVALID_ARG;
        *out = s->size;
        return OMC_OK;
    }
    {
        uint64_t n;
        omc_result r = omc_tensor_nbytes(s->dtype, s->ndim, s->shape, &n);
        if (r != OMC_OK) return r;
        if (s->size && s->size != n) return OMC_ERR_TYPE;
        *out = n;
        return OMC_OK;
    }
}

OMNICONN_API omc_result omc_frame_size(const omc_segment_desc* segs, uint32_t count, uint64_t* out_size) {
    uint64_t total, names = 0;
    uint32_t i, j;
    if (!out_size) return OMC_ERR_INVALID_ARG;
    *out_size = 0;
    if (count > OMC_FRAME_MAX_SEGMENTS || (count && !segs)) return OMC_ERR_INVALID_ARG;
    for (i = 0; i < count; i++) {
        names += strlen(segs[i].name ? segs[i].name : "");
        for (j = 0; j < i; j++)     /* names are unique: a reader looks segments up by name */
            if (segs[i].name && segs[j].name && strcmp(segs[i].name, segs[j].name) == 0) return OMC_ERR_INVALID_ARG;
    }
    total = OMC__ALIGN_UP(OMC_FRAME_HEADER_SIZE + (uint64_t)count * OMC_FRAME_ENTRY_SIZE + names, OMC_FRAME_DATA_ALIGN);
    for (i = 0; i < count; i++) {
        uint64_t n;
        omc_result r = omc__segment_bytes(&segs[i], &n);
        if (r != OMC_OK) return r;
        if (n > UINT64_MAX / 2 - total) return OMC_ERR_TOO_LARGE;
        total = OMC__ALIGN_UP(total + n, OMC_FRAME_DATA_ALIGN);
    }
    *out_size = total;
    return OMC_OK;
}

OMC__PRIVATE uint32_t omc__frame_header_crc(const uint8_t* f, uint64_t names_end) {
    uint8_t h[OMC_FRAME_HEADER_SIZE];
    uint32_t c;
    memcpy(h, f, OMC_FRAME_HEADER_SIZE);
    memset(h + 24, 0, 8);
    c = omc__crc32c(0, h, sizeof(h));
    return omc__crc32c(c, f + OMC_FRAME_HEADER_SIZE, (size_t)(names_end - OMC_FRAME_HEADER_SIZE));
}

OMC__PRIVATE uint32_t omc__frame_payload_crc(const uint8_t* f, uint32_t count) {
    uint32_t c = 0, i;
    for (i = 0; i < count; i++) {
        const uint8_t* e = f + OMC_FRAME_HEADER_SIZE + (size_t)i * OMC_FRAME_ENTRY_SIZE;
        c = omc__crc32c(c, f + omc__get_u64(e), (size_t)omc__get_u64(e + 8));
    }
    return c;
}

OMNICONN_API omc_result omc_frame_build(void* dst, uint64_t dst_size, const omc_segment_desc* segs, uint32_t count,
                                        uint32_t flags, void** seg_data_out, uint64_t* out_size) {
    uint8_t* f = (uint8_t*)dst;
    uint64_t total, names_pos, data_pos, names_end;
    uint32_t i;
    omc_result r = omc_frame_size(segs, count, &total);
    if (out_size) *out_size = total;
    if (r != OMC_OK) return r;
    if (!dst) return OMC_ERR_INVALID_ARG;
    if (dst_size < total) return OMC_ERR_TOO_LARGE;
    if (flags & ~OMC_FRAME_FLAG_PAYLOAD_CRC) return OMC_ERR_INVALID_ARG;
    names_pos = OMC_FRAME_HEADER_SIZE + (uint64_t)count * OMC_FRAME_ENTRY_SIZE;
    names_end = names_pos;
    for (i = 0; i < count; i++) names_end += strlen(segs[i].name);
    data_pos = OMC__ALIGN_UP(names_end, OMC_FRAME_DATA_ALIGN);
    memset(f, 0, (size_t)data_pos);   /* no stale pool bytes travel to a peer in the padding */
    omc__put_u32(f + 0, OMC_FRAME_MAGIC);
    omc__put_u16(f + 4, OMC_FRAME_VERSION);
    omc__put_u16(f + 6, OMC_FRAME_HEADER_SIZE);
    omc__put_u32(f + 8, count);
    omc__put_u32(f + 12, flags);
    omc__put_u64(f + 16, total);
    for (i = 0; i < count; i++) {
        uint8_t* e = f + OMC_FRAME_HEADER_SIZE + (size_t)i * OMC_FRAME_ENTRY_SIZE;
        const omc_segment_desc* s = &segs[i];
        uint32_t nlen = (uint32_t)strlen(s->name), d;
        uint64_t n, next;
        omc__segment_bytes(s, &n);
        omc__put_u64(e + 0, data_pos);
        omc__put_u64(e + 8, n);
        omc__put_u32(e + 16, (uint32_t)names_pos);
        omc__put_u16(e + 20, (uint16_t)nlen);
        e[22] = (uint8_t)(s->dtype == OMC_DTYPE_INVALID ? OMC_SEGMENT_BYTES : OMC_SEGMENT_TENSOR);
        e[23] = (uint8_t)s->dtype;
        e[24] = (uint8_t)s->ndim;
        for (d = 0; d < s->ndim; d++) omc__put_u64(e + 32 + 8 * d, (uint64_t)s->shape[d]);
        memcpy(f + names_pos, s->name, nlen);
        names_pos += nlen;
        if (s->data && n) memcpy(f + data_pos, s->data, (size_t)n);
        if (seg_data_out) seg_data_out[i] = f + data_pos;
        next = OMC__ALIGN_UP(data_pos + n, OMC_FRAME_DATA_ALIGN);
        if (next > data_pos + n) memset(f + data_pos + n, 0, (size_t)(next - data_pos - n));
        data_pos = next;
    }
    omc__put_u32(f + 24, omc__frame_header_crc(f, names_end));
    omc__put_u32(f + 28, (flags & OMC_FRAME_FLAG_PAYLOAD_CRC) ? omc__frame_payload_crc(f, count) : 0);
    return OMC_OK;
}

OMNICONN_API omc_result omc_frame_seal(void* frame, uint64_t size) {
    omc_frame fr;
    omc_result r = omc_frame_decode(frame, size, 0, &fr);
    if (r != OMC_OK) return r;
    if (fr.flags & OMC_FRAME_FLAG_PAYLOAD_CRC) omc__put_u32(fr.base + 28, omc__frame_payload_crc(fr.base, fr.count));
    return OMC_OK;
}

/* Every check a segment entry must pass, against a frame of `total` bytes whose names occupy
   [names_start, names_end). Used by decode and again by every accessor (the bytes may live in
   memory another process can write, so nothing validated once is trusted later). */
OMC__PRIVATE omc_result omc__frame_entry(const uint8_t* f, uint64_t total, uint32_t i, uint64_t names_start,
                                         uint64_t names_end, omc_segment* out) {
    const uint8_t* e = f + OMC_FRAME_HEADER_SIZE + (size_t)i * OMC_FRAME_ENTRY_SIZE;
    uint64_t off = omc__get_u64(e), size = omc__get_u64(e + 8);
    uint32_t noff = omc__get_u32(e + 16), nlen = omc__get_u16(e + 20), d;
    uint8_t kind = e[22], dtype = e[23], ndim = e[24];
    for (d = 25; d < 32; d++) if (e[d]) return OMC_ERR_MALFORMED;
    if (nlen == 0 || nlen > OMC_FRAME_MAX_NAME || noff < names_start || noff > names_end || nlen > names_end - noff)
        return OMC_ERR_MALFORMED;
    if (off % OMC_FRAME_DATA_ALIGN || off < names_end || off > total || size > total - off) return OMC_ERR_MALFORMED;
    if (ndim > OMC_MAX_DIMS) return OMC_ERR_MALFORMED;
    memset(out, 0, sizeof(*out));
    if (kind == OMC_SEGMENT_BYTES) {
        if (dtype || ndim) return OMC_ERR_MALFORMED;
    } else if (kind == OMC_SEGMENT_TENSOR) {
        uint64_t n;
        if (dtype == 0 || dtype >= OMC_DTYPE_COUNT) return OMC_ERR_MALFORMED;
        for (d = 0; d < ndim; d++) {
            uint64_t v = omc__get_u64(e + 32 + 8 * d);
            if (v > (uint64_t)INT64_MAX) return OMC_ERR_MALFORMED;
            out->shape[d] = (int64_t)v;
        }
        if (omc_tensor_nbytes((omc_dtype)dtype, ndim, out->shape, &n) != OMC_OK || n != size) return OMC_ERR_MALFORMED;
    } else return OMC_ERR_MALFORMED;
    for (d = ndim; d < OMC_MAX_DIMS; d++) if (omc__get_u64(e + 32 + 8 * d)) return OMC_ERR_MALFORMED;
    out->name = (const char*)f + noff;
    out->name_len = nlen;
    out->kind = (omc_segment_kind)kind;
    out->dtype = (omc_dtype)dtype;
    out->ndim = ndim;
    out->data = (void*)(f + off);
    out->size = size;
    return OMC_OK;
}

/* Where the names end: the sum of the name lengths after the table (bounded by total). */
OMC__PRIVATE omc_result omc__frame_names_end(const uint8_t* f, uint64_t total, uint32_t count, uint64_t* out) {
    uint64_t end = OMC_FRAME_HEADER_SIZE + (uint64_t)count * OMC_FRAME_ENTRY_SIZE;
    uint32_t i;
    if (end > total) return OMC_ERR_MALFORMED;
    for (i = 0; i < count; i++) end += omc__get_u16(f + OMC_FRAME_HEADER_SIZE + (size_t)i * OMC_FRAME_ENTRY_SIZE + 20);
    if (end > total) return OMC_ERR_MALFORMED;
    *out = end;
    return OMC_OK;
}

OMNICONN_API omc_result omc_frame_decode(const void* src, uint64_t size, int verify_payload, omc_frame* out) {
    const uint8_t* f = (const uint8_t*)src;
    uint64_t total, names_start, names_end;
    uint32_t count, flags, i;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!src) return OMC_ERR_INVALID_ARG;
    if (size < OMC_FRAME_HEADER_SIZE || omc__get_u32(f) != OMC_FRAME_MAGIC) return OMC_ERR_MALFORMED;
    if (omc__get_u16(f + 4) != OMC_FRAME_VERSION) return OMC_ERR_VERSION;
    if (omc__get_u16(f + 6) != OMC_FRAME_HEADER_SIZE) return OMC_ERR_MALFORMED;
    count = omc__get_u32(f + 8);
    flags = omc__get_u32(f + 12);
    total = omc__get_u64(f + 16);
    if (count > OMC_FRAME_MAX_SEGMENTS || (flags & ~OMC_FRAME_FLAG_PAYLOAD_CRC) || total > size || total < OMC_FRAME_HEADER_SIZE)
        return OMC_ERR_MALFORMED;
    /* the payload CRC field is outside the header CRC (seal rewrites it); without the flag it
       must be zero, or a flipped byte there would pass unnoticed */
    if (!(flags & OMC_FRAME_FLAG_PAYLOAD_CRC) && omc__get_u32(f + 28) != 0) return OMC_ERR_MALFORMED;
    r = omc__frame_names_end(f, total, count, &names_end);
    if (r != OMC_OK) return r;
    if (omc__frame_header_crc(f, names_end) != omc__get_u32(f + 24)) return OMC_ERR_CHECKSUM;
    names_start = OMC_FRAME_HEADER_SIZE + (uint64_t)count * OMC_FRAME_ENTRY_SIZE;
    for (i = 0; i < count; i++) {
        omc_segment s;
        r = omc__frame_entry(f, total, i, names_start, names_end, &s);
        if (r != OMC_OK) return r;
    }
    if (verify_payload && (flags & OMC_FRAME_FLAG_PAYLOAD_CRC) && omc__frame_payload_crc(f, count) != omc__get_u32(f + 28))
        return OMC_ERR_CHECKSUM;
    out->base = (uint8_t*)(uintptr_t)f;
    out->size = total;
    out->count = count;
    out->flags = flags;
    return OMC_OK;
}

OMNICONN_API omc_result omc_frame_segment(const omc_frame* fr, uint32_t index, omc_segment* out) {
    uint64_t names_end;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));       /* on any error the caller sees an empty segment */
    if (!fr || !fr->base) return OMC_ERR_INVALID_ARG;
    if (index >= fr->count) return OMC_ERR_NOT_FOUND;
    r = omc__frame_names_end(fr->base, fr->size, fr->count, &names_end);
    if (r != OMC_OK) return r;
    return omc__frame_entry(fr->base, fr->size, index, OMC_FRAME_HEADER_SIZE + (uint64_t)fr->count * OMC_FRAME_ENTRY_SIZE,
                            names_end, out);
}

OMNICONN_API omc_result omc_frame_find(const omc_frame* fr, const char* name, omc_segment* out) {
    uint32_t i;
    size_t len;
    if (!fr || !name || !out) return OMC_ERR_INVALID_ARG;
    len = strlen(name);
    for (i = 0; i < fr->count; i++) {
        omc_result r = omc_frame_segment(fr, i, out);
        if (r != OMC_OK) return r;
        if (out->name_len == len && memcmp(out->name, name, len) == 0) return OMC_OK;
    }
    memset(out, 0, sizeof(*out));
    return OMC_ERR_NOT_FOUND;
}

/* ============================================================================================== */
/* [SECTION] Implementation: metadata envelope                                                   */
/* ============================================================================================== */

OMNICONN_API void omc_meta_free(omc_meta* meta) {
    if (!meta) return;
    if (meta->data) OMNICONN_FREE(meta->data);
    meta->data = NULL;
    meta->size = 0;
}

/* Start an envelope: header + key written, body left for the caller (*body_out), seal later.
   Metadata blobs are allocated with OMNICONN_MALLOC: the user frees them with omc_meta_free. */
OMC__PRIVATE omc_result omc__meta_begin(omc_transport t, uint32_t flags, uint64_t data_size, const char* qkey, uint32_t qlen,
                                        uint32_t body_len, omc_meta* out, uint8_t** body_out) {
    uint8_t* m;
    uint32_t total;
    if (qlen == 0 || qlen >= OMC_KEY_MAX || body_len > OMC_META_MAX_BODY) return OMC_ERR_INVALID_ARG;
    total = OMC_META_HEADER_SIZE + qlen + body_len;
    m = (uint8_t*)OMNICONN_MALLOC(total);
    if (!m) return OMC_ERR_NO_MEMORY;
    memset(m, 0, OMC_META_HEADER_SIZE);
    omc__put_u32(m, OMC_META_MAGIC);
    m[4] = OMC_META_VERSION;
    m[5] = (uint8_t)t;
    omc__put_u16(m + 6, (uint16_t)flags);
    omc__put_u64(m + 8, data_size);
    omc__put_u64(m + 16, omc_incarnation());
    omc__put_u16(m + 24, (uint16_t)qlen);
    omc__put_u32(m + 28, body_len);
    memcpy(m + OMC_META_HEADER_SIZE, qkey, qlen);
    out->data = m;
    out->size = total;
    if (body_out) *body_out = m + OMC_META_HEADER_SIZE + qlen;
    return OMC_OK;
}

OMC__PRIVATE uint32_t omc__meta_crc(const uint8_t* m, uint32_t size) {
    uint8_t h[OMC_META_HEADER_SIZE];
    memcpy(h, m, sizeof(h));
    memset(h + 32, 0, 4);
    return omc__crc32c(omc__crc32c(0, h, sizeof(h)), m + OMC_META_HEADER_SIZE, size - OMC_META_HEADER_SIZE);
}

OMC__PRIVATE void omc__meta_seal(omc_meta* meta) { omc__put_u32(meta->data + 32, omc__meta_crc(meta->data, meta->size)); }

OMNICONN_API omc_result omc_meta_parse(const void* data, size_t size, omc_meta_info* out) {
    const uint8_t* m = (const uint8_t*)data;
    uint32_t klen, blen;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!data) return OMC_ERR_INVALID_ARG;
    if (size < OMC_META_HEADER_SIZE || size > OMC_META_MAX_SIZE || omc__get_u32(m) != OMC_META_MAGIC) return OMC_ERR_MALFORMED;
    if (m[4] != OMC_META_VERSION) return OMC_ERR_VERSION;
    klen = omc__get_u16(m + 24);
    blen = omc__get_u32(m + 28);
    if (m[5] == OMC_TRANSPORT_NONE || m[5] > OMC_TRANSPORT_RDMA || klen == 0 || klen >= OMC_KEY_MAX ||
        blen > OMC_META_MAX_BODY || (size_t)OMC_META_HEADER_SIZE + klen + blen != size ||
        omc__get_u16(m + 26) || omc__get_u32(m + 36) || (omc__get_u16(m + 6) & ~(OMC_META_FLAG_INLINE | OMC_META_FLAG_FRAME)))
        return OMC_ERR_MALFORMED;
    if (omc__meta_crc(m, (uint32_t)size) != omc__get_u32(m + 32)) return OMC_ERR_CHECKSUM;
    out->transport = (omc_transport)m[5];
    out->flags = omc__get_u16(m + 6);
    out->data_size = omc__get_u64(m + 8);
    out->incarnation = omc__get_u64(m + 16);
    out->key = (const char*)m + OMC_META_HEADER_SIZE;
    out->key_len = klen;
    out->body = m + OMC_META_HEADER_SIZE + klen;
    out->body_len = blen;
    return OMC_OK;
}

OMNICONN_API size_t omc_meta_text_size(size_t meta_size) {
    return sizeof(OMC_META_TEXT_PREFIX) - 1 + omc__b64_encoded_len(meta_size) + 1;
}

OMNICONN_API omc_result omc_meta_to_text(const void* data, size_t size, char* out, size_t out_size) {
    omc_meta_info info;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    r = omc_meta_parse(data, size, &info);
    if (r != OMC_OK) return r;
    if (out_size < omc_meta_text_size(size)) return OMC_ERR_TOO_LARGE;
    memcpy(out, OMC_META_TEXT_PREFIX, sizeof(OMC_META_TEXT_PREFIX) - 1);
    omc__b64_encode((const uint8_t*)data, size, out + sizeof(OMC_META_TEXT_PREFIX) - 1);
    return OMC_OK;
}

OMNICONN_API omc_result omc_meta_from_text(const char* text, size_t len, omc_meta* out) {
    const size_t plen = sizeof(OMC_META_TEXT_PREFIX) - 1;
    omc_meta_info info;
    uint8_t* buf;
    long n;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    out->data = NULL;
    out->size = 0;
    if (!text || len < plen || memcmp(text, OMC_META_TEXT_PREFIX, plen) != 0) return OMC_ERR_MALFORMED;
    if (len - plen > omc__b64_encoded_len(OMC_META_MAX_SIZE)) return OMC_ERR_TOO_LARGE;
    buf = (uint8_t*)OMNICONN_MALLOC((len - plen) / 4 * 3 + 3);
    if (!buf) return OMC_ERR_NO_MEMORY;
    n = omc__b64_decode(text + plen, len - plen, buf);
    r = n < 0 ? OMC_ERR_MALFORMED : omc_meta_parse(buf, (size_t)n, &info);
    if (r != OMC_OK) { OMNICONN_FREE(buf); return r; }
    out->data = buf;
    out->size = (uint32_t)n;
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the connector contract                                             */
/* ============================================================================================== */
/*
    Every connector is an omc_conn: this common part (role, counters, last error, reference
    count) plus a table of transport functions and a pointer to the transport's own state.
    The public omc_conn_* functions check roles and arguments, qualify the key, parse metadata,
    count, and then call the table. Transports only implement the transfer itself.

    Lifetime: the handle holds one reference and every view handed out by get holds one more,
    so close() can tear down sockets and threads at once while the memory under outstanding
    views stays valid until the last omc_buffer_release(); only then is destroy called.
*/

typedef struct omc__conn_vtable {
    omc_transport transport;
    /* put: qkey is the qualified key. meta_out is never NULL. */
    omc_result (*put)(omc_conn* c, const char* qkey, uint32_t qlen, const omc_payload* p, omc_meta* meta_out);
    /* get: meta is NULL for a metadata-less get, else already validated (transport and key match).
       max_size != 0: if the payload is larger, return OMC_ERR_TOO_LARGE WITHOUT consuming it and
       set out->size to the payload size. */
    omc_result (*get)(omc_conn* c, const char* qkey, uint32_t qlen, const omc_meta_info* meta, omc_time_ns deadline,
                      uint64_t max_size, omc_buffer* out);
    omc_result (*alloc)(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out);
    omc_result (*cleanup)(omc_conn* c, const char* qkey, uint32_t qlen);
    void       (*health)(omc_conn* c, omc_health* h);      /* fill live_entries, pool_*, state */
    uint64_t   (*sweep)(omc_conn* c);
    void       (*close)(omc_conn* c);                       /* once, from omc_conn_close */
    void       (*destroy)(omc_conn* c);                     /* once, when the last reference goes */
} omc__conn_vtable;

struct omc_conn {
    const omc__conn_vtable* vt;
    void* impl;
    omc_hooks hooks;
    omc_role role;
    int closed;                 /* atomic */
    uint32_t refs;              /* atomic */
    uint64_t puts, gets, releases, bytes_put, bytes_got, errors, timeouts, ttl_reclaims;   /* atomic */
    pthread_mutex_t err_mu;
    omc_result last_error;
    char last_error_text[160];
};

OMC__PRIVATE omc_result omc__conn_create(const omc_hooks* hooks, const omc__conn_vtable* vt, omc_role role, omc_conn** out) {
    omc_conn* c = (omc_conn*)omc__calloc(hooks, sizeof(omc_conn));
    if (!c) return OMC_ERR_NO_MEMORY;
    c->vt = vt;
    c->hooks = *hooks;
    c->role = role == OMC_ROLE_DEFAULT ? OMC_ROLE_DUAL : role;
    c->refs = 1;
    if (pthread_mutex_init(&c->err_mu, NULL) != 0) { omc__free(hooks, c); return OMC_ERR_SYSTEM; }
    *out = c;
    return OMC_OK;
}

OMC__PRIVATE void omc__conn_ref(omc_conn* c) { omc__add(&c->refs, 1u); }

OMC__PRIVATE void omc__conn_unref(omc_conn* c) {
    if (omc__sub(&c->refs, 1u) == 0) {
        omc_hooks hooks = c->hooks;
        if (c->vt->destroy) c->vt->destroy(c);
        pthread_mutex_destroy(&c->err_mu);
        omc__free(&hooks, c);
    }
}

/* Remember the last failure (health() reports it) and log it. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
OMC__PRIVATE void omc__conn_fail(omc_conn* c, omc_result r, const char* fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&c->err_mu);
    c->last_error = r;
    va_start(ap, fmt);
    vsnprintf(c->last_error_text, sizeof(c->last_error_text), fmt, ap);
    va_end(ap);
    OMC__LOG(&c->hooks, r == OMC_ERR_TIMEOUT || r == OMC_ERR_NOT_FOUND ? OMC_LOG_INFO : OMC_LOG_WARN,
             OMC_LOGITEM_CONN_ERROR, "%s", c->last_error_text);
    pthread_mutex_unlock(&c->err_mu);
}

OMC__PRIVATE void omc__conn_count_error(omc_conn* c, omc_result r, const char* op, const char* qkey, uint32_t qlen) {
    char printable[OMC_KEY_MAX];
    uint32_t i;
    omc__add(&c->errors, 1u);
    if (r == OMC_ERR_TIMEOUT) omc__add(&c->timeouts, 1u);
    for (i = 0; i < qlen && i < OMC_KEY_MAX - 1; i++) printable[i] = qkey[i] == '\x1f' ? '/' : qkey[i];
    printable[i] = '\0';
    omc__conn_fail(c, r, "%s %s: %s", op, printable, omc_result_str(r));
}

OMNICONN_API omc_result omc_qualify_key(const char* from_stage, const char* to_stage, const char* key,
                                        char out[OMC_KEY_MAX], uint32_t* out_len) {
    const char* parts[3];
    size_t pos = 0, i;
    parts[0] = from_stage ? from_stage : "";
    parts[1] = to_stage ? to_stage : "";
    parts[2] = key;
    if (!out || !key || !key[0]) return OMC_ERR_INVALID_ARG;
    for (i = 0; i < 3; i++) {
        size_t n = strlen(parts[i]);
        if (memchr(parts[i], 0x1f, n) || pos + n + (i < 2 ? 1 : 0) >= OMC_KEY_MAX) return OMC_ERR_INVALID_ARG;
        memcpy(out + pos, parts[i], n);
        pos += n;
        if (i < 2) out[pos++] = 0x1f;
    }
    out[pos] = '\0';
    if (out_len) *out_len = (uint32_t)pos;
    return OMC_OK;
}

/* The checks every public call shares. */
OMC__PRIVATE omc_result omc__conn_enter(omc_conn* c, omc_role need, const char* from, const char* to, const char* key,
                                        char qkey[OMC_KEY_MAX], uint32_t* qlen) {
    if (omc__load(&c->closed)) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_CONN_CLOSED, "connector is closed");
        return OMC_ERR_CLOSED;
    }
    if (need != OMC_ROLE_DEFAULT && c->role != OMC_ROLE_DUAL && c->role != need) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_CONN_ROLE, "a %s connector cannot %s",
                 c->role == OMC_ROLE_SENDER ? "sender" : "receiver", need == OMC_ROLE_SENDER ? "put" : "get");
        return OMC_ERR_WRONG_ROLE;
    }
    if (omc_qualify_key(from, to, key, qkey, qlen) != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_CONN_KEY, "key must be non-empty, without 0x1F, and fit %d bytes with both stage names",
                 OMC_KEY_MAX - 1);
        return OMC_ERR_INVALID_ARG;
    }
    return OMC_OK;
}

OMNICONN_API omc_result omc_conn_put(omc_conn* c, const char* from, const char* to, const char* key,
                                     const omc_payload* p, omc_meta* meta_out) {
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    omc_meta tmp = {NULL, 0};
    uint64_t size;
    omc_result r;
    if (meta_out) { meta_out->data = NULL; meta_out->size = 0; }
    if (!c || !p) return OMC_ERR_INVALID_ARG;
    r = omc__conn_enter(c, OMC_ROLE_SENDER, from, to, key, qkey, &qlen);
    if (r == OMC_OK && !p->buffer && !p->data && p->size) r = OMC_ERR_INVALID_ARG;
    if (r == OMC_OK && p->buffer && p->size > p->buffer->size) r = OMC_ERR_TOO_LARGE;
    if (r != OMC_OK) { if (r != OMC_ERR_CLOSED) omc__add(&c->errors, 1u); return r; }
    size = p->buffer ? (p->size ? p->size : p->buffer->size) : p->size;
    r = c->vt->put(c, qkey, qlen, p, &tmp);
    if (r != OMC_OK) {
        omc_meta_free(&tmp);
        omc__conn_count_error(c, r, "put", qkey, qlen);
        return r;
    }
    omc__add(&c->puts, 1u);
    omc__add(&c->bytes_put, size);
    if (meta_out) *meta_out = tmp;
    else omc_meta_free(&tmp);
    return OMC_OK;
}

/* Shared by get and get_copy: validate metadata against the key and the transport. */
OMC__PRIVATE omc_result omc__conn_get(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                      size_t meta_size, omc_time_ns deadline, uint64_t max_size, omc_buffer* out) {
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    omc_meta_info info;
    omc_result r;
    memset(out, 0, sizeof(*out));
    r = omc__conn_enter(c, OMC_ROLE_RECEIVER, from, to, key, qkey, &qlen);
    if (r != OMC_OK) { if (r != OMC_ERR_CLOSED) omc__add(&c->errors, 1u); return r; }
    if (meta) {
        r = omc_meta_parse(meta, meta_size, &info);
        if (r == OMC_OK && info.transport != c->vt->transport) r = OMC_ERR_TYPE;
        if (r == OMC_OK && (info.key_len != qlen || memcmp(info.key, qkey, qlen) != 0)) r = OMC_ERR_INVALID_ARG;
        if (r != OMC_OK) {
            OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_META_MALFORMED, "metadata rejected: %s", omc_result_str(r));
            omc__conn_count_error(c, r, "get", qkey, qlen);
            return r;
        }
    }
    r = c->vt->get(c, qkey, qlen, meta ? &info : NULL, deadline, max_size, out);
    if (r != OMC_OK) {
        uint64_t need = out->size;
        if (r != OMC_ERR_TOO_LARGE) omc__conn_count_error(c, r, "get", qkey, qlen);
        memset(out, 0, sizeof(*out));
        out->size = need;
        return r;
    }
    omc__add(&c->gets, 1u);
    omc__add(&c->bytes_got, out->size);
    return OMC_OK;
}

OMNICONN_API omc_result omc_conn_get(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                     size_t meta_size, omc_time_ns deadline, omc_buffer* out) {
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!c) return OMC_ERR_INVALID_ARG;
    r = omc__conn_get(c, from, to, key, meta, meta_size, deadline, 0, out);
    if (r != OMC_OK) out->size = 0;
    return r;
}

OMNICONN_API omc_result omc_conn_get_copy(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                          size_t meta_size, omc_time_ns deadline, void* dst, uint64_t dst_size, uint64_t* out_size) {
    omc_buffer b;
    omc_result r;
    if (out_size) *out_size = 0;
    if (!c || (!dst && dst_size)) return OMC_ERR_INVALID_ARG;
    /* max_size 0 means "no limit" to a transport, so an empty destination asks for at most 1 byte */
    r = omc__conn_get(c, from, to, key, meta, meta_size, deadline, dst_size ? dst_size : 1, &b);
    if (r == OMC_ERR_TOO_LARGE) { if (out_size) *out_size = b.size; return r; }
    if (r != OMC_OK) return r;
    if (b.size > dst_size) {    /* a transport that could not check first: keep the data safe */
        if (out_size) *out_size = b.size;
        omc_buffer_release(&b);
        return OMC_ERR_TOO_LARGE;
    }
    r = omc_buffer_copy_out(&b, 0, dst, b.size);
    if (out_size) *out_size = b.size;
    {
        omc_result rr = omc_buffer_release(&b);
        if (r == OMC_OK) r = rr;
    }
    return r;
}

OMNICONN_API omc_result omc_conn_alloc(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!c) return OMC_ERR_INVALID_ARG;
    if (omc__load(&c->closed)) return OMC_ERR_CLOSED;
    if (!c->vt->alloc) return OMC_ERR_UNAVAILABLE;
    return c->vt->alloc(c, size, deadline, out);
}

OMNICONN_API omc_result omc_conn_cleanup(omc_conn* c, const char* from, const char* to, const char* key) {
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    omc_result r;
    if (!c) return OMC_ERR_INVALID_ARG;
    r = omc__conn_enter(c, OMC_ROLE_DEFAULT, from, to, key, qkey, &qlen);
    if (r != OMC_OK) return r;
    return c->vt->cleanup ? c->vt->cleanup(c, qkey, qlen) : OMC_ERR_UNAVAILABLE;
}

OMNICONN_API omc_result omc_conn_health(omc_conn* c, omc_health* h) {
    if (!h) return OMC_ERR_INVALID_ARG;
    memset(h, 0, sizeof(*h));
    if (!c) return OMC_ERR_INVALID_ARG;
    h->transport = c->vt->transport;
    h->role = c->role;
    h->puts = omc__load(&c->puts);
    h->gets = omc__load(&c->gets);
    h->releases = omc__load(&c->releases);
    h->bytes_put = omc__load(&c->bytes_put);
    h->bytes_got = omc__load(&c->bytes_got);
    h->errors = omc__load(&c->errors);
    h->timeouts = omc__load(&c->timeouts);
    h->ttl_reclaims = omc__load(&c->ttl_reclaims);
    pthread_mutex_lock(&c->err_mu);
    h->last_error = c->last_error;
    memcpy(h->last_error_text, c->last_error_text, sizeof(h->last_error_text));
    pthread_mutex_unlock(&c->err_mu);
    h->state = OMC_CONN_HEALTHY;
    if (c->vt->health) c->vt->health(c, h);
    if (omc__load(&c->closed)) h->state = OMC_CONN_CLOSED;
    return OMC_OK;
}

OMNICONN_API uint64_t omc_conn_sweep(omc_conn* c) {
    if (!c || omc__load(&c->closed) || !c->vt->sweep) return 0;
    return c->vt->sweep(c);
}

OMNICONN_API void omc_conn_close(omc_conn* c) {
    if (!c) return;
    if (__atomic_exchange_n(&c->closed, 1, __ATOMIC_ACQ_REL)) return;   /* idempotent */
    if (c->vt->close) c->vt->close(c);
}

OMNICONN_API void omc_conn_destroy(omc_conn* c) {
    if (!c) return;
    omc_conn_close(c);
    omc__conn_unref(c);
}

OMNICONN_API omc_transport omc_conn_transport(const omc_conn* c) { return c ? c->vt->transport : OMC_TRANSPORT_NONE; }

/* ============================================================================================== */
/* [SECTION] Implementation: the same-process connector                                         */
/* ============================================================================================== */
/*
    A key table (qualified key -> entry) and an id table (entry id -> entry), one mutex, one
    condition variable that wakes metadata-less getters when a key appears. An entry owns one
    range of the connector's pool. It leaves the key table when its last reader has taken it
    (or by cleanup/TTL/close) and frees its range when, in addition, no view is outstanding.
*/

typedef struct omc__local_entry {
    uint64_t id;
    omc_range range;
    uint64_t size;
    uint32_t flags;
    uint32_t readers_left;
    uint32_t views;
    int in_keys;
    omc_time_ns expires;        /* 0 = never */
    uint32_t qlen;
    char qkey[OMC_KEY_MAX];
} omc__local_entry;

typedef struct omc__local {
    omc_conn* conn;
    omc_pool* pool;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    omc__smap keys;
    omc__smap ids;              /* key: the 8 bytes of the id */
    uint64_t next_id;
    int64_t default_ttl_ms;
    omc_time_ns next_sweep;
} omc__local;

OMC__PRIVATE omc__local_entry* omc__local_by_id(omc__local* L, uint64_t id) {
    return (omc__local_entry*)omc__smap_get(&L->ids, (const char*)&id, sizeof(id));
}

/* Forget an entry completely (caller holds mu; entry is out of the key table, no views). */
OMC__PRIVATE void omc__local_free_entry(omc__local* L, omc__local_entry* e) {
    omc_alloc_free(L->pool->alloc, e->range);
    omc__smap_del(&L->ids, &L->conn->hooks, (const char*)&e->id, sizeof(e->id));
    omc__free(&L->conn->hooks, e);
}

/* Take an entry out of the key table (no new readers); free it now if nobody holds a view. */
OMC__PRIVATE void omc__local_retire(omc__local* L, omc__local_entry* e) {
    if (e->in_keys) {
        omc__smap_del(&L->keys, &L->conn->hooks, e->qkey, e->qlen);
        e->in_keys = 0;
    }
    if (e->views == 0) omc__local_free_entry(L, e);
}

OMC__PRIVATE uint64_t omc__local_sweep_locked(omc__local* L, omc_time_ns now) {
    uint32_t it = 0;
    void* v;
    uint64_t n = 0;
    /* collect first: retiring deletes from the table we iterate */
    for (;;) {
        omc__local_entry* victim = NULL;
        it = 0;
        while (omc__smap_next(&L->keys, &it, NULL, NULL, &v)) {
            omc__local_entry* e = (omc__local_entry*)v;
            if (e->expires && now >= e->expires) { victim = e; break; }
        }
        if (!victim) break;
        OMC__LOG(&L->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_CONN_TTL_RECLAIM, "TTL reclaimed entry %llu (%llu bytes, %u readers left, %u views held)",
                 (unsigned long long)victim->id, (unsigned long long)victim->size, victim->readers_left, victim->views);
        omc__local_retire(L, victim);
        n++;
    }
    L->next_sweep = now + 100000000LL;  /* at most every 100 ms from the hot path */
    if (n) omc__add(&L->conn->ttl_reclaims, n);
    return n;
}

OMC__PRIVATE void omc__local_maybe_sweep(omc__local* L) {
    omc_time_ns now = omc_now_ns();
    if (now >= L->next_sweep) omc__local_sweep_locked(L, now);
}

static omc_result omc__local_release(omc_buffer* b) {
    omc__local* L = (omc__local*)b->owner;
    omc_conn* c;
    omc__local_entry* e;
    omc_result r = OMC_OK;
    if (!L) return OMC_ERR_INVALID_ARG;
    c = L->conn;
    pthread_mutex_lock(&L->mu);
    e = omc__local_by_id(L, b->cookie[0]);
    if (!e || e->views == 0) r = OMC_ERR_STALE;     /* a copy of a handle already released */
    else {
        e->views--;
        if (!e->in_keys && e->views == 0) omc__local_free_entry(L, e);
    }
    pthread_mutex_unlock(&L->mu);
    if (r != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_ALLOC_BAD_FREE, "release of a view that is no longer held");
        return r;
    }
    omc__add(&c->releases, 1u);
    omc__conn_unref(c);     /* may destroy the connector: nothing after this line */
    return OMC_OK;
}

static omc_result omc__local_put(omc_conn* c, const char* qkey, uint32_t qlen, const omc_payload* p, omc_meta* meta_out) {
    omc__local* L = (omc__local*)c->impl;
    omc__local_entry* e;
    omc_range range;
    uint64_t size;
    uint8_t* body;
    omc_result r;
    int64_t ttl = p->ttl_ms ? p->ttl_ms : L->default_ttl_ms;
    if (p->buffer) {    /* zero copy: the buffer must be a live range of our own pool */
        if (p->buffer->pool != L->pool || p->buffer->release_fn) return OMC_ERR_INVALID_ARG;
        r = omc_alloc_check(L->pool->alloc, p->buffer->range);
        if (r != OMC_OK) return r;
        range = p->buffer->range;
        size = p->size ? p->size : p->buffer->size;
    } else {
        size = p->size;
        r = omc_alloc_alloc(L->pool->alloc, size ? size : 1, &range);
        if (r != OMC_OK) return r;
        if (size) memcpy(L->pool->base + range.offset, p->data, (size_t)size);
    }
    e = (omc__local_entry*)omc__calloc(&c->hooks, sizeof(omc__local_entry));
    if (!e) { if (!p->buffer) omc_alloc_free(L->pool->alloc, range); return OMC_ERR_NO_MEMORY; }
    e->range = range;
    e->size = size;
    e->flags = (p->flags & OMC_PAYLOAD_FRAME) ? OMC_BUFFER_FRAME : 0;
    e->readers_left = p->readers ? p->readers : 1;
    if (e->readers_left > 1) e->flags |= OMC_BUFFER_READONLY;
    e->expires = ttl > 0 ? omc_deadline_after_ms(ttl) : 0;
    e->qlen = qlen;
    memcpy(e->qkey, qkey, qlen);
    pthread_mutex_lock(&L->mu);
    omc__local_maybe_sweep(L);
    e->id = ++L->next_id;
    r = omc__smap_put(&L->keys, &c->hooks, qkey, qlen, e);
    if (r == OMC_OK) {
        r = omc__smap_put(&L->ids, &c->hooks, (const char*)&e->id, sizeof(e->id), e);
        if (r != OMC_OK) omc__smap_del(&L->keys, &c->hooks, qkey, qlen);
    }
    if (r == OMC_OK) {
        e->in_keys = 1;
        r = omc__meta_begin(OMC_TRANSPORT_LOCAL, e->flags & OMC_BUFFER_FRAME ? OMC_META_FLAG_FRAME : 0, size, qkey, qlen, 16, meta_out, &body);
        if (r == OMC_OK) {
            omc__put_u64(body, e->id);
            omc__put_u32(body + 8, range.generation);
            omc__put_u32(body + 12, 0);
            omc__meta_seal(meta_out);
            pthread_cond_broadcast(&L->cv);
        } else {
            omc__smap_del(&L->keys, &c->hooks, qkey, qlen);
            omc__smap_del(&L->ids, &c->hooks, (const char*)&e->id, sizeof(e->id));
        }
    }
    pthread_mutex_unlock(&L->mu);
    if (r != OMC_OK) {
        if (!p->buffer) omc_alloc_free(L->pool->alloc, range);
        omc__free(&c->hooks, e);
        return r;
    }
    if (p->buffer) memset(p->buffer, 0, sizeof(*p->buffer));  /* ownership moved to the entry */
    return OMC_OK;
}

static omc_result omc__local_get(omc_conn* c, const char* qkey, uint32_t qlen, const omc_meta_info* meta,
                                 omc_time_ns deadline, uint64_t max_size, omc_buffer* out) {
    omc__local* L = (omc__local*)c->impl;
    omc__local_entry* e;
    omc_result r = OMC_OK;
    uint64_t want_id = 0;
    if (meta) {
        if (meta->body_len != 16) return OMC_ERR_MALFORMED;
        want_id = omc__get_u64(meta->body);
    }
    pthread_mutex_lock(&L->mu);
    for (;;) {
        if (omc__load(&c->closed)) { r = OMC_ERR_CLOSED; break; }
        omc__local_maybe_sweep(L);
        e = (omc__local_entry*)omc__smap_get(&L->keys, qkey, qlen);
        if (e) {
            if (want_id && e->id != want_id) r = want_id < e->id ? OMC_ERR_STALE : OMC_ERR_NOT_FOUND;
            break;
        }
        /* with metadata the put already happened: absent means consumed, cleaned up or expired */
        if (meta) { r = OMC_ERR_NOT_FOUND; break; }
        if (deadline != OMC_WAIT_FOREVER && omc_now_ns() >= deadline) { r = OMC_ERR_TIMEOUT; break; }
        omc__cond_wait_until(&L->cv, &L->mu, deadline);
    }
    if (r == OMC_OK && max_size && e->size > max_size) { out->size = e->size; r = OMC_ERR_TOO_LARGE; }
    if (r == OMC_OK) {
        e->views++;
        if (--e->readers_left == 0) omc__local_retire(L, e);   /* views > 0: stays allocated */
        out->data = L->pool->base + e->range.offset;
        out->size = e->size;
        out->pool = L->pool;
        out->range = e->range;
        out->flags = e->flags;
        out->release_fn = omc__local_release;
        out->owner = L;
        out->cookie[0] = e->id;
        omc__conn_ref(c);
    }
    pthread_mutex_unlock(&L->mu);
    return r;
}

static omc_result omc__local_alloc(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    omc__local* L = (omc__local*)c->impl;
    return omc_pool_alloc_buffer_wait(L->pool, size, deadline, out);
}

static omc_result omc__local_cleanup(omc_conn* c, const char* qkey, uint32_t qlen) {
    omc__local* L = (omc__local*)c->impl;
    omc__local_entry* e;
    pthread_mutex_lock(&L->mu);
    e = (omc__local_entry*)omc__smap_get(&L->keys, qkey, qlen);
    if (e) omc__local_retire(L, e);
    pthread_mutex_unlock(&L->mu);
    return e ? OMC_OK : OMC_ERR_NOT_FOUND;
}

static void omc__local_health(omc_conn* c, omc_health* h) {
    omc__local* L = (omc__local*)c->impl;
    omc_alloc_stats st;
    pthread_mutex_lock(&L->mu);
    h->live_entries = L->keys.count;
    pthread_mutex_unlock(&L->mu);
    omc_alloc_get_stats(L->pool->alloc, &st);
    h->pool_capacity = st.capacity;
    h->pool_in_use = st.bytes_in_use;
}

static uint64_t omc__local_sweep(omc_conn* c) {
    omc__local* L = (omc__local*)c->impl;
    uint64_t n;
    pthread_mutex_lock(&L->mu);
    n = omc__local_sweep_locked(L, omc_now_ns());
    pthread_mutex_unlock(&L->mu);
    return n;
}

static void omc__local_close(omc_conn* c) {
    omc__local* L = (omc__local*)c->impl;
    uint32_t it;
    void* v;
    pthread_mutex_lock(&L->mu);
    for (;;) {      /* retire every entry; views still out keep theirs until released */
        it = 0;
        if (!omc__smap_next(&L->keys, &it, NULL, NULL, &v)) break;
        omc__local_retire(L, (omc__local_entry*)v);
    }
    pthread_cond_broadcast(&L->cv);     /* waiting getters see closed and leave */
    pthread_mutex_unlock(&L->mu);
}

static void omc__local_destroy(omc_conn* c) {
    omc__local* L = (omc__local*)c->impl;
    omc__smap_free(&L->keys, &c->hooks);
    omc__smap_free(&L->ids, &c->hooks);
    omc_pool_destroy(L->pool);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    omc__free(&c->hooks, L);
}

/* ---- [issue 6 PROPOSAL] exists / list (LMCache-style) for the same-process connector ----------
   The two calls docs/pipeline.md proposes to add to omc__conn_vtable. Until the contract adopts
   them, omniconn_pipeline.h calls these two directly for this connector (same translation unit)
   and answers OMC_ERR_UNAVAILABLE for the others. They see exactly what get would: a key is live
   until its last reader took it, or cleanup / TTL / close retired it. The sink runs under the
   connector's lock (it must not call back into the connector); a result other than OMC_OK stops
   the walk and is returned. */
typedef omc_result (*omc__key_sink)(const char* qkey, uint32_t qlen, void* user);

OMC__PRIVATE omc_result omc__local_exists(omc_conn* c, const char* qkey, uint32_t qlen) {
    omc__local* L = (omc__local*)c->impl;
    int found;
    pthread_mutex_lock(&L->mu);
    omc__local_maybe_sweep(L);
    found = omc__smap_get(&L->keys, qkey, qlen) != NULL;
    pthread_mutex_unlock(&L->mu);
    return found ? OMC_OK : OMC_ERR_NOT_FOUND;
}

OMC__PRIVATE omc_result omc__local_list(omc_conn* c, omc__key_sink sink, void* user) {
    omc__local* L = (omc__local*)c->impl;
    uint32_t it = 0, len;
    const char* k;
    omc_result r = OMC_OK;
    pthread_mutex_lock(&L->mu);
    omc__local_maybe_sweep(L);
    while (r == OMC_OK && omc__smap_next(&L->keys, &it, &k, &len, NULL)) r = sink(k, len, user);
    pthread_mutex_unlock(&L->mu);
    return r;
}
/* ---- [end issue 6 PROPOSAL] ------------------------------------------------------------------ */

static const omc__conn_vtable omc__local_vtable = {
    OMC_TRANSPORT_LOCAL, omc__local_put, omc__local_get, omc__local_alloc, omc__local_cleanup,
    omc__local_health, omc__local_sweep, omc__local_close, omc__local_destroy
};

OMNICONN_API omc_result omc_local_create(const omc_local_desc* desc, omc_conn** out) {
    omc_local_desc d;
    omc_hooks hooks;
    omc_pool_desc pd;
    omc__local* L;
    omc_conn* c;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.hooks);
    L = (omc__local*)omc__calloc(&hooks, sizeof(omc__local));
    if (!L) return OMC_ERR_NO_MEMORY;
    memset(&pd, 0, sizeof(pd));
    pd.size = d.pool_size ? d.pool_size : OMNICONN_LOCAL_POOL_SIZE;
    pd.alignment = d.alignment;
    pd.thread_safe = 1;
    pd.hooks = hooks;
    r = omc_pool_create(&pd, &L->pool);
    if (r != OMC_OK) { omc__free(&hooks, L); return r; }
    if (pthread_mutex_init(&L->mu, NULL) != 0 || omc__cond_init_monotonic(&L->cv) != 0) {
        omc_pool_destroy(L->pool);
        omc__free(&hooks, L);
        return OMC_ERR_SYSTEM;
    }
    L->default_ttl_ms = d.default_ttl_ms ? d.default_ttl_ms : OMNICONN_DEFAULT_TTL_MS;
    r = omc__conn_create(&hooks, &omc__local_vtable, d.role, &c);
    if (r != OMC_OK) {
        omc_pool_destroy(L->pool);
        pthread_mutex_destroy(&L->mu);
        pthread_cond_destroy(&L->cv);
        omc__free(&hooks, L);
        return r;
    }
    c->impl = L;
    L->conn = c;
    *out = c;
    return OMC_OK;
}

#if OMC__HAS_ZMQ
#include "wip/net_impl.h"   /* TEMPORARY during development: merged into this file */
#endif

/* ============================================================================================== */
/* [SECTION] Implementation: features                                                            */
/* ============================================================================================== */

#include <dlfcn.h>
#include <sys/statvfs.h>

OMNICONN_API int omc_has(omc_feature f) {
    switch (f) {
        case OMC_FEATURE_LOCAL: return 1;
        case OMC_FEATURE_SHM: return OMC__HAS_SHM;
        case OMC_FEATURE_ZMQ: return OMC__HAS_ZMQ;
        case OMC_FEATURE_RDMA: return OMC__HAS_RDMA;
        case OMC_FEATURE_CUDA: return OMC__HAS_CUDA;
        default: return 0;
    }
}

OMC__PRIVATE omc_result omc__unavailable(char* why, size_t n, const char* text) {
    if (why && n) snprintf(why, n, "%s", text);
    return OMC_ERR_UNAVAILABLE;
}

OMNICONN_API omc_result omc_available(omc_feature f, char* why, size_t n) {
    if (why && n) why[0] = '\0';
    if (!omc_has(f)) return omc__unavailable(why, n, "not compiled in (see the OMNICONN_NO_* / OMNICONN_ENABLE_* macros)");
    switch (f) {
        case OMC_FEATURE_SHM: {
            struct statvfs sv;
            if (statvfs("/dev/shm", &sv) != 0 || access("/dev/shm", W_OK) != 0)
                return omc__unavailable(why, n, "/dev/shm is missing or not writable (mount a tmpfs there)");
            return OMC_OK;
        }
        case OMC_FEATURE_RDMA: {
            /* the engine loads libibverbs at run time; so does this probe */
            void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
            typedef void** (*get_list_fn)(int*);
            typedef void (*free_list_fn)(void**);
            get_list_fn get_list;
            free_list_fn free_list;
            void** list;
            int num = 0;
            if (!lib) return omc__unavailable(why, n, "libibverbs.so.1 not found (apt-get install ibverbs-providers)");
            /* ISO C has no object-to-function pointer cast; POSIX guarantees the bytes fit */
            void* sym = dlsym(lib, "ibv_get_device_list");
            memcpy(&get_list, &sym, sizeof(sym));
            sym = dlsym(lib, "ibv_free_device_list");
            memcpy(&free_list, &sym, sizeof(sym));
            list = get_list ? get_list(&num) : NULL;
            if (list && free_list) free_list(list);
            dlclose(lib);
            if (num <= 0) return omc__unavailable(why, n, "no RDMA device (ibv_devices lists none; for Soft-RoCE: rdma link add rxe0 type rxe netdev <if>)");
            return OMC_OK;
        }
        case OMC_FEATURE_CUDA: {
#if OMC__HAS_CUDA
            int count = 0;
            if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return omc__unavailable(why, n, "no CUDA device or driver");
#endif
            return OMC_OK;
        }
        default:
            return OMC_OK;
    }
}

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
