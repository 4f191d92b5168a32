/* One allocation path against the cap:   paths PATH [hold BYTES]
 * PATH: mem v1 pitch managed async pool defpool vmm vmmhost array array3d mipmap errors.
 * The cap is what cuMemGetInfo reports as total (the library's cap). With u the path's unit, allocate
 * a = about half the cap, then (cap - a + u) must fail with OUT_OF_MEMORY, (cap - a) must succeed,
 * u must fail; the emulated device's peak must be the cap exactly; after the frees, free == total and
 * the device is empty. "hold BYTES" allocates and sleeps (for kill -9 tests). Prints key=value lines. */
#include "common.h"

#include <string.h>
#include <unistd.h>

static const char *path;
static CUstream stream;
static CUmemoryPool pool;

static size_t unit(void)
{
    if (!strcmp(path, "pitch")) return 2048; /* 4 rows of a 512-aligned pitch */
    if (!strcmp(path, "vmm")) return 4096;  /* the emulator's granularity */
    if (!strcmp(path, "array3d")) return 8; /* 2 rows of 4-byte elements */
    if (!strcmp(path, "mipmap")) return 4;  /* 4 channels of 1 byte */
    return 1;
}

struct obj {
    uint64_t h, va;
};

static CUresult alloc(size_t n, struct obj *o)
{
    CUdeviceptr p = 0;
    CUresult r;
    memset(o, 0, sizeof(*o));
    if (!strcmp(path, "mem")) r = cuMemAlloc_v2(&p, n);
    else if (!strcmp(path, "v1")) {
        unsigned q = 0;
        r = cuMemAlloc(&q, (unsigned)n);
        p = q;
    } else if (!strcmp(path, "pitch")) {
        size_t pitch = 0;
        r = cuMemAllocPitch_v2(&p, &pitch, n / 4, 4, 4);
        if (r == CUDA_SUCCESS && pitch != n / 4) return fprintf(stderr, "pitch %zu\n", pitch), 99;
    } else if (!strcmp(path, "managed")) r = cuMemAllocManaged(&p, n, 1);
    else if (!strcmp(path, "async")) r = cuMemAllocAsync(&p, n, stream);
    else if (!strcmp(path, "pool") || !strcmp(path, "defpool")) r = cuMemAllocFromPoolAsync(&p, n, pool, stream);
    else if (!strcmp(path, "vmm") || !strcmp(path, "vmmhost")) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = 1;
        prop.location.type = !strcmp(path, "vmm") ? 1 : 2;
        prop.location.id = 0;
        CUmemGenericAllocationHandle h;
        if ((r = cuMemCreate(&h, n, &prop, 0)) != CUDA_SUCCESS) return r;
        CHECK(cuMemAddressReserve(&o->va, n, 0, 0, 0));
        CHECK(cuMemMap(o->va, n, 0, h, 0));
        o->h = h;
        return r;
    } else if (!strcmp(path, "array")) {
        CUDA_ARRAY_DESCRIPTOR d = {n, 0, 0x01, 1};
        CUarray a;
        r = cuArrayCreate_v2(&a, &d);
        p = (uintptr_t)a;
    } else if (!strcmp(path, "array3d")) {
        CUDA_ARRAY3D_DESCRIPTOR d = {n / 8, 2, 0, 0x20, 1, 0};
        CUarray a;
        r = cuArray3DCreate_v2(&a, &d);
        p = (uintptr_t)a;
    } else if (!strcmp(path, "mipmap")) {
        CUDA_ARRAY3D_DESCRIPTOR d = {n / 4, 0, 0, 0x01, 4, 0};
        CUmipmappedArray a;
        r = cuMipmappedArrayCreate(&a, &d, 1);
        p = (uintptr_t)a;
    } else {
        fprintf(stderr, "unknown path %s\n", path);
        exit(2);
    }
    o->h = p;
    return r;
}

static void release(struct obj *o)
{
    if (!strcmp(path, "mem")) CHECK(cuMemFree_v2(o->h));
    else if (!strcmp(path, "v1")) CHECK(cuMemFree((unsigned)o->h));
    else if (!strcmp(path, "pitch") || !strcmp(path, "managed")) CHECK(cuMemFree_v2(o->h));
    else if (!strcmp(path, "async") || !strcmp(path, "pool") || !strcmp(path, "defpool"))
        CHECK(cuMemFreeAsync(o->h, stream));
    else if (!strcmp(path, "vmm") || !strcmp(path, "vmmhost")) {
        CHECK(cuMemRelease(o->h)); /* released while still mapped: the memory lives until the unmap */
        size_t fr, tot;
        CHECK(cuMemGetInfo_v2(&fr, &tot));
        printf("after_release_free=%zu\n", fr);
        CHECK(cuMemUnmap(o->va, 0));
        CHECK(cuMemAddressFree(o->va, 0));
    } else if (!strcmp(path, "mipmap")) CHECK(cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)o->h));
    else CHECK(cuArrayDestroy((CUarray)(uintptr_t)o->h));
}

static int errors(void)
{
    CUdeviceptr p;
    CUDA_ARRAY_DESCRIPTOR bad = {64, 0, 0x77, 1};
    CUarray a;
    size_t fr, tot;
    int r1 = cuMemAlloc_v2(&p, 0), r2 = cuMemFree_v2(12345), r3 = cuArrayCreate_v2(&a, &bad);
    CHECK(cuMemGetInfo_v2(&fr, &tot));
    CHECK(cuCtxSetCurrent(NULL));
    int r4 = cuMemAlloc_v2(&p, 16);
    printf("zero=%d badfree=%d badformat=%d noctx=%d free=%zu total=%zu\n", r1, r2, r3, r4, fr, tot);
    return 0;
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    size_t fr, tot;
    uint64_t used, peak;
    struct obj a, b, c;
    if (argc < 2) return 2;
    path = argv[1];
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&stream, 0));
    if (!strcmp(path, "pool")) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof(props));
        props.allocType = 1, props.location.type = 1, props.location.id = 0;
        CHECK(cuMemPoolCreate(&pool, &props));
    } else if (!strcmp(path, "defpool"))
        CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    if (!strcmp(path, "errors")) return errors();
    if (argc == 4 && !strcmp(argv[2], "hold")) {
        CHECK(alloc(strtoull(argv[3], NULL, 10), &a));
        printf("held\n");
        fflush(stdout);
        for (;;) pause();
    }
    size_t tot2;
    CHECK(cuMemGetInfo_v2(&fr, &tot));
    CHECK(cuDeviceTotalMem_v2(&tot2, 0));
    size_t cap = tot, u = unit(), half = cap / 2 / u * u;
    printf("total=%zu devicetotal=%zu free=%zu\n", tot, tot2, fr);
    if (!strcmp(path, "vmmhost")) { /* host memory: never charged, whatever its size */
        CHECK(alloc(cap / 4096 * 4096 + 4096, &a));
        CHECK(cuMemGetInfo_v2(&fr, &tot));
        printf("host_free=%zu\n", fr);
        release(&a);
        return 0;
    }
    CHECK(alloc(half, &a));
    int over = alloc(cap - half + u, &b);
    CHECK(alloc(cap - half, &b));
    int more = alloc(u, &c);
    CHECK(cuMemGetInfo_v2(&fr, &tot));
    vgpuemu_stats(0, &used, &peak);
    printf("over=%d more=%d full_free=%zu peak=%llu\n", over, more, fr, (unsigned long long)peak);
    release(&a);
    release(&b);
    CHECK(cuMemGetInfo_v2(&fr, &tot));
    vgpuemu_stats(0, &used, &peak);
    printf("end_free=%zu end_used=%llu\n", fr, (unsigned long long)used);
    return 0;
}
