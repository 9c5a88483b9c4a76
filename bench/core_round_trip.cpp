// bench/core_round_trip.cpp: how expensive it is, right now, for one core to see what another core just wrote.
//
// Prints the mean round trip of one cache line between two threads pinned to CPUs `a` and `b` (default 0 and 1), in
// nanoseconds, and the rate at which the thread on `b` reads a 2 MiB buffer just written on `a` (GB/s), next to
// the rate of re-reading it on `a`. bench/pb_executors.sh prints it before and after its runs: the concurrent PB
// executor hands activation slots and whole stages (a stage's weights, velocity and gradient: 3.2 MB for the
// dense 1568->128 stage) from core to core, so its speed-up over the sequential reference depends on this machine
// state (a virtual machine's two cores may share a cache or sit on different dies, and the host may move them).
//
// Usage: core_round_trip [cpu_a cpu_b]   (Linux; exits 2 when the CPUs cannot be pinned)
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    const int a = argc > 2 ? std::atoi(argv[1]) : 0;
    const int b = argc > 2 ? std::atoi(argv[2]) : 1;
    constexpr int round_trips = 200000;
    constexpr int handovers = 50;
    constexpr std::size_t floats = (2u << 20) / sizeof(float);
    alignas(64) static std::atomic<int> flag{0};
    std::vector<float> buffer(floats, 1.0f);
    std::atomic<bool> pinned{true};
    float sink = 0.0f;

    std::thread other([&] {
        if (!pin(b)) pinned = false;
        for (int i = 0; i < round_trips; ++i) {
            while (flag.load(std::memory_order_acquire) != 1) {
            }
            flag.store(0, std::memory_order_release);
        }
        for (int r = 0; r < handovers; ++r) {
            while (flag.load(std::memory_order_acquire) != 2 + 2 * r) {
            }
            float s[8] = {};
            for (std::size_t i = 0; i < floats; i += 8)
                for (int k = 0; k < 8; ++k) s[k] += buffer[i + k];
            sink += s[0] + s[7];
            flag.store(3 + 2 * r, std::memory_order_release);
        }
    });
    if (!pin(a)) pinned = false;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < round_trips; ++i) {
        flag.store(1, std::memory_order_release);
        while (flag.load(std::memory_order_acquire) != 0) {
        }
    }
    const double round_trip_ns = seconds_since(t0) / round_trips * 1e9;
    double handover_s = 0.0;
    for (int r = 0; r < handovers; ++r) {
        for (float& v : buffer) v += 1.0f;
        t0 = std::chrono::steady_clock::now();
        flag.store(2 + 2 * r, std::memory_order_release);
        while (flag.load(std::memory_order_acquire) != 3 + 2 * r) {
        }
        handover_s += seconds_since(t0);
    }
    other.join();
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < handovers; ++r) {
        float s[8] = {};
        for (std::size_t i = 0; i < floats; i += 8)
            for (int k = 0; k < 8; ++k) s[k] += buffer[i + k];
        sink += s[0] + s[7];
        buffer[r] = sink;
    }
    const double local_s = seconds_since(t0);
    if (!pinned) {
        std::fprintf(stderr, "core_round_trip: could not pin threads to CPUs %d and %d\n", a, b);
        return 2;
    }
    const double bytes = static_cast<double>(handovers) * floats * sizeof(float);
    std::printf("cpu %d <-> cpu %d: cache-line round trip %.0f ns; 2 MiB written on %d read on %d at %.1f GB/s "
                "(re-read on %d: %.1f GB/s)%s\n",
                a, b, round_trip_ns, a, b, bytes / handover_s / 1e9, a, bytes / local_s / 1e9, sink == 0.5f ? " " : "");
    return 0;
}
