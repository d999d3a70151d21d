/* bench_xfer.c - the transfer engine's batched READ and WRITE, for the bench rows beside
   ib_read_bw / ib_write_bw (RDMA bed) and iperf3 (TCP). Two engines in this process (as
   perftest runs two processes on one device): a target that registers a 32 MiB region, an
   initiator that registers 8 MiB and moves BATCHES batches of 8 MiB one after another with
   omc_xfer_run, each either 256 entries of 32 KiB scattered over the target's region (paged KV)
   or 1 entry of 8 MiB. Prints one line:
     xfer transport=tcp|rdma op=read|write layout=256x32k|1x8m batches=N bytes=B seconds=S mbps=M
   (mbps in MiB/s, as perftest prints MB/sec). Every batch's bytes are checked after the run.

   usage: bench_xfer tcp|rdma read|write 256x32k|1x8m [BATCHES (20)]
   RDMA takes the device from OMC_RDMA_DEVICE and the address from OMC_RDMA_IP (the bed sets both). */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOTAL (8u << 20)
#define REGION (32u << 20)

static void usage(void) {
    fprintf(stderr, "usage: bench_xfer tcp|rdma read|write 256x32k|1x8m [BATCHES (20)]\n");
}

int main(int argc, char** argv) {
    omc_xfer_desc d;
    omc_xfer *tx = NULL, *rx = NULL;
    omc_xfer_peer* p = NULL;
    omc_xfer_descriptor* desc = (omc_xfer_descriptor*)malloc(sizeof(omc_xfer_descriptor));
    omc_xfer_entry* e;
    omc_xfer_op op;
    uint8_t *local = NULL, *remote = NULL;
    uint32_t n, i, batches = 20, block, bad = 0;
    omc_time_ns t0, t1;
    omc_result r;
    int rdma;
    if (argc < 4 || !desc) { usage(); return 2; }
    rdma = strcmp(argv[1], "rdma") == 0;
    op = strcmp(argv[2], "read") == 0 ? OMC_XFER_READ : OMC_XFER_WRITE;
    n = strcmp(argv[3], "1x8m") == 0 ? 1 : 256;
    block = TOTAL / n;
    if (argc > 4) batches = (uint32_t)atoi(argv[4]);
    memset(&d, 0, sizeof(d));
    d.transport = rdma ? OMC_XFER_TRANSPORT_RDMA : OMC_XFER_TRANSPORT_TCP;
    d.host = rdma && getenv("OMC_RDMA_IP") ? getenv("OMC_RDMA_IP") : "127.0.0.1";
    d.rdma.devices = rdma ? getenv("OMC_RDMA_DEVICE") : NULL;
    d.rdma.max_rails = 1;
    if (posix_memalign((void**)&local, 4096, TOTAL) != 0 || posix_memalign((void**)&remote, 4096, REGION) != 0) return 1;
    for (i = 0; i < REGION; i++) remote[i] = (uint8_t)(i * 131u + (i >> 12));
    memset(local, 0, TOTAL);
    if ((r = omc_xfer_create(&d, &rx)) != OMC_OK || (r = omc_xfer_create(&d, &tx)) != OMC_OK ||
        (r = omc_xfer_register(rx, remote, REGION, 0)) != OMC_OK || (r = omc_xfer_register(tx, local, TOTAL, 0)) != OMC_OK ||
        (r = omc_xfer_peer_open(tx, omc_xfer_name(rx), omc_deadline_after_ms(10000), &p)) != OMC_OK ||
        (r = omc_xfer_peer_descriptor(p, desc)) != OMC_OK) {
        fprintf(stderr, "bench_xfer: set-up failed: %s\n", omc_result_str(r));
        return 1;
    }
    e = (omc_xfer_entry*)calloc(n, sizeof(*e));
    for (i = 0; i < n; i++) {       /* block i <-> slot (i * 97 + 13) % 1024 of the target's region */
        e[i].local = local + (size_t)i * block;
        e[i].remote = desc->range[0].addr + (n == 1 ? 0 : (uint64_t)((i * 97u + 13u) % (REGION / block)) * block);
        e[i].length = block;
    }
    if ((r = omc_xfer_run(p, op, e, n, NULL, 0, omc_deadline_after_ms(60000), NULL)) != OMC_OK) {    /* warm-up (connects) */
        fprintf(stderr, "bench_xfer: warm-up batch: %s\n", omc_result_str(r));
        return 1;
    }
    t0 = omc_now_ns();
    for (i = 0; i < batches && r == OMC_OK; i++) r = omc_xfer_run(p, op, e, n, NULL, 0, omc_deadline_after_ms(60000), NULL);
    t1 = omc_now_ns();
    if (r != OMC_OK) { fprintf(stderr, "bench_xfer: batch %u: %s\n", i, omc_result_str(r)); return 1; }
    for (i = 0; i < n; i++) {       /* the last batch's bytes, both ways */
        const uint8_t* a = (const uint8_t*)e[i].local;
        const uint8_t* b = remote + (e[i].remote - desc->range[0].addr);
        if (memcmp(a, b, block) != 0) bad++;
    }
    if (bad) { fprintf(stderr, "bench_xfer: %u blocks differ\n", bad); return 1; }
    printf("xfer transport=%s op=%s layout=%s batches=%u bytes=%llu seconds=%.3f mbps=%.1f\n", rdma ? "rdma" : "tcp",
           op == OMC_XFER_READ ? "read" : "write", n == 1 ? "1x8m" : "256x32k", batches, (unsigned long long)batches * TOTAL,
           (double)(t1 - t0) / 1e9, (double)batches * TOTAL / 1048576.0 / ((double)(t1 - t0) / 1e9));
    omc_xfer_peer_close(p);
    omc_xfer_destroy(tx);
    omc_xfer_destroy(rx);
    free(local);
    free(remote);
    free(e);
    free(desc);
    return 0;
}
