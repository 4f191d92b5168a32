/* The memory QoS scenario for a real GPU without a toolkit (docs/cuda.md, "Memory QoS"):   memreal MODE ...
 *
 * Like ptxspin it dlopens libcuda.so.1 (the driver's, or the emulator's when that is first on the library
 * path) and JIT-compiles its PTX kernel: touch(ns, ptr, bytes) reads and rewrites every 32-bit word of a
 * buffer with a grid-stride loop (ns is for the emulator, which runs a kernel that long). Commands on
 * stdin, one per line, as memqos.c:
 *   info                 free= total= of device 0 (no stdin)
 *   offline SIZE N       N buffers (cuMemAlloc_v2), filled; "held"; touch rounds "it=I ms=WALL";
 *                        "check" -> "intact=0|1"; "quit"
 *   online SIZE N        "ready"; "go": N allocations "alloc=I ns=NS rc=RC", "allocated=K"; "free" ->
 *                        "freed"; "quit"
 *   ckpt SIZE            a cuMemAlloc_v2 and a cuMemAllocManaged buffer, filled; "held"; "check" */
#define _GNU_SOURCE
#include "common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static const char PTX[] = ".version 6.0\n"
                          ".target sm_50\n"
                          ".address_size 64\n"
                          ".visible .entry touch(.param .u64 p_ns, .param .u64 p_ptr, .param .u64 p_n)\n"
                          "{\n"
                          "    .reg .pred %p<2>;\n"
                          "    .reg .b32 %r<8>;\n"
                          "    .reg .b64 %rd<8>;\n"
                          "    ld.param.u64 %rd1, [p_ptr];\n"
                          "    ld.param.u64 %rd2, [p_n];\n"
                          "    shr.u64 %rd2, %rd2, 2;\n"
                          "    mov.u32 %r1, %ctaid.x;\n"
                          "    mov.u32 %r2, %ntid.x;\n"
                          "    mov.u32 %r3, %tid.x;\n"
                          "    mad.lo.s32 %r4, %r1, %r2, %r3;\n"
                          "    cvt.u64.u32 %rd3, %r4;\n"
                          "    mov.u32 %r5, %nctaid.x;\n"
                          "    mul.lo.s32 %r5, %r5, %r2;\n"
                          "    cvt.u64.u32 %rd4, %r5;\n"
                          "$L_loop:\n"
                          "    setp.ge.u64 %p1, %rd3, %rd2;\n"
                          "    @%p1 bra $L_done;\n"
                          "    shl.b64 %rd5, %rd3, 2;\n"
                          "    add.s64 %rd6, %rd1, %rd5;\n"
                          "    ld.global.u32 %r6, [%rd6];\n"
                          "    st.global.u32 [%rd6], %r6;\n"
                          "    add.s64 %rd3, %rd3, %rd4;\n"
                          "    bra $L_loop;\n"
                          "$L_done:\n"
                          "    ret;\n"
                          "}\n";

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*setcur)(CUcontext);
    CUresult (*meminfo)(size_t *, size_t *);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned);
    CUresult (*mfree)(CUdeviceptr);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*getf)(CUfunction *, CUmodule, const char *);
    CUresult (*sync)(CUstream);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **);
} cu;
static void *lib;
static void *sym(const char *name)
{
    void *f = dlsym(lib, name);
    if (!f)
        fprintf(stderr, "memreal: libcuda.so.1 has no %s\n", name), exit(4);
    return f;
}

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
static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t j = 0; j < n; j++)
        b[j] = (unsigned char)(seed * 131u + j * 7u + (j >> 12));
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule m;
    CUfunction touch;
    CUdeviceptr ps[64];
    char c[64];
    pthread_t t;
    if (argc < 2 || !(lib = dlopen("libcuda.so.1", RTLD_NOW)))
        return 4;
    cu.init = sym("cuInit"), cu.device_get = sym("cuDeviceGet"), cu.retain = sym("cuDevicePrimaryCtxRetain");
    cu.setcur = sym("cuCtxSetCurrent"), cu.meminfo = sym("cuMemGetInfo_v2"), cu.alloc = sym("cuMemAlloc_v2");
    cu.managed = sym("cuMemAllocManaged"), cu.mfree = sym("cuMemFree_v2"), cu.htod = sym("cuMemcpyHtoD_v2");
    cu.dtoh = sym("cuMemcpyDtoH_v2"), cu.load = sym("cuModuleLoadData"), cu.getf = sym("cuModuleGetFunction");
    cu.sync = sym("cuStreamSynchronize"), cu.launch = sym("cuLaunchKernel");
    CHECK(cu.init(0));
    CHECK(cu.device_get(&dev, 0));
    CHECK(cu.retain(&ctx, dev));
    CHECK(cu.setcur(ctx));
    CHECK(cu.load(&m, PTX));
    CHECK(cu.getf(&touch, m, "touch"));
    const char *mode = argv[1];
    if (!strcmp(mode, "info")) {
        size_t fr, tot;
        CHECK(cu.meminfo(&fr, &tot));
        printf("free=%zu total=%zu\n", fr, tot);
        return 0;
    }
    if (argc < 3)
        return 2;
    size_t n = strtoull(argv[2], NULL, 10);
    int count = argc > 3 ? atoi(argv[3]) : 1;
    if (count > 64)
        count = 64;
    unsigned char *a = malloc(n), *b = malloc(n);
    pthread_create(&t, NULL, reader, NULL);
    if (!strcmp(mode, "online")) {
        int got = 0;
        printf("ready\n");
        fflush(stdout);
        for (next(c, 1); strcmp(c, "go"); next(c, 1))
            if (!strcmp(c, "quit"))
                return 0;
        for (int i = 0; i < count; i++) {
            double t0 = now_ms();
            CUresult r = cu.alloc(&ps[got], n);
            printf("alloc=%d ns=%.0f rc=%d\n", i, (now_ms() - t0) * 1e6, r);
            fflush(stdout);
            got += r == CUDA_SUCCESS;
        }
        printf("allocated=%d\n", got);
        fflush(stdout);
        for (next(c, 1); strcmp(c, "free") && strcmp(c, "quit"); next(c, 1))
            ;
        for (int i = 0; i < got; i++)
            cu.mfree(ps[i]);
        printf("freed\n");
        fflush(stdout);
        for (next(c, 1); strcmp(c, "quit"); next(c, 1))
            ;
        return 0;
    }
    int ckpt = !strcmp(mode, "ckpt");
    if (ckpt) {
        CHECK(cu.alloc(&ps[0], n));
        CHECK(cu.managed(&ps[1], n, 1));
        count = 2;
    } else {
        for (int i = 0; i < count; i++)
            CHECK(cu.alloc(&ps[i], n));
    }
    for (int i = 0; i < count; i++) {
        fill(a, n, (unsigned)i + 1);
        CHECK(cu.htod(ps[i], a, n));
    }
    printf("held pid=%d\n", (int)getpid());
    fflush(stdout);
    uint64_t ns = 2000000;
    for (int it = 0;; it++) {
        next(c, ckpt);
        if (!strcmp(c, "quit"))
            return 0;
        if (!strcmp(c, "check")) {
            int ok = 1;
            for (int i = 0; i < count; i++) {
                fill(a, n, (unsigned)i + 1);
                ok &= cu.dtoh(b, ps[i], n) == CUDA_SUCCESS && memcmp(a, b, n) == 0;
            }
            printf("intact=%d\n", ok);
            fflush(stdout);
        }
        if (!ckpt) {
            double t0 = now_ms();
            for (int i = 0; i < count; i++) {
                uint64_t bytes = n;
                void *params[] = {&ns, &ps[i], &bytes};
                CHECK(cu.launch(touch, 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
                CHECK(cu.sync(NULL));
            }
            printf("it=%d ms=%.2f\n", it, now_ms() - t0);
            fflush(stdout);
        }
    }
}
