// pipeprop/data.hpp: datasets: Fashion-MNIST / MNIST IDX files, CIFAR-10 binary batches, byte-level text corpora
// (plain or gzip), in-memory datasets with micro-batch gathering, and the per-epoch sample permutation. Needs zlib
// only, neither oneTBB, xsimd nor {fmt}. The loaders are [[gnu::cold]]: they run once per program, so the compiler
// optimizes them for size, which also makes them cheaper to compile in every program that reads data.
#pragma once

#include "pipeprop/data/cifar10_reader.hpp"
#include "pipeprop/data/data_error.hpp"
#include "pipeprop/data/dataset.hpp"
#include "pipeprop/data/epoch_permutation.hpp"
#include "pipeprop/data/idx_reader.hpp"
#include "pipeprop/data/text_corpus.hpp"
#include "pipeprop/data/text_dataset.hpp"
