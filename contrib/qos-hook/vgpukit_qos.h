/* vgpukit QoS demand protocol, client side (no Python involved).
 *
 * One datagram per change, to the daemon's Unix datagram socket:
 *     "1 <gpu> <tenant> busy|idle <CLOCK_MONOTONIC ns>\n"
 * and, for memory QoS (libvgpukit-cuda, docs/cuda.md "Memory QoS"):
 *     "1 <gpu> <tenant> need|low|moved <value> <CLOCK_MONOTONIC ns>\n"
 * Configuration comes from the arguments or, when NULL, from the environment:
 *     VGPUKIT_QOS_SOCKET (default /run/vgpukit/qos/demand.sock), VGPUKIT_QOS_GPU, VGPUKIT_QOS_TENANT.
 * Sending never blocks and never fails the caller: without a daemon it is a no-op.
 */
#ifndef VGPUKIT_QOS_H
#define VGPUKIT_QOS_H

#ifdef __cplusplus
extern "C" {
#endif

/* 0 on success, -1 when gpu/tenant are missing or invalid. */
int vgpukit_qos_init(const char *socket_path, const char *gpu, const char *tenant);
/* 0 when the datagram was sent, -1 otherwise (no daemon, not initialised). */
int vgpukit_qos_busy(void);
int vgpukit_qos_idle(void);
/* need <bytes short>, low <bytes under the watermark>, moved <request seq complied with>. */
int vgpukit_qos_mem(const char *verb, unsigned long long value);

#ifdef __cplusplus
}
#endif
#endif
