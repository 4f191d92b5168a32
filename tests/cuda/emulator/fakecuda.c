/* A device emulator: a fake libcuda.so.1 for tests (no GPU, no CUDA toolkit).
 *
 * Environment: VGPUKIT_EMU_DEVICES (1..8, default 1), VGPUKIT_EMU_MEMORY (bytes per device, default
 * 1 GiB), VGPUKIT_EMU_SHM (a file: when set, the devices' memory counters and timelines live there and
 * are shared by every process using the same file, as processes share one physical GPU),
 * VGPUKIT_EMU_OWNER (0..7: whose device time a launch is counted as, for share measurements).
 *
 * The device is a timeline, not a thread of this process: a launched kernel of D ns occupies the
 * device from max(now, end of the previous kernel) for D ns, in launch order, and cannot be
 * preempted. Because completion is a point on CLOCK_MONOTONIC, freezing the launching process does
 * not stop the work it already queued, exactly as on a GPU (a device thread inside the process would
 * be frozen with it). A kernel's duration is the uint64 of nanoseconds kernelParams[0] points to.
 *
 * Unified memory, memory contents and checkpointing are modelled in um.inc (included below); so is the
 * driver's freeing of a dead process's memory: device memory is counted per process (a slot per pid in
 * the shared file), and a process that is gone no longer holds any, as the kernel driver frees a
 * process's allocations when it exits.
 *
 * Extra exports for tests: vgpuemu_stats(dev, &used, &peak), vgpuemu_owner_ns(dev, owner) and
 * vgpuemu_um(...) (um.inc).
 */
#define _GNU_SOURCE
#include "emu.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EMU_MAXDEV 8
#define EMU_OWNERS 8
#define EMU_GRAN 4096

#define EMU_PROCS 64

struct emu_dev {
    _Atomic uint64_t used, peak, busy_until;
    _Atomic uint64_t owner_ns[EMU_OWNERS];
};
/* A process using the emulated devices: what it holds, and the checkpoint requests addressed to it. */
struct emu_proc {
    _Atomic int32_t pid;
    uint32_t state; /* CUprocessState: 0 RUNNING, 1 LOCKED, 2 CHECKPOINTED, 3 FAILED */
    uint64_t start;
    _Atomic uint64_t used[EMU_MAXDEV];
    _Atomic uint32_t req_seq, ack_seq; /* futex words: a controller's request, the process's answer */
    uint32_t op;
    int32_t result;
    uint32_t timeout_ms;
    uint32_t pad;
};
struct emu_shared {
    uint32_t magic;
    struct emu_dev dev[EMU_MAXDEV];
    _Atomic uint64_t host_used;                   /* managed memory of every process (the host budget) */
    _Atomic uint64_t moved_to_host, moved_to_dev; /* bytes migrated by prefetches and faults */
    _Atomic uint64_t ckpt_bytes, ckpt_mismatch;   /* checkpointed device bytes; restores that differed */
    struct emu_proc proc[EMU_PROCS];
};
struct emu_stream {
    struct emu_ctx *ctx;
    _Atomic uint64_t tail;
};
struct emu_ctx {
    int dev;
    struct emu_stream null_stream;
};
struct emu_event {
    uint64_t t;
    int recorded;
};
struct emu_pool {
    int dev, host;
};
enum { K_DEV = 1, K_HOST, K_VMM, K_MAP, K_ARRAY, K_VA };
enum { K_UM = 7 };
struct alloc {
    uint64_t key, size;
    int dev, kind, released, maps;
    uint64_t target;   /* K_MAP: the handle mapped */
    uint8_t *data;     /* contents: K_UM the host mapping (the pointer itself), K_DEV once written */
    uint8_t *page;     /* K_UM: per page, bit 0 resident on the device, bit 1 preferred location host */
    uint8_t *image;    /* while checkpointed: the contents the device held */
    uint64_t hash;     /* while checkpointed: FNV-1a of image, checked at restore */
    int ckpt;          /* while checkpointed: device memory released */
    struct alloc *next;
};

static struct emu_shared *sh;
static int ndev = 1, owner, inited, me;
static uint64_t total = 1ULL << 30, host_budget = 4ULL << 30, pcie_bps = 12000000000ULL;
static double remote_slowdown = 4.0;
static pthread_rwlock_t api = PTHREAD_RWLOCK_INITIALIZER; /* taken for writing while LOCKED */
static __thread int in_api;
/* Every call that touches memory or the device waits while the process is LOCKED (checkpoint API). */
static void ungate(int *held)
{
    if (*held) {
        in_api--;
        pthread_rwlock_unlock(&api);
    }
}
#define GATE()                                                                                               \
    int gate_ __attribute__((cleanup(ungate))) = !in_api;                                                   \
    if (gate_) {                                                                                             \
        pthread_rwlock_rdlock(&api);                                                                         \
        in_api++;                                                                                            \
    }
static struct emu_ctx primary[EMU_MAXDEV];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *table[4096];
static _Atomic uint64_t next_id = 1;
static __thread struct emu_ctx *stack[16];
static __thread int depth;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ULL), (long)(t % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
}

static int take_proc_slot(void);
static void setup(void)
{
    const char *s;
    if ((s = getenv("VGPUKIT_EMU_DEVICES")) && atoi(s) >= 1 && atoi(s) <= EMU_MAXDEV)
        ndev = atoi(s);
    if ((s = getenv("VGPUKIT_EMU_MEMORY")) && strtoull(s, NULL, 10) > 0)
        total = strtoull(s, NULL, 10);
    if ((s = getenv("VGPUKIT_EMU_OWNER")) && atoi(s) >= 0 && atoi(s) < EMU_OWNERS)
        owner = atoi(s);
    if ((s = getenv("VGPUKIT_EMU_HOST_MEMORY")) && strtoull(s, NULL, 10) > 0)
        host_budget = strtoull(s, NULL, 10);
    if ((s = getenv("VGPUKIT_EMU_PCIE_MBPS")) && strtoull(s, NULL, 10) > 0)
        pcie_bps = strtoull(s, NULL, 10) * 1000000ULL;
    if ((s = getenv("VGPUKIT_EMU_REMOTE_SLOWDOWN")) && atof(s) >= 0)
        remote_slowdown = atof(s);
    if ((s = getenv("VGPUKIT_EMU_SHM")) && *s) {
        int fd = open(s, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        struct stat st;
        if (fd >= 0 && flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0 &&
            (st.st_size >= (off_t)sizeof(*sh) || ftruncate(fd, sizeof(*sh)) == 0)) {
            void *m = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED)
                sh = m;
            flock(fd, LOCK_UN);
        }
        if (fd >= 0)
            close(fd);
    }
    if (!sh)
        sh = calloc(1, sizeof(*sh));
    me = take_proc_slot();
    for (int i = 0; i < EMU_MAXDEV; i++)
        primary[i].dev = i, primary[i].null_stream.ctx = &primary[i];
}

static struct emu_ctx *cur(void) { return depth ? stack[depth - 1] : NULL; }

static int dev_of_stream(CUstream s)
{
    if ((uintptr_t)s > 2)
        return s->ctx->dev;
    return cur() ? cur()->dev : -1;
}

static struct emu_stream *stream_of(CUstream s)
{
    if ((uintptr_t)s > 2)
        return s;
    return cur() ? &cur()->null_stream : NULL;
}

/* ---- memory: charge the emulated device, with a table of what exists */
static uint64_t start_time(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static int proc_dead(struct emu_proc *p)
{
    int pid = atomic_load(&p->pid);
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    uint64_t st = start_time(pid);
    return st && p->start && st != p->start;
}

/* The driver frees what a dead process held: its slot's memory goes back to the devices. */
static int reclaim_dead(void)
{
    int n = 0;
    for (int i = 0; i < EMU_PROCS; i++) {
        struct emu_proc *p = &sh->proc[i];
        int pid = atomic_load(&p->pid);
        if (i == me || pid <= 0 || !proc_dead(p) || !atomic_compare_exchange_strong(&p->pid, &pid, -1))
            continue;
        for (int d = 0; d < EMU_MAXDEV; d++)
            atomic_fetch_sub(&sh->dev[d].used, atomic_exchange(&p->used[d], 0));
        p->state = 0;
        atomic_store(&p->pid, 0);
        n++;
    }
    return n;
}

static int take_proc_slot(void)
{
    reclaim_dead();
    for (int i = 0; i < EMU_PROCS; i++) {
        int zero = 0;
        if (atomic_compare_exchange_strong(&sh->proc[i].pid, &zero, -1)) {
            struct emu_proc *p = &sh->proc[i];
            for (int d = 0; d < EMU_MAXDEV; d++)
                atomic_store(&p->used[d], 0);
            p->state = 0, p->start = start_time(getpid());
            atomic_store(&p->ack_seq, atomic_load(&p->req_seq));
            atomic_store(&p->pid, getpid());
            return i;
        }
    }
    return 0;
}

static CUresult charge(int dev, uint64_t size)
{
    struct emu_dev *d = &sh->dev[dev];
    uint64_t old = atomic_load(&d->used);
    do {
        if (size > total - old) {
            if (reclaim_dead())
                return charge(dev, size);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } while (!atomic_compare_exchange_weak(&d->used, &old, old + size));
    atomic_fetch_add(&sh->proc[me].used[dev], size);
    uint64_t p = atomic_load(&d->peak);
    while (old + size > p && !atomic_compare_exchange_weak(&d->peak, &p, old + size))
        ;
    return CUDA_SUCCESS;
}

static void release(int dev, uint64_t size)
{
    atomic_fetch_sub(&sh->dev[dev].used, size);
    atomic_fetch_sub(&sh->proc[me].used[dev], size);
}

static unsigned slot_of(uint64_t key) { return (unsigned)((key * 0x9E3779B97F4A7C15ULL) >> 52) % 4096; }

static void put(struct alloc *a)
{
    pthread_mutex_lock(&mu);
    a->next = table[slot_of(a->key)];
    table[slot_of(a->key)] = a;
    pthread_mutex_unlock(&mu);
}

/* Removes and returns the entry of key (of one of the kinds in mask), or NULL. */
static struct alloc *take(uint64_t key, unsigned mask, int remove)
{
    pthread_mutex_lock(&mu);
    struct alloc **pp = &table[slot_of(key)], *a;
    for (; (a = *pp); pp = &a->next)
        if (a->key == key && (mask & (1u << a->kind))) {
            if (remove)
                *pp = a->next;
            break;
        }
    pthread_mutex_unlock(&mu);
    return a;
}

static CUresult make(int dev, uint64_t size, int kind, uint64_t *key)
{
    CUresult r;
    GATE();
    if (!inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (kind != K_HOST && kind != K_VA && (r = charge(dev, size)) != CUDA_SUCCESS)
        return r;
    struct alloc *a = calloc(1, sizeof(*a));
    a->key = atomic_fetch_add(&next_id, 1) << 12;
    a->size = size, a->dev = dev, a->kind = kind;
    put(a);
    *key = a->key;
    return CUDA_SUCCESS;
}

static void um_free(struct alloc *a);
static void uncharge(struct alloc *a)
{
    if (a->kind == K_UM)
        um_free(a);
    else if (a->kind != K_HOST && a->kind != K_VA && !a->ckpt)
        release(a->dev, a->size);
    if (a->data && a->kind != K_UM)
        munmap(a->data, a->size);
    free(a->image);
    free(a);
}

static CUresult drop(uint64_t key, unsigned mask)
{
    GATE();
    struct alloc *a = take(key, mask, 1);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    uncharge(a);
    return CUDA_SUCCESS;
}

#define CURDEV (cur() ? cur()->dev : -1)
#define PTRS ((1u << K_DEV) | (1u << K_HOST) | (1u << K_UM))

static void start_checkpoint_thread(void);
static pthread_once_t ckpt_once = PTHREAD_ONCE_INIT;
CUresult cuInit(unsigned flags)
{
    (void)flags;
    pthread_once(&once, setup);
    inited = 1;
    pthread_once(&ckpt_once, start_checkpoint_thread);
    return CUDA_SUCCESS;
}
/* 12.8: the first driver API with cuCheckpointProcess* (VGPUKIT_EMU_DRIVER_VERSION to pretend older) */
CUresult cuDriverGetVersion(int *v)
{
    const char *s = getenv("VGPUKIT_EMU_DRIVER_VERSION");
    return v ? (*v = s && atoi(s) > 0 ? atoi(s) : 12080, CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuDeviceGetCount(int *n) { return inited ? (*n = ndev, CUDA_SUCCESS) : CUDA_ERROR_NOT_INITIALIZED; }
CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    return ordinal >= 0 && ordinal < ndev ? (*d = ordinal, CUDA_SUCCESS) : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    if (d < 0 || d >= ndev || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "vgpukit emulated GPU %d", d);
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
    if (d < 0 || d >= ndev || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(id, (size_t)len, "0000:%02X:00.0", 0x10 + d);
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
    (void)attr;
    return d >= 0 && d < ndev ? (*v = 0, CUDA_SUCCESS) : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    if (!inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    return d >= 0 && d < ndev ? (*bytes = total, CUDA_SUCCESS) : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuMemGetInfo_v2(size_t *fr, size_t *tot)
{
    if (!cur())
        return CUDA_ERROR_INVALID_CONTEXT;
    reclaim_dead(); /* the driver's answer is always current: a dead process holds nothing */
    *tot = total;
    *fr = total - atomic_load(&sh->dev[cur()->dev].used);
    return CUDA_SUCCESS;
}

/* ---- contexts */
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (!inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    return d >= 0 && d < ndev ? (*c = &primary[d], CUDA_SUCCESS) : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return d >= 0 && d < ndev ? 0 : CUDA_ERROR_INVALID_DEVICE; }
CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d)
{
    (void)flags;
    if (!inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    struct emu_ctx *x = calloc(1, sizeof(*x));
    x->dev = d, x->null_stream.ctx = x;
    if (depth < 16)
        stack[depth++] = x;
    *c = x;
    return CUDA_SUCCESS;
}
CUresult cuCtxDestroy_v2(CUcontext c)
{
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < depth; i++)
        if (stack[i] == c)
            stack[i] = NULL;
    if (c < primary || c >= primary + EMU_MAXDEV)
        free(c);
    return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c)
{
    if (depth == 0)
        depth = 1;
    stack[depth - 1] = c;
    return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *c) { return *c = cur(), CUDA_SUCCESS; }
CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    if (!c || depth >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = c;
    return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    if (!depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    depth--;
    if (c)
        *c = stack[depth];
    return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) { return cur() ? (*d = cur()->dev, CUDA_SUCCESS) : CUDA_ERROR_INVALID_CONTEXT; }

/* ---- allocation paths */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return make(CURDEV, n, K_DEV, p); }
CUresult cuMemAlloc(unsigned *p, unsigned n) /* the CUDA 2.x ABI: 32-bit pointer and size */
{
    uint64_t k;
    CUresult r = make(CURDEV, n, K_DEV, &k);
    if (r == CUDA_SUCCESS)
        *p = (unsigned)k;
    return r;
}
CUresult cuMemFree_v2(CUdeviceptr p) { return drop(p, PTRS); }
CUresult cuMemFree(unsigned p) { return drop(p, PTRS); }
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem)
{
    if ((elem != 4 && elem != 8 && elem != 16) || w == 0 || h == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t pt = (w + 511) / 512 * 512;
    CUresult r = make(CURDEV, (uint64_t)pt * h, K_DEV, p);
    if (r == CUDA_SUCCESS)
        *pitch = pt;
    return r;
}
CUresult um_alloc(int dev, uint64_t n, CUdeviceptr *p); /* um.inc */
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags)
{
    (void)flags;
    return um_alloc(CURDEV, n, p);
}
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { return make(dev_of_stream(s), n, K_DEV, p); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { return cuMemAllocAsync(p, n, s); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    (void)s;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return make(pool->dev, n, pool->host ? K_HOST : K_DEV, p);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    return cuMemAllocFromPoolAsync(p, n, pool, s);
}
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return (void)s, drop(p, PTRS); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

static struct emu_pool default_pool[EMU_MAXDEV];
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    if (d < 0 || d >= ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    default_pool[d].dev = d;
    *pool = &default_pool[d];
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) { return cuDeviceGetDefaultMemPool(pool, d); }
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    if (!props)
        return CUDA_ERROR_INVALID_VALUE;
    int host = props->location.type != 1;
    if (!host && (props->location.id < 0 || props->location.id >= ndev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct emu_pool *x = calloc(1, sizeof(*x));
    x->dev = host ? 0 : props->location.id, x->host = host;
    *pool = x;
    return CUDA_SUCCESS;
}
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    if (pool < default_pool || pool >= default_pool + EMU_MAXDEV)
        free(pool);
    return CUDA_SUCCESS;
}

/* Virtual memory management: physical memory lives until released AND unmapped everywhere. */
CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop, int option)
{
    (void)prop, (void)option;
    *g = EMU_GRAN;
    return CUDA_SUCCESS;
}
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    (void)flags;
    if (!prop || n % EMU_GRAN)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type == 1) {
        if (prop->location.id < 0 || prop->location.id >= ndev)
            return CUDA_ERROR_INVALID_DEVICE;
        return make(prop->location.id, n, K_VMM, h);
    }
    return make(0, n, K_HOST, h);
}
static void release_if_done(struct alloc *h)
{
    if (h->released && h->maps == 0 && take(h->key, 1u << h->kind, 1))
        uncharge(h);
}
CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    struct alloc *a = take(h, (1u << K_VMM) | (1u << K_HOST), 0);
    if (!a || a->released)
        return CUDA_ERROR_INVALID_VALUE;
    a->released = 1;
    release_if_done(a);
    return CUDA_SUCCESS;
}
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long f)
{
    (void)align, (void)addr, (void)f;
    return make(0, n, K_VA, p);
}
CUresult cuMemAddressFree(CUdeviceptr p, size_t n) { return (void)n, drop(p, 1u << K_VA); }
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f)
{
    (void)off, (void)f;
    struct alloc *a = take(h, (1u << K_VMM) | (1u << K_HOST), 0);
    if (!a || a->released || n > a->size)
        return CUDA_ERROR_INVALID_VALUE;
    struct alloc *m = calloc(1, sizeof(*m));
    m->key = p, m->kind = K_MAP, m->target = h;
    a->maps++;
    put(m);
    return CUDA_SUCCESS;
}
CUresult cuMemUnmap(CUdeviceptr p, size_t n)
{
    (void)n;
    struct alloc *m = take(p, 1u << K_MAP, 1);
    if (!m)
        return CUDA_ERROR_INVALID_VALUE;
    struct alloc *a = take(m->target, (1u << K_VMM) | (1u << K_HOST), 0);
    free(m);
    if (a) {
        a->maps--;
        release_if_done(a);
    }
    return CUDA_SUCCESS;
}
CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t count)
{
    (void)p, (void)n, (void)d, (void)count;
    return CUDA_SUCCESS;
}

/* Arrays: element size from the format (CUarray_format values of cuda.h). */
static uint64_t elem(int format)
{
    switch (format) {
    case 0x01: case 0x08: return 1;
    case 0x02: case 0x09: case 0x10: return 2;
    case 0x03: case 0x0a: case 0x20: return 4;
    default: return 0;
    }
}
static CUresult array(uint64_t w, uint64_t h, uint64_t d, int format, unsigned ch, unsigned levels, CUarray *out)
{
    uint64_t es = elem(format), n = 0;
    if (!es || w == 0 || (ch != 1 && ch != 2 && ch != 4) || levels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1, ld = d >> l ? d >> l : 1;
        n += lw * (h ? lh : 1) * (d ? ld : 1) * ch * es;
    }
    uint64_t k;
    CUresult r = make(CURDEV, n, K_ARRAY, &k);
    if (r == CUDA_SUCCESS)
        *out = (CUarray)(uintptr_t)k;
    return r;
}
CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    return d ? array(d->Width, d->Height, 0, d->Format, d->NumChannels, 1, a) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return d ? array(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1, a) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    return d ? array(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, levels, a) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuArrayDestroy(CUarray a) { return drop((uint64_t)(uintptr_t)a, 1u << K_ARRAY); }
CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) { return cuArrayDestroy(a); }

/* ---- streams, events, kernels */
CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
    (void)flags;
    if (!cur())
        return CUDA_ERROR_INVALID_CONTEXT;
    struct emu_stream *x = calloc(1, sizeof(*x));
    x->ctx = cur();
    *s = x;
    return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream s)
{
    if ((uintptr_t)s <= 2)
        return CUDA_ERROR_INVALID_HANDLE;
    free(s);
    return CUDA_SUCCESS;
}
CUresult cuStreamGetCtx(CUstream s, CUcontext *c)
{
    struct emu_stream *x = stream_of(s);
    return x ? (*c = x->ctx, CUDA_SUCCESS) : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult cuStreamQuery(CUstream s)
{
    struct emu_stream *x = stream_of(s);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    return now_ns() >= atomic_load(&x->tail) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuStreamSynchronize(CUstream s)
{
    struct emu_stream *x = stream_of(s);
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    sleep_until(atomic_load(&x->tail));
    return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void)
{
    if (!cur())
        return CUDA_ERROR_INVALID_CONTEXT;
    sleep_until(atomic_load(&sh->dev[cur()->dev].busy_until));
    return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof(struct emu_event));
    return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) { return free(e), CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s)
{
    struct emu_stream *x = stream_of(s);
    if (!e || !x)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t = atomic_load(&x->tail), n = now_ns();
    e->t = t > n ? t : n;
    e->recorded = 1;
    return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent e)
{
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return !e->recorded || now_ns() >= e->t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventSynchronize(CUevent e)
{
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (e->recorded)
        sleep_until(e->t);
    return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    if (!a || !b || !a->recorded || !b->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    if (now_ns() < a->t || now_ns() < b->t)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(b->t - a->t)) / 1e6);
    return CUDA_SUCCESS;
}
/* Modules. An empty image is the emulator's own module, which has every function the tests name. A PTX
 * image (text with .version, .target and at least one .entry) is "JIT-compiled" by recording its entry
 * names: cuModuleGetFunction then finds only those (CUDA_ERROR_NOT_FOUND otherwise), as the driver
 * does. Whatever the kernel's code, the emulator runs it for the ns its first parameter points to,
 * which is what the PTX spin kernel of tests/cuda/emulator/ptxspin.c does on a real GPU. */
#define EMU_ENTRIES 16
struct emu_module {
    int any;
    char entry[EMU_ENTRIES][64];
    int n;
};
static struct emu_module builtin_module = {.any = 1};
static char function_token, touch_token; /* touch(ns, ptr, bytes): a kernel that accesses a buffer */
uint64_t um_touch(CUdeviceptr p, uint64_t n, int dev, uint64_t ns); /* um.inc */

static int ptx_entries(const char *text, struct emu_module *m)
{
    if (!strstr(text, ".version") || !strstr(text, ".target"))
        return -1;
    for (const char *p = text; (p = strstr(p, ".entry")) != NULL && m->n < EMU_ENTRIES;) {
        p += 6;
        if (*p != ' ' && *p != '\t')
            continue;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strcspn(p, " \t\r\n(");
        if (len == 0 || len >= sizeof(m->entry[0]))
            return -1;
        memcpy(m->entry[m->n], p, len);
        m->entry[m->n++][len] = 0;
    }
    return m->n ? 0 : -1;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    if (!m || !image)
        return CUDA_ERROR_INVALID_VALUE;
    if (!inited)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!*(const char *)image) {
        *m = &builtin_module;
        return CUDA_SUCCESS;
    }
    struct emu_module *x = calloc(1, sizeof(*x));
    if (ptx_entries(image, x) != 0) {
        free(x);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *m = x;
    return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    struct emu_module *x = m;
    if (!f || !x || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (x->any) {
        *f = !strcmp(name, "touch") ? (void *)&touch_token : (void *)&function_token;
        return CUDA_SUCCESS;
    }
    for (int i = 0; i < x->n; i++)
        if (!strcmp(x->entry[i], name)) {
            *f = x->entry[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}
CUresult cuModuleUnload(CUmodule m)
{
    if (m && m != (CUmodule)&builtin_module)
        free(m);
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shm, CUstream s, void **params, void **extra)
{
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)extra;
    struct emu_stream *x = stream_of(s);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!x)
        return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t dur = params && params[0] ? *(uint64_t *)params[0] : 0;
    GATE();
    if (f == &touch_token && params[1] && params[2]) /* touch(ns, ptr, bytes): managed memory is accessed */
        dur = um_touch(*(CUdeviceptr *)params[1], *(uint64_t *)params[2], x->ctx->dev, dur);
    struct emu_dev *d = &sh->dev[x->ctx->dev];
    uint64_t old = atomic_load(&d->busy_until), end;
    do {
        uint64_t n = now_ns(), start = old > n ? old : n;
        end = start + dur;
    } while (!atomic_compare_exchange_weak(&d->busy_until, &old, end));
    atomic_store(&x->tail, end);
    atomic_fetch_add(&d->owner_ns[owner], dur);
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shm, CUstream s, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shm, CUstream s, void **params, void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shm, CUstream s, void **params,
                                        void **extra)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                          c->sharedMemBytes, c->hStream, params, extra);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    return cuLaunchKernelEx(c, f, params, extra);
}
/* Graphs: an emulated executable graph is one kernel whose duration (ns) is the uint64 it points to. */
CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    void *params[] = {g};
    return cuLaunchKernel(&function_token, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}
CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { return cuGraphLaunch(g, s); }

/* ---- test hooks */
int vgpuemu_stats(int dev, uint64_t *used, uint64_t *peak)
{
    pthread_once(&once, setup);
    if (dev < 0 || dev >= ndev)
        return -1;
    reclaim_dead();
    *used = atomic_load(&sh->dev[dev].used);
    *peak = atomic_load(&sh->dev[dev].peak);
    return 0;
}
uint64_t vgpuemu_owner_ns(int dev, int who)
{
    pthread_once(&once, setup);
    return dev >= 0 && dev < ndev && who >= 0 && who < EMU_OWNERS ? atomic_load(&sh->dev[dev].owner_ns[who]) : 0;
}

#include "um.inc"
#include "procs.inc"
