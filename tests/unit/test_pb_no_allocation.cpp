// PB hot path: no heap allocation per micro-batch after setup (DEVELOPERS.md rules), in push() and
// drain() of both executors on the small CNN of the main job, at b = 1 and b = 3, after a warm-up (BLAS and oneTBB
// set up their buffers and task pools on first use); and in the lanes' rebalancing, whose looks run between graph runs.
//
// The counting harness is tests/unit/allocation_counter.hpp (replaced global operator new / delete and interposed
// glibc allocation functions, shared with tests/unit/test_no_allocation.cpp); the counters are shown to move before
// they are trusted to stay at zero.
// What the concurrent executor's flow graph allocates inside oneTBB (its own small-object pools, task objects) goes
// through these functions too, so it is counted as well.
#include <catch2/catch.hpp>

#include <cblas.h>

#include <pipeprop/pb/lane_rebalance.hpp>
#include <pipeprop/pb/pipeline.hpp>
#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "unit/allocation_counter.hpp"

namespace pp = pipeprop;
namespace pb = pipeprop::pb;
using pp::shape;

namespace {
std::size_t allocations() {
    return allocation_counter::snapshot().total();
}
void* volatile sink = nullptr;

using main_cnn = pp::network<shape<1, 28, 28>,                                                         //
                             pp::conv2d<16, 3, 1, 1>, pp::group_norm<4>, pp::relu, pp::max_pool2d<2>,  //
                             pp::conv2d<32, 3, 1, 1>, pp::group_norm<4>, pp::relu, pp::max_pool2d<2>,  //
                             pp::flatten, pp::dense<128>, pp::relu, pp::dense<10>>;

template <class Policy>
std::size_t allocations_in_training(pb::executor_kind kind, std::size_t b) {
    pb::options<Policy> o;
    o.executor = kind;
    o.max_batch = b;
    o.push_buffer = 8;
    // The lanes' rebalancing (pb/lane_rebalance.hpp) allocates nothing at its looks (the test case below) but a new
    // flow graph at a new cut, which depends on the stages' timing; with runs of 8 it would look every 16
    // micro-batches.
    o.lane_rebalance_period = 0;
    pb::pipeline<main_cnn, pp::fine_grained<>, Policy> p(o);
    p.set_hyperparameters({1e-3f, 0.9f, 1e-4f});
    constexpr std::size_t in = 28 * 28;
    std::vector<float> x(64 * in);
    std::vector<std::int32_t> y(64);
    std::mt19937_64 rng(7);
    for (auto& v : x) v = pp::uniform<float>(rng, 0.0f, 1.0f);
    for (auto& v : y) v = static_cast<std::int32_t>(rng() % 10);
    auto push = [&](std::size_t i, std::size_t bn) {
        const std::size_t k = (i * b) % (64 - b);
        (void)p.push({x.data() + k * in, bn * in}, {y.data() + k, bn}, bn);
    };
    for (std::size_t i = 0; i < 40; ++i) push(i, b);  // warm-up, including a drain and a partial micro-batch
    push(40, 1);
    (void)p.drain();
    const std::size_t before = allocations();
    for (std::size_t i = 0; i < 60; ++i) push(i, b);
    push(60, 1);
    (void)p.drain();
    for (std::size_t i = 0; i < 20; ++i) push(i, b);
    (void)p.drain();
    return allocations() - before;
}
}  // namespace

TEST_CASE("the allocation counters see allocations", "[pb][allocation]") {
    const std::size_t before = allocations();
    sink = new std::uint64_t(42);
    delete static_cast<std::uint64_t*>(sink);
    {
        pp::aligned_vector<float> a(1000, 1.0f);
        sink = a.data();
    }
    const std::size_t after = allocations();
    CHECK(after >= before + 2);
}

TEST_CASE("PB push and drain allocate nothing after setup", "[pb][allocation]") {
    openblas_set_num_threads(1);
    for (std::size_t b : {1u, 3u}) {
        for (auto kind : {pb::executor_kind::sequential, pb::executor_kind::concurrent}) {
            INFO("b = " << b << ", executor " << pb::to_string(kind));
            CHECK(allocations_in_training<pb::policy::sc_lwp<>>(kind, b) == 0);
            CHECK(allocations_in_training<pb::policy::weight_stashing>(kind, b) == 0);
            CHECK(allocations_in_training<pb::policy::pipemare>(kind, b) == 0);
        }
    }
}

TEST_CASE("lane rebalancing: measured runs and looks allocate nothing, a new cut is returned", "[pb][allocation]") {
    constexpr std::size_t S = 20;
    pb::lane_rebalancer r(1, pb::lane_plan{{0, 10}}, S);  // a look after every measured run
    std::vector<double> busy(S, 0.0);
    // One measured run in which stage s is busy cost(s) seconds more, and the rebalancer's answer.
    const auto run = [&](auto cost) {
        r.run_starts(busy);
        for (std::size_t s = 0; s < S; ++s) busy[s] += cost(s);
        return r.run_ended(busy);
    };
    const auto even = [](std::size_t) { return 1.0; };                   // the cut at 10 is best
    const auto late = [](std::size_t s) { return s < 12 ? 1.0 : 1.5; };  // the best cut is at 12 (12 / 12)
    const auto early = [](std::size_t s) { return s < 8 ? 1.5 : 1.0; };  // the best cut is at 8 (12 / 12)
    // The answers are collected first and checked after the count (Catch's assertions allocate).
    std::array<bool, 7> replanned{};
    const std::size_t before = allocations();
    for (std::size_t k = 0; k < 4; ++k) replanned[k] = run(even).has_value();  // looks that keep the plan
    replanned[4] = run(late).has_value();   // a first look that finds a better cut: remembered, not adopted
    replanned[5] = run(early).has_value();  // another cut: remembered instead
    replanned[6] = run(even).has_value();   // the plan's own cut again: forgotten
    const std::size_t looks_allocated = allocations() - before;
    CHECK(looks_allocated == 0);
    CHECK(std::ranges::none_of(replanned, [](bool b) { return b; }));
    CHECK(r.stats().checks == 7);
    CHECK_FALSE(run(late).has_value());
    const auto adopted = run(late);  // two looks in a row agree: the new plan is returned
    REQUIRE(adopted.has_value());
    CHECK(adopted->first_stage == std::vector<std::size_t>{0, 12});
    CHECK(r.plan().first_stage == std::vector<std::size_t>{0, 12});
}
