// bench/libtorch/libtorch_llama_side_by_side.cpp: libtorch's side of the llama-tiny side-by-side comparison with
// pipeprop (bench/side_by_side.sh, section llama-tiny): PyTorch's C++ frontend (Debian's libtorch-dev 1.13), the
// same model and step as bench/torch_llama_side_by_side.py without the Python interpreter's per-op overhead.
//
// llama-tiny (pipeprop/models/llama_tiny.hpp): embedding 256 x 64; 2 pre-norm blocks h = x + attention(norm(x)),
// y = h + swiglu(norm(h)) with RMSNorm x * rsqrt(mean(x^2) + 1e-5) * scale, 4-head causal attention with half-split
// RoPE (base 10000; q, k, v as one Linear(64, 192) without bias, output Linear(64, 64)) and SwiGLU
// down(silu(gate x) * up x) (gate and up as one Linear(64, 344), down Linear(172, 64)); final RMSNorm; LM head
// Linear(64, 256) without bias. Token cross-entropy, mean over the batch's tokens; torch::optim::AdamW. One thread.
//
// Input (DIR, written by llama_side_by_side_train --export): parameters.txt and <node name>.<tensor>.npy (float32
// or float64, the run's precision; w_q, w_k, w_v go to the row blocks of the fused q/k/v weight, w_gate, w_up to
// those of the fused gate/up weight); x.npy, targets.npy [N, 64] int32; eval_x.npy, eval_targets.npy [E, 64] int32;
// hyperparameters.txt (batch, lr, beta1, beta2, eps, weight_decay, network, precision).
// Output: one result line in the format of llama_side_by_side_train (bench/ratios.py reads it):
//   result impl=libtorch network=llama-tiny precision=<float|double> batch=<b> samples=<N> seconds=<s>
//          samples_per_s=<r> cpu_seconds=<s> cpu_samples_per_s=<r> lr=<lr> weight_decay=<lambda>
//          first_loss=<first batch's loss> last_loss=<last batch's loss, before its update>
//          eval_loss=<mean token loss on the validation sequences>
//
// Usage: libtorch_llama_side_by_side --data DIR. Exit code 2 for bad arguments or input (message on stderr).
// Built only when CMake finds libtorch (bench/libtorch.cmake).
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xnpy.hpp>

#include <chrono>
#include <cmath>
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

constexpr std::int64_t seq = 64, vocab = 256, width = 64, heads = 4, hidden = 172, blocks = 2;
constexpr double norm_eps = 1e-5, rope_base = 10000;

torch::nn::Linear linear(std::int64_t in, std::int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

/// pipeprop::rms_norm<>: x * rsqrt(mean(x^2, -1) + 1e-5) * scale.
struct rms_norm_impl : torch::nn::Module {
    explicit rms_norm_impl(std::int64_t dim) : scale(register_parameter("scale", torch::ones({dim}))) {}
    torch::Tensor forward(const torch::Tensor& x) {
        return x * torch::rsqrt(x.pow(2).mean(-1, true) + norm_eps) * scale;
    }
    torch::Tensor scale;
};
TORCH_MODULE_IMPL(rms_norm, rms_norm_impl);

torch::Tensor rotate_half(const torch::Tensor& t) {
    const std::int64_t h = t.size(-1) / 2;
    return torch::cat({-t.slice(-1, h), t.slice(-1, 0, h)}, -1);
}

/// pipeprop::causal_self_attention<4>: half-split RoPE, causal softmax(q k^T / sqrt(d)) v, output projection.
struct attention_impl : torch::nn::Module {
    attention_impl()
        : qkv(register_module("qkv", linear(width, 3 * width))), o(register_module("o", linear(width, width))) {
        const std::int64_t d = width / heads;
        const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
        const auto inv_freq = 1.0 / torch::pow(rope_base, torch::arange(0, d, 2, opts) / double(d));
        auto angles = torch::arange(seq, opts).unsqueeze(1) * inv_freq.unsqueeze(0);
        angles = torch::cat({angles, angles}, -1);  // [L, d]
        cos = register_buffer("cos", torch::cos(angles));  // float64; module->to(dtype) rounds them
        sin = register_buffer("sin", torch::sin(angles));
        // Not a buffer: Module::to(dtype) converts every buffer, a bool mask included (Python's .to converts only
        // floating-point ones).
        future = torch::ones({seq, seq}, torch::kBool).triu(1);
    }
    torch::Tensor forward(const torch::Tensor& x) {
        const std::int64_t b = x.size(0), L = x.size(1), d = width / heads;
        const auto parts = qkv->forward(x).view({b, L, 3, heads, d}).permute({2, 0, 3, 1, 4});  // [3, b, H, L, d]
        auto q = parts[0], k = parts[1], v = parts[2];
        q = q * cos + rotate_half(q) * sin;
        k = k * cos + rotate_half(k) * sin;
        const auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(d));
        const auto p = torch::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
        return o->forward(torch::matmul(p, v).transpose(1, 2).reshape({b, L, width}));
    }
    torch::nn::Linear qkv, o;
    torch::Tensor cos, sin, future;
};
TORCH_MODULE_IMPL(attention, attention_impl);

/// pipeprop::swiglu<172>: down(silu(gate x) * up x), gate and up as one Linear (rows: gate, then up).
struct swiglu_impl : torch::nn::Module {
    swiglu_impl()
        : gate_up(register_module("gate_up", linear(width, 2 * hidden))),
          down(register_module("down", linear(hidden, width))) {}
    torch::Tensor forward(const torch::Tensor& x) {
        const auto gu = gate_up->forward(x).split(hidden, -1);
        return down->forward(torch::silu(gu[0]) * gu[1]);
    }
    torch::nn::Linear gate_up, down;
};
TORCH_MODULE_IMPL(swiglu, swiglu_impl);

/// pipeprop::prenorm_transformer_block<4, 172>.
struct block_impl : torch::nn::Module {
    block_impl()
        : attention_norm(register_module("attention_norm", rms_norm(width))),
          attn(register_module("attention", attention())),
          ffn_norm(register_module("ffn_norm", rms_norm(width))),
          ffn(register_module("ffn", swiglu())) {}
    torch::Tensor forward(const torch::Tensor& x) {
        const auto h = x + attn->forward(attention_norm->forward(x));
        return h + ffn->forward(ffn_norm->forward(h));
    }
    rms_norm attention_norm;
    attention attn;
    rms_norm ffn_norm;
    swiglu ffn;
};
TORCH_MODULE_IMPL(block, block_impl);

/// pipeprop::models::llama_tiny.
struct llama_tiny_impl : torch::nn::Module {
    llama_tiny_impl()
        : embedding(register_module("embedding", torch::nn::Embedding(vocab, width))),
          norm(register_module("norm", rms_norm(width))),
          head(register_module("head", linear(width, vocab))) {
        for (std::int64_t i = 0; i < blocks; ++i)
            layers.push_back(register_module("block" + std::to_string(i), block()));
    }
    torch::Tensor forward(const torch::Tensor& ids) {
        auto x = embedding->forward(ids);
        for (auto& l : layers) x = l->forward(x);
        return head->forward(norm->forward(x));
    }
    torch::nn::Embedding embedding;
    std::vector<block> layers;
    rms_norm norm;
    torch::nn::Linear head;
};
TORCH_MODULE_IMPL(llama_tiny, llama_tiny_impl);

/// Where an exported tensor goes: a parameter and its row block [first, first + rows).
struct place {
    torch::Tensor parameter;
    std::int64_t first, rows;
};

/// pipeprop's "<node> <tensor>" -> its place (node names as layer_stack::node_names of llama_tiny; see
/// bench/torch_llama_side_by_side.py's parameter_map).
std::map<std::string, place> parameter_map(llama_tiny& m) {
    std::map<std::string, place> p;
    p["layer_00 table"] = {m->embedding->weight, 0, vocab};
    for (std::int64_t i = 0; i < blocks; ++i) {
        char node[16];
        std::snprintf(node, sizeof node, "layer_%02lld", static_cast<long long>(i + 1));
        const std::string a = std::string(node) + ".body_00", f = std::string(node) + ".body_01";
        auto& b = m->layers[i];
        p[a + ".body_00 scale"] = {b->attention_norm->scale, 0, width};
        p[a + ".body_01 w_q"] = {b->attn->qkv->weight, 0, width};
        p[a + ".body_01 w_k"] = {b->attn->qkv->weight, width, width};
        p[a + ".body_01 w_v"] = {b->attn->qkv->weight, 2 * width, width};
        p[a + ".body_01 w_o"] = {b->attn->o->weight, 0, width};
        p[f + ".body_00 scale"] = {b->ffn_norm->scale, 0, width};
        p[f + ".body_01 w_gate"] = {b->ffn->gate_up->weight, 0, hidden};
        p[f + ".body_01 w_up"] = {b->ffn->gate_up->weight, hidden, hidden};
        p[f + ".body_01 w_down"] = {b->ffn->down->weight, 0, width};
    }
    p["layer_03 scale"] = {m->norm->scale, 0, width};
    p["layer_04 weight"] = {m->head->weight, 0, vocab};
    return p;
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

/// Copies every tensor parameters.txt lists into its place; throws std::runtime_error on a missing file or place,
/// a shape mismatch (file, parameters.txt, place), or a place the export does not cover.
template <class T>
void load_parameters(llama_tiny& model, const std::filesystem::path& dir) {
    auto targets = parameter_map(model);
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
        const auto it = targets.find(node + " " + tensor);
        if (it == targets.end()) throw std::runtime_error(path.string() + ": the model has no place for it");
        torch::Tensor target = it->second.parameter.slice(0, it->second.first, it->second.first + it->second.rows);
        const std::vector<std::int64_t> file_dims(value.shape().begin(), value.shape().end());
        if (file_dims != dims || target.sizes().vec() != dims) {
            std::ostringstream m;
            m << path.string() << " has shape " << torch::IntArrayRef(file_dims) << " (parameters.txt: "
              << torch::IntArrayRef(dims) << "), its place in the model is " << target.sizes();
            throw std::runtime_error(m.str());
        }
        target.copy_(torch::from_blob(const_cast<T*>(value.data()), dims, c10::CppTypeToScalarType<T>::value));
        loaded.insert(it->first);
    }
    for (const auto& [name, p] : targets)
        if (!loaded.count(name))
            throw std::runtime_error((dir / "parameters.txt").string() + " does not cover " + name);
}

std::map<std::string, std::string> read_hyperparameters(const std::filesystem::path& dir) {
    std::ifstream f(dir / "hyperparameters.txt");
    if (!f) throw std::runtime_error("cannot read " + (dir / "hyperparameters.txt").string());
    std::map<std::string, std::string> values;
    for (std::string key, value; f >> key >> value;) values[key] = value;
    for (const char* key : {"batch", "lr", "beta1", "beta2", "eps", "weight_decay", "network", "precision"})
        if (!values.count(key)) throw std::runtime_error((dir / "hyperparameters.txt").string() + " has no " + key);
    if (values["network"] != "llama-tiny")
        throw std::runtime_error(dir.string() + " is not a llama-tiny export (network " + values["network"] + ")");
    return values;
}

/// [n, 64] int32 token ids of dir/name as an int64 tensor.
torch::Tensor load_ids(const std::filesystem::path& path) {
    const auto a = load_npy<std::int32_t>(path);
    if (a.dimension() != 2 || a.shape()[1] != std::size_t(seq))
        throw std::runtime_error(path.string() + " must be [N, 64] int32 token ids");
    return torch::from_blob(const_cast<std::int32_t*>(a.data()), {std::int64_t(a.shape()[0]), seq}, torch::kInt32)
        .to(torch::kInt64);
}

/// Trains in precision T and prints the result line.
template <class T>
void run(const std::filesystem::path& dir, const std::map<std::string, std::string>& hp) {
    const std::int64_t batch = std::stoll(hp.at("batch"));
    const double lr = std::stod(hp.at("lr")), weight_decay = std::stod(hp.at("weight_decay"));
    if (batch <= 0) throw std::runtime_error("batch must be positive");
    llama_tiny model;
    model->to(c10::CppTypeToScalarType<T>::value);
    load_parameters<T>(model, dir);

    const torch::Tensor x = load_ids(dir / "x.npy"), targets = load_ids(dir / "targets.npy");
    const torch::Tensor eval_x = load_ids(dir / "eval_x.npy"), eval_targets = load_ids(dir / "eval_targets.npy");
    const std::int64_t samples = x.size(0);
    if (targets.size(0) != samples || samples == 0 || samples % batch != 0)
        throw std::runtime_error("x.npy and targets.npy must hold the same positive multiple of the batch size " +
                                 std::to_string(batch) + " of sequences");

    model->train();
    torch::optim::AdamW optimizer(model->parameters(),
                                  torch::optim::AdamWOptions(lr)
                                      .betas({std::stod(hp.at("beta1")), std::stod(hp.at("beta2"))})
                                      .eps(std::stod(hp.at("eps")))
                                      .weight_decay(weight_decay));
    double first_loss = 0, last_loss = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (std::int64_t first = 0; first < samples; first += batch) {
        optimizer.zero_grad();
        const torch::Tensor logits = model->forward(x.slice(0, first, first + batch));
        torch::Tensor loss = torch::nn::functional::cross_entropy(
            logits.view({-1, vocab}), targets.slice(0, first, first + batch).reshape({-1}));
        loss.backward();
        optimizer.step();
        last_loss = loss.item<double>();
        if (first == 0) first_loss = last_loss;
    }
    const double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    double eval_loss = 0;
    {
        torch::NoGradGuard no_grad;
        eval_loss = torch::nn::functional::cross_entropy(model->forward(eval_x).view({-1, vocab}),
                                                         eval_targets.reshape({-1}))
                        .item<double>();
    }
    std::printf(
        "result impl=libtorch network=llama-tiny precision=%s batch=%lld samples=%lld seconds=%.6f "
        "samples_per_s=%.2f cpu_seconds=%.6f cpu_samples_per_s=%.2f lr=%.9g weight_decay=%.9g first_loss=%.17g "
        "last_loss=%.17g eval_loss=%.17g\n",
        hp.at("precision").c_str(), static_cast<long long>(batch), static_cast<long long>(samples), seconds,
        double(samples) / seconds, cpu_seconds, double(samples) / cpu_seconds, lr, weight_decay, first_loss,
        last_loss, eval_loss);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"libtorch's side of the llama-tiny side-by-side benchmark with pipeprop (bench/side_by_side.sh "
                 "runs all three)"};
    std::string data;
    app.add_option("--data", data, "directory written by llama_side_by_side_train --export")->required();
    CLI11_PARSE(app, argc, argv);
    try {
        torch::set_num_threads(1);
        torch::manual_seed(0);
        const auto hp = read_hyperparameters(data);
        if (hp.at("precision") == "double")
            run<double>(data, hp);
        else if (hp.at("precision") == "float")
            run<float>(data, hp);
        else
            throw std::runtime_error("unknown precision " + hp.at("precision") + " in hyperparameters.txt");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "libtorch_llama_side_by_side: %s\n", e.what());
        return 2;
    }
    return 0;
}
