/* fuzz_rdma.c - libFuzzer target for the RDMA engine's two wire decoders (omniconn_rdma.h): the
   endpoint record a peer sends in its HELLO (omc_rdma_record_decode) and the transfer descriptor
   a receiver sends in its PULL (omc_rdma_target_decode). Both arrive from the network before any
   queue pair exists, so nothing in them is trusted.

   Properties, for every input:
     - a rejection is one of the documented codes and hands out no count;
     - an accepted record has 1..OMC_RDMA_MAX_QPS queue pairs with non-zero 24-bit QP numbers and
       24-bit PSNs (version 2: R rails of Q QPs, at least one rail with a port), and encodes back
       to exactly the input bytes (the format is canonical);
     - an accepted descriptor has 1..OMC_RDMA_MAX_EXTENTS extents, every extent non-empty and not
       wrapping the address space, their lengths summing to the total without overflow, every QP
       index below the limit given to the decoder (version 2: every extent reachable on a rail),
       and encodes back to exactly the input bytes.
   Each input is also tried with its CRC made right (and its magic, version and count byte), so
   the fuzzer spends its time on the fields rather than at the checksum.

   Built by tests/fuzz/run.sh; -DOMC_FUZZ_SEEDS gives the seed writer (a valid record with 1 and
   16 QPs and with two rails, a valid descriptor with 1 and 32 extents and with two rails). */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_rdma"
#include "fuzz_common.h"

static void check_record(const uint8_t* data, size_t size) {
    omc_rdma_record rec;
    uint8_t back[OMC_RDMA_RECORD_MAX];
    size_t len = 0;
    uint32_t i;
    omc_result r = omc_rdma_record_decode(data, size, &rec);
    if (r != OMC_OK) {
        FUZZ_REQUIRE(r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION || r == OMC_ERR_CHECKSUM);
        FUZZ_REQUIRE(rec.qp_count == 0);
        return;
    }
    FUZZ_REQUIRE(rec.qp_count >= 1 && rec.qp_count <= OMC_RDMA_MAX_QPS);
    if (rec.rails <= 1) {   /* version 1: one rail, its fields at the top */
        FUZZ_REQUIRE(size == OMC_RDMA_RECORD_HEADER + 8 * (size_t)rec.qp_count + 4);
        FUZZ_REQUIRE(rec.port != 0 && omc_rdma_mtu_bytes(rec.mtu) != 0);
        for (i = 0; i < rec.qp_count; i++)
            FUZZ_REQUIRE(rec.qpn[i] != 0 && rec.qpn[i] <= 0xFFFFFFu && rec.psn[i] <= 0xFFFFFFu);
    } else {                /* version 2: R rails of Q QPs, at least one rail with a port */
        int any = 0;
        FUZZ_REQUIRE(rec.rails <= OMC_RDMA_MAX_RAILS && rec.qps_per_rail >= 1 && rec.qp_count == rec.rails * rec.qps_per_rail);
        FUZZ_REQUIRE(size == OMC_RDMA_RECORD_HEADER_RAILS + OMC_RDMA_RECORD_RAIL * (size_t)rec.rails + 8 * (size_t)rec.qp_count + 4);
        for (i = 0; i < rec.rails; i++) any |= rec.rail[i].port != 0;
        FUZZ_REQUIRE(any);
        for (i = 0; i < rec.qp_count; i++) FUZZ_REQUIRE(rec.qpn[i] <= 0xFFFFFFu && rec.psn[i] <= 0xFFFFFFu);
    }
    for (; i < OMC_RDMA_MAX_QPS; i++) FUZZ_REQUIRE(rec.qpn[i] == 0 && rec.psn[i] == 0);
    FUZZ_REQUIRE(omc_rdma_record_encode(&rec, back, sizeof(back), &len) == OMC_OK);
    FUZZ_REQUIRE(len == size && memcmp(back, data, size) == 0);
}

static void check_target(const uint8_t* data, size_t size, uint32_t max_qps) {
    omc_rdma_target t;
    uint8_t back[OMC_RDMA_TARGET_MAX];
    size_t len = 0;
    uint64_t sum = 0;
    uint32_t i, limit = max_qps == 0 || max_qps > OMC_RDMA_MAX_QPS ? OMC_RDMA_MAX_QPS : max_qps;
    omc_result r = omc_rdma_target_decode(data, size, max_qps, &t);
    if (r != OMC_OK) {
        FUZZ_REQUIRE(r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION || r == OMC_ERR_CHECKSUM);
        FUZZ_REQUIRE(t.count == 0 && t.length == 0 && t.conn_id == 0);
        return;
    }
    FUZZ_REQUIRE(t.count >= 1 && t.count <= OMC_RDMA_MAX_EXTENTS);
    if (t.rails <= 1)       /* version 1 */
        FUZZ_REQUIRE(size == OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT * (size_t)t.count + 4);
    else                    /* version 2: a key and a QP per extent and rail */
        FUZZ_REQUIRE(t.rails <= OMC_RDMA_MAX_RAILS &&
                     size == OMC_RDMA_TARGET_HEADER + (OMC_RDMA_TARGET_EXTENT_RAILS + 8 * (size_t)t.rails) * t.count + 4);
    for (i = 0; i < t.count; i++) {
        const omc_rdma_extent* e = &t.extent[i];
        FUZZ_REQUIRE(e->length > 0 && e->addr <= UINT64_MAX - e->length);
        if (t.rails <= 1) {
            FUZZ_REQUIRE(e->qp < limit);
        } else {            /* every extent reachable on at least one rail */
            uint32_t k;
            int any = 0;
            for (k = 0; k < t.rails; k++) any |= e->qps[k] != OMC_RDMA_NO_QP;
            FUZZ_REQUIRE(any);
        }
        FUZZ_REQUIRE(sum <= UINT64_MAX - e->length);
        sum += e->length;
    }
    FUZZ_REQUIRE(sum == t.length);
    FUZZ_REQUIRE(omc_rdma_target_encode(&t, back, sizeof(back), &len) == OMC_OK);
    FUZZ_REQUIRE(len == size && memcmp(back, data, size) == 0);
}

static void check_input(const uint8_t* data, size_t size) {
    check_record(data, size);
    check_target(data, size, 0);
    if (size) check_target(data, size, 1u + data[0] % OMC_RDMA_MAX_QPS);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_input(data, size);
    if (size >= OMC_RDMA_RECORD_HEADER + 12 && size <= OMC_RDMA_RECORD_MAX) {    /* a right door for a record */
        uint8_t* fixed = (uint8_t*)malloc(size);    /* exact size: ASan still sees overreads */
        FUZZ_REQUIRE(fixed);
        memcpy(fixed, data, size);
        omc__put_u32(fixed, OMC_RDMA_RECORD_MAGIC);
        fixed[4] = OMC_RDMA_RECORD_VERSION;
        fixed[5] = (uint8_t)((size - OMC_RDMA_RECORD_HEADER - 4) / 8);
        omc__put_u32(fixed + size - 4, omc__crc32c(0, fixed, size - 4));
        check_record(fixed, size);
        free(fixed);
    }
    if (size >= OMC_RDMA_TARGET_HEADER + OMC_RDMA_TARGET_EXTENT + 4 && size <= OMC_RDMA_TARGET_MAX) {   /* ... and for a descriptor */
        uint8_t* fixed = (uint8_t*)malloc(size);
        FUZZ_REQUIRE(fixed);
        memcpy(fixed, data, size);
        omc__put_u32(fixed, OMC_RDMA_TARGET_MAGIC);
        fixed[4] = OMC_RDMA_TARGET_VERSION;
        fixed[5] = (uint8_t)((size - OMC_RDMA_TARGET_HEADER - 4) / OMC_RDMA_TARGET_EXTENT);
        omc__put_u32(fixed + size - 4, omc__crc32c(0, fixed, size - 4));
        check_target(fixed, size, 0);
        free(fixed);
    }
    if (size >= 1 + OMC_RDMA_RECORD_HEADER_RAILS && size <= OMC_RDMA_RECORD_MAX) {   /* a version-2 record */
        uint32_t rails = 2u + data[0] % (OMC_RDMA_MAX_RAILS - 1u);
        size_t fixed_part = OMC_RDMA_RECORD_HEADER_RAILS + OMC_RDMA_RECORD_RAIL * (size_t)rails + 4;
        if (size > fixed_part && (size - fixed_part) % (8u * rails) == 0) {
            uint8_t* fixed = (uint8_t*)malloc(size);
            FUZZ_REQUIRE(fixed);
            memcpy(fixed, data, size);
            omc__put_u32(fixed, OMC_RDMA_RECORD_MAGIC);
            fixed[4] = OMC_RDMA_RECORD_VERSION_RAILS;
            fixed[5] = (uint8_t)((size - fixed_part) / (8u * rails));
            fixed[6] = (uint8_t)rails;
            omc__put_u32(fixed + size - 4, omc__crc32c(0, fixed, size - 4));
            check_record(fixed, size);
            free(fixed);
        }
    }
    if (size >= 1 + OMC_RDMA_TARGET_HEADER && size <= OMC_RDMA_TARGET_MAX) {       /* a version-2 descriptor */
        uint32_t rails = 2u + data[0] % (OMC_RDMA_MAX_RAILS - 1u);
        size_t per = OMC_RDMA_TARGET_EXTENT_RAILS + 8u * rails;
        if (size > OMC_RDMA_TARGET_HEADER + 4 && (size - OMC_RDMA_TARGET_HEADER - 4) % per == 0) {
            uint8_t* fixed = (uint8_t*)malloc(size);
            FUZZ_REQUIRE(fixed);
            memcpy(fixed, data, size);
            omc__put_u32(fixed, OMC_RDMA_TARGET_MAGIC);
            fixed[4] = OMC_RDMA_TARGET_VERSION_RAILS;
            fixed[5] = (uint8_t)((size - OMC_RDMA_TARGET_HEADER - 4) / per);
            fixed[7] = (uint8_t)rails;
            omc__put_u32(fixed + size - 4, omc__crc32c(0, fixed, size - 4));
            check_target(fixed, size, 0);
            free(fixed);
        }
    }
    return 0;
}

#ifdef OMC_FUZZ_SEEDS
int main(int argc, char** argv) {
    omc_rdma_record rec;
    omc_rdma_target t;
    uint8_t buf[OMC_RDMA_TARGET_MAX > OMC_RDMA_RECORD_MAX ? OMC_RDMA_TARGET_MAX : OMC_RDMA_RECORD_MAX];
    size_t len = 0;
    uint32_t i;
    int bad = 0;
    if (argc != 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    memset(&rec, 0, sizeof(rec));
    rec.qp_count = 1; rec.port = 1; rec.mtu = 5; rec.link = OMC_RDMA_LINK_ETHERNET; rec.gid_index = 1;
    rec.gid_type = OMC_RDMA_GID_ROCE_V2; rec.incarnation = 0x1122334455667788ull; rec.conn_id = 7;
    rec.gid[10] = 0xff; rec.gid[11] = 0xff; rec.gid[12] = 10; rec.gid[15] = 1;
    rec.qpn[0] = 0x11; rec.psn[0] = 0x123456;
    if (omc_rdma_record_encode(&rec, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-record-1qp", buf, len);
    rec.qp_count = OMC_RDMA_MAX_QPS; rec.link = OMC_RDMA_LINK_INFINIBAND; rec.gid_type = OMC_RDMA_GID_IB; rec.lid = 3;
    for (i = 0; i < OMC_RDMA_MAX_QPS; i++) { rec.qpn[i] = 0x100 + i; rec.psn[i] = i * 77; }
    if (omc_rdma_record_encode(&rec, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-record-16qp", buf, len);
    memset(&t, 0, sizeof(t));
    t.conn_id = 7; t.count = 1; t.length = 4096; t.extent[0].addr = 0x7f0000000000ull; t.extent[0].length = 4096; t.extent[0].rkey = 0x1234;
    if (omc_rdma_target_encode(&t, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-target-1", buf, len);
    t.count = OMC_RDMA_MAX_EXTENTS; t.length = 0;
    for (i = 0; i < OMC_RDMA_MAX_EXTENTS; i++) {
        t.extent[i].addr = 0x7f0000000000ull + (uint64_t)i * (1u << 20); t.extent[i].length = 1u << 20;
        t.extent[i].rkey = 0x1000 + i; t.extent[i].qp = (uint16_t)(i % OMC_RDMA_MAX_QPS); t.length += 1u << 20;
    }
    if (omc_rdma_target_encode(&t, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-target-32", buf, len);
    memset(&rec, 0, sizeof(rec));       /* version 2: two rails of two QPs */
    rec.rails = 2; rec.qps_per_rail = 2; rec.qp_count = 4; rec.incarnation = 0x1122334455667788ull; rec.conn_id = 7;
    for (i = 0; i < 2; i++) {
        omc_rdma_record_rail* rr = &rec.rail[i];
        rr->port = 1; rr->mtu = 3; rr->link = OMC_RDMA_LINK_ETHERNET; rr->gid_index = 1; rr->gid_type = OMC_RDMA_GID_ROCE_V2;
        rr->prefix = 120; rr->gid[10] = 0xff; rr->gid[11] = 0xff; rr->gid[12] = 10; rr->gid[13] = 99; rr->gid[14] = (uint8_t)i; rr->gid[15] = 1;
    }
    for (i = 0; i < 4; i++) { rec.qpn[i] = 0x200 + i; rec.psn[i] = i * 91; }
    if (omc_rdma_record_encode(&rec, buf, sizeof(buf), &len) != OMC_OK) return 1;
    if (omc_rdma_record_decode(buf, len, &rec) != OMC_OK || rec.rails != 2) return 1;   /* the seed must be a right one */
    check_record(buf, len);
    bad |= write_file(argv[1], "seed-record-2rails", buf, len);
    memset(&t, 0, sizeof(t));           /* version 2: two rails, the second extent on rail 1 only */
    t.conn_id = 7; t.count = 2; t.rails = 2; t.length = 8192;
    for (i = 0; i < 2; i++) {
        t.extent[i].addr = 0x7f0000000000ull + (uint64_t)i * 4096; t.extent[i].length = 4096;
        t.extent[i].rkeys[0] = i ? 0 : 0x1234; t.extent[i].qps[0] = (uint16_t)(i ? OMC_RDMA_NO_QP : 0);
        t.extent[i].rkeys[1] = 0x5678; t.extent[i].qps[1] = 1;
    }
    if (omc_rdma_target_encode(&t, buf, sizeof(buf), &len) != OMC_OK) return 1;
    if (omc_rdma_target_decode(buf, len, 0, &t) != OMC_OK || t.rails != 2) return 1;
    check_target(buf, len, 0);
    bad |= write_file(argv[1], "seed-target-2rails", buf, len);
    return bad;
}
#endif
