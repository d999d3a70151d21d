/* test_rdma_unit.c - the parts of the RDMA engine that need no RDMA device: GID selection on
   made-up GID tables, MTU negotiation, the endpoint record and transfer descriptor codecs (with
   garbage), destination planning, the memory-lock check, and how the engine behaves when
   libibverbs is missing or lists no device. Runs on any machine; the device tests are in
   tests/rdma/rdma_tests.c and run on the RDMA bed. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"
#include "omc_test.h"

OMC_TEST_TSAN_IGNORE_LIBZMQ()    /* libzmq is not instrumented: see omc_test.h */

/* ---- GID tables: made-up rows as the engine would read them from a port ---------------------- */

static void gid_row(omc_rdma_gid_entry* e, uint32_t index, omc_rdma_gid_type type, const char* addr, const char* netdev) {
    memset(e, 0, sizeof(*e));
    e->index = index;
    e->type = type;
    if (addr) CHECK_OK(omc_rdma_addr_to_gid(addr, e->gid));
    snprintf(e->netdev, sizeof(e->netdev), "%s", netdev ? netdev : "");
}

static uint32_t choose(const omc_rdma_gid_entry* t, uint32_t n, omc_rdma_link link, const char* want, int override_index,
                       omc_result expect) {
    uint8_t w[16];
    uint32_t idx = 999;
    char why[300] = "";
    if (want) CHECK_OK(omc_rdma_addr_to_gid(want, w));
    CHECK_RES(omc_rdma_choose_gid(t, n, link, want ? w : NULL, override_index, &idx, why, sizeof(why)), expect);
    CHECK(why[0] != '\0');      /* always says why */
    return idx;
}

/* rxe on a veth with 10.99.0.1: index 0 link-local, index 1 the IPv4-mapped address, both v2 */
OMC_TEST(gid_rxe_table) {
    omc_rdma_gid_entry t[2];
    gid_row(&t[0], 0, OMC_RDMA_GID_ROCE_V2, "fe80::d4d9:ccff:fe64:36b", "va");
    gid_row(&t[1], 1, OMC_RDMA_GID_ROCE_V2, "10.99.0.1", "va");
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, "10.99.0.1", -1, OMC_OK), 1);
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, -1, OMC_OK), 1);          /* never link-local first */
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, "192.168.7.7", -1, OMC_OK), 1); /* no match: best routable */
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, "fe80::d4d9:ccff:fe64:36b", -1, OMC_OK), 0);   /* asked for it */
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, 0, OMC_OK), 0);           /* override */
}

/* a mlx5-like RoCE port: each address as v1 and v2, IPv4 and a global IPv6, link-local first */
OMC_TEST(gid_mlx5_like_table) {
    omc_rdma_gid_entry t[8];
    gid_row(&t[0], 0, OMC_RDMA_GID_ROCE_V1, "fe80::1", "enp1s0");
    gid_row(&t[1], 1, OMC_RDMA_GID_ROCE_V2, "fe80::1", "enp1s0");
    gid_row(&t[2], 2, OMC_RDMA_GID_ROCE_V1, "10.0.0.5", "enp1s0");
    gid_row(&t[3], 3, OMC_RDMA_GID_ROCE_V2, "10.0.0.5", "enp1s0");
    gid_row(&t[4], 4, OMC_RDMA_GID_ROCE_V1, "2001:db8::5", "enp1s0");
    gid_row(&t[5], 5, OMC_RDMA_GID_ROCE_V2, "2001:db8::5", "enp1s0");
    gid_row(&t[6], 6, OMC_RDMA_GID_ROCE_V1, "10.1.0.5", "enp2s0");
    gid_row(&t[7], 7, OMC_RDMA_GID_ROCE_V2, "10.1.0.5", "enp2s0");
    CHECK_EQ(choose(t, 8, OMC_RDMA_LINK_ETHERNET, "10.0.0.5", -1, OMC_OK), 3);    /* v2, not v1 at 2 */
    CHECK_EQ(choose(t, 8, OMC_RDMA_LINK_ETHERNET, "10.1.0.5", -1, OMC_OK), 7);    /* the side channel's NIC */
    CHECK_EQ(choose(t, 8, OMC_RDMA_LINK_ETHERNET, "2001:db8::5", -1, OMC_OK), 5);
    CHECK_EQ(choose(t, 8, OMC_RDMA_LINK_ETHERNET, NULL, -1, OMC_OK), 3);          /* v2 IPv4-mapped ranks first */
    CHECK_EQ(choose(t, 8, OMC_RDMA_LINK_ETHERNET, "::1", -1, OMC_OK), 3);
    CHECK_EQ(choose(t, 8, OMC_RDMA_LINK_ETHERNET, NULL, 4, OMC_OK), 4);           /* the user knows better */
    CHECK_EQ(choose(t, 8, OMC_RDMA_LINK_ETHERNET, NULL, 9, OMC_ERR_RDMA_DEVICE), 0);   /* no such index */
}

OMC_TEST(gid_fallback_order) {
    omc_rdma_gid_entry t[4];
    /* only v1 routable and v2 link-local: a routable GID beats link-local, whatever its version */
    gid_row(&t[0], 0, OMC_RDMA_GID_ROCE_V2, "fe80::2", NULL);
    gid_row(&t[1], 1, OMC_RDMA_GID_ROCE_V1, "10.2.0.1", NULL);
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, -1, OMC_OK), 1);
    /* the address only exists as v1: use v1 rather than a v2 of another address */
    gid_row(&t[2], 2, OMC_RDMA_GID_ROCE_V2, "10.3.0.1", NULL);
    CHECK_EQ(choose(t, 3, OMC_RDMA_LINK_ETHERNET, "10.2.0.1", -1, OMC_OK), 1);
    CHECK_EQ(choose(t, 3, OMC_RDMA_LINK_ETHERNET, NULL, -1, OMC_OK), 2);
    /* only link-local GIDs: v2 before v1 */
    gid_row(&t[0], 4, OMC_RDMA_GID_ROCE_V1, "fe80::9", NULL);
    gid_row(&t[1], 5, OMC_RDMA_GID_ROCE_V2, "fe80::9", NULL);
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, -1, OMC_OK), 5);
    /* equal rank: the lower index */
    gid_row(&t[0], 8, OMC_RDMA_GID_ROCE_V2, "10.9.0.1", NULL);
    gid_row(&t[1], 3, OMC_RDMA_GID_ROCE_V2, "10.9.0.2", NULL);
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, -1, OMC_OK), 3);
}

OMC_TEST(gid_empty_and_infiniband) {
    omc_rdma_gid_entry t[3];
    uint32_t idx;
    memset(t, 0, sizeof(t));                     /* all-zero rows are empty slots */
    t[0].index = 0; t[1].index = 1;
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, -1, OMC_ERR_RDMA_DEVICE), 0);
    CHECK_EQ(choose(t, 0, OMC_RDMA_LINK_ETHERNET, "10.0.0.1", -1, OMC_ERR_RDMA_DEVICE), 0);
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, 1, OMC_ERR_RDMA_DEVICE), 0);   /* override of an empty slot */
    /* InfiniBand: the port GID at index 0, whatever address the side channel has */
    gid_row(&t[0], 0, OMC_RDMA_GID_IB, "fe80::2:c903:a:1b2c", NULL);
    gid_row(&t[1], 1, OMC_RDMA_GID_IB, "2001:db8::77", NULL);
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_INFINIBAND, "10.0.0.1", -1, OMC_OK), 0);
    CHECK_EQ(choose(t, 2, OMC_RDMA_LINK_INFINIBAND, NULL, 1, OMC_OK), 1);
    CHECK_RES(omc_rdma_choose_gid(NULL, 2, OMC_RDMA_LINK_ETHERNET, NULL, -1, &idx, NULL, 0), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_choose_gid(t, 2, OMC_RDMA_LINK_ETHERNET, NULL, -1, NULL, NULL, 0), OMC_ERR_INVALID_ARG);
}

OMC_TEST(gid_addresses) {
    uint8_t g[16];
    char text[64];
    static const uint8_t mapped[16] = {0,0,0,0,0,0,0,0,0,0,0xff,0xff,10,99,0,1};
    CHECK_OK(omc_rdma_addr_to_gid("10.99.0.1", g));
    CHECK(memcmp(g, mapped, 16) == 0);
    omc_rdma_gid_to_text(g, text, sizeof(text));
    CHECK(strcmp(text, "::ffff:10.99.0.1") == 0);
    CHECK_OK(omc_rdma_addr_to_gid("fe80::1", g));
    CHECK(g[0] == 0xfe && g[1] == 0x80 && g[15] == 1);
    CHECK_RES(omc_rdma_addr_to_gid("localhost", g), OMC_ERR_INVALID_ARG);   /* names are not resolved */
    CHECK_RES(omc_rdma_addr_to_gid("10.99.0", g), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_addr_to_gid("", g), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_addr_to_gid(NULL, g), OMC_ERR_INVALID_ARG);
}

OMC_TEST(mtu_negotiation) {
    uint32_t m = 0;
    CHECK_OK(omc_rdma_mtu_negotiate(5, 3, &m)); CHECK_EQ(m, 3);     /* 4096 vs 1024 */
    CHECK_OK(omc_rdma_mtu_negotiate(1, 5, &m)); CHECK_EQ(m, 1);
    CHECK_OK(omc_rdma_mtu_negotiate(4, 4, &m)); CHECK_EQ(m, 4);
    CHECK_RES(omc_rdma_mtu_negotiate(0, 3, &m), OMC_ERR_INVALID_ARG);
    CHECK_EQ(m, 0);
    CHECK_RES(omc_rdma_mtu_negotiate(3, 6, &m), OMC_ERR_INVALID_ARG);
    CHECK_EQ(omc_rdma_mtu_bytes(1), 256);
    CHECK_EQ(omc_rdma_mtu_bytes(3), 1024);
    CHECK_EQ(omc_rdma_mtu_bytes(5), 4096);
    CHECK_EQ(omc_rdma_mtu_bytes(0), 0);
    CHECK_EQ(omc_rdma_mtu_bytes(6), 0);
}

/* ---- the endpoint record --------------------------------------------------------------------- */

static omc_rdma_record sample_record(uint32_t nqp) {
    omc_rdma_record r;
    uint32_t i;
    memset(&r, 0, sizeof(r));
    r.qp_count = nqp;
    r.port = 1;
    r.mtu = 3;
    r.link = OMC_RDMA_LINK_ETHERNET;
    r.gid_index = 1;
    r.gid_type = OMC_RDMA_GID_ROCE_V2;
    r.flags = OMC_RDMA_FLAG_MEMORY_WINDOWS;
    r.lid = 0;
    r.incarnation = 0x1122334455667788ull;
    r.conn_id = 0x0102030405060708ull;
    omc_rdma_addr_to_gid("10.99.0.1", r.gid);
    for (i = 0; i < nqp; i++) { r.qpn[i] = 0x11 + i * 0x10001; r.psn[i] = (0xABCDEF + i) & 0xFFFFFF; }
    return r;
}

OMC_TEST(record_roundtrip_and_layout) {
    omc_rdma_record a = sample_record(2), b;
    uint8_t buf[OMC_RDMA_RECORD_MAX];
    size_t n = 0;
    uint32_t q;
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    CHECK_EQ(n, 52 + 8 * 2);
    /* the layout the manual documents, byte by byte */
    CHECK(buf[0] == 'O' && buf[1] == 'M' && buf[2] == 'C' && buf[3] == 'R');
    CHECK_EQ(buf[4], 1); CHECK_EQ(buf[5], 2); CHECK_EQ(buf[6], 1); CHECK_EQ(buf[7], 3);
    CHECK_EQ(buf[8], 2); CHECK_EQ(buf[9], 1); CHECK_EQ(buf[10], 3); CHECK_EQ(buf[11], 1);
    CHECK_EQ(buf[16], 0x88); CHECK_EQ(buf[23], 0x11);      /* incarnation, little-endian */
    CHECK_EQ(buf[24], 0x08); CHECK_EQ(buf[31], 0x01);      /* connection id */
    CHECK(buf[42] == 0xff && buf[43] == 0xff && buf[44] == 10 && buf[47] == 1);   /* GID, network order */
    CHECK_EQ(buf[48], 0x11); CHECK_EQ(buf[52], 0xEF);      /* QP 0: qpn, psn */
    CHECK_EQ(omc__get_u32(buf + 64), omc__crc32c(0, buf, 64));
    CHECK_OK(omc_rdma_record_decode(buf, n, &b));
    CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    for (q = 1; q <= OMC_RDMA_MAX_QPS; q++) {       /* every QP count */
        a = sample_record(q);
        CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
        CHECK_EQ(n, 52 + 8 * q);
        CHECK_OK(omc_rdma_record_decode(buf, n, &b));
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    }
    a = sample_record(4);
    CHECK_RES(omc_rdma_record_encode(&a, buf, 52 + 8 * 4 - 1, &n), OMC_ERR_TOO_LARGE);
}

OMC_TEST(record_encode_refuses_bad_fields) {
    uint8_t buf[OMC_RDMA_RECORD_MAX];
    size_t n;
    omc_rdma_record a;
    a = sample_record(2); a.qp_count = 0;                 CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.qp_count = 17;                CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.mtu = 0;                      CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.mtu = 6;                      CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.port = 0;                     CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.link = 3;                     CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.gid_type = 0;                 CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.flags = 4;                    CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.qpn[1] = 0;                   CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.qpn[0] = 0x1000000;           CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_record(2); a.psn[1] = 0x1000000;           CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
}

/* Re-seal a record after poking a field, so that the decoder's field checks (not the CRC) speak. */
static void reseal(uint8_t* buf, size_t n) { omc__put_u32(buf + n - 4, omc__crc32c(0, buf, n - 4)); }

OMC_TEST(record_decode_refuses_garbage) {
    omc_rdma_record a = sample_record(3), b;
    uint8_t buf[OMC_RDMA_RECORD_MAX], bad[OMC_RDMA_RECORD_MAX + 16];
    size_t n, i;
    int bit;
    uint64_t seed = 12345;
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    for (i = 0; i < n; i++) {               /* every truncation and one byte too many */
        CHECK(omc_rdma_record_decode(buf, i, &b) != OMC_OK);
        CHECK_EQ(b.qp_count, 0);
    }
    memcpy(bad, buf, n); bad[n] = 0;
    CHECK_RES(omc_rdma_record_decode(bad, n + 1, &b), OMC_ERR_MALFORMED);
    for (i = 0; i < n; i++)                 /* every single-bit flip */
        for (bit = 0; bit < 8; bit++) {
            omc_result r;
            memcpy(bad, buf, n);
            bad[i] ^= (uint8_t)(1u << bit);
            r = omc_rdma_record_decode(bad, n, &b);
            CHECK(r == OMC_ERR_CHECKSUM || r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION);
        }
    /* well-sealed but wrong: each field check on its own */
    memcpy(bad, buf, n); bad[4] = 3; reseal(bad, n);            CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_VERSION);
    memcpy(bad, buf, n); bad[5] = 0; reseal(bad, n);            CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[5] = 4; reseal(bad, n);            CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[6] = 0; reseal(bad, n);            CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[7] = 7; reseal(bad, n);            CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[8] = 0; reseal(bad, n);            CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[10] = 4; reseal(bad, n);           CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[11] = 0x80; reseal(bad, n);        CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[14] = 1; reseal(bad, n);           CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); memset(bad + 48, 0, 4); reseal(bad, n); CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[51] = 1; reseal(bad, n);           CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[55] = 1; reseal(bad, n);           CHECK_RES(omc_rdma_record_decode(bad, n, &b), OMC_ERR_MALFORMED);
    for (i = 0; i < 20000; i++) {           /* random bytes, sometimes with a valid magic and seal */
        size_t len = (size_t)(seed % (OMC_RDMA_RECORD_MAX + 8)), k;
        omc_result r;
        for (k = 0; k < len; k++) { seed = seed * 6364136223846793005ull + 1442695040888963407ull; bad[k] = (uint8_t)(seed >> 56); }
        if (len >= 8 && (i & 1)) { omc__put_u32(bad, OMC_RDMA_RECORD_MAGIC); bad[4] = 1; }
        if (len >= 12 && (i & 2)) reseal(bad, len);
        r = omc_rdma_record_decode(bad, len, &b);
        if (r == OMC_OK) {                  /* possible only if every field is valid: re-encode matches */
            uint8_t again[OMC_RDMA_RECORD_MAX];
            size_t m = 0;
            CHECK_OK(omc_rdma_record_encode(&b, again, sizeof(again), &m));
            CHECK(m == len && memcmp(again, bad, len) == 0);
        }
        seed ^= i;
    }
    CHECK_RES(omc_rdma_record_decode(NULL, 10, &b), OMC_ERR_INVALID_ARG);
}

/* ---- the transfer descriptor ----------------------------------------------------------------- */

static omc_rdma_target sample_target(uint32_t n) {
    omc_rdma_target t;
    uint32_t i;
    memset(&t, 0, sizeof(t));
    t.conn_id = 0xAABBCCDDEEFF0011ull;
    t.flags = OMC_RDMA_FLAG_MEMORY_WINDOWS;
    t.count = n;
    for (i = 0; i < n; i++) {
        t.extent[i].addr = 0x7f0000000000ull + i * 0x100000;
        t.extent[i].length = 0x100000 - i;
        t.extent[i].rkey = 0x1200 + i;
        t.extent[i].qp = (uint16_t)(i % 2);
        t.length += t.extent[i].length;
    }
    return t;
}

OMC_TEST(target_roundtrip_and_layout) {
    omc_rdma_target a = sample_target(2), b;
    uint8_t buf[OMC_RDMA_TARGET_MAX];
    size_t n = 0;
    uint32_t e;
    CHECK_OK(omc_rdma_target_encode(&a, buf, sizeof(buf), &n));
    CHECK_EQ(n, 28 + 24 * 2);
    CHECK(buf[0] == 'O' && buf[1] == 'M' && buf[2] == 'C' && buf[3] == 'W');
    CHECK_EQ(buf[4], 1); CHECK_EQ(buf[5], 2); CHECK_EQ(omc__get_u16(buf + 6), 1);
    CHECK_EQ(omc__get_u64(buf + 8), a.conn_id);
    CHECK_EQ(omc__get_u64(buf + 16), a.length);
    CHECK_EQ(omc__get_u64(buf + 24 + 24), a.extent[1].addr);
    CHECK_EQ(omc__get_u64(buf + 24 + 24 + 8), a.extent[1].length);
    CHECK_EQ(omc__get_u32(buf + 24 + 24 + 16), a.extent[1].rkey);
    CHECK_EQ(omc__get_u16(buf + 24 + 24 + 20), 1);
    CHECK_OK(omc_rdma_target_decode(buf, n, 2, &b));
    CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    CHECK_RES(omc_rdma_target_decode(buf, n, 1, &b), OMC_ERR_MALFORMED);    /* QP index 1 of a 1-QP connection */
    for (e = 1; e <= OMC_RDMA_MAX_EXTENTS; e++) {
        a = sample_target(e);
        CHECK_OK(omc_rdma_target_encode(&a, buf, sizeof(buf), &n));
        CHECK(n <= OMC_RDMA_TARGET_MAX);
        CHECK_OK(omc_rdma_target_decode(buf, n, 0, &b));
        CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    }
    CHECK(OMC_RDMA_TARGET_MAX <= 1024);       /* fits the remote connector's PULL descriptor */
}

OMC_TEST(target_refuses_garbage) {
    omc_rdma_target a = sample_target(3), b;
    uint8_t buf[OMC_RDMA_TARGET_MAX], bad[OMC_RDMA_TARGET_MAX + 8];
    size_t n, i;
    int bit;
    CHECK_OK(omc_rdma_target_encode(&a, buf, sizeof(buf), &n));
    for (i = 0; i < n; i++) CHECK(omc_rdma_target_decode(buf, i, 0, &b) != OMC_OK);
    for (i = 0; i < n; i++)
        for (bit = 0; bit < 8; bit++) {
            omc_result r;
            memcpy(bad, buf, n);
            bad[i] ^= (uint8_t)(1u << bit);
            r = omc_rdma_target_decode(bad, n, 0, &b);
            CHECK(r == OMC_ERR_CHECKSUM || r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION);
        }
    /* sealed but lying: total != sum, zero length, address overflow, reserved bits, count */
    memcpy(bad, buf, n); omc__put_u64(bad + 16, a.length + 1); reseal(bad, n);
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); omc__put_u64(bad + 24 + 8, 0); reseal(bad, n);
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); omc__put_u64(bad + 24, UINT64_MAX - 10); reseal(bad, n);
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); omc__put_u16(bad + 24 + 22, 1); reseal(bad, n);
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); omc__put_u16(bad + 6, 4); reseal(bad, n);
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[5] = 0; reseal(bad, n);
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); bad[5] = 33; reseal(bad, n);
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    memcpy(bad, buf, n); omc__put_u64(bad + 24 + 8, UINT64_MAX / 2); omc__put_u64(bad + 48 + 8, UINT64_MAX / 2 + 10);
    reseal(bad, n);                               /* lengths whose sum overflows */
    CHECK_RES(omc_rdma_target_decode(bad, n, 0, &b), OMC_ERR_MALFORMED);
    /* the encoder refuses what the decoder would */
    a = sample_target(2); a.length++;              CHECK_RES(omc_rdma_target_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_target(2); a.extent[0].length = 0;  CHECK_RES(omc_rdma_target_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_target(2); a.count = 0;             CHECK_RES(omc_rdma_target_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_target(2); a.extent[1].qp = 16;     CHECK_RES(omc_rdma_target_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = sample_target(2);                          CHECK_RES(omc_rdma_target_encode(&a, buf, 60, &n), OMC_ERR_TOO_LARGE);
}

/* ---- planning a destination ------------------------------------------------------------------ */

OMC_TEST(plan_small_and_large) {
    omc__rdma_span s[OMC_RDMA_MAX_EXTENTS];
    uint32_t n = 0, i;
    uint64_t base = 0x100000, chunk = 1 << 20, sum;
    /* small: one span on the first QP asked for */
    CHECK_OK(omc__rdma_plan(base + 4096, 1000, base, chunk, 2, 1, 256 << 10, s, OMC_RDMA_MAX_EXTENTS, &n));
    CHECK_EQ(n, 1); CHECK_EQ(s[0].addr, base + 4096); CHECK_EQ(s[0].length, 1000); CHECK_EQ(s[0].qp, 1); CHECK_EQ(s[0].chunk, 0);
    /* 600 KiB inside one MR: two QPs (each part at least split_min) */
    CHECK_OK(omc__rdma_plan(base, 600 << 10, base, chunk, 2, 0, 256 << 10, s, OMC_RDMA_MAX_EXTENTS, &n));
    CHECK_EQ(n, 2); CHECK_EQ(s[0].qp, 0); CHECK_EQ(s[1].qp, 1);
    CHECK_EQ(s[0].length + s[1].length, 600 << 10); CHECK_EQ(s[1].addr, s[0].addr + s[0].length);
    CHECK_EQ(s[0].length % 4096, 0);
    /* across MR boundaries: never a span over two MRs, contiguous, covering everything */
    CHECK_OK(omc__rdma_plan(base + 700000, 3 << 20, base, chunk, 4, 3, 256 << 10, s, OMC_RDMA_MAX_EXTENTS, &n));
    sum = 0;
    for (i = 0; i < n; i++) {
        CHECK((s[i].addr - base) / chunk == s[i].chunk);
        CHECK((s[i].addr + s[i].length - 1 - base) / chunk == s[i].chunk);
        CHECK(s[i].qp < 4);
        if (i) CHECK_EQ(s[i].addr, s[i - 1].addr + s[i - 1].length);
        sum += s[i].length;
    }
    CHECK_EQ(s[0].addr, base + 700000);
    CHECK_EQ(sum, 3 << 20);
    CHECK(n >= 4);
    /* too many MRs for one descriptor */
    CHECK_RES(omc__rdma_plan(base, 40 << 20, base, chunk, 1, 0, 256 << 10, s, OMC_RDMA_MAX_EXTENTS, &n), OMC_ERR_TOO_LARGE);
    CHECK_RES(omc__rdma_plan(base - 1, 10, base, chunk, 1, 0, 1, s, OMC_RDMA_MAX_EXTENTS, &n), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc__rdma_plan(base, 0, base, chunk, 1, 0, 1, s, OMC_RDMA_MAX_EXTENTS, &n), OMC_ERR_INVALID_ARG);
}

/* ---- the memory-lock check ------------------------------------------------------------------- */

OMC_TEST(memlock_check_names_limit_and_fix) {
    char why[600] = "";
    uint64_t mib = 1 << 20;
    CHECK_OK(omc__rdma_memlock_check(4 * mib, 0, 8 * mib, 0, why, sizeof(why)));
    CHECK_OK(omc__rdma_memlock_check(8 * mib, 0, 8 * mib, 0, why, sizeof(why)));
    CHECK_OK(omc__rdma_memlock_check(64 * mib, 0, UINT64_MAX, 0, why, sizeof(why)));     /* unlimited */
    CHECK_OK(omc__rdma_memlock_check(64 * mib, 0, 8 * mib, 1, why, sizeof(why)));        /* CAP_IPC_LOCK */
    CHECK_RES(omc__rdma_memlock_check(6 * mib, 4 * mib, 8 * mib, 0, why, sizeof(why)), OMC_ERR_MEMLOCK);   /* counts what is pinned */
    CHECK_RES(omc__rdma_memlock_check(32 * mib, 0, 8 * mib, 0, why, sizeof(why)), OMC_ERR_MEMLOCK);
    CHECK(strstr(why, "RLIMIT_MEMLOCK = 8388608") != NULL);
    CHECK(strstr(why, "8192 KiB") != NULL);
    CHECK(strstr(why, "ulimit -l unlimited") != NULL);
    CHECK(strstr(why, "limits.conf") != NULL && strstr(why, "LimitMEMLOCK") != NULL && strstr(why, "CAP_IPC_LOCK") != NULL);
    CHECK_RES(omc__rdma_memlock_check(1, 9 * mib, 8 * mib, 0, why, sizeof(why)), OMC_ERR_MEMLOCK);
}

/* ---- runtime loading --------------------------------------------------------------------------- */

typedef struct log_capture { char text[2048]; int count; } log_capture;
static void capture_log(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    log_capture* c = (log_capture*)user;
    size_t used = strlen(c->text);
    (void)level; (void)file; (void)line;
    if (item == OMC_LOGITEM_RDMA && used + 2 < sizeof(c->text)) snprintf(c->text + used, sizeof(c->text) - used, "%s\n", message);
    c->count++;
}

static int libibverbs_mapped(void) {
    char line[512];
    int found = 0;
    FILE* f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) if (strstr(line, "libibverbs")) found = 1;
    fclose(f);
    return found;
}

/* runs first (tests run in file order): nothing has touched libibverbs yet */
OMC_TEST(a_binary_does_not_need_libibverbs) {
#if defined(OMNICONN_NO_RUNTIME_LINKING)
    CHECK_EQ(libibverbs_mapped(), 1);       /* linked: the loader maps it at start-up */
#else
    CHECK_EQ(libibverbs_mapped(), 0);       /* dlopen()ed only when an engine is created */
#endif
}

OMC_TEST(missing_library_is_unavailable_with_reason) {
#if defined(OMNICONN_NO_RUNTIME_LINKING)
    /* linked directly: there is nothing to load, the soname is not used */
    char why[512];
    omc_result r = omc_rdma_probe("libibverbs-omc-absent.so.1", why, sizeof(why));
    CHECK(r == OMC_OK || r == OMC_ERR_RDMA_DEVICE);
#else
    char why[512] = "";
    omc_rdma_desc d;
    omc_rdma* e = (omc_rdma*)1;
    log_capture cap;
    memset(&d, 0, sizeof(d));
    memset(&cap, 0, sizeof(cap));
    d.library = "libibverbs-omc-absent.so.1";
    d.hooks.log_fn = capture_log;
    d.hooks.user_data = &cap;
    CHECK_RES(omc_rdma_create(&d, &e), OMC_ERR_UNAVAILABLE);
    CHECK(e == NULL);
    CHECK(strstr(cap.text, "RDMA unavailable") != NULL);
    CHECK(strstr(cap.text, "libibverbs-omc-absent.so.1") != NULL);
    CHECK(strstr(cap.text, "ibverbs-providers") != NULL);       /* and how to fix it */
    CHECK_RES(omc_rdma_probe("libibverbs-omc-absent.so.1", why, sizeof(why)), OMC_ERR_UNAVAILABLE);
    CHECK(strstr(why, "cannot load libibverbs-omc-absent.so.1") != NULL);
    /* the environment variable does the same when the desc names no library */
    setenv("OMNICONN_IBVERBS_LIB", "/nonexistent/libibverbs.so.1", 1);
    CHECK_RES(omc_rdma_probe(NULL, why, sizeof(why)), OMC_ERR_UNAVAILABLE);
    CHECK(strstr(why, "/nonexistent/libibverbs.so.1") != NULL);
    unsetenv("OMNICONN_IBVERBS_LIB");
    /* a library without the verbs symbols: refused, naming the missing one */
    CHECK_RES(omc_rdma_probe("libz.so.1", why, sizeof(why)), OMC_ERR_UNAVAILABLE);
    CHECK(strstr(why, "has no symbol ibv_get_device_list") != NULL);
    CHECK(!omc__load(&omc__ibv_loaded));    /* a failed load leaves nothing half-filled behind */
#endif
}

/* On these machines libibverbs is installed but lists no device; on the RDMA bed it lists one.
   Either way create() must say precisely what it found. */
OMC_TEST(no_device_is_reported_clearly) {
    char why[512] = "";
    omc_result probe = omc_rdma_probe(NULL, why, sizeof(why));
    omc_rdma_desc d;
    omc_rdma* e = NULL;
    log_capture cap;
    memset(&d, 0, sizeof(d));
    memset(&cap, 0, sizeof(cap));
    d.hooks.log_fn = capture_log;
    d.hooks.user_data = &cap;
    d.devices = "omc-no-such-device0";
    if (probe == OMC_ERR_UNAVAILABLE) {     /* no libibverbs on this host at all */
        CHECK_RES(omc_rdma_create(&d, &e), OMC_ERR_UNAVAILABLE);
        return;
    }
    CHECK_RES(omc_rdma_create(&d, &e), OMC_ERR_RDMA_DEVICE);
    CHECK(e == NULL);
    if (probe == OMC_ERR_RDMA_DEVICE) {
        CHECK(strstr(why, "no RDMA device") != NULL);
        CHECK(strstr(cap.text, "no RDMA device") != NULL && strstr(cap.text, "rdma link add") != NULL);
    } else {
        CHECK(strstr(cap.text, "omc-no-such-device0: no such device") != NULL);
    }
}

OMC_TEST(bad_desc_is_refused) {
    omc_rdma_desc d;
    omc_rdma* e = NULL;
    memset(&d, 0, sizeof(d));
    d.local_addr = "not-an-address";
    if (omc_rdma_probe(NULL, NULL, 0) == OMC_ERR_UNAVAILABLE) return;
    CHECK_RES(omc_rdma_create(&d, &e), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_rdma_create(NULL, NULL), OMC_ERR_INVALID_ARG);
    CHECK(omc_rdma_region_hooks(NULL).attach == NULL);
    CHECK_RES(omc_rdma_query(NULL, NULL), OMC_ERR_INVALID_ARG);
    omc_rdma_destroy(NULL);
    omc_rdma_conn_destroy(NULL);
    CHECK_EQ(omc_rdma_conn_ok(NULL), 0);
}

/* A traffic class or service level that is out of range or not a number stops the engine before
   any device is opened, naming where it came from; the desc overrides the environment, ours
   overrides Mooncake's. (That every QP then carries the value is the bed's to show.) */
OMC_TEST(traffic_class_and_service_level_are_checked_before_any_device) {
    omc_rdma_desc d;
    omc_rdma* e = NULL;
    log_capture cap;
    omc_result none;
    if (omc_rdma_probe(NULL, NULL, 0) == OMC_ERR_UNAVAILABLE) return;
    memset(&d, 0, sizeof(d));
    memset(&cap, 0, sizeof(cap));
    d.hooks.log_fn = capture_log;
    d.hooks.user_data = &cap;
    d.devices = "omc-no-such-device0";
    none = omc_rdma_create(&d, &e);                     /* what this host says with good settings */
    CHECK(none != OMC_ERR_INVALID_ARG);
    if (e) { omc_rdma_destroy(e); e = NULL; }
    setenv("MC_IB_TC", "300", 1);                       /* Mooncake's variable is read ... */
    CHECK_RES(omc_rdma_create(&d, &e), OMC_ERR_INVALID_ARG);
    CHECK(strstr(cap.text, "MC_IB_TC='300'") != NULL);
    setenv("OMNICONN_IB_TC", "106,96", 1);              /* ... unless ours is set */
    CHECK_RES(omc_rdma_create(&d, &e), none);
    if (e) { omc_rdma_destroy(e); e = NULL; }
    setenv("OMNICONN_IB_SL", "16", 1);
    CHECK_RES(omc_rdma_create(&d, &e), OMC_ERR_INVALID_ARG);
    CHECK(strstr(cap.text, "OMNICONN_IB_SL='16'") != NULL);
    d.service_level = "3";                              /* the desc wins over the environment */
    CHECK_RES(omc_rdma_create(&d, &e), none);
    if (e) { omc_rdma_destroy(e); e = NULL; }
    d.traffic_class = "1,2,3,4,5";
    CHECK_RES(omc_rdma_create(&d, &e), OMC_ERR_INVALID_ARG);
    unsetenv("MC_IB_TC");
    unsetenv("OMNICONN_IB_TC");
    unsetenv("OMNICONN_IB_SL");
}

/* Without a usable RDMA device (these machines) the RDMA connector still works: every peer uses
   TCP, and the connector says why. With require_rdma it refuses to start instead. */
OMC_TEST(connector_without_rdma_uses_tcp_and_says_why) {
    omc_rdma_connector_desc d;
    omc_conn *s = NULL, *r = NULL;
    omc_rdma_connector_info info;
    omc_health h;
    omc_payload p;
    omc_meta m = {0};
    omc_buffer b;
    uint8_t data[50000];
    uint16_t port = 0;
    if (getenv("OMC_RDMA_DEVICE")) return;      /* on the RDMA bed this machine has a device */
    memset(&d, 0, sizeof(d));
    d.net.role = OMC_ROLE_SENDER;
    d.net.host = "127.0.0.1";
    d.net.pool_size = 8u << 20;
    d.rdma.devices = "omc-no-such-device1";     /* also what a host without devices gets */
    CHECK_OK(omc_rdma_connector_create(&d, &s));
    d.net.role = OMC_ROLE_RECEIVER;
    CHECK_OK(omc_rdma_connector_create(&d, &r));
    REQUIRE(s && r);
    CHECK_EQ(omc_conn_transport(s), OMC_TRANSPORT_RDMA);
    CHECK_OK(omc_rdma_connector_query(s, &info));
    CHECK_EQ(info.rdma_enabled, 0);
    CHECK(strstr(info.reason, "RDMA off") != NULL && strstr(info.reason, "TCP") != NULL);
    CHECK_OK(omc_conn_health(s, &h));
    CHECK_EQ(h.last_error, OMC_ERR_UNAVAILABLE);
    CHECK(strstr(h.last_error_text, "RDMA off") != NULL);
    CHECK_OK(omc_tcp_endpoint(s, NULL, 0, &port, NULL));
    omc_test_fill(data, sizeof(data), 17);
    memset(&p, 0, sizeof(p));
    p.data = data;
    p.size = sizeof(data);
    CHECK_OK(omc_conn_put(s, "x", "y", "k", &p, &m));
    CHECK_OK(omc_conn_get(r, "x", "y", "k", m.data, m.size, omc_deadline_after_ms(20000), &b));
    CHECK(b.size == sizeof(data) && omc_test_verify(b.data, b.size, 17));
    omc_buffer_release(&b);
    CHECK_OK(omc_rdma_connector_query(r, &info));
    CHECK_EQ(info.rdma_channels, 0);
    CHECK_EQ(info.tcp_fallbacks, 1);
    CHECK(strstr(info.last_fallback, "TCP") != NULL);
    CHECK_RES(omc_rdma_connector_query(NULL, &info), OMC_ERR_INVALID_ARG);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
    /* insisting on RDMA: no connector at all */
    d.require_rdma = 1;
    s = (omc_conn*)1;
    CHECK(omc_rdma_connector_create(&d, &s) != OMC_OK);
    CHECK(s == NULL);
}

OMC_TEST_MAIN()
