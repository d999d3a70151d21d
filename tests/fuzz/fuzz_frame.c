/* fuzz_frame.c - libFuzzer target for the frame decoder (omc_frame_decode and its accessors).

   For every input: decode it (with and without payload verification). If it is accepted, every
   segment must be reachable through omc_frame_segment and omc_frame_find and lie inside the input
   (its bytes are read, so ASan sees any overread); sealing a copy must keep it valid; and a frame
   rebuilt from the decoded segments must decode to the same segments.

   Built by tests/fuzz/run.sh:
     clang -fsanitize=fuzzer,address,undefined ... fuzz_frame.c        the fuzzer
     clang -DOMC_FUZZ_SEEDS ... fuzz_frame.c && ./seeds DIR            writes a seed corpus of valid frames */
#define OMNICONN_IMPLEMENTATION
#define OMNICONN_NO_ZMQ
#include "omniconn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_frame"
#include "fuzz_common.h"

/* Fold every byte of a region into a value the optimiser cannot drop: an out-of-bounds segment
   becomes an ASan report here instead of passing silently. */
static volatile uint8_t sink;
static void touch(const void* p, uint64_t n) {
    const uint8_t* b = (const uint8_t*)p;
    uint8_t x = 0;
    uint64_t i;
    for (i = 0; i < n; i++) x ^= b[i];
    sink ^= x;
}

static int same_segment(const omc_segment* a, const omc_segment* b) {
    uint32_t d;
    if (a->name_len != b->name_len || memcmp(a->name, b->name, a->name_len) != 0) return 0;
    if (a->kind != b->kind || a->dtype != b->dtype || a->ndim != b->ndim || a->size != b->size) return 0;
    for (d = 0; d < OMC_MAX_DIMS; d++) if (a->shape[d] != b->shape[d]) return 0;
    return a->size == 0 || memcmp(a->data, b->data, (size_t)a->size) == 0;
}

/* Rebuild the decoded frame with omc_frame_build and check the result decodes to the same
   segments. Skipped when the frame has names the builder rightly refuses (duplicates, NULs). */
static void check_rebuild(const omc_frame* fr) {
    omc_segment_desc* descs;
    char* names;
    uint64_t need = 0, built = 0;
    uint8_t* out;
    uint32_t i;
    omc_frame fr2;
    if (fr->count == 0 || fr->count > 64) return;
    descs = (omc_segment_desc*)calloc(fr->count, sizeof(omc_segment_desc));
    names = (char*)calloc(fr->count, 256);
    FUZZ_REQUIRE(descs && names);
    for (i = 0; i < fr->count; i++) {
        omc_segment s;
        FUZZ_REQUIRE(omc_frame_segment(fr, i, &s) == OMC_OK);
        memcpy(names + 256 * i, s.name, s.name_len);
        if (strlen(names + 256 * i) != s.name_len) { free(names); free(descs); return; }  /* a NUL inside */
        descs[i].name = names + 256 * i;
        descs[i].dtype = s.kind == OMC_SEGMENT_TENSOR ? s.dtype : OMC_DTYPE_INVALID;
        descs[i].ndim = s.ndim;
        memcpy(descs[i].shape, s.shape, sizeof(s.shape));
        descs[i].size = s.size;
        descs[i].data = s.data;
    }
    if (omc_frame_size(descs, fr->count, &need) == OMC_OK && need <= (64u << 20)) {
        out = (uint8_t*)malloc((size_t)need);
        FUZZ_REQUIRE(out);
        FUZZ_REQUIRE(omc_frame_build(out, need, descs, fr->count, fr->flags, NULL, &built) == OMC_OK);
        FUZZ_REQUIRE(built == need);
        FUZZ_REQUIRE(omc_frame_decode(out, need, 1, &fr2) == OMC_OK);
        FUZZ_REQUIRE(fr2.count == fr->count);
        for (i = 0; i < fr->count; i++) {
            omc_segment a, b;
            FUZZ_REQUIRE(omc_frame_segment(fr, i, &a) == OMC_OK);
            FUZZ_REQUIRE(omc_frame_segment(&fr2, i, &b) == OMC_OK);
            FUZZ_REQUIRE(same_segment(&a, &b));
        }
        free(out);
    }
    free(names);
    free(descs);
}

/* The header CRC would stop almost every mutation at the door, so each input is also tried with
   its CRCs made right: the header CRC recomputed with bounds from the real size (not from the
   fields under test), then the payload CRC by omc_frame_seal if the structure is valid. */
static void fix_crcs(uint8_t* f, size_t size) {
    uint64_t count, end, i;
    if (size < OMC_FRAME_HEADER_SIZE) return;
    count = omc__get_u32(f + 8);
    if (count > OMC_FRAME_MAX_SEGMENTS) return;
    end = OMC_FRAME_HEADER_SIZE + count * OMC_FRAME_ENTRY_SIZE;
    if (end > size) return;
    for (i = 0; i < count; i++) end += omc__get_u16(f + OMC_FRAME_HEADER_SIZE + i * OMC_FRAME_ENTRY_SIZE + 20);
    if (end > size) return;
    omc__put_u32(f + 24, omc__frame_header_crc(f, end));
    omc_frame_seal(f, size);
}

static void check_input(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    uint8_t* fixed;
    check_input(data, size);
    fixed = (uint8_t*)malloc(size ? size : 1);      /* exact size: ASan still sees overreads */
    FUZZ_REQUIRE(fixed);
    if (size) memcpy(fixed, data, size);
    fix_crcs(fixed, size);
    check_input(fixed, size);
    free(fixed);
    return 0;
}

static void check_input(const uint8_t* data, size_t size) {
    int verify;
    for (verify = 0; verify < 2; verify++) {
        omc_frame fr;
        uint32_t i;
        if (omc_frame_decode(data, size, verify, &fr) != OMC_OK) {
            FUZZ_REQUIRE(fr.base == NULL && fr.count == 0);     /* nothing handed out on error */
            continue;
        }
        FUZZ_REQUIRE(fr.base == data && fr.size <= size && fr.count <= OMC_FRAME_MAX_SEGMENTS);
        for (i = 0; i < fr.count; i++) {
            omc_segment s, t;
            char name[256];
            const uint8_t* d;
            FUZZ_REQUIRE(omc_frame_segment(&fr, i, &s) == OMC_OK);
            d = (const uint8_t*)s.data;
            FUZZ_REQUIRE(d >= data && d <= data + fr.size && s.size <= (uint64_t)(data + fr.size - d));
            FUZZ_REQUIRE((const uint8_t*)s.name >= data && s.name_len >= 1 && s.name_len <= 255 &&
                         (const uint8_t*)s.name + s.name_len <= data + fr.size);
            FUZZ_REQUIRE(s.ndim <= OMC_MAX_DIMS);
            touch(s.data, s.size);
            touch(s.name, s.name_len);
            memcpy(name, s.name, s.name_len);
            name[s.name_len] = '\0';
            if (strlen(name) == s.name_len) FUZZ_REQUIRE(omc_frame_find(&fr, name, &t) == OMC_OK);
        }
        {
            omc_segment t;
            omc_result r = omc_frame_find(&fr, "hidden", &t);
            FUZZ_REQUIRE(r == OMC_OK || r == OMC_ERR_NOT_FOUND);
            FUZZ_REQUIRE(omc_frame_segment(&fr, fr.count, &t) == OMC_ERR_NOT_FOUND);
        }
        if (verify) {   /* sealing a valid frame keeps it valid, payload CRC included */
            uint8_t* copy = (uint8_t*)malloc(size);
            omc_frame fr2;
            FUZZ_REQUIRE(copy);
            memcpy(copy, data, size);
            FUZZ_REQUIRE(omc_frame_seal(copy, size) == OMC_OK);
            FUZZ_REQUIRE(omc_frame_decode(copy, size, 1, &fr2) == OMC_OK);
            free(copy);
            check_rebuild(&fr);
        }
    }
}

#ifdef OMC_FUZZ_SEEDS
/* ---- the seed corpus: a handful of valid frames, one per file ---------------------------------- */

static int emit(const char* dir, const char* name, const omc_segment_desc* s, uint32_t count, uint32_t flags) {
    uint64_t size = 0;
    uint8_t* buf;
    int rc;
    if (omc_frame_size(s, count, &size) != OMC_OK) return 1;
    buf = (uint8_t*)calloc(1, (size_t)size);
    if (!buf || omc_frame_build(buf, size, s, count, flags, NULL, NULL) != OMC_OK) return 1;
    rc = write_file(dir, name, buf, (size_t)size);
    free(buf);
    return rc;
}

int main(int argc, char** argv) {
    static const float f32[6] = {1, 2, 3, 4, 5, 6};
    static const int64_t i64[3] = {-1, 0, 1};
    static const char text[] = "hello, stage two";
    static uint8_t blob[300];
    char longname[256];
    omc_segment_desc s[OMC_DTYPE_COUNT];
    int rc = 0, i;
    if (argc < 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    for (i = 0; i < (int)sizeof(blob); i++) blob[i] = (uint8_t)(i * 7);
    memset(longname, 'n', 255);
    longname[255] = '\0';
    memset(s, 0, sizeof(s));
    rc |= emit(argv[1], "empty", NULL, 0, 0);
    s[0].name = "hidden"; s[0].dtype = OMC_DTYPE_F32; s[0].ndim = 2; s[0].shape[0] = 2; s[0].shape[1] = 3; s[0].data = f32;
    s[1].name = "ids"; s[1].dtype = OMC_DTYPE_I64; s[1].ndim = 1; s[1].shape[0] = 3; s[1].data = i64;
    s[2].name = "note"; s[2].size = sizeof(text); s[2].data = text;
    s[3].name = "empty"; s[3].size = 0;
    rc |= emit(argv[1], "mixed", s, 4, 0);
    rc |= emit(argv[1], "mixed_crc", s, 4, OMC_FRAME_FLAG_PAYLOAD_CRC);
    memset(s, 0, sizeof(s));
    s[0].name = longname; s[0].size = sizeof(blob); s[0].data = blob;
    rc |= emit(argv[1], "long_name", s, 1, OMC_FRAME_FLAG_PAYLOAD_CRC);
    memset(s, 0, sizeof(s));
    {
        static char names[OMC_DTYPE_COUNT][8];
        for (i = 1; i < OMC_DTYPE_COUNT; i++) {     /* one small tensor of every dtype */
            snprintf(names[i - 1], sizeof(names[i - 1]), "t%d", i);
            s[i - 1].name = names[i - 1];
            s[i - 1].dtype = (omc_dtype)i;
            s[i - 1].ndim = (uint32_t)(i % 4);
            s[i - 1].shape[0] = 2; s[i - 1].shape[1] = 1; s[i - 1].shape[2] = 3;
            s[i - 1].data = blob;
        }
        rc |= emit(argv[1], "every_dtype", s, OMC_DTYPE_COUNT - 1, OMC_FRAME_FLAG_PAYLOAD_CRC);
    }
    return rc;
}
#endif
