/* test_rdma_topology.c - NIC choice by topology (omc_rdma_topo_read / _pci_device / _rank in
   omniconn_rdma.h) over a fake sysfs tree built in a temporary folder: PCIe switch, root
   complex, NUMA nodes, an unknown node, software devices with and without a PCI netdev. And
   the other parts of rails that need no device: version-2 records and descriptors (a rail per
   pair, a key and QP per extent and rail) and the subnet rule that pairs rails.
   Needs no RDMA device and no libibverbs: it runs in the plain suite. */
#define OMNICONN_IMPLEMENTATION
#include "omniconn.h"
#include "omniconn_rdma.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "omc_test.h"

static char g_root[256];

static void mkdirs(const char* rel) {
    char p[1024], *s;
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    for (s = p + strlen(g_root) + 1; *s; s++) if (*s == '/') { *s = 0; mkdir(p, 0755); *s = '/'; }
    mkdir(p, 0755);
}

static void put(const char* rel, const char* text) {
    char p[1024];
    FILE* f;
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    f = fopen(p, "w");
    if (f) { fputs(text, f); fclose(f); }
}

/* a PCI device at devices/<path> with a numa_node file ("" = no file) */
static void pci(const char* path, const char* numa) {
    char rel[512];
    snprintf(rel, sizeof(rel), "devices/%s", path);
    mkdirs(rel);
    if (numa[0]) { snprintf(rel, sizeof(rel), "devices/%s/numa_node", path); put(rel, numa); }
}

static void link_to(const char* rel, const char* target_rel) {
    char p[1024], t[1024], dir[1024], *slash;
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    snprintf(dir, sizeof(dir), "%s", rel);
    slash = strrchr(dir, '/');
    if (slash) { *slash = 0; mkdirs(dir); }
    snprintf(t, sizeof(t), "%s/%s", g_root, target_rel);
    if (symlink(t, p) != 0) perror(p);
}

#define GPU   "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0"
#define NIC0  "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0"
#define NIC1  "pci0000:00/0000:00:02.0/0000:05:00.0"
#define NIC2  "pci0000:40/0000:40:01.0/0000:41:00.0"
#define NIC3  "pci0000:80/0000:80:01.0/0000:81:00.0"
#define ETH   "pci0000:80/0000:80:02.0/0000:82:00.0"
#define NIC4  "pci0000:c0/0000:c0:01.0/0000:c1:00.0"

static void build_tree(void) {
    snprintf(g_root, sizeof(g_root), "/tmp/omc-topo-XXXXXX");
    if (!mkdtemp(g_root)) { perror("mkdtemp"); exit(1); }
    pci(GPU, "0\n"); pci(NIC0, "0\n"); pci(NIC1, "0\n"); pci(NIC2, "0\n"); pci(NIC3, "1\n"); pci(ETH, "1\n");
    pci(NIC4, "-1\n");
    link_to("bus/pci/devices/0000:03:00.0", "devices/" GPU);
    link_to("class/infiniband/mlx5_0/device", "devices/" NIC0);
    link_to("class/infiniband/mlx5_1/device", "devices/" NIC1);
    link_to("class/infiniband/mlx5_2/device", "devices/" NIC2);
    link_to("class/infiniband/mlx5_3/device", "devices/" NIC3);
    link_to("class/infiniband/mlx5_4/device", "devices/" NIC4);
    mkdirs("class/infiniband/rxe0/ports/1/gid_attrs/ndevs");     /* rxe on a PCI NIC's netdev */
    put("class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "ens9\n");
    link_to("class/net/ens9/device", "devices/" ETH);
    pci(ETH "/virtio5", "");                                     /* no numa_node: its parent's counts */
    mkdirs("class/infiniband/rxe2/ports/1/gid_attrs/ndevs");     /* rxe on a virtio netdev */
    put("class/infiniband/rxe2/ports/1/gid_attrs/ndevs/0", "eth7\n");
    link_to("class/net/eth7/device", "devices/" ETH "/virtio5");
    mkdirs("class/infiniband/rxe1/ports/1/gid_attrs/ndevs");     /* rxe on a veth: no PCI at all */
    put("class/infiniband/rxe1/ports/1/gid_attrs/ndevs/0", "veth0\n");
    mkdirs("class/net/veth0");
}

static omc_rdma_topo_nic g_nics[16];
static int g_n;

static const char* order(const omc_rdma_topo_choice* r, int n, char* buf, size_t cap) {
    int i;
    buf[0] = 0;
    for (i = 0; i < n; i++) {
        size_t u = strlen(buf);
        snprintf(buf + u, cap - u, "%s%s:%d", i ? " " : "", g_nics[r[i].index].name, (int)r[i].tier);
    }
    return buf;
}

#define CHECK_STR(a, b) do { if (strcmp((a), (b)) != 0) { OMC_TEST_FAIL(); \
    fprintf(stderr, "  %s:%d: got  \"%s\"\n  expected \"%s\"\n", __FILE__, __LINE__, (a), (b)); } } while (0)

OMC_TEST(reads_every_device_sorted_with_place_and_node) {
    CHECK_EQ(g_n, 8);
    CHECK_STR(g_nics[0].name, "mlx5_0");
    CHECK_STR(g_nics[0].pci_path, NIC0);
    CHECK_EQ(g_nics[0].numa_node, 0);
    CHECK_EQ(g_nics[0].soft, 0);
    CHECK_EQ(g_nics[3].numa_node, 1);
    CHECK_EQ(g_nics[4].numa_node, -1);          /* "-1" in sysfs: not known */
    CHECK_STR(g_nics[5].name, "rxe0");
    CHECK_EQ(g_nics[5].soft, 1);
    CHECK_STR(g_nics[5].netdev, "ens9");
    CHECK_STR(g_nics[5].pci_path, ETH);         /* a software device takes its netdev's place */
    CHECK_EQ(g_nics[5].numa_node, 1);
    CHECK_STR(g_nics[6].name, "rxe1");
    CHECK_STR(g_nics[6].pci_path, "");
    CHECK_EQ(g_nics[6].numa_node, -1);
    CHECK_STR(g_nics[7].name, "rxe2");
    CHECK_STR(g_nics[7].pci_path, ETH "/virtio5");
    CHECK_EQ(g_nics[7].numa_node, 1);           /* from the PCI function above the virtio device */
}

OMC_TEST(gpu_buffer_prefers_switch_then_root_then_node) {
    char path[OMC_RDMA_TOPO_PATH_MAX], buf[512];
    int numa = -9;
    omc_rdma_topo_choice r[16];
    CHECK_EQ(omc_rdma_topo_pci_device(g_root, "0000:03:00.0", path, sizeof(path), &numa), 1);
    CHECK_STR(path, GPU);
    CHECK_EQ(numa, 0);
    omc_rdma_topo_rank(g_nics, g_n, -1, path, numa, r);
    CHECK_STR(order(r, g_n, buf, sizeof(buf)), "mlx5_0:0 mlx5_1:1 mlx5_2:2 mlx5_4:3 rxe1:3 mlx5_3:4 rxe0:4 rxe2:4");
    CHECK(strstr(r[0].why, "same PCIe switch") != NULL);
    CHECK(strstr(r[5].why, "crosses sockets") != NULL);
    CHECK(strstr(r[6].why, "software device on ens9") != NULL);
    /* an explicit buffer node overrides the GPU's for the NUMA tiers, not the PCI ones */
    omc_rdma_topo_rank(g_nics, g_n, 1, path, numa, r);
    CHECK_STR(order(r, g_n, buf, sizeof(buf)), "mlx5_0:0 mlx5_1:1 mlx5_3:2 rxe0:2 rxe2:2 mlx5_4:3 rxe1:3 mlx5_2:4");
}

OMC_TEST(host_buffer_prefers_its_node) {
    char buf[512];
    omc_rdma_topo_choice r[16];
    omc_rdma_topo_rank(g_nics, g_n, 1, NULL, -1, r);
    CHECK_STR(order(r, g_n, buf, sizeof(buf)), "mlx5_3:2 rxe0:2 rxe2:2 mlx5_4:3 rxe1:3 mlx5_0:4 mlx5_1:4 mlx5_2:4");
    omc_rdma_topo_rank(g_nics, g_n, 0, NULL, -1, r);
    CHECK_STR(order(r, g_n, buf, sizeof(buf)), "mlx5_0:2 mlx5_1:2 mlx5_2:2 mlx5_4:3 rxe1:3 mlx5_3:4 rxe0:4 rxe2:4");
    /* node not known: every device ties, name order stays */
    omc_rdma_topo_rank(g_nics, g_n, -1, NULL, -1, r);
    CHECK_STR(order(r, g_n, buf, sizeof(buf)), "mlx5_0:3 mlx5_1:3 mlx5_2:3 mlx5_3:3 mlx5_4:3 rxe0:3 rxe1:3 rxe2:3");
}

OMC_TEST(bad_inputs_are_refused_not_followed) {
    char path[OMC_RDMA_TOPO_PATH_MAX], other[300];
    int numa = 0;
    omc_rdma_topo_nic few[2];
    CHECK_EQ(omc_rdma_topo_pci_device(g_root, "0000:99:00.0", path, sizeof(path), &numa), 0);   /* absent */
    CHECK_EQ(omc_rdma_topo_pci_device(g_root, "../../etc", path, sizeof(path), &numa), 0);      /* no paths */
    CHECK_EQ(omc_rdma_topo_pci_device(g_root, "", path, sizeof(path), &numa), 0);
    CHECK_EQ(omc_rdma_topo_pci_device(g_root, NULL, path, sizeof(path), &numa), 0);
    CHECK_EQ(omc_rdma_topo_read(g_root, few, 2), 8);    /* the count, with only 2 filled */
    CHECK_STR(few[0].name, "mlx5_0");
    snprintf(other, sizeof(other), "%s/class", g_root);
    CHECK_EQ(omc_rdma_topo_read(other, few, 2), -1);    /* no class/infiniband: -1, no crash */
}

/* ---- rails without a device: version-2 records and descriptors, the subnet rule ------------- */

static omc_rdma_record rails_record(uint32_t rails, uint32_t qpp) {
    omc_rdma_record r;
    uint32_t i;
    memset(&r, 0, sizeof(r));
    r.rails = rails;
    r.qps_per_rail = qpp;
    r.qp_count = rails * qpp;
    r.flags = OMC_RDMA_FLAG_REGIONS;
    r.incarnation = 0x1122334455667788ull;
    r.conn_id = 0x0102030405060708ull;
    for (i = 0; i < rails; i++) {
        char ip[32];
        r.rail[i].port = 1;
        r.rail[i].mtu = 3;
        r.rail[i].link = OMC_RDMA_LINK_ETHERNET;
        r.rail[i].gid_index = 1;
        r.rail[i].gid_type = OMC_RDMA_GID_ROCE_V2;
        r.rail[i].prefix = 120;
        snprintf(ip, sizeof(ip), "10.99.%u.1", i);
        omc_rdma_addr_to_gid(ip, r.rail[i].gid);
    }
    for (i = 0; i < rails * qpp && i < OMC_RDMA_MAX_QPS; i++) { r.qpn[i] = 0x100 + i; r.psn[i] = 0xABC00 + i; }
    return r;
}

OMC_TEST(record_version_2_carries_every_rail) {
    omc_rdma_record a = rails_record(2, 2), b;
    uint8_t buf[OMC_RDMA_RECORD_MAX];
    size_t n = 0, i;
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    CHECK_EQ(n, 24 + 32 * 2 + 8 * 4 + 4);
    CHECK(buf[0] == 'O' && buf[3] == 'R');
    CHECK_EQ(buf[4], 2); CHECK_EQ(buf[5], 2); CHECK_EQ(buf[6], 2); CHECK_EQ(buf[7], OMC_RDMA_FLAG_REGIONS);
    CHECK_EQ(buf[8], 0x88); CHECK_EQ(buf[16], 0x08);
    CHECK_EQ(buf[24], 1); CHECK_EQ(buf[29], 120);                   /* rail 0: port, prefix */
    CHECK(buf[56 + 8 + 12] == 10 && buf[56 + 8 + 14] == 1);         /* rail 1's GID: 10.99.1.1 */
    CHECK_EQ(omc__get_u32(buf + 88 + 8 * 3), 0x103);                /* QP 3: rail 1's second */
    CHECK_OK(omc_rdma_record_decode(buf, n, &b));
    CHECK_EQ(b.rails, 2);
    CHECK_EQ(b.qps_per_rail, 2);
    CHECK_EQ(b.qp_count, 4);
    CHECK(memcmp(b.rail, a.rail, sizeof(a.rail)) == 0);
    CHECK(b.port == 1 && memcmp(b.gid, a.rail[0].gid, 16) == 0);   /* top fields: the first rail */
    /* an acceptor's answer: rail 0 unpaired (port 0, its QPs absent) */
    a = rails_record(2, 2);
    memset(&a.rail[0], 0, sizeof(a.rail[0]));
    a.qpn[0] = a.qpn[1] = 0; a.psn[0] = a.psn[1] = 0;
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    CHECK_OK(omc_rdma_record_decode(buf, n, &b));
    CHECK(b.port == 1 && memcmp(b.gid, a.rail[1].gid, 16) == 0);
    /* what is refused, encoding and decoding */
    a = rails_record(2, 2); a.rail[1].port = 0;                        /* QPs on an unpaired rail */
    CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = rails_record(2, 2); memset(a.rail, 0, sizeof(a.rail)); memset(a.qpn, 0, sizeof(a.qpn)); memset(a.psn, 0, sizeof(a.psn));
    CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);   /* no rail at all */
    a = rails_record(4, 4);
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    CHECK(n <= OMC_RDMA_RECORD_MAX);
    a = rails_record(4, 4); a.rails = 5;
    CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = rails_record(3, 6);                                             /* 18 QPs */
    CHECK_RES(omc_rdma_record_encode(&a, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    a = rails_record(2, 2);
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    for (i = 0; i < n; i++) {           /* every truncation, and a rail count that lies */
        CHECK(omc_rdma_record_decode(buf, i, &b) != OMC_OK);
        CHECK_EQ(b.qp_count, 0);
    }
    buf[6] = 4; omc__put_u32(buf + n - 4, omc__crc32c(0, buf, n - 4));
    CHECK_RES(omc_rdma_record_decode(buf, n, &b), OMC_ERR_MALFORMED);
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    buf[24 + 30] = 1; omc__put_u32(buf + n - 4, omc__crc32c(0, buf, n - 4));   /* reserved byte */
    CHECK_RES(omc_rdma_record_decode(buf, n, &b), OMC_ERR_MALFORMED);
    CHECK_OK(omc_rdma_record_encode(&a, buf, sizeof(buf), &n));
    buf[5] = 9; omc__put_u32(buf + n - 4, omc__crc32c(0, buf, n - 4));        /* 18 QPs */
    CHECK_RES(omc_rdma_record_decode(buf, n, &b), OMC_ERR_MALFORMED);
}

OMC_TEST(descriptor_version_2_has_a_key_per_rail) {
    omc_rdma_target t, u;
    uint8_t buf[OMC_RDMA_TARGET_MAX];
    size_t n = 0;
    uint32_t i;
    memset(&t, 0, sizeof(t));
    t.conn_id = 77;
    t.flags = OMC_RDMA_FLAG_REGIONS;
    t.rails = 2;
    t.count = 3;
    for (i = 0; i < 3; i++) {
        t.extent[i].addr = 0x7f0000000000ull + i * 4096;
        t.extent[i].length = 4096;
        t.extent[i].rkeys[0] = 0x100 + i; t.extent[i].qps[0] = (uint16_t)(i % 2);
        t.extent[i].rkeys[1] = 0x200 + i; t.extent[i].qps[1] = (uint16_t)(2 + i % 2);
        t.length += 4096;
    }
    t.extent[2].rkeys[1] = 0; t.extent[2].qps[1] = OMC_RDMA_NO_QP;    /* rail 1 cannot reach it */
    CHECK_OK(omc_rdma_target_encode(&t, buf, sizeof(buf), &n));
    CHECK_EQ(n, 24 + (16 + 16) * 3 + 4);
    CHECK_EQ(buf[4], 2); CHECK_EQ(buf[5], 3); CHECK_EQ(buf[6], OMC_RDMA_FLAG_REGIONS); CHECK_EQ(buf[7], 2);
    CHECK_EQ(omc__get_u32(buf + 24 + 32 + 16 + 8), 0x201);            /* extent 1, rail 1's key */
    CHECK_EQ(omc__get_u16(buf + 24 + 64 + 16 + 8 + 4), OMC_RDMA_NO_QP);
    CHECK_OK(omc_rdma_target_decode(buf, n, 4, &u));
    CHECK_EQ(u.rails, 2);
    CHECK_EQ(u.count, 3);
    CHECK_EQ(u.extent[1].rkeys[1], 0x201);
    CHECK_EQ(u.extent[1].rkey, 0x101);                                  /* rail 0 mirrored */
    CHECK_EQ(u.extent[2].qps[1], OMC_RDMA_NO_QP);
    CHECK_RES(omc_rdma_target_decode(buf, n, 3, &u), OMC_ERR_MALFORMED);   /* QP 3 of a 3-QP connection */
    /* an extent no rail reaches, a key without a QP, the size cap */
    t.extent[2].qps[0] = OMC_RDMA_NO_QP;
    CHECK_RES(omc_rdma_target_encode(&t, buf, sizeof(buf), &n), OMC_ERR_INVALID_ARG);
    t.extent[2].qps[0] = 0;
    CHECK_OK(omc_rdma_target_encode(&t, buf, sizeof(buf), &n));
    omc__put_u32(buf + 24 + 64 + 16 + 8, 5); omc__put_u32(buf + n - 4, omc__crc32c(0, buf, n - 4));
    CHECK_RES(omc_rdma_target_decode(buf, n, 0, &u), OMC_ERR_MALFORMED);
    CHECK_EQ(u.count, 0);
    t.rails = 4;
    t.count = 21;                       /* 24 + 48 * 21 + 4 > 1024 */
    for (i = 3; i < 21; i++) t.extent[i] = t.extent[0];
    t.length = 4096 * 21;
    CHECK_RES(omc_rdma_target_encode(&t, buf, sizeof(buf), &n), OMC_ERR_TOO_LARGE);
}

OMC_TEST(subnet_rule_compares_the_prefix) {
    uint8_t a[16], b[16];
    omc_rdma_addr_to_gid("10.99.0.1", a);
    omc_rdma_addr_to_gid("10.99.0.2", b);
    CHECK(omc__rdma_same_subnet(a, b, 120));
    CHECK(!omc__rdma_same_subnet(a, b, 128));
    omc_rdma_addr_to_gid("10.99.1.2", b);
    CHECK(!omc__rdma_same_subnet(a, b, 120));                   /* another rail's subnet */
    CHECK(omc__rdma_same_subnet(a, b, 112));                    /* a /16 would pair them */
    CHECK(omc__rdma_same_subnet(a, b, 0));
}

int main(int argc, char** argv) {
    int rc;
    char cmd[300];
    build_tree();
    g_n = omc_rdma_topo_read(g_root, g_nics, 16);
    rc = omc_test_main(argc, argv);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_root);
    return rc;
}
