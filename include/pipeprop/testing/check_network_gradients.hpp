// pipeprop/testing/check_network_gradients.hpp: central finite-difference check of a whole network or block.
//
// check_gradients (check_gradients.hpp) checks one layer and its contract; this checks what the runner computes over
// a sequence of nodes, blocks included (graph/blocks.hpp): the input gradient of backward-p1 over every node and the
// weight gradient of backward-p2, against central differences of f(x, w) = sum(r * network(x, w)) for a random r,
// in double. Wrap a block in a network of its own (pipeprop::network<In, residual<...>>) to check it alone. For
// large blocks, max_checked bounds how many input and parameter entries are differentiated (chosen at random,
// deterministically from the seed); every entry of the analytic gradient is still computed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/testing/check_gradients.hpp"

namespace pipeprop::testing {

/// Options of check_network_gradients: those of check_gradients plus max_checked, the most input entries and the
/// most parameter entries compared with finite differences (0: all).
struct network_gradient_check_options : gradient_check_options {
    std::size_t max_checked = 0;  ///< Most input and most parameter entries compared with finite differences (0: all).
};

/// Checks network Net (bound to double) at micro-batch size opt.batch. Throws nothing; the result says what failed
/// (contract_error: backward-p1 + backward-p2 over the nodes differs from the fused backward).
template <network_type Net>
gradient_check_result check_network_gradients(network_gradient_check_options opt = {}) {
    using T = double;
    using stack_type = layer_stack<Net, T>;
    const stack_type stack;
    const std::size_t b = opt.batch;
    const layer_range all = stack_type::all();
    const std::size_t nx = b * stack_type::activation_size[0];
    const std::size_t ny = b * stack_type::activation_size[stack_type::layer_count];
    const std::size_t nw = stack_type::parameter_count;
    std::mt19937_64 rng(derive_seed(opt.seed, 0));
    std::vector<T> x(nx), w(nw), r(ny);
    for (auto& v : x) v = uniform<T>(rng, -opt.input_scale, opt.input_scale);
    for (auto& v : r) v = uniform<T>(rng, -1.0, 1.0);
    stack.init_parameters(std::span<T>(w), derive_seed(opt.seed, 1));
    for (auto& v : w) v += uniform<T>(rng, -opt.parameter_scale, opt.parameter_scale);
    auto act = stack.make_activations(all, b);
    auto ws = stack.make_workspaces(all, b);

    auto objective = [&](const std::vector<T>& xx, const std::vector<T>& ww) {
        std::copy(xx.begin(), xx.end(), act.input());
        stack.forward(std::span<const T>(ww), act, b, ws);
        T f = 0;
        for (std::size_t i = 0; i < ny; ++i) f += r[i] * act.output()[i];
        return f;
    };
    auto pick = [&](std::size_t n) {
        std::vector<std::size_t> idx(n);
        for (std::size_t i = 0; i < n; ++i) idx[i] = i;
        if (opt.max_checked > 0 && n > opt.max_checked) {
            std::shuffle(idx.begin(), idx.end(), rng);
            idx.resize(opt.max_checked);
        }
        return idx;
    };

    gradient_check_result res;
    std::ostringstream rep;
    // Analytic: split backward (p1 over all nodes, then p2), and the fused backward for the contract check.
    (void)objective(x, w);
    std::copy(r.begin(), r.end(), act.output_gradient());
    stack.backward_input(std::span<const T>(w), act, b, ws);
    std::vector<T> dx(act.input_gradient(), act.input_gradient() + nx), dw(nw, 0.0);
    stack.backward_weight(std::span<const T>(w), std::span<T>(dw), act, b, ws);
    (void)objective(x, w);
    std::copy(r.begin(), r.end(), act.output_gradient());
    std::vector<T> dw_fused(nw, 0.0);
    stack.backward(std::span<const T>(w), std::span<T>(dw_fused), act, b, ws);
    std::vector<T> dx_fused(act.input_gradient(), act.input_gradient() + nx);
    res.contract_error = std::max(detail::scaled_error(dx_fused, dx), detail::scaled_error(dw_fused, dw));

    const auto xi = pick(nx);
    std::vector<T> a_x(xi.size()), n_x(xi.size());
    for (std::size_t k = 0; k < xi.size(); ++k) {
        auto xp = x, xm = x;
        xp[xi[k]] += opt.step;
        xm[xi[k]] -= opt.step;
        n_x[k] = (objective(xp, w) - objective(xm, w)) / (2 * opt.step);
        a_x[k] = dx[xi[k]];
    }
    res.input_error = detail::scaled_error(a_x, n_x);
    rep << "backward-p1 error " << res.input_error << " (" << xi.size() << " of " << nx << " inputs)";
    if (nw > 0) {
        const auto wi = pick(nw);
        std::vector<T> a_w(wi.size()), n_w(wi.size());
        for (std::size_t k = 0; k < wi.size(); ++k) {
            auto wp = w, wm = w;
            wp[wi[k]] += opt.step;
            wm[wi[k]] -= opt.step;
            n_w[k] = (objective(x, wp) - objective(x, wm)) / (2 * opt.step);
            a_w[k] = dw[wi[k]];
        }
        res.weight_error = detail::scaled_error(a_w, n_w);
        rep << ", backward-p2 error " << res.weight_error << " (" << wi.size() << " of " << nw << " parameters)";
    }
    rep << ", split vs fused " << res.contract_error << " (tolerance " << opt.tolerance << ", b = " << b << ")";
    res.passed = res.input_error <= opt.tolerance && res.weight_error <= opt.tolerance &&
                 res.contract_error <= opt.tolerance && std::isfinite(res.input_error) &&
                 std::isfinite(res.weight_error);
    res.report = rep.str();
    return res;
}

}  // namespace pipeprop::testing
