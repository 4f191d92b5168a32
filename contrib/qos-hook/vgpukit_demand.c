/* The demand watcher both preload libraries share: see vgpukit_demand.h and docs/qos.md. */
#define _GNU_SOURCE
#include "vgpukit_demand.h"
#include "vgpukit_qos.h"

#include <pthread.h>
#include <stddef.h>
#include <time.h>

#define BUSY_REPEAT_NS 250000000LL

static atomic_llong last_launch_ns, last_busy_ns;
static atomic_int busy;
static long long idle_after_ns = 20000000LL;
static atomic_int *holding;

long long vgpukit_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *watch(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec nap = {0, (long)(idle_after_ns / 4)};
        nanosleep(&nap, NULL);
        if (atomic_load(&busy) && !(holding && atomic_load(holding)) &&
            vgpukit_now_ns() - atomic_load(&last_launch_ns) > idle_after_ns) {
            int expected = 1;
            if (atomic_compare_exchange_strong(&busy, &expected, 0))
                vgpukit_qos_idle();
        }
    }
    return NULL;
}

int vgpukit_demand_start(long long idle_ns, atomic_int *hold)
{
    pthread_t t;
    if (idle_ns > 0)
        idle_after_ns = idle_ns;
    holding = hold;
    if (pthread_create(&t, NULL, watch, NULL) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}

void vgpukit_demand_launch(void)
{
    long long now = vgpukit_now_ns();
    int expected = 0;
    atomic_store_explicit(&last_launch_ns, now, memory_order_relaxed);
    if (atomic_compare_exchange_strong(&busy, &expected, 1) || now - atomic_load(&last_busy_ns) > BUSY_REPEAT_NS) {
        atomic_store(&last_busy_ns, now);
        vgpukit_qos_busy();
    }
}
