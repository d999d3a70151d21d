/* omniconn_rdma.h - v0.1.0 - the verbs RDMA engine of omniconn - SPDX-License-Identifier: MIT OR Unlicense

    This companion header moves bytes from one process's registered pool straight into another
    process's memory with RDMA WRITE, on libibverbs directly (InfiniBand, RoCE, Soft-RoCE).
    It is the data plane behind the remote connector's RDMA mode, and it can be used on its own:
    you bring the side channel (any socket) that carries two small binary blobs, it does the rest.

    Do this:
        #define OMNICONN_IMPLEMENTATION
    before you include this file in *one* C or C++ file (it includes omniconn.h itself):

        #define OMNICONN_IMPLEMENTATION
        #include "omniconn.h"
        #include "omniconn_rdma.h"

    Build: cc -std=c99 app.c -ldl -lpthread              (libibverbs and libzmq are loaded at run time)
       or: cc -std=c99 -DOMNICONN_NO_RUNTIME_LINKING app.c -lzmq -libverbs -lpthread
    Building needs the verbs headers (Debian: libibverbs-dev); running needs libibverbs.so.1 and a
    provider (Debian: ibverbs-providers) only when an engine is created.

    CONTENTS (search for a title; the code follows "[SECTION]" banners in the same order)
      QUICK START
      STEP BY STEP: VERBS IN ONE PAGE
      HOW THE ENGINE USES THEM
      RAILS: SEVERAL NICS, FAILOVER, TOPOLOGY
      TRANSFER ENGINE: REGISTERED MEMORY, BATCHED READ AND WRITE, NOTIFICATIONS
      CONFIGURATION
      ERRORS & LOGGING
      THREAD SAFETY
      DEPENDENCIES & LINKING
      WIRE FORMATS
      NON-GOALS
      RECENT REVISIONS
      then the code, by [SECTION]: RDMA: constants and pure helpers (no device needed)
        RDMA: the engine | RDMA: connections | RDMA: transfers
        Transfer engine | RDMA: the remote connector with the RDMA data plane
      then the implementation ("[SECTION] Implementation: ..."), and the licence

================================================================================================
QUICK START
================================================================================================

    Through the remote connector (the usual way): create both ends with
    omc_rdma_connector_create instead of omc_tcp_create, then use omc_conn_put / omc_conn_get
    as with any connector. Payloads travel by RDMA WRITE; peers without RDMA use TCP.

        omc_rdma_connector_desc d = {0};
        d.net.role = OMC_ROLE_SENDER;                   // the receiver: OMC_ROLE_RECEIVER
        d.net.host = "10.0.0.5";                        // side channel address (also picks the GID)
        omc_conn* conn = NULL;
        omc_rdma_connector_create(&d, &conn);           // RDMA off? it still works, over TCP,
                                                        // and omc_rdma_connector_query says why

    The engine on its own, with your own side channel (any socket). Both processes:

        omc_rdma_desc rd = {0};                         // zero = default: every ACTIVE port is a rail
        rd.local_addr = "10.0.0.5";                     // the address your side channel uses
        omc_rdma* eng = NULL;
        if (omc_rdma_create(&rd, &eng) != OMC_OK) { ... fall back to TCP, the log says why ... }

        omc_pool_desc pd = {0};                         // the pool is registered once, here
        pd.size = 1ull << 30;
        pd.thread_safe = 1;
        pd.region = omc_rdma_region_hooks(eng);
        omc_pool* pool = NULL;
        omc_pool_create(&pd, &pool);

    Connect (once per peer; two messages over your side channel):

        receiver: omc_rdma_conn_create(eng, &c); omc_rdma_conn_record(c, rec, sizeof rec, &n);
                  send(rec, n) ------------------------------------------------------------->
        sender:   omc_rdma_conn_accept(eng, rec, n, &c); omc_rdma_conn_record(c, rec2, ...);
                  <------------------------------------------------------------- send(rec2)
        receiver: omc_rdma_conn_connect(c, rec2, n2);

    Move one payload (sender-push):

        receiver: omc_pool_alloc_buffer(pool, size, &dst);
                  omc_rdma_expose(c, dst.data, size, deadline, &win, desc, sizeof desc, &dlen);
                  send(desc, dlen) ----------------------------------------------------------->
        sender:   omc_rdma_sge src = { buf.data, size };
                  omc_rdma_write(c, &src, 1, desc, dlen, deadline);   // returns when written
                  <------------------------------------------------------------------ "DONE"
        receiver: omc_rdma_revoke(win, deadline);      // the peer can no longer write there
                  use(dst.data);

================================================================================================
STEP BY STEP: VERBS IN ONE PAGE
================================================================================================

    RDMA lets a network adapter (an HCA: "host channel adapter") read and write application
    memory on its own, without the CPU copying anything and without the kernel on the data
    path. The verbs API (libibverbs) is how a program asks it to. These are its objects, in the
    order a program creates them (the engine's omc__rdma_open follows exactly this order and
    tears everything down in reverse):

    1. Device and context. ibv_get_device_list() lists the adapters (mlx5_0, rxe0, ...);
       ibv_open_device() returns an ibv_context, the handle every other object hangs off.
       An adapter has ports (numbered from 1); ibv_query_port() tells whether a port is ACTIVE,
       its link layer (InfiniBand, or Ethernet = RoCE: "RDMA over Converged Ethernet") and its
       active MTU (256..4096 bytes: the largest packet payload, not the largest message).
       Each port has a GID table: GIDs are 128-bit addresses. On InfiniBand, index 0 is the
       port's own. On RoCE the table is filled from the IP addresses of the Ethernet device,
       each address in one or two flavours: RoCE v1 (raw Ethernet frames, one L2 segment) and
       RoCE v2 (UDP/IP, routable). An IPv4 address appears IPv4-mapped (::ffff:a.b.c.d). Both
       ends of a connection must use GIDs of the same type that can reach each other: the
       wrong GID index is the classic cause of "Failed to modify QP to RTR" and of
       "transport retry counter exceeded".

    2. Protection domain (PD), ibv_alloc_pd(). A namespace: queue pairs, memory regions and
       memory windows only work together if they belong to the same PD.

    3. Memory region (MR), ibv_reg_mr(pd, addr, length, access). Registration pins the pages
       (they can no longer be swapped or moved, which is why the RLIMIT_MEMLOCK limit applies)
       and gives the adapter their translation. It returns two keys: the lkey, which local work
       requests quote to say "this buffer is mine", and the rkey, which a *peer* quotes to access
       the region remotely - if the access flags allowed it (IBV_ACCESS_REMOTE_WRITE). Anyone
       holding an rkey with remote-write access can write anywhere in that region.
       Registration is slow (page walks, pinning); it is done once per pool, never per transfer.

    4. Completion queue (CQ), ibv_create_cq(), and completion channel, ibv_create_comp_channel().
       Work is asynchronous: you post a request, the adapter executes it later, and then puts a
       work completion (ibv_wc: wr_id, status, opcode) into a CQ. ibv_poll_cq() takes
       completions out without any system call (busy polling: fastest, burns a core). To sleep
       instead, arm the CQ with ibv_req_notify_cq() and wait for the channel's file descriptor
       to become readable; ibv_get_cq_event() then says which CQ fired, ibv_ack_cq_events()
       acknowledges it, and you must poll again (and re-arm) - arming only reports completions
       that arrive *after* it, so the engine polls once more after arming to close that race.

    5. Queue pair (QP), ibv_create_qp(). A send queue and a receive queue; an RC ("reliable
       connected") QP is connected to exactly one QP on the peer, and the adapter then gives
       in-order, exactly-once delivery with acknowledgements and retransmission. A new QP is in
       RESET and must walk through states with ibv_modify_qp(), each step setting a specific
       set of attributes (the mask says which):
         RESET -> INIT  pkey index, port, which remote accesses the QP accepts
         INIT  -> RTR   "ready to receive": everything about the peer - its QP number, the
                        first packet sequence number (PSN) it will send, the path MTU, and the
                        address vector (LID on InfiniBand; GRH with the peer's GID and our GID
                        index on RoCE)
         RTR   -> RTS   "ready to send": our own first PSN, the ACK timeout and retry counts
       Both sides need the other's QP number, PSN, GID/LID and MTU before RTR, so connecting
       needs one exchange over some other channel (here: the endpoint record, see WIRE FORMATS).
       A QP that hits an error moves to ERROR: every outstanding request is flushed back with
       IBV_WC_WR_FLUSH_ERR and the QP is useless until reset and reconnected.

    6. RDMA WRITE, ibv_post_send() with opcode IBV_WR_RDMA_WRITE. A work request names local
       memory as a scatter/gather list (address, length, lkey per element) and remote memory as
       one (remote address, rkey). The adapter gathers the local pieces and writes them into the
       peer's memory; the peer's CPU and software are not involved and get no notification. The
       writer's completion means the data is in the peer's memory (RC acknowledges it); that is
       why the engine's caller sends DONE over the side channel only *after* the write
       completed. Completions are optional per request (IBV_SEND_SIGNALED): "selective
       signalling" asks for one every few requests, and because an RC send queue completes in
       order, one completion retires every request before it.

    7. Memory windows (MW), ibv_alloc_mw(pd, IBV_MW_TYPE_2). A window is a second, narrower
       rkey onto part of an existing MR. A type-2 window is bound by posting an IBV_WR_BIND_MW
       request on a QP: it then covers exactly [addr, addr + length) with the access you chose,
       only for requests that arrive on *that* QP, under a new rkey whose low 8 bits you pick
       (ibv_inc_rkey). Posting IBV_WR_LOCAL_INV with that rkey invalidates it: from then on the
       peer's writes with it fail with a remote access error. If the MR itself is registered
       without remote access, the window is the only way in - on adapters that check a
       window's bounds, which the IB spec asks for and Soft-RoCE does not (see Security).

================================================================================================
HOW THE ENGINE USES THEM
================================================================================================

    Device, port, GID. The device list is desc.devices or $RDMA_DEVICE_NAME ("mlx5_2,mlx5_3":
    tried in order); without one, every device with an ACTIVE port. Each ACTIVE port with a
    usable GID becomes a rail, up to desc.max_rails (see RAILS below; max_rails = 1 keeps the
    first usable one only). The GID is chosen by rule (omc_rdma_choose_gid, a pure function you
    can call yourself), not by index 0:
      - desc.gid_index with desc.gid_index_set: that index, if it holds a GID (override);
      - InfiniBand: the port GID (index 0);
      - RoCE: the RoCE v2 GID that maps desc.local_addr - the address the side channel uses -
        as ::ffff:a.b.c.d or as the IPv6 address itself (a v1 GID of it only if no v2 exists);
      - otherwise the best by rank: v2 IPv4-mapped, v2 IPv6 global, v1 routable, and only then
        link-local (fe80::/10) GIDs - never link-local while a routable one exists.
    A failed QP transition logs every attribute that was set and a hint.

    Registration. omc_rdma_region_hooks() plugs the engine into an omc_pool: the pool's region
    is registered when the pool is created and deregistered when it is destroyed. Every
    transfer then uses sub-ranges of it. Before registering, the engine compares the bytes it
    would pin with RLIMIT_MEMLOCK (unless the process has CAP_IPC_LOCK, which lifts the limit)
    and fails with OMC_ERR_MEMLOCK and a log line that names the limit and the fix. Regions
    larger than desc.mr_chunk (default OMNICONN_RDMA_MR_CHUNK, 2 GiB) are registered as several
    MRs (some adapters slow down with single registrations of many GiB); transfers split their
    scatter/gather lists and destinations at those boundaries.

    Connections. One omc_rdma_conn per peer: desc.qps_per_peer RC QPs (default 2) on each rail
    it pairs with the peer's, each with a random 24-bit starting PSN; the two endpoint records carry QP numbers, PSNs, GID, GID index
    and type, LID, MTU and the process incarnation. The path MTU is the smaller of the two
    ports' active MTUs. Callers cache the connection per peer; when any QP of it fails, the
    connection reports itself broken (omc_rdma_conn_ok() == 0) and the caller replaces it with a
    new one (a new exchange of records); a peer whose record carries a new incarnation has
    restarted, and its old connection is dropped the same way. The accepting side decides how
    many QPs it creates: a record asking for more than its qps_per_peer per rail is refused
    (OMC_ERR_RDMA_QP), and an engine whose QP budget is spent refuses new connections
    (OMC_ERR_BUSY) rather than closing live ones.

    Transfers. The receiver exposes a destination: the engine splits it at MR boundaries and,
    from 2 * OMNICONN_RDMA_SPLIT_MIN up, across a rail's QPs (one extent per QP), gives each
    extent a key of its own on every rail (see Security; with windows it binds them and waits
    until the binds completed), and encodes the transfer descriptor (addresses, lengths, and
    an rkey and QP per extent and rail). The sender validates the descriptor, slices the
    payload into WRITEs of at most OMNICONN_RDMA_SLICE bytes, gathers each from the source's
    scatter/gather list (frame segments can stay where they are), gives each slice to the rail
    that will finish it first (see RAILS), posts them within a window of desc.queue_depth
    outstanding requests per QP, signals every desc.signal_every-th request and the last one of
    each QP, and returns when all are complete. Completions come from one CQ per rail through a
    progress thread that polls for desc.spin_us after activity and otherwise sleeps on the
    completion channel (an idle engine uses no CPU). A failed completion takes its rail of the
    connection down (see RAILS); a refused key (IBV_WC_REM_ACCESS_ERR) or the last rail going
    breaks the connection (all its QPs to ERROR, so nothing more moves); a write that misses its
    deadline does the same and waits for the flush, so the adapter never touches memory the
    caller already got back. QPs of closed connections are destroyed by the progress thread.

    Security. A peer can only write where it was told to, and only while it is told to.
    desc.protection says how; the pool's MRs take no remote access except in POOL mode:
      - OMC_RDMA_PROTECT_WINDOWS: one type-2 memory window per extent, covering exactly the
        destination, usable only on the QP it was bound on, invalidated (and the invalidation
        waited for) before omc_rdma_revoke returns.
      - OMC_RDMA_PROTECT_REGIONS: one MR registered for exactly the destination by expose and
        deregistered by revoke (a registration per transfer; it pins the pages a second time,
        which counts against RLIMIT_MEMLOCK).
      - OMC_RDMA_PROTECT_POOL: the pool MRs' own rkey (fastest; no revocation): a malicious
        peer that knows it can write anywhere in the receiver's *pool*, never outside it (not
        the heap, not the stack, not the allocator's bookkeeping, which lives outside the pool).
      - OMC_RDMA_PROTECT_DEFAULT: WINDOWS where the device keeps writes inside a window, else
        REGIONS. Which is which is measured, not assumed: at start-up the engine connects two
        of its own QPs, binds a one-page window and writes two pages through it. Real adapters
        refuse the write; Soft-RoCE lets it land (its responder checks a window's key and QP,
        then only the range of the MR under it: drivers/infiniband/sw/rxe/rxe_resp.c,
        check_rkey). omc_rdma_info() reports the verdict (window_bounds) and the mode.
    Scope of a key: a window is bound to one QP, so its key is useless on any other peer's
    connection. A destination region's key belongs to the engine's protection domain, which
    every connection's QPs share: a peer that learns another peer's REGIONS key can write into
    that destination (only there, and only until it is revoked). Soft-RoCE, which needs
    REGIONS, lets that write land (measured on the bed); on adapters that keep writes inside a
    window, DEFAULT is WINDOWS and the key is scoped to the QP.
    Revoking: a destination whose revoke fails (an invalidation that does not complete, a
    deregistration that fails) may still be writable. omc_rdma_revoke then returns an error
    other than OMC_ERR_RDMA_QP (which only says the connection was already broken, so nothing
    can write there) and logs an ERROR; a region that could not be deregistered stays
    registered, quarantined, until the engine is destroyed. The caller must never reuse that
    range (the remote connector keeps it out of its pool for good).
    A write outside the destination (in WINDOWS mode: on devices that check bounds), with a
    made-up rkey, or with the rkey of a revoked destination is refused by the receiver's
    adapter: the writer gets IBV_WC_REM_ACCESS_ERR, reported as OMC_ERR_RDMA_ACCESS, and the
    connection breaks on both sides. The sender also checks every peer-supplied descriptor
    (counts, lengths, overflow, QP indexes, connection id, capacity against the payload)
    before posting anything.

    The remote connector. omc_rdma_connector_create runs the remote connector of omniconn.h
    (side channel, entries, fan-out, TTL, deadlines, restarts) with this engine as its data
    plane: a receiver channel creates a connection and sends its record in HELLO, the sender
    accepts it and answers with its own; a get exposes its destination and sends the
    descriptor in PULL; the sender writes and sends DONE only after the write completed; the
    receiver revokes the destination before handing the buffer out. A channel whose RDMA
    set-up fails (no engine, a sender without RDMA, a QP that will not connect) uses TCP; the
    reason is in omc_rdma_connector_query() and the connector's health.
    What a sender accepts from receivers: a HELLO's record gets an RDMA connection only with at
    most the sender's own QP count per rail, on the rails the sender pairs (at most its own
    rails), and only while its QP budget lasts - when it is spent, the new
    receiver is refused and uses TCP; the connections of receivers already there are never
    closed to make room. A PULL's descriptor must name a connection made for the receiver
    process that sends the PULL (the record's incarnation against the PULL's), and once a
    connection served a PULL, only PULLs from that same side-channel session (ZMQ routing id;
    with CURVE, the authenticated session) may name it; anything else is refused
    (OMC_ERR_PROTOCOL) before anything is written.
    While a get waits for its bytes the receiver probes its sender every 250 ms with a
    zero-byte RDMA WRITE (it touches no memory: IB spec C9-88); a sender that died does not
    acknowledge it, the retries run out (about 2 s with the defaults) and the get fails with
    OMC_ERR_CONNECTION instead of waiting for its deadline.
    Errors: a failed get or push reports the remote connector's codes (TIMEOUT, CONNECTION,
    AUTH, ...): the engine's own codes (OMC_ERR_RDMA_QP, _ACCESS, _COMPLETION, _DEVICE,
    OMC_ERR_MEMLOCK, OMC_ERR_BUSY) become OMC_ERR_CONNECTION at the connector, and the engine's
    code and reason go to the connector's health (last_error_text) and the log. A destination
    whose revoke failed is quarantined (omc_rdma_connector_query().quarantined counts them) and
    the get fails with OMC_ERR_CONNECTION.
    Not yet: the HELLO entry point of the data plane does not see the side-channel session, so
    a sender creates QPs for any receiver that reaches its side channel (CURVE with an
    allow-list decides who that is; the QP count and the budget are capped); QP creation runs
    on the listener thread.

================================================================================================
RAILS: SEVERAL NICS, FAILOVER, TOPOLOGY
================================================================================================

    A rail is one device port with its GID. An engine opens up to desc.max_rails of them
    (default: every usable port, at most OMC_RDMA_MAX_RAILS = 4; $OMNICONN_RDMA_MAX_RAILS when
    the desc says 0). Each rail has its own context, protection domain, CQ and completion
    channel (verbs objects of different devices cannot be mixed); one progress thread serves
    them all. Rail order: the device list's order if one is given, else nearest first to
    desc.numa_node (omc_rdma_topo_rank over /sys; ties keep the device list's order). The
    pool is registered on every rail (each registration pins the pages again: RLIMIT_MEMLOCK
    must allow rails x pool size). desc.local_addr may list one address per rail
    ("10.0.0.5,10.0.1.5"): a rail takes the RoCE GID of the address that lives on its netdev.

    Pairing. An engine with one rail sends version-1 records and descriptors, so every peer
    understands it. With more, its record (version 2) lists every rail; the acceptor pairs
    each of the initiator's rails with one of its own UP rails of the same link layer and GID
    type on the same subnet (the GID's first `prefix` bits: the netdev's netmask, /24 for IPv4
    and /64 otherwise if not known), each of its rails at most once, and answers with a record
    whose rail i is the one it paired with the initiator's rail i (port 0: none). If no rail
    shares a subnet it pairs the first compatible rails, which is what one rail always did. A
    peer with fewer rails simply makes fewer pairs. A connection has qps_per_peer QPs per pair
    (at most 16 QPs in all). An old engine (version 1 only) refuses a version-2 record
    (OMC_ERR_VERSION: the connector falls back to TCP for it); give such peers max_rails = 1.

    Striping. Each slice goes to the pair whose queue drains first: the bytes already queued on
    it plus the slice, divided by its rail's measured throughput (a moving average of bytes
    completed per second while busy; a rail not yet measured counts as the mean of the others).
    A slow rail gets fewer slices, an idle one more. The write completes (and DONE may be sent)
    only when every slice did.

    Failover. A failed work completion on a pair (retry counter exceeded, a local QP error, a
    flush) takes that pair down: its QPs go to ERROR, the slices it had not finished are written
    again on the pairs left (the same bytes to the same place: an RDMA WRITE is idempotent), and
    the rail's failure count and reason are kept. IBV_EVENT_PORT_ERR on a rail takes the rail
    down and every connection's pair on it at once, without waiting for retries. Only when no
    pair is left does the write fail (OMC_ERR_CONNECTION for an unreachable peer, else the
    completion's code); the connection is then broken as before. A refused key never fails over
    (the peer's adapter said no: that is not a broken path).

    Rejoin. IBV_EVENT_PORT_ACTIVE brings the rail back: it takes new connections at once, its
    throughput estimate starts again (an equal share), and its GID is looked up again by value.
    QPs cannot be revived without a new exchange of records, so a connection that lost a pair
    keeps working on the others (omc_rdma_conn_info.rails_up < rails); replace it to use the
    rail again. The remote connector does that by itself: a receiver channel whose connection
    lost a rail that is up again is replaced before its next get (a new HELLO, QPs on every
    rail), at most once per back-off (1 s, doubling to 30 s while it keeps happening). A
    receiver learns that its sender lost a rail from its liveness probes, one on every rail
    while a get waits (a probe that fails on one rail takes that rail down, not the
    get); a rail lost while no get waited is won back at the next replacement.

    Health. omc_rdma_rail_stats (and omc_rdma_connector_rail_stats for a connector) report per
    rail: device, port, netdev, GID, NUMA node, up, bytes and slices written, failures, rejoins,
    its current weight and measured throughput, and why it is down or last failed.

    Topology. omc_rdma_topo_read / _pci_device / _rank are pure functions over a sysfs root
    ("/sys", or a fake tree in a test): they rank devices for memory on a NUMA node or in a GPU
    (by PCI address) as same PCIe switch, same root complex, same NUMA node, unknown, other
    NUMA node, with a reason per device. A software device (rxe, siw) takes the place of its
    netdev. They need no verbs and work with OMNICONN_NO_RDMA too.

================================================================================================
TRANSFER ENGINE: REGISTERED MEMORY, BATCHED READ AND WRITE, NOTIFICATIONS
================================================================================================

    What Mooncake's TransferEngine, NIXL's agents and UCX's RMA give their callers, on this
    engine: the caller registers memory it owns (an inference engine's KV cache, a pinned
    pool), a peer imports a small descriptor of it and moves lists of blocks with one-sided
    RDMA READ or WRITE - no receiver code runs per block.

        omc_xfer_desc xd = {0};
        xd.host = "10.0.0.5";                           // RPC listener; port 0 = any free one
        omc_xfer* x = NULL;
        omc_xfer_create(&xd, &x);                       // RDMA if a device works, else TCP
        omc_xfer_register(x, kv_base, kv_bytes, 0);     // caller-owned memory
        printf("%s\n", omc_xfer_name(x));               // "10.0.0.5:41237": what peers open

      the other process:
        omc_xfer_peer* p = NULL;
        omc_xfer_peer_open(y, "10.0.0.5:41237", deadline, &p);   // fetches the descriptor
        omc_xfer_entry e[256];                          // (local, remote, length) per block
        ...
        omc_result st[256];
        omc_xfer_run(p, OMC_XFER_READ, e, 256, "done", 4, deadline, st);   // one completion
        // or: omc_xfer_submit(...) -> omc_xfer_batch_test / _wait / _status / _cancel

    Registration. omc_xfer_register registers [addr, addr + length) as one MR per rail with
    local write, remote read and remote write access: a peer holding the descriptor may read
    and write every byte of it until omc_xfer_unregister (the model of Mooncake and NIXL: the
    protection is who gets the descriptor, and the QP it arrives on). Each registration gets a
    number (range id); one registered again is another range. Device memory (OMC_XFER_MEM_DEVICE,
    GPUDirect RDMA) needs a build with OMNICONN_ENABLE_CUDA and the RDMA transport: CUDA exports
    the range as a dma-buf (cuMemGetHandleForAddressRange; libcuda.so.1 is opened at run time,
    CUDA 11.7+) and each rail registers it with ibv_reg_dmabuf_mr (rdma-core 34+, a kernel and
    adapter driver with dma-buf MRs); the range must be cudaMalloc'ed device memory aligned to
    the host page size. Without CUDA, over TCP, or where a step fails it is refused with
    OMC_ERR_UNAVAILABLE (OMC_ERR_RDMA_DEVICE if the adapter refuses) and a log line that says
    which step; the TCP listener never touches device memory (RDMA only).

    The descriptor (omc_xfer_export, WIRE FORMATS) lists the exporting engine's incarnation (a
    random number per engine), its RPC listener (host, port), its rails, and per range the
    address, length, range id and one rkey per rail. omc_xfer_peer_open fetches it from the
    peer's listener (Mooncake's P2PHANDSHAKE); omc_xfer_peer_import takes one from anywhere
    and checks at the first connection that the engine answering is the one that exported it.

    A batch. Every entry is checked before anything moves: its local range must lie inside a
    range registered here (OMC_ERR_INVALID_ARG), its remote range inside one range of the
    peer's descriptor (OMC_ERR_RDMA_ACCESS, so the peer's adapter never sees a bad address and
    no QP is lost to it). Then a thread of its own moves it. Over RDMA each entry is cut into
    slices of at most slice_size, each slice goes to the rail pair that finishes it first and
    round-robin over that pair's QPs, as writes are; a pair that fails has its slices posted
    again on the others (READ and WRITE are idempotent), the peer's incarnation and the QP
    budget apply as to any connection. Over TCP the batch keeps `window` requests in flight on
    one connection to the peer's listener: a READ is a request answered with the bytes, a WRITE
    carries them. The batch ends with one result and one status per entry (OMC_OK, or why:
    OMC_ERR_CLOSED for entries a cancel or an earlier failure cut short).

    Notifications. A batch may carry up to OMC_XFER_NOTIFY_MAX bytes; they go to the peer's
    listener after every entry completed - for a WRITE, RDMA's completion means the bytes are
    in the peer's memory, over TCP the listener acknowledged each write - and never for a batch
    that failed or was cancelled. The target takes them with omc_xfer_notifs (name of the
    sender, bytes), oldest first; a full queue (max_notifies) refuses with OMC_ERR_BUSY, which
    becomes the batch's result although its data arrived.

    What each failure gives (docs/rdma.md names the test for each):
      remote range outside the descriptor      OMC_ERR_RDMA_ACCESS at submit, nothing moves
      local range not registered               OMC_ERR_INVALID_ARG at submit, nothing moves
      range unregistered at the target since   TCP: OMC_ERR_STALE for that entry; RDMA:
                                               OMC_ERR_RDMA_ACCESS (the key is gone; the
                                               connection is replaced at the next batch)
      descriptor of another engine, or of one  OMC_ERR_PEER_RESTARTED (open the peer again)
      that restarted at that address
      peer gone                                OMC_ERR_CONNECTION (TCP), OMC_ERR_RDMA_QP or
                                               _CONNECTION (RDMA, within the retry time)
      batch cancelled                          OMC_ERR_CLOSED; RDMA resets the connection so
                                               nothing posted outlives the batch
      deadline                                 OMC_ERR_TIMEOUT (the same reset)
      unregister of local memory a batch uses  OMC_ERR_BUSY, the range stays registered
      garbage on the listener                  an answer with OMC_ERR_PROTOCOL / _MALFORMED /
                                               _VERSION, the connection closed, `refused`
                                               counted; a request cut short is dropped after
                                               io_timeout_ms

    The listener is reachable by anyone who can reach the port: it serves only registered
    ranges, checks every size against a bound before reading it, and holds at most
    max_clients connections. Without CURVE keys that is all: bind it to the address of a
    trusted network.

    Authentication (CURVE). Give the target engine a keypair (desc.curve.secret_key; the
    same Z85 keys as the remote connector's, from omc_tcp_curve_keypair) and its initiators
    its public key (desc.curve.server_key). The descriptor exchange then runs on a second
    port (desc.curve_port, 0 = any; omc_xfer_query's curve_port) inside libzmq's CURVE
    (Curve25519 authentication and encryption), and grants a session: the ranges of the
    descriptor handed out, and a session secret that only crosses inside CURVE. A connection
    to the RPC listener is served only after it proved it holds a session secret (HMAC-SHA-256
    over a fresh random challenge of the listener: no secret crosses in clear, and a recorded
    proof is worthless on another connection); from then on it reads and writes only the
    ranges its session was granted. omc_xfer_peer_open does all of it from the name alone.
      initiator without the key        OMC_ERR_AUTH at once (its HELLO is refused; both logs
                                       say why; the target counts auth_failures)
      initiator with a wrong key       OMC_ERR_AUTH at its deadline (the CURVE handshake never
                                       completes; the target logs the failed handshake)
      initiator with a key, target     OMC_ERR_AUTH (it opens peers only through CURVE)
      without CURVE
      a guessed address, range or      OMC_ERR_AUTH and the connection closed; a range
      forged session                   registered after the exchange is not granted
                                       (omc_xfer_peer_refresh makes a new session)
    Over RDMA the QPs are connected only on an authenticated connection; the adapter then
    enforces the rkeys, which a peer knows for the ranges of its descriptor (a range
    registered later has new rkeys). The bytes themselves are not encrypted, on TCP or RDMA:
    CURVE decides who may ask, not who can read a wire (as for the remote connector). One
    server_key per engine: an initiator opens only targets that share that keypair.

================================================================================================
CONFIGURATION
================================================================================================

    macro                        default          where      meaning
    ---------------------------  ---------------  ---------  -------------------------------------
    OMNICONN_NO_RDMA             undefined        everywhere no RDMA engine (stubs return
                                                             OMC_ERR_UNAVAILABLE)
    OMNICONN_NO_RUNTIME_LINKING  undefined        impl file  link libibverbs directly (-libverbs)
    OMNICONN_RDMA_LIBRARY        "libibverbs.so.1" impl file the library dlopen()ed (also:
                                                             desc.library, $OMNICONN_IBVERBS_LIB)
    OMNICONN_RDMA_QPS_PER_PEER   2                impl file  RC QPs per connection (<= 16)
    OMNICONN_RDMA_QUEUE_DEPTH    128              impl file  outstanding WRs per QP (the window)
    OMNICONN_RDMA_SIGNAL_EVERY   16               impl file  signal one WR in this many
    OMNICONN_RDMA_SLICE          1 MiB            impl file  largest single RDMA WRITE
    OMNICONN_RDMA_SPLIT_MIN      256 KiB          impl file  a QP gets at least this much of a
                                                             destination (smaller ones use one QP)
    OMNICONN_RDMA_MR_CHUNK       2 GiB            impl file  largest single memory registration
    OMNICONN_RDMA_CQ_DEPTH       16384            impl file  CQ entries: an engine holds at most
                                                             CQ_DEPTH / QUEUE_DEPTH QPs (128)
    OMNICONN_RDMA_SPIN_US        50               impl file  busy-poll time before sleeping
    OMNICONN_RDMA_ACK_TIMEOUT    16               impl file  QP timeout, 4.096 us * 2^n (268 ms)
    OMNICONN_RDMA_RETRY_COUNT    6                impl file  retransmissions before an error (not 7:
                                                             Soft-RoCE treats 7 as "retry forever")
    OMC_RDMA_MAX_RAILS           4                (fixed)    rails per engine (desc.max_rails caps it)

    Every desc field overrides its macro for one engine; zero means the macro's value.
    Environment: RDMA_DEVICE_NAME (device list when desc.devices is NULL), OMNICONN_IBVERBS_LIB
    (library when desc.library is NULL; runtime linking only), OMNICONN_RDMA_MAX_RAILS (rails
    when desc.max_rails is 0), OMNICONN_IB_TC and OMNICONN_IB_SL (traffic class 0..255 and
    service level 0..15 of every QP, "106" or one per rail "106,96", when desc.traffic_class /
    desc.service_level is NULL; else Mooncake's MC_IB_TC / MC_IB_SL, so a program that moves
    from Mooncake keeps its fabric settings; NCCL's NCCL_IB_TC is not read: it configures NCCL's
    own traffic, which may be meant for another class). Lossless RoCE fabrics map a DSCP (the
    traffic class's upper six bits) to a PFC priority: set it to what the fabric expects.
    omniconn doctor shows each rail's values.
    Transfer engine (omc_xfer_desc): max_clients 64, max_notifies 1024, io_timeout_ms 10000,
    window 32 (TCP requests in flight per batch); zero means these. curve (keys) and
    curve_port (0 = any free port); with no key in the desc, $OMNICONN_XFER_SECRET_KEY_FILE
    (the target's secret key) and $OMNICONN_XFER_SERVER_KEY_FILE (the public key of the
    targets it opens) name files of one Z85 key each (as omc_tcp_read_key reads them): so
    Python's omniconn.mooncake.TransferEngine gets CURVE without a code change. CURVE needs libzmq at run time ($OMNICONN_ZMQ_LIB).

================================================================================================
ERRORS & LOGGING
================================================================================================

    OMC_ERR_UNAVAILABLE     libibverbs cannot be loaded (the log and omc_rdma_probe say why)
    OMC_ERR_RDMA_DEVICE     no device / no ACTIVE port / no usable GID / link layers differ /
                            no rail pairs with the peer's / every rail is down
    OMC_ERR_MEMLOCK         registering would exceed RLIMIT_MEMLOCK (the log names the fix)
    OMC_ERR_RDMA_QP         a QP transition failed (the log has every attribute and a hint),
                            or the connection is broken and must be replaced
    OMC_ERR_RDMA_ACCESS     the peer's adapter refused our write (rkey or range), or the
                            descriptor does not fit what this connection can write
    OMC_ERR_CONNECTION      the peer stopped answering on every rail (retry counter exceeded,
                            or the ports went down: dead, gone or cut off)
    OMC_ERR_RDMA_COMPLETION any other failed work completion (status in the log)
    OMC_ERR_BUSY            the engine's QP budget is spent (CQ_DEPTH / QUEUE_DEPTH QPs)
    OMC_ERR_MALFORMED / OMC_ERR_CHECKSUM / OMC_ERR_VERSION  a record or descriptor is garbage
    Everything is logged with OMC_LOGITEM_RDMA through the desc's hooks (or the process
    default); without an application logger the core's built-in one writes WARN and ERROR to
    stderr, and $OMNICONN_LOG sets its level (see omniconn.h, ERRORS & LOGGING).
    Through the remote connector a get or put sees only the connector's codes: see "The remote
    connector" above (the engine's code is in the health's last error text).

================================================================================================
THREAD SAFETY
================================================================================================

    An engine and its connections are thread-safe: any thread may create and destroy
    connections, expose, revoke and write, also on the same connection at the same time.
    omc_rdma_destroy must not race with other calls; destroy the pools registered with it and
    the connections first. Pure helpers (records, descriptors, GID choice) are reentrant.
    The transfer engine likewise: every omc_xfer_* call is thread-safe except omc_xfer_destroy;
    close its peers and destroy its batches before it (destroy cancels and waits for batches
    still running, and stops the listener). Batches to one peer run one after another; batches
    to different peers run at once. Each batch and each listener client has a thread.

================================================================================================
DEPENDENCIES & LINKING
================================================================================================

    Default: libibverbs is opened with dlopen("libibverbs.so.1") (the runtime library, not the
    -dev symlink) when the first engine is created, and its symbols are looked up from one
    X-macro list (OMC__IBV_SYMBOLS) that also generates the function table and the wrappers
    the code calls (omc__ibv_open_device(...) reads like ibv_open_device(...)). A binary built
    this way runs on a host without rdma-core: omc_rdma_create returns OMC_ERR_UNAVAILABLE and
    the reason. With OMNICONN_NO_RUNTIME_LINKING the same table is filled with the linked
    symbols (link with -libverbs). ibv_post_send, ibv_poll_cq, ibv_req_notify_cq and the
    memory-window calls are static inline functions in verbs.h that jump through the context's
    provider table, so they need no symbol at all. libibverbs is never dlclose()d.
    Also: pthreads, -ldl (runtime linking), Linux (eventfd, poll).

================================================================================================
WIRE FORMATS (all integers little-endian, unlike the verbs structs)
================================================================================================

    Endpoint record, version 1 (omc_rdma_record_encode; 52 + 8 * N bytes; the HELLO's type-2
    record in the remote connector). One per connection and direction:
        0   u32  magic 0x52434D4F ("OMCR")
        4   u8   version (1)
        5   u8   QP count N (1..16)
        6   u8   port number (1..255)
        7   u8   active MTU of that port (enum ibv_mtu: 1 = 256, 2 = 512, 3 = 1024, 4 = 2048,
                 5 = 4096); the path MTU is the smaller of both records' values
        8   u8   link layer (1 = InfiniBand, 2 = Ethernet/RoCE)
        9   u8   GID index the author uses (its own; informational and for logs)
        10  u8   GID type (1 = InfiniBand, 2 = RoCE v1, 3 = RoCE v2)
        11  u8   flags: how the author protects its destinations: bit 0 = memory windows,
                 bit 1 = a region per destination (neither: its pool's rkey)
        12  u16  LID (InfiniBand; 0 on RoCE)
        14  u16  reserved, zero
        16  u64  incarnation of the author's process (omc_incarnation(): a restart changes it)
        24  u64  connection id (random, chosen by the initiator; the acceptor echoes it)
        32  u8[16] GID, in network byte order (as in union ibv_gid)
        48  N x { u32 QP number (24 bits used), u32 first PSN (24 bits used) }
        48 + 8N  u32 CRC-32C of bytes [0, 48 + 8N)
    QP i of one side is connected to QP i of the other.

    Endpoint record, version 2 (several rails; 24 + 32 * R + 8 * R * Q + 4 bytes):
        0   u32  magic 0x52434D4F ("OMCR")
        4   u8   version (2)
        5   u8   QPs per rail Q (1..16)
        6   u8   rail count R (2..4; R * Q <= 16)
        7   u8   flags (as in version 1)
        8   u64  incarnation of the author's process
        16  u64  connection id
        24  R x 32 bytes, one per rail (in an acceptor's answer: rail i is the one it paired
            with the initiator's rail i, all zero if none):
              0   u8   port number (0 = no rail here: its QPs are absent, number and PSN 0)
              1   u8   active MTU (enum ibv_mtu)
              2   u8   link layer
              3   u8   GID index
              4   u8   GID type
              5   u8   subnet prefix of the GID, in bits (0..128; IPv4 /24 = 120)
              6   u16  LID
              8   u8[16] GID
              24  u8[8] reserved, zero
        24 + 32R  R * Q x { u32 QP number, u32 first PSN } (QP i is on rail i / Q)
        end  u32 CRC-32C of everything before it
    At least one rail has a port. An engine with one rail sends version 1.

    Transfer descriptor, version 1 (omc_rdma_target_encode; 28 + 24 * E bytes, at most 796; the
    PULL's descriptor in the remote connector). Made by the receiver for one destination:
        0   u32  magic 0x57434D4F ("OMCW")
        4   u8   version (1)
        5   u8   extent count E (1..32)
        6   u16  flags: bit 0 = the rkeys are memory windows, bit 1 = regions of their own
        8   u64  connection id the windows are bound on (must be the writer's connection; the
                 remote connector also requires it to belong to the receiver sending the PULL)
        16  u64  total length (the sum of the extents' lengths: the destination's capacity)
        24  E x 24 bytes, in destination order (the payload fills them in order):
              0   u64  remote address
              8   u64  length (> 0)
              16  u32  rkey
              20  u16  QP index (< N: the QP the window is bound on, and the one to write on)
              22  u16  reserved, zero
        24 + 24E u32 CRC-32C of bytes [0, 24 + 24E)
    Transfer descriptor, version 2 (a connection with several rails; 24 + (16 + 8 * R) * E + 4
    bytes, at most OMC_RDMA_TARGET_MAX = 1024, so E <= 31 with 2 rails and <= 20 with 4):
        0   u32  magic 0x57434D4F ("OMCW")
        4   u8   version (2)
        5   u8   extent count E (1..32)
        6   u8   flags (as in version 1)
        7   u8   rail count R (2..4: the connection's pairs, in its order)
        8   u64  connection id
        16  u64  total length
        24  E x (16 + 8R) bytes:
              0   u64  remote address
              8   u64  length (> 0)
              16  R x { u32 rkey, u16 QP index (0xFFFF: this rail cannot reach the extent;
                        then the rkey is 0), u16 reserved, zero }
                  the QP index of rail r must be one of that rail's QPs (r * Q .. r * Q + Q - 1)
        end u32 CRC-32C
    Every extent is reachable on at least one rail.
    Decoding checks every field, both CRCs and every length before anything is used; the
    checksum catches corruption, not malice (the adapter enforces the windows).

    Transfer-engine descriptor (omc_xfer_export; 24 + H + N * (24 + 4R) + 4 bytes, at most
    OMC_XFER_DESC_MAX). What an engine exports of its registered memory:
        0   u32  magic 0x44434D4F ("OMCD")
        4   u8   version (1)
        5   u8   rail count R (0 = the exporter moves data over TCP only; 1..4)
        6   u16  range count N (0..256)
        8   u64  incarnation of the exporting engine (random, never 0)
        16  u16  RPC port of its listener (1..65535)
        18  u8   host text length H (1..63)
        19  u8   reserved, zero
        20  u32  reserved, zero
        24  u8[H] host (printable ASCII without spaces; not NUL-terminated)
        24 + H  N x (24 + 4R) bytes, one per registered range:
              0   u64  address
              8   u64  length (> 0; address + length does not wrap)
              16  u32  range id (the registration's number)
              20  u32  reserved, zero
              24  R x u32 rkey, in the exporter's rail order
        end u32 CRC-32C of everything before it

    Transfer-engine RPC (TCP, the listener of omc_xfer_create). A request is a 32-byte header
    and, for WRITE, HELLO, NOTIFY and RDMA_CONNECT, `length` bytes after it:
        0   u32  magic 0x51434D4F ("OMCQ")
        4   u8   version (1)
        5   u8   type: 1 HELLO, 2 READ, 3 WRITE, 4 NOTIFY, 5 RDMA_CONNECT, 6 CHALLENGE,
                 7 AUTH
        6   u16  reserved, zero
        8   u32  request number (echoed in the answer; a batch numbers its entries from 0)
        12  u32  READ/WRITE: the range id the address lies in; AUTH: the session's grant;
                 otherwise zero
        16  u64  READ/WRITE: the address; HELLO: the incarnation the caller expects (0 = any);
                 AUTH: the session nonce
        24  u64  READ: bytes to read; WRITE: bytes that follow; others: payload size
    An answer is a 32-byte header and `length` bytes:
        0   u32  magic 0x41434D4F ("OMCA")
        4   u8   version (1)
        5   u8   type (the request's)
        6   u16  reserved, zero
        8   u32  request number
        12  i32  omc_result (0 = done)
        16  u64  incarnation of the answering engine
        24  u64  what follows: READ the bytes (only when the result is 0); HELLO the
                 descriptor; RDMA_CONNECT one byte P (pairs), P bytes (the answering engine's
                 rail behind each pair), then its endpoint record; otherwise 0
    Payloads: HELLO the caller's name ("host:port", 1..79 printable bytes), NOTIFY the
    message (<= 4096 bytes), RDMA_CONNECT the caller's endpoint record (<= OMC_RDMA_RECORD_MAX).
    Requests on one connection are answered in order; a client may send several before reading
    (a batch keeps `window` in flight). The listener answers OMC_ERR_STALE for a range id not
    registered (any more), OMC_ERR_RDMA_ACCESS for a range that leaves its registration,
    OMC_ERR_MALFORMED for 0 bytes or a payload over its bound, OMC_ERR_VERSION / _PROTOCOL for
    another version, magic or type; after a refused WRITE it reads and drops the bytes (up to
    64 MiB, else it closes), after a bad header it closes the connection.

    With CURVE (the target has curve.secret_key):
      CHALLENGE (no payload) is answered with 20 bytes: u16 the CURVE port, u16 zero, 16
      random bytes (the challenge). An engine without CURVE answers OMC_ERR_UNAVAILABLE.
      On the CURVE port (a ZMQ ROUTER; the initiator's DEALER sends one frame) the HELLO is
      the same 32-byte header and name; its answer is one frame: the 32-byte answer header,
      then 48 bytes of session - u64 session nonce, u32 grant (the highest range id of the
      descriptor), u32 zero, u8[32] session secret = HMAC-SHA-256(key: the engine's random
      master; message: "omc-xfer-ses", u64 nonce, u32 grant, u64 incarnation) - and the
      descriptor.
      AUTH carries 32 bytes, HMAC-SHA-256(key: the session secret; message: "omc-xfer-auth",
      the challenge); answered 0 or OMC_ERR_AUTH (then closed). One AUTH per CHALLENGE.
      Before a successful AUTH any other request is answered OMC_ERR_AUTH and the connection
      closed; after it, READ and WRITE of a range id above the grant are OMC_ERR_AUTH.

================================================================================================
NON-GOALS
================================================================================================

    - No RDMA CM (rdma_cm) and no receive queues: QPs are connected with the endpoint records,
      data moves by RDMA WRITE (and READ, in the transfer engine), notifications go over a
      socket (yours, or the transfer engine's listener).
    - GPU memory only through the transfer engine's dma-buf registration (OMC_XFER_MEM_DEVICE
      with OMNICONN_ENABLE_CUDA); pools of OMC_MEMORY_CUDA are refused with a log line, and
      nvidia-peermem (ibv_reg_mr of device pointers) is not used.
    - No multi-path within one rail; a rail that comes back is used by new connections (the
      remote connector replaces its own), never by the QPs that failed.
    - The transfer engine has no metadata store (etcd, Redis): peers are named host:port, as
      in Mooncake's P2PHANDSHAKE mode. Its CURVE encrypts the exchange, not the data.

================================================================================================
RECENT REVISIONS
================================================================================================

    unreleased          the transfer engine (omc_xfer_*): caller-registered memory, exported
                        descriptors, batched RDMA READ and WRITE with one completion and a
                        status per entry, async submit / test / wait / cancel, notifications,
                        the same API over TCP through the engine's RPC listener, discovery by
                        host:port; RoCE traffic class and service level per engine and rail
                        (OMNICONN_IB_TC / OMNICONN_IB_SL); QPs accept RDMA READ (up to 16 in
                        flight per QP).

    unreleased          rails: every usable device port (max_rails), records and descriptors
                        version 2, pairing by subnet, slices striped by earliest finish at the
                        measured throughput, failover of a failed rail's slices, port events
                        take rails down and back, omc_rdma_rail_stats; NIC ranking by topology
                        (omc_rdma_topo_*).
    unreleased          hostile receivers: QP count set by the accepting engine, no eviction of
                        live connections (a new peer is refused and uses TCP), descriptors bound
                        to the receiver that sends the PULL, failed revokes quarantine the range,
                        receivers notice a dead sender within seconds (zero-byte probes), the
                        connector reports engine failures as OMC_ERR_CONNECTION.
    unreleased          the first engine: runtime-loaded libibverbs, GID selection by rule,
                        chunked registration with a memlock check, RC connections, sliced and
                        windowed RDMA WRITE, per-transfer windows or regions (with a probe of
                        the device's window bounds), the remote connector's RDMA data plane.

LICENSE: see the end of this file (MIT or public domain, your choice).
*/
#ifndef OMNICONN_RDMA_H_INCLUDED
#define OMNICONN_RDMA_H_INCLUDED

#include "omniconn.h"

#if !defined(OMC__COMPANION_INTERFACE) || OMC__COMPANION_INTERFACE != 0x0001
    #error "omniconn_rdma.h 0.1 uses the companion interface of omniconn.h 0.1: use the omniconn.h of the same 0.1.x release."
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================== */
/* [SECTION] RDMA: constants and pure helpers (no device needed)                                  */
/* ============================================================================================== */

#define OMC_RDMA_MAX_QPS 16             /* QPs per connection, every rail together */
#define OMC_RDMA_MAX_EXTENTS 32
#define OMC_RDMA_MAX_RAILS 4            /* device ports one engine stripes over */
#define OMC_RDMA_RECORD_MAGIC 0x52434D4Fu       /* "OMCR" */
#define OMC_RDMA_RECORD_VERSION 1               /* one rail */
#define OMC_RDMA_RECORD_VERSION_RAILS 2         /* 2..OMC_RDMA_MAX_RAILS rails */
#define OMC_RDMA_RECORD_HEADER 48
#define OMC_RDMA_RECORD_HEADER_RAILS 24
#define OMC_RDMA_RECORD_RAIL 32
#define OMC_RDMA_RECORD_MAX (OMC_RDMA_RECORD_HEADER_RAILS + OMC_RDMA_RECORD_RAIL * OMC_RDMA_MAX_RAILS + 8 * OMC_RDMA_MAX_QPS + 4)
#define OMC_RDMA_TARGET_MAGIC 0x57434D4Fu       /* "OMCW" */
#define OMC_RDMA_TARGET_VERSION 1               /* one rail */
#define OMC_RDMA_TARGET_VERSION_RAILS 2         /* a key and QP per extent and rail */
#define OMC_RDMA_TARGET_HEADER 24
#define OMC_RDMA_TARGET_EXTENT 24
#define OMC_RDMA_TARGET_EXTENT_RAILS 16         /* + 8 per rail */
#define OMC_RDMA_TARGET_MAX 1024                /* either version; what a PULL can carry */
#define OMC_RDMA_NO_QP 0xFFFFu                  /* version 2: this rail cannot reach the extent */
#define OMC_RDMA_FLAG_MEMORY_WINDOWS 0x1u   /* destinations are type-2 memory windows */
#define OMC_RDMA_FLAG_REGIONS 0x2u          /* destinations are memory regions of their own */
#define OMC__RDMA_FLAGS (OMC_RDMA_FLAG_MEMORY_WINDOWS | OMC_RDMA_FLAG_REGIONS)

typedef enum omc_rdma_gid_type {
    OMC_RDMA_GID_UNKNOWN = 0,
    OMC_RDMA_GID_IB = 1,
    OMC_RDMA_GID_ROCE_V1 = 2,
    OMC_RDMA_GID_ROCE_V2 = 3
} omc_rdma_gid_type;

typedef enum omc_rdma_link {
    OMC_RDMA_LINK_UNKNOWN = 0,
    OMC_RDMA_LINK_INFINIBAND = 1,
    OMC_RDMA_LINK_ETHERNET = 2
} omc_rdma_link;

/* One row of a port's GID table, as the engine reads it (or as a test makes it up). */
typedef struct omc_rdma_gid_entry {
    uint8_t gid[16];            /* network byte order; all zero = an empty slot */
    uint32_t index;
    omc_rdma_gid_type type;
    char netdev[16];            /* the Ethernet device behind a RoCE GID ("" if unknown) */
} omc_rdma_gid_entry;

/* Choose the GID index to use (the rule in the manual). link: the port's link layer.
   want: the 16-byte GID form of the side channel's address (omc_rdma_addr_to_gid) or NULL.
   override_index >= 0 forces that index (it must hold a GID). why (optional) receives one line
   saying what was chosen and why, or why nothing could be. Returns OMC_OK, OMC_ERR_RDMA_DEVICE
   (no usable GID / bad override) or OMC_ERR_INVALID_ARG. Pure; thread-safe. */
OMNICONN_API omc_result omc_rdma_choose_gid(const omc_rdma_gid_entry* table, uint32_t count, omc_rdma_link link,
                                            const uint8_t* want, int override_index, uint32_t* out_index,
                                            char* why, size_t why_size);
/* "10.1.2.3" -> ::ffff:10.1.2.3, an IPv6 literal -> itself. OMC_ERR_INVALID_ARG for anything
   else (host names are not resolved here). */
OMNICONN_API omc_result omc_rdma_addr_to_gid(const char* addr, uint8_t out[16]);
/* Printable GID ("fe80::1", "::ffff:10.0.0.1"); out needs 46 bytes. */
OMNICONN_API void       omc_rdma_gid_to_text(const uint8_t gid[16], char* out, size_t out_size);
/* The path MTU of two ports: the smaller of two enum ibv_mtu values (1..5). OMC_ERR_INVALID_ARG
   if either is out of range. */
OMNICONN_API omc_result omc_rdma_mtu_negotiate(uint32_t local_mtu, uint32_t peer_mtu, uint32_t* out_mtu);
/* Bytes of an enum ibv_mtu value (1 -> 256 ... 5 -> 4096), 0 if invalid. */
OMNICONN_API uint32_t   omc_rdma_mtu_bytes(uint32_t mtu);

/* One rail of an endpoint record (version 2). port 0: the author has no rail to pair with the
   initiator's rail at this position (its QPs are absent: QP number and PSN 0). */
typedef struct omc_rdma_record_rail {
    uint8_t port;
    uint8_t mtu;                /* enum ibv_mtu */
    uint8_t link;               /* omc_rdma_link */
    uint8_t gid_index;
    uint8_t gid_type;           /* omc_rdma_gid_type */
    uint8_t prefix;             /* bits of the GID that name its subnet (IPv4 /24 = 120) */
    uint16_t lid;
    uint8_t gid[16];
} omc_rdma_record_rail;

/* An endpoint record, decoded (see WIRE FORMATS). Version 1 leaves rails, qps_per_rail and
   rail[] zero; version 2 also fills the top fields from its first paired rail. */
typedef struct omc_rdma_record {
    uint32_t qp_count;
    uint8_t port;
    uint8_t mtu;                /* enum ibv_mtu */
    uint8_t link;               /* omc_rdma_link */
    uint8_t gid_index;
    uint8_t gid_type;           /* omc_rdma_gid_type */
    uint8_t flags;              /* OMC_RDMA_FLAG_* */
    uint16_t lid;
    uint64_t incarnation;
    uint64_t conn_id;
    uint8_t gid[16];
    uint32_t qpn[OMC_RDMA_MAX_QPS];
    uint32_t psn[OMC_RDMA_MAX_QPS];
    uint32_t rails;             /* 0 or 1: version 1; 2..OMC_RDMA_MAX_RAILS: version 2 */
    uint32_t qps_per_rail;      /* version 2: QP i belongs to rail i / qps_per_rail */
    omc_rdma_record_rail rail[OMC_RDMA_MAX_RAILS];
} omc_rdma_record;

/* Encode into out (cap >= OMC_RDMA_RECORD_MAX is always enough). rails <= 1: version 1 from the
   top fields; else version 2 from rail[] (qp_count = rails * qps_per_rail). OMC_ERR_INVALID_ARG
   for out-of-range fields, OMC_ERR_TOO_LARGE if cap is short. */
OMNICONN_API omc_result omc_rdma_record_encode(const omc_rdma_record* rec, void* out, size_t cap, size_t* out_len);
/* Decode and validate (size, magic, version, CRC, every field). */
OMNICONN_API omc_result omc_rdma_record_decode(const void* data, size_t len, omc_rdma_record* out);

/* A transfer descriptor, decoded (see WIRE FORMATS). */
typedef struct omc_rdma_extent {
    uint64_t addr;
    uint64_t length;
    uint32_t rkey;              /* version 1 (and rail 0 of version 2) */
    uint16_t qp;
    uint32_t rkeys[OMC_RDMA_MAX_RAILS];     /* version 2: the key and QP to use on each rail */
    uint16_t qps[OMC_RDMA_MAX_RAILS];       /* (OMC_RDMA_NO_QP: not on this rail) */
} omc_rdma_extent;

typedef struct omc_rdma_target {
    uint64_t conn_id;
    uint64_t length;            /* sum of the extents */
    uint32_t flags;             /* OMC_RDMA_FLAG_* */
    uint32_t count;
    uint32_t rails;             /* 0 or 1: version 1 (rkey, qp); 2..OMC_RDMA_MAX_RAILS: version 2 */
    omc_rdma_extent extent[OMC_RDMA_MAX_EXTENTS];
} omc_rdma_target;

OMNICONN_API omc_result omc_rdma_target_encode(const omc_rdma_target* t, void* out, size_t cap, size_t* out_len);
/* Decode and validate: counts, lengths (> 0, no overflow, sum = total), reserved fields, CRC.
   max_qps: QP indexes must be below it (0 = OMC_RDMA_MAX_QPS). Version 1 leaves rails, rkeys[]
   and qps[] zero; version 2 also fills rkey and qp from rail 0. */
OMNICONN_API omc_result omc_rdma_target_decode(const void* data, size_t len, uint32_t max_qps, omc_rdma_target* out);


/* ---- NIC choice by topology (pure, over a sysfs tree; no device, no verbs) ------------------- */

/* How near a device is to the memory a transfer uses, best first (the distances of
   `nvidia-smi topo -m`, coarsened). Ties keep the devices' name order. */
typedef enum omc_rdma_topo_tier {
    OMC_RDMA_TOPO_SAME_SWITCH = 0,  /* NIC and GPU share a PCIe switch below the root port */
    OMC_RDMA_TOPO_SAME_ROOT = 1,    /* same PCIe root complex, through the host bridge */
    OMC_RDMA_TOPO_SAME_NUMA = 2,    /* same NUMA node as the buffer (or the GPU) */
    OMC_RDMA_TOPO_UNKNOWN = 3,      /* a NUMA node is not known (-1: one-node machines, VMs) */
    OMC_RDMA_TOPO_OTHER_NUMA = 4    /* another socket: every byte crosses the inter-socket link */
} omc_rdma_topo_tier;

#define OMC_RDMA_TOPO_NAME_MAX 64
#define OMC_RDMA_TOPO_PATH_MAX 512

/* One RDMA device as sysfs places it. A software device (rxe, siw) has no PCI device of its
   own: it takes the place of the netdev it is bound to, if that is a PCI device. */
typedef struct omc_rdma_topo_nic {
    char name[OMC_RDMA_TOPO_NAME_MAX];      /* "mlx5_0", "rxe0" */
    char pci_path[OMC_RDMA_TOPO_PATH_MAX];  /* "pci0000:3a/0000:3a:00.0/..." (below devices/), "" if none */
    int numa_node;                          /* -1 = not known */
    int soft;                               /* 1: a software device (its netdev's place) */
    char netdev[OMC_RDMA_TOPO_NAME_MAX];    /* software devices: the netdev, else "" */
} omc_rdma_topo_nic;

typedef struct omc_rdma_topo_choice {
    int index;                              /* into the array given to omc_rdma_topo_rank */
    omc_rdma_topo_tier tier;
    char why[256];                          /* one line: the device, its place, the reason */
} omc_rdma_topo_choice;

/* Every device under <sysfs_root>/class/infiniband ("/sys" in production), in name order.
   Returns how many there are (may exceed cap: the first cap by name are filled), or -1 if the
   folder cannot be read. Thread-safe (reads files only). */
OMNICONN_API int omc_rdma_topo_read(const char* sysfs_root, omc_rdma_topo_nic* out, int cap);
/* A PCI device by address ("0000:3b:00.0", e.g. a GPU): its path and NUMA node (-1 = not known).
   Returns 1 if found, 0 if absent or the address is not a plain PCI address. */
OMNICONN_API int omc_rdma_topo_pci_device(const char* sysfs_root, const char* pci_addr, char* path, size_t cap, int* numa_node);
/* Rank n devices for memory on NUMA node numa_node (-1 = not known) or in the GPU at gpu_path
   (from omc_rdma_topo_pci_device; NULL = host memory) whose node is gpu_numa. out[0..n-1] gets
   the devices nearest first, each with its tier and why. Pure; thread-safe. */
OMNICONN_API void omc_rdma_topo_rank(const omc_rdma_topo_nic* nics, int n, int numa_node, const char* gpu_path, int gpu_numa,
                                     omc_rdma_topo_choice* out);
OMNICONN_API const char* omc_rdma_topo_tier_name(omc_rdma_topo_tier t);
/* Can libibverbs be loaded, and does it list a device? library: NULL = the default (see
   CONFIGURATION). OMC_OK, or OMC_ERR_UNAVAILABLE / OMC_ERR_RDMA_DEVICE with the reason in why. */
OMNICONN_API omc_result omc_rdma_probe(const char* library, char* why, size_t why_size);

/* Parse a traffic class or service level setting: "106" (every rail) or "106,96" (one per rail;
   rails past the list take its last value). NULL or "" leaves out[] unchanged. Each value must be
   a decimal number <= max (255 for a traffic class, 15 for a service level): otherwise
   OMC_ERR_INVALID_ARG and out[] is unchanged. Pure. */
OMNICONN_API omc_result omc_rdma_parse_qos(const char* text, uint32_t max, uint8_t out[OMC_RDMA_MAX_RAILS]);

/* ============================================================================================== */
/* [SECTION] RDMA: the engine                                                                     */
/* ============================================================================================== */

typedef struct omc_rdma omc_rdma;
typedef struct omc_rdma_conn omc_rdma_conn;
typedef struct omc_rdma_window omc_rdma_window;
typedef struct omc_rdma_op omc_rdma_op;

/* How a receiver keeps a peer inside the destination it was given (see Security). */
typedef enum omc_rdma_protection {
    OMC_RDMA_PROTECT_DEFAULT = 0,   /* WINDOWS if the device enforces a window's bounds, else REGIONS */
    OMC_RDMA_PROTECT_WINDOWS,       /* one type-2 memory window per destination */
    OMC_RDMA_PROTECT_REGIONS,       /* one memory region per destination (registered by expose) */
    OMC_RDMA_PROTECT_POOL           /* the pool's own rkey: a peer may write anywhere in the pool */
} omc_rdma_protection;

typedef struct omc_rdma_desc {
    const char* devices;        /* "mlx5_0,mlx5_1": tried in order, each usable one is a rail (up to
                                   max_rails); NULL = $RDMA_DEVICE_NAME, else every device with
                                   an ACTIVE port */
    uint32_t port;              /* 0 = every ACTIVE port of a device (the first one if max_rails is 1) */
    const char* local_addr;     /* IPv4/IPv6 literal of the side channel: selects the RoCE GID; a
                                   comma list ("10.0.0.5,10.0.1.5") gives each rail the GID of the
                                   address on its netdev */
    int gid_index;              /* GID override, used only if gid_index_set (0 is a valid index) */
    int gid_index_set;
    uint32_t qps_per_peer;      /* 0 = OMNICONN_RDMA_QPS_PER_PEER */
    uint32_t queue_depth;       /* 0 = OMNICONN_RDMA_QUEUE_DEPTH */
    uint32_t signal_every;      /* 0 = OMNICONN_RDMA_SIGNAL_EVERY */
    uint64_t slice_size;        /* 0 = OMNICONN_RDMA_SLICE */
    uint64_t split_min;         /* 0 = OMNICONN_RDMA_SPLIT_MIN */
    uint64_t mr_chunk;          /* 0 = OMNICONN_RDMA_MR_CHUNK (a multiple of the page size) */
    uint32_t spin_us;           /* 0 = OMNICONN_RDMA_SPIN_US */
    omc_rdma_protection protection;     /* 0 = OMC_RDMA_PROTECT_DEFAULT */
    uint32_t max_rails;         /* 0 = every usable device port ($OMNICONN_RDMA_MAX_RAILS, else up
                                   to OMC_RDMA_MAX_RAILS); 1 = the first usable one only */
    int numa_node;              /* rails nearest this NUMA node first (without a device list); */
    int numa_node_set;          /* used only if numa_node_set (0 is a valid node) */
    const char* library;        /* runtime linking: NULL = $OMNICONN_IBVERBS_LIB, else
                                   OMNICONN_RDMA_LIBRARY */
    const char* traffic_class;  /* RoCE traffic class (GRH, 0..255) of every QP: "106" for every
                                   rail or "106,96" one per rail (the last repeats); NULL =
                                   $OMNICONN_IB_TC, else $MC_IB_TC, else 0 */
    const char* service_level;  /* service level (ah_attr.sl, 0..15), the same way: NULL =
                                   $OMNICONN_IB_SL, else $MC_IB_SL, else 0 */
    omc_hooks hooks;
} omc_rdma_desc;

/* What an engine chose and counted. device .. active_mtu describe rail 0. */
typedef struct omc_rdma_info {
    uint32_t rails;             /* rails opened */
    uint32_t rails_up;          /* of those, usable now */
    char device[64];
    uint32_t port;
    omc_rdma_link link;
    uint32_t gid_index;
    uint8_t gid[16];
    omc_rdma_gid_type gid_type;
    char netdev[16];
    uint32_t active_mtu;        /* bytes */
    omc_rdma_protection protection;     /* resolved: WINDOWS, REGIONS or POOL */
    int memory_windows;         /* 1: each destination is its own type-2 window */
    int window_bounds;          /* 1: the device refuses writes outside a window, 0: it does not
                                   (Soft-RoCE), -1: not known (no windows, or the probe failed) */
    int runtime_linked;         /* 1: libibverbs was dlopen()ed */
    uint32_t qps_per_peer, queue_depth, signal_every;
    uint64_t slice_size, mr_chunk;
    uint32_t regions;           /* registered regions (pools) */
    uint32_t memory_regions;    /* ibv_mr objects behind them */
    uint64_t registered_bytes;
    uint32_t connections;       /* live */
    uint64_t writes, write_bytes, write_errors, access_errors;
    uint64_t work_requests, signalled;
    uint64_t binds, invalidations;
    uint64_t qp_errors;
    uint64_t sleeps;            /* times the progress thread slept on the completion channel */
} omc_rdma_info;

/* Open a device, pick port and GID, create PD, CQ and completion channel, start the progress
   thread. Returns OMC_ERR_UNAVAILABLE (no libibverbs), OMC_ERR_RDMA_DEVICE (no usable device,
   port or GID; the log lists what was tried), OMC_ERR_INVALID_ARG, OMC_ERR_NO_MEMORY. */
OMNICONN_API omc_result omc_rdma_create(const omc_rdma_desc* desc, omc_rdma** out);
/* Stop the progress thread and free everything. Destroy the engine's pools and connections
   first (connections left are destroyed; registrations left are dropped). */
OMNICONN_API void       omc_rdma_destroy(omc_rdma* eng);
OMNICONN_API omc_result omc_rdma_query(omc_rdma* eng, omc_rdma_info* out);

/* One rail: a device port and its GID, what went through it and whether it is up. */
typedef struct omc_rdma_rail_stat {
    char device[64];            /* "rxe1" */
    uint32_t port;
    char netdev[16];            /* RoCE: the Ethernet device ("" if not known) */
    char gid[46];               /* text: "::ffff:10.0.1.5" */
    uint32_t gid_index;
    int numa_node;              /* -1 = not known */
    int up;                     /* 1: takes new slices and new connections */
    uint64_t bytes;             /* written through this rail, every connection */
    uint64_t slices;            /* RDMA WRITEs completed on it */
    uint32_t failures;          /* connections that lost their QPs on it (completion or port error) */
    uint32_t rejoins;           /* times its port came back (IBV_EVENT_PORT_ACTIVE) */
    double weight;              /* its share of new slices now (the up rails' weights sum to 1) */
    double throughput;          /* measured bytes/s (moving average; 0 = not measured yet) */
    char why[160];              /* why it is down, or its last failure ("" if none) */
    uint32_t traffic_class;     /* GRH traffic class every QP on this rail uses */
    uint32_t service_level;     /* service level every QP on this rail uses */
} omc_rdma_rail_stat;

/* Fill out[0 .. min(cap, rails) - 1] with the engine's rails, in rail order. Returns the number of
   rails (>= 1), or a negative omc_result (OMC_ERR_INVALID_ARG). Thread-safe. */
OMNICONN_API int        omc_rdma_rail_stats(omc_rdma* eng, omc_rdma_rail_stat* out, int cap);

/* Region hooks for omc_pool_desc.region: attach registers the pool's region, detach drops it.
   Destroy the pool before the engine. */
OMNICONN_API omc_region_hooks omc_rdma_region_hooks(omc_rdma* eng);
/* What the hooks call: register [base, base + size) once (in MRs of at most mr_chunk bytes),
   after checking RLIMIT_MEMLOCK (OMC_ERR_MEMLOCK). OMC_ERR_EXISTS if it overlaps a region. */
OMNICONN_API omc_result omc_rdma_register(omc_rdma* eng, void* base, uint64_t size);
OMNICONN_API omc_result omc_rdma_deregister(omc_rdma* eng, void* base);

/* ============================================================================================== */
/* [SECTION] RDMA: connections                                                                    */
/* ============================================================================================== */

/* Initiator: create a connection's QPs (in INIT) and a fresh connection id. Send its record
   (omc_rdma_conn_record) to the peer, then call omc_rdma_conn_connect with the peer's. */
OMNICONN_API omc_result omc_rdma_conn_create(omc_rdma* eng, omc_rdma_conn** out);
/* Acceptor: from the initiator's record, create as many QPs, connect them (RTR, RTS) and
   return the connection; send back its record. OMC_ERR_RDMA_DEVICE if the link layers or GID
   types cannot talk, OMC_ERR_RDMA_QP if a transition failed (logged with every attribute). */
OMNICONN_API omc_result omc_rdma_conn_accept(omc_rdma* eng, const void* peer_record, size_t len, omc_rdma_conn** out);
/* Initiator: connect with the acceptor's record (same QP count and connection id). */
OMNICONN_API omc_result omc_rdma_conn_connect(omc_rdma_conn* conn, const void* peer_record, size_t len);
/* This side's endpoint record. */
OMNICONN_API omc_result omc_rdma_conn_record(omc_rdma_conn* conn, void* out, size_t cap, size_t* out_len);
/* 1 if connected and no QP has failed; 0 means: destroy it and connect again. */
OMNICONN_API int        omc_rdma_conn_ok(omc_rdma_conn* conn);

typedef struct omc_rdma_conn_info {
    uint64_t conn_id;
    uint64_t peer_incarnation;  /* 0 until connected */
    uint32_t qp_count;
    uint32_t path_mtu;          /* bytes, 0 until connected */
    int connected, broken;
    uint32_t peer_flags;        /* the peer's OMC_RDMA_FLAG_* (how it protects its destinations) */
    omc_result error;           /* why it broke */
    char error_text[160];
    uint32_t qpn[OMC_RDMA_MAX_QPS], peer_qpn[OMC_RDMA_MAX_QPS];
    uint32_t rails;             /* rails paired with the peer's (QPs on each) */
    uint32_t rails_up;          /* of those, still working (ok while >= 1) */
    uint32_t rail[OMC_RDMA_MAX_RAILS];      /* the engine's rail behind each pair (OMC_RDMA_MAX_RAILS: none, the
                                               peer's rail at that place found no partner here) */
} omc_rdma_conn_info;
OMNICONN_API omc_result omc_rdma_conn_query(omc_rdma_conn* conn, omc_rdma_conn_info* out);
/* Break the connection (QPs to ERROR: outstanding work fails at once) and release this handle;
   the QPs are destroyed when the last operation on them has returned. */
OMNICONN_API void       omc_rdma_conn_destroy(omc_rdma_conn* conn);

/* ============================================================================================== */
/* [SECTION] RDMA: transfers                                                                      */
/* ============================================================================================== */

/* Receiver: let the peer of conn write [dst, dst + length) (inside a registered region) and
   encode the descriptor to send it (desc_cap >= OMC_RDMA_TARGET_MAX is always enough). With
   memory windows this binds them and waits (until deadline) for the binds to complete. The
   window stays open until omc_rdma_revoke. */
OMNICONN_API omc_result omc_rdma_expose(omc_rdma_conn* conn, void* dst, uint64_t length, omc_time_ns deadline,
                                        omc_rdma_window** out, void* desc, size_t desc_cap, size_t* desc_len);
/* Receiver: close a window and free it (with memory windows: invalidate them and wait, so the
   peer can no longer write there once this returns). Always frees the window; an error means
   the connection broke meanwhile (its QPs are in ERROR, which also stops the peer). */
OMNICONN_API omc_result omc_rdma_revoke(omc_rdma_window* win, omc_time_ns deadline);

/* One piece of a source: inside a registered region of the writer's engine. */
typedef struct omc_rdma_sge {
    const void* addr;
    uint64_t length;
} omc_rdma_sge;

/* Sender: write the concatenation of the count pieces into the destination a descriptor
   describes (in order, from its start), and return when every byte is in the peer's memory.
   Errors: OMC_ERR_TOO_LARGE (payload > destination), OMC_ERR_MALFORMED/CHECKSUM (descriptor),
   OMC_ERR_INVALID_ARG (a piece is not registered), OMC_ERR_RDMA_ACCESS (the peer refused the
   rkey or range), OMC_ERR_CONNECTION (peer gone), OMC_ERR_RDMA_QP (connection broken),
   OMC_ERR_TIMEOUT (deadline; the connection is then broken so no DMA outlives the call). */
OMNICONN_API omc_result omc_rdma_write(omc_rdma_conn* conn, const omc_rdma_sge* src, uint32_t count,
                                       const void* desc, size_t desc_len, omc_time_ns deadline);
/* The same in two halves, for pipelining: start posts every request (waiting for queue space
   until deadline) and returns an operation; wait completes and frees it. Every started
   operation must be waited for. */
OMNICONN_API omc_result omc_rdma_write_start(omc_rdma_conn* conn, const omc_rdma_sge* src, uint32_t count,
                                             const void* desc, size_t desc_len, omc_time_ns deadline, omc_rdma_op** out);
OMNICONN_API omc_result omc_rdma_op_wait(omc_rdma_op* op, omc_time_ns deadline);
/* Wait at most until deadline without giving up: OMC_ERR_BUSY means the operation is still
   running and stays valid (test again, or op_wait it); anything else is its result (freed). */
OMNICONN_API omc_result omc_rdma_op_test(omc_rdma_op* op, omc_time_ns deadline);

/* ============================================================================================== */
/* [SECTION] Transfer engine: registered memory, batched READ and WRITE, notifications            */
/* ============================================================================================== */
/*  An omc_xfer is what Mooncake's TransferEngine and NIXL's agents are: the caller registers its
    own memory, exports a descriptor of it (address ranges and a key per rail), and a peer that
    imports it moves lists of (local address, remote address, length) triples with one-sided
    RDMA READ or WRITE, one completion per batch, with a per-entry status and an optional
    notification that reaches the target after every byte of the batch has landed. Without an
    RDMA device (or with OMC_XFER_TRANSPORT_TCP) the same calls run over plain TCP against the
    peer's RPC listener: a READ is a request the listener answers from registered memory, a
    WRITE a push into it. Peers are named "host:port" (the RPC listener; omc_xfer_name) and
    found as Mooncake's P2PHANDSHAKE mode finds them: the listener answers the descriptor
    exchange. See TRANSFER ENGINE in the manual and docs/rdma.md. */

typedef struct omc_xfer omc_xfer;
typedef struct omc_xfer_peer omc_xfer_peer;
typedef struct omc_xfer_batch omc_xfer_batch;

#define OMC_XFER_DESC_MAGIC 0x44434D4Fu     /* "OMCD": the exported memory descriptor */
#define OMC_XFER_DESC_VERSION 1
#define OMC_XFER_DESC_HEADER 24             /* + host + ranges + CRC */
#define OMC_XFER_DESC_RANGE 24              /* + 4 bytes (an rkey) per rail */
#define OMC_XFER_MAX_RANGES 256             /* registrations one engine exports */
#define OMC_XFER_HOST_MAX 64                /* host text, NUL included (63 bytes on the wire) */
#define OMC_XFER_DESC_MAX (OMC_XFER_DESC_HEADER + 63 + OMC_XFER_MAX_RANGES * (OMC_XFER_DESC_RANGE + 4 * OMC_RDMA_MAX_RAILS) + 4)
#define OMC_XFER_RPC_MAGIC 0x51434D4Fu      /* "OMCQ": a request to the RPC listener */
#define OMC_XFER_RPC_ANSWER 0x41434D4Fu     /* "OMCA": its answer */
#define OMC_XFER_RPC_VERSION 1
#define OMC_XFER_RPC_HEADER 32
#define OMC_XFER_NOTIFY_MAX 4096            /* bytes of one notification */
#define OMC_XFER_NAME_MAX 80                /* "host:port" text, NUL included */
#define OMC_XFER_MAX_ENTRIES 65536          /* entries of one batch */
#define OMC_XFER_MEM_DEVICE 0x1u            /* omc_xfer_register: GPU memory (GPUDirect, dma-buf) */

typedef enum omc_xfer_transport {
    OMC_XFER_TRANSPORT_DEFAULT = 0,     /* RDMA if the verbs engine starts, else TCP (and say why) */
    OMC_XFER_TRANSPORT_RDMA,            /* RDMA or fail (OMC_ERR_UNAVAILABLE / _RDMA_DEVICE) */
    OMC_XFER_TRANSPORT_TCP              /* TCP only, even where RDMA would work */
} omc_xfer_transport;

typedef enum omc_xfer_op {
    OMC_XFER_READ = 1,                  /* remote -> local (one-sided RDMA READ, or a request) */
    OMC_XFER_WRITE = 2                  /* local -> remote (RDMA WRITE, or a push) */
} omc_xfer_op;

/* CURVE keys of an engine (Z85 text, 40 characters, as omc_tcp_curve_keypair or zmq_curve_keypair
   make them; the same keys the remote connector takes). */
typedef struct omc_xfer_curve {
    const char* secret_key;     /* this engine's secret key: its listener then serves only peers that
                                   know its public key (the descriptor exchange runs inside CURVE) */
    const char* public_key;     /* the public key of secret_key; NULL = derived from it */
    const char* server_key;     /* the public key of the engines this one opens: it then opens peers
                                   only through CURVE (a peer without CURVE is refused) */
} omc_xfer_curve;

typedef struct omc_xfer_desc {
    const char* host;           /* address the RPC listener binds and announces (an IP literal or
                                   a name); NULL = "127.0.0.1" */
    uint32_t port;              /* RPC port; 0 = any free port (omc_xfer_query says which) */
    omc_xfer_transport transport;       /* 0 = OMC_XFER_TRANSPORT_DEFAULT */
    omc_rdma_desc rdma;         /* the verbs engine (devices, rails, traffic class, ...);
                                   rdma.local_addr defaults to host; rdma.hooks to hooks */
    uint32_t max_clients;       /* listener connections served at once; 0 = 64 */
    uint32_t max_notifies;      /* notifications queued until omc_xfer_notifs; 0 = 1024 */
    uint32_t io_timeout_ms;     /* a listener client that moves none of a request's next 4 MiB
                                   (or of its header) this long is dropped; 0 = 10000 */
    uint32_t window;            /* TCP: requests of one batch in flight; 0 = 32 */
    omc_xfer_curve curve;       /* CURVE on the descriptor exchange (see "Authentication"); all NULL =
                                   $OMNICONN_XFER_SECRET_KEY_FILE / _SERVER_KEY_FILE if set, else off */
    uint32_t curve_port;        /* with curve.secret_key: the CURVE port of the exchange; 0 = any free one */
    omc_hooks hooks;
} omc_xfer_desc;

/* One entry of a batch: `length` bytes between local memory (inside a range registered with
   this engine) and the peer's memory at `remote` (inside one range of its descriptor). */
typedef struct omc_xfer_entry {
    void* local;
    uint64_t remote;
    uint64_t length;
} omc_xfer_entry;

/* A decoded descriptor (omc_xfer_descriptor_decode): what a peer exported. */
typedef struct omc_xfer_range {
    uint64_t addr, length;
    uint32_t id;                /* the registration's number: a range registered again is another */
    uint32_t rkey[OMC_RDMA_MAX_RAILS];  /* per rail of the exporter (RDMA only) */
} omc_xfer_range;

typedef struct omc_xfer_descriptor {
    uint64_t incarnation;       /* the exporting engine (random, never 0; a new engine, a new one) */
    char host[OMC_XFER_HOST_MAX];
    uint32_t port;              /* its RPC listener */
    uint32_t rails;             /* 0: the exporter moves data over TCP only */
    uint32_t count;             /* ranges */
    omc_xfer_range range[OMC_XFER_MAX_RANGES];
} omc_xfer_descriptor;

/* Encode / decode a descriptor (see WIRE FORMATS). Decoding checks magic, version, every count
   and length, the host text and the CRC before anything is used: OMC_ERR_MALFORMED,
   OMC_ERR_VERSION, OMC_ERR_CHECKSUM. Pure and reentrant. */
OMNICONN_API omc_result omc_xfer_descriptor_encode(const omc_xfer_descriptor* d, void* out, size_t cap, size_t* out_len);
OMNICONN_API omc_result omc_xfer_descriptor_decode(const void* data, size_t len, omc_xfer_descriptor* out);

typedef struct omc_xfer_info {
    char name[OMC_XFER_NAME_MAX];       /* "host:port" peers use */
    uint32_t port;              /* the RPC port (Mooncake's get_rpc_port) */
    omc_xfer_transport transport;       /* resolved: RDMA or TCP */
    char why_tcp[256];          /* TCP although RDMA was allowed: why */
    uint64_t incarnation;
    uint32_t regions;
    uint64_t registered_bytes;
    uint64_t batches, batch_failures, bytes_read, bytes_written;   /* as initiator */
    uint64_t served_reads, served_writes, served_bytes, refused;   /* as target (TCP listener) */
    uint64_t notifies, notifies_dropped;        /* received; refused because the queue was full */
    uint32_t clients;           /* listener connections now */
    uint32_t curve_port;        /* the CURVE port of the descriptor exchange (0: no CURVE) */
    uint64_t auth_failures;     /* of `refused`: clients that did not authenticate */
} omc_xfer_info;

/* A notification as the target receives it. */
typedef struct omc_xfer_notif {
    char peer[OMC_XFER_NAME_MAX];       /* the sender's name ("host:port") */
    uint32_t length;
    uint8_t data[OMC_XFER_NOTIFY_MAX];
} omc_xfer_notif;

/* Start an engine: the verbs engine (unless TCP), then the RPC listener on desc->host:port.
   Returns OMC_ERR_INVALID_ARG, OMC_ERR_SYSTEM (bind/listen; the log says why), OMC_ERR_UNAVAILABLE
   or OMC_ERR_RDMA_DEVICE (transport RDMA only), OMC_ERR_NO_MEMORY. Thread safety: every call on
   an engine, its peers and batches is thread-safe except destroy. */
OMNICONN_API omc_result omc_xfer_create(const omc_xfer_desc* desc, omc_xfer** out);
/* Stop the listener, cancel and wait for running batches, close peers, deregister everything.
   Must not race with other calls on the engine. */
OMNICONN_API void       omc_xfer_destroy(omc_xfer* x);
OMNICONN_API omc_result omc_xfer_query(omc_xfer* x, omc_xfer_info* out);
/* omc_xfer_create with every other field zero: for bindings (ctypes) that would rather not
   mirror omc_xfer_desc. devices: as omc_rdma_desc.devices (NULL or "" = all). */
OMNICONN_API omc_result omc_xfer_start(const char* host, uint32_t port, omc_xfer_transport transport, const char* devices,
                                       omc_xfer** out);
/* The RPC port (Mooncake's get_rpc_port), and "host:port" as peers name this engine. */
OMNICONN_API uint32_t   omc_xfer_port(omc_xfer* x);
OMNICONN_API const char* omc_xfer_name(omc_xfer* x);
/* The verbs engine behind x (NULL over TCP): for omc_rdma_query / omc_rdma_rail_stats. */
OMNICONN_API omc_rdma*  omc_xfer_rdma(omc_xfer* x);

/* Register [addr, addr + length) of the caller's memory: peers may then read and write it (with
   the descriptor), and local entries may use it. flags: OMC_XFER_MEM_DEVICE for GPU memory, which
   needs a build with OMNICONN_ENABLE_CUDA and the RDMA transport (ibv_reg_dmabuf_mr); otherwise
   OMC_ERR_UNAVAILABLE and a log line. OMC_ERR_EXISTS if it overlaps a registration,
   OMC_ERR_MEMLOCK (RDMA: the lock limit, the log names the fix), OMC_ERR_TOO_LARGE (more than
   OMC_XFER_MAX_RANGES). */
OMNICONN_API omc_result omc_xfer_register(omc_xfer* x, void* addr, uint64_t length, uint32_t flags);
/* Unregister the range that starts at addr. OMC_ERR_BUSY (nothing changes) while a batch of this
   engine uses it as local memory; a peer's request being served from it finishes first (TCP),
   later ones fail with OMC_ERR_STALE (TCP) or OMC_ERR_RDMA_ACCESS (RDMA: the key is gone).
   OMC_ERR_NOT_FOUND if no range starts there. */
OMNICONN_API omc_result omc_xfer_unregister(omc_xfer* x, void* addr);
/* This engine's descriptor (its listener and every registered range; cap >= OMC_XFER_DESC_MAX is
   always enough, else OMC_ERR_TOO_LARGE). */
OMNICONN_API omc_result omc_xfer_export(omc_xfer* x, void* out, size_t cap, size_t* out_len);

/* A peer by name ("host:port", "[v6]:port"): connect to its RPC listener and fetch its descriptor
   (Mooncake's P2PHANDSHAKE). OMC_ERR_CONNECTION (nobody answers), OMC_ERR_TIMEOUT, OMC_ERR_PROTOCOL
   (it is not a transfer engine), OMC_ERR_INVALID_ARG (bad name). */
OMNICONN_API omc_result omc_xfer_peer_open(omc_xfer* x, const char* name, omc_time_ns deadline, omc_xfer_peer** out);
/* A peer from a descriptor received some other way; it connects at its first transfer, and the
   engine that answers there must be the one that exported it (else OMC_ERR_PEER_RESTARTED). */
OMNICONN_API omc_result omc_xfer_peer_import(omc_xfer* x, const void* desc, size_t len, omc_xfer_peer** out);
/* Fetch the peer's descriptor again (ranges it registered since). OMC_ERR_PEER_RESTARTED if
   another engine answers: open the peer again. */
OMNICONN_API omc_result omc_xfer_peer_refresh(omc_xfer_peer* peer, omc_time_ns deadline);
/* Copy of the descriptor the peer was opened or refreshed with. */
OMNICONN_API omc_result omc_xfer_peer_descriptor(omc_xfer_peer* peer, omc_xfer_descriptor* out);
/* Close a peer: cancels its running batches and waits until they ended (destroy them before or
   after, but before the engine). */
OMNICONN_API void       omc_xfer_peer_close(omc_xfer_peer* peer);

/* Start a batch: every entry is checked first (local range registered here: else
   OMC_ERR_INVALID_ARG; remote range inside one range of the peer's descriptor: else
   OMC_ERR_RDMA_ACCESS; count <= OMC_XFER_MAX_ENTRIES, notify_len <= OMC_XFER_NOTIFY_MAX) and
   nothing moves if one fails (the log names the entry). Then the batch runs on its own thread
   and *out tracks it. notify (may be NULL): delivered to the peer (omc_xfer_notifs) once every
   entry completed, never otherwise. deadline: an absolute time for the whole batch. */
OMNICONN_API omc_result omc_xfer_submit(omc_xfer_peer* peer, omc_xfer_op op, const omc_xfer_entry* entries, uint32_t count,
                                        const void* notify, uint32_t notify_len, omc_time_ns deadline, omc_xfer_batch** out);
/* OMC_ERR_BUSY while the batch runs, else its result (OMC_OK: every entry and the notification
   arrived). Never blocks. */
OMNICONN_API omc_result omc_xfer_batch_test(omc_xfer_batch* b);
/* Wait until the batch ends or deadline (then OMC_ERR_TIMEOUT, the batch goes on); returns its
   result. */
OMNICONN_API omc_result omc_xfer_batch_wait(omc_xfer_batch* b, omc_time_ns deadline);
/* Per-entry results (count = the batch's count): OMC_OK, or why that entry did not complete
   (OMC_ERR_CLOSED: not attempted or cut short because the batch was cancelled or stopped).
   OMC_ERR_BUSY while the batch runs. */
OMNICONN_API omc_result omc_xfer_batch_status(omc_xfer_batch* b, omc_result* status, uint32_t count);
/* Stop a batch: entries not complete end with OMC_ERR_CLOSED and the batch with OMC_ERR_CLOSED
   (RDMA: the peer's connection is reset, so no request outlives the batch; the next batch
   connects again). Returns at once; wait for the end with omc_xfer_batch_wait. */
OMNICONN_API void       omc_xfer_batch_cancel(omc_xfer_batch* b);
/* Cancel if running, wait for the end, free. */
OMNICONN_API void       omc_xfer_batch_destroy(omc_xfer_batch* b);
/* submit + wait + status + destroy: the synchronous form. status (may be NULL) gets count results. */
OMNICONN_API omc_result omc_xfer_run(omc_xfer_peer* peer, omc_xfer_op op, const omc_xfer_entry* entries, uint32_t count,
                                     const void* notify, uint32_t notify_len, omc_time_ns deadline, omc_result* status);
/* A notification on its own. OMC_ERR_BUSY: the peer's queue is full. */
OMNICONN_API omc_result omc_xfer_notify(omc_xfer_peer* peer, const void* data, uint32_t len, omc_time_ns deadline);
/* Take up to cap received notifications, oldest first; returns how many (or a negative
   omc_result). */
OMNICONN_API int        omc_xfer_notifs(omc_xfer* x, omc_xfer_notif* out, int cap);

/* ============================================================================================== */
/* [SECTION] RDMA: the remote connector with the RDMA data plane                                  */
/* ============================================================================================== */
#if OMC__HAS_ZMQ

/* The remote connector (ZMQ side channel, entries, fan-out, TTL, deadlines, restarts, health:
   see omc_tcp_create) with this engine as its data plane: a receiver's get exposes its
   destination, the sender RDMA-WRITEs the payload from its pool straight into it and sends DONE
   once the write completed. Channels to senders without RDMA, or whose RDMA bring-up fails, use
   TCP (that peer only); omc_rdma_connector_query() and the connector's health say why.
   Both ends must be created with omc_rdma_connector_create (the metadata says
   OMC_TRANSPORT_RDMA; the body is the TCP connector's). */
typedef struct omc_rdma_connector_desc {
    omc_tcp_desc net;           /* side channel, pool, roles, ports, CURVE: as for omc_tcp_create */
    omc_rdma_desc rdma;         /* the engine; rdma.local_addr defaults to net.host if that is an
                                   IP literal; rdma.hooks default to net.hooks */
    int require_rdma;           /* 1: fail if the engine cannot start (default: TCP, and say why) */
} omc_rdma_connector_desc;

OMNICONN_API omc_result omc_rdma_connector_create(const omc_rdma_connector_desc* desc, omc_conn** out);

/* The RDMA connector in the shape omniconn_pipeline.h's omc_pipeline_connect_desc.rdma_connector
   takes (omc_pipeline_rdma_fn): net as for omc_tcp_create, the engine on device_name (NULL = the
   ACTIVE devices, one rail each) with its GID chosen for local_addr (NULL = net->host), require_rdma as in
   omc_rdma_connector_desc. A program whose implementation file includes this header has it
   offered to the pipeline automatically. */
OMNICONN_API omc_result omc_rdma_pipeline_connector(const struct omc_tcp_desc* net, const char* device_name, const char* local_addr,
                                                    int require_rdma, omc_conn** out);

typedef struct omc_rdma_connector_info {
    int rdma_enabled;           /* the engine is up and the pool registered */
    char reason[256];           /* if not: why (every peer uses TCP) */
    uint64_t rdma_channels;     /* receiver: channels connected over RDMA */
    uint64_t tcp_fallbacks;     /* receiver: channels that fell back to TCP */
    char last_fallback[256];    /* the latest fallback: which sender and why */
    uint64_t accepted, accept_failures;     /* sender: RDMA connections accepted / refused */
    uint64_t pushes, push_failures, push_bytes;
    uint32_t sender_connections;    /* sender: RDMA connections it keeps now */
    uint64_t quarantined;       /* receiver: destinations whose revoke failed (kept out of the pool) */
    omc_rdma_info engine;       /* valid if rdma_enabled */
} omc_rdma_connector_info;

/* What the connector's RDMA plane is doing. OMC_ERR_INVALID_ARG if conn was not made by
   omc_rdma_connector_create. */
OMNICONN_API omc_result omc_rdma_connector_query(omc_conn* conn, omc_rdma_connector_info* out);
/* omc_rdma_rail_stats of the connector's engine. OMC_ERR_INVALID_ARG if conn was not made by
   omc_rdma_connector_create, OMC_ERR_UNAVAILABLE if its RDMA plane is off. */
OMNICONN_API int        omc_rdma_connector_rail_stats(omc_conn* conn, omc_rdma_rail_stat* out, int cap);

#endif /* OMC__HAS_ZMQ */

#ifdef __cplusplus
} /* extern "C" */
#endif

/* -------------------------------- stop here if you only need the API ------------------------- */
#endif /* OMNICONN_RDMA_H_INCLUDED */

/* ============================================================================================== */
/*                                                                                                */
/*                                     IMPLEMENTATION                                             */
/*                                                                                                */
/* ============================================================================================== */
#if defined(OMNICONN_IMPLEMENTATION) && !defined(OMNICONN_RDMA_IMPL_INCLUDED)
#define OMNICONN_RDMA_IMPL_INCLUDED

/* ============================================================================================== */
/* [SECTION] Implementation: RDMA tunables                                                        */
/* ============================================================================================== */

#ifndef OMNICONN_RDMA_LIBRARY
    #define OMNICONN_RDMA_LIBRARY "libibverbs.so.1"
#endif
#ifndef OMNICONN_RDMA_QPS_PER_PEER
    #define OMNICONN_RDMA_QPS_PER_PEER 2
#endif
#ifndef OMNICONN_RDMA_QUEUE_DEPTH
    #define OMNICONN_RDMA_QUEUE_DEPTH 128
#endif
#ifndef OMNICONN_RDMA_SIGNAL_EVERY
    #define OMNICONN_RDMA_SIGNAL_EVERY 16
#endif
#ifndef OMNICONN_RDMA_SLICE
    #define OMNICONN_RDMA_SLICE ((uint64_t)1 << 20)
#endif
#ifndef OMNICONN_RDMA_SPLIT_MIN
    #define OMNICONN_RDMA_SPLIT_MIN ((uint64_t)256 << 10)
#endif
#ifndef OMNICONN_RDMA_MR_CHUNK
    #define OMNICONN_RDMA_MR_CHUNK ((uint64_t)2 << 30)
#endif
#ifndef OMNICONN_RDMA_CQ_DEPTH
    #define OMNICONN_RDMA_CQ_DEPTH 16384
#endif
#ifndef OMNICONN_RDMA_SPIN_US
    #define OMNICONN_RDMA_SPIN_US 50
#endif
#ifndef OMNICONN_RDMA_ACK_TIMEOUT
    #define OMNICONN_RDMA_ACK_TIMEOUT 16
#endif
#ifndef OMNICONN_RDMA_RETRY_COUNT
    #define OMNICONN_RDMA_RETRY_COUNT 6
#endif

#include <arpa/inet.h>
#include <dirent.h>
#include <limits.h>

/* ============================================================================================== */
/* [SECTION] Implementation: RDMA pure helpers (GID choice, MTU, records, descriptors)            */
/* ============================================================================================== */

OMC__PRIVATE int omc__gid_is_zero(const uint8_t* g) {
    int i;
    for (i = 0; i < 16; i++) if (g[i]) return 0;
    return 1;
}

/* fe80::/10: valid only on one link; a peer elsewhere cannot route to it */
OMC__PRIVATE int omc__gid_is_link_local(const uint8_t* g) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }

/* ::ffff:a.b.c.d */
OMC__PRIVATE int omc__gid_is_v4_mapped(const uint8_t* g) {
    int i;
    for (i = 0; i < 10; i++) if (g[i]) return 0;
    return g[10] == 0xff && g[11] == 0xff;
}

OMNICONN_API void omc_rdma_gid_to_text(const uint8_t gid[16], char* out, size_t out_size) {
    char buf[INET6_ADDRSTRLEN];
    if (!out || !out_size) return;
    if (!gid || !inet_ntop(AF_INET6, gid, buf, sizeof(buf))) snprintf(buf, sizeof(buf), "?");
    snprintf(out, out_size, "%s", buf);
}

OMNICONN_API omc_result omc_rdma_addr_to_gid(const char* addr, uint8_t out[16]) {
    struct in_addr v4;
    if (!addr || !out) return OMC_ERR_INVALID_ARG;
    if (inet_pton(AF_INET, addr, &v4) == 1) {
        memset(out, 0, 16);
        out[10] = 0xff;
        out[11] = 0xff;
        memcpy(out + 12, &v4.s_addr, 4);    /* s_addr is already in network byte order */
        return OMC_OK;
    }
    if (inet_pton(AF_INET6, addr, out) == 1) return OMC_OK;
    return OMC_ERR_INVALID_ARG;
}

static const char* omc__gid_type_name(omc_rdma_gid_type t) {
    switch (t) {
        case OMC_RDMA_GID_IB: return "IB";
        case OMC_RDMA_GID_ROCE_V1: return "RoCE v1";
        case OMC_RDMA_GID_ROCE_V2: return "RoCE v2";
        default: return "unknown type";
    }
}

/* The fallback order on RoCE when no GID maps the side channel's address (lower is better). */
OMC__PRIVATE int omc__gid_rank(const omc_rdma_gid_entry* e) {
    int ll = omc__gid_is_link_local(e->gid);
    if (e->type == OMC_RDMA_GID_ROCE_V2 && !ll) return omc__gid_is_v4_mapped(e->gid) ? 0 : 1;
    if (e->type == OMC_RDMA_GID_ROCE_V1 && !ll) return 2;
    if (e->type == OMC_RDMA_GID_ROCE_V2) return 3;
    if (e->type == OMC_RDMA_GID_ROCE_V1) return 4;
    return ll ? 6 : 5;      /* RoCE port but a GID of unknown type: last resort */
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
OMC__PRIVATE void omc__why(char* why, size_t n, const char* fmt, ...) {
    va_list ap;
    if (!why || !n) return;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

OMNICONN_API omc_result omc_rdma_choose_gid(const omc_rdma_gid_entry* table, uint32_t count, omc_rdma_link link,
                                            const uint8_t* want, int override_index, uint32_t* out_index,
                                            char* why, size_t why_size) {
    char text[INET6_ADDRSTRLEN], wtext[INET6_ADDRSTRLEN];
    const omc_rdma_gid_entry* best = NULL;
    uint32_t i;
    int best_rank = 1000;
    if (!out_index || (count && !table)) return OMC_ERR_INVALID_ARG;
    *out_index = 0;
    if (override_index >= 0) {                      /* the user knows better: trust, but verify */
        for (i = 0; i < count; i++) {
            if (table[i].index != (uint32_t)override_index || omc__gid_is_zero(table[i].gid)) continue;
            omc_rdma_gid_to_text(table[i].gid, text, sizeof(text));
            omc__why(why, why_size, "GID index %u (%s, %s) as configured", table[i].index, text, omc__gid_type_name(table[i].type));
            *out_index = table[i].index;
            return OMC_OK;
        }
        omc__why(why, why_size, "configured GID index %d is empty or does not exist on this port (%u entries)", override_index, count);
        return OMC_ERR_RDMA_DEVICE;
    }
    if (link == OMC_RDMA_LINK_INFINIBAND) {        /* InfiniBand routes by LID; the port GID is index 0 */
        for (i = 0; i < count; i++) {
            if (omc__gid_is_zero(table[i].gid)) continue;
            if (!best || table[i].index < best->index) best = &table[i];
        }
        if (!best) { omc__why(why, why_size, "the port has no GID"); return OMC_ERR_RDMA_DEVICE; }
        omc_rdma_gid_to_text(best->gid, text, sizeof(text));
        omc__why(why, why_size, "GID index %u (%s): InfiniBand port GID", best->index, text);
        *out_index = best->index;
        return OMC_OK;
    }
    wtext[0] = '\0';
    if (want) {
        const omc_rdma_gid_entry* v1 = NULL;
        omc_rdma_gid_to_text(want, wtext, sizeof(wtext));
        for (i = 0; i < count; i++) {
            if (omc__gid_is_zero(table[i].gid) || memcmp(table[i].gid, want, 16) != 0) continue;
            if (table[i].type == OMC_RDMA_GID_ROCE_V2) { best = &table[i]; break; }
            if (!v1) v1 = &table[i];
        }
        if (!best) best = v1;
        if (best) {
            omc__why(why, why_size, "GID index %u (%s, %s%s%s): maps the side channel's address", best->index, wtext,
                     omc__gid_type_name(best->type), best->netdev[0] ? " on " : "", best->netdev);
            *out_index = best->index;
            return OMC_OK;
        }
    }
    for (i = 0; i < count; i++) {
        int rank;
        if (omc__gid_is_zero(table[i].gid)) continue;
        rank = omc__gid_rank(&table[i]);
        if (rank < best_rank || (rank == best_rank && table[i].index < best->index)) { best = &table[i]; best_rank = rank; }
    }
    if (!best) {
        omc__why(why, why_size, "the port's GID table is empty: give the Ethernet device an IP address");
        return OMC_ERR_RDMA_DEVICE;
    }
    omc_rdma_gid_to_text(best->gid, text, sizeof(text));
    omc__why(why, why_size, "GID index %u (%s, %s%s%s)%s%s%s", best->index, text, omc__gid_type_name(best->type),
             best->netdev[0] ? " on " : "", best->netdev, want ? ": no GID maps " : "", wtext,
             omc__gid_is_link_local(best->gid) ? " (link-local: only peers on the same link can reach it)" : "");
    *out_index = best->index;
    return OMC_OK;
}

OMNICONN_API uint32_t omc_rdma_mtu_bytes(uint32_t mtu) { return (mtu >= 1 && mtu <= 5) ? 128u << mtu : 0; }

OMNICONN_API omc_result omc_rdma_mtu_negotiate(uint32_t local_mtu, uint32_t peer_mtu, uint32_t* out_mtu) {
    if (!out_mtu) return OMC_ERR_INVALID_ARG;
    *out_mtu = 0;
    if (!omc_rdma_mtu_bytes(local_mtu) || !omc_rdma_mtu_bytes(peer_mtu)) return OMC_ERR_INVALID_ARG;
    *out_mtu = omc__min(local_mtu, peer_mtu);   /* a packet must fit both ports */
    return OMC_OK;
}

/* ---- endpoint record ------------------------------------------------------------------------- */

#define OMC__RDMA_24BIT 0x00FFFFFFu

/* A rail entry of a version-2 record: 0 if it is valid (port 0: an unpaired slot, all zero). */
OMC__PRIVATE int omc__rdma_rail_bad(const omc_rdma_record_rail* r) {
    if (r->port == 0) return r->mtu || r->link || r->gid_index || r->gid_type || r->prefix || r->lid || !omc__gid_is_zero(r->gid);
    return !omc_rdma_mtu_bytes(r->mtu) || (r->link != OMC_RDMA_LINK_INFINIBAND && r->link != OMC_RDMA_LINK_ETHERNET) ||
           r->gid_type < OMC_RDMA_GID_IB || r->gid_type > OMC_RDMA_GID_ROCE_V2 || r->prefix > 128;
}

/* Version 2 (see WIRE FORMATS): several rails, qps_per_rail QPs on each. */
OMC__PRIVATE omc_result omc__rdma_record_encode_rails(const omc_rdma_record* rec, uint8_t* p, size_t cap, size_t* out_len) {
    uint32_t R = rec->rails, Q = rec->qps_per_rail, i, paired = 0;
    size_t need, qoff;
    if (R < 2 || R > OMC_RDMA_MAX_RAILS || Q < 1 || R * Q > OMC_RDMA_MAX_QPS || (rec->flags & ~OMC__RDMA_FLAGS))
        return OMC_ERR_INVALID_ARG;
    for (i = 0; i < R; i++) {
        if (omc__rdma_rail_bad(&rec->rail[i])) return OMC_ERR_INVALID_ARG;
        paired += rec->rail[i].port != 0;
    }
    if (!paired) return OMC_ERR_INVALID_ARG;
    for (i = 0; i < R * Q; i++) {
        int used = rec->rail[i / Q].port != 0;
        if ((used && rec->qpn[i] == 0) || (!used && (rec->qpn[i] || rec->psn[i])) || (rec->qpn[i] & ~OMC__RDMA_24BIT) ||
            (rec->psn[i] & ~OMC__RDMA_24BIT))
            return OMC_ERR_INVALID_ARG;
    }
    qoff = OMC_RDMA_RECORD_HEADER_RAILS + OMC_RDMA_RECORD_RAIL * (size_t)R;
    need = qoff + 8 * (size_t)(R * Q) + 4;
    if (cap < need) return OMC_ERR_TOO_LARGE;
    memset(p, 0, need);
    omc__put_u32(p + 0, OMC_RDMA_RECORD_MAGIC);
    p[4] = OMC_RDMA_RECORD_VERSION_RAILS;
    p[5] = (uint8_t)Q;
    p[6] = (uint8_t)R;
    p[7] = rec->flags;
    omc__put_u64(p + 8, rec->incarnation);
    omc__put_u64(p + 16, rec->conn_id);
    for (i = 0; i < R; i++) {
        const omc_rdma_record_rail* r = &rec->rail[i];
        uint8_t* e = p + OMC_RDMA_RECORD_HEADER_RAILS + OMC_RDMA_RECORD_RAIL * i;
        e[0] = r->port;
        e[1] = r->mtu;
        e[2] = r->link;
        e[3] = r->gid_index;
        e[4] = r->gid_type;
        e[5] = r->prefix;
        omc__put_u16(e + 6, r->lid);
        memcpy(e + 8, r->gid, 16);
    }
    for (i = 0; i < R * Q; i++) {
        omc__put_u32(p + qoff + 8 * i, rec->qpn[i]);
        omc__put_u32(p + qoff + 8 * i + 4, rec->psn[i]);
    }
    omc__put_u32(p + need - 4, omc__crc32c(0, p, need - 4));
    if (out_len) *out_len = need;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__rdma_record_decode_rails(const uint8_t* p, size_t len, omc_rdma_record* out) {
    uint32_t Q, R, i, first = OMC_RDMA_MAX_RAILS;
    size_t qoff;
    if (len < OMC_RDMA_RECORD_HEADER_RAILS + 4) return OMC_ERR_MALFORMED;
    Q = p[5];
    R = p[6];
    if (R < 2 || R > OMC_RDMA_MAX_RAILS || Q < 1 || R * Q > OMC_RDMA_MAX_QPS) return OMC_ERR_MALFORMED;
    qoff = OMC_RDMA_RECORD_HEADER_RAILS + OMC_RDMA_RECORD_RAIL * (size_t)R;
    if (len != qoff + 8 * (size_t)(R * Q) + 4) return OMC_ERR_MALFORMED;
    if (omc__crc32c(0, p, len - 4) != omc__get_u32(p + len - 4)) return OMC_ERR_CHECKSUM;
    if (p[7] & ~OMC__RDMA_FLAGS) return OMC_ERR_MALFORMED;
    for (i = 0; i < R; i++) {
        const uint8_t* e = p + OMC_RDMA_RECORD_HEADER_RAILS + OMC_RDMA_RECORD_RAIL * i;
        omc_rdma_record_rail* r = &out->rail[i];
        uint32_t k;
        r->port = e[0];
        r->mtu = e[1];
        r->link = e[2];
        r->gid_index = e[3];
        r->gid_type = e[4];
        r->prefix = e[5];
        r->lid = omc__get_u16(e + 6);
        memcpy(r->gid, e + 8, 16);
        for (k = 24; k < OMC_RDMA_RECORD_RAIL; k++) if (e[k]) return OMC_ERR_MALFORMED;
        if (omc__rdma_rail_bad(r)) return OMC_ERR_MALFORMED;
        if (r->port && first == OMC_RDMA_MAX_RAILS) first = i;
    }
    if (first == OMC_RDMA_MAX_RAILS) return OMC_ERR_MALFORMED;     /* not one rail to talk on */
    for (i = 0; i < R * Q; i++) {
        uint32_t qpn = omc__get_u32(p + qoff + 8 * i), psn = omc__get_u32(p + qoff + 8 * i + 4);
        int used = out->rail[i / Q].port != 0;
        if ((used && qpn == 0) || (!used && (qpn || psn)) || (qpn & ~OMC__RDMA_24BIT) || (psn & ~OMC__RDMA_24BIT))
            return OMC_ERR_MALFORMED;
        out->qpn[i] = qpn;
        out->psn[i] = psn;
    }
    out->rails = R;
    out->qps_per_rail = Q;
    out->qp_count = R * Q;
    out->flags = p[7];
    out->incarnation = omc__get_u64(p + 8);
    out->conn_id = omc__get_u64(p + 16);
    out->port = out->rail[first].port;
    out->mtu = out->rail[first].mtu;
    out->link = out->rail[first].link;
    out->gid_index = out->rail[first].gid_index;
    out->gid_type = out->rail[first].gid_type;
    out->lid = out->rail[first].lid;
    memcpy(out->gid, out->rail[first].gid, 16);
    return OMC_OK;
}

OMNICONN_API omc_result omc_rdma_record_encode(const omc_rdma_record* rec, void* out, size_t cap, size_t* out_len) {
    uint8_t* p = (uint8_t*)out;
    size_t need;
    uint32_t i;
    if (out_len) *out_len = 0;
    if (!rec || !out) return OMC_ERR_INVALID_ARG;
    if (rec->rails > 1) return omc__rdma_record_encode_rails(rec, p, cap, out_len);
    if (rec->qp_count < 1 || rec->qp_count > OMC_RDMA_MAX_QPS || !omc_rdma_mtu_bytes(rec->mtu) || rec->port == 0 ||
        (rec->link != OMC_RDMA_LINK_INFINIBAND && rec->link != OMC_RDMA_LINK_ETHERNET) ||
        rec->gid_type < OMC_RDMA_GID_IB || rec->gid_type > OMC_RDMA_GID_ROCE_V2 || (rec->flags & ~OMC__RDMA_FLAGS))
        return OMC_ERR_INVALID_ARG;
    for (i = 0; i < rec->qp_count; i++)
        if (rec->qpn[i] == 0 || (rec->qpn[i] & ~OMC__RDMA_24BIT) || (rec->psn[i] & ~OMC__RDMA_24BIT)) return OMC_ERR_INVALID_ARG;
    need = OMC_RDMA_RECORD_HEADER + 8 * (size_t)rec->qp_count + 4;
    if (cap < need) return OMC_ERR_TOO_LARGE;
    memset(p, 0, need);
    omc__put_u32(p + 0, OMC_RDMA_RECORD_MAGIC);
    p[4] = OMC_RDMA_RECORD_VERSION;
    p[5] = (uint8_t)rec->qp_count;
    p[6] = rec->port;
    p[7] = rec->mtu;
    p[8] = rec->link;
    p[9] = rec->gid_index;
    p[10] = rec->gid_type;
    p[11] = rec->flags;
    omc__put_u16(p + 12, rec->lid);
    omc__put_u64(p + 16, rec->incarnation);
    omc__put_u64(p + 24, rec->conn_id);
    memcpy(p + 32, rec->gid, 16);
    for (i = 0; i < rec->qp_count; i++) {
        omc__put_u32(p + OMC_RDMA_RECORD_HEADER + 8 * i, rec->qpn[i]);
        omc__put_u32(p + OMC_RDMA_RECORD_HEADER + 8 * i + 4, rec->psn[i]);
    }
    omc__put_u32(p + need - 4, omc__crc32c(0, p, need - 4));
    if (out_len) *out_len = need;
    return OMC_OK;
}

OMNICONN_API omc_result omc_rdma_record_decode(const void* data, size_t len, omc_rdma_record* out) {
    const uint8_t* p = (const uint8_t*)data;
    uint32_t n, i;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!data) return OMC_ERR_INVALID_ARG;
    if (len < 8 || omc__get_u32(p) != OMC_RDMA_RECORD_MAGIC) return OMC_ERR_MALFORMED;
    if (p[4] == OMC_RDMA_RECORD_VERSION_RAILS) {
        omc_result r = omc__rdma_record_decode_rails(p, len, out);
        if (r != OMC_OK) memset(out, 0, sizeof(*out));
        return r;
    }
    if (len < OMC_RDMA_RECORD_HEADER + 8 + 4) return OMC_ERR_MALFORMED;
    if (p[4] != OMC_RDMA_RECORD_VERSION) return OMC_ERR_VERSION;
    n = p[5];
    if (n < 1 || n > OMC_RDMA_MAX_QPS || len != OMC_RDMA_RECORD_HEADER + 8 * (size_t)n + 4) return OMC_ERR_MALFORMED;
    if (omc__crc32c(0, p, len - 4) != omc__get_u32(p + len - 4)) return OMC_ERR_CHECKSUM;
    /* the checksum only proves the bytes arrived as sent: check every field anyway */
    if (p[6] == 0 || !omc_rdma_mtu_bytes(p[7]) || (p[8] != OMC_RDMA_LINK_INFINIBAND && p[8] != OMC_RDMA_LINK_ETHERNET) ||
        p[10] < OMC_RDMA_GID_IB || p[10] > OMC_RDMA_GID_ROCE_V2 || (p[11] & ~OMC__RDMA_FLAGS) || omc__get_u16(p + 14))
        return OMC_ERR_MALFORMED;
    for (i = 0; i < n; i++) {
        uint32_t qpn = omc__get_u32(p + OMC_RDMA_RECORD_HEADER + 8 * i), psn = omc__get_u32(p + OMC_RDMA_RECORD_HEADER + 8 * i + 4);
        if (qpn == 0 || (qpn & ~OMC__RDMA_24BIT) || (psn & ~OMC__RDMA_24BIT)) return OMC_ERR_MALFORMED;
        out->qpn[i] = qpn;
        out->psn[i] = psn;
    }
    out->qp_count = n;
    out->port = p[6];
    out->mtu = p[7];
    out->link = p[8];
    out->gid_index = p[9];
    out->gid_type = p[10];
    out->flags = p[11];
    out->lid = omc__get_u16(p + 12);
    out->incarnation = omc__get_u64(p + 16);
    out->conn_id = omc__get_u64(p + 24);
    memcpy(out->gid, p + 32, 16);
    return OMC_OK;
}

/* ---- transfer descriptor --------------------------------------------------------------------- */

/* Version 2 (see WIRE FORMATS): a key and a QP per extent and rail. */
OMC__PRIVATE size_t omc__rdma_target_size_rails(uint32_t extents, uint32_t rails) {
    return OMC_RDMA_TARGET_HEADER + (OMC_RDMA_TARGET_EXTENT_RAILS + 8 * (size_t)rails) * extents + 4;
}

OMC__PRIVATE omc_result omc__rdma_target_encode_rails(const omc_rdma_target* t, uint8_t* p, size_t cap, size_t* out_len) {
    uint64_t sum = 0;
    size_t need, es;
    uint32_t i, k, R = t->rails;
    if (R < 2 || R > OMC_RDMA_MAX_RAILS) return OMC_ERR_INVALID_ARG;
    for (i = 0; i < t->count; i++) {
        const omc_rdma_extent* e = &t->extent[i];
        uint32_t usable = 0;
        if (e->length == 0 || e->addr > UINT64_MAX - e->length || sum > UINT64_MAX - e->length) return OMC_ERR_INVALID_ARG;
        for (k = 0; k < R; k++) {
            if (e->qps[k] != OMC_RDMA_NO_QP && e->qps[k] >= OMC_RDMA_MAX_QPS) return OMC_ERR_INVALID_ARG;
            usable += e->qps[k] != OMC_RDMA_NO_QP;
        }
        if (!usable) return OMC_ERR_INVALID_ARG;
        sum += e->length;
    }
    if (sum != t->length) return OMC_ERR_INVALID_ARG;
    need = omc__rdma_target_size_rails(t->count, R);
    if (need > OMC_RDMA_TARGET_MAX || cap < need) return OMC_ERR_TOO_LARGE;
    es = OMC_RDMA_TARGET_EXTENT_RAILS + 8 * (size_t)R;
    memset(p, 0, need);
    omc__put_u32(p + 0, OMC_RDMA_TARGET_MAGIC);
    p[4] = OMC_RDMA_TARGET_VERSION_RAILS;
    p[5] = (uint8_t)t->count;
    p[6] = (uint8_t)t->flags;
    p[7] = (uint8_t)R;
    omc__put_u64(p + 8, t->conn_id);
    omc__put_u64(p + 16, t->length);
    for (i = 0; i < t->count; i++) {
        uint8_t* e = p + OMC_RDMA_TARGET_HEADER + es * i;
        omc__put_u64(e + 0, t->extent[i].addr);
        omc__put_u64(e + 8, t->extent[i].length);
        for (k = 0; k < R; k++) {
            omc__put_u32(e + 16 + 8 * k, t->extent[i].qps[k] == OMC_RDMA_NO_QP ? 0 : t->extent[i].rkeys[k]);
            omc__put_u16(e + 20 + 8 * k, t->extent[i].qps[k]);
        }
    }
    omc__put_u32(p + need - 4, omc__crc32c(0, p, need - 4));
    if (out_len) *out_len = need;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__rdma_target_decode_rails(const uint8_t* p, size_t len, uint32_t max_qps, omc_rdma_target* out) {
    uint64_t sum = 0;
    size_t es;
    uint32_t n = p[5], R = p[7], i, k, flags = p[6];
    if (n < 1 || n > OMC_RDMA_MAX_EXTENTS || R < 2 || R > OMC_RDMA_MAX_RAILS || len != omc__rdma_target_size_rails(n, R) ||
        len > OMC_RDMA_TARGET_MAX)
        return OMC_ERR_MALFORMED;
    if (omc__crc32c(0, p, len - 4) != omc__get_u32(p + len - 4)) return OMC_ERR_CHECKSUM;
    if (flags & ~OMC__RDMA_FLAGS) return OMC_ERR_MALFORMED;
    es = OMC_RDMA_TARGET_EXTENT_RAILS + 8 * (size_t)R;
    for (i = 0; i < n; i++) {
        const uint8_t* e = p + OMC_RDMA_TARGET_HEADER + es * i;
        omc_rdma_extent* x = &out->extent[i];
        uint32_t usable = 0;
        x->addr = omc__get_u64(e + 0);
        x->length = omc__get_u64(e + 8);
        if (x->length == 0 || x->addr > UINT64_MAX - x->length || sum > UINT64_MAX - x->length) return OMC_ERR_MALFORMED;
        for (k = 0; k < R; k++) {
            x->rkeys[k] = omc__get_u32(e + 16 + 8 * k);
            x->qps[k] = omc__get_u16(e + 20 + 8 * k);
            if (omc__get_u16(e + 22 + 8 * k)) return OMC_ERR_MALFORMED;
            if (x->qps[k] == OMC_RDMA_NO_QP) { if (x->rkeys[k]) return OMC_ERR_MALFORMED; continue; }
            if (x->qps[k] >= max_qps) return OMC_ERR_MALFORMED;
            usable++;
        }
        if (!usable) return OMC_ERR_MALFORMED;     /* an extent no rail can reach */
        x->rkey = x->rkeys[0];
        x->qp = x->qps[0];
        sum += x->length;
    }
    if (sum != omc__get_u64(p + 16)) return OMC_ERR_MALFORMED;
    out->conn_id = omc__get_u64(p + 8);
    out->length = sum;
    out->flags = flags;
    out->count = n;
    out->rails = R;
    return OMC_OK;
}

OMNICONN_API omc_result omc_rdma_target_encode(const omc_rdma_target* t, void* out, size_t cap, size_t* out_len) {
    uint8_t* p = (uint8_t*)out;
    uint64_t sum = 0;
    size_t need;
    uint32_t i;
    if (out_len) *out_len = 0;
    if (!t || !out || t->count < 1 || t->count > OMC_RDMA_MAX_EXTENTS || (t->flags & ~OMC__RDMA_FLAGS))
        return OMC_ERR_INVALID_ARG;
    if (t->rails > 1) return omc__rdma_target_encode_rails(t, p, cap, out_len);
    for (i = 0; i < t->count; i++) {
        const omc_rdma_extent* e = &t->extent[i];
        if (e->length == 0 || e->addr > UINT64_MAX - e->length || e->qp >= OMC_RDMA_MAX_QPS || sum > UINT64_MAX - e->length)
            return OMC_ERR_INVALID_ARG;
        sum += e->length;
    }
    if (sum != t->length) return OMC_ERR_INVALID_ARG;
    need = OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT * (size_t)t->count + 4;
    if (cap < need) return OMC_ERR_TOO_LARGE;
    memset(p, 0, need);
    omc__put_u32(p + 0, OMC_RDMA_TARGET_MAGIC);
    p[4] = OMC_RDMA_TARGET_VERSION;
    p[5] = (uint8_t)t->count;
    omc__put_u16(p + 6, (uint16_t)t->flags);
    omc__put_u64(p + 8, t->conn_id);
    omc__put_u64(p + 16, t->length);
    for (i = 0; i < t->count; i++) {
        uint8_t* e = p + OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT * i;
        omc__put_u64(e + 0, t->extent[i].addr);
        omc__put_u64(e + 8, t->extent[i].length);
        omc__put_u32(e + 16, t->extent[i].rkey);
        omc__put_u16(e + 20, t->extent[i].qp);
    }
    omc__put_u32(p + need - 4, omc__crc32c(0, p, need - 4));
    if (out_len) *out_len = need;
    return OMC_OK;
}

OMNICONN_API omc_result omc_rdma_target_decode(const void* data, size_t len, uint32_t max_qps, omc_rdma_target* out) {
    const uint8_t* p = (const uint8_t*)data;
    uint64_t sum = 0;
    uint32_t n, i, flags;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!data) return OMC_ERR_INVALID_ARG;
    if (max_qps == 0 || max_qps > OMC_RDMA_MAX_QPS) max_qps = OMC_RDMA_MAX_QPS;
    if (len < OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT + 4 || omc__get_u32(p) != OMC_RDMA_TARGET_MAGIC) return OMC_ERR_MALFORMED;
    if (p[4] == OMC_RDMA_TARGET_VERSION_RAILS) {
        omc_result r = omc__rdma_target_decode_rails(p, len, max_qps, out);
        if (r != OMC_OK) memset(out, 0, sizeof(*out));
        return r;
    }
    if (p[4] != OMC_RDMA_TARGET_VERSION) return OMC_ERR_VERSION;
    n = p[5];
    if (n < 1 || n > OMC_RDMA_MAX_EXTENTS || len != OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT * (size_t)n + 4)
        return OMC_ERR_MALFORMED;
    if (omc__crc32c(0, p, len - 4) != omc__get_u32(p + len - 4)) return OMC_ERR_CHECKSUM;
    flags = omc__get_u16(p + 6);
    if (flags & ~OMC__RDMA_FLAGS) return OMC_ERR_MALFORMED;
    for (i = 0; i < n; i++) {
        const uint8_t* e = p + OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT * i;
        omc_rdma_extent* x = &out->extent[i];
        x->addr = omc__get_u64(e + 0);
        x->length = omc__get_u64(e + 8);
        x->rkey = omc__get_u32(e + 16);
        x->qp = omc__get_u16(e + 20);
        if (x->length == 0 || x->addr > UINT64_MAX - x->length || x->qp >= max_qps || omc__get_u16(e + 22) ||
            sum > UINT64_MAX - x->length)
            return OMC_ERR_MALFORMED;
        sum += x->length;
    }
    if (sum != omc__get_u64(p + 16)) return OMC_ERR_MALFORMED;
    out->conn_id = omc__get_u64(p + 8);
    out->length = sum;
    out->flags = flags;
    out->count = n;
    return OMC_OK;
}

/* Do two GIDs share their first `bits` bits (the same subnet)? */
OMC__PRIVATE int omc__rdma_same_subnet(const uint8_t* a, const uint8_t* b, uint32_t bits) {
    uint32_t full, rest;
    if (bits > 128) bits = 128;
    full = bits / 8;
    rest = bits % 8;
    if (memcmp(a, b, full) != 0) return 0;
    return rest == 0 || ((a[full] ^ b[full]) & (uint8_t)(0xFF << (8 - rest))) == 0;
}

/* ---- planning a destination: extents at MR boundaries, spread across QPs --------------------- */

typedef struct omc__rdma_span {
    uint64_t addr, length;
    uint32_t chunk;         /* index of the MR (within its region) that holds the span */
    uint16_t qp;
} omc__rdma_span;

/* Split [addr, addr + len) (inside a region starting at base, registered in MRs of chunk
   bytes) into spans that each lie in one MR, and split each MR piece of at least 2 * split_min
   bytes into up to nqp parts on consecutive QPs starting at first_qp: one window per span. */
OMC__PRIVATE omc_result omc__rdma_plan(uint64_t addr, uint64_t len, uint64_t base, uint64_t chunk, uint32_t nqp,
                                       uint32_t first_qp, uint64_t split_min, omc__rdma_span* out, uint32_t max, uint32_t* count) {
    uint64_t p = addr, end;
    uint32_t n = 0, k = 0;
    *count = 0;
    if (len == 0 || addr < base || chunk == 0 || nqp == 0 || addr > UINT64_MAX - len) return OMC_ERR_INVALID_ARG;
    if (split_min == 0) split_min = 1;
    end = addr + len;
    while (p < end) {
        uint64_t ci = (p - base) / chunk, cend = base + (ci + 1) * chunk, piece = omc__min(end, cend) - p, parts, step, done = 0;
        parts = piece / split_min;
        if (parts > nqp) parts = nqp;
        if (parts < 1) parts = 1;
        step = (piece + parts - 1) / parts;
        step = (step + 4095) & ~(uint64_t)4095;     /* page-aligned parts: nicer for the adapter */
        while (done < piece) {
            uint64_t sz = omc__min(step, piece - done);
            if (n == max) return OMC_ERR_TOO_LARGE;
            out[n].addr = p + done;
            out[n].length = sz;
            out[n].chunk = (uint32_t)ci;
            out[n].qp = (uint16_t)((first_qp + k) % nqp);
            n++; k++;
            done += sz;
        }
        p += piece;
    }
    *count = n;
    return OMC_OK;
}

/* ---- the memory lock check ------------------------------------------------------------------- */

/* Would pinning `want` more bytes (with `pinned` already pinned by this process) exceed the
   limit? limit = RLIM_INFINITY-like values (UINT64_MAX) never do; CAP_IPC_LOCK lifts the
   limit for registrations, as the kernel does. Returns OMC_OK or OMC_ERR_MEMLOCK and the
   message for the log. */
OMC__PRIVATE omc_result omc__rdma_memlock_check(uint64_t want, uint64_t pinned, uint64_t limit, int cap_ipc_lock,
                                                char* why, size_t n) {
    if (cap_ipc_lock || limit == UINT64_MAX) return OMC_OK;
    if (pinned <= limit && want <= limit - pinned) return OMC_OK;
    omc__why(why, n, "registering %llu bytes would pin %llu bytes in all, above RLIMIT_MEMLOCK = %llu bytes ('ulimit -l' = %llu KiB). "
             "Fix: 'ulimit -l unlimited' in the shell that starts the process, '* - memlock unlimited' in "
             "/etc/security/limits.conf, LimitMEMLOCK=infinity in a systemd unit, 'docker run --ulimit memlock=-1', "
             "or give the process CAP_IPC_LOCK",
             (unsigned long long)want, (unsigned long long)(pinned + want), (unsigned long long)limit,
             (unsigned long long)(limit / 1024));
    return OMC_ERR_MEMLOCK;
}

OMNICONN_API omc_result omc_rdma_parse_qos(const char* text, uint32_t max, uint8_t out[OMC_RDMA_MAX_RAILS]) {
    uint8_t v[OMC_RDMA_MAX_RAILS];
    uint32_t n = 0, k;
    const char* p = text;
    if (!out) return OMC_ERR_INVALID_ARG;
    if (!text || !text[0]) return OMC_OK;
    while (*p) {
        unsigned long x = 0;
        int digits = 0;
        while (*p == ' ') p++;
        while (*p >= '0' && *p <= '9' && digits < 4) { x = x * 10 + (unsigned long)(*p - '0'); p++; digits++; }
        while (*p == ' ') p++;
        if (!digits || x > max || (*p && *p != ',') || n == OMC_RDMA_MAX_RAILS) return OMC_ERR_INVALID_ARG;
        v[n++] = (uint8_t)x;
        if (*p == ',') { p++; if (!*p) return OMC_ERR_INVALID_ARG; }
    }
    for (k = 0; k < OMC_RDMA_MAX_RAILS; k++) out[k] = v[k < n ? k : n - 1];
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: NIC choice by topology (sysfs only)                                  */
/* ============================================================================================== */

/* First line of root/rel into out (trailing newline and blanks removed); 0 if unreadable. */
OMC__PRIVATE int omc__topo_read_line(const char* root, const char* rel, char* out, size_t cap) {
    char path[OMC_RDMA_TOPO_PATH_MAX + 256];
    FILE* f;
    size_t n;
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(out, (int)cap, f)) { fclose(f); return 0; }
    fclose(f);
    n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0';
    return 1;
}

/* The PCI path of root/rel (a device link): the resolved path from "devices/" on, without that
   prefix, and the device's numa_node (or its nearest ancestor's: a virtio netdev's is on its
   PCI parent). 0 if rel is not a PCI device. */
OMC__PRIVATE int omc__topo_pci_of(const char* root, const char* rel, char* path, size_t cap, int* numa) {
    char link[OMC_RDMA_TOPO_PATH_MAX + 256], real[PATH_MAX], rroot[PATH_MAX], numa_rel[OMC_RDMA_TOPO_PATH_MAX + 64], line[32];
    const char* p;
    size_t rl;
    snprintf(link, sizeof(link), "%s/%s", root, rel);
    if (!realpath(link, real) || !realpath(root, rroot)) return 0;
    rl = strlen(rroot);
    if (strncmp(real, rroot, rl) != 0 || strncmp(real + rl, "/devices/pci", 12) != 0) return 0;
    p = real + rl + 9;                                  /* "pci0000:3a/..." */
    if (strlen(p) >= cap || strlen(p) + 9 >= sizeof(numa_rel) - 12) return 0;
    snprintf(path, cap, "%s", p);
    snprintf(numa_rel, sizeof(numa_rel), "devices/%s", p);
    *numa = -1;
    for (;;) {
        size_t l = strlen(numa_rel);
        char* slash;
        memcpy(numa_rel + l, "/numa_node", 11);
        if (omc__topo_read_line(root, numa_rel, line, sizeof(line))) { *numa = atoi(line) < 0 ? -1 : atoi(line); break; }
        numa_rel[l] = '\0';
        slash = strrchr(numa_rel, '/');
        if (!slash || slash - numa_rel <= 8) break;     /* stop at "devices/" */
        *slash = '\0';
    }
    return 1;
}

/* One device from sysfs; a software device takes its netdev's place. */
OMC__PRIVATE void omc__topo_fill(const char* root, const char* name, omc_rdma_topo_nic* nic) {
    char rel[OMC_RDMA_TOPO_PATH_MAX];
    memset(nic, 0, sizeof(*nic));
    nic->numa_node = -1;
    snprintf(nic->name, sizeof(nic->name), "%s", name);
    snprintf(rel, sizeof(rel), "class/infiniband/%s/device", name);
    if (omc__topo_pci_of(root, rel, nic->pci_path, sizeof(nic->pci_path), &nic->numa_node)) return;
    nic->soft = 1;
    snprintf(rel, sizeof(rel), "class/infiniband/%s/ports/1/gid_attrs/ndevs/0", name);
    if (!omc__topo_read_line(root, rel, nic->netdev, sizeof(nic->netdev)) || !nic->netdev[0]) return;
    snprintf(rel, sizeof(rel), "class/net/%s/device", nic->netdev);
    if (!omc__topo_pci_of(root, rel, nic->pci_path, sizeof(nic->pci_path), &nic->numa_node)) nic->pci_path[0] = '\0';
}

#define OMC__TOPO_MAX_NAMES 256         /* devices considered (sorted by name); more are counted */

OMNICONN_API int omc_rdma_topo_read(const char* root, omc_rdma_topo_nic* out, int cap) {
    char dir[OMC_RDMA_TOPO_PATH_MAX + 32];
    char (*names)[OMC_RDMA_TOPO_NAME_MAX];
    omc_hooks hooks;
    DIR* d;
    struct dirent* e;
    int n = 0, total = 0, i, j;
    if (!root || (cap > 0 && !out)) return -1;
    snprintf(dir, sizeof(dir), "%s/class/infiniband", root);
    d = opendir(dir);
    if (!d) return -1;
    memset(&hooks, 0, sizeof(hooks));
    hooks = omc__hooks_resolve(&hooks);
    names = (char (*)[OMC_RDMA_TOPO_NAME_MAX])omc__malloc(&hooks, OMC__TOPO_MAX_NAMES * OMC_RDMA_TOPO_NAME_MAX);
    if (!names) { closedir(d); return -1; }
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len >= OMC_RDMA_TOPO_NAME_MAX) continue;
        total++;
        if (n < OMC__TOPO_MAX_NAMES) memcpy(names[n++], e->d_name, len + 1);
    }
    closedir(d);
    for (i = 1; i < n; i++) {          /* insertion sort by name: a handful of devices */
        char k[OMC_RDMA_TOPO_NAME_MAX];
        memcpy(k, names[i], sizeof(k));
        for (j = i - 1; j >= 0 && strcmp(names[j], k) > 0; j--) memcpy(names[j + 1], names[j], sizeof(k));
        memcpy(names[j + 1], k, sizeof(k));
    }
    for (i = 0; i < n && i < cap; i++) omc__topo_fill(root, names[i], &out[i]);
    omc__free(&hooks, names);
    return total;
}

OMNICONN_API int omc_rdma_topo_pci_device(const char* root, const char* addr, char* path, size_t cap, int* numa) {
    char rel[128];
    int dummy;
    if (!root || !path || !cap || !addr || !addr[0] || strlen(addr) > 32 || strchr(addr, '/') || strstr(addr, "..")) return 0;
    snprintf(rel, sizeof(rel), "bus/pci/devices/%s", addr);
    return omc__topo_pci_of(root, rel, path, cap, numa ? numa : &dummy);
}

/* Path components two PCI paths share ("pci0000:3a", then each bridge/port). */
OMC__PRIVATE int omc__topo_common(const char* a, const char* b) {
    int n = 0;
    while (*a && *b) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        if (la != lb || strncmp(a, b, la) != 0) break;
        n++;
        a += la; b += lb;
        if (*a == '/') a++;
        if (*b == '/') b++;
    }
    return n;
}

OMNICONN_API const char* omc_rdma_topo_tier_name(omc_rdma_topo_tier t) {
    switch (t) {
        case OMC_RDMA_TOPO_SAME_SWITCH: return "same PCIe switch";
        case OMC_RDMA_TOPO_SAME_ROOT: return "same PCIe root complex";
        case OMC_RDMA_TOPO_SAME_NUMA: return "same NUMA node";
        case OMC_RDMA_TOPO_UNKNOWN: return "NUMA node not known";
        default: return "other NUMA node";
    }
}

OMNICONN_API void omc_rdma_topo_rank(const omc_rdma_topo_nic* nics, int n, int buffer_numa, const char* gpu_path, int gpu_numa,
                                     omc_rdma_topo_choice* out) {
    int i, j, gpu = gpu_path && gpu_path[0], numa = buffer_numa >= 0 ? buffer_numa : (gpu ? gpu_numa : -1);
    if (!nics || !out || n <= 0) return;
    for (i = 0; i < n; i++) {
        const omc_rdma_topo_nic* c = &nics[i];
        omc_rdma_topo_choice* r = &out[i];
        /* 3 shared components = root, root port, switch port: the same switch */
        int common = (gpu && c->pci_path[0]) ? omc__topo_common(c->pci_path, gpu_path) : 0;
        char via[96] = "";
        r->index = i;
        if (c->soft) snprintf(via, sizeof(via), " (software device on %.40s)", c->netdev[0] ? c->netdev : "no netdev");
        if (common >= 3) {
            r->tier = OMC_RDMA_TOPO_SAME_SWITCH;
            snprintf(r->why, sizeof(r->why), "%s%s: under the same PCIe switch as the GPU", c->name, via);
        } else if (common >= 1) {
            r->tier = OMC_RDMA_TOPO_SAME_ROOT;
            snprintf(r->why, sizeof(r->why), "%s%s: same PCIe root complex as the GPU, through the host bridge", c->name, via);
        } else if (numa >= 0 && c->numa_node >= 0) {
            r->tier = c->numa_node == numa ? OMC_RDMA_TOPO_SAME_NUMA : OMC_RDMA_TOPO_OTHER_NUMA;
            snprintf(r->why, sizeof(r->why), "%s%s: NUMA node %d, memory on node %d%s", c->name, via, c->numa_node, numa,
                     c->numa_node == numa ? "" : " (crosses sockets)");
        } else {
            r->tier = OMC_RDMA_TOPO_UNKNOWN;
            snprintf(r->why, sizeof(r->why), "%s%s: NUMA node of the %s not known", c->name, via, c->numa_node < 0 ? "device" : "memory");
        }
    }
    for (i = 1; i < n; i++) {          /* stable insertion sort by tier */
        omc_rdma_topo_choice k = out[i];
        for (j = i - 1; j >= 0 && out[j].tier > k.tier; j--) out[j + 1] = out[j];
        out[j + 1] = k;
    }
}

#if OMC__HAS_RDMA

#if defined(__has_include)
    #if !__has_include(<infiniband/verbs.h>)
        #error "omniconn_rdma.h needs the verbs headers: install libibverbs-dev (rdma-core), or define OMNICONN_NO_RDMA."
    #endif
#endif
#include <infiniband/verbs.h>
#if OMC__HAS_CUDA
#include <cuda.h>                   /* the driver API's types: dma-buf export of device memory */
#endif
#include <dlfcn.h>
#include <net/if.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/resource.h>

/* ============================================================================================== */
/* [SECTION] Implementation: loading libibverbs                                                   */
/* ============================================================================================== */
/*
    One list names every libibverbs function the engine calls. From it come: the table of
    function pointers (omc__ibv), the loader (dlsym of each name, or the linked symbols with
    OMNICONN_NO_RUNTIME_LINKING), and one wrapper per function, omc__ibv_<name>(), so that the
    code reads like rc_pingpong (omc__ibv_alloc_pd(ctx) for ibv_alloc_pd(ctx)).
    Columns: required (0 = optional: the code copes without it), R/V (returns a value / void),
    return type, table member, symbol, parameters, arguments.
    Members drop the ibv_ prefix because verbs.h defines function-like macros named ibv_reg_mr
    and ibv_query_port, which would rewrite a member of that name. Not listed, because verbs.h
    implements them inline through the provider's ops: ibv_post_send, ibv_poll_cq,
    ibv_req_notify_cq, ibv_alloc_mw, ibv_dealloc_mw, ibv_inc_rkey.
*/
#define OMC__IBV_SYMBOLS(X) \
    X(1, R, struct ibv_device**, get_device_list, ibv_get_device_list, (int* num), (num)) \
    X(1, V, void, free_device_list, ibv_free_device_list, (struct ibv_device** list), (list)) \
    X(1, R, const char*, get_device_name, ibv_get_device_name, (struct ibv_device* dev), (dev)) \
    X(1, R, struct ibv_context*, open_device, ibv_open_device, (struct ibv_device* dev), (dev)) \
    X(1, R, int, close_device, ibv_close_device, (struct ibv_context* ctx), (ctx)) \
    X(1, R, int, query_device, ibv_query_device, (struct ibv_context* ctx, struct ibv_device_attr* attr), (ctx, attr)) \
    X(1, R, int, query_port, ibv_query_port, (struct ibv_context* ctx, uint8_t port, struct _compat_ibv_port_attr* attr), (ctx, port, attr)) \
    X(1, R, int, query_gid, ibv_query_gid, (struct ibv_context* ctx, uint8_t port, int index, union ibv_gid* gid), (ctx, port, index, gid)) \
    X(0, R, ssize_t, query_gid_table, _ibv_query_gid_table, (struct ibv_context* ctx, struct ibv_gid_entry* entries, size_t max, uint32_t flags, size_t size), (ctx, entries, max, flags, size)) \
    X(1, R, struct ibv_pd*, alloc_pd, ibv_alloc_pd, (struct ibv_context* ctx), (ctx)) \
    X(1, R, int, dealloc_pd, ibv_dealloc_pd, (struct ibv_pd* pd), (pd)) \
    X(1, R, struct ibv_mr*, reg_mr, ibv_reg_mr, (struct ibv_pd* pd, void* addr, size_t length, int access), (pd, addr, length, access)) \
    X(1, R, int, dereg_mr, ibv_dereg_mr, (struct ibv_mr* mr), (mr)) \
    X(0, N, struct ibv_mr*, reg_dmabuf_mr, ibv_reg_dmabuf_mr, (struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access), (pd, offset, length, iova, fd, access)) \
    X(1, R, struct ibv_comp_channel*, create_comp_channel, ibv_create_comp_channel, (struct ibv_context* ctx), (ctx)) \
    X(1, R, int, destroy_comp_channel, ibv_destroy_comp_channel, (struct ibv_comp_channel* ch), (ch)) \
    X(1, R, struct ibv_cq*, create_cq, ibv_create_cq, (struct ibv_context* ctx, int cqe, void* user, struct ibv_comp_channel* ch, int vector), (ctx, cqe, user, ch, vector)) \
    X(1, R, int, destroy_cq, ibv_destroy_cq, (struct ibv_cq* cq), (cq)) \
    X(1, R, int, get_cq_event, ibv_get_cq_event, (struct ibv_comp_channel* ch, struct ibv_cq** cq, void** user), (ch, cq, user)) \
    X(1, V, void, ack_cq_events, ibv_ack_cq_events, (struct ibv_cq* cq, unsigned int n), (cq, n)) \
    X(1, R, struct ibv_qp*, create_qp, ibv_create_qp, (struct ibv_pd* pd, struct ibv_qp_init_attr* attr), (pd, attr)) \
    X(1, R, int, modify_qp, ibv_modify_qp, (struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask), (qp, attr, mask)) \
    X(1, R, int, destroy_qp, ibv_destroy_qp, (struct ibv_qp* qp), (qp)) \
    X(1, R, int, get_async_event, ibv_get_async_event, (struct ibv_context* ctx, struct ibv_async_event* ev), (ctx, ev)) \
    X(1, V, void, ack_async_event, ibv_ack_async_event, (struct ibv_async_event* ev), (ev)) \
    X(1, R, const char*, wc_status_str, ibv_wc_status_str, (enum ibv_wc_status status), (status)) \
    X(1, R, const char*, event_type_str, ibv_event_type_str, (enum ibv_event_type type), (type))

typedef struct omc__ibv_table {
#define OMC__X(req, kind, ret, member, sym, params, args) ret (*member) params;
    OMC__IBV_SYMBOLS(OMC__X)
#undef OMC__X
} omc__ibv_table;

static omc__ibv_table omc__ibv;             /* filled once, then read-only */
static int omc__ibv_loaded;                 /* atomic: 1 once omc__ibv is complete */
static pthread_mutex_t omc__ibv_mu = PTHREAD_MUTEX_INITIALIZER;
static char omc__ibv_library[256];          /* what was loaded */

/* The wrappers the engine calls. */
#define OMC__IBV_WRAP_R(ret, member, params, args) OMC__PRIVATE ret omc__ibv_##member params { return omc__ibv.member args; }
#define OMC__IBV_WRAP_V(ret, member, params, args) OMC__PRIVATE void omc__ibv_##member params { omc__ibv.member args; }
/* kind N: no wrapper - only some builds call it (reg_dmabuf_mr: CUDA builds), through the table,
   so a build without them has no unused function */
#define OMC__IBV_WRAP_N(ret, member, params, args)
#define OMC__X(req, kind, ret, member, sym, params, args) OMC__IBV_WRAP_##kind(ret, member, params, args)
OMC__IBV_SYMBOLS(OMC__X)
#undef OMC__X

#if defined(OMNICONN_NO_RUNTIME_LINKING)

/* Linked directly: the table holds the real functions (the linker already checked them). */
OMC__PRIVATE omc_result omc__ibv_load(const char* library, char* why, size_t n) {
    (void)library; (void)why; (void)n;
    pthread_mutex_lock(&omc__ibv_mu);
    if (!omc__load(&omc__ibv_loaded)) {
#define OMC__X(req, kind, ret, member, sym, params, args) omc__ibv.member = sym;
        OMC__IBV_SYMBOLS(OMC__X)
#undef OMC__X
        snprintf(omc__ibv_library, sizeof(omc__ibv_library), "linked");
        omc__store(&omc__ibv_loaded, 1);
    }
    pthread_mutex_unlock(&omc__ibv_mu);
    return OMC_OK;
}
#define OMC__IBV_RUNTIME 0

#else

OMC__PRIVATE const char* omc__ibv_default_library(const char* library) {
    const char* env;
    if (library && library[0]) return library;
    env = getenv("OMNICONN_IBVERBS_LIB");
    return env && env[0] ? env : OMNICONN_RDMA_LIBRARY;
}

/* dlopen libibverbs and resolve every symbol of the list, once per process. A later call that
   names another library only checks that it loads: a process uses one libibverbs. */
OMC__PRIVATE omc_result omc__ibv_load(const char* library, char* why, size_t n) {
    const char* name = omc__ibv_default_library(library);
    omc__ibv_table t;
    void* lib;
    omc_result r = OMC_OK;
    pthread_mutex_lock(&omc__ibv_mu);
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* e = dlerror();
        omc__why(why, n, "cannot load %s (%s): install rdma-core's libibverbs1 and ibverbs-providers, "
                 "or build with OMNICONN_NO_RDMA", name, e ? e : "not found");
        pthread_mutex_unlock(&omc__ibv_mu);
        return OMC_ERR_UNAVAILABLE;
    }
    if (omc__load(&omc__ibv_loaded)) {                  /* already resolved: keep that one */
        dlclose(lib);
        pthread_mutex_unlock(&omc__ibv_mu);
        return OMC_OK;
    }
    memset(&t, 0, sizeof(t));
    /* ISO C has no object-to-function pointer conversion; POSIX guarantees the bytes fit */
#define OMC__X(req, kind, ret, member, sym, params, args) \
    if (r == OMC_OK) { \
        void* s = dlsym(lib, #sym); \
        memcpy(&t.member, &s, sizeof(s)); \
        if (!s && req) { \
            omc__why(why, n, "%s has no symbol %s (rdma-core too old?)", name, #sym); \
            r = OMC_ERR_UNAVAILABLE; \
        } \
    }
    OMC__IBV_SYMBOLS(OMC__X)
#undef OMC__X
    if (r != OMC_OK) dlclose(lib);
    else {      /* never dlclose()d: providers and their threads live as long as the process */
        omc__ibv = t;
        snprintf(omc__ibv_library, sizeof(omc__ibv_library), "%s", name);
        omc__store(&omc__ibv_loaded, 1);
    }
    pthread_mutex_unlock(&omc__ibv_mu);
    return r;
}
#define OMC__IBV_RUNTIME 1

#endif

/* ibv_query_port() is a macro whose inline body takes the provider's extended query_port when
   there is one and the exported compat symbol otherwise; the same logic, through the table. */
OMC__PRIVATE int omc__ibv_query_port_attr(struct ibv_context* ctx, uint8_t port, struct ibv_port_attr* attr) {
    struct verbs_context* vctx = verbs_get_ctx(ctx);
    if (vctx && vctx->sz >= sizeof(*vctx) - offsetof(struct verbs_context, query_port) && vctx->query_port)
        return vctx->query_port(ctx, port, attr, sizeof(*attr));
    memset(attr, 0, sizeof(*attr));
    return omc__ibv_query_port(ctx, port, (struct _compat_ibv_port_attr*)attr);
}

/* omc_available(OMC_FEATURE_RDMA): the engine's own rule (its library, a device). */
static omc_result omc__rdma_available(char* why, size_t n) {
    return omc_rdma_probe(NULL, why, n) == OMC_OK ? OMC_OK : OMC_ERR_UNAVAILABLE;
}
__attribute__((constructor)) static void omc__rdma_register_probe(void) { omc__register_probe(OMC_FEATURE_RDMA, omc__rdma_available); }

OMNICONN_API omc_result omc_rdma_probe(const char* library, char* why, size_t why_size) {
    struct ibv_device** list;
    int num = 0;
    omc_result r;
    if (why && why_size) why[0] = '\0';
    r = omc__ibv_load(library, why, why_size);
    if (r != OMC_OK) return r;
    list = omc__ibv_get_device_list(&num);
    if (list) omc__ibv_free_device_list(list);
    if (!list || num <= 0) {
        omc__why(why, why_size, "libibverbs lists no RDMA device (for Soft-RoCE: rdma link add rxe0 type rxe netdev <if>)");
        return OMC_ERR_RDMA_DEVICE;
    }
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: the engine's objects                                                 */
/* ============================================================================================== */
/*
    omc_rdma owns every verbs object, created in dependency order by omc__rdma_open (context,
    PD, completion channel, CQ) and torn down in reverse by a goto ladder. One mutex (mu)
    guards all shared state: the QP table, every QP's send-slot ring, the operations and the
    registered regions; one condition variable (cv) wakes whoever waits for completions or
    queue space. The progress thread polls the CQ, retires send slots and wakes waiters.

    Send slots. Each QP numbers its work requests (head = next to post, tail = oldest not yet
    retired); slot seq % depth remembers the operation a request belongs to, and an operation is
    done when none of its requests is left in any ring. wr_id = (QP id << 32) | (seq & 0xffffffff).
    An operation's last request on a QP is always signalled, so nothing waits on a request that
    no completion would ever retire.
    A successful completion for seq retires every slot up to it (an RC send queue completes in
    order, so unsignalled requests before it are done too). An error completion for seq retires
    the slots before it as done, seq itself with its status, and everything after it as flushed:
    the QP is in ERROR now, its connection is broken, later flush completions are ignored.
*/

#define OMC__RDMA_PKEY_INDEX 0          /* the default partition */
#define OMC__RDMA_HOP_LIMIT 64          /* GRH hop limit (RoCE v2: the IP TTL) */
#define OMC__RDMA_RD_ATOMIC_MAX 16      /* RDMA READs in flight per QP (fewer if the device has fewer) */
#define OMC__RDMA_MIN_RNR_TIMER 12      /* 0.64 ms; we post no receives, RNR never happens */
#define OMC__RDMA_RNR_RETRY 7           /* 7 = retry forever (never used: no SENDs) */
#define OMC__RDMA_MAX_SGE 16            /* gather elements per WRITE (fewer if the device has fewer) */
#define OMC__RDMA_POLL_BATCH 32
#define OMC__RDMA_ACK_EVERY 64          /* acknowledge CQ events in batches (ack takes a lock) */
#define OMC__RDMA_SLEEP_MS 1000         /* longest sleep of the progress thread (stop is signalled) */
#define OMC__RDMA_FLUSH_GRACE_MS 5000   /* after forcing a QP to ERROR, how long flushes may take */

enum { OMC__OP_WRITE = 1, OMC__OP_BIND = 2, OMC__OP_INVALIDATE = 3, OMC__OP_PROBE = 4, OMC__OP_XFER = 5 };

struct omc_rdma_op {
    omc_rdma_conn* conn;        /* holds a reference */
    int kind;
    uint32_t pending;           /* requests posted and not yet retired: done at 0 */
    omc_result status;          /* first failure, OMC_OK otherwise */
    int wc_status;              /* the ibv_wc_status behind status */
    int abandoned;              /* the waiter gave up: the engine frees the op when pending is 0 */
    uint64_t bytes;
    struct omc__rdma_slice* slices;     /* a write: its slices (owned) */
    uint32_t nslices, reposts;  /* reposts: slices waiting to be written again on another pair */
    struct omc__rdma_piece* pieces;     /* a write: the source, split at MR boundaries (owned) */
    uint32_t npieces;
    struct omc_rdma_target* target;     /* a write: the decoded descriptor (owned) */
    struct omc_xfer_batch* xfer;        /* a transfer-engine batch: its slices belong to the batch */
    int* gave_up;               /* set to 1 when the waiter gave up and the engine frees the op */
    int read;                   /* a transfer-engine batch of RDMA READs */
    omc_rdma_op* next;          /* on the reap list */
};

typedef struct omc__rdma_slot {
    omc_rdma_op* op;
    uint32_t slice;             /* a write's slice index (OMC__RDMA_NO_SLICE: not a slice) */
} omc__rdma_slot;

#define OMC__RDMA_NO_SLICE 0xFFFFFFFFu

typedef struct omc__rdma_qp {
    struct ibv_qp* qp;
    omc_rdma_conn* conn;
    uint32_t id;                /* engine-wide, never reused: stale completions are recognisable */
    uint32_t index;             /* within the connection */
    uint32_t pair;              /* index / qps per pair: the pair of rails it belongs to */
    uint32_t rail;              /* the engine's rail it lives on (its PD, CQ and port) */
    uint32_t qpn, psn;          /* ours */
    uint32_t peer_qpn, peer_psn;
    uint64_t head, tail;        /* next sequence number to post / oldest not retired */
    uint32_t unsignalled;       /* posted since the last signalled request */
    omc__rdma_slot* slots;      /* depth entries */
    int in_table;
    int failed;
    struct ibv_mw** mw_free;    /* invalidated type-2 windows, ready to bind again on this QP */
    uint32_t mw_free_count, mw_free_cap;
} omc__rdma_qp;

/* A pair of rails of one connection: one of ours, one of the peer's, qpp QPs between them. */
typedef struct omc__rdma_pair {
    uint32_t rail;              /* our rail */
    int up;                     /* connected and none of its QPs failed */
    omc_result error;           /* why it went down */
    char why[160];
    uint64_t queued;            /* bytes posted on it and not yet retired (earliest-finish) */
} omc__rdma_pair;

struct omc_rdma_conn {
    omc_rdma* eng;
    uint32_t refs;              /* under eng->mu: the handle, and every window or op using it */
    int closed, connected, broken, linking;
    int quiet;                  /* the engine's own probe: failures are expected, not logged */
    omc_rdma_conn* next_dead;   /* on the engine's list of connections to free */
    int counted;                /* in E->conns (the live connections omc_rdma_query reports) */
    omc_result error;
    char error_text[160];
    uint64_t conn_id, peer_incarnation;
    uint32_t nqp, path_mtu, next_qp;
    uint32_t npairs, qpp;       /* pairs of rails, QPs per pair: QP i is in pair i / qpp */
    uint32_t nlive;             /* QPs created (pairs we have no rail for have none) */
    uint8_t peer_flags;
    omc__rdma_pair pair[OMC_RDMA_MAX_RAILS];
    omc__rdma_qp qps[OMC_RDMA_MAX_QPS];
};

struct omc_rdma_window {
    omc_rdma_conn* conn;        /* holds a reference */
    uint64_t addr, length;
    uint32_t count;
    struct { uint16_t qp; uint32_t rkey; struct ibv_mw* mw; } ext[OMC_RDMA_MAX_EXTENTS][OMC_RDMA_MAX_RAILS];   /* per pair */
    struct ibv_mr* mr[OMC_RDMA_MAX_RAILS];  /* OMC_RDMA_PROTECT_REGIONS: the destination's own region, per pair */
    uint64_t pinned;            /* bytes those regions pin */
};

typedef struct omc__rdma_region {
    uint8_t* base;
    uint64_t size, chunk;
    uint32_t count;             /* MRs per rail */
    struct ibv_mr** mr;         /* rails x count: rail r's chunk i is mr[r * count + i] */
} omc__rdma_region;

/* One rail: a device port with its own context, PD, CQ and completion channel (verbs objects
   of different devices cannot be mixed), in creation order, and its state. */
typedef struct omc__rdma_rail {
    struct ibv_context* context;
    struct ibv_pd* pd;
    struct ibv_comp_channel* channel;
    struct ibv_cq* cq;
    unsigned int unacked;       /* CQ events not acknowledged yet (progress thread only) */
    /* what was chosen */
    char device[64];
    uint8_t port;
    struct ibv_port_attr port_attr;
    struct ibv_device_attr dev_attr;
    omc_rdma_link link;
    uint32_t gid_index;
    uint8_t gid[16];
    omc_rdma_gid_type gid_type;
    uint8_t prefix;             /* GID bits naming its subnet */
    char netdev[16];
    int numa_node;
    uint8_t traffic_class;      /* GRH traffic class of its QPs (RoCE: DSCP << 2 | ECN) */
    uint8_t service_level;      /* ah_attr.sl of its QPs */
    uint8_t rd_atomic;          /* RDMA READs in flight per QP, both as initiator and responder */
    /* state (under mu) */
    int up;
    int regid;                  /* came back: look its GID up again before the next connection */
    char why[160];
    uint64_t bytes, slices;
    uint32_t failures, rejoins;
    double rate;                /* bytes/s the scheduler assumes; 0 = not measured */
    double settled;             /* the rate when the last busy period ended */
    uint64_t inflight;          /* bytes posted on it, not retired */
    uint64_t window_bytes;      /* retired since mark, the start of this busy period */
    omc_time_ns mark;
} omc__rdma_rail;

typedef struct omc__rdma_quarantined {  /* a destination region whose deregistration failed */
    struct ibv_mr* mr;
    struct omc__rdma_quarantined* next;
} omc__rdma_quarantined;

struct omc_rdma {
    omc_hooks hooks;
    /* resolved tunables */
    uint32_t qps_per_peer, queue_depth, signal_every, spin_us, cq_depth, max_sge;
    uint64_t slice, split_min, mr_chunk;
    omc_rdma_protection protect;
    int use_mw;                 /* protect == WINDOWS */
    uint8_t qos_tc[OMC_RDMA_MAX_RAILS], qos_sl[OMC_RDMA_MAX_RAILS];     /* traffic class, service level per rail */
    const char *qos_tc_from, *qos_sl_from;      /* where they came from (for the log) */
    int window_bounds;          /* what the probe found (see omc_rdma_info) */
    /* the rails (each owns its verbs objects), then the progress thread */
    omc__rdma_rail rail[OMC_RDMA_MAX_RAILS];
    uint32_t nrails;
    int wake_fd;                /* eventfd: wakes the progress thread to stop */
    pthread_t thread;
    int thread_started;
    /* shared state (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    omc__smap qps;              /* 4-byte QP id -> omc__rdma_qp* */
    uint32_t next_qp_id;
    uint64_t outstanding;       /* requests posted and not yet retired, all QPs */
    uint32_t live_qps;          /* live_qps * queue_depth <= cq_depth: the CQ can never overflow */
    omc_rdma_op* reap;          /* abandoned operations that finished: freed by the progress thread */
    omc_rdma_conn* dead;        /* connections without references: the progress thread frees them */
    omc__rdma_region* regions;
    uint32_t nregions, cap_regions;
    omc__rdma_quarantined* quarantine;  /* regions that could not be deregistered: kept until close */
    uint64_t n_quarantined;
    uint64_t pinned;
    uint32_t conns;
    uint64_t n_writes, n_write_bytes, n_write_errors, n_access_errors, n_wrs, n_signalled, n_binds, n_invalidations,
             n_qp_errors, n_sleeps;     /* n_sleeps: written by the progress thread only */
};

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
OMC__PRIVATE void omc__rdma_log(omc_rdma* E, omc_log_level level, int line, const char* fmt, ...) {
    char msg[900];
    va_list ap;
    /* the application's logger filters by its max_level (0 = WARN); without one the core's
       built-in logger decides ($OMNICONN_LOG), so WARN and ERROR reach stderr by default */
    if (E->hooks.log_fn && (int)level > (int)(E->hooks.max_level ? E->hooks.max_level : OMC_LOG_WARN)) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    omc__log_emit(&E->hooks, level, OMC_LOGITEM_RDMA, __FILE__, line, msg);
}
#define OMC__RDMA_LOG(E, level, ...) omc__rdma_log((E), (level), __LINE__, __VA_ARGS__)

static const char* omc__rdma_protection_name(omc_rdma_protection p) {
    switch (p) {
        case OMC_RDMA_PROTECT_WINDOWS: return "a memory window per destination";
        case OMC_RDMA_PROTECT_REGIONS: return "a memory region per destination";
        case OMC_RDMA_PROTECT_POOL: return "the pool's rkey (peers may write anywhere in the pool)";
        default: return "default";
    }
}

OMC__PRIVATE uint8_t omc__rdma_flags(const omc_rdma* E) {
    return (uint8_t)(E->protect == OMC_RDMA_PROTECT_WINDOWS ? OMC_RDMA_FLAG_MEMORY_WINDOWS :
                     E->protect == OMC_RDMA_PROTECT_REGIONS ? OMC_RDMA_FLAG_REGIONS : 0);
}

/* ============================================================================================== */
/* [SECTION] Implementation: device, port and GID selection                                       */
/* ============================================================================================== */

#define OMC__RDMA_MAX_GIDS 256

static omc_rdma_gid_type omc__rdma_gid_type_of(uint32_t ibv_type) {
    switch (ibv_type) {
        case IBV_GID_TYPE_IB: return OMC_RDMA_GID_IB;
        case IBV_GID_TYPE_ROCE_V1: return OMC_RDMA_GID_ROCE_V1;
        case IBV_GID_TYPE_ROCE_V2: return OMC_RDMA_GID_ROCE_V2;
        default: return OMC_RDMA_GID_UNKNOWN;
    }
}

/* sysfs, for libraries without the GID-entry calls: .../gid_attrs/{types,ndevs}/<index> */
OMC__PRIVATE void omc__rdma_sysfs_gid_attrs(const char* dev, uint8_t port, uint32_t index, omc_rdma_gid_entry* e) {
    char path[256], buf[64];
    FILE* f;
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%u", dev, (unsigned)port, index);
    if ((f = fopen(path, "r")) != NULL) {
        if (fgets(buf, sizeof(buf), f)) e->type = strstr(buf, "v2") ? OMC_RDMA_GID_ROCE_V2 : OMC_RDMA_GID_ROCE_V1;
        fclose(f);
    }
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs/%u", dev, (unsigned)port, index);
    if ((f = fopen(path, "r")) != NULL) {
        if (fgets(buf, sizeof(buf), f)) { buf[strcspn(buf, "\n")] = '\0'; snprintf(e->netdev, sizeof(e->netdev), "%.15s", buf); }
        fclose(f);
    }
}

/* The port's GID table as omc_rdma_gid_entry rows (empty slots left out). */
OMC__PRIVATE uint32_t omc__rdma_read_gids(omc_rdma* E, struct ibv_context* ctx, const char* dev, uint8_t port,
                                          const struct ibv_port_attr* pa, omc_rdma_gid_entry* out, uint32_t max) {
    uint32_t n = 0, i, len = (uint32_t)(pa->gid_tbl_len > 0 ? pa->gid_tbl_len : 0);
    if (len > max) len = max;
    if (omc__ibv.query_gid_table) {         /* one call for the whole table */
        struct ibv_gid_entry* t = (struct ibv_gid_entry*)omc__calloc(&E->hooks, OMC__RDMA_MAX_GIDS * 4 * sizeof(struct ibv_gid_entry));
        ssize_t got = t ? omc__ibv_query_gid_table(ctx, t, OMC__RDMA_MAX_GIDS * 4, 0, sizeof(*t)) : -1;
        ssize_t k;
        for (k = 0; k < got && n < max; k++) {
            if (t[k].port_num != port || omc__gid_is_zero(t[k].gid.raw)) continue;
            memcpy(out[n].gid, t[k].gid.raw, 16);
            out[n].index = t[k].gid_index;
            out[n].type = omc__rdma_gid_type_of(t[k].gid_type);
            out[n].netdev[0] = '\0';
            if (t[k].ndev_ifindex) {
                char name[IF_NAMESIZE];
                if (if_indextoname(t[k].ndev_ifindex, name)) snprintf(out[n].netdev, sizeof(out[n].netdev), "%s", name);
            }
            n++;
        }
        omc__free(&E->hooks, t);
        if (got >= 0) return n;
    }
    for (i = 0; i < len && n < max; i++) {  /* one index at a time */
        union ibv_gid g;
        if (omc__ibv_query_gid(ctx, port, (int)i, &g) != 0 || omc__gid_is_zero(g.raw)) continue;
        memset(&out[n], 0, sizeof(out[n]));
        memcpy(out[n].gid, g.raw, 16);
        out[n].index = i;
        if (pa->link_layer == IBV_LINK_LAYER_INFINIBAND) out[n].type = OMC_RDMA_GID_IB;
        else omc__rdma_sysfs_gid_attrs(dev, port, i, &out[n]);
        n++;
    }
    return n;
}

OMC__PRIVATE const char* omc__rdma_port_state(enum ibv_port_state s) {
    switch (s) {
        case IBV_PORT_DOWN: return "DOWN";
        case IBV_PORT_INIT: return "INIT";
        case IBV_PORT_ARMED: return "ARMED";
        case IBV_PORT_ACTIVE: return "ACTIVE";
        default: return "not active";
    }
}

/* Append one reason to the list of what was tried (for the final error message). */
OMC__PRIVATE void omc__rdma_note(char* tried, size_t n, const char* dev, const char* what) {
    size_t used = strlen(tried);
    if (used + 4 < n) snprintf(tried + used, n - used, "%s%s: %s", used ? "; " : "", dev, what);
}

/* The subnet of a GID: the prefix length of the local interface address it maps (IPv4-mapped:
   96 + the netmask's bits), else /24 for IPv4 and /64 for anything else. */
OMC__PRIVATE uint8_t omc__rdma_gid_prefix(const uint8_t* gid, omc_rdma_link link) {
    struct ifaddrs *list = NULL, *i;
    int v4 = omc__gid_is_v4_mapped(gid), bits = -1;
    if (link == OMC_RDMA_LINK_INFINIBAND) return 64;
    if (getifaddrs(&list) == 0) {
        for (i = list; i && bits < 0; i = i->ifa_next) {
            const uint8_t *a, *m;
            int k, n;
            if (!i->ifa_addr || !i->ifa_netmask || i->ifa_addr->sa_family != (v4 ? AF_INET : AF_INET6)) continue;
            a = v4 ? (const uint8_t*)&((const struct sockaddr_in*)(const void*)i->ifa_addr)->sin_addr
                   : (const uint8_t*)&((const struct sockaddr_in6*)(const void*)i->ifa_addr)->sin6_addr;
            m = v4 ? (const uint8_t*)&((const struct sockaddr_in*)(const void*)i->ifa_netmask)->sin_addr
                   : (const uint8_t*)&((const struct sockaddr_in6*)(const void*)i->ifa_netmask)->sin6_addr;
            n = v4 ? 4 : 16;
            if (memcmp(a, v4 ? gid + 12 : gid, (size_t)n) != 0) continue;
            bits = 0;
            for (k = 0; k < n; k++) { uint8_t x = m[k]; while (x) { bits += x & 1; x >>= 1; } }
        }
        freeifaddrs(list);
    }
    if (bits < 0) bits = v4 ? 24 : 64;
    return (uint8_t)(v4 ? 96 + bits : bits);
}

/* Of the addresses the caller named (want[0..nwant)), the one whose GID this port has. */
OMC__PRIVATE const uint8_t* omc__rdma_want_for(const omc_rdma_gid_entry* gids, uint32_t ngids, const uint8_t (*want)[16], uint32_t nwant) {
    uint32_t i, k;
    for (k = 0; k < nwant; k++)
        for (i = 0; i < ngids; i++)
            if (memcmp(gids[i].gid, want[k], 16) == 0) return want[k];
    return nwant == 1 ? want[0] : NULL;     /* one address: as before (the rule says why if absent) */
}

/* Try one device: open it, and make a rail of every ACTIVE port (the configured one, or each in
   turn) with a usable GID, while the engine has room for rails (max). */
OMC__PRIVATE int omc__rdma_try_device(omc_rdma* E, struct ibv_device* dev, const omc_rdma_desc* d, const uint8_t (*want)[16],
                                      uint32_t nwant, uint32_t max, char* tried, size_t tn) {
    const char* name = omc__ibv_get_device_name(dev);
    struct ibv_context* ctx = omc__ibv_open_device(dev);
    struct ibv_device_attr da;
    char note[300];
    uint32_t p, first, last;
    int added = 0;
    if (!ctx) { omc__rdma_note(tried, tn, name, strerror(errno)); return 0; }
    if (omc__ibv_query_device(ctx, &da) != 0) {
        omc__rdma_note(tried, tn, name, "ibv_query_device failed");
        omc__ibv_close_device(ctx);
        return 0;
    }
    first = d->port ? d->port : 1;
    last = d->port ? d->port : da.phys_port_cnt;
    for (p = first; p <= last && p <= 255 && E->nrails < max; p++) {
        struct ibv_port_attr pa;
        omc_rdma_gid_entry* gids;
        uint32_t ngids, idx;
        omc_rdma_link link;
        char why[300];
        omc_result r;
        if (omc__ibv_query_port_attr(ctx, (uint8_t)p, &pa) != 0) {
            snprintf(note, sizeof(note), "port %u cannot be queried", p);
            omc__rdma_note(tried, tn, name, note);
            continue;
        }
        if (pa.state != IBV_PORT_ACTIVE) {
            snprintf(note, sizeof(note), "port %u is %s", p, omc__rdma_port_state(pa.state));
            omc__rdma_note(tried, tn, name, note);
            continue;
        }
        link = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? OMC_RDMA_LINK_INFINIBAND : OMC_RDMA_LINK_ETHERNET;
        gids = (omc_rdma_gid_entry*)omc__calloc(&E->hooks, OMC__RDMA_MAX_GIDS * sizeof(*gids));
        if (!gids) break;
        ngids = omc__rdma_read_gids(E, ctx, name, (uint8_t)p, &pa, gids, OMC__RDMA_MAX_GIDS);
        r = omc_rdma_choose_gid(gids, ngids, link, omc__rdma_want_for(gids, ngids, want, nwant), d->gid_index_set ? d->gid_index : -1,
                                &idx, why, sizeof(why));
        if (r == OMC_OK) {
            omc__rdma_rail* R = &E->rail[E->nrails];
            uint32_t i;
            /* every rail owns a context of its own: its PD, CQ and events stay apart */
            struct ibv_context* rctx = added ? omc__ibv_open_device(dev) : ctx;
            if (!rctx) { omc__free(&E->hooks, gids); omc__rdma_note(tried, tn, name, strerror(errno)); break; }
            memset(R, 0, sizeof(*R));
            for (i = 0; i < ngids; i++) {
                if (gids[i].index != idx) continue;
                memcpy(R->gid, gids[i].gid, 16);
                R->gid_type = gids[i].type == OMC_RDMA_GID_UNKNOWN ? (link == OMC_RDMA_LINK_INFINIBAND ? OMC_RDMA_GID_IB : OMC_RDMA_GID_ROCE_V1)
                                                                  : gids[i].type;
                snprintf(R->netdev, sizeof(R->netdev), "%s", gids[i].netdev);
            }
            omc__free(&E->hooks, gids);
            R->context = rctx;
            R->dev_attr = da;
            R->port = (uint8_t)p;
            R->port_attr = pa;
            R->link = link;
            R->gid_index = idx;
            R->prefix = omc__rdma_gid_prefix(R->gid, link);
            R->numa_node = -1;
            R->up = 1;
            snprintf(R->device, sizeof(R->device), "%s", name);
            E->nrails++;
            added++;
            OMC__RDMA_LOG(E, OMC_LOG_INFO, "rail %u: device %s port %u (%s, active MTU %u): %s", E->nrails - 1, name, p,
                          link == OMC_RDMA_LINK_INFINIBAND ? "InfiniBand" : "Ethernet/RoCE", omc_rdma_mtu_bytes(pa.active_mtu), why);
            continue;
        }
        omc__free(&E->hooks, gids);
        snprintf(note, sizeof(note), "port %u: %.280s", p, why);
        omc__rdma_note(tried, tn, name, note);
    }
    if (first > last) omc__rdma_note(tried, tn, name, "no port");
    if (!added) omc__ibv_close_device(ctx);
    return added;
}

/* Devices in rail order: the device list's order if there is one, else nearest the desc's
   NUMA node first (omc_rdma_topo_rank over /sys; ties keep ibv_get_device_list's order). */
OMC__PRIVATE void omc__rdma_topo_order(omc_rdma* E, const omc_rdma_desc* d, struct ibv_device** list, int num, int* order) {
    omc_rdma_topo_nic* nics = (omc_rdma_topo_nic*)omc__calloc(&E->hooks, sizeof(omc_rdma_topo_nic) * (size_t)num);
    omc_rdma_topo_choice* rank = (omc_rdma_topo_choice*)omc__calloc(&E->hooks, sizeof(omc_rdma_topo_choice) * (size_t)num);
    int i, k = 0;
    for (i = 0; i < num; i++) order[i] = i;
    if (nics && rank) {
        omc_rdma_topo_nic* all = NULL;
        int total = omc_rdma_topo_read("/sys", NULL, 0);
        if (total > 0) all = (omc_rdma_topo_nic*)omc__calloc(&E->hooks, sizeof(omc_rdma_topo_nic) * (size_t)total);
        if (all && omc_rdma_topo_read("/sys", all, total) == total) {
            for (i = 0; i < num; i++) {         /* in the device list's order, as sysfs sees them */
                int j;
                snprintf(nics[i].name, sizeof(nics[i].name), "%s", omc__ibv_get_device_name(list[i]));
                nics[i].numa_node = -1;
                for (j = 0; j < total; j++) if (strcmp(all[j].name, nics[i].name) == 0) nics[i] = all[j];
            }
            omc_rdma_topo_rank(nics, num, d->numa_node_set ? d->numa_node : -1, NULL, -1, rank);
            for (i = 0; i < num; i++) order[k++] = rank[i].index;
        }
        omc__free(&E->hooks, all);
    }
    omc__free(&E->hooks, nics);
    omc__free(&E->hooks, rank);
}

/* The NUMA node sysfs gives a device (its own, or its netdev's for a software device). */
OMC__PRIVATE int omc__rdma_numa_of(const char* device) {
    omc_rdma_topo_nic nics[16];
    int n = omc_rdma_topo_read("/sys", nics, 16), i;
    for (i = 0; i < n && i < 16; i++) if (strcmp(nics[i].name, device) == 0) return nics[i].numa_node;
    return -1;
}

/* The rails: the devices of the list from the desc or $RDMA_DEVICE_NAME (tried in order), else
   every device; each ACTIVE port with a usable GID is a rail, up to max rails. */
OMC__PRIVATE omc_result omc__rdma_pick_device(omc_rdma* E, const omc_rdma_desc* d, const uint8_t (*want)[16], uint32_t nwant,
                                              uint32_t max) {
    struct ibv_device** list;
    char tried[1024] = "", have[256] = "";
    const char* names = d->devices && d->devices[0] ? d->devices : getenv("RDMA_DEVICE_NAME");
    int num = 0, i;
    uint32_t k;
    list = omc__ibv_get_device_list(&num);
    if (!list || num <= 0) {
        if (list) omc__ibv_free_device_list(list);
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "no RDMA device: ibv_get_device_list lists none (%s). Load a driver, or for Soft-RoCE: "
                      "'rdma link add rxe0 type rxe netdev <if>'", num < 0 || !list ? strerror(errno) : "empty");
        return OMC_ERR_RDMA_DEVICE;
    }
    for (i = 0; i < num; i++) {
        size_t u = strlen(have);
        snprintf(have + u, sizeof(have) - u, "%s%s", i ? ", " : "", omc__ibv_get_device_name(list[i]));
    }
    if (names && names[0]) {
        const char* p = names;
        while (*p && E->nrails < max) {
            char name[64];
            size_t len = strcspn(p, ",");
            const char* s = p;
            while (len && (*s == ' ' || *s == '\t')) { s++; len--; }
            while (len && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
            snprintf(name, sizeof(name), "%.*s", (int)omc__min(len, sizeof(name) - 1), s);
            p += strcspn(p, ",");
            if (*p == ',') p++;
            if (!name[0]) continue;
            for (i = 0; i < num; i++) if (strcmp(omc__ibv_get_device_name(list[i]), name) == 0) break;
            if (i == num) { omc__rdma_note(tried, sizeof(tried), name, "no such device"); continue; }
            for (k = 0; k < E->nrails; k++) if (strcmp(E->rail[k].device, name) == 0) break;
            if (k < E->nrails) continue;                /* named twice */
            omc__rdma_try_device(E, list[i], d, want, nwant, max, tried, sizeof(tried));
        }
    } else {
        int* order = (int*)omc__calloc(&E->hooks, sizeof(int) * (size_t)num);
        if (order) omc__rdma_topo_order(E, d, list, num, order);
        for (i = 0; i < num && E->nrails < max; i++)
            omc__rdma_try_device(E, list[order ? order[i] : i], d, want, nwant, max, tried, sizeof(tried));
        omc__free(&E->hooks, order);
    }
    omc__ibv_free_device_list(list);
    if (!E->nrails) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "no usable RDMA device%s%s (devices: %s). Tried: %s", names && names[0] ? " in " : "",
                      names && names[0] ? names : "", have, tried);
        return OMC_ERR_RDMA_DEVICE;
    }
    for (k = 0; k < E->nrails; k++) E->rail[k].numa_node = omc__rdma_numa_of(E->rail[k].device);
    if (tried[0]) OMC__RDMA_LOG(E, OMC_LOG_DEBUG, "not used as rails: %s", tried);
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: completions and the progress thread                                  */
/* ============================================================================================== */

/* A failed work completion, translated once at the boundary. */
static omc_result omc__rdma_wc_result(enum ibv_wc_status s) {
    switch (s) {
        case IBV_WC_SUCCESS: return OMC_OK;
        case IBV_WC_REM_ACCESS_ERR:             /* the peer's adapter refused rkey, range or access */
        case IBV_WC_REM_INV_REQ_ERR: return OMC_ERR_RDMA_ACCESS;
        case IBV_WC_RETRY_EXC_ERR:              /* nobody acknowledged: the peer is gone or unreachable */
        case IBV_WC_RNR_RETRY_EXC_ERR: return OMC_ERR_CONNECTION;
        case IBV_WC_WR_FLUSH_ERR: return OMC_ERR_RDMA_QP;   /* the QP was already in ERROR */
        default: return OMC_ERR_RDMA_COMPLETION;
    }
}

static const char* omc__rdma_wc_hint(enum ibv_wc_status s) {
    switch (s) {
        case IBV_WC_REM_ACCESS_ERR:
        case IBV_WC_REM_INV_REQ_ERR:
            return "the peer refused the rkey or the address range: a stale, forged or already revoked descriptor";
        case IBV_WC_RETRY_EXC_ERR:
            return "the peer did not acknowledge: its process or host is gone, or the path is wrong (GID type/route, MTU)";
        case IBV_WC_WR_FLUSH_ERR:
            return "the queue pair was already in ERROR";
        case IBV_WC_LOC_PROT_ERR:
            return "a local buffer is not covered by its memory region";
        case IBV_WC_MW_BIND_ERR:
            return "memory window bind refused (window state, region access or range)";
        default:
            return "see the status";
    }
}

static const char* omc__rdma_op_name(int kind) {
    return kind == OMC__OP_XFER ? "batch transfer" : kind == OMC__OP_WRITE ? "RDMA WRITE" : kind == OMC__OP_BIND ? "window bind" : kind == OMC__OP_INVALIDATE ? "window invalidation" :
           kind == OMC__OP_PROBE ? "liveness probe (zero-byte WRITE)" : "request";
}

/* Mark a connection broken (caller holds mu) and move all its QPs to ERROR so that nothing
   more goes in or out: outstanding requests flush, the peer's writes are refused. */
OMC__PRIVATE void omc__rdma_conn_break_locked(omc_rdma_conn* c, omc_result why, const char* text) {
    struct ibv_qp_attr attr;
    uint32_t i;
    if (!c->broken) {
        c->broken = 1;
        c->error = why;
        snprintf(c->error_text, sizeof(c->error_text), "%s", text);
    }
    for (i = 0; i < c->npairs; i++) c->pair[i].up = 0;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    for (i = 0; i < c->nqp; i++)
        if (c->qps[i].qp) omc__ibv_modify_qp(c->qps[i].qp, &attr, IBV_QP_STATE);
    pthread_cond_broadcast(&c->eng->cv);
}

/* One pair of a connection failed (caller holds mu): its QPs go to ERROR (what they hold
   flushes and is written again on the other pairs), the rail's failure is counted. The
   connection breaks only when no pair is left. */
OMC__PRIVATE void omc__rdma_pair_down_locked(omc_rdma_conn* c, uint32_t p, omc_result why, const char* text) {
    omc_rdma* E = c->eng;
    omc__rdma_pair* P = &c->pair[p];
    struct ibv_qp_attr attr;
    uint32_t i, left = 0;
    if (!P->up || c->broken) return;
    P->up = 0;
    P->error = why;
    snprintf(P->why, sizeof(P->why), "%s", text);
    if (!c->quiet) {
        E->rail[P->rail].failures++;
        snprintf(E->rail[P->rail].why, sizeof(E->rail[P->rail].why), "%s", text);
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    for (i = p * c->qpp; i < (p + 1) * c->qpp && i < c->nqp; i++)
        if (c->qps[i].qp) omc__ibv_modify_qp(c->qps[i].qp, &attr, IBV_QP_STATE);
    for (i = 0; i < c->npairs; i++) left += c->pair[i].up;
    if (!left) { omc__rdma_conn_break_locked(c, why, text); return; }
    OMC__RDMA_LOG(E, c->quiet ? OMC_LOG_DEBUG : OMC_LOG_WARN, "connection %016llx: rail %u (%s port %u) failed: %s; %u rail%s left, "
                  "its unfinished writes move there", (unsigned long long)c->conn_id, P->rail, E->rail[P->rail].device,
                  E->rail[P->rail].port, text, left, left == 1 ? "" : "s");
    pthread_cond_broadcast(&E->cv);
}

/* Write slices (one RDMA WRITE each) and their state; the operation of a write owns them. */
enum { OMC__SLICE_NEW = 0, OMC__SLICE_POSTED, OMC__SLICE_DONE, OMC__SLICE_REPOST };

typedef struct omc__rdma_slice {
    uint64_t off;               /* offset in its extent */
    uint64_t len;
    uint64_t po;                /* where it starts in the source: piece pi, offset po */
    uint32_t ext, pi;
    uint8_t state, pair;
} omc__rdma_slice;

/* Retire one send slot with result r (caller holds mu). A write's slice that failed while its
   connection still has a working pair is marked for writing again, not failed. */
OMC__PRIVATE void omc__rdma_retire(omc_rdma* E, omc__rdma_qp* q, omc_result r, int wc_status) {
    omc__rdma_slot* s = &q->slots[q->tail % E->queue_depth];
    omc_rdma_op* op = s->op;
    uint32_t slice = s->slice;
    q->tail++;
    E->outstanding--;
    s->op = NULL;
    s->slice = OMC__RDMA_NO_SLICE;
    if (!op) return;
    if (op->slices && slice < op->nslices) {
        omc__rdma_slice* sl = &op->slices[slice];
        omc__rdma_rail* R = &E->rail[q->rail];
        q->conn->pair[q->pair].queued -= sl->len;
        R->inflight -= sl->len;
        if (r == OMC_OK) {
            sl->state = OMC__SLICE_DONE;
            R->bytes += sl->len;
            R->slices++;
            R->window_bytes += sl->len;
        } else if (!q->conn->broken && r != OMC_ERR_RDMA_ACCESS) {
            sl->state = OMC__SLICE_REPOST;
            op->reposts++;
        } else if (op->status == OMC_OK) {
            /* flushed because the last rail went: the write fails for that rail's reason */
            op->status = r == OMC_ERR_RDMA_QP && q->conn->error == OMC_ERR_CONNECTION ? OMC_ERR_CONNECTION : r;
            op->wc_status = wc_status;
        }
    } else if (r != OMC_OK && op->status == OMC_OK) { op->status = r; op->wc_status = wc_status; }
    if (--op->pending == 0 && op->abandoned) { op->next = E->reap; E->reap = op; }
}

/* One work completion (caller holds mu). */
OMC__PRIVATE void omc__rdma_complete(omc_rdma* E, const struct ibv_wc* wc) {
    uint32_t id = (uint32_t)(wc->wr_id >> 32), seq32 = (uint32_t)wc->wr_id;
    omc__rdma_qp* q = (omc__rdma_qp*)omc__smap_get(&E->qps, (const char*)&id, sizeof(id));
    omc_rdma_op* op;
    omc_result r;
    uint64_t seq;
    if (!q) return;                                     /* its QP is gone: a stale completion */
    seq = q->tail + (uint32_t)(seq32 - (uint32_t)q->tail);
    if (seq >= q->head) return;                         /* already retired: a flush after an error */
    if (wc->status == IBV_WC_SUCCESS) {                 /* in order: everything up to seq is done */
        while (q->tail <= seq) omc__rdma_retire(E, q, OMC_OK, 0);
        return;
    }
    r = omc__rdma_wc_result(wc->status);
    while (q->tail < seq) omc__rdma_retire(E, q, OMC_OK, 0);
    op = q->slots[seq % E->queue_depth].op;
    if (!q->failed) {
        char text[160];
        q->failed = 1;
        if (!q->conn->quiet) {
            E->n_qp_errors++;
            if (r == OMC_ERR_RDMA_ACCESS) E->n_access_errors++;
        }
        OMC__RDMA_LOG(E, q->conn->quiet ? OMC_LOG_DEBUG : wc->status == IBV_WC_WR_FLUSH_ERR ? OMC_LOG_INFO : OMC_LOG_ERROR,
                      "QP %u (connection %016llx, QP %u of %u, rail %u %s, peer QP %u): %s failed: %s (status %d, vendor error 0x%x): %s",
                      q->qpn, (unsigned long long)q->conn->conn_id, q->index, q->conn->nqp, q->rail, E->rail[q->rail].device, q->peer_qpn,
                      omc__rdma_op_name(op ? op->kind : 0), omc__ibv_wc_status_str(wc->status), (int)wc->status,
                      wc->vendor_err, omc__rdma_wc_hint(wc->status));
        snprintf(text, sizeof(text), "QP %u: %s: %s", q->qpn, omc__ibv_wc_status_str(wc->status), omc__rdma_wc_hint(wc->status));
        /* a refused key is the peer's verdict on us, not a broken path: no other rail is tried */
        if (r == OMC_ERR_RDMA_ACCESS) omc__rdma_conn_break_locked(q->conn, r, text);
        else omc__rdma_pair_down_locked(q->conn, q->pair, r, text);
    }
    omc__rdma_retire(E, q, r, (int)wc->status);
    while (q->tail < q->head) omc__rdma_retire(E, q, OMC_ERR_RDMA_QP, (int)IBV_WC_WR_FLUSH_ERR);   /* they will flush */
}

OMC__PRIVATE void omc__rdma_op_free(omc_rdma_op* op);
OMC__PRIVATE void omc__rdma_bury(omc_rdma* E);

#define OMC__RDMA_RATE_MIN_NS 20000000  /* a busy period counts once it lasted 20 ms */

/* Throughput per rail (caller holds mu): the bytes retired since the rail became busy over the
   time since then - completions come in bursts (one signalled request retires many), so only
   a whole busy period says how fast the rail is - averaged with the previous periods'. */
OMC__PRIVATE void omc__rdma_measure(omc_rdma* E) {
    omc_time_ns now = omc_now_ns();
    uint32_t k;
    for (k = 0; k < E->nrails; k++) {
        omc__rdma_rail* R = &E->rail[k];
        double period;
        if (!R->window_bytes || now - R->mark < OMC__RDMA_RATE_MIN_NS) continue;
        period = (double)R->window_bytes * 1e9 / (double)(now - R->mark);
        R->rate = R->settled > 0 ? 0.5 * R->settled + 0.5 * period : period;
        if (!R->inflight) {         /* the period is over: it becomes history */
            R->settled = R->rate;
            R->window_bytes = 0;
        }
    }
}

/* Handle a batch of completions and free what finished after its waiter gave up. */
OMC__PRIVATE void omc__rdma_handle(omc_rdma* E, const struct ibv_wc* wc, int n) {
    omc_rdma_op* reap;
    int i;
    pthread_mutex_lock(&E->mu);
    for (i = 0; i < n; i++) omc__rdma_complete(E, &wc[i]);
    omc__rdma_measure(E);
    reap = E->reap;
    E->reap = NULL;
    pthread_cond_broadcast(&E->cv);
    pthread_mutex_unlock(&E->mu);
    while (reap) {
        omc_rdma_op* next = reap->next;
        omc__rdma_op_free(reap);
        reap = next;
    }
}

/* A rail's port went down (caller holds mu): the rail takes no new work, and every connection's
   pair on it fails now - its QPs would only time out (retry exceeded, seconds later). */
OMC__PRIVATE void omc__rdma_rail_down_locked(omc_rdma* E, uint32_t k, const char* why) {
    omc__rdma_rail* R = &E->rail[k];
    uint32_t it = 0;
    void* v;
    if (!R->up) return;
    R->up = 0;
    snprintf(R->why, sizeof(R->why), "%s", why);
    while (omc__smap_next(&E->qps, &it, NULL, NULL, &v)) {
        omc__rdma_qp* q = (omc__rdma_qp*)v;
        if (q->rail == k && q->conn->pair[q->pair].up) omc__rdma_pair_down_locked(q->conn, q->pair, OMC_ERR_CONNECTION, why);
    }
    pthread_cond_broadcast(&E->cv);
}

/* Asynchronous events of one rail: a QP that failed without a completion to tell (e.g. the
   responder side of a refused write), port state changes, a dead device. */
OMC__PRIVATE void omc__rdma_async_events(omc_rdma* E, uint32_t k) {
    omc__rdma_rail* R = &E->rail[k];
    struct ibv_async_event ev;
    while (omc__ibv_get_async_event(R->context, &ev) == 0) {
        switch (ev.event_type) {
            case IBV_EVENT_QP_FATAL:
            case IBV_EVENT_QP_REQ_ERR:
            case IBV_EVENT_QP_ACCESS_ERR: {
                /* qp_context is our QP: valid here, ibv_destroy_qp waits until the event is acked */
                omc__rdma_qp* q = (omc__rdma_qp*)ev.element.qp->qp_context;
                char text[160];
                snprintf(text, sizeof(text), "QP %u: %s", q->qpn, omc__ibv_event_type_str(ev.event_type));
                OMC__RDMA_LOG(E, OMC_LOG_WARN, "QP %u (connection %016llx): asynchronous event %s: connection broken", q->qpn,
                              (unsigned long long)q->conn->conn_id, omc__ibv_event_type_str(ev.event_type));
                pthread_mutex_lock(&E->mu);
                omc__rdma_conn_break_locked(q->conn, OMC_ERR_RDMA_QP, text);
                pthread_mutex_unlock(&E->mu);
                break;
            }
            case IBV_EVENT_DEVICE_FATAL:
            case IBV_EVENT_PORT_ERR:
                if (ev.event_type == IBV_EVENT_PORT_ERR && ev.element.port_num != R->port) break;
                OMC__RDMA_LOG(E, OMC_LOG_ERROR, "rail %u (%s port %u): %s: the rail is down, its writes move to the other rails", k,
                              R->device, R->port, omc__ibv_event_type_str(ev.event_type));
                pthread_mutex_lock(&E->mu);
                omc__rdma_rail_down_locked(E, k, ev.event_type == IBV_EVENT_PORT_ERR ? "port went down (IBV_EVENT_PORT_ERR)"
                                                                                     : "device failed (IBV_EVENT_DEVICE_FATAL)");
                pthread_mutex_unlock(&E->mu);
                break;
            case IBV_EVENT_PORT_ACTIVE:
                if (ev.element.port_num != R->port) break;
                pthread_mutex_lock(&E->mu);
                if (!R->up) {
                    /* back: new connections use it at once; a connection that lost it gets it
                       back when it is replaced (QPs cannot be revived without a new exchange) */
                    R->up = 1;
                    R->regid = 1;
                    R->rejoins++;
                    R->rate = 0;        /* weight reset: an equal share until measured again */
                    R->settled = 0;
                    R->window_bytes = 0;
                    OMC__RDMA_LOG(E, OMC_LOG_WARN, "rail %u (%s port %u): port active again (IBV_EVENT_PORT_ACTIVE): the rail rejoins",
                                  k, R->device, R->port);
                }
                pthread_mutex_unlock(&E->mu);
                break;
            default:
                OMC__RDMA_LOG(E, OMC_LOG_DEBUG, "rail %u (%s): event %s", k, R->device, omc__ibv_event_type_str(ev.event_type));
                break;
        }
        omc__ibv_ack_async_event(&ev);
    }
}

/* Poll every rail's CQ while there is work (and for spin_us after the last completion: the
   next one is probably microseconds away), otherwise arm the CQs and sleep on their completion
   channels, the rails' event fds and the wake-up fd. */
static void* omc__rdma_progress(void* arg) {
    omc_rdma* E = (omc_rdma*)arg;
    struct ibv_wc wc[OMC__RDMA_POLL_BATCH];
    omc_time_ns spin_until = 0, spin = (omc_time_ns)E->spin_us * 1000;
    uint32_t k;
    for (;;) {
        struct pollfd pf[2 * OMC_RDMA_MAX_RAILS + 1];
        int n, got = 0, stop, busy, nfd = 0;
        for (k = 0; k < E->nrails; k++) {
            n = ibv_poll_cq(E->rail[k].cq, OMC__RDMA_POLL_BATCH, wc);
            if (n > 0) { omc__rdma_handle(E, wc, n); got = 1; }
            else if (n < 0) OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_poll_cq on %s failed (%d)", E->rail[k].device, n);
        }
        if (got) {
            omc__rdma_bury(E);
            spin_until = omc_now_ns() + spin;
            continue;
        }
        pthread_mutex_lock(&E->mu);
        stop = E->stop;
        busy = E->outstanding > 0;
        pthread_mutex_unlock(&E->mu);
        if (stop) break;
        if (busy && omc_now_ns() < spin_until) continue;
        /* arm, then poll once more: arming only reports completions that arrive after it */
        for (k = 0; k < E->nrails; k++) {
            if (ibv_req_notify_cq(E->rail[k].cq, 0) != 0) OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_req_notify_cq failed");
            n = ibv_poll_cq(E->rail[k].cq, OMC__RDMA_POLL_BATCH, wc);
            if (n > 0) { omc__rdma_handle(E, wc, n); got = 1; }
        }
        if (got) {
            spin_until = omc_now_ns() + spin;
            continue;
        }
        for (k = 0; k < E->nrails; k++) {
            pf[nfd].fd = E->rail[k].channel->fd; pf[nfd].events = POLLIN; pf[nfd].revents = 0; nfd++;
            pf[nfd].fd = E->rail[k].context->async_fd; pf[nfd].events = POLLIN; pf[nfd].revents = 0; nfd++;
        }
        pf[nfd].fd = E->wake_fd; pf[nfd].events = POLLIN; pf[nfd].revents = 0;
        omc__add(&E->n_sleeps, 1u);
        if (poll(pf, (nfds_t)(nfd + 1), OMC__RDMA_SLEEP_MS) < 0 && errno != EINTR) OMC__RDMA_LOG(E, OMC_LOG_ERROR, "poll: %s", strerror(errno));
        for (k = 0; k < E->nrails; k++) {
            omc__rdma_rail* R = &E->rail[k];
            if (pf[2 * k].revents & POLLIN) {
                struct ibv_cq* ev_cq;
                void* ev_ctx;
                if (omc__ibv_get_cq_event(R->channel, &ev_cq, &ev_ctx) == 0 && ++R->unacked >= OMC__RDMA_ACK_EVERY) {
                    omc__ibv_ack_cq_events(R->cq, R->unacked);
                    R->unacked = 0;
                }
            }
            if (pf[2 * k + 1].revents & POLLIN) omc__rdma_async_events(E, k);
        }
        if (pf[nfd].revents & POLLIN) {
            uint64_t v;
            if (read(E->wake_fd, &v, sizeof(v)) < 0) { /* nothing to do: the flags are in E */ }
        }
        omc__rdma_bury(E);
        spin_until = omc_now_ns() + spin;
    }
    for (k = 0; k < E->nrails; k++)         /* every event must be acked before destroy_cq */
        if (E->rail[k].unacked) { omc__ibv_ack_cq_events(E->rail[k].cq, E->rail[k].unacked); E->rail[k].unacked = 0; }
    return NULL;
}

/* ============================================================================================== */
/* [SECTION] Implementation: creating and destroying the engine                                   */
/* ============================================================================================== */

OMC__PRIVATE int omc__rdma_set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* After the rail's device is open (R->context): its PD, completion channel and CQ. On failure
   everything created here and the context are released, in reverse. */
OMC__PRIVATE omc_result omc__rdma_rail_open(omc_rdma* E, omc__rdma_rail* R) {
    R->pd = omc__ibv_alloc_pd(R->context);
    if (!R->pd) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_alloc_pd on %s failed: %s", R->device, strerror(errno));
        goto clean_context;
    }
    R->channel = omc__ibv_create_comp_channel(R->context);
    if (!R->channel) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_create_comp_channel on %s failed: %s", R->device, strerror(errno));
        goto clean_pd;
    }
    R->cq = omc__ibv_create_cq(R->context, (int)E->cq_depth, E, R->channel, 0);
    if (!R->cq) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_create_cq(%u entries) on %s failed: %s", E->cq_depth, R->device, strerror(errno));
        goto clean_channel;
    }
    /* the progress thread polls both before it reads them: they must never block it */
    if (omc__rdma_set_nonblocking(R->channel->fd) != 0 || omc__rdma_set_nonblocking(R->context->async_fd) != 0) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "fcntl(O_NONBLOCK): %s", strerror(errno));
        goto clean_cq;
    }
    return OMC_OK;

clean_cq:
    omc__ibv_destroy_cq(R->cq);
clean_channel:
    omc__ibv_destroy_comp_channel(R->channel);
clean_pd:
    omc__ibv_dealloc_pd(R->pd);
clean_context:
    omc__ibv_close_device(R->context);
    R->context = NULL;
    return OMC_ERR_RDMA_DEVICE;
}

/* The reverse of omc__rdma_rail_open. */
OMC__PRIVATE void omc__rdma_rail_close(omc_rdma* E, omc__rdma_rail* R) {
    if (!R->context) return;
    if (omc__ibv_destroy_cq(R->cq) != 0) OMC__RDMA_LOG(E, OMC_LOG_WARN, "ibv_destroy_cq: %s", strerror(errno));
    if (omc__ibv_destroy_comp_channel(R->channel) != 0) OMC__RDMA_LOG(E, OMC_LOG_WARN, "ibv_destroy_comp_channel: %s", strerror(errno));
    if (omc__ibv_dealloc_pd(R->pd) != 0) OMC__RDMA_LOG(E, OMC_LOG_WARN, "ibv_dealloc_pd: %s (something still uses it)", strerror(errno));
    omc__ibv_close_device(R->context);
    R->context = NULL;
}

/* After the rails' devices are open: every rail's PD, channel and CQ, the wake-up fd, the
   progress thread. On failure everything is released, in reverse (the contexts too). */
OMC__PRIVATE omc_result omc__rdma_open(omc_rdma* E) {
    uint32_t k, opened = 0;
    int rc;
    for (k = 0; k < E->nrails; k++) {
        if (omc__rdma_rail_open(E, &E->rail[k]) != OMC_OK) goto clean_rails;
        opened++;
    }
    E->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (E->wake_fd < 0) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "eventfd: %s", strerror(errno));
        goto clean_rails;
    }
    rc = pthread_create(&E->thread, NULL, omc__rdma_progress, E);
    if (rc != 0) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "pthread_create: %s", strerror(rc));
        goto clean_wake;
    }
    E->thread_started = 1;
    return OMC_OK;

clean_wake:
    close(E->wake_fd);
clean_rails:
    for (k = opened; k-- > 0;) omc__rdma_rail_close(E, &E->rail[k]);
    for (k = opened + 1; k < E->nrails; k++) {     /* opened by the device search, not here */
        omc__ibv_close_device(E->rail[k].context);
        E->rail[k].context = NULL;
    }
    return OMC_ERR_RDMA_DEVICE;
}

/* The reverse of omc__rdma_open. */
OMC__PRIVATE void omc__rdma_close(omc_rdma* E) {
    uint32_t k;
    if (E->thread_started) {
        uint64_t one = 1;
        pthread_mutex_lock(&E->mu);
        E->stop = 1;
        pthread_mutex_unlock(&E->mu);
        if (write(E->wake_fd, &one, sizeof(one)) < 0) { /* the thread also wakes up on its own */ }
        pthread_join(E->thread, NULL);
        E->thread_started = 0;
    }
    omc__rdma_bury(E);          /* what the thread had not freed yet: before the CQ and PD go */
    while (E->quarantine) {     /* the QPs are gone: nothing can use these keys any more */
        omc__rdma_quarantined* qn = E->quarantine;
        E->quarantine = qn->next;
        if (omc__ibv_dereg_mr(qn->mr) != 0) OMC__RDMA_LOG(E, OMC_LOG_WARN, "ibv_dereg_mr of a quarantined region: %s", strerror(errno));
        omc__free(&E->hooks, qn);
    }
    close(E->wake_fd);
    for (k = E->nrails; k-- > 0;) omc__rdma_rail_close(E, &E->rail[k]);
}

/* Zero means default; check what is left. */
OMC__PRIVATE omc_result omc__rdma_resolve(omc_rdma* E, const omc_rdma_desc* d) {
    E->qps_per_peer = d->qps_per_peer ? d->qps_per_peer : OMNICONN_RDMA_QPS_PER_PEER;
    E->queue_depth = d->queue_depth ? d->queue_depth : OMNICONN_RDMA_QUEUE_DEPTH;
    E->signal_every = d->signal_every ? d->signal_every : OMNICONN_RDMA_SIGNAL_EVERY;
    E->slice = d->slice_size ? d->slice_size : OMNICONN_RDMA_SLICE;
    E->split_min = d->split_min ? d->split_min : OMNICONN_RDMA_SPLIT_MIN;
    E->mr_chunk = d->mr_chunk ? d->mr_chunk : OMNICONN_RDMA_MR_CHUNK;
    E->spin_us = d->spin_us ? d->spin_us : OMNICONN_RDMA_SPIN_US;
    if (E->qps_per_peer > OMC_RDMA_MAX_QPS || E->queue_depth < 2 || E->queue_depth > 65536 || E->slice > ((uint64_t)1 << 30) ||
        (E->mr_chunk & 4095) || d->port > 255 || (unsigned)d->protection > OMC_RDMA_PROTECT_POOL) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "invalid RDMA desc: qps_per_peer %u (1..%d), queue_depth %u (2..65536), slice %llu (<= 1 GiB), "
                      "mr_chunk %llu (a multiple of 4096), port %u", E->qps_per_peer, OMC_RDMA_MAX_QPS, E->queue_depth,
                      (unsigned long long)E->slice, (unsigned long long)E->mr_chunk, d->port);
        return OMC_ERR_INVALID_ARG;
    }
    if (E->signal_every > E->queue_depth / 2) E->signal_every = E->queue_depth / 2;   /* the ring must drain */
    return OMC_OK;
}

OMC__PRIVATE void omc__rdma_choose_protection(omc_rdma* E, omc_rdma_protection want);

/* Traffic class and service level of each rail: the desc's text, else ours, else Mooncake's
   environment variable (a program that moves from Mooncake keeps its fabric settings). Parsed
   before any device is opened (a wrong value is a wrong value on every host), given to the
   rails once they exist (omc__rdma_apply_qos). */
OMC__PRIVATE omc_result omc__rdma_resolve_qos(omc_rdma* E, const omc_rdma_desc* d) {
    static const char* tc_env[] = { "OMNICONN_IB_TC", "MC_IB_TC" };
    static const char* sl_env[] = { "OMNICONN_IB_SL", "MC_IB_SL" };
    uint8_t tc[OMC_RDMA_MAX_RAILS], sl[OMC_RDMA_MAX_RAILS];
    const char *tct = d->traffic_class, *slt = d->service_level, *tcw = "desc.traffic_class", *slw = "desc.service_level";
    uint32_t k;
    memset(tc, 0, sizeof(tc));
    memset(sl, 0, sizeof(sl));
    for (k = 0; k < 2 && !tct; k++) if (getenv(tc_env[k]) && getenv(tc_env[k])[0]) { tct = getenv(tc_env[k]); tcw = tc_env[k]; }
    for (k = 0; k < 2 && !slt; k++) if (getenv(sl_env[k]) && getenv(sl_env[k])[0]) { slt = getenv(sl_env[k]); slw = sl_env[k]; }
    if (omc_rdma_parse_qos(tct, 255, tc) != OMC_OK || omc_rdma_parse_qos(slt, 15, sl) != OMC_OK) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "traffic class %s='%s' (0..255) or service level %s='%s' (0..15) is not a number or a "
                      "comma list of at most %d numbers in range", tcw, tct ? tct : "", slw, slt ? slt : "", OMC_RDMA_MAX_RAILS);
        return OMC_ERR_INVALID_ARG;
    }
    memcpy(E->qos_tc, tc, sizeof(tc));
    memcpy(E->qos_sl, sl, sizeof(sl));
    E->qos_tc_from = tct ? tcw : "default";
    E->qos_sl_from = slt ? slw : "default";
    return OMC_OK;
}

OMC__PRIVATE void omc__rdma_apply_qos(omc_rdma* E) {
    uint32_t k;
    for (k = 0; k < E->nrails; k++) {
        E->rail[k].traffic_class = E->qos_tc[k];
        E->rail[k].service_level = E->qos_sl[k];
        if (E->qos_tc[k] || E->qos_sl[k])
            OMC__RDMA_LOG(E, OMC_LOG_INFO, "rail %u (%s): traffic class %u (%s), service level %u (%s)", k, E->rail[k].device, E->qos_tc[k],
                          E->qos_tc_from, E->qos_sl[k], E->qos_sl_from);
    }
}

/* desc.local_addr: one address, or a comma list (one per rail), as GIDs to look for. */
OMC__PRIVATE omc_result omc__rdma_local_addrs(const omc_hooks* hooks, const char* text, uint8_t (*want)[16], uint32_t* nwant) {
    const char* p = text;
    uint32_t cap = OMC_RDMA_MAX_RAILS * 2;
    *nwant = 0;
    while (p && *p) {
        char one[INET6_ADDRSTRLEN + 8];
        size_t len = strcspn(p, ", ");
        if (len) {
            snprintf(one, sizeof(one), "%.*s", (int)omc__min(len, sizeof(one) - 1), p);
            if (*nwant == cap || len >= sizeof(one) - 1 || omc_rdma_addr_to_gid(one, want[*nwant]) != OMC_OK) {
                OMC__LOG(hooks, OMC_LOG_ERROR, OMC_LOGITEM_RDMA, "local_addr '%s' is not an IPv4 or IPv6 literal (or a comma "
                         "list of at most %u)", text, cap);
                return OMC_ERR_INVALID_ARG;
            }
            (*nwant)++;
        }
        p += len;
        while (*p == ',' || *p == ' ') p++;
    }
    return OMC_OK;
}

/* What every rail can do: gather elements, CQ entries, RDMA READs in flight per QP. */
OMC__PRIVATE void omc__rdma_device_limits(omc_rdma* E) {
    uint32_t k;
    E->max_sge = OMC__RDMA_MAX_SGE;
    E->cq_depth = OMNICONN_RDMA_CQ_DEPTH;
    for (k = 0; k < E->nrails; k++) {
        const struct ibv_device_attr* da = &E->rail[k].dev_attr;
        uint32_t rd = (uint32_t)omc__min(da->max_qp_rd_atom, da->max_qp_init_rd_atom);
        E->max_sge = (uint32_t)omc__min(E->max_sge, da->max_sge > 0 ? (uint32_t)da->max_sge : 1u);
        E->cq_depth = (uint32_t)omc__min(E->cq_depth, da->max_cqe > 0 ? (uint32_t)da->max_cqe : 1u);
        E->rail[k].rd_atomic = (uint8_t)(rd < 1 ? 1 : omc__min(rd, OMC__RDMA_RD_ATOMIC_MAX));
    }
}

OMNICONN_API omc_result omc_rdma_create(const omc_rdma_desc* desc, omc_rdma** out) {
    omc_rdma_desc d;
    omc_hooks hooks;
    omc_rdma* E;
    char why[512], gtext[INET6_ADDRSTRLEN];
    uint8_t want[OMC_RDMA_MAX_RAILS * 2][16];
    uint32_t nwant = 0, max_rails, k;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.hooks);
    r = omc__ibv_load(d.library, why, sizeof(why));
    if (r != OMC_OK) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_RDMA, "RDMA unavailable: %s", why);
        return r;
    }
    if (omc__rdma_local_addrs(&hooks, d.local_addr, want, &nwant) != OMC_OK) return OMC_ERR_INVALID_ARG;
    max_rails = d.max_rails;
    if (!max_rails && getenv("OMNICONN_RDMA_MAX_RAILS")) max_rails = (uint32_t)strtoul(getenv("OMNICONN_RDMA_MAX_RAILS"), NULL, 10);
    if (!max_rails || max_rails > OMC_RDMA_MAX_RAILS) max_rails = OMC_RDMA_MAX_RAILS;
    E = (omc_rdma*)omc__calloc(&hooks, sizeof(omc_rdma));
    if (!E) return OMC_ERR_NO_MEMORY;
    E->hooks = hooks;
    E->wake_fd = -1;
    r = omc__rdma_resolve(E, &d);
    if (r == OMC_OK) r = omc__rdma_resolve_qos(E, &d);
    if (r != OMC_OK) { omc__free(&hooks, E); return r; }
    if (pthread_mutex_init(&E->mu, NULL) != 0 || omc__cond_init_monotonic(&E->cv) != 0) { omc__free(&hooks, E); return OMC_ERR_SYSTEM; }
    r = omc__rdma_pick_device(E, &d, (const uint8_t (*)[16])want, nwant, max_rails);
    if (r == OMC_OK) {
        omc__rdma_device_limits(E);
        omc__rdma_apply_qos(E);
        if (E->cq_depth < E->queue_depth) {
            OMC__RDMA_LOG(E, OMC_LOG_ERROR, "device %s: a CQ holds at most %u entries, fewer than queue_depth %u", E->rail[0].device,
                          E->cq_depth, E->queue_depth);
            for (k = 0; k < E->nrails; k++) omc__ibv_close_device(E->rail[k].context);
            r = OMC_ERR_INVALID_ARG;
        } else r = omc__rdma_open(E);
    }
    if (r != OMC_OK) {
        pthread_mutex_destroy(&E->mu);
        pthread_cond_destroy(&E->cv);
        omc__free(&hooks, E);
        return r;
    }
    omc__rdma_choose_protection(E, d.protection);
    for (k = 0; k < E->nrails; k++) {
        omc__rdma_rail* R = &E->rail[k];
        omc_rdma_gid_to_text(R->gid, gtext, sizeof(gtext));
        OMC__RDMA_LOG(E, OMC_LOG_INFO, "RDMA engine rail %u of %u on %s port %u: GID %u %s/%u (%s%s%s), NUMA node %d", k, E->nrails,
                      R->device, R->port, R->gid_index, gtext, R->prefix, omc__gid_type_name(R->gid_type), R->netdev[0] ? " on " : "",
                      R->netdev, R->numa_node);
    }
    OMC__RDMA_LOG(E, OMC_LOG_INFO, "RDMA engine: %u rail%s, destinations protected by %s, libibverbs %s, %u QPs per peer and rail, "
                  "queue depth %u, slice %llu", E->nrails, E->nrails == 1 ? "" : "s", omc__rdma_protection_name(E->protect),
                  omc__ibv_library, E->qps_per_peer, E->queue_depth, (unsigned long long)E->slice);
    *out = E;
    return OMC_OK;
}

OMC__PRIVATE void omc__rdma_region_drop(omc_rdma* E, omc__rdma_region* g);

OMNICONN_API void omc_rdma_destroy(omc_rdma* E) {
    omc_hooks hooks;
    uint32_t i;
    if (!E) return;
    hooks = E->hooks;
    if (E->conns) OMC__RDMA_LOG(E, OMC_LOG_WARN, "destroying the engine with %u connections still open", E->conns);
    omc__rdma_close(E);
    for (i = 0; i < E->nregions; i++) omc__rdma_region_drop(E, &E->regions[i]);
    omc__free(&hooks, E->regions);
    omc__smap_free(&E->qps, &hooks);
    pthread_mutex_destroy(&E->mu);
    pthread_cond_destroy(&E->cv);
    omc__free(&hooks, E);
}

OMNICONN_API omc_result omc_rdma_query(omc_rdma* E, omc_rdma_info* o) {
    uint32_t i;
    if (!o) return OMC_ERR_INVALID_ARG;
    memset(o, 0, sizeof(*o));
    if (!E) return OMC_ERR_INVALID_ARG;
    snprintf(o->device, sizeof(o->device), "%s", E->rail[0].device);
    o->port = E->rail[0].port;
    o->link = E->rail[0].link;
    o->gid_index = E->rail[0].gid_index;
    memcpy(o->gid, E->rail[0].gid, 16);
    o->gid_type = E->rail[0].gid_type;
    snprintf(o->netdev, sizeof(o->netdev), "%s", E->rail[0].netdev);
    o->active_mtu = omc_rdma_mtu_bytes(E->rail[0].port_attr.active_mtu);
    o->rails = E->nrails;
    o->protection = E->protect;
    o->memory_windows = E->use_mw;
    o->window_bounds = E->window_bounds;
    o->runtime_linked = OMC__IBV_RUNTIME;
    o->qps_per_peer = E->qps_per_peer;
    o->queue_depth = E->queue_depth;
    o->signal_every = E->signal_every;
    o->slice_size = E->slice;
    o->mr_chunk = E->mr_chunk;
    pthread_mutex_lock(&E->mu);
    o->regions = E->nregions;
    for (i = 0; i < E->nregions; i++) { o->memory_regions += E->regions[i].count * E->nrails; o->registered_bytes += E->regions[i].size; }
    o->connections = E->conns;
    o->writes = E->n_writes;
    o->write_bytes = E->n_write_bytes;
    o->write_errors = E->n_write_errors;
    o->access_errors = E->n_access_errors;
    o->work_requests = E->n_wrs;
    o->signalled = E->n_signalled;
    o->binds = E->n_binds;
    o->invalidations = E->n_invalidations;
    o->qp_errors = E->n_qp_errors;
    for (i = 0; i < E->nrails; i++) o->rails_up += E->rail[i].up != 0;
    pthread_mutex_unlock(&E->mu);
    o->sleeps = omc__load(&E->n_sleeps);
    return OMC_OK;
}

/* The rate the earliest-finish rule assumes for rail k (caller holds mu): its measured rate, or
   the mean of the measured up rails' (an equal share) if it has none yet. */
OMC__PRIVATE double omc__rdma_rail_rate(const omc_rdma* E, uint32_t k) {
    double sum = 0;
    uint32_t i, n = 0;
    if (E->rail[k].rate > 0) return E->rail[k].rate;
    for (i = 0; i < E->nrails; i++) if (E->rail[i].up && E->rail[i].rate > 0) { sum += E->rail[i].rate; n++; }
    return n ? sum / n : 1.0;
}

OMNICONN_API int omc_rdma_rail_stats(omc_rdma* E, omc_rdma_rail_stat* out, int cap) {
    double total = 0;
    uint32_t k;
    if (!E || (cap > 0 && !out)) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&E->mu);
    for (k = 0; k < E->nrails; k++) if (E->rail[k].up) total += omc__rdma_rail_rate(E, k);
    for (k = 0; k < E->nrails && (int)k < cap; k++) {
        const omc__rdma_rail* R = &E->rail[k];
        omc_rdma_rail_stat* o = &out[k];
        memset(o, 0, sizeof(*o));
        snprintf(o->device, sizeof(o->device), "%s", R->device);
        o->port = R->port;
        snprintf(o->netdev, sizeof(o->netdev), "%s", R->netdev);
        omc_rdma_gid_to_text(R->gid, o->gid, sizeof(o->gid));
        o->gid_index = R->gid_index;
        o->numa_node = R->numa_node;
        o->up = R->up;
        o->bytes = R->bytes;
        o->slices = R->slices;
        o->failures = R->failures;
        o->rejoins = R->rejoins;
        o->weight = R->up && total > 0 ? omc__rdma_rail_rate(E, k) / total : 0;
        o->throughput = R->rate;
        snprintf(o->why, sizeof(o->why), "%s", R->why);
        o->traffic_class = R->traffic_class;
        o->service_level = R->service_level;
    }
    pthread_mutex_unlock(&E->mu);
    return (int)E->nrails;
}

/* ============================================================================================== */
/* [SECTION] Implementation: registration                                                         */
/* ============================================================================================== */

/* What the kernel counts against RLIMIT_MEMLOCK for us: VmPin (pages pinned by registrations
   of this process, from any library) and whether CAP_IPC_LOCK lifts the limit. */
OMC__PRIVATE void omc__rdma_pin_state(uint64_t* pinned, int* cap_ipc_lock) {
    char line[256];
    FILE* f = fopen("/proc/self/status", "r");
    *cap_ipc_lock = 0;
    if (!f) return;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long v;
        if (sscanf(line, "VmPin: %llu kB", &v) == 1) *pinned = omc__max(*pinned, (uint64_t)v * 1024);
        else if (strncmp(line, "CapEff:", 7) == 0 && sscanf(line + 7, "%llx", &v) == 1) *cap_ipc_lock = (int)((v >> 14) & 1);   /* CAP_IPC_LOCK = 14 */
    }
    fclose(f);
}

OMC__PRIVATE uint64_t omc__rdma_memlock_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
    return (uint64_t)rl.rlim_cur;
}

OMC__PRIVATE void omc__rdma_region_drop(omc_rdma* E, omc__rdma_region* g) {
    uint32_t i;
    for (i = 0; g->mr && i < g->count * E->nrails; i++)
        if (g->mr[i] && omc__ibv_dereg_mr(g->mr[i]) != 0)
            OMC__RDMA_LOG(E, OMC_LOG_WARN, "ibv_dereg_mr of [%p, +%llu): %s (a memory window still bound?)", (void*)g->base,
                          (unsigned long long)g->size, strerror(errno));
    omc__free(&E->hooks, g->mr);
    g->mr = NULL;
    g->count = 0;
}

/* Register [base, base + size) on every rail with the given access, in MRs of at most chunk
   bytes (0: one MR per rail). */
OMC__PRIVATE omc_result omc__rdma_register_as(omc_rdma* E, void* base, uint64_t size, int access, uint64_t chunk);

OMNICONN_API omc_result omc_rdma_register(omc_rdma* E, void* base, uint64_t size) {
    /* only with POOL protection do the pool's MRs take remote writes; otherwise a window or a
       region of the destination's own is the only way in */
    if (!E) return OMC_ERR_INVALID_ARG;
    return omc__rdma_register_as(E, base, size, IBV_ACCESS_LOCAL_WRITE | (E->protect == OMC_RDMA_PROTECT_WINDOWS ? IBV_ACCESS_MW_BIND : 0) |
                                 (E->protect == OMC_RDMA_PROTECT_POOL ? IBV_ACCESS_REMOTE_WRITE : 0), E->mr_chunk);
}

/* Keep a registered region in the engine's table (growing it) and count its pinned bytes. */
OMC__PRIVATE omc_result omc__rdma_region_add(omc_rdma* E, const omc__rdma_region* g) {
    pthread_mutex_lock(&E->mu);
    if (E->nregions == E->cap_regions) {
        uint32_t ncap = E->cap_regions ? E->cap_regions * 2 : 4;
        omc__rdma_region* nr = (omc__rdma_region*)omc__malloc(&E->hooks, sizeof(omc__rdma_region) * ncap);
        if (!nr) {
            pthread_mutex_unlock(&E->mu);
            return OMC_ERR_NO_MEMORY;
        }
        if (E->nregions) memcpy(nr, E->regions, sizeof(omc__rdma_region) * E->nregions);
        omc__free(&E->hooks, E->regions);
        E->regions = nr;
        E->cap_regions = ncap;
    }
    E->regions[E->nregions++] = *g;
    E->pinned += g->size * E->nrails;
    pthread_mutex_unlock(&E->mu);
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__rdma_register_as(omc_rdma* E, void* base, uint64_t size, int access, uint64_t chunk) {
    omc__rdma_region g;
    uint64_t pinned = 0, limit = omc__rdma_memlock_limit();
    int cap = 0;
    uint32_t i;
    int overlap = 0;
    char why[600];
    omc_result r;
    if (!E || !base || size == 0 || (uintptr_t)base > UINTPTR_MAX - size) return OMC_ERR_INVALID_ARG;
    omc__rdma_pin_state(&pinned, &cap);
    pthread_mutex_lock(&E->mu);
    pinned = omc__max(pinned, E->pinned);
    for (i = 0; i < E->nregions; i++) {
        omc__rdma_region* o = &E->regions[i];
        if ((uint8_t*)base < o->base + o->size && o->base < (uint8_t*)base + size) overlap = 1;
    }
    pthread_mutex_unlock(&E->mu);
    if (overlap) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "[%p, +%llu) overlaps a region already registered", base, (unsigned long long)size);
        return OMC_ERR_EXISTS;
    }
    /* check first: the kernel's answer would only be ENOMEM, and this is the error users hit most.
       Every rail registers the region in its own PD: each registration pins (and counts) again */
    r = omc__rdma_memlock_check(size * E->nrails, pinned, limit, cap, why, sizeof(why));
    if (r != OMC_OK) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "%s", why);
        return r;
    }
    memset(&g, 0, sizeof(g));
    g.base = (uint8_t*)base;
    g.size = size;
    g.chunk = chunk ? chunk : size;
    g.count = (uint32_t)((size + g.chunk - 1) / g.chunk);
    g.mr = (struct ibv_mr**)omc__calloc(&E->hooks, sizeof(struct ibv_mr*) * g.count * E->nrails);
    if (!g.mr) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < g.count * E->nrails; i++) {
        uint64_t off = (uint64_t)(i % g.count) * g.chunk, len = omc__min(g.chunk, size - off);
        g.mr[i] = omc__ibv_reg_mr(E->rail[i / g.count].pd, g.base + off, (size_t)len, access);
        if (!g.mr[i]) {
            int e = errno;
            r = (e == ENOMEM || e == EAGAIN || e == EPERM) &&
                omc__rdma_memlock_check(size * E->nrails, pinned, limit, 0, why, sizeof(why)) != OMC_OK
                    ? OMC_ERR_MEMLOCK : (e == ENOMEM ? OMC_ERR_NO_MEMORY : OMC_ERR_SYSTEM);
            if (r == OMC_ERR_MEMLOCK) OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_reg_mr: %s; %s", strerror(e), why);
            else OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_reg_mr of [%p, +%llu) (part %u of %u, rail %u %s) failed: %s", (void*)(g.base + off),
                               (unsigned long long)len, i % g.count + 1, g.count, i / g.count, E->rail[i / g.count].device, strerror(e));
            omc__rdma_region_drop(E, &g);
            return r;
        }
    }
    if (omc__rdma_region_add(E, &g) != OMC_OK) {
        omc__rdma_region_drop(E, &g);
        return OMC_ERR_NO_MEMORY;
    }
    OMC__RDMA_LOG(E, OMC_LOG_INFO, "registered [%p, +%llu) as %u memory region%s on each of %u rail%s (%s)", base, (unsigned long long)size,
                  g.count, g.count == 1 ? "" : "s", E->nrails, E->nrails == 1 ? "" : "s", omc__rdma_protection_name(E->protect));
    return OMC_OK;
}

#if OMC__HAS_CUDA
/* GPU memory: CUDA exports the range as a dma-buf (cuMemGetHandleForAddressRange, CUDA 11.7+ and
   a driver with dma-buf support), each rail's PD registers it with ibv_reg_dmabuf_mr (rdma-core
   34+, a kernel with dma-buf MRs); the MR's iova is the device address, so peers address it as
   they address host ranges. libcuda is opened at run time (the CUDA driver API is not linked). */
typedef CUresult (*omc__cu_get_handle_fn)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);

OMC__PRIVATE omc_result omc__rdma_dmabuf_fd(omc_rdma* E, void* base, uint64_t size, int* fd) {
    static omc__cu_get_handle_fn get_handle;
    CUresult cr;
    if (!get_handle) {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        void* sym = lib ? dlsym(lib, "cuMemGetHandleForAddressRange") : NULL;
        if (!sym) {
            OMC__RDMA_LOG(E, OMC_LOG_ERROR, "device memory: libcuda.so.1 with cuMemGetHandleForAddressRange is needed for dma-buf "
                          "registration (a CUDA 11.7+ driver): %s", lib ? "symbol missing" : "cannot load libcuda.so.1");
            return OMC_ERR_UNAVAILABLE;
        }
        memcpy(&get_handle, &sym, sizeof(sym));
    }
    *fd = -1;
    cr = get_handle(fd, (CUdeviceptr)(uintptr_t)base, (size_t)size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (cr != CUDA_SUCCESS || *fd < 0) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "device memory [%p, +%llu): cuMemGetHandleForAddressRange gave CUresult %d (the range must be "
                      "device memory from cuMemAlloc/cudaMalloc, aligned to the host page size; the driver must support dma-buf)",
                      base, (unsigned long long)size, (int)cr);
        return OMC_ERR_UNAVAILABLE;
    }
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__rdma_register_dmabuf(omc_rdma* E, void* base, uint64_t size, int access) {
    omc__rdma_region g;
    uint32_t i;
    int fd = -1;
    omc_result r;
    if (!omc__ibv.reg_dmabuf_mr) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "device memory: this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 or later is needed)");
        return OMC_ERR_UNAVAILABLE;
    }
    if ((r = omc__rdma_dmabuf_fd(E, base, size, &fd)) != OMC_OK) return r;
    memset(&g, 0, sizeof(g));
    g.base = (uint8_t*)base;
    g.size = size;
    g.chunk = size;
    g.count = 1;
    g.mr = (struct ibv_mr**)omc__calloc(&E->hooks, sizeof(struct ibv_mr*) * E->nrails);
    r = g.mr ? OMC_OK : OMC_ERR_NO_MEMORY;
    for (i = 0; r == OMC_OK && i < E->nrails; i++) {
        g.mr[i] = omc__ibv.reg_dmabuf_mr(E->rail[i].pd, 0, (size_t)size, (uint64_t)(uintptr_t)base, fd, access);
        if (!g.mr[i]) {
            OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_reg_dmabuf_mr of device memory [%p, +%llu) on rail %u (%s) failed: %s (a kernel and "
                          "adapter driver with dma-buf MRs are needed)", base, (unsigned long long)size, i, E->rail[i].device, strerror(errno));
            r = OMC_ERR_RDMA_DEVICE;
        }
    }
    close(fd);                  /* the MRs hold the dma-buf */
    if (r == OMC_OK) r = omc__rdma_region_add(E, &g);
    if (r != OMC_OK) { if (g.mr) omc__rdma_region_drop(E, &g); return r; }
    OMC__RDMA_LOG(E, OMC_LOG_INFO, "registered device memory [%p, +%llu) as a dma-buf on each of %u rail%s", base, (unsigned long long)size,
                  E->nrails, E->nrails == 1 ? "" : "s");
    return OMC_OK;
}
#endif

OMNICONN_API omc_result omc_rdma_deregister(omc_rdma* E, void* base) {
    omc__rdma_region g;
    uint32_t i;
    if (!E || !base) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&E->mu);
    for (i = 0; i < E->nregions; i++) if (E->regions[i].base == (uint8_t*)base) break;
    if (i == E->nregions) { pthread_mutex_unlock(&E->mu); return OMC_ERR_NOT_FOUND; }
    g = E->regions[i];
    E->regions[i] = E->regions[--E->nregions];
    E->pinned -= g.size * E->nrails;
    pthread_mutex_unlock(&E->mu);
    omc__rdma_region_drop(E, &g);
    return OMC_OK;
}

/* The region that holds [p, p + len) entirely, or NULL (caller holds mu). */
OMC__PRIVATE omc__rdma_region* omc__rdma_find(omc_rdma* E, const void* p, uint64_t len) {
    const uint8_t* a = (const uint8_t*)p;
    uint32_t i;
    for (i = 0; i < E->nregions; i++) {
        omc__rdma_region* g = &E->regions[i];
        if (a >= g->base && (uint64_t)(a - g->base) <= g->size && len <= g->size - (uint64_t)(a - g->base)) return g;
    }
    return NULL;
}

static omc_result omc__rdma_attach(omc_pool* pool, void* base, uint64_t size, void* user) {
    omc_rdma* E = (omc_rdma*)user;
    if (omc_pool_memory(pool) == OMC_MEMORY_CUDA) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "CUDA pools cannot be registered yet (GPUDirect RDMA is a non-goal of 0.1)");
        return OMC_ERR_UNAVAILABLE;
    }
    return omc_rdma_register(E, base, size);
}

static void omc__rdma_detach(omc_pool* pool, void* base, uint64_t size, void* user) {
    (void)pool; (void)size;
    omc_rdma_deregister((omc_rdma*)user, base);
}

OMNICONN_API omc_region_hooks omc_rdma_region_hooks(omc_rdma* E) {
    omc_region_hooks h;
    memset(&h, 0, sizeof(h));
    if (!E) return h;
    h.attach = omc__rdma_attach;
    h.detach = omc__rdma_detach;
    h.user_data = E;
    return h;
}

/* ============================================================================================== */
/* [SECTION] Implementation: queue pairs (RESET -> INIT -> RTR -> RTS)                            */
/* ============================================================================================== */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
OMC__PRIVATE void omc__rdma_cat(char* buf, size_t n, const char* fmt, ...) {
    size_t used = strlen(buf);
    va_list ap;
    if (used + 1 >= n) return;
    va_start(ap, fmt);
    vsnprintf(buf + used, n - used, fmt, ap);
    va_end(ap);
}

/* ibv_modify_qp, and on failure one log line with every attribute the mask set and a hint:
   "Failed to modify QP to RTR" alone is what users cannot act on. */
OMC__PRIVATE omc_result omc__rdma_modify(omc_rdma* E, omc__rdma_qp* q, struct ibv_qp_attr* a, int mask, const char* state,
                                         const char* hint) {
    char msg[800], gid[INET6_ADDRSTRLEN];
    int rc = omc__ibv_modify_qp(q->qp, a, mask);
    if (rc == 0) return OMC_OK;
    msg[0] = '\0';
    omc__rdma_cat(msg, sizeof(msg), "Failed to modify QP %u to %s: %s (%d). Attributes:", q->qpn, state, strerror(rc), rc);
    if (mask & IBV_QP_PKEY_INDEX) omc__rdma_cat(msg, sizeof(msg), " pkey_index=%u", a->pkey_index);
    if (mask & IBV_QP_PORT) omc__rdma_cat(msg, sizeof(msg), " port_num=%u", a->port_num);
    if (mask & IBV_QP_ACCESS_FLAGS) omc__rdma_cat(msg, sizeof(msg), " qp_access_flags=0x%x", a->qp_access_flags);
    if (mask & IBV_QP_PATH_MTU) omc__rdma_cat(msg, sizeof(msg), " path_mtu=%u", omc_rdma_mtu_bytes(a->path_mtu));
    if (mask & IBV_QP_DEST_QPN) omc__rdma_cat(msg, sizeof(msg), " dest_qp_num=%u", a->dest_qp_num);
    if (mask & IBV_QP_RQ_PSN) omc__rdma_cat(msg, sizeof(msg), " rq_psn=%u", a->rq_psn);
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) omc__rdma_cat(msg, sizeof(msg), " max_dest_rd_atomic=%u", a->max_dest_rd_atomic);
    if (mask & IBV_QP_MIN_RNR_TIMER) omc__rdma_cat(msg, sizeof(msg), " min_rnr_timer=%u", a->min_rnr_timer);
    if (mask & IBV_QP_AV) {
        omc_rdma_gid_to_text(a->ah_attr.grh.dgid.raw, gid, sizeof(gid));
        omc__rdma_cat(msg, sizeof(msg), " ah_attr={dlid=%u sl=%u src_path_bits=%u port_num=%u is_global=%u", a->ah_attr.dlid,
                      a->ah_attr.sl, a->ah_attr.src_path_bits, a->ah_attr.port_num, a->ah_attr.is_global);
        if (a->ah_attr.is_global)
            omc__rdma_cat(msg, sizeof(msg), " grh={dgid=%s sgid_index=%u hop_limit=%u traffic_class=%u flow_label=%u}", gid,
                          a->ah_attr.grh.sgid_index, a->ah_attr.grh.hop_limit, a->ah_attr.grh.traffic_class, a->ah_attr.grh.flow_label);
        omc__rdma_cat(msg, sizeof(msg), "}");
    }
    if (mask & IBV_QP_SQ_PSN) omc__rdma_cat(msg, sizeof(msg), " sq_psn=%u", a->sq_psn);
    if (mask & IBV_QP_TIMEOUT) omc__rdma_cat(msg, sizeof(msg), " timeout=%u", a->timeout);
    if (mask & IBV_QP_RETRY_CNT) omc__rdma_cat(msg, sizeof(msg), " retry_cnt=%u", a->retry_cnt);
    if (mask & IBV_QP_RNR_RETRY) omc__rdma_cat(msg, sizeof(msg), " rnr_retry=%u", a->rnr_retry);
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) omc__rdma_cat(msg, sizeof(msg), " max_rd_atomic=%u", a->max_rd_atomic);
    OMC__RDMA_LOG(E, OMC_LOG_ERROR, "%s. Hint: %s", msg, hint);
    return OMC_ERR_RDMA_QP;
}

/* RESET -> INIT: which port and partition, and what a peer may do through this QP. */
OMC__PRIVATE omc_result omc__rdma_qp_to_init(omc_rdma* E, omc__rdma_qp* q) {
    struct ibv_qp_attr attr;
    int mask = 0;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    mask |= IBV_QP_STATE;
    attr.pkey_index = OMC__RDMA_PKEY_INDEX;
    mask |= IBV_QP_PKEY_INDEX;
    attr.port_num = E->rail[q->rail].port;
    mask |= IBV_QP_PORT;
    /* the peer writes into windows / MRs we gave it, and reads registered transfer-engine
       memory; what a key allows is decided by the MR or window, not by the QP */
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mask |= IBV_QP_ACCESS_FLAGS;
    return omc__rdma_modify(E, q, &attr, mask, "INIT", "check the port number and that the device has QPs left");
}

/* INIT -> RTR: everything about the peer (its QP, its first PSN, the path to it). */
OMC__PRIVATE omc_result omc__rdma_qp_to_rtr(omc_rdma* E, omc__rdma_qp* q, const omc_rdma_record_rail* peer, uint32_t mtu) {
    const omc__rdma_rail* R = &E->rail[q->rail];
    struct ibv_qp_attr attr;
    char hint[512], mine[INET6_ADDRSTRLEN], theirs[INET6_ADDRSTRLEN];
    int mask = 0;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    mask |= IBV_QP_STATE;
    attr.path_mtu = (enum ibv_mtu)mtu;
    mask |= IBV_QP_PATH_MTU;
    attr.dest_qp_num = q->peer_qpn;
    mask |= IBV_QP_DEST_QPN;
    attr.rq_psn = q->peer_psn;
    mask |= IBV_QP_RQ_PSN;
    attr.max_dest_rd_atomic = R->rd_atomic;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC;
    attr.min_rnr_timer = OMC__RDMA_MIN_RNR_TIMER;
    mask |= IBV_QP_MIN_RNR_TIMER;
    /* the address vector: InfiniBand routes by LID; RoCE has no LIDs, every packet carries a
       global route header with both GIDs (and RoCE v2 puts it in a UDP/IP packet) */
    attr.ah_attr.dlid = peer->lid;
    attr.ah_attr.sl = R->service_level;
    attr.ah_attr.src_path_bits = 0;
    attr.ah_attr.port_num = R->port;
    if (R->link == OMC_RDMA_LINK_ETHERNET) {
        attr.ah_attr.is_global = 1;
        memcpy(attr.ah_attr.grh.dgid.raw, peer->gid, 16);
        attr.ah_attr.grh.sgid_index = (uint8_t)R->gid_index;
        attr.ah_attr.grh.hop_limit = OMC__RDMA_HOP_LIMIT;
        attr.ah_attr.grh.traffic_class = R->traffic_class;
        attr.ah_attr.grh.flow_label = 0;
    }
    mask |= IBV_QP_AV;
    omc_rdma_gid_to_text(R->gid, mine, sizeof(mine));
    omc_rdma_gid_to_text(peer->gid, theirs, sizeof(theirs));
    snprintf(hint, sizeof(hint), "check GID index/type: this side uses GID %u (%s, %s) on %s port %u, the peer GID %u (%s, %s); "
             "both must be of the same type and reach each other (RoCE v2 needs an IP route), and path MTU %u must not exceed "
             "either port's active MTU (traffic class %u, service level %u). Pick another GID with desc.gid_index or another "
             "device with RDMA_DEVICE_NAME", R->gid_index, mine, omc__gid_type_name(R->gid_type), R->device, R->port,
             peer->gid_index, theirs, omc__gid_type_name((omc_rdma_gid_type)peer->gid_type), omc_rdma_mtu_bytes(mtu),
             R->traffic_class, R->service_level);
    return omc__rdma_modify(E, q, &attr, mask, "RTR", hint);
}

/* RTR -> RTS: our own first PSN and how long to wait for acknowledgements. */
OMC__PRIVATE omc_result omc__rdma_qp_to_rts(omc_rdma* E, omc__rdma_qp* q) {
    struct ibv_qp_attr attr;
    int mask = 0;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    mask |= IBV_QP_STATE;
    attr.sq_psn = q->psn;
    mask |= IBV_QP_SQ_PSN;
    attr.timeout = OMNICONN_RDMA_ACK_TIMEOUT;           /* 4.096 us * 2^timeout per attempt */
    mask |= IBV_QP_TIMEOUT;
    attr.retry_cnt = OMNICONN_RDMA_RETRY_COUNT;         /* then IBV_WC_RETRY_EXC_ERR: the peer is gone */
    mask |= IBV_QP_RETRY_CNT;
    attr.rnr_retry = OMC__RDMA_RNR_RETRY;
    mask |= IBV_QP_RNR_RETRY;
    attr.max_rd_atomic = E->rail[q->rail].rd_atomic;
    mask |= IBV_QP_MAX_QP_RD_ATOMIC;
    return omc__rdma_modify(E, q, &attr, mask, "RTS", "check the timeout and retry counts the device accepts");
}

/* Create QP `index` of a connection on its pair's rail and bring it to INIT. */
OMC__PRIVATE omc_result omc__rdma_qp_create(omc_rdma* E, omc_rdma_conn* c, uint32_t index) {
    omc__rdma_qp* q = &c->qps[index];
    omc__rdma_rail* R;
    struct ibv_qp_init_attr init;
    omc_result r;
    uint32_t i;
    q->conn = c;
    q->index = index;
    q->pair = index / c->qpp;
    q->rail = c->pair[q->pair].rail;
    R = &E->rail[q->rail];
    q->slots = (omc__rdma_slot*)omc__calloc(&E->hooks, sizeof(omc__rdma_slot) * E->queue_depth);
    if (!q->slots) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < E->queue_depth; i++) q->slots[i].slice = OMC__RDMA_NO_SLICE;
    memset(&init, 0, sizeof(init));
    init.qp_context = q;
    init.send_cq = R->cq;
    init.recv_cq = R->cq;
    init.cap.max_send_wr = E->queue_depth;
    init.cap.max_recv_wr = 1;           /* we never post receives; some providers refuse 0 */
    init.cap.max_send_sge = E->max_sge;
    init.cap.max_recv_sge = 1;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;                /* selective signalling: each request says */
    q->qp = omc__ibv_create_qp(R->pd, &init);
    if (!q->qp) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_create_qp (RC, %u send WRs, %u SGEs) on %s failed: %s", E->queue_depth, E->max_sge,
                      R->device, strerror(errno));
        return OMC_ERR_RDMA_QP;
    }
    q->qpn = q->qp->qp_num;
    /* a random first PSN: packets of an older QP that had this number are not taken as ours */
    q->psn = (uint32_t)omc__random_u64() & OMC__RDMA_24BIT;
    pthread_mutex_lock(&E->mu);
    do { q->id = ++E->next_qp_id; } while (q->id == 0);
    r = omc__smap_put(&E->qps, &E->hooks, (const char*)&q->id, sizeof(q->id), q);
    q->in_table = r == OMC_OK;
    pthread_mutex_unlock(&E->mu);
    if (r != OMC_OK) return r;
    return omc__rdma_qp_to_init(E, q);
}

/* ============================================================================================== */
/* [SECTION] Implementation: connections                                                          */
/* ============================================================================================== */

OMC__PRIVATE void omc__rdma_conn_free(omc_rdma_conn* c) {
    omc_rdma* E = c->eng;
    uint32_t i, j;
    pthread_mutex_lock(&E->mu);
    for (i = 0; i < c->nqp; i++) {      /* from now on completions of these QPs are stale */
        omc__rdma_qp* q = &c->qps[i];
        if (q->in_table) omc__smap_del(&E->qps, &E->hooks, (const char*)&q->id, sizeof(q->id));
        q->in_table = 0;
        E->outstanding -= q->head - q->tail;
    }
    E->live_qps -= c->nlive;
    if (c->counted) E->conns--;
    pthread_mutex_unlock(&E->mu);
    for (i = 0; i < c->nqp; i++) {
        omc__rdma_qp* q = &c->qps[i];
        for (j = 0; j < q->mw_free_count; j++) ibv_dealloc_mw(q->mw_free[j]);
        omc__free(&E->hooks, q->mw_free);
        if (q->qp && omc__ibv_destroy_qp(q->qp) != 0)
            OMC__RDMA_LOG(E, OMC_LOG_WARN, "ibv_destroy_qp(%u): %s", q->qpn, strerror(errno));
        omc__free(&E->hooks, q->slots);
    }
    omc__free(&E->hooks, c);
}

/* Drop a reference. The last one hands the connection to the progress thread, which destroys
   its QPs: destroying a QP can take milliseconds, and callers (a receiver closing a channel at
   its deadline) should not wait for it. Its QPs are in ERROR already, nothing moves through them. */
OMC__PRIVATE void omc__rdma_conn_unref(omc_rdma_conn* c) {
    omc_rdma* E = c->eng;
    uint64_t one = 1;
    int last;
    pthread_mutex_lock(&E->mu);
    last = --c->refs == 0;
    if (last) { c->next_dead = E->dead; E->dead = c; E->conns--; c->counted = 0; }
    pthread_mutex_unlock(&E->mu);
    if (last && write(E->wake_fd, &one, sizeof(one)) < 0) { /* the thread also wakes once a second */ }
}

/* Free the connections handed over by omc__rdma_conn_unref (not holding mu). */
OMC__PRIVATE void omc__rdma_bury(omc_rdma* E) {
    omc_rdma_conn* dead;
    pthread_mutex_lock(&E->mu);
    dead = E->dead;
    E->dead = NULL;
    pthread_mutex_unlock(&E->mu);
    while (dead) {
        omc_rdma_conn* next = dead->next_dead;
        omc__rdma_conn_free(dead);
        dead = next;
    }
}

/* A connection with npairs pairs of rails and qpp QPs on each, in INIT. rails[p]: our rail of
   pair p, or -1 for a pair we have no rail for (its QPs are not created: the acceptor's answer to
   a peer rail it cannot pair). The CQs must have room for every request the QPs can hold. */
OMC__PRIVATE omc_result omc__rdma_conn_new(omc_rdma* E, const int* rails, uint32_t npairs, uint32_t qpp, uint64_t conn_id,
                                           omc_rdma_conn** out) {
    omc_rdma_conn* c;
    omc_result r = OMC_OK;
    uint32_t i, live, nlive = 0;
    *out = NULL;
    if (npairs < 1 || npairs > OMC_RDMA_MAX_RAILS || qpp < 1 || npairs * qpp > OMC_RDMA_MAX_QPS) return OMC_ERR_INVALID_ARG;
    c = (omc_rdma_conn*)omc__calloc(&E->hooks, sizeof(omc_rdma_conn));
    if (!c) return OMC_ERR_NO_MEMORY;
    c->eng = E;
    c->refs = 1;
    c->nqp = npairs * qpp;
    c->npairs = npairs;
    c->qpp = qpp;
    c->conn_id = conn_id;
    for (i = 0; i < npairs; i++) {
        c->pair[i].rail = rails[i] >= 0 ? (uint32_t)rails[i] : OMC_RDMA_MAX_RAILS;
        if (rails[i] >= 0) nlive += qpp;
        else snprintf(c->pair[i].why, sizeof(c->pair[i].why), "no rail here pairs with the peer's rail %u", i);
    }
    pthread_mutex_lock(&E->mu);
    live = E->live_qps;
    if ((uint64_t)(live + nlive) * E->queue_depth > E->cq_depth) r = OMC_ERR_BUSY;
    else { E->live_qps += nlive; E->conns++; c->counted = 1; c->nlive = nlive; }
    pthread_mutex_unlock(&E->mu);
    if (r != OMC_OK) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "engine already has %u QPs; its CQ (%u entries) has room for %u QPs of depth %u: raise "
                      "OMNICONN_RDMA_CQ_DEPTH, lower queue_depth, or close connections", live, E->cq_depth,
                      E->cq_depth / E->queue_depth, E->queue_depth);
        omc__free(&E->hooks, c);
        return r;
    }
    for (i = 0; i < c->nqp && r == OMC_OK; i++)
        if (rails[i / qpp] >= 0) r = omc__rdma_qp_create(E, c, i);
    if (r != OMC_OK) { omc__rdma_conn_free(c); return r; }
    *out = c;
    return OMC_OK;
}

/* Can our rail and the peer's talk at all? Said before any QP transition fails obscurely. */
OMC__PRIVATE omc_result omc__rdma_check_peer(omc_rdma* E, const omc__rdma_rail* R, const omc_rdma_record_rail* peer) {
    char mine[INET6_ADDRSTRLEN], theirs[INET6_ADDRSTRLEN];
    if (peer->link != R->link) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "link layers differ: this port (%s port %u) is %s, the peer's is %s", R->device, R->port,
                      R->link == OMC_RDMA_LINK_INFINIBAND ? "InfiniBand" : "Ethernet/RoCE",
                      peer->link == OMC_RDMA_LINK_INFINIBAND ? "InfiniBand" : "Ethernet/RoCE");
        return OMC_ERR_RDMA_DEVICE;
    }
    if (R->link != OMC_RDMA_LINK_ETHERNET) return OMC_OK;
    omc_rdma_gid_to_text(R->gid, mine, sizeof(mine));
    omc_rdma_gid_to_text(peer->gid, theirs, sizeof(theirs));
    if (omc__gid_is_zero(peer->gid)) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "the peer's record has no GID: RoCE cannot address it");
        return OMC_ERR_MALFORMED;
    }
    if ((R->gid_type == OMC_RDMA_GID_ROCE_V2) != (peer->gid_type == OMC_RDMA_GID_ROCE_V2)) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "GID types differ: this side uses GID %u %s (%s), the peer GID %u %s (%s); both ends of a RoCE "
                      "connection must speak the same version: set desc.gid_index on one side", R->gid_index, mine,
                      omc__gid_type_name(R->gid_type), peer->gid_index, theirs, omc__gid_type_name((omc_rdma_gid_type)peer->gid_type));
        return OMC_ERR_RDMA_DEVICE;
    }
    if (omc__gid_is_link_local(R->gid) != omc__gid_is_link_local(peer->gid))
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "one end uses a link-local GID (%s here, %s there): they may not reach each other", mine, theirs);
    return OMC_OK;
}

/* The peer's rails as rail entries (a version-1 record is one rail, from its top fields). */
OMC__PRIVATE uint32_t omc__rdma_peer_rails(const omc_rdma_record* rec, omc_rdma_record_rail* out, uint32_t* qpp) {
    if (rec->rails >= 2) {
        memcpy(out, rec->rail, sizeof(rec->rail[0]) * rec->rails);
        *qpp = rec->qps_per_rail;
        return rec->rails;
    }
    memset(out, 0, sizeof(*out));
    out->port = rec->port;
    out->mtu = rec->mtu;
    out->link = rec->link;
    out->gid_index = rec->gid_index;
    out->gid_type = rec->gid_type;
    out->lid = rec->lid;
    memcpy(out->gid, rec->gid, 16);
    *qpp = rec->qp_count;
    return 1;
}

/* Pair the peer's rails with ours (caller holds nothing; reads rail state under mu): each peer
   rail gets one of our UP rails of the same link layer and GID type on the same subnet; if not
   one rail shares a subnet, the first compatible rails are paired (one pair: what a single
   rail always did). map[i] = our rail for peer rail i, or -1. Returns the number of pairs. */
OMC__PRIVATE uint32_t omc__rdma_pair_rails(omc_rdma* E, const omc_rdma_record_rail* peer, uint32_t n, int* map) {
    uint32_t i, j, pairs = 0, used = 0;
    pthread_mutex_lock(&E->mu);
    for (i = 0; i < n; i++) {
        map[i] = -1;
        if (!peer[i].port) continue;
        for (j = 0; j < E->nrails && map[i] < 0; j++) {
            const omc__rdma_rail* R = &E->rail[j];
            uint32_t bits = omc__min((uint32_t)R->prefix, peer[i].prefix ? (uint32_t)peer[i].prefix : (uint32_t)R->prefix);
            if ((used >> j & 1u) || !R->up || R->link != (omc_rdma_link)peer[i].link ||
                (R->gid_type == OMC_RDMA_GID_ROCE_V2) != (peer[i].gid_type == OMC_RDMA_GID_ROCE_V2) ||
                !omc__rdma_same_subnet(R->gid, peer[i].gid, bits))
                continue;
            map[i] = (int)j;
            used |= 1u << j;
            pairs++;
        }
    }
    for (i = 0; i < n && !pairs; i++) {
        if (!peer[i].port) continue;
        for (j = 0; j < E->nrails && !pairs; j++) {
            const omc__rdma_rail* R = &E->rail[j];
            if (!R->up || R->link != (omc_rdma_link)peer[i].link ||
                (R->link == OMC_RDMA_LINK_ETHERNET && (R->gid_type == OMC_RDMA_GID_ROCE_V2) != (peer[i].gid_type == OMC_RDMA_GID_ROCE_V2)))
                continue;
            map[i] = (int)j;
            pairs = 1;
        }
    }
    pthread_mutex_unlock(&E->mu);
    return pairs;
}

/* Bring every QP of every pair both sides have to RTR and RTS against the peer's record. A pair
   that cannot be connected stays down (logged); the connection needs one working pair. */
OMC__PRIVATE omc_result omc__rdma_conn_link(omc_rdma_conn* c, const omc_rdma_record* peer) {
    omc_rdma* E = c->eng;
    omc_rdma_record_rail pr[OMC_RDMA_MAX_RAILS];
    uint32_t mtu, i, p, pqpp = 0, up = 0, min_mtu = 0;
    uint32_t n = omc__rdma_peer_rails(peer, pr, &pqpp);
    omc_result r = OMC_OK, first = OMC_OK;
    if (n != c->npairs || pqpp != c->qpp) return OMC_ERR_PROTOCOL;
    for (p = 0; p < c->npairs; p++) {
        omc__rdma_pair* P = &c->pair[p];
        if (P->rail >= E->nrails) continue;                 /* we have no rail for it */
        if (!pr[p].port) {                                  /* the peer has none for ours */
            snprintf(P->why, sizeof(P->why), "the peer has no rail on the subnet of rail %u", P->rail);
            continue;
        }
        r = omc__rdma_check_peer(E, &E->rail[P->rail], &pr[p]);
        if (r == OMC_OK && omc_rdma_mtu_negotiate(E->rail[P->rail].port_attr.active_mtu, pr[p].mtu, &mtu) != OMC_OK) r = OMC_ERR_MALFORMED;
        for (i = p * c->qpp; i < (p + 1) * c->qpp && r == OMC_OK; i++) {
            omc__rdma_qp* q = &c->qps[i];
            q->peer_qpn = peer->qpn[i];
            q->peer_psn = peer->psn[i];
            r = omc__rdma_qp_to_rtr(E, q, &pr[p], mtu);
            if (r == OMC_OK) r = omc__rdma_qp_to_rts(E, q);
        }
        if (r != OMC_OK) {
            if (first == OMC_OK) first = r;
            snprintf(P->why, sizeof(P->why), "could not connect: %s (the log has the details)", omc_result_str(r));
            continue;
        }
        pthread_mutex_lock(&E->mu);
        P->up = 1;
        pthread_mutex_unlock(&E->mu);
        up++;
        if (!min_mtu || mtu < min_mtu) min_mtu = mtu;
    }
    if (!up) return first != OMC_OK ? first : OMC_ERR_RDMA_DEVICE;
    pthread_mutex_lock(&E->mu);
    c->connected = 1;
    c->peer_incarnation = peer->incarnation;
    c->path_mtu = omc_rdma_mtu_bytes(min_mtu);
    c->peer_flags = peer->flags;
    pthread_mutex_unlock(&E->mu);
    OMC__RDMA_LOG(E, c->quiet ? OMC_LOG_DEBUG : OMC_LOG_INFO, "connection %016llx to peer incarnation %016llx: %u of %u rail%s, %u QPs "
                  "each, path MTU %u, peer protects with %s", (unsigned long long)c->conn_id, (unsigned long long)peer->incarnation, up,
                  c->npairs, c->npairs == 1 ? "" : "s", c->qpp, c->path_mtu,
                  (peer->flags & OMC_RDMA_FLAG_MEMORY_WINDOWS) ? "memory windows" : (peer->flags & OMC_RDMA_FLAG_REGIONS) ? "regions" : "its pool's rkey");
    return OMC_OK;
}

/* A rail whose port came back may find its address's GID at another index (the kernel removes
   and re-adds the GIDs of an interface that goes down and up): look it up again, by value. */
OMC__PRIVATE void omc__rdma_refresh_gids(omc_rdma* E) {
    uint32_t k;
    for (k = 0; k < E->nrails; k++) {
        omc__rdma_rail* R = &E->rail[k];
        struct ibv_port_attr pa;
        omc_rdma_gid_entry* gids;
        uint32_t n, i;
        int again;
        pthread_mutex_lock(&E->mu);
        again = R->regid;
        R->regid = 0;
        pthread_mutex_unlock(&E->mu);
        if (!again || omc__ibv_query_port_attr(R->context, R->port, &pa) != 0) continue;
        gids = (omc_rdma_gid_entry*)omc__calloc(&E->hooks, OMC__RDMA_MAX_GIDS * sizeof(*gids));
        if (!gids) continue;
        n = omc__rdma_read_gids(E, R->context, R->device, R->port, &pa, gids, OMC__RDMA_MAX_GIDS);
        for (i = 0; i < n; i++) {
            if (memcmp(gids[i].gid, R->gid, 16) != 0 || gids[i].type != R->gid_type) continue;
            pthread_mutex_lock(&E->mu);
            if (R->gid_index != gids[i].index)
                OMC__RDMA_LOG(E, OMC_LOG_INFO, "rail %u (%s): its GID moved from index %u to %u", k, R->device, R->gid_index, gids[i].index);
            R->gid_index = gids[i].index;
            pthread_mutex_unlock(&E->mu);
            break;
        }
        if (i == n) {
            OMC__RDMA_LOG(E, OMC_LOG_WARN, "rail %u (%s): its GID is not in the table (yet): its address is gone?", k, R->device);
            pthread_mutex_lock(&E->mu);
            R->regid = 1;               /* look again next time */
            pthread_mutex_unlock(&E->mu);
        }
        omc__free(&E->hooks, gids);
    }
}

OMNICONN_API omc_result omc_rdma_conn_create(omc_rdma* E, omc_rdma_conn** out) {
    int rails[OMC_RDMA_MAX_RAILS];
    uint32_t k, n = 0;
    uint64_t id;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (!E) return OMC_ERR_INVALID_ARG;
    omc__rdma_refresh_gids(E);
    pthread_mutex_lock(&E->mu);
    for (k = 0; k < E->nrails; k++) if (E->rail[k].up) rails[n++] = (int)k;
    pthread_mutex_unlock(&E->mu);
    if (!n) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "no rail is up (every port went down): no connection can be made");
        return OMC_ERR_RDMA_DEVICE;
    }
    do { id = omc__random_u64(); } while (id == 0);
    return omc__rdma_conn_new(E, rails, n, omc__min(E->qps_per_peer, OMC_RDMA_MAX_QPS / n), id, out);
}

OMNICONN_API omc_result omc_rdma_conn_accept(omc_rdma* E, const void* peer_record, size_t len, omc_rdma_conn** out) {
    omc_rdma_record peer;
    omc_rdma_record_rail pr[OMC_RDMA_MAX_RAILS];
    int map[OMC_RDMA_MAX_RAILS];
    omc_rdma_conn* c;
    uint32_t n, qpp = 0;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (!E) return OMC_ERR_INVALID_ARG;
    r = omc_rdma_record_decode(peer_record, len, &peer);
    if (r != OMC_OK) {
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "rejected a peer's endpoint record (%zu bytes): %s", len, omc_result_str(r));
        return r;
    }
    if (peer.conn_id == 0) return OMC_ERR_MALFORMED;
    omc__rdma_refresh_gids(E);
    n = omc__rdma_peer_rails(&peer, pr, &qpp);
    if (qpp > E->qps_per_peer) {     /* the peer does not choose how many QPs we create */
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "refused a peer's endpoint record asking for %u QPs per rail: this engine gives a peer at most %u "
                      "(qps_per_peer)", qpp, E->qps_per_peer);
        return OMC_ERR_RDMA_QP;
    }
    if (!omc__rdma_pair_rails(E, pr, n, map)) {
        char theirs[INET6_ADDRSTRLEN];
        omc_rdma_gid_to_text(peer.gid, theirs, sizeof(theirs));
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "no rail of this engine can pair with the peer's (%u rail%s, first GID %s): link layer or GID "
                      "type differ, or every rail is down", n, n == 1 ? "" : "s", theirs);
        return OMC_ERR_RDMA_DEVICE;
    }
    if (n == 1) {
        r = omc__rdma_check_peer(E, &E->rail[map[0]], &pr[0]);
        if (r != OMC_OK) return r;
    }
    r = omc__rdma_conn_new(E, map, n, qpp, peer.conn_id, &c);
    if (r != OMC_OK) return r;
    r = omc__rdma_conn_link(c, &peer);
    if (r != OMC_OK) { omc__rdma_conn_unref(c); return r; }
    *out = c;
    return OMC_OK;
}

OMNICONN_API omc_result omc_rdma_conn_connect(omc_rdma_conn* c, const void* peer_record, size_t len) {
    omc_rdma_record peer;
    omc_rdma* E;
    omc_result r;
    int busy;
    if (!c) return OMC_ERR_INVALID_ARG;
    E = c->eng;
    r = omc_rdma_record_decode(peer_record, len, &peer);
    if (r != OMC_OK) {
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "rejected a peer's endpoint record (%zu bytes): %s", len, omc_result_str(r));
        return r;
    }
    if (peer.qp_count != c->nqp || peer.conn_id != c->conn_id || (peer.rails >= 2 ? peer.rails : 1) != c->npairs) {
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "the peer's record answers another connection (id %016llx, %u QPs; expected %016llx, %u QPs)",
                      (unsigned long long)peer.conn_id, peer.qp_count, (unsigned long long)c->conn_id, c->nqp);
        return OMC_ERR_PROTOCOL;
    }
    pthread_mutex_lock(&E->mu);
    busy = c->connected || c->linking || c->closed;
    c->linking = 1;
    pthread_mutex_unlock(&E->mu);
    if (busy) return OMC_ERR_INVALID_ARG;
    return omc__rdma_conn_link(c, &peer);
}

/* The record of one side: version 1 for a single pair (what every peer understands), version 2
   with every pair's rail otherwise. */
OMNICONN_API omc_result omc_rdma_conn_record(omc_rdma_conn* c, void* out, size_t cap, size_t* out_len) {
    omc_rdma_record rec;
    omc_rdma* E;
    uint32_t i, p;
    if (out_len) *out_len = 0;
    if (!c) return OMC_ERR_INVALID_ARG;
    E = c->eng;
    memset(&rec, 0, sizeof(rec));
    rec.qp_count = c->nqp;
    rec.flags = omc__rdma_flags(E);
    rec.incarnation = omc_incarnation();
    rec.conn_id = c->conn_id;
    for (p = 0; p < c->npairs; p++) {
        omc_rdma_record_rail* rr = &rec.rail[p];
        const omc__rdma_rail* R;
        if (c->pair[p].rail >= E->nrails) continue;        /* unpaired: all zero */
        R = &E->rail[c->pair[p].rail];
        rr->port = R->port;
        rr->mtu = (uint8_t)R->port_attr.active_mtu;
        rr->link = (uint8_t)R->link;
        rr->gid_index = (uint8_t)omc__min(R->gid_index, 255u);     /* informational: logs and hints */
        rr->gid_type = (uint8_t)R->gid_type;
        rr->prefix = R->prefix;
        rr->lid = R->port_attr.lid;
        memcpy(rr->gid, R->gid, 16);
    }
    for (i = 0; i < c->nqp; i++) { rec.qpn[i] = c->qps[i].qpn; rec.psn[i] = c->qps[i].psn; }
    if (c->npairs >= 2) {
        rec.rails = c->npairs;
        rec.qps_per_rail = c->qpp;
    } else {
        rec.port = rec.rail[0].port;
        rec.mtu = rec.rail[0].mtu;
        rec.link = rec.rail[0].link;
        rec.gid_index = rec.rail[0].gid_index;
        rec.gid_type = rec.rail[0].gid_type;
        rec.lid = rec.rail[0].lid;
        memcpy(rec.gid, rec.rail[0].gid, 16);
    }
    return omc_rdma_record_encode(&rec, out, cap, out_len);
}

OMC__PRIVATE uint64_t omc__rdma_conn_id(const omc_rdma_conn* c) { return c->conn_id; }
OMC__PRIVATE uint32_t omc__rdma_conn_pairs(const omc_rdma_conn* c) { return c->npairs; }

OMNICONN_API int omc_rdma_conn_ok(omc_rdma_conn* c) {
    int ok;
    if (!c) return 0;
    pthread_mutex_lock(&c->eng->mu);
    ok = c->connected && !c->broken && !c->closed;
    pthread_mutex_unlock(&c->eng->mu);
    return ok;
}

OMNICONN_API omc_result omc_rdma_conn_query(omc_rdma_conn* c, omc_rdma_conn_info* o) {
    uint32_t i;
    if (!o) return OMC_ERR_INVALID_ARG;
    memset(o, 0, sizeof(*o));
    if (!c) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&c->eng->mu);
    o->conn_id = c->conn_id;
    o->peer_incarnation = c->peer_incarnation;
    o->qp_count = c->nqp;
    o->path_mtu = c->path_mtu;
    o->connected = c->connected;
    o->broken = c->broken || c->closed;
    o->peer_flags = c->peer_flags;
    o->error = c->error;
    snprintf(o->error_text, sizeof(o->error_text), "%s", c->error_text);
    for (i = 0; i < c->nqp; i++) { o->qpn[i] = c->qps[i].qpn; o->peer_qpn[i] = c->qps[i].peer_qpn; }
    o->rails = c->npairs;
    for (i = 0; i < c->npairs; i++) {
        o->rails_up += c->pair[i].up != 0;
        o->rail[i] = c->pair[i].rail;
    }
    pthread_mutex_unlock(&c->eng->mu);
    return OMC_OK;
}

OMNICONN_API void omc_rdma_conn_destroy(omc_rdma_conn* c) {
    omc_rdma* E;
    int was;
    if (!c) return;
    E = c->eng;
    pthread_mutex_lock(&E->mu);
    was = c->closed;
    c->closed = 1;
    if (!was) omc__rdma_conn_break_locked(c, OMC_ERR_CLOSED, "connection closed");
    pthread_mutex_unlock(&E->mu);
    if (!was) omc__rdma_conn_unref(c);
}

/* ============================================================================================== */
/* [SECTION] Implementation: operations and posting                                               */
/* ============================================================================================== */

OMC__PRIVATE omc_rdma_op* omc__rdma_op_new_locked(omc_rdma_conn* c, int kind) {
    omc_rdma_op* op = (omc_rdma_op*)omc__calloc(&c->eng->hooks, sizeof(omc_rdma_op));
    if (!op) return NULL;
    op->conn = c;
    op->kind = kind;
    c->refs++;
    return op;
}

OMC__PRIVATE void omc__rdma_op_free(omc_rdma_op* op) {
    omc_rdma_conn* c = op->conn;
    if (op->kind != OMC__OP_XFER || op->abandoned) omc__free(&c->eng->hooks, op->slices);
    omc__free(&c->eng->hooks, op->pieces);
    omc__free(&c->eng->hooks, op->target);
    omc__free(&c->eng->hooks, op);
    omc__rdma_conn_unref(c);
}

/* Why a connection cannot take new work, or OMC_OK (caller holds mu). */
OMC__PRIVATE omc_result omc__rdma_conn_usable(omc_rdma_conn* c) {
    if (c->closed) return OMC_ERR_CLOSED;
    if (!c->connected || c->broken) return OMC_ERR_RDMA_QP;
    return OMC_OK;
}

/* Wait (mu held) until q has a free send slot, the connection (or q's pair) breaks or the
   deadline passes. */
OMC__PRIVATE omc_result omc__rdma_wait_slot(omc_rdma* E, omc__rdma_qp* q, omc_time_ns deadline) {
    for (;;) {
        omc_result r = omc__rdma_conn_usable(q->conn);
        if (r != OMC_OK) return r;
        if (!q->conn->pair[q->pair].up || !q->qp) return OMC_ERR_RDMA_QP;
        if (q->head - q->tail < E->queue_depth) return OMC_OK;
        if (omc__cond_wait_until(&E->cv, &E->mu, deadline) == ETIMEDOUT && q->head - q->tail >= E->queue_depth)
            return OMC_ERR_TIMEOUT;
    }
}

/* Post one request of op on q (mu held, a slot is free). Signalled: op's last request on this
   QP (last), every signal_every-th, and the one that fills the ring, so a full ring drains. */
OMC__PRIVATE omc_result omc__rdma_post(omc_rdma* E, omc__rdma_qp* q, struct ibv_send_wr* wr, omc_rdma_op* op, int last, uint32_t slice) {
    struct ibv_send_wr* bad = NULL;
    int signal = last || q->unsignalled + 1 >= E->signal_every || q->head - q->tail + 1 >= E->queue_depth;
    int rc;
    wr->next = NULL;
    wr->wr_id = ((uint64_t)q->id << 32) | (uint32_t)q->head;
    wr->send_flags = signal ? IBV_SEND_SIGNALED : 0;
    rc = ibv_post_send(q->qp, wr, &bad);
    if (rc != 0) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_post_send on QP %u (%s): %s", q->qpn, omc__rdma_op_name(op->kind), strerror(rc));
        return OMC_ERR_RDMA_QP;
    }
    q->slots[q->head % E->queue_depth].op = op;     /* the progress thread needs mu to look */
    q->slots[q->head % E->queue_depth].slice = slice;
    q->head++;
    op->pending++;
    E->outstanding++;
    E->n_wrs++;
    if (signal) { q->unsignalled = 0; E->n_signalled++; }
    else q->unsignalled++;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__rdma_post_slices(omc_rdma_conn* c, omc_rdma_op* op, omc_time_ns deadline);

/* Wait for an operation. give_up: at the deadline break the connection and wait for the flush
   (op_wait); otherwise return OMC_ERR_BUSY and leave the operation running (op_test). Slices of
   a write whose pair of rails failed are written again on the pairs left (the same bytes to the
   same place: an RDMA WRITE is idempotent); the write is done only when every slice is. */
OMC__PRIVATE omc_result omc__rdma_op_wait(omc_rdma_op* op, omc_time_ns deadline, int give_up) {
    omc_rdma_conn* c;
    omc_rdma* E;
    omc_result r;
    uint32_t i;
    if (!op) return OMC_ERR_INVALID_ARG;
    c = op->conn;
    E = c->eng;
    pthread_mutex_lock(&E->mu);
    for (;;) {
        if (op->pending == 0 && op->reposts && op->status == OMC_OK) {
            if (omc__rdma_conn_usable(c) != OMC_OK) {
                op->status = c->error != OMC_OK ? c->error : OMC_ERR_RDMA_QP;
                break;
            }
            r = omc__rdma_post_slices(c, op, deadline);
            if (r != OMC_OK && op->status == OMC_OK) {
                op->status = omc__rdma_conn_usable(c) != OMC_OK && c->error != OMC_OK ? c->error : r;
                /* what was posted must not go on touching memory the caller gets back */
                if (op->pending) omc__rdma_conn_break_locked(c, op->status, "a write could not be posted again");
            }
            continue;
        }
        if (op->pending == 0) break;
        if (omc__cond_wait_until(&E->cv, &E->mu, deadline) == ETIMEDOUT && op->pending > 0) {
            if (!give_up) { pthread_mutex_unlock(&E->mu); return OMC_ERR_BUSY; }
            /* the adapter may still read or write our memory: break the connection (its QPs
               flush everything at once) and wait for the flush before giving the memory back */
            omc_time_ns grace = omc_deadline_after_ms(OMC__RDMA_FLUSH_GRACE_MS);
            char text[160];
            snprintf(text, sizeof(text), "%s not complete at its deadline", omc__rdma_op_name(op->kind));
            OMC__RDMA_LOG(E, c->quiet ? OMC_LOG_DEBUG : OMC_LOG_WARN, "connection %016llx: %s with %u request(s) outstanding at its "
                          "deadline: breaking the connection", (unsigned long long)c->conn_id, omc__rdma_op_name(op->kind), op->pending);
            if (op->status == OMC_OK) op->status = OMC_ERR_TIMEOUT;
            omc__rdma_conn_break_locked(c, OMC_ERR_TIMEOUT, text);
            while (op->pending > 0 && omc__cond_wait_until(&E->cv, &E->mu, grace) != ETIMEDOUT) {}
            if (op->pending > 0) {
                op->abandoned = 1;          /* the progress thread frees it when the flush comes */
                if (op->gave_up) *op->gave_up = 1;
                E->n_write_errors += op->kind == OMC__OP_WRITE;
                pthread_mutex_unlock(&E->mu);
                OMC__RDMA_LOG(E, OMC_LOG_ERROR, "connection %016llx: no flush within %d ms after moving its QPs to ERROR",
                              (unsigned long long)c->conn_id, OMC__RDMA_FLUSH_GRACE_MS);
                return OMC_ERR_TIMEOUT;
            }
        }
    }
    /* the contract: DONE only when every slice is in place */
    for (i = 0; op->status == OMC_OK && op->slices && i < op->nslices; i++)
        if (op->slices[i].state != OMC__SLICE_DONE) op->status = OMC_ERR_RDMA_COMPLETION;
    r = op->status;
    if (op->kind == OMC__OP_WRITE && !c->quiet) {
        if (r == OMC_OK) { E->n_writes++; E->n_write_bytes += op->bytes; }
        else E->n_write_errors++;
    }
    pthread_mutex_unlock(&E->mu);
    omc__rdma_op_free(op);
    return r;
}

OMNICONN_API omc_result omc_rdma_op_wait(omc_rdma_op* op, omc_time_ns deadline) { return omc__rdma_op_wait(op, deadline, 1); }
OMNICONN_API omc_result omc_rdma_op_test(omc_rdma_op* op, omc_time_ns deadline) { return omc__rdma_op_wait(op, deadline, 0); }

/* Is the peer still there on pair p? Post a zero-byte RDMA WRITE on the pair's first QP (each
   pair is probed, so a rail that died is noticed even while another works): a zero-byte
   operation needs no address and no key on the responder (IB spec C9-88), so it touches nothing,
   and it is acknowledged while the peer's QP lives. If the peer died, the retries run out
   (ACK_TIMEOUT x (RETRY_COUNT + 1), about 2 s by default) and the connection breaks. *out: the
   operation (test it with omc_rdma_op_test), or NULL if the pair is down or its send queue is
   full (no probe needed: requests are in flight). */
OMC__PRIVATE omc_result omc__rdma_probe_start(omc_rdma_conn* c, uint32_t p, omc_rdma_op** out) {
    omc_rdma* E = c->eng;
    omc__rdma_qp* q;
    omc_rdma_op* op;
    struct ibv_send_wr wr;
    omc_result r;
    *out = NULL;
    if (p >= c->npairs) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&E->mu);
    r = omc__rdma_conn_usable(c);
    q = &c->qps[p * c->qpp];
    if (r == OMC_OK && (!c->pair[p].up || q->head - q->tail >= E->queue_depth)) { pthread_mutex_unlock(&E->mu); return OMC_OK; }
    if (r == OMC_OK && !(op = omc__rdma_op_new_locked(c, OMC__OP_PROBE))) r = OMC_ERR_NO_MEMORY;
    if (r != OMC_OK) { pthread_mutex_unlock(&E->mu); return r; }
    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_RDMA_WRITE;      /* no sg_list, remote address 0, rkey 0: zero bytes */
    r = omc__rdma_post(E, q, &wr, op, 1, OMC__RDMA_NO_SLICE);
    pthread_mutex_unlock(&E->mu);
    if (r != OMC_OK) { omc__rdma_op_free(op); return r; }
    *out = op;
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: windows (the receiver's side)                                        */
/* ============================================================================================== */

/* Give a window its memory windows back to the QPs' free lists (mu held); 0 if out of memory. */
OMC__PRIVATE int omc__rdma_mw_keep(omc_rdma* E, omc__rdma_qp* q, struct ibv_mw* mw) {
    if (q->mw_free_count == q->mw_free_cap) {
        uint32_t ncap = q->mw_free_cap ? q->mw_free_cap * 2 : 8;
        struct ibv_mw** n = (struct ibv_mw**)omc__malloc(&E->hooks, sizeof(struct ibv_mw*) * ncap);
        if (!n) return 0;
        if (q->mw_free_count) memcpy(n, q->mw_free, sizeof(struct ibv_mw*) * q->mw_free_count);
        omc__free(&E->hooks, q->mw_free);
        q->mw_free = n;
        q->mw_free_cap = ncap;
    }
    q->mw_free[q->mw_free_count++] = mw;
    return 1;
}

/* OMC_RDMA_PROTECT_REGIONS: register the destination as a region of its own, with remote
   write, on the rail of every working pair; its rkeys are the only keys that reach it (the
   pool's MRs take no remote access). */
OMC__PRIVATE omc_result omc__rdma_region_for(omc_rdma* E, omc_rdma_window* w, uint32_t pairs_up) {
    omc_rdma_conn* c = w->conn;
    uint64_t pinned = 0, limit = omc__rdma_memlock_limit();
    char why[600];
    int cap = 0;
    uint32_t i, p;
    omc_result r;
    omc__rdma_pin_state(&pinned, &cap);
    pthread_mutex_lock(&E->mu);
    pinned = omc__max(pinned, E->pinned);
    pthread_mutex_unlock(&E->mu);
    r = omc__rdma_memlock_check(w->length * pairs_up, pinned, limit, cap, why, sizeof(why));   /* pinned once more per rail */
    if (r != OMC_OK) { OMC__RDMA_LOG(E, OMC_LOG_ERROR, "destination region: %s", why); return r; }
    for (p = 0; p < c->npairs; p++) {
        if (w->ext[0][p].qp == OMC_RDMA_NO_QP) continue;
        w->mr[p] = omc__ibv_reg_mr(E->rail[c->pair[p].rail].pd, (void*)(uintptr_t)w->addr, (size_t)w->length,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!w->mr[p]) {
            OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_reg_mr of the destination [%p, +%llu) on %s: %s", (void*)(uintptr_t)w->addr,
                          (unsigned long long)w->length, E->rail[c->pair[p].rail].device, strerror(errno));
            return errno == ENOMEM ? OMC_ERR_MEMLOCK : OMC_ERR_SYSTEM;
        }
        pthread_mutex_lock(&E->mu);
        w->pinned += w->length;
        E->pinned += w->length;
        pthread_mutex_unlock(&E->mu);
        for (i = 0; i < w->count; i++) w->ext[i][p].rkey = w->mr[p]->rkey;
    }
    return OMC_OK;
}

/* Test-only fault injection: a real stack rarely fails to revoke, so the tests set this to make
   revokes fail (a deregistration that fails, or an invalidation that fails). */
static int omc__rdma_fault_revoke;

/* Deregistering the regions revokes their rkeys at once. Returns 0 if that failed: then a key
   may still be valid, so its region is kept as it is (quarantined: never reused, deregistered
   again only when the engine is destroyed) and the caller must not reuse the range either. */
OMC__PRIVATE int omc__rdma_region_drop_for(omc_rdma* E, omc_rdma_window* w) {
    uint32_t p;
    int ok = 1;
    for (p = 0; p < OMC_RDMA_MAX_RAILS; p++) {
        int err;
        if (!w->mr[p]) continue;
        err = omc__load(&omc__rdma_fault_revoke) ? EIO : omc__ibv_dereg_mr(w->mr[p]) != 0 ? errno : 0;
        pthread_mutex_lock(&E->mu);
        if (err) {
            omc__rdma_quarantined* qn = (omc__rdma_quarantined*)omc__calloc(&E->hooks, sizeof(omc__rdma_quarantined));
            if (qn) { qn->mr = w->mr[p]; qn->next = E->quarantine; E->quarantine = qn; }  /* else: leaked, still never reused */
            E->n_quarantined++;
        } else {
            E->pinned -= w->length;
        }
        pthread_mutex_unlock(&E->mu);
        if (err) {
            ok = 0;
            OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_dereg_mr of the destination region [%p, +%llu) failed (%s): its key may still be valid, "
                          "the region is quarantined (kept registered, never reused)", (void*)(uintptr_t)w->addr,
                          (unsigned long long)w->length, strerror(err));
        }
        w->mr[p] = NULL;
    }
    return ok;
}

/* Free a window that was never handed out. Windows whose bind was posted are dropped (the
   connection is broken then: nothing can write through them); unbound ones go back for reuse. */
OMC__PRIVATE void omc__rdma_window_discard(omc_rdma_window* w, int posted) {
    omc_rdma_conn* c = w->conn;
    omc_rdma* E = c->eng;
    struct ibv_mw* drop[OMC_RDMA_MAX_EXTENTS * OMC_RDMA_MAX_RAILS];
    uint32_t i, p, ndrop = 0;
    pthread_mutex_lock(&E->mu);
    if (posted) omc__rdma_conn_break_locked(c, OMC_ERR_RDMA_QP, "could not bind a memory window");
    for (i = 0; i < w->count; i++)
        for (p = 0; p < c->npairs; p++) {
            if (!w->ext[i][p].mw) continue;
            if (posted || !omc__rdma_mw_keep(E, &c->qps[w->ext[i][p].qp], w->ext[i][p].mw)) drop[ndrop++] = w->ext[i][p].mw;
        }
    pthread_mutex_unlock(&E->mu);
    for (i = 0; i < ndrop; i++) ibv_dealloc_mw(drop[i]);
    omc__rdma_region_drop_for(E, w);
    omc__free(&E->hooks, w);
    omc__rdma_conn_unref(c);
}

OMNICONN_API omc_result omc_rdma_revoke(omc_rdma_window* w, omc_time_ns deadline) {
    omc_rdma_conn* c;
    omc_rdma* E;
    omc_rdma_op* op = NULL;
    struct ibv_mw* drop[OMC_RDMA_MAX_EXTENTS * OMC_RDMA_MAX_RAILS];
    uint32_t i, p, ndrop = 0;
    omc_result r = OMC_OK;
    int usable;
    if (!w) return OMC_ERR_INVALID_ARG;
    c = w->conn;
    E = c->eng;
    pthread_mutex_lock(&E->mu);
    usable = omc__rdma_conn_usable(c) == OMC_OK;
    if (usable) {
        for (i = 0; i < w->count && r == OMC_OK; i++)
            for (p = 0; p < c->npairs && r == OMC_OK; p++) {
                struct ibv_send_wr wr;
                omc__rdma_qp* q;
                if (!w->ext[i][p].mw) continue;
                q = &c->qps[w->ext[i][p].qp];
                if (!c->pair[p].up) continue;           /* its QPs are in ERROR: nothing gets through them */
                if (!op && !(op = omc__rdma_op_new_locked(c, OMC__OP_INVALIDATE))) { r = OMC_ERR_NO_MEMORY; break; }
                r = omc__rdma_wait_slot(E, q, deadline);
                if (r != OMC_OK) break;
                memset(&wr, 0, sizeof(wr));
                wr.opcode = IBV_WR_LOCAL_INV;           /* from now on this rkey is refused */
                wr.invalidate_rkey = w->ext[i][p].rkey;
                r = omc__rdma_post(E, q, &wr, op, 1, OMC__RDMA_NO_SLICE);
                E->n_invalidations += r == OMC_OK;
            }
        if (r != OMC_OK) omc__rdma_conn_break_locked(c, r, "could not invalidate a memory window");
    }
    pthread_mutex_unlock(&E->mu);
    if (op) {
        omc_result rr = omc_rdma_op_wait(op, deadline);
        if (r == OMC_OK) r = rr;
    }
    if (!usable && r == OMC_OK) r = OMC_ERR_RDMA_QP;
    if (omc__load(&omc__rdma_fault_revoke) && r == OMC_OK && !w->mr[0]) r = OMC_ERR_RDMA_COMPLETION;    /* injected (windows) */
    /* Now every window is invalidated (r == OMC_OK), or the connection is broken: its QPs are
       in ERROR and refuse all writes, and its windows go away with it. */
    pthread_mutex_lock(&E->mu);
    if (r != OMC_OK) omc__rdma_conn_break_locked(c, r, "a memory window could not be invalidated");
    for (i = 0; i < w->count; i++)
        for (p = 0; p < c->npairs; p++) {
            if (!w->ext[i][p].mw) continue;
            if (r != OMC_OK || !c->pair[p].up || !omc__rdma_mw_keep(E, &c->qps[w->ext[i][p].qp], w->ext[i][p].mw))
                drop[ndrop++] = w->ext[i][p].mw;
        }
    pthread_mutex_unlock(&E->mu);
    for (i = 0; i < ndrop; i++) ibv_dealloc_mw(drop[i]);
    if (!omc__rdma_region_drop_for(E, w) && r == OMC_OK) r = OMC_ERR_SYSTEM;
    omc__free(&E->hooks, w);
    omc__rdma_conn_unref(c);
    return r;
}

/* How many extents a descriptor of this connection can carry (the version-2 form grows by
   8 bytes per extent and pair, and must fit OMC_RDMA_TARGET_MAX). */
OMC__PRIVATE uint32_t omc__rdma_max_extents(const omc_rdma_conn* c) {
    size_t per;
    if (c->npairs < 2) return OMC_RDMA_MAX_EXTENTS;
    per = OMC_RDMA_TARGET_EXTENT_RAILS + 8 * (size_t)c->npairs;
    return (uint32_t)omc__min((size_t)OMC_RDMA_MAX_EXTENTS, (OMC_RDMA_TARGET_MAX - OMC_RDMA_TARGET_HEADER - 4) / per);
}

/* Expose, step 1 (mu held): the registered region that holds the destination, its extents (split
   at MR boundaries and, when large, over the QPs), and that the descriptor fits desc_cap. */
OMC__PRIVATE omc_result omc__rdma_expose_plan(omc_rdma_conn* c, void* dst, uint64_t length, size_t desc_cap, omc__rdma_region** g_out,
                                              omc__rdma_span* span, uint32_t* n) {
    omc_rdma* E = c->eng;
    omc__rdma_region* g;
    uint32_t first, max;
    omc_result r = omc__rdma_conn_usable(c);
    if (r != OMC_OK) return r;
    g = omc__rdma_find(E, dst, length);
    if (!g) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "destination [%p, +%llu) is not inside a registered region (use a pool created with "
                      "omc_rdma_region_hooks)", dst, (unsigned long long)length);
        return OMC_ERR_INVALID_ARG;
    }
    first = c->next_qp++ % c->qpp;      /* small transfers take turns on the QPs */
    max = omc__rdma_max_extents(c);
    r = omc__rdma_plan((uint64_t)(uintptr_t)dst, length, (uint64_t)(uintptr_t)g->base, g->chunk, c->qpp, first, E->split_min, span, max, n);
    if (r != OMC_OK) {
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "destination of %llu bytes needs more than %u extents (mr_chunk %llu)", (unsigned long long)length,
                      max, (unsigned long long)g->chunk);
        return r;
    }
    if (desc_cap < (c->npairs < 2 ? OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT * (size_t)*n + 4 : omc__rdma_target_size_rails(*n, c->npairs)))
        return OMC_ERR_TOO_LARGE;
    *g_out = g;
    return OMC_OK;
}

/* Expose, step 2 (mu held, memory windows): one type-2 window per extent and pair, bound on the
   QP the peer will write through, each under a fresh key. *op collects the binds (wait for it);
   *posted says whether any bind went out (then a failure must break the connection). */
OMC__PRIVATE omc_result omc__rdma_bind_windows(omc_rdma_conn* c, omc_rdma_window* w, const omc__rdma_region* g, const omc__rdma_span* span,
                                               omc_time_ns deadline, omc_rdma_op** op, int* posted) {
    omc_rdma* E = c->eng;
    omc_result r = OMC_OK;
    uint32_t i, p;
    for (i = 0; i < w->count && r == OMC_OK; i++)
        for (p = 0; p < c->npairs && r == OMC_OK; p++) {
            omc__rdma_qp* q;
            struct ibv_send_wr wr;
            struct ibv_mw* mw;
            if (w->ext[i][p].qp == OMC_RDMA_NO_QP) continue;
            q = &c->qps[w->ext[i][p].qp];
            mw = q->mw_free_count ? q->mw_free[--q->mw_free_count] : ibv_alloc_mw(E->rail[q->rail].pd, IBV_MW_TYPE_2);
            if (!mw) {
                OMC__RDMA_LOG(E, OMC_LOG_ERROR, "ibv_alloc_mw(type 2) on %s: %s", E->rail[q->rail].device, strerror(errno));
                return OMC_ERR_NO_MEMORY;
            }
            w->ext[i][p].mw = mw;
            if (!*op && !(*op = omc__rdma_op_new_locked(c, OMC__OP_BIND))) return OMC_ERR_NO_MEMORY;
            r = omc__rdma_wait_slot(E, q, deadline);
            if (r != OMC_OK) break;
            memset(&wr, 0, sizeof(wr));
            wr.opcode = IBV_WR_BIND_MW;
            wr.bind_mw.mw = mw;
            wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);       /* a new key: the previous transfer's is dead */
            wr.bind_mw.bind_info.mr = g->mr[q->rail * g->count + span[i].chunk];
            wr.bind_mw.bind_info.addr = span[i].addr;
            wr.bind_mw.bind_info.length = span[i].length;
            wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
            w->ext[i][p].rkey = wr.bind_mw.rkey;
            r = omc__rdma_post(E, q, &wr, *op, 1, OMC__RDMA_NO_SLICE);
            *posted |= r == OMC_OK;
            E->n_binds += r == OMC_OK;
        }
    return r;
}

/* Expose, step 3: the descriptor of the window's extents, a key and QP per pair. */
OMC__PRIVATE omc_result omc__rdma_expose_encode(omc_rdma_conn* c, const omc_rdma_window* w, const omc__rdma_span* span, void* desc,
                                                size_t desc_cap, size_t* desc_len) {
    omc_rdma* E = c->eng;
    omc_rdma_target* t = (omc_rdma_target*)omc__calloc(&E->hooks, sizeof(omc_rdma_target));
    omc_result r;
    uint32_t i, p;
    if (!t) return OMC_ERR_NO_MEMORY;
    t->conn_id = c->conn_id;
    t->length = w->length;
    t->flags = omc__rdma_flags(E);
    t->count = w->count;
    t->rails = c->npairs >= 2 ? c->npairs : 0;
    for (i = 0; i < w->count; i++) {
        t->extent[i].addr = span[i].addr;
        t->extent[i].length = span[i].length;
        t->extent[i].rkey = w->ext[i][0].rkey;
        t->extent[i].qp = w->ext[i][0].qp;
        for (p = 0; p < c->npairs; p++) { t->extent[i].rkeys[p] = w->ext[i][p].rkey; t->extent[i].qps[p] = w->ext[i][p].qp; }
    }
    r = omc_rdma_target_encode(t, desc, desc_cap, desc_len);
    omc__free(&E->hooks, t);
    return r;
}

OMNICONN_API omc_result omc_rdma_expose(omc_rdma_conn* c, void* dst, uint64_t length, omc_time_ns deadline,
                                        omc_rdma_window** out, void* desc, size_t desc_cap, size_t* desc_len) {
    omc__rdma_span span[OMC_RDMA_MAX_EXTENTS];
    omc__rdma_region* g = NULL;
    omc_rdma_window* w;
    omc_rdma_op* op = NULL;
    omc_rdma* E;
    uint32_t n = 0, i, p, pairs_up = 0;
    int posted = 0;
    omc_result r;
    if (out) *out = NULL;
    if (desc_len) *desc_len = 0;
    if (!c || !out || !dst || !length || !desc) return OMC_ERR_INVALID_ARG;
    E = c->eng;
    w = (omc_rdma_window*)omc__calloc(&E->hooks, sizeof(omc_rdma_window));
    if (!w) return OMC_ERR_NO_MEMORY;
    pthread_mutex_lock(&E->mu);
    r = omc__rdma_expose_plan(c, dst, length, desc_cap, &g, span, &n);
    if (r != OMC_OK) {
        pthread_mutex_unlock(&E->mu);
        omc__free(&E->hooks, w);
        return r;
    }
    w->conn = c;
    c->refs++;
    w->addr = (uint64_t)(uintptr_t)dst;
    w->length = length;
    w->count = n;
    for (p = 0; p < c->npairs; p++) pairs_up += c->pair[p].up != 0;
    for (i = 0; i < n; i++)
        for (p = 0; p < c->npairs; p++) {
            /* a pair that is down gets no key: the writer cannot use it */
            w->ext[i][p].qp = (uint16_t)(c->pair[p].up ? p * c->qpp + span[i].qp : OMC_RDMA_NO_QP);
            w->ext[i][p].rkey = c->pair[p].up ? g->mr[c->pair[p].rail * g->count + span[i].chunk]->rkey : 0;   /* without windows: the MR's own key */
        }
    if (E->use_mw) r = omc__rdma_bind_windows(c, w, g, span, deadline, &op, &posted);
    /* a window is half set up: break the connection, its QPs refuse everything from now on */
    if (r != OMC_OK && posted) omc__rdma_conn_break_locked(c, r, "could not bind a memory window");
    pthread_mutex_unlock(&E->mu);
    if (r == OMC_OK && E->protect == OMC_RDMA_PROTECT_REGIONS) r = omc__rdma_region_for(E, w, pairs_up);
    if (op) {
        omc_result rr = omc_rdma_op_wait(op, deadline);
        if (r == OMC_OK) r = rr;
        if (r == OMC_OK) {  /* the provider quotes mw->rkey as the window's current key next time */
            pthread_mutex_lock(&E->mu);
            for (i = 0; i < n; i++)
                for (p = 0; p < c->npairs; p++) if (w->ext[i][p].mw) w->ext[i][p].mw->rkey = w->ext[i][p].rkey;
            pthread_mutex_unlock(&E->mu);
        }
    }
    if (r == OMC_OK) r = omc__rdma_expose_encode(c, w, span, desc, desc_cap, desc_len);
    if (r != OMC_OK) {
        omc__rdma_window_discard(w, posted);
        return r;
    }
    *out = w;
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: writes (the sender's side)                                           */
/* ============================================================================================== */

/* A source piece that lies in one MR (one per rail: lkey[rail]). */
typedef struct omc__rdma_piece {
    uint64_t addr, length;
    uint32_t lkey[OMC_RDMA_MAX_RAILS];
} omc__rdma_piece;

/* Split the caller's scatter/gather list at MR boundaries (mu held). */
OMC__PRIVATE omc_result omc__rdma_pieces(omc_rdma* E, const omc_rdma_sge* src, uint32_t count, omc__rdma_piece** out, uint32_t* n_out) {
    omc__rdma_piece* p;
    uint64_t n = 0;
    uint32_t i, k = 0, r;
    *out = NULL;
    *n_out = 0;
    for (i = 0; i < count; i++) {
        omc__rdma_region* g;
        uint64_t a = (uint64_t)(uintptr_t)src[i].addr, off;
        if (!src[i].length) continue;
        g = omc__rdma_find(E, src[i].addr, src[i].length);
        if (!g) {
            OMC__RDMA_LOG(E, OMC_LOG_ERROR, "source piece %u [%p, +%llu) is not inside a registered region", i, src[i].addr,
                          (unsigned long long)src[i].length);
            return OMC_ERR_INVALID_ARG;
        }
        off = a - (uint64_t)(uintptr_t)g->base;
        n += (off + src[i].length - 1) / g->chunk - off / g->chunk + 1;
    }
    if (n > UINT32_MAX / 2) return OMC_ERR_TOO_LARGE;
    p = (omc__rdma_piece*)omc__calloc(&E->hooks, sizeof(omc__rdma_piece) * (size_t)(n ? n : 1));
    if (!p) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < count; i++) {
        omc__rdma_region* g;
        uint64_t a = (uint64_t)(uintptr_t)src[i].addr, left = src[i].length;
        if (!left) continue;
        g = omc__rdma_find(E, src[i].addr, left);
        while (left) {
            uint64_t off = a - (uint64_t)(uintptr_t)g->base, ci = off / g->chunk, take = omc__min(left, (ci + 1) * g->chunk - off);
            p[k].addr = a;
            p[k].length = take;
            for (r = 0; r < E->nrails; r++) p[k].lkey[r] = g->mr[r * g->count + ci]->lkey;
            k++;
            a += take;
            left -= take;
        }
    }
    *out = p;
    *n_out = k;
    return OMC_OK;
}

/* Step 1 of a write: the descriptor is well formed, made for this connection (every QP index
   it names belongs to the pair it is listed under), and the payload fits its destination.
   *total = the payload's size. */
static omc_result omc__rdma_write_check(omc_rdma_conn* c, const omc_rdma_sge* src, uint32_t count, const void* desc,
                                        size_t desc_len, omc_rdma_target* t, uint64_t* total) {
    omc_rdma* E = c->eng;
    uint32_t i, p;
    omc_result r = omc_rdma_target_decode(desc, desc_len, c->nqp, t);
    if (r != OMC_OK) {
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "rejected a transfer descriptor (%zu bytes) for connection %016llx: %s", desc_len,
                      (unsigned long long)c->conn_id, omc_result_str(r));
        return r;
    }
    if (t->conn_id != c->conn_id) {  /* its windows are bound on other QPs: writing would only fail */
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "descriptor was made for connection %016llx, not %016llx (the peer reconnected?)",
                      (unsigned long long)t->conn_id, (unsigned long long)c->conn_id);
        return OMC_ERR_RDMA_ACCESS;
    }
    if ((t->rails >= 2 ? t->rails : 1) != c->npairs) {
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "descriptor names %u rail%s, connection %016llx has %u", t->rails >= 2 ? t->rails : 1,
                      t->rails >= 2 ? "s" : "", (unsigned long long)c->conn_id, c->npairs);
        return OMC_ERR_MALFORMED;
    }
    if (t->rails < 2)                   /* version 1: one pair, its key and QP in rkey and qp */
        for (i = 0; i < t->count; i++) { t->extent[i].rkeys[0] = t->extent[i].rkey; t->extent[i].qps[0] = t->extent[i].qp; }
    for (i = 0; i < t->count; i++)
        for (p = 0; p < c->npairs; p++) {
            uint16_t q = t->extent[i].qps[p];
            if (q != OMC_RDMA_NO_QP && q / c->qpp != p) {
                OMC__RDMA_LOG(E, OMC_LOG_WARN, "descriptor extent %u lists QP %u under rail %u: it is not one of that rail's QPs", i, q, p);
                return OMC_ERR_MALFORMED;
            }
        }
    *total = 0;
    for (i = 0; i < count; i++) {
        if (!src[i].addr && src[i].length) return OMC_ERR_INVALID_ARG;
        if (*total > UINT64_MAX - src[i].length) return OMC_ERR_TOO_LARGE;
        *total += src[i].length;
    }
    if (*total > t->length) {
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "payload of %llu bytes does not fit the peer's %llu-byte destination",
                      (unsigned long long)*total, (unsigned long long)t->length);
        return OMC_ERR_TOO_LARGE;
    }
    return OMC_OK;
}

/* Step 2: cut the payload into slices: at most one slice size and max_sge source pieces each,
   never across an extent, each knowing its place in the destination and where it starts in the
   source. Counts them (out == NULL) or fills out. */
static uint32_t omc__rdma_cut(const omc_rdma* E, const omc_rdma_op* op, uint64_t total, omc__rdma_slice* out) {
    const omc_rdma_target* t = op->target;
    uint64_t off = 0, po = 0;
    uint32_t i, k = 0, pi = 0;
    for (i = 0; i < t->count && off < total; i++) {
        uint64_t len = omc__min(t->extent[i].length, total - off), done = 0;
        while (done < len) {
            uint64_t want = omc__min(E->slice, len - done), got = 0, spo = po;
            uint32_t spi = pi, nsge = 0;
            while (got < want && nsge < E->max_sge) {
                uint64_t take = omc__min(op->pieces[pi].length - po, want - got);
                got += take;
                po += take;
                nsge++;
                if (po == op->pieces[pi].length) { pi++; po = 0; }
            }
            if (out) {
                memset(&out[k], 0, sizeof(out[k]));
                out[k].ext = i;
                out[k].off = done;
                out[k].len = got;
                out[k].pi = spi;
                out[k].po = spo;
            }
            k++;
            done += got;
        }
        off += len;
    }
    return k;
}

static omc_result omc__rdma_write_slices(omc_rdma* E, omc_rdma_op* op, uint64_t total) {
    uint32_t n = omc__rdma_cut(E, op, total, NULL);
    op->slices = (omc__rdma_slice*)omc__calloc(&E->hooks, sizeof(omc__rdma_slice) * (size_t)(n ? n : 1));
    if (!op->slices) return OMC_ERR_NO_MEMORY;
    op->nslices = omc__rdma_cut(E, op, total, op->slices);
    return OMC_OK;
}

/* Step 3 (mu held): which pair of rails finishes a slice of len bytes of extent e first - the
   one whose queue drains soonest at its measured throughput (queued bytes / rate). planned[]:
   bytes this round already gave each pair. Returns the pair, or -1 if none can take it. */
static int omc__rdma_choose_pair(omc_rdma_conn* c, const omc_rdma_extent* x, uint64_t len, const uint64_t* planned) {
    omc_rdma* E = c->eng;
    double best = 0;
    uint32_t p;
    int pick = -1;
    for (p = 0; p < c->npairs; p++) {
        double finish;
        if (!c->pair[p].up || x->qps[p] == OMC_RDMA_NO_QP || !E->rail[c->pair[p].rail].up) continue;
        finish = (double)(c->pair[p].queued + planned[p] + len) / omc__rdma_rail_rate(E, c->pair[p].rail);
        if (pick < 0 || finish < best) { best = finish; pick = (int)p; }
    }
    return pick;
}

/* Step 4 (mu held): gather one slice from the source pieces into one RDMA WRITE and post it on
   pair p's QP for its extent. last: signal it (the op's last request on that QP). */
static omc_result omc__rdma_write_slice(omc_rdma_conn* c, omc_rdma_op* op, uint32_t k, uint32_t p, int last, omc_time_ns deadline) {
    omc_rdma* E = c->eng;
    omc__rdma_slice* sl = &op->slices[k];
    const omc_rdma_extent* x = &op->target->extent[sl->ext];
    omc__rdma_qp* q = &c->qps[x->qps[p]];
    omc__rdma_rail* R = &E->rail[q->rail];
    struct ibv_sge sge[OMC__RDMA_MAX_SGE];
    struct ibv_send_wr wr;
    uint64_t len = 0, po = sl->po;
    uint32_t pi = sl->pi;
    int nsge = 0;
    omc_result r = omc__rdma_wait_slot(E, q, deadline);
    if (r != OMC_OK) return r;
    while (len < sl->len && nsge < (int)E->max_sge) {     /* gather: one WRITE, several pieces */
        omc__rdma_piece* pc = &op->pieces[pi];
        uint64_t take = omc__min(pc->length - po, sl->len - len);
        sge[nsge].addr = pc->addr + po;
        sge[nsge].length = (uint32_t)take;
        sge[nsge].lkey = pc->lkey[q->rail];
        nsge++;
        len += take;
        po += take;
        if (po == pc->length) { pi++; po = 0; }
    }
    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    wr.wr.rdma.remote_addr = x->addr + sl->off;
    wr.wr.rdma.rkey = x->rkeys[p];
    r = omc__rdma_post(E, q, &wr, op, last, k);
    if (r != OMC_OK) return r;
    sl->state = OMC__SLICE_POSTED;
    sl->pair = (uint8_t)p;
    if (!R->inflight) {         /* busy from now: a new period */
        if (R->window_bytes) R->settled = R->rate;
        R->mark = omc_now_ns();
        R->window_bytes = 0;
    }
    R->inflight += sl->len;
    c->pair[p].queued += sl->len;
    return OMC_OK;
}

/* Post every slice that is new or must be written again (mu held): plan first (each slice to
   the pair that finishes it first), so that each QP's last request of this round is signalled,
   then post. A pair that fails meanwhile leaves its slices for the next round. */
OMC__PRIVATE omc_result omc__xfer_post_slices(omc_rdma_conn* c, omc_rdma_op* op, omc_time_ns deadline);

OMC__PRIVATE omc_result omc__rdma_post_slices(omc_rdma_conn* c, omc_rdma_op* op, omc_time_ns deadline) {
    omc_rdma* E = c->eng;
    uint64_t planned[OMC_RDMA_MAX_RAILS];
    if (op->kind == OMC__OP_XFER) return omc__xfer_post_slices(c, op, deadline);
    uint32_t last[OMC_RDMA_MAX_QPS], k, n = op->nslices;
    uint8_t* plan;
    omc_result r = OMC_OK;
    memset(planned, 0, sizeof(planned));
    for (k = 0; k < OMC_RDMA_MAX_QPS; k++) last[k] = OMC__RDMA_NO_SLICE;
    plan = (uint8_t*)omc__malloc(&E->hooks, n ? n : 1);
    if (!plan) return OMC_ERR_NO_MEMORY;
    for (k = 0; k < n; k++) {
        omc__rdma_slice* sl = &op->slices[k];
        int p;
        plan[k] = 0xFF;
        if (sl->state != OMC__SLICE_NEW && sl->state != OMC__SLICE_REPOST) continue;
        p = omc__rdma_choose_pair(c, &op->target->extent[sl->ext], sl->len, planned);
        if (p < 0) {            /* no pair reaches this extent any more */
            r = OMC_ERR_RDMA_QP;
            break;
        }
        plan[k] = (uint8_t)p;
        planned[p] += sl->len;
        last[op->target->extent[sl->ext].qps[p]] = k;
    }
    if (r != OMC_OK) {
        omc__free(&E->hooks, plan);
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "connection %016llx: no working rail reaches part of the destination", (unsigned long long)c->conn_id);
        return r;
    }
    op->reposts = 0;
    for (k = 0; k < n; k++) {
        omc__rdma_slice* sl;
        uint32_t q;
        if (plan[k] == 0xFF) continue;
        q = op->target->extent[op->slices[k].ext].qps[plan[k]];
        r = omc__rdma_write_slice(c, op, k, plan[k], last[q] == k, deadline);
        sl = &op->slices[k];
        if (r == OMC_OK) continue;
        if (omc__rdma_conn_usable(c) != OMC_OK || r == OMC_ERR_TIMEOUT || r == OMC_ERR_NO_MEMORY || r == OMC_ERR_TOO_LARGE) break;
        /* its pair failed while we posted: write it (and the rest planned there) next round */
        if (c->pair[plan[k]].up) {
            char text[160];
            snprintf(text, sizeof(text), "could not post on QP %u: %s", c->qps[q].qpn, omc_result_str(r));
            omc__rdma_pair_down_locked(c, plan[k], r, text);
        }
        sl->state = OMC__SLICE_REPOST;
        op->reposts++;
        r = OMC_OK;
        if (omc__rdma_conn_usable(c) != OMC_OK) { r = c->error != OMC_OK ? c->error : OMC_ERR_RDMA_QP; break; }
    }
    omc__free(&E->hooks, plan);
    return r;
}

OMNICONN_API omc_result omc_rdma_write_start(omc_rdma_conn* c, const omc_rdma_sge* src, uint32_t count, const void* desc,
                                             size_t desc_len, omc_time_ns deadline, omc_rdma_op** out) {
    uint64_t total = 0;
    omc_rdma_target* t;
    omc_rdma_op* op = NULL;
    omc_rdma* E;
    omc_result r;
    if (out) *out = NULL;
    if (!c || !out || (count && !src)) return OMC_ERR_INVALID_ARG;
    E = c->eng;
    t = (omc_rdma_target*)omc__calloc(&E->hooks, sizeof(omc_rdma_target));
    if (!t) return OMC_ERR_NO_MEMORY;
    r = omc__rdma_write_check(c, src, count, desc, desc_len, t, &total);
    if (r != OMC_OK) { omc__free(&E->hooks, t); return r; }
    pthread_mutex_lock(&E->mu);
    r = omc__rdma_conn_usable(c);
    if (r == OMC_OK && !(op = omc__rdma_op_new_locked(c, OMC__OP_WRITE))) r = OMC_ERR_NO_MEMORY;
    if (r != OMC_OK) {
        pthread_mutex_unlock(&E->mu);
        omc__free(&E->hooks, t);
        return r;
    }
    op->target = t;
    op->bytes = total;
    r = omc__rdma_pieces(E, src, count, &op->pieces, &op->npieces);
    if (r == OMC_OK) r = omc__rdma_write_slices(E, op, total);
    if (r == OMC_OK) r = omc__rdma_post_slices(c, op, deadline);
    if (r != OMC_OK) {
        if (op->status == OMC_OK) op->status = r;
        /* requests already posted must not go on touching memory the caller gets back */
        if (op->pending) omc__rdma_conn_break_locked(c, r, "a write could not be posted completely");
    }
    pthread_mutex_unlock(&E->mu);
    if (r != OMC_OK && !op->pending) {      /* nothing in flight: report now */
        omc__rdma_op_free(op);
        pthread_mutex_lock(&E->mu);
        E->n_write_errors++;
        pthread_mutex_unlock(&E->mu);
        return r;
    }
    *out = op;
    return OMC_OK;
}

OMNICONN_API omc_result omc_rdma_write(omc_rdma_conn* c, const omc_rdma_sge* src, uint32_t count, const void* desc,
                                       size_t desc_len, omc_time_ns deadline) {
    omc_rdma_op* op = NULL;
    omc_result r = omc_rdma_write_start(c, src, count, desc, desc_len, deadline, &op);
    if (r != OMC_OK) return r;
    return omc_rdma_op_wait(op, deadline);
}

/* ============================================================================================== */
/* [SECTION] Implementation: choosing the protection (the window-bounds probe)                    */
/* ============================================================================================== */

/* Does the device refuse a write that runs past the end of a memory window? Real adapters do
   (windows are checked like regions); Soft-RoCE does not: its responder checks a window's key
   and QP but then only the range of the MR under it (drivers/infiniband/sw/rxe/rxe_resp.c,
   check_rkey). Find out once, on a loopback connection between two QPs of this engine: bind a
   window over the middle page of three and write two pages through it.
   Returns 1 (refused), 0 (it landed) or -1 (the probe itself failed). */
OMC__PRIVATE int omc__rdma_probe_window_bounds(omc_rdma* E, uint32_t rail) {
    int rails[1];
    size_t page = (size_t)sysconf(_SC_PAGESIZE), rn = 0, dn = 0;
    uint8_t rec[OMC_RDMA_RECORD_MAX], desc[OMC_RDMA_TARGET_MAX];
    omc_time_ns deadline = omc_deadline_after_ms(5000);
    omc_rdma_conn *a = NULL, *b = NULL;
    omc_rdma_record ra, rb;
    omc_rdma_window* w = NULL;
    omc_rdma_target t;
    omc_rdma_sge sge;
    uint64_t id;
    int verdict = -1;
    omc_result r;
    uint8_t* mem = (uint8_t*)mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return -1;
    memset(mem, 0, 3 * page);
    if (omc_rdma_register(E, mem, 3 * page) != OMC_OK) { munmap(mem, 3 * page); return -1; }
    do { id = omc__random_u64(); } while (id == 0);
    rails[0] = (int)rail;
    r = omc__rdma_conn_new(E, rails, 1, 1, id, &a);
    if (r == OMC_OK) { a->quiet = 1; r = omc__rdma_conn_new(E, rails, 1, 1, id, &b); }
    if (r == OMC_OK) { b->quiet = 1; r = omc_rdma_conn_record(a, rec, sizeof(rec), &rn); }
    if (r == OMC_OK) r = omc_rdma_record_decode(rec, rn, &ra);
    if (r == OMC_OK) r = omc_rdma_conn_record(b, rec, sizeof(rec), &rn);
    if (r == OMC_OK) r = omc_rdma_record_decode(rec, rn, &rb);
    if (r == OMC_OK) r = omc__rdma_conn_link(a, &rb);
    if (r == OMC_OK) r = omc__rdma_conn_link(b, &ra);
    if (r == OMC_OK) r = omc_rdma_expose(b, mem + page, page, deadline, &w, desc, sizeof(desc), &dn);
    if (r == OMC_OK) r = omc_rdma_target_decode(desc, dn, 1, &t);
    if (r == OMC_OK) {
        t.extent[0].length = 2 * page;      /* one page past the window, still inside the MR */
        t.length = 2 * page;
        r = omc_rdma_target_encode(&t, desc, sizeof(desc), &dn);
    }
    if (r == OMC_OK) {
        sge.addr = mem;
        sge.length = 2 * page;
        r = omc_rdma_write(a, &sge, 1, desc, dn, deadline);
        verdict = r == OMC_ERR_RDMA_ACCESS ? 1 : r == OMC_OK ? 0 : -1;
    }
    if (w) omc_rdma_revoke(w, deadline);
    if (a) omc_rdma_conn_destroy(a);
    if (b) omc_rdma_conn_destroy(b);
    omc_rdma_deregister(E, mem);
    munmap(mem, 3 * page);
    if (verdict < 0) OMC__RDMA_LOG(E, OMC_LOG_WARN, "memory-window probe on %s failed (%s)", E->rail[rail].device, omc_result_str(r));
    return verdict;
}

/* The probe's verdicts, per device and port, for the life of the process (it costs a loopback
   connection and a few completions: milliseconds on hardware, most of a second under QEMU). */
typedef struct omc__rdma_verdict { char device[64]; uint8_t port; int bounds; } omc__rdma_verdict;
static omc__rdma_verdict omc__rdma_verdicts[8];
static uint32_t omc__rdma_nverdicts;

OMC__PRIVATE int omc__rdma_rail_window_bounds(omc_rdma* E, uint32_t k) {
    const omc__rdma_rail* R = &E->rail[k];
    uint32_t i;
    int bounds = -1;
    pthread_mutex_lock(&omc__ibv_mu);
    for (i = 0; i < omc__rdma_nverdicts; i++)
        if (omc__rdma_verdicts[i].port == R->port && strcmp(omc__rdma_verdicts[i].device, R->device) == 0) bounds = omc__rdma_verdicts[i].bounds;
    pthread_mutex_unlock(&omc__ibv_mu);
    if (bounds >= 0) return bounds;
    bounds = omc__rdma_probe_window_bounds(E, k);
    pthread_mutex_lock(&omc__ibv_mu);
    if (bounds >= 0 && omc__rdma_nverdicts < sizeof(omc__rdma_verdicts) / sizeof(omc__rdma_verdicts[0])) {
        omc__rdma_verdict* v = &omc__rdma_verdicts[omc__rdma_nverdicts++];
        snprintf(v->device, sizeof(v->device), "%s", R->device);
        v->port = R->port;
        v->bounds = bounds;
    }
    pthread_mutex_unlock(&omc__ibv_mu);
    return bounds;
}

/* Windows protect only if every rail's device keeps writes inside them: 1 if all do, 0 if one
   does not, -1 if one could not be probed (and none said no). */
OMC__PRIVATE int omc__rdma_window_bounds(omc_rdma* E) {
    uint32_t k;
    int all = 1;
    for (k = 0; k < E->nrails; k++) {
        int b = omc__rdma_rail_window_bounds(E, k);
        if (b == 0) return 0;
        if (b < 0) all = -1;
    }
    return all;
}

/* Resolve desc.protection: windows where the device enforces their bounds, a region per
   destination elsewhere (it costs a registration per transfer, but a region's bounds are
   enforced by every device, Soft-RoCE included). */
OMC__PRIVATE void omc__rdma_choose_protection(omc_rdma* E, omc_rdma_protection want) {
    int has_mw = 1;
    uint32_t k;
    for (k = 0; k < E->nrails; k++)         /* windows only if every rail has them */
        has_mw &= E->rail[k].dev_attr.max_mw > 0 &&
                  (E->rail[k].dev_attr.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
    E->window_bounds = -1;
    if (has_mw && (want == OMC_RDMA_PROTECT_DEFAULT || want == OMC_RDMA_PROTECT_WINDOWS)) {
        E->protect = OMC_RDMA_PROTECT_WINDOWS;
        E->use_mw = 1;
        E->window_bounds = omc__rdma_window_bounds(E);
    }
    if (want == OMC_RDMA_PROTECT_DEFAULT) E->protect = E->window_bounds == 1 ? OMC_RDMA_PROTECT_WINDOWS : OMC_RDMA_PROTECT_REGIONS;
    else if (want == OMC_RDMA_PROTECT_WINDOWS && !has_mw) {
        OMC__RDMA_LOG(E, OMC_LOG_WARN, "a rail's device has no type-2 memory windows: protecting destinations with regions");
        E->protect = OMC_RDMA_PROTECT_REGIONS;
    } else E->protect = want;
    E->use_mw = E->protect == OMC_RDMA_PROTECT_WINDOWS;
    if (E->window_bounds == 0)
        OMC__RDMA_LOG(E, E->use_mw ? OMC_LOG_WARN : OMC_LOG_INFO, "device %s does not enforce memory-window bounds (Soft-RoCE checks "
                      "only the region under a window)%s", E->rail[0].device, E->use_mw ? ": keys are per transfer and revoked, but a peer "
                      "holding one can write anywhere in the memory region under it" : ": each destination gets a memory region of its own");
}

#if OMC__HAS_ZMQ
/* ============================================================================================== */
/* [SECTION] Implementation: the RDMA data plane of the remote connector                          */
/* ============================================================================================== */
/*
    The remote connector (omniconn.h: "the data-plane interface") runs the side channel and
    calls a data plane for the bytes. This one maps it onto the engine:

      receiver                                           sender
      rx_open:   omc_rdma_conn_create (QPs in INIT)
      rx_hello:  our endpoint record  ---- HELLO ---->   tx_hello: omc_rdma_conn_accept, keep the
                                                                   connection under its id
      rx_ready:  omc_rdma_conn_connect <--- HELLO ----             and answer with our record
      rx_prepare: omc_rdma_expose(dst) -- PULL(desc) ->  tx_push: find the connection by the
                                                                   descriptor's id, omc_rdma_write
      rx_progress(DONE): omc_rdma_revoke <--- DONE ----            (DONE only after it completed)

    One RDMA connection per channel (a channel carries one get at a time; a receiver caches a
    few per sender). Anything that goes wrong while a channel is set up (no engine, no record
    from the sender, a QP that will not connect) makes rx_ready say OMC_ERR_UNAVAILABLE: that
    channel uses TCP, the reason goes to omc_rdma_connector_query and the connector's health.
    A connection that breaks later fails its transfer; the channel is dropped and the next get
    sets up a new one. Senders drop connections that broke, and the least recently used idle
    ones when the engine's QP budget is spent.
*/

typedef struct omc__rdma_link {         /* sender: one accepted connection */
    omc_rdma_conn* conn;
    uint64_t conn_id;
    uint64_t peer_incarnation;          /* the receiver process that sent the HELLO */
    uint32_t channel_len;               /* > 0: the side-channel session (ZMQ routing id) of its */
    uint8_t channel[256];               /* first PULL; only that session may name it again */
    omc_time_ns last_used;
    uint32_t busy;                      /* pushes using it now */
    struct omc__rdma_link* next;
} omc__rdma_link;

typedef struct omc__rdma_plane {
    omc_rdma* eng;                      /* NULL: RDMA is off for this connector (reason says why) */
    omc_conn* conn;
    omc_hooks hooks;
    void* pool_base;                    /* registered by attach */
    int* detached;                      /* create() learns whether a failed create ran detach */
    pthread_mutex_t mu;
    omc__rdma_link* links;
    char reason[256];
    char last_fallback[256];
    uint64_t rdma_channels, tcp_fallbacks, accepted, accept_failures, pushes, push_failures, push_bytes;
    uint64_t quarantined;               /* destinations whose revoke failed: never reused */
    omc_time_ns rejoin_next;            /* receiver: a channel that lost a rail is replaced (new */
    uint32_t rejoin_backoff_ms;         /* HELLO, QPs on every rail) no sooner than this */
    struct omc__rdma_plane* next;       /* the registry (omc_rdma_connector_query finds us there) */
} omc__rdma_plane;

#define OMC__RDMAP_REJOIN_MIN_MS 1000   /* back-off of replacing a connection to win a rail back */
#define OMC__RDMAP_REJOIN_MAX_MS 30000

typedef struct omc__rdma_chan {         /* receiver: one channel */
    omc_rdma_conn* conn;
    omc_rdma_window* win;
    int connected;
    int timer;                          /* timerfd: ticks while a transfer waits (liveness probes) */
    omc_rdma_op* probe[OMC_RDMA_MAX_RAILS];     /* the probe in flight on each pair of rails, or NULL */
} omc__rdma_chan;

#define OMC__RDMAP_PROBE_MS 250         /* a waiting receiver probes its sender this often */

static omc__rdma_plane* omc__rdma_planes;
static pthread_mutex_t omc__rdma_planes_mu = PTHREAD_MUTEX_INITIALIZER;

/* A channel (or a receiver's HELLO) goes without RDMA: remember why, tell health. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
OMC__PRIVATE void omc__rdmap_fallback(omc__rdma_plane* P, omc_result r, const char* fmt, ...) {
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&P->mu);
    snprintf(P->last_fallback, sizeof(P->last_fallback), "%s", text);
    pthread_mutex_unlock(&P->mu);
    if (P->conn) omc__conn_fail(P->conn, r, "%s", text);
}

static omc_result omc__rdmap_attach(void* user, omc_conn* conn, omc_pool* pool, const omc_hooks* hooks) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc_result r;
    (void)hooks;
    P->conn = conn;
    pthread_mutex_lock(&omc__rdma_planes_mu);
    P->next = omc__rdma_planes;
    omc__rdma_planes = P;
    pthread_mutex_unlock(&omc__rdma_planes_mu);
    if (!P->eng) return OMC_OK;
    r = omc_rdma_register(P->eng, omc_pool_base(pool), omc_pool_size(pool));    /* once, for every transfer */
    if (r == OMC_OK) { P->pool_base = omc_pool_base(pool); return OMC_OK; }
    snprintf(P->reason, sizeof(P->reason), "RDMA off: registering the connector's %llu-byte pool failed (%s; the log says "
             "why): every peer uses TCP", (unsigned long long)omc_pool_size(pool), omc_result_str(r));
    omc_rdma_destroy(P->eng);
    P->eng = NULL;
    return OMC_OK;
}

static void omc__rdmap_detach(void* user) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_plane** pp;
    pthread_mutex_lock(&omc__rdma_planes_mu);
    for (pp = &omc__rdma_planes; *pp; pp = &(*pp)->next) if (*pp == P) { *pp = P->next; break; }
    pthread_mutex_unlock(&omc__rdma_planes_mu);
    while (P->links) {
        omc__rdma_link* l = P->links;
        P->links = l->next;
        omc_rdma_conn_destroy(l->conn);
        omc__free(&P->hooks, l);
    }
    if (P->eng) {
        if (P->pool_base) omc_rdma_deregister(P->eng, P->pool_base);
        omc_rdma_destroy(P->eng);
    }
    if (P->detached) *P->detached = 1;
    pthread_mutex_destroy(&P->mu);
    omc__free(&P->hooks, P);
}

/* Sender: forget connections that broke. Live ones are never evicted for a new peer: when the
   QP budget is spent, the new peer is refused and uses TCP. */
OMC__PRIVATE void omc__rdmap_prune(omc__rdma_plane* P) {
    omc__rdma_link** pp;
    pthread_mutex_lock(&P->mu);
    for (pp = &P->links; *pp;) {
        omc__rdma_link* l = *pp;
        if (!l->busy && !omc_rdma_conn_ok(l->conn)) {
            *pp = l->next;
            omc_rdma_conn_destroy(l->conn);
            omc__free(&P->hooks, l);
            continue;
        }
        pp = &l->next;
    }
    pthread_mutex_unlock(&P->mu);
}

static omc_result omc__rdmap_tx_hello(void* user, const uint8_t* rec, uint32_t rec_len, uint8_t* out, uint32_t cap, uint32_t* out_len) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_link* l;
    omc_rdma_conn* c = NULL;
    omc_rdma_record peer;
    size_t n = 0;
    omc_result r;
    *out_len = 0;
    if (!P->eng || !rec) return OMC_ERR_UNAVAILABLE;    /* no record from us: the receiver uses TCP */
    omc__rdmap_prune(P);
    r = omc_rdma_record_decode(rec, rec_len, &peer);
    /* accept checks the rest (QP count against ours, link layer, GID); the QP budget spent
       means OMC_ERR_BUSY: this peer uses TCP, nobody's live connection is taken away */
    if (r == OMC_OK) r = omc_rdma_conn_accept(P->eng, rec, rec_len, &c);
    if (r == OMC_OK) r = omc_rdma_conn_record(c, out, cap, &n);
    l = r == OMC_OK ? (omc__rdma_link*)omc__calloc(&P->hooks, sizeof(omc__rdma_link)) : NULL;
    if (r == OMC_OK && !l) r = OMC_ERR_NO_MEMORY;
    if (r != OMC_OK) {
        if (c) omc_rdma_conn_destroy(c);
        pthread_mutex_lock(&P->mu);
        P->accept_failures++;
        pthread_mutex_unlock(&P->mu);
        omc__rdmap_fallback(P, r, "RDMA connection for a receiver refused (%s; the log says why): it uses TCP", omc_result_str(r));
        return r;
    }
    l->conn = c;
    l->conn_id = omc__rdma_conn_id(c);
    l->peer_incarnation = peer.incarnation;
    l->last_used = omc_now_ns();
    pthread_mutex_lock(&P->mu);
    l->next = P->links;
    P->links = l;
    P->accepted++;
    pthread_mutex_unlock(&P->mu);
    *out_len = (uint32_t)n;
    return OMC_OK;
}

/* The remote connector's codes for a failed transfer are TIMEOUT, CONNECTION and AUTH: the
   engine's own codes (a broken QP, a refused key, a failed completion) become CONNECTION at
   this boundary, and the detail goes to the connector's health (last error text) and the log. */
static int omc__rdmap_engine_code(omc_result r) {
    return r == OMC_ERR_RDMA_QP || r == OMC_ERR_RDMA_ACCESS || r == OMC_ERR_RDMA_COMPLETION || r == OMC_ERR_RDMA_DEVICE ||
           r == OMC_ERR_MEMLOCK || r == OMC_ERR_BUSY;
}

OMC__PRIVATE omc_result omc__rdmap_boundary(omc__rdma_plane* P, omc_result r, const char* what) {
    if (!omc__rdmap_engine_code(r)) return r;
    if (P->conn) omc__conn_fail(P->conn, r, "RDMA %s failed: %s (reported as %s)", what, omc_result_str(r),
                                omc_result_str(OMC_ERR_CONNECTION));
    return OMC_ERR_CONNECTION;
}

/* The connector promises the receiver that some codes mean "no byte moved" (it keeps its
   channel after them); a failed RDMA write promises nothing of the kind. */
static omc_result omc__rdmap_push_result(omc__rdma_plane* P, omc_result r) {
    switch (r) {
        case OMC_ERR_TOO_LARGE: case OMC_ERR_MALFORMED: case OMC_ERR_CHECKSUM: case OMC_ERR_VERSION: return OMC_ERR_PROTOCOL;
        case OMC_ERR_NOT_FOUND: case OMC_ERR_STALE: case OMC_ERR_UNAVAILABLE: case OMC_ERR_PEER_RESTARTED: return OMC_ERR_CONNECTION;
        case OMC_ERR_INVALID_ARG: return OMC_ERR_INTERNAL;      /* our own pool is not registered? */
        default: return omc__rdmap_boundary(P, r, "write");
    }
}

static omc_result omc__rdmap_tx_push(void* user, const omc__dp_push* p) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_link* l;
    omc_rdma_target t;
    omc_rdma_op* op = NULL;
    omc_rdma_sge sge;
    omc_result r;
    if (!P->eng) return OMC_ERR_CONNECTION;
    r = omc_rdma_target_decode(p->desc, p->desc_len, 0, &t);
    if (r != OMC_OK) return OMC_ERR_PROTOCOL;
    pthread_mutex_lock(&P->mu);
    for (l = P->links; l && l->conn_id != t.conn_id; l = l->next) {}
    if (l && l->peer_incarnation == p->receiver_incarnation && p->channel_len && p->channel_len <= sizeof(l->channel)) {
        if (!l->channel_len) {          /* the receiver's first PULL comes right after its HELLO */
            memcpy(l->channel, p->channel, p->channel_len);
            l->channel_len = p->channel_len;
        } else if (l->channel_len != p->channel_len || memcmp(l->channel, p->channel, p->channel_len) != 0) {
            pthread_mutex_unlock(&P->mu);
            OMC__RDMA_LOG(P->eng, OMC_LOG_WARN, "refused a PULL naming RDMA connection %016llx from another side-channel session than "
                          "the one that uses it", (unsigned long long)t.conn_id);
            pthread_mutex_lock(&P->mu);
            P->push_failures++;
            pthread_mutex_unlock(&P->mu);
            return OMC_ERR_PROTOCOL;
        }
    }
    if (l && l->peer_incarnation != p->receiver_incarnation) {
        uint64_t theirs = l->peer_incarnation;
        pthread_mutex_unlock(&P->mu);
        /* a descriptor is only good on the connection of the peer that sent the PULL */
        OMC__RDMA_LOG(P->eng, OMC_LOG_WARN, "refused a PULL from receiver incarnation %016llx naming RDMA connection %016llx, "
                      "which belongs to receiver incarnation %016llx", (unsigned long long)p->receiver_incarnation,
                      (unsigned long long)t.conn_id, (unsigned long long)theirs);
        pthread_mutex_lock(&P->mu);
        P->push_failures++;
        pthread_mutex_unlock(&P->mu);
        return OMC_ERR_PROTOCOL;
    }
    if (l) { l->busy++; l->last_used = omc_now_ns(); }
    pthread_mutex_unlock(&P->mu);
    if (!l) {
        OMC__RDMA_LOG(P->eng, OMC_LOG_WARN, "PULL names RDMA connection %016llx, which this sender does not have (dropped or from "
                      "before a restart)", (unsigned long long)t.conn_id);
        return OMC_ERR_CONNECTION;
    }
    sge.addr = p->src;
    sge.length = p->size;
    r = omc_rdma_write_start(l->conn, &sge, 1, p->desc, p->desc_len, p->deadline, &op);
    while (r == OMC_OK && op) {
        int a = omc__load(p->abort);
        omc_time_ns slice = omc_deadline_after_ms(50);
        if (a) {    /* the receiver gave up: stop the adapter (break the connection), then report */
            pthread_mutex_lock(&P->eng->mu);
            omc__rdma_conn_break_locked(l->conn, (omc_result)a, "push aborted by the receiver");
            pthread_mutex_unlock(&P->eng->mu);
            omc_rdma_op_wait(op, omc_deadline_after_ms(OMC__RDMA_FLUSH_GRACE_MS));
            r = (omc_result)a;
            break;
        }
        if (p->deadline <= slice) { r = omc_rdma_op_wait(op, p->deadline); break; }
        r = omc_rdma_op_test(op, slice);
        if (r != OMC_ERR_BUSY) break;
        r = OMC_OK;
    }
    pthread_mutex_lock(&P->mu);
    l->busy--;
    l->last_used = omc_now_ns();
    if (r == OMC_OK) { P->pushes++; P->push_bytes += p->size; }
    else P->push_failures++;
    pthread_mutex_unlock(&P->mu);
    return r == OMC_OK ? OMC_OK : omc__rdmap_push_result(P, r);
}

/* Revoke the channel's open destination. If that fails the peer may still be able to write
   there: the range is quarantined - the transfer's buffer is forgotten, so the pool never hands
   it out again (it stays allocated until the connector is destroyed) - and an ERROR is logged.
   x is NULL when the transfer is already over (its buffer went back; only the log remains). */
OMC__PRIVATE omc_result omc__rdmap_revoke(omc__rdma_plane* P, omc__rdma_chan* ch, omc__dp_xfer* x, omc_time_ns deadline) {
    omc_result r = omc_rdma_revoke(ch->win, deadline);
    ch->win = NULL;
    /* OMC_ERR_RDMA_QP: the connection was already broken - its QPs refuse every write and a
       destination region is deregistered all the same - so nothing can reach the range */
    if (r == OMC_OK || r == OMC_ERR_RDMA_QP) return OMC_OK;
    if (x && x->dst.data) {
        OMC__RDMA_LOG(P->eng, OMC_LOG_ERROR, "revoking the destination [%p, +%llu) failed (%s): the range is quarantined and never "
                      "reused, the get fails", (void*)x->dst.data, (unsigned long long)x->dst.size, omc_result_str(r));
        memset(&x->dst, 0, sizeof(x->dst));     /* omc_buffer_release of it frees nothing */
        pthread_mutex_lock(&P->mu);
        P->quarantined++;
        pthread_mutex_unlock(&P->mu);
    } else {
        OMC__RDMA_LOG(P->eng, OMC_LOG_ERROR, "revoking a destination failed (%s); its connection is broken", omc_result_str(r));
    }
    if (P->conn) omc__conn_fail(P->conn, OMC_ERR_CONNECTION, "RDMA revoke failed: %s (destination quarantined)", omc_result_str(r));
    return r;
}

/* Arm the probe timer (every ms) or stop it (0); a tick that is not read keeps the fd readable. */
OMC__PRIVATE void omc__rdmap_timer(omc__rdma_chan* ch, long ms) {
    struct itimerspec t;
    uint64_t ticks;
    if (ch->timer < 0) return;
    memset(&t, 0, sizeof(t));
    t.it_value.tv_sec = ms / 1000;
    t.it_value.tv_nsec = (ms % 1000) * 1000000L;
    t.it_interval = t.it_value;
    timerfd_settime(ch->timer, 0, &t, NULL);
    if (!ms && read(ch->timer, &ticks, sizeof(ticks)) < 0) { /* nothing was pending */ }
}

/* Finish the probe in flight: it is a zero-byte write that completes at once while the sender
   lives; if the sender is gone, the connection is broken by now or breaks at the deadline. */
OMC__PRIVATE void omc__rdmap_probe_end(omc__rdma_chan* ch) {
    uint32_t p;
    for (p = 0; p < OMC_RDMA_MAX_RAILS; p++) {
        if (ch->probe[p]) omc_rdma_op_wait(ch->probe[p], omc_deadline_after_ms(OMC__RDMA_FLUSH_GRACE_MS));
        ch->probe[p] = NULL;
    }
}

/* A tick while a transfer waits: a sender that died cannot say so on the side channel and its
   writes simply stop, so probe it (a zero-byte WRITE, acknowledged by its QP); when a probe
   fails (its retries run out: about 2 s with the default ACK timeout and retry count) the
   connection is broken and the get fails with OMC_ERR_CONNECTION instead of waiting for its
   deadline. */
OMC__PRIVATE omc_result omc__rdmap_liveness(omc__rdma_plane* P, omc__rdma_chan* ch) {
    uint64_t ticks;
    omc_result r = OMC_OK;
    uint32_t p;
    if (ch->timer >= 0 && read(ch->timer, &ticks, sizeof(ticks)) < 0) { /* spurious wake-up */ }
    for (p = 0; p < OMC_RDMA_MAX_RAILS && r == OMC_OK; p++) {     /* one probe per pair of rails */
        if (ch->probe[p]) {
            r = omc_rdma_op_test(ch->probe[p], omc_now_ns());
            if (r == OMC_ERR_BUSY) r = OMC_OK;      /* still in flight: the next tick looks again */
            else {
                ch->probe[p] = NULL;
                /* a probe that failed on one rail took that rail of the connection down; while
                   another rail works the sender is alive and the transfer goes on */
                if (r != OMC_OK && omc_rdma_conn_ok(ch->conn)) r = OMC_OK;
            }
        }
        if (r == OMC_OK && !ch->probe[p] && omc_rdma_conn_ok(ch->conn) && p < omc__rdma_conn_pairs(ch->conn))
            r = omc__rdma_probe_start(ch->conn, p, &ch->probe[p]);
    }
    if (r == OMC_OK && omc_rdma_conn_ok(ch->conn)) return OMC_OK;
    if (P->conn) omc__conn_fail(P->conn, OMC_ERR_CONNECTION, "RDMA: the sender stopped answering during a transfer (%s): it died "
                                "or its link is down", r == OMC_OK ? "connection broken" : omc_result_str(r));
    return OMC_ERR_CONNECTION;
}

static omc_result omc__rdmap_rx_open(void* user, void** chan) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_chan* ch = (omc__rdma_chan*)omc__calloc(&P->hooks, sizeof(omc__rdma_chan));
    if (!ch) return OMC_ERR_NO_MEMORY;
    /* without a connection the channel still opens: rx_ready then sends it to TCP */
    if (P->eng && omc_rdma_conn_create(P->eng, &ch->conn) != OMC_OK) ch->conn = NULL;
    ch->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);     /* -1: no probes, as before */
    *chan = ch;
    return OMC_OK;
}

static omc_result omc__rdmap_rx_hello(void* user, void* chan, uint8_t* out, uint32_t cap, uint32_t* out_len) {
    omc__rdma_chan* ch = (omc__rdma_chan*)chan;
    size_t n = 0;
    omc_result r;
    (void)user;
    *out_len = 0;
    if (!ch->conn) return OMC_OK;
    r = omc_rdma_conn_record(ch->conn, out, cap, &n);
    *out_len = (uint32_t)n;
    return r;
}

static omc_result omc__rdmap_rx_ready(void* user, void* chan, const omc__dp_peer* peer, omc_time_ns deadline) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_chan* ch = (omc__rdma_chan*)chan;
    omc_result r;
    (void)deadline;
    if (!P->eng) r = OMC_ERR_UNAVAILABLE;
    else if (!ch->conn) r = OMC_ERR_RDMA_QP;
    else if (!peer->record) r = OMC_ERR_UNAVAILABLE;
    else r = omc_rdma_conn_connect(ch->conn, peer->record, peer->record_len);
    if (r == OMC_OK) {
        omc_rdma_conn_info ci;
        ch->connected = 1;
        omc_rdma_conn_query(ch->conn, &ci);
        pthread_mutex_lock(&P->mu);
        if (ci.rails_up == ci.rails) P->rejoin_backoff_ms = 0;     /* every rail came back: start over */
        P->rdma_channels++;
        pthread_mutex_unlock(&P->mu);
        return OMC_OK;
    }
    pthread_mutex_lock(&P->mu);
    P->tcp_fallbacks++;
    pthread_mutex_unlock(&P->mu);
    if (!P->eng) omc__rdmap_fallback(P, OMC_ERR_UNAVAILABLE, "sender %s:%u: TCP (%s)", peer->host, peer->port, P->reason);
    else if (!ch->conn) omc__rdmap_fallback(P, r, "sender %s:%u: TCP (no RDMA connection could be created: see the log)", peer->host, peer->port);
    else if (!peer->record) omc__rdmap_fallback(P, OMC_ERR_UNAVAILABLE, "sender %s:%u: TCP (it offers no RDMA, or its RDMA "
                                                "bring-up failed: see its health)", peer->host, peer->port);
    else omc__rdmap_fallback(P, r, "sender %s:%u: TCP (RDMA connection failed: %s; the log has the details)", peer->host,
                             peer->port, omc_result_str(r));
    return OMC_ERR_UNAVAILABLE;     /* this channel only: the connector switches it to TCP */
}

/* Did the connection lose a pair of rails whose rail of ours is up again? (QPs cannot be
   revived without a new exchange of records: the connection must be replaced to use it.) */
OMC__PRIVATE int omc__rdma_conn_rail_back(omc_rdma_conn* c) {
    omc_rdma* E = c->eng;
    uint32_t p;
    int back = 0;
    pthread_mutex_lock(&E->mu);
    for (p = 0; p < c->npairs && !back; p++)
        back = !c->pair[p].up && c->pair[p].error != OMC_OK && c->pair[p].rail < E->nrails && E->rail[c->pair[p].rail].up;
    pthread_mutex_unlock(&E->mu);
    return back;
}

/* A channel is reused while its connection works - unless it lost a rail that is back: then it
   is replaced (the next get sends a new HELLO and gets QPs on every rail), at most once per
   back-off, which doubles while replacements keep losing rails. */
static int omc__rdmap_rx_reusable(void* user, void* chan) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_chan* ch = (omc__rdma_chan*)chan;
    omc_time_ns now;
    int replace = 0;
    if (!ch->connected || !omc_rdma_conn_ok(ch->conn)) return 0;
    if (!omc__rdma_conn_rail_back(ch->conn)) return 1;
    now = omc_now_ns();
    pthread_mutex_lock(&P->mu);
    if (now >= P->rejoin_next) {
        if (!P->rejoin_backoff_ms) P->rejoin_backoff_ms = OMC__RDMAP_REJOIN_MIN_MS;
        P->rejoin_next = now + (omc_time_ns)P->rejoin_backoff_ms * 1000000LL;
        P->rejoin_backoff_ms = (uint32_t)omc__min(2u * P->rejoin_backoff_ms, (uint32_t)OMC__RDMAP_REJOIN_MAX_MS);
        replace = 1;
    }
    pthread_mutex_unlock(&P->mu);
    if (replace) OMC__LOG(&P->hooks, OMC_LOG_INFO, OMC_LOGITEM_RDMA, "an RDMA connection lost a rail that is up again: the channel is "
                          "replaced to use it");
    return !replace;
}

static omc_result omc__rdmap_rx_prepare(void* user, void* chan, omc__dp_xfer* x, omc_time_ns deadline, uint8_t* desc,
                                        uint32_t cap, uint32_t* desc_len) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_chan* ch = (omc__rdma_chan*)chan;
    size_t n = 0;
    omc_result r;
    *desc_len = 0;
    if (ch->win) { omc__rdmap_revoke(P, ch, NULL, deadline); }
    /* exactly the bytes announced: the peer's window ends where the payload ends */
    r = omc_rdma_expose(ch->conn, x->dst.data, x->size ? x->size : 1, deadline, &ch->win, desc, cap, &n);
    *desc_len = (uint32_t)n;
    if (r == OMC_OK) omc__rdmap_timer(ch, OMC__RDMAP_PROBE_MS);
    return omc__rdmap_boundary(P, r, "expose");
}

/* Writes land silently; the fd is the channel's probe timer: it wakes the connector's wait so
   that rx_progress can probe the sender and notice that it is gone. */
static int omc__rdmap_rx_fd(void* user, void* chan) { (void)user; return ((omc__rdma_chan*)chan)->timer; }

static omc_result omc__rdmap_rx_progress(void* user, void* chan, omc__dp_xfer* x, int done_received) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_chan* ch = (omc__rdma_chan*)chan;
    if (!done_received) return omc__rdmap_liveness(P, ch);
    omc__rdmap_timer(ch, 0);
    omc__rdmap_probe_end(ch);
    /* DONE: the sender's write completed, so every byte is in place. Close the window before
       the buffer goes to the caller; if that fails the range is quarantined (never handed out
       again) and the get fails. */
    if (ch->win && omc__rdmap_revoke(P, ch, x, omc_deadline_after_ms(OMC__RDMA_FLUSH_GRACE_MS)) != OMC_OK) return OMC_ERR_CONNECTION;
    x->received = x->size;
    x->complete = 1;
    return OMC_OK;
}

static void omc__rdmap_rx_end(void* user, void* chan, omc__dp_xfer* x, omc_result r) {
    omc__rdma_chan* ch = (omc__rdma_chan*)chan;
    (void)r;
    omc__rdmap_timer(ch, 0);
    omc__rdmap_probe_end(ch);
    if (ch->win) omc__rdmap_revoke((omc__rdma_plane*)user, ch, x, omc_deadline_after_ms(OMC__RDMA_FLUSH_GRACE_MS));
}

static void omc__rdmap_rx_close(void* user, void* chan) {
    omc__rdma_plane* P = (omc__rdma_plane*)user;
    omc__rdma_chan* ch = (omc__rdma_chan*)chan;
    if (!ch) return;
    omc__rdmap_probe_end(ch);
    if (ch->timer >= 0) close(ch->timer);
    if (ch->win) omc__rdmap_revoke(P, ch, NULL, omc_deadline_after_ms(OMC__RDMA_FLUSH_GRACE_MS));
    if (ch->conn) omc_rdma_conn_destroy(ch->conn);
    omc__free(&P->hooks, ch);
}

static const omc__dp_vtable omc__rdma_plane_vt = {
    "rdma", OMC__DP_RDMA, OMC_NET_CAP_RDMA, 0, omc__rdmap_attach, omc__rdmap_detach,
    omc__rdmap_tx_hello, omc__rdmap_tx_push,
    omc__rdmap_rx_open, omc__rdmap_rx_hello, omc__rdmap_rx_ready, omc__rdmap_rx_reusable, omc__rdmap_rx_prepare,
    omc__rdmap_rx_fd, omc__rdmap_rx_progress, omc__rdmap_rx_end, omc__rdmap_rx_close, NULL
};

OMNICONN_API omc_result omc_rdma_connector_create(const omc_rdma_connector_desc* desc, omc_conn** out) {
    omc_rdma_connector_desc d;
    omc__rdma_plane* P;
    omc__dataplane extra;
    omc_hooks hooks;
    uint8_t probe[16];
    int detached = 0;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.net.hooks);
    P = (omc__rdma_plane*)omc__calloc(&hooks, sizeof(omc__rdma_plane));
    if (!P) return OMC_ERR_NO_MEMORY;
    P->hooks = hooks;
    if (pthread_mutex_init(&P->mu, NULL) != 0) { omc__free(&hooks, P); return OMC_ERR_SYSTEM; }
    if (!d.rdma.hooks.log_fn && !d.rdma.hooks.alloc_fn && !d.rdma.hooks.user_data && !d.rdma.hooks.max_level) d.rdma.hooks = d.net.hooks;
    if (!d.rdma.local_addr && d.net.host && omc_rdma_addr_to_gid(d.net.host, probe) == OMC_OK) d.rdma.local_addr = d.net.host;
    r = omc_rdma_create(&d.rdma, &P->eng);
    if (r != OMC_OK) {
        if (d.require_rdma) { pthread_mutex_destroy(&P->mu); omc__free(&hooks, P); return r; }
        snprintf(P->reason, sizeof(P->reason), "RDMA off: the engine did not start (%s; the log says why): every peer uses TCP",
                 omc_result_str(r));
        P->eng = NULL;
    }
    P->detached = &detached;
    extra.vt = &omc__rdma_plane_vt;
    extra.user = P;
    r = omc__net_create(&d.net, OMC_TRANSPORT_RDMA, &extra, out);
    if (r != OMC_OK) {
        if (!detached) {            /* never attached: the plane is still ours to free */
            if (P->eng) omc_rdma_destroy(P->eng);
            pthread_mutex_destroy(&P->mu);
            omc__free(&hooks, P);
        }
        return r;
    }
    P->detached = NULL;
    if (d.require_rdma && !P->eng) {   /* attach turned it off (registration failed) */
        omc_conn_destroy(*out);
        *out = NULL;
        return OMC_ERR_UNAVAILABLE;
    }
    if (P->reason[0]) omc__conn_fail(*out, OMC_ERR_UNAVAILABLE, "%s", P->reason);
    return OMC_OK;
}

OMNICONN_API omc_result omc_rdma_pipeline_connector(const struct omc_tcp_desc* net, const char* device_name, const char* local_addr,
                                                    int require_rdma, omc_conn** out) {
    omc_rdma_connector_desc rd;
    if (!net) { if (out) *out = NULL; return OMC_ERR_INVALID_ARG; }
    memset(&rd, 0, sizeof(rd));
    rd.net = *net;
    rd.rdma.devices = device_name && device_name[0] ? device_name : NULL;
    rd.rdma.hooks = net->hooks;
    rd.rdma.local_addr = local_addr;
    rd.require_rdma = require_rdma;
    return omc_rdma_connector_create(&rd, out);
}
__attribute__((constructor)) static void omc__rdma_offer_connector(void) {
    omc__offer(OMC__OFFER_RDMA_CONNECTOR, (omc__fn)omc_rdma_pipeline_connector);
}

OMNICONN_API omc_result omc_rdma_connector_query(omc_conn* conn, omc_rdma_connector_info* out) {
    omc__rdma_plane* P;
    omc__rdma_link* l;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!conn) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&omc__rdma_planes_mu);
    for (P = omc__rdma_planes; P && P->conn != conn; P = P->next) {}
    if (P) {
        pthread_mutex_lock(&P->mu);
        out->rdma_enabled = P->eng != NULL;
        snprintf(out->reason, sizeof(out->reason), "%s", P->reason);
        snprintf(out->last_fallback, sizeof(out->last_fallback), "%s", P->last_fallback);
        out->rdma_channels = P->rdma_channels;
        out->tcp_fallbacks = P->tcp_fallbacks;
        out->accepted = P->accepted;
        out->accept_failures = P->accept_failures;
        out->pushes = P->pushes;
        out->push_failures = P->push_failures;
        out->push_bytes = P->push_bytes;
        out->quarantined = P->quarantined;
        for (l = P->links; l; l = l->next) out->sender_connections++;
        pthread_mutex_unlock(&P->mu);
        if (P->eng) omc_rdma_query(P->eng, &out->engine);
    }
    pthread_mutex_unlock(&omc__rdma_planes_mu);
    return P ? OMC_OK : OMC_ERR_INVALID_ARG;
}

OMNICONN_API int omc_rdma_connector_rail_stats(omc_conn* conn, omc_rdma_rail_stat* out, int cap) {
    omc__rdma_plane* P;
    int r = OMC_ERR_INVALID_ARG;
    if (!conn) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&omc__rdma_planes_mu);
    for (P = omc__rdma_planes; P && P->conn != conn; P = P->next) {}
    if (P) r = P->eng ? omc_rdma_rail_stats(P->eng, out, cap) : OMC_ERR_UNAVAILABLE;
    pthread_mutex_unlock(&omc__rdma_planes_mu);
    return r;
}

#endif /* OMC__HAS_ZMQ */

#else /* !OMC__HAS_RDMA: the same API, reporting that it is not there */

OMC__PRIVATE omc_result omc__rdma_absent(const omc_hooks* h) {
    omc_hooks hooks = omc__hooks_resolve(h);
    OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_RDMA, "RDMA was not compiled in (OMNICONN_NO_RDMA is defined)");
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_rdma_probe(const char* library, char* why, size_t why_size) {
    (void)library;
    omc__why(why, why_size, "RDMA was not compiled in (OMNICONN_NO_RDMA is defined)");
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_rdma_create(const omc_rdma_desc* desc, omc_rdma** out) {
    if (out) *out = NULL;
    return omc__rdma_absent(desc ? &desc->hooks : NULL);
}
OMNICONN_API void omc_rdma_destroy(omc_rdma* eng) { (void)eng; }
OMNICONN_API omc_result omc_rdma_query(omc_rdma* eng, omc_rdma_info* out) {
    (void)eng;
    if (out) memset(out, 0, sizeof(*out));
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API int omc_rdma_rail_stats(omc_rdma* eng, omc_rdma_rail_stat* out, int cap) {
    (void)eng; (void)out; (void)cap;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_region_hooks omc_rdma_region_hooks(omc_rdma* eng) {
    omc_region_hooks h;
    (void)eng;
    memset(&h, 0, sizeof(h));
    return h;
}
OMNICONN_API omc_result omc_rdma_register(omc_rdma* eng, void* base, uint64_t size) { (void)eng; (void)base; (void)size; return OMC_ERR_UNAVAILABLE; }
OMNICONN_API omc_result omc_rdma_deregister(omc_rdma* eng, void* base) { (void)eng; (void)base; return OMC_ERR_UNAVAILABLE; }
OMNICONN_API omc_result omc_rdma_conn_create(omc_rdma* eng, omc_rdma_conn** out) { (void)eng; if (out) *out = NULL; return OMC_ERR_UNAVAILABLE; }
OMNICONN_API omc_result omc_rdma_conn_accept(omc_rdma* eng, const void* rec, size_t len, omc_rdma_conn** out) {
    (void)eng; (void)rec; (void)len;
    if (out) *out = NULL;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_rdma_conn_connect(omc_rdma_conn* c, const void* rec, size_t len) { (void)c; (void)rec; (void)len; return OMC_ERR_UNAVAILABLE; }
OMNICONN_API omc_result omc_rdma_conn_record(omc_rdma_conn* c, void* out, size_t cap, size_t* len) {
    (void)c; (void)out; (void)cap;
    if (len) *len = 0;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API int omc_rdma_conn_ok(omc_rdma_conn* c) { (void)c; return 0; }
OMNICONN_API omc_result omc_rdma_conn_query(omc_rdma_conn* c, omc_rdma_conn_info* out) {
    (void)c;
    if (out) memset(out, 0, sizeof(*out));
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API void omc_rdma_conn_destroy(omc_rdma_conn* c) { (void)c; }
OMNICONN_API omc_result omc_rdma_expose(omc_rdma_conn* c, void* dst, uint64_t length, omc_time_ns deadline, omc_rdma_window** out,
                                        void* desc, size_t desc_cap, size_t* desc_len) {
    (void)c; (void)dst; (void)length; (void)deadline; (void)desc; (void)desc_cap;
    if (out) *out = NULL;
    if (desc_len) *desc_len = 0;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_rdma_revoke(omc_rdma_window* w, omc_time_ns deadline) { (void)w; (void)deadline; return OMC_ERR_UNAVAILABLE; }
OMNICONN_API omc_result omc_rdma_write(omc_rdma_conn* c, const omc_rdma_sge* src, uint32_t count, const void* desc, size_t desc_len,
                                       omc_time_ns deadline) {
    (void)c; (void)src; (void)count; (void)desc; (void)desc_len; (void)deadline;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_rdma_write_start(omc_rdma_conn* c, const omc_rdma_sge* src, uint32_t count, const void* desc,
                                             size_t desc_len, omc_time_ns deadline, omc_rdma_op** out) {
    (void)c; (void)src; (void)count; (void)desc; (void)desc_len; (void)deadline;
    if (out) *out = NULL;
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API omc_result omc_rdma_op_wait(omc_rdma_op* op, omc_time_ns deadline) { (void)op; (void)deadline; return OMC_ERR_UNAVAILABLE; }
OMNICONN_API omc_result omc_rdma_op_test(omc_rdma_op* op, omc_time_ns deadline) { (void)op; (void)deadline; return OMC_ERR_UNAVAILABLE; }

#if OMC__HAS_ZMQ     /* ZMQ without RDMA (OMNICONN_NO_RDMA): the connector cannot exist */
OMNICONN_API omc_result omc_rdma_connector_create(const omc_rdma_connector_desc* desc, omc_conn** out) {
    if (out) *out = NULL;
    return omc__rdma_absent(desc ? &desc->net.hooks : NULL);
}
OMNICONN_API omc_result omc_rdma_pipeline_connector(const struct omc_tcp_desc* net, const char* device_name, const char* local_addr,
                                                    int require_rdma, omc_conn** out) {
    (void)device_name; (void)local_addr; (void)require_rdma;
    if (out) *out = NULL;
    return omc__rdma_absent(net ? &net->hooks : NULL);
}
OMNICONN_API omc_result omc_rdma_connector_query(omc_conn* conn, omc_rdma_connector_info* out) {
    (void)conn;
    if (out) memset(out, 0, sizeof(*out));
    return OMC_ERR_UNAVAILABLE;
}
OMNICONN_API int omc_rdma_connector_rail_stats(omc_conn* conn, omc_rdma_rail_stat* out, int cap) {
    (void)conn; (void)out; (void)cap;
    return OMC_ERR_UNAVAILABLE;
}
#endif

#endif /* OMC__HAS_RDMA */

/* the transfer engine's sockets (plain POSIX; the listener is its own) */
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - descriptor codec (pure)                            */
/* ============================================================================================== */

OMNICONN_API omc_result omc_xfer_descriptor_encode(const omc_xfer_descriptor* d, void* out, size_t cap, size_t* out_len) {
    uint8_t* p = (uint8_t*)out;
    size_t hl, need, off;
    uint32_t i, k;
    if (out_len) *out_len = 0;
    if (!d || !out || !out_len) return OMC_ERR_INVALID_ARG;
    hl = strlen(d->host);
    if (!hl || hl > 63 || d->port == 0 || d->port > 65535 || d->rails > OMC_RDMA_MAX_RAILS || d->count > OMC_XFER_MAX_RANGES ||
        !d->incarnation)
        return OMC_ERR_INVALID_ARG;
    need = OMC_XFER_DESC_HEADER + hl + (size_t)d->count * (OMC_XFER_DESC_RANGE + 4u * d->rails) + 4;
    if (cap < need) return OMC_ERR_TOO_LARGE;
    memset(p, 0, need);
    omc__put_u32(p + 0, OMC_XFER_DESC_MAGIC);
    p[4] = OMC_XFER_DESC_VERSION;
    p[5] = (uint8_t)d->rails;
    omc__put_u16(p + 6, (uint16_t)d->count);
    omc__put_u64(p + 8, d->incarnation);
    omc__put_u16(p + 16, (uint16_t)d->port);
    p[18] = (uint8_t)hl;
    memcpy(p + OMC_XFER_DESC_HEADER, d->host, hl);
    off = OMC_XFER_DESC_HEADER + hl;
    for (i = 0; i < d->count; i++) {
        const omc_xfer_range* r = &d->range[i];
        if (!r->length || r->addr > UINT64_MAX - r->length) return OMC_ERR_INVALID_ARG;
        omc__put_u64(p + off, r->addr);
        omc__put_u64(p + off + 8, r->length);
        omc__put_u32(p + off + 16, r->id);
        off += OMC_XFER_DESC_RANGE;
        for (k = 0; k < d->rails; k++, off += 4) omc__put_u32(p + off, r->rkey[k]);
    }
    omc__put_u32(p + off, omc__crc32c(0, p, off));
    *out_len = need;
    return OMC_OK;
}

OMNICONN_API omc_result omc_xfer_descriptor_decode(const void* data, size_t len, omc_xfer_descriptor* out) {
    const uint8_t* p = (const uint8_t*)data;
    size_t hl, need, off;
    uint32_t i, k, rails, count;
    if (!out) return OMC_ERR_INVALID_ARG;
    memset(out, 0, sizeof(*out));
    if (!p || len < OMC_XFER_DESC_HEADER + 1 + 4) return OMC_ERR_MALFORMED;
    if (omc__get_u32(p) != OMC_XFER_DESC_MAGIC) return OMC_ERR_MALFORMED;
    if (p[4] != OMC_XFER_DESC_VERSION) return OMC_ERR_VERSION;
    rails = p[5];
    count = omc__get_u16(p + 6);
    hl = p[18];
    if (rails > OMC_RDMA_MAX_RAILS || count > OMC_XFER_MAX_RANGES || hl == 0 || hl > 63 || p[19] != 0 || omc__get_u32(p + 20) != 0)
        return OMC_ERR_MALFORMED;
    need = OMC_XFER_DESC_HEADER + hl + (size_t)count * (OMC_XFER_DESC_RANGE + 4u * rails) + 4;
    if (len != need) return OMC_ERR_MALFORMED;
    if (omc__crc32c(0, p, need - 4) != omc__get_u32(p + need - 4)) return OMC_ERR_CHECKSUM;
    out->incarnation = omc__get_u64(p + 8);
    out->port = omc__get_u16(p + 16);
    if (!out->incarnation || !out->port) return OMC_ERR_MALFORMED;
    for (i = 0; i < hl; i++) {              /* printable text, no NUL, no spaces */
        uint8_t c = p[OMC_XFER_DESC_HEADER + i];
        if (c <= 0x20 || c >= 0x7f) return OMC_ERR_MALFORMED;
        out->host[i] = (char)c;
    }
    out->host[hl] = '\0';
    out->rails = rails;
    off = OMC_XFER_DESC_HEADER + hl;
    for (i = 0; i < count; i++) {
        omc_xfer_range* r = &out->range[i];
        r->addr = omc__get_u64(p + off);
        r->length = omc__get_u64(p + off + 8);
        r->id = omc__get_u32(p + off + 16);
        if (!r->length || r->addr > UINT64_MAX - r->length || omc__get_u32(p + off + 20) != 0) return OMC_ERR_MALFORMED;
        off += OMC_XFER_DESC_RANGE;
        for (k = 0; k < rails; k++, off += 4) r->rkey[k] = omc__get_u32(p + off);
    }
    out->count = count;
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - objects and socket helpers                         */
/* ============================================================================================== */
/*
    One omc_xfer owns: the verbs engine (or none: TCP), the table of registered ranges, the RPC
    listener (an accept thread and one thread per client, at most max_clients), the queue of
    received notifications and the batches' threads. One mutex (mu) guards the ranges, the
    clients, the queue and the batch states; cv wakes whoever waits for a batch to end or for a
    range to be free of listener requests.

    The wire formats (the descriptor, the RPC requests and answers) are in the manual at the
    top, WIRE FORMATS.
*/

enum { OMC__XRPC_HELLO = 1, OMC__XRPC_READ = 2, OMC__XRPC_WRITE = 3, OMC__XRPC_NOTIFY = 4, OMC__XRPC_RDMA_CONNECT = 5,
       OMC__XRPC_CHALLENGE = 6, OMC__XRPC_AUTH = 7 };
#define OMC__XFER_NONCE 16              /* the listener's challenge */
#define OMC__XFER_MAC 32                /* HMAC-SHA-256 */
#define OMC__XFER_KEY_LEN 40            /* a Z85 CURVE key */
#define OMC__XFER_CHALLENGE_LEN (4 + OMC__XFER_NONCE)                  /* u16 CURVE port, u16 0, nonce */
#define OMC__XFER_GRANT_LEN (16 + OMC__XFER_MAC)                       /* session nonce, grant, 0, secret */
#define OMC__XFER_DRAIN_MAX ((uint64_t)64 << 20)
#define OMC__XFER_POLL_MS 50            /* how often a blocked transfer looks at its cancel flag */
#define OMC__XFER_IO_STEP ((uint64_t)4 << 20)   /* the listener's I/O timeout applies per step of this */
#define OMC__XFER_HELD 32               /* answers the listener gathers while more requests are waiting */

typedef struct omc__xfer_region {
    uint8_t* base;
    uint64_t size;
    uint32_t id;
    uint32_t users;             /* batches of this engine that use it as local memory */
    uint32_t serving;           /* listener requests reading or writing it now */
    int device;
} omc__xfer_region;

typedef struct omc__xfer_client {
    omc_xfer* x;
    int fd;
    int state;                  /* 0 free, 1 running, 2 ended (join it) */
    pthread_t thread;
    char name[OMC_XFER_NAME_MAX];
#if OMC__HAS_RDMA
    omc_rdma_conn* conn;        /* accepted for this client (RDMA_CONNECT) */
#endif
    uint8_t held[OMC__XFER_HELD * OMC_XFER_RPC_HEADER];    /* answers without bytes, not sent yet */
    uint32_t nheld;
    int challenged, authed;     /* CURVE on: a challenge was sent / answered */
    uint32_t grant;             /* authenticated: the ranges granted are those with id <= grant */
    uint8_t nonce[OMC__XFER_NONCE];
} omc__xfer_client;

struct omc_xfer {
    omc_hooks hooks;
    char host[OMC_XFER_HOST_MAX];
    uint32_t port;
    char name[OMC_XFER_NAME_MAX];
    omc_xfer_transport transport;       /* resolved */
    char why_tcp[256];
    uint32_t max_clients, max_notifies, io_timeout_ms, window;
    uint64_t incarnation;
    omc_rdma* rdma;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    omc__xfer_region* regions;
    uint32_t nregions, next_id;
    int lfd;
    pthread_t accept_thread;
    int accepting, stop;
    omc__xfer_client* clients;
    omc_xfer_notif** notifs;    /* ring of max_notifies */
    uint32_t nhead, ncount;
    uint32_t running;           /* batch threads still running */
    omc_xfer_batch* live;       /* those batches */
    uint64_t batches, batch_failures, bytes_read, bytes_written, served_reads, served_writes, served_bytes, refused,
             notifies, notifies_dropped, auth_failures;
    /* CURVE (see "transfer engine - CURVE") */
    int curve_server, curve_client;
    char curve_secret[OMC__XFER_KEY_LEN + 1], curve_public[OMC__XFER_KEY_LEN + 1], server_key[OMC__XFER_KEY_LEN + 1];
    uint8_t master[OMC__XFER_MAC];      /* session secrets derive from it; never leaves the engine */
    uint32_t curve_port;
    void* zctx;
    void* zrouter;
    void* zmon;                 /* the router's monitor: failed handshakes */
    pthread_t zthread;
    int zrunning;
};

struct omc_xfer_peer {
    omc_xfer* x;
    char name[OMC_XFER_NAME_MAX];
    pthread_mutex_t io;         /* the socket: one batch (or call) at a time */
    int fd;                     /* -1: not connected */
    omc_xfer_descriptor* d;     /* under x->mu */
    uint32_t batches;           /* running (under x->mu) */
    const int* cancel;          /* the cancel flag of the batch holding io (NULL: none) */
    int tcp_only;               /* RDMA could not connect to it (default transport): TCP */
#if OMC__HAS_RDMA
    omc_rdma_conn* conn;
    uint8_t pair_rail[OMC_RDMA_MAX_RAILS];  /* the peer's rail behind each pair */
#endif
};

struct omc_xfer_batch {
    omc_xfer_peer* peer;
    omc_xfer_op op;
    uint32_t count;
    omc_xfer_entry* e;
    omc_result* status;
    uint32_t* lregion;          /* local region id per entry */
    uint32_t* rrange;           /* index of the remote range per entry */
    uint8_t* notify;
    uint32_t notify_len;
    omc_time_ns deadline;
    pthread_t thread;
    int done, joined;           /* under x->mu */
    int cancel;                 /* atomic */
    omc_result result;
    uint64_t bytes;
    omc_xfer_batch* next;       /* on x->live while its thread runs */
#if OMC__HAS_RDMA
    struct omc__rdma_slice* slices;
    uint32_t nslices, rr;
    int slices_given;           /* the engine gave up on the operation and owns the slices now */
    uint32_t (*lkey)[OMC_RDMA_MAX_RAILS];
    uint32_t (*rkey)[OMC_RDMA_MAX_RAILS];
#endif
};

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
OMC__PRIVATE void omc__xfer_log(omc_xfer* x, omc_log_level level, int line, const char* fmt, ...) {
    char msg[900];
    va_list ap;
    if (x->hooks.log_fn && (int)level > (int)(x->hooks.max_level ? x->hooks.max_level : OMC_LOG_WARN)) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    omc__log_emit(&x->hooks, level, OMC_LOGITEM_NET, __FILE__, line, msg);
}
#define OMC__XFER_LOG(x, level, ...) omc__xfer_log((x), (level), __LINE__, __VA_ARGS__)

/* Move n bytes on a socket before deadline (0 = no deadline), looking at *cancel every
   OMC__XFER_POLL_MS. OMC_ERR_TIMEOUT, OMC_ERR_CLOSED (cancelled), OMC_ERR_CONNECTION (closed or
   failed). *moved (may be NULL) counts what did move. */
OMC__PRIVATE omc_result omc__xfer_io(int fd, void* buf, size_t n, int sending, omc_time_ns deadline, const int* cancel, size_t* moved) {
    uint8_t* p = (uint8_t*)buf;
    size_t done = 0;
    omc_result r = OMC_OK;
    while (done < n) {
        struct pollfd pf;
        ssize_t k;
        int wait_ms = OMC__XFER_POLL_MS * 20;
        if (cancel && omc__load(cancel)) { r = OMC_ERR_CLOSED; break; }
        /* try first: on a busy connection the bytes are usually there (or the buffer has room) */
        k = sending ? send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p + done, n - done, MSG_DONTWAIT);
        if (k > 0) { done += (size_t)k; continue; }
        if (k == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) { r = OMC_ERR_CONNECTION; break; }
        if (deadline) {
            omc_time_ns now = omc_now_ns();
            if (now >= deadline) { r = OMC_ERR_TIMEOUT; break; }
            if ((deadline - now) / 1000000 < wait_ms) wait_ms = (int)((deadline - now) / 1000000) + 1;
        }
        if (cancel && wait_ms > OMC__XFER_POLL_MS) wait_ms = OMC__XFER_POLL_MS;
        pf.fd = fd;
        pf.events = (short)(sending ? POLLOUT : POLLIN);
        pf.revents = 0;
        if (poll(&pf, 1, wait_ms) < 0) {
            if (errno == EINTR) continue;
            r = OMC_ERR_CONNECTION;
            break;
        }
        if (!pf.revents) continue;
        k = sending ? send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p + done, n - done, MSG_DONTWAIT);
        if (k > 0) { done += (size_t)k; continue; }
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        r = OMC_ERR_CONNECTION;
        break;
    }
    if (moved) *moved = done;
    return r;
}

/* A header and its bytes in one system call when the socket takes them (then the rest as usual). */
OMC__PRIVATE omc_result omc__xfer_send2(int fd, const void* a, size_t na, const void* b, size_t nb, omc_time_ns deadline, const int* cancel) {
    struct iovec iov[2];
    struct msghdr m;
    ssize_t k;
    omc_result r;
    iov[0].iov_base = (void*)(uintptr_t)a;
    iov[0].iov_len = na;
    iov[1].iov_base = (void*)(uintptr_t)b;
    iov[1].iov_len = nb;
    memset(&m, 0, sizeof(m));
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    k = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return OMC_ERR_CONNECTION;
        k = 0;
    }
    if ((size_t)k < na) {
        r = omc__xfer_io(fd, (uint8_t*)(uintptr_t)a + k, na - (size_t)k, 1, deadline, cancel, NULL);
        if (r != OMC_OK) return r;
        k = 0;
    } else k -= (ssize_t)na;
    return (size_t)k < nb ? omc__xfer_io(fd, (uint8_t*)(uintptr_t)b + k, nb - (size_t)k, 1, deadline, cancel, NULL) : OMC_OK;
}

OMC__PRIVATE void omc__xfer_header(uint8_t* h, uint32_t magic, int type, uint32_t num, uint32_t word, uint64_t a, uint64_t len) {
    memset(h, 0, OMC_XFER_RPC_HEADER);
    omc__put_u32(h, magic);
    h[4] = OMC_XFER_RPC_VERSION;
    h[5] = (uint8_t)type;
    omc__put_u32(h + 8, num);
    omc__put_u32(h + 12, word);
    omc__put_u64(h + 16, a);
    omc__put_u64(h + 24, len);
}

/* "host:port" or "[v6]:port" -> host, port. */
OMC__PRIVATE omc_result omc__xfer_split_name(const char* name, char* host, size_t cap, uint32_t* port) {
    const char* colon;
    const char* h = name;
    size_t hl;
    char* end = NULL;
    unsigned long pv;
    if (!name || !name[0]) return OMC_ERR_INVALID_ARG;
    colon = strrchr(name, ':');
    if (!colon || !colon[1]) return OMC_ERR_INVALID_ARG;
    hl = (size_t)(colon - name);
    if (name[0] == '[') {
        if (hl < 3 || name[hl - 1] != ']') return OMC_ERR_INVALID_ARG;
        h = name + 1;
        hl -= 2;
    }
    if (!hl || hl >= cap) return OMC_ERR_INVALID_ARG;
    pv = strtoul(colon + 1, &end, 10);
    if (!end || *end || pv == 0 || pv > 65535) return OMC_ERR_INVALID_ARG;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint32_t)pv;
    return OMC_OK;
}

/* Connect to host:port before deadline (or until *cancel, if given); TCP_NODELAY. */
OMC__PRIVATE omc_result omc__xfer_dial_until(const char* host, uint32_t port, omc_time_ns deadline, const int* cancel, int* out) {
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    omc_result r = OMC_ERR_CONNECTION;
    *out = -1;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof(ps), "%u", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0) return OMC_ERR_CONNECTION;
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol), one = 1, err = 0;
        socklen_t el = sizeof(err);
        struct pollfd pf;
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) { close(fd); continue; }
        pf.fd = fd;
        pf.events = POLLOUT;
        pf.revents = 0;
        for (;;) {
            omc_time_ns now = omc_now_ns();
            int ms = deadline ? (now >= deadline ? 0 : (int)omc__min((uint64_t)(deadline - now) / 1000000 + 1, 60000u)) : 60000;
            int k;
            if (cancel && omc__load(cancel)) { r = OMC_ERR_CLOSED; err = -1; break; }
            k = poll(&pf, 1, cancel && ms > OMC__XFER_POLL_MS ? OMC__XFER_POLL_MS : ms);
            if (k < 0 && errno == EINTR) continue;
            if (k == 0 && ms > OMC__XFER_POLL_MS && cancel) continue;     /* only a slice of the wait */
            if (k <= 0) { r = OMC_ERR_TIMEOUT; err = -1; }
            break;
        }
        if (!err && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)) { if (r != OMC_ERR_TIMEOUT) r = OMC_ERR_CONNECTION; err = -1; }
        if (err) { close(fd); if (r == OMC_ERR_TIMEOUT || r == OMC_ERR_CLOSED) break; continue; }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        *out = fd;
        r = OMC_OK;
        break;
    }
    freeaddrinfo(res);
    return r;
}

/* The registered range that holds [a, a + len) (caller holds mu), or NULL. */
OMC__PRIVATE omc__xfer_region* omc__xfer_find(omc_xfer* x, uint64_t a, uint64_t len) {
    uint32_t i;
    for (i = 0; i < x->nregions; i++) {
        omc__xfer_region* g = &x->regions[i];
        uint64_t b = (uint64_t)(uintptr_t)g->base;
        if (a >= b && a - b <= g->size && len <= g->size - (a - b)) return g;
    }
    return NULL;
}

OMC__PRIVATE omc__xfer_region* omc__xfer_by_id(omc_xfer* x, uint32_t id) {
    uint32_t i;
    for (i = 0; i < x->nregions; i++) if (x->regions[i].id == id) return &x->regions[i];
    return NULL;
}
/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - registration and the descriptor                    */
/* ============================================================================================== */

OMNICONN_API omc_result omc_xfer_register(omc_xfer* x, void* addr, uint64_t length, uint32_t flags) {
    omc__xfer_region g;
    uint32_t i;
    omc_result r = OMC_OK;
    if (!x || !addr || !length || (uintptr_t)addr > UINTPTR_MAX - length || (flags & ~OMC_XFER_MEM_DEVICE)) return OMC_ERR_INVALID_ARG;
    if ((flags & OMC_XFER_MEM_DEVICE) && (!OMC__HAS_CUDA || !x->rdma)) {
        /* GPU memory goes to the adapter as a dma-buf (ibv_reg_dmabuf_mr): a build with CUDA and
           a verbs engine; over TCP the listener would have to copy through the host */
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "cannot register device memory [%p, +%llu): %s", addr, (unsigned long long)length,
                      !OMC__HAS_CUDA ? "this build has no CUDA (define OMNICONN_ENABLE_CUDA)" :
                      "device memory needs the RDMA transport (GPUDirect RDMA with dma-buf)");
        return OMC_ERR_UNAVAILABLE;
    }
    pthread_mutex_lock(&x->mu);
    for (i = 0; i < x->nregions; i++) {
        const omc__xfer_region* o = &x->regions[i];
        if ((uint8_t*)addr < o->base + o->size && o->base < (uint8_t*)addr + length) r = OMC_ERR_EXISTS;
    }
    if (r == OMC_OK && x->nregions == OMC_XFER_MAX_RANGES) r = OMC_ERR_TOO_LARGE;
    pthread_mutex_unlock(&x->mu);
    if (r != OMC_OK) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "register [%p, +%llu): %s", addr, (unsigned long long)length,
                      r == OMC_ERR_EXISTS ? "overlaps a registered range" : "too many registered ranges");
        return r;
    }
#if OMC__HAS_RDMA
    /* one MR per rail for the whole range (a peer addresses it with one key per rail); remote
       READ and WRITE: a peer that holds the descriptor may touch every byte of it, as with
       Mooncake's and NIXL's registrations */
    if (x->rdma) {
        int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
#if OMC__HAS_CUDA
        if (flags & OMC_XFER_MEM_DEVICE) r = omc__rdma_register_dmabuf(x->rdma, addr, length, access);
        else
#endif
        r = omc__rdma_register_as(x->rdma, addr, length, access, 0);
        if (r != OMC_OK) return r;
    }
#endif
    memset(&g, 0, sizeof(g));
    g.base = (uint8_t*)addr;
    g.size = length;
    g.device = (flags & OMC_XFER_MEM_DEVICE) != 0;
    pthread_mutex_lock(&x->mu);
    g.id = ++x->next_id;
    x->regions[x->nregions++] = g;
    pthread_mutex_unlock(&x->mu);
    OMC__XFER_LOG(x, OMC_LOG_INFO, "registered [%p, +%llu) as range %u", addr, (unsigned long long)length, g.id);
    return OMC_OK;
}

OMNICONN_API omc_result omc_xfer_unregister(omc_xfer* x, void* addr) {
    omc__xfer_region g;
    uint32_t i;
    if (!x || !addr) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&x->mu);
    for (i = 0; i < x->nregions; i++) if (x->regions[i].base == (uint8_t*)addr) break;
    if (i == x->nregions) { pthread_mutex_unlock(&x->mu); return OMC_ERR_NOT_FOUND; }
    if (x->regions[i].users) {
        uint32_t users = x->regions[i].users;
        pthread_mutex_unlock(&x->mu);
        OMC__XFER_LOG(x, OMC_LOG_WARN, "unregister %p: %u running batch%s use%s it; it stays registered", addr, users,
                      users == 1 ? "" : "es", users == 1 ? "s" : "");
        return OMC_ERR_BUSY;
    }
    /* requests being served from it finish first (each is bounded by the I/O timeout) */
    while (x->regions[i].serving) {
        pthread_cond_wait(&x->cv, &x->mu);
        for (i = 0; i < x->nregions; i++) if (x->regions[i].base == (uint8_t*)addr) break;
        if (i == x->nregions) { pthread_mutex_unlock(&x->mu); return OMC_ERR_NOT_FOUND; }
    }
    g = x->regions[i];
    x->regions[i] = x->regions[--x->nregions];
    pthread_mutex_unlock(&x->mu);
#if OMC__HAS_RDMA
    if (x->rdma) omc_rdma_deregister(x->rdma, addr);
#endif
    OMC__XFER_LOG(x, OMC_LOG_INFO, "unregistered range %u [%p, +%llu)", g.id, addr, (unsigned long long)g.size);
    return OMC_OK;
}

/* This engine's descriptor (caller holds mu). */
OMC__PRIVATE void omc__xfer_describe(omc_xfer* x, omc_xfer_descriptor* d) {
    uint32_t i;
    memset(d, 0, sizeof(*d));
    d->incarnation = x->incarnation;
    snprintf(d->host, sizeof(d->host), "%s", x->host);
    d->port = x->port;
    d->count = x->nregions;
#if OMC__HAS_RDMA
    if (x->rdma) {
        omc_rdma* E = x->rdma;
        d->rails = E->nrails;
        pthread_mutex_lock(&E->mu);
        for (i = 0; i < x->nregions; i++) {
            omc__rdma_region* g = omc__rdma_find(E, x->regions[i].base, x->regions[i].size);
            uint32_t k;
            for (k = 0; g && k < E->nrails; k++) d->range[i].rkey[k] = g->mr[k * g->count]->rkey;
        }
        pthread_mutex_unlock(&E->mu);
    }
#endif
    for (i = 0; i < x->nregions; i++) {
        d->range[i].addr = (uint64_t)(uintptr_t)x->regions[i].base;
        d->range[i].length = x->regions[i].size;
        d->range[i].id = x->regions[i].id;
    }
}

OMNICONN_API omc_result omc_xfer_export(omc_xfer* x, void* out, size_t cap, size_t* out_len) {
    omc_xfer_descriptor* d;
    omc_result r;
    if (out_len) *out_len = 0;
    if (!x || !out || !out_len) return OMC_ERR_INVALID_ARG;
    d = (omc_xfer_descriptor*)omc__malloc(&x->hooks, sizeof(*d));
    if (!d) return OMC_ERR_NO_MEMORY;
    pthread_mutex_lock(&x->mu);
    omc__xfer_describe(x, d);
    pthread_mutex_unlock(&x->mu);
    r = omc_xfer_descriptor_encode(d, out, cap, out_len);
    omc__free(&x->hooks, d);
    return r;
}

/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - CURVE on the descriptor exchange                   */
/* ============================================================================================== */
/*
    With curve.secret_key the engine runs a second socket beside its RPC listener: a ZMQ ROUTER
    with CURVE (libzmq's Curve25519 handshake and encryption), on curve_port. The descriptor
    exchange (HELLO) runs only there. Its answer grants a session: a random session nonce, the
    highest range id the descriptor lists (the grant) and a session secret, HMAC(master, nonce,
    grant), where master is 32 random bytes that never leave the engine. The secret crosses only
    inside CURVE.

    The plain listener then serves a connection only after it proved it holds a secret: the
    client asks for a CHALLENGE (the answer carries the CURVE port and 16 fresh random bytes),
    and answers with AUTH: session nonce and grant in the header, HMAC(secret, challenge) as
    payload. The listener recomputes the secret from its master, compares in constant time and
    from then on serves READ and WRITE only in ranges with id <= grant. Every other request on an
    unauthenticated connection is answered OMC_ERR_AUTH and the connection closed. No secret
    crosses in clear, and a recorded AUTH is worthless on another connection (new challenge).

    libzmq is loaded here with dlopen, as the core loads it (the core's loader is not part of
    the companion interface). The MAC is HMAC-SHA-256 (FIPS 180-4, RFC 2104), the core's.
*/

OMC__PRIVATE int omc__xfer_mac_equal(const uint8_t* a, const uint8_t* b) {
    return omc__equal_ct(a, b, OMC__XFER_MAC);
}

/* The secret of a session (nonce, grant): only the engine holding master can compute it. */
OMC__PRIVATE void omc__xfer_session_secret(const omc_xfer* x, uint64_t nonce, uint32_t grant, uint8_t out[OMC__XFER_MAC]) {
    uint8_t m[12 + 8 + 4 + 8];
    const void* part[1];
    size_t len[1];
    memcpy(m, "omc-xfer-ses", 12);
    omc__put_u64(m + 12, nonce);
    omc__put_u32(m + 20, grant);
    omc__put_u64(m + 24, x->incarnation);
    part[0] = m;
    len[0] = sizeof(m);
    omc__hmac_sha256(x->master, sizeof(x->master), part, len, 1, out);
}

/* What a client shows for a challenge. */
OMC__PRIVATE void omc__xfer_proof(const uint8_t* secret, const uint8_t* challenge, uint8_t out[OMC__XFER_MAC]) {
    const void* part[2];
    size_t len[2];
    part[0] = "omc-xfer-auth";
    len[0] = 13;
    part[1] = challenge;
    len[1] = OMC__XFER_NONCE;
    omc__hmac_sha256(secret, OMC__XFER_MAC, part, len, 2, out);
}

/* ---- libzmq, loaded at run time ---- */
#if OMC__HAS_ZMQ
#include <dlfcn.h>
#ifndef OMNICONN_ZMQ_LIBRARY
#define OMNICONN_ZMQ_LIBRARY "libzmq.so.5"
#endif
enum { OMC__XZ_DEALER = 5, OMC__XZ_ROUTER = 6, OMC__XZ_RCVMORE = 13, OMC__XZ_LINGER = 17, OMC__XZ_MAXMSGSIZE = 22,
       OMC__XZ_RCVTIMEO = 27, OMC__XZ_SNDTIMEO = 28, OMC__XZ_LAST_ENDPOINT = 32, OMC__XZ_IPV6 = 42, OMC__XZ_CURVE_SERVER = 47,
       OMC__XZ_CURVE_PUBLICKEY = 48, OMC__XZ_CURVE_SECRETKEY = 49, OMC__XZ_CURVE_SERVERKEY = 50, OMC__XZ_SNDMORE = 2,
       OMC__XZ_DONTWAIT = 1, OMC__XZ_PAIR = 0, OMC__XZ_EVENTS_FAILED = 0x0800 | 0x2000 | 0x4000 };
typedef struct omc__xz_table {
    void* (*ctx_new)(void);
    int (*ctx_term)(void*);
    void* (*socket)(void*, int);
    int (*close)(void*);
    int (*setsockopt)(void*, int, const void*, size_t);
    int (*getsockopt)(void*, int, void*, size_t*);
    int (*bind)(void*, const char*);
    int (*connect)(void*, const char*);
    int (*send)(void*, const void*, size_t, int);
    int (*recv)(void*, void*, size_t, int);
    int (*curve_public)(char*, const char*);
    int (*curve_keypair)(char*, char*);
    uint8_t* (*z85_decode)(uint8_t*, const char*);
    int (*has)(const char*);
    int (*socket_monitor)(void*, const char*, int);
} omc__xz_table;
static omc__xz_table omc__xz;
static int omc__xz_loaded;
static pthread_mutex_t omc__xz_mu = PTHREAD_MUTEX_INITIALIZER;

OMC__PRIVATE omc_result omc__xz_load(omc_xfer* x) {
    static const char* const names[] = {"zmq_ctx_new", "zmq_ctx_term", "zmq_socket", "zmq_close", "zmq_setsockopt", "zmq_getsockopt",
                                        "zmq_bind", "zmq_connect", "zmq_send", "zmq_recv", "zmq_curve_public", "zmq_curve_keypair",
                                        "zmq_z85_decode", "zmq_has", "zmq_socket_monitor"};
    const char* env = getenv("OMNICONN_ZMQ_LIB");
    const char* name = env && env[0] ? env : OMNICONN_ZMQ_LIBRARY;
    void* fns[sizeof(names) / sizeof(names[0])];
    void* lib;
    size_t i;
    if (omc__load(&omc__xz_loaded)) return OMC_OK;
    pthread_mutex_lock(&omc__xz_mu);
    if (omc__load(&omc__xz_loaded)) { pthread_mutex_unlock(&omc__xz_mu); return OMC_OK; }
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    for (i = 0; lib && i < sizeof(names) / sizeof(names[0]); i++) if (!(fns[i] = dlsym(lib, names[i]))) break;
    if (!lib || i < sizeof(names) / sizeof(names[0])) {
        const char* e = dlerror();
        pthread_mutex_unlock(&omc__xz_mu);
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "CURVE keys given, but %s cannot be used (%s): install Debian's libzmq5", name, e ? e : "symbol missing");
        return OMC_ERR_UNAVAILABLE;
    }
    /* ISO C has no object-to-function pointer conversion; POSIX guarantees the bytes fit */
    memcpy(&omc__xz.ctx_new, &fns[0], sizeof(void*));
    memcpy(&omc__xz.ctx_term, &fns[1], sizeof(void*));
    memcpy(&omc__xz.socket, &fns[2], sizeof(void*));
    memcpy(&omc__xz.close, &fns[3], sizeof(void*));
    memcpy(&omc__xz.setsockopt, &fns[4], sizeof(void*));
    memcpy(&omc__xz.getsockopt, &fns[5], sizeof(void*));
    memcpy(&omc__xz.bind, &fns[6], sizeof(void*));
    memcpy(&omc__xz.connect, &fns[7], sizeof(void*));
    memcpy(&omc__xz.send, &fns[8], sizeof(void*));
    memcpy(&omc__xz.recv, &fns[9], sizeof(void*));
    memcpy(&omc__xz.curve_public, &fns[10], sizeof(void*));
    memcpy(&omc__xz.curve_keypair, &fns[11], sizeof(void*));
    memcpy(&omc__xz.z85_decode, &fns[12], sizeof(void*));
    memcpy(&omc__xz.has, &fns[13], sizeof(void*));
    memcpy(&omc__xz.socket_monitor, &fns[14], sizeof(void*));
    omc__store(&omc__xz_loaded, 1);
    pthread_mutex_unlock(&omc__xz_mu);
    if (!omc__xz.has("curve")) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "CURVE keys given, but this libzmq was built without CURVE (libsodium)");
        return OMC_ERR_UNAVAILABLE;
    }
    return OMC_OK;
}

OMC__PRIVATE int omc__xz_key_ok(const char* k) {
    uint8_t bin[32];
    return k && strlen(k) == OMC__XFER_KEY_LEN && omc__xz.z85_decode(bin, k) != NULL;
}

OMC__PRIVATE void omc__xz_endpoint(char* out, size_t cap, const char* host, uint32_t port) {
    if (port) snprintf(out, cap, strchr(host, ':') ? "tcp://[%s]:%u" : "tcp://%s:%u", host, port);
    else snprintf(out, cap, strchr(host, ':') ? "tcp://[%s]:*" : "tcp://%s:*", host);
}

/* Keys from the environment when the desc has none: $OMNICONN_XFER_SECRET_KEY_FILE and
   $OMNICONN_XFER_SERVER_KEY_FILE name files that hold one Z85 key each (omc_tcp_read_key). */
OMC__PRIVATE omc_result omc__xfer_curve_env(omc_xfer* x, omc_xfer_curve* cv, char* sec, char* srv) {
    const char* names[2] = {"OMNICONN_XFER_SECRET_KEY_FILE", "OMNICONN_XFER_SERVER_KEY_FILE"};
    char* keys[2];
    int i;
    keys[0] = sec;
    keys[1] = srv;
    for (i = 0; i < 2; i++) {
        const char* path = getenv(names[i]);
        omc_result r;
        if (!path || !path[0]) continue;
        r = omc_tcp_read_key(path, keys[i]);
        if (r != OMC_OK) {
            OMC__XFER_LOG(x, OMC_LOG_ERROR, "$%s=%s: %s (a file with one 40-character Z85 key)", names[i], path, omc_result_name(r));
            return r == OMC_ERR_UNAVAILABLE ? r : OMC_ERR_INVALID_ARG;
        }
        if (i == 0) cv->secret_key = sec; else cv->server_key = srv;
    }
    return OMC_OK;
}

/* Keys from the desc (or the environment): validated and copied (caller: before the listener
   starts). */
OMC__PRIVATE omc_result omc__xfer_curve_setup(omc_xfer* x, const omc_xfer_curve* desc_cv) {
    char sec[OMC__XFER_KEY_LEN + 1], srv[OMC__XFER_KEY_LEN + 1];
    omc_xfer_curve env_cv, *cv = &env_cv;
    omc_result r;
    env_cv = *desc_cv;
    if (!cv->secret_key && !cv->public_key && !cv->server_key && (r = omc__xfer_curve_env(x, cv, sec, srv)) != OMC_OK) return r;
    if (!cv->secret_key && !cv->public_key && !cv->server_key) return OMC_OK;
    if ((r = omc__xz_load(x)) != OMC_OK) return r;
    if ((cv->secret_key && !omc__xz_key_ok(cv->secret_key)) || (cv->public_key && !omc__xz_key_ok(cv->public_key)) ||
        (cv->server_key && !omc__xz_key_ok(cv->server_key)) || (cv->public_key && !cv->secret_key)) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "omc_xfer_desc.curve: every key is 40 characters of Z85 text, and a public key needs its secret key");
        return OMC_ERR_INVALID_ARG;
    }
    if (cv->secret_key) {
        snprintf(x->curve_secret, sizeof(x->curve_secret), "%s", cv->secret_key);
        if (cv->public_key) snprintf(x->curve_public, sizeof(x->curve_public), "%s", cv->public_key);
        else if (omc__xz.curve_public(x->curve_public, x->curve_secret) != 0) return OMC_ERR_INVALID_ARG;
        x->curve_server = 1;
    } else if (omc__xz.curve_keypair(x->curve_public, x->curve_secret) != 0) return OMC_ERR_UNAVAILABLE;
    if (cv->server_key) {
        snprintf(x->server_key, sizeof(x->server_key), "%s", cv->server_key);
        x->curve_client = 1;
    }
    omc__random_bytes(x->master, sizeof(x->master));
    x->zctx = omc__xz.ctx_new();
    return x->zctx ? OMC_OK : OMC_ERR_SYSTEM;
}

/* The CURVE HELLO: answer with the descriptor and a session (nonce, grant, secret). */
OMC__PRIVATE void omc__xfer_zmq_hello(omc_xfer* x, const uint8_t* id, size_t idlen, const uint8_t* req, size_t n) {
    uint8_t* out = (uint8_t*)omc__malloc(&x->hooks, OMC_XFER_RPC_HEADER + OMC__XFER_GRANT_LEN + OMC_XFER_DESC_MAX);
    omc_xfer_descriptor* d = (omc_xfer_descriptor*)omc__malloc(&x->hooks, sizeof(*d));
    omc_result st = OMC_OK;
    uint64_t nonce = omc__random_u64();
    uint32_t grant = 0, i;
    size_t dl = 0;
    if (!out || !d) { omc__free(&x->hooks, out); omc__free(&x->hooks, d); return; }
    if (n < OMC_XFER_RPC_HEADER || omc__get_u32(req) != OMC_XFER_RPC_MAGIC || req[4] != OMC_XFER_RPC_VERSION || req[5] != OMC__XRPC_HELLO ||
        omc__get_u64(req + 24) != n - OMC_XFER_RPC_HEADER || n - OMC_XFER_RPC_HEADER == 0 || n - OMC_XFER_RPC_HEADER >= OMC_XFER_NAME_MAX)
        st = OMC_ERR_MALFORMED;
    for (i = OMC_XFER_RPC_HEADER; st == OMC_OK && i < n; i++) if (req[i] <= 0x20 || req[i] >= 0x7f) st = OMC_ERR_MALFORMED;
    if (st == OMC_OK) {
        pthread_mutex_lock(&x->mu);
        omc__xfer_describe(x, d);
        grant = x->next_id;
        pthread_mutex_unlock(&x->mu);
        st = omc_xfer_descriptor_encode(d, out + OMC_XFER_RPC_HEADER + OMC__XFER_GRANT_LEN, OMC_XFER_DESC_MAX, &dl);
    }
    if (st == OMC_OK) {
        uint8_t* g = out + OMC_XFER_RPC_HEADER;
        memset(g, 0, OMC__XFER_GRANT_LEN);
        omc__put_u64(g, nonce);
        omc__put_u32(g + 8, grant);
        omc__xfer_session_secret(x, nonce, grant, g + 16);
        dl += OMC__XFER_GRANT_LEN;
        OMC__XFER_LOG(x, OMC_LOG_INFO, "listener %s: descriptor exchange over CURVE with %.*s (ranges up to id %u granted)", x->name,
                      (int)(n - OMC_XFER_RPC_HEADER), (const char*)req + OMC_XFER_RPC_HEADER, grant);
    } else {
        dl = 0;
        pthread_mutex_lock(&x->mu);
        x->refused++;
        pthread_mutex_unlock(&x->mu);
        OMC__XFER_LOG(x, OMC_LOG_WARN, "listener %s: refused a malformed HELLO of %zu bytes on the CURVE port", x->name, n);
    }
    omc__xfer_header(out, OMC_XFER_RPC_ANSWER, OMC__XRPC_HELLO, n >= 12 ? omc__get_u32(req + 8) : 0, (uint32_t)(int32_t)st, x->incarnation, dl);
    if (omc__xz.send(x->zrouter, id, idlen, OMC__XZ_SNDMORE) >= 0) omc__xz.send(x->zrouter, out, OMC_XFER_RPC_HEADER + dl, 0);
    omc__free(&x->hooks, out);
    omc__free(&x->hooks, d);
}

/* Failed CURVE handshakes (a client with a wrong key, or none, on the CURVE port): counted and
   logged from the socket's monitor. */
OMC__PRIVATE void omc__xfer_zmq_events(omc_xfer* x) {
    uint8_t ev[6];
    char addr[128];
    int more = 0;
    size_t ml = sizeof(more);
    while (x->zmon && omc__xz.recv(x->zmon, ev, sizeof(ev), OMC__XZ_DONTWAIT) >= 0) {
        int k = -1;
        if (omc__xz.getsockopt(x->zmon, OMC__XZ_RCVMORE, &more, &ml) == 0 && more) k = omc__xz.recv(x->zmon, addr, sizeof(addr) - 1, 0);
        addr[k > 0 && k < (int)sizeof(addr) ? k : 0] = '\0';
        uint64_t n;
        pthread_mutex_lock(&x->mu);
        x->refused++;
        n = ++x->auth_failures;
        pthread_mutex_unlock(&x->mu);
        /* a client with a wrong key retries its handshake every 100 ms: the first few, then every 100th */
        if (n <= 4 || n % 100 == 0)
            OMC__XFER_LOG(x, OMC_LOG_WARN, "listener %s: a CURVE handshake on the exchange port failed (event 0x%x, %s): a client without "
                          "this engine's public key was refused (%llu so far)", x->name, (unsigned)omc__get_u16(ev), addr[0] ? addr : "?",
                          (unsigned long long)n);
    }
}

static void* omc__xfer_zmq_main(void* arg) {
    omc_xfer* x = (omc_xfer*)arg;
    uint8_t id[256], req[OMC_XFER_RPC_HEADER + OMC_XFER_NAME_MAX], junk[64];
    while (!omc__load(&x->stop)) {
        omc__xfer_zmq_events(x);
        int more = 0, k = omc__xz.recv(x->zrouter, id, sizeof(id), 0), n = -1;
        size_t ml = sizeof(more);
        if (k < 0) continue;            /* the receive timeout: look at stop */
        if (omc__xz.getsockopt(x->zrouter, OMC__XZ_RCVMORE, &more, &ml) == 0 && more) n = omc__xz.recv(x->zrouter, req, sizeof(req), 0);
        for (;;) {                      /* frames beyond the request: drop them */
            more = 0;
            ml = sizeof(more);
            if (omc__xz.getsockopt(x->zrouter, OMC__XZ_RCVMORE, &more, &ml) != 0 || !more) break;
            omc__xz.recv(x->zrouter, junk, sizeof(junk), 0);
            n = -1;
        }
        if (k > (int)sizeof(id) || n < 0) continue;
        omc__xfer_zmq_hello(x, id, (size_t)k, req, (size_t)n > sizeof(req) ? sizeof(req) + 1 : (size_t)n);
    }
    return NULL;
}

/* The CURVE socket of the exchange, bound on host:curve_port, and its thread. */
OMC__PRIVATE omc_result omc__xfer_curve_listen(omc_xfer* x, uint32_t port) {
    char ep[OMC_XFER_HOST_MAX + 32], last[OMC_XFER_HOST_MAX + 32];
    int one = 1, zero = 0, tmo = 100, six = strchr(x->host, ':') != NULL;
    int64_t maxmsg = 2048;              /* bounds the handshake commands too (CURVE INITIATE: ~300 bytes) */
    size_t ll = sizeof(last);
    const char* colon;
    if (!x->curve_server) return OMC_OK;
    x->zrouter = omc__xz.socket(x->zctx, OMC__XZ_ROUTER);
    if (!x->zrouter) return OMC_ERR_SYSTEM;
    omc__xz.setsockopt(x->zrouter, OMC__XZ_LINGER, &zero, sizeof(zero));
    omc__xz.setsockopt(x->zrouter, OMC__XZ_RCVTIMEO, &tmo, sizeof(tmo));
    omc__xz.setsockopt(x->zrouter, OMC__XZ_SNDTIMEO, &tmo, sizeof(tmo));
    omc__xz.setsockopt(x->zrouter, OMC__XZ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg));
    omc__xz.setsockopt(x->zrouter, OMC__XZ_IPV6, &six, sizeof(six));
    omc__xz.setsockopt(x->zrouter, OMC__XZ_CURVE_SERVER, &one, sizeof(one));
    omc__xz.setsockopt(x->zrouter, OMC__XZ_CURVE_SECRETKEY, x->curve_secret, OMC__XFER_KEY_LEN);
    omc__xz_endpoint(ep, sizeof(ep), x->host, port);
    if (omc__xz.bind(x->zrouter, ep) != 0 || omc__xz.getsockopt(x->zrouter, OMC__XZ_LAST_ENDPOINT, last, &ll) != 0 ||
        !(colon = strrchr(last, ':'))) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "listener: cannot bind the CURVE port %s: %s", ep, strerror(errno));
        return OMC_ERR_SYSTEM;
    }
    x->curve_port = (uint32_t)strtoul(colon + 1, NULL, 10);
    snprintf(ep, sizeof(ep), "inproc://omniconn-xfer-monitor-%p", (void*)x);
    if (omc__xz.socket_monitor(x->zrouter, ep, OMC__XZ_EVENTS_FAILED) == 0 && (x->zmon = omc__xz.socket(x->zctx, OMC__XZ_PAIR)) != NULL) {
        omc__xz.setsockopt(x->zmon, OMC__XZ_LINGER, &zero, sizeof(zero));
        if (omc__xz.connect(x->zmon, ep) != 0) { omc__xz.close(x->zmon); x->zmon = NULL; }
    }
    if (pthread_create(&x->zthread, NULL, omc__xfer_zmq_main, x) != 0) return OMC_ERR_SYSTEM;
    x->zrunning = 1;
    return OMC_OK;
}

OMC__PRIVATE void omc__xfer_curve_stop(omc_xfer* x) {
    if (x->zrunning) pthread_join(x->zthread, NULL);
    x->zrunning = 0;
    if (x->zmon) omc__xz.close(x->zmon);
    x->zmon = NULL;
    if (x->zrouter) { omc__xz.socket_monitor(x->zrouter, NULL, 0); omc__xz.close(x->zrouter); }
    x->zrouter = NULL;
    if (x->zctx) omc__xz.ctx_term(x->zctx);
    x->zctx = NULL;
}

/* The initiator's HELLO over CURVE to host:zport: the answer's status, incarnation, session
   grant (nonce, grant, secret: OMC__XFER_GRANT_LEN bytes) and the descriptor (*desc, *dlen). */
OMC__PRIVATE omc_result omc__xfer_curve_hello(omc_xfer_peer* P, const char* host, uint32_t zport, uint64_t want, omc_time_ns deadline,
                                              omc_result* st, uint64_t* inc, uint8_t* grant, uint8_t* desc, size_t* dlen) {
    omc_xfer* x = P->x;
    char ep[OMC_XFER_HOST_MAX + 32];
    uint8_t req[OMC_XFER_RPC_HEADER + OMC_XFER_NAME_MAX];
    uint8_t* ans = (uint8_t*)omc__malloc(&x->hooks, OMC_XFER_RPC_HEADER + OMC__XFER_GRANT_LEN + OMC_XFER_DESC_MAX + 1);
    size_t nl = strlen(x->name);
    int zero = 0, six = strchr(host, ':') != NULL, k = -1;
    void* s;
    omc_result r = OMC_OK;
    if (!ans) return OMC_ERR_NO_MEMORY;
    s = omc__xz.socket(x->zctx, OMC__XZ_DEALER);
    if (!s) { omc__free(&x->hooks, ans); return OMC_ERR_SYSTEM; }
    omc__xz.setsockopt(s, OMC__XZ_LINGER, &zero, sizeof(zero));
    omc__xz.setsockopt(s, OMC__XZ_IPV6, &six, sizeof(six));
    omc__xz.setsockopt(s, OMC__XZ_CURVE_SERVERKEY, x->server_key, OMC__XFER_KEY_LEN);
    omc__xz.setsockopt(s, OMC__XZ_CURVE_PUBLICKEY, x->curve_public, OMC__XFER_KEY_LEN);
    omc__xz.setsockopt(s, OMC__XZ_CURVE_SECRETKEY, x->curve_secret, OMC__XFER_KEY_LEN);
    omc__xz_endpoint(ep, sizeof(ep), host, zport);
    omc__xfer_header(req, OMC_XFER_RPC_MAGIC, OMC__XRPC_HELLO, 0, 0, want, nl);
    memcpy(req + OMC_XFER_RPC_HEADER, x->name, nl);
    if (omc__xz.connect(s, ep) != 0 || omc__xz.send(s, req, OMC_XFER_RPC_HEADER + nl, OMC__XZ_DONTWAIT) < 0) r = OMC_ERR_CONNECTION;
    while (r == OMC_OK) {               /* the answer, in steps that look at the deadline and the cancel flag */
        omc_time_ns now = omc_now_ns();
        int ms = OMC__XFER_POLL_MS;
        if (P->cancel && omc__load(P->cancel)) { r = OMC_ERR_CLOSED; break; }
        if (deadline && now >= deadline) {
            OMC__XFER_LOG(x, OMC_LOG_ERROR, "peer %s: no answer over CURVE from %s before the deadline: the CURVE handshake failed "
                          "(is curve.server_key that engine's public key?) or the peer is gone", P->name, ep);
            r = OMC_ERR_AUTH;
            break;
        }
        omc__xz.setsockopt(s, OMC__XZ_RCVTIMEO, &ms, sizeof(ms));
        k = omc__xz.recv(s, ans, OMC_XFER_RPC_HEADER + OMC__XFER_GRANT_LEN + OMC_XFER_DESC_MAX + 1, 0);
        if (k >= 0) break;
    }
    omc__xz.close(s);
    if (r == OMC_OK && (k < OMC_XFER_RPC_HEADER || k > OMC_XFER_RPC_HEADER + OMC__XFER_GRANT_LEN + OMC_XFER_DESC_MAX ||
                        omc__get_u32(ans) != OMC_XFER_RPC_ANSWER || ans[4] != OMC_XFER_RPC_VERSION || ans[5] != OMC__XRPC_HELLO ||
                        omc__get_u64(ans + 24) != (uint64_t)k - OMC_XFER_RPC_HEADER))
        r = OMC_ERR_PROTOCOL;
    if (r == OMC_OK) {
        *st = (omc_result)(int32_t)omc__get_u32(ans + 12);
        *inc = omc__get_u64(ans + 16);
        *dlen = 0;
        if (*st == OMC_OK && (size_t)k < OMC_XFER_RPC_HEADER + OMC__XFER_GRANT_LEN + OMC_XFER_DESC_HEADER) r = OMC_ERR_PROTOCOL;
        else if (*st == OMC_OK) {
            memcpy(grant, ans + OMC_XFER_RPC_HEADER, OMC__XFER_GRANT_LEN);
            *dlen = (size_t)k - OMC_XFER_RPC_HEADER - OMC__XFER_GRANT_LEN;
            memcpy(desc, ans + OMC_XFER_RPC_HEADER + OMC__XFER_GRANT_LEN, *dlen);
        }
    }
    omc__free(&x->hooks, ans);
    return r;
}
#else
OMC__PRIVATE omc_result omc__xfer_curve_setup(omc_xfer* x, const omc_xfer_curve* cv) {
    const char* e1 = getenv("OMNICONN_XFER_SECRET_KEY_FILE");
    const char* e2 = getenv("OMNICONN_XFER_SERVER_KEY_FILE");
    if (!cv->secret_key && !cv->public_key && !cv->server_key && !(e1 && e1[0]) && !(e2 && e2[0])) return OMC_OK;
    OMC__XFER_LOG(x, OMC_LOG_ERROR, "CURVE keys given, but this build has no ZMQ (OMNICONN_NO_ZMQ)");
    return OMC_ERR_UNAVAILABLE;
}
OMC__PRIVATE omc_result omc__xfer_curve_listen(omc_xfer* x, uint32_t port) { (void)x; (void)port; return OMC_OK; }
OMC__PRIVATE void omc__xfer_curve_stop(omc_xfer* x) { (void)x; }
OMC__PRIVATE omc_result omc__xfer_curve_hello(omc_xfer_peer* P, const char* host, uint32_t zport, uint64_t want, omc_time_ns deadline,
                                              omc_result* st, uint64_t* inc, uint8_t* grant, uint8_t* desc, size_t* dlen) {
    (void)P; (void)host; (void)zport; (void)want; (void)deadline; (void)st; (void)inc; (void)grant; (void)desc; (void)dlen;
    return OMC_ERR_UNAVAILABLE;
}
#endif

/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - the RPC listener (the target's side)               */
/* ============================================================================================== */

/* Send the answers gathered so far (before the listener waits for the next request, and before
   any other answer, so they keep their order). */
OMC__PRIVATE omc_result omc__xfer_flush(omc__xfer_client* cl) {
    omc_result r = OMC_OK;
    if (cl->nheld) r = omc__xfer_io(cl->fd, cl->held, cl->nheld, 1, omc_deadline_after_ms(cl->x->io_timeout_ms), NULL, NULL);
    cl->nheld = 0;
    return r;
}

/* An answer without bytes, gathered: several go out in one system call while requests keep coming. */
OMC__PRIVATE omc_result omc__xfer_answer_later(omc__xfer_client* cl, int type, uint32_t num, omc_result st) {
    if (cl->nheld + OMC_XFER_RPC_HEADER > sizeof(cl->held)) {
        omc_result r = omc__xfer_flush(cl);
        if (r != OMC_OK) return r;
    }
    omc__xfer_header(cl->held + cl->nheld, OMC_XFER_RPC_ANSWER, type, num, (uint32_t)(int32_t)st, cl->x->incarnation, 0);
    cl->nheld += OMC_XFER_RPC_HEADER;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__xfer_answer(omc__xfer_client* cl, int type, uint32_t num, omc_result st, const void* payload, uint64_t len) {
    uint8_t h[OMC_XFER_RPC_HEADER];
    omc_time_ns dl = omc_deadline_after_ms(cl->x->io_timeout_ms);
    omc_result r = omc__xfer_flush(cl);
    if (r != OMC_OK) return r;
    omc__xfer_header(h, OMC_XFER_RPC_ANSWER, type, num, (uint32_t)(int32_t)st, cl->x->incarnation, len);
    r = omc__xfer_io(cl->fd, h, sizeof(h), 1, dl, NULL, NULL);
    if (r == OMC_OK && payload && len) r = omc__xfer_io(cl->fd, (void*)(uintptr_t)payload, (size_t)len, 1, dl, NULL, NULL);
    return r;
}

/* Refuse a request (counted, logged at WARN: a peer that sends it is broken or hostile). */
OMC__PRIVATE void omc__xfer_refuse(omc__xfer_client* cl, omc_result st, const char* why) {
    omc_xfer* x = cl->x;
    pthread_mutex_lock(&x->mu);
    x->refused++;
    pthread_mutex_unlock(&x->mu);
    OMC__XFER_LOG(x, OMC_LOG_WARN, "listener %s: refused a request from %s: %s (%s)", x->name, cl->name[0] ? cl->name : "a client", why,
                  omc_result_name(st));
}

/* Read and drop n bytes (a refused WRITE's payload). */
OMC__PRIVATE omc_result omc__xfer_drain(omc__xfer_client* cl, uint64_t n) {
    uint8_t junk[4096];
    omc_time_ns dl = omc_deadline_after_ms(cl->x->io_timeout_ms);
    while (n) {
        size_t k = (size_t)omc__min(n, sizeof(junk));
        omc_result r = omc__xfer_io(cl->fd, junk, k, 0, dl, NULL, NULL);
        if (r != OMC_OK) return r;
        n -= k;
    }
    return OMC_OK;
}

/* READ or WRITE: check the range under mu and mark it in use, move the bytes straight from or
   into it, release it. Returns OMC_OK to go on with the connection, an error to close it. */
OMC__PRIVATE omc_result omc__xfer_serve_rw(omc__xfer_client* cl, int type, uint32_t num, uint32_t id, uint64_t a, uint64_t len) {
    omc_xfer* x = cl->x;
    omc__xfer_region* g;
    omc_result st = OMC_OK, r;
    uint8_t* mem = NULL;
    char why[160];
    pthread_mutex_lock(&x->mu);
    g = omc__xfer_by_id(x, id);
    if (!len) { st = OMC_ERR_MALFORMED; snprintf(why, sizeof(why), "a %s of 0 bytes", type == OMC__XRPC_READ ? "READ" : "WRITE"); }
    else if (x->curve_server && id > cl->grant) {
        st = OMC_ERR_AUTH;
        x->auth_failures++;
        snprintf(why, sizeof(why), "range %u is not among the ranges this client's descriptor exchange granted (up to %u)", id, cl->grant);
    } else if (!g) { st = OMC_ERR_STALE; snprintf(why, sizeof(why), "range %u is not registered (any more)", id); }
    else if (g->device) { st = OMC_ERR_UNAVAILABLE; snprintf(why, sizeof(why), "range %u is device memory: RDMA only", id); }
    else if (a < (uint64_t)(uintptr_t)g->base || a - (uint64_t)(uintptr_t)g->base > g->size || len > g->size - (a - (uint64_t)(uintptr_t)g->base)) {
        st = OMC_ERR_RDMA_ACCESS;
        snprintf(why, sizeof(why), "[0x%llx, +%llu) leaves range %u [%p, +%llu)", (unsigned long long)a, (unsigned long long)len, id,
                 (void*)g->base, (unsigned long long)g->size);
    } else {
        g->serving++;
        mem = (uint8_t*)(uintptr_t)a;
    }
    pthread_mutex_unlock(&x->mu);
    if (st != OMC_OK) {
        omc__xfer_refuse(cl, st, why);
        if (type == OMC__XRPC_WRITE) {
            if (len > OMC__XFER_DRAIN_MAX) return OMC_ERR_PROTOCOL;
            if ((r = omc__xfer_drain(cl, len)) != OMC_OK) return r;
        }
        return omc__xfer_answer_later(cl, type, num, st);
    }
    if (type == OMC__XRPC_READ && (r = omc__xfer_flush(cl)) != OMC_OK) return r;     /* the earlier answers first */
    {   /* in steps of OMC__XFER_IO_STEP, each with a fresh I/O timeout: a slow peer is not a dead one */
        uint64_t off = 0, step = omc__min(len, OMC__XFER_IO_STEP);
        if (type == OMC__XRPC_READ) {
            uint8_t h[OMC_XFER_RPC_HEADER];
            omc__xfer_header(h, OMC_XFER_RPC_ANSWER, type, num, 0, x->incarnation, len);
            r = omc__xfer_send2(cl->fd, h, sizeof(h), mem, (size_t)step, omc_deadline_after_ms(x->io_timeout_ms), NULL);
        } else {
            r = omc__xfer_io(cl->fd, mem, (size_t)step, 0, omc_deadline_after_ms(x->io_timeout_ms), NULL, NULL);
        }
        for (off = step; r == OMC_OK && off < len; off += step) {
            step = omc__min(len - off, OMC__XFER_IO_STEP);
            r = omc__xfer_io(cl->fd, mem + off, (size_t)step, type == OMC__XRPC_READ, omc_deadline_after_ms(x->io_timeout_ms), NULL, NULL);
        }
    }
    pthread_mutex_lock(&x->mu);
    g = omc__xfer_by_id(x, id);
    if (g) g->serving--;
    if (r == OMC_OK) {
        if (type == OMC__XRPC_READ) x->served_reads++; else x->served_writes++;
        x->served_bytes += len;
    }
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    if (r == OMC_OK && type == OMC__XRPC_WRITE) r = omc__xfer_answer_later(cl, type, num, OMC_OK);
    return r;
}

OMC__PRIVATE omc_result omc__xfer_serve_notify(omc__xfer_client* cl, uint32_t num, const uint8_t* msg, uint32_t len) {
    omc_xfer* x = cl->x;
    omc_xfer_notif* n = NULL;
    omc_result st = OMC_OK;
    pthread_mutex_lock(&x->mu);
    if (x->ncount == x->max_notifies) { st = OMC_ERR_BUSY; x->notifies_dropped++; }
    pthread_mutex_unlock(&x->mu);
    if (st == OMC_OK && !(n = (omc_xfer_notif*)omc__malloc(&x->hooks, sizeof(*n)))) st = OMC_ERR_NO_MEMORY;
    if (n) {
        snprintf(n->peer, sizeof(n->peer), "%s", cl->name);
        n->length = len;
        if (len) memcpy(n->data, msg, len);
        pthread_mutex_lock(&x->mu);
        if (x->ncount < x->max_notifies) {
            x->notifs[(x->nhead + x->ncount) % x->max_notifies] = n;
            x->ncount++;
            x->notifies++;
            n = NULL;
        } else { st = OMC_ERR_BUSY; x->notifies_dropped++; }
        pthread_mutex_unlock(&x->mu);
        omc__free(&x->hooks, n);
    }
    if (st != OMC_OK) OMC__XFER_LOG(x, OMC_LOG_WARN, "notification from %s refused: %s (queue of %u full: take them with omc_xfer_notifs)",
                                    cl->name, omc_result_name(st), x->max_notifies);
    return omc__xfer_answer(cl, OMC__XRPC_NOTIFY, num, st, NULL, 0);
}

OMC__PRIVATE omc_result omc__xfer_serve_rdma(omc__xfer_client* cl, uint32_t num, const uint8_t* rec, uint32_t len) {
#if OMC__HAS_RDMA
    omc_xfer* x = cl->x;
    uint8_t out[1 + OMC_RDMA_MAX_RAILS + OMC_RDMA_RECORD_MAX];
    size_t n = 0;
    omc_rdma_conn_info ci;
    omc_result st;
    uint32_t p;
    if (!x->rdma) return omc__xfer_answer(cl, OMC__XRPC_RDMA_CONNECT, num, OMC_ERR_UNAVAILABLE, NULL, 0);
    if (cl->conn) { omc_rdma_conn_destroy(cl->conn); cl->conn = NULL; }     /* the client reconnects */
    st = omc_rdma_conn_accept(x->rdma, rec, len, &cl->conn);
    if (st == OMC_OK) st = omc_rdma_conn_query(cl->conn, &ci);
    if (st == OMC_OK) {
        out[0] = (uint8_t)ci.rails;
        for (p = 0; p < ci.rails && p < OMC_RDMA_MAX_RAILS; p++) out[1 + p] = (uint8_t)ci.rail[p];
        st = omc_rdma_conn_record(cl->conn, out + 1 + ci.rails, sizeof(out) - 1 - ci.rails, &n);
        n += 1 + ci.rails;
    }
    if (st != OMC_OK) {
        if (cl->conn) { omc_rdma_conn_destroy(cl->conn); cl->conn = NULL; }
        OMC__XFER_LOG(x, OMC_LOG_WARN, "listener %s: RDMA connection for %s refused: %s", x->name, cl->name, omc_result_name(st));
        return omc__xfer_answer(cl, OMC__XRPC_RDMA_CONNECT, num, st, NULL, 0);
    }
    return omc__xfer_answer(cl, OMC__XRPC_RDMA_CONNECT, num, OMC_OK, out, n);
#else
    (void)rec; (void)len;
    return omc__xfer_answer(cl, OMC__XRPC_RDMA_CONNECT, num, OMC_ERR_UNAVAILABLE, NULL, 0);
#endif
}

/* HELLO: remember the caller's name, answer with this engine's descriptor (a caller that
   expects another engine learns it from the incarnation in the answer). */
OMC__PRIVATE omc_result omc__xfer_serve_hello(omc__xfer_client* cl, uint32_t num, const uint8_t* name, uint32_t len) {
    omc_xfer* x = cl->x;
    omc_xfer_descriptor* d;
    uint8_t* out;
    size_t n = 0;
    uint32_t i;
    omc_result r;
    for (i = 0; i < len; i++) if (name[i] <= 0x20 || name[i] >= 0x7f) break;
    if (i < len) {
        omc__xfer_refuse(cl, OMC_ERR_MALFORMED, "HELLO name is not printable text");
        omc__xfer_answer(cl, OMC__XRPC_HELLO, num, OMC_ERR_MALFORMED, NULL, 0);
        return OMC_ERR_MALFORMED;
    }
    memcpy(cl->name, name, len);
    cl->name[len] = '\0';
    d = (omc_xfer_descriptor*)omc__malloc(&x->hooks, sizeof(*d));
    out = (uint8_t*)omc__malloc(&x->hooks, OMC_XFER_DESC_MAX);
    r = d && out ? OMC_OK : OMC_ERR_NO_MEMORY;
    if (r == OMC_OK) {
        pthread_mutex_lock(&x->mu);
        omc__xfer_describe(x, d);
        pthread_mutex_unlock(&x->mu);
        r = omc_xfer_descriptor_encode(d, out, OMC_XFER_DESC_MAX, &n);
    }
    r = omc__xfer_answer(cl, OMC__XRPC_HELLO, num, r, r == OMC_OK ? out : NULL, r == OMC_OK ? n : 0);
    omc__free(&x->hooks, d);
    omc__free(&x->hooks, out);
    return r;
}

/* A connection of an engine with CURVE, before it authenticated: a CHALLENGE gets the CURVE port
   and fresh random bytes, an AUTH must prove a session secret for them; anything else (a client
   without the keys) is refused with OMC_ERR_AUTH and the connection closed. */
OMC__PRIVATE omc_result omc__xfer_serve_auth(omc__xfer_client* cl, int type, uint32_t num, uint32_t word, uint64_t a, uint64_t len) {
    omc_xfer* x = cl->x;
    uint8_t msg[OMC__XFER_CHALLENGE_LEN], proof[OMC__XFER_MAC], secret[OMC__XFER_MAC], want[OMC__XFER_MAC];
    const char* why = NULL;
    omc_result r;
    if (type == OMC__XRPC_CHALLENGE && !len && !cl->challenged) {
        omc__random_bytes(cl->nonce, sizeof(cl->nonce));
        cl->challenged = 1;
        omc__put_u16(msg, (uint16_t)x->curve_port);
        omc__put_u16(msg + 2, 0);
        memcpy(msg + 4, cl->nonce, OMC__XFER_NONCE);
        return omc__xfer_answer(cl, type, num, OMC_OK, msg, sizeof(msg));
    }
    if (type == OMC__XRPC_AUTH && cl->challenged && len == OMC__XFER_MAC) {
        r = omc__xfer_io(cl->fd, proof, sizeof(proof), 0, omc_deadline_after_ms(x->io_timeout_ms), NULL, NULL);
        if (r != OMC_OK) return r;
        omc__xfer_session_secret(x, a, word, secret);
        omc__xfer_proof(secret, cl->nonce, want);
        cl->challenged = 0;             /* one try per challenge */
        if (omc__xfer_mac_equal(proof, want)) {
            cl->authed = 1;
            cl->grant = word;
            return omc__xfer_answer(cl, type, num, OMC_OK, NULL, 0);
        }
        why = "its proof of a session secret is wrong (a forged or stale session)";
    }
    if (!why) why = type == OMC__XRPC_HELLO ? "this engine requires CURVE: the descriptor exchange runs on its CURVE port, for clients "
                                              "that know its public key (omc_xfer_desc.curve.server_key)"
                                            : "this engine requires CURVE, and the connection has not authenticated";
    pthread_mutex_lock(&x->mu);
    x->auth_failures++;
    pthread_mutex_unlock(&x->mu);
    omc__xfer_refuse(cl, OMC_ERR_AUTH, why);
    omc__xfer_answer(cl, type, num, OMC_ERR_AUTH, NULL, 0);
    return OMC_ERR_AUTH;
}

/* One request (its header in h). OMC_OK: serve the next; otherwise close the connection. */
OMC__PRIVATE omc_result omc__xfer_serve_one(omc__xfer_client* cl, const uint8_t* h) {
    omc_xfer* x = cl->x;
    int type = h[5];
    uint32_t num = omc__get_u32(h + 8), word = omc__get_u32(h + 12);
    uint64_t a = omc__get_u64(h + 16), len = omc__get_u64(h + 24);
    uint8_t small[OMC_XFER_NOTIFY_MAX > OMC_RDMA_RECORD_MAX ? OMC_XFER_NOTIFY_MAX : OMC_RDMA_RECORD_MAX];
    omc_result r;
    if (omc__get_u32(h) != OMC_XFER_RPC_MAGIC || omc__get_u16(h + 6) != 0) {
        omc__xfer_refuse(cl, OMC_ERR_PROTOCOL, "not a transfer-engine request (bad magic)");
        omc__xfer_answer(cl, 0, 0, OMC_ERR_PROTOCOL, NULL, 0);
        return OMC_ERR_PROTOCOL;
    }
    if (h[4] != OMC_XFER_RPC_VERSION) {
        omc__xfer_refuse(cl, OMC_ERR_VERSION, "unknown protocol version");
        omc__xfer_answer(cl, type, num, OMC_ERR_VERSION, NULL, 0);
        return OMC_ERR_VERSION;
    }
    if (x->curve_server && !cl->authed) return omc__xfer_serve_auth(cl, type, num, word, a, len);
    if (type == OMC__XRPC_CHALLENGE || type == OMC__XRPC_AUTH) {
        /* a client that insists on CURVE, at an engine without it: it logs why and hangs up */
        omc__xfer_answer(cl, type, num, OMC_ERR_UNAVAILABLE, NULL, 0);
        return len ? OMC_ERR_PROTOCOL : OMC_OK;
    }
    switch (type) {
        case OMC__XRPC_READ: case OMC__XRPC_WRITE:
            return omc__xfer_serve_rw(cl, type, num, word, a, len);
        case OMC__XRPC_HELLO: case OMC__XRPC_NOTIFY: case OMC__XRPC_RDMA_CONNECT: {
            uint64_t cap = type == OMC__XRPC_HELLO ? OMC_XFER_NAME_MAX - 1 : type == OMC__XRPC_NOTIFY ? OMC_XFER_NOTIFY_MAX : OMC_RDMA_RECORD_MAX;
            if (len > cap || (type == OMC__XRPC_HELLO && !len) || word) {
                omc__xfer_refuse(cl, OMC_ERR_MALFORMED, "payload size out of bounds");
                omc__xfer_answer(cl, type, num, OMC_ERR_MALFORMED, NULL, 0);
                return OMC_ERR_MALFORMED;
            }
            r = omc__xfer_io(cl->fd, small, (size_t)len, 0, omc_deadline_after_ms(x->io_timeout_ms), NULL, NULL);
            if (r != OMC_OK) return r;
            if (type == OMC__XRPC_NOTIFY) return omc__xfer_serve_notify(cl, num, small, (uint32_t)len);
            if (type == OMC__XRPC_RDMA_CONNECT) return omc__xfer_serve_rdma(cl, num, small, (uint32_t)len);
            return omc__xfer_serve_hello(cl, num, small, (uint32_t)len);
        }
        default:
            omc__xfer_refuse(cl, OMC_ERR_PROTOCOL, "unknown request type");
            omc__xfer_answer(cl, type, num, OMC_ERR_PROTOCOL, NULL, 0);
            return OMC_ERR_PROTOCOL;
    }
}

static void* omc__xfer_client_main(void* arg) {
    omc__xfer_client* cl = (omc__xfer_client*)arg;
    omc_xfer* x = cl->x;
    for (;;) {
        uint8_t h[OMC_XFER_RPC_HEADER];
        size_t got = 0;
        omc_result r;
        struct pollfd pf;
        ssize_t k = recv(cl->fd, h, sizeof(h), MSG_DONTWAIT);       /* the next request, if it is there */
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
        got = k > 0 ? (size_t)k : 0;
        if (!got) {
            /* idle between requests: send what is gathered, then wait without a deadline (destroy
               shuts the socket down to wake us) */
            if (omc__xfer_flush(cl) != OMC_OK) break;
            pf.fd = cl->fd;
            pf.events = POLLIN;
            pf.revents = 0;
            if (poll(&pf, 1, -1) < 0 && errno != EINTR) break;
            continue;
        }
        r = got < sizeof(h) ? omc__xfer_io(cl->fd, h + got, sizeof(h) - got, 0, omc_deadline_after_ms(x->io_timeout_ms), &x->stop, NULL)
                            : OMC_OK;
        if (r != OMC_OK) break;
        if (omc__xfer_serve_one(cl, h) != OMC_OK) break;
    }
#if OMC__HAS_RDMA
    if (cl->conn) { omc_rdma_conn_destroy(cl->conn); cl->conn = NULL; }
#endif
    pthread_mutex_lock(&x->mu);
    close(cl->fd);
    cl->fd = -1;
    cl->state = 2;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* Join the client threads that ended (caller holds mu). */
OMC__PRIVATE void omc__xfer_reap_clients(omc_xfer* x) {
    uint32_t i;
    for (i = 0; i < x->max_clients; i++)
        if (x->clients[i].state == 2) {
            pthread_join(x->clients[i].thread, NULL);
            memset(&x->clients[i], 0, sizeof(x->clients[i]));
            x->clients[i].fd = -1;
        }
}

static void* omc__xfer_accept_main(void* arg) {
    omc_xfer* x = (omc_xfer*)arg;
    for (;;) {
        int fd = accept(x->lfd, NULL, NULL), one = 1;
        uint32_t i;
        if (fd < 0) {
            if (omc__load(&x->stop)) break;
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
                if (errno == EMFILE || errno == ENFILE) poll(NULL, 0, 100);
                continue;
            }
            if (errno == EINVAL && omc__load(&x->stop)) break;
            OMC__XFER_LOG(x, OMC_LOG_ERROR, "listener %s: accept: %s; no more peers are served", x->name, strerror(errno));
            break;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_mutex_lock(&x->mu);
        omc__xfer_reap_clients(x);
        for (i = 0; i < x->max_clients; i++) if (x->clients[i].state == 0) break;
        if (i == x->max_clients || omc__load(&x->stop)) {
            x->refused++;
            pthread_mutex_unlock(&x->mu);
            OMC__XFER_LOG(x, OMC_LOG_WARN, "listener %s: %u clients already: a new connection is closed", x->name, x->max_clients);
            close(fd);
            continue;
        }
        x->clients[i].x = x;
        x->clients[i].fd = fd;
        x->clients[i].state = 1;
        x->clients[i].name[0] = '\0';
        if (pthread_create(&x->clients[i].thread, NULL, omc__xfer_client_main, &x->clients[i]) != 0) {
            x->clients[i].state = 0;
            x->clients[i].fd = -1;
            close(fd);
            OMC__XFER_LOG(x, OMC_LOG_ERROR, "listener %s: cannot start a client thread", x->name);
        }
        pthread_mutex_unlock(&x->mu);
    }
    return NULL;
}

OMC__PRIVATE omc_result omc__xfer_listen(omc_xfer* x, const char* host, uint32_t port) {
    struct addrinfo hints, *res = NULL, *ai;
    char ps[16];
    int err = 0;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(ps, sizeof(ps), "%u", port);
    if ((err = getaddrinfo(host, ps, &hints, &res)) != 0) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "listener: cannot resolve '%s': %s", host, gai_strerror(err));
        return OMC_ERR_INVALID_ARG;
    }
    x->lfd = -1;
    for (ai = res; ai && x->lfd < 0; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol), one = 1;
        union { struct sockaddr_storage ss; struct sockaddr_in in4; struct sockaddr_in6 in6; } sa;
        socklen_t sl = sizeof(sa);
        if (fd < 0) { err = errno; continue; }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0 || getsockname(fd, (struct sockaddr*)&sa, &sl) != 0) {
            err = errno;
            close(fd);
            continue;
        }
        x->port = ntohs(sa.ss.ss_family == AF_INET6 ? sa.in6.sin6_port : sa.in4.sin_port);
        x->lfd = fd;
    }
    freeaddrinfo(res);
    if (x->lfd < 0) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "listener: cannot listen on %s:%u: %s", host, port, strerror(err));
        return OMC_ERR_SYSTEM;
    }
    snprintf(x->name, sizeof(x->name), strchr(x->host, ':') ? "[%s]:%u" : "%s:%u", x->host, x->port);
    return OMC_OK;
}
/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - creating and destroying it                         */
/* ============================================================================================== */

/* The verbs engine, or TCP and why (transport DEFAULT); an error only for transport RDMA. */
OMC__PRIVATE omc_result omc__xfer_start_rdma(omc_xfer* x, const omc_xfer_desc* d) {
#if OMC__HAS_RDMA
    omc_rdma_desc rd = d->rdma;
    char why[200];
    omc_result r;
    uint8_t g[16];
    if (x->transport == OMC_XFER_TRANSPORT_TCP) return OMC_OK;
    if (!rd.local_addr && omc_rdma_addr_to_gid(x->host, g) == OMC_OK && strcmp(x->host, "127.0.0.1") != 0 && strcmp(x->host, "::1") != 0)
        rd.local_addr = x->host;
    if (!rd.hooks.log_fn && !rd.hooks.alloc_fn) rd.hooks = d->hooks;
    if (x->transport == OMC_XFER_TRANSPORT_DEFAULT && omc_rdma_probe(rd.library, why, sizeof(why)) != OMC_OK) {
        snprintf(x->why_tcp, sizeof(x->why_tcp), "no RDMA: %s", why);
    } else {
        r = omc_rdma_create(&rd, &x->rdma);
        if (r != OMC_OK) {
            if (x->transport == OMC_XFER_TRANSPORT_RDMA) return r;
            snprintf(x->why_tcp, sizeof(x->why_tcp), "the RDMA engine did not start: %s (the log says why)", omc_result_name(r));
        }
    }
    if (x->rdma) { x->transport = OMC_XFER_TRANSPORT_RDMA; return OMC_OK; }
#else
    (void)d;
    if (x->transport == OMC_XFER_TRANSPORT_RDMA) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "transport RDMA asked for, but this build has no RDMA (OMNICONN_NO_RDMA)");
        return OMC_ERR_UNAVAILABLE;
    }
    if (x->transport == OMC_XFER_TRANSPORT_DEFAULT) snprintf(x->why_tcp, sizeof(x->why_tcp), "this build has no RDMA (OMNICONN_NO_RDMA)");
#endif
    if (x->why_tcp[0]) OMC__XFER_LOG(x, OMC_LOG_INFO, "transfer engine uses TCP: %s", x->why_tcp);
    x->transport = OMC_XFER_TRANSPORT_TCP;
    return OMC_OK;
}

OMNICONN_API omc_result omc_xfer_create(const omc_xfer_desc* desc, omc_xfer** out) {
    omc_xfer_desc d;
    omc_hooks hooks;
    omc_xfer* x;
    omc_result r;
    uint32_t i;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (desc) d = *desc; else memset(&d, 0, sizeof(d));
    hooks = omc__hooks_resolve(&d.hooks);
    if (d.port > 65535 || (unsigned)d.transport > OMC_XFER_TRANSPORT_TCP || (d.host && strlen(d.host) >= OMC_XFER_HOST_MAX - 1)) {
        OMC__LOG(&hooks, OMC_LOG_ERROR, OMC_LOGITEM_BAD_ARGUMENT, "omc_xfer_desc: port %u (0..65535), transport %d, host of at most %d bytes",
                 d.port, (int)d.transport, OMC_XFER_HOST_MAX - 2);
        return OMC_ERR_INVALID_ARG;
    }
    x = (omc_xfer*)omc__calloc(&hooks, sizeof(omc_xfer));
    if (!x) return OMC_ERR_NO_MEMORY;
    x->hooks = hooks;
    x->lfd = -1;
    snprintf(x->host, sizeof(x->host), "%s", d.host && d.host[0] ? d.host : "127.0.0.1");
    x->transport = d.transport;
    x->max_clients = d.max_clients ? d.max_clients : 64;
    x->max_notifies = d.max_notifies ? d.max_notifies : 1024;
    x->io_timeout_ms = d.io_timeout_ms ? d.io_timeout_ms : 10000;
    x->window = d.window ? d.window : 32;
    x->incarnation = omc__random_u64() | 1;
    x->regions = (omc__xfer_region*)omc__calloc(&hooks, sizeof(omc__xfer_region) * OMC_XFER_MAX_RANGES);
    x->clients = (omc__xfer_client*)omc__calloc(&hooks, sizeof(omc__xfer_client) * x->max_clients);
    x->notifs = (omc_xfer_notif**)omc__calloc(&hooks, sizeof(omc_xfer_notif*) * x->max_notifies);
    if (!x->regions || !x->clients || !x->notifs) { r = OMC_ERR_NO_MEMORY; goto fail_alloc; }
    for (i = 0; i < x->max_clients; i++) x->clients[i].fd = -1;
    if (pthread_mutex_init(&x->mu, NULL) != 0) { r = OMC_ERR_SYSTEM; goto fail_alloc; }
    if (omc__cond_init_monotonic(&x->cv) != 0) { r = OMC_ERR_SYSTEM; goto fail_mutex; }
    r = omc__xfer_curve_setup(x, &d.curve);
    if (r != OMC_OK) goto fail_curve;
    r = omc__xfer_start_rdma(x, &d);
    if (r != OMC_OK) goto fail_curve;
    r = omc__xfer_listen(x, x->host, d.port);
    if (r != OMC_OK) goto fail_rdma;
    r = omc__xfer_curve_listen(x, d.curve_port);
    if (r != OMC_OK) goto fail_listen;
    if (pthread_create(&x->accept_thread, NULL, omc__xfer_accept_main, x) != 0) { r = OMC_ERR_SYSTEM; goto fail_listen; }
    x->accepting = 1;
    if (strcmp(x->host, "0.0.0.0") == 0 || strcmp(x->host, "::") == 0)
        OMC__XFER_LOG(x, OMC_LOG_WARN, "transfer engine listens on every address, but its descriptor names '%s', which peers cannot "
                      "reach: set desc.host to the address peers use (and the listener then binds only that one)", x->host);
    OMC__XFER_LOG(x, OMC_LOG_INFO, "transfer engine %s (%s) up", x->name, x->transport == OMC_XFER_TRANSPORT_RDMA ? "RDMA" : "TCP");
    *out = x;
    return OMC_OK;
fail_listen:
    omc__store(&x->stop, 1);
    omc__xfer_curve_stop(x);
    close(x->lfd);
fail_rdma:
    if (x->rdma) omc_rdma_destroy(x->rdma);
fail_curve:
    omc__xfer_curve_stop(x);
    memset(x->master, 0, sizeof(x->master));
    pthread_cond_destroy(&x->cv);
fail_mutex:
    pthread_mutex_destroy(&x->mu);
fail_alloc:
    omc__free(&hooks, x->regions);
    omc__free(&hooks, x->clients);
    omc__free(&hooks, x->notifs);
    omc__free(&hooks, x);
    return r;
}

OMNICONN_API void omc_xfer_destroy(omc_xfer* x) {
    omc_hooks hooks;
    uint32_t i;
    if (!x) return;
    hooks = x->hooks;
    omc__store(&x->stop, 1);
    /* the listener: shutting the sockets down wakes accept() and every client's poll */
    if (x->lfd >= 0) shutdown(x->lfd, SHUT_RDWR);
    if (x->accepting) pthread_join(x->accept_thread, NULL);
    omc__xfer_curve_stop(x);
    pthread_mutex_lock(&x->mu);
    {
        omc_xfer_batch* b;
        for (b = x->live; b; b = b->next) omc__store(&b->cancel, 1);
    }
    for (i = 0; i < x->max_clients; i++) if (x->clients[i].state == 1 && x->clients[i].fd >= 0) shutdown(x->clients[i].fd, SHUT_RDWR);
    for (;;) {
        uint32_t live = 0;
        omc__xfer_reap_clients(x);
        for (i = 0; i < x->max_clients; i++) live += x->clients[i].state != 0;
        if (!live && !x->running) break;
        pthread_cond_wait(&x->cv, &x->mu);
    }
    for (i = 0; i < x->ncount; i++) omc__free(&hooks, x->notifs[(x->nhead + i) % x->max_notifies]);
    pthread_mutex_unlock(&x->mu);
    if (x->lfd >= 0) close(x->lfd);
#if OMC__HAS_RDMA
    for (i = 0; x->rdma && i < x->nregions; i++) omc_rdma_deregister(x->rdma, x->regions[i].base);
#endif
    if (x->rdma) omc_rdma_destroy(x->rdma);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    omc__free(&hooks, x->regions);
    omc__free(&hooks, x->clients);
    omc__free(&hooks, x->notifs);
    memset(x->master, 0, sizeof(x->master));
    omc__free(&hooks, x);
}

OMNICONN_API omc_result omc_xfer_query(omc_xfer* x, omc_xfer_info* o) {
    uint32_t i;
    if (!x || !o) return OMC_ERR_INVALID_ARG;
    memset(o, 0, sizeof(*o));
    pthread_mutex_lock(&x->mu);
    snprintf(o->name, sizeof(o->name), "%s", x->name);
    o->port = x->port;
    o->transport = x->transport;
    snprintf(o->why_tcp, sizeof(o->why_tcp), "%s", x->why_tcp);
    o->incarnation = x->incarnation;
    o->regions = x->nregions;
    for (i = 0; i < x->nregions; i++) o->registered_bytes += x->regions[i].size;
    o->batches = x->batches;
    o->batch_failures = x->batch_failures;
    o->bytes_read = x->bytes_read;
    o->bytes_written = x->bytes_written;
    o->served_reads = x->served_reads;
    o->served_writes = x->served_writes;
    o->served_bytes = x->served_bytes;
    o->refused = x->refused;
    o->notifies = x->notifies;
    o->notifies_dropped = x->notifies_dropped;
    o->curve_port = x->curve_port;
    o->auth_failures = x->auth_failures;
    for (i = 0; i < x->max_clients; i++) o->clients += x->clients[i].state == 1;
    pthread_mutex_unlock(&x->mu);
    return OMC_OK;
}

OMNICONN_API omc_rdma* omc_xfer_rdma(omc_xfer* x) { return x ? x->rdma : NULL; }
OMNICONN_API uint32_t omc_xfer_port(omc_xfer* x) { return x ? x->port : 0; }
OMNICONN_API const char* omc_xfer_name(omc_xfer* x) { return x ? x->name : ""; }

OMNICONN_API omc_result omc_xfer_start(const char* host, uint32_t port, omc_xfer_transport transport, const char* devices, omc_xfer** out) {
    omc_xfer_desc d;
    memset(&d, 0, sizeof(d));
    d.host = host;
    d.port = port;
    d.transport = transport;
    d.rdma.devices = devices && devices[0] ? devices : NULL;
    return omc_xfer_create(&d, out);
}

OMNICONN_API int omc_xfer_notifs(omc_xfer* x, omc_xfer_notif* out, int cap) {
    int n = 0;
    if (!x || cap < 0 || (cap && !out)) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&x->mu);
    while (n < cap && x->ncount) {
        omc_xfer_notif* m = x->notifs[x->nhead];
        out[n++] = *m;
        omc__free(&x->hooks, m);
        x->nhead = (x->nhead + 1) % x->max_notifies;
        x->ncount--;
    }
    pthread_mutex_unlock(&x->mu);
    return n;
}

/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - peers (the initiator's side)                       */
/* ============================================================================================== */

OMC__PRIVATE void omc__xfer_hangup(omc_xfer_peer* P) {
    if (P->fd >= 0) close(P->fd);
    P->fd = -1;
}

/* One request and its answer header (peer->io held). The caller reads `*len` bytes after it. */
OMC__PRIVATE omc_result omc__xfer_call(omc_xfer_peer* P, int type, uint64_t a, const void* payload, uint32_t plen, omc_time_ns deadline,
                                       omc_result* status, uint64_t* incarnation, uint64_t* len) {
    uint8_t h[OMC_XFER_RPC_HEADER];
    omc_result r;
    omc__xfer_header(h, OMC_XFER_RPC_MAGIC, type, 0, 0, a, plen);
    r = omc__xfer_io(P->fd, h, sizeof(h), 1, deadline, NULL, NULL);
    if (r == OMC_OK && plen) r = omc__xfer_io(P->fd, (void*)(uintptr_t)payload, plen, 1, deadline, NULL, NULL);
    if (r == OMC_OK) r = omc__xfer_io(P->fd, h, sizeof(h), 0, deadline, NULL, NULL);
    if (r != OMC_OK) { omc__xfer_hangup(P); return r; }
    if (omc__get_u32(h) != OMC_XFER_RPC_ANSWER || h[4] != OMC_XFER_RPC_VERSION || h[5] != type) {
        OMC__XFER_LOG(P->x, OMC_LOG_WARN, "peer %s answered with something that is not a transfer-engine answer", P->name);
        omc__xfer_hangup(P);
        return OMC_ERR_PROTOCOL;
    }
    *status = (omc_result)(int32_t)omc__get_u32(h + 12);
    *incarnation = omc__get_u64(h + 16);
    *len = omc__get_u64(h + 24);
    return OMC_OK;
}

/* With CURVE (peer->io held, P->fd connected): a challenge on the plain connection (it names the
   CURVE port), the HELLO over CURVE (descriptor and session), then the proof on the plain
   connection. *st is the HELLO's status; the descriptor lands in desc (*dlen bytes). */
OMC__PRIVATE omc_result omc__xfer_authenticate(omc_xfer_peer* P, const char* host, uint64_t want, omc_time_ns deadline, omc_result* st,
                                               uint64_t* inc, uint8_t* desc, size_t* dlen) {
    omc_xfer* x = P->x;
    uint8_t ch[OMC__XFER_CHALLENGE_LEN], grant[OMC__XFER_GRANT_LEN], proof[OMC__XFER_MAC];
    uint64_t i2, len = 0;
    omc_result r, s2 = OMC_OK;
    r = omc__xfer_call(P, OMC__XRPC_CHALLENGE, 0, NULL, 0, deadline, st, &i2, &len);
    if (r == OMC_OK && *st != OMC_OK) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "peer %s does not use CURVE, and this engine opens peers only through CURVE (curve.server_key "
                      "is set): refused", P->name);
        *st = OMC_ERR_AUTH;
        return OMC_OK;
    }
    if (r == OMC_OK && len != OMC__XFER_CHALLENGE_LEN) { omc__xfer_hangup(P); r = OMC_ERR_PROTOCOL; }
    if (r == OMC_OK) r = omc__xfer_io(P->fd, ch, sizeof(ch), 0, deadline, NULL, NULL);
    if (r == OMC_OK && omc__get_u16(ch) == 0) { omc__xfer_hangup(P); r = OMC_ERR_PROTOCOL; }
    if (r == OMC_OK) r = omc__xfer_curve_hello(P, host, omc__get_u16(ch), want, deadline, st, inc, grant, desc, dlen);
    if (r != OMC_OK || *st != OMC_OK) return r;
    if (*inc != i2) return OMC_ERR_PROTOCOL;       /* the CURVE port is another engine's */
    omc__xfer_proof(grant + 16, ch + 4, proof);
    memset(grant + 16, 0, OMC__XFER_MAC);
    {
        uint8_t h[OMC_XFER_RPC_HEADER];
        omc__xfer_header(h, OMC_XFER_RPC_MAGIC, OMC__XRPC_AUTH, 0, omc__get_u32(grant + 8), omc__get_u64(grant), sizeof(proof));
        r = omc__xfer_send2(P->fd, h, sizeof(h), proof, sizeof(proof), deadline, NULL);
        if (r == OMC_OK) r = omc__xfer_io(P->fd, h, sizeof(h), 0, deadline, NULL, NULL);
        if (r == OMC_OK && (omc__get_u32(h) != OMC_XFER_RPC_ANSWER || h[5] != OMC__XRPC_AUTH || omc__get_u64(h + 24))) r = OMC_ERR_PROTOCOL;
        if (r == OMC_OK) s2 = (omc_result)(int32_t)omc__get_u32(h + 12);
        if (r != OMC_OK) omc__xfer_hangup(P);
    }
    if (r == OMC_OK && s2 != OMC_OK) {
        OMC__XFER_LOG(x, OMC_LOG_ERROR, "peer %s refused this engine's session proof (%s)", P->name, omc_result_name(s2));
        *st = s2;
    }
    return r;
}

/* Connect and HELLO (peer->io held): the answering engine must be the descriptor's (unless the
   peer has none yet); its descriptor replaces ours. */
OMC__PRIVATE omc_result omc__xfer_hello(omc_xfer_peer* P, const char* host, uint32_t port, omc_time_ns deadline) {
    omc_xfer* x = P->x;
    omc_result r, st = OMC_OK;
    uint64_t inc = 0, len = 0, want = P->d ? P->d->incarnation : 0;
    uint8_t* buf = NULL;
    omc_xfer_descriptor* d = NULL;
    if (P->fd >= 0) omc__xfer_hangup(P);
    r = omc__xfer_dial_until(host, port, deadline, P->cancel, &P->fd);
    if (r != OMC_OK) {
        OMC__XFER_LOG(x, OMC_LOG_WARN, "peer %s:%u: cannot connect: %s", host, port, omc_result_name(r));
        return r;
    }
    if (x->curve_client) {
        size_t dl = 0;
        buf = (uint8_t*)omc__malloc(&x->hooks, OMC_XFER_DESC_MAX);
        d = (omc_xfer_descriptor*)omc__malloc(&x->hooks, sizeof(*d));
        r = buf && d ? omc__xfer_authenticate(P, host, want, deadline, &st, &inc, buf, &dl) : OMC_ERR_NO_MEMORY;
        if (r == OMC_OK && st == OMC_OK) r = omc_xfer_descriptor_decode(buf, dl, d);
        if (r == OMC_OK && st == OMC_OK && d->incarnation != inc) r = OMC_ERR_PROTOCOL;
    } else {
        r = omc__xfer_call(P, OMC__XRPC_HELLO, want, x->name, (uint32_t)strlen(x->name), deadline, &st, &inc, &len);
        if (r == OMC_OK && st == OMC_OK && (len < OMC_XFER_DESC_HEADER || len > OMC_XFER_DESC_MAX)) r = OMC_ERR_PROTOCOL;
        if (r == OMC_OK && st == OMC_OK) {
            buf = (uint8_t*)omc__malloc(&x->hooks, (size_t)len);
            d = (omc_xfer_descriptor*)omc__malloc(&x->hooks, sizeof(*d));
            r = buf && d ? omc__xfer_io(P->fd, buf, (size_t)len, 0, deadline, NULL, NULL) : OMC_ERR_NO_MEMORY;
            if (r == OMC_OK) r = omc_xfer_descriptor_decode(buf, (size_t)len, d);
            if (r == OMC_OK && d->incarnation != inc) r = OMC_ERR_PROTOCOL;
        }
        if (r == OMC_OK && st == OMC_ERR_AUTH)
            OMC__XFER_LOG(x, OMC_LOG_ERROR, "peer %s requires CURVE: give this engine its public key (omc_xfer_desc.curve.server_key)", P->name);
    }
    if (r == OMC_OK && st != OMC_OK) r = st;
    if (r == OMC_OK && want && inc != want) {
        OMC__XFER_LOG(x, OMC_LOG_WARN, "peer %s: the engine answering there (incarnation %016llx) is not the one whose descriptor we hold "
                      "(%016llx): it restarted, or the descriptor is another engine's; open the peer again",
                      P->name, (unsigned long long)inc, (unsigned long long)want);
        r = OMC_ERR_PEER_RESTARTED;
    }
    if (r == OMC_OK) {
        pthread_mutex_lock(&x->mu);
        if (P->d) omc__free(&x->hooks, P->d);
        P->d = d;
        d = NULL;
        pthread_mutex_unlock(&x->mu);
    } else {
        if (r != OMC_ERR_PEER_RESTARTED) OMC__XFER_LOG(x, OMC_LOG_WARN, "peer %s: handshake failed: %s", P->name, omc_result_name(r));
        omc__xfer_hangup(P);
    }
    omc__free(&x->hooks, buf);
    omc__free(&x->hooks, d);
    return r;
}

OMC__PRIVATE omc_result omc__xfer_peer_new(omc_xfer* x, const char* name, omc_xfer_peer** out) {
    omc_xfer_peer* P = (omc_xfer_peer*)omc__calloc(&x->hooks, sizeof(omc_xfer_peer));
    if (!P) return OMC_ERR_NO_MEMORY;
    if (pthread_mutex_init(&P->io, NULL) != 0) { omc__free(&x->hooks, P); return OMC_ERR_SYSTEM; }
    P->x = x;
    P->fd = -1;
    snprintf(P->name, sizeof(P->name), "%s", name);
    *out = P;
    return OMC_OK;
}

OMNICONN_API omc_result omc_xfer_peer_open(omc_xfer* x, const char* name, omc_time_ns deadline, omc_xfer_peer** out) {
    char host[OMC_XFER_HOST_MAX];
    uint32_t port = 0;
    omc_xfer_peer* P = NULL;
    omc_result r;
    if (out) *out = NULL;
    if (!x || !out || omc__xfer_split_name(name, host, sizeof(host), &port) != OMC_OK) {
        if (x) OMC__XFER_LOG(x, OMC_LOG_ERROR, "peer name '%s' is not host:port", name ? name : "(null)");
        return OMC_ERR_INVALID_ARG;
    }
    if ((r = omc__xfer_peer_new(x, name, &P)) != OMC_OK) return r;
    pthread_mutex_lock(&P->io);
    r = omc__xfer_hello(P, host, port, deadline);
    pthread_mutex_unlock(&P->io);
    if (r != OMC_OK) { omc_xfer_peer_close(P); return r; }
    *out = P;
    return OMC_OK;
}

OMNICONN_API omc_result omc_xfer_peer_import(omc_xfer* x, const void* desc, size_t len, omc_xfer_peer** out) {
    omc_xfer_descriptor* d;
    omc_xfer_peer* P = NULL;
    char name[OMC_XFER_NAME_MAX];
    omc_result r;
    if (out) *out = NULL;
    if (!x || !out) return OMC_ERR_INVALID_ARG;
    d = (omc_xfer_descriptor*)omc__malloc(&x->hooks, sizeof(*d));
    if (!d) return OMC_ERR_NO_MEMORY;
    r = omc_xfer_descriptor_decode(desc, len, d);
    if (r != OMC_OK) {
        OMC__XFER_LOG(x, OMC_LOG_WARN, "rejected a descriptor of %zu bytes: %s", len, omc_result_name(r));
        omc__free(&x->hooks, d);
        return r;
    }
    snprintf(name, sizeof(name), strchr(d->host, ':') ? "[%s]:%u" : "%s:%u", d->host, d->port);
    r = omc__xfer_peer_new(x, name, &P);
    if (r != OMC_OK) { omc__free(&x->hooks, d); return r; }
    P->d = d;
    *out = P;
    return OMC_OK;
}

/* Connected and talking to the descriptor's engine (peer->io held). */
OMC__PRIVATE omc_result omc__xfer_ensure(omc_xfer_peer* P, omc_time_ns deadline) {
    char host[OMC_XFER_HOST_MAX];
    uint32_t port;
    if (P->fd >= 0) return OMC_OK;
    pthread_mutex_lock(&P->x->mu);
    snprintf(host, sizeof(host), "%s", P->d->host);
    port = P->d->port;
    pthread_mutex_unlock(&P->x->mu);
    return omc__xfer_hello(P, host, port, deadline);
}

OMNICONN_API omc_result omc_xfer_peer_refresh(omc_xfer_peer* P, omc_time_ns deadline) {
    omc_result r;
    if (!P) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&P->io);
    omc__xfer_hangup(P);
    r = omc__xfer_ensure(P, deadline);
    pthread_mutex_unlock(&P->io);
    return r;
}

OMNICONN_API omc_result omc_xfer_peer_descriptor(omc_xfer_peer* P, omc_xfer_descriptor* out) {
    if (!P || !out) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&P->x->mu);
    *out = *P->d;
    pthread_mutex_unlock(&P->x->mu);
    return OMC_OK;
}

OMNICONN_API void omc_xfer_peer_close(omc_xfer_peer* P) {
    omc_xfer* x;
    if (!P) return;
    x = P->x;
    pthread_mutex_lock(&x->mu);
    {
        omc_xfer_batch* b;
        for (b = x->live; b; b = b->next) if (b->peer == P) omc__store(&b->cancel, 1);
    }
    while (P->batches) pthread_cond_wait(&x->cv, &x->mu);
    pthread_mutex_unlock(&x->mu);
#if OMC__HAS_RDMA
    if (P->conn) omc_rdma_conn_destroy(P->conn);
#endif
    omc__xfer_hangup(P);
    pthread_mutex_destroy(&P->io);
    omc__free(&x->hooks, P->d);
    omc__free(&x->hooks, P);
}

OMNICONN_API omc_result omc_xfer_notify(omc_xfer_peer* P, const void* data, uint32_t len, omc_time_ns deadline) {
    omc_result r, st = OMC_OK;
    uint64_t inc, n;
    if (!P || len > OMC_XFER_NOTIFY_MAX || (len && !data)) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&P->io);
    r = omc__xfer_ensure(P, deadline);
    if (r == OMC_OK) r = omc__xfer_call(P, OMC__XRPC_NOTIFY, 0, data, len, deadline, &st, &inc, &n);
    if (r == OMC_OK && n) { omc__xfer_hangup(P); r = OMC_ERR_PROTOCOL; }
    pthread_mutex_unlock(&P->io);
    return r != OMC_OK ? r : st;
}
/* ============================================================================================== */
/* [SECTION] Implementation: transfer engine - batches                                            */
/* ============================================================================================== */

/* Over TCP (peer->io held): up to `window` requests in flight; a READ's answer carries the bytes
   straight into local memory, a WRITE's request carries them. A lost connection fails what is
   outstanding and what is left; a cancel or the deadline stops issuing and drops the connection
   (so nothing is left half-framed). */
OMC__PRIVATE omc_result omc__xfer_run_tcp(omc_xfer_batch* b) {
    omc_xfer_peer* P = b->peer;
    omc_xfer* x = P->x;
    uint32_t sent = 0, got = 0, i;
    omc_result r = OMC_OK;
    while (got < b->count && r == OMC_OK) {
        while (r == OMC_OK && sent < b->count && sent - got < x->window) {   /* issue */
            const omc_xfer_entry* e = &b->e[sent];
            uint8_t h[OMC_XFER_RPC_HEADER];
            uint32_t id;
            pthread_mutex_lock(&x->mu);
            id = P->d->range[b->rrange[sent]].id;
            pthread_mutex_unlock(&x->mu);
            omc__xfer_header(h, OMC_XFER_RPC_MAGIC, b->op == OMC_XFER_READ ? OMC__XRPC_READ : OMC__XRPC_WRITE, sent, id, e->remote, e->length);
            r = b->op == OMC_XFER_WRITE ? omc__xfer_send2(P->fd, h, sizeof(h), e->local, (size_t)e->length, b->deadline, &b->cancel)
                                        : omc__xfer_io(P->fd, h, sizeof(h), 1, b->deadline, &b->cancel, NULL);
            if (r == OMC_OK) sent++;
        }
        if (r != OMC_OK || got == sent) break;
        {   /* complete the oldest */
            uint8_t h[OMC_XFER_RPC_HEADER];
            omc_result st;
            r = omc__xfer_io(P->fd, h, sizeof(h), 0, b->deadline, &b->cancel, NULL);
            if (r != OMC_OK) break;
            if (omc__get_u32(h) != OMC_XFER_RPC_ANSWER || h[4] != OMC_XFER_RPC_VERSION || omc__get_u32(h + 8) != got ||
                h[5] != (b->op == OMC_XFER_READ ? OMC__XRPC_READ : OMC__XRPC_WRITE)) { r = OMC_ERR_PROTOCOL; break; }
            st = (omc_result)(int32_t)omc__get_u32(h + 12);
            if (st == OMC_OK && b->op == OMC_XFER_READ) {
                if (omc__get_u64(h + 24) != b->e[got].length) { r = OMC_ERR_PROTOCOL; break; }
                r = omc__xfer_io(P->fd, b->e[got].local, (size_t)b->e[got].length, 0, b->deadline, &b->cancel, NULL);
                if (r != OMC_OK) break;
            } else if (omc__get_u64(h + 24) != 0) { r = OMC_ERR_PROTOCOL; break; }
            if (st == OMC_OK) b->bytes += b->e[got].length;
            b->status[got++] = st;
        }
    }
    if (r != OMC_OK) {
        if (r == OMC_ERR_PROTOCOL) OMC__XFER_LOG(x, OMC_LOG_WARN, "peer %s: an answer does not match its request: connection dropped", P->name);
        omc__xfer_hangup(P);
        for (i = got; i < b->count; i++) b->status[i] = r;
        if (r == OMC_ERR_CLOSED) return r;
    }
    for (i = 0; i < b->count; i++) if (b->status[i] != OMC_OK) return b->status[i];
    return OMC_OK;
}

#if OMC__HAS_RDMA
/* Cut every entry into slices of at most the engine's slice size (one RDMA READ or WRITE each). */
OMC__PRIVATE omc_result omc__xfer_slices(omc_xfer_batch* b, omc_rdma* E) {
    uint64_t n = 0;
    uint32_t i, k = 0;
    for (i = 0; i < b->count; i++) n += (b->e[i].length + E->slice - 1) / E->slice;
    if (n > UINT32_MAX / 2) return OMC_ERR_TOO_LARGE;
    b->slices = (omc__rdma_slice*)omc__calloc(&E->hooks, sizeof(omc__rdma_slice) * (size_t)(n ? n : 1));
    if (!b->slices) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < b->count; i++) {
        uint64_t off;
        for (off = 0; off < b->e[i].length; off += E->slice, k++) {
            b->slices[k].ext = i;
            b->slices[k].off = off;
            b->slices[k].len = omc__min(E->slice, b->e[i].length - off);
        }
    }
    b->nslices = k;
    return OMC_OK;
}

/* Post every slice that is new or must go again (E->mu held), each on the pair that finishes it
   first and round-robin over that pair's QPs; planned first, so each QP's last request of the
   round is signalled. The op_wait machinery calls this again for slices whose pair failed. */
/* Plan (E->mu held): the QP of every slice that must go now (0xFFFF: none), and each QP's last
   slice of the round. OMC_ERR_RDMA_QP if no pair is left. */
OMC__PRIVATE omc_result omc__xfer_plan(omc_rdma_conn* c, omc_xfer_batch* b, uint16_t* plan, uint32_t* last) {
    omc_rdma* E = c->eng;
    uint64_t planned[OMC_RDMA_MAX_RAILS];
    uint32_t k;
    memset(planned, 0, sizeof(planned));
    for (k = 0; k < OMC_RDMA_MAX_QPS; k++) last[k] = OMC__RDMA_NO_SLICE;
    for (k = 0; k < b->nslices; k++) {
        omc__rdma_slice* sl = &b->slices[k];
        double best = 0;
        uint32_t p;
        int pick = -1;
        plan[k] = 0xFFFF;
        if (sl->state != OMC__SLICE_NEW && sl->state != OMC__SLICE_REPOST) continue;
        for (p = 0; p < c->npairs; p++) {
            double finish;
            if (!c->pair[p].up || !E->rail[c->pair[p].rail].up || !c->qps[p * c->qpp].qp) continue;
            finish = (double)(c->pair[p].queued + planned[p] + sl->len) / omc__rdma_rail_rate(E, c->pair[p].rail);
            if (pick < 0 || finish < best) { best = finish; pick = (int)p; }
        }
        if (pick < 0) return OMC_ERR_RDMA_QP;
        plan[k] = (uint16_t)(pick * (int)c->qpp + (int)(b->rr++ % c->qpp));
        planned[pick] += sl->len;
        last[plan[k]] = k;
    }
    return OMC_OK;
}

/* A free slot on q (mu held) before the batch's deadline, a poll interval at a time so that a
   cancel is seen while the adapter drains (OMC_ERR_CLOSED then). */
OMC__PRIVATE omc_result omc__xfer_wait_slot(omc_xfer_batch* b, omc__rdma_qp* q, omc_time_ns deadline) {
    for (;;) {
        omc_time_ns step = omc_deadline_after_ms(OMC__XFER_POLL_MS);
        omc_result r = omc__rdma_wait_slot(q->conn->eng, q, deadline < step ? deadline : step);
        if (r != OMC_ERR_TIMEOUT) return r;
        if (omc__load(&b->cancel)) return OMC_ERR_CLOSED;
        if (omc_now_ns() >= deadline) return r;
    }
}

/* A slice could not be posted on q (mu held): if its pair failed meanwhile (a rail went down
   while the batch was being posted) the slice is posted again on the pairs left in the next
   round, as a write's are; OMC_OK then. Otherwise (the connection is gone, the deadline) the
   error, and the batch stops posting. */
OMC__PRIVATE omc_result omc__xfer_post_failed(omc_rdma_conn* c, omc_rdma_op* op, omc__rdma_qp* q, omc__rdma_slice* sl, omc_result r) {
    if (omc__rdma_conn_usable(c) != OMC_OK || r == OMC_ERR_TIMEOUT || r == OMC_ERR_NO_MEMORY || r == OMC_ERR_CLOSED) return r;
    if (c->pair[q->pair].up) {
        char text[160];
        snprintf(text, sizeof(text), "could not post on QP %u: %s", q->qpn, omc_result_str(r));
        omc__rdma_pair_down_locked(c, q->pair, r, text);
    }
    if (omc__rdma_conn_usable(c) != OMC_OK) return c->error != OMC_OK ? c->error : OMC_ERR_RDMA_QP;
    sl->state = OMC__SLICE_REPOST;
    op->reposts++;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__xfer_post_slices(omc_rdma_conn* c, omc_rdma_op* op, omc_time_ns deadline) {
    omc_rdma* E = c->eng;
    omc_xfer_batch* b = op->xfer;
    uint32_t last[OMC_RDMA_MAX_QPS], k;
    uint16_t* plan = (uint16_t*)omc__malloc(&E->hooks, sizeof(uint16_t) * (b->nslices ? b->nslices : 1));
    omc_result r;
    /* a slot is waited for until the batch's deadline: a round of reposts comes from a wait
       that looks only a poll interval ahead, and the pairs left have only so many slots */
    (void)deadline;
    deadline = b->deadline ? b->deadline : OMC_WAIT_FOREVER;
    if (!plan) return OMC_ERR_NO_MEMORY;
    r = omc__xfer_plan(c, b, plan, last);
    if (r != OMC_OK) {
        omc__free(&E->hooks, plan);
        OMC__RDMA_LOG(E, OMC_LOG_ERROR, "connection %016llx: no working rail is left for a batch", (unsigned long long)c->conn_id);
        return r;
    }
    op->reposts = 0;
    for (k = 0; k < b->nslices && r == OMC_OK; k++) {
        omc__rdma_slice* sl = &b->slices[k];
        omc__rdma_qp* q;
        omc__rdma_rail* R;
        const omc_xfer_entry* e;
        struct ibv_sge sge;
        struct ibv_send_wr wr;
        if (plan[k] == 0xFFFF) continue;
        q = &c->qps[plan[k]];
        R = &E->rail[q->rail];
        e = &b->e[sl->ext];
        if (omc__load(&b->cancel)) { r = OMC_ERR_CLOSED; break; }      /* the rest stays unposted */
        r = omc__xfer_wait_slot(b, q, deadline);
        if (r != OMC_OK) {
            r = omc__xfer_post_failed(c, op, q, sl, r);
            if (r != OMC_OK) break;
            continue;
        }
        sge.addr = (uint64_t)(uintptr_t)e->local + sl->off;
        sge.length = (uint32_t)sl->len;
        sge.lkey = b->lkey[sl->ext][q->rail];
        memset(&wr, 0, sizeof(wr));
        wr.opcode = op->read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = e->remote + sl->off;
        wr.wr.rdma.rkey = b->rkey[sl->ext][b->peer->pair_rail[q->pair]];
        r = omc__rdma_post(E, q, &wr, op, last[plan[k]] == k, k);
        if (r != OMC_OK) {
            r = omc__xfer_post_failed(c, op, q, sl, r);
            if (r != OMC_OK) break;
            continue;
        }
        sl->state = OMC__SLICE_POSTED;
        sl->pair = (uint8_t)q->pair;
        if (!R->inflight) {
            if (R->window_bytes) R->settled = R->rate;
            R->mark = omc_now_ns();
            R->window_bytes = 0;
        }
        R->inflight += sl->len;
        c->pair[q->pair].queued += sl->len;
    }
    omc__free(&E->hooks, plan);
    return r;
}

/* RDMA_CONNECT (peer->io held): a connection to the peer's engine with the QPs of every rail
   pair, and which of its rails each pair reaches (to pick the descriptor's key). */
OMC__PRIVATE omc_result omc__xfer_rdma_connect(omc_xfer_peer* P, omc_time_ns deadline) {
    omc_xfer* x = P->x;
    uint8_t rec[OMC_RDMA_RECORD_MAX], ans[1 + OMC_RDMA_MAX_RAILS + OMC_RDMA_RECORD_MAX];
    size_t n = 0;
    uint64_t inc, len;
    omc_result r, st = OMC_OK;
    uint32_t p;
    if (P->conn && omc_rdma_conn_ok(P->conn)) return OMC_OK;
    if (P->conn) { omc_rdma_conn_destroy(P->conn); P->conn = NULL; }
    r = omc_rdma_conn_create(x->rdma, &P->conn);
    if (r == OMC_OK) r = omc_rdma_conn_record(P->conn, rec, sizeof(rec), &n);
    if (r == OMC_OK) r = omc__xfer_call(P, OMC__XRPC_RDMA_CONNECT, 0, rec, (uint32_t)n, deadline, &st, &inc, &len);
    if (r == OMC_OK && st == OMC_OK && (len < 2 || len > sizeof(ans))) { omc__xfer_hangup(P); r = OMC_ERR_PROTOCOL; }
    if (r == OMC_OK && st == OMC_OK) r = omc__xfer_io(P->fd, ans, (size_t)len, 0, deadline, NULL, NULL);
    if (r == OMC_OK && st != OMC_OK) r = st;
    if (r == OMC_OK && (ans[0] == 0 || ans[0] > OMC_RDMA_MAX_RAILS || len <= 1u + ans[0])) r = OMC_ERR_PROTOCOL;
    if (r == OMC_OK) r = omc_rdma_conn_connect(P->conn, ans + 1 + ans[0], (size_t)len - 1 - ans[0]);
    if (r == OMC_OK) {
        pthread_mutex_lock(&x->mu);
        for (p = 0; p < OMC_RDMA_MAX_RAILS; p++) {
            P->pair_rail[p] = (uint8_t)(p < ans[0] ? ans[1 + p] : 0);
            if (p < ans[0] && ans[1 + p] >= P->d->rails && ans[1 + p] != OMC_RDMA_MAX_RAILS) r = OMC_ERR_PROTOCOL;
        }
        pthread_mutex_unlock(&x->mu);
    }
    if (r != OMC_OK) {
        OMC__XFER_LOG(x, OMC_LOG_WARN, "peer %s: RDMA connection failed: %s", P->name, omc_result_name(r));
        if (P->conn) { omc_rdma_conn_destroy(P->conn); P->conn = NULL; }
    }
    return r;
}

/* Over RDMA (peer->io held): post every slice, wait (looking at the cancel flag), and read each
   entry's result from its slices. A cancel breaks the connection: the adapter flushes what is
   posted, so nothing touches memory after the batch ended. */
OMC__PRIVATE omc_result omc__xfer_run_rdma(omc_xfer_batch* b) {
    omc_xfer_peer* P = b->peer;
    omc_rdma* E = P->x->rdma;
    omc_rdma_conn* c;
    omc_rdma_op* op = NULL;
    omc_result r;
    uint32_t i, k;
    r = omc__xfer_rdma_connect(P, b->deadline);
    if (r != OMC_OK) {
        omc__xfer_hangup(P);
        for (i = 0; i < b->count; i++) b->status[i] = r;
        return r;
    }
    c = P->conn;
    r = omc__xfer_slices(b, E);
    pthread_mutex_lock(&E->mu);
    if (r == OMC_OK) r = omc__rdma_conn_usable(c);
    if (r == OMC_OK && !(op = omc__rdma_op_new_locked(c, OMC__OP_XFER))) r = OMC_ERR_NO_MEMORY;
    if (r == OMC_OK) {
        op->xfer = b;
        op->read = b->op == OMC_XFER_READ;
        op->slices = b->slices;
        op->nslices = b->nslices;
        op->gave_up = &b->slices_given;
        for (i = 0; i < b->count; i++) op->bytes += b->e[i].length;
        r = omc__xfer_post_slices(c, op, b->deadline);
        if (r != OMC_OK) {
            if (op->status == OMC_OK) op->status = r;
            if (op->pending) omc__rdma_conn_break_locked(c, r, "a batch could not be posted completely");
        }
    }
    pthread_mutex_unlock(&E->mu);
    if (!op) { for (i = 0; i < b->count; i++) b->status[i] = r; return r; }
    for (;;) {      /* wait, a poll interval at a time, so a cancel is seen */
        omc_time_ns until = omc_deadline_after_ms(OMC__XFER_POLL_MS);
        if (omc__load(&b->cancel)) {
            pthread_mutex_lock(&E->mu);
            omc__rdma_conn_break_locked(c, OMC_ERR_CLOSED, "a batch was cancelled");
            pthread_mutex_unlock(&E->mu);
            r = omc_rdma_op_wait(op, omc_deadline_after_ms(OMC__RDMA_FLUSH_GRACE_MS));
            break;
        }
        r = omc_rdma_op_test(op, b->deadline && b->deadline < until ? b->deadline : until);
        if (r != OMC_ERR_BUSY) break;
        if (b->deadline && omc_now_ns() >= b->deadline) { r = omc_rdma_op_wait(op, b->deadline); break; }
    }
    if (r != OMC_OK && !omc__load(&b->cancel)) omc__xfer_hangup(P);    /* a dead peer: handshake again next time */
    if (b->slices_given) {          /* the engine still holds the slices: results unknown */
        for (i = 0; i < b->count; i++) b->status[i] = r;
        b->slices = NULL;
        return r;
    }
    for (i = 0; i < b->count; i++) b->status[i] = OMC_OK;
    for (k = 0; k < b->nslices; k++)
        if (b->slices[k].state != OMC__SLICE_DONE) b->status[b->slices[k].ext] = omc__load(&b->cancel) ? OMC_ERR_CLOSED : (r != OMC_OK ? r : OMC_ERR_RDMA_COMPLETION);
    for (i = 0; i < b->count; i++) if (b->status[i] == OMC_OK) b->bytes += b->e[i].length;
    if (omc__load(&b->cancel) && r != OMC_OK) r = OMC_ERR_CLOSED;
    return r;
}
#endif

static void* omc__xfer_batch_main(void* arg) {
    omc_xfer_batch* b = (omc_xfer_batch*)arg;
    omc_xfer_peer* P = b->peer;
    omc_xfer* x = P->x;
    omc_result r;
    uint32_t i;
    pthread_mutex_lock(&P->io);
    P->cancel = &b->cancel;             /* a connect on behalf of this batch stops when it is cancelled */
    r = omc__load(&b->cancel) ? OMC_ERR_CLOSED : omc__xfer_ensure(P, b->deadline);
    if (r != OMC_OK) for (i = 0; i < b->count; i++) b->status[i] = r == OMC_ERR_CLOSED ? OMC_ERR_CLOSED : r;
#if OMC__HAS_RDMA
    else if (x->rdma && P->d->rails) r = omc__xfer_run_rdma(b);
#endif
    else r = omc__xfer_run_tcp(b);
    if (r == OMC_OK && b->notify_len) {
        omc_result st = OMC_OK;
        uint64_t inc, n;
        r = omc__xfer_ensure(P, b->deadline);
        if (r == OMC_OK) r = omc__xfer_call(P, OMC__XRPC_NOTIFY, 0, b->notify, b->notify_len, b->deadline, &st, &inc, &n);
        if (r == OMC_OK && n) { omc__xfer_hangup(P); r = OMC_ERR_PROTOCOL; }
        if (r == OMC_OK) r = st;
        if (r != OMC_OK) OMC__XFER_LOG(x, OMC_LOG_WARN, "peer %s: the batch's data arrived, its notification did not: %s", P->name, omc_result_name(r));
    }
    P->cancel = NULL;
    pthread_mutex_unlock(&P->io);
    pthread_mutex_lock(&x->mu);
    for (i = 0; i < b->count; i++) {
        omc__xfer_region* g = omc__xfer_by_id(x, b->lregion[i]);
        if (g && g->users) g->users--;
    }
    x->batches++;
    if (r != OMC_OK) x->batch_failures++;
    if (b->op == OMC_XFER_READ) x->bytes_read += b->bytes; else x->bytes_written += b->bytes;
    b->result = r;
    b->done = 1;
    {   /* off the running list: the thread is over */
        omc_xfer_batch** pp = &x->live;
        while (*pp && *pp != b) pp = &(*pp)->next;
        if (*pp) *pp = b->next;
    }
    x->running--;
    P->batches--;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

OMC__PRIVATE void omc__xfer_batch_free(omc_xfer_batch* b) {
    omc_hooks* h = &b->peer->x->hooks;
    omc__free(h, b->e);
    omc__free(h, b->status);
    omc__free(h, b->lregion);
    omc__free(h, b->rrange);
    omc__free(h, b->notify);
#if OMC__HAS_RDMA
    if (!b->slices_given) omc__free(h, b->slices);
    omc__free(h, b->lkey);
    omc__free(h, b->rkey);
#endif
    omc__free(h, b);
}

/* Check every entry against the local ranges and the peer's descriptor, and take the local
   ranges (x->mu held). On failure nothing is taken and status[] says which entries failed. */
OMC__PRIVATE omc_result omc__xfer_check(omc_xfer_batch* b) {
    omc_xfer_peer* P = b->peer;
    omc_xfer* x = P->x;
    omc_result first = OMC_OK;
    uint32_t i, j;
    for (i = 0; i < b->count; i++) {
        const omc_xfer_entry* e = &b->e[i];
        omc__xfer_region* g = e->length ? omc__xfer_find(x, (uint64_t)(uintptr_t)e->local, e->length) : NULL;
        omc_result st = OMC_OK;
        b->status[i] = OMC_OK;
        if (!e->length || !e->local || e->remote > UINT64_MAX - e->length) st = OMC_ERR_INVALID_ARG;
        else if (!g) st = OMC_ERR_INVALID_ARG;
        if (st == OMC_OK) {
            for (j = 0; j < P->d->count; j++) {
                const omc_xfer_range* rg = &P->d->range[j];
                if (e->remote >= rg->addr && e->remote - rg->addr <= rg->length && e->length <= rg->length - (e->remote - rg->addr)) break;
            }
            if (j == P->d->count) st = OMC_ERR_RDMA_ACCESS;
            else b->rrange[i] = j;
        }
        if (st != OMC_OK) {
            b->status[i] = st;
            if (first == OMC_OK) {
                first = st;
                OMC__XFER_LOG(x, OMC_LOG_ERROR, "batch to %s refused before anything moved: entry %u (local %p, remote 0x%llx, %llu bytes): %s",
                              P->name, i, e->local, (unsigned long long)e->remote, (unsigned long long)e->length,
                              st == OMC_ERR_INVALID_ARG ? "the local range is not registered with this engine (or empty)" :
                              "the remote range is not inside a range of the peer's descriptor");
            }
            continue;
        }
        b->lregion[i] = g->id;
#if OMC__HAS_RDMA
        if (x->rdma) {
            omc__rdma_region* mr;
            uint32_t k;
            pthread_mutex_lock(&x->rdma->mu);
            mr = omc__rdma_find(x->rdma, e->local, e->length);
            for (k = 0; mr && k < x->rdma->nrails; k++) b->lkey[i][k] = mr->mr[k * mr->count]->lkey;
            pthread_mutex_unlock(&x->rdma->mu);
            for (k = 0; k < P->d->rails; k++) b->rkey[i][k] = P->d->range[b->rrange[i]].rkey[k];
        }
#endif
    }
    if (first != OMC_OK) {
        for (i = 0; i < b->count; i++) if (b->status[i] == OMC_OK) b->status[i] = OMC_ERR_CLOSED;
        return first;
    }
    for (i = 0; i < b->count; i++) omc__xfer_by_id(x, b->lregion[i])->users++;
    return OMC_OK;
}

OMC__PRIVATE omc_result omc__xfer_submit(omc_xfer_peer* P, omc_xfer_op op, const omc_xfer_entry* entries, uint32_t count, const void* notify,
                                         uint32_t notify_len, omc_time_ns deadline, omc_xfer_batch** out, omc_result* status) {
    omc_xfer* x;
    omc_xfer_batch* b;
    omc_hooks* h;
    omc_result r;
    if (out) *out = NULL;
    if (!P || !out || (op != OMC_XFER_READ && op != OMC_XFER_WRITE) || (count && !entries) || count > OMC_XFER_MAX_ENTRIES ||
        notify_len > OMC_XFER_NOTIFY_MAX || (notify_len && !notify))
        return OMC_ERR_INVALID_ARG;
    x = P->x;
    h = &x->hooks;
    b = (omc_xfer_batch*)omc__calloc(h, sizeof(*b));
    if (!b) return OMC_ERR_NO_MEMORY;
    b->peer = P;
    b->op = op;
    b->count = count;
    b->deadline = deadline;
    b->e = (omc_xfer_entry*)omc__malloc(h, sizeof(omc_xfer_entry) * (count ? count : 1));
    b->status = (omc_result*)omc__calloc(h, sizeof(omc_result) * (count ? count : 1));
    b->lregion = (uint32_t*)omc__calloc(h, sizeof(uint32_t) * (count ? count : 1));
    b->rrange = (uint32_t*)omc__calloc(h, sizeof(uint32_t) * (count ? count : 1));
    b->notify = (uint8_t*)omc__malloc(h, notify_len ? notify_len : 1);
#if OMC__HAS_RDMA
    b->lkey = (uint32_t (*)[OMC_RDMA_MAX_RAILS])omc__calloc(h, sizeof(*b->lkey) * (count ? count : 1));
    b->rkey = (uint32_t (*)[OMC_RDMA_MAX_RAILS])omc__calloc(h, sizeof(*b->rkey) * (count ? count : 1));
    if (!b->lkey || !b->rkey) { omc__xfer_batch_free(b); return OMC_ERR_NO_MEMORY; }
#endif
    if (!b->e || !b->status || !b->lregion || !b->rrange || !b->notify) { omc__xfer_batch_free(b); return OMC_ERR_NO_MEMORY; }
    if (count) memcpy(b->e, entries, sizeof(omc_xfer_entry) * count);
    if (notify_len) memcpy(b->notify, notify, notify_len);
    b->notify_len = notify_len;
    pthread_mutex_lock(&x->mu);
    r = omc__load(&x->stop) ? OMC_ERR_CLOSED : omc__xfer_check(b);
    if (r == OMC_OK && pthread_create(&b->thread, NULL, omc__xfer_batch_main, b) != 0) {
        uint32_t i;
        for (i = 0; i < count; i++) omc__xfer_by_id(x, b->lregion[i])->users--;
        r = OMC_ERR_SYSTEM;
    }
    if (r == OMC_OK) {
        x->running++;
        P->batches++;
        b->next = x->live;
        x->live = b;
    }
    pthread_mutex_unlock(&x->mu);
    if (r != OMC_OK) {
        if (status && count) memcpy(status, b->status, sizeof(omc_result) * count);
        omc__xfer_batch_free(b);
        return r;
    }
    *out = b;
    return OMC_OK;
}

OMNICONN_API omc_result omc_xfer_submit(omc_xfer_peer* P, omc_xfer_op op, const omc_xfer_entry* entries, uint32_t count, const void* notify,
                                        uint32_t notify_len, omc_time_ns deadline, omc_xfer_batch** out) {
    return omc__xfer_submit(P, op, entries, count, notify, notify_len, deadline, out, NULL);
}

OMNICONN_API omc_result omc_xfer_batch_test(omc_xfer_batch* b) {
    omc_result r;
    if (!b) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&b->peer->x->mu);
    r = b->done ? b->result : OMC_ERR_BUSY;
    pthread_mutex_unlock(&b->peer->x->mu);
    return r;
}

OMNICONN_API omc_result omc_xfer_batch_wait(omc_xfer_batch* b, omc_time_ns deadline) {
    omc_xfer* x;
    omc_result r;
    if (!b) return OMC_ERR_INVALID_ARG;
    x = b->peer->x;
    pthread_mutex_lock(&x->mu);
    while (!b->done) if (omc__cond_wait_until(&x->cv, &x->mu, deadline) == ETIMEDOUT && !b->done) break;
    r = b->done ? b->result : OMC_ERR_TIMEOUT;
    pthread_mutex_unlock(&x->mu);
    return r;
}

OMNICONN_API omc_result omc_xfer_batch_status(omc_xfer_batch* b, omc_result* status, uint32_t count) {
    omc_result r = OMC_OK;
    if (!b || (count && !status)) return OMC_ERR_INVALID_ARG;
    pthread_mutex_lock(&b->peer->x->mu);
    if (!b->done) r = OMC_ERR_BUSY;
    else memcpy(status, b->status, sizeof(omc_result) * omc__min(count, b->count));
    pthread_mutex_unlock(&b->peer->x->mu);
    return r;
}

OMNICONN_API void omc_xfer_batch_cancel(omc_xfer_batch* b) {
    if (b) omc__store(&b->cancel, 1);
}

OMNICONN_API void omc_xfer_batch_destroy(omc_xfer_batch* b) {
    omc_xfer* x;
    if (!b) return;
    x = b->peer->x;
    pthread_mutex_lock(&x->mu);
    if (!b->done) omc__store(&b->cancel, 1);
    pthread_mutex_unlock(&x->mu);
    pthread_join(b->thread, NULL);
    omc__xfer_batch_free(b);
}

OMNICONN_API omc_result omc_xfer_run(omc_xfer_peer* P, omc_xfer_op op, const omc_xfer_entry* entries, uint32_t count, const void* notify,
                                     uint32_t notify_len, omc_time_ns deadline, omc_result* status) {
    omc_xfer_batch* b = NULL;
    omc_result r = omc__xfer_submit(P, op, entries, count, notify, notify_len, deadline, &b, status);
    if (r != OMC_OK) return r;
    pthread_join(b->thread, NULL);      /* the batch ends by itself at its deadline */
    r = b->result;
    if (status && count) memcpy(status, b->status, sizeof(omc_result) * count);
    omc__xfer_batch_free(b);
    return r;
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
