// A tiny end-to-end training loop on one stage: the loss must fall with either optimizer.
#include <catch2/catch.hpp>

#include "shared_backend.hpp"

#include <cstdint>
#include <vector>

#include "weft/core/rng.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/nn/mlp.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/optim/sgd.hpp"

namespace {

using backend = weft::exec::cpu;

// Labels are the argmax of a fixed random linear map of the inputs: learnable.
struct dataset {
    backend::matrix x;
    std::vector<std::int32_t> labels;
};

dataset make_data(int rows, int dim, int classes) {
    dataset d{backend::matrix(rows, dim), std::vector<std::int32_t>(std::size_t(rows))};
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < dim; ++c) d.x(r, c) = weft::rng::normal(5, "data", std::uint64_t(r * dim + c));
    for (int r = 0; r < rows; ++r) {
        float best = -1e30f;
        for (int k = 0; k < classes; ++k) {
            float score = 0;
            for (int c = 0; c < dim; ++c) score += d.x(r, c) * weft::rng::normal(6, "teacher", std::uint64_t(c * classes + k));
            if (score > best) best = score, d.labels[std::size_t(r)] = k;
        }
    }
    return d;
}

template <class Optimizer>
std::pair<float, float> train(Optimizer opt, int steps) {
    const weft::nn::mlp_config config{.input_dim = 8, .hidden_dim = 16, .num_blocks = 2, .num_classes = 4};
    weft::nn::mlp_stage<backend> model(weft_test::shared_backend<backend>(), config, {0, config.num_units()});
    const auto data = make_data(32, 8, 4);
    // Two micro-batches of 16 rows each, gradients scaled by 1/2 as the engine does.
    float first = 0, last = 0;
    for (int step = 0; step < steps; ++step) {
        model.zero_gradients();
        float loss = 0;
        for (int mb = 0; mb < 2; ++mb) {
            const backend::matrix x = data.x.middleRows(mb * 16, 16);
            const std::span<const std::int32_t> labels(data.labels.data() + mb * 16, 16);
            weft::nn::mlp_stage<backend>::stash s;
            const auto ce = weft::nn::cross_entropy(model.backend(), model.forward(x, s), labels, 0.5f);
            (void)model.backward(ce.dlogits, s);
            loss += ce.loss / 2;
        }
        opt.step(model.parameters(), model.gradients(), model.registry());
        if (step == 0) first = loss;
        last = loss;
    }
    return {first, last};
}

}  // namespace

TEST_CASE("training with adamw lowers the loss", "[optim][training]") {
    const auto [first, last] = train(weft::optim::adamw({.lr = 1e-2}), 40);
    INFO("loss " << first << " -> " << last);
    CHECK(last < 0.3f * first);
}

TEST_CASE("training with sgd and momentum lowers the loss", "[optim][training]") {
    const auto [first, last] = train(weft::optim::sgd({.lr = 0.05, .momentum = 0.9}), 40);
    INFO("loss " << first << " -> " << last);
    CHECK(last < 0.5f * first);
}
