// pipeprop/data/data_error.hpp: the exception every dataset reader throws for a missing, truncated or corrupt file.
#pragma once

#include <stdexcept>
#include <string>

namespace pipeprop {

/// Thrown by the dataset readers (pipeprop/data/*.hpp) when a file cannot be used: missing, unreadable, truncated,
/// corrupt (bad magic, wrong item counts, label out of range) or holding images whose size does not match the
/// network input. what() always starts with the file name and states the problem, e.g.
/// "/data/train-labels-idx1-ubyte.gz: label 12 of item 7 is outside [0, 10)".
class data_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace pipeprop
