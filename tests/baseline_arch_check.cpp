// tests/baseline_arch_check.cpp: compiled into every <test>_baseline program (tests/hardening.cmake) so that the
// baseline variant fails to build, instead of silently testing an FMA target, if its flags ever gain FMA or AVX
// (e.g. a -march=native appended by a toolchain file).
#if defined(__FMA__) || defined(__FMA4__) || defined(__AVX__)
#error "the baseline-architecture test variant must be compiled without FMA and AVX (-march=x86-64-v2)"
#endif
