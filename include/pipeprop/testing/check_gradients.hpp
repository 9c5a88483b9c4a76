// pipeprop/testing/check_gradients.hpp: central finite-difference check of a layer's backward-p1 and backward-p2.
//
// Public helper for users' own layers: bind the layer to double and call check_gradients. It also checks the
// contract of layer_concept.hpp: p1 ASSIGNS dx (a pre-filled dx does not leak into the result), p2 ADDS into dw
// (running it twice doubles the gradient), p1 is repeatable (the stash is unchanged by it) and p2 gives the same
// result whether it runs before or after p1.
//
// A layer with integer token inputs (`static constexpr bool integer_input = true;`, layer_concept.hpp) gets exact
// integer ids drawn from [0, token_ids) instead of real inputs; its input is discrete, so instead of a finite
// difference the check requires backward-p1 to assign exact zeros, and backward-p2 is checked by perturbing the
// weights as for any layer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pipeprop/layer_concept.hpp"
#include "pipeprop/seed.hpp"

namespace pipeprop::testing {

/// Options of check_gradients. batch: micro-batch size b (>= 1); step: finite-difference step h;
/// tolerance: largest accepted error, measured as max|analytic - numeric| / max(max|numeric|, 1e-12) per tensor.
struct gradient_check_options {
    std::size_t batch = 1;  ///< Micro-batch size b (>= 1).
    std::uint64_t seed = 1;  ///< Seed of the inputs, parameters and output gradients.
    double step = 1e-5;  ///< Finite-difference step h.
    double tolerance = 1e-6;  ///< Largest accepted error (relative, per tensor).
    double input_scale = 1.0;      ///< inputs drawn from U(-input_scale, input_scale)
    double parameter_scale = 0.5;  ///< parameters: init_parameters, then + U(-parameter_scale, parameter_scale)
    /// Integer-input layers only: ids are drawn from [0, token_ids); 0 means L::vocab_size when L declares it
    /// (an integer-input layer without either fails the check with a message saying so).
    std::size_t token_ids = 0;
};

/// Errors found by check_gradients (same measure as the tolerance) and a human-readable report.
struct gradient_check_result {
    double input_error = 0;       ///< backward-p1 vs finite differences
    double weight_error = 0;      ///< backward-p2 vs finite differences (0 for parameter-free layers)
    double contract_error = 0;    ///< largest violation of assign/add/repeatability/order
    bool passed = false;  ///< True when every error is within the tolerance.
    std::string report;  ///< What was checked and what failed, human-readable.
};

namespace detail {
inline double scaled_error(const std::vector<double>& a, const std::vector<double>& n) {
    double num = 0, den = 1e-12;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num = std::max(num, std::abs(a[i] - n[i]));
        den = std::max(den, std::abs(n[i]));
    }
    return num / den;
}
/// True for a layer that declares `static constexpr bool integer_input = true;` (token ids as input).
template <class L>
inline constexpr bool integer_input_v = [] {
    if constexpr (requires { L::integer_input; })
        return static_cast<bool>(L::integer_input);
    else
        return false;
}();
/// Range [0, n) of the ids check_gradients draws for an integer-input layer: opt.token_ids, else L::vocab_size, else 0.
template <class L>
std::size_t token_id_count(std::size_t requested) {
    if (requested > 0) return requested;
    if constexpr (requires { L::vocab_size; })
        return static_cast<std::size_t>(L::vocab_size);
    else
        return 0;
}
}  // namespace detail

/// Checks layer L (value_type must be double) at micro-batch size opt.batch with the scalar objective
/// f(x, w) = sum(r * y) for a random r. Throws nothing; the result says what failed.
template <layer L>
gradient_check_result check_gradients(const L& l = L{}, gradient_check_options opt = {}) {
    static_assert(std::is_same_v<typename L::value_type, double>,
                  "pipeprop::testing::check_gradients: bind the layer to double (finite differences in float are "
                  "too noisy to check anything).");
    using T = double;
    const std::size_t b = opt.batch;
    const std::size_t nx = b * L::input_shape::size, ny = b * L::output_shape::size, nw = L::parameter_count;
    std::mt19937_64 rng(derive_seed(opt.seed, 0));
    std::vector<T> x(nx), w(nw), r(ny), y(ny);
    constexpr bool integer_input = detail::integer_input_v<L>;
    const std::size_t ids = detail::token_id_count<L>(opt.token_ids);
    if constexpr (integer_input) {
        if (ids == 0) {
            gradient_check_result res;
            res.report = "integer-input layer: set gradient_check_options::token_ids (or declare L::vocab_size)";
            return res;
        }
        for (auto& v : x) v = static_cast<T>(rng() % ids);
    } else {
        for (auto& v : x) v = uniform<T>(rng, -opt.input_scale, opt.input_scale);
    }
    for (auto& v : r) v = uniform<T>(rng, -1.0, 1.0);
    if constexpr (L::parameter_count > 0) {
        l.init_parameters(std::span<T>(w), derive_seed(opt.seed, 1));
        for (auto& v : w) v += uniform<T>(rng, -opt.parameter_scale, opt.parameter_scale);
    }
    auto st = make_stash(l, b);
    auto ws = make_workspace(l, b);
    auto objective = [&](const std::vector<T>& xx, const std::vector<T>& ww) {
        std::vector<T> yy(ny);
        auto s2 = make_stash(l, b);
        l.forward(std::span<const T>(ww), xx.data(), yy.data(), b, s2, ws);
        T f = 0;
        for (std::size_t i = 0; i < ny; ++i) f += r[i] * yy[i];
        return f;
    };

    gradient_check_result res;
    std::ostringstream rep;
    // Analytic gradients.
    l.forward(std::span<const T>(w), x.data(), y.data(), b, st, ws);
    std::vector<T> dx(nx, 1e30), dx2(nx, -7.0);
    l.backward_input(std::span<const T>(w), x.data(), y.data(), r.data(), dx.data(), b, st, ws);
    l.backward_input(std::span<const T>(w), x.data(), y.data(), r.data(), dx2.data(), b, st, ws);
    res.contract_error = std::max(res.contract_error, detail::scaled_error(dx2, dx));

    // Numeric input gradient (zero for token ids: p1 must assign exact zeros, checked by the same measure).
    std::vector<T> nx_grad(nx, 0.0);
    for (std::size_t i = 0; i < nx && !integer_input; ++i) {
        auto xp = x, xm = x;
        xp[i] += opt.step;
        xm[i] -= opt.step;
        nx_grad[i] = (objective(xp, w) - objective(xm, w)) / (2 * opt.step);
    }
    res.input_error = detail::scaled_error(dx, nx_grad);
    rep << "backward-p1 error " << res.input_error;

    if constexpr (L::parameter_count > 0) {
        std::vector<T> dw(nw, 0.0);
        call_backward_weight(l, std::span<const T>(w), std::span<T>(dw), x.data(), y.data(), r.data(), b, st, ws);
        std::vector<T> nw_grad(nw);
        for (std::size_t i = 0; i < nw; ++i) {
            auto wp = w, wm = w;
            wp[i] += opt.step;
            wm[i] -= opt.step;
            nw_grad[i] = (objective(x, wp) - objective(x, wm)) / (2 * opt.step);
        }
        res.weight_error = detail::scaled_error(dw, nw_grad);
        rep << ", backward-p2 error " << res.weight_error;
        // p2 adds: a second call doubles the gradient.
        auto dw_twice = dw;
        call_backward_weight(l, std::span<const T>(w), std::span<T>(dw_twice), x.data(), y.data(), r.data(), b, st,
                             ws);
        std::vector<T> doubled(nw);
        for (std::size_t i = 0; i < nw; ++i) doubled[i] = 2 * dw[i];
        res.contract_error = std::max(res.contract_error, detail::scaled_error(dw_twice, doubled));
        // Order: p2 before p1 on a fresh forward gives the same p2 and p1.
        auto st2 = make_stash(l, b);
        std::vector<T> y2(ny), dw_first(nw, 0.0), dx3(nx);
        l.forward(std::span<const T>(w), x.data(), y2.data(), b, st2, ws);
        call_backward_weight(l, std::span<const T>(w), std::span<T>(dw_first), x.data(), y2.data(), r.data(), b,
                             st2, ws);
        l.backward_input(std::span<const T>(w), x.data(), y2.data(), r.data(), dx3.data(), b, st2, ws);
        res.contract_error = std::max(res.contract_error, detail::scaled_error(dw_first, dw));
        res.contract_error = std::max(res.contract_error, detail::scaled_error(dx3, dx));
    }
    rep << ", contract error " << res.contract_error << " (tolerance " << opt.tolerance << ", b = " << b << ")";
    res.passed = res.input_error <= opt.tolerance && res.weight_error <= opt.tolerance &&
                 res.contract_error <= opt.tolerance && std::isfinite(res.input_error) &&
                 std::isfinite(res.weight_error);
    res.report = rep.str();
    return res;
}

}  // namespace pipeprop::testing
