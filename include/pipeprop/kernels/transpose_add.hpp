// pipeprop/kernels/transpose_add.hpp: dst += src^T for row-major matrices, in register tiles.
//
// conv2d's backward-p2 forms the transposed weight gradient dW^T [C K K, OC] (layers/conv2d.hpp; the micro-batch's
// samples already summed into it) and adds it to dW [OC, C K K] once per micro-batch. Element by element that reads
// src down a column, a stride of OC values per element. Here whole tiles are loaded a row at a time, transposed in
// registers (the usual unpack / 128-bit-lane shuffle transpose; no paper's algorithm) and added to dst a row at a
// time: 16 x 16 tiles of float with AVX-512, 8 x 8 with AVX, element by element elsewhere (double included) and at
// the edges. Each dst element gets exactly one addition (dst + src, rounded once), so the result is the same bits
// whatever path or tile computes it. Units: those of the values; no errors (noexcept, no allocation).
#pragma once

#include <cstddef>
#include <type_traits>
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

namespace pipeprop::kernels {

namespace detail {

/// dst[j ld_dst + i] += src[i ld_src + j] for i in [i0, rows) or j in [j0, cols): the edges left by the tiles.
template <class T>
inline void transpose_add_edges(std::size_t rows, std::size_t cols, std::size_t i0, std::size_t j0, const T* src,
                                std::size_t ld_src, T* dst, std::size_t ld_dst) noexcept {
    for (std::size_t j = 0; j < cols; ++j) {
        T* __restrict d = dst + j * ld_dst;
        const std::size_t from = j < j0 ? i0 : 0;  // columns below j0 have their rows below i0 done by the tiles
        for (std::size_t i = from; i < rows; ++i) d[i] += src[i * ld_src + j];
    }
}

#if defined(__AVX512F__)
/// Transposes the 16 x 16 tile r[0..15] (row i in r[i]) in place: afterwards r[j] holds column j.
inline void transpose_16x16(__m512 (&r)[16]) noexcept {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {  // per 128-bit lane L: (r2i[4L], r2i+1[4L], r2i[4L+1], r2i+1[4L+1]) and the hi half
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    __m512 u[16];  // u[4i + k], lane L: column 4L + k of rows 4i .. 4i + 3
    for (int i = 0; i < 4; ++i) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int k = 0; k < 4; ++k) {  // column 4L + k = lanes L of u[k], u[4 + k], u[8 + k], u[12 + k]
        const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x44), v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xEE);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x44);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xEE);
        r[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + k] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}
#endif
#if defined(__AVX__)
/// Transposes the 8 x 8 tile r[0..7] (row i in r[i]) in place: afterwards r[j] holds column j.
inline void transpose_8x8(__m256 (&r)[8]) noexcept {
    __m256 t[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    __m256 u[8];  // u[4i + k], lane L: column 4L + k of rows 4i .. 4i + 3
    for (int i = 0; i < 2; ++i) {
        const __m256d a = _mm256_castps_pd(t[4 * i]), b = _mm256_castps_pd(t[4 * i + 2]);
        const __m256d c = _mm256_castps_pd(t[4 * i + 1]), d = _mm256_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(c, d));
    }
    for (int k = 0; k < 4; ++k) {
        const __m256 lo = u[k], hi = u[4 + k];
        r[k] = _mm256_permute2f128_ps(lo, hi, 0x20);
        r[4 + k] = _mm256_permute2f128_ps(lo, hi, 0x31);
    }
}
#endif

}  // namespace detail

// GCC 12 reports the _mm512_undefined_ps inside its own AVX-512 shuffle intrinsics as (maybe) uninitialized where
// they are inlined into transpose_add; the false warnings are silenced for it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/// dst [cols x rows] += src [rows x cols]^T: dst[j ld_dst + i] += src[i ld_src + j] for i < rows, j < cols, both
/// row-major with strides ld_src >= cols and ld_dst >= rows, not overlapping. One rounded addition per element of
/// dst, the same bits on every path (see the file comment). Allocates nothing, throws nothing.
template <class T>
void transpose_add(std::size_t rows, std::size_t cols, const T* src, std::size_t ld_src, T* dst,
                   std::size_t ld_dst) noexcept {
    std::size_t i0 = 0, j0 = 0;
#if defined(__AVX512F__) || defined(__AVX__)
    if constexpr (std::is_same_v<T, float>) {
#if defined(__AVX512F__)
        constexpr std::size_t tile = 16;
        using vec = __m512;
        const auto load = [](const float* p) { return _mm512_loadu_ps(p); };
        const auto add_store = [](float* p, vec v) { _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), v)); };
        const auto transpose = [](vec(&r)[tile]) { detail::transpose_16x16(r); };
#else
        constexpr std::size_t tile = 8;
        using vec = __m256;
        const auto load = [](const float* p) { return _mm256_loadu_ps(p); };
        const auto add_store = [](float* p, vec v) { _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), v)); };
        const auto transpose = [](vec(&r)[tile]) { detail::transpose_8x8(r); };
#endif
        i0 = rows / tile * tile;
        j0 = cols / tile * tile;
        for (std::size_t i = 0; i < i0; i += tile)
            for (std::size_t j = 0; j < j0; j += tile) {
                vec r[tile];
                for (std::size_t t = 0; t < tile; ++t) r[t] = load(src + (i + t) * ld_src + j);
                transpose(r);
                for (std::size_t t = 0; t < tile; ++t) add_store(dst + (j + t) * ld_dst + i, r[t]);
            }
    }
#endif
    detail::transpose_add_edges(rows, cols, i0, j0, src, ld_src, dst, ld_dst);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace pipeprop::kernels
