/* The tenant's shared accounting region: <dir>/usage, one small file mapped by every process of the
 * tenant (layout below; vgpukit/cuda/region.py reads it for `qos status`).
 *
 *   offset 0      u32 magic "VGCU" (0x55434756), u32 version 2, u32 maxdev 32, u32 slots 64
 *   offset 16     a process-shared robust pthread mutex (64 bytes reserved)
 *   offset 80     u64 cap[32]     the cap per device the tenant allocated on, as the last process set it
 *   offset 336    u64 total[32]   bytes charged per device = the sum of the live slots
 *   offset 592    64 slots of { i32 pid, u32 pad, u64 start (starttime in /proc/pid/stat), u64 used[32] }
 *   offset 18000  u64 refused[32] allocation attempts the cap refused per device (version 2; atomic adds)
 *   version 3 (memory QoS, docs/cuda.md "Memory QoS"):
 *   offset 18256  u64 burst[32]    the burst cap per device (unified memory beyond the cap), as last set
 *   offset 18512  u64 um[32]       evictable bytes charged per device (unified memory) = sum of slot_um
 *   offset 18768  u64 evicted[32]  of those, bytes the tenant moved to the host on request = sum of slot_evicted
 *   offset 19024  u32 cls (0 not set, 1 online, 2 offline), u32 reserved
 *   offset 19032  u64 slot_um[64][32], offset 35416 u64 slot_evicted[64][32]   per process slot
 *   offset 51800  u32 slot_ack[64]  the eviction request (memreq seq) each process last complied with
 *   offset 52056  end
 *
 * Versions only append: version 1 is the first 18000 bytes (no refusal counters), and a reader of
 * version N reads any later version's first bytes as version N's. A file of an earlier version (left by
 * an older library) is grown to version 3 in place by the first process of this library that maps it
 * (under the file lock; appended fields zero): older processes keep their mapping of the first bytes.
 *
 * Crash safety: a process killed while holding the mutex leaves it EOWNERDEAD; the next locker makes it
 * consistent and recomputes every total from the slots. A slot whose process is gone (no such pid, or
 * the pid was reused: another start time) is reclaimed (its usage returned) when an allocation would
 * otherwise fail and when a process takes a slot. Without a usable directory the region is private to
 * the process (caps still hold per process).
 */
#define _GNU_SOURCE
#include "vgpukit_cuda.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define VGC_MAGIC 0x55434756u
#define VGC_SLOTS 64

struct slot {
    int32_t pid;
    uint32_t pad;
    uint64_t start;
    uint64_t used[VGC_MAXDEV];
};
struct region {
    uint32_t magic, version, maxdev, slots;
    union {
        pthread_mutex_t m;
        char pad[64];
    } lock;
    uint64_t cap[VGC_MAXDEV];
    uint64_t total[VGC_MAXDEV];
    struct slot slot[VGC_SLOTS];
    uint64_t refused[VGC_MAXDEV]; /* version 2 */
    uint64_t burst[VGC_MAXDEV];   /* version 3 */
    uint64_t um[VGC_MAXDEV];
    uint64_t evicted[VGC_MAXDEV];
    uint32_t cls, reserved;
    uint64_t slot_um[VGC_SLOTS][VGC_MAXDEV];
    uint64_t slot_evicted[VGC_SLOTS][VGC_MAXDEV];
    uint32_t slot_ack[VGC_SLOTS];
};
#define VGC_VERSION 3
#define VGC_V1_SIZE (592 + VGC_SLOTS * 272)
#define VGC_V2_SIZE (VGC_V1_SIZE + VGC_MAXDEV * 8)
_Static_assert(sizeof(pthread_mutex_t) <= 64, "mutex fits its field");
_Static_assert(offsetof(struct region, burst) == VGC_V2_SIZE, "layout as documented");
_Static_assert(offsetof(struct region, slot_um) == 19032 && sizeof(struct region) == 52056, "layout as documented");

static struct region *rg;
static int me = -1; /* my slot */
static pid_t my_pid;

static uint64_t start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static int dead(const struct slot *s)
{
    if (s->pid <= 0)
        return 0;
    if (kill(s->pid, 0) != 0 && errno == ESRCH)
        return 1;
    uint64_t st = start_time(s->pid);
    return st != 0 && s->start != 0 && st != s->start;
}

static void recompute(void)
{
    memset(rg->total, 0, sizeof(rg->total));
    memset(rg->um, 0, sizeof(rg->um));
    memset(rg->evicted, 0, sizeof(rg->evicted));
    for (int i = 0; i < VGC_SLOTS; i++)
        for (int d = 0; d < VGC_MAXDEV; d++) {
            rg->total[d] += rg->slot[i].used[d];
            rg->um[d] += rg->slot_um[i][d];
            rg->evicted[d] += rg->slot_evicted[i][d];
        }
}

static void lock(void)
{
    if (pthread_mutex_lock(&rg->lock.m) == EOWNERDEAD) {
        recompute();
        pthread_mutex_consistent(&rg->lock.m);
    }
}
static void unlock(void) { pthread_mutex_unlock(&rg->lock.m); }

/* Returns the usage of dead processes' slots; called with the lock held. */
static int reclaim(void)
{
    int n = 0;
    for (int i = 0; i < VGC_SLOTS; i++)
        if (i != me && dead(&rg->slot[i])) {
            for (int d = 0; d < VGC_MAXDEV; d++) {
                rg->total[d] -= rg->slot[i].used[d];
                rg->um[d] -= rg->slot_um[i][d];
                rg->evicted[d] -= rg->slot_evicted[i][d];
            }
            memset(&rg->slot[i], 0, sizeof(rg->slot[i]));
            memset(rg->slot_um[i], 0, sizeof(rg->slot_um[i]));
            memset(rg->slot_evicted[i], 0, sizeof(rg->slot_evicted[i]));
            rg->slot_ack[i] = 0;
            n++;
        }
    return n;
}

static void init_mutex(struct region *r)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&r->lock.m, &a);
    pthread_mutexattr_destroy(&a);
}

static struct region *map_file(const char *dir)
{
    char path[4200];
    struct stat st;
    struct region *r = NULL;
    if (!dir || snprintf(path, sizeof(path), "%s/usage", dir) >= (int)sizeof(path))
        return NULL;
    mkdir(dir, 0700);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return NULL;
    int old = 0; /* a file of an earlier version, to grow in place */
    if (flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0 &&
        (st.st_size == (off_t)sizeof(*r) ||
         ((st.st_size == 0 || (old = st.st_size == VGC_V1_SIZE || st.st_size == VGC_V2_SIZE)) &&
          ftruncate(fd, sizeof(*r)) == 0))) {
        void *m = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
            r = m;
            if (r->magic != VGC_MAGIC) { /* first user (under the file lock): lay it out */
                memset(r, 0, sizeof(*r));
                init_mutex(r);
                r->version = VGC_VERSION, r->maxdev = VGC_MAXDEV, r->slots = VGC_SLOTS;
                __atomic_store_n(&r->magic, VGC_MAGIC, __ATOMIC_RELEASE);
            } else if (old && (r->version == 1 || r->version == 2) && r->maxdev == VGC_MAXDEV && r->slots == VGC_SLOTS) {
                __atomic_store_n(&r->version, VGC_VERSION, __ATOMIC_RELEASE); /* grown: appended fields zero */
            } else if (r->version != VGC_VERSION || r->maxdev != VGC_MAXDEV || r->slots != VGC_SLOTS) {
                munmap(m, sizeof(*r));
                r = NULL;
            }
        }
    }
    flock(fd, LOCK_UN); /* explicitly: the mapping keeps the open file (and a lock on it) alive */
    close(fd);
    return r;
}

static int take_slot(void)
{
    int free_slot = -1;
    my_pid = getpid();
    lock();
    reclaim();
    for (int i = 0; i < VGC_SLOTS && free_slot < 0; i++)
        if (rg->slot[i].pid == 0)
            free_slot = i;
    if (free_slot >= 0) {
        memset(&rg->slot[free_slot], 0, sizeof(rg->slot[free_slot]));
        memset(rg->slot_um[free_slot], 0, sizeof(rg->slot_um[free_slot]));
        memset(rg->slot_evicted[free_slot], 0, sizeof(rg->slot_evicted[free_slot]));
        rg->slot_ack[free_slot] = 0;
        rg->slot[free_slot].start = start_time(my_pid);
        rg->slot[free_slot].pid = my_pid;
    }
    unlock();
    return free_slot;
}

int vgc_region_open(const char *dir)
{
    rg = map_file(dir);
    if (rg && (me = take_slot()) >= 0)
        return 0;
    /* No shared file (or 64 live processes): account privately. */
    rg = calloc(1, sizeof(*rg));
    if (!rg)
        return -1;
    init_mutex(rg);
    me = take_slot();
    return -1;
}

/* A forked child gets its own slot: its parent's allocations are not its own. */
void vgc_region_after_fork(void)
{
    if (rg)
        me = take_slot();
}

/* Fits: every allocation within cap + burst in all, what cannot be evicted within the cap alone. */
static int fits(int dev, uint64_t bytes, int evictable)
{
    uint64_t cap = vgc.cap[dev], all = cap + vgc.burst[dev], pinned = rg->total[dev] - rg->um[dev];
    if (!cap)
        return 1;
    if (rg->total[dev] > all || bytes > all - rg->total[dev])
        return 0;
    return evictable || (pinned <= cap && bytes <= cap - pinned);
}

int vgc_charge(int dev, uint64_t bytes) { return vgc_charge_kind(dev, bytes, 0); }

int vgc_charge_kind(int dev, uint64_t bytes, int evictable)
{
    if (dev < 0 || dev >= VGC_MAXDEV || me < 0) { /* beyond what the region counts: only uncapped tenants */
        for (int d = 0; d < VGC_MAXDEV; d++)
            if (vgc.cap[d])
                return -1;
        return 0;
    }
    lock();
    rg->cap[dev] = vgc.cap[dev]; /* for display: the devices this tenant used, with their caps */
    rg->burst[dev] = vgc.burst[dev];
    rg->cls = (uint32_t)vgc.cls;
    for (int pass = 0; pass < 2; pass++) {
        if (fits(dev, bytes, evictable)) {
            rg->slot[me].used[dev] += bytes;
            rg->total[dev] += bytes;
            if (evictable) {
                rg->slot_um[me][dev] += bytes;
                rg->um[dev] += bytes;
            }
            unlock();
            return 0;
        }
        if (pass == 0 && !reclaim())
            break;
    }
    __atomic_fetch_add(&rg->refused[dev], 1, __ATOMIC_RELAXED); /* the exporter's refusals counter */
    unlock();
    return -1;
}

void vgc_uncharge(int dev, uint64_t bytes) { vgc_uncharge_kind(dev, bytes, 0, 0); }

static void sub(uint64_t *mine, uint64_t *all, uint64_t bytes)
{
    if (bytes > *mine) /* never below zero, whatever the caller did */
        bytes = *mine;
    *mine -= bytes;
    *all -= bytes;
}

void vgc_uncharge_kind(int dev, uint64_t bytes, int evictable, int evicted)
{
    if (dev < 0 || dev >= VGC_MAXDEV || me < 0)
        return;
    lock();
    sub(&rg->slot[me].used[dev], &rg->total[dev], bytes);
    if (evictable)
        sub(&rg->slot_um[me][dev], &rg->um[dev], bytes);
    if (evicted)
        sub(&rg->slot_evicted[me][dev], &rg->evicted[dev], bytes);
    unlock();
}

/* Bytes of unified memory this process moved to the host (moved > 0) or back to the device. */
void vgc_moved(int dev, uint64_t bytes, int to_host)
{
    if (dev < 0 || dev >= VGC_MAXDEV || me < 0)
        return;
    lock();
    if (to_host) {
        rg->slot_evicted[me][dev] += bytes;
        rg->evicted[dev] += bytes;
    } else {
        sub(&rg->slot_evicted[me][dev], &rg->evicted[dev], bytes);
    }
    unlock();
}

/* The tenant's evicted bytes on every device. */
uint64_t vgc_evicted_total(void)
{
    uint64_t n = 0;
    for (int d = 0; rg && d < VGC_MAXDEV; d++)
        n += __atomic_load_n(&rg->evicted[d], __ATOMIC_RELAXED);
    return n;
}

void vgc_ack(uint32_t seq)
{
    if (rg && me >= 0)
        __atomic_store_n(&rg->slot_ack[me], seq, __ATOMIC_RELEASE);
}

uint64_t vgc_used(int dev)
{
    if (dev < 0 || dev >= VGC_MAXDEV || !rg)
        return 0;
    return __atomic_load_n(&rg->total[dev], __ATOMIC_RELAXED);
}
