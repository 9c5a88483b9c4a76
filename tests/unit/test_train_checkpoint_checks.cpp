// The main program's checks around its checkpoints (examples/train/checkpoint_checks.hpp): a state with a NaN or
// infinite value (weights or optimizer state) or a non-finite evaluation loss is refused with a message naming the
// epoch, the last update or micro-batch, the tensor and (PB) its stage; a checkpoint of another network is refused
// naming both networks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "train/checkpoint_checks.hpp"

namespace {

std::string message_of(const auto& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "no exception";
}

pipeprop::checkpoint state_with(float bad_value, const std::string& bad_tensor) {
    pipeprop::checkpoint c;
    for (const std::string name : {"layer_00.weight", "layer_00.weight.velocity", "layer_03.weight",
                                   "layer_03.weight.velocity"}) {
        std::vector<float> v{0.5f, -1.0f, 2.0f};
        if (name == bad_tensor) v[2] = bad_value;
        c.add_tensor<float>(name, {3}, std::span<const float>(v));
    }
    const std::vector<double> running{1.0, 2.0};
    c.add_tensor<double>("layer_01.m", {2}, std::span<const double>(running));
    return c;
}

}  // namespace

TEST_CASE("require_finite_state: a finite state and evaluation loss pass", "[train][checkpoint]") {
    pipeprop::checkpoint c = state_with(0.0f, "");
    c.set_scalar("step_count", 3);
    CHECK(!train::first_non_finite(c));
    CHECK_NOTHROW(train::require_finite_state(c, 2.3, 1, 96));
}

TEST_CASE("require_finite_state: NaN or inf in weights or optimizer state names epoch, update, tensor, stage",
          "[train][checkpoint]") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // --mode sgd / sync: the last update of the epoch (step_count 3: updates 0, 1, 2).
    pipeprop::checkpoint sgd = state_with(inf, "layer_00.weight.velocity");
    sgd.set_scalar("step_count", 3);
    const auto found = train::first_non_finite(sgd);
    REQUIRE(found);
    CHECK(found->tensor == "layer_00.weight.velocity");
    CHECK(found->index == 2);
    CHECK(!found->nan);
    CHECK_THROWS_AS(train::require_finite_state(sgd, 2.3, 2, 96), pipeprop::non_finite_loss_error);
    const std::string m = message_of([&] { train::require_finite_state(sgd, 2.3, 2, 96); });
    CHECK_THAT(m, Catch::Contains("the state at the end of epoch 2 is not finite: tensor 'layer_00.weight.velocity' "
                                  "(layer 0) holds an infinite value at index 2") &&
                      Catch::Contains("in update 2 (the last of epoch 2, after 96 samples)") &&
                      Catch::Contains("nothing was saved"));

    // --mode pb: the stage of the layer (scalar pb_stages) and the last micro-batch (pb_micro_batches 16: 0 to 15).
    pipeprop::checkpoint pb = state_with(nan, "layer_03.weight");
    pb.set_scalar("pb_micro_batches", 16);
    pb.set_scalar("pb_stages", "0-2,2-4,4-6");
    pb.set_scalar("step_count", 16);
    try {
        train::require_finite_state(pb, std::nan(""), 4, 16);
        FAIL("no exception");
    } catch (const pipeprop::non_finite_loss_error& e) {
        CHECK(e.step() == 15);
        CHECK(e.samples_seen() == 16);
        CHECK_THAT(std::string(e.what()),
                   Catch::Contains("tensor 'layer_03.weight' (layer 3, stage 1) holds NaN at index 2, and the "
                                   "evaluation loss is NaN") &&
                       Catch::Contains("up to micro-batch 15 (the last of epoch 4, after 16 samples; the drain"));
    }
    CHECK(train::stage_of_layer(pb, 0) == 0u);
    CHECK(train::stage_of_layer(pb, 5) == 2u);
    CHECK(!train::stage_of_layer(pb, 6));
    CHECK(!train::stage_of_layer(sgd, 0));
    CHECK(train::layer_of_tensor("layer_12.body_01.gamma") == 12u);
    CHECK(!train::layer_of_tensor("pb_stage_00"));
}

TEST_CASE("require_finite_state: a non-finite evaluation loss with a finite state is refused", "[train][checkpoint]") {
    pipeprop::checkpoint c = state_with(0.0f, "");
    c.set_scalar("step_count", 2);
    const std::string m = message_of([&] { train::require_finite_state(c, INFINITY, 2, 64); });
    CHECK_THAT(m, Catch::Contains("epoch 2 is not finite: the evaluation loss became infinite") &&
                      Catch::Contains("update 1 (the last of epoch 2, after 64 samples)"));
}

TEST_CASE("require_same_network: a checkpoint of another network names both", "[train][checkpoint]") {
    pipeprop::checkpoint cnn;
    cnn.set_scalar("network", "cnn");
    cnn.set_scalar("network_type", "cnn");
    CHECK_NOTHROW(train::require_same_network(cnn, "cnn", "cnn", "ck"));
    CHECK_THAT(message_of([&] { train::require_same_network(cnn, "cnn-on", "cnn-on", "ck"); }),
               Catch::Contains("ck: a checkpoint of --network cnn, but this run trains --network cnn-on; resume it "
                               "with --network cnn, or start"));
    pipeprop::checkpoint old_cnn;  // saved before network_type was written
    old_cnn.set_scalar("network", "cnn");
    CHECK_THAT(message_of([&] { train::require_same_network(old_cnn, "cnn-on", "cnn-on", "ck"); }),
               Catch::Contains("a checkpoint of --network cnn, but this run trains --network cnn-on"));
    pipeprop::checkpoint resnet;  // the same --network, another --norm
    resnet.set_scalar("network", "resnet20");
    resnet.set_scalar("network_type", "resnet20-on");
    CHECK_THAT(message_of([&] { train::require_same_network(resnet, "resnet20", "resnet20", "ck"); }),
               Catch::Contains("a checkpoint of --network resnet20 (network type resnet20-on), but this run trains "
                               "--network resnet20; resume it with --network resnet20 and the --norm / --data of "
                               "network type resnet20-on"));
    CHECK_NOTHROW(train::require_same_network(pipeprop::checkpoint{}, "mlp", "mlp", "ck"));  // no scalars: unknown
}
