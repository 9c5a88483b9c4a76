// The pre-norm transformer block (graph/transformer_block.hpp): it composes from the leaf
// layers (rms_norm, causal_self_attention with RoPE, swiglu) and residual blocks, passes the network gradient check in
// double, runs in PB fine-grained (every parametric layer its own stage, boundaries inside both residual blocks) with
// the concurrent executor bit-identical to the sequential reference, and in every synchronous schedule with and
// without 2BP equal to whole-batch SGD. A classification head (flatten, dense) keeps the engines' softmax
// cross-entropy; the per-token loss is the leaf-layers / LLaMA issues' part.
#include <catch2/catch.hpp>

#include <pipeprop/pipeprop.hpp>

#include "unit/test_pb_support.hpp"

using namespace pb_test;

namespace {

template <std::size_t L, std::size_t D>
using tiny_transformer = pp::network<shape<L, D>, pp::prenorm_transformer_block<2, 10>,
                                     pp::prenorm_transformer_block<2, 10>, pp::rms_norm<>, pp::flatten, pp::dense<3>>;
using net = tiny_transformer<5, 8>;
using stack = pp::layer_stack<net, float>;
// Per block: fork, norm, attention, add, fork, norm, swiglu, add; then norm, flatten, dense.
static_assert(stack::layer_count == 2 * 8 + 3);
static_assert(stack::has_weighted_backward_weight);

}  // namespace

TEST_CASE("pre-norm transformer block: names and network gradient check in double", "[transformer][graph]") {
    CHECK(stack::node_names[2] == "layer_00.body_00.body_01");  // the first block's attention
    CHECK(stack::node_names[6] == "layer_00.body_01.body_01");  // its SwiGLU
    for (std::size_t b : {1u, 3u}) {
        pp::testing::network_gradient_check_options o;
        o.batch = b;
        o.max_checked = 250;
        const auto r = pp::testing::check_network_gradients<tiny_transformer<5, 8>>(o);
        INFO("b = " << b << ": " << r.report);
        CHECK(r.passed);
        const auto one = pp::testing::check_network_gradients<pp::network<shape<1, 6>, pp::prenorm_transformer_block<3, 4>>>(o);
        INFO(one.report);
        CHECK(one.passed);
    }
}

TEST_CASE("pre-norm transformer: PB fine-grained, concurrent == sequential bitwise", "[transformer][pb]") {
    openblas_set_num_threads(1);
    auto check = [&]<class Policy>(Policy) {
        using pipe = pb::pipeline<net, pp::fine_grained<>, Policy>;
        static_assert(pipe::stage_count == 2 * 4 + 2);  // norm, attention, norm, swiglu per block; norm; dense
        pb::options<Policy> o;
        o.max_batch = 3;
        o.seed = 21;
        o.executor = pb::executor_kind::sequential;
        pipe seq(o);
        o.executor = pb::executor_kind::concurrent;
        o.push_buffer = 16;  // graph runs inside each segment, not only at the drains
        pipe con(o);
        const auto rs = drive(seq, 120, 3, 2, 50, Policy::fixed_momentum);
        const auto rc = drive(con, 120, 3, 2, 50, Policy::fixed_momentum);
        INFO(Policy::name);
        REQUIRE(rs.ids.size() == 120);
        CHECK(bitwise_equal(rs.losses, rc.losses));
        CHECK(bitwise_equal(rs.weights, rc.weights));
        CHECK(bitwise_equal(rs.velocities, rc.velocities));
    };
    check(pb::policy::none{});  // every mitigation policy
    check(pb::policy::spike_compensation<>{});
    check(pb::policy::linear_weight_prediction<>{});
    check(pb::policy::linear_weight_prediction<pb::lwp_form::weight_difference>{});
    check(pb::policy::sc_lwp<>{});
    check(pb::policy::weight_stashing{});
    check(pb::policy::pipemare{});
}
