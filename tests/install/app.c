/* An out-of-tree program built against an installed omniconn (tests/install/run.sh): a put and a
   zero-copy get over the same-process and the shared-memory connectors, results checked.
   Built header-only (-DAPP_HEADER_ONLY: this file holds the implementation) or against
   libomniconn.so. Exits 0 and prints "app: ok <version>" on success. */
#if defined(APP_HEADER_ONLY)
#define OMNICONN_IMPLEMENTATION
#endif
#include <omniconn.h>
#include <omniconn_shm.h>
#include <stdio.h>
#include <string.h>

static int roundtrip(omc_conn* c, const char* what) {
    const char text[] = "installed omniconn works";
    omc_payload p;
    omc_meta meta = { NULL, 0 };
    omc_buffer b;
    omc_result r;
    int ok;
    memset(&p, 0, sizeof(p));
    p.data = text;
    p.size = sizeof(text);
    r = omc_conn_put(c, "a", "b", "k", &p, &meta);
    if (r != OMC_OK) { fprintf(stderr, "app: %s put: %s\n", what, omc_result_name(r)); return 1; }
    r = omc_conn_get(c, "a", "b", "k", meta.data, meta.size, omc_deadline_after_ms(5000), &b);
    omc_meta_free(&meta);
    if (r != OMC_OK) { fprintf(stderr, "app: %s get: %s\n", what, omc_result_name(r)); return 1; }
    ok = b.size == sizeof(text) && memcmp(b.data, text, sizeof(text)) == 0;
    omc_buffer_release(&b);
    if (!ok) fprintf(stderr, "app: %s: payload differs\n", what);
    return !ok;
}

int main(void) {
    omc_local_desc ld;
    omc_shm_desc sd;
    omc_conn* c = NULL;
    int bad = 0;
    memset(&ld, 0, sizeof(ld));
    if (omc_local_create(&ld, &c) != OMC_OK) return 1;
    bad += roundtrip(c, "local");
    omc_conn_destroy(c);
    memset(&sd, 0, sizeof(sd));
    sd.channel = "install_test";
    sd.pool_size = 1 << 20;
    if (omc_shm_create(&sd, &c) != OMC_OK) return 1;
    bad += roundtrip(c, "shm");
    omc_conn_destroy(c);
    if (bad) return 1;
    printf("app: ok %s\n", omc_version_string());
    return 0;
}
