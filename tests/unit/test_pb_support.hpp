// Shared helpers of the PB tests (tests/unit/test_pb_*.cpp): small networks, deterministic data, bitwise
// comparison of two engines, a driver that pushes a sequence of micro-batches with a changing schedule.
#pragma once

#include <cblas.h>

#include <pipeprop/pb/pipeline.hpp>
#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <cstring>
#include <random>
#include <vector>

namespace pb_test {

namespace pp = pipeprop;
namespace pb = pipeprop::pb;
using pp::shape;

/// Small CNN over 1x6x6 inputs: 10 layers, 4 parametric; fine_grained<own_stage> gives S = 10, attach gives S = 4.
using cnn = pp::network<shape<1, 6, 6>, pp::conv2d<3, 3, 1, 1>, pp::group_norm<1>, pp::relu, pp::max_pool2d<2>,
                        pp::conv2d<4, 3, 1, 1>, pp::relu, pp::flatten, pp::dense<8>, pp::relu, pp::dense<3>>;
/// Small MLP: 6 layers, 3 parametric.
using mlp = pp::network<shape<2, 3, 2>, pp::flatten, pp::dense<8>, pp::relu, pp::dense<5>, pp::relu, pp::dense<3>>;

/// Deterministic micro-batch data: sample i of the stream has inputs uniform in [-1, 1] and label from a hash.
template <class Net>
struct data_stream {
    static constexpr std::size_t input_size = Net::input_shape::size;
    std::vector<float> x;
    std::vector<std::int32_t> labels;
    explicit data_stream(std::size_t samples, std::size_t classes = 3, std::uint64_t seed = 5)
        : x(samples * input_size), labels(samples) {
        std::mt19937_64 rng(seed);
        for (auto& v : x) v = pp::uniform<float>(rng, -1.0f, 1.0f);
        for (std::size_t i = 0; i < samples; ++i) labels[i] = static_cast<std::int32_t>(rng() % classes);
    }
    std::span<const float> xs(std::size_t first, std::size_t b) const {
        return {x.data() + first * input_size, b * input_size};
    }
    std::span<const std::int32_t> ys(std::size_t first, std::size_t b) const { return {labels.data() + first, b}; }
};

/// Hyperparameters of micro-batch n in the test runs: a step schedule on the learning rate and a momentum change,
/// so that every micro-batch must carry its own values through the pipeline. Small enough that no test run diverges
/// (delays up to 18 on random labels; with 0.05 the losses became NaN after ~50 micro-batches, which pb::engine
/// now reports by throwing non_finite_loss_error).
inline pp::optim::hyperparameters<float> schedule(std::size_t n, bool fixed_momentum = false) {
    pp::optim::hyperparameters<float> h;
    h.learning_rate = n < 60 ? 0.01f : (n < 140 ? 0.005f : 0.002f);
    h.momentum = fixed_momentum ? 0.9f : (n < 100 ? 0.9f : 0.8f);
    h.weight_decay = 1e-3f;
    return h;
}

/// Everything observable about a finished run: every completed micro-batch (in order), weights and velocities.
struct run_record {
    std::vector<std::size_t> ids;
    std::vector<float> losses;
    std::vector<std::size_t> correct;
    std::vector<float> weights;
    std::vector<float> velocities;
};

/// Pushes `count` micro-batches of b samples (the last one partial when `partial_last` < b, if nonzero), drains
/// after micro-batch `drain_at` (if nonzero) and at the end. poison: push NaN inputs and targets -1 instead (for a
/// process whose stage 0 runs elsewhere, which must not read them: tests/mpi).
template <class Engine>
run_record drive(Engine& e, std::size_t count, std::size_t b, std::size_t partial_last, std::size_t drain_at,
                 bool fixed_momentum = false, bool poison = false) {
    using net = typename Engine::network_type;
    data_stream<net> data(count * b, Engine::classes);
    if (poison) {
        std::fill(data.x.begin(), data.x.end(), std::numeric_limits<float>::quiet_NaN());
        std::fill(data.labels.begin(), data.labels.end(), -1);
    }
    run_record r;
    auto take = [&](auto done) {
        for (const auto& c : done) {
            r.ids.push_back(c.id);
            r.losses.push_back(c.loss);
            r.correct.push_back(c.correct);
        }
    };
    std::size_t first = 0;
    for (std::size_t n = 0; n < count; ++n) {
        const std::size_t bn = (n + 1 == count && partial_last != 0) ? partial_last : b;
        e.set_hyperparameters(schedule(n, fixed_momentum));
        take(e.push(data.xs(first, bn), data.ys(first, bn), bn));
        first += bn;
        if (drain_at != 0 && n + 1 == drain_at) take(e.drain());
    }
    take(e.drain());
    r.weights.resize(Engine::stack_type::parameter_count);
    r.velocities.resize(Engine::stack_type::parameter_count);
    e.copy_parameters(r.weights);
    e.copy_velocities(r.velocities);
    return r;
}

/// A fresh temporary directory named after `tag` and the process id, removed with its contents at scope exit.
struct temp_dir {
    std::filesystem::path path;
    explicit temp_dir(const std::string& tag)
        : path(std::filesystem::temp_directory_path() / (tag + std::to_string(::getpid()))) {
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~temp_dir() { std::filesystem::remove_all(path); }
};

/// Pushes micro-batches [from, to) of a fixed stream of b-sample micro-batches (`stream_samples` samples from
/// data_stream(seed); hyperparameters by schedule(n)) and drains at the end; returns the completed losses in order.
template <class Engine>
std::vector<float> run_span(Engine& e, std::size_t from, std::size_t to, std::size_t b, std::size_t stream_samples,
                            std::uint64_t seed) {
    data_stream<typename Engine::network_type> data(stream_samples, Engine::classes, seed);
    std::vector<float> losses;
    for (std::size_t n = from; n < to; ++n) {
        e.set_hyperparameters(schedule(n));
        for (const auto& c : e.push(data.xs(n * b, b), data.ys(n * b, b), b)) losses.push_back(c.loss);
    }
    for (const auto& c : e.drain()) losses.push_back(c.loss);
    return losses;
}

/// Bitwise equality of two float vectors (distinguishes -0 and +0, equal NaN payloads compare equal).
inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace pb_test
