/* test_frame.c - payload frames (omc_frame_*), the metadata envelope (omc_meta_*) and its
   printable form.

   Decoders get their input in a malloc'd block of exactly the input's size, so that under ASan a
   read one byte past the input is a crash, not a silent pass. The mutation tests re-seal the
   header CRC after mutating (with the library's own CRC helper) so that the structural checks
   behind the checksum are exercised too, not just the checksum. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omc_test.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static uint8_t* dup_exact(const void* src, size_t n) {
    uint8_t* p = (uint8_t*)malloc(n ? n : 1);
    if (p && n) memcpy(p, src, n);
    return p;
}

/* Every segment of a decoded frame lies inside [buf, buf + size), names included, and the
   accessors agree with each other. Returns 0 if anything points outside. */
static int frame_is_contained(const omc_frame* fr, const uint8_t* buf, uint64_t size) {
    uint32_t i;
    if (fr->base != buf || fr->size > size) return 0;
    for (i = 0; i < fr->count; i++) {
        omc_segment s, t;
        const uint8_t* d;
        char name[256];
        if (omc_frame_segment(fr, i, &s) != OMC_OK) return 0;
        d = (const uint8_t*)s.data;
        if (d < buf || d > buf + size || s.size > (uint64_t)(buf + size - d)) return 0;
        if ((const uint8_t*)s.name < buf || s.name_len == 0 || s.name_len > 255 ||
            (const uint8_t*)s.name + s.name_len > buf + size) return 0;
        if (s.ndim > OMC_MAX_DIMS) return 0;
        memcpy(name, s.name, s.name_len);
        name[s.name_len] = '\0';
        /* find by name hits this segment or an earlier one with the same name (possible in a
           hand-made frame; the builder refuses duplicates) */
        if (strlen(name) == s.name_len && omc_frame_find(fr, name, &t) != OMC_OK) return 0;
    }
    return 1;
}

/* Recompute the header CRC of a (possibly mutated) frame in place, with bounds taken from the
   real buffer size, not from the fields being tested. Returns 0 if the layout does not even fit. */
static int reseal_header(uint8_t* f, uint64_t size) {
    uint64_t count, end, i;
    if (size < OMC_FRAME_HEADER_SIZE) return 0;
    count = omc__get_u32(f + 8);
    if (count > OMC_FRAME_MAX_SEGMENTS) return 0;
    end = OMC_FRAME_HEADER_SIZE + count * OMC_FRAME_ENTRY_SIZE;
    if (end > size) return 0;
    for (i = 0; i < count; i++) end += omc__get_u16(f + OMC_FRAME_HEADER_SIZE + i * OMC_FRAME_ENTRY_SIZE + 20);
    if (end > size) return 0;
    omc__put_u32(f + 24, omc__frame_header_crc(f, end));
    return 1;
}

static uint64_t names_end_of(const uint8_t* f) {
    uint64_t count = omc__get_u32(f + 8), end = OMC_FRAME_HEADER_SIZE + count * OMC_FRAME_ENTRY_SIZE, i;
    for (i = 0; i < count; i++) end += omc__get_u16(f + OMC_FRAME_HEADER_SIZE + i * OMC_FRAME_ENTRY_SIZE + 20);
    return end;
}

/* A frame with a bit of everything: two tensors, bytes, an empty segment; optional payload CRC. */
static uint8_t* sample_frame(uint32_t flags, uint64_t* size_out) {
    static float f32[6] = {1, 2, 3, 4, 5, 6};
    static int64_t i64[3] = {-1, 0, 1};
    static const char text[] = "hello, stage two";
    omc_segment_desc s[4];
    uint64_t size = 0;
    uint8_t* buf;
    memset(s, 0, sizeof(s));
    s[0].name = "hidden"; s[0].dtype = OMC_DTYPE_F32; s[0].ndim = 2; s[0].shape[0] = 2; s[0].shape[1] = 3; s[0].data = f32;
    s[1].name = "ids"; s[1].dtype = OMC_DTYPE_I64; s[1].ndim = 1; s[1].shape[0] = 3; s[1].data = i64;
    s[2].name = "note"; s[2].size = sizeof(text); s[2].data = text;
    s[3].name = "empty"; s[3].size = 0;
    if (omc_frame_size(s, 4, &size) != OMC_OK) return NULL;
    buf = (uint8_t*)malloc(size);
    if (!buf) return NULL;
    if (omc_frame_build(buf, size, s, 4, flags, NULL, size_out) != OMC_OK) { free(buf); return NULL; }
    return buf;
}

/* ---- frames: building and decoding ------------------------------------------------------------ */

OMC_TEST(frame_roundtrip_every_dtype_and_bytes) {
    omc_segment_desc s[OMC_DTYPE_COUNT + 2];
    void* data[OMC_DTYPE_COUNT + 2];
    uint8_t* src[OMC_DTYPE_COUNT + 2];
    char names[OMC_DTYPE_COUNT + 2][16];
    uint32_t n = 0, i;
    uint64_t size = 0, built = 0;
    uint8_t* buf;
    omc_frame fr;
    memset(s, 0, sizeof(s));
    for (i = 1; i < OMC_DTYPE_COUNT; i++, n++) {    /* one tensor of every dtype, ndim 0..3 */
        uint64_t bytes;
        snprintf(names[n], sizeof(names[n]), "t_%s", omc_dtype_name((omc_dtype)i));
        s[n].name = names[n];
        s[n].dtype = (omc_dtype)i;
        s[n].ndim = i % 4;
        s[n].shape[0] = 3; s[n].shape[1] = 5; s[n].shape[2] = 2;
        REQUIRE(omc_tensor_nbytes(s[n].dtype, s[n].ndim, s[n].shape, &bytes) == OMC_OK);
        src[n] = (uint8_t*)malloc(bytes);
        omc_test_fill(src[n], bytes, n);
        s[n].data = src[n];
        if (i % 2) s[n].size = bytes;               /* a size that agrees is accepted */
    }
    s[n].name = "blob"; s[n].size = 1000; src[n] = (uint8_t*)malloc(1000); omc_test_fill(src[n], 1000, n); s[n].data = src[n]; n++;
    s[n].name = "b"; s[n].size = 1; src[n] = (uint8_t*)malloc(1); src[n][0] = 0x5A; s[n].data = src[n]; n++;
    CHECK_OK(omc_frame_size(s, n, &size));
    buf = (uint8_t*)malloc(size);
    REQUIRE(buf);
    CHECK_OK(omc_frame_build(buf, size, s, n, OMC_FRAME_FLAG_PAYLOAD_CRC, data, &built));
    CHECK_EQ(built, size);
    CHECK_EQ(size % OMC_FRAME_DATA_ALIGN, 0);
    CHECK_OK(omc_frame_decode(buf, size, 1, &fr));
    CHECK_EQ(fr.count, n);
    CHECK_EQ(fr.size, size);
    CHECK(fr.flags == OMC_FRAME_FLAG_PAYLOAD_CRC);
    for (i = 0; i < n; i++) {
        omc_segment g, f2;
        uint64_t bytes = s[i].dtype ? 0 : s[i].size;
        uint32_t d;
        if (s[i].dtype) omc_tensor_nbytes(s[i].dtype, s[i].ndim, s[i].shape, &bytes);
        CHECK_OK(omc_frame_segment(&fr, i, &g));
        CHECK_EQ(g.name_len, strlen(s[i].name));
        CHECK(memcmp(g.name, s[i].name, g.name_len) == 0);
        CHECK(g.kind == (s[i].dtype ? OMC_SEGMENT_TENSOR : OMC_SEGMENT_BYTES));
        CHECK(g.dtype == s[i].dtype);
        CHECK_EQ(g.ndim, s[i].ndim);
        for (d = 0; d < g.ndim; d++) CHECK_EQ(g.shape[d], s[i].shape[d]);
        for (d = g.ndim; d < OMC_MAX_DIMS; d++) CHECK_EQ(g.shape[d], 0);
        CHECK_EQ(g.size, bytes);
        CHECK(g.data == data[i]);                                   /* build said where it put it */
        CHECK_EQ(((uint8_t*)g.data - buf) % OMC_FRAME_DATA_ALIGN, 0);
        CHECK(memcmp(g.data, src[i], bytes) == 0);
        CHECK_OK(omc_frame_find(&fr, s[i].name, &f2));
        CHECK(f2.data == g.data && f2.size == g.size);
        free(src[i]);
    }
    {
        omc_segment g;
        CHECK_RES(omc_frame_find(&fr, "t_f3", &g), OMC_ERR_NOT_FOUND);
        CHECK_RES(omc_frame_find(&fr, "", &g), OMC_ERR_NOT_FOUND);
        CHECK_RES(omc_frame_find(&fr, "t_f32x", &g), OMC_ERR_NOT_FOUND);  /* no prefix matches */
        CHECK_RES(omc_frame_segment(&fr, n, &g), OMC_ERR_NOT_FOUND);
        CHECK_RES(omc_frame_find(&fr, NULL, &g), OMC_ERR_INVALID_ARG);
        CHECK_RES(omc_frame_segment(NULL, 0, &g), OMC_ERR_INVALID_ARG);
    }
    free(buf);
}

OMC_TEST(frame_empty_and_zero_size_segments) {
    uint8_t buf[256];
    uint64_t size = 0;
    omc_frame fr;
    omc_segment g;
    CHECK_OK(omc_frame_size(NULL, 0, &size));
    CHECK_EQ(size, 64);                                      /* the header, padded */
    CHECK_OK(omc_frame_build(buf, sizeof(buf), NULL, 0, 0, NULL, &size));
    CHECK_OK(omc_frame_decode(buf, size, 1, &fr));
    CHECK_EQ(fr.count, 0);
    CHECK_RES(omc_frame_segment(&fr, 0, &g), OMC_ERR_NOT_FOUND);
    CHECK_RES(omc_frame_find(&fr, "x", &g), OMC_ERR_NOT_FOUND);
    {
        omc_segment_desc s[3];
        uint8_t* p;
        memset(s, 0, sizeof(s));
        s[0].name = "nothing"; s[0].size = 0;                   /* bytes, empty */
        s[1].name = "no_rows"; s[1].dtype = OMC_DTYPE_F16; s[1].ndim = 2; s[1].shape[0] = 0; s[1].shape[1] = 8;
        s[2].name = "last"; s[2].size = 0;
        CHECK_OK(omc_frame_size(s, 3, &size));
        p = (uint8_t*)malloc(size);
        REQUIRE(p);
        CHECK_OK(omc_frame_build(p, size, s, 3, OMC_FRAME_FLAG_PAYLOAD_CRC, NULL, NULL));
        CHECK_OK(omc_frame_decode(p, size, 1, &fr));
        CHECK(frame_is_contained(&fr, p, size));
        CHECK_OK(omc_frame_find(&fr, "no_rows", &g));
        CHECK_EQ(g.size, 0);
        CHECK(g.kind == OMC_SEGMENT_TENSOR && g.ndim == 2 && g.shape[1] == 8);
        CHECK_OK(omc_frame_find(&fr, "last", &g));
        CHECK((uint8_t*)g.data <= p + size);
        free(p);
    }
}

OMC_TEST(frame_names_up_to_255_bytes_unique) {
    char n255[256], n256[257];
    omc_segment_desc s[2];
    uint64_t size = 0;
    uint8_t* p;
    omc_frame fr;
    omc_segment g;
    memset(n255, 'x', 255); n255[255] = '\0';
    memset(n256, 'y', 256); n256[256] = '\0';
    memset(s, 0, sizeof(s));
    s[0].name = n255; s[0].size = 3;
    s[1].name = "x"; s[1].size = 4;                          /* a prefix of the long one */
    CHECK_OK(omc_frame_size(s, 2, &size));
    p = (uint8_t*)malloc(size);
    REQUIRE(p);
    CHECK_OK(omc_frame_build(p, size, s, 2, 0, NULL, NULL));
    CHECK_OK(omc_frame_decode(p, size, 0, &fr));
    CHECK_OK(omc_frame_find(&fr, n255, &g));
    CHECK_EQ(g.name_len, 255);
    CHECK_EQ(g.size, 3);
    CHECK_OK(omc_frame_find(&fr, "x", &g));
    CHECK_EQ(g.size, 4);
    CHECK_RES(omc_frame_find(&fr, n256, &g), OMC_ERR_NOT_FOUND);
    free(p);
    {   /* a decoder must not take a 256-byte name either, even when the bytes are there
           (found by fuzz_frame: one 255-byte name whose length field says 256, header re-sealed) */
        s[1].name = NULL;
        CHECK_OK(omc_frame_size(s, 1, &size));
        p = (uint8_t*)malloc(size);
        REQUIRE(p);
        CHECK_OK(omc_frame_build(p, size, s, 1, 0, NULL, NULL));
        omc__put_u16(p + OMC_FRAME_HEADER_SIZE + 20, 256);
        CHECK(reseal_header(p, size));
        CHECK_RES(omc_frame_decode(p, size, 0, &fr), OMC_ERR_MALFORMED);
        free(p);
    }
    s[0].name = n256;
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);     /* 256 bytes: too long */
    s[0].name = "";
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);     /* empty */
    s[0].name = NULL;
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);
    s[0].name = "x";
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);     /* duplicate */
    {
        uint8_t buf[1024];
        CHECK_RES(omc_frame_build(buf, sizeof(buf), s, 2, 0, NULL, NULL), OMC_ERR_INVALID_ARG);
    }
}

OMC_TEST(frame_build_checks_its_input) {
    omc_segment_desc s[2];
    uint8_t buf[4096];
    uint64_t size = 0, need = 0;
    memset(s, 0, sizeof(s));
    s[0].name = "a"; s[0].dtype = OMC_DTYPE_F32; s[0].ndim = 1; s[0].shape[0] = 4;
    s[1].name = "b"; s[1].size = 10;
    CHECK_OK(omc_frame_size(s, 2, &need));
    CHECK_RES(omc_frame_build(buf, need - 1, s, 2, 0, NULL, &size), OMC_ERR_TOO_LARGE);
    CHECK_EQ(size, need);                                   /* ... and says how much it needs */
    CHECK_RES(omc_frame_build(buf, sizeof(buf), s, 2, 0x2, NULL, NULL), OMC_ERR_INVALID_ARG);  /* unknown flag */
    CHECK_RES(omc_frame_build(NULL, sizeof(buf), s, 2, 0, NULL, NULL), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_frame_size(NULL, 2, &size), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_frame_size(s, OMC_FRAME_MAX_SEGMENTS + 1, &size), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_frame_size(s, 2, NULL), OMC_ERR_INVALID_ARG);
    s[0].size = 15;                                         /* disagrees with 4 x f32 */
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_TYPE);
    s[0].size = 0; s[0].shape[0] = -4;
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);
    s[0].shape[0] = INT64_MAX;
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_TOO_LARGE);
    s[0].shape[0] = 4; s[0].ndim = OMC_MAX_DIMS + 1;
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);
    s[0].ndim = 1; s[0].dtype = (omc_dtype)99;
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);
    s[0].dtype = OMC_DTYPE_F32;
    s[1].ndim = 1;                                          /* bytes have no shape */
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_INVALID_ARG);
    s[1].ndim = 0; s[1].size = ~0ull - 10;                  /* would overflow the total */
    CHECK_RES(omc_frame_size(s, 2, &size), OMC_ERR_TOO_LARGE);
    s[1].size = 1ull << 62;                                 /* fine to ask the size of ... */
    CHECK_OK(omc_frame_size(s, 2, &size));
    CHECK(size > (1ull << 62));
    CHECK_RES(omc_frame_build(buf, sizeof(buf), s, 2, 0, NULL, NULL), OMC_ERR_TOO_LARGE);   /* ... not to build */
}

/* Build inside a pool buffer (zero copy), fill the segments in place, seal, decode with verify. */
OMC_TEST(frame_in_place_build_seal_and_payload_crc) {
    omc_pool_desc pd;
    omc_pool* pool = NULL;
    omc_buffer b;
    omc_segment_desc s[2];
    void* at[2];
    uint64_t size = 0;
    omc_frame fr;
    omc_segment g;
    memset(&pd, 0, sizeof(pd));
    pd.size = 1 << 20;
    CHECK_OK(omc_pool_create(&pd, &pool));
    REQUIRE(pool);
    memset(s, 0, sizeof(s));
    s[0].name = "kv"; s[0].dtype = OMC_DTYPE_BF16; s[0].ndim = 3; s[0].shape[0] = 2; s[0].shape[1] = 16; s[0].shape[2] = 64;
    s[1].name = "meta"; s[1].size = 100;
    CHECK_OK(omc_frame_size(s, 2, &size));
    CHECK_OK(omc_pool_alloc_buffer(pool, size, &b));
    CHECK_OK(omc_frame_build(b.data, b.size, s, 2, OMC_FRAME_FLAG_PAYLOAD_CRC, at, NULL));
    omc_test_fill(at[0], 2 * 16 * 64 * 2, 7);               /* the producer writes in place ... */
    omc_test_fill(at[1], 100, 8);
    CHECK_OK(omc_frame_decode(b.data, b.size, 0, &fr));      /* structure fine, */
    CHECK_RES(omc_frame_decode(b.data, b.size, 1, &fr), OMC_ERR_CHECKSUM);   /* CRC stale until sealed */
    CHECK_OK(omc_frame_seal(b.data, b.size));
    CHECK_OK(omc_frame_decode(b.data, b.size, 1, &fr));
    CHECK_OK(omc_frame_find(&fr, "kv", &g));
    CHECK(g.data == at[0] && omc_test_verify(g.data, g.size, 7));
    CHECK(omc_pool_contains(pool, g.data, g.size));
    CHECK_OK(omc_frame_find(&fr, "meta", &g));
    CHECK(omc_test_verify(g.data, 100, 8));
    {   /* a flipped payload byte anywhere in any segment is caught by verify, not without it */
        uint64_t k;
        int missed = 0;
        for (k = 0; k < 100; k++) {
            uint8_t* x = (uint8_t*)at[1] + k;
            *x ^= 0x20;
            if (omc_frame_decode(b.data, b.size, 1, &fr) != OMC_ERR_CHECKSUM) missed++;
            if (omc_frame_decode(b.data, b.size, 0, &fr) != OMC_OK) missed++;
            *x ^= 0x20;
        }
        for (k = 0; k < 2 * 16 * 64 * 2; k += 37) {
            uint8_t* x = (uint8_t*)at[0] + k;
            *x ^= 0x01;
            if (omc_frame_decode(b.data, b.size, 1, &fr) != OMC_ERR_CHECKSUM) missed++;
            *x ^= 0x01;
        }
        CHECK_EQ(missed, 0);
    }
    CHECK_OK(omc_frame_decode(b.data, b.size, 1, &fr));
    {   /* without the flag there is no payload CRC: seal is a no-op, verify has nothing to check */
        CHECK_OK(omc_frame_build(b.data, b.size, s, 2, 0, at, NULL));
        omc_test_fill(at[1], 100, 9);
        CHECK_OK(omc_frame_seal(b.data, b.size));
        CHECK_OK(omc_frame_decode(b.data, b.size, 1, &fr));
        CHECK_EQ(omc__get_u32((uint8_t*)b.data + 28), 0);
    }
    CHECK(omc_frame_seal(b.data, 10) != OMC_OK);            /* seal validates first */
    CHECK_OK(omc_buffer_release(&b));
    omc_pool_destroy(pool);
}

/* Any flipped byte of the header, segment table or names is refused (the header CRC covers them;
   the payload CRC field itself is covered by verify). */
OMC_TEST(frame_header_crc_catches_every_flipped_byte) {
    uint64_t size = 0, ne, k;
    int flags, missed = 0, checked = 0;
    for (flags = 0; flags < 2; flags++) {
        uint8_t* f = sample_frame(flags ? OMC_FRAME_FLAG_PAYLOAD_CRC : 0, &size);
        omc_frame fr;
        REQUIRE(f);
        ne = names_end_of(f);
        for (k = 0; k < ne; k++) {
            static const uint8_t masks[] = {0x01, 0x80, 0xFF, 0x10};
            size_t m;
            for (m = 0; m < sizeof(masks); m++) {
                uint8_t* copy = dup_exact(f, size);
                omc_result r;
                copy[k] ^= masks[m];
                r = omc_frame_decode(copy, size, 1, &fr);
                if (r == OMC_OK) { missed++; if (missed < 5) fprintf(stderr, "  flip of byte %llu (mask %02x) accepted\n", (unsigned long long)k, masks[m]); }
                if (k >= 24 && k < 28 && r != OMC_ERR_CHECKSUM) missed++;    /* the CRC field itself */
                checked++;
                free(copy);
            }
        }
        free(f);
    }
    printf("  %d single-byte header/table/name corruptions, %d accepted\n", checked, missed);
    CHECK_EQ(missed, 0);
}

OMC_TEST(frame_every_truncation_is_rejected) {
    uint64_t size = 0, len;
    uint8_t* f = sample_frame(OMC_FRAME_FLAG_PAYLOAD_CRC, &size);
    omc_frame fr;
    int accepted = 0;
    REQUIRE(f);
    for (len = 0; len < size; len++) {
        uint8_t* t = dup_exact(f, len);                      /* exactly len bytes: ASan sees overreads */
        if (omc_frame_decode(t, len, 1, &fr) == OMC_OK) accepted++;
        if (omc_frame_seal(t, len) == OMC_OK) accepted++;
        free(t);
    }
    CHECK_EQ(accepted, 0);
    {   /* a frame followed by other bytes is fine: it knows its own size */
        uint8_t* big = (uint8_t*)malloc(size + 100);
        REQUIRE(big);
        memcpy(big, f, size);
        memset(big + size, 0xEE, 100);
        CHECK_OK(omc_frame_decode(big, size + 100, 1, &fr));
        CHECK_EQ(fr.size, size);
        free(big);
    }
    CHECK_RES(omc_frame_decode(NULL, size, 0, &fr), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_frame_decode(f, size, 0, NULL), OMC_ERR_INVALID_ARG);
    free(f);
}

/* Check one mutated frame: decode it from an exact-size copy (raw, and with the header CRC
   re-sealed so the checks behind the CRC get exercised); an accepted frame must be contained. */
typedef struct mut_counts { long tried, accepted, escaped; } mut_counts;

static void try_mutant(const uint8_t* f, uint64_t size, mut_counts* c) {
    int reseal;
    for (reseal = 0; reseal < 2; reseal++) {
        uint8_t* m = dup_exact(f, size);
        omc_frame fr;
        if (reseal && !reseal_header(m, size)) { free(m); continue; }
        c->tried++;
        if (omc_frame_decode(m, size, 1, &fr) == OMC_OK) {
            c->accepted++;
            if (!frame_is_contained(&fr, m, size)) c->escaped++;
        }
        free(m);
    }
}

OMC_TEST(frame_systematic_mutation_never_escapes_the_buffer) {
    uint64_t size = 0, ne, k;
    uint8_t* f = sample_frame(OMC_FRAME_FLAG_PAYLOAD_CRC, &size);
    uint8_t* m;
    mut_counts c = {0, 0, 0};
    REQUIRE(f);
    ne = names_end_of(f);
    m = (uint8_t*)malloc(size);
    REQUIRE(m);
    /* 1. every byte of header + table + names set to a handful of values */
    for (k = 0; k < ne; k++) {
        static const uint8_t vals[] = {0x00, 0x01, 0x02, 0x08, 0x10, 0x20, 0x3F, 0x40, 0x7F, 0x80, 0xC0, 0xFE, 0xFF};
        size_t v;
        for (v = 0; v < sizeof(vals) + 2; v++) {
            memcpy(m, f, size);
            m[k] = v < sizeof(vals) ? vals[v] : (uint8_t)(f[k] + (v == sizeof(vals) ? 1 : -1));
            try_mutant(m, size, &c);
        }
    }
    /* 2. whole fields set to boundary values: counts, sizes, offsets of every entry */
    {
        const uint64_t total = size;
        const uint64_t vals[] = {0, 1, 31, 32, 63, 64, 65, total - 64, total - 1, total, total + 1, total + 64,
                                 0x7FFFFFFFull, 0xFFFFFFFFull, 1ull << 32, 1ull << 63, ~0ull, ~0ull - 63};
        size_t v;
        uint32_t count = omc__get_u32(f + 8), e;
        for (v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
            memcpy(m, f, size); omc__put_u64(m + 16, vals[v]); try_mutant(m, size, &c);            /* total */
            memcpy(m, f, size); omc__put_u32(m + 8, (uint32_t)vals[v]); try_mutant(m, size, &c);   /* count */
            for (e = 0; e < count; e++) {
                uint8_t* en = m + OMC_FRAME_HEADER_SIZE + e * OMC_FRAME_ENTRY_SIZE;
                uint32_t d;
                memcpy(m, f, size); omc__put_u64(en + 0, vals[v]); try_mutant(m, size, &c);       /* data offset */
                memcpy(m, f, size); omc__put_u64(en + 8, vals[v]); try_mutant(m, size, &c);       /* data size */
                memcpy(m, f, size); omc__put_u32(en + 16, (uint32_t)vals[v]); try_mutant(m, size, &c); /* name offset */
                memcpy(m, f, size); omc__put_u16(en + 20, (uint16_t)vals[v]); try_mutant(m, size, &c); /* name length */
                for (d = 0; d < OMC_MAX_DIMS; d++) {
                    memcpy(m, f, size); omc__put_u64(en + 32 + 8 * d, vals[v]); try_mutant(m, size, &c);
                }
                /* offset and size together: the classic "both in range, sum out of range" */
                memcpy(m, f, size); omc__put_u64(en + 0, 64); omc__put_u64(en + 8, vals[v]); try_mutant(m, size, &c);
                memcpy(m, f, size); omc__put_u64(en + 0, vals[v] & ~63ull); omc__put_u64(en + 8, total - 64); try_mutant(m, size, &c);
            }
        }
    }
    printf("  %ld mutants decoded, %ld accepted, %ld escaped the buffer\n", c.tried, c.accepted, c.escaped);
    CHECK(c.tried > 10000);
    CHECK(c.accepted > 0);             /* some mutants are valid frames (a renamed segment, re-sealed) */
    CHECK_EQ(c.escaped, 0);
    free(m);
    free(f);
}

/* Bytes the builder does not own (padding after names and after each segment) must not carry
   whatever the pool held before: they travel to a peer. */
OMC_TEST(frame_padding_is_zeroed) {
    omc_segment_desc s[3];
    uint64_t size = 0, k, ne;
    uint8_t* p;
    uint8_t* owned;
    omc_frame fr;
    uint32_t i;
    memset(s, 0, sizeof(s));
    s[0].name = "abc"; s[0].size = 5; s[0].data = "12345";
    s[1].name = "t"; s[1].dtype = OMC_DTYPE_U16; s[1].ndim = 1; s[1].shape[0] = 3; s[1].data = "\1\2\3\4\5\6";
    s[2].name = "zz"; s[2].size = 70; s[2].data = NULL;      /* filled in place later */
    CHECK_OK(omc_frame_size(s, 3, &size));
    p = (uint8_t*)malloc(size);
    owned = (uint8_t*)calloc(size, 1);
    REQUIRE(p && owned);
    memset(p, 0xAB, size);                                  /* stale pool contents */
    CHECK_OK(omc_frame_build(p, size, s, 3, OMC_FRAME_FLAG_PAYLOAD_CRC, NULL, NULL));
    CHECK_OK(omc_frame_decode(p, size, 0, &fr));
    ne = names_end_of(p);
    for (k = 0; k < ne; k++) owned[k] = 1;                  /* header, table, names: specified bytes */
    for (i = 0; i < fr.count; i++) {
        omc_segment g;
        CHECK_OK(omc_frame_segment(&fr, i, &g));
        for (k = 0; k < g.size; k++) owned[(uint8_t*)g.data - p + k] = 1;
    }
    for (k = 0; k < size; k++) if (!owned[k] && p[k] != 0) { CHECK(p[k] == 0); break; }
    /* inside the table: reserved bytes and unused shape dimensions are zero too */
    for (i = 0; i < fr.count; i++) {
        const uint8_t* e = p + OMC_FRAME_HEADER_SIZE + i * OMC_FRAME_ENTRY_SIZE;
        uint32_t d;
        for (k = 25; k < 32; k++) CHECK_EQ(e[k], 0);
        for (d = e[24]; d < OMC_MAX_DIMS; d++) CHECK_EQ(omc__get_u64(e + 32 + 8 * d), 0);
    }
    free(p);
    free(owned);
}

OMC_TEST(frame_accessors_revalidate_shared_bytes) {
    /* the frame may live in memory a peer can still write: a table entry changed after decode
       must make the accessor fail, not hand out a pointer outside the frame */
    uint64_t size = 0;
    uint8_t* f = sample_frame(0, &size);
    omc_frame fr;
    omc_segment g;
    REQUIRE(f);
    CHECK_OK(omc_frame_decode(f, size, 0, &fr));
    omc__put_u64(f + OMC_FRAME_HEADER_SIZE + 8, size * 4);          /* entry 0: size now huge */
    CHECK_RES(omc_frame_segment(&fr, 0, &g), OMC_ERR_MALFORMED);
    CHECK_RES(omc_frame_find(&fr, "hidden", &g), OMC_ERR_MALFORMED);
    CHECK(g.data == NULL || (uint8_t*)g.data + g.size <= f + size);
    omc__put_u16(f + OMC_FRAME_HEADER_SIZE + 96 + 20, 60000);       /* entry 1: name length huge */
    CHECK(omc_frame_segment(&fr, 1, &g) != OMC_OK);
    free(f);
}

OMC_TEST(frame_version_and_header_fields) {
    uint64_t size = 0;
    uint8_t* f = sample_frame(0, &size);
    omc_frame fr;
    REQUIRE(f);
    omc__put_u16(f + 4, 2);
    reseal_header(f, size);
    CHECK_RES(omc_frame_decode(f, size, 0, &fr), OMC_ERR_VERSION);
    omc__put_u16(f + 4, 1);
    omc__put_u16(f + 6, 64);                                        /* header size */
    reseal_header(f, size);
    CHECK_RES(omc_frame_decode(f, size, 0, &fr), OMC_ERR_MALFORMED);
    omc__put_u16(f + 6, 32);
    omc__put_u32(f + 12, 0x4);                                      /* unknown flag */
    reseal_header(f, size);
    CHECK_RES(omc_frame_decode(f, size, 0, &fr), OMC_ERR_MALFORMED);
    omc__put_u32(f + 12, 0);
    omc__put_u32(f + 28, 0xDEADBEEF);                               /* a payload CRC without the flag */
    reseal_header(f, size);
    CHECK_RES(omc_frame_decode(f, size, 0, &fr), OMC_ERR_MALFORMED);
    omc__put_u32(f + 28, 0);
    reseal_header(f, size);
    CHECK_OK(omc_frame_decode(f, size, 1, &fr));
    omc__put_u32(f, 0x46434D50);                                    /* magic */
    CHECK_RES(omc_frame_decode(f, size, 0, &fr), OMC_ERR_MALFORMED);
    free(f);
}

/* ---- metadata envelope ------------------------------------------------------------------------- */

static const char qkey[] = "thinker\x1ftalker\x1freq-42";

/* An envelope made the way connectors make it (omc__meta_begin + body + omc__meta_seal). */
static omc_meta make_meta(uint32_t body_len, uint32_t flags) {
    omc_meta m = {NULL, 0};
    uint8_t* body = NULL;
    if (omc__meta_begin(OMC_TRANSPORT_SHM, flags, 123456789ull, qkey, (uint32_t)strlen(qkey), body_len, &m, &body) == OMC_OK) {
        omc_test_fill(body, body_len, body_len);
        omc__meta_seal(&m);
    }
    return m;
}

static void reseal_meta(uint8_t* data, uint32_t size) {
    omc_meta m;
    m.data = data;
    m.size = size;
    omc__meta_seal(&m);
}

OMC_TEST(meta_parse_roundtrip) {
    omc_meta m = make_meta(16, OMC_META_FLAG_FRAME);
    omc_meta_info info;
    uint8_t* exact;
    REQUIRE(m.data);
    CHECK_EQ(m.size, OMC_META_HEADER_SIZE + strlen(qkey) + 16);
    exact = dup_exact(m.data, m.size);
    CHECK_OK(omc_meta_parse(exact, m.size, &info));
    CHECK(info.transport == OMC_TRANSPORT_SHM);
    CHECK_EQ(info.flags, OMC_META_FLAG_FRAME);
    CHECK_EQ(info.data_size, 123456789ull);
    CHECK(info.incarnation == omc_incarnation() && info.incarnation != 0);
    CHECK_EQ(info.key_len, strlen(qkey));
    CHECK(memcmp(info.key, qkey, info.key_len) == 0);
    CHECK((const uint8_t*)info.key == exact + OMC_META_HEADER_SIZE);   /* zero-copy: points into the blob */
    CHECK_EQ(info.body_len, 16);
    CHECK(omc_test_verify(info.body, 16, 16));
    free(exact);
    omc_meta_free(&m);
    CHECK(m.data == NULL && m.size == 0);
    omc_meta_free(&m);                                              /* twice: harmless */
    omc_meta_free(NULL);
}

OMC_TEST(meta_parse_rejects_bad_fields) {
    omc_meta m = make_meta(16, OMC_META_FLAG_INLINE);
    omc_meta_info info;
    uint8_t* x;
    uint32_t n = m.size;
    REQUIRE(m.data);
    x = (uint8_t*)malloc(n + 1);
    REQUIRE(x);
#define RESET() memcpy(x, m.data, n)
#define EXPECT(res) do { reseal_meta(x, n); CHECK_RES(omc_meta_parse(x, n, &info), res); } while (0)
    RESET(); omc__put_u32(x, 0x4D434D50);          EXPECT(OMC_ERR_MALFORMED);    /* magic */
    RESET(); x[4] = 2;                             EXPECT(OMC_ERR_VERSION);
    RESET(); x[4] = 0;                             EXPECT(OMC_ERR_VERSION);
    RESET(); x[5] = OMC_TRANSPORT_NONE;            EXPECT(OMC_ERR_MALFORMED);    /* transport */
    RESET(); x[5] = OMC_TRANSPORT_RDMA + 1;        EXPECT(OMC_ERR_MALFORMED);
    RESET(); x[5] = 0xFF;                          EXPECT(OMC_ERR_MALFORMED);
    RESET(); x[5] = OMC_TRANSPORT_RDMA;            EXPECT(OMC_OK);               /* every real one is fine */
    RESET(); x[5] = OMC_TRANSPORT_LOCAL;           EXPECT(OMC_OK);
    RESET(); omc__put_u16(x + 6, 0x4);             EXPECT(OMC_ERR_MALFORMED);    /* unknown flag */
    RESET(); omc__put_u16(x + 24, 0);              EXPECT(OMC_ERR_MALFORMED);    /* key_len 0 */
    RESET(); omc__put_u16(x + 24, OMC_KEY_MAX);    EXPECT(OMC_ERR_MALFORMED);    /* key_len too big */
    RESET(); omc__put_u16(x + 24, (uint16_t)(strlen(qkey) + 1)); EXPECT(OMC_ERR_MALFORMED);  /* sizes disagree */
    RESET(); omc__put_u32(x + 28, 17);             EXPECT(OMC_ERR_MALFORMED);    /* body_len disagrees */
    RESET(); omc__put_u32(x + 28, OMC_META_MAX_BODY + 1); EXPECT(OMC_ERR_MALFORMED);
    RESET(); omc__put_u32(x + 28, 0xFFFFFFFFu);    EXPECT(OMC_ERR_MALFORMED);
    RESET(); omc__put_u16(x + 26, 1);              EXPECT(OMC_ERR_MALFORMED);    /* reserved */
    RESET(); omc__put_u32(x + 36, 1);              EXPECT(OMC_ERR_MALFORMED);
    RESET();                                       EXPECT(OMC_OK);
#undef EXPECT
    /* a size that disagrees with the fields, in both directions */
    RESET(); x[n] = 0;
    CHECK_RES(omc_meta_parse(x, n + 1, &info), OMC_ERR_MALFORMED);
    CHECK_RES(omc_meta_parse(x, n - 1, &info), OMC_ERR_MALFORMED);
    CHECK_RES(omc_meta_parse(x, OMC_META_HEADER_SIZE - 1, &info), OMC_ERR_MALFORMED);
    CHECK_RES(omc_meta_parse(x, (size_t)OMC_META_MAX_SIZE + 1, &info), OMC_ERR_MALFORMED);  /* before reading */
    CHECK_RES(omc_meta_parse(NULL, n, &info), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_meta_parse(x, n, NULL), OMC_ERR_INVALID_ARG);
    {   /* the CRC: any flipped bit anywhere is refused; in the key, body or CRC field as CHECKSUM */
        uint32_t k;
        int missed = 0;
        for (k = 0; k < n; k++) {
            int bit;
            for (bit = 0; bit < 8; bit++) {
                omc_result r;
                RESET();
                x[k] ^= (uint8_t)(1u << bit);
                r = omc_meta_parse(x, n, &info);
                if (r == OMC_OK) missed++;
                if ((k >= OMC_META_HEADER_SIZE || (k >= 32 && k < 36) || (k >= 8 && k < 24)) && r != OMC_ERR_CHECKSUM) missed++;
            }
        }
        CHECK_EQ(missed, 0);
    }
    /* every truncation, in an exact-size block */
    {
        uint32_t len;
        int accepted = 0;
        for (len = 0; len < n; len++) {
            uint8_t* t = dup_exact(m.data, len);
            if (omc_meta_parse(t, len, &info) == OMC_OK) accepted++;
            free(t);
        }
        CHECK_EQ(accepted, 0);
    }
#undef RESET
    free(x);
    omc_meta_free(&m);
}

OMC_TEST(meta_begin_checks_sizes) {
    omc_meta m = {NULL, 0};
    uint8_t* body;
    CHECK_RES(omc__meta_begin(OMC_TRANSPORT_LOCAL, 0, 0, qkey, 0, 0, &m, &body), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc__meta_begin(OMC_TRANSPORT_LOCAL, 0, 0, qkey, OMC_KEY_MAX, 0, &m, &body), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc__meta_begin(OMC_TRANSPORT_LOCAL, 0, 0, qkey, 5, OMC_META_MAX_BODY + 1, &m, &body), OMC_ERR_INVALID_ARG);
    CHECK(m.data == NULL);
    {   /* the largest envelope there is: a 255-byte key and the largest body */
        char key[OMC_KEY_MAX];
        omc_meta_info info;
        char* text;
        omc_meta back = {NULL, 0};
        size_t tn;
        memset(key, 'k', sizeof(key));
        CHECK_OK(omc__meta_begin(OMC_TRANSPORT_TCP, 0, 1, key, OMC_KEY_MAX - 1, OMC_META_MAX_BODY, &m, &body));
        REQUIRE(m.data);
        memset(body, 0x77, OMC_META_MAX_BODY);
        omc__meta_seal(&m);
        CHECK_EQ(m.size, OMC_META_MAX_SIZE - 1);
        CHECK_OK(omc_meta_parse(m.data, m.size, &info));
        tn = omc_meta_text_size(m.size);
        text = (char*)malloc(tn);
        REQUIRE(text);
        CHECK_OK(omc_meta_to_text(m.data, m.size, text, tn));
        CHECK_OK(omc_meta_from_text(text, strlen(text), &back));
        CHECK(back.size == m.size && memcmp(back.data, m.data, m.size) == 0);
        omc_meta_free(&back);
        free(text);
        omc_meta_free(&m);
    }
}

/* ---- the printable form ------------------------------------------------------------------------ */

OMC_TEST(meta_text_roundtrip_every_length_mod_3) {
    uint32_t body;
    for (body = 0; body < 7; body++) {          /* envelope sizes cover every base64 remainder */
        omc_meta m = make_meta(body, 0), back = {NULL, 0};
        size_t tn, k, len;
        char* text;
        char* exact;
        REQUIRE(m.data);
        tn = omc_meta_text_size(m.size);
        text = (char*)malloc(tn);
        REQUIRE(text);
        CHECK_OK(omc_meta_to_text(m.data, m.size, text, tn));
        len = strlen(text);
        CHECK_EQ(len, tn - 1);                  /* the size is exact, terminator included */
        CHECK(strncmp(text, OMC_META_TEXT_PREFIX, 5) == 0);
        for (k = 5; k < len; k++)               /* JSON- and URL-safe: no quoting ever needed */
            CHECK((text[k] >= 'A' && text[k] <= 'Z') || (text[k] >= 'a' && text[k] <= 'z') ||
                  (text[k] >= '0' && text[k] <= '9') || text[k] == '-' || text[k] == '_');
        exact = (char*)dup_exact(text, len);    /* not NUL-terminated: len is the contract */
        CHECK_OK(omc_meta_from_text(exact, len, &back));
        CHECK(back.size == m.size && memcmp(back.data, m.data, m.size) == 0);
        CHECK_RES(omc_meta_to_text(m.data, m.size, text, tn - 1), OMC_ERR_TOO_LARGE);
        CHECK_RES(omc_meta_to_text(m.data, m.size, NULL, tn), OMC_ERR_INVALID_ARG);
        omc_meta_free(&back);
        free(exact);
        free(text);
        omc_meta_free(&m);
    }
    {   /* to_text refuses to print something that is not an envelope */
        char out[128];
        uint8_t junk[48];
        memset(junk, 0, sizeof(junk));
        CHECK_RES(omc_meta_to_text(junk, sizeof(junk), out, sizeof(out)), OMC_ERR_MALFORMED);
    }
}

OMC_TEST(meta_from_text_rejects_bad_input) {
    omc_meta m = make_meta(5, 0), back = {NULL, 0};
    size_t tn, len, k;
    char* text;
    char* t;
    REQUIRE(m.data);
    tn = omc_meta_text_size(m.size);
    text = (char*)malloc(tn);
    t = (char*)malloc(tn + 8);
    REQUIRE(text && t);
    CHECK_OK(omc_meta_to_text(m.data, m.size, text, tn));
    len = strlen(text);
    {   /* bad characters anywhere in the body: standard base64's + / =, space, NUL, high bytes */
        static const char bad[] = { '+', '/', '=', ' ', '\0', '\n', '.', (char)0x80, (char)0xFF };
        size_t b;
        int missed = 0;
        for (k = 5; k < len; k++)
            for (b = 0; b < sizeof(bad); b++) {
                memcpy(t, text, len);
                t[k] = bad[b];
                if (omc_meta_from_text(t, len, &back) != OMC_ERR_MALFORMED) missed++;
                if (back.data != NULL) missed++;            /* nothing handed out on error */
            }
        CHECK_EQ(missed, 0);
    }
    {   /* a wrong prefix */
        static const char* prefixes[] = { "omc2.", "OMC1.", "omc1:", "omc1", "mc1.", "" };
        size_t p;
        for (p = 0; p < sizeof(prefixes) / sizeof(prefixes[0]); p++) {
            size_t pl = strlen(prefixes[p]);
            memcpy(t, prefixes[p], pl);
            memcpy(t + pl, text + 5, len - 5);
            CHECK_RES(omc_meta_from_text(t, pl + len - 5, &back), OMC_ERR_MALFORMED);
        }
        CHECK_RES(omc_meta_from_text("omc1.", 5, &back), OMC_ERR_MALFORMED);     /* prefix only */
        CHECK_RES(omc_meta_from_text("om", 2, &back), OMC_ERR_MALFORMED);
        CHECK_RES(omc_meta_from_text(NULL, 10, &back), OMC_ERR_MALFORMED);
        CHECK_RES(omc_meta_from_text(text, len, NULL), OMC_ERR_INVALID_ARG);
    }
    {   /* wrong lengths: every shortening, and a few extra characters */
        size_t l;
        int accepted = 0;
        for (l = 0; l < len; l++) {
            char* e = (char*)dup_exact(text, l);
            if (omc_meta_from_text(e, l, &back) == OMC_OK) { accepted++; omc_meta_free(&back); }
            free(e);
        }
        CHECK_EQ(accepted, 0);
        memcpy(t, text, len);
        memcpy(t + len, "AAAA", 4);
        CHECK(omc_meta_from_text(t, len + 4, &back) != OMC_OK);
        CHECK(omc_meta_from_text(t, len + 1, &back) != OMC_OK);             /* n % 4 == 1 is never base64 */
    }
    {   /* oversize input is refused before anything is allocated for it */
        size_t big = 5 + omc__b64_encoded_len(OMC_META_MAX_SIZE) + 1;
        char* huge = (char*)malloc(big);
        REQUIRE(huge);
        memcpy(huge, "omc1.", 5);
        memset(huge + 5, 'A', big - 5);
        CHECK_RES(omc_meta_from_text(huge, big, &back), OMC_ERR_TOO_LARGE);
        CHECK(back.data == NULL);
        free(huge);
    }
    free(t);
    free(text);
    omc_meta_free(&m);
}

OMC_TEST_MAIN()
