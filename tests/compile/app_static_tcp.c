/* app_static_tcp.c - a static executable (musl-gcc -static) asked for the remote connector: libzmq
   cannot be loaded into it, and the reason must name the fix that works there
   (OMNICONN_NO_RUNTIME_LINKING and -lzmq), not a package to install. Exit status 0 when it does. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include <stdio.h>
#include <string.h>

int main(void) {
    char why[512] = "";
    omc_result r = omc_available(OMC_FEATURE_ZMQ, why, sizeof(why));
    if (r != OMC_ERR_UNAVAILABLE) { printf("expected OMC_ERR_UNAVAILABLE, got %s\n", omc_result_name(r)); return 1; }
    if (!strstr(why, "OMNICONN_NO_RUNTIME_LINKING") || !strstr(why, "-lzmq")) { printf("the reason names no fix for a static build: %s\n", why); return 1; }
    printf("app_static_tcp: ok (%s)\n", why);
    return 0;
}
