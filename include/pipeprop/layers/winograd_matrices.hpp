// pipeprop/layers/winograd_matrices.hpp: the transform matrices of Winograd's minimal filtering F(m x m, 3 x 3) for
// m = 2 and m = 4 (Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural Networks", §4.1 and §4.2: points
// 0, 1, -1 for m = 2 and 0, 1, -1, 2, -2 for m = 4, each with the point at infinity), and winograd_combine, which
// applies one of their rows to SIMD vectors with the coefficients known at compile time.
//
// Tiles are alpha x alpha with alpha = m + 2. With d an input tile, g a 3x3 kernel and Y an m x m output tile,
//   Y = A^T [(G g G^T) . (B^T d B)] A    (". " element-wise),
// B^T [alpha, alpha], G [alpha, 3], A^T [m, alpha]. Rounding: B^T and A^T hold small integers, so their products
// only add, subtract and multiply by 2, 4, 5 or 8; G holds 1/2 (m = 2, exact) or 1/4, 1/6, 1/12, 1/24 (m = 4), so
// m = 4's transformed weights are rounded once more than m = 2's. Units: none (coefficients). Errors: none.
#pragma once

#include <cstddef>
#include <utility>

namespace pipeprop::detail {

/// A transform matrix: row r is scale[r] times the coefficients v[r] (small integers for B^T, G, A^T; the transposes
/// fold the scales into the coefficients), so that a row such as 1/24 [1 2 4] costs one multiplication by the scale
/// after the sum k0 + 2 k1 + 4 k2 (exact multiplications by 2 and 4, two rounded additions).
template <std::size_t Rows, std::size_t Cols>
struct winograd_matrix {
    double v[Rows][Cols];
    double scale[Rows];

    static constexpr std::size_t rows = Rows, cols = Cols;

    /// The transpose, its scales multiplied into the coefficients (each row then mixes magnitudes).
    constexpr winograd_matrix<Cols, Rows> transposed() const {
        winograd_matrix<Cols, Rows> t{};
        for (std::size_t r = 0; r < Rows; ++r)
            for (std::size_t c = 0; c < Cols; ++c) t.v[c][r] = scale[r] * v[r][c];
        for (std::size_t c = 0; c < Cols; ++c) t.scale[c] = 1.0;
        return t;
    }
};

/// B^T, G, A^T of F(M x M, 3 x 3), and the transposes the passes use: G^T (backward-p2's dW = G^T dU G) and A
/// (backward-p2's dM = A e A^T).
template <std::size_t M>
struct winograd_matrices;

template <>
struct winograd_matrices<2> {
    static constexpr std::size_t alpha = 4;
    static constexpr winograd_matrix<4, 4> bt{{{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
                                              {1, 1, 1, 1}};
    static constexpr winograd_matrix<4, 3> g{{{1, 0, 0}, {1, 1, 1}, {1, -1, 1}, {0, 0, 1}}, {1, 0.5, 0.5, 1}};
    static constexpr winograd_matrix<2, 4> at{{{1, 1, 1, 0}, {0, 1, -1, -1}}, {1, 1}};
    static constexpr winograd_matrix<3, 4> gt = g.transposed();
    static constexpr winograd_matrix<4, 2> a = at.transposed();
};

template <>
struct winograd_matrices<4> {
    static constexpr std::size_t alpha = 6;
    static constexpr winograd_matrix<6, 6> bt{{{4, 0, -5, 0, 1, 0},
                                               {0, -4, -4, 1, 1, 0},
                                               {0, 4, -4, -1, 1, 0},
                                               {0, -2, -1, 2, 1, 0},
                                               {0, 2, -1, -2, 1, 0},
                                               {0, 4, 0, -5, 0, 1}},
                                              {1, 1, 1, 1, 1, 1}};
    static constexpr winograd_matrix<6, 3> g{{{1, 0, 0}, {1, 1, 1}, {1, -1, 1}, {1, 2, 4}, {1, -2, 4}, {0, 0, 1}},
                                             {0.25, -1.0 / 6, -1.0 / 6, 1.0 / 24, 1.0 / 24, 1}};
    static constexpr winograd_matrix<4, 6> at{
        {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}}, {1, 1, 1, 1}};
    static constexpr winograd_matrix<3, 6> gt = g.transposed();
    static constexpr winograd_matrix<6, 4> a = at.transposed();
};

/// How winograd_combine evaluates one row: its nonzero coefficients grouped by magnitude, groups in the order of
/// their first column, each group's terms in column order.
template <std::size_t Cols>
struct winograd_row_plan {
    std::size_t groups = 0;
    double magnitude[Cols]{};
    std::size_t count[Cols]{};
    std::size_t column[Cols][Cols]{};
    bool negative[Cols][Cols]{};
};

template <std::size_t Cols>
constexpr winograd_row_plan<Cols> make_winograd_row_plan(const double (&row)[Cols]) {
    winograd_row_plan<Cols> p{};
    for (std::size_t c = 0; c < Cols; ++c) {
        if (row[c] == 0) continue;
        const double mag = row[c] < 0 ? -row[c] : row[c];
        std::size_t grp = 0;
        while (grp < p.groups && p.magnitude[grp] != mag) ++grp;
        if (grp == p.groups) p.magnitude[p.groups++] = mag;
        p.column[grp][p.count[grp]] = c;
        p.negative[grp][p.count[grp]++] = row[c] < 0;
    }
    return p;
}

/// f.template operator()<I>() for I = 0 .. N - 1 in order.
template <std::size_t N, class F>
inline void winograd_for(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        (f.template operator()<I>(), ...);
    }(std::make_index_sequence<N>{});
}

/// Row Row of Mat applied to x[0 .. Mat.cols): for each magnitude group, the signed sum of its terms, times the
/// magnitude where it is not 1; the groups added in order; then times the row's scale where it is not 1. With
/// F(2x2, 3x3)'s G row [1/2 1/2 1/2] this is 1/2 (x0 + x1 + x2); with G^T's [1 1/2 1/2 0], x0 + 1/2 (x1 + x2).
template <const auto& Mat, std::size_t Row, class Batch>
inline Batch winograd_combine(const Batch* x) {
    static constexpr auto plan = make_winograd_row_plan(Mat.v[Row]);
    static_assert(plan.groups > 0, "pipeprop: a Winograd transform row has no nonzero coefficient.");
    using T = typename Batch::value_type;
    auto group = [&]<std::size_t G>() {
        Batch s = plan.negative[G][0] ? -x[plan.column[G][0]] : x[plan.column[G][0]];
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            ((s = plan.negative[G][I + 1] ? s - x[plan.column[G][I + 1]] : s + x[plan.column[G][I + 1]]), ...);
        }(std::make_index_sequence<plan.count[G] - 1>{});
        if constexpr (plan.magnitude[G] != 1.0) s = Batch(T(plan.magnitude[G])) * s;
        return s;
    };
    Batch r = group.template operator()<0>();
    [&]<std::size_t... G>(std::index_sequence<G...>) {
        ((r = r + group.template operator()<G + 1>()), ...);
    }(std::make_index_sequence<plan.groups - 1>{});
    if constexpr (Mat.scale[Row] != 1.0) r = Batch(T(Mat.scale[Row])) * r;
    return r;
}

}  // namespace pipeprop::detail
