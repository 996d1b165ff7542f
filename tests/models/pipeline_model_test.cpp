// The model policies model weft::models::pipeline_model, part by part; GPT-2's stages split
// over a tensor-parallel group and the MLP's do not; types missing a part are rejected by
// the part they miss.
#include "weft/models/pipeline_model.hpp"

#include <catch2/catch.hpp>

#include "weft/exec/cpu.hpp"
#include "weft/models/gpt.hpp"
#include "weft/models/mlp.hpp"

namespace {

struct types_only {
    using config = weft::nn::mlp_config;
    using batch = weft::data::classification_batch;
};

// The MLP with its loss taken away.
struct no_loss : weft::models::mlp {
    static void loss() {}
};

}  // namespace

TEST_CASE("gpt and mlp model the pipeline model concept, each part of it", "[models]") {
    using weft::exec::cpu;
    STATIC_REQUIRE(weft::models::pipeline_model<weft::models::gpt, cpu>);
    STATIC_REQUIRE(weft::models::pipeline_model<weft::models::mlp, cpu>);
    STATIC_REQUIRE(weft::models::pipeline_model<weft::models::mlp, weft::exec::cpu_backend<double>>);
    STATIC_REQUIRE(weft::models::runnable_stages<weft::models::gpt, cpu>);
    STATIC_REQUIRE(weft::models::tensor_parallel_stages<weft::models::gpt, cpu>);
    STATIC_REQUIRE_FALSE(weft::models::tensor_parallel_stages<weft::models::mlp, cpu>);
    CHECK(weft::models::gpt::tied_parameters({.num_layers = 2}).front().name == "wte.weight");
    CHECK(weft::models::mlp::tied_parameters({}).empty());
}

TEST_CASE("a type missing a part of the model interface fails that part", "[models]") {
    using weft::exec::cpu;
    STATIC_REQUIRE(weft::models::model_types<types_only>);
    STATIC_REQUIRE_FALSE(weft::models::partitioned_model<types_only, cpu>);
    STATIC_REQUIRE_FALSE(weft::models::pipeline_model<types_only, cpu>);
    STATIC_REQUIRE(weft::models::batched_model<no_loss, cpu>);
    STATIC_REQUIRE_FALSE(weft::models::model_loss<no_loss, cpu>);
    STATIC_REQUIRE_FALSE(weft::models::pipeline_model<no_loss, cpu>);
    STATIC_REQUIRE_FALSE(weft::models::model_types<int>);
}

TEST_CASE("a GPT description reads back as the config it describes", "[models][gpt]") {
    const weft::nn::gpt_config c{.num_layers = 3, .d_model = 48, .num_heads = 4, .vocab_size = 256, .seq_len = 32,
                                 .seed = 9};
    const auto read = weft::models::gpt::parse_description(weft::models::gpt::describe(c));
    CHECK(read.num_layers == 3);
    CHECK(read.d_model == 48);
    CHECK(read.num_heads == 4);
    CHECK(read.vocab_size == 256);
    CHECK(read.seq_len == 32);
    CHECK(weft::models::gpt::describe(read) == weft::models::gpt::describe(c));
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(weft::models::gpt::parse_description("mlp blocks=2"), Contains("it is not a GPT"));
    CHECK_THROWS_WITH(weft::models::gpt::parse_description("gpt layers=2 d_model=32 heads=2 vocab=256"),
                      Contains("no seq_len="));
    CHECK_THROWS_WITH(weft::models::gpt::parse_description("gpt layers=x d_model=32 heads=2 vocab=256 seq_len=8"),
                      Contains("a bad layers="));
    // Sizes the config refuses (heads must divide d_model) are refused here too.
    CHECK_THROWS(weft::models::gpt::parse_description("gpt layers=2 d_model=30 heads=4 vocab=256 seq_len=8"));
}
