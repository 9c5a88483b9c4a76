// examples/train/options.hpp: the options every mode of the main program shares, their CLI11
// registration and their validation. Modes add their own options in their own option group (see mode.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "pipeprop/data/dataset.hpp"
#include "train/network_names.hpp"

namespace train {

class cluster;  // train/cluster.hpp

/// Values of the shared options (defaults: the first main job's run: small CNN, SGD, B = 32, lr 0.05, momentum 0.9,
/// 1 epoch on Fashion-MNIST).
struct common_options {
    std::string mode = "sgd";
    std::string network = "cnn";
    std::string norm = "gn";            ///< ResNets: gn (group norm, 8 groups) or on (Online Normalization)
    std::size_t batch = 32;             ///< samples per optimizer step (B), or per micro-batch in pipelined modes
    double lr = 0.05;                   ///< learning rate per mean-loss gradient
    double momentum = 0.9;
    bool nesterov = false;
    double weight_decay = 0.0;          ///< L2 coefficient lambda
    std::size_t epochs = 1;             ///< train until this many epochs are complete (counting resumed ones)
    std::size_t max_samples = 0;        ///< training samples per epoch (0: the whole training set)
    std::size_t max_test_samples = 0;   ///< test samples per evaluation (0: the whole test set)
    std::uint64_t seed = 1;             ///< initialization and shuffling seed
    std::string data = pipeprop::data::default_data_directory;
    std::string metrics;                ///< JSON-lines path for per-epoch metrics ("" = none)
    std::size_t log_every = 0;          ///< also a metrics line of the training loss every this many samples (0: none)
    bool log_stage_norms = false;       ///< --mode pb's --log-stage-norms: per-stage norms in those lines
    std::string checkpoint_in;          ///< checkpoint to start from ("" = fresh start)
    std::string checkpoint_out;         ///< checkpoint written after every epoch ("" = none)
    std::string lr_schedule = "constant";
    double lr_step_epochs = 1.0;        ///< step schedule: epochs between decays
    double lr_gamma = 0.1;              ///< step schedule: decay factor
    double lr_min = 0.0;                ///< cosine schedule: final learning rate
    double warmup_epochs = 0.0;         ///< linear warm-up length in epochs
    int blas_threads = 1;               ///< openblas_set_num_threads
    std::string progress = "auto";      ///< auto (bar on a terminal, log lines otherwise), bar, log, none
    std::string transport = "local";    ///< local (one process) or mpi (the stages on the ranks of mpirun)
    std::size_t remote_timeout = 60;    ///< --transport mpi: seconds a rank waits for another rank's message
    std::string memory_check = "on";    ///< on: refuse an engine whose memory estimate exceeds what is available
    // Set by the program after parsing: whether an option was given (per-network defaults apply otherwise).
    bool data_given = false;            ///< --data given (a text network reads the fortunes corpus by default)
    bool lr_given = false;              ///< --lr given (AdamW on a text network defaults to 3e-3)
    bool momentum_given = false;        ///< --momentum given (momentum SGD's; rejected with AdamW)
    bool norm_given = false;            ///< --norm given (ResNets only)
    std::string network_type;           ///< the type key the modes dispatch on (train::network_type_key)
    train::cluster* ranks = nullptr;    ///< --transport mpi: this process's place among the ranks (else nullptr)
};

/// For a run that trains with AdamW: throws CLI::ValidationError (usage message, exit 2) when --momentum or
/// --nesterov was given, which only momentum SGD reads (AdamW's momentum is --beta1); silently ignoring them would
/// train something else than asked.
inline void reject_sgd_options_with_adamw(const common_options& o) {
    if (o.momentum_given)
        throw CLI::ValidationError("--momentum", "is an option of momentum SGD; this run uses AdamW (--optimizer "
                                                 "adamw, the default on a text network), whose momentum is --beta1");
    if (o.nesterov)
        throw CLI::ValidationError("--nesterov", "is an option of momentum SGD; this run uses AdamW (--optimizer "
                                                 "adamw, the default on a text network)");
}

/// Validator for a momentum in [0, 1) (CLI::Range cannot express the open end). With `single_precision` the value
/// must also stay below 1 when rounded to float (momentum SGD's velocity decay is a float: 0.9999999999 would be 1
/// there and never decay); the message repeats the text as given.
inline CLI::Validator momentum_range(bool single_precision = false) {
    return CLI::Validator(
        [single_precision](std::string& text) -> std::string {
            double v = 0;
            std::size_t used = 0;
            try {
                v = std::stod(text, &used);
            } catch (const std::exception&) {
                return "must be a number in [0, 1), got " + text;
            }
            if (used != text.size() || !(v >= 0.0 && v < 1.0)) return "must be a number in [0, 1), got " + text;
            if (single_precision && !(static_cast<float>(v) < 1.0f))
                return "must be below 1 also in single precision, got " + text +
                       ", which rounds to 1 as a float (the velocity would never decay; 0.99999994 is the largest "
                       "float below 1)";
            return {};
        },
        "in [0, 1)");
}

/// Validator for a floating-point option: rejects NaN and infinities (also a value that overflows, e.g. 1e999),
/// which CLI11's range checks let through (every comparison with NaN is false). Text that is not a number is left
/// to CLI11's conversion, which names the option.
inline CLI::Validator finite_number() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end != text.c_str() && !std::isfinite(v)) return "must be a finite number, got " + text;
            return {};
        },
        "");
}

/// Validator for a path or list option given as an empty string: "" would read as "not given" (no file written,
/// training from scratch, one stage), which is never what an explicit option means. `meaning`: what to give instead.
inline CLI::Validator not_empty(const std::string& meaning) {
    return CLI::Validator(
        [meaning](std::string& text) -> std::string {
            if (text.find_first_not_of(" \t") == std::string::npos)
                return "must not be empty (give " + meaning + ", or leave the option out)";
            return {};
        },
        "");
}

/// Validator for an unsigned 64-bit count or seed: rejects an empty value (CLI11 converts "" to 0: --seed '' ran
/// with seed 0, --max-samples '' on every sample), a leading minus sign (CLI11 would wrap "-5" to 2^64 - 5) and a
/// decimal number above 2^64 - 1 (CLI11 capped "99999999999999999999" to 2^64 - 1 silently).
inline CLI::Validator not_negative() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            const auto first = text.find_first_not_of(" \t");
            if (first == std::string::npos) return "must not be empty (give a number, or leave the option out)";
            if (text[first] == '-') return "must not be negative, got " + text;
            const auto last = text.find_last_not_of(" \t");
            const std::string_view digits(text.data() + first, last - first + 1);
            std::uint64_t v = 0;
            const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
            if (r.ec == std::errc::result_out_of_range)
                return fmt::format("must be at most {} (2^64 - 1), got {}", UINT64_MAX, text);
            return {};
        },
        "NONNEGATIVE");
}

/// Registers the shared options on `app`, storing into `o`. `modes` and `networks` are the accepted names of
/// --mode and --network.
inline void add_common_options(CLI::App& app, common_options& o, const std::vector<std::string>& modes,
                               const std::vector<std::string>& networks) {
    app.add_option("--mode", o.mode, "Training mode")->check(CLI::IsMember(modes))->capture_default_str();
    app.add_option("--network", o.network,
                   "Network: cnn (small CNN with group norm, 1x28x28: MNIST / Fashion-MNIST), cnn32 (the same layers "
                   "for 3x32x32: CIFAR-10), cnn-on (with Online Norm), mlp (784-256-256-10), resnet20, resnet56 "
                   "(--norm; 1x28x28, or 3x32x32 when --data holds CIFAR-10 binary batches), llama-tiny (2-block "
                   "LLaMA-like byte-level decoder on a text corpus), llama-4x128 (the same with 4 blocks of width 128)")
        ->check(CLI::IsMember(networks))
        ->capture_default_str();
    app.add_option("--norm", o.norm,
                   "ResNets: the normalization after every conv, gn (group norm, 8 groups) or on (Online "
                   "Normalization, per channel, running statistics)")
        ->check(CLI::IsMember({"gn", "on"}))
        ->capture_default_str();
    app.add_option("--batch", o.batch, "Batch size B (samples per update; micro-batch size b in pipelined modes)")
        ->check(CLI::Range(std::size_t(1), std::size_t(1) << 20))
        ->capture_default_str();
    app.add_option("--lr", o.lr, "Learning rate (per mean-loss gradient)")
        ->check(finite_number())
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    app.add_option("--momentum", o.momentum, "Momentum m in [0, 1)")
        ->check(momentum_range(true))
        ->capture_default_str();
    app.add_flag("--nesterov", o.nesterov, "Nesterov momentum instead of heavy-ball");
    app.add_option("--weight-decay", o.weight_decay, "L2 weight decay lambda (added to the gradient)")
        ->check(finite_number())
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    app.add_option("--epochs", o.epochs, "Train until this many epochs are complete (a resumed run counts the "
                                         "checkpoint's epochs); 0 only evaluates")
        ->check(CLI::Range(std::size_t(0), std::size_t(1000000)))
        ->capture_default_str();
    app.add_option("--max-samples", o.max_samples,
                   "Use at most this many training samples (text networks: sequences) per epoch (the first ones of the "
                   "epoch's shuffled order; 0 = all), for quick runs")
        ->check(not_negative())
        ->capture_default_str();
    app.add_option("--max-test-samples", o.max_test_samples,
                   "Evaluate on at most this many test samples (text networks: the first validation sequences; 0 = all)")
        ->check(not_negative())
        ->capture_default_str();
    app.add_option("--seed", o.seed, "Seed of the parameter initialization and of the per-epoch shuffling")
        ->check(not_negative())
        ->capture_default_str();
    app.add_option("--data", o.data, "Dataset directory (MNIST / Fashion-MNIST IDX files, gzip or plain, for the "
                                     "1x28x28 networks; CIFAR-10 binary batches for --network cnn32; for the text "
                                     "networks a text corpus directory of fortune files (default there: /usr/share/games/fortunes))")
        ->check(not_empty("a dataset directory"))
        ->capture_default_str();
    app.add_option("--metrics", o.metrics, "Write per-epoch metrics as JSON lines to this file (a run resumed with --checkpoint-in "
                                       "appends, after the lines of the epochs the checkpoint completed)")
        ->check(not_empty("a file path"));
    app.add_option("--log-every", o.log_every,
                   "With --metrics: also write, every this many samples, the mean training loss of the samples whose "
                   "loss became known since the last such line (a line with \"interval\":true and their count "
                   "\"completed_samples\", between the epoch lines; an epoch's last one after its drain; --mode pb "
                   "learns a loss at its backward, the concurrent executor once per --push-buffer micro-batches; 0: none)")
        ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 40))
        ->capture_default_str();
    app.add_option("--checkpoint-in", o.checkpoint_in,
                   "Start from this checkpoint directory (weights, optimizer state, data position). sgd and sync "
                   "checkpoints resume in either mode; a pb one only in --mode pb (exit 1 otherwise); pb starts "
                   "from an sgd / sync checkpoint's weights with zero velocity; any --stages cut, schedule and "
                   "number of ranks resume it (resharding; pb with 2bw: its own cut only)")
        ->check(not_empty("a checkpoint directory"));
    app.add_option("--checkpoint-out", o.checkpoint_out,
                   "Save a checkpoint directory here after every epoch (atomically replaced)")
        ->check(not_empty("a directory path"));
    app.add_option("--lr-schedule", o.lr_schedule, "Learning-rate schedule over samples: constant, step, cosine")
        ->check(CLI::IsMember({"constant", "step", "cosine"}))
        ->capture_default_str();
    app.add_option("--lr-step-epochs", o.lr_step_epochs, "Step schedule: epochs between two decays")
        ->check(finite_number())
        ->check(CLI::Range(1e-9, 1e9))
        ->capture_default_str();
    app.add_option("--lr-gamma", o.lr_gamma, "Step schedule: decay factor per step")
        ->check(finite_number())
        ->check(CLI::Range(1e-12, 1e6))
        ->capture_default_str();
    app.add_option("--lr-min", o.lr_min, "Cosine schedule: final learning rate")
        ->check(finite_number())
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    app.add_option("--warmup", o.warmup_epochs, "Linear learning-rate warm-up, in epochs (fractions allowed)")
        ->check(finite_number())
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    // At most the machine's hardware threads: more only oversubscribe the cores (the fuzzer found --blas-threads 100
    // spending over 30 s of CPU time before a data error on a 2-core machine).
    const int hardware_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    app.add_option("--blas-threads", o.blas_threads,
                   "OpenBLAS threads (openblas_set_num_threads), at most the hardware threads")
        ->check(CLI::Range(1, hardware_threads))
        ->capture_default_str();
    app.add_option("--progress", o.progress,
                   "Progress display: auto (bar on a terminal, log lines otherwise), bar, log, none")
        ->check(CLI::IsMember({"auto", "bar", "log", "none"}))
        ->capture_default_str();
    app.add_option("--transport", o.transport,
                   "Where the stages run: local (this process) or mpi (under mpirun -np P: the stage cut in P "
                   "contiguous groups, one per rank; --mode pb or sync, image networks, the concurrent executor, no "
                   "--trace; needs a build with -DPIPEPROP_WITH_MPI=ON)")
        ->check(CLI::IsMember({"local", "mpi"}))
        ->capture_default_str();
    app.add_option("--memory-check", o.memory_check,
                   "Before building a --mode pb or sync engine, compare its memory estimate with the memory the "
                   "process can get (MemAvailable, ulimit -v) and refuse a run that cannot fit: on or off")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    app.add_option("--remote-timeout", o.remote_timeout,
                   "--transport mpi: seconds a rank waits for a message of another rank before it gives up")
        ->check(CLI::Range(std::size_t{1}, std::size_t{86400}))
        ->capture_default_str();
}

/// Checks combinations the per-option validators cannot see. Throws CLI::ValidationError (-> usage, exit 2).
inline void validate_common_options(const common_options& o) {
    // CLI11's range checks let NaN through (every comparison with NaN is false): reject it here, as a bad option.
    const std::pair<const char*, double> reals[] = {{"--lr", o.lr},
                                                    {"--momentum", o.momentum},
                                                    {"--weight-decay", o.weight_decay},
                                                    {"--lr-step-epochs", o.lr_step_epochs},
                                                    {"--lr-gamma", o.lr_gamma},
                                                    {"--lr-min", o.lr_min},
                                                    {"--warmup", o.warmup_epochs}};
    for (const auto& [name, value] : reals)
        if (!std::isfinite(value)) throw CLI::ValidationError(name, fmt::format("must be a finite number, got {}", value));
    if (o.lr_schedule == "cosine" && o.lr_min > o.lr)
        throw CLI::ValidationError("--lr-min", "must not exceed --lr for the cosine schedule");
    if (o.nesterov && o.momentum == 0.0) throw CLI::ValidationError("--nesterov", "needs --momentum > 0");
    if (o.transport == "mpi" && o.mode == "sgd")
        throw CLI::ValidationError("--transport", "mpi runs the pipelined modes (--mode pb, --mode sync); --mode sgd "
                                                  "has no stages");
    if (o.transport == "mpi" && is_text_network(o.network))
        throw CLI::ValidationError("--transport", "mpi trains the image networks (not yet " + o.network + ")");
    if (o.norm_given && !is_resnet(o.network))
        throw CLI::ValidationError("--norm", "applies to --network resnet20 and resnet56 (the small CNN with Online "
                                             "Normalization is --network cnn-on)");
}

/// Informational line on stderr (suppressed with --progress none).
inline void note(const common_options& o, const std::string& text) {
    if (o.progress == "none") return;
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
}

}  // namespace train
