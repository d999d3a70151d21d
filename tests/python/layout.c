/* Prints, as JSON, every number the Python package takes from the headers: result codes,
   enum values, flags, limits, the sizes of the C types behind its ctypes signatures and the
   order of the health values. tests/python/test_layout.py compares them with python/omniconn. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"
#include "omniconn_rdma.h"
#include "omniconn_pipeline.h"
#include <stdio.h>

#define C(name) printf("%s\"%s\": %lld", first ? "" : ", ", #name, (long long)(name)), first = 0
#define T(type) printf("%s\"%s\": %u", first ? "" : ", ", #type, (unsigned)sizeof(type)), first = 0

int main(void) {
    int first = 1;
    printf("{\"constants\": {");
    C(OMC_OK); C(OMC_ERR_INVALID_ARG); C(OMC_ERR_UNAVAILABLE); C(OMC_ERR_TIMEOUT); C(OMC_ERR_CLOSED);
    C(OMC_ERR_NOT_FOUND); C(OMC_ERR_EXISTS); C(OMC_ERR_TOO_LARGE); C(OMC_ERR_RDMA_DEVICE);
    C(OMC_ROLE_DEFAULT); C(OMC_ROLE_SENDER); C(OMC_ROLE_RECEIVER); C(OMC_ROLE_DUAL);
    C(OMC_TRANSPORT_NONE); C(OMC_TRANSPORT_LOCAL); C(OMC_TRANSPORT_SHM); C(OMC_TRANSPORT_TCP); C(OMC_TRANSPORT_RDMA);
    C(OMC_FEATURE_LOCAL); C(OMC_FEATURE_SHM); C(OMC_FEATURE_ZMQ); C(OMC_FEATURE_RDMA); C(OMC_FEATURE_CUDA);
    C(OMC_DTYPE_U8); C(OMC_DTYPE_I8); C(OMC_DTYPE_U16); C(OMC_DTYPE_I16); C(OMC_DTYPE_U32); C(OMC_DTYPE_I32);
    C(OMC_DTYPE_U64); C(OMC_DTYPE_I64); C(OMC_DTYPE_F16); C(OMC_DTYPE_BF16); C(OMC_DTYPE_F32); C(OMC_DTYPE_F64);
    C(OMC_DTYPE_BOOL);
    C(OMC_SEGMENT_BYTES); C(OMC_SEGMENT_TENSOR);
    C(OMC_PAYLOAD_FRAME); C(OMC_BUFFER_FRAME); C(OMC_BUFFER_READONLY);
    C(OMC_MAX_DIMS); C(OMC_KEY_MAX); C(OMC_FRAME_MAX_NAME); C(OMC_META_MAX_SIZE);
    C(OMC_TCP_HOST_MAX); C(OMC_CURVE_KEY_LEN);
    C(OMC_LOG_ERROR); C(OMC_LOG_WARN); C(OMC_LOG_INFO); C(OMC_LOG_DEBUG);
    printf("}, \"types\": {");
    first = 1;
    T(omc_result); T(omc_role); T(omc_feature); T(omc_transport); T(omc_time_ns); T(size_t); T(void*); T(uint16_t);
    printf("}, \"health\": [");
    {   /* the fields omc_ffi_health copies, in the order lib/libomniconn.c lists them */
        static const char* names[] = { "state", "transport", "role", "puts", "gets", "releases", "bytes_put",
                                       "bytes_got", "errors", "timeouts", "ttl_reclaims", "live_entries",
                                       "pool_capacity", "pool_in_use", "last_error" };
        unsigned i;
        for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) printf("%s\"%s\"", i ? ", " : "", names[i]);
    }
    printf("]}\n");
    return 0;
}
