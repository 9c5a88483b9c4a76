// tests/x86_64_v3_arch_check.cpp: compiled into test_simd_gemm_x86_64_v3 (tests/kernels_x86_64_v3.cmake). Refuses
// to build without AVX2 + FMA or with AVX-512 (then the program would not test the AVX2 kernels), and skips the
// program (exit 77, ctest's SKIP_RETURN_CODE) on a CPU that cannot run AVX2 + FMA code, before any test runs.
#if !defined(__AVX2__) || !defined(__FMA__) || defined(__AVX512F__)
#error "test_simd_gemm_x86_64_v3 must be compiled for AVX2 + FMA without AVX-512 (-march=x86-64-v3)"
#endif

#include <cstdio>
#include <cstdlib>

namespace {
// Runs during static initialization, before main and the tests (__builtin_cpu_supports only reads cpuid).
const bool cpu_checked = [] {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        std::fprintf(stderr, "test_simd_gemm_x86_64_v3: this CPU has no AVX2 + FMA; skipped\n");
        std::exit(77);
    }
    return true;
}();
}  // namespace
