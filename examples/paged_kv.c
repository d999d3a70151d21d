/* paged_kv.c - copy a request's paged KV cache from another process with ONE batched READ.

   A serving engine keeps its KV cache in fixed-size blocks scattered over a big region (vLLM's
   paged attention): a request's blocks are wherever the allocator put them. This example is
   both sides of handing such a request over:

     paged_kv serve [-h HOST] [-p PORT] [-t tcp|rdma]
         registers a region of SLOTS blocks of BLOCK bytes, fills every block with a pattern
         derived from its slot, prints its name ("host:port") and serves until a notification
         arrives (the fetcher's "done") or it is killed;
     paged_kv fetch HOST:PORT [-t tcp|rdma]
         opens the server by name (the RPC port answers with its descriptor), builds the
         request's block table - block i lives in slot (i * 97 + 13) % SLOTS - and copies all
         BLOCKS blocks into its own contiguous region with one omc_xfer_run(OMC_XFER_READ),
         checks every byte, reports the time, and notifies the server.

   Build:  cc -std=c99 -O2 -I. examples/paged_kv.c -o paged_kv -ldl -lpthread
   (libibverbs is loaded at run time: without an RDMA device both sides use TCP.) */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (32u * 1024u)     /* bytes per KV block */
#define BLOCKS 256u             /* blocks of the request */
#define SLOTS 512u              /* blocks in the server's region */

static void usage(void) {
    fprintf(stderr, "usage: paged_kv serve [-h HOST (127.0.0.1)] [-p PORT (0: any)] [-t tcp|rdma (default: rdma if a device works)]\n"
                    "       paged_kv fetch HOST:PORT [-t tcp|rdma]\n"
                    "  a request of %u blocks of %u bytes, scattered over %u slots, copied by one batched READ\n",
            BLOCKS, BLOCK, SLOTS);
}

static uint8_t pattern(uint32_t slot, uint32_t i) { return (uint8_t)(slot * 31u + i * 7u + (i >> 9)); }

static omc_xfer_transport transport_of(const char* t) {
    if (!t) return OMC_XFER_TRANSPORT_DEFAULT;
    return strcmp(t, "tcp") == 0 ? OMC_XFER_TRANSPORT_TCP : OMC_XFER_TRANSPORT_RDMA;
}

static int serve(const char* host, uint32_t port, const char* t) {
    omc_xfer* x = NULL;
    omc_xfer_notif n;
    uint8_t* kv;
    uint32_t s, i;
    omc_result r = omc_xfer_start(host, port, transport_of(t), NULL, &x);
    if (r != OMC_OK) { fprintf(stderr, "omc_xfer_start: %s\n", omc_result_str(r)); return 1; }
    kv = (uint8_t*)malloc((size_t)SLOTS * BLOCK);
    if (!kv) return 1;
    for (s = 0; s < SLOTS; s++) for (i = 0; i < BLOCK; i++) kv[(size_t)s * BLOCK + i] = pattern(s, i);
    if ((r = omc_xfer_register(x, kv, (uint64_t)SLOTS * BLOCK, 0)) != OMC_OK) { fprintf(stderr, "register: %s\n", omc_result_str(r)); return 1; }
    printf("%s\n", omc_xfer_name(x));
    fflush(stdout);
    while (omc_xfer_notifs(x, &n, 1) == 0) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    printf("notified by %s: %.*s\n", n.peer, (int)n.length, (const char*)n.data);
    omc_xfer_unregister(x, kv);
    omc_xfer_destroy(x);
    free(kv);
    return 0;
}

static int fetch(const char* name, const char* t) {
    omc_xfer* x = NULL;
    omc_xfer_peer* p = NULL;
    omc_xfer_descriptor* d = (omc_xfer_descriptor*)malloc(sizeof(*d));
    omc_xfer_entry e[BLOCKS];
    omc_result st[BLOCKS], r;
    uint8_t* mine = (uint8_t*)calloc(BLOCKS, BLOCK);
    uint32_t i, j, bad = 0;
    omc_time_ns t0;
    if (!d || !mine) return 1;
    if ((r = omc_xfer_start("127.0.0.1", 0, transport_of(t), NULL, &x)) != OMC_OK ||
        (r = omc_xfer_register(x, mine, (uint64_t)BLOCKS * BLOCK, 0)) != OMC_OK ||
        (r = omc_xfer_peer_open(x, name, omc_deadline_after_ms(5000), &p)) != OMC_OK ||
        (r = omc_xfer_peer_descriptor(p, d)) != OMC_OK) {
        fprintf(stderr, "set-up: %s\n", omc_result_str(r));
        return 1;
    }
    if (d->count < 1 || d->range[0].length < (uint64_t)SLOTS * BLOCK) { fprintf(stderr, "the server registered no KV region\n"); return 1; }
    for (i = 0; i < BLOCKS; i++) {          /* the request's block table */
        e[i].local = mine + (size_t)i * BLOCK;
        e[i].remote = d->range[0].addr + (uint64_t)((i * 97u + 13u) % SLOTS) * BLOCK;
        e[i].length = BLOCK;
    }
    t0 = omc_now_ns();
    r = omc_xfer_run(p, OMC_XFER_READ, e, BLOCKS, NULL, 0, omc_deadline_after_ms(30000), st);
    if (r != OMC_OK) { fprintf(stderr, "batched READ: %s (entry 0: %s)\n", omc_result_str(r), omc_result_name(st[0])); return 1; }
    printf("%u blocks of %u bytes in one batch: %.2f ms\n", BLOCKS, BLOCK, (double)(omc_now_ns() - t0) / 1e6);
    for (i = 0; i < BLOCKS; i++)
        for (j = 0; j < BLOCK; j++) if (mine[(size_t)i * BLOCK + j] != pattern((i * 97u + 13u) % SLOTS, j)) { bad++; break; }
    printf("%u of %u blocks wrong\n", bad, BLOCKS);
    omc_xfer_notify(p, "done", 4, omc_deadline_after_ms(5000));
    omc_xfer_peer_close(p);
    omc_xfer_destroy(x);
    free(mine);
    free(d);
    return bad ? 1 : 0;
}

int main(int argc, char** argv) {
    const char *host = "127.0.0.1", *t = NULL;
    uint32_t port = 0;
    int i;
    if (argc < 2) { usage(); return 2; }
    for (i = (strcmp(argv[1], "fetch") == 0 ? 3 : 2); i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-h") == 0) host = argv[i + 1];
        else if (strcmp(argv[i], "-p") == 0) port = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-t") == 0) t = argv[i + 1];
        else { usage(); return 2; }
    }
    if (strcmp(argv[1], "serve") == 0) return serve(host, port, t);
    if (strcmp(argv[1], "fetch") == 0 && argc >= 3) return fetch(argv[2], t);
    usage();
    return 2;
}
