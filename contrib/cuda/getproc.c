/* The entry points through which programs find driver functions at run time (see hook.c). */
#define _GNU_SOURCE
#include "vgpukit_cuda.h"

#include <stddef.h>
#include <string.h>

EXPORT void *dlsym(void *handle, const char *symbol)
{
    void *r = vgc_real_dlsym(handle, symbol);
    if (r && symbol && !strncmp(symbol, "nvmlDeviceGetMemoryInfo", 23) && !vgc_in_init())
        return vgc_nvml_dlsym(handle, symbol, r);
    if (!r || !symbol || symbol[0] != 'c' || symbol[1] != 'u' || vgc_in_init())
        return r;
    vgc_init();
    return vgc_wrapper_of(r);
}

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, int *);
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    vgc_init();
    CUresult r = REAL(cuGetProcAddress, gpa_fn)(symbol, pfn, version, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = vgc_wrapper_of(*pfn);
    return r;
}
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status)
{
    vgc_init();
    CUresult r = REAL(cuGetProcAddress_v2, gpa2_fn)(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = vgc_wrapper_of(*pfn);
    return r;
}
