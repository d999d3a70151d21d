/* app_tcp.c - a TCP program built the plain way, no -lzmq (libzmq is loaded at run time):
       cc -std=c99 -I. tests/compile/app_tcp.c -o app_tcp -lpthread -ldl
   A sender and a receiver connector in one process on loopback: one put, one get by metadata.
   Exit status 0 on success; 2 if libzmq is not installed (the create says which package). */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include <stdio.h>
#include <string.h>

int main(void) {
    omc_tcp_desc sd, rd;
    omc_conn *s = NULL, *rcv = NULL;
    omc_payload p;
    omc_meta meta = {0};
    omc_buffer b;
    const char msg[] = "hello over tcp";
    omc_result r;
    memset(&sd, 0, sizeof(sd));
    sd.role = OMC_ROLE_SENDER;
    sd.pool_size = 4u << 20;
    sd.hooks.log_fn = omc_log_stderr;
    rd = sd;
    rd.role = OMC_ROLE_RECEIVER;
    r = omc_tcp_create(&sd, &s);
    if (r == OMC_ERR_UNAVAILABLE) { printf("app_tcp: libzmq is not installed here\n"); return 2; }
    if (r == OMC_OK) r = omc_tcp_create(&rd, &rcv);
    memset(&p, 0, sizeof(p));
    p.data = msg;
    p.size = sizeof(msg);
    if (r == OMC_OK) r = omc_conn_put(s, "a", "b", "k", &p, &meta);
    memset(&b, 0, sizeof(b));
    if (r == OMC_OK) r = omc_conn_get(rcv, "a", "b", "k", meta.data, meta.size, omc_deadline_after_ms(5000), &b);
    if (r == OMC_OK && (b.size != sizeof(msg) || memcmp(b.data, msg, sizeof(msg)) != 0)) r = OMC_ERR_PROTOCOL;
    if (r == OMC_OK) omc_buffer_release(&b);
    omc_meta_free(&meta);
    omc_conn_destroy(rcv);
    omc_conn_destroy(s);
    printf("app_tcp: %s\n", r == OMC_OK ? "ok" : omc_result_str(r));
    return r == OMC_OK ? 0 : 1;
}
