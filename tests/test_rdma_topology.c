/* test_rdma_topology.c - NIC choice by topology (omc_rdma_topo_read / _pci_device / _rank in
   omniconn_rdma.h) over a fake sysfs tree built in a temporary folder: PCIe switch, root
   complex, NUMA nodes, an unknown node, software devices with and without a PCI netdev.
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
