// bench/side_by_side_train.cpp: pipeprop's side of the side-by-side comparison with PyTorch and libtorch (issues 6
// and 16).
//
// Trains a network (--network cnn: the small CNN of bench/small_cnn.hpp; --network resnet20: train::resnet20 of
// examples/train/networks.hpp, the ResNet-20 with group norm of the redesign issue) with pipeprop's
// sequential_trainer on the first N Fashion-MNIST training samples, in file order, at micro-batch size b,
// single-threaded, and prints one result line:
//   result impl=pipeprop network=<cnn|resnet20> precision=<float|double> batch=<b> samples=<N> seconds=<s>
//          samples_per_s=<r> cpu_seconds=<s> cpu_samples_per_s=<r> lr=<eta_b> momentum=<m_b>
//          last_loss=<mean loss of the last batch, before its update> eval_loss=<mean loss on the first E samples>
//          flop_per_sample=<FLOP of a training step at b, from the layer types (bench/step_cost.hpp), divided by b>
// seconds: wall clock of the training loop; cpu_seconds: CPU time of the process over the same loop (std::clock),
// the figure that stays meaningful when other programs share the cores. --precision double trains in float64
// (inputs converted exactly from float32, parameters initialized in double): the check that all sides compute the
// same function, free of float32 rounding (which, at lr 0.05, grows by about 10x per 20 steps and reaches ~1e-2
// relative after 100 steps).
// Hyperparameters: momentum SGD (heavy-ball, PyTorch convention) with lr 0.05 and momentum 0.9 at b = 32, scaled to
// other b by optim::scale_hyperparameters (same momentum half-life and step per sample; docs/pb-semantics.md §4).
//
// With --export DIR it first writes what bench/torch_side_by_side.py and bench/libtorch/libtorch_side_by_side need
// to train the identical run (.npy files via xtensor's npy I/O):
//   - the initial parameters, one file per tensor of every node with parameters, <node name>.<tensor>.npy in the
//     layer's layout (dense weight [out, in], conv weight [out, c, kh, kw], bias / gamma / beta [c]); node names as
//     layer_stack::node_names ("layer_09" in the CNN, "layer_09.body_03" and "layer_09.shortcut_00" in ResNet-20's
//     blocks), in the training precision (float32 or float64);
//   - parameters.txt: one line per tensor, "<node name> <tensor> <dims...>", in node order (the readers load exactly
//     these and fail when a tensor is missing on either side or its shape differs);
//   - x.npy [N, 1, 28, 28] float32 (the normalized inputs) and labels.npy [N] int32;
//   - hyperparameters.txt: "batch", "lr", "momentum", "network", "precision" lines ("key value").
//
// flop_per_sample is the work any implementation of the step does with direct (GEMM-shaped) convolutions, so
// samples/s x flop_per_sample is a side's GFLOP/s; bench/ratios.py sets it against this core's peak. pipeprop's
// Winograd convolutions (layers/conv2d_winograd.hpp) do fewer multiply-adds: its GFLOP/s are direct-equivalent.
// With --peak it only measures this core's fp32 peak for the compiled architecture (bench/fp32_peak.hpp) and prints
//   peak peak_gflops=<GFLOP/s> march=<-march of this build> xsimd_arch=<xsimd architecture>
//
// Usage: side_by_side_train --batch 32 --samples 3200 [--network cnn|resnet20] [--data DIR] [--export DIR]
//                          [--seed S] [--eval E] [--precision float|double]
//        side_by_side_train --peak
// Exit code 2 for bad arguments or data (message on stderr).
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xnpy.hpp>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "pipeprop/data/dataset.hpp"
#include "pipeprop/optim/scaling_rules.hpp"
#include "pipeprop/sequential_trainer.hpp"
#include "fp32_peak.hpp"
#include "side_by_side_export.hpp"
#include "small_cnn.hpp"
#include "step_cost.hpp"
#include "train/networks.hpp"

#ifndef PIPEPROP_BENCH_MARCH
#define PIPEPROP_BENCH_MARCH "unknown"
#endif

namespace {

struct options {
    std::size_t batch = 32, samples = 3200, eval = 1000;
    std::uint64_t seed = 1;
    std::string data_dir = pipeprop::data::default_data_directory, export_dir, precision = "float";
    std::string network = "cnn";
};

/// Trains Net with value type T (float: the speed comparison; double: the same-math check) and prints the result
/// line.
template <class Net, class T>
void run(const options& opt, const pipeprop::data::dataset& train) {
    const std::size_t sample_size = train.geometry.size();
    const std::size_t eval = std::min(opt.eval, opt.samples);
    const auto hp = pipeprop::optim::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, opt.batch);
    pipeprop::sequential_trainer_config cfg;
    cfg.max_batch = opt.batch;
    cfg.momentum = hp.momentum;
    cfg.schedule = pipeprop::optim::lr_schedule::constant(hp.learning_rate);
    cfg.seed = opt.seed;
    pipeprop::sequential_trainer<Net, T> trainer(cfg);

    if (!opt.export_dir.empty()) {
        const std::filesystem::path dir(opt.export_dir);
        std::filesystem::create_directories(dir);
        pipeprop::bench::export_parameters<Net, T>(dir, trainer.parameters());
        xt::dump_npy((dir / "x.npy").string(), xt::adapt(train.images.data(), opt.samples * sample_size,
                                                         xt::no_ownership(),
                                                         std::vector<std::size_t>{opt.samples, 1, 28, 28}));
        xt::dump_npy((dir / "labels.npy").string(), xt::adapt(train.labels.data(), opt.samples, xt::no_ownership(),
                                                              std::vector<std::size_t>{opt.samples}));
        std::ofstream hpf(dir / "hyperparameters.txt");
        hpf.precision(17);
        hpf << "batch " << opt.batch << "\nlr " << hp.learning_rate << "\nmomentum " << hp.momentum << "\nnetwork "
            << opt.network << "\nprecision " << opt.precision << "\n";
        if (!hpf) throw std::runtime_error("cannot write " + (dir / "hyperparameters.txt").string());
    }

    // The inputs in T (a copy for double; float trains straight from the dataset, as a user's loop would).
    std::vector<T> converted;
    const T* x = nullptr;
    if constexpr (std::is_same_v<T, float>) {
        x = train.images.data();
    } else {
        converted.assign(train.images.begin(), train.images.begin() + opt.samples * sample_size);
        x = converted.data();
    }
    T last_loss = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (std::size_t first = 0; first < opt.samples; first += opt.batch)
        last_loss = trainer.train_batch(x + first * sample_size, train.labels.data() + first, opt.batch);
    const double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto ev = trainer.evaluate(x, train.labels.data(), eval);
    std::printf(
        "result impl=pipeprop network=%s precision=%s batch=%zu samples=%zu seconds=%.6f samples_per_s=%.2f "
        "cpu_seconds=%.6f cpu_samples_per_s=%.2f lr=%.9g momentum=%.9g last_loss=%.17g eval_loss=%.17g "
        "flop_per_sample=%.6g\n",
        opt.network.c_str(), opt.precision.c_str(), opt.batch, opt.samples, seconds, double(opt.samples) / seconds,
        cpu_seconds, double(opt.samples) / cpu_seconds, hp.learning_rate, hp.momentum, double(last_loss), ev.loss,
        pipeprop::bench::step_cost_of<Net, T>(opt.batch).total().flops / double(opt.batch));
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"pipeprop's side of the side-by-side benchmark with PyTorch and libtorch (bench/side_by_side.sh runs "
                 "all three)"};
    options opt;
    app.add_option("--batch", opt.batch, "micro-batch size b")->check(CLI::PositiveNumber);
    app.add_option("--samples", opt.samples, "training samples N (a multiple of b, at most the training set)")
        ->check(CLI::PositiveNumber);
    app.add_option("--eval", opt.eval, "samples of the loss evaluated after training (first E of the N)")
        ->check(CLI::PositiveNumber);
    app.add_option("--network", opt.network, "cnn (the small CNN) or resnet20 (ResNet-20, group norm)")
        ->check(CLI::IsMember({"cnn", "resnet20"}));
    app.add_option("--seed", opt.seed, "parameter initialization seed");
    app.add_option("--data", opt.data_dir, "Fashion-MNIST directory");
    app.add_option("--export", opt.export_dir, "write initial parameters, inputs, labels, hyperparameters here");
    app.add_option("--precision", opt.precision, "float (speed) or double (same-math check)")
        ->check(CLI::IsMember({"float", "double"}));
    bool peak = false;
    app.add_flag("--peak", peak, "only measure and print this core's fp32 peak (bench/fp32_peak.hpp)");
    CLI11_PARSE(app, argc, argv);
    openblas_set_num_threads(1);
    if (peak) {
        std::printf("peak peak_gflops=%.1f march=%s xsimd_arch=%s\n", pipeprop::bench::measure_peak_gflops(9),
                    PIPEPROP_BENCH_MARCH, xsimd::default_arch::name());
        return 0;
    }

    try {
        const auto data = pipeprop::data::load_image_dataset(opt.data_dir, {1, 28, 28});
        if (opt.samples % opt.batch != 0 || opt.samples > data.train.count)
            throw std::invalid_argument("--samples " + std::to_string(opt.samples) + " must be a multiple of --batch " +
                                        std::to_string(opt.batch) + " and at most " +
                                        std::to_string(data.train.count));
        const auto train_with = [&]<class Net>() {
            if (opt.precision == "double")
                run<Net, double>(opt, data.train);
            else
                run<Net, float>(opt, data.train);
        };
        if (opt.network == "resnet20")
            train_with.template operator()<train::resnet20>();
        else
            train_with.template operator()<pipeprop::bench::small_cnn>();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "side_by_side_train: %s\n", e.what());
        return 2;
    }
    return 0;
}
