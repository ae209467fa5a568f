/* An independent check of `switchyard bench`'s read-bandwidth probe: OpenMP threads
 * sum a 1 GiB array of 64-bit integers (every page written first; integer adds, so
 * the compiler vectorizes the reduction and the loop waits on loads, not on an add
 * chain), best of PASSES timed passes after a warm-up, once in 4 KiB pages and once
 * in 2 MiB pages (`madvise(MADV_HUGEPAGE)`, as the probe and the packed weights ask),
 * and also run STREAM's triad (a = b + s*c over three 1 GiB arrays, counted as STREAM
 * counts it: 24 bytes per element).
 *
 *   gcc -O3 -march=native -fopenmp scripts/read-bandwidth.c -o /tmp/read-bandwidth
 *   OMP_NUM_THREADS=2 OMP_PROC_BIND=spread /tmp/read-bandwidth
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define BYTES (1UL << 30)
#define N (BYTES / sizeof(double))
#define PASSES 7
#define HUGE (2UL << 20)

static double best_read(const uint64_t *a) {
    double best = 0;
    uint64_t sink = 0;
    for (int pass = 0; pass <= PASSES; pass++) {
        uint64_t sum = 0;
        double t0 = omp_get_wtime();
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
        for (size_t i = 0; i < N; i++) sum += a[i];
        double gb_s = BYTES / (omp_get_wtime() - t0) / 1e9;
        sink += sum;
        if (pass > 0 && gb_s > best) best = gb_s;
    }
    if (sink == 42) puts("");
    return best;
}

static double best_triad(double *a, const double *b, const double *c) {
    double best = 0;
    for (int pass = 0; pass <= PASSES; pass++) {
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) a[i] = b[i] + 3.0 * c[i];
        double gb_s = 3.0 * BYTES / (omp_get_wtime() - t0) / 1e9;
        if (pass > 0 && gb_s > best) best = gb_s;
    }
    return best;
}

int main(void) {
    double *a = malloc(BYTES), *b = malloc(BYTES), *c = malloc(BYTES);
    if (!a || !b || !c) {
        fprintf(stderr, "error: cannot allocate 3 GiB\n");
        return 1;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) a[i] = b[i] = c[i] = (double)i;
    double read[2];
    for (int huge = 0; huge < 2; huge++) {
        uint64_t *r = aligned_alloc(HUGE, BYTES);
        if (!r) {
            fprintf(stderr, "error: cannot allocate 1 GiB\n");
            return 1;
        }
        if (huge) madvise(r, BYTES, MADV_HUGEPAGE);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) r[i] = i;
        read[huge] = best_read(r);
        free(r);
    }
    printf("threads %d, 1 GiB arrays, best of %d passes: read %.1f GB/s (2 MiB pages %.1f), "
           "triad %.1f GB/s\n",
           omp_get_max_threads(), PASSES, read[0], read[1], best_triad(a, b, c));
    free(a);
    free(b);
    free(c);
    return 0;
}
