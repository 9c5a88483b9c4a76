// pipeprop/flush_subnormals.hpp: run a piece of stage work with subnormal floating-point numbers flushed to zero.
//
// Subnormal (denormal) operands and results cost x86 cores tens to hundreds of cycles per operation. In PB with the
// momentum close to 1 that the batch-size scaling rules give at b = 1 (docs/pb-semantics.md §4), the velocity of a weight
// whose gradient stays 0 (an input that is always 0) decays as m^k into the subnormal range, and every update of that
// stage then runs at a fraction of its speed, more so as an epoch goes on (bench/README.md, "Why the PB pipeline
// slows down over an epoch"). Flushing (x86 MXCSR: FTZ, results; DAZ, operands) makes such values 0; results can
// differ from an unflushed run where a subnormal would have mattered.
// Engines apply it per stage op when asked (pb::options::flush_subnormals), in every executor alike, so the
// executors stay bit-identical to each other. On targets without SSE the guard does nothing.
#pragma once

#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
#define PIPEPROP_HAS_MXCSR 1
#else
#define PIPEPROP_HAS_MXCSR 0
#endif

namespace pipeprop {

/// While alive (and when `on`), the calling thread flushes subnormal float and double results and operands to zero;
/// the destructor restores the thread's previous setting. Not copyable.
class scoped_flush_subnormals {
public:
    /// Flushes subnormals when `on` (no effect where the CPU has no such mode); the destructor restores.
    explicit scoped_flush_subnormals(bool on) noexcept {
#if PIPEPROP_HAS_MXCSR
        if (on) {
            saved_ = _mm_getcsr();
            _mm_setcsr(saved_ | flush_bits);
            active_ = true;
        }
#else
        (void)on;
#endif
    }
    ~scoped_flush_subnormals() {
#if PIPEPROP_HAS_MXCSR
        if (active_) _mm_setcsr(saved_);
#endif
    }
    scoped_flush_subnormals(const scoped_flush_subnormals&) = delete;
    scoped_flush_subnormals& operator=(const scoped_flush_subnormals&) = delete;

    /// True when this target can flush (x86 with SSE).
    static constexpr bool supported = PIPEPROP_HAS_MXCSR != 0;

private:
#if PIPEPROP_HAS_MXCSR
    static constexpr unsigned flush_bits = 0x8040u;  // FTZ (bit 15) | DAZ (bit 6)
    unsigned saved_ = 0;
#endif
    bool active_ = false;
};

}  // namespace pipeprop
