// pipeprop/kernels/transpose_copy.hpp: dst = src^T for row-major matrices, in 8 x 8 register tiles of float (the
// transpose of kernels/transpose_add.hpp; at least 8 rows and columns, the last tiles overlapping the ones before)
// where AVX is there, element by element otherwise (double included). Used where a layout changes between kernels:
// conv2d's Winograd form (layers/conv2d_winograd.hpp) turns samples [C, H, W] into the channel-last rows its
// transforms read and its output tiles back, one image row at a time (W = 7 ... 28 columns); conv2d's backward-p2
// forms take dy^T [pixels, OC] (layers/conv2d.hpp, conv2d_direct.hpp); simd_gemm's A B^T packs B^T panels
// (kernels/simd_gemm.hpp). Element by element, these transposes took 47% of the small CNN's stem convolution's
// backward-p2 and 18% of its 1568 -> 128 dense layer's forward at b = 32 (AVX2; bench/README.md). A copy moves
// values without arithmetic, so every path gives the same bits. No errors (noexcept, no allocation).
#pragma once

#include <cstddef>
#include <type_traits>

#include "pipeprop/kernels/transpose_add.hpp"

namespace pipeprop::kernels {

/// dst [cols x rows] = src [rows x cols]^T: dst[j ld_dst + i] = src[i ld_src + j] for i < rows, j < cols (row-major,
/// ld_src >= cols, ld_dst >= rows, not overlapping).
template <class T>
void transpose_copy(std::size_t rows, std::size_t cols, const T* src, std::size_t ld_src, T* dst,
                    std::size_t ld_dst) noexcept {
    std::size_t i0 = 0;
#if defined(__AVX__)
    if constexpr (std::is_same_v<T, float>) {
        if (rows >= 8 && cols >= 8) {
            i0 = rows;
            for (std::size_t i = 0; i < rows; i += 8)
                for (std::size_t j = 0; j < cols; j += 8) {
                    // a last tile overlaps the one before (the same values written twice)
                    const std::size_t it = i + 8 <= rows ? i : rows - 8, jt = j + 8 <= cols ? j : cols - 8;
                    __m256 r[8];
                    for (std::size_t t = 0; t < 8; ++t) r[t] = _mm256_loadu_ps(src + (it + t) * ld_src + jt);
                    detail::transpose_8x8(r);
                    for (std::size_t t = 0; t < 8; ++t) _mm256_storeu_ps(dst + (jt + t) * ld_dst + it, r[t]);
                }
        }
    }
#endif
    for (std::size_t i = i0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
}

}  // namespace pipeprop::kernels
