/* A runtime-style program:   runtime MODE BURSTS
 * It never calls an exported driver symbol: it dlopens libcuda.so.1 and resolves every entry point
 * the way the CUDA runtime does. MODE getproc: dlsym the CUDA 12 getter cuGetProcAddress_v2, ask it
 * for "cuGetProcAddress" and resolve everything else through that (base names, version 12040);
 * getproc1: the CUDA 11 getter (version 11080); ptsz: as getproc with the per-thread-default-stream flag;
 * dlsym: dlsym every (versioned) name on the handle. Allocates the whole reported total, then 1 more
 * byte (expects OUT_OF_MEMORY under a cap), then launches BURSTS bursts of 20 kernels. */
#define _GNU_SOURCE
#include "emu.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, int *);
static void *lib;
static const char *mode;
static gpa2_fn gpa2;
static gpa1_fn gpa1;

static void *get(const char *base, const char *versioned)
{
    void *f = NULL;
    int st;
    CUresult r;
    if (!strcmp(mode, "dlsym"))
        f = dlsym(lib, versioned);
    else if (!strcmp(mode, "getproc1"))
        r = gpa1(base, &f, 11080, 0), (void)r;
    else
        r = gpa2(base, &f, 12040, !strcmp(mode, "ptsz") ? 2 : 0, &st), (void)r;
    if (!f) {
        fprintf(stderr, "cannot resolve %s\n", base);
        exit(3);
    }
    return f;
}

int main(int argc, char **argv)
{
    mode = argc > 1 ? argv[1] : "getproc";
    int bursts = argc > 2 ? atoi(argv[2]) : 2;
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) return 4;
    if (!strcmp(mode, "getproc1")) {
        gpa1 = (gpa1_fn)dlsym(lib, "cuGetProcAddress");
    } else if (strcmp(mode, "dlsym")) {
        gpa2_fn boot = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
        int st;
        if (!boot || boot("cuGetProcAddress", (void **)&gpa2, 12040, 0, &st) != CUDA_SUCCESS) return 5;
    }
    CUresult (*init)(unsigned) = get("cuInit", "cuInit");
    CUresult (*retain)(CUcontext *, CUdevice) = get("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = get("cuCtxSetCurrent", "cuCtxSetCurrent");
    CUresult (*info)(size_t *, size_t *) = get("cuMemGetInfo", "cuMemGetInfo_v2");
    CUresult (*alloc)(CUdeviceptr *, size_t) = get("cuMemAlloc", "cuMemAlloc_v2");
    CUresult (*mfree)(CUdeviceptr) = get("cuMemFree", "cuMemFree_v2");
    CUresult (*aasync)(CUdeviceptr *, size_t, CUstream) = get("cuMemAllocAsync", "cuMemAllocAsync");
    CUresult (*fasync)(CUdeviceptr, CUstream) = get("cuMemFreeAsync", "cuMemFreeAsync");
    CUresult (*load)(CUmodule *, const void *) = get("cuModuleLoadData", "cuModuleLoadData");
    CUresult (*getf)(CUfunction *, CUmodule, const char *) = get("cuModuleGetFunction", "cuModuleGetFunction");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = get("cuLaunchKernel", "cuLaunchKernel");
    CUresult (*sync)(CUstream) = get("cuStreamSynchronize", "cuStreamSynchronize");
    CUcontext ctx;
    CUmodule m;
    CUfunction f;
    CUdeviceptr p, q, r;
    size_t fr, tot;
    if (init(0) || retain(&ctx, 0) || setcur(ctx) || info(&fr, &tot) || load(&m, "") || getf(&f, m, "spin")) return 6;
    CUresult big = alloc(&p, tot);
    CUresult over = aasync(&q, 1, NULL);
    CUresult one = alloc(&r, 1);
    printf("total=%zu big=%d over=%d one=%d\n", tot, big, over, one);
    if (big == CUDA_SUCCESS) mfree(p);
    if (over == CUDA_SUCCESS) fasync(q, NULL);
    if (one == CUDA_SUCCESS) mfree(r);
    uint64_t ns = 200000;
    void *params[] = {&ns};
    struct timespec gap = {0, 1000000}, pause = {0, 150000000};
    for (int b = 0; b < bursts; b++) {
        for (int i = 0; i < 20; i++) {
            if (launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)) return 7;
            nanosleep(&gap, NULL);
        }
        sync(NULL);
        nanosleep(&pause, NULL);
    }
    printf("launched=%d\n", bursts * 20);
    return 0;
}
