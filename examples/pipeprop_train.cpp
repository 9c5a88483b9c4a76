// pipeprop_train: the main program. Trains one of the networks of examples/train/networks.hpp on an image dataset
// (default: Fashion-MNIST from Debian's dataset-fashion-mnist), or the LLaMA-like llama-tiny on a text corpus
// (default: Debian's fortunes, --mode sgd), in a chosen mode, shows progress on stderr, writes
// per-epoch metrics as JSON lines (--metrics), checkpoints (--checkpoint-in / --checkpoint-out) and prints one JSON
// object as its last stdout line.
//
//   pipeprop_train --network cnn --batch 32 --lr 0.05 --momentum 0.9 --epochs 1
//   pipeprop_train --network mlp --max-samples 2000 --metrics metrics.jsonl --checkpoint-out ckpt
//   pipeprop_train --network llama-tiny --epochs 3 --max-samples 2000 --max-test-samples 500   (AdamW, fortunes)
//
// Exit codes: 0 success; 1 runtime error (missing or corrupt data, bad checkpoint, NaN/inf loss, I/O; an output path
// that cannot be written is reported before the data are loaded); 2 bad options. When training finished but a final
// output (--trace) could not be written, the JSON result line is still printed, then the error, exit 1.
#include <cblas.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/data/data_error.hpp"
#include "pipeprop/sequential_trainer.hpp"
#include "train/mode.hpp"
#include "train/networks.hpp"
#include "train/options.hpp"
#include "train/output_paths.hpp"

// ---- Modes -------------------------------------------------------------------------------------------------------
// Adding a mode is two lines: include its header examples/train/mode_<name>.hpp here, and add
// `train::mode_row<train::mode_<name>>(),` to the table below. Everything else (options, dispatch, help) follows.
#include "train/mode_sgd.hpp"
#include "train/mode_pb.hpp"
#include "train/mode_sync.hpp"

// The modes' key functions (train/mode.hpp): their vtables and option code are compiled in this unit only.
train::mode::~mode() = default;
train::mode_sgd::~mode_sgd() = default;
train::mode_pb::~mode_pb() = default;
train::mode_sync::~mode_sync() = default;

namespace {
/// The network types the main program compiles training code for (examples/pipeprop_train.cmake): every type of
/// train::with_network but ResNet-56 on 3x32x32 inputs (compile time: ResNet-56's 237 nodes are 237 distinct layer
/// types, minutes per unit; its 1x28x28 types are compiled).
template <class Net>
constexpr bool compiled_v = !std::is_same_v<Net, train::resnet56_cifar> && !std::is_same_v<Net, train::resnet56_on_cifar>;

/// f.template operator()<Net>() for a compiled network type; the others were refused by check_compiled.
template <class F>
auto compiled_only(F f) {
    return [f]<class Net>() -> train::json_line {
        if constexpr (compiled_v<Net>)
            return f.template operator()<Net>();
        else
            throw std::logic_error("pipeprop_train: a network type that is not compiled was not refused");
    };
}

/// Throws CLI::ValidationError (exit 2) for a network type the program does not compile (compiled_v).
void check_compiled(const train::common_options& o) {
    if (train::is_text_network(o.network)) return;
    if (!train::with_network(o.network_type, []<class Net>() { return compiled_v<Net>; }))
        throw CLI::ValidationError("--network", o.network + " on 3x32x32 (CIFAR-10) inputs is not compiled into "
                                                            "the main program (compile time); train::" +
                                                            "resnet56_cifar and resnet56_on_cifar are types of "
                                                            "examples/train/networks.hpp for programs of one's own");
}
}  // namespace

// The modes' network dispatch, here and not inline in the mode headers: an inline body would instantiate every
// network's training code (run_on_network is visible there) in every per-(mode, network) unit that includes them.
train::json_line train::mode_sgd::run(const train::common_options& o) {
    if (is_text_network(o.network))
        return with_text_network(o.network, [&]<class Net>() { return run_on_network<mode_sgd, Net>(*this, o); });
    return with_network(o.network_type,
                        compiled_only([&]<class Net>() { return run_on_network<mode_sgd, Net>(*this, o); }));
}

void train::mode_pb::validate(const train::common_options& o) const {
    // CLI11's range checks let NaN through (every comparison with NaN is false): a bad option, exit 2.
    const std::pair<const char*, double> reals[] = {{"--pipemare-warmup", pipemare_warmup_epochs_},
                                                    {"--pipemare-decay", pipemare_decay_}};
    for (const auto& [name, value] : reals)
        if (!std::isfinite(value))
            throw CLI::ValidationError(name, fmt::format("must be a finite number, got {}", value));
    if (o.nesterov)
        throw CLI::ValidationError("--nesterov",
                                   "is not available in --mode pb (stages use heavy-ball momentum; "
                                   "spike compensation with D = 1 is Nesterov's form)");
    const auto check_stages = [&]<class Net>() {
        try {
            (void)parse_stages<Net>(stages_);
        } catch (const std::invalid_argument& e) {
            throw CLI::ValidationError("--stages", e.what());
        }
    };
    const bool text = is_text_network(o.network);
    text ? with_text_network(o.network, check_stages) : with_network(o.network_type, check_stages);
    const std::string optimizer = value_of(optimizer_opt_, optimizer_);
    if (optimizer == "adamw" && !text)
        throw CLI::ValidationError("--optimizer", "adamw is not available for the image networks yet (only for "
                                                  "llama-tiny); use --optimizer sgd");
    if (uses_adamw(o)) {
        reject_sgd_options_with_adamw(o);
        const std::string m = mitigation(o);
        if (m == "sc" || m == "lwp" || m == "lwp_wd" || m == "sc_lwp")
            throw CLI::ValidationError(
                "--mitigation", m + " runs with momentum SGD only (spike compensation and linear weight "
                                    "prediction's velocity form use its velocity: PB-paper section 4; the program "
                                    "builds the weight-difference form lwp_wd for momentum SGD only); with AdamW use "
                                    "none, stash or pipemare, or use --optimizer sgd");
        if (reference_batch_ > 0)
            throw CLI::ValidationError("--reference-batch", "the batch-size scaling rules are momentum SGD's "
                                                            "(pb-semantics.md section 4); with AdamW give --lr "
                                                            "for the micro-batch size directly");
    }
}

train::json_line train::mode_pb::run(const train::common_options& given) {
    common_options o = given;
    if (batch_option_ == nullptr || batch_option_->count() == 0) o.batch = 1;  // PB default: b = 1
    if (reference_batch_ > 0) {
        const auto s = pipeprop::optim::scale_hyperparameters(
            {.learning_rate = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay}, reference_batch_, o.batch);
        note(o, fmt::format("pb: hyperparameters scaled from B = {} (lr {:.6g}, momentum {:.6g}) to b = {}: "
                            "lr {:.6g}, momentum {:.6g}",
                            reference_batch_, o.lr, o.momentum, o.batch, s.learning_rate, s.momentum));
        reference_lr_ = o.lr;
        reference_momentum_ = o.momentum;
        o.lr = s.learning_rate;
        o.momentum = s.momentum;
    }
    const auto run = [&]<class Net>() { return run_on_network<mode_pb, Net>(*this, o); };
    return is_text_network(o.network) ? with_text_network(o.network, run)
                                      : with_network(o.network_type, compiled_only(run));
}

train::json_line train::mode_sync::run(const train::common_options& o) {
    const auto run = [&]<class Net>() -> json_line {
        if constexpr (sync_mode_trains_v<Net>)
            return run_on_network<mode_sync, Net>(*this, o);
        else
            throw std::logic_error("mode_sync::run: --network " + o.network_type + " was not refused by validate");
    };
    return is_text_network(o.network) ? with_text_network(o.network, run) : with_network(o.network_type, run);
}

namespace {
const train::mode_entry mode_table[] = {
    train::mode_row<train::mode_sgd>(),
    train::mode_row<train::mode_pb>(),
    train::mode_row<train::mode_sync>(),
};
}  // namespace
// ------------------------------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    std::vector<std::unique_ptr<train::mode>> modes;
    std::vector<std::string> mode_names;
    for (const auto& row : mode_table) {
        modes.push_back(row.make());
        mode_names.push_back(row.name);
    }

    CLI::App app{"pipeprop_train: train a network on an image dataset (or llama-tiny on a text corpus) with pipeprop "
                 "(sequential SGD reference and pipelined modes). Prints one JSON result object as the last stdout "
                 "line."};
    app.name("pipeprop_train");
    app.footer("Exit codes: 0 success; 2 bad options (with this text); 1 runtime errors: missing or corrupt data or "
               "checkpoint (also a --mode pb checkpoint given to --mode sgd / sync), a diverging run (the last good "
               "checkpoint is kept), I/O. Output paths (--metrics, --checkpoint-out, --trace) are checked before the "
               "data are loaded (exit 1); if only writing the trace fails after training, the JSON result line is "
               "still printed, then the error (exit 1).");
    train::common_options options;
    train::add_common_options(app, options, mode_names, train::network_names());
    std::vector<CLI::Option_group*> groups;
    for (auto& m : modes) {
        CLI::Option_group* g = app.add_option_group(m->name() + " mode", "Options of --mode " + m->name() + ": " +
                                                                             m->description());
        m->add_options(*g);
        groups.push_back(g);
    }

    train::mode* selected = nullptr;
    try {
        app.parse(argc, argv);
        options.data_given = app.get_option("--data")->count() > 0;
        options.lr_given = app.get_option("--lr")->count() > 0;
        options.momentum_given = app.get_option("--momentum")->count() > 0;
        options.norm_given = app.get_option("--norm")->count() > 0;
        options.network_type = train::network_type_key(options.network, options.norm, options.data);
        train::validate_common_options(options);
        for (auto& m : modes)
            if (m->name() == options.mode) selected = m.get();
        for (std::size_t i = 0; i < modes.size(); ++i) {
            if (modes[i].get() == selected) continue;
            for (const CLI::Option* opt : groups[i]->get_options())
                if (opt->count() > 0 && !(selected != nullptr && selected->shares_option(opt->get_name())))
                    throw CLI::ValidationError(opt->get_name(), "is an option of --mode " + modes[i]->name() +
                                                                    ", not of --mode " + options.mode);
        }
        if (selected == nullptr) throw CLI::ValidationError("--mode", "unknown mode " + options.mode);
        if (train::is_text_network(options.network) && !selected->supports_text_networks()) {
            std::string text_modes;
            for (const auto& m : modes)
                if (m->supports_text_networks()) text_modes += (text_modes.empty() ? "--mode " : ", --mode ") + m->name();
            throw CLI::ValidationError("--network", options.network + " is not available in --mode " + options.mode +
                                                        " yet (only in " + text_modes + ")");
        }
        check_compiled(options);
        selected->validate(options);
    } catch (const CLI::Success& e) {  // --help
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "pipeprop_train: " << e.what() << "\n\n" << app.help() << std::flush;
        return 2;
    }

    openblas_set_num_threads(options.blas_threads);

    try {
        train::check_output_paths(options);
        selected->check_outputs(options);
        const train::json_line result = selected->run(options);
        std::cout << result.str() << std::endl;
        return 0;
    } catch (const train::output_failed_after_training& e) {
        std::cout << e.result().str() << std::endl;
        std::cerr << "\npipeprop_train: error: " << e.what() << std::endl;
    } catch (const CLI::ParseError& e) {  // an option found bad once the data are known (e.g. --batch > samples)
        std::cerr << "\npipeprop_train: " << e.what() << std::endl;
        return 2;
    } catch (const pipeprop::data_error& e) {
        std::cerr << "\npipeprop_train: data error: " << e.what() << std::endl;
    } catch (const pipeprop::checkpoint_error& e) {
        std::cerr << "\npipeprop_train: checkpoint error: " << e.what() << std::endl;
    } catch (const pipeprop::non_finite_loss_error& e) {
        std::cerr << "\npipeprop_train: training diverged: " << e.what()
                  << (options.mode == "pb" ? "\nIn --mode pb, --lr and --momentum apply per micro-batch: "
                                             "--reference-batch B scales values tuned for batch B to b."
                                           : "")
                  << (options.checkpoint_out.empty() ? std::string()
                                                     : "\nThe last good checkpoint in " + options.checkpoint_out +
                                                           " (if one was written) was left untouched.")
                  << std::endl;
    } catch (const std::exception& e) {
        std::cerr << "\npipeprop_train: error: " << e.what() << std::endl;
    }
    return 1;
}
