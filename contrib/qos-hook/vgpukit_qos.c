/* vgpukit QoS demand protocol: the datagram client. See vgpukit_qos.h and docs/qos.md. */
#define _GNU_SOURCE
#include "vgpukit_qos.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int qos_fd = -1;
static struct sockaddr_un qos_addr;
static socklen_t qos_addr_len;
static char qos_gpu[129];
static char qos_tenant[129];

static int valid_key(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

int vgpukit_qos_init(const char *socket_path, const char *gpu, const char *tenant)
{
    if (!socket_path)
        socket_path = getenv("VGPUKIT_QOS_SOCKET");
    if (!socket_path || !*socket_path)
        socket_path = "/run/vgpukit/qos/demand.sock";
    if (!gpu)
        gpu = getenv("VGPUKIT_QOS_GPU");
    if (!tenant)
        tenant = getenv("VGPUKIT_QOS_TENANT");
    if (!gpu || !tenant || !valid_key(gpu) || !valid_key(tenant) ||
        strlen(socket_path) >= sizeof(qos_addr.sun_path))
        return -1;
    strcpy(qos_gpu, gpu);
    strcpy(qos_tenant, tenant);
    memset(&qos_addr, 0, sizeof(qos_addr));
    qos_addr.sun_family = AF_UNIX;
    strcpy(qos_addr.sun_path, socket_path);
    qos_addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(socket_path) + 1);
    if (qos_fd < 0)
        qos_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    return qos_fd < 0 ? -1 : 0;
}

static int qos_send(const char *what)
{
    char msg[300];
    struct timespec ts;
    int n;
    if (qos_fd < 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    n = snprintf(msg, sizeof(msg), "1 %s %s %s %lld\n", qos_gpu, qos_tenant, what,
                 (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (n <= 0 || (size_t)n >= sizeof(msg))
        return -1;
    return sendto(qos_fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&qos_addr,
                  qos_addr_len) == n
               ? 0
               : -1;
}

int vgpukit_qos_busy(void) { return qos_send("busy"); }
int vgpukit_qos_mem(const char *verb, unsigned long long value)
{
    char what[64];
    if (strcmp(verb, "need") && strcmp(verb, "low") && strcmp(verb, "moved"))
        return -1;
    snprintf(what, sizeof(what), "%s %llu", verb, value);
    return qos_send(what);
}
int vgpukit_qos_idle(void) { return qos_send("idle"); }
