/* Compute: demand notification to the QoS daemon and a bounded in-flight window per stream.
 *
 * Demand: the first launch after an idle period sends "busy" (contrib/qos-hook's datagram protocol), at
 * most every 250 ms while launches continue; a watcher thread sends "idle" once no launch happened for
 * idle_ms and no thread is waiting for the window.
 *
 * Window: after each admitted launch an event is recorded on the stream; before a launch is admitted
 * while N launches (vgc.inflight) are outstanding, or while outstanding x the estimated kernel time
 * exceeds T ms (vgc.inflight_ms), the oldest event is waited for. Kernel time is estimated from the GPU
 * time between consecutive completed events (cuEventElapsedTime; an over-estimate when the stream had
 * gaps, which only makes the window tighter). So whatever freezes the process, at most the window's
 * work is left queued on the device: that bounds preemption latency.
 */
#define _GNU_SOURCE
#include "../qos-hook/vgpukit_demand.h"
#include "vgpukit_cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define RING 1024

static atomic_int waiting; /* threads waiting for the window: the watcher holds off "idle" */

void vgc_launch_setup(void)
{
    if (vgc.demand)
        vgpukit_demand_start(vgc.idle_ns, &waiting);
}

/* ---- the window */
struct win {
    uintptr_t key;
    pthread_mutex_t mu;
    CUevent ring[RING];
    CUevent last; /* the most recently retired event (start of the next GPU-time measurement) */
    CUevent spare[8];
    unsigned head, count, nspare;
    double est_ms; /* estimated GPU ms per launch; < 0 until measured */
    struct win *next;
};
#define NB 256
static struct win *wins[NB];
static pthread_mutex_t wins_mu = PTHREAD_MUTEX_INITIALIZER;

typedef CUresult (*ev_fn)(CUevent);
static void ev_destroy(CUevent e) { REAL(cuEventDestroy_v2, ev_fn)(e); }

/* NULL, legacy and per-thread default streams are one per context. */
static uintptr_t stream_key(CUstream s)
{
    CUcontext c = NULL;
    if ((uintptr_t)s > 2)
        return (uintptr_t)s;
    REAL(cuCtxGetCurrent, CUresult (*)(CUcontext *))(&c);
    return (uintptr_t)c ^ (uintptr_t)s;
}

static struct win *get_win(uintptr_t key, int create)
{
    unsigned b = (unsigned)((key >> 4) % NB);
    pthread_mutex_lock(&wins_mu);
    struct win *w = wins[b];
    while (w && w->key != key)
        w = w->next;
    if (!w && create && (w = calloc(1, sizeof(*w)))) {
        w->key = key;
        w->est_ms = -1;
        pthread_mutex_init(&w->mu, NULL);
        w->next = wins[b];
        wins[b] = w;
    }
    pthread_mutex_unlock(&wins_mu);
    return w;
}

static void retire(struct win *w)
{
    CUevent e = w->ring[w->head];
    float ms;
    if (vgc.inflight_ms && w->last &&
        REAL(cuEventElapsedTime, CUresult (*)(float *, CUevent, CUevent))(&ms, w->last, e) == CUDA_SUCCESS && ms >= 0)
        w->est_ms = w->est_ms >= 0 ? 0.8 * w->est_ms + 0.2 * ms : ms;
    if (w->last) {
        if (w->nspare < 8)
            w->spare[w->nspare++] = w->last;
        else
            ev_destroy(w->last);
    }
    w->last = e;
    w->head = (w->head + 1) % RING;
    w->count--;
}

static int full(const struct win *w)
{
    unsigned n = vgc.inflight ? vgc.inflight : RING - 1;
    if (!vgc.inflight_ms || !w->count)
        return w->count >= n;
    if (w->est_ms < 0) /* kernel time not measured yet: admit two, measure between their completions */
        return w->count >= 2;
    return w->count >= n || w->count * w->est_ms >= vgc.inflight_ms;
}

/* Waits (outside any global lock) until the stream has room; returns the window, locked. */
static struct win *admit(CUstream s)
{
    struct win *w = get_win(stream_key(s), 1);
    if (!w)
        return NULL;
    pthread_mutex_lock(&w->mu);
    while (w->count && REAL(cuEventQuery, ev_fn)(w->ring[w->head]) == CUDA_SUCCESS)
        retire(w);
    if (full(w)) {
        atomic_fetch_add(&waiting, 1);
        while (full(w)) {
            REAL(cuEventSynchronize, ev_fn)(w->ring[w->head]);
            retire(w);
        }
        atomic_fetch_sub(&waiting, 1);
    }
    return w;
}

static void record(struct win *w, CUstream s)
{
    CUevent e = NULL;
    if (w->nspare)
        e = w->spare[--w->nspare];
    else if (REAL(cuEventCreate, CUresult (*)(CUevent *, unsigned))(
                 &e, vgc.inflight_ms ? 0 : CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return;
    if (REAL(cuEventRecord, CUresult (*)(CUevent, CUstream))(e, s) != CUDA_SUCCESS) {
        ev_destroy(e);
        return;
    }
    w->ring[(w->head + w->count) % RING] = e;
    w->count++;
}

/* Every launch path: demand first, then (with a window) admission, the driver's launch, the event. */
static inline struct win *gate(CUstream s)
{
    if (vgc.demand)
        vgpukit_demand_launch();
    return vgc.inflight || vgc.inflight_ms ? admit(s) : NULL;
}
static inline CUresult done(struct win *w, CUstream s, CUresult r)
{
    if (w) {
        if (r == CUDA_SUCCESS)
            record(w, s);
        pthread_mutex_unlock(&w->mu);
    }
    return r;
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
#define LAUNCH(name)                                                                                         \
    EXPORT CUresult name(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,         \
                         unsigned bz, unsigned shm, CUstream s, void **params, void **extra)                   \
    {                                                                                                        \
        vgc_init();                                                                                          \
        struct win *w = gate(s);                                                                             \
        return done(w, s, REAL(name, launch_fn)(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));          \
    }
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)
LAUNCH(cuLaunchCooperativeKernel)
LAUNCH(cuLaunchCooperativeKernel_ptsz)

/* cuLaunchKernelEx(const CUlaunchConfig *, f, params, extra): CUlaunchConfig starts with gridDim x/y/z,
 * blockDim x/y/z, sharedMemBytes (7 unsigned ints) and then the CUstream hStream. */
struct launch_config_head {
    unsigned dims[7];
    CUstream hStream;
};
typedef CUresult (*launchex_fn)(const void *, CUfunction, void **, void **);
#define LAUNCHEX(name)                                                                                       \
    EXPORT CUresult name(const void *cfg, CUfunction f, void **params, void **extra)                          \
    {                                                                                                        \
        vgc_init();                                                                                          \
        CUstream s = cfg ? ((const struct launch_config_head *)cfg)->hStream : NULL;                         \
        struct win *w = cfg ? gate(s) : NULL;                                                                \
        return done(w, s, REAL(name, launchex_fn)(cfg, f, params, extra));                                   \
    }
LAUNCHEX(cuLaunchKernelEx)
LAUNCHEX(cuLaunchKernelEx_ptsz)

/* A CUDA graph launch is one unit of queued work for the window. */
typedef CUresult (*graph_fn)(void *, CUstream);
#define GRAPH(name)                                                                                          \
    EXPORT CUresult name(void *exec, CUstream s)                                                              \
    {                                                                                                        \
        vgc_init();                                                                                          \
        struct win *w = gate(s);                                                                             \
        return done(w, s, REAL(name, graph_fn)(exec, s));                                                    \
    }
GRAPH(cuGraphLaunch)
GRAPH(cuGraphLaunch_ptsz)

/* A destroyed stream's window goes with it (its events first: they belong to the stream's context). */
EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    vgc_init();
    if ((vgc.inflight || vgc.inflight_ms) && (uintptr_t)s > 2) {
        unsigned b = (unsigned)(((uintptr_t)s >> 4) % NB);
        pthread_mutex_lock(&wins_mu);
        struct win **pp = &wins[b], *w;
        while ((w = *pp) && w->key != (uintptr_t)s)
            pp = &w->next;
        if (w)
            *pp = w->next;
        pthread_mutex_unlock(&wins_mu);
        if (w) {
            for (unsigned i = 0; i < w->count; i++)
                ev_destroy(w->ring[(w->head + i) % RING]);
            for (unsigned i = 0; i < w->nspare; i++)
                ev_destroy(w->spare[i]);
            if (w->last)
                ev_destroy(w->last);
            free(w);
        }
    }
    return REAL(cuStreamDestroy_v2, CUresult (*)(CUstream))(s);
}
