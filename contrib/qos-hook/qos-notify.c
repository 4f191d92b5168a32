/* qos-notify busy|idle [GPU TENANT]: send one demand datagram (env as in vgpukit_qos.h). */
#include "vgpukit_qos.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: qos-notify busy|idle [GPU TENANT]\n");
        return 2;
    }
    if (vgpukit_qos_init(NULL, argc == 4 ? argv[2] : NULL, argc == 4 ? argv[3] : NULL) != 0) {
        fprintf(stderr, "qos-notify: set GPU and TENANT (arguments or VGPUKIT_QOS_GPU/VGPUKIT_QOS_TENANT)\n");
        return 2;
    }
    if (strcmp(argv[1], "busy") == 0)
        return vgpukit_qos_busy() == 0 ? 0 : 1;
    if (strcmp(argv[1], "idle") == 0)
        return vgpukit_qos_idle() == 0 ? 0 : 1;
    fprintf(stderr, "qos-notify: say busy or idle\n");
    return 2;
}
