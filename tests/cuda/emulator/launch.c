/* Launch behaviour:
 *   launch drain K MS      queue K kernels of MS ms as fast as admitted (VGPUKIT_TEST_LAUNCH: kernel,
 *                          coop, ex or graph picks the launch call); then (as if the process were
 *                          frozen right after) measure how long the device still works: the drain.
 *   launch bench N         ns per cuLaunchKernel (median of batches of 1000, 0-ns kernels) and per
 *                          cuMemAlloc_v2 + cuMemFree_v2 pair.
 *   launch probe MS        one MS-ms kernel; prints how long until it completed (latency_ms).
 * With VGPUKIT_TEST_GATE set, the program prints "ready" once initialised and waits for a line on stdin
 * before it launches anything (so that a test can register it with the QoS daemon first). */
#include "common.h"

#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUmodule m;
    CUfunction f;
    CUstream s;
    if (argc < 3) return 2;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&m, ""));
    CHECK(cuModuleGetFunction(&f, m, "spin"));
    CHECK(cuStreamCreate(&s, 0));
    if (getenv("VGPUKIT_TEST_GATE")) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof(line), stdin)) return 3;
    }
    if (!strcmp(argv[1], "probe")) {
        uint64_t ns = (uint64_t)(atof(argv[2]) * 1e6);
        void *params[] = {&ns};
        double t0 = now_ms();
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
        CHECK(cuStreamSynchronize(s));
        printf("latency_ms=%.3f\n", now_ms() - t0);
    } else if (!strcmp(argv[1], "drain") && argc == 4) {
        int k = atoi(argv[2]);
        uint64_t ns = (uint64_t)(atof(argv[3]) * 1e6);
        void *params[] = {&ns};
        const char *how = getenv("VGPUKIT_TEST_LAUNCH") ? getenv("VGPUKIT_TEST_LAUNCH") : "kernel";
        CUlaunchConfig cfg = {1, 1, 1, 1, 1, 1, 0, s, NULL, 0};
        double t0 = now_ms();
        for (int i = 0; i < k; i++) {
            if (!strcmp(how, "coop")) CHECK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
            else if (!strcmp(how, "ex")) CHECK(cuLaunchKernelEx(&cfg, f, params, NULL));
            else if (!strcmp(how, "graph")) CHECK(cuGraphLaunch((CUgraphExec)&ns, s));
            else CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
        }
        double t1 = now_ms();
        CHECK(cuStreamSynchronize(s));
        double t2 = now_ms();
        printf("launch_ms=%.3f drain_ms=%.3f\n", t1 - t0, t2 - t1);
    } else if (!strcmp(argv[1], "bench")) {
        int n = atoi(argv[2]), batches = n / 1000 > 0 ? n / 1000 : 1;
        uint64_t ns = 0;
        void *params[] = {&ns};
        double *lt = calloc((size_t)batches, sizeof(double)), *at = calloc((size_t)batches, sizeof(double));
        for (int b = 0; b < batches; b++) {
            struct timespec x, y;
            clock_gettime(CLOCK_MONOTONIC, &x);
            for (int i = 0; i < 1000; i++) CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
            clock_gettime(CLOCK_MONOTONIC, &y);
            lt[b] = ((y.tv_sec - x.tv_sec) * 1e9 + (y.tv_nsec - x.tv_nsec)) / 1000;
            clock_gettime(CLOCK_MONOTONIC, &x);
            for (int i = 0; i < 1000; i++) {
                CUdeviceptr p;
                CHECK(cuMemAlloc_v2(&p, 4096));
                CHECK(cuMemFree_v2(p));
            }
            clock_gettime(CLOCK_MONOTONIC, &y);
            at[b] = ((y.tv_sec - x.tv_sec) * 1e9 + (y.tv_nsec - x.tv_nsec)) / 1000;
        }
        qsort(lt, (size_t)batches, sizeof(double), cmp);
        qsort(at, (size_t)batches, sizeof(double), cmp);
        printf("launch_ns=%.1f alloc_free_ns=%.1f\n", lt[batches / 2], at[batches / 2]);
    } else
        return 2;
    return 0;
}
