/* fuzz_meta.c - libFuzzer target for the metadata envelope: omc_meta_parse on the input as a
   binary blob, and omc_meta_from_text on the input as printable text.

   Properties: an accepted blob has its key and body inside the input and the sizes add up; its
   text form parses back to the very same bytes. Accepted text gives a blob that parses, and whose
   own text form parses back to it again. Rejections hand nothing out.

   Built by tests/fuzz/run.sh (see fuzz_frame.c); -DOMC_FUZZ_SEEDS gives the seed writer. */
#define OMNICONN_IMPLEMENTATION
#define OMNICONN_NO_ZMQ
#include "omniconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_meta"
#include "fuzz_common.h"

/* to_text then from_text must give back exactly these bytes */
static void check_text_roundtrip(const uint8_t* blob, size_t size) {
    size_t tn = omc_meta_text_size(size);
    char* text = (char*)malloc(tn);
    omc_meta back = {NULL, 0};
    FUZZ_REQUIRE(text);
    FUZZ_REQUIRE(omc_meta_to_text(blob, size, text, tn) == OMC_OK);
    FUZZ_REQUIRE(strlen(text) == tn - 1);
    FUZZ_REQUIRE(omc_meta_to_text(blob, size, text, tn - 1) == OMC_ERR_TOO_LARGE);
    FUZZ_REQUIRE(omc_meta_from_text(text, tn - 1, &back) == OMC_OK);
    FUZZ_REQUIRE(back.size == size && memcmp(back.data, blob, size) == 0);
    omc_meta_free(&back);
    free(text);
}

static void check_input(const uint8_t* data, size_t size);

/* The CRC would stop almost every mutation at the door, so each input that could be an envelope
   is also tried with its CRC made right. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_input(data, size);
    if (size >= OMC_META_HEADER_SIZE && size <= OMC_META_MAX_SIZE) {
        uint8_t* fixed = (uint8_t*)malloc(size);    /* exact size: ASan still sees overreads */
        FUZZ_REQUIRE(fixed);
        memcpy(fixed, data, size);
        omc__put_u32(fixed + 32, omc__meta_crc(fixed, (uint32_t)size));
        check_input(fixed, size);
        free(fixed);
    }
    return 0;
}

static void check_input(const uint8_t* data, size_t size) {
    omc_meta_info info;
    omc_meta m = {NULL, 0};
    /* the input as a binary envelope */
    if (omc_meta_parse(data, size, &info) == OMC_OK) {
        FUZZ_REQUIRE(info.transport >= OMC_TRANSPORT_LOCAL && info.transport <= OMC_TRANSPORT_RDMA);
        FUZZ_REQUIRE(info.key_len >= 1 && info.key_len < OMC_KEY_MAX);
        FUZZ_REQUIRE((const uint8_t*)info.key == data + OMC_META_HEADER_SIZE);
        FUZZ_REQUIRE(info.body == data + OMC_META_HEADER_SIZE + info.key_len);
        FUZZ_REQUIRE((size_t)OMC_META_HEADER_SIZE + info.key_len + info.body_len == size);
        check_text_roundtrip(data, size);
    } else {
        FUZZ_REQUIRE(info.key == NULL && info.body == NULL && info.key_len == 0);
    }
    /* the input as printable text */
    if (omc_meta_from_text((const char*)data, size, &m) == OMC_OK) {
        FUZZ_REQUIRE(m.data != NULL && m.size >= OMC_META_HEADER_SIZE);
        FUZZ_REQUIRE(omc_meta_parse(m.data, m.size, &info) == OMC_OK);
        FUZZ_REQUIRE(size > 5 && memcmp(data, OMC_META_TEXT_PREFIX, 5) == 0);
        check_text_roundtrip(m.data, m.size);
        omc_meta_free(&m);
    } else {
        FUZZ_REQUIRE(m.data == NULL && m.size == 0);
    }
}

#ifdef OMC_FUZZ_SEEDS
/* ---- the seed corpus: envelopes of every transport, binary and printable ---------------------- */

int main(int argc, char** argv) {
    static const char* keys[] = { "a\x1f" "b\x1f" "k", "thinker\x1ftalker\x1freq-42", "0\x1f" "1\x1f" "x" };
    int rc = 0, t, i;
    if (argc < 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    for (t = OMC_TRANSPORT_LOCAL; t <= OMC_TRANSPORT_RDMA; t++) {
        for (i = 0; i < 3; i++) {
            omc_meta m = {NULL, 0};
            uint8_t* body = NULL;
            uint32_t body_len = (uint32_t)(i * 13 + t);
            char name[64];
            size_t tn;
            char* text;
            uint32_t k;
            if (omc__meta_begin((omc_transport)t, (uint32_t)(i & 3), 4096u * (uint64_t)(i + 1), keys[i],
                                (uint32_t)strlen(keys[i]), body_len, &m, &body) != OMC_OK) return 1;
            for (k = 0; k < body_len; k++) body[k] = (uint8_t)(k * 31 + (uint32_t)t);
            omc__meta_seal(&m);
            snprintf(name, sizeof(name), "bin_t%d_%d", t, i);
            rc |= write_file(argv[1], name, m.data, m.size);
            tn = omc_meta_text_size(m.size);
            text = (char*)malloc(tn);
            if (!text || omc_meta_to_text(m.data, m.size, text, tn) != OMC_OK) return 1;
            snprintf(name, sizeof(name), "txt_t%d_%d", t, i);
            rc |= write_file(argv[1], name, text, tn - 1);
            free(text);
            omc_meta_free(&m);
        }
    }
    return rc;
}
#endif
