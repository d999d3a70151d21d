/* topology_draft.h - DRAFT, staged here for review: the lead moves it into omniconn_rdma.h
   (names, logging and the doctor output follow then). Not included by any shipped header.

   NIC choice by topology: rank RDMA devices by how close they are to the memory a transfer
   uses - a buffer's NUMA node, or a GPU's PCI device - from sysfs alone. Every function is
   pure over a sysfs root folder given by the caller ("/sys" in production, a fake tree in the
   unit test), so the rule is tested like the GID rule, without hardware.

   Tiers, best first (the same distances as `nvidia-smi topo -m`, coarsened):
     OMC_TOPO_SAME_SWITCH  NIC and GPU share a PCIe switch (their device paths share a bridge
                           below the root port: traffic never reaches the host bridge)
     OMC_TOPO_SAME_ROOT    same PCIe root complex (through the host bridge, same socket)
     OMC_TOPO_SAME_NUMA    same NUMA node as the buffer (or the GPU)
     OMC_TOPO_UNKNOWN      a NUMA node is not known (-1: one-node machines, VMs)
     OMC_TOPO_OTHER_NUMA   the other socket: every byte crosses the inter-socket link
   Ties keep the devices' name order, so the ranking is stable.

   A software device (rxe, siw) has no PCI device of its own; it takes the place of the netdev
   it is bound to (ports/1/gid_attrs/ndevs/0 -> class/net/<netdev>/device), if that has one.

   Needs POSIX (opendir, realpath). Include after <stdio.h>, <stdlib.h>, <string.h>. */
#ifndef OMC_TOPOLOGY_DRAFT_H
#define OMC_TOPOLOGY_DRAFT_H

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OMC_TOPO_NAME_MAX 64
#define OMC_TOPO_PATH_MAX 512

typedef enum omc_topo_tier {
    OMC_TOPO_SAME_SWITCH = 0,
    OMC_TOPO_SAME_ROOT = 1,
    OMC_TOPO_SAME_NUMA = 2,
    OMC_TOPO_UNKNOWN = 3,
    OMC_TOPO_OTHER_NUMA = 4
} omc_topo_tier;

typedef struct omc_topo_nic {
    char name[OMC_TOPO_NAME_MAX];       /* "mlx5_0", "rxe0" */
    char pci_path[OMC_TOPO_PATH_MAX];   /* "pci0000:3a/0000:3a:00.0/..." (below devices/), "" if none */
    int numa_node;                      /* -1 = not known */
    int soft;                           /* 1: a software device; pci_path/numa_node are its netdev's */
    char netdev[OMC_TOPO_NAME_MAX];     /* soft devices: the netdev, else "" */
} omc_topo_nic;

typedef struct omc_topo_rank {
    int index;                          /* into the array given to omc_topo_rank_nics */
    omc_topo_tier tier;
    char why[256];
} omc_topo_rank;

static __attribute__((unused)) const char* omc_topo_tier_name(omc_topo_tier t) {
    switch (t) {
    case OMC_TOPO_SAME_SWITCH: return "same PCIe switch";
    case OMC_TOPO_SAME_ROOT: return "same PCIe root complex";
    case OMC_TOPO_SAME_NUMA: return "same NUMA node";
    case OMC_TOPO_UNKNOWN: return "NUMA node not known";
    default: return "other NUMA node";
    }
}

/* ---- reading sysfs ------------------------------------------------------------------------ */

/* First line of root/rel into out (trailing newline removed); 0 if it could not be read. */
static int omc_topo__read_line(const char* root, const char* rel, char* out, size_t cap) {
    char path[OMC_TOPO_PATH_MAX + 256];
    FILE* f;
    size_t n;
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(out, (int)cap, f)) { fclose(f); return 0; }
    fclose(f);
    n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0';
    return 1;
}

/* The PCI path of root/rel (a device link): the resolved path from "devices/" on, without
   that prefix, and the device's numa_node. Returns 0 if rel is not a PCI device. */
static int omc_topo__pci_of(const char* root, const char* rel, char* path, size_t cap, int* numa) {
    char link[OMC_TOPO_PATH_MAX + 256], real[PATH_MAX], rroot[PATH_MAX], numa_rel[OMC_TOPO_PATH_MAX + 64], line[32];
    const char* p;
    size_t rl;
    snprintf(link, sizeof(link), "%s/%s", root, rel);
    if (!realpath(link, real) || !realpath(root, rroot)) return 0;
    rl = strlen(rroot);
    if (strncmp(real, rroot, rl) != 0 || strncmp(real + rl, "/devices/pci", 12) != 0) return 0;
    p = real + rl + 9;                                  /* "pci0000:3a/..." */
    if (strlen(p) >= cap) return 0;
    snprintf(path, cap, "%s", p);
    /* the device's numa_node, or its nearest ancestor's (a virtio netdev's is on its PCI parent) */
    snprintf(numa_rel, sizeof(numa_rel), "devices/%s", p);
    *numa = -1;
    for (;;) {
        size_t l = strlen(numa_rel);
        char* slash;
        if (l + 11 > sizeof(numa_rel)) break;
        memcpy(numa_rel + l, "/numa_node", 11);
        if (omc_topo__read_line(root, numa_rel, line, sizeof(line))) { *numa = atoi(line) < 0 ? -1 : atoi(line); break; }
        numa_rel[l] = '\0';
        slash = strrchr(numa_rel, '/');
        if (!slash || slash - numa_rel <= 8) break;     /* stop at "devices/" */
        *slash = '\0';
    }
    return 1;
}

static int omc_topo__cmp_str(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* Fill one device from sysfs. */
static void omc_topo__fill(const char* root, const char* name, omc_topo_nic* nic) {
    char rel[OMC_TOPO_PATH_MAX];
    memset(nic, 0, sizeof(*nic));
    nic->numa_node = -1;
    memcpy(nic->name, name, strlen(name) + 1);                 /* length checked by the caller */
    snprintf(rel, sizeof(rel), "class/infiniband/%s/device", name);
    if (omc_topo__pci_of(root, rel, nic->pci_path, sizeof(nic->pci_path), &nic->numa_node)) return;
    /* a software device: its netdev's place, if that is a PCI device */
    nic->soft = 1;
    snprintf(rel, sizeof(rel), "class/infiniband/%s/ports/1/gid_attrs/ndevs/0", name);
    if (!omc_topo__read_line(root, rel, nic->netdev, sizeof(nic->netdev)) || !nic->netdev[0]) return;
    snprintf(rel, sizeof(rel), "class/net/%s/device", nic->netdev);
    if (!omc_topo__pci_of(root, rel, nic->pci_path, sizeof(nic->pci_path), &nic->numa_node)) nic->pci_path[0] = '\0';
}

/* Every device in root/class/infiniband, in name order. Returns how many there are (may exceed
   cap: the first cap by name are filled), or -1 if the folder cannot be read. */
static __attribute__((unused)) int omc_topo_read_nics(const char* root, omc_topo_nic* out, int cap) {
    char dir[OMC_TOPO_PATH_MAX + 32];
    char** names = NULL;
    DIR* d;
    struct dirent* e;
    int n = 0, have = 0, i;
    snprintf(dir, sizeof(dir), "%s/class/infiniband", root);
    d = opendir(dir);
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len >= OMC_TOPO_NAME_MAX) continue;
        if (n == have) {
            char** grown = (char**)realloc(names, (size_t)(have ? have * 2 : 16) * sizeof(*names));
            if (!grown) break;
            names = grown;
            have = have ? have * 2 : 16;
        }
        names[n] = (char*)malloc(len + 1);
        if (!names[n]) break;
        memcpy(names[n++], e->d_name, len + 1);
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof(*names), omc_topo__cmp_str);
    for (i = 0; i < n; i++) {
        if (i < cap) omc_topo__fill(root, names[i], &out[i]);
        free(names[i]);
    }
    free(names);
    return n;
}

/* A PCI device by address ("0000:3b:00.0", e.g. a GPU): its path and NUMA node. 0 if absent. */
static __attribute__((unused)) int omc_topo_pci_device(const char* root, const char* addr, char* path, size_t cap, int* numa) {
    char rel[128];
    if (!addr || !addr[0] || strlen(addr) > 32 || strchr(addr, '/')) return 0;
    snprintf(rel, sizeof(rel), "bus/pci/devices/%s", addr);
    return omc_topo__pci_of(root, rel, path, cap, numa);
}

/* ---- the rule ----------------------------------------------------------------------------- */

/* Path components two PCI paths share ("pci0000:3a", then each bridge/port). */
static int omc_topo__common(const char* a, const char* b) {
    int n = 0;
    while (*a && *b) {
        size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
        if (la != lb || strncmp(a, b, la) != 0) break;
        n++;
        a += la; b += lb;
        if (*a == '/') a++;
        if (*b == '/') b++;
    }
    return n;
}

/* Rank n devices for memory on NUMA node buffer_numa (-1 = not known) or in the GPU at
   gpu_path (a path from omc_topo_pci_device, NULL = host memory) whose node is gpu_numa.
   out[0..n-1] gets the devices best first, each with its tier and a one-line reason. */
static __attribute__((unused)) void omc_topo_rank_nics(const omc_topo_nic* nics, int n, int buffer_numa, const char* gpu_path, int gpu_numa,
                               omc_topo_rank* out) {
    int i, j, numa = buffer_numa >= 0 ? buffer_numa : (gpu_path && gpu_path[0] ? gpu_numa : -1);
    for (i = 0; i < n; i++) {
        const omc_topo_nic* c = &nics[i];
        omc_topo_rank* r = &out[i];
        int common = (gpu_path && gpu_path[0] && c->pci_path[0]) ? omc_topo__common(c->pci_path, gpu_path) : 0;
        char via[96] = "";
        r->index = i;
        if (c->soft) snprintf(via, sizeof(via), " (software device on %s)", c->netdev[0] ? c->netdev : "no netdev");
        if (common >= 3) {
            r->tier = OMC_TOPO_SAME_SWITCH;
            snprintf(r->why, sizeof(r->why), "%s%s: under the same PCIe switch as the GPU", c->name, via);
        } else if (common >= 1) {
            r->tier = OMC_TOPO_SAME_ROOT;
            snprintf(r->why, sizeof(r->why), "%s%s: same PCIe root complex as the GPU, through the host bridge", c->name, via);
        } else if (numa >= 0 && c->numa_node >= 0) {
            r->tier = c->numa_node == numa ? OMC_TOPO_SAME_NUMA : OMC_TOPO_OTHER_NUMA;
            snprintf(r->why, sizeof(r->why), "%s%s: NUMA node %d, memory on node %d%s", c->name, via, c->numa_node, numa,
                     c->numa_node == numa ? "" : " (crosses sockets)");
        } else {
            r->tier = OMC_TOPO_UNKNOWN;
            snprintf(r->why, sizeof(r->why), "%s%s: NUMA node of the %s not known", c->name, via, c->numa_node < 0 ? "device" : "memory");
        }
    }
    /* stable insertion sort by tier: n is a handful of devices */
    for (i = 1; i < n; i++) {
        omc_topo_rank k = out[i];
        for (j = i - 1; j >= 0 && out[j].tier > k.tier; j--) out[j + 1] = out[j];
        out[j + 1] = k;
    }
}

#endif /* OMC_TOPOLOGY_DRAFT_H */
