/* Crash inside the critical section:   lockholder DIR
 * Maps DIR/usage (contrib/cuda/region.c's layout), takes its robust mutex, scribbles over the device-0
 * total as a half-done update would, prints "locked" and waits to be killed with the lock held. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char path[4096];
    if (argc != 2) return 2;
    snprintf(path, sizeof(path), "%s/usage", argv[1]);
    int fd = open(path, O_RDWR);
    if (fd < 0) return 3;
    char *base = mmap(NULL, 592, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) return 4;
    if (pthread_mutex_lock((pthread_mutex_t *)(base + 16)) != 0) return 5;
    *(uint64_t *)(base + 336) += 1ULL << 40; /* total[0]: garbage the next locker must not trust */
    printf("locked\n");
    fflush(stdout);
    for (;;) pause();
}
