// pipeprop/kernels/register_kernel.hpp: PIPEPROP_REGISTER_KERNEL, the attributes every register-blocked kernel
// (simd_gemm_blocks.hpp, simd_gemm.hpp, simd_gemv.hpp, shifted_gemm.hpp) is declared with: never inlined and, with
// GCC, never cloned. Inlined into its large callers, GCC 12 kept the kernels' loaded vectors on the stack (half the
// speed at 6 x 2 and 8 x 2 blocks, AVX-512); cloned for a caller's constant arguments (simd_gemm_nt's packed panels),
// it kept one B vector on the stack (62 against 98 GFLOP/s, AVX2; bench/README.md, "GEMM kernels never cloned").
// Clang has no noclone attribute (and would warn about it), so there only noinline. Neither changes arithmetic.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
/// Never inline, never clone the next function (GCC).
#define PIPEPROP_REGISTER_KERNEL [[gnu::noinline, gnu::noclone]]
#else
/// Never inline the next function (Clang and other compilers that know the gnu:: attributes).
#define PIPEPROP_REGISTER_KERNEL [[gnu::noinline]]
#endif
