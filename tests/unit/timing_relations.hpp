// Timing relations of the cost tests (test_sync_costs.cpp, test_op_cost_probe.cpp): relations, not thresholds.
// Each compares two costs measured in the same run, with a margin far below the work ratio, and the measurement is
// repeated (up to 3 times) until the relation holds, so that a burst of load during one measurement (a shared
// 2-core machine) does not fail the test while a measurement that does not follow the work always does.
#pragma once

namespace timing_relations {

/// m = measure(), repeated up to 3 times in all until holds(m); returns the last m.
template <class Measure, class Holds>
auto measure_until(Measure measure, Holds holds) {
    auto m = measure();
    for (int attempt = 1; attempt < 3 && !holds(m); ++attempt) m = measure();
    return m;
}

/// big > factor * small.
inline bool clearly_more(double big, double small, double factor) { return big > factor * small; }

}  // namespace timing_relations
