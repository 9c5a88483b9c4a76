// pipeprop/stage_error.hpp: the exception the pipeline executors throw when a layer (or the loss) throws inside a
// stage: the original exception, with the stage, the micro-batch and the phase named.
//
// Thrown by the PB executors (pb/sequential_executor.hpp, pb/concurrent_executor.hpp, through pb::engine::push /
// drain) and by sync::pipeline_executor::step (sync/executor.hpp). What each executor's state is afterwards is
// stated in its header (PB: the engine refuses every later call; sync: usable again once the parameters and
// velocity are restored). The original exception is kept as the nested exception (std::rethrow_if_nested).
#pragma once

#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipeprop {

/// A layer's exception inside a pipeline stage. what(): "<executor>: stage <s>, micro-batch <n>, <phase>: <the
/// original what()>"; stage() is the 0-based stage, micro_batch() the micro-batch's index (PB: over the whole
/// run; sync: within the step, `step` names the step in what()), phase() one of "forward", "loss", "backward"
/// (PB's fused backward-p1 + backward-p2), "backward-p1", "backward-p2", "backward (fused)".
class stage_error : public std::runtime_error, public std::nested_exception {
public:
    /// Must be constructed inside a catch block (std::nested_exception captures the exception being handled).
    stage_error(const std::string& what, std::size_t stage, std::size_t micro_batch, std::string phase)
        : std::runtime_error(what), stage_(stage), micro_batch_(micro_batch), phase_(std::move(phase)) {}
    [[nodiscard]] std::size_t stage() const noexcept { return stage_; }  ///< The failing stage's index.
    /// The micro-batch it was working on.
    [[nodiscard]] std::size_t micro_batch() const noexcept { return micro_batch_; }
    /// The failing pass, "forward" or "backward".
    [[nodiscard]] const std::string& phase() const noexcept { return phase_; }

private:
    std::size_t stage_;
    std::size_t micro_batch_;
    std::string phase_;
};

/// Call only inside a catch block: throws a stage_error wrapping the exception being handled (`context` is added
/// after the micro-batch, e.g. " (step 3)"); a stage_error is rethrown unchanged.
[[noreturn]] inline void rethrow_as_stage_error(const char* executor, std::size_t stage, std::size_t micro_batch,
                                                const char* phase, const std::string& context = {}) {
    std::string original;
    try {
        throw;
    } catch (const stage_error&) {
        throw;
    } catch (const std::exception& e) {
        original = e.what();
    } catch (...) {
        original = "an exception not derived from std::exception";
    }
    // Back in the caller's handler: the nested exception captured here is the original one.
    throw stage_error(std::string(executor) + ": stage " + std::to_string(stage) + ", micro-batch " +
                          std::to_string(micro_batch) + context + ", " + phase + ": " + original,
                      stage, micro_batch, phase);
}

}  // namespace pipeprop
