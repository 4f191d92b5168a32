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
#include "vgpukit_demand.h"
#include "vgpukit_qos.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static launch_fn real_launch;
static int enabled;

static void setup(void)
{
    const char *ms = getenv("VGPUKIT_QOS_IDLE_MS");
    real_launch = (launch_fn)dlsym(RTLD_NEXT, "cuLaunchKernel");
    enabled = vgpukit_qos_init(NULL, NULL, NULL) == 0 &&
              vgpukit_demand_start(ms && atol(ms) > 0 ? atol(ms) * 1000000LL : 0, NULL) == 0;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream stream, void **params, void **extra)
{
    pthread_once(&once, setup);
    if (enabled)
        vgpukit_demand_launch();
    if (!real_launch)
        return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    return real_launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
}
