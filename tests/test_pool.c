/* test_pool.c - pools (a region + the allocator), buffers and typed views, region hooks, memory
   locking and huge pages, the logger and host-memory hooks, and the small run-time queries
   (omc_has, omc_available, omc_version, omc_result_name/str).

   The memlock test needs an unprivileged process: we run as root, and CAP_IPC_LOCK ignores
   RLIMIT_MEMLOCK, so a forked child lowers the limit and drops to nobody (65534) first. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omc_test.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a logger that remembers what it was told ------------------------------------------------- */

typedef struct log_rec {
    int count[OMC_LOGITEM_COUNT];
    int total;
    omc_log_level last_level;
    char last[512];
} log_rec;

static void rec_log(omc_log_level level, omc_log_item item, const char* msg, const char* file, int line, void* user) {
    log_rec* r = (log_rec*)user;
    (void)file; (void)line;
    if ((int)item >= 0 && item < OMC_LOGITEM_COUNT) r->count[item]++;
    r->total++;
    r->last_level = level;
    snprintf(r->last, sizeof(r->last), "%s", msg ? msg : "");
}

static omc_hooks rec_hooks(log_rec* r, omc_log_level max) {
    omc_hooks h;
    memset(&h, 0, sizeof(h));
    memset(r, 0, sizeof(*r));
    h.log_fn = rec_log;
    h.max_level = max;
    h.user_data = r;
    return h;
}

static omc_pool* mk_pool(uint64_t size, uint64_t alignment) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    memset(&d, 0, sizeof(d));
    d.size = size;
    d.alignment = alignment;
    if (omc_pool_create(&d, &p) != OMC_OK) return NULL;
    return p;
}

/* ---- pools -------------------------------------------------------------------------------------- */

OMC_TEST(pool_heap_create_use_destroy) {
    omc_pool* p = mk_pool(1 << 20, 0);
    omc_buffer b;
    REQUIRE(p);
    CHECK(omc_pool_base(p) != NULL);
    CHECK_EQ(omc_pool_size(p), 1 << 20);
    CHECK(omc_pool_memory(p) == OMC_MEMORY_HOST);          /* DEFAULT resolves to HOST */
    CHECK(omc_pool_allocator(p) != NULL);
    CHECK_EQ(omc_alloc_alignment(omc_pool_allocator(p)), 4096);
    memset(omc_pool_base(p), 0xA5, 1 << 20);               /* every byte is ours to write */
    CHECK_OK(omc_pool_alloc_buffer(p, 1 << 20, &b));
    CHECK(b.data == omc_pool_base(p));
    CHECK_OK(omc_buffer_release(&b));
    omc_pool_destroy(p);
    omc_pool_destroy(NULL);
    CHECK(omc_pool_base(NULL) == NULL && omc_pool_size(NULL) == 0 && omc_pool_allocator(NULL) == NULL);
}

OMC_TEST(pool_create_checks_its_desc) {
    omc_pool_desc d;
    omc_pool* p = (omc_pool*)&d;
    log_rec lr;
    memset(&d, 0, sizeof(d));
    d.hooks = rec_hooks(&lr, OMC_LOG_DEFAULT);
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_INVALID_ARG);       /* size 0 */
    CHECK(p == NULL);
    CHECK(lr.count[OMC_LOGITEM_BAD_ARGUMENT] == 1);                 /* and it says so */
    d.size = 1 << 20; d.alignment = 3000;
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_INVALID_ARG);
    d.alignment = 0; d.size = 100;                                  /* smaller than one buffer */
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_INVALID_ARG);
    d.size = 1 << 20; d.memory = (omc_memory_kind)99;
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_INVALID_ARG);
    d.memory = OMC_MEMORY_CUDA;
#if !OMC__HAS_CUDA
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_UNAVAILABLE);       /* not compiled in: a clear no */
#endif
    d.memory = OMC_MEMORY_HOST; d.size = ~0ull;                     /* more than the address space */
    CHECK(omc_pool_create(&d, &p) != OMC_OK);
    CHECK(p == NULL);
    CHECK_RES(omc_pool_create(NULL, &p), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_pool_create(&d, NULL), OMC_ERR_INVALID_ARG);
}

/* Every buffer's address is a multiple of the pool alignment - including alignments above the
   page size, which mmap alone does not give (it only promises page alignment). */
OMC_TEST(pool_buffers_are_aligned) {
    static const uint64_t aligns[] = { 64, 4096, 64 << 10, 2 << 20 };
    size_t i;
    for (i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
        int k;
        /* several pools each, so a lucky mmap address does not hide a missing alignment step */
        for (k = 0; k < 4; k++) {
            omc_pool* p = mk_pool(aligns[i] * 8, aligns[i]);
            omc_buffer b[3];
            int j;
            REQUIRE(p);
            CHECK_EQ((uintptr_t)omc_pool_base(p) % aligns[i], 0);
            for (j = 0; j < 3; j++) {
                CHECK_OK(omc_pool_alloc_buffer(p, 1 + (uint64_t)j * 100, &b[j]));
                CHECK_EQ((uintptr_t)b[j].data % aligns[i], 0);
                CHECK(omc_pool_contains(p, b[j].data, b[j].size));
            }
            for (j = 0; j < 3; j++) CHECK_OK(omc_buffer_release(&b[j]));
            omc_pool_destroy(p);
        }
    }
}

OMC_TEST(pool_contains_is_exact_at_the_edges) {
    omc_pool* p = mk_pool(1 << 16, 0);
    uint8_t* base;
    REQUIRE(p);
    base = (uint8_t*)omc_pool_base(p);
    CHECK(omc_pool_contains(p, base, 1 << 16));
    CHECK(omc_pool_contains(p, base + 100, 10));
    CHECK(omc_pool_contains(p, base + (1 << 16) - 1, 1));
    CHECK(omc_pool_contains(p, base + (1 << 16), 0));          /* the empty range at the end */
    CHECK(!omc_pool_contains(p, base + (1 << 16) - 1, 2));
    CHECK(!omc_pool_contains(p, base + (1 << 16), 1));
    CHECK(!omc_pool_contains(p, base - 1, 1));
    CHECK(!omc_pool_contains(p, base + 1, ~0ull));             /* len that would wrap */
    CHECK(!omc_pool_contains(p, NULL, 0));
    CHECK(!omc_pool_contains(NULL, base, 1));
    omc_pool_destroy(p);
}

/* ---- buffers ------------------------------------------------------------------------------------ */

OMC_TEST(buffer_pointer_view_and_copy_out) {
    omc_pool* p = mk_pool(1 << 20, 64);
    omc_buffer b1, b2;
    uint8_t out[300];
    REQUIRE(p);
    CHECK_OK(omc_pool_alloc_buffer(p, 1000, &b1));
    CHECK_OK(omc_pool_alloc_buffer(p, 300, &b2));
    CHECK(b1.pool == p && b2.pool == p);
    CHECK_EQ(b1.size, 1000);
    CHECK(b1.data == (uint8_t*)omc_pool_base(p) + b1.range.offset);
    CHECK(b2.data == (uint8_t*)omc_pool_base(p) + b2.range.offset);
    CHECK(b2.range.offset >= b1.range.offset + 1000);        /* no overlap */
    omc_test_fill(b1.data, 1000, 1);
    omc_test_fill(b2.data, 300, 2);
    CHECK_OK(omc_buffer_copy_out(&b2, 0, out, 300));
    CHECK(omc_test_verify(out, 300, 2));
    CHECK_OK(omc_buffer_copy_out(&b1, 700, out, 300));         /* the last 300 bytes */
    CHECK(memcmp(out, (uint8_t*)b1.data + 700, 300) == 0);
    /* bounds: never a byte past the buffer, whatever the arithmetic */
    CHECK_RES(omc_buffer_copy_out(&b1, 701, out, 300), OMC_ERR_TOO_LARGE);
    CHECK_RES(omc_buffer_copy_out(&b1, 1001, out, 0), OMC_ERR_TOO_LARGE);
    CHECK_RES(omc_buffer_copy_out(&b1, 1, out, ~0ull), OMC_ERR_TOO_LARGE);
    CHECK_RES(omc_buffer_copy_out(&b1, ~0ull, out, 2), OMC_ERR_TOO_LARGE);
    CHECK_OK(omc_buffer_copy_out(&b1, 1000, out, 0));          /* empty at the end: fine */
    CHECK_RES(omc_buffer_copy_out(&b1, 0, NULL, 1), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_buffer_copy_out(NULL, 0, out, 1), OMC_ERR_INVALID_ARG);
    CHECK_OK(omc_buffer_release(&b1));
    CHECK_OK(omc_buffer_release(&b2));
    CHECK_RES(omc_pool_alloc_buffer(p, 0, &b1), OMC_ERR_INVALID_ARG);
    CHECK(b1.data == NULL);
    CHECK_RES(omc_pool_alloc_buffer(p, (1 << 20) + 1, &b1), OMC_ERR_TOO_LARGE);
    CHECK_RES(omc_pool_alloc_buffer(NULL, 1, &b1), OMC_ERR_INVALID_ARG);
    omc_pool_destroy(p);
}

OMC_TEST(buffer_typed_views_are_checked) {
    omc_pool* p = mk_pool(1 << 16, 64);
    omc_buffer b;
    omc_tensor_view v;
    int64_t s44[2] = {4, 4}, s54[2] = {5, 4}, s24[2] = {2, 4}, s15[1] = {15}, neg[2] = {4, -1};
    int64_t ovf[2] = {INT64_MAX, 4}, zero[3] = {3, 0, 7}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    REQUIRE(p);
    CHECK_OK(omc_pool_alloc_buffer(p, 64, &b));
    {   /* vLLM-Omni's as_tensor: f32 (4, 4) over 64 bytes, values as written */
        float* f = (float*)b.data;
        int i;
        for (i = 0; i < 16; i++) f[i] = (float)i;
        CHECK_OK(omc_buffer_view(&b, 0, OMC_DTYPE_F32, 2, s44, 1, &v));
        CHECK(v.data == b.data && v.dtype == OMC_DTYPE_F32 && v.ndim == 2);
        CHECK(v.shape[0] == 4 && v.shape[1] == 4 && v.nbytes == 64);
        CHECK(((float*)v.data)[15] == 15.0f);
    }
    CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_F32, 2, s54, 0, &v), OMC_ERR_TOO_LARGE);    /* 80 > 64 */
    CHECK(v.data == NULL);                                                                   /* cleared */
    CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_F32, 2, s24, 1, &v), OMC_ERR_TYPE);         /* not exact */
    CHECK_OK(omc_buffer_view(&b, 0, OMC_DTYPE_F32, 2, s24, 0, &v));                        /* a prefix is fine */
    CHECK_OK(omc_buffer_view(&b, 32, OMC_DTYPE_F32, 2, s24, 1, &v));                       /* the exact tail */
    CHECK(v.data == (uint8_t*)b.data + 32);
    CHECK_OK(omc_buffer_view(&b, 4, OMC_DTYPE_F32, 1, s15, 1, &v));
    CHECK_RES(omc_buffer_view(&b, 2, OMC_DTYPE_F32, 1, s15, 0, &v), OMC_ERR_ALIGNMENT);    /* 2 % 4 */
    CHECK_RES(omc_buffer_view(&b, 4, OMC_DTYPE_F64, 1, s15 /* 15*8 */, 0, &v), OMC_ERR_TOO_LARGE);
    {
        int64_t one[1] = {1};
        CHECK_RES(omc_buffer_view(&b, 4, OMC_DTYPE_F64, 1, one, 0, &v), OMC_ERR_ALIGNMENT); /* 4 % 8 */
        CHECK_OK(omc_buffer_view(&b, 1, OMC_DTYPE_U8, 1, one, 0, &v));                     /* bytes: any offset */
        CHECK_RES(omc_buffer_view(&b, 1, OMC_DTYPE_BF16, 1, one, 0, &v), OMC_ERR_ALIGNMENT);
    }
    CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_F32, 2, neg, 0, &v), OMC_ERR_INVALID_ARG);  /* no -1 dims */
    CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_F32, 2, ovf, 0, &v), OMC_ERR_TOO_LARGE);    /* overflows u64 */
    CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_U8, 9, s9, 0, &v), OMC_ERR_INVALID_ARG);    /* > OMC_MAX_DIMS */
    CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_INVALID, 2, s44, 0, &v), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_buffer_view(&b, 0, (omc_dtype)200, 2, s44, 0, &v), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_F32, 2, NULL, 0, &v), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_buffer_view(&b, 65, OMC_DTYPE_U8, 0, NULL, 0, &v), OMC_ERR_TOO_LARGE);  /* offset past end */
    CHECK_RES(omc_buffer_view(&b, ~0ull, OMC_DTYPE_U8, 0, NULL, 0, &v), OMC_ERR_TOO_LARGE);
    CHECK_OK(omc_buffer_view(&b, 60, OMC_DTYPE_I32, 0, NULL, 1, &v));                      /* a scalar */
    CHECK_EQ(v.nbytes, 4);
    CHECK_OK(omc_buffer_view(&b, 64, OMC_DTYPE_F32, 3, zero, 1, &v));                      /* empty tensor at the end */
    CHECK_EQ(v.nbytes, 0);
    {
        omc_buffer empty;
        memset(&empty, 0, sizeof(empty));
        CHECK_RES(omc_buffer_view(&empty, 0, OMC_DTYPE_U8, 0, NULL, 0, &v), OMC_ERR_INVALID_ARG);
        CHECK_RES(omc_buffer_view(&b, 0, OMC_DTYPE_U8, 0, NULL, 0, NULL), OMC_ERR_INVALID_ARG);
    }
    CHECK_OK(omc_buffer_release(&b));
    omc_pool_destroy(p);
}

OMC_TEST(buffer_dtypes_and_tensor_sizes) {
    static const struct { omc_dtype d; size_t size; const char* name; } t[] = {
        {OMC_DTYPE_U8, 1, "u8"}, {OMC_DTYPE_I8, 1, "i8"}, {OMC_DTYPE_U16, 2, "u16"}, {OMC_DTYPE_I16, 2, "i16"},
        {OMC_DTYPE_U32, 4, "u32"}, {OMC_DTYPE_I32, 4, "i32"}, {OMC_DTYPE_U64, 8, "u64"}, {OMC_DTYPE_I64, 8, "i64"},
        {OMC_DTYPE_F16, 2, "f16"}, {OMC_DTYPE_BF16, 2, "bf16"}, {OMC_DTYPE_F32, 4, "f32"}, {OMC_DTYPE_F64, 8, "f64"},
        {OMC_DTYPE_BOOL, 1, "bool"} };
    size_t i;
    uint64_t n;
    int64_t shape[3] = {2, 3, 5};
    CHECK_EQ(sizeof(t) / sizeof(t[0]), OMC_DTYPE_COUNT - 1);   /* the table covers every dtype */
    for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        CHECK_EQ(omc_dtype_size(t[i].d), t[i].size);
        CHECK(strcmp(omc_dtype_name(t[i].d), t[i].name) == 0);
        CHECK_OK(omc_tensor_nbytes(t[i].d, 3, shape, &n));
        CHECK_EQ(n, 30 * t[i].size);
    }
    CHECK_EQ(omc_dtype_size(OMC_DTYPE_INVALID), 0);
    CHECK_EQ(omc_dtype_size(OMC_DTYPE_COUNT), 0);
    CHECK_EQ(omc_dtype_size((omc_dtype)-1), 0);
    CHECK(strcmp(omc_dtype_name((omc_dtype)77), "invalid") == 0);
    CHECK_RES(omc_tensor_nbytes(OMC_DTYPE_U8, 0, NULL, &n), OMC_OK);
    CHECK_EQ(n, 1);
    CHECK_RES(omc_tensor_nbytes(OMC_DTYPE_U8, 1, shape, NULL), OMC_ERR_INVALID_ARG);
    {
        int64_t big[2] = {(int64_t)1 << 62, 4};             /* 2^64 bytes: one too many */
        CHECK_RES(omc_tensor_nbytes(OMC_DTYPE_U8, 2, big, &n), OMC_ERR_TOO_LARGE);
        CHECK_EQ(n, 0);
        big[1] = 3;
        CHECK_OK(omc_tensor_nbytes(OMC_DTYPE_U8, 2, big, &n));
    }
}

OMC_TEST(buffer_release_is_idempotent_and_copies_are_caught) {
    omc_pool* p = mk_pool(1 << 16, 64);
    omc_buffer b, copy, again;
    REQUIRE(p);
    CHECK_OK(omc_pool_alloc_buffer(p, 100, &b));
    copy = b;
    CHECK_OK(omc_buffer_release(&b));
    CHECK(b.data == NULL && b.pool == NULL && b.size == 0);    /* the handle is zeroed ... */
    CHECK_OK(omc_buffer_release(&b));                          /* ... so releasing it again is a no-op */
    {   /* a copy of the released handle is not an empty handle: that is a double free */
        omc_buffer c2 = copy;
        CHECK_RES(omc_buffer_release(&c2), OMC_ERR_DOUBLE_FREE);
    }
    CHECK_OK(omc_pool_alloc_buffer(p, 100, &again));           /* same place, new generation */
    CHECK(again.data == copy.data);
    CHECK_RES(omc_buffer_release(&copy), OMC_ERR_STALE);
    CHECK_OK(omc_alloc_check(omc_pool_allocator(p), again.range)); /* the new owner is untouched */
    CHECK_OK(omc_buffer_release(&again));
    CHECK_RES(omc_buffer_release(NULL), OMC_ERR_INVALID_ARG);
    omc_pool_destroy(p);
}

static int release_calls;
static omc_result fake_release(omc_buffer* b) {
    release_calls++;
    return b->cookie[0] == 42 ? OMC_OK : OMC_ERR_INTERNAL;
}

OMC_TEST(buffer_release_fn_is_called_once) {
    omc_buffer b;
    char mem[16];
    memset(&b, 0, sizeof(b));
    b.data = mem; b.size = sizeof(mem);
    b.release_fn = fake_release;
    b.cookie[0] = 42;
    release_calls = 0;
    CHECK_OK(omc_buffer_release(&b));
    CHECK_OK(omc_buffer_release(&b));
    CHECK_EQ(release_calls, 1);
}

OMC_TEST(pool_alloc_buffer_wait_times_out_and_wakes) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    omc_buffer b, c;
    memset(&d, 0, sizeof(d));
    d.size = 1 << 16;
    d.thread_safe = 1;
    CHECK_OK(omc_pool_create(&d, &p));
    REQUIRE(p);
    CHECK_OK(omc_pool_alloc_buffer(p, 1 << 16, &b));
    CHECK_RES(omc_pool_alloc_buffer_wait(p, 1, omc_deadline_after_ms(50), &c), OMC_ERR_TIMEOUT);
    CHECK(c.data == NULL);
    CHECK_OK(omc_buffer_release(&b));
    CHECK_OK(omc_pool_alloc_buffer_wait(p, 1, omc_deadline_after_ms(50), &c));
    CHECK_OK(omc_buffer_release(&c));
    omc_pool_destroy(p);
}

/* ---- external memory and region hooks ---------------------------------------------------------- */

OMC_TEST(pool_over_external_memory) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    omc_buffer b;
    void* mem = NULL;
    REQUIRE(posix_memalign(&mem, 4096, 1 << 16) == 0);
    memset(&d, 0, sizeof(d));
    d.size = 1 << 16;
    d.memory = OMC_MEMORY_EXTERNAL;
    d.external_base = mem;
    CHECK_OK(omc_pool_create(&d, &p));
    REQUIRE(p);
    CHECK(omc_pool_base(p) == mem);
    CHECK(omc_pool_memory(p) == OMC_MEMORY_EXTERNAL);
    CHECK_OK(omc_pool_alloc_buffer(p, 5000, &b));
    CHECK(omc_pool_contains(p, b.data, b.size));
    memset(b.data, 1, 5000);
    CHECK_OK(omc_buffer_release(&b));
    omc_pool_destroy(p);                                 /* must not free or unmap our memory ... */
    memset(mem, 2, 1 << 16);                             /* ... (ASan would object here) */
    d.external_base = (uint8_t*)mem + 64;                /* 64 is not 4096-aligned */
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_ALIGNMENT);
    CHECK(p == NULL);
    d.alignment = 64;                                    /* ... but it is 64-aligned */
    CHECK_OK(omc_pool_create(&d, &p));
    omc_pool_destroy(p);
    d.external_base = NULL;
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_INVALID_ARG);
    free(mem);
}

typedef struct hook_rec {
    int attached, detached;
    omc_pool* pool;
    void* base;
    uint64_t size;
    omc_result fail_with;
} hook_rec;

static omc_result rec_attach(omc_pool* pool, void* base, uint64_t size, void* user) {
    hook_rec* h = (hook_rec*)user;
    h->attached++;
    h->pool = pool; h->base = base; h->size = size;
    memset(base, 0x11, 64);                 /* the region is usable when attach runs */
    return h->fail_with;
}

static void rec_detach(omc_pool* pool, void* base, uint64_t size, void* user) {
    hook_rec* h = (hook_rec*)user;
    h->detached++;
    if (pool != h->pool || base != h->base || size != h->size) h->detached += 100;   /* visible mismatch */
}

OMC_TEST(pool_region_hooks_attach_and_detach_once) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    hook_rec h;
    int ext;
    for (ext = 0; ext < 2; ext++) {
        void* mem = NULL;
        memset(&d, 0, sizeof(d));
        memset(&h, 0, sizeof(h));
        d.size = 1 << 20;
        if (ext) {
            REQUIRE(posix_memalign(&mem, 4096, 1 << 20) == 0);
            d.memory = OMC_MEMORY_EXTERNAL;
            d.external_base = mem;
        }
        d.region.attach = rec_attach;
        d.region.detach = rec_detach;
        d.region.user_data = &h;
        CHECK_OK(omc_pool_create(&d, &p));
        REQUIRE(p);
        CHECK_EQ(h.attached, 1);
        CHECK_EQ(h.detached, 0);
        CHECK(h.pool == p && h.base == omc_pool_base(p) && h.size == omc_pool_size(p));
        omc_pool_destroy(p);
        CHECK_EQ(h.attached, 1);
        CHECK_EQ(h.detached, 1);
        free(mem);
    }
}

OMC_TEST(pool_failing_attach_fails_creation_cleanly) {
    omc_pool_desc d;
    omc_pool* p = (omc_pool*)&d;
    hook_rec h;
    log_rec lr;
    memset(&d, 0, sizeof(d));
    memset(&h, 0, sizeof(h));
    h.fail_with = OMC_ERR_RDMA_ACCESS;
    d.size = 4 << 20;
    d.region.attach = rec_attach;
    d.region.detach = rec_detach;
    d.region.user_data = &h;
    d.hooks = rec_hooks(&lr, OMC_LOG_DEFAULT);
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_RDMA_ACCESS);   /* the hook's own code comes back */
    CHECK(p == NULL);
    CHECK_EQ(h.attached, 1);
    CHECK_EQ(h.detached, 0);                                   /* never attached: nothing to undo */
    CHECK_EQ(lr.count[OMC_LOGITEM_POOL_HOOK_FAILED], 1);
    /* the mapping and the bookkeeping are gone: LeakSanitizer checks the heap at exit, and the
       region must not stay mapped (mincore fails with ENOMEM on an unmapped range) */
    {
        unsigned char vec[1];
        CHECK(mincore(h.base, 4096, vec) != 0 && errno == ENOMEM);
    }
}

/* ---- memory locking and huge pages ------------------------------------------------------------- */

/* ASan and TSan replace mlock() with a no-op that succeeds (their shadow memory must never be
   locked), so under them a lock can neither fail nor make pages resident: those checks run in the
   plain build only. */
static int mlock_is_real(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return 0;
#else
    return 1;
#endif
#else
    return 1;
#endif
}

/* In a child: lower RLIMIT_MEMLOCK to 64 KiB, become nobody (no CAP_IPC_LOCK any more), then ask
   for a 4 MiB locked pool. Exit status: 0 = MEMLOCK with a log naming the fix, else a code. */
static int memlock_child(void) {
    struct rlimit rl;
    omc_pool_desc d;
    omc_pool* p = NULL;
    log_rec lr;
    omc_result r;
    rl.rlim_cur = rl.rlim_max = 64 << 10;
    if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) return 10;
    if (setgid(65534) != 0 || setuid(65534) != 0) return 11;
    if (getuid() != 65534) return 12;
    memset(&d, 0, sizeof(d));
    d.size = 4 << 20;
    d.lock_memory = 1;
    d.hooks = rec_hooks(&lr, OMC_LOG_DEFAULT);
    r = omc_pool_create(&d, &p);
    if (r == OMC_OK) { omc_pool_destroy(p); return 20; }
    if (r != OMC_ERR_MEMLOCK) return 21;
    if (p != NULL) return 22;
    if (lr.count[OMC_LOGITEM_POOL_MEMLOCK] != 1 || lr.last_level != OMC_LOG_ERROR) return 23;
    if (!strstr(lr.last, "ulimit -l") || !strstr(lr.last, "RLIMIT_MEMLOCK") || !strstr(lr.last, "65536")) return 24;
    return 0;
}

OMC_TEST(pool_mlock_with_low_limit_fails_clearly) {
    pid_t pid;
    int status = 0;
    if (!mlock_is_real()) { printf("  SKIP pool_mlock_with_low_limit_fails_clearly: the sanitizer makes mlock() a no-op\n"); return; }
    if (geteuid() != 0) {
        /* not root: the limit already applies to us, no child needed */
        printf("  (not root: testing against the current RLIMIT_MEMLOCK without dropping privileges)\n");
    }
    fflush(stdout);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(memlock_child());
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0) fprintf(stderr, "  memlock child failed with code %d\n", WEXITSTATUS(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

OMC_TEST(pool_mlock_as_root_succeeds) {
    /* the other side: with CAP_IPC_LOCK (root) or a high enough limit, a locked pool works */
    omc_pool_desc d;
    omc_pool* p = NULL;
    struct rlimit rl;
    int privileged = geteuid() == 0 ||
                     (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (8u << 20)));
    if (!privileged) { printf("  SKIP pool_mlock_as_root_succeeds: neither root nor an 8 MiB memlock limit\n"); return; }
    memset(&d, 0, sizeof(d));
    d.size = 4 << 20;
    d.lock_memory = 1;
    CHECK_OK(omc_pool_create(&d, &p));
    REQUIRE(p);
    if (mlock_is_real()) {   /* locked means resident: every page is in memory now */
        unsigned char* vec = (unsigned char*)malloc(1024);
        size_t i, pages = (4u << 20) / (size_t)sysconf(_SC_PAGESIZE), in = 0;
        REQUIRE(vec);
        CHECK(mincore(omc_pool_base(p), 4 << 20, vec) == 0);
        for (i = 0; i < pages && i < 1024; i++) in += vec[i] & 1;
        CHECK_EQ(in, pages);
        free(vec);
    }
    omc_pool_destroy(p);
}

OMC_TEST(pool_prefault_makes_pages_resident) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    unsigned char vec[256];
    size_t i, in = 0;
    memset(&d, 0, sizeof(d));
    d.size = 256 * 4096;
    d.prefault = 1;
    CHECK_OK(omc_pool_create(&d, &p));
    REQUIRE(p);
    REQUIRE(sysconf(_SC_PAGESIZE) == 4096);
    CHECK(mincore(omc_pool_base(p), 256 * 4096, vec) == 0);
    for (i = 0; i < 256; i++) in += vec[i] & 1;
    CHECK_EQ(in, 256);
    omc_pool_destroy(p);
}

static long free_huge_pages(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    char line[256];
    long n = -1;
    if (!f) return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "HugePages_Free: %ld", &n) == 1) break;
    fclose(f);
    return n;
}

OMC_TEST(pool_hugepages_without_reserved_pages_is_unavailable) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    log_rec lr;
    long avail = free_huge_pages();
    memset(&d, 0, sizeof(d));
    d.size = 4 << 20;
    d.hugepages = 1;
    d.hooks = rec_hooks(&lr, OMC_LOG_DEFAULT);
    if (avail != 0) {
        printf("  SKIP pool_hugepages_without_reserved_pages_is_unavailable: this machine has %ld free huge pages "
               "(the error path needs none; /proc/sys/vm/nr_hugepages)\n", avail);
        if (avail >= 2) {   /* then at least the success path must work */
            CHECK_OK(omc_pool_create(&d, &p));
            omc_pool_destroy(p);
        }
        return;
    }
    CHECK_RES(omc_pool_create(&d, &p), OMC_ERR_UNAVAILABLE);
    CHECK(p == NULL);
    CHECK_EQ(lr.count[OMC_LOGITEM_POOL_HUGEPAGES], 1);
    CHECK(strstr(lr.last, "nr_hugepages") != NULL);             /* the log says how to fix it */
}

/* ---- logging and host-memory hooks ------------------------------------------------------------- */

OMC_TEST(logger_receives_items_by_level) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    omc_alloc* a;
    omc_range r, x;
    log_rec lr;
    memset(&d, 0, sizeof(d));
    d.size = 1 << 16;
    d.hooks = rec_hooks(&lr, OMC_LOG_DEFAULT);                  /* default: errors and warnings */
    CHECK_OK(omc_pool_create(&d, &p));
    REQUIRE(p);
    a = omc_pool_allocator(p);
    CHECK_RES(omc_alloc_alloc(a, 1 << 20, &x), OMC_ERR_TOO_LARGE);
    CHECK_EQ(lr.count[OMC_LOGITEM_ALLOC_FULL], 1);              /* a warning: delivered */
    CHECK(lr.last_level == OMC_LOG_WARN);
    CHECK(strstr(lr.last, "1048576") != NULL);
    CHECK_OK(omc_alloc_alloc(a, 1 << 16, &r));
    CHECK_RES(omc_alloc_alloc(a, 1, &x), OMC_ERR_POOL_FULL);
    CHECK_EQ(lr.count[OMC_LOGITEM_ALLOC_FULL], 1);              /* a debug note: filtered out */
    CHECK_OK(omc_alloc_free(a, r));
    CHECK_RES(omc_alloc_free(a, r), OMC_ERR_DOUBLE_FREE);
    CHECK_EQ(lr.count[OMC_LOGITEM_ALLOC_BAD_FREE], 1);
    CHECK(strstr(lr.last, omc_result_str(OMC_ERR_DOUBLE_FREE)) != NULL);
    omc_pool_destroy(p);
    d.hooks = rec_hooks(&lr, OMC_LOG_DEBUG);                    /* verbose: the debug note arrives */
    CHECK_OK(omc_pool_create(&d, &p));
    REQUIRE(p);
    a = omc_pool_allocator(p);
    CHECK_OK(omc_alloc_alloc(a, 1 << 16, &r));
    CHECK_RES(omc_alloc_alloc(a, 1, &x), OMC_ERR_POOL_FULL);
    CHECK_EQ(lr.count[OMC_LOGITEM_ALLOC_FULL], 1);
    CHECK(lr.last_level == OMC_LOG_DEBUG);
    CHECK_OK(omc_alloc_free(a, r));
    omc_pool_destroy(p);
}

OMC_TEST(default_hooks_apply_to_zero_descs) {
    omc_hooks h;
    log_rec lr;
    omc_alloc_desc ad;
    omc_alloc* a = NULL;
    omc_range x;
    h = rec_hooks(&lr, OMC_LOG_DEFAULT);
    omc_set_default_hooks(&h);
    memset(&ad, 0, sizeof(ad));
    ad.capacity = 4096;
    CHECK_OK(omc_alloc_create(&ad, &a));                        /* zero hooks: takes the default */
    REQUIRE(a);
    CHECK_RES(omc_alloc_alloc(a, 8192, &x), OMC_ERR_TOO_LARGE);
    CHECK_EQ(lr.count[OMC_LOGITEM_ALLOC_FULL], 1);
    omc_alloc_destroy(a);
    omc_set_default_hooks(NULL);                                /* back to silence */
    CHECK_OK(omc_alloc_create(&ad, &a));
    CHECK_RES(omc_alloc_alloc(a, 8192, &x), OMC_ERR_TOO_LARGE);
    CHECK_EQ(lr.count[OMC_LOGITEM_ALLOC_FULL], 1);
    omc_alloc_destroy(a);
}

/* The library's own bookkeeping goes through alloc_fn/free_fn when set: every byte it took comes
   back by destroy (counted here; ASan checks the same for malloc/free). */
typedef struct mem_rec { long allocs, frees; } mem_rec;
static void* rec_alloc(size_t n, void* u) { ((mem_rec*)u)->allocs++; return malloc(n); }
static void rec_free(void* p, void* u) { ((mem_rec*)u)->frees++; free(p); }

OMC_TEST(host_memory_hooks_are_balanced) {
    omc_pool_desc d;
    omc_pool* p = NULL;
    mem_rec m = {0, 0};
    omc_buffer b[200];
    int i;
    memset(&d, 0, sizeof(d));
    d.size = 1 << 20;
    d.alignment = 64;
    d.hooks.alloc_fn = rec_alloc;
    d.hooks.free_fn = rec_free;
    d.hooks.user_data = &m;
    CHECK_OK(omc_pool_create(&d, &p));
    REQUIRE(p);
    for (i = 0; i < 200; i++) CHECK_OK(omc_pool_alloc_buffer(p, 64, &b[i]));   /* grows the records */
    for (i = 0; i < 200; i++) CHECK_OK(omc_buffer_release(&b[i]));
    CHECK(m.allocs >= 3);                                       /* pool, allocator, records (grown) */
    omc_pool_destroy(p);
    CHECK_EQ(m.allocs, m.frees);
}

/* ---- run-time queries -------------------------------------------------------------------------- */

OMC_TEST(features_and_version) {
    char why[256];
    CHECK_EQ(omc_has(OMC_FEATURE_LOCAL), 1);
    CHECK_EQ(omc_has(OMC_FEATURE_SHM), OMC__HAS_SHM);
    CHECK_EQ(omc_has(OMC_FEATURE_ZMQ), OMC__HAS_ZMQ);
    CHECK_EQ(omc_has(OMC_FEATURE_RDMA), OMC__HAS_RDMA);
    CHECK_EQ(omc_has(OMC_FEATURE_CUDA), OMC__HAS_CUDA);
    CHECK_EQ(omc_has(OMC_FEATURE_COUNT), 0);
    CHECK_EQ(omc_has((omc_feature)-1), 0);
    CHECK_OK(omc_available(OMC_FEATURE_LOCAL, why, sizeof(why)));
    CHECK(why[0] == '\0');
#if !OMC__HAS_CUDA
    CHECK_RES(omc_available(OMC_FEATURE_CUDA, why, sizeof(why)), OMC_ERR_UNAVAILABLE);
    CHECK(strlen(why) > 10);                                    /* a reason, not just a no */
    CHECK_RES(omc_available(OMC_FEATURE_CUDA, NULL, 0), OMC_ERR_UNAVAILABLE);
#endif
    {   /* whatever the machine, the answer is OK or UNAVAILABLE-with-a-reason */
        int f;
        for (f = 0; f < OMC_FEATURE_COUNT; f++) {
            omc_result r = omc_available((omc_feature)f, why, sizeof(why));
            CHECK(r == OMC_OK || (r == OMC_ERR_UNAVAILABLE && why[0] != '\0'));
            if (!omc_has((omc_feature)f)) CHECK(r == OMC_ERR_UNAVAILABLE);
        }
        /* (volatile: a constant 4 makes gcc's -Wformat-truncation flag the deliberate truncation
           inside the inlined snprintf) */
        volatile size_t small = 4;
        CHECK_RES(omc_available(OMC_FEATURE_COUNT, why, small), OMC_ERR_UNAVAILABLE);
        CHECK(strlen(why) == 3);                                /* truncated, terminated */
    }
    /* this program has no SHM or RDMA companion: the core does not guess, it says so */
    CHECK_RES(omc_available(OMC_FEATURE_SHM, why, sizeof(why)), OMC_ERR_UNAVAILABLE);
    CHECK(strstr(why, "omniconn_shm.h") != NULL);
    CHECK_RES(omc_available(OMC_FEATURE_RDMA, why, sizeof(why)), OMC_ERR_UNAVAILABLE);
    CHECK(strstr(why, "omniconn_rdma.h") != NULL || !OMC__HAS_RDMA);
    CHECK_EQ(omc_version(), OMNICONN_VERSION);
    CHECK_EQ(OMNICONN_VERSION, (OMNICONN_VERSION_MAJOR << 16) | (OMNICONN_VERSION_MINOR << 8) | OMNICONN_VERSION_PATCH);
    {
        char v[32];
        snprintf(v, sizeof(v), "%d.%d.%d", OMNICONN_VERSION_MAJOR, OMNICONN_VERSION_MINOR, OMNICONN_VERSION_PATCH);
        CHECK(strcmp(omc_version_string(), v) == 0);
        CHECK(strcmp(OMNICONN_VERSION_STRING, v) == 0);
    }
}

OMC_TEST(result_codes_have_distinct_names_and_texts) {
    static const struct { omc_result r; int value; const char* name; } codes[] = {
#define OMC__X(name, value, text) { name, value, #name },
        OMC__RESULT_LIST(OMC__X)
#undef OMC__X
    };
    size_t n = sizeof(codes) / sizeof(codes[0]), i, j;
    CHECK(n >= 30);
    CHECK(strcmp(omc_result_name(OMC_OK), "OMC_OK") == 0);
    CHECK(strcmp(omc_result_str(OMC_ERR_TIMEOUT), "deadline passed") == 0);
    for (i = 0; i < n; i++) {
        CHECK((int)codes[i].r == codes[i].value);
        CHECK(codes[i].value <= 0);
        CHECK(strcmp(omc_result_name(codes[i].r), codes[i].name) == 0);
        CHECK(omc_result_str(codes[i].r)[0] != '\0');
        CHECK(strcmp(omc_result_str(codes[i].r), "unknown result code") != 0);
        for (j = 0; j < i; j++) {
            CHECK(codes[i].value != codes[j].value);
            CHECK(strcmp(omc_result_name(codes[i].r), omc_result_name(codes[j].r)) != 0);
            CHECK(strcmp(omc_result_str(codes[i].r), omc_result_str(codes[j].r)) != 0);
        }
    }
    CHECK(strcmp(omc_result_name((omc_result)-999), "OMC_ERR_UNKNOWN") == 0);
    CHECK(strcmp(omc_result_str((omc_result)-999), "unknown result code") == 0);
    CHECK(strcmp(omc_result_name((omc_result)1), "OMC_ERR_UNKNOWN") == 0);
    /* log items too: one text each, distinct, and a safe answer out of range */
    for (i = 0; i < OMC_LOGITEM_COUNT; i++) {
        CHECK(omc_log_item_str((omc_log_item)i)[0] != '\0');
        for (j = 0; j < i; j++) CHECK(strcmp(omc_log_item_str((omc_log_item)i), omc_log_item_str((omc_log_item)j)) != 0);
    }
    CHECK(strcmp(omc_log_item_str(OMC_LOGITEM_COUNT), "unknown log item") == 0);
    CHECK(strcmp(omc_log_item_str((omc_log_item)-1), "unknown log item") == 0);
}

OMC_TEST(deadlines_saturate) {
    omc_time_ns now = omc_now_ns(), d;
    CHECK(now > 0);
    CHECK(omc_deadline_after_ms(-1) <= omc_now_ns());                 /* negative: already passed */
    CHECK(omc_deadline_after_ms(INT64_MAX) == OMC_WAIT_FOREVER);      /* no overflow into the past */
    d = omc_deadline_after_ms(1000);
    CHECK(d >= now + 1000000000LL && d < now + 60000000000LL);
    CHECK(omc_deadline_after_ms(0) >= now);
}

OMC_TEST_MAIN()
