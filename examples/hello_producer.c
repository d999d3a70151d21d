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
       ./hello_producer -t tcp --key p.key --allow c.pub    TCP with CURVE keys (omniconn keygen)
       ./hello_producer -h                                  the options and their defaults */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ALLOWED 16

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
        "  -w MS       how long to wait for the consumer            (default 30000)\n"
        "  --key FILE    tcp: this producer's secret key (NAME.key from omniconn keygen NAME):\n"
        "                CURVE on; consumers need its NAME.pub       (default: no CURVE)\n"
        "  --allow FILE  tcp, with --key: a consumer's public key (its NAME.pub) let in;\n"
        "                repeatable                                 (default: any consumer with our .pub)\n");
}

/* One CURVE key from a file omniconn keygen wrote (NAME.key or NAME.pub); 0, or -1 said why. */
static int read_key(const char* opt, const char* path, int secret, char key[OMC_CURVE_KEY_LEN + 1]) {
    size_t n = strlen(path);
    omc_result r;
    if (secret && n > 4 && strcmp(path + n - 4, ".pub") == 0) {
        fprintf(stderr, "hello_producer: %s %s: that is a public key; %s wants the secret one (NAME.key)\n", opt, path, opt);
        return -1;
    }
    if (!secret && n > 4 && strcmp(path + n - 4, ".key") == 0) {
        fprintf(stderr, "hello_producer: %s %s: that is a secret key; %s wants a public one (NAME.pub; a .key never leaves its host)\n", opt, path, opt);
        return -1;
    }
    r = omc_tcp_read_key(path, key);
    if (r == OMC_ERR_NOT_FOUND)
        fprintf(stderr, "hello_producer: %s %s: cannot open the key file (make a pair with: omniconn keygen NAME)\n", opt, path);
    else if (r != OMC_OK)
        fprintf(stderr, "hello_producer: %s %s: does not hold one 40-character Z85 CURVE key (%s)\n", opt, path, omc_result_str(r));
    return r == OMC_OK ? 0 : -1;
}

int main(int argc, char** argv) {
    static const struct option longs[] = { { "key", required_argument, NULL, 'K' }, { "allow", required_argument, NULL, 'A' },
                                           { "host", required_argument, NULL, 'H' }, { "port", required_argument, NULL, 'p' },
                                           { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
    const char *transport = "shm", *key = "req-42", *channel = "hello", *host = "127.0.0.1";
    const char *key_file = NULL, *allow_files[MAX_ALLOWED];
    char secret[OMC_CURVE_KEY_LEN + 1], allowed[MAX_ALLOWED][OMC_CURVE_KEY_LEN + 1];
    const char* allowed_keys[MAX_ALLOWED];
    int nallowed = 0;
    long size = 1 << 20, port = 0, wait_ms = 30000;
    unsigned char* bytes = NULL;
    char* text = NULL;
    omc_conn* conn = NULL;
    omc_meta meta = {0};
    omc_payload p = {0};
    omc_result r = OMC_OK;
    const char* step = "";
    int opt, status = 1;

    while ((opt = getopt_long(argc, argv, "t:k:s:c:H:p:w:h", longs, NULL)) != -1) {
        switch (opt) {
        case 't': transport = optarg; break;
        case 'k': key = optarg; break;
        case 's': size = atol(optarg); break;
        case 'c': channel = optarg; break;
        case 'H': host = optarg; break;
        case 'p': port = atol(optarg); break;
        case 'w': wait_ms = atol(optarg); break;
        case 'K': key_file = optarg; break;
        case 'A':
            if (nallowed == MAX_ALLOWED) { fprintf(stderr, "hello_producer: at most %d --allow\n", MAX_ALLOWED); return 2; }
            allow_files[nallowed++] = optarg;
            break;
        default: usage(); return opt == 'h' ? 0 : 2;
        }
    }
    if (size < 1 || port < 0 || port > 65534 || (strcmp(transport, "shm") && strcmp(transport, "tcp")) ||
        (optind < argc)) {
        usage();
        return 2;
    }
    if ((key_file || nallowed) && strcmp(transport, "tcp") != 0) {
        fprintf(stderr, "hello_producer: --key and --allow are for -t tcp (shared memory stays on this host)\n");
        return 2;
    }
    if (nallowed && !key_file) {
        fprintf(stderr, "hello_producer: --allow needs --key (the allow-list is part of CURVE)\n");
        return 2;
    }
    if (key_file && read_key("--key", key_file, 1, secret) != 0) return 2;
    for (int i = 0; i < nallowed; i++) {
        if (read_key("--allow", allow_files[i], 0, allowed[i]) != 0) return 2;
        allowed_keys[i] = allowed[i];
    }

    /* 1. A sender connector. Its pool holds the payload until the consumer has read it. */
    step = "create the connector";
    if (strcmp(transport, "tcp") == 0) {
        omc_tcp_desc d = {0};                           /* zero means default everywhere */
        d.role = OMC_ROLE_SENDER;
        d.host = host;
        d.port = (uint16_t)port;
        d.data_port = (uint16_t)(port ? port + 1 : 0);
        d.curve.secret_key = key_file ? secret : NULL;  /* CURVE on: only holders of our .pub */
        d.curve.allowed_clients = nallowed ? allowed_keys : NULL;   /* ... and of these keys */
        d.curve.allowed_count = (uint32_t)nallowed;
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
    fprintf(stderr, "hello_producer: put %ld bytes under %s over %s%s; waiting for the consumer\n",
            size, key, transport, key_file ? " with CURVE" : "");

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
