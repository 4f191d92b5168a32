/* Memory QoS: offline tenants lend their GPU memory to online ones (docs/cuda.md, "Memory QoS").
 *
 * Offline tenant with a burst (config memory_burst, class offline): cuMemAlloc_v2 is served from unified
 * memory (cuMemAllocManaged, attached globally), transparently to the program, as is its own
 * cuMemAllocManaged; both are *evictable*. They may use the cap plus the burst; every other path keeps
 * the hard cap (region.c, fits()). A mover thread does what the QoS daemon asks in the tenant's
 * directory ("memreq": "seq=N" and "evict=BYTES", the bytes of unified memory the tenant should keep on
 * the host, written atomically by the daemon): while the tenant has less than that on the host it moves
 * its largest resident allocation there (cuMemAdvise(_v2) SET_PREFERRED_LOCATION to the CPU, then
 * cuMemPrefetchAsync(_v2) to the CPU, synchronised); while it has more, it brings allocations back
 * (UNSET_PREFERRED_LOCATION, prefetch to the device) as long as the device keeps `watermark` free.
 * Then it records the request's seq as done in its region slot and tells the daemon ("moved SEQ").
 * The thread sleeps in poll() on inotify (the request file) and an eventfd (a new allocation while
 * eviction is asked); it wakes every second anyway.
 *
 * Online tenant: an allocation the device refuses (CUDA_ERROR_OUT_OF_MEMORY from the driver, within
 * the tenant's cap) tells the daemon how much is missing ("need BYTES") and is retried as soon as the
 * device has that much free (polled every ms, "need" repeated every 200 ms) for at most reclaim_ms.
 * After an allocation, when the device's free memory is under the watermark, "low BYTES" (rate limited).
 */
#define _GNU_SOURCE
#include "../qos-hook/vgpukit_qos.h"
#include "vgpukit_cuda.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#define ADVISE_PREFERRED 3
#define ADVISE_UNSET_PREFERRED 4
#define CPU (-1)
#define LOC_DEVICE 1
#define LOC_HOST 2

struct um {
    CUdeviceptr p;
    uint64_t n;
    int dev, evicted;
    CUcontext ctx;
    struct um *next;
};
static struct um *ums;
static pthread_mutex_t umu = PTHREAD_MUTEX_INITIALIZER; /* held while one allocation moves */
static int kick_fd = -1;
static uint32_t req_seq;
static uint64_t req_evict;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int vgc_burst_on(int dev) { return vgc.tenant_set && vgc.cls == 2 && dev >= 0 && dev < VGC_MAXDEV && vgc.burst[dev]; }

typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned);
CUresult vgc_um_alloc(int dev, CUdeviceptr *p, size_t n, unsigned flags)
{
    if (vgc_charge_kind(dev, n, 1) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = REAL(cuMemAllocManaged, managed_fn)(p, n, flags ? flags : 1 /* CU_MEM_ATTACH_GLOBAL */);
    struct um *u = r == CUDA_SUCCESS ? calloc(1, sizeof(*u)) : NULL;
    if (!u) {
        if (r == CUDA_SUCCESS)
            REAL(cuMemFree_v2, CUresult (*)(CUdeviceptr))(*p), r = CUDA_ERROR_OUT_OF_MEMORY;
        vgc_uncharge_kind(dev, n, 1, 0);
        return r;
    }
    u->p = *p, u->n = n, u->dev = dev;
    REAL(cuCtxGetCurrent, CUresult (*)(CUcontext *))(&u->ctx);
    pthread_mutex_lock(&umu);
    u->next = ums, ums = u;
    pthread_mutex_unlock(&umu);
    if (__atomic_load_n(&req_evict, __ATOMIC_RELAXED) && kick_fd >= 0) { /* under eviction: the mover decides */
        uint64_t one = 1;
        (void)!write(kick_fd, &one, sizeof(one));
    }
    return CUDA_SUCCESS;
}

/* 1 when p is the tenant's unified-memory allocation (freed, *r the driver's answer), else 0. */
int vgc_um_free(CUdeviceptr p, CUresult *r)
{
    pthread_mutex_lock(&umu);
    struct um **pp = &ums, *u;
    for (; (u = *pp) && u->p != p; pp = &u->next)
        ;
    if (u && (*r = REAL(cuMemFree_v2, CUresult (*)(CUdeviceptr))(p)) == CUDA_SUCCESS)
        *pp = u->next;
    pthread_mutex_unlock(&umu);
    if (!u)
        return 0;
    if (*r == CUDA_SUCCESS) {
        vgc_uncharge_kind(u->dev, u->n, 1, u->evicted);
        free(u);
    }
    return 1;
}

/* ---- moving one allocation (umu held) */
static CUresult advise(struct um *u, int advice, int to_host)
{
    CUmemLocation loc = {to_host ? LOC_HOST : LOC_DEVICE, to_host ? 0 : u->dev};
    if (real_cuMemAdvise_v2)
        return ((CUresult (*)(CUdeviceptr, size_t, int, CUmemLocation))real_cuMemAdvise_v2)(u->p, u->n, advice, loc);
    return REAL(cuMemAdvise, CUresult (*)(CUdeviceptr, size_t, int, CUdevice))(u->p, u->n, advice,
                                                                              to_host ? CPU : u->dev);
}

static CUresult prefetch(struct um *u, int to_host)
{
    CUmemLocation loc = {to_host ? LOC_HOST : LOC_DEVICE, to_host ? 0 : u->dev};
    CUresult r;
    if (real_cuMemPrefetchAsync_v2)
        r = ((CUresult (*)(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream))real_cuMemPrefetchAsync_v2)(
            u->p, u->n, loc, 0, NULL);
    else
        r = REAL(cuMemPrefetchAsync, CUresult (*)(CUdeviceptr, size_t, CUdevice, CUstream))(u->p, u->n,
                                                                                          to_host ? CPU : u->dev, NULL);
    return r == CUDA_SUCCESS ? REAL(cuStreamSynchronize, CUresult (*)(CUstream))(NULL) : r;
}

static int device_free(uint64_t *fr)
{
    size_t f = 0, t = 0;
    CUresult r = REAL(cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *))(&f, &t); /* the card's own answer */
    *fr = f;
    return r == CUDA_SUCCESS ? 0 : -1;
}

static int move(struct um *u, int to_host)
{
    CUcontext cc;
    uint64_t fr;
    int ok = 0;
    if (REAL(cuCtxPushCurrent_v2, CUresult (*)(CUcontext))(u->ctx) != CUDA_SUCCESS)
        return 0;
    if (to_host || (device_free(&fr) == 0 && fr >= u->n && fr - u->n >= vgc.watermark))
        ok = advise(u, to_host ? ADVISE_PREFERRED : ADVISE_UNSET_PREFERRED, to_host) == CUDA_SUCCESS &&
             prefetch(u, to_host) == CUDA_SUCCESS;
    REAL(cuCtxPopCurrent_v2, CUresult (*)(CUcontext *))(&cc);
    if (ok) {
        u->evicted = to_host;
        vgc_moved(u->dev, u->n, to_host);
    }
    return ok;
}

/* The largest allocation to move: resident ones to the host, or (back) evicted ones that keep the
 * tenant at or above `want` on the host (any, when want is 0). */
static struct um *pick(int to_host, uint64_t have, uint64_t want, uint64_t below)
{
    struct um *best = NULL;
    for (struct um *u = ums; u; u = u->next)
        if (u->n < below && u->evicted != to_host && (!best || u->n > best->n) &&
            (to_host || !want || have - u->n >= want))
            best = u;
    return best;
}

static void comply(void)
{
    uint32_t seq = __atomic_load_n(&req_seq, __ATOMIC_ACQUIRE);
    uint64_t want = __atomic_load_n(&req_evict, __ATOMIC_ACQUIRE);
    uint64_t below = UINT64_MAX;
    for (;;) {
        uint64_t have = vgc_evicted_total(), size = 0;
        int to_host = have < want, ok = 0;
        if (have == want)
            break;
        pthread_mutex_lock(&umu);
        struct um *u = pick(to_host, have, want, below);
        if (u)
            size = u->n, ok = move(u, to_host);
        pthread_mutex_unlock(&umu);
        if (!u || (!ok && to_host))
            break;
        if (!ok)
            below = size; /* does not fit back now: only smaller ones */
    }
    vgc_ack(seq);
    vgpukit_qos_mem("moved", seq);
}

static void read_request(void)
{
    char path[4300], buf[256];
    snprintf(path, sizeof(path), "%s/memreq", vgc.dir);
    FILE *f = fopen(path, "re");
    unsigned long long seq = 0, evict = 0;
    if (f) {
        while (fgets(buf, sizeof(buf), f))
            if (sscanf(buf, "seq=%llu", &seq) != 1)
                sscanf(buf, "evict=%llu", &evict);
        fclose(f);
    }
    __atomic_store_n(&req_evict, (uint64_t)evict, __ATOMIC_RELEASE);
    __atomic_store_n(&req_seq, (uint32_t)seq, __ATOMIC_RELEASE);
}

static void *mover(void *arg)
{
    char ev[4096];
    int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    (void)arg;
    if (in >= 0)
        inotify_add_watch(in, vgc.dir, IN_CLOSE_WRITE | IN_MOVED_TO);
    for (;;) {
        read_request();
        comply();
        struct pollfd fds[2] = {{in, POLLIN, 0}, {kick_fd, POLLIN, 0}};
        if (poll(fds, 2, 1000) > 0) {
            while (in >= 0 && read(in, ev, sizeof(ev)) > 0)
                ;
            uint64_t n;
            while (kick_fd >= 0 && read(kick_fd, &n, sizeof(n)) > 0)
                ;
        }
    }
    return NULL;
}

void vgc_burst_setup(void)
{
    pthread_t t;
    int any = 0;
    if (vgc.cls != 2)
        memset(vgc.burst, 0, sizeof(vgc.burst)); /* online tenants' memory is plain device memory */
    for (int d = 0; d < VGC_MAXDEV; d++)
        any |= vgc.burst[d] != 0;
    if (!any || !vgc.dir[0])
        return;
    kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (pthread_create(&t, NULL, mover, NULL) == 0)
        pthread_detach(t);
}

/* ---- online tenants */
int vgc_reclaim(int dev, uint64_t n, long long *deadline)
{
    size_t fr = 0, tot = 0;
    long long start = now_ns(), sent = 0;
    (void)dev;
    if (!vgc.tenant_set || vgc.cls != 1 || !vgc.demand || !vgc.reclaim_ms)
        return 0;
    if (!*deadline)
        *deadline = start + (long long)vgc.reclaim_ms * 1000000LL;
    for (long long t = start; t < *deadline; t = now_ns()) {
        if (REAL(cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *))(&fr, &tot) != CUDA_SUCCESS)
            return 0;
        if (fr >= n)
            return t > start || sent; /* retry: there is room now */
        if (!sent || t - sent >= 200000000LL) {
            vgpukit_qos_mem("need", n - fr);
            sent = t;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return 0;
}

void vgc_after_alloc(int dev)
{
    static long long last;
    size_t fr = 0, tot = 0;
    (void)dev;
    if (!vgc.watermark || vgc.cls != 1 || !vgc.demand ||
        REAL(cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *))(&fr, &tot) != CUDA_SUCCESS || fr >= vgc.watermark)
        return;
    long long t = now_ns();
    if (t - __atomic_load_n(&last, __ATOMIC_RELAXED) >= 100000000LL) {
        __atomic_store_n(&last, t, __ATOMIC_RELAXED);
        vgpukit_qos_mem("low", vgc.watermark - fr);
    }
}
