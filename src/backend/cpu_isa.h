/* zerosim — the CPU backend's instruction sets (internal to cpu.c and
 * cpu_llama.c).
 *
 * The element-wise kernels (and attention's softmax loops) are compiled three
 * times on x86-64: for the baseline (SSE2), for AVX2 and for AVX-512F; the
 * backend picks the widest that the CPU has when it starts. The wider
 * vectors do the same IEEE operations on each element as the baseline code:
 * none of these targets lets the compiler fuse a multiply and an add (the
 * build sets -ffp-contract=off), and no float sum is vectorised (that would
 * reorder it; only -ffast-math allows it), so the three give the same bytes.
 * tests/check_kernels runs every kernel in each set this CPU has and
 * compares the bytes. ZEROSIM_CPU_KERNELS=sse2|avx2|avx512 chooses one
 * (auto, the default: the widest). Elsewhere each kernel is compiled once.
 *
 * A kernel is written as NAME_body (ZS_CPU_BODY, inlined into each set's
 * copy) followed by ZS_CPU_KERNEL(NAME, (params), (args)), which defines the
 * static function NAME that dispatches on zs_cpu_isa; ZS_CPU_KERNEL_EXTERN
 * defines it with external linkage, for a kernel that cpu.c's table takes
 * from another file (declared in cpu_llama.h).
 */
#ifndef ZEROSIM_CPU_ISA_H
#define ZEROSIM_CPU_ISA_H

enum { ZS_CPU_SSE2, ZS_CPU_AVX2, ZS_CPU_AVX512 };
/* The set the kernels run in; set by zs_backend_cpu_init (cpu.c). */
extern int zs_cpu_isa;

/* a kernel's body, inlined into each instruction set's copy */
#define ZS_CPU_BODY static inline __attribute__((always_inline)) void

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ZS_CPU_HAVE_ISAS 1
#define ZS_CPU_KERNEL_LINKED(linkage, name, params, args)                         \
    __attribute__((target("avx512f"))) static void name##_avx512 params          \
    {                                                                             \
        name##_body args;                                                         \
    }                                                                             \
    __attribute__((target("avx2"))) static void name##_avx2 params               \
    {                                                                             \
        name##_body args;                                                         \
    }                                                                             \
    linkage void name params                                                      \
    {                                                                             \
        if (zs_cpu_isa == ZS_CPU_AVX512)                                          \
            name##_avx512 args;                                                   \
        else if (zs_cpu_isa == ZS_CPU_AVX2)                                       \
            name##_avx2 args;                                                     \
        else                                                                      \
            name##_body args;                                                     \
    }
#else
#define ZS_CPU_HAVE_ISAS 0
#define ZS_CPU_KERNEL_LINKED(linkage, name, params, args)                         \
    linkage void name params                                                      \
    {                                                                             \
        name##_body args;                                                         \
    }
#endif
#define ZS_CPU_KERNEL(name, params, args) ZS_CPU_KERNEL_LINKED(static, name, params, args)
#define ZS_CPU_KERNEL_EXTERN(name, params, args) ZS_CPU_KERNEL_LINKED(, name, params, args)

#endif
