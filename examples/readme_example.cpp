// The example of README.md: fine-grained Pipelined Backpropagation at micro-batch size 1 with spike compensation
// and linear weight prediction, on Fashion-MNIST (an MLP, 5000 samples: a few seconds).
#include <pipeprop/data.hpp>
#include <pipeprop/pb.hpp>

#include <cstdio>

namespace pp = pipeprop;
using mlp = pp::network<pp::shape<1, 28, 28>, pp::flatten, pp::dense<256>, pp::relu, pp::dense<10>>;
using pipeline = pp::pb::pipeline<mlp, pp::fine_grained<>, pp::pb::policy::sc_lwp<>>;
static_assert(pipeline::stage_count == 2 && pipeline::delays[0] == 2);  // D_s = 2 (S - 1 - s)

int main() {
    const auto data = pp::data::load_image_dataset(pp::data::default_data_directory, {1, 28, 28});
    pipeline pipe({.max_batch = 1, .executor = pp::pb::executor_kind::concurrent});
    const auto h = pp::optim::scale_hyperparameters({.learning_rate = 0.05, .momentum = 0.9}, 32, 1);  // B=32 -> b=1
    pipe.set_hyperparameters({.learning_rate = float(h.learning_rate), .momentum = float(h.momentum)});
    for (std::size_t i = 0; i < 5000; ++i)  // one sample per micro-batch; every push updates every stage
        pipe.push({data.train.image(i), 784}, {&data.train.labels[i], 1}, 1);
    pipe.drain();  // finish the micro-batches in flight: evaluation sees every update
    const auto r = pipe.evaluate(data.test.images, data.test.labels, data.test.count);
    std::printf("test accuracy after 5000 samples: %.4f\n", r.accuracy);
    return r.accuracy > 0.6 ? 0 : 1;
}
