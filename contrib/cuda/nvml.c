/* NVML memory queries (what nvidia-smi and frameworks' device probes read) report the tenant's cap and
 * usage. The NVML device is matched to the CUDA device of the same PCI bus id (CUDA ordinals and NVML
 * indexes differ under CUDA_VISIBLE_DEVICES or the default fastest-first order); when CUDA is not
 * initialised in the process, the NVML index is taken as the ordinal.
 * Types from the NVML API reference (nvml.h): nvmlMemory_t {total, free, used}; nvmlMemory_v2_t
 * {version, total, reserved, free, used}; nvmlPciInfo_t {busIdLegacy[16], domain, bus, device, ...}. */
#define _GNU_SOURCE
#include "vgpukit_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
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
#define NVML_ERROR_UNINITIALIZED 1

void *real_nvmlDeviceGetMemoryInfo, *real_nvmlDeviceGetMemoryInfo_v2;
static void *real_pci, *real_index;

/* The driver's NVML functions: from the loaded libnvidia-ml.so.1 (or the handle a dlsym used). */
static void resolve(void *handle)
{
    if (!handle)
        handle = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!handle)
        return;
    if (!real_nvmlDeviceGetMemoryInfo)
        real_nvmlDeviceGetMemoryInfo = vgc_real_dlsym(handle, "nvmlDeviceGetMemoryInfo");
    if (!real_nvmlDeviceGetMemoryInfo_v2)
        real_nvmlDeviceGetMemoryInfo_v2 = vgc_real_dlsym(handle, "nvmlDeviceGetMemoryInfo_v2");
    if (!real_pci)
        real_pci = vgc_real_dlsym(handle, "nvmlDeviceGetPciInfo_v3");
    if (!real_index)
        real_index = vgc_real_dlsym(handle, "nvmlDeviceGetIndex");
}

static int cuda_device(nvmlDevice_t d)
{
    nvmlPciInfo_t pci;
    unsigned idx;
    int n = 0;
    char id[64];
    if (real_pci && ((nvmlReturn_t(*)(nvmlDevice_t, nvmlPciInfo_t *))real_pci)(d, &pci) == 0 &&
        REAL(cuDeviceGetCount, CUresult (*)(int *))(&n) == CUDA_SUCCESS) {
        for (int i = 0; i < n && i < VGC_MAXDEV; i++) {
            unsigned dom, bus, dev;
            if (REAL(cuDeviceGetPCIBusId, CUresult (*)(char *, int, CUdevice))(id, sizeof(id), i) == CUDA_SUCCESS &&
                sscanf(id, "%x:%x:%x", &dom, &bus, &dev) == 3 && dom == pci.domain && bus == pci.bus &&
                dev == pci.device)
                return i;
        }
        return -1; /* a device this process's CUDA does not see */
    }
    if (real_index && ((nvmlReturn_t(*)(nvmlDevice_t, unsigned *))real_index)(d, &idx) == 0)
        return (int)idx;
    return -1;
}

/* total -> min(cap, total); used -> the tenant's; free -> what is left of the cap (never more than free). */
static void adjust(nvmlDevice_t d, unsigned long long *total, unsigned long long *fr, unsigned long long *used,
                   unsigned long long reserved)
{
    int dev = cuda_device(d);
    if (dev < 0 || dev >= VGC_MAXDEV || !vgc.cap[dev])
        return;
    unsigned long long cap = vgc.cap[dev] < *total ? vgc.cap[dev] : *total, u = vgc_used(dev);
    unsigned long long left = u + reserved < cap ? cap - u - reserved : 0;
    *total = cap;
    *used = u;
    *fr = left < *fr ? left : *fr;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    vgc_init();
    resolve(NULL);
    if (!real_nvmlDeviceGetMemoryInfo)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = ((nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))real_nvmlDeviceGetMemoryInfo)(d, m);
    if (r == 0 && vgc.tenant_set)
        adjust(d, &m->total, &m->free, &m->used, 0);
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    vgc_init();
    resolve(NULL);
    if (!real_nvmlDeviceGetMemoryInfo_v2)
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = ((nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))real_nvmlDeviceGetMemoryInfo_v2)(d, m);
    if (r == 0 && vgc.tenant_set)
        adjust(d, &m->total, &m->free, &m->used, m->reserved);
    return r;
}

/* dlsym of an NVML memory query on any handle that has the real one: the wrapper. */
void *vgc_nvml_dlsym(void *handle, const char *symbol, void *real)
{
    void *w = NULL;
    if (!strcmp(symbol, "nvmlDeviceGetMemoryInfo"))
        w = (void *)nvmlDeviceGetMemoryInfo;
    else if (!strcmp(symbol, "nvmlDeviceGetMemoryInfo_v2"))
        w = (void *)nvmlDeviceGetMemoryInfo_v2;
    if (!w || real == w)
        return real;
    resolve(handle);
    return w;
}
