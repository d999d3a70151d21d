/* fuzz_resp.c - libFuzzer target for the store connector's RESP decoder: the input is what a
   server (or anything pretending to be one) sent on the connection.

   The input goes into one end of a socketpair, which is then closed; the decoder reads replies
   from the other end until it fails (the end of the input is a closed connection). Properties:
   every decoded reply is well formed (types known, strings NUL-terminated at their length, arrays
   of at most the elements announced, nesting at most 4 deep), the decoder never reads past what it
   was sent, and a stream that fails ends with a clear result (protocol, connection, memory).
   The first byte also selects a payload read (omc__rc_read_exact into an exact-size buffer), as a
   get does after its claim.

   Built by tests/fuzz/run.sh (see fuzz_frame.c); -DOMC_FUZZ_SEEDS gives the seed writer. */
#define OMNICONN_IMPLEMENTATION
#define OMNICONN_NO_ZMQ
#include "omniconn.h"
#include "omniconn_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_resp"
#include "fuzz_common.h"

static void check_rv(const omc__rv* v, int depth) {
    uint32_t k;
    FUZZ_REQUIRE(depth <= 5);
    switch (v->type) {
        case OMC__RV_NIL: case OMC__RV_INT: break;
        case OMC__RV_STATUS: case OMC__RV_ERROR: case OMC__RV_BULK:
            FUZZ_REQUIRE(v->s != NULL && v->s[v->len] == '\0');
            FUZZ_REQUIRE(v->len <= OMNICONN_STORE_MAX_REPLY);
            break;
        case OMC__RV_ARRAY:
            FUZZ_REQUIRE(v->e != NULL || v->n == 0);
            for (k = 0; k < v->n; k++) check_rv(&v->e[k], depth + 1);
            break;
        default:
            FUZZ_REQUIRE(0);
    }
}

static const omc_hooks fz_hooks;   /* zero: the library's default allocator (malloc), as rc.buf uses */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    int sv[2], replies = 0;
    omc__rc rc;
    omc_result r = OMC_OK;
    if (size > 60000) return 0;                 /* fits the socket buffer: one write, then EOF */
    FUZZ_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    if (size) FUZZ_REQUIRE(write(sv[0], data, size) == (ssize_t)size);
    close(sv[0]);
    memset(&rc, 0, sizeof(rc));
    rc.fd = sv[1];
    rc.buf = (uint8_t*)malloc(OMC__ST_RBUF);
    FUZZ_REQUIRE(rc.buf);
    if (size >= 2 && data[0] == 'P') {          /* a payload of data[1] bytes straight into a buffer */
        uint8_t* dst = (uint8_t*)malloc(data[1] ? data[1] : 1);
        FUZZ_REQUIRE(dst);
        r = omc__rc_read_exact(&rc, dst, data[1], omc_deadline_after_ms(1000));
        FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_CONNECTION);
        if (r == OMC_OK) FUZZ_REQUIRE(data[1] <= size);      /* never more than was sent */
        free(dst);
    }
    while (r == OMC_OK && replies < 1000) {
        omc__rv v;
        r = omc__rc_reply(&fz_hooks, &rc, &v, omc_deadline_after_ms(1000));
        if (r == OMC_OK) { check_rv(&v, 0); replies++; }
        else FUZZ_REQUIRE(v.type == OMC__RV_NIL && v.s == NULL && v.e == NULL);    /* nothing handed out */
        omc__rv_clear(&fz_hooks, &v);
    }
    FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_PROTOCOL || r == OMC_ERR_CONNECTION || r == OMC_ERR_NO_MEMORY);
    FUZZ_REQUIRE(rc.pos <= rc.len && rc.len <= OMC__ST_RBUF);
    omc__rc_close(&rc);
    free(rc.buf);
    return 0;
}

#ifdef OMC_FUZZ_SEEDS
/* ---- the seed corpus: the replies the connector reads ------------------------------------------ */
int main(int argc, char** argv) {
    static const char* seeds[] = {
        "+OK\r\n:1\r\n",                                            /* put: SET, then the script */
        "*3\r\n:1\r\n:5\r\n:0\r\n$5\r\nhello\r\n",                  /* get: claim, then GETDEL */
        "*2\r\n:-1\r\n$16\r\n0123456789abcdef\r\n$-1\r\n",          /* get: another writer's put */
        "-MOVED 3999 127.0.0.1:6381\r\n-ASK 3999 127.0.0.1:6382\r\n",
        "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
        "*2\r\n$1\r\n0\r\n*2\r\n$5\r\nomc:a\r\n$5\r\nomc:b\r\n",    /* SCAN */
        "*1\r\n*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n0123456789012345678901234567890123456789\r\n",
        "*2\r\n$18\r\nproto-max-bulk-len\r\n$9\r\n536870912\r\n",
        ("P\x05" "abcde+OK\r\n"),
    };
    int rc = 0;
    size_t i;
    if (argc < 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    for (i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "seed_%zu", i);
        rc |= write_file(argv[1], name, seeds[i], strlen(seeds[i]));
    }
    return rc;
}
#endif
