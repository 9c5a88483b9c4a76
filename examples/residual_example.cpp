// The residual-network example of docs/concepts.md ("Networks and blocks"), as a program: a small ResNet
// with an identity block and a projection block, trained by fine-grained PB at micro-batch size 1 with SC + LWP,
// every boundary inside a block carrying the skip tensor. Exit 0 when it learned (test accuracy > 0.3; chance is 0.1).
#include <pipeprop/pipeprop.hpp>

#include <cstdio>

namespace pp = pipeprop;

using block = pp::residual<pp::conv2d<16, 3, 1, 1>, pp::group_norm<8>, pp::relu, pp::conv2d<16, 3, 1, 1>,
                           pp::group_norm<8>>;                                     // y = x + body(x)
using down = pp::residual_projection<pp::shortcut<pp::conv2d<32, 1, 2>, pp::group_norm<8>>,   // y = g(x) + body(x)
                                     pp::conv2d<32, 3, 2, 1>, pp::group_norm<8>, pp::relu,
                                     pp::conv2d<32, 3, 1, 1>, pp::group_norm<8>>;
using tiny = pp::network<pp::shape<1, 28, 28>, pp::conv2d<16, 3, 1, 1>, pp::group_norm<8>, pp::relu, block, pp::relu,
                         down, pp::relu, pp::global_avg_pool, pp::dense<10>>;
using tiny_pipe = pp::pb::pipeline<tiny, pp::fine_grained<>, pp::pb::policy::sc_lwp<>>;  // cuts inside both blocks

// Stages: conv, norm (stem), 4 in the identity block, 4 in the projection block (its shortcut in the last body
// norm's stage), dense. The first stage's delay is 2 (S - 1).
static_assert(tiny_pipe::stage_count == 11 && tiny_pipe::delays[0] == 20);
static_assert(tiny_pipe::stage<10>::end - tiny_pipe::stage<10>::begin == 1);

int main() {
    const auto data = pp::data::load_image_dataset(pp::data::default_data_directory, {1, 28, 28});
    tiny_pipe p({.max_batch = 1, .executor = pp::pb::executor_kind::concurrent});
    const auto h = pp::optim::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, 1);
    p.set_hyperparameters({.learning_rate = float(h.learning_rate), .momentum = float(h.momentum)});
    for (std::size_t i = 0; i < 3000; ++i) p.push({data.train.image(i), 784}, {&data.train.labels[i], 1}, 1);
    p.drain();
    const auto r = p.evaluate({data.test.images.data(), 2000 * 784}, {data.test.labels.data(), 2000}, 2000);
    std::printf("residual example: %zu stages, test accuracy after 3000 samples: %.4f\n", tiny_pipe::stage_count,
                r.accuracy);
    return r.accuracy > 0.3 ? 0 : 1;  // 10 classes: chance is 0.1
}
