/* Memory caps: every allocation path charges the tenant's region before it reaches the driver and
 * records (key -> device, bytes) so that the free uncharges the device the memory was allocated on,
 * whichever context is current at free time and whichever thread frees it.
 *
 * Device of an allocation: the current context's device (cuMemAlloc*, cuMemAllocManaged, arrays); the
 * stream's context's device (cuMemAllocAsync); the pool's location (cuMemAllocFromPoolAsync: pools are
 * recorded when created or looked up); prop->location.id for cuMemCreate with a DEVICE location (host
 * locations are not device memory and are not charged). A VMM handle stays charged until it is released
 * AND unmapped everywhere, as the driver keeps the memory until then.
 */
#define _GNU_SOURCE
#include "vgpukit_cuda.h"

#include <pthread.h>
#include <stdlib.h>

enum { K_PTR = 1, K_ARRAY, K_VMM, K_MAP, K_POOL };
struct rec {
    uint64_t key, bytes, target;
    int dev, kind, released, maps;
    struct rec *next;
};
#define NB 4096
static struct rec *tab[NB];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned bucket(uint64_t k) { return (unsigned)((k * 0x9E3779B97F4A7C15ULL) >> 52) % NB; }

static void put(uint64_t key, int kind, int dev, uint64_t bytes, uint64_t target)
{
    struct rec *r = calloc(1, sizeof(*r));
    if (!r)
        return; /* the memory stays charged: safe side */
    r->key = key, r->kind = kind, r->dev = dev, r->bytes = bytes, r->target = target;
    pthread_mutex_lock(&mu);
    r->next = tab[bucket(key)];
    tab[bucket(key)] = r;
    pthread_mutex_unlock(&mu);
}

/* Finds (and with remove, unlinks) the record of key and kind; call with mu held. */
static struct rec *find(uint64_t key, int kind, int remove)
{
    struct rec **pp = &tab[bucket(key)], *r;
    for (; (r = *pp); pp = &r->next)
        if (r->key == key && r->kind == kind) {
            if (remove)
                *pp = r->next;
            return r;
        }
    return NULL;
}

static void forget(uint64_t key, int kind)
{
    pthread_mutex_lock(&mu);
    struct rec *r = find(key, kind, 1);
    pthread_mutex_unlock(&mu);
    if (r) {
        vgc_uncharge(r->dev, r->bytes);
        free(r);
    }
}

/* A forked child starts with no allocations of its own (the driver does not carry them over). */
void vgc_memory_after_fork(void)
{
    for (int i = 0; i < NB; i++)
        tab[i] = NULL;
    pthread_mutex_init(&mu, NULL);
}

static int current_device(CUdevice *dev)
{
    return REAL(cuCtxGetDevice, CUresult (*)(CUdevice *))(dev);
}

/* The device of a stream: the current context's for the NULL/legacy/per-thread handles and for streams
 * of the current context, otherwise its own context's (pushed for the query). */
static CUresult stream_device(CUstream s, CUdevice *dev)
{
    CUcontext sc = NULL, cc = NULL;
    if ((uintptr_t)s <= 2)
        return current_device(dev);
    CUresult r = REAL(cuStreamGetCtx, CUresult (*)(CUstream, CUcontext *))(s, &sc);
    if (r != CUDA_SUCCESS)
        return r;
    REAL(cuCtxGetCurrent, CUresult (*)(CUcontext *))(&cc);
    if (sc == cc)
        return current_device(dev);
    if ((r = REAL(cuCtxPushCurrent_v2, CUresult (*)(CUcontext))(sc)) != CUDA_SUCCESS)
        return r;
    r = current_device(dev);
    REAL(cuCtxPopCurrent_v2, CUresult (*)(CUcontext *))(&cc);
    return r;
}

#define CHARGE_OR_OOM(dev, n)                                                                                \
    do {                                                                                                     \
        if (vgc_charge((dev), (n)) != 0)                                                                     \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                 \
    } while (0)

/* The common shape: charge n on dev, call the driver, record key on success, uncharge on failure. */
/* An online tenant's allocation the device refuses waits for the QoS daemon to free memory (burst.c). */
#define ALLOC(dev, n, kind, keyexpr, call)                                                                   \
    do {                                                                                                     \
        long long deadline_ = 0;                                                                             \
        CHARGE_OR_OOM(dev, n);                                                                               \
        CUresult r_ = (call);                                                                                \
        while (r_ == CUDA_ERROR_OUT_OF_MEMORY && vgc_reclaim(dev, n, &deadline_))                            \
            r_ = (call);                                                                                     \
        if (r_ == CUDA_SUCCESS) {                                                                            \
            put((uint64_t)(keyexpr), kind, dev, n, 0);                                                       \
            vgc_after_alloc(dev);                                                                            \
        } else                                                                                               \
            vgc_uncharge(dev, n);                                                                            \
        return r_;                                                                                           \
    } while (0)

/* Without a tenant, or without a device to charge (no current context), the driver answers alone. */
#define PASS_IF_OFF(call)                                                                                    \
    do {                                                                                                     \
        vgc_init();                                                                                          \
        if (!vgc.tenant_set)                                                                                 \
            return (call);                                                                                   \
    } while (0)

#define ON_CURRENT(dev, call)                                                                                \
    CUdevice dev;                                                                                            \
    PASS_IF_OFF(call);                                                                                       \
    if (current_device(&dev) != CUDA_SUCCESS)                                                                \
    return (call)

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    ON_CURRENT(dev, REAL(cuMemAlloc_v2, alloc_fn)(p, n));
    if (!p || !n)
        return REAL(cuMemAlloc_v2, alloc_fn)(p, n);
    if (vgc_burst_on(dev)) /* an offline tenant's burst: unified memory, evictable */
        return vgc_um_alloc(dev, p, n, 0);
    ALLOC(dev, n, K_PTR, *p, REAL(cuMemAlloc_v2, alloc_fn)(p, n));
}

typedef CUresult (*alloc1_fn)(unsigned *, unsigned);
EXPORT CUresult cuMemAlloc(unsigned *p, unsigned n) /* the CUDA 2.x ABI, 32-bit pointer and size */
{
    ON_CURRENT(dev, REAL(cuMemAlloc, alloc1_fn)(p, n));
    if (!p || !n)
        return REAL(cuMemAlloc, alloc1_fn)(p, n);
    ALLOC(dev, n, K_PTR, *p, REAL(cuMemAlloc, alloc1_fn)(p, n));
}

typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
/* The pitch is known only after the call: charge the width rounded up to the pitch alignment before,
 * settle to pitch * height after (a driver pitch beyond the estimate that does not fit is freed: OOM). */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem)
{
    ON_CURRENT(dev, REAL(cuMemAllocPitch_v2, pitch_fn)(p, pitch, w, h, elem));
    uint64_t a = vgc.pitch_align, est;
    if (!p || !pitch || !w || !h || w > UINT64_MAX - a || __builtin_mul_overflow((w + a - 1) / a * a, h, &est))
        return REAL(cuMemAllocPitch_v2, pitch_fn)(p, pitch, w, h, elem);
    CHARGE_OR_OOM(dev, est);
    CUresult r = REAL(cuMemAllocPitch_v2, pitch_fn)(p, pitch, w, h, elem);
    if (r != CUDA_SUCCESS) {
        vgc_uncharge(dev, est);
        return r;
    }
    uint64_t real = (uint64_t)*pitch * h;
    if (real < est)
        vgc_uncharge(dev, est - real);
    else if (real > est && vgc_charge(dev, real - est) != 0) {
        REAL(cuMemFree_v2, CUresult (*)(CUdeviceptr))(*p);
        vgc_uncharge(dev, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    put(*p, K_PTR, dev, real, 0);
    return CUDA_SUCCESS;
}

typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned);
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags)
{
    ON_CURRENT(dev, REAL(cuMemAllocManaged, managed_fn)(p, n, flags));
    if (!p || !n)
        return REAL(cuMemAllocManaged, managed_fn)(p, n, flags);
    if (vgc_burst_on(dev))
        return vgc_um_alloc(dev, p, n, flags);
    ALLOC(dev, n, K_PTR, *p, REAL(cuMemAllocManaged, managed_fn)(p, n, flags));
}

typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
static CUresult alloc_async(async_fn real, CUdeviceptr *p, size_t n, CUstream s)
{
    CUdevice dev;
    PASS_IF_OFF(REAL_OR(real)(p, n, s));
    if (!p || !n || stream_device(s, &dev) != CUDA_SUCCESS)
        return REAL_OR(real)(p, n, s);
    ALLOC(dev, n, K_PTR, *p, REAL_OR(real)(p, n, s));
}
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    vgc_init();
    return alloc_async((async_fn)real_cuMemAllocAsync, p, n, s);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s)
{
    vgc_init();
    return alloc_async((async_fn)real_cuMemAllocAsync_ptsz, p, n, s);
}

/* Pools: their location decides what their allocations charge (K_POOL records: dev, target 1 = host). */
static void note_pool(CUmemoryPool pool, int dev, int host) { put((uint64_t)(uintptr_t)pool, K_POOL, dev, 0, (uint64_t)host); }
static int pool_location(CUmemoryPool pool, int *dev)
{
    pthread_mutex_lock(&mu);
    struct rec *r = find((uint64_t)(uintptr_t)pool, K_POOL, 0);
    int known = r != NULL, host = r && r->target;
    if (r)
        *dev = r->dev;
    pthread_mutex_unlock(&mu);
    return !known ? -1 : host;
}
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    vgc_init();
    CUresult r = REAL(cuMemPoolCreate, CUresult (*)(CUmemoryPool *, const CUmemPoolProps *))(pool, props);
    if (r == CUDA_SUCCESS && vgc.tenant_set)
        note_pool(*pool, props->location.id, props->location.type != CU_MEM_LOCATION_TYPE_DEVICE);
    return r;
}
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    vgc_init();
    CUresult r = REAL(cuMemPoolDestroy, CUresult (*)(CUmemoryPool))(pool);
    if (r == CUDA_SUCCESS && vgc.tenant_set)
        forget((uint64_t)(uintptr_t)pool, K_POOL);
    return r;
}
typedef CUresult (*getpool_fn)(CUmemoryPool *, CUdevice);
static CUresult device_pool(getpool_fn real, CUmemoryPool *pool, CUdevice dev)
{
    int known;
    vgc_init();
    CUresult r = REAL_OR(real)(pool, dev);
    if (r == CUDA_SUCCESS && vgc.tenant_set && pool_location(*pool, &known) < 0)
        note_pool(*pool, dev, 0);
    return r;
}
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    vgc_init();
    return device_pool((getpool_fn)real_cuDeviceGetDefaultMemPool, pool, dev);
}
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    vgc_init();
    return device_pool((getpool_fn)real_cuDeviceGetMemPool, pool, dev);
}

typedef CUresult (*frompool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
static CUresult alloc_pool(frompool_fn real, CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    CUdevice dev;
    PASS_IF_OFF(REAL_OR(real)(p, n, pool, s));
    int where = pool_location(pool, &dev);
    if (where == 1 || !p || !n) /* a host pool: not device memory */
        return REAL_OR(real)(p, n, pool, s);
    if (where < 0 && stream_device(s, &dev) != CUDA_SUCCESS) /* a pool we never saw: the stream's device */
        return REAL_OR(real)(p, n, pool, s);
    ALLOC(dev, n, K_PTR, *p, REAL_OR(real)(p, n, pool, s));
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    vgc_init();
    return alloc_pool((frompool_fn)real_cuMemAllocFromPoolAsync, p, n, pool, s);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    vgc_init();
    return alloc_pool((frompool_fn)real_cuMemAllocFromPoolAsync_ptsz, p, n, pool, s);
}

/* Frees: the driver first; uncharge only what it really freed. */
#define FREE(call, key, kind)                                                                                \
    do {                                                                                                     \
        vgc_init();                                                                                          \
        CUresult r_ = (call);                                                                                \
        if (r_ == CUDA_SUCCESS && vgc.tenant_set)                                                            \
            forget((uint64_t)(key), kind);                                                                   \
        return r_;                                                                                           \
    } while (0)
EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    CUresult r;
    vgc_init();
    if (vgc.tenant_set && vgc.cls == 2 && vgc_um_free(p, &r))
        return r;
    FREE(REAL(cuMemFree_v2, CUresult (*)(CUdeviceptr))(p), p, K_PTR);
}
EXPORT CUresult cuMemFree(unsigned p) { FREE(REAL(cuMemFree, CUresult (*)(unsigned))(p), p, K_PTR); }
typedef CUresult (*freeasync_fn)(CUdeviceptr, CUstream);
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { FREE(REAL(cuMemFreeAsync, freeasync_fn)(p, s), p, K_PTR); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    FREE(REAL(cuMemFreeAsync_ptsz, freeasync_fn)(p, s), p, K_PTR);
}

/* Virtual memory management. */
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    PASS_IF_OFF(REAL(cuMemCreate, create_fn)(h, n, prop, flags));
    if (!h || !n || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return REAL(cuMemCreate, create_fn)(h, n, prop, flags);
    int dev = prop->location.id;
    ALLOC(dev, n, K_VMM, *h, REAL(cuMemCreate, create_fn)(h, n, prop, flags));
}
/* Uncharges a handle once it is released and no mapping uses it; call with mu held, returns it unlinked. */
static struct rec *settle(struct rec *hr)
{
    if (!hr || !hr->released || hr->maps > 0)
        return NULL;
    return find(hr->key, K_VMM, 1);
}
static void settle_free(struct rec *hr)
{
    if (hr) {
        vgc_uncharge(hr->dev, hr->bytes);
        free(hr);
    }
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    vgc_init();
    CUresult r = REAL(cuMemRelease, CUresult (*)(CUmemGenericAllocationHandle))(h);
    if (r != CUDA_SUCCESS || !vgc.tenant_set)
        return r;
    pthread_mutex_lock(&mu);
    struct rec *hr = find(h, K_VMM, 0);
    if (hr)
        hr->released = 1;
    hr = settle(hr);
    pthread_mutex_unlock(&mu);
    settle_free(hr);
    return r;
}
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
EXPORT CUresult cuMemMap(CUdeviceptr va, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f)
{
    vgc_init();
    CUresult r = REAL(cuMemMap, map_fn)(va, n, off, h, f);
    if (r != CUDA_SUCCESS || !vgc.tenant_set)
        return r;
    pthread_mutex_lock(&mu);
    struct rec *hr = find(h, K_VMM, 0);
    if (hr)
        hr->maps++;
    pthread_mutex_unlock(&mu);
    if (hr)
        put(va, K_MAP, 0, 0, h);
    return r;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr va, size_t n)
{
    vgc_init();
    CUresult r = REAL(cuMemUnmap, CUresult (*)(CUdeviceptr, size_t))(va, n);
    if (r != CUDA_SUCCESS || !vgc.tenant_set)
        return r;
    pthread_mutex_lock(&mu);
    struct rec *m = find(va, K_MAP, 1), *hr = NULL;
    if (m && (hr = find(m->target, K_VMM, 0)))
        hr->maps--;
    hr = settle(hr);
    pthread_mutex_unlock(&mu);
    free(m);
    settle_free(hr);
    return r;
}

/* Arrays: bytes from the descriptor (CUarray_format element sizes of cuda.h; formats it does not list
 * are charged 16 bytes per element, the largest). Driver padding and alignment are not visible. */
static int array_bytes(uint64_t w, uint64_t h, uint64_t d, int format, unsigned ch, unsigned levels, uint64_t *out)
{
    uint64_t es = 16, n = 0, v;
    switch (format) {
    case 0x01: case 0x08: es = 1; break;
    case 0x02: case 0x09: case 0x10: es = 2; break;
    case 0x03: case 0x0a: case 0x20: es = 4; break;
    }
    for (unsigned l = 0; l < levels; l++) {
        uint64_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1, ld = d >> l ? d >> l : 1;
        if (__builtin_mul_overflow(lw, lh, &v) || __builtin_mul_overflow(v, ld, &v) ||
            __builtin_mul_overflow(v, (uint64_t)ch * es, &v) || __builtin_add_overflow(n, v, &n))
            return -1;
    }
    *out = n;
    return n ? 0 : -1;
}
typedef CUresult (*arr_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    uint64_t n;
    ON_CURRENT(dev, REAL(cuArrayCreate_v2, arr_fn)(a, d));
    if (!a || !d || array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 1, &n) != 0)
        return REAL(cuArrayCreate_v2, arr_fn)(a, d);
    ALLOC(dev, n, K_ARRAY, (uintptr_t)*a, REAL(cuArrayCreate_v2, arr_fn)(a, d));
}
typedef CUresult (*arr3_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
EXPORT CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    uint64_t n;
    ON_CURRENT(dev, REAL(cuArray3DCreate_v2, arr3_fn)(a, d));
    if (!a || !d || array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1, &n) != 0)
        return REAL(cuArray3DCreate_v2, arr3_fn)(a, d);
    ALLOC(dev, n, K_ARRAY, (uintptr_t)*a, REAL(cuArray3DCreate_v2, arr3_fn)(a, d));
}
typedef CUresult (*mip_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t n;
    ON_CURRENT(dev, REAL(cuMipmappedArrayCreate, mip_fn)(a, d, levels));
    if (!a || !d || !levels ||
        array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, levels, &n) != 0)
        return REAL(cuMipmappedArrayCreate, mip_fn)(a, d, levels);
    ALLOC(dev, n, K_ARRAY, (uintptr_t)*a, REAL(cuMipmappedArrayCreate, mip_fn)(a, d, levels));
}
EXPORT CUresult cuArrayDestroy(CUarray a)
{
    FREE(REAL(cuArrayDestroy, CUresult (*)(CUarray))(a), (uintptr_t)a, K_ARRAY);
}
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
    FREE(REAL(cuMipmappedArrayDestroy, CUresult (*)(CUmipmappedArray))(a), (uintptr_t)a, K_ARRAY);
}

/* What frameworks size their caches from: the cap (never more than the card) and the tenant's usage. */
EXPORT CUresult cuMemGetInfo_v2(size_t *fr, size_t *tot)
{
    CUdevice dev;
    vgc_init();
    CUresult r = REAL(cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *))(fr, tot);
    if (r != CUDA_SUCCESS || !vgc.tenant_set || current_device(&dev) != CUDA_SUCCESS || dev >= VGC_MAXDEV ||
        !vgc.cap[dev])
        return r;
    uint64_t cap = vgc.cap[dev] < *tot ? vgc.cap[dev] : *tot, used = vgc_used(dev);
    if (vgc_burst_on(dev)) /* unified memory may spill to the host: the tenant's whole allowance */
        cap = vgc.cap[dev] + vgc.burst[dev];
    uint64_t left = used < cap ? cap - used : 0;
    *tot = cap;
    *fr = vgc_burst_on(dev) || left < *fr ? left : *fr;
    return r;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    vgc_init();
    CUresult r = REAL(cuDeviceTotalMem_v2, CUresult (*)(size_t *, CUdevice))(bytes, dev);
    if (r == CUDA_SUCCESS && vgc.tenant_set && dev >= 0 && dev < VGC_MAXDEV && vgc.cap[dev] && vgc.cap[dev] < *bytes)
        *bytes = vgc.cap[dev];
    return r;
}
