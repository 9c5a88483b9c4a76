// tests/unit/vector_compare.hpp: comparisons of two tensors (as vectors) the executor tests share.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

namespace test_compare {

/// max |a - b| / max(max |b|, 1e-30): the difference relative to the reference b's largest value. REQUIREs equal
/// sizes.
template <class T>
double relative_difference(const std::vector<T>& a, const std::vector<T>& b) {
    REQUIRE(a.size() == b.size());
    double num = 0, den = 1e-30;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
        den = std::max(den, std::abs(static_cast<double>(b[i])));
    }
    return num / den;
}

/// True when a and b hold the same bits.
template <class T>
bool bit_identical(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace test_compare
