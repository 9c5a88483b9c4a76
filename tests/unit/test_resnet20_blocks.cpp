// The blocks of the main program's ResNet-20 (examples/train/networks.hpp: train::basic_block, train::down_block,
// train::resnet20) against central finite differences in double: every distinct block type
// at the input shape it has in ResNet-20 (the three groups at 28x28, 14x14 and 7x7, both projection blocks), and the
// whole network, at micro-batch sizes 1 and 3. check_network_gradients also compares backward-p1 + backward-p2 over
// the nodes with the fused backward (the contract of layer_concept.hpp).
#include <catch2/catch.hpp>

#include <pipeprop/testing/check_network_gradients.hpp>

#include "../../examples/train/networks.hpp"

namespace pp = pipeprop;

namespace {

using norm = pp::group_norm<8>;
template <class Shape, class Block>
using alone = pp::network<Shape, Block>;

template <class Net>
void check(const char* what, std::size_t max_checked) {
    for (std::size_t b : {1u, 3u}) {
        INFO(what << ", b = " << b);
        pp::testing::network_gradient_check_options o;
        o.batch = b;
        o.max_checked = max_checked;
        // At these widths a finite-difference step moves some relu input across 0 (12544 relu inputs per layer,
        // and group norm couples every input of a group, a conv weight every pixel), and the central difference
        // across that kink is wrong there, not the gradient. Measured: step 1e-5 gives p1 errors up to 2e-3;
        // 1e-7 is limited by the rounding of the objective (a sum over 12544 outputs, errors ~1.5e-6); at 1e-6 p1
        // stays below 2e-7 and p2 below 2e-5 (one kink among 200 weights of the first conv). Hence the step and
        // the tolerance; the formulas are checked at 1e-6 on small widths (test_graph_blocks.cpp), and what this
        // test guards, the blocks' wiring at ResNet-20's real shapes, fails with errors of order 1.
        o.step = 1e-6;
        o.tolerance = 1e-4;
        const auto r = pp::testing::check_network_gradients<Net>(o);
        INFO(r.report);
        CHECK(r.passed);
    }
}

}  // namespace

TEST_CASE("ResNet-20's blocks pass the network gradient check in double at their shapes", "[graph][gradients]") {
    check<alone<pp::shape<16, 28, 28>, train::basic_block<16, norm>>>("basic_block<16> on 16x28x28", 200);
    check<alone<pp::shape<16, 28, 28>, train::down_block<32, norm>>>("down_block<32> on 16x28x28", 200);
    check<alone<pp::shape<32, 14, 14>, train::basic_block<32, norm>>>("basic_block<32> on 32x14x14", 200);
    check<alone<pp::shape<32, 14, 14>, train::down_block<64, norm>>>("down_block<64> on 32x14x14", 200);
    check<alone<pp::shape<64, 7, 7>, train::basic_block<64, norm>>>("basic_block<64> on 64x7x7", 200);
}

TEST_CASE("ResNet-20 as a whole passes the network gradient check in double", "[graph][gradients]") {
    static_assert(pp::layer_stack<train::resnet20, double>::layer_count == 81);
    check<train::resnet20>("resnet20", 120);
}
