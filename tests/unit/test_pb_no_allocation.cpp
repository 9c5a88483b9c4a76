// PB hot path: no heap allocation per micro-batch after setup (DEVELOPERS.md rules; issue 4), in push() and
// drain() of both executors on the small CNN of the main job, at b = 1 and b = 3, after a warm-up (BLAS and oneTBB
// set up their buffers and task pools on first use).
//
// The counting harness is the one of tests/unit/test_no_allocation.cpp (replaced global operator new / delete and
// interposed glibc allocation functions); the counters are shown to move before they are trusted to stay at zero.
// What the concurrent executor's flow graph allocates inside oneTBB (its own small-object pools, task objects) goes
// through these functions too, so it is counted as well.
#include <catch2/catch.hpp>

#include <cblas.h>

#include <pipeprop/pb/pipeline.hpp>
#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

namespace {
std::atomic<std::size_t> operator_new_calls{0};
std::atomic<std::size_t> c_allocation_calls{0};

void* counted_new(std::size_t n) {
    operator_new_calls.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
void* counted_new_aligned(std::size_t n, std::align_val_t al) {
    operator_new_calls.fetch_add(1, std::memory_order_relaxed);
    void* p = nullptr;
    const std::size_t a = std::max(static_cast<std::size_t>(al), sizeof(void*));
    if (posix_memalign(&p, a, n == 0 ? 1 : n) != 0) throw std::bad_alloc();
    return p;
}
}  // namespace

// Replaceable global allocation functions ([new.delete]): every form counts; deletes only free.
void* operator new(std::size_t n) {
    return counted_new(n);
}
void* operator new[](std::size_t n) {
    return counted_new(n);
}
void* operator new(std::size_t n, std::align_val_t al) {
    return counted_new_aligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al) {
    return counted_new_aligned(n, al);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return counted_new(n);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return counted_new(n);
    } catch (...) {
        return nullptr;
    }
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    try {
        return counted_new_aligned(n, al);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    try {
        return counted_new_aligned(n, al);
    } catch (...) {
        return nullptr;
    }
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
    std::free(p);
}

#if defined(__GLIBC__)
#define PIPEPROP_COUNTS_C_ALLOCATIONS 1
// glibc supports replacing its allocation functions in the program (glibc manual, "Replacing malloc"); these
// forward to glibc's own allocator, so memory from either side may be freed by the other. free is not replaced.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);

void* malloc(std::size_t n) {
    c_allocation_calls.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) {
    c_allocation_calls.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) {
    c_allocation_calls.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(p, n);
}
void* memalign(std::size_t alignment, std::size_t n) {
    c_allocation_calls.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
    c_allocation_calls.fetch_add(1, std::memory_order_relaxed);
    return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) {
    c_allocation_calls.fetch_add(1, std::memory_order_relaxed);
    if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
    void* p = __libc_memalign(alignment, n);
    if (p == nullptr) return ENOMEM;
    *out = p;
    return 0;
}
}
#else
#define PIPEPROP_COUNTS_C_ALLOCATIONS 0
#endif

namespace pp = pipeprop;
namespace pb = pipeprop::pb;
using pp::shape;

namespace {
std::size_t allocations() {
    return operator_new_calls.load(std::memory_order_relaxed) + c_allocation_calls.load(std::memory_order_relaxed);
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
