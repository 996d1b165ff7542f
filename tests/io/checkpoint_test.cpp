// Checkpoints by registry name: saved from one pipeline split and loaded into another,
// tied tensors written once, AdamW state restored so training continues identically,
// and a checkpoint that does not fit the model refused with both shapes named.
#include "weft/io/checkpoint.hpp"
#include "weft/optim/adamw.hpp"
#include "weft/optim/sgd.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using weft::parameter_registry;
using weft::io::load_checkpoint;
using weft::io::load_optimizer_state;
using weft::io::save_checkpoint;
using weft::io::save_optimizer_state;
using weft::io::stage_optimizer_state;
using weft::io::stage_parameters;

using weft_test::scratch_dir;

namespace {

// A toy GPT split over two stages; the token embedding is on both (tied LM head).
parameter_registry first_stage() {
    parameter_registry r;
    r.add("wte.weight", {5, 3});
    r.add("wpe.weight", {4, 3});
    r.add("h.0.ln_1.weight", {3});
    return r;
}
parameter_registry last_stage() {
    parameter_registry r;
    r.add("h.1.mlp.c_fc.weight", {3, 12});
    r.add("ln_f.bias", {3});
    r.add("wte.weight", {5, 3});
    return r;
}
parameter_registry whole_model() {
    parameter_registry r;
    r.add("ln_f.bias", {3});
    r.add("wte.weight", {5, 3});
    r.add("h.0.ln_1.weight", {3});
    r.add("wpe.weight", {4, 3});
    r.add("h.1.mlp.c_fc.weight", {3, 12});
    return r;
}

// A value that identifies each tensor element, whatever stage holds it.
float value_of(const std::string& name, std::size_t i) {
    return float(std::hash<std::string>{}(name) % 1000) + 0.001f * float(i);
}

std::vector<float> fill(const parameter_registry& registry) {
    std::vector<float> values(registry.total_size());
    for (const auto& info : registry.entries())
        for (std::size_t i = 0; i < info.size; ++i) values[info.offset + i] = value_of(info.name, i);
    return values;
}

}  // namespace

TEST_CASE("a checkpoint saved from two stages loads into any split by name") {
    scratch_dir dir("ckpt_split");
    const fs::path path = dir.path / "model.safetensors";
    const auto a = first_stage(), b = last_stage();
    const auto pa = fill(a), pb = fill(b);
    const std::vector<stage_parameters> stages = {{a, pa}, {b, pb}};
    save_checkpoint(path, stages, {{"model", "gpt2"}});

    const auto file = weft::io::read_safetensors(path);
    CHECK(file.tensors().size() == 5);  // wte.weight once
    CHECK(file.find("wte.weight").shape == std::vector<std::int64_t>{5, 3});
    CHECK(file.find("wte.weight").type == weft::dtype::f32);
    CHECK(file.metadata().at("model") == "gpt2");

    const auto whole = whole_model();
    std::vector<float> loaded(whole.total_size(), -1.0f);
    load_checkpoint(path, whole, loaded);
    CHECK(loaded == fill(whole));

    std::vector<float> last(b.total_size(), 0.0f);
    load_checkpoint(file, b, last);
    CHECK(last == pb);
}

TEST_CASE("tied copies that differ are not silently collapsed") {
    scratch_dir dir("ckpt_tied");
    const auto a = first_stage(), b = last_stage();
    const auto pa = fill(a);
    auto pb = fill(b);
    pb[b.find("wte.weight").offset + 7] += 1.0f;
    const std::vector<stage_parameters> stages = {{a, pa}, {b, pb}};
    CHECK_THROWS_WITH(save_checkpoint(dir.path / "x.safetensors", stages),
                      Catch::Contains("wte.weight in stage 1 at element 7") && Catch::Contains("stage 0"));
    CHECK_FALSE(fs::exists(dir.path / "x.safetensors"));

    parameter_registry other;
    other.add("wte.weight", {3, 5});
    const std::vector<float> po(15, 0.0f);
    const std::vector<stage_parameters> mismatched = {{a, pa}, {other, po}};
    CHECK_THROWS_WITH(save_checkpoint(dir.path / "x.safetensors", mismatched), Catch::Contains("[3, 5]"));
}

TEST_CASE("a checkpoint that does not fit the model is refused clearly") {
    scratch_dir dir("ckpt_errors");
    const fs::path path = dir.path / "model.safetensors";
    const auto a = first_stage();
    const auto pa = fill(a);
    const std::vector<stage_parameters> stages = {{a, pa}};
    save_checkpoint(path, stages);

    parameter_registry missing = first_stage();
    missing.add("h.0.attn.c_attn.weight", {3, 9});
    std::vector<float> p1(missing.total_size());
    CHECK_THROWS_WITH(load_checkpoint(path, missing, p1),
                      Catch::Contains("h.0.attn.c_attn.weight") && Catch::Contains("missing") &&
                          Catch::Contains(path.string()));

    parameter_registry wrong_shape;
    wrong_shape.add("wpe.weight", {8, 3});
    std::vector<float> p2(wrong_shape.total_size());
    CHECK_THROWS_WITH(load_checkpoint(path, wrong_shape, p2),
                      Catch::Contains("shape of wpe.weight") && Catch::Contains("[4, 3]") &&
                          Catch::Contains("[8, 3]"));

    std::vector<float> too_small(3);
    CHECK_THROWS_WITH(load_checkpoint(path, a, too_small), Catch::Contains("params.size()"));

    // A tensor of another dtype under a parameter's name.
    const std::vector<weft::io::tensor_record> f64 = {
        {"h.0.ln_1.weight", weft::dtype::f64, {3}, std::vector<std::byte>(24)}};
    weft::io::write_safetensors(path, f64);
    parameter_registry ln;
    ln.add("h.0.ln_1.weight", {3});
    std::vector<float> p3(3);
    CHECK_THROWS_WITH(load_checkpoint(path, ln, p3), Catch::Contains("\"F64\"") && Catch::Contains("must be F32"));
}

TEST_CASE("AdamW state round-trips and training continues identically") {
    scratch_dir dir("ckpt_adamw");
    const fs::path path = dir.path / "optimizer.safetensors";
    const auto registry = first_stage();
    const weft::optim::adamw_options options{.lr = 1e-2, .weight_decay = 0.1};
    std::vector<float> params = fill(registry);
    std::vector<float> grads(params.size());
    weft::optim::adamw original(options);
    const auto take_step = [&](weft::optim::adamw& optimizer, std::vector<float>& p, int step) {
        for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = float(std::sin(double(i * 7 + step)));
        optimizer.step(p, grads, registry);
    };
    for (int s = 0; s < 3; ++s) take_step(original, params, s);

    const auto views = original.state_views();
    const std::vector<stage_optimizer_state> stages = {{registry, "adamw", original.step_count(), views}};
    save_optimizer_state(path, stages, {{"lr", "0.01"}});
    const auto file = weft::io::read_safetensors(path);
    CHECK(file.metadata().at("step") == "3");
    CHECK(file.metadata().at("optimizer") == "adamw");
    CHECK(file.metadata().at("state_tensors") == "exp_avg,exp_avg_sq");
    CHECK(file.metadata().at("lr") == "0.01");
    CHECK(file.contains("wte.weight.exp_avg"));
    CHECK(file.contains("wte.weight.exp_avg_sq"));

    weft::optim::adamw restored(options);
    restored.import_state(load_optimizer_state(path, registry, "adamw", weft::optim::adamw::state_names));
    CHECK(restored.step_count() == 3);
    CHECK(restored.export_state() == original.export_state());

    std::vector<float> resumed = params;
    for (int s = 3; s < 5; ++s) {
        take_step(original, params, s);
        take_step(restored, resumed, s);
    }
    CHECK(resumed == params);
}

TEST_CASE("SGD's momentum round-trips and training continues identically") {
    scratch_dir dir("ckpt_sgd");
    const fs::path path = dir.path / "optimizer.safetensors";
    const auto registry = first_stage();
    const weft::optim::sgd_options options{.lr = 1e-2, .momentum = 0.9, .weight_decay = 0.1};
    std::vector<float> params = fill(registry);
    std::vector<float> grads(params.size());
    weft::optim::sgd original(options);
    const auto take_step = [&](weft::optim::sgd& optimizer, std::vector<float>& p, int step) {
        for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = float(std::cos(double(i * 3 + step)));
        optimizer.step(p, grads, registry);
    };
    for (int s = 0; s < 2; ++s) take_step(original, params, s);
    const auto views = original.state_views();
    save_optimizer_state(path, std::vector<stage_optimizer_state>{{registry, "sgd", original.step_count(), views}});
    CHECK(weft::io::read_safetensors(path).contains("wte.weight.momentum_buffer"));

    weft::optim::sgd restored(options);
    restored.import_state(load_optimizer_state(path, registry, "sgd", weft::optim::sgd::state_names));
    CHECK(restored.export_state() == original.export_state());
    std::vector<float> resumed = params;
    for (int s = 2; s < 4; ++s) {
        take_step(original, params, s);
        take_step(restored, resumed, s);
    }
    CHECK(resumed == params);
    // AdamW refuses SGD's file, naming both.
    CHECK_THROWS_WITH(load_optimizer_state(path, registry, "adamw", weft::optim::adamw::state_names),
                      Catch::Contains("state of sgd") && Catch::Contains("this run uses adamw"));
}

TEST_CASE("a fresh optimizer writes no state tensors and restores as fresh") {
    scratch_dir dir("ckpt_adamw_fresh");
    const fs::path path = dir.path / "optimizer.safetensors";
    const auto registry = first_stage();
    weft::optim::adamw fresh({});
    const auto views = fresh.state_views();
    save_optimizer_state(path, std::vector<stage_optimizer_state>{{registry, "adamw", 0, views}});
    const auto file = weft::io::read_safetensors(path);
    CHECK(file.metadata().at("step") == "0");
    CHECK(file.metadata().at("state_tensors").empty());
    CHECK_FALSE(file.contains("wpe.weight.exp_avg"));
    weft::optim::adamw loaded({});
    loaded.import_state(load_optimizer_state(path, registry, "adamw", weft::optim::adamw::state_names));
    CHECK(loaded.step_count() == 0);
    CHECK(loaded.state_elements() == 0);
}

TEST_CASE("an optimizer file that does not fit is refused") {
    scratch_dir dir("ckpt_adamw_errors");
    const auto registry = first_stage();
    const auto params = fill(registry);
    const std::vector<stage_parameters> stages = {{registry, params}};
    save_checkpoint(dir.path / "model.safetensors", stages);
    const auto names = weft::optim::adamw::state_names;
    CHECK_THROWS_WITH(load_optimizer_state(dir.path / "model.safetensors", registry, "adamw", names),
                      Catch::Contains("no \"step\""));

    const std::vector<weft::io::tensor_record> none;
    weft::io::write_safetensors(dir.path / "bad_step.safetensors", none, {{"step", "-3"}});
    CHECK_THROWS_WITH(load_optimizer_state(dir.path / "bad_step.safetensors", registry, "adamw", names),
                      Catch::Contains("\"-3\""));
    // A file without the optimizer's name (written before it was recorded) is AdamW's moments.
    weft::io::write_safetensors(dir.path / "no_moments.safetensors", none, {{"step", "2"}});
    CHECK_THROWS_WITH(load_optimizer_state(dir.path / "no_moments.safetensors", registry, "adamw", names),
                      Catch::Contains("wte.weight.exp_avg") && Catch::Contains("missing"));

    // A state whose tensors do not fit the optimizer is refused by import_state, naming them.
    weft::optim::adamw optimizer({});
    CHECK_THROWS_WITH(optimizer.import_state({2, {{"exp_avg", {1, 2}}}}),
                      Catch::Contains("exp_avg_sq is missing"));
    CHECK_THROWS_WITH(optimizer.import_state({2, {{"exp_avg", {1, 2}}, {"exp_avg_sq", {1}}}}),
                      Catch::Contains("exp_avg_sq size = 1"));
    CHECK_THROWS_WITH(optimizer.import_state({2, {{"exp_avg", {}}, {"exp_avg_sq", {}}, {"momentum_buffer", {}}}}),
                      Catch::Contains("momentum_buffer") && Catch::Contains("valid: exp_avg, exp_avg_sq"));
    CHECK(optimizer.step_count() == 0);  // untouched by failed loads

    const auto views = optimizer.state_views();
    CHECK_THROWS_WITH(save_optimizer_state(dir.path / "o.safetensors",
                                           std::vector<stage_optimizer_state>{{registry, "adamw", 0, views}},
                                           {{"step", "1"}}),
                      Catch::Contains("reserved"));
}

TEST_CASE("the weights fingerprint follows every byte, name and shape, not the order", "[io][checkpoint]") {
    using weft::io::tensor_record;
    const auto record = [](std::string name, std::vector<std::int64_t> shape, std::vector<float> values) {
        const auto bytes = std::as_bytes(std::span<const float>(values));
        return tensor_record{std::move(name), weft::dtype::f32, std::move(shape),
                             std::vector<std::byte>(bytes.begin(), bytes.end())};
    };
    const std::vector<tensor_record> a{record("x", {3}, {1, 2, 3}), record("y", {1}, {4})};
    const std::vector<tensor_record> reordered{a[1], a[0]};
    const std::vector<tensor_record> other_value{record("x", {3}, {1, 2, 3.0001f}), record("y", {1}, {4})};
    const std::vector<tensor_record> other_name{record("x", {3}, {1, 2, 3}), record("z", {1}, {4})};
    const std::vector<tensor_record> other_shape{record("x", {1, 3}, {1, 2, 3}), record("y", {1}, {4})};
    const std::string fingerprint = weft::io::weights_fingerprint(a);
    CHECK(fingerprint.size() == 16);
    CHECK(weft::io::weights_fingerprint(reordered) == fingerprint);
    CHECK(weft::io::weights_fingerprint(other_value) != fingerprint);
    CHECK(weft::io::weights_fingerprint(other_name) != fingerprint);
    CHECK(weft::io::weights_fingerprint(other_shape) != fingerprint);
}
