/* What the cores issue a second: the clock under load (a chain of dependent integer
 * adds, one a cycle) and how many of the packed kernels' AVX2 and FMA instructions
 * retire a cycle, alone and in pairs (twelve independent register chains, so latency
 * never limits), on every thread at once. With a kernel's instruction count per block
 * this gives its limit in multiply-adds a second (docs/benchmarks.md, "Batched decode
 * against the products' multiply-add rate"). x86-64 with AVX2 and FMA only.
 *
 *   gcc -O2 -mavx2 -mfma -pthread scripts/issue-rates.c -o /tmp/issue-rates
 *   /tmp/issue-rates [threads]        (default 2)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LOOPS 100000000L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Four dependent register adds an iteration: the loop runs at one add a cycle. Adds of
 * an immediate would not do: Intel's cores from Golden Cove on fold chains of them at
 * rename (on the 2026-12-07 Intel host they "ran" at 13.7 GHz). */
static void *adds(void *arg) {
    long x = (long)arg, one = 1;
    for (long i = 0; i < LOOPS; i++)
        __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                         : "+r"(x)
                         : "r"(one));
    return (void *)x;
}

/* One instruction `a` (odd chains: `b`) on twelve independent ymm chains. */
#define ONE(op, r) op " %%ymm15, %%ymm" #r ", %%ymm" #r "\n\t"
#define TWELVE(a, b)                                                                      \
    ONE(a, 0) ONE(b, 1) ONE(a, 2) ONE(b, 3) ONE(a, 4) ONE(b, 5) ONE(a, 6) ONE(b, 7)       \
    ONE(a, 8) ONE(b, 9) ONE(a, 10) ONE(b, 11)
#define CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                 "xmm9", "xmm10", "xmm11"
#define MIX(name, a, b)                                                                   \
    static void *name(void *arg) {                                                        \
        for (long i = 0; i < LOOPS; i++) __asm__ volatile(TWELVE(a, b)::: CLOBBERS);      \
        return arg;                                                                       \
    }
MIX(maddubs, "vpmaddubsw", "vpmaddubsw")
MIX(maddwd, "vpmaddwd", "vpmaddwd")
MIX(signb, "vpsignb", "vpsignb")
MIX(fmadd, "vfmadd231ps", "vfmadd231ps")
MIX(mulps, "vmulps", "vmulps")
MIX(paddw, "vpaddw", "vpaddw")
MIX(maddubs_maddwd, "vpmaddubsw", "vpmaddwd")
MIX(maddubs_fmadd, "vpmaddubsw", "vfmadd231ps")
MIX(maddubs_paddw, "vpmaddubsw", "vpaddw")

/* Seconds for `threads` threads each running `f` once. */
static double timed(void *(*f)(void *), int threads) {
    pthread_t t[64];
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, f, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return now() - t0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "error: threads must be 1 to 64, got %s\n", argv[1]);
        return 2;
    }
    double ghz = 4.0 * LOOPS / timed(adds, threads) / 1e9;
    printf("%d threads; clock under load %.2f GHz (dependent adds)\n", threads, ghz);
    struct {
        const char *name;
        void *(*f)(void *);
    } mixes[] = {
        {"vpmaddubsw", maddubs},          {"vpmaddwd", maddwd},
        {"vpsignb", signb},               {"vfmadd231ps", fmadd},
        {"vmulps", mulps},                {"vpaddw", paddw},
        {"vpmaddubsw + vpmaddwd", maddubs_maddwd},
        {"vpmaddubsw + vfmadd231ps", maddubs_fmadd},
        {"vpmaddubsw + vpaddw", maddubs_paddw},
    };
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        double per_ns = 12.0 * LOOPS / timed(mixes[m].f, threads) / 1e9;
        printf("%-26s %.2f a cycle per thread\n", mixes[m].name, per_ns / ghz);
    }
    return 0;
}
