// examples/libtorch/libtorch_embedding.cpp: pipeprop's PB engine embedded in libtorch.
//
// libtorch owns everything a framework owns: the model (a torch::nn::Sequential whose parameters torch initializes),
// its weights (one contiguous float torch::Tensor, every parameter a view into it) and the data pipeline
// (torch::data: a Dataset over Fashion-MNIST, a sampler and a DataLoader giving micro-batches of b = 1). pipeprop
// only trains: a fine-grained PB pipeline (every conv / dense layer a stage: 4 stages, delays 6, 4, 2, 0; spike
// compensation + linear weight prediction, PB-paper §3-4) runs on the caller's parameter storage
// (pb::pipeline(options, std::span<float>): the engine's embedding constructor) and writes every update into the
// torch tensor in place, driven by this program's own loop (push per micro-batch, drain at the end). Torch then
// evaluates its own modules on the test split, which reads exactly those tensors.
//
// The check (ctest example_libtorch_embedding): pipeprop's own run of the same configuration (same engine type and
// options, same initial weights, the same samples in the same order from pipeprop's own data path, its own storage)
// must end with the same weights BIT FOR BIT as the torch-owned block (and the same per-micro-batch losses), and
// torch's evaluation of its modules must agree with pipeprop's evaluation of the engine. Exit 0 when both hold,
// 1 when not (or on a runtime error: missing data, ...), 2 for bad options.
//
//   libtorch_embedding [--samples N] [--order sequential|random] [--data DIR]
//
// --order random feeds torch's RandomSampler order instead of the sequential one: the comparison with pipeprop's
// sequential run must then report different weights (ctest example_libtorch_embedding_order_matters shows that the
// check can fail).
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <boost/mp11/algorithm.hpp>
#include <pipeprop/pipeprop.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace pp = pipeprop;

namespace {

// The network, once as a pipeprop type and once as torch modules with the same layers, in the same order.
// Shapes per sample: [1,28,28] -> conv [8,28,28] -> pool [8,14,14] -> conv [16,14,14] -> pool [16,7,7] -> [784]
// -> [64] -> [10]. Parameters (pipeprop's block = torch's registration order): conv weight [8,1,3,3], bias [8],
// conv weight [16,8,3,3], bias [16], dense weight [64,784], bias [64], dense weight [10,64], bias [10].
using cnn = pp::network<pp::shape<1, 28, 28>,                                  //
                        pp::conv2d<8, 3, 1, 1>, pp::relu, pp::max_pool2d<2>,   //
                        pp::conv2d<16, 3, 1, 1>, pp::relu, pp::max_pool2d<2>,  //
                        pp::flatten, pp::dense<64>, pp::relu, pp::dense<10>>;
using pb_pipeline = pp::pb::pipeline<cnn, pp::fine_grained<>, pp::pb::policy::sc_lwp<>>;
static_assert(pb_pipeline::stage_count == 4 && pb_pipeline::delays[0] == 6, "every conv / dense layer starts a stage");
constexpr std::size_t input_size = pb_pipeline::input_size;  // 784 floats per sample

torch::nn::Sequential make_torch_cnn() {
    namespace nn = torch::nn;
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(784, 64), nn::ReLU(), nn::Linear(64, 10));
}

/// Moves every parameter of `model` into one contiguous float tensor laid out as pipeprop's parameter block of the
/// network (layer_stack: layers in order, each layer's parameter_tensors() in order) and returns that block: each
/// parameter becomes a view of its slice (set_data), keeping its value. Throws std::logic_error naming the node when
/// torch's parameters (registration order) do not match pipeprop's tensors in number or shape.
torch::Tensor move_parameters_into_one_block(torch::nn::Module& model) {
    using stack = pb_pipeline::stack_type;
    std::vector<torch::Tensor> params = model.parameters();
    torch::Tensor block = torch::empty({static_cast<std::int64_t>(stack::parameter_count)}, torch::kFloat32);
    torch::NoGradGuard no_grad;
    std::size_t next = 0;
    boost::mp11::mp_for_each<boost::mp11::mp_iota_c<stack::layer_count>>([&](auto i) {
        using layer = typename stack::template layer_type<i>;
        if constexpr (layer::parameter_count > 0) {
            static_assert(requires { layer::parameter_tensors(); },
                          "each weight layer must name its tensors (parameter_tensors()) to be mapped to torch");
            std::size_t offset = stack::parameter_offset[i];
            for (const auto& t : layer::parameter_tensors()) {
                const std::string name = std::string(stack::node_names[i]) + "." + std::string(t.name);
                if (next == params.size())
                    throw std::logic_error("torch model has fewer parameters than pipeprop's network (at " + name +
                                           ")");
                torch::Tensor& p = params[next++];
                const std::vector<std::int64_t> dims(t.dims.begin(), t.dims.begin() + t.rank);
                if (p.sizes() != torch::IntArrayRef(dims))
                    throw std::logic_error("torch parameter " + std::to_string(next - 1) + " has shape " +
                                           c10::str(p.sizes()) + ", pipeprop's " + name + " " +
                                           c10::str(torch::IntArrayRef(dims)));
                torch::Tensor slice =
                    block.narrow(0, static_cast<std::int64_t>(offset), static_cast<std::int64_t>(t.size())).view(dims);
                slice.copy_(p);
                p.set_data(slice);  // the module's parameter now IS the slice (same storage)
                if (p.data_ptr<float>() != block.data_ptr<float>() + offset)
                    throw std::logic_error("torch parameter " + name + " is not a view of the block");
                offset += t.size();
            }
        }
    });
    if (next != params.size())
        throw std::logic_error("torch model has " + std::to_string(params.size()) + " parameters, pipeprop's network " +
                               std::to_string(next));
    return block;
}

/// Fashion-MNIST's training split as a torch dataset: example i is image i [1, 28, 28] float (normalized by
/// pipeprop's loader: torch's MNIST reader wants uncompressed files, Debian ships them gzipped) and its label (int64
/// scalar). Both are copied into tensors torch owns.
class fashion_mnist : public torch::data::datasets::Dataset<fashion_mnist> {
public:
    explicit fashion_mnist(const pp::data::dataset& split) {
        const auto n = static_cast<std::int64_t>(split.count);
        images_ = torch::from_blob(const_cast<float*>(split.images.data()), {n, 1, 28, 28}, torch::kFloat32).clone();
        labels_ = torch::from_blob(const_cast<std::int32_t*>(split.labels.data()), {n}, torch::kInt32)
                      .to(torch::kInt64);
    }
    torch::data::Example<> get(std::size_t i) override {
        return {images_[static_cast<std::int64_t>(i)], labels_[static_cast<std::int64_t>(i)]};
    }
    torch::optional<std::size_t> size() const override { return static_cast<std::size_t>(images_.size(0)); }

private:
    torch::Tensor images_;  // [N, 1, 28, 28] float
    torch::Tensor labels_;  // [N] int64
};

struct training_result {
    std::vector<float> losses;  // per micro-batch, in completion order (= push order)
};

void collect(std::span<const pp::pb::completed_micro_batch<float>> done, training_result& r) {
    for (const auto& c : done) r.losses.push_back(c.loss);
}

/// Trains `e` on the first `samples` micro-batches (b = 1) of a torch DataLoader with sampler Sampler over `train`.
template <class Sampler>
training_result train_from_torch(pb_pipeline& e, fashion_mnist train, std::size_t samples) {
    auto loader = torch::data::make_data_loader<Sampler>(std::move(train).map(torch::data::transforms::Stack<>()),
                                                         torch::data::DataLoaderOptions().batch_size(1).workers(0));
    training_result r;
    std::size_t pushed = 0;
    for (auto& batch : *loader) {  // batch.data [b, 1, 28, 28] float, batch.target [b] int64
        if (pushed == samples) break;
        const auto b = static_cast<std::size_t>(batch.data.size(0));
        const torch::Tensor x = batch.data.contiguous();
        const torch::Tensor y = batch.target.to(torch::kInt32);  // pipeprop's targets are int32
        collect(e.push({x.data_ptr<float>(), b * input_size}, {y.data_ptr<std::int32_t>(), b}, b), r);
        pushed += b;
    }
    collect(e.drain(), r);  // every update applied: the torch tensors hold the final weights
    return r;
}

/// pipeprop's own data path: samples 0, 1, ... of the loaded split, b = 1.
training_result train_from_pipeprop(pb_pipeline& e, const pp::data::dataset& train, std::size_t samples) {
    training_result r;
    for (std::size_t i = 0; i < samples; ++i)
        collect(e.push({train.image(i), input_size}, {&train.labels[i], 1}, 1), r);
    collect(e.drain(), r);
    return r;
}

struct torch_evaluation {
    double accuracy = 0.0;
    double loss = 0.0;  // mean cross-entropy (nats)
};

/// Torch's own forward pass of `model` over x [N, 1, 28, 28], labels y [N] int64, in chunks of 1000.
torch_evaluation evaluate_with_torch(torch::nn::Sequential& model, const torch::Tensor& x, const torch::Tensor& y) {
    torch::NoGradGuard no_grad;
    model->eval();
    const std::int64_t n = x.size(0);
    std::int64_t correct = 0;
    double loss_sum = 0.0;
    for (std::int64_t first = 0; first < n; first += 1000) {
        const std::int64_t b = std::min<std::int64_t>(1000, n - first);
        const torch::Tensor logits = model->forward(x.narrow(0, first, b));
        const torch::Tensor labels = y.narrow(0, first, b);
        loss_sum += torch::nn::functional::cross_entropy(
                        logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                        .item<double>();
        correct += logits.argmax(1).eq(labels).sum().item<std::int64_t>();
    }
    return {static_cast<double>(correct) / static_cast<double>(n), loss_sum / static_cast<double>(n)};
}

/// Values of a and b whose bits differ (every value when the sizes differ).
std::size_t count_bitwise_differences(std::span<const float> a, std::span<const float> b) {
    if (a.size() != b.size()) return std::max(a.size(), b.size());
    std::size_t n = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        n += std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]);
    return n;
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t samples = 6000;
    std::string order = "sequential";
    std::string data_dir = pp::data::default_data_directory;
    CLI::App app{"pipeprop's fine-grained PB engine training weights that libtorch owns, fed by a torch DataLoader; "
                 "checked bitwise against pipeprop's own run"};
    app.add_option("--samples", samples,
                   "micro-batches of b = 1 to train on (sequential order: the first N samples of the training split)")
        ->check(CLI::Range(std::size_t{1}, std::size_t{60000}));
    app.add_option("--order", order,
                   "torch's sampler: sequential (the order of pipeprop's reference run) or random (RandomSampler: the "
                   "bitwise check must then fail)")
        ->check(CLI::IsMember({"sequential", "random"}));
    app.add_option("--data", data_dir, "Fashion-MNIST directory (IDX files, gzipped or not)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::cerr << "libtorch_embedding: " << e.what() << "\n\n" << app.help() << std::flush;
        return 2;
    }

    try {
        torch::set_num_threads(1);  // the PB pipeline's stages use the cores (oneTBB)
        torch::manual_seed(1);      // torch's initial weights and RandomSampler's order
        const auto data = pp::data::load_image_dataset(data_dir, {1, 28, 28});
        if (samples > data.train.count)
            throw std::invalid_argument("--samples " + std::to_string(samples) + " exceeds the " +
                                        std::to_string(data.train.count) + " training samples");
        const auto h = pp::optim::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, 1);
        const pp::optim::hyperparameters<float> hyper{.learning_rate = float(h.learning_rate),
                                                      .momentum = float(h.momentum)};
        const pp::pb::options<pp::pb::policy::sc_lwp<>> options{.max_batch = 1,
                                                                .executor = pp::pb::executor_kind::concurrent};

        // The framework's side: torch's model, its weights in one torch tensor, torch's test tensors.
        torch::nn::Sequential model = make_torch_cnn();
        torch::Tensor block = move_parameters_into_one_block(*model);  // [parameter_count] float, torch-initialized
        const std::span<float> storage(block.data_ptr<float>(), static_cast<std::size_t>(block.numel()));
        const std::vector<float> initial(storage.begin(), storage.end());
        const auto test_n = static_cast<std::int64_t>(data.test.count);
        const torch::Tensor test_x =
            torch::from_blob(const_cast<float*>(data.test.images.data()), {test_n, 1, 28, 28}, torch::kFloat32).clone();
        const torch::Tensor test_y =
            torch::from_blob(const_cast<std::int32_t*>(data.test.labels.data()), {test_n}, torch::kInt32)
                .to(torch::kInt64);
        const torch_evaluation before = evaluate_with_torch(model, test_x, test_y);

        // PB on the torch tensor: the engine's stages are slices of `storage`; every update lands in `block`.
        pb_pipeline embedded(options, storage);
        embedded.set_hyperparameters(hyper);
        namespace samplers = torch::data::samplers;
        const training_result from_torch =
            order == "sequential"
                ? train_from_torch<samplers::SequentialSampler>(embedded, fashion_mnist(data.train), samples)
                : train_from_torch<samplers::RandomSampler>(embedded, fashion_mnist(data.train), samples);
        const torch_evaluation after = evaluate_with_torch(model, test_x, test_y);  // torch reads the trained block
        const pp::evaluation pb_eval = embedded.evaluate(data.test.images, data.test.labels, data.test.count);

        // pipeprop's own run of the same configuration: its own storage, the same initial weights, pipeprop's data.
        pb_pipeline own(options);
        own.load_parameters(initial);
        own.set_hyperparameters(hyper);
        const training_result from_pipeprop = train_from_pipeprop(own, data.train, samples);
        std::vector<float> own_weights(pb_pipeline::stack_type::parameter_count);
        own.copy_parameters(own_weights);

        double mean_loss = 0.0;
        for (float l : from_torch.losses) mean_loss += l;
        mean_loss /= static_cast<double>(from_torch.losses.size());
        std::printf("network: 4 fine-grained PB stages (delays 6 4 2 0), SC + LWP, b = 1, %zu parameters in one "
                    "torch::Tensor\n", storage.size());
        std::printf("trained on %zu samples from torch's DataLoader (%s order), mean training loss %.4f\n", samples,
                    order.c_str(), mean_loss);
        std::printf("torch's modules on the test split: accuracy %.4f before training, %.4f after (loss %.4f)\n",
                    before.accuracy, after.accuracy, after.loss);
        std::printf("pipeprop's evaluation of the engine:        accuracy %.4f (loss %.4f)\n", pb_eval.accuracy,
                    pb_eval.loss);

        bool ok = true;
        const std::size_t changed = count_bitwise_differences(initial, storage);
        std::printf("values of the torch block changed by training: %zu of %zu\n", changed, storage.size());
        if (changed == 0) {
            std::printf("training did not change the torch block\n");
            ok = false;
        }
        // Same model, same weights: torch and pipeprop compute the same logits up to float rounding.
        if (std::abs(after.accuracy - pb_eval.accuracy) > 0.001 || std::abs(after.loss - pb_eval.loss) > 1e-4) {
            std::printf("torch's evaluation of its modules differs from pipeprop's: torch does not see the weights\n");
            ok = false;
        }
        const std::size_t weight_diffs = count_bitwise_differences(storage, own_weights);
        const bool same_losses = count_bitwise_differences(from_torch.losses, from_pipeprop.losses) == 0;
        if (weight_diffs == 0 && same_losses) {
            std::printf("torch-owned weights equal pipeprop's own run bit for bit (%zu values, %zu losses)\n",
                        storage.size(), from_torch.losses.size());
        } else {
            if (weight_diffs > 0)
                std::printf("weights differ from pipeprop's own run: %zu of %zu values\n", weight_diffs,
                            storage.size());
            if (!same_losses) std::printf("per-micro-batch losses differ from pipeprop's own run\n");
            ok = false;
        }
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::cerr << "libtorch_embedding: error: " << e.what() << std::endl;
        return 1;
    }
}
