// Must not compile: a concrete custom layer whose input_shape (5 features) differs from the output of the layer
// before it (dense<4>: 4 features), at position 2. Expected diagnostic: "this layer's input_shape does not match the
// output shape of the layer before it", with layer_at_position<2, ...> in the trace.
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/dense.hpp>
#include <pipeprop/layers/relu.hpp>

namespace pp = pipeprop;

struct five_features_identity {
    using value_type = float;
    using input_shape = pp::shape<5>;
    using output_shape = pp::shape<5>;
    static constexpr std::size_t parameter_count = 0;
    void forward(std::span<const float>, const float* x, float* y, std::size_t b, pp::no_stash&,
                 pp::no_workspace&) const {
        for (std::size_t i = 0; i < 5 * b; ++i) y[i] = x[i];
    }
    void backward_input(std::span<const float>, const float*, const float*, const float* dy, float* dx,
                        std::size_t b, const pp::no_stash&, pp::no_workspace&) const {
        for (std::size_t i = 0; i < 5 * b; ++i) dx[i] = dy[i];
    }
};

using net = pp::network<pp::shape<8>, pp::dense<4>, pp::relu, five_features_identity, pp::dense<2>>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
