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
       ./hello_consumer -t tcp --server-key p.pub --key c.key   TCP with CURVE keys
       ./hello_consumer -h                                  the options and their defaults */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"

#include <getopt.h>
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
        "  --server-key FILE  tcp: the producer's public key (its NAME.pub): CURVE on\n"
        "                     (needed when the producer runs with --key)   (default: no CURVE)\n"
        "  --key FILE         tcp: this consumer's secret key (NAME.key from omniconn keygen NAME;\n"
        "                     the producer's --allow lists its NAME.pub)   (default: a fresh one)\n"
        "  METADATA    the producer's metadata line                 (default: read from stdin)\n");
}

/* One CURVE key from a file omniconn keygen wrote (NAME.key or NAME.pub); 0, or -1 said why. */
static int read_key(const char* opt, const char* path, int secret, char key[OMC_CURVE_KEY_LEN + 1]) {
    size_t n = strlen(path);
    omc_result r;
    if (secret && n > 4 && strcmp(path + n - 4, ".pub") == 0) {
        fprintf(stderr, "hello_consumer: %s %s: that is a public key; %s wants the secret one (NAME.key)\n", opt, path, opt);
        return -1;
    }
    if (!secret && n > 4 && strcmp(path + n - 4, ".key") == 0) {
        fprintf(stderr, "hello_consumer: %s %s: that is a secret key; %s wants a public one (NAME.pub; a .key never leaves its host)\n", opt, path, opt);
        return -1;
    }
    r = omc_tcp_read_key(path, key);
    if (r == OMC_ERR_NOT_FOUND)
        fprintf(stderr, "hello_consumer: %s %s: cannot open the key file (make a pair with: omniconn keygen NAME)\n", opt, path);
    else if (r != OMC_OK)
        fprintf(stderr, "hello_consumer: %s %s: does not hold one 40-character Z85 CURVE key (%s)\n", opt, path, omc_result_str(r));
    return r == OMC_OK ? 0 : -1;
}

int main(int argc, char** argv) {
    static const struct option longs[] = { { "key", required_argument, NULL, 'K' }, { "server-key", required_argument, NULL, 'S' },
                                           { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
    const char *transport = "shm", *key = "req-42", *channel = "hello";
    const char *key_file = NULL, *server_file = NULL;
    char secret[OMC_CURVE_KEY_LEN + 1], server[OMC_CURVE_KEY_LEN + 1];
    long wait_ms = 10000;
    char* line = NULL;
    size_t line_cap = 0;
    omc_conn* conn = NULL;
    omc_meta meta = {0};
    omc_buffer b = {0};
    omc_result r = OMC_OK;
    const char* step = "";
    int opt, status = 1;

    while ((opt = getopt_long(argc, argv, "t:k:c:w:h", longs, NULL)) != -1) {
        switch (opt) {
        case 't': transport = optarg; break;
        case 'k': key = optarg; break;
        case 'c': channel = optarg; break;
        case 'w': wait_ms = atol(optarg); break;
        case 'K': key_file = optarg; break;
        case 'S': server_file = optarg; break;
        default: usage(); return opt == 'h' ? 0 : 2;
        }
    }
    if (optind + 1 < argc || (strcmp(transport, "shm") && strcmp(transport, "tcp"))) {
        usage();
        return 2;
    }
    if ((key_file || server_file) && strcmp(transport, "tcp") != 0) {
        fprintf(stderr, "hello_consumer: --key and --server-key are for -t tcp (shared memory stays on this host)\n");
        return 2;
    }
    if (key_file && !server_file) {
        fprintf(stderr, "hello_consumer: --key needs --server-key (the producer's NAME.pub)\n");
        return 2;
    }
    if (server_file && read_key("--server-key", server_file, 0, server) != 0) return 2;
    if (key_file && read_key("--key", key_file, 1, secret) != 0) return 2;

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
        d.curve.server_key = server_file ? server : NULL;   /* CURVE on: the producer proves it */
        d.curve.secret_key = key_file ? secret : NULL;      /* who we are to its allow-list */
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
    if (r == OMC_ERR_AUTH)                              /* a CURVE handshake the producer refused */
        fprintf(stderr, "hello_consumer: the producer refused our keys: --server-key is not its NAME.pub, "
                        "or our --key's NAME.pub is not on its --allow list\n");
    else if ((r == OMC_ERR_CONNECTION || r == OMC_ERR_TIMEOUT) && !server_file && strcmp(step, "get the payload") == 0)
        fprintf(stderr, "hello_consumer: if the producer runs with --key, give us its NAME.pub with --server-key\n");
    omc_buffer_release(&b);                             /* the producer sees it consumed */
    omc_meta_free(&meta);
    omc_conn_destroy(conn);                             /* NULL is fine */
    free(line);
    return status;
}
