// examples/custom_layer.cpp: writing your own layer for pipeprop.
//
// The layer is a scaled tanh with learnable per-feature amplitude and slope,
//     y[n, i] = a[i] * tanh(s[i] * x[n, i])          (input and output [b, N])
// initialized to LeCun's constants a = 1.7159, s = 2/3 (LeCun, Bottou, Orr & Mueller 1998, "Efficient BackProp",
// §4.4). It shows every part of the layer contract (pipeprop/layer_concept.hpp):
//   - a spec (scaled_tanh) with a nested template bind<T, InputShape>, so the network binds it to float for
//     training and to double for gradient checks, and to the shape of the layer before it;
//   - a parameter block [a (N), s (N)] with names (parameter_tensors) and seeded init_parameters;
//   - a per-micro-batch stash (tanh(s x) and the amplitude the forward used, written by forward, read by the
//     backward passes) made by make_stash at setup time;
//   - forward, backward_input (backward-p1: ASSIGNS dx) and backward_weight (backward-p2: ADDS into da, ds).
// The program puts the layer inside a network (flatten - dense - scaled_tanh - dense), checks it with
// pipeprop::testing::check_gradients at micro-batch sizes 1 and 3, runs one forward / loss / backward pass of the
// whole network in float, prints the results and exits with 1 when a check fails.
#include <pipeprop/core.hpp>  // the layer contract, networks, layer_stack, layers, losses, check_gradients

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

namespace my {

/// Stash of one micro-batch: t = tanh(s x) [max_b, N] and the amplitude a [N] that the forward used.
template <class T>
struct scaled_tanh_stash {
    std::vector<T> t;
    std::vector<T> a;
};

/// Scaled tanh, bound form. Input and output [b, N] for InputShape = shape<N> (any shape works: features are
/// taken in memory order). Parameters: a [N] then s [N].
/// p1 (current weights): dx = dy * a * s * (1 - t^2).
/// p2 (stashed a):        da += sum_n dy * t;  ds += sum_n dy * a * x * (1 - t^2).
template <class T, class InputShape>
struct scaled_tanh_layer {
    static constexpr std::size_t n = InputShape::size;
    using value_type = T;
    using input_shape = InputShape;
    using output_shape = InputShape;
    static constexpr std::size_t parameter_count = 2 * n;
    using stash_type = scaled_tanh_stash<T>;
    using workspace_type = pipeprop::no_workspace;

    static constexpr std::array<pipeprop::parameter_tensor, 2> parameter_tensors() {
        return {pipeprop::parameter_tensor{"amplitude", 1, {n, 1, 1, 1}},
                pipeprop::parameter_tensor{"slope", 1, {n, 1, 1, 1}}};
    }

    /// Setup time (may allocate): room for max_b samples.
    stash_type make_stash(std::size_t max_b) const { return {std::vector<T>(max_b * n), std::vector<T>(n)}; }

    /// a = 1.7159, s = 2/3; deterministic (the seed is not needed for constants).
    void init_parameters(std::span<T> w, std::uint64_t) const {
        for (std::size_t i = 0; i < n; ++i) w[i] = T(1.7159);
        for (std::size_t i = n; i < 2 * n; ++i) w[i] = T(2) / T(3);
    }

    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st,
                 workspace_type&) const {
        const T* a = w.data();
        const T* s = w.data() + n;
        std::copy(a, a + n, st.a.begin());
        for (std::size_t k = 0; k < b; ++k)
            for (std::size_t i = 0; i < n; ++i) {
                const T t = std::tanh(s[i] * x[k * n + i]);
                st.t[k * n + i] = t;
                y[k * n + i] = a[i] * t;
            }
    }

    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type&) const {
        const T* a = w.data();
        const T* s = w.data() + n;
        for (std::size_t k = 0; k < b; ++k)
            for (std::size_t i = 0; i < n; ++i) {
                const T t = st.t[k * n + i];
                dx[k * n + i] = dy[k * n + i] * a[i] * s[i] * (T(1) - t * t);
            }
    }

    // backward-p2 receives no weights (it may run long after the forward, when the weights have moved on), so what
    // it needs of them, the amplitude a of the forward, is in the stash.
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type& st,
                         workspace_type&) const {
        T* da = dw.data();
        T* ds = dw.data() + n;
        for (std::size_t k = 0; k < b; ++k)
            for (std::size_t i = 0; i < n; ++i) {
                const std::size_t j = k * n + i;
                const T t = st.t[j];
                da[i] += dy[j] * t;
                ds[i] += dy[j] * st.a[i] * x[j] * (T(1) - t * t);
            }
    }
};

/// The spec that goes into a network list: my::scaled_tanh.
struct scaled_tanh {
    template <class T, class InputShape>
    using bind = scaled_tanh_layer<T, InputShape>;
};

}  // namespace my

namespace pp = pipeprop;

/// The network the layer is used in: [2, 3, 2] images -> flatten -> dense(8) -> scaled_tanh -> dense(3).
using net = pp::network<pp::shape<2, 3, 2>, pp::flatten, pp::dense<8>, my::scaled_tanh, pp::dense<3>>;

int main() {
    // 1. The layer as the network binds it (position 2, input shape<8>), in double, against finite differences.
    using checked_layer = pp::layer_stack<net, double>::layer_type<2>;
    static_assert(std::is_same_v<checked_layer, my::scaled_tanh_layer<double, pp::shape<8>>>);
    bool ok = true;
    for (std::size_t b : {1u, 3u}) {
        const auto r = pp::testing::check_gradients(checked_layer{}, {.batch = b, .seed = 5});
        std::printf("check_gradients(scaled_tanh, b = %zu): %s: %s\n", b, r.passed ? "passed" : "FAILED",
                    r.report.c_str());
        ok = ok && r.passed;
    }

    // 2. One forward / loss / backward pass of the whole network in float (no optimizer step: nothing is trained).
    using stack_t = pp::layer_stack<net, float>;
    using loss = pp::softmax_cross_entropy<float, 3>;
    const stack_t stack;
    const std::size_t b = 4;
    std::vector<float> w(stack_t::parameter_count), dw(stack_t::parameter_count, 0.0f);
    stack.init_parameters(w, 42);
    auto act = stack.make_activations(stack_t::all(), b);
    auto ws = stack.make_workspaces(stack_t::all(), b);
    for (std::size_t i = 0; i < b * 12; ++i) act.input()[i] = std::sin(static_cast<float>(i));
    const std::vector<std::int32_t> labels{0, 1, 2, 1};
    stack.forward(w, act, b, ws);
    const float l = loss::loss_and_gradient(act.output(), labels.data(), b, act.output_gradient());
    stack.backward(w, dw, act, b, ws);
    const auto grad = std::span<const float>(dw).subspan(stack_t::parameter_offset[2], checked_layer::parameter_count);
    float norm = 0;
    for (float g : grad) norm += g * g;
    std::printf("network forward/backward: loss %.4f, |d(amplitude, slope)| = %.4g\n", static_cast<double>(l),
                static_cast<double>(std::sqrt(norm)));
    ok = ok && std::isfinite(l) && norm > 0;
    std::printf("%s\n", ok ? "custom layer: all checks passed" : "custom layer: CHECK FAILED");
    return ok ? 0 : 1;
}
