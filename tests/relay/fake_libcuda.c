/* A stand-in for the CUDA driver (libcuda.so.1) for testing the C API of exported CUDA models on
 * machines without a GPU (tests/relay/test_model_capi_cuda.py): memory is host memory, a kernel
 * launch is written to the log ($TC_FAKE_CUDA_LOG) with its grid, block, shared memory and each
 * argument as "A<allocation>+<offset>" (the argument counts come from $TC_FAKE_CUDA_ARGS, lines
 * "kernel count"); copies are logged with an FNV-1a hash of their bytes. $TC_FAKE_CUDA_INIT makes
 * cuInit fail with that code; $TC_FAKE_CUDA_CC is the compute capability (default 90). */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ALLOC 256
static char *allocs[MAX_ALLOC];
static size_t sizes[MAX_ALLOC];
static int n_alloc;
static FILE *logf;

static FILE *lg(void) {
    if (!logf) { const char *p = getenv("TC_FAKE_CUDA_LOG"); logf = fopen(p ? p : "/dev/null", "w"); }
    return logf;
}
static uint64_t fnv(const void *data, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= ((const unsigned char *)data)[i]; h *= 1099511628211ull; }
    return h;
}
static void where(CUdeviceptr p, char *out, size_t n) {
    for (int k = 0; k < n_alloc; k++)
        if (allocs[k] && (char *)p >= allocs[k] && (char *)p < allocs[k] + sizes[k]) {
            snprintf(out, n, "A%d+%lld", k, (long long)((char *)p - allocs[k])); return; }
    snprintf(out, n, "?%llx", (unsigned long long)p);
}

CUresult cuInit(unsigned int flags) { const char *e = getenv("TC_FAKE_CUDA_INIT"); (void)flags; return e ? atoi(e) : 0; }
CUresult cuDeviceGetCount(int *count) { *count = 1; return 0; }
CUresult cuDeviceGet(CUdevice *dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? 0 : CUDA_ERROR_INVALID_DEVICE; }
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev) {
    const char *e = getenv("TC_FAKE_CUDA_CC"); int cc = e ? atoi(e) : 90; (void)dev;
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? cc / 10 : cc % 10; return 0; }
static int ctx_token;
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) { (void)dev; *ctx = (CUcontext)&ctx_token; fprintf(lg(), "retain\n"); return 0; }
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { (void)dev; fprintf(lg(), "release\n"); return 0; }
CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx == (CUcontext)&ctx_token ? 0 : CUDA_ERROR_INVALID_CONTEXT; }
CUresult cuCtxPopCurrent(CUcontext *ctx) { *ctx = (CUcontext)&ctx_token; return 0; }
static int module_token;
CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    fprintf(lg(), "load %s\n", memcmp(image, "\177ELF", 4) == 0 ? "elf" : "not-elf");
    *m = (CUmodule)&module_token; return 0; }
CUresult cuModuleUnload(CUmodule m) { (void)m; fprintf(lg(), "unload\n"); return 0; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) { (void)m; *f = (CUfunction)strdup(name); return 0; }
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    fprintf(lg(), "attribute %s %d %d\n", (const char *)f, (int)a, v); return 0; }
CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
    if (n_alloc == MAX_ALLOC) return CUDA_ERROR_OUT_OF_MEMORY;
    allocs[n_alloc] = malloc(n); sizes[n_alloc] = n; memset(allocs[n_alloc], 0xFF, n);
    *p = (CUdeviceptr)allocs[n_alloc]; fprintf(lg(), "alloc A%d %zu\n", n_alloc, n); n_alloc++; return 0; }
CUresult cuMemFree(CUdeviceptr p) {
    for (int k = 0; k < n_alloc; k++) if ((CUdeviceptr)allocs[k] == p) { fprintf(lg(), "free A%d\n", k); free(allocs[k]); allocs[k] = NULL; return 0; }
    return CUDA_ERROR_INVALID_VALUE; }
CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
    char w[64]; where(dst, w, sizeof w); memcpy((void *)dst, src, n);
    fprintf(lg(), "htod %s %zu %llu\n", w, n, (unsigned long long)fnv(src, n)); return 0; }
CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
    char w[64]; where(src, w, sizeof w); memcpy(dst, (void *)src, n); fprintf(lg(), "dtoh %s %zu\n", w, n); return 0; }
static int nargs_of(const char *name) {
    const char *path = getenv("TC_FAKE_CUDA_ARGS"); char k[256]; int n;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return 0;
    while (fscanf(f, "%255s %d", k, &n) == 2) if (strcmp(k, name) == 0) { fclose(f); return n; }
    fclose(f); return 0;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void **params, void **extra) {
    (void)s; (void)extra;
    const char *name = (const char *)f;
    fprintf(lg(), "launch %s %u %u %u %u %u %u %u", name, gx, gy, gz, bx, by, bz, smem);
    for (int a = 0, n = nargs_of(name); a < n; a++) { char w[64]; where(*(CUdeviceptr *)params[a], w, sizeof w); fprintf(lg(), " %s", w); }
    fprintf(lg(), "\n"); fflush(lg()); return 0; }
CUresult cuGetErrorName(CUresult rc, const char **s) { *s = rc == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_FAKE"; return 0; }
