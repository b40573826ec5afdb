/* Calling a library exported by tilecraft from C.
 *
 * examples/export_c_library.py writes libnearest.so and nearest.h into a folder DIR, then:
 *
 *     gcc -O2 examples/nearest.c -IDIR -LDIR -lnearest -Wl,-rpath,DIR -o nearest_demo
 *     ./nearest_demo < input.txt
 *
 * Input on stdin: "n m d", then the n*d coordinates of the points x, then the m*d of the points y.
 * Output: the n squared distances from each x to its nearest y, on one line. Then the program
 * asks for a problem whose scratch distance matrix (4 GiB) cannot fit under a memory limit, and
 * prints the status and message it gets back: every function returns 0 or a TILECRAFT_ERR_*
 * code, and nearest_last_error() says what went wrong (per thread, like errno).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "nearest.h"

static float *read_floats(long count) {
    float *v = malloc(sizeof(float) * count);
    for (long i = 0; v && i < count; i++)
        if (scanf("%f", &v[i]) != 1) { free(v); return NULL; }
    return v;
}

/* Allow this process at most `extra` more bytes of address space than it uses now. */
static void limit_memory(unsigned long extra) {
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) { if (fscanf(f, "%lu", &pages) != 1) pages = 0; fclose(f); }
    struct rlimit limit = {pages * 4096UL + extra, RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &limit);
}

int main(void) {
    int n, m, d;
    if (scanf("%d %d %d", &n, &m, &d) != 3 || n < 1 || m < 1 || d < 1) {
        fprintf(stderr, "expected 'n m d' and then the points\n");
        return 2;
    }
    float *x = read_floats((long)n * d), *y = read_floats((long)m * d), *out = malloc(sizeof(float) * n);
    if (!x || !y || !out) {
        fprintf(stderr, "could not read %d + %d points of %d coordinates\n", n, m, d);
        return 2;
    }
    tilecraft_num_threads = 2;          /* threads of parallel loops; 0 (default): OpenMP's choice */

    /* 1. A call that works. The scalar arguments are the shapes, in the header's order. */
    int32_t status = nearest(x, y, out, n, d, m);
    if (status != TILECRAFT_OK) {
        fprintf(stderr, "nearest failed with status %d: %s\n", status, nearest_last_error());
        return 1;
    }
    for (int i = 0; i < n; i++) printf("%.9g%s", out[i], i + 1 < n ? " " : "\n");

    /* 2. A call that fails: 32768 x 32768 distances need 4 GiB, and this process may now use
     * only 1 GiB more than it does. The function returns before touching its arguments. */
    const int big = 32768;
    float *bx = calloc(big, sizeof(float)), *by = calloc(big, sizeof(float)), *bout = calloc(big, sizeof(float));
    limit_memory(1UL << 30);
    status = nearest(bx, by, bout, big, 1, big);
    printf("status %d: %s\n", status, status == TILECRAFT_OK ? "ok" : nearest_last_error());
    free(x); free(y); free(out); free(bx); free(by); free(bout);
    return status == TILECRAFT_ERR_OUT_OF_MEMORY ? 0 : 1;
}
