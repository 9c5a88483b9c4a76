// Consumer program shared by the three consumer projects (find_package, add_subdirectory, plain include): uses only
// the umbrella header, builds a tiny CNN, initializes it from a seed and runs one forward pass of a micro-batch of
// b = 2 samples. Trains nothing. Exit code 0 when the 2 x 3 outputs are finite and differ between the samples.
#include <pipeprop/pipeprop.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

namespace pp = pipeprop;

using tiny_cnn = pp::network<pp::shape<1, 6, 6>, pp::conv2d<2, 3, 1, 1>, pp::group_norm<2>, pp::relu,
                             pp::max_pool2d<2>, pp::flatten, pp::dense<3>>;

int main() {
    using stack_t = pp::layer_stack<tiny_cnn, float>;
    const stack_t stack;
    const std::size_t b = 2;
    std::vector<float> w(stack_t::parameter_count);
    stack.init_parameters(w, 1);
    auto act = stack.make_activations(stack_t::all(), b);
    auto ws = stack.make_workspaces(stack_t::all(), b);
    for (std::size_t i = 0; i < b * 36; ++i) act.input()[i] = static_cast<float>((i * 7) % 11) / 11.0f;
    stack.forward(w, act, b, ws);
    bool ok = act.output()[0] != act.output()[3];
    for (std::size_t i = 0; i < b * 3; ++i) {
        ok = ok && std::isfinite(act.output()[i]);
        std::printf("%s%g", i == 0 ? "logits: " : " ", static_cast<double>(act.output()[i]));
    }
    std::printf("\n%s\n", ok ? "pipeprop consumer: forward pass OK" : "pipeprop consumer: BAD OUTPUT");
    return ok ? 0 : 1;
}
