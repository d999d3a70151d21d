/* omc_test.h - the smallest test harness that does the job.

   A test file defines tests with OMC_TEST(name) { ... } and ends with OMC_TEST_MAIN().
   Checks: CHECK(cond), CHECK_EQ(a, b) (integers), CHECK_OK(expr) (an omc_result must be OMC_OK),
   CHECK_RES(expr, code). A failed check prints file:line and the expression, marks the test
   failed and goes on (so one run shows every failure).

   Every binary prints one line per test ("PASS name" / "FAIL name") and, last, a line
   "<binary>: N passed, M failed"; tests/run.sh adds those lines up. Arguments: test names
   (substring match) to run a subset. Exit status 1 if anything failed. */
#ifndef OMC_TEST_H
#define OMC_TEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

typedef void (*omc_test_fn)(void);
typedef struct omc_test_entry { const char* name; omc_test_fn fn; } omc_test_entry;

static omc_test_entry omc_test_list[256];
static int omc_test_count;
static int omc_test_failed_checks;
/* sub-results reported inside a test (one line each, counted in the totals) */
static int omc_test_sub_passed, omc_test_sub_failed;
static inline void omc_test_sub(const char* name, int failed) {
    printf("%s %s\n", failed ? "FAIL" : "PASS", name);
    fflush(stdout);
    if (failed) omc_test_sub_failed++; else omc_test_sub_passed++;
}

static void omc_test_register(const char* name, omc_test_fn fn) {
    if (omc_test_count < 256) { omc_test_list[omc_test_count].name = name; omc_test_list[omc_test_count].fn = fn; omc_test_count++; }
}

#define OMC_TEST(name) \
    static void name(void); \
    __attribute__((constructor)) static void name##_register(void) { omc_test_register(#name, name); } \
    static void name(void)

#define OMC_TEST_FAIL() __atomic_add_fetch(&omc_test_failed_checks, 1, __ATOMIC_RELAXED)
#define CHECK(cond) do { if (!(cond)) { OMC_TEST_FAIL(); \
    fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_EQ(a, b) do { long long omc_t_a = (long long)(a), omc_t_b = (long long)(b); if (omc_t_a != omc_t_b) { \
    OMC_TEST_FAIL(); fprintf(stderr, "  %s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b, omc_t_a, omc_t_b); } } while (0)
#define CHECK_RES(expr, code) do { omc_result omc_t_r = (expr); if (omc_t_r != (code)) { OMC_TEST_FAIL(); \
    fprintf(stderr, "  %s:%d: %s gave %s, expected %s\n", __FILE__, __LINE__, #expr, omc_result_name(omc_t_r), omc_result_name(code)); } } while (0)
#define CHECK_OK(expr) CHECK_RES(expr, OMC_OK)
/* stop the current test (after a failed precondition the rest would only crash) */
#define REQUIRE(cond) do { if (!(cond)) { OMC_TEST_FAIL(); \
    fprintf(stderr, "  %s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond); return; } } while (0)

static int omc_test_main(int argc, char** argv) {
    int i, j, passed = 0, failed = 0;
    const char* prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    for (i = 0; i < omc_test_count; i++) {
        int selected = argc <= 1, before;
        for (j = 1; j < argc; j++) if (strstr(omc_test_list[i].name, argv[j])) selected = 1;
        if (!selected) continue;
        before = __atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED);
        omc_test_list[i].fn();
        if (__atomic_load_n(&omc_test_failed_checks, __ATOMIC_RELAXED) == before) { passed++; printf("PASS %s\n", omc_test_list[i].name); }
        else { failed++; printf("FAIL %s\n", omc_test_list[i].name); }
        fflush(stdout);
    }
    passed += omc_test_sub_passed;
    failed += omc_test_sub_failed;
    printf("%s: %d passed, %d failed\n", prog, passed, failed);
    return failed ? 1 : 0;
}
#define OMC_TEST_MAIN() int main(int argc, char** argv) { return omc_test_main(argc, argv); }

/* A deterministic pattern for payload checks: byte i of stream `seed`. */
static inline uint8_t omc_test_byte(uint64_t seed, uint64_t i) {
    uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 17));
}
static inline void omc_test_fill(void* p, uint64_t n, uint64_t seed) {
    uint64_t i; uint8_t* b = (uint8_t*)p; for (i = 0; i < n; i++) b[i] = omc_test_byte(seed, i);
}
static inline int omc_test_verify(const void* p, uint64_t n, uint64_t seed) {
    uint64_t i; const uint8_t* b = (const uint8_t*)p; for (i = 0; i < n; i++) if (b[i] != omc_test_byte(seed, i)) return 0; return 1;
}

/* ---- helpers more than one test file needs -------------------------------------------------- */
#include <errno.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

/* ThreadSanitizer: libzmq is not instrumented, so the hand-off between its I/O thread and ours
   (lock-free queues whose atomics TSan cannot see) is reported as races on the message bytes
   inside libzmq. Ignore exactly what happens inside libzmq (and libstdc++, which it uses); our
   own code stays checked. Put OMC_TEST_TSAN_IGNORE_LIBZMQ() once in a test file that uses it. */
#define OMC_TEST_TSAN_IGNORE_LIBZMQ() \
    const char* __tsan_default_suppressions(void); \
    const char* __tsan_default_suppressions(void) { \
        return "called_from_lib:libzmq.so.5\ncalled_from_lib:libstdc++.so.6\nrace:libzmq.so.5\n"; \
    }

/* A path relative to the repository root (this header's directory's parent); four calls may be
   in use at once. */
static __attribute__((unused)) const char* omc_test_repo_path(const char* rel) {
    static char buf[4][1024];
    static int next;
    char* b = buf[next++ & 3];
    const char* f = __FILE__;
    const char* slash = strrchr(f, '/');
    if (slash) snprintf(b, 1024, "%.*s/../%s", (int)(slash - f), f, rel);
    else snprintf(b, 1024, "../%s", rel);
    return b;
}

/* Write / read exactly n bytes (EINTR retried); 0 or -1. */
static __attribute__((unused)) int omc_test_write_all(int fd, const void* p, size_t n) {
    const char* b = (const char*)p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}
static __attribute__((unused)) int omc_test_read_all(int fd, void* p, size_t n) {
    char* b = (char*)p;
    while (n) {
        ssize_t k = read(fd, b, n);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}
/* A base port P such that P .. P+count-1 can be bound on every address now (a pick, not a
   reservation: close the window by using it at once). Picked below the kernel's ephemeral range
   (32768 and up), where any outgoing connection on the host may hold a port, and probed, because
   other programs (and other test binaries running at the same time) use fixed ports too. 0 if
   200 tries found nothing. */
static __attribute__((unused)) int omc_test_free_port_base(int count) {
    int attempt;
    for (attempt = 0; attempt < 200; attempt++) {
        int base = 20000 + (int)(((unsigned)getpid() * 7919u + (unsigned)attempt * 104729u) % (12000u - (unsigned)count));
        int k, ok = 1;
        for (k = 0; k < count && ok; k++) {
            struct sockaddr_in a;
            int s = socket(AF_INET, SOCK_STREAM, 0);
            memset(&a, 0, sizeof(a));
            a.sin_family = AF_INET;
            a.sin_port = htons((uint16_t)(base + k));
            a.sin_addr.s_addr = htonl(INADDR_ANY);
            if (s < 0 || bind(s, (struct sockaddr*)&a, sizeof(a)) != 0) ok = 0;
            if (s >= 0) close(s);
        }
        if (ok) return base;
    }
    return 0;
}
#endif
