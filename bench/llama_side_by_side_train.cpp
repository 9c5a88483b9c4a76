// bench/llama_side_by_side_train.cpp: pipeprop's side of the llama-tiny side-by-side comparison with PyTorch and
// libtorch (bench/side_by_side.sh, section "llama-tiny"; the other sides are bench/torch_llama_side_by_side.py and
// bench/libtorch/libtorch_llama_side_by_side.cpp).
//
// Trains llama-tiny (pipeprop/models/llama_tiny.hpp: byte embedding 256 x 64, 2 pre-norm blocks of 4-head causal
// attention with RoPE and SwiGLU hidden 172, RMSNorm, LM head 64 -> 256 without bias, L = 64 tokens) with
// pipeprop's sequential_trainer, token_cross_entropy (mean over the batch's tokens) and AdamW, single-threaded, on
// the first N training sequences of the fortunes corpus (/usr/share/games/fortunes, data/text_dataset.hpp) in the
// order of epoch 0 of the main program's shuffle (epoch_permutation(seed 1, epoch 0)), b sequences per step: the
// whole training step forward, backward-p1, backward-p2 and the AdamW update, as --mode sgd runs it for llama-tiny.
// Prints one result line in the format of side_by_side_train (bench/ratios.py reads it):
//   result impl=pipeprop network=llama-tiny precision=<float|double> batch=<b> samples=<N> seconds=<s>
//          samples_per_s=<r> cpu_seconds=<s> cpu_samples_per_s=<r> lr=<lr> weight_decay=<lambda>
//          first_loss=<mean token loss of the first batch, before any update>
//          last_loss=<mean token loss of the last batch, before its update>
//          eval_loss=<mean token loss of the first E validation sequences after training>
//          flop_per_sample=<FLOP of a training step per sequence, multiply-adds of the math x 2 (see below)>
// A sample is one sequence of 64 tokens. seconds: wall clock of the training loop; cpu_seconds: the process's CPU
// time over it (std::clock). --precision double trains in float64 (parameters initialized in double): the
// same-math check of the three sides.
// Hyperparameters: AdamW lr 3e-3 (the main program's default for text networks), betas (0.9, 0.99), eps 1e-8 (its
// defaults), decoupled weight decay 0.01 (torch.optim.AdamW's default; the main program's is 0: a nonzero one makes
// the same-math check cover the decay), constant learning rate, the same at every b.
//
// With --export DIR it first writes what the other two sides need to train the identical run (.npy via xtensor):
//   - the initial parameters, <node name>.<tensor>.npy, and parameters.txt (bench/side_by_side_export.hpp); every
//     tensor in pipeprop's layout, which is torch's: embedding table [256, 64] (nn.Embedding.weight), attention
//     w_q, w_k, w_v, w_o [64, 64] and SwiGLU w_gate, w_up [172, 64], w_down [64, 172] and the LM head weight
//     [256, 64] all [out, in] as nn.Linear.weight (y = x W^T), RMSNorm scale [64];
//   - x.npy [N, 64] int32 (the token ids of the N training sequences in training order) and targets.npy [N, 64]
//     int32 (the next-token ids); eval_x.npy, eval_targets.npy [E, 64] int32 (the first E validation sequences);
//   - hyperparameters.txt: "batch", "lr", "beta1", "beta2", "eps", "weight_decay", "network", "precision" lines.
//
// flop_per_sample: 2 x the multiply-adds of the step's math per sequence: forward L (blocks (4 D^2 + 3 D H) + D V)
// + blocks 2 L^2 D (q k^T and P v counted in full), backward twice that (input and weight gradients; the attention's
// L x L products: dP, dv, dq, dk); element-wise work, the embedding and the update are left out. 50.5 MFLOP.
//
// Usage: llama_side_by_side_train --batch 8 --samples 800 [--text DIR] [--export DIR] [--seed S] [--eval E]
//                                 [--precision float|double]
// Exit code 2 for bad arguments or data (message on stderr).
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xnpy.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "pipeprop/data/epoch_permutation.hpp"
#include "pipeprop/data/text_dataset.hpp"
#include "pipeprop/loss/token_cross_entropy.hpp"
#include "pipeprop/models/llama_tiny.hpp"
#include "pipeprop/optim/adamw.hpp"
#include "pipeprop/sequential_trainer.hpp"
#include "side_by_side_export.hpp"

namespace {

namespace pp = pipeprop;
using net = pp::models::llama_tiny;
constexpr std::size_t seq = pp::models::llama_tiny_length, vocab = pp::models::llama_tiny_vocabulary;
constexpr std::size_t blocks = 2, width = 64, hidden = 172;  // llama_decoder<2, 64, 4, 172>

/// FLOP per sequence of a training step (see the file comment).
constexpr double flop_per_sequence() {
    const double L = seq, D = width, H = hidden, V = vocab;
    const double forward = L * (blocks * (4 * D * D + 3 * D * H) + D * V) + blocks * 2 * L * L * D;
    return 2.0 * 3.0 * forward;
}

struct options {
    std::size_t batch = 8, samples = 800, eval = 64;
    std::uint64_t seed = 1;
    std::string text_dir = pp::data::default_text_directory, export_dir, precision = "float";
    double lr = 3e-3, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.01;
};

template <class T>
void run(const options& opt, const pp::data::text_dataset& data) {
    using loss = pp::token_cross_entropy<T, seq, vocab>;
    using trainer_type = pp::sequential_trainer<net, T, loss, pp::optim::adamw<T>>;
    typename trainer_type::config_type cfg;
    cfg.max_batch = opt.batch;
    cfg.optimizer = {.beta1 = opt.beta1, .beta2 = opt.beta2, .eps = opt.eps};
    cfg.schedule = pp::optim::lr_schedule::constant(opt.lr);
    cfg.momentum = 0.0;
    cfg.weight_decay = opt.weight_decay;
    cfg.seed = opt.seed;
    trainer_type trainer(cfg);

    // The training stream: the first N sequences of epoch 0's order (the main program's shuffle with this seed).
    const std::vector<std::uint32_t> order = pp::data::epoch_permutation(opt.seed, 0, data.train().count());
    std::vector<std::int32_t> ids(opt.samples * seq), targets(opt.samples * seq);
    data.train().gather(std::span<const std::uint32_t>(order), 0, opt.samples, ids.data(), targets.data());
    const auto validation = data.validation_arrays<std::int32_t>(opt.eval);

    if (!opt.export_dir.empty()) {
        const std::filesystem::path dir(opt.export_dir);
        std::filesystem::create_directories(dir);
        pp::bench::export_parameters<net, T>(dir, trainer.parameters());
        const auto dump = [&](const char* name, const std::vector<std::int32_t>& v, std::size_t n) {
            xt::dump_npy((dir / name).string(),
                         xt::adapt(v.data(), n * seq, xt::no_ownership(), std::vector<std::size_t>{n, seq}));
        };
        dump("x.npy", ids, opt.samples);
        dump("targets.npy", targets, opt.samples);
        dump("eval_x.npy", validation.inputs, validation.count);
        dump("eval_targets.npy", validation.targets, validation.count);
        std::ofstream hpf(dir / "hyperparameters.txt");
        hpf.precision(17);
        hpf << "batch " << opt.batch << "\nlr " << opt.lr << "\nbeta1 " << opt.beta1 << "\nbeta2 " << opt.beta2
            << "\neps " << opt.eps << "\nweight_decay " << opt.weight_decay << "\nnetwork llama-tiny\nprecision "
            << opt.precision << "\n";
        if (!hpf) throw std::runtime_error("cannot write " + (dir / "hyperparameters.txt").string());
    }

    // The network's input: token ids as T values (exact integers), converted before the timed loop.
    const std::vector<T> x(ids.begin(), ids.end());
    const std::vector<T> eval_x(validation.inputs.begin(), validation.inputs.end());
    T first_loss = 0, last_loss = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (std::size_t first = 0; first < opt.samples; first += opt.batch) {
        last_loss = trainer.train_batch(x.data() + first * seq, targets.data() + first * seq, opt.batch);
        if (first == 0) first_loss = last_loss;
    }
    const double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto ev = trainer.evaluate(eval_x.data(), validation.targets.data(), validation.count);
    std::printf(
        "result impl=pipeprop network=llama-tiny precision=%s batch=%zu samples=%zu seconds=%.6f samples_per_s=%.2f "
        "cpu_seconds=%.6f cpu_samples_per_s=%.2f lr=%.9g weight_decay=%.9g first_loss=%.17g last_loss=%.17g "
        "eval_loss=%.17g flop_per_sample=%.6g\n",
        opt.precision.c_str(), opt.batch, opt.samples, seconds, double(opt.samples) / seconds, cpu_seconds,
        double(opt.samples) / cpu_seconds, opt.lr, opt.weight_decay, double(first_loss), double(last_loss), ev.loss,
        flop_per_sequence());
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"pipeprop's side of the llama-tiny side-by-side benchmark with PyTorch and libtorch "
                 "(bench/side_by_side.sh runs all three)"};
    options opt;
    app.add_option("--batch", opt.batch, "sequences per step b")->check(CLI::PositiveNumber);
    app.add_option("--samples", opt.samples, "training sequences N (a multiple of b)")->check(CLI::PositiveNumber);
    app.add_option("--eval", opt.eval, "validation sequences of the loss evaluated after training")
        ->check(CLI::PositiveNumber);
    app.add_option("--seed", opt.seed, "parameter initialization and shuffle seed");
    app.add_option("--text", opt.text_dir, "fortunes corpus directory");
    app.add_option("--export", opt.export_dir, "write initial parameters, sequences, hyperparameters here");
    app.add_option("--precision", opt.precision, "float (speed) or double (same-math check)")
        ->check(CLI::IsMember({"float", "double"}));
    CLI11_PARSE(app, argc, argv);
    openblas_set_num_threads(1);
    try {
        pp::data::text_dataset data(pp::data::load_text_corpus(opt.text_dir, vocab), seq);
        if (opt.samples % opt.batch != 0 || opt.samples > data.train().count())
            throw std::invalid_argument("--samples " + std::to_string(opt.samples) + " must be a multiple of --batch " +
                                        std::to_string(opt.batch) + " and at most " +
                                        std::to_string(data.train().count()));
        if (opt.precision == "double")
            run<double>(opt, data);
        else
            run<float>(opt, data);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_side_by_side_train: %s\n", e.what());
        return 2;
    }
    return 0;
}
