/* LD_PRELOAD launch hook: tells the vgpukit QoS daemon when a CUDA process has work.
 *
 *   LD_PRELOAD=libvgpukit-qos-hook.so VGPUKIT_QOS_GPU=gpu0 VGPUKIT_QOS_TENANT=web ./app
 *
 * cuLaunchKernel after an idle period sends "busy" before the launch is forwarded, and repeats it at
 * most every 250 ms while launches continue (a datagram sent before the tenant was registered, or to
 * a daemon that restarted since, is lost); a watcher thread sends "idle" once no kernel was launched
 * for VGPUKIT_QOS_IDLE_MS (default 20) milliseconds.
 * Frozen processes launch nothing, so the daemon's freeze is what bounds new work; kernels already
 * queued on the device still drain (docs/qos.md, "The hard physical fact").
 */
#define _GNU_SOURCE
#include "vgpukit_qos.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static launch_fn real_launch;
static atomic_llong last_launch_ns;
static atomic_int busy;
static atomic_llong last_busy_ns;
static int enabled;
static long long idle_ns = 20000000LL;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *watch(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec nap = {0, (long)(idle_ns / 4)};
        nanosleep(&nap, NULL);
        if (atomic_load(&busy) && now_ns() - atomic_load(&last_launch_ns) > idle_ns) {
            int expected = 1;
            if (atomic_compare_exchange_strong(&busy, &expected, 0))
                vgpukit_qos_idle();
        }
    }
    return NULL;
}

static void setup(void)
{
    const char *ms = getenv("VGPUKIT_QOS_IDLE_MS");
    pthread_t t;
    real_launch = (launch_fn)dlsym(RTLD_NEXT, "cuLaunchKernel");
    if (ms && atol(ms) > 0)
        idle_ns = atol(ms) * 1000000LL;
    enabled = vgpukit_qos_init(NULL, NULL, NULL) == 0;
    if (enabled && pthread_create(&t, NULL, watch, NULL) == 0)
        pthread_detach(t);
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream stream, void **params, void **extra)
{
    pthread_once(&once, setup);
    if (enabled) {
        long long now = now_ns();
        int expected = 0;
        atomic_store(&last_launch_ns, now);
        if (atomic_compare_exchange_strong(&busy, &expected, 1) ||
            now - atomic_load(&last_busy_ns) > 250000000LL) {
            atomic_store(&last_busy_ns, now);
            vgpukit_qos_busy();
        }
    }
    if (!real_launch)
        return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    return real_launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}
