/* hello_producer.c - put one payload, print its metadata, wait until a consumer has read it.

   One half of the smallest complete omniconn program (hello_consumer.c is the other half).
   It creates a sender connector, puts SIZE bytes under KEY, prints the metadata as one line of
   text on stdout (the control plane here is a shell pipe; yours is a queue, an RPC, a file),
   then waits until the payload has been read before it frees everything and exits (over TCP the
   producer serves the bytes itself, so it must still be there when the consumer asks).

   Build, from the repository root:
       cc -std=c99 -O2 -I. examples/hello_producer.c -o hello_producer -lpthread -ldl
   Run:
       ./hello_producer | ./hello_consumer                  shared memory, one host
       ./hello_producer -t tcp | ./hello_consumer -t tcp    TCP (two hosts: docs/getting-started.md)
       ./hello_producer -h                                  the options and their defaults */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void) {
    fprintf(stderr,
        "usage: hello_producer [options] > metadata.txt\n"
        "  -t shm|tcp  transport                                    (default shm)\n"
        "  -k KEY      the payload's key                            (default req-42)\n"
        "  -s BYTES    payload size                                 (default 1048576)\n"
        "  -c NAME     shm: channel, the same as the consumer's     (default hello)\n"
        "  -H HOST     tcp: address to listen on and advertise      (default 127.0.0.1;\n"
        "              auto = the address of the default route)\n"
        "  -p PORT     tcp: side-channel port, data port PORT+1     (default 0: any free ports)\n"
        "  -w MS       how long to wait for the consumer            (default 30000)\n");
}

int main(int argc, char** argv) {
    const char *transport = "shm", *key = "req-42", *channel = "hello", *host = "127.0.0.1";
    long size = 1 << 20, port = 0, wait_ms = 30000;
    unsigned char* bytes = NULL;
    char* text = NULL;
    omc_conn* conn = NULL;
    omc_meta meta = {0};
    omc_payload p = {0};
    omc_result r = OMC_OK;
    const char* step = "";
    int opt, status = 1;

    while ((opt = getopt(argc, argv, "t:k:s:c:H:p:w:h")) != -1) {
        switch (opt) {
        case 't': transport = optarg; break;
        case 'k': key = optarg; break;
        case 's': size = atol(optarg); break;
        case 'c': channel = optarg; break;
        case 'H': host = optarg; break;
        case 'p': port = atol(optarg); break;
        case 'w': wait_ms = atol(optarg); break;
        default: usage(); return opt == 'h' ? 0 : 2;
        }
    }
    if (size < 1 || port < 0 || port > 65534 || (strcmp(transport, "shm") && strcmp(transport, "tcp"))) {
        usage();
        return 2;
    }

    /* 1. A sender connector. Its pool holds the payload until the consumer has read it. */
    step = "create the connector";
    if (strcmp(transport, "tcp") == 0) {
        omc_tcp_desc d = {0};                           /* zero means default everywhere */
        d.role = OMC_ROLE_SENDER;
        d.host = host;
        d.port = (uint16_t)port;
        d.data_port = (uint16_t)(port ? port + 1 : 0);
        r = omc_tcp_create(&d, &conn);
    } else {
        omc_shm_desc d = {0};
        d.role = OMC_ROLE_SENDER;
        d.channel = channel;
        d.pool_size = (uint64_t)size * 2 > (16u << 20) ? (uint64_t)size * 2 : (16u << 20);
        r = omc_shm_create(&d, &conn);                  /* reserved in /dev/shm now */
    }
    if (r != OMC_OK) goto done;

    /* 2. The payload: bytes the consumer can check. put copies them into the pool. */
    step = "allocate the payload";
    bytes = (unsigned char*)malloc((size_t)size);
    if (!bytes) { r = OMC_ERR_NO_MEMORY; goto done; }
    for (long i = 0; i < size; i++) bytes[i] = (unsigned char)(i % 251);
    p.data = bytes;
    p.size = (uint64_t)size;
    step = "put the payload";
    r = omc_conn_put(conn, "producer", "consumer", key, &p, &meta);
    if (r != OMC_OK) goto done;

    /* 3. The metadata, as one line of text, to whoever consumes the payload. */
    step = "print the metadata";
    text = (char*)malloc(omc_meta_text_size(meta.size));
    if (!text) { r = OMC_ERR_NO_MEMORY; goto done; }
    r = omc_meta_to_text(meta.data, meta.size, text, omc_meta_text_size(meta.size));
    if (r != OMC_OK) goto done;
    printf("%s\n", text);
    fflush(stdout);
    fprintf(stderr, "hello_producer: put %ld bytes under %s over %s; waiting for the consumer\n",
            size, key, transport);

    /* 4. Wait until every put of this connector was read (or cleaned up, or expired). */
    step = "see the payload consumed";
    r = omc_conn_wait_consumed(conn, omc_deadline_after_ms(wait_ms));
    if (r != OMC_OK) goto done;
    fprintf(stderr, "hello_producer: %s was consumed\n", key);
    status = 0;

done:
    if (status != 0)
        fprintf(stderr, "hello_producer: cannot %s: %s (%s)\n", step, omc_result_name(r), omc_result_str(r));
    free(text);
    omc_meta_free(&meta);
    omc_conn_destroy(conn);                             /* NULL is fine */
    free(bytes);
    return status;
}
