// examples/train/run_engine.hpp: the epoch loop's view of a mode's engine, type-erased (run_engine), so that the loop
// (train/training_loop.hpp) and the checkpoint handling around it (train/run_checkpoint.hpp) compile once
// (train/training_loop.cpp), not once per (mode, network, mitigation policy). run_engine_of<Net, Engine> adapts any
// engine that satisfies pipeprop::trainer (trainer_concept.hpp), with the main program's optional members:
// end_of_epoch() and epoch_train_loss() (PB: the epoch's exact mean loss, known after the drain),
// completed_samples() (PB: samples whose loss is known), rank_layout() and stages_by_rank() (--transport mpi).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/evaluation.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/trainer_concept.hpp"

namespace train {

/// A mode's engine as the epoch loop uses it (the members of pipeprop::trainer and the optional ones of the file
/// comment). Errors: what the engine throws.
class run_engine {
public:
    virtual ~run_engine() = default;
    /// One batch x [b, input size], targets [b, targets per sample]; the mean loss of the micro-batches completed.
    virtual double train_batch(const float* x, const std::int32_t* targets, std::size_t b) = 0;
    /// Completes the epoch: end_of_epoch() where the engine has it, else drain(). Returns the losses of the
    /// micro-batches it completed, as drain() does (a per-sample weighted sum; 0 when nothing was in flight).
    virtual double end_of_epoch() = 0;
    /// The epoch's exact mean training loss, for an engine that learns losses late; nullopt otherwise.
    [[nodiscard]] virtual std::optional<double> epoch_train_loss() const = 0;
    /// Mean loss and accuracy of the current weights on n samples.
    virtual pipeprop::evaluation evaluate(const float* x, const std::int32_t* targets, std::size_t n) = 0;
    /// Adds the engine's state to c.
    virtual void save_state(pipeprop::checkpoint& c) const = 0;
    /// Restores the engine from c (`where`: the checkpoint's name for messages).
    virtual void load_state(const pipeprop::checkpoint& c, const std::string& where) = 0;
    /// Samples trained since the start of the run.
    [[nodiscard]] virtual std::uint64_t samples_seen() const = 0;
    /// Samples whose loss is known (completed_samples() where the engine has it, else samples_seen()).
    [[nodiscard]] virtual std::uint64_t completed_samples() const = 0;
    /// The learning rate of the next update.
    [[nodiscard]] virtual double current_learning_rate() const = 0;
    /// --transport mpi only (call it only then): every stage's layers and rank, and each rank's stages; empty for an
    /// engine without ranks.
    [[nodiscard]] virtual std::string rank_layout() const = 0;
    [[nodiscard]] virtual std::vector<std::string> stages_by_rank() const = 0;  ///< see rank_layout

    /// Per stage: the L2 norms of the weights and of the velocity (pb::stage_stats), for an engine with stages
    /// that it holds (PB); empty otherwise.
    struct stage_norms {
        std::vector<double> weights, velocities;
    };
    [[nodiscard]] virtual stage_norms norms_by_stage() const = 0;

    /// The network's positions by name (layer_stack::node_names) and its parameter count.
    std::span<const std::string_view> node_names;
    std::size_t parameter_count = 0;
};

/// run_engine over `engine` (not owned) of network Net.
template <class Net, class Engine>
class run_engine_of final : public run_engine {
    static_assert(pipeprop::trainer<Engine>, "a mode's engine must satisfy pipeprop::trainer (trainer_concept.hpp)");

public:
    explicit run_engine_of(Engine& engine) : e_(engine) {
        node_names = pipeprop::layer_stack<Net, float>::node_names;
        parameter_count = pipeprop::layer_stack<Net, float>::parameter_count;
    }
    double train_batch(const float* x, const std::int32_t* targets, std::size_t b) override {
        return e_.train_batch(x, targets, b);
    }
    double end_of_epoch() override {
        if constexpr (requires { e_.end_of_epoch(); })
            return e_.end_of_epoch();
        else
            return e_.drain();
    }
    [[nodiscard]] std::optional<double> epoch_train_loss() const override {
        if constexpr (requires { e_.epoch_train_loss(); })
            return e_.epoch_train_loss();
        else
            return std::nullopt;
    }
    pipeprop::evaluation evaluate(const float* x, const std::int32_t* targets, std::size_t n) override {
        return e_.evaluate(x, targets, n);
    }
    void save_state(pipeprop::checkpoint& c) const override { e_.save_state(c); }
    void load_state(const pipeprop::checkpoint& c, const std::string& where) override { e_.load_state(c, where); }
    [[nodiscard]] std::uint64_t samples_seen() const override { return e_.samples_seen(); }
    [[nodiscard]] std::uint64_t completed_samples() const override {
        if constexpr (requires { e_.completed_samples(); })
            return e_.completed_samples();
        else
            return e_.samples_seen();
    }
    [[nodiscard]] double current_learning_rate() const override { return e_.current_learning_rate(); }
    [[nodiscard]] std::string rank_layout() const override {
        if constexpr (requires { e_.rank_layout(); })
            return e_.rank_layout();
        else
            return {};
    }
    [[nodiscard]] std::vector<std::string> stages_by_rank() const override {
        if constexpr (requires { e_.stages_by_rank(); })
            return e_.stages_by_rank();
        else
            return {};
    }

    [[nodiscard]] stage_norms norms_by_stage() const override {
        stage_norms n;
        const auto add = [&n](const auto& stats) {
            for (const auto& st : stats.stages) {
                n.weights.push_back(st.weight_norm);
                n.velocities.push_back(st.velocity_norm);
            }
        };
        if constexpr (requires { e_.stats().stages[0].weight_norm; })
            add(e_.stats());
        else if constexpr (requires { e_.pipeline().stats().stages[0].weight_norm; })  // train::pb_engine
            add(e_.pipeline().stats());
        return n;
    }

private:
    Engine& e_;
};

}  // namespace train
