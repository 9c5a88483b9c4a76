// Must not compile: a custom layer without backward_input (backward-p1) at position 1 of a network.
// Expected diagnostic: "this layer has no backward-p1 member ..." with layer_at_position<1, ...> in the trace.
#include <pipeprop/layer_stack.hpp>
#include <pipeprop/layers/dense.hpp>

namespace pp = pipeprop;

struct scale_without_p1 {
    using value_type = float;
    using input_shape = pp::shape<4>;
    using output_shape = pp::shape<4>;
    static constexpr std::size_t parameter_count = 0;
    void forward(std::span<const float>, const float* x, float* y, std::size_t b, pp::no_stash&,
                 pp::no_workspace&) const {
        for (std::size_t i = 0; i < 4 * b; ++i) y[i] = 2 * x[i];
    }
};

using net = pp::network<pp::shape<4>, pp::dense<4>, scale_without_p1>;

std::size_t instantiate() { return pp::layer_stack<net, float>::parameter_count; }
