/* fuzz_shmbody.c - libFuzzer target for the shared-memory connector's metadata body
   (omniconn_shm.h: the body after the envelope, decoded by the private omc__shm_parse_body before
   a receiver opens any file). Metadata reaches a receiver through the application's control
   plane, so every byte is untrusted.

   Input layout (so the fuzzer controls the envelope fields the body is checked against):
     byte 0      envelope flags (bit 0 inline)
     bytes 1..8  the envelope's payload size (u64 little-endian)
     bytes 9..   the body
   Properties, for every input:
     - a rejection is OMC_ERR_MALFORMED;
     - an accepted body is exactly 56 + name length (+ payload size when inline) bytes, its
       reserved fields are zero, its generation is non-zero, its payload size equals the
       envelope's, its segment name is 1..95 bytes, names a segment of our uid (omc-<uid>-...)
       and contains no '/', and the inline bytes (if any) lie inside the input.
   Each input is also tried with the name made plausible and the lengths made to agree, so the
   fuzzer reaches the name check and the inline path.

   Built by tests/fuzz/run.sh; -DOMC_FUZZ_SEEDS gives the seed writer (a by-reference and an
   inline body). */
#define OMNICONN_IMPLEMENTATION
#define OMNICONN_NO_ZMQ
#include "omniconn.h"
#include "omniconn_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_shmbody"
#include "fuzz_common.h"

static omc_conn fake_conn;      /* only its hooks are read (for the log line of a foreign name) */
static omc__shm fake_shm;

static void quiet_log(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    (void)level; (void)item; (void)msg; (void)file; (void)line; (void)user;
}

static void check_body(uint32_t flags, uint64_t data_size, const uint8_t* body, size_t n) {
    omc_meta_info m;
    omc__shm_body b;
    omc_result r;
    char prefix[32];
    int plen;
    if (n > OMC_META_MAX_BODY) return;
    memset(&m, 0, sizeof(m));
    m.transport = OMC_TRANSPORT_SHM;
    m.flags = flags;
    m.data_size = data_size;
    m.body = n ? body : NULL;
    m.body_len = (uint32_t)n;
    memset(&b, 0, sizeof(b));
    r = omc__shm_parse_body(&fake_shm, &m, &b);
    if (r != OMC_OK) { FUZZ_REQUIRE(r == OMC_ERR_MALFORMED); return; }
    FUZZ_REQUIRE(n >= 56 && body[48] >= 1 && body[48] <= 95);
    FUZZ_REQUIRE(n == 56u + body[48] + ((flags & OMC_META_FLAG_INLINE) ? data_size : 0));
    FUZZ_REQUIRE(b.gen != 0 && b.size == data_size && omc__get_u32(body + 28) == 0);
    FUZZ_REQUIRE(strlen(b.name) == body[48] && !strchr(b.name, '/'));
    plen = snprintf(prefix, sizeof(prefix), "omc-%u-", (unsigned)fake_shm.uid);
    FUZZ_REQUIRE(strncmp(b.name, prefix, (size_t)plen) == 0);
    if (flags & OMC_META_FLAG_INLINE) FUZZ_REQUIRE(b.inline_bytes == body + 56 + body[48]);
    else FUZZ_REQUIRE(b.inline_bytes == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    uint32_t flags;
    uint64_t data_size;
    size_t n;
    if (!fake_shm.conn) {
        fake_conn.hooks.log_fn = quiet_log;
        fake_shm.conn = &fake_conn;
        fake_shm.uid = (uint32_t)geteuid();
    }
    if (size < 9) return 0;
    flags = data[0] & 3u;
    data_size = omc__get_u64(data + 1);
    n = size - 9;
    {   /* exact-size copy: ASan sees every overread */
        uint8_t* body = (uint8_t*)malloc(n ? n : 1);
        FUZZ_REQUIRE(body);
        memcpy(body, data + 9, n);
        check_body(flags, data_size, body, n);
        /* again with a plausible name of our uid and lengths that agree */
        if (n >= 56 + 12) {
            char prefix[32];
            int plen = snprintf(prefix, sizeof(prefix), "omc-%u-", (unsigned)fake_shm.uid);
            uint32_t nlen = (uint32_t)(n - 56 > 95 ? 95 : n - 56);
            if (nlen > (uint32_t)plen) {
                memcpy(body + 56, prefix, (size_t)plen);
                body[48] = (uint8_t)nlen;
                check_body(flags & ~OMC_META_FLAG_INLINE, data_size, body, 56 + nlen);
                check_body(flags | OMC_META_FLAG_INLINE, n - 56 - nlen, body, n);
            }
        }
        free(body);
    }
    return 0;
}

#ifdef OMC_FUZZ_SEEDS
int main(int argc, char** argv) {
    uint8_t buf[9 + 56 + 96 + 64];
    char name[96];
    int nl, bad = 0;
    if (argc != 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    nl = snprintf(name, sizeof(name), "omc-%u-default-4242-00112233445566ff", (unsigned)geteuid());
    memset(buf, 0, sizeof(buf));
    buf[0] = 0;                                  /* by reference */
    omc__put_u64(buf + 1, 1u << 20);
    omc__put_u64(buf + 9, 0x00112233445566ffull);
    omc__put_u64(buf + 9 + 8, 123456);
    omc__put_u32(buf + 9 + 16, 4242);
    omc__put_u32(buf + 9 + 20, 7);
    omc__put_u32(buf + 9 + 24, 3);
    omc__put_u64(buf + 9 + 32, 8192);
    omc__put_u64(buf + 9 + 40, 1u << 20);
    buf[9 + 48] = (uint8_t)nl;
    memcpy(buf + 9 + 56, name, (size_t)nl);
    bad |= write_file(argv[1], "seed-ref", buf, 9 + 56 + (size_t)nl);
    buf[0] = OMC_META_FLAG_INLINE;               /* inline: 64 payload bytes after the name */
    omc__put_u64(buf + 1, 64);
    omc__put_u64(buf + 9 + 40, 64);
    memset(buf + 9 + 56 + nl, 0xab, 64);
    bad |= write_file(argv[1], "seed-inline", buf, 9 + 56 + (size_t)nl + 64);
    return bad;
}
#endif
