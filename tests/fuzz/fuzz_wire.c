/* fuzz_wire.c - libFuzzer target for the remote connector's decoders: side-channel messages
   (omc__wire_decode, with the HELLO endpoint records walked and the TCP record decoded), the TCP
   data plane's hello and per-transfer header, and the TCP metadata body.

   Properties, for every input:
     - a decoder that accepts hands out only pointers inside the input, and lengths that add up;
     - an accepted message encodes back to exactly the input bytes (the format is canonical:
       reserved fields zero, lengths exact), and an accepted metadata body too;
     - a rejection is one of the documented codes.
   Each input is also tried with its header made right (magic, version, body length), so the
   fuzzer spends its time in the bodies rather than at the door.

   Built by tests/fuzz/run.sh (see fuzz_frame.c), or by hand:
     clang -fsanitize=fuzzer,address,undefined -I. -Itests tests/fuzz/fuzz_wire.c -lzmq -ldl -lpthread
   -DOMC_FUZZ_SEEDS gives the seed writer (one valid message of every type). */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_wire"
#include "fuzz_common.h"

static int inside(const void* p, size_t n, const uint8_t* base, size_t size) {
    const uint8_t* q = (const uint8_t*)p;
    return n == 0 || (q >= base && q <= base + size && n <= (size_t)(base + size - q));
}

static void check_message(const uint8_t* data, size_t size) {
    omc__wire m;
    uint8_t* back;
    uint32_t len = 0;
    omc_result r = omc__wire_decode(data, size, &m);
    if (r != OMC_OK) {
        FUZZ_REQUIRE(r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION || r == OMC_ERR_PROTOCOL);
        return;
    }
    FUZZ_REQUIRE(size >= OMC__WIRE_HEADER && size <= OMC__WIRE_MAX);
    FUZZ_REQUIRE(m.type >= OMC__MSG_HELLO && m.type <= OMC__MSG_LIST_REPLY);
    FUZZ_REQUIRE(inside(m.key, m.key_len, data, size) && inside(m.desc, m.desc_len, data, size));
    FUZZ_REQUIRE(inside(m.text, m.text_len, data, size) && inside(m.records, m.records_len, data, size));
    if (m.type == OMC__MSG_QUERY || m.type == OMC__MSG_PULL) FUZZ_REQUIRE(m.key_len >= 1 && m.key_len <= OMC__WIRE_MAX_KEY);
    if (m.type == OMC__MSG_PULL) FUZZ_REQUIRE(m.desc_len <= OMC__WIRE_MAX_DESC && m.dp_kind != 0);
    if (m.type == OMC__MSG_ERROR) FUZZ_REQUIRE(m.code < 0 && m.text_len <= OMC__WIRE_MAX_TEXT);
    if (m.type == OMC__MSG_HELLO) {
        uint32_t off = 0, n, count = 0;
        uint16_t t;
        const uint8_t* v;
        int more;
        while ((more = omc__wire_next_record(m.records, m.records_len, &off, &t, &v, &n)) == 1) {
            FUZZ_REQUIRE(inside(v, n, data, size));
            count++;
            if (t == OMC__DP_TCP) {
                char host[OMC_TCP_HOST_MAX];
                uint16_t port = 0;
                if (omc__tcp_record_decode(v, n, &port, host, sizeof(host)) == OMC_OK)
                    FUZZ_REQUIRE(port != 0 && strlen(host) == n - 4);
            }
        }
        FUZZ_REQUIRE(more == 0 && count == m.nrecords && count <= OMC__WIRE_MAX_RECORDS);
    }
    /* canonical: what we accept, we would have sent byte for byte */
    back = (uint8_t*)malloc(OMC__WIRE_MAX);
    FUZZ_REQUIRE(back);
    FUZZ_REQUIRE(omc__wire_encode(&m, back, OMC__WIRE_MAX, &len) == OMC_OK);
    FUZZ_REQUIRE(len == size && memcmp(back, data, size) == 0);
    free(back);
}

static void check_tcp(const uint8_t* data, size_t size) {
    uint64_t token = 0, inc = 0;
    uint8_t ticket[OMC__TCP_TICKET_SIZE];
    if (size >= OMC__TCP_HELLO_SIZE) {
        omc_result r = omc__tcp_hello_decode(data, OMC__TCP_HELLO_SIZE, &token, &inc, ticket);
        FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION);
        if (r == OMC_OK) {
            uint8_t again[OMC__TCP_HELLO_SIZE], secret[OMC__TCP_SECRET_SIZE], nonce[16];
            FUZZ_REQUIRE(token != 0);
            memset(secret, 0, sizeof(secret));
            memset(nonce, 0, sizeof(nonce));
            omc__tcp_hello_encode(again, token, inc, ticket, secret, nonce);
            /* the signed part round-trips byte for byte; the proof after it is a MAC the decoder
               does not check (the listener does, against its ticket's secret) */
            FUZZ_REQUIRE(memcmp(again, data, OMC__TCP_HELLO_SIGNED) == 0);
        }
    }
    if (size >= OMC__TCP_HEADER_SIZE) {
        uint64_t xfer = omc__get_u64(data + 8), sz = omc__get_u64(data + 16);
        omc_result r = omc__tcp_header_check(data, xfer, sz, sz);
        FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_MALFORMED);
        /* a size that lies (more than the destination holds) is always refused */
        if (sz > 0) FUZZ_REQUIRE(omc__tcp_header_check(data, xfer, sz, sz - 1) != OMC_OK);
        FUZZ_REQUIRE(omc__tcp_header_check(data, xfer + 1, sz, sz) != OMC_OK);
    }
}

static void check_meta_body(const uint8_t* data, size_t size) {
    omc__net_meta mb;
    omc_result r;
    uint64_t inl;
    if (size > 65536 + 16 + 255) return;
    r = omc__net_meta_body_decode(data, (uint32_t)size, 0, 0, &mb);
    FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_MALFORMED);
    if (r == OMC_OK) {
        uint8_t back[16 + OMC_TCP_HOST_MAX];
        FUZZ_REQUIRE(omc__net_meta_body_size(mb.host) == size && mb.entry_id != 0 && mb.port != 0 && mb.inl == NULL);
        omc__net_meta_body_encode(back, mb.entry_id, mb.port, mb.caps, mb.host);
        FUZZ_REQUIRE(memcmp(back, data, size) == 0);
    }
    /* the same bytes as an inline body: the envelope's size must be exactly what follows the
       host, and never more than OMC_TCP_MAX_INLINE, whatever the envelope claims */
    inl = size >= 16 ? (uint64_t)size - 16 - (size >= 12 ? omc__get_u16(data + 10) : 0) : 0;
    r = omc__net_meta_body_decode(data, (uint32_t)size, OMC_META_FLAG_INLINE, inl, &mb);
    FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_MALFORMED);
    if (r == OMC_OK) FUZZ_REQUIRE(mb.inl == data + 16 + strlen(mb.host) && inl <= OMC_TCP_MAX_INLINE);
    FUZZ_REQUIRE(omc__net_meta_body_decode(data, (uint32_t)size, OMC_META_FLAG_INLINE, inl + 1, &mb) == OMC_ERR_MALFORMED);
    FUZZ_REQUIRE(omc__net_meta_body_decode(data, (uint32_t)size, OMC_META_FLAG_INLINE, (uint64_t)1 << 40, &mb) == OMC_ERR_MALFORMED);
}

/* a request's key proof, computed from the precomputed pad blocks, is the first 16 bytes of the
   plain HMAC-SHA-256 over label, entry id and key (secret and key taken from the input) */
static void check_key_proof(const uint8_t* data, size_t size) {
    static const char label[] = "omniconn request key 4";
    uint8_t secret[OMC__TCP_SECRET_SIZE], id[8], full[OMC__SHA256_SIZE], proof[OMC__TCP_PROOF_SIZE];
    const void* part[3];
    size_t len[3], klen = size > 40 ? size - 40 : 0;
    omc__tcp_mac mac;
    uint64_t entry = size >= 8 ? omc__get_u64(data) : 0;
    memset(secret, 0, sizeof(secret));
    memcpy(secret, data + (size >= 8 ? 8 : 0), omc__min(size >= 8 ? size - 8 : 0, sizeof(secret)));
    omc__tcp_mac_init(&mac, secret);
    omc__tcp_key_proof(&mac, entry, (const char*)data + (klen ? 40 : 0), (uint32_t)klen, proof);
    omc__put_u64(id, entry);
    part[0] = label; len[0] = sizeof(label) - 1;
    part[1] = id; len[1] = 8;
    part[2] = data + (klen ? 40 : 0); len[2] = klen;
    omc__hmac_sha256(secret, sizeof(secret), part, len, 3, full);
    FUZZ_REQUIRE(memcmp(proof, full, sizeof(proof)) == 0);
}

/* a request on a data connection: exactly 64 bytes, one encoding (the key proof carried as is) */
static void check_request(const uint8_t* data, size_t size) {
    omc__tcp_req q;
    omc_result r = omc__tcp_req_decode(data, size, &q);
    FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_MALFORMED);
    if (r == OMC_OK) {
        uint8_t back[OMC__TCP_REQUEST_SIZE];
        FUZZ_REQUIRE(size == OMC__TCP_REQUEST_SIZE && q.entry_id != 0);
        FUZZ_REQUIRE(memcmp(q.proof, data + 48, OMC__TCP_PROOF_SIZE) == 0);
        omc__tcp_req_encode(back, &q);
        FUZZ_REQUIRE(memcmp(back, data, size) == 0);
    }
    check_key_proof(data, size);
    if (size >= OMC__TCP_STATUS_SIZE) {
        int32_t code;
        uint64_t detail, xfer = omc__get_u64(data + 8);
        r = omc__tcp_status_decode(data, xfer, &code, &detail);
        FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_MALFORMED || r == OMC_ERR_PROTOCOL);
        if (r == OMC_OK) FUZZ_REQUIRE(code <= 0);
        FUZZ_REQUIRE(omc__tcp_status_decode(data, xfer + 1, &code, &detail) != OMC_OK);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_message(data, size);
    check_tcp(data, size);
    check_meta_body(data, size);
    check_request(data, size);
    if (size >= OMC__WIRE_HEADER && size <= OMC__WIRE_MAX) {     /* the same bytes behind a right header */
        uint8_t* fixed = (uint8_t*)malloc(size);
        FUZZ_REQUIRE(fixed);
        memcpy(fixed, data, size);
        omc__put_u32(fixed, OMC__WIRE_MAGIC);
        fixed[4] = OMC__WIRE_VERSION;
        omc__put_u16(fixed + 6, 0);
        omc__put_u32(fixed + 28, (uint32_t)(size - OMC__WIRE_HEADER));
        check_message(fixed, size);
        free(fixed);
    }
    return 0;
}

#ifdef OMC_FUZZ_SEEDS
/* ---- the seed corpus: one valid message of every type, a TCP hello, header and metadata body -- */

int main(int argc, char** argv) {
    static const char key[] = "thinker\x1ftalker\x1freq-42";
    uint8_t buf[OMC__WIRE_MAX], recs[256], val[64], tok[8];
    uint32_t len, rlen = 0, count = 0, t;
    omc__wire m;
    int rc = 0;
    if (argc < 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    omc__put_u16(val, 50151);
    omc__put_u16(val + 2, 0);
    memcpy(val + 4, "10.0.0.7", 8);
    omc__wire_add_record(recs, sizeof(recs), &rlen, &count, OMC__DP_TCP, val, 12);
    omc__wire_add_record(recs, sizeof(recs), &rlen, &count, 9, (const uint8_t*)"future", 6);
    omc__put_u64(tok, 0x1122334455667788ull);
    for (t = OMC__MSG_HELLO; t <= OMC__MSG_ABORT; t++) {
        char name[32];
        memset(&m, 0, sizeof(m));
        m.type = (uint8_t)t;
        m.xfer = 77; m.incarnation = 0xABCDEF; m.seq = 3;
        m.caps = OMC_NET_CAP_TCP; m.nrecords = count; m.records = recs; m.records_len = rlen;
        m.wait_ms = 1000; m.key = key; m.key_len = (uint32_t)strlen(key);
        m.entry_id = 5; m.size = 1u << 20; m.readers_left = 2;
        m.capacity = 1u << 20; m.budget_ms = 20000; m.dp_kind = OMC__DP_TCP; m.desc = tok; m.desc_len = 8;
        m.bytes = 1u << 20; m.code = (int32_t)OMC_ERR_TOO_LARGE; m.detail = 12345; m.text = "too large"; m.text_len = 9;
        if (omc__wire_encode(&m, buf, sizeof(buf), &len) != OMC_OK) return 1;
        snprintf(name, sizeof(name), "msg-%s", omc__wire_type_name((uint8_t)t));
        rc |= write_file(argv[1], name, buf, len);
    }
    omc__tcp_hello_encode(buf, 0x1122334455667788ull, 0xABCDEF, (const uint8_t*)"0123456789abcdef",
                          (const uint8_t*)"a ticket secret of 32 bytes.....", (const uint8_t*)"a nonce 16 bytes");
    rc |= write_file(argv[1], "tcp-hello", buf, OMC__TCP_HELLO_SIZE);
    omc__tcp_header_encode(buf, 77, 1u << 20);
    rc |= write_file(argv[1], "tcp-header", buf, OMC__TCP_HEADER_SIZE);
    omc__net_meta_body_encode(buf, 5, 50151, OMC_NET_CAP_TCP, "10.0.0.7");
    rc |= write_file(argv[1], "meta-body", buf, omc__net_meta_body_size("10.0.0.7"));
    memcpy(buf + omc__net_meta_body_size("10.0.0.7"), "inline", 6);
    rc |= write_file(argv[1], "meta-body-inline", buf, omc__net_meta_body_size("10.0.0.7") + 6);
    {
        omc__tcp_req q;
        memset(&q, 0, sizeof(q));
        q.op = OMC__TCP_REQ_PULL; q.xfer = 77; q.entry_id = ((uint64_t)3 << 32) | 5; q.expect_incarnation = 0xABCDEF;
        q.capacity = 1u << 20; q.budget_ms = 20000;
        {
            omc__tcp_mac mac;
            omc__tcp_mac_init(&mac, (const uint8_t*)"a ticket secret of 32 bytes.....");
            omc__tcp_key_proof(&mac, q.entry_id, key, (uint32_t)strlen(key), q.proof);
        }
        omc__tcp_req_encode(buf, &q);
        rc |= write_file(argv[1], "tcp-request", buf, OMC__TCP_REQUEST_SIZE);
        omc__tcp_status_encode(buf, OMC_ERR_TOO_LARGE, 77, 2u << 20);
        rc |= write_file(argv[1], "tcp-status", buf, OMC__TCP_STATUS_SIZE);
    }
    return rc;
}
#endif
