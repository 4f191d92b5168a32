/* libvgpukit-cuda internals: shared by hook.c (resolution, config), memory.c (caps), launch.c (compute). */
#ifndef VGPUKIT_CUDA_H
#define VGPUKIT_CUDA_H
#include "cudadefs.h"

#define EXPORT __attribute__((visibility("default")))
#define VGC_MAXDEV 32

/* Every driver function the library wraps: X(name). The wrapper is the exported function of that name;
 * real_<name> is the driver's, resolved in libcuda.so.1 (NULL when the driver lacks it). */
#define VGC_HOOKS(X)                                                                                         \
    X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemAllocAsync)               \
    X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFree)            \
    X(cuMemFree_v2) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)         \
    X(cuMemUnmap) X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMipmappedArrayCreate)         \
    X(cuMipmappedArrayDestroy) X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuDeviceGetDefaultMemPool)              \
    X(cuDeviceGetMemPool) X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2) X(cuLaunchKernel) X(cuLaunchKernel_ptsz)    \
    X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)  \
    X(cuGraphLaunch) X(cuGraphLaunch_ptsz)                                                                   \
    X(cuStreamDestroy_v2) X(cuGetProcAddress) X(cuGetProcAddress_v2)

/* Driver functions the library calls but does not wrap. */
#define VGC_USES(X)                                                                                          \
    X(cuCtxGetDevice) X(cuCtxGetCurrent) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuStreamGetCtx)         \
    X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)                \
    X(cuEventElapsedTime) X(cuDeviceGetCount) X(cuDeviceGetPCIBusId) X(cuStreamSynchronize) X(cuMemAdvise)         \
    X(cuMemAdvise_v2) X(cuMemPrefetchAsync) X(cuMemPrefetchAsync_v2)

#define X(n) extern void *real_##n;
VGC_HOOKS(X)
VGC_USES(X)
#undef X

/* Call the driver's function n with the given prototype; a driver without it answers NOT_INITIALIZED. */
#define REAL(n, proto) (real_##n ? (proto)real_##n : (proto)(void *)vgc_missing)
#define REAL_OR(f) ((f) ? (f) : (__typeof__(f))(void *)vgc_missing)
CUresult vgc_missing(void);
extern int vgc_ready;
void vgc_init_slow(void);
static inline void vgc_init(void)
{
    if (__builtin_expect(!__atomic_load_n(&vgc_ready, __ATOMIC_ACQUIRE), 0))
        vgc_init_slow();
}

/* Configuration (hook.c), fixed after vgc_init. */
struct vgc_config {
    int tenant_set;           /* 0: pure pass-through */
    uint64_t cap[VGC_MAXDEV]; /* bytes per device; 0 = uncapped */
    unsigned inflight;        /* launches outstanding per stream; 0 = unbounded */
    unsigned inflight_ms;     /* ms of estimated work outstanding per stream; 0 = unbounded */
    int demand;               /* demand datagrams to the QoS daemon */
    long long idle_ns;
    unsigned pitch_align;
    /* memory QoS (burst.c) */
    uint64_t burst[VGC_MAXDEV]; /* unified memory beyond the cap, offline tenants only; 0 = none */
    int cls;                    /* 0 not set, 1 online, 2 offline */
    uint64_t watermark;         /* online: report "low" when the device's free memory falls under it */
    unsigned reclaim_ms;        /* online: how long an allocation the device refused waits for memory */
    char dir[4200];             /* the tenant's directory */
};
extern struct vgc_config vgc;

/* Shared accounting (region.c). */
int vgc_region_open(const char *dir);
int vgc_charge(int dev, uint64_t bytes);  /* 0 charged, -1 over the cap */
void vgc_uncharge(int dev, uint64_t bytes);
int vgc_charge_kind(int dev, uint64_t bytes, int evictable);
void vgc_uncharge_kind(int dev, uint64_t bytes, int evictable, int evicted);
void vgc_moved(int dev, uint64_t bytes, int to_host);
uint64_t vgc_evicted_total(void);
void vgc_ack(uint32_t seq);

/* Memory QoS (burst.c) */
int vgc_burst_on(int dev);
CUresult vgc_um_alloc(int dev, CUdeviceptr *p, size_t n, unsigned flags);
int vgc_um_free(CUdeviceptr p, CUresult *r);
int vgc_reclaim(int dev, uint64_t n, long long *deadline);
void vgc_after_alloc(int dev);
void vgc_burst_setup(void);
uint64_t vgc_used(int dev);

void vgc_region_after_fork(void);
void *vgc_wrapper_of(void *real);
void *vgc_real_dlsym(void *handle, const char *symbol);
int vgc_in_init(void);
void *vgc_nvml_dlsym(void *handle, const char *symbol, void *real);

/* memory.c / launch.c */
void vgc_memory_after_fork(void);
void vgc_launch_setup(void);

#endif
