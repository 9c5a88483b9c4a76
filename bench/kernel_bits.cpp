// bench/kernel_bits.cpp: writes the outputs of the SIMD GEMM kernels (kernels::simd_gemm with every transpose, with
// and without alpha / beta, shapes from 1 to 300 along M, N and K including K = 0; kernels::shifted_gemm), float and
// double, from a fixed seed, to one binary file, so that two builds (optimization levels, kernel changes) can be
// compared byte for byte: `cmp` or `md5sum` of their files. Used for the -O1 / -O2 / -O3 comparison of
// bench/README.md, "GEMM kernels at -O2".
// Usage: kernel_bits FILE
#include <pipeprop/kernels/shifted_gemm.hpp>
#include <pipeprop/kernels/simd_gemm.hpp>

#include <cstddef>
#include <cstdio>
#include <random>
#include <vector>

namespace {

template <class T>
void write_outputs(std::FILE* f, std::mt19937& g) {
    std::uniform_real_distribution<double> d(-1, 1);
    const auto fill = [&](std::vector<T>& v) {
        for (auto& x : v) x = T(d(g));
    };
    for (std::size_t m : {1, 2, 3, 5, 8, 13, 16, 33})
        for (std::size_t n : {1, 4, 7, 16, 17, 40, 100})
            for (std::size_t k : {0, 1, 2, 3, 9, 31, 64, 300})
                for (int form = 0; form < 8; ++form) {
                    const bool ta = form & 1, tb = form & 2, scaled = form & 4;
                    std::vector<T> a(m * k + 1), b(k * n + 1), c(m * n);
                    fill(a), fill(b), fill(c);
                    pipeprop::kernels::simd_gemm<T>(ta, tb, m, n, k, scaled ? T(0.7) : T(1), a.data(), ta ? m : k,
                                                    b.data(), tb ? k : n, scaled ? T(0.3) : T(0), c.data(), n);
                    std::fwrite(c.data(), sizeof(T), c.size(), f);
                }
    constexpr std::size_t w = xsimd::batch<T>::size;
    for (std::size_t m : {1, 3, 8, 16})
        for (std::size_t vectors : {1, 2, 3, 5})
            for (std::size_t k : {1, 9, 144}) {
                const std::size_t n = vectors * w;
                std::vector<T> a(m * k), b(k * 10 + 10 + n), c(m * n);
                std::vector<std::ptrdiff_t> offsets(k);
                for (std::size_t p = 0; p < k; ++p) offsets[p] = static_cast<std::ptrdiff_t>(p * 10 + (p * 7) % 10);
                fill(a), fill(b);
                pipeprop::kernels::shifted_gemm<T>(m, n, k, a.data(), k, b.data(), offsets.data(), c.data(), n);
                std::fwrite(c.data(), sizeof(T), c.size(), f);
            }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: kernel_bits FILE\n");
        return 2;
    }
    std::FILE* f = std::fopen(argv[1], "wb");
    if (f == nullptr) {
        std::perror(argv[1]);
        return 1;
    }
    std::mt19937 g(5);
    write_outputs<float>(f, g);
    write_outputs<double>(f, g);
    return std::fclose(f) == 0 ? 0 : 1;
}
