/* xhost.h - what the two-guest tests share: the control link between host a and host b, the
   control server on host b, leak checks, the bed's rail variables and the library's log.

   Used by xhost_tests.c (the cross-host suite) and multirail_tests.c (the multi-rail suite),
   both run by tests/rdma/xhost-tests.sh in one boot of tests/rdma/bed.sh --hosts 2.
   Host b runs "BINARY --serve": a control server on the ctl link (XH_CTL_PORT). Each request is
   one connection; the server forks a child that runs the suite's handler (xh_serve's argument),
   which runs the receiver's half of a case and checks that nothing leaked; the child answers
   "rc N" (its count of failed checks). Host a runs the test list and the senders; collect_peer
   adds host b's count to its own.

   Include after omniconn.h (with its implementation), omniconn_rdma.h, omc_test.h, contract.h. */
#ifndef OMC_XHOST_H
#define OMC_XHOST_H

#include <arpa/inet.h>
#include <stdarg.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <errno.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

#define XH_UNUSED __attribute__((unused))
#define MIB ((uint64_t)1 << 20)
#define XH_CTL_PORT 7790
#define XH_SLACK_MS 3000            /* added to every deadline a check measures (scheduling under TCG) */

static XH_UNUSED const char* env_or(const char* name, const char* dflt) { const char* v = getenv(name); return v && v[0] ? v : dflt; }

/* The rail this process uses (0 or 1): its address and device are that word of the bed's lists. */
static XH_UNUSED int g_rail;
static XH_UNUSED const char* rail_word(const char* list_env, const char* single_env, const char* dflt, char* buf, size_t cap) {
    const char* v = getenv(list_env);
    int i;
    if (!v || !v[0]) return env_or(single_env, dflt);
    for (i = 0; i < g_rail && *v; i++) { v += strcspn(v, " "); v += strspn(v, " "); }
    if (!*v) return env_or(single_env, dflt);
    snprintf(buf, cap, "%.*s", (int)strcspn(v, " "), v);
    return buf;
}
static XH_UNUSED const char* my_ip(void) { static char b[64]; return rail_word("OMC_RDMA_IPS", "OMC_RDMA_IP", "10.99.0.1", b, sizeof(b)); }
static XH_UNUSED const char* my_device(void) { static char b[64]; return rail_word("OMC_RDMA_DEVICES", "OMC_RDMA_DEVICE", "rxe0", b, sizeof(b)); }

/* ---- the library's log --------------------------------------------------------------------- */

static XH_UNUSED void xh_log(omc_log_level level, omc_log_item item, const char* message, const char* file, int line, void* user) {
    (void)item; (void)file; (void)line; (void)user;
    fprintf(stderr, "  [%s %s] %s\n", env_or("OMC_BED_HOST", "?"), level == OMC_LOG_ERROR ? "error" : level == OMC_LOG_WARN ? "warn" : "info", message);
}

static XH_UNUSED omc_hooks xh_hooks(void) {
    omc_hooks h;
    memset(&h, 0, sizeof(h));
    h.log_fn = xh_log;
    h.max_level = getenv("OMC_TEST_VERBOSE") ? OMC_LOG_INFO : OMC_LOG_WARN;
    return h;
}

/* ---- leaks: descriptors and threads of this process ------------------------------------------- */

static XH_UNUSED int count_dir(const char* path) {
    DIR* d = opendir(path);
    struct dirent* e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - (strcmp(path, "/proc/self/fd") == 0);   /* the DIR's own descriptor */
}

typedef struct xh_usage { int fds, threads; } xh_usage;
static XH_UNUSED xh_usage usage_now(void) { xh_usage u; u.fds = count_dir("/proc/self/fd"); u.threads = count_dir("/proc/self/task"); return u; }

/* Threads end asynchronously after a destroy: wait a little for the counts to come back. */
static XH_UNUSED void check_no_leak(const char* who, xh_usage before) {
    xh_usage now = usage_now();
    int i;
    for (i = 0; i < 100 && (now.fds > before.fds || now.threads > before.threads); i++) { usleep(20000); now = usage_now(); }
    if (now.fds > before.fds || now.threads > before.threads) {
        OMC_TEST_FAIL();
        fprintf(stderr, "  %s leaked: %d -> %d descriptors, %d -> %d threads\n", who, before.fds, now.fds, before.threads, now.threads);
    }
}

/* ---- the control link ------------------------------------------------------------------------ */

static XH_UNUSED int ctl_connect(void) {
    struct sockaddr_in a;
    omc_time_ns until = omc_deadline_after_ms(120000);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(XH_CTL_PORT);
    if (inet_pton(AF_INET, env_or("OMC_BED_PEER_CTL_IP", "10.98.0.2"), &a.sin_addr) != 1) return -1;
    while (omc_now_ns() < until) {       /* the other guest may still be starting its server */
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (fd < 0) return -1;
        if (connect(fd, (struct sockaddr*)&a, sizeof(a)) == 0) {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return fd;
        }
        close(fd);
        usleep(200000);
    }
    return -1;
}

static XH_UNUSED int ctl_sendf(int fd, const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    ct_env e;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(buf)) return -1;
    memset(&e, 0, sizeof(e));
    e.fd = fd;
    return ct_send(&e, buf, (uint32_t)n);
}

static XH_UNUSED char* ctl_recv(int fd) {
    ct_env e;
    memset(&e, 0, sizeof(e));
    e.fd = fd;
    return (char*)ct_recv(&e, NULL);
}

/* After the sender's half: the receiver's count of failed checks ("rc N"), added to ours. */
static XH_UNUSED void collect_peer(int fd, const char* what) {
    char* m = ctl_recv(fd);
    int n = -1;
    if (!m || sscanf(m, "rc %d", &n) != 1 || n < 0) {
        OMC_TEST_FAIL();
        fprintf(stderr, "  %s: no result from the receiver on host b (%s)\n", what, m ? m : "connection closed or timed out");
    } else if (n > 0) {
        __atomic_add_fetch(&omc_test_failed_checks, n, __ATOMIC_RELAXED);
        fprintf(stderr, "  %s: %d failed check(s) on host b (its lines are marked [b])\n", what, n);
    }
    free(m);
}


static XH_UNUSED void b_check_pool_empty(omc_conn* c) {
    omc_health h;
    CHECK_OK(omc_conn_health(c, &h));
    CHECK_EQ(h.pool_in_use, 0);
}

/* ---- links: take a rail down and wait for its port ---------------------------------------- */

/* Run a shell command line; its exit status (-1 if it could not run). posix_spawn, not system():
   fork() of a big process (an ASan build with its pools) takes seconds under TCG, long enough for
   a transfer to end before the fault it was meant to meet. */
static XH_UNUSED int xh_sh(const char* cmd) {
    char* argv[4];
    pid_t pid;
    int st;
    argv[0] = (char*)"sh"; argv[1] = (char*)"-c"; argv[2] = (char*)cmd; argv[3] = NULL;
    if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) != 0) return -1;
    while (waitpid(pid, &st, 0) < 0) if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static XH_UNUSED int link_cmd(const char* dev, const char* state) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "ip link set %s %s", dev, state);
    return xh_sh(cmd);
}

/* Soft-RoCE follows its netdev: wait until the port is ACTIVE again (and the GID is back). */
static XH_UNUSED int wait_port_active(const char* dev, int ms) {
    char path[256], buf[64];
    int i;
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/state", dev);
    for (i = 0; i < ms / 50; i++) {
        FILE* f = fopen(path, "r");
        if (f) {
            size_t k = fread(buf, 1, sizeof(buf) - 1, f);
            buf[k] = 0;
            fclose(f);
            if (strstr(buf, "ACTIVE")) return 1;
        }
        usleep(50000);
    }
    return 0;
}

/* ---- host b: the control server ------------------------------------------------------------ */

/* A suite's request handler: runs in a forked child with the request's text; it runs the
   receiver's half and leaves its failures in omc_test_failed_checks (the child answers "rc N"). */
typedef void (*xh_handler)(int fd, const char* req);

static XH_UNUSED int xh_serve(xh_handler handle) {
    struct sockaddr_in a;
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(XH_CTL_PORT);
    inet_pton(AF_INET, env_or("OMC_BED_CTL_IP", "10.98.0.2"), &a.sin_addr);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(ls, 16) != 0) {
        perror("--serve: listen");
        return 1;
    }
    printf("control server on %s:%d\n", env_or("OMC_BED_CTL_IP", "10.98.0.2"), XH_CTL_PORT);
    fflush(stdout);
    for (;;) {
        struct pollfd p;
        int fd, st;
        char* req;
        pid_t pid;
        p.fd = ls; p.events = POLLIN; p.revents = 0;
        while (waitpid(-1, &st, WNOHANG) > 0) {}
        if (poll(&p, 1, 600000) <= 0) { fprintf(stderr, "--serve: no request for 600 s, giving up\n"); return 1; }
        fd = accept(ls, NULL, NULL);
        if (fd < 0) continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        req = ctl_recv(fd);
        if (!req) { close(fd); continue; }
        if (strcmp(req, "quit") == 0) { free(req); close(fd); break; }
        fflush(stdout); fflush(stderr);
        pid = fork();
        if (pid == 0) {
            close(ls);
            handle(fd, req);
            ctl_sendf(fd, "rc %d", omc_test_failed_checks);
            fflush(stdout); fflush(stderr);
            _exit(0);
        }
        free(req);
        close(fd);
    }
    while (wait(NULL) > 0) {}
    close(ls);
    return 0;
}

/* ---- host a ------------------------------------------------------------------------------------ */

static XH_UNUSED int is_host_a(void) {
    const char* h = getenv("OMC_BED_HOST");
    return h && strcmp(h, "a") == 0 && getenv("OMC_RDMA_PEER_IP");
}

static XH_UNUSED int on_two_hosts(void) {
    if (is_host_a()) return 1;
    printf("SKIP (not host a of the two-guest bed: run through tests/rdma/xhost-tests.sh)\n");
    return 0;
}

static XH_UNUSED void make_key(char* out, size_t n, const char* tag) {
    static int counter;
    snprintf(out, n, "xh-%s-%ld-%d", tag, (long)getpid(), ++counter);
}

/* Let host b's server end (after the test list). */
static XH_UNUSED void xh_quit_server(void) {
    int fd = ctl_connect();
    if (fd >= 0) { ctl_sendf(fd, "quit"); close(fd); }
}

#endif /* OMC_XHOST_H */
