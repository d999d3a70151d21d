/* test_alloc.c - the registered-memory allocator (omc_alloc_*).

   1. vLLM-Omni's BufferAllocator tests, one for one: reuse at offset 0,
      alignment, exhaustion and recovery, 10 threads x 100 alloc/free, double free (exact and after
      a merge), partial overlap, out-of-order frees merging, two 64 B holes vs 128 B.
   2. What vLLM-Omni's allocator cannot do: stale handles, foreign frees, bounded waits, statistics,
      the TLSF second-chance search, validate() noticing damage.
   3. A randomized differential test against a model that is too simple to be wrong: one owner
      entry per granule. >= 10^6 operations in the plain build; sanitizer builds run 1/4 of them
      (they are several times slower, and what they look for - bad memory accesses, races - shows
      up long before 10^6 steps).
      OMC_DIFF_OPS=<n> sets the count per configuration, OMC_DIFF_SEED=<n> the seed.

   Error semantics under test (docs/allocator.md): a range that starts in free space is a
   DOUBLE_FREE when it lies inside that free block (a free that was never handed out looks the same),
   OVERLAP when it runs past it; a range that starts inside a live block but not at its start is
   INVALID_FREE (OVERLAP if it runs past that block); a live block's offset with the wrong generation
   is STALE, with the wrong size OVERLAP; anything outside [0, capacity) is INVALID_FREE. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omc_test.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

/* ---- helpers --------------------------------------------------------------------------------- */

static omc_alloc* mk(uint64_t capacity, uint64_t alignment, int thread_safe) {
    omc_alloc_desc d;
    omc_alloc* a = NULL;
    memset(&d, 0, sizeof(d));
    d.capacity = capacity;
    d.alignment = alignment;
    d.thread_safe = thread_safe;
    if (omc_alloc_create(&d, &a) != OMC_OK) return NULL;
    return a;
}

/* alloc that must succeed; returns the range (offset ~0 on failure, which the checks then catch) */
static omc_range take(omc_alloc* a, uint64_t size) {
    omc_range r;
    omc_result res = omc_alloc_alloc(a, size, &r);
    if (res != OMC_OK) {
        fprintf(stderr, "  alloc of %llu failed: %s\n", (unsigned long long)size, omc_result_name(res));
        OMC_TEST_FAIL();
        r.offset = ~0ull;
    }
    return r;
}

static omc_range forged(uint64_t offset, uint64_t size) {
    omc_range r;
    memset(&r, 0, sizeof(r));
    r.offset = offset;
    r.size = size;
    r.generation = 12345;
    r.slot = OMC__NIL;
    return r;
}

static int stats_equal(const omc_alloc_stats* x, const omc_alloc_stats* y) {
    return x->capacity == y->capacity && x->bytes_in_use == y->bytes_in_use && x->bytes_requested == y->bytes_requested &&
           x->live_allocations == y->live_allocations && x->largest_free == y->largest_free &&
           x->free_blocks == y->free_blocks && x->fragmentation == y->fragmentation;
}

/* A rejected free must leave the allocator exactly as it was: same stats, still valid, and the
   same answer again (nothing half-done that a second attempt would see). */
static void check_rejected(omc_alloc* a, omc_range r, omc_result expect) {
    omc_alloc_stats before, after;
    omc_alloc_get_stats(a, &before);
    CHECK_RES(omc_alloc_check(a, r), expect);
    CHECK_RES(omc_alloc_free(a, r), expect);
    CHECK_RES(omc_alloc_free(a, r), expect);
    omc_alloc_get_stats(a, &after);
    CHECK(stats_equal(&before, &after));
    CHECK_OK(omc_alloc_validate(a));
}

static int sanitized(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return 1;
#else
    return 0;
#endif
#else
    return 0;
#endif
}

/* ---- 1. vLLM-Omni's tests ---------------------------------------------------------------------- */

OMC_TEST(alloc_reuses_freed_space_at_offset_zero) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range r1, r2, r3;
    REQUIRE(a);
    r1 = take(a, 512);
    CHECK_EQ(r1.offset, 0);
    r2 = take(a, 512);
    CHECK(r2.offset > 0);
    CHECK_EQ(r2.offset, 512);
    CHECK_OK(omc_alloc_free(a, r1));
    r3 = take(a, 512);
    CHECK_EQ(r3.offset, 0);
    CHECK(r3.generation != r1.generation);
    CHECK_OK(omc_alloc_validate(a));
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_alignment_128_puts_second_block_at_128) {
    omc_alloc* a = mk(4096, 128, 0);
    omc_range r1, r2;
    REQUIRE(a);
    CHECK_EQ(omc_alloc_alignment(a), 128);
    r1 = take(a, 100);
    r2 = take(a, 100);
    CHECK_EQ(r1.offset, 0);
    CHECK_EQ(r2.offset % 128, 0);
    CHECK_EQ(r2.offset, 128);
    CHECK_EQ(r2.size, 100);                 /* the handle keeps what was asked for */
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_exhaustion_then_recovery) {
    omc_alloc* a = mk(1024, 64, 0);
    omc_range r, r2;
    REQUIRE(a);
    r = take(a, 1024);
    CHECK_EQ(r.offset, 0);
    CHECK_RES(omc_alloc_alloc(a, 64, &r2), OMC_ERR_POOL_FULL);
    CHECK_EQ(r2.generation, 0);             /* a failed alloc hands out nothing */
    CHECK_OK(omc_alloc_free(a, r));
    r2 = take(a, 1024);
    CHECK_EQ(r2.offset, 0);
    omc_alloc_destroy(a);
}

/* vLLM-Omni's thread test, plus what it could not see: every thread marks the granules it owns in
   a shared map with compare-and-swap, so two threads ever holding overlapping ranges is caught. */
#define TS_THREADS 10
#define TS_ROUNDS 100
#define TS_GRANULE 64
#define TS_CAPACITY (1024 * 1024)
static uint8_t ts_owner[TS_CAPACITY / TS_GRANULE];
static int ts_errors, ts_next_id;

static void* ts_worker(void* arg) {
    omc_alloc* a = (omc_alloc*)arg;
    uint8_t me = (uint8_t)__atomic_add_fetch(&ts_next_id, 1, __ATOMIC_RELAXED);   /* 1..10, never 0 */
    int i;
    for (i = 0; i < TS_ROUNDS; i++) {
        uint64_t size = 1024 + (uint64_t)(i % 10) * 64, g;
        omc_range r;
        if (omc_alloc_alloc(a, size, &r) != OMC_OK) { __atomic_add_fetch(&ts_errors, 1, __ATOMIC_RELAXED); continue; }
        for (g = r.offset / TS_GRANULE; g < (r.offset + size + TS_GRANULE - 1) / TS_GRANULE; g++) {
            uint8_t expect = 0;
            if (!__atomic_compare_exchange_n(&ts_owner[g], &expect, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                __atomic_add_fetch(&ts_errors, 1, __ATOMIC_RELAXED);    /* somebody else holds it */
        }
        if (i % 7 == 0) sched_yield();
        for (g = r.offset / TS_GRANULE; g < (r.offset + size + TS_GRANULE - 1) / TS_GRANULE; g++)
            __atomic_store_n(&ts_owner[g], 0, __ATOMIC_RELEASE);
        if (omc_alloc_free(a, r) != OMC_OK) __atomic_add_fetch(&ts_errors, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

OMC_TEST(alloc_ten_threads_hundred_rounds_thread_safe) {
    omc_alloc* a = mk(TS_CAPACITY, TS_GRANULE, 1);
    pthread_t th[TS_THREADS];
    omc_alloc_stats st;
    int i;
    REQUIRE(a);
    ts_errors = 0;
    for (i = 0; i < TS_THREADS; i++) pthread_create(&th[i], NULL, ts_worker, a);
    for (i = 0; i < TS_THREADS; i++) pthread_join(th[i], NULL);
    CHECK_EQ(ts_errors, 0);
    CHECK_OK(omc_alloc_validate(a));
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.live_allocations, 0);
    CHECK_EQ(st.bytes_in_use, 0);
    CHECK_EQ(st.free_blocks, 1);
    CHECK_EQ(st.largest_free, TS_CAPACITY);
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_double_free_exact_is_reported_without_damage) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range r, all;
    REQUIRE(a);
    r = take(a, 256);
    CHECK_OK(omc_alloc_free(a, r));
    check_rejected(a, r, OMC_ERR_DOUBLE_FREE);
    all = take(a, 4096);                    /* the pool is whole again */
    CHECK_EQ(all.offset, 0);
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_double_free_after_merge_is_reported_without_damage) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range ra, rb, all;
    REQUIRE(a);
    ra = take(a, 64);
    rb = take(a, 64);
    CHECK_OK(omc_alloc_free(a, ra));
    CHECK_OK(omc_alloc_free(a, rb));        /* merges with a (and with the free tail) */
    check_rejected(a, ra, OMC_ERR_DOUBLE_FREE);
    check_rejected(a, rb, OMC_ERR_DOUBLE_FREE);
    all = take(a, 4096);
    CHECK_EQ(all.offset, 0);
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_partial_overlap_is_detected) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range ra, rb;
    REQUIRE(a);
    ra = take(a, 128);
    rb = take(a, 128);
    CHECK_OK(omc_alloc_free(a, ra));                      /* [0, 128) free, b = [128, 256) live */
    check_rejected(a, forged(64, 128), OMC_ERR_OVERLAP);  /* [64, 192): free block + live b */
    {   /* a live block's own handle that claims more than it owns */
        omc_range longer = rb;
        longer.size = 256;
        check_rejected(a, longer, OMC_ERR_OVERLAP);
        longer.size = 64;                                 /* ... or less */
        check_rejected(a, longer, OMC_ERR_OVERLAP);
    }
    check_rejected(a, forged(192, 128), OMC_ERR_OVERLAP); /* from inside b into the free tail */
    CHECK_OK(omc_alloc_free(a, rb));                      /* b was untouched by all that */
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_free_of_something_never_handed_out) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range r;
    REQUIRE(a);
    r = take(a, 256);
    check_rejected(a, forged(64, 64), OMC_ERR_INVALID_FREE);     /* inside a live block, not its start */
    check_rejected(a, forged(65, 10), OMC_ERR_INVALID_FREE);     /* ... and misaligned */
    check_rejected(a, forged(4096, 64), OMC_ERR_INVALID_FREE);   /* past the end */
    check_rejected(a, forged(4000, 200), OMC_ERR_INVALID_FREE);  /* runs past the end */
    check_rejected(a, forged(~0ull - 10, 64), OMC_ERR_INVALID_FREE); /* offset + size wraps */
    check_rejected(a, forged(0, 0), OMC_ERR_INVALID_FREE);       /* nothing is never handed out */
    /* in free space a range nobody ever got is indistinguishable from one freed before */
    check_rejected(a, forged(1024, 64), OMC_ERR_DOUBLE_FREE);
    CHECK_OK(omc_alloc_free(a, r));
    CHECK_RES(omc_alloc_free(NULL, r), OMC_ERR_INVALID_ARG);
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_stale_handle_is_detected_and_new_owner_survives) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range old, now;
    REQUIRE(a);
    old = take(a, 64);
    CHECK_OK(omc_alloc_free(a, old));
    now = take(a, 64);
    CHECK_EQ(now.offset, old.offset);       /* same place ... */
    CHECK(now.generation != old.generation);/* ... new generation */
    check_rejected(a, old, OMC_ERR_STALE);
    {   /* a stale handle that also lies about the size is still stale first */
        omc_range o2 = old;
        o2.size = 128;
        check_rejected(a, o2, OMC_ERR_STALE);
    }
    {   /* the right offset and generation in the wrong slot is a forged handle */
        omc_range f = now;
        f.slot = now.slot + 1;
        check_rejected(a, f, OMC_ERR_STALE);
        f.slot = OMC__NIL;
        check_rejected(a, f, OMC_ERR_STALE);
    }
    CHECK_OK(omc_alloc_check(a, now));
    CHECK_OK(omc_alloc_free(a, now));
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_out_of_order_frees_merge_into_one_block) {
    /* every order of freeing three neighbours (plus the free tail) must end in one block */
    static const int orders[6][3] = { {0,1,2}, {0,2,1}, {1,0,2}, {1,2,0}, {2,0,1}, {2,1,0} };
    int o;
    for (o = 0; o < 6; o++) {
        omc_alloc* a = mk(4096, 64, 0);
        omc_range r[3], big;
        omc_alloc_stats st;
        int i;
        REQUIRE(a);
        for (i = 0; i < 3; i++) r[i] = take(a, 64);
        for (i = 0; i < 3; i++) {
            CHECK_OK(omc_alloc_free(a, r[orders[o][i]]));
            CHECK_OK(omc_alloc_validate(a));
        }
        omc_alloc_get_stats(a, &st);
        CHECK_EQ(st.free_blocks, 1);
        CHECK_EQ(st.largest_free, st.capacity);
        CHECK(st.fragmentation == 0.0);
        big = take(a, 192);
        CHECK_EQ(big.offset, 0);
        omc_alloc_destroy(a);
    }
}

OMC_TEST(alloc_two_64_byte_holes_cannot_serve_128) {
    omc_alloc* a = mk(256, 64, 0);
    omc_range ra, rb, rc, rd, r;
    omc_alloc_stats st;
    REQUIRE(a);
    ra = take(a, 64); rb = take(a, 64); rc = take(a, 64); rd = take(a, 64);
    CHECK_RES(omc_alloc_alloc(a, 1, &r), OMC_ERR_POOL_FULL);
    CHECK_OK(omc_alloc_free(a, rb));
    CHECK_OK(omc_alloc_free(a, rd));
    CHECK_RES(omc_alloc_alloc(a, 128, &r), OMC_ERR_POOL_FULL);
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.free_blocks, 2);
    CHECK_EQ(st.largest_free, 64);
    CHECK(st.fragmentation > 0.49 && st.fragmentation < 0.51);   /* 1 - 64/128 */
    CHECK_OK(omc_alloc_free(a, ra));
    CHECK_OK(omc_alloc_free(a, rc));
    r = take(a, 256);
    CHECK_EQ(r.offset, 0);
    omc_alloc_destroy(a);
}

/* ---- 2. beyond vLLM-Omni's allocator ----------------------------------------------------------------------- */

OMC_TEST(alloc_too_large_versus_pool_full) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range r, x;
    REQUIRE(a);
    CHECK_RES(omc_alloc_alloc(a, 4097, &x), OMC_ERR_TOO_LARGE);      /* could never fit */
    CHECK_RES(omc_alloc_alloc(a, ~0ull, &x), OMC_ERR_TOO_LARGE);
    CHECK_RES(omc_alloc_alloc(a, 0, &x), OMC_ERR_INVALID_ARG);
    r = take(a, 1);
    CHECK_RES(omc_alloc_alloc(a, 4096, &x), OMC_ERR_POOL_FULL);      /* fits, but not now */
    CHECK_RES(omc_alloc_alloc(a, 4097, &x), OMC_ERR_TOO_LARGE);      /* still never */
    CHECK_OK(omc_alloc_free(a, r));
    CHECK_RES(omc_alloc_alloc(NULL, 1, &x), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_alloc_alloc(a, 1, NULL), OMC_ERR_INVALID_ARG);
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_create_checks_its_desc) {
    omc_alloc_desc d;
    omc_alloc* a = (omc_alloc*)&d;      /* must be set to NULL on failure */
    memset(&d, 0, sizeof(d));
    CHECK_RES(omc_alloc_create(&d, &a), OMC_ERR_INVALID_ARG);      /* capacity 0 */
    CHECK(a == NULL);
    d.capacity = 4095;                                              /* < one default granule */
    CHECK_RES(omc_alloc_create(&d, &a), OMC_ERR_INVALID_ARG);
    d.capacity = 1 << 20; d.alignment = 96;                         /* not a power of two */
    CHECK_RES(omc_alloc_create(&d, &a), OMC_ERR_INVALID_ARG);
    d.alignment = 1ull << 33;                                       /* more than 2^32 */
    CHECK_RES(omc_alloc_create(&d, &a), OMC_ERR_INVALID_ARG);
    d.alignment = 1ull << 32; d.capacity = 1ull << 34;              /* 2^32 is the largest */
    CHECK_OK(omc_alloc_create(&d, &a));
    {
        omc_range r;
        CHECK_OK(omc_alloc_alloc(a, 1, &r));                        /* the largest slack: 2^32 - 1 */
        CHECK_EQ(r.size, 1);
        CHECK_RES(omc_alloc_free(a, (omc_range){r.offset, 2, r.generation, r.slot}), OMC_ERR_OVERLAP);
        CHECK_OK(omc_alloc_validate(a));
        CHECK_OK(omc_alloc_free(a, r));
    }
    omc_alloc_destroy(a);
    d.alignment = 0; d.capacity = ~0ull;                            /* more than 2^63 */
    CHECK_RES(omc_alloc_create(&d, &a), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_alloc_create(NULL, &a), OMC_ERR_INVALID_ARG);
    CHECK_RES(omc_alloc_create(&d, NULL), OMC_ERR_INVALID_ARG);
    d.capacity = 3 * 4096 + 100;                                    /* rounded down to the alignment */
    CHECK_OK(omc_alloc_create(&d, &a));
    REQUIRE(a);
    CHECK_EQ(omc_alloc_alignment(a), 4096);                         /* the default, like vLLM-Omni's */
    {
        omc_alloc_stats st;
        omc_alloc_get_stats(a, &st);
        CHECK_EQ(st.capacity, 3 * 4096);
        CHECK_EQ(st.largest_free, 3 * 4096);
    }
    omc_alloc_destroy(a);
    omc_alloc_destroy(NULL);                                        /* harmless */
    {   /* alignment 1 is a power of two: byte-granular */
        omc_alloc* b = mk(10, 1, 0);
        omc_range r1, r2;
        REQUIRE(b);
        r1 = take(b, 3); r2 = take(b, 7);
        CHECK_EQ(r1.offset, 0); CHECK_EQ(r2.offset, 3);
        omc_alloc_destroy(b);
    }
}

OMC_TEST(alloc_huge_virtual_range) {
    /* offsets only: 2^62 bytes need no memory, and sizes near the top must not overflow */
    omc_alloc* a = mk(1ull << 62, 4096, 0);
    omc_range r1, r2, r3;
    omc_alloc_stats st;
    REQUIRE(a);
    r1 = take(a, 1ull << 61);
    r2 = take(a, (1ull << 61) - 4096);
    CHECK_EQ(r1.offset, 0);
    CHECK_EQ(r2.offset, 1ull << 61);
    r3 = take(a, 1);
    CHECK_EQ(r3.offset, (1ull << 62) - 4096);
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.largest_free, 0);
    CHECK(st.fragmentation == 0.0);
    CHECK_OK(omc_alloc_free(a, r2));
    CHECK_OK(omc_alloc_free(a, r1));
    CHECK_OK(omc_alloc_free(a, r3));
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.free_blocks, 1);
    CHECK_EQ(st.largest_free, 1ull << 62);
    omc_alloc_destroy(a);
}

/* Stats on a layout built by hand (alignment 64, capacity 1024):
     [0,64) a live | [64,192) free (was b, 100 B -> 128) | [192,256) c live | [256,1024) free */
OMC_TEST(alloc_stats_on_a_hand_made_layout) {
    omc_alloc* a = mk(1024, 64, 0);
    omc_range ra, rb, rc, rd;
    omc_alloc_stats st;
    REQUIRE(a);
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.capacity, 1024);
    CHECK_EQ(st.bytes_in_use, 0);
    CHECK_EQ(st.free_blocks, 1);
    CHECK(st.fragmentation == 0.0);
    ra = take(a, 64); rb = take(a, 100); rc = take(a, 64); rd = take(a, 64);
    CHECK_EQ(rb.offset, 64); CHECK_EQ(rc.offset, 192); CHECK_EQ(rd.offset, 256);
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.bytes_in_use, 64 + 128 + 64 + 64);
    CHECK_EQ(st.bytes_requested, 64 + 100 + 64 + 64);
    CHECK_EQ(st.live_allocations, 4);
    CHECK_EQ(st.largest_free, 1024 - 320);
    CHECK_OK(omc_alloc_free(a, rb));
    CHECK_OK(omc_alloc_free(a, rd));
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.capacity, 1024);
    CHECK_EQ(st.bytes_in_use, 128);
    CHECK_EQ(st.bytes_requested, 128);
    CHECK_EQ(st.live_allocations, 2);
    CHECK_EQ(st.largest_free, 768);
    CHECK_EQ(st.free_blocks, 2);
    CHECK(st.fragmentation > 1.0 - 768.0 / 896.0 - 1e-12 && st.fragmentation < 1.0 - 768.0 / 896.0 + 1e-12);
    CHECK_OK(omc_alloc_free(a, ra));
    CHECK_OK(omc_alloc_free(a, rc));
    omc_alloc_get_stats(a, &st);
    CHECK_EQ(st.free_blocks, 1);
    CHECK_EQ(st.largest_free, 1024);
    CHECK(st.fragmentation == 0.0);
    {   /* full: nothing free, fragmentation defined as 0 */
        omc_range f = take(a, 1024);
        omc_alloc_get_stats(a, &st);
        CHECK_EQ(st.largest_free, 0);
        CHECK_EQ(st.free_blocks, 0);
        CHECK(st.fragmentation == 0.0);
        CHECK_OK(omc_alloc_free(a, f));
    }
    omc_alloc_get_stats(NULL, &st);         /* zeroed, no crash */
    CHECK_EQ(st.capacity, 0);
    omc_alloc_destroy(a);
}

/* TLSF rounds a request up to the next size class, which skips blocks in the request's own class.
   The bounded second-chance walk must still find an exactly fitting hole: here the only free
   space of 41 granules sits in class [40, 42), and a 41-granule request rounds up past it. */
OMC_TEST(alloc_second_chance_finds_a_hole_in_its_own_class) {
    omc_alloc* a = mk(64 * 100, 64, 0);
    omc_range left, hole, right, r;
    REQUIRE(a);
    left = take(a, 64 * 10);
    hole = take(a, 64 * 41);
    right = take(a, 64 * 49);               /* fills the pool exactly: 10 + 41 + 49 = 100 */
    CHECK_RES(omc_alloc_alloc(a, 1, &r), OMC_ERR_POOL_FULL);
    CHECK_OK(omc_alloc_free(a, hole));
    r = take(a, 64 * 41);
    CHECK_EQ(r.offset, 64 * 10);
    CHECK_OK(omc_alloc_free(a, r));
    r = take(a, 64 * 40 + 1);               /* also 41 granules */
    CHECK_EQ(r.offset, 64 * 10);
    CHECK_OK(omc_alloc_free(a, r));
    CHECK_OK(omc_alloc_free(a, left));
    CHECK_OK(omc_alloc_free(a, right));
    CHECK_OK(omc_alloc_validate(a));
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_generations_are_unique_and_never_zero) {
    omc_alloc* a = mk(4096, 64, 0);
    uint32_t prev[64];
    int i, j;
    REQUIRE(a);
    for (i = 0; i < 64; i++) {              /* the same place over and over */
        omc_range r = take(a, 64);
        CHECK_EQ(r.offset, 0);
        CHECK(r.generation != 0);
        for (j = 0; j < i; j++) CHECK(prev[j] != r.generation);
        prev[i] = r.generation;
        CHECK_OK(omc_alloc_free(a, r));
    }
    {   /* the counter wraps past 2^32 without ever handing out generation 0 */
        omc_range r;
        a->next_generation = 0xFFFFFFFEu;
        r = take(a, 64); CHECK_EQ(r.generation, 0xFFFFFFFFu); CHECK_OK(omc_alloc_free(a, r));
        r = take(a, 64); CHECK_EQ(r.generation, 1);           CHECK_OK(omc_alloc_free(a, r));
    }
    omc_alloc_destroy(a);
}

/* validate() is what the differential test leans on, so it must be able to fail: damage the
   bookkeeping by hand (this test sees the internals) and expect OMC_ERR_INTERNAL. */
OMC_TEST(alloc_validate_notices_damage) {
    omc_alloc* a = mk(4096, 64, 0);
    omc_range r1, r2;
    uint64_t saved;
    REQUIRE(a);
    r1 = take(a, 64);
    r2 = take(a, 128);
    CHECK_OK(omc_alloc_validate(a));
    saved = a->blocks[r2.slot].size;
    a->blocks[r2.slot].size = saved + 64;                       /* blocks no longer tile */
    CHECK_RES(omc_alloc_validate(a), OMC_ERR_INTERNAL);
    a->blocks[r2.slot].size = saved;
    a->in_use += 64;                                            /* counters disagree with blocks */
    CHECK_RES(omc_alloc_validate(a), OMC_ERR_INTERNAL);
    a->in_use -= 64;
    a->sl_map[0] ^= 1u;                                         /* bitmap disagrees with lists */
    CHECK_RES(omc_alloc_validate(a), OMC_ERR_INTERNAL);
    a->sl_map[0] ^= 1u;
    CHECK_OK(omc_alloc_validate(a));
    CHECK_RES(omc_alloc_validate(NULL), OMC_ERR_INVALID_ARG);
    CHECK_OK(omc_alloc_free(a, r1));
    CHECK_OK(omc_alloc_free(a, r2));
    omc_alloc_destroy(a);
}

OMC_TEST(alloc_metadata_grows_past_its_first_records) {
    /* 10 000 live blocks: the record array grows many times while handles stay valid */
    enum { N = 10000 };
    omc_alloc* a = mk((uint64_t)N * 64, 64, 0);
    static omc_range r[N];
    int i;
    REQUIRE(a);
    for (i = 0; i < N; i++) { r[i] = take(a, 64); CHECK_EQ(r[i].offset, (uint64_t)i * 64); }
    CHECK_OK(omc_alloc_validate(a));
    for (i = 0; i < N; i += 2) CHECK_OK(omc_alloc_free(a, r[i]));
    for (i = 1; i < N; i += 2) CHECK_OK(omc_alloc_check(a, r[i]));
    for (i = 1; i < N; i += 2) CHECK_OK(omc_alloc_free(a, r[i]));
    CHECK_OK(omc_alloc_validate(a));
    omc_alloc_destroy(a);
}

/* Out of host memory for the bookkeeping is a result code, never an abort, and the allocator
   stays whole: a hook allocator that refuses on demand. */
typedef struct oom_hook { int allow; int calls; } oom_hook;
static void* oom_alloc(size_t n, void* u) {
    oom_hook* h = (oom_hook*)u;
    h->calls++;
    return h->allow ? malloc(n) : NULL;
}
static void oom_free(void* p, void* u) { (void)u; free(p); }

OMC_TEST(alloc_out_of_host_memory_is_a_result) {
    omc_alloc_desc d;
    omc_alloc* a = NULL;
    oom_hook h = {0, 0};
    omc_range r[200], x;
    int i, n = 0;
    memset(&d, 0, sizeof(d));
    d.capacity = 1 << 20;
    d.alignment = 64;
    d.hooks.alloc_fn = oom_alloc;
    d.hooks.free_fn = oom_free;
    d.hooks.user_data = &h;
    CHECK_RES(omc_alloc_create(&d, &a), OMC_ERR_NO_MEMORY);     /* nothing at all */
    CHECK(a == NULL);
    h.allow = 1;
    CHECK_OK(omc_alloc_create(&d, &a));
    REQUIRE(a);
    h.allow = 0;                        /* the record array cannot grow any more */
    for (i = 0; i < 200; i++) {
        omc_result res = omc_alloc_alloc(a, 64, &r[n]);
        if (res == OMC_OK) n++;
        else { CHECK_RES(res, OMC_ERR_NO_MEMORY); break; }
    }
    CHECK(n > 0 && n < 200);            /* it ran into the limit ... */
    CHECK_OK(omc_alloc_validate(a));    /* ... without damage */
    for (i = 0; i < n; i += 2) CHECK_OK(omc_alloc_free(a, r[i]));   /* frees need no memory */
    CHECK_OK(omc_alloc_validate(a));
    h.allow = 1;
    for (i = 0; i < 100; i++) { CHECK_OK(omc_alloc_alloc(a, 64, &x)); }
    CHECK_OK(omc_alloc_validate(a));
    omc_alloc_destroy(a);
}

/* ---- bounded waits ---------------------------------------------------------------------------- */

OMC_TEST(alloc_wait_times_out_at_the_deadline) {
    omc_alloc* a = mk(4096, 64, 1);
    omc_alloc* plain = mk(4096, 64, 0);
    omc_range full, r;
    omc_time_ns t0, dt;
    REQUIRE(a && plain);
    full = take(a, 4096);
    t0 = omc_now_ns();
    CHECK_RES(omc_alloc_alloc_wait(a, 64, t0 + 100000000LL, &r), OMC_ERR_TIMEOUT);
    dt = omc_now_ns() - t0;
    CHECK(dt >= 100000000LL);               /* not before the deadline ... */
    CHECK(dt < 2000000000LL);               /* ... and not long after it (generous: shared box) */
    CHECK_EQ(r.generation, 0);
    t0 = omc_now_ns();                      /* what could never fit does not wait at all */
    CHECK_RES(omc_alloc_alloc_wait(a, 8192, omc_deadline_after_ms(5000), &r), OMC_ERR_TOO_LARGE);
    CHECK(omc_now_ns() - t0 < 1000000000LL);
    CHECK_RES(omc_alloc_alloc_wait(a, 64, OMC_NO_WAIT, &r), OMC_ERR_POOL_FULL);   /* no wait: same answer as without a lock */
    /* waiting needs the mutex and condition variable of thread_safe mode */
    CHECK_RES(omc_alloc_alloc_wait(plain, 64, omc_deadline_after_ms(10), &r), OMC_ERR_INVALID_ARG);
    CHECK_OK(omc_alloc_alloc_wait(plain, 64, OMC_NO_WAIT, &r));
    CHECK_OK(omc_alloc_free(a, full));
    omc_alloc_destroy(a);
    omc_alloc_destroy(plain);
}

typedef struct wait_arg { omc_alloc* a; omc_range r; int delay_ms; } wait_arg;
static void* free_later(void* p) {
    wait_arg* w = (wait_arg*)p;
    usleep((useconds_t)w->delay_ms * 1000);
    if (omc_alloc_free(w->a, w->r) != OMC_OK) OMC_TEST_FAIL();
    return NULL;
}

OMC_TEST(alloc_wait_succeeds_when_another_thread_frees) {
    omc_alloc* a = mk(4096, 64, 1);
    wait_arg w;
    pthread_t th;
    omc_range r;
    omc_time_ns t0, dt;
    REQUIRE(a);
    w.a = a;
    w.r = take(a, 4096);
    w.delay_ms = 100;
    t0 = omc_now_ns();
    pthread_create(&th, NULL, free_later, &w);
    CHECK_OK(omc_alloc_alloc_wait(a, 2048, omc_deadline_after_ms(10000), &r));
    dt = omc_now_ns() - t0;
    pthread_join(th, NULL);
    CHECK_EQ(r.offset, 0);
    CHECK(dt >= 90000000LL);                /* it really waited for the free ... */
    CHECK(dt < 5000000000LL);               /* ... and was woken by it, not by the deadline */
    /* and once more with no deadline at all */
    w.r = take(a, 2048);
    w.delay_ms = 20;
    pthread_create(&th, NULL, free_later, &w);
    {
        omc_range r2;
        CHECK_OK(omc_alloc_free(a, r));
        CHECK_OK(omc_alloc_alloc_wait(a, 4096, OMC_WAIT_FOREVER, &r2));
        pthread_join(th, NULL);
        CHECK_OK(omc_alloc_free(a, r2));
    }
    CHECK_OK(omc_alloc_validate(a));
    omc_alloc_destroy(a);
}

/* ---- 3. the differential test ----------------------------------------------------------------- */

/* The model: the managed range as an array of granules, each owned by one live allocation (an
   index into `ent`) or free (-1), plus a bitmap of owned granules for quick run scans. It knows
   nothing about size classes or block records; it only knows who owns which bytes. */
typedef struct m_entry { omc_range r; uint64_t rounded; uint32_t live_pos; } m_entry;

typedef struct model {
    uint64_t cap, gran, granules;
    uint32_t shift;
    int32_t* owner;
    uint64_t* used;             /* bit g set = granule g owned */
    m_entry* ent;
    uint32_t* free_ent;         /* unused entry indices */
    uint32_t nfree_ent, nent;
    uint32_t* live;             /* live entry indices, for random picks */
    uint32_t nlive;
    uint64_t in_use, requested;
    omc_range dead[64];         /* recently freed handles, for stale/double-free attempts */
    uint32_t ndead;
} model;

static uint64_t rng_state;
static uint64_t rnd(void) {     /* xorshift64* */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

/* first granule >= g whose used bit equals `want`, or m->granules */
static uint64_t model_next(const model* m, uint64_t g, int want) {
    while (g < m->granules) {
        uint64_t w = m->used[g >> 6];
        if (!want) w = ~w;
        w &= ~0ull << (g & 63);
        if (w) { g = (g & ~63ull) + (uint64_t)__builtin_ctzll(w); return g < m->granules ? g : m->granules; }
        g = (g & ~63ull) + 64;
    }
    return m->granules;
}

static void model_runs(const model* m, uint64_t* largest, uint64_t* runs) {
    uint64_t g = 0;
    *largest = 0; *runs = 0;
    for (;;) {
        uint64_t s = model_next(m, g, 0), e;
        if (s >= m->granules) break;
        e = model_next(m, s, 1);
        if (e - s > *largest) *largest = e - s;
        (*runs)++;
        g = e;
    }
}

/* What freeing r must give, from first principles (see the semantics at the top). */
static omc_result model_classify(const model* m, omc_range r) {
    uint64_t g, end;
    int32_t id;
    if (r.size == 0 || r.offset >= m->cap || r.size > m->cap - r.offset) return OMC_ERR_INVALID_FREE;
    end = r.offset + r.size;
    g = r.offset >> m->shift;
    id = m->owner[g];
    if (id >= 0) {
        const m_entry* e = &m->ent[id];
        if (e->r.offset == r.offset) {
            if (e->r.generation != r.generation) return OMC_ERR_STALE;
            if (e->r.size != r.size) return OMC_ERR_OVERLAP;
            return e->r.slot == r.slot ? OMC_OK : OMC_ERR_STALE;
        }
        return end <= e->r.offset + e->rounded ? OMC_ERR_INVALID_FREE : OMC_ERR_OVERLAP;
    }
    return end <= (model_next(m, g, 1) << m->shift) ? OMC_ERR_DOUBLE_FREE : OMC_ERR_OVERLAP;
}

static int model_init(model* m, uint64_t cap, uint64_t gran) {
    uint64_t i;
    memset(m, 0, sizeof(*m));
    m->gran = gran;
    m->shift = (uint32_t)__builtin_ctzll(gran);
    m->cap = cap & ~(gran - 1);
    m->granules = m->cap >> m->shift;
    m->owner = (int32_t*)malloc(sizeof(int32_t) * m->granules);
    m->used = (uint64_t*)calloc((m->granules + 63) / 64, sizeof(uint64_t));
    m->ent = (m_entry*)malloc(sizeof(m_entry) * m->granules);
    m->free_ent = (uint32_t*)malloc(sizeof(uint32_t) * m->granules);
    m->live = (uint32_t*)malloc(sizeof(uint32_t) * m->granules);
    if (!m->owner || !m->used || !m->ent || !m->free_ent || !m->live) return 0;
    for (i = 0; i < m->granules; i++) { m->owner[i] = -1; m->free_ent[i] = (uint32_t)(m->granules - 1 - i); }
    m->nfree_ent = (uint32_t)m->granules;
    return 1;
}

static void model_fini(model* m) {
    free(m->owner); free(m->used); free(m->ent); free(m->free_ent); free(m->live);
}

static void model_set(model* m, uint64_t g0, uint64_t n, int32_t id) {
    uint64_t g;
    for (g = g0; g < g0 + n; g++) {
        m->owner[g] = id;
        if (id >= 0) m->used[g >> 6] |= 1ull << (g & 63);
        else m->used[g >> 6] &= ~(1ull << (g & 63));
    }
}

/* The smallest free run that the allocator promises to find for a request of n granules: TLSF
   searches the classes whose every block holds n, i.e. from the class of n rounded up to the next
   class boundary (classes are exact below 16 granules, then 16 per power of two). */
static uint64_t tlsf_guarantee(uint64_t n) {
    uint64_t r;
    uint32_t msb;
    if (n < 16) return n;
    msb = 63u - (uint32_t)__builtin_clzll(n);
    r = n + (1ull << (msb - 4)) - 1;
    msb = 63u - (uint32_t)__builtin_clzll(r);
    return (r >> (msb - 4)) << (msb - 4);
}

static uint64_t pick_size(model* m) {
    uint64_t p = rnd_below(100), cap = m->cap;
    if (p < 25) return 1 + rnd_below(m->gran);                 /* tiny: up to one granule */
    if (p < 60) return 1 + rnd_below(8 * m->gran);             /* small */
    if (p < 85) return 1 + rnd_below(cap / 16);                /* medium */
    if (p < 93) return 1 + rnd_below(cap / 3);                 /* large */
    if (p < 97) return cap / 2 + rnd_below(cap / 2 + 1);       /* huge (rarely fits) */
    if (p < 99) return cap + 1 + rnd_below(cap);               /* never fits */
    return rnd_below(2) ? ~0ull - rnd_below(1000) : 0;         /* absurd, or zero */
}

typedef struct diff_counts { uint64_t ops, allocs, full, too_large, frees, bogus, failures; } diff_counts;

static int diff_fail(diff_counts* c, const char* what, uint64_t op) {
    if (c->failures++ < 10) fprintf(stderr, "  differential: op %llu: %s\n", (unsigned long long)op, what);
    OMC_TEST_FAIL();
    return 0;
}

static void diff_alloc(omc_alloc* a, model* m, diff_counts* c, uint64_t op) {
    uint64_t size = pick_size(m), n, largest, runs;
    omc_range r;
    omc_result res = omc_alloc_alloc(a, size, &r);
    c->allocs++;
    if (size == 0) { if (res != OMC_ERR_INVALID_ARG) diff_fail(c, "alloc(0) not INVALID_ARG", op); return; }
    if (size > m->cap) {
        c->too_large++;
        if (res != OMC_ERR_TOO_LARGE) diff_fail(c, "alloc beyond capacity not TOO_LARGE", op);
        return;
    }
    n = (size + m->gran - 1) >> m->shift;
    if (res == OMC_ERR_POOL_FULL) {
        c->full++;
        model_runs(m, &largest, &runs);
        if (largest >= tlsf_guarantee(n)) diff_fail(c, "POOL_FULL although a large enough free run exists", op);
        return;
    }
    if (res != OMC_OK) { diff_fail(c, omc_result_name(res), op); return; }
    /* inside, aligned, the size kept, a real generation, and no granule already owned */
    if (r.offset % m->gran || r.offset >= m->cap || (n << m->shift) > m->cap - r.offset) { diff_fail(c, "range outside or misaligned", op); return; }
    if (r.size != size || r.generation == 0) diff_fail(c, "handle size/generation", op);
    if (model_next(m, r.offset >> m->shift, 1) < (r.offset >> m->shift) + n) { diff_fail(c, "overlaps a live range", op); return; }
    {
        uint32_t id = m->free_ent[--m->nfree_ent];
        m->ent[id].r = r;
        m->ent[id].rounded = n << m->shift;
        m->ent[id].live_pos = m->nlive;
        m->live[m->nlive++] = id;
        model_set(m, r.offset >> m->shift, n, (int32_t)id);
        m->in_use += n << m->shift;
        m->requested += size;
    }
}

static void diff_free(omc_alloc* a, model* m, diff_counts* c, uint64_t op) {
    uint32_t id = m->live[rnd_below(m->nlive)], last;
    m_entry* e = &m->ent[id];
    omc_result res;
    c->frees++;
    if ((res = omc_alloc_free(a, e->r)) != OMC_OK) { diff_fail(c, omc_result_name(res), op); return; }
    model_set(m, e->r.offset >> m->shift, e->rounded >> m->shift, -1);
    m->in_use -= e->rounded;
    m->requested -= e->r.size;
    m->dead[m->ndead++ % 64] = e->r;
    last = m->live[--m->nlive];                 /* swap-remove from the live list */
    m->live[e->live_pos] = last;
    m->ent[last].live_pos = e->live_pos;
    m->free_ent[m->nfree_ent++] = id;
}

/* A free that must be refused, with exactly the model's classification, changing nothing. */
static void diff_bogus(omc_alloc* a, model* m, diff_counts* c, uint64_t op) {
    omc_range r;
    omc_result want, got;
    omc_alloc_stats before, after;
    uint64_t kind = rnd_below(8);
    memset(&r, 0, sizeof(r));
    if (m->nlive) r = m->ent[m->live[rnd_below(m->nlive)]].r;
    switch (kind) {
        case 0: if (m->ndead) r = m->dead[rnd_below(m->ndead < 64 ? m->ndead : 64)]; break;  /* stale / double */
        case 1: r.generation += 1 + (uint32_t)rnd_below(3); break;                          /* wrong generation */
        case 2: r.size = rnd_below(3) == 0 ? 0 : r.size + 1 + rnd_below(3 * m->gran); break; /* wrong size */
        case 3: if (r.size > 1) r.size -= 1 + rnd_below(r.size - 1); break;
        case 4: r.offset += rnd_below(2) ? m->gran : 1 + rnd_below(m->gran); break;         /* shifted */
        case 5: r.slot = (uint32_t)rnd_below(2 * m->granules + 2); break;                   /* forged slot */
        default:                                                                             /* anywhere */
            r.offset = rnd_below(m->cap + m->cap / 8);
            if (rnd_below(2)) r.offset &= ~(m->gran - 1);
            r.size = rnd_below(m->cap / 4 + 2);
            r.generation = (uint32_t)rnd();
            r.slot = (uint32_t)rnd_below(m->granules + 2);
            break;
    }
    want = model_classify(m, r);
    if (want == OMC_OK) return;                 /* happened to name a live block exactly: not bogus */
    c->bogus++;
    omc_alloc_get_stats(a, &before);
    if ((got = omc_alloc_check(a, r)) != want || (got = omc_alloc_free(a, r)) != want) {
        char msg[160];
        snprintf(msg, sizeof(msg), "bogus free [%llu,+%llu) gen %u slot %u: got %s, model says %s",
                 (unsigned long long)r.offset, (unsigned long long)r.size, r.generation, r.slot,
                 omc_result_name(got), omc_result_name(want));
        diff_fail(c, msg, op);
        return;
    }
    omc_alloc_get_stats(a, &after);
    if (!stats_equal(&before, &after)) diff_fail(c, "a refused free changed the stats", op);
}

static void diff_full_check(omc_alloc* a, model* m, diff_counts* c, uint64_t op) {
    omc_alloc_stats st;
    uint64_t largest, runs;
    if (omc_alloc_validate(a) != OMC_OK) diff_fail(c, "validate() failed", op);
    omc_alloc_get_stats(a, &st);
    model_runs(m, &largest, &runs);
    if (st.capacity != m->cap || st.bytes_in_use != m->in_use || st.bytes_requested != m->requested ||
        st.live_allocations != m->nlive || st.largest_free != (largest << m->shift) || st.free_blocks != runs)
        diff_fail(c, "stats disagree with the model", op);
}

static void differential(uint64_t cap, uint64_t gran, uint64_t ops, diff_counts* total) {
    omc_alloc* a = mk(cap, gran, 0);
    model m;
    diff_counts c;
    uint64_t op;
    memset(&c, 0, sizeof(c));
    if (!a || !model_init(&m, cap, gran)) { OMC_TEST_FAIL(); omc_alloc_destroy(a); return; }
    for (op = 0; op < ops && c.failures < 10; op++) {
        /* phases of filling and draining, so both "nearly full, fragmented" and "nearly empty"
           states are visited many times */
        uint64_t phase = (op / 5000) % 4, p = rnd_below(100);
        uint64_t p_alloc = phase == 0 ? 60 : phase == 1 ? 45 : phase == 2 ? 30 : 45;
        if (p < p_alloc || m.nlive == 0) diff_alloc(a, &m, &c, op);
        else if (p < 85) diff_free(a, &m, &c, op);
        else diff_bogus(a, &m, &c, op);
        if ((op & 4095) == 0) diff_full_check(a, &m, &c, op);
    }
    c.ops = op;
    diff_full_check(a, &m, &c, op);
    while (m.nlive && c.failures < 10) diff_free(a, &m, &c, op);   /* all bytes come back ... */
    {
        omc_alloc_stats st;
        omc_alloc_get_stats(a, &st);                /* ... as one block of the full capacity */
        if (st.free_blocks != 1 || st.largest_free != m.cap || st.bytes_in_use != 0 || st.live_allocations != 0)
            diff_fail(&c, "not one full free block at the end", op);
        if (omc_alloc_validate(a) != OMC_OK) diff_fail(&c, "validate() failed at the end", op);
    }
    printf("  differential cap=%llu align=%llu: %llu ops (%llu allocs, %llu pool-full, %llu too-large, %llu frees, %llu refused frees)\n",
           (unsigned long long)cap, (unsigned long long)gran, (unsigned long long)c.ops, (unsigned long long)c.allocs,
           (unsigned long long)c.full, (unsigned long long)c.too_large, (unsigned long long)c.frees, (unsigned long long)c.bogus);
    total->ops += c.ops;
    total->failures += c.failures;
    model_fini(&m);
    omc_alloc_destroy(a);
}

/* The model's classifier is itself checked against cases worked out by hand first. */
OMC_TEST(alloc_differential_model_agrees_with_hand_cases) {
    model m;
    omc_range r;
    REQUIRE(model_init(&m, 1024, 64));
    memset(&r, 0, sizeof(r));
    r.offset = 128; r.size = 100; r.generation = 7; r.slot = 3;
    m.ent[0].r = r; m.ent[0].rounded = 128; m.nlive = 1; m.live[0] = 0;
    model_set(&m, 2, 2, 0);                                         /* [128, 256) live */
    CHECK_RES(model_classify(&m, r), OMC_OK);
    r.generation = 8; CHECK_RES(model_classify(&m, r), OMC_ERR_STALE); r.generation = 7;
    r.size = 101;     CHECK_RES(model_classify(&m, r), OMC_ERR_OVERLAP); r.size = 100;
    r.slot = 4;       CHECK_RES(model_classify(&m, r), OMC_ERR_STALE); r.slot = 3;
    CHECK_RES(model_classify(&m, forged(192, 64)), OMC_ERR_INVALID_FREE);
    CHECK_RES(model_classify(&m, forged(192, 65)), OMC_ERR_OVERLAP);
    CHECK_RES(model_classify(&m, forged(0, 128)), OMC_ERR_DOUBLE_FREE);
    CHECK_RES(model_classify(&m, forged(64, 65)), OMC_ERR_OVERLAP);
    CHECK_RES(model_classify(&m, forged(256, 768)), OMC_ERR_DOUBLE_FREE);
    CHECK_RES(model_classify(&m, forged(256, 769)), OMC_ERR_INVALID_FREE);
    CHECK_RES(model_classify(&m, forged(1024, 1)), OMC_ERR_INVALID_FREE);
    CHECK_EQ(tlsf_guarantee(15), 15);
    CHECK_EQ(tlsf_guarantee(41), 42);       /* class [40, 42) is skipped, [42, 44) is searched */
    CHECK_EQ(tlsf_guarantee(40), 40);
    CHECK_EQ(tlsf_guarantee(1000), 1024);   /* classes of 32 between 512 and 1024 */
    model_fini(&m);
}

OMC_TEST(alloc_differential_against_granule_model) {
    diff_counts total;
    const char* env = getenv("OMC_DIFF_OPS");
    const char* seed = getenv("OMC_DIFF_SEED");
    uint64_t per = env ? strtoull(env, NULL, 10) : (sanitized() ? 500000 / 4 : 500000);
    memset(&total, 0, sizeof(total));
    rng_state = seed ? strtoull(seed, NULL, 10) : 0x0D1FFu;
    if (!rng_state) rng_state = 1;
    printf("  differential: seed %llu, %llu ops per configuration%s\n", (unsigned long long)rng_state,
           (unsigned long long)per, sanitized() ? " (sanitizer build: 1/4 of the plain count)" : "");
    differential(1 << 20, 64, per, &total);                 /* 16384 granules */
    differential((64ull << 20) + 12345, 4096, per, &total); /* capacity not a multiple: rounded down */
    differential(3000, 1, per, &total);                     /* byte granules, crowded */
    CHECK_EQ(total.failures, 0);
    if (!env && !sanitized()) CHECK(total.ops >= 1000000);
}

OMC_TEST_MAIN()
