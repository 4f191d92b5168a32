/* The demand watcher both preload libraries share (libvgpukit-qos-hook.so, libvgpukit-cuda.so).
 *
 * vgpukit_demand_launch() at every kernel launch: the first launch after an idle period sends "busy"
 * (vgpukit_qos.h's datagram), repeated at most every 250 ms while launches continue. A watcher thread,
 * started by vgpukit_demand_start(), sends "idle" once no launch happened for idle_ns and *hold (when
 * given: threads still waiting to launch) is 0. Call vgpukit_qos_init() first.
 */
#ifndef VGPUKIT_DEMAND_H
#define VGPUKIT_DEMAND_H

#include <stdatomic.h>

#define VGPUKIT_HIDDEN __attribute__((visibility("hidden")))

VGPUKIT_HIDDEN long long vgpukit_now_ns(void);
/* Start the idle watcher (0 on success). */
VGPUKIT_HIDDEN int vgpukit_demand_start(long long idle_ns, atomic_int *hold);
VGPUKIT_HIDDEN void vgpukit_demand_launch(void);

#endif
