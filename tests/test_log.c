/* The built-in logger: without an application logger, WARN and ERROR reach stderr as one line
   each ("omniconn WARN [ITEM] message (file:line)"); $OMNICONN_LOG sets its level (read once per
   process); an application logger, per desc or process-wide, replaces it entirely.

   Each case runs this binary again as a child (fresh process: the variable is read once) with
   stderr on a pipe, and checks what the child printed. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omc_test.h"
#include <sys/wait.h>

OMC_TEST_TSAN_IGNORE_LIBZMQ()    /* libzmq is not instrumented: see omc_test.h */

/* ---- the child's side: provoke messages of known levels ---------------------------------- */

/* WARN: a put with an empty key (CONN_KEY), twice */
static void provoke_warns(void) {
    omc_local_desc d;
    omc_conn* c = NULL;
    omc_payload p;
    char x = 1;
    memset(&d, 0, sizeof(d));
    d.pool_size = 1u << 20;
    if (omc_local_create(&d, &c) != OMC_OK) { fprintf(stdout, "child: create failed\n"); return; }
    memset(&p, 0, sizeof(p));
    p.data = &x; p.size = 1;
    (void)omc_conn_put(c, "a", "b", "", &p, NULL);
    (void)omc_conn_put(c, "a", "b", "", &p, NULL);
    omc_conn_destroy(c);
}

/* DEBUG: an allocator that is full (ALLOC_FULL at debug level) */
static void provoke_debug(void) {
    omc_alloc_desc d;
    omc_alloc* a = NULL;
    omc_range r1, r2;
    memset(&d, 0, sizeof(d));
    d.capacity = 4096;
    if (omc_alloc_create(&d, &a) != OMC_OK) return;
    (void)omc_alloc_alloc(a, 4096, &r1);
    (void)omc_alloc_alloc(a, 4096, &r2);     /* full */
    omc_alloc_destroy(a);
}

static void app_log(omc_log_level l, omc_log_item item, const char* msg, const char* f, int line, void* u) {
    (void)f; (void)line; (void)u;
    fprintf(stderr, "APP %d %s %s\n", (int)l, omc_log_item_name(item), msg);
}

static int child_main(const char* mode) {
    if (strcmp(mode, "app-default") == 0) {         /* a process-wide application logger */
        omc_hooks h;
        memset(&h, 0, sizeof(h));
        h.log_fn = app_log;
        omc_set_default_hooks(&h);
    }
    if (strcmp(mode, "app-desc") == 0) {            /* a logger on one desc only */
        omc_local_desc d;
        omc_conn* c = NULL;
        omc_payload p;
        char x = 1;
        memset(&d, 0, sizeof(d));
        d.hooks.log_fn = app_log;
        if (omc_local_create(&d, &c) != OMC_OK) return 1;
        memset(&p, 0, sizeof(p));
        p.data = &x; p.size = 1;
        (void)omc_conn_put(c, "a", "b", "", &p, NULL);
        omc_conn_destroy(c);
        return 0;
    }
    provoke_warns();
    provoke_debug();
    return 0;
}

/* ---- the parent's side -------------------------------------------------------------------- */

/* Run "self --child mode" with OMNICONN_LOG=env (NULL: unset); its stderr into out. */
static int run_child(const char* mode, const char* env, char* out, size_t n) {
    int fds[2], st = 0;
    size_t got = 0;
    pid_t pid;
    out[0] = '\0';
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char* argv[4];
        argv[0] = (char*)"test_log"; argv[1] = (char*)"--child"; argv[2] = (char*)mode; argv[3] = NULL;
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        if (env) setenv("OMNICONN_LOG", env, 1); else unsetenv("OMNICONN_LOG");
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    for (;;) {
        ssize_t k = read(fds[0], out + got, n - 1 - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
        if (got == n - 1) break;
    }
    out[got] = '\0';
    close(fds[0]);
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_of(const char* hay, const char* needle) {
    int n = 0;
    const char* p = hay;
    while ((p = strstr(p, needle)) != NULL) { n++; p += strlen(needle); }
    return n;
}

static char out[1 << 16];

OMC_TEST(builtin_logger_prints_warnings_to_stderr_by_default) {
    int before = omc_test_failed_checks;
    CHECK_EQ(run_child("warn", NULL, out, sizeof(out)), 0);
    /* one line per message, a recognisable prefix, the item and where it came from */
    CHECK_EQ(count_of(out, "omniconn WARN [CONN_KEY] key must be non-empty"), 2);
    CHECK(strstr(out, "(omniconn.h:") != NULL);
    CHECK(strstr(out, "DEBUG") == NULL);        /* debug is below the default level */
    if (omc_test_failed_checks != before) fprintf(stderr, "  child's stderr:\n%s", out);
}

OMC_TEST(omniconn_log_off_silences_the_builtin_logger) {
    CHECK_EQ(run_child("warn", "off", out, sizeof(out)), 0);
    CHECK_EQ(count_of(out, "omniconn"), 0);
    CHECK_EQ(run_child("warn", "error", out, sizeof(out)), 0);
    CHECK_EQ(count_of(out, "omniconn WARN"), 0);
}

OMC_TEST(omniconn_log_debug_shows_debug_messages) {
    CHECK_EQ(run_child("warn", "debug", out, sizeof(out)), 0);
    CHECK_EQ(count_of(out, "omniconn WARN [CONN_KEY]"), 2);
    CHECK(strstr(out, "omniconn DEBUG [ALLOC_FULL]") != NULL);
    CHECK_EQ(run_child("warn", "DEBUG", out, sizeof(out)), 0);     /* case does not matter */
    CHECK(strstr(out, "omniconn DEBUG [ALLOC_FULL]") != NULL);
}

OMC_TEST(an_application_logger_replaces_the_builtin_one) {
    CHECK_EQ(run_child("app-default", "debug", out, sizeof(out)), 0);
    CHECK_EQ(count_of(out, "omniconn "), 0);    /* nothing from the built-in logger ... */
    CHECK_EQ(count_of(out, "APP 2 CONN_KEY"), 2);  /* ... all of it through the application's */
    CHECK_EQ(count_of(out, "ALLOC_FULL"), 0);      /* at the application's level (default WARN) */
    CHECK_EQ(run_child("app-desc", NULL, out, sizeof(out)), 0);
    CHECK_EQ(count_of(out, "omniconn "), 0);
    CHECK_EQ(count_of(out, "APP 2 CONN_KEY"), 1);
}

OMC_TEST(an_unknown_omniconn_log_value_warns_once) {
    CHECK_EQ(run_child("warn", "loud", out, sizeof(out)), 0);
    CHECK_EQ(count_of(out, "[LOG_SETTING] OMNICONN_LOG=loud is not a level: use off, error, warn, info or debug"), 1);
    CHECK_EQ(count_of(out, "omniconn WARN [CONN_KEY]"), 2);     /* and logging goes on at WARN */
    CHECK(strstr(out, "DEBUG") == NULL);
}

OMC_TEST(log_item_names_are_short_and_stable) {
    CHECK(strcmp(omc_log_item_name(OMC_LOGITEM_CONN_ERROR), "CONN_ERROR") == 0);
    CHECK(strcmp(omc_log_item_name(OMC_LOGITEM_OK), "OK") == 0);
    CHECK(strcmp(omc_log_item_name((omc_log_item)9999), "UNKNOWN") == 0);
}

/* A receiver whose pool is smaller than the payload refuses it (OMC_ERR_TOO_LARGE) and says so:
   both sizes, the side, the desc field to raise. Real libzmq and TCP on the loopback. */
static char rx_msg[4][600];
static int rx_n;
static void rx_log(omc_log_level l, omc_log_item item, const char* msg, const char* f, int line, void* u) {
    (void)f; (void)line; (void)u; (void)item;
    if (l == OMC_LOG_WARN && rx_n < 4) snprintf(rx_msg[rx_n++], sizeof(rx_msg[0]), "%s", msg);
}

OMC_TEST(a_receiver_pool_smaller_than_the_payload_says_both_sizes) {
    omc_tcp_desc sd, rd;
    omc_conn *s = NULL, *r = NULL;
    omc_payload p;
    omc_meta m = {0};
    omc_buffer b;
    static char data[1 << 20];
    int i, found = 0;
    if (omc_available(OMC_FEATURE_ZMQ, NULL, 0) != OMC_OK) { printf("SKIP receiver pool test: libzmq not available\n"); return; }
    memset(&sd, 0, sizeof(sd));
    sd.role = OMC_ROLE_SENDER;
    sd.pool_size = 4u << 20;
    memset(&rd, 0, sizeof(rd));
    rd.role = OMC_ROLE_RECEIVER;
    rd.pool_size = 64 * 1024;
    rd.hooks.log_fn = rx_log;
    REQUIRE(omc_tcp_create(&sd, &s) == OMC_OK);
    if (omc_tcp_create(&rd, &r) != OMC_OK) { omc_conn_destroy(s); REQUIRE(0); }
    memset(&p, 0, sizeof(p));
    p.data = data; p.size = sizeof(data);
    CHECK_OK(omc_conn_put(s, "a", "b", "big", &p, &m));
    rx_n = 0;
    CHECK_RES(omc_conn_get(r, "a", "b", "big", m.data, m.size, omc_deadline_after_ms(5000), &b), OMC_ERR_TOO_LARGE);
    for (i = 0; i < rx_n; i++)
        if (strstr(rx_msg[i], "get a/b/big") && strstr(rx_msg[i], "1048576 bytes") && strstr(rx_msg[i], "65536 bytes") &&
            strstr(rx_msg[i], "receiver's omc_tcp_desc")) found++;
    CHECK_EQ(found, 1);
    if (found != 1) for (i = 0; i < rx_n; i++) fprintf(stderr, "  logged: %s\n", rx_msg[i]);
    omc_meta_free(&m);
    omc_conn_destroy(r);
    omc_conn_destroy(s);
}

int main(int argc, char** argv) {
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) return child_main(argv[2]);
    return omc_test_main(argc, argv);
}
