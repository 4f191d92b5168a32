/* A real-GPU test program that needs no CUDA toolkit:   ptxspin MODE [ARGS]
 *
 * It dlopens libcuda.so.1 (the driver's, or the device emulator's when that is first on the library
 * path), resolves every entry point with dlsym, JIT-compiles the PTX spin kernel below with
 * cuModuleLoadData and launches it. The kernel's one parameter is a duration in ns: one thread spins
 * on %globaltimer until that much time has passed, so "a kernel of D ns" means the same on a GPU as
 * on the emulator (which runs any kernel for the ns its first parameter points to).
 *
 *   info            device, driver version, memory; JIT-compiles the module and finds "spin"
 *   time MS N       N kernels of MS ms, each timed with events: kernel_ms (median, device time)
 *                   and wall_ms (median, launch to synchronize)
 *   cap             cuMemGetInfo's total, then cuMemAlloc_v2 of all of it (big=), then of 1 byte
 *                   (one=), and cuMemFree_v2: the result codes (under a cap: big=0 one=2)
 *   bursts B        B bursts of 20 kernels of 0.2 ms, 1 ms apart, 150 ms between bursts (demand)
 *   drain K MS      queue K kernels of MS ms as fast as admitted, then time how long the device still
 *                   works (launch_ms, drain_ms): the in-flight window bounds drain_ms
 *   probe MS        one MS ms kernel; latency_ms until it completed
 *   check           cuModuleGetFunction of a name the module lacks (unknown=, CUDA_ERROR_NOT_FOUND
 *                   = 500) and cuModuleLoadData of text that is not PTX (badimage=, non-zero)
 * With VGPUKIT_TEST_GATE set, it prints "ready" once initialised and waits for a line on stdin. */
#define _GNU_SOURCE
#include "common.h" /* CHECK, now_ms; its prototypes are not called here: every entry is dlsym'd */

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* PTX ISA 6.0 (CUDA 9 and later drivers) for sm_50: the driver JIT-compiles it for any newer GPU. */
static const char PTX[] = ".version 6.0\n"
                          ".target sm_50\n"
                          ".address_size 64\n"
                          "\n"
                          ".visible .entry spin(\n"
                          "    .param .u64 spin_param_0\n"
                          ")\n"
                          "{\n"
                          "    .reg .pred %p<2>;\n"
                          "    .reg .b64 %rd<5>;\n"
                          "\n"
                          "    ld.param.u64 %rd1, [spin_param_0];\n"
                          "    mov.u64 %rd2, %globaltimer;\n"
                          "$L__spin:\n"
                          "    mov.u64 %rd3, %globaltimer;\n"
                          "    sub.s64 %rd4, %rd3, %rd2;\n"
                          "    setp.lt.u64 %p1, %rd4, %rd1;\n"
                          "    @%p1 bra $L__spin;\n"
                          "    ret;\n"
                          "}\n";

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
static struct {
    CUresult (*init)(unsigned);
    CUresult (*version)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*name)(char *, int, CUdevice);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*setcur)(CUcontext);
    CUresult (*meminfo)(size_t *, size_t *);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*mfree)(CUdeviceptr);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*getf)(CUfunction *, CUmodule, const char *);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*sync)(CUstream);
    CUresult (*ev_create)(CUevent *, unsigned);
    CUresult (*ev_record)(CUevent, CUstream);
    CUresult (*ev_sync)(CUevent);
    CUresult (*ev_elapsed)(float *, CUevent, CUevent);
    launch_fn launch;
} cu;

static void *lib;
static void *sym(const char *name)
{
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "ptxspin: libcuda.so.1 has no %s\n", name);
        exit(4);
    }
    return f;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static CUfunction f;
static CUstream s;
static CUresult spin(double ms)
{
    uint64_t ns = (uint64_t)(ms * 1e6);
    void *params[] = {&ns};
    return cu.launch(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "ptxspin: cannot load libcuda.so.1: %s\n", dlerror());
        return 4;
    }
    cu.init = sym("cuInit"), cu.version = sym("cuDriverGetVersion"), cu.device_get = sym("cuDeviceGet");
    cu.name = sym("cuDeviceGetName"), cu.retain = sym("cuDevicePrimaryCtxRetain");
    cu.setcur = sym("cuCtxSetCurrent"), cu.meminfo = sym("cuMemGetInfo_v2"), cu.alloc = sym("cuMemAlloc_v2");
    cu.mfree = sym("cuMemFree_v2"), cu.load = sym("cuModuleLoadData"), cu.getf = sym("cuModuleGetFunction");
    cu.stream_create = sym("cuStreamCreate"), cu.sync = sym("cuStreamSynchronize");
    cu.ev_create = sym("cuEventCreate"), cu.ev_record = sym("cuEventRecord");
    cu.ev_sync = sym("cuEventSynchronize"), cu.ev_elapsed = sym("cuEventElapsedTime");
    cu.launch = sym("cuLaunchKernel");

    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    CHECK(cu.init(0));
    CHECK(cu.device_get(&dev, 0));
    CHECK(cu.retain(&ctx, dev));
    CHECK(cu.setcur(ctx));
    CHECK(cu.load(&m, PTX));
    CHECK(cu.getf(&f, m, "spin"));
    CHECK(cu.stream_create(&s, 0));
    if (getenv("VGPUKIT_TEST_GATE")) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof(line), stdin))
            return 3;
    }
    const char *mode = argv[1];
    if (!strcmp(mode, "info")) {
        char name[128];
        int version;
        size_t fr, tot;
        CHECK(cu.name(name, sizeof(name), dev));
        CHECK(cu.version(&version));
        CHECK(cu.meminfo(&fr, &tot));
        for (char *c = name; *c; c++)
            if (*c == ' ')
                *c = '_';
        printf("device=%s driver=%d total=%zu free=%zu jit=ok\n", name, version, tot, fr);
    } else if (!strcmp(mode, "time") && argc == 4) {
        int n = atoi(argv[3]);
        double ms = atof(argv[2]), *k = calloc((size_t)n, sizeof(double)), *w = calloc((size_t)n, sizeof(double));
        CUevent a, b;
        CHECK(cu.ev_create(&a, 0));
        CHECK(cu.ev_create(&b, 0));
        CHECK(spin(0)); /* the first launch of a JIT-compiled module loads it on the device */
        CHECK(cu.sync(s));
        for (int i = 0; i < n; i++) {
            float e;
            double t0 = now_ms();
            CHECK(cu.ev_record(a, s));
            CHECK(spin(ms));
            CHECK(cu.ev_record(b, s));
            CHECK(cu.ev_sync(b));
            w[i] = now_ms() - t0;
            CHECK(cu.ev_elapsed(&e, a, b));
            k[i] = e;
        }
        qsort(k, (size_t)n, sizeof(double), cmp);
        qsort(w, (size_t)n, sizeof(double), cmp);
        printf("kernel_ms=%.3f wall_ms=%.3f\n", k[n / 2], w[n / 2]);
    } else if (!strcmp(mode, "cap")) {
        size_t fr, tot;
        CUdeviceptr p, q;
        CHECK(cu.meminfo(&fr, &tot));
        CUresult big = cu.alloc(&p, tot);
        CUresult one = cu.alloc(&q, 1);
        printf("total=%zu free=%zu big=%d one=%d\n", tot, fr, big, one);
        if (big == CUDA_SUCCESS)
            CHECK(cu.mfree(p));
        if (one == CUDA_SUCCESS)
            CHECK(cu.mfree(q));
        CHECK(cu.meminfo(&fr, &tot));
        printf("end_free=%zu\n", fr);
    } else if (!strcmp(mode, "bursts") && argc == 3) {
        int bursts = atoi(argv[2]);
        struct timespec gap = {0, 1000000}, pause = {0, 150000000};
        for (int b = 0; b < bursts; b++) {
            for (int i = 0; i < 20; i++) {
                CHECK(spin(0.2));
                nanosleep(&gap, NULL);
            }
            CHECK(cu.sync(s));
            nanosleep(&pause, NULL);
        }
        printf("launched=%d\n", bursts * 20);
    } else if (!strcmp(mode, "drain") && argc == 4) {
        int k = atoi(argv[2]);
        double ms = atof(argv[3]);
        CHECK(spin(0));
        CHECK(cu.sync(s));
        double t0 = now_ms();
        for (int i = 0; i < k; i++)
            CHECK(spin(ms));
        double t1 = now_ms();
        CHECK(cu.sync(s));
        printf("launch_ms=%.3f drain_ms=%.3f\n", t1 - t0, now_ms() - t1);
    } else if (!strcmp(mode, "probe") && argc == 3) {
        double t0 = now_ms();
        CHECK(spin(atof(argv[2])));
        CHECK(cu.sync(s));
        printf("latency_ms=%.3f\n", now_ms() - t0);
    } else if (!strcmp(mode, "check")) {
        CUfunction g;
        CUmodule bad;
        printf("unknown=%d badimage=%d\n", cu.getf(&g, m, "no_such_kernel"), cu.load(&bad, "not a module"));
    } else
        return 2;
    return 0;
}
