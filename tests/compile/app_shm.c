/* app_shm.c - a shared-memory program built the plain way, no libzmq:
       cc -std=c99 -I. tests/compile/app_shm.c -o app_shm -lpthread -ldl
   Puts one payload and gets it back through the SHM connector, then checks that libzmq is not
   mapped into the process (an SHM program never touches it). Exit status 0 on success. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"
#include <stdio.h>
#include <string.h>

static int libzmq_mapped(void) {
    char line[512];
    int found = 0;
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) if (strstr(line, "libzmq")) found = 1;
    fclose(f);
    return found;
}

int main(void) {
    omc_shm_desc d;
    omc_conn* c = NULL;
    omc_payload p;
    omc_meta meta = {0};
    omc_buffer b;
    const char msg[] = "hello over shared memory";
    omc_result r;
    memset(&d, 0, sizeof(d));
    d.channel = "app_shm";
    d.pool_size = 4u << 20;
    r = omc_shm_create(&d, &c);
    if (r != OMC_OK) { printf("app_shm: create: %s\n", omc_result_str(r)); return 1; }
    memset(&p, 0, sizeof(p));
    p.data = msg;
    p.size = sizeof(msg);
    r = omc_conn_put(c, "a", "b", "k", &p, &meta);
    memset(&b, 0, sizeof(b));
    if (r == OMC_OK) r = omc_conn_get(c, "a", "b", "k", meta.data, meta.size, omc_deadline_after_ms(2000), &b);
    if (r == OMC_OK && (b.size != sizeof(msg) || memcmp(b.data, msg, sizeof(msg)) != 0)) r = OMC_ERR_PROTOCOL;
    if (r == OMC_OK) omc_buffer_release(&b);
    omc_meta_free(&meta);
    omc_conn_destroy(c);
    if (r != OMC_OK) { printf("app_shm: %s\n", omc_result_str(r)); return 1; }
    if (libzmq_mapped() != 0) { printf("app_shm: libzmq is mapped into an SHM-only program\n"); return 1; }
    printf("app_shm: ok (libzmq not loaded)\n");
    return 0;
}
