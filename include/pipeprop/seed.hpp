// pipeprop/seed.hpp: deterministic seeding. Every random stream in pipeprop is derived from one user seed and a
// stream index (layer position, epoch, ...), so results never depend on how a network is cut into stages or on
// thread timing (docs/pitfalls.md item 5).
#pragma once

#include <cstdint>
#include <random>

namespace pipeprop {

/// SplitMix64 finalizer: a well-mixed 64-bit value from (seed, stream). Pure function.
[[nodiscard]] constexpr std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// Uniform value in [lo, hi) from a 64-bit engine, computed the same way on every platform (unlike
/// std::uniform_real_distribution, whose algorithm is implementation-defined).
template <class T>
[[nodiscard]] T uniform(std::mt19937_64& rng, T lo, T hi) {
    const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);  // 53 bits, [0, 1)
    return static_cast<T>(lo + (hi - lo) * u);
}

}  // namespace pipeprop
