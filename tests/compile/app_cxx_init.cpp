/* app_cxx_init.cpp - every desc of every header initialised the way the manuals say C++ does it:
       T d = {};      (C: T d = {0};)
   In C++ "= {0}" does not compile for a struct whose first member is an enum (0 is an int, not
   that enum); "= {}" value-initialises every member to zero, which is the default everywhere.
   Built by tests/compile/run.sh with g++ and clang++, warnings as errors; runs and checks that
   the zero desc creates a same-process connector and an SHM one. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_shm.h"
#include "omniconn_rdma.h"
#include "omniconn_pipeline.h"
#include <cstdio>

int main() {
    omc_alloc_desc alloc_desc = {};
    omc_pool_desc pool_desc = {};
    omc_local_desc local_desc = {};
    omc_shm_desc shm_desc = {};
    omc_tcp_desc tcp_desc = {};
    omc_rdma_desc rdma_desc = {};
    omc_rdma_connector_desc rdma_connector_desc = {};
    omc_segment_desc segment_desc = {};
    omc_pipeline_config_desc config_desc = {};
    omc_pipeline_connect_desc connect_desc = {};
    omc_stream_desc stream_desc = {};
    omc_xfer_map_desc xfer_map_desc = {};
    omc_payload payload = {};
    omc_meta meta = {};
    omc_buffer buffer = {};
    omc_conn* conn = NULL;
    (void)alloc_desc; (void)pool_desc; (void)tcp_desc; (void)rdma_desc; (void)rdma_connector_desc; (void)segment_desc;
    (void)config_desc; (void)connect_desc; (void)stream_desc; (void)xfer_map_desc; (void)payload; (void)meta; (void)buffer;
    if (local_desc.role != OMC_ROLE_DEFAULT || omc_local_create(&local_desc, &conn) != OMC_OK) { std::puts("local: the zero desc failed"); return 1; }
    omc_conn_destroy(conn);
    conn = NULL;
    shm_desc.channel = "app_cxx_init";
    if (omc_shm_create(&shm_desc, &conn) != OMC_OK) { std::puts("shm: the zero desc (plus a channel) failed"); return 1; }
    omc_conn_destroy(conn);
    std::puts("app_cxx_init: ok");
    return 0;
}
