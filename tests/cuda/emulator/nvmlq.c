/* NVML memory queries of a process that allocated through CUDA:   nvmlq BYTES
 * Prints the exported nvmlDeviceGetMemoryInfo / _v2 answers for device 0 and the dlsym'd one. */
#include "common.h"

#include <dlfcn.h>

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
int nvmlInit_v2(void);
int nvmlDeviceGetHandleByIndex_v2(unsigned, void **);
int nvmlDeviceGetMemoryInfo(void *, nvmlMemory_t *);
int nvmlDeviceGetMemoryInfo_v2(void *, nvmlMemory_v2_t *);

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUdeviceptr p;
    void *d;
    nvmlMemory_t m, m3;
    nvmlMemory_v2_t m2 = {.version = (unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24))};
    if (argc != 2) return 2;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc_v2(&p, strtoull(argv[1], NULL, 10)));
    if (nvmlInit_v2() || nvmlDeviceGetHandleByIndex_v2(0, &d) || nvmlDeviceGetMemoryInfo(d, &m) ||
        nvmlDeviceGetMemoryInfo_v2(d, &m2))
        return 3;
    int (*q)(void *, nvmlMemory_t *) = (int (*)(void *, nvmlMemory_t *))dlsym(dlopen("libnvidia-ml.so.1", RTLD_NOW),
                                                                              "nvmlDeviceGetMemoryInfo");
    if (!q || q(d, &m3)) return 4;
    printf("total=%llu used=%llu free=%llu\n", m.total, m.used, m.free);
    printf("total2=%llu used2=%llu free2=%llu\n", m2.total, m2.used, m2.free);
    printf("total3=%llu used3=%llu free3=%llu\n", m3.total, m3.used, m3.free);
    return 0;
}
