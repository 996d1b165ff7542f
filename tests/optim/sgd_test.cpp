// SGD with momentum and weight decay against torch.optim.SGD's update worked in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "weft/optim/sgd.hpp"

TEST_CASE("sgd with momentum and decay follows PyTorch for two steps", "[optim][sgd]") {
    weft::parameter_registry registry;
    registry.add("w", {2, 2});
    registry.add("b", {2});
    weft::optim::basic_sgd<double> opt({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
    std::vector<double> p{1, -0.5, 0.25, 2, 0.5, -1};
    // g += wd p (2-D only); buf = g on step 1, then 0.9 buf + g; p -= lr buf
    opt.step(p, std::vector<double>{0.5, -0.25, 0.1, 0, 0.3, -0.2}, registry);
    const std::vector<double> after1{0.94, -0.47, 0.2375, 1.98, 0.47, -0.98};
    for (std::size_t i = 0; i < p.size(); ++i) CHECK(p[i] == Approx(after1[i]).margin(1e-14));
    opt.step(p, std::vector<double>{-0.25, 0.5, 0.1, 1, 0.3, 0.4}, registry);
    const std::vector<double> after2{0.9016, -0.4883, 0.213875, 1.8422, 0.413, -1.002};
    for (std::size_t i = 0; i < p.size(); ++i) CHECK(p[i] == Approx(after2[i]).margin(1e-14));
    CHECK(opt.momentum_buffer().size() == 6);
    CHECK(opt.step_count() == 2);
}

TEST_CASE("plain sgd is p -= lr g and keeps no state", "[optim][sgd]") {
    weft::parameter_registry registry;
    registry.add("w", {3});
    weft::optim::sgd opt({.lr = 0.5});
    std::vector<float> p{1, 2, 3};
    opt.step(p, std::vector<float>{2, 0, -2}, registry);
    CHECK(p == std::vector<float>{0, 2, 4});
    CHECK(opt.momentum_buffer().empty());
}

TEST_CASE("sgd rejects bad options", "[optim][sgd]") {
    using weft::optim::sgd;
    CHECK_THROWS_WITH(sgd({.lr = -0.1}), Catch::Contains("lr = -0.1"));
    CHECK_THROWS_WITH(sgd({.lr = 0.1, .momentum = 1}), Catch::Contains("momentum = 1"));
    CHECK_THROWS_WITH(sgd({.lr = 0.1, .weight_decay = -1}), Catch::Contains("weight_decay"));
}

TEST_CASE("sgd's grad_scale multiplies the gradients first, bit for bit", "[optim][sgd]") {
    weft::parameter_registry registry;
    registry.add("w", {2, 2});
    registry.add("b", {2});
    weft::optim::sgd scaled_in_step({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
    weft::optim::sgd scaled_before({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
    std::vector<float> p1{1, -0.5f, 0.25f, 2, 0.5f, -1}, p2 = p1;
    for (const std::vector<float>& g : {std::vector<float>{0.5f, -0.25f, 0.1f, 0, 0.3f, -0.2f},
                                        std::vector<float>{-0.25f, 0.5f, 0.1f, 1, 0.3f, 0.4f}}) {
        std::vector<float> copy(g);
        for (float& x : copy) x *= 0.3f;
        scaled_in_step.step(p1, g, registry, 0, 0.3f);
        scaled_before.step(p2, copy, registry);
    }
    CHECK(p1 == p2);
    CHECK(std::vector<float>(scaled_in_step.momentum_buffer().begin(), scaled_in_step.momentum_buffer().end()) ==
          std::vector<float>(scaled_before.momentum_buffer().begin(), scaled_before.momentum_buffer().end()));
    std::vector<float> g(6);
    CHECK_THROWS_WITH(scaled_in_step.step(p1, g, registry, 0, std::nanf("")), Catch::Contains("grad_scale"));
}
