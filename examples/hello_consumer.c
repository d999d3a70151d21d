/* hello_consumer.c - get the payload hello_producer put, check every byte, release it.

   The other half of the smallest complete omniconn program (hello_producer.c). It reads the
   producer's metadata - one line of text, from stdin or as the last argument - creates a
   receiver connector, gets the payload (a zero-copy view into the producer's shared segment,
   or the bytes pulled over TCP into this process's pool), checks it, releases it and frees
   everything. Releasing the view is what lets the producer see its payload consumed.

   Build, from the repository root:
       cc -std=c99 -O2 -I. examples/hello_consumer.c -o hello_consumer -lpthread -ldl
   Run:
       ./hello_producer | ./hello_consumer                  the metadata line arrives on stdin
       ./hello_consumer "$(cat metadata.txt)"               or as an argument
       ./hello_consumer -h                                  the options and their defaults */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void) {
    fprintf(stderr,
        "usage: hello_consumer [options] [METADATA]\n"
        "  -t shm|tcp  transport, the producer's                    (default shm)\n"
        "  -k KEY      the payload's key, the producer's            (default req-42)\n"
        "  -c NAME     shm: channel, the producer's                 (default hello)\n"
        "  -w MS       how long to wait for the payload             (default 10000)\n"
        "  METADATA    the producer's metadata line                 (default: read from stdin)\n");
}

int main(int argc, char** argv) {
    const char *transport = "shm", *key = "req-42", *channel = "hello";
    long wait_ms = 10000;
    char* line = NULL;
    size_t line_cap = 0;
    omc_conn* conn = NULL;
    omc_meta meta = {0};
    omc_buffer b = {0};
    omc_result r = OMC_OK;
    const char* step = "";
    int opt, status = 1;

    while ((opt = getopt(argc, argv, "t:k:c:w:h")) != -1) {
        switch (opt) {
        case 't': transport = optarg; break;
        case 'k': key = optarg; break;
        case 'c': channel = optarg; break;
        case 'w': wait_ms = atol(optarg); break;
        default: usage(); return opt == 'h' ? 0 : 2;
        }
    }
    if (optind + 1 < argc || (strcmp(transport, "shm") && strcmp(transport, "tcp"))) {
        usage();
        return 2;
    }

    /* 1. The metadata: text back to the binary blob put() returned (checked: CRC, bounds). */
    step = "read the metadata";
    r = OMC_ERR_INVALID_ARG;
    if (optind < argc) line = strdup(argv[optind]);
    else if (getline(&line, &line_cap, stdin) < 0) goto done;
    if (!line) goto done;
    line[strcspn(line, "\r\n")] = '\0';
    r = omc_meta_from_text(line, strlen(line), &meta);
    if (r != OMC_OK) goto done;

    /* 2. A receiver connector of the producer's transport. */
    step = "create the connector";
    if (strcmp(transport, "tcp") == 0) {
        omc_tcp_desc d = {0};                           /* zero means default everywhere */
        d.role = OMC_ROLE_RECEIVER;                     /* the metadata says where to pull from */
        r = omc_tcp_create(&d, &conn);
    } else {
        omc_shm_desc d = {0};
        d.role = OMC_ROLE_RECEIVER;                     /* a receiver creates no segment */
        d.channel = channel;
        r = omc_shm_create(&d, &conn);
    }
    if (r != OMC_OK) goto done;

    /* 3. Get it, check it, release it. */
    step = "get the payload";
    r = omc_conn_get(conn, "producer", "consumer", key, meta.data, meta.size,
                     omc_deadline_after_ms(wait_ms), &b);
    if (r != OMC_OK) goto done;
    step = "check the payload";
    r = OMC_ERR_CHECKSUM;
    for (uint64_t i = 0; i < b.size; i++)
        if (((const unsigned char*)b.data)[i] != (unsigned char)(i % 251)) goto done;
    printf("hello_consumer: got %llu bytes of %s over %s, every byte as sent\n",
           (unsigned long long)b.size, key, transport);
    status = 0;

done:
    if (status != 0)
        fprintf(stderr, "hello_consumer: cannot %s: %s (%s)\n", step, omc_result_name(r), omc_result_str(r));
    omc_buffer_release(&b);                             /* the producer sees it consumed */
    omc_meta_free(&meta);
    omc_conn_destroy(conn);                             /* NULL is fine */
    free(line);
    return status;
}
