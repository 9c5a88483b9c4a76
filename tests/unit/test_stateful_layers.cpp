// Stateful layers (layer_concept.hpp): a layer with a running-state block that its forward and its
// backward-p1 update in sample order (as Online Normalization does). The runners keep the state per stage, next to
// the parameters: training updates it, evaluation reads it and changes nothing, checkpoints carry it, and the PB
// executors (concurrent == sequential bitwise, weights AND state) and every synchronous schedule agree on it.
#include <catch2/catch.hpp>

#include <pipeprop/pb/checkpoint.hpp>
#include <pipeprop/pipeprop.hpp>

#include <filesystem>
#include <unistd.h>

#include "unit/test_pb_support.hpp"

using namespace pb_test;

namespace {

/// y = x - m (m: running mean of the forward inputs, updated after each sample with decay 0.9);
/// dx = dy - 0.5 u (u: running mean of the incoming gradients, updated after each sample). Not an exact gradient,
/// like Online Normalization's; forward state and backward state are disjoint (layer_concept.hpp).
struct running_center {
    template <class T, class In>
    struct bind {
        using value_type = T;
        using input_shape = In;
        using output_shape = In;
        static constexpr std::size_t n = In::size;
        static constexpr std::size_t parameter_count = 0;
        static constexpr std::size_t state_count = 2;
        static constexpr std::array<pp::parameter_tensor, 2> state_tensors() {
            return {pp::parameter_tensor{"mean", 1, {1, 1, 1, 1}}, pp::parameter_tensor{"grad_mean", 1, {1, 1, 1, 1}}};
        }
        void init_state(std::span<T> s) const { s[0] = s[1] = T(0); }
        void forward(std::span<const T>, const T* x, T* y, std::size_t b, pp::no_stash&, pp::no_workspace&,
                     std::span<T> s) const {
            for (std::size_t i = 0; i < b; ++i) {
                T mean = 0;
                for (std::size_t j = 0; j < n; ++j) {
                    y[i * n + j] = x[i * n + j] - s[0];
                    mean += x[i * n + j];
                }
                s[0] = T(0.9) * s[0] + T(0.1) * mean / T(n);
            }
        }
        void infer(std::span<const T>, const T* x, T* y, std::size_t b, pp::no_workspace&,
                   std::span<const T> s) const {
            for (std::size_t j = 0; j < b * n; ++j) y[j] = x[j] - s[0];
        }
        void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b,
                            const pp::no_stash&, pp::no_workspace&, std::span<T> s) const {
            for (std::size_t i = 0; i < b; ++i) {
                T mean = 0;
                for (std::size_t j = 0; j < n; ++j) {
                    dx[i * n + j] = dy[i * n + j] - T(0.5) * s[1];
                    mean += dy[i * n + j];
                }
                s[1] = T(0.9) * s[1] + T(0.1) * mean / T(n);
            }
        }
    };
};

static_assert(pp::layer<running_center::bind<float, shape<4>>>);

using net = pp::network<shape<6>, pp::dense<8>, running_center, pp::relu,
                        pp::residual<pp::dense<8>, running_center>, pp::dense<3>>;
using stack = pp::layer_stack<net, float>;
static_assert(stack::state_count == 4 && stack::state_offset[1] == 0 && stack::state_offset[2] == 2);

template <class Pipe>
std::vector<float> state_of(const Pipe& p) {
    std::vector<float> s;
    for (const auto& st : p.stages()) s.insert(s.end(), st.state().begin(), st.state().end());
    return s;
}

}  // namespace

TEST_CASE("sequential trainer: training updates the state, evaluation does not, checkpoints carry it",
          "[stateful][trainer]") {
    pp::sequential_trainer<net> t({.max_batch = 4, .schedule = {}, .momentum = 0.9, .seed = 3});
    data_stream<net> data(40, 3, 9);
    CHECK(t.state()[0] == 0.0f);
    for (std::size_t i = 0; i < 8; ++i) t.train_batch(data.x.data() + 4 * i * 6, data.labels.data() + 4 * i, 4);
    const std::vector<float> after(t.state().begin(), t.state().end());
    CHECK(after[0] != 0.0f);
    CHECK(after[1] != 0.0f);
    (void)t.evaluate(data.x.data(), data.labels.data(), 40);
    CHECK(std::vector<float>(t.state().begin(), t.state().end()) == after);
    pp::checkpoint c;
    t.save_state(c);
    CHECK(c.has_tensor("layer_01.mean"));
    CHECK(c.has_tensor("layer_03.body_01.grad_mean"));
    pp::sequential_trainer<net> u({.max_batch = 4, .schedule = {}, .momentum = 0.9, .seed = 3});
    u.load_state(c);
    CHECK(std::vector<float>(u.state().begin(), u.state().end()) == after);
}

TEST_CASE("PB: concurrent == sequential bitwise on weights and running state; a resume restores the state",
          "[stateful][pb]") {
    openblas_set_num_threads(1);
    using pipe = pb::pipeline<net, pp::fine_grained<pp::parameter_free::own_stage>, pb::policy::sc_lwp<>>;
    static_assert(pipe::stage_count == net::layer_count);
    pb::options<pb::policy::sc_lwp<>> o;
    o.max_batch = 2;
    o.seed = 5;
    o.executor = pb::executor_kind::sequential;
    pipe seq(o);
    o.executor = pb::executor_kind::concurrent;
    o.push_buffer = 16;  // graph runs inside each segment, not only at the drains
    pipe con(o);
    const auto rs = drive(seq, 150, 2, 1, 60);
    const auto rc = drive(con, 150, 2, 1, 60);
    CHECK(bitwise_equal(rs.weights, rc.weights));
    CHECK(bitwise_equal(rs.losses, rc.losses));
    CHECK(bitwise_equal(state_of(seq), state_of(con)));
    CHECK(state_of(seq)[0] != 0.0f);
    // Evaluation reads the state and changes nothing.
    const auto before = state_of(con);
    data_stream<net> test(20, 3, 4);
    (void)con.evaluate(test.x, test.labels, 20);
    CHECK(bitwise_equal(state_of(con), before));
    // Checkpoint: the state travels.
    temp_dir dir("pipeprop_stateful_");
    pb::save_checkpoint(con, dir.path / "c");
    o.seed = 99;
    pipe resumed(o);
    pb::load_checkpoint(resumed, dir.path / "c");
    CHECK(bitwise_equal(state_of(resumed), before));
}

TEST_CASE("sync: every schedule, with and without 2BP, leaves the same running state and weights",
          "[stateful][sync]") {
    openblas_set_num_threads(1);
    namespace ps = pp::sync;
    data_stream<net> data(12, 3, 8);
    std::vector<float> first_state, first_w;
    auto run = [&]<ps::schedule_kind K, bool Two>(ps::executor_kind ek) {
        ps::pipeline_executor<net, float, K, Two> ex(pp::partition_at(net::layer_count, {2, 5}),
                                                     {.micro_batches = 4, .max_batch = 12, .seed = 2, .executor = ek});
        ex.step(data.x, data.labels, {.learning_rate = 0.01, .momentum = 0.9});
        ex.step(data.x, data.labels, {.learning_rate = 0.01, .momentum = 0.9});
        const auto s = ex.state();
        REQUIRE(s.size() == 4);
        CHECK(s[0] != 0.0f);
        if (first_state.empty()) {
            first_state = s;
            first_w = ex.parameters();
        } else {
            CHECK(s == first_state);
            CHECK(bitwise_equal(ex.parameters(), first_w));
        }
    };
    for (auto ek : {ps::executor_kind::sequential, ps::executor_kind::concurrent}) {
        run.template operator()<ps::schedule_kind::gpipe, false>(ek);
        run.template operator()<ps::schedule_kind::gpipe, true>(ek);
        run.template operator()<ps::schedule_kind::one_f_one_b, false>(ek);
        run.template operator()<ps::schedule_kind::one_f_one_b, true>(ek);
        run.template operator()<ps::schedule_kind::zb_h1, true>(ek);
        run.template operator()<ps::schedule_kind::zb_h2, true>(ek);
    }
}
