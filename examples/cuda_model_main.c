/* Run a model exported for the GPU from C (see examples/cuda_model_capi.py, docs/relay.md "The C
 * API of a CUDA model"): read input 0 from a file, run the model twice, write output 0 to a file.
 *     gcc cuda_model_main.c -DMODEL_HEADER='"net.h"' -I. -L. -lnet -Wl,-rpath,$PWD -o main && ./main x.bin y.bin */
#include <stdio.h>
#include <stdlib.h>
#include MODEL_HEADER

static void *read_file(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END); *n = ftell(f); rewind(f);
    void *p = malloc(*n);
    if (fread(p, 1, *n, f) != (size_t)*n) { fclose(f); free(p); return NULL; }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s input.bin output.bin\n", argv[0]); return 2; }
    long n = 0;
    void *x = read_file(argv[1], &n);
    if (!x) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
    tilecraft_model *m = tilecraft_model_create();
    if (!m) { printf("error: %s\n", tilecraft_model_error()); return 1; }
    printf("input '%s' %s, %lld bytes\n", tilecraft_model_input_name(0), tilecraft_model_input_dtype(0),
           (long long)tilecraft_model_input_nbytes(0));
    if (tilecraft_model_set_input(m, 0, x, n) != 0) { printf("error: %s\n", tilecraft_model_error()); return 1; }
    for (int rep = 0; rep < 2; rep++)
        if (tilecraft_model_run(m) != 0) { printf("error: %s\n", tilecraft_model_error()); return 1; }
    int64_t nb = tilecraft_model_output_nbytes(0);
    void *y = malloc(nb);
    if (tilecraft_model_get_output(m, 0, y, nb) != 0) { printf("error: %s\n", tilecraft_model_error()); return 1; }
    FILE *f = fopen(argv[2], "wb");
    fwrite(y, 1, nb, f);
    fclose(f);
    tilecraft_model_free(m);
    printf("ok\n");
    return 0;
}
