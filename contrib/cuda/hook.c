/* libvgpukit-cuda: resolution and configuration.
 *
 * How programs reach the library (docs/cuda.md):
 *   - programs linked with -lcuda call the exported wrappers (LD_PRELOAD puts them first);
 *   - programs that dlopen libcuda.so.1 and dlsym its functions get the wrappers from this library's
 *     dlsym, which answers the wrapper whenever glibc's dlsym answered the driver's own function;
 *   - the CUDA runtime obtains everything through cuGetProcAddress / cuGetProcAddress_v2 (itself
 *     looked up with dlsym): the wrapped getter asks the driver, and when the driver answers with a
 *     function this library wraps (any ABI version, _ptsz variants included) hands out the wrapper.
 *
 * Configuration: the tenant is VGPUKIT_CUDA_TENANT or VGPUKIT_QOS_TENANT; without one the library
 * passes everything through unchanged. Its directory is VGPUKIT_CUDA_DIR or
 * $VGPUKIT_ROOT/run/vgpukit/cuda/<tenant>, holding "config" (key=value lines: memory, inflight,
 * inflight_ms, gpu, and for memory QoS memory_burst, class, watermark, reclaim_ms; written by the QoS
 * daemon from `vgpukit qos tenant add --memory ...`) and the shared "usage" region.
 * Environment overrides the file: VGPUKIT_CUDA_MEMORY (bytes, or with a K/M/G/T or KiB/MiB/GiB/TiB
 * suffix; a comma list gives one cap per device), VGPUKIT_CUDA_INFLIGHT, VGPUKIT_CUDA_INFLIGHT_MS,
 * VGPUKIT_QOS_GPU (demand notification needs it), VGPUKIT_QOS_SOCKET, VGPUKIT_QOS_IDLE_MS,
 * VGPUKIT_CUDA_PITCH_ALIGN (default 512), VGPUKIT_CUDA_MEMORY_BURST, VGPUKIT_CUDA_CLASS (online|offline),
 * VGPUKIT_CUDA_WATERMARK, VGPUKIT_CUDA_RECLAIM_MS (default 10000).
 */
#define _GNU_SOURCE
#include "../qos-hook/vgpukit_qos.h"
#include "vgpukit_cuda.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define X(n) void *real_##n;
VGC_HOOKS(X)
VGC_USES(X)
#undef X

#define X(n) extern void n(void);
VGC_HOOKS(X)
#undef X

struct hook {
    const char *name;
    void *wrapper;
    void **real;
};
static const struct hook hooks[] = {
#define X(n) {#n, (void *)n, &real_##n},
    VGC_HOOKS(X)
#undef X
};
#define NHOOKS (sizeof(hooks) / sizeof(hooks[0]))

struct vgc_config vgc = {.idle_ns = 20000000LL, .pitch_align = 512, .reclaim_ms = 10000};
int vgc_ready;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static __thread int in_init;
typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym;

CUresult vgc_missing(void) { return CUDA_ERROR_NOT_INITIALIZED; }

/* glibc's own dlsym, found by version so that it is never this library's. */
static void find_dlsym(void)
{
    if (!real_dlsym)
        real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym)
        real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    static const char *const units[] = {"", "K", "M", "G", "T"};
    int shift = -1;
    for (int i = 0; i < 5; i++) {
        size_t n = strlen(units[i]);
        if (strncasecmp(end, units[i], n) == 0 &&
            (!end[n] || strcasecmp(end + n, "B") == 0 || strcasecmp(end + n, "iB") == 0))
            shift = 10 * i;
    }
    if (shift < 0 || (shift && v > (UINT64_MAX >> shift)))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static void set_sizes(uint64_t *per_dev, const char *s)
{
    char buf[512];
    uint64_t v;
    int i = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && i < VGC_MAXDEV; tok = strtok_r(NULL, ",", &save))
        if (parse_size(tok, &v) == 0)
            per_dev[i++] = v;
    for (int last = i - 1; i > 0 && i < VGC_MAXDEV; i++) /* one value (or the last) for the other devices */
        per_dev[i] = per_dev[last];
}

static void set(const char *key, const char *val, char *gpu, size_t gpulen)
{
    uint64_t v;
    if (strcmp(key, "memory") == 0)
        set_sizes(vgc.cap, val);
    else if (strcmp(key, "memory_burst") == 0)
        set_sizes(vgc.burst, val);
    else if (strcmp(key, "class") == 0)
        vgc.cls = strcmp(val, "online") == 0 ? 1 : strcmp(val, "offline") == 0 ? 2 : 0;
    else if (strcmp(key, "watermark") == 0 && parse_size(val, &v) == 0)
        vgc.watermark = v;
    else if (strcmp(key, "reclaim_ms") == 0 && parse_size(val, &v) == 0 && v < 3600000)
        vgc.reclaim_ms = (unsigned)v;
    else if (strcmp(key, "inflight") == 0 && parse_size(val, &v) == 0 && v < 1024)
        vgc.inflight = (unsigned)v;
    else if (strcmp(key, "inflight_ms") == 0 && parse_size(val, &v) == 0 && v < 3600000)
        vgc.inflight_ms = (unsigned)v;
    else if (strcmp(key, "gpu") == 0 && gpu)
        snprintf(gpu, gpulen, "%s", val);
}

static void read_config(const char *dir, char *gpu, size_t gpulen)
{
    char path[4300], line[512];
    snprintf(path, sizeof(path), "%s/config", dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        char *eq = strchr(line, '='), *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (eq && line[0] != '#') {
            *eq = 0;
            set(line, eq + 1, gpu, gpulen);
        }
    }
    fclose(f);
}

static void child(void)
{
    if (vgc.tenant_set) {
        vgc_memory_after_fork();
        vgc_region_after_fork();
    }
}

static void init(void)
{
    const char *e, *tenant = getenv("VGPUKIT_CUDA_TENANT");
    char dir[4200], gpu[160] = "";
    in_init = 1;
    find_dlsym();
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL);
    if (h && real_dlsym) {
#define X(n) real_##n = real_dlsym(h, #n);
        VGC_HOOKS(X)
        VGC_USES(X)
#undef X
    }
    if (!tenant || !*tenant)
        tenant = getenv("VGPUKIT_QOS_TENANT");
    if (tenant && *tenant && !strchr(tenant, '/') && strcmp(tenant, ".") && strcmp(tenant, "..")) {
        if ((e = getenv("VGPUKIT_CUDA_DIR")) && *e)
            snprintf(dir, sizeof(dir), "%s", e);
        else
            snprintf(dir, sizeof(dir), "%s/run/vgpukit/cuda/%s", (e = getenv("VGPUKIT_ROOT")) ? e : "", tenant);
        read_config(dir, gpu, sizeof(gpu));
        static const char *const envs[][2] = {
            {"VGPUKIT_CUDA_MEMORY", "memory"}, {"VGPUKIT_CUDA_MEMORY_BURST", "memory_burst"},
            {"VGPUKIT_CUDA_CLASS", "class"}, {"VGPUKIT_CUDA_WATERMARK", "watermark"},
            {"VGPUKIT_CUDA_RECLAIM_MS", "reclaim_ms"}};
        for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++)
            if ((e = getenv(envs[i][0])))
                set(envs[i][1], e, NULL, 0);
        if ((e = getenv("VGPUKIT_CUDA_INFLIGHT")))
            set("inflight", e, NULL, 0);
        if ((e = getenv("VGPUKIT_CUDA_INFLIGHT_MS")))
            set("inflight_ms", e, NULL, 0);
        if ((e = getenv("VGPUKIT_CUDA_PITCH_ALIGN")) && atoi(e) > 0 && atoi(e) <= 1 << 20)
            vgc.pitch_align = (unsigned)atoi(e);
        if ((e = getenv("VGPUKIT_QOS_IDLE_MS")) && atol(e) > 0)
            vgc.idle_ns = atol(e) * 1000000LL;
        vgc.tenant_set = 1;
        /* Directories of a tenant are created by vgpukit; a process only makes its own leaf. */
        vgc_region_open(dir);
        vgc.demand = vgpukit_qos_init(NULL, getenv("VGPUKIT_QOS_GPU") ? NULL : (gpu[0] ? gpu : NULL), tenant) == 0;
        vgc_launch_setup();
        snprintf(vgc.dir, sizeof(vgc.dir), "%s", dir);
        vgc_burst_setup();
        pthread_atfork(NULL, NULL, child);
    }
    in_init = 0;
    __atomic_store_n(&vgc_ready, 1, __ATOMIC_RELEASE);
}

void vgc_init_slow(void)
{
    if (!in_init)
        pthread_once(&once, init);
}

void *vgc_wrapper_of(void *real)
{
    for (size_t i = 0; real && i < NHOOKS; i++)
        if (*hooks[i].real == real)
            return hooks[i].wrapper;
    return real;
}

/* glibc's dlsym, for this library's own lookups and its dlsym wrapper (getproc.c). */
void *vgc_real_dlsym(void *handle, const char *symbol)
{
    find_dlsym();
    return real_dlsym ? real_dlsym(handle, symbol) : NULL;
}

int vgc_in_init(void) { return in_init; }
