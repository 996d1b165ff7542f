#include "weft/run/join_terms.hpp"

#include <catch2/catch.hpp>
#include <string>

namespace {

weft::nn::gpt_config small_gpt() {
    weft::nn::gpt_config model;
    model.num_layers = 2;
    model.d_model = 64;
    model.num_heads = 4;
    model.vocab_size = 256;
    model.seq_len = 32;
    return model;
}

}  // namespace

TEST_CASE("join terms: equal options agree, a differing one is named with both values", "[run][elastic]") {
    weft::run::settings run;
    run.steps = 300;
    run.lr = 1e-3;
    run.checkpoint_dir = "/shared/ckpt";
    const auto theirs = weft::run::make_join_terms(run, small_gpt());
    CHECK(theirs.difference(weft::run::make_join_terms(run, small_gpt())).empty());

    weft::run::settings fewer_steps = run;
    fewer_steps.steps = 40;
    CHECK(theirs.difference(weft::run::make_join_terms(fewer_steps, small_gpt())) ==
          "--steps 40 (the running job's: 300)");

    weft::run::settings other_lr = run;
    other_lr.lr = 3e-4;
    CHECK(theirs.difference(weft::run::make_join_terms(other_lr, small_gpt())) ==
          "--lr 0.0003 (the running job's: 0.001)");

    weft::run::settings other_directory = run;
    other_directory.checkpoint_dir = "/scratch/ckpt";
    CHECK(theirs.difference(weft::run::make_join_terms(other_directory, small_gpt())) ==
          "--checkpoint-dir /scratch/ckpt (the running job's: /shared/ckpt)");

    auto wider = small_gpt();
    wider.d_model = 128;
    CHECK(theirs.difference(weft::run::make_join_terms(run, wider)) == "--d-model 128 (the running job's: 64)");

    // Layout options are not terms: the joiners take the run's layout.
    weft::run::settings other_layout = run;
    other_layout.pp = 4;
    other_layout.dp = 2;
    other_layout.zero = 3;
    CHECK(theirs.difference(weft::run::make_join_terms(other_layout, small_gpt())).empty());
}

TEST_CASE("join terms of another model are not comparable", "[run][elastic]") {
    weft::run::settings run;
    weft::nn::mlp_config mlp;
    mlp.input_dim = 8;
    mlp.hidden_dim = 16;
    mlp.num_blocks = 2;
    mlp.num_classes = 4;
    CHECK(weft::run::make_join_terms(run, small_gpt()).difference(weft::run::make_join_terms(run, mlp)) ==
          "the options compared (a different program or version of weft)");
}
