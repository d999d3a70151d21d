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

    Build: cc -std=c99 app.c -lpthread -ldl   (libzmq is loaded at run time, only when a remote
                                             connector is created; no -lzmq)

    CONTENTS (search for a title; the code follows "[SECTION]" banners in the same order)

    PART A  THE CORE                                                         lines     69 - 4687
      manual          QUICK START | STEP BY STEP | CONFIGURATION | OVERRIDES |         73 -  402
                      ERRORS & LOGGING | THREAD SAFETY | DEPENDENCIES & LINKING |
                      WIRE FORMATS (frame, metadata envelope) | NON-GOALS | RECENT REVISIONS
      declarations    [SECTION] Version, platform and feature resolution | Result     404 - 1093
                      codes | Logging and hooks | Version, features, time | The
                      registered-memory allocator | Pools | Buffers and typed views |
                      Payload frames | Metadata | The connector contract | The
                      same-process connector
      implementation  [SECTION] Implementation: configuration and system headers |   1096 - 4684
                      the companion interface | result codes, log items, hooks |
                      version, time, randomness | little-endian codecs, CRC-32C,
                      base64url | string map | the registered-memory allocator | pools |
                      buffers, dtypes, typed views | payload frames | metadata envelope |
                      the connector contract | the owner's entry table | the
                      same-process connector | features
    PART B  THE REMOTE CONNECTOR: ZMQ SIDE CHANNEL + TCP DATA PLANE           lines 4689 - 11483
      manual          B1 QUICK START | B2 THE SIDE CHANNEL AND THE TCP DATA PLANE |  4689 - 5108
                      B3 CONFIGURATION | B4 WIRE FORMATS
      declarations    [SECTION] The remote connector: ZMQ side channel and TCP data  5111 - 5299
                      plane
      implementation  [SECTION] Implementation: loading libzmq | the data-plane     5301 - 11480
                      interface | side-channel codec | sockets with deadlines | the
                      TCP data plane | endpoints, hosts, ports, keys | the remote
                      connector - state, sender, receiver channels, get, the contract,
                      create, public extras
    LICENSE                                                                        11486 - 11521

    READING PATHS
      vendor      (you copy the file and call it): Part A QUICK START, CONFIGURATION,
                  DEPENDENCIES & LINKING, ERRORS & LOGGING; for other hosts Part B B1 QUICK START
                  and B3 CONFIGURATION. Declarations carry a doc block each; skip the
                  implementations.
      learner     (you want to see how it works): Part A STEP BY STEP, then its implementation in
                  order - the allocator, pools, frames, metadata, the connector contract, the
                  owner's entry table, and the same-process connector (the smallest complete
                  connector); then Part B's B2 and B4, and its implementation from the codec
                  through the TCP data plane to the sender, the receiver and get.
      maintainer  (you change it): Part A's companion interface (the only core names Part B and
                  the companion headers may use; tests/check_companions.sh enforces it), Part B's
                  data-plane interface (what a data plane provides: TCP here, RDMA in
                  omniconn_rdma.h), WIRE FORMATS of both parts; docs/ keeps the rationale.

################################################################################################
##  PART A  THE CORE: allocator, pools, buffers, frames, metadata, the connector contract     ##
################################################################################################

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

    C and C++: every desc, payload and handle starts zeroed. In C write "T x = {0};"; in C++ write
    "T x = {};" ("= {0}" does not compile in C++ for a struct whose first member is an enum, as
    every desc's is; "{}" zeroes every member). memset(&x, 0, sizeof(x)) works in both.
    tests/compile/app_cxx_init.cpp builds every desc of every header that way.

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
       - A free the allocator refuses leaves it unchanged and says why (OMC_ERR_DOUBLE_FREE,
         _STALE, _OVERLAP, _INVALID_FREE): the full table is at omc_alloc_free below.
       - Why offsets, TLSF and out-of-band records (against vLLM-Omni's first-fit
         BufferAllocator), the tests and the figures: docs/allocator.md.
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
       vLLM-Omni's "generic object" becomes a frame: named segments (tensors with dtype and shape,
       or opaque bytes) laid out in one buffer behind a versioned, little-endian header with a
       CRC-32C. Build it directly inside a pool buffer (zero copy), decode it with zero-copy views.
       The decoder checks every count, offset and length against the buffer it was given.
       A raw single-buffer payload (vLLM-Omni's fast path) needs no frame.

    4. The connector contract (omc_conn_*)
       put(from_stage, to_stage, key, payload) -> metadata blob (binary; omc_meta_to_text gives a
       printable form for JSON or a text queue). get(from_stage, to_stage, key, metadata or NULL,
       deadline) -> a zero-copy buffer you release (or omc_conn_get_copy into your memory).
       cleanup(key), health(), close() (idempotent) and destroy(). health() counts a failed
       call in errors, except a timed-out one, which counts only in timeouts. Keys are qualified internally
       by both stage names, so "req-1" from stage 0->1 and from 1->2 never collide.
       - Fan-out: payload.readers = N. The data stays until the N-th get has released its view,
         or until its TTL passes; a TTL never frees a range that a reader still holds.
       - Deadlines: absolute CLOCK_MONOTONIC nanoseconds (omc_deadline_after_ms()). Every call that
         can block takes one; OMC_NO_WAIT and OMC_WAIT_FOREVER are the two extremes.
       - Roles: sender (put), receiver (get), dual (both; the default).
       - Zero-copy put: omc_conn_alloc() a buffer from the connector's own pool, fill it (e.g.
         build a frame in place), put it with payload.buffer set: ownership moves to the
         connector on success.
       - LMCache-style calls, on every connector: omc_conn_exists(key) and omc_conn_list() (what
         a metadata-less get would find), omc_conn_put_batch / omc_conn_get_batch (one deadline
         for the batch, a result per item), and omc_conn_wait_consumed(deadline) (every put of
         this connector read, cleaned up or expired - e.g. before a producer stage exits).
       The same-process connector (omc_local_create) implements the contract fully: stages in one
       process hand buffers over by reference. It is also the reference for the contract tests
       every other connector must pass.

    5. Other hosts: the remote connector (omc_tcp_create) is Part B of this file, after the core:
       its own manual (quick start, side channel, TCP data plane, configuration, wire formats),
       declarations and implementation. It stands on the public API and the companion
       interface of Part A, like omniconn_shm.h does.

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
    OMNICONN_NO_ZMQ              undefined   everywhere   no remote transports (no side channel; the
                                                          RDMA engine still builds, its connector not)
    OMNICONN_NO_RDMA             undefined   everywhere   no verbs RDMA engine
    OMNICONN_NO_RUNTIME_LINKING  undefined   impl file    link libzmq and libibverbs directly instead
                                                          of dlopen (-lzmq -libverbs; needs zmq.h)
    OMNICONN_ENABLE_CUDA         undefined   everywhere   CUDA device memory pools (cuda_runtime_api.h)
    OMNICONN_MALLOC(sz)/FREE(p)  malloc/free impl file    default host allocator (define both or none)
    OMNICONN_ASSERT(c)           assert(c)   impl file    programmer errors only (never run-time ones)
    OMNICONN_DEFAULT_ALIGNMENT   4096        impl file    pool alignment when the desc says 0
    OMNICONN_DEFAULT_TTL_MS      300000      impl file    lifetime of an unconsumed put (vLLM-Omni's
                                                          300 s)
    OMNICONN_LOCAL_POOL_SIZE     256 MiB     impl file    same-process connector pool when pool_size
                                                          is 0 (address space; pages come on first
                                                          touch)
    _GNU_SOURCE                  (defined)   impl file    defined by omniconn.h in the file that defines
                                                          OMNICONN_IMPLEMENTATION (the implementation
                                                          needs Linux extensions) and so in force for
                                                          that whole file; include omniconn.h there
                                                          before any system header (else #error with
                                                          the fix), or define it yourself first.
                                                          Other files are untouched.

    environment variable         default     meaning
    ---------------------------  ----------  ---------------------------------------------------
    OMNICONN_LOG                 warn        level of the built-in stderr logger: off, error, warn,
                                             info, debug (see ERRORS & LOGGING); read once

    omc_has(OMC_FEATURE_x) says what was compiled in; omc_available(OMC_FEATURE_x, why, n) says
    whether it is usable on this machine now, and if not, why.

    The remote connector's tunables (OMNICONN_TCP_*, OMNICONN_ZMQ_LIBRARY) and its environment
    variable are in Part B, B3 CONFIGURATION.

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
    The library never aborts at run time, not even on out-of-memory, and writes only through its
    logger. A logger receives (level, item id, message, file, line, user_data); the items are one
    list (OMC_LOGITEM_*, named by omc_log_item_name()).

    Without a logger of your own, warnings and errors go to stderr, one line each:
        omniconn WARN [META_MALFORMED] get a/b/req-2: metadata refused: invalid argument; the
        metadata is for key a/b/req-1, not a/b/req-2: pass the metadata that put() returned for
        this key (or NULL to look the key up) (omniconn.h:3312)
    that is: the prefix, the level, the item, the message, where it was logged. A refused put or
    get names the key, the side (sender or receiver), the sizes involved and what to change (the
    desc field to raise, the call to make). A get that finds nothing before its deadline
    (OMC_ERR_TIMEOUT, OMC_ERR_NOT_FOUND) is an INFO message: waiting is not a fault.
    $OMNICONN_LOG sets the level of that built-in logger without recompiling: off, error, warn
    (the default), info or debug (any case). It is read once, by the first message. An unknown
    value is reported once (item LOG_SETTING) and logging stays at warn.
        OMNICONN_LOG=debug ./app      everything the library has to say
        OMNICONN_LOG=off ./app        nothing

    Your own logger replaces the built-in one entirely ($OMNICONN_LOG then has no effect): set
    hooks.log_fn (and hooks.max_level, default WARN) in a desc for that object, or in
    omc_set_default_hooks() for every object whose desc leaves its hooks zero. omc_log_stderr is
    the built-in logger as a log_fn (to use it at your own level); omc_log_discard silences the
    library in code.

================================================================================================
THREAD SAFETY
================================================================================================

    - omc_alloc / omc_pool: thread-safe when desc.thread_safe is set, otherwise single-threaded.
    - omc_conn: every connector is thread-safe (put/get/cleanup/health from any thread). Every
      omc_conn_* call holds the connector while inside: omc_conn_close or omc_conn_destroy from
      another thread wakes calls blocked inside (a get waiting for a key), they return
      OMC_ERR_CLOSED, and close/destroy return after the last one has left. A call that starts
      after destroy has returned is a use after free, as with any freed handle. Do not close or
      destroy a connector from inside one of its own callbacks (omc_conn_list's). A call that
      was inside while destroy ran holds the connector until its last instruction, so the
      teardown (threads joined, memory unmapped and freed) may finish on that call's thread,
      just after destroy returned: your hooks' free_fn and log_fn must be callable from any
      thread that calls omniconn (the defaults are).
    - fork(): a child gets a copy of every connector, but none of its threads. There, every
      call returns OMC_ERR_CLOSED with an ERROR log line naming both processes, and
      omc_conn_destroy only closes the child's copies of descriptors and unmaps its copy of the
      pool (the core's connectors): no thread is joined, no message sent, nothing unlinked, so
      the parent's entries stay readable. Create new connectors in the child. The library
      notices the copy through a pthread_atfork handler: a process copied without running the
      atfork handlers (a raw clone() or vfork() that does more than exec) is not a supported
      way to copy a connector, and its calls are not refused.
    - omc_buffer values may be released from any thread, once per handle.
    - frames and metadata helpers are pure functions over caller memory.

================================================================================================
DEPENDENCIES & LINKING
================================================================================================

    Linux, a C99 compiler (gcc or clang: the GCC __atomic builtins are used), pthreads.
    -ldl: libzmq (Debian: libzmq5) is loaded at run time with dlopen("libzmq.so.5") the first
    time a remote connector is made; a program that only uses the same-process or SHM connectors
    never opens it, and needs no zmq.h to compile. Without libzmq, omc_tcp_create (and the RDMA
    connector) return OMC_ERR_UNAVAILABLE and log which package to install;
    omc_available(OMC_FEATURE_ZMQ) says the same. libibverbs is loaded the same way by
    omniconn_rdma.h. OMNICONN_NO_RUNTIME_LINKING links both directly instead (static, musl or
    embedded builds): cc -DOMNICONN_NO_RUNTIME_LINKING app.c -lzmq -libverbs -lpthread.
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
        6   u16  flags: bit 0 inline (the payload's bytes ride in the body: the whole body for
                 the same-process connectors, its tail after the address for the remote one),
                 bit 1 frame
        8   u64  payload size in bytes
        16  u64  producer incarnation (random per process start)
        24  u16  qualified key length (1..OMC_KEY_MAX-1)
        26  u16  reserved, zero
        28  u32  body length (<= OMC_META_MAX_BODY)
        32  u32  CRC-32C of bytes 0..39 (the whole header, with this field, 32..35, as zero),
                 then the key and the body
        36  u32  reserved, zero
        40  ...  qualified key bytes, then the transport's body
      CRC-32C everywhere is Castagnoli: polynomial 0x1EDC6F41 (reflected 0x82F63B78), initial
      value 0xFFFFFFFF, input and output reflected, final XOR 0xFFFFFFFF; the check value of
      "123456789" is 0xE3069283.
      The printable form is "omc1." followed by the envelope in unpadded base64url.
      A qualified key is from_stage, 0x1F, to_stage, 0x1F, key (0x1F is not allowed in the parts).

    Transport bodies: the remote connector's (side channel, TCP data plane, TCP metadata body) in
    Part B, B4 WIRE FORMATS; the SHM segment in omniconn_shm.h; RDMA records in omniconn_rdma.h.

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

    unreleased          close/destroy from another thread is safe: calls hold the connector and
                        destroy waits for them; connectors copied by fork() refuse calls and
                        release only the child's copies; buffers from omc_conn_alloc keep the
                        pool mapped after destroy (core connectors).
    unreleased          the fork guard costs no system call per call (a pthread_atfork
                        handler counts forks); a close or destroy of a remote receiver ends
                        its pause before another data-connection try, and its wait on a data
                        port that says nothing, at once (the get returns OMC_ERR_CLOSED).
    unreleased          omc_tcp_* calls hold the connector like omc_conn_* calls: a close or
                        destroy from another thread waits for them (and wakes a blocked query);
                        on a closed connector they return OMC_ERR_CLOSED.
    unreleased          TCP data hello version 4: a request on a data connection carries a
                        16-byte key proof (HMAC-SHA-256 keyed with the session's ticket secret
                        over the entry id and the key) instead of a CRC-32C of the key, so the
                        bytes on the wire no longer let anyone test guessed keys; requests grow
                        to 64 bytes, and receivers and senders of version 3 are refused with a
                        log line naming both versions.
    unreleased          TCP data hello version 3: the data port sends a nonce first and the hello
                        proves the session's ticket with an HMAC-SHA-256 over it instead of
                        carrying the ticket (HELLO record 0x101 replaces 0x100); receivers and
                        senders of version 2 are refused with a log line naming both versions.
                        A request that names an entry wrongly always gets OMC_ERR_NOT_FOUND.
    unreleased          remote connector: gets travel as requests on the ticketed TCP data
                        connection (HELLO capability bit 2; senders without it still get PULL on
                        the side channel); the listener waits for small payloads' receipts
                        itself; payloads up to 16 KiB ride inside the metadata and a get with
                        it sends one CLAIM (new desc fields inline_threshold, disable_inline,
                        inline_with_curve, pull_on_side_channel; omc_tcp_health_info.
                        inline_threshold).
    unreleased          the file reads as Part A (the core) and Part B (the remote connector, with
                        its own manual) behind a visible seam; the TCP data plane sits behind the
                        data-plane table like any plane; every read of an entry goes through
                        one take / commit / give-back protocol. No wire or API change.
    0.1.0 (2026-11-22)  first release: allocator, pools, buffers, frames, metadata, the
                        connector contract, the same-process connector, and the remote
                        connector (ZMQ side channel + TCP data plane, pluggable data planes).

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
/* the companion interface (see "[SECTION] Implementation: the companion interface"): companion
   headers check it exactly */
#define OMC__COMPANION_INTERFACE ((OMNICONN_VERSION_MAJOR << 8) | OMNICONN_VERSION_MINOR)

/* The implementation needs Linux extensions (MAP_ANONYMOUS, MAP_HUGETLB, getrandom, futex). They
   must be requested before the first system header, so include omniconn.h first in the file that
   defines OMNICONN_IMPLEMENTATION (or build it with -D_GNU_SOURCE). That file then has _GNU_SOURCE
   for all of its code; other files are untouched. A system header seen earlier has already fixed
   the feature set (the C library's features.h, _FEATURES_H, is in): defining _GNU_SOURCE now would
   change nothing, so stop with the fix instead of 27 errors about undeclared names. */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(_GNU_SOURCE)
    #if defined(_FEATURES_H) || defined(__GLIBC__)
        #error "omniconn: a system header was included before omniconn.h in the file that defines OMNICONN_IMPLEMENTATION. Include omniconn.h before any system header in that file, or define _GNU_SOURCE yourself (first line of the file, or -D_GNU_SOURCE)."
        #define OMNICONN_IMPL_INCLUDED 1    /* skip the implementation: this error is the message */
        #define OMNICONN_REMOTE_IMPL_INCLUDED 1
    #else
        #define _GNU_SOURCE 1
    #endif
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
/* the RDMA engine stands alone (records travel over any socket); only its data plane for the
   remote connector needs the ZMQ side channel as well */
#if !defined(OMNICONN_NO_RDMA)
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
    X(OMC_LOGITEM_RDMA,               "RDMA engine event") \
    X(OMC_LOGITEM_LOG_SETTING,        "OMNICONN_LOG has a value the library does not know")

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
    omc_log_fn log_fn;              /* NULL = the built-in logger (stderr; see ERRORS & LOGGING) */
    omc_log_level max_level;        /* most verbose level delivered; 0 = OMC_LOG_WARN (for the
                                       built-in logger, $OMNICONN_LOG overrides it when set) */
    void* user_data;
} omc_hooks;

/* Set the hooks used by every desc whose hooks are all zero. Not thread-safe: call it once at
   start-up, before creating anything. Passing NULL restores malloc/free and the built-in logger. */
OMNICONN_API void omc_set_default_hooks(const omc_hooks* hooks);
/* The built-in logger, also usable as a log_fn: one line to stderr,
   "omniconn WARN [CONN_ERROR] message (omniconn.h:1234)". */
OMNICONN_API void omc_log_stderr(omc_log_level level, omc_log_item item, const char* message,
                                 const char* file, int line, void* user_data);
/* A log_fn that drops everything: set it to silence the library in code (OMNICONN_LOG=off does
   the same without recompiling). */
OMNICONN_API void omc_log_discard(omc_log_level level, omc_log_item item, const char* message,
                                  const char* file, int line, void* user_data);
/* The short name of a log item ("CONN_ERROR"), as the built-in logger prints it; never NULL. */
OMNICONN_API const char* omc_log_item_name(omc_log_item item);
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
/* now + ms. A negative ms is a deadline that has already passed (a budget that ran out), never
   "forever": only OMC_WAIT_FOREVER waits without end. A sum beyond the clock's range saturates
   at OMC_WAIT_FOREVER. */
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
    uint64_t alignment;     /* power of two up to 2^32; 0 = OMNICONN_DEFAULT_ALIGNMENT (4096) */
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
/* Give a range back. O(1) for a valid handle. A refusal leaves the allocator exactly as it was
   (same statistics, omc_alloc_validate still OK) and is logged as OMC_LOGITEM_ALLOC_BAD_FREE.
   The verdict depends on the range and the allocator's state; the handle's slot only matters
   for a handle that is otherwise right (a wrong slot makes it a forgery):
     the range ...                                                   result
     is empty, starts at or past the capacity, or runs past it       OMC_ERR_INVALID_FREE
     starts at a live block, with another generation                 OMC_ERR_STALE
     starts at a live block, right generation, another size          OMC_ERR_OVERLAP
     starts at a live block, right generation and size, wrong slot   OMC_ERR_STALE
     starts inside a live block (not at its start), ends inside it   OMC_ERR_INVALID_FREE
     starts inside a live block and runs past it                     OMC_ERR_OVERLAP
     lies inside one free block (also after it merged with others)   OMC_ERR_DOUBLE_FREE
     starts in a free block and runs past it                         OMC_ERR_OVERLAP
   A range in free space that was never handed out cannot be told from one that was freed: both
   are OMC_ERR_DOUBLE_FREE. */
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
    uint64_t errors;            /* failed calls, timeouts not included */
    uint64_t timeouts;          /* calls that failed with OMC_ERR_TIMEOUT (counted only here) */
    uint64_t ttl_reclaims;
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
/* Stop everything and free what the connector owns. Idempotent. Calls blocked inside (on other
   threads) are woken and return OMC_ERR_CLOSED; close returns once they have left. Views still
   held stay valid until released; later calls return OMC_ERR_CLOSED. */
OMNICONN_API void       omc_conn_close(omc_conn* conn);
/* close + free the handle (the memory goes when the last view or omc_conn_alloc buffer of the
   core's connectors is released). In a child after fork(): releases only the child's copy. */
OMNICONN_API void       omc_conn_destroy(omc_conn* conn);
OMNICONN_API omc_transport omc_conn_transport(const omc_conn* conn);
/* Build the qualified key ("from\x1Fto\x1Fkey"): OMC_ERR_INVALID_ARG if a part contains 0x1F or
   the result does not fit in OMC_KEY_MAX. */
OMNICONN_API omc_result omc_qualify_key(const char* from_stage, const char* to_stage, const char* key,
                                        char out[OMC_KEY_MAX], uint32_t* out_len);

/* ---- batches, exists, list, wait_consumed (LMCache-style; every connector implements them) ---- */

typedef struct omc_batch_item {
    const char* key;
    omc_payload payload;            /* put: what to put (copy path, or zero-copy with buffer) */
    omc_meta meta;                  /* put: receives the metadata (omc_meta_free it);
                                       get: the metadata from the put, or empty (metadata-less) */
    omc_buffer buffer;              /* get: the zero-copy view (release it) */
    omc_result result;              /* per item */
} omc_batch_item;

/* Put count items on one edge. Copy-path items are staged in a buffer from omc_conn_alloc, which
   waits for pool space until the one deadline (back-pressure). Every item is attempted; returns
   OMC_OK if all succeeded, else the first failure. */
OMNICONN_API omc_result omc_conn_put_batch(omc_conn* conn, const char* from_stage, const char* to_stage,
                                           omc_batch_item* items, uint32_t count, omc_time_ns deadline);
/* Get count items with one deadline for the whole batch (items still missing when it passes give
   OMC_ERR_TIMEOUT). Every item is attempted; returns OMC_OK if all succeeded, else the first failure.
   Each item's result, buffer and counters are what omc_conn_get would give it. The remote
   connector overlaps the items whose metadata names the same sender: their requests are
   pipelined on one data connection (up to 16 ahead), which spares each get a round trip;
   metadata-less items are got one at a time after them. Every buffer is held until you release
   it, so a batch needs room for all its payloads in the receiver's pool: items that find none
   fail with a pool result and stay unconsumed on the sender. */
OMNICONN_API omc_result omc_conn_get_batch(omc_conn* conn, const char* from_stage, const char* to_stage,
                                           omc_batch_item* items, uint32_t count, omc_time_ns deadline);

/* OMC_OK if key is live on the edge (put, with a read still available: not yet taken by all its
   readers, cleaned up or expired), OMC_ERR_NOT_FOUND if not. Never consumes. Where the connector
   looks: its own puts, and what a metadata-less get would search (SHM: every segment of the
   channel; remote: every registered sender, asked with a QUERY that is answered at once, so
   this costs one round trip per sender, at most 2 s each). */
OMNICONN_API omc_result omc_conn_exists(omc_conn* conn, const char* from_stage, const char* to_stage, const char* key);

/* Called once per live key; return non-zero to stop early. Runs outside the connector's lock. */
typedef int (*omc_key_fn)(const char* from_stage, const char* to_stage, const char* key, void* user_data);

/* A snapshot of the live keys (as exists sees them), filtered by stage names (NULL = any).
   *out_count (optional) = keys visited. fn may be NULL to only count. Remote: every registered
   sender is asked (LIST messages); a sender too old to know them makes this OMC_ERR_UNAVAILABLE. */
OMNICONN_API omc_result omc_conn_list(omc_conn* conn, const char* from_stage, const char* to_stage,
                                      omc_key_fn fn, void* user_data, uint64_t* out_count);

/* Block until every put this connector made has been read by all its readers, cleaned up, or
   expired (OMC_OK), or the deadline passes (OMC_ERR_TIMEOUT). A connector that made no puts
   (a receiver) returns OMC_OK at once. Views readers still hold do not count: a put is consumed
   once its last read started. Typical use: a producer stage that exits after its last put. */
OMNICONN_API omc_result omc_conn_wait_consumed(omc_conn* conn, omc_time_ns deadline);

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
/* omniconn.h was included once without OMNICONN_IMPLEMENTATION (so _GNU_SOURCE was not requested)
   and again with it: the system headers are already in without the Linux extensions. */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_IMPL_INCLUDED) && !defined(_GNU_SOURCE)
    #error "omniconn: OMNICONN_IMPLEMENTATION was defined after omniconn.h (or a companion) was already included in this file. Define OMNICONN_IMPLEMENTATION before the first omniconn include and before any system header, or define _GNU_SOURCE yourself (first line of the file, or -D_GNU_SOURCE)."
    #define OMNICONN_IMPL_INCLUDED 1        /* skip the implementation: this error is the message */
    #define OMNICONN_REMOTE_IMPL_INCLUDED 1
#endif
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

/* every private function is static and may go unused in some feature combination (the rule:
   see "[SECTION] Implementation: the companion interface"); a build may define it as plain
   static to let -Wunused-function list what no code calls */
#ifndef OMC__PRIVATE
    #define OMC__PRIVATE static __attribute__((unused))
#endif
#define OMC__NIL 0xFFFFFFFFu

#define omc__load(p)        __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define omc__store(p, v)    __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define omc__add(p, v)      __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define omc__sub(p, v)      __atomic_sub_fetch((p), (v), __ATOMIC_ACQ_REL)
#define omc__min(a, b)      ((a) < (b) ? (a) : (b))
#define omc__max(a, b)      ((a) > (b) ? (a) : (b))

/* ============================================================================================== */
/* [SECTION] Implementation: the companion interface                                             */
/* ============================================================================================== */
/*
    What a companion header (omniconn_shm.h, omniconn_rdma.h, omniconn_pipeline.h, or your own)
    may use besides the public API. Nothing else of this file is promised to stay. The interface
    is versioned with the minor version: OMC__COMPANION_INTERFACE is (major << 8) | minor, and
    every companion checks it exactly (#error on a mismatch), because anything below may change
    in a minor release. tests/check_companions.sh fails if a companion uses an omc__ / OMC__ name
    of this file that is not listed here.

    companion-interface-begin
    Build and platform
      OMC__PRIVATE           storage class of every private function (see "static or
                             OMC__PRIVATE" below)
      OMC__HAS_SHM OMC__HAS_ZMQ OMC__HAS_RDMA OMC__HAS_CUDA   the resolved features
      OMC__COMPANION_INTERFACE   this interface's version, (major << 8) | minor
      OMC__NIL               "no index" (0xFFFFFFFF)
      OMC__ALIGN_UP          round up to a power-of-two alignment
      OMC__X                 scratch name of X-macro lists (define, expand, #undef)
      omc__load omc__store omc__add omc__sub omc__min omc__max   atomics and arithmetic
    Memory, logging, time
      omc__hooks_resolve omc__malloc omc__calloc omc__free   the desc's hooks, resolved
      OMC__LOG               log through the hooks (level, item, printf format)
      omc__log_emit          deliver a message already formatted (hooks or the built-in logger)
      omc__cond_init_monotonic omc__cond_wait_until          CLOCK_MONOTONIC condition variables
      omc__random_u64 omc__random_bytes                       getrandom-backed randomness
    Bytes
      omc__get_u16 omc__get_u32 omc__get_u64 omc__put_u16 omc__put_u32 omc__put_u64   little-endian
      omc__crc32c            CRC-32C (Castagnoli)
      omc__sha256 omc__sha256_init omc__sha256_update omc__sha256_final OMC__SHA256_SIZE   SHA-256
      omc__hmac_sha256       HMAC-SHA-256 over a list of parts
      omc__equal_ct          compare without an early exit (MACs, secrets)
    String map (heap keys, open addressing)
      omc__smap omc__smap_get omc__smap_put omc__smap_del omc__smap_next omc__smap_free
      fields omc__smap: count   (read-only: how many keys it holds)
    Connectors (a companion that adds one)
      omc__conn_vtable       the transport table (family, transport, put ... pending, desc_name)
      omc__conn_create omc__conn_ref omc__conn_unref omc__conn_is omc__conn_fail omc__conn_fail_at
      omc__conn_hold omc__conn_leave_call omc__conn_pool_buffer omc__pool_unmap_copy
      OMC__CONN_HELD         a public call's body between hold and leave
      omc__conn_enter        a call's common opening: closed?, role, the qualified key
      omc__conn_count_error  count a failed call and log it once
      omc__conn_count_get omc__conn_count_refusal   the counters of a get a connector's own
                             call served or refused
      omc__conn_discard      free a connector whose create failed (never handed out)
      omc__key_sink          what a vtable's list() hands keys to
      fields omc_conn: impl hooks closed role ttl_reclaims releases wake forked hint get_batch
                             (impl: its state; closed and the counters are atomic; role read-only)
      omc__batch_get         one checked get of a batch, for a connector's get_batch
      fields omc__batch_get: all
      fields omc__conn_vtable: all
      omc__meta_begin omc__meta_seal   write a metadata envelope around a transport's body
      OMC__META_UNWANTED     meta_out->size a put finds when its caller wants no metadata
    The owner's entry table (a companion that owns payloads)
      omc__etab omc__ent OMC__ENT_FREE OMC__ENT_LIVE OMC__ENT_DRAINING
      omc__etab_init omc__etab_uninit omc__etab_add omc__etab_find omc__etab_by_id omc__etab_id
      omc__etab_unindex omc__etab_drop omc__etab_retire omc__etab_unhold omc__etab_list
      omc__etab_list_from omc__etab_cursor
      omc__bucket_insert omc__bucket_remove   linear-probing buckets (also on shared memory)
      omc__expiry            a put's TTL as an absolute time
      omc__hash64            the key hash of the table
      fields omc__etab omc__ent: all
    The owner (an entry table, its pool and its lock) and its read protocol
      omc__owner omc__owner_init omc__owner_uninit omc__owner_put omc__owner_find
      omc__owner_cleanup omc__owner_exists omc__owner_list omc__owner_live omc__owner_health
      omc__owner_list_page   one page of omc__owner_list from an opaque cursor, at a bounded cost
      omc__owner_close omc__owner_sweep omc__owner_maybe_sweep omc__owner_signal
      omc__read omc__read_want omc__owner_take omc__owner_commit omc__owner_give_back
      omc__owner_unpin       take a read, commit it or give it back (see "the read protocol")
      fields omc__owner: conn pool mu changed tab
      fields omc__read omc__read_want: all
    Pools
      fields omc_pool: base size alloc
    Availability
      omc__register_probe    answer omc_available() for a feature the companion provides
      omc__fn omc__offer omc__offered OMC__OFFER_RDMA_CONNECTOR   one companion's function for
                             another (omniconn_rdma.h offers the pipeline its RDMA connector)
    companion-interface-end

    static or OMC__PRIVATE: a function that every build uses and that the compiler can see is
    used (a vtable entry, a callback) is plain static; a helper that some feature combination
    leaves unused is OMC__PRIVATE (static + unused, so the build stays warning-free). CI builds
    once with OMC__PRIVATE defined as plain static and -Wunused-function (tests/compile/run.sh)
    to list the helpers no combination uses.
*/

/* Functions one companion offers another, so that which one a program has never depends on the
   order of its includes: the offering companion registers at start-up (a constructor in its
   implementation), the user looks it up when it needs it. Casts between function types are
   plain C; the caller casts back to the exact type. */
typedef void (*omc__fn)(void);
enum { OMC__OFFER_RDMA_CONNECTOR = 0, OMC__OFFER_COUNT };
static omc__fn omc__offers[OMC__OFFER_COUNT];

OMC__PRIVATE void omc__offer(int what, omc__fn fn) { if (what >= 0 && what < OMC__OFFER_COUNT) omc__offers[what] = fn; }
OMC__PRIVATE omc__fn omc__offered(int what) { return what >= 0 && what < OMC__OFFER_COUNT ? omc__offers[what] : NULL; }

/* omc_available(f) asks the companion that provides f (registered at start-up from a
   constructor in the companion's implementation); with no companion registered the feature is
   not in this program. */
typedef omc_result (*omc__probe_fn)(char* why, size_t n);
static omc__probe_fn omc__probes[OMC_FEATURE_COUNT];

OMC__PRIVATE void omc__register_probe(omc_feature f, omc__probe_fn fn) {
    if ((int)f >= 0 && f < OMC_FEATURE_COUNT) omc__probes[f] = fn;
}

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
/* "OMC_LOGITEM_CONN_ERROR" + 12 = "CONN_ERROR" */
static const char* omc__log_item_names[OMC_LOGITEM_COUNT] = {
#define OMC__X(name, text) &#name[12],
    OMC__LOG_ITEMS(OMC__X)
#undef OMC__X
};

OMNICONN_API const char* omc_log_item_str(omc_log_item item) {
    if ((int)item < 0 || item >= OMC_LOGITEM_COUNT) return "unknown log item";
    return omc__log_item_texts[item];
}

OMNICONN_API const char* omc_log_item_name(omc_log_item item) {
    if ((int)item < 0 || item >= OMC_LOGITEM_COUNT) return "UNKNOWN";
    return omc__log_item_names[item];
}

static omc_hooks omc__default_hooks; /* zero: malloc/free, the built-in logger */

OMNICONN_API void omc_set_default_hooks(const omc_hooks* hooks) {
    if (hooks) omc__default_hooks = *hooks;
    else memset(&omc__default_hooks, 0, sizeof(omc__default_hooks));
}

OMNICONN_API void omc_log_stderr(omc_log_level level, omc_log_item item, const char* message,
                                 const char* file, int line, void* user_data) {
    static const char* names[] = { "LOG", "ERROR", "WARN", "INFO", "DEBUG" };
    const char* lv = ((int)level >= 0 && (int)level <= 4) ? names[level] : "LOG";
    const char* base = file ? strrchr(file, '/') : NULL;
    (void)user_data;
    /* one fprintf per line: stdio locks stderr per call, so lines of two threads never mix */
    fprintf(stderr, "omniconn %s [%s] %s (%s:%d)\n", lv, omc_log_item_name(item), message ? message : "",
            base ? base + 1 : (file ? file : "?"), line);
}

OMNICONN_API void omc_log_discard(omc_log_level level, omc_log_item item, const char* message,
                                  const char* file, int line, void* user_data) {
    (void)level; (void)item; (void)message; (void)file; (void)line; (void)user_data;
}

/* $OMNICONN_LOG, read once by the first message that reaches the built-in logger:
   -1 unset, 0 off, else the level; an unknown value is reported (once) and ignored. */
static int omc__env_level = -1;
static char omc__env_bad[40];
static pthread_once_t omc__env_once = PTHREAD_ONCE_INIT;
static void omc__env_read(void) {
    static const char* names[] = { "off", "error", "warn", "info", "debug" };
    const char* v = getenv("OMNICONN_LOG");
    char low[16];
    size_t i, n;
    if (!v || !v[0]) return;
    n = strlen(v);
    for (i = 0; i < n && i < sizeof(low) - 1; i++) low[i] = (char)(v[i] >= 'A' && v[i] <= 'Z' ? v[i] - 'A' + 'a' : v[i]);
    low[i] = '\0';
    if (n < sizeof(low))
        for (i = 0; i < 5; i++) if (strcmp(low, names[i]) == 0) { omc__env_level = (int)i; return; }
    snprintf(omc__env_bad, sizeof(omc__env_bad), "%.32s%s", v, n > 32 ? "..." : "");
}

/* The most verbose level that reaches a logger through these hooks (NULL = the process
   default): the application's max_level, or for the built-in logger $OMNICONN_LOG when set. */
static int omc__log_max(const omc_hooks* h) {
    int max;
    if (!h) h = &omc__default_hooks;
    max = h->max_level ? (int)h->max_level : (int)OMC_LOG_WARN;
    if (h->log_fn) return max;
    pthread_once(&omc__env_once, omc__env_read);
    return omc__env_level >= 0 ? omc__env_level : max;
}

/* Deliver one formatted message: the hooks' log_fn if set, else the built-in logger.
   Companions with their own formatting call this. */
OMC__PRIVATE void omc__log_emit(const omc_hooks* h, omc_log_level level, omc_log_item item,
                                const char* file, int line, const char* msg) {
    if (!h) h = &omc__default_hooks;
    if ((int)level > omc__log_max(h)) return;
    if (h->log_fn) { h->log_fn(level, item, msg, file, line, h->user_data); return; }
    if (omc__env_bad[0]) {
        static int told;
        if (!__atomic_exchange_n(&told, 1, __ATOMIC_ACQ_REL)) {
            char m[160];
            snprintf(m, sizeof(m), "OMNICONN_LOG=%s is not a level: use off, error, warn, info or debug "
                     "(logging at warn)", omc__env_bad);
            omc_log_stderr(OMC_LOG_WARN, OMC_LOGITEM_LOG_SETTING, m, __FILE__, __LINE__, NULL);
        }
    }
    omc_log_stderr(level, item, msg, file, line, NULL);
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
    if ((int)level > omc__log_max(h)) return;      /* before the formatting */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    omc__log_emit(h, level, item, file, line, msg);
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
    if (ms < 0) return ms < -(now / 1000000LL) ? OMC_NO_WAIT : now + ms * 1000000LL;   /* passed */
    if (ms > (INT64_MAX - now) / 1000000LL) return OMC_WAIT_FOREVER;
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

/* ---- SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104) ----------------------------------------
   Proofs of a secret that never crosses the wire: the remote connector's data hello (an HMAC
   over a nonce the data port chose for this connection, keyed with the session's ticket) and the
   transfer engine's RPC authentication. Small and self-contained so the library needs no crypto
   library; it runs a handful of times per connection, so it is written for clarity, not speed. */
typedef struct omc__sha256 {
    uint32_t h[8];
    uint64_t total;                     /* bytes hashed so far */
    uint8_t block[64];
    uint32_t used;                      /* bytes waiting in block */
} omc__sha256;

#define OMC__SHA256_SIZE 32

static const uint32_t omc__sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

OMC__PRIVATE uint32_t omc__ror32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/* One 64-byte block into the state (the FIPS 180-4 compression function). */
OMC__PRIVATE void omc__sha256_block(omc__sha256* s, const uint8_t* p) {
    uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
    int i;
    for (i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = omc__ror32(w[i - 15], 7) ^ omc__ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = omc__ror32(w[i - 2], 17) ^ omc__ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = s->h[0]; b = s->h[1]; c = s->h[2]; d = s->h[3]; e = s->h[4]; f = s->h[5]; g = s->h[6]; h = s->h[7];
    for (i = 0; i < 64; i++) {
        t1 = h + (omc__ror32(e, 6) ^ omc__ror32(e, 11) ^ omc__ror32(e, 25)) + ((e & f) ^ (~e & g)) + omc__sha256_k[i] + w[i];
        t2 = (omc__ror32(a, 2) ^ omc__ror32(a, 13) ^ omc__ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d; s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

OMC__PRIVATE void omc__sha256_init(omc__sha256* s) {
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au, 0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, iv, sizeof(iv));
    s->total = 0;
    s->used = 0;
}

OMC__PRIVATE void omc__sha256_update(omc__sha256* s, const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    s->total += n;
    while (n) {
        size_t take = omc__min(n, (size_t)(64 - s->used));
        memcpy(s->block + s->used, p, take);
        s->used += (uint32_t)take;
        p += take;
        n -= take;
        if (s->used == 64) { omc__sha256_block(s, s->block); s->used = 0; }
    }
}

/* Pad (0x80, zeros, the bit length big-endian) and write the 32-byte digest. The padding is
   written into the block directly: one more block when the length no longer fits in this one. */
OMC__PRIVATE void omc__sha256_final(omc__sha256* s, uint8_t* out) {
    uint64_t bits = s->total * 8u;
    int i;
    s->block[s->used++] = 0x80;         /* used < 64 here: update compresses a full block at once */
    if (s->used > 56) {
        memset(s->block + s->used, 0, 64 - s->used);
        omc__sha256_block(s, s->block);
        s->used = 0;
    }
    memset(s->block + s->used, 0, 56 - s->used);
    for (i = 0; i < 8; i++) s->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    omc__sha256_block(s, s->block);
    s->used = 0;
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24); out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8); out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

/* HMAC-SHA-256 of the concatenation of n parts (a key longer than a block is hashed first). */
OMC__PRIVATE void omc__hmac_sha256(const uint8_t* key, size_t klen, const void* const* part, const size_t* plen, int n, uint8_t* out) {
    uint8_t k[64], pad[64], inner[OMC__SHA256_SIZE];
    omc__sha256 s;
    int i;
    memset(k, 0, sizeof(k));
    if (klen > 64) { omc__sha256_init(&s); omc__sha256_update(&s, key, klen); omc__sha256_final(&s, k); }
    else if (klen) memcpy(k, key, klen);
    for (i = 0; i < 64; i++) pad[i] = (uint8_t)(k[i] ^ 0x36);
    omc__sha256_init(&s);
    omc__sha256_update(&s, pad, 64);
    for (i = 0; i < n; i++) omc__sha256_update(&s, part[i], plen[i]);
    omc__sha256_final(&s, inner);
    for (i = 0; i < 64; i++) pad[i] = (uint8_t)(k[i] ^ 0x5c);
    omc__sha256_init(&s);
    omc__sha256_update(&s, pad, 64);
    omc__sha256_update(&s, inner, sizeof(inner));
    omc__sha256_final(&s, out);
}

/* Compare without an early exit, so the time taken says nothing about where a guess went wrong. */
OMC__PRIVATE int omc__equal_ct(const uint8_t* a, const uint8_t* b, size_t n) {
    uint8_t d = 0;
    size_t i;
    for (i = 0; i < n; i++) d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
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
    Blocks tile the managed range [0, capacity) without gaps. Each block is a 32-byte record in a
    growable array (outside the region): its offset and size, its neighbours by address
    (phys_prev/next), and two words that hold, while the block is free, its links in one of
    64 x 16 size-class lists, and while it is allocated, its generation and the slack between its
    size and the size asked for. Records are touched at random (by the caller's handles and by
    address neighbours), so their size sets how many of them stay in cache: 32 bytes keep two in
    a cache line and never straddle two. Sizes are multiples of the alignment ("granule"), which
    makes every offset aligned by construction.

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

#define OMC__ALLOC_MAX_ALIGNMENT (1ull << 32)      /* the slack below must fit 32 bits */
#define OMC__BLK_USED_BIT (1ull << 63)             /* in size: allocated (capacity < 2^63) */

typedef struct omc__block {
    uint64_t offset;            /* bytes */
    uint64_t size;              /* bytes, a multiple of the granule, | OMC__BLK_USED_BIT when
                                   allocated; 0 = a spare record */
    uint32_t phys_prev, phys_next;
    uint32_t w0, w1;            /* free: size-class list prev, next; allocated: generation,
                                   slack (size - bytes asked for); spare: -, next spare */
} omc__block;

#define omc__blk_size(b) ((b)->size & ~OMC__BLK_USED_BIT)
#define omc__blk_used(b) (((b)->size & OMC__BLK_USED_BIT) != 0)
#define omc__blk_free(b) ((b)->size != 0 && !omc__blk_used(b))
#define omc__blk_requested(b) (omc__blk_size(b) - (b)->w1)

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
    b->size = omc__blk_size(b);
    omc__size_class(b->size >> a->shift, &fl, &sl);
    head = a->heads[fl][sl];
    b->w0 = OMC__NIL;
    b->w1 = head;
    if (head != OMC__NIL) a->blocks[head].w0 = i;
    a->heads[fl][sl] = i;
    a->sl_map[fl] |= 1u << sl;
    a->fl_map |= 1ull << fl;
    a->free_count++;
}

OMC__PRIVATE void omc__blk_unlink(omc_alloc* a, uint32_t i) {
    omc__block* b = &a->blocks[i];
    uint32_t fl, sl;
    omc__size_class(b->size >> a->shift, &fl, &sl);
    if (b->w0 != OMC__NIL) a->blocks[b->w0].w1 = b->w1;
    else a->heads[fl][sl] = b->w1;
    if (b->w1 != OMC__NIL) a->blocks[b->w1].w0 = b->w0;
    if (a->heads[fl][sl] == OMC__NIL) {
        a->sl_map[fl] &= ~(1u << sl);
        if (!a->sl_map[fl]) a->fl_map &= ~(1ull << fl);
    }
    b->w0 = b->w1 = OMC__NIL;
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
    if (a->spare != OMC__NIL) { i = a->spare; a->spare = a->blocks[i].w1; }
    else i = a->count++;
    memset(&a->blocks[i], 0, sizeof(omc__block));
    a->blocks[i].phys_prev = a->blocks[i].phys_next = OMC__NIL;
    a->blocks[i].w0 = a->blocks[i].w1 = OMC__NIL;
    return i;
}

OMC__PRIVATE void omc__blk_retire(omc_alloc* a, uint32_t i) {
    a->blocks[i].size = 0;
    a->blocks[i].w0 = 0;
    a->blocks[i].w1 = a->spare;
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
    for (i = a->heads[fl][sl]; i != OMC__NIL && steps < OMC__FALLBACK_SCAN; i = a->blocks[i].w1, steps++)
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
    if ((align & (align - 1)) || align > OMC__ALLOC_MAX_ALIGNMENT) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "alignment %llu is not a power of two up to 2^32",
                 (unsigned long long)align);
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
    a->in_use += b->size;
    b->size |= OMC__BLK_USED_BIT;
    b->w0 = omc__next_generation(a);
    b->w1 = (uint32_t)(need - size);    /* < granule <= 2^32 */
    a->requested += size;
    a->live++;
    out->offset = b->offset;
    out->size = size;
    out->generation = b->w0;
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
        uint64_t bend = b->offset + omc__blk_size(b);
        if (r.offset >= bend) continue;
        if (omc__blk_used(b)) {
            if (b->offset == r.offset) {
                if (b->w0 != r.generation) return OMC_ERR_STALE;
                return (omc__blk_requested(b) == r.size) ? OMC_OK : OMC_ERR_OVERLAP;
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
        if (omc__blk_used(b) && b->offset == r.offset) {
            if (b->w0 != r.generation) return OMC_ERR_STALE;
            return (omc__blk_requested(b) == r.size) ? OMC_OK : OMC_ERR_OVERLAP;
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
    a->in_use -= omc__blk_size(b);
    a->requested -= omc__blk_requested(b);
    a->live--;
    b->size = omc__blk_size(b);     /* free now (linked below) */
    b->w0 = b->w1 = OMC__NIL;
    if (p != OMC__NIL && omc__blk_free(&a->blocks[p])) {   /* merge into the left neighbour */
        omc__blk_unlink(a, p);
        a->blocks[p].size += b->size;
        a->blocks[p].phys_next = n;
        if (n != OMC__NIL) a->blocks[n].phys_prev = p;
        omc__blk_retire(a, i);
        i = p;
    }
    n = a->blocks[i].phys_next;
    if (n != OMC__NIL && omc__blk_free(&a->blocks[n])) {   /* absorb the right neighbour */
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
        for (i = a->heads[fl][sl]; i != OMC__NIL; i = a->blocks[i].w1)
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
        uint64_t size = omc__blk_size(b);
        if (i >= a->count || b->offset != expect || size == 0 || (size & (a->granule - 1)) || b->phys_prev != prev ||
            (omc__blk_used(b) && b->w1 >= size)) { res = OMC_ERR_INTERNAL; break; }
        if (omc__blk_free(b)) {
            free_blocks++;
            if (prev != OMC__NIL && omc__blk_free(&a->blocks[prev])) { res = OMC_ERR_INTERNAL; break; } /* not coalesced */
        } else { in_use += size; live++; }
        expect += size;
    }
    if (res == OMC_OK && (expect != a->capacity || in_use != a->in_use || live != a->live || free_blocks != a->free_count))
        res = OMC_ERR_INTERNAL;
    for (fl = 0; res == OMC_OK && fl < OMC__FL_COUNT; fl++) {
        for (sl = 0; sl < OMC__SL_COUNT; sl++) {
            uint32_t head = a->heads[fl][sl], f, s, p = OMC__NIL;
            int bit = (a->sl_map[fl] >> sl) & 1;
            if ((head != OMC__NIL) != bit) { res = OMC_ERR_INTERNAL; break; }
            for (i = head; i != OMC__NIL; p = i, i = a->blocks[i].w1) {
                if (!omc__blk_free(&a->blocks[i]) || a->blocks[i].w0 != p) { res = OMC_ERR_INTERNAL; break; }
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

/* In a child after fork(): unmap this process's copy of a pool the library mapped itself (the
   creator's mapping is untouched; nothing else of the pool is freed or detached here). */
OMC__PRIVATE void omc__pool_unmap_copy(omc_pool* pool) {
    if (pool && pool->mapped) munmap(pool->base, pool->mapped);
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

/* What list() hands out, one qualified key at a time. */
typedef omc_result (*omc__key_sink)(const char* qkey, uint32_t qlen, void* user);

#define OMC__META_UNWANTED 0xFFFFFFFFu
typedef struct omc__conn_vtable {
    const char* family;         /* "local", "shm", "remote": the one way a connector is recognised
                                   (omc__conn_is); the transport may vary within a family */
    omc_transport transport;
    /* put: qkey is the qualified key. meta_out is never NULL; meta_out->size == OMC__META_UNWANTED
       when the caller passed none: the put may then skip building it and leave {NULL, 0}. */
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
    /* exists: OMC_OK if qkey is live (a get would find it now), OMC_ERR_NOT_FOUND if not */
    omc_result (*exists)(omc_conn* c, const char* qkey, uint32_t qlen);
    /* list: sink once per live qualified key (may run under the connector's lock: a sink must
       not call back into the connector); a result other than OMC_OK stops and is returned */
    omc_result (*list)(omc_conn* c, omc__key_sink sink, void* user);
    /* pending: puts of this connector not yet consumed (read by all readers, cleaned up or
       expired; expiry is applied first) - omc_conn_wait_consumed waits for 0 */
    uint64_t   (*pending)(omc_conn* c);
    /* the desc a user edits to change this connector (its pool size): "omc_local_desc", ...;
       NULL = "the connector's desc" */
    const char* desc_name;
} omc__conn_vtable;

/* One get of a batch handed to a connector's get_batch: checked as a get is (key qualified,
   metadata parsed and matched); the connector fills out and result. */
typedef struct omc__batch_get {
    const char* qkey;
    uint32_t qlen;
    const omc_meta_info* meta;          /* never NULL: metadata-less gets are not batched */
    omc_buffer* out;
    omc_result result;                  /* the connector sets it for every item */
} omc__batch_get;

struct omc_conn {
    const omc__conn_vtable* vt;
    void* impl;
    omc_hooks hooks;
    omc_role role;
    int closed;                 /* atomic */
    uint32_t refs;              /* atomic: the creator's, and one per buffer that needs the connector */
    uint32_t calls;             /* atomic: public calls inside now; close waits for them to leave */
    pthread_cond_t calls_cv;    /* with err_mu: the last call left a closing connector */
    pid_t pid;                  /* the creator's process (named in the fork guard's log line) */
    uint32_t fork_gen;          /* omc__fork_gen at create: a later value means a forked copy */
    /* optional lifetime hooks a connector sets after omc__conn_create (kept out of the vtable so
       the tables companions initialise stay as they are) */
    /* wake (optional): omc_conn_close has set closed; wake every call blocked inside so it sees
       it and returns (a transport whose calls poll closed gives a wake that does nothing). With
       wake, close runs only after every call has left; without it, close runs at once (it
       must wake the calls itself and bear them inside) and the connector is freed only after */
    void (*wake)(omc_conn* c);
    /* forked (optional): destroy in a process other than the creator's (after fork()): close
       this process's descriptors and unmap, nothing else - no thread to join, no message, nothing
       unlinked (the creator still uses all of it). NULL: nothing is released there. */
    void (*forked)(omc_conn* c);
    /* hint (optional): for a failed call's log line, what the transport knows about where it
       failed (a remote connector: the peer's name, host and port) */
    void (*hint)(omc_conn* c, omc_result r, char* out, size_t n);
    /* get_batch (optional): the gets of a batch that carry metadata, at once, with one deadline,
       so that the transport may overlap them (the remote connector pipelines the requests to
       one sender on one data connection). It sets every item's out and result as get would.
       NULL: the core runs get once per item. */
    void (*get_batch)(omc_conn* c, omc__batch_get* g, uint32_t n, omc_time_ns deadline);

    uint64_t puts, gets, releases, bytes_put, bytes_got, errors, timeouts, ttl_reclaims;   /* atomic */
    pthread_mutex_t err_mu;
    omc_result last_error;
    char last_error_text[160];
};

/* The fork guard without a syscall per call (getpid() is not cached by glibc): a process-wide
   generation that a pthread_atfork child handler bumps, so a connector records it at create and a
   call compares it with one load. The handler is registered once, before the first connector
   exists, so every fork() that can copy a connector runs it. A copy made without the atfork
   handlers (raw clone(), vfork() followed by anything but exec) is not detected. */
static uint32_t omc__fork_gen;      /* atomic: bumped in each child of fork() */
static pthread_once_t omc__fork_once = PTHREAD_ONCE_INIT;
static void omc__fork_child(void) { __atomic_add_fetch(&omc__fork_gen, 1u, __ATOMIC_RELAXED); }
static int omc__fork_watched;       /* written once under omc__fork_once: the handler is in */
static void omc__fork_watch(void) { omc__fork_watched = pthread_atfork(NULL, NULL, omc__fork_child) == 0; }
static uint32_t omc__fork_generation(void) { return __atomic_load_n(&omc__fork_gen, __ATOMIC_RELAXED); }

OMC__PRIVATE omc_result omc__conn_create(const omc_hooks* hooks, const omc__conn_vtable* vt, omc_role role, omc_conn** out) {
    omc_conn* c;
    if (pthread_once(&omc__fork_once, omc__fork_watch) != 0) return OMC_ERR_SYSTEM;
    c = (omc_conn*)omc__calloc(hooks, sizeof(omc_conn));
    if (!c) return OMC_ERR_NO_MEMORY;
    c->vt = vt;
    c->hooks = *hooks;
    c->role = role == OMC_ROLE_DEFAULT ? OMC_ROLE_DUAL : role;
    c->refs = 1;
    c->pid = getpid();
    c->fork_gen = omc__fork_generation();
    if (pthread_mutex_init(&c->err_mu, NULL) != 0) { omc__free(hooks, c); return OMC_ERR_SYSTEM; }
    if (omc__cond_init_monotonic(&c->calls_cv) != 0) { pthread_mutex_destroy(&c->err_mu); omc__free(hooks, c); return OMC_ERR_SYSTEM; }
    *out = c;
    return OMC_OK;
}

/* Is this the process that created c? After fork() the child has a copy of the connector whose
   threads do not exist there: it may only let go of it. One plain load: this runs per call. */
OMC__PRIVATE int omc__conn_foreign(const omc_conn* c) {
    if (!omc__fork_watched) return c->pid != getpid();  /* pthread_atfork failed (no memory) */
    return c->fork_gen != omc__fork_generation();
}

OMC__PRIVATE void omc__conn_leave_call(omc_conn* c);
OMC__PRIVATE void omc__conn_ref(omc_conn* c);
OMC__PRIVATE void omc__conn_unref(omc_conn* c);

/* A buffer from a core connector's pool (omc_conn_alloc) holds a reference on the connector, so
   the pool stays mapped until the buffer is released or put, even after omc_conn_destroy. */
static omc_result omc__conn_buffer_release(omc_buffer* b) {
    omc_conn* c = (omc_conn*)b->owner;
    omc_result r = omc_alloc_free(b->pool->alloc, b->range);
    omc__conn_unref(c);
    return r;
}

OMC__PRIVATE omc_result omc__conn_pool_buffer(omc_conn* c, omc_pool* pool, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    omc_result r = omc_pool_alloc_buffer_wait(pool, size, deadline, out);
    if (r != OMC_OK) return r;
    out->release_fn = omc__conn_buffer_release;
    out->owner = c;
    omc__conn_ref(c);
    return OMC_OK;
}

/* Every public call holds c while inside (omc__conn_hold .. omc__conn_leave), so
   omc_conn_close / omc_conn_destroy from another thread wakes it, waits for it to leave, and
   only then tears the connector down. OMC_ERR_CLOSED (nothing held) once closed or in a process
   other than the creator's. */
OMC__PRIVATE omc_result omc__conn_hold(omc_conn* c) {
    if (omc__conn_foreign(c)) {
        OMC__LOG(&c->hooks, OMC_LOG_ERROR, OMC_LOGITEM_CONN_CLOSED, "connector used in process %d, but it belongs to process %d "
                 "(it was copied by fork()): create a connector in this process; destroy is the only call allowed here",
                 (int)getpid(), (int)c->pid);
        return OMC_ERR_CLOSED;
    }
    __atomic_add_fetch(&c->calls, 1u, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->closed, __ATOMIC_SEQ_CST)) {    /* close may be waiting for us: leave */
        omc__conn_leave_call(c);
        return OMC_ERR_CLOSED;
    }
    return OMC_OK;
}

/* A public call's body: r = call (an expression over c) between hold and leave, or hold's
   OMC_ERR_CLOSED without running it. */
#define OMC__CONN_HELD(c, r, call) \
    do { if (((r) = omc__conn_hold(c)) == OMC_OK) { (r) = (call); omc__conn_leave_call(c); } } while (0)

OMC__PRIVATE void omc__conn_ref(omc_conn* c) { omc__add(&c->refs, 1u); }

/* A public call leaves c; the last one out of a closing connector wakes omc_conn_close. Once
   calls reaches 0, close may see it (it checks under err_mu at every turn of its wait) and run on
   to destroy and free c before this thread has sent the wake-up: a reference held across the
   decrement keeps c alive until then (and if it is the last, the teardown runs here, after). */
OMC__PRIVATE void omc__conn_leave_call(omc_conn* c) {
    omc__conn_ref(c);
    if (__atomic_sub_fetch(&c->calls, 1u, __ATOMIC_SEQ_CST) == 0 && __atomic_load_n(&c->closed, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&c->err_mu);
        pthread_cond_broadcast(&c->calls_cv);
        pthread_mutex_unlock(&c->err_mu);
    }
    omc__conn_unref(c);
}

/* Is c a connector of this family (its implementation's own state is in c->impl)? */
OMC__PRIVATE int omc__conn_is(const omc_conn* c, const char* family) {
    return c && c->vt && c->vt->family && strcmp(c->vt->family, family) == 0;
}

OMC__PRIVATE void omc__conn_unref(omc_conn* c) {
    if (omc__sub(&c->refs, 1u) == 0) {
        omc_hooks hooks = c->hooks;
        if (c->vt->destroy) c->vt->destroy(c);
        pthread_cond_destroy(&c->calls_cv);
        pthread_mutex_destroy(&c->err_mu);
        omc__free(&hooks, c);
    }
}

/* A connector whose create failed, never handed out: freed without its destroy. */
OMC__PRIVATE void omc__conn_discard(omc_conn* c, const omc_hooks* hooks) {
    if (!c) return;
    pthread_cond_destroy(&c->calls_cv);
    pthread_mutex_destroy(&c->err_mu);
    omc__free(hooks, c);
}

/* The counters of a get that a connector's own call (not omc_conn_get) served or refused. */
OMC__PRIVATE void omc__conn_count_get(omc_conn* c, uint64_t bytes) {
    omc__add(&c->gets, 1u);
    omc__add(&c->bytes_got, bytes);
}
OMC__PRIVATE void omc__conn_count_refusal(omc_conn* c, omc_result r) { if (r != OMC_ERR_CLOSED) omc__add(&c->errors, 1u); }

/* Remember the last failure (health() reports it) and log it. */
static void omc__conn_failv(omc_conn* c, omc_result r, omc_log_item item, const char* file, int line, const char* fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    pthread_mutex_lock(&c->err_mu);
    c->last_error = r;
    {   /* health() keeps the start */
        size_t n = strlen(msg);
        if (n > sizeof(c->last_error_text) - 1) n = sizeof(c->last_error_text) - 1;
        memcpy(c->last_error_text, msg, n);
        c->last_error_text[n] = '\0';
    }
    omc__log(&c->hooks, r == OMC_ERR_TIMEOUT || r == OMC_ERR_NOT_FOUND ? OMC_LOG_INFO : OMC_LOG_WARN, item, file, line, "%s", msg);
    pthread_mutex_unlock(&c->err_mu);
}

/* omc__conn_fail(c, r, fmt, ...): the log line points at the caller */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
OMC__PRIVATE void omc__conn_fail_at(omc_conn* c, omc_result r, const char* file, int line, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    omc__conn_failv(c, r, OMC_LOGITEM_CONN_ERROR, file, line, fmt, ap);
    va_end(ap);
}
#define omc__conn_fail(c, r, ...) omc__conn_fail_at((c), (r), __FILE__, __LINE__, __VA_ARGS__)

#if defined(__GNUC__)
__attribute__((format(printf, 6, 7)))
#endif
static void omc__conn_fail_item(omc_conn* c, omc_result r, omc_log_item item, const char* file, int line, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    omc__conn_failv(c, r, item, file, line, fmt, ap);
    va_end(ap);
}

static const char* omc__transport_text(omc_transport t) {
    switch (t) {
        case OMC_TRANSPORT_LOCAL: return "same-process";
        case OMC_TRANSPORT_SHM: return "shared-memory";
        case OMC_TRANSPORT_TCP: return "TCP";
        case OMC_TRANSPORT_RDMA: return "RDMA";
        default: return "unknown";
    }
}

/* A qualified key as a user wrote it: "from/to/key". */
static void omc__key_printable(const char* qkey, uint32_t qlen, char out[OMC_KEY_MAX]) {
    uint32_t i;
    for (i = 0; i < qlen && i < OMC_KEY_MAX - 1; i++) out[i] = qkey[i] == '\x1f' ? '/' : qkey[i];
    out[i] = '\0';
}

/* The desc a user edits to change this connector's pool. */
static const char* omc__conn_desc_name(const omc_conn* c) {
    return c->vt->desc_name ? c->vt->desc_name : "the connector's desc";
}

/* Count a failed call and log it once: "op from/to/key: what; which side, the sizes, the fix". */
static void omc__conn_count_error_at(omc_conn* c, omc_result r, const char* op, const char* qkey, uint32_t qlen,
                                     const char* hint, const char* file, int line) {
    char printable[OMC_KEY_MAX];
    /* a timeout is counted once, as a timeout (as vLLM-Omni's connectors count it) */
    omc__add(r == OMC_ERR_TIMEOUT ? &c->timeouts : &c->errors, 1u);
    omc__key_printable(qkey, qlen, printable);
    omc__conn_fail_at(c, r, file, line, "%s %s: %s%s%s", op, printable, omc_result_str(r), hint && hint[0] ? "; " : "",
                      hint ? hint : "");
}
#define omc__conn_count_error_hint(c, r, op, qkey, qlen, hint) \
    omc__conn_count_error_at((c), (r), (op), (qkey), (qlen), (hint), __FILE__, __LINE__)
#define omc__conn_count_error(c, r, op, qkey, qlen) \
    omc__conn_count_error_at((c), (r), (op), (qkey), (qlen), NULL, __FILE__, __LINE__)

/* Why a put or get was refused, for the codes a user can act on: which side, the sizes, what to
   change. size is the payload's size (0 if unknown). */
static void omc__conn_hint(omc_conn* c, omc_result r, int is_put, const omc_payload* p, uint64_t size, int with_meta,
                           char* out, size_t n) {
    omc_health h;
    const char* side = is_put ? "sender" : "receiver";
    out[0] = '\0';
    memset(&h, 0, sizeof(h));
    if ((r == OMC_ERR_TOO_LARGE || r == OMC_ERR_POOL_FULL) && c->vt->health) c->vt->health(c, &h);
    if (r == OMC_ERR_TOO_LARGE && is_put && p && p->buffer && p->size > p->buffer->size)
        snprintf(out, n, "payload.size (%llu bytes) is larger than its buffer (%llu bytes)",
                 (unsigned long long)p->size, (unsigned long long)p->buffer->size);
    else if (r == OMC_ERR_TOO_LARGE && h.pool_capacity && size)
        snprintf(out, n, "the payload (%llu bytes) is larger than this %s's whole pool (%llu bytes): raise pool_size in the %s's %s",
                 (unsigned long long)size, side, (unsigned long long)h.pool_capacity, side, omc__conn_desc_name(c));
    else if (r == OMC_ERR_TOO_LARGE && h.pool_capacity)
        snprintf(out, n, "the payload is larger than this %s's whole pool (%llu bytes): raise pool_size in the %s's %s",
                 side, (unsigned long long)h.pool_capacity, side, omc__conn_desc_name(c));
    else if (r == OMC_ERR_POOL_FULL && h.pool_capacity)
        snprintf(out, n, "%llu of the %s's %llu pool bytes are in use (%llu more wanted): consume, release or clean up earlier "
                 "payloads, put with a deadline to wait for space (omc_conn_put_batch), or raise pool_size in its %s",
                 (unsigned long long)h.pool_in_use, side, (unsigned long long)h.pool_capacity, (unsigned long long)size,
                 omc__conn_desc_name(c));
    else if (r == OMC_ERR_EXISTS)
        snprintf(out, n, "this key is still live on this sender (a put not yet read by all its readers, or an entry kept for "
                 "many reads): get it, clean it up (omc_conn_cleanup) or use a new key");
    else if (r == OMC_ERR_INVALID_ARG && is_put && p && p->buffer)
        snprintf(out, n, "the zero-copy buffer is not from this sender's pool: allocate it with omc_conn_alloc on this "
                 "connector, or pass data and size to copy it");
    else if (r == OMC_ERR_STALE && with_meta)
        snprintf(out, n, "the metadata names an earlier put of this key that a newer put replaced: pass the newest put's metadata");
    else if (r == OMC_ERR_NOT_FOUND && with_meta)
        snprintf(out, n, "the put this metadata names is gone from the sender (read by all its readers, cleaned up, or past "
                 "its TTL)");
    else if ((r == OMC_ERR_CONNECTION || r == OMC_ERR_AUTH || r == OMC_ERR_TIMEOUT || r == OMC_ERR_PROTOCOL) && c->hint)
        c->hint(c, r, out, n);
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

static omc_result omc__conn_put_in(omc_conn* c, const char* from, const char* to, const char* key, const omc_payload* p, omc_meta* meta_out) {
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
    if (r == OMC_ERR_INVALID_ARG && qlen) { omc__conn_count_error_hint(c, r, "put", qkey, qlen, "payload.size is set but payload.data is NULL"); return r; }
    if (r == OMC_ERR_TOO_LARGE) {
        char hint[400];
        omc__conn_hint(c, r, 1, p, p->size, 0, hint, sizeof(hint));
        omc__conn_count_error_hint(c, r, "put", qkey, qlen, hint);
        return r;
    }
    if (r != OMC_OK) { if (r != OMC_ERR_CLOSED) omc__add(&c->errors, 1u); return r; }
    size = p->buffer ? (p->size ? p->size : p->buffer->size) : p->size;
    if (!meta_out) tmp.size = OMC__META_UNWANTED;
    r = c->vt->put(c, qkey, qlen, p, &tmp);
    if (r != OMC_OK) {
        char hint[400];
        omc_meta_free(&tmp);
        omc__conn_hint(c, r, 1, p, size, 0, hint, sizeof(hint));
        omc__conn_count_error_hint(c, r, "put", qkey, qlen, hint);
        return r;
    }
    omc__add(&c->puts, 1u);
    omc__add(&c->bytes_put, size);
    if (meta_out) *meta_out = tmp;
    else omc_meta_free(&tmp);
    return OMC_OK;
}

OMNICONN_API omc_result omc_conn_put(omc_conn* c, const char* from, const char* to, const char* key,
                                     const omc_payload* p, omc_meta* meta_out) {
    omc_result r;
    if (meta_out) { meta_out->data = NULL; meta_out->size = 0; }
    if (!c) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_put_in(c, from, to, key, p, meta_out));
    return r;
}

/* Shared by get and get_copy: validate metadata against the key and the transport. */
/* A get's opening, before the transport is asked: closed?, role, the qualified key, and the
   metadata (parsed into *info; NULL meta = a metadata-less get). A refusal is counted and logged. */
OMC__PRIVATE omc_result omc__conn_get_check(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                            size_t meta_size, char qkey[OMC_KEY_MAX], uint32_t* qlen, omc_meta_info* info) {
    omc_result r = omc__conn_enter(c, OMC_ROLE_RECEIVER, from, to, key, qkey, qlen);
    if (r != OMC_OK) { if (r != OMC_ERR_CLOSED) omc__add(&c->errors, 1u); return r; }
    if (meta) {
        char hint[1024];
        hint[0] = '\0';
        r = omc_meta_parse(meta, meta_size, info);
        if (r == OMC_OK && info->transport != c->vt->transport) {
            r = OMC_ERR_TYPE;
            snprintf(hint, sizeof(hint), "the metadata was written by a %s connector and this receiver is a %s one: "
                     "get it with a connector of the transport that put it", omc__transport_text(info->transport),
                     omc__transport_text(c->vt->transport));
        }
        if (r == OMC_OK && (info->key_len != *qlen || memcmp(info->key, qkey, *qlen) != 0)) {
            char theirs[OMC_KEY_MAX], ours[OMC_KEY_MAX];
            r = OMC_ERR_INVALID_ARG;
            omc__key_printable(info->key, info->key_len, theirs);
            omc__key_printable(qkey, *qlen, ours);
            snprintf(hint, sizeof(hint), "the metadata is for key %s, not %s: pass the metadata that put() returned "
                     "for this key (or NULL to look the key up)", theirs, ours);
        }
        if (r != OMC_OK) {
            if (!hint[0]) snprintf(hint, sizeof(hint), "the metadata blob is damaged or not omniconn metadata "
                                   "(pass it on unchanged: omc_meta_to_text/omc_meta_from_text for text channels)");
            omc__add(&c->errors, 1u);
            {
                char ours[OMC_KEY_MAX];
                omc__key_printable(qkey, *qlen, ours);
                omc__conn_fail_item(c, r, OMC_LOGITEM_META_MALFORMED, __FILE__, __LINE__, "get %s: metadata refused: %s; %s", ours,
                                    omc_result_str(r), hint);
            }
            return r;
        }
    }
    return OMC_OK;
}

/* A get's close, after the transport answered r: count it, and for a failure log it with a
   hint and leave out empty but for the size a TOO_LARGE reports. */
OMC__PRIVATE omc_result omc__conn_get_done(omc_conn* c, omc_result r, const char* qkey, uint32_t qlen, const omc_meta_info* info,
                                           uint64_t max_size, omc_buffer* out) {
    if (r != OMC_OK) {
        uint64_t need = out->size;
        /* TOO_LARGE with max_size is get_copy asking how much room it needs: no error; without
           it, the payload does not fit this receiver at all */
        if ((r != OMC_ERR_TOO_LARGE || max_size == 0) && r != OMC_ERR_CLOSED) {   /* closed under it: not an error of the get */
            char hint[1024];
            omc__conn_hint(c, r, 0, NULL, need ? need : (info ? info->data_size : 0), info != NULL, hint, sizeof(hint));
            omc__conn_count_error_hint(c, r, "get", qkey, qlen, hint);
        }
        memset(out, 0, sizeof(*out));
        out->size = need;
        return r;
    }
    omc__add(&c->gets, 1u);
    omc__add(&c->bytes_got, out->size);
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__conn_get(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                      size_t meta_size, omc_time_ns deadline, uint64_t max_size, omc_buffer* out) {
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    omc_meta_info info;
    omc_result r;
    memset(out, 0, sizeof(*out));
    r = omc__conn_get_check(c, from, to, key, meta, meta_size, qkey, &qlen, &info);
    if (r != OMC_OK) return r;
    r = c->vt->get(c, qkey, qlen, meta ? &info : NULL, deadline, max_size, out);
    return omc__conn_get_done(c, r, qkey, qlen, meta ? &info : NULL, max_size, out);
}

static omc_result omc__conn_get_in(omc_conn* c, const char* from, const char* to, const char* key, const void* meta, size_t meta_size, omc_time_ns deadline, omc_buffer* out) {
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!c) return OMC_ERR_INVALID_ARG;
    r = omc__conn_get(c, from, to, key, meta, meta_size, deadline, 0, out);
    if (r != OMC_OK) out->size = 0;
    return r;
}

OMNICONN_API omc_result omc_conn_get(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                     size_t meta_size, omc_time_ns deadline, omc_buffer* out) {
    omc_result r;
    if (out) memset(out, 0, sizeof(*out));
    if (!c || !out) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_get_in(c, from, to, key, meta, meta_size, deadline, out));
    return r;
}

static omc_result omc__conn_get_copy_in(omc_conn* c, const char* from, const char* to, const char* key, const void* meta, size_t meta_size, omc_time_ns deadline, void* dst, uint64_t dst_size, uint64_t* out_size) {
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

OMNICONN_API omc_result omc_conn_get_copy(omc_conn* c, const char* from, const char* to, const char* key, const void* meta,
                                          size_t meta_size, omc_time_ns deadline, void* dst, uint64_t dst_size, uint64_t* out_size) {
    omc_result r;
    if (out_size) *out_size = 0;
    if (!c) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_get_copy_in(c, from, to, key, meta, meta_size, deadline, dst, dst_size, out_size));
    return r;
}

static omc_result omc__conn_alloc_in(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!c) return OMC_ERR_INVALID_ARG;
    if (omc__load(&c->closed)) return OMC_ERR_CLOSED;
    if (!c->vt->alloc) return OMC_ERR_UNAVAILABLE;
    return c->vt->alloc(c, size, deadline, out);
}

OMNICONN_API omc_result omc_conn_alloc(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    omc_result r;
    if (out) memset(out, 0, sizeof(*out));
    if (!c || !out) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_alloc_in(c, size, deadline, out));
    return r;
}

static omc_result omc__conn_cleanup_in(omc_conn* c, const char* from, const char* to, const char* key) {
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    omc_result r;
    if (!c) return OMC_ERR_INVALID_ARG;
    r = omc__conn_enter(c, OMC_ROLE_DEFAULT, from, to, key, qkey, &qlen);
    if (r != OMC_OK) return r;
    return c->vt->cleanup ? c->vt->cleanup(c, qkey, qlen) : OMC_ERR_UNAVAILABLE;
}

OMNICONN_API omc_result omc_conn_cleanup(omc_conn* c, const char* from, const char* to, const char* key) {
    omc_result r;
    if (!c) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_cleanup_in(c, from, to, key));
    return r;
}

OMNICONN_API omc_result omc_conn_health(omc_conn* c, omc_health* h) {
    int inside;
    if (!h) return OMC_ERR_INVALID_ARG;
    memset(h, 0, sizeof(*h));
    if (!c) return OMC_ERR_INVALID_ARG;
    if (omc__conn_foreign(c)) {     /* refused, with its log line; closed as far as this process goes */
        h->state = OMC_CONN_CLOSED;
        h->transport = c->vt->transport;
        h->role = c->role;
        return omc__conn_hold(c);
    }
    /* a closed connector still answers (state CLOSED, its counters), without its transport */
    __atomic_add_fetch(&c->calls, 1u, __ATOMIC_SEQ_CST);
    inside = !__atomic_load_n(&c->closed, __ATOMIC_SEQ_CST);
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
    if (inside && c->vt->health) c->vt->health(c, h);
    if (!inside || omc__load(&c->closed)) h->state = OMC_CONN_CLOSED;
    omc__conn_leave_call(c);
    return OMC_OK;
}

static uint64_t omc__conn_sweep_in(omc_conn* c) {
    if (!c || omc__load(&c->closed) || !c->vt->sweep) return 0;
    return c->vt->sweep(c);
}

OMNICONN_API uint64_t omc_conn_sweep(omc_conn* c) {
    uint64_t n;
    if (!c) return 0;
    if (omc__conn_hold(c) != OMC_OK) return 0;
    n = omc__conn_sweep_in(c);
    omc__conn_leave_call(c);
    return n;
}

/* Close: mark closed (new calls are refused), wake the calls blocked inside, wait for every
   call to leave, then stop the transport. So closing from another thread is safe: a get waiting
   for a key returns OMC_ERR_CLOSED promptly and close returns after it. In a process other than
   the creator's (after fork()) nothing is stopped there: see omc_conn_destroy. */
OMNICONN_API void omc_conn_close(omc_conn* c) {
    if (!c) return;
    if (omc__conn_foreign(c)) return;
    if (__atomic_exchange_n(&c->closed, 1, __ATOMIC_SEQ_CST)) return;   /* idempotent */
    if (c->wake) c->wake(c);
    /* a transport without wake may need its close to wake its blocked calls: close first (it
       must then bear calls still inside), and free nothing before they left all the same */
    else if (c->vt->close) c->vt->close(c);
    pthread_mutex_lock(&c->err_mu);
    while (__atomic_load_n(&c->calls, __ATOMIC_SEQ_CST) != 0) {
        /* a call that polls closed notices within its slice; wake again in case it was between
           its check and its wait when the first wake came */
        omc__cond_wait_until(&c->calls_cv, &c->err_mu, omc_now_ns() + 50 * 1000000LL);
        if (c->wake && __atomic_load_n(&c->calls, __ATOMIC_SEQ_CST) != 0) {
            pthread_mutex_unlock(&c->err_mu);
            c->wake(c);
            pthread_mutex_lock(&c->err_mu);
        }
    }
    pthread_mutex_unlock(&c->err_mu);
    if (c->wake && c->vt->close) c->vt->close(c);
}

/* Destroy in the creator's process: close, then drop the creator's reference (buffers still held
   keep the connector's memory until released). In another process (a child after fork()): only
   what belongs to this process's copy goes - descriptors closed, memory unmapped - with no
   thread joined, no message sent and nothing unlinked, so the creator's entries stay readable. */
OMNICONN_API void omc_conn_destroy(omc_conn* c) {
    if (!c) return;
    if (omc__conn_foreign(c)) {
        OMC__LOG(&c->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_CONN_CLOSED, "destroy in process %d of a connector of process %d: "
                 "releasing this process's copy only", (int)getpid(), (int)c->pid);
        if (c->forked) c->forked(c);
        return;     /* the handle's memory is this process's copy: left as it is, like the rest */
    }
    omc_conn_close(c);
    omc__conn_unref(c);
}

OMNICONN_API omc_transport omc_conn_transport(const omc_conn* c) { return c ? c->vt->transport : OMC_TRANSPORT_NONE; }

/* Put a payload; a copy-path payload is first staged in a buffer from the connector's pool, so
   that waiting for space (until deadline) replaces failing with OMC_ERR_POOL_FULL. Connectors
   without alloc, device-memory pools and empty payloads take the plain put. */
OMC__PRIVATE omc_result omc__put_staged(omc_conn* c, const char* from, const char* to, const char* key, const omc_payload* p,
                                        omc_time_ns deadline, omc_meta* meta) {
    omc_buffer buf;
    omc_payload staged;
    omc_result r;
    if (p->buffer || p->size == 0 || !p->data) return omc_conn_put(c, from, to, key, p, meta);
    r = omc_conn_alloc(c, p->size, deadline, &buf);
    if (r == OMC_ERR_UNAVAILABLE) return omc_conn_put(c, from, to, key, p, meta);
    if (r != OMC_OK) return r;
    if (buf.pool && omc_pool_memory(buf.pool) == OMC_MEMORY_CUDA) {
        omc_buffer_release(&buf);
        return omc_conn_put(c, from, to, key, p, meta);
    }
    memcpy(buf.data, p->data, (size_t)p->size);
    staged = *p;
    staged.data = NULL;
    staged.buffer = &buf;
    r = omc_conn_put(c, from, to, key, &staged, meta);
    if (r != OMC_OK) omc_buffer_release(&buf);      /* still ours when the put failed */
    return r;
}

/* One item of a batch; a batch attempts every item and returns the first failure. */
typedef omc_result (*omc__item_fn)(omc_conn* c, const char* from, const char* to, omc_batch_item* it, omc_time_ns deadline);

static omc_result omc__put_item(omc_conn* c, const char* from, const char* to, omc_batch_item* it, omc_time_ns deadline) {
    it->meta.data = NULL;
    it->meta.size = 0;
    return omc__put_staged(c, from, to, it->key, &it->payload, deadline, &it->meta);
}

static omc_result omc__get_item(omc_conn* c, const char* from, const char* to, omc_batch_item* it, omc_time_ns deadline) {
    return omc_conn_get(c, from, to, it->key, it->meta.size ? it->meta.data : NULL, it->meta.size, deadline, &it->buffer);
}

OMC__PRIVATE omc_result omc__batch(omc_conn* c, const char* from, const char* to, omc_batch_item* items, uint32_t count,
                                   omc_time_ns deadline, omc__item_fn fn) {
    omc_result first = OMC_OK;
    uint32_t i;
    if (!c || (!items && count)) return OMC_ERR_INVALID_ARG;
    for (i = 0; i < count; i++) {
        items[i].result = fn(c, from, to, &items[i], deadline);
        if (items[i].result != OMC_OK && first == OMC_OK) first = items[i].result;
    }
    return first;
}

OMNICONN_API omc_result omc_conn_put_batch(omc_conn* c, const char* from, const char* to, omc_batch_item* items, uint32_t count,
                                           omc_time_ns deadline) {
    return omc__batch(c, from, to, items, count, deadline, omc__put_item);
}

/* What a batch keeps per item while the connector's get_batch runs. */
typedef struct omc__batch_slot {
    char qkey[OMC_KEY_MAX];
    omc_meta_info info;
    uint32_t at;                        /* the item's index in the caller's array */
} omc__batch_slot;

/* A batch of gets on a connector with get_batch: every item is checked as a get is, the ones
   with metadata go to the connector together, the metadata-less ones (which search every
   sender) then run one at a time. Results and counters are those of the same gets one by one. */
static omc_result omc__conn_get_batch_in(omc_conn* c, const char* from, const char* to, omc_batch_item* items, uint32_t count,
                                         omc_time_ns deadline) {
    omc__batch_slot* sl = (omc__batch_slot*)omc__malloc(&c->hooks, sizeof(omc__batch_slot) * count);
    omc__batch_get* g = (omc__batch_get*)omc__malloc(&c->hooks, sizeof(omc__batch_get) * count);
    omc_result first = OMC_OK;
    uint32_t i, n = 0;
    if (!sl || !g) {                    /* no room to batch: the same gets one at a time */
        omc__free(&c->hooks, sl);
        omc__free(&c->hooks, g);
        for (i = 0; i < count; i++) items[i].result = omc__conn_get_in(c, from, to, items[i].key, items[i].meta.size ? items[i].meta.data : NULL,
                                                                       items[i].meta.size, deadline, &items[i].buffer);
    } else {
        for (i = 0; i < count; i++) {
            omc_batch_item* it = &items[i];
            uint32_t qlen = 0;
            memset(&it->buffer, 0, sizeof(it->buffer));
            it->result = OMC_OK;
            if (!it->meta.size) continue;       /* metadata-less: after the batch */
            it->result = omc__conn_get_check(c, from, to, it->key, it->meta.data, it->meta.size, sl[n].qkey, &qlen, &sl[n].info);
            if (it->result != OMC_OK) continue;
            sl[n].at = i;
            g[n].qkey = sl[n].qkey;
            g[n].qlen = qlen;
            g[n].meta = &sl[n].info;
            g[n].out = &it->buffer;
            g[n].result = OMC_ERR_INTERNAL;     /* a connector that skipped an item says so */
            n++;
        }
        if (n) c->get_batch(c, g, n, deadline);
        for (i = 0; i < n; i++)
            items[sl[i].at].result = omc__conn_get_done(c, g[i].result, g[i].qkey, g[i].qlen, g[i].meta, 0, g[i].out);
        omc__free(&c->hooks, sl);
        omc__free(&c->hooks, g);
        for (i = 0; i < count; i++)
            if (!items[i].meta.size) items[i].result = omc__conn_get_in(c, from, to, items[i].key, NULL, 0, deadline, &items[i].buffer);
    }
    for (i = 0; i < count; i++) if (items[i].result != OMC_OK && first == OMC_OK) first = items[i].result;
    return first;
}

OMNICONN_API omc_result omc_conn_get_batch(omc_conn* c, const char* from, const char* to, omc_batch_item* items, uint32_t count,
                                           omc_time_ns deadline) {
    omc_result r;
    uint32_t i;
    if (!c || (!items && count)) return OMC_ERR_INVALID_ARG;
    if (!c->get_batch || count < 2) return omc__batch(c, from, to, items, count, deadline, omc__get_item);
    if ((r = omc__conn_hold(c)) != OMC_OK) {    /* closed: every item says so, as a get would */
        for (i = 0; i < count; i++) { memset(&items[i].buffer, 0, sizeof(items[i].buffer)); items[i].result = r; }
        return r;
    }
    r = omc__conn_get_batch_in(c, from, to, items, count, deadline);
    omc__conn_leave_call(c);
    return r;
}

static omc_result omc__conn_exists_in(omc_conn* c, const char* from, const char* to, const char* key) {
    char q[OMC_KEY_MAX];
    uint32_t ql = 0;
    omc_result r;
    if (!c) return OMC_ERR_INVALID_ARG;
    r = omc__conn_enter(c, OMC_ROLE_DEFAULT, from, to, key, q, &ql);
    if (r != OMC_OK) return r;
    return c->vt->exists ? c->vt->exists(c, q, ql) : OMC_ERR_UNAVAILABLE;
}

OMNICONN_API omc_result omc_conn_exists(omc_conn* c, const char* from, const char* to, const char* key) {
    omc_result r;
    if (!c) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_exists_in(c, from, to, key));
    return r;
}

/* Qualified keys copied out under the connector's lock, as [u16 length][bytes] records. */
typedef struct omc__keybuf {
    const omc_hooks* hooks;
    char* data;
    size_t len, cap;
} omc__keybuf;

static omc_result omc__keybuf_sink(const char* qkey, uint32_t qlen, void* user) {
    omc__keybuf* kb = (omc__keybuf*)user;
    if (kb->cap - kb->len < (size_t)qlen + 2 || !kb->data) {
        size_t ncap = kb->cap ? kb->cap * 2 : 4096;
        char* nd;
        while (ncap - kb->len < (size_t)qlen + 2) ncap *= 2;
        nd = (char*)omc__malloc(kb->hooks, ncap);
        if (!nd) return OMC_ERR_NO_MEMORY;
        if (kb->len) memcpy(nd, kb->data, kb->len);
        omc__free(kb->hooks, kb->data);
        kb->data = nd;
        kb->cap = ncap;
    }
    omc__put_u16((uint8_t*)kb->data + kb->len, (uint16_t)qlen);
    memcpy(kb->data + kb->len + 2, qkey, qlen);
    kb->len += (size_t)qlen + 2;
    return OMC_OK;
}

static omc_result omc__conn_list_in(omc_conn* c, const char* from, const char* to, omc_key_fn fn, void* user_data, uint64_t* out_count) {
    omc__keybuf kb;
    size_t pos = 0;
    uint64_t n = 0;
    omc_result r;
    if (out_count) *out_count = 0;
    if (!c) return OMC_ERR_INVALID_ARG;
    if (omc__load(&c->closed)) return OMC_ERR_CLOSED;
    if (!c->vt->list) return OMC_ERR_UNAVAILABLE;
    memset(&kb, 0, sizeof(kb));
    kb.hooks = &c->hooks;
    r = c->vt->list(c, omc__keybuf_sink, &kb);
    /* outside the connector's lock now: split each key and call back */
    while (r == OMC_OK && pos < kb.len) {
        char parts[3][OMC_KEY_MAX];
        uint32_t qlen = omc__get_u16((const uint8_t*)kb.data + pos), i, part = 0, o = 0;
        const char* q = kb.data + pos + 2;
        pos += (size_t)qlen + 2;
        for (i = 0; i < qlen; i++) {
            if (q[i] == 0x1f && part < 2) { parts[part][o] = '\0'; part++; o = 0; }
            else parts[part][o++] = q[i];
        }
        parts[part][o] = '\0';
        if (part != 2) continue;    /* not a qualified key: cannot happen */
        if ((from && strcmp(from, parts[0]) != 0) || (to && strcmp(to, parts[1]) != 0)) continue;
        n++;
        if (fn && fn(parts[0], parts[1], parts[2], user_data)) break;
    }
    omc__free(&c->hooks, kb.data);
    if (out_count) *out_count = n;
    return r;
}

OMNICONN_API omc_result omc_conn_list(omc_conn* c, const char* from, const char* to, omc_key_fn fn, void* user_data, uint64_t* out_count) {
    omc_result r;
    if (out_count) *out_count = 0;
    if (!c) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_list_in(c, from, to, fn, user_data, out_count));
    return r;
}

static omc_result omc__conn_wait_consumed_in(omc_conn* c, omc_time_ns deadline) {
    int64_t nap_us = 200;
    if (!c) return OMC_ERR_INVALID_ARG;
    if (!c->vt->pending) return OMC_ERR_UNAVAILABLE;
    for (;;) {
        struct timespec ts;
        if (c->vt->pending(c) == 0) return OMC_OK;     /* also applies TTLs */
        if (omc__load(&c->closed)) return OMC_ERR_CLOSED;
        if (deadline == OMC_NO_WAIT || (deadline != OMC_WAIT_FOREVER && omc_now_ns() >= deadline)) return OMC_ERR_TIMEOUT;
        /* readers are in other threads, processes or hosts: look again soon, then less often */
        ts.tv_sec = 0;
        ts.tv_nsec = (long)nap_us * 1000L;
        nanosleep(&ts, NULL);
        if (nap_us < 10000) nap_us *= 2;
    }
}

OMNICONN_API omc_result omc_conn_wait_consumed(omc_conn* c, omc_time_ns deadline) {
    omc_result r;
    if (!c) return OMC_ERR_INVALID_ARG;
    OMC__CONN_HELD(c, r, omc__conn_wait_consumed_in(c, deadline));
    return r;
}


/* ============================================================================================== */
/* [SECTION] Implementation: the owner's entry table                                             */
/* ============================================================================================== */
/*
    What a connector that owns payloads keeps per put, in one place: the same-process, remote
    and SHM connectors all stand on it (the SHM connector's lock-free shared index is its own;
    this table is the owner's private truth next to it).

    - A slab of entries with a free list and a used list (LIVE + DRAINING, newest first): a put
      takes a free entry, nothing is malloc'ed per put (the slab doubles when full, up to max).
    - Ids are slot + generation: id = (gen << 32) | slot. Every put gets the next generation, so
      ids of one table grow with time (an older id names an older put: STALE), and an id whose
      slot was reused since no longer matches.
    - An index from qualified key to LIVE entry: open addressing, linear probing over 32-bit
      buckets (0 empty, OMC__NIL a tombstone, else slot + 1), rebuilt when tombstones pile up.
      The bucket helpers are shared with the SHM connector's shared index.
    - Holds: a reader's view or a push in flight holds the entry. Retiring an entry (last reader
      took it, cleanup, TTL, close) takes it out of the index at once; its range is freed only
      when the last hold goes - so a TTL never frees bytes a reader still holds.
    - The TTL sweep walks the used list once.
    The caller's lock protects the table; nothing here locks.
*/

#define OMC__ENT_FREE 0u
#define OMC__ENT_LIVE 1u                /* in the index: new readers find it */
#define OMC__ENT_DRAINING 2u            /* out of the index; holds keep its range */
#define OMC__ETAB_MAX 0x00FFFFFFu       /* most entries one table can grow to */

typedef struct omc__ent {
    omc_range range;
    uint64_t size;
    omc_time_ns expires;                /* 0 = never */
    uint64_t hash;                      /* of qkey */
    uint32_t gen;                       /* 0 while free */
    uint32_t state;                     /* OMC__ENT_* */
    uint32_t flags;                     /* the connector's (OMC_BUFFER_FRAME, ...) */
    uint32_t readers_left;              /* reads that may still start */
    uint32_t taken;                     /* reads taken, not yet committed or given back */
    uint32_t holds;                     /* views / pushes outstanding */
    uint32_t prev, next;                /* used list, or free list (next only) */
    uint32_t qlen;
    char qkey[OMC_KEY_MAX];
} omc__ent;

typedef struct omc__etab {
    omc__ent* ent;
    uint32_t cap, max;
    uint32_t free_head, used_head;
    uint32_t* bucket;
    uint32_t nbuckets, bucket_used;     /* bucket_used: live + tombstone buckets */
    uint32_t live;                      /* LIVE entries */
    uint32_t next_gen;
    omc_alloc* alloc;                   /* ranges are freed into it (NULL: the caller frees) */
    omc_hooks hooks;
} omc__etab;

/* FNV-1a, 64 bits: the key hash of the same-process and remote tables. */
OMC__PRIVATE uint64_t omc__hash64(const char* s, uint32_t len) {
    uint64_t h = 14695981039346656037ull;
    uint32_t i;
    for (i = 0; i < len; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
    return h;
}

/* The bucket helpers (also used on the SHM connector's shared index, hence the atomics: only one
   writer, but readers in other processes probe without a lock). Insert returns 0 only if no
   bucket is free; every probe is bounded by the bucket count. */
OMC__PRIVATE int omc__bucket_insert(uint32_t* b, uint32_t nbuckets, uint32_t* used, uint32_t slot, uint64_t hash) {
    uint32_t mask = nbuckets - 1, i, n;
    for (i = (uint32_t)hash & mask, n = 0; n < nbuckets; i = (i + 1) & mask, n++) {
        uint32_t v = __atomic_load_n(&b[i], __ATOMIC_RELAXED);
        if (v == 0 || v == OMC__NIL) {
            if (v == 0) (*used)++;
            __atomic_store_n(&b[i], slot + 1, __ATOMIC_RELEASE);
            return 1;
        }
    }
    return 0;
}

OMC__PRIVATE void omc__bucket_remove(uint32_t* b, uint32_t nbuckets, uint32_t slot, uint64_t hash) {
    uint32_t mask = nbuckets - 1, i, n;
    for (i = (uint32_t)hash & mask, n = 0; n < nbuckets; i = (i + 1) & mask, n++) {
        uint32_t v = __atomic_load_n(&b[i], __ATOMIC_RELAXED);
        if (v == 0) return;
        if (v == slot + 1) { __atomic_store_n(&b[i], OMC__NIL, __ATOMIC_RELEASE); return; }
    }
}

OMC__PRIVATE uint64_t omc__etab_id(const omc__etab* T, uint32_t slot) { return ((uint64_t)T->ent[slot].gen << 32) | slot; }

/* The entry an id names, if it is still that put (LIVE or DRAINING), else OMC__NIL. */
OMC__PRIVATE uint32_t omc__etab_by_id(const omc__etab* T, uint64_t id) {
    uint32_t slot = (uint32_t)id, gen = (uint32_t)(id >> 32);
    if (slot >= T->cap || gen == 0 || T->ent[slot].gen != gen || T->ent[slot].state == OMC__ENT_FREE) return OMC__NIL;
    return slot;
}

/* The LIVE entry of a key, or OMC__NIL. */
OMC__PRIVATE uint32_t omc__etab_find(const omc__etab* T, const char* qkey, uint32_t qlen, uint64_t hash) {
    uint32_t mask, i, n;
    if (!T->nbuckets) return OMC__NIL;
    mask = T->nbuckets - 1;
    for (i = (uint32_t)hash & mask, n = 0; n < T->nbuckets; i = (i + 1) & mask, n++) {
        uint32_t v = T->bucket[i];
        const omc__ent* e;
        if (v == 0) return OMC__NIL;
        if (v == OMC__NIL) continue;
        e = &T->ent[v - 1];
        if (e->state == OMC__ENT_LIVE && e->hash == hash && e->qlen == qlen && memcmp(e->qkey, qkey, qlen) == 0) return v - 1;
    }
    return OMC__NIL;
}

/* Rebuild the index at nbuckets (a power of two) from the LIVE entries of the used list. */
OMC__PRIVATE omc_result omc__etab_reindex(omc__etab* T, uint32_t nbuckets) {
    uint32_t* b = nbuckets == T->nbuckets ? T->bucket : (uint32_t*)omc__calloc(&T->hooks, sizeof(uint32_t) * nbuckets);
    uint32_t i;
    if (!b) return OMC_ERR_NO_MEMORY;
    if (b == T->bucket) memset(b, 0, sizeof(uint32_t) * nbuckets);
    else omc__free(&T->hooks, T->bucket);
    T->bucket = b;
    T->nbuckets = nbuckets;
    T->bucket_used = 0;
    for (i = T->used_head; i != OMC__NIL; i = T->ent[i].next)
        if (T->ent[i].state == OMC__ENT_LIVE) omc__bucket_insert(b, nbuckets, &T->bucket_used, i, T->ent[i].hash);
    return OMC_OK;
}

/* Grow the slab to cap entries (new ones on the free list) and the index with it. */
OMC__PRIVATE omc_result omc__etab_grow(omc__etab* T, uint32_t cap) {
    omc__ent* ne = (omc__ent*)omc__calloc(&T->hooks, sizeof(omc__ent) * cap);
    uint32_t i, nb = 16;
    if (!ne) return OMC_ERR_NO_MEMORY;
    while (nb < cap * 2) nb *= 2;
    if (T->cap) memcpy(ne, T->ent, sizeof(omc__ent) * T->cap);
    for (i = cap; i-- > T->cap;) { ne[i].prev = OMC__NIL; ne[i].next = T->free_head; T->free_head = i; }
    omc__free(&T->hooks, T->ent);
    T->ent = ne;
    T->cap = cap;
    return nb > T->nbuckets ? omc__etab_reindex(T, nb) : OMC_OK;
}

/* initial entries now, growing (doubling) up to max (0 = OMC__ETAB_MAX; max = initial: fixed). */
OMC__PRIVATE omc_result omc__etab_init(omc__etab* T, const omc_hooks* hooks, omc_alloc* alloc, uint32_t initial, uint32_t max) {
    memset(T, 0, sizeof(*T));
    T->hooks = *hooks;
    T->alloc = alloc;
    T->max = max ? max : OMC__ETAB_MAX;
    T->free_head = T->used_head = OMC__NIL;
    return omc__etab_grow(T, initial ? initial : 64);
}

OMC__PRIVATE void omc__etab_uninit(omc__etab* T) {
    omc__free(&T->hooks, T->ent);
    omc__free(&T->hooks, T->bucket);
    T->ent = NULL;
    T->bucket = NULL;
    T->cap = T->nbuckets = 0;
}

/* A new LIVE entry for qkey with the next generation: OMC_ERR_EXISTS if the key is LIVE,
   OMC_ERR_POOL_FULL if max entries are in flight. The caller fills range, size, flags,
   readers_left and expires. */
OMC__PRIVATE omc_result omc__etab_add(omc__etab* T, const char* qkey, uint32_t qlen, uint64_t hash, uint32_t* slot) {
    omc__ent* e;
    uint32_t i;
    if (omc__etab_find(T, qkey, qlen, hash) != OMC__NIL) return OMC_ERR_EXISTS;
    if (T->free_head == OMC__NIL) {
        omc_result r;
        if (T->cap >= T->max) return OMC_ERR_POOL_FULL;
        r = omc__etab_grow(T, T->cap > T->max / 2 ? T->max : T->cap * 2);
        if (r != OMC_OK) return r;
    }
    if ((T->bucket_used + 1) * 4 > T->nbuckets * 3) omc__etab_reindex(T, T->nbuckets);     /* tombstones */
    i = T->free_head;
    e = &T->ent[i];
    T->free_head = e->next;
    memset(e, 0, offsetof(omc__ent, qkey));
    if (++T->next_gen == 0) T->next_gen = 1;
    e->gen = T->next_gen;
    e->state = OMC__ENT_LIVE;
    e->hash = hash;
    e->qlen = qlen;
    memcpy(e->qkey, qkey, qlen);
    e->prev = OMC__NIL;
    e->next = T->used_head;
    if (T->used_head != OMC__NIL) T->ent[T->used_head].prev = i;
    T->used_head = i;
    omc__bucket_insert(T->bucket, T->nbuckets, &T->bucket_used, i, hash);
    T->live++;
    *slot = i;
    return OMC_OK;
}

/* Out of the index: no new reader finds it, the key may be put again. */
OMC__PRIVATE void omc__etab_unindex(omc__etab* T, uint32_t slot) {
    omc__ent* e = &T->ent[slot];
    if (e->state != OMC__ENT_LIVE) return;
    omc__bucket_remove(T->bucket, T->nbuckets, slot, e->hash);
    e->state = OMC__ENT_DRAINING;
    T->live--;
}

/* Back to the free list; the range goes back to the allocator unless keep_range. */
OMC__PRIVATE void omc__etab_drop(omc__etab* T, uint32_t slot, int keep_range) {
    omc__ent* e = &T->ent[slot];
    if (e->state == OMC__ENT_FREE) return;
    omc__etab_unindex(T, slot);
    if (!keep_range && T->alloc) omc_alloc_free(T->alloc, e->range);
    if (e->prev != OMC__NIL) T->ent[e->prev].next = e->next;
    else T->used_head = e->next;
    if (e->next != OMC__NIL) T->ent[e->next].prev = e->prev;
    e->state = OMC__ENT_FREE;
    e->gen = 0;
    e->prev = OMC__NIL;
    e->next = T->free_head;
    T->free_head = slot;
}

/* Retire: out of the index now, freed when no hold remains. */
OMC__PRIVATE void omc__etab_retire(omc__etab* T, uint32_t slot) {
    omc__etab_unindex(T, slot);
    if (T->ent[slot].holds == 0) omc__etab_drop(T, slot, 0);
}

/* A hold ends; a retired entry whose last hold this was is freed. */
OMC__PRIVATE void omc__etab_unhold(omc__etab* T, uint32_t slot) {
    omc__ent* e = &T->ent[slot];
    if (e->holds) e->holds--;
    if (e->state != OMC__ENT_LIVE && e->holds == 0) omc__etab_drop(T, slot, 0);
}

/* Retire every LIVE entry whose TTL has passed: one walk of the used list. what names the
   holders in the log line ("views held", "pushes in flight"). Returns how many. */
OMC__PRIVATE uint64_t omc__etab_sweep(omc__etab* T, omc_time_ns now, const omc_hooks* log, const char* what) {
    uint32_t i, next;
    uint64_t n = 0;
    for (i = T->used_head; i != OMC__NIL; i = next) {
        omc__ent* e = &T->ent[i];
        next = e->next;
        if (e->state != OMC__ENT_LIVE || !e->expires || now < e->expires) continue;
        OMC__LOG(log, OMC_LOG_INFO, OMC_LOGITEM_CONN_TTL_RECLAIM, "TTL reclaimed entry %llu (%llu bytes, %u readers left, %u %s)",
                 (unsigned long long)omc__etab_id(T, i), (unsigned long long)e->size, e->readers_left, e->holds, what);
        omc__etab_retire(T, i);
        n++;
    }
    return n;
}

/* Retire every LIVE entry (close). */
OMC__PRIVATE void omc__etab_retire_all(omc__etab* T) {
    uint32_t i, next;
    for (i = T->used_head; i != OMC__NIL; i = next) {
        next = T->ent[i].next;
        if (T->ent[i].state == OMC__ENT_LIVE) omc__etab_retire(T, i);
    }
}

/* ---- the payload-staging opening every owner's put shares ---- */

/* Where a put's bytes go: a zero-copy buffer must be a live range of this pool (and not one of
   another connector's views); a copy-path payload gets a new range (get_range may reclaim
   first) and its bytes are copied to base + offset. On error nothing is held. */
typedef omc_result (*omc__range_fn)(void* user, uint64_t size, omc_range* out);

OMC__PRIVATE omc_result omc__stage_payload(omc_pool* pool, uint8_t* base, const omc_payload* p, omc__range_fn get_range, void* user,
                                           omc_range* range, uint64_t* size) {
    omc_result r;
    if (p->buffer) {
        if (p->buffer->pool != pool || (p->buffer->release_fn && p->buffer->release_fn != omc__conn_buffer_release)) return OMC_ERR_INVALID_ARG;
        r = omc_alloc_check(pool->alloc, p->buffer->range);
        if (r != OMC_OK) return r;
        *range = p->buffer->range;
        *size = p->size ? p->size : p->buffer->size;
        return OMC_OK;
    }
    *size = p->size;
    r = get_range ? get_range(user, p->size ? p->size : 1, range) : omc_alloc_alloc(pool->alloc, p->size ? p->size : 1, range);
    if (r != OMC_OK) return r;
    if (p->size) memcpy(base + range->offset, p->data, (size_t)p->size);
    return OMC_OK;
}

/* The put failed after staging: a copied range goes back, a zero-copy buffer stays the caller's. */
OMC__PRIVATE void omc__unstage_payload(omc_pool* pool, const omc_payload* p, omc_range range) {
    if (!p->buffer) omc_alloc_free(pool->alloc, range);
}

/* The put succeeded: a zero-copy buffer now belongs to the entry. */
OMC__PRIVATE void omc__stage_done(const omc_payload* p) {
    if (!p->buffer) return;
    if (p->buffer->release_fn == omc__conn_buffer_release) omc__conn_unref((omc_conn*)p->buffer->owner);   /* inside a call: never the last */
    memset(p->buffer, 0, sizeof(*p->buffer));
}

/* A TTL in ms (0 = the connector's default, < 0 = none) as an absolute expiry (0 = never). */
OMC__PRIVATE omc_time_ns omc__expiry(int64_t ttl_ms, int64_t default_ms, omc_time_ns now) {
    int64_t ttl = ttl_ms ? ttl_ms : default_ms;
    if (ttl <= 0) return 0;
    return ttl > (INT64_MAX - now) / 1000000LL ? INT64_MAX : now + ttl * 1000000LL;
}

/* Call sink for every LIVE key, newest first; a result other than OMC_OK stops the walk. */
OMC__PRIVATE omc_result omc__etab_list(const omc__etab* T, omc__key_sink sink, void* user) {
    uint32_t i;
    omc_result r = OMC_OK;
    for (i = T->used_head; r == OMC_OK && i != OMC__NIL; i = T->ent[i].next)
        if (T->ent[i].state == OMC__ENT_LIVE) r = sink(T->ent[i].qkey, T->ent[i].qlen, user);
    return r;
}

/* A LIST position: the slot to go on from, with 8 bits of its generation; never 0 (0 is "from
   the newest"). */
OMC__PRIVATE uint32_t omc__etab_cursor(const omc__etab* T, uint32_t slot) { return ((T->ent[slot].gen & 0xFFu) << 24) | (slot + 1u); }

/* omc__etab_list one page at a time, at a cost bounded by the page: from the position cursor
   (0: the newest entry), visiting at most max_visit entries. *next is the position of the first
   entry not given to sink (the one it refused, or the one after the visits ran out), 0 at the
   end of the list. A position whose entry is gone (freed, or its slot reused) is the end: keys
   put or taken between two pages may be missed. */
OMC__PRIVATE omc_result omc__etab_list_from(const omc__etab* T, uint32_t cursor, uint32_t max_visit, omc__key_sink sink, void* user, uint32_t* next) {
    uint32_t i = T->used_head, slot = (cursor & 0xFFFFFFu) - 1u;
    omc_result r = OMC_OK;
    *next = 0;
    if (cursor) {
        if (slot >= T->cap || T->ent[slot].state == OMC__ENT_FREE || (T->ent[slot].gen & 0xFFu) != cursor >> 24) return OMC_OK;
        i = slot;
    }
    for (; i != OMC__NIL; i = T->ent[i].next) {
        if (max_visit-- == 0) { *next = omc__etab_cursor(T, i); break; }
        if (T->ent[i].state == OMC__ENT_LIVE && (r = sink(T->ent[i].qkey, T->ent[i].qlen, user)) != OMC_OK) { *next = omc__etab_cursor(T, i); break; }
    }
    return r;
}

/* ---- the owner: an entry table, its pool and its lock (the same-process and remote
        connectors are both one of these plus their transport) ---- */

typedef struct omc__owner {
    omc_conn* conn;
    omc_pool* pool;
    pthread_mutex_t mu;                 /* the table */
    pthread_cond_t* changed;            /* broadcast when a key appears or goes (NULL: none) */
    omc__etab tab;
    int64_t default_ttl_ms;
    omc_time_ns next_sweep;
    const char* holders;                /* what a hold is, for the TTL log line */
    int mu_ok;
} omc__owner;

/* Builds the metadata of a new entry (under mu; nothing else may be touched). */
typedef omc_result (*omc__meta_fn)(omc__owner* O, uint32_t slot, void* user, omc_meta* meta_out);

OMC__PRIVATE omc_result omc__owner_init(omc__owner* O, omc_conn* conn, omc_pool* pool, int64_t default_ttl_ms, const char* holders) {
    omc_result r = omc__etab_init(&O->tab, &conn->hooks, pool->alloc, 64, 0);
    if (r != OMC_OK) return r;
    if (pthread_mutex_init(&O->mu, NULL) != 0) { omc__etab_uninit(&O->tab); return OMC_ERR_SYSTEM; }
    O->mu_ok = 1;
    O->conn = conn;
    O->pool = pool;
    O->default_ttl_ms = default_ttl_ms ? default_ttl_ms : OMNICONN_DEFAULT_TTL_MS;
    O->holders = holders;
    return OMC_OK;
}

OMC__PRIVATE void omc__owner_uninit(omc__owner* O) {
    omc__etab_uninit(&O->tab);
    if (O->mu_ok) pthread_mutex_destroy(&O->mu);
    O->mu_ok = 0;
}

OMC__PRIVATE void omc__owner_signal(omc__owner* O) { if (O->changed) pthread_cond_broadcast(O->changed); }

OMC__PRIVATE uint64_t omc__owner_sweep_locked(omc__owner* O, omc_time_ns now) {
    uint64_t n = omc__etab_sweep(&O->tab, now, &O->conn->hooks, O->holders);
    O->next_sweep = now + 100000000LL;  /* at most every 100 ms from the hot path */
    if (n) { omc__add(&O->conn->ttl_reclaims, n); omc__owner_signal(O); }
    return n;
}

OMC__PRIVATE void omc__owner_maybe_sweep(omc__owner* O) {
    omc_time_ns now = omc_now_ns();
    if (now >= O->next_sweep) omc__owner_sweep_locked(O, now);
}

OMC__PRIVATE uint64_t omc__owner_sweep(omc__owner* O) {
    uint64_t n;
    pthread_mutex_lock(&O->mu);
    n = omc__owner_sweep_locked(O, omc_now_ns());
    pthread_mutex_unlock(&O->mu);
    return n;
}

/* Stage the payload, add the entry, build its metadata with meta (under mu). */
OMC__PRIVATE omc_result omc__owner_put(omc__owner* O, const char* qkey, uint32_t qlen, const omc_payload* p, uint32_t flags,
                                       omc__meta_fn meta, void* user, omc_meta* meta_out) {
    omc_range range;
    uint64_t size;
    uint32_t slot;
    omc_result r = omc__stage_payload(O->pool, O->pool->base, p, NULL, NULL, &range, &size);
    if (r != OMC_OK) return r;
    pthread_mutex_lock(&O->mu);
    omc__owner_maybe_sweep(O);
    r = omc__etab_add(&O->tab, qkey, qlen, omc__hash64(qkey, qlen), &slot);
    if (r == OMC_OK) {
        omc__ent* e = &O->tab.ent[slot];
        e->range = range;
        e->size = size;
        e->flags = flags;
        e->readers_left = p->readers ? p->readers : 1;
        e->expires = omc__expiry(p->ttl_ms, O->default_ttl_ms, omc_now_ns());
        r = meta(O, slot, user, meta_out);
        if (r == OMC_OK) omc__owner_signal(O);
        else omc__etab_drop(&O->tab, slot, 1);
    }
    pthread_mutex_unlock(&O->mu);
    if (r != OMC_OK) { omc__unstage_payload(O->pool, p, range); return r; }
    omc__stage_done(p);
    return OMC_OK;
}

/* The LIVE entry of a key that a reader could still take (holds mu), or OMC__NIL. */
OMC__PRIVATE uint32_t omc__owner_find(omc__owner* O, const char* qkey, uint32_t qlen) {
    uint32_t slot = omc__etab_find(&O->tab, qkey, qlen, omc__hash64(qkey, qlen));
    return slot != OMC__NIL && O->tab.ent[slot].readers_left ? slot : OMC__NIL;
}

/* ---- the read protocol: take, commit, give back ----
   Every read of an owner's entry goes through three calls (the caller holds O->mu):
   - omc__owner_take: find the entry (by key, by id, or both), check it, and take a read: one of
     its readers_left, and a hold that pins its range (no TTL, cleanup or close frees it).
   - omc__owner_commit: the read counts. An entry with no read left and none in flight leaves
     the index (the key may be put again); its range goes when the last hold ends. keep_pin:
     the hold stays (a view handed to the caller) until omc__owner_unpin.
   - omc__owner_give_back: the read failed; the entry can be read again, the hold ends.
   The same-process get, the remote sender's side-channel PULL, its data-connection requests
   (PULL and CLAIM) all read this way. */

/* What omc__owner_take looks for. */
typedef struct omc__read_want {
    const char* qkey;                   /* the key's LIVE entry (NULL: by id alone) */
    uint32_t qlen;
    uint64_t id;                        /* that put (0: whichever the key has) */
    uint64_t capacity;                  /* the reader's room: a larger entry is OMC_ERR_TOO_LARGE */
    int exact;                          /* the size must be exactly capacity (else OMC_ERR_PROTOCOL) */
} omc__read_want;

/* A read taken: the entry and what it holds (valid while pinned). */
typedef struct omc__read {
    uint32_t slot;
    uint64_t id, size;
    omc_range range;
    uint32_t flags;
} omc__read;

/* OMC_ERR_NOT_FOUND (no such entry, or no read left), OMC_ERR_STALE (the id names an older put
   of the key), OMC_ERR_TOO_LARGE (*detail = its size), OMC_ERR_PROTOCOL (exact, size differs). */
OMC__PRIVATE omc_result omc__owner_take(omc__owner* O, const omc__read_want* w, omc__read* out, uint64_t* detail) {
    omc__etab* T = &O->tab;
    omc__ent* e;
    uint32_t slot = w->qkey ? omc__etab_find(T, w->qkey, w->qlen, omc__hash64(w->qkey, w->qlen)) : omc__etab_by_id(T, w->id);
    *detail = 0;
    e = slot != OMC__NIL ? &T->ent[slot] : NULL;
    if (!e || e->state != OMC__ENT_LIVE || e->readers_left == 0) return OMC_ERR_NOT_FOUND;
    if (w->id && omc__etab_id(T, slot) != w->id) return w->id < omc__etab_id(T, slot) ? OMC_ERR_STALE : OMC_ERR_NOT_FOUND;
    if (w->exact && e->size != w->capacity) return OMC_ERR_PROTOCOL;
    if (e->size > w->capacity) { *detail = e->size; return OMC_ERR_TOO_LARGE; }
    e->readers_left--;                  /* a concurrent reader cannot take the same read */
    e->taken++;
    e->holds++;                         /* and the bytes stay put until commit or give-back */
    out->slot = slot;
    out->id = omc__etab_id(T, slot);
    out->size = e->size;
    out->range = e->range;
    out->flags = e->flags;
    return OMC_OK;
}

OMC__PRIVATE void omc__owner_commit(omc__owner* O, uint32_t slot, int keep_pin) {
    omc__ent* e = &O->tab.ent[slot];
    if (e->taken) e->taken--;
    if (e->state == OMC__ENT_LIVE && e->readers_left == 0 && e->taken == 0) omc__etab_unindex(&O->tab, slot);  /* all read */
    if (!keep_pin) omc__etab_unhold(&O->tab, slot);     /* frees it if retired and no hold remains */
    omc__owner_signal(O);
}

OMC__PRIVATE void omc__owner_give_back(omc__owner* O, uint32_t slot) {
    omc__ent* e = &O->tab.ent[slot];
    if (e->taken) e->taken--;
    e->readers_left++;                  /* a failed read does not use up a reader */
    omc__etab_unhold(&O->tab, slot);
}

/* A pin kept past commit ends (a view released). */
OMC__PRIVATE void omc__owner_unpin(omc__owner* O, uint32_t slot) { omc__etab_unhold(&O->tab, slot); }

OMC__PRIVATE omc_result omc__owner_cleanup(omc__owner* O, const char* qkey, uint32_t qlen) {
    uint32_t slot;
    pthread_mutex_lock(&O->mu);
    slot = omc__etab_find(&O->tab, qkey, qlen, omc__hash64(qkey, qlen));
    if (slot != OMC__NIL) { omc__etab_retire(&O->tab, slot); omc__owner_signal(O); }
    pthread_mutex_unlock(&O->mu);
    return slot != OMC__NIL ? OMC_OK : OMC_ERR_NOT_FOUND;
}

OMC__PRIVATE omc_result omc__owner_exists(omc__owner* O, const char* qkey, uint32_t qlen) {
    uint32_t slot;
    pthread_mutex_lock(&O->mu);
    omc__owner_maybe_sweep(O);
    slot = omc__owner_find(O, qkey, qlen);
    pthread_mutex_unlock(&O->mu);
    return slot != OMC__NIL ? OMC_OK : OMC_ERR_NOT_FOUND;
}

/* list: keys with reads left only (what a get could still take). */
typedef struct omc__owner_list_ctx { omc__owner* O; omc__key_sink sink; void* user; } omc__owner_list_ctx;

static omc_result omc__owner_list_filter(const char* qkey, uint32_t qlen, void* user) {
    omc__owner_list_ctx* x = (omc__owner_list_ctx*)user;
    return omc__owner_find(x->O, qkey, qlen) != OMC__NIL ? x->sink(qkey, qlen, x->user) : OMC_OK;
}

OMC__PRIVATE omc_result omc__owner_list(omc__owner* O, omc__key_sink sink, void* user) {
    omc__owner_list_ctx x;
    omc_result r;
    x.O = O;
    x.sink = sink;
    x.user = user;
    pthread_mutex_lock(&O->mu);
    omc__owner_maybe_sweep(O);
    r = omc__etab_list(&O->tab, omc__owner_list_filter, &x);
    pthread_mutex_unlock(&O->mu);
    return r;
}

/* One page of omc__owner_list (omc__etab_list_from). */
OMC__PRIVATE omc_result omc__owner_list_page(omc__owner* O, uint32_t cursor, uint32_t max_visit, omc__key_sink sink, void* user, uint32_t* next) {
    omc__owner_list_ctx x;
    omc_result r;
    x.O = O;
    x.sink = sink;
    x.user = user;
    pthread_mutex_lock(&O->mu);
    omc__owner_maybe_sweep(O);
    r = omc__etab_list_from(&O->tab, cursor, max_visit, omc__owner_list_filter, &x, next);
    pthread_mutex_unlock(&O->mu);
    return r;
}

/* Puts not yet consumed (TTL applied first); health's live_entries and wait_consumed. */
OMC__PRIVATE uint64_t omc__owner_live(omc__owner* O) {
    uint64_t n;
    pthread_mutex_lock(&O->mu);
    omc__owner_maybe_sweep(O);
    n = O->tab.live;
    pthread_mutex_unlock(&O->mu);
    return n;
}

OMC__PRIVATE void omc__owner_health(omc__owner* O, omc_health* h) {
    omc_alloc_stats st;
    h->live_entries = omc__owner_live(O);
    omc_alloc_get_stats(O->pool->alloc, &st);
    h->pool_capacity = st.capacity;
    h->pool_in_use = st.bytes_in_use;
}

OMC__PRIVATE void omc__owner_close(omc__owner* O) {
    pthread_mutex_lock(&O->mu);
    omc__etab_retire_all(&O->tab);      /* holds still out keep their ranges until they end */
    omc__owner_signal(O);
    pthread_mutex_unlock(&O->mu);
}

/* ============================================================================================== */
/* [SECTION] Implementation: the same-process connector                                         */
/* ============================================================================================== */
/*
    An owner (the entry table above, its pool and lock) and one condition variable that wakes
    metadata-less getters when a key appears. A view handed out by get holds its entry: the
    range outlives a retire until the view is released.
*/

typedef struct omc__local {
    omc__owner own;
    pthread_cond_t cv;
} omc__local;

static omc_result omc__local_release(omc_buffer* b) {
    omc__local* L = (omc__local*)b->owner;
    omc_conn* c;
    uint32_t slot;
    omc_result r = OMC_OK;
    if (!L) return OMC_ERR_INVALID_ARG;
    c = L->own.conn;
    pthread_mutex_lock(&L->own.mu);
    slot = omc__etab_by_id(&L->own.tab, b->cookie[0]);
    if (slot == OMC__NIL || L->own.tab.ent[slot].holds == 0) r = OMC_ERR_STALE;     /* a copy of a handle already released */
    else omc__owner_unpin(&L->own, slot);
    pthread_mutex_unlock(&L->own.mu);
    if (r != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_ALLOC_BAD_FREE, "release of a view that is no longer held");
        return r;
    }
    omc__add(&c->releases, 1u);
    omc__conn_unref(c);     /* may destroy the connector: nothing after this line */
    return OMC_OK;
}

/* Metadata body (16 bytes): u64 entry id, u32 pool generation of the range, u32 0. */
static omc_result omc__local_meta(omc__owner* O, uint32_t slot, void* user, omc_meta* meta_out) {
    const omc__ent* e = &O->tab.ent[slot];
    uint8_t* body;
    omc_result r = omc__meta_begin(OMC_TRANSPORT_LOCAL, e->flags & OMC_BUFFER_FRAME ? OMC_META_FLAG_FRAME : 0, e->size, e->qkey, e->qlen,
                                   16, meta_out, &body);
    (void)user;
    if (r != OMC_OK) return r;
    omc__put_u64(body, omc__etab_id(&O->tab, slot));
    omc__put_u32(body + 8, e->range.generation);
    omc__put_u32(body + 12, 0);
    omc__meta_seal(meta_out);
    return OMC_OK;
}

static omc_result omc__local_put(omc_conn* c, const char* qkey, uint32_t qlen, const omc_payload* p, omc_meta* meta_out) {
    omc__local* L = (omc__local*)c->impl;
    uint32_t flags = (p->flags & OMC_PAYLOAD_FRAME) ? OMC_BUFFER_FRAME : 0;
    if (p->readers > 1) flags |= OMC_BUFFER_READONLY;
    return omc__owner_put(&L->own, qkey, qlen, p, flags, omc__local_meta, NULL, meta_out);
}

static omc_result omc__local_get(omc_conn* c, const char* qkey, uint32_t qlen, const omc_meta_info* meta,
                                 omc_time_ns deadline, uint64_t max_size, omc_buffer* out) {
    omc__local* L = (omc__local*)c->impl;
    omc__read_want w;
    omc__read rd;
    uint64_t detail = 0;
    omc_result r;
    memset(&w, 0, sizeof(w));
    w.qkey = qkey;
    w.qlen = qlen;
    w.capacity = max_size ? max_size : UINT64_MAX;
    if (meta) {
        if (meta->body_len != 16) return OMC_ERR_MALFORMED;
        w.id = omc__get_u64(meta->body);
    }
    pthread_mutex_lock(&L->own.mu);
    for (;;) {
        if (omc__load(&c->closed)) { r = OMC_ERR_CLOSED; break; }
        omc__owner_maybe_sweep(&L->own);
        r = omc__owner_take(&L->own, &w, &rd, &detail);
        /* with metadata the put already happened: absent means consumed, cleaned up or expired */
        if (r != OMC_ERR_NOT_FOUND || meta) break;
        if (deadline != OMC_WAIT_FOREVER && omc_now_ns() >= deadline) { r = OMC_ERR_TIMEOUT; break; }
        omc__cond_wait_until(&L->cv, &L->own.mu, deadline);
    }
    if (r == OMC_ERR_TOO_LARGE) out->size = detail;
    if (r == OMC_OK) {
        out->data = L->own.pool->base + rd.range.offset;
        out->size = rd.size;
        out->pool = L->own.pool;
        out->range = rd.range;
        out->flags = rd.flags;
        out->release_fn = omc__local_release;
        out->owner = L;
        out->cookie[0] = rd.id;
        omc__owner_commit(&L->own, rd.slot, 1);    /* the view keeps the pin until it is released */
        omc__conn_ref(c);
    }
    pthread_mutex_unlock(&L->own.mu);
    return r;
}

static omc_result omc__local_alloc(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    return omc__conn_pool_buffer(c, ((omc__local*)c->impl)->own.pool, size, deadline, out);
}
static omc_result omc__local_cleanup(omc_conn* c, const char* qkey, uint32_t qlen) {
    return omc__owner_cleanup(&((omc__local*)c->impl)->own, qkey, qlen);
}
static void omc__local_health(omc_conn* c, omc_health* h) { omc__owner_health(&((omc__local*)c->impl)->own, h); }
static uint64_t omc__local_sweep(omc_conn* c) { return omc__owner_sweep(&((omc__local*)c->impl)->own); }
static void omc__local_close(omc_conn* c) { omc__owner_close(&((omc__local*)c->impl)->own); }
/* A get waiting for a key sleeps on L->cv: wake it to see closed. */
static void omc__local_wake(omc_conn* c) {
    omc__local* L = (omc__local*)c->impl;
    pthread_mutex_lock(&L->own.mu);
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->own.mu);
}
/* In a child after fork(): the pool is private anonymous memory: unmap this process's copy. */
static void omc__local_forked(omc_conn* c) { omc__pool_unmap_copy(((omc__local*)c->impl)->own.pool); }
static omc_result omc__local_exists(omc_conn* c, const char* qkey, uint32_t qlen) {
    return omc__owner_exists(&((omc__local*)c->impl)->own, qkey, qlen);
}
static omc_result omc__local_list(omc_conn* c, omc__key_sink sink, void* user) {
    return omc__owner_list(&((omc__local*)c->impl)->own, sink, user);
}
static uint64_t omc__local_pending(omc_conn* c) { return omc__owner_live(&((omc__local*)c->impl)->own); }

static void omc__local_destroy(omc_conn* c) {
    omc__local* L = (omc__local*)c->impl;
    omc__owner_uninit(&L->own);
    omc_pool_destroy(L->own.pool);
    pthread_cond_destroy(&L->cv);
    omc__free(&c->hooks, L);
}

static const omc__conn_vtable omc__local_vtable = {
    "local", OMC_TRANSPORT_LOCAL, omc__local_put, omc__local_get, omc__local_alloc, omc__local_cleanup,
    omc__local_health, omc__local_sweep, omc__local_close, omc__local_destroy,
    omc__local_exists, omc__local_list, omc__local_pending, "omc_local_desc"
};

OMNICONN_API omc_result omc_local_create(const omc_local_desc* desc, omc_conn** out) {
    omc_local_desc d;
    omc_hooks hooks;
    omc_pool_desc pd;
    omc_pool* pool = NULL;
    omc__local* L;
    omc_conn* c = NULL;
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
    r = omc_pool_create(&pd, &pool);
    if (r == OMC_OK) r = omc__conn_create(&hooks, &omc__local_vtable, d.role, &c);
    if (r == OMC_OK) { c->wake = omc__local_wake; c->forked = omc__local_forked; }
    if (r == OMC_OK) r = omc__owner_init(&L->own, c, pool, d.default_ttl_ms, "views held");
    if (r == OMC_OK && omc__cond_init_monotonic(&L->cv) != 0) { omc__owner_uninit(&L->own); r = OMC_ERR_SYSTEM; }
    if (r != OMC_OK) {
        omc__conn_discard(c, &hooks);
        if (pool) omc_pool_destroy(pool);
        omc__free(&hooks, L);
        return r;
    }
    L->own.changed = &L->cv;
    c->impl = L;
    *out = c;
    return OMC_OK;
}


/* ============================================================================================== */
/* [SECTION] Implementation: features                                                            */
/* ============================================================================================== */

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
        case OMC_FEATURE_ZMQ:
        case OMC_FEATURE_SHM:
        case OMC_FEATURE_RDMA:
            /* the part or companion that implements it knows its own rules (library, directory,
               device): Part B of this file registers the ZMQ probe, the companions theirs */
            if (!omc__probes[f]) return omc__unavailable(why, n, f == OMC_FEATURE_SHM
                                                         ? "omniconn_shm.h is not part of this program (include it in the implementation file)"
                                                         : f == OMC_FEATURE_RDMA
                                                         ? "omniconn_rdma.h is not part of this program (include it in the implementation file)"
                                                         : "the remote connector (Part B of omniconn.h) is not part of this program");
            return omc__probes[f](why, n);
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
/* ########################################################################################## */
/* ##  END OF PART A                                                                         ## */
/* ########################################################################################## */

/*
################################################################################################
##  PART B  THE REMOTE CONNECTOR: ZMQ SIDE CHANNEL + TCP DATA PLANE                           ##
##  its own manual, declarations and implementation; it uses Part A only through the public   ##
##  API and the companion interface (checked like a companion by tests/check_companions.sh)   ##
################################################################################################

    Compiled unless OMNICONN_NO_ZMQ. Nothing to link: libzmq.so.5 is loaded at run time, the
    first time a remote connector is made (OMNICONN_NO_RUNTIME_LINKING: link -lzmq instead).

    PART B CONTENTS: B1 QUICK START | B2 THE SIDE CHANNEL AND THE TCP DATA PLANE |
    B3 CONFIGURATION | B4 WIRE FORMATS | then its declarations and its implementation

================================================================================================
B1 QUICK START
================================================================================================

    A sender process (the stage that produces) and a receiver process (the stage that consumes):

        // sender
        omc_tcp_desc sd = {0};                     // C++: omc_tcp_desc sd = {};
        sd.role = OMC_ROLE_SENDER;
        sd.host = "auto";                          // the address receivers reach; NULL = 127.0.0.1
        sd.port = 5555;                            // side channel; 0 = ephemeral (omc_tcp_endpoint)
        omc_conn* tx = NULL;
        omc_result r = omc_tcp_create(&sd, &tx);   // OMC_ERR_UNAVAILABLE: no libzmq (the log says why)
        omc_payload p = {0};
        p.data = kv_cache; p.size = nbytes;
        omc_meta meta = {0};
        r = omc_conn_put(tx, "prefill", "decode", "req-7", &p, &meta);
        // forward meta.data / meta.size to the receiver through your control plane

        // receiver
        omc_tcp_desc rd = {0};
        rd.role = OMC_ROLE_RECEIVER;
        omc_conn* rx = NULL;
        r = omc_tcp_create(&rd, &rx);
        omc_buffer buf = {0};
        r = omc_conn_get(rx, "prefill", "decode", "req-7", meta_bytes, meta_size,
                         omc_deadline_after_ms(5000), &buf);
        use(buf.data, buf.size);
        omc_buffer_release(&buf);

    Without metadata: omc_tcp_add_sender(rx, "prefill-0", host, 5555) once, then get with
    meta = NULL. Everything else (fan-out, TTL, cleanup, health, batches) is Part A's contract.

================================================================================================
B2 THE SIDE CHANNEL AND THE TCP DATA PLANE
================================================================================================

    The remote connector (omc_tcp_create): ZMQ side channel + TCP data plane
       Stages on different hosts. A sender runs a listener on a ZMQ ROUTER socket (the side
       channel) and a TCP data port; put() copies the payload into the sender's pool (or takes a
       buffer from omc_conn_alloc) and returns metadata naming the sender's host, port and
       incarnation. A receiver's get() allocates a destination in its own pool, asks the sender
       for the entry with a request on its TCP data connection (from the calling thread: no
       libzmq thread and no side-channel message per get), reads the bytes straight into that
       destination, and returns once every byte is in place and the sender has recorded the
       read (the TCP trailer says so; other data planes PULL on the side channel and wait for
       DONE).

           sender (omc_tcp_create, role SENDER)         receiver (omc_tcp_create, role RECEIVER)
           put(key) -> pool, metadata  ---- your control plane ---->  get(key, metadata)
                                       <--- HELLO (once per channel) ---
                                       ---- HELLO: incarnation, TCP data port, ticket ---->
                                       <=== TCP: connect, nonce, data hello (ticket proof), once per channel
                                       <=== TCP: request (entry, capacity) ====  calling thread
             listener (worker if big)  ==== TCP: header + payload ====>  recv() into pool buffer
                                       <=== TCP: receipt ==============  every byte is in place
             record the read           ==== TCP: trailer ============>  return the buffer

       - Small payloads ride inside the metadata: a put of at most inline_threshold bytes
         (16 KiB by default, at most OMC_TCP_MAX_INLINE; $OMNICONN_TCP_INLINE_THRESHOLD when the
         desc leaves it 0; 0 or disable_inline = off) copies them into the metadata as well. A
         get with that metadata takes the bytes from it and sends one 64-byte CLAIM on its data
         connection, which records the read: one round trip, no payload on the wire. The sender
         keeps its pool copy and the entry as for any put, so everything else is unchanged:
         metadata-less gets, exists and list find it, fan-out counts every reader, a get after
         cleanup, TTL or the last reader is OMC_ERR_NOT_FOUND although the bytes are in hand, and
         wait_consumed waits for the claims. Such a payload is only as confidential as your
         metadata's path: a sender with CURVE inlines nothing unless inline_with_curve is set.

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
         by vLLM-Omni's rule, 30 s + 5 s per 100 MiB, when the receiver waits forever; the
         receiver applies the same rule to its own wait then), never longer than
         OMNICONN_TCP_MAX_PUSH_MS, and aborts a push whose receiver takes no byte for
         OMNICONN_TCP_STALL_MS or reads slower than OMNICONN_TCP_MIN_RATE. A sender runs one push at a time per side-channel session (a
         channel has at most one transfer in flight), so no receiver holds more than one push
         worker; an ABORT drops a push still waiting for a worker at once. When a get fails at its deadline,
         the code says why: OMC_ERR_TIMEOUT (the senders answered, the key never came, or the
         push did not finish; or a sender was only slow: a deadline too short for a busy host
         is no broken link), OMC_ERR_CONNECTION (no sender answered and the link failed:
         refused, dropped, or our HELLO ignored for 500 ms; or a connection broke: a get whose
         transfer broke - the sender died - says so at once, not at its deadline), OMC_ERR_AUTH (the CURVE handshake failed; without CURVE a handshake that
         fails is a connection error).
       - Restarts: every message carries its author's incarnation (omc_incarnation()). Metadata
         from a sender process that has since restarted gets OMC_ERR_PEER_RESTARTED; cached
         connections to the old process are dropped; new puts work at once.
       - health(): the generic counters, plus omc_tcp_health() (handshake and auth failures,
         garbage received, pushes in flight) and omc_tcp_peer_health() per sender (the last
         error, timeouts, restarts, auth failures).
       - Who may talk to a sender: optional CURVE (libzmq's Curve25519 authentication and
         encryption of the side channel), off by default. Give the sender a keypair
         (curve.secret_key) and the receivers its public key (curve.server_key); a receiver
         without it is refused and the sender counts it (omc_tcp_health().auth_failures). The
         receiver's get fails at its deadline with OMC_ERR_AUTH if it has CURVE configured (a
         wrong key), with OMC_ERR_CONNECTION if not (it cannot tell a CURVE sender that hangs up
         on it from a dying one; its log says which key would help). curve.allowed_clients
         restricts senders to known receiver keys (a ZAP handler). The TCP data port admits only connections that
         prove a ticket the sender handed out inside its HELLO answer (encrypted with CURVE on):
         the data hello carries an HMAC over a nonce the port sent on that connection, never the
         ticket's secret, so a data hello seen on the wire opens nothing. A ticket is bound to its
         session (and with CURVE to the session's public key) and dies with it; a connection serves
         only PULLs of the session that got the ticket; anything else is closed at its first bytes
         and never counts against a limit. A request on a data
         connection is served for the session that registered it, exactly as a PULL from that
         session would be; it names the entry by id (no key travels on the data connection). The
         TCP data plane is not encrypted: CURVE decides who may ask for data, not who can read a
         wire. Use a private network or IPsec for that (or pull_on_side_channel, which keeps
         requests inside CURVE - the payload still is not).
       - Helpers from vLLM-Omni's orchestration: omc_port_compute() (the port-offset scheme),
         omc_port_check() (collisions in a set of edges), omc_detect_host() ("auto").

       The data plane is pluggable: the side channel, entries, fan-out, TTL and deadlines are
       shared; a data plane only moves bytes (see "[SECTION] Implementation: the data-plane
       interface"). The TCP data plane is built in; omniconn_rdma.h adds an RDMA one.

    Its tunables are in B3 CONFIGURATION, its messages in B4 WIRE FORMATS.

================================================================================================
B3 CONFIGURATION
================================================================================================

    macro                        default     where        meaning
    ---------------------------  ----------  -----------  ----------------------------------------
    OMNICONN_ZMQ_LIBRARY         "libzmq.so.5" impl file  the library dlopen()ed for the side channel
                                                          (test hook: $OMNICONN_ZMQ_LIB overrides it)
    OMNICONN_TCP_POOL_SIZE       1 GiB       impl file    remote connector pool when pool_size is 0
                                                          (address space; pages come on first touch)
    OMNICONN_TCP_WORKERS         2           impl file    sender push threads when workers is 0
    OMNICONN_TCP_MAX_WAIT_MS     1000        impl file    longest a sender holds a QUERY for an
                                                          absent key (long poll)
    OMNICONN_TCP_CHUNK           4 MiB       impl file    largest single send()/recv() of payload
    OMNICONN_TCP_BATCH_LANES     8           impl file    channels omc_conn_get_batch uses at most for
                                                          the gets to one sender (one, plus one per 4
                                                          pulled payloads), each with requests ahead
    OMNICONN_TCP_INLINE          256 KiB     impl file    bytes of a push the listener writes itself
                                                          (without blocking) before a worker takes over
                                                          (a payload written whole: the listener also
                                                          waits for its receipt; no worker at all)
    OMNICONN_TCP_INLINE_THRESHOLD 16 KiB     impl file    payloads of at most this many bytes travel
                                                          inside the metadata too (omc_tcp_desc.
                                                          inline_threshold, the environment variable
                                                          below; at most OMC_TCP_MAX_INLINE, 64 KiB)
    OMNICONN_TCP_IDLE_MS         120000      impl file    a sender closes a TCP data connection idle
                                                          this long (a receiver re-opens its channel)
    OMNICONN_TCP_MAX_PUSH_MS     600000      impl file    the longest budget a sender grants a push,
                                                          whatever the PULL asks for
    OMNICONN_TCP_STALL_MS        5000        impl file    a push whose receiver takes no byte this
                                                          long is aborted (its entry unpinned)
    OMNICONN_TCP_MIN_RATE        1 MiB/s     impl file    a push that moves less than this in any
                                                          2 s (after its first) is aborted, so slow
                                                          readers cannot hold the push workers; 0 =
                                                          no minimum

    environment variable         default     meaning
    ---------------------------  ----------  ---------------------------------------------------
    OMNICONN_TCP_INLINE_THRESHOLD
                                 16 KiB      a remote sender's inline threshold in bytes when its
                                             desc leaves it 0 (0 = off; anything but a number up to
                                             65536 is ignored with a WARN); read at omc_tcp_create

================================================================================================
B4 WIRE FORMATS (all integers little-endian; docs/wire.md walks through them with examples)
================================================================================================

    Side channel (ZMQ), protocol version 1. A receiver's DEALER socket talks to a sender's
    ROUTER socket. Every message is one ZMQ frame: a 32-byte header and a body whose layout
    depends on the type. Replies echo the request's transfer id and sequence number; a receiver
    drops replies that match neither (late answers to an abandoned request).
      header, 32 bytes:
        0   u32  magic 0x5A434D4F ("OMCZ")
        4   u8   protocol version (1)
        5   u8   type: 1 HELLO, 2 QUERY, 3 QUERY_REPLY, 4 NOT_FOUND, 5 PULL, 6 DONE, 7 ERROR, 8 ABORT,
                 9 LIST, 10 LIST_REPLY
        6   u16  flags (0)
        8   u64  transfer id (chosen by the receiver, unique per get; 0 only in an ERROR that
                 answers a message too broken to name one)
        16  u64  incarnation of the message's author (random per process start, never 0)
        24  u32  sequence number of the request on its channel: per channel, the first request
                 (the HELLO) is 1, +1 per request, after 0xFFFFFFFF it wraps to 1 (never 0); a
                 sender echoes it and checks nothing about it
        28  u32  body length (the frame is exactly 32 + body length bytes, at most 8192)
      HELLO body (receiver -> sender; the sender answers with its own HELLO), 8 + records.
      A receiver's HELLO (sequence 1, the QUERY of a metadata-less get pipelined right behind
      it) has capability bit 0 set, no type-1 record, and a type-2 record only with an RDMA
      plane:
        0   u32  capabilities: bit 0 TCP data plane, bit 1 RDMA data plane, bit 2 (sender) it
                 takes requests on its TCP data connections (below); a peer ignores bits it
                 does not know
        4   u16  endpoint record count (<= 32)
        6   u16  reserved (0)
        8   records, back to back, filling the body exactly: u16 type, u16 value length, value
            type 1, TCP data endpoint (sender only): u16 port (non-zero), u16 reserved (0),
                    host text (0..255 bytes, no NUL; empty = the host the side channel reached)
            type 2, RDMA endpoint: defined by omniconn_rdma.h
            type 0x101, data-connection ticket (sender only, in the answer to a HELLO unless
                    the sender's ticket table has no room: then a WARN and no record), 48
                    bytes: u8[16] ticket id (names the ticket; not a secret), u8[32] ticket
                    secret (random; it never travels anywhere else: a data hello proves it).
                    One ticket per side-channel session (ZMQ routing id; with CURVE, bound to
                    the session's public key too); a repeated HELLO from a routing id gets a
                    new ticket and the old one registers nothing more; the session's TCP data
                    connections must prove it; it ends with the session's side-channel
                    connection (the listener's socket monitor reports the disconnect)
            type 0x100, what a sender of data hello version 2 sent instead (16 bytes, shown in
                    clear in every data hello): no longer sent; a receiver that sees it and no
                    0x101 logs that the sender must be upgraded
            a record type below 0x100 is a data plane's kind; any type a peer does not know is
            skipped: a new transport adds a record type, not a protocol version
      QUERY body (receiver -> sender), 8 + key length bytes:
        0   u32  wait in ms (hold the query while the key is absent, at most this long and at
                 most OMNICONN_TCP_MAX_WAIT_MS; 0 = answer now). A sender holds at most 1024
                 queries at once; a further one gets NOT_FOUND at once whatever its wait
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
        24  u32  time budget in ms (the sender abandons the push after it; 0 = vLLM-Omni's rule;
                 a sender grants at most OMNICONN_TCP_MAX_PUSH_MS whatever is asked)
        28  u16  key length (1..255)
        30  u8   data plane kind: 1 TCP, 2 RDMA
        31  u8   reserved (0)
        32  u16  descriptor length (0..1024)
        34  u16  reserved (0)
        36  the qualified key, then the data plane's descriptor (TCP: u64 connection token)
      DONE body (sender -> receiver, only once the data plane has moved every byte and the
        read is recorded; not sent after a TCP push, whose trailer says the same), 8 bytes:
        0   u64  bytes moved (= the payload size)
      ERROR body (sender -> receiver; a sender answers an ERROR it receives with ERROR
        OMC_ERR_PROTOCOL and counts it in protocol_errors), 16 + text length bytes:
        0   i32  omc_result code (negative)
        4   u16  text length (0..255)
        6   u16  reserved (0)
        8   u64  detail (OMC_ERR_TOO_LARGE: the payload size; otherwise 0)
        16  text (not NUL-terminated)
        A sender answers a PULL with OMC_ERR_NOT_FOUND, OMC_ERR_STALE, OMC_ERR_TOO_LARGE,
        OMC_ERR_PEER_RESTARTED or OMC_ERR_UNAVAILABLE only before it has moved any byte; before
        any byte moves a PULL may also get OMC_ERR_NO_MEMORY (the sender's) or a validation
        ERROR (OMC_ERR_MALFORMED, OMC_ERR_VERSION, OMC_ERR_PROTOCOL). When a push fails (its
        data connection broke or is not this session's, the budget or the stall timeout
        passed) the sender answers ERROR with the push's code (OMC_ERR_CONNECTION,
        OMC_ERR_TIMEOUT, ...), and the read is not used up.
        A replayed PULL (same key, another transfer id) is served again and uses another
        reader: inside an authenticated session that is the receiver asking twice; with CURVE
        nobody else can replay one (messages are encrypted and ordered).
      ABORT: empty body (the receiver gave up this transfer id: a held query is dropped without
        an answer, a push in progress stops at its next chunk)
      LIST body (receiver -> sender; omc_conn_list), 8 bytes:
        0   u32  cursor: 0 = from the start; else the cursor of the previous LIST_REPLY,
                 an opaque position the sender chose (a page costs the sender the same
                 wherever it starts)
        4   u32  reserved (0)
      LIST_REPLY body (sender -> receiver), 8 + records bytes (at most 8152):
        0   u32  next cursor (0 = this is the last page; else send LIST with it for more)
        4   u16  key count
        6   u16  reserved (0)
        8   key records, back to back, filling the body exactly: u16 key length (1..255),
            the qualified key. The keys are those a PULL could take now (a read still
            available), newest first; keys that come or go between two pages may be missed
            (a page may also hold no key and a next cursor: the sender looks at a bounded
            number of entries per page).
        A sender of protocol version 1 that predates LIST answers it with ERROR
        (OMC_ERR_PROTOCOL, "unknown type"): the receiver reports OMC_ERR_UNAVAILABLE.
      omc_conn_exists asks with a QUERY whose wait is 0 (QUERY_REPLY = live, NOT_FOUND = not).
      QUERY and LIST need no HELLO first (only a data connection needs the HELLO's ticket).
      A receiver may send its next message before the answer to the last (a new channel
      pipelines HELLO and QUERY); answers echo the transfer id and sequence number, and a held
      QUERY may be answered after later messages.
      Reserved fields must be zero and lengths must add up exactly. A sender answers anything
      else with ERROR (OMC_ERR_MALFORMED, OMC_ERR_VERSION or OMC_ERR_PROTOCOL) and carries on.

    TCP data plane: a receiver opens one connection per channel to the port in the sender's
    type-1 record; at most one transfer is in flight on a connection.
      nonce, sender -> receiver, 24 bytes, the first bytes on every accepted connection:
        0   u32  magic 0x4E434D4F ("OMCN")
        4   u16  data hello version the sender speaks (4)
        6   u16  reserved (0)
        8   u8[16] nonce (random, fresh per connection)
      hello, receiver -> sender, version 4, 72 bytes, after the nonce:
        0   u32  magic 0x54434D4F ("OMCT")
        4   u16  version (4)
        6   u16  reserved (0)
        8   u64  token (random, non-zero; PULL descriptors name the connection by it)
        16  u64  receiver incarnation
        24  u8[16] ticket id (record 0x101 of the sender's answer to this channel's HELLO)
        40  u8[32] proof: HMAC-SHA-256 (RFC 2104, FIPS 180-4) keyed with the 32-byte ticket
                 secret, over the 21 ASCII bytes "omniconn data hello 4", then the 16 nonce
                 bytes, then bytes 0..39 of this hello. The secret is never sent: a hello seen
                 on the wire proves nothing on another connection (another nonce), for another
                 token or for another ticket.
        Versions 1 (24 bytes, no ticket), 2 (40 bytes, the ticket in clear at byte 24) and 3
        (whose requests carried a CRC-32C of the key instead of the key proof) are refused:
        the ack carries OMC_ERR_VERSION and the sender logs a line naming the version it got
        and version 4. A receiver that gets a nonce frame of another version
        logs both versions and fails the get with OMC_ERR_VERSION.
      ack, sender -> receiver, 8 bytes: 0 u32 magic 0x41434D4F ("OMCA"), 4 i32 status (0 = OK,
        else an omc_result: the connection is closed after it). A hello that is not version 4
        gets OMC_ERR_MALFORMED or OMC_ERR_VERSION; a well-formed hello whose ticket id the
        sender did not hand out, whose session has ended, or whose proof does not match gets
        no ack at all: the connection is closed. A port scanner learns that this is an
        omniconn data port (the nonce frame says so) and nothing else. A ticket registers at most 16
        connections (then OMC_ERR_BUSY), a token at most once per ticket (then
        OMC_ERR_EXISTS); one address at most a quarter of the 4096 registrations, and when all
        are taken an idle connection of the address holding the most is closed to make room,
        else the new one gets OMC_ERR_BUSY.
      A sender keeps at most 64 connections waiting for their hello (a new one closes the
      oldest) for at most 5 s, closes a registered connection idle for OMNICONN_TCP_IDLE_MS
      (a refused request does not count as activity),
      and serves a PULL only on a connection registered with the ticket of the PULL's own
      side-channel session (otherwise: ERROR OMC_ERR_CONNECTION, nothing written).
      request, receiver -> sender, 64 bytes, on an idle connection of a sender whose HELLO has
      capability bit 2 (receivers send PULL on the side channel to other senders, and when
      omc_tcp_desc.pull_on_side_channel is set); the sender serves it for the session the
      connection was registered to, with the checks of a PULL:
        0   u32  magic 0x50434D4F ("OMCP")
        4   u8   op: 1 PULL (send the entry's bytes), 2 CLAIM (the receiver has the bytes from
                 inline metadata: record the read, send none)
        5   u8   reserved (0)
        6   u16  reserved (0)
        8   u64  transfer id (echoed in the header or status record)
        16  u64  entry id (from the metadata or a QUERY_REPLY; never 0)
        24  u64  expected sender incarnation (0 = any)
        32  u64  PULL: destination capacity; CLAIM: the payload size the metadata announced
                 (a different size than the entry's, or a CLAIM of an entry the sender did not
                 inline, is OMC_ERR_NOT_FOUND with detail 0, exactly what an id nobody holds
                 gets: the answers to requests never tell which entry ids exist)
        40  u32  PULL: time budget in ms, as in PULL; CLAIM: ignored (nothing moves)
        44  u32  reserved (0)
        48  u8[16] key proof: the first 16 bytes of HMAC-SHA-256 keyed with the 32-byte
                 secret of the connection's ticket, over the 22 ASCII bytes "omniconn request
                 key 4", then the entry id (u64, as at byte 16), then the qualified key the get
                 asks for. The sender recomputes it for the entry it holds and compares in
                 constant time; any mismatch (another key, another session's proof) is
                 OMC_ERR_NOT_FOUND with detail 0. The key never travels here, and without the
                 secret (sent only inside the session's HELLO answer) a guessed key cannot be
                 tested against the bytes on the wire.
      Anything else - a wrong magic (seen after 4 bytes), op or reserved field, entry id 0, a
      request not complete within 5 s - closes the connection (counted in protocol_errors).
      Requests may be pipelined: one sent before the previous one is answered waits in the
      socket and is read once that one is done (a CLAIM or refusal: its status written; a
      PULL: its receipt read, so the receipt must come first). One at a time, in order.
      omc_conn_get_batch does this: it sends the requests of up to 16 gets to one sender at
      once, holding those behind a PULL until that PULL's receipt goes, in the same write.
      The sender answers a PULL request with the header and payload below, a CLAIM or any
      refusal with a status record, 24 bytes (what the receiver reads in place of a header;
      nothing else follows it and the connection stays usable):
        0   u32  magic 0x53434D4F ("OMCS")
        4   i32  0 = the CLAIM is recorded; else the omc_result of the refusal (OMC_ERR_NOT_FOUND,
                 OMC_ERR_TOO_LARGE, OMC_ERR_PEER_RESTARTED, OMC_ERR_PROTOCOL, OMC_ERR_NO_MEMORY):
                 nothing moved, no read was used
        8   u64  transfer id
        16  u64  detail (OMC_ERR_TOO_LARGE: the payload size; otherwise 0)
      A request carries a proof of the key, not the key, so an older put of the key is
      OMC_ERR_NOT_FOUND here (the side channel's PULL can say OMC_ERR_STALE). A request whose receiver gives up is abandoned by
      closing the connection (no ABORT); the push then fails and gives the read back.
      per transfer, sender -> receiver: a 24-byte header and exactly size payload bytes; then
      receiver -> sender an 8-byte receipt; then sender -> receiver an 8-byte trailer:
        header:
        0   u32  magic 0x44434D4F ("OMCD")
        4   u32  reserved (0)
        8   u64  transfer id
        16  u64  payload size
        receipt (sent by the receiver once every payload byte is in its destination buffer;
        only on a connection opened with a version-2 hello):
        0   u32  magic 0x47434D4F ("OMCG"; the RDMA endpoint record has "OMCR")
        4   u32  reserved (0)
        trailer (written only after the receipt came and the sender recorded the read - the
        entry's reader is used up, a last reader's entry is gone - so it tells the receiver
        what DONE would). A receiver that dies before its receipt uses up nothing: the push
        fails (EOF, or OMNICONN_TCP_STALL_MS without the receipt) and the reader is given back.
        0   u32  magic 0x45434D4F ("OMCE")
        4   u32  reserved (0)
      The receiver checks the header (transfer id; size equal to what the metadata or the
      QUERY_REPLY announced and no larger than its destination) before it reads any payload,
      never reads more than that into the destination, and completes the get on a valid
      trailer (the sender sends no DONE for a TCP push; one that arrives anyway is checked). A
      connection on which anything went wrong is closed by both sides, never reused.

    TCP metadata body (the envelope's transport OMC_TRANSPORT_TCP), 16 + host length bytes,
    plus the payload size when inline (envelope flag bit 0):
        0   u64  entry id (never 0; (generation << 32) | slot of the sender's entry table, and
                 the generation grows with every put of that connector)
        8   u16  side-channel port
        10  u16  host length (1..255)
        12  u32  data-plane capabilities (as in HELLO)
        16  host text (as the sender advertises itself: an IPv4/IPv6 literal or a name)
        16+h inline only: the payload bytes, exactly the envelope's payload size of them, at
             most OMC_TCP_MAX_INLINE (64 KiB); a body whose length is not 16 + h (+ size when
             inline), or an inline size over that bound, is OMC_ERR_MALFORMED
*/

#if !defined(OMNICONN_REMOTE_H_INCLUDED)
#define OMNICONN_REMOTE_H_INCLUDED
#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================== */
/* [SECTION] The remote connector: ZMQ side channel and TCP data plane                           */
/* ============================================================================================== */
#if OMC__HAS_ZMQ
#define OMC_NET_CAP_TCP  0x1u       /* HELLO capabilities and metadata: the TCP data plane */
#define OMC_NET_CAP_RDMA 0x2u       /* the RDMA data plane (omniconn_rdma.h) */
#define OMC_NET_CAP_REQUESTS 0x4u   /* the sender takes pull requests on its TCP data connections */
#define OMC_TCP_HOST_MAX 256        /* host text, terminator included */
#define OMC_TCP_NAME_MAX 64         /* sender names, terminator included */
#define OMC_CURVE_KEY_LEN 40        /* a Z85-encoded Curve25519 key, without terminator */
#define OMC_TCP_MAX_INLINE ((uint64_t)64 << 10)  /* largest inline_threshold (bytes) */

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
    int pull_on_side_channel;   /* receiver: 1 = send every PULL on the side channel, as receivers
                                   before data-connection requests did (slower; see the manual) */
    uint64_t inline_threshold;  /* sender: payloads of at most this many bytes also travel inside
                                   the metadata; 0 = $OMNICONN_TCP_INLINE_THRESHOLD if set, else
                                   OMNICONN_TCP_INLINE_THRESHOLD (16 KiB); at most OMC_TCP_MAX_INLINE */
    int disable_inline;         /* sender: 1 = no payload travels inside the metadata */
    int inline_with_curve;      /* sender with CURVE: 1 = inline all the same (the bytes then travel
                                   wherever your metadata goes, outside CURVE); 0 = no inline */
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
    uint64_t inline_threshold;      /* sender: the resolved threshold (0 = no inline) */
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
   Thread safety: the connector is thread-safe (see omc_conn_*), and every omc_tcp_* call that
   takes it holds it while inside as omc_conn_* calls do: close or destroy from another thread
   wakes a blocked omc_tcp_query or omc_tcp_get_from (OMC_ERR_CLOSED) and waits for it to leave;
   on a closed connector they return OMC_ERR_CLOSED. */
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

/* ---- helpers vLLM-Omni's orchestration uses --------------------------------------------------- */

/* vLLM-Omni's port-offset scheme:
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
    int base;                   /* 0 = 50051 (vLLM-Omni's zmq_port default) */
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
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

/* ------------------------- stop here if you only need the API of Part B ------------------- */
#endif /* OMNICONN_REMOTE_H_INCLUDED */

#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_REMOTE_IMPL_INCLUDED)
#define OMNICONN_REMOTE_IMPL_INCLUDED

#if OMC__HAS_ZMQ
#ifndef OMNICONN_ZMQ_LIBRARY
    #define OMNICONN_ZMQ_LIBRARY "libzmq.so.5"
#endif
#include <dlfcn.h>

/* ============================================================================================== */
/* [SECTION] Implementation: loading libzmq                                                       */
/* ============================================================================================== */
/*
    One list names every libzmq function the side channel calls. From it come: the table of
    function pointers (omc__zmq), the loader (dlsym of each name from OMNICONN_ZMQ_LIBRARY, or the
    linked symbols with OMNICONN_NO_RUNTIME_LINKING), and one wrapper per function,
    omc__zmq_<name>(), so the code reads like plain libzmq (omc__zmq_send(s, buf, n, flags)).
    Columns: R/V (returns a value / void), return type, table member, symbol, parameters,
    arguments. Members drop the zmq_ prefix so that a program which includes <zmq.h> as well
    sees no clash. The library is opened the first time a remote connector (or a CURVE key
    pair) is made, never by a program that only uses the same-process or SHM connectors.
    Without OMNICONN_NO_RUNTIME_LINKING <zmq.h> is not needed either: the constants below have
    the values (and the exact spelling) of zmq.h, which keeps them ABI-stable since libzmq 4.3.
    Test hook: $OMNICONN_ZMQ_LIB names another library to open (a name that does not exist
    simulates a host without libzmq).
*/
#define OMC__ZMQ_SYMBOLS(X) \
    X(R, void*, ctx_new, zmq_ctx_new, (void), ()) \
    X(R, int, ctx_term, zmq_ctx_term, (void* ctx), (ctx)) \
    X(R, void*, socket, zmq_socket, (void* ctx, int type), (ctx, type)) \
    X(R, int, close, zmq_close, (void* s), (s)) \
    X(R, int, bind, zmq_bind, (void* s, const char* addr), (s, addr)) \
    X(R, int, connect, zmq_connect, (void* s, const char* addr), (s, addr)) \
    X(R, int, setsockopt, zmq_setsockopt, (void* s, int opt, const void* v, size_t n), (s, opt, v, n)) \
    X(R, int, getsockopt, zmq_getsockopt, (void* s, int opt, void* v, size_t* n), (s, opt, v, n)) \
    X(R, int, send, zmq_send, (void* s, const void* buf, size_t n, int flags), (s, buf, n, flags)) \
    X(R, int, recv, zmq_recv, (void* s, void* buf, size_t n, int flags), (s, buf, n, flags)) \
    X(R, int, poll, zmq_poll, (omc__zmq_pollitem* items, int n, long timeout), (items, n, timeout)) \
    X(R, int, socket_monitor, zmq_socket_monitor, (void* s, const char* addr, int events), (s, addr, events)) \
    X(R, int, errnum, zmq_errno, (void), ()) \
    X(R, const char*, strerror, zmq_strerror, (int e), (e)) \
    X(R, int, has, zmq_has, (const char* capability), (capability)) \
    X(R, int, curve_keypair, zmq_curve_keypair, (char* pub, char* sec), (pub, sec)) \
    X(R, int, curve_public, zmq_curve_public, (char* pub, const char* sec), (pub, sec)) \
    X(R, uint8_t*, z85_decode, zmq_z85_decode, (uint8_t* dest, const char* str), (dest, str)) \
    X(R, char*, z85_encode, zmq_z85_encode, (char* dest, const uint8_t* data, size_t size), (dest, data, size)) \
    X(V, void, version, zmq_version, (int* major, int* minor, int* patch), (major, minor, patch)) \
    X(R, int, msg_init, zmq_msg_init, (omc__zmq_msg* m), (m)) \
    X(R, int, msg_recv, zmq_msg_recv, (omc__zmq_msg* m, void* s, int flags), (m, s, flags)) \
    X(R, void*, msg_data, zmq_msg_data, (omc__zmq_msg* m), (m)) \
    X(R, size_t, msg_size, zmq_msg_size, (const omc__zmq_msg* m), (m)) \
    X(R, const char*, msg_gets, zmq_msg_gets, (const omc__zmq_msg* m, const char* property), (m, property)) \
    X(R, int, msg_close, zmq_msg_close, (omc__zmq_msg* m), (m)) \
    X(R, int, msg_get, zmq_msg_get, (const omc__zmq_msg* m, int property), (m, property))

#if defined(OMNICONN_NO_RUNTIME_LINKING)
    #include <zmq.h>
    typedef zmq_pollitem_t omc__zmq_pollitem;
    typedef zmq_msg_t omc__zmq_msg;
#else
    /* the subset of zmq.h the side channel uses, spelled as zmq.h spells it */
    typedef struct omc__zmq_pollitem { void* socket; int fd; short events; short revents; } omc__zmq_pollitem;
    typedef union omc__zmq_msg { unsigned char bytes[64]; void* align; } omc__zmq_msg;     /* zmq_msg_t: 64 opaque bytes */
    #ifndef ZMQ_PAIR
        #define ZMQ_PAIR 0
        #define ZMQ_REP 4
        #define ZMQ_DEALER 5
        #define ZMQ_ROUTER 6
        #define ZMQ_DONTWAIT 1
        #define ZMQ_SNDMORE 2
        #define ZMQ_POLLIN 1
        #define ZMQ_RCVMORE 13
        #define ZMQ_FD 14
        #define ZMQ_EVENTS 15
        #define ZMQ_LINGER 17
        #define ZMQ_RECONNECT_IVL 18
        #define ZMQ_MAXMSGSIZE 22
        #define ZMQ_RCVTIMEO 27
        #define ZMQ_LAST_ENDPOINT 32
        #define ZMQ_ROUTER_MANDATORY 33
        #define ZMQ_IPV6 42
        #define ZMQ_CURVE_SERVER 47
        #define ZMQ_CURVE_PUBLICKEY 48
        #define ZMQ_CURVE_SECRETKEY 49
        #define ZMQ_CURVE_SERVERKEY 50
        #define ZMQ_ZAP_DOMAIN 55
        #define ZMQ_HANDSHAKE_IVL 66
    #endif
    #ifndef ZMQ_SRCFD
        #define ZMQ_SRCFD 2
    #endif
    #ifndef ZMQ_SNDTIMEO
        #define ZMQ_SNDTIMEO 28
    #endif
    #ifndef ZMQ_EVENT_DISCONNECTED
        #define ZMQ_EVENT_DISCONNECTED 0x0200
    #endif
    #ifndef ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
        #define ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL 0x0800
        #define ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL 0x2000
        #define ZMQ_EVENT_HANDSHAKE_FAILED_AUTH 0x4000
        #define ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC 0x11000001
        #define ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH 0x11000002
        #define ZMQ_PROTOCOL_ERROR_ZAP_UNSPECIFIED 0x20000000
    #endif
#endif

typedef struct omc__zmq_table {
#define OMC__X(kind, ret, member, sym, params, args) ret (*member) params;
    OMC__ZMQ_SYMBOLS(OMC__X)
#undef OMC__X
} omc__zmq_table;

static omc__zmq_table omc__zmq;             /* filled once, then read-only */
static int omc__zmq_loaded;                 /* atomic: 1 once omc__zmq is complete */
static pthread_mutex_t omc__zmq_mu = PTHREAD_MUTEX_INITIALIZER;

#define OMC__ZMQ_RETURN_R return              /* a function that returns a value hands it on */
#define OMC__ZMQ_RETURN_V                     /* a void one is just called */
#define OMC__X(kind, ret, member, sym, params, args) OMC__PRIVATE ret omc__zmq_##member params { OMC__ZMQ_RETURN_##kind omc__zmq.member args; }
OMC__ZMQ_SYMBOLS(OMC__X)
#undef OMC__X

#if defined(OMNICONN_NO_RUNTIME_LINKING)
/* Linked directly: the table holds the real functions (the linker already checked them). */
OMC__PRIVATE omc_result omc__zmq_load(char* why, size_t n) {
    (void)why; (void)n;
    pthread_mutex_lock(&omc__zmq_mu);
    if (!omc__load(&omc__zmq_loaded)) {
#define OMC__X(kind, ret, member, sym, params, args) omc__zmq.member = sym;
        OMC__ZMQ_SYMBOLS(OMC__X)
#undef OMC__X
        omc__store(&omc__zmq_loaded, 1);
    }
    pthread_mutex_unlock(&omc__zmq_mu);
    return OMC_OK;
}
#else
/* A static executable has no dynamic section (the weak reference stays NULL): dlopen cannot load
   a shared libzmq into it, so the fix there is to link libzmq in. */
extern int _DYNAMIC[] __attribute__((weak));

/* dlopen libzmq and resolve every symbol of the list, once per process (a failure is not
   remembered: the next connector tries again). */
OMC__PRIVATE omc_result omc__zmq_load(char* why, size_t n) {
    const char* env = getenv("OMNICONN_ZMQ_LIB");
    const char* name = env && env[0] ? env : OMNICONN_ZMQ_LIBRARY;
    omc__zmq_table t;
    void* lib;
    omc_result r = OMC_OK;
    if (omc__load(&omc__zmq_loaded)) return OMC_OK;
    pthread_mutex_lock(&omc__zmq_mu);
    if (omc__load(&omc__zmq_loaded)) { pthread_mutex_unlock(&omc__zmq_mu); return OMC_OK; }
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = dlerror();
        if (why && n && !_DYNAMIC)
            snprintf(why, n, "cannot load %s into a static executable (%s): build it with OMNICONN_NO_RUNTIME_LINKING and link "
                     "libzmq (-DOMNICONN_NO_RUNTIME_LINKING ... -lzmq), or build with OMNICONN_NO_ZMQ", name, e ? e : "not supported");
        else if (why && n)
            snprintf(why, n, "cannot load %s (%s): install Debian's libzmq5 package (apt-get install libzmq5), "
                     "or build with OMNICONN_NO_ZMQ", name, e ? e : "not found");
        pthread_mutex_unlock(&omc__zmq_mu);
        return OMC_ERR_UNAVAILABLE;
    }
    memset(&t, 0, sizeof(t));
    /* ISO C has no object-to-function pointer conversion; POSIX guarantees the bytes fit */
#define OMC__X(kind, ret, member, sym, params, args) \
    if (r == OMC_OK) { \
        void* s = dlsym(lib, #sym); \
        memcpy(&t.member, &s, sizeof(s)); \
        if (!s) { \
            if (why && n) snprintf(why, n, "%s has no symbol %s (libzmq older than 4.3? install Debian's libzmq5)", name, #sym); \
            r = OMC_ERR_UNAVAILABLE; \
        } \
    }
    OMC__ZMQ_SYMBOLS(OMC__X)
#undef OMC__X
    if (r != OMC_OK) dlclose(lib);
    else {      /* never dlclose()d: libzmq's I/O threads may outlive a context's last user */
        omc__zmq = t;
        omc__store(&omc__zmq_loaded, 1);
    }
    pthread_mutex_unlock(&omc__zmq_mu);
    return r;
}
#endif

/* Load libzmq or say why not through the logger (ERROR: a remote connector cannot exist). */
OMC__PRIVATE omc_result omc__zmq_require(const omc_hooks* hooks) {
    char why[512];
    int major = 0, minor = 0, patch = 0;
    omc_result r = omc__zmq_load(why, sizeof(why));
    if (r != OMC_OK) { OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_NET, "%s", why); return r; }
    omc__zmq_version(&major, &minor, &patch);
    OMC__LOG(hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "side channel: libzmq %d.%d.%d", major, minor, patch);
    return r;
}

/* omc_available(OMC_FEATURE_ZMQ) asks Part B as it asks a companion (see "[SECTION] Implementation:
   the companion interface" in Part A). */
__attribute__((constructor)) static void omc__net_register_probe(void) { omc__register_probe(OMC_FEATURE_ZMQ, omc__zmq_load); }

/* ============================================================================================== */
/* [SECTION] Implementation: the data-plane interface                                            */
/* ============================================================================================== */
/*
    Part B's own interface for companions: what a data plane (omniconn_rdma.h) may use of the
    remote connector. tests/check_companions.sh checks the headers against it and against Part
    A's companion interface.

    remote-interface-begin
      omc__dataplane omc__dp_vtable omc__dp_push omc__dp_peer omc__dp_xfer omc__dp_request
      omc__dp_ext omc__dp_vtable_ext omc__dp_ext_of   the tables and what travels through them
      OMC__DP_RDMA OMC__DP_FLAG_TRY_NOW OMC__DP_FLAG_SELF_COMPLETE OMC__DP_FLAG_EXT
      OMC__DP_STATE_WORDS OMC__DP_REQ_PULL OMC__DP_REQ_CLAIM
      omc__net_create        a remote connector with an extra data plane
      fields omc__dataplane omc__dp_vtable omc__dp_push omc__dp_peer omc__dp_xfer: all
      fields omc__dp_request omc__dp_ext omc__dp_vtable_ext: all
    libzmq as the side channel loads it (a companion that needs libzmq uses this instead of a
    loader of its own: one dlopen per process, $OMNICONN_ZMQ_LIB and OMNICONN_NO_RUNTIME_LINKING
    honoured alike; present when OMC__HAS_ZMQ):
      omc__zmq_load          load once per process: OMC_OK, or OMC_ERR_UNAVAILABLE and why (text)
      omc__zmq_require       the same, saying why through a logger (ERROR)
      then one wrapper per function, named as libzmq's with omc__zmq_ for zmq_ (zmq_errno is
      omc__zmq_errnum), and the types and ZMQ_* constants as zmq.h spells them:
      omc__zmq_ctx_new omc__zmq_ctx_term omc__zmq_socket omc__zmq_close omc__zmq_bind
      omc__zmq_connect omc__zmq_setsockopt omc__zmq_getsockopt omc__zmq_send omc__zmq_recv
      omc__zmq_poll omc__zmq_socket_monitor omc__zmq_errnum omc__zmq_strerror omc__zmq_has
      omc__zmq_curve_keypair omc__zmq_curve_public omc__zmq_z85_decode omc__zmq_z85_encode
      omc__zmq_version omc__zmq_msg_init omc__zmq_msg_recv omc__zmq_msg_data omc__zmq_msg_size
      omc__zmq_msg_gets omc__zmq_msg_close omc__zmq_msg_get
      omc__zmq_pollitem omc__zmq_msg   zmq_pollitem_t and zmq_msg_t
      fields omc__zmq_pollitem: all
    remote-interface-end

    The remote connector is two layers. The side channel (ZMQ, below) does everything that is
    not moving payload bytes: HELLO, QUERY, PULL, DONE/ERROR/ABORT, the entries table, fan-out,
    TTL and pins, deadlines, restarts, CURVE, health. A data plane only moves the bytes of one
    PULL from the sender's pool into the receiver's pool. The TCP data plane is built in (and is
    written against this interface like any other); omniconn_rdma.h adds an RDMA one.

    Who calls what, in order:

      receiver, per channel (one DEALER socket to one sender, used by one get at a time):
        rx_open     -> the plane's per-channel state (*chan)             before our HELLO
        rx_hello    -> the record value we put into our HELLO (may be empty)
        rx_ready    <- the sender's HELLO record of our kind (NULL if it sent none: return
                       OMC_ERR_UNAVAILABLE and the channel falls back to TCP)
        rx_reusable <- before a cached channel is used again: is the plane state still sound?
        rx_close    <- when the channel is dropped (any failure) or the connector closes
      receiver, per transfer (the get's destination x->dst is already allocated in our pool):
        rx_prepare  -> descriptor bytes for the PULL (TCP: a connection token; RDMA: address,
                       rkey, length), may block until deadline (TCP connects lazily here)
        rx_fd       -> a file descriptor to poll while waiting, or -1 (nothing to watch)
        rx_progress <- the fd is readable, or DONE arrived (done_received = 1); move what is
                       ready and set x->complete once every byte is in x->dst
        rx_end      <- the transfer finished (r = OMC_OK) or failed; after a failure the
                       channel is closed unless the sender refused before moving any byte
      sender:
        tx_hello    -> our HELLO record for a receiver (rec = the receiver's record of our
                       kind, or NULL); an RDMA plane connects a queue pair here
        tx_push     <- one push, on a worker thread, so it may block until p->deadline:
                       p->src/p->size (the pinned entry), the PULL's descriptor, p->abort
                       (non-zero = stop now, return that code). Once every byte is where the
                       descriptor said, the plane may call p->commit(p): the connector records
                       the read and unpins the entry (src must not be read after it), and the
                       plane may then tell the receiver by itself. After commit a push is a
                       success whatever happens next. A plane that never calls commit is
                       committed by the connector when tx_push returns OMC_OK, and DONE follows.
      both: attach(pool) after the connector's pool exists (register it with the NIC there),
            detach at destroy.

      optional, in omc__dp_ext (a plane whose table is an omc__dp_vtable_ext, OMC__DP_FLAG_EXT):
        tx_ticket   -> a record for a session's HELLO answer: the ticket its data connections
                       must show (TCP), bound to the session's side-channel connection
        tx_session_gone
                    <- that side-channel connection closed: what it was issued ends with it
        tx_item_count, tx_items, tx_serve
                    the plane's own sockets in the listener's poll (TCP: the data port and its
                    connections), and what to do when they are readable
        tx_next_request, tx_answer
                    a request that came on the plane's own connection (omc__dp_request: PULL
                    or CLAIM of an entry by id, for the session the connection belongs to);
                    the connector serves it with a PULL's checks and answers a refusal or a
                    recorded CLAIM through tx_answer; a PULL becomes a push with p->requested
        tx_await, tx_receipt, tx_end
                    after tx_try moved every byte: the listener waits for the receiver's
                    receipt itself (tx_receipt is OMC_ERR_BUSY until it came), commits, and
                    tx_end lets the plane finish (TCP: the trailer)
        tx_drop     <- a push aborted before a worker ran it: let go of what the plane holds
        rx_requests, rx_request
                    receiver: this channel takes requests on the plane's connection, and one
                    sent there (no side-channel message per get); q->qkey is the key the get
                    asks for, which the plane proves with its session's secret, never sends.
                    A plane with OMC__DP_FLAG_PIPELINE also takes requests ahead (q->ahead):
                    sent now, their answers read later in order (a batch's gets)
        tx_proves   sender: does a request prove the key of the entry it names (the connector
                    asks before serving it; no = OMC_ERR_NOT_FOUND)
      A plane keeps its own per-push state in p->state (OMC__DP_STATE_WORDS words that live with
      the job); the connector never looks inside it.

    Completion on the receiver: a get ends when the plane says x->complete and DONE has
    arrived. Two capability flags (omc__dp_vtable.flags) let a plane skip parts of that:
      OMC__DP_FLAG_TRY_NOW       the listener starts a push itself with tx_try, which must not
                                 block (OMC_ERR_BUSY: hand it to a worker; the first bytes go
                                 while a worker wakes). With tx_await a push whose bytes all
                                 went stays with the listener, which waits for the receipt
                                 itself
      OMC__DP_FLAG_SELF_COMPLETE the plane tells the receiver itself that the read was recorded
                                 (TCP: a trailer written after commit): no DONE is sent, and the
                                 receiver completes on the plane alone (one side-channel
                                 message - two libzmq I/O thread wake-ups - less per get)
      OMC__DP_FLAG_EXT           the table is an omc__dp_vtable_ext (the optional entries above)
    The built-in TCP plane sets all three; the connector never tests a plane by its kind or its
    address, and never casts a plane's state.

    Rules: a plane never touches the entries table, never sends on the side channel and never
    frees the destination; errors are omc_result codes (OMC_ERR_CONNECTION for a broken peer,
    OMC_ERR_TIMEOUT at the deadline, OMC_ERR_PROTOCOL when the peer lies); a plane must not
    return OMC_ERR_NOT_FOUND, _STALE, _TOO_LARGE, _PEER_RESTARTED or _UNAVAILABLE from tx_push
    (a receiver keeps its channel after those, because they promise no byte moved).

    How a companion header plugs in (same translation unit, so no public symbol is needed):

        static const omc__dp_vtable my_plane = { "rdma", OMC__DP_RDMA, OMC_NET_CAP_RDMA, ... };
        omc__dataplane extra = { &my_plane, my_state };
        r = omc__net_create(&tcp_desc, OMC_TRANSPORT_RDMA, &extra, &conn);

    The connector then advertises the plane in HELLO (capabilities bit and a record of its kind)
    and in its metadata; a receiver uses the extra plane for a channel when both sides have it,
    and TCP otherwise. OMC_TRANSPORT_RDMA makes the metadata envelope say RDMA; the body is the
    one documented for TCP.
*/

#include <netdb.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <ctype.h>


#ifndef OMNICONN_TCP_POOL_SIZE
    #define OMNICONN_TCP_POOL_SIZE ((uint64_t)1 << 30)
#endif
#ifndef OMNICONN_TCP_WORKERS
    #define OMNICONN_TCP_WORKERS 2
#endif
#ifndef OMNICONN_TCP_MAX_WAIT_MS
    #define OMNICONN_TCP_MAX_WAIT_MS 1000
#endif
#ifndef OMNICONN_TCP_CHUNK
    #define OMNICONN_TCP_CHUNK ((uint32_t)4 << 20)
#endif
#ifndef OMNICONN_TCP_BATCH_LANES
    #define OMNICONN_TCP_BATCH_LANES 8  /* channels a batch's run of gets to one sender uses at most */
#endif
#ifndef OMNICONN_TCP_INLINE
    #define OMNICONN_TCP_INLINE ((uint32_t)256 << 10)   /* bytes the listener writes before a worker takes over */
#endif
#ifndef OMNICONN_TCP_IDLE_MS
    #define OMNICONN_TCP_IDLE_MS 120000     /* a sender closes a data connection idle this long */
#endif
#ifndef OMNICONN_TCP_MAX_PUSH_MS
    #define OMNICONN_TCP_MAX_PUSH_MS 600000 /* the longest budget a sender grants one push */
#endif
#ifndef OMNICONN_TCP_STALL_MS
    #define OMNICONN_TCP_STALL_MS 5000      /* a push whose receiver takes no byte this long is aborted */
#endif
#ifndef OMNICONN_TCP_MIN_RATE
    #define OMNICONN_TCP_MIN_RATE ((uint64_t)1 << 20)  /* bytes/s a push must keep up, per 2 s; 0 = any rate */
#endif
#ifndef OMNICONN_TCP_INLINE_THRESHOLD
    #define OMNICONN_TCP_INLINE_THRESHOLD ((uint64_t)16 << 10)  /* payloads up to this also ride in the metadata */
#endif

/* Plane kinds (HELLO record type, PULL byte 30): 1 is the TCP plane's (defined
   with it), 2 the RDMA plane's; a plane is told apart by its kind, never tested for it. */
#define OMC__DP_RDMA 2
#define OMC__DP_MAX  2                  /* planes per connector: TCP plus one extra */
#define OMC__DP_STATE_WORDS 4           /* a plane's own per-push state: 32 bytes in the job */

/* One transfer as a receiver-side plane sees it. */
typedef struct omc__dp_xfer {
    uint64_t transfer_id;
    omc_buffer dst;                     /* the destination, in the receiver's pool */
    uint64_t size;                      /* bytes the sender will move (<= dst.size) */
    uint64_t received;                  /* bytes in place so far (the plane keeps it) */
    int complete;                       /* the plane says every byte is in place */
    void* plane;                        /* the plane's own per-transfer state */
    int refused;                        /* a request was refused before a byte moved (rx_request): */
    uint64_t detail;                    /* the stream is in step; detail as in ERROR */
    int nowait;                         /* the caller polls several channels: rx_progress never
                                           waits inside for more bytes */
} omc__dp_xfer;

/* One push as a sender-side plane sees it (the fields after abort were added in the second
   version of this interface; a plane that ignores them works as before). */
typedef struct omc__dp_push omc__dp_push;
struct omc__dp_push {
    uint64_t transfer_id;
    const uint8_t* src;                 /* the entry's bytes, pinned until commit */
    uint64_t size;
    omc_pool* pool;                     /* where src lives */
    omc_range range;
    const uint8_t* desc;                /* the PULL's descriptor */
    uint32_t desc_len;
    uint64_t receiver_incarnation;
    omc_time_ns deadline;
    const int* abort;                   /* read with omc__load; non-zero = stop, return it */
    void (*commit)(const omc__dp_push* p);  /* every byte is in place: record the read, unpin */
    void* commit_ctx;                   /* the connector's */
    void* state;                        /* the plane's own state for this push: OMC__DP_STATE_WORDS
                                           words that live with the job, zero when it starts */
    const uint8_t* channel;             /* the side-channel session that sent the PULL (its ZMQ */
    uint32_t channel_len;               /* routing id): a plane binds its connections to it */
    int requested;                      /* the push answers a request the plane itself received
                                           (tx_next_request), not a PULL: the plane holds its
                                           connection already */
    const char* peer_key;               /* the PULL's CURVE public key in hex ("" or NULL = none):
                                           a plane serves it only on connections of that key */
};
#define OMC__PEER_KEY_MAX 65            /* a CURVE public key in hex, and its terminator */

/* A request a plane received on its own connections (sender: tx_next_request) or sends on
   them (receiver: rx_request): a PULL, or a CLAIM of a read whose bytes the receiver already
   has (inline metadata). The connector serves it with the checks of a side-channel PULL. */
#define OMC__DP_REQ_PULL  1
#define OMC__DP_REQ_CLAIM 2
typedef struct omc__dp_request {
    uint8_t op;                         /* OMC__DP_REQ_* */
    uint32_t budget_ms;                 /* 0 = vLLM-Omni's rule */
    uint64_t xfer, entry_id, expect_incarnation;
    uint64_t capacity;                  /* PULL: destination bytes; CLAIM: the announced size */
    const char* qkey;                   /* receiver: the qualified key the get asks for; the */
    uint32_t qlen;                      /* plane sends a proof of it, never the key (NULL on a sender) */
    uint8_t ahead;                      /* receiver, a plane with OMC__DP_FLAG_PIPELINE: 0 = send it and
                                           read its answer next; OMC__DP_AHEAD_SEND = only send it (the
                                           answers to the requests before it come first); _READ = it
                                           was sent ahead: read its answer next, send nothing */
    /* sender side, filled by tx_next_request */
    omc_result status;                  /* not OMC_OK: refuse it with this code */
    void* handle;                       /* the plane's: tx_answer answers on it */
    uint64_t receiver_incarnation;
    const uint8_t* channel;             /* the session it belongs to (NULL: none; refused) */
    uint32_t channel_len;
    uint8_t desc[8];                    /* the descriptor its push names, as a PULL's would */
    uint32_t desc_len;
    char addr[64];                      /* the receiver's address (fair scheduling; "" = unknown) */
} omc__dp_request;

/* A request names its entry by id and carries no key, only a proof of it the plane makes with
   its session's secret (tx_proves checks it on the sender): the sender serves it only for an
   entry of that key, so metadata whose entry id was swapped for another key's cannot fetch or
   claim that key's bytes (the side channel's PULL checks the key itself). */

/* What a receiver-side plane learns about a sender from its HELLO. */
typedef struct omc__dp_peer {
    const char* host;                   /* the host our side channel reached */
    uint16_t port;
    uint64_t incarnation;
    const uint8_t* record;              /* the sender's record of this plane's kind, or NULL */
    uint32_t record_len;
    const uint8_t* ticket;              /* the sender's data-connection ticket record, or NULL */
    uint32_t ticket_len;
} omc__dp_peer;

#define OMC__DP_FLAG_TRY_NOW       0x1u     /* tx_try starts a push on the listener without blocking */
#define OMC__DP_FLAG_SELF_COMPLETE 0x2u     /* the plane itself tells the receiver the read is recorded */
#define OMC__DP_FLAG_PIPELINE      0x8u     /* rx_request can send requests ahead (omc__dp_request.ahead) */
#define OMC__DP_AHEAD_SEND 1
#define OMC__DP_AHEAD_READ 2

typedef struct omc__dp_vtable {
    const char* name;                   /* "tcp", "rdma": for logs */
    uint8_t kind;                       /* OMC__DP_*: HELLO record type and PULL byte 30 */
    uint32_t capability;                /* OMC_NET_CAP_* */
    uint32_t flags;                     /* OMC__DP_FLAG_* */
    omc_result (*attach)(void* user, omc_conn* conn, omc_pool* pool, const omc_hooks* hooks);
    void       (*detach)(void* user);
    /* sender */
    omc_result (*tx_hello)(void* user, const uint8_t* rec, uint32_t rec_len, uint8_t* out, uint32_t cap, uint32_t* out_len);
    omc_result (*tx_push)(void* user, const omc__dp_push* p);
    /* receiver */
    omc_result (*rx_open)(void* user, void** chan);
    omc_result (*rx_hello)(void* user, void* chan, uint8_t* out, uint32_t cap, uint32_t* out_len);
    omc_result (*rx_ready)(void* user, void* chan, const omc__dp_peer* peer, omc_time_ns deadline);
    int        (*rx_reusable)(void* user, void* chan);
    omc_result (*rx_prepare)(void* user, void* chan, omc__dp_xfer* x, omc_time_ns deadline,
                             uint8_t* desc, uint32_t cap, uint32_t* desc_len);
    int        (*rx_fd)(void* user, void* chan);
    omc_result (*rx_progress)(void* user, void* chan, omc__dp_xfer* x, int done_received);
    void       (*rx_end)(void* user, void* chan, omc__dp_xfer* x, omc_result r);
    void       (*rx_close)(void* user, void* chan);
    /* OMC__DP_FLAG_TRY_NOW: start the push without blocking; OMC_ERR_BUSY = a worker goes on
       (from what the plane noted in p->state) */
    omc_result (*tx_try)(void* user, const omc__dp_push* p);
} omc__dp_vtable;

/* The third version of the interface adds what a plane with connections of its own offers the
   listener (the TCP plane: requests on its data connections, receipts it waits for, session
   tickets, its sockets in the listener's poll). A plane that has them sets OMC__DP_FLAG_EXT and
   embeds its omc__dp_vtable as the first member of an omc__dp_vtable_ext; a plane written
   against the earlier table needs no change. Every entry is optional (NULL = the plane does not
   do it); the connector asks the table, never the kind. */
#define OMC__DP_FLAG_EXT 0x4u               /* the table is the base of an omc__dp_vtable_ext */
typedef struct omc__dp_ext {
    /* sender, on the listener thread */
    void       (*tx_drop)(void* user, const omc__dp_push* p);  /* aborted before a worker ran it:
                                                                   let go of what the plane holds */
    int        (*tx_await)(void* user, const omc__dp_push* p); /* after tx_try: 1 = the listener
                                                                   waits for the receipt itself */
    omc_result (*tx_receipt)(void* user, const omc__dp_push* p); /* OMC_ERR_BUSY while it waits */
    void       (*tx_end)(void* user, const omc__dp_push* p, int committed); /* the wait is over */
    /* a record for a side-channel session's HELLO answer (*out_len 0 = none); addr is the
       session's peer address ("" = unknown), session its side-channel connection's descriptor
       (-1 = unknown), peer_key its CURVE public key in hex ("" = no CURVE) */
    omc_result (*tx_ticket)(void* user, const uint8_t* channel, uint32_t channel_len, const char* addr, int session,
                            const char* peer_key, uint8_t* out, uint32_t cap, uint32_t* out_len);
    void       (*tx_session_gone)(void* user, int session);    /* that side-channel connection closed */
    /* the plane's own sockets in the listener's poll: at most tx_item_count() items; who[i] is
       the plane's, handed back to tx_serve */
    uint32_t   (*tx_item_count)(void* user);
    int        (*tx_items)(void* user, struct pollfd* items, void** who, int max);
    void       (*tx_serve)(void* user, const struct pollfd* items, void* const* who, int n);
    int        (*tx_next_request)(void* user, omc__dp_request* q);      /* 1 = q is one to serve */
    void       (*tx_answer)(void* user, void* handle, omc_result code, uint64_t xfer, uint64_t detail);
    /* receiver: does this channel take requests on the plane's connection, and send one */
    int        (*rx_requests)(void* user, void* chan);
    omc_result (*rx_request)(void* user, void* chan, omc__dp_xfer* x, const omc__dp_request* q, omc_time_ns deadline);
    /* sender: 1 if request q (from tx_next_request, not answered yet) proves the key qkey of
       the entry it names; NULL = no request proves anything (all are refused) */
    int        (*tx_proves)(void* user, const omc__dp_request* q, const char* qkey, uint32_t qlen);
} omc__dp_ext;

typedef struct omc__dp_vtable_ext {
    omc__dp_vtable base;                /* flags has OMC__DP_FLAG_EXT */
    omc__dp_ext ext;
} omc__dp_vtable_ext;

/* The extension entries of a plane's table, or NULL (a plane of the earlier interface). */
OMC__PRIVATE const omc__dp_ext* omc__dp_ext_of(const omc__dp_vtable* vt) {
    return vt && (vt->flags & OMC__DP_FLAG_EXT) ? &((const omc__dp_vtable_ext*)(const void*)vt)->ext : NULL;
}

/* A plane registered on a connector: its table and its state. */
typedef struct omc__dataplane {
    const omc__dp_vtable* vt;
    void* user;
} omc__dataplane;

/* ============================================================================================== */
/* [SECTION] Implementation: side-channel codec (pure functions over bytes)                      */
/* ============================================================================================== */
/*
    Everything that reads bytes from a peer goes through a decoder in this section first; the
    decoders check every length against the bytes they were given and never read past them
    (tests/fuzz/fuzz_wire.c runs them under libFuzzer). Encoders check the same limits, so we
    never send what we would refuse to read.
*/

#define OMC__WIRE_MAGIC       0x5A434D4Fu   /* "OMCZ" */
#define OMC__WIRE_VERSION     1
#define OMC__WIRE_HEADER      32
#define OMC__WIRE_MAX         8192
#define OMC__WIRE_MAX_KEY     255
#define OMC__WIRE_MAX_DESC    1024
#define OMC__WIRE_MAX_RECORDS 32
#define OMC__WIRE_MAX_TEXT    255

enum {
    OMC__MSG_HELLO = 1, OMC__MSG_QUERY, OMC__MSG_QUERY_REPLY, OMC__MSG_NOT_FOUND,
    OMC__MSG_PULL, OMC__MSG_DONE, OMC__MSG_ERROR, OMC__MSG_ABORT, OMC__MSG_LIST, OMC__MSG_LIST_REPLY
};
#define OMC__WIRE_LIST_MAX (OMC__WIRE_MAX - OMC__WIRE_HEADER - 8)     /* key records of one LIST_REPLY */

/* One side-channel message, decoded (pointers into the frame) or to encode. Only the fields of
   its type are meaningful. */
typedef struct omc__wire {
    uint8_t type;
    uint64_t xfer;                      /* transfer id */
    uint64_t incarnation;               /* of the author */
    uint32_t seq;
    /* HELLO */
    uint32_t caps;
    uint32_t nrecords;
    const uint8_t* records;             /* nrecords well-formed records, back to back */
    uint32_t records_len;
    /* QUERY */
    uint32_t wait_ms;
    /* QUERY, PULL */
    const char* key;
    uint32_t key_len;
    /* QUERY_REPLY (entry_id also in PULL) */
    uint64_t entry_id;
    uint64_t size;
    uint32_t pflags;
    uint32_t readers_left;
    /* PULL */
    uint64_t expect_incarnation;
    uint64_t capacity;
    uint32_t budget_ms;
    uint8_t dp_kind;
    const uint8_t* desc;
    uint32_t desc_len;
    /* DONE */
    uint64_t bytes;
    /* LIST (cursor), LIST_REPLY (cursor = the next one, 0 = last page; nkeys records of
       u16 length + key bytes) */
    uint32_t cursor;
    uint32_t nkeys;
    const uint8_t* keys;
    uint32_t keys_len;
    /* ERROR */
    int32_t code;
    uint64_t detail;
    const char* text;
    uint32_t text_len;
} omc__wire;

OMC__PRIVATE const char* omc__wire_type_name(uint8_t t) {
    static const char* names[] = { "?", "HELLO", "QUERY", "QUERY_REPLY", "NOT_FOUND", "PULL", "DONE", "ERROR", "ABORT", "LIST",
                                   "LIST_REPLY" };
    return t <= OMC__MSG_LIST_REPLY ? names[t] : "?";
}

/* Walk records: returns 1 and the record at *off (then advances *off), 0 at the end, -1 if the
   bytes do not hold a whole record. */
OMC__PRIVATE int omc__wire_next_record(const uint8_t* recs, uint32_t len, uint32_t* off, uint16_t* type,
                                       const uint8_t** val, uint32_t* vlen) {
    uint32_t n;
    if (*off == len) return 0;
    if (*off > len || len - *off < 4) return -1;
    n = omc__get_u16(recs + *off + 2);
    if (len - *off - 4 < n) return -1;
    *type = omc__get_u16(recs + *off);
    *val = recs + *off + 4;
    *vlen = n;
    *off += 4 + n;
    return 1;
}

/* The first record of a type, or NULL. */
OMC__PRIVATE const uint8_t* omc__wire_find_record(const omc__wire* m, uint16_t want, uint32_t* vlen) {
    uint32_t off = 0, n;
    uint16_t t;
    const uint8_t* v;
    while (omc__wire_next_record(m->records, m->records_len, &off, &t, &v, &n) == 1)
        if (t == want) { *vlen = n; return v; }
    return NULL;
}

/* Append one record to a HELLO's record area; OMC_ERR_TOO_LARGE if it does not fit. */
OMC__PRIVATE omc_result omc__wire_add_record(uint8_t* recs, uint32_t cap, uint32_t* len, uint32_t* count,
                                             uint16_t type, const uint8_t* val, uint32_t vlen) {
    if (*count >= OMC__WIRE_MAX_RECORDS || vlen > 0xFFFFu || cap < *len || cap - *len < 4 + vlen) return OMC_ERR_TOO_LARGE;
    omc__put_u16(recs + *len, type);
    omc__put_u16(recs + *len + 2, (uint16_t)vlen);
    if (vlen) memcpy(recs + *len + 4, val, vlen);
    *len += 4 + vlen;
    (*count)++;
    return OMC_OK;
}

/* Walk the key records of a LIST_REPLY: 1 and the key at *off (then advances), 0 at the end, -1
   if the bytes do not hold a whole record of 1..255 key bytes. */
OMC__PRIVATE int omc__wire_next_key(const uint8_t* keys, uint32_t len, uint32_t* off, const char** key, uint32_t* klen) {
    uint32_t n;
    if (*off == len) return 0;
    if (*off > len || len - *off < 2) return -1;
    n = omc__get_u16(keys + *off);
    if (n == 0 || n > OMC__WIRE_MAX_KEY || len - *off - 2 < n) return -1;
    *key = (const char*)keys + *off + 2;
    *klen = n;
    *off += 2 + n;
    return 1;
}

/* Decode one frame. OMC_ERR_MALFORMED for anything out of bounds or inconsistent,
   OMC_ERR_VERSION for another protocol version, OMC_ERR_PROTOCOL for an unknown type. */
OMC__PRIVATE omc_result omc__wire_decode(const uint8_t* f, size_t len, omc__wire* m) {
    const uint8_t* b;
    uint32_t blen;
    memset(m, 0, sizeof(*m));
    if (!f || len < OMC__WIRE_HEADER || len > OMC__WIRE_MAX || omc__get_u32(f) != OMC__WIRE_MAGIC) return OMC_ERR_MALFORMED;
    if (f[4] != OMC__WIRE_VERSION) return OMC_ERR_VERSION;
    m->type = f[5];
    m->xfer = omc__get_u64(f + 8);
    m->incarnation = omc__get_u64(f + 16);
    m->seq = omc__get_u32(f + 24);
    blen = omc__get_u32(f + 28);
    if (omc__get_u16(f + 6) != 0 || (size_t)blen != len - OMC__WIRE_HEADER) return OMC_ERR_MALFORMED;
    b = f + OMC__WIRE_HEADER;
    switch (m->type) {
        case OMC__MSG_HELLO: {
            uint32_t off = 0, n, count = 0;
            uint16_t t;
            const uint8_t* v;
            int more;
            if (blen < 8 || omc__get_u16(b + 6) != 0) return OMC_ERR_MALFORMED;
            m->caps = omc__get_u32(b);
            m->nrecords = omc__get_u16(b + 4);
            m->records = b + 8;
            m->records_len = blen - 8;
            if (m->nrecords > OMC__WIRE_MAX_RECORDS) return OMC_ERR_MALFORMED;
            while ((more = omc__wire_next_record(m->records, m->records_len, &off, &t, &v, &n)) == 1) count++;
            if (more < 0 || count != m->nrecords) return OMC_ERR_MALFORMED;
            return OMC_OK;
        }
        case OMC__MSG_QUERY:
            if (blen < 8) return OMC_ERR_MALFORMED;
            m->wait_ms = omc__get_u32(b);
            m->key_len = omc__get_u16(b + 4);
            m->key = (const char*)b + 8;
            if (m->key_len == 0 || m->key_len > OMC__WIRE_MAX_KEY || omc__get_u16(b + 6) != 0 || blen != 8 + m->key_len)
                return OMC_ERR_MALFORMED;
            return OMC_OK;
        case OMC__MSG_QUERY_REPLY:
            if (blen != 24) return OMC_ERR_MALFORMED;
            m->entry_id = omc__get_u64(b);
            m->size = omc__get_u64(b + 8);
            m->pflags = omc__get_u32(b + 16);
            m->readers_left = omc__get_u32(b + 20);
            if (m->pflags & ~OMC_BUFFER_FRAME) return OMC_ERR_MALFORMED;
            return OMC_OK;
        case OMC__MSG_NOT_FOUND:
        case OMC__MSG_ABORT:
            return blen == 0 ? OMC_OK : OMC_ERR_MALFORMED;
        case OMC__MSG_PULL:
            if (blen < 36) return OMC_ERR_MALFORMED;
            m->entry_id = omc__get_u64(b);
            m->expect_incarnation = omc__get_u64(b + 8);
            m->capacity = omc__get_u64(b + 16);
            m->budget_ms = omc__get_u32(b + 24);
            m->key_len = omc__get_u16(b + 28);
            m->dp_kind = b[30];
            m->desc_len = omc__get_u16(b + 32);
            if (m->key_len == 0 || m->key_len > OMC__WIRE_MAX_KEY || m->dp_kind == 0 || b[31] != 0 ||
                m->desc_len > OMC__WIRE_MAX_DESC || omc__get_u16(b + 34) != 0 || blen != 36 + m->key_len + m->desc_len)
                return OMC_ERR_MALFORMED;
            m->key = (const char*)b + 36;
            m->desc = b + 36 + m->key_len;
            return OMC_OK;
        case OMC__MSG_DONE:
            if (blen != 8) return OMC_ERR_MALFORMED;
            m->bytes = omc__get_u64(b);
            return OMC_OK;
        case OMC__MSG_LIST:
            if (blen != 8 || omc__get_u32(b + 4) != 0) return OMC_ERR_MALFORMED;
            m->cursor = omc__get_u32(b);
            return OMC_OK;
        case OMC__MSG_LIST_REPLY: {
            uint32_t off = 0, count = 0, kl;
            const char* k;
            int more;
            if (blen < 8 || omc__get_u16(b + 6) != 0) return OMC_ERR_MALFORMED;
            m->cursor = omc__get_u32(b);
            m->nkeys = omc__get_u16(b + 4);
            m->keys = b + 8;
            m->keys_len = blen - 8;
            while ((more = omc__wire_next_key(m->keys, m->keys_len, &off, &k, &kl)) == 1) count++;
            return more < 0 || count != m->nkeys ? OMC_ERR_MALFORMED : OMC_OK;
        }
        case OMC__MSG_ERROR:
            if (blen < 16) return OMC_ERR_MALFORMED;
            m->code = (int32_t)omc__get_u32(b);
            m->text_len = omc__get_u16(b + 4);
            m->detail = omc__get_u64(b + 8);
            m->text = (const char*)b + 16;
            if (m->code >= 0 || m->text_len > OMC__WIRE_MAX_TEXT || omc__get_u16(b + 6) != 0 || blen != 16 + m->text_len)
                return OMC_ERR_MALFORMED;
            return OMC_OK;
        default:
            return OMC_ERR_PROTOCOL;
    }
}

/* Encode m into out (cap bytes). Checks the limits the decoder checks. */
OMC__PRIVATE omc_result omc__wire_encode(const omc__wire* m, uint8_t* out, uint32_t cap, uint32_t* out_len) {
    uint8_t* b = out + OMC__WIRE_HEADER;
    uint32_t blen;
    *out_len = 0;
    switch (m->type) {
        case OMC__MSG_HELLO: blen = 8 + m->records_len; break;
        case OMC__MSG_QUERY: blen = 8 + m->key_len; break;
        case OMC__MSG_QUERY_REPLY: blen = 24; break;
        case OMC__MSG_NOT_FOUND: case OMC__MSG_ABORT: blen = 0; break;
        case OMC__MSG_PULL: blen = 36 + m->key_len + m->desc_len; break;
        case OMC__MSG_DONE: blen = 8; break;
        case OMC__MSG_ERROR: blen = 16 + m->text_len; break;
        case OMC__MSG_LIST: blen = 8; break;
        case OMC__MSG_LIST_REPLY: blen = 8 + m->keys_len; break;
        default: return OMC_ERR_INVALID_ARG;
    }
    if ((m->type == OMC__MSG_QUERY || m->type == OMC__MSG_PULL) && (m->key_len == 0 || m->key_len > OMC__WIRE_MAX_KEY))
        return OMC_ERR_INVALID_ARG;
    if ((m->type == OMC__MSG_HELLO && (m->nrecords > OMC__WIRE_MAX_RECORDS || m->records_len > OMC__WIRE_MAX)) ||
        (m->type == OMC__MSG_PULL && (m->desc_len > OMC__WIRE_MAX_DESC || m->dp_kind == 0)) ||
        (m->type == OMC__MSG_ERROR && (m->code >= 0 || m->text_len > OMC__WIRE_MAX_TEXT)) ||
        (m->type == OMC__MSG_QUERY_REPLY && (m->pflags & ~OMC_BUFFER_FRAME)) ||
        (m->type == OMC__MSG_LIST_REPLY && (m->nkeys > 0xFFFFu || m->keys_len > OMC__WIRE_LIST_MAX)))
        return OMC_ERR_INVALID_ARG;
    if (blen > OMC__WIRE_MAX - OMC__WIRE_HEADER || cap < OMC__WIRE_HEADER + blen) return OMC_ERR_TOO_LARGE;
    omc__put_u32(out, OMC__WIRE_MAGIC);
    out[4] = OMC__WIRE_VERSION;
    out[5] = m->type;
    omc__put_u16(out + 6, 0);
    omc__put_u64(out + 8, m->xfer);
    omc__put_u64(out + 16, m->incarnation);
    omc__put_u32(out + 24, m->seq);
    omc__put_u32(out + 28, blen);
    switch (m->type) {
        case OMC__MSG_HELLO:
            omc__put_u32(b, m->caps);
            omc__put_u16(b + 4, (uint16_t)m->nrecords);
            omc__put_u16(b + 6, 0);
            if (m->records_len) memcpy(b + 8, m->records, m->records_len);
            break;
        case OMC__MSG_QUERY:
            omc__put_u32(b, m->wait_ms);
            omc__put_u16(b + 4, (uint16_t)m->key_len);
            omc__put_u16(b + 6, 0);
            memcpy(b + 8, m->key, m->key_len);
            break;
        case OMC__MSG_QUERY_REPLY:
            omc__put_u64(b, m->entry_id);
            omc__put_u64(b + 8, m->size);
            omc__put_u32(b + 16, m->pflags);
            omc__put_u32(b + 20, m->readers_left);
            break;
        case OMC__MSG_PULL:
            omc__put_u64(b, m->entry_id);
            omc__put_u64(b + 8, m->expect_incarnation);
            omc__put_u64(b + 16, m->capacity);
            omc__put_u32(b + 24, m->budget_ms);
            omc__put_u16(b + 28, (uint16_t)m->key_len);
            b[30] = m->dp_kind;
            b[31] = 0;
            omc__put_u16(b + 32, (uint16_t)m->desc_len);
            omc__put_u16(b + 34, 0);
            memcpy(b + 36, m->key, m->key_len);
            if (m->desc_len) memcpy(b + 36 + m->key_len, m->desc, m->desc_len);
            break;
        case OMC__MSG_DONE:
            omc__put_u64(b, m->bytes);
            break;
        case OMC__MSG_LIST:
            omc__put_u32(b, m->cursor);
            omc__put_u32(b + 4, 0);
            break;
        case OMC__MSG_LIST_REPLY:
            omc__put_u32(b, m->cursor);
            omc__put_u16(b + 4, (uint16_t)m->nkeys);
            omc__put_u16(b + 6, 0);
            if (m->keys_len) memcpy(b + 8, m->keys, m->keys_len);
            break;
        case OMC__MSG_ERROR:
            omc__put_u32(b, (uint32_t)m->code);
            omc__put_u16(b + 4, (uint16_t)m->text_len);
            omc__put_u16(b + 6, 0);
            omc__put_u64(b + 8, m->detail);
            if (m->text_len) memcpy(b + 16, m->text, m->text_len);
            break;
        default:
            break;
    }
    *out_len = OMC__WIRE_HEADER + blen;
    return OMC_OK;
}

/* ---- TCP data plane records and headers ----------------------------------------------------- */

#define OMC__TCP_HELLO_MAGIC 0x54434D4Fu    /* "OMCT" */
#define OMC__TCP_ACK_MAGIC   0x41434D4Fu    /* "OMCA" */
#define OMC__TCP_DATA_MAGIC  0x44434D4Fu    /* "OMCD" */
#define OMC__TCP_END_MAGIC   0x45434D4Fu    /* "OMCE" */
#define OMC__TCP_RECEIPT_MAGIC 0x47434D4Fu  /* "OMCG": got every byte ("OMCR" is the RDMA endpoint record's) */
#define OMC__TCP_RECEIPT_SIZE 8
#define OMC__TCP_AHEAD_MAX 16           /* requests a receiver holds back behind a PULL's receipt */
#define OMC__TCP_READ_AHEAD 64          /* sender: pipelined requests read at once per listener pass */
#define OMC__TCP_TRAILER_SIZE 8
#define OMC__TCP_HELLO_VERSION 4        /* 1 sent no ticket, 2 sent it in clear, 3 requests with a
                                           CRC of the key: all refused now */
#define OMC__TCP_HELLO_SIZE  72         /* since version 3: ticket id and the proof of its secret */
#define OMC__TCP_HELLO_SIGNED 40        /* the bytes of the hello the proof covers */
#define OMC__TCP_NONCE_MAGIC 0x4E434D4Fu    /* "OMCN": the data port's first bytes on a connection */
#define OMC__TCP_NONCE_SIZE  24
#define OMC__TCP_TICKET_SIZE 16         /* a ticket's id: names it, proves nothing */
#define OMC__TCP_SECRET_SIZE 32         /* a ticket's secret: never on a data connection */
#define OMC__REC_TICKET      0x0101u    /* HELLO record type: the data-connection ticket (id | secret) */
#define OMC__REC_TICKET_V2   0x0100u    /* what a sender of data hello version 2 offered instead */
#define OMC__TCP_ACK_SIZE    8
#define OMC__TCP_HEADER_SIZE 24
#define OMC__TCP_REQUEST_MAGIC 0x50434D4Fu  /* "OMCP": a request on the data connection */
#define OMC__TCP_STATUS_MAGIC  0x53434D4Fu  /* "OMCS": the sender's answer when no payload follows */
#define OMC__TCP_REQUEST_SIZE 64
#define OMC__TCP_PROOF_SIZE   16            /* a request's key proof: truncated HMAC-SHA-256 */
#define OMC__TCP_STATUS_SIZE  24            /* = OMC__TCP_HEADER_SIZE: the receiver reads 24 bytes either way */
#define OMC__TCP_REQ_PULL  1                /* send the entry's bytes (header, payload, receipt, trailer) */
#define OMC__TCP_REQ_CLAIM 2                /* the receiver has the bytes (inline metadata): record the read */
#define OMC__TCP_REQ_OP_AT 4               /* where a request carries its op */

/* HELLO record type 1: u16 port, u16 reserved, host text. host_out gets a terminated copy. */
OMC__PRIVATE omc_result omc__tcp_record_decode(const uint8_t* v, uint32_t n, uint16_t* port, char* host_out, size_t host_size) {
    uint32_t hl;
    if (!v || n < 4 || n - 4 > 255 || omc__get_u16(v + 2) != 0) return OMC_ERR_MALFORMED;
    *port = omc__get_u16(v);
    hl = n - 4;
    if (*port == 0 || memchr(v + 4, 0, hl) || hl >= host_size) return OMC_ERR_MALFORMED;
    memcpy(host_out, v + 4, hl);
    host_out[hl] = '\0';
    return OMC_OK;
}

/* The nonce frame the data port writes first on every connection: u32 "OMCN", u16 hello version
   (4), u16 reserved, 16 random bytes. A data hello must prove the ticket over this nonce, so a
   hello seen on the wire is worth nothing on another connection. */
OMC__PRIVATE void omc__tcp_nonce_encode(uint8_t* p, const uint8_t* nonce) {
    omc__put_u32(p, OMC__TCP_NONCE_MAGIC);
    omc__put_u16(p + 4, OMC__TCP_HELLO_VERSION);
    omc__put_u16(p + 6, 0);
    memcpy(p + 8, nonce, 16);
}

OMC__PRIVATE omc_result omc__tcp_nonce_decode(const uint8_t* p, uint8_t* nonce) {
    if (omc__get_u32(p) != OMC__TCP_NONCE_MAGIC || omc__get_u16(p + 6) != 0) return OMC_ERR_PROTOCOL;
    if (omc__get_u16(p + 4) != OMC__TCP_HELLO_VERSION) return OMC_ERR_VERSION;
    memcpy(nonce, p + 8, 16);
    return OMC_OK;
}

/* The proof of a data hello: HMAC-SHA-256 keyed with the ticket's secret over the label
   "omniconn data hello 4", the connection's nonce and the hello's first 40 bytes (magic,
   version, token, incarnation, ticket id), so it holds for this connection, token and ticket only. */
OMC__PRIVATE void omc__tcp_hello_proof(const uint8_t* secret, const uint8_t* nonce, const uint8_t* hello, uint8_t* out) {
    static const char label[] = "omniconn data hello 4";
    const void* part[3];
    size_t len[3];
    part[0] = label; len[0] = sizeof(label) - 1;
    part[1] = nonce; len[1] = 16;
    part[2] = hello; len[2] = OMC__TCP_HELLO_SIGNED;
    omc__hmac_sha256(secret, OMC__TCP_SECRET_SIZE, part, len, 3, out);
}

/* HMAC-SHA-256 keyed with a ticket's secret, its two padded key blocks hashed once: a request's
   key proof then costs two SHA-256 blocks less (RFC 2104 computed in two halves). */
typedef struct omc__tcp_mac {
    omc__sha256 inner, outer;           /* after (secret ^ ipad) and (secret ^ opad) */
} omc__tcp_mac;

OMC__PRIVATE void omc__tcp_mac_init(omc__tcp_mac* m, const uint8_t* secret) {
    uint8_t ipad[64], opad[64];
    int i;
    for (i = 0; i < 64; i++) {
        uint8_t k = i < OMC__TCP_SECRET_SIZE ? secret[i] : 0;
        ipad[i] = (uint8_t)(k ^ 0x36);
        opad[i] = (uint8_t)(k ^ 0x5c);
    }
    omc__sha256_init(&m->inner);
    omc__sha256_update(&m->inner, ipad, sizeof(ipad));
    omc__sha256_init(&m->outer);
    omc__sha256_update(&m->outer, opad, sizeof(opad));
}

/* A request's key proof: HMAC-SHA-256 keyed with the ticket's secret over the label
   "omniconn request key 4", the entry id (u64) and the qualified key, first 16 bytes. Only the
   two ends of the session know the secret, so the proof neither shows the key nor lets anyone
   test a guessed key against it, and a proof copied from another session proves nothing here. */
OMC__PRIVATE void omc__tcp_key_proof(const omc__tcp_mac* m, uint64_t entry_id, const char* qkey, uint32_t qlen, uint8_t* out) {
    static const char label[] = "omniconn request key 4";
    uint8_t id[8], digest[OMC__SHA256_SIZE], full[OMC__SHA256_SIZE];
    omc__sha256 s = m->inner;
    omc__put_u64(id, entry_id);
    omc__sha256_update(&s, label, sizeof(label) - 1);
    omc__sha256_update(&s, id, sizeof(id));
    omc__sha256_update(&s, qkey, qlen);
    omc__sha256_final(&s, digest);
    s = m->outer;
    omc__sha256_update(&s, digest, sizeof(digest));
    omc__sha256_final(&s, full);
    memcpy(out, full, OMC__TCP_PROOF_SIZE);
}

/* The data hello, version 4 (72 bytes): the ticket id names the session's ticket and the proof
   shows its secret without sending it. */
OMC__PRIVATE void omc__tcp_hello_encode(uint8_t* p, uint64_t token, uint64_t incarnation, const uint8_t* ticket_id,
                                        const uint8_t* secret, const uint8_t* nonce) {
    omc__put_u32(p, OMC__TCP_HELLO_MAGIC);
    omc__put_u16(p + 4, OMC__TCP_HELLO_VERSION);
    omc__put_u16(p + 6, 0);
    omc__put_u64(p + 8, token);
    omc__put_u64(p + 16, incarnation);
    memcpy(p + 24, ticket_id, OMC__TCP_TICKET_SIZE);
    omc__tcp_hello_proof(secret, nonce, p, p + OMC__TCP_HELLO_SIGNED);
}

/* The first 8 bytes of a data hello: OMC_OK if they start a hello of this version. */
OMC__PRIVATE omc_result omc__tcp_hello_start(const uint8_t* p, size_t n) {
    if (n < 8 || omc__get_u32(p) != OMC__TCP_HELLO_MAGIC) return OMC_ERR_MALFORMED;
    if (omc__get_u16(p + 4) != OMC__TCP_HELLO_VERSION) return OMC_ERR_VERSION;
    if (omc__get_u16(p + 6) != 0) return OMC_ERR_MALFORMED;
    return OMC_OK;
}

/* A whole hello of this version; ticket_id (16 bytes) receives the id it names (its proof is checked
   against that ticket's secret by the caller). */
OMC__PRIVATE omc_result omc__tcp_hello_decode(const uint8_t* p, size_t n, uint64_t* token, uint64_t* incarnation, uint8_t* ticket_id) {
    omc_result r = omc__tcp_hello_start(p, n);
    if (r != OMC_OK) return r;
    if (n != OMC__TCP_HELLO_SIZE) return OMC_ERR_MALFORMED;
    *token = omc__get_u64(p + 8);
    *incarnation = omc__get_u64(p + 16);
    memcpy(ticket_id, p + 24, OMC__TCP_TICKET_SIZE);
    if (*token == 0) return OMC_ERR_MALFORMED;
    return OMC_OK;
}

OMC__PRIVATE void omc__tcp_header_encode(uint8_t* p, uint64_t xfer, uint64_t size) {
    omc__put_u32(p, OMC__TCP_DATA_MAGIC);
    omc__put_u32(p + 4, 0);
    omc__put_u64(p + 8, xfer);
    omc__put_u64(p + 16, size);
}

/* Check a data header against what the receiver expects: OMC_ERR_PROTOCOL if the sender lies
   (another transfer, another size, more than the destination holds). */
OMC__PRIVATE omc_result omc__tcp_header_check(const uint8_t* p, uint64_t xfer, uint64_t expect_size, uint64_t capacity) {
    uint64_t size;
    if (omc__get_u32(p) != OMC__TCP_DATA_MAGIC || omc__get_u32(p + 4) != 0) return OMC_ERR_MALFORMED;
    size = omc__get_u64(p + 16);
    if (omc__get_u64(p + 8) != xfer || size != expect_size || size > capacity) return OMC_ERR_PROTOCOL;
    return OMC_OK;
}

/* A request on a data connection (64 bytes): what a PULL on the side channel says, naming the
   entry by its id only (no key travels outside the side channel, only a proof of it). */
typedef struct omc__tcp_req {
    uint8_t op;                         /* OMC__TCP_REQ_* */
    uint32_t budget_ms;                 /* 0 = vLLM-Omni's rule */
    uint64_t xfer, entry_id, expect_incarnation, capacity;
    uint8_t proof[OMC__TCP_PROOF_SIZE]; /* omc__tcp_key_proof of the key the receiver asks for */
} omc__tcp_req;

OMC__PRIVATE void omc__tcp_req_encode(uint8_t* p, const omc__tcp_req* q) {
    omc__put_u32(p, OMC__TCP_REQUEST_MAGIC);
    p[4] = q->op;
    p[5] = 0;
    omc__put_u16(p + 6, 0);
    omc__put_u64(p + 8, q->xfer);
    omc__put_u64(p + 16, q->entry_id);
    omc__put_u64(p + 24, q->expect_incarnation);
    omc__put_u64(p + 32, q->capacity);
    omc__put_u32(p + 40, q->budget_ms);
    omc__put_u32(p + 44, 0);
    memcpy(p + 48, q->proof, OMC__TCP_PROOF_SIZE);
}

/* OMC_ERR_MALFORMED for anything but exactly one well-formed request. */
OMC__PRIVATE omc_result omc__tcp_req_decode(const uint8_t* p, size_t n, omc__tcp_req* q) {
    memset(q, 0, sizeof(*q));
    if (n != OMC__TCP_REQUEST_SIZE || omc__get_u32(p) != OMC__TCP_REQUEST_MAGIC) return OMC_ERR_MALFORMED;
    if ((p[4] != OMC__TCP_REQ_PULL && p[4] != OMC__TCP_REQ_CLAIM) || p[5] || omc__get_u16(p + 6) || omc__get_u32(p + 44))
        return OMC_ERR_MALFORMED;
    q->op = p[4];
    q->xfer = omc__get_u64(p + 8);
    q->entry_id = omc__get_u64(p + 16);
    q->expect_incarnation = omc__get_u64(p + 24);
    q->capacity = omc__get_u64(p + 32);
    q->budget_ms = omc__get_u32(p + 40);
    memcpy(q->proof, p + 48, OMC__TCP_PROOF_SIZE);
    if (q->entry_id == 0) return OMC_ERR_MALFORMED;
    return OMC_OK;
}

OMC__PRIVATE void omc__tcp_status_encode(uint8_t* p, omc_result code, uint64_t xfer, uint64_t detail) {
    omc__put_u32(p, OMC__TCP_STATUS_MAGIC);
    omc__put_u32(p + 4, (uint32_t)(int32_t)code);
    omc__put_u64(p + 8, xfer);
    omc__put_u64(p + 16, detail);
}

/* A status record for transfer xfer: *code its status (0 or a negative omc_result), *detail the
   payload size for OMC_ERR_TOO_LARGE. OMC_ERR_PROTOCOL for another transfer's or a positive code. */
OMC__PRIVATE omc_result omc__tcp_status_decode(const uint8_t* p, uint64_t xfer, int32_t* code, uint64_t* detail) {
    if (omc__get_u32(p) != OMC__TCP_STATUS_MAGIC) return OMC_ERR_MALFORMED;
    *code = (int32_t)omc__get_u32(p + 4);
    *detail = omc__get_u64(p + 16);
    if (omc__get_u64(p + 8) != xfer || *code > 0) return OMC_ERR_PROTOCOL;
    return OMC_OK;
}

/* ---- metadata body --------------------------------------------------------------------------- */

typedef struct omc__net_meta {
    uint64_t entry_id;
    uint16_t port;
    uint32_t caps;
    char host[OMC_TCP_HOST_MAX];
    const uint8_t* inl;                 /* inline metadata: the payload bytes (in the blob), else NULL */
} omc__net_meta;

OMC__PRIVATE uint32_t omc__net_meta_body_size(const char* host) { return 16u + (uint32_t)strlen(host); }

OMC__PRIVATE void omc__net_meta_body_encode(uint8_t* b, uint64_t entry_id, uint16_t port, uint32_t caps, const char* host) {
    uint32_t hl = (uint32_t)strlen(host);
    omc__put_u64(b, entry_id);
    omc__put_u16(b + 8, port);
    omc__put_u16(b + 10, (uint16_t)hl);
    omc__put_u32(b + 12, caps);
    memcpy(b + 16, host, hl);
}

/* The body of n bytes; meta_flags and data_size are the envelope's. An inline body (envelope
   flag bit 0) ends with exactly data_size payload bytes, at most OMC_TCP_MAX_INLINE of them. */
OMC__PRIVATE omc_result omc__net_meta_body_decode(const uint8_t* b, uint32_t n, uint32_t meta_flags, uint64_t data_size, omc__net_meta* out) {
    uint32_t hl;
    uint64_t inl = (meta_flags & OMC_META_FLAG_INLINE) ? data_size : 0;
    memset(out, 0, sizeof(*out));
    if (!b || n < 16 || inl > OMC_TCP_MAX_INLINE) return OMC_ERR_MALFORMED;
    hl = omc__get_u16(b + 10);
    if (hl == 0 || hl > 255 || (uint64_t)n != 16u + hl + inl || memchr(b + 16, 0, hl)) return OMC_ERR_MALFORMED;
    if (meta_flags & OMC_META_FLAG_INLINE) out->inl = b + 16 + hl;
    out->entry_id = omc__get_u64(b);
    out->port = omc__get_u16(b + 8);
    out->caps = omc__get_u32(b + 12);
    if (out->entry_id == 0 || out->port == 0) return OMC_ERR_MALFORMED;
    memcpy(out->host, b + 16, hl);
    out->host[hl] = '\0';
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: sockets with deadlines                                              */
/* ============================================================================================== */

#define OMC__NET_SLICE_MS 100           /* longest single wait: closing and ABORT are noticed this fast */
#define OMC__NET_CONNECT_MS 30000       /* a TCP connect with no deadline still gives up (vLLM-Omni's 30 s) */

/* Milliseconds from now to the deadline for poll(), rounded up (no early wake-ups that spin),
   at most cap_ms; 0 once the deadline has passed. */
OMC__PRIVATE int omc__poll_ms(omc_time_ns deadline, int cap_ms) {
    omc_time_ns now, left;
    if (deadline == OMC_WAIT_FOREVER) return cap_ms;
    now = omc_now_ns();
    if (deadline <= now) return 0;
    left = (deadline - now + 999999) / 1000000;
    return left > cap_ms ? cap_ms : (int)left;
}

OMC__PRIVATE int omc__deadline_passed(omc_time_ns deadline) { return deadline != OMC_WAIT_FOREVER && omc_now_ns() >= deadline; }

/* vLLM-Omni's rule for a transfer nobody bounded: 30 s + 5 s per started 100 MiB. */
OMC__PRIVATE omc_time_ns omc__net_default_budget_ns(uint64_t size) {
    uint64_t blocks = (size + (100ull << 20) - 1) / (100ull << 20);
    return (omc_time_ns)(30000 + 5000 * blocks) * 1000000LL;
}

/* host:port -> a socket address. host "*" (passive only) = every IPv4 interface. */
OMC__PRIVATE omc_result omc__net_resolve(const char* host, uint16_t port, int passive, struct sockaddr_storage* sa, socklen_t* salen) {
    struct addrinfo hints, *res = NULL;
    char ps[8];
    int rc;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    snprintf(ps, sizeof(ps), "%u", (unsigned)port);
    if (passive && strcmp(host, "*") == 0) { hints.ai_family = AF_INET; host = NULL; }
    rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0 || !res) return OMC_ERR_INVALID_ARG;
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *salen = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    return OMC_OK;
}

/* A name or literal -> its numeric form (what we bind and advertise). */
OMC__PRIVATE omc_result omc__net_numeric_host(const char* host, char* out, size_t out_size) {
    struct sockaddr_storage sa;
    socklen_t salen;
    if (strcmp(host, "*") == 0) { snprintf(out, out_size, "*"); return OMC_OK; }
    if (omc__net_resolve(host, 0, 0, &sa, &salen) != OMC_OK) return OMC_ERR_INVALID_ARG;
    if (getnameinfo((struct sockaddr*)&sa, salen, out, (socklen_t)out_size, NULL, 0, NI_NUMERICHOST) != 0) return OMC_ERR_INVALID_ARG;
    return OMC_OK;
}

/* Wait for events on one fd until the deadline (in slices, so *abort is seen). Returns 1 ready,
   0 deadline passed, -1 aborted. */
OMC__PRIVATE int omc__fd_wait(int fd, short events, omc_time_ns deadline, const int* abort, short* revents) {
    for (;;) {
        struct pollfd p;
        int ms = omc__poll_ms(deadline, OMC__NET_SLICE_MS), rc;
        if (abort && omc__load(abort)) return -1;
        p.fd = fd; p.events = events; p.revents = 0;
        rc = poll(&p, 1, ms);
        if (rc > 0) { if (revents) *revents = p.revents; return 1; }
        if (rc < 0 && errno != EINTR) { if (revents) *revents = POLLERR; return 1; }
        if (rc == 0 && ms == 0) return 0;
    }
}

/* Write every byte, or fail: OMC_ERR_CONNECTION (reset, closed), OMC_ERR_TIMEOUT (deadline),
   or the code in *abort. Short writes and EINTR are retried. */
OMC__PRIVATE omc_result omc__fd_write_all(int fd, const uint8_t* p, uint64_t n, omc_time_ns deadline, const int* abort) {
    while (n) {
        size_t want = (size_t)omc__min(n, (uint64_t)OMNICONN_TCP_CHUNK);
        ssize_t k = send(fd, p, want, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) { p += k; n -= (uint64_t)k; continue; }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            short rev = 0;
            int w = omc__fd_wait(fd, POLLOUT, deadline, abort, &rev);
            if (w < 0) return (omc_result)omc__load(abort);
            if (w == 0) return OMC_ERR_TIMEOUT;
            if ((rev & (POLLERR | POLLHUP)) && !(rev & POLLOUT)) return OMC_ERR_CONNECTION;
            continue;
        }
        return OMC_ERR_CONNECTION;
    }
    return OMC_OK;
}

/* Read exactly n bytes (small control messages only; payloads go through the plane's progress). */
/* Read n bytes, or fail: OMC_ERR_CONNECTION (EOF, reset), OMC_ERR_TIMEOUT (deadline), or
   OMC_ERR_CLOSED once *stop (a connector's closed flag; NULL: none) is set. */
OMC__PRIVATE omc_result omc__fd_read_all(int fd, uint8_t* p, size_t n, omc_time_ns deadline, const int* stop) {
    while (n) {
        ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
        if (k > 0) { p += k; n -= (size_t)k; continue; }
        if (k == 0) return OMC_ERR_CONNECTION;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int w = omc__fd_wait(fd, POLLIN, deadline, stop, NULL);
            if (w == 0) return OMC_ERR_TIMEOUT;
            if (w < 0) return OMC_ERR_CLOSED;
            continue;
        }
        return OMC_ERR_CONNECTION;
    }
    return OMC_OK;
}


OMC__PRIVATE void omc__fd_tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));   /* headers must not wait for Nagle */
}

/* A data connection while payload streams: blocking, but no call waits longer than a slice
   (SO_SNDTIMEO/SO_RCVTIMEO), so deadlines and ABORT are still seen. The kernel then moves a
   whole chunk per system call (as a plain socket copy does) instead of one poll + one call per
   wake-up. Calls that must not block pass MSG_DONTWAIT. */
OMC__PRIVATE void omc__fd_streaming(int fd) {
    struct timeval tv;
    int fl = fcntl(fd, F_GETFL, 0);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    tv.tv_sec = 0;
    tv.tv_usec = OMC__NET_SLICE_MS * 1000;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Non-blocking connect bounded by the deadline (and by OMC__NET_CONNECT_MS when there is none). */
/* Connect to host:port before the deadline; OMC_ERR_CLOSED once *stop (NULL: none) is set. */
OMC__PRIVATE omc_result omc__fd_connect(const char* host, uint16_t port, omc_time_ns deadline, const int* stop, int* out) {
    struct sockaddr_storage sa;
    socklen_t salen;
    int fd, w, err = 0;
    socklen_t elen = sizeof(err);
    *out = -1;
    if (omc__net_resolve(host, port, 0, &sa, &salen) != OMC_OK) return OMC_ERR_INVALID_ARG;
    if (deadline == OMC_WAIT_FOREVER) deadline = omc_deadline_after_ms(OMC__NET_CONNECT_MS);
    fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return OMC_ERR_SYSTEM;
    if (connect(fd, (struct sockaddr*)&sa, salen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) { close(fd); return OMC_ERR_CONNECTION; }
        w = omc__fd_wait(fd, POLLOUT, deadline, stop, NULL);
        if (w <= 0) { close(fd); return w == 0 ? OMC_ERR_TIMEOUT : OMC_ERR_CLOSED; }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) { close(fd); return OMC_ERR_CONNECTION; }
    }
    omc__fd_tune(fd);
    *out = fd;
    return OMC_OK;
}


/* ============================================================================================== */
/* [SECTION] Implementation: the TCP data plane                                                  */
/* ============================================================================================== */
/*
    Sender: a listening socket (the data port). The connector's listener thread accepts, reads
    each connection's 72-byte hello (bounded: 5 s; at most 64 waiting, more left in the kernel's
    accept queue, a silent one replaced by a newcomer after 250 ms), registers it under its
    ticket and token and acks; idle connections are watched for a request (64 bytes, queued for
    the connector once whole) or EOF (a receiver that went away: closed). A push takes the
    connection its PULL names (or the one its request came on), marks it busy, writes a header
    and the payload and gives it back - or kills it on any failure, because a half-written
    payload would corrupt the next transfer. The listener starts every push without blocking;
    a payload it wrote whole it also finishes itself (it watches the connection for the
    receipt, commits, writes the trailer), a larger one a worker finishes (each write bounded
    by the push deadline, ABORT checked between waits). Connections are never freed by a
    worker: it marks them dead and the listener, the only thread that polls them, closes and
    frees them.

    Receiver: one connection per channel, opened at the channel's first PULL (connect, hello,
    ack, all bounded by the get's deadline; a few tries if the sender closes it before the ack)
    and cached with it; the get's thread writes its
    request there and reads the answer (a header and the payload, or a status record). Payload bytes are read straight
    into the destination buffer in the receiver's pool (no intermediate copy), never more than
    the header announced, and the header must announce exactly what the receiver expects.
*/

#define OMC__DP_TCP 1                   /* this plane's kind (HELLO record type, PULL byte 30) */
#define OMC__TCP_MAX_PENDING 64         /* accepted connections still owing their hello */
#define OMC__TCP_PENDING_GRACE_MS 250   /* ...none of which a newer one replaces before this */
#define OMC__TCP_CONNECT_TRIES 4        /* receiver: data connections closed before the ack, tried again */
#define OMC__TCP_RETRY_MS    20         /* ...after a jittered pause, doubled each time (within the deadline) */
#ifndef OMC__TCP_MAX_CONNS              /* (the limits below are private; a test may shrink them) */
#define OMC__TCP_MAX_CONNS   4096       /* registered data connections per sender */
#endif
#define OMC__TCP_HELLO_MS    5000       /* a connection must say hello within this */
#ifndef OMC__TCP_MAX_TICKETS
#define OMC__TCP_MAX_TICKETS 4096       /* tickets (side-channel sessions) a sender remembers */
#endif
#define OMC__TCP_SOURCE_CONNS   (OMC__TCP_MAX_CONNS / 4)     /* registered connections from one address */
#define OMC__TCP_SOURCE_TICKETS (OMC__TCP_MAX_TICKETS / 4)   /* tickets held by sessions from one address */
/* the same shares per CURVE client key: one key, from however many addresses, takes no more */
#define OMC__TCP_KEY_CONNS      OMC__TCP_SOURCE_CONNS
#define OMC__TCP_KEY_TICKETS    OMC__TCP_SOURCE_TICKETS
#define OMC__TCP_PER_TICKET  16         /* data connections one ticket may register */
#define OMC__TCP_TICKET_IDLE_MS 600000  /* a ticket with no data connection lives this long */
#define OMC__TCP_PAUSE_MS    100        /* accept() out of descriptors: stop polling the port this long */
#define OMC__TCP_FLOOD_LOG_MS 10000     /* at most one WARN per kind of flood per this interval */

/* PENDING: owes its hello; IDLE: registered, watched for a request (or EOF); BUSY: a push (or
   a request the connector has not served yet) owns it; RECEIPT: the listener wrote a whole
   payload and watches for the receipt; DEAD: to be freed by the listener. */
enum { OMC__TCONN_PENDING = 0, OMC__TCONN_IDLE, OMC__TCONN_BUSY, OMC__TCONN_DEAD, OMC__TCONN_RECEIPT };

/* A source: the address (numeric text) side-channel sessions and data connections come from,
   or with CURVE the client key they authenticated with ("curve:" and the key in hex). No address
   and no key may hold more than a quarter of the tickets or of the registered connections, and
   a full table makes room at the expense of the address that holds the most. */
typedef struct omc__tcp_source {
    uint32_t ntickets, nconns;
    uint32_t len;
    char addr[80];
} omc__tcp_source;

/* A ticket: handed to one side-channel session (a ZMQ routing id) in the HELLO answer, and
   proven in the data hello: a data connection belongs to the session whose ticket it proved,
   and only a PULL from that session may name it. The id is public (the data hello names it);
   the secret travels only inside the HELLO answer (encrypted when CURVE is on). */
typedef struct omc__tcp_ticket {
    struct omc__tcp_ticket* next;
    uint8_t ticket[OMC__TCP_TICKET_SIZE];   /* its id */
    uint8_t secret[OMC__TCP_SECRET_SIZE];
    omc__tcp_mac mac;                   /* keyed with the secret: its requests' key proofs */
    uint32_t rid_len;
    uint8_t rid[256];
    uint32_t nconns;                    /* registered data connections that showed it */
    omc_time_ns last_used;
    int detached;                       /* a later HELLO from its routing id got a new ticket */
    int gone;                           /* its side-channel connection went: its connections serve nothing */
    int zfd;                            /* that connection's descriptor (-1: unknown) */
    omc__tcp_source* src;               /* the address of the session's side channel */
    char peer_key[OMC__PEER_KEY_MAX];   /* the session's CURVE public key in hex ("" = no CURVE):
                                           a PULL must come from the same key */
    omc__tcp_source* ksrc;              /* that key's share (NULL without CURVE) */
} omc__tcp_ticket;

typedef struct omc__tcp_conn {
    struct omc__tcp_conn* next;
    int fd;
    int state;                          /* OMC__TCONN_* (under the plane's mu) */
    uint64_t token;
    uint64_t incarnation;               /* the receiver's */
    omc__tcp_ticket* ticket;            /* registered connections: the session it belongs to */
    omc__tcp_mac mac;                   /* its ticket's (a copy: a request is checked off the lock) */
    uint8_t key[OMC__TCP_TICKET_SIZE + 8];  /* ticket | token: its name in the plane's map */
    omc_time_ns hello_deadline;         /* also: a request begun must be complete by then */
    omc_time_ns accepted;               /* when accept() took it */
    omc_time_ns idle_since;
    uint32_t hello_got;
    uint8_t hello[OMC__TCP_HELLO_SIZE];
    uint8_t nonce[16];                  /* sent on accept: this connection's hello proves over it */
    char addr[64];                      /* the peer's address (numeric), from accept() */
    omc__tcp_source* src;               /* registered connections: counted there */
    omc__tcp_source* ksrc;              /* and in its ticket's CURVE key's share (NULL: none) */
    /* requests on the connection (listener only) */
    struct omc__tcp_conn* next_ready;   /* in the plane's list of requests to serve */
    uint32_t req_got;
    uint8_t req[OMC__TCP_REQUEST_SIZE];
    uint32_t rcpt_got;                  /* RECEIPT: bytes of the receipt so far */
    uint8_t rcpt[OMC__TCP_RECEIPT_SIZE];
    int rcpt_done;                      /* the receipt came (rcpt_result OMC_OK) or the wait failed */
    omc_result rcpt_result;
} omc__tcp_conn;

typedef struct omc__tcp_plane {
    omc_hooks hooks;
    uint32_t read_ahead;                /* listener: requests read right after an answer, this pass */
    omc_pool* pool;
    int listen_fd;                      /* sender: the data port; -1 on a receiver */
    uint16_t port;
    pthread_mutex_t mu;
    pthread_cond_t idle_cv;             /* a busy connection became idle */
    omc__tcp_conn* conns;               /* every accepted connection */
    omc__tcp_conn* ready;               /* listener only: complete requests the connector serves next */
    omc__smap tokens;                   /* ticket | token (24 bytes) -> registered connection */
    omc__tcp_ticket* tickets;           /* every ticket, newest first */
    omc__smap by_ticket, by_rid;        /* ticket -> ticket; routing id -> ticket */
    omc__smap sources;                  /* address -> omc__tcp_source */
    omc__smap by_fd;                    /* side-channel connection descriptor -> its newest ticket */
    uint32_t ntickets;
    uint32_t npending;
    omc_time_ns paused_until;           /* listener only: accept() ran out of descriptors */
    omc_time_ns next_sweep;             /* listener only: idle connections and tickets */
    omc_time_ns flood_logged[3];        /* listener only: out of descriptors, pending full, bad hellos */
    uint64_t flood_quiet[3];            /* events since that log line */
    uint64_t nregistered;               /* atomic: for health */
    uint64_t protocol_errors;           /* atomic */
    /* receiver: the pause before a data connection is tried again ends early when the connector
       closes (omc__tcp_plane_wake), so a close or destroy never sits out a retry pause */
    const int* closing;                 /* the connector's closed flag (atomic); NULL: never */
    pthread_mutex_t pause_mu;
    pthread_cond_t pause_cv;            /* with pause_mu: closing was set */
    int retry_ms;                       /* the first pause, OMC__TCP_RETRY_MS (a test may lengthen it) */
} omc__tcp_plane;

/* Receiver side: one per channel. */
typedef struct omc__tcp_rx {
    int fd;                             /* -1 until the first PULL */
    uint64_t token;
    int has_ticket;                     /* the sender's HELLO gave this channel a ticket */
    uint8_t ticket[OMC__TCP_TICKET_SIZE];   /* its id, named in the data hello */
    uint8_t secret[OMC__TCP_SECRET_SIZE];   /* its secret: proven in the data hello, never sent */
    omc__tcp_mac mac;                   /* keyed with it: the key proofs of our requests */
    char host[OMC_TCP_HOST_MAX];
    uint16_t port;
    uint32_t hdr_got, trl_got;
    int receipt_sent;                   /* this transfer's receipt is on its way */
    uint8_t op;                         /* 0: PULL on the side channel; else the request sent here */
    int refused;                        /* the sender answered the request with a status record */
    uint64_t detail;                    /* its detail (OMC_ERR_TOO_LARGE: the payload size) */
    uint8_t hdr[OMC__TCP_HEADER_SIZE];
    uint8_t trl[OMC__TCP_TRAILER_SIZE];
    omc_time_ns deadline;               /* of the transfer in progress */
    /* requests sent ahead (pipelined): the sender reads the receipt of a PULL right after that
       PULL, so what is sent ahead of a PULL's receipt waits here and goes with the receipt */
    int owed;                           /* a PULL went, its receipt (or its refusal) not yet */
    uint32_t queued;                    /* requests waiting for that receipt */
    uint8_t queue[OMC__TCP_AHEAD_MAX * OMC__TCP_REQUEST_SIZE];
} omc__tcp_rx;

/* Sender side: what the plane keeps per push (in the job's OMC__DP_STATE_WORDS). */
typedef struct omc__tcp_push_state {
    uint64_t resume;                    /* stream bytes the listener's non-blocking start wrote */
    struct omc__tcp_conn* await;        /* the listener waits for the receipt on it */
} omc__tcp_push_state;
typedef char omc__tcp_push_state_fits[sizeof(omc__tcp_push_state) <= OMC__DP_STATE_WORDS * 8 ? 1 : -1];

OMC__PRIVATE omc_result omc__tcp_attach(void* user, omc_conn* conn, omc_pool* pool, const omc_hooks* hooks) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    (void)conn;
    T->pool = pool;
    T->hooks = *hooks;
    return OMC_OK;
}

OMC__PRIVATE void omc__tcp_detach(void* user) { (void)user; }

/* Bind the data port (sender). */
OMC__PRIVATE omc_result omc__tcp_listen(omc__tcp_plane* T, const char* bind_host, uint16_t port) {
    struct sockaddr_storage sa;
    socklen_t salen;
    int one = 1;
    if (omc__net_resolve(bind_host, port, 1, &sa, &salen) != OMC_OK) return OMC_ERR_INVALID_ARG;
    T->listen_fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (T->listen_fd < 0) return OMC_ERR_SYSTEM;
    setsockopt(T->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* the longest accept queue the system allows: when many receivers connect at once, those
       the listener has no pending slot for yet wait there (see omc__tcp_accept) instead of
       having their SYNs dropped and retransmitted a second later */
    if (bind(T->listen_fd, (struct sockaddr*)&sa, salen) != 0 || listen(T->listen_fd, SOMAXCONN) != 0) {
        OMC__LOG(&T->hooks, OMC_LOG_ERROR, OMC_LOGITEM_NET, "cannot listen on TCP data port %s:%u: %s", bind_host,
                 (unsigned)port, strerror(errno));
        close(T->listen_fd);
        T->listen_fd = -1;
        return OMC_ERR_CONNECTION;
    }
    salen = sizeof(sa);
    getsockname(T->listen_fd, (struct sockaddr*)&sa, &salen);
    T->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6*)&sa)->sin6_port : ((struct sockaddr_in*)&sa)->sin_port);
    return OMC_OK;
}

/* A flood (0 out of descriptors, 1 too many connections, 2 bad hellos) is logged at most once
   per OMC__TCP_FLOOD_LOG_MS, saying how many events the quiet time hid (listener only). */
OMC__PRIVATE int omc__tcp_flood(omc__tcp_plane* T, int kind, unsigned long long* hidden) {
    omc_time_ns now = omc_now_ns();
    T->flood_quiet[kind]++;
    if (T->flood_logged[kind] && now - T->flood_logged[kind] < (omc_time_ns)OMC__TCP_FLOOD_LOG_MS * 1000000LL) return 0;
    T->flood_logged[kind] = now;
    *hidden = (unsigned long long)(T->flood_quiet[kind] - 1);
    T->flood_quiet[kind] = 0;
    return 1;
}

/* The source record of an address, made on first use; NULL out of memory (holds mu). */
OMC__PRIVATE omc__tcp_source* omc__tcp_source_get(omc__tcp_plane* T, const char* addr) {
    uint32_t len = (uint32_t)strlen(addr);
    omc__tcp_source* s = (omc__tcp_source*)omc__smap_get(&T->sources, addr, len);
    if (s || len >= sizeof(s->addr)) return s;
    s = (omc__tcp_source*)omc__calloc(&T->hooks, sizeof(*s));
    if (!s) return NULL;
    memcpy(s->addr, addr, len);
    s->len = len;
    if (omc__smap_put(&T->sources, &T->hooks, s->addr, len, s) != OMC_OK) { omc__free(&T->hooks, s); return NULL; }
    return s;
}

/* Forget a source that holds nothing any more (holds mu). */
OMC__PRIVATE void omc__tcp_source_put(omc__tcp_plane* T, omc__tcp_source* s) {
    if (!s || s->ntickets || s->nconns) return;
    omc__smap_del(&T->sources, &T->hooks, s->addr, s->len);
    omc__free(&T->hooks, s);
}

/* The global table of registered connections is full: close the idle connection, unused
   longest, of the address with the most registered connections - never one of `mine`, the
   address asking. 1 if one was closed (holds mu; listener). */
OMC__PRIVATE void omc__tcp_conn_evict(omc__tcp_plane* T, omc__tcp_conn* c);
OMC__PRIVATE int omc__tcp_evict_idle(omc__tcp_plane* T, const omc__tcp_source* mine) {
    omc__tcp_conn *c, *best = NULL;
    for (c = T->conns; c; c = c->next) {
        if (c->state != OMC__TCONN_IDLE || c->req_got || !c->src || c->src == mine) continue;
        if (!best || c->src->nconns > best->src->nconns || (c->src->nconns == best->src->nconns && c->idle_since < best->idle_since)) best = c;
    }
    if (!best) return 0;
    OMC__LOG(&T->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "data port: all %d registrations taken: closed an idle connection of %s (%u registered)",
             OMC__TCP_MAX_CONNS, best->src->addr, (unsigned)best->src->nconns);
    omc__tcp_conn_evict(T, best);
    return 1;
}

/* Forget a registered connection's name and its place in its ticket's count (holds mu). */
OMC__PRIVATE void omc__tcp_unregister(omc__tcp_plane* T, omc__tcp_conn* c) {
    if (!c->ticket) return;
    if (omc__smap_get(&T->tokens, (const char*)c->key, sizeof(c->key)) == c) omc__smap_del(&T->tokens, &T->hooks, (const char*)c->key, sizeof(c->key));
    omc__sub(&T->nregistered, 1u);
    c->ticket->nconns--;
    c->ticket->last_used = omc_now_ns();
    c->ticket = NULL;
    if (c->src) { c->src->nconns--; omc__tcp_source_put(T, c->src); c->src = NULL; }
    if (c->ksrc) { c->ksrc->nconns--; omc__tcp_source_put(T, c->ksrc); c->ksrc = NULL; }
}

/* Close and free one connection (caller holds mu; the connection is unlinked here). */
OMC__PRIVATE void omc__tcp_conn_free(omc__tcp_plane* T, omc__tcp_conn* c) {
    omc__tcp_conn** pp;
    for (pp = &T->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) { *pp = c->next; break; }
    if (c->state == OMC__TCONN_PENDING) T->npending--;
    omc__tcp_unregister(T, c);
    if (c->fd >= 0) close(c->fd);
    omc__free(&T->hooks, c);
}

/* Close a connection that owes its hello to make room (accept, listener; holds mu), without
   freeing it: the poll round in progress may still hold its pointer (omc__tcp_serve walks
   the results after accepting), so it only becomes DEAD - closed, counted out, never read
   again - and omc__tcp_items frees it before the next round. */
OMC__PRIVATE void omc__tcp_conn_evict(omc__tcp_plane* T, omc__tcp_conn* c) {
    if (c->state == OMC__TCONN_PENDING) T->npending--;
    omc__tcp_unregister(T, c);
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = OMC__TCONN_DEAD;
}

/* Drop a ticket nobody uses (holds mu). */
OMC__PRIVATE void omc__tcp_ticket_free(omc__tcp_plane* T, omc__tcp_ticket* t) {
    omc__tcp_ticket** pp;
    for (pp = &T->tickets; *pp; pp = &(*pp)->next)
        if (*pp == t) { *pp = t->next; break; }
    omc__smap_del(&T->by_ticket, &T->hooks, (const char*)t->ticket, OMC__TCP_TICKET_SIZE);
    if (omc__smap_get(&T->by_rid, (const char*)t->rid, t->rid_len) == t) omc__smap_del(&T->by_rid, &T->hooks, (const char*)t->rid, t->rid_len);
    if (t->zfd >= 0 && omc__smap_get(&T->by_fd, (const char*)&t->zfd, sizeof(t->zfd)) == t)
        omc__smap_del(&T->by_fd, &T->hooks, (const char*)&t->zfd, sizeof(t->zfd));
    T->ntickets--;
    if (t->src) { t->src->ntickets--; omc__tcp_source_put(T, t->src); }
    if (t->ksrc) { t->ksrc->ntickets--; omc__tcp_source_put(T, t->ksrc); }
    omc__free(&T->hooks, t);
}

/* A HELLO from a routing id that has a ticket already: a peer chooses its routing id
   (ZMQ_ROUTING_ID), so this may be a later connection that took the id of one that went away.
   The old ticket is no longer the id's: PULLs from the id cannot name its data connections, it
   registers no new ones, and it goes when its last one does (holds mu). */
OMC__PRIVATE void omc__tcp_ticket_detach(omc__tcp_plane* T, omc__tcp_ticket* t) {
    if (omc__smap_get(&T->by_rid, (const char*)t->rid, t->rid_len) == t) omc__smap_del(&T->by_rid, &T->hooks, (const char*)t->rid, t->rid_len);
    t->detached = 1;
    if (t->nconns == 0) omc__tcp_ticket_free(T, t);
}

/* Remember that a ticket belongs to the side-channel connection t->zfd (holds mu). A
   descriptor is reused once its connection is gone, so the newest ticket takes it over. */
OMC__PRIVATE void omc__tcp_ticket_bind_fd(omc__tcp_plane* T, omc__tcp_ticket* t) {
    if (t->zfd < 0) return;
    omc__smap_del(&T->by_fd, &T->hooks, (const char*)&t->zfd, sizeof(t->zfd));
    if (omc__smap_put(&T->by_fd, &T->hooks, (const char*)&t->zfd, sizeof(t->zfd), t) != OMC_OK) t->zfd = -1;
}

/* The side-channel connection with descriptor fd went (the ROUTER's monitor said so; listener):
   its session's ticket goes with it - no new data connection may show it, its idle connections
   are closed now, and a request on one still busy is refused - so a ticket seen on the wire is
   worth nothing once its session has ended. */
OMC__PRIVATE void omc__tcp_session_gone(omc__tcp_plane* T, int fd) {
    omc__tcp_ticket* t;
    omc__tcp_conn *c, *next;
    pthread_mutex_lock(&T->mu);
    t = (omc__tcp_ticket*)omc__smap_get(&T->by_fd, (const char*)&fd, sizeof(fd));
    if (t) {
        OMC__LOG(&T->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "side-channel connection %d went: its data ticket goes (%u data connections)",
                 fd, (unsigned)t->nconns);
        omc__smap_del(&T->by_fd, &T->hooks, (const char*)&fd, sizeof(fd));
        t->zfd = -1;
        t->gone = 1;
        for (c = T->conns; c; c = next) {
            next = c->next;
            if (c->ticket == t && c->state == OMC__TCONN_IDLE) omc__tcp_conn_evict(T, c);
        }
        if (!t->detached) omc__tcp_ticket_detach(T, t);    /* frees it if no connection is left */
        else if (t->nconns == 0) omc__tcp_ticket_free(T, t);
    }
    pthread_mutex_unlock(&T->mu);
}

/* The ticket to drop to make room (holds mu): one without data connections, of the address
   `only` if given, else of the address holding the most tickets; the one unused longest among
   those. NULL if there is none. */
OMC__PRIVATE omc__tcp_ticket* omc__tcp_ticket_victim(omc__tcp_plane* T, const omc__tcp_source* only) {
    omc__tcp_ticket *t, *old = NULL;
    for (t = T->tickets; t; t = t->next) {
        uint32_t mine, theirs;
        if (t->nconns || (only && t->src != only && t->ksrc != only)) continue;
        if (!old) { old = t; continue; }
        mine = t->src ? t->src->ntickets : 0;
        theirs = old->src ? old->src->ntickets : 0;
        if (mine > theirs || (mine == theirs && t->last_used < old->last_used)) old = t;
    }
    return old;
}

/* The ticket of a side-channel session (its ZMQ routing id), made on each HELLO: 16 random
   bytes, answered inside the HELLO reply (CURVE-encrypted when CURVE is on); never the ticket of
   an earlier HELLO (omc__tcp_ticket_detach). zfd is the descriptor of the session's connection
   (-1 if unknown): when it goes the ticket goes (omc__tcp_session_gone). addr is the session's address ("" if unknown): an
   address at its share (OMC__TCP_SOURCE_TICKETS) drops one of its own unused tickets, a full
   table one of the address that holds the most; OMC_ERR_BUSY if there is none to drop. */
OMC__PRIVATE omc_result omc__tcp_ticket_issue(omc__tcp_plane* T, const uint8_t* rid, uint32_t rid_len, const char* addr, int zfd,
                                              const char* peer_key, uint8_t* out) {
    omc__tcp_ticket *t, *old = NULL;
    omc__tcp_source *src, *ksrc = NULL;
    omc_result r = OMC_OK;
    if (T->listen_fd < 0 || rid_len == 0 || rid_len > 255) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&T->mu);
    t = (omc__tcp_ticket*)omc__smap_get(&T->by_rid, (const char*)rid, rid_len);
    if (t) omc__tcp_ticket_detach(T, t);
    t = NULL;
    src = omc__tcp_source_get(T, addr ? addr : "");
    if (src) src->ntickets++;           /* reserved: the new ticket's (nothing below frees src) */
    if (src && src->ntickets > OMC__TCP_SOURCE_TICKETS) {
        if ((old = omc__tcp_ticket_victim(T, src)) != NULL) omc__tcp_ticket_free(T, old);
        else r = OMC_ERR_BUSY;
    }
    if (r == OMC_OK && peer_key && peer_key[0]) {      /* the key's share, from whatever address */
        char name[80];
        snprintf(name, sizeof(name), "curve:%s", peer_key);
        if ((ksrc = omc__tcp_source_get(T, name)) == NULL) r = OMC_ERR_NO_MEMORY;
        else if (++ksrc->ntickets > OMC__TCP_KEY_TICKETS) {
            if ((old = omc__tcp_ticket_victim(T, ksrc)) != NULL) omc__tcp_ticket_free(T, old);
            else r = OMC_ERR_BUSY;
        }
    }
    if (r == OMC_OK && T->ntickets >= OMC__TCP_MAX_TICKETS && (old = omc__tcp_ticket_victim(T, NULL)) != NULL) omc__tcp_ticket_free(T, old);
    if (!src) r = OMC_ERR_NO_MEMORY;
    else if (r == OMC_OK && T->ntickets >= OMC__TCP_MAX_TICKETS) r = OMC_ERR_BUSY;
    else if (r == OMC_OK) {
        t = (omc__tcp_ticket*)omc__calloc(&T->hooks, sizeof(*t));
        if (!t) r = OMC_ERR_NO_MEMORY;
        else {
            do { omc__random_bytes(t->ticket, sizeof(t->ticket)); } while (omc__smap_get(&T->by_ticket, (const char*)t->ticket, OMC__TCP_TICKET_SIZE));
            omc__random_bytes(t->secret, sizeof(t->secret));
            omc__tcp_mac_init(&t->mac, t->secret);
            t->rid_len = rid_len;
            memcpy(t->rid, rid, rid_len);
            if (omc__smap_put(&T->by_ticket, &T->hooks, (const char*)t->ticket, OMC__TCP_TICKET_SIZE, t) != OMC_OK) r = OMC_ERR_NO_MEMORY;
            else if (omc__smap_put(&T->by_rid, &T->hooks, (const char*)rid, rid_len, t) != OMC_OK) {
                omc__smap_del(&T->by_ticket, &T->hooks, (const char*)t->ticket, OMC__TCP_TICKET_SIZE);
                r = OMC_ERR_NO_MEMORY;
            }
            if (r != OMC_OK) { omc__free(&T->hooks, t); t = NULL; }
            else {
                t->next = T->tickets; T->tickets = t; T->ntickets++; t->src = src; t->ksrc = ksrc;
                snprintf(t->peer_key, sizeof(t->peer_key), "%s", peer_key ? peer_key : "");
                t->zfd = zfd;
                omc__tcp_ticket_bind_fd(T, t);
            }
        }
    }
    if (src && !t) { src->ntickets--; omc__tcp_source_put(T, src); }
    if (ksrc && !t) { ksrc->ntickets--; omc__tcp_source_put(T, ksrc); }
    if (t) {
        t->last_used = omc_now_ns();
        memcpy(out, t->ticket, OMC__TCP_TICKET_SIZE);
        memcpy(out + OMC__TCP_TICKET_SIZE, t->secret, OMC__TCP_SECRET_SIZE);
    }
    pthread_mutex_unlock(&T->mu);
    return r;
}

/* Once a second (listener): close registered connections idle longer than OMNICONN_TCP_IDLE_MS
   (a receiver drops its cached channels well before) and forget tickets nobody used for
   OMC__TCP_TICKET_IDLE_MS. Holds mu. */
OMC__PRIVATE void omc__tcp_sweep(omc__tcp_plane* T, omc_time_ns now) {
    omc__tcp_conn *c, *next;
    omc__tcp_ticket *t, *tn;
    if (now < T->next_sweep) return;
    T->next_sweep = now + 1000000000LL;
    for (c = T->conns; c; c = next) {
        next = c->next;
        if (c->state == OMC__TCONN_IDLE && now - c->idle_since > (omc_time_ns)OMNICONN_TCP_IDLE_MS * 1000000LL) {
            OMC__LOG(&T->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "data port: connection idle for %d ms, closed", (int)OMNICONN_TCP_IDLE_MS);
            omc__tcp_conn_free(T, c);
        }
    }
    for (t = T->tickets; t; t = tn) {
        tn = t->next;
        if (t->nconns == 0 && (t->detached || now - t->last_used > (omc_time_ns)OMC__TCP_TICKET_IDLE_MS * 1000000LL)) omc__tcp_ticket_free(T, t);
    }
}

OMC__PRIVATE int omc__tcp_pending_room(omc__tcp_plane* T, omc_time_ns now, omc__tcp_conn** replace);

/* Listener: fill poll items for the data port and the connections it watches; who[i] is the
   connection of item i (NULL for the data port). Reaps dead connections first; leaves the data
   port out while accept() is paused for lack of descriptors, and while every pending slot holds
   a connection still in its grace period (the poll slice, at most OMC__NET_SLICE_MS, brings the
   listener back to look again). */
OMC__PRIVATE int omc__tcp_items(omc__tcp_plane* T, struct pollfd* items, void** who, int max) {
    omc__tcp_conn *c, *next;
    omc_time_ns now = omc_now_ns();
    int n = 0;
    if (T->listen_fd < 0 || max < 1) return 0;
    pthread_mutex_lock(&T->mu);
    for (c = T->conns; c; c = next) {
        next = c->next;
        if (c->state == OMC__TCONN_DEAD) omc__tcp_conn_free(T, c);
    }
    omc__tcp_sweep(T, now);
    if (now >= T->paused_until && omc__tcp_pending_room(T, now, NULL)) {
        items[n].fd = T->listen_fd;
        items[n].events = POLLIN;
        items[n].revents = 0;
        who[n++] = NULL;
    }
    for (c = T->conns; c && n < max; c = c->next) {
        if (c->state != OMC__TCONN_PENDING && c->state != OMC__TCONN_IDLE && (c->state != OMC__TCONN_RECEIPT || c->rcpt_done)) continue;
        items[n].fd = c->fd;
        items[n].events = POLLIN;
        items[n].revents = 0;
        who[n++] = c;
    }
    pthread_mutex_unlock(&T->mu);
    return n;
}

/* The connection that has waited longest for its hello, or NULL (holds mu). It has shown
   nothing yet, so a newer connection may take its place. */
OMC__PRIVATE omc__tcp_conn* omc__tcp_oldest_pending(omc__tcp_plane* T) {
    omc__tcp_conn *c, *old = NULL;
    for (c = T->conns; c; c = c->next)
        if (c->state == OMC__TCONN_PENDING) old = c;     /* the list is newest first */
    return old;
}

/* Room for one more connection owing its hello (holds mu)? Below OMC__TCP_MAX_PENDING there
   is; at it, only if the oldest has waited longer than OMC__TCP_PENDING_GRACE_MS, and then
   *replace (if given) is that one, to close for the newcomer. A full table of younger ones
   says 0: the listener then accepts nothing more for now and new connections wait in the
   kernel's accept queue.
   Why a grace and not "replace the oldest at once": one accept loop takes everything queued
   on the port. When many receivers connect together, the oldest connections of that very loop
   have had no chance to send their hello (the nonce has only just gone out), so replacing them
   at once closed honest receivers by the dozen. A silent connection (a slow-loris, a port
   scanner) still loses its slot to a newcomer after the grace, so it cannot hold the port for
   longer than that, and a newcomer is never closed before it had the grace to say hello. */
OMC__PRIVATE int omc__tcp_pending_room(omc__tcp_plane* T, omc_time_ns now, omc__tcp_conn** replace) {
    omc__tcp_conn* old;
    if (replace) *replace = NULL;
    if (T->npending < OMC__TCP_MAX_PENDING) return 1;
    old = omc__tcp_oldest_pending(T);
    if (!old) return 1;
    if (now - old->accepted < (omc_time_ns)OMC__TCP_PENDING_GRACE_MS * 1000000LL) return 0;
    if (replace) *replace = old;
    return 1;
}

/* The numeric address of an accepted peer ("" if it has none we know). */
OMC__PRIVATE void omc__tcp_peer_addr(const struct sockaddr_storage* sa, char* out, size_t n) {
    out[0] = '\0';
    if (sa->ss_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in*)sa)->sin_addr, out, (socklen_t)n);
    else if (sa->ss_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6*)sa)->sin6_addr, out, (socklen_t)n);
}

/* Registration limits for a connection that showed a valid ticket (holds mu): its address's
   share (OMC__TCP_SOURCE_CONNS), then the table (OMC__TCP_MAX_CONNS), which makes room by
   closing an idle connection of the address that holds the most. The source to count it in,
   or NULL with *why set (OMC_ERR_BUSY, OMC_ERR_NO_MEMORY). */
OMC__PRIVATE omc__tcp_source* omc__tcp_admit(omc__tcp_plane* T, omc__tcp_conn* c, omc_result* why) {
    omc__tcp_source* src = omc__tcp_source_get(T, c->addr);
    unsigned long long hidden = 0;
    *why = OMC_ERR_BUSY;
    if (!src) { *why = OMC_ERR_NO_MEMORY; return NULL; }
    if (src->nconns < OMC__TCP_SOURCE_CONNS &&
        (omc__load(&T->nregistered) < OMC__TCP_MAX_CONNS || omc__tcp_evict_idle(T, src)))
        return src;
    if (omc__tcp_flood(T, 1, &hidden))
        OMC__LOG(&T->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "data port %u: %s: %u data connections from %s (at most %d per address, %d in all), "
                 "new one refused (%llu more since the last report)", (unsigned)T->port,
                 src->nconns >= OMC__TCP_SOURCE_CONNS ? "an address at its share" : "every registration taken and none idle elsewhere",
                 (unsigned)src->nconns, src->addr[0] ? src->addr : "an unknown address", OMC__TCP_SOURCE_CONNS, OMC__TCP_MAX_CONNS, hidden);
    omc__tcp_source_put(T, src);
    return NULL;
}

/* The nonce frame, first thing on an accepted connection (a fresh socket always has room for
   24 bytes; anything else means it is already broken: 0). */
OMC__PRIVATE int omc__tcp_send_nonce(omc__tcp_conn* c) {
    uint8_t frame[OMC__TCP_NONCE_SIZE];
    omc__random_bytes(c->nonce, sizeof(c->nonce));
    omc__tcp_nonce_encode(frame, c->nonce);
    return send(c->fd, frame, sizeof(frame), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(frame);
}

/* Listener: accept what is waiting on the data port, as long as there is a pending slot (see
   omc__tcp_pending_room: what finds none stays in the kernel's accept queue until a hello frees
   one or a silent connection's grace runs out). Out of descriptors (EMFILE, ENFILE): the
   oldest connection still owing its hello is closed, grace or not (descriptors are the harder
   limit), and the port is not polled for OMC__TCP_PAUSE_MS, so a flood costs neither a
   spinning core nor a log line per event. */
OMC__PRIVATE void omc__tcp_accept(omc__tcp_plane* T) {
    unsigned long long hidden = 0;
    for (;;) {
        omc__tcp_conn* c;
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        int fd, room;
        pthread_mutex_lock(&T->mu);
        room = omc__tcp_pending_room(T, omc_now_ns(), NULL);
        pthread_mutex_unlock(&T->mu);
        if (!room) return;
        fd = accept4(T->listen_fd, (struct sockaddr*)&sa, &salen, SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR) continue;
            if (e == EAGAIN || e == EWOULDBLOCK) return;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                T->paused_until = omc_now_ns() + (omc_time_ns)OMC__TCP_PAUSE_MS * 1000000LL;
                pthread_mutex_lock(&T->mu);
                c = omc__tcp_oldest_pending(T);
                if (c) omc__tcp_conn_evict(T, c);
                pthread_mutex_unlock(&T->mu);
            }
            if (omc__tcp_flood(T, 0, &hidden))
                OMC__LOG(&T->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET,
                         "data port %u: accept failed (%s): retrying in %d ms%s (%llu more since the last report)", (unsigned)T->port,
                         strerror(e), OMC__TCP_PAUSE_MS, e == EMFILE || e == ENFILE ? "; raise the descriptor limit (ulimit -n)" : "", hidden);
            return;
        }
        pthread_mutex_lock(&T->mu);
        if (omc__tcp_pending_room(T, omc_now_ns(), &c) && c) {
            OMC__LOG(&T->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "data port %u: %d connections owe their hello: closed one from %s "
                     "silent for over %d ms for a new one", (unsigned)T->port, OMC__TCP_MAX_PENDING, c->addr[0] ? c->addr : "an unknown address",
                     OMC__TCP_PENDING_GRACE_MS);
            omc__tcp_conn_evict(T, c);
        }
        c = (omc__tcp_conn*)omc__calloc(&T->hooks, sizeof(*c));
        if (!c) { pthread_mutex_unlock(&T->mu); close(fd); continue; }
        c->fd = fd;
        omc__tcp_peer_addr(&sa, c->addr, sizeof(c->addr));
        if (!omc__tcp_send_nonce(c)) { pthread_mutex_unlock(&T->mu); omc__free(&T->hooks, c); close(fd); continue; }
        c->state = OMC__TCONN_PENDING;
        c->accepted = omc_now_ns();
        c->hello_deadline = omc_deadline_after_ms(OMC__TCP_HELLO_MS);
        c->next = T->conns;
        T->conns = c;
        T->npending++;
        pthread_mutex_unlock(&T->mu);
        omc__fd_tune(fd);
        omc__fd_streaming(fd);
    }
}

/* Listener, holds mu: refuse a data hello. An ack with the code for a hello that is not a
   version-2 hello (a receiver of the first release learns why); nothing at all for a wrong
   ticket (a port scanner learns nothing). Never registered, so never counted. */
OMC__PRIVATE void omc__tcp_refuse(omc__tcp_plane* T, omc__tcp_conn* c, omc_result r, int ack_it) {
    unsigned long long hidden = 0;
    char why[224];
    snprintf(why, sizeof(why), ": the receiver sent data hello version %u, this sender speaks version %d "
             "(a version-4 receiver proves its ticket and the key of every request); upgrade the receiver",
             (unsigned)(c->hello_got >= 6 ? omc__get_u16(c->hello + 4) : 0), OMC__TCP_HELLO_VERSION);
    if (ack_it) {
        uint8_t ack[OMC__TCP_ACK_SIZE];
        ssize_t k;
        omc__put_u32(ack, OMC__TCP_ACK_MAGIC);
        omc__put_u32(ack + 4, (uint32_t)(int32_t)r);
        k = send(c->fd, ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)k;
    }
    if (r != OMC_ERR_BUSY) omc__add(&T->protocol_errors, 1u);
    if (omc__tcp_flood(T, 2, &hidden))
        OMC__LOG(&T->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET,
                 "data port %u: data hello refused (%s), connection closed%s (%llu more since the last report)", (unsigned)T->port,
                 omc_result_str(r),
                 r == OMC_ERR_AUTH ? ": no valid ticket proof (a data connection must prove the ticket of a live side-channel session)"
                 : r == OMC_ERR_VERSION ? why : r == OMC_ERR_BUSY ? ": too many data connections for one side-channel session" : "",
                 hidden);
    omc__tcp_conn_free(T, c);
}

/* Listener: a pending connection is readable: take its hello bytes; register when complete and
   its ticket is one we handed out. */
OMC__PRIVATE void omc__tcp_read_hello(omc__tcp_plane* T, omc__tcp_conn* c) {
    uint8_t ack[OMC__TCP_ACK_SIZE], ticket[OMC__TCP_TICKET_SIZE], proof[OMC__SHA256_SIZE];
    omc__tcp_ticket* t;
    omc__tcp_source* src;
    omc_result r;
    ssize_t k = recv(c->fd, c->hello + c->hello_got, OMC__TCP_HELLO_SIZE - c->hello_got, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (k <= 0) { omc__tcp_conn_free(T, c); return; }
    c->hello_got += (uint32_t)k;
    if (c->hello_got >= 8 && (r = omc__tcp_hello_start(c->hello, c->hello_got)) != OMC_OK) { omc__tcp_refuse(T, c, r, 1); return; }
    if (c->hello_got < OMC__TCP_HELLO_SIZE) return;
    r = omc__tcp_hello_decode(c->hello, OMC__TCP_HELLO_SIZE, &c->token, &c->incarnation, ticket);
    if (r != OMC_OK) { omc__tcp_refuse(T, c, r, 1); return; }
    t = (omc__tcp_ticket*)omc__smap_get(&T->by_ticket, (const char*)ticket, OMC__TCP_TICKET_SIZE);
    if (!t || t->detached || t->gone) { omc__tcp_refuse(T, c, OMC_ERR_AUTH, 0); return; }
    omc__tcp_hello_proof(t->secret, c->nonce, c->hello, proof);
    if (!omc__equal_ct(proof, c->hello + OMC__TCP_HELLO_SIGNED, sizeof(proof))) { omc__tcp_refuse(T, c, OMC_ERR_AUTH, 0); return; }
    if (t->nconns >= OMC__TCP_PER_TICKET) { omc__tcp_refuse(T, c, OMC_ERR_BUSY, 1); return; }
    if (t->ksrc && t->ksrc->nconns >= OMC__TCP_KEY_CONNS) {     /* one CURVE key, however many addresses */
        unsigned long long hidden = 0;
        if (omc__tcp_flood(T, 1, &hidden))
            OMC__LOG(&T->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "data port %u: a CURVE client key at its share: %u data connections "
                     "(at most %d per key), new one from %s refused (%llu more since the last report)", (unsigned)T->port,
                     (unsigned)t->ksrc->nconns, OMC__TCP_KEY_CONNS, c->addr[0] ? c->addr : "an unknown address", hidden);
        omc__tcp_refuse(T, c, OMC_ERR_BUSY, 1);
        return;
    }
    memcpy(c->key, ticket, OMC__TCP_TICKET_SIZE);
    memcpy(c->key + OMC__TCP_TICKET_SIZE, c->hello + 8, 8);
    if (omc__smap_get(&T->tokens, (const char*)c->key, sizeof(c->key))) { omc__tcp_refuse(T, c, OMC_ERR_EXISTS, 1); return; }
    if ((src = omc__tcp_admit(T, c, &r)) == NULL) { omc__tcp_refuse(T, c, r, 1); return; }
    if (omc__smap_put(&T->tokens, &T->hooks, (const char*)c->key, sizeof(c->key), c) != OMC_OK) {
        omc__tcp_source_put(T, src);
        omc__tcp_conn_free(T, c);
        return;
    }
    omc__put_u32(ack, OMC__TCP_ACK_MAGIC);
    omc__put_u32(ack + 4, 0);
    /* a fresh socket always has room for 8 bytes; anything else means it is already broken */
    if (send(c->fd, ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ack)) {
        omc__smap_del(&T->tokens, &T->hooks, (const char*)c->key, sizeof(c->key));
        omc__tcp_source_put(T, src);
        omc__tcp_conn_free(T, c);
        return;
    }
    T->npending--;
    c->state = OMC__TCONN_IDLE;
    c->idle_since = omc_now_ns();
    c->ticket = t;
    c->mac = t->mac;
    t->nconns++;
    t->last_used = c->idle_since;
    c->src = src;
    src->nconns++;
    c->ksrc = t->ksrc;
    if (c->ksrc) c->ksrc->nconns++;
    omc__add(&T->nregistered, 1u);
}

OMC__PRIVATE void omc__tcp_conn_release(omc__tcp_plane* T, omc__tcp_conn* c, int ok);

/* Listener: an idle registered connection is readable: the bytes of a request (queued on
   T->ready for the connector once all 64 are in), or EOF (the receiver went away), or bytes that
   are not a request (a protocol error). The last two close it. Holds mu. */
OMC__PRIVATE void omc__tcp_read_request(omc__tcp_plane* T, omc__tcp_conn* c) {
    omc__tcp_req q;
    ssize_t k = recv(c->fd, c->req + c->req_got, OMC__TCP_REQUEST_SIZE - c->req_got, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (k <= 0) { omc__tcp_conn_free(T, c); return; }
    if (c->req_got == 0) c->hello_deadline = omc_deadline_after_ms(OMC__TCP_HELLO_MS);   /* the rest must follow soon */
    c->req_got += (uint32_t)k;
    if ((c->req_got >= 4 && omc__get_u32(c->req) != OMC__TCP_REQUEST_MAGIC) ||
        (c->req_got == OMC__TCP_REQUEST_SIZE && omc__tcp_req_decode(c->req, c->req_got, &q) != OMC_OK)) {
        unsigned long long hidden = 0;
        omc__add(&T->protocol_errors, 1u);
        if (omc__tcp_flood(T, 2, &hidden))
            OMC__LOG(&T->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "data port %u: bytes that are not a request on a data connection, "
                     "connection closed (%llu more since the last report)", (unsigned)T->port, hidden);
        omc__tcp_conn_free(T, c);
        return;
    }
    if (c->req_got < OMC__TCP_REQUEST_SIZE) return;
    c->req_got = 0;
    c->state = OMC__TCONN_BUSY;         /* the connector serves it next; nothing else touches it */
    c->next_ready = T->ready;
    T->ready = c;
}

/* Listener: the receipt a connection in RECEIPT owes (never more than its 8 bytes are read:
   the next request may follow it). Holds mu. */
OMC__PRIVATE void omc__tcp_read_rcpt(omc__tcp_plane* T, omc__tcp_conn* c) {
    ssize_t k = recv(c->fd, c->rcpt + c->rcpt_got, OMC__TCP_RECEIPT_SIZE - c->rcpt_got, MSG_DONTWAIT);
    (void)T;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (k <= 0) { c->rcpt_done = 1; c->rcpt_result = OMC_ERR_CONNECTION; return; }
    c->rcpt_got += (uint32_t)k;
    if (c->rcpt_got < OMC__TCP_RECEIPT_SIZE) return;
    c->rcpt_done = 1;
    c->rcpt_result = omc__get_u32(c->rcpt) == OMC__TCP_RECEIPT_MAGIC && omc__get_u32(c->rcpt + 4) == 0 ? OMC_OK : OMC_ERR_PROTOCOL;
}

/* Listener: act on what poll saw, and expire hellos (and requests) that never came whole. */
OMC__PRIVATE void omc__tcp_serve(omc__tcp_plane* T, const struct pollfd* items, void* const* who, int n) {
    omc_time_ns now = omc_now_ns();
    omc__tcp_conn *c, *next;
    int i;
    T->read_ahead = 0;                  /* a new pass (omc__tcp_answer_status) */
    for (i = 0; i < n; i++) {
        if (!items[i].revents) continue;
        if (!who[i]) { omc__tcp_accept(T); continue; }
        pthread_mutex_lock(&T->mu);
        c = (omc__tcp_conn*)who[i];
        if (c->state == OMC__TCONN_PENDING) omc__tcp_read_hello(T, c);
        else if (c->state == OMC__TCONN_IDLE) omc__tcp_read_request(T, c);
        else if (c->state == OMC__TCONN_RECEIPT && !c->rcpt_done) omc__tcp_read_rcpt(T, c);
        pthread_mutex_unlock(&T->mu);
    }
    pthread_mutex_lock(&T->mu);
    for (c = T->conns; c; c = next) {
        next = c->next;
        if (c->state == OMC__TCONN_PENDING && now >= c->hello_deadline) {
            OMC__LOG(&T->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "data port: no hello within %d ms, connection closed", OMC__TCP_HELLO_MS);
            omc__tcp_conn_free(T, c);
        } else if (c->state == OMC__TCONN_IDLE && c->req_got && now >= c->hello_deadline) {
            OMC__LOG(&T->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "data port: a request not complete within %d ms, connection closed", OMC__TCP_HELLO_MS);
            omc__add(&T->protocol_errors, 1u);
            omc__tcp_conn_free(T, c);
        }
    }
    pthread_mutex_unlock(&T->mu);
}

/* Listener: the next complete request to serve (its connection is BUSY), or NULL. */
OMC__PRIVATE omc__tcp_conn* omc__tcp_next_request(omc__tcp_plane* T) {
    omc__tcp_conn* c;
    pthread_mutex_lock(&T->mu);
    c = T->ready;
    if (c) { T->ready = c->next_ready; c->next_ready = NULL; }
    pthread_mutex_unlock(&T->mu);
    return c;
}

/* Listener, after it answered a request on c (a status record, or a push's trailer): a receiver
   that pipelines its requests has the next one waiting already, so read it now and the listener
   serves it in this pass instead of after the next poll. A bounded number per pass, so one
   connection cannot keep the listener to itself. Holds mu; may close c (EOF, garbage). Only the
   listener may call it: a request it reads is served by the listener's own loop, and poll no
   longer reports those bytes. */
OMC__PRIVATE void omc__tcp_read_next(omc__tcp_plane* T, omc__tcp_conn* c) {
    if (c->state != OMC__TCONN_IDLE || T->read_ahead >= OMC__TCP_READ_AHEAD) return;
    T->read_ahead++;
    omc__tcp_read_request(T, c);
}

/* Listener: answer a request with a status record and give the connection back (idle; dead if
   the 24 bytes do not fit at once, which a receiver waiting for them never causes). */
OMC__PRIVATE void omc__tcp_answer_status(omc__tcp_plane* T, omc__tcp_conn* c, omc_result code, uint64_t xfer, uint64_t detail) {
    uint8_t st[OMC__TCP_STATUS_SIZE];
    omc_time_ns since = c->idle_since;
    ssize_t k;
    omc__tcp_status_encode(st, code, xfer, detail);
    k = send(c->fd, st, sizeof(st), MSG_NOSIGNAL | MSG_DONTWAIT);
    omc__tcp_conn_release(T, c, k == (ssize_t)sizeof(st));
    pthread_mutex_lock(&T->mu);
    if (code != OMC_OK && c->state == OMC__TCONN_IDLE) c->idle_since = since;  /* a refused request is no activity */
    omc__tcp_read_next(T, c);           /* may close c: nothing of c after this */
    pthread_mutex_unlock(&T->mu);
}

/* Close everything (connector close; no worker runs any more). */
OMC__PRIVATE void omc__tcp_shutdown(omc__tcp_plane* T) {
    pthread_mutex_lock(&T->mu);
    T->ready = NULL;
    while (T->conns) omc__tcp_conn_free(T, T->conns);
    while (T->tickets) omc__tcp_ticket_free(T, T->tickets);
    omc__smap_free(&T->tokens, &T->hooks);
    omc__smap_free(&T->by_ticket, &T->hooks);
    omc__smap_free(&T->by_rid, &T->hooks);
    omc__smap_free(&T->sources, &T->hooks);     /* empty now: the last ticket and connection took theirs */
    omc__smap_free(&T->by_fd, &T->hooks);
    pthread_mutex_unlock(&T->mu);
    if (T->listen_fd >= 0) close(T->listen_fd);
    T->listen_fd = -1;
}

OMC__PRIVATE omc_result omc__tcp_tx_hello(void* user, const uint8_t* rec, uint32_t rec_len, uint8_t* out, uint32_t cap, uint32_t* out_len) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    (void)rec; (void)rec_len;
    if (T->listen_fd < 0 || cap < 4) return OMC_ERR_UNAVAILABLE;
    omc__put_u16(out, T->port);
    omc__put_u16(out + 2, 0);
    *out_len = 4;   /* empty host: "the host your side channel reached" */
    return OMC_OK;
}

/* Write bytes [*pos, end) of the transfer's stream - header | payload | trailer - with as few
   system calls as possible. blocking: wait (deadline, abort) whenever the socket is full.
   Non-blocking (the listener): stop with OMC_ERR_BUSY when the socket is full or after budget
   bytes. Short writes and EINTR are retried; *pos always says how far it got. */
#define OMC__TCP_RATE_WINDOW_MS 2000   /* OMNICONN_TCP_MIN_RATE is judged over windows this long */

/* A blocking push's rate check, once per OMC__TCP_RATE_WINDOW_MS: 1 if the window that just
   ended moved some bytes but fewer than OMNICONN_TCP_MIN_RATE allows (the first window also
   fills the socket buffers, so a slow reader fails the second; a window without a byte is the
   stall timeout's to judge). *since and *moved start the next window. */
OMC__PRIVATE int omc__tcp_too_slow(omc_time_ns now, omc_time_ns* since, uint64_t* moved) {
    int slow;
    if (now - *since < (omc_time_ns)OMC__TCP_RATE_WINDOW_MS * 1000000LL) return 0;
    slow = (uint64_t)OMNICONN_TCP_MIN_RATE > 0 && *moved > 0 && *moved < (uint64_t)OMNICONN_TCP_MIN_RATE * OMC__TCP_RATE_WINDOW_MS / 1000u;
    *since = now;
    *moved = 0;
    return slow;
}

OMC__PRIVATE omc_result omc__tcp_write_stream(int fd, const uint8_t* hdr, const uint8_t* src, uint64_t size, const uint8_t* trl,
                                              uint64_t* pos, uint64_t end, int blocking, uint64_t budget, omc_time_ns deadline,
                                              const int* abort) {
    const uint8_t* seg[3];
    uint64_t seglen[3], moved = 0, window_moved = 0;
    omc_time_ns progress = blocking ? omc_now_ns() : 0;    /* last time the receiver took a byte */
    omc_time_ns window = progress;                          /* the rate window began */
    seg[0] = hdr; seglen[0] = OMC__TCP_HEADER_SIZE;
    seg[1] = src; seglen[1] = size;
    seg[2] = trl; seglen[2] = OMC__TCP_TRAILER_SIZE;
    while (*pos < end) {
        struct iovec iov[3];
        struct msghdr msg;
        uint64_t at = 0, want = omc__min(end - *pos, (uint64_t)OMNICONN_TCP_CHUNK);
        int i, n = 0;
        ssize_t k;
        if (!blocking) want = omc__min(want, budget - moved);
        for (i = 0; i < 3 && want; i++) {       /* what is still to go of each segment */
            uint64_t s0 = at, from, len;
            at += seglen[i];
            if (*pos >= at || seglen[i] == 0) continue;
            from = *pos > s0 ? *pos - s0 : 0;
            len = omc__min(seglen[i] - from, want);
            iov[n].iov_base = (void*)(seg[i] + from);
            iov[n].iov_len = (size_t)len;
            want -= len;
            n++;
        }
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)n;
        /* blocking: the socket waits at most a slice (SO_SNDTIMEO), then we look at the clock */
        k = sendmsg(fd, &msg, MSG_NOSIGNAL | (blocking ? 0 : MSG_DONTWAIT));
        if (k > 0) {
            *pos += (uint64_t)k;
            moved += (uint64_t)k;
            window_moved += (uint64_t)k;
            if (blocking) progress = omc_now_ns();
            if (!blocking && moved >= budget && *pos < end) return OMC_ERR_BUSY;
        } else if (k < 0 && errno == EINTR) {
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!blocking) return OMC_ERR_BUSY;
        } else return OMC_ERR_CONNECTION;
        if (blocking && *pos < end) {
            if (abort && omc__load(abort)) return (omc_result)omc__load(abort);
            if (omc__deadline_passed(deadline)) return OMC_ERR_TIMEOUT;
            /* a receiver that takes nothing for OMNICONN_TCP_STALL_MS is dead or hostile */
            if (omc_now_ns() - progress > (omc_time_ns)OMNICONN_TCP_STALL_MS * 1000000LL) return OMC_ERR_TIMEOUT;
            if (omc__tcp_too_slow(omc_now_ns(), &window, &window_moved)) return OMC_ERR_TIMEOUT;
        }
    }
    return OMC_OK;
}

/* Give a connection back after a push: idle again, or dead (half a payload may be on the wire,
   so it can never carry another one). The listener frees dead ones. */
OMC__PRIVATE void omc__tcp_conn_release(omc__tcp_plane* T, omc__tcp_conn* c, int ok) {
    pthread_mutex_lock(&T->mu);
    if (ok) { c->state = OMC__TCONN_IDLE; c->idle_since = omc_now_ns(); }
    else {
        omc__tcp_unregister(T, c);      /* first: a peer that sees the shutdown sees it gone */
        shutdown(c->fd, SHUT_RDWR);
        c->state = OMC__TCONN_DEAD;
    }
    pthread_cond_broadcast(&T->idle_cv);
    pthread_mutex_unlock(&T->mu);
}

/* The connection a PULL names: the token in its descriptor, among the connections registered
   with the ticket of the PULL's own side-channel session (a PULL can never name another
   session's connection). take = 1: wait (until the deadline) for it to be idle and mark it busy
   - a receiver that has read a trailer may ask again before the pusher has marked the
   connection idle. take = 0: the caller already owns it (a push the listener started). */
OMC__PRIVATE omc_result omc__tcp_find_conn(omc__tcp_plane* T, const omc__dp_push* p, int take, int may_wait, omc__tcp_conn** out) {
    omc__tcp_conn* c = NULL;
    omc__tcp_ticket* t;
    uint8_t key[OMC__TCP_TICKET_SIZE + 8];
    omc_result r = OMC_OK;
    *out = NULL;
    if (p->desc_len != 8) return OMC_ERR_PROTOCOL;
    pthread_mutex_lock(&T->mu);
    t = p->channel_len ? (omc__tcp_ticket*)omc__smap_get(&T->by_rid, (const char*)p->channel, p->channel_len) : NULL;
    if (t && !p->requested && strcmp(t->peer_key, p->peer_key ? p->peer_key : "") != 0) t = NULL;  /* another CURVE key */
    if (t) {
        memcpy(key, t->ticket, OMC__TCP_TICKET_SIZE);
        memcpy(key + OMC__TCP_TICKET_SIZE, p->desc, 8);
    }
    for (;;) {
        c = t ? (omc__tcp_conn*)omc__smap_get(&T->tokens, (const char*)key, sizeof(key)) : NULL;
        if (!c) { r = OMC_ERR_CONNECTION; break; }
        if (!take) { if (c->state != OMC__TCONN_BUSY) r = OMC_ERR_INTERNAL; break; }
        if (c->state == OMC__TCONN_IDLE) { c->state = OMC__TCONN_BUSY; break; }
        if (!may_wait) { r = OMC_ERR_BUSY; break; }
        if (p->abort && omc__load(p->abort)) { r = (omc_result)omc__load(p->abort); break; }
        if (omc__deadline_passed(p->deadline)) { r = OMC_ERR_TIMEOUT; break; }
        omc__cond_wait_until(&T->idle_cv, &T->mu, omc__min(p->deadline, omc_now_ns() + OMC__NET_SLICE_MS * 1000000LL));
    }
    pthread_mutex_unlock(&T->mu);
    if (r == OMC_OK) *out = c;
    else if (r == OMC_ERR_CONNECTION)
        OMC__LOG(&T->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "push %llu: this side-channel session has no data connection with token %016llx",
                 (unsigned long long)p->transfer_id, (unsigned long long)omc__get_u64(p->desc));
    return r;
}

/* The listener starts a push without blocking: header and up to OMNICONN_TCP_INLINE bytes.
   Always OMC_ERR_BUSY on success: *resume bytes of the stream went, and a worker waits for the
   receiver's receipt, commits and writes the trailer (the connection stays ours). */
static omc_result omc__tcp_tx_try(void* user, const omc__dp_push* p) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    omc__tcp_push_state* st = (omc__tcp_push_state*)p->state;
    uint8_t hdr[OMC__TCP_HEADER_SIZE];
    uint64_t pos = 0, end = OMC__TCP_HEADER_SIZE + p->size;
    omc__tcp_conn* c;
    omc_result r = omc__tcp_find_conn(T, p, !p->requested, 0, &c);
    st->resume = 0;
    if (r != OMC_OK) return r;      /* BUSY: a worker waits for the connection */
    omc__tcp_header_encode(hdr, p->transfer_id, p->size);
    r = omc__tcp_write_stream(c->fd, hdr, p->src, p->size, NULL, &pos, end, 0, OMNICONN_TCP_INLINE, 0, NULL);
    st->resume = pos;
    if ((r == OMC_OK || r == OMC_ERR_BUSY) && (pos || p->requested)) return OMC_ERR_BUSY;
    omc__tcp_conn_release(T, c, r == OMC_OK || r == OMC_ERR_BUSY);    /* nothing went: a worker starts afresh */
    return r == OMC_OK ? OMC_ERR_BUSY : r;
}

/* The listener wrote a whole payload (tx_try moved header and every byte): rather than wake a
   worker to wait for the receipt, it watches the connection itself. Returns the connection,
   now in RECEIPT, or NULL (then a worker goes on as usual). */
OMC__PRIVATE omc__tcp_conn* omc__tcp_await_receipt(omc__tcp_plane* T, const omc__dp_push* p) {
    omc__tcp_conn* c = NULL;
    if (omc__tcp_find_conn(T, p, 0, 0, &c) != OMC_OK) return NULL;
    pthread_mutex_lock(&T->mu);
    c->rcpt_got = 0;
    c->rcpt_done = 0;
    c->rcpt_result = OMC_OK;
    c->state = OMC__TCONN_RECEIPT;
    pthread_mutex_unlock(&T->mu);
    return c;
}

/* tx_await: only a payload tx_try wrote whole (header and every byte) is waited for here. */
static int omc__tcp_tx_await(void* user, const omc__dp_push* p) {
    omc__tcp_push_state* st = (omc__tcp_push_state*)p->state;
    if (st->resume != OMC__TCP_HEADER_SIZE + p->size) return 0;
    st->await = omc__tcp_await_receipt((omc__tcp_plane*)user, p);
    return st->await != NULL;
}

/* tx_receipt: the receipt came (OMC_OK), the wait failed, or OMC_ERR_BUSY: not yet. The
   listener reads it (omc__tcp_serve), on this same thread. */
static omc_result omc__tcp_tx_receipt(void* user, const omc__dp_push* p) {
    const omc__tcp_conn* c = ((omc__tcp_push_state*)p->state)->await;
    (void)user;
    if (!c) return OMC_ERR_INTERNAL;
    return c->rcpt_done ? c->rcpt_result : OMC_ERR_BUSY;
}

/* Listener: the receipt wait of c is over. committed: the read was recorded, so the trailer
   goes (without blocking: the receiver reads nothing else now, so 8 bytes fit; if they do not,
   the connection is closed and the receiver sees the transfer fail, as for a lost trailer). */
OMC__PRIVATE void omc__tcp_end_receipt(omc__tcp_plane* T, omc__tcp_conn* c, int committed) {
    uint8_t trl[OMC__TCP_TRAILER_SIZE];
    int ok = 0;
    if (committed) {
        omc__put_u32(trl, OMC__TCP_END_MAGIC);
        omc__put_u32(trl + 4, 0);
        ok = send(c->fd, trl, sizeof(trl), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(trl);
    }
    omc__tcp_conn_release(T, c, ok);
    if (ok) {                           /* the listener's (tx_end): the next pipelined request */
        pthread_mutex_lock(&T->mu);
        omc__tcp_read_next(T, c);
        pthread_mutex_unlock(&T->mu);
    }
}

static void omc__tcp_tx_end(void* user, const omc__dp_push* p, int committed) {
    omc__tcp_push_state* st = (omc__tcp_push_state*)p->state;
    if (st->await) omc__tcp_end_receipt((omc__tcp_plane*)user, st->await, committed);
    st->await = NULL;
}

/* Wait for the receiver's receipt (8 bytes: "OMCG", 0) after the last payload byte: it says
   the bytes are in the receiver's buffer, not just in a kernel. Bounded by the deadline, ABORT
   and OMNICONN_TCP_STALL_MS; EOF or anything else than a receipt fails the push. */
OMC__PRIVATE omc_result omc__tcp_read_receipt(int fd, omc_time_ns deadline, const int* abort) {
    uint8_t b[OMC__TCP_RECEIPT_SIZE];
    size_t got = 0;
    omc_time_ns since = omc_now_ns();
    while (got < sizeof(b)) {
        struct pollfd pf;
        ssize_t k;
        if (abort && omc__load(abort)) return (omc_result)omc__load(abort);
        if (omc__deadline_passed(deadline) || omc_now_ns() - since > (omc_time_ns)OMNICONN_TCP_STALL_MS * 1000000LL) return OMC_ERR_TIMEOUT;
        pf.fd = fd; pf.events = POLLIN; pf.revents = 0;
        if (poll(&pf, 1, omc__poll_ms(deadline, OMC__NET_SLICE_MS)) <= 0) continue;
        k = recv(fd, b + got, sizeof(b) - got, MSG_DONTWAIT);
        if (k == 0) return OMC_ERR_CONNECTION;
        if (k < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
            return OMC_ERR_CONNECTION;
        }
        got += (size_t)k;
    }
    return omc__get_u32(b) == OMC__TCP_RECEIPT_MAGIC && omc__get_u32(b + 4) == 0 ? OMC_OK : OMC_ERR_PROTOCOL;
}

/* tx_drop: a push aborted before a worker ran it. The connection the listener started it on
   (or the request came on) is ours and half a stream may be on it: close it. */
static void omc__tcp_tx_drop(void* user, const omc__dp_push* p) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    omc__tcp_conn* c;
    if ((((const omc__tcp_push_state*)p->state)->resume || p->requested) && omc__tcp_find_conn(T, p, 0, 0, &c) == OMC_OK)
        omc__tcp_conn_release(T, c, 0);
}

/* A push on a worker: take the connection (or continue what the listener started), write the
   rest of header and payload, wait for the receiver's receipt, commit, then the trailer - which
   is how the receiver learns that the read was recorded without waiting for DONE. */
OMC__PRIVATE omc_result omc__tcp_tx_push(void* user, const omc__dp_push* p) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    uint8_t hdr[OMC__TCP_HEADER_SIZE], trl[OMC__TCP_TRAILER_SIZE];
    uint64_t pos = ((const omc__tcp_push_state*)p->state)->resume, end = OMC__TCP_HEADER_SIZE + p->size;
    omc__tcp_conn* c;
    omc_result r;
    if (p->abort && omc__load(p->abort)) {      /* aborted before it got a worker */
        omc__tcp_tx_drop(user, p);
        return (omc_result)omc__load(p->abort);
    }
    r = omc__tcp_find_conn(T, p, pos == 0 && !p->requested, 1, &c);
    if (r != OMC_OK) return r == OMC_ERR_BUSY ? OMC_ERR_CONNECTION : r;
    omc__tcp_header_encode(hdr, p->transfer_id, p->size);
    omc__put_u32(trl, OMC__TCP_END_MAGIC);
    omc__put_u32(trl + 4, 0);
    if (pos < end) r = omc__tcp_write_stream(c->fd, hdr, p->src, p->size, trl, &pos, end, 1, 0, p->deadline, p->abort);
    if (r == OMC_OK) r = omc__tcp_read_receipt(c->fd, p->deadline, p->abort);
    if (r != OMC_OK) { omc__tcp_conn_release(T, c, 0); return r; }
    if (p->commit) p->commit(p);        /* the receiver has every byte: the read counts now */
    r = omc__tcp_write_stream(c->fd, hdr, p->src, p->size, trl, &pos, end + OMC__TCP_TRAILER_SIZE, 1, 0, p->deadline, p->abort);
    omc__tcp_conn_release(T, c, r == OMC_OK);
    return OMC_OK;      /* committed: the receiver may miss the trailer, but the read counts */
}

OMC__PRIVATE omc_result omc__tcp_rx_open(void* user, void** chan) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    omc__tcp_rx* x = (omc__tcp_rx*)omc__calloc(&T->hooks, sizeof(omc__tcp_rx));
    if (!x) return OMC_ERR_NO_MEMORY;
    x->fd = -1;
    *chan = x;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__tcp_rx_hello(void* user, void* chan, uint8_t* out, uint32_t cap, uint32_t* out_len) {
    (void)user; (void)chan; (void)out; (void)cap;
    *out_len = 0;   /* a TCP receiver has nothing to announce */
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__tcp_rx_ready(void* user, void* chan, const omc__dp_peer* peer, omc_time_ns deadline) {
    omc__tcp_rx* x = (omc__tcp_rx*)chan;
    (void)user; (void)deadline;
    if (!peer->record) return OMC_ERR_UNAVAILABLE;
    if (omc__tcp_record_decode(peer->record, peer->record_len, &x->port, x->host, sizeof(x->host)) != OMC_OK) return OMC_ERR_PROTOCOL;
    if (peer->ticket && peer->ticket_len != OMC__TCP_TICKET_SIZE + OMC__TCP_SECRET_SIZE) return OMC_ERR_PROTOCOL;
    x->has_ticket = peer->ticket != NULL;
    if (peer->ticket) {
        memcpy(x->ticket, peer->ticket, OMC__TCP_TICKET_SIZE);
        memcpy(x->secret, peer->ticket + OMC__TCP_TICKET_SIZE, OMC__TCP_SECRET_SIZE);
        omc__tcp_mac_init(&x->mac, x->secret);
    }
    if (!x->host[0]) snprintf(x->host, sizeof(x->host), "%s", peer->host);
    return OMC_OK;
}

/* A cached connection is sound if nothing is waiting on it (EOF or stray bytes mean no). */
OMC__PRIVATE int omc__tcp_rx_reusable(void* user, void* chan) {
    omc__tcp_rx* x = (omc__tcp_rx*)chan;
    struct pollfd p;
    (void)user;
    if (x->fd < 0) return 1;
    p.fd = x->fd; p.events = POLLIN; p.revents = 0;
    return poll(&p, 1, 0) == 0;
}

/* One try at the data connection: connect, read the port's nonce, hello (proving the ticket
   over the nonce), ack - all before the deadline, and each wait ends (OMC_ERR_CLOSED) when the
   connector closes, so a silent data port never holds up a close or destroy. *closed says the sender closed (or reset) the
   connection after accepting it and before any ack: the one failure worth another try. */
OMC__PRIVATE omc_result omc__tcp_rx_dial(omc__tcp_plane* T, omc__tcp_rx* x, omc_time_ns deadline, int* closed) {
    uint8_t hello[OMC__TCP_HELLO_SIZE], ack[OMC__TCP_ACK_SIZE], frame[OMC__TCP_NONCE_SIZE], nonce[16];
    omc_result r;
    *closed = 0;
    r = omc__fd_connect(x->host, x->port, deadline, T->closing, &x->fd);
    if (r != OMC_OK) {
        if (r != OMC_ERR_CLOSED)
            OMC__LOG(&T->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "data connection to %s:%u: %s", x->host, (unsigned)x->port, omc_result_str(r));
        return r;
    }
    do { x->token = omc__random_u64(); } while (x->token == 0);
    r = omc__fd_read_all(x->fd, frame, sizeof(frame), deadline, T->closing);
    if (r == OMC_OK && (r = omc__tcp_nonce_decode(frame, nonce)) == OMC_ERR_VERSION)
        OMC__LOG(&T->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "data connection to %s:%u: the sender asks for data hello version %u, "
                 "this receiver speaks version %d", x->host, (unsigned)x->port, (unsigned)omc__get_u16(frame + 4), OMC__TCP_HELLO_VERSION);
    if (r == OMC_OK) {
        omc__tcp_hello_encode(hello, x->token, omc_incarnation(), x->ticket, x->secret, nonce);
        r = omc__fd_write_all(x->fd, hello, sizeof(hello), deadline, NULL);
    }
    if (r == OMC_OK) r = omc__fd_read_all(x->fd, ack, sizeof(ack), deadline, T->closing);
    *closed = r == OMC_ERR_CONNECTION;      /* EOF or reset: an ack with a code is a refusal (below) */
    if (r == OMC_OK && (omc__get_u32(ack) != OMC__TCP_ACK_MAGIC || omc__get_u32(ack + 4) != 0)) r = OMC_ERR_PROTOCOL;
    if (r != OMC_OK && !*closed && r != OMC_ERR_CLOSED)
        OMC__LOG(&T->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "data hello to %s:%u: %s", x->host, (unsigned)x->port, omc_result_str(r));
    if (r != OMC_OK) {
        close(x->fd);
        x->fd = -1;
    } else omc__fd_streaming(x->fd);
    return r;
}

/* The pause before another try: pause_ms, or less when the connector closes (then 1). */
OMC__PRIVATE int omc__tcp_retry_pause(omc__tcp_plane* T, int64_t pause_ms) {
    omc_time_ns until = omc_now_ns() + (omc_time_ns)pause_ms * 1000000LL;
    int closing;
    pthread_mutex_lock(&T->pause_mu);
    while (!(closing = T->closing && omc__load(T->closing)) && omc_now_ns() < until)
        omc__cond_wait_until(&T->pause_cv, &T->pause_mu, until);
    pthread_mutex_unlock(&T->pause_mu);
    return closing;
}

/* Open the data connection (see omc__tcp_rx_dial), trying again - at most
   OMC__TCP_CONNECT_TRIES in all, after a jittered pause that doubles, never past the deadline -
   when the sender closed it before acknowledging the hello. Why: a sender keeps a bounded
   number of connections waiting for their hello and replaces a silent one with a newcomer
   after a grace (the slow-loris defence), so among many receivers connecting at once on a
   loaded host one can be closed before its hello was read; that says nothing about the next
   try, and the jitter keeps the tries of many receivers apart. An explicit refusal (an ack
   with a code, a version the sender does not speak), a refused connect or a timeout is never
   tried again. A ticket the sender no longer knows also ends in a silent close (a port
   scanner learns nothing), so it too costs a few tries before the get fails. */
OMC__PRIVATE omc_result omc__tcp_rx_connect(omc__tcp_plane* T, omc__tcp_rx* x, omc_time_ns deadline) {
    omc_result r;
    int attempt, closed = 0;
    if (!x->has_ticket) {
        OMC__LOG(&T->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "data connection to %s:%u: the sender's HELLO answer carried no data ticket "
                 "(its ticket table is full, or it predates data hello version %d): no data connection without one",
                 x->host, (unsigned)x->port, OMC__TCP_HELLO_VERSION);
        return OMC_ERR_AUTH;
    }
    for (attempt = 1;; attempt++) {
        int64_t pause_ms = (int64_t)T->retry_ms << (attempt - 1);
        r = omc__tcp_rx_dial(T, x, deadline, &closed);
        if (r == OMC_OK || !closed) break;
        pause_ms = pause_ms / 2 + (int64_t)(omc__random_u64() % (uint64_t)(pause_ms / 2 + 1));    /* half to all of it */
        if (attempt >= OMC__TCP_CONNECT_TRIES || omc__poll_ms(deadline, (int)pause_ms + 1) <= pause_ms) break;
        OMC__LOG(&T->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "data hello to %s:%u: the sender closed the connection before its ack "
                 "(try %d of %d): trying again in %lld ms", x->host, (unsigned)x->port, attempt, OMC__TCP_CONNECT_TRIES, (long long)pause_ms);
        if (omc__tcp_retry_pause(T, pause_ms)) return OMC_ERR_CLOSED;
    }
    if (r != OMC_OK && closed)
        OMC__LOG(&T->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "data hello to %s:%u: %s (the sender closed the connection before its ack, "
                 "%d tries)", x->host, (unsigned)x->port, omc_result_str(r), attempt);
    else if (attempt > 1)
        OMC__LOG(&T->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "data hello to %s:%u: acknowledged on try %d", x->host, (unsigned)x->port, attempt);
    return r;
}

OMC__PRIVATE omc_result omc__tcp_rx_prepare(void* user, void* chan, omc__dp_xfer* xf, omc_time_ns deadline,
                                            uint8_t* desc, uint32_t cap, uint32_t* desc_len) {
    omc__tcp_rx* x = (omc__tcp_rx*)chan;
    if (cap < 8) return OMC_ERR_INTERNAL;
    if (x->fd < 0) {
        omc_result r = omc__tcp_rx_connect((omc__tcp_plane*)user, x, deadline);
        if (r != OMC_OK) return r;
        x->owed = 0;
        x->queued = 0;
    }
    x->hdr_got = 0;
    x->trl_got = 0;
    x->receipt_sent = 0;
    x->op = 0;
    x->refused = 0;
    x->detail = 0;
    x->deadline = deadline;
    xf->received = 0;
    xf->complete = 0;
    omc__put_u64(desc, x->token);
    *desc_len = 8;
    return OMC_OK;
}

OMC__PRIVATE int omc__tcp_rx_fd(void* user, void* chan) { (void)user; return ((omc__tcp_rx*)chan)->fd; }

/* Send the requests held back, up to the next PULL (which is then owed): when an answer is
   awaited and nothing is owed, when the owed PULL's receipt goes (receipt: its 8 bytes, sent
   first in the same write), or when that PULL was refused (receipt NULL: no receipt is owed).
   One write for all of it: the sender finds the next request waiting as soon as it is ready. */
OMC__PRIVATE omc_result omc__tcp_rx_release(omc__tcp_rx* x, const uint8_t* receipt) {
    uint8_t buf[OMC__TCP_RECEIPT_SIZE + OMC__TCP_AHEAD_MAX * OMC__TCP_REQUEST_SIZE];
    uint32_t n = 0, len = 0;
    omc_result r;
    if (receipt) { memcpy(buf, receipt, OMC__TCP_RECEIPT_SIZE); len = OMC__TCP_RECEIPT_SIZE; }
    x->owed = 0;
    while (n < x->queued && !x->owed) {
        const uint8_t* q = x->queue + (size_t)n * OMC__TCP_REQUEST_SIZE;
        memcpy(buf + len, q, OMC__TCP_REQUEST_SIZE);
        len += OMC__TCP_REQUEST_SIZE;
        x->owed = q[OMC__TCP_REQ_OP_AT] == OMC__TCP_REQ_PULL;
        n++;
    }
    x->queued -= n;
    if (x->queued) memmove(x->queue, x->queue + (size_t)n * OMC__TCP_REQUEST_SIZE, (size_t)x->queued * OMC__TCP_REQUEST_SIZE);
    if (!len) return OMC_OK;
    r = omc__fd_write_all(x->fd, buf, len, x->deadline, NULL);
    return r == OMC_OK ? OMC_OK : OMC_ERR_CONNECTION;
}

/* Send a request on the channel's data connection (after rx_prepare): the sender answers on it
   with a header and the payload (PULL) or a status record (CLAIM, or any refusal). */
static omc_result omc__tcp_rx_request(void* user, void* chan, omc__dp_xfer* xf, const omc__dp_request* dq, omc_time_ns deadline) {
    omc__tcp_rx* x = (omc__tcp_rx*)chan;
    uint8_t b[OMC__TCP_REQUEST_SIZE];
    omc__tcp_req q;
    (void)user; (void)xf;
    memset(&q, 0, sizeof(q));
    q.op = dq->op == OMC__DP_REQ_CLAIM ? OMC__TCP_REQ_CLAIM : OMC__TCP_REQ_PULL;
    /* sent ahead: the stream carries its answer after the ones before it; what the reading
       side needs is only which kind of answer to expect */
    if (dq->ahead == OMC__DP_AHEAD_READ) {
        x->op = q.op;
        return x->owed || !x->queued ? OMC_OK : omc__tcp_rx_release(x, NULL);    /* send what is held */
    }
    q.xfer = dq->xfer;
    q.entry_id = dq->entry_id;
    q.expect_incarnation = dq->expect_incarnation;
    q.capacity = dq->capacity;
    q.budget_ms = dq->budget_ms;
    omc__tcp_key_proof(&x->mac, dq->entry_id, dq->qkey ? dq->qkey : "", dq->qkey ? dq->qlen : 0, q.proof);
    omc__tcp_req_encode(b, &q);
    if (dq->ahead == OMC__DP_AHEAD_SEND) {     /* the transfer being read keeps its own op */
        /* held until an answer is awaited (then the requests go in one write) or, behind a PULL,
           until that PULL's receipt goes (the sender reads the receipt right after the PULL) */
        if (x->queued >= OMC__TCP_AHEAD_MAX) return OMC_ERR_BUSY;
        memcpy(x->queue + (size_t)x->queued * OMC__TCP_REQUEST_SIZE, b, sizeof(b));
        x->queued++;
        return OMC_OK;
    }
    x->op = q.op;
    if (x->owed || x->queued) return OMC_ERR_INTERNAL;     /* a plain request never follows held ones */
    x->owed = q.op == OMC__TCP_REQ_PULL;
    return omc__fd_write_all(x->fd, b, sizeof(b), deadline, NULL);
}

/* rx_requests: a sender that takes requests (HELLO capability bit 2, checked by the connector)
   and handed this channel a ticket. */
static int omc__tcp_rx_requests(void* user, void* chan) { (void)user; return ((const omc__tcp_rx*)chan)->has_ticket; }

/* Read what has arrived: first the header (checked before a single payload byte is read), then
   payload bytes straight into the destination, never past what the header announced. */
/* Read what has arrived: first the header (checked before a single payload byte is read), then
   payload bytes straight into the destination, never past what the header announced, then the
   trailer, which the sender writes only after it recorded the read. */
OMC__PRIVATE omc_result omc__tcp_rx_progress(void* user, void* chan, omc__dp_xfer* xf, int done_received) {
    omc__tcp_rx* x = (omc__tcp_rx*)chan;
    (void)user; (void)done_received;
    while (!xf->complete) {
        ssize_t k;
        int late;
        int part = x->hdr_got < OMC__TCP_HEADER_SIZE ? 0 : xf->received < xf->size ? 1 : 2;
        if (part == 2 && x->has_ticket && !x->receipt_sent) {
            /* every byte is in the destination: tell the sender, which records the read only
               now (a sender of the first release - no ticket - expects no receipt) */
            uint8_t rc[OMC__TCP_RECEIPT_SIZE];
            omc__put_u32(rc, OMC__TCP_RECEIPT_MAGIC);
            omc__put_u32(rc + 4, 0);
            if (omc__tcp_rx_release(x, rc) != OMC_OK) return OMC_ERR_CONNECTION;
            x->receipt_sent = 1;
        }
        /* once a valid header came, the sender is pushing: wait in recv itself for the rest
           (MSG_WAITALL, at most a slice per call, never past the get's deadline) */
        int wait = part > 0 && !xf->nowait && (x->deadline == OMC_WAIT_FOREVER || x->deadline - omc_now_ns() > OMC__NET_SLICE_MS * 1000000LL)
                   ? MSG_WAITALL : MSG_DONTWAIT;
        if (part == 0) k = recv(x->fd, x->hdr + x->hdr_got, OMC__TCP_HEADER_SIZE - x->hdr_got, MSG_DONTWAIT);
        else if (part == 1) {
            uint64_t left = xf->size - xf->received;
            k = recv(x->fd, (uint8_t*)xf->dst.data + xf->received, (size_t)omc__min(left, (uint64_t)OMNICONN_TCP_CHUNK), wait);
        } else k = recv(x->fd, x->trl + x->trl_got, OMC__TCP_TRAILER_SIZE - x->trl_got, wait);
        /* past the get's deadline the sender gives up too (its budget is ours): what follows
           is the end of the push, not a broken peer */
        late = x->deadline != OMC_WAIT_FOREVER && omc_now_ns() >= x->deadline;
        if (k == 0) return late ? OMC_ERR_TIMEOUT : OMC_ERR_CONNECTION;
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return OMC_OK;
            return late ? OMC_ERR_TIMEOUT : OMC_ERR_CONNECTION;
        }
        if (part == 0) {
            x->hdr_got += (uint32_t)k;
            if (x->hdr_got == OMC__TCP_HEADER_SIZE && x->op && omc__get_u32(x->hdr) == OMC__TCP_STATUS_MAGIC) {
                /* the answer to a request without payload: a claim recorded, or a refusal
                   (nothing moved; the connection stays in step and may be kept) */
                int32_t code = 0;
                omc_result r;
                if (omc__tcp_status_decode(x->hdr, xf->transfer_id, &code, &x->detail) != OMC_OK) return OMC_ERR_PROTOCOL;
                if (code == 0) {
                    if (x->op != OMC__TCP_REQ_CLAIM) return OMC_ERR_PROTOCOL;
                    xf->complete = 1;
                    return OMC_OK;
                }
                r = (omc_result)code;
                x->refused = 1;
                xf->refused = 1;
                xf->detail = x->detail;
                /* a refused PULL owes no receipt: what waited behind it goes now */
                if (x->op == OMC__TCP_REQ_PULL && omc__tcp_rx_release(x, NULL) != OMC_OK) return OMC_ERR_CONNECTION;
                return strcmp(omc_result_name(r), "OMC_ERR_UNKNOWN") == 0 ? OMC_ERR_REMOTE : r;
            }
            if (x->hdr_got == OMC__TCP_HEADER_SIZE &&
                (x->op == OMC__TCP_REQ_CLAIM || omc__tcp_header_check(x->hdr, xf->transfer_id, xf->size, xf->dst.size) != OMC_OK))
                return OMC_ERR_PROTOCOL;
        } else if (part == 1) {
            xf->received += (uint64_t)k;
            if (late && xf->received < xf->size) return OMC_OK;     /* the caller says TIMEOUT */
        }
        else {
            x->trl_got += (uint32_t)k;
            if (x->trl_got == OMC__TCP_TRAILER_SIZE) {
                if (omc__get_u32(x->trl) != OMC__TCP_END_MAGIC || omc__get_u32(x->trl + 4) != 0) return OMC_ERR_PROTOCOL;
                xf->complete = 1;
            }
        }
    }
    return OMC_OK;
}

OMC__PRIVATE void omc__tcp_rx_end(void* user, void* chan, omc__dp_xfer* xf, omc_result r) {
    omc__tcp_rx* x = (omc__tcp_rx*)chan;
    (void)user; (void)xf;
    /* a refusal left the stream in step; anything else half-done (or a request still
       unanswered) may leave bytes on it */
    if (r != OMC_OK && x->fd >= 0 && !x->refused && (x->op || x->hdr_got || xf->received || x->trl_got)) {
        close(x->fd);
        x->fd = -1;
        x->owed = 0;                    /* what was held back dies with the connection */
        x->queued = 0;
    }
}

OMC__PRIVATE void omc__tcp_rx_close(void* user, void* chan) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    omc__tcp_rx* x = (omc__tcp_rx*)chan;
    if (!x) return;
    if (x->fd >= 0) close(x->fd);
    omc__free(&T->hooks, x);
}

/* ---- the plane's life: the connector that has it built in opens it (its lock), makes it
        listen (a sender), closes it and reads its figures; nothing else ---- */

OMC__PRIVATE omc_result omc__tcp_plane_init(omc__tcp_plane* T) {
    T->listen_fd = -1;
    T->retry_ms = OMC__TCP_RETRY_MS;
    if (pthread_mutex_init(&T->mu, NULL) != 0) return OMC_ERR_SYSTEM;
    if (omc__cond_init_monotonic(&T->idle_cv) != 0) { pthread_mutex_destroy(&T->mu); return OMC_ERR_SYSTEM; }
    if (pthread_mutex_init(&T->pause_mu, NULL) != 0) goto no_pause_mu;
    if (omc__cond_init_monotonic(&T->pause_cv) != 0) goto no_pause_cv;
    return OMC_OK;
no_pause_cv:
    pthread_mutex_destroy(&T->pause_mu);
no_pause_mu:
    pthread_cond_destroy(&T->idle_cv);
    pthread_mutex_destroy(&T->mu);
    return OMC_ERR_SYSTEM;
}

OMC__PRIVATE void omc__tcp_plane_uninit(omc__tcp_plane* T) {
    pthread_mutex_destroy(&T->mu);
    pthread_cond_destroy(&T->idle_cv);
    pthread_mutex_destroy(&T->pause_mu);
    pthread_cond_destroy(&T->pause_cv);
}

/* The connector is closing (its closed flag, T->closing, is set): end a retry pause now. */
OMC__PRIVATE void omc__tcp_plane_wake(omc__tcp_plane* T) {
    pthread_mutex_lock(&T->pause_mu);
    pthread_cond_broadcast(&T->pause_cv);
    pthread_mutex_unlock(&T->pause_mu);
}

/* The data port (0: none) and health figures. */
OMC__PRIVATE void omc__tcp_plane_stats(omc__tcp_plane* T, uint16_t* port, uint64_t* protocol_errors, uint64_t* connections) {
    if (port) *port = T->port;
    if (protocol_errors) *protocol_errors = omc__load(&T->protocol_errors);
    if (connections) *connections = omc__load(&T->nregistered);
}

/* ---- the listener's side of the plane: its sockets in the listener's poll, the requests that
        come on data connections, the session tickets ---- */

static omc_result omc__tcp_tx_ticket(void* user, const uint8_t* channel, uint32_t channel_len, const char* addr, int session,
                                     const char* peer_key, uint8_t* out, uint32_t cap, uint32_t* out_len) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    *out_len = 0;
    if (T->listen_fd < 0) return OMC_OK;    /* no data port: nothing to ticket */
    if (cap < OMC__TCP_TICKET_SIZE + OMC__TCP_SECRET_SIZE) return OMC_ERR_INTERNAL;
    *out_len = OMC__TCP_TICKET_SIZE + OMC__TCP_SECRET_SIZE;
    return omc__tcp_ticket_issue(T, channel, channel_len, addr, session, peer_key, out);
}

static void omc__tcp_tx_session_gone(void* user, int session) { omc__tcp_session_gone((omc__tcp_plane*)user, session); }

static uint32_t omc__tcp_tx_item_count(void* user) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    return 1 + T->npending + (uint32_t)omc__load(&T->nregistered) + 8;
}

static int omc__tcp_tx_items(void* user, struct pollfd* items, void** who, int max) {
    return omc__tcp_items((omc__tcp_plane*)user, items, who, max);
}

static void omc__tcp_tx_serve(void* user, const struct pollfd* items, void* const* who, int n) {
    omc__tcp_serve((omc__tcp_plane*)user, items, who, n);
}

/* The next complete request on a data connection, decoded for the connector: the session is
   the one the connection registered with (its ticket), the descriptor its token. */
static int omc__tcp_tx_next_request(void* user, omc__dp_request* dq) {
    omc__tcp_plane* T = (omc__tcp_plane*)user;
    omc__tcp_conn* c = omc__tcp_next_request(T);
    omc__tcp_req q;
    if (!c) return 0;
    memset(dq, 0, sizeof(*dq));
    dq->status = omc__tcp_req_decode(c->req, OMC__TCP_REQUEST_SIZE, &q);     /* checked when it came */
    dq->op = q.op == OMC__TCP_REQ_CLAIM ? OMC__DP_REQ_CLAIM : OMC__DP_REQ_PULL;
    dq->budget_ms = q.budget_ms;
    dq->xfer = q.xfer;
    dq->entry_id = q.entry_id;
    dq->expect_incarnation = q.expect_incarnation;
    dq->capacity = q.capacity;
    dq->handle = c;
    dq->receiver_incarnation = c->incarnation;
    if (c->ticket && !c->ticket->gone) { dq->channel = c->ticket->rid; dq->channel_len = c->ticket->rid_len; }    /* else its session ended */
    memcpy(dq->desc, c->key + OMC__TCP_TICKET_SIZE, 8);     /* the connection's token, as a PULL names it */
    dq->desc_len = 8;
    memcpy(dq->addr, c->addr, sizeof(dq->addr));
    return 1;
}

/* Does the request on q->handle prove qkey for the entry it names? Its connection is BUSY (the
   connector's until answered), so its bytes and its ticket's key stay put without the lock. */
static int omc__tcp_tx_proves(void* user, const omc__dp_request* q, const char* qkey, uint32_t qlen) {
    const omc__tcp_conn* c = (const omc__tcp_conn*)q->handle;
    uint8_t want[OMC__TCP_PROOF_SIZE];
    (void)user;
    omc__tcp_key_proof(&c->mac, q->entry_id, qkey, qlen, want);
    return omc__equal_ct(want, c->req + 48, sizeof(want));
}

static void omc__tcp_tx_answer(void* user, void* handle, omc_result code, uint64_t xfer, uint64_t detail) {
    omc__tcp_answer_status((omc__tcp_plane*)user, (omc__tcp_conn*)handle, code, xfer, detail);
}

static const omc__dp_vtable_ext omc__tcp_plane_table = {
    { "tcp", OMC__DP_TCP, OMC_NET_CAP_TCP, OMC__DP_FLAG_TRY_NOW | OMC__DP_FLAG_SELF_COMPLETE | OMC__DP_FLAG_EXT | OMC__DP_FLAG_PIPELINE,
      omc__tcp_attach, omc__tcp_detach,
      omc__tcp_tx_hello, omc__tcp_tx_push,
      omc__tcp_rx_open, omc__tcp_rx_hello, omc__tcp_rx_ready, omc__tcp_rx_reusable, omc__tcp_rx_prepare,
      omc__tcp_rx_fd, omc__tcp_rx_progress, omc__tcp_rx_end, omc__tcp_rx_close,
      omc__tcp_tx_try },
    { omc__tcp_tx_drop, omc__tcp_tx_await, omc__tcp_tx_receipt, omc__tcp_tx_end, omc__tcp_tx_ticket, omc__tcp_tx_session_gone,
      omc__tcp_tx_item_count, omc__tcp_tx_items, omc__tcp_tx_serve, omc__tcp_tx_next_request, omc__tcp_tx_answer,
      omc__tcp_rx_requests, omc__tcp_rx_request, omc__tcp_tx_proves }
};
#define omc__tcp_plane_vt (omc__tcp_plane_table.base)

/* ============================================================================================== */
/* [SECTION] Implementation: endpoints, hosts, ports, keys                                       */
/* ============================================================================================== */

OMNICONN_API omc_result omc_tcp_parse_endpoint(const char* text, char* host, size_t host_size, uint16_t* port) {
    const char *colon, *hs, *he;
    char* end;
    unsigned long p;
    if (!text || !host || !host_size || !port) return OMC_ERR_INVALID_ARG;
    host[0] = '\0';
    *port = 0;
    if (text[0] == '[') {                       /* [v6-literal]:port */
        hs = text + 1;
        he = strchr(hs, ']');
        if (!he || he[1] != ':') return OMC_ERR_INVALID_ARG;
        colon = he + 1;
    } else {
        hs = text;
        colon = strrchr(text, ':');
        if (!colon || memchr(text, ':', (size_t)(colon - text))) return OMC_ERR_INVALID_ARG;   /* bare v6 is ambiguous */
        he = colon;
    }
    if (he == hs || (size_t)(he - hs) >= host_size || !isdigit((unsigned char)colon[1])) return OMC_ERR_INVALID_ARG;
    errno = 0;
    p = strtoul(colon + 1, &end, 10);
    if (errno || *end || p == 0 || p > 65535) return OMC_ERR_INVALID_ARG;
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    *port = (uint16_t)p;
    return OMC_OK;
}

/* The ZMQ endpoint for a host (IPv6 literals in brackets) and port. */
OMC__PRIVATE void omc__net_zmq_endpoint(char* out, size_t n, const char* host, const char* port) {
    if (strchr(host, ':')) snprintf(out, n, "tcp://[%s]:%s", host, port);
    else snprintf(out, n, "tcp://%s:%s", host, port);
}

OMC__PRIVATE int omc__addr_usable(const struct sockaddr* sa) {
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in*)sa)->sin_addr.s_addr);
        return a != 0 && (a >> 24) != 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr* a = &((const struct sockaddr_in6*)sa)->sin6_addr;
        /* link-local addresses need a scope id that other hosts cannot use */
        return !IN6_IS_ADDR_UNSPECIFIED(a) && !IN6_IS_ADDR_LOOPBACK(a) && !IN6_IS_ADDR_LINKLOCAL(a) && !IN6_IS_ADDR_V4MAPPED(a);
    }
    return 0;
}

/* The source address the kernel would use towards a public address: connect() on a UDP socket
   only chooses a route and a source address, it sends nothing. */
OMC__PRIVATE int omc__detect_route(int v6, char* out, size_t n) {
    struct sockaddr_storage sa, me;
    socklen_t len = sizeof(me);
    int fd, ok = 0;
    memset(&sa, 0, sizeof(sa));
    if (v6) {
        struct sockaddr_in6* s6 = (struct sockaddr_in6*)&sa;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(53);
        inet_pton(AF_INET6, "2001:4860:4860::8888", &s6->sin6_addr);    /* any global address works */
    } else {
        struct sockaddr_in* s4 = (struct sockaddr_in*)&sa;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(53);
        inet_pton(AF_INET, "8.8.8.8", &s4->sin_addr);
    }
    fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    if (connect(fd, (struct sockaddr*)&sa, v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) == 0 &&
        getsockname(fd, (struct sockaddr*)&me, &len) == 0 && omc__addr_usable((struct sockaddr*)&me) &&
        getnameinfo((struct sockaddr*)&me, len, out, (socklen_t)n, NULL, 0, NI_NUMERICHOST) == 0)
        ok = 1;
    close(fd);
    return ok;
}

/* The first usable address the host name resolves to. */
OMC__PRIVATE int omc__detect_hostname(int v6, char* out, size_t n) {
    char name[256];
    struct addrinfo hints, *res = NULL, *ai;
    int ok = 0;
    if (gethostname(name, sizeof(name)) != 0) return 0;
    name[sizeof(name) - 1] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = v6 ? AF_INET6 : AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(name, NULL, &hints, &res) != 0) return 0;
    for (ai = res; ai && !ok; ai = ai->ai_next)
        if (omc__addr_usable(ai->ai_addr) &&
            getnameinfo(ai->ai_addr, (socklen_t)ai->ai_addrlen, out, (socklen_t)n, NULL, 0, NI_NUMERICHOST) == 0)
            ok = 1;
    freeaddrinfo(res);
    return ok;
}

OMNICONN_API omc_result omc_detect_host(int family, char* out, size_t out_size, const char** how) {
    char buf[INET6_ADDRSTRLEN + 8];
    const char* h = "loopback";
    int i, found = 0;
    int order[2] = { 0, 1 };    /* IPv4 first unless only IPv6 was asked for */
    int tries = family == 0 ? 2 : 1;
    if (how) *how = NULL;
    if (!out || !out_size || (family != 0 && family != 4 && family != 6)) return OMC_ERR_INVALID_ARG;
    if (family == 6) order[0] = 1;
    for (i = 0; i < tries && !found; i++) if (omc__detect_route(order[i], buf, sizeof(buf))) { found = 1; h = "route"; }
    for (i = 0; i < tries && !found; i++) if (omc__detect_hostname(order[i], buf, sizeof(buf))) { found = 1; h = "hostname"; }
    if (!found) snprintf(buf, sizeof(buf), "%s", family == 6 ? "::1" : "127.0.0.1");
    if (strlen(buf) >= out_size) return OMC_ERR_TOO_LARGE;
    memcpy(out, buf, strlen(buf) + 1);
    if (how) *how = h;
    return OMC_OK;
}

#define OMC__PORT_BASE_DEFAULT 50051
#define OMC__PORT_PURPOSE_WIDTH 100
#define OMC__PORT_ORCHESTRATOR 200

OMNICONN_API omc_result omc_port_compute(const omc_port_spec* s, uint16_t* out_port) {
    omc_hooks hooks = omc__hooks_resolve(NULL);
    int64_t base, port, offset;
    int tp;
    if (out_port) *out_port = 0;
    if (!s || !out_port) return OMC_ERR_INVALID_ARG;
    base = s->base ? s->base : OMC__PORT_BASE_DEFAULT;
    tp = s->tp_size ? s->tp_size : 1;
    if (base < 0 || s->from_stage < 0 || s->dp_index < 0 || tp < 1 || s->tp_rank < 0 || s->tp_rank >= tp ||
        (s->purpose != OMC_PORT_REQUEST_FORWARDING && s->purpose != OMC_PORT_KV_TRANSFER)) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT,
                 "port spec invalid: base %d purpose %d stage %d dp %d tp %d/%d (fields must be >= 0, rank < tp size, purpose 0 or 100)",
                 s->base, (int)s->purpose, s->from_stage, s->dp_index, s->tp_rank, s->tp_size);
        return OMC_ERR_INVALID_ARG;
    }
    if (s->orchestrator) {
        offset = s->from_stage;
        port = base + OMC__PORT_ORCHESTRATOR + offset;
    } else {
        offset = (int64_t)s->from_stage + (int64_t)s->dp_index * tp + s->tp_rank;
        port = base + (int64_t)s->purpose + offset;
    }
    if (offset >= OMC__PORT_PURPOSE_WIDTH) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT,
                 "port offset %lld (stage %d + dp %d x tp %d + rank %d) spills out of its %d-port range into the next purpose's",
                 (long long)offset, s->from_stage, s->dp_index, tp, s->tp_rank, OMC__PORT_PURPOSE_WIDTH);
        return OMC_ERR_INVALID_ARG;
    }
    if (port < 1 || port > 65535) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "port %lld is outside 1..65535 (base %lld)", (long long)port, (long long)base);
        return OMC_ERR_INVALID_ARG;
    }
    *out_port = (uint16_t)port;
    return OMC_OK;
}

OMNICONN_API omc_result omc_port_check(const omc_port_spec* specs, uint32_t count, uint16_t* ports_out,
                                       uint32_t* clash_a, uint32_t* clash_b) {
    omc_hooks hooks = omc__hooks_resolve(NULL);
    uint16_t* ports;
    uint32_t i, j;
    omc_result r = OMC_OK;
    if (clash_a) *clash_a = 0;
    if (clash_b) *clash_b = 0;
    if ((!specs && count) || count > (1u << 20)) return OMC_ERR_INVALID_ARG;
    ports = ports_out ? ports_out : (uint16_t*)omc__calloc(&hooks, sizeof(uint16_t) * (count ? count : 1));
    if (!ports) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < count && r == OMC_OK; i++) r = omc_port_compute(&specs[i], &ports[i]);
    /* quadratic on purpose: a pipeline has tens of edges, and the first clash is reported exactly */
    for (i = 0; i < count && r == OMC_OK; i++)
        for (j = i + 1; j < count && r == OMC_OK; j++)
            if (ports[i] == ports[j]) {
                OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT,
                         "port collision: specs %u and %u both get port %u (stage %d/%d, dp %d/%d, rank %d/%d, orchestrator %d/%d)",
                         i, j, (unsigned)ports[i], specs[i].from_stage, specs[j].from_stage, specs[i].dp_index, specs[j].dp_index,
                         specs[i].tp_rank, specs[j].tp_rank, specs[i].orchestrator, specs[j].orchestrator);
                if (clash_a) *clash_a = i;
                if (clash_b) *clash_b = j;
                r = OMC_ERR_EXISTS;
            }
    if (!ports_out) omc__free(&hooks, ports);
    return r;
}

/* A Z85 Curve25519 key: 40 characters that decode. */
OMC__PRIVATE int omc__curve_key_ok(const char* k) {
    uint8_t bin[32];
    return k && strlen(k) == OMC_CURVE_KEY_LEN && omc__zmq_load(NULL, 0) == OMC_OK && omc__zmq_z85_decode(bin, k) != NULL;
}

OMNICONN_API omc_result omc_tcp_curve_keypair(char public_key[OMC_CURVE_KEY_LEN + 1], char secret_key[OMC_CURVE_KEY_LEN + 1]) {
    if (!public_key || !secret_key) return OMC_ERR_INVALID_ARG;
    if (omc__zmq_load(NULL, 0) != OMC_OK || !omc__zmq_has("curve")) return OMC_ERR_UNAVAILABLE;
    return omc__zmq_curve_keypair(public_key, secret_key) == 0 ? OMC_OK : OMC_ERR_UNAVAILABLE;
}

OMNICONN_API omc_result omc_tcp_read_key(const char* path, char key[OMC_CURVE_KEY_LEN + 1]) {
    char buf[256];
    size_t n, s = 0;
    FILE* f;
    if (!path || !key) return OMC_ERR_INVALID_ARG;
    key[0] = '\0';
    f = fopen(path, "rb");
    if (!f) return OMC_ERR_NOT_FOUND;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (s < n && isspace((unsigned char)buf[s])) s++;
    while (n > s && isspace((unsigned char)buf[n - 1])) buf[--n] = '\0';
    if (n - s != OMC_CURVE_KEY_LEN || !omc__curve_key_ok(buf + s)) return OMC_ERR_MALFORMED;
    memcpy(key, buf + s, OMC_CURVE_KEY_LEN + 1);
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - state                                        */
/* ============================================================================================== */
/*
    Threads. A sender runs one listener thread and a few worker threads; a receiver runs none
    (a get works in its caller's thread).
    - The listener owns the ROUTER socket (ZMQ sockets are not thread-safe), its monitor, the
      ZAP handler and the TCP data port. It answers HELLO and QUERY itself, holds QUERYs for
      absent keys (long poll), turns a PULL - on the side channel, or a request on a data
      connection - into a job, starts it without blocking, finishes a small one itself (the
      receipt, the trailer) and hands a large one to the workers, and answers DONE or ERROR on
      the side channel when a side-channel job comes back.
    - Why workers and not one poll loop: a push is a blocking call bounded by its deadline -
      that is the data-plane contract, and an RDMA push waits on a completion queue - so pushes
      run on workers and the listener stays responsive to HELLO, QUERY and ABORT while gigabytes
      move. Workers never touch the ROUTER: they queue their results and wake the listener
      through an eventfd it polls.
    Entries. The owner's entry table of the core, under one mutex. An entry has readers_left
    (pulls that may still start) and holds (pushes in flight). A PULL reserves a reader and
    holds the entry; success keeps the reader used, failure gives it back; the entry leaves the
    index when its last reader succeeded (or by cleanup/TTL/close) and its range is freed only
    when, in addition, no push holds it - so a TTL never frees bytes a push is reading.
    Receivers. A peer per sender endpoint (registered by name, or learned from metadata), each
    with a cache of idle channels. A channel is one DEALER socket plus the data plane's
    per-channel state (TCP: one data connection); a get checks one out, uses it alone, and
    checks it back in only if nothing went wrong. A reply carries the transfer id and sequence
    number of its request, so a late answer to an abandoned request is recognised and dropped.
    Locks: N->own.mu (entries), N->job_mu (jobs), N->peer_mu (peers, channel caches), the TCP
    plane's mu (data connections). No code path holds two of them.
*/

#define OMC__NET_RID_MAX     256        /* ZMQ routing ids are at most 255 bytes */
#define OMC__NET_LIST_VISIT  4096       /* entries one LIST page looks at, at most */
#define OMC__NET_MAX_HELD    1024       /* QUERYs held at once; more are answered NOT_FOUND now */
#define OMC__NET_MAX_PEERS   4096       /* senders a receiver remembers */
#define OMC__NET_HANDSHAKE_MS 10000     /* a ZMTP handshake (incl. CURVE) must finish within this */
#define OMC__NET_RETRY_MS    100        /* pause before a failed sender is asked again */
#define OMC__NET_CHAN_IDLE_MS 60000     /* a receiver drops a channel cached longer (before its
                                           sender closes the data connection or forgets the ticket) */
#define OMC__NET_REQUERY_MS  5          /* at least this between two QUERYs to one sender */
#define OMC__NET_MON_EVENTS  (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
#define OMC__NET_MON_CONNECTED 0x0001    /* ZMQ_EVENT_CONNECTED: a receiver's channel reached the sender's port */
#define OMC__NET_MON_DOWN 0x0204         /* ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_DISCONNECTED: refused or dropped */
#define OMC__NET_SILENT_MS 500           /* a peer that leaves our HELLO unanswered this long is not just slow */
#define OMC__NET_ROUTER_MON_EVENTS (OMC__NET_MON_EVENTS | ZMQ_EVENT_DISCONNECTED)   /* the sender's: a session's end drops its ticket */

typedef struct omc__net omc__net;

/* One PULL being served: created by the listener, pushed by a worker, answered by the listener. */
typedef struct omc__net_job {
    struct omc__net_job* next;          /* in the queue or the completion list */
    struct omc__net_job* next_live;     /* every job not yet answered (listener only) */
    uint32_t slot;                      /* the entry, held (pinned) until commit */
    const uint8_t* src;                 /* the entry's bytes and range, copied while pinned */
    omc_range range;
    uint64_t size;
    const omc__dataplane* dp;
    uint64_t xfer, receiver_incarnation;
    uint32_t seq;
    uint32_t rid_len;
    uint8_t rid[OMC__NET_RID_MAX];
    uint32_t desc_len;
    uint8_t desc[OMC__WIRE_MAX_DESC];
    omc_time_ns deadline;
    int abort;                          /* atomic: non-zero = stop with this code */
    int committed;                      /* the read is recorded (commit ran) */
    int counted;                        /* already counted in pushes (before its trailer went out) */
    int direct;                         /* a request on the plane's own connection (no side-channel reply) */
    int awaiting;                       /* the listener waits for its receipt (tx_await) */
    char addr[64];                      /* the receiver's address (fair scheduling across addresses) */
    char peer_key[OMC__PEER_KEY_MAX];   /* its CURVE public key in hex ("" = no CURVE) */
    omc_time_ns since;                  /* when that wait began (OMNICONN_TCP_STALL_MS) */
    uint64_t plane_state[OMC__DP_STATE_WORDS];  /* the plane's own (omc__dp_push.state) */
    omc__net* owner;
    omc_result result;
} omc__net_job;

/* A QUERY for a key that is not there yet (listener only). */
typedef struct omc__net_held {
    struct omc__net_held* next;
    uint64_t xfer;
    uint32_t seq;
    omc_time_ns expires;
    uint32_t rid_len;
    uint8_t rid[OMC__NET_RID_MAX];
    uint32_t qlen;
    char qkey[OMC_KEY_MAX];
} omc__net_held;

typedef struct omc__net_chan omc__net_chan;

/* One line per peer (and kind of failure) per OMC__NET_SAY_MS: what a listener last said about
   handshakes that failed, so a client retrying every 100 ms costs one log line, not hundreds. */
#define OMC__NET_SAY_MS 10000
typedef struct omc__net_said {
    char who[96];                       /* peer address (or listener endpoint) and the kind */
    omc_time_ns at;
    uint64_t hidden;                    /* failures since that line */
} omc__net_said;

typedef struct omc__net_peer {
    struct omc__net_peer* next;         /* every peer, in the order we learned them */
    uint64_t hs_said_at;                /* atomic: when a failed handshake with it was last logged */
    char name[OMC_TCP_NAME_MAX];
    char host[OMC_TCP_HOST_MAX];
    uint16_t port;
    int registered;
    char server_key[OMC_CURVE_KEY_LEN + 1];     /* "" = the connector's curve.server_key */
    omc__net_chan* idle;
    uint32_t nidle;
    /* statistics, under peer_mu */
    uint64_t incarnation, requests, failures, timeouts, auth_failures, restarts, bytes;
    omc_time_ns last_ok, last_fail;
    omc_result last_error;
    char last_error_text[160];
} omc__net_peer;

struct omc__net_chan {
    omc__net_chan* next;                /* in its peer's idle list */
    omc__net_peer* peer;
    void* sock;                         /* DEALER */
    void* mon;                          /* PAIR: handshake events, only until HELLO is answered */
    const omc__dataplane* dp;
    void* dpc;                          /* the plane's per-channel state */
    uint64_t incarnation;               /* the sender's, from its HELLO; 0 = not answered yet */
    uint32_t caps;
    uint32_t seq;                       /* of the last request sent */
    uint32_t hello_seq;                 /* of an unanswered HELLO, 0 = none */
    uint64_t xfer;                      /* the get using the channel now */
    omc_time_ns deadline;               /* that get's deadline */
    int hs_failed;                      /* the monitor saw a failed CURVE handshake */
    int tcp_state;                      /* the monitor's last word on the TCP link: 0 none yet, 1 made, 2 refused or dropped */
    omc_time_ns hello_at;               /* when the HELLO went out */
    int curve;                          /* the channel uses CURVE */
    int hs_logged;                      /* a failed handshake without CURVE was logged */
    const omc_hooks* hooks;
    omc_time_ns idle_since;             /* when it went back into the cache */
};

struct omc__net {
    omc_conn* conn;
    omc__conn_vtable vt;                /* ours: a companion may say OMC_TRANSPORT_RDMA */
    omc_pool* pool;
    void* ctx;                          /* one ZMQ context per connector (and its own ZAP endpoint) */
    int sender, receiver;
    omc__dataplane planes[OMC__DP_MAX]; /* [0] is the built-in TCP plane (tcp below) */
    uint32_t nplanes, caps;
    omc__tcp_plane tcp;                 /* its state: the connector creates, closes and reads its
                                           health figures; everything else goes through planes[0] */
    uint32_t max_idle;
    int side_pull;                      /* receiver: PULLs only on the side channel (desc) */
    uint64_t inline_max;                /* sender: payloads up to this ride in the metadata; 0 = none */
    uint64_t next_xfer;                 /* atomic */
    /* sender */
    char host[OMC_TCP_HOST_MAX];        /* what we advertise */
    uint16_t port;
    void* router;
    void* router_mon;
    void* zap;
    int curve_server;
    uint8_t (*allowed)[32];
    uint32_t nallowed;
    int wake_fd;
    char msg_addr[64];                  /* listener only: the address of the message it handles */
    char msg_key[OMC__PEER_KEY_MAX];    /* listener only: and its CURVE public key in hex ("" = no CURVE) */
    omc__net_said said[16];             /* listener only: handshake failures logged lately, per peer */
    int msg_fd;                         /* listener only: and its connection's descriptor (-1: unknown) */
    pthread_t listener;
    int listener_started;
    pthread_t* workers;
    uint32_t nworkers, workers_started;
    int stop;                           /* atomic */
    omc__owner own;                     /* the entries (holds = pushes in flight) and their lock */
    uint32_t held_count;                /* atomic (changed under mu, read anywhere) */
    omc__net_held* held;                /* listener only */
    omc__net_job* live;                 /* listener only */
    pthread_mutex_t job_mu;
    pthread_cond_t job_cv;
    omc__net_job* queue;
    omc__net_job* running;              /* jobs a worker is pushing now (under job_mu) */
    omc__net_job** queue_tail;
    omc__net_job* done;
    struct pollfd* items;               /* listener poll set, grown as needed */
    void** who;                         /* a plane's handle per item (tx_items) */
    int items_cap;
    uint64_t handshake_failures, auth_failures, protocol_errors;            /* atomic */
    uint64_t pushes, pushes_failed, pushes_in_flight;                       /* atomic */
    /* receiver */
    int curve_client;
    char curve_public[OMC_CURVE_KEY_LEN + 1], curve_secret[OMC_CURVE_KEY_LEN + 1];
    char curve_server_key[OMC_CURVE_KEY_LEN + 1];
    pthread_mutex_t peer_mu;
    omc__net_peer* peers;
    omc__net_peer** peers_tail;
    uint32_t npeers;
    omc__smap peers_by_name, peers_by_ep;
    uint64_t next_mon;                  /* atomic */
    int job_ok, peer_ok, tcp_ok;
};

OMC__PRIVATE int omc__net_closed(omc__net* N) { return omc__load(&N->conn->closed) != 0; }

/* Copy a string, cut to fit (names of learned peers are "host:port", which may be longer). */
OMC__PRIVATE void omc__strcut(char* dst, size_t n, const char* src) {
    size_t len = strlen(src);
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* A code from the wire as an omc_result we know (anything else is "the peer reported an error"). */
OMC__PRIVATE omc_result omc__net_remote_code(int32_t code) {
    omc_result r = (omc_result)code;
    return strcmp(omc_result_name(r), "OMC_ERR_UNKNOWN") == 0 || code >= 0 ? OMC_ERR_REMOTE : r;
}

/* Does a put of this size carry its bytes in the metadata (sender)? The only entries a CLAIM
   may name: the receiver of any other entry cannot have its bytes. */
OMC__PRIVATE int omc__net_inlines(const omc__net* N, uint64_t size) { return N->inline_max && size <= N->inline_max; }

/* Refusals that promise no payload byte moved (the receiver keeps its channel after them). */
OMC__PRIVATE int omc__net_clean_refusal(omc_result r) {
    return r == OMC_ERR_NOT_FOUND || r == OMC_ERR_STALE || r == OMC_ERR_TOO_LARGE || r == OMC_ERR_PEER_RESTARTED ||
           r == OMC_ERR_UNAVAILABLE;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - sender                                       */
/* ============================================================================================== */

OMC__PRIVATE void omc__net_wake(omc__net* N) {
    uint64_t one = 1;
    ssize_t k = write(N->wake_fd, &one, sizeof(one));
    (void)k;    /* a full counter still wakes the listener */
}

/* Send one reply on the ROUTER (listener thread only). A receiver that is gone or not reading
   just loses it: nothing here may block the listener. */
OMC__PRIVATE void omc__net_reply(omc__net* N, const uint8_t* rid, uint32_t rid_len, omc__wire* m) {
    uint8_t buf[OMC__WIRE_MAX];
    uint32_t len;
    m->incarnation = omc_incarnation();
    if (omc__wire_encode(m, buf, sizeof(buf), &len) != OMC_OK) {
        OMC__LOG(&N->conn->hooks, OMC_LOG_ERROR, OMC_LOGITEM_NET, "cannot encode a %s reply (a bug)", omc__wire_type_name(m->type));
        return;
    }
    if (omc__zmq_send(N->router, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 || omc__zmq_send(N->router, buf, len, ZMQ_DONTWAIT) < 0)
        OMC__LOG(&N->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "%s for transfer %llu dropped: %s",
                 omc__wire_type_name(m->type), (unsigned long long)m->xfer, omc__zmq_strerror(omc__zmq_errnum()));
}

#if defined(__GNUC__)
__attribute__((format(printf, 8, 9)))
#endif
OMC__PRIVATE void omc__net_reply_error(omc__net* N, const uint8_t* rid, uint32_t rid_len, uint64_t xfer, uint32_t seq,
                                       omc_result code, uint64_t detail, const char* fmt, ...) {
    omc__wire m;
    char text[OMC__WIRE_MAX_TEXT + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_ERROR;
    m.xfer = xfer;
    m.seq = seq;
    m.code = (int32_t)code;
    m.detail = detail;
    m.text = text;
    m.text_len = (uint32_t)strlen(text);
    omc__net_reply(N, rid, rid_len, &m);
}

/* Every byte of a push is in place: record the read (the last reader retires the entry) and
   unpin (the range goes if the entry was retired meanwhile). Called by the plane, from a
   worker or the listener, or by the connector after a plane that does not call it. */
OMC__PRIVATE void omc__net_commit_job(omc__net_job* j) {
    omc__net* N = j->owner;
    if (j->committed) return;
    j->committed = 1;
    pthread_mutex_lock(&N->own.mu);
    omc__owner_commit(&N->own, j->slot, 0);
    pthread_mutex_unlock(&N->own.mu);
}

static void omc__net_commit(const omc__dp_push* p) { omc__net_commit_job((omc__net_job*)p->commit_ctx); }

/* The plane's view of a job. */
OMC__PRIVATE void omc__net_job_push(omc__net* N, omc__net_job* j, omc__dp_push* p) {
    memset(p, 0, sizeof(*p));
    p->transfer_id = j->xfer;
    p->src = j->src;                /* pinned: immutable until commit */
    p->size = j->size;
    p->pool = N->pool;
    p->range = j->range;
    p->desc = j->desc;
    p->desc_len = j->desc_len;
    p->receiver_incarnation = j->receiver_incarnation;
    p->deadline = j->deadline;
    p->abort = &j->abort;
    p->commit = omc__net_commit;
    p->commit_ctx = j;
    p->state = j->plane_state;
    p->channel = j->rid;
    p->channel_len = j->rid_len;
    p->peer_key = j->peer_key;
    p->requested = j->direct;
}

/* A job has ended (listener thread): settle the entry, answer DONE or ERROR, free the job. */
OMC__PRIVATE void omc__net_finish(omc__net* N, omc__net_job* j, int reply) {
    omc__net_job** pp;
    for (pp = &N->live; *pp; pp = &(*pp)->next_live) if (*pp == j) { *pp = j->next_live; break; }
    if (j->result == OMC_OK || j->committed) {
        omc__net_commit_job(j);     /* no-op if the plane committed */
        j->result = OMC_OK;
    } else {
        pthread_mutex_lock(&N->own.mu);
        omc__owner_give_back(&N->own, j->slot);    /* a failed pull does not use up a reader */
        pthread_mutex_unlock(&N->own.mu);
    }
    omc__sub(&N->pushes_in_flight, 1u);
    if (j->result == OMC_OK) {
        if (!j->counted) omc__add(&N->pushes, 1u);
        /* a TCP push ended with its trailer, which told the receiver all DONE would: a DONE
           would only wake two more threads (both libzmq I/O threads) per get */
        if (reply && !j->direct && !(j->dp->vt->flags & OMC__DP_FLAG_SELF_COMPLETE)) {
            omc__wire m;
            memset(&m, 0, sizeof(m));
            m.type = OMC__MSG_DONE;
            m.xfer = j->xfer;
            m.seq = j->seq;
            m.bytes = j->size;
            omc__net_reply(N, j->rid, j->rid_len, &m);
        }
    } else {
        omc__add(&N->pushes_failed, 1u);
        OMC__LOG(&N->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "push of transfer %llu (%llu bytes, %s plane) failed: %s",
                 (unsigned long long)j->xfer, (unsigned long long)j->size, j->dp->vt->name, omc_result_str(j->result));
        /* a request on the data connection learns it there: the connection is closed */
        if (reply && !j->direct)
            omc__net_reply_error(N, j->rid, j->rid_len, j->xfer, j->seq, j->result, 0, "push failed: %s", omc_result_str(j->result));
    }
    omc__free(&N->conn->hooks, j);
}

/* Answer the jobs the workers finished. */
OMC__PRIVATE void omc__net_complete(omc__net* N, int reply) {
    omc__net_job* list;
    pthread_mutex_lock(&N->job_mu);
    list = N->done;
    N->done = NULL;
    pthread_mutex_unlock(&N->job_mu);
    while (list) {
        omc__net_job* j = list;
        list = j->next;
        omc__net_finish(N, j, reply);
    }
}

OMC__PRIVATE void omc__net_drain_router_monitor(omc__net* N);

OMC__PRIVATE void omc__net_on_hello(omc__net* N, const uint8_t* rid, uint32_t rid_len, const omc__wire* in) {
    uint8_t recs[2048], val[1024];
    uint32_t rlen = 0, count = 0, i;
    omc__wire m;
    /* A ticket is bound to the descriptor of the session's connection, and libzmq reuses the
       descriptor of a connection that went for the next one it accepts. It says "went" on the
       monitor before it closes the descriptor, so by the time a HELLO arrives on a reused one that
       word is already queued: hear it now, or it would come after the binding below and end the
       new session's ticket instead of the old one's. */
    if (N->router_mon) omc__net_drain_router_monitor(N);
    for (i = 0; i < N->nplanes; i++) {
        const omc__dataplane* p = &N->planes[i];
        uint32_t theirs_len = 0, vlen = 0;
        const uint8_t* theirs = omc__wire_find_record(in, p->vt->kind, &theirs_len);
        if (p->vt->tx_hello && p->vt->tx_hello(p->user, theirs, theirs_len, val, sizeof(val), &vlen) == OMC_OK)
            omc__wire_add_record(recs, sizeof(recs), &rlen, &count, p->vt->kind, val, vlen);
    }
    for (i = 0; i < N->nplanes; i++) {     /* the session's ticket: its data connections must show it */
        const omc__dataplane* p = &N->planes[i];
        uint32_t vlen = 0;
        const omc__dp_ext* x = omc__dp_ext_of(p->vt);
        omc_result r = x && x->tx_ticket ? x->tx_ticket(p->user, rid, rid_len, N->msg_addr, N->msg_fd, N->msg_key, val, sizeof(val), &vlen) : OMC_OK;
        if (r == OMC_OK && vlen) omc__wire_add_record(recs, sizeof(recs), &rlen, &count, OMC__REC_TICKET, val, vlen);
        else if (r != OMC_OK)
            OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "HELLO answered without a data ticket (%s): that receiver cannot pull", omc_result_str(r));
    }
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_HELLO;
    m.xfer = in->xfer;
    m.seq = in->seq;
    m.caps = N->caps;
    m.nrecords = count;
    m.records = recs;
    m.records_len = rlen;
    omc__net_reply(N, rid, rid_len, &m);
}

/* Fill a QUERY_REPLY from a live entry (holds mu); 0 if the key has nothing to pull now. */
OMC__PRIVATE int omc__net_lookup_locked(omc__net* N, const char* qkey, uint32_t qlen, omc__wire* m) {
    uint32_t slot = omc__etab_find(&N->own.tab, qkey, qlen, omc__hash64(qkey, qlen));
    const omc__ent* e = slot != OMC__NIL ? &N->own.tab.ent[slot] : NULL;
    if (!e || e->readers_left == 0) return 0;
    m->type = OMC__MSG_QUERY_REPLY;
    m->entry_id = omc__etab_id(&N->own.tab, slot);
    m->size = e->size;
    m->pflags = e->flags & OMC_BUFFER_FRAME;
    m->readers_left = e->readers_left;
    return 1;
}

OMC__PRIVATE void omc__net_on_query(omc__net* N, const uint8_t* rid, uint32_t rid_len, const omc__wire* in) {
    omc__net_held* h = NULL;
    omc__wire m;
    int found;
    memset(&m, 0, sizeof(m));
    m.xfer = in->xfer;
    m.seq = in->seq;
    if (in->wait_ms) h = (omc__net_held*)omc__calloc(&N->conn->hooks, sizeof(omc__net_held));
    pthread_mutex_lock(&N->own.mu);
    omc__owner_maybe_sweep(&N->own);
    found = omc__net_lookup_locked(N, in->key, in->key_len, &m);
    if (!found && h && N->held_count < OMC__NET_MAX_HELD) {
        /* counted under mu: a put that misses this query's lookup sees the count and wakes us */
        omc__add(&N->held_count, 1u);
    } else if (h) {
        omc__free(&N->conn->hooks, h);
        h = NULL;
    }
    pthread_mutex_unlock(&N->own.mu);
    if (found) { omc__net_reply(N, rid, rid_len, &m); return; }
    if (!h) { m.type = OMC__MSG_NOT_FOUND; omc__net_reply(N, rid, rid_len, &m); return; }
    h->xfer = in->xfer;
    h->seq = in->seq;
    h->expires = omc_now_ns() + (omc_time_ns)omc__min(in->wait_ms, (uint32_t)OMNICONN_TCP_MAX_WAIT_MS) * 1000000LL;
    h->rid_len = rid_len;
    memcpy(h->rid, rid, rid_len);
    h->qlen = in->key_len;
    memcpy(h->qkey, in->key, in->key_len);
    h->next = N->held;
    N->held = h;
}

/* Answer held queries whose key appeared or whose wait is over. */
OMC__PRIVATE void omc__net_answer_held(omc__net* N, omc_time_ns now) {
    omc__net_held** pp = &N->held;
    while (*pp) {
        omc__net_held* h = *pp;
        omc__wire m;
        int found;
        memset(&m, 0, sizeof(m));
        m.xfer = h->xfer;
        m.seq = h->seq;
        pthread_mutex_lock(&N->own.mu);
        found = omc__net_lookup_locked(N, h->qkey, h->qlen, &m);
        pthread_mutex_unlock(&N->own.mu);
        if (!found && now < h->expires) { pp = &h->next; continue; }
        if (!found) m.type = OMC__MSG_NOT_FOUND;
        omc__net_reply(N, h->rid, h->rid_len, &m);
        *pp = h->next;
        omc__free(&N->conn->hooks, h);
        omc__sub(&N->held_count, 1u);
    }
}

/* LIST: one page of the keys a PULL could take now, from the position of the cursor. */
typedef struct omc__net_page { uint8_t keys[OMC__WIRE_LIST_MAX]; uint32_t len, n, skip, seen, full; } omc__net_page;

static omc_result omc__net_page_add(const char* qkey, uint32_t qlen, void* user) {
    omc__net_page* pg = (omc__net_page*)user;
    if (pg->seen++ < pg->skip) return OMC_OK;
    if (qlen > OMC__WIRE_MAX_KEY) return OMC_OK;            /* cannot happen: keys are shorter */
    if (pg->n == 0xFFFFu || sizeof(pg->keys) - pg->len < 2 + qlen) { pg->full = 1; return OMC_ERR_TOO_LARGE; }
    omc__put_u16(pg->keys + pg->len, (uint16_t)qlen);
    memcpy(pg->keys + pg->len + 2, qkey, qlen);
    pg->len += 2 + qlen;
    pg->n++;
    return OMC_OK;
}

OMC__PRIVATE void omc__net_on_list(omc__net* N, const uint8_t* rid, uint32_t rid_len, const omc__wire* in) {
    omc__net_page* pg = (omc__net_page*)omc__calloc(&N->conn->hooks, sizeof(omc__net_page));
    omc__wire m;
    memset(&m, 0, sizeof(m));
    if (!pg) { omc__net_reply_error(N, rid, rid_len, in->xfer, in->seq, OMC_ERR_NO_MEMORY, 0, "sender out of memory"); return; }
    omc__owner_list_page(&N->own, in->cursor, OMC__NET_LIST_VISIT, omc__net_page_add, pg, &m.cursor);
    m.type = OMC__MSG_LIST_REPLY;
    m.xfer = in->xfer;
    m.seq = in->seq;
    m.nkeys = pg->n;
    m.keys = pg->keys;
    m.keys_len = pg->len;
    omc__net_reply(N, rid, rid_len, &m);
    omc__free(&N->conn->hooks, pg);
}

OMC__PRIVATE void omc__net_start_job(omc__net* N, omc__net_job* job);

/* A job pushes the read it took (omc__owner_take): the entry's bytes, pinned until commit. */
OMC__PRIVATE void omc__net_job_read(omc__net* N, omc__net_job* job, const omc__read* rd) {
    job->slot = rd->slot;
    job->size = rd->size;
    job->src = N->pool->base + rd->range.offset;
    job->range = rd->range;
}

/* A filled-in push job goes live: its deadline is the receiver's budget (or vLLM-Omni's rule),
   never more than OMNICONN_TCP_MAX_PUSH_MS; it joins the live list and starts. The side-channel
   PULL and the request on a data connection both end here. */
OMC__PRIVATE void omc__net_launch_job(omc__net* N, omc__net_job* job, uint32_t budget_ms) {
    job->deadline = omc_now_ns() + omc__min(budget_ms ? (omc_time_ns)budget_ms * 1000000LL : omc__net_default_budget_ns(job->size),
                                            (omc_time_ns)OMNICONN_TCP_MAX_PUSH_MS * 1000000LL);
    job->owner = N;
    job->next_live = N->live;
    N->live = job;
    omc__add(&N->pushes_in_flight, 1u);
    omc__net_start_job(N, job);
}

OMC__PRIVATE void omc__net_on_pull(omc__net* N, const uint8_t* rid, uint32_t rid_len, const omc__wire* in) {
    const omc__dataplane* dp = NULL;
    omc__read_want w;
    omc__read rd;
    omc__net_job* job;
    omc_result r;
    uint64_t detail = 0;
    uint32_t i;
    if (in->expect_incarnation && in->expect_incarnation != omc_incarnation()) {
        omc__net_reply_error(N, rid, rid_len, in->xfer, in->seq, OMC_ERR_PEER_RESTARTED, 0,
                             "metadata from incarnation %016llx; this sender is %016llx (restarted)",
                             (unsigned long long)in->expect_incarnation, (unsigned long long)omc_incarnation());
        return;
    }
    for (i = 0; i < N->nplanes; i++) if (N->planes[i].vt->kind == in->dp_kind) dp = &N->planes[i];
    if (!dp || !dp->vt->tx_push) {
        omc__net_reply_error(N, rid, rid_len, in->xfer, in->seq, OMC_ERR_UNAVAILABLE, 0, "no data plane of kind %u here", in->dp_kind);
        return;
    }
    job = (omc__net_job*)omc__calloc(&N->conn->hooks, sizeof(omc__net_job));
    if (!job) {
        omc__net_reply_error(N, rid, rid_len, in->xfer, in->seq, OMC_ERR_NO_MEMORY, 0, "sender out of memory");
        return;
    }
    memset(&w, 0, sizeof(w));
    w.qkey = in->key;
    w.qlen = in->key_len;
    w.id = in->entry_id;
    w.capacity = in->capacity;
    pthread_mutex_lock(&N->own.mu);
    omc__owner_maybe_sweep(&N->own);
    r = omc__owner_take(&N->own, &w, &rd, &detail);     /* the read is ours and pinned until the push ends */
    pthread_mutex_unlock(&N->own.mu);
    if (r == OMC_OK) omc__net_job_read(N, job, &rd);
    if (r != OMC_OK) {
        char key[OMC__WIRE_MAX_KEY + 1];
        uint32_t k;
        for (k = 0; k < in->key_len && k < OMC__WIRE_MAX_KEY; k++) key[k] = in->key[k] == 0x1f ? '/' : in->key[k];
        key[k] = '\0';
        omc__free(&N->conn->hooks, job);
        if (r == OMC_ERR_TOO_LARGE)
            omc__net_reply_error(N, rid, rid_len, in->xfer, in->seq, r, detail,
                                 "sender: %s is %llu bytes, the receiver's destination holds %llu: give the receiver a larger pool", key,
                                 (unsigned long long)detail, (unsigned long long)in->capacity);
        else if (r == OMC_ERR_STALE)
            omc__net_reply_error(N, rid, rid_len, in->xfer, in->seq, r, 0, "sender: the metadata names an older put of %s: use the newest metadata", key);
        else
            omc__net_reply_error(N, rid, rid_len, in->xfer, in->seq, r, 0, "sender: %s has no read left (consumed, cleaned up, expired or never put)", key);
        return;
    }
    job->dp = dp;
    job->xfer = in->xfer;
    job->seq = in->seq;
    job->receiver_incarnation = in->incarnation;
    job->rid_len = rid_len;
    memcpy(job->rid, rid, rid_len);
    memcpy(job->addr, N->msg_addr, sizeof(job->addr));
    memcpy(job->peer_key, N->msg_key, sizeof(job->peer_key));
    job->desc_len = in->desc_len;
    if (in->desc_len) memcpy(job->desc, in->desc, in->desc_len);
    omc__net_launch_job(N, job, in->budget_ms);
}

/* A reserved and pinned job (listener): start it here if the plane can, else queue it for a
   worker. A TCP payload the listener wrote whole waits for its receipt here too, so a small
   transfer never wakes a worker. */
OMC__PRIVATE void omc__net_start_job(omc__net* N, omc__net_job* job) {
    const omc__dataplane* dp = job->dp;
    if ((dp->vt->flags & OMC__DP_FLAG_TRY_NOW) && dp->vt->tx_try) {
        /* start it here, without blocking: a small payload is done before a worker could wake */
        omc__dp_push p;
        omc__net_job_push(N, job, &p);
        job->result = dp->vt->tx_try(dp->user, &p);
        if (job->result != OMC_ERR_BUSY) { omc__net_finish(N, job, 1); return; }
        job->result = OMC_OK;
        const omc__dp_ext* x = omc__dp_ext_of(dp->vt);
        if (x && x->tx_await && x->tx_receipt && x->tx_end && x->tx_await(dp->user, &p)) {
            job->awaiting = 1;
            job->since = omc_now_ns();
            return;
        }
    }
    pthread_mutex_lock(&N->job_mu);
    *N->queue_tail = job;
    N->queue_tail = &job->next;
    pthread_cond_signal(&N->job_cv);
    pthread_mutex_unlock(&N->job_mu);
}

/* Take a job out of the workers' queue if no worker has taken it yet (listener). */
OMC__PRIVATE int omc__net_unqueue(omc__net* N, omc__net_job* j) {
    omc__net_job** pp;
    int found = 0;
    pthread_mutex_lock(&N->job_mu);
    for (pp = &N->queue; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            if (!*pp) N->queue_tail = pp;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&N->job_mu);
    return found;
}

/* ABORT: a push in progress stops at its next wait; a push still queued is dropped now - its
   pin released and, if the listener had started it, its data connection closed (the plane's
   tx_push with abort set does that without blocking). */
OMC__PRIVATE void omc__net_on_abort(omc__net* N, const uint8_t* rid, uint32_t rid_len, const omc__wire* in) {
    omc__net_job* j;
    omc__net_held** pp = &N->held;
    for (j = N->live; j; ) {
        if (j->xfer == in->xfer && j->rid_len == rid_len && memcmp(j->rid, rid, rid_len) == 0 && !omc__load(&j->abort)) {
            omc__store(&j->abort, (int)OMC_ERR_TIMEOUT);
            if (omc__net_unqueue(N, j)) {
                const omc__dp_ext* x = omc__dp_ext_of(j->dp->vt);
                if (x && x->tx_drop) {
                    omc__dp_push p;
                    omc__net_job_push(N, j, &p);
                    x->tx_drop(j->dp->user, &p);
                }
                j->result = OMC_ERR_TIMEOUT;
                omc__net_finish(N, j, 0);   /* unlinks and frees j: walk again from the start */
                j = N->live;
                continue;
            }
        }
        j = j->next_live;
    }
    while (*pp) {
        omc__net_held* h = *pp;
        if (h->xfer == in->xfer && h->rid_len == rid_len && memcmp(h->rid, rid, rid_len) == 0) {
            *pp = h->next;
            omc__free(&N->conn->hooks, h);
            omc__sub(&N->held_count, 1u);
        } else pp = &h->next;
    }
}

/* A request on a plane's data connection (listener): what a PULL on the side channel does, for
   the session the connection was registered to (its ticket), naming the entry by id. CLAIM records
   a read whose bytes the receiver already has (inline metadata). A refusal, or a recorded claim,
   is answered with a status record on the connection; a PULL becomes a job like any other. */
OMC__PRIVATE void omc__net_on_request(omc__net* N, const omc__dataplane* dp, const omc__dp_request* q) {
    omc__net_job* job = NULL;
    omc__read_want w;
    omc__read rd;
    const omc__dp_ext* x = omc__dp_ext_of(dp->vt);     /* it gave us q: it has one */
    omc_result r = q->status;
    uint64_t detail = 0;
    const omc__ent* e;
    uint32_t slot;
    if (r == OMC_OK && q->expect_incarnation && q->expect_incarnation != omc_incarnation()) r = OMC_ERR_PEER_RESTARTED;
    else if (r == OMC_OK && !q->channel) r = OMC_ERR_CONNECTION;    /* no session, or its session ended */
    else if (r == OMC_OK && q->op == OMC__DP_REQ_PULL && !(job = (omc__net_job*)omc__calloc(&N->conn->hooks, sizeof(omc__net_job))))
        r = OMC_ERR_NO_MEMORY;
    if (r == OMC_OK) {
        memset(&w, 0, sizeof(w));
        w.id = q->entry_id;             /* a request names no key */
        w.capacity = q->capacity;
        w.exact = q->op == OMC__DP_REQ_CLAIM;   /* the metadata and the entry must agree */
        pthread_mutex_lock(&N->own.mu);
        omc__owner_maybe_sweep(&N->own);
        slot = omc__etab_by_id(&N->own.tab, q->entry_id);
        e = slot != OMC__NIL ? &N->own.tab.ent[slot] : NULL;
        if (e && e->state == OMC__ENT_LIVE && e->readers_left && !(x->tx_proves && x->tx_proves(dp->user, q, e->qkey, e->qlen)))
            r = OMC_ERR_NOT_FOUND;      /* another key's entry, or a proof made without the session's secret */
        else if (e && e->state == OMC__ENT_LIVE && e->readers_left && q->op == OMC__DP_REQ_CLAIM && !omc__net_inlines(N, e->size))
            r = OMC_ERR_PROTOCOL;       /* a CLAIM of bytes the sender never sent along */
        else r = omc__owner_take(&N->own, &w, &rd, &detail);
        /* a request names the entry by id: every way of naming it wrongly (another key's proof,
           a CLAIM of another size or of bytes never inlined, an older put) gets the answer an
           entry that does not exist gets, so probing ids learns nothing about which exist */
        if (r == OMC_ERR_PROTOCOL || r == OMC_ERR_STALE || (r == OMC_ERR_TOO_LARGE && q->op == OMC__DP_REQ_CLAIM)) {
            r = OMC_ERR_NOT_FOUND;
            detail = 0;
        }
        /* CLAIM: the receiver has every byte already, so the read counts at once */
        if (r == OMC_OK && q->op == OMC__DP_REQ_CLAIM) omc__owner_commit(&N->own, rd.slot, 0);
        pthread_mutex_unlock(&N->own.mu);
        if (r == OMC_OK && job) omc__net_job_read(N, job, &rd);
    }
    if (r != OMC_OK || q->op == OMC__DP_REQ_CLAIM) {
        omc__free(&N->conn->hooks, job);
        if (r != OMC_OK)
            OMC__LOG(&N->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "request for entry %016llx on a %s data connection refused: %s",
                     (unsigned long long)q->entry_id, dp->vt->name, omc_result_str(r));
        x->tx_answer(dp->user, q->handle, r, q->xfer, detail);
        return;
    }
    job->dp = dp;
    job->xfer = q->xfer;
    job->receiver_incarnation = q->receiver_incarnation;
    job->rid_len = omc__min(q->channel_len, (uint32_t)OMC__NET_RID_MAX);
    memcpy(job->rid, q->channel, job->rid_len);
    memcpy(job->addr, q->addr, sizeof(job->addr));
    job->desc_len = q->desc_len;
    memcpy(job->desc, q->desc, q->desc_len);
    job->direct = 1;
    omc__net_launch_job(N, job, q->budget_ms);
}

/* Listener: jobs whose receipt it waits for itself. The receipt came (commit, then the
   trailer), the wait failed (EOF, bytes that are not a receipt), or it lasted too long
   (OMNICONN_TCP_STALL_MS, the budget, an ABORT). */
OMC__PRIVATE void omc__net_check_receipts(omc__net* N, omc_time_ns now) {
    omc__net_job *j, *next;
    for (j = N->live; j; j = next) {
        omc__dp_push p;
        omc_result r;
        int a = omc__load(&j->abort);
        next = j->next_live;
        if (!j->awaiting) continue;
        omc__net_job_push(N, j, &p);
        r = omc__dp_ext_of(j->dp->vt)->tx_receipt(j->dp->user, &p);     /* awaiting: it has these */
        if (r == OMC_ERR_BUSY) {
            if (a) r = (omc_result)a;
            else if (now - j->since > (omc_time_ns)OMNICONN_TCP_STALL_MS * 1000000LL || now >= j->deadline) r = OMC_ERR_TIMEOUT;
            else continue;
        }
        j->awaiting = 0;
        if (r == OMC_OK) {
            omc__net_commit_job(j);                 /* every byte is in the receiver's buffer */
            omc__add(&N->pushes, 1u);               /* counted before the trailer lets the get return */
            j->counted = 1;
        }
        omc__dp_ext_of(j->dp->vt)->tx_end(j->dp->user, &p, r == OMC_OK);
        j->result = r;
        omc__net_finish(N, j, 1);
    }
}

/* One message from a receiver (frames: routing id, then exactly one). */
OMC__PRIVATE void omc__net_on_message(omc__net* N, const uint8_t* rid, uint32_t rid_len, const uint8_t* f, size_t len, omc_result framing) {
    omc__wire m;
    omc_result r = framing != OMC_OK ? framing : omc__wire_decode(f, len, &m);
    if (r != OMC_OK) {
        /* name the transfer if the header is readable, so the sender of the garbage can match it */
        uint64_t xfer = len >= OMC__WIRE_HEADER && omc__get_u32(f) == OMC__WIRE_MAGIC ? omc__get_u64(f + 8) : 0;
        uint32_t seq = len >= OMC__WIRE_HEADER && omc__get_u32(f) == OMC__WIRE_MAGIC ? omc__get_u32(f + 24) : 0;
        omc__add(&N->protocol_errors, 1u);
        OMC__LOG(&N->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "listener: %zu-byte message rejected (%s)", len, omc_result_str(r));
        omc__net_reply_error(N, rid, rid_len, xfer, seq, r, 0, "%s", framing == OMC_ERR_PROTOCOL ? "one frame per message" : omc_result_str(r));
        return;
    }
    switch (m.type) {
        case OMC__MSG_HELLO: omc__net_on_hello(N, rid, rid_len, &m); break;
        case OMC__MSG_QUERY: omc__net_on_query(N, rid, rid_len, &m); break;
        case OMC__MSG_PULL: omc__net_on_pull(N, rid, rid_len, &m); break;
        case OMC__MSG_ABORT: omc__net_on_abort(N, rid, rid_len, &m); break;
        case OMC__MSG_LIST: omc__net_on_list(N, rid, rid_len, &m); break;
        default:
            omc__add(&N->protocol_errors, 1u);
            omc__net_reply_error(N, rid, rid_len, m.xfer, m.seq, OMC_ERR_PROTOCOL, 0, "a sender does not accept %s",
                                 omc__wire_type_name(m.type));
            break;
    }
}

/* Receive one frame into buf (at most cap bytes kept); *len is its real length, *more whether
   another frame follows. (zmq_recv copies inside libzmq, where its hand-off between threads is
   synchronised; ZMQ_RCVMORE is a plain flag read, no system call.) */
OMC__PRIVATE int omc__zmq_frame(void* sock, uint8_t* buf, size_t cap, int flags, size_t* len, int* more) {
    size_t ms = sizeof(*more);
    int n = omc__zmq_recv(sock, buf, buf ? cap : 0, flags);
    if (n < 0) return -1;
    *len = (size_t)n;
    *more = 0;
    if (omc__zmq_getsockopt(sock, ZMQ_RCVMORE, more, &ms) != 0) *more = 0;
    return 0;
}

/* Copy a received frame's bytes out of libzmq's buffer. libzmq's I/O thread wrote them and
   handed them over through lock-free queues that ThreadSanitizer cannot see (libzmq is not
   instrumented; zmq_recv copies inside libzmq for the same reason), so under TSan this one copy
   is made byte by byte and left unchecked; everything else stays checked. */
#if defined(__SANITIZE_THREAD__)
    #define OMC__TSAN 1
#elif defined(__has_feature)
    #if __has_feature(thread_sanitizer)
        #define OMC__TSAN 1
    #endif
#endif
#if defined(OMC__TSAN)
__attribute__((no_sanitize_thread)) static void omc__zmq_copy_out(uint8_t* dst, const uint8_t* src, size_t n) {
    volatile uint8_t* d = dst;      /* volatile: the loop must not become a (checked) memcpy */
    size_t i;
    for (i = 0; i < n; i++) d[i] = src[i];
}
#else
static void omc__zmq_copy_out(uint8_t* dst, const uint8_t* src, size_t n) { memcpy(dst, src, n); }
#endif

/* omc__zmq_frame, also giving the address of the peer that sent the message
   (libzmq's "Peer-Address" property; "" if the transport has none), the descriptor of its
   connection (ZMQ_SRCFD; -1 if unknown) and its user id ("User-Id": the CURVE public key in hex
   our ZAP handler gave the connection; "" without CURVE). */
OMC__PRIVATE int omc__zmq_frame_from(void* sock, uint8_t* buf, size_t cap, int flags, size_t* len, int* more, char* addr, size_t addr_size,
                                     int* fd, char* user, size_t user_size) {
    omc__zmq_msg msg;
    const char* a;
    size_t ms = sizeof(*more);
    addr[0] = '\0';
    user[0] = '\0';
    if (omc__zmq_msg_init(&msg) != 0) return -1;
    if (omc__zmq_msg_recv(&msg, sock, flags) < 0) { omc__zmq_msg_close(&msg); return -1; }
    *len = omc__zmq_msg_size(&msg);
    if (*len) omc__zmq_copy_out(buf, (const uint8_t*)omc__zmq_msg_data(&msg), omc__min(*len, cap));
    if ((a = omc__zmq_msg_gets(&msg, "Peer-Address")) != NULL) omc__strcut(addr, addr_size, a);
    if ((a = omc__zmq_msg_gets(&msg, "User-Id")) != NULL) omc__strcut(user, user_size, a);    /* our ZAP handler's: the CURVE key */
    *fd = omc__zmq_msg_get(&msg, ZMQ_SRCFD);      /* the connection's socket: the monitor names it when it goes */
    omc__zmq_msg_close(&msg);
    *more = 0;
    if (omc__zmq_getsockopt(sock, ZMQ_RCVMORE, more, &ms) != 0) *more = 0;
    return 0;
}

/* Read what is waiting on the ROUTER, in a bounded batch so nothing else starves; 1 if it
   stopped at the bound (more may be waiting). The address of each message's sender is in
   N->msg_addr while it is handled. */
OMC__PRIVATE int omc__net_read_router(omc__net* N) {
    int batch;
    for (batch = 0; batch < 64; batch++) {
        uint8_t rid[OMC__NET_RID_MAX], buf[OMC__WIRE_MAX];
        size_t rn, n, junk;
        int more = 0, extra = 0;
        if (omc__zmq_frame(N->router, rid, sizeof(rid), ZMQ_DONTWAIT, &rn, &more) != 0) return 0;
        if (!more) continue;                                            /* cannot happen on a ROUTER */
        /* the address and descriptor from the body: the routing-id frame a ROUTER made while
           polling carries neither */
        if (omc__zmq_frame_from(N->router, buf, sizeof(buf), 0, &n, &more, N->msg_addr, sizeof(N->msg_addr), &N->msg_fd,
                                N->msg_key, sizeof(N->msg_key)) != 0) return 0;
        while (more) {      /* anything after the one frame we expect is garbage: drain it */
            extra = 1;
            if (omc__zmq_frame(N->router, NULL, 0, 0, &junk, &more) != 0) break;
        }
        omc__net_on_message(N, rid, (uint32_t)omc__min(rn, sizeof(rid)), buf, omc__min(n, sizeof(buf)),
                            extra ? OMC_ERR_PROTOCOL : n > sizeof(buf) ? OMC_ERR_MALFORMED : OMC_OK);
    }
    return 1;
}

/* Listener: may we log a failure about `who` now? 1 = yes (*hidden = how many were not logged
   since the last line); else it is counted for the next line. The table is small: the entry
   said longest ago makes room. */
OMC__PRIVATE int omc__net_say(omc__net* N, const char* who, unsigned long long* hidden) {
    omc_time_ns now = omc_now_ns();
    omc__net_said* e = NULL;
    int i;
    for (i = 0; i < 16 && !e; i++) if (strcmp(N->said[i].who, who) == 0) e = &N->said[i];
    if (!e) {
        for (e = &N->said[0], i = 1; i < 16; i++) if (N->said[i].at < e->at) e = &N->said[i];
        snprintf(e->who, sizeof(e->who), "%s", who);
        e->at = 0;
        e->hidden = 0;
    }
    if (e->at && now - e->at < (omc_time_ns)OMC__NET_SAY_MS * 1000000LL) { e->hidden++; return 0; }
    *hidden = e->hidden;
    e->hidden = 0;
    e->at = now;
    return 1;
}

/* A failed handshake in words, as the listener (server) or a receiver (client) sees it. */
OMC__PRIVATE const char* omc__net_hs_words(uint16_t event, uint32_t value, int curve, int server) {
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        return value == 400 ? (server ? "client key not on the allow-list (curve.allowed_clients)"
                                      : "this receiver's key is not on the sender's allow-list: add its public key to the sender's curve.allowed_clients")
                            : "refused by the authentication handler";
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        return server ? "the client's CURVE messages do not decrypt: its server key does not match this sender's public key"
                      : "server key does not match: curve.server_key is not that sender's public key";
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        return curve ? (server ? "the client does not use CURVE, this sender requires it (give the receiver curve.server_key)"
                               : "the sender does not use CURVE, this receiver does (drop curve.server_key, or turn CURVE on at the sender)")
                     : (server ? "the client uses CURVE, this sender does not" : "the sender requires CURVE: give this receiver its public key "
                                                                                  "(curve.server_key or omc_tcp_add_sender_key)");
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        return curve ? (server ? "the client hung up during the CURVE handshake: most likely it has no CURVE keys (a receiver needs "
                                 "curve.server_key = this sender's public key)"
                               : "the sender hung up during the CURVE handshake: most likely curve.server_key is not its public key")
                     : (server ? "the client hung up during the handshake"
                               : "the sender hung up during the handshake: if it requires CURVE, give this receiver its public key "
                                 "(curve.server_key or omc_tcp_add_sender_key)");
    return "the handshake failed";
}

/* The monitor of the ROUTER: failed handshakes, and ends of sessions. Drained on every wake-up
   and before every HELLO is answered (omc__net_on_hello), which matters: libzmq sends monitor
   events with a blocking send, so a monitor nobody reads would stall the I/O thread. Only
   failures and disconnects are subscribed: the queue stays short under a flood of bad clients. */
OMC__PRIVATE void omc__net_drain_router_monitor(omc__net* N) {
    for (;;) {
        uint8_t ev[6];
        char addr[128];
        int n = omc__zmq_recv(N->router_mon, ev, sizeof(ev), ZMQ_DONTWAIT), an;
        uint16_t event;
        uint32_t value;
        int auth;
        if (n < 0) return;
        an = omc__zmq_recv(N->router_mon, addr, sizeof(addr) - 1, 0);
        addr[an < 0 ? 0 : omc__min(an, (int)sizeof(addr) - 1)] = '\0';
        if (n != 6) continue;
        event = omc__get_u16(ev);
        value = omc__get_u32(ev + 2);
        if (event == ZMQ_EVENT_DISCONNECTED) {     /* a session's end: what its planes issued ends with it */
            uint32_t i;
            for (i = 0; i < N->nplanes; i++) {
                const omc__dp_ext* x = omc__dp_ext_of(N->planes[i].vt);
                if (x && x->tx_session_gone) x->tx_session_gone(N->planes[i].user, (int)value);
            }
            continue;
        }
        /* with CURVE required, a client that drops out of the handshake (NO_DETAIL) is most
           likely one that does not speak CURVE: it saw our mechanism and hung up first */
        auth = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && N->curve_server) ||
               (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC || value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ||
                 (value & 0xF0000000u) == ZMQ_PROTOCOL_ERROR_ZAP_UNSPECIFIED));
        omc__add(&N->handshake_failures, 1u);
        if (auth) omc__add(&N->auth_failures, 1u);
        /* a ZAP refusal was logged by the ZAP handler, which knows the client's address and key;
           libzmq names only our own endpoint here */
        if (event != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            char who[96];
            unsigned long long hidden = 0;
            snprintf(who, sizeof(who), "%.64s|%x|%x", addr, (unsigned)event, (unsigned)value);
            if (omc__net_say(N, who, &hidden))
                OMC__LOG(&N->conn->hooks, auth ? OMC_LOG_WARN : OMC_LOG_INFO, OMC_LOGITEM_NET,
                         "listener %s: %s handshake of a client failed: %s (%llu more like it since the last report)", addr,
                         auth ? "CURVE" : "ZMTP", omc__net_hs_words(event, value, N->curve_server, 1), hidden);
        }
    }
}

/* ZAP (RFC 27): libzmq asks us, per CURVE handshake, whether this client key may come in. */
OMC__PRIVATE void omc__net_serve_zap(omc__net* N) {
    for (;;) {
        char part[8][64], user[64];
        int len[8], n = 0, more = 1, ok = 0;
        uint32_t i;
        size_t ms;
        if (omc__zmq_recv(N->zap, part[0], sizeof(part[0]), ZMQ_DONTWAIT) < 0) return;
        len[0] = 3;
        for (n = 1; more; ) {
            int k;
            ms = sizeof(more);
            if (omc__zmq_getsockopt(N->zap, ZMQ_RCVMORE, &more, &ms) != 0 || !more) break;
            k = omc__zmq_recv(N->zap, n < 8 ? part[n] : part[7], sizeof(part[0]), 0);
            if (k < 0) break;
            if (n < 8) len[n++] = k;
        }
        /* version, request id, domain, address, routing id, mechanism, credentials. Without an
           allow-list every CURVE client comes in; either way the connection's user id becomes its
           public key in hex, so each message names the key it came with (tickets are bound to it) */
        if (n >= 7 && len[5] == 5 && memcmp(part[5], "CURVE", 5) == 0 && len[6] == 32) {
            ok = N->nallowed == 0;
            for (i = 0; i < N->nallowed && !ok; i++) ok = memcmp(N->allowed[i], part[6], 32) == 0;
            for (i = 0; i < 32; i++) {
                user[2 * i] = "0123456789abcdef"[(uint8_t)part[6][i] >> 4];
                user[2 * i + 1] = "0123456789abcdef"[(uint8_t)part[6][i] & 15];
            }
        }
        if (!ok) {
            char who[96], key[41];
            unsigned long long hidden = 0;
            part[3][omc__min(len[3], 63)] = '\0';
            key[0] = '\0';
            if (n >= 7 && len[6] == 32) omc__zmq_z85_encode(key, (const uint8_t*)part[6], 32);
            snprintf(who, sizeof(who), "zap|%.63s", part[3]);
            if (omc__net_say(N, who, &hidden))
                OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "listener: CURVE client at %s refused: client key %s%s "
                         "(%llu more refusals of that address since the last report)", part[3], key[0] ? key : "(none)",
                         key[0] ? " is not on the allow-list (curve.allowed_clients)" : ": no CURVE key", hidden);
        }
        omc__zmq_send(N->zap, "1.0", 3, ZMQ_SNDMORE);
        omc__zmq_send(N->zap, part[1], (size_t)(n > 1 ? omc__min(len[1], 64) : 0), ZMQ_SNDMORE);
        omc__zmq_send(N->zap, ok ? "200" : "400", 3, ZMQ_SNDMORE);
        omc__zmq_send(N->zap, ok ? "OK" : "client key not allowed", ok ? 2 : 22, ZMQ_SNDMORE);
        omc__zmq_send(N->zap, ok ? user : "", ok ? 64 : 0, ZMQ_SNDMORE);
        omc__zmq_send(N->zap, "", 0, 0);
    }
}

OMC__PRIVATE int omc__net_grow_items(omc__net* N, int need) {
    struct pollfd* it;
    void** who;
    int cap;
    if (need <= N->items_cap) return 1;
    cap = omc__max(need, N->items_cap * 2);
    it = (struct pollfd*)omc__calloc(&N->conn->hooks, sizeof(struct pollfd) * (size_t)cap);
    who = (void**)omc__calloc(&N->conn->hooks, sizeof(void*) * (size_t)cap);
    if (!it || !who) { omc__free(&N->conn->hooks, it); omc__free(&N->conn->hooks, who); return 0; }
    omc__free(&N->conn->hooks, N->items);
    omc__free(&N->conn->hooks, N->who);
    N->items = it;
    N->who = who;
    N->items_cap = cap;
    return 1;
}

/* Has a ZMQ socket something to read? (ZMQ_EVENTS also runs its pending commands.) */
OMC__PRIVATE int omc__zmq_readable(void* sock) {
    int ev = 0;
    size_t n = sizeof(ev);
    return sock && omc__zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &n) == 0 && (ev & ZMQ_POLLIN);
}

OMC__PRIVATE int omc__zmq_fd(void* sock) {
    int fd = -1;
    size_t n = sizeof(fd);
    if (!sock || omc__zmq_getsockopt(sock, ZMQ_FD, &fd, &n) != 0) return -1;
    return fd;
}

/* The listener sleeps in one poll() over the ZMQ sockets' notification descriptors (ZMQ_FD),
   the wake-up eventfd and the data port's sockets. ZMQ_FD only says "something changed" (edge
   triggered), so every ZMQ socket is asked for ZMQ_EVENTS before sleeping and after waking:
   one system call per wake-up where zmq_poll makes two - it shows in a query's round trip. */
static void* omc__net_listener_main(void* arg) {
    omc__net* N = (omc__net*)arg;
    void* zs[3];
    int zfd[3], nz = 0, i, backlog = 0, rc;
    zs[nz++] = N->router;
    if (N->router_mon) zs[nz++] = N->router_mon;
    if (N->zap) zs[nz++] = N->zap;
    for (i = 0; i < nz; i++) zfd[i] = omc__zmq_fd(zs[i]);
    while (!omc__load(&N->stop)) {
        int n = 0, fixed, nplane = 0, timeout = OMC__NET_SLICE_MS, first[OMC__DP_MAX], count[OMC__DP_MAX];
        uint32_t pl, need = 4;
        omc__net_held* h;
        omc_time_ns now = omc_now_ns();
        uint64_t counter;
        for (pl = 0; pl < N->nplanes; pl++) {
            const omc__dp_ext* x = omc__dp_ext_of(N->planes[pl].vt);
            if (x && x->tx_item_count) need += x->tx_item_count(N->planes[pl].user);
        }
        if (!omc__net_grow_items(N, (int)need)) {
            usleep(1000);
            continue;
        }
        N->items[n].fd = N->wake_fd; N->items[n].events = POLLIN; N->items[n++].revents = 0;
        for (i = 0; i < nz; i++) { N->items[n].fd = zfd[i]; N->items[n].events = POLLIN; N->items[n++].revents = 0; }
        fixed = n;
        for (pl = 0; pl < N->nplanes; pl++) {     /* the planes' own sockets (TCP: data port, connections) */
            const omc__dataplane* dp = &N->planes[pl];
            const omc__dp_ext* x = omc__dp_ext_of(dp->vt);
            first[pl] = fixed + nplane;
            count[pl] = x && x->tx_items ? x->tx_items(dp->user, N->items + first[pl], N->who + first[pl], N->items_cap - first[pl]) : 0;
            nplane += count[pl];
        }
        for (h = N->held; h; h = h->next) {     /* wake up when a held query expires */
            int ms = h->expires <= now ? 0 : (int)((h->expires - now + 999999) / 1000000);
            if (ms < timeout) timeout = ms;
        }
        /* the monitor and ZAP sockets are drained whenever they are served; the ROUTER may keep
           what a bounded batch left, so it alone is asked before sleeping */
        if (backlog || omc__zmq_readable(N->router)) timeout = 0;
        rc = poll(N->items, (nfds_t)(fixed + nplane), timeout);
        if (rc < 0 && errno != EINTR) usleep(1000);
        if (omc__load(&N->stop)) break;
        if (N->items[0].revents) { ssize_t k = read(N->wake_fd, &counter, sizeof(counter)); (void)k; }
        omc__net_complete(N, 1);
        /* a send on a ZMQ socket can swallow its edge: a quiet tick looks at them all anyway */
        for (i = 1; i < nz; i++)
            /* (the ROUTER's monitor always, before the ROUTER; a HELLO drains it again itself,
               since a session's end may be queued after this pass and before that HELLO) */
            if ((N->items[1 + i].revents || rc == 0 || zs[i] == N->router_mon) && omc__zmq_readable(zs[i])) {
                if (zs[i] == N->router_mon) omc__net_drain_router_monitor(N);
                else omc__net_serve_zap(N);
            }
        backlog = (N->items[1].revents || backlog || omc__zmq_readable(N->router)) ? omc__net_read_router(N) : 0;
        for (pl = 0; pl < N->nplanes; pl++) {
            const omc__dataplane* dp = &N->planes[pl];
            const omc__dp_ext* x = omc__dp_ext_of(dp->vt);
            omc__dp_request q;
            if (!x) continue;
            if (count[pl] && x->tx_serve) x->tx_serve(dp->user, N->items + first[pl], N->who + first[pl], count[pl]);
            while (x->tx_next_request && x->tx_answer && x->tx_next_request(dp->user, &q)) omc__net_on_request(N, dp, &q);
        }
        omc__net_check_receipts(N, omc_now_ns());
        for (pl = 0; pl < N->nplanes; pl++) {     /* a request read right after a trailer went */
            const omc__dp_ext* x = omc__dp_ext_of(N->planes[pl].vt);
            omc__dp_request q;
            while (x && x->tx_next_request && x->tx_answer && x->tx_next_request(N->planes[pl].user, &q)) omc__net_on_request(N, &N->planes[pl], &q);
        }
        omc__net_answer_held(N, omc_now_ns());
        pthread_mutex_lock(&N->own.mu);
        omc__owner_maybe_sweep(&N->own);
        pthread_mutex_unlock(&N->own.mu);
    }
    return NULL;
}

/* The first queued job whose side-channel session has no push running (holds job_mu), taken
   out of the queue. One push at a time per session: a receiver's channel has at most one
   transfer in flight anyway, so only a peer that misbehaves waits here - and it cannot hold
   more than one worker, whatever budget it asks for. */
OMC__PRIVATE omc__net_job* omc__net_pick(omc__net* N) {
    omc__net_job **pp, **best = NULL, *r;
    uint32_t best_n = 0;
    for (pp = &N->queue; *pp; pp = &(*pp)->next) {
        omc__net_job* j = *pp;
        uint32_t n = 0;
        for (r = N->running; r; r = r->next) {
            if (r->rid_len == j->rid_len && memcmp(r->rid, j->rid, j->rid_len) == 0) break;
            n += strcmp(r->addr, j->addr) == 0;
        }
        if (r) continue;
        /* fair across addresses: the oldest job of the address that runs the fewest pushes */
        if (!best || n < best_n) { best = pp; best_n = n; }
        if (n == 0) break;
    }
    if (!best) return NULL;
    r = *best;
    *best = r->next;
    if (!*best) N->queue_tail = best;
    return r;
}

static void* omc__net_worker_main(void* arg) {
    omc__net* N = (omc__net*)arg;
    for (;;) {
        omc__net_job *j, **pp;
        omc__dp_push p;
        int a;
        pthread_mutex_lock(&N->job_mu);
        while (!(j = omc__net_pick(N)) && !omc__load(&N->stop)) pthread_cond_wait(&N->job_cv, &N->job_mu);
        if (!j) { pthread_mutex_unlock(&N->job_mu); break; }
        j->next = N->running;
        N->running = j;
        pthread_mutex_unlock(&N->job_mu);
        omc__net_job_push(N, j, &p);
        a = omc__load(&j->abort);
        /* aborted meanwhile: the plane lets go of what it holds for the push (tx_drop) */
        if (a && omc__dp_ext_of(j->dp->vt) && omc__dp_ext_of(j->dp->vt)->tx_drop) omc__dp_ext_of(j->dp->vt)->tx_drop(j->dp->user, &p);
        j->result = a ? (omc_result)a : j->dp->vt->tx_push(j->dp->user, &p);
        pthread_mutex_lock(&N->job_mu);
        for (pp = &N->running; *pp; pp = &(*pp)->next)
            if (*pp == j) { *pp = j->next; break; }
        j->next = N->done;
        N->done = j;
        if (N->queue) pthread_cond_broadcast(&N->job_cv);   /* a job of that session may go now */
        pthread_mutex_unlock(&N->job_mu);
        omc__net_wake(N);
    }
    return NULL;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - receiver channels                            */
/* ============================================================================================== */

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
OMC__PRIVATE void omc__net_peer_result(omc__net* N, omc__net_peer* p, omc_result r, const char* fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&N->peer_mu);
    if (r == OMC_OK) p->last_ok = omc_now_ns();
    else {
        p->failures++;
        if (r == OMC_ERR_TIMEOUT) p->timeouts++;
        if (r == OMC_ERR_AUTH) p->auth_failures++;
        p->last_fail = omc_now_ns();
        p->last_error = r;
        va_start(ap, fmt);
        vsnprintf(p->last_error_text, sizeof(p->last_error_text), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&N->peer_mu);
}

/* The peer for host:port, created (as learned, not registered) if asked. Holds peer_mu. */
OMC__PRIVATE omc__net_peer* omc__net_peer_locked(omc__net* N, const char* host, uint16_t port, int create, omc_result* why) {
    char ep[OMC_TCP_HOST_MAX + 8];
    omc__net_peer* p;
    int n = snprintf(ep, sizeof(ep), "%s:%u", host, (unsigned)port);
    *why = OMC_OK;
    p = (omc__net_peer*)omc__smap_get(&N->peers_by_ep, ep, (uint32_t)n);
    if (p || !create) { if (!p) *why = OMC_ERR_NOT_FOUND; return p; }
    if (N->npeers >= OMC__NET_MAX_PEERS) { *why = OMC_ERR_BUSY; return NULL; }
    p = (omc__net_peer*)omc__calloc(&N->conn->hooks, sizeof(omc__net_peer));
    if (!p) { *why = OMC_ERR_NO_MEMORY; return NULL; }
    snprintf(p->host, sizeof(p->host), "%s", host);
    p->port = port;
    omc__strcut(p->name, sizeof(p->name), ep);
    if (omc__smap_put(&N->peers_by_ep, &N->conn->hooks, ep, (uint32_t)n, p) != OMC_OK) {
        omc__free(&N->conn->hooks, p);
        *why = OMC_ERR_NO_MEMORY;
        return NULL;
    }
    *N->peers_tail = p;
    N->peers_tail = &p->next;
    N->npeers++;
    return p;
}

/* Drain the channel's monitor: remember a failed CURVE handshake (the get's final code says
   AUTH). Without CURVE on our side a failed handshake is a connection error: a receiver with no
   key cannot tell a CURVE sender that hangs up on it from a dying sender or a port that is not a
   sender (libzmq reports all three alike); the log says which key would help. */
OMC__PRIVATE void omc__net_chan_events(omc__net_chan* ch) {
    while (ch->mon) {
        uint8_t ev[6];
        int n = omc__zmq_recv(ch->mon, ev, sizeof(ev), ZMQ_DONTWAIT);
        if (n < 0) return;
        omc__zmq_recv(ch->mon, NULL, 0, 0);      /* the address frame */
        if (n == 6 && (omc__get_u16(ev) & (OMC__NET_MON_CONNECTED | OMC__NET_MON_DOWN))) {
            ch->tcp_state = omc__get_u16(ev) & OMC__NET_MON_CONNECTED ? 1 : 2;
            continue;
        }
        if (n != 6 || !(omc__get_u16(ev) & OMC__NET_MON_EVENTS)) continue;
        if (ch->curve) ch->hs_failed = 1;
        else ch->hs_logged = 1;
        {   /* in words, once per sender per OMC__NET_SAY_MS (a get retries its channel often) */
            uint64_t last = omc__load(&ch->peer->hs_said_at), now = (uint64_t)omc_now_ns();
            if ((last == 0 || now - last >= (uint64_t)OMC__NET_SAY_MS * 1000000ull) &&
                __atomic_compare_exchange_n(&ch->peer->hs_said_at, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                OMC__LOG(ch->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "receiver: %s handshake with sender %s at %s:%u failed: %s",
                         ch->curve ? "CURVE" : "ZMTP", ch->peer->name, ch->peer->host, (unsigned)ch->peer->port,
                         omc__net_hs_words(omc__get_u16(ev), omc__get_u32(ev + 2), ch->curve, 0));
        }
    }
}

/* The handshake worked (HELLO answered): stop monitoring. libzmq sends monitor events with a
   blocking send, so a monitor left on an idle cached channel that nobody drains could stall
   the context's I/O thread one day; drained first, stopped before we could stop reading. */
OMC__PRIVATE void omc__net_chan_stop_monitor(omc__net_chan* ch) {
    if (!ch->mon) return;
    omc__net_chan_events(ch);
    omc__zmq_socket_monitor(ch->sock, NULL, 0);
    omc__zmq_close(ch->mon);
    ch->mon = NULL;
}

OMC__PRIVATE void omc__net_chan_close(omc__net* N, omc__net_chan* ch) {
    if (!ch) return;
    omc__net_chan_stop_monitor(ch);
    if (ch->dpc && ch->dp->vt->rx_close) ch->dp->vt->rx_close(ch->dp->user, ch->dpc);
    if (ch->sock) omc__zmq_close(ch->sock);
    omc__free(&N->conn->hooks, ch);
}

/* A new channel to a peer: DEALER socket (CURVE client if a server key is known), a monitor of
   its handshake, and the preferred data plane's per-channel state. */
OMC__PRIVATE omc_result omc__net_chan_open(omc__net* N, omc__net_peer* p, omc__net_chan** out) {
    omc__net_chan* ch;
    char ep[OMC_TCP_HOST_MAX + 32], port[8], mon[96];
    const char* server_key;
    int zero = 0, ivl = 100, hs = OMC__NET_HANDSHAKE_MS, one = 1;
    int64_t maxmsg = OMC__WIRE_MAX;
    omc_result r;
    *out = NULL;
    ch = (omc__net_chan*)omc__calloc(&N->conn->hooks, sizeof(omc__net_chan));
    if (!ch) return OMC_ERR_NO_MEMORY;
    ch->peer = p;
    ch->sock = omc__zmq_socket(N->ctx, ZMQ_DEALER);
    if (!ch->sock) { omc__free(&N->conn->hooks, ch); return OMC_ERR_SYSTEM; }
    omc__zmq_setsockopt(ch->sock, ZMQ_LINGER, &zero, sizeof(zero));
    omc__zmq_setsockopt(ch->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
    omc__zmq_setsockopt(ch->sock, ZMQ_HANDSHAKE_IVL, &hs, sizeof(hs));
    omc__zmq_setsockopt(ch->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    if (strchr(p->host, ':')) omc__zmq_setsockopt(ch->sock, ZMQ_IPV6, &one, sizeof(one));
    pthread_mutex_lock(&N->peer_mu);
    server_key = p->server_key[0] ? p->server_key : N->curve_server_key[0] ? N->curve_server_key : NULL;
    ch->curve = server_key != NULL;
    ch->hooks = &N->conn->hooks;
    if (server_key) {
        omc__zmq_setsockopt(ch->sock, ZMQ_CURVE_SERVERKEY, server_key, OMC_CURVE_KEY_LEN);
        omc__zmq_setsockopt(ch->sock, ZMQ_CURVE_PUBLICKEY, N->curve_public, OMC_CURVE_KEY_LEN);
        omc__zmq_setsockopt(ch->sock, ZMQ_CURVE_SECRETKEY, N->curve_secret, OMC_CURVE_KEY_LEN);
    }
    pthread_mutex_unlock(&N->peer_mu);
    snprintf(mon, sizeof(mon), "inproc://omc-chan-mon-%llu", (unsigned long long)omc__add(&N->next_mon, 1u));
    if (omc__zmq_socket_monitor(ch->sock, mon, OMC__NET_MON_EVENTS | OMC__NET_MON_CONNECTED | OMC__NET_MON_DOWN) == 0) {
        ch->mon = omc__zmq_socket(N->ctx, ZMQ_PAIR);
        if (ch->mon && omc__zmq_connect(ch->mon, mon) != 0) { omc__zmq_close(ch->mon); ch->mon = NULL; }
        if (!ch->mon) omc__zmq_socket_monitor(ch->sock, NULL, 0);
    }
    snprintf(port, sizeof(port), "%u", (unsigned)p->port);
    omc__net_zmq_endpoint(ep, sizeof(ep), p->host, port);
    if (omc__zmq_connect(ch->sock, ep) != 0) {
        OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "cannot connect to %s: %s", ep, omc__zmq_strerror(omc__zmq_errnum()));
        omc__net_chan_close(N, ch);
        return OMC_ERR_INVALID_ARG;
    }
    ch->dp = &N->planes[N->nplanes - 1];   /* the extra plane when there is one; TCP otherwise */
    r = ch->dp->vt->rx_open(ch->dp->user, &ch->dpc);
    if (r != OMC_OK) { ch->dpc = NULL; omc__net_chan_close(N, ch); return r; }
    *out = ch;
    return OMC_OK;
}

/* An idle channel of the peer if a sound one is cached (*fresh = 0), else a new one. */
OMC__PRIVATE omc_result omc__net_chan_checkout(omc__net* N, omc__net_peer* p, omc__net_chan** out, int* fresh) {
    for (;;) {
        omc__net_chan* ch;
        pthread_mutex_lock(&N->peer_mu);
        ch = p->idle;
        if (ch) { p->idle = ch->next; p->nidle--; ch->next = NULL; }
        pthread_mutex_unlock(&N->peer_mu);
        if (!ch) break;
        if (omc_now_ns() - ch->idle_since < (omc_time_ns)OMC__NET_CHAN_IDLE_MS * 1000000LL &&
            (!ch->dp->vt->rx_reusable || ch->dp->vt->rx_reusable(ch->dp->user, ch->dpc))) {
            ch->hs_failed = 0;
            *out = ch;
            *fresh = 0;
            return OMC_OK;
        }
        omc__net_chan_close(N, ch);     /* its data connection died with its sender, most likely */
    }
    *fresh = 1;
    return omc__net_chan_open(N, p, out);
}

/* Back into the cache if it is sound and wanted; closed otherwise. */
OMC__PRIVATE void omc__net_chan_checkin(omc__net* N, omc__net_chan* ch, int sound) {
    omc__net_peer* p = ch->peer;
    int keep = 0;
    if (sound && ch->incarnation && !ch->hello_seq && !omc__net_closed(N)) {
        pthread_mutex_lock(&N->peer_mu);
        if (p->nidle < N->max_idle && p->incarnation == ch->incarnation) {
            ch->next = p->idle;
            ch->idle_since = omc_now_ns();
            p->idle = ch;
            p->nidle++;
            keep = 1;
        }
        pthread_mutex_unlock(&N->peer_mu);
    }
    if (!keep) omc__net_chan_close(N, ch);
}

OMC__PRIVATE omc_result omc__net_chan_send(omc__net* N, omc__net_chan* ch, omc__wire* m) {
    uint8_t buf[OMC__WIRE_MAX];
    uint32_t len;
    omc_result r;
    if (++ch->seq == 0) ch->seq = 1;
    m->xfer = ch->xfer;
    m->seq = ch->seq;
    m->incarnation = omc_incarnation();
    r = omc__wire_encode(m, buf, sizeof(buf), &len);
    if (r != OMC_OK) return r;
    /* a DEALER queues while it connects; EAGAIN means that queue is full: the peer is not there */
    if (omc__zmq_send(ch->sock, buf, len, ZMQ_DONTWAIT) < 0) {
        OMC__LOG(&N->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "send %s to %s: %s", omc__wire_type_name(m->type), ch->peer->name,
                 omc__zmq_strerror(omc__zmq_errnum()));
        return OMC_ERR_CONNECTION;
    }
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__net_chan_send_hello(omc__net* N, omc__net_chan* ch) {
    uint8_t recs[1100], val[1024];
    uint32_t rlen = 0, count = 0, vlen = 0;
    omc__wire m;
    omc_result r;
    if (ch->dp->vt->rx_hello && ch->dp->vt->rx_hello(ch->dp->user, ch->dpc, val, sizeof(val), &vlen) == OMC_OK && vlen)
        omc__wire_add_record(recs, sizeof(recs), &rlen, &count, ch->dp->vt->kind, val, vlen);
    memset(&m, 0, sizeof(m));
    m.type = OMC__MSG_HELLO;
    m.caps = N->caps;
    m.nrecords = count;
    m.records = recs;
    m.records_len = rlen;
    r = omc__net_chan_send(N, ch, &m);
    if (r == OMC_OK) { ch->hello_seq = ch->seq; ch->hello_at = omc_now_ns(); }
    return r;
}

/* The sender answered our HELLO: remember who it is, notice restarts, set up the data plane
   (falling back to TCP if the sender lacks the preferred one). */
OMC__PRIVATE omc_result omc__net_chan_on_hello(omc__net* N, omc__net_chan* ch, const omc__wire* m) {
    omc__net_peer* p = ch->peer;
    omc__net_chan* stale = NULL;
    omc__dp_peer dpeer;
    omc_result r;
    if (m->incarnation == 0) return OMC_ERR_PROTOCOL;
    ch->hello_seq = 0;
    ch->incarnation = m->incarnation;
    ch->caps = m->caps;
    omc__net_chan_stop_monitor(ch);
    pthread_mutex_lock(&N->peer_mu);
    if (p->incarnation && p->incarnation != m->incarnation) {
        /* a new process answers on that endpoint: cached channels belong to the old one */
        p->restarts++;
        stale = p->idle;
        p->idle = NULL;
        p->nidle = 0;
    }
    p->incarnation = m->incarnation;
    pthread_mutex_unlock(&N->peer_mu);
    if (stale) OMC__LOG(&N->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "sender %s restarted (incarnation %016llx)", p->name,
                        (unsigned long long)m->incarnation);
    while (stale) { omc__net_chan* next = stale->next; omc__net_chan_close(N, stale); stale = next; }
    memset(&dpeer, 0, sizeof(dpeer));
    dpeer.host = p->host;
    dpeer.port = p->port;
    dpeer.incarnation = m->incarnation;
    dpeer.record = omc__wire_find_record(m, ch->dp->vt->kind, &dpeer.record_len);
    dpeer.ticket = omc__wire_find_record(m, OMC__REC_TICKET, &dpeer.ticket_len);
    if (!dpeer.ticket && omc__wire_find_record(m, OMC__REC_TICKET_V2, &dpeer.ticket_len))
        OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "sender %s speaks data hello version 2 (its ticket travels in clear); "
                 "this receiver speaks version %d only: upgrade the sender", p->name, OMC__TCP_HELLO_VERSION);
    r = ch->dp->vt->rx_ready(ch->dp->user, ch->dpc, &dpeer, ch->deadline);
    if (r == OMC_ERR_UNAVAILABLE && ch->dp != &N->planes[0]) {
        ch->dp->vt->rx_close(ch->dp->user, ch->dpc);
        ch->dpc = NULL;
        ch->dp = &N->planes[0];
        r = ch->dp->vt->rx_open(ch->dp->user, &ch->dpc);
        if (r != OMC_OK) { ch->dpc = NULL; return r; }
        dpeer.record = omc__wire_find_record(m, ch->dp->vt->kind, &dpeer.record_len);
        r = ch->dp->vt->rx_ready(ch->dp->user, ch->dpc, &dpeer, ch->deadline);
    }
    if (r != OMC_OK) OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "sender %s: no usable data plane (%s)", p->name, omc_result_str(r));
    return r;
}

/* Read one message from a channel. *got = 1: m is the reply to the current request. *got = 0:
   nothing waiting, or a message handled here (the HELLO answer, a late reply). An error means
   the channel is unusable (a peer that breaks the protocol, or a restarted sender).
   wait_ms > 0: wait that long for a message (a blocking receive costs fewer system calls than
   zmq_poll + receive, which shows in a query's round trip); 0: only what is there. */
OMC__PRIVATE omc_result omc__net_chan_recv(omc__net* N, omc__net_chan* ch, omc__wire* m, uint8_t* buf, int* got, int wait_ms) {
    size_t n = 0;
    int more = 0;
    omc_result r;
    *got = 0;
    if (wait_ms > 0) omc__zmq_setsockopt(ch->sock, ZMQ_RCVTIMEO, &wait_ms, sizeof(wait_ms));
    if (omc__zmq_frame(ch->sock, buf, OMC__WIRE_MAX, wait_ms > 0 ? 0 : ZMQ_DONTWAIT, &n, &more) != 0)
        return omc__zmq_errnum() == EAGAIN || omc__zmq_errnum() == EINTR ? OMC_OK : OMC_ERR_CONNECTION;
    if (more) {
        size_t junk;
        while (more && omc__zmq_frame(ch->sock, NULL, 0, 0, &junk, &more) == 0) {}
        r = OMC_ERR_PROTOCOL;
    } else r = n > OMC__WIRE_MAX ? OMC_ERR_MALFORMED : omc__wire_decode(buf, n, m);
    if (r != OMC_OK) {
        OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "sender %s sent a bad message (%s): channel dropped", ch->peer->name,
                 omc_result_str(r));
        return OMC_ERR_PROTOCOL;
    }
    if (m->xfer != ch->xfer) return OMC_OK;             /* a late answer to an earlier get */
    if (ch->hello_seq && m->seq == ch->hello_seq) {
        if (m->type == OMC__MSG_ERROR) return omc__net_remote_code(m->code);
        if (m->type != OMC__MSG_HELLO) return OMC_ERR_PROTOCOL;
        return omc__net_chan_on_hello(N, ch, m);
    }
    if (m->seq != ch->seq) return OMC_OK;               /* an answer to an abandoned request */
    if (ch->incarnation && m->incarnation != ch->incarnation) return OMC_ERR_PEER_RESTARTED;
    if (m->type == OMC__MSG_HELLO || m->type == OMC__MSG_QUERY || m->type == OMC__MSG_PULL || m->type == OMC__MSG_ABORT ||
        m->type == OMC__MSG_LIST)
        return OMC_ERR_PROTOCOL;
    *got = 1;
    return OMC_OK;
}

/* Why a channel got no answer by the deadline. */
OMC__PRIVATE omc_result omc__net_silence(const omc__net_chan* ch) { return ch->hs_failed ? OMC_ERR_AUTH : OMC_ERR_CONNECTION; }

/* Make sure the channel's HELLO was answered (send it if needed), before the deadline. */
OMC__PRIVATE omc_result omc__net_chan_hello(omc__net* N, omc__net_chan* ch, omc_time_ns deadline) {
    uint8_t buf[OMC__WIRE_MAX];
    omc__wire m;
    omc_result r;
    if (ch->incarnation) return OMC_OK;
    if (omc__deadline_passed(deadline)) return OMC_ERR_TIMEOUT;    /* OMC_NO_WAIT: no time to ask */
    if (!ch->hello_seq && (r = omc__net_chan_send_hello(N, ch)) != OMC_OK) return r;
    for (;;) {
        omc__zmq_pollitem it[2];
        int n = 1, got;
        memset(it, 0, sizeof(it));
        it[0].socket = ch->sock; it[0].events = ZMQ_POLLIN;
        if (ch->mon) { it[1].socket = ch->mon; it[1].events = ZMQ_POLLIN; n = 2; }
        if (omc__net_closed(N)) return OMC_ERR_CLOSED;
        if (omc__deadline_passed(deadline)) return omc__net_silence(ch);
        omc__zmq_poll(it, n, omc__poll_ms(deadline, OMC__NET_SLICE_MS));
        omc__net_chan_events(ch);
        do {
            r = omc__net_chan_recv(N, ch, &m, buf, &got, 0);
            if (r != OMC_OK) return r;
            if (ch->incarnation) return OMC_OK;
        } while (got);
    }
}

/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - get                                          */
/* ============================================================================================== */

static omc_result omc__net_release(omc_buffer* b) {
    omc__net* N = (omc__net*)b->owner;
    omc_conn* c;
    omc_result r;
    if (!N) return OMC_ERR_INVALID_ARG;
    c = N->conn;
    r = omc_alloc_free(N->pool->alloc, b->range);
    if (r != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_ALLOC_BAD_FREE, "release of a received buffer that is no longer held: %s", omc_result_str(r));
        return r;
    }
    omc__add(&c->releases, 1u);
    omc__conn_unref(c);     /* may destroy the connector: nothing after this line */
    return OMC_OK;
}

/* A request's time budget in ms: the sender stops pushing when we stop waiting (0: forever, and
   the sender applies vLLM-Omni's rule; a passed deadline still asks for 1 ms). */
OMC__PRIVATE uint32_t omc__net_budget_ms(omc_time_ns deadline) {
    omc_time_ns now = omc_now_ns();
    return deadline == OMC_WAIT_FOREVER ? 0 : deadline <= now ? 1 : (uint32_t)omc__min((deadline - now) / 1000000 + 1, (omc_time_ns)0xFFFFFFFF);
}

/* A PULL as a request on the channel's TCP data connection, from this thread: no libzmq
   thread and no side-channel message on the way. Waits for the payload (or, for a CLAIM, the
   status record) until wait_until. */
OMC__PRIVATE omc_result omc__net_request(omc__net* N, omc__net_chan* ch, omc__dp_xfer* x, uint8_t op, const char* qkey, uint32_t qlen,
                                         uint64_t entry_id, omc_time_ns deadline, omc_time_ns wait_until, omc_buffer* out, int* keep) {
    const omc__dp_vtable* vt = ch->dp->vt;
    omc__dp_request q;
    omc_result r;
    memset(&q, 0, sizeof(q));
    q.op = op;
    q.xfer = ch->xfer;
    q.entry_id = entry_id;
    q.qkey = qkey;
    q.qlen = qlen;
    q.expect_incarnation = ch->incarnation;
    q.capacity = x->size;
    q.budget_ms = omc__net_budget_ms(deadline);
    r = omc__dp_ext_of(vt)->rx_request(ch->dp->user, ch->dpc, x, &q, deadline);   /* omc__net_pull checked it */
    while (r == OMC_OK && !x->complete) {
        struct pollfd pf;
        if (omc__net_closed(N)) { r = OMC_ERR_CLOSED; break; }
        /* giving up closes the connection (rx_end): the sender's push fails at its next write
           and gives the reader back, so no ABORT is needed */
        if (omc_now_ns() >= wait_until) { r = OMC_ERR_TIMEOUT; break; }
        pf.fd = vt->rx_fd(ch->dp->user, ch->dpc); pf.events = POLLIN; pf.revents = 0;
        if (poll(&pf, 1, omc__poll_ms(wait_until, OMC__NET_SLICE_MS)) > 0) r = vt->rx_progress(ch->dp->user, ch->dpc, x, 0);
    }
    if (r != OMC_OK && x->refused) {
        if (r == OMC_ERR_TOO_LARGE) out->size = x->detail;
        *keep = omc__net_clean_refusal(r);
    }
    return r;
}

/* PULL one entry on a channel whose HELLO was answered: destination, descriptor, PULL, then
   wait for the bytes and DONE. inl: the payload's bytes from inline metadata (a CLAIM records
   the read and nothing else moves; a sender without data-connection requests sends them
   again). *keep: the channel may be cached again. */
OMC__PRIVATE omc_result omc__net_pull(omc__net* N, omc__net_chan* ch, const char* qkey, uint32_t qlen, uint64_t entry_id,
                                      uint64_t size, uint32_t flags, const uint8_t* inl, omc_time_ns deadline, omc_buffer* out, int* keep) {
    const omc__dp_vtable* vt = ch->dp->vt;
    uint8_t desc[OMC__WIRE_MAX_DESC], buf[OMC__WIRE_MAX];
    omc__dp_xfer x;
    omc__wire m;
    omc_time_ns wait_until;
    omc_result r;
    const omc__dp_ext* ext;
    int got_done = 0, got, direct;
    *keep = 0;
    memset(&x, 0, sizeof(x));
    x.transfer_id = ch->xfer;
    x.size = size;
    r = omc_pool_alloc_buffer_wait(N->pool, size ? size : 1, deadline, &x.dst);
    if (r != OMC_OK) {
        char key[OMC_KEY_MAX];
        uint32_t k;
        for (k = 0; k < qlen && k < OMC_KEY_MAX - 1; k++) key[k] = qkey[k] == 0x1f ? '/' : qkey[k];
        key[k] = '\0';
        OMC__LOG(&N->conn->hooks, r == OMC_ERR_TIMEOUT ? OMC_LOG_INFO : OMC_LOG_WARN, OMC_LOGITEM_NET,
                 "receiver: no room for %s (%llu bytes) in this receiver's pool of %llu bytes (%s): %s", key, (unsigned long long)size,
                 (unsigned long long)omc_pool_size(N->pool), omc_result_str(r),
                 r == OMC_ERR_TOO_LARGE ? "create the receiver with a larger pool_size" : "release buffers you hold, or give it a larger pool_size");
        *keep = 1;
        return r;
    }
    memset(&m, 0, sizeof(m));
    r = vt->rx_prepare(ch->dp->user, ch->dpc, &x, deadline, desc, sizeof(desc), &m.desc_len);
    wait_until = deadline == OMC_WAIT_FOREVER ? omc_now_ns() + omc__net_default_budget_ns(size) : deadline;
    ext = omc__dp_ext_of(vt);
    direct = !N->side_pull && (ch->caps & OMC_NET_CAP_REQUESTS) && ext && ext->rx_request && ext->rx_requests && vt->rx_fd &&
             ext->rx_requests(ch->dp->user, ch->dpc);
    if (r == OMC_OK && direct) {
        r = omc__net_request(N, ch, &x, inl ? OMC__DP_REQ_CLAIM : OMC__DP_REQ_PULL, qkey, qlen, entry_id, deadline, wait_until, out, keep);
        if (r == OMC_OK && inl && size) memcpy(x.dst.data, inl, (size_t)size);
    } else if (r == OMC_OK) {
        m.type = OMC__MSG_PULL;
        m.entry_id = entry_id;
        m.expect_incarnation = ch->incarnation;
        m.capacity = size;
        /* the sender stops pushing when we stop waiting (0: it applies vLLM-Omni's rule too) */
        m.budget_ms = omc__net_budget_ms(deadline);
        m.key = qkey;
        m.key_len = qlen;
        m.dp_kind = vt->kind;
        m.desc = desc;
        r = omc__net_chan_send(N, ch, &m);
    }
    while (r == OMC_OK && !direct) {
        omc__zmq_pollitem it[2];
        int n = 1, fd = x.complete ? -1 : vt->rx_fd(ch->dp->user, ch->dpc);
        memset(it, 0, sizeof(it));
        it[0].socket = ch->sock; it[0].events = ZMQ_POLLIN;
        if (fd >= 0) { it[1].fd = fd; it[1].events = ZMQ_POLLIN; n = 2; }
        if (omc__net_closed(N)) { r = OMC_ERR_CLOSED; break; }
        if (omc_now_ns() >= wait_until) {
            memset(&m, 0, sizeof(m));
            m.type = OMC__MSG_ABORT;    /* the sender stops pushing at its next chunk */
            omc__net_chan_send(N, ch, &m);
            r = OMC_ERR_TIMEOUT;
            break;
        }
        omc__zmq_poll(it, n, omc__poll_ms(wait_until, OMC__NET_SLICE_MS));
        if (n == 2 && it[1].revents && (r = vt->rx_progress(ch->dp->user, ch->dpc, &x, got_done)) != OMC_OK) break;
        if (it[0].revents) {
            do {
                r = omc__net_chan_recv(N, ch, &m, buf, &got, 0);
                if (r != OMC_OK || !got) break;
                if (m.type == OMC__MSG_DONE) {
                    if (m.bytes != size) { r = OMC_ERR_PROTOCOL; break; }
                    got_done = 1;
                    if (!x.complete) r = vt->rx_progress(ch->dp->user, ch->dpc, &x, 1);     /* also a plane with a timer fd */
                } else if (m.type == OMC__MSG_ERROR) {
                    r = omc__net_remote_code(m.code);
                    if (r == OMC_ERR_TOO_LARGE) out->size = m.detail;
                    *keep = omc__net_clean_refusal(r) && x.received == 0;
                } else r = OMC_ERR_PROTOCOL;
            } while (r == OMC_OK && got);
        }
        /* the TCP trailer is written after the sender recorded the read: no need to wait for DONE */
        if (r == OMC_OK && x.complete && (got_done || (ch->dp->vt->flags & OMC__DP_FLAG_SELF_COMPLETE))) break;
    }
    if (vt->rx_end) vt->rx_end(ch->dp->user, ch->dpc, &x, r);
    if (r != OMC_OK) {
        uint64_t need = out->size;
        omc_buffer_release(&x.dst);
        out->size = need;
        return r;
    }
    *keep = 1;
    memset(out, 0, sizeof(*out));
    out->data = x.dst.data;
    out->size = size;
    out->pool = N->pool;
    out->range = x.dst.range;
    out->flags = flags & OMC_BUFFER_FRAME;
    out->release_fn = omc__net_release;
    out->owner = N;
    omc__conn_ref(N->conn);
    return OMC_OK;
}

/* get with metadata: we know the sender, the entry, the size and the incarnation. */
OMC__PRIVATE omc_result omc__net_get_meta(omc__net* N, const char* qkey, uint32_t qlen, const omc_meta_info* meta,
                                          omc_time_ns deadline, uint64_t max_size, omc_buffer* out) {
    omc__net_meta body;
    omc__net_peer* p;
    omc_result r = omc__net_meta_body_decode(meta->body, meta->body_len, meta->flags, meta->data_size, &body);
    int attempt;
    if (r != OMC_OK) return r;
    if (max_size && meta->data_size > max_size) { out->size = meta->data_size; return OMC_ERR_TOO_LARGE; }
    pthread_mutex_lock(&N->peer_mu);
    p = omc__net_peer_locked(N, body.host, body.port, 1, &r);
    if (p) p->requests++;
    pthread_mutex_unlock(&N->peer_mu);
    if (!p) return r;
    for (attempt = 0; attempt < 2; attempt++) {
        omc__net_chan* ch;
        int fresh = 0, keep = 0;
        r = omc__net_chan_checkout(N, p, &ch, &fresh);
        if (r != OMC_OK) break;
        ch->xfer = omc__add(&N->next_xfer, 1u);
        ch->deadline = deadline;
        r = omc__net_chan_hello(N, ch, deadline);
        if (r != OMC_OK) { omc__net_chan_close(N, ch); break; }
        if (ch->incarnation != meta->incarnation) {
            /* a cached channel may predate a restart: only a fresh HELLO has the last word */
            omc__net_chan_checkin(N, ch, 1);
            if (!fresh) continue;
            r = OMC_ERR_PEER_RESTARTED;
            break;
        }
        r = omc__net_pull(N, ch, qkey, qlen, body.entry_id, meta->data_size, meta->flags & OMC_META_FLAG_FRAME ? OMC_BUFFER_FRAME : 0,
                          body.inl, deadline, out, &keep);
        omc__net_chan_checkin(N, ch, keep);
        if (r == OMC_ERR_PEER_RESTARTED && !fresh) continue;
        break;
    }
    if (r == OMC_OK) {
        pthread_mutex_lock(&N->peer_mu);
        p->bytes += out->size;
        pthread_mutex_unlock(&N->peer_mu);
    }
    if (r != OMC_ERR_TOO_LARGE && r != OMC_ERR_CLOSED)
        omc__net_peer_result(N, p, r, "get with metadata: %s", omc_result_str(r));
    return r;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - a batch of gets                              */
/* ============================================================================================== */
/*
    The gets of a batch whose metadata names one sender share one channel, and their requests
    go ahead on its data connection. The sender reads a request once it has answered the one
    before (a PULL: once that one's receipt came), so each get is spared the round trip of its
    own request and the sender's listener finds the next request waiting when it finishes one.
    Nothing else of a get changes: each payload still waits for its receipt before the sender
    records the read, so a receiver that dies mid-batch has consumed only what it acknowledged.

    At most OMC__NET_AHEAD requests are outstanding. Each one's destination is taken from the
    pool before its request goes: without waiting, except for the first outstanding one, which
    waits as a get does (so a batch never holds the pool hostage for gets it cannot read yet).
    Whatever is unusual - another incarnation, a sender that takes no requests, a refusal that
    says the sender restarted, a connection that broke - hands the rest of the run to the plain
    get, which knows how to retry and report it; requests that were sent and never read die with
    their connection, which consumes nothing on the sender.
*/
#define OMC__NET_AHEAD 16

/* One get of a run to one sender. */
typedef struct omc__net_bitem {
    omc__batch_get* g;
    omc__net_meta body;
    omc__dp_xfer x;
    int state;                          /* OMC__NET_B_* */
} omc__net_bitem;
enum { OMC__NET_B_TODO = 0, OMC__NET_B_SENT, OMC__NET_B_DONE, OMC__NET_B_PLAIN };   /* PLAIN: for the plain get */

/* The request of one get, for sending ahead or for reading its answer. */
OMC__PRIVATE void omc__net_bitem_request(const omc__net_chan* ch, const omc__net_bitem* a, uint8_t ahead, omc_time_ns deadline,
                                         omc__dp_request* q) {
    memset(q, 0, sizeof(*q));
    q->op = a->body.inl ? OMC__DP_REQ_CLAIM : OMC__DP_REQ_PULL;
    q->xfer = a->x.transfer_id;
    q->entry_id = a->body.entry_id;
    q->qkey = a->g->qkey;
    q->qlen = a->g->qlen;
    q->expect_incarnation = ch->incarnation;
    q->capacity = a->x.size;
    q->budget_ms = omc__net_budget_ms(deadline);
    q->ahead = ahead;
}

/* Send one get's request ahead: its destination first (waiting only if may_wait). */
OMC__PRIVATE omc_result omc__net_bitem_send(omc__net* N, omc__net_chan* ch, omc__net_bitem* a, int may_wait, omc_time_ns deadline) {
    omc__dp_request q;
    omc_result r;
    a->x.size = a->g->meta->data_size;
    r = omc_pool_alloc_buffer_wait(N->pool, a->x.size ? a->x.size : 1, may_wait ? deadline : OMC_NO_WAIT, &a->x.dst);
    if (r != OMC_OK) return r;
    a->x.transfer_id = omc__add(&N->next_xfer, 1u);
    omc__net_bitem_request(ch, a, OMC__DP_AHEAD_SEND, deadline, &q);
    r = omc__dp_ext_of(ch->dp->vt)->rx_request(ch->dp->user, ch->dpc, &a->x, &q, deadline);
    if (r != OMC_OK) { omc_buffer_release(&a->x.dst); return r; }
    a->state = OMC__NET_B_SENT;
    return OMC_OK;
}

/* Start reading the answer to a request sent ahead (the next one on the stream): the plane's
   per-transfer state reset, the kind of answer named (and what was held back sent). */
OMC__PRIVATE omc_result omc__net_bitem_start(omc__net_chan* ch, omc__net_bitem* a, omc_time_ns deadline) {
    const omc__dp_vtable* vt = ch->dp->vt;
    uint8_t desc[OMC__WIRE_MAX_DESC];
    uint32_t desc_len = 0;
    omc__dp_request q;
    omc_result r;
    /* rx_prepare would also reconnect a closed connection, which must not happen here: the
       answer is on the one it had */
    if (vt->rx_fd(ch->dp->user, ch->dpc) < 0) return OMC_ERR_CONNECTION;
    r = vt->rx_prepare(ch->dp->user, ch->dpc, &a->x, deadline, desc, sizeof(desc), &desc_len);
    a->x.nowait = 1;
    omc__net_bitem_request(ch, a, OMC__DP_AHEAD_READ, deadline, &q);
    if (r == OMC_OK) r = omc__dp_ext_of(vt)->rx_request(ch->dp->user, ch->dpc, &a->x, &q, deadline);
    return r;
}

/* The answer is complete or failed with r: let the plane end it. Returns whether the stream is
   still in step (a success, or a clean refusal). */
OMC__PRIVATE int omc__net_bitem_stop(omc__net_chan* ch, omc__net_bitem* a, omc_result r) {
    int in_step = r == OMC_OK;
    if (r != OMC_OK && a->x.refused) {
        if (r == OMC_ERR_TOO_LARGE) a->g->out->size = a->x.detail;
        in_step = omc__net_clean_refusal(r);
    }
    if (ch->dp->vt->rx_end) ch->dp->vt->rx_end(ch->dp->user, ch->dpc, &a->x, r);   /* out of step: closes the connection */
    return in_step;
}

/* The end of one get of the run: the view handed out, or the destination given back. */
OMC__PRIVATE void omc__net_bitem_finish(omc__net* N, omc__net_peer* p, omc__net_bitem* a, omc_result r) {
    omc_buffer* out = a->g->out;
    if (r == OMC_OK) {
        if (a->body.inl && a->x.size) memcpy(a->x.dst.data, a->body.inl, (size_t)a->x.size);
        memset(out, 0, sizeof(*out));
        out->data = a->x.dst.data;
        out->size = a->x.size;
        out->pool = N->pool;
        out->range = a->x.dst.range;
        out->flags = a->g->meta->flags & OMC_META_FLAG_FRAME ? OMC_BUFFER_FRAME : 0;
        out->release_fn = omc__net_release;
        out->owner = N;
        omc__conn_ref(N->conn);
    } else {
        uint64_t need = out->size;
        omc_buffer_release(&a->x.dst);
        memset(out, 0, sizeof(*out));
        out->size = need;
    }
    a->g->result = r;
    a->state = OMC__NET_B_DONE;
    pthread_mutex_lock(&N->peer_mu);
    p->requests++;
    if (r == OMC_OK) p->bytes += a->x.size;
    pthread_mutex_unlock(&N->peer_mu);
    if (r != OMC_ERR_TOO_LARGE && r != OMC_ERR_CLOSED) omc__net_peer_result(N, p, r, "get with metadata: %s", omc_result_str(r));
}

/* Does this channel take requests sent ahead on its data connection? */
OMC__PRIVATE int omc__net_chan_pipelines(const omc__net* N, omc__net_chan* ch) {
    const omc__dp_vtable* vt = ch->dp->vt;
    const omc__dp_ext* ext = omc__dp_ext_of(vt);
    return !N->side_pull && (ch->caps & OMC_NET_CAP_REQUESTS) && (vt->flags & OMC__DP_FLAG_PIPELINE) && ext && ext->rx_request &&
           ext->rx_requests && vt->rx_fd && vt->rx_prepare && ext->rx_requests(ch->dp->user, ch->dpc);
}

/* Open the channel's data connection if it has none (rx_prepare connects; the requests sent
   ahead need it before the first answer is read). */
OMC__PRIVATE omc_result omc__net_chan_connect(omc__net_chan* ch, omc_time_ns deadline) {
    const omc__dp_vtable* vt = ch->dp->vt;
    uint8_t desc[OMC__WIRE_MAX_DESC];
    uint32_t desc_len = 0;
    omc__dp_xfer x;
    if (vt->rx_fd(ch->dp->user, ch->dpc) >= 0) return OMC_OK;
    memset(&x, 0, sizeof(x));
    return vt->rx_prepare(ch->dp->user, ch->dpc, &x, deadline, desc, sizeof(desc), &desc_len);
}

/* One lane of a run: a channel and every lanes-th get of the run, in order. Several lanes let
   the payloads of one lane move while another waits for its round trip (a PULL's answer waits
   for its receipt, one at a time per connection). */
typedef struct omc__net_lane {
    omc__net_chan* ch;
    int fresh, in_step, reading;        /* reading: the answer to item next is being read */
    uint32_t first, count, sent, next;  /* its items: at[first + i * lanes], i < count */
    omc_time_ns wait_until;             /* of the item being read */
} omc__net_lane;

/* Open a lane's channel to p: checked out, HELLO answered, same incarnation as the metadata,
   taking requests ahead, data connection open. 0 = no lane (the plain gets take its items). */
OMC__PRIVATE int omc__net_lane_open(omc__net* N, omc__net_peer* p, uint64_t incarnation, omc_time_ns deadline, omc__net_lane* L) {
    if (omc__net_chan_checkout(N, p, &L->ch, &L->fresh) != OMC_OK) return 0;
    L->ch->xfer = omc__add(&N->next_xfer, 1u);
    L->ch->deadline = deadline;
    if (omc__net_chan_hello(N, L->ch, deadline) != OMC_OK) { omc__net_chan_close(N, L->ch); return 0; }
    if (L->ch->incarnation != incarnation || !omc__net_chan_pipelines(N, L->ch)) { omc__net_chan_checkin(N, L->ch, 1); return 0; }
    if (omc__net_chan_connect(L->ch, deadline) != OMC_OK) { omc__net_chan_checkin(N, L->ch, 0); return 0; }
    L->in_step = 1;
    return 1;
}

/* The item a lane was reading is complete or failed with r. */
OMC__PRIVATE void omc__net_lane_end_item(omc__net* N, omc__net_peer* p, omc__net_bitem* a, omc__net_lane* L, omc_result r) {
    int in_step = omc__net_bitem_stop(L->ch, a, r);
    L->reading = 0;
    if (r == OMC_ERR_PEER_RESTARTED && !L->fresh) {    /* a cached channel may predate a restart: */
        omc_buffer_release(&a->x.dst);                 /* only a fresh HELLO has the last word */
        a->state = OMC__NET_B_TODO;
        L->in_step = 0;
        return;
    }
    omc__net_bitem_finish(N, p, a, r);
    L->next++;
    L->in_step = in_step;
}

/* Keep a lane's requests ahead and have it reading its next answer. may_wait: no lane has a
   request out, so this one may wait for pool room (with requests out, a wait would hold up the
   answers that free nothing but would be read). Returns OMC__NET_LANE_*. */
enum { OMC__NET_LANE_DONE = 0, OMC__NET_LANE_READING, OMC__NET_LANE_STALLED };
OMC__PRIVATE int omc__net_lane_step(omc__net* N, omc__net_peer* p, omc__net_bitem* it, const uint32_t* at, uint32_t lanes,
                                    omc__net_lane* L, int may_wait, omc_time_ns deadline) {
    for (;;) {
        omc__net_bitem* a;
        omc_result r;
        if (L->reading) return OMC__NET_LANE_READING;
        if (!L->in_step || L->next >= L->count) return OMC__NET_LANE_DONE;
        while (L->sent < L->count && L->sent - L->next < OMC__NET_AHEAD &&
               omc__net_bitem_send(N, L->ch, &it[at[L->first + L->sent * lanes]], may_wait && L->sent == L->next, deadline) == OMC_OK)
            L->sent++;
        /* no room for its next destination: try again when no request is out, and if even that
           wait finds none, the plain get says why */
        if (L->sent == L->next) return may_wait ? OMC__NET_LANE_DONE : OMC__NET_LANE_STALLED;
        a = &it[at[L->first + L->next * lanes]];
        L->wait_until = deadline == OMC_WAIT_FOREVER ? omc_now_ns() + omc__net_default_budget_ns(a->x.size) : deadline;
        L->reading = 1;
        r = omc__net_bitem_start(L->ch, a, deadline);
        if (r == OMC_OK) return OMC__NET_LANE_READING;
        omc__net_lane_end_item(N, p, a, L, r);
    }
}

/* How many lanes a run gets: one for claims (no payload moves), more when enough payloads are
   pulled that their round trips are worth overlapping. */
OMC__PRIVATE uint32_t omc__net_lanes_for(const omc__net_bitem* it, const uint32_t* at, uint32_t m) {
    uint32_t k, pulls = 0, lanes;
    for (k = 0; k < m; k++) pulls += !it[at[k]].body.inl;
    lanes = 1 + pulls / 4;
    return lanes < OMNICONN_TCP_BATCH_LANES ? lanes : OMNICONN_TCP_BATCH_LANES;
}

/* A run of gets to one sender (same host, port and incarnation): it[at[0..m-1]], dealt over up to
   OMNICONN_TCP_BATCH_LANES channels, each pipelined, all read by this thread from one poll. The
   items it leaves in TODO are for the plain get. */
OMC__PRIVATE void omc__net_run(omc__net* N, omc__net_bitem* it, const uint32_t* at, uint32_t m, omc_time_ns deadline) {
    omc__net_lane L[OMNICONN_TCP_BATCH_LANES];
    struct pollfd pf[OMNICONN_TCP_BATCH_LANES];
    uint32_t who[OMNICONN_TCP_BATCH_LANES];
    uint32_t want = omc__net_lanes_for(it, at, m), nl = 0, l, k, done = 0;
    omc__net_peer* p;
    omc_result r = OMC_OK;
    pthread_mutex_lock(&N->peer_mu);
    p = omc__net_peer_locked(N, it[at[0]].body.host, it[at[0]].body.port, 1, &r);
    pthread_mutex_unlock(&N->peer_mu);
    if (!p) return;
    memset(L, 0, sizeof(L));
    while (nl < want && omc__net_lane_open(N, p, it[at[0]].g->meta->incarnation, deadline, &L[nl])) nl++;
    if (!nl) return;
    for (l = 0; l < nl; l++) { L[l].first = l; L[l].count = (m - l + nl - 1) / nl; }    /* item k to lane k % nl */
    for (;;) {
        omc_time_ns now, until = OMC_WAIT_FOREVER;
        uint32_t n = 0, i, stalled = 0, out;
        for (l = 0; l < nl; l++) {
            int st;
            for (k = 0, out = 0; k < nl; k++) out += L[k].sent - L[k].next;
            st = omc__net_lane_step(N, p, it, at, nl, &L[l], out == 0, deadline);
            stalled += st == OMC__NET_LANE_STALLED;
            if (st != OMC__NET_LANE_READING) continue;
            pf[n].fd = L[l].ch->dp->vt->rx_fd(L[l].ch->dp->user, L[l].ch->dpc);
            pf[n].events = POLLIN;
            pf[n].revents = 0;
            who[n++] = l;
            if (L[l].wait_until < until) until = L[l].wait_until;
        }
        if (!n && stalled) continue;    /* nothing out now: a stalled lane may wait for room */
        if (!n) break;
        now = omc_now_ns();
        if (omc__net_closed(N) || now >= until) {       /* closed, or a get's time is up */
            for (i = 0; i < n; i++)
                if (omc__net_closed(N) || now >= L[who[i]].wait_until)
                    omc__net_lane_end_item(N, p, &it[at[L[who[i]].first + L[who[i]].next * nl]], &L[who[i]],
                                           omc__net_closed(N) ? OMC_ERR_CLOSED : OMC_ERR_TIMEOUT);
            continue;
        }
        if (poll(pf, n, omc__poll_ms(until, OMC__NET_SLICE_MS)) <= 0) continue;
        for (i = 0; i < n; i++) {
            omc__net_lane* Li = &L[who[i]];
            omc__net_bitem* a = &it[at[Li->first + Li->next * nl]];
            if (!pf[i].revents) continue;
            r = Li->ch->dp->vt->rx_progress(Li->ch->dp->user, Li->ch->dpc, &a->x, 0);
            if (r != OMC_OK || a->x.complete) omc__net_lane_end_item(N, p, a, Li, r);
        }
    }
    for (l = 0; l < nl; l++) {
        for (k = L[l].next; k < L[l].sent; k++) {       /* sent and never read: they die with the connection */
            omc__net_bitem* a = &it[at[L[l].first + k * nl]];
            if (a->state != OMC__NET_B_SENT) continue;
            omc_buffer_release(&a->x.dst);
            a->state = OMC__NET_B_TODO;
            L[l].in_step = 0;
        }
        omc__net_chan_checkin(N, L[l].ch, L[l].in_step);
    }
    for (k = 0; k < m; k++) done += it[at[k]].state == OMC__NET_B_DONE;
    OMC__LOG(&N->conn->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_NET, "receiver: %u of a batch's %u gets to %s:%u pipelined on %u data "
             "connection%s (at most %d requests ahead on each)%s", done, m, p->host, (unsigned)p->port, nl, nl == 1 ? "" : "s",
             OMC__NET_AHEAD, done < m ? "; the rest one at a time" : "");
}

/* The connector's get_batch: each run of gets to one sender pipelined, anything else one at a
   time (a get whose metadata does not decode, a run of one, what a run left over). */
static void omc__net_get_batch(omc_conn* c, omc__batch_get* g, uint32_t n, omc_time_ns deadline) {
    omc__net* N = (omc__net*)c->impl;
    omc__net_bitem* it = (omc__net_bitem*)omc__calloc(&c->hooks, (n ? n : 1) * sizeof(omc__net_bitem));
    uint32_t* at = (uint32_t*)omc__calloc(&c->hooks, (n ? n : 1) * sizeof(uint32_t));
    uint32_t i, j, m;
    if (it && at) {
        for (i = 0; i < n; i++) {
            it[i].g = &g[i];
            if (omc__net_meta_body_decode(g[i].meta->body, g[i].meta->body_len, g[i].meta->flags, g[i].meta->data_size, &it[i].body) != OMC_OK)
                it[i].state = OMC__NET_B_PLAIN;
        }
        for (i = 0; i < n; i++) {
            if (it[i].state != OMC__NET_B_TODO) continue;
            for (m = 0, j = i; j < n; j++)
                if (it[j].state == OMC__NET_B_TODO && it[j].body.port == it[i].body.port && strcmp(it[j].body.host, it[i].body.host) == 0 &&
                    g[j].meta->incarnation == g[i].meta->incarnation)
                    at[m++] = j;
            if (m > 1) omc__net_run(N, it, at, m, deadline);
            for (j = 0; j < m; j++) if (it[at[j]].state == OMC__NET_B_TODO) it[at[j]].state = OMC__NET_B_PLAIN;
        }
    }
    for (i = 0; i < n; i++)
        if (!it || !at || it[i].state != OMC__NET_B_DONE) g[i].result = omc__net_get_meta(N, g[i].qkey, g[i].qlen, g[i].meta, deadline, 0, g[i].out);
    omc__free(&c->hooks, it);
    omc__free(&c->hooks, at);
}

/* One sender in a metadata-less get or query. */
typedef struct omc__net_slot {
    omc__net_peer* peer;
    omc__net_chan* ch;
    int querying;                       /* a QUERY is outstanding on ch */
    int answered;                       /* the sender answered something during this call */
    int done;                           /* query mode: it said NOT_FOUND */
    int hs_failed;
    omc_time_ns next_query;
    omc_result last;
} omc__net_slot;

OMC__PRIVATE void omc__net_slot_drop(omc__net* N, omc__net_slot* s, omc_result why, omc_time_ns retry_at) {
    if (s->ch) {
        s->hs_failed |= s->ch->hs_failed;
        omc__net_chan_close(N, s->ch);
        s->ch = NULL;
    }
    s->querying = 0;
    s->last = why;
    s->next_query = retry_at;
}

/* A metadata-less get or a query: every registered sender (or the one named) is asked for a key
   until one has it or the deadline passes; a get then pulls it, a query only reports it. The
   steps below share this state. */
typedef struct omc__net_search {
    omc__net* N;
    const char* qkey;
    uint32_t qlen;
    omc_time_ns deadline;
    int pull;                           /* 1: get (pull what is found); 0: query (report it) */
    uint64_t max_size;                  /* get */
    omc_buffer* out;                    /* get */
    omc_tcp_found* found;               /* query */
    uint64_t xfer;
    omc__net_slot* slots;
    uint32_t ns;
    omc__zmq_pollitem* items;
    int* owner;                         /* items[i] belongs to slots[owner[i]] */
    int finished, asked, first_wait;
    omc_result r;
} omc__net_search;

/* Step 1: one slot per registered sender (or the one named). */
OMC__PRIVATE omc_result omc__net_search_open(omc__net_search* S, const char* only) {
    omc__net* N = S->N;
    omc__net_peer* p;
    uint32_t ns = 0, i;
    pthread_mutex_lock(&N->peer_mu);
    for (p = N->peers; p; p = p->next) if (p->registered && (!only || strcmp(p->name, only) == 0)) ns++;
    S->slots = ns ? (omc__net_slot*)omc__calloc(&N->conn->hooks, sizeof(omc__net_slot) * ns) : NULL;
    S->items = ns ? (omc__zmq_pollitem*)omc__calloc(&N->conn->hooks, sizeof(omc__zmq_pollitem) * ns * 2) : NULL;
    S->owner = ns ? (int*)omc__calloc(&N->conn->hooks, sizeof(int) * ns * 2) : NULL;
    if (S->slots && S->items && S->owner)
        for (p = N->peers; p; p = p->next)
            if (p->registered && (!only || strcmp(p->name, only) == 0)) { S->slots[S->ns++].peer = p; p->requests++; }
    pthread_mutex_unlock(&N->peer_mu);
    if (!ns) {
        OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, only ? "no registered sender named '%s'" : "%s",
                 only ? only : "metadata-less get, but no sender is registered (omc_tcp_add_sender)");
        return OMC_ERR_NOT_FOUND;
    }
    if (!S->slots || !S->items || !S->owner) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < S->ns; i++) S->slots[i].last = OMC_ERR_CONNECTION;
    S->xfer = omc__add(&N->next_xfer, 1u);
    return OMC_OK;
}

/* Step 2: make sure one sender is being asked (channel, HELLO, QUERY pipelined behind it) and
   add its sockets to the poll set. 1 if the sender still counts, 0 if it said NOT_FOUND to a
   query. */
OMC__PRIVATE int omc__net_search_ask(omc__net_search* S, uint32_t i, omc_time_ns now, omc_time_ns* wake, int* n) {
    omc__net* N = S->N;
    omc__net_slot* s = &S->slots[i];
    omc__wire m;
    int fresh;
    if (s->done) return 0;
    if (!s->ch && now >= s->next_query) {
        omc_result r = omc__net_chan_checkout(N, s->peer, &s->ch, &fresh);
        if (r != OMC_OK) { s->ch = NULL; s->last = r; s->next_query = now + OMC__NET_RETRY_MS * 1000000LL; }
        else { s->ch->xfer = S->xfer; s->ch->deadline = S->deadline; }
    }
    if (!s->ch) { if (s->next_query < *wake) *wake = s->next_query; return 1; }
    if (!s->ch->incarnation && !s->ch->hello_seq && omc__net_chan_send_hello(N, s->ch) != OMC_OK) {
        omc__net_slot_drop(N, s, OMC_ERR_CONNECTION, now + OMC__NET_RETRY_MS * 1000000LL);
        return 1;
    }
    if (!s->querying && now >= s->next_query) {
        /* pipelined behind the HELLO on a new channel: no extra round trip. The sender holds it
           a little less than we wait, so its NOT_FOUND arrives before our deadline and the get
           can tell "absent" (TIMEOUT) from "silent" (CONNECTION). */
        int left = S->deadline == OMC_WAIT_FOREVER ? OMNICONN_TCP_MAX_WAIT_MS : omc__poll_ms(S->deadline, OMNICONN_TCP_MAX_WAIT_MS + 20);
        left = left > 40 ? omc__min(left - 20, OMNICONN_TCP_MAX_WAIT_MS) : left / 2;
        memset(&m, 0, sizeof(m));
        m.type = OMC__MSG_QUERY;
        m.wait_ms = S->pull ? (uint32_t)left : 0;
        m.key = S->qkey;
        m.key_len = S->qlen;
        if (omc__net_chan_send(N, s->ch, &m) != OMC_OK) {
            omc__net_slot_drop(N, s, OMC_ERR_CONNECTION, now + OMC__NET_RETRY_MS * 1000000LL);
            return 1;
        }
        s->querying = 1;
        S->asked = 1;
        s->next_query = now + OMC__NET_REQUERY_MS * 1000000LL;
    }
    if (s->ch->mon) { memset(&S->items[*n], 0, sizeof(S->items[*n])); S->items[*n].socket = s->ch->mon; S->items[*n].events = ZMQ_POLLIN; S->owner[(*n)++] = (int)i; }
    memset(&S->items[*n], 0, sizeof(S->items[*n]));
    S->items[*n].socket = s->ch->sock;
    S->items[*n].events = ZMQ_POLLIN;
    S->owner[(*n)++] = (int)i;
    if (!s->querying && s->next_query < *wake) *wake = s->next_query;
    return 1;
}

/* Step 3 (get): a sender has the key: pull it. OMC_OK to keep searching (someone else took
   it), anything else ends the slot (S->finished says whether it ends the search too). */
OMC__PRIVATE omc_result omc__net_search_pull(omc__net_search* S, omc__net_slot* s, const omc__wire* m) {
    omc__net* N = S->N;
    int keep = 0;
    omc_result rr;
    if (S->max_size && m->size > S->max_size) { S->out->size = m->size; S->r = OMC_ERR_TOO_LARGE; S->finished = 1; return OMC_OK; }
    rr = omc__net_pull(N, s->ch, S->qkey, S->qlen, m->entry_id, m->size, m->pflags, NULL, S->deadline, S->out, &keep);
    if (rr == OMC_OK) {
        pthread_mutex_lock(&N->peer_mu);
        s->peer->bytes += m->size;
        pthread_mutex_unlock(&N->peer_mu);
        omc__net_peer_result(N, s->peer, OMC_OK, "%s", "");
        S->r = OMC_OK;
        S->finished = 1;
        return OMC_OK;
    }
    /* someone else took it, or it went away: keep asking */
    if (rr == OMC_ERR_NOT_FOUND || rr == OMC_ERR_STALE) { s->next_query = omc_now_ns(); return OMC_OK; }
    if (rr == OMC_ERR_CONNECTION) {     /* it had the key and the transfer broke: say so now */
        omc__net_peer_result(N, s->peer, rr, "pull: %s", omc_result_str(rr));
        S->r = rr;
        S->finished = 1;
        if (!keep) omc__net_slot_drop(N, s, rr, 0);
        return OMC_OK;
    }
    if (rr == OMC_ERR_TIMEOUT || rr == OMC_ERR_CLOSED || rr == OMC_ERR_TOO_LARGE || rr == OMC_ERR_POOL_FULL || rr == OMC_ERR_NO_MEMORY) {
        S->r = rr;
        S->finished = 1;
        if (!keep) omc__net_slot_drop(N, s, rr, 0);
        return OMC_OK;
    }
    omc__net_peer_result(N, s->peer, rr, "pull: %s", omc_result_str(rr));
    if (keep) { s->last = rr; s->next_query = omc_now_ns() + OMC__NET_RETRY_MS * 1000000LL; return OMC_OK; }
    return rr;
}

/* Step 3: read what one sender's channel has for us and act on the replies. */
OMC__PRIVATE void omc__net_search_read(omc__net_search* S, omc__net_slot* s) {
    omc__net* N = S->N;
    omc_result rr;
    for (;;) {
        uint8_t buf[OMC__WIRE_MAX];
        omc__wire m;
        int got = 0, had_hello = s->ch->incarnation != 0;
        rr = omc__net_chan_recv(N, s->ch, &m, buf, &got, S->first_wait);
        S->first_wait = 0;
        if (rr == OMC_OK && !had_hello && s->ch->incarnation) s->answered = 1;     /* it is alive and talks to us */
        if (rr != OMC_OK || !got) break;
        s->answered = 1;
        s->querying = 0;
        if (m.type == OMC__MSG_NOT_FOUND) { if (!S->pull) s->done = 1; continue; }
        if (m.type == OMC__MSG_ERROR) {
            rr = omc__net_remote_code(m.code);
            OMC__LOG(&N->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "sender %s refused a QUERY: %s", s->peer->name, omc_result_str(rr));
            break;
        }
        if (m.type != OMC__MSG_QUERY_REPLY) { rr = OMC_ERR_PROTOCOL; break; }
        if (!S->pull) {
            memset(S->found, 0, sizeof(*S->found));
            S->found->size = m.size;
            S->found->flags = m.pflags;
            S->found->readers_left = m.readers_left;
            S->found->incarnation = s->ch->incarnation;
            snprintf(S->found->sender, sizeof(S->found->sender), "%s", s->peer->name);
            S->r = OMC_OK;
            S->finished = 1;
            return;
        }
        rr = omc__net_search_pull(S, s, &m);
        break;
    }
    if (rr != OMC_OK && !S->finished) {
        if (rr == OMC_ERR_PEER_RESTARTED) omc__net_slot_drop(N, s, rr, 0);    /* ask the new process at once */
        else {
            omc__net_peer_result(N, s->peer, rr, "metadata-less get: %s", omc_result_str(rr));
            omc__net_slot_drop(N, s, rr, omc_now_ns() + OMC__NET_RETRY_MS * 1000000LL);
        }
    }
}

/* Step 4: why nobody had it by the deadline: TIMEOUT if a sender answered or may simply be slow
   (its channel's handshake was answered, now or on an earlier get, or its channel stands and
   nothing says the link failed: the TCP connection was made or is still being made, no handshake
   failed, our HELLO unanswered for less than OMC__NET_SILENT_MS); AUTH or CONNECTION if no
   sender answered and the link did fail (refused, dropped, handshake failed, HELLO ignored) - a
   short deadline on a loaded host is no broken link. A query whose senders answered: NOT_FOUND. */
OMC__PRIVATE omc_result omc__net_search_why(omc__net_search* S) {
    int answered = 0, alive = 0, auth = 0;
    uint32_t i;
    omc_result r = OMC_ERR_TIMEOUT;
    omc_time_ns now = omc_now_ns();
    for (i = 0; i < S->ns; i++) {
        omc__net_chan* ch = S->slots[i].ch;
        if (ch) omc__net_chan_events(ch);      /* a link or handshake event not read yet */
        answered |= S->slots[i].answered;
        alive |= S->slots[i].answered || (ch && (ch->incarnation || (ch->tcp_state != 2 && !ch->hs_failed && !ch->hs_logged &&
                                                                     now - ch->hello_at < OMC__NET_SILENT_MS * 1000000LL)));
        auth |= S->slots[i].hs_failed | (S->slots[i].ch ? S->slots[i].ch->hs_failed : 0);
    }
    if (!alive && S->asked) r = auth ? OMC_ERR_AUTH : OMC_ERR_CONNECTION;   /* never asked (OMC_NO_WAIT): TIMEOUT */
    if (!S->pull && answered) r = OMC_ERR_NOT_FOUND;
    for (i = 0; i < S->ns; i++) {
        omc__net_slot* s = &S->slots[i];
        int hs = s->hs_failed || (s->ch && s->ch->hs_failed);
        if (!s->answered)
            omc__net_peer_result(S->N, s->peer, hs ? OMC_ERR_AUTH : OMC_ERR_TIMEOUT, "no answer by the deadline%s",
                                 hs ? " (handshake failed: CURVE key?)" : "");
    }
    return r;
}

/* Step 5: forget held queries (ABORT), put the channels back, free. */
OMC__PRIVATE void omc__net_search_close(omc__net_search* S) {
    uint32_t i;
    for (i = 0; i < S->ns; i++) {
        omc__net_slot* s = &S->slots[i];
        if (!s->ch) continue;
        if (s->querying && s->ch->incarnation) {
            omc__wire m;
            memset(&m, 0, sizeof(m));
            m.type = OMC__MSG_ABORT;        /* the sender forgets the held query at once */
            omc__net_chan_send(S->N, s->ch, &m);
        }
        omc__net_chan_checkin(S->N, s->ch, s->ch->incarnation != 0);
    }
    omc__free(&S->N->conn->hooks, S->slots);
    omc__free(&S->N->conn->hooks, S->items);
    omc__free(&S->N->conn->hooks, S->owner);
}

/* The search loop: ask, wait, read, until a result or the deadline. */
OMC__PRIVATE omc_result omc__net_search_run(omc__net_search* S, const char* only) {
    omc_result r = omc__net_search_open(S, only);
    if (r != OMC_OK) { omc__net_search_close(S); return r; }
    S->r = OMC_ERR_TIMEOUT;
    while (!S->finished) {
        omc_time_ns now = omc_now_ns(), wake = S->deadline;
        int n = 0, counting = 0;
        uint32_t i;
        if (omc__net_closed(S->N)) { S->r = OMC_ERR_CLOSED; break; }
        if (S->deadline != OMC_WAIT_FOREVER && now >= S->deadline) { S->r = omc__net_search_why(S); break; }
        for (i = 0; i < S->ns; i++) counting += omc__net_search_ask(S, i, now, &wake, &n);
        if (!counting) { S->r = OMC_ERR_NOT_FOUND; break; }   /* query: every sender said no */
        if (n == 1) {   /* one sender, handshake done: wait in the receive itself */
            S->first_wait = omc__poll_ms(wake, OMC__NET_SLICE_MS);
            S->items[0].revents = ZMQ_POLLIN;
        } else omc__zmq_poll(S->items, n, omc__poll_ms(wake, OMC__NET_SLICE_MS));
        for (i = 0; i < (uint32_t)n && !S->finished; i++) {
            omc__net_slot* s = &S->slots[S->owner[i]];
            if (!s->ch || !S->items[i].revents) continue;
            if (S->items[i].socket != s->ch->sock) { omc__net_chan_events(s->ch); continue; }
            omc__net_search_read(S, s);
        }
    }
    omc__net_search_close(S);
    return S->r;
}

/* A metadata-less get: pull the key from whichever registered sender (or the one named) has it. */
OMC__PRIVATE omc_result omc__net_get_any(omc__net* N, const char* only, const char* qkey, uint32_t qlen, omc_time_ns deadline,
                                         uint64_t max_size, omc_buffer* out) {
    omc__net_search S;
    memset(&S, 0, sizeof(S));
    S.N = N; S.qkey = qkey; S.qlen = qlen; S.deadline = deadline; S.pull = 1; S.max_size = max_size; S.out = out;
    return omc__net_search_run(&S, only);
}

/* A query: which sender has the key now (nothing is pulled). */
OMC__PRIVATE omc_result omc__net_query(omc__net* N, const char* only, const char* qkey, uint32_t qlen, omc_time_ns deadline,
                                       omc_tcp_found* found) {
    omc__net_search S;
    memset(&S, 0, sizeof(S));
    S.N = N; S.qkey = qkey; S.qlen = qlen; S.deadline = deadline; S.found = found;
    return omc__net_search_run(&S, only);
}

/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - the contract                                 */
/* ============================================================================================== */

/* Metadata body: see "the remote connector" in the wire formats. */
static omc_result omc__net_make_meta(omc__owner* O, uint32_t slot, void* user, omc_meta* meta_out) {
    omc__net* N = (omc__net*)user;
    const omc__ent* e = &O->tab.ent[slot];
    uint8_t* body;
    int inl = omc__net_inlines(N, e->size);     /* the bytes ride along; the entry stays (see the manual) */
    omc_result r = omc__meta_begin(N->vt.transport, (e->flags & OMC_BUFFER_FRAME ? OMC_META_FLAG_FRAME : 0) | (inl ? OMC_META_FLAG_INLINE : 0),
                                   e->size, e->qkey, e->qlen, omc__net_meta_body_size(N->host) + (inl ? (uint32_t)e->size : 0), meta_out, &body);
    if (r != OMC_OK) return r;
    omc__net_meta_body_encode(body, omc__etab_id(&O->tab, slot), N->port, N->caps, N->host);
    if (inl && e->size) memcpy(body + omc__net_meta_body_size(N->host), N->pool->base + e->range.offset, (size_t)e->size);
    omc__meta_seal(meta_out);
    return OMC_OK;
}

static omc_result omc__net_put(omc_conn* c, const char* qkey, uint32_t qlen, const omc_payload* p, omc_meta* meta_out) {
    omc__net* N = (omc__net*)c->impl;
    omc_result r = omc__owner_put(&N->own, qkey, qlen, p, (p->flags & OMC_PAYLOAD_FRAME) ? OMC_BUFFER_FRAME : 0, omc__net_make_meta, N, meta_out);
    if (r == OMC_OK && omc__load(&N->held_count)) omc__net_wake(N);   /* a held QUERY may be waiting for it */
    return r;
}

static omc_result omc__net_get(omc_conn* c, const char* qkey, uint32_t qlen, const omc_meta_info* meta, omc_time_ns deadline,
                               uint64_t max_size, omc_buffer* out) {
    omc__net* N = (omc__net*)c->impl;
    if (meta) return omc__net_get_meta(N, qkey, qlen, meta, deadline, max_size, out);
    return omc__net_get_any(N, NULL, qkey, qlen, deadline, max_size, out);
}

static omc_result omc__net_alloc(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    omc__net* N = (omc__net*)c->impl;
    return omc__conn_pool_buffer(c, N->pool, size, deadline, out);     /* the buffer keeps the pool mapped */
}

static omc_result omc__net_cleanup(omc_conn* c, const char* qkey, uint32_t qlen) {
    return omc__owner_cleanup(&((omc__net*)c->impl)->own, qkey, qlen);
}

static void omc__net_health(omc_conn* c, omc_health* h) {
    omc__net* N = (omc__net*)c->impl;
    omc__net_peer* p;
    omc__owner_health(&N->own, h);
    /* degraded: a sender whose last contact failed */
    pthread_mutex_lock(&N->peer_mu);
    for (p = N->peers; p; p = p->next) if (p->last_fail > p->last_ok) h->state = OMC_CONN_DEGRADED;
    pthread_mutex_unlock(&N->peer_mu);
}

static uint64_t omc__net_sweep(omc_conn* c) { return omc__owner_sweep(&((omc__net*)c->impl)->own); }

/* Stop the sender's threads and close its sockets (also used when create fails half-way). */
OMC__PRIVATE void omc__net_stop_sender(omc__net* N) {
    omc__net_job* j;
    uint32_t i;
    omc__store(&N->stop, 1);
    if (N->listener_started) {
        omc__net_wake(N);
        pthread_join(N->listener, NULL);
        N->listener_started = 0;
    }
    if (N->job_ok) {
        pthread_mutex_lock(&N->job_mu);
        for (j = N->live; j; j = j->next_live) omc__store(&j->abort, (int)OMC_ERR_CLOSED);   /* pushes stop within a slice */
        pthread_cond_broadcast(&N->job_cv);
        pthread_mutex_unlock(&N->job_mu);
    }
    for (i = 0; i < N->workers_started; i++) pthread_join(N->workers[i], NULL);
    N->workers_started = 0;
    if (N->job_ok) {
        /* jobs no worker took: they end as closed, so their entries unpin */
        pthread_mutex_lock(&N->job_mu);
        while (N->queue) {
            j = N->queue;
            N->queue = j->next;
            j->result = OMC_ERR_CLOSED;
            j->next = N->done;
            N->done = j;
        }
        N->queue_tail = &N->queue;
        pthread_mutex_unlock(&N->job_mu);
        omc__net_complete(N, 0);
        for (j = N->live; j; ) {        /* receipts the listener was waiting for */
            omc__net_job* next = j->next_live;
            if (j->awaiting) {
                omc__dp_push p;
                omc__net_job_push(N, j, &p);
                omc__dp_ext_of(j->dp->vt)->tx_end(j->dp->user, &p, 0);
                j->awaiting = 0;
                j->result = OMC_ERR_CLOSED;
                omc__net_finish(N, j, 0);
            }
            j = next;
        }
    }
    while (N->held) {
        omc__net_held* h = N->held;
        N->held = h->next;
        omc__free(&N->conn->hooks, h);
    }
    N->held_count = 0;
    if (N->router_mon) {
        omc__net_drain_router_monitor(N);
        omc__zmq_socket_monitor(N->router, NULL, 0);
        omc__zmq_close(N->router_mon);
        N->router_mon = NULL;
    }
    if (N->zap) { omc__zmq_close(N->zap); N->zap = NULL; }
    if (N->router) { omc__zmq_close(N->router); N->router = NULL; }
    if (N->tcp_ok) omc__tcp_shutdown(&N->tcp);
}

static void omc__net_close(omc_conn* c) {
    omc__net* N = (omc__net*)c->impl;
    omc__net_peer* p;
    omc__net_chan* idle = NULL;
    omc__net_stop_sender(N);
    omc__owner_close(&N->own);         /* every push has ended: retiring frees every range */
    pthread_mutex_lock(&N->peer_mu);
    for (p = N->peers; p; p = p->next) {
        while (p->idle) { omc__net_chan* ch = p->idle; p->idle = ch->next; ch->next = idle; idle = ch; }
        p->nidle = 0;
    }
    pthread_mutex_unlock(&N->peer_mu);
    while (idle) { omc__net_chan* next = idle->next; omc__net_chan_close(N, idle); idle = next; }
}

/* Every blocking wait of the remote connector polls closed at least every OMC__NET_SLICE_MS,
   so close may wait for the calls before it stops the listener; the one wait that does not poll
   is the receiver's pause before it tries a data connection again: wake it. */
static void omc__net_wake_calls(omc_conn* c) {
    omc__net* N = (omc__net*)c->impl;
    if (N && N->tcp_ok) omc__tcp_plane_wake(&N->tcp);
}

/* Where the latest failure toward a sender happened: its name, host and port (and what it was),
   for the get's log line. */
static void omc__net_hint(omc_conn* c, omc_result r, char* out, size_t n) {
    omc__net* N = (omc__net*)c->impl;
    omc__net_peer *p, *last = NULL;
    (void)r;
    pthread_mutex_lock(&N->peer_mu);
    for (p = N->peers; p; p = p->next) if (p->last_fail && (!last || p->last_fail > last->last_fail)) last = p;
    if (last)
        snprintf(out, n, "sender %s at %s:%u%s%s", last->name, last->host, (unsigned)last->port, last->last_error_text[0] ? ": " : "",
                 last->last_error_text);
    pthread_mutex_unlock(&N->peer_mu);
}

/* destroy in a child after fork(): the listener and workers live only in the creator, and
   libzmq's context must not be touched here (its I/O threads are the creator's). Close this
   process's copies of our own descriptors (the data port, data connections, the wake-up
   eventfd) and unmap the pool; the creator keeps serving. No lock is taken: a thread of the
   creator may have held one at fork() time, and no other thread runs here. */
static void omc__net_forked(omc_conn* c) {
    omc__net* N = (omc__net*)c->impl;
    omc__net_peer* p;
    omc__net_chan* ch;
    omc__tcp_conn* k;
    if (N->tcp_ok) {
        for (k = N->tcp.conns; k; k = k->next) if (k->fd >= 0) close(k->fd);
        if (N->tcp.listen_fd >= 0) close(N->tcp.listen_fd);
    }
    for (p = N->peers; p; p = p->next)
        for (ch = p->idle; ch; ch = ch->next) {
            int fd = ch->dp && ch->dpc && ch->dp->vt->rx_fd ? ch->dp->vt->rx_fd(ch->dp->user, ch->dpc) : -1;
            if (fd >= 0) close(fd);
        }
    if (N->wake_fd >= 0) close(N->wake_fd);
    omc__pool_unmap_copy(N->pool);
}

/* Free what is left (the connector's last reference is gone, or create failed). */
OMC__PRIVATE void omc__net_free(omc__net* N, const omc_hooks* hooks) {
    uint32_t i;
    omc__owner_uninit(&N->own);
    while (N->peers) {
        omc__net_peer* p = N->peers;
        N->peers = p->next;
        omc__free(hooks, p);
    }
    omc__smap_free(&N->peers_by_name, hooks);
    omc__smap_free(&N->peers_by_ep, hooks);
    for (i = 0; i < N->nplanes; i++) if (N->planes[i].vt->detach) N->planes[i].vt->detach(N->planes[i].user);
    if (N->pool) omc_pool_destroy(N->pool);
    if (N->ctx) omc__zmq_ctx_term(N->ctx);
    if (N->wake_fd >= 0) close(N->wake_fd);
    if (N->job_ok) { pthread_mutex_destroy(&N->job_mu); pthread_cond_destroy(&N->job_cv); }
    if (N->peer_ok) pthread_mutex_destroy(&N->peer_mu);
    if (N->tcp_ok) omc__tcp_plane_uninit(&N->tcp);
    omc__free(hooks, N->workers);
    omc__free(hooks, N->allowed);
    omc__free(hooks, N->items);
    omc__free(hooks, N->who);
    omc__free(hooks, N);
}

static void omc__net_destroy(omc_conn* c) {
    omc__net* N = (omc__net*)c->impl;
    omc_hooks hooks = c->hooks;
    omc__net_free(N, &hooks);
}

static uint64_t omc__net_pending(omc_conn* c) {
    omc__net* N = (omc__net*)c->impl;
    return N->sender ? omc__owner_live(&N->own) : 0;
}

/* How long exists and list wait for one sender's answer (they are not given a deadline). */
#define OMC__NET_ASK_MS 2000

/* Whether any sender is registered (exists and list ask those, as a metadata-less get does). */
OMC__PRIVATE int omc__net_has_senders(omc__net* N) {
    omc__net_peer* p;
    int n = 0;
    pthread_mutex_lock(&N->peer_mu);
    for (p = N->peers; p && !n; p = p->next) n = p->registered;
    pthread_mutex_unlock(&N->peer_mu);
    return n;
}

/* One request, one reply, on a channel of its own (HELLO first if the channel is new). The reply
   points into buf. An ERROR reply comes back as its code; OMC_ERR_PROTOCOL from a sender means
   it does not know the request (an older version): OMC_ERR_UNAVAILABLE. */
OMC__PRIVATE omc_result omc__net_ask(omc__net* N, omc__net_peer* p, omc__wire* req, omc_time_ns deadline, omc__wire* rep, uint8_t* buf) {
    omc__net_chan* ch = NULL;
    omc_result r;
    int fresh, got = 0;
    r = omc__net_chan_checkout(N, p, &ch, &fresh);
    if (r != OMC_OK) return r;
    ch->xfer = omc__add(&N->next_xfer, 1u);
    ch->deadline = deadline;
    r = omc__net_chan_hello(N, ch, deadline);
    if (r == OMC_OK) r = omc__net_chan_send(N, ch, req);
    while (r == OMC_OK && !got) {
        if (omc__net_closed(N)) r = OMC_ERR_CLOSED;
        else if (omc__deadline_passed(deadline)) r = omc__net_silence(ch);
        else r = omc__net_chan_recv(N, ch, rep, buf, &got, omc__poll_ms(deadline, OMC__NET_SLICE_MS));
    }
    omc__net_chan_checkin(N, ch, r == OMC_OK);
    if (r == OMC_OK && rep->type == OMC__MSG_ERROR) {
        r = omc__net_remote_code(rep->code);
        if (r == OMC_ERR_PROTOCOL) r = OMC_ERR_UNAVAILABLE;
    }
    return r;
}

/* exists: our own entries (sender), then the registered senders (receiver) with a QUERY that is
   answered at once (wait 0). */
static omc_result omc__net_exists(omc_conn* c, const char* qkey, uint32_t qlen) {
    omc__net* N = (omc__net*)c->impl;
    omc_tcp_found found;
    omc_result r;
    if (N->sender && omc__owner_exists(&N->own, qkey, qlen) == OMC_OK) return OMC_OK;
    if (!N->receiver || !omc__net_has_senders(N)) return OMC_ERR_NOT_FOUND;
    r = omc__net_query(N, NULL, qkey, qlen, omc_deadline_after_ms(OMC__NET_ASK_MS), &found);
    return r == OMC_ERR_TIMEOUT ? OMC_ERR_NOT_FOUND : r;
}

/* list: our own keys, then every registered sender's, page by page (LIST / LIST_REPLY). */
static omc_result omc__net_list(omc_conn* c, omc__key_sink sink, void* user) {
    omc__net* N = (omc__net*)c->impl;
    omc__net_peer** peers = NULL;
    uint32_t np = 0, i;
    omc__net_peer* p;
    omc_result r = OMC_OK;
    if (N->sender) r = omc__owner_list(&N->own, sink, user);
    if (r != OMC_OK || !N->receiver) return r;
    pthread_mutex_lock(&N->peer_mu);      /* peers are never freed before the connector */
    for (p = N->peers; p; p = p->next) np += p->registered ? 1u : 0u;
    if (np) peers = (omc__net_peer**)omc__calloc(&c->hooks, sizeof(*peers) * np);
    np = 0;
    for (p = N->peers; p && peers; p = p->next) if (p->registered) peers[np++] = p;
    pthread_mutex_unlock(&N->peer_mu);
    for (i = 0; i < np && r == OMC_OK; i++) {
        uint32_t cursor = 0;
        do {
            uint8_t buf[OMC__WIRE_MAX];
            omc__wire q, m;
            uint32_t off = 0, kl;
            const char* k;
            memset(&q, 0, sizeof(q));
            q.type = OMC__MSG_LIST;
            q.cursor = cursor;
            r = omc__net_ask(N, peers[i], &q, omc_deadline_after_ms(OMC__NET_ASK_MS), &m, buf);
            if (r == OMC_OK && m.type != OMC__MSG_LIST_REPLY) r = OMC_ERR_PROTOCOL;
            if (r != OMC_OK) {
                omc__net_peer_result(N, peers[i], r, "list: %s", omc_result_str(r));
                break;
            }
            while (r == OMC_OK && omc__wire_next_key(m.keys, m.keys_len, &off, &k, &kl) == 1) r = sink(k, kl, user);
            cursor = m.cursor;
        } while (r == OMC_OK && cursor);
    }
    omc__free(&c->hooks, peers);
    return r;
}

static const omc__conn_vtable omc__net_vtable = {
    "remote", OMC_TRANSPORT_TCP, omc__net_put, omc__net_get, omc__net_alloc, omc__net_cleanup,
    omc__net_health, omc__net_sweep, omc__net_close, omc__net_destroy,
    omc__net_exists, omc__net_list, omc__net_pending, "omc_tcp_desc"
};

OMC__PRIVATE omc__net* omc__net_of(omc_conn* c) {
    return omc__conn_is(c, "remote") ? (omc__net*)c->impl : NULL;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - create                                       */
/* ============================================================================================== */

/* Validate the CURVE configuration and keep what we need (keys are copied, not referenced). */
OMC__PRIVATE omc_result omc__net_setup_curve(omc__net* N, const omc_tcp_curve* cv, const omc_hooks* hooks) {
    uint32_t i;
    int any = cv->secret_key || cv->public_key || cv->server_key || cv->allowed_clients;
    if (!any) return OMC_OK;
    if (!omc__zmq_has("curve")) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_NET, "CURVE keys given, but this libzmq was built without CURVE (libsodium)");
        return OMC_ERR_UNAVAILABLE;
    }
    if ((cv->secret_key && !omc__curve_key_ok(cv->secret_key)) || (cv->public_key && !omc__curve_key_ok(cv->public_key)) ||
        (cv->server_key && !omc__curve_key_ok(cv->server_key)) || (cv->public_key && !cv->secret_key) ||
        (cv->allowed_clients && !cv->secret_key)) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT,
                 "CURVE keys must be 40-character Z85 strings; public_key and allowed_clients need secret_key");
        return OMC_ERR_INVALID_ARG;
    }
    if (cv->secret_key) {
        memcpy(N->curve_secret, cv->secret_key, OMC_CURVE_KEY_LEN + 1);
        if (cv->public_key) memcpy(N->curve_public, cv->public_key, OMC_CURVE_KEY_LEN + 1);
        else if (omc__zmq_curve_public(N->curve_public, N->curve_secret) != 0) return OMC_ERR_INVALID_ARG;
        N->curve_server = N->sender;
    } else if (omc__zmq_curve_keypair(N->curve_public, N->curve_secret) != 0) return OMC_ERR_UNAVAILABLE;
    if (cv->server_key) memcpy(N->curve_server_key, cv->server_key, OMC_CURVE_KEY_LEN + 1);
    N->curve_client = 1;
    if (cv->allowed_clients) {
        N->allowed = (uint8_t(*)[32])omc__calloc(hooks, 32 * (size_t)(cv->allowed_count ? cv->allowed_count : 1));
        if (!N->allowed) return OMC_ERR_NO_MEMORY;
        for (i = 0; i < cv->allowed_count; i++) {
            if (!omc__curve_key_ok(cv->allowed_clients[i])) {
                OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "curve.allowed_clients[%u] is not a Z85 key", i);
                return OMC_ERR_INVALID_ARG;
            }
            omc__zmq_z85_decode(N->allowed[i], cv->allowed_clients[i]);
        }
        N->nallowed = cv->allowed_count;
    }
    return OMC_OK;
}

/* The sender's sockets: ROUTER (+ its monitor, + ZAP when clients are restricted), data port. */
/* Is a numeric bind address loopback ("*", 0.0.0.0 and :: are every interface: not loopback)? */
OMC__PRIVATE int omc__net_loopback(const char* numeric) {
    return strncmp(numeric, "127.", 4) == 0 || strcmp(numeric, "::1") == 0 || strcmp(numeric, "::ffff:127.0.0.1") == 0;
}

OMC__PRIVATE omc_result omc__net_start_sender(omc__net* N, const omc_tcp_desc* d, const omc_hooks* hooks) {
    char bind_host[OMC_TCP_HOST_MAX], ep[OMC_TCP_HOST_MAX + 32], port[8], last[OMC_TCP_HOST_MAX + 32];
    uint16_t data_port = 0;
    const char* want = d->host ? d->host : "127.0.0.1";
    size_t ln = sizeof(last);
    int zero = 0, one = 1, hs = OMC__NET_HANDSHAKE_MS;
    int64_t maxmsg = OMC__WIRE_MAX + 64;
    omc_result r;
    uint32_t i;
    const char* colon;
    if (strcmp(want, "auto") == 0) {
        const char* how = NULL;
        r = omc_detect_host(0, N->host, sizeof(N->host), &how);
        if (r != OMC_OK) return r;
        OMC__LOG(hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "host \"auto\" is %s (found by %s)", N->host, how);
    } else if (strlen(want) >= sizeof(N->host) || !want[0]) return OMC_ERR_INVALID_ARG;
    else snprintf(N->host, sizeof(N->host), "%s", want);
    if (omc__net_numeric_host(d->bind_host ? d->bind_host : N->host, bind_host, sizeof(bind_host)) != OMC_OK) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "cannot resolve host '%s'", d->bind_host ? d->bind_host : N->host);
        return OMC_ERR_INVALID_ARG;
    }
    N->router = omc__zmq_socket(N->ctx, ZMQ_ROUTER);
    if (!N->router) return OMC_ERR_SYSTEM;
    omc__zmq_setsockopt(N->router, ZMQ_LINGER, &zero, sizeof(zero));
    omc__zmq_setsockopt(N->router, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));    /* unroutable replies fail, not vanish */
    omc__zmq_setsockopt(N->router, ZMQ_HANDSHAKE_IVL, &hs, sizeof(hs));
    omc__zmq_setsockopt(N->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));    /* bigger frames cut the connection */
    if (strchr(bind_host, ':')) omc__zmq_setsockopt(N->router, ZMQ_IPV6, &one, sizeof(one));
    if (N->curve_server) {
        omc__zmq_setsockopt(N->router, ZMQ_CURVE_SERVER, &one, sizeof(one));
        omc__zmq_setsockopt(N->router, ZMQ_CURVE_SECRETKEY, N->curve_secret, OMC_CURVE_KEY_LEN);
    }
    if (N->curve_server) {
        /* a ZAP handler in our own context; libzmq asks it about every CURVE client (the
           allow-list, and the key each connection's messages then carry) */
        N->zap = omc__zmq_socket(N->ctx, ZMQ_REP);
        if (!N->zap || omc__zmq_bind(N->zap, "inproc://zeromq.zap.01") != 0) return OMC_ERR_SYSTEM;
        omc__zmq_setsockopt(N->router, ZMQ_ZAP_DOMAIN, "omniconn", 8);
    }
    if (omc__zmq_socket_monitor(N->router, "inproc://omc-listener-mon", OMC__NET_ROUTER_MON_EVENTS) == 0) {
        N->router_mon = omc__zmq_socket(N->ctx, ZMQ_PAIR);
        if (N->router_mon && omc__zmq_connect(N->router_mon, "inproc://omc-listener-mon") != 0) { omc__zmq_close(N->router_mon); N->router_mon = NULL; }
        if (!N->router_mon) omc__zmq_socket_monitor(N->router, NULL, 0);
    }
    if (d->port) snprintf(port, sizeof(port), "%u", (unsigned)d->port);
    else snprintf(port, sizeof(port), "*");
    omc__net_zmq_endpoint(ep, sizeof(ep), bind_host, port);
    if (omc__zmq_bind(N->router, ep) != 0) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_NET, "cannot bind the side channel to %s: %s", ep, omc__zmq_strerror(omc__zmq_errnum()));
        return OMC_ERR_CONNECTION;
    }
    if (omc__zmq_getsockopt(N->router, ZMQ_LAST_ENDPOINT, last, &ln) != 0 || !(colon = strrchr(last, ':'))) return OMC_ERR_SYSTEM;
    N->port = (uint16_t)atoi(colon + 1);
    r = omc__tcp_listen(&N->tcp, bind_host, d->data_port);
    if (r != OMC_OK) return r;
    N->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (N->wake_fd < 0) return OMC_ERR_SYSTEM;
    N->nworkers = d->workers ? d->workers : OMNICONN_TCP_WORKERS;
    N->workers = (pthread_t*)omc__calloc(hooks, sizeof(pthread_t) * N->nworkers);
    if (!N->workers) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < N->nworkers; i++) {
        if (pthread_create(&N->workers[i], NULL, omc__net_worker_main, N) != 0) return OMC_ERR_SYSTEM;
        N->workers_started++;
    }
    if (pthread_create(&N->listener, NULL, omc__net_listener_main, N) != 0) return OMC_ERR_SYSTEM;
    N->listener_started = 1;
    omc__tcp_plane_stats(&N->tcp, &data_port, NULL, NULL);
    OMC__LOG(hooks, OMC_LOG_INFO, OMC_LOGITEM_NET, "sender listening: side channel %s, TCP data port %u, advertised as %s:%u%s", last,
             (unsigned)data_port, N->host, (unsigned)N->port, N->curve_server ? ", CURVE on" : "");
    if (!N->curve_server && !omc__net_loopback(bind_host))
        OMC__LOG(hooks, OMC_LOG_WARN, OMC_LOGITEM_NET, "sender listening on %s (side channel %s, TCP data port %u) without CURVE: anyone "
                 "who can reach this address can ask for every payload; give it curve.secret_key and curve.allowed_clients "
                 "(omc_tcp_curve_keypair makes a pair), or bind it to 127.0.0.1", bind_host, last, (unsigned)data_port);
    return OMC_OK;
}

/* The remote connector with an optional extra data plane (a companion header's entry point). */
/* The sender's inline threshold: desc.disable_inline, desc.inline_threshold, then the
   environment ($OMNICONN_TCP_INLINE_THRESHOLD: bytes, 0 = off; a value that is not a number up
   to OMC_TCP_MAX_INLINE is ignored with a WARN), then OMNICONN_TCP_INLINE_THRESHOLD. Off under
   CURVE unless desc.inline_with_curve: the metadata travels outside the encrypted channel. */
OMC__PRIVATE omc_result omc__net_resolve_inline(omc__net* N, const omc_tcp_desc* d, const omc_hooks* hooks) {
    uint64_t t = d->inline_threshold;
    if (t > OMC_TCP_MAX_INLINE) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_tcp_desc.inline_threshold %llu exceeds the maximum %llu (OMC_TCP_MAX_INLINE)",
                 (unsigned long long)t, (unsigned long long)OMC_TCP_MAX_INLINE);
        return OMC_ERR_INVALID_ARG;
    }
    if (!t) {
        const char* env = getenv("OMNICONN_TCP_INLINE_THRESHOLD");
        t = omc__min((uint64_t)OMNICONN_TCP_INLINE_THRESHOLD, OMC_TCP_MAX_INLINE);     /* receivers refuse more */
        if (env && *env) {
            char* end = NULL;
            unsigned long long v = strtoull(env, &end, 10);
            if (end && *end == '\0' && env[0] >= '0' && env[0] <= '9' && v <= OMC_TCP_MAX_INLINE) t = (uint64_t)v;
            else OMC__LOG(hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "OMNICONN_TCP_INLINE_THRESHOLD='%s' ignored: give a byte count "
                          "from 0 (off) to %llu", env, (unsigned long long)OMC_TCP_MAX_INLINE);
        }
    }
    if (d->disable_inline || (N->curve_server && !d->inline_with_curve)) t = 0;
    N->inline_max = t;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__net_create(const omc_tcp_desc* desc, omc_transport transport, const omc__dataplane* extra, omc_conn** out) {
    omc_tcp_desc d;
    omc_hooks hooks;
    omc_pool_desc pd;
    omc__net* N;
    omc_result r;
    uint32_t i;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.hooks);
    if ((int)d.role < 0 || d.role > OMC_ROLE_DUAL || (extra && (!extra->vt || extra->vt->kind == omc__tcp_plane_vt.kind))) return OMC_ERR_INVALID_ARG;   /* one plane per kind */
    r = omc__zmq_require(&hooks);               /* libzmq is opened here, by the first remote connector */
    if (r != OMC_OK) return r;
    N = (omc__net*)omc__calloc(&hooks, sizeof(omc__net));
    if (!N) return OMC_ERR_NO_MEMORY;
    N->wake_fd = -1;
    N->sender = d.role != OMC_ROLE_RECEIVER;
    N->receiver = d.role != OMC_ROLE_SENDER;
    N->vt = omc__net_vtable;
    N->vt.transport = transport;
    if (transport != OMC_TRANSPORT_TCP) N->vt.desc_name = NULL;     /* a companion's transport: its own desc, not ours */
    N->max_idle = d.max_idle_channels ? d.max_idle_channels : 8;
    N->side_pull = d.pull_on_side_channel != 0;
    N->next_xfer = omc__random_u64() >> 1;
    N->queue_tail = &N->queue;
    N->peers_tail = &N->peers;
    r = omc__conn_create(&hooks, &N->vt, d.role, &N->conn);
    if (r == OMC_OK) {
        N->conn->wake = omc__net_wake_calls;
        N->conn->forked = omc__net_forked;
        N->conn->hint = omc__net_hint;
        N->conn->get_batch = omc__net_get_batch;
    }
    if (r != OMC_OK) { omc__free(&hooks, N); return r; }
    N->conn->impl = N;
    N->peer_ok = pthread_mutex_init(&N->peer_mu, NULL) == 0;
    N->tcp_ok = omc__tcp_plane_init(&N->tcp) == OMC_OK;
    N->tcp.closing = &N->conn->closed;
    N->job_ok = pthread_mutex_init(&N->job_mu, NULL) == 0;
    if (N->job_ok && pthread_cond_init(&N->job_cv, NULL) != 0) { pthread_mutex_destroy(&N->job_mu); N->job_ok = 0; }
    r = N->peer_ok && N->tcp_ok && N->job_ok ? OMC_OK : OMC_ERR_SYSTEM;
    if (r == OMC_OK) r = omc__net_setup_curve(N, &d.curve, &hooks);
    if (r == OMC_OK && N->sender) r = omc__net_resolve_inline(N, &d, &hooks);
    if (r == OMC_OK) {
        memset(&pd, 0, sizeof(pd));
        pd.size = d.pool_size ? d.pool_size : OMNICONN_TCP_POOL_SIZE;
        pd.alignment = d.alignment;
        pd.prefault = d.prefault;
        pd.lock_memory = d.lock_memory;
        pd.thread_safe = 1;
        pd.hooks = hooks;
        r = omc_pool_create(&pd, &N->pool);
    }
    if (r == OMC_OK) r = omc__owner_init(&N->own, N->conn, N->pool, d.default_ttl_ms, "pushes in flight keep it until they end");
    if (r == OMC_OK) {
        N->planes[0].vt = &omc__tcp_plane_vt;
        N->planes[0].user = &N->tcp;
        N->nplanes = 1;
        if (extra) N->planes[N->nplanes++] = *extra;
        for (i = 0; i < N->nplanes && r == OMC_OK; i++) {
            N->caps |= N->planes[i].vt->capability;
            if (N->planes[i].vt->attach) r = N->planes[i].vt->attach(N->planes[i].user, N->conn, N->pool, &hooks);
            if (r != OMC_OK) N->nplanes = i;    /* detach only what attached */
        }
    }
    if (r == OMC_OK) {
        N->ctx = omc__zmq_ctx_new();
        if (!N->ctx) r = OMC_ERR_SYSTEM;
    }
    if (N->sender) N->caps |= OMC_NET_CAP_REQUESTS;     /* its data port serves requests (set before the listener reads caps) */
    if (r == OMC_OK && N->sender) r = omc__net_start_sender(N, &d, &hooks);
    if (r != OMC_OK) {
        omc_conn* shell = N->conn;                  /* never handed out: free it without destroy */
        omc__net_stop_sender(N);
        omc__net_free(N, &hooks);
        omc__conn_discard(shell, &hooks);
        return r;
    }
    *out = N->conn;
    return OMC_OK;
}

OMNICONN_API omc_result omc_tcp_create(const omc_tcp_desc* desc, omc_conn** out) {
    return omc__net_create(desc, OMC_TRANSPORT_TCP, NULL, out);
}


/* ============================================================================================== */
/* [SECTION] Implementation: the remote connector - public extras                                */
/* ============================================================================================== */

static omc_result omc__tcp_endpoint_in(omc_conn* c, char* host, size_t host_size, uint16_t* port, uint16_t* data_port) {
    omc__net* N = omc__net_of(c);
    if (!N) return OMC_ERR_INVALID_ARG;
    if (!N->sender) return OMC_ERR_WRONG_ROLE;
    if (host) {
        if (strlen(N->host) >= host_size) return OMC_ERR_TOO_LARGE;
        memcpy(host, N->host, strlen(N->host) + 1);
    }
    if (port) *port = N->port;
    if (data_port) omc__tcp_plane_stats(&N->tcp, data_port, NULL, NULL);
    return OMC_OK;
}

static omc_result omc__tcp_add_sender_key_in(omc_conn* c, const char* name, const char* host, uint16_t port, const char* server_key) {
    omc__net* N = omc__net_of(c);
    omc__net_peer* p;
    omc_result r;
    size_t nl;
    if (!N) return OMC_ERR_INVALID_ARG;
    if (!name || !host || !host[0] || strlen(host) >= OMC_TCP_HOST_MAX || port == 0 || (nl = strlen(name)) == 0 || nl >= OMC_TCP_NAME_MAX ||
        (server_key && !omc__curve_key_ok(server_key))) {
        OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET,
                 "receiver: omc_tcp_add_sender('%s', %s:%u) refused: %s", name ? name : "(null)", host ? host : "(null)", (unsigned)port,
                 !name || !name[0] || strlen(name) >= OMC_TCP_NAME_MAX ? "the name must be 1..63 bytes"
                 : !host || !host[0] || strlen(host) >= OMC_TCP_HOST_MAX ? "the host must be 1..255 bytes"
                 : port == 0 ? "the port must be 1..65535" : "the server key is not a 40-character Z85 CURVE public key");
        return OMC_ERR_INVALID_ARG;
    }
    if (server_key && !N->curve_client) {
        /* CURVE was not configured at create: make a client keypair now */
        pthread_mutex_lock(&N->peer_mu);
        if (!N->curve_client && omc__zmq_curve_keypair(N->curve_public, N->curve_secret) == 0) N->curve_client = 1;
        pthread_mutex_unlock(&N->peer_mu);
        if (!N->curve_client) return OMC_ERR_UNAVAILABLE;
    }
    if (!N->receiver) {
        OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET,
                 "omc_tcp_add_sender('%s'): this connector is a sender only; create it with role OMC_ROLE_RECEIVER or OMC_ROLE_DUAL", name);
        return OMC_ERR_WRONG_ROLE;
    }
    pthread_mutex_lock(&N->peer_mu);
    if ((p = (omc__net_peer*)omc__smap_get(&N->peers_by_name, name, (uint32_t)nl)) != NULL) {
        r = OMC_ERR_EXISTS;
        OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET,
                 "receiver: omc_tcp_add_sender('%s', %s:%u): the name '%s' is taken already (by %s:%u); pick another name, "
                 "or omc_tcp_remove_sender('%s') first", name, host, (unsigned)port, name, p->host, (unsigned)p->port, name);
    } else {
        p = omc__net_peer_locked(N, host, port, 1, &r);
        if (p && p->registered) {
            r = OMC_ERR_EXISTS;
            OMC__LOG(&N->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_NET,
                     "receiver: omc_tcp_add_sender('%s', %s:%u): that endpoint is registered already, as '%s'; use that name, "
                     "or omc_tcp_remove_sender('%s') first", name, host, (unsigned)port, p->name, p->name);
        }
        else if (p) {
            r = omc__smap_put(&N->peers_by_name, &N->conn->hooks, name, (uint32_t)nl, p);
            if (r == OMC_OK) {
                p->registered = 1;
                snprintf(p->name, sizeof(p->name), "%s", name);
                if (server_key) memcpy(p->server_key, server_key, OMC_CURVE_KEY_LEN + 1);
            }
        }
    }
    pthread_mutex_unlock(&N->peer_mu);
    return r;
}

OMNICONN_API omc_result omc_tcp_add_sender(omc_conn* c, const char* name, const char* host, uint16_t port) {
    return omc_tcp_add_sender_key(c, name, host, port, NULL);
}

static omc_result omc__tcp_remove_sender_in(omc_conn* c, const char* name) {
    omc__net* N = omc__net_of(c);
    omc__net_peer* p;
    omc__net_chan* idle = NULL;
    char ep[OMC_TCP_HOST_MAX + 8];
    if (!N || !name) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&N->peer_mu);
    p = (omc__net_peer*)omc__smap_del(&N->peers_by_name, &N->conn->hooks, name, (uint32_t)strlen(name));
    if (p) {
        /* the peer stays known (its statistics, gets still talking to it); its cache goes */
        p->registered = 0;
        snprintf(ep, sizeof(ep), "%s:%u", p->host, (unsigned)p->port);
        omc__strcut(p->name, sizeof(p->name), ep);
        idle = p->idle;
        p->idle = NULL;
        p->nidle = 0;
    }
    pthread_mutex_unlock(&N->peer_mu);
    while (idle) { omc__net_chan* next = idle->next; omc__net_chan_close(N, idle); idle = next; }
    return p ? OMC_OK : OMC_ERR_NOT_FOUND;
}

static omc_result omc__tcp_get_from_in(omc_conn* c, const char* sender, const char* from, const char* to, const char* key,
                                        omc_time_ns deadline, omc_buffer* out) {
    omc__net* N = omc__net_of(c);
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!N || !sender) return OMC_ERR_INVALID_ARG;
    r = omc__conn_enter(c, OMC_ROLE_RECEIVER, from, to, key, qkey, &qlen);
    if (r != OMC_OK) { omc__conn_count_refusal(c, r); return r; }
    r = omc__net_get_any(N, sender, qkey, qlen, deadline, 0, out);
    if (r != OMC_OK) {
        omc__conn_count_error(c, r, "get", qkey, qlen);
        memset(out, 0, sizeof(*out));
        return r;
    }
    omc__conn_count_get(c, out->size);
    return OMC_OK;
}

static omc_result omc__tcp_query_in(omc_conn* c, const char* sender, const char* from, const char* to, const char* key,
                                    omc_time_ns deadline, omc_tcp_found* out) {
    omc__net* N = omc__net_of(c);
    char qkey[OMC_KEY_MAX];
    uint32_t qlen = 0;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!N) return OMC_ERR_INVALID_ARG;
    r = omc__conn_enter(c, OMC_ROLE_RECEIVER, from, to, key, qkey, &qlen);
    if (r != OMC_OK) return r;
    return omc__net_query(N, sender, qkey, qlen, deadline, out);
}

static omc_result omc__tcp_health_in(omc_conn* c, omc_tcp_health_info* h) {
    omc__net* N = omc__net_of(c);
    if (!h) return OMC_ERR_INVALID_ARG;
    memset(h, 0, sizeof(*h));
    if (!N) return OMC_ERR_INVALID_ARG;
    if (N->sender) {
        snprintf(h->host, sizeof(h->host), "%s", N->host);
        h->port = N->port;
        omc__tcp_plane_stats(&N->tcp, &h->data_port, NULL, NULL);
    }
    h->curve = N->curve_server;
    h->handshake_failures = omc__load(&N->handshake_failures);
    h->auth_failures = omc__load(&N->auth_failures);
    omc__tcp_plane_stats(&N->tcp, NULL, &h->protocol_errors, &h->data_connections);
    h->protocol_errors += omc__load(&N->protocol_errors);
    h->pushes = omc__load(&N->pushes);
    h->pushes_failed = omc__load(&N->pushes_failed);
    h->pushes_in_flight = omc__load(&N->pushes_in_flight);
    h->pending_queries = omc__load(&N->held_count);
    pthread_mutex_lock(&N->peer_mu);
    h->peers = N->npeers;
    h->inline_threshold = N->inline_max;
    pthread_mutex_unlock(&N->peer_mu);
    return OMC_OK;
}

static uint32_t omc__tcp_peer_count_in(omc_conn* c) {
    omc__net* N = omc__net_of(c);
    uint32_t n;
    if (!N) return 0;
    pthread_mutex_lock(&N->peer_mu);
    n = N->npeers;
    pthread_mutex_unlock(&N->peer_mu);
    return n;
}

static omc_result omc__tcp_peer_health_in(omc_conn* c, uint32_t index, omc_tcp_peer_info* out) {
    omc__net* N = omc__net_of(c);
    omc__net_peer* p;
    uint32_t i = 0;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!N) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&N->peer_mu);
    for (p = N->peers; p && i < index; p = p->next) i++;
    if (p) {
        memcpy(out->name, p->name, sizeof(out->name));
        memcpy(out->host, p->host, sizeof(out->host));
        out->port = p->port;
        out->registered = p->registered;
        out->incarnation = p->incarnation;
        out->requests = p->requests;
        out->failures = p->failures;
        out->timeouts = p->timeouts;
        out->auth_failures = p->auth_failures;
        out->restarts = p->restarts;
        out->bytes = p->bytes;
        out->idle_channels = p->nidle;
        out->last_ok_ns = p->last_ok;
        out->last_error = p->last_error;
        memcpy(out->last_error_text, p->last_error_text, sizeof(out->last_error_text));
    }
    pthread_mutex_unlock(&N->peer_mu);
    return p ? OMC_OK : OMC_ERR_NOT_FOUND;
}

/* The public calls: each holds the connector while inside, as omc_conn_* calls do, so a close or
   destroy from another thread wakes a blocked one (OMC_ERR_CLOSED) and waits for it to leave; a
   NULL connector gets each call's own answer. */

OMNICONN_API omc_result omc_tcp_endpoint(omc_conn* c, char* host, size_t host_size, uint16_t* port, uint16_t* data_port) {
    omc_result r;
    if (!c) return omc__tcp_endpoint_in(c, host, host_size, port, data_port);
    OMC__CONN_HELD(c, r, omc__tcp_endpoint_in(c, host, host_size, port, data_port));
    return r;
}

OMNICONN_API omc_result omc_tcp_add_sender_key(omc_conn* c, const char* name, const char* host, uint16_t port, const char* server_key) {
    omc_result r;
    if (!c) return omc__tcp_add_sender_key_in(c, name, host, port, server_key);
    OMC__CONN_HELD(c, r, omc__tcp_add_sender_key_in(c, name, host, port, server_key));
    return r;
}

OMNICONN_API omc_result omc_tcp_remove_sender(omc_conn* c, const char* name) {
    omc_result r;
    if (!c) return omc__tcp_remove_sender_in(c, name);
    OMC__CONN_HELD(c, r, omc__tcp_remove_sender_in(c, name));
    return r;
}

OMNICONN_API omc_result omc_tcp_get_from(omc_conn* c, const char* sender, const char* from, const char* to, const char* key,
                                         omc_time_ns deadline, omc_buffer* out) {
    omc_result r;
    if (!c) return omc__tcp_get_from_in(c, sender, from, to, key, deadline, out);
    OMC__CONN_HELD(c, r, omc__tcp_get_from_in(c, sender, from, to, key, deadline, out));
    return r;
}

OMNICONN_API omc_result omc_tcp_query(omc_conn* c, const char* sender, const char* from, const char* to, const char* key,
                                      omc_time_ns deadline, omc_tcp_found* out) {
    omc_result r;
    if (!c) return omc__tcp_query_in(c, sender, from, to, key, deadline, out);
    OMC__CONN_HELD(c, r, omc__tcp_query_in(c, sender, from, to, key, deadline, out));
    return r;
}

OMNICONN_API omc_result omc_tcp_health(omc_conn* c, omc_tcp_health_info* h) {
    omc_result r;
    if (!c) return omc__tcp_health_in(c, h);
    OMC__CONN_HELD(c, r, omc__tcp_health_in(c, h));
    return r;
}

OMNICONN_API uint32_t omc_tcp_peer_count(omc_conn* c) {
    uint32_t n;
    if (!c || omc__conn_hold(c) != OMC_OK) return 0;
    n = omc__tcp_peer_count_in(c);
    omc__conn_leave_call(c);
    return n;
}

OMNICONN_API omc_result omc_tcp_peer_health(omc_conn* c, uint32_t index, omc_tcp_peer_info* out) {
    omc_result r;
    if (!c) return omc__tcp_peer_health_in(c, index, out);
    OMC__CONN_HELD(c, r, omc__tcp_peer_health_in(c, index, out));
    return r;
}
#endif

#endif /* OMNICONN_IMPLEMENTATION, Part B */
/* ########################################################################################## */
/* ##  END OF PART B                                                                         ## */
/* ########################################################################################## */


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
