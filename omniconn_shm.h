/* omniconn_shm.h - v0.1.0 - the shared-memory connector - SPDX-License-Identifier: MIT OR Unlicense

    The embedded default for pipelines whose stages run on one host: a producer stage puts a
    payload, a consumer stage in another process gets a zero-copy view of it. Each sender owns ONE
    shared segment, created once and reused for every payload, managed by omniconn's allocator; a
    put is a copy into memory that is already mapped and faulted in, a get is a few loads and one
    compare-and-swap, a release is one more. It replaces vLLM-Omni's SharedMemoryConnector
    (the Python original: a new /dev/shm segment plus a lock file per request, copied out and
    unlinked by the reader, leaked when the reader never comes).

    Do this:
        #define OMNICONN_IMPLEMENTATION
    before you include omniconn.h and this file in *one* C or C++ file (see omniconn.h):

        #define OMNICONN_IMPLEMENTATION
        #include "omniconn.h"
        #include "omniconn_shm.h"

    Build: cc -std=c99 app.c -lpthread -ldl    (an SHM program never loads libzmq)

    CONTENTS (search for a title; the code follows "[SECTION]" banners in the same order)
      QUICK START
      STEP BY STEP: HOW IT WORKS
      CONFIGURATION
      OVERRIDES
      ERRORS & LOGGING
      THREAD SAFETY
      DEPENDENCIES & LINKING
      LIMITS
      WIRE FORMATS
      NON-GOALS
      RECENT REVISIONS
      then the code, by [SECTION]: Shared-memory connector: declarations
        SHM: segment layout (the wire format of a segment, see the manual)
        SHM: system helpers (futex, processes, names) | SHM: connector state
        SHM: the key index (written by the owner, read lock-free by everyone)
        SHM: claims (one compare-and-swap per transition, by any process)
        SHM: the sender half - creating the segment
        SHM: the sender half - entries, reclaim, TTL, dead readers
        SHM: the sender half - put, alloc, cleanup | SHM: the receiver half - mapping peers
        SHM: the receiver half - views | SHM: the receiver half - get with metadata
        SHM: the receiver half - metadata-less get (wait for a key)
        SHM: connector glue (cleanup, health, sweep, close, destroy, create)
        SHM: the dead-owner sweep
      and the licence

================================================================================================
QUICK START
================================================================================================

    Producer process (stage "thinker"):

        omc_shm_desc d = {0};                  // zero means default: 256 MiB pool in /dev/shm
        d.channel = "mypipe";                  // the pipeline's name, shared by both sides
        d.role = OMC_ROLE_SENDER;
        omc_conn* conn;
        if (omc_shm_create(&d, &conn) != OMC_OK) ...   // OMC_ERR_SHM_FULL: /dev/shm too small

        omc_payload p = {0};
        p.data = hidden_states; p.size = nbytes;       // copied into the pool once
        omc_meta meta;
        omc_conn_put(conn, "thinker", "talker", "req-42", &p, &meta);
        send_to_next_stage(meta.data, meta.size);      // your queue; or skip it (see get)
        omc_meta_free(&meta);

    Consumer process (stage "talker"):

        omc_shm_desc d = {0};
        d.channel = "mypipe";
        d.role = OMC_ROLE_RECEIVER;                    // a receiver owns no segment
        omc_conn* conn;
        omc_shm_create(&d, &conn);

        omc_buffer b;
        omc_conn_get(conn, "thinker", "talker", "req-42", meta_bytes, meta_len,
                     omc_deadline_after_ms(1000), &b); // or meta NULL: wait for the key
        use(b.data, b.size);                           // zero copy, inside the sender's segment
        omc_buffer_release(&b);                        // no system call

    Zero copy on the sending side too: omc_conn_alloc() a buffer from the connector's pool, build
    the payload in it (omc_frame_build for named tensors), put it with payload.buffer set. Like
    a view, a buffer from omc_conn_alloc keeps the pool and its mapping alive until it is put
    or released, even after the connector is destroyed.
    examples/shm_pipeline.c is a complete two-process program.

================================================================================================
STEP BY STEP: HOW IT WORKS
================================================================================================

    1. The segment. A sender (or dual) connector creates one file in shm_dir (default /dev/shm)
       named omc-<uid>-<channel>-<pid>-<16 hex random>, with O_CREAT|O_EXCL|O_NOFOLLOW and mode
       0600: nobody can guess the name beforehand, squat it, or plant a link there. The file has
       its full size; the tmpfs holds what is reserved in it with posix_fallocate: the control
       area and OMNICONN_SHM_RESERVE_MIN of data at create, then more in OMNICONN_SHM_GROW_STEP
       steps when a put's range needs it - always before the first byte is written through the
       mapping, so a full tmpfs fails with OMC_ERR_SHM_FULL (at create, or at the put that does
       not fit, which gives back whatever it took) and never with SIGBUS. A put whose range
       reaches into new growth writes that part with pwrite(), which takes each new page and
       fills it in one pass (ENOSPC, not SIGBUS, when the tmpfs is full). With nothing in use
       for OMNICONN_SHM_IDLE_MS, omc_conn_sweep punches the growth out again (reserve_all = 1:
       the whole file reserved at create instead). Reserved
       pages are mapped at once (no put takes a page fault for them; no_prefault opts out).
       It is laid out as: header page | entry table | key index | dirty bitmap | data
       area (see WIRE FORMATS). The data area is an omc_pool (OMC_MEMORY_EXTERNAL): the
       allocator's bookkeeping lives in the owner's heap, where no other process can corrupt it. Right after creating the file, before anything
       else, the owner takes an open-file-description lock (F_OFD_SETLK) on byte 0 and holds it
       for its whole life: the kernel drops it when the process ends, however it ends, so
       anyone in any pid namespace, with or without /proc, can tell whether the owner still
       lives by trying to take that lock. The header also records owner pid, start time, uid and
       a random incarnation (for logs and for kernels without OFD locks).

    2. put. The payload is copied into a pool range (or a buffer from omc_conn_alloc is adopted),
       then an entry is filled in - key, range, one claim slot per allowed reader - published in
       the shared key index, and put_seq is bumped. The metadata names the segment, the entry and
       its generation, the range, and the segment's inode. A put whose caller passes no meta_out
       (its consumer gets by key) builds no metadata at all: no envelope, no inline copy, no CRC.
       What receivers released is taken back after the put is published (before it, from
       64 KiB on, so that the range just released - still in the cache - is reused).

    3. get with metadata. The receiver maps the sender's segment once (cached per segment) after
       checking it with fstat and a pread of the header before touching a byte: a regular file,
       ours (uid), its size equal to what its header describes, the id and inode the metadata
       says. With the mapping it takes a reader id: a random byte in 1..2^24-1 of the segment
       that nobody else holds a lock on, locked for as long as the mapping lives (when random
       picks keep failing, a walk over the held ranges finds a free byte; when every byte is
       held - another process of our uid squats them - a get with metadata fails with
       OMC_ERR_BUSY, a get by key passes that segment by, and a WARN names it: nothing is read
       under an id nobody reclaims). It checks the
       metadata against the segment (entry in range, range inside the data area, generation
       current) and claims one slot with a compare-and-swap: AVAILABLE -> HELD by our reader
       id. The view points straight into the mapping.

    4. release. One compare-and-swap HELD -> DONE and one bit set in the segment's dirty bitmap
       (with its summary bit). The owner frees ranges whose slots are all DONE on its next put /
       alloc / health / sweep (one shared load of the summary word tells it whether anything came
       back, the bitmap tells it which entries, so the cost does not grow with the number of
       payloads in flight); an owner blocked in omc_conn_alloc is woken with a futex (the one
       case where a release writes release_seq). No lock is shared between processes; no queue
       a crash could corrupt.

    5. Inline. A payload smaller than inline_threshold (64 KiB) also travels inside the metadata
       body. A get with that metadata claims its read with one CAS straight to DONE and returns
       a private heap copy: it never touches the data area, and its view pins nothing in the
       sender's pool however long it is held. (The sender keeps a pool copy all the same, so a
       metadata-less get, which has no metadata, can still find the payload.)

    6. Waiting (metadata-less get). The receiver looks the key up in the shared index of every
       segment of its channel (a directory scan finds them: their names carry uid and channel).
       Not there: it spins on put_seq for spin_ns (20 us by default: the small-payload handoff
       then costs no system call; OMC_SHM_SPIN_FOREVER never sleeps, for a consumer on a core of
       its own), then sleeps with FUTEX_WAIT_BITSET on put_seq in its key's wake-up class (one of
       8, from the key's hash) until a put of that class wakes it (the owner calls FUTEX_WAKE
       only when a getter of the class sleeps, and puts of other keys' classes leave it asleep)
       or the deadline - never longer than 50 ms per sleep, spinning or asleep, so segments that
       join the channel meanwhile are found.

    7. Fan-out. payload.readers = N (<= 16) gives the entry N claim slots: N gets succeed, the
       N+1-th is OMC_ERR_NOT_FOUND, and the range is freed after the N-th release.

    8. Lifetime.
       - cleanup(key) withdraws the reads that are left (AVAILABLE -> DONE); views already held
         stay valid until released. A receiver may clean up a key of its channel too.
       - TTL (default 300 s, per put or per connector) withdraws unconsumed reads the same way:
         it never frees a range a reader still holds.
       - close() withdraws everything, marks the segment CLOSED and unlinks it. Views held by
         other processes stay valid (their mapping keeps the pages) and the memory goes back to
         the system with the last unmap; receivers unmap unlinked segments when unused.
       - A reader killed while holding views: its HELD slots carry its reader id; the owner's
         periodic pass (every 100 ms from its own calls, or omc_conn_sweep) finds that id's lock
         byte free (the kernel released it with the process) and finishes the release for it.
         A held lock, or any doubt, means alive: a live reader's view is never reclaimed.
       - An owner that exits or is killed: its lock goes with it. omc_shm_sweep_dead (run by
         every omc_shm_create, callable any time) removes a segment only when it can take the
         owner's lock byte itself (nobody holds it) AND no put in it can still be read.
       - Lifetime after the producer exits. A payload stays readable after its producer exits
         without closing (returns from main, calls exit, or is killed) until it is consumed or
         its TTL passes: the data and the key index are in the segment, and every entry records
         the end of its TTL. A sweep (any process's omc_shm_create, or omc_shm_sweep_dead)
         leaves such a segment alone, consumers still find it by its key or metadata, and the
         first sweep after its last put is consumed or expired removes it. A producer that
         wants to know its puts were read calls omc_conn_wait_consumed(conn, deadline) before
         it exits; omc_conn_close/destroy, by contrast, withdraw what is left (see close()).

    9. Bad input. Every field of metadata and every byte of a segment is untrusted (any process
       of our uid can write it): names are checked (omc-<our uid>-..., no '/'), files are opened
       with O_NOFOLLOW and checked with fstat before mapping, the geometry is taken from a pread
       copy of the header and validated, then kept privately; every index, offset and size is
       checked against it; every probe of the shared index is bounded. A segment that another
       process truncated is detected by fstat (at map time, and again at most every 1 ms while in
       use) and never touched again: OMC_ERR_SHM_CHANGED.

   10. Trusting the directory. /dev/shm is writable by every uid, so anyone can create names
       there that look like ours. The rules: a name is looked at with fstatat (no symlink
       followed) before anything opens it; a file that is not a regular file owned by our uid
       is never opened, read or removed; every refusal (such a file, or a file whose header is
       not a valid segment) is remembered by name and inode, so later scans skip it without a
       system call, and the log says it once (one WARN per scan that finds new ones, with a
       count and an example). A file that is still being created by a live owner (empty, or
       its header not yet READY) is not a problem: it is skipped silently and looked at again
       on the next scan, so a consumer started before its producer logs nothing. For a pipeline
       that wants no strangers at all, give it a shm_dir only its uid can write
       (mkdir -m 0700 /dev/shm/mypipe) on both sides.

   11. First contact costs the same for any pool size. A receiver maps a sender's segment
       without MAP_POPULATE: the pages exist already (tmpfs, reserved by the owner), and a get
       touches only the entry, index and payload pages it reads (a minor fault each, about a
       microsecond). Measured: the first get from a 1 GiB pool takes 0.03 ms with metadata and
       0.1 ms by key (it was 200 ms when the whole mapping was populated).

================================================================================================
CONFIGURATION
================================================================================================

    macro                          default       where        meaning
    -----------------------------  ------------  -----------  --------------------------------------
    OMNICONN_NO_SHM                undefined     everywhere   compile the API only: create returns
                                                              OMC_ERR_UNAVAILABLE
    OMNICONN_SHM_DIR               "/dev/shm"    impl file    default shm_dir
    OMNICONN_SHM_POOL_SIZE         256 MiB       impl file    default pool_size
    OMNICONN_SHM_INLINE_THRESHOLD  64 KiB        impl file    default inline_threshold
    OMNICONN_SHM_MAX_ENTRIES       4096          impl file    default max_entries
    OMNICONN_SHM_SPIN_NS           20000         impl file    default spin_ns
    $OMNICONN_SHM_SPIN_US          unset         environment  default spin_ns at run time, in us:
                                                              N, 0 = never spin, -1 or "forever" =
                                                              never sleep (OMC_SHM_SPIN_FOREVER)
    OMNICONN_SHM_STREAM_MIN        8 MiB         impl file    puts from this size copy into the pool
                                                              with streaming stores (x86-64)
    OMNICONN_SHM_RESERVE_MIN       2 MiB         impl file    data a growing pool reserves at create
    OMNICONN_SHM_GROW_STEP         4 MiB         impl file    a growing pool reserves in these steps
    OMNICONN_SHM_IDLE_MS           2000          impl file    nothing in use this long: omc_conn_sweep
                                                              gives a growing pool's growth back
    OMNICONN_SHM_RECHECK_NS        1000000       impl file    how often a mapped segment's size is
                                                              re-checked with fstat while in use

    omc_shm_desc (zero means default everywhere):

    field             default        meaning
    ----------------  -------------  ---------------------------------------------------------------
    role              DUAL           SENDER: put only; RECEIVER: get only, no segment; DUAL: both
    channel           "default"      1..32 of [A-Za-z0-9_.]; metadata-less gets see only this channel
    shm_dir           "/dev/shm"     any tmpfs directory, the same on both sides
    pool_size         256 MiB        the data area: reserved (RAM in tmpfs) as puts need it, up to this
    reserve_all       0              1: reserve all of it at create (a full tmpfs fails there)
    alignment         4096           of every buffer; a power of two from 64 to 4096
    inline_threshold  64 KiB         payloads below it travel in the metadata; max 1 MiB
    disable_inline    0              1: never inline
    max_entries       4096           puts in flight at once (each: 512 B of segment, ~330 B of heap)
    default_ttl_ms    300000         lifetime of an unconsumed put; < 0 = none
    no_prefault       0              1: do not fault the pool's pages in at create (see below)
    spin_ns           20000          spin before sleeping in a waiting get; < 0 = never spin;
                                     OMC_SHM_SPIN_FOREVER = never sleep; 0 = $OMNICONN_SHM_SPIN_US
                                     if set, else OMNICONN_SHM_SPIN_NS
    hooks             process default  allocator and logger (see omniconn.h)

    Spinning. A getter that spins sees a put within a fraction of a microsecond; one that sleeps
    is woken through the kernel (a few microseconds, more on a busy host). The default, 20 us,
    keeps a shared host's cores free. OMC_SHM_SPIN_FOREVER (or OMNICONN_SHM_SPIN_US=-1) is for
    a consumer pinned to a core of its own: it keeps that core busy while it waits.

    Prefault. What is reserved in the tmpfs is reserved either way (posix_fallocate: RAM).
    Prefaulting also maps those pages at once (a growing pool: when it grows): page tables of
    about 2 MiB per GiB of pool, and create time for reserve_all (a 1 GiB pool, measured: 0.7-0.9 s
    to create prefaulted, 0.3 s without). With no_prefault each page instead takes a minor fault
    on its first put (about 1 us per 4 KiB: a first pass through the pool at a fraction of memcpy
    speed).

================================================================================================
OVERRIDES (HOOKS)
================================================================================================

    desc.hooks works as everywhere in omniconn (omniconn.h, OVERRIDES): alloc_fn/free_fn for the
    connector's own bookkeeping and for the private copies inline gets hand out, log_fn for
    every event. The pool memory itself is the segment: no hook allocates it.

================================================================================================
ERRORS & LOGGING
================================================================================================

    Everything is logged through the hooks with OMC_LOGITEM_SHM (or META_MALFORMED, CONN_*).
    OMC_ERR_SHM_FULL        create: the tmpfs has no room for the segment (the log says how
                            much was asked, and how to make room).
    OMC_ERR_SHM_CHANGED     a segment was truncated (seen by fstat, or a SIGBUS caught inside an
                            owner's call: see LIMITS), replaced (unlinked and recreated: other
                            inode or id), reached through a symlink, or is owned by another uid.
    OMC_ERR_PEER_DEAD       the segment named by the metadata is gone and so is its owner.
    OMC_ERR_NOT_FOUND       consumed, cleaned up, expired, or the owner closed.
    OMC_ERR_STALE           the key was put again since this metadata was made.
    OMC_ERR_MALFORMED       metadata that does not fit the segment (outside the data area, no
                            such entry, a name that is not a segment of ours, ...).
    OMC_ERR_POOL_FULL       no free range (put), or all max_entries are in flight.
    OMC_ERR_INVALID_ARG     a desc field out of range, more than 16 readers, a foreign buffer.
    OMC_ERR_BUSY            every reader id of the sender's segment is locked by other
                            processes (a process of our uid squats them; see step 3).
    Every refusal is logged with the object, the side and the fix: the desc field and what it
    accepts ("omc_shm_desc.pool_size 1 bytes is out of range: at least the alignment (4096
    bytes), ..."), the key and side of a get whose payload exceeds the caller's buffer
    (OMC_ERR_TOO_LARGE) or of a put whose key still has unread reads (OMC_ERR_EXISTS).
    Two producers of one channel that put the same key deliver it twice (each segment has its
    own index; no process owns the channel): the consumer that finds a key in two segments logs
    one WARN per pair of segments naming both producer pids and segments. Give each producer
    its own channel or its own keys.

================================================================================================
THREAD SAFETY (and process safety)
================================================================================================

    - A connector is thread-safe (as every omc_conn); views may be released from any thread.
    - Between processes nothing is locked. Every shared word has one writer rule:
        header, entry fields, key index   the owner (under its own mutex)
        claim slots                       anyone, only by compare-and-swap on the whole word
        dirty bitmap                      anyone sets bits (atomic OR); the owner takes words
                                          (atomic exchange with 0); the bits are hints only
        put_seq                           compare-and-swap only: the owner bumps its sequence
                                          (bits 0..23) and clears its put's class flag in one
                                          step; a getter sets its class flag (bits 24..31)
        last_entry, last_offset           the owner (plain stores before the put_seq bump):
                                          hints, every reader checks what they point at
        release_seq                       atomic increments by the receiver that wakes a
                                          sleeping owner (owner_sleeping was 1); futex word
        owner_sleeping                    set to 1 by an owner thread about to sleep;
                                          exchanged to 0 by the receiver that wakes it
      Publishing follows release/acquire: the owner writes the payload and the entry, then the
      slots (release), then the entry's generation (release), then the index bucket (release);
      a reader's successful claim CAS (acquire) therefore sees the payload. A release CAS
      (release) orders the reader's last read of the payload before the owner can see DONE and
      reuse the range. Entry fields are read under a seqlock (generation read before and after,
      with an acquire fence) and confirmed by the claim CAS, which fails if the generation in the
      slot changed. Across processes these are the same instructions on the same physical memory
      as across threads (x86-64 and AArch64 are cache coherent), so the argument is the same.
      Sleeping uses FUTEX_WAIT_BITSET without FUTEX_PRIVATE_FLAG, keyed by the shared page. A
      getter belongs to its key's wake-up class (one of 8). It sets its class's flag in put_seq
      with a compare-and-swap that succeeds only while the sequence is still the one it read
      before its lookup, then sleeps on exactly the word it wrote. A put bumps the sequence and
      clears its class's flag in one compare-and-swap, and calls FUTEX_WAKE_BITSET for that class
      only if the flag was set. Any change of the word after the getter's look makes the kernel
      refuse the sleep, so no wake-up is lost; a put pays for a system call only when a getter of
      its class sleeps, and puts of other classes neither wake it nor pay. close() wakes every
      class. The owner waiting for pool space sleeps on release_seq: it sets owner_sleeping to 1,
      then looks at the dirty summary words; a release sets its bits, then looks at
      owner_sleeping (all sequentially consistent), so either the owner sees the bits or the
      receiver sees the flag, exchanges it to 0, bumps release_seq and wakes it.
    - A process killed at any instruction leaves every slot in one of its four states; the owner
      (or the sweep) can always finish from there.

================================================================================================
DEPENDENCIES & LINKING
================================================================================================

    Linux 3.15 or later (tmpfs, posix_fallocate, futex, OFD locks for liveness; /proc is not
    needed),
    pthreads, and omniconn.h of the same version (checked at compile time). Nothing to link
    beyond what omniconn.h needs.

================================================================================================
LIMITS
================================================================================================

    - One host, one uid: receivers accept only segments owned by their own effective uid.
    - Processes that share a shm_dir need not share a pid namespace or /proc (two containers
      in one pod): liveness is a lock on the segment file, the same object everywhere.
    - Fan-out <= 16 readers per put; <= max_entries puts in flight; keys <= 255 bytes.
    - A connector belongs to the process that created it: after fork(), create new ones in the
      child (claims record the creator's reader ids; the parent's mappings and locks are not the
      child's to use). In the child the inherited connector touches nothing shared: destroy
      (omc_conn_destroy sees the foreign process and drops the handle there) and the child's
      exit never unlink the segment, retire the parent's entries or wake its getters; the
      child's copy of the mapping stays until it exits, so views it inherited stay readable;
      releasing an inherited view or buffer forgets it there without touching the segment;
      every other call (put, get, alloc, cleanup, exists, list, sweep,
      wait_consumed) returns OMC_ERR_CLOSED with a WARN that names both processes, and health
      says closed.
    - A reader id (one of 2^24 - 1, chosen at random) taken by a new reader before the owner
      noticed the old one died keeps the old reader's held ranges until the new one unmaps the
      segment too. A process that inherits a connector's descriptors through fork() keeps its
      locks held (and so its views and segment alive) until it exits or closes them.
    - On kernels without OFD locks (before 3.15) owners fall back to pid + start time from
      /proc (pid namespaces then must be shared) and views of dead readers are never reclaimed
      (the owner's close frees them).
    - Truncation by a process of our own uid (other users cannot: mode 0600). Owners survive
      it: every owner-side call (put, alloc, cleanup, health, sweep, wait_consumed, close) runs
      under a guard, and the first owner in a process installs a SIGBUS handler that acts only
      on a fault at an address inside the segment of the guarded call running on the faulting
      thread: that call returns OMC_ERR_SHM_CHANGED and the segment is never touched again.
      Every other SIGBUS goes to the handler installed before ours, or to the default action.
      An application that installs its own SIGBUS handler later replaces ours (owners then die
      of a truncation again). Receivers are not guarded: a truncation after the last size check
      (at most 1 ms old) - or while you hold a view - can still make a touch of the missing
      pages fault in a receiver. Measured: a busy owner truncated while it puts survived 6 of
      6 trials (it died in 5-6 of 6 without the guard).
    - Transparent huge pages are not used (tmpfs default); pool pages are 4 KiB.

================================================================================================
WIRE FORMATS (native byte order inside a segment: it never leaves the host; the metadata body
              is little-endian like every omniconn envelope)
================================================================================================

    Segment file name: omc-<uid>-<channel>-<owner pid>-<segment id, 16 lowercase hex digits>

    Segment header (page 0, 4096 bytes):
        0   u32  magic 0x53434D4F ("OMCS")
        4   u16  version (5)
        6   u16  header size (4096)
        8   u64  total size of the file in bytes
        16  u64  entry table offset (4096)
        24  u32  entry count
        28  u32  entry size (512)
        32  u64  key index offset (= 4096 + count * 512)
        40  u32  index buckets (power of two >= 2 * count, >= 16)
        44  u32  claim slots per entry (16)
        48  u64  data area offset (dirty bitmap end rounded up to 4096)
        56  u64  data area size
        64  u64  segment id (random, never 0; also the end of the name)
        72  u64  owner incarnation (omc_incarnation())
        80  u64  owner start time (/proc/<pid>/stat field 22, clock ticks after boot; 0 unknown)
        88  u32  owner pid
        92  u32  owner uid
        96  u32  state: 0 creating, 1 ready, 2 closed (atomic)
        100 u32  channel length
        104 u8[32] channel
        136 u64  buffer alignment
        144 u64  dirty bitmap offset (index end rounded up to 64): first ceil(words / 64)
                 summary words (bit w: bitmap word w may be non-zero), then words =
                 ceil(count / 64) bitmap words (bit i: a receiver gave something of entry i
                 back). Hints for the owner, nothing more.
        152 ...  reserved, zero
        256 u32  put_seq, futex word (atomic, compare-and-swap only; see THREAD SAFETY): bits
                 0..23 a sequence, +1 (mod 2^24) on every change of the key index; bit 24 + c:
                 a getter of wake-up class c may be asleep, c = the key hash (below) >> 61
        260 u32  reserved, zero
        264 u64  puts (statistics, relaxed)
        272 u32  last_entry: entry index + 1 of the latest put (a hint: a getter that saw
                 put_seq move looks at that entry before the index; checked like any entry)
        276 u32  reserved, zero
        280 u64  last_offset: the latest put's payload offset in the data area (a hint for
                 prefetching; never used to read)
        288 ...  reserved, zero
        320 u32  release_seq: +1 by a receiver that finds owner_sleeping set (it wakes the
                 owner); futex word. Releases themselves show in the dirty bitmap only.
        324 u32  owner_sleeping: 1 if an owner thread may be asleep on release_seq
        328 ...  reserved, zero
        384 u64  claims, 392 u64 releases (statistics, relaxed; written by receivers only)
        400 ...  reserved, zero (to 4096)
      The geometry (offsets 8..63) is fully determined by entry count and data size; a
      receiver recomputes it and refuses any header that disagrees or any file of another size.

    Entry (512 bytes at entry table offset + index * 512):
        0   u32  generation: 0 = free or being written, else the put's generation (seqlock)
        4   u32  flags: bit 0 inline (bytes also in the metadata), bit 1 frame
        8   u64  payload offset in the data area
        16  u64  payload size
        24  u32  readers (claim slots in use)
        28  u32  key length
        32  u64  hash of the key: h = 0x9E3779B97F4A7C15 ^ length; for each key word w (below):
                 h = (h ^ w) * 0xBF58476D1CE4E5B9; h ^= h >> 31
        40  i64  put time, CLOCK_MONOTONIC ns
        48  i64  end of its TTL, CLOCK_MONOTONIC ns, 0 = none
        56  u64  claim slot 0
        64  u8[256] qualified key as 64-bit words; the last word it occupies is zero padded,
                the words after it are unspecified (compare key length first)
        320 u64[15] claim slots 1..15
        440 u64[9] reserved
      A single-reader get reads bytes 0..63 (fields and its slot) and the key's first line.
    Claim slot (u64): bits 63..32 generation, 31..30 state (0 empty, 1 available, 2 held,
        3 done), 29..0 reader id of the holder (held only): 1..2^24-1, or 0x3FFFFFFF for the
        owner's own receiver half.
    Locks (fcntl F_OFD_SETLK, advisory, one byte each, on the segment file): byte 0 write-
        locked by the owner for its life; byte r write-locked by the reader with id r while it
        has the segment mapped. Free = that process is gone.
    Key index bucket (u32): 0 empty, 0xFFFFFFFF deleted, else entry index + 1; linear probing
        from hash & (buckets - 1).

    Metadata body (transport OMC_TRANSPORT_SHM, after the envelope of omniconn.h):
        0   u64  segment id
        8   u64  segment inode (st_ino)
        16  u32  owner pid
        20  u32  entry index
        24  u32  entry generation (never 0)
        28  u32  reserved, zero
        32  u64  payload offset in the data area
        40  u64  payload size (= the envelope's payload size)
        48  u8   segment name length n (1..95)
        49  u8[7] reserved, zero
        56  n bytes: segment file name (no directory, no terminator)
        56+n     inline only (envelope flag bit 0): the payload bytes
      Body length is exactly 56 + n, plus the payload size when inline.

================================================================================================
NON-GOALS (what this connector does not do)
================================================================================================

    - No cross-host transfer (that is TCP or RDMA), no cross-user sharing, no Windows/macOS.
    - No serialisation: bytes or omc frames.
    - No background thread: reclamation happens inside your calls (put, alloc, health, sweep).
      A sender that goes idle keeps unconsumed puts until its next call; call omc_conn_sweep
      from a timer if that matters to you.
    - No protection against a malicious process of the same uid (it can also ptrace you);
      the checks make mistakes and crashes harmless, not attacks impossible.

================================================================================================
RECENT REVISIONS
================================================================================================

    0.1.0 (2026-11-22)  first release.
    unreleased          segment layout version 3 (put_seq carries wake-up classes: a put wakes
                        only getters of its key's class); spin_ns = OMC_SHM_SPIN_FOREVER and
                        $OMNICONN_SHM_SPIN_US; puts without meta_out build no metadata;
                        no_prefault. Pools that grow (the default; reserve_all = 1 for the
                        whole reservation at create): OMNICONN_SHM_RESERVE_MIN,
                        OMNICONN_SHM_GROW_STEP, OMNICONN_SHM_IDLE_MS; a payload that does not
                        fit the tmpfs is OMC_ERR_SHM_FULL at its put. Layout unchanged.
                        A reader finds a free reader id by walking the held lock ranges, and a
                        segment whose every id is held is OMC_ERR_BUSY with a WARN. A
                        connector used in a fork()ed child touches nothing shared there.
                        Buffers from omc_conn_alloc keep the connector mapped until released.
                        Segment layout version 4: claim slot 0 at entry offset 56, the key at
                        64, slots 1..15 at 320; the claims/releases statistics at header
                        offset 384 (a line only receivers write).
                        Segment layout version 5: a release writes release_seq only to wake a
                        sleeping owner (the owner learns of releases from the dirty summary
                        words); last_entry and last_offset (header offsets 272, 280, in
                        put_seq's line) let a getter that saw put_seq move prefetch the latest
                        put's entry and payload and look there before the index. A segment of
                        another layout version is refused with a WARN naming both versions.
                        A growing pool's new pages are filled by the put's pwrite (one pass
                        instead of fallocate, populate and copy); a failed growth gives back
                        what it took; a payload that fits when its grow step does not is
                        reserved to its last page.

LICENSE: see the end of this file (MIT or public domain, your choice).
*/
#ifndef OMNICONN_SHM_H_INCLUDED
#define OMNICONN_SHM_H_INCLUDED

#include "omniconn.h"

#if !defined(OMC__COMPANION_INTERFACE) || OMC__COMPANION_INTERFACE != 0x0001
    #error "omniconn_shm.h 0.1 uses the companion interface of omniconn.h 0.1: use the omniconn.h of the same 0.1.x release."
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================== */
/* [SECTION] Shared-memory connector: declarations                                               */
/* ============================================================================================== */

#define OMC_SHM_MAX_READERS 16                      /* fan-out limit of one put */
#define OMC_SHM_MAX_INLINE ((uint64_t)1 << 20)      /* largest inline_threshold */
#define OMC_SHM_CHANNEL_MAX 32                      /* bytes of a channel name */
#define OMC_SHM_PATH_MAX 512                        /* directory + segment name */
#define OMC_SHM_SPIN_FOREVER INT64_MAX              /* spin_ns: a waiting get never sleeps */

typedef struct omc_shm_desc {
    omc_role role;              /* DEFAULT = dual: owns a segment (put) and reads others' (get).
                                   A RECEIVER creates no segment at all. */
    const char* channel;        /* the pipeline's name, 1..32 of [A-Za-z0-9_.]; NULL = "default".
                                   Part of the segment's file name; metadata-less gets look only
                                   at segments of their own channel. */
    const char* shm_dir;        /* NULL = "/dev/shm"; any tmpfs directory (senders and receivers
                                   must use the same one) */
    uint64_t pool_size;         /* data area bytes, reserved as puts need them (all at create with
                                   reserve_all); 0 = 256 MiB */
    uint64_t alignment;         /* of every buffer, a power of two 64..4096; 0 = 4096 */
    uint64_t inline_threshold;  /* payloads smaller than this travel inside the metadata;
                                   0 = 64 KiB; at most OMC_SHM_MAX_INLINE */
    int disable_inline;         /* 1: no payload travels inline */
    uint32_t max_entries;       /* puts in flight (not yet fully released) at once; 0 = 4096.
                                   Each costs 512 bytes of segment and ~330 bytes of heap. */
    int64_t default_ttl_ms;     /* 0 = OMNICONN_DEFAULT_TTL_MS, < 0 = no TTL */
    int no_prefault;            /* 1: do not map the pool's pages at create (a quicker create of
                                   a large pool; each page then faults on its first put) */
    int reserve_all;            /* 1: reserve the whole pool in the tmpfs at create; 0: reserve
                                   OMNICONN_SHM_RESERVE_MIN, grow in OMNICONN_SHM_GROW_STEP steps
                                   as puts need room (up to pool_size), give it back after
                                   OMNICONN_SHM_IDLE_MS with nothing in use */
    int64_t spin_ns;            /* a waiting get spins this long before it sleeps on a futex;
                                   0 = $OMNICONN_SHM_SPIN_US if set, else 20 us; < 0 = never
                                   spin; OMC_SHM_SPIN_FOREVER = never sleep (a consumer pinned
                                   to a core of its own: the lowest latency, a core kept busy) */
    omc_hooks hooks;
} omc_shm_desc;

/* Create a shared-memory connector. A sender (or dual) connector first sweeps the directory for
   segments of dead owners (omc_shm_sweep_dead), then creates its own segment and reserves its
   control area and OMNICONN_SHM_RESERVE_MIN of data (all of it with reserve_all): a /dev/shm too
   full for that fails here with OMC_ERR_SHM_FULL, a payload that later does not fit fails its put
   with OMC_ERR_SHM_FULL; never a SIGBUS.
   Returns OMC_ERR_INVALID_ARG (bad desc, see log), OMC_ERR_SHM_FULL, OMC_ERR_UNAVAILABLE (no such
   directory, or compiled with OMNICONN_NO_SHM), OMC_ERR_SYSTEM, OMC_ERR_NO_MEMORY.
   Thread safety: the connector is thread-safe like every omc_conn. */
OMNICONN_API omc_result omc_shm_create(const omc_shm_desc* desc, omc_conn** out);

/* Remove the segments in desc->shm_dir (NULL desc = defaults) whose owner is gone and in which
   nothing can still be read: only regular files named omc-<our uid>-..., owned by our uid (looked
   at with fstatat before opening; never through a symbolic link). An owner is alive while it holds
   its lock on the segment (any pid namespace, no /proc needed); a segment of an exited owner stays
   while one of its puts has a read left and its TTL has not passed. removed (optional) receives
   the count. Safe to call at any time from any process. */
OMNICONN_API omc_result omc_shm_sweep_dead(const omc_shm_desc* desc, uint32_t* removed);

/* The full path of a sender connector's segment ("/dev/shm/omc-0-default-4242-1f2e..."), for
   logs and operations. OMC_ERR_TYPE for a connector of another transport, OMC_ERR_WRONG_ROLE for
   a receiver, OMC_ERR_TOO_LARGE if out_size is too small. */
OMNICONN_API omc_result omc_shm_segment_path(omc_conn* conn, char* out, size_t out_size);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* -------------------------------- stop here if you only need the API ------------------------- */
#endif /* OMNICONN_SHM_H_INCLUDED */

/* ============================================================================================== */
/*                                                                                                */
/*                                     IMPLEMENTATION                                             */
/*                                                                                                */
/* ============================================================================================== */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_SHM_IMPL_INCLUDED)
#define OMNICONN_SHM_IMPL_INCLUDED

#if OMC__HAS_SHM

#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
/* The futex operations used here, a stable kernel ABI (include/uapi/linux/futex.h); defined
   rather than included so that a C library without the kernel's UAPI headers (musl-gcc) builds. */
#ifndef FUTEX_WAIT
    #define FUTEX_WAIT 0
#endif
#ifndef FUTEX_WAKE
    #define FUTEX_WAKE 1
#endif
#ifndef FUTEX_WAIT_BITSET
    #define FUTEX_WAIT_BITSET 9
#endif
#ifndef FUTEX_WAKE_BITSET
    #define FUTEX_WAKE_BITSET 10
#endif
#if defined(__x86_64__) && defined(__SSE2__)
    #include <emmintrin.h>              /* streaming stores for large puts */
    #define OMC__SHM_HAS_STREAM 1
#else
    #define OMC__SHM_HAS_STREAM 0
#endif

#ifndef OMNICONN_SHM_DIR
    #define OMNICONN_SHM_DIR "/dev/shm"
#endif
#ifndef OMNICONN_SHM_POOL_SIZE
    #define OMNICONN_SHM_POOL_SIZE ((uint64_t)256 << 20)
#endif
#ifndef OMNICONN_SHM_INLINE_THRESHOLD
    #define OMNICONN_SHM_INLINE_THRESHOLD ((uint64_t)64 << 10)
#endif
#ifndef OMNICONN_SHM_MAX_ENTRIES
    #define OMNICONN_SHM_MAX_ENTRIES 4096u
#endif
#ifndef OMNICONN_SHM_SPIN_NS
    #define OMNICONN_SHM_SPIN_NS 20000
#endif
#ifndef OMNICONN_SHM_STREAM_MIN           /* puts from this size copy with streaming stores */
    #define OMNICONN_SHM_STREAM_MIN ((uint64_t)8 << 20)
#endif
#ifndef OMNICONN_SHM_RECHECK_NS
    #define OMNICONN_SHM_RECHECK_NS 1000000     /* re-fstat a segment at most every 1 ms */
#endif
#ifndef OMNICONN_SHM_RESERVE_MIN          /* data area reserved at create (growing pools) */
    #define OMNICONN_SHM_RESERVE_MIN ((uint64_t)2 << 20)
#endif
#ifndef OMNICONN_SHM_GROW_STEP            /* a growing pool reserves in steps of this */
    #define OMNICONN_SHM_GROW_STEP ((uint64_t)4 << 20)
#endif
#ifndef OMNICONN_SHM_IDLE_MS              /* a pool with nothing in use this long gives back what it grew */
    #define OMNICONN_SHM_IDLE_MS 2000
#endif

/* ============================================================================================== */
/* [SECTION] SHM: segment layout (the wire format of a segment, see the manual)                  */
/* ============================================================================================== */

#define OMC__SHM_MAGIC          0x53434D4Fu     /* "OMCS" */
#define OMC__SHM_VERSION        5
#define OMC__SHM_HEADER_SIZE    4096u
#define OMC__SHM_ENTRY_SIZE     512u
#define OMC__SHM_KEY_WORDS      32              /* 256 key bytes, zero padded */
#define OMC__SHM_NAME_MAX       96              /* segment file name, terminator included */
#define OMC__SHM_MAX_ENTRIES    (1u << 20)
#define OMC__SHM_BUCKET_EMPTY   0u
#define OMC__SHM_BUCKET_TOMB    0xFFFFFFFFu
#define OMC__SHM_BODY_FIXED     56u             /* metadata body before the segment name */
/* meta_out->size of a put whose caller wants no metadata: the companion interface's
   OMC__META_UNWANTED (spelled out here: the core's implementation may come after this file) */
#define OMC__SHM_META_UNWANTED  0xFFFFFFFFu

enum { OMC__SHM_CREATING = 0, OMC__SHM_READY = 1, OMC__SHM_CLOSED = 2 };

/* The first page of every segment. Written once by the owner before state becomes READY,
   except the words from offset 256 on, which are shared atomics. Native byte order. */
typedef struct omc__shm_header {
    uint32_t magic;             /*   0 */
    uint16_t version;           /*   4 */
    uint16_t header_size;       /*   6 */
    uint64_t total_size;        /*   8  bytes of the whole file */
    uint64_t entries_offset;    /*  16 */
    uint32_t entry_count;       /*  24 */
    uint32_t entry_size;        /*  28 */
    uint64_t index_offset;      /*  32 */
    uint32_t index_buckets;     /*  40  a power of two >= 2 * entry_count */
    uint32_t max_readers;       /*  44  slots per entry (OMC_SHM_MAX_READERS) */
    uint64_t data_offset;       /*  48 */
    uint64_t data_size;         /*  56 */
    uint64_t segment_id;        /*  64  random, also the last part of the name */
    uint64_t incarnation;       /*  72  omc_incarnation() of the owner */
    uint64_t owner_start_time;  /*  80  /proc/<pid>/stat field 22 of the owner */
    uint32_t owner_pid;         /*  88 */
    uint32_t owner_uid;         /*  92 */
    uint32_t state;             /*  96  CREATING, READY, CLOSED (atomic) */
    uint32_t channel_len;       /* 100 */
    char     channel[32];       /* 104 */
    uint64_t alignment;         /* 136  of every buffer in the data area */
    uint64_t dirty_offset;      /* 144  release bitmap: one bit per entry */
    uint8_t  reserved0[104];    /* 152 */
    /* one cache line written by the owner (receivers spin on put_seq) ... */
    uint32_t put_seq;           /* 256  futex: bits 0..23 bumped on every change of the key index,
                                        bits 24..31 "a getter of this wake-up class may sleep" */
    uint32_t reserved_260;      /* 260 */
    uint64_t puts;              /* 264  statistics: puts published */
    uint32_t last_entry;        /* 272  entry index + 1 of the latest put: where a getter that
                                        just saw put_seq move looks first (a hint, checked) */
    uint32_t reserved_276;      /* 276 */
    uint64_t last_offset;       /* 280  the latest put's payload offset in the data area (a hint:
                                        prefetched with its entry, never trusted) */
    uint8_t  pad1[32];          /* 288 */
    /* ... and one written by receivers, so the two sides never fight over a line */
    uint32_t release_seq;       /* 320  futex: bumped by a receiver that wakes a sleeping owner */
    uint32_t owner_sleeping;    /* 324  1: an owner thread may be asleep on release_seq */
    uint8_t  pad2[56];          /* 328 */
    uint64_t claims;            /* 384  statistics: reads claimed (a line of their own: counting */
    uint64_t releases;          /* 392  must not bounce release_seq's line between processes) */
    uint8_t  reserved1[4096 - 400];
} omc__shm_header;

/* One put in flight: 512 bytes in the entry table. Fields are written by the owner while the
   entry is free (gen 0) and published by storing gen last (a seqlock: readers re-check gen). */
typedef struct omc__shm_entry {
    uint32_t gen;               /*   0  0 = free or being written, else the put's generation */
    uint32_t flags;             /*   4  bit 0 inline (bytes also in the metadata), bit 1 frame */
    uint64_t offset;            /*   8  in the data area */
    uint64_t size;              /*  16  payload bytes */
    uint32_t readers;           /*  24  fan-out (slots in use) */
    uint32_t key_len;           /*  28 */
    uint64_t key_hash;          /*  32  hash of the key words (omc__shm_key_make) */
    int64_t  put_time_ns;       /*  40  CLOCK_MONOTONIC (diagnostics) */
    int64_t  expires_ns;        /*  48  CLOCK_MONOTONIC end of the TTL, 0 = none: lets a sweep
                                        tell whether an exited owner's put may still be read */
    uint64_t slot0;             /*  56  the first claim slot, in the line a reader reads anyway */
    uint64_t key[OMC__SHM_KEY_WORDS];       /*  64  qualified key, its last word zero padded */
    uint64_t slots_more[OMC_SHM_MAX_READERS - 1];   /* 320  claim slots 1..15 (fan-out) */
    uint64_t reserved1[9];      /* 440 */
} omc__shm_entry;

/* Claim slot i of an entry (0 .. OMC_SHM_MAX_READERS - 1). Slot 0 shares the first cache line
   with the fields a reader checks and the key follows in the next: a single-reader handoff
   moves two lines of the entry between the processes. */
OMC__PRIVATE uint64_t* omc__shm_slot(omc__shm_entry* e, uint32_t i) { return i == 0 ? &e->slot0 : &e->slots_more[i - 1]; }

/* compile-time layout checks: the manual documents these offsets */
typedef char omc__shm_header_size_check[sizeof(omc__shm_header) == OMC__SHM_HEADER_SIZE ? 1 : -1];
typedef char omc__shm_entry_size_check[sizeof(omc__shm_entry) == OMC__SHM_ENTRY_SIZE ? 1 : -1];
typedef char omc__shm_seq_offset_check[offsetof(omc__shm_header, put_seq) == 256 ? 1 : -1];
typedef char omc__shm_rel_offset_check[offsetof(omc__shm_header, release_seq) == 320 ? 1 : -1];
typedef char omc__shm_dirty_offset_check[offsetof(omc__shm_header, dirty_offset) == 144 ? 1 : -1];
typedef char omc__shm_slot0_offset_check[offsetof(omc__shm_entry, slot0) == 56 ? 1 : -1];
typedef char omc__shm_key_offset_check[offsetof(omc__shm_entry, key) == 64 ? 1 : -1];
typedef char omc__shm_slots_offset_check[offsetof(omc__shm_entry, slots_more) == 320 ? 1 : -1];
typedef char omc__shm_claims_offset_check[offsetof(omc__shm_header, claims) == 384 ? 1 : -1];
typedef char omc__shm_last_offset_check[offsetof(omc__shm_header, last_entry) == 272 ? 1 : -1];
typedef char omc__shm_last_payload_check[offsetof(omc__shm_header, last_offset) == 280 ? 1 : -1];

#define OMC__SHM_ENTRY_INLINE 0x1u
#define OMC__SHM_ENTRY_FRAME  0x2u

/* A claim slot (64 bits): generation << 32 | state << 30 | holder's reader id.
   Every transition is one compare-and-swap, so a process killed at any instruction leaves each
   slot in a state the owner can finish: AVAILABLE (a read remains), HELD by a reader id (a reader
   holds a view: the owner reclaims it when that id's lock byte is free), DONE. The generation in every slot makes
   a claim with a stale generation fail even after the entry was reused. */
enum { OMC__SLOT_EMPTY = 0, OMC__SLOT_AVAILABLE = 1, OMC__SLOT_HELD = 2, OMC__SLOT_DONE = 3 };

OMC__PRIVATE uint64_t omc__slot_make(uint32_t gen, uint32_t state, uint32_t pid) {
    return ((uint64_t)gen << 32) | ((uint64_t)state << 30) | (uint64_t)(pid & 0x3FFFFFFFu);
}
OMC__PRIVATE uint32_t omc__slot_gen(uint64_t w) { return (uint32_t)(w >> 32); }
OMC__PRIVATE uint32_t omc__slot_state(uint64_t w) { return (uint32_t)(w >> 30) & 3u; }
OMC__PRIVATE uint32_t omc__slot_pid(uint64_t w) { return (uint32_t)(w & 0x3FFFFFFFu); }

/* The geometry of a segment, computed by the owner and re-derived and compared by every receiver.
   Receivers keep this private, validated copy and never re-read sizes from shared memory. */
typedef struct omc__shm_layout {
    uint64_t total, entries_off, index_off, dirty_off, data_off, data_size, alignment;
    uint32_t entry_count, buckets, dirty_words, summary_words;
} omc__shm_layout;

#define OMC__SHM_PAGE 4096u

OMC__PRIVATE void omc__shm_layout_make(uint32_t entry_count, uint64_t data_size, uint64_t alignment, omc__shm_layout* L) {
    uint32_t buckets = 16;
    while (buckets < 2 * entry_count) buckets *= 2;
    memset(L, 0, sizeof(*L));
    L->entry_count = entry_count;
    L->buckets = buckets;
    L->entries_off = OMC__SHM_HEADER_SIZE;
    L->index_off = L->entries_off + (uint64_t)entry_count * OMC__SHM_ENTRY_SIZE;
    L->dirty_off = OMC__ALIGN_UP(L->index_off + (uint64_t)buckets * 4u, 64);
    L->dirty_words = (entry_count + 63) / 64;
    L->summary_words = (L->dirty_words + 63) / 64;
    L->data_off = OMC__ALIGN_UP(L->dirty_off + (uint64_t)(L->summary_words + L->dirty_words) * 8u, OMC__SHM_PAGE);
    L->data_size = data_size;
    L->alignment = alignment;
    L->total = L->data_off + data_size;
}

/* Does a header (copied out of a file of file_size bytes) describe a segment we can use?
   Fills L with the geometry. OMC_ERR_VERSION for another layout version, OMC_ERR_SHM_CHANGED
   for anything that does not add up. */
OMC__PRIVATE omc_result omc__shm_layout_check(const omc__shm_header* h, uint64_t file_size, omc__shm_layout* L) {
    omc__shm_layout want;
    if (h->magic != OMC__SHM_MAGIC) return OMC_ERR_SHM_CHANGED;
    if (h->version != OMC__SHM_VERSION) return OMC_ERR_VERSION;
    if (h->header_size != OMC__SHM_HEADER_SIZE || h->entry_size != OMC__SHM_ENTRY_SIZE ||
        h->max_readers != OMC_SHM_MAX_READERS || h->entry_count == 0 || h->entry_count > OMC__SHM_MAX_ENTRIES ||
        h->data_size == 0 || h->data_size > file_size || h->alignment < 64 || h->alignment > OMC__SHM_PAGE ||
        (h->alignment & (h->alignment - 1)) || h->channel_len > OMC_SHM_CHANNEL_MAX)
        return OMC_ERR_SHM_CHANGED;
    omc__shm_layout_make(h->entry_count, h->data_size, h->alignment, &want);
    if (h->total_size != want.total || file_size != want.total || h->entries_offset != want.entries_off ||
        h->index_offset != want.index_off || h->index_buckets != want.buckets || h->dirty_offset != want.dirty_off ||
        h->data_offset != want.data_off)
        return OMC_ERR_SHM_CHANGED;
    *L = want;
    return OMC_OK;
}

/* Little-endian stores for the metadata body: one store on a little-endian host (the core's
   byte-by-byte helpers elsewhere; this is on the put path of every payload). */
OMC__PRIVATE void omc__shm_le64(uint8_t* p, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 8);
#else
    omc__put_u64(p, v);
#endif
}
OMC__PRIVATE void omc__shm_le32(uint8_t* p, uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 4);
#else
    omc__put_u32(p, v);
#endif
}

OMC__PRIVATE omc__shm_entry* omc__shm_entry_at(uint8_t* base, const omc__shm_layout* L, uint32_t i) {
    return (omc__shm_entry*)(base + L->entries_off + (uint64_t)i * OMC__SHM_ENTRY_SIZE);
}
OMC__PRIVATE uint32_t* omc__shm_buckets(uint8_t* base, const omc__shm_layout* L) {
    return (uint32_t*)(base + L->index_off);
}
/* The dirty bitmap: summary words first (bit w: bitmap word w may be non-zero), then the
   bitmap (bit i: entry i gave something back). */
OMC__PRIVATE uint64_t* omc__shm_dirty_summary(uint8_t* base, const omc__shm_layout* L) {
    return (uint64_t*)(base + L->dirty_off);
}
OMC__PRIVATE uint64_t* omc__shm_dirty(uint8_t* base, const omc__shm_layout* L) {
    return (uint64_t*)(base + L->dirty_off) + L->summary_words;
}

/* A qualified key as the segment stores it: its bytes as 64-bit words (the last one zero padded;
   compared word by word, atomically, since the owner may be rewriting an entry), and a hash of
   those words (a multiply-xorshift per word: cheap, and the index only needs a good spread).
   Built once per call. */
typedef struct omc__shm_key {
    const char* s;
    uint32_t len, nwords;
    uint64_t hash;
    uint64_t words[OMC__SHM_KEY_WORDS];
} omc__shm_key;

OMC__PRIVATE void omc__shm_key_make(omc__shm_key* k, const char* qkey, uint32_t qlen) {
    uint32_t i;
    k->s = qkey;
    k->len = qlen;
    k->nwords = (qlen + 7) / 8;
    if (k->nwords) k->words[k->nwords - 1] = 0;
    memcpy(k->words, qkey, qlen);
    k->hash = 0x9E3779B97F4A7C15ull ^ qlen;
    for (i = 0; i < k->nwords; i++) {
        k->hash = (k->hash ^ k->words[i]) * 0xBF58476D1CE4E5B9ull;
        k->hash ^= k->hash >> 31;
    }
}

/* A qualified key for a log line: from/to/key (the separators shown as '/'). */
OMC__PRIVATE const char* omc__shm_key_show(const omc__shm_key* k, char* out, size_t n) {
    size_t i;
    for (i = 0; i < k->len && i + 1 < n; i++) out[i] = k->s[i] == 0x1f ? '/' : k->s[i];
    out[i] = '\0';
    return out;
}

/* ============================================================================================== */
/* [SECTION] SHM: system helpers (futex, processes, names)                                       */
/* ============================================================================================== */

#if defined(__x86_64__) || defined(__i386__)
    #define OMC__SHM_PAUSE() __asm__ __volatile__("pause" ::: "memory")
#elif defined(__aarch64__)
    #define OMC__SHM_PAUSE() __asm__ __volatile__("yield" ::: "memory")
#else
    #define OMC__SHM_PAUSE() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#endif

/* Sleep while *word == expected, until woken or the deadline (never longer than max_ns).
   Not FUTEX_PRIVATE: the word lives in a shared mapping and the kernel keys the wait on the file
   page, so a wake from another process reaches us. */
OMC__PRIVATE void omc__futex_wait(uint32_t* word, uint32_t expected, omc_time_ns deadline, int64_t max_ns) {
    struct timespec ts;
    omc_time_ns now = omc_now_ns();
    int64_t rel;
    if (deadline <= now) return;
    rel = deadline == OMC_WAIT_FOREVER ? max_ns : omc__min(deadline - now, max_ns);
    ts.tv_sec = (time_t)(rel / 1000000000LL);
    ts.tv_nsec = (long)(rel % 1000000000LL);
    syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

OMC__PRIVATE void omc__futex_wake_all(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

/* The same with a wake-up class (FUTEX_WAIT_BITSET): only wakes that name one of these bits reach
   the sleeper (FUTEX_WAKE, used by close, reaches everyone). The timeout of a bitset wait is an
   absolute CLOCK_MONOTONIC time. */
OMC__PRIVATE void omc__futex_wait_bits(uint32_t* word, uint32_t expected, omc_time_ns deadline, int64_t max_ns, uint32_t bits) {
    struct timespec ts;
    omc_time_ns now = omc_now_ns(), until;     /* CLOCK_MONOTONIC, the clock of the wait */
    if (deadline <= now) return;
    until = deadline == OMC_WAIT_FOREVER || deadline - now > max_ns ? now + max_ns : deadline;
    ts.tv_sec = (time_t)(until / 1000000000LL);
    ts.tv_nsec = (long)(until % 1000000000LL);
    syscall(SYS_futex, word, FUTEX_WAIT_BITSET, expected, &ts, NULL, bits);
}

OMC__PRIVATE void omc__futex_wake_bits(uint32_t* word, uint32_t bits) {
    syscall(SYS_futex, word, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, bits);
}

/* put_seq, the futex word getters sleep on, holds two things: bits 0..23 a sequence number,
   bumped on every change of the key index, and bits 24..31 one flag per wake-up class: "a getter
   of this class may be asleep". A getter waiting for a key belongs to the class of its key's hash
   (one of 8). It sets its class's flag with a compare-and-swap that succeeds only while the
   sequence is the one it read before its lookup, and sleeps on the whole word. A put bumps the
   sequence and clears its key's class flag in one compare-and-swap, and wakes that class - only
   that class, only when its flag was set. Any change of the word between a getter's flag and
   its sleep makes the kernel refuse the sleep (the value differs), so no wake-up is lost. */
#define OMC__SHM_SEQ_MASK 0x00FFFFFFu
OMC__PRIVATE uint32_t omc__shm_wake_bit(uint64_t key_hash) { return (uint32_t)1 << (24u + (uint32_t)(key_hash >> 61)); }

/* Bump the sequence in put_seq and clear the class flags in `clear`; returns the word before. */
OMC__PRIVATE uint32_t omc__shm_seq_bump(uint32_t* word, uint32_t clear) {
    uint32_t old = __atomic_load_n(word, __ATOMIC_RELAXED), nw;
    do nw = (((old & OMC__SHM_SEQ_MASK) + 1u) & OMC__SHM_SEQ_MASK) | (old & ~OMC__SHM_SEQ_MASK & ~clear);
    while (!__atomic_compare_exchange_n(word, &old, nw, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return old;
}

/* Read /proc/<pid>/stat: the state letter (field 3) and the start time (field 22, clock ticks
   after boot). Returns 1 found, 0 no such process, -1 /proc unusable. */
OMC__PRIVATE int omc__shm_proc_stat(uint32_t pid, char* state, uint64_t* start_time) {
    char path[64], buf[1024];
    const char* p;
    ssize_t n;
    int fd, field;
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ESRCH ? 0 : -1;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return n == 0 ? 0 : -1;     /* ESRCH: the process went away while we read */
    buf[n] = '\0';
    p = strrchr(buf, ')');                  /* the command name (field 2) may contain anything */
    if (!p || p[1] != ' ') return -1;
    p += 2;
    *state = *p;
    for (field = 3; field < 22 && *p; p++)
        if (*p == ' ') field++;
    *start_time = strtoull(p, NULL, 10);
    return 1;
}

/* Is pid (started at start_time, if not 0) alive? A zombie is dead: it will never release. */
OMC__PRIVATE int omc__shm_pid_alive(uint32_t pid, uint64_t start_time) {
    char state = 0;
    uint64_t st = 0;
    int r;
    if (pid == 0) return 0;
    r = omc__shm_proc_stat(pid, &state, &st);
    if (r == 1) return state != 'Z' && state != 'X' && (start_time == 0 || st == start_time);
    if (r == 0) return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;   /* no /proc: the pid alone */
}

/* ---- liveness by lock, not by pid ----
   An owner holds an open-file-description lock (F_OFD_SETLK, write) on byte 0 of its segment
   for as long as its file descriptor is open, that is for the life of the connector or of the
   process, whichever ends first: the kernel drops it when the process dies, however it dies.
   A reader holds a write lock on one byte of its own (its reader id, 1..2^24-1) of every segment
   it has mapped, and its claims carry that id instead of a pid. A lock is the same object in
   every pid namespace and needs no /proc, so "held" means alive wherever the test runs from;
   "free" means nobody who could still use the memory is left. Locks are advisory: they order
   omniconn processes, they do not protect the bytes. */
#define OMC__SHM_LOCK_OWNER     0u              /* byte of the owner's lock */
#define OMC__SHM_READER_IDS     (1u << 24)      /* reader ids (lock bytes) 1 .. 2^24 - 1 */
#define OMC__SHM_SELF_READER    0x3FFFFFFFu     /* a claim by the owner's own receiver half */

/* Take a lock of type (F_RDLCK, F_WRLCK) on one byte without waiting. 0 or an errno: EAGAIN
   someone else holds a conflicting one, EINVAL the kernel has no OFD locks (before 3.15). */
OMC__PRIVATE int omc__shm_lock(int fd, uint64_t byte, short type) {
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)byte;
    fl.l_len = 1;
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
    return errno == EACCES ? EAGAIN : errno;
}

/* Does another open file description hold a lock on this byte? 1 yes, 0 no, -1 cannot tell. */
OMC__PRIVATE int omc__shm_lock_held(int fd, uint64_t byte) {
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)byte;
    fl.l_len = 1;
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
    return fl.l_type != F_UNLCK;
}

OMC__PRIVATE uint64_t omc__shm_self_start_time(void) {
    char state;
    uint64_t st = 0;
    return omc__shm_proc_stat((uint32_t)getpid(), &state, &st) == 1 ? st : 0;
}

OMC__PRIVATE int omc__shm_channel_ok(const char* s) {
    size_t i, n = strlen(s);
    if (n == 0 || n > OMC_SHM_CHANNEL_MAX) return 0;
    for (i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.'))
            return 0;
    }
    return 1;
}

/* A segment name from metadata is attacker-controlled: only omc-<our uid>-<channel>-<pid>-<hex>
   made of name characters, so it can never leave the directory or name someone else's file. */
OMC__PRIVATE int omc__shm_name_ok(const char* name, uint32_t len, uint32_t uid) {
    char prefix[32];
    int plen = snprintf(prefix, sizeof(prefix), "omc-%u-", uid);
    uint32_t i;
    if (len == 0 || len >= OMC__SHM_NAME_MAX || len <= (uint32_t)plen || memcmp(name, prefix, (size_t)plen) != 0) return 0;
    for (i = 0; i < len; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
            return 0;
    }
    return 1;
}

/* The owner pid written into a segment name: omc-<uid>-<channel>-<pid>-<hex>. 0 if none. */
OMC__PRIVATE uint32_t omc__shm_name_pid(const char* name) {
    const char* last = strrchr(name, '-');
    const char* p;
    unsigned long v = 0;
    if (!last || last == name) return 0;
    for (p = last - 1; p > name && *p != '-'; p--) {}
    if (*p != '-') return 0;
    for (p++; p < last; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 0x3FFFFFFFul) return 0;
    }
    return (uint32_t)v;
}

/* Copy a put's payload into the pool. From OMNICONN_SHM_STREAM_MIN on (x86-64) with streaming
   (non-temporal) stores: a payload that large does not stay in the cache anyway, and a store that
   does not first read the destination line from memory moves a third fewer bytes (measured here:
   16 MiB into ranges cycling through a pool 15-18 GB/s against memcpy's 10-11, and faster than
   memcpy between two buffers that stay in the cache). Below it, memcpy (at 1 MiB the cache wins).
   The fence makes every streamed line visible before the entry is published. */
OMC__PRIVATE void omc__shm_copy_in(uint8_t* dst, const uint8_t* src, uint64_t n) {
#if OMC__SHM_HAS_STREAM
    if (n >= OMNICONN_SHM_STREAM_MIN && ((uintptr_t)dst & 63) == 0) {
        uint64_t i, body = n & ~(uint64_t)63;
        for (i = 0; i < body; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i*)(const void*)(src + i));
            __m128i b = _mm_loadu_si128((const __m128i*)(const void*)(src + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i*)(const void*)(src + i + 32));
            __m128i d = _mm_loadu_si128((const __m128i*)(const void*)(src + i + 48));
            _mm_stream_si128((__m128i*)(void*)(dst + i), a);
            _mm_stream_si128((__m128i*)(void*)(dst + i + 16), b);
            _mm_stream_si128((__m128i*)(void*)(dst + i + 32), c);
            _mm_stream_si128((__m128i*)(void*)(dst + i + 48), d);
        }
        _mm_sfence();
        memcpy(dst + body, src + body, (size_t)(n - body));
        return;
    }
#endif
    memcpy(dst, src, (size_t)n);
}

/* ============================================================================================== */
/* [SECTION] SHM: connector state                                                                */
/* ============================================================================================== */

/* A mapped segment of some sender (our own one too, for a dual connector). */
typedef struct omc__shm_peer {
    char name[OMC__SHM_NAME_MAX];
    int fd;
    uint8_t* base;
    omc__shm_header* hdr;
    omc__shm_layout lay;
    uint64_t seg_id, ino;
    uint32_t owner_pid;
    uint32_t reader_id;         /* our claims in this segment carry it; we hold its lock byte */
    uint32_t pins;              /* views held + threads waiting on it: not unmapped while > 0 */
    omc_time_ns checked;        /* last fstat */
    omc_result broken;          /* OMC_OK, or why the segment must not be touched any more */
    int unlinked;               /* the name is gone (owner closed, swept, or replaced it) */
    int in_channel;             /* found by the channel scan: metadata-less gets look here */
    int self;                   /* our own segment: mapping owned by the sender half */
    uint64_t dup_warned;        /* segment id of another producer we warned publishes our keys */
} omc__shm_peer;

/* A view handed out by get (receiver side). cookie[0] = index, cookie[1] = gen. */
typedef struct omc__shm_view {
    uint32_t gen;
    uint32_t next_free;
    int used;
    omc__shm_peer* peer;        /* NULL: an inline payload copied into heap memory */
    uint32_t entry, entry_gen, slot;
    void* heap;
} omc__shm_view;

typedef struct omc__shm {
    omc_conn* conn;
    char dir[OMC_SHM_PATH_MAX - OMC__SHM_NAME_MAX - 1];     /* so that dir/name always fits a path */
    char channel[OMC_SHM_CHANNEL_MAX + 1];
    uint64_t inline_threshold;  /* 0: inline disabled */
    int64_t default_ttl_ms;
    int64_t spin_ns;
    uint32_t uid, pid;
    uint64_t start_time;

    /* ---- the sender half: our segment and the pool over its data area ---- */
    int is_owner;
    pthread_mutex_t mu;         /* everything below up to the receiver half */
    int fd;
    char name[OMC__SHM_NAME_MAX];
    uint32_t name_len;
    char path[OMC_SHM_PATH_MAX];
    uint8_t* base;
    omc__shm_header* hdr;
    omc__shm_layout lay;
    uint64_t seg_id, ino;
    omc_pool* pool;
    omc__etab tab;              /* the owner's private record of each entry (the core's entry
                                   table, lay.entry_count slots: slot i is segment entry i;
                                   readers_left = claim slots published). Heap, never shared
                                   memory: receivers can write the segment, so nothing the owner
                                   relies on to free memory lives there. */
    uint32_t index_used;        /* live + tombstone buckets of the shared index */
    omc_time_ns next_pass, last_full;
    uint64_t reserved;          /* bytes of the file reserved in the tmpfs, from offset 0 (under mu;
                                   = lay.total with reserve_all) */
    uint64_t reserved_min;      /* what create reserved: never given back */
    omc_time_ns last_alloc;     /* atomic: the last range handed out (idle = none since) */
    int prefault;               /* map newly reserved pages at once */
    uint64_t grows, shrinks;    /* under mu */
    omc_time_ns self_checked;   /* atomic */
    int unlinked;               /* atomic: close() removed the name (views may still be out) */
    int self_broken;            /* atomic: an omc_result */

    /* ---- the receiver half: mapped peers and the views we hold ---- */
    pthread_mutex_t rmu;
    omc__smap peers;            /* segment name -> omc__shm_peer* */
    omc__smap refused;          /* names the channel scan will not look at again -> the inode
                                   readdir reported (a file of another uid planted under our
                                   prefix, or one that is not a segment): no system call and no
                                   log line per scan, however many there are */
    omc__shm_peer* self_peer;
    omc__shm_view* views;
    uint32_t view_cap, view_free, views_used;
    omc_time_ns next_scan, next_maint;
    omc_time_ns squat_said;     /* the last "every reader id is taken" line (one per 10 s) */
    int no_ofd_said;            /* the "no OFD locks" line was logged */
    uint32_t forks;             /* omc__shm_forks when created: another value = a fork()ed child */
    int foreign_said;           /* a forked child's first refused call was logged */
    uint32_t idle_word;         /* futex for getters that have no peer to wait on */
} omc__shm;

/* The connector's mutexes, with a note of which this thread holds: after a SIGBUS caught inside
   a guarded call (see the guard below) exactly those are released. */
static __thread omc__shm* omc__shm_mu_held;
static __thread omc__shm* omc__shm_rmu_held;
OMC__PRIVATE void omc__shm_mu_lock(omc__shm* S) { pthread_mutex_lock(&S->mu); omc__shm_mu_held = S; }
OMC__PRIVATE void omc__shm_mu_unlock(omc__shm* S) { omc__shm_mu_held = NULL; pthread_mutex_unlock(&S->mu); }
OMC__PRIVATE void omc__shm_rmu_lock(omc__shm* S) { pthread_mutex_lock(&S->rmu); omc__shm_rmu_held = S; }
OMC__PRIVATE void omc__shm_rmu_unlock(omc__shm* S) { omc__shm_rmu_held = NULL; pthread_mutex_unlock(&S->rmu); }

#define OMC__SHM_PASS_NS 100000000LL        /* TTL and dead-reader checks: every 100 ms */
#define OMC__SHM_FULL_MIN_NS 10000000LL     /* out of space: a full walk at most every 10 ms */
#define OMC__SHM_SCAN_NS 50000000LL         /* channel directory rescan while waiting */
#define OMC__SHM_WAIT_SLICE_NS 50000000LL   /* longest single futex sleep (then look again) */

/* ---- after fork() ----
   A connector belongs to the process that created it. A fork()ed child inherits a copy of it
   (heap, mappings, descriptors) but not the right to act on the shared state: its puts would race
   the parent's allocator, its close would retire the parent's entries and unlink its segment,
   its releases would finish the parent's views. So in a child destroy and the release of views
   and buffers touch nothing shared and take no lock (a lock another thread of the parent held at
   the fork stays held in the child for ever; omc_conn_destroy drops the handle there without
   tearing the copy down, which keeps the creator's reference, so no release in the child ends
   in a teardown either: the copy goes with the child's exit), and
   every other call is refused with OMC_ERR_CLOSED and a log line. A child is recognised by a
   counter that a pthread_atfork handler increments in the child: one load per call, no getpid. */
static uint32_t omc__shm_forks;
static pthread_once_t omc__shm_fork_once = PTHREAD_ONCE_INIT;
static void omc__shm_on_fork_child(void) { __atomic_add_fetch(&omc__shm_forks, 1u, __ATOMIC_RELAXED); }
static void omc__shm_fork_install(void) { pthread_atfork(NULL, NULL, omc__shm_on_fork_child); }

OMC__PRIVATE int omc__shm_foreign(const omc__shm* S) { return __atomic_load_n(&omc__shm_forks, __ATOMIC_RELAXED) != S->forks; }

/* A call a forked child may not make: OMC_ERR_CLOSED, a WARN the first time, INFO after. */
OMC__PRIVATE omc_result omc__shm_refuse_foreign(omc__shm* S, const char* call) {
    int first = !__atomic_exchange_n(&S->foreign_said, 1, __ATOMIC_RELAXED);
    OMC__LOG(&S->conn->hooks, first ? OMC_LOG_WARN : OMC_LOG_INFO, OMC_LOGITEM_SHM, "%s on the SHM connector of channel '%s' "
             "refused: process %u created it and this is process %u, a fork() of it, where a connector can only be destroyed "
             "(that unmaps it here and leaves the creator's entries and segment alone). Fix: create a new connector in the "
             "child", call, S->channel, S->pid, (unsigned)getpid());
    return OMC_ERR_CLOSED;
}

/* ============================================================================================== */
/* [SECTION] SHM: the key index (written by the owner, read lock-free by everyone)              */
/* ============================================================================================== */
/*
    Open addressing with linear probing over index_buckets 32-bit buckets: 0 empty, 0xFFFFFFFF a
    tombstone, else entry index + 1. Only the owner writes (under its mutex). A reader probes
    without locks and confirms each candidate against the entry itself (generation, hash, key),
    so a bucket that changes under it can only make it miss - and every change bumps put_seq,
    which a missing reader compares before it sleeps, so a miss is retried, never slept on.
*/

/* The owner decides what to free from its private entry table (with its own index of the keys),
   never from shared memory. The shared buckets use the core's bucket helpers; an insert fails
   only if no bucket is free, which the load limit rules out unless another process scribbled
   over them: the caller then rebuilds. Every probe is bounded. */

/* Publish entry i under its key in the shared index. */
OMC__PRIVATE void omc__shm_index_add(omc__shm* S, uint32_t i);

/* Too many tombstones make probes long (or someone overwrote the shared buckets): rebuild the
   shared index from the owner's list of LIVE entries. */
OMC__PRIVATE void omc__shm_index_rebuild(omc__shm* S) {
    uint32_t* b = omc__shm_buckets(S->base, &S->lay);
    uint32_t i;
    for (i = 0; i < S->lay.buckets; i++) __atomic_store_n(&b[i], OMC__SHM_BUCKET_EMPTY, __ATOMIC_RELEASE);
    S->index_used = 0;
    for (i = S->tab.used_head; i != OMC__NIL; i = S->tab.ent[i].next)
        if (S->tab.ent[i].state == OMC__ENT_LIVE) omc__shm_index_add(S, i);
    omc__shm_seq_bump(&S->hdr->put_seq, 0u);   /* readers that missed: look again */
}

OMC__PRIVATE void omc__shm_index_add(omc__shm* S, uint32_t i) {
    if (!omc__bucket_insert(omc__shm_buckets(S->base, &S->lay), S->lay.buckets, &S->index_used, i, S->tab.ent[i].hash)) {
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "key index of %s was full of foreign values: rebuilt", S->name);
        omc__shm_index_rebuild(S);  /* clears the buckets, then adds every LIVE entry (this one too) */
    }
}

/* What a reader saw in an entry (a consistent snapshot, or nothing). */
typedef struct omc__shm_snap {
    uint32_t gen, flags, readers;
    uint64_t offset, size;
} omc__shm_snap;

/* Seqlock read of entry idx: 1 and a snapshot if it is published and holds key k, else 0.
   Every load is atomic: the owner may be rewriting it. */
OMC__PRIVATE int omc__shm_entry_read(uint8_t* base, const omc__shm_layout* L, uint32_t idx, const omc__shm_key* k,
                                     omc__shm_snap* out) {
    omc__shm_entry* e = omc__shm_entry_at(base, L, idx);
    uint32_t g1 = __atomic_load_n(&e->gen, __ATOMIC_ACQUIRE), g2, w;
    int same = 1;
    if (g1 == 0) return 0;
    out->flags = __atomic_load_n(&e->flags, __ATOMIC_RELAXED);
    out->offset = __atomic_load_n(&e->offset, __ATOMIC_RELAXED);
    out->size = __atomic_load_n(&e->size, __ATOMIC_RELAXED);
    out->readers = __atomic_load_n(&e->readers, __ATOMIC_RELAXED);
    same = __atomic_load_n(&e->key_hash, __ATOMIC_RELAXED) == k->hash && __atomic_load_n(&e->key_len, __ATOMIC_RELAXED) == k->len;
    for (w = 0; same && w < k->nwords; w++) same = __atomic_load_n(&e->key[w], __ATOMIC_RELAXED) == k->words[w];
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    g2 = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
    if (g1 != g2 || !same) return 0;
    out->gen = g1;
    return 1;
}

/* Find the published entry of a key: its index, or -1. Bounded: at most one pass over the
   buckets, whatever the (untrusted) bucket contents are. */
OMC__PRIVATE int64_t omc__shm_index_find(uint8_t* base, const omc__shm_layout* L, const omc__shm_key* k, omc__shm_snap* snap) {
    uint32_t* b = omc__shm_buckets(base, L);
    uint32_t mask = L->buckets - 1, i, n;
    for (i = (uint32_t)k->hash & mask, n = 0; n < L->buckets; i = (i + 1) & mask, n++) {
        uint32_t v = __atomic_load_n(&b[i], __ATOMIC_ACQUIRE);
        if (v == OMC__SHM_BUCKET_EMPTY) return -1;
        if (v == OMC__SHM_BUCKET_TOMB || v - 1 >= L->entry_count) continue;
        if (omc__shm_entry_read(base, L, v - 1, k, snap)) return (int64_t)(v - 1);
    }
    return -1;
}

/* A getter that has just seen put_seq move looks at the latest put's entry first: last_entry
   shares put_seq's cache line, which the getter's spin has just fetched, so the lookup skips the
   index bucket's line (a transfer between cores on the handoff's path). Only a hint: the entry
   is checked like any other (seqlock, key), and a miss falls back to the index. */
/* Start fetching the latest put's entry (its first two lines: fields, claim slot 0, key) and its
   payload's first line, all at once: a getter that has just seen put_seq move then spends the
   few hundred instructions before its claim while they cross between the cores, instead of
   waiting for them one after the other. Prefetches never fault; the offsets are still checked. */
OMC__PRIVATE void omc__shm_prefetch_latest(uint8_t* base, const omc__shm_layout* L) {
    const omc__shm_header* h = (const omc__shm_header*)base;
    uint32_t v = __atomic_load_n(&h->last_entry, __ATOMIC_RELAXED);
    uint64_t off = __atomic_load_n(&h->last_offset, __ATOMIC_RELAXED);
    if (v == 0 || v - 1 >= L->entry_count) return;
    __builtin_prefetch(base + L->entries_off + (uint64_t)(v - 1) * OMC__SHM_ENTRY_SIZE, 1);  /* claimed next */
    __builtin_prefetch(base + L->entries_off + (uint64_t)(v - 1) * OMC__SHM_ENTRY_SIZE + 64, 0);
    if (off < L->data_size) __builtin_prefetch(base + L->data_off + off, 0);
}

OMC__PRIVATE int64_t omc__shm_latest_find(uint8_t* base, const omc__shm_layout* L, const omc__shm_key* k, omc__shm_snap* snap) {
    uint32_t v = __atomic_load_n(&((omc__shm_header*)base)->last_entry, __ATOMIC_ACQUIRE);
    if (v == 0 || v - 1 >= L->entry_count || !omc__shm_entry_read(base, L, v - 1, k, snap)) return -1;
    return (int64_t)(v - 1);
}

/* ============================================================================================== */
/* [SECTION] SHM: claims (one compare-and-swap per transition, by any process)                  */
/* ============================================================================================== */

/* Take one AVAILABLE slot of generation gen and move it to new_state (HELD by pid, or DONE for an
   inline read that needs no view). Returns the slot number, or -1 if none is left. */
OMC__PRIVATE int omc__shm_claim(omc__shm_entry* e, uint32_t gen, uint32_t new_state, uint32_t pid) {
    int i;
    uint64_t want = omc__slot_make(gen, OMC__SLOT_AVAILABLE, 0);
    for (i = 0; i < OMC_SHM_MAX_READERS; i++) {
        uint64_t w = want;
        if (__atomic_load_n(omc__shm_slot(e, (uint32_t)i), __ATOMIC_RELAXED) != want) continue;
        /* acquire: on success every byte the owner wrote before publishing the slot is visible */
        if (__atomic_compare_exchange_n(omc__shm_slot(e, (uint32_t)i), &w, omc__slot_make(gen, new_state, pid), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return i;
    }
    return -1;
}

/* HELD -> DONE for the view we hold. Release: our reads of the payload happen before the owner
   can see DONE and reuse the range. 0 if the slot was not ours any more. */
OMC__PRIVATE int omc__shm_unclaim(omc__shm_entry* e, uint32_t slot, uint32_t gen, uint32_t pid) {
    uint64_t w = omc__slot_make(gen, OMC__SLOT_HELD, pid);
    if (slot >= OMC_SHM_MAX_READERS) return 0;
    return __atomic_compare_exchange_n(omc__shm_slot(e, (uint32_t)slot), &w, omc__slot_make(gen, OMC__SLOT_DONE, 0), 0,
                                       __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

/* Tell the owner that entry idx of a segment (base, L) gave something back: set its bit, then
   the summary bit of that bitmap word. The owner looks at the summary words (one load says
   whether anything came back), then takes summary words, then bitmap words (each by exchange),
   so a bit set after its look is found on its next look; a reader killed between its CAS and
   this call leaves no bit, and the owner's periodic full pass finds the entry anyway.
   release_seq and owner_sleeping share a line nobody writes while the owner is awake: a release
   reads owner_sleeping from its own cache and moves one line (the bitmap's) to the owner's side,
   instead of two. An owner about to sleep sets owner_sleeping, then looks at the summary words
   (both sequentially consistent, as are the bit and the load here): either it sees our bit, or
   we see its flag, bump release_seq and wake it. */
OMC__PRIVATE void omc__shm_notify_release(uint8_t* base, const omc__shm_layout* L, uint32_t idx) {
    omc__shm_header* h = (omc__shm_header*)base;
    if (idx < L->entry_count) {
        uint32_t w = idx / 64;
        __atomic_or_fetch(&omc__shm_dirty(base, L)[w], (uint64_t)1 << (idx % 64), __ATOMIC_RELEASE);
        __atomic_or_fetch(&omc__shm_dirty_summary(base, L)[w / 64], (uint64_t)1 << (w % 64), __ATOMIC_SEQ_CST);
    }
    if (__atomic_load_n(&h->owner_sleeping, __ATOMIC_SEQ_CST) && __atomic_exchange_n(&h->owner_sleeping, 0u, __ATOMIC_SEQ_CST)) {
        __atomic_add_fetch(&h->release_seq, 1u, __ATOMIC_SEQ_CST);
        omc__futex_wake_all(&h->release_seq);
    }
}

/* Did any receiver give something back since the owner last drained the bitmap? (The summary
   words: one for every 4096 entries.) */
OMC__PRIVATE int omc__shm_released_any(uint8_t* base, const omc__shm_layout* L) {
    const uint64_t* sum = omc__shm_dirty_summary(base, L);
    uint32_t sw;
    for (sw = 0; sw < L->summary_words; sw++)
        if (__atomic_load_n(&sum[sw], __ATOMIC_SEQ_CST)) return 1;
    return 0;
}

typedef struct omc__shm_count { uint32_t avail, held, done; } omc__shm_count;

/* Count the states of the first n slots of generation gen (n: the owner's own record of how many
   it published; the others are empty). */
OMC__PRIVATE omc__shm_count omc__shm_slots(omc__shm_entry* e, uint32_t gen, uint32_t n) {
    omc__shm_count c = {0, 0, 0};
    uint32_t i;
    for (i = 0; i < n && i < OMC_SHM_MAX_READERS; i++) {
        uint64_t w = __atomic_load_n(omc__shm_slot(e, (uint32_t)i), __ATOMIC_ACQUIRE);
        if (omc__slot_gen(w) != gen) continue;
        switch (omc__slot_state(w)) {
            case OMC__SLOT_AVAILABLE: c.avail++; break;
            case OMC__SLOT_HELD: c.held++; break;
            case OMC__SLOT_DONE: c.done++; break;
            default: break;
        }
    }
    return c;
}

/* ============================================================================================== */
/* [SECTION] SHM: the sender half - creating the segment                                        */
/* ============================================================================================== */

/* Map reserved pages of our own segment now (a growing pool cannot MAP_POPULATE a file whose
   tail is not reserved): MADV_POPULATE_WRITE where the kernel has it (5.14), else one load per
   page. */
#define OMC__SHM_MADV_POPULATE_WRITE 23
OMC__PRIVATE void omc__shm_prefault(uint8_t* p, uint64_t n) {
    uint64_t i;
    if (madvise(p, (size_t)n, OMC__SHM_MADV_POPULATE_WRITE) == 0) return;
    for (i = 0; i < n; i += OMC__SHM_PAGE) (void)*(volatile uint8_t*)(p + i);
}

/* Create, reserve, map and describe our segment. On failure nothing is left in the directory. */
OMC__PRIVATE omc_result omc__shm_owner_create(omc__shm* S, const omc_hooks* hooks, uint64_t pool_size,
                                              uint64_t alignment, uint32_t max_entries, int no_prefault, int reserve_all) {
    omc__shm_header* h;
    struct stat st;
    void* p;
    int attempt, e;
    uint64_t reserve;
    omc__shm_layout_make(max_entries, OMC__ALIGN_UP(pool_size, alignment), alignment, &S->lay);
    if (S->lay.total > (uint64_t)SIZE_MAX / 2 || S->lay.total > (uint64_t)INT64_MAX) return OMC_ERR_TOO_LARGE;
    /* a growing pool reserves the control area and OMNICONN_SHM_RESERVE_MIN of data now, the rest
       as puts need it (omc__shm_reserve); the file has its full size either way */
    reserve = reserve_all ? S->lay.total : OMC__ALIGN_UP(S->lay.data_off + OMNICONN_SHM_RESERVE_MIN, OMC__SHM_PAGE);
    if (reserve > S->lay.total) reserve = S->lay.total;
    S->fd = -1;
    for (attempt = 0; attempt < 8 && S->fd < 0; attempt++) {
        /* unguessable and unsquattable: O_EXCL on a random name; O_NOFOLLOW refuses a planted link */
        do { S->seg_id = omc__random_u64(); } while (S->seg_id == 0);
        snprintf(S->name, sizeof(S->name), "omc-%u-%s-%u-%016llx", S->uid, S->channel, S->pid, (unsigned long long)S->seg_id);
        snprintf(S->path, sizeof(S->path), "%s/%s", S->dir, S->name);
        S->fd = open(S->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (S->fd < 0) { if (errno != EEXIST) break; continue; }
        /* the owner's lock, before anything else: from now on every sweep sees us alive. A sweep
           that looked at the new, empty file first holds its own lock (EAGAIN) or has already
           removed the name (no link left): leave the file to it and take another name. */
        e = omc__shm_lock(S->fd, OMC__SHM_LOCK_OWNER, F_WRLCK);
        if ((e != 0 && e != EINVAL) || fstat(S->fd, &st) != 0 || st.st_nlink == 0) {
            close(S->fd);
            S->fd = -1;
            errno = EEXIST;
        }
    }
    if (S->fd < 0) {
        e = errno;
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_SHM, "cannot create %s: %s", S->path, strerror(e));
        return e == ENOENT || e == ENOTDIR ? OMC_ERR_UNAVAILABLE : e == ENOSPC ? OMC_ERR_SHM_FULL : OMC_ERR_SYSTEM;
    }
    /* reserve now what may be written: a full tmpfs fails here (or at the put that grows the
       reservation), never with SIGBUS on some later write */
    e = reserve < S->lay.total && ftruncate(S->fd, (off_t)S->lay.total) != 0 ? errno : 0;
    if (e == 0) e = posix_fallocate(S->fd, 0, (off_t)reserve);
    if (e != 0) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_SHM, "cannot reserve %llu bytes for %s: %s. Fix: free space in %s "
                 "(df -h %s; remove stale segments with omc_shm_sweep_dead), make it larger (mount -o remount,size=... %s), "
                 "or use a smaller pool_size", (unsigned long long)reserve, S->path, strerror(e), S->dir, S->dir, S->dir);
        unlink(S->path);
        close(S->fd);
        S->fd = -1;
        return e == ENOSPC || e == EDQUOT || e == EFBIG ? OMC_ERR_SHM_FULL : OMC_ERR_SYSTEM;
    }
    /* prefault (the default): every page of the reserved file mapped now, so no put ever takes a
       page fault, the first pass through the pool included. The pages are already reserved, so
       this cannot fail for lack of room; it costs time at create (about 0.5 s per GiB here) and
       page tables (2 MiB per GiB), not memory the reservation did not already take. */
    p = mmap(NULL, (size_t)S->lay.total, PROT_READ | PROT_WRITE, MAP_SHARED | (no_prefault || reserve < S->lay.total ? 0 : MAP_POPULATE),
             S->fd, 0);
    if (p == MAP_FAILED || fstat(S->fd, &st) != 0) {
        e = errno;
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_SHM, "cannot map %s (%llu bytes): %s", S->path, (unsigned long long)S->lay.total, strerror(e));
        if (p != MAP_FAILED) munmap(p, (size_t)S->lay.total);
        unlink(S->path);
        close(S->fd);
        S->fd = -1;
        return OMC_ERR_NO_MEMORY;
    }
    S->base = (uint8_t*)p;
    S->reserved = S->reserved_min = reserve;
    S->prefault = !no_prefault;
    if (reserve < S->lay.total && S->prefault) omc__shm_prefault(S->base, reserve);
    S->name_len = (uint32_t)strlen(S->name);
    S->ino = (uint64_t)st.st_ino;
    h = S->hdr = (omc__shm_header*)p;
    h->magic = OMC__SHM_MAGIC;
    h->version = OMC__SHM_VERSION;
    h->header_size = OMC__SHM_HEADER_SIZE;
    h->total_size = S->lay.total;
    h->entries_offset = S->lay.entries_off;
    h->entry_count = S->lay.entry_count;
    h->entry_size = OMC__SHM_ENTRY_SIZE;
    h->index_offset = S->lay.index_off;
    h->index_buckets = S->lay.buckets;
    h->max_readers = OMC_SHM_MAX_READERS;
    h->data_offset = S->lay.data_off;
    h->data_size = S->lay.data_size;
    h->segment_id = S->seg_id;
    h->incarnation = omc_incarnation();
    h->owner_start_time = S->start_time;
    h->owner_pid = S->pid;
    h->owner_uid = S->uid;
    h->channel_len = (uint32_t)strlen(S->channel);
    memcpy(h->channel, S->channel, h->channel_len);
    h->alignment = alignment;
    h->dirty_offset = S->lay.dirty_off;
    __atomic_store_n(&h->state, (uint32_t)OMC__SHM_READY, __ATOMIC_RELEASE);
    return OMC_OK;
}

#include <sys/statvfs.h>     /* the tmpfs's size, for the message of a payload that does not fit */

/* Map pages of our segment that a write() has just filled: they are in the page cache and up to
   date, so a read fault maps them 16 at a time (the kernel's fault-around), writable (a shared
   mapping of a tmpfs file needs no write notification): a later put into them takes no fault.
   MADV_POPULATE_READ (Linux 5.14) in one call, else one load per page. */
#define OMC__SHM_MADV_POPULATE_READ 22
OMC__PRIVATE void omc__shm_prefault_filled(uint8_t* p, uint64_t n) {
    uint64_t i;
    if (madvise(p, (size_t)n, OMC__SHM_MADV_POPULATE_READ) == 0) return;
    for (i = 0; i < n; i += OMC__SHM_PAGE) (void)*(volatile uint8_t*)(p + i);
}

/* Write n bytes at file offset off with pwrite: 0 or an errno (ENOSPC for a full tmpfs). */
OMC__PRIVATE int omc__shm_pwrite_all(int fd, const uint8_t* src, uint64_t n, uint64_t off) {
    while (n) {
        ssize_t w = pwrite(fd, src, (size_t)omc__min(n, (uint64_t)1 << 30), (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : ENOSPC;
        src += w;
        off += (uint64_t)w;
        n -= (uint64_t)w;
    }
    return 0;
}

/* Reserve file bytes [from, to) with posix_fallocate (nothing to do for an empty range). */
OMC__PRIVATE int omc__shm_fallocate(int fd, uint64_t from, uint64_t to) {
    return from < to ? posix_fallocate(fd, (off_t)from, (off_t)(to - from)) : 0;
}

/* The log line and result of a growth the tmpfs had no room for (under mu; unlocks it). */
OMC__PRIVATE omc_result omc__shm_grow_failed(omc__shm* S, uint64_t size, int e) {
    struct statvfs vs;
    unsigned long long fs_size = 0, fs_free = 0, held = (unsigned long long)S->reserved;
    if (statvfs(S->dir, &vs) == 0) {
        fs_size = (unsigned long long)vs.f_blocks * vs.f_frsize;
        fs_free = (unsigned long long)vs.f_bavail * vs.f_frsize;
    }
    omc__shm_mu_unlock(S);
    OMC__LOG(&S->conn->hooks, OMC_LOG_ERROR, OMC_LOGITEM_SHM, "a %llu-byte payload does not fit: %s has %llu MiB (%llu MiB "
             "free) and this connector's segment holds %llu MiB of it (pool_size %llu MiB): %s. Fix: a larger tmpfs "
             "(docker --shm-size, mount -o remount,size=...), shm_dir on a larger tmpfs, or smaller payloads",
             (unsigned long long)size, S->dir, fs_size >> 20, fs_free >> 20, held >> 20,
             (unsigned long long)(S->lay.data_size >> 20), strerror(e));
    return e == ENOSPC || e == EDQUOT || e == EFBIG ? OMC_ERR_SHM_FULL : OMC_ERR_SYSTEM;
}

/* A growing pool: make sure bytes [offset, offset + size) of the data area are reserved in the
   tmpfs before anyone writes them through the mapping (a write to an unreserved page of a full
   tmpfs is a SIGBUS). Grows the reservation to the next OMNICONN_SHM_GROW_STEP boundary (to the
   range's last page when the step does not fit but the range does); a tmpfs without room is
   OMC_ERR_SHM_FULL with a log line that says how big the directory is and what to change, and
   whatever the failed growth had taken is punched out again. Under mu, so that the idle shrink
   (which needs nothing in use) never runs between a range's allocation and this check; a range
   inside the create-time reservation, which is never given back, needs no lock.

   src (a put's payload, or NULL for a buffer from omc_conn_alloc): the part of the payload that
   falls into the growth is written into the file with pwrite, which takes each new page and fills
   it in one pass, instead of posix_fallocate (which takes it) and a populate (which zeroes and
   maps it) before the copy fills it: a fresh pool's first pass costs about a fifth less. A full
   tmpfs fails the pwrite with ENOSPC, never with a SIGBUS. The filled pages are then mapped
   writable by fault-around. *copy_len receives how many bytes from the payload's start the caller
   still copies through the mapping (those below the old reservation; all of them when nothing
   grew). now: the caller's clock (one read per put: a read costs 60-75 ns on the benchmark VM). */
OMC__PRIVATE omc_result omc__shm_reserve_fill(omc__shm* S, uint64_t offset, uint64_t size, const uint8_t* src, omc_time_ns now,
                                              uint64_t* copy_len) {
    uint64_t start = S->lay.data_off + offset, end = start + size, want, old, fill;
    int e;
    *copy_len = size;
    if (S->reserved_min == S->lay.total) return OMC_OK;      /* reserve_all */
    __atomic_store_n(&S->last_alloc, now, __ATOMIC_RELAXED);
    if (end <= S->reserved_min) return OMC_OK;   /* never given back: no lock needed (small puts) */
    omc__shm_mu_lock(S);
    if (end <= S->reserved) { omc__shm_mu_unlock(S); return OMC_OK; }
    old = S->reserved;
    want = omc__min(OMC__ALIGN_UP(end, OMNICONN_SHM_GROW_STEP), S->lay.total);
    fill = src ? omc__max(start, old) : end;     /* [fill, end) is written by pwrite */
    e = omc__shm_fallocate(S->fd, old, fill);
    if (e == 0 && fill < end) e = omc__shm_pwrite_all(S->fd, src + (fill - start), end - fill, fill);
    if (e == 0 && omc__shm_fallocate(S->fd, end, want) != 0) {
        /* the payload fits, the rest of the step does not: grow to the payload's last page only */
        uint64_t end_page = OMC__ALIGN_UP(end, OMC__SHM_PAGE);
        if (end_page < want)
            (void)fallocate(S->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)end_page, (off_t)(want - end_page));
        want = end_page;
        e = omc__shm_fallocate(S->fd, end, want);
    }
    if (e != 0) {
        /* give back what this growth took (the pages above the reservation hold nothing anyone
           was given) */
        (void)fallocate(S->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)old, (off_t)(want - old));
        return omc__shm_grow_failed(S, size, e);
    }
    if (S->prefault && fill < end) {        /* reserved below and above the filled pages */
        uint64_t filled_lo = fill & ~(uint64_t)(OMC__SHM_PAGE - 1), filled_hi = OMC__ALIGN_UP(end, OMC__SHM_PAGE);
        if (old < filled_lo) omc__shm_prefault(S->base + old, filled_lo - old);
        omc__shm_prefault_filled(S->base + filled_lo, filled_hi - filled_lo);
        if (filled_hi < want) omc__shm_prefault(S->base + filled_hi, want - filled_hi);
    } else if (S->prefault) {
        omc__shm_prefault(S->base + old, want - old);
    }
    *copy_len = fill - start < size ? fill - start : size;
    S->reserved = want;
    S->grows++;
    omc__shm_mu_unlock(S);
    return OMC_OK;
}

/* The same for a range that the caller fills through the mapping (omc_conn_alloc's buffers). */
OMC__PRIVATE omc_result omc__shm_reserve(omc__shm* S, uint64_t offset, uint64_t size) {
    uint64_t copy_len;
    return omc__shm_reserve_fill(S, offset, size, NULL, omc_now_ns(), &copy_len);
}

/* A growing pool with nothing in use for OMNICONN_SHM_IDLE_MS gives back what it grew: the pages
   above the create-time reservation are punched out of the file (receivers' mappings of them go
   with them; nobody holds a view there). Run by omc_conn_sweep, under mu. */
OMC__PRIVATE void omc__shm_shrink_idle(omc__shm* S, omc_time_ns now) {
    omc_alloc_stats st;
    if (S->reserved <= S->reserved_min) return;
    if (now - __atomic_load_n(&S->last_alloc, __ATOMIC_RELAXED) < (omc_time_ns)OMNICONN_SHM_IDLE_MS * 1000000LL) return;
    omc_alloc_get_stats(omc_pool_allocator(S->pool), &st);
    if (st.bytes_in_use) return;
    if (fallocate(S->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)S->reserved_min,
                  (off_t)(S->reserved - S->reserved_min)) != 0) {
        OMC__LOG(&S->conn->hooks, OMC_LOG_DEBUG, OMC_LOGITEM_SHM, "%s: cannot give back idle pool memory: %s", S->name, strerror(errno));
        __atomic_store_n(&S->last_alloc, now, __ATOMIC_RELAXED);     /* not at every sweep */
        return;
    }
    S->reserved = S->reserved_min;
    S->shrinks++;
}

/* Has someone shrunk, removed or replaced our segment? Checked with fstat at most every
   OMNICONN_SHM_RECHECK_NS (a system call costs a microsecond), and always when force is set.
   Once broken, always broken: the connector refuses to touch the mapping again. */
OMC__PRIVATE omc_result omc__shm_self_check(omc__shm* S, omc_time_ns now, int force) {
    struct stat st;
    omc_result r = (omc_result)__atomic_load_n(&S->self_broken, __ATOMIC_ACQUIRE);
    if (r != OMC_OK) return r;
    if (!force && now - __atomic_load_n(&S->self_checked, __ATOMIC_RELAXED) < OMNICONN_SHM_RECHECK_NS) return OMC_OK;
    __atomic_store_n(&S->self_checked, now, __ATOMIC_RELAXED);
    if (fstat(S->fd, &st) != 0) return OMC_OK;
    if ((uint64_t)st.st_size == S->lay.total && (st.st_nlink > 0 || __atomic_load_n(&S->unlinked, __ATOMIC_ACQUIRE))) return OMC_OK;
    if (!__atomic_exchange_n(&S->self_broken, (int)OMC_ERR_SHM_CHANGED, __ATOMIC_ACQ_REL))
        omc__conn_fail(S->conn, OMC_ERR_SHM_CHANGED, "segment %s was %s by another process; this connector stops using it "
                       "(recreate the connector)", S->path, st.st_nlink == 0 ? "removed or replaced" : "truncated");
    return OMC_ERR_SHM_CHANGED;
}

/* ============================================================================================== */
/* [SECTION] SHM: the sender half - entries, reclaim, TTL, dead readers                         */
/* ============================================================================================== */

/* Take an entry out of the key index and the key table: no new reader can find it, and the key
   may be put again. Views still held keep it (DRAINING) until they come back. */
OMC__PRIVATE void omc__shm_unindex(omc__shm* S, uint32_t i) {
    if (S->tab.ent[i].state != OMC__ENT_LIVE) return;
    omc__bucket_remove(omc__shm_buckets(S->base, &S->lay), S->lay.buckets, i, S->tab.ent[i].hash);
    omc__etab_unindex(&S->tab, i);
    if (S->index_used * 4 > S->lay.buckets * 3) omc__shm_index_rebuild(S);
}

/* No read remains and no view is out: free the range and make the entry reusable. */
OMC__PRIVATE void omc__shm_free_entry(omc__shm* S, uint32_t i) {
    omc__shm_entry* e = omc__shm_entry_at(S->base, &S->lay, i);
    int s;
    omc__shm_unindex(S, i);
    __atomic_store_n(&e->gen, 0u, __ATOMIC_RELEASE);
    for (s = 0; s < OMC_SHM_MAX_READERS; s++)   /* all 16: a foreign write may have touched any */
        if (__atomic_load_n(omc__shm_slot(e, (uint32_t)s), __ATOMIC_RELAXED)) __atomic_store_n(omc__shm_slot(e, (uint32_t)s), (uint64_t)0, __ATOMIC_RELAXED);
    omc__etab_drop(&S->tab, i, 0);     /* the range goes back to the pool */
}

/* Withdraw every read that has not been taken yet (cleanup, TTL, close). Held views stay. */
OMC__PRIVATE void omc__shm_retire(omc__shm* S, uint32_t i) {
    omc__shm_entry* e = omc__shm_entry_at(S->base, &S->lay, i);
    uint32_t gen = S->tab.ent[i].gen;
    int s;
    for (s = 0; s < OMC_SHM_MAX_READERS; s++) {
        uint64_t w = omc__slot_make(gen, OMC__SLOT_AVAILABLE, 0);
        __atomic_compare_exchange_n(omc__shm_slot(e, (uint32_t)s), &w, omc__slot_make(gen, OMC__SLOT_DONE, 0), 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    }
    omc__shm_unindex(S, i);
}

/* Which reader pids a pass has already looked up in /proc (one read per pid per pass, however
   many views it holds). */
typedef struct omc__shm_pids { uint32_t pid[16], alive[16], n; } omc__shm_pids;

/* Is the reader whose claims carry this id still there? Its lock byte is held (or we cannot
   tell: never reclaim on doubt). One fcntl per reader per pass, however many views it holds. */
OMC__PRIVATE int omc__shm_reader_alive(omc__shm* S, omc__shm_pids* seen, uint32_t id) {
    uint32_t k;
    int alive;
    if (id == 0 || id >= OMC__SHM_READER_IDS) return 1;    /* ours, or not a reader id at all: keep */
    for (k = 0; k < seen->n; k++) if (seen->pid[k] == id) return (int)seen->alive[k];
    alive = omc__shm_lock_held(S->fd, id) != 0;
    if (seen->n < 16) { seen->pid[seen->n] = id; seen->alive[seen->n] = (uint32_t)alive; seen->n++; }
    return alive;
}

/* A HELD slot whose reader process is dead will never be released: finish it for the reader.
   The CAS keeps the slot if the reader released it in the meantime. Returns slots reclaimed. */
OMC__PRIVATE uint32_t omc__shm_reclaim_dead_readers(omc__shm* S, uint32_t i, omc__shm_pids* seen) {
    omc__shm_entry* e = omc__shm_entry_at(S->base, &S->lay, i);
    uint32_t gen = S->tab.ent[i].gen, n = 0;
    int s;
    for (s = 0; s < OMC_SHM_MAX_READERS; s++) {
        uint64_t w = __atomic_load_n(omc__shm_slot(e, (uint32_t)s), __ATOMIC_ACQUIRE);
        uint32_t pid = omc__slot_pid(w);
        if (omc__slot_gen(w) != gen || omc__slot_state(w) != OMC__SLOT_HELD) continue;
        if (omc__shm_reader_alive(S, seen, pid)) continue;
        if (__atomic_compare_exchange_n(omc__shm_slot(e, (uint32_t)s), &w, omc__slot_make(gen, OMC__SLOT_DONE, 0), 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "reader %u (lock byte free: its process is gone) died holding a view of entry %u (%llu bytes) of %s: reclaimed",
                     pid, i, (unsigned long long)S->tab.ent[i].range.size, S->name);
            n++;
        }
    }
    return n;
}

/* Look at one entry (caller holds mu): all its reads taken -> out of the index; nothing
   outstanding either -> freed. */
OMC__PRIVATE void omc__shm_check_entry(omc__shm* S, uint32_t i) {
    omc__shm_count cnt;
    if (S->tab.ent[i].state == OMC__ENT_FREE) return;
    cnt = omc__shm_slots(omc__shm_entry_at(S->base, &S->lay, i), S->tab.ent[i].gen, S->tab.ent[i].readers_left);
    if (cnt.avail == 0) {
        if (cnt.held == 0) omc__shm_free_entry(S, i);
        else omc__shm_unindex(S, i);
    }
}

/* Check the entries whose dirty bit a receiver set, clearing the bits (an exchange per word, so
   a bit set concurrently is either taken now or left for the next look). The bits are only
   hints: a foreign bit makes us look at a healthy entry, nothing more. */
OMC__PRIVATE void omc__shm_drain_dirty(omc__shm* S) {
    uint64_t* sum = omc__shm_dirty_summary(S->base, &S->lay);
    uint64_t* d = omc__shm_dirty(S->base, &S->lay);
    uint32_t sw;
    for (sw = 0; sw < S->lay.summary_words; sw++) {
        uint64_t words;
        if (!__atomic_load_n(&sum[sw], __ATOMIC_RELAXED)) continue;
        words = __atomic_exchange_n(&sum[sw], (uint64_t)0, __ATOMIC_ACQ_REL);
        while (words) {
            uint32_t w = sw * 64 + (uint32_t)__builtin_ctzll(words);
            uint64_t bits;
            words &= words - 1;
            if (w >= S->lay.dirty_words) continue;
            bits = __atomic_exchange_n(&d[w], (uint64_t)0, __ATOMIC_ACQ_REL);
            while (bits) {
                uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
                bits &= bits - 1;
                if (i < S->lay.entry_count) omc__shm_check_entry(S, i);
            }
        }
    }
}

/* The owner's housekeeping (caller holds mu). Cheap on the hot path: one shared load says
   whether anything came back since the last look, and the dirty bitmap says where. Every
   OMC__SHM_PASS_NS (or when full is set) a full walk of the entries in flight also applies
   TTLs, reclaims views of dead readers, and catches a release whose dirty bit was lost.
   Returns the entries withdrawn by TTL plus the views reclaimed from dead readers. */
OMC__PRIVATE uint64_t omc__shm_pass(omc__shm* S, omc_time_ns now, int full) {
    uint32_t i, next;
    uint64_t ttl = 0, dead = 0;
    omc__shm_pids seen;
    seen.n = 0;
    omc__shm_drain_dirty(S);        /* looks at the summary words first: nothing to do, no store */
    if (!full && now < S->next_pass) return 0;
    for (i = S->tab.used_head; i != OMC__NIL; i = next) {
        omc__ent* o = &S->tab.ent[i];
        next = o->next;
        if (o->state == OMC__ENT_LIVE && o->expires && now >= o->expires) {
            OMC__LOG(&S->conn->hooks, OMC_LOG_INFO, OMC_LOGITEM_CONN_TTL_RECLAIM, "TTL reclaimed entry %u (%llu bytes)",
                     i, (unsigned long long)o->range.size);
            omc__shm_retire(S, i);
            ttl++;
        }
        dead += omc__shm_reclaim_dead_readers(S, i, &seen);
        omc__shm_check_entry(S, i);
    }
    __atomic_store_n(&S->next_pass, now + OMC__SHM_PASS_NS, __ATOMIC_RELAXED);   /* also read without mu */
    S->last_full = now;
    if (ttl) omc__add(&S->conn->ttl_reclaims, ttl);
    return ttl + dead;
}

/* Out of entries or pool space: look at what came back, and walk everything if that has not
   been done for a while (a crashed reader's release leaves no dirty bit). */
OMC__PRIVATE void omc__shm_reclaim_harder(omc__shm* S, omc_time_ns now) {
    omc__shm_pass(S, now, now - S->last_full >= OMC__SHM_FULL_MIN_NS);
}

/* Write entry i for a new put and make it visible: fields first, then the slots, then gen (the
   seqlock), then the index bucket, then put_seq. Each store is a release, so a reader that sees
   the bucket sees the entry, and one that claims a slot sees the payload bytes. Returns the wake-up
   class to wake (after the mutex is released), or 0 when no getter of that class sleeps. */
OMC__PRIVATE uint32_t omc__shm_publish(omc__shm* S, uint32_t i, uint32_t gen, const omc_range* range, uint64_t size, uint32_t flags,
                                       uint32_t readers, const omc__shm_key* k, omc_time_ns now, omc_time_ns expires) {
    omc__shm_entry* e = omc__shm_entry_at(S->base, &S->lay, i);
    uint32_t s;
    __atomic_store_n(&e->gen, 0u, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);    /* seqlock: gen 0 is visible before any field changes */
    __atomic_store_n(&e->flags, flags, __ATOMIC_RELAXED);
    __atomic_store_n(&e->offset, range->offset, __ATOMIC_RELAXED);
    __atomic_store_n(&e->size, size, __ATOMIC_RELAXED);
    __atomic_store_n(&e->readers, readers, __ATOMIC_RELAXED);
    __atomic_store_n(&e->key_len, k->len, __ATOMIC_RELAXED);
    __atomic_store_n(&e->key_hash, k->hash, __ATOMIC_RELAXED);
    __atomic_store_n(&e->put_time_ns, now, __ATOMIC_RELAXED);
    __atomic_store_n(&e->expires_ns, expires, __ATOMIC_RELAXED);
    for (s = 0; s < k->nwords; s++) __atomic_store_n(&e->key[s], k->words[s], __ATOMIC_RELAXED);
    for (s = 0; s < readers; s++)   /* the other slots are empty: zeroed when the entry was freed */
        __atomic_store_n(omc__shm_slot(e, (uint32_t)s), omc__slot_make(gen, OMC__SLOT_AVAILABLE, 0), __ATOMIC_RELEASE);
    __atomic_store_n(&e->gen, gen, __ATOMIC_RELEASE);
    omc__shm_index_add(S, i);
    /* put_seq's line, written by the owner only (under mu): plain stores, no locked instruction
       before the bump, which orders them */
    __atomic_store_n(&S->hdr->puts, __atomic_load_n(&S->hdr->puts, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&S->hdr->last_entry, i + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&S->hdr->last_offset, range->offset, __ATOMIC_RELAXED);
    {   /* the class flag is cleared in the same step as the bump: returns it if it was set */
        uint32_t bit = omc__shm_wake_bit(k->hash);
        return omc__shm_seq_bump(&S->hdr->put_seq, bit) & bit;
    }
}

/* The metadata body (see the manual): where the payload is, and for inline payloads the bytes. */
OMC__PRIVATE omc_result omc__shm_make_meta(omc__shm* S, uint32_t i, uint32_t gen, const omc_range* range, uint64_t size,
                                           uint32_t flags, const char* qkey, uint32_t qlen, omc_meta* meta_out) {
    uint32_t nlen = S->name_len;
    uint32_t body_len = OMC__SHM_BODY_FIXED + nlen + ((flags & OMC__SHM_ENTRY_INLINE) ? (uint32_t)size : 0u);
    uint32_t mflags = ((flags & OMC__SHM_ENTRY_INLINE) ? OMC_META_FLAG_INLINE : 0u) | ((flags & OMC__SHM_ENTRY_FRAME) ? OMC_META_FLAG_FRAME : 0u);
    uint8_t* body;
    omc_result r = omc__meta_begin(OMC_TRANSPORT_SHM, mflags, size, qkey, qlen, body_len, meta_out, &body);
    if (r != OMC_OK) return r;
    memset(body, 0, OMC__SHM_BODY_FIXED);
    omc__shm_le64(body + 0, S->seg_id);
    omc__shm_le64(body + 8, S->ino);
    omc__shm_le32(body + 16, S->pid);
    omc__shm_le32(body + 20, i);
    omc__shm_le32(body + 24, gen);
    omc__shm_le64(body + 32, range->offset);
    omc__shm_le64(body + 40, size);
    body[48] = (uint8_t)nlen;
    memcpy(body + OMC__SHM_BODY_FIXED, S->name, nlen);
    if (flags & OMC__SHM_ENTRY_INLINE) memcpy(body + OMC__SHM_BODY_FIXED + nlen, S->base + S->lay.data_off + range->offset, (size_t)size);
    omc__meta_seal(meta_out);
    return OMC_OK;
}

/* Register a filled range under qkey (caller holds mu); meta_out NULL: the caller wants no
   metadata. On error nothing changed. */
OMC__PRIVATE omc_result omc__shm_register(omc__shm* S, const omc__shm_key* k, const omc_range* range, uint64_t size,
                                          uint32_t flags, uint32_t readers, int64_t ttl_ms, omc_time_ns now, omc_meta* meta_out,
                                          uint32_t* wake) {
    uint32_t i, gen, old;
    omc__ent* o;
    omc_result r;
    old = omc__etab_find(&S->tab, k->s, k->len, k->hash);
    if (old != OMC__NIL) {
        omc__shm_count cnt = omc__shm_slots(omc__shm_entry_at(S->base, &S->lay, old), S->tab.ent[old].gen, S->tab.ent[old].readers_left);
        if (cnt.avail > 0) {
            char shown[OMC_KEY_MAX + 1];
            OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "put of '%s' on channel '%s' (sender side, segment %s) refused: "
                     "the key's previous put still has %u unread read%s. Fix: let it be consumed, omc_conn_cleanup it, or use a "
                     "new key", omc__shm_key_show(k, shown, sizeof(shown)), S->channel, S->name, cnt.avail, cnt.avail == 1 ? "" : "s");
            return OMC_ERR_EXISTS;
        }
        omc__shm_unindex(S, old);   /* fully read: the key is free again, views drain on their own */
    }
    if (S->tab.free_head == OMC__NIL) omc__shm_reclaim_harder(S, omc_now_ns());
    r = omc__etab_add(&S->tab, k->s, k->len, k->hash, &i);
    if (r == OMC_ERR_POOL_FULL)
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "all %u entries of %s are in flight: raise max_entries, or release views",
                 S->lay.entry_count, S->name);
    if (r != OMC_OK) return r;
    o = &S->tab.ent[i];
    gen = o->gen;
    r = meta_out ? omc__shm_make_meta(S, i, gen, range, size, flags, k->s, k->len, meta_out) : OMC_OK;
    if (r != OMC_OK) { omc__etab_drop(&S->tab, i, 1); return r; }
    o->range = *range;
    o->size = size;
    o->readers_left = readers;
    o->expires = omc__expiry(ttl_ms, ttl_ms, now);
    *wake = omc__shm_publish(S, i, gen, range, size, flags, readers, k, now, o->expires);
    return OMC_OK;
}

/* Take back what receivers released, when anything was (one shared load says so). */
OMC__PRIVATE void omc__shm_reclaim_released(omc__shm* S, omc_time_ns now) {
    if (!omc__shm_released_any(S->base, &S->lay)) return;
    omc__shm_mu_lock(S);
    omc__shm_pass(S, now, 0);
    omc__shm_mu_unlock(S);
}

/* A put's housekeeping, done after it is published (so it is not on the path from the put to
   its reader): what came back, and the periodic pass (TTLs, dead readers) when it is due. */
OMC__PRIVATE void omc__shm_housekeep(omc__shm* S, omc_time_ns now) {
    if (now < __atomic_load_n(&S->next_pass, __ATOMIC_RELAXED)) { omc__shm_reclaim_released(S, now); return; }
    omc__shm_mu_lock(S);
    omc__shm_pass(S, now, 0);
    omc__shm_mu_unlock(S);
}

/* Payloads from this size on reclaim before they allocate: the range just released is then the
   one handed out again, still warm in the cache, instead of the next cold one (at this size the
   copy costs far more than the look). Smaller ones leave it to the housekeeping after the put. */
#define OMC__SHM_WARM_REUSE_MIN ((uint64_t)64 << 10)

/* A range of the pool. When the pool is full, reclaim harder and try once more. */
OMC__PRIVATE omc_result omc__shm_alloc_range(omc__shm* S, uint64_t size, omc_time_ns now, omc_range* out) {
    omc_alloc* a = omc_pool_allocator(S->pool);
    omc_result r;
    if (size >= OMC__SHM_WARM_REUSE_MIN) omc__shm_reclaim_released(S, now);
    r = omc_alloc_alloc(a, size, out);
    if (r != OMC_ERR_POOL_FULL) return r;
    omc__shm_mu_lock(S);
    omc__shm_reclaim_harder(S, omc_now_ns());
    omc__shm_mu_unlock(S);
    return omc_alloc_alloc(a, size, out);
}

/* ============================================================================================== */
/* [SECTION] SHM: the sender half - put, alloc, cleanup                                         */
/* ============================================================================================== */

/* The release of a buffer from omc_conn_alloc that was never put: its range goes back to the
   pool, and its hold on the connector with it. Every such buffer holds a reference, so the pool
   and the segment stay mapped until the last one is released, even after destroy (as views do).
   In a fork()ed child the range is the parent's bookkeeping: only the hold is given back. */
static omc_result omc__shm_alloc_release(omc_buffer* b) {
    omc__shm* S = (omc__shm*)b->owner;
    omc_result r = OMC_OK;
    if (!S) return OMC_ERR_INVALID_ARG;
    if (!omc__shm_foreign(S)) r = omc_alloc_free(omc_pool_allocator(S->pool), b->range);
    if (r == OMC_OK) omc__conn_unref(S->conn);     /* may destroy the connector: nothing after this line */
    return r;
}

static omc_result omc__shm_put_body(omc_conn* c, const char* qkey, uint32_t qlen, const omc_payload* p, omc_meta* meta_out) {
    omc__shm* S = (omc__shm*)c->impl;
    uint64_t size = p->buffer ? (p->size ? p->size : p->buffer->size) : p->size;
    uint32_t readers = p->readers ? p->readers : 1, flags = 0;
    int64_t ttl = p->ttl_ms ? p->ttl_ms : S->default_ttl_ms;
    omc_time_ns now = omc_now_ns();
    omc__shm_key k;
    omc_range range;
    omc_result r;
    uint32_t wake = 0;
    if (readers > OMC_SHM_MAX_READERS) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "fan-out of %u readers: the limit is %d per put", readers, OMC_SHM_MAX_READERS);
        return OMC_ERR_INVALID_ARG;
    }
    r = omc__shm_self_check(S, now, 0);
    if (r != OMC_OK) return r;
    if (p->buffer) {    /* zero copy: a live range of our own pool, filled by the caller */
        if (p->buffer->pool != S->pool || (p->buffer->release_fn && p->buffer->release_fn != omc__shm_alloc_release)) {
            OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "put on channel '%s' (sender side) refused: payload.buffer "
                     "is not a buffer of this connector's pool. Fix: get it from omc_conn_alloc on this connector, or pass "
                     "payload.data instead", S->channel);
            return OMC_ERR_INVALID_ARG;
        }
        r = omc_alloc_check(omc_pool_allocator(S->pool), p->buffer->range);
        if (r != OMC_OK) return r;
        range = p->buffer->range;
    } else {
        r = omc__shm_alloc_range(S, size ? size : 1, now, &range);
        if (r != OMC_OK) return r;
        uint64_t copy_len = 0;
        r = omc__shm_reserve_fill(S, range.offset, size ? size : 1, size ? (const uint8_t*)p->data : NULL, now, &copy_len);
        if (!size) copy_len = 0;
        if (r != OMC_OK) { omc_alloc_free(omc_pool_allocator(S->pool), range); return r; }
        if (copy_len) omc__shm_copy_in(S->base + S->lay.data_off + range.offset, (const uint8_t*)p->data, copy_len);
    }
    /* no metadata wanted (the consumer gets by key): no envelope, no inline copy, no CRC */
    if (meta_out->size == OMC__SHM_META_UNWANTED) { meta_out->size = 0; meta_out = NULL; }
    if (meta_out && S->inline_threshold && size < S->inline_threshold) flags |= OMC__SHM_ENTRY_INLINE;
    if (p->flags & OMC_PAYLOAD_FRAME) flags |= OMC__SHM_ENTRY_FRAME;
    omc__shm_key_make(&k, qkey, qlen);
    omc__shm_mu_lock(S);
    r = omc__shm_register(S, &k, &range, size, flags, readers, ttl, now, meta_out, &wake);
    omc__shm_mu_unlock(S);
    if (r != OMC_OK) {
        if (!p->buffer) omc_alloc_free(omc_pool_allocator(S->pool), range);
        return r;
    }
    if (wake) omc__futex_wake_bits(&S->hdr->put_seq, wake);   /* a getter of this key's class sleeps */
    omc__shm_housekeep(S, now);
    if (p->buffer) {    /* ownership moved to the entry, and with it the buffer's hold on us */
        int held = p->buffer->release_fn != NULL;
        memset(p->buffer, 0, sizeof(*p->buffer));
        if (held) omc__conn_unref(c);
    }
    return OMC_OK;
}

/* A buffer from the pool, reserved in the tmpfs (or given back and the reason returned). */
OMC__PRIVATE omc_result omc__shm_reserve_buffer(omc__shm* S, omc_result r, omc_buffer* out) {
    if (r != OMC_OK) return r;
    r = omc__shm_reserve(S, out->range.offset, out->size ? out->size : 1);
    if (r != OMC_OK) { omc_buffer_release(out); return r; }
    out->release_fn = omc__shm_alloc_release;
    out->owner = S;
    omc__conn_ref(S->conn);
    return OMC_OK;
}

/* A buffer for a zero-copy put. Space comes back when receivers release: reclaim, and sleep on
   release_seq (a receiver wakes us) until the deadline. */
static omc_result omc__shm_alloc_body(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    omc__shm* S = (omc__shm*)c->impl;
    omc_result r;
    if (!S->is_owner) return OMC_ERR_WRONG_ROLE;
    for (;;) {
        uint32_t seen;
        r = omc__shm_self_check(S, omc_now_ns(), 0);     /* before the first touch of the segment */
        if (r != OMC_OK) return r;
        seen = __atomic_load_n(&S->hdr->release_seq, __ATOMIC_SEQ_CST);
        omc__shm_reclaim_released(S, omc_now_ns());
        r = omc_pool_alloc_buffer(S->pool, size, out);
        if (r != OMC_ERR_POOL_FULL) return omc__shm_reserve_buffer(S, r, out);
        omc__shm_mu_lock(S);
        omc__shm_reclaim_harder(S, omc_now_ns());
        omc__shm_mu_unlock(S);
        r = omc_pool_alloc_buffer(S->pool, size, out);
        if (r != OMC_ERR_POOL_FULL) return omc__shm_reserve_buffer(S, r, out);
        if (omc__load(&c->closed)) return OMC_ERR_CLOSED;
        if (omc_now_ns() >= deadline) {
            OMC__LOG(&c->hooks, OMC_LOG_INFO, OMC_LOGITEM_ALLOC_TIMEOUT, "no %llu-byte range of %s came free before the deadline",
                     (unsigned long long)size, S->name);
            return OMC_ERR_TIMEOUT;
        }
        /* the flag, then a look at what came back since (see omc__shm_notify_release): a release
           after the look sees the flag and bumps release_seq, so the sleep on seen ends.
           Short slices: a buffer released by a thread of this process sets no bit */
        __atomic_store_n(&S->hdr->owner_sleeping, 1u, __ATOMIC_SEQ_CST);
        if (!omc__shm_released_any(S->base, &S->lay) && __atomic_load_n(&S->hdr->release_seq, __ATOMIC_SEQ_CST) == seen)
            omc__futex_wait(&S->hdr->release_seq, seen, deadline, 10000000LL);
    }
}

/* Cleanup by the owner: withdraw the reads that remain (views already held stay valid). */
OMC__PRIVATE omc_result omc__shm_owner_cleanup(omc__shm* S, const omc__shm_key* k) {
    uint32_t i;
    omc_result r = OMC_ERR_NOT_FOUND;
    omc__shm_mu_lock(S);
    i = omc__etab_find(&S->tab, k->s, k->len, k->hash);
    if (i != OMC__NIL) {
        omc__shm_count cnt;
        omc__shm_retire(S, i);
        cnt = omc__shm_slots(omc__shm_entry_at(S->base, &S->lay, i), S->tab.ent[i].gen, S->tab.ent[i].readers_left);
        if (cnt.held == 0) omc__shm_free_entry(S, i);
        r = OMC_OK;
    }
    omc__shm_mu_unlock(S);
    return r;
}

/* ============================================================================================== */
/* [SECTION] SHM: the receiver half - mapping peers                                             */
/* ============================================================================================== */

OMC__PRIVATE void omc__shm_peer_free(omc__shm* S, omc__shm_peer* P) {
    if (!P->self) {
        if (P->base) munmap(P->base, (size_t)P->lay.total);
        if (P->fd >= 0) close(P->fd);
    }
    omc__free(&S->conn->hooks, P);
}


/* ---- reader ids ----
   Our reader id in a segment is a byte of its lock range that nobody else holds, write-locked
   by us for as long as the mapping (the fd) lives; the owner reclaims our views only once that
   lock is free. Random picks first (cheap, and a dead reader's id is unlikely to come back
   before its owner reclaimed its views); when they keep landing on held bytes, a walk over the
   held ranges finds a free byte wherever one is left, so a process of our uid that locks nearly
   every byte cannot push us onto an id that is never reclaimed. When none is left the segment
   is refused (OMC_ERR_BUSY) and the log says why, rather than reading with an id nobody frees. */
#define OMC__SHM_ID_TRIES   64u         /* random picks before the walk */
#define OMC__SHM_ID_PROBES  4096u       /* F_OFD_GETLK calls one walk may spend */
#define OMC__SHM_ID_STACK   64u         /* byte ranges a walk keeps to look at */
#define OMC__SHM_SQUAT_SAY_NS 10000000000LL

/* The first byte in [lo, hi) that no other open file description locks, or 0 (none found
   within the probe budget, or the kernel cannot tell). Each probe asks for the whole range and
   learns one held range [s, e): both sides of it are looked at, the lower one first. */
OMC__PRIVATE uint32_t omc__shm_free_byte(int fd, uint32_t lo, uint32_t hi) {
    uint32_t stack_lo[OMC__SHM_ID_STACK], stack_hi[OMC__SHM_ID_STACK], n = 0, probes = OMC__SHM_ID_PROBES;
    stack_lo[n] = lo; stack_hi[n] = hi; n++;
    while (n > 0 && probes > 0) {
        struct flock fl;
        uint64_t s, e;
        n--;
        lo = stack_lo[n]; hi = stack_hi[n];
        if (lo >= hi) continue;
        probes--;
        memset(&fl, 0, sizeof(fl));
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = (off_t)lo;
        fl.l_len = (off_t)(hi - lo);
        if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return 0;
        if (fl.l_type == F_UNLCK) return lo;
        s = (uint64_t)fl.l_start;
        e = fl.l_len == 0 ? (uint64_t)hi : s + (uint64_t)fl.l_len;     /* 0: to the end of the file */
        if (e < hi && n < OMC__SHM_ID_STACK) { stack_lo[n] = (uint32_t)(e > lo ? e : lo); stack_hi[n] = hi; n++; }
        if (s > lo && n < OMC__SHM_ID_STACK) { stack_lo[n] = lo; stack_hi[n] = (uint32_t)(s < hi ? s : hi); n++; }
    }
    return 0;
}

/* Take a reader id in the segment open on fd (caller holds rmu). OMC_ERR_BUSY when every id is
   held by someone else. Without OFD locks (kernels before 3.15) claims carry an id no owner
   ever reclaims (never reclaim on doubt: views of a reader that dies then stay held until the
   owner closes), and the log says so once. */
OMC__PRIVATE omc_result omc__shm_take_reader_id(omc__shm* S, int fd, const char* path, uint32_t* out) {
    uint32_t k, id;
    int le = EAGAIN;
    omc_time_ns now;
    *out = 0;
    for (k = 0; k < OMC__SHM_ID_TRIES && le == EAGAIN; k++) {
        id = 1u + (uint32_t)(omc__random_u64() % (OMC__SHM_READER_IDS - 1u));
        le = omc__shm_lock(fd, id, F_WRLCK);
        if (le == 0) { *out = id; return OMC_OK; }
    }
    for (k = 0; k < 4 && le == EAGAIN; k++) {   /* 4: another reader may take the byte we found first */
        id = omc__shm_free_byte(fd, 1u, OMC__SHM_READER_IDS);
        if (id == 0) break;
        le = omc__shm_lock(fd, id, F_WRLCK);
        if (le == 0) { *out = id; return OMC_OK; }
    }
    if (le != EAGAIN) {
        if (!S->no_ofd_said) {
            S->no_ofd_said = 1;
            OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "cannot lock a reader id in %s (%s): this kernel has no OFD "
                     "locks, so views of a reader that dies stay held until their owner closes. Fix: Linux 3.15 or later", path, strerror(le));
        }
        *out = OMC__SHM_SELF_READER;
        return OMC_OK;
    }
    now = omc_now_ns();
    if (!S->squat_said || now - S->squat_said >= OMC__SHM_SQUAT_SAY_NS) {
        S->squat_said = now;
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "segment %s refused: all %u reader ids (lock bytes 1..%u) are "
                 "held by other open descriptions of it, so a reader here could not be told apart from a dead one. Another "
                 "process of uid %u holds them all: find it with `lslocks` (it holds a lock on that file) and stop it",
                 path, OMC__SHM_READER_IDS - 1u, OMC__SHM_READER_IDS - 1u, S->uid);
    }
    return OMC_ERR_BUSY;
}

/* Open and map a sender's segment by name, checking everything before the first byte is touched:
   a regular file (never through a symlink), owned by our uid, whose size matches the geometry its
   header describes (the header is read with pread, so a lying size can never fault), READY, and -
   when the caller knows them from metadata - with the expected segment id and inode (a segment
   that was unlinked and recreated under the same name has another inode). 0 = anything. */
OMC__PRIVATE omc_result omc__shm_peer_open(omc__shm* S, const char* name, uint64_t want_id, uint64_t want_ino, omc__shm_peer** out) {
    omc__shm_header h;
    omc__shm_layout lay;
    omc__shm_peer* P;
    struct stat st;
    char path[OMC_SHM_PATH_MAX];
    const char* why = NULL;
    char vwhy[160];
    void* p;
    int fd, e;
    omc_result r = OMC_OK;
    *out = NULL;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", S->dir, name) >= sizeof(path)) return OMC_ERR_INVALID_ARG;
    fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        e = errno;
        if (e == ENOENT) return OMC_ERR_NOT_FOUND;
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "cannot open segment %s: %s%s", path, strerror(e),
                 e == ELOOP ? " (a symbolic link: refused, segments are never reached through links)" : "");
        return e == ELOOP || e == EACCES || e == EPERM ? OMC_ERR_SHM_CHANGED : OMC_ERR_SYSTEM;
    }
    memset(&lay, 0, sizeof(lay));
    if (fstat(fd, &st) != 0) { why = "fstat failed"; r = OMC_ERR_SYSTEM; }
    else if (!S_ISREG(st.st_mode) || (uint32_t)st.st_uid != S->uid) { why = "not a regular file owned by our uid"; r = OMC_ERR_SHM_CHANGED; }
    else if ((uint64_t)st.st_size < OMC__SHM_HEADER_SIZE || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        /* found by a scan, empty or not reserved yet: an owner creating its segment (it holds
           its lock from the first moment) is no alarm; we look again on the next scan. Named by
           metadata, the segment was complete once: now it is damaged. */
        if (!want_id && (st.st_size == 0 || omc__shm_lock_held(fd, OMC__SHM_LOCK_OWNER) == 1)) r = OMC_ERR_NOT_FOUND;
        else { why = "shorter than a segment header"; r = OMC_ERR_SHM_CHANGED; }
    }
    else if (h.state == OMC__SHM_CREATING || h.state == OMC__SHM_CLOSED)
        r = OMC_ERR_NOT_FOUND;      /* header still being written, or closed by its owner: silent */
    else if ((r = omc__shm_layout_check(&h, (uint64_t)st.st_size, &lay)) != OMC_OK) {
        if (r == OMC_ERR_VERSION) {
            snprintf(vwhy, sizeof(vwhy), "it was written by another omniconn release (segment layout version %u; this release "
                     "reads version %u): run the same release on both sides", (unsigned)h.version, (unsigned)OMC__SHM_VERSION);
            why = vwhy;
        } else why = "its header does not match its size or layout";
    }
    else if (h.owner_uid != S->uid) { why = "its header names another owner uid"; r = OMC_ERR_SHM_CHANGED; }
    else if ((want_id && h.segment_id != want_id) || (want_ino && (uint64_t)st.st_ino != want_ino)) {
        why = "it was replaced: segment id or inode differ from the metadata"; r = OMC_ERR_SHM_CHANGED;
    }
    else if (h.state != OMC__SHM_READY) r = OMC_ERR_NOT_FOUND;    /* being created, or closed by its owner */
    if (r != OMC_OK) {
        if (why) OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "segment %s refused: %s", path, why);
        close(fd);
        return r;
    }
    /* no MAP_POPULATE: the owner's pages are all there already (tmpfs, reserved and touched by
       the owner), so a receiver's first touch of a page is a minor fault of about a
       microsecond, and only for the pages it reads; populating the whole mapping would make
       the first get cost time proportional to the sender's pool (0.2 s for 1 GiB) */
    p = mmap(NULL, (size_t)lay.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        e = errno;
        OMC__LOG(&S->conn->hooks, OMC_LOG_ERROR, OMC_LOGITEM_SHM, "cannot map segment %s: %s", path, strerror(e));
        close(fd);
        return OMC_ERR_NO_MEMORY;
    }
    P = (omc__shm_peer*)omc__calloc(&S->conn->hooks, sizeof(omc__shm_peer));
    if (!P) { munmap(p, (size_t)lay.total); close(fd); return OMC_ERR_NO_MEMORY; }
    r = omc__shm_take_reader_id(S, fd, path, &P->reader_id);
    if (r != OMC_OK) {
        omc__free(&S->conn->hooks, P);
        munmap(p, (size_t)lay.total);
        close(fd);
        return r;
    }
    snprintf(P->name, sizeof(P->name), "%s", name);
    P->fd = fd;
    P->base = (uint8_t*)p;
    P->hdr = (omc__shm_header*)p;
    P->lay = lay;
    P->seg_id = h.segment_id;
    P->ino = (uint64_t)st.st_ino;
    P->owner_pid = h.owner_pid;
    P->checked = omc_now_ns();
    *out = P;
    return OMC_OK;
}

/* Is a mapped peer still safe to touch? fstat at most every OMNICONN_SHM_RECHECK_NS (or now if
   force): a segment whose size changed is marked broken for good (touching it could SIGBUS); one
   whose name is gone still holds valid data (our mapping keeps it) and is dropped when unused. */
OMC__PRIVATE omc_result omc__shm_peer_check(omc__shm* S, omc__shm_peer* P, omc_time_ns now, int force) {
    struct stat st;
    if (P->broken != OMC_OK) return P->broken;
    if (P->self) return omc__shm_self_check(S, now, force);
    if (!force && now - P->checked < OMNICONN_SHM_RECHECK_NS) return OMC_OK;
    P->checked = now;
    if (fstat(P->fd, &st) != 0) return OMC_OK;
    if (st.st_nlink == 0) P->unlinked = 1;
    if ((uint64_t)st.st_size != P->lay.total) {
        P->broken = OMC_ERR_SHM_CHANGED;
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "segment %s was truncated from %llu to %llu bytes by another process: "
                 "no longer touched", P->name, (unsigned long long)P->lay.total, (unsigned long long)st.st_size);
    }
    return P->broken;
}

OMC__PRIVATE void omc__shm_peer_drop(omc__shm* S, omc__shm_peer* P) {
    omc__smap_del(&S->peers, &S->conn->hooks, P->name, (uint32_t)strlen(P->name));
    omc__shm_peer_free(S, P);
}

/* The peer a metadata blob names (caller holds rmu): the cached mapping if it is the same
   segment (id and inode), else a fresh, fully checked one. */
OMC__PRIVATE omc_result omc__shm_peer_get(omc__shm* S, const char* name, uint64_t id, uint64_t ino, omc__shm_peer** out) {
    omc__shm_peer* P = (omc__shm_peer*)omc__smap_get(&S->peers, name, (uint32_t)strlen(name));
    omc_result r;
    *out = NULL;
    if (P && (P->seg_id != id || P->ino != ino)) {
        /* the name now stands for another file than the one we mapped: a replacement */
        if (P->self || P->pins) return OMC_ERR_SHM_CHANGED;
        omc__shm_peer_drop(S, P);
        P = NULL;
    }
    if (!P) {
        r = omc__shm_peer_open(S, name, id, ino, &P);
        if (r != OMC_OK) return r;
        r = omc__smap_put(&S->peers, &S->conn->hooks, P->name, (uint32_t)strlen(P->name), P);
        if (r != OMC_OK) { omc__shm_peer_free(S, P); return r; }
    }
    r = omc__shm_peer_check(S, P, omc_now_ns(), 0);
    if (r != OMC_OK) return r;
    *out = P;
    return OMC_OK;
}

#define OMC__SHM_REFUSED_MAX 65536u     /* names remembered as refused, per connector */

/* Remember a refused name with its inode (caller holds rmu). */
OMC__PRIVATE void omc__shm_refuse(omc__shm* S, const char* name, uint32_t n, uint64_t ino) {
    if (S->refused.count < OMC__SHM_REFUSED_MAX || omc__smap_get(&S->refused, name, n))
        omc__smap_put(&S->refused, &S->conn->hooks, name, n, (void*)(uintptr_t)(ino ? ino : 1));
}

/* Map every segment of our channel that we do not know yet (caller holds rmu). The directory is
   the registry: segment names carry uid and channel, so no other shared state is needed. The
   directory may be world-writable: a name is looked at with fstatat before it is opened, files
   that are not regular or not ours are never opened, and every refusal is remembered (by name
   and inode, as readdir reports them) so the next scans skip it without a system call and the
   log says it once. */
OMC__PRIVATE void omc__shm_scan_channel(omc__shm* S) {
    char prefix[64], first[OMC__SHM_NAME_MAX];
    size_t plen;
    DIR* d = opendir(S->dir);
    struct dirent* de;
    uint32_t foreign = 0, first_uid = 0;
    int dfd;
    if (!d) return;
    dfd = dirfd(d);
    first[0] = '\0';
    plen = (size_t)snprintf(prefix, sizeof(prefix), "omc-%u-%s-", S->uid, S->channel);
    while ((de = readdir(d)) != NULL) {
        omc__shm_peer* P;
        struct stat st;
        void* v;
        size_t n = strlen(de->d_name);
        omc_result r;
        if (n >= OMC__SHM_NAME_MAX || strncmp(de->d_name, prefix, plen) != 0) continue;
        P = (omc__shm_peer*)omc__smap_get(&S->peers, de->d_name, (uint32_t)n);
        if (P) { P->in_channel = 1; continue; }
        v = omc__smap_get(&S->refused, de->d_name, (uint32_t)n);
        if (v && (uint64_t)(uintptr_t)v == ((uint64_t)de->d_ino ? (uint64_t)de->d_ino : 1u)) continue;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(st.st_mode) || (uint32_t)st.st_uid != S->uid) {
            if (!foreign++) { memcpy(first, de->d_name, n + 1); first_uid = (uint32_t)st.st_uid; }   /* n < sizeof(first) */
            omc__shm_refuse(S, de->d_name, (uint32_t)n, (uint64_t)st.st_ino);
            continue;
        }
        r = omc__shm_peer_open(S, de->d_name, 0, 0, &P);
        if (r == OMC_OK && omc__smap_put(&S->peers, &S->conn->hooks, P->name, (uint32_t)n, P) != OMC_OK) {
            omc__shm_peer_free(S, P);
            P = NULL;
        }
        if (r == OMC_ERR_SHM_CHANGED || r == OMC_ERR_VERSION) omc__shm_refuse(S, de->d_name, (uint32_t)n, (uint64_t)st.st_ino);
        if (r == OMC_OK && P) P->in_channel = 1;
    }
    closedir(d);
    if (foreign)
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "%u file%s in %s named like segments of channel '%s' %s not ours "
                 "(e.g. %s: %s of uid %u): ignored, never opened, and not reported again. Fix: remove them, or give this "
                 "pipeline a shm_dir only its uid can write (mkdir -m 0700)", foreign, foreign == 1 ? "" : "s", S->dir, S->channel,
                 foreign == 1 ? "is" : "are", first, "a file or link", first_uid);
}

/* Unmap the segments nobody uses any more whose name is gone or that broke (caller holds rmu):
   a mapping pins its memory, so an unused mapping of a dead segment would leak RAM. */
OMC__PRIVATE void omc__shm_peers_maintain(omc__shm* S, omc_time_ns now, int force) {
    uint32_t it = 0;
    void* v;
    if (!force && now < S->next_maint) return;
    S->next_maint = now + OMC__SHM_PASS_NS;
    while (omc__smap_next(&S->peers, &it, NULL, NULL, &v)) {    /* deleting while iterating is fine */
        omc__shm_peer* P = (omc__shm_peer*)v;
        if (P->self || P->pins) continue;
        omc__shm_peer_check(S, P, now, 1);
        if (P->broken != OMC_OK || P->unlinked) omc__shm_peer_drop(S, P);
    }
}

/* ============================================================================================== */
/* [SECTION] SHM: the receiver half - views                                                     */
/* ============================================================================================== */

/* A free view record (caller holds rmu): an index into a growable array with a free list, so
   release finds its view in O(1) and a copied, already released handle is detected. */
OMC__PRIVATE omc_result omc__shm_view_new(omc__shm* S, uint32_t* out) {
    uint32_t i;
    if (S->view_free == OMC__NIL) {
        uint32_t ncap = S->view_cap ? S->view_cap * 2 : 64;
        omc__shm_view* nv;
        if (ncap > (1u << 24)) return OMC_ERR_NO_MEMORY;
        nv = (omc__shm_view*)omc__calloc(&S->conn->hooks, sizeof(omc__shm_view) * ncap);
        if (!nv) return OMC_ERR_NO_MEMORY;
        if (S->views) memcpy(nv, S->views, sizeof(omc__shm_view) * S->view_cap);
        omc__free(&S->conn->hooks, S->views);
        for (i = ncap; i-- > S->view_cap;) { nv[i].next_free = S->view_free; S->view_free = i; }
        S->views = nv;
        S->view_cap = ncap;
    }
    i = S->view_free;
    S->view_free = S->views[i].next_free;
    if (++S->views[i].gen == 0) S->views[i].gen = 1;
    S->views[i].used = 1;
    S->views[i].peer = NULL;
    S->views[i].heap = NULL;
    S->views_used++;
    *out = i;
    return OMC_OK;
}

OMC__PRIVATE void omc__shm_view_drop(omc__shm* S, uint32_t i) {
    S->views[i].used = 0;
    S->views[i].peer = NULL;
    S->views[i].heap = NULL;
    S->views[i].next_free = S->view_free;
    S->view_free = i;
    S->views_used--;
}

static omc_result omc__shm_release(omc_buffer* b);

OMC__PRIVATE void omc__shm_fill_view(omc__shm* S, uint32_t vi, void* data, uint64_t size, uint32_t flags, omc_buffer* out) {
    memset(out, 0, sizeof(*out));
    out->data = data;
    out->size = size;
    out->range.offset = 0;
    out->range.size = size;
    out->range.generation = S->views[vi].entry_gen;
    out->range.slot = S->views[vi].entry;
    out->flags = flags;
    out->release_fn = omc__shm_release;
    out->owner = S;
    out->cookie[0] = vi;
    out->cookie[1] = S->views[vi].gen;
}

/* Claim a zero-copy view of entry idx of peer P (caller holds rmu and has checked snap against
   the segment's bounds). OMC_ERR_NOT_FOUND if every read of it is taken. */
OMC__PRIVATE omc_result omc__shm_take_view(omc__shm* S, omc__shm_peer* P, uint32_t idx, const omc__shm_snap* snap, omc_buffer* out) {
    omc__shm_entry* e = omc__shm_entry_at(P->base, &P->lay, idx);
    uint32_t vi, fl = 0;
    int slot;
    omc_result r = omc__shm_view_new(S, &vi);
    if (r != OMC_OK) return r;
    slot = omc__shm_claim(e, snap->gen, OMC__SLOT_HELD, P->reader_id);
    if (slot < 0) { omc__shm_view_drop(S, vi); return OMC_ERR_NOT_FOUND; }
    __atomic_add_fetch(&P->hdr->claims, (uint64_t)1, __ATOMIC_RELAXED);
    S->views[vi].peer = P;
    S->views[vi].entry = idx;
    S->views[vi].entry_gen = snap->gen;
    S->views[vi].slot = (uint32_t)slot;
    P->pins++;
    if (snap->flags & OMC__SHM_ENTRY_FRAME) fl |= OMC_BUFFER_FRAME;
    if (snap->readers > 1) fl |= OMC_BUFFER_READONLY;     /* other readers see the same bytes */
    omc__shm_fill_view(S, vi, P->base + P->lay.data_off + snap->offset, snap->size, fl, out);
    return OMC_OK;
}

/* Does an entry's range lie inside the data area? (The segment is writable by every process of
   our uid: nothing read from it is trusted before this check.) */
OMC__PRIVATE int omc__shm_snap_in_bounds(const omc__shm_peer* P, const omc__shm_snap* s) {
    return s->offset <= P->lay.data_size && s->size <= P->lay.data_size - s->offset && s->readers <= OMC_SHM_MAX_READERS;
}

/* ============================================================================================== */
/* [SECTION] SHM: the receiver half - get with metadata                                         */
/* ============================================================================================== */

/* Two producers of one channel that publish the same key deliver it twice (each segment has its
   own index; a metadata-less get takes whichever it finds first). TCP refuses that at the
   sender; here nobody owns the channel, so the consumer that sees it says so, once per pair of
   segments, naming both processes. Called when key k was found in P (caller holds rmu). */
OMC__PRIVATE void omc__shm_dup_check(omc__shm* S, omc__shm_peer* P, const omc__shm_key* k, omc_time_ns now) {
    uint32_t it = 0;
    void* v;
    while (omc__smap_next(&S->peers, &it, NULL, NULL, &v)) {
        omc__shm_peer* Q = (omc__shm_peer*)v;
        omc__shm_snap snap;
        char shown[OMC_KEY_MAX + 1];
        int64_t idx;
        if (Q == P || !Q->in_channel || Q->seg_id == P->dup_warned || omc__shm_peer_check(S, Q, now, 0) != OMC_OK) continue;
        idx = omc__shm_index_find(Q->base, &Q->lay, k, &snap);
        if (idx < 0 || omc__shm_slots(omc__shm_entry_at(Q->base, &Q->lay, (uint32_t)idx), snap.gen, snap.readers).avail == 0) continue;
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "key '%s' is published by two producers of channel '%s': pid %u "
                 "(%s) and pid %u (%s); each copy will be delivered. Fix: one producer per key - give each producer its own "
                 "channel or its own keys", omc__shm_key_show(k, shown, sizeof(shown)), S->channel, P->owner_pid, P->name, Q->owner_pid, Q->name);
        P->dup_warned = Q->seg_id;
        Q->dup_warned = P->seg_id;
    }
}

/* A payload larger than the caller's buffer (receiver side): say which, how large, and the fix. */
OMC__PRIVATE omc_result omc__shm_too_large(omc__shm* S, const omc__shm_key* k, uint64_t size, uint64_t max_size) {
    char shown[OMC_KEY_MAX + 1];
    OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "get of '%s' on channel '%s' (receiver side) refused: the payload "
             "is %llu bytes, the caller allows %llu. Fix: a buffer of at least %llu bytes", omc__shm_key_show(k, shown, sizeof(shown)), S->channel,
             (unsigned long long)size, (unsigned long long)max_size, (unsigned long long)size);
    return OMC_ERR_TOO_LARGE;
}

typedef struct omc__shm_body {
    uint64_t seg_id, ino, offset, size;
    uint32_t owner_pid, entry, gen;
    char name[OMC__SHM_NAME_MAX];
    const uint8_t* inline_bytes;    /* NULL unless inline */
} omc__shm_body;

/* Decode and check a metadata body (see the manual) against the envelope around it. */
OMC__PRIVATE omc_result omc__shm_parse_body(const omc__shm* S, const omc_meta_info* m, omc__shm_body* b) {
    const uint8_t* p = m->body;
    uint32_t nlen, i;
    int is_inline = (m->flags & OMC_META_FLAG_INLINE) != 0;
    if (m->body_len < OMC__SHM_BODY_FIXED) return OMC_ERR_MALFORMED;
    b->seg_id = omc__get_u64(p);
    b->ino = omc__get_u64(p + 8);
    b->owner_pid = omc__get_u32(p + 16);
    b->entry = omc__get_u32(p + 20);
    b->gen = omc__get_u32(p + 24);
    b->offset = omc__get_u64(p + 32);
    b->size = omc__get_u64(p + 40);
    nlen = p[48];
    if (omc__get_u32(p + 28) != 0 || b->gen == 0 || b->size != m->data_size || nlen == 0 || nlen >= OMC__SHM_NAME_MAX) return OMC_ERR_MALFORMED;
    for (i = 49; i < OMC__SHM_BODY_FIXED; i++) if (p[i]) return OMC_ERR_MALFORMED;
    if ((uint64_t)m->body_len != OMC__SHM_BODY_FIXED + nlen + (is_inline ? b->size : 0)) return OMC_ERR_MALFORMED;
    if (!omc__shm_name_ok((const char*)p + OMC__SHM_BODY_FIXED, nlen, S->uid)) {
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_META_MALFORMED, "metadata names a file that is not an omniconn segment of uid %u", S->uid);
        return OMC_ERR_MALFORMED;
    }
    memcpy(b->name, p + OMC__SHM_BODY_FIXED, nlen);
    b->name[nlen] = '\0';
    b->inline_bytes = is_inline ? p + OMC__SHM_BODY_FIXED + nlen : NULL;
    return OMC_OK;
}

/* Why is the put a metadata blob describes not there? A newer put of the same key: STALE.
   Nothing under that key: consumed, cleaned up or expired: NOT_FOUND. */
OMC__PRIVATE omc_result omc__shm_why_absent(omc__shm_peer* P, const omc__shm_key* k, uint32_t gen) {
    omc__shm_snap snap;
    if (omc__shm_index_find(P->base, &P->lay, k, &snap) >= 0 && snap.gen != gen) return OMC_ERR_STALE;
    return OMC_ERR_NOT_FOUND;
}

/* An inline payload: claim one read (AVAILABLE -> DONE at once: the bytes come from the metadata,
   so no view pins the sender's pool) and hand out a private heap copy. */
OMC__PRIVATE omc_result omc__shm_take_inline(omc__shm* S, omc__shm_peer* P, const omc__shm_body* b, const omc__shm_snap* snap, omc_buffer* out) {
    omc__shm_entry* e = omc__shm_entry_at(P->base, &P->lay, b->entry);
    uint32_t vi;
    void* copy = omc__malloc(&S->conn->hooks, (size_t)(b->size ? b->size : 1));
    omc_result r;
    if (!copy) return OMC_ERR_NO_MEMORY;
    r = omc__shm_view_new(S, &vi);
    if (r != OMC_OK) { omc__free(&S->conn->hooks, copy); return r; }
    if (omc__shm_claim(e, b->gen, OMC__SLOT_DONE, 0) < 0) {
        omc__shm_view_drop(S, vi);
        omc__free(&S->conn->hooks, copy);
        return OMC_ERR_NOT_FOUND;
    }
    __atomic_add_fetch(&P->hdr->claims, (uint64_t)1, __ATOMIC_RELAXED);
    omc__shm_notify_release(P->base, &P->lay, b->entry);   /* the owner may free its pool copy at once */
    if (b->size) memcpy(copy, b->inline_bytes, (size_t)b->size);
    S->views[vi].heap = copy;
    S->views[vi].entry = b->entry;
    S->views[vi].entry_gen = b->gen;
    omc__shm_fill_view(S, vi, copy, b->size, (snap->flags & OMC__SHM_ENTRY_FRAME) ? OMC_BUFFER_FRAME : 0u, out);
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__shm_get_meta(omc__shm* S, const omc__shm_key* k, const omc_meta_info* m, uint64_t max_size, omc_buffer* out) {
    omc__shm_body b;
    omc__shm_peer* P = NULL;
    omc__shm_snap snap;
    omc_result r = omc__shm_parse_body(S, m, &b);
    if (r != OMC_OK) return r;
    omc__shm_rmu_lock(S);
    r = omc__shm_peer_get(S, b.name, b.seg_id, b.ino, &P);
    if (r == OMC_ERR_NOT_FOUND && !omc__shm_pid_alive(b.owner_pid, 0)) r = OMC_ERR_PEER_DEAD;
    if (r == OMC_OK && (b.entry >= P->lay.entry_count ||
                        (!b.inline_bytes && (b.offset > P->lay.data_size || b.size > P->lay.data_size - b.offset)))) {
        OMC__LOG(&S->conn->hooks, OMC_LOG_WARN, OMC_LOGITEM_META_MALFORMED, "metadata points outside segment %s "
                 "(entry %u of %u, range %llu+%llu of %llu)", b.name, b.entry, P->lay.entry_count,
                 (unsigned long long)b.offset, (unsigned long long)b.size, (unsigned long long)P->lay.data_size);
        r = OMC_ERR_MALFORMED;
    }
    if (r == OMC_OK) {
        if (!omc__shm_entry_read(P->base, &P->lay, b.entry, k, &snap) || snap.gen != b.gen)
            r = omc__shm_why_absent(P, k, b.gen);
        else if (snap.offset != b.offset || snap.size != b.size || ((snap.flags & OMC__SHM_ENTRY_INLINE) != 0) != (b.inline_bytes != NULL))
            r = OMC_ERR_MALFORMED;
        else if (max_size && b.size > max_size) { out->size = b.size; r = omc__shm_too_large(S, k, b.size, max_size); }
        else if (b.inline_bytes) r = omc__shm_take_inline(S, P, &b, &snap, out);
        else r = omc__shm_take_view(S, P, b.entry, &snap, out);
    }
    omc__shm_rmu_unlock(S);
    return r;
}

/* ============================================================================================== */
/* [SECTION] SHM: the receiver half - metadata-less get (wait for a key)                        */
/* ============================================================================================== */

/* One look at every segment of the channel (caller holds rmu). OMC_ERR_NOT_FOUND if the key is in
   none of them; then *wait_peer / *wait_seq say what to sleep on (put_seq as read BEFORE the
   lookup, so a put that lands after the lookup is never slept through). latest: we waited for
   the key, so it is most likely the latest put of a segment (look there before the index). */
OMC__PRIVATE omc_result omc__shm_try_channel(omc__shm* S, omc_time_ns now, const omc__shm_key* k, uint64_t max_size, omc_buffer* out,
                                             omc__shm_peer** wait_peer, uint32_t* wait_seq, uint32_t* npeers, int latest) {
    uint32_t it = 0;
    void* v;
    *wait_peer = NULL;
    *npeers = 0;
    while (omc__smap_next(&S->peers, &it, NULL, NULL, &v)) {
        omc__shm_peer* P = (omc__shm_peer*)v;
        omc__shm_snap snap;
        uint32_t seq;
        int64_t idx;
        if (!P->in_channel || omc__shm_peer_check(S, P, now, 0) != OMC_OK) continue;
        seq = __atomic_load_n(&P->hdr->put_seq, __ATOMIC_SEQ_CST);
        idx = latest ? omc__shm_latest_find(P->base, &P->lay, k, &snap) : -1;
        if (idx < 0) idx = omc__shm_index_find(P->base, &P->lay, k, &snap);
        if (idx >= 0 && omc__shm_snap_in_bounds(P, &snap)) {
            omc_result r;
            omc__shm_dup_check(S, P, k, now);
            if (max_size && snap.size > max_size) { out->size = snap.size; return omc__shm_too_large(S, k, snap.size, max_size); }
            r = omc__shm_take_view(S, P, (uint32_t)idx, &snap, out);   /* inline or not: the pool has the bytes */
            if (r != OMC_ERR_NOT_FOUND) return r;
        }
        (*npeers)++;
        if (!*wait_peer || P->self) { *wait_peer = P; *wait_seq = seq; }
    }
    return OMC_ERR_NOT_FOUND;
}

/* Spin on put_seq for spin_ns (the small-payload handoff then costs no system call; forever for
   OMC_SHM_SPIN_FOREVER), then sleep on it with FUTEX_WAIT_BITSET in the class of our key. Never
   longer than a slice, spinning or asleep: new segments may join the channel. *seen_at: the
   clock of the spin's last look when it saw a put (at most 32 pauses old: the caller's look
   that follows needs no clock read of its own, 60-75 ns on the benchmark VM), else 0. */
OMC__PRIVATE void omc__shm_wait_put(omc__shm* S, omc__shm_peer* P, uint32_t seq, omc_time_ns deadline,
                                    omc_time_ns* spin_until, int64_t slice, uint32_t bit, omc_time_ns* seen_at) {
    uint32_t* word = &P->hdr->put_seq, w;
    omc_time_ns now = omc_now_ns(), slice_end = now + slice;
    if (*spin_until == 0) *spin_until = S->spin_ns == OMC_SHM_SPIN_FOREVER ? OMC_WAIT_FOREVER : S->spin_ns > 0 ? now + S->spin_ns : now;
    /* the word is looked at after every pause, the clock (tens of ns) once per 32: a pause costs
       10-50 ns (about 48 ns on the AMD EPYC VM the benchmarks ran on), so 32 of them between two
       looks made a spinning getter notice a put up to 1.6 us late - the whole handoff figure */
    while (((__atomic_load_n(word, __ATOMIC_ACQUIRE) ^ seq) & OMC__SHM_SEQ_MASK) == 0 && now < *spin_until && now < deadline && now < slice_end &&
           !omc__load(&S->conn->closed)) {
        int k;
        for (k = 0; k < 32 && ((__atomic_load_n(word, __ATOMIC_ACQUIRE) ^ seq) & OMC__SHM_SEQ_MASK) == 0; k++) OMC__SHM_PAUSE();
        now = omc_now_ns();
    }
    if (((__atomic_load_n(word, __ATOMIC_ACQUIRE) ^ seq) & OMC__SHM_SEQ_MASK) != 0) {   /* a put: most likely ours */
        omc__shm_prefetch_latest(P->base, &P->lay);
        *seen_at = now;
        return;
    }
    if (now >= deadline || now >= slice_end || omc__load(&S->conn->closed)) return;
    /* our class's flag, set only while the sequence is still the one read before the lookup;
       then sleep on exactly the word we wrote: any put since makes the kernel refuse */
    w = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    if ((w & OMC__SHM_SEQ_MASK) != (seq & OMC__SHM_SEQ_MASK)) return;
    if (!(w & bit) && !__atomic_compare_exchange_n(word, &w, w | bit, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
    omc__futex_wait_bits(word, w | bit, deadline, slice_end - now, bit);
}

/* A get by key: look, wait for a put, look again. The peer waited on stays pinned until the next
   look, which drops the pin under the lock it takes anyway (one lock per look, not two). */
OMC__PRIVATE omc_result omc__shm_get_wait(omc__shm* S, const omc__shm_key* k, omc_time_ns deadline, uint64_t max_size, omc_buffer* out) {
    omc_time_ns spin_until = 0, seen_at = 0;
    omc__shm_peer* pinned = NULL;
    int waited = 0;
    for (;;) {
        omc__shm_peer* wp = NULL;
        uint32_t wseq = 0, npeers = 0, idle = __atomic_load_n(&S->idle_word, __ATOMIC_ACQUIRE);
        omc_time_ns now;
        omc_result r;
        omc__shm_rmu_lock(S);
        if (pinned) { pinned->pins--; pinned = NULL; }
        if (omc__load(&S->conn->closed)) { omc__shm_rmu_unlock(S); return OMC_ERR_CLOSED; }
        now = seen_at ? seen_at : omc_now_ns();
        seen_at = 0;
        if (now >= S->next_scan) { omc__shm_scan_channel(S); S->next_scan = now + OMC__SHM_SCAN_NS; }
        omc__shm_peers_maintain(S, now, 0);
        r = omc__shm_try_channel(S, now, k, max_size, out, &wp, &wseq, &npeers, waited);
        if (r == OMC_ERR_NOT_FOUND && wp) wp->pins++;   /* keep it mapped while we sleep on it */
        omc__shm_rmu_unlock(S);
        if (r != OMC_ERR_NOT_FOUND) return r;
        if (deadline == OMC_NO_WAIT || omc_now_ns() >= deadline) r = OMC_ERR_TIMEOUT;
        else if (wp) omc__shm_wait_put(S, wp, wseq, deadline, &spin_until, npeers > 1 ? 2000000LL : OMC__SHM_SCAN_NS,
                                       omc__shm_wake_bit(k->hash), &seen_at);
        else omc__futex_wait(&S->idle_word, idle, deadline, OMC__SHM_SCAN_NS / 2);  /* no sender yet */
        if (r == OMC_ERR_TIMEOUT) {
            if (wp) {
                omc__shm_rmu_lock(S);
                wp->pins--;
                omc__shm_rmu_unlock(S);
            }
            return r;
        }
        pinned = wp;
        waited = 1;
    }
}

static omc_result omc__shm_get(omc_conn* c, const char* qkey, uint32_t qlen, const omc_meta_info* meta, omc_time_ns deadline,
                               uint64_t max_size, omc_buffer* out) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_key k;
    omc_result r;
    if (omc__shm_foreign(S)) return omc__shm_refuse_foreign(S, "get");
    omc__shm_key_make(&k, qkey, qlen);
    r = meta ? omc__shm_get_meta(S, &k, meta, max_size, out) : omc__shm_get_wait(S, &k, deadline, max_size, out);
    if (r == OMC_OK) omc__conn_ref(c);     /* every view keeps the connector (and its mappings) alive */
    return r;
}

/* A view given back in a forked child: forgotten here (the claim in the segment is the
   parent's, and so is its pin); the child's only thread cannot race this, so no lock. */
OMC__PRIVATE omc_result omc__shm_release_foreign(omc__shm* S, omc_buffer* b) {
    uint64_t vi = b->cookie[0];
    omc_conn* c = S->conn;
    if (vi >= S->view_cap || !S->views[vi].used || S->views[vi].gen != b->cookie[1]) return OMC_ERR_STALE;
    omc__free(&c->hooks, S->views[vi].heap);
    omc__shm_view_drop(S, (uint32_t)vi);
    omc__conn_unref(c);     /* never the last reference here: the creator's is never dropped in a child */
    return OMC_OK;
}

/* Give a view back: HELD -> DONE in the sender's segment (no system call unless the owner is
   asleep waiting for space), or free the inline copy. */
static omc_result omc__shm_release(omc_buffer* b) {
    omc__shm* S = (omc__shm*)b->owner;
    omc_conn* c;
    omc_result r = OMC_OK;
    void* heap = NULL;
    uint64_t vi = b->cookie[0];
    if (!S) return OMC_ERR_INVALID_ARG;
    c = S->conn;
    if (omc__shm_foreign(S)) return omc__shm_release_foreign(S, b);
    omc__shm_rmu_lock(S);
    if (vi >= S->view_cap || !S->views[vi].used || S->views[vi].gen != b->cookie[1]) r = OMC_ERR_STALE;
    else {
        omc__shm_view* v = &S->views[vi];
        omc__shm_peer* P = v->peer;
        if (P) {
            if (omc__shm_peer_check(S, P, omc_now_ns(), 0) == OMC_OK) {
                if (omc__shm_unclaim(omc__shm_entry_at(P->base, &P->lay, v->entry), v->slot, v->entry_gen, P->reader_id)) {
                    __atomic_add_fetch(&P->hdr->releases, (uint64_t)1, __ATOMIC_RELAXED);
                    omc__shm_notify_release(P->base, &P->lay, v->entry);
                } else OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "view of %s entry %u was reclaimed before its release", P->name, v->entry);
            }
            if (--P->pins == 0 && !P->self && (P->broken != OMC_OK || P->unlinked)) omc__shm_peer_drop(S, P);
        } else heap = v->heap;
        omc__shm_view_drop(S, (uint32_t)vi);
    }
    omc__shm_rmu_unlock(S);
    if (r != OMC_OK) {
        OMC__LOG(&c->hooks, OMC_LOG_WARN, OMC_LOGITEM_ALLOC_BAD_FREE, "release of a view that is no longer held");
        return r;
    }
    omc__free(&c->hooks, heap);
    omc__add(&c->releases, 1u);
    omc__conn_unref(c);     /* may destroy the connector: nothing after this line */
    return OMC_OK;
}

/* Cleanup by a receiver: withdraw the reads left of a key some sender of our channel holds. */
OMC__PRIVATE omc_result omc__shm_receiver_cleanup(omc__shm* S, const omc__shm_key* k) {
    omc_result r = OMC_ERR_NOT_FOUND;
    omc_time_ns now = omc_now_ns();
    uint32_t it = 0;
    void* v;
    omc__shm_rmu_lock(S);
    if (now >= S->next_scan) { omc__shm_scan_channel(S); S->next_scan = now + OMC__SHM_SCAN_NS; }
    while (omc__smap_next(&S->peers, &it, NULL, NULL, &v)) {
        omc__shm_peer* P = (omc__shm_peer*)v;
        omc__shm_snap snap;
        int64_t idx;
        if (P->self || !P->in_channel || omc__shm_peer_check(S, P, now, 0) != OMC_OK) continue;
        idx = omc__shm_index_find(P->base, &P->lay, k, &snap);
        if (idx >= 0) {
            omc__shm_entry* e = omc__shm_entry_at(P->base, &P->lay, (uint32_t)idx);
            while (omc__shm_claim(e, snap.gen, OMC__SLOT_DONE, 0) >= 0) r = OMC_OK;
            if (r == OMC_OK) omc__shm_notify_release(P->base, &P->lay, (uint32_t)idx);
        }
    }
    omc__shm_rmu_unlock(S);
    return r;
}

/* ============================================================================================== */
/* [SECTION] SHM: connector glue (cleanup, health, sweep, close, destroy, create)               */
/* ============================================================================================== */

static omc_result omc__shm_cleanup_body(omc_conn* c, const char* qkey, uint32_t qlen) {
    omc__shm* S = (omc__shm*)c->impl;
    omc_result r = OMC_ERR_NOT_FOUND;
    omc__shm_key k;
    omc__shm_key_make(&k, qkey, qlen);
    if (S->is_owner) {
        r = omc__shm_self_check(S, omc_now_ns(), 0);
        if (r != OMC_OK) return r;
        r = omc__shm_owner_cleanup(S, &k);
    }
    if (r == OMC_ERR_NOT_FOUND && c->role != OMC_ROLE_SENDER) r = omc__shm_receiver_cleanup(S, &k);
    return r;
}

static void omc__shm_health_body(omc_conn* c, omc_health* h) {
    omc__shm* S = (omc__shm*)c->impl;
    uint32_t it = 0;
    void* v;
    if (S->is_owner) {
        omc_alloc_stats st;
        if (omc__shm_self_check(S, omc_now_ns(), 1) != OMC_OK) h->state = OMC_CONN_DEGRADED;
        else {
            omc__shm_mu_lock(S);
            omc__shm_pass(S, omc_now_ns(), 0);
            omc__shm_mu_unlock(S);
        }
        omc__shm_mu_lock(S);
        h->live_entries = S->tab.live;
        omc__shm_mu_unlock(S);
        omc_alloc_get_stats(omc_pool_allocator(S->pool), &st);
        h->pool_capacity = st.capacity;
        h->pool_in_use = st.bytes_in_use;
    }
    omc__shm_rmu_lock(S);
    while (omc__smap_next(&S->peers, &it, NULL, NULL, &v))
        if (((omc__shm_peer*)v)->pins && ((omc__shm_peer*)v)->broken != OMC_OK) h->state = OMC_CONN_DEGRADED;
    omc__shm_rmu_unlock(S);
}

static uint64_t omc__shm_sweep_body(omc_conn* c) {
    omc__shm* S = (omc__shm*)c->impl;
    uint64_t n = 0;
    if (S->is_owner && omc__shm_self_check(S, omc_now_ns(), 1) == OMC_OK) {
        omc__shm_mu_lock(S);
        n = omc__shm_pass(S, omc_now_ns(), 1);
        omc__shm_shrink_idle(S, omc_now_ns());
        omc__shm_mu_unlock(S);
    }
    omc__shm_rmu_lock(S);
    omc__shm_peers_maintain(S, omc_now_ns(), 1);
    omc__shm_rmu_unlock(S);
    return n;
}

/* Remove our segment's name, but only if the file under it is still ours (same inode): a file
   someone else put there in the meantime is not ours to delete. */
OMC__PRIVATE void omc__shm_unlink_own(omc__shm* S) {
    struct stat st;
    if (lstat(S->path, &st) == 0 && (uint64_t)st.st_ino == S->ino && S_ISREG(st.st_mode)) unlink(S->path);
}

static void omc__shm_close_body(omc_conn* c) {
    omc__shm* S = (omc__shm*)c->impl;
    uint32_t it = 0;
    void* v;
    if (S->is_owner) {
        omc__shm_mu_lock(S);
        if (omc__shm_self_check(S, omc_now_ns(), 1) == OMC_OK) {  /* never touch a mapping someone truncated */
            uint32_t i, next;
            __atomic_store_n(&S->hdr->state, (uint32_t)OMC__SHM_CLOSED, __ATOMIC_RELEASE);
            for (i = S->tab.used_head; i != OMC__NIL; i = next) {
                omc__shm_count cnt;
                next = S->tab.ent[i].next;
                omc__shm_retire(S, i);
                cnt = omc__shm_slots(omc__shm_entry_at(S->base, &S->lay, i), S->tab.ent[i].gen, S->tab.ent[i].readers_left);
                if (cnt.held == 0) omc__shm_free_entry(S, i);
            }
            omc__shm_seq_bump(&S->hdr->put_seq, ~OMC__SHM_SEQ_MASK);
            omc__futex_wake_all(&S->hdr->put_seq);
        }
        __atomic_store_n(&S->unlinked, 1, __ATOMIC_RELEASE);
        omc__shm_unlink_own(S);     /* views held elsewhere keep their mappings, and so the bytes */
        omc__shm_mu_unlock(S);
    }
    omc__shm_rmu_lock(S);   /* wake our getters asleep on any segment: they see closed */
    while (omc__smap_next(&S->peers, &it, NULL, NULL, &v)) {
        omc__shm_peer* P = (omc__shm_peer*)v;
        if (P->pins && P->broken == OMC_OK && !P->self) {
            omc__shm_seq_bump(&P->hdr->put_seq, 0u);     /* its flags stay: other processes' getters */
            omc__futex_wake_all(&P->hdr->put_seq);
        }
    }
    omc__shm_rmu_unlock(S);
    __atomic_add_fetch(&S->idle_word, 1u, __ATOMIC_SEQ_CST);
    omc__futex_wake_all(&S->idle_word);
}

/* Free everything (also for a half-created connector: every field may still be zero). */
OMC__PRIVATE void omc__shm_teardown(omc__shm* S, const omc_hooks* hooks) {
    uint32_t it = 0, i;
    void* v;
    int foreign = omc__shm_foreign(S);
    while (omc__smap_next(&S->peers, &it, NULL, NULL, &v)) omc__shm_peer_free(S, (omc__shm_peer*)v);
    omc__smap_free(&S->peers, hooks);
    omc__smap_free(&S->refused, hooks);
    for (i = 0; i < S->view_cap; i++) if (S->views[i].used) omc__free(hooks, S->views[i].heap);
    omc__free(hooks, S->views);
    if (S->pool) omc_pool_destroy(S->pool);
    if (S->base) munmap(S->base, (size_t)S->lay.total);
    if (S->fd >= 0) close(S->fd);
    omc__etab_uninit(&S->tab);
    if (!foreign) {     /* in a fork()ed child a parent's thread may have held them at the fork */
        pthread_mutex_destroy(&S->mu);
        pthread_mutex_destroy(&S->rmu);
    }
    omc__free(hooks, S);
}

static void omc__shm_destroy(omc_conn* c) { omc__shm_teardown((omc__shm*)c->impl, &c->hooks); }

/* exists and list read what a metadata-less get would: every segment of the channel (our own
   too), through the shared index and entries, lock-free like a reader. A key counts while a
   read of it is still available. */
OMC__PRIVATE void omc__shm_channel_begin(omc__shm* S, omc_time_ns now) {
    omc__shm_rmu_lock(S);
    if (now >= S->next_scan) { omc__shm_scan_channel(S); S->next_scan = now + OMC__SHM_SCAN_NS; }
}

static omc_result omc__shm_exists(omc_conn* c, const char* qkey, uint32_t qlen) {
    omc__shm* S = (omc__shm*)c->impl;
    omc_time_ns now = omc_now_ns();
    omc_result r = OMC_ERR_NOT_FOUND;
    omc__shm_key k;
    uint32_t it = 0;
    if (omc__shm_foreign(S)) return omc__shm_refuse_foreign(S, "exists");
    void* v;
    omc__shm_key_make(&k, qkey, qlen);
    omc__shm_channel_begin(S, now);
    while (r != OMC_OK && omc__smap_next(&S->peers, &it, NULL, NULL, &v)) {
        omc__shm_peer* P = (omc__shm_peer*)v;
        omc__shm_snap snap;
        int64_t idx;
        if (!P->in_channel || omc__shm_peer_check(S, P, now, 0) != OMC_OK) continue;
        idx = omc__shm_index_find(P->base, &P->lay, &k, &snap);
        if (idx >= 0 && omc__shm_slots(omc__shm_entry_at(P->base, &P->lay, (uint32_t)idx), snap.gen, snap.readers).avail > 0) r = OMC_OK;
    }
    omc__shm_rmu_unlock(S);
    return r;
}

/* Seqlock read of entry idx's key: 1 if it is published and a read is still available. */
OMC__PRIVATE int omc__shm_entry_key(uint8_t* base, const omc__shm_layout* L, uint32_t idx, char* out, uint32_t* len) {
    omc__shm_entry* e = omc__shm_entry_at(base, L, idx);
    uint64_t words[OMC__SHM_KEY_WORDS];
    uint32_t g1 = __atomic_load_n(&e->gen, __ATOMIC_ACQUIRE), n, w, readers;
    if (g1 == 0) return 0;
    n = __atomic_load_n(&e->key_len, __ATOMIC_RELAXED);
    readers = __atomic_load_n(&e->readers, __ATOMIC_RELAXED);
    if (n == 0 || n >= OMC_KEY_MAX || n > OMC__SHM_KEY_WORDS * 8) return 0;
    for (w = 0; w < (n + 7) / 8; w++) words[w] = __atomic_load_n(&e->key[w], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&e->gen, __ATOMIC_RELAXED) != g1) return 0;
    if (omc__shm_slots(e, g1, readers).avail == 0) return 0;
    memcpy(out, words, n);
    *len = n;
    return 1;
}

static omc_result omc__shm_list(omc_conn* c, omc__key_sink sink, void* user) {
    omc__shm* S = (omc__shm*)c->impl;
    omc_time_ns now = omc_now_ns();
    omc_result r = OMC_OK;
    uint32_t it = 0;
    void* v;
    if (omc__shm_foreign(S)) return omc__shm_refuse_foreign(S, "list");
    omc__shm_channel_begin(S, now);
    while (r == OMC_OK && omc__smap_next(&S->peers, &it, NULL, NULL, &v)) {
        omc__shm_peer* P = (omc__shm_peer*)v;
        uint32_t i, len;
        char key[OMC_KEY_MAX];
        if (!P->in_channel || omc__shm_peer_check(S, P, now, 0) != OMC_OK) continue;
        for (i = 0; r == OMC_OK && i < P->lay.entry_count; i++)
            if (omc__shm_entry_key(P->base, &P->lay, i, key, &len) && memchr(key, 0x1f, len)) r = sink(key, len, user);
    }
    omc__shm_rmu_unlock(S);
    return r;
}

/* omc_available(OMC_FEATURE_SHM): the default directory exists and we may create files in it. */
static omc_result omc__shm_available(char* why, size_t n) {
    struct statvfs sv;
    if (statvfs(OMNICONN_SHM_DIR, &sv) != 0 || access(OMNICONN_SHM_DIR, W_OK) != 0) {
        if (why && n) snprintf(why, n, "%s is missing or not writable (mount a tmpfs there, or give shm_dir)", OMNICONN_SHM_DIR);
        return OMC_ERR_UNAVAILABLE;
    }
    return OMC_OK;
}
__attribute__((constructor)) static void omc__shm_register_probe(void) { omc__register_probe(OMC_FEATURE_SHM, omc__shm_available); }

/* Puts of this connector whose reads are not all taken yet (after looking at what came back). */
static uint64_t omc__shm_pending_body(omc_conn* c) {
    omc__shm* S = (omc__shm*)c->impl;
    uint64_t n;
    if (!S->is_owner) return 0;
    omc__shm_mu_lock(S);
    omc__shm_pass(S, omc_now_ns(), 1);
    n = S->tab.live;
    omc__shm_mu_unlock(S);
    return n;
}

/* ============================================================================================== */
/* [SECTION] SHM: the owner's guard against a truncated segment                                  */
/* ============================================================================================== */
/*
    Any process of our uid can truncate our segment file; the next touch of a page past the new
    end raises SIGBUS, which kills the process by default. The fstat checks (at most 1 ms old)
    narrow the window but cannot close it. So every owner-side call (put, alloc, cleanup, health,
    sweep, wait_consumed, close) runs under a guard: a SIGBUS handler, installed once by the first
    owner, turns a fault whose address lies inside the segment of the call that is running on
    this thread into OMC_ERR_SHM_CHANGED for that call, marks the connector's segment broken (it
    is never touched again), and lets the process live. Every other SIGBUS - another address,
    another thread, no guarded call running - goes to the handler that was installed before ours,
    or to the default action, exactly as if we were not there. The guard costs a sigsetjmp
    without saving the signal mask (no system call) per call.
    Not guarded: receivers' reads of other processes' segments and the application's own reads
    of a view (the manual's LIMITS).
*/
typedef struct omc__shm_guard {
    sigjmp_buf jb;
    const uint8_t* lo;
    const uint8_t* hi;
    struct omc__shm_guard* prev;
} omc__shm_guard;

static __thread omc__shm_guard* omc__shm_guard_top;
static struct sigaction omc__shm_prev_bus;
static pthread_once_t omc__shm_bus_once = PTHREAD_ONCE_INIT;

static void omc__shm_on_sigbus(int sig, siginfo_t* si, void* uc) {
    omc__shm_guard* g = omc__shm_guard_top;
    struct sigaction dfl;
    if (g && si && (const uint8_t*)si->si_addr >= g->lo && (const uint8_t*)si->si_addr < g->hi) {
        omc__shm_guard_top = g->prev;
        siglongjmp(g->jb, 1);
    }
    if (omc__shm_prev_bus.sa_flags & SA_SIGINFO) {
        if (omc__shm_prev_bus.sa_sigaction) { omc__shm_prev_bus.sa_sigaction(sig, si, uc); return; }
    } else if (omc__shm_prev_bus.sa_handler != SIG_DFL && omc__shm_prev_bus.sa_handler != SIG_IGN) {
        omc__shm_prev_bus.sa_handler(sig);
        return;
    }
    /* nobody else wanted it: the default action. Returning re-runs the faulting access, which
       then ends the process as it would have without us. */
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
}

static void omc__shm_bus_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = omc__shm_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &omc__shm_prev_bus) != 0) memset(&omc__shm_prev_bus, 0, sizeof(omc__shm_prev_bus));
}

OMC__PRIVATE void omc__shm_guard_push(omc__shm* S, omc__shm_guard* g) {
    g->lo = S->base;
    g->hi = S->base ? S->base + S->lay.total : S->base;
    g->prev = omc__shm_guard_top;
    omc__shm_guard_top = g;
}
OMC__PRIVATE void omc__shm_guard_pop(omc__shm_guard* g) { omc__shm_guard_top = g->prev; }

/* After a fault inside a guarded call: SIGBUS is still blocked (we left the handler by a jump
   that did not restore the mask), this thread may hold our mutexes (it noted which), and the
   segment is gone for good. */
OMC__PRIVATE omc_result omc__shm_faulted(omc__shm* S) {
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &ss, NULL);
    if (omc__shm_mu_held == S) omc__shm_mu_unlock(S);
    if (omc__shm_rmu_held == S) omc__shm_rmu_unlock(S);
    if (!__atomic_exchange_n(&S->self_broken, (int)OMC_ERR_SHM_CHANGED, __ATOMIC_ACQ_REL))
        omc__conn_fail(S->conn, OMC_ERR_SHM_CHANGED, "segment %s was truncated by another process while this connector was "
                       "using it (a SIGBUS was caught); this connector stops using it (recreate the connector)", S->path);
    return OMC_ERR_SHM_CHANGED;
}

/* The owner-side entries of the vtable, each under the guard (S only is used after a jump). */
static omc_result omc__shm_put(omc_conn* c, const char* qkey, uint32_t qlen, const omc_payload* p, omc_meta* meta_out) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_guard g;
    omc_result r;
    if (omc__shm_foreign(S)) return omc__shm_refuse_foreign(S, "put");
    if (!S->is_owner) return omc__shm_put_body(c, qkey, qlen, p, meta_out);
    if (sigsetjmp(g.jb, 0)) return omc__shm_faulted(S);
    omc__shm_guard_push(S, &g);
    r = omc__shm_put_body(c, qkey, qlen, p, meta_out);
    omc__shm_guard_pop(&g);
    return r;
}
static omc_result omc__shm_alloc(omc_conn* c, uint64_t size, omc_time_ns deadline, omc_buffer* out) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_guard g;
    omc_result r;
    if (omc__shm_foreign(S)) return omc__shm_refuse_foreign(S, "alloc");
    if (!S->is_owner) return omc__shm_alloc_body(c, size, deadline, out);
    if (sigsetjmp(g.jb, 0)) return omc__shm_faulted(S);
    omc__shm_guard_push(S, &g);
    r = omc__shm_alloc_body(c, size, deadline, out);
    omc__shm_guard_pop(&g);
    return r;
}
static omc_result omc__shm_cleanup(omc_conn* c, const char* qkey, uint32_t qlen) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_guard g;
    omc_result r;
    if (omc__shm_foreign(S)) return omc__shm_refuse_foreign(S, "cleanup");
    if (!S->is_owner) return omc__shm_cleanup_body(c, qkey, qlen);
    if (sigsetjmp(g.jb, 0)) return omc__shm_faulted(S);
    omc__shm_guard_push(S, &g);
    r = omc__shm_cleanup_body(c, qkey, qlen);
    omc__shm_guard_pop(&g);
    return r;
}
static void omc__shm_health(omc_conn* c, omc_health* h) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_guard g;
    if (omc__shm_foreign(S)) { omc__shm_refuse_foreign(S, "health"); h->state = OMC_CONN_CLOSED; return; }
    if (!S->is_owner) { omc__shm_health_body(c, h); return; }
    if (sigsetjmp(g.jb, 0)) { omc__shm_faulted(S); h->state = OMC_CONN_DEGRADED; return; }
    omc__shm_guard_push(S, &g);
    omc__shm_health_body(c, h);
    omc__shm_guard_pop(&g);
}
static uint64_t omc__shm_sweep(omc_conn* c) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_guard g;
    uint64_t n;
    if (omc__shm_foreign(S)) { omc__shm_refuse_foreign(S, "sweep"); return 0; }
    if (!S->is_owner) return omc__shm_sweep_body(c);
    if (sigsetjmp(g.jb, 0)) { omc__shm_faulted(S); return 0; }
    omc__shm_guard_push(S, &g);
    n = omc__shm_sweep_body(c);
    omc__shm_guard_pop(&g);
    return n;
}
static uint64_t omc__shm_pending(omc_conn* c) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_guard g;
    uint64_t n;
    if (omc__shm_foreign(S)) {   /* closed here: wait_consumed answers OMC_ERR_CLOSED, not "all consumed" */
        omc__shm_refuse_foreign(S, "wait_consumed");
        __atomic_store_n(&c->closed, 1, __ATOMIC_RELEASE);
        return 1;
    }
    if (!S->is_owner) return omc__shm_pending_body(c);
    if (sigsetjmp(g.jb, 0)) { omc__shm_faulted(S); return 0; }
    omc__shm_guard_push(S, &g);
    n = omc__shm_pending_body(c);
    omc__shm_guard_pop(&g);
    return n;
}
static void omc__shm_close(omc_conn* c) {
    omc__shm* S = (omc__shm*)c->impl;
    omc__shm_guard g;
    if (omc__shm_foreign(S)) return;    /* the segment, its entries and its name stay the creator's */
    if (!S->is_owner) { omc__shm_close_body(c); return; }
    if (sigsetjmp(g.jb, 0)) {
        omc__shm_faulted(S);
        omc__shm_close_body(c);     /* again: the segment is broken now, so nothing touches it */
        return;
    }
    omc__shm_guard_push(S, &g);
    omc__shm_close_body(c);
    omc__shm_guard_pop(&g);
}

static const omc__conn_vtable omc__shm_vtable = {
    "shm", OMC_TRANSPORT_SHM, omc__shm_put, omc__shm_get, omc__shm_alloc, omc__shm_cleanup,
    omc__shm_health, omc__shm_sweep, omc__shm_close, omc__shm_destroy,
    omc__shm_exists, omc__shm_list, omc__shm_pending, "omc_shm_desc"
};

/* The spin of a desc that leaves it 0: $OMNICONN_SHM_SPIN_US (microseconds; 0 = never spin;
   -1 or "forever" = never sleep), else OMNICONN_SHM_SPIN_NS. A value that is not a number is
   reported and ignored. */
OMC__PRIVATE int64_t omc__shm_spin_default(const omc_hooks* hooks) {
    const char* v = getenv("OMNICONN_SHM_SPIN_US");
    char* end = NULL;
    long long us;
    if (!v || !*v) return OMNICONN_SHM_SPIN_NS;
    if (strcmp(v, "forever") == 0) return OMC_SHM_SPIN_FOREVER;
    errno = 0;
    us = strtoll(v, &end, 10);
    if (errno || !end || *end || us < -1 || us > 60000000LL) {
        OMC__LOG(hooks, OMC_LOG_WARN, OMC_LOGITEM_BAD_ARGUMENT, "OMNICONN_SHM_SPIN_US='%s' ignored: microseconds from 0 to 60000000, "
                 "or -1 / forever to never sleep (the default spin of %lld ns applies)", v, (long long)OMNICONN_SHM_SPIN_NS);
        return OMNICONN_SHM_SPIN_NS;
    }
    return us < 0 ? OMC_SHM_SPIN_FOREVER : us == 0 ? -1 : (int64_t)us * 1000;
}

/* Zero means default; anything impossible is refused with the reason in the log. */
OMC__PRIVATE omc_result omc__shm_resolve(const omc_shm_desc* in, const omc_hooks* hooks, omc_shm_desc* d) {
    *d = *in;
    if (!d->channel) d->channel = "default";
    if (!d->shm_dir) d->shm_dir = OMNICONN_SHM_DIR;
    if (!d->pool_size) d->pool_size = OMNICONN_SHM_POOL_SIZE;
    if (!d->alignment) d->alignment = 4096;
    if (!d->inline_threshold) d->inline_threshold = OMNICONN_SHM_INLINE_THRESHOLD;
    if (!d->max_entries) d->max_entries = OMNICONN_SHM_MAX_ENTRIES;
    if (!d->default_ttl_ms) d->default_ttl_ms = OMNICONN_DEFAULT_TTL_MS;
    if (!d->spin_ns) d->spin_ns = omc__shm_spin_default(hooks);
    if (!omc__shm_channel_ok(d->channel)) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_shm_desc.channel '%s' must be 1..%d characters of [A-Za-z0-9_.]", d->channel, OMC_SHM_CHANNEL_MAX);
        return OMC_ERR_INVALID_ARG;
    }
    if (!d->shm_dir[0] || strlen(d->shm_dir) + OMC__SHM_NAME_MAX + 2 > OMC_SHM_PATH_MAX) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_shm_desc.shm_dir must be a directory path of 1..%d bytes", OMC_SHM_PATH_MAX - OMC__SHM_NAME_MAX - 2);
        return OMC_ERR_INVALID_ARG;
    }
    if (d->alignment < 64 || d->alignment > OMC__SHM_PAGE || (d->alignment & (d->alignment - 1))) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_shm_desc.alignment %llu: a power of two from 64 to %u (the segment is page-aligned; 0 = 4096)",
                 (unsigned long long)d->alignment, OMC__SHM_PAGE);
        return OMC_ERR_INVALID_ARG;
    }
    if (d->inline_threshold > OMC_SHM_MAX_INLINE) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_shm_desc.inline_threshold %llu exceeds the maximum %llu (the metadata body limit)",
                 (unsigned long long)d->inline_threshold, (unsigned long long)OMC_SHM_MAX_INLINE);
        return OMC_ERR_INVALID_ARG;
    }
    if (d->max_entries > OMC__SHM_MAX_ENTRIES) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_shm_desc.max_entries %u is too many: at most %u (0 = %u)",
                 d->max_entries, OMC__SHM_MAX_ENTRIES, OMNICONN_SHM_MAX_ENTRIES);
        return OMC_ERR_INVALID_ARG;
    }
    if (d->pool_size < d->alignment || d->pool_size > ((uint64_t)1 << 46)) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_shm_desc.pool_size %llu bytes is out of range: at least the "
                 "alignment (%llu bytes), at most 64 TiB (0 = %llu MiB)", (unsigned long long)d->pool_size,
                 (unsigned long long)d->alignment, (unsigned long long)(OMNICONN_SHM_POOL_SIZE >> 20));
        return OMC_ERR_INVALID_ARG;
    }
    if (d->role != OMC_ROLE_DEFAULT && d->role != OMC_ROLE_SENDER && d->role != OMC_ROLE_RECEIVER && d->role != OMC_ROLE_DUAL) {
        OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_shm_desc.role %d: use OMC_ROLE_SENDER, OMC_ROLE_RECEIVER or "
                 "OMC_ROLE_DUAL (0 = dual)", (int)d->role);
        return OMC_ERR_INVALID_ARG;
    }
    return OMC_OK;
}

/* The sender half: segment, pool over its data area, entry records, and our own segment as a
   peer (a dual connector reads its own puts through the same path as everyone else's). */
OMC__PRIVATE omc_result omc__shm_owner_init(omc__shm* S, const omc_shm_desc* d, const omc_hooks* hooks) {
    omc_pool_desc pd;
    omc__shm_peer* P;
    omc_result r = omc__shm_owner_create(S, hooks, d->pool_size, d->alignment, d->max_entries, d->no_prefault, d->reserve_all);
    if (r != OMC_OK) return r;
    S->is_owner = 1;
    memset(&pd, 0, sizeof(pd));
    pd.size = S->lay.data_size;
    pd.alignment = d->alignment;
    pd.memory = OMC_MEMORY_EXTERNAL;    /* the allocator's bookkeeping stays in our heap */
    pd.external_base = S->base + S->lay.data_off;
    pd.thread_safe = 1;
    pd.hooks = *hooks;
    r = omc_pool_create(&pd, &S->pool);
    if (r != OMC_OK) return r;
    r = omc__etab_init(&S->tab, hooks, omc_pool_allocator(S->pool), S->lay.entry_count, S->lay.entry_count);
    if (r != OMC_OK) return r;
    P = (omc__shm_peer*)omc__calloc(hooks, sizeof(omc__shm_peer));
    if (!P) return OMC_ERR_NO_MEMORY;
    snprintf(P->name, sizeof(P->name), "%s", S->name);
    P->fd = S->fd;
    P->base = S->base;
    P->hdr = S->hdr;
    P->lay = S->lay;
    P->seg_id = S->seg_id;
    P->ino = S->ino;
    P->owner_pid = S->pid;
    P->reader_id = OMC__SHM_SELF_READER;
    P->self = 1;
    P->in_channel = 1;
    r = omc__smap_put(&S->peers, hooks, P->name, (uint32_t)strlen(P->name), P);
    if (r != OMC_OK) { omc__free(hooks, P); return r; }
    S->self_peer = P;
    return OMC_OK;
}

OMNICONN_API omc_result omc_shm_create(const omc_shm_desc* desc, omc_conn** out) {
    omc_shm_desc zero, d;
    omc_hooks hooks;
    omc__shm* S;
    omc_conn* c = NULL;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    memset(&zero, 0, sizeof(zero));
    hooks = omc__hooks_resolve(desc ? &desc->hooks : NULL);
    r = omc__shm_resolve(desc ? desc : &zero, &hooks, &d);
    if (r != OMC_OK) return r;
    S = (omc__shm*)omc__calloc(&hooks, sizeof(omc__shm));
    if (!S) return OMC_ERR_NO_MEMORY;
    S->fd = -1;
    snprintf(S->dir, sizeof(S->dir), "%s", d.shm_dir);
    snprintf(S->channel, sizeof(S->channel), "%s", d.channel);
    S->inline_threshold = d.disable_inline ? 0 : d.inline_threshold;
    S->default_ttl_ms = d.default_ttl_ms;
    S->spin_ns = d.spin_ns;
    S->uid = (uint32_t)geteuid();
    S->pid = (uint32_t)getpid();
    pthread_once(&omc__shm_fork_once, omc__shm_fork_install);
    S->forks = __atomic_load_n(&omc__shm_forks, __ATOMIC_RELAXED);
    S->start_time = omc__shm_self_start_time();
    S->view_free = OMC__NIL;
    if (pthread_mutex_init(&S->mu, NULL) != 0 || pthread_mutex_init(&S->rmu, NULL) != 0) { omc__free(&hooks, S); return OMC_ERR_SYSTEM; }
    r = omc__conn_create(&hooks, &omc__shm_vtable, d.role, &c);
    if (r != OMC_OK) { omc__shm_teardown(S, &hooks); return r; }
    c->impl = S;
    S->conn = c;
    if (access(S->dir, W_OK | X_OK) != 0) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_SHM, "shared-memory directory %s is missing or not writable: %s "
                 "(mount a tmpfs there, or set shm_dir)", S->dir, strerror(errno));
        r = OMC_ERR_UNAVAILABLE;
    }
    if (r == OMC_OK) omc_shm_sweep_dead(&d, NULL);  /* segments of dead owners go first */
    if (r == OMC_OK && c->role != OMC_ROLE_RECEIVER) {
        pthread_once(&omc__shm_bus_once, omc__shm_bus_install);
        r = omc__shm_owner_init(S, &d, &hooks);
        if (r != OMC_OK && S->base) omc__shm_unlink_own(S);
    }
    if (r != OMC_OK) { omc__conn_unref(c); return r; }
    *out = c;
    return OMC_OK;
}

OMNICONN_API omc_result omc_shm_segment_path(omc_conn* c, char* out, size_t out_size) {
    omc__shm* S;
    if (!c || !out || !out_size) return OMC_ERR_INVALID_ARG;
    out[0] = '\0';
    if (!omc__conn_is(c, "shm")) return OMC_ERR_TYPE;
    S = (omc__shm*)c->impl;
    if (!S->is_owner) return OMC_ERR_WRONG_ROLE;
    if ((size_t)snprintf(out, out_size, "%s", S->path) >= out_size) return OMC_ERR_TOO_LARGE;
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] SHM: the dead-owner sweep                                                           */
/* ============================================================================================== */

/* Does a segment whose owner is gone still hold a put someone may read: a published entry
   with a read left (AVAILABLE) whose TTL has not passed? Such a segment stays until its last
   put is consumed or expires (a payload outlives the producer that exited after putting it).
   Read with pread, never mapped: the sweep cannot fault on a file someone shrinks meanwhile. */
OMC__PRIVATE int omc__shm_file_has_payloads(int fd, const struct stat* st, omc_time_ns now) {
    omc__shm_header h;
    omc__shm_layout lay;
    omc__shm_entry ents[64];
    uint32_t i, k, s;
    if ((uint64_t)st->st_size < OMC__SHM_HEADER_SIZE || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) return 0;
    if (h.state != OMC__SHM_READY || omc__shm_layout_check(&h, (uint64_t)st->st_size, &lay) != OMC_OK) return 0;
    for (i = 0; i < lay.entry_count; i += 64) {
        uint32_t n = lay.entry_count - i < 64 ? lay.entry_count - i : 64;
        size_t want = (size_t)n * OMC__SHM_ENTRY_SIZE;
        if (pread(fd, ents, want, (off_t)(lay.entries_off + (uint64_t)i * OMC__SHM_ENTRY_SIZE)) != (ssize_t)want) return 0;
        for (k = 0; k < n; k++) {
            const omc__shm_entry* e = &ents[k];
            if (e->gen == 0 || (e->expires_ns && now >= e->expires_ns)) continue;
            for (s = 0; s < OMC_SHM_MAX_READERS; s++) {
                uint64_t w = s == 0 ? e->slot0 : e->slots_more[s - 1];
                if (omc__slot_gen(w) == e->gen && omc__slot_state(w) == OMC__SLOT_AVAILABLE) return 1;
            }
        }
    }
    return 0;
}

/* Is the owner of an open segment file alive? Its lock on byte 0 says so (we try to take a
   read lock: refused = held = alive). Where the kernel has no OFD locks, the pid and start time
   from the header (or the name) are all there is. */
OMC__PRIVATE int omc__shm_owner_alive(int fd, const struct stat* st, const char* name, uint32_t uid) {
    omc__shm_header h;
    uint64_t start = 0;
    uint32_t pid;
    int e = omc__shm_lock(fd, OMC__SHM_LOCK_OWNER, F_RDLCK);
    if (e == 0) return 0;
    if (e != EINVAL) return 1;      /* held, or an error: never remove on doubt */
    pid = omc__shm_name_pid(name);
    if ((uint64_t)st->st_size >= OMC__SHM_HEADER_SIZE && pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
        h.magic == OMC__SHM_MAGIC && h.owner_uid == uid && h.owner_pid) {
        start = h.owner_start_time;
        pid = h.owner_pid;
    }
    return pid && omc__shm_pid_alive(pid, start);
}

OMNICONN_API omc_result omc_shm_sweep_dead(const omc_shm_desc* desc, uint32_t* removed) {
    const char* dir = desc && desc->shm_dir ? desc->shm_dir : OMNICONN_SHM_DIR;
    omc_hooks hooks = omc__hooks_resolve(desc ? &desc->hooks : NULL);
    uint32_t uid = (uint32_t)geteuid(), n = 0, foreign = 0;
    omc_time_ns now = omc_now_ns();
    char prefix[32];
    size_t plen;
    struct dirent* de;
    DIR* d;
    int dfd;
    if (removed) *removed = 0;
    d = opendir(dir);
    if (!d) {
        OMC__LOG(&hooks, OMC_LOG_WARN, OMC_LOGITEM_SHM, "cannot sweep %s: %s", dir, strerror(errno));
        return OMC_ERR_UNAVAILABLE;
    }
    dfd = dirfd(d);
    plen = (size_t)snprintf(prefix, sizeof(prefix), "omc-%u-", uid);
    while ((de = readdir(d)) != NULL) {
        struct stat st, fst;
        int fd;
        if (strncmp(de->d_name, prefix, plen) != 0) continue;
        /* look before opening: a link, or a file of another uid planted under our prefix, is
           never opened (that would cost a system call per scan, and could block on a FIFO) */
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISLNK(st.st_mode)) { OMC__LOG(&hooks, OMC_LOG_INFO, OMC_LOGITEM_SHM, "sweep: %s/%s is a symbolic link: left alone", dir, de->d_name); continue; }
        if (!S_ISREG(st.st_mode) || (uint32_t)st.st_uid != uid) { foreign++; continue; }
        fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        if (fstat(fd, &fst) != 0 || fst.st_ino != st.st_ino || !S_ISREG(fst.st_mode) || (uint32_t)fst.st_uid != uid) { close(fd); continue; }
        /* our read lock (if we got it) is held until close: an owner that opened this file a
           moment ago cannot take its lock meanwhile, sees the name gone and takes another */
        if (omc__shm_owner_alive(fd, &fst, de->d_name, uid) || omc__shm_file_has_payloads(fd, &fst, now)) { close(fd); continue; }
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == fst.st_ino && unlinkat(dfd, de->d_name, 0) == 0) {
            n++;
            OMC__LOG(&hooks, OMC_LOG_INFO, OMC_LOGITEM_SHM, "sweep: removed %s/%s (%lld bytes): its owner is gone and nothing in it "
                     "can still be read", dir, de->d_name, (long long)fst.st_size);
        }
        close(fd);
    }
    closedir(d);
    if (foreign) OMC__LOG(&hooks, OMC_LOG_DEBUG, OMC_LOGITEM_SHM, "sweep: %u files in %s named like our segments are not ours "
                          "(another uid, or not regular files): left alone, not opened", foreign, dir);
    if (removed) *removed = n;
    return OMC_OK;
}

#else /* !OMC__HAS_SHM: the API exists, and says why it cannot work */

OMNICONN_API omc_result omc_shm_create(const omc_shm_desc* desc, omc_conn** out) {
    (void)desc;
    if (out) *out = NULL;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_shm_sweep_dead(const omc_shm_desc* desc, uint32_t* removed) {
    (void)desc;
    if (removed) *removed = 0;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_shm_segment_path(omc_conn* conn, char* out, size_t out_size) {
    (void)conn;
    if (out && out_size) out[0] = '\0';
    return OMC_ERR_UNAVAILABLE;
}

#endif /* OMC__HAS_SHM */
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
