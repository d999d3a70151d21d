/* What every fuzz target shares: a check that stops the fuzzer with the failed condition, and the
   file writer its seed-corpus program (built with -DOMC_FUZZ_SEEDS) uses.
   Define FUZZ_NAME ("fuzz_x") before including this. */
#ifndef OMC_FUZZ_COMMON_H
#define OMC_FUZZ_COMMON_H
#include <stdio.h>

#define FUZZ_REQUIRE(c) do { if (!(c)) { fprintf(stderr, FUZZ_NAME ": %s failed (line %d)\n", #c, __LINE__); __builtin_trap(); } } while (0)

#ifdef OMC_FUZZ_SEEDS
/* dir/name <- n bytes of p; 0 on success */
static __attribute__((unused)) int write_file(const char* dir, const char* name, const void* p, size_t n) {
    char path[1024];
    FILE* f;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    fwrite(p, 1, n, f);
    fclose(f);
    return 0;
}
#endif
#endif
