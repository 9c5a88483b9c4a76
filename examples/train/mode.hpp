// examples/train/mode.hpp: what a training mode of the main program is, and the entry type of the mode table in
// examples/pipeprop_train.cpp.
//
// A mode (sgd here; pb and sync later) is a class deriving from train::mode with a static `mode_name`. It may add
// options of its own (they live in an option group named after the mode and are rejected with any other --mode),
// validates option combinations, and runs: builds its engine for the chosen network and hands it to
// train::run_training (training_loop.hpp), which owns data, epochs, progress, metrics and checkpoints.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "train/json.hpp"
#include "train/options.hpp"

namespace train {

/// Interface of a training mode.
class mode {
public:
    virtual ~mode() = default;
    /// The --mode value selecting this mode.
    [[nodiscard]] virtual std::string name() const = 0;
    /// One line for the help text.
    [[nodiscard]] virtual std::string description() const = 0;
    /// Registers the mode's own options (called before parsing, for every mode of the table).
    virtual void add_options(CLI::Option_group& group) { (void)group; }
    /// Checks the parsed options for this mode; throws CLI::ValidationError (usage message, exit 2).
    virtual void validate(const common_options& options) const { (void)options; }
    /// True for an option registered by another mode's group that this mode reads too (e.g. --stages and
    /// --executor, registered by pb and shared by sync); such an option is not rejected as "an option of --mode X".
    [[nodiscard]] virtual bool shares_option(const std::string& option_name) const {
        (void)option_name;
        return false;
    }
    /// Checks, before the data are loaded, that the mode's own output files can be written (check_writable_file of
    /// output_paths.hpp); throws std::runtime_error naming the option and the path (exit 1).
    virtual void check_outputs(const common_options& options) const { (void)options; }
    /// Trains and evaluates; returns the result object printed as the last stdout line. Throws pipeprop::data_error,
    /// pipeprop::checkpoint_error, pipeprop::non_finite_loss_error or std::runtime_error (message, exit 1), or
    /// output_failed_after_training when training finished but a final output could not be written.
    virtual json_line run(const common_options& options) = 0;
};

/// Thrown by mode::run when training and evaluation finished but writing a final output (e.g. --trace) failed: the
/// main program prints the result line (which names the failure) and then the error, and exits with 1.
class output_failed_after_training : public std::runtime_error {
public:
    output_failed_after_training(const std::string& what, json_line result)
        : std::runtime_error(what), result_(std::move(result)) {}
    [[nodiscard]] const json_line& result() const noexcept { return result_; }

private:
    json_line result_;
};

/// One row of the mode table: the --mode name and a factory.
struct mode_entry {
    const char* name;
    std::unique_ptr<mode> (*make)();
};

/// Table row for mode class M (M::mode_name is its --mode value).
template <class M>
constexpr mode_entry mode_row() {
    return {M::mode_name, []() -> std::unique_ptr<mode> { return std::make_unique<M>(); }};
}

}  // namespace train
