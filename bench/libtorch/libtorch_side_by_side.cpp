// bench/libtorch/libtorch_side_by_side.cpp: libtorch's side of the side-by-side comparison with pipeprop:
// the C++ frontend of PyTorch (Debian's libtorch-dev 1.13), so the comparison with PyTorch's kernels is
// made without the Python interpreter's per-op overhead.
//
// Trains the network pipeprop's bench/side_by_side_train exported with --export DIR, exactly as
// bench/torch_side_by_side.py does (same modules, module indices equal to pipeprop's layer positions):
//   cnn:      conv(16, 3x3, pad 1) - group_norm(4) - relu - max_pool(2) - conv(32, 3x3, pad 1) - group_norm(4) -
//             relu - max_pool(2) - flatten - dense(128) - relu - dense(10)           (bench/small_cnn.hpp)
//   resnet20: conv3x3(16) - group_norm(8) - relu, 3 groups of 3 basic blocks at 16, 32, 64 channels, each block
//             followed by a relu; the first block of groups 2 and 3 has a stride-2 conv3x3 and a projection shortcut
//             conv1x1 stride 2 - group_norm(8); global average pool, dense(10)        (train::resnet20)
// Group norm eps 1e-5 everywhere; mean cross-entropy over the batch; heavy-ball momentum SGD (torch::optim::SGD,
// the convention of pipeprop's momentum update). One thread (torch::set_num_threads(1)).
//
// Input (DIR, written by side_by_side_train --export): parameters.txt ("<node name> <tensor> <dims...>" per line)
// and one <node name>.<tensor>.npy per tensor (float32 or float64, the run's precision); x.npy [N, 1, 28, 28] float32;
// labels.npy [N] int32; hyperparameters.txt (batch, lr, momentum, network, precision). Every listed tensor must
// match the module's parameter in shape and precision, and every module parameter must be listed.
//
// Output: one result line in the format bench/ratios.py reads (that of side_by_side_train):
//   result impl=libtorch network=<name> precision=<float|double> batch=<b> samples=<N> seconds=<s>
//          samples_per_s=<r> cpu_seconds=<s> cpu_samples_per_s=<r> lr=<lr> momentum=<m>
//          last_loss=<mean loss of the last batch, before its update> eval_loss=<mean loss on the first E samples>
// seconds: wall clock of the training loop; cpu_seconds: the process's CPU time over it (std::clock).
//
// Usage: libtorch_side_by_side --data DIR [--eval E]. Exit code 2 for bad arguments or input (message on stderr).
// Built only when CMake finds libtorch (bench/libtorch.cmake; scripts/install-deps.sh --with-torch installs it).
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

/// y = body(x) + shortcut(x), or x + body(x) without a shortcut: pipeprop::residual_projection / residual.
/// Submodules "body" and "shortcut" hold pipeprop's body_NN / shortcut_NN nodes in order.
struct residual_impl : torch::nn::Module {
    explicit residual_impl(torch::nn::Sequential body_layers, torch::nn::Sequential shortcut_layers = nullptr)
        : body(register_module("body", std::move(body_layers))) {
        if (shortcut_layers) shortcut = register_module("shortcut", std::move(shortcut_layers));
    }
    torch::Tensor forward(torch::Tensor x) {
        torch::Tensor y = body->forward(x);
        return y + (shortcut ? shortcut->forward(x) : x);
    }
    torch::nn::Sequential body, shortcut{nullptr};
};
TORCH_MODULE_IMPL(residual, residual_impl);

torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                       std::int64_t padding) {
    return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(true));
}
torch::nn::GroupNorm group_norm(std::int64_t groups, std::int64_t channels) {
    return torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(1e-5));
}

/// The small CNN of bench/small_cnn.hpp (module i = pipeprop layer position i).
torch::nn::Sequential small_cnn() {
    return torch::nn::Sequential(conv(1, 16, 3, 1, 1), group_norm(4, 16), torch::nn::ReLU(),
                                 torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)),  //
                                 conv(16, 32, 3, 1, 1), group_norm(4, 32), torch::nn::ReLU(),
                                 torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)),  //
                                 torch::nn::Flatten(), torch::nn::Linear(32 * 7 * 7, 128), torch::nn::ReLU(),
                                 torch::nn::Linear(128, 10));
}

/// train::resnet20 of examples/train/networks.hpp (module i = pipeprop layer position i, 0 ... 22).
torch::nn::Sequential resnet20() {
    torch::nn::Sequential net(conv(1, 16, 3, 1, 1), group_norm(8, 16), torch::nn::ReLU());
    const struct {
        std::int64_t in, channels;
        bool first_down;
    } groups[] = {{16, 16, false}, {16, 32, true}, {32, 64, true}};
    for (const auto& g : groups) {
        for (int block = 0; block < 3; ++block) {
            const std::int64_t c = g.channels;
            if (block == 0 && g.first_down)
                net->push_back(residual(torch::nn::Sequential(conv(g.in, c, 3, 2, 1), group_norm(8, c),
                                                              torch::nn::ReLU(), conv(c, c, 3, 1, 1),
                                                              group_norm(8, c)),
                                        torch::nn::Sequential(conv(g.in, c, 1, 2, 0), group_norm(8, c))));
            else
                net->push_back(residual(torch::nn::Sequential(conv(c, c, 3, 1, 1), group_norm(8, c),
                                                              torch::nn::ReLU(), conv(c, c, 3, 1, 1),
                                                              group_norm(8, c))));
            net->push_back(torch::nn::ReLU());
        }
    }
    net->push_back(torch::nn::Functional([](torch::Tensor x) { return x.mean({2, 3}); }));  // global average pool
    net->push_back(torch::nn::Linear(64, 10));
    return net;
}

/// pipeprop's node and tensor name -> the module's parameter name: "layer_09.shortcut_00", "gamma" ->
/// "9.shortcut.0.weight" (layer_NN: the top-level index; body_NN / shortcut_NN: inside a residual; group norm's
/// gamma / beta are libtorch's weight / bias). Throws std::runtime_error on a name of another form.
std::string torch_parameter_name(const std::string& node, const std::string& tensor) {
    std::string name;
    std::stringstream parts(node);
    for (std::string part; std::getline(parts, part, '.');) {
        const auto underscore = part.rfind('_');
        if (underscore == std::string::npos) throw std::runtime_error("unexpected node name " + node);
        const std::string kind = part.substr(0, underscore);
        const std::string index = std::to_string(std::stoul(part.substr(underscore + 1)));
        name += (kind == "layer" ? index : kind + "." + index) + ".";
    }
    return name + (tensor == "gamma" ? "weight" : tensor == "beta" ? "bias" : tensor);
}

/// The npy file at path as an xarray of T; throws std::runtime_error naming the file when it cannot be read or
/// holds another element type.
template <class T>
xt::xarray<T> load_npy(const std::filesystem::path& path) {
    try {
        return xt::load_npy<T>(path.string());
    } catch (const std::exception& e) {
        const char* type = std::is_same_v<T, double> ? "float64" : std::is_same_v<T, float> ? "float32" : "int32";
        throw std::runtime_error("cannot read " + path.string() + " as " + type + ": " + e.what());
    }
}

/// Copies every tensor parameters.txt lists into net; throws std::runtime_error on a missing file or parameter, a
/// shape mismatch (file, parameters.txt, module), or a module parameter the export does not cover.
template <class T>
void load_parameters(torch::nn::Sequential& net, const std::filesystem::path& dir) {
    auto targets = net->named_parameters();
    std::set<std::string> loaded;
    std::ifstream manifest(dir / "parameters.txt");
    if (!manifest) throw std::runtime_error("cannot read " + (dir / "parameters.txt").string());
    torch::NoGradGuard no_grad;
    for (std::string line; std::getline(manifest, line);) {
        std::istringstream fields(line);
        std::string node, tensor;
        fields >> node >> tensor;
        std::vector<std::int64_t> dims;
        for (std::int64_t d; fields >> d;) dims.push_back(d);
        const auto path = dir / (node + "." + tensor + ".npy");
        const auto value = load_npy<T>(path);
        const std::string name = torch_parameter_name(node, tensor);
        torch::Tensor* target = targets.find(name);
        if (target == nullptr) throw std::runtime_error(path.string() + ": the model has no parameter " + name);
        const std::vector<std::int64_t> file_dims(value.shape().begin(), value.shape().end());
        if (file_dims != dims || target->sizes().vec() != dims) {
            std::ostringstream m;
            m << path.string() << " has shape " << torch::IntArrayRef(file_dims) << " (parameters.txt: "
              << torch::IntArrayRef(dims) << "), libtorch's " << name << " is " << target->sizes();
            throw std::runtime_error(m.str());
        }
        target->copy_(torch::from_blob(const_cast<T*>(value.data()), dims, c10::CppTypeToScalarType<T>::value));
        loaded.insert(name);
    }
    for (const auto& item : targets)
        if (!loaded.count(item.key()))
            throw std::runtime_error((dir / "parameters.txt").string() + " does not cover the parameter " + item.key());
}

std::map<std::string, std::string> read_hyperparameters(const std::filesystem::path& dir) {
    std::ifstream f(dir / "hyperparameters.txt");
    if (!f) throw std::runtime_error("cannot read " + (dir / "hyperparameters.txt").string());
    std::map<std::string, std::string> values;
    for (std::string key, value; f >> key >> value;) values[key] = value;
    for (const char* key : {"batch", "lr", "momentum", "network", "precision"})
        if (!values.count(key)) throw std::runtime_error((dir / "hyperparameters.txt").string() + " has no " + key);
    return values;
}

/// Trains in precision T and prints the result line.
template <class T>
void run(const std::filesystem::path& dir, std::size_t eval, const std::map<std::string, std::string>& hp) {
    const std::int64_t batch = std::stoll(hp.at("batch"));
    const double lr = std::stod(hp.at("lr")), momentum = std::stod(hp.at("momentum"));
    const std::string& network = hp.at("network");
    if (batch <= 0) throw std::runtime_error("batch must be positive");
    torch::nn::Sequential net = network == "resnet20" ? resnet20() : small_cnn();
    const auto dtype = c10::CppTypeToScalarType<T>::value;
    net->to(dtype);
    load_parameters<T>(net, dir);

    const auto images = load_npy<float>(dir / "x.npy");
    const auto label_values = load_npy<std::int32_t>(dir / "labels.npy");
    const std::vector<std::int64_t> x_dims(images.shape().begin(), images.shape().end());
    const std::int64_t samples = x_dims.empty() ? 0 : x_dims[0];
    if (x_dims.size() != 4 || label_values.dimension() != 1 || std::int64_t(label_values.size()) != samples)
        throw std::runtime_error("x.npy must be [N, 1, 28, 28] and labels.npy [N]");
    if (samples == 0 || samples % batch != 0)
        throw std::runtime_error(std::to_string(samples) + " samples are not a positive multiple of the batch size " +
                                 std::to_string(batch));
    const torch::Tensor x = torch::from_blob(const_cast<float*>(images.data()), x_dims, torch::kFloat32).to(dtype);
    const torch::Tensor labels =
        torch::from_blob(const_cast<std::int32_t*>(label_values.data()), {samples}, torch::kInt32).to(torch::kInt64);

    net->train();
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
    double last_loss = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (std::int64_t first = 0; first < samples; first += batch) {
        optimizer.zero_grad();
        torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x.slice(0, first, first + batch)),
                                                                  labels.slice(0, first, first + batch));
        loss.backward();
        optimizer.step();
        last_loss = loss.item<double>();
    }
    const double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    const std::int64_t count = std::min<std::int64_t>(std::int64_t(eval), samples);
    double eval_loss = 0;
    {
        torch::NoGradGuard no_grad;
        eval_loss = torch::nn::functional::cross_entropy(net->forward(x.slice(0, 0, count)), labels.slice(0, 0, count))
                        .item<double>();
    }
    std::printf(
        "result impl=libtorch network=%s precision=%s batch=%lld samples=%lld seconds=%.6f samples_per_s=%.2f "
        "cpu_seconds=%.6f cpu_samples_per_s=%.2f lr=%.9g momentum=%.9g last_loss=%.17g eval_loss=%.17g\n",
        network.c_str(), hp.at("precision").c_str(), static_cast<long long>(batch), static_cast<long long>(samples),
        seconds, double(samples) / seconds, cpu_seconds, double(samples) / cpu_seconds, lr, momentum, last_loss,
        eval_loss);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"libtorch's side of the side-by-side benchmark with pipeprop (bench/side_by_side.sh runs all three)"};
    std::string data;
    std::size_t eval = 1000;
    app.add_option("--data", data, "directory written by side_by_side_train --export")->required();
    app.add_option("--eval", eval, "samples of the loss evaluated after training")->check(CLI::PositiveNumber);
    CLI11_PARSE(app, argc, argv);

    try {
        torch::set_num_threads(1);
        torch::manual_seed(0);
        const auto hp = read_hyperparameters(data);
        if (hp.at("network") != "cnn" && hp.at("network") != "resnet20")
            throw std::runtime_error("unknown network " + hp.at("network") + " in hyperparameters.txt");
        if (hp.at("precision") == "double")
            run<double>(data, eval, hp);
        else if (hp.at("precision") == "float")
            run<float>(data, eval, hp);
        else
            throw std::runtime_error("unknown precision " + hp.at("precision") + " in hyperparameters.txt");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "libtorch_side_by_side: %s\n", e.what());
        return 2;
    }
    return 0;
}
