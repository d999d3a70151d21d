/* fuzz_stream.c - libFuzzer target for the stream control record (omniconn_pipeline.h,
   omc_stream_record_decode): the record a consumer fetches from the edge before it fetches a
   chunk, written by whoever could put on that edge.

   Properties, for every input:
     - a rejection is OMC_ERR_MALFORMED, OMC_ERR_VERSION or OMC_ERR_CHECKSUM;
     - an accepted record's metadata and text lie inside the input and the lengths add up to it
       exactly; its flags are one of the combinations the format allows (ERROR alone, with text
       and no data; otherwise END and/or DATA, data only with DATA);
     - it encodes back to exactly the input bytes (omc_stream_record_encode; canonical format).
   Each input is also tried with its magic, version and CRC made right (the CRC is computed over
   the header with the CRC field zero and the rest, as the format says), so the fuzzer reaches the
   field checks.

   Built by tests/fuzz/run.sh; -DOMC_FUZZ_SEEDS gives the seed writer (a DATA record carrying
   a real metadata envelope, an END record, an ERROR record with text). */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_stream"
#include "fuzz_common.h"

static int inside(const void* p, size_t n, const uint8_t* base, size_t size) {
    const uint8_t* q = (const uint8_t*)p;
    return n == 0 || (q >= base && q <= base + size && n <= (size_t)(base + size - q));
}

/* CRC-32C of the header with its CRC field (bytes 32..35) zero, then the rest: the format's rule,
   written here from the manual rather than taken from the implementation. */
static uint32_t record_crc(const uint8_t* d, size_t size) {
    uint8_t h[OMC_STREAM_HEADER_SIZE];
    memcpy(h, d, sizeof(h));
    memset(h + 32, 0, 4);
    return omc__crc32c(omc__crc32c(0, h, sizeof(h)), d + OMC_STREAM_HEADER_SIZE, size - OMC_STREAM_HEADER_SIZE);
}

static void check_input(const uint8_t* data, size_t size) {
    omc_stream_record rec;
    uint8_t* back;
    size_t len = 0;
    uint32_t f;
    omc_result r = omc_stream_record_decode(data, size, &rec);
    if (r != OMC_OK) {
        FUZZ_REQUIRE(r == OMC_ERR_MALFORMED || r == OMC_ERR_VERSION || r == OMC_ERR_CHECKSUM);
        return;
    }
    f = rec.flags;
    FUZZ_REQUIRE(size == OMC_STREAM_HEADER_SIZE + (size_t)rec.meta_len + rec.text_len);
    FUZZ_REQUIRE(omc_stream_record_size(&rec) == size);
    FUZZ_REQUIRE(inside(rec.meta, rec.meta_len, data, size) && inside(rec.text, rec.text_len, data, size));
    FUZZ_REQUIRE(rec.text_len <= OMC_STREAM_MAX_TEXT && rec.meta_len <= OMC_META_MAX_SIZE);
    FUZZ_REQUIRE((f & ~(OMC_STREAM_END | OMC_STREAM_ERROR | OMC_STREAM_DATA)) == 0);
    if (f & OMC_STREAM_ERROR) FUZZ_REQUIRE(f == OMC_STREAM_ERROR && rec.data_size == 0 && rec.meta_len == 0);
    else FUZZ_REQUIRE(rec.text_len == 0 && rec.error == 0 && (f & (OMC_STREAM_DATA | OMC_STREAM_END)));
    if (!(f & OMC_STREAM_DATA)) FUZZ_REQUIRE(rec.data_size == 0 && rec.meta_len == 0);
    FUZZ_REQUIRE(record_crc(data, size) == omc__get_u32(data + 32));
    back = (uint8_t*)malloc(size);
    FUZZ_REQUIRE(back);
    FUZZ_REQUIRE(omc_stream_record_encode(&rec, back, size, &len) == OMC_OK);
    FUZZ_REQUIRE(len == size && memcmp(back, data, size) == 0);
    if (size > 0) FUZZ_REQUIRE(omc_stream_record_encode(&rec, back, size - 1, &len) == OMC_ERR_TOO_LARGE);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_input(data, size);
    if (size >= OMC_STREAM_HEADER_SIZE && size <= OMC_STREAM_HEADER_SIZE + OMC_META_MAX_SIZE + OMC_STREAM_MAX_TEXT) {
        uint8_t* fixed = (uint8_t*)malloc(size);    /* exact size: ASan still sees overreads */
        FUZZ_REQUIRE(fixed);
        memcpy(fixed, data, size);
        omc__put_u32(fixed, OMC_STREAM_MAGIC);
        fixed[4] = OMC_STREAM_VERSION;
        omc__put_u32(fixed + 32, record_crc(fixed, size));
        check_input(fixed, size);
        free(fixed);
    }
    return 0;
}

#ifdef OMC_FUZZ_SEEDS
int main(int argc, char** argv) {
    static uint8_t buf[8192];
    uint8_t meta[OMC_META_HEADER_SIZE + 64];
    omc_stream_record rec;
    size_t len = 0;
    int bad = 0;
    if (argc != 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    memset(meta, 0x5a, sizeof(meta));
    memset(&rec, 0, sizeof(rec));
    rec.index = 3; rec.flags = OMC_STREAM_DATA; rec.data_size = 1000; rec.meta = meta; rec.meta_len = sizeof(meta);
    if (omc_stream_record_encode(&rec, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-data", buf, len);
    rec.flags = OMC_STREAM_DATA | OMC_STREAM_END;
    if (omc_stream_record_encode(&rec, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-data-end", buf, len);
    memset(&rec, 0, sizeof(rec));
    rec.index = 4; rec.flags = OMC_STREAM_END;
    if (omc_stream_record_encode(&rec, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-end", buf, len);
    rec.flags = OMC_STREAM_ERROR; rec.error = -4; rec.text = "the producer stage ran out of memory"; rec.text_len = 36;
    if (omc_stream_record_encode(&rec, buf, sizeof(buf), &len) != OMC_OK) return 1;
    bad |= write_file(argv[1], "seed-error", buf, len);
    return bad;
}
#endif
