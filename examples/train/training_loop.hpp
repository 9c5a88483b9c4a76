// examples/train/training_loop.hpp: the epoch loop shared by every mode of the main program: data loading, seeded
// per-epoch order, batches, progress, evaluation after each epoch, per-epoch metrics (JSON lines), checkpoints
// (resume from --checkpoint-in, save to --checkpoint-out after each epoch) and the result summary.
//
// Two kinds of data (a training_source each, below): an image classification dataset (pipeprop::data::dataset_pair:
// samples are images, targets class labels, evaluation on the test split: test_loss, test_accuracy) and a text
// dataset (pipeprop::data::text_dataset: samples are next-token sequences [L], targets [L], evaluation on the
// validation split: validation_loss per token, validation_perplexity = exp(validation_loss), token accuracy).
//
// An engine is what a mode trains with: a pipeprop::trainer (pipeprop/trainer_concept.hpp: train_batch, drain,
// evaluate, save_state / load_state, samples_seen, current_learning_rate), i.e. pipeprop::sequential_trainer,
// pipeprop::pb::trainer or pipeprop::sync::trainer, or a class derived from one. drain() is called after the last
// batch of each epoch, before evaluation and checkpointing; optional: double end_of_epoch() instead (a pipelined
// engine that also keeps the epoch's loss; returns what drain() does), double epoch_train_loss(),
// std::uint64_t completed_samples().
// With --transport mpi (common_options::ranks) every rank runs this loop with the same batches; rank 0 reads the
// data, the others a placeholder_source (their inputs are never read: stage 0 runs on rank 0); evaluate() is
// collective (the engine gathers every rank's stages); checkpoints are per rank (train/rank_checkpoints.hpp), so the
// engine also provides std::vector<std::string> stages_by_rank() for the manifest.
// The loop sees the engine through run_engine (train/run_engine.hpp), so it is compiled once (train/training_loop.cpp)
// for every mode, network and policy; run_training adapts a mode's engine to it.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <fstream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/data/dataset.hpp"
#include "pipeprop/data/epoch_permutation.hpp"
#include "pipeprop/data/text_dataset.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/optim/lr_schedule.hpp"
#include "pipeprop/sequential_trainer.hpp"
#include "pipeprop/trainer_concept.hpp"
#include "train/activity.hpp"
#include "train/checkpoint_checks.hpp"
#include "train/interval_log.hpp"
#include "train/json.hpp"
#include "train/networks.hpp"
#include "train/options.hpp"
#include "train/progress.hpp"
#include "train/rank_checkpoints.hpp"
#include "train/run_checkpoint.hpp"
#include "train/run_engine.hpp"
#include "train/run_files.hpp"
#include "train/stop_signals.hpp"

namespace train {

/// What a run did; turned into the last stdout line by to_json.
struct run_summary {
    std::string mode, network;
    std::size_t batch = 0;
    std::size_t epochs = 0;             ///< epochs complete at the end (including resumed ones)
    std::uint64_t samples = 0;          ///< training samples processed by this run
    double seconds = 0.0;               ///< wall-clock seconds spent in training batches (no evaluation, no I/O)
    std::optional<double> train_loss;   ///< mean per-sample training loss of this run's last epoch
    double test_loss = 0.0;             ///< image data: test split; text data: validation loss per token
    double test_accuracy = 0.0;         ///< image data: test accuracy; text data: validation token accuracy
    std::size_t test_samples = 0;       ///< evaluated samples (images, or validation sequences)
    std::size_t test_targets = 0;       ///< evaluated targets (text data: validation tokens)
    bool text = false;                  ///< text data: the validation_* keys instead of the test_* ones
    std::size_t parameters = 0;
    double total_seconds = 0.0;         ///< whole run including data loading and evaluation
    const common_options* options = nullptr;

    /// The result object: mode, network, batch, epochs, samples, seconds, samples_per_second, train_loss, test_loss,
    /// test_accuracy (text data: validation_loss, validation_perplexity, validation_token_accuracy,
    /// validation_sequences, validation_tokens), then the hyperparameters and sizes.
    [[nodiscard]] json_line to_json() const {
        json_line j;
        j.add("mode", mode).add("network", network).add("batch", batch).add("epochs", epochs).add("samples", samples);
        j.add("seconds", seconds).add("samples_per_second", seconds > 0 ? static_cast<double>(samples) / seconds : 0.0);
        if (train_loss) j.add("train_loss", *train_loss);
        else j.add_null("train_loss");
        if (text)
            j.add("validation_loss", test_loss)
                .add("validation_perplexity", std::exp(test_loss))
                .add("validation_token_accuracy", test_accuracy)
                .add("validation_sequences", test_samples)
                .add("validation_tokens", test_targets);
        else
            j.add("test_loss", test_loss).add("test_accuracy", test_accuracy).add("test_samples", test_samples);
        if (options != nullptr)
            j.add("lr", options->lr)
                .add("lr_schedule", options->lr_schedule)
                .add("momentum", options->momentum)
                .add("nesterov", options->nesterov)
                .add("weight_decay", options->weight_decay)
                .add("seed", options->seed);
        j.add("parameters", parameters).add("total_seconds", total_seconds);
        if (options != nullptr && is_resnet(options->network))
            j.add("norm", options->norm).add("network_type", options->network_type);
        return j;
    }
};

/// Loads the dataset of --data for network Net (image size checked against Net's input; train/run_files.hpp).
/// Throws data_error.
template <class Net>
pipeprop::data::dataset_pair load_data(const common_options& o) {
    return read_image_data(o, input_geometry<Net>());
}

/// Training samples per epoch: the training set's `train_count` samples, capped by --max-samples. Throws
/// CLI::ValidationError (a bad option: exit 2) when --batch exceeds it: the buffers are sized for --batch samples, so
/// a batch larger than the epoch would only allocate memory no step can use (--batch 1048576 grew past 5 GB).
inline std::size_t epoch_samples(const common_options& o, std::size_t train_count) {
    const std::size_t n = o.max_samples > 0 ? std::min(o.max_samples, train_count) : train_count;
    if (o.batch > n)
        throw CLI::ValidationError("--batch", std::to_string(o.batch) + " is larger than the " + std::to_string(n) +
                                                  " training samples of an epoch");
    return n;
}
inline std::size_t epoch_samples(const common_options& o, const pipeprop::data::dataset_pair& d) {
    return epoch_samples(o, d.train.count);
}
inline std::size_t epoch_samples(const common_options& o, const pipeprop::data::text_dataset& d) {
    return epoch_samples(o, d.train().count());
}

/// The data of an image classification run as the loop sees it: images [C, H, W], labels, the test split.
struct image_source {
    const pipeprop::data::dataset_pair& data;
    std::size_t eval_n;  ///< test samples per evaluation (--max-test-samples)
    static constexpr bool text = false;
    [[nodiscard]] std::size_t train_count() const { return data.train.count; }
    [[nodiscard]] std::size_t input_size() const { return data.train.geometry.size(); }
    [[nodiscard]] std::size_t targets_per_sample() const { return 1; }
    void gather(std::span<const std::uint32_t> order, std::size_t first, std::size_t b, float* x,
                std::int32_t* targets) const {
        pipeprop::data::gather_batch(data.train, order, first, b, x, targets);
    }
    template <class Engine>
    pipeprop::evaluation evaluate(Engine& engine) const {
        return engine.evaluate(data.test.images.data(), data.test.labels.data(), eval_n);
    }
};

/// The data of a language-model run as the loop sees it: token sequences [L], next-token targets [L], the
/// validation split (its first --max-test-samples sequences, or all of them).
struct text_source {
    const pipeprop::data::text_dataset& data;
    pipeprop::data::sequence_arrays<float> validation;
    static constexpr bool text = true;
    text_source(const pipeprop::data::text_dataset& d, std::size_t max_validation)
        : data(d), validation(d.validation_arrays<float>(max_validation)) {}
    [[nodiscard]] std::size_t train_count() const { return data.train().count(); }
    [[nodiscard]] std::size_t input_size() const { return data.length(); }
    [[nodiscard]] std::size_t targets_per_sample() const { return data.length(); }
    void gather(std::span<const std::uint32_t> order, std::size_t first, std::size_t b, float* x,
                std::int32_t* targets) const {
        data.gather_train(order, first, b, x, targets);
    }
    template <class Engine>
    pipeprop::evaluation evaluate(Engine& engine) const {
        return engine.evaluate(validation.inputs.data(), validation.targets.data(), validation.count);
    }
};

/// What a rank without data knows of them (--transport mpi, rank > 0; rank 0 broadcasts it).
struct placeholder_data {
    std::size_t train_count = 0;
    std::size_t input_size = 0;
};
inline std::size_t epoch_samples(const common_options& o, const placeholder_data& d) {
    return epoch_samples(o, d.train_count);
}

/// The data as a rank without data sees it: the epoch's size; its batches hold NaN inputs and targets -1, which the
/// engine does not read there (PB: only stage 0's process reads them, pb::engine::push); its evaluate() takes part
/// in the collective evaluation with nothing of its own.
struct placeholder_source {
    placeholder_data data;
    static constexpr bool text = false;
    [[nodiscard]] std::size_t train_count() const { return data.train_count; }
    [[nodiscard]] std::size_t input_size() const { return data.input_size; }
    [[nodiscard]] std::size_t targets_per_sample() const { return 1; }
    void gather(std::span<const std::uint32_t>, std::size_t, std::size_t b, float* x, std::int32_t* targets) const {
        std::fill_n(x, b * data.input_size, std::numeric_limits<float>::quiet_NaN());
        std::fill_n(targets, b, -1);
    }
    template <class Engine>
    pipeprop::evaluation evaluate(Engine& engine) const {
        return engine.evaluate(nullptr, nullptr, 0);
    }
};

/// The learning-rate schedule of the options, in samples (epochs converted with `epoch_size`; a cosine schedule
/// spans all --epochs). Throws std::invalid_argument for invalid values.
inline pipeprop::optim::lr_schedule make_schedule(const common_options& o, std::size_t epoch_size) {
    namespace po = pipeprop::optim;
    po::lr_schedule s = po::lr_schedule::constant(o.lr);
    if (o.lr_schedule == "step")
        s = po::lr_schedule::step(o.lr, std::max<std::uint64_t>(1, po::samples_from_epochs(o.lr_step_epochs, epoch_size)),
                                  o.lr_gamma);
    else if (o.lr_schedule == "cosine")
        s = po::lr_schedule::cosine(o.lr, std::max<std::uint64_t>(1, po::samples_from_epochs(double(o.epochs), epoch_size)),
                                    o.lr_min);
    return s.with_warmup(po::samples_from_epochs(o.warmup_epochs, epoch_size));
}

/// Runs the epoch loop with `engine` (a mode's engine, type-erased: train/run_engine.hpp) on `data` (see the file
/// comment). Returns the summary.
/// Throws pipeprop::data_error, pipeprop::checkpoint_error (bad --checkpoint-in, failed save),
/// pipeprop::non_finite_loss_error (checkpoint of the last good epoch left as it was), std::runtime_error (metrics
/// file).
template <class Source>
run_summary run_training_on(run_engine& engine, const common_options& o, const Source& data,
                            const std::string& mode_name) {
    namespace pd = pipeprop::data;
    const auto run_start = std::chrono::steady_clock::now();
    const std::size_t epoch_size = epoch_samples(o, data.train_count());
    const std::size_t in = data.input_size();

    const run_position at = resume_run(engine, o, data.train_count(), epoch_size, mode_name);
    const std::size_t start_epoch = at.epoch, start_position = at.position;
    const std::uint64_t data_seed = at.data_seed;

    std::ofstream metrics = open_metrics(o, !o.checkpoint_in.empty(), start_epoch);

    // Buffers, allocated once: the epoch order and one batch.
    set_activity(fmt::format("allocating the buffers of one batch of {} samples", o.batch));
    std::vector<std::uint32_t> order(data.train_count());
    std::vector<float> x(o.batch * in);
    std::vector<std::int32_t> labels(o.batch * data.targets_per_sample());

    run_summary r;
    r.mode = mode_name;
    r.network = o.network;
    r.batch = o.batch;
    r.options = &o;
    r.parameters = engine.parameter_count;
    r.text = Source::text;
    r.epochs = std::min(start_epoch, o.epochs);
    const progress_style style = progress_style_from(o.progress);

    std::uint64_t saved_after = engine.samples_seen();  // samples trained when the state was last saved or loaded
    for (std::size_t epoch = start_epoch; epoch < o.epochs; ++epoch) {
        pd::fill_epoch_permutation(data_seed, epoch, order);
        std::size_t pos = epoch == start_epoch ? start_position : 0;
        epoch_progress progress(style, epoch, o.epochs, epoch_size, pos);
        double loss_sum = 0.0;
        std::size_t loss_n = 0;
        const auto t0 = std::chrono::steady_clock::now();
        interval_log intervals(o, metrics, metrics.is_open(), engine, epoch);  // --log-every
        set_activity(fmt::format("training (epoch {}, batch {})", epoch + 1, o.batch));
        while (pos < epoch_size) {
            if (const int sig = stop_requested())  // SIGINT / SIGTERM: drain, save where it stopped, exit
                stop_for_signal(engine, o, {epoch, pos, data_seed, epoch_size}, mode_name, sig, saved_after);
            const std::size_t b = std::min(o.batch, epoch_size - pos);
            data.gather(order, pos, b, x.data(), labels.data());
            const float loss = engine.train_batch(x.data(), labels.data(), b);
            loss_sum += static_cast<double>(loss) * static_cast<double>(b);
            loss_n += b;
            pos += b;
            progress.update(pos, loss_sum / static_cast<double>(loss_n));
            intervals.add(loss, b, pos == epoch_size);
        }
        intervals.end_of_epoch(engine.end_of_epoch());  // the rest of the epoch, with the losses its drain completed
        const double epoch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.seconds += epoch_seconds;
        r.samples += loss_n;
        r.train_loss = loss_n > 0 ? loss_sum / static_cast<double>(loss_n) : 0.0;
        // An engine that learns losses late (PB: a micro-batch's loss is known when its backward completes, some of
        // them only in end_of_epoch's drain) gives the epoch's exact mean itself.
        if (const std::optional<double> exact = engine.epoch_train_loss()) r.train_loss = *exact;
        r.epochs = epoch + 1;

        set_activity("evaluating after epoch " + std::to_string(epoch + 1) + " (--max-test-samples sizes it)");
        const pipeprop::evaluation e = data.evaluate(engine);
        r.test_loss = e.loss;
        r.test_accuracy = e.accuracy;
        r.test_samples = e.samples;
        r.test_targets = e.targets;
        if constexpr (Source::text)
            progress.message(fmt::format("epoch {}/{}: train loss {:.4f}, validation loss {:.4f} (perplexity {:.3f}), "
                                         "token accuracy {:.4f}",
                                         epoch + 1, o.epochs, *r.train_loss, e.loss, std::exp(e.loss), e.accuracy));
        else
            progress.message(fmt::format("epoch {}/{}: train loss {:.4f}, test loss {:.4f}, test accuracy {:.4f}",
                                         epoch + 1, o.epochs, *r.train_loss, e.loss, e.accuracy));
        // The state the epoch ends with, checked before metrics and checkpoint: a diverged one is never saved.
        pipeprop::checkpoint c;
        engine.save_state(c);
        require_finite_state(c, e.loss, epoch + 1, engine.samples_seen());
        if (metrics.is_open()) {
            json_line m;
            m.add("epoch", epoch + 1).add("samples", engine.samples_seen()).add("train_loss", *r.train_loss);
            if constexpr (Source::text)
                m.add("validation_loss", e.loss)
                    .add("validation_perplexity", std::exp(e.loss))
                    .add("validation_token_accuracy", e.accuracy);
            else
                m.add("test_loss", e.loss).add("test_accuracy", e.accuracy);
            m.add("lr", engine.current_learning_rate())
                .add("seconds", epoch_seconds)
                .add("samples_per_second", epoch_seconds > 0 ? static_cast<double>(loss_n) / epoch_seconds : 0.0);
            metrics << m.str() << '\n' << std::flush;
            if (!metrics) throw std::runtime_error(o.metrics + ": writing the metrics file failed");
        }
        if (!o.checkpoint_out.empty()) {
            save_run_checkpoint(engine, c, o, {epoch + 1, 0, data_seed, epoch_size}, mode_name);
            progress.message("checkpoint: saved to " + o.checkpoint_out);
        }
        saved_after = engine.samples_seen();
    }

    if (r.test_samples == 0) {  // nothing left to train: evaluate the starting point
        set_activity("evaluating (--max-test-samples sizes it)");
        const pipeprop::evaluation e = data.evaluate(engine);
        r.test_loss = e.loss;
        r.test_accuracy = e.accuracy;
        r.test_samples = e.samples;
        r.test_targets = e.targets;
    }
    r.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    return r;
}

// The loop compiles once, in train/training_loop.cpp, for the three kinds of data.
extern template run_summary run_training_on(run_engine&, const common_options&, const image_source&,
                                            const std::string&);
extern template run_summary run_training_on(run_engine&, const common_options&, const placeholder_source&,
                                            const std::string&);
extern template run_summary run_training_on(run_engine&, const common_options&, const text_source&,
                                            const std::string&);

/// run_training_on for an image classification dataset (evaluation on its test split, --max-test-samples of it).
template <class Net, class Engine>
run_summary run_training(Engine& engine, const common_options& o, const pipeprop::data::dataset_pair& data,
                         const std::string& mode_name) {
    const std::size_t test_n = o.max_test_samples > 0 ? std::min(o.max_test_samples, data.test.count) : data.test.count;
    run_engine_of<Net, Engine> adapted(engine);
    return run_training_on(adapted, o, image_source{data, test_n}, mode_name);
}

/// run_training_on for a rank without data (--transport mpi, rank > 0).
template <class Net, class Engine>
run_summary run_training(Engine& engine, const common_options& o, const placeholder_data& data,
                         const std::string& mode_name) {
    run_engine_of<Net, Engine> adapted(engine);
    return run_training_on(adapted, o, placeholder_source{data}, mode_name);
}

/// run_training_on for a text dataset (evaluation on the first --max-test-samples validation sequences, or all).
template <class Net, class Engine>
run_summary run_training(Engine& engine, const common_options& o, const pipeprop::data::text_dataset& data,
                         const std::string& mode_name) {
    run_engine_of<Net, Engine> adapted(engine);
    return run_training_on(adapted, o, text_source(data, o.max_test_samples), mode_name);
}

}  // namespace train
