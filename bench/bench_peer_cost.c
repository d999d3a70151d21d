/* bench_peer_cost.c - one side of the cost-per-peer study (bench/peer_cost.py drives it): a sender
   that puts payloads and writes their metadata to files, or a receiver that reads them. Both run
   until the driver closes their stdin, so the driver can look at /proc/<pid> while every peer is
   still connected.

   usage: bench_peer_cost sender   --transport tcp|shm --dir D --id I --receivers R --n N --size S
          bench_peer_cost receiver --transport tcp|shm --dir D --senders I,J,... --group G --n N --size S

   sender: puts N payloads of S bytes for each group of at most 16 receivers (key "g<G>-<j>",
     fan-out readers = the receivers in that group: the shared-memory connector's limit is 16 per
     put, and the same layout is used for TCP so both do the same work); the metadata of each put
     goes to D/s<I>-g<G>-<j>.meta. Then it prints "ready <pid>" and waits for stdin to close.
   receiver: creates its connector, prints "ready <pid>", waits for a line on stdin ("go"), then
     gets the N payloads of group G from every sender listed, checks size and content, releases
     each, prints "done <seconds> <bytes> <retries>" and waits for stdin to close (still
     connected). A get that fails with OMC_ERR_CONNECTION is tried again (at most PC_RETRIES
     times in all), as an application would, and counted: the driver reports the count.
   Everything goes through the public API; the connectors are used as shipped. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PC_GROUP 16
#define PC_RETRIES 8                    /* gets retried after OMC_ERR_CONNECTION, per receiver */

typedef struct pc_args {
    const char* mode;
    const char* transport;
    const char* dir;
    const char* senders;
    int id, receivers, n, group;
    uint64_t size;
} pc_args;

static void usage(void) {
    fprintf(stderr, "usage: bench_peer_cost sender   --transport tcp|shm --dir D --id I --receivers R --n N --size S\n"
                    "       bench_peer_cost receiver --transport tcp|shm --dir D --senders I,J,... --group G --n N --size S\n"
                    "defaults: --transport tcp --n 8 --size 1048576 --receivers 1 --group 0\n");
    exit(2);
}

static int parse(int argc, char** argv, pc_args* a) {
    int i;
    memset(a, 0, sizeof(*a));
    a->transport = "tcp";
    a->n = 8;
    a->size = 1u << 20;
    a->receivers = 1;
    if (argc < 2) return -1;
    a->mode = argv[1];
    for (i = 2; i + 1 < argc; i += 2) {
        const char* k = argv[i];
        const char* v = argv[i + 1];
        if (!strcmp(k, "--transport")) a->transport = v;
        else if (!strcmp(k, "--dir")) a->dir = v;
        else if (!strcmp(k, "--senders")) a->senders = v;
        else if (!strcmp(k, "--id")) a->id = atoi(v);
        else if (!strcmp(k, "--receivers")) a->receivers = atoi(v);
        else if (!strcmp(k, "--n")) a->n = atoi(v);
        else if (!strcmp(k, "--group")) a->group = atoi(v);
        else if (!strcmp(k, "--size")) a->size = strtoull(v, NULL, 10);
        else return -1;
    }
    if (i != argc || !a->dir || a->n < 1 || a->receivers < 1 || a->size < 1) return -1;
    return 0;
}

/* Byte j of payload (sender, group, index): a pattern the receiver can check. */
static uint8_t pc_byte(int sender, int group, int idx, uint64_t j) {
    return (uint8_t)((j * 131u) ^ (uint64_t)(sender * 7 + group * 13 + idx * 29));
}

static omc_result pc_create(const pc_args* a, omc_role role, uint64_t pool, omc_conn** out) {
    if (!strcmp(a->transport, "shm")) {
        omc_shm_desc d;
        memset(&d, 0, sizeof(d));
        d.role = role;
        d.channel = "peercost";
        d.pool_size = pool;
        d.disable_inline = 1;       /* every byte through the segment, whatever the size */
        return omc_shm_create(&d, out);
    }
    {
        omc_tcp_desc d;
        memset(&d, 0, sizeof(d));
        d.role = role;
        d.pool_size = pool;
        d.disable_inline = 1;       /* every byte on the data plane, whatever the size */
        return omc_tcp_create(&d, out);
    }
}

static void wait_stdin_closed(void) {
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {}
}

static int run_sender(const pc_args* a) {
    int groups = (a->receivers + PC_GROUP - 1) / PC_GROUP, g, j;
    uint64_t pool = (uint64_t)groups * (uint64_t)a->n * a->size + (a->size * 2) + (8u << 20);
    uint8_t* data = (uint8_t*)malloc(a->size);
    omc_conn* c = NULL;
    omc_result r;
    if (!data) return 1;
    r = pc_create(a, OMC_ROLE_SENDER, pool, &c);
    if (r != OMC_OK) { fprintf(stderr, "sender: create: %s\n", omc_result_str(r)); return 1; }
    for (g = 0; g < groups; g++) {
        int readers = a->receivers - g * PC_GROUP < PC_GROUP ? a->receivers - g * PC_GROUP : PC_GROUP;
        for (j = 0; j < a->n; j++) {
            char key[64], path[512];
            omc_payload p;
            omc_meta m;
            uint64_t b;
            FILE* f;
            for (b = 0; b < a->size; b++) data[b] = pc_byte(a->id, g, j, b);
            memset(&p, 0, sizeof(p));
            p.data = data;
            p.size = a->size;
            p.readers = (uint32_t)readers;
            p.ttl_ms = -1;
            snprintf(key, sizeof(key), "g%d-%d", g, j);
            r = omc_conn_put(c, "peer", "cost", key, &p, &m);
            if (r != OMC_OK) { fprintf(stderr, "sender: put %s: %s\n", key, omc_result_str(r)); return 1; }
            snprintf(path, sizeof(path), "%s/s%d-g%d-%d.meta", a->dir, a->id, g, j);
            f = fopen(path, "wb");
            if (!f || fwrite(m.data, 1, m.size, f) != m.size || fclose(f) != 0) { fprintf(stderr, "sender: write %s\n", path); return 1; }
            omc_meta_free(&m);
        }
    }
    free(data);
    printf("ready %ld\n", (long)getpid());
    fflush(stdout);
    wait_stdin_closed();
    omc_conn_destroy(c);
    return 0;
}

static int read_file(const char* path, uint8_t* buf, size_t cap, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return -1;
    *n = fread(buf, 1, cap, f);
    fclose(f);
    return *n ? 0 : -1;
}

static int run_receiver(const pc_args* a) {
    int ids[256], nids = 0, s, j;
    const char* p = a->senders;
    omc_conn* c = NULL;
    omc_result r;
    char line[64];
    omc_time_ns t0;
    uint64_t bytes = 0;
    int retries = 0;
    while (p && *p && nids < 256) {
        ids[nids++] = atoi(p);
        p = strchr(p, ',');
        if (p) p++;
    }
    if (!nids) usage();
    r = pc_create(a, OMC_ROLE_RECEIVER, a->size * 4 + (8u << 20), &c);
    if (r != OMC_OK) { fprintf(stderr, "receiver: create: %s\n", omc_result_str(r)); return 1; }
    printf("ready %ld\n", (long)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin)) { omc_conn_destroy(c); return 1; }
    t0 = omc_now_ns();
    for (j = 0; j < a->n; j++) {
        for (s = 0; s < nids; s++) {
            char key[64], path[512];
            static uint8_t meta[1u << 16];
            size_t mn = 0;
            omc_buffer b;
            uint64_t k;
            snprintf(path, sizeof(path), "%s/s%d-g%d-%d.meta", a->dir, ids[s], a->group, j);
            if (read_file(path, meta, sizeof(meta), &mn) != 0) { fprintf(stderr, "receiver: no %s\n", path); return 1; }
            snprintf(key, sizeof(key), "g%d-%d", a->group, j);
            r = omc_conn_get(c, "peer", "cost", key, meta, mn, omc_deadline_after_ms(120000), &b);
            while (r == OMC_ERR_CONNECTION && retries < PC_RETRIES) {     /* what an application would do; counted */
                retries++;
                r = omc_conn_get(c, "peer", "cost", key, meta, mn, omc_deadline_after_ms(120000), &b);
            }
            if (r != OMC_OK) { fprintf(stderr, "receiver: get %s from sender %d: %s\n", key, ids[s], omc_result_str(r)); return 1; }
            if (b.size != a->size) { fprintf(stderr, "receiver: %s: %llu bytes\n", key, (unsigned long long)b.size); return 1; }
            for (k = 0; k < b.size; k += 4093)
                if (((const uint8_t*)b.data)[k] != pc_byte(ids[s], a->group, j, k)) { fprintf(stderr, "receiver: %s: wrong bytes\n", key); return 1; }
            bytes += b.size;
            omc_buffer_release(&b);
        }
    }
    printf("done %.6f %llu %d\n", (double)(omc_now_ns() - t0) / 1e9, (unsigned long long)bytes, retries);
    fflush(stdout);
    wait_stdin_closed();
    omc_conn_destroy(c);
    return 0;
}

int main(int argc, char** argv) {
    pc_args a;
    if (parse(argc, argv, &a) != 0) usage();
    if (!strcmp(a.mode, "sender")) return run_sender(&a);
    if (!strcmp(a.mode, "receiver")) return run_receiver(&a);
    usage();
    return 2;
}
