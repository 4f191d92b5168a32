/* Memory QoS scenarios (docs/cuda.md, "Memory QoS"); commands come on stdin, one per line.
 *
 *   memqos offline SIZE N [MS]  N buffers of SIZE bytes (cuMemAlloc_v2: unified memory for a tenant with a
 *                               burst), each filled with its own pattern; prints "held", then runs a
 *                               "touch" kernel of MS ms (default 5) over each buffer in turn, printing
 *                               "it=I ms=WALL" per round. "check": the contents, "intact=0|1"; "quit".
 *   memqos online SIZE N        prints "ready"; "go": N allocations of SIZE, each "alloc=I ns=NS rc=RC"
 *                               (the time from the call to its return), then "allocated"; "free": frees
 *                               them, "freed"; "quit".
 *   memqos ckpt SIZE            a plain and a managed buffer of SIZE, filled; prints "held"; "check": the
 *                               contents read back, "intact=0|1 mismatch=M" (M: the emulator's count of
 *                               restores whose contents differed); "quit".
 * Every program also answers "stats": "devused=B moved_to_host=B moved_to_dev=B".
 */
#include "common.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
int vgpuemu_um(CUdeviceptr, uint64_t *, uint64_t *, uint64_t *);

static char cmd[64];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void *reader(void *arg)
{
    char line[64];
    (void)arg;
    while (fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\n")] = 0;
        pthread_mutex_lock(&mu);
        snprintf(cmd, sizeof(cmd), "%s", line);
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_lock(&mu);
    snprintf(cmd, sizeof(cmd), "quit");
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* The pending command (consumed), or "" when none; waits for one when wait is set. */
static void next(char *out, int wait)
{
    pthread_mutex_lock(&mu);
    while (wait && !cmd[0])
        pthread_cond_wait(&cv, &mu);
    snprintf(out, 64, "%s", cmd);
    if (strcmp(cmd, "quit"))
        cmd[0] = 0;
    pthread_mutex_unlock(&mu);
}

static void stats(void)
{
    uint64_t used, peak, to_dev, to_host, mismatch;
    vgpuemu_stats(0, &used, &peak);
    vgpuemu_um(0, &to_dev, &to_host, &mismatch);
    printf("devused=%llu moved_to_host=%llu moved_to_dev=%llu\n", (unsigned long long)used,
           (unsigned long long)to_host, (unsigned long long)to_dev);
    fflush(stdout);
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t j = 0; j < n; j++)
        b[j] = (unsigned char)(seed * 131u + j * 7u + (j >> 12));
}

static int intact(CUdeviceptr p, size_t n, unsigned seed, unsigned char *want, unsigned char *got)
{
    fill(want, n, seed);
    return cuMemcpyDtoH_v2(got, p, n) == CUDA_SUCCESS && memcmp(want, got, n) == 0;
}

static void loop_commands(CUdeviceptr *ps, int np, size_t n, unsigned char *a, unsigned char *b, double kms)
{
    char c[64];
    uint64_t ns = (uint64_t)(kms * 1e6);
    CUfunction touch = NULL;
    CUmodule mod;
    if (kms > 0) {
        CHECK(cuModuleLoadData(&mod, ""));
        CHECK(cuModuleGetFunction(&touch, mod, "touch"));
    }
    for (int it = 0;; it++) {
        next(c, touch == NULL);
        if (!strcmp(c, "quit"))
            return;
        if (!strcmp(c, "stats"))
            stats();
        if (!strcmp(c, "check")) {
            int ok = 1;
            for (int i = 0; i < np; i++)
                ok &= intact(ps[i], n, (unsigned)i + 1, a, b);
            uint64_t d, h, mismatch;
            vgpuemu_um(0, &d, &h, &mismatch);
            printf("intact=%d mismatch=%llu\n", ok, (unsigned long long)mismatch);
            fflush(stdout);
        }
        if (touch) {
            double t0 = now_ms();
            for (int i = 0; i < np; i++) {
                uint64_t bytes = n;
                void *params[] = {&ns, &ps[i], &bytes};
                CHECK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
                CHECK(cuStreamSynchronize(NULL));
            }
            printf("it=%d ms=%.2f\n", it, now_ms() - t0);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    pthread_t t;
    char c[64];
    if (argc < 3)
        return 2;
    const char *mode = argv[1];
    size_t n = strtoull(argv[2], NULL, 10);
    int count = argc > 3 ? atoi(argv[3]) : 1;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    pthread_create(&t, NULL, reader, NULL);
    unsigned char *a = malloc(n), *b = malloc(n);
    CUdeviceptr ps[64];
    if (!strcmp(mode, "online")) {
        printf("ready\n");
        fflush(stdout);
        for (next(c, 1); strcmp(c, "go"); next(c, 1))
            if (!strcmp(c, "quit"))
                return 0;
        int got = 0;
        for (int i = 0; i < count && i < 64; i++) {
            double t0 = now_ms();
            CUresult r = cuMemAlloc_v2(&ps[i], n);
            printf("alloc=%d ns=%.0f rc=%d\n", i, (now_ms() - t0) * 1e6, r);
            fflush(stdout);
            got += r == CUDA_SUCCESS;
        }
        printf("allocated=%d\n", got);
        fflush(stdout);
        for (next(c, 1); strcmp(c, "free") && strcmp(c, "quit"); next(c, 1))
            if (!strcmp(c, "stats"))
                stats();
        for (int i = 0; i < got; i++)
            cuMemFree_v2(ps[i]);
        printf("freed\n");
        fflush(stdout);
        for (next(c, 1); strcmp(c, "quit"); next(c, 1))
            if (!strcmp(c, "stats"))
                stats();
        return 0;
    }
    if (!strcmp(mode, "ckpt")) {
        CHECK(cuMemAlloc_v2(&ps[0], n));
        CHECK(cuMemAllocManaged(&ps[1], n, 1));
        count = 2;
    } else {
        for (int i = 0; i < count && i < 64; i++)
            CHECK(cuMemAlloc_v2(&ps[i], n));
    }
    for (int i = 0; i < count; i++) {
        fill(a, n, (unsigned)i + 1);
        CHECK(cuMemcpyHtoD_v2(ps[i], a, n));
    }
    printf("held pid=%d\n", (int)getpid());
    fflush(stdout);
    loop_commands(ps, count, n, a, b, !strcmp(mode, "offline") ? (argc > 4 ? atof(argv[4]) : 5) : 0);
    return 0;
}
