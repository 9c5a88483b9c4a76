// pipeprop/sync/any_executor.hpp: a pipeline_executor whose schedule kind and 2BP flag are chosen at run time
// (e.g. from a command line), behind one abstract interface: code that drives it (a training loop) is compiled once
// per network instead of once per (schedule, 2BP) pair. The executors behind it are the same pipeline_executor
// instantiations (sync/executor.hpp); only the calls are virtual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "pipeprop/sync/executor.hpp"

namespace pipeprop::sync {

/// The run-time interface of pipeline_executor<Net, T, Kind, TwoStageBP> (see there for every member's contract).
template <network_type Net, class T = float>
class any_executor {
public:
    virtual ~any_executor() = default;
    /// pipeline_executor::step: batch x [B, input size], labels [B], learning rate lr.
    virtual step_result step(std::span<const T> x, std::span<const std::int32_t> labels, double lr) = 0;
    [[nodiscard]] virtual std::vector<T> parameters() const = 0;
    [[nodiscard]] virtual std::vector<T> gradient() const = 0;
    [[nodiscard]] virtual std::vector<T> velocity() const = 0;
    virtual void set_parameters(std::span<const T> w) = 0;
    virtual void set_velocity(std::span<const T> v) = 0;
    [[nodiscard]] virtual std::vector<T> state() const = 0;
    virtual void set_state(std::span<const T> s) = 0;
    [[nodiscard]] virtual std::vector<op_span> spans() const = 0;
    [[nodiscard]] virtual const schedule& current_schedule() const = 0;
    [[nodiscard]] virtual std::vector<std::size_t> activation_slots() const = 0;
    [[nodiscard]] virtual const std::vector<channel_capacity>& channel_sizes() const = 0;
    [[nodiscard]] virtual const std::vector<layer_range>& ranges() const = 0;
    [[nodiscard]] virtual const executor_options& options() const = 0;
};

namespace detail {
template <network_type Net, class T, schedule_kind Kind, bool TwoStageBP>
class any_executor_impl final : public any_executor<Net, T> {
public:
    any_executor_impl(std::vector<layer_range> stages, const executor_options& opt) : ex_(std::move(stages), opt) {}
    step_result step(std::span<const T> x, std::span<const std::int32_t> labels, double lr) override {
        return ex_.step(x, labels, lr);
    }
    std::vector<T> parameters() const override { return ex_.parameters(); }
    std::vector<T> gradient() const override { return ex_.gradient(); }
    std::vector<T> velocity() const override { return ex_.velocity(); }
    void set_parameters(std::span<const T> w) override { ex_.set_parameters(w); }
    void set_velocity(std::span<const T> v) override { ex_.set_velocity(v); }
    std::vector<T> state() const override { return ex_.state(); }
    void set_state(std::span<const T> s) override { ex_.set_state(s); }
    std::vector<op_span> spans() const override { return ex_.spans(); }
    const schedule& current_schedule() const override { return ex_.current_schedule(); }
    std::vector<std::size_t> activation_slots() const override { return ex_.activation_slots(); }
    const std::vector<channel_capacity>& channel_sizes() const override { return ex_.channel_sizes(); }
    const std::vector<layer_range>& ranges() const override { return ex_.ranges(); }
    const executor_options& options() const override { return ex_.options(); }

private:
    pipeline_executor<Net, T, Kind, TwoStageBP> ex_;
};

template <network_type Net, class T, schedule_kind Kind>
std::unique_ptr<any_executor<Net, T>> make_with_kind(bool two, std::vector<layer_range> stages,
                                                     const executor_options& opt) {
    if (two) return std::make_unique<any_executor_impl<Net, T, Kind, true>>(std::move(stages), opt);
    return std::make_unique<any_executor_impl<Net, T, Kind, false>>(std::move(stages), opt);
}
}  // namespace detail

/// A pipeline_executor<Net, T, kind, two_stage_bp> behind the any_executor interface. Throws as its constructor.
template <network_type Net, class T = float>
[[nodiscard]] std::unique_ptr<any_executor<Net, T>> make_any_executor(schedule_kind kind, bool two_stage_bp,
                                                                      std::vector<layer_range> stages,
                                                                      const executor_options& opt) {
    switch (kind) {
        case schedule_kind::gpipe:
            return detail::make_with_kind<Net, T, schedule_kind::gpipe>(two_stage_bp, std::move(stages), opt);
        case schedule_kind::one_f_one_b:
            return detail::make_with_kind<Net, T, schedule_kind::one_f_one_b>(two_stage_bp, std::move(stages), opt);
        case schedule_kind::zb_h1:
            return detail::make_with_kind<Net, T, schedule_kind::zb_h1>(two_stage_bp, std::move(stages), opt);
        case schedule_kind::zb_h2:
            return detail::make_with_kind<Net, T, schedule_kind::zb_h2>(two_stage_bp, std::move(stages), opt);
    }
    throw std::invalid_argument("pipeprop::sync::make_any_executor: unknown schedule kind");
}

}  // namespace pipeprop::sync
