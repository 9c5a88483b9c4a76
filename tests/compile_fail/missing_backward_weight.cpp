// Must not compile: a custom layer with parameters (a per-feature scale) but no backward_weight (backward-p2).
// Expected diagnostic: "this layer has parameters but no backward-p2 member ...".
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/layers/relu.hpp>

namespace pp = pipeprop;

template <class T, class In>
struct learned_scale_layer {
    using value_type = T;
    using input_shape = In;
    using output_shape = In;
    static constexpr std::size_t parameter_count = In::size;
    void init_parameters(std::span<T> w, std::uint64_t) const {
        for (auto& v : w) v = T(1);
    }
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, pp::no_stash&, pp::no_workspace&) const {
        for (std::size_t i = 0; i < In::size * b; ++i) y[i] = w[i % In::size] * x[i];
    }
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const pp::no_stash&, pp::no_workspace&) const {
        for (std::size_t i = 0; i < In::size * b; ++i) dx[i] = w[i % In::size] * dy[i];
    }
};

struct learned_scale {
    template <class T, class In>
    using bind = learned_scale_layer<T, In>;
};

using net = pp::network<pp::shape<6>, pp::dense<4>, pp::relu, learned_scale, pp::dense<2>>;

std::size_t instantiate() { return pp::layer_stack<net, double>::parameter_count; }
