// No heap allocation in the per-micro-batch hot path after setup (DEVELOPERS.md rules; layer_concept.hpp contract).
//
// This program replaces the global operator new / operator delete (all forms) with counting versions. Because
// pipeprop's buffers use xsimd::aligned_allocator (posix_memalign, not operator new) and BLAS is C code, it also
// counts the C allocation entry points (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign) by
// interposing them and forwarding to glibc's own implementation (__libc_malloc, ...), where the C library is glibc.
// The counters are shown to move before they are trusted to stay at zero.
//
// Measured: the main program's small CNN (1x28x28: conv(16,3,pad 1) - group_norm(4) - relu - max_pool(2) -
// conv(32,3,pad 1) - group_norm(4) - relu - max_pool(2) - flatten - dense(128) - relu - dense(10)) in float:
// forward, loss gradient, backward-p1, backward-p2 and the fused backward, at b = 1 and b = 32, after
// make_activations / make_workspaces and one warm-up step (BLAS sets up its buffers on first use).
//
// BLAS threading: multi-threaded OpenBLAS 0.3.21 (Debian 12) mallocs its job descriptors on every GEMM call that it
// splits across threads, so "no allocation" holds with single-threaded BLAS, which is what a pipeline wants anyway
// (one thread per stage). ctest runs every test with OPENBLAS_NUM_THREADS=1; this program also sets it itself so
// that it measures pipeprop, not the environment.
#include <catch2/catch.hpp>

#include <cblas.h>

#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "unit/allocation_counter.hpp"

namespace pp = pipeprop;
using pp::shape;

namespace {
using allocation_counter::snapshot;
// Keeps test allocations observable so that the compiler cannot elide a new/delete pair.
void* volatile sink = nullptr;
}  // namespace

TEST_CASE("the allocation counters see allocations", "[allocation]") {
    // All snapshots first: Catch2's assertion macros may allocate themselves.
    const auto before = snapshot();
    sink = new std::uint64_t(42);
    delete static_cast<std::uint64_t*>(sink);
    const auto after_new = snapshot();
    {
        std::vector<float> v(1000, 1.0f);
        sink = v.data();
    }
    const auto after_vector = snapshot();
    {
        pp::aligned_vector<float> a(1000, 1.0f);  // xsimd::aligned_allocator: posix_memalign, not operator new
        sink = a.data();
    }
    const auto after_aligned = snapshot();
    CHECK(after_new.operator_new == before.operator_new + 1);
    CHECK(after_vector.operator_new == after_new.operator_new + 1);
    CHECK(after_aligned.operator_new == after_vector.operator_new);
#if PIPEPROP_COUNTS_C_ALLOCATIONS
    CHECK(after_new.c_level == before.c_level + 1);  // operator new is implemented with malloc
    CHECK(after_aligned.c_level == after_vector.c_level + 1);
#endif
}

using issue3_cnn = pp::network<shape<1, 28, 28>,                                                         //
                               pp::conv2d<16, 3, 1, 1>, pp::group_norm<4>, pp::relu, pp::max_pool2d<2>,  //
                               pp::conv2d<32, 3, 1, 1>, pp::group_norm<4>, pp::relu, pp::max_pool2d<2>,  //
                               pp::flatten, pp::dense<128>, pp::relu, pp::dense<10>>;

TEST_CASE("small CNN: forward, p1, p2 and fused backward allocate nothing after setup", "[allocation][network]") {
    using stack_t = pp::layer_stack<issue3_cnn, float>;
    using loss = pp::softmax_cross_entropy<float, 10>;
#if defined(OPENBLAS_VERSION)
    openblas_set_num_threads(1);  // see the file comment
#endif
    stack_t stack;
    std::vector<float> w(stack_t::parameter_count), dw(stack_t::parameter_count, 0.0f);
    stack.init_parameters(w, 3);
    for (std::size_t b : {1u, 32u}) {
        auto act = stack.make_activations(stack_t::all(), b);
        auto ws = stack.make_workspaces(stack_t::all(), b);
        std::vector<std::int32_t> labels(b);
        std::mt19937_64 rng(b);
        for (std::size_t i = 0; i < b * 784; ++i) act.input()[i] = pp::uniform<float>(rng, 0.0f, 1.0f);
        for (std::size_t n = 0; n < b; ++n) labels[n] = static_cast<std::int32_t>(n % 10);
        auto step = [&] {
            stack.forward(w, act, b, ws);
            loss::loss_and_gradient(act.output(), labels.data(), b, act.output_gradient());
            stack.backward_input(w, act, b, ws);
            stack.backward_weight(dw, act, b, ws);
            stack.backward(w, dw, act, b, ws);
        };
        step();  // warm-up: first BLAS call
        const auto before = snapshot();
        for (int i = 0; i < 3; ++i) step();
        const auto after = snapshot();
        INFO("b = " << b);
        CHECK(after.operator_new - before.operator_new == 0);
        CHECK(after.c_level - before.c_level == 0);
        // The steps did real work: the loss is finite and the gradient is not all zero.
        CHECK(std::isfinite(loss::loss(act.output(), labels.data(), b)));
        CHECK(std::any_of(dw.begin(), dw.end(), [](float v) { return v != 0.0f; }));
    }
}

TEST_CASE("small CNN: a full training step (sequential_trainer::train_batch) allocates nothing after setup",
          "[allocation][trainer]") {
    // The whole training step: input copy, forward, loss and its gradient, gradient zeroing, fused backward and the
    // momentum-SGD update (optim::momentum_update), heavy-ball and Nesterov, at b = 1 and b = 32.
#if defined(OPENBLAS_VERSION)
    openblas_set_num_threads(1);  // see the file comment
#endif
    for (bool nesterov : {false, true})
        for (std::size_t b : {1u, 32u}) {
            pp::sequential_trainer_config cfg;
            cfg.max_batch = b;
            cfg.momentum = 0.9;
            cfg.weight_decay = 1e-4;
            cfg.optimizer.nesterov = nesterov;
            cfg.schedule = pp::optim::lr_schedule::constant(0.01);
            pp::sequential_trainer<issue3_cnn, float> trainer(cfg);
            std::vector<float> x(b * 784);
            std::vector<std::int32_t> labels(b);
            std::mt19937_64 rng(b + 7);
            for (auto& v : x) v = pp::uniform<float>(rng, 0.0f, 1.0f);
            for (std::size_t n = 0; n < b; ++n) labels[n] = static_cast<std::int32_t>(n % 10);
            const std::vector<float> w0(trainer.parameters().begin(), trainer.parameters().end());
            float loss = trainer.train_batch(x.data(), labels.data(), b);  // warm-up: first BLAS call
            const auto before = snapshot();
            for (int i = 0; i < 3; ++i) loss = trainer.train_batch(x.data(), labels.data(), b);
            const auto after = snapshot();
            INFO("b = " << b << ", nesterov = " << nesterov);
            CHECK(after.operator_new - before.operator_new == 0);
            CHECK(after.c_level - before.c_level == 0);
            // The steps did real work: finite loss, parameters moved.
            CHECK(std::isfinite(loss));
            CHECK(trainer.step_count() == 4);
            CHECK_FALSE(std::equal(w0.begin(), w0.end(), trainer.parameters().begin()));
        }
}
