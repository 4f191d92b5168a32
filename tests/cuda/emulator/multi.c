/* Threads on several devices:   multi THREADS ROUNDS
 * Each thread works on device (i % devices) with mixed paths (cuMemAlloc, managed, async, pool, arrays),
 * keeping up to 8 allocations live; a quarter of its allocations are freed by the main thread while
 * device 0 is current (another thread, another context). Then per device: the emulated peak, the final
 * device usage and the free memory the library reports. */
#include "common.h"

#include <pthread.h>
#include <string.h>

CUresult cuDeviceGetCount(int *);
CUresult cuCtxPushCurrent_v2(CUcontext);
CUresult cuCtxPopCurrent_v2(CUcontext *);

static int rounds, ndev;
static CUcontext ctxs[8];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr handoff[100000];
static int nhandoff;
static long oom;

static void *work(void *arg)
{
    int i = (int)(intptr_t)arg, dev = i % ndev;
    unsigned seed = (unsigned)i * 7919u + 1;
    CUstream s;
    CUmemoryPool pool;
    struct { CUdeviceptr p; int kind; } live[8];
    int nlive = 0;
    CHECK(cuCtxSetCurrent(ctxs[dev]));
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
    for (int k = 0; k < rounds; k++) {
        size_t n = 1 + rand_r(&seed) % 65536;
        int kind = rand_r(&seed) % 5;
        CUdeviceptr p = 0;
        CUresult r;
        CUarray a;
        CUDA_ARRAY_DESCRIPTOR d = {n, 0, 0x01, 1};
        switch (kind) {
        case 0: r = cuMemAlloc_v2(&p, n); break;
        case 1: r = cuMemAllocManaged(&p, n, 1); break;
        case 2: r = cuMemAllocAsync(&p, n, s); break;
        case 3: r = cuMemAllocFromPoolAsync(&p, n, pool, s); break;
        default: r = cuArrayCreate_v2(&a, &d); p = (uintptr_t)a; break;
        }
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            __atomic_add_fetch(&oom, 1, __ATOMIC_RELAXED);
        } else {
            CHECK(r);
            if (kind == 0 && rand_r(&seed) % 4 == 0) { /* freed later by the main thread */
                pthread_mutex_lock(&mu);
                handoff[nhandoff++] = p;
                pthread_mutex_unlock(&mu);
            } else {
                live[nlive].p = p, live[nlive].kind = kind;
                nlive++;
            }
        }
        if (nlive == 8 || (nlive && k == rounds - 1) || r == CUDA_ERROR_OUT_OF_MEMORY) {
            while (nlive) {
                nlive--;
                if (live[nlive].kind == 4) CHECK(cuArrayDestroy((CUarray)(uintptr_t)live[nlive].p));
                else if (live[nlive].kind >= 2) CHECK(cuMemFreeAsync(live[nlive].p, s));
                else CHECK(cuMemFree_v2(live[nlive].p));
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t[64];
    rounds = argc > 2 ? atoi(argv[2]) : 500;
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&ndev));
    for (int d = 0; d < ndev; d++) CHECK(cuDevicePrimaryCtxRetain(&ctxs[d], d));
    for (int i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, work, (void *)(intptr_t)i);
    for (int i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
    /* the other thread's allocations (on every device), freed with device 0 current */
    CHECK(cuCtxSetCurrent(ctxs[0]));
    int cross = nhandoff;
    for (int i = 0; i < nhandoff; i++) CHECK(cuMemFree_v2(handoff[i]));
    printf("oom=%ld crossfreed=%d\n", oom, cross);
    for (int d = 0; d < ndev; d++) {
        uint64_t used, peak;
        size_t fr, tot;
        CHECK(cuCtxPushCurrent_v2(ctxs[d]));
        CHECK(cuMemGetInfo_v2(&fr, &tot));
        CHECK(cuCtxPopCurrent_v2(NULL));
        vgpuemu_stats(d, &used, &peak);
        printf("dev=%d peak=%llu used=%llu free=%zu total=%zu\n", d, (unsigned long long)peak,
               (unsigned long long)used, fr, tot);
    }
    return 0;
}
