// pipeprop/kernels/unroll.hpp: PIPEPROP_UNROLL, placed before a loop whose trip count is a compile-time constant of
// at most 16 (a register block's rows or vectors), asks the compiler to unroll it completely at every optimization
// level. The register-blocked kernels (simd_gemm_blocks.hpp, simd_gemm.hpp, simd_gemv.hpp, shifted_gemm.hpp) keep
// their accumulators in std::array<batch, N>: unrolled, every element is a register; not unrolled, GCC 12 at -O2
// (which unrolls completely only small loops, unlike -O3) indexes the arrays in memory and the kernels ran at a third
// of their -O3 speed (bench/README.md, "GEMM kernels at -O2"). Unrolling changes no arithmetic: the same operations
// in the same order, so the same bits at every level.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
/// Unroll the next loop completely (compile-time trip count <= 16), at every optimization level.
#define PIPEPROP_UNROLL _Pragma("GCC unroll 16")
#else
/// Unroll the next loop completely where the compiler has a pragma for it; nothing elsewhere.
#define PIPEPROP_UNROLL
#endif
