// A deterministic classification data set for examples and tests: inputs are
// standard normal, labels are the argmax of a fixed random linear "teacher". Sample
// i is a function of (seed, i) alone, so every rank can draw the same global batch
// and the data of a step never depends on the parallel layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/core/rng.hpp"

namespace weft::data {

struct classification_batch {
    int rows = 0;
    int input_dim = 0;
    std::vector<float> inputs;  // rows x input_dim, row-major
    std::vector<int> labels;    // rows
};

class synthetic_dataset {
public:
    synthetic_dataset(int input_dim, int num_classes, std::uint64_t seed)
        : input_dim_(input_dim), num_classes_(num_classes), seed_(seed) {
        require(input_dim >= 1, "input_dim", input_dim, "must be >= 1");
        require(num_classes >= 2, "num_classes", num_classes, "a classification task needs >= 2 classes");
    }

    [[nodiscard]] int input_dim() const { return input_dim_; }
    [[nodiscard]] int num_classes() const { return num_classes_; }

    // The global batch of `step`: samples [step*batch_size, (step+1)*batch_size).
    [[nodiscard]] classification_batch batch(long long step, int batch_size) const {
        require(step >= 0, "step", step, "must be >= 0");
        require(batch_size >= 1, "batch_size", batch_size, "must be >= 1");
        classification_batch out{batch_size, input_dim_, {}, {}};
        out.inputs.resize(static_cast<std::size_t>(batch_size) * input_dim_);
        out.labels.resize(static_cast<std::size_t>(batch_size));
        for (int row = 0; row < batch_size; ++row) {
            const auto sample = static_cast<std::uint64_t>(step) * batch_size + row;
            float* x = out.inputs.data() + static_cast<std::size_t>(row) * input_dim_;
            for (int j = 0; j < input_dim_; ++j)
                x[j] = rng::normal(seed_, "data.inputs", sample * input_dim_ + j);
            out.labels[row] = teacher_label(x);
        }
        return out;
    }

private:
    [[nodiscard]] int teacher_label(const float* x) const {
        int best = 0;
        double best_score = 0;
        for (int c = 0; c < num_classes_; ++c) {
            double score = 0;
            for (int j = 0; j < input_dim_; ++j)
                score += double{x[j]} * rng::normal(seed_, "data.teacher",
                                                    static_cast<std::uint64_t>(j) * num_classes_ + c);
            if (c == 0 || score > best_score) {
                best = c;
                best_score = score;
            }
        }
        return best;
    }

    int input_dim_;
    int num_classes_;
    std::uint64_t seed_;
};

}  // namespace weft::data
