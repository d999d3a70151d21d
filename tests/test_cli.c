/* The command-line tool (tools/omniconn_cli.c, compiled into this binary without its main()):
   `help` and `version`; `bench` over the same-process, shared-memory and TCP transports (table,
   JSON, the plot with and without gnuplot, bad arguments named in the message, RDMA unavailable,
   the memory it reserves said first and refused when not there, --duration, copy puts, pinning,
   fan-out readers,
   Gb/s, message rate and latency percentiles, its segment removed on SIGTERM, two hosts over
   loopback), and `doctor` (a
   clean config, port collisions, a broken config, an RDMA config on a host without RDMA, segments
   left by a dead owner, --sweep and the free space counted after it, key files given as options
   or named by a config), `keygen` (modes, refusal to overwrite, a CURVE transfer from the files)
   and docs/getting-started.md's key step run as printed. Every run is a child process with its
   output captured. */
#define OMNICONN_CLI_NO_MAIN
#include "tools/omniconn_cli.c"         /* defines OMNICONN_IMPLEMENTATION, includes the headers */
#include "omc_test.h"

OMC_TEST_TSAN_IGNORE_LIBZMQ()    /* libzmq is not instrumented: see omc_test.h */

static const char* repo_path(const char* rel) {
    static char buf[4][1024];
    static int next;
    char* b = buf[next++ & 3];
    const char* f = __FILE__;
    const char* slash = strrchr(f, '/');
    if (slash) snprintf(b, 1024, "%.*s/../%s", (int)(slash - f), f, rel);
    else snprintf(b, 1024, "../%s", rel);
    return b;
}

typedef struct cli_run {
    int status;
    char out[65536];
} cli_run;

/* omniconn ARGS... in a child (stdout and stderr captured); path_env, if set, replaces $PATH. */
static void cli(cli_run* res, const char* path_env, const char* const* args) {
    int fds[2], st = 0;
    size_t len = 0;
    pid_t pid;
    memset(res, 0, sizeof(*res));
    if (pipe(fds) != 0) { res->status = -1; return; }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        char* argv[32];
        int argc = 0;
        close(fds[0]);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[1]);
        if (path_env) setenv("PATH", path_env, 1);
        argv[argc++] = (char*)"omniconn";
        while (args[argc - 1] && argc < 31) { argv[argc] = (char*)args[argc - 1]; argc++; }
        argv[argc] = NULL;
        exit(omniconn_main(argc, argv));
    }
    close(fds[1]);
    for (;;) {
        ssize_t k = read(fds[0], res->out + len, sizeof(res->out) - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
        if (len == sizeof(res->out) - 1) len = 0;
    }
    res->out[len] = '\0';
    close(fds[0]);
    waitpid(pid, &st, 0);
    res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (strstr(res->out, "Sanitizer") || strstr(res->out, "runtime error:")) {
        OMC_TEST_FAIL();
        fprintf(stderr, "  the tool reported a sanitizer error:\n%s\n", res->out);
    }
}

static int has(const cli_run* r, const char* s) { return strstr(r->out, s) != NULL; }

static void show_if(const cli_run* r, int bad) {
    if (bad) fprintf(stderr, "  ---- omniconn output (exit %d) ----\n%s  ----\n", r->status, r->out);
}

static char* slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    char* buf;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (char*)malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The JSON has one result per size, each with a positive throughput and latencies. */
static int json_ok(const char* path, const char* transport, int sizes) {
    char* j = slurp(path);
    char want[64];
    const char* p;
    int n = 0, ok;
    if (!j) return 0;
    snprintf(want, sizeof(want), "\"transport\": \"%s\"", transport);
    ok = strstr(j, want) != NULL && strstr(j, "\"tool\": \"omniconn bench\"") != NULL;
    for (p = strstr(j, "{\"size\": "); p; p = strstr(p + 1, "{\"size\": ")) {
        double gbps = 0, p50 = 0;
        const char* g = strstr(p, "\"gbps\": ");
        const char* l = strstr(p, "\"lat_p50_us\": ");
        if (!g || !l || sscanf(g + 8, "%lf", &gbps) != 1 || sscanf(l + 14, "%lf", &p50) != 1 || !(gbps > 0) || !(p50 > 0)) ok = 0;
        n++;
    }
    free(j);
    return ok && n == sizes;
}

/* ---- bench ---------------------------------------------------------------------------------- */

/* A private directory on tmpfs, so the checks see only what the test puts there. */
static const char* private_shm_dir(void) {
    static char dir[64];         /* one at a time */
    snprintf(dir, sizeof(dir), "/dev/shm/omc_cli_XXXXXX");
    return mkdtemp(dir);
}

static void remove_dir(const char* dir) {
    DIR* d = opendir(dir);
    struct dirent* de;
    char path[512];
    if (!d) return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* The bench runs put their segments in a private directory too: other programs on the host sweep
   /dev/shm, and a sweep that misjudged a live segment would fail a run for reasons not its own. */

static void bench_small(const char* transport) {
    static cli_run r;
    char json[64];
    int bad;
    const char* dir = private_shm_dir();
    REQUIRE(dir);
    snprintf(json, sizeof(json), "/tmp/omc_cli_%ld_%s.json", (long)getpid(), transport);
    {
        const char* args[] = { "bench", "--transport", transport, "--sizes", "4K,256K", "--iters", "40", "--json", json, "--shm-dir", dir, NULL };
        cli(&r, NULL, args);
    }
    bad = r.status != 0 || !has(&r, "4 KiB") || !has(&r, "256 KiB") || !has(&r, "p99.9") || !has(&r, "reserving ") ||
          !has(&r, "GB/s = 10^9 bytes/s") || !json_ok(json, transport, 2);
    CHECK(!bad);
    show_if(&r, bad);
    unlink(json);
    remove_dir(dir);
}

OMC_TEST(bench_local) { bench_small("local"); }
OMC_TEST(bench_shm) { bench_small("shm"); }
OMC_TEST(bench_tcp) { bench_small("tcp"); }

OMC_TEST(bench_plot_with_and_without_gnuplot) {
    static cli_run r;
    char png[64], json[64];
    const char* dir = private_shm_dir();
    REQUIRE(dir);
    snprintf(png, sizeof(png), "/tmp/omc_cli_%ld.png", (long)getpid());
    snprintf(json, sizeof(json), "/tmp/omc_cli_%ld_plot.json", (long)getpid());
    unlink(png);
    if (in_path("gnuplot")) {
        const char* args[] = { "bench", "--sizes", "4K,64K", "--iters", "20", "--plot", png, "--shm-dir", dir, NULL };
        char* img;
        int bad;
        cli(&r, NULL, args);
        img = slurp(png);
        bad = r.status != 0 || !img || memcmp(img, "\x89PNG", 4) != 0 || !has(&r, "plot written to");
        CHECK(!bad);
        show_if(&r, bad);
        free(img);
        unlink(png);
    } else printf("  (gnuplot is not installed here: only the path without it is tested)\n");
    {
        /* no gnuplot in $PATH: the plot is skipped with a clear message, the rest still works */
        const char* args[] = { "bench", "--sizes", "4K", "--iters", "20", "--plot", png, "--json", json, "--shm-dir", dir, NULL };
        int bad;
        cli(&r, "/nonexistent", args);
        bad = r.status != 0 || !has(&r, "gnuplot not found") || access(png, F_OK) == 0 || !json_ok(json, "shm", 1);
        CHECK(!bad);
        show_if(&r, bad);
        unlink(json);
    }
    remove_dir(dir);
}

OMC_TEST(bench_bad_arguments) {
    static cli_run r;
    {
        const char* args[] = { "bench", "--sizes", "4X", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "'4X' is not a size"));
    }
    {
        const char* args[] = { "bench", "--transport", "pigeon", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "unknown transport 'pigeon'"));
    }
    {
        const char* args[] = { "bench", "--iters", "0", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--iters '0' is not a positive number"));
    }
    {
        const char* args[] = { "bench", "--frobnicate", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "omniconn bench: unknown option '--frobnicate'"));
    }
    {
        const char* args[] = { "bench", "--json", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "option '--json' needs a value"));
    }
    {
        const char* args[] = { "bench", "127.0.0.1", "extra", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "unexpected argument 'extra'"));
    }
    {
        const char* args[] = { "bench", "no-such-host.invalid", NULL };    /* a word where a host goes: named */
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "omniconn bench: 'no-such-host.invalid': "));
    }
    {
        const char* args[] = { "bench", "--put", "sideways", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--put 'sideways' is not copy or zero-copy"));
    }
    {
        const char* args[] = { "bench", "--cpus", "0", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--cpus '0' is not two CPU numbers"));
    }
    {
        const char* args[] = { "bench", "--readers", "0", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--readers '0' is not a number of readers"));
    }
    {
        const char* args[] = { "bench", "--inflight", "0", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--inflight '0' is not a number of transfers"));
    }
    {
        const char* args[] = { "bench", "--batch", "0", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--batch '0' is not a number of gets per batch (1..64)"));
    }
    {
        const char* args[] = { "bench", "--batch", "65", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--batch '65' is not a number of gets per batch"));
    }
    {
        const char* args[] = { "bench", "--duration", "-1", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--duration '-1' is not a number of seconds"));
    }
    {
        const char* args[] = { "bench", "--sizes", "1M", "--pool", "64K", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--pool 64 KiB cannot hold one 1 MiB payload"));
    }
    {
        const char* args[] = { "doctor", "--frobnicate", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "omniconn doctor: unknown option '--frobnicate'"));
    }
    {
        const char* args[] = { "bench", "-h", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 0 && has(&r, "(default shm)") && has(&r, "(default 4K,64K,1M,16M)"));
    }
    {
        const char* args[] = { "frobnicate", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "unknown command 'frobnicate'"));
    }
}

/* The multi-rail bench options: bad values named; a timeline of the throughput phase in slices,
   in the table and the JSON (over shared memory: the slices do not need RDMA). */
OMC_TEST(bench_rail_options_and_timeline) {
    static cli_run r;
    char json[256], *text;
    FILE* f;
    long n;
    {
        const char* args[] = { "bench", "--transport", "rdma", "--rails", "9", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--rails '9' is not a number of rails"));
    }
    {
        const char* args[] = { "bench", "--devices", "rxe0", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--devices, --rails, --rdma-addr and --gid-index are for --transport rdma"));
    }
    {
        const char* args[] = { "bench", "--transport", "rdma", "--gid-index", "-1", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--gid-index '-1' is not a GID index"));
    }
    {
        const char* args[] = { "bench", "--timeline", "0", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--timeline '0' is not a slice length"));
    }
    {
        const char* args[] = { "bench", "--timeline", "0.5", "--flap", "rail1,5,3", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--flap 'rail1,5,3' is not NETDEV,DOWN,UP"));
    }
    {   /* the loopback is never taken down (a bench on one host would cut its own channel) */
        const char* args[] = { "bench", "--timeline", "0.5", "--flap", "lo,1,2", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--flap refuses the loopback device 'lo'"));
    }
    {
        const char* args[] = { "bench", "--flap", "rail1,1,2", "--duration", "5", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--flap needs --timeline"));
    }
    {
        const char* args[] = { "bench", "--timeline", "0.5", "--flap", "rail1,1,2", "--duration", "2", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "the throughput phase must outlast the link's return"));
    }
    snprintf(json, sizeof(json), "/tmp/omc_cli_timeline_%ld.json", (long)getpid());
    {
        const char* args[] = { "bench", "--transport", "shm", "--sizes", "64K", "--duration", "1", "--timeline", "0.25", "--json", json, NULL };
        cli(&r, NULL, args);
        CHECK_EQ(r.status, 0);
        CHECK(has(&r, "timeline (0.25 s slices"));
        CHECK(has(&r, "     0.25  "));                   /* the second slice's row */
    }
    f = fopen(json, "r");
    REQUIRE(f);
    text = (char*)calloc(1, 1 << 20);
    n = text ? (long)fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    unlink(json);
    REQUIRE(text);
    CHECK(n > 0 && strstr(text, "\"timeline\": {\"slice_s\": 0.250") && strstr(text, "\"flap\": null") && strstr(text, "{\"t_s\": 0.250"));
    CHECK(strstr(text, "\"inflight\": 4") != NULL);       /* --timeline counts acknowledged transfers */
    free(text);
}

/* doctor --sysfs: the NIC ranking by topology over a fake sysfs tree (two PCI devices on two NUMA
   nodes, a software device on a veth), nearest first with the reason, for --numa and --gpu. */
static void fake_sysfs_file(const char* root, const char* rel, const char* text) {
    char p[512], cmd[1200];
    FILE* f;
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", p);
    if (system(cmd) != 0) return;
    f = fopen(p, "w");
    if (f) { fputs(text, f); fclose(f); }
}
static void fake_sysfs_link(const char* root, const char* rel, const char* target) {
    char p[256], t[256], cmd[1200];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    snprintf(t, sizeof(t), "%s/%s", root, target);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\" '%s' && ln -s '%s' '%s'", p, t, t, p);
    if (system(cmd) != 0) fprintf(stderr, "  cannot make %s\n", p);
}

OMC_TEST(doctor_ranks_nics_by_topology) {
    static cli_run r;
    char root[64], cmd[128];
    const char *a, *b, *c;
    snprintf(root, sizeof(root), "/tmp/omc-cli-sysfs-XXXXXX");
    REQUIRE(mkdtemp(root));
    fake_sysfs_file(root, "devices/pci0000:00/0000:00:02.0/numa_node", "0\n");
    fake_sysfs_file(root, "devices/pci0000:80/0000:80:02.0/numa_node", "1\n");
    fake_sysfs_file(root, "devices/pci0000:80/0000:80:03.0/numa_node", "1\n");       /* a GPU beside mlx5_1 */
    fake_sysfs_link(root, "class/infiniband/mlx5_0/device", "devices/pci0000:00/0000:00:02.0");
    fake_sysfs_link(root, "class/infiniband/mlx5_1/device", "devices/pci0000:80/0000:80:02.0");
    fake_sysfs_link(root, "bus/pci/devices/0000:80:03.0", "devices/pci0000:80/0000:80:03.0");
    fake_sysfs_file(root, "class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "veth0\n");
    fake_sysfs_file(root, "class/net/veth0/mtu", "1500\n");
    {
        const char* args[] = { "doctor", "--sysfs", root, "--numa", "1", NULL };
        cli(&r, NULL, args);
        CHECK_EQ(r.status, 0);
        CHECK(has(&r, "rdma topology 3 devices, nearest first for memory on NUMA node 1"));
        a = strstr(r.out, "1. mlx5_1: NUMA node 1, memory on node 1 [same NUMA node]");
        b = strstr(r.out, "2. rxe0 (software device on veth0): NUMA node of the device not known");
        c = strstr(r.out, "3. mlx5_0: NUMA node 0, memory on node 1 (crosses sockets) [other NUMA node]");
        CHECK(a && b && c && a < b && b < c);
    }
    {
        const char* args[] = { "doctor", "--sysfs", root, "--numa", "0", NULL };
        cli(&r, NULL, args);
        CHECK(has(&r, "1. mlx5_0: NUMA node 0, memory on node 0 [same NUMA node]"));
        CHECK(has(&r, "3. mlx5_1: NUMA node 1, memory on node 0 (crosses sockets)"));
    }
    {
        const char* args[] = { "doctor", "--sysfs", root, "--gpu", "0000:80:03.0", NULL };
        cli(&r, NULL, args);
        CHECK(has(&r, "for the GPU at 0000:80:03.0 (NUMA node 1)"));
        CHECK(has(&r, "1. mlx5_1: same PCIe root complex as the GPU, through the host bridge [same PCIe root complex]"));
    }
    {
        const char* args[] = { "doctor", "--sysfs", root, "--gpu", "0000:99:00.0", NULL };
        cli(&r, NULL, args);
        CHECK(has(&r, "WARN  rdma topology no PCI device 0000:99:00.0"));
    }
    {
        const char* args[] = { "doctor", "--numa", "x", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--numa 'x' is not a NUMA node"));
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    CHECK_EQ(system(cmd), 0);
}

OMC_TEST(help_and_version_are_listed) {
    static cli_run r;
    {
        const char* args[] = { "help", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 0 && has(&r, "omniconn help") && has(&r, "omniconn version") && has(&r, "omniconn bench") && has(&r, "omniconn doctor") &&
              has(&r, "omniconn keygen"));
    }
    {
        const char* args[] = { "help", "bench", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 0 && has(&r, "--duration SEC") && has(&r, "--force"));
    }
    {
        const char* args[] = { "help", "pigeon", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "unknown command 'pigeon'"));
    }
    {
        const char* args[] = { "version", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 0 && has(&r, omc_version_string()));
    }
}

/* A pool far beyond this host's memory: said, refused before anything is reserved, unless forced
   (not tried: it would reserve it). */
OMC_TEST(bench_refuses_more_memory_than_available) {
    static cli_run r;
    const char* args[] = { "bench", "--transport", "tcp", "--sizes", "4K", "--pool", "1000G", NULL };
    int bad;
    cli(&r, NULL, args);
    bad = r.status != 1 || !has(&r, "reserving 2.0 TiB") || !has(&r, "available (MemAvailable); use smaller --sizes or --pool, or --force") ||
          has(&r, "setting up");
    CHECK(!bad);
    show_if(&r, bad);
}

/* --duration, copy puts, pinning, Gb/s, at most 4 in flight, 3 readers per payload: the table and the JSON say so; message rate and every
   latency percentile are there and ordered. */
OMC_TEST(bench_duration_copy_put_pinned_gbits) {
    static cli_run r;
    char json[64];
    char* j;
    double rate = 0, mn = 0, p50 = 0, p999 = 0, mx = 0;
    const char* q;
    int bad;
    const char* dir = private_shm_dir();
    REQUIRE(dir);
    snprintf(json, sizeof(json), "/tmp/omc_cli_%ld_dur.json", (long)getpid());
    {
        const char* args[] = { "bench", "--sizes", "4K", "--duration", "0.2", "--put", "copy", "--cpus", "0,0", "--gbits", "--inflight", "4",
                               "--readers", "3", "--json", json, "--shm-dir", dir, NULL };
        cli(&r, NULL, args);
    }
    j = slurp(json);
    bad = r.status != 0 || !j || !has(&r, "Gb/s = 10^9 bits/s") || !has(&r, "put = copy from the caller's memory") || !has(&r, "msg/s") ||
          !has(&r, "in flight: at most 4") || !has(&r, "fan-out: 3 gets per payload");
    if (j) {
        bad |= !strstr(j, "\"put\": \"copy\"") || !strstr(j, "\"cpu_producer\": 0") || !strstr(j, "\"duration_s\": 0.200") ||
               !strstr(j, "\"inflight\": 4") || !strstr(j, "\"readers\": 3");
        const char* res = strstr(j, "\"results\"");       /* past "units", which names the same fields */
        q = res ? strstr(res, "\"msg_rate\": ") : NULL;
        bad |= !q || sscanf(q + 12, "%lf", &rate) != 1 || !(rate > 0);
        q = res ? strstr(res, "\"lat_min_us\": ") : NULL;
        bad |= !q || sscanf(q + 14, "%lf", &mn) != 1;
        q = res ? strstr(res, "\"lat_p50_us\": ") : NULL;
        bad |= !q || sscanf(q + 14, "%lf", &p50) != 1;
        q = res ? strstr(res, "\"lat_p999_us\": ") : NULL;
        bad |= !q || sscanf(q + 15, "%lf", &p999) != 1;
        q = res ? strstr(res, "\"lat_max_us\": ") : NULL;
        bad |= !q || sscanf(q + 14, "%lf", &mx) != 1;
        bad |= !(mn > 0 && mn <= p50 && p50 <= p999 && p999 <= mx);
    }
    CHECK(!bad);
    show_if(&r, bad);
    if (bad && j) fprintf(stderr, "  json: %s\n", j);
    free(j);
    unlink(json);
    remove_dir(dir);
}

/* A number after "key": in the JSON text from p on, or -1. */
static double json_number(const char* p, const char* key) {
    char want[64];
    double v = -1;
    snprintf(want, sizeof(want), "\"%s\": ", key);
    p = p ? strstr(p, want) : NULL;
    if (!p || sscanf(p + strlen(want), "%lf", &v) != 1) return -1;
    return v;
}

/* --inflight 8 --batch 8 over TCP: a window fetched in batches. The run succeeds, the JSON says
   batch 8, and every transfer of the throughput phase went through omc_conn_get_batch, in
   batches of at most 8 (the window: the producer never has more out). */
OMC_TEST(bench_tcp_window_in_batches) {
    static cli_run r;
    char json[64];
    char* j;
    const char* res;
    double iters, batches, gets, most;
    int bad;
    snprintf(json, sizeof(json), "/tmp/omc_cli_%ld_batch.json", (long)getpid());
    {
        const char* args[] = { "bench", "--transport", "tcp", "--sizes", "4K", "--inflight", "8", "--batch", "8", "--iters", "200",
                               "--no-progress", "--json", json, NULL };
        cli(&r, NULL, args);
    }
    j = slurp(json);
    res = j ? strstr(j, "\"results\"") : NULL;
    iters = json_number(res, "iters");
    batches = json_number(res, "batches");
    gets = json_number(res, "batched_gets");
    most = json_number(res, "batch_max");
    bad = r.status != 0 || !has(&r, "gets in batches of up to 8") || !j || !strstr(j, "\"batch\": 8") || !strstr(j, "\"inflight\": 8") ||
          !json_ok(json, "tcp", 1) || !(iters > 0) || gets != iters || !(batches >= 1 && batches <= gets) || !(most >= 1 && most <= 8);
    CHECK(!bad);
    show_if(&r, bad);
    if (bad && j) fprintf(stderr, "  json: %s\n", j);
    free(j);
    unlink(json);
}

/* A window of 16 over a pool that holds 3 payloads: the producer writes its metadata messages
   half a window at a time, so an alloc that waits for pool space must first send the messages
   it holds (else the consumer never sees them, never releases, and the alloc's deadline fails
   the run). With and without --batch; every transfer counted. */
OMC_TEST(bench_window_larger_than_the_pool) {
    static cli_run r;
    const char* batch[] = { NULL, "16" };
    int k;
    const char* dir = private_shm_dir();
    REQUIRE(dir);
    for (k = 0; k < 2; k++) {
        char json[64];
        char* j;
        int bad;
        snprintf(json, sizeof(json), "/tmp/omc_cli_%ld_pool%d.json", (long)getpid(), k);
        {
            const char* args[] = { "bench", "--transport", "shm", "--sizes", "1M", "--pool", "3M", "--inflight", "16", "--iters", "300",
                                   "--no-progress", "--shm-dir", dir, "--json", json, batch[k] ? "--batch" : NULL, batch[k], NULL };
            cli(&r, NULL, args);
        }
        j = slurp(json);
        bad = r.status != 0 || !json_ok(json, "shm", 1) || json_number(j ? strstr(j, "\"results\"") : NULL, "iters") != 300 ||
              (batch[k] && json_number(j ? strstr(j, "\"results\"") : NULL, "batched_gets") != 300);
        CHECK(!bad);
        show_if(&r, bad);
        free(j);
        unlink(json);
    }
    remove_dir(dir);
}

/* Two hosts, here both on loopback: omniconn bench --serve (the producer, which prints the
   results) and omniconn bench 127.0.0.1 (the consumer). */
OMC_TEST(bench_two_hosts_serve_and_connect) {
    static cli_run r;
    char out[64], port[16], *text;
    pid_t server;
    int st = 0, i, bad;
    snprintf(out, sizeof(out), "/tmp/omc_cli_%ld_serve.txt", (long)getpid());
    snprintf(port, sizeof(port), "%d", omc_test_free_port_base(1));
    fflush(stdout);
    fflush(stderr);
    server = fork();
    if (server == 0) {
        char* argv[] = { (char*)"omniconn", (char*)"bench", (char*)"--serve", (char*)"--transport", (char*)"tcp", (char*)"--sizes", (char*)"4K,64K",
                         (char*)"--iters", (char*)"30", (char*)"--port", port, NULL };
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(fd, 2);
        alarm(60);
        exit(omniconn_main(11, argv));
    }
    for (i = 0; i < 100; i++) {                 /* until the producer listens */
        const char* args[] = { "bench", "127.0.0.1", "--port", port, NULL };
        cli(&r, NULL, args);
        if (!has(&r, "no producer on")) break;
        usleep(100000);
    }
    waitpid(server, &st, 0);
    text = slurp(out);
    bad = r.status != 0 || !has(&r, "consumer for the tcp producer on 127.0.0.1") || !has(&r, "the producer on 127.0.0.1 has the results") ||
          !text || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !strstr(text, "two hosts") || !strstr(text, "round trip") ||
          !strstr(text, "4 KiB") || !strstr(text, "64 KiB");
    CHECK(!bad);
    show_if(&r, bad);
    if (bad && text) fprintf(stderr, "  ---- the producer ----\n%s\n", text);
    free(text);
    unlink(out);
    {
        const char* args[] = { "bench", "--serve", "--transport", "shm", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "--serve needs --transport tcp or rdma"));
    }
    {
        const char* args[] = { "bench", "127.0.0.1", "--port", "1", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 1 && has(&r, "no producer on 127.0.0.1 port 1"));
    }
}

OMC_TEST(bench_rdma_says_why) {
    static cli_run r;
    const char* args[] = { "bench", "--transport", "rdma", "--sizes", "4K", "--iters", "10", NULL };
    int bad;
    cli(&r, NULL, args);
    if (r.status == 0) { printf("  (rdma bench ran: a device is present)\n"); return; }
    bad = r.status != 1 || !has(&r, "omniconn bench: rdma: ");
    CHECK(!bad);
    show_if(&r, bad);
}

/* ---- doctor --------------------------------------------------------------------------------- */

OMC_TEST(doctor_clean_config) {
    static cli_run r;
    const char* dir = private_shm_dir();
    int bad;
    REQUIRE(dir);
    {
        const char* args[] = { "doctor", "--config", repo_path("examples/configs/pipeline3_shm.yaml"), "--shm-dir", dir, NULL };
        cli(&r, NULL, args);
    }
    /* shm edges only: no port, no RDMA needed (at most WARNs about RDMA on this host) */
    bad = r.status != 0 || !has(&r, "OK    config        ") || !has(&r, "3 stages, 2 edges (2 shm, 0 tcp, 0 rdma)") ||
          !has(&r, "OK    ports         no TCP/RDMA edges") || !has(&r, "reserve 128 MiB") || !has(&r, " 0 FAIL");
    CHECK(!bad);
    show_if(&r, bad);
    remove_dir(dir);
}

OMC_TEST(doctor_tcp_config_lists_ports) {
    static cli_run r;
    const char* args[] = { "doctor", "--config", repo_path("examples/configs/pipeline3_tcp.yaml"), NULL };
    int bad;
    cli(&r, NULL, args);
    bad = !has(&r, "OK    ports         6 listeners") || !has(&r, "OK    host          host: auto gives ") || !has(&r, "OK    libzmq");
    CHECK(!bad);
    show_if(&r, bad);
}

/* An edge on the host's address without CURVE fails the doctor (insecure: true only warns);
   CURVE without an allow-list warns; the shipped TCP config (allow-list) says neither. */
OMC_TEST(doctor_flags_open_listeners_and_curve_without_an_allow_list) {
    static cli_run r;
    static const char* const extras[3] = { "{host: auto}", "{host: auto, insecure: true}", "{host: auto, curve_server_secret_key_file: k}" };
    static const char* const want[3] = { "FAIL  security      connector 'c' (line 1): host auto without CURVE: its sending stages are refused",
                                         "WARN  security      connector 'c' (line 1): host auto without CURVE (insecure: true)",
                                         "WARN  security      connector 'c' (line 1): CURVE without an allow-list" };
    char path[64], text[512];
    int k, bad;
    for (k = 0; k < 3; k++) {
        FILE* f;
        int fd;
        snprintf(path, sizeof(path), "/tmp/omc_doc_XXXXXX.yaml");
        fd = mkstemps(path, 5);
        REQUIRE(fd >= 0);
        f = fdopen(fd, "w");
        REQUIRE(f);
        snprintf(text, sizeof(text), "runtime: {connectors: {c: {name: tcp, extra: %s}}}\nstage_args:\n"
                 "  - {stage_id: 0, output_connectors: {to_stage_1: c}}\n  - {stage_id: 1}\n", extras[k]);
        fputs(text, f);
        fclose(f);
        {
            const char* args[] = { "doctor", "--config", path, NULL };
            cli(&r, NULL, args);
        }
        bad = !has(&r, want[k]) || (k == 0 && r.status != 1);
        CHECK(!bad);
        show_if(&r, bad);
        unlink(path);
    }
    {
        const char* args[] = { "doctor", "--config", repo_path("examples/configs/pipeline3_tcp.yaml"), NULL };
        cli(&r, NULL, args);
    }
    bad = has(&r, "security");
    CHECK(!bad);
    show_if(&r, bad);
}

/* ---- keygen and the key checks of doctor ---------------------------------------------------- */

/* A private scratch directory; PATH(dir, name) joins. */
static const char* key_dir(void) {
    static char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/omc_keys_XXXXXX");
    return mkdtemp(dir);
}

static const char* in_dir(const char* dir, const char* name) {
    static char buf[16][512];
    static int next;
    char* b = buf[next++ & 15];
    snprintf(b, 512, "%s/%s", dir, name);
    return b;
}

static void remove_tree(const char* dir) {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "  (could not remove %s)\n", dir);
}

static mode_t file_mode(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 ? (st.st_mode & 07777) : (mode_t)-1;
}

static void keygen(cli_run* r, const char* dir, const char* name, int force) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    {
        const char* args[] = { "keygen", force ? "--force" : path, force ? path : NULL, NULL };
        cli(r, NULL, args);
    }
}

/* A put and a get over TCP on loopback with CURVE from key files: the sender reads its secret
   key and the allow-list (client .pub files), the receiver its secret key and the sender's .pub.
   Returns the get's result. */
static omc_result curve_transfer(const char* sender_key, const char* const* allowed, uint32_t nallowed, const char* client_key,
                                 const char* server_pub, int64_t deadline_ms) {
    char sk[OMC_CURVE_KEY_LEN + 1], ck[OMC_CURVE_KEY_LEN + 1], sp[OMC_CURVE_KEY_LEN + 1], al[4][OMC_CURVE_KEY_LEN + 1];
    const char* alp[4];
    omc_tcp_desc sd, rd;
    omc_conn *s = NULL, *c = NULL;
    omc_meta meta = {0};
    omc_buffer b = {0};
    omc_payload p = {0};
    uint8_t bytes[100000];
    uint32_t i;
    omc_result r;
    memset(&sd, 0, sizeof(sd));
    memset(&rd, 0, sizeof(rd));
    if (omc_tcp_read_key(sender_key, sk) != OMC_OK || omc_tcp_read_key(client_key, ck) != OMC_OK || omc_tcp_read_key(server_pub, sp) != OMC_OK)
        return OMC_ERR_MALFORMED;
    for (i = 0; i < nallowed && i < 4; i++) {
        if (omc_tcp_read_key(allowed[i], al[i]) != OMC_OK) return OMC_ERR_MALFORMED;
        alp[i] = al[i];
    }
    sd.role = OMC_ROLE_SENDER;
    sd.curve.secret_key = sk;
    sd.curve.allowed_clients = nallowed ? alp : NULL;
    sd.curve.allowed_count = nallowed;
    rd.role = OMC_ROLE_RECEIVER;
    rd.curve.secret_key = ck;
    rd.curve.server_key = sp;
    for (i = 0; i < sizeof(bytes); i++) bytes[i] = (uint8_t)(i * 7 + 1);
    p.data = bytes;
    p.size = sizeof(bytes);
    r = omc_tcp_create(&sd, &s);
    if (r == OMC_OK) r = omc_tcp_create(&rd, &c);
    if (r == OMC_OK) r = omc_conn_put(s, "a", "b", "k", &p, &meta);
    if (r == OMC_OK) r = omc_conn_get(c, "a", "b", "k", meta.data, meta.size, omc_deadline_after_ms(deadline_ms), &b);
    if (r == OMC_OK && (b.size != sizeof(bytes) || memcmp(b.data, bytes, sizeof(bytes)) != 0)) r = OMC_ERR_CHECKSUM;
    omc_buffer_release(&b);
    omc_meta_free(&meta);
    omc_conn_destroy(c);
    omc_conn_destroy(s);
    return r;
}

/* keygen writes NAME.key 0600 and NAME.pub, one Z85 key and a newline each, the two a pair; it
   refuses to replace either file (even one alone) unless --force, and --force makes a new pair. */
OMC_TEST(keygen_writes_a_pair_and_refuses_to_overwrite) {
    static cli_run r;
    const char* dir = key_dir();
    char *sec, *pub, *pub2, derived[OMC_CURVE_KEY_LEN + 1];
    int bad;
    REQUIRE(dir);
    umask(022);
    keygen(&r, dir, "alice", 0);
    bad = r.status != 0 || !has(&r, "alice.key (secret key, mode 0600") || !has(&r, "alice.pub (public key");
    CHECK(!bad);
    show_if(&r, bad);
    CHECK(file_mode(in_dir(dir, "alice.key")) == 0600);
    CHECK(file_mode(in_dir(dir, "alice.pub")) == 0644);
    sec = slurp(in_dir(dir, "alice.key"));
    pub = slurp(in_dir(dir, "alice.pub"));
    REQUIRE(sec && pub);
    CHECK(strlen(sec) == OMC_CURVE_KEY_LEN + 1 && sec[OMC_CURVE_KEY_LEN] == '\n');
    CHECK(strlen(pub) == OMC_CURVE_KEY_LEN + 1 && pub[OMC_CURVE_KEY_LEN] == '\n');
    sec[OMC_CURVE_KEY_LEN] = pub[OMC_CURVE_KEY_LEN] = '\0';
    REQUIRE(omc__zmq_load(NULL, 0) == OMC_OK);
    CHECK(omc__zmq_curve_public(derived, sec) == 0 && strcmp(derived, pub) == 0);    /* one pair */
    CHECK(has(&r, pub));                                                               /* the public key is printed */
    CHECK(!has(&r, sec));                                                              /* the secret one is not */

    keygen(&r, dir, "alice", 0);                                                       /* exists: refused, untouched */
    bad = r.status != 1 || !has(&r, "alice.key exists: not replaced") || !has(&r, "--force");
    CHECK(!bad);
    show_if(&r, bad);
    pub2 = slurp(in_dir(dir, "alice.pub"));
    CHECK(pub2 && strncmp(pub2, pub, OMC_CURVE_KEY_LEN) == 0);
    free(pub2);

    REQUIRE(unlink(in_dir(dir, "alice.key")) == 0);                                     /* only the .pub left: still refused */
    keygen(&r, dir, "alice", 0);
    CHECK(r.status == 1 && has(&r, "alice.pub exists"));
    CHECK(access(in_dir(dir, "alice.key"), F_OK) != 0);

    REQUIRE(chmod(in_dir(dir, "alice.pub"), 0666) == 0);
    keygen(&r, dir, "alice", 1);                                                       /* --force: a new pair, modes fresh */
    CHECK(r.status == 0);
    CHECK(file_mode(in_dir(dir, "alice.key")) == 0600 && file_mode(in_dir(dir, "alice.pub")) == 0644);
    pub2 = slurp(in_dir(dir, "alice.pub"));
    CHECK(pub2 && strncmp(pub2, pub, OMC_CURVE_KEY_LEN) != 0);
    free(pub2);

    keygen(&r, dir, "bob.key", 0);                                                     /* NAME.key given: NAME meant */
    CHECK(r.status == 0 && file_mode(in_dir(dir, "bob.key")) == 0600 && access(in_dir(dir, "bob.pub"), F_OK) == 0 &&
          access(in_dir(dir, "bob.key.key"), F_OK) != 0);

    REQUIRE(symlink(in_dir(dir, "victim"), in_dir(dir, "link.key")) == 0);           /* never written through a link */
    keygen(&r, dir, "link", 0);
    CHECK(r.status == 1 && access(in_dir(dir, "victim"), F_OK) != 0);
    {
        const char* args[] = { "keygen", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 2 && has(&r, "give one NAME"));
    }
    {
        const char* args[] = { "help", "keygen", NULL };
        cli(&r, NULL, args);
        CHECK(r.status == 0 && has(&r, "NAME.key") && has(&r, "--force"));
    }
    free(sec);
    free(pub);
    remove_tree(dir);
}

/* The generated files work: a CURVE transfer on loopback with the sender's pair, the receiver's
   pair and the receiver's .pub as the allow-list; a receiver whose key is not on the list, and
   one holding a wrong server key, are refused (OMC_ERR_AUTH). */
OMC_TEST(keygen_pair_carries_a_curve_transfer) {
    static cli_run r;
    const char* dir = key_dir();
    const char* allowed[1];
    omc_result res;
    REQUIRE(dir);
    keygen(&r, dir, "producer", 0);
    REQUIRE(r.status == 0);
    keygen(&r, dir, "consumer", 0);
    REQUIRE(r.status == 0);
    keygen(&r, dir, "stranger", 0);
    REQUIRE(r.status == 0);
    allowed[0] = in_dir(dir, "consumer.pub");
    res = curve_transfer(in_dir(dir, "producer.key"), allowed, 1, in_dir(dir, "consumer.key"), in_dir(dir, "producer.pub"), 20000);
    CHECK_EQ(res, OMC_OK);
    res = curve_transfer(in_dir(dir, "producer.key"), allowed, 1, in_dir(dir, "stranger.key"), in_dir(dir, "producer.pub"), 4000);
    CHECK_EQ(res, OMC_ERR_AUTH);                 /* not on the allow-list */
    res = curve_transfer(in_dir(dir, "producer.key"), allowed, 1, in_dir(dir, "consumer.key"), in_dir(dir, "stranger.pub"), 4000);
    CHECK_EQ(res, OMC_ERR_AUTH);                 /* the wrong server key */
    remove_tree(dir);
}

/* doctor --key/--server-key/--allow: a good pair is OK; each problem is its own line. */
OMC_TEST(doctor_checks_key_files_given_as_options) {
    static cli_run r;
    const char* dir = key_dir();
    FILE* f;
    int bad;
    REQUIRE(dir);
    keygen(&r, dir, "good", 0);
    REQUIRE(r.status == 0);
    keygen(&r, dir, "wide", 0);
    REQUIRE(r.status == 0);
    REQUIRE(chmod(in_dir(dir, "wide.key"), 0640) == 0);
    keygen(&r, dir, "other", 0);
    REQUIRE(r.status == 0);
    keygen(&r, dir, "mixed", 0);
    REQUIRE(r.status == 0);
    REQUIRE(rename(in_dir(dir, "other.pub"), in_dir(dir, "mixed.pub")) == 0);      /* a .pub of another pair */
    f = fopen(in_dir(dir, "short.key"), "w");
    REQUIRE(f);
    fputs("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf\n", f);                             /* 39 characters */
    fclose(f);
    REQUIRE(chmod(in_dir(dir, "short.key"), 0600) == 0);
    f = fopen(in_dir(dir, "notz85.pub"), "w");
    REQUIRE(f);
    fputs("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]y~f\n", f);                            /* '~' is not Z85 */
    fclose(f);
    f = fopen(in_dir(dir, "allow.txt"), "w");
    REQUIRE(f);
    fputs("# receivers\n\nrq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf0\nnot a key\n", f);
    fclose(f);
    {
        const char* args[] = { "doctor", "--key", in_dir(dir, "good.key"), "--server-key", in_dir(dir, "good.pub"), NULL };
        cli(&r, NULL, args);
    }
    bad = !has(&r, "OK    keys          --key '") || !has(&r, "good.key': a valid secret key, mode 0600, and '") ||
          !has(&r, "OK    keys          --server-key '") || has(&r, "FAIL  keys");
    CHECK(!bad);
    show_if(&r, bad);
    {
        const char* args[] = { "doctor", "--key", in_dir(dir, "wide.key"), "--key", in_dir(dir, "missing.key"), "--key", in_dir(dir, "mixed.key"),
                               "--key", in_dir(dir, "short.key"), "--server-key", in_dir(dir, "notz85.pub"), "--key", in_dir(dir, "good.pub"),
                               "--allow", in_dir(dir, "allow.txt"), "--server-key", dir, NULL };
        cli(&r, NULL, args);
    }
    bad = r.status != 1 || !has(&r, "wide.key': mode 0640 is wider than 0600: other users can read or change the secret key. Fix: chmod 600") ||
          !has(&r, "missing.key': No such file or directory. Fix: omniconn keygen NAME") ||
          !has(&r, "mixed.key' and '") || !has(&r, "mixed.pub' are not one pair") ||
          !has(&r, "short.key': it holds 39 characters, not one 40-character Z85 CURVE key") ||
          !has(&r, "notz85.pub': character 39 (0x7e) is not Z85") ||
          !has(&r, "good.pub': names a public key file where the secret key belongs") ||
          !has(&r, "allow.txt' line 4: it holds 9 characters") || !has(&r, "': not a regular file") || has(&r, "allow.txt' line 3") || has(&r, "OK    keys");
    CHECK(!bad);
    show_if(&r, bad);
    remove_tree(dir);
}

/* doctor --config reads the key files the config names: missing ones FAIL, and the files must
   fit together (the senders' .pub is the public key of their secret; the receivers' key is on
   the allow-list). */
OMC_TEST(doctor_checks_key_files_a_config_names) {
    static cli_run r;
    const char* dir = key_dir();
    char text[1024];
    FILE* f;
    int k, bad;
    static const struct { const char* extra; const char* want[3]; int status; } cases[] = {
        { "curve_server_secret_key_file: srv.key, curve_allowed_clients_file: allow.txt, curve_server_public_key_file: srv.pub, "
          "curve_client_secret_key_file: cli.key",
          { "srv.key': a valid secret key, mode 0600, and '", "allow.txt': 1 public key", "srv.pub': a valid public key, the senders' own" }, 0 },
        { "curve_server_secret_key_file: nothere.key, curve_allowed_clients_file: allow.txt",
          { "FAIL  keys          'c' curve_server_secret_key_file '", "nothere.key': No such file or directory", NULL }, 1 },
        { "curve_server_secret_key_file: srv.key, curve_allowed_clients_file: allow.txt, curve_server_public_key_file: other.pub, "
          "curve_client_secret_key_file: cli.key",
          { "is not the public key of curve_server_secret_key_file: the receivers would be refused (server key does not match)", NULL, NULL }, 1 },
        { "curve_server_secret_key_file: srv.key, curve_allowed_clients_file: allow.txt, curve_server_public_key_file: srv.pub, "
          "curve_client_secret_key_file: srv.key",
          { "is not on curve_allowed_clients_file: the receivers would be refused (client key not on the allow-list)", NULL, NULL }, 1 },
    };
    REQUIRE(dir);
    keygen(&r, dir, "srv", 0);
    REQUIRE(r.status == 0);
    keygen(&r, dir, "cli", 0);
    REQUIRE(r.status == 0);
    REQUIRE(rename(in_dir(dir, "cli.pub"), in_dir(dir, "allow.txt")) == 0);
    keygen(&r, dir, "other", 0);
    REQUIRE(r.status == 0);
    for (k = 0; k < (int)(sizeof(cases) / sizeof(cases[0])); k++) {
        int i;
        f = fopen(in_dir(dir, "p.yaml"), "w");
        REQUIRE(f);
        snprintf(text, sizeof(text), "runtime: {connectors: {c: {name: tcp, extra: {host: 127.0.0.1, %s}}}}\nstage_args:\n"
                 "  - {stage_id: 0, output_connectors: {to_stage_1: c}}\n  - {stage_id: 1}\n", cases[k].extra);
        fputs(text, f);
        fclose(f);
        {
            const char* args[] = { "doctor", "--config", in_dir(dir, "p.yaml"), NULL };
            cli(&r, NULL, args);
        }
        bad = (cases[k].status == 0) != !has(&r, "FAIL  keys");
        for (i = 0; i < 3; i++) bad |= cases[k].want[i] && !has(&r, cases[k].want[i]);
        if (cases[k].status) bad |= r.status != 1;
        CHECK(!bad);
        show_if(&r, bad);
    }
    remove_tree(dir);
}

static void getting_started_keys(void) {
    char cmd[1200], line[1024];
    FILE* p;
    int st, passed = 0;
    snprintf(cmd, sizeof(cmd), "bash '%s' 2>&1", repo_path("tests/getting_started_keys.sh"));
    fflush(stdout);
    p = popen(cmd, "r");
    REQUIRE(p);
    while (fgets(line, sizeof(line), p)) {
        if (strncmp(line, "FAIL", 4) == 0 || strncmp(line, "    ", 4) == 0) fprintf(stderr, "  %s", line);
        if (strstr(line, "getting-started keys: ") && strstr(line, " 0 failed")) passed = 1;
    }
    st = pclose(p);
    CHECK(passed && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* docs/getting-started.md's "Across hosts, with keys", run as printed (keygen on two "hosts",
   the .pub exchange, doctor, a CURVE transfer over 127.0.0.1 and over this host's own address,
   the failures the page lists): tests/getting_started_keys.sh. The programs it builds are plain
   builds whatever this binary is, so the sanitizer builds of this test leave it to the plain one. */
OMC_TEST(getting_started_keys_page_runs_as_printed) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("  (skipped in a sanitizer build: the plain build runs it)\n");
    (void)getting_started_keys;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    printf("  (skipped in a sanitizer build: the plain build runs it)\n");
    (void)getting_started_keys;
#else
    getting_started_keys();
#endif
#else
    getting_started_keys();
#endif
}

OMC_TEST(doctor_port_collision_fails) {
    static cli_run r;
    const char* args[] = { "doctor", "--config", repo_path("tests/data/bad_collision_tp.yaml"), NULL };
    int bad;
    cli(&r, NULL, args);
    bad = r.status != 1 || !has(&r, "FAIL  ports         port 50052 on host 'auto' is used twice") || !has(&r, "Fix: give one of");
    CHECK(!bad);
    show_if(&r, bad);
}

OMC_TEST(doctor_broken_config_fails) {
    static cli_run r;
    const char* args[] = { "doctor", "--config", repo_path("tests/data/bad_unknown_connector.yaml"), NULL };
    int bad;
    cli(&r, NULL, args);
    bad = r.status != 1 || !has(&r, "FAIL  config") || !has(&r, "bad_unknown_connector.yaml:8:19: edge 0->1 names connector 'rdma_conector'");
    CHECK(!bad);
    show_if(&r, bad);
}

OMC_TEST(doctor_rdma_config) {
    static cli_run r;
    const char* args[] = { "doctor", "--config", repo_path("examples/configs/pipeline3_rdma.yaml"), NULL };
    int bad;
    cli(&r, NULL, args);
    /* on a host without RDMA, RDMA edges are a FAIL with the fix (on the RDMA bed they pass) */
    if (access("/sys/class/infiniband", F_OK) == 0) { printf("  (this host has RDMA devices: the FAIL case is not tested)\n"); return; }
    bad = r.status != 1 || !has(&r, "FAIL  rdma") || !has(&r, "protocol: tcp");
    CHECK(!bad);
    /* memlock is judged against the config's 64 MiB per stage */
    CHECK(has(&r, "memlock       ulimit -l is"));
    show_if(&r, bad);
}

/* A segment whose owner is dead (a fake one: a header with the pid of a child that has exited)
   next to a live one (a real sender); doctor lists the dead one, --sweep removes only it. */
OMC_TEST(doctor_dead_owner_leftovers) {
    static cli_run r;
    const char* dir = private_shm_dir();
    char path[256], live_path[512];
    uint8_t hdr[4096];
    uint32_t magic = 0x53434D4Fu, dead_pid, uid = (uint32_t)geteuid();
    uint64_t start = 12345;
    omc_shm_desc sd;
    omc_conn* live = NULL;
    pid_t child;
    FILE* f;
    int bad;
    REQUIRE(dir);
    child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    dead_pid = (uint32_t)child;
    memset(hdr, 0, sizeof(hdr));
    memcpy(hdr, &magic, 4);
    memcpy(hdr + 80, &start, 8);
    memcpy(hdr + 88, &dead_pid, 4);
    memcpy(hdr + 92, &uid, 4);
    snprintf(path, sizeof(path), "%s/omc-%u-ghost-%u-00000000deadbeef", dir, uid, dead_pid);
    memset(&sd, 0, sizeof(sd));
    sd.shm_dir = dir;
    sd.channel = "alive";
    sd.role = OMC_ROLE_SENDER;
    sd.pool_size = 1u << 20;
    /* the live sender first: creating a sender sweeps the directory, so the ghost comes after */
    REQUIRE(omc_shm_create(&sd, &live) == OMC_OK);
    CHECK_OK(omc_shm_segment_path(live, live_path, sizeof(live_path)));
    f = fopen(path, "wb");
    REQUIRE(f);
    fwrite(hdr, 1, sizeof(hdr), f);
    fclose(f);
    {
        const char* args[] = { "doctor", "--shm-dir", dir, NULL };
        cli(&r, NULL, args);
    }
    bad = r.status != 0 || !has(&r, "WARN  shm leftovers 1 segments of dead owners hold 4 KiB") || !has(&r, "-ghost-") ||
          !has(&r, "Fix: omniconn doctor --sweep") || access(path, F_OK) != 0;
    CHECK(!bad);
    show_if(&r, bad);
    {
        const char* args[] = { "doctor", "--shm-dir", dir, "--sweep", NULL };
        cli(&r, NULL, args);
    }
    bad = r.status != 0 || !has(&r, "OK    shm leftovers 1 segments of dead owners found, 1 removed") || access(path, F_OK) == 0 ||
          access(live_path, F_OK) != 0 || !strstr(r.out, " free of ") ||
          strstr(r.out, " free of ") < strstr(r.out, "shm leftovers");       /* the free space is counted after the sweep */
    CHECK(!bad);
    show_if(&r, bad);
    {
        const char* args[] = { "doctor", "--shm-dir", dir, NULL };
        cli(&r, NULL, args);
    }
    CHECK(has(&r, "OK    shm leftovers 1 omniconn segments in"));       /* the live sender's */
    omc_conn_destroy(live);
    remove_dir(dir);
}

/* SIGTERM in the middle of a run: the producer's segment goes with it. */
OMC_TEST(bench_sigterm_removes_its_segment) {
    const char* dir = private_shm_dir();
    pid_t pid;
    int st = 0, seen = 0, left = 0, i;
    REQUIRE(dir);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        char* argv[] = { (char*)"omniconn", (char*)"bench", (char*)"--sizes", (char*)"4K", (char*)"--duration", (char*)"20",
                         (char*)"--shm-dir", (char*)dir, (char*)"--no-progress", NULL };
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        exit(omniconn_main(9, argv));
    }
    for (i = 0; i < 200 && !seen; i++) {        /* up to 10 s for the segment to appear */
        DIR* d = opendir(dir);
        struct dirent* de;
        while (d && (de = readdir(d)) != NULL) if (strncmp(de->d_name, "omc-", 4) == 0) seen = 1;
        if (d) closedir(d);
        if (!seen) usleep(50000);
    }
    usleep(300000);                             /* into the measurement */
    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
    for (i = 0; i < 100; i++) {                 /* the consumer ends on EOF */
        DIR* d = opendir(dir);
        struct dirent* de;
        left = 0;
        while (d && (de = readdir(d)) != NULL) if (strncmp(de->d_name, "omc-", 4) == 0) left++;
        if (d) closedir(d);
        if (!left) break;
        usleep(20000);
    }
    CHECK(seen);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    CHECK_EQ(left, 0);
    remove_dir(dir);
}

OMC_TEST(doctor_missing_shm_dir) {
    static cli_run r;
    const char* args[] = { "doctor", "--shm-dir", "/nonexistent/shm", NULL };
    cli(&r, NULL, args);
    CHECK(has(&r, "WARN  shm           /nonexistent/shm is missing or not writable"));
    CHECK(r.status == 0);       /* no shm edge asked for: a WARN, not a FAIL */
}

OMC_TEST_MAIN()
