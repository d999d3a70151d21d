/* libomniconn.c - the shared library libomniconn.so, built from the headers - SPDX-License-Identifier: MIT OR Unlicense

    This file is the implementation file of the shared library (`make lib`): it defines
    OMNICONN_IMPLEMENTATION once and includes every header, so the library exports the whole
    public API (every omc_* function of omniconn.h, omniconn_shm.h, omniconn_rdma.h and
    omniconn_pipeline.h). C programs link it with -lomniconn instead of compiling the headers in.

    It adds one thing of its own: the FFI layer (omc_ffi_*), flat functions for callers that
    cannot use the public structs comfortably - ctypes, cffi, other languages. Every argument is a
    scalar, a string, a pointer to bytes or an opaque handle; no struct layout has to be mirrored.
    The Python package (python/omniconn) uses it.

    Logging: the library installs a default logger when it is loaded. It keeps the last message
    of each thread (omc_ffi_last_log, for error reports), forwards messages to the function given
    to omc_ffi_set_log, and without one writes WARN and ERROR lines to stderr. OMNICONN_LOG
    (off|error|warn|info|debug) sets the starting level.
*/
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"
#include "omniconn_rdma.h"
#include "omniconn_pipeline.h"
#include "omniconn_store.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <strings.h>

#define OMC_FFI_ABI 1
#define OMC_FFI_LOG_TEXT 512

/* ============================================================================================== */
/* [SECTION] FFI: declarations                                                                    */
/* ============================================================================================== */

typedef void (*omc_ffi_log_fn)(int level, int item, const char* message);

OMNICONN_API uint32_t   omc_ffi_abi(void);
OMNICONN_API void       omc_ffi_set_log(omc_ffi_log_fn fn, int max_level);
OMNICONN_API int        omc_ffi_log_level(void);
OMNICONN_API size_t     omc_ffi_last_log(char* out, size_t out_size);
OMNICONN_API void       omc_ffi_clear_log(void);

OMNICONN_API omc_result omc_ffi_local_create(int role, uint64_t pool_size, int64_t ttl_ms, omc_conn** out);
OMNICONN_API omc_result omc_ffi_shm_create(int role, const char* channel, const char* shm_dir, uint64_t pool_size,
                                           int64_t ttl_ms, int64_t inline_threshold, uint32_t max_entries,
                                           omc_conn** out);
OMNICONN_API omc_result omc_ffi_tcp_create(int role, const char* host, const char* bind_host, uint32_t port,
                                           uint32_t data_port, uint64_t pool_size, int64_t ttl_ms,
                                           const char* secret_key, const char* public_key, const char* server_key,
                                           int rdma, const char* rdma_devices, omc_conn** out);
OMNICONN_API omc_result omc_ffi_tcp_create_ex(int role, const char* host, const char* bind_host, uint32_t port,
                                              uint32_t data_port, uint64_t pool_size, int64_t ttl_ms,
                                              const char* secret_key, const char* public_key, const char* server_key,
                                              const char* allowed_clients, int rdma, const char* rdma_devices,
                                              omc_conn** out);
OMNICONN_API omc_result omc_ffi_rdma_status(omc_conn* conn, int* enabled, char* reason, size_t reason_size);
OMNICONN_API const char* omc_ffi_rdma_counter_fields(void);
OMNICONN_API omc_result omc_ffi_rdma_counters(omc_conn* conn, uint64_t* values, uint32_t count, char* last_fallback,
                                             size_t last_fallback_size);

OMNICONN_API omc_result omc_ffi_put(omc_conn* conn, const char* from, const char* to, const char* key,
                                    const void* data, uint64_t size, uint32_t flags, uint32_t readers, int64_t ttl_ms,
                                    void* meta_out, uint32_t meta_cap, uint32_t* meta_size);
OMNICONN_API omc_result omc_ffi_alloc(omc_conn* conn, uint64_t size, omc_time_ns deadline, omc_buffer** out, void** data);
OMNICONN_API omc_result omc_ffi_put_buffer(omc_conn* conn, const char* from, const char* to, const char* key,
                                           omc_buffer* buffer, uint32_t flags, uint32_t readers, int64_t ttl_ms,
                                           void* meta_out, uint32_t meta_cap, uint32_t* meta_size);
OMNICONN_API omc_result omc_ffi_get(omc_conn* conn, const char* from, const char* to, const char* key,
                                    const void* meta, size_t meta_size, omc_time_ns deadline,
                                    omc_buffer** out, void** data, uint64_t* size, uint32_t* flags);
OMNICONN_API omc_result omc_ffi_get_from(omc_conn* conn, const char* sender, const char* from, const char* to,
                                         const char* key, omc_time_ns deadline,
                                         omc_buffer** out, void** data, uint64_t* size, uint32_t* flags);
OMNICONN_API omc_result omc_ffi_tcp_query(omc_conn* conn, const char* sender, const char* from, const char* to,
                                          const char* key, omc_time_ns deadline, uint64_t* size);
OMNICONN_API omc_result omc_ffi_get_batch(omc_conn* conn, const char* from, const char* to, uint32_t n,
                                          const char* const* keys, const void* const* metas, const size_t* meta_sizes,
                                          omc_time_ns deadline, omc_buffer** outs, void** datas, uint64_t* sizes,
                                          uint32_t* flags, int32_t* results);
OMNICONN_API omc_result omc_ffi_buffer_release(omc_buffer* buffer);
OMNICONN_API const char* omc_ffi_get_first_fields(void);
OMNICONN_API omc_result omc_ffi_get_first(omc_conn* conn, const char* sender, const char* from, const char* to,
                                          const char* key, const void* meta, size_t meta_size, omc_time_ns deadline,
                                          uint64_t* out, uint32_t out_count, char* name, size_t name_size);

OMNICONN_API const char* omc_ffi_health_fields(void);
OMNICONN_API omc_result omc_ffi_health(omc_conn* conn, uint64_t* values, uint32_t count, char* text, size_t text_size);

OMNICONN_API omc_result omc_ffi_frame_size(uint32_t count, const char* const* names, const int32_t* dtypes,
                                           const uint32_t* ndims, const int64_t* shapes, const uint64_t* sizes,
                                           uint64_t* out_size);
OMNICONN_API omc_result omc_ffi_frame_build(void* dst, uint64_t dst_size, uint32_t count, const char* const* names,
                                            const int32_t* dtypes, const uint32_t* ndims, const int64_t* shapes,
                                            const uint64_t* sizes, const void* const* datas, uint64_t* out_size);
OMNICONN_API omc_result omc_ffi_put_tensor(omc_conn* conn, const char* from, const char* to, const char* key,
                                           const char* name, int32_t dtype, uint32_t ndim, const int64_t* shape,
                                           const void* data, uint64_t size, uint32_t readers, int64_t ttl_ms,
                                           void* meta_out, uint32_t meta_cap, uint32_t* meta_size);
OMNICONN_API omc_result omc_ffi_frame_count(const void* src, uint64_t size, int verify, uint32_t* count);
OMNICONN_API omc_result omc_ffi_frame_segment(const void* src, uint64_t size, uint32_t index, char* name,
                                              size_t name_size, int32_t* kind, int32_t* dtype, uint32_t* ndim,
                                              int64_t* shape, uint64_t* offset, uint64_t* seg_size);

/* ============================================================================================== */
/* [SECTION] FFI: logging                                                                         */
/* ============================================================================================== */

static omc_ffi_log_fn omc__ffi_fn;                  /* atomic: the application's function, or NULL */
static int omc__ffi_level = OMC_LOG_WARN;           /* atomic: most verbose level forwarded */
static __thread char omc__ffi_last[OMC_FFI_LOG_TEXT];

static void omc__ffi_log(omc_log_level level, omc_log_item item, const char* message, const char* file, int line,
                         void* user_data) {
    omc_ffi_log_fn fn = __atomic_load_n(&omc__ffi_fn, __ATOMIC_ACQUIRE);
    (void)file; (void)line; (void)user_data;
    /* the reason behind a failed call is kept whatever the level, so errors can quote it */
    if (level <= OMC_LOG_WARN) snprintf(omc__ffi_last, sizeof(omc__ffi_last), "%s", message);
    if ((int)level > __atomic_load_n(&omc__ffi_level, __ATOMIC_RELAXED)) return;
    if (fn) fn((int)level, (int)item, message);
    else if (level <= OMC_LOG_WARN)
        fprintf(stderr, "omniconn %s: %s\n", level == OMC_LOG_ERROR ? "ERROR" : "WARN", message);
}

static int omc__ffi_level_from_env(void) {
    const char* v = getenv("OMNICONN_LOG");
    if (!v || !*v) return OMC_LOG_WARN;
    if (!strcasecmp(v, "off")) return 0;
    if (!strcasecmp(v, "error")) return OMC_LOG_ERROR;
    if (!strcasecmp(v, "info")) return OMC_LOG_INFO;
    if (!strcasecmp(v, "debug")) return OMC_LOG_DEBUG;
    return OMC_LOG_WARN;
}

/* Install the logger as every connector's default (connectors copy the hooks when created). */
static void omc__ffi_install(int level) {
    omc_hooks h;
    memset(&h, 0, sizeof(h));
    h.log_fn = omc__ffi_log;
    /* WARN and ERROR always reach omc__ffi_log (it keeps the last one for error reports and
       filters what it forwards by omc__ffi_level); more verbose levels only when asked for */
    h.max_level = level > OMC_LOG_WARN ? (omc_log_level)level : OMC_LOG_WARN;
    __atomic_store_n(&omc__ffi_level, level, __ATOMIC_RELAXED);
    omc_set_default_hooks(&h);
}

__attribute__((constructor)) static void omc__ffi_init(void) { omc__ffi_install(omc__ffi_level_from_env()); }

OMNICONN_API uint32_t omc_ffi_abi(void) { return OMC_FFI_ABI; }

/* fn receives (level, item, message) on the thread that logged; NULL = WARN and ERROR to stderr.
   max_level (0 = off .. 4 = debug) applies to connectors created after this call. Call it
   before creating connectors, not while others are being created. */
OMNICONN_API void omc_ffi_set_log(omc_ffi_log_fn fn, int max_level) {
    __atomic_store_n(&omc__ffi_fn, fn, __ATOMIC_RELEASE);
    omc__ffi_install(max_level < 0 ? 0 : max_level > OMC_LOG_DEBUG ? OMC_LOG_DEBUG : max_level);
}

OMNICONN_API int omc_ffi_log_level(void) { return __atomic_load_n(&omc__ffi_level, __ATOMIC_RELAXED); }

/* The last WARN or ERROR message logged on this thread (the reason behind a failed call). */
OMNICONN_API size_t omc_ffi_last_log(char* out, size_t out_size) {
    size_t n = strlen(omc__ffi_last);
    if (out && out_size) snprintf(out, out_size, "%s", omc__ffi_last);
    return n;
}

OMNICONN_API void omc_ffi_clear_log(void) { omc__ffi_last[0] = 0; }

/* ============================================================================================== */
/* [SECTION] FFI: connectors                                                                      */
/* ============================================================================================== */

static omc_role omc__ffi_role(int role) {
    return role >= OMC_ROLE_DEFAULT && role <= OMC_ROLE_DUAL ? (omc_role)role : (omc_role)-1;
}

OMNICONN_API omc_result omc_ffi_local_create(int role, uint64_t pool_size, int64_t ttl_ms, omc_conn** out) {
    omc_local_desc d;
    memset(&d, 0, sizeof(d));
    d.role = omc__ffi_role(role);
    d.pool_size = pool_size;
    d.default_ttl_ms = ttl_ms;
    omc__ffi_last[0] = 0;
    return omc_local_create(&d, out);
}

/* inline_threshold: 0 = the default, < 0 = nothing travels inside the metadata. */
OMNICONN_API omc_result omc_ffi_shm_create(int role, const char* channel, const char* shm_dir, uint64_t pool_size,
                                           int64_t ttl_ms, int64_t inline_threshold, uint32_t max_entries,
                                           omc_conn** out) {
    omc_shm_desc d;
    memset(&d, 0, sizeof(d));
    d.role = omc__ffi_role(role);
    d.channel = channel && *channel ? channel : NULL;
    d.shm_dir = shm_dir && *shm_dir ? shm_dir : NULL;
    d.pool_size = pool_size;
    d.default_ttl_ms = ttl_ms;
    if (inline_threshold < 0) d.disable_inline = 1;
    else d.inline_threshold = (uint64_t)inline_threshold;
    d.max_entries = max_entries;
    omc__ffi_last[0] = 0;
    return omc_shm_create(&d, out);
}

/* rdma: 0 = TCP data plane, 1 = RDMA where it works (TCP otherwise, and say why), 2 = RDMA or fail. */
OMNICONN_API omc_result omc_ffi_tcp_create(int role, const char* host, const char* bind_host, uint32_t port,
                                           uint32_t data_port, uint64_t pool_size, int64_t ttl_ms,
                                           const char* secret_key, const char* public_key, const char* server_key,
                                           int rdma, const char* rdma_devices, omc_conn** out) {
    return omc_ffi_tcp_create_ex(role, host, bind_host, port, data_port, pool_size, ttl_ms, secret_key, public_key, server_key,
                                 NULL, rdma, rdma_devices, out);
}

/* omc_ffi_tcp_create with CURVE's allow-list: allowed_clients holds the receivers' public keys
   (Z85, 40 characters each) separated by newlines, spaces or commas; NULL or "" = any receiver
   that knows the sender's public key. A key of another length is OMC_ERR_INVALID_ARG. */
#define OMC_FFI_MAX_ALLOWED 256
OMNICONN_API omc_result omc_ffi_tcp_create_ex(int role, const char* host, const char* bind_host, uint32_t port,
                                              uint32_t data_port, uint64_t pool_size, int64_t ttl_ms,
                                              const char* secret_key, const char* public_key, const char* server_key,
                                              const char* allowed_clients, int rdma, const char* rdma_devices,
                                              omc_conn** out) {
    omc_tcp_desc d;
    char keys[OMC_FFI_MAX_ALLOWED][OMC_CURVE_KEY_LEN + 1];
    const char* list[OMC_FFI_MAX_ALLOWED];
    uint32_t n = 0;
    const char* p = allowed_clients;
    if (out) *out = NULL;
    if (port > 65535 || data_port > 65535) return OMC_ERR_INVALID_ARG;
    while (p && *p) {
        size_t len;
        while (*p == '\n' || *p == '\r' || *p == ' ' || *p == '\t' || *p == ',') p++;
        len = strcspn(p, "\r\n \t,");
        if (!len) break;
        if (len != OMC_CURVE_KEY_LEN || n == OMC_FFI_MAX_ALLOWED) return OMC_ERR_INVALID_ARG;
        memcpy(keys[n], p, len);
        keys[n][len] = 0;
        list[n] = keys[n];
        n++;
        p += len;
    }
    memset(&d, 0, sizeof(d));
    d.role = omc__ffi_role(role);
    d.host = host && *host ? host : NULL;
    d.bind_host = bind_host && *bind_host ? bind_host : NULL;
    d.port = (uint16_t)port;
    d.data_port = (uint16_t)data_port;
    d.pool_size = pool_size;
    d.default_ttl_ms = ttl_ms;
    d.curve.secret_key = secret_key && *secret_key ? secret_key : NULL;
    d.curve.public_key = public_key && *public_key ? public_key : NULL;
    d.curve.server_key = server_key && *server_key ? server_key : NULL;
    d.curve.allowed_clients = n ? list : NULL;
    d.curve.allowed_count = n;
    omc__ffi_last[0] = 0;
    if (rdma) {
        omc_rdma_connector_desc rd;
        memset(&rd, 0, sizeof(rd));
        rd.net = d;
        rd.rdma.devices = rdma_devices && *rdma_devices ? rdma_devices : NULL;
        rd.require_rdma = rdma >= 2;
        return omc_rdma_connector_create(&rd, out);
    }
    return omc_tcp_create(&d, out);
}

/* Is the RDMA plane of a connector from omc_ffi_tcp_create(rdma != 0) up, and if not, why. */
OMNICONN_API omc_result omc_ffi_rdma_status(omc_conn* conn, int* enabled, char* reason, size_t reason_size) {
    omc_rdma_connector_info info;
    omc_result r = omc_rdma_connector_query(conn, &info);
    if (enabled) *enabled = r == OMC_OK ? info.rdma_enabled : 0;
    if (reason && reason_size) snprintf(reason, reason_size, "%s", r == OMC_OK ? info.reason : "");
    return r;
}

/* The counters of omc_rdma_connector_info that omc_ffi_rdma_counters fills, in this order. */
#define OMC__FFI_RDMA_COUNTERS(X) \
    X(rdma_channels) X(tcp_fallbacks) X(accepted) X(accept_failures) X(pushes) X(push_failures) X(push_bytes) \
    X(sender_connections)

/* The names of the values omc_ffi_rdma_counters fills, comma-separated, in order. */
OMNICONN_API const char* omc_ffi_rdma_counter_fields(void) {
#define OMC__X(f) #f ","
    static const char names[] = OMC__FFI_RDMA_COUNTERS(OMC__X);
#undef OMC__X
    return names;
}

/* values[i] = the i-th counter; last_fallback = which sender fell back to TCP last, and why.
   OMC_ERR_INVALID_ARG for a connector that is not an RDMA connector. */
OMNICONN_API omc_result omc_ffi_rdma_counters(omc_conn* conn, uint64_t* values, uint32_t count, char* last_fallback,
                                             size_t last_fallback_size) {
    omc_rdma_connector_info info;
    uint64_t all[16];
    uint32_t n = 0, i;
    omc_result r = omc_rdma_connector_query(conn, &info);
    if (r != OMC_OK) return r;
#define OMC__X(f) all[n++] = (uint64_t)info.f;
    OMC__FFI_RDMA_COUNTERS(OMC__X)
#undef OMC__X
    for (i = 0; values && i < count && i < n; i++) values[i] = all[i];
    if (last_fallback && last_fallback_size) snprintf(last_fallback, last_fallback_size, "%s", info.last_fallback);
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] FFI: put, get, buffers                                                               */
/* ============================================================================================== */

static omc_result omc__ffi_hand_out(omc_buffer* b, omc_buffer** out, void** data, uint64_t* size, uint32_t* flags);

static omc_result omc__ffi_meta_out(omc_meta* m, void* out, uint32_t cap, uint32_t* size) {
    if (size) *size = m->size;
    if (out && m->size <= cap) memcpy(out, m->data, m->size);
    omc_meta_free(m);
    return OMC_OK;
}

/* The copy path: size bytes at data are copied into the connector. The metadata is copied to
   meta_out (meta_cap >= OMC_META_MAX_SIZE always suffices; if it was too small *meta_size says
   how much was needed and nothing is copied - the put itself stands). */
OMNICONN_API omc_result omc_ffi_put(omc_conn* conn, const char* from, const char* to, const char* key,
                                    const void* data, uint64_t size, uint32_t flags, uint32_t readers, int64_t ttl_ms,
                                    void* meta_out, uint32_t meta_cap, uint32_t* meta_size) {
    omc_payload p;
    omc_meta m = { NULL, 0 };
    omc_result r;
    memset(&p, 0, sizeof(p));
    p.data = data;
    p.size = size;
    p.flags = flags;
    p.readers = readers;
    p.ttl_ms = ttl_ms;
    omc__ffi_last[0] = 0;
    if (meta_size) *meta_size = 0;
    r = omc_conn_put(conn, from, to, key, &p, &m);
    if (r != OMC_OK) return r;
    return omc__ffi_meta_out(&m, meta_out, meta_cap, meta_size);
}

/* A pool buffer to fill and hand to omc_ffi_put_buffer (or give back with omc_ffi_buffer_release). */
OMNICONN_API omc_result omc_ffi_alloc(omc_conn* conn, uint64_t size, omc_time_ns deadline, omc_buffer** out, void** data) {
    omc_buffer* b;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    if (data) *data = NULL;
    b = (omc_buffer*)calloc(1, sizeof(*b));
    if (!b) return OMC_ERR_NO_MEMORY;
    omc__ffi_last[0] = 0;
    r = omc_conn_alloc(conn, size, deadline, b);
    if (r != OMC_OK) { free(b); return r; }
    *out = b;
    if (data) *data = b->data;
    return OMC_OK;
}

/* The zero-copy path. On OMC_OK the connector owns the bytes and the handle is freed; on an
   error the handle is still the caller's. */
OMNICONN_API omc_result omc_ffi_put_buffer(omc_conn* conn, const char* from, const char* to, const char* key,
                                           omc_buffer* buffer, uint32_t flags, uint32_t readers, int64_t ttl_ms,
                                           void* meta_out, uint32_t meta_cap, uint32_t* meta_size) {
    omc_payload p;
    omc_meta m = { NULL, 0 };
    omc_result r;
    if (!buffer) return OMC_ERR_INVALID_ARG;
    memset(&p, 0, sizeof(p));
    p.buffer = buffer;
    p.flags = flags;
    p.readers = readers;
    p.ttl_ms = ttl_ms;
    omc__ffi_last[0] = 0;
    if (meta_size) *meta_size = 0;
    r = omc_conn_put(conn, from, to, key, &p, &m);
    if (r != OMC_OK) return r;
    free(buffer);
    return omc__ffi_meta_out(&m, meta_out, meta_cap, meta_size);
}

/* A zero-copy get: *out is a handle for omc_ffi_buffer_release; data and size say where the bytes are. */
OMNICONN_API omc_result omc_ffi_get(omc_conn* conn, const char* from, const char* to, const char* key,
                                    const void* meta, size_t meta_size, omc_time_ns deadline,
                                    omc_buffer** out, void** data, uint64_t* size, uint32_t* flags) {
    omc_buffer b;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    omc__ffi_last[0] = 0;
    r = omc_conn_get(conn, from, to, key, meta_size ? meta : NULL, meta_size, deadline, &b);
    if (r != OMC_OK) return r;
    return omc__ffi_hand_out(&b, out, data, size, flags);
}

static omc_result omc__ffi_hand_out(omc_buffer* b, omc_buffer** out, void** data, uint64_t* size, uint32_t* flags) {
    *out = (omc_buffer*)malloc(sizeof(*b));
    if (!*out) { omc_buffer_release(b); return OMC_ERR_NO_MEMORY; }
    **out = *b;
    if (data) *data = b->data;
    if (size) *size = b->size;
    if (flags) *flags = b->flags;
    return OMC_OK;
}

/* n gets in one omc_conn_get_batch (the remote connector pipelines those to one sender): keys[i]
   with metas[i] (meta_sizes[i] bytes; 0 = a metadata-less get). Per item results[i], and for a
   success the buffer handed out as omc_ffi_get does (outs[i], datas[i], sizes[i], flags[i]).
   Returns the first failure, as omc_conn_get_batch does. */
OMNICONN_API omc_result omc_ffi_get_batch(omc_conn* conn, const char* from, const char* to, uint32_t n,
                                          const char* const* keys, const void* const* metas, const size_t* meta_sizes,
                                          omc_time_ns deadline, omc_buffer** outs, void** datas, uint64_t* sizes,
                                          uint32_t* flags, int32_t* results) {
    omc_batch_item* it;
    omc_result first = OMC_OK;
    uint32_t i;
    if (n && (!keys || !metas || !meta_sizes || !outs || !datas || !sizes || !flags || !results)) return OMC_ERR_INVALID_ARG;
    it = (omc_batch_item*)calloc(n ? n : 1, sizeof(*it));
    if (!it) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < n; i++) {
        it[i].key = keys[i];
        it[i].meta.data = meta_sizes[i] ? (void*)(uintptr_t)metas[i] : NULL;     /* read, never freed here */
        it[i].meta.size = meta_sizes[i];
        outs[i] = NULL;
        datas[i] = NULL;
        sizes[i] = 0;
        flags[i] = 0;
    }
    omc__ffi_last[0] = 0;
    (void)omc_conn_get_batch(conn, from, to, it, n, deadline);
    for (i = 0; i < n; i++) {
        omc_result r = it[i].result;
        if (r == OMC_OK) r = omc__ffi_hand_out(&it[i].buffer, &outs[i], &datas[i], &sizes[i], &flags[i]);
        results[i] = (int32_t)r;
        if (r != OMC_OK && first == OMC_OK) first = r;
    }
    free(it);
    return first;
}

/* The values omc_ffi_get_first fills, in this order: the buffer (handle, data, size, flags), then
   the first segment of a frame (segment: 0 = decoded, 1 = not a frame, < 0 = the frame's decode
   error as int64; then kind, dtype, ndim, offset from data, segment size, shape[OMC_MAX_DIMS]). */
#define OMC__FFI_GET_FIRST(X) \
    X(handle) X(data) X(size) X(flags) X(segment) X(kind) X(dtype) X(ndim) X(offset) X(segment_size) \
    X(shape0) X(shape1) X(shape2) X(shape3) X(shape4) X(shape5) X(shape6) X(shape7)
enum {
#define OMC__X(f) OMC__FFI_GOT_##f,
    OMC__FFI_GET_FIRST(OMC__X)
#undef OMC__X
    OMC__FFI_GOT_COUNT
};

/* The names of the values omc_ffi_get_first fills, comma-separated, in order. */
OMNICONN_API const char* omc_ffi_get_first_fields(void) {
#define OMC__X(f) #f ","
    static const char names[] = OMC__FFI_GET_FIRST(OMC__X);
#undef OMC__X
    return names;
}

/* A get (with meta, or metadata-less from one registered sender when sender is not NULL) and, if
   the payload is a frame, its first segment decoded - one call where a caller would otherwise
   make two (a get, then omc_ffi_frame_segment). out must have room for every value (see
   omc_ffi_get_first_fields); out[handle] is for omc_ffi_buffer_release. A frame that does not
   decode still hands the buffer out (with its error in out[segment]). */
OMNICONN_API omc_result omc_ffi_get_first(omc_conn* conn, const char* sender, const char* from, const char* to,
                                          const char* key, const void* meta, size_t meta_size, omc_time_ns deadline,
                                          uint64_t* out, uint32_t out_count, char* name, size_t name_size) {
    omc_buffer* h = NULL;
    void* data = NULL;
    uint64_t size = 0;
    uint32_t flags = 0, d;
    omc_frame f;
    omc_segment s;
    omc_result r;
    if (!out || out_count < OMC__FFI_GOT_COUNT) return OMC_ERR_INVALID_ARG;
    if (sender) r = omc_ffi_get_from(conn, sender, from, to, key, deadline, &h, &data, &size, &flags);
    else r = omc_ffi_get(conn, from, to, key, meta, meta_size, deadline, &h, &data, &size, &flags);
    if (r != OMC_OK) return r;
    memset(out, 0, OMC__FFI_GOT_COUNT * sizeof(*out));
    out[OMC__FFI_GOT_handle] = (uint64_t)(uintptr_t)h;
    out[OMC__FFI_GOT_data] = (uint64_t)(uintptr_t)data;
    out[OMC__FFI_GOT_size] = size;
    out[OMC__FFI_GOT_flags] = flags;
    out[OMC__FFI_GOT_segment] = 1;
    if (name && name_size) name[0] = 0;
    if (!(flags & OMC_BUFFER_FRAME)) return OMC_OK;
    r = omc_frame_decode(data, size, 0, &f);
    if (r == OMC_OK) r = omc_frame_segment(&f, 0, &s);
    out[OMC__FFI_GOT_segment] = (uint64_t)(int64_t)r;
    if (r != OMC_OK) return OMC_OK;
    if (name && name_size) snprintf(name, name_size, "%.*s", (int)s.name_len, s.name);
    out[OMC__FFI_GOT_kind] = (uint64_t)s.kind;
    out[OMC__FFI_GOT_dtype] = (uint64_t)s.dtype;
    out[OMC__FFI_GOT_ndim] = s.ndim;
    out[OMC__FFI_GOT_offset] = (uint64_t)((const uint8_t*)s.data - (const uint8_t*)data);
    out[OMC__FFI_GOT_segment_size] = s.size;
    for (d = 0; d < s.ndim && d < OMC_MAX_DIMS; d++) out[OMC__FFI_GOT_shape0 + d] = (uint64_t)s.shape[d];
    return OMC_OK;
}

/* A metadata-less get from one registered sender of a remote connector (omc_tcp_get_from). */
OMNICONN_API omc_result omc_ffi_get_from(omc_conn* conn, const char* sender, const char* from, const char* to,
                                         const char* key, omc_time_ns deadline,
                                         omc_buffer** out, void** data, uint64_t* size, uint32_t* flags) {
    omc_buffer b;
    omc_result r;
    if (!out) return OMC_ERR_INVALID_ARG;
    *out = NULL;
    omc__ffi_last[0] = 0;
    memset(&b, 0, sizeof(b));
    r = omc_tcp_get_from(conn, sender, from, to, key, deadline, &b);
    if (r != OMC_OK) return r;
    return omc__ffi_hand_out(&b, out, data, size, flags);
}

/* Does a sender (NULL = every registered one) have the key now? Consumes nothing. */
OMNICONN_API omc_result omc_ffi_tcp_query(omc_conn* conn, const char* sender, const char* from, const char* to,
                                          const char* key, omc_time_ns deadline, uint64_t* size) {
    omc_tcp_found f;
    omc_result r;
    memset(&f, 0, sizeof(f));
    omc__ffi_last[0] = 0;
    r = omc_tcp_query(conn, sender, from, to, key, deadline, &f);
    if (size) *size = r == OMC_OK ? f.size : 0;
    return r;
}

/* Release the bytes and free the handle (NULL is OMC_OK). */
OMNICONN_API omc_result omc_ffi_buffer_release(omc_buffer* buffer) {
    omc_result r;
    if (!buffer) return OMC_OK;
    r = omc_buffer_release(buffer);
    free(buffer);
    return r;
}

/* ============================================================================================== */
/* [SECTION] FFI: health                                                                          */
/* ============================================================================================== */

#define OMC__FFI_HEALTH(X) \
    X(state) X(transport) X(role) X(puts) X(gets) X(releases) X(bytes_put) X(bytes_got) X(errors) \
    X(timeouts) X(ttl_reclaims) X(live_entries) X(pool_capacity) X(pool_in_use) X(last_error)

/* The names of the values omc_ffi_health fills, comma-separated, in order. */
OMNICONN_API const char* omc_ffi_health_fields(void) {
#define OMC__X(f) #f ","
    static const char names[] = OMC__FFI_HEALTH(OMC__X);
#undef OMC__X
    return names;
}

/* values[i] = the i-th field (signed values are stored as their two's complement). */
OMNICONN_API omc_result omc_ffi_health(omc_conn* conn, uint64_t* values, uint32_t count, char* text, size_t text_size) {
    omc_health h;
    uint64_t all[32];
    uint32_t n = 0, i;
    omc_result r;
    memset(&h, 0, sizeof(h));
    r = omc_conn_health(conn, &h);
    if (r != OMC_OK) return r;
#define OMC__X(f) all[n++] = (uint64_t)(int64_t)h.f;
    OMC__FFI_HEALTH(OMC__X)
#undef OMC__X
    for (i = 0; values && i < count && i < n; i++) values[i] = all[i];
    if (text && text_size) snprintf(text, text_size, "%s", h.last_error_text);
    return OMC_OK;
}

/* ============================================================================================== */
/* [SECTION] FFI: frames                                                                          */
/* ============================================================================================== */

/* Segment i is names[i], dtypes[i] (0 = bytes), ndims[i], shapes[i*OMC_MAX_DIMS ...], sizes[i]. */
static omc_result omc__ffi_segs(uint32_t count, const char* const* names, const int32_t* dtypes, const uint32_t* ndims,
                                const int64_t* shapes, const uint64_t* sizes, const void* const* datas,
                                omc_segment_desc** out) {
    omc_segment_desc* s;
    uint32_t i, d;
    *out = NULL;
    if (count == 0 || count > OMC_FRAME_MAX_SEGMENTS || !names || !dtypes || !ndims || !shapes || !sizes)
        return OMC_ERR_INVALID_ARG;
    s = (omc_segment_desc*)calloc(count, sizeof(*s));
    if (!s) return OMC_ERR_NO_MEMORY;
    for (i = 0; i < count; i++) {
        if (ndims[i] > OMC_MAX_DIMS) { free(s); return OMC_ERR_INVALID_ARG; }
        s[i].name = names[i];
        s[i].dtype = (omc_dtype)dtypes[i];
        s[i].ndim = dtypes[i] ? ndims[i] : 0;
        for (d = 0; d < s[i].ndim; d++) s[i].shape[d] = shapes[(size_t)i * OMC_MAX_DIMS + d];
        s[i].size = sizes[i];
        s[i].data = datas ? datas[i] : NULL;
    }
    *out = s;
    return OMC_OK;
}

OMNICONN_API omc_result omc_ffi_frame_size(uint32_t count, const char* const* names, const int32_t* dtypes,
                                           const uint32_t* ndims, const int64_t* shapes, const uint64_t* sizes,
                                           uint64_t* out_size) {
    omc_segment_desc* s;
    omc_result r = omc__ffi_segs(count, names, dtypes, ndims, shapes, sizes, NULL, &s);
    if (r != OMC_OK) return r;
    r = omc_frame_size(s, count, out_size);
    free(s);
    return r;
}

OMNICONN_API omc_result omc_ffi_frame_build(void* dst, uint64_t dst_size, uint32_t count, const char* const* names,
                                            const int32_t* dtypes, const uint32_t* ndims, const int64_t* shapes,
                                            const uint64_t* sizes, const void* const* datas, uint64_t* out_size) {
    omc_segment_desc* s;
    omc_result r = omc__ffi_segs(count, names, dtypes, ndims, shapes, sizes, datas, &s);
    if (r != OMC_OK) return r;
    r = omc_frame_build(dst, dst_size, s, count, 0, NULL, out_size);
    free(s);
    return r;
}

/* Put one named tensor (dtype 0: bytes) as a one-segment frame: laid out straight in a pool
   buffer where the connector has one (one copy), else built on the heap and put (two). */
OMNICONN_API omc_result omc_ffi_put_tensor(omc_conn* conn, const char* from, const char* to, const char* key,
                                           const char* name, int32_t dtype, uint32_t ndim, const int64_t* shape,
                                           const void* data, uint64_t size, uint32_t readers, int64_t ttl_ms,
                                           void* meta_out, uint32_t meta_cap, uint32_t* meta_size) {
    omc_segment_desc s;
    omc_buffer* b = NULL;
    uint64_t total = 0, used = 0;
    uint32_t d;
    omc_result r;
    if (ndim > OMC_MAX_DIMS || (ndim && !shape)) return OMC_ERR_INVALID_ARG;
    memset(&s, 0, sizeof(s));
    s.name = name;
    s.dtype = (omc_dtype)dtype;
    s.ndim = dtype ? ndim : 0;
    for (d = 0; d < s.ndim; d++) s.shape[d] = shape[d];
    s.size = size;
    s.data = data;
    r = omc_frame_size(&s, 1, &total);
    if (r != OMC_OK) return r;
    r = omc_ffi_alloc(conn, total, OMC_WAIT_FOREVER, &b, NULL);
    if (r == OMC_OK) {
        r = omc_frame_build(b->data, total, &s, 1, 0, NULL, &used);
        if (r == OMC_OK)
            r = omc_ffi_put_buffer(conn, from, to, key, b, OMC_PAYLOAD_FRAME, readers, ttl_ms, meta_out, meta_cap,
                                   meta_size);
        if (r != OMC_OK) omc_ffi_buffer_release(b);
        return r;
    }
    if (r != OMC_ERR_UNAVAILABLE) return r;
    {   /* a connector without its own pool */
        void* tmp = malloc(total ? total : 1);
        if (!tmp) return OMC_ERR_NO_MEMORY;
        r = omc_frame_build(tmp, total, &s, 1, 0, NULL, &used);
        if (r == OMC_OK)
            r = omc_ffi_put(conn, from, to, key, tmp, used, OMC_PAYLOAD_FRAME, readers, ttl_ms, meta_out, meta_cap,
                            meta_size);
        free(tmp);
        return r;
    }
}

OMNICONN_API omc_result omc_ffi_frame_count(const void* src, uint64_t size, int verify, uint32_t* count) {
    omc_frame f;
    omc_result r = omc_frame_decode(src, size, verify, &f);
    if (count) *count = r == OMC_OK ? f.count : 0;
    return r;
}

/* Segment index of the frame at src: its name (NUL-terminated), kind, dtype, shape and where its
   bytes are (offset from src, size). */
OMNICONN_API omc_result omc_ffi_frame_segment(const void* src, uint64_t size, uint32_t index, char* name,
                                              size_t name_size, int32_t* kind, int32_t* dtype, uint32_t* ndim,
                                              int64_t* shape, uint64_t* offset, uint64_t* seg_size) {
    omc_frame f;
    omc_segment s;
    uint32_t d;
    omc_result r = omc_frame_decode(src, size, 0, &f);
    if (r != OMC_OK) return r;
    r = omc_frame_segment(&f, index, &s);
    if (r != OMC_OK) return r;
    if (name && name_size) snprintf(name, name_size, "%.*s", (int)s.name_len, s.name);
    if (kind) *kind = (int32_t)s.kind;
    if (dtype) *dtype = (int32_t)s.dtype;
    if (ndim) *ndim = s.ndim;
    for (d = 0; shape && d < OMC_MAX_DIMS; d++) shape[d] = d < s.ndim ? s.shape[d] : 0;
    if (offset) *offset = (uint64_t)((const uint8_t*)s.data - (const uint8_t*)src);
    if (seg_size) *seg_size = s.size;
    return OMC_OK;
}
