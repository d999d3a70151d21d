/* fuzz_xfer.c - libFuzzer target for the transfer engine's text and binary decoders
   (omniconn_rdma.h): the memory descriptor a peer exports (omc_xfer_descriptor_decode: it comes
   from the network, in a HELLO answer or from whatever channel the application uses), the
   traffic-class / service-level settings (omc_rdma_parse_qos: environment text) and peer names
   ("host:port", "[v6]:port").

   Properties, for every input:
     - a rejected descriptor is one of the documented codes and hands out nothing (count 0);
     - an accepted one has 1..63 bytes of printable host text, a port, at most 4 rails and
       OMC_XFER_MAX_RANGES ranges, each non-empty and not wrapping the address space, and encodes
       back to exactly the input bytes (the format is canonical);
     - the settings parser either refuses (and leaves its output alone) or gives values <= max;
     - a peer name either is refused or gives a non-empty host and a port in 1..65535.
   Each input is also tried as a descriptor with its magic, version and CRC made right.

   Built by tests/fuzz/run.sh; -DOMC_FUZZ_SEEDS writes a valid descriptor with 0, 1 and 256 ranges. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_xfer"
#include "fuzz_common.h"

static omc_xfer_descriptor d_in, d_back;

static void check_descriptor(const uint8_t* data, size_t size) {
    static uint8_t back[OMC_XFER_DESC_MAX];
    size_t len = 0, hl;
    uint32_t i;
    omc_result r = omc_xfer_descriptor_decode(data, size, &d_in);
    if (r != OMC_OK) {
        FUZZ_REQUIRE(r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION || r == OMC_ERR_CHECKSUM);
        FUZZ_REQUIRE(d_in.count == 0);
        return;
    }
    hl = strlen(d_in.host);
    FUZZ_REQUIRE(hl >= 1 && hl <= 63 && d_in.port >= 1 && d_in.port <= 65535 && d_in.incarnation != 0);
    for (i = 0; i < hl; i++) FUZZ_REQUIRE(d_in.host[i] > 0x20 && d_in.host[i] < 0x7f);
    FUZZ_REQUIRE(d_in.rails <= OMC_RDMA_MAX_RAILS && d_in.count <= OMC_XFER_MAX_RANGES);
    for (i = 0; i < d_in.count; i++) FUZZ_REQUIRE(d_in.range[i].length > 0 && d_in.range[i].addr <= UINT64_MAX - d_in.range[i].length);
    FUZZ_REQUIRE(omc_xfer_descriptor_encode(&d_in, back, sizeof(back), &len) == OMC_OK);
    FUZZ_REQUIRE(len == size && memcmp(back, data, size) == 0);
    FUZZ_REQUIRE(omc_xfer_descriptor_decode(back, len, &d_back) == OMC_OK && d_back.count == d_in.count);
}

static void check_text(const uint8_t* data, size_t size) {
    char text[128], host[OMC_XFER_HOST_MAX];
    uint8_t v[OMC_RDMA_MAX_RAILS] = { 200, 201, 202, 203 };
    uint32_t port = 0, k;
    size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    if (omc_rdma_parse_qos(text, 15, v) == OMC_OK) {
        if (text[0]) for (k = 0; k < OMC_RDMA_MAX_RAILS; k++) FUZZ_REQUIRE(v[k] <= 15);
    } else {
        FUZZ_REQUIRE(v[0] == 200 && v[1] == 201 && v[2] == 202 && v[3] == 203);
    }
    if (omc__xfer_split_name(text, host, sizeof(host), &port) == OMC_OK) FUZZ_REQUIRE(host[0] && port >= 1 && port <= 65535);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_descriptor(data, size);
    check_text(data, size);
    if (size >= OMC_XFER_DESC_HEADER + 5 && size <= OMC_XFER_DESC_MAX) {   /* a right door */
        uint8_t* fixed = (uint8_t*)malloc(size);    /* exact size: ASan still sees overreads */
        FUZZ_REQUIRE(fixed);
        memcpy(fixed, data, size);
        omc__put_u32(fixed, OMC_XFER_DESC_MAGIC);
        fixed[4] = OMC_XFER_DESC_VERSION;
        omc__put_u32(fixed + size - 4, omc__crc32c(0, fixed, size - 4));
        check_descriptor(fixed, size);
        free(fixed);
    }
    return 0;
}

#ifdef OMC_FUZZ_SEEDS
int main(int argc, char** argv) {
    static omc_xfer_descriptor d;
    static uint8_t buf[OMC_XFER_DESC_MAX];
    size_t len = 0;
    uint32_t i;
    int bad = 0;
    if (argc != 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    memset(&d, 0, sizeof(d));
    d.incarnation = 0x1122334455667788ull;
    snprintf(d.host, sizeof(d.host), "10.0.0.5");
    d.port = 17000;
    if (omc_xfer_descriptor_encode(&d, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-desc-0", buf, len);
    d.rails = 1; d.count = 1;
    d.range[0].addr = 0x7f0000000000ull; d.range[0].length = 1u << 30; d.range[0].id = 1; d.range[0].rkey[0] = 0x1234;
    if (omc_xfer_descriptor_encode(&d, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-desc-1", buf, len);
    d.rails = 4; d.count = OMC_XFER_MAX_RANGES;
    snprintf(d.host, sizeof(d.host), "fd00::5");
    for (i = 0; i < OMC_XFER_MAX_RANGES; i++) {
        d.range[i].addr = 0x7f0000000000ull + (uint64_t)i * (1u << 20); d.range[i].length = 1u << 20; d.range[i].id = i + 1;
        d.range[i].rkey[0] = i; d.range[i].rkey[3] = ~i;
    }
    if (omc_xfer_descriptor_encode(&d, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-desc-256", buf, len);
    bad |= write_file(argv[1], "seed-qos", "106,96", 6);
    bad |= write_file(argv[1], "seed-name", "[fd00::5]:17000", 15);
    return bad;
}
#endif
