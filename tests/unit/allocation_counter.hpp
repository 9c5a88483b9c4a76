// tests/unit/allocation_counter.hpp: counts every heap allocation of a test program, for the zero-allocation tests
// (tests/unit/test_no_allocation.cpp, tests/unit/test_pb_no_allocation.cpp).
//
// It replaces the global operator new / delete (every form counts; deletes only free) and, on glibc, interposes
// malloc, calloc, realloc, memalign, aligned_alloc and posix_memalign (glibc manual, "Replacing malloc"; they
// forward to glibc's own allocator, free is not replaced), so allocations inside BLAS and oneTBB count as well.
// These are definitions, not declarations: include this file in exactly ONE translation unit of a test program.
// allocation_counter::snapshot() reads both counters; PIPEPROP_COUNTS_C_ALLOCATIONS says whether the C level is
// counted on this platform.
//
// Under a sanitizer that owns the allocator (ASan, TSan, MSan, LSan), replacing malloc and operator new breaks its
// runtime (the programs crashed at start under ASan), and counting would measure the sanitizer anyway: compiled that
// way, this file replaces nothing and the program exits at start-up with 77, which ctest reports as skipped
// (SKIP_RETURN_CODE 77, tests/CMakeLists.txt). The sanitizer builds of tests/hardening.cmake leave these tests out.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PIPEPROP_ALLOCATOR_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(leak_sanitizer)
#define PIPEPROP_ALLOCATOR_SANITIZED 1
#endif
#endif

#if defined(PIPEPROP_ALLOCATOR_SANITIZED)
#include <cstdio>
#include <cstdlib>

namespace {
[[maybe_unused]] const int allocation_counter_skip = [] {
    std::fputs("allocation_counter.hpp: built with a sanitizer that owns malloc; the allocation-counting tests "
               "cannot run (skipped, exit 77)\n",
               stderr);
    std::_Exit(77);
    return 0;
}();
}  // namespace
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {
std::atomic<std::size_t> operator_new_calls{0};
std::atomic<std::size_t> c_allocation_calls{0};

#if !defined(PIPEPROP_ALLOCATOR_SANITIZED)
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
#endif
}  // namespace

#if defined(PIPEPROP_ALLOCATOR_SANITIZED)
#define PIPEPROP_COUNTS_C_ALLOCATIONS 0
#else
// Replaceable global allocation functions ([new.delete]): every form counts; deletes only free.
void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, std::align_val_t al) { return counted_new_aligned(n, al); }
void* operator new[](std::size_t n, std::align_val_t al) { return counted_new_aligned(n, al); }
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
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

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
#endif  // !PIPEPROP_ALLOCATOR_SANITIZED


namespace allocation_counter {
/// Allocations counted so far: through operator new, and through the C functions (0 when not counted).
struct counts {
    std::size_t operator_new = 0;
    std::size_t c_level = 0;
    [[nodiscard]] std::size_t total() const noexcept { return operator_new + c_level; }
};
[[nodiscard]] inline counts snapshot() noexcept {
    return {operator_new_calls.load(std::memory_order_relaxed), c_allocation_calls.load(std::memory_order_relaxed)};
}
}  // namespace allocation_counter
