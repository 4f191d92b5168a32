/* A fake libnvidia-ml.so.1 for tests: the devices of the emulator (VGPUKIT_EMU_DEVICES, VGPUKIT_EMU_MEMORY),
 * memory queries only. Device i has PCI bus 0x10 + i, as the emulator's cuDeviceGetPCIBusId says.
 * Types from the NVML API reference (nvml.h): nvmlMemory_t {total, free, used}, nvmlMemory_v2_t {version,
 * total, reserved, free, used}, nvmlPciInfo_t {busIdLegacy[16], domain, bus, device, pciDeviceId,
 * pciSubSystemId, busId[32]}. Used memory is what this process allocated through the emulator. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct {
    int index;
} *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static struct {
    int index;
} devs[8];
static int ndev = 1;
static unsigned long long total = 1ULL << 30;

int vgpuemu_stats(int dev, uint64_t *used, uint64_t *peak) __attribute__((weak));

nvmlReturn_t nvmlInit_v2(void)
{
    const char *s;
    if ((s = getenv("VGPUKIT_EMU_DEVICES")) && atoi(s) >= 1 && atoi(s) <= 8) ndev = atoi(s);
    if ((s = getenv("VGPUKIT_EMU_MEMORY")) && strtoull(s, NULL, 10) > 0) total = strtoull(s, NULL, 10);
    for (int i = 0; i < 8; i++) devs[i].index = i;
    return 0;
}
nvmlReturn_t nvmlShutdown(void) { return 0; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) { return *n = (unsigned)ndev, 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d)
{
    if (i >= (unsigned)ndev) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = (nvmlDevice_t)&devs[i];
    return 0;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *i) { return *i = (unsigned)d->index, 0; }
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p)
{
    memset(p, 0, sizeof(*p));
    p->bus = 0x10 + (unsigned)d->index;
    snprintf(p->busId, sizeof(p->busId), "00000000:%02X:00.0", p->bus);
    snprintf(p->busIdLegacy, sizeof(p->busIdLegacy), "0000:%02X:00.0", p->bus);
    return 0;
}
static unsigned long long used_of(nvmlDevice_t d)
{
    uint64_t used = 0, peak = 0;
    if (vgpuemu_stats) vgpuemu_stats(d->index, &used, &peak);
    return used;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    if (!d || !m) return 2;
    m->total = total, m->used = used_of(d), m->free = total - m->used;
    return 0;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    if (!d || !m || m->version == 0) return 2;
    m->total = total, m->reserved = 0, m->used = used_of(d), m->free = total - m->used;
    return 0;
}
